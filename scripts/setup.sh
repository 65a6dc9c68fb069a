#!/usr/bin/env bash
# Sets up everything tierlab needs on a Debian machine with Rust and
# Python >= 3.11 + pip, then runs the main job (the demo) on data the project
# generates itself. Idempotent: a second run only checks and rebuilds what
# changed.
#
#   1. system packages, through apt-get when missing: fio (trace replay, and
#      its nbd engine); the NBD tools `tierlab serve` is tested against
#      (nbdkit, libnbd-bin: nbdinfo/nbdsh/nbdcopy/nbdfuse, python3-libnbd,
#      qemu-utils: qemu-io/qemu-img, fuse3); chromium (the HTML report test
#      renders reports headless; skipped with a note where the package does
#      not exist); python3-venv if this Python cannot create virtualenvs
#   2. .venv (python3 -m venv) with the Python dependencies of pyproject.toml
#      (numpy, pandas, matplotlib, tqdm) and its `dev` and `ray` extras
#      (maturin, pytest, ...; Ray for `tierlab sweep --ray`)
#   3. cargo build --release          -> target/release/tierlab
#   4. maturin develop --release      -> the `tierlab` package (and the same
#                                        `tierlab` command) inside .venv
#   5. tierlab demo --out out/demo   (the .venv command: also writes
#                                        out/demo/report.html)
#
# Needs the network only for the package registries (Debian, crates.io, PyPI).
# Environment: PYTHON (default python3) picks the interpreter for .venv.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=$ROOT/.venv
PYTHON=${PYTHON:-python3}
started=$SECONDS

step() { printf '==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
die() {
    printf 'setup: error: %s\n' "$*" >&2
    exit 1
}

# --- 0. what must already be there -----------------------------------------
command -v cargo >/dev/null 2>&1 ||
    die "cargo not found: install the Rust toolchain (rustup) and re-run"
command -v "$PYTHON" >/dev/null 2>&1 ||
    die "$PYTHON not found: install Python >= 3.11 with pip, or set PYTHON=/path/to/python3.11"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die "$("$PYTHON" --version 2>&1) is too old: tierlab needs Python >= 3.11 (set PYTHON=...)"

# --- 1. system packages ----------------------------------------------------
missing=()
command -v fio >/dev/null 2>&1 || missing+=(fio)
command -v nbdkit >/dev/null 2>&1 || missing+=(nbdkit)
command -v nbdinfo >/dev/null 2>&1 || missing+=(libnbd-bin)
[[ -e /usr/lib/python3/dist-packages/nbd.py ]] || missing+=(python3-libnbd)
command -v qemu-io >/dev/null 2>&1 || missing+=(qemu-utils)
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
if [[ ! -x $VENV/bin/python ]] && ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    pyver=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    missing+=("python$pyver-venv")
fi
if ((${#missing[@]})); then
    step "installing system packages: ${missing[*]}"
    command -v apt-get >/dev/null 2>&1 ||
        die "no apt-get here: install ${missing[*]} with this system's package manager and re-run"
    as_root=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install ${missing[*]} as root and re-run"
        # Without a terminal (CI) sudo must not wait for a password.
        if [[ -t 0 ]]; then as_root=(sudo); else as_root=(sudo -n); fi
    fi
    apt_install() {
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends "${missing[@]}"
    }
    # Refresh the package lists only when the install cannot find the packages.
    if ! apt_install >/dev/null 2>&1; then
        note "apt-get update (package lists missing or stale)"
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null ||
            die "apt-get update failed"
        apt_install >/dev/null || die "apt-get install ${missing[*]} failed"
    fi
else
    step "system packages: fio $(fio --version 2>/dev/null | sed 's/^fio-//'), nbdkit, libnbd, qemu-utils, fuse3 present"
fi
# Optional: Chromium renders the HTML reports in the tests (which skip with
# a message without it). Installed through apt-get where it can be; a
# system without it still sets up.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    as_root=()
    if [[ $(id -u) -ne 0 ]]; then
        if [[ -t 0 ]]; then as_root=(sudo); else as_root=(sudo -n); fi
    fi
    step "installing chromium (optional: renders the HTML reports in the tests)"
    chromium_install() {
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1
    }
    if ! chromium_install; then
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 || true
        chromium_install || note "chromium could not be installed: the report rendering test will skip"
    fi
fi

# --- 2. virtualenv and Python dependencies ---------------------------------
if [[ -x $VENV/bin/python ]] && ! "$VENV/bin/python" -c '' >/dev/null 2>&1; then
    note "removing a broken .venv (its Python no longer runs)"
    rm -rf "$VENV"
fi
if [[ ! -x $VENV/bin/python ]]; then
    step "creating .venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
export VIRTUAL_ENV=$VENV
export PATH=$VENV/bin:$PATH
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# The requirements are read from pyproject.toml, so they live in one place;
# pip runs again only when pyproject.toml changes (a stamp in .venv).
requirements=$("$VENV/bin/python" - <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
extras = project["optional-dependencies"]
print("\n".join(project["dependencies"] + extras["dev"] + extras["ray"]))
EOF
)
stamp=$VENV/.tierlab-requirements
if [[ ! -f $stamp ]] || [[ $(cat "$stamp") != "$requirements" ]]; then
    step "installing Python dependencies into .venv: $(echo $requirements)"
    mapfile -t reqs <<<"$requirements"
    "$VENV/bin/python" -m pip install -q "${reqs[@]}"
    printf '%s' "$requirements" >"$stamp"
else
    step "Python dependencies: up to date"
fi

# --- 3. the CLI --------------------------------------------------------------
step "cargo build --release (target/release/tierlab)"
cargo build --release --quiet

# --- 4. the Python package ---------------------------------------------------
step "maturin develop --release (the tierlab package and command in .venv)"
# maturin builds the extension into python/tierlab/ and installs the package
# in editable mode; pyproject.toml's dependencies are already satisfied.
"$VENV/bin/maturin" develop --release --quiet >"$VENV/.maturin.log" 2>&1 || {
    cat "$VENV/.maturin.log" >&2
    die "maturin develop failed (log above)"
}
"$VENV/bin/tierlab" --version >/dev/null ||
    die "the tierlab command in .venv does not run"
note "$("$VENV/bin/tierlab" --version) in .venv/bin; target/release/tierlab"

# --- 5. the main job ---------------------------------------------------------
step "tierlab demo --out out/demo"
# The .venv command: the same Rust CLI, plus the HTML report.
"$VENV/bin/tierlab" demo --out out/demo

step "setup done in $((SECONDS - started)) s. Activate with: source .venv/bin/activate"
