//! Trace writers: fio iolog v3, MSR Cambridge CSV, DiskSim/MQSim ASCII and
//! the native binary format. Text outputs are compressed when the output
//! name ends in .gz/.bz2/.xz/.zst. Each writer takes exactly what its reader
//! gives back, so read → write → read is lossless for the fields the format
//! carries (tests/roundtrip.rs).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::formats::fio::HEADER_V3;
use crate::formats::msr::FILETIME_UNIX_EPOCH;
use crate::formats::native::NativeWriter;
use crate::reader::RecordStream;
use crate::record::{IoRecord, Op, TimeBase};

#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// fio: the file name written for each device; `{device}` is replaced by
    /// the device name and `{id}` by its id. Default: the device name.
    pub fio_filename: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteSummary {
    pub records: u64,
    /// fio: records whose time was earlier than their predecessor's and were
    /// written at the predecessor's time (fio replays timestamps in order).
    pub retimed: u64,
}

fn err(format: Format, message: impl Into<String>) -> TraceError {
    TraceError::Write {
        format: format.name(),
        message: message.into(),
    }
}

fn io_err(format: Format, path: &Path, e: io::Error) -> TraceError {
    err(format, format!("{}: {e}", path.display()))
}

/// Opens a text output (`-` for stdout), compressing by file extension.
fn text_output(path: &Path, format: Format) -> Result<Box<dyn Write>> {
    if path == Path::new("-") {
        return Ok(Box::new(BufWriter::with_capacity(
            1 << 16,
            io::stdout().lock(),
        )));
    }
    let file = File::create(path).map_err(|e| io_err(format, path, e))?;
    let file = BufWriter::with_capacity(1 << 16, file);
    let name = path.to_string_lossy();
    let out: Box<dyn Write> = if name.ends_with(".gz") {
        Box::new(flate2::write::GzEncoder::new(
            file,
            flate2::Compression::default(),
        ))
    } else if name.ends_with(".bz2") {
        Box::new(bzip2::write::BzEncoder::new(
            file,
            bzip2::Compression::default(),
        ))
    } else if name.ends_with(".xz") {
        Box::new(liblzma::write::XzEncoder::new(file, 6))
    } else if name.ends_with(".zst") {
        Box::new(
            zstd::stream::write::Encoder::new(file, 3)
                .map_err(|e| io_err(format, path, e))?
                .auto_finish(),
        )
    } else {
        Box::new(file)
    };
    Ok(out)
}

/// Writes every record of `stream` to `path` in `format`.
pub fn write_trace(
    stream: &mut dyn RecordStream,
    path: &Path,
    format: Format,
    options: &WriteOptions,
) -> Result<WriteSummary> {
    match format {
        Format::Native => write_native(stream, path),
        Format::FioIolog => {
            let mut out = text_output(path, format)?;
            let summary =
                write_fio(stream, &mut out, options).map_err(|e| wrap(format, path, e))?;
            out.flush().map_err(|e| io_err(format, path, e))?;
            Ok(summary)
        }
        Format::Msr => {
            let mut out = text_output(path, format)?;
            let summary = write_msr(stream, &mut out).map_err(|e| wrap(format, path, e))?;
            out.flush().map_err(|e| io_err(format, path, e))?;
            Ok(summary)
        }
        Format::Disksim => {
            let mut out = text_output(path, format)?;
            let summary = write_disksim(stream, &mut out).map_err(|e| wrap(format, path, e))?;
            out.flush().map_err(|e| io_err(format, path, e))?;
            Ok(summary)
        }
        other => {
            let names: Vec<&str> = Format::WRITABLE.iter().map(|f| f.name()).collect();
            Err(err(
                other,
                format!(
                    "tierlab does not write this format; it writes {}",
                    names.join(", ")
                ),
            ))
        }
    }
}

/// Errors inside a writer are either the stream's own (kept as they are) or
/// output errors (given the output path).
enum WriteError {
    Stream(TraceError),
    Io(io::Error),
    Record(String),
}

impl From<TraceError> for WriteError {
    fn from(e: TraceError) -> Self {
        WriteError::Stream(e)
    }
}

impl From<io::Error> for WriteError {
    fn from(e: io::Error) -> Self {
        WriteError::Io(e)
    }
}

fn wrap(format: Format, path: &Path, e: WriteError) -> TraceError {
    match e {
        WriteError::Stream(e) => e,
        WriteError::Io(e) => io_err(format, path, e),
        WriteError::Record(m) => err(format, m),
    }
}

fn write_native(stream: &mut dyn RecordStream, path: &Path) -> Result<WriteSummary> {
    let format = Format::Native;
    if path == Path::new("-") {
        return Err(err(
            format,
            "the native format needs a seekable output file, not stdout",
        ));
    }
    let name = path.to_string_lossy();
    if [".gz", ".bz2", ".xz", ".zst"]
        .iter()
        .any(|ext| name.ends_with(ext))
    {
        return Err(err(
            format,
            "native traces are not compressed (they are meant to be memory-mapped); drop the compression extension",
        ));
    }
    let file = File::create(path).map_err(|e| io_err(format, path, e))?;
    let mut writer =
        NativeWriter::new(BufWriter::with_capacity(1 << 20, file), stream.time_base())?;
    while let Some(r) = stream.next_record()? {
        writer.write(&r)?;
    }
    let records = writer.finish(stream.devices().names())?;
    Ok(WriteSummary {
        records,
        retimed: 0,
    })
}

fn fio_action(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
        Op::Trim => "trim",
        Op::Flush => "sync",
    }
}

/// fio iolog v3: timestamps in microseconds from the first record.
fn write_fio(
    stream: &mut dyn RecordStream,
    out: &mut dyn Write,
    options: &WriteOptions,
) -> Result<WriteSummary, WriteError> {
    writeln!(out, "{HEADER_V3}")?;
    let mut summary = WriteSummary::default();
    let mut files: Vec<Option<String>> = Vec::new();
    let mut first_ns: Option<u64> = None;
    let mut last_us: u64 = 0;
    let file_name = |id: u32, device: &str| -> String {
        match &options.fio_filename {
            Some(t) => t
                .replace("{device}", device)
                .replace("{id}", &id.to_string()),
            None => device.to_string(),
        }
    };
    while let Some(r) = stream.next_record()? {
        let base = *first_ns.get_or_insert(r.time_ns);
        let mut us = r.time_ns.saturating_sub(base) / 1_000;
        if r.time_ns < base || us < last_us {
            summary.retimed += 1;
            us = last_us;
        }
        last_us = us;
        let id = r.device_id as usize;
        if files.len() <= id {
            files.resize(id + 1, None);
        }
        if files[id].is_none() {
            let device = stream
                .devices()
                .name(r.device_id)
                .unwrap_or("0")
                .to_string();
            let name = file_name(r.device_id, &device);
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(WriteError::Record(format!(
                    "fio file name {name:?} for device {device:?} is empty or has whitespace; pass --fio-filename"
                )));
            }
            writeln!(out, "{us} {name} add")?;
            writeln!(out, "{us} {name} open")?;
            files[id] = Some(name);
        }
        let name = files[id].as_deref().unwrap();
        if r.op == Op::Flush {
            writeln!(out, "{us} {name} sync")?;
        } else {
            writeln!(
                out,
                "{us} {name} {} {} {}",
                fio_action(r.op),
                r.offset_bytes,
                r.size_bytes
            )?;
        }
        summary.records += 1;
    }
    for name in files.iter().flatten() {
        writeln!(out, "{last_us} {name} close")?;
    }
    Ok(summary)
}

/// MSR Cambridge CSV. Device names of the form `host_N` become
/// Hostname `host` and DiskNumber `N`; others get DiskNumber 0.
fn write_msr(
    stream: &mut dyn RecordStream,
    out: &mut dyn Write,
) -> Result<WriteSummary, WriteError> {
    let mut summary = WriteSummary::default();
    let unix = stream.time_base() == TimeBase::UnixEpoch;
    let mut names: Vec<Option<(String, String)>> = Vec::new();
    while let Some(r) = stream.next_record()? {
        let op = match r.op {
            Op::Read => "Read",
            Op::Write => "Write",
            other => {
                return Err(WriteError::Record(format!(
                    "MSR CSV has only Read and Write; record {} is a {other}",
                    summary.records + 1
                )));
            }
        };
        if r.time_ns % 100 != 0 || r.response_ns.is_some_and(|t| t % 100 != 0) {
            // Filetime ticks are 100 ns: finer times would be silently rounded.
            return Err(WriteError::Record(format!(
                "record {}: time {} ns is not a multiple of 100 ns (MSR's filetime resolution)",
                summary.records + 1,
                r.time_ns
            )));
        }
        let ticks = r.time_ns / 100 + if unix { FILETIME_UNIX_EPOCH } else { 0 };
        let id = r.device_id as usize;
        if names.len() <= id {
            names.resize(id + 1, None);
        }
        if names[id].is_none() {
            let device = stream
                .devices()
                .name(r.device_id)
                .unwrap_or("0")
                .to_string();
            names[id] = Some(split_msr_device(&device));
        }
        let (host, disk) = names[id].as_ref().unwrap();
        writeln!(
            out,
            "{ticks},{host},{disk},{op},{},{},{}",
            r.offset_bytes,
            r.size_bytes,
            r.response_ns.unwrap_or(0) / 100
        )?;
        summary.records += 1;
    }
    Ok(summary)
}

fn split_msr_device(device: &str) -> (String, String) {
    match device.rsplit_once('_') {
        Some((host, disk))
            if !host.is_empty() && !disk.is_empty() && disk.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (host.to_string(), disk.to_string())
        }
        _ => (device.replace(',', "_"), "0".to_string()),
    }
}

/// DiskSim/MQSim ASCII (arrival in ns). Offsets and sizes must be whole
/// 512-byte sectors; devices are written as their numeric names or ids.
fn write_disksim(
    stream: &mut dyn RecordStream,
    out: &mut dyn Write,
) -> Result<WriteSummary, WriteError> {
    let mut summary = WriteSummary::default();
    let mut numbers: Vec<Option<u64>> = Vec::new();
    while let Some(r) = stream.next_record()? {
        check_sectors(&r, summary.records + 1)?;
        let flags = match r.op {
            Op::Read => 1,
            Op::Write => 0,
            other => {
                return Err(WriteError::Record(format!(
                    "DiskSim ASCII has only reads and writes; record {} is a {other}",
                    summary.records + 1
                )));
            }
        };
        let id = r.device_id as usize;
        if numbers.len() <= id {
            numbers.resize(id + 1, None);
        }
        let dev = *numbers[id].get_or_insert_with(|| {
            stream
                .devices()
                .name(r.device_id)
                .and_then(|n| n.parse().ok())
                .unwrap_or(r.device_id as u64)
        });
        writeln!(
            out,
            "{} {dev} {} {} {flags}",
            r.time_ns,
            r.offset_bytes / 512,
            r.size_bytes / 512
        )?;
        summary.records += 1;
    }
    Ok(summary)
}

fn check_sectors(r: &IoRecord, n: u64) -> Result<(), WriteError> {
    if r.offset_bytes % 512 != 0 || r.size_bytes % 512 != 0 {
        return Err(WriteError::Record(format!(
            "record {n}: offset {} / size {} bytes are not whole 512-byte sectors, which DiskSim requires",
            r.offset_bytes, r.size_bytes
        )));
    }
    Ok(())
}
