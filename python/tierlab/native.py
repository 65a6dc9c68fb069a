"""tierlab's native binary trace format, memory-mapped with numpy.

The layout is defined (and written) by
``crates/tierlab-trace/src/formats/native.rs``; this module reads it with
nothing but ``struct`` and ``numpy.memmap``, so records are never copied::

    header, 64 bytes, little-endian
     0  [u8; 8]  magic "TIERLAB\\0"
     8  u32      version = 1
    12  u32      record_bytes = 32
    16  u64      records_offset = 64
    24  u64      record_count
    32  u8       time_base: 0 = Unix epoch ns, 1 = relative ns, 2 = no time
    33  [u8; 7]  reserved
    40  u64      names_offset (device-name trailer)
    48  u64      names_bytes
    56  [u8; 8]  reserved
    record_count records of NATIVE_DTYPE (32 bytes)
    trailer: device names, UTF-8, each followed by "\\n"; device_id indexes them

Produce such files with ``tierlab.convert(src, "x.tlt", to="native")``,
``tierlab.write_trace(df, "x.tlt", "native")`` or
``tierlab trace convert --to native``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._native import TraceError

if TYPE_CHECKING:
    import pandas as pd

#: One 32-byte record of a native trace. ``response_ns`` is
#: ``NO_RESPONSE`` (2**64 - 1) where the source had no response time; ``op``
#: is 0 read, 1 write, 2 trim, 3 flush.
NATIVE_DTYPE = np.dtype(
    [
        ("time_ns", "<u8"),
        ("offset_bytes", "<u8"),
        ("response_ns", "<u8"),
        ("size_bytes", "<u4"),
        ("device_id", "<u2"),
        ("op", "u1"),
        ("reserved", "u1"),
    ]
)
assert NATIVE_DTYPE.itemsize == 32

MAGIC = b"TIERLAB\0"
VERSION = 1
HEADER_BYTES = 64
NO_RESPONSE = 2**64 - 1
TIME_BASES = ("unix_epoch", "relative", "none")

_HEADER = struct.Struct("<8sIIQQB7xQQ8x")
assert _HEADER.size == HEADER_BYTES


@dataclass(frozen=True, eq=False)
class NativeTrace:
    """A native trace mapped into memory.

    Attributes
    ----------
    path:
        The file.
    records:
        A read-only ``numpy.memmap`` (structured, :data:`NATIVE_DTYPE`) over
        the records: nothing is read until it is touched.
    devices:
        Device names; ``records["device_id"]`` indexes them.
    time_base:
        ``"unix_epoch"``, ``"relative"`` or ``"none"`` (see
        :func:`tierlab.read_trace`).
    """

    path: str
    records: np.ndarray
    devices: tuple[str, ...]
    time_base: str

    def __len__(self) -> int:
        return len(self.records)

    def to_pandas(self) -> pd.DataFrame:
        """The records as the same DataFrame :func:`tierlab.read_trace`
        returns (columns are copied out of the map). Raises
        :class:`tierlab.TraceError` on an op code above 3 or a device id
        without a name."""
        from ._traces import frame

        r = self.records
        op = np.ascontiguousarray(r["op"])
        device_id = np.ascontiguousarray(r["device_id"]).astype(np.uint32)
        bad_op = np.flatnonzero(op > 3)
        if len(bad_op):
            i = int(bad_op[0])
            raise TraceError(
                f"{self.path}: byte {HEADER_BYTES + 32 * i}: field `op`: "
                f'expected 0 (read), 1 (write), 2 (trim) or 3 (flush), found "{op[i]}"'
            )
        bad_dev = np.flatnonzero(device_id >= len(self.devices))
        if len(bad_dev):
            i = int(bad_dev[0])
            raise TraceError(
                f"{self.path}: byte {HEADER_BYTES + 32 * i}: field `device_id`: "
                f'expected an index into the {len(self.devices)} device names, found "{device_id[i]}"'
            )
        response = np.ascontiguousarray(r["response_ns"])
        missing = response == np.uint64(NO_RESPONSE)
        return frame(
            time_ns=np.ascontiguousarray(r["time_ns"]),
            device_id=device_id,
            devices=list(self.devices),
            offset_bytes=np.ascontiguousarray(r["offset_bytes"]),
            size_bytes=np.ascontiguousarray(r["size_bytes"]),
            op_codes=op,
            response_ns=np.where(missing, np.uint64(0), response),
            response_missing=missing,
            attrs={
                "path": self.path,
                "format": "native",
                "time_base": self.time_base,
                "devices": list(self.devices),
                "skipped_bad": 0,
            },
        )


def load_native(path: str | os.PathLike[str]) -> NativeTrace:
    """Map a tierlab native trace without copying its records.

    The 64-byte header is parsed and checked (magic, version, record size,
    offsets within the file), the device names are read from the trailer,
    and the records are mapped read-only with ``numpy.memmap``.

    >>> t = tierlab.load_native("trace.tlt")            # doctest: +SKIP
    >>> t.records["size_bytes"].sum(), t.devices          # doctest: +SKIP
    >>> df = t.to_pandas()                                # doctest: +SKIP

    Raises :class:`tierlab.TraceError` for a file that is not a valid native
    trace, ``OSError`` when it cannot be opened.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
        file_bytes = os.fstat(f.fileno()).st_size

        def fail(message: str) -> TraceError:
            return TraceError(f"{path}: {message}")

        if len(head) < HEADER_BYTES or head[:8] != MAGIC:
            raise fail("not a tierlab native trace: missing the `TIERLAB\\0` magic or a 64-byte header")
        (
            _magic,
            version,
            record_bytes,
            records_offset,
            record_count,
            time_base_code,
            names_offset,
            names_bytes,
        ) = _HEADER.unpack(head)
        if version != VERSION:
            raise fail(f"native trace version {version} is not supported (this tierlab reads version {VERSION})")
        if record_bytes != NATIVE_DTYPE.itemsize:
            raise fail(f"native trace declares {record_bytes}-byte records; version 1 has 32")
        if time_base_code >= len(TIME_BASES):
            raise fail(f"byte 32: field `time_base`: expected 0, 1 or 2, found \"{time_base_code}\"")
        records_end = records_offset + record_count * record_bytes
        if records_offset < HEADER_BYTES or records_end > file_bytes:
            raise fail(
                f"truncated native trace: {record_count} records at byte {records_offset} "
                f"need {records_end} bytes, the file has {file_bytes}"
            )
        if names_offset < records_end or names_offset + names_bytes > file_bytes:
            raise fail(
                f"bad device-name trailer: {names_bytes} bytes at byte {names_offset} "
                f"(records end at {records_end}, the file has {file_bytes} bytes)"
            )
        f.seek(names_offset)
        trailer = f.read(names_bytes)
    try:
        text = trailer.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: byte {names_offset + e.start}: device names are not UTF-8") from None
    if text and not text.endswith("\n"):
        raise TraceError(f"{path}: byte {names_offset}: device-name trailer does not end with a newline")
    devices = tuple(text.split("\n")[:-1]) if text else ()
    if record_count == 0:
        records: np.ndarray = np.zeros(0, dtype=NATIVE_DTYPE)
    else:
        records = np.memmap(path, dtype=NATIVE_DTYPE, mode="r", offset=records_offset, shape=(record_count,))
    return NativeTrace(path=path, records=records, devices=devices, time_base=TIME_BASES[time_base_code])


__all__ = ["NATIVE_DTYPE", "NO_RESPONSE", "NativeTrace", "load_native"]
