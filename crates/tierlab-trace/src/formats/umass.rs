//! UMass Trace Repository SPC format: `ASU,LBA,Size,Opcode,Timestamp[,...]`.
//! LBA in 512-byte sectors, Size in bytes, Opcode `r`/`w` (either case),
//! Timestamp in seconds from the trace start. The device is the ASU.

use crate::error::FieldError;
use crate::parse::{Split, decimal_ns, scaled, size_u32, trim, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

pub struct UmassParser;

impl LineParser for UmassParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let mut f = Split::new(line, b',');
        let asu = trim(f.field("ASU")?);
        u64_field(asu, "ASU")?;
        let lba_field = f.field("LBA")?;
        let offset_bytes = scaled(u64_field(lba_field, "LBA")?, 512, "LBA", lba_field)?;
        let size_field = f.field("Size")?;
        let size_bytes = size_u32(u64_field(size_field, "Size")?, "Size", size_field)?;
        let opcode = trim(f.field("Opcode")?);
        let op = match opcode {
            b"r" | b"R" => Op::Read,
            b"w" | b"W" => Op::Write,
            _ => {
                return Err(FieldError::new(
                    "Opcode",
                    opcode,
                    "`r` or `w` (either case)",
                ));
            }
        };
        let time_ns = decimal_ns(f.field("Timestamp")?, 1_000_000_000, "Timestamp")?;
        let device_id = devices.intern(std::str::from_utf8(asu).unwrap_or("?"));
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
