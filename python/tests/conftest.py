"""Shared fixtures: where the real traces are, and the installed CLI."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# ../shared/traces next to the repository (present on developer machines and
# in CI, absent from a user's clone); TIERLAB_SHARED_TRACES overrides it.
SHARED_TRACES = Path(
    os.environ.get("TIERLAB_SHARED_TRACES", REPO.parent / "shared" / "traces")
).resolve()


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The folder of real traces; tests using it skip when it is absent."""
    if not (SHARED_TRACES / "README.md").is_file():
        pytest.skip(
            f"real traces not found at {SHARED_TRACES} (../shared/traces is not part of the "
            "repository; set TIERLAB_SHARED_TRACES to use another folder)"
        )
    return SHARED_TRACES


@pytest.fixture(scope="session")
def tierlab_exe() -> str:
    """The `tierlab` console script installed next to this Python (the venv)."""
    exe = shutil.which("tierlab", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail(
            f"no `tierlab` command next to {sys.executable}: the package is not installed "
            "in this environment (run ./scripts/setup.sh)"
        )
    return exe


@pytest.fixture(scope="session")
def atsmf_quick(tmp_path_factory: pytest.TempPathFactory):
    """`reproduce("atsmf", quick=True, only="src1_0")` once per session
    (about 10 s): shared by the report, plot and API tests."""
    import tierlab

    out = tmp_path_factory.mktemp("atsmf-quick")
    return tierlab.reproduce("atsmf", quick=True, only="src1_0", out=out)


@pytest.fixture(scope="session")
def raid_quick(tmp_path_factory: pytest.TempPathFactory):
    """`reproduce("raid", quick=True, report=True)` once per session (seconds)."""
    import tierlab

    return tierlab.reproduce("raid", quick=True, out=tmp_path_factory.mktemp("raid") / "raid", report=True)


@pytest.fixture(scope="session")
def qos_quick(tmp_path_factory: pytest.TempPathFactory):
    """`reproduce("qos", quick=True, report=True)` once per session (~20 s)."""
    import tierlab

    return tierlab.reproduce("qos", quick=True, out=tmp_path_factory.mktemp("qos") / "qos", report=True)
