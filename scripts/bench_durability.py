#!/usr/bin/env python3
"""The cost of durability through `tierlab serve`: fio's nbd engine writes
4 KiB blocks at random (QD8) to each stack, with no FLUSH, a FLUSH every
32 writes, and a FLUSH after every write (fio's `fsync=N`, which the nbd
engine sends as NBD_CMD_FLUSH). Modes alternate whole runs so they see the
same machine load.

    .venv/bin/python scripts/bench_durability.py [--runs 2] [--runtime-s 5]
        [--stacks file,cache,...] [--json out.json]

Prints a Markdown table (median IOPS over the runs, and each mode's ratio
to no FLUSH) for docs/crash-consistency.md. The stacks are the
configs/serve-*.toml ones over files in a temporary folder (on the disk
holding $TMPDIR: its fdatasync is part of what is measured).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import tierlab

STACKS = {
    "file": ("serve-file.toml", []),
    "cache": ("serve-cache.toml", []),
    "cache-persistent": ("serve-cache-persistent.toml", []),
    "flashcache": ("serve-flashcache.toml", []),
    "atsmf": ("serve-atsmf.toml", []),
    "hswd": ("serve-hswd.toml", []),
    "raid5": ("serve-raid5.toml", []),
    "raid5-bitmap": ("serve-raid5-bitmap.toml", []),
}

MODES = [("no FLUSH", 0), ("FLUSH every 32", 32), ("FLUSH every write", 1)]


def fio_write(uri, fsync_every, size, runtime_s):
    cmd = [
        "fio",
        "--name=durability",
        "--ioengine=nbd",
        f"--uri={uri}",
        f"--size={size}",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=8",
        "--time_based",
        f"--runtime={runtime_s}",
        "--ramp_time=1",
        "--randrepeat=0",
        "--norandommap",
        "--output-format=json",
    ]
    if fsync_every:
        cmd.append(f"--fsync={fsync_every}")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    return job["write"]["iops"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--runtime-s", type=float, default=5)
    ap.add_argument("--size", default="64MiB", help="the region fio writes")
    ap.add_argument("--stacks", default=",".join(STACKS))
    ap.add_argument("--json")
    a = ap.parse_args()
    if shutil.which("fio") is None:
        sys.exit("bench_durability: fio is not installed (scripts/setup.sh installs it)")
    configs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs")
    stacks = a.stacks.split(",")
    for s in stacks:
        if s not in STACKS:
            sys.exit(f"bench_durability: unknown stack `{s}`; allowed: {', '.join(STACKS)}")
    results = {s: {m: [] for m, _ in MODES} for s in stacks}
    for run in range(a.runs):
        for s in stacks:
            for mode, every in MODES:
                tmp = tempfile.mkdtemp(prefix="tl-durability-")
                try:
                    config = os.path.join(tmp, STACKS[s][0])
                    shutil.copy(os.path.join(configs, STACKS[s][0]), config)
                    sock = os.path.join(tmp, "nbd.sock")
                    with tierlab.serve(config, unix=sock, io_threads=0, base_dir=tmp) as served:
                        iops = fio_write(served.uri, every, a.size, a.runtime_s)
                    results[s][mode].append(iops)
                    print(f"run {run + 1} {s:10} {mode:18} {iops:10.0f} IOPS", file=sys.stderr)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    head = "| stack | " + " | ".join(m for m, _ in MODES) + " |"
    print(head)
    print("|" + "---|" * (len(MODES) + 1))
    for s in stacks:
        base = statistics.median(results[s][MODES[0][0]])
        cells = []
        for m, _ in MODES:
            med = statistics.median(results[s][m])
            cells.append(f"{med:,.0f}" + ("" if m == MODES[0][0] else f" ({med / base:.2f}×)"))
        print(f"| {s} | " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
