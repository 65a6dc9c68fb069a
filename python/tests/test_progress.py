"""Progress reports: from the simulator's hook to Python callbacks, tqdm and
the CLI's stderr line; results do not depend on them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import tierlab

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "atsmf-src1_0.toml"
# CONFIG: 100 simulated minutes, 1.2 M IOs, over a second of wall time:
# several reports (one every ~0.1 s).


def test_callback_sees_monotonic_progress_and_results_do_not_change() -> None:
    seen: list[tierlab.SimProgress] = []
    with_cb = tierlab.simulate(CONFIG, progress=seen.append)
    without = tierlab.simulate(CONFIG)
    assert len(seen) >= 3
    assert with_cb.summary == without.summary
    assert with_cb.series.equals(without.series)
    # The total comes from the generator's duration in the config.
    assert all(p.simulated_s_total == 6000.0 for p in seen)
    for a, b in zip(seen, seen[1:]):
        assert a.host_ios <= b.host_ios and a.simulated_s <= b.simulated_s and a.events < b.events
    for p in seen:
        assert 0.0 <= p.fraction <= 1.0
        assert p.host_ios <= with_cb.summary["ios"]


def test_an_exception_in_the_callback_stops_the_run() -> None:
    class Stop(Exception):
        pass

    def stop(p: tierlab.SimProgress) -> None:
        raise Stop(p.host_ios)

    with pytest.raises(Stop):
        tierlab.simulate(CONFIG, progress=stop)
    with pytest.raises(TypeError, match="progress must be"):
        tierlab.simulate(CONFIG, progress=3)


def test_tqdm_bar(capsys: pytest.CaptureFixture[str]) -> None:
    with tierlab.TqdmProgress(desc="src1_0", delay=0) as bar:
        tierlab.simulate(CONFIG, progress=bar)
    err = capsys.readouterr().err
    # tqdm's line: description, the total in simulated seconds, rate.
    assert "src1_0" in err and "6.00k/6.00k" in err and "100%" in err and "sim s/s" in err


def test_cli_progress_line_on_stderr_and_quiet(tierlab_exe: str, tmp_path: Path) -> None:
    env = {**os.environ, "TIERLAB_PROGRESS": "always"}
    # 200 simulated minutes: about two seconds, longer than the line's 1 s delay.
    args = [tierlab_exe, "sim", str(CONFIG), "--set", "tenants.0.workload.params.duration_s=12000",
            "--out", str(tmp_path / "a")]
    shown = subprocess.run(args, capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "ETA" in shown.stderr and "IOs/s" in shown.stderr and "%" in shown.stderr
    assert "ETA" not in shown.stdout
    quiet = subprocess.run([*args[:-1], str(tmp_path / "b"), "--quiet"], capture_output=True, text=True, env=env)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert (tmp_path / "a" / "summary.json").read_bytes() == (tmp_path / "b" / "summary.json").read_bytes()
