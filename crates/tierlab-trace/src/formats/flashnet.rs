//! FlashNet profile CSV:
//! `ts_record_ms,latency_us,io_type,size_bytes,offset_bytes,ts_submit_ms,size_after_replay`,
//! io_type 1 = read, 0 = write. Time is `ts_record_ms`; the recorded
//! `latency_us` becomes the response time. An optional header line is skipped.

use crate::error::FieldError;
use crate::parse::{Split, decimal_ns, size_u32, trim, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

#[derive(Default)]
pub struct FlashnetParser {
    seen_data: bool,
}

impl LineParser for FlashnetParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        if !self.seen_data && line.starts_with(b"ts_record") {
            return Ok(Parsed::Skip);
        }
        self.seen_data = true;
        let mut f = Split::new(line, b',');
        let time_ns = decimal_ns(f.field("ts_record_ms")?, 1_000_000, "ts_record_ms")?;
        let response_ns = decimal_ns(f.field("latency_us")?, 1_000, "latency_us")?;
        let ty = trim(f.field("io_type")?);
        let op = match ty {
            b"1" => Op::Read,
            b"0" => Op::Write,
            _ => return Err(FieldError::new("io_type", ty, "1 (read) or 0 (write)")),
        };
        let size_field = f.field("size_bytes")?;
        let size_bytes = size_u32(
            u64_field(size_field, "size_bytes")?,
            "size_bytes",
            size_field,
        )?;
        let offset_bytes = u64_field(f.field("offset_bytes")?, "offset_bytes")?;
        decimal_ns(f.field("ts_submit_ms")?, 1_000_000, "ts_submit_ms")?;
        u64_field(f.field("size_after_replay")?, "size_after_replay")?;
        let device_id = if devices.is_empty() {
            devices.intern("0")
        } else {
            0
        };
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
        TimeBase::Relative
    }
}
