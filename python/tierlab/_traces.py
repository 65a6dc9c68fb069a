"""Trace files <-> pandas DataFrames, statistics and conversion."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from . import _native

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

StrPath = str | os.PathLike[str]

#: Category order of the ``op`` column (the codes are the native format's).
OPS: tuple[str, ...] = ("read", "write", "trim", "flush")

#: Column order of the frames from :func:`read_trace` and
#: :meth:`tierlab.NativeTrace.to_pandas`.
COLUMNS: tuple[str, ...] = (
    "time_ns",
    "device",
    "device_id",
    "offset_bytes",
    "size_bytes",
    "op",
    "response_ns",
)


def formats() -> list[tuple[str, str, bool]]:
    """Every trace format tierlab knows, as ``(name, description, writable)``.

    The names are those accepted by ``format=`` / ``to=`` here and by
    ``--format`` on the CLI (aliases such as ``mqsim`` or ``cbs`` also work).
    """
    return list(_native.formats())


def read_trace(
    path: StrPath,
    format: str | None = None,
    *,
    skip_bad: bool = False,
    limit: int | None = None,
    blk_event: str | None = None,
) -> pd.DataFrame:
    """Read a block IO trace into a pandas DataFrame.

    The file is parsed by the Rust readers with the GIL released, into one
    contiguous buffer per column that numpy wraps without copying or creating
    per-record Python objects. ``.gz``/``.bz2``/``.xz``/``.zst`` inputs are
    decompressed transparently.

    Parameters
    ----------
    path:
        The trace file.
    format:
        A format name (see :func:`formats`), ``"csv:MAPPING"`` for any
        delimited text read by a column mapping (e.g.
        ``"csv:time=2,op=3,size=4,lbn=5,header"``, docs/trace-formats.md),
        or ``None`` to detect it from the content.
    skip_bad:
        Skip malformed records instead of raising; how many were skipped is
        in ``df.attrs["skipped_bad"]``.
    limit:
        Read at most this many records (the first ones).
    blk_event:
        blkparse only: ``"Q"`` or ``"D"`` (default D when present, else Q).

    Returns
    -------
    pandas.DataFrame
        One row per IO, columns:

        ``time_ns`` (uint64)
            Integer nanoseconds; since the Unix epoch when
            ``df.attrs["time_base"] == "unix_epoch"``, from an arbitrary
            origin when ``"relative"``, always 0 when ``"none"`` (formats
            without timestamps, e.g. ARC .lis).
        ``device`` (categorical of str)
            The device/volume name as the format records it (MSR:
            ``"<host>_<disk>"``); categories in order of first appearance.
        ``device_id`` (uint32)
            The category code of ``device``.
        ``offset_bytes`` (uint64), ``size_bytes`` (uint32)
        ``op`` (categorical)
            Categories always ``read``, ``write``, ``trim``, ``flush``.
        ``response_ns`` (pandas nullable ``UInt64``)
            The response time recorded in the trace, ``<NA>`` where the
            format has none. Exact integers (a float column would round
            values above 2**53).

        ``df.attrs`` holds ``path``, ``format`` (detected or given),
        ``time_base``, ``devices`` (list of names) and ``skipped_bad``.

    Raises
    ------
    tierlab.TraceError
        A malformed record (message ``file:line: field `X`: expected ...,
        found "..."``, or ``file: byte N: ...`` for binary formats), an
        undetectable format, a truncated compressed file.
    OSError
        The file cannot be opened or read (``FileNotFoundError`` etc.).
    """
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer, not {limit!r}")
    columns = _native.read_columns(os.fspath(path), format, skip_bad, limit, blk_event)
    return _frame_from_columns(columns, os.fspath(path))


def _frame_from_columns(columns: dict[str, Any], path: str) -> pd.DataFrame:
    import numpy as np

    return frame(
        time_ns=np.frombuffer(columns["time_ns"], dtype=np.uint64),
        device_id=np.frombuffer(columns["device_id"], dtype=np.uint32),
        devices=columns["devices"],
        offset_bytes=np.frombuffer(columns["offset_bytes"], dtype=np.uint64),
        size_bytes=np.frombuffer(columns["size_bytes"], dtype=np.uint32),
        op_codes=np.frombuffer(columns["op"], dtype=np.uint8),
        response_ns=np.frombuffer(columns["response_ns"], dtype=np.uint64),
        response_missing=np.frombuffer(columns["response_missing"], dtype=np.bool_),
        attrs={
            "path": path,
            "format": columns["format"],
            "time_base": columns["time_base"],
            "devices": list(columns["devices"]),
            "skipped_bad": columns["skipped_bad"],
        },
    )


def frame(
    *,
    time_ns: np.ndarray,
    device_id: np.ndarray,
    devices: list[str],
    offset_bytes: np.ndarray,
    size_bytes: np.ndarray,
    op_codes: np.ndarray,
    response_ns: np.ndarray,
    response_missing: np.ndarray,
    attrs: dict[str, Any],
) -> pd.DataFrame:
    """Assemble the standard trace frame from validated column arrays
    (shared by :func:`read_trace` and :meth:`NativeTrace.to_pandas`)."""
    import pandas as pd

    device_id = device_id.astype("uint32", copy=False)
    categories = pd.Index(list(devices), dtype=str)
    df = pd.DataFrame(
        {
            "time_ns": time_ns,
            "device": pd.Categorical.from_codes(device_id, categories=categories),
            "device_id": device_id,
            "offset_bytes": offset_bytes,
            "size_bytes": size_bytes,
            "op": pd.Categorical.from_codes(op_codes, categories=list(OPS)),
            "response_ns": pd.arrays.IntegerArray(response_ns, response_missing),
        },
        copy=False,
    )
    df.attrs.update(attrs)
    return df


def trace_stats(
    path: StrPath,
    format: str | None = None,
    *,
    skip_bad: bool = False,
    blk_event: str | None = None,
) -> dict[str, Any]:
    """Summary statistics of a trace: the dict ``tierlab trace stats --json``
    prints, computed by the same Rust code (streaming, GIL released).

    Keys include ``requests``, ``reads``, ``writes``, ``trims``,
    ``flushes``, ``read_bytes``, ``write_bytes``, ``trim_bytes``,
    ``footprint_4k_blocks`` (distinct (device, 4 KiB block) pairs touched),
    ``span_s`` (last minus first timestamp in seconds, ``None`` without
    timestamps), ``devices``, ``time_base``, ``format`` and ``skipped_bad``;
    definitions are in docs/metrics.md. Raises like :func:`read_trace`.
    """
    return dict(_native.trace_stats(os.fspath(path), format, skip_bad, blk_event))


_FORMAT_BY_EXTENSION: tuple[tuple[str, str], ...] = (
    (".iolog", "fio"),
    (".csv", "msr"),
    (".disksim", "disksim"),
    (".tlt", "native"),
    (".native", "native"),
)


def output_format(out: StrPath, to: str | None) -> str:
    """``to``, or the output format the name of ``out`` implies (as
    ``tierlab trace convert`` does): .iolog -> fio, .csv -> msr, .disksim ->
    disksim, .tlt/.native -> native, before any .gz/.bz2/.xz/.zst."""
    if to is not None:
        return to
    name = os.fspath(out).lower()
    for ext in (".gz", ".bz2", ".xz", ".zst"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    for ext, fmt in _FORMAT_BY_EXTENSION:
        if name.endswith(ext):
            return fmt
    raise ValueError(
        f"cannot tell the output format from {os.fspath(out)!r}; pass to= (fio, msr, disksim or native)"
    )


def convert(
    path: StrPath,
    out: StrPath,
    to: str | None = None,
    *,
    format: str | None = None,
    skip_bad: bool = False,
    blk_event: str | None = None,
    fio_filename: str | None = None,
) -> dict[str, Any]:
    """Convert a trace file to another format, streaming (GIL released).

    Parameters
    ----------
    path, out:
        Input and output files. Text outputs are compressed when ``out``
        ends in ``.gz``/``.bz2``/``.xz``/``.zst``; native output must be a
        plain, seekable file.
    to:
        Output format: ``"fio"`` (iolog v3, replayable with ``fio
        --read_iolog``), ``"msr"``, ``"disksim"`` or ``"native"``; by
        default implied by the name of ``out`` (.iolog, .csv, .disksim,
        .tlt or .native, optionally compressed).
    format:
        Input format, detected when ``None``.
    fio_filename:
        fio only: the file name written for each device; ``{device}`` and
        ``{id}`` are replaced (default: the device name).

    Returns
    -------
    dict
        ``records`` written, ``retimed`` (fio: records moved forward to keep
        time monotonic), ``format``, ``input_format``, ``skipped_bad``.
    """
    return dict(
        _native.convert(
            os.fspath(path),
            os.fspath(out),
            output_format(out, to),
            format,
            skip_bad,
            blk_event,
            fio_filename,
        )
    )


def _uint_column(name: str, values: Any, dtype: str) -> np.ndarray:
    """A column as a contiguous unsigned array, or a clear error."""
    import numpy as np
    import pandas as pd

    series = pd.Series(values) if not isinstance(values, pd.Series) else values
    if series.isna().any():
        raise ValueError(f"column {name!r} has missing values")
    arr = series.to_numpy()
    target = np.dtype(dtype)
    if arr.dtype.kind == "b":
        arr = arr.astype(target)
    elif arr.dtype.kind == "O":
        # e.g. Python ints above 2**63, which pandas keeps as objects
        try:
            arr = np.array(arr.tolist(), dtype=target)
        except (OverflowError, TypeError, ValueError):
            raise ValueError(
                f"column {name!r} must hold non-negative integers up to {np.iinfo(target).max} ({target})"
            ) from None
    if arr.dtype.kind not in "uif" or (arr.dtype.kind == "f" and len(arr) and not np.all(arr == np.floor(arr))):
        raise ValueError(f"column {name!r} must hold non-negative integers, not {arr.dtype}")
    if len(arr):
        lo, hi = arr.min(), arr.max()
        if lo < 0 or int(hi) > np.iinfo(target).max:
            raise ValueError(
                f"column {name!r} must hold non-negative integers up to {np.iinfo(target).max} "
                f"({target}); it has values in [{lo}, {hi}]"
            )
    return np.ascontiguousarray(arr.astype(target, copy=False))


def _op_codes(values: Any) -> np.ndarray:
    import numpy as np
    import pandas as pd

    series = pd.Series(values) if not isinstance(values, pd.Series) else values
    if series.dtype.kind in "uif":
        codes = _uint_column("op", series, "uint8")
        if len(codes) and codes.max() > 3:
            raise ValueError("column 'op': integer codes must be 0 (read), 1 (write), 2 (trim) or 3 (flush)")
        return codes
    if series.isna().any():
        raise ValueError("column 'op' has missing values")
    names = series.astype(str).str.lower()
    lookup = {name: code for code, name in enumerate(OPS)}
    codes = names.map(lookup)
    if codes.isna().any():
        bad = sorted(set(names[codes.isna()]))[:5]
        raise ValueError(f"column 'op': unknown operations {bad}; expected one of {list(OPS)}")
    return np.ascontiguousarray(codes.to_numpy(dtype=np.uint8))


def _devices(df: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    import numpy as np
    import pandas as pd

    n = len(df)
    if "device" in df.columns:
        col = df["device"]
        if isinstance(col.dtype, pd.CategoricalDtype):
            codes = col.cat.codes.to_numpy()
            names = [str(c) for c in col.cat.categories]
        else:
            if col.isna().any():
                raise ValueError("column 'device' has missing values")
            codes, uniques = pd.factorize(col.astype(str), sort=False)
            names = [str(u) for u in uniques]
        if len(codes) and codes.min() < 0:
            raise ValueError("column 'device' has missing values")
        return np.ascontiguousarray(codes.astype(np.uint32)), names
    if "device_id" in df.columns:
        ids = _uint_column("device_id", df["device_id"], "uint32")
        count = int(ids.max()) + 1 if n else 0
        known = list(df.attrs.get("devices", []))
        names = known if len(known) >= count else [str(i) for i in range(count)]
        return ids, names
    return np.zeros(n, dtype=np.uint32), ["0"]


def write_trace(
    df: pd.DataFrame,
    out: StrPath,
    format: str | None = None,
    *,
    time_base: str | None = None,
    fio_filename: str | None = None,
) -> dict[str, Any]:
    """Write a DataFrame of IOs as a trace file (any writable format).

    ``df`` needs ``time_ns``, ``offset_bytes``, ``size_bytes`` and ``op``
    (``read``/``write``/``trim``/``flush`` strings or categories, or codes
    0-3); optionally ``device`` (names; categorical keeps its categories) or
    ``device_id`` (names from ``df.attrs["devices"]``, else ``"0"``, ``"1"``,
    ...), and ``response_ns`` (missing values allowed). Frames from
    :func:`read_trace` round-trip losslessly through every writable format
    for the fields that format carries.

    ``time_base`` is ``"unix_epoch"``, ``"relative"`` or ``"none"``; by
    default ``df.attrs["time_base"]``, else ``"relative"``. ``format`` is
    the output format, implied by the name of ``out`` when ``None``; it and
    the returned summary are as ``to`` and the result of :func:`convert`.
    """
    import numpy as np

    missing = [c for c in ("time_ns", "offset_bytes", "size_bytes", "op") if c not in df.columns]
    if missing:
        raise ValueError(f"write_trace: the frame lacks columns {missing}")
    n = len(df)
    device_id, devices = _devices(df)
    if "response_ns" in df.columns:
        resp = df["response_ns"]
        response_missing = resp.isna().to_numpy(dtype=np.bool_)
        response_ns = _uint_column("response_ns", resp.where(~response_missing, 0), "uint64")
    else:
        response_missing = np.ones(n, dtype=np.bool_)
        response_ns = np.zeros(n, dtype=np.uint64)
    if time_base is None:
        time_base = str(df.attrs.get("time_base", "relative"))
    columns = {
        "records": n,
        "time_ns": _uint_column("time_ns", df["time_ns"], "uint64").tobytes(),
        "offset_bytes": _uint_column("offset_bytes", df["offset_bytes"], "uint64").tobytes(),
        "size_bytes": _uint_column("size_bytes", df["size_bytes"], "uint32").tobytes(),
        "device_id": device_id.tobytes(),
        "op": _op_codes(df["op"]).tobytes(),
        "response_ns": response_ns.tobytes(),
        "response_missing": response_missing.astype(np.uint8).tobytes(),
    }
    return dict(
        _native.write_columns(
            columns, devices, time_base, os.fspath(out), output_format(out, format), fio_filename
        )
    )


__all__ = [
    "COLUMNS",
    "OPS",
    "convert",
    "formats",
    "frame",
    "read_trace",
    "trace_stats",
    "write_trace",
]
