"""``tierlab serve`` from Python: a stack as an NBD block device, for
notebooks and tests.

The server runs in a background thread of this process (the Rust event
loop, with the GIL released); leaving the ``with`` block stops it the way
SIGINT stops the command: requests in flight finish, the policy writes its
dirty data back, every backing store is fdatasync'ed, the outputs are
written. See docs/serve.md.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

from collections.abc import Mapping

from . import _native
from ._sim import ConfigLike, OverridesLike, _overrides, _to_json_ready


@dataclass
class Served:
    """A running (then stopped) ``tierlab serve``.

    Attributes
    ----------
    uri:
        The NBD URI clients connect to: ``nbd+unix:///tierlab?socket=PATH``
        or ``nbd://HOST:PORT/tierlab`` (libnbd, nbdinfo, qemu, fio's nbd
        engine take it as is).
    socket:
        The Unix socket path (None over TCP).
    size_bytes:
        The export's size.
    block_min_bytes:
        The smallest aligned unit clients may address (the policy's).
    tiers:
        The policy's tier names: extent flags of the ``tierlab:tier``
        metadata context index this list.
    report:
        After the ``with`` block: what the server did (the ``serve``
        section of summary.json: connections, requests by command, bytes,
        durability barriers, write-back time). docs/serve.md defines it.
    """

    uri: str
    socket: Optional[str]
    size_bytes: int
    block_min_bytes: int
    tiers: list[str]
    report: Optional[dict[str, Any]] = None
    _handle: Any = field(default=None, repr=False)

    def stop(self) -> dict[str, Any]:
        """Stops the server now (what leaving the ``with`` block does)."""
        if self._handle is not None:
            text = self._handle.stop()
            if text is not None:
                self.report = json.loads(text)
            self._handle = None
        return self.report or {}


@contextlib.contextmanager
def serve(
    config: ConfigLike,
    *,
    unix: Optional[str | os.PathLike[str]] = None,
    tcp: Optional[str] = None,
    set: Optional[OverridesLike] = None,
    export: str = "tierlab",
    read_only: bool = False,
    model_timing: bool = False,
    out: Optional[str | os.PathLike[str]] = None,
    stats_interval_s: float = 10.0,
    record: Optional[str | os.PathLike[str]] = None,
    io_engine: str = "auto",
    io_threads: int = 32,
    base_dir: Optional[str | os.PathLike[str]] = None,
    write_back_on_stop: bool = False,
    wait_poll_us: int = 50,
) -> Iterator[Served]:
    """Serves the stack of ``config`` over NBD while the ``with`` block runs.

    >>> with tierlab.serve("configs/serve-cache.toml", unix="/tmp/tl.sock") as s:
    ...     subprocess.run(["nbdinfo", "--map=tierlab:tier", s.uri])

    ``config`` is a path to a stack config (the ``[[devices]]`` and
    ``[policy]`` of a ``tierlab run`` config), its TOML text, or the same
    as a dict (relative paths in text and dicts resolve against
    ``base_dir``, default the current directory). Give
    exactly one of ``unix`` (a socket path) and ``tcp`` (``"PORT"`` on
    loopback, or ``"HOST:PORT"``). The other arguments are the command's
    flags (``tierlab serve --help``). Errors in the config raise
    :class:`tierlab.ConfigError`; a socket or device that cannot be opened
    raises :class:`RuntimeError`.
    """
    if (unix is None) == (tcp is None):
        raise ValueError("serve: give exactly one of unix=PATH and tcp='[HOST:]PORT'")
    source: dict[str, Any] = {}
    if isinstance(config, Mapping):
        source["json"] = json.dumps(_to_json_ready(config, ()), ensure_ascii=False)
    elif isinstance(config, os.PathLike):
        source["path"] = os.fspath(config)
    elif isinstance(config, str):
        source["text" if "\n" in config else "path"] = config
    else:
        raise TypeError(
            f"config must be a path, TOML text or a dict, not {type(config).__name__}"
        )
    handle = _native.serve_start(
        **source,
        overrides=_overrides(set),
        base_dir=None if base_dir is None else os.fspath(base_dir),
        unix=None if unix is None else os.fspath(unix),
        tcp=None if tcp is None else str(tcp),
        export=export,
        read_only=read_only,
        model_timing=model_timing,
        out=None if out is None else os.fspath(out),
        stats_interval_s=float(stats_interval_s),
        record=None if record is None else os.fspath(record),
        io_engine=io_engine,
        io_threads=int(io_threads),
        write_back_on_stop=bool(write_back_on_stop),
        wait_poll_us=int(wait_poll_us),
    )
    served = Served(
        uri=handle.uri,
        socket=None if unix is None else os.fspath(unix),
        size_bytes=handle.size_bytes,
        block_min_bytes=handle.block_min_bytes,
        tiers=list(handle.tiers),
        _handle=handle,
    )
    try:
        yield served
    finally:
        served.stop()
