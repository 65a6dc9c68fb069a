"""Cache-only hit-ratio studies (``tierlab cache``) from Python.

The simulation is the Rust crate ``tierlab_cache`` run with the GIL
released: every policy × capacity pair is fed the trace in one pass.
Requests are split into pages of ``page_size`` bytes (page key
``device_id << 48 | page``); every page reference is a lookup that inserts
on a miss, whatever the op (libCacheSim's semantics). Capacities are
given as libCacheSim's users give them — bytes (``8388608``), a size with a
binary unit (``"8MiB"``) or a share of the trace's footprint (``"1%"``) —
or as a page count with an explicit suffix (``"2048pages"``); results count
them in pages.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from typing import TYPE_CHECKING, Union

from . import _native

if TYPE_CHECKING:
    import pandas as pd

#: A capacity: bytes (int), a size with a binary unit ("64MiB"), a page
#: count ("2048pages") or a share of the trace's footprint ("1%").
CapacityLike = Union[int, str]

_COLUMNS = [
    "policy",
    "capacity_pages",
    "page_size_bytes",
    "requests",
    "io_requests",
    "misses",
    "miss_ratio",
    "read_requests",
    "read_misses",
    "write_requests",
    "write_misses",
]


def _as_list(value: str | Iterable[str] | CapacityLike | Iterable[CapacityLike]) -> list[str]:
    if isinstance(value, (str, int)):
        items = [value]
    else:
        items = list(value)
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise TypeError(f"expected str or int, got {type(v).__name__}: {v!r}")
        out.append(str(v))
    if not out:
        raise ValueError("expected at least one value")
    return out


def cache_sim(
    trace: str | os.PathLike[str] | pd.DataFrame,
    policies: str | Iterable[str],
    capacities: CapacityLike | Iterable[CapacityLike],
    page_size: int | str = 4096,
    format: str | None = None,
    skip_bad: bool = False,
) -> pd.DataFrame:
    """Miss counts of each eviction policy at each capacity, in one pass.

    Parameters
    ----------
    trace:
        A trace file (any format :func:`read_trace` reads, compressed or
        not) or a DataFrame as returned by :func:`read_trace` /
        :func:`generate` (written to a temporary native trace first).
    policies:
        Policy names (``"lru"``, ``"fifo"``, ``"arc"``, ...), or one name.
    capacities:
        Cache sizes, or one: bytes (``8388608``) or a size with a binary
        unit (``"8MiB"``), each a whole number of pages; a page count
        (``"2048pages"``); or a share of the trace's footprint, its
        distinct pages (``"1%"``, costs one more pass over the trace).
    page_size:
        Page size in bytes (or ``"4KiB"``); requests are split into pages.
    format, skip_bad:
        As for :func:`read_trace` (``format`` is detected when None).

    Returns
    -------
    pandas.DataFrame
        One row per policy × capacity (policies outermost, in the order
        given) with ``policy``, ``capacity_pages``, ``page_size_bytes``,
        ``requests`` (page references), ``io_requests`` (trace records),
        ``misses``, ``miss_ratio``, and the ``read_``/``write_`` splits of
        ``requests`` and ``misses``.

    Raises
    ------
    ParamError
        (a ``ValueError``) An unknown policy (with the nearest name), a
        capacity that is not a whole number of pages (a bare int is bytes),
        a page size that is not a whole number of 512-byte sectors; ``key``
        is ``policies``, ``capacities`` or ``page_size``.
    TraceError
        Malformed trace content.
    """
    import pandas as pd

    policy_list = _as_list(policies)
    capacity_list = _as_list(capacities)
    page = str(page_size)
    if isinstance(trace, pd.DataFrame):
        from ._traces import write_trace

        with tempfile.TemporaryDirectory(prefix="tierlab-cache-") as tmp:
            path = os.path.join(tmp, "frame.tlt")
            write_trace(trace, path)
            text = _native.cache_sim_json(path, policy_list, capacity_list, page, "native", skip_bad)
    else:
        text = _native.cache_sim_json(
            os.fspath(trace), policy_list, capacity_list, page, format, skip_bad
        )
    rows = json.loads(text)
    df = pd.DataFrame(rows)
    ordered = [c for c in _COLUMNS if c in df.columns]
    df = df[ordered + [c for c in df.columns if c not in ordered]]
    for c in ordered:
        if c not in ("policy", "miss_ratio"):
            df[c] = df[c].astype("uint64")
    return df
