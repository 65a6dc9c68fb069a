"""`tierlab sweep`: the grid, resumability, results.csv against each
point's own summary.json, errors, and the same grid on a local Ray cluster
giving a byte-identical results.csv."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from tierlab.sweep import SweepError, load_sweep, run_sweep

REPO = Path(__file__).resolve().parents[2]


def sweep_file(tmp: Path, trace: Path | None = None) -> Path:
    """2 speeds x 2 seeds (x 1 trace) on the NVMe config, 20k IOs a point."""
    configs = tmp / "configs"
    configs.mkdir(exist_ok=True)
    shutil.copy(REPO / "configs" / "nvme-zipf.toml", configs / "nvme.toml")
    traces = f'traces = ["{trace.name}"]\n' if trace else ""
    path = tmp / "sweep.toml"
    path.write_text(
        '[sweep]\nconfigs = ["configs/nvme.toml"]\n'
        + traces
        + 'set = ["tenants.0.workload.params.count=20000", "output.timeline=false"]\n\n'
        '[parameters]\n"tenants.0.driver.speed" = [1.0, 4.0]\nseed = [1, 2]\n'
    )
    return path


def test_grid_results_and_resume(tmp_path: Path) -> None:
    spec = sweep_file(tmp_path)
    out = tmp_path / "out"
    frame = run_sweep(spec, out, jobs=2, quiet=True)
    assert len(frame) == 4
    assert list(frame["point"]) == [0, 1, 2, 3]
    assert list(frame["tenants.0.driver.speed"]) == [1.0, 1.0, 4.0, 4.0]
    assert list(frame["seed"]) == [1, 2, 1, 2]
    on_disk = pd.read_csv(out / "results.csv")
    pd.testing.assert_frame_equal(on_disk, frame)
    # Each row holds its point's own summary.json numbers.
    for row in frame.itertuples(index=False):
        pdir = out / "points" / row.point_id
        summary = json.loads((pdir / "summary.json").read_text())
        assert row.ios == summary["ios"] == 20000
        assert row.p99_latency_us == summary["p99_latency_us"]
        assert json.loads((pdir / "point.json").read_text())["overrides"][-1] == f"seed={row.seed}"
    # Same seed, same point: a second run of a point is byte-identical (see
    # below); speed 4 replays 4x faster: IOPS x4.
    iops = frame.groupby("tenants.0.driver.speed")["iops"].mean()
    assert iops[4.0] == pytest.approx(4 * iops[1.0], rel=0.02)

    # Resume: delete one point's marker; only that point runs again.
    victim = out / "points" / frame.point_id[2]
    (victim / "done.json").unlink()
    before = {p: (out / "points" / p / "summary.json").stat().st_mtime_ns for p in frame.point_id}
    time.sleep(0.01)
    again = run_sweep(spec, out, jobs=2, quiet=True)
    after = {p: (out / "points" / p / "summary.json").stat().st_mtime_ns for p in frame.point_id}
    assert [p for p in before if before[p] != after[p]] == [frame.point_id[2]]
    pd.testing.assert_frame_equal(again, frame)


def test_traces_are_a_grid_axis(tmp_path: Path) -> None:
    import tierlab

    trace = tmp_path / "w.tlt"
    tierlab.generate_to(trace, "uniform", seed=3, count=5000, rate_iops=2000)
    spec = sweep_file(tmp_path, trace)
    frame = run_sweep(spec, tmp_path / "out", jobs=1, quiet=True)
    assert list(frame["trace"]) == ["w.tlt"] * 4
    # The trace replaced the generator: every point replays its 5000 records.
    assert set(frame["ios"]) == {5000}


def test_bad_sweep_files_say_where_and_what(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    cases = [
        ("[sweep]\nconfig = ['x']\n", "unknown key(s) ['config']"),
        ("[sweep]\nconfigs = ['missing.toml']\n", "configs[0]: "),
        ("[sweep]\nconfigs = []\n", "`configs` must be a non-empty list"),
        ("[sweep]\nconfigs = ['c.toml']\n[parameters]\nseed = 3\n", "`seed` must be a non-empty list"),
        ("[sweep]\nconfigs = ['c.toml']\ntraces = ['nope.csv']\n", "traces[0]"),
        ("[sweep\n", "not valid TOML"),
    ]
    (tmp_path / "c.toml").write_text("seed = 1\n")
    for text, message in cases:
        spec.write_text(text)
        with pytest.raises(SweepError) as e:
            load_sweep(spec)
        assert message in str(e.value) and str(spec) in str(e.value)


def test_failed_points_are_reported_and_the_rest_kept(tierlab_exe: str, tmp_path: Path) -> None:
    spec = sweep_file(tmp_path)
    spec.write_text(spec.read_text().replace('seed = [1, 2]', 'seed = [1, 2]\n"tenants.0.driver.iodepth" = [4]'))
    p = subprocess.run([tierlab_exe, "sweep", str(spec), "--out", str(tmp_path / "o"), "-q"],
                       capture_output=True, text=True)
    assert p.returncode == 1
    assert "4 point(s) failed" in p.stderr and "unknown field `iodepth`" in p.stderr
    errors = sorted((tmp_path / "o" / "points").glob("*/error.txt"))
    assert len(errors) == 4 and "tenants[0].driver" in errors[0].read_text()
    assert not list((tmp_path / "o" / "points").glob("*/done.json"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_local_and_ray_give_identical_results(tierlab_exe: str, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'tierlab[ray]'); the Ray sweep test is skipped")
    ray_exe = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_exe is None:
        pytest.skip("the `ray` command is not next to this Python")
    spec = sweep_file(tmp_path)
    local = subprocess.run([tierlab_exe, "sweep", str(spec), "--out", str(tmp_path / "local"), "-q"],
                           capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    # A one-node Ray cluster started here, on a free port, stopped at the end.
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    # Ray's socket paths must stay under 108 bytes: a short temp dir.
    ray_tmp = tempfile.mkdtemp(prefix="tlray-", dir="/tmp")
    head = subprocess.Popen(
        [ray_exe, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
         f"--temp-dir={ray_tmp}"],  # fmt: skip
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert head.poll() is None, head.stdout.read()
            assert time.monotonic() < deadline, "the Ray head did not start in 120 s"
            time.sleep(0.5)
        started = time.monotonic()
        on_ray = subprocess.run(
            [tierlab_exe, "sweep", str(spec), "--out", str(tmp_path / "ray-out"), "--ray", address, "-q"],
            capture_output=True, text=True, env=env, timeout=600,
        )
        assert on_ray.returncode == 0, on_ray.stderr
        print(f"Ray sweep: {time.monotonic() - started:.1f} s")
    finally:
        # `ray start --block` stops the processes it started when signalled.
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGTERM)
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    a = (tmp_path / "local" / "results.csv").read_bytes()
    b = (tmp_path / "ray-out" / "results.csv").read_bytes()
    assert a == b
    assert len(pd.read_csv(tmp_path / "local" / "results.csv")) == 4
    # And every point's files too.
    for pdir in (tmp_path / "local" / "points").iterdir():
        for f in ("summary.json", "series.csv", "latency_cdf.csv"):
            assert (pdir / f).read_bytes() == (tmp_path / "ray-out" / "points" / pdir.name / f).read_bytes()
