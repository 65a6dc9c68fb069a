"""Deterministic workload generators (``tierlab_trace::generate``).

Parameters are passed to Rust as the same ``key=value`` strings the CLI
takes (``tierlab trace generate NAME key=value ...``), so names, units and
defaults are those documented for the CLI.
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


def _require(function: str) -> Any:
    native = getattr(_native, function, None)
    if native is None:
        raise NotImplementedError(
            "tierlab.generate: this build of tierlab has no workload generators bound "
            "(tierlab_trace::generate exposes none yet)"
        )
    return native


def generate(name: str, *, seed: int = 0, count: int | None = None, **params: Any) -> pd.DataFrame:
    """Generate a synthetic workload as a DataFrame (the columns of
    :func:`tierlab.read_trace`).

    ``name`` is a generator or preset; ``seed`` makes the output
    byte-identical across runs and machines; ``count`` caps the number of
    records (default: the generator's own); other keyword parameters are the
    generator's ``key=value`` parameters (``size=4KiB``,
    ``write_ratio=0.3``, ...).
    """
    from ._traces import _frame_from_columns

    columns = _require("generate_columns")(name, seed, count, _kv(params))
    return _frame_from_columns(columns, f"generate:{name}")


def generate_to(
    path: str | os.PathLike[str],
    name: str,
    *,
    seed: int = 0,
    count: int | None = None,
    to: str | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Stream a generated workload straight to a trace file (memory does not
    grow with ``count``). ``to`` is the output format, implied by the file
    name when ``None`` (as in :func:`tierlab.convert`). Returns the write
    summary."""
    from ._traces import output_format

    return dict(
        _require("generate_to")(os.fspath(path), output_format(path, to), name, seed, count, _kv(params))
    )
