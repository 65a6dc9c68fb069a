//! fio iolog, version 2 and 3 (the `read_iolog`/`write_iolog` format).
//!
//! v2: `filename action [offset length]`, no time except `wait` actions
//! (microseconds, relative to the previous wait).
//! v3: `timestamp filename action [offset length]`, timestamp in
//! microseconds from the start of the run (what fio 3.33 writes and replays).
//! Each file is a device; `add`/`open`/`close` lines are bookkeeping;
//! `sync`/`datasync` become flushes.

use crate::error::FieldError;
use crate::parse::{Words, decimal_ns, size_u32, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

pub const HEADER_V2: &str = "fio version 2 iolog";
pub const HEADER_V3: &str = "fio version 3 iolog";

#[derive(Default)]
pub struct FioParser {
    version: Option<u8>,
    /// v2: time accumulated from `wait` actions.
    wait_ns: u64,
    last_file: Option<(Vec<u8>, u32)>,
}

impl LineParser for FioParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let version = match self.version {
            Some(v) => v,
            None => {
                let header = line.trim_ascii();
                self.version = Some(if header == HEADER_V2.as_bytes() {
                    2
                } else if header == HEADER_V3.as_bytes() {
                    3
                } else {
                    return Err(FieldError::new(
                        "header",
                        line,
                        format!("`{HEADER_V2}` or `{HEADER_V3}` on the first line"),
                    ));
                });
                return Ok(Parsed::Skip);
            }
        };
        let mut f = Words::new(line);
        let time_ns = if version == 3 {
            decimal_ns(f.field("timestamp_us")?, 1_000, "timestamp_us")?
        } else {
            self.wait_ns
        };
        let file = f.field("filename")?;
        let action = f.field("action")?;
        let op = match action {
            b"read" => Op::Read,
            b"write" => Op::Write,
            b"trim" => Op::Trim,
            b"sync" | b"datasync" | b"sync_file_range" => Op::Flush,
            b"add" => {
                devices.intern(std::str::from_utf8(file).unwrap_or("?"));
                return Ok(Parsed::Skip);
            }
            b"open" | b"close" => return Ok(Parsed::Skip),
            b"wait" if version == 2 => {
                let field = f.field("offset")?;
                let us = u64_field(field, "offset")?;
                self.wait_ns = us
                    .checked_mul(1_000)
                    .and_then(|ns| self.wait_ns.checked_add(ns))
                    .ok_or_else(|| {
                        FieldError::new(
                            "offset",
                            field,
                            "a wait that keeps the total time below 2^64 ns",
                        )
                    })?;
                return Ok(Parsed::Skip);
            }
            _ => {
                return Err(FieldError::new(
                    "action",
                    action,
                    "one of add, open, close, read, write, trim, sync, datasync, wait (v2 only)",
                ));
            }
        };
        let (offset_bytes, size_bytes) = match (f.next(), f.next()) {
            (Some(off), Some(len)) => {
                let offset = u64_field(off, "offset")?;
                let size = size_u32(u64_field(len, "length")?, "length", len)?;
                (offset, size)
            }
            (None, None) if op == Op::Flush => (0, 0),
            (Some(off), None) => {
                return Err(FieldError::new(
                    "length",
                    off,
                    "`offset length` after the action",
                ));
            }
            _ => {
                return Err(FieldError::new(
                    "offset",
                    b"",
                    "`offset length` after the action",
                ));
            }
        };
        if let Some(extra) = f.next() {
            return Err(FieldError::new(
                "length",
                extra,
                "end of line after `offset length`",
            ));
        }
        let device_id = match &self.last_file {
            Some((name, id)) if name.as_slice() == file => *id,
            _ => {
                let id = devices.intern(std::str::from_utf8(file).unwrap_or("?"));
                self.last_file = Some((file.to_vec(), id));
                id
            }
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
        TimeBase::Relative
    }
}
