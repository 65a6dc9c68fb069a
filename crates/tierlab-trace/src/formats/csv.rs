//! Any delimited text trace, with a column mapping the user gives (as
//! libCacheSim's `csv` reader takes `time-col=2,obj-id-col=5,...`):
//!
//! ```text
//! --format csv --csv-columns "time=2,op=3,size=4,lbn=5,header"
//! ```
//!
//! Keys (columns count from 1):
//! - `offset=N` (bytes) or `lbn=N` (blocks of `lbn-bytes`, default 512):
//!   where the IO starts; one of the two is required;
//! - `size=N`: bytes (required; `size-unit=sectors` for 512-byte sectors);
//! - `time=N`: arrival time in `time-unit` (`s` default, `ms`, `us`, `ns`),
//!   decimals allowed; without it every record has time 0;
//! - `op=N`: read or write, as `r`/`read`/`w`/`write` (any case, also
//!   `rs`/`ws`) or a SCSI opcode, hex or decimal (0x08, 0x28, 0xa8, 0x88
//!   read; 0x0a, 0x2a, 0xaa, 0x8a write); without it every record is a read;
//! - `device=N`: a volume or disk name (default: one device, `0`);
//! - `header`: skip the first line; `delimiter=comma|tab|space|semicolon|
//!   pipe` (default comma; `space` splits on runs of blanks).
//!
//! The CloudPhysics CSV that libCacheSim ships (`version,time,op,size,lbn`,
//! time in seconds, size in bytes, LBN in 512-byte sectors) is
//! `time=2,op=3,size=4,lbn=5,header`.

use crate::error::FieldError;
use crate::parse::{decimal_ns, scaled, size_u32, trim, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

/// The column mapping of a `csv` trace (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvColumns {
    /// 0-based column indices.
    pub time: Option<usize>,
    pub op: Option<usize>,
    pub size: usize,
    pub start: usize,
    /// Bytes per unit of the start column (1 for `offset=`).
    pub start_unit_bytes: u64,
    /// Bytes per unit of the size column.
    pub size_unit_bytes: u64,
    pub device: Option<usize>,
    /// Nanoseconds per unit of the time column.
    pub time_unit_ns: u64,
    pub header: bool,
    /// `None`: runs of blanks.
    pub delimiter: Option<u8>,
}

const KEYS: &[&str] = &[
    "time",
    "op",
    "size",
    "offset",
    "lbn",
    "device",
    "header",
    "delimiter",
    "time-unit",
    "size-unit",
    "lbn-bytes",
];

/// A column mapping that cannot be read: an unknown key, a bad column
/// number or unit, a missing start or size column; the message says which
/// and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvMappingError(pub String);

impl std::fmt::Display for CsvMappingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CsvMappingError {}

impl std::str::FromStr for CsvColumns {
    type Err = CsvMappingError;

    fn from_str(spec: &str) -> Result<Self, CsvMappingError> {
        parse_mapping(spec).map_err(CsvMappingError)
    }
}

fn parse_mapping(spec: &str) -> Result<CsvColumns, String> {
    let mut time = None;
    let mut op = None;
    let mut size = None;
    let mut offset = None;
    let mut lbn = None;
    let mut device = None;
    let mut header = false;
    let mut delimiter = Some(b',');
    let mut time_unit_ns = 1_000_000_000;
    let mut size_unit_bytes = 1;
    let mut lbn_bytes = 512;
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = item.split_once('=').unwrap_or((item, ""));
        let key = key.trim().to_ascii_lowercase().replace('_', "-");
        let value = value.trim();
        let column = || -> Result<usize, String> {
            match value.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n - 1),
                _ => Err(format!(
                    "csv columns: `{key}={value}`: a column number counts from 1"
                )),
            }
        };
        match key.as_str() {
            "time" => time = Some(column()?),
            "op" => op = Some(column()?),
            "size" => size = Some(column()?),
            "offset" => offset = Some(column()?),
            "lbn" => lbn = Some(column()?),
            "device" => device = Some(column()?),
            "header" if value.is_empty() || value == "true" => header = true,
            "header" if value == "false" => header = false,
            "delimiter" => {
                delimiter = match value {
                    "comma" | "" => Some(b','),
                    "tab" => Some(b'\t'),
                    "semicolon" => Some(b';'),
                    "pipe" => Some(b'|'),
                    "space" => None,
                    other => {
                        return Err(format!(
                            "csv columns: delimiter `{other}`: one of comma, tab, space, \
                                 semicolon, pipe"
                        ));
                    }
                }
            }
            "time-unit" => {
                time_unit_ns = match value {
                    "s" => 1_000_000_000,
                    "ms" => 1_000_000,
                    "us" => 1_000,
                    "ns" => 1,
                    other => {
                        return Err(format!(
                            "csv columns: time-unit `{other}`: one of s, ms, us, ns"
                        ));
                    }
                }
            }
            "size-unit" => {
                size_unit_bytes = match value {
                    "bytes" | "b" => 1,
                    "sectors" => 512,
                    other => {
                        return Err(format!(
                            "csv columns: size-unit `{other}`: bytes or sectors (512 B)"
                        ));
                    }
                }
            }
            "lbn-bytes" => {
                lbn_bytes = crate::units::parse_size_bytes(value)
                    .ok()
                    .filter(|&b| b > 0)
                    .ok_or_else(|| {
                        format!("csv columns: lbn-bytes `{value}`: a block size in bytes")
                    })?
            }
            other => {
                return Err(format!(
                    "csv columns: unknown key `{other}`{}; keys: {}",
                    crate::names::did_you_mean(other, KEYS.iter().copied()),
                    KEYS.join(", ")
                ));
            }
        }
    }
    let (start, start_unit_bytes) = match (offset, lbn) {
        (Some(c), None) => (c, 1),
        (None, Some(c)) => (c, lbn_bytes),
        (Some(_), Some(_)) => {
            return Err("csv columns: give offset= (bytes) or lbn= (blocks), not both".into());
        }
        (None, None) => {
            return Err(
                "csv columns: where IOs start is needed: offset=N (bytes) or lbn=N (blocks)".into(),
            );
        }
    };
    let size = size.ok_or("csv columns: size=N is needed (the IO size column)")?;
    Ok(CsvColumns {
        time,
        op,
        size,
        start,
        start_unit_bytes,
        size_unit_bytes,
        device,
        time_unit_ns,
        header,
        delimiter,
    })
}

/// A format name, or `csv:MAPPING` (`csv:time=2,op=3,size=4,lbn=5,header`)
/// where one string must carry both (a config's `format`, Python's
/// `format=`).
/// The error is under key `format`, with the reason the name or the
/// mapping was refused.
pub fn parse_format_spec(
    spec: &str,
) -> Result<(crate::format::Format, Option<CsvColumns>), crate::ParamError> {
    let parsed = match spec.split_once(':') {
        Some((name, mapping)) if name.trim().eq_ignore_ascii_case("csv") => mapping
            .parse()
            .map(|columns| (crate::format::Format::Csv, Some(columns)))
            .map_err(|e: CsvMappingError| e.to_string()),
        _ => spec
            .parse()
            .map(|format| (format, None))
            .map_err(|e: crate::format::UnknownFormat| e.to_string()),
    };
    parsed.map_err(|why: String| {
        crate::ParamError::new(
            "format",
            format!("{spec:?}"),
            "a trace format, or csv:MAPPING",
        )
        .because(why)
    })
}

pub struct CsvParser {
    columns: CsvColumns,
    first_line: bool,
    /// The fields of the current line (reused).
    fields: Vec<(usize, usize)>,
}

impl CsvParser {
    pub fn new(columns: CsvColumns) -> Self {
        CsvParser {
            columns,
            first_line: true,
            fields: Vec::new(),
        }
    }
}

fn op_of(field: &[u8]) -> Result<Op, FieldError> {
    let t = trim(field);
    let lower = t.to_ascii_lowercase();
    match lower.as_slice() {
        // SCSI READ/WRITE (6), (10), (12), (16), as VSCSI records them.
        b"r" | b"read" | b"rs" | b"8" | b"0x08" | b"40" | b"0x28" | b"168" | b"0xa8" | b"136"
        | b"0x88" => Ok(Op::Read),
        b"w" | b"write" | b"ws" | b"10" | b"0x0a" | b"42" | b"0x2a" | b"170" | b"0xaa" | b"138"
        | b"0x8a" => Ok(Op::Write),
        _ => Err(FieldError::new(
            "op",
            t,
            "r/read or w/write, or a SCSI read/write opcode (0x08, 0x28, 0xa8, 0x88; 0x0a, 0x2a, 0xaa, 0x8a)",
        )),
    }
}

impl LineParser for CsvParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        if std::mem::take(&mut self.first_line) && self.columns.header {
            return Ok(Parsed::Skip);
        }
        // Field boundaries, then each mapped column by index.
        self.fields.clear();
        match self.columns.delimiter {
            Some(d) => {
                let mut start = 0;
                for (i, &b) in line.iter().enumerate() {
                    if b == d {
                        self.fields.push((start, i));
                        start = i + 1;
                    }
                }
                self.fields.push((start, line.len()));
            }
            None => {
                let mut start = None;
                for (i, &b) in line.iter().enumerate() {
                    match (b == b' ' || b == b'\t', start) {
                        (true, Some(s)) => {
                            self.fields.push((s, i));
                            start = None;
                        }
                        (false, None) => start = Some(i),
                        _ => {}
                    }
                }
                if let Some(s) = start {
                    self.fields.push((s, line.len()));
                }
            }
        }
        let n = self.fields.len();
        let col = |c: usize, name: &'static str| -> Result<&[u8], FieldError> {
            self.fields
                .get(c)
                .map(|&(a, b)| trim(&line[a..b]))
                .ok_or_else(|| {
                    FieldError::new(
                        name,
                        b"",
                        format!("column {} (the line has {n} fields)", c + 1),
                    )
                })
        };
        let c = &self.columns;
        let time_ns = match c.time {
            Some(t) => decimal_ns(col(t, "time")?, c.time_unit_ns, "time")?,
            None => 0,
        };
        let start = col(c.start, "offset")?;
        let offset_bytes = scaled(
            u64_field(start, "offset")?,
            c.start_unit_bytes,
            "offset",
            start,
        )?;
        let size_field = col(c.size, "size")?;
        let size_bytes = size_u32(
            scaled(
                u64_field(size_field, "size")?,
                c.size_unit_bytes,
                "size",
                size_field,
            )?,
            "size",
            size_field,
        )?;
        let op = match c.op {
            Some(o) => op_of(col(o, "op")?)?,
            None => Op::Read,
        };
        let device_id = match c.device {
            Some(d) => devices.intern(std::str::from_utf8(col(d, "device")?).unwrap_or("?")),
            None => devices.intern("0"),
        };
        Ok(Parsed::Record(IoRecord {
            time_ns,
            offset_bytes,
            size_bytes,
            device_id,
            op,
            response_ns: None,
        }))
    }

    fn time_base(&self) -> TimeBase {
        if self.columns.time.is_some() {
            TimeBase::Relative
        } else {
            TimeBase::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(spec: &str, text: &str) -> Result<Vec<IoRecord>, FieldError> {
        let mut p = CsvParser::new(spec.parse().unwrap());
        let mut devices = DeviceTable::new();
        let mut out = Vec::new();
        for line in text.lines() {
            if let Parsed::Record(r) = p.parse(line.as_bytes(), &mut devices)? {
                out.push(r);
            }
        }
        Ok(out)
    }

    #[test]
    fn cloudphysics_csv_by_hand() {
        // libCacheSim's sample layout: version,time,op,size,lbn.
        let text = "version,time,op,size,lbn\n1,0.5,0x28,4096,16\n1,1.25,42,8192,2048\n";
        let r = parse_all("time=2,op=3,size=4,lbn=5,header", text).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].time_ns, r[0].op, r[0].size_bytes, r[0].offset_bytes),
            (500_000_000, Op::Read, 4096, 16 * 512)
        );
        assert_eq!(
            (r[1].time_ns, r[1].op, r[1].size_bytes, r[1].offset_bytes),
            (1_250_000_000, Op::Write, 8192, 2048 * 512)
        );
    }

    #[test]
    fn other_layouts() {
        let text = "dev1\tW\t100\t8\t7\ndev2\tread\t200\t16\t9\n";
        let r = parse_all(
            "device=1,op=2,time=3,time-unit=ms,offset=5,size=4,size-unit=sectors,delimiter=tab",
            text,
        )
        .unwrap();
        assert_eq!(
            (
                r[1].device_id,
                r[1].time_ns,
                r[1].size_bytes,
                r[1].offset_bytes
            ),
            (1, 200_000_000, 16 * 512, 9)
        );
        let r = parse_all("offset=1,size=2,delimiter=space", "  10   20 \n").unwrap();
        assert_eq!(
            (r[0].offset_bytes, r[0].size_bytes, r[0].op),
            (10, 20, Op::Read)
        );
    }

    #[test]
    fn bad_specs_and_lines_are_clear() {
        // A typed error, its message saying what is wrong.
        let e: CsvMappingError = "time=2,size=4".parse::<CsvColumns>().unwrap_err();
        assert!(e.0.contains("offset=N (bytes) or lbn=N"), "{e}");
        let e = "offest=1,size=2".parse::<CsvColumns>().unwrap_err();
        assert!(
            e.0.contains("unknown key `offest` (did you mean `offset`?)"),
            "{e}"
        );
        let e = "offset=0,size=2".parse::<CsvColumns>().unwrap_err();
        assert!(e.0.contains("counts from 1"), "{e}");
        let e = parse_all("offset=1,size=2,op=3", "1,2,trim\n").unwrap_err();
        assert_eq!(e.field, "op");
        let e = parse_all("offset=1,size=5", "1,2\n").unwrap_err();
        assert!(
            e.expected.contains("column 5 (the line has 2 fields)"),
            "{e:?}"
        );
    }
}
