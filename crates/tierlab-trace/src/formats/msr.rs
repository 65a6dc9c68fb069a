//! MSR Cambridge CSV (SNIA IOTTA set 388):
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, no header.
//! Timestamp is a Windows filetime (100 ns ticks since 1601-01-01), ResponseTime
//! is in 100 ns ticks; Offset and Size are bytes. The device is `Hostname_Disk`.

use crate::error::FieldError;
use crate::parse::{Split, size_u32, trim, u32_field, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

/// Filetime ticks between 1601-01-01 and 1970-01-01.
pub const FILETIME_UNIX_EPOCH: u64 = 116_444_736_000_000_000;

#[derive(Default)]
pub struct MsrParser {
    /// Decided by the first record: filetimes at or after 1970 are converted
    /// to Unix time; smaller ones are taken as relative ticks.
    time_base: Option<TimeBase>,
    last_device: Option<(Vec<u8>, Vec<u8>, u32)>,
}

impl LineParser for MsrParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        let mut f = Split::new(line, b',');
        let ts_field = f.field("Timestamp")?;
        let ticks = u64_field(ts_field, "Timestamp")?;
        let host = f.field("Hostname")?;
        let disk = f.field("DiskNumber")?;
        let disk_number = u32_field(disk, "DiskNumber")?;
        let ty = trim(f.field("Type")?);
        let op = if ty.eq_ignore_ascii_case(b"Read") {
            Op::Read
        } else if ty.eq_ignore_ascii_case(b"Write") {
            Op::Write
        } else {
            return Err(FieldError::new("Type", ty, "`Read` or `Write`"));
        };
        let offset_bytes = u64_field(f.field("Offset")?, "Offset")?;
        let size_field = f.field("Size")?;
        let size_bytes = size_u32(u64_field(size_field, "Size")?, "Size", size_field)?;
        let rt_field = f.field("ResponseTime")?;
        let rt_ticks = u64_field(rt_field, "ResponseTime")?;
        if let Some(extra) = f.next() {
            return Err(FieldError::new(
                "ResponseTime",
                extra,
                "end of line after 7 fields",
            ));
        }
        let base = *self
            .time_base
            .get_or_insert(if ticks >= FILETIME_UNIX_EPOCH {
                TimeBase::UnixEpoch
            } else {
                TimeBase::Relative
            });
        let time_ticks = match base {
            TimeBase::UnixEpoch => ticks.checked_sub(FILETIME_UNIX_EPOCH).ok_or_else(|| {
                FieldError::new(
                    "Timestamp",
                    ts_field,
                    "a filetime after 1970 (earlier records of this trace were)",
                )
            })?,
            _ => ticks,
        };
        let time_ns = time_ticks.checked_mul(100).ok_or_else(|| {
            FieldError::new(
                "Timestamp",
                ts_field,
                "a filetime that fits in 64 bits of ns",
            )
        })?;
        let response_ns = rt_ticks.checked_mul(100).ok_or_else(|| {
            FieldError::new(
                "ResponseTime",
                rt_field,
                "a response time that fits in 64 bits of ns",
            )
        })?;

        // Hot path: the device rarely changes between consecutive lines.
        let device_id = match &self.last_device {
            Some((last_host, last_disk, id))
                if last_host.as_slice() == host && last_disk.as_slice() == disk =>
            {
                *id
            }
            _ => {
                let name = format!("{}_{disk_number}", String::from_utf8_lossy(trim(host)));
                let id = devices.intern(&name);
                self.last_device = Some((host.to_vec(), disk.to_vec(), id));
                id
            }
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
        self.time_base.unwrap_or(TimeBase::UnixEpoch)
    }
}
