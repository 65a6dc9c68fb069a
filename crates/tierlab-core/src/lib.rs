//! tierlab-core: the vocabulary shared by policies, device models and
//! executors. Everything here is sans-IO: nothing reads a clock, sleeps or
//! does IO. Executors (the simulator, later the real executor) own time and
//! call into these state machines, in the style of quinn-proto:
//! `submit`/`on_*` feed events in, `next_event_ns` says when to call back,
//! `advance` moves time forward.

pub mod apply;
pub mod device;
pub mod metrics;
pub mod policy;
pub mod stores;
pub mod testkit;
pub mod volume;

pub use tierlab_trace::{Op, ParamError};

/// Virtual or wall-clock time in integer nanoseconds.
pub type TimeNs = u64;

pub const NS_PER_US: u64 = 1_000;
pub const NS_PER_MS: u64 = 1_000_000;
pub const NS_PER_S: u64 = 1_000_000_000;

/// An IO addressed to one device, by a policy or a composite device (RAID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceIo {
    /// Chosen by the submitter and echoed in the completion.
    pub tag: u64,
    pub op: Op,
    pub offset_bytes: u64,
    pub size_bytes: u32,
}

impl DeviceIo {
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + self.size_bytes as u64
    }
}

/// A finished device IO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub tag: u64,
    pub done_ns: TimeNs,
}
