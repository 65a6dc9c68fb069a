"""Parameter sweeps: a grid of simulations, in parallel, resumable.

``tierlab sweep SWEEP.toml --out DIR`` (or :func:`run_sweep`) runs every
point of the grid configs x traces x parameters, each point one
``tierlab sim`` run, on local processes (default) or on a Ray cluster
(``--ray ADDRESS``), and gathers one row per point into ``DIR/results.csv``.
See docs/sweeps.md for the file format and the columns.

The sweep file::

    [sweep]
    configs = ["configs/nvme-zipf.toml"]        # relative to this file
    traces = ["traces/a.csv", "traces/b.csv"]   # optional: replaces trace_key
    trace_key = "tenants.0.workload"            # default
    set = ["tenants.0.workload.params.count=20000"]   # every point (optional)

    [parameters]                                # --set keys -> lists of values
    "tenants.0.driver.iodepth" = [1, 8, 32]
    seed = [1, 2]

Each point's files go to ``DIR/points/ID/`` (the run's summary.json,
series.csv, latency_cdf.csv, ... and ``point.json``, its definition); a
point is done when ``done.json`` is there, written last, so an interrupted
sweep re-run with the same arguments runs only the missing points. A point's
ID is a hash of its definition (config, trace, overrides), so adding values
to the grid keeps the finished points.

A point runs the same code in a local process and on a Ray worker, and the
simulator is deterministic, so both give byte-identical results.csv. On a
multi-machine Ray cluster the configs and traces must be readable at the
same paths on every node; the outputs come back to the driver, which alone
writes DIR.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

_SWEEP_KEYS = {"configs", "traces", "trace_key", "set"}
# summary.json top-level numbers that describe the run's clock, not results.
_NOT_METRICS = {"start_ns", "end_ns", "interval_ns", "intervals", "series_truncated"}
# Terminal colour/cursor escapes (Ray colours its task-error headers).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# The first line of a Ray task error: `ray::run_point() (pid=1, ip=10.0.0.1)`.
_RAY_HEADER = re.compile(r"^ray::\S+ \(pid=\d+, ip=[^)]*\)$")


class SweepError(ValueError):
    """The sweep file or its arguments are invalid; the message says where
    (file, key) and what is allowed."""


@dataclass(frozen=True)
class Point:
    """One point of the grid."""

    index: int
    config: str  # as written in the sweep file
    config_path: str  # absolute
    trace: str | None  # as written
    trace_override: str | None  # `trace_key={ trace = "ABS" ... }`
    params: tuple[tuple[str, Any], ...]
    fixed: tuple[str, ...]

    @property
    def overrides(self) -> list[str]:
        out = list(self.fixed)
        if self.trace_override:
            out.append(self.trace_override)
        out += [f"{k}={_toml_value(v)}" for k, v in self.params]
        return out

    def definition(self) -> dict[str, Any]:
        return {"config": self.config, "trace": self.trace, "overrides": self.overrides}

    @property
    def id(self) -> str:
        blob = json.dumps(self.definition(), sort_keys=True).encode()
        stem = Path(self.config).stem
        return f"{stem}-{hashlib.sha256(blob).hexdigest()[:10]}"


@dataclass
class Sweep:
    """A parsed sweep file (see the module doc)."""

    path: Path
    points: list[Point]
    parameter_keys: list[str]
    has_traces: bool
    failed: dict[str, str] = field(default_factory=dict)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    raise TypeError(v)


def _inline_table(d: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in d.items()) + " }"


def load_sweep(path: str | os.PathLike[str], extra_set: Sequence[str] = ()) -> Sweep:
    """Parses and checks a sweep file; ``extra_set`` are ``--set`` items
    added to every point. Raises :class:`SweepError`."""
    path = Path(path)
    where = str(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepError(f"{where}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{where}: not valid TOML: {e}") from None
    unknown = set(doc) - {"sweep", "parameters"}
    if unknown:
        raise SweepError(f"{where}: unknown table(s) {sorted(unknown)}; expected [sweep] and [parameters]")
    sweep = doc.get("sweep")
    if not isinstance(sweep, dict):
        raise SweepError(f"{where}: missing [sweep] table with `configs = [...]`")
    bad = set(sweep) - _SWEEP_KEYS
    if bad:
        raise SweepError(f"{where}: [sweep]: unknown key(s) {sorted(bad)}; allowed: {sorted(_SWEEP_KEYS)}")
    base = path.parent

    def str_list(key: str, required: bool) -> list[Any]:
        value = sweep.get(key, None)
        if value is None:
            if required:
                raise SweepError(f"{where}: [sweep]: `{key}` is required (a list)")
            return []
        if not isinstance(value, list) or not value:
            raise SweepError(f"{where}: [sweep]: `{key}` must be a non-empty list")
        return value

    configs = str_list("configs", True)
    for i, c in enumerate(configs):
        if not isinstance(c, str):
            raise SweepError(f"{where}: [sweep]: configs[{i}] must be a path string, not {c!r}")
        if not (base / c).is_file():
            raise SweepError(f"{where}: [sweep]: configs[{i}]: {base / c}: no such file")
    traces = str_list("traces", False)
    trace_key = sweep.get("trace_key", "tenants.0.workload")
    if not isinstance(trace_key, str) or not trace_key:
        raise SweepError(f"{where}: [sweep]: `trace_key` must be a key path such as tenants.0.workload")
    trace_items: list[tuple[str | None, str | None]] = []
    for i, t in enumerate(traces):
        if isinstance(t, str):
            t = {"trace": t}
        if not isinstance(t, dict) or not isinstance(t.get("trace"), str):
            raise SweepError(
                f"{where}: [sweep]: traces[{i}] must be a path or a table "
                "{ trace = PATH, format = ..., device = ... }"
            )
        resolved = (base / t["trace"]).resolve()
        if not resolved.is_file():
            raise SweepError(f"{where}: [sweep]: traces[{i}]: {resolved}: no such file")
        table = {**t, "trace": str(resolved)}
        trace_items.append((t["trace"], f"{trace_key}={_inline_table(table)}"))
    if not trace_items:
        trace_items = [(None, None)]
    fixed = []
    for i, s in enumerate(list(sweep.get("set", [])) + list(extra_set)):
        if not isinstance(s, str) or "=" not in s:
            raise SweepError(f"{where}: set[{i}]: {s!r} is not a KEY=VALUE string")
        fixed.append(s)
    params = doc.get("parameters", {})
    if not isinstance(params, dict):
        raise SweepError(f"{where}: [parameters] must be a table of KEY = [values]")
    for key, values in params.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"{where}: [parameters]: `{key}` must be a non-empty list of values")
        for v in values:
            if not isinstance(v, (bool, int, float, str)):
                raise SweepError(
                    f"{where}: [parameters]: `{key}`: {v!r} is not a string, number or boolean"
                )
    keys = list(params)
    points = []
    for i, (config, (trace, trace_override), combo) in enumerate(
        itertools.product(configs, trace_items, itertools.product(*(params[k] for k in keys)))
    ):
        points.append(
            Point(
                index=i,
                config=config,
                config_path=str((base / config).resolve()),
                trace=trace,
                trace_override=trace_override,
                params=tuple(zip(keys, combo)),
                fixed=tuple(fixed),
            )
        )
    ids = [p.id for p in points]
    if len(set(ids)) != len(ids):
        raise SweepError(f"{where}: the grid has duplicate points (a value listed twice?)")
    return Sweep(path=path, points=points, parameter_keys=keys, has_traces=trace_items[0][0] is not None)


def run_point(config_path: str, overrides: list[str]) -> dict[str, bytes]:
    """Runs one point (in a worker process or on a Ray worker) and returns
    its output files by name."""
    from ._sim import simulate

    with tempfile.TemporaryDirectory(prefix="tierlab-point-") as tmp:
        simulate(config_path, set=overrides, out=tmp)
        return {name: (Path(tmp) / name).read_bytes() for name in sorted(os.listdir(tmp))}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _store(dir: Path, point: Point, files: dict[str, bytes]) -> None:  # noqa: A002
    pdir = dir / "points" / point.id
    pdir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        _write_atomic(pdir / name, data)
    (pdir / "error.txt").unlink(missing_ok=True)
    definition = json.dumps({"index": point.index, **point.definition()}, indent=1).encode()
    _write_atomic(pdir / "point.json", definition)
    _write_atomic(pdir / "done.json", definition)  # last: the point is done


def _is_done(dir: Path, point: Point) -> bool:  # noqa: A002
    done = dir / "points" / point.id / "done.json"
    if not done.is_file():
        return False
    try:
        stored = json.loads(done.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return {k: stored.get(k) for k in ("config", "trace", "overrides")} == point.definition()


def _flat_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for k, v in summary.items():
        if k in _NOT_METRICS or isinstance(v, (dict, list)):
            continue
        row[k] = v
    run = summary.get("run", {})
    for k in ("simulated_s", "events", "host_ios_unfinished"):
        if k in run:
            row[k] = run[k]
    for tier in summary.get("tiers", []):
        for k in ("ios", "mean_latency_us", "p99_latency_us"):
            row[f"tier.{tier['name']}.{k}"] = tier.get(k)
    for dev in summary.get("devices", []):
        for k in ("ios", "util_percent", "mean_latency_us"):
            row[f"device.{dev['name']}.{k}"] = dev.get(k)
    for k, v in (run.get("policy_counters") or {}).items():
        row[f"policy.{k}"] = v
    return row


def gather(dir: str | os.PathLike[str], sweep: Sweep) -> pd.DataFrame:  # noqa: A002
    """results.csv's frame: one row per finished point, in grid order:
    ``point`` (grid index), ``point_id``, ``config``, ``trace`` (with
    traces), one column per parameter, then the metrics of the point's
    summary.json (docs/sweeps.md)."""
    import pandas as pd

    d = Path(dir)
    rows = []
    for p in sweep.points:
        if not _is_done(d, p):
            continue
        summary = json.loads((d / "points" / p.id / "summary.json").read_text(encoding="utf-8"))
        row: dict[str, Any] = {"point": p.index, "point_id": p.id, "config": p.config}
        if sweep.has_traces:
            row["trace"] = p.trace
        row.update(dict(p.params))
        row.update(_flat_metrics(summary))
        rows.append(row)
    return pd.DataFrame.from_records(rows)


def _write_results(d: Path, sweep: Sweep) -> pd.DataFrame:
    """Writes results.csv and returns it as read back (the one table)."""
    import pandas as pd

    frame = gather(d, sweep)
    text = frame.to_csv(index=False, lineterminator="\n")
    _write_atomic(d / "results.csv", text.encode())
    return pd.read_csv(d / "results.csv") if len(frame) else frame


def _progress(total: int, done: int, quiet: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, unit=" point", desc=desc, disable=quiet, delay=1.0)


def _error_message(e: BaseException) -> str:
    """The text a failed point reports: the exception's own message
    (e.g. tierlab's config error), without terminal escapes or a Ray
    task header, so error.txt and the summary read the same locally and
    on Ray."""
    text = _ANSI.sub("", str(e)).strip()
    lines = text.splitlines()
    if lines and _RAY_HEADER.match(lines[0].strip()):
        text = "\n".join(lines[1:]).strip()
    return text or type(e).__name__


def _init_worker(tmp_root: str) -> None:
    """Worker initializer. Ctrl-C (sent to the whole process group) is the
    driver's to handle: it stops the workers itself. Their temporary
    folders go under the driver's, which it removes even when it had to
    end them mid-point."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tempfile.tempdir = tmp_root


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Ends the pool's processes now: their running points are lost on an
    interrupt anyway, and waiting for them could take as long as a point."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14+
    if terminate is not None:
        terminate()
        return
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()


def _run_local(todo: list[Point], jobs: int, on_done, on_error) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with (
        tempfile.TemporaryDirectory(prefix="tierlab-sweep-") as tmp_root,
        ProcessPoolExecutor(
            max_workers=jobs, mp_context=ctx, initializer=_init_worker, initargs=(tmp_root,)
        ) as pool,
    ):
        futures = {pool.submit(run_point, p.config_path, p.overrides): p for p in todo}
        pending = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    point = futures[f]
                    try:
                        on_done(point, f.result())
                    except Exception as e:  # noqa: BLE001 - recorded per point
                        on_error(point, e)
        except BaseException:
            # Not f.cancel(): the pool fails its futures itself when its
            # workers end (and 3.11 then errs on cancelled ones).
            _stop_workers(pool)
            raise


def _run_ray(todo: list[Point], address: str, on_done, on_error, quiet: bool = False) -> None:
    try:
        import ray
    except ImportError:
        raise SweepError(
            "--ray needs the `ray` package: pip install 'tierlab[ray]' (or pip install ray)"
        ) from None
    # Worker output stays on the workers: a point's error comes back as its
    # exception. "local" is passed on: a new instance even when a cluster
    # runs on this machine.
    init_kwargs: dict[str, Any] = {"address": address, "log_to_driver": False}
    if quiet:
        # Ray logs its connection ("Started a local Ray instance", token
        # warnings) at INFO/WARNING on the driver's stderr.
        init_kwargs["logging_level"] = logging.ERROR
        if address == "local":
            init_kwargs["include_dashboard"] = False
    started_here = not ray.is_initialized()
    if started_here:  # else the caller's connection is used as it is
        try:
            ray.init(**init_kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise SweepError(f"--ray {address}: cannot connect to a Ray cluster: {e}") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_point)
        refs = {remote.remote(p.config_path, p.overrides): p for p in todo}
        pending = list(refs)
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                point = refs[ref]
                try:
                    on_done(point, ray.get(ref))
                except ray.exceptions.RayTaskError as e:
                    # Its text is a coloured `ray::run_point()` header and
                    # the worker's traceback; the cause is the point's error.
                    cause = e.cause if isinstance(e.cause, BaseException) else e
                    on_error(point, cause)
                except Exception as e:  # noqa: BLE001 - recorded per point
                    on_error(point, e)
    finally:
        # Also on Ctrl-C: disconnecting ends this driver's job, whose tasks
        # the cluster then stops (a local instance stops altogether).
        if started_here:
            ray.shutdown()


def run_sweep(
    sweep_file: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    ray: str | None = None,
    jobs: int | None = None,
    set: Sequence[str] = (),  # noqa: A002 - the CLI's --set
    quiet: bool = False,
) -> pd.DataFrame:
    """Runs the sweep (see the module doc) and returns results.csv as a
    DataFrame.

    ``ray``: a Ray cluster address (``"127.0.0.1:6379"``, ``"auto"``), or
    ``"local"`` for a Ray instance started for this sweep; None (default)
    runs on ``jobs`` local processes (default: the CPU count). Finished
    points (``points/ID/done.json``) are skipped. Points that fail are
    reported in ``points/ID/error.txt`` and in the raised
    :class:`SweepFailed`, after every other point ran and results.csv was
    written. Ctrl-C stops the workers, writes results.csv for the finished
    points and raises :class:`SweepInterrupted` (a ``KeyboardInterrupt``).
    ``quiet``: no progress bar or messages, and no Ray log lines but errors.
    """
    sweep = load_sweep(sweep_file, set)
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    meta = {
        "sweep_file": str(Path(sweep_file).resolve()),
        "points": len(sweep.points),
        "parameters": sweep.parameter_keys,
    }
    _write_atomic(d / "sweep.json", (json.dumps(meta, indent=1) + "\n").encode())
    todo = [p for p in sweep.points if not _is_done(d, p)]
    skipped = len(sweep.points) - len(todo)
    where = f"Ray at {ray}" if ray else f"{jobs or os.cpu_count() or 1} local processes"
    if not quiet:
        print(
            f"tierlab sweep: {len(sweep.points)} points ({skipped} already done), {len(todo)} to run on {where}",
            file=sys.stderr,
        )
    started = time.monotonic()
    bar = _progress(len(sweep.points), skipped, quiet, "sweep")

    def on_done(point: Point, files: dict[str, bytes]) -> None:
        _store(d, point, files)
        bar.update(1)

    def on_error(point: Point, e: BaseException) -> None:
        message = _error_message(e)
        sweep.failed[point.id] = message
        pdir = d / "points" / point.id
        pdir.mkdir(parents=True, exist_ok=True)
        (pdir / "error.txt").write_text(message + "\n", encoding="utf-8")
        bar.update(1)

    interrupted = False
    try:
        if todo:
            if ray:
                _run_ray(todo, ray, on_done, on_error, quiet)
            else:
                n = jobs or os.cpu_count() or 1
                if n < 1:
                    raise SweepError(f"--jobs {n}: must be at least 1")
                _run_local(todo, min(n, len(todo)), on_done, on_error)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()  # ends the bar's line
        frame = _write_results(d, sweep)
    if interrupted:
        raise SweepInterrupted(len(frame), len(sweep.points), d)
    if not quiet:
        print(
            f"tierlab sweep: {len(frame)} of {len(sweep.points)} points in results.csv "
            f"({time.monotonic() - started:.1f} s); wrote {d / 'results.csv'}",
            file=sys.stderr,
        )
    if sweep.failed:
        raise SweepFailed(sweep.failed, d)
    return frame


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the sweep; the finished points are kept (and in
    results.csv), so the same command resumes it."""

    def __init__(self, done: int, total: int, dir: Path):  # noqa: A002
        self.done, self.total = done, total
        super().__init__(
            f"interrupted; {done} of {total} points done (kept in {dir / 'points'}); "
            "re-run the same command to resume"
        )


class SweepFailed(RuntimeError):
    """Some points failed; ``failed`` maps point ID to the error message."""

    def __init__(self, failed: dict[str, str], dir: Path):  # noqa: A002
        self.failed = failed
        lines = [f"  {pid}: {msg.splitlines()[0] if msg else ''}" for pid, msg in sorted(failed.items())]
        super().__init__(
            f"{len(failed)} point(s) failed (details in {dir}/points/ID/error.txt; re-run to retry them):\n"
            + "\n".join(lines)
        )


@contextlib.contextmanager
def _python_signals() -> Iterator[None]:
    """Python's own SIGINT and SIGPIPE handling for the sweep. The console
    script lets both kill the process (right for the Rust commands), but a
    sweep catches Ctrl-C to keep its points and say how to resume, and then
    stops its workers, whose pipes must not kill it (EPIPE instead)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = {signal.SIGINT: signal.default_int_handler}
    if hasattr(signal, "SIGPIPE"):
        wanted[signal.SIGPIPE] = signal.SIG_IGN
    previous = {sig: signal.signal(sig, handler) for sig, handler in wanted.items()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)


def main(argv: Iterable[str], *, quiet: bool = False) -> int:
    """``tierlab sweep SWEEP.toml --out DIR [--ray ADDRESS] [--jobs N] [--set K=V]...``"""
    import argparse

    parser = argparse.ArgumentParser(
        prog="tierlab sweep",
        description="Run a grid of simulations (configs x traces x parameters) in parallel, "
        "resumably, and gather DIR/results.csv (one row per point). See docs/sweeps.md.",
    )
    parser.add_argument("sweep_file", metavar="SWEEP.toml")
    parser.add_argument("--out", required=True, help="output directory (points/, results.csv)")
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run on a Ray cluster (host:port, 'auto'), or 'local' for a Ray instance started here",
    )
    parser.add_argument("--jobs", "-j", type=int, help="local processes (default: the CPU count)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override for every point (repeatable)"
    )
    parser.add_argument("--report", action="store_true", help="also write DIR/report.html")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar or messages")
    args = parser.parse_args(list(argv))
    quiet = quiet or args.quiet
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be at least 1")
    code = 0
    try:
        with _python_signals():
            run_sweep(args.sweep_file, args.out, ray=args.ray, jobs=args.jobs, set=args.set, quiet=quiet)
    except SweepError as e:
        print(f"tierlab: error: {e}", file=sys.stderr)
        return 1
    except SweepFailed as e:
        print(f"tierlab: error: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt as e:
        # Printed even with --quiet: it explains exit code 130. On a
        # terminal, "\r" writes over the echoed ^C.
        cr = "\r" if sys.stderr.isatty() else ""
        what = str(e) if isinstance(e, SweepInterrupted) else "interrupted"
        print(f"{cr}tierlab sweep: {what}", file=sys.stderr)
        return 130
    if args.report:
        from .report import write_report

        path = write_report(args.out)
        if not quiet:
            print(f"  report: {path}", file=sys.stderr)
    return code

