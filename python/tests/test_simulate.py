"""tierlab.simulate: results checked against the config (workload counts),
against each other (series vs totals, VCD busy time vs io_ticks), against
the `tierlab sim` CLI (byte-identical files, identical error messages), and
the VCD timeline read back with an independent reader (vcdvcd)."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import tierlab
from tierlab import _native

from conftest import REPO

CONFIGS = REPO / "configs"
NVME_ZIPF = CONFIGS / "nvme-zipf.toml"

# The state codes docs/metrics.md documents for timeline.vcd.
DOCUMENTED_STATES = {
    0: "IDLE",
    1: "READ",
    2: "WRITE",
    3: "SEEK",
    4: "ERASE",
    5: "GC",
    6: "FAILED",
}


def load_toml(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def generator_count(config: dict[str, Any], tenant: int = 0) -> int:
    return int(config["tenants"][tenant]["workload"]["params"]["count"])


@pytest.fixture(scope="module")
def zipf() -> tierlab.SimResult:
    return tierlab.simulate(NVME_ZIPF)


# --- totals, series, CDF ---------------------------------------------------


def test_ios_equal_the_workload_count(zipf: tierlab.SimResult) -> None:
    count = generator_count(load_toml(NVME_ZIPF))
    s = zipf.summary
    assert s["ios"] == count
    assert s["read_ios"] + s["write_ios"] + s["trim_ios"] + s["flush_ios"] == count
    assert s["run"]["tenants"][0]["issued_ios"] == count
    assert s["run"]["host_ios_unfinished"] == 0
    # Passthrough onto one device: every host IO is one device IO.
    assert list(zipf.devices["name"]) == ["nvme"]
    assert zipf.devices.loc[0, "ios"] == count
    assert zipf.tenants.loc[0, "ios"] == count
    assert zipf.ops.set_index("name").loc[["read", "write"], "ios"].sum() == count
    assert s["contract_violations"] == 0


def test_series_add_up_to_the_totals(zipf: tierlab.SimResult) -> None:
    s = zipf.summary
    series = zipf.series
    host = series[series["scope"] == "all"]
    assert len(host) == s["intervals"] > 1
    # Intervals tile [start_ns, end_ns] without gaps.
    assert host["start_ns"].iloc[0] == s["start_ns"]
    assert host["end_ns"].iloc[-1] == s["end_ns"]
    assert (host["start_ns"].to_numpy()[1:] == host["end_ns"].to_numpy()[:-1]).all()
    assert int(host["ios"].sum()) == s["ios"]
    assert int(host["bytes"].sum()) == s["bytes"]
    # IOPS × interval length adds back up to the IO count (IOPS has 3 decimals).
    seconds = (host["end_ns"] - host["start_ns"]).astype(float) / 1e9
    assert (host["iops"] * seconds).sum() == pytest.approx(s["ios"], abs=1e-3 * len(host))
    assert (host["mb_per_s"] * seconds).sum() * 1e6 == pytest.approx(s["bytes"], rel=1e-6)
    # The device rows add up to the device totals.
    dev = series[series["scope"] == "device:nvme"]
    d = zipf.devices.iloc[0]
    assert len(dev) == len(host)
    assert int(dev["ios"].sum()) == d["ios"]
    assert int(dev["io_ticks_ns"].sum()) == d["io_ticks_ns"]
    assert int(dev["time_in_queue_ns"].sum()) == d["time_in_queue_ns"]
    assert host["io_ticks_ns"].isna().all()
    assert dev["p99_latency_us"].isna().all()
    assert ((dev["util_percent"] >= 0) & (dev["util_percent"] <= 100)).all()


def test_cdf_is_monotone_and_ends_at_one(zipf: tierlab.SimResult) -> None:
    cdf = zipf.cdf
    assert list(cdf.columns) == ["scope", "latency_us", "cumulative_fraction"]
    scopes = list(dict.fromkeys(cdf["scope"]))
    assert scopes[0] == "all"
    assert {"all", "op:read", "op:write", "device:nvme"} <= set(scopes)
    for scope, group in cdf.groupby("scope", sort=False):
        lat = group["latency_us"].to_numpy()
        frac = group["cumulative_fraction"].to_numpy()
        assert (lat[1:] > lat[:-1]).all(), scope
        assert (frac[1:] >= frac[:-1]).all(), scope
        assert frac[0] > 0, scope
        assert frac[-1] == 1.0, scope
    # The percentiles in the summary sit on the CDF: p99 is the first point
    # at which at least 99 % of the IOs are done, and max is the last point.
    s = zipf.summary
    host = cdf[cdf["scope"] == "all"]
    assert host[host["cumulative_fraction"] >= 0.99]["latency_us"].iloc[0] == s["p99_latency_us"]
    assert host[host["latency_us"] < s["p99_latency_us"]]["cumulative_fraction"].max() < 0.99
    assert host["latency_us"].iloc[-1] == s["max_latency_us"]


def test_same_run_twice_is_identical(zipf: tierlab.SimResult) -> None:
    again = tierlab.simulate(NVME_ZIPF)
    assert again.summary == zipf.summary
    pd.testing.assert_frame_equal(again.series, zipf.series)
    pd.testing.assert_frame_equal(again.cdf, zipf.cdf)
    assert again.vcd == zipf.vcd


def test_text_dict_and_path_configs_agree(zipf: tierlab.SimResult) -> None:
    text = NVME_ZIPF.read_text()
    assert "\n" in text
    for result in (
        tierlab.simulate(text),
        tierlab.simulate(load_toml(NVME_ZIPF)),
        tierlab.simulate(str(NVME_ZIPF)),
    ):
        assert result.summary == zipf.summary
        pd.testing.assert_frame_equal(result.series, zipf.series)
        assert result.vcd == zipf.vcd


# --- overrides ---------------------------------------------------------------


def test_seed_override_changes_the_results(zipf: tierlab.SimResult) -> None:
    other = tierlab.simulate(NVME_ZIPF, set=["seed=2"])
    assert other.summary["run"]["seed"] == 2
    assert other.summary["ios"] == zipf.summary["ios"]
    strip = {k: v for k, v in zipf.summary.items() if k != "run"}
    other_strip = {k: v for k, v in other.summary.items() if k != "run"}
    assert other_strip != strip
    assert other.vcd != zipf.vcd
    # Dict form: the same override, the same run.
    assert tierlab.simulate(NVME_ZIPF, set={"seed": 2}).summary == other.summary


@pytest.mark.parametrize("count", [1, 777, 5000])
def test_count_override_gives_that_many_ios(count: int) -> None:
    for overrides in (
        [f"tenants.0.workload.params.count={count}"],
        {"tenants.0.workload.params.count": count},
    ):
        r = tierlab.simulate(NVME_ZIPF, set=overrides)
        assert r.summary["ios"] == count
        assert int(r.series[r.series["scope"] == "all"]["ios"].sum()) == count
        assert r.devices.loc[0, "ios"] == count


def test_dict_override_values_are_typed() -> None:
    # A str value stays a string, a bool a boolean, a float a float.
    r = tierlab.simulate(
        NVME_ZIPF,
        set={
            "devices.0.name": "123",
            "output.timeline": False,
            "output.interval_s": 0.25,
            "tenants.0.workload.params.count": 1000,
        },
    )
    assert list(r.devices["name"]) == ["123"]
    assert r.vcd is None
    assert r.summary["interval_ns"] == 250_000_000
    with pytest.raises(TypeError, match="not a str, bool, int, float, dict"):
        tierlab.simulate(NVME_ZIPF, set={"seed": object()})


def test_dict_override_replaces_a_whole_table() -> None:
    # Switching the driver's mode takes the whole table (the open driver's
    # keys would not fit the closed one); a dict is a TOML inline table.
    closed = tierlab.simulate(
        NVME_ZIPF,
        set={"tenants.0.driver": {"mode": "closed", "iodepth": 4, "ios": 500}},
    )
    assert int(closed.summary["ios"]) == 500
    cli_form = tierlab.simulate(
        NVME_ZIPF, set=["tenants.0.driver={ mode = \"closed\", iodepth = 4, ios = 500 }"]
    )
    assert cli_form.summary == closed.summary
    # Setting only the mode names the cause and the way out.
    with pytest.raises(tierlab.ConfigError, match="switched the mode"):
        tierlab.simulate(NVME_ZIPF, set={"tenants.0.driver.mode": "closed"})
    with pytest.raises(TypeError, match="single string"):
        tierlab.simulate(NVME_ZIPF, set="seed=2")  # type: ignore[arg-type]


# --- errors ------------------------------------------------------------------


def test_unknown_key_raises_config_error_naming_it() -> None:
    text = NVME_ZIPF.read_text().replace('mode = "open"', 'mode = "open", sped = 2.0')
    where = r"<config text>: key `tenants\[0\]\.driver`: unknown field `sped`"
    with pytest.raises(tierlab.ConfigError, match=where) as e:
        tierlab.simulate(text)
    assert isinstance(e.value, ValueError)
    assert "speed" in str(e.value)  # what is allowed

    config = load_toml(NVME_ZIPF)
    config["bogus"] = 1
    with pytest.raises(tierlab.ConfigError, match="<config dict>: .*bogus"):
        tierlab.simulate(config)
    with pytest.raises(tierlab.ConfigError, match="iodepht"):
        tierlab.simulate(
            NVME_ZIPF,
            set={"tenants.0.driver.mode": "closed", "tenants.0.driver.iodepht": 4},
        )


def test_bad_values_name_the_value_and_what_is_allowed() -> None:
    with pytest.raises(tierlab.ConfigError, match="sideways") as e:
        tierlab.simulate(NVME_ZIPF, set=["tenants.0.driver.mode=sideways"])
    assert "open" in str(e.value) and "closed" in str(e.value)
    with pytest.raises(tierlab.ConfigError, match=r"tenants\[0\]\.driver\.speed.*-1"):
        tierlab.simulate(NVME_ZIPF, set=["tenants.0.driver.speed=-1"])
    with pytest.raises(tierlab.ConfigError, match="index 5 is out of range"):
        tierlab.simulate(NVME_ZIPF, set=["tenants.5.iops_cap=1"])
    with pytest.raises(tierlab.ConfigError, match="KEY=VALUE"):
        tierlab.simulate(NVME_ZIPF, set=["seed"])
    with pytest.raises(tierlab.ConfigError, match=r"<config dict>: key `devices\[0\]\.x`: None"):
        tierlab.simulate({"devices": [{"x": None}], "tenants": []})
    with pytest.raises(tierlab.ConfigError, match=r"<config text>: "):
        tierlab.simulate("seed = [\n")


def test_missing_config_file_is_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        tierlab.simulate(missing)
    with pytest.raises(FileNotFoundError):
        tierlab.simulate(str(missing))
    with pytest.raises(TypeError):
        tierlab.simulate(42)  # type: ignore[arg-type]


def test_config_error_message_is_the_clis(tmp_path: Path, tierlab_exe: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(NVME_ZIPF.read_text().replace("seed = 1", "seed = 1\nbogus_key = 3"))
    p = subprocess.run(
        [tierlab_exe, "sim", str(bad), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 1
    with pytest.raises(tierlab.ConfigError) as e:
        tierlab.simulate(str(bad))
    assert "bogus_key" in str(e.value)
    assert p.stderr.strip() == f"tierlab: error: {e.value}".strip()

    p = subprocess.run(
        [tierlab_exe, "sim", str(NVME_ZIPF), "--set", "tenants.0.driver.speed=0"]
        + ["--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    with pytest.raises(tierlab.ConfigError) as e:
        tierlab.simulate(str(NVME_ZIPF), set=["tenants.0.driver.speed=0"])
    assert p.stderr.strip() == f"tierlab: error: {e.value}".strip()


# --- files: the same as the CLI's --------------------------------------------


def test_out_writes_the_same_files_as_the_cli(
    zipf: tierlab.SimResult, tmp_path: Path, tierlab_exe: str
) -> None:
    cli_dir, py_dir = tmp_path / "cli", tmp_path / "py" / "nested"
    p = subprocess.run(
        [tierlab_exe, "sim", str(NVME_ZIPF), "--out", str(cli_dir)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stderr
    r = tierlab.simulate(NVME_ZIPF, out=py_dir)
    names = sorted(f.name for f in cli_dir.iterdir())
    assert names == ["latency_cdf.csv", "series.csv", "summary.json", "timeline.vcd"]
    assert sorted(f.name for f in py_dir.iterdir()) == names
    for name in names:
        assert (py_dir / name).read_bytes() == (cli_dir / name).read_bytes(), name
    # The in-memory results are those files.
    assert r.summary == json.loads((cli_dir / "summary.json").read_text())
    assert r.summary == zipf.summary
    assert r.vcd == (cli_dir / "timeline.vcd").read_text()
    pd.testing.assert_frame_equal(
        r.series, pd.read_csv(cli_dir / "series.csv"), check_dtype=False
    )
    pd.testing.assert_frame_equal(
        r.cdf, pd.read_csv(cli_dir / "latency_cdf.csv"), check_dtype=False
    )


def test_out_that_cannot_be_written_is_an_os_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError, match=re.escape(str(blocker))):
        tierlab.simulate(NVME_ZIPF, set={"tenants.0.workload.params.count": 10}, out=blocker)


def test_relative_trace_paths_resolve_against_base_dir(tmp_path: Path) -> None:
    trace = tmp_path / "w.tlt"
    tierlab.generate_to(trace, "uniform", seed=3, count=321, region_size_bytes="1GiB")
    text = """
[[devices]]
name = "nvme"
model = "ssd"
preset = "intel-p3700"

[[tenants]]
name = "replay"
workload = { trace = "w.tlt" }
driver = { mode = "closed", iodepth = 4 }
"""
    (tmp_path / "c.toml").write_text(text)
    # A file: relative to its directory, as the CLI.
    assert tierlab.simulate(tmp_path / "c.toml").summary["ios"] == 321
    # Text and dicts: relative to base_dir ...
    assert tierlab.simulate(text, base_dir=tmp_path).summary["ios"] == 321
    config = tomllib.loads(text)
    assert tierlab.simulate(config, base_dir=tmp_path).summary["ios"] == 321
    # ... else to the current directory; a path-like value in a dict is fine.
    config["tenants"][0]["workload"]["trace"] = trace
    assert tierlab.simulate(config).summary["ios"] == 321
    with pytest.raises(tierlab.ConfigError, match=r"tenants\[0\]\.workload\.trace.*w\.tlt"):
        tierlab.simulate(text, base_dir=tmp_path / "elsewhere")


def test_malformed_trace_record_raises_trace_error(tmp_path: Path) -> None:
    good = (
        "128166385295514663,hm,0,Write,9056014336,2048,2833\n"
        "128166385295514878,hm,0,Read,11855351808,512,2617\n"
    )
    trace = tmp_path / "t.csv"
    trace.write_text(good * 50 + "128166385295515175,hm,1,Write,55480x77056,4096,2320\n")
    text = """
[[devices]]
model = "ssd"
preset = "intel-p3700"

[[tenants]]
name = "msr"
workload = { trace = "t.csv" }
driver = { mode = "afap" }
"""
    with pytest.raises(tierlab.TraceError, match=r"t\.csv:101: field `Offset`.*55480x77056"):
        tierlab.simulate(text, base_dir=tmp_path)
    trace.write_text(good * 50)
    r = tierlab.simulate(text, base_dir=tmp_path)
    assert r.summary["ios"] == 100
    assert list(r.devices["name"]) == ["ssd0"]  # unnamed: model + index


# --- the GIL -----------------------------------------------------------------


def test_gil_is_released_during_the_run() -> None:
    """The main thread keeps running Python while another thread simulates.

    The worker stamps the start and end of the native call; the main
    thread's loop must tick throughout. (Holding the GIL, e.g. ``sorted``
    of a few million floats in the worker, leaves one gap as long as the
    whole call.)"""
    count = 1_000_000  # long enough (~0.2 s) to see a stall
    overrides = ["output.timeline=false", f"tenants.0.workload.params.count={count}"]
    started = time.perf_counter()
    _native.simulate(path=str(NVME_ZIPF), overrides=overrides)
    alone = time.perf_counter() - started

    done = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        box["start"] = time.perf_counter()
        box["raw"] = _native.simulate(path=str(NVME_ZIPF), overrides=overrides)
        box["end"] = time.perf_counter()
        done.set()

    thread = threading.Thread(target=work)
    ticks = []
    thread.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
    thread.join()
    assert json.loads(box["raw"]["summary"])["ios"] == count
    start, end = box["start"], box["end"]
    points = [start, *(t for t in ticks if start < t < end), end]
    gaps = [b - a for a, b in zip(points, points[1:])]
    assert max(gaps) < alone / 2, (max(gaps), alone, end - start)


# --- the VCD, read back by vcdvcd ----------------------------------------------


def vcd_reference(name: str) -> str:
    """The signal name docs/metrics.md specifies for a device name."""
    ref = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "_" + ref if ref[:1].isdigit() else ref


def read_vcd(
    result: tierlab.SimResult, device_names: list[str], member_names: list[str] = ()
) -> dict[str, list[tuple[int, int]]]:
    """Parses the VCD with vcdvcd and checks its structure; returns each
    device's (time_ns, state code) changes. `member_names`: composite
    devices' members (`RAID.mI`), which have timeline-only signals."""
    try:
        import vcdvcd
    except ImportError:
        pytest.fail("vcdvcd is not installed: it is in the `dev` extra (./scripts/setup.sh)")
    assert result.vcd is not None
    # The codes the file lists are the documented ones.
    comment = re.search(r"Device state codes:(.*)", result.vcd)
    assert comment is not None
    listed = dict(item.split("=") for item in comment.group(1).split())
    assert {int(k): v for k, v in listed.items()} == DOCUMENTED_STATES

    vcd = vcdvcd.VCDVCD(vcd_string=result.vcd)
    assert vcd.timescale["unit"] == "ns" and vcd.timescale["magnitude"] == 1
    expected = [f"tierlab.{vcd_reference(n)}" for n in device_names]
    members = [f"tierlab.{vcd_reference(n)}" for n in member_names]
    assert sorted(vcd.signals) == sorted(expected + members)
    s = result.summary
    assert vcd.endtime == s["end_ns"]
    out = {}
    for name, signal in zip(device_names, expected):
        sig = vcd[signal]
        assert sig.size == "3" or int(sig.size) == 3
        times = [t for t, _ in sig.tv]
        assert times[0] == s["start_ns"], name
        assert all(a <= b for a, b in zip(times, times[1:])), name
        assert times[-1] <= s["end_ns"], name
        codes = []
        for _, value in sig.tv:
            assert re.fullmatch("[01]{3}", value), (name, value)
            codes.append(int(value, 2))
        assert set(codes) <= DOCUMENTED_STATES.keys(), name
        # Only real changes are written.
        assert all(a != b for a, b in zip(codes, codes[1:])), name
        out[name] = list(zip(times, codes))
    return out


def busy_ns(changes: list[tuple[int, int]], end_ns: int) -> int:
    """Time spent in a state other than IDLE."""
    ends = [t for t, _ in changes[1:]] + [end_ns]
    return sum(b - a for (a, code), b in zip(changes, ends) if code != 0)


def test_vcd_reads_back_in_vcdvcd(zipf: tierlab.SimResult) -> None:
    config = load_toml(NVME_ZIPF)
    assert config["output"]["timeline"] is True
    names = [d["name"] for d in config["devices"]]
    timelines = read_vcd(zipf, names)
    changes = timelines["nvme"]
    codes = {c for _, c in changes}
    assert 0 in codes, "the device is never IDLE"
    assert codes & {1, 2}, "the device is never busy reading or writing"
    assert codes <= {0, 1, 2}, "an SSD without GC should only idle, read and write"
    # An independent path to the same number: this SSD has no background
    # work, so it is in a busy state exactly while an IO is in flight — the
    # VCD's busy time is the device's io_ticks (iostat %util numerator).
    d = zipf.devices.iloc[0]
    assert busy_ns(changes, zipf.summary["end_ns"]) == d["io_ticks_ns"]


def test_vcd_is_none_without_timeline() -> None:
    r = tierlab.simulate(
        NVME_ZIPF, set={"output.timeline": False, "tenants.0.workload.params.count": 50}
    )
    assert r.vcd is None
    assert r.summary["timeline_changes"] == 0


def raid_configs() -> list[Path]:
    found = []
    for path in sorted(CONFIGS.glob("*.toml")):
        if path.name.startswith("serve-"):
            continue  # stacks for `tierlab serve`: no workload to simulate
        devices = load_toml(path).get("devices", [])
        if any(d.get("model") == "raid" and d.get("members") for d in devices):
            found.append(path)
    return found


def test_raid_configs(tmp_path: Path) -> None:
    paths = raid_configs()
    if not paths:
        pytest.skip(f"no config in {CONFIGS} has a `model = \"raid\"` device with members")
    for path in paths:
        config = load_toml(path)
        r = tierlab.simulate(path, set={"output.timeline": True})
        s = r.summary
        names = [d.get("name", f"{d['model']}{i}") for i, d in enumerate(config["devices"])]
        assert list(r.devices["name"]) == names, path.name
        run = s["run"]
        assert s["ios"] == sum(t["completed_ios"] for t in run["tenants"]), path.name
        assert s["ios"] + run["host_ios_unfinished"] == sum(t["issued_ios"] for t in run["tenants"])
        assert len(r.tenants) == len(config["tenants"])
        members = [
            f"{names[i]}.m{j}"
            for i, d in enumerate(config["devices"])
            if d.get("model") == "raid"
            for j in range(len(d.get("members", [])))
        ]
        timelines = read_vcd(r, names, members)
        for i, d in enumerate(config["devices"]):
            if d.get("model") != "raid":
                continue
            codes = {c for _, c in timelines[names[i]]}
            assert codes - {0}, f"{path.name}: RAID device {names[i]} never busy"
            assert r.devices.loc[i, "ios"] > 0


def test_raid1_reads_scale_with_members() -> None:
    """A read-only closed-loop load on a RAID 1 of N identical members gives
    N times the IOPS of one member alone (both saturated)."""
    candidates = []
    for path in raid_configs():
        config = load_toml(path)
        raid = config["devices"][0]
        params = config["tenants"][0]["workload"].get("params", {})
        if (
            len(config["devices"]) == 1
            and len(config["tenants"]) == 1
            and raid.get("level") == "raid1"
            and len(raid["members"]) >= 2
            and all(m == raid["members"][0] for m in raid["members"])
            and params.get("read_ratio") == 1.0
            and config["tenants"][0].get("driver", {}).get("mode") == "closed"
        ):
            candidates.append((path, config))
    if not candidates:
        pytest.skip("no single-device, read-only, closed-loop RAID 1 config in configs/")
    for path, config in candidates:
        n = len(config["devices"][0]["members"])
        mirror = tierlab.simulate(path, set={"output.timeline": False})
        single = dict(config)
        single["devices"] = [dict(config["devices"][0]["members"][0], name="one")]
        alone = tierlab.simulate(single, set={"output.timeline": False})
        ratio = mirror.summary["iops"] / alone.summary["iops"]
        assert ratio == pytest.approx(n, rel=0.05), (path.name, ratio)


# --- typed errors --------------------------------------------------------------


def test_a_bad_value_raises_param_error_with_key_found_expected() -> None:
    """ParamError names the key as written in the config (through nested
    tables), what was there and what is allowed; it is a ConfigError and a
    ValueError, so older handlers still catch it."""
    with pytest.raises(tierlab.ParamError) as e:
        tierlab.simulate(NVME_ZIPF, set=["tenants.0.driver.speed=-1"])
    assert (e.value.key, e.value.found, e.value.expected) == (
        "tenants[0].driver.speed",
        "-1",
        "a number > 0",
    )
    assert isinstance(e.value, tierlab.ConfigError) and isinstance(e.value, ValueError)
    config = load_toml(NVME_ZIPF)
    config["devices"][0]["read_latency_ns"] = 0
    with pytest.raises(tierlab.ParamError) as e:
        tierlab.simulate(config)
    assert e.value.key == "devices[0].read_latency_ns"
    assert e.value.found == "0" and e.value.expected.startswith("1 ..= ")
    assert str(e.value).startswith("<config dict>: key `devices[0].read_latency_ns`: expected")
    # A schema error (an unknown key) is a ConfigError with its key, not a ParamError.
    config = load_toml(NVME_ZIPF)
    config["tenants"][0]["driver"]["sped"] = 2.0
    with pytest.raises(tierlab.ConfigError) as e:
        tierlab.simulate(config)
    assert not isinstance(e.value, tierlab.ParamError)
    assert e.value.key == "tenants[0].driver"


def test_a_missing_trace_is_a_config_error_caused_by_file_not_found(tmp_path: Path) -> None:
    config = load_toml(NVME_ZIPF)
    config["tenants"][0]["workload"] = {"trace": str(tmp_path / "nope.csv")}
    with pytest.raises(tierlab.ConfigError) as e:
        tierlab.simulate(config)
    assert e.value.key == "tenants[0].workload.trace"
    assert isinstance(e.value.__cause__, FileNotFoundError)


def test_cache_sim_bad_arguments_are_param_errors(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("128166385295514663,hm,0,Read,4096,4096,100\n")
    with pytest.raises(tierlab.ParamError) as e:
        tierlab.cache_sim(trace, "lur", "1MiB")
    assert e.value.key == "policies" and "did you mean `lru`" in e.value.found
    with pytest.raises(tierlab.ParamError) as e:
        tierlab.cache_sim(trace, "lru", "6k")
    assert e.value.key == "capacities"
    assert e.value.expected == "a whole number of 4096-byte pages"
