#!/usr/bin/env bash
# Runs the whole test suite: the Rust workspace (cargo-nextest when
# installed, else cargo test; plus doctests) and the Python tests
# (python/tests) inside .venv. Run ./scripts/setup.sh once first.
# Extra arguments are passed to pytest (e.g. -k native -x).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=$ROOT/.venv
started=$SECONDS

step() { printf '==> %s\n' "$*"; }
die() {
    printf 'test: error: %s\n' "$*" >&2
    exit 1
}

[[ -x $VENV/bin/python ]] || die ".venv is missing: run ./scripts/setup.sh first"
export VIRTUAL_ENV=$VENV
export PATH=$VENV/bin:$PATH

# --- Rust ----------------------------------------------------------------------
# Every workspace crate but the Python extension, which maturin builds (its
# cdylib cannot link a test harness without libpython) and pytest tests.
# A failure here is reported at the end, after the Python tests also ran.
failed=()
crates=(--workspace --exclude tierlab-py)
if cargo nextest --version >/dev/null 2>&1; then
    step "cargo nextest run ${crates[*]}"
    cargo nextest run --no-fail-fast "${crates[@]}" || failed+=("cargo nextest")
    step "cargo test --doc ${crates[*]}"
    cargo test --doc "${crates[@]}" || failed+=("cargo doctests")
else
    step "cargo test ${crates[*]}"
    cargo test --no-fail-fast "${crates[@]}" || failed+=("cargo test")
fi

# --- Python --------------------------------------------------------------------
# Rebuild the extension when Rust sources changed since it was built, so
# pytest never tests stale code.
so=$(ls python/tierlab/_native*.so 2>/dev/null | head -n 1 || true)
[[ -n $so ]] || die "the tierlab extension is not built: run ./scripts/setup.sh first"
newer=$(find crates Cargo.toml Cargo.lock pyproject.toml \
    \( -name '*.rs' -o -name Cargo.toml -o -name Cargo.lock -o -name pyproject.toml \) \
    -newer "$so" -print -quit)
if [[ -n $newer ]]; then
    step "maturin develop --release (${newer#./} changed since the extension was built)"
    "$VENV/bin/maturin" develop --release --quiet >"$VENV/.maturin.log" 2>&1 || {
        cat "$VENV/.maturin.log" >&2
        die "maturin develop failed (log above)"
    }
fi

step "pytest (python/tests)"
set +e
"$VENV/bin/python" -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
    # pytest's "no tests collected" (e.g. a -k that matches nothing) is not a failure.
    echo "test: note: pytest collected no tests"
elif [[ $rc -ne 0 ]]; then
    failed+=("pytest")
fi

if ((${#failed[@]})); then
    die "failed: ${failed[*]} (after $((SECONDS - started)) s)"
fi
step "all tests passed in $((SECONDS - started)) s"
