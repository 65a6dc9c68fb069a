//! Format detection from the first bytes of the (decompressed) input.
//! Rules, in order (documented in docs/trace-formats.md):
//! native magic; fio header; SYSTOR header; binary data (VSCSI v2/v1 by
//! version field, then oracleGeneral by its invariants); blkparse lines
//! (`maj,min` first field); CSV by field count and the op field; whitespace
//! text by field count and time/size shapes.

use std::path::Path;

use crate::error::TraceError;
use crate::format::Format;
use crate::formats::{fio, native, oracle, vscsi};

/// Lines examined for text formats.
const SAMPLE_LINES: usize = 32;

/// The header of the CloudPhysics CSV in libCacheSim's samples
/// (`data/cloudPhysicsIO.csv`): seconds, SCSI opcode, bytes, 512 B sectors.
pub const CLOUDPHYSICS_CSV_HEADER: &str = "version,time,op,size,lbn";
/// The column mapping that reads it (docs/trace-formats.md).
pub const CLOUDPHYSICS_CSV_COLUMNS: &str = "time=2,op=3,size=4,lbn=5,header";

/// The format of the input `path` begins with `head`; the error names the
/// path (as `input::display_path` shows it) and says what to pass.
/// `Format::Csv` only for the CloudPhysics CSV header, which
/// `CLOUDPHYSICS_CSV_COLUMNS` reads.
pub fn detect(head: &[u8], path: &Path) -> Result<Format, TraceError> {
    detect_head(head, path).map_err(|message| TraceError::Format {
        path: crate::input::display_path(path),
        message,
    })
}

fn detect_head(head: &[u8], path: &Path) -> Result<Format, String> {
    if head.is_empty() {
        return Err("the input is empty: cannot detect its format (pass --format)".into());
    }
    if head.starts_with(native::MAGIC) {
        return Ok(Format::Native);
    }
    let name = path.to_string_lossy().to_ascii_lowercase();
    if is_binary(head) {
        if name.contains("oraclegeneral") && head.len() >= oracle::RECORD_BYTES {
            return Ok(Format::OracleGeneral);
        }
        if vscsi::detect_version(head).is_some() {
            return Ok(Format::Vscsi);
        }
        if oracle::looks_like(head) {
            return Ok(Format::OracleGeneral);
        }
        if is_blktrace(head) {
            return Err(
                "a blktrace binary (what `blktrace` writes, one file per CPU): tierlab \
                        reads blkparse's text; run `blkparse -i DEVICE -o trace.txt` on the \
                        blktrace files (DEVICE.blktrace.N) and give trace.txt"
                    .into(),
            );
        }
        return Err(
            "binary data that is not a tierlab native, VSCSI or oracleGeneral trace; pass --format"
                .into(),
        );
    }
    let text = String::from_utf8_lossy(head);
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    // The last line may be cut by the sniff limit.
    if head.len() == crate::reader::SNIFF_BYTES && lines.len() > 1 {
        lines.pop();
    }
    let first = lines.first().map(|l| l.trim()).unwrap_or("");
    if first == fio::HEADER_V2 || first == fio::HEADER_V3 {
        return Ok(Format::FioIolog);
    }
    if first.starts_with("Timestamp,Response,IOType,LUN,Offset,Size") {
        return Ok(Format::Systor);
    }
    if first == CLOUDPHYSICS_CSV_HEADER {
        // Read with `CLOUDPHYSICS_CSV_COLUMNS` (TraceReader::open).
        return Ok(Format::Csv);
    }
    let data: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with('#') && !l.starts_with("ts_record"))
        .take(SAMPLE_LINES)
        .collect();
    if data.is_empty() {
        return Err("no data lines to detect a format from; pass --format".into());
    }
    let words0: Vec<&str> = data[0].split_whitespace().collect();
    if words0.len() >= 7 && is_maj_min(words0[0]) {
        return Ok(Format::Blkparse);
    }
    if data[0].contains(',') {
        return detect_csv(&data);
    }
    detect_words(&data)
}

/// blktrace's per-CPU binary: each event starts with a 32-bit magic,
/// `0x65617400 | version` (`BLK_IO_TRACE_MAGIC`), in the host's (little-
/// endian here) byte order.
fn is_blktrace(head: &[u8]) -> bool {
    head.len() >= 4
        && u32::from_le_bytes([head[0], head[1], head[2], head[3]]) & 0xffff_ff00 == 0x6561_7400
}

fn is_binary(head: &[u8]) -> bool {
    let sample = &head[..head.len().min(4096)];
    sample
        .iter()
        .any(|&b| b == 0 || (b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t')))
}

fn is_maj_min(s: &str) -> bool {
    match s.split_once(',') {
        Some((a, b)) => {
            !a.is_empty() && !b.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
        }
        None => false,
    }
}

fn is_uint(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}

fn is_decimal(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty()
        && s.bytes().filter(|&c| c == b'.').count() <= 1
        && s.bytes().all(|c| c.is_ascii_digit() || c == b'.')
        && s != "."
}

type RowTest = fn(&[&str]) -> bool;

/// The candidate matching the most sample rows, if it matches at least half
/// of them (so one malformed line does not hide the format: it is reported
/// by the parser with its line number instead). Ties go to the earlier one.
fn best(rows: &[Vec<&str>], candidates: &[(Format, RowTest)]) -> Option<Format> {
    let mut best: Option<(Format, usize)> = None;
    for &(format, test) in candidates {
        let score = rows.iter().filter(|r| test(r)).count();
        if score * 2 >= rows.len() && score > 0 && best.is_none_or(|(_, b)| score > b) {
            best = Some((format, score));
        }
    }
    best.map(|(f, _)| f)
}

fn detect_csv(data: &[&str]) -> Result<Format, String> {
    let rows: Vec<Vec<&str>> = data
        .iter()
        .map(|l| l.split(',').map(str::trim).collect())
        .collect();
    let candidates: [(Format, RowTest); 5] = [
        (Format::Msr, |r| {
            r.len() == 7
                && is_uint(r[0])
                && (r[3].eq_ignore_ascii_case("read") || r[3].eq_ignore_ascii_case("write"))
        }),
        (Format::Systor, |r| {
            r.len() == 6 && is_decimal(r[0]) && matches!(r[2], "R" | "W" | "r" | "w")
        }),
        (Format::Flashnet, |r| {
            r.len() == 7 && r.iter().all(|f| is_decimal(f))
        }),
        (Format::Umass, |r| {
            r.len() >= 5 && is_uint(r[0]) && matches!(r[3], "r" | "w" | "R" | "W")
        }),
        (Format::Tencent, |r| {
            r.len() == 5 && r.iter().all(|f| is_uint(f)) && matches!(r[3], "0" | "1")
        }),
    ];
    best(&rows, &candidates).ok_or_else(|| {
        format!(
            "comma-separated lines with {} fields that match no known format (first line: {:?}); pass --format",
            rows[0].len(),
            data[0]
        )
    })
}

fn detect_words(data: &[&str]) -> Result<Format, String> {
    let rows: Vec<Vec<&str>> = data
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let candidates: [(Format, RowTest); 4] = [
        (Format::Arc, |r| {
            r.len() == 4 && r.iter().all(|f| is_uint(f))
        }),
        // MQSim: integer nanoseconds.
        (Format::Disksim, |r| {
            r.len() == 5 && r.iter().all(|f| is_uint(f))
        }),
        // Replayer sizes are bytes (whole sectors); DiskSim sizes are sectors.
        (Format::Replayer, |r| {
            r.len() == 5
                && r[0].contains('.')
                && is_decimal(r[0])
                && r[1..].iter().all(|f| is_uint(f))
                && r[3]
                    .parse::<u64>()
                    .is_ok_and(|size| size >= 512 && size % 512 == 0)
                && matches!(r[4], "0" | "1")
        }),
        (Format::DisksimMs, |r| {
            r.len() == 5
                && r[0].contains('.')
                && is_decimal(r[0])
                && r[1..].iter().all(|f| is_uint(f))
        }),
    ];
    best(&rows, &candidates).ok_or_else(|| {
        format!(
            "whitespace-separated lines with {} fields that match no known format (first line: {:?}); pass --format",
            rows[0].len(),
            data[0]
        )
    })
}
