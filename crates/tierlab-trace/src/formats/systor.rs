//! SYSTOR '17 CSV (Fujitsu VDI traces): header `Timestamp,Response,IOType,LUN,Offset,Size`;
//! Unix seconds with fraction, Response in seconds, IOType `R`/`W`, Offset and
//! Size in bytes. The device is the LUN. Header lines are skipped.

use crate::error::FieldError;
use crate::parse::{Split, decimal_ns, size_u32, trim, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

pub struct SystorParser;

impl LineParser for SystorParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        if line.starts_with(b"Timestamp") {
            return Ok(Parsed::Skip);
        }
        let mut f = Split::new(line, b',');
        let time_ns = decimal_ns(f.field("Timestamp")?, 1_000_000_000, "Timestamp")?;
        let response_ns = decimal_ns(f.field("Response")?, 1_000_000_000, "Response")?;
        let ty = trim(f.field("IOType")?);
        let op = match ty {
            b"R" | b"r" | b"Read" => Op::Read,
            b"W" | b"w" | b"Write" => Op::Write,
            _ => return Err(FieldError::new("IOType", ty, "`R` or `W`")),
        };
        let lun = trim(f.field("LUN")?);
        u64_field(lun, "LUN")?;
        let offset_bytes = u64_field(f.field("Offset")?, "Offset")?;
        let size_field = f.field("Size")?;
        let size_bytes = size_u32(u64_field(size_field, "Size")?, "Size", size_field)?;
        if let Some(extra) = f.next() {
            return Err(FieldError::new("Size", extra, "end of line after 6 fields"));
        }
        let device_id = devices.intern(std::str::from_utf8(lun).unwrap_or("?"));
        Ok(Parsed::Record(IoRecord {
            time_ns,
            offset_bytes,
            size_bytes,
            device_id,
            op,
            response_ns: Some(response_ns),
        }))
    }

    fn time_base(&self) -> TimeBase {
        TimeBase::UnixEpoch
    }
}
