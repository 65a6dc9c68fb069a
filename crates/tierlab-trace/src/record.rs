//! The one normalized IO record every reader yields and every writer consumes.

use std::fmt;

/// What an IO does. Trim and flush appear only where a format records them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Op {
    Read = 0,
    Write = 1,
    Trim = 2,
    Flush = 3,
}

impl Op {
    pub const ALL: [Op; 4] = [Op::Read, Op::Write, Op::Trim, Op::Flush];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Trim => "trim",
            Op::Flush => "flush",
        }
    }

    pub fn from_code(code: u8) -> Option<Op> {
        Op::ALL.get(code as usize).copied()
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One block IO request.
///
/// `time_ns` is absolute (Unix epoch) for formats that record wall-clock time
/// (MSR, SYSTOR, Tencent) and relative to the trace start otherwise; see
/// `RecordStream::time_base`. Formats without timestamps (ARC .lis) yield
/// `time_ns = 0` and report `TimeBase::None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoRecord {
    pub time_ns: u64,
    pub offset_bytes: u64,
    pub size_bytes: u32,
    /// Index into the reader's device table (`TraceMeta::devices`).
    pub device_id: u32,
    pub op: Op,
    /// Response time recorded in the trace, where the format has one.
    pub response_ns: Option<u64>,
}

impl IoRecord {
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + self.size_bytes as u64
    }
}

/// Whether record times are wall-clock or relative to the trace start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeBase {
    /// Nanoseconds since 1970-01-01T00:00:00Z.
    UnixEpoch,
    /// Nanoseconds since the start of the trace (or an arbitrary origin).
    Relative,
    /// The format records no time; every record has `time_ns = 0`.
    None,
}

/// The device/volume names seen so far, in order of first appearance: a
/// record's `device_id` indexes this table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceTable {
    names: Vec<String>,
    index: rustc_hash::FxHashMap<String, u32>,
}

impl DeviceTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `name`, adding it if it is new.
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.index.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.index.insert(name.to_owned(), id);
        id
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize).map(String::as_str)
    }
}

impl FromIterator<String> for DeviceTable {
    fn from_iter<T: IntoIterator<Item = String>>(iter: T) -> Self {
        let mut table = DeviceTable::new();
        for name in iter {
            table.intern(&name);
        }
        table
    }
}
