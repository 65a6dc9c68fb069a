"""The `tierlab` console script, trace_stats vs the CLI's JSON, writer round
trips, and errors that say file:line, field and the offending text."""

from __future__ import annotations

import bz2
import gzip
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

import tierlab

GOOD_MSR = (
    "128166385295514663,hm,0,Write,9056014336,2048,2833\n"
    "128166385295514878,hm,0,Read,11855351808,512,2617\n"
    "128166385295515175,hm,1,Write,5548077056,4096,2320\n"
)


def run(exe: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([exe, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)


def test_console_script_version(tierlab_exe: str) -> None:
    p = run(tierlab_exe, "--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"tierlab {tierlab.__version__}"


def test_console_script_exit_codes(tierlab_exe: str) -> None:
    assert run(tierlab_exe, "--help").returncode == 0
    p = run(tierlab_exe, "no-such-command")
    assert p.returncode == 2
    assert "no-such-command" in p.stderr


def test_run_cli_in_process() -> None:
    assert tierlab.run_cli(["--version"]) == 0
    assert tierlab.run_cli(["trace", "stats", "/nonexistent/trace.csv"]) == 1
    with pytest.raises(TypeError):
        tierlab.run_cli("--version")  # type: ignore[arg-type]


def test_trace_stats_equals_cli_json(tmp_path: Path, tierlab_exe: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(GOOD_MSR)
    p = run(tierlab_exe, "trace", "stats", str(path), "--json")
    assert p.returncode == 0, p.stderr
    assert tierlab.trace_stats(path) == json.loads(p.stdout)


def test_trace_stats_shared_equals_cli_json(shared_traces: Path, tierlab_exe: str) -> None:
    path = shared_traces / "systor17" / "systor17-sample.csv.gz"
    p = run(tierlab_exe, "trace", "stats", str(path), "--json")
    assert p.returncode == 0, p.stderr
    assert tierlab.trace_stats(path) == json.loads(p.stdout)


@pytest.mark.parametrize("to", ["msr", "disksim", "fio", "native"])
def test_write_read_round_trip(tmp_path: Path, to: str) -> None:
    src = tmp_path / "t.csv"
    src.write_text(GOOD_MSR)
    df = tierlab.read_trace(src)
    out = tmp_path / f"out.{to}"
    assert tierlab.write_trace(df, out, to)["records"] == 3
    back = tierlab.read_trace(out, to)
    assert back["op"].tolist() == df["op"].tolist()
    assert back["offset_bytes"].tolist() == df["offset_bytes"].tolist()
    assert back["size_bytes"].tolist() == df["size_bytes"].tolist()
    if to == "disksim":
        # DiskSim records device numbers, not names
        assert back["device_id"].tolist() == df["device_id"].tolist()
    else:
        assert back["device"].astype(str).tolist() == df["device"].astype(str).tolist()
    if to in ("msr", "native"):
        pd.testing.assert_frame_equal(back, df)


def test_convert_infers_format_from_name(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_text(GOOD_MSR)
    assert tierlab.convert(src, tmp_path / "t.iolog")["format"] == "fio"
    assert tierlab.convert(src, tmp_path / "t.disksim.gz")["format"] == "disksim"
    with pytest.raises(ValueError, match="cannot tell the output format"):
        tierlab.convert(src, tmp_path / "t.unknown")
    with pytest.raises(ValueError, match="does not write"):
        tierlab.convert(src, tmp_path / "t.x", to="vscsi")
    # An unknown output format is a ParamError naming the argument.
    with pytest.raises(tierlab.ParamError, match="did you mean `msr`") as e:
        tierlab.convert(src, tmp_path / "t.x", to="msrc")
    assert e.value.key == "to"


def test_malformed_line_names_file_line_field_and_text(tmp_path: Path, tierlab_exe: str) -> None:
    path = tmp_path / "bad.csv"
    lines = GOOD_MSR.splitlines(keepends=True)
    lines.insert(2, "128166385295515999,hm,0,Write,9056014336,12x4,2833\n")
    path.write_text("".join(lines))
    for reader in (lambda: tierlab.read_trace(path), lambda: tierlab.trace_stats(path)):
        with pytest.raises(tierlab.TraceError) as info:
            reader()
        message = str(info.value)
        assert message.startswith(f"{path}:3: field `Size`"), message
        assert '"12x4"' in message
    # the CLI prints exactly the same message
    p = run(tierlab_exe, "trace", "stats", str(path))
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == f"tierlab: error: {message}"
    # TraceError is a ValueError
    with pytest.raises(ValueError):
        tierlab.read_trace(path)


def test_skip_bad_counts(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(GOOD_MSR + "1,hm,0,Frobnicate,0,512,1\n" + GOOD_MSR)
    df = tierlab.read_trace(path, "msr", skip_bad=True)
    assert len(df) == 6
    assert df.attrs["skipped_bad"] == 1
    assert tierlab.trace_stats(path, "msr", skip_bad=True)["skipped_bad"] == 1


def test_binary_error_names_byte_offset(tmp_path: Path) -> None:
    # VSCSI v1: 32-byte records; record 1 has an unknown SCSI command
    import struct

    rec = struct.Struct("<IIIHHQQ")
    data = rec.pack(1, 512, 1, 0x28, 256, 8, 1000) + rec.pack(2, 512, 1, 0x99, 256, 16, 2000)
    path = tmp_path / "bad.vscsi"
    path.write_bytes(data)
    with pytest.raises(tierlab.TraceError, match=rf"^{path}: byte 32: field"):
        tierlab.read_trace(path, "vscsi")


def test_truncated_compressed_file(tmp_path: Path) -> None:
    blob = gzip.compress((GOOD_MSR * 200).encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(tierlab.TraceError, match=str(path)):
        tierlab.read_trace(path)
    blob = bz2.compress((GOOD_MSR * 200).encode())
    path = tmp_path / "cut.csv.bz2"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(tierlab.TraceError, match=str(path)):
        tierlab.trace_stats(path)


def test_missing_file_and_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        tierlab.read_trace(tmp_path / "nope.csv")
    src = tmp_path / "t.csv"
    src.write_text(GOOD_MSR)
    with pytest.raises(ValueError, match="unknown trace format"):
        tierlab.read_trace(src, "nosuchformat")
    # A bad format or blkparse event is a ParamError naming the argument.
    with pytest.raises(tierlab.ParamError, match="did you mean `msr`") as e:
        tierlab.read_trace(src, "msrc")
    assert e.value.key == "format"
    with pytest.raises(tierlab.ParamError) as e:
        tierlab.read_trace(src, blk_event="X")
    assert (e.value.key, e.value.found) == ("blk_event", '"X"')
    with pytest.raises(ValueError, match="limit"):
        tierlab.read_trace(src, limit=-1)
    with pytest.raises(ValueError, match="unknown operations"):
        tierlab.write_trace(pd.DataFrame({"time_ns": [0], "offset_bytes": [0], "size_bytes": [512], "op": ["erase"]}), tmp_path / "x.tlt")
    with pytest.raises(ValueError, match="non-negative"):
        tierlab.write_trace(pd.DataFrame({"time_ns": [-1], "offset_bytes": [0], "size_bytes": [512], "op": ["read"]}), tmp_path / "x.tlt")
    with pytest.raises(ValueError, match="lacks columns"):
        tierlab.write_trace(pd.DataFrame({"time_ns": [0]}), tmp_path / "x.tlt")
