//! Streaming trace readers: one generic driver for line formats and one for
//! fixed-size binary records; each format only parses one record.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::detect;
use crate::error::{FieldError, Location, Result, TraceError};
use crate::format::Format;
use crate::formats;
use crate::input::{self, LineReader, RecordReader};
use crate::record::{DeviceTable, IoRecord, TimeBase};

/// Anything that yields records: a trace reader, a generator, a filter.
pub trait RecordStream {
    fn next_record(&mut self) -> Result<Option<IoRecord>>;
    fn devices(&self) -> &DeviceTable;
    fn time_base(&self) -> TimeBase;
    /// Appends up to `max` records to `out` and returns how many (0 only at
    /// the end, or for `max` 0). The same records, errors and counters as
    /// calling `next_record` that often; a stream overrides it only to go
    /// faster (one dynamic call per batch instead of per record).
    fn next_batch(&mut self, out: &mut Vec<IoRecord>, max: usize) -> Result<usize> {
        let before = out.len();
        while out.len() - before < max {
            match self.next_record()? {
                Some(r) => out.push(r),
                None => break,
            }
        }
        Ok(out.len() - before)
    }
}

impl<S: RecordStream + ?Sized> RecordStream for Box<S> {
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        (**self).next_record()
    }
    fn next_batch(&mut self, out: &mut Vec<IoRecord>, max: usize) -> Result<usize> {
        (**self).next_batch(out, max)
    }
    fn devices(&self) -> &DeviceTable {
        (**self).devices()
    }
    fn time_base(&self) -> TimeBase {
        (**self).time_base()
    }
}

/// What parsing one line produced.
pub enum Parsed {
    Record(IoRecord),
    /// A header, comment, or an event that is not an IO (counted, not an error).
    Skip,
}

/// One text format: turns a line into a record.
pub trait LineParser: Send {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError>;
    /// Records held back by the parser (blkparse buffers Q events until it
    /// knows whether D events exist). Called before each new line.
    fn pending(&mut self) -> Option<IoRecord> {
        None
    }
    /// Called once at the end of the input; may release pending records.
    fn end_of_input(&mut self) {}
    fn time_base(&self) -> TimeBase;
}

/// One binary format: turns a fixed-size record into an IO record.
pub trait BinaryParser: Send {
    fn record_size(&self) -> usize;
    fn parse(&mut self, record: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError>;
    fn time_base(&self) -> TimeBase;
}

enum Source {
    Lines {
        lines: LineReader,
        parser: Box<dyn LineParser>,
        ended: bool,
    },
    Binary {
        records: RecordReader,
        parser: Box<dyn BinaryParser>,
    },
    /// Native traces are memory-mapped and decoded in place: no copy, no
    /// dynamic dispatch per record (the ≥ 50 M records/s path).
    Native {
        map: memmap2::Mmap,
        /// Pages below this offset were handed back to the kernel.
        released: usize,
        pos: usize,
        end: usize,
        device_count: u32,
        time_base: TimeBase,
    },
}

/// Native reads hand consumed pages back to the kernel in chunks of this
/// size, so a replay's resident memory does not grow with the trace.
const NATIVE_RELEASE_BYTES: usize = 16 << 20;

/// How far ahead of the read position the native batch loop prefetches.
const NATIVE_PREFETCH_BYTES: usize = 4096;

/// Hints the CPU to load the cache line at `map[at]` (no effect on
/// results; `at == map.len()` is allowed and ignored).
#[inline]
fn prefetch(map: &memmap2::Mmap, at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(b) = map.get(at) {
        // SAFETY: prefetch never faults; the address is inside the map.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                b as *const u8 as *const i8,
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (map, at);
}

fn release_pages(map: &memmap2::Mmap, offset: usize, len: usize) {
    // SAFETY: the map is a read-only file mapping and no reference into
    // [offset, offset + len) outlives this call (records are decoded by
    // value and the read position is past the range); MADV_DONTNEED on it
    // only drops the pages, which would be re-read from the file if touched.
    // `offset` is a multiple of 16 MiB, hence page-aligned.
    #[cfg(unix)]
    unsafe {
        let _ = map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len);
    }
}

/// Whether `offset + size` fits in 64 bits (see [`fits`]).
#[inline]
fn ends_in_range(r: &IoRecord) -> bool {
    r.offset_bytes.checked_add(r.size_bytes as u64).is_some()
}

/// A record must end within 64-bit byte addresses: `offset + size` is used
/// everywhere (footprints, regions, device bounds).
#[inline(always)]
fn fits(r: IoRecord) -> Result<IoRecord, FieldError> {
    if !ends_in_range(&r) {
        return Err(too_far(&r));
    }
    Ok(r)
}

#[cold]
fn too_far(r: &IoRecord) -> FieldError {
    FieldError::new(
        "size",
        format!("{} at offset {}", r.size_bytes, r.offset_bytes).as_bytes(),
        "a request that ends below 2^64 bytes",
    )
}

fn fits_parsed(p: Parsed) -> Result<Parsed, FieldError> {
    match p {
        Parsed::Record(r) => fits(r).map(Parsed::Record),
        skip => Ok(skip),
    }
}

/// Options for opening a trace.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Force a format instead of detecting it.
    pub format: Option<Format>,
    /// Skip malformed records (counted in `TraceReader::skipped_bad`).
    pub skip_bad: bool,
    /// blkparse: which event marks an IO (default: D if the trace has any, else Q).
    pub blkparse_event: Option<formats::blkparse::Event>,
    /// The column mapping of a `csv` trace; giving it means format `csv`.
    pub csv: Option<formats::csv::CsvColumns>,
}

/// A streaming reader over one trace file (or stdin).
pub struct TraceReader {
    path: PathBuf,
    format: Format,
    devices: DeviceTable,
    source: Source,
    skip_bad: bool,
    skipped_bad: u64,
    skipped_other: u64,
    records: u64,
}

/// Bytes sniffed from the head of a stream to detect its format.
pub const SNIFF_BYTES: usize = 64 * 1024;

impl TraceReader {
    pub fn open(path: impl AsRef<Path>, options: &ReadOptions) -> Result<TraceReader> {
        let path = path.as_ref();
        let (mut stream, compression) = input::open_decompressed(path)?;
        let shown = input::display_path(path);
        let head = input::read_head(&mut stream, SNIFF_BYTES)
            .map_err(|e| TraceError::io(&shown, Location::Input, e))?;
        // A column mapping means the csv format.
        let forced = options.format.or(options.csv.as_ref().map(|_| Format::Csv));
        let format = match forced {
            Some(f) => {
                Self::check_forced(f, &head, path, options)?;
                f
            }
            None => detect::detect(&head, path)?,
        };
        if format == Format::Native {
            return Self::open_native(path, shown, compression, stream, head, options);
        }
        if forced.is_none() && format == Format::Csv {
            // Detected from the CloudPhysics CSV header: its known mapping.
            let mut options = options.clone();
            options.csv = Some(
                detect::CLOUDPHYSICS_CSV_COLUMNS
                    .parse()
                    .expect("the CloudPhysics mapping parses"),
            );
            return Self::from_stream(shown, format, stream, head, &options);
        }
        Self::from_stream(shown, format, stream, head, options)
    }

    /// A forced format on a file that detection reads as another one is
    /// refused, naming the format detection picks, when it would yield
    /// garbage records or a confusing parse error: when one is binary and
    /// the other text, or when the forced text format cannot parse the
    /// first record. (A forced format that parses is left alone: forcing is
    /// how a user overrides detection.)
    fn check_forced(forced: Format, head: &[u8], path: &Path, options: &ReadOptions) -> Result<()> {
        let Ok(detected) = detect::detect(head, path) else {
            return Ok(());
        };
        if detected == forced {
            return Ok(());
        }
        let binary = |f: Format| {
            matches!(
                f,
                Format::Vscsi
                    | Format::OracleGeneral
                    | Format::Native
                    | Format::Lbn32
                    | Format::Lbn64
            )
        };
        let refuse = |why: String| {
            Err(TraceError::Format {
                path: input::display_path(path),
                message: format!(
                    "the forced format `{}` {why} `{}` ({}); drop the forced format to use \
                     detection, or force `{}`",
                    forced.name(),
                    detected.name(),
                    detected.description(),
                    detected.name()
                ),
            })
        };
        if binary(detected) != binary(forced) {
            let kind = |f: Format| if binary(f) { "binary" } else { "text" };
            return refuse(format!(
                "is {}, but this file reads as {}",
                kind(forced),
                kind(detected)
            ));
        }
        if options.skip_bad || forced == Format::Native {
            return Ok(());
        }
        // Only the sniffed head: the first record is in it.
        let first = Self::from_stream(
            input::display_path(path),
            forced,
            Box::new(std::io::empty()),
            head.to_vec(),
            options,
        )
        .and_then(|mut probe| probe.next_record());
        let why = match first {
            Err(TraceError::Parse {
                location, error, ..
            }) => match location {
                Location::Line(n) => format!("line {n}: {error}"),
                Location::Byte(b) => format!("byte {b}: {error}"),
                Location::Input => error.to_string(),
            },
            Err(TraceError::Format { message, .. }) => message,
            _ => return Ok(()),
        };
        refuse(format!(
            "does not read this file ({why}); detection reads it as"
        ))
    }

    /// Native traces keep device names in a trailer, so they are read from an
    /// uncompressed, seekable file (they are meant to be memory-mapped anyway).
    fn open_native(
        path: &Path,
        shown: PathBuf,
        compression: input::Compression,
        stream: Box<dyn Read + Send>,
        head: Vec<u8>,
        options: &ReadOptions,
    ) -> Result<TraceReader> {
        let fail = |message: String| TraceError::Format {
            path: shown.clone(),
            message,
        };
        if compression != input::Compression::None || path == Path::new("-") {
            return Err(fail(format!(
                "native traces must be read from an uncompressed file (this one is {}): they are meant to be memory-mapped",
                if path == Path::new("-") {
                    "standard input"
                } else {
                    compression.name()
                }
            )));
        }
        let header = formats::native::Header::parse(&head, &shown)?;
        let mut file =
            std::fs::File::open(path).map_err(|e| TraceError::io(&shown, Location::Input, e))?;
        let names = header.read_names(&mut file, &shown)?;
        let devices: DeviceTable = names.into_iter().collect();
        drop(stream);
        // SAFETY: the map is read-only; a file truncated underneath us would
        // fault, so the file length is checked against the header first.
        let len = file
            .metadata()
            .map_err(|e| TraceError::io(&shown, Location::Input, e))?
            .len();
        if len < header.names_offset + header.names_bytes {
            return Err(fail(format!(
                "native trace is truncated: {len} bytes, the header promises {}",
                header.names_offset + header.names_bytes
            )));
        }
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| TraceError::io(&shown, Location::Input, e))?;
        let _ = head;
        Ok(TraceReader {
            path: shown,
            format: Format::Native,
            source: Source::Native {
                map,
                released: 0,
                pos: formats::native::HEADER_BYTES,
                end: header.names_offset as usize,
                device_count: devices.len() as u32,
                time_base: header.time_base,
            },
            devices,
            skip_bad: options.skip_bad,
            skipped_bad: 0,
            skipped_other: 0,
            records: 0,
        })
    }

    /// Reads an already-open stream whose first bytes are `head`.
    pub fn from_stream(
        path: PathBuf,
        format: Format,
        stream: Box<dyn Read + Send>,
        head: Vec<u8>,
        options: &ReadOptions,
    ) -> Result<TraceReader> {
        let mut devices = DeviceTable::new();
        let source = match formats::parser_for(format, &head, options, &mut devices) {
            formats::AnyParser::Lines(parser) => Source::Lines {
                lines: LineReader::with_prefix(stream, head),
                parser,
                ended: false,
            },
            formats::AnyParser::Binary {
                parser,
                header_bytes,
            } => {
                let mut records = RecordReader::with_prefix(stream, head);
                if header_bytes > 0 {
                    let complete = records
                        .skip(header_bytes)
                        .map_err(|e| TraceError::io(&path, Location::Input, e))?;
                    if !complete {
                        return Err(TraceError::Format {
                            path,
                            message: format!(
                                "{format} header is truncated ({header_bytes} bytes expected)"
                            ),
                        });
                    }
                }
                Source::Binary { records, parser }
            }
            formats::AnyParser::Invalid(message) => {
                return Err(TraceError::Format { path, message });
            }
        };
        Ok(TraceReader {
            path,
            format,
            devices,
            source,
            skip_bad: options.skip_bad,
            skipped_bad: 0,
            skipped_other: 0,
            records: 0,
        })
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Malformed records skipped under `skip_bad`.
    pub fn skipped_bad(&self) -> u64 {
        self.skipped_bad
    }

    /// Lines that are not IOs (headers, comments, non-IO events).
    pub fn skipped_other(&self) -> u64 {
        self.skipped_other
    }

    /// Whether parsing this trace on a second thread pays
    /// ([`crate::prefetch`]): for every format but native, whose records
    /// are decoded in place faster than a hand-over between threads.
    pub fn prefetch_pays(&self) -> bool {
        !matches!(self.source, Source::Native { .. })
    }

    /// Records returned so far.
    pub fn records_read(&self) -> u64 {
        self.records
    }

    fn next_inner(&mut self) -> Result<Option<IoRecord>> {
        match &mut self.source {
            Source::Native {
                map,
                released,
                pos,
                end,
                device_count,
                ..
            } => loop {
                if *pos >= *end {
                    return Ok(None);
                }
                if *pos - *released >= NATIVE_RELEASE_BYTES {
                    release_pages(map, *released, NATIVE_RELEASE_BYTES);
                    *released += NATIVE_RELEASE_BYTES;
                }
                let at = *pos;
                *pos += formats::native::RECORD_BYTES;
                let bytes = &map[at..at + formats::native::RECORD_BYTES];
                let error = match formats::native::decode_record(bytes) {
                    Ok(r) if r.device_id < *device_count => match fits(r) {
                        Ok(r) => return Ok(Some(r)),
                        Err(e) => e,
                    },
                    Ok(r) => FieldError::new(
                        "device_id",
                        r.device_id.to_string().as_bytes(),
                        format!("a device id below {device_count} (the trailer's device count)"),
                    ),
                    Err(e) => e,
                };
                if self.skip_bad {
                    self.skipped_bad += 1;
                    continue;
                }
                return Err(TraceError::Parse {
                    path: self.path.clone(),
                    location: Location::Byte(at as u64),
                    error,
                });
            },
            Source::Lines {
                lines,
                parser,
                ended,
            } => loop {
                if let Some(r) = parser.pending() {
                    return Ok(Some(r));
                }
                if *ended {
                    return Ok(None);
                }
                let line = match lines.next_line() {
                    Ok(Some(line)) => line,
                    Ok(None) => {
                        *ended = true;
                        parser.end_of_input();
                        continue;
                    }
                    Err(e) => {
                        return Err(TraceError::io(
                            &self.path,
                            Location::Line(lines.line_no + 1),
                            e,
                        ));
                    }
                };
                // Blank lines and `#` comments are not records in any format.
                if line.first() == Some(&b'#') || line.iter().all(|b| b.is_ascii_whitespace()) {
                    self.skipped_other += 1;
                    continue;
                }
                match parser.parse(line, &mut self.devices).and_then(fits_parsed) {
                    Ok(Parsed::Record(r)) => return Ok(Some(r)),
                    Ok(Parsed::Skip) => self.skipped_other += 1,
                    Err(error) if self.skip_bad => {
                        let _ = error;
                        self.skipped_bad += 1;
                    }
                    Err(error) => {
                        return Err(TraceError::Parse {
                            path: self.path.clone(),
                            location: Location::Line(lines.line_no),
                            error,
                        });
                    }
                }
            },
            Source::Binary { records, parser } => loop {
                let size = parser.record_size();
                let rec = match records.next_record(size) {
                    Ok(Some(rec)) => rec,
                    Ok(None) => return Ok(None),
                    Err(e) => {
                        return Err(TraceError::io(
                            &self.path,
                            Location::Byte(records.position()),
                            e,
                        ));
                    }
                };
                match parser.parse(rec, &mut self.devices).and_then(fits_parsed) {
                    Ok(Parsed::Record(r)) => return Ok(Some(r)),
                    Ok(Parsed::Skip) => self.skipped_other += 1,
                    Err(_) if self.skip_bad => self.skipped_bad += 1,
                    Err(error) => {
                        return Err(TraceError::Parse {
                            path: self.path.clone(),
                            location: Location::Byte(records.offset),
                            error,
                        });
                    }
                }
            },
        }
    }
}

impl TraceReader {
    /// The native batch loop: decodes valid records straight from the map;
    /// stops early at the end, at a page-release boundary, or before a
    /// record that is not valid (which `next_record` then reports or skips).
    #[inline]
    fn native_batch(&mut self, out: &mut Vec<IoRecord>, max: usize) -> usize {
        let Source::Native {
            map,
            released,
            pos,
            end,
            device_count,
            ..
        } = &mut self.source
        else {
            return 0;
        };
        let record_bytes = formats::native::RECORD_BYTES;
        // Up to the next release boundary, so `next_record` releases pages
        // exactly as it would record by record.
        let stop = (*end).min(*released + NATIVE_RELEASE_BYTES);
        let n = ((stop.saturating_sub(*pos)) / record_bytes).min(max);
        let before = out.len();
        out.reserve(n);
        let ahead_end = stop.min(map.len());
        for (k, bytes) in map[*pos..*pos + n * record_bytes]
            .chunks_exact(record_bytes)
            .enumerate()
        {
            // Records a page or so ahead, a cache line at a time: the
            // hardware prefetcher stops at 4 KiB page boundaries, and a
            // mapped trace is read from DRAM.
            if k % 2 == 0 {
                prefetch(
                    map,
                    (*pos + k * record_bytes + NATIVE_PREFETCH_BYTES).min(ahead_end),
                );
            }
            match formats::native::decode_valid(bytes) {
                // The checks `next_record` makes, without building errors.
                Some(r) if r.device_id < *device_count && ends_in_range(&r) => out.push(r),
                _ => break,
            }
        }
        let got = out.len() - before;
        *pos += got * record_bytes;
        self.records += got as u64;
        got
    }
}

impl RecordStream for TraceReader {
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        let r = self.next_inner()?;
        if r.is_some() {
            self.records += 1;
        }
        Ok(r)
    }

    fn next_batch(&mut self, out: &mut Vec<IoRecord>, max: usize) -> Result<usize> {
        let before = out.len();
        while out.len() - before < max {
            let want = max - (out.len() - before);
            if self.native_batch(out, want) > 0 {
                continue;
            }
            // Not native, a release boundary, an invalid record, or the end:
            // one record the ordinary way.
            match self.next_record()? {
                Some(r) => out.push(r),
                None => break,
            }
        }
        Ok(out.len() - before)
    }

    fn devices(&self) -> &DeviceTable {
        &self.devices
    }

    fn time_base(&self) -> TimeBase {
        match &self.source {
            Source::Lines { parser, .. } => parser.time_base(),
            Source::Binary { parser, .. } => parser.time_base(),
            Source::Native { time_base, .. } => *time_base,
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<IoRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Opens a trace with default options (format detected).
pub fn open(path: impl AsRef<Path>) -> Result<TraceReader> {
    TraceReader::open(path, &ReadOptions::default())
}
