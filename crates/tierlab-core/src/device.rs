//! Device models: sans-IO state machines that turn submitted IOs into
//! completion times.
//!
//! Contract (the executor relies on it; `tests` in tierlab-devices check it):
//! - `submit(now, io)` queues an IO arriving at `now`. It never completes an
//!   IO by itself: completions are only reported by `advance`.
//! - `next_event_ns()` is the earliest time at which the model's state
//!   changes (an IO completes, or an internal step such as the next queued
//!   IO starting service). `None` when idle with nothing queued.
//! - `advance(now, done)` moves the model to `now` (never earlier than a
//!   previous `now`) and appends every IO that completed at or before
//!   `now`, in completion order, ties in submission order.
//! - Same inputs ⇒ same outputs: models draw randomness only from a seeded
//!   generator they own.

use crate::{Completion, DeviceIo, TimeNs};

/// What a device is doing, for state timelines (VCD waveforms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DeviceState {
    Idle = 0,
    Read = 1,
    Write = 2,
    /// Positioning (HDD seek + rotation).
    Seek = 3,
    Erase = 4,
    /// Garbage collection / background cleaning.
    Gc = 5,
    /// Degraded or failed.
    Failed = 6,
}

impl DeviceState {
    pub const ALL: [DeviceState; 7] = [
        DeviceState::Idle,
        DeviceState::Read,
        DeviceState::Write,
        DeviceState::Seek,
        DeviceState::Erase,
        DeviceState::Gc,
        DeviceState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeviceState::Idle => "IDLE",
            DeviceState::Read => "READ",
            DeviceState::Write => "WRITE",
            DeviceState::Seek => "SEEK",
            DeviceState::Erase => "ERASE",
            DeviceState::Gc => "GC",
            DeviceState::Failed => "FAILED",
        }
    }
}

/// Background work a device does on its own (an SSD's garbage collection),
/// as its host sees it: the status a drive reports through a host-control
/// interface for background operations (ATA Advanced Background
/// Operations, SCSI BACKGROUND CONTROL, eMMC/UFS BKOPS status, NVMe
/// Predictable Latency Mode windows). Ordered by urgency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Background {
    /// Nothing due, or not reported (the device offers no such interface).
    Idle,
    /// Work is due and waits for the host to allow it.
    Deferred,
    /// Work is allowed and running (or starting as its resources free).
    Running,
    /// Work that cannot wait any longer: it runs whether allowed or not.
    Urgent,
}

pub trait DeviceModel {
    /// Queues an IO arriving at `now_ns`.
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo);
    /// The next time the model's state changes, if any.
    fn next_event_ns(&self) -> Option<TimeNs>;
    /// Moves to `now_ns`, appending IOs completed at or before it.
    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>);
    /// Addressable bytes.
    fn capacity_bytes(&self) -> u64;
    /// What the device is doing now (after the last `advance`/`submit`).
    fn state(&self) -> DeviceState;
    /// IOs submitted and not yet reported complete.
    fn in_flight(&self) -> usize;
    /// Members of a composite device (RAID), for per-member metrics.
    fn members(&self) -> Vec<&dyn DeviceModel> {
        Vec::new()
    }
    /// The model's own counters at the end of a run (an SMR disk's band
    /// read-modify-writes, a drive-managed SMR disk's cache cleanings),
    /// reported in summary.json under `run.device_counters` and defined in
    /// the model's docs.
    fn counters(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
    /// The device's background work, for a host that coordinates it (a
    /// RAID controller staggering its mirrors' garbage collection).
    /// Models without host-visible background work report `Idle`.
    fn background(&self) -> Background {
        Background::Idle
    }
    /// From `now_ns` on, the host allows (`true`, every model's initial
    /// state) or defers (`false`) background work that can wait; urgent
    /// work runs either way. Models without host-controlled background
    /// work ignore it.
    fn set_background_allowed(&mut self, now_ns: TimeNs, allowed: bool) {
        let _ = (now_ns, allowed);
    }
}
