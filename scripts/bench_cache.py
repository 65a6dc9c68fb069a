#!/usr/bin/env python3
"""Cache-only LRU throughput, tierlab vs libCacheSim, side by side in one run.

Both simulate the same page-reference stream: a Zipf trace of single-page
(4 KiB) requests made by tierlab's generator, stored once as a native
tierlab trace and once as a libCacheSim oracleGeneral trace (obj_size 1,
so cache_size counts pages). Timed: only the simulation calls, each of which
reads its own binary trace from the (warm) page cache and runs the whole
stream through one LRU in compiled code:

    tierlab      tierlab.cache_sim(native_trace, "lru", capacity)  (Rust, GIL released)
    libcachesim  LRU(cache_size=capacity).process_trace(TraceReader(oracleGeneral))  (its C loop)

libCacheSim is run twice per round: with its default hash table
(hashpower 24, 2^24 buckets) and with one sized to the cache (hashpower =
ceil(log2(capacity)) + 1), which is much faster for small caches (fewer CPU
cache misses); the ratio is against the faster of the two. The process is
pinned to one CPU, the runs alternate --repeat times and the best of each is
reported (these machines are shared and noisy); all miss counts are printed
and must be equal.

    .venv/bin/python scripts/bench_cache.py [--requests 10000000] [--capacity 65536]

This times the installed `tierlab` module. To time a checkout's Rust code
without building the module, and to report CPU time next to wall time, use
`cargo run --release -p tierlab-cache --example vs_libcachesim -- --python
.venv/bin/python` (docs/benchmarks.md, "Small caches").
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tierlab

try:
    import libcachesim as lcs
except ImportError as e:  # pragma: no cover
    sys.exit(f"bench_cache: libcachesim is not installed ({e}); pip install -e '.[dev]'")

OG = np.dtype([("clock_time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")])


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--capacity", type=int, default=65_536, help="cache size in 4 KiB pages")
    ap.add_argument("--region", default="4g", help="Zipf region (4g = 1,048,576 pages)")
    ap.add_argument("--theta", type=float, default=0.99)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="where the two trace files go")
    args = ap.parse_args()

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

    with tempfile.TemporaryDirectory(prefix="bench-cache-", dir=args.dir) as tmp:
        native = Path(tmp) / "zipf.tlt"
        og = Path(tmp) / "zipf.oracleGeneral"
        t = time.perf_counter()
        tierlab.generate_to(
            native,
            "zipf",
            seed=args.seed,
            count=args.requests,
            theta=args.theta,
            size_bytes="4k",
            region_size_bytes=args.region,
        )
        offsets = tierlab.load_native(native).records["offset_bytes"]
        rec = np.zeros(len(offsets), OG)
        rec["obj_id"] = offsets // 4096
        rec["obj_size"] = 1
        rec["next_access_vtime"] = -1
        rec.tofile(og)
        footprint = len(np.unique(rec["obj_id"]))
        del rec, offsets
        print(
            f"stream: {args.requests:,} single-page Zipf(theta={args.theta}) requests over {args.region}, "
            f"{footprint:,} distinct pages; LRU capacity {args.capacity:,} pages "
            f"(made in {time.perf_counter() - t:.1f} s, not timed)"
        )
        for p in (native, og):  # warm the page cache for both
            p.read_bytes()

        hashpower = max(1, (args.capacity - 1).bit_length()) + 1
        lcs_runs = {"libcachesim": 24, f"libcachesim/hp{hashpower}": hashpower}
        best = {k: float("inf") for k in ["tierlab", *lcs_runs]}
        misses = {}
        for _ in range(args.repeat):
            t = time.perf_counter()
            df = tierlab.cache_sim(native, "lru", f"{args.capacity}pages", format="native")
            best["tierlab"] = min(best["tierlab"], time.perf_counter() - t)
            misses["tierlab"] = int(df["misses"].iloc[0])
            assert int(df["requests"].iloc[0]) == args.requests

            for name, hp in lcs_runs.items():
                cache = lcs.LRU(cache_size=args.capacity, hashpower=hp)
                reader = lcs.TraceReader(str(og), lcs.TraceType.ORACLE_GENERAL_TRACE)
                t = time.perf_counter()
                miss_ratio, _ = cache.process_trace(reader)
                best[name] = min(best[name], time.perf_counter() - t)
                misses[name] = round(miss_ratio * args.requests)

    rate = {k: args.requests / v for k, v in best.items()}
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, pinned to 1; Python {platform.python_version()}, "
          f"tierlab {tierlab.__version__}, libcachesim {getattr(lcs, '__version__', '?')}")
    for k in best:
        print(f"{k:<18} {rate[k] / 1e6:7.2f} M requests/s  ({best[k]:.3f} s, best of {args.repeat})  misses {misses[k]:,}")
    for k in lcs_runs:
        print(f"ratio tierlab / {k:<18} {rate['tierlab'] / rate[k]:.2f}x")
    if len(set(misses.values())) != 1:
        sys.exit(f"bench_cache: miss counts differ: {misses}")


if __name__ == "__main__":
    main()
