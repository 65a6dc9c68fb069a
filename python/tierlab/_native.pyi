"""Type stubs of the Rust extension module (crates/tierlab-py/src/lib.rs)."""

from typing import Any

__version__: str

class TraceError(ValueError): ...
class ConfigError(ValueError):
    key: str | None

class ParamError(ConfigError):
    key: str | None
    found: str
    expected: str

def read_columns(
    path: str,
    format: str | None = None,
    skip_bad: bool = False,
    limit: int | None = None,
    blk_event: str | None = None,
) -> dict[str, Any]: ...
def trace_stats(
    path: str,
    format: str | None = None,
    skip_bad: bool = False,
    blk_event: str | None = None,
) -> dict[str, Any]: ...
def convert(
    path: str,
    out: str,
    to: str,
    format: str | None = None,
    skip_bad: bool = False,
    blk_event: str | None = None,
    fio_filename: str | None = None,
) -> dict[str, Any]: ...
def write_columns(
    columns: dict[str, Any],
    devices: list[str],
    time_base: str,
    out: str,
    to: str,
    fio_filename: str | None = None,
) -> dict[str, Any]: ...
def formats() -> list[tuple[str, str, bool]]: ...
def run_cli(args: list[str]) -> int: ...
def generate_columns(
    name: str, seed: int = 0, count: int | None = None, params: list[str] = ...
) -> dict[str, Any]: ...
def generate_to(
    path: str,
    to: str,
    name: str,
    seed: int = 0,
    count: int | None = None,
    params: list[str] = ...,
    fio_filename: str | None = None,
) -> dict[str, Any]: ...
def generators() -> list[tuple[str, str, list[tuple[str, str, str, str]]]]: ...
def presets() -> list[tuple[str, str, str]]: ...
def simulate(
    path: str | None = None,
    text: str | None = None,
    json: str | None = None,
    overrides: list[str] = ...,
    base_dir: str | None = None,
    out: str | None = None,
    progress: Any = None,
) -> dict[str, str | None]: ...

class Served:
    uri: str
    size_bytes: int
    block_min_bytes: int
    tiers: list[str]
    def stop(self) -> str | None: ...
    def running(self) -> bool: ...

def serve_start(
    path: str | None = None,
    text: str | None = None,
    json: str | None = None,
    overrides: list[str] = ...,
    base_dir: str | None = None,
    unix: str | None = None,
    tcp: str | None = None,
    export: str = "tierlab",
    read_only: bool = False,
    model_timing: bool = False,
    out: str | None = None,
    stats_interval_s: float = 10.0,
    record: str | None = None,
    io_engine: str = "auto",
    io_threads: int = 32,
    write_back_on_stop: bool = False,
) -> Served: ...
