"""`tierlab bench --compare`: the comparison machinery, and the cache group
run for real against libCacheSim (miss ratios must agree exactly, which is
independent of how fast either side is)."""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

from tierlab import bench
from tierlab._cli import dispatch

ROOT = Path(__file__).resolve().parents[2]


def test_checks_judge_hand_made_cases() -> None:
    assert bench.Check("IOPS", "ratio_min", 0.9).verdict(90.0, 100.0) == "met"
    assert bench.Check("IOPS", "ratio_min", 0.9).verdict(89.9, 100.0) == "not met"
    assert bench.Check("CPU", "ratio_max", 1.2).verdict(12.0, 10.0) == "met"
    assert bench.Check("CPU", "ratio_max", 1.2).verdict(12.1, 10.0) == "not met"
    assert bench.Check("µs", "diff_max", 1.0).verdict(3.9, 3.0) == "met"
    assert bench.Check("µs", "diff_max", 1.0).verdict(4.1, 3.0) == "not met"
    assert bench.Check("miss ratio", "equal", 6).verdict(0.1234564, 0.1234561) == "met"
    assert bench.Check("miss ratio", "equal", 6).verdict(0.123457, 0.123456) == "not met"
    assert bench.Check("x", "info").verdict(1.0, 2.0) == ""


def test_alternating_rounds_and_medians() -> None:
    calls: list[str] = []
    values = iter([10.0, 1.0, 30.0, 2.0, 20.0, 3.0])

    def side(label: str):
        def run() -> dict[str, float]:
            calls.append(label)
            return {"v": next(values)}

        return run

    case = bench.Case("c", "t", "peer", side("tierlab"), side("peer"), [bench.Check("v", "ratio_min", 2.0)])
    (row,) = bench._run_case(case, 3, lambda s: None)
    # The order flips every round, so neither side always runs first.
    assert calls == ["tierlab", "peer", "peer", "tierlab", "tierlab", "peer"]
    # Round 2 ran the peer first: it took 30.0, tierlab 2.0.
    assert row["tierlab"] == statistics.median([10.0, 2.0, 20.0])
    assert row["peer"] == statistics.median([1.0, 30.0, 3.0])
    assert math.isclose(row["ratio"], 10.0 / 3.0)
    assert row["verdict"] == "met" and row["target"] == "≥ 2×"


def test_a_case_without_peer_reports_every_metric_without_ratio() -> None:
    values = iter([{"a": 1.0, "b": 10.0}, {"a": 3.0, "b": 30.0}, {"a": 2.0, "b": 20.0}])
    case = bench.Case("solo", "t", "", lambda: next(values), None, [])
    rows = bench._run_case(case, 3, lambda s: None)
    assert [(r["metric"], r["tierlab"]) for r in rows] == [("a", 2.0), ("b", 20.0)]
    assert all(math.isnan(r["peer"]) and math.isnan(r["ratio"]) and r["verdict"] == "" for r in rows)


def test_unknown_names_and_bad_rounds_are_refused(capsys) -> None:
    assert dispatch(["bench", "--compare", "--only", "lur"]) == 2
    err = capsys.readouterr().err
    assert "--only 'lur': not a benchmark group or case" in err and "pipeline, trace, real, cache, sim, serve" in err and "did you mean `lru`?" in err
    assert dispatch(["bench", "--compare", "--rounds", "0"]) == 2
    assert "--rounds: expected at least 1, found 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="rounds"):
        bench.compare(["cache"], rounds=0)


def test_only_picks_groups_and_case_prefixes() -> None:
    picked = bench._select(["lru-1pct", "real"])
    assert [(g.name, names) for g, names in picked] == [("real", None), ("cache", {"lru-1pct"})]
    assert [g.name for g, _ in bench._select(None)] == ["pipeline", "trace", "real", "cache", "sim", "serve", "apps", "disk"]
    # The issue-35 cases: by group, by case prefix.
    assert [(g.name, names) for g, names in bench._select(["apps", "disk-drain"])] == [("apps", None), ("disk", {"disk-drain"})]


def test_list_names_every_group(capsys) -> None:
    assert dispatch(["bench", "--compare", "--list"]) == 0
    out = capsys.readouterr().out
    for g in ("pipeline", "trace", "real", "cache", "sim", "serve", "apps", "disk"):
        assert f"\n{g}" in "\n" + out
    assert "cases: apps-*" in out and "cases: disk-*" in out


def test_the_native_binary_points_to_the_python_command() -> None:
    exe = ROOT / "target" / "release" / "tierlab"
    if not exe.exists():
        pytest.skip(f"{exe} not built (cargo build --release)")
    res = subprocess.run([exe, "bench", "--compare"], capture_output=True, text=True)
    assert res.returncode != 0
    assert "`tierlab bench --compare` is a command of the Python package" in res.stderr


def test_cache_group_agrees_with_libcachesim_on_misses(tmp_path) -> None:
    pytest.importorskip("libcachesim", reason="libcachesim is not installed (pip install 'tierlab[dev]')")
    df = bench.compare(["cache"], rounds=1, quick=True, dir=tmp_path, progress=False)
    assert set(df["case"]) == {"lru-1pct", "lru-10pct", "s3fifo-1pct", "s3fifo-10pct"}
    miss = df[df["metric"] == "misses"]
    assert len(miss) == 4
    for r in miss.itertuples():
        # Same stream, same capacity in pages: libCacheSim's LRU and
        # S3-FIFO and ours must miss exactly the same requests.
        assert r.verdict == "met", f"{r.case}: tierlab {r.tierlab} vs libCacheSim {r.peer}"
        assert r.tierlab == r.peer and r.tierlab > 0
    # The 10 % cache misses less than the 1 % one.
    by_case = dict(zip(miss["case"], miss["tierlab"]))
    assert by_case["lru-10pct"] < by_case["lru-1pct"]
    assert by_case["s3fifo-10pct"] < by_case["s3fifo-1pct"]
    speed = df[df["metric"] == "requests/s"]
    assert (speed["tierlab"] > 0).all() and (speed["peer"] > 0).all()
    table = bench.markdown(df)
    assert "| lru-1pct | misses |" in table


def test_a_group_whose_peer_is_missing_is_skipped_with_the_reason(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    df = bench.compare(["serve"], rounds=1, dir=tmp_path, progress=False)
    (row,) = df.itertuples()
    assert row.verdict == "skipped"
    assert "fio, nbdkit not found" in row.note
    assert "skipped: fio, nbdkit not found" in bench.markdown(df)


def test_the_disk_backed_groups_say_which_tools_they_miss(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    df = bench.compare(["apps", "disk"], rounds=1, dir=tmp_path, progress=False)
    rows = {r.case: r for r in df.itertuples()}
    assert set(rows) == {"apps", "disk"}
    assert all(r.verdict == "skipped" for r in rows.values())
    assert rows["apps"].note.startswith("nbdfuse, fusermount3, losetup, mkfs.ext4, mount, umount, dd, nbdkit not found")
    assert rows["disk"].note.startswith("fio, nbdkit, qemu-io not found")


def test_the_backing_files_must_not_be_on_tmpfs(monkeypatch) -> None:
    """The issue's backing device is the machine's disk: a tmpfs there
    would measure RAM, so the groups refuse it and say why."""
    if bench._fs_type("/dev/shm") != "tmpfs":
        pytest.skip("/dev/shm is not a tmpfs here")
    monkeypatch.setattr(bench, "_DISK_DIR", "/dev/shm")
    assert bench._disk_dirs_needs() == "/dev/shm is on tmpfs, not a disk (the backing files must be on the machine's disk)"


def test_p99_of_the_reads_completed_in_a_window(tmp_path) -> None:
    # fio's per-IO log with --log_unix_epoch: ms since the epoch, clat in ns.
    log = tmp_path / "lat_clat.1.log"
    lines = [f"{1000 + i}, {(i + 1) * 1000}, 0, 4096, 0" for i in range(300)]
    log.write_text("\n".join(lines) + "\n")
    # Completed from 1.100 s to 1.199 s: clat 101 .. 200 µs.
    lats = bench._clat_us(log, 1.100, 1.199)
    assert lats == [float(v) for v in range(101, 201)]
    # Nearest rank: the 99th of 100 values.
    assert bench._p99(lats) == 199.0
    with pytest.raises(RuntimeError, match="no IO completed"):
        bench._p99([])


def test_the_apps_group_leaves_no_loop_device_mount_or_file(tmp_path) -> None:
    """A run of an `apps` case (server, nbdfuse, loop device, page cache
    dropped, cold reads, nbdkit) undoes all of it: no loop device on a
    file of the run, nothing mounted from it, its directories in /dev/shm
    and the disk directory gone."""
    if (why := bench._apps_needs()) is not None:
        pytest.skip(f"the apps group cannot run here: {why}")

    def loops() -> str:
        return subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True).stdout

    def ours(text: str) -> list[str]:
        return [line for line in text.splitlines() if "tierlab-bench-" in line]

    before_dirs = {d: set(Path(d).glob("tierlab-bench-*")) for d in ("/dev/shm", bench._DISK_DIR)}
    df = bench.compare(["apps-coldread"], rounds=1, quick=True, dir=tmp_path, progress=False)
    assert "failed" not in set(df["verdict"]), df["note"].tolist()
    rows = {r.metric: r for r in df.itertuples()}
    assert rows["MiB/s"].verdict in ("met", "not met"), rows
    assert rows["MiB/s"].tierlab > 0 and rows["MiB/s"].peer > 0
    assert ours(loops()) == []
    assert ours(Path("/proc/mounts").read_text()) == []
    for d, before in before_dirs.items():
        assert set(Path(d).glob("tierlab-bench-*")) == before, d



def test_table_numbers_are_human() -> None:
    assert [bench._human(v) for v in (12.76e6, 225_564, 9_999, 3.375, 150.2, 2.6e9)] == [
        "12.76 M",
        "225.6 K",
        "9999",
        "3.38",
        "150",
        "2.6 G",
    ]


def test_the_real_group_leaves_nothing_in_dev_shm(tmp_path) -> None:
    if bench._real_needs() is not None:
        pytest.skip(f"the real group cannot run here: {bench._real_needs()}")
    before = set(Path("/dev/shm").glob("tierlab-bench-*"))
    df = bench.compare(["real-inline"], rounds=1, quick=True, dir=tmp_path, progress=False)
    (row,) = df.itertuples()
    assert row.case == "real-inline-qd1-read" and row.metric == "µs per IO"
    # Both sides did IO: a positive time per IO each.
    assert row.tierlab > 0 and row.peer > 0, row
    # The 1 GiB input file in /dev/shm is gone with its directory.
    assert set(Path("/dev/shm").glob("tierlab-bench-*")) == before


def test_the_pinned_case_runs_both_tools_on_one_cpu_and_unpins_after(tmp_path) -> None:
    """The pinned QD1 case confines tierlab's executor (and so its io_uring
    worker) and fio to one CPU, and this process's own affinity is as it
    was afterwards."""
    if bench._real_needs() is not None:
        pytest.skip(f"the real group cannot run here: {bench._real_needs()}")
    before = os.sched_getaffinity(0)
    df = bench.compare(["real-uring-qd1-read-pinned"], rounds=1, quick=True, dir=tmp_path, progress=False)
    assert os.sched_getaffinity(0) == before
    rows = {r.metric: r for r in df.itertuples()}
    assert set(rows) == {"µs per IO", "CPU µs per IO"}
    assert rows["µs per IO"].tierlab > 0 and rows["µs per IO"].peer > 0
