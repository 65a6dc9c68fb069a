//! DiskSim / MQSim ASCII traces: `arrival device lba_sector size_sectors flags`,
//! 512-byte sectors, flags bit 0 set = read. MQSim (and the traces shipped
//! with it) give arrival in integer nanoseconds; classic DiskSim gives
//! decimal milliseconds — two format names, `disksim` and `disksim-ms`.

use crate::error::FieldError;
use crate::parse::{Words, decimal_ns, scaled, size_u32, u32_field, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

pub struct DisksimParser {
    unit_ns: u64,
    time_field: &'static str,
}

impl DisksimParser {
    pub fn nanoseconds() -> Self {
        DisksimParser {
            unit_ns: 1,
            time_field: "arrival_ns",
        }
    }

    pub fn milliseconds() -> Self {
        DisksimParser {
            unit_ns: 1_000_000,
            time_field: "arrival_ms",
        }
    }
}

impl LineParser for DisksimParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let mut f = Words::new(line);
        let time_ns = decimal_ns(f.field(self.time_field)?, self.unit_ns, self.time_field)?;
        let dev = f.field("device")?;
        u64_field(dev, "device")?;
        let lba_field = f.field("lba_sector")?;
        let offset_bytes = scaled(
            u64_field(lba_field, "lba_sector")?,
            512,
            "lba_sector",
            lba_field,
        )?;
        let size_field = f.field("size_sectors")?;
        let size_bytes = size_u32(
            scaled(
                u64_field(size_field, "size_sectors")?,
                512,
                "size_sectors",
                size_field,
            )?,
            "size_sectors",
            size_field,
        )?;
        let flags = u32_field(f.field("flags")?, "flags")?;
        let op = if flags & 1 == 1 { Op::Read } else { Op::Write };
        if let Some(extra) = f.next() {
            return Err(FieldError::new(
                "flags",
                extra,
                "end of line after 5 fields",
            ));
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
