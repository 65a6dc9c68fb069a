//! `tierlab._native`: the Rust side of the `tierlab` Python package.
//!
//! Kept small and columnar: readers fill one contiguous buffer per column
//! with the GIL released and hand each to Python as a `bytearray`, which
//! `numpy.frombuffer` wraps without per-record Python objects. The pandas
//! frames, the native-format memmap and the documentation of the public API
//! live in `python/tierlab/`.

use std::ffi::OsString;
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileNotFoundError, PyIsADirectoryError, PyNotADirectoryError, PyOSError, PyPermissionError,
    PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyList};
use tierlab_sim::config::{self as sim_config, ConfigError as SimConfigError};
use tierlab_sim::run::{self as sim_run, RunResult};
use tierlab_sim::{Progress, SimError};
use tierlab_trace::formats::blkparse;
use tierlab_trace::generate::{self, KvParams};
use tierlab_trace::prefetch::with_prefetch;
use tierlab_trace::stats::{self, TraceStats};
use tierlab_trace::writer::{self, WriteOptions, WriteSummary};
use tierlab_trace::{
    DeviceTable, Format, IoRecord, Op, ReadOptions, RecordStream, TimeBase, TraceReader,
};

create_exception!(
    tierlab,
    TraceError,
    PyValueError,
    "A trace could not be read, converted or written: a malformed record, an \
     undetectable or unsupported format, a truncated compressed stream, or a \
     record the output format cannot hold. The message is the one the `tierlab` \
     CLI prints, e.g. `trace.csv:12: field `Size`: expected ..., found \"x\"`."
);

create_exception!(
    tierlab,
    ConfigError,
    PyValueError,
    "A simulation config is invalid: TOML that does not parse, an unknown key, \
     a value out of range, a bad `set` override, or a device, workload or \
     policy that cannot be built from it. The message is the one `tierlab sim` \
     prints: the config's origin, the key path, the value and what is allowed, \
     e.g. `run.toml: key `tenants[0].driver`: unknown field `iodepht`, expected \
     one of ...`."
);

create_exception!(
    tierlab,
    ParamError,
    ConfigError,
    "A config value that is not allowed: a `ConfigError` whose attributes say \
     which key (`key`, the path as written in the config, e.g. \
     `devices[1].capacity_bytes`; `None` for a bare argument), what was there \
     (`found`) and what is allowed (`expected`)."
);

/// The Python exception for a config error: `ParamError` (with `key`,
/// `found`, `expected`) for a bad value, an `OSError` for an unreadable
/// config file, else `ConfigError` (with `key` when the error is about
/// one; a trace the config names that cannot be read is its `__cause__`,
/// as the `OSError` or `TraceError` reading it directly raises). The
/// message is the CLI's.
fn config_err(e: SimConfigError) -> PyErr {
    let message = e.to_string();
    config_err_with(&e, message)
}

/// `config_err`'s class for `e`, with `message` (that of an error `e` is
/// part of).
fn config_err_with(e: &SimConfigError, message: String) -> PyErr {
    use tierlab_sim::config::ConfigErrorKind;
    let key = e.key_path();
    let err = match e.kind.as_ref() {
        ConfigErrorKind::Param(p) => return param_err_with(p, message),
        ConfigErrorKind::Trace { error, .. } => {
            let err = ConfigError::new_err(message);
            Python::attach(|py| err.set_cause(py, Some(trace_err(error, error.to_string()))));
            err
        }
        ConfigErrorKind::Io(io) => return os_error(io.kind(), message),
        _ => ConfigError::new_err(message),
    };
    Python::attach(|py| {
        let _ = err.value(py).setattr("key", key);
    });
    err
}

/// The Python exception for `tierlab serve`'s error: a bad option is a
/// `ParamError`, the stack's config as `config_err` maps it (a backing
/// store's key included), an OS error the `OSError` subclass of its kind
/// (a backing file, the socket); what stopped serving (a device IO the
/// policy could not survive, the final sync) a `RuntimeError`. The message
/// is the CLI's.
fn serve_err(e: tierlab_serve::ServeError) -> PyErr {
    let message = e.to_string();
    if let tierlab_serve::ServeError::Option(p) = &e {
        return param_err_with(p, message);
    }
    if let Some(c) = e.config_error() {
        return config_err_with(c, message);
    }
    if let Some(io) = e.io_error() {
        return os_error(io.kind(), message);
    }
    PyRuntimeError::new_err(message)
}

/// A bad argument or value as `tierlab.ParamError` (a `ValueError`).
fn param_err(e: tierlab_trace::ParamError) -> PyErr {
    let message = e.to_string();
    param_err_with(&e, message)
}

fn param_err_with(e: &tierlab_trace::ParamError, message: String) -> PyErr {
    let err = ParamError::new_err(message);
    let key = e.key();
    Python::attach(|py| {
        let v = err.value(py);
        // Setting attributes on a fresh exception object cannot fail.
        let _ = v.setattr("key", (!key.is_empty()).then_some(key));
        let _ = v.setattr("found", e.found.clone());
        let _ = v.setattr("expected", e.expected.clone());
    });
    err
}

/// An `OSError` of the subclass matching `kind`, with `message`.
fn os_error(kind: ErrorKind, message: String) -> PyErr {
    match kind {
        ErrorKind::NotFound => PyFileNotFoundError::new_err(message),
        ErrorKind::PermissionDenied => PyPermissionError::new_err(message),
        ErrorKind::IsADirectory => PyIsADirectoryError::new_err(message),
        ErrorKind::NotADirectory => PyNotADirectoryError::new_err(message),
        _ => PyOSError::new_err(message),
    }
}

/// Turns a library error into the Python exception a user expects: missing
/// or unreadable files are `OSError`s, everything about the content is a
/// `TraceError`. The message is exactly the CLI's.
fn to_py_err(e: tierlab_trace::TraceError) -> PyErr {
    let message = e.to_string();
    trace_err(&e, message)
}

/// `to_py_err`'s class for `e`, with `message` (a config error names the
/// key the trace came from).
fn trace_err(e: &tierlab_trace::TraceError, message: String) -> PyErr {
    if let tierlab_trace::TraceError::Io { source, .. } = e {
        return match source.kind() {
            ErrorKind::NotFound => PyFileNotFoundError::new_err(message),
            ErrorKind::PermissionDenied => PyPermissionError::new_err(message),
            ErrorKind::IsADirectory => PyIsADirectoryError::new_err(message),
            // Truncated or corrupt compressed streams: a problem with the data.
            ErrorKind::UnexpectedEof | ErrorKind::InvalidData | ErrorKind::InvalidInput => {
                TraceError::new_err(message)
            }
            _ => PyOSError::new_err(message),
        };
    }
    TraceError::new_err(message)
}

fn read_options(
    format: Option<&str>,
    skip_bad: bool,
    blk_event: Option<&str>,
) -> PyResult<ReadOptions> {
    let blkparse_event = blk_event
        .map(|e| {
            e.parse::<blkparse::Event>()
                .map_err(|e| param_err(e.within("blk_event")))
        })
        .transpose()?;
    // `csv:MAPPING` carries a column mapping in the one format string.
    let (format, csv) = match format {
        Some(f) => {
            let (format, csv) =
                tierlab_trace::formats::csv::parse_format_spec(f).map_err(param_err)?;
            (Some(format), csv)
        }
        None => (None, None),
    };
    Ok(ReadOptions {
        format,
        skip_bad,
        blkparse_event,
        csv,
    })
}

fn time_base_name(t: TimeBase) -> &'static str {
    match t {
        TimeBase::UnixEpoch => "unix_epoch",
        TimeBase::Relative => "relative",
        TimeBase::None => "none",
    }
}

fn parse_time_base(name: &str) -> PyResult<TimeBase> {
    match name {
        "unix_epoch" => Ok(TimeBase::UnixEpoch),
        "relative" => Ok(TimeBase::Relative),
        "none" => Ok(TimeBase::None),
        other => Err(PyValueError::new_err(format!(
            "unknown time base {other:?}; expected unix_epoch, relative or none"
        ))),
    }
}

/// A fixed-size number stored in native byte order in a column buffer.
trait Scalar: Copy {
    const BYTES: usize;
    fn put(self, out: &mut [u8]);
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            #[inline]
            fn put(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_ne_bytes());
            }
            #[inline]
            fn get(bytes: &[u8]) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(bytes);
                <$t>::from_ne_bytes(b)
            }
        }
    )*};
}
scalar!(u8, u32, u64);

/// Copies a column into a new `bytearray` (one memcpy-like pass; numpy then
/// wraps it without copying).
fn to_bytearray<'py, T: Scalar>(
    py: Python<'py>,
    values: &[T],
) -> PyResult<Bound<'py, PyByteArray>> {
    let len = values
        .len()
        .checked_mul(T::BYTES)
        .ok_or_else(|| PyValueError::new_err("column too large"))?;
    PyByteArray::new_with(py, len, |buf| {
        for (chunk, v) in buf.chunks_exact_mut(T::BYTES).zip(values) {
            v.put(chunk);
        }
        Ok(())
    })
}

/// Decodes a native-byte-order column passed from numpy (`arr.tobytes()`).
fn from_bytes<T: Scalar>(name: &str, bytes: &[u8], rows: usize) -> PyResult<Vec<T>> {
    if bytes.len() != rows.saturating_mul(T::BYTES) {
        return Err(PyValueError::new_err(format!(
            "column {name}: {} bytes for {rows} rows of {} bytes each",
            bytes.len(),
            T::BYTES
        )));
    }
    Ok(bytes.chunks_exact(T::BYTES).map(T::get).collect())
}

#[derive(Default)]
struct Columns {
    time_ns: Vec<u64>,
    offset_bytes: Vec<u64>,
    size_bytes: Vec<u32>,
    device_id: Vec<u32>,
    op: Vec<u8>,
    response_ns: Vec<u64>,
    /// 1 where the record has no response time.
    response_missing: Vec<u8>,
}

impl Columns {
    #[inline]
    fn push(&mut self, r: &IoRecord) {
        self.time_ns.push(r.time_ns);
        self.offset_bytes.push(r.offset_bytes);
        self.size_bytes.push(r.size_bytes);
        self.device_id.push(r.device_id);
        self.op.push(r.op as u8);
        self.response_ns.push(r.response_ns.unwrap_or(0));
        self.response_missing.push(r.response_ns.is_none() as u8);
    }
}

struct ReadResult {
    columns: Columns,
    devices: Vec<String>,
    time_base: TimeBase,
    /// The trace format (`None` for generated records).
    format: Option<Format>,
    skipped_bad: u64,
}

/// Drains up to `limit` records of a stream into columns.
fn collect(stream: &mut dyn RecordStream, limit: Option<u64>) -> tierlab_trace::Result<Columns> {
    let mut columns = Columns::default();
    let limit = limit.unwrap_or(u64::MAX);
    let mut n = 0u64;
    while n < limit {
        match stream.next_record()? {
            Some(r) => columns.push(&r),
            None => break,
        }
        n += 1;
    }
    Ok(columns)
}

fn read_all(
    path: PathBuf,
    options: ReadOptions,
    limit: Option<u64>,
) -> Result<ReadResult, tierlab_trace::TraceError> {
    let mut reader = TraceReader::open(&path, &options)?;
    let columns = collect(&mut reader, limit)?;
    Ok(ReadResult {
        columns,
        devices: reader.devices().names().to_vec(),
        time_base: reader.time_base(),
        format: Some(reader.format()),
        skipped_bad: reader.skipped_bad(),
    })
}

/// Reads a trace into column buffers (the GIL is released while reading).
///
/// Returns a dict: `records`, `time_ns` (u64), `offset_bytes` (u64),
/// `size_bytes` (u32), `device_id` (u32), `op` (u8 codes 0 read, 1 write,
/// 2 trim, 3 flush), `response_ns` (u64), `response_missing` (u8 0/1) — each
/// a `bytearray` in native byte order — and `devices`, `time_base`,
/// `format`, `skipped_bad`.
#[pyfunction]
#[pyo3(signature = (path, format=None, skip_bad=false, limit=None, blk_event=None))]
fn read_columns<'py>(
    py: Python<'py>,
    path: PathBuf,
    format: Option<&str>,
    skip_bad: bool,
    limit: Option<u64>,
    blk_event: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = read_options(format, skip_bad, blk_event)?;
    let result = py
        .detach(move || read_all(path, options, limit))
        .map_err(to_py_err)?;
    columns_dict(py, result)
}

/// The dict `read_columns` and `generate_columns` return. Each column is
/// copied into its `bytearray` and freed before the next, so the peak is
/// the columns plus one.
fn columns_dict(py: Python<'_>, result: ReadResult) -> PyResult<Bound<'_, PyDict>> {
    let ReadResult {
        columns,
        devices,
        time_base,
        format,
        skipped_bad,
    } = result;
    let out = PyDict::new(py);
    out.set_item("records", columns.time_ns.len())?;
    out.set_item("time_ns", to_bytearray(py, &columns.time_ns)?)?;
    drop(columns.time_ns);
    out.set_item("offset_bytes", to_bytearray(py, &columns.offset_bytes)?)?;
    drop(columns.offset_bytes);
    out.set_item("size_bytes", to_bytearray(py, &columns.size_bytes)?)?;
    drop(columns.size_bytes);
    out.set_item("device_id", to_bytearray(py, &columns.device_id)?)?;
    drop(columns.device_id);
    out.set_item("op", to_bytearray(py, &columns.op)?)?;
    drop(columns.op);
    out.set_item("response_ns", to_bytearray(py, &columns.response_ns)?)?;
    drop(columns.response_ns);
    out.set_item(
        "response_missing",
        to_bytearray(py, &columns.response_missing)?,
    )?;
    out.set_item("devices", PyList::new(py, devices)?)?;
    out.set_item("time_base", time_base_name(time_base))?;
    out.set_item("format", format.map(Format::name))?;
    out.set_item("skipped_bad", skipped_bad)?;
    Ok(out)
}

/// The statistics of `tierlab trace stats --json`, as a dict with the same
/// keys (the GIL is released while reading).
#[pyfunction]
#[pyo3(signature = (path, format=None, skip_bad=false, blk_event=None))]
fn trace_stats<'py>(
    py: Python<'py>,
    path: PathBuf,
    format: Option<&str>,
    skip_bad: bool,
    blk_event: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = read_options(format, skip_bad, blk_event)?;
    let (s, format, skipped_bad) = py
        .detach(move || {
            // Parsed ahead on a second thread where that pays, as in the CLI.
            let reader = TraceReader::open(&path, &options)?;
            let worth_it = reader.prefetch_pays();
            let (s, reader) = with_prefetch(reader, worth_it, stats::compute);
            Ok((s?, reader.format(), reader.skipped_bad()))
        })
        .map_err(to_py_err)?;
    // Destructured without `..`: a new statistic fails to compile here until
    // it is exposed to Python too (the key set must match the CLI's JSON).
    let TraceStats {
        requests,
        reads,
        writes,
        trims,
        flushes,
        read_bytes,
        write_bytes,
        trim_bytes,
        footprint_4k_blocks,
        span_s,
        devices,
        first_time_ns,
        min_time_ns,
        max_time_ns,
        out_of_order,
        mean_read_bytes,
        mean_write_bytes,
        write_ratio,
        max_offset_end_bytes,
        mean_response_ns,
        time_base,
    } = s;
    let d = PyDict::new(py);
    d.set_item("requests", requests)?;
    d.set_item("reads", reads)?;
    d.set_item("writes", writes)?;
    d.set_item("trims", trims)?;
    d.set_item("flushes", flushes)?;
    d.set_item("read_bytes", read_bytes)?;
    d.set_item("write_bytes", write_bytes)?;
    d.set_item("trim_bytes", trim_bytes)?;
    d.set_item("footprint_4k_blocks", footprint_4k_blocks)?;
    d.set_item("span_s", span_s)?;
    d.set_item("devices", devices)?;
    d.set_item("first_time_ns", first_time_ns)?;
    d.set_item("min_time_ns", min_time_ns)?;
    d.set_item("max_time_ns", max_time_ns)?;
    d.set_item("out_of_order", out_of_order)?;
    d.set_item("mean_read_bytes", mean_read_bytes)?;
    d.set_item("mean_write_bytes", mean_write_bytes)?;
    d.set_item("write_ratio", write_ratio)?;
    d.set_item("max_offset_end_bytes", max_offset_end_bytes)?;
    d.set_item("mean_response_ns", mean_response_ns)?;
    d.set_item("time_base", time_base)?;
    d.set_item("format", format.name())?;
    d.set_item("skipped_bad", skipped_bad)?;
    Ok(d)
}

fn parse_output_format(to: &str) -> PyResult<Format> {
    let format = to.parse::<Format>().map_err(|e| {
        param_err(
            tierlab_trace::ParamError::new(
                "to",
                format!("{to:?}"),
                "a trace format tierlab writes",
            )
            .because(e.to_string()),
        )
    })?;
    if !format.is_writable() {
        let names: Vec<&str> = Format::WRITABLE.iter().map(|f| f.name()).collect();
        return Err(PyValueError::new_err(format!(
            "tierlab does not write {format}; it writes {}",
            names.join(", ")
        )));
    }
    Ok(format)
}

fn summary_dict<'py>(
    py: Python<'py>,
    summary: &WriteSummary,
    format: Format,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("records", summary.records)?;
    d.set_item("retimed", summary.retimed)?;
    d.set_item("format", format.name())?;
    Ok(d)
}

/// Converts a trace file to another format (the GIL is released). Returns
/// `{records, retimed, format, input_format, skipped_bad}`.
#[pyfunction]
#[pyo3(signature = (path, out, to, format=None, skip_bad=false, blk_event=None, fio_filename=None))]
#[allow(clippy::too_many_arguments)]
fn convert<'py>(
    py: Python<'py>,
    path: PathBuf,
    out: PathBuf,
    to: &str,
    format: Option<&str>,
    skip_bad: bool,
    blk_event: Option<&str>,
    fio_filename: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = read_options(format, skip_bad, blk_event)?;
    let to = parse_output_format(to)?;
    let write_options = WriteOptions { fio_filename };
    let (summary, input_format, skipped_bad) = py
        .detach(move || {
            let mut reader = TraceReader::open(&path, &options)?;
            let summary = writer::write_trace(&mut reader, &out, to, &write_options)?;
            Ok((summary, reader.format(), reader.skipped_bad()))
        })
        .map_err(to_py_err)?;
    let d = summary_dict(py, &summary, to)?;
    d.set_item("input_format", input_format.name())?;
    d.set_item("skipped_bad", skipped_bad)?;
    Ok(d)
}

/// Records held in columns (from a DataFrame), streamed to a writer.
struct ColumnStream {
    columns: Columns,
    devices: DeviceTable,
    time_base: TimeBase,
    next: usize,
}

impl RecordStream for ColumnStream {
    fn next_record(&mut self) -> tierlab_trace::Result<Option<IoRecord>> {
        let i = self.next;
        let c = &self.columns;
        if i >= c.time_ns.len() {
            return Ok(None);
        }
        self.next += 1;
        let code = c.op[i];
        let op = Op::from_code(code).ok_or_else(|| {
            tierlab_trace::TraceError::Invalid(format!(
                "row {i}: op code {code} is not 0 (read), 1 (write), 2 (trim) or 3 (flush)"
            ))
        })?;
        let device_id = c.device_id[i];
        if device_id as usize >= self.devices.len() {
            return Err(tierlab_trace::TraceError::Invalid(format!(
                "row {i}: device_id {device_id} has no name ({} device names given)",
                self.devices.len()
            )));
        }
        Ok(Some(IoRecord {
            time_ns: c.time_ns[i],
            offset_bytes: c.offset_bytes[i],
            size_bytes: c.size_bytes[i],
            device_id,
            op,
            response_ns: (c.response_missing[i] == 0).then_some(c.response_ns[i]),
        }))
    }

    fn devices(&self) -> &DeviceTable {
        &self.devices
    }

    fn time_base(&self) -> TimeBase {
        self.time_base
    }
}

/// Writes records given as native-byte-order column bytes (see
/// `tierlab.write_trace`). Returns `{records, retimed, format}`.
#[pyfunction]
#[pyo3(signature = (columns, devices, time_base, out, to, fio_filename=None))]
fn write_columns<'py>(
    py: Python<'py>,
    columns: &Bound<'py, PyDict>,
    devices: Vec<String>,
    time_base: &str,
    out: PathBuf,
    to: &str,
    fio_filename: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let to = parse_output_format(to)?;
    let time_base = parse_time_base(time_base)?;
    let rows: usize = columns
        .get_item("records")?
        .ok_or_else(|| PyValueError::new_err("columns: missing `records`"))?
        .extract()?;
    let bytes = |name: &str| -> PyResult<Vec<u8>> {
        let item = columns
            .get_item(name)?
            .ok_or_else(|| PyValueError::new_err(format!("columns: missing `{name}`")))?;
        let b: &[u8] = item
            .extract::<&[u8]>()
            .map_err(|_| PyValueError::new_err(format!("columns: `{name}` must be bytes")))?;
        Ok(b.to_vec())
    };
    let table: DeviceTable = devices.iter().cloned().collect();
    if table.len() != devices.len() {
        return Err(PyValueError::new_err("device names must be distinct"));
    }
    let cols = Columns {
        time_ns: from_bytes("time_ns", &bytes("time_ns")?, rows)?,
        offset_bytes: from_bytes("offset_bytes", &bytes("offset_bytes")?, rows)?,
        size_bytes: from_bytes("size_bytes", &bytes("size_bytes")?, rows)?,
        device_id: from_bytes("device_id", &bytes("device_id")?, rows)?,
        op: from_bytes("op", &bytes("op")?, rows)?,
        response_ns: from_bytes("response_ns", &bytes("response_ns")?, rows)?,
        response_missing: from_bytes("response_missing", &bytes("response_missing")?, rows)?,
    };
    let mut stream = ColumnStream {
        columns: cols,
        devices: table,
        time_base,
        next: 0,
    };
    let write_options = WriteOptions { fio_filename };
    let summary = py
        .detach(move || writer::write_trace(&mut stream, &out, to, &write_options))
        .map_err(to_py_err)?;
    summary_dict(py, &summary, to)
}

fn generator_spec(name: &str, count: Option<u64>, params: Vec<String>) -> PyResult<KvParams> {
    let mut kv = KvParams::parse(&params).map_err(to_py_err)?;
    if let Some(count) = count {
        kv.set("count", &count.to_string()).map_err(to_py_err)?;
    }
    // Resolve now, with the GIL, so a bad name or parameter fails before any work.
    generate::resolve(name, &kv).map_err(to_py_err)?;
    Ok(kv)
}

/// Generates a workload into column buffers (the dict of `read_columns`,
/// with `format` None). `params` are `key=value` strings as on the CLI;
/// `count`, when given, is added as `count=N`. The GIL is released.
#[pyfunction]
#[pyo3(signature = (name, seed=0, count=None, params=Vec::new()))]
fn generate_columns<'py>(
    py: Python<'py>,
    name: String,
    seed: u64,
    count: Option<u64>,
    params: Vec<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let kv = generator_spec(&name, count, params)?;
    let result = py
        .detach(move || -> tierlab_trace::Result<ReadResult> {
            let mut stream = generate::from_spec(&name, &kv, seed)?;
            let columns = collect(&mut stream, None)?;
            Ok(ReadResult {
                columns,
                devices: stream.devices().names().to_vec(),
                time_base: stream.time_base(),
                format: None,
                skipped_bad: 0,
            })
        })
        .map_err(to_py_err)?;
    columns_dict(py, result)
}

/// Streams a generated workload to a trace file in format `to` (memory does
/// not grow with the record count). Returns `{records, retimed, format}`.
#[pyfunction]
#[pyo3(signature = (path, to, name, seed=0, count=None, params=Vec::new(), fio_filename=None))]
#[allow(clippy::too_many_arguments)]
fn generate_to<'py>(
    py: Python<'py>,
    path: PathBuf,
    to: &str,
    name: String,
    seed: u64,
    count: Option<u64>,
    params: Vec<String>,
    fio_filename: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let to = parse_output_format(to)?;
    let kv = generator_spec(&name, count, params)?;
    let write_options = WriteOptions { fio_filename };
    let summary = py
        .detach(move || {
            let mut stream = generate::from_spec(&name, &kv, seed)?;
            writer::write_trace(&mut stream, &path, to, &write_options)
        })
        .map_err(to_py_err)?;
    summary_dict(py, &summary, to)
}

/// `(name, unit, default, help)` of one generator parameter.
type ParamTuple = (&'static str, &'static str, &'static str, &'static str);

/// Every generator: a list of `(name, description, [(param, unit, default,
/// help), ...])`.
#[pyfunction]
fn generators() -> Vec<(&'static str, &'static str, Vec<ParamTuple>)> {
    generate::generators()
        .into_iter()
        .map(|g| {
            let params = g
                .params
                .iter()
                .map(|p| (p.name, p.unit, p.default, p.help))
                .collect();
            (g.name, g.description, params)
        })
        .collect()
}

/// Every preset: a list of `(name, generator, description)`.
#[pyfunction]
fn presets() -> Vec<(&'static str, &'static str, String)> {
    generate::presets()
        .into_iter()
        .map(|p| (p.name, p.generator, p.description))
        .collect()
}

/// Every format tierlab knows: a list of `(name, description, writable)`.
#[pyfunction]
fn formats() -> Vec<(&'static str, &'static str, bool)> {
    Format::ALL
        .iter()
        .map(|f| (f.name(), f.description(), f.is_writable()))
        .collect()
}

/// Runs the `tierlab` command line in this process and returns its exit
/// code. `args` excludes the program name. The GIL is released meanwhile.
#[pyfunction]
fn run_cli(py: Python<'_>, args: Vec<OsString>) -> i32 {
    let code = py.detach(move || {
        let argv = std::iter::once(OsString::from("tierlab")).chain(args);
        let code = tierlab_cli::main_with_args(argv);
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        code
    });
    // `ExitCode` is opaque; the CLI builds it from a u8, so find which one.
    (0..=u8::MAX)
        .find(|&c| ExitCode::from(c) == code)
        .map_or(1, i32::from)
}

/// Runs one paper's reproduction (`tierlab_experiments::reproduce`) into
/// `out`, with the GIL released; `tierlab.reproduce` checks the options
/// first and reads the files back as DataFrames. The options are those of
/// `tierlab reproduce SYSTEM` (unset ones at the command line's defaults):
/// `only` (atsmf workloads, hswd experiments), `traces` (atsmf
/// `NAME=PATH[@START-END]`, hswd paths), `traces_dir` (raid), `seed`
/// (atsmf, hswd, raid), `seeds` (qos), `scale` (atsmf: paper or auto).
/// `quiet` hides the progress line. A failed run raises RuntimeError with
/// the message the CLI prints after `tierlab: error: `.
#[pyfunction]
#[pyo3(signature = (system, out, quick=false, only=Vec::new(), traces=Vec::new(), traces_dir=None, seed=None, seeds=None, scale=None, quiet=true))]
#[allow(clippy::too_many_arguments)]
fn reproduce(
    py: Python<'_>,
    system: &str,
    out: PathBuf,
    quick: bool,
    only: Vec<String>,
    traces: Vec<String>,
    traces_dir: Option<PathBuf>,
    seed: Option<u64>,
    seeds: Option<u64>,
    scale: Option<String>,
    quiet: bool,
) -> PyResult<()> {
    use tierlab_experiments::reproduce::{atsmf, hswd, qos, raid};
    enum Job {
        Atsmf(atsmf::AtsmfArgs),
        Hswd(hswd::HswdArgs),
        Qos(qos::QosArgs),
        Raid(raid::RaidArgs),
    }
    let job = match system {
        "atsmf" => {
            let mut a = atsmf::AtsmfArgs::new(out);
            a.quick = quick;
            a.traces = traces;
            a.only = (!only.is_empty()).then(|| only.join(","));
            a.seed = seed.unwrap_or(a.seed);
            a.scale = match scale.as_deref() {
                None | Some("paper") => atsmf::ScaleMode::Paper,
                Some("auto") => atsmf::ScaleMode::Auto,
                Some(other) => {
                    return Err(PyValueError::new_err(format!(
                        "scale: {other:?} is not 'paper' or 'auto'"
                    )));
                }
            };
            Job::Atsmf(a)
        }
        "hswd" => {
            let mut a = hswd::HswdArgs::new(out);
            a.quick = quick;
            a.traces = traces.into_iter().map(PathBuf::from).collect();
            a.only = only;
            a.seed = seed.unwrap_or(a.seed);
            Job::Hswd(a)
        }
        "qos" => {
            let mut a = qos::QosArgs::new(out);
            a.quick = quick;
            if let Some(n) = seeds {
                if !(1..=100).contains(&n) {
                    return Err(PyValueError::new_err(format!(
                        "seeds: {n} is not in 1..=100"
                    )));
                }
                a.seeds = n;
            }
            Job::Qos(a)
        }
        "raid" => {
            let mut a = raid::RaidArgs::new(out);
            a.quick = quick;
            a.traces = traces_dir;
            a.seed = seed.unwrap_or(a.seed);
            Job::Raid(a)
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown system {other:?}; expected one of atsmf, hswd, qos, raid"
            )));
        }
    };
    let result = py.detach(move || {
        tierlab_experiments::progress::set_quiet(quiet);
        let r = match job {
            Job::Atsmf(a) => atsmf::run(a),
            Job::Hswd(a) => hswd::run(a),
            Job::Qos(a) => qos::run(a),
            Job::Raid(a) => raid::run(a),
        };
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // A `Box<dyn Error>` is not `Send`: carry its message out.
        r.map_err(|e| e.to_string())
    });
    result.map_err(PyRuntimeError::new_err)
}

/// Where a simulation config comes from.
enum ConfigSource {
    /// A TOML file; its directory resolves relative trace paths.
    Path(PathBuf),
    /// TOML text.
    Text(String),
    /// A JSON object (a Python dict, serialized by `tierlab.simulate`).
    Json(String),
}

/// How config text and dicts are named in error messages (a file is named
/// by its path, as the CLI does).
const TEXT_ORIGIN: &str = "<config text>";
const DICT_ORIGIN: &str = "<config dict>";

/// Why a simulation failed, carried out of the GIL-free section (a
/// `Box<dyn Error>` is not `Send`).
enum SimFailure {
    Config(SimConfigError),
    Trace(tierlab_trace::TraceError),
    Io(ErrorKind, String),
    Other(String),
    /// Raised by the progress callback, or Ctrl-C (KeyboardInterrupt).
    Python(PyErr),
}

impl From<SimConfigError> for SimFailure {
    fn from(e: SimConfigError) -> Self {
        SimFailure::Config(e)
    }
}

impl SimFailure {
    /// Sorts an error of `tierlab_sim::run::run` by its concrete type.
    fn from_run(e: Box<dyn std::error::Error>) -> SimFailure {
        let e = match e.downcast::<SimConfigError>() {
            Ok(c) => return SimFailure::Config(*c),
            Err(e) => e,
        };
        let e = match e.downcast::<SimError>() {
            Ok(s) => {
                return match *s {
                    SimError::Workload(t) => SimFailure::Trace(t),
                    other => SimFailure::Other(other.to_string()),
                };
            }
            Err(e) => e,
        };
        match e.downcast::<std::io::Error>() {
            Ok(io) => SimFailure::Io(io.kind(), io.to_string()),
            Err(e) => SimFailure::Other(e.to_string()),
        }
    }

    fn into_py(self) -> PyErr {
        match self {
            SimFailure::Config(e) => config_err(e),
            SimFailure::Trace(t) => to_py_err(t),
            SimFailure::Io(kind, m) => os_error(kind, m),
            SimFailure::Other(m) => PyRuntimeError::new_err(m),
            SimFailure::Python(e) => e,
        }
    }
}

/// The files of `tierlab sim --out`, rendered in memory.
struct SimOutputs {
    policy_series_csv: Option<String>,
    summary_json: String,
    series_csv: String,
    cdf_csv: String,
    vcd: Option<String>,
}

fn utf8(bytes: Vec<u8>) -> std::io::Result<String> {
    String::from_utf8(bytes).map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))
}

/// Renders what `tierlab_sim::run::write_outputs` writes (summary.json with
/// the run info merged in as `run`, series.csv, latency_cdf.csv,
/// timeline.vcd) into strings.
fn render_outputs(result: &RunResult) -> std::io::Result<SimOutputs> {
    let mut summary = Vec::new();
    result.metrics.write_summary_json(&mut summary)?;
    let mut summary: serde_json::Value = serde_json::from_slice(&summary)?;
    summary["run"] = serde_json::to_value(&result.info)?;
    let summary_json = serde_json::to_string_pretty(&summary)? + "\n";
    let mut series = Vec::new();
    result.metrics.write_series_csv(&mut series)?;
    let mut cdf = Vec::new();
    result.metrics.write_cdf_csv(&mut cdf)?;
    let vcd = match result.metrics.timeline() {
        Some(_) => {
            let mut vcd = Vec::new();
            result.metrics.write_vcd(&mut vcd)?;
            Some(utf8(vcd)?)
        }
        None => None,
    };
    Ok(SimOutputs {
        policy_series_csv: sim_run::policy_series_csv(result),
        summary_json,
        series_csv: utf8(series)?,
        cdf_csv: utf8(cdf)?,
        vcd,
    })
}

/// A JSON object → TOML text that `tierlab_sim::config::parse` reads.
fn json_to_toml(json: &str) -> Result<String, SimConfigError> {
    let mut de = serde_json::Deserializer::from_str(json);
    let table: toml::Table = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| SimConfigError::from_serde("", e).at(DICT_ORIGIN))?;
    toml::to_string(&table).map_err(|e| SimConfigError::syntax(e.to_string()).at(DICT_ORIGIN))
}

/// Loads, runs and renders one simulation (no Python objects: runs with
/// the GIL released).
fn run_simulation(
    source: ConfigSource,
    overrides: &[String],
    base_dir: Option<PathBuf>,
    out: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
) -> Result<SimOutputs, SimFailure> {
    let (config, default_base) = match source {
        ConfigSource::Path(path) => {
            // As `tierlab_sim::config::load`, but a missing or unreadable
            // file stays an OSError.
            let text = std::fs::read_to_string(&path)
                .map_err(|e| SimFailure::Io(e.kind(), format!("{}: {e}", path.display())))?;
            let config = sim_config::parse(&text, &path.display().to_string(), overrides)?;
            let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
            (config, base)
        }
        ConfigSource::Text(text) => (
            sim_config::parse(&text, TEXT_ORIGIN, overrides)?,
            PathBuf::new(),
        ),
        ConfigSource::Json(json) => (
            sim_config::parse(&json_to_toml(&json)?, DICT_ORIGIN, overrides)?,
            PathBuf::new(),
        ),
    };
    let base_dir = base_dir.unwrap_or(default_base);
    let total = sim_run::expected_total(&config);
    // Every ~0.1 s of wall time: look for Ctrl-C, then tell `progress`
    // (with the GIL, briefly). Either may stop the run.
    let mut stopped: Option<PyErr> = None;
    let mut last = std::time::Instant::now();
    let mut report = |p: &Progress| {
        if last.elapsed() < std::time::Duration::from_millis(100) {
            return true;
        }
        last = std::time::Instant::now();
        Python::attach(|py| {
            let outcome = py.check_signals().and_then(|()| match &progress {
                Some(f) => f
                    .call1(
                        py,
                        (
                            p.host_ios,
                            total.host_ios,
                            p.simulated_ns,
                            total.simulated_ns,
                            p.events,
                        ),
                    )
                    .map(drop),
                None => Ok(()),
            });
            match outcome {
                Ok(()) => true,
                Err(e) => {
                    stopped = Some(e);
                    false
                }
            }
        })
    };
    let result = sim_run::run_with_progress(&config, &base_dir, Some(&mut report));
    if let Some(e) = stopped {
        return Err(SimFailure::Python(e));
    }
    let result = result.map_err(SimFailure::from_run)?;
    if let Some(dir) = &out {
        sim_run::write_outputs(&result, dir)
            .map_err(|e| SimFailure::Io(e.kind(), format!("{}: {e}", dir.display())))?;
    }
    render_outputs(&result)
        .map_err(|e| SimFailure::Other(format!("rendering the simulation outputs: {e}")))
}

/// Runs one simulation (`tierlab sim`) with the GIL released. Give exactly
/// one of `path` (a TOML file), `text` (TOML text) or `json` (a JSON
/// object with the same structure). `overrides` are `key=value` strings as
/// after `--set`; `base_dir` resolves relative trace paths (default: the
/// config file's directory, else the current directory); `out`, when
/// given, also receives the files of `tierlab sim --out`.
///
/// Returns `{summary, series, cdf, vcd}`: the text of summary.json,
/// series.csv, latency_cdf.csv and timeline.vcd (None without
/// `[output] timeline = true`), and `policy_series` (policy_series.csv,
/// None for a policy without counters). `progress`, when given, is called
/// about every 0.1 s of wall time with `(host_ios, host_ios_total,
/// simulated_ns, simulated_ns_total, events)` (totals None when the config
/// does not tell them); an exception it raises, or Ctrl-C, stops the run
/// and is raised here.
#[pyfunction]
#[pyo3(signature = (path=None, text=None, json=None, overrides=Vec::new(), base_dir=None, out=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn simulate<'py>(
    py: Python<'py>,
    path: Option<PathBuf>,
    text: Option<String>,
    json: Option<String>,
    overrides: Vec<String>,
    base_dir: Option<PathBuf>,
    out: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let source = match (path, text, json) {
        (Some(p), None, None) => ConfigSource::Path(p),
        (None, Some(t), None) => ConfigSource::Text(t),
        (None, None, Some(j)) => ConfigSource::Json(j),
        _ => {
            return Err(PyValueError::new_err(
                "simulate: give exactly one of path, text or json",
            ));
        }
    };
    let outputs = py
        .detach(move || run_simulation(source, &overrides, base_dir, out, progress))
        .map_err(SimFailure::into_py)?;
    let d = PyDict::new(py);
    d.set_item("summary", outputs.summary_json)?;
    d.set_item("series", outputs.series_csv)?;
    d.set_item("cdf", outputs.cdf_csv)?;
    d.set_item("vcd", outputs.vcd)?;
    d.set_item("policy_series", outputs.policy_series_csv)?;
    Ok(d)
}

/// Cache-only simulation of every policy × capacity in one pass over the
/// trace (GIL released); the results as the JSON `tierlab cache --json`
/// prints. Capacities as the CLI's `--capacity` (bytes, units, `Npages`,
/// `N%` of the footprint).
#[pyfunction]
#[pyo3(signature = (path, policies, capacities, page_size, format=None, skip_bad=false))]
fn cache_sim_json(
    py: Python<'_>,
    path: PathBuf,
    policies: Vec<String>,
    capacities: Vec<String>,
    page_size: &str,
    format: Option<&str>,
    skip_bad: bool,
) -> PyResult<String> {
    let page_bytes =
        tierlab_cache::size::parse_page_size(page_size, "page_size").map_err(param_err)?;
    for p in &policies {
        tierlab_cache::policies::canonical_name(p)
            .map_err(|e| param_err(e.with_key("policies")))?;
    }
    let options = read_options(format, skip_bad, None)?;
    let footprint = || {
        let reader = TraceReader::open(&path, &options)?;
        let worth_it = reader.prefetch_pays();
        with_prefetch(reader, worth_it, |s| {
            tierlab_cache::size::footprint_pages(s, page_bytes)
        })
        .0
    };
    let pages = tierlab_cache::size::sizes_in_pages(&capacities, page_bytes, footprint).map_err(
        |e| match e {
            tierlab_trace::TraceError::Param(p) => param_err(p.with_key("capacities")),
            e => to_py_err(e),
        },
    )?;
    let configs = tierlab_cache::sim::grid(&policies, &pages, page_bytes).map_err(param_err)?;
    let results = py
        .detach(move || {
            let reader = TraceReader::open(&path, &options)?;
            let worth_it = reader.prefetch_pays();
            with_prefetch(reader, worth_it, |s| tierlab_cache::sim::run(s, &configs)).0
        })
        .map_err(to_py_err)?;
    serde_json::to_string(&results).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

type ServeThread =
    std::thread::JoinHandle<Option<Result<tierlab_serve::ServeReport, tierlab_serve::ServeError>>>;

/// A stack served over NBD in a background thread (`tierlab.serve`).
#[pyclass(module = "tierlab._native")]
struct Served {
    #[pyo3(get)]
    uri: String,
    #[pyo3(get)]
    size_bytes: u64,
    #[pyo3(get)]
    block_min_bytes: u32,
    #[pyo3(get)]
    tiers: Vec<String>,
    stop: tierlab_serve::StopHandle,
    /// None from the thread: it did not bind (the error went to
    /// `serve_start`).
    thread: Option<ServeThread>,
}

#[pymethods]
impl Served {
    /// Stops the server (finishes requests, writes dirty data back, syncs,
    /// writes the outputs) and returns its report as JSON text. Idempotent.
    fn stop(&mut self, py: Python<'_>) -> PyResult<Option<String>> {
        let Some(t) = self.thread.take() else {
            return Ok(None);
        };
        self.stop.stop();
        let report = py
            .detach(move || t.join())
            .map_err(|_| PyRuntimeError::new_err("the serving thread panicked"))?
            .ok_or_else(|| PyRuntimeError::new_err("the serving thread did not bind"))?
            .map_err(serve_err)?;
        serde_json::to_string(&report)
            .map(Some)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// True while the server thread runs.
    fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stop.stop();
            let _ = t.join();
        }
    }
}

/// Binds `tierlab serve` for a config (a path, or a dict as JSON) and runs
/// it in a thread; the `Served` handle stops it.
#[pyfunction]
#[pyo3(signature = (path=None, text=None, json=None, overrides=Vec::new(), base_dir=None, unix=None, tcp=None, export="tierlab".to_string(), read_only=false, model_timing=false, out=None, stats_interval_s=10.0, record=None, io_engine="auto".to_string(), io_threads=32, write_back_on_stop=false, wait_poll_us=tierlab_serve::WAIT_POLL_US_DEFAULT as i64))]
#[allow(clippy::too_many_arguments)]
fn serve_start(
    py: Python<'_>,
    path: Option<PathBuf>,
    text: Option<String>,
    json: Option<String>,
    overrides: Vec<String>,
    base_dir: Option<PathBuf>,
    unix: Option<PathBuf>,
    tcp: Option<String>,
    export: String,
    read_only: bool,
    model_timing: bool,
    out: Option<PathBuf>,
    stats_interval_s: f64,
    record: Option<PathBuf>,
    io_engine: String,
    io_threads: usize,
    write_back_on_stop: bool,
    wait_poll_us: i64,
) -> PyResult<Served> {
    let wait_poll_us = u32::try_from(wait_poll_us).map_err(|_| {
        param_err(tierlab_trace::ParamError::new(
            "wait_poll_us",
            wait_poll_us,
            format!("0 to {} µs", tierlab_serve::WAIT_POLL_US_MAX),
        ))
    })?;
    let (config, base) = match (path, text, json) {
        (Some(p), None, None) => {
            let (c, _) = tierlab_stack::StackConfig::load(&p, &overrides).map_err(config_err)?;
            let base = p.parent().map(PathBuf::from).unwrap_or_default();
            (c, base)
        }
        (None, Some(t), None) => {
            let (c, _) = tierlab_stack::StackConfig::parse(&t, TEXT_ORIGIN, &overrides)
                .map_err(config_err)?;
            (c, PathBuf::from("."))
        }
        (None, None, Some(j)) => {
            let text = json_to_toml(&j).map_err(config_err)?;
            let (c, _) = tierlab_stack::StackConfig::parse(&text, DICT_ORIGIN, &overrides)
                .map_err(config_err)?;
            (c, PathBuf::from("."))
        }
        _ => {
            return Err(PyValueError::new_err(
                "serve: give the config as a path, TOML text or a dict",
            ));
        }
    };
    let base = base_dir.unwrap_or(base);
    let listen = match (unix, tcp) {
        (Some(u), None) => tierlab_serve::Listen::Unix(u),
        (None, Some(t)) => tierlab_serve::Listen::parse_tcp(&t).map_err(serve_err)?,
        _ => {
            return Err(PyValueError::new_err(
                "serve: give exactly one of unix=PATH and tcp=\"[HOST:]PORT\"",
            ));
        }
    };
    let opts = tierlab_serve::ServeOptions {
        export_name: export,
        read_only,
        model_timing,
        out_dir: out,
        stats_interval_s,
        record,
        io_engine: io_engine
            .parse()
            .map_err(|e: tierlab_trace::ParamError| param_err(e.within("io_engine")))?,
        io_threads,
        wait_poll_us,
        verbose: false,
        write_back_on_stop,
    };
    // The stack is not `Send` (policies need not be): it is built on the
    // thread that runs it, which reports back what clients need.
    type Listening = (
        String,
        tierlab_nbd::Export,
        Vec<String>,
        tierlab_serve::StopHandle,
    );
    let (tx, rx) = std::sync::mpsc::channel::<Result<Listening, tierlab_serve::ServeError>>();
    let thread = std::thread::Builder::new()
        .name("tierlab-serve".into())
        .spawn(move || {
            let server = match tierlab_serve::Server::bind(&config, &base, &listen, opts) {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return None;
                }
            };
            let _ = tx.send(Ok((
                server.uri().to_string(),
                server.export().clone(),
                server.tier_names().to_vec(),
                server.stop_handle(),
            )));
            Some(server.run())
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the server thread: {e}")))?;
    let bound = py.detach(move || rx.recv());
    let (uri, export, tiers, stop) = match bound {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            let _ = thread.join();
            return Err(serve_err(e));
        }
        Err(_) => {
            let _ = thread.join();
            return Err(PyRuntimeError::new_err(
                "the serving thread stopped before binding",
            ));
        }
    };
    Ok(Served {
        uri,
        size_bytes: export.size_bytes,
        block_min_bytes: export.block_min_bytes,
        tiers,
        stop,
        thread: Some(thread),
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("TraceError", py.get_type::<TraceError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("ParamError", py.get_type::<ParamError>())?;
    m.add_function(wrap_pyfunction!(read_columns, m)?)?;
    m.add_function(wrap_pyfunction!(trace_stats, m)?)?;
    m.add_function(wrap_pyfunction!(convert, m)?)?;
    m.add_function(wrap_pyfunction!(write_columns, m)?)?;
    m.add_function(wrap_pyfunction!(formats, m)?)?;
    m.add_function(wrap_pyfunction!(generate_columns, m)?)?;
    m.add_function(wrap_pyfunction!(generate_to, m)?)?;
    m.add_function(wrap_pyfunction!(generators, m)?)?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(reproduce, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(cache_sim_json, m)?)?;
    m.add_function(wrap_pyfunction!(serve_start, m)?)?;
    m.add_class::<Served>()?;
    Ok(())
}
