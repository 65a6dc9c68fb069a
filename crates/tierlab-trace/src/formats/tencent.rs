//! Tencent CBS CSV (SNIA IOTTA, OSCA paper): `Timestamp,Offset,Size,IOType,VolumeID`.
//! Unix seconds; Offset and Size in 512-byte sectors; IOType 0 = read, 1 = write.

use crate::error::FieldError;
use crate::parse::{Split, scaled, size_u32, trim, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

pub struct TencentParser;

impl LineParser for TencentParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let mut f = Split::new(line, b',');
        let ts_field = f.field("Timestamp")?;
        let time_ns = scaled(
            u64_field(ts_field, "Timestamp")?,
            1_000_000_000,
            "Timestamp",
            ts_field,
        )?;
        let off_field = f.field("Offset")?;
        let offset_bytes = scaled(u64_field(off_field, "Offset")?, 512, "Offset", off_field)?;
        let size_field = f.field("Size")?;
        let size_bytes = size_u32(
            scaled(u64_field(size_field, "Size")?, 512, "Size", size_field)?,
            "Size",
            size_field,
        )?;
        let ty = trim(f.field("IOType")?);
        let op = match ty {
            b"0" => Op::Read,
            b"1" => Op::Write,
            _ => return Err(FieldError::new("IOType", ty, "0 (read) or 1 (write)")),
        };
        let volume = trim(f.field("VolumeID")?);
        u64_field(volume, "VolumeID")?;
        if let Some(extra) = f.next() {
            return Err(FieldError::new(
                "VolumeID",
                extra,
                "end of line after 5 fields",
            ));
        }
        let device_id = devices.intern(std::str::from_utf8(volume).unwrap_or("?"));
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
        TimeBase::UnixEpoch
    }
}
