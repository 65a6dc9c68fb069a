//! libCacheSim oracleGeneral binary: packed 24-byte little-endian records
//! `u32 clock_time_s, u64 obj_id, u32 obj_size, i64 next_access_vtime`.
//! There is no operation; every record is a read. The object id becomes
//! the offset and the object size the size, so block-level stats count
//! objects, not 4 KiB blocks, unless the ids were byte offsets.

use crate::error::FieldError;
use crate::reader::{BinaryParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

pub const RECORD_BYTES: usize = 24;

pub struct OracleParser;

pub fn fields(r: &[u8]) -> (u32, u64, u32, i64) {
    (
        u32::from_le_bytes(r[0..4].try_into().unwrap()),
        u64::from_le_bytes(r[4..12].try_into().unwrap()),
        u32::from_le_bytes(r[12..16].try_into().unwrap()),
        i64::from_le_bytes(r[16..24].try_into().unwrap()),
    )
}

/// Heuristic for detection: times never decrease and every next-access
/// index is -1 or lies in the future.
pub fn looks_like(head: &[u8]) -> bool {
    let n = (head.len() / RECORD_BYTES).min(256);
    if n < 2 {
        return false;
    }
    let mut last_time = 0;
    for i in 0..n {
        let (time, _, size, next) = fields(&head[i * RECORD_BYTES..]);
        if time < last_time || size == 0 || !(next == -1 || next > i as i64) {
            return false;
        }
        last_time = time;
    }
    true
}

impl BinaryParser for OracleParser {
    fn record_size(&self) -> usize {
        RECORD_BYTES
    }

    fn parse(&mut self, r: &[u8], _devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let (time_s, obj_id, obj_size, next) = fields(r);
        if next < -1 {
            return Err(FieldError::new(
                "next_access_vtime",
                next.to_string().as_bytes(),
                "-1 (never again) or a non-negative request index",
            ));
        }
        Ok(Parsed::Record(IoRecord {
            time_ns: time_s as u64 * 1_000_000_000,
            offset_bytes: obj_id,
            size_bytes: obj_size,
            device_id: 0,
            op: Op::Read,
            response_ns: None,
        }))
    }

    fn time_base(&self) -> TimeBase {
        TimeBase::Relative
    }
}
