"""`tierlab sweep`: the grid, resumability, results.csv against each
point's own summary.json, errors, Ctrl-C, and the same grid on a local Ray
cluster giving a byte-identical results.csv, the same error messages and,
with -q, no Ray log lines."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tierlab.sweep import SweepError, load_sweep, run_sweep

REPO = Path(__file__).resolve().parents[2]


def sweep_file(tmp: Path, trace: Path | None = None, count: int = 20000, seeds: int = 2) -> Path:
    """2 speeds x 2 seeds (x 1 trace) on the NVMe config, 20k IOs a point."""
    configs = tmp / "configs"
    configs.mkdir(exist_ok=True)
    shutil.copy(REPO / "configs" / "nvme-zipf.toml", configs / "nvme.toml")
    traces = f'traces = ["{trace.name}"]\n' if trace else ""
    path = tmp / "sweep.toml"
    path.write_text(
        '[sweep]\nconfigs = ["configs/nvme.toml"]\n'
        + traces
        + f'set = ["tenants.0.workload.params.count={count}", "output.timeline=false"]\n\n'
        '[parameters]\n"tenants.0.driver.speed" = [1.0, 4.0]\n'
        f"seed = {list(range(1, seeds + 1))}\n"
    )
    return path


def with_bad_key(spec: Path) -> Path:
    """Every point fails: the NVMe driver has no `iodepth`."""
    spec.write_text(spec.read_text().replace("seed = [1, 2]", 'seed = [1, 2]\n"tenants.0.driver.iodepth" = [4]'))
    return spec


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
    spec = with_bad_key(sweep_file(tmp_path))
    p = subprocess.run([tierlab_exe, "sweep", str(spec), "--out", str(tmp_path / "o"), "-q"],
                       capture_output=True, text=True)
    assert p.returncode == 1
    assert "4 point(s) failed" in p.stderr and "unknown field `iodepth`" in p.stderr
    errors = sorted((tmp_path / "o" / "points").glob("*/error.txt"))
    assert len(errors) == 4 and "tenants[0].driver" in errors[0].read_text()
    assert not list((tmp_path / "o" / "points").glob("*/done.json"))


def test_ctrl_c_keeps_finished_points_and_resumes(tierlab_exe: str, tmp_path: Path) -> None:
    # 8 points of 1M IOs (about 0.5 s each here) on 2 processes: Ctrl-C
    # lands after the first point and well before the last.
    spec = sweep_file(tmp_path, count=1_000_000, seeds=4)
    out = tmp_path / "out"
    command = [tierlab_exe, "sweep", str(spec), "--out", str(out), "--jobs", "2"]
    temp = tmp_path / "temp"  # the run's temporary folders
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("points/*/done.json")):
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "no point finished in 120 s"
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        try:  # the sweep and its workers, should any be left
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert p.returncode == 130, stderr
    assert stdout == "", stdout
    hint = re.search(
        rf"(?m)^tierlab sweep: interrupted; (\d+) of 8 points done \(kept in {re.escape(str(out / 'points'))}\); "
        r"re-run the same command to resume$",
        stderr,
    )
    assert hint, stderr
    assert stderr.endswith(hint.group(0) + "\n") and "Traceback" not in stderr
    done = sorted(d.parent.name for d in out.glob("points/*/done.json"))
    assert int(hint.group(1)) == len(done) and 1 <= len(done) < 8, (stderr, done)
    # results.csv holds the finished points; the workers, ended mid-point,
    # left no temporary folder.
    assert sorted(pd.read_csv(out / "results.csv")["point_id"]) == done
    assert not list(temp.iterdir())

    before = {pid: (out / "points" / pid / "summary.json").stat().st_mtime_ns for pid in done}
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"8 points ({len(done)} already done), {8 - len(done)} to run" in again.stderr
    assert {pid: (out / "points" / pid / "summary.json").stat().st_mtime_ns for pid in done} == before
    assert len(pd.read_csv(out / "results.csv")) == 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_env() -> Iterator[dict[str, str]]:
    """The environment of the Ray runs (skips without Ray). Ray's files go
    to a temporary folder removed at the end, short because Ray's socket
    paths must stay under 108 bytes. Token authentication is off for the
    head and the sweeps alike: Ray (2.60 here) turns it on for `ray start`
    when ~/.ray/auth_token exists (any earlier local `ray.init()` writes
    one) but not for a driver given an address."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'tierlab[ray]'); the Ray sweep test is skipped")
    ray_tmp = tempfile.mkdtemp(prefix="tlray-", dir="/tmp")
    yield {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_tmp}
    shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head(ray_env: dict[str, str]) -> Iterator[str]:
    """A one-node Ray cluster started once for this module's Ray tests, on
    a free port, stopped at the end; its address."""
    ray_exe = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_exe is None:
        pytest.skip("the `ray` command is not next to this Python")
    port = free_port()
    head = subprocess.Popen(
        [ray_exe, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
         f"--temp-dir={ray_env['RAY_TMPDIR']}/head"],  # fmt: skip
        env=ray_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert head.poll() is None, head.stdout.read()
            assert time.monotonic() < deadline, "the Ray head did not start in 120 s"
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        # `ray start --block` stops the processes it started when signalled
        # (~3 s; signalling them all as a group takes ~30 s); then any
        # survivor of its process group is killed.
        if head.poll() is None:
            head.send_signal(signal.SIGTERM)
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# What Ray writes on the driver when it logs: `2025-01-01 10:00:00,123\tINFO
# worker.py:...`, worker lines forwarded as `(raylet)` / `(run_point pid=1)`.
RAY_LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(DEBUG|INFO|WARNING)\b|\((raylet|run_point)\b)"
    r"|Started a local Ray instance|Connect(ed|ing) to (existing )?Ray cluster"
)


def assert_no_ray_lines(p: subprocess.CompletedProcess[str]) -> None:
    for line in (p.stdout + p.stderr).splitlines():
        assert not RAY_LOG_LINE.search(line), f"a Ray log line in a quiet sweep: {line!r}\n{p.stderr}"


def test_local_and_ray_give_identical_results(
    tierlab_exe: str, tmp_path: Path, ray_env: dict[str, str], ray_head: str
) -> None:
    spec = sweep_file(tmp_path)
    local = subprocess.run([tierlab_exe, "sweep", str(spec), "--out", str(tmp_path / "local"), "-q"],
                           capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    started = time.monotonic()
    on_ray = subprocess.run(
        [tierlab_exe, "sweep", str(spec), "--out", str(tmp_path / "ray-out"), "--ray", ray_head, "-q"],
        capture_output=True, text=True, env=ray_env, timeout=600,
    )
    assert on_ray.returncode == 0, on_ray.stderr
    print(f"Ray sweep: {time.monotonic() - started:.1f} s")
    # -q: not even Ray's "Connected to Ray cluster".
    assert_no_ray_lines(on_ray)
    a = (tmp_path / "local" / "results.csv").read_bytes()
    b = (tmp_path / "ray-out" / "results.csv").read_bytes()
    assert a == b
    assert len(pd.read_csv(tmp_path / "local" / "results.csv")) == 4
    # And every point's files too.
    for pdir in (tmp_path / "local" / "points").iterdir():
        for f in ("summary.json", "series.csv", "latency_cdf.csv"):
            assert (pdir / f).read_bytes() == (tmp_path / "ray-out" / "points" / pdir.name / f).read_bytes()


def test_a_point_failing_on_ray_reports_its_cause(
    tierlab_exe: str, tmp_path: Path, ray_env: dict[str, str], ray_head: str
) -> None:
    # Ray's own text for it is a coloured `ray::run_point() (pid=..., ip=...)`
    # header and the worker's traceback; the summary and error.txt give the
    # cause, exactly as a local run does.
    spec = with_bad_key(sweep_file(tmp_path))
    runs = {}
    for name, extra in (("local", []), ("ray", ["--ray", ray_head])):
        runs[name] = subprocess.run(
            [tierlab_exe, "sweep", str(spec), "--out", str(tmp_path / name), "-q", *extra],
            capture_output=True, text=True, env=ray_env, timeout=600,
        )
    on_ray = runs["ray"]
    assert on_ray.returncode == 1, on_ray.stderr
    assert "4 point(s) failed" in on_ray.stderr and "unknown field `iodepth`" in on_ray.stderr
    assert "ray::" not in on_ray.stderr and "\x1b" not in on_ray.stderr, on_ray.stderr
    assert on_ray.stderr.replace(str(tmp_path / "ray"), "DIR") == runs["local"].stderr.replace(
        str(tmp_path / "local"), "DIR"
    )
    for error in (tmp_path / "local" / "points").glob("*/error.txt"):
        text = (tmp_path / "ray" / "points" / error.parent.name / "error.txt").read_text()
        assert text == error.read_text() and text.startswith(str(tmp_path / "configs" / "nvme.toml")), text
    assert_no_ray_lines(on_ray)


def test_quiet_ray_local_prints_nothing(tierlab_exe: str, tmp_path: Path, ray_env: dict[str, str]) -> None:
    # `--ray local` starts (and stops) its own instance, even with the
    # module's cluster running; -q silences its start-up lines.
    spec = sweep_file(tmp_path)
    spec.write_text(spec.read_text().replace("[1.0, 4.0]", "[1.0]").replace("seed = [1, 2]", "seed = [1]"))
    p = subprocess.run(
        [tierlab_exe, "sweep", str(spec), "--out", str(tmp_path / "o"), "--ray", "local", "-q"],
        capture_output=True, text=True, env=ray_env, timeout=600,
    )
    assert p.returncode == 0, p.stderr
    assert_no_ray_lines(p)
    assert p.stdout == "", p.stdout
    assert len(pd.read_csv(tmp_path / "o" / "results.csv")) == 1
