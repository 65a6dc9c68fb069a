#!/usr/bin/env python3
"""tierlab serve vs nbdkit, side by side: fio's nbd engine against
`tierlab serve` (passthrough over RAM, and optionally other stacks) and
`nbdkit memory`, alternating whole runs so both see the same machine load.

    python3 scripts/bench_serve.py [--runs 3] [--runtime-s 5] [--size 256MiB]
        [--tierlab target/release/tierlab] [--stacks ram,cache-ram,...] [--json out.json]

Prints a Markdown table (median IOPS / MB/s over the runs, and the ratio
tierlab / nbdkit) for docs/benchmarks.md. Needs fio (with its nbd engine)
and nbdkit; both from Debian (scripts/setup.sh installs them).
"""

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

JOBS = [
    # name, rw, bs, iodepth
    ("4k randread QD1", "randread", "4k", 1),
    ("4k randread QD32", "randread", "4k", 32),
    ("4k randwrite QD1", "randwrite", "4k", 1),
    ("4k randwrite QD32", "randwrite", "4k", 32),
    ("1M write QD8", "write", "1m", 8),
]

# Stacks tierlab serves, all in RAM so the comparison is the server's own
# cost (the protocol, the loop, the policy), not a disk's.
STACKS = {
    "ram": """
[[devices]]
name = "ram"
path = "ram"
capacity_bytes = {size}
""",
    "cache-ram": """
[[devices]]
name = "cache"
path = "ram"
capacity_bytes = {quarter}
[[devices]]
name = "backing"
path = "ram"
capacity_bytes = {size}
[policy]
kind = "cache"
capacity_bytes = {quarter}
write_mode = "write-back"
""",
    "atsmf-ram": """
[[devices]]
name = "memory"
path = "ram"
capacity_bytes = {atsmf_memory}
[[devices]]
name = "flash"
path = "ram"
capacity_bytes = {size}
[policy]
kind = "atsmf"
sub_lun_size_bytes = "4MiB"
period_s = 2.0
collect_s = 2.0
buffer_bytes = "4MiB"
memory_cap_bytes = {quarter}
""",
    "hswd-ram": """
[[devices]]
name = "pcache"
path = "ram"
capacity_bytes = {hswd_pcache_device}
[[devices]]
name = "nregion"
path = "ram"
capacity_bytes = {size}
[policy]
kind = "hswd"
pcache_bytes = {quarter}
band_bytes = "4MiB"
""",
}


def parse_size(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if text.endswith(u):
            return int(text[: -len(u)]) * m
    return int(text)


def wait_for_socket(path, proc, what):
    for _ in range(200):
        if os.path.exists(path):
            return
        if proc.poll() is not None:
            sys.exit(f"bench_serve: {what} exited: {proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.05)
    sys.exit(f"bench_serve: {what} did not create {path}")


def start_nbdkit(sock, size):
    p = subprocess.Popen(
        ["nbdkit", "--foreground", "--exit-with-parent", "-U", sock, "memory", str(size)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for_socket(sock, p, "nbdkit")
    return p, f"nbd+unix:///?socket={sock}"


def start_tierlab(tierlab, sock, config):
    p = subprocess.Popen(
        [tierlab, "serve", config, "--unix", sock, "--io-threads", "0", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for_socket(sock, p, "tierlab serve")
    return p, f"nbd+unix:///tierlab?socket={sock}"


def stop(p):
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def fio(uri, rw, bs, iodepth, size, runtime_s, prefill):
    common = [
        "fio",
        "--name=bench",
        "--ioengine=nbd",
        f"--uri={uri}",
        f"--size={size}",
        "--output-format=json",
    ]
    if prefill:
        # Reads of never-written ranges are free on both servers: write first.
        subprocess.run(
            common + ["--rw=write", "--bs=1m", "--iodepth=8"],
            check=True,
            capture_output=True,
        )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        common
        + [
            f"--rw={rw}",
            f"--bs={bs}",
            f"--iodepth={iodepth}",
            "--time_based",
            f"--runtime={runtime_s}",
            "--ramp_time=1",
            "--randrepeat=0",
            "--norandommap",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # The nbd engine prints "fio: connected to NBD server" before the JSON.
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    job = json.loads(out[out.index("{"):])["jobs"][0]
    side = job["read"] if rw.endswith("read") else job["write"]
    # The client's (fio + libnbd) CPU per IO: when it is ~1 s per second,
    # the client, not the server, sets the IOPS.
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ios = max(side["total_ios"], 1)
    return side["iops"], side["bw_bytes"] / 1e6, cpu_s / ios * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--runtime-s", type=int, default=5)
    ap.add_argument("--size", default="256MiB")
    ap.add_argument("--tierlab", default="target/release/tierlab")
    ap.add_argument("--stacks", default="ram", help="comma list of: " + ", ".join(STACKS))
    ap.add_argument("--json", help="also write the raw numbers here")
    args = ap.parse_args()
    for tool in ("fio", "nbdkit"):
        if not shutil.which(tool):
            sys.exit(f"bench_serve: {tool} not found (scripts/setup.sh installs it)")
    size = parse_size(args.size)
    quarter = size // 4
    fmt = {
        "size": size,
        "quarter": quarter,
        "atsmf_memory": quarter + (4 << 20),
        # metadata area + data + RCache: generous
        "hswd_pcache_device": quarter + (16 << 20),
    }
    stacks = [s for s in args.stacks.split(",") if s]
    for s in stacks:
        if s not in STACKS:
            sys.exit(f"bench_serve: unknown stack {s!r}; allowed: {', '.join(STACKS)}")
    tmp = tempfile.mkdtemp(prefix="bench-serve-")
    configs = {}
    for s in stacks:
        path = os.path.join(tmp, f"{s}.toml")
        with open(path, "w") as f:
            f.write(STACKS[s].format(**fmt))
        configs[s] = path
    servers = ["nbdkit"] + [f"tierlab {s}" for s in stacks]
    results = {name: {srv: [] for srv in servers} for name, *_ in JOBS}
    for run in range(args.runs):
        for name, rw, bs, depth in JOBS:
            # Alternate the order each run so neither side always goes first.
            order = servers if run % 2 == 0 else list(reversed(servers))
            for srv in order:
                sock = os.path.join(tmp, "s.sock")
                if os.path.exists(sock):
                    os.unlink(sock)
                if srv == "nbdkit":
                    p, uri = start_nbdkit(sock, size)
                else:
                    p, uri = start_tierlab(args.tierlab, sock, configs[srv.split()[1]])
                try:
                    iops, mbs, client_us = fio(
                        uri, rw, bs, depth, size, args.runtime_s, prefill=rw.endswith("read")
                    )
                finally:
                    stop(p)
                results[name][srv].append((iops, mbs, client_us))
                print(f"run {run + 1}/{args.runs} {name:18} {srv:18} {iops:10.0f} IOPS {mbs:8.1f} MB/s"
                      f"  client {client_us:6.2f} us CPU/IO", file=sys.stderr)
    print(f"| workload | " + " | ".join(servers) + " | " +
          " | ".join(f"{s} / nbdkit" for s in servers[1:]) + " |")
    print("|---" * (1 + 2 * len(servers) - 1) + "|")
    for name, rw, bs, depth in JOBS:
        med = {srv: (statistics.median(x[0] for x in results[name][srv]),
                     statistics.median(x[1] for x in results[name][srv])) for srv in servers}
        unit = (lambda v: f"{v[1]:.0f} MB/s") if bs == "1m" else (lambda v: f"{v[0] / 1000:.1f} K")
        cells = [unit(med[s]) for s in servers]
        ratios = [f"{med[s][0] / med['nbdkit'][0]:.2f}×" for s in servers[1:]]
        print(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    print()
    print("Client (fio + libnbd) CPU µs per IO, median:")
    print("| workload | " + " | ".join(servers) + " |")
    print("|---" * (1 + len(servers)) + "|")
    for name, *_ in JOBS:
        cpu = [statistics.median(x[2] for x in results[name][srv]) for srv in servers]
        print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cpu) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
