"""``tierlab bench --compare``: every tierlab benchmark next to its peer,
alternating in one run, reported as ratios.

These machines are shared and noisy, so absolute numbers move by tens of
percent between runs; a ratio of two sides measured round by round in the
same minutes does not. Each *case* has a tierlab side and a peer side (fio
for the real data path, libCacheSim for caches, nbdkit for ``serve``,
another tierlab stack or model where no outside tool does the same job);
each round runs both, in alternating order, and the medians over the rounds
are compared. docs/benchmarks.md carries the table this prints, with the
command and the machine.

    tierlab bench --compare [--only real,cache] [--rounds 3] [--quick] [--out DIR]
    tierlab bench --compare --list

From Python: ``tierlab.bench.compare(only=["cache"], rounds=3)`` returns a
DataFrame with one row per compared metric (columns in :data:`COLUMNS`).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import math
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import _native

#: Columns of :func:`compare`'s table (also ``bench.csv``).
COLUMNS = [
    "case",
    "metric",
    "tierlab",
    "peer_name",
    "peer",
    "ratio",
    "target",
    "verdict",
    "rounds",
    "note",
]

Metrics = dict[str, float]


@dataclass
class Check:
    """How a metric of the two sides is compared.

    ``kind``: ``ratio_min`` (tierlab / peer ≥ bound: throughput),
    ``ratio_max`` (tierlab / peer ≤ bound: cost), ``diff_max`` (tierlab −
    peer ≤ bound, in the metric's unit: added latency), ``equal`` (the two
    medians equal to ``bound`` decimals), ``info`` (no target; the ratio is
    reported)."""

    metric: str
    kind: str
    bound: float = 0.0

    def target(self) -> str:
        return {
            "ratio_min": f"≥ {self.bound:.3g}×",
            "ratio_max": f"≤ {self.bound:g}×",
            "diff_max": f"≤ +{self.bound:g}",
            "equal": "equal" if self.bound == 0 else f"equal to {self.bound:g} decimals",
            "info": "",
        }[self.kind]

    def verdict(self, ours: float, peer: float) -> str:
        if self.kind == "info":
            return ""
        ok = {
            "ratio_min": lambda: ours >= self.bound * peer,
            "ratio_max": lambda: ours <= self.bound * peer,
            "diff_max": lambda: ours - peer <= self.bound,
            "equal": lambda: round(ours, int(self.bound)) == round(peer, int(self.bound)),
        }[self.kind]()
        return "met" if ok else "not met"


@dataclass
class Case:
    """One comparison: two sides measured round by round."""

    name: str
    title: str
    peer_name: str
    tierlab: Callable[[], Metrics]
    #: None: tierlab alone (no tool does the same job); its numbers are
    #: reported as measured, without a ratio.
    peer: Callable[[], Metrics] | None
    #: Empty: every metric the tierlab side returns, as ``info``.
    checks: list[Check]
    note: str = ""


@dataclass
class Group:
    """Cases that share their inputs (a trace, a file), made once by
    ``build``; ``needs`` returns why the group cannot run here, or None."""

    name: str
    about: str
    needs: Callable[[], str | None]
    build: Callable[[Context], list[Case]]


@dataclass
class Context:
    dir: Path
    quick: bool
    log: Callable[[str], None] = field(default=lambda s: None)
    #: Inputs a group makes outside ``dir`` (a file in /dev/shm) are
    #: entered here and removed when the run ends, failed or not.
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


# --- measuring ---------------------------------------------------------------


def _cpu_s(who: int) -> float:
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds a live process has used so far, all its threads
    (/proc/PID/stat utime + stime, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def _quiet_fds() -> Iterator[Path]:
    """Send file descriptors 1 and 2 (where the in-process CLI prints) to a
    file for the duration; yields the file, so a failure can show it."""
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.NamedTemporaryFile("w+b", prefix="tierlab-bench-", suffix=".log", delete=False) as log:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            yield Path(log.name)
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _cli(args: Sequence[str]) -> str:
    """Run the tierlab CLI in this process with its output captured; return
    that output, or raise with it when the command fails."""
    try:
        with _quiet_fds() as log:
            code = _native.run_cli([str(a) for a in args])
        text = log.read_text(errors="replace")
    finally:
        with contextlib.suppress(NameError, OSError):
            log.unlink()
    if code != 0:
        raise RuntimeError(f"tierlab {' '.join(map(str, args))} exited {code}:\n{text[-4000:]}")
    return text


def _timed_cli(args: Sequence[str]) -> tuple[float, float]:
    """(wall s, CPU s of this process) of one in-process CLI run."""
    cpu0, t0 = _cpu_s(resource.RUSAGE_SELF), time.perf_counter()
    _cli(args)
    return time.perf_counter() - t0, _cpu_s(resource.RUSAGE_SELF) - cpu0


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _have(*tools: str) -> str | None:
    missing = [t for t in tools if not shutil.which(t)]
    return f"{', '.join(missing)} not found (scripts/setup.sh installs it)" if missing else None


def _have_libcachesim() -> str | None:
    try:
        import libcachesim  # noqa: F401
    except ImportError as e:
        return f"the libcachesim package is not installed ({e}); pip install 'tierlab[dev]'"
    return None


def _pin_cpu() -> int:
    """The CPU of the pinned cases: the last this process may use."""
    return max(os.sched_getaffinity(0))


@contextlib.contextmanager
def _pinned(on: bool) -> Iterator[None]:
    """Confines the calling thread to `_pin_cpu()` while on; threads it
    starts, processes it forks and the kernel's io_uring workers of either
    inherit the mask. Pinned, a hand-off between two of them is a context
    switch on one CPU instead of the wake-up of an idle vCPU (~20 µs on a VM
    without guest halt-polling, which dominates a QD1 round trip)."""
    if not on:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {_pin_cpu()})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# --- real data path: tierlab run vs fio ---------------------------------------

_REAL_FILE_BYTES = 1 << 30


def _real_needs() -> str | None:
    if why := _have("fio"):
        return why
    if not os.path.isdir("/dev/shm"):
        return "/dev/shm is missing (the real-path cases run on a tmpfs file)"
    try:
        free = shutil.disk_usage("/dev/shm").free
    except OSError as e:
        return f"/dev/shm: {e}"
    if free < 2 * _REAL_FILE_BYTES:
        return f"/dev/shm has {free >> 20} MiB free, the real-path cases need {2 * _REAL_FILE_BYTES >> 20}"
    return None


def _real_cases(ctx: Context) -> list[Case]:
    ios = 60_000 if ctx.quick else 300_000
    shm = Path(ctx.resources.enter_context(tempfile.TemporaryDirectory(prefix="tierlab-bench-", dir="/dev/shm")))
    data = shm / "real.img"
    # A written file: reads of holes in tmpfs would cost nothing.
    with open(data, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(_REAL_FILE_BYTES >> 20):
            f.write(chunk)
    ctx.log(f"real: {data} ({_REAL_FILE_BYTES >> 20} MiB, written), {ios:,} IOs per run")

    def tierlab_side(
        rw: str, depth: int, engine: str, pin: bool = False, extra: tuple[str, ...] = ()
    ) -> Callable[[], Metrics]:
        read_ratio = 1.0 if rw == "read" else 0.0
        cfg = ctx.dir / f"real-{rw}-{depth}-{engine}.toml"
        cfg.write_text(
            f"""seed = 1
[[devices]]
name = "shm"
path = "{data}"
[policy]
kind = "passthrough"
[[tenants]]
name = "t"
workload = {{ generator = "uniform", params = {{ count = {ios}, region_size_bytes = {_REAL_FILE_BYTES}, read_ratio = {read_ratio}, size_bytes = "4k" }} }}
driver = {{ mode = "afap", iodepth = {depth} }}
[output]
interval_s = 60.0
"""
        )
        out = ctx.dir / f"real-out-{rw}-{depth}-{engine}"

        def run() -> Metrics:
            threads = "0" if engine == "inline" else str(depth)
            eng = "auto" if engine == "inline" else engine
            with _pinned(pin):
                wall, cpu = _timed_cli(
                    ["run", cfg, "--out", out, "--io-engine", eng, "--io-threads", threads, "--drain-s", "1", "-q", *extra]
                )
            s = _summary(out)
            n = s["ios"]
            return {"IOPS": s["iops"], "µs per IO": 1e6 / s["iops"], "CPU µs per IO": cpu * 1e6 / n}

        return run

    def fio_side(rw: str, depth: int, engine: str, pin: bool = False) -> Callable[[], Metrics]:
        def run() -> Metrics:
            cpu0 = _cpu_s(resource.RUSAGE_CHILDREN)
            with _pinned(pin):
                res = subprocess.run(
                    [
                        "fio",
                        "--name=bench",
                        f"--filename={data}",
                        f"--size={_REAL_FILE_BYTES}",
                        "--direct=1",
                        f"--ioengine={engine}",
                        f"--rw=rand{rw}",
                        "--bs=4k",
                        f"--iodepth={depth}",
                        f"--number_ios={ios}",
                        "--norandommap",
                        "--randrepeat=0",
                        "--output-format=json",
                    ],
                    capture_output=True,
                    text=True,
                )
            if res.returncode != 0:
                raise RuntimeError(f"fio failed ({res.returncode}):\n{res.stderr[-2000:]}")
            cpu = _cpu_s(resource.RUSAGE_CHILDREN) - cpu0
            job = json.loads(res.stdout[res.stdout.index("{") :])["jobs"][0]
            side = job["read" if rw == "read" else "write"]
            n = max(side["total_ios"], 1)
            return {"IOPS": side["iops"], "µs per IO": 1e6 / side["iops"], "CPU µs per IO": cpu * 1e6 / n}

        return run

    cases = []
    for rw in ("read", "write"):
        cases.append(
            Case(
                name=f"real-uring-qd32-{rw}",
                title=f"4 KiB random {rw}s, QD32, io_uring, O_DIRECT on a 1 GiB /dev/shm file",
                peer_name="fio io_uring",
                tierlab=tierlab_side(rw, 32, "uring"),
                peer=fio_side(rw, 32, "io_uring"),
                checks=[Check("IOPS", "ratio_min", 0.9), Check("CPU µs per IO", "ratio_max", 1.2)],
            )
        )
    cases.append(
        Case(
            name="real-uring-qd1-read",
            title="4 KiB random reads, QD1, io_uring (added latency per IO)",
            peer_name="fio io_uring",
            tierlab=tierlab_side("read", 1, "uring"),
            peer=fio_side("read", 1, "io_uring"),
            checks=[Check("µs per IO", "diff_max", 1.0), Check("CPU µs per IO", "ratio_max", 1.2)],
        )
    )
    cases.append(
        Case(
            name="real-uring-qd1-read-pinned",
            title=f"4 KiB random reads, QD1, io_uring, both tools pinned to CPU {_pin_cpu()} (added latency per IO)",
            peer_name="fio io_uring",
            tierlab=tierlab_side("read", 1, "uring", pin=True),
            peer=fio_side("read", 1, "io_uring", pin=True),
            checks=[Check("µs per IO", "diff_max", 1.0), Check("CPU µs per IO", "ratio_max", 1.2)],
        )
    )
    cases.append(
        Case(
            # What the default poll before sleeping buys (docs/real.md,
            # "Waiting for completions"): tierlab sleeping at once, as fio does.
            name="real-uring-qd1-read-sleeping",
            title="4 KiB random reads, QD1, io_uring, tierlab with --wait-poll-us 0 (sleeps at once, as fio)",
            peer_name="fio io_uring",
            tierlab=tierlab_side("read", 1, "uring", extra=("--wait-poll-us", "0")),
            peer=fio_side("read", 1, "io_uring"),
            checks=[Check("µs per IO", "info"), Check("CPU µs per IO", "info")],
        )
    )
    cases.append(
        Case(
            name="real-inline-qd1-read",
            title="4 KiB random reads, QD1, inline pread (added latency per IO)",
            peer_name="fio psync",
            tierlab=tierlab_side("read", 1, "inline"),
            peer=fio_side("read", 1, "psync"),
            checks=[Check("µs per IO", "diff_max", 1.0)],
        )
    )
    return cases


# --- caches: tierlab cache vs libCacheSim --------------------------------------

_OG_DTYPE = [("clock_time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")]


def _cache_cases(ctx: Context) -> list[Case]:
    import libcachesim as lcs
    import numpy as np

    from ._generators import generate_to
    from ._cache import cache_sim
    from .native import load_native

    requests = 2_000_000 if ctx.quick else 10_000_000
    native = ctx.dir / "zipf.tlt"
    og = ctx.dir / "zipf.oracleGeneral"
    generate_to(
        native,
        "zipf",
        seed=42,
        count=requests,
        theta=0.99,
        size_bytes="4k",
        region_size_bytes="4g",
    )
    offsets = load_native(native).records["offset_bytes"]
    rec = np.zeros(len(offsets), _OG_DTYPE)
    rec["obj_id"] = offsets // 4096
    rec["obj_size"] = 1
    rec["next_access_vtime"] = -1
    rec.tofile(og)
    footprint = int(len(np.unique(rec["obj_id"])))
    del rec, offsets
    ctx.log(f"cache: {requests:,} single-page Zipf(0.99) requests over 4 GiB, {footprint:,} distinct pages")

    # Both simulations run on this thread (tierlab's with the GIL released),
    # so the thread's CPU time is each side's own work, whatever else the
    # machine runs; wall time is reported next to it.
    def tierlab_side(policy: str, pages: int) -> Callable[[], Metrics]:
        def run() -> Metrics:
            t0, c0 = time.perf_counter(), time.thread_time()
            df = cache_sim(native, policy, f"{pages}pages", format="native")
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            assert int(df["requests"].iloc[0]) == requests
            misses = int(df["misses"].iloc[0])
            return {
                "requests/s": requests / wall,
                "requests per CPU s": requests / cpu,
                "misses": misses,
                "miss ratio": misses / requests,
            }

        return run

    def lcs_side(policy: str, pages: int) -> Callable[[], Metrics]:
        # libCacheSim's hash table sized to the cache: much faster than its
        # default 2^24 buckets for small caches, so the fair peer.
        hashpower = max(1, (pages - 1).bit_length()) + 1
        make = {"lru": lcs.LRU, "s3fifo": lcs.S3FIFO}[policy]

        def run() -> Metrics:
            cache = make(cache_size=pages, hashpower=hashpower)
            reader = lcs.TraceReader(str(og), lcs.TraceType.ORACLE_GENERAL_TRACE)
            t0, c0 = time.perf_counter(), time.thread_time()
            miss_ratio, _ = cache.process_trace(reader)
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            # libCacheSim reports a ratio; its miss count is that times the
            # requests (exact in a double for these counts).
            return {
                "requests/s": requests / wall,
                "requests per CPU s": requests / cpu,
                "misses": round(miss_ratio * requests),
                "miss ratio": float(miss_ratio),
            }

        return run

    cases = []
    for pct in (1, 10):
        pages = max(1, footprint * pct // 100)
        cases.append(
            Case(
                name=f"lru-{pct}pct",
                title=f"cache-only LRU at {pct} % of the footprint ({pages:,} pages)",
                peer_name=f"libCacheSim {getattr(lcs, '__version__', '')} LRU, sized table".replace("  ", " "),
                tierlab=tierlab_side("lru", pages),
                peer=lcs_side("lru", pages),
                checks=[
                    Check("requests per CPU s", "ratio_min", 2.0),
                    Check("requests/s", "ratio_min", 2.0),
                    Check("misses", "equal", 0),
                ],
            )
        )
    for pct in (1, 10):
        pages = max(1, footprint * pct // 100)
        cases.append(
            Case(
                name=f"s3fifo-{pct}pct",
                title=f"cache-only S3-FIFO at {pct} % of the footprint ({pages:,} pages)",
                peer_name="libCacheSim S3-FIFO",
                tierlab=tierlab_side("s3fifo", pages),
                peer=lcs_side("s3fifo", pages),
                checks=[Check("misses", "equal", 0), Check("requests per CPU s", "info")],
            )
        )
    return cases


# --- simulator: stacks and device models against each other --------------------


def _sim_cases(ctx: Context) -> list[Case]:
    configs = _repo_file("benches")
    rate = 400 if ctx.quick else 2000  # IOPS of the 100-minute src1_0-like window
    trace = ctx.dir / "src1_0.tlt"
    _cli(["trace", "gen", "atsmf.src1_0", f"rate_iops={rate}", "--seed", "1", "--out", trace])
    ctx.log(f"sim: src1_0-like trace at {rate} IOPS for 100 min ({trace})")

    def stack(config: str, extra: Sequence[str] = ()) -> Callable[[], Metrics]:
        out = ctx.dir / f"sim-{Path(config).stem}{len(extra)}"

        def run() -> Metrics:
            wall, _ = _timed_cli(
                ["sim", config, "--set", f"tenants.0.workload.trace={trace}", *extra, "--out", out, "-q"]
            )
            return {"simulated IOs/s": _summary(out)["ios"] / wall}

        return run

    flash = _repo_file("configs/ssdraid-bench-1tb.toml")
    flash_ios = 1_000_000 if ctx.quick else 5_000_000

    def flash_side(extra: Sequence[str]) -> Callable[[], Metrics]:
        out = ctx.dir / f"flash{len(extra)}"

        def run() -> Metrics:
            wall, _ = _timed_cli(
                ["sim", flash, "--set", f"tenants.0.workload.params.count={flash_ios}", *extra, "--out", out, "-q"]
            )
            return {"simulated IOs/s": _summary(out)["ios"] / wall}

        return run

    return [
        Case(
            name="sim-atsmf",
            title="simulator: ATSMF stack vs the linear memory + NVMe stack, same trace",
            peer_name="tierlab linear stack",
            tierlab=stack(str(configs / "atsmf-trace.toml")),
            peer=stack(str(configs / "memory-nvme-trace.toml")),
            checks=[Check("simulated IOs/s", "info")],
            note="the peer is tierlab's own linear stack: the ratio is what ATSMF's logic costs",
        ),
        Case(
            name="sim-flash-ssd",
            title=f"simulator: detailed flash SSD (tlc-nvme) vs the queueing SSD model, {flash_ios:,} random 4 KiB IOs",
            peer_name="tierlab ssd (intel-p3700)",
            tierlab=flash_side(()),
            peer=flash_side(("--set", "devices.0.model=ssd", "--set", "devices.0.preset=intel-p3700")),
            checks=[Check("simulated IOs/s", "info")],
            note="the peer is tierlab's queueing model: the ratio is what FTL, GC and die scheduling cost",
        ),
    ]


def _repo_file(rel: str) -> Path:
    """A file of the source checkout (configs/, benches/): the simulator
    cases replay the configs docs/benchmarks.md names."""
    here = Path(__file__).resolve()
    for root in [Path.cwd(), *here.parents]:
        if (root / rel).exists():
            return root / rel
    raise FileNotFoundError(f"{rel}: not found from {Path.cwd()} or above {here}; run from a tierlab checkout")


def _sim_needs() -> str | None:
    try:
        _repo_file("benches/atsmf-trace.toml")
        _repo_file("configs/ssdraid-bench-1tb.toml")
    except FileNotFoundError as e:
        return str(e)
    return None


# --- serve: tierlab serve vs nbdkit ---------------------------------------------


#: Stacks `tierlab serve` is measured with, all in RAM so the comparison
#: is the server's own cost (protocol, loop, policy), not a disk's. ``{size}``
#: is the export, ``{quarter}`` the cache / memory tier.
SERVE_STACKS = {
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

#: (case suffix, fio rw, block size, iodepth).
SERVE_JOBS = [
    ("qd1-randread", "randread", "4k", 1),
    ("qd32-randread", "randread", "4k", 32),
    ("qd1-randwrite", "randwrite", "4k", 1),
    ("qd32-randwrite", "randwrite", "4k", 32),
    ("qd8-write-1m", "write", "1m", 8),
]


def _serve_cases(ctx: Context) -> list[Case]:
    from ._serve import serve

    size = 256 << 20
    quarter = size // 4
    runtime_s = 2 if ctx.quick else 5
    configs = {}
    for name, text in SERVE_STACKS.items():
        configs[name] = ctx.dir / f"serve-{name}.toml"
        configs[name].write_text(
            text.format(
                size=size,
                quarter=quarter,
                atsmf_memory=quarter + (4 << 20),
                # metadata area + data + RCache: generous
                hswd_pcache_device=quarter + (16 << 20),
            )
        )

    def fio_nbd(uri: str, server_pid: int, rw: str, bs: str, depth: int) -> Metrics:
        common = ["fio", "--name=bench", "--ioengine=nbd", f"--uri={uri}", f"--size={size}", "--output-format=json"]
        if rw.endswith("read"):  # never-written ranges cost neither server anything
            subprocess.run(common + ["--rw=write", "--bs=1m", "--iodepth=8"], check=True, capture_output=True)
        cpu0 = _cpu_s(resource.RUSAGE_CHILDREN)
        # The server's CPU over the whole fio run (ramp included), as a
        # share of one core: what waiting (sleeping or polling) costs it.
        server0, wall0 = _proc_cpu_s(server_pid), time.monotonic()
        out = subprocess.run(
            common
            + [f"--rw={rw}", f"--bs={bs}", f"--iodepth={depth}", "--time_based", f"--runtime={runtime_s}",
               "--ramp_time=1", "--randrepeat=0", "--norandommap"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        cpu = _cpu_s(resource.RUSAGE_CHILDREN) - cpu0
        server_core = (_proc_cpu_s(server_pid) - server0) / (time.monotonic() - wall0)
        side = json.loads(out[out.index("{") :])["jobs"][0]["read" if rw.endswith("read") else "write"]
        # The client's (fio + libnbd) CPU per IO: when it nears a core per
        # second, the client, not the server, sets the pace.
        return {
            "IOPS": side["iops"],
            "MB/s": side["bw_bytes"] / 1e6,
            "client CPU µs per IO": cpu * 1e6 / max(side["total_ios"], 1),
            "server CPU, % of a core": 100 * server_core,
        }

    def tierlab_side(stack: str, job: tuple, pin: bool = False, wait_poll_us: int = 50) -> Callable[[], Metrics]:
        def run() -> Metrics:
            sock = ctx.dir / "tierlab.sock"
            with _pinned(pin), serve(configs[stack], unix=sock, io_threads=0, wait_poll_us=wait_poll_us) as s:
                # The server runs in this process (its CPU counts here).
                return fio_nbd(s.uri, os.getpid(), *job[1:])

        return run

    def nbdkit_side(job: tuple, pin: bool = False) -> Callable[[], Metrics]:
        def run() -> Metrics:
            with _pinned(pin):
                return nbdkit_run(job)

        return run

    def nbdkit_run(job: tuple) -> Metrics:
        sock = ctx.dir / "nbdkit.sock"
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        p = subprocess.Popen(
            ["nbdkit", "--foreground", "--exit-with-parent", "-U", str(sock), "memory", str(size)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            for _ in range(1000):
                if sock.exists() or p.poll() is not None:
                    break
                time.sleep(0.01)
            if not sock.exists():
                why = p.stderr.read() if p.poll() is not None else "no socket after 10 s"
                raise RuntimeError(f"nbdkit did not start: {why}")
            return fio_nbd(f"nbd+unix:///?socket={sock}", p.pid, *job[1:])
        finally:
            p.terminate()
            p.wait(timeout=30)

    def serve_case(name: str, title: str, tierlab: Callable[[], Metrics], peer: Callable[[], Metrics], metric: str) -> Case:
        checks = [Check(metric, "info"), Check("client CPU µs per IO", "info"), Check("server CPU, % of a core", "info")]
        return Case(name=name, title=title, peer_name="nbdkit memory", tierlab=tierlab, peer=peer, checks=checks)

    cases = []
    for stack in SERVE_STACKS:
        for job in SERVE_JOBS:
            cases.append(
                serve_case(
                    f"serve-{stack}-{job[0]}",
                    f"NBD over a Unix socket, fio {job[1]} {job[2]} QD{job[3]}, {stack} stack of 256 MiB",
                    tierlab_side(stack, job),
                    nbdkit_side(job),
                    "MB/s" if job[2] == "1m" else "IOPS",
                )
            )
    qd1 = [j for j in SERVE_JOBS if j[3] == 1]
    # QD1 with server and client on one CPU: the round trip's hand-offs are
    # context switches, not idle-vCPU wake-ups (see `_pinned`), so these
    # show each server's own cost per request.
    for job in qd1:
        cases.append(
            serve_case(
                f"serve-ram-{job[0]}-pinned",
                f"NBD over a Unix socket, fio {job[1]} {job[2]} QD1, ram stack, server and client pinned to CPU {_pin_cpu()}",
                tierlab_side("ram", job, pin=True),
                nbdkit_side(job, pin=True),
                "IOPS",
            )
        )
    # QD1 with tierlab sleeping at once in epoll, as nbdkit does: what the
    # default poll before sleeping buys (docs/serve.md, "Waiting for requests").
    for job in qd1:
        cases.append(
            serve_case(
                f"serve-ram-{job[0]}-sleeping",
                f"NBD over a Unix socket, fio {job[1]} {job[2]} QD1, ram stack, tierlab with wait_poll_us=0",
                tierlab_side("ram", job, wait_poll_us=0),
                nbdkit_side(job),
                "IOPS",
            )
        )
    return cases


def _pipeline_cases(ctx: Context) -> list[Case]:
    records = 1_000_000 if ctx.quick else 5_000_000

    def run() -> Metrics:
        # `tierlab bench`: parse and generator throughput, best of its own
        # 3 repetitions; one JSON list on stdout.
        text = _cli(["bench", "--records", str(records), "--dir", ctx.dir, "--json"])
        results = json.loads(text[text.index("[") :])
        return {f"{r['name']}, records/s": r["records_per_s"] for r in results}

    return [
        Case(
            name="pipeline",
            title=f"`tierlab bench`: reading MSR CSV and native traces, stats, generators; {records:,} records",
            peer_name="",
            tierlab=run,
            peer=None,
            checks=[],
            note="no peer: these are tierlab's own rates (the `trace` group compares parsing with libCacheSim)",
        )
    ]


def _trace_cases(ctx: Context) -> list[Case]:
    from libcachesim import ReaderInitParam, TraceType
    from libcachesim.libcachesim_python import Reader

    records = 2_000_000 if ctx.quick else 10_000_000
    csv = ctx.dir / "bench.csv"
    native = ctx.dir / "bench.tlt"
    # `tierlab bench`'s input: an MSR Cambridge CSV with realistic field
    # widths (18-digit filetimes, 11-digit offsets), and the same records
    # in the native format.
    for path in (csv, native):
        _cli(["bench", "--records", str(records), "--write-input", path])
    for path in (csv, native):  # warm the page cache: parsing is measured
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    ctx.log(f"trace: {records:,} records, {csv.stat().st_size >> 20} MiB of MSR CSV ({csv})")

    def stats() -> Metrics:
        wall, cpu = _timed_cli(["trace", "stats", csv, "--json"])
        return {"records/s": records / wall, "records per CPU s": records / cpu}

    def libcachesim_reader() -> Metrics:
        # libCacheSim's C loop reading and parsing every line
        # (read_one_req), nothing else: columns 1 time, 5 offset (the
        # object id), 6 size; no header.
        params = ReaderInitParam(has_header=False, has_header_set=True, delimiter=",")
        params.time_field, params.obj_id_field, params.obj_size_field = 1, 5, 6
        reader = Reader(str(csv), TraceType.CSV_TRACE, params)
        t0, c0 = time.perf_counter(), _cpu_s(resource.RUSAGE_SELF)
        count = reader.get_num_of_req()
        wall, cpu = time.perf_counter() - t0, _cpu_s(resource.RUSAGE_SELF) - c0
        if count != records:
            raise RuntimeError(f"libCacheSim read {count:,} of the CSV's {records:,} records")
        return {"records/s": records / wall, "records per CPU s": records / cpu}

    def cache(path: Path) -> Callable[[], Metrics]:
        def run() -> Metrics:
            wall, cpu = _timed_cli(["cache", path, "--policy", "lru", "--capacity", "64MiB", "--json"])
            return {"records/s": records / wall, "records per CPU s": records / cpu}

        return run

    return [
        Case(
            name="trace-stats-csv",
            title=f"`tierlab trace stats` on a {records:,}-record MSR CSV (requests, bytes, footprint, ...)",
            peer_name="libCacheSim CSV reader (read only)",
            tierlab=stats,
            peer=libcachesim_reader,
            checks=[Check("records/s", "ratio_min", 4.0), Check("records per CPU s", "info")],
            note="tierlab parses and counts distinct blocks; the peer only reads and parses",
        ),
        Case(
            name="trace-cache-csv",
            title=f"`tierlab cache` (LRU, 64 MiB) on the MSR CSV vs the same run on the native trace",
            peer_name="tierlab cache on native",
            tierlab=cache(csv),
            peer=cache(native),
            checks=[Check("records/s", "ratio_min", 1 / 1.5), Check("records per CPU s", "info")],
            note="target: within 1.5× of the native run's time",
        ),
    ]


# --- apps and disk: served stacks on a real disk (issue 35) ----------------------
#
# The caches' promise is a faster disk: a stack whose cache device is a
# /dev/shm file and whose backing device is a file on the machine's disk,
# served by `tierlab serve`, against passthrough over the same disk (and
# over RAM, and nbdkit's file plugin). `apps` puts ext4 on the served
# export the way docs/serve.md does without an nbd module (nbdfuse, a loop
# device, mkfs.ext4, mount) and runs what users run: dd and SQLite. `disk`
# drives the export with fio's nbd engine, no filesystem.

#: The export of every disk-backed stack: 1 GiB (the 96 MiB dd, the SQLite
#: database and ext4's metadata fit many times over).
_DISK_EXPORT = 1 << 30
#: The caches: 256 MiB of slots (the 96 MiB dd fits in the cache).
_DISK_CACHE = 256 << 20
#: Their cache device: the slots plus the metadata area of the persistent
#: page cache (2.0 MiB for 256 MiB) or HSWD's PCache (also 2.0 MiB).
_DISK_CACHE_DEVICE = _DISK_CACHE + (4 << 20)
#: Cold sequential reads: a written file of this size on the disk.
_COLD_BYTES = 256 << 20
#: Where the backing files go: a directory on the machine's disk (not a
#: tmpfs), as the issue's reporter had it.
_DISK_DIR = "/var/tmp"
#: The loop device reads and writes nbdfuse's file with O_DIRECT
#: (`losetup --direct-io=on`), as docs/serve.md and the interop tests do.
_LOOP_DIRECT_IO = True

#: Stacks over real files. ``{disk}``: a fresh directory on the disk,
#: ``{shm}``: one in /dev/shm; every file is made again (sparse) before each
#: run, so every run starts from the same empty devices.
DISK_STACKS = {
    # Passthrough over a disk file (configs/serve-file.toml): the peer of
    # the caches, and tierlab's side against nbdkit's file plugin.
    "file": """
[[devices]]
name = "disk"
path = "{disk}/file.img"
capacity_bytes = {size}
create = true
""",
    "ram": """
[[devices]]
name = "ram"
path = "ram"
capacity_bytes = {size}
""",
    # Passthrough over a file on the caches' device (/dev/shm).
    "shm": """
[[devices]]
name = "shm"
path = "{shm}/shm.img"
capacity_bytes = {size}
create = true
""",
    # configs/serve-cache-persistent.toml, sized up.
    "cache": """
[[devices]]
name = "cache"
path = "{shm}/cache.img"
capacity_bytes = {cache_device}
create = true
[[devices]]
name = "backing"
path = "{disk}/cache-backing.img"
capacity_bytes = {size}
create = true
[policy]
kind = "cache"
capacity_bytes = {cache}
write_mode = "write-back"
eviction = "lru"
persistent = true
""",
    # configs/serve-flashcache.toml, sized up (128 sets of 512 blocks).
    "flashcache": """
[[devices]]
name = "ssd"
path = "{shm}/flashcache-ssd.img"
capacity_bytes = {cache}
create = true
[[devices]]
name = "disk"
path = "{disk}/flashcache-disk.img"
capacity_bytes = {size}
create = true
[policy]
kind = "flashcache"
capacity_bytes = {cache}
""",
    # configs/serve-hswd.toml, sized up.
    "hswd": """
[[devices]]
name = "pcache"
path = "{shm}/hswd-pcache.img"
capacity_bytes = {cache_device}
create = true
[[devices]]
name = "nregion"
path = "{disk}/hswd-nregion.img"
capacity_bytes = {size}
create = true
[policy]
kind = "hswd"
pcache_bytes = {cache}
band_bytes = "4MiB"
mapping = "fully"
band_selection = "most"
clean_start_pct = 80
clean_stop_pct = 60
""",
    # The write-back cache above with every write-back default (watermarks
    # 50 % / 25 %, write-back paced while the host is busy, idle flushing
    # after 1 s): the drain case bursts it to ~90 % dirty, then reads while
    # it drains.
    "cache-burst": """
[[devices]]
name = "cache"
path = "{shm}/cache.img"
capacity_bytes = {cache_device}
create = true
[[devices]]
name = "backing"
path = "{disk}/cache-backing.img"
capacity_bytes = {size}
create = true
[policy]
kind = "cache"
capacity_bytes = {cache}
write_mode = "write-back"
eviction = "lru"
persistent = true
""",
    # Passthrough over the written file of the cold reads.
    "cold": """
[[devices]]
name = "disk"
path = "{disk}/cold.img"
""",
}

#: What the caching stacks are called in titles.
_STACK_TITLES = {
    "cache": "write-back cache (persistent)",
    "flashcache": "flashcache",
    "hswd": "HSWD",
}


def _fs_type(path: str) -> str:
    """The filesystem type of the mount holding ``path`` (/proc/mounts,
    longest mount point that is a prefix)."""
    real = os.path.realpath(path)
    best, kind = "", "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) < 3:
                continue
            mnt = parts[1].replace("\\040", " ")
            inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best):
                best, kind = mnt, parts[2]
    return kind


def _disk_dirs_needs() -> str | None:
    """The backing files need a real disk, the cache devices /dev/shm."""
    if not os.path.isdir(_DISK_DIR):
        return f"{_DISK_DIR} is missing (the backing files go on the machine's disk there)"
    kind = _fs_type(_DISK_DIR)
    if kind in ("tmpfs", "ramfs"):
        return f"{_DISK_DIR} is on {kind}, not a disk (the backing files must be on the machine's disk)"
    if shutil.disk_usage(_DISK_DIR).free < 4 * _DISK_EXPORT:
        return f"{_DISK_DIR} has less than {4 * _DISK_EXPORT >> 20} MiB free"
    if not os.path.isdir("/dev/shm"):
        return "/dev/shm is missing (the cache devices are /dev/shm files)"
    if shutil.disk_usage("/dev/shm").free < 2 * _DISK_EXPORT:
        return f"/dev/shm has less than {2 * _DISK_EXPORT >> 20} MiB free"
    return None


def _apps_needs() -> str | None:
    if why := _have("nbdfuse", "fusermount3", "losetup", "mkfs.ext4", "mount", "umount", "dd", "nbdkit"):
        return why
    if os.geteuid() != 0:
        return "needs root (losetup, mount, drop_caches)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (nbdfuse)"
    if why := _disk_dirs_needs():
        return why
    probe = subprocess.run(["losetup", "-f"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"no free loop device (losetup -f: {probe.stderr.strip()})"
    return None


def _disk_needs() -> str | None:
    if why := _have("fio", "nbdkit", "qemu-io"):
        return why
    if subprocess.run(["fio", "--enghelp=nbd"], capture_output=True).returncode != 0:
        return "this fio has no nbd IO engine (fio --enghelp=nbd fails)"
    return _disk_dirs_needs()


def _run(cmd: Sequence, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a command; raise RuntimeError with its output when it fails or
    times out."""
    args = [str(a) for a in cmd]
    try:
        res = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"`{' '.join(args)}` timed out after {timeout} s") from e
    if res.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` exited {res.returncode}: {(res.stderr or res.stdout).strip()[-2000:]}")
    return res


def _wait_for(what: str, ready: Callable[[], bool], proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    """Wait until ``ready()``; raise with the process's log when it exits
    first or the time is up."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready after {timeout} s: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.02)


def _stop(proc: subprocess.Popen, what: str, log: Path, timeout: float = 300) -> None:
    """SIGINT (a served stack writes its dirty data back, then exits 0);
    killed when it does not end in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"{what}: still running {timeout} s after SIGINT (killed)") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{what} exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")


@dataclass
class _Server:
    """A running NBD server: what clients connect to and the process whose
    CPU is the server's."""

    uri: str
    pid: int
    #: tierlab only: the server's summary.json, after it stopped.
    summary: dict = field(default_factory=dict)


@contextlib.contextmanager
def _tierlab_server(config: Path, work: Path, sock: Path, stats_interval_s: float = 600) -> Iterator[_Server]:
    """``tierlab serve CONFIG --unix SOCK --out OUT`` as a process of its
    own, as users run it (its CPU is not this process's, where SQLite and
    the measuring run); stopped with SIGINT (requests finish, dirty data is
    written back, the stores are synced) and checked to exit 0."""
    work.mkdir(parents=True, exist_ok=True)
    out, log = work / "out", work / "serve.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tierlab._cli", "serve", config, "--unix", sock, "--out", out,
             "--stats-interval-s", str(stats_interval_s)],
            stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = _Server(uri="", pid=proc.pid)
    try:
        def banner() -> bool:
            text = log.read_text(errors="replace")
            return sock.exists() and "stop with" in text

        _wait_for(f"tierlab serve {config.name}", banner, proc, log)
        first = log.read_text(errors="replace").split("tierlab serve: ", 1)[1]
        server.uri = first.split()[0]
        yield server
    except BaseException:
        with contextlib.suppress(Exception):
            _stop(proc, "tierlab serve", log, timeout=60)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    _stop(proc, f"tierlab serve {config.name}", log)
    with contextlib.suppress(OSError, ValueError):
        server.summary = json.loads((out / "summary.json").read_text())


@contextlib.contextmanager
def _nbdkit_file(path: Path, work: Path, sock: Path) -> Iterator[_Server]:
    """``nbdkit file PATH`` on a Unix socket (its defaults: buffered IO,
    FLUSH = fdatasync)."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "nbdkit.log"
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    with open(log, "w") as f:
        proc = subprocess.Popen(
            ["nbdkit", "--foreground", "--exit-with-parent", "-U", str(sock), "file", str(path)],
            stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait_for("nbdkit file", sock.exists, proc, log)
        yield _Server(uri=f"nbd+unix:///?socket={sock}", pid=proc.pid)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _teardown_step(errors: list[str], what: str, fn: Callable[[], bool]) -> None:
    try:
        if not fn():
            errors.append(what)
    except Exception as e:  # noqa: BLE001 - every step runs, failed or not
        errors.append(f"{what}: {e}")


def _quiet(cmd: Sequence) -> bool:
    try:
        return subprocess.run([str(a) for a in cmd], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def _loop_on_export(uri: str, size: int, work: Path, mkfs: bool) -> Iterator[tuple[str, Path]]:
    """The export as a kernel block device without an nbd module, as
    docs/serve.md shows: nbdfuse makes it the file FUSE/nbd, a loop device
    (4 KiB sectors: the caches' NBD minimum block; direct IO per
    ``_LOOP_DIRECT_IO``) makes that a block device; with ``mkfs``, a fresh
    ext4 is mounted on it. Yields (loop device, mount point). Everything is
    undone in reverse order whatever happens — unmount (lazily when busy),
    detach the loop device, unmount nbdfuse, which then exits and closes its
    connections — and a step that fails raises after the others ran."""
    fuse, mnt = work / "fuse", work / "mnt"
    fuse.mkdir(parents=True, exist_ok=True)
    mnt.mkdir(parents=True, exist_ok=True)
    pidfile, log = work / "nbdfuse.pid", work / "nbdfuse.log"
    with contextlib.suppress(FileNotFoundError):
        pidfile.unlink()
    with open(log, "w") as f:
        proc = subprocess.Popen(
            ["nbdfuse", "-P", str(pidfile), str(fuse), uri], stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT
        )
    loop: str | None = None
    mounted = False
    failed = True
    try:
        file = fuse / "nbd"

        def ready() -> bool:
            try:
                return bool(pidfile.read_text().strip()) and file.stat().st_size == size
            except OSError:
                return False

        _wait_for("nbdfuse", ready, proc, log)
        direct = "on" if _LOOP_DIRECT_IO else "off"
        loop = _run(["losetup", f"--direct-io={direct}", "--sector-size", "4096", "-f", "--show", file]).stdout.strip()
        if mkfs:
            # Inode tables and journal written now, not by ext4lazyinit in
            # the background of the measurement.
            _run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop])
            _run(["mount", "-t", "ext4", loop, mnt])
            mounted = True
        yield loop, mnt
        failed = False
    finally:
        errors: list[str] = []
        if mounted:
            def umount() -> bool:
                for _ in range(10):
                    if _quiet(["umount", mnt]):
                        return True
                    time.sleep(0.3)
                _quiet(["umount", "-l", mnt])
                return False

            _teardown_step(errors, f"umount {mnt}", umount)
        if loop:
            def detach() -> bool:
                for _ in range(20):
                    if _quiet(["losetup", "-d", loop]):
                        return True
                    time.sleep(0.25)
                return False

            _teardown_step(errors, f"losetup -d {loop}", detach)

        def unfuse() -> bool:
            # The loop device lets go of the file asynchronously.
            ok = False
            deadline = time.monotonic() + 15
            while proc.poll() is None and time.monotonic() < deadline:
                if _quiet(["fusermount3", "-u", fuse]):
                    ok = True
                    break
                time.sleep(0.1)
            if not ok and proc.poll() is None:
                _quiet(["fusermount3", "-u", "-z", fuse])
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                ok = False
            return ok or proc.returncode == 0

        _teardown_step(errors, f"fusermount3 -u {fuse}", unfuse)
        if errors and not failed:
            raise RuntimeError(f"teardown failed: {'; '.join(errors)}")


def _fresh_files(config: str, size: int) -> None:
    """Remove the stack's files and make them again, sparse, of their
    size: every run starts from the same empty devices."""
    import tomllib

    for dev in tomllib.loads(config).get("devices", []):
        path = dev.get("path", "ram")
        if path == "ram" or not dev.get("create"):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        with open(path, "wb") as f:
            f.truncate(_bytes(dev.get("capacity_bytes", size)))


def _bytes(v: int | str) -> int:
    if isinstance(v, int):
        return v
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, scale in units.items():
        if v.endswith(unit):
            return int(v[: -len(unit)]) * scale
    return int(v)


def _drop_page_cache(path: Path) -> None:
    """Dirty pages out, then the clean ones of ``path`` dropped (every
    file's too when root can): the next read comes from the disk."""
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


@dataclass
class _DiskBench:
    """What the `apps` and `disk` cases share: the directories, each
    stack's config, the written file of the cold reads."""

    ctx: Context
    disk: Path
    shm: Path
    #: A short directory for the Unix sockets (a path there must fit
    #: sun_path's 108 bytes, which ``ctx.dir`` under pytest's may not).
    sockets: Path
    configs: dict[str, Path]
    texts: dict[str, str]
    cold: Path

    @classmethod
    def make(cls, ctx: Context) -> _DiskBench:
        disk = Path(ctx.resources.enter_context(tempfile.TemporaryDirectory(prefix="tierlab-bench-", dir=_DISK_DIR)))
        shm = Path(ctx.resources.enter_context(tempfile.TemporaryDirectory(prefix="tierlab-bench-", dir="/dev/shm")))
        sockets = Path(ctx.resources.enter_context(tempfile.TemporaryDirectory(prefix="tl-", dir="/tmp")))
        texts, configs = {}, {}
        for name, text in DISK_STACKS.items():
            texts[name] = text.format(
                disk=disk, shm=shm, size=_DISK_EXPORT, cache=_DISK_CACHE, cache_device=_DISK_CACHE_DEVICE
            )
            configs[name] = ctx.dir / f"disk-{name}.toml"
            configs[name].write_text(texts[name])
        cold = disk / "cold.img"
        with open(cold, "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(_COLD_BYTES >> 20):
                f.write(chunk)
            os.fsync(f.fileno())
        ctx.log(
            f"{ctx.dir.name}: backing files in {disk} ({_fs_type(str(disk))}), cache devices in {shm}; "
            f"{_DISK_EXPORT >> 20} MiB exports, {_DISK_CACHE >> 20} MiB caches"
        )
        return cls(ctx, disk, shm, sockets, configs, texts, cold)

    @contextlib.contextmanager
    def tierlab(self, stack: str, tag: str, stats_interval_s: float = 600) -> Iterator[_Server]:
        """The stack served, on fresh files."""
        os.sync()  # nothing of the previous run left to write back meanwhile
        _fresh_files(self.texts[stack], _DISK_EXPORT)
        work = self.ctx.dir / f"run-{tag}"
        shutil.rmtree(work, ignore_errors=True)
        sock = self.sockets / "tierlab.sock"
        with _tierlab_server(self.configs[stack], work, sock, stats_interval_s) as server:
            yield server
        self._log_summary(tag, server.summary)

    @contextlib.contextmanager
    def nbdkit(self, path: Path, tag: str) -> Iterator[_Server]:
        os.sync()
        if path != self.cold:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            with open(path, "wb") as f:
                f.truncate(_DISK_EXPORT)
        work = self.ctx.dir / f"run-{tag}"
        shutil.rmtree(work, ignore_errors=True)
        with _nbdkit_file(path, work, self.sockets / "nbdkit.sock") as server:
            yield server

    def _log_summary(self, tag: str, summary: dict) -> None:
        """One progress line per run: what the server saw and did (the
        hints when a stack is slow: IOs per device, their queue)."""
        s = summary.get("serve", {})
        if not s:
            return
        req = s.get("requests", {})
        devices = "; ".join(
            f"{d['name']} r {d.get('read_ios', 0)} w {d.get('write_ios', 0)} f {d.get('flush_ios', 0)} "
            f"queue {d.get('avg_queue_size') or 0:.0f}"
            for d in summary.get("devices", [])
        )
        # The policy's own account of the same (what bypassed it, what it
        # wrote back, how often it committed): the caches' and HSWD's names.
        pc = summary.get("run", {}).get("policy_counters", {})
        keys = ("bypassed_ios", "write_hits", "write_misses", "flush_ios", "flush_waits", "flush_commit_waits",
                "metadata_commits", "writeback_rate_waits", "rmw_count", "misses_uncached_waiting_for_commit")
        policy = ", ".join(f"{k} {pc[k]:g}" for k in keys if pc.get(k))
        self.ctx.log(
            f"  {tag}: server: {s.get('connections')} connections; requests "
            + ", ".join(f"{k} {v}" for k, v in req.items() if v)
            + f"; device IOs: {devices}; drain {s.get('drain_s') or 0:.2f} s"
            + (f"; policy: {policy}" if policy else "")
        )


#: A served stack or nbdkit, started for one run: ``server_of(tag)``.
_ServerOf = Callable[[str], contextlib.AbstractContextManager[_Server]]


def _server_share(pid: int, cpu0: float, wall0: float) -> float:
    """The server's CPU since (cpu0, wall0), % of a core."""
    return 100 * (_proc_cpu_s(pid) - cpu0) / max(time.monotonic() - wall0, 1e-9)


def _dd_mib_s(args: Sequence[str], mib: int) -> float:
    """Run dd; MiB/s from the seconds dd reports (its own clock: no exec)."""
    t0 = time.perf_counter()
    res = _run(["dd", *args], timeout=600)
    wall = time.perf_counter() - t0
    for line in res.stderr.splitlines():
        if " copied, " in line:
            with contextlib.suppress(ValueError, IndexError):
                wall = float(line.split(" copied, ")[1].split()[0].replace(",", "."))
    return mib / wall


def _sqlite_tx_s(path: Path, seconds: float) -> tuple[float, int]:
    """SQLite in WAL mode with synchronous=FULL, one single-row INSERT per
    transaction, each committed, for ``seconds``: (tx/s, transactions)."""
    import sqlite3

    db = sqlite3.connect(path, isolation_level=None)
    try:
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise RuntimeError(f"SQLite: journal_mode=WAL gave {mode!r}")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, at REAL, payload BLOB)")
        payload = os.urandom(100)

        def tx() -> None:
            db.execute("BEGIN")
            db.execute("INSERT INTO t (at, payload) VALUES (?, ?)", (time.time(), payload))
            db.execute("COMMIT")

        for _ in range(20):  # the WAL file and its first pages: not timed
            tx()
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds:
            tx()
            n += 1
        return n / elapsed, n
    finally:
        db.close()


def _apps_cases(ctx: Context) -> list[Case]:
    b = _DiskBench.make(ctx)
    sql_s = 2.0 if ctx.quick else 4.0
    dd_mib = 96

    def on_ext4(server_of: _ServerOf, work: Callable[[Path, int], Metrics], tag: str) -> Callable[[], Metrics]:
        def run() -> Metrics:
            with server_of(tag) as server:
                with _loop_on_export(server.uri, _DISK_EXPORT, ctx.dir / f"rig-{tag}", mkfs=True) as (_, mnt):
                    return work(mnt, server.pid)

        return run

    def dd(mnt: Path, pid: int) -> Metrics:
        cpu0, wall0 = _proc_cpu_s(pid), time.monotonic()
        mib_s = _dd_mib_s(["if=/dev/zero", f"of={mnt / 'f'}", "bs=1M", f"count={dd_mib}", "conv=fsync"], dd_mib)
        return {"MiB/s": mib_s, "server CPU, % of a core": _server_share(pid, cpu0, wall0)}

    def sqlite(mnt: Path, pid: int) -> Metrics:
        cpu0, wall0 = _proc_cpu_s(pid), time.monotonic()
        tx_s, _ = _sqlite_tx_s(mnt / "bench.db", sql_s)
        return {"tx/s": tx_s, "server CPU, % of a core": _server_share(pid, cpu0, wall0)}

    def stack(name: str) -> _ServerOf:
        return lambda tag: b.tierlab(name, tag)

    def nbdkit_file(tag: str) -> contextlib.AbstractContextManager[_Server]:
        return b.nbdkit(b.disk / "file.img", tag)

    def cold_read(server_of: _ServerOf, tag: str) -> Callable[[], Metrics]:
        mib = _COLD_BYTES >> 20

        def run() -> Metrics:
            with server_of(tag) as server, _loop_on_export(
                server.uri, _COLD_BYTES, ctx.dir / f"rig-{tag}", mkfs=False
            ) as (loop, _):
                _drop_page_cache(b.cold)
                cpu0, wall0 = _proc_cpu_s(server.pid), time.monotonic()
                mib_s = _dd_mib_s([f"if={loop}", "of=/dev/null", "bs=1M", f"count={mib}", "iflag=direct"], mib)
                return {"MiB/s": mib_s, "server CPU, % of a core": _server_share(server.pid, cpu0, wall0)}

        return run

    served = "ext4 on the export (nbdfuse, loop device, 4 KiB sectors)"
    info = [Check("server CPU, % of a core", "info")]
    cases = []
    for name in ("cache", "flashcache", "hswd"):
        cases.append(
            Case(
                name=f"apps-dd-{name}",
                title=f"{served}: dd 96 MiB conv=fsync, {_STACK_TITLES[name]} (cache on /dev/shm) vs passthrough on the disk",
                peer_name="tierlab passthrough, disk file",
                tierlab=on_ext4(stack(name), dd, f"dd-{name}"),
                peer=on_ext4(stack("file"), dd, f"dd-file-{name}"),
                checks=[Check("MiB/s", "ratio_min", 0.9), *info],
            )
        )
    sqlite_targets = {"cache": 0.7, "flashcache": None, "hswd": 0.6}
    for name, bound in sqlite_targets.items():
        cases.append(
            Case(
                name=f"apps-sqlite-{name}",
                title=f"{served}: SQLite WAL, synchronous=FULL, one row per commit, {_STACK_TITLES[name]} vs passthrough on RAM",
                peer_name="tierlab passthrough, ram",
                tierlab=on_ext4(stack(name), sqlite, f"sqlite-{name}"),
                peer=on_ext4(stack("ram"), sqlite, f"sqlite-ram-{name}"),
                checks=[Check("tx/s", "ratio_min", bound) if bound else Check("tx/s", "info"), *info],
                note="" if bound else "no target in the issue; the reporter measured it",
            )
        )
    cases.append(
        Case(
            name="apps-sqlite-file",
            title=f"{served}: SQLite WAL, synchronous=FULL, one row per commit, passthrough on the disk "
            "vs nbdkit file on the same file",
            peer_name="nbdkit file",
            tierlab=on_ext4(stack("file"), sqlite, "sqlite-file"),
            peer=on_ext4(nbdkit_file, sqlite, "sqlite-nbdkit"),
            checks=[Check("tx/s", "ratio_min", 1.0), *info],
        )
    )
    cases.append(
        Case(
            name="apps-coldread-file",
            title=f"cold sequential read of {_COLD_BYTES >> 20} MiB: dd bs=1M iflag=direct from the loop device "
            "on the export, page cache dropped first; passthrough vs nbdkit file",
            peer_name="nbdkit file",
            tierlab=cold_read(stack("cold"), "cold-tierlab"),
            peer=cold_read(lambda tag: b.nbdkit(b.cold, tag), "cold-nbdkit"),
            checks=[Check("MiB/s", "ratio_min", 1.0), *info],
        )
    )
    return cases


def _fio_nbd(uri: str, args: Sequence[str], lat_log: Path | None = None) -> dict:
    """fio's nbd engine on ``uri``; its JSON job."""
    cmd = ["fio", "--name=bench", "--ioengine=nbd", f"--uri={uri}", "--output-format=json", *args]
    if lat_log is not None:
        cmd += [f"--write_lat_log={lat_log}", "--log_avg_msec=0", "--log_unix_epoch=1"]
    out = _run(cmd, timeout=600).stdout
    return json.loads(out[out.index("{") :])["jobs"][0]


def _clat_us(log: Path, t0: float, t1: float) -> list[float]:
    """Completion latencies (µs) of the IOs fio's per-IO log
    (``--log_unix_epoch``) shows completing between t0 and t1 (Unix s)."""
    lo, hi = t0 * 1000, t1 * 1000
    lats = []
    with open(log) as f:
        for line in f:
            parts = line.split(",")
            if len(parts) >= 2 and lo <= int(parts[0]) <= hi:
                lats.append(int(parts[1]) / 1000)
    return lats


def _p99(values: list[float]) -> float:
    if not values:
        raise RuntimeError("no IO completed in the measured window")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def _disk_cases(ctx: Context) -> list[Case]:
    b = _DiskBench.make(ctx)
    runtime_s = 2 if ctx.quick else 4
    fits = 128 << 20  # the random writes' range: half the cache

    def fio_side(server_of: _ServerOf, job: Sequence[str], rw: str, tag: str) -> Callable[[], Metrics]:
        def run() -> Metrics:
            with server_of(tag) as server:
                cpu0, wall0 = _proc_cpu_s(server.pid), time.monotonic()
                j = _fio_nbd(server.uri, job)
                share = _server_share(server.pid, cpu0, wall0)
            side = j[rw]
            return {"MiB/s": side["bw_bytes"] / (1 << 20), "IOPS": side["iops"], "server CPU, % of a core": share}

        return run

    def stack(name: str) -> _ServerOf:
        return lambda tag: b.tierlab(name, tag)

    timed = ["--time_based", f"--runtime={runtime_s}", "--ramp_time=1"]
    seq = ["--rw=write", "--bs=1m", "--iodepth=8", f"--size={_DISK_EXPORT}", *timed]
    rand = ["--rw=randwrite", "--bs=4k", "--iodepth=32", f"--size={fits}", "--randrepeat=0", "--norandommap", *timed]
    info = [Check("server CPU, % of a core", "info")]
    cases = []
    for name in ("cache", "flashcache", "hswd"):
        cases.append(
            Case(
                name=f"disk-seqwrite-{name}",
                title=f"fio nbd, 1 MiB sequential writes QD8 over the 1 GiB export, {_STACK_TITLES[name]} "
                "(cache on /dev/shm) vs passthrough on the disk",
                peer_name="tierlab passthrough, disk file",
                tierlab=fio_side(stack(name), seq, "write", f"seq-{name}"),
                peer=fio_side(stack("file"), seq, "write", f"seq-file-{name}"),
                checks=[Check("MiB/s", "ratio_min", 0.9), *info],
            )
        )
    for name in ("cache", "flashcache", "hswd"):
        cases.append(
            Case(
                name=f"disk-randwrite-{name}",
                title=f"fio nbd, 4 KiB random writes QD32 over {fits >> 20} MiB (fits in the cache), "
                f"{_STACK_TITLES[name]} vs passthrough on a /dev/shm file",
                peer_name="tierlab passthrough, /dev/shm file",
                tierlab=fio_side(stack(name), rand, "write", f"rand-{name}"),
                peer=fio_side(stack("shm"), rand, "write", f"rand-shm-{name}"),
                checks=[Check("IOPS", "ratio_min", 0.9), *info],
            )
        )

    def cold(server_of: _ServerOf, tag: str) -> Callable[[], Metrics]:
        job = ["--rw=read", "--bs=1m", "--iodepth=8", f"--size={_COLD_BYTES}"]

        def run() -> Metrics:
            with server_of(tag) as server:
                _drop_page_cache(b.cold)
                cpu0, wall0 = _proc_cpu_s(server.pid), time.monotonic()
                j = _fio_nbd(server.uri, job)
                share = _server_share(server.pid, cpu0, wall0)
            return {"MiB/s": j["read"]["bw_bytes"] / (1 << 20), "server CPU, % of a core": share}

        return run

    cases.append(
        Case(
            name="disk-coldread-file",
            title=f"fio nbd, cold sequential read of {_COLD_BYTES >> 20} MiB, 1 MiB QD8, page cache dropped first; "
            "passthrough on the disk vs nbdkit file",
            peer_name="nbdkit file",
            tierlab=cold(stack("cold"), "cold-tierlab"),
            peer=cold(lambda tag: b.nbdkit(b.cold, tag), "cold-nbdkit"),
            checks=[Check("MiB/s", "ratio_min", 1.0), *info],
        )
    )

    # A burst of 4 KiB random writes over 90 % of the write-back cache
    # (fio's random map: each page once) leaves it ~90 % dirty; its
    # write-back is paced while the host is busy (docs/cache-layer.md).
    dirty = (_DISK_CACHE // 4096 * 9 // 10) * 4096
    fill = ["--rw=randwrite", "--bs=4k", "--iodepth=32", f"--size={dirty}", "--randrepeat=0"]
    reads = ["--rw=randread", "--bs=4k", "--iodepth=1", f"--size={dirty}", "--randrepeat=0", "--norandommap"]
    stats_s = 0.2

    def dirty_mib(work: Path) -> float:
        """The served cache's dirty MiB, from the summary.json it rewrites
        every `stats_s`."""
        try:
            s = json.loads((work / "out" / "summary.json").read_text())
        except (OSError, ValueError):
            return float("nan")
        return s["run"]["policy_counters"]["dirty_bytes"] / (1 << 20)

    def drain_side(busy: bool) -> Callable[[], Metrics]:
        tag = "drain-busy" if busy else "drain-idle"

        def run() -> Metrics:
            work = ctx.dir / f"run-{tag}"
            with b.tierlab("cache-burst", tag, stats_interval_s=stats_s) as server:
                _fio_nbd(server.uri, fill)
                time.sleep(2 * stats_s)  # a summary written after the burst
                at_start = dirty_mib(work)
                if not busy:
                    # Idle: the cache writes everything back at full speed
                    # (idle flushing after 1 s); read once it is clean.
                    deadline = time.monotonic() + 600
                    while not dirty_mib(work) == 0.0:
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"{tag}: the cache did not drain in 600 s")
                        time.sleep(stats_s)
                lat = work / "lat"
                t0 = time.time()
                _fio_nbd(server.uri, [*reads, "--time_based", f"--runtime={runtime_s}"], lat)
                t1 = time.time()
                time.sleep(2 * stats_s)
                at_end = dirty_mib(work)
                lats = _clat_us(Path(f"{lat}_clat.1.log"), t0, t1)
            return {
                "read p99 µs": _p99(lats),
                "read mean µs": statistics.fmean(lats),
                "reads measured": float(len(lats)),
                "dirty MiB when the reads began": at_start if busy else 0.0,
                "MiB written back during the reads": at_start - at_end if busy else 0.0,
            }

        return run

    cases.append(
        Case(
            name="disk-drain-cache",
            title=f"fio nbd, 4 KiB random reads QD1 (cache hits) right after a burst left the write-back cache "
            f"~90 % dirty ({dirty >> 20} MiB), while it drains, vs the same reads once it is idle and clean",
            peer_name="same stack, drained, clean",
            tierlab=drain_side(True),
            peer=drain_side(False),
            checks=[
                Check("read p99 µs", "ratio_max", 2.0),
                Check("read mean µs", "info"),
                Check("reads measured", "info"),
                Check("dirty MiB when the reads began", "info"),
                Check("MiB written back during the reads", "info"),
            ],
            note="the drain is the cache's own background write-back, paced while the reads run",
        )
    )
    return cases


GROUPS: list[Group] = [
    Group("pipeline", "trace parsing and generators (`tierlab bench`), no peer", lambda: None, _pipeline_cases),
    Group("trace", "trace stats vs libCacheSim's CSV reader; cache on CSV vs native", _have_libcachesim, _trace_cases),
    Group("real", "the real executor (`tierlab run`) vs fio on a /dev/shm file", _real_needs, _real_cases),
    Group("cache", "cache-only LRU and S3-FIFO vs libCacheSim", _have_libcachesim, _cache_cases),
    Group("sim", "the simulator: ATSMF vs linear stack, detailed vs queueing SSD", _sim_needs, _sim_cases),
    Group("serve", "`tierlab serve` vs nbdkit, fio's nbd engine", lambda: _have("fio", "nbdkit"), _serve_cases),
    Group("apps", "ext4 on served disk-backed stacks (nbdfuse + loop): dd, SQLite, cold reads", _apps_needs, _apps_cases),
    Group(
        "disk",
        "fio's nbd engine on served disk-backed stacks: streams, cached writes, reads during write-back",
        _disk_needs,
        _disk_cases,
    ),
]


# --- running -------------------------------------------------------------------


def _machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def _load() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _select(only: Sequence[str] | None) -> list[tuple[Group, set[str] | None]]:
    """Groups to run, each with the case names asked for (None: all). A
    name is a group or a case prefix (``real``, ``lru``, ``real-uring``)."""
    if not only:
        return [(g, None) for g in GROUPS]
    chosen: dict[str, set[str] | None] = {}
    for name in only:
        if any(g.name == name for g in GROUPS):
            chosen[name] = None
            continue
        owner = _case_group(name)
        if owner is None:
            known = [g.name for g in GROUPS] + [p.rstrip("-") for ps in _PREFIXES.values() for p in ps]
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean `{near[0]}`?" if near else ";"
            raise ValueError(
                f"--only {name!r}: not a benchmark group or case{hint} groups: {', '.join(g.name for g in GROUPS)} "
                f"(`tierlab bench --compare --list` lists the cases)"
            )
        if chosen.get(owner, set()) is not None:
            chosen.setdefault(owner, set()).add(name)  # type: ignore[union-attr]
    return [(g, chosen[g.name]) for g in GROUPS if g.name in chosen]


#: Case name prefixes of each group (so --only can pick cases without
#: building the group's inputs first).
_PREFIXES = {
    "pipeline": ["pipeline"],
    "trace": ["trace-"],
    "real": ["real-"],
    "cache": ["lru-", "s3fifo-"],
    "sim": ["sim-"],
    "serve": ["serve-"],
    "apps": ["apps-"],
    "disk": ["disk-"],
}


def _case_group(name: str) -> str | None:
    for group, prefixes in _PREFIXES.items():
        if any(name.startswith(p) or p.startswith(name + "-") for p in prefixes):
            return group
    return None


def compare(
    only: Sequence[str] | None = None,
    rounds: int = 3,
    quick: bool = False,
    dir: str | os.PathLike | None = None,
    progress: bool = True,
):
    """Run the chosen cases (all by default), ``rounds`` alternating rounds
    each, and return a DataFrame: one row per compared metric (see
    :data:`COLUMNS`), medians over the rounds. A group whose peer is
    missing here gives one row with verdict ``skipped`` and the reason."""
    import pandas as pd

    if rounds < 1:
        raise ValueError(f"rounds: expected at least 1, found {rounds}")
    log = (lambda s: print(f"bench: {s}", file=sys.stderr, flush=True)) if progress else (lambda s: None)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tierlab-bench-", dir=dir) as tmp:
        for group, names in _select(only):
            if why := group.needs():
                log(f"{group.name}: skipped: {why}")
                rows.append(dict.fromkeys(COLUMNS, "") | {"case": group.name, "verdict": "skipped", "note": why})
                continue
            ctx = Context(dir=Path(tmp) / group.name, quick=quick, log=log)
            ctx.dir.mkdir()
            with ctx.resources:
                rows.extend(_run_group(group, names, ctx, rounds, log))
    return pd.DataFrame(rows, columns=COLUMNS)


def _run_group(
    group: Group, names: set[str] | None, ctx: Context, rounds: int, log: Callable[[str], None]
) -> list[dict]:
    rows: list[dict] = []
    cases = [c for c in group.build(ctx) if names is None or any(c.name.startswith(n) for n in names)]
    for case in cases:
        try:
            rows.extend(_run_case(case, rounds, log))
        except (RuntimeError, OSError, subprocess.CalledProcessError, KeyError, ValueError) as e:
            # One broken case must not hide the others' numbers.
            detail = getattr(e, "stderr", None) or str(e)
            log(f"{case.name}: failed: {detail}")
            rows.append(
                dict.fromkeys(COLUMNS, "")
                | {"case": case.name, "verdict": "failed", "note": str(detail).strip().splitlines()[-1][:300]}
            )
    return rows


def _run_case(case: Case, rounds: int, log: Callable[[str], None]) -> list[dict]:
    ours: list[Metrics] = []
    peer: list[Metrics] = []
    for r in range(rounds):
        order = [("tierlab", case.tierlab, ours)]
        if case.peer is not None:
            order.append((case.peer_name, case.peer, peer))
        for label, fn, into in order if r % 2 == 0 else reversed(order):
            m = fn()
            into.append(m)
            shown = ", ".join(f"{k} {v:,.6g}" for k, v in m.items())
            log(f"{case.name} round {r + 1}/{rounds} {label}: {shown} (load {_load()})")
    rows = []
    for check in case.checks or [Check(k, "info") for k in ours[0]]:
        a = statistics.median(m[check.metric] for m in ours)
        b = statistics.median(m[check.metric] for m in peer) if peer else float("nan")
        rows.append(
            {
                "case": case.name,
                "metric": check.metric,
                "tierlab": a,
                "peer_name": case.peer_name,
                "peer": b,
                "ratio": a / b if b else float("nan"),
                "target": check.target(),
                "verdict": check.verdict(a, b),
                "rounds": rounds,
                "note": case.note or case.title,
            }
        )
    return rows


def _human(v: float) -> str:
    """12.76 M, 225.6 K, 3.38: three or four significant digits."""
    for scale, suffix in ((1e9, " G"), (1e6, " M"), (1e4, " K")):
        if abs(v) >= scale:
            shown = v / (scale if suffix != " K" else 1e3)
            return f"{shown:.4g}{suffix}"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def markdown(df) -> str:
    """The table for docs/benchmarks.md."""
    lines = [
        "| case | metric | tierlab | peer | peer value | tierlab / peer | target | verdict |",
        "|---|---|---:|---|---:|---:|---|---|",
    ]
    for r in df.itertuples(index=False):
        if r.verdict in ("skipped", "failed"):
            lines.append(f"| {r.case} | | | | | | | {r.verdict}: {r.note} |")
            continue
        fmt = {"miss ratio": lambda v: f"{v:.7f}", "misses": lambda v: f"{v:,.0f}"}.get(r.metric, _human)
        if math.isnan(r.peer):
            lines.append(f"| {r.case} | {r.metric} | {fmt(r.tierlab)} | — | | | | |")
            continue
        lines.append(
            f"| {r.case} | {r.metric} | {fmt(r.tierlab)} | {r.peer_name} | {fmt(r.peer)} | "
            f"{r.ratio:.2f}× | {r.target} | {r.verdict} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """``tierlab bench --compare ...`` (argv without ``bench``)."""
    ap = argparse.ArgumentParser(
        prog="tierlab bench --compare",
        description="Each tierlab benchmark and its peer, alternating in one run; prints ratios (docs/benchmarks.md).",
    )
    ap.add_argument("--compare", action="store_true", required=True)
    ap.add_argument("--only", default="", help="comma list of groups or cases (see --list)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per case; medians are compared")
    ap.add_argument("--quick", action="store_true", help="smaller inputs (a smoke run; ratios are noisier)")
    ap.add_argument("--dir", help="where the temporary inputs go (default: the system temp dir)")
    ap.add_argument("--out", help="also write bench.csv and bench.json to this directory")
    ap.add_argument("--list", action="store_true", help="list the groups and cases, and exit")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-round progress on stderr")
    args = ap.parse_args(list(argv))
    if args.list:
        for g in GROUPS:
            why = g.needs()
            print(f"{g.name:6} {g.about}" + (f"  [cannot run here: {why}]" if why else ""))
            print(f"       cases: {', '.join(p + '*' for p in _PREFIXES[g.name])}")
        return 0
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    try:
        _select(only)
    except ValueError as e:
        print(f"tierlab: error: {e}", file=sys.stderr)
        return 2
    if args.rounds < 1:
        print(f"tierlab: error: --rounds: expected at least 1, found {args.rounds}", file=sys.stderr)
        return 2
    load_before = _load()
    started = time.strftime("%Y-%m-%d %H:%M")
    df = compare(only, rounds=args.rounds, quick=args.quick, dir=args.dir, progress=not args.quiet)
    print(f"Measured {started} on {_machine()}; load {load_before} before, {_load()} after; "
          f"{args.rounds} alternating rounds, medians{'; --quick inputs' if args.quick else ''}.\n")
    print(markdown(df))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        df.to_csv(out / "bench.csv", index=False)
        (out / "bench.json").write_text(df.to_json(orient="records", indent=1, force_ascii=False))
    return 1 if (df["verdict"] == "failed").any() else 0
