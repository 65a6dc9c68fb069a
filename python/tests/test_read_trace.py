"""read_trace against independent truth: traces parsed here with plain Python
(from the format descriptions in ../shared/traces/README.md, not from the
Rust code), trace files written here from known records, and the reference
table of ../shared/traces/README.md (computed by an independent script)."""

from __future__ import annotations

import csv
import gzip
import random
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tierlab
from conftest import SHARED_TRACES

FILETIME_UNIX_EPOCH = 116_444_736_000_000_000  # 100 ns ticks from 1601 to 1970
U64 = np.uint64


def as_records(df: pd.DataFrame) -> list[tuple]:
    """The frame as plain tuples (time, device, offset, size, op, response)."""
    resp = [None if pd.isna(v) else int(v) for v in df["response_ns"]]
    return list(
        zip(
            (int(v) for v in df["time_ns"]),
            (str(v) for v in df["device"]),
            (int(v) for v in df["offset_bytes"]),
            (int(v) for v in df["size_bytes"]),
            (str(v) for v in df["op"]),
            resp,
        )
    )


def check_frame_schema(df: pd.DataFrame) -> None:
    assert list(df.columns) == [
        "time_ns",
        "device",
        "device_id",
        "offset_bytes",
        "size_bytes",
        "op",
        "response_ns",
    ]
    assert df["time_ns"].dtype == np.uint64
    assert df["offset_bytes"].dtype == np.uint64
    assert df["size_bytes"].dtype == np.uint32
    assert df["device_id"].dtype == np.uint32
    assert isinstance(df["device"].dtype, pd.CategoricalDtype)
    assert list(df["op"].cat.categories) == ["read", "write", "trim", "flush"]
    assert str(df["response_ns"].dtype) == "UInt64"
    # device_id is the code of the device category
    assert (df["device"].cat.codes.to_numpy().astype(np.int64) == df["device_id"].to_numpy()).all()
    assert list(df["device"].cat.categories) == df.attrs["devices"]


# --- files written here from known records (always run) ----------------------


def random_msr_records(n: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    t = 128_166_385_295_514_663  # a filetime in 2007
    out = []
    for _ in range(n):
        t += rng.randrange(0, 50_000)
        host = rng.choice(["hm", "prxy", "src2"])
        disk = rng.randrange(0, 3)
        op = rng.choice(["Read", "Write"])
        offset = rng.randrange(0, 2**40) // 512 * 512
        size = rng.choice([512, 4096, 65536, 1 << 20])
        rt = rng.randrange(1, 10**6)
        out.append((t, host, disk, op, offset, size, rt))
    return out


def test_msr_written_here_matches_every_record(tmp_path: Path) -> None:
    rows = random_msr_records(2000, seed=7)
    path = tmp_path / "synthetic.csv"
    path.write_text("".join(f"{t},{h},{d},{op},{o},{s},{rt}\n" for t, h, d, op, o, s, rt in rows))
    df = tierlab.read_trace(path)
    check_frame_schema(df)
    assert df.attrs["format"] == "msr"
    assert df.attrs["time_base"] == "unix_epoch"
    expected = [
        ((t - FILETIME_UNIX_EPOCH) * 100, f"{h}_{d}", o, s, op.lower(), rt * 100)
        for t, h, d, op, o, s, rt in rows
    ]
    assert as_records(df) == expected
    # devices in order of first appearance
    first_seen = list(dict.fromkeys(f"{h}_{d}" for _, h, d, *_ in rows))
    assert df.attrs["devices"] == first_seen


def test_disksim_written_here_matches_every_record(tmp_path: Path) -> None:
    rng = random.Random(11)
    rows = []
    t = 0
    for _ in range(1500):
        t += rng.randrange(0, 10**6)
        rows.append((t, rng.randrange(0, 4), rng.randrange(0, 2**32), rng.randrange(1, 512), rng.randrange(0, 2)))
    path = tmp_path / "synthetic.disksim"
    path.write_text("".join(f"{t} {d} {lba} {n} {flag}\n" for t, d, lba, n, flag in rows))
    df = tierlab.read_trace(path, "disksim")
    check_frame_schema(df)
    expected = [
        (t, str(d), lba * 512, n * 512, "read" if flag == 1 else "write", None)
        for t, d, lba, n, flag in rows
    ]
    assert as_records(df) == expected
    assert df.attrs["time_base"] == "relative"


def test_limit_and_compressed_input(tmp_path: Path) -> None:
    rows = random_msr_records(500, seed=3)
    text = "".join(f"{t},{h},{d},{op},{o},{s},{rt}\n" for t, h, d, op, o, s, rt in rows)
    plain = tmp_path / "t.csv"
    plain.write_text(text)
    packed = tmp_path / "t.csv.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    full = tierlab.read_trace(plain)
    pd.testing.assert_frame_equal(tierlab.read_trace(packed), full, check_like=False)
    head = tierlab.read_trace(packed, limit=17)
    assert len(head) == 17
    assert as_records(head) == as_records(full)[:17]
    assert len(tierlab.read_trace(plain, limit=0)) == 0


def test_empty_trace_with_explicit_format(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("")
    df = tierlab.read_trace(path, "msr")
    check_frame_schema(df)
    assert len(df) == 0


def test_frame_is_writable_numpy_without_python_objects(tmp_path: Path) -> None:
    rows = random_msr_records(100, seed=5)
    path = tmp_path / "t.csv"
    path.write_text("".join(f"{t},{h},{d},{op},{o},{s},{rt}\n" for t, h, d, op, o, s, rt in rows))
    df = tierlab.read_trace(path)
    # plain numpy columns, not object arrays; a user may modify them
    for col in ("time_ns", "offset_bytes", "size_bytes", "device_id"):
        assert df[col].to_numpy().dtype.kind == "u"
    df.loc[0, "size_bytes"] = 1
    assert df["size_bytes"].iloc[0] == 1


# --- the shared real traces --------------------------------------------------


def test_msr_sample_every_record(shared_traces: Path) -> None:
    path = shared_traces / "msr" / "hm_0-sample-1k.csv"
    with open(path, newline="") as f:
        expected = [
            (
                (int(ts) - FILETIME_UNIX_EPOCH) * 100,
                f"{host}_{disk}",
                int(offset),
                int(size),
                op.lower(),
                int(rt) * 100,
            )
            for ts, host, disk, op, offset, size, rt in csv.reader(f)
        ]
    df = tierlab.read_trace(path)
    check_frame_schema(df)
    assert as_records(df) == expected


@pytest.mark.parametrize("name", ["umass-spc/websearch-60s.disksim.txt", "mqsim/tpcc-small.disksim.txt"])
def test_disksim_every_record(shared_traces: Path, name: str) -> None:
    path = shared_traces / name
    expected = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        t, dev, lba, n, flag = line.split()
        expected.append((int(t), dev, int(lba) * 512, int(n) * 512, "read" if int(flag) == 1 else "write", None))
    df = tierlab.read_trace(path)
    check_frame_schema(df)
    assert df.attrs["format"] == "disksim"
    assert as_records(df) == expected


def test_replayer_every_record(shared_traces: Path) -> None:
    path = shared_traces / "msr" / "msr-window-rw40_60.replay.txt"
    expected = []
    for line in path.read_text().splitlines():
        ts_ms, dev, offset, size, op = line.split()
        expected.append(
            (int(Decimal(ts_ms) * 1_000_000), dev, int(offset), int(size), "read" if op == "1" else "write", None)
        )
    df = tierlab.read_trace(path)
    assert df.attrs["format"] == "replayer"
    assert as_records(df) == expected


#: VSCSI v1: 32-byte little-endian records, as numpy reads them.
VSCSI_V1 = np.dtype(
    [
        ("serial", "<u4"),
        ("length", "<u4"),
        ("n_sg", "<u4"),
        ("cmd", "<u2"),
        ("version", "<u2"),
        ("lbn", "<u8"),
        ("ts_us", "<u8"),
    ]
)


def vscsi_v1_records(path: Path) -> np.ndarray:
    """Every record of a VSCSI v1 file, decoded by numpy (not by tierlab)."""
    return np.fromfile(path, dtype=VSCSI_V1)


def test_vscsi_every_record(shared_traces: Path) -> None:
    """VSCSI v1: 32-byte little-endian records, decoded here with numpy."""
    path = shared_traces / "cloudphysics" / "cloudphysics-2h.vscsi"
    raw = vscsi_v1_records(path)
    reads = np.isin(raw["cmd"], [0x08, 0x28, 0x88])
    writes = np.isin(raw["cmd"], [0x0A, 0x2A, 0x8A])
    assert (reads | writes).all()
    df = tierlab.read_trace(path)
    assert df.attrs["format"] == "vscsi"
    assert len(df) == len(raw)
    np.testing.assert_array_equal(df["time_ns"].to_numpy(), raw["ts_us"] * U64(1000))
    np.testing.assert_array_equal(df["offset_bytes"].to_numpy(), raw["lbn"] * U64(512))
    np.testing.assert_array_equal(df["size_bytes"].to_numpy(), raw["length"])
    np.testing.assert_array_equal(df["op"].to_numpy() == "read", reads)


def reference_table(shared_traces: Path) -> dict[str, dict[str, str]]:
    """The table of ../shared/traces/README.md, keyed by file."""
    rows: dict[str, dict[str, str]] = {}
    header: list[str] | None = None
    for line in (shared_traces / "README.md").read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "file":
            header = cells
        elif header and not set(cells[0]) <= set("-: "):
            rows[cells[0]] = dict(zip(header, cells))
    return rows


def footprint_4k_blocks(df: pd.DataFrame) -> int:
    """Distinct (device, 4 KiB block) pairs touched, computed with numpy."""
    keep = (df["size_bytes"].to_numpy() > 0) & (df["op"].to_numpy() != "flush")
    off = df["offset_bytes"].to_numpy()[keep]
    end = off + df["size_bytes"].to_numpy()[keep].astype(np.uint64)
    first = off // U64(4096)
    last = (end - U64(1)) // U64(4096)
    n = (last - first + U64(1)).astype(np.int64)
    starts = np.repeat(first, n)
    step = np.arange(n.sum(), dtype=np.uint64) - np.repeat(np.cumsum(n) - n, n).astype(np.uint64)
    dev = np.repeat(df["device_id"].to_numpy()[keep].astype(np.uint64), n)
    pairs = np.stack([dev, starts + step], axis=1)
    return len(np.unique(pairs, axis=0))


def shared_trace_files() -> list[str]:
    readme = SHARED_TRACES / "README.md"
    if not readme.is_file():
        return ["(absent)"]
    return list(reference_table(SHARED_TRACES))


@pytest.mark.parametrize("name", shared_trace_files())
def test_reference_table(shared_traces: Path, name: str) -> None:
    """Every shared trace: the frame's own aggregates and trace_stats both
    equal the published table."""
    ref = reference_table(shared_traces)[name]
    path = shared_traces / name
    df = tierlab.read_trace(path)
    check_frame_schema(df)
    st = tierlab.trace_stats(path)
    reads = df["op"] == "read"
    writes = df["op"] == "write"
    size = df["size_bytes"].astype(np.uint64)
    from_frame = {
        "requests": len(df),
        "reads": int(reads.sum()),
        "writes": int(writes.sum()),
        "bytes read": int(size[reads].sum()),
        "bytes written": int(size[writes].sum()),
        "blocks": footprint_4k_blocks(df),
        "devices": int(df["device"].nunique()),
    }
    from_stats = {
        "requests": st["requests"],
        "reads": st["reads"],
        "writes": st["writes"],
        "bytes read": st["read_bytes"],
        "bytes written": st["write_bytes"],
        "blocks": st["footprint_4k_blocks"],
        "devices": st["devices"],
    }
    published = {k: int(ref[k]) for k in from_frame}
    assert from_frame == published
    assert from_stats == published
    span = ref["span s"]
    if re.fullmatch(r"[0-9.]+", span):
        t = df["time_ns"].to_numpy()
        assert round(int(t.max() - t.min()) / 1e9, 3) == pytest.approx(float(span), abs=1e-9)
        assert round(st["span_s"], 3) == pytest.approx(float(span), abs=1e-9)
    else:
        assert df.attrs["time_base"] == "none"
        assert st["span_s"] is None


def test_csv_with_a_column_mapping_reads_cloudphysics_like_libcachesim(
    shared_traces: Path, tmp_path: Path
) -> None:
    """libCacheSim's CloudPhysics CSV layout (version,time,op,size,lbn; time
    in seconds, size in bytes, LBN in 512-byte sectors), written here by
    pandas from the VSCSI records numpy decodes, read back through a column
    mapping: every record equals the decoded one."""
    path = shared_traces / "cloudphysics" / "cloudphysics-2h.vscsi"
    raw = vscsi_v1_records(path)[:20_000]
    ts = raw["ts_us"].astype(np.int64)
    frame = pd.DataFrame(
        {
            "version": 1,
            # Exact decimal seconds, so the time round-trips to the ns.
            "time": [f"{t // 1_000_000}.{t % 1_000_000:06d}" for t in ts],
            "op": [hex(c) for c in raw["cmd"]],
            "size": raw["length"],
            "lbn": raw["lbn"],
        }
    )
    csv_path = tmp_path / "cloudPhysicsIO.csv"
    frame.to_csv(csv_path, index=False)
    df = tierlab.read_trace(csv_path, format="csv:time=2,op=3,size=4,lbn=5,header")
    assert df.attrs["format"] == "csv" and len(df) == len(raw)
    assert (df["time_ns"].to_numpy() == raw["ts_us"] * 1000).all()
    assert (df["offset_bytes"].to_numpy() == raw["lbn"] * 512).all()
    assert (df["size_bytes"].to_numpy() == raw["length"]).all()
    reads = np.isin(raw["cmd"], [0x08, 0x28, 0x88])
    assert ((df["op"] == "read").to_numpy() == reads).all()
    # Without the mapping, detection recognizes the layout and reads it so.
    pd.testing.assert_frame_equal(tierlab.read_trace(csv_path), df)
    with pytest.raises(ValueError, match="unknown key `tiem`"):
        tierlab.read_trace(csv_path, format="csv:tiem=2,size=4,lbn=5")



def test_raw_block_number_arrays_read_and_cache_like_libcachesim_objects(tmp_path) -> None:
    """A raw array of u32 block numbers (PyMimircache / libCacheSim style):
    each value one 4 KiB read, so LRU over it misses exactly as LRU over the
    values themselves (checked against a hand-written LRU)."""
    from collections import OrderedDict

    import numpy as np

    rng = np.random.default_rng(7)
    ids = (rng.zipf(1.3, 20_000) % 3_000).astype("<u4")
    path = tmp_path / "ids.bin"
    ids.tofile(path)
    df = tierlab.read_trace(path, format="lbn32")
    assert len(df) == len(ids)
    assert (df["offset_bytes"].to_numpy() == ids.astype("uint64") * 4096).all()
    assert (df["size_bytes"] == 4096).all() and (df["op"] == "read").all()

    def lru_misses(values, capacity: int) -> int:
        cache: OrderedDict[int, None] = OrderedDict()
        misses = 0
        for v in values:
            if v in cache:
                cache.move_to_end(v)
                continue
            misses += 1
            cache[v] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
        return misses

    result = tierlab.cache_sim(path, "lru", ["100pages", "1000pages"], format="lbn32")
    for pages, misses in zip((100, 1000), result["misses"]):
        assert misses == lru_misses(ids.tolist(), pages)
    # Never detected: without the format the raw bytes are refused.
    with pytest.raises(Exception, match="format"):
        tierlab.read_trace(path)
