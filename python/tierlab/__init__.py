"""tierlab: simulate, replay and run hybrid block storage.

The Python layer is thin: the readers, writers and statistics are the Rust
crates behind the ``tierlab`` CLI (``tierlab._native``), and this package
turns their output into numpy arrays and pandas DataFrames.

Traces
    :func:`read_trace`   any supported trace file -> pandas DataFrame
    :func:`trace_stats`  the numbers of ``tierlab trace stats --json``
    :func:`convert`      trace file -> fio iolog / MSR CSV / DiskSim / native
    :func:`write_trace`  DataFrame -> trace file
    :func:`formats`      every format name, its description, whether writable

Native binary traces (zero-copy)
    :data:`NATIVE_DTYPE`, :func:`load_native`, :class:`NativeTrace`

Workload generators (deterministic by seed)
    :func:`generate`     name + parameters -> DataFrame
    :func:`generate_to`  name + parameters -> trace file, streamed
    :func:`generators`, :func:`presets`  what exists, with parameter docs

Simulation (``tierlab sim``)
    :func:`simulate`     config (path, TOML text or dict) -> :class:`SimResult`
                         (summary dict, series / CDF / per-device DataFrames,
                         the VCD timeline); bad configs raise
                         :class:`ConfigError` (a ``ValueError``)

    :func:`load_run`     a ``tierlab sim --out`` directory -> :class:`SimResult`
    progress:            ``simulate(..., progress=True)`` draws a tqdm bar;
                         :class:`SimProgress`, :class:`TqdmProgress`

Analyses and paper reproductions (``tierlab analyze`` / ``reproduce``)
    :func:`analyze_concentrations`  trace -> heat map, concentrations, metrics
    :func:`reproduce`    ``"atsmf" | "hswd" | "qos"`` -> :class:`Outputs`
                         (every CSV a DataFrame, each run a SimResult)
    :func:`load_outputs` any tierlab output directory -> :class:`Outputs`

Plots, reports, sweeps
    :mod:`tierlab.plots`   matplotlib: CDFs, time series, heat maps, bars
    :func:`write_report`   output directory -> one self-contained HTML file
    :mod:`tierlab.sweep`   grids of runs on local processes or Ray
                           (:func:`tierlab.sweep.run_sweep`)

Cache-only studies (``tierlab cache``)
    :func:`cache_sim`    trace + policies × capacities -> DataFrame of miss
                         counts (one pass, libCacheSim semantics)

Errors in trace content raise :class:`TraceError` (a ``ValueError``) with
the same message the CLI prints (``file:line: field `X`: expected ...,
found "..."``); missing or unreadable files raise the matching ``OSError``.
A value that is not allowed (a config key, a capacity, a page size) raises
:class:`ParamError`, a :class:`ConfigError` whose ``key``, ``found`` and
``expected`` attributes say which key (``devices[1].capacity_bytes``), what
was there and what is allowed; other config errors are :class:`ConfigError`
with ``key`` set when they concern one.

numpy and pandas are imported on first use, so ``import tierlab`` (and the
``tierlab`` console script) stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _native
from ._cache import cache_sim
from ._cli import run_cli
from ._generators import generate, generate_to, generators, presets
from ._native import ConfigError, ParamError, TraceError
from ._outputs import CommandError, Outputs, analyze_concentrations, load_outputs, reproduce
from ._progress import SimProgress, TqdmProgress
from ._serve import Served, serve
from ._sim import SimResult, load_run, simulate
from ._traces import convert, formats, read_trace, trace_stats, write_trace
from .report import write_report

if TYPE_CHECKING:
    from .native import NATIVE_DTYPE, NativeTrace, load_native

__version__: str = _native.__version__

__all__ = [
    "NATIVE_DTYPE",
    "CommandError",
    "ConfigError",
    "NativeTrace",
    "Outputs",
    "ParamError",
    "SimProgress",
    "Served",
    "SimResult",
    "TqdmProgress",
    "TraceError",
    "__version__",
    "analyze_concentrations",
    "cache_sim",
    "convert",
    "formats",
    "generate",
    "generate_to",
    "generators",
    "load_native",
    "load_outputs",
    "load_run",
    "presets",
    "read_trace",
    "reproduce",
    "run_cli",
    "serve",
    "simulate",
    "trace_stats",
    "write_report",
    "write_trace",
]

# Names that need numpy: imported from tierlab.native on first access.
_LAZY_NATIVE = ("NATIVE_DTYPE", "NativeTrace", "load_native")


def __getattr__(name: str) -> Any:
    if name in _LAZY_NATIVE:
        from . import native

        value = getattr(native, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tierlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NATIVE))
