"""The native binary format: written by Rust (convert / write_trace), mapped
by numpy (load_native, which parses the header itself), compared with the
Rust reader's view of the original trace."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tierlab
from tierlab.native import HEADER_BYTES, NO_RESPONSE

SHARED_FOR_NATIVE = [
    "msr/hm_0-sample-1k.csv",
    "umass-spc/websearch-60s.disksim.txt",
    "tencent-cbs/cbs-sample-50k.csv.bz2",
    "systor17/systor17-sample.csv.gz",
    "cloudphysics/cloudphysics-2h.vscsi",
    "arc/P3.lis.zst",
]


def msr_file(path: Path, n: int = 3000, seed: int = 1) -> Path:
    rng = random.Random(seed)
    t = 128_166_385_295_514_663
    lines = []
    for _ in range(n):
        t += rng.randrange(0, 40_000)
        lines.append(
            f"{t},{rng.choice(['hm', 'web'])},{rng.randrange(3)},{rng.choice(['Read', 'Write'])},"
            f"{rng.randrange(2**36) * 512},{rng.choice([512, 4096, 131072])},{rng.randrange(10**5)}\n"
        )
    path.write_text("".join(lines))
    return path


def assert_same_frame(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
    assert a.attrs["devices"] == b.attrs["devices"]
    assert a.attrs["time_base"] == b.attrs["time_base"]


def test_dtype_matches_the_documented_record() -> None:
    dt = tierlab.NATIVE_DTYPE
    assert dt.itemsize == 32
    assert {name: dt.fields[name][1] for name in dt.names} == {
        "time_ns": 0,
        "offset_bytes": 8,
        "response_ns": 16,
        "size_bytes": 24,
        "device_id": 28,
        "op": 30,
        "reserved": 31,
    }


def check_round_trip(src: Path, out: Path) -> None:
    original = tierlab.read_trace(src)
    summary = tierlab.convert(src, out, to="native")
    assert summary["records"] == len(original)
    assert summary["format"] == "native"
    trace = tierlab.load_native(out)
    assert len(trace) == len(original)
    assert list(trace.devices) == original.attrs["devices"]
    assert trace.time_base == original.attrs["time_base"]
    if len(trace):
        # mapped, not read into memory
        assert isinstance(trace.records, np.memmap)
        assert not trace.records.flags.writeable
    # the numpy view of the raw records
    r = trace.records
    np.testing.assert_array_equal(r["time_ns"], original["time_ns"].to_numpy())
    np.testing.assert_array_equal(r["offset_bytes"], original["offset_bytes"].to_numpy())
    np.testing.assert_array_equal(r["size_bytes"], original["size_bytes"].to_numpy())
    np.testing.assert_array_equal(r["device_id"], original["device_id"].to_numpy())
    np.testing.assert_array_equal(r["op"], original["op"].cat.codes.to_numpy())
    resp = original["response_ns"]
    np.testing.assert_array_equal(
        r["response_ns"], resp.fillna(NO_RESPONSE).to_numpy(dtype=np.uint64)
    )
    # the frame built in Python from the map == the Rust reader's frames
    from_map = trace.to_pandas()
    assert_same_frame(from_map, original)
    assert_same_frame(tierlab.read_trace(out), original)


def test_round_trip_written_here(tmp_path: Path) -> None:
    check_round_trip(msr_file(tmp_path / "t.csv"), tmp_path / "t.tlt")


@pytest.mark.parametrize("name", SHARED_FOR_NATIVE)
def test_round_trip_shared(shared_traces: Path, tmp_path: Path, name: str) -> None:
    check_round_trip(shared_traces / name, tmp_path / "t.tlt")


def test_cli_convert_to_native(tmp_path: Path, tierlab_exe: str) -> None:
    """The CLI (`tierlab trace convert`) writes the same file as the API."""
    import subprocess

    src = msr_file(tmp_path / "t.csv", n=200)
    help_text = subprocess.run([tierlab_exe, "trace", "--help"], capture_output=True, text=True).stdout
    if "convert" not in help_text:
        pytest.skip("this build's CLI has no `trace convert` yet")
    subprocess.run([tierlab_exe, "trace", "convert", str(src), str(tmp_path / "cli.tlt")], check=True)
    tierlab.convert(src, tmp_path / "api.tlt")
    assert (tmp_path / "cli.tlt").read_bytes() == (tmp_path / "api.tlt").read_bytes()


def test_write_trace_from_frame(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {
            "time_ns": np.array([5, 1_000, 2_000_000], dtype=np.uint64),
            "device": ["sda", "nvme0", "sda"],
            "offset_bytes": [0, 4096, 1 << 40],
            "size_bytes": [4096, 512, 1 << 20],
            "op": ["read", "write", "trim"],
            "response_ns": pd.array([100, None, 7], dtype="UInt64"),
        }
    )
    out = tmp_path / "df.tlt"
    assert tierlab.write_trace(df, out)["records"] == 3
    t = tierlab.load_native(out)
    assert t.devices == ("sda", "nvme0")
    assert t.time_base == "relative"
    assert t.records["device_id"].tolist() == [0, 1, 0]
    assert t.records["op"].tolist() == [0, 1, 2]
    assert t.records["response_ns"].tolist() == [100, NO_RESPONSE, 7]
    back = tierlab.read_trace(out)
    assert back["device"].astype(str).tolist() == ["sda", "nvme0", "sda"]
    assert back["op"].astype(str).tolist() == ["read", "write", "trim"]
    assert back["response_ns"].tolist() == [100, pd.NA, 7]


def test_empty_native(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text("")
    tierlab.convert(tmp_path / "e.csv", tmp_path / "e.tlt", format="msr")
    t = tierlab.load_native(tmp_path / "e.tlt")
    assert len(t) == 0 and t.devices == ()
    assert len(t.to_pandas()) == 0


def native_file(tmp_path: Path) -> Path:
    out = tmp_path / "ok.tlt"
    tierlab.convert(msr_file(tmp_path / "t.csv", n=10), out)
    return out


def test_bad_magic_and_version(tmp_path: Path) -> None:
    good = native_file(tmp_path).read_bytes()
    bad = tmp_path / "bad.tlt"
    bad.write_bytes(b"NOTTIER\0" + good[8:])
    with pytest.raises(tierlab.TraceError, match="not a tierlab native trace"):
        tierlab.load_native(bad)
    bad.write_bytes(good[:8] + struct.pack("<I", 99) + good[12:])
    with pytest.raises(tierlab.TraceError, match="version 99 is not supported"):
        tierlab.load_native(bad)


def test_truncated_native(tmp_path: Path) -> None:
    good = native_file(tmp_path).read_bytes()
    bad = tmp_path / "cut.tlt"
    bad.write_bytes(good[: HEADER_BYTES + 32 * 5])
    with pytest.raises(tierlab.TraceError, match="truncated native trace"):
        tierlab.load_native(bad)
    bad.write_bytes(good[:40])
    with pytest.raises(tierlab.TraceError, match="64-byte header"):
        tierlab.load_native(bad)


def test_corrupt_record_is_reported_with_its_byte_offset(tmp_path: Path) -> None:
    data = bytearray(native_file(tmp_path).read_bytes())
    data[HEADER_BYTES + 32 * 3 + 30] = 9  # op of record 3
    bad = tmp_path / "op.tlt"
    bad.write_bytes(bytes(data))
    t = tierlab.load_native(bad)
    with pytest.raises(tierlab.TraceError, match=rf"byte {HEADER_BYTES + 96}: field `op`.*found \"9\""):
        t.to_pandas()
