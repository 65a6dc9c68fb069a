"""Deterministic workload generators (``tierlab_trace::generate``).

Parameters are passed to Rust as the same ``key=value`` strings the CLI
takes, so names, units and defaults are those listed by :func:`generators`
(and docs/generators.md).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from . import _native

if TYPE_CHECKING:
    import pandas as pd


def _kv(params: dict[str, Any]) -> list[str]:
    items = []
    for key, value in params.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        items.append(f"{key}={value}")
    return items


def _check(seed: int, count: int | None) -> None:
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")
    if count is not None and (not isinstance(count, int) or count < 0):
        raise ValueError(f"count must be a non-negative integer, not {count!r}")


def generators() -> list[dict[str, Any]]:
    """Every generator family: ``name``, ``description`` and ``params`` (a
    list of ``{name, unit, default, help}``; ``default`` ``"-"`` = unset)."""
    return [
        {
            "name": name,
            "description": description,
            "params": [
                {"name": p, "unit": unit, "default": default, "help": help_}
                for p, unit, default, help_ in params
            ],
        }
        for name, description, params in _native.generators()
    ]


def presets() -> list[dict[str, str]]:
    """Every preset (e.g. the ATSMF MSR windows, the HSWD and SSD-RAID trace
    look-alikes): ``name``, the ``generator`` it configures (whose
    parameters can be overridden), ``description``."""
    return [
        {"name": name, "generator": generator, "description": description}
        for name, generator, description in _native.presets()
    ]


def generate(name: str, *, seed: int = 0, count: int | None = None, **params: Any) -> pd.DataFrame:
    """Generate a synthetic workload as a DataFrame with the columns of
    :func:`tierlab.read_trace` (time base ``relative``, no response times).

    Parameters
    ----------
    name:
        A generator (``uniform``, ``zipf``, ``sequential``, ``mixed``,
        ``io-concentration``, ``boot-storm``, ``file-share``, ``backup``,
        ``trace-like``) or a preset; see :func:`generators` and
        :func:`presets`.
    seed:
        Same name, parameters and seed give the same records.
    count:
        Number of records (default: the generator's own); the whole frame
        is held in memory, so use :func:`generate_to` for very long runs.
    **params:
        The generator's parameters, with the CLI's units:
        ``tierlab.generate("zipf", seed=1, count=10**6, theta=0.9,
        region_size_bytes="10GiB", read_ratio=0.7)``.

    Raises ``tierlab.TraceError`` naming the unknown generator or the bad
    parameter (and what it expects).
    """
    from ._traces import _frame_from_columns

    _check(seed, count)
    columns = _native.generate_columns(name, seed, count, _kv(params))
    df = _frame_from_columns(columns, f"<generate {name}>")
    df.attrs.update({"generator": name, "seed": seed, "params": dict(params)})
    return df


def generate_to(
    path: str | os.PathLike[str],
    name: str,
    *,
    seed: int = 0,
    count: int | None = None,
    to: str | None = None,
    fio_filename: str | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Stream a generated workload straight to a trace file; memory does not
    grow with ``count``. ``to`` is the output format, implied by the file
    name when ``None`` (as in :func:`tierlab.convert`); the other
    arguments are those of :func:`generate`. Returns ``{records, retimed,
    format}``."""
    from ._traces import output_format

    _check(seed, count)
    return dict(
        _native.generate_to(
            os.fspath(path), output_format(path, to), name, seed, count, _kv(params), fio_filename
        )
    )
