//! ARC paper `.lis` traces (Megiddo & Modha, FAST '03):
//! `start_block nblocks ignored request_no`, 512-byte blocks, reads only, no
//! time. One line is one request of `nblocks` blocks (the paper's hit ratios
//! count each of those blocks as one page reference).

use crate::error::FieldError;
use crate::parse::{Words, scaled, size_u32, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

pub const ARC_BLOCK_BYTES: u64 = 512;

pub struct ArcParser;

impl LineParser for ArcParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let mut f = Words::new(line);
        let start_field = f.field("start_block")?;
        let offset_bytes = scaled(
            u64_field(start_field, "start_block")?,
            ARC_BLOCK_BYTES,
            "start_block",
            start_field,
        )?;
        let n_field = f.field("nblocks")?;
        let size_bytes = size_u32(
            scaled(
                u64_field(n_field, "nblocks")?,
                ARC_BLOCK_BYTES,
                "nblocks",
                n_field,
            )?,
            "nblocks",
            n_field,
        )?;
        u64_field(f.field("ignored")?, "ignored")?;
        u64_field(f.field("request_no")?, "request_no")?;
        let device_id = if devices.is_empty() {
            devices.intern("0")
        } else {
            0
        };
        Ok(Parsed::Record(IoRecord {
            time_ns: 0,
            offset_bytes,
            size_bytes,
            device_id,
            op: Op::Read,
            response_ns: None,
        }))
    }

    fn time_base(&self) -> TimeBase {
        TimeBase::None
    }
}
