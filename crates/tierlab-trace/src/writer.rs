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
    /// fio: records whose time was not a whole microsecond after the first
    /// record's (fio's iolog resolution); written rounded down.
    pub rounded_to_us: u64,
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

/// A text output that must be finished explicitly: a compressed stream's
/// last block and trailer are written by `finish`, whose errors must not be
/// lost in a destructor.
trait Sink: Write {
    fn finish(self: Box<Self>) -> io::Result<()>;
}

impl Sink for BufWriter<File> {
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.flush()?;
        self.get_ref().sync_data()
    }
}

impl Sink for BufWriter<io::StdoutLock<'static>> {
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.flush()
    }
}

impl Sink for flate2::write::GzEncoder<BufWriter<File>> {
    fn finish(self: Box<Self>) -> io::Result<()> {
        Box::new((*self).finish()?).finish()
    }
}

impl Sink for bzip2::write::BzEncoder<BufWriter<File>> {
    fn finish(self: Box<Self>) -> io::Result<()> {
        Box::new((*self).finish()?).finish()
    }
}

impl Sink for liblzma::write::XzEncoder<BufWriter<File>> {
    fn finish(self: Box<Self>) -> io::Result<()> {
        Box::new((*self).finish()?).finish()
    }
}

impl Sink for zstd::stream::write::Encoder<'static, BufWriter<File>> {
    fn finish(self: Box<Self>) -> io::Result<()> {
        Box::new((*self).finish()?).finish()
    }
}

/// A file being written under a temporary name beside its destination; it
/// replaces the destination only when complete, so a failed write leaves no
/// valid-looking output, and converting a file onto itself reads the whole
/// original first.
struct Staged {
    temp: std::path::PathBuf,
    dest: std::path::PathBuf,
}

impl Staged {
    fn new(dest: &Path) -> Staged {
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = dest.with_file_name(format!(".{name}.tierlab-{}.tmp", std::process::id()));
        Staged {
            temp,
            dest: dest.to_path_buf(),
        }
    }

    fn commit(self) -> io::Result<()> {
        let result = std::fs::rename(&self.temp, &self.dest);
        std::mem::forget(self);
        result
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.temp);
    }
}

/// Opens a text output (`-` for stdout), compressing by file extension.
fn text_output(path: &Path, staged: Option<&Staged>, format: Format) -> Result<Box<dyn Sink>> {
    let Some(staged) = staged else {
        return Ok(Box::new(BufWriter::with_capacity(
            1 << 16,
            io::stdout().lock(),
        )));
    };
    let file = File::create(&staged.temp).map_err(|e| io_err(format, path, e))?;
    let file = BufWriter::with_capacity(1 << 16, file);
    let name = path.to_string_lossy();
    let out: Box<dyn Sink> = if name.ends_with(".gz") {
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
        Box::new(zstd::stream::write::Encoder::new(file, 3).map_err(|e| io_err(format, path, e))?)
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
    let to_stdout = path == Path::new("-");
    let staged = (!to_stdout).then(|| Staged::new(path));
    let summary = match format {
        Format::Native => {
            let Some(staged) = &staged else {
                return Err(err(
                    format,
                    "the native format needs a seekable output file, not stdout",
                ));
            };
            write_native(stream, path, &staged.temp)?
        }
        Format::FioIolog | Format::Msr | Format::Disksim => {
            let mut out = text_output(path, staged.as_ref(), format)?;
            let summary = match format {
                Format::FioIolog => write_fio(stream, &mut out, options),
                Format::Msr => write_msr(stream, &mut out),
                _ => write_disksim(stream, &mut out),
            }
            .map_err(|e| wrap(format, path, e))?;
            out.finish().map_err(|e| io_err(format, path, e))?;
            summary
        }
        other => {
            let names: Vec<&str> = Format::WRITABLE.iter().map(|f| f.name()).collect();
            return Err(err(
                other,
                format!(
                    "tierlab does not write this format; it writes {}",
                    names.join(", ")
                ),
            ));
        }
    };
    if let Some(staged) = staged {
        staged.commit().map_err(|e| io_err(format, path, e))?;
    }
    Ok(summary)
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

fn write_native(stream: &mut dyn RecordStream, path: &Path, temp: &Path) -> Result<WriteSummary> {
    let format = Format::Native;
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
    let file = File::create(temp).map_err(|e| io_err(format, path, e))?;
    let mut writer = NativeWriter::new(BufWriter::with_capacity(1 << 20, file))?;
    while let Some(r) = stream.next_record()? {
        writer.write(&r)?;
    }
    // The time base and device table are final only now (MSR decides its
    // time base from the first record; devices appear as they are met).
    let records = writer.finish(stream.devices().names(), stream.time_base())?;
    Ok(WriteSummary {
        records,
        ..Default::default()
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
    let mut names_used: Vec<String> = Vec::new();
    while let Some(r) = stream.next_record()? {
        let base = *first_ns.get_or_insert(r.time_ns);
        let since = r.time_ns.saturating_sub(base);
        if since % 1_000 != 0 {
            summary.rounded_to_us += 1;
        }
        let mut us = since / 1_000;
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
            if names_used.contains(&name) {
                return Err(WriteError::Record(format!(
                    "device {device:?} and another device would both be written as fio file {name:?}; put {{device}} or {{id}} in --fio-filename"
                )));
            }
            names_used.push(name.clone());
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
    // Asked after the first record: MSR input decides its time base there.
    let mut unix: Option<bool> = None;
    let mut names: Vec<Option<(String, String)>> = Vec::new();
    let mut used: Vec<(String, String)> = Vec::new();
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
        let unix = *unix.get_or_insert_with(|| stream.time_base() == TimeBase::UnixEpoch);
        let ticks = (r.time_ns / 100)
            .checked_add(if unix { FILETIME_UNIX_EPOCH } else { 0 })
            .ok_or_else(|| {
                WriteError::Record(format!(
                    "record {}: time does not fit a filetime",
                    summary.records + 1
                ))
            })?;
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
            let pair = split_msr_device(&device).map_err(WriteError::Record)?;
            if used.contains(&pair) {
                return Err(WriteError::Record(format!(
                    "two devices would both be written as Hostname {:?}, DiskNumber {}",
                    pair.0, pair.1
                )));
            }
            used.push(pair.clone());
            names[id] = Some(pair);
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

/// `host_N` → (host, N) when N is a DiskNumber (u32); otherwise the whole
/// name is the host and the disk is 0. Names MSR cannot hold are refused.
fn split_msr_device(device: &str) -> std::result::Result<(String, String), String> {
    if device.is_empty() || device.contains([',', '\n', '\r']) {
        return Err(format!(
            "device name {device:?} cannot be an MSR Hostname (empty, or contains a comma or newline)"
        ));
    }
    Ok(match device.rsplit_once('_') {
        Some((host, disk))
            if !host.is_empty()
                && disk.parse::<u32>().is_ok()
                && disk.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (host.to_string(), disk.to_string())
        }
        _ => (device.to_string(), "0".to_string()),
    })
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
        let dev = match numbers[id] {
            Some(n) => n,
            None => {
                // DiskSim names devices by number: numeric names keep theirs,
                // others are numbered by their id.
                let name = stream.devices().name(r.device_id).unwrap_or("");
                let n = name.parse::<u64>().unwrap_or(r.device_id as u64);
                if numbers.contains(&Some(n)) {
                    return Err(WriteError::Record(format!(
                        "two devices would both be written as DiskSim device {n}"
                    )));
                }
                numbers[id] = Some(n);
                n
            }
        };
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
