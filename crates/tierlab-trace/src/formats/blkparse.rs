//! `blkparse` default text output:
//! `maj,min cpu seq time_s pid action rwbs [sector + nsectors] [process]`.
//!
//! One event kind marks an IO: D (issued to the driver) by default, Q
//! (queued) when the trace has no D events or when asked. To choose without
//! reading the file twice, Q events are held in a bounded buffer until the
//! first D event (then D wins and the buffer is dropped) or until the buffer
//! fills or the input ends (then Q wins and the buffer is released).
//! The summary blkparse prints at the end (`CPU0 (8,0):`, `Total (8,0):`, ...)
//! is skipped.

use std::collections::VecDeque;
use std::str::FromStr;

use crate::error::FieldError;
use crate::parse::{Words, decimal_ns, scaled, size_u32, u64_field};
use crate::reader::{LineParser, Parsed};
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Queued: the IO as the application issued it.
    Q,
    /// Dispatched to the device driver: the IO as the device saw it.
    D,
}

impl FromStr for Event {
    type Err = crate::ParamError;
    fn from_str(s: &str) -> Result<Self, crate::ParamError> {
        match s {
            "Q" | "q" => Ok(Event::Q),
            "D" | "d" => Ok(Event::D),
            _ => Err(crate::ParamError::new(
                "",
                format!("{s:?}"),
                "a blkparse event: Q (queued) or D (dispatched)",
            )),
        }
    }
}

/// Q events held while deciding between Q and D.
pub const UNDECIDED_BUFFER_RECORDS: usize = 65_536;

pub struct BlkparseParser {
    event: Option<Event>,
    held: VecDeque<IoRecord>,
    in_summary: bool,
}

impl BlkparseParser {
    pub fn new(event: Option<Event>) -> Self {
        BlkparseParser {
            event,
            held: VecDeque::new(),
            in_summary: false,
        }
    }
}

fn is_device(field: &[u8]) -> bool {
    match memchr::memchr(b',', field) {
        Some(i) => {
            i > 0
                && i + 1 < field.len()
                && field[..i].iter().all(u8::is_ascii_digit)
                && field[i + 1..].iter().all(u8::is_ascii_digit)
        }
        None => false,
    }
}

impl LineParser for BlkparseParser {
    fn parse(&mut self, line: &[u8], devices: &mut DeviceTable) -> Result<Parsed, FieldError> {
        if self.in_summary {
            return Ok(Parsed::Skip);
        }
        let mut f = Words::new(line);
        let dev = f.field("device")?;
        if !is_device(dev) {
            const SUMMARY: [&[u8]; 4] = [b"CPU", b"Total", b"Throughput", b"Events"];
            if SUMMARY.iter().any(|s| dev.starts_with(s)) {
                self.in_summary = true;
                return Ok(Parsed::Skip);
            }
            return Err(FieldError::new("device", dev, "`major,minor` (e.g. 8,0)"));
        }
        u64_field(f.field("cpu")?, "cpu")?;
        u64_field(f.field("sequence")?, "sequence")?;
        let time_field = f.field("time")?;
        u64_field(f.field("pid")?, "pid")?;
        let action = f.field("action")?;
        let event = match action {
            b"Q" => Event::Q,
            b"D" => Event::D,
            _ => return Ok(Parsed::Skip),
        };
        match self.event {
            Some(chosen) if chosen != event => return Ok(Parsed::Skip),
            None if event == Event::D => {
                // D events exist: they win, held Q events are dropped.
                self.event = Some(Event::D);
                self.held.clear();
            }
            _ => {}
        }
        let time_ns = decimal_ns(time_field, 1_000_000_000, "time")?;
        let rwbs = f.field("rwbs")?;
        let (offset_bytes, size_bytes) = match f.next() {
            Some(sector) if sector.first().is_some_and(u8::is_ascii_digit) => {
                let offset = scaled(u64_field(sector, "sector")?, 512, "sector", sector)?;
                let plus = f.field("+")?;
                if plus != b"+" {
                    return Err(FieldError::new("+", plus, "`+` between sector and size"));
                }
                let n = f.field("nsectors")?;
                let size = size_u32(
                    scaled(u64_field(n, "nsectors")?, 512, "nsectors", n)?,
                    "nsectors",
                    n,
                )?;
                (offset, size)
            }
            _ => (0, 0),
        };
        let op = if rwbs.contains(&b'D') {
            Op::Trim
        } else if rwbs.contains(&b'W') && size_bytes > 0 {
            Op::Write
        } else if rwbs.contains(&b'R') {
            Op::Read
        } else if rwbs.contains(&b'F') {
            Op::Flush
        } else if rwbs.contains(&b'W') {
            Op::Write
        } else if rwbs.iter().all(|b| b"NSMAE".contains(b)) {
            return Ok(Parsed::Skip); // no data transfer (e.g. `N`)
        } else {
            return Err(FieldError::new(
                "rwbs",
                rwbs,
                "RWBS letters (R, W, D, F, N, S, M, A, E)",
            ));
        };
        let device_id = devices.intern(std::str::from_utf8(dev).unwrap_or("?"));
        let record = IoRecord {
            time_ns,
            offset_bytes,
            size_bytes,
            device_id,
            op,
            response_ns: None,
        };
        if self.event.is_none() {
            self.held.push_back(record);
            if self.held.len() >= UNDECIDED_BUFFER_RECORDS {
                self.event = Some(Event::Q);
            }
            return Ok(Parsed::Skip);
        }
        Ok(Parsed::Record(record))
    }

    fn pending(&mut self) -> Option<IoRecord> {
        if self.event == Some(Event::Q) {
            self.held.pop_front()
        } else {
            None
        }
    }

    fn end_of_input(&mut self) {
        if self.event.is_none() {
            self.event = Some(Event::Q);
        }
    }

    fn time_base(&self) -> TimeBase {
        TimeBase::Relative
    }
}
