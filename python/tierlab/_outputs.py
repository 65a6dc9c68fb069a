"""The output directories of ``tierlab reproduce`` and ``tierlab analyze``
as Python objects: every CSV a DataFrame, summary.json a dict, every run a
:class:`~tierlab.SimResult`.

:func:`reproduce` calls the reproductions in Rust (tierlab-experiments,
through ``_native.reproduce``) with the GIL released; the analyses still
run the Rust CLI in this process (:func:`tierlab.run_cli`). This module
checks the options first (so a mistake is a clear Python error) and reads
what was written.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from . import _native
from ._cli import run_cli
from ._sim import SimResult, load_run

if TYPE_CHECKING:
    import pandas as pd

#: The papers ``tierlab reproduce`` knows.
SYSTEMS = ("atsmf", "hswd", "qos", "raid")


class CommandError(RuntimeError):
    """A ``tierlab`` command run from Python failed; the message is the
    command line and what it printed on stderr (``tierlab: error: ...``)."""


# Folders of an output directory that hold inputs or per-run files, not
# result tables.
_SKIP_DIRS = {"configs", "runs", "traces", "workloads", "points"}


@dataclass(eq=False)
class Outputs:
    """An output directory of ``tierlab reproduce``, ``tierlab analyze
    concentrations`` or ``tierlab demo``.

    Attributes
    ----------
    dir:
        The directory.
    kind:
        What wrote it: ``"atsmf"``, ``"hswd"``, ``"qos"``, ``"raid"``,
        ``"concentrations"``, ``"demo"``, ``"sim"`` or ``"sweep"``.
    tables:
        Every CSV file at the top of ``dir`` and one level below (except the
        ``configs``, ``runs``, ``traces``, ``workloads`` folders) as a
        DataFrame, keyed by its path without ``.csv``: ``"table"``,
        ``"cdf_src1_0"``, ``"eval1/series"``, ``"compare/table"``.
    summary:
        summary.json when there is one, else None.
    log:
        What the command printed on stdout (when run from Python with
        ``verbose=False``), else ``""``.
    """

    dir: Path
    kind: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    log: str = ""

    @property
    def table(self) -> pd.DataFrame:
        """The main table: ``table.csv`` (reproduce atsmf / hswd, or the
        demo's ``compare/table.csv``), a sweep's ``results.csv``, or the
        concentrations of ``analyze concentrations``."""
        for key in ("table", "compare/table", "results", "concentrations"):
            if key in self.tables:
                return self.tables[key]
        raise KeyError(f"{self.dir} has no main table; tables: {sorted(self.tables)}")

    def run_names(self) -> list[str]:
        """The names of the simulation runs kept under ``runs/`` (e.g.
        ``src1_0-atsmf``), sorted."""
        return [p.parent.name for p in sorted(self._runs_dir().glob("*/summary.json"))]

    def run(self, name: str) -> SimResult:
        """One run's full results (``runs/NAME``) as a :class:`SimResult`."""
        path = self._runs_dir() / name
        if not (path / "summary.json").is_file():
            raise KeyError(f"no run {name!r} in {self._runs_dir()}; runs: {self.run_names()}")
        return load_run(path)

    def _runs_dir(self) -> Path:
        if self.kind == "demo":
            return self.dir / "compare" / "runs"
        return self.dir / "runs"

    def __repr__(self) -> str:
        return f"Outputs(kind={self.kind!r}, dir={str(self.dir)!r}, tables={sorted(self.tables)})"


def detect_kind(dir: Path) -> str:  # noqa: A002
    """What wrote the directory (see :attr:`Outputs.kind`); ValueError when
    it is none of them."""
    if (dir / "README.txt").is_file() and (dir / "workload.tlt").is_file():
        return "demo"
    if (dir / "results.csv").is_file() and (dir / "sweep.json").is_file():
        return "sweep"
    if all((dir / f).is_file() for f in ("summary.json", "series.csv", "latency_cdf.csv")):
        return "sim"
    table = dir / "table.csv"
    if table.is_file():
        header = table.read_text(encoding="utf-8").split("\n", 1)[0]
        if "mem_access_ratio" in header:
            return "atsmf"
        if "rmw_count" in header:
            return "hswd"
        if "read_iops" in header and (dir / "improvement.csv").is_file():
            return "raid"
    if (dir / "summary.json").is_file() and any(dir.glob("eval*/series.csv")):
        return "qos"
    if (dir / "periods.csv").is_file() and (dir / "heatmap.csv").is_file():
        return "concentrations"
    raise ValueError(
        f"{dir}: not a tierlab output directory; expected the output of tierlab sim, "
        "reproduce atsmf|hswd|qos|raid, analyze concentrations, demo or sweep"
    )


def _read_tables(dir: Path) -> dict[str, pd.DataFrame]:  # noqa: A002
    import pandas as pd

    tables: dict[str, pd.DataFrame] = {}
    paths = sorted(dir.glob("*.csv")) + sorted(
        p for p in dir.glob("*/*.csv") if p.parent.name not in _SKIP_DIRS
    )
    for path in paths:
        key = path.relative_to(dir).with_suffix("").as_posix()
        tables[key] = pd.read_csv(path)
    return tables


def load_outputs(dir: str | os.PathLike[str]) -> Outputs:  # noqa: A002
    """Read an output directory of ``tierlab reproduce``, ``analyze
    concentrations``, ``demo``, ``sim`` or ``sweep`` (see :class:`Outputs`)."""
    d = Path(dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such directory")
    kind = detect_kind(d)
    summary = None
    if (d / "summary.json").is_file():
        summary = json.loads((d / "summary.json").read_text(encoding="utf-8"))
    return Outputs(dir=d, kind=kind, tables=_read_tables(d), summary=summary)


@contextlib.contextmanager
def _captured(verbose: bool) -> Iterator[dict[str, str]]:
    """Captures file descriptors 1 and 2 (where the Rust CLI writes) unless
    ``verbose``; yields a dict that receives ``stdout`` and ``stderr``."""
    out: dict[str, str] = {"stdout": "", "stderr": ""}
    if verbose:
        yield out
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    files = [tempfile.TemporaryFile(mode="w+b"), tempfile.TemporaryFile(mode="w+b")]
    try:
        os.dup2(files[0].fileno(), 1)
        os.dup2(files[1].fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for name, f in zip(("stdout", "stderr"), files):
                f.seek(0)
                out[name] = f.read().decode("utf-8", "replace")
    finally:
        for fd in saved:
            os.close(fd)
        for f in files:
            f.close()


def run_command(args: Sequence[str], *, verbose: bool = False) -> str:
    """Runs ``tierlab ARGS`` in this process; returns its stdout (captured
    unless ``verbose``) and raises :class:`CommandError` with its error
    message when it fails."""
    args = [str(a) for a in args]
    if not verbose:
        args = ["--quiet", *args]
    with _captured(verbose) as out:
        code = run_cli(args)
    if code != 0:
        message = out["stderr"].strip() or "(its error message went to stderr above)"
        raise CommandError(f"tierlab {' '.join(args)}: exit code {code}: {message}")
    return out["stdout"]


def _atsmf_workloads() -> list[str]:
    from ._generators import presets

    return [p["name"][len("atsmf.") :] for p in presets() if p["name"].startswith("atsmf.")]


def reproduce(
    system: Literal["atsmf", "hswd", "qos", "raid"],
    *,
    out: str | os.PathLike[str],
    quick: bool = False,
    only: str | Sequence[str] | None = None,
    traces: Mapping[str, str | os.PathLike[str]] | Sequence[str | os.PathLike[str]] | None = None,
    seed: int | None = None,
    seeds: int | None = None,
    scale: Literal["paper", "auto"] | None = None,
    report: bool = False,
    verbose: bool = False,
) -> Outputs:
    """Re-run a paper's experiments (``tierlab reproduce SYSTEM``) and
    return what they wrote as DataFrames.

    Parameters
    ----------
    system:
        ``"atsmf"`` (memory/flash tiering: docs/atsmf.md), ``"hswd"`` (SMR
        persistent cache: docs/hswd.md), ``"qos"`` (busy-rate IOPS
        guarantee: docs/qos.md) or ``"raid"`` (RAID 1 of two flash SSDs vs
        one: docs/flash-ssd.md).
    out:
        The output directory (created).
    quick:
        The short variant (``--quick``): seconds to a couple of minutes.
    only:
        atsmf: workload names (e.g. ``"src1_0"`` or ``["src1_0", "usr1"]``;
        ``"none"`` for only ``traces``); hswd: experiments (``mapping``,
        ``policies``, ``systems``). Not for qos or raid.
    traces:
        Real traces to add. atsmf: ``{"NAME": "PATH[@START_MIN-END_MIN]"}``;
        hswd: a list of paths; raid: the folder of the public traces
        (``--traces``; none by default: only the generated workloads run).
    seed:
        Seed of the generated workloads / runs (atsmf, hswd, raid).
    seeds:
        qos: seeds per evaluation in the full run.
    scale:
        atsmf: ATSMF's sub-LUN size and period for ``traces`` — the paper's
        (``"paper"``, the default: 1 GiB, 24 s) or derived from each trace
        (``"auto"``; docs/atsmf.md, "Scale").
    report:
        Also write ``out/report.html`` (:func:`tierlab.report.write_report`).
    verbose:
        Let the command print to this process's stdout/stderr (with its
        progress line) instead of capturing stdout into ``Outputs.log``.

    Returns
    -------
    Outputs
        ``tables`` (``table`` for atsmf/hswd: ``.table``; ``cdf_WORKLOAD``,
        ``memory_WORKLOAD``; qos: ``eval1/series`` ...), ``summary``, and
        :meth:`Outputs.run` for the full results of each run. Every column
        is defined in the system's doc.

    Raises
    ------
    ValueError
        An unknown system, workload or experiment, or an option the system
        does not take (the message lists what is allowed).
    CommandError
        The command failed (e.g. a trace that cannot be read).
    """
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; expected one of {', '.join(SYSTEMS)}")
    options: dict[str, Any] = {}
    if seed is not None and int(seed) < 0:
        raise ValueError(f"reproduce({system!r}): seed: {seed} is not a whole number >= 0")
    names = [only] if isinstance(only, str) else list(only or [])
    if system == "qos":
        for name, value in (("only", only), ("traces", traces), ("seed", seed), ("scale", scale)):
            if value is not None:
                raise ValueError(f"reproduce('qos'): `{name}` is not an option of qos (it takes quick, seeds)")
        if seeds is not None:
            if not 1 <= int(seeds) <= 100:
                raise ValueError(f"reproduce('qos'): seeds: {seeds} is not in 1..=100")
            options["seeds"] = int(seeds)
    elif system == "raid":
        for name, value in (("only", only), ("seeds", seeds), ("scale", scale)):
            if value is not None:
                raise ValueError(
                    f"reproduce('raid'): `{name}` is not an option of raid (it takes quick, seed, traces)"
                )
        if seed is not None:
            options["seed"] = int(seed)
        if traces is not None:
            if not isinstance(traces, (str, os.PathLike)):
                raise ValueError("reproduce('raid'): traces must be the folder of the public traces")
            options["traces_dir"] = os.fspath(traces)
    else:
        if seeds is not None:
            raise ValueError(f"reproduce({system!r}): `seeds` is an option of qos only")
        if seed is not None:
            options["seed"] = int(seed)
        if scale is not None and system != "atsmf":
            raise ValueError(f"reproduce({system!r}): `scale` is an option of atsmf only")
        if system == "atsmf":
            if scale is not None:
                if scale not in ("paper", "auto"):
                    raise ValueError(f"scale: {scale!r} is not 'paper' or 'auto'")
                options["scale"] = scale
            known = _atsmf_workloads()
            for n in names:
                if n != "none" and n not in known:
                    raise ValueError(f"only: unknown workload {n!r}; known: {', '.join(known)} (or 'none')")
            if traces is not None and not isinstance(traces, Mapping):
                raise ValueError("reproduce('atsmf'): traces must be a dict {NAME: 'PATH[@START_MIN-END_MIN]'}")
            options["traces"] = [f"{name}={os.fspath(path)}" for name, path in (traces or {}).items()]
        else:
            allowed = ("mapping", "policies", "systems")
            for n in names:
                if n not in allowed:
                    raise ValueError(f"only: unknown experiment {n!r}; expected {', '.join(allowed)}")
            if isinstance(traces, Mapping):
                raise ValueError("reproduce('hswd'): traces must be a list of paths")
            options["traces"] = [os.fspath(path) for path in traces or []]
        options["only"] = names
    with _captured(verbose) as captured:
        try:
            _native.reproduce(system, os.fspath(out), quick=quick, quiet=not verbose, **options)
        except RuntimeError as e:
            failure = str(e)
        else:
            failure = None
    if failure is not None:
        raise CommandError(f"tierlab reproduce {system}: {failure}")
    outputs = load_outputs(out)
    outputs.log = captured["stdout"]
    if report:
        from .report import write_report

        write_report(out)
    return outputs


def analyze_concentrations(
    trace: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str],
    sub_lun_size: str = "1GiB",
    period: str = "24s",
    top_n: int = 30,
    share_m: float = 0.6,
    device: str | None = None,
    start: str | None = None,
    end: str | None = None,
    format: str | None = None,  # noqa: A002
    extra_args: Sequence[str] = (),
    verbose: bool = False,
) -> Outputs:
    """The IO-concentration analysis of a trace (``tierlab analyze
    concentrations``, docs/atsmf.md "Workload analysis"): per-minute
    sub-LUN heat map, the concentrations of every period tracked across
    periods, and the Table-1 / Fig-1 metrics.

    Returns :class:`Outputs` with ``tables["heatmap"]`` (minute, sub-LUN,
    IOs), ``tables["periods"]``, ``tables["concentrations"]`` and
    ``summary`` (the metrics). ``start``/``end`` take durations such as
    ``"1920min"``; ``extra_args`` passes further options of the command
    (``tierlab analyze concentrations --help``), e.g.
    ``["--cache-size", "8GiB"]``.
    """
    args = [
        "analyze", "concentrations", os.fspath(trace), "--out", os.fspath(out),
        "--sub-lun-size", sub_lun_size, "--period", period,
        "--top-n", str(int(top_n)), "--share-m", repr(float(share_m)),
    ]  # fmt: skip
    for flag, value in (("--device", device), ("--start", start), ("--end", end), ("--format", format)):
        if value is not None:
            args += [flag, str(value)]
    args += [str(a) for a in extra_args]
    log = run_command(args, verbose=verbose)
    outputs = load_outputs(out)
    outputs.log = log
    return outputs
