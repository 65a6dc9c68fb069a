//! VMware VSCSI traces (CloudPhysics; the layout libCacheSim reads).
//! v1, 32-byte little-endian records:
//! `u32 serial, u32 length_bytes, u32 n_sg, u16 scsi_cmd, u16 version, u64 lbn, u64 ts_us`.
//! v2, 40-byte records:
//! `u16 scsi_cmd, u16 version, u32 serial, u32 length_bytes, u32 n_sg, u64 lbn, u64 ts_us, u64 response_us`.
//! `version >> 8` is 1 or 2; lbn is in 512-byte sectors.

use crate::error::FieldError;
use crate::reader::{BinaryParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

pub const V1_RECORD_BYTES: usize = 32;
pub const V2_RECORD_BYTES: usize = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

pub struct VscsiParser {
    pub version: Version,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The version the first (up to two) records agree on, as libCacheSim tests it.
pub fn detect_version(head: &[u8]) -> Option<Version> {
    let agree = |size: usize, ver_at: usize, want: u16| {
        let n = (head.len() / size).min(2);
        n > 0 && (0..n).all(|i| u16_at(head, i * size + ver_at) >> 8 == want)
    };
    if agree(V2_RECORD_BYTES, 2, 2) {
        Some(Version::V2)
    } else if agree(V1_RECORD_BYTES, 14, 1) {
        Some(Version::V1)
    } else {
        None
    }
}

impl VscsiParser {
    /// The parser for the version the first records show; None when they
    /// show neither (an empty input reads as v1).
    pub fn from_head(head: &[u8]) -> Option<Self> {
        if head.is_empty() {
            return Some(VscsiParser {
                version: Version::V1,
            });
        }
        detect_version(head).map(|version| VscsiParser { version })
    }
}

fn op_of(cmd: u16, raw: &[u8]) -> Result<Op, FieldError> {
    match cmd {
        0x08 | 0x28 | 0xa8 | 0x88 => Ok(Op::Read),
        0x0a | 0x2a | 0xaa | 0x8a => Ok(Op::Write),
        0x35 | 0x91 => Ok(Op::Flush),
        0x42 => Ok(Op::Trim),
        _ => Err(FieldError::new(
            "scsi_cmd",
            format!("0x{cmd:02x}").as_bytes(),
            format!(
                "a READ (0x08/0x28/0xa8/0x88), WRITE (0x0a/0x2a/0xaa/0x8a), SYNCHRONIZE CACHE (0x35/0x91) or UNMAP (0x42) command; record bytes {:02x?}",
                &raw[..raw.len().min(16)]
            ),
        )),
    }
}

impl BinaryParser for VscsiParser {
    fn record_size(&self) -> usize {
        match self.version {
            Version::V1 => V1_RECORD_BYTES,
            Version::V2 => V2_RECORD_BYTES,
        }
    }

    fn parse(&mut self, r: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let _ = devices;
        let (cmd, ver, len, lbn, ts_us, rt_us) = match self.version {
            Version::V1 => (
                u16_at(r, 12),
                u16_at(r, 14),
                u32_at(r, 4),
                u64_at(r, 16),
                u64_at(r, 24),
                None,
            ),
            Version::V2 => (
                u16_at(r, 0),
                u16_at(r, 2),
                u32_at(r, 8),
                u64_at(r, 16),
                u64_at(r, 24),
                Some(u64_at(r, 32)),
            ),
        };
        let want = if self.version == Version::V1 { 1 } else { 2 };
        if ver >> 8 != want {
            return Err(FieldError::new(
                "version",
                format!("0x{ver:04x}").as_bytes(),
                format!("0x{want}xx like the first records of this trace"),
            ));
        }
        let op = op_of(cmd, r)?;
        let offset_bytes = lbn.checked_mul(512).ok_or_else(|| {
            FieldError::new(
                "lbn",
                lbn.to_string().as_bytes(),
                "a sector number below 2^55",
            )
        })?;
        let time_ns = ts_us.checked_mul(1_000).ok_or_else(|| {
            FieldError::new(
                "ts",
                ts_us.to_string().as_bytes(),
                "microseconds below 2^64 ns",
            )
        })?;
        let response_ns = match rt_us {
            Some(us) => Some(us.checked_mul(1_000).ok_or_else(|| {
                FieldError::new(
                    "response",
                    us.to_string().as_bytes(),
                    "microseconds below 2^64 ns",
                )
            })?),
            None => None,
        };
        Ok(Parsed::Record(IoRecord {
            time_ns,
            offset_bytes,
            size_bytes: len,
            device_id: 0,
            op,
            response_ns,
        }))
    }

    fn time_base(&self) -> TimeBase {
        TimeBase::Relative
    }
}
