//! Replayer text format (LinnOS/Heimdall replayers):
//! `ts_ms device offset_bytes size_bytes op`, op 1 = read, 0 = write.

use crate::error::FieldError;
use crate::parse::{Words, decimal_ns, size_u32, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

pub struct ReplayerParser;

impl LineParser for ReplayerParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let mut f = Words::new(line);
        let time_ns = decimal_ns(f.field("ts_ms")?, 1_000_000, "ts_ms")?;
        let dev = f.field("device")?;
        u64_field(dev, "device")?;
        let offset_bytes = u64_field(f.field("offset_bytes")?, "offset_bytes")?;
        let size_field = f.field("size_bytes")?;
        let size_bytes = size_u32(
            u64_field(size_field, "size_bytes")?,
            "size_bytes",
            size_field,
        )?;
        let op_field = f.field("op")?;
        let op = match op_field {
            b"1" => Op::Read,
            b"0" => Op::Write,
            _ => return Err(FieldError::new("op", op_field, "1 (read) or 0 (write)")),
        };
        if let Some(extra) = f.next() {
            return Err(FieldError::new("op", extra, "end of line after 5 fields"));
        }
        let device_id = devices.intern(std::str::from_utf8(dev).unwrap_or("?"));
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
        TimeBase::Relative
    }
}
