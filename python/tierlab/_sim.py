"""Simulation runs (``tierlab sim``) from Python.

The run itself, the config parsing and the rendering of every output are
the Rust crates (``tierlab_sim``, ``tierlab_core::metrics``), executed with
the GIL released. Rust renders summary.json, series.csv, latency_cdf.csv
and timeline.vcd into memory (byte for byte what ``tierlab sim --out``
writes) and this module wraps them as a dict and pandas DataFrames.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from . import _native
from ._native import ConfigError
from ._progress import ProgressLike, native_callback

if TYPE_CHECKING:
    import pandas as pd

#: What :func:`simulate` accepts as a config.
ConfigLike = Union[str, "os.PathLike[str]", Mapping[str, Any]]
#: What :func:`simulate` accepts as ``set``.
OverridesLike = Union[Iterable[str], Mapping[str, Any]]

_DICT_ORIGIN = "<config dict>"
_I64 = (-(2**63), 2**63 - 1)

# series.csv: exact integer columns; the device-only counters are empty on
# `all` rows, hence nullable.
_SERIES_DTYPES = {
    "start_ns": "uint64",
    "end_ns": "uint64",
    "scope": "str",
    "ios": "uint64",
    "bytes": "uint64",
    "io_ticks_ns": "UInt64",
    "time_in_queue_ns": "UInt64",
}
_CDF_DTYPES = {"scope": "str", "latency_us": "float64", "cumulative_fraction": "float64"}


@dataclass(frozen=True, eq=False, repr=False)
class SimResult:
    """The results of one simulation run (see docs/metrics.md for every
    number and column).

    Attributes
    ----------
    summary:
        The content of summary.json: totals over all host IOs at the top
        level (``ios``, ``iops``, ``mean_latency_us``, ``p99_latency_us``,
        ...), lists ``ops``, ``tiers``, ``tenants``, ``devices``, and
        ``run`` (seed, policy, simulated seconds, events, per-tenant
        issued/completed counts).
    series:
        series.csv in long form: per interval one ``scope == "all"`` row
        (host IOs) then one ``device:NAME`` row per device. Columns
        ``start_ns``, ``end_ns``, ``scope``, ``ios``, ``iops``, ``bytes``,
        ``mb_per_s``, ``mean_latency_us``, ``p99_latency_us``,
        ``max_latency_us``, ``util_percent``, ``avg_queue_size``,
        ``io_ticks_ns``, ``time_in_queue_ns``; NaN/<NA> where a column does
        not apply to the row or is undefined (no IOs in the interval).
    cdf:
        latency_cdf.csv: ``scope`` (``all``, ``op:read``, ``tier:NAME``,
        ``tenant:N``, ``device:NAME``), ``latency_us``,
        ``cumulative_fraction`` (ascending within a scope, ending at 1.0).
    ops, tiers, tenants, devices:
        ``summary["ops"]`` ... ``summary["devices"]`` as DataFrames, one
        row per entry, with a ``name`` column; ``devices`` also has the
        Linux disk statistics (``util_percent``, ``avg_queue_size``,
        ``io_ticks_ns``, ``time_in_queue_ns``, ``in_flight_at_end``).
    vcd:
        The device state timeline (timeline.vcd text), or None when the
        config does not set ``[output] timeline = true``.
    policy_series:
        policy_series.csv: the policy's own counters (e.g. ATSMF's
        ``memory_bytes``) at every interval boundary, ``time_s`` first;
        None for a policy without counters (passthrough, linear).
    dir:
        The directory the run's files are in (``out=``, or the directory
        :func:`load_run` read), else None.
    """

    summary: dict[str, Any]
    series: pd.DataFrame
    cdf: pd.DataFrame
    ops: pd.DataFrame
    tiers: pd.DataFrame
    tenants: pd.DataFrame
    devices: pd.DataFrame
    vcd: str | None
    policy_series: pd.DataFrame | None = None
    dir: str | None = None

    def __repr__(self) -> str:
        s = self.summary
        names = ", ".join(str(n) for n in self.devices["name"]) if len(self.devices) else ""
        return (
            f"SimResult(ios={s.get('ios')}, iops={s.get('iops')}, "
            f"mean_latency_us={s.get('mean_latency_us')}, "
            f"p99_latency_us={s.get('p99_latency_us')}, devices=[{names}], "
            f"intervals={s.get('intervals')}, vcd={'yes' if self.vcd is not None else 'no'})"
        )


def _key_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "."


def _to_json_ready(value: Any, path: tuple[str | int, ...]) -> Any:
    """Checks that a config dict has a TOML form (tables with string keys,
    arrays, strings, booleans, 64-bit integers, floats) and returns it with
    ``os.PathLike`` values as strings and tuples as lists."""

    def fail(what: str) -> ConfigError:
        err = ConfigError(
            f"{_DICT_ORIGIN}: key `{_key_path(path)}`: {what} has no TOML form; "
            "expected a dict, list, str, bool, int or float"
        )
        err.key = _key_path(path)
        return err

    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                err = ConfigError(
                    f"{_DICT_ORIGIN}: key `{_key_path(path)}`: key {k!r} is not a str"
                )
                err.key = _key_path(path)
                raise err
            out[k] = _to_json_ready(v, (*path, k))
        return out
    if isinstance(value, (list, tuple)):
        return [_to_json_ready(v, (*path, i)) for i, v in enumerate(value)]
    if isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        if not _I64[0] <= value <= _I64[1]:
            raise fail(f"{value} (outside the 64-bit signed range of TOML integers)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            # JSON has no inf/nan; no config key takes them anyway.
            raise fail(f"{value!r}")
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise fail(f"{value!r} ({type(value).__name__})")


def _override_value(key: str, value: Any) -> str:
    """A Python value as the TOML text after ``KEY=`` in ``--set``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        # A TOML basic string: JSON's escapes are TOML's (non-ASCII kept raw).
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        # A whole table (e.g. a driver of another mode): a TOML inline table.
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"set[{key!r}]: table key {k!r} is not a str")
            name = k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k, ensure_ascii=False)
            items.append(f"{name} = {_override_value(f'{key}.{k}', v)}")
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_override_value(f"{key}[{i}]", v) for i, v in enumerate(value)) + "]"
    raise TypeError(
        f"set[{key!r}]: {value!r} ({type(value).__name__}) is not a str, bool, int, float, "
        "dict (a table) or list"
    )


def _overrides(set_: OverridesLike | None) -> list[str]:
    if set_ is None:
        return []
    if isinstance(set_, Mapping):
        return [f"{k}={_override_value(k, v)}" for k, v in set_.items()]
    if isinstance(set_, (str, bytes)):
        raise TypeError(
            "set must be a list of 'key=value' strings or a dict, not a single string "
            f"({set_!r}); write set=[{set_!r}]"
        )
    items = list(set_)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"set: {item!r} is not a 'key=value' string")
    return items


def _scope_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame.from_records(rows) if rows else pd.DataFrame({"name": []})


def _read_csv(text: str, dtypes: dict[str, str]) -> pd.DataFrame:
    import pandas as pd

    return pd.read_csv(io.StringIO(text), dtype=dtypes, keep_default_na=False, na_values=[""])


def simulate(
    config: ConfigLike,
    *,
    set: OverridesLike | None = None,  # noqa: A002 - the CLI's --set
    out: str | os.PathLike[str] | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    progress: ProgressLike = None,
) -> SimResult:
    """Run one simulation, as ``tierlab sim CONFIG [--set k=v ...] [--out DIR]``.

    The config is parsed, the run simulated and every output rendered in
    Rust with the GIL released; the same config and seed give identical
    results (and byte-identical files).

    Parameters
    ----------
    config:
        The run configuration (see configs/ and docs/python.md), one of:

        - a path (``str`` without a newline, or ``os.PathLike``) to a TOML
          file;
        - TOML text (a ``str`` containing a newline: every valid config
          has several lines);
        - a dict with the same structure, e.g. from ``tomllib.load``
          (values: dict, list, str, bool, int, float, ``os.PathLike``).
    set:
        Overrides applied before parsing, as ``--set``: a list of
        ``"key=value"`` strings (the value read as TOML, else taken as a
        string), or a dict ``{"tenants.0.driver.iodepth": 8, "seed": 2}``
        whose values are str, bool, int or float. Lists are addressed by
        index: ``tenants.0.workload.params.count``.
    out:
        If given, a directory (created if needed) that also receives
        summary.json, series.csv, latency_cdf.csv and (with a timeline)
        timeline.vcd, exactly as ``tierlab sim --out`` writes them.
    base_dir:
        The directory relative trace paths in the config are resolved
        against. Default: the config file's directory, or the current
        directory for text and dict configs.
    progress:
        ``True`` draws a tqdm bar (rate, ETA) on stderr for runs longer
        than a second; a callable is called about every 0.1 s with a
        :class:`SimProgress` (e.g. a :class:`TqdmProgress`, or your own);
        None (default) reports nothing. The results do not depend on it.
        An exception the callable raises stops the run and propagates;
        Ctrl-C stops it with ``KeyboardInterrupt`` either way.

    Returns
    -------
    SimResult
        ``summary`` (dict), ``series``, ``cdf``, ``ops``, ``tiers``,
        ``tenants``, ``devices`` (DataFrames) and ``vcd`` (str or None).

    Raises
    ------
    ConfigError
        The config is invalid (also a ``ValueError``), with the message
        ``tierlab sim`` prints: origin (the path, ``<config text>`` or
        ``<config dict>``), key path, value and what is allowed.
    OSError
        The config file cannot be read, or ``out`` cannot be written.
    TraceError
        A trace the config replays has a malformed record.
    TypeError
        ``config`` or ``set`` has an unsupported type.
    """
    import pandas as pd  # noqa: F401 - fail early, before the run, if missing

    overrides = _overrides(set)
    kwargs: dict[str, Any] = {
        "overrides": overrides,
        "base_dir": None if base_dir is None else os.fspath(base_dir),
        "out": None if out is None else os.fspath(out),
    }
    if isinstance(config, Mapping):
        kwargs["json"] = json.dumps(_to_json_ready(config, ()), ensure_ascii=False)
    elif isinstance(config, os.PathLike):
        kwargs["path"] = os.fspath(config)
    elif isinstance(config, str):
        kwargs["text" if "\n" in config else "path"] = config
    else:
        raise TypeError(
            "config must be a path, TOML text or a dict, not "
            f"{type(config).__name__}"
        )
    callback, bar = native_callback(progress)
    if callback is not None:
        kwargs["progress"] = callback
    try:
        raw = _native.simulate(**kwargs)
    finally:
        if bar is not None:
            bar.close()
    summary = json.loads(raw["summary"])
    return SimResult(
        summary=summary,
        series=_read_csv(raw["series"], _SERIES_DTYPES),
        cdf=_read_csv(raw["cdf"], _CDF_DTYPES),
        ops=_scope_frame(summary["ops"]),
        tiers=_scope_frame(summary["tiers"]),
        tenants=_scope_frame(summary["tenants"]),
        devices=_scope_frame(summary["devices"]),
        vcd=raw["vcd"],
        policy_series=_policy_series(raw.get("policy_series")),
        dir=None if out is None else os.fspath(out),
    )


def _policy_series(text: str | None) -> pd.DataFrame | None:
    if text is None:
        return None
    import pandas as pd

    return pd.read_csv(io.StringIO(text))


def load_run(dir: str | os.PathLike[str]) -> SimResult:  # noqa: A002
    """Read the files of one ``tierlab sim --out DIR`` run (or a run of
    ``tierlab reproduce``, e.g. ``OUT/runs/src1_0-atsmf``) as a
    :class:`SimResult`, exactly as :func:`simulate` returns it.

    Raises ``FileNotFoundError`` naming the missing file when ``dir`` is
    not a run directory (summary.json, series.csv and latency_cdf.csv).
    """
    d = os.fspath(dir)
    texts = {}
    for name in ("summary.json", "series.csv", "latency_cdf.csv"):
        path = os.path.join(d, name)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path}: not found; a run directory (tierlab sim --out) has "
                "summary.json, series.csv and latency_cdf.csv"
            )
        with open(path, encoding="utf-8") as f:
            texts[name] = f.read()
    optional = {}
    for name in ("timeline.vcd", "policy_series.csv"):
        path = os.path.join(d, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                optional[name] = f.read()
    summary = json.loads(texts["summary.json"])
    return SimResult(
        summary=summary,
        series=_read_csv(texts["series.csv"], _SERIES_DTYPES),
        cdf=_read_csv(texts["latency_cdf.csv"], _CDF_DTYPES),
        ops=_scope_frame(summary.get("ops", [])),
        tiers=_scope_frame(summary.get("tiers", [])),
        tenants=_scope_frame(summary.get("tenants", [])),
        devices=_scope_frame(summary.get("devices", [])),
        vcd=optional.get("timeline.vcd"),
        policy_series=_policy_series(optional.get("policy_series.csv")),
        dir=d,
    )
