//! Linux disk-stat accounting of one device: `io_ticks` and
//! `time_in_queue`, kept the way the kernel's `part_round_stats` kept them
//! (block/blk-core.c before Linux 5.0), in nanoseconds instead of jiffies.
//!
//! At every IO start and every IO completion, *before* the in-flight count
//! changes, the time since the previous update (`stamp`) is charged:
//!
//! ```text
//! if in_flight > 0 {
//!     io_ticks      += now - stamp
//!     time_in_queue += in_flight * (now - stamp)
//! }
//! stamp = now
//! ```
//!
//! and the kernel did the same when /proc/diskstats was read, so a reading
//! is current to the instant. We "read" at every interval boundary and at
//! the end. Hence `io_ticks` is exactly the time during which at least one
//! IO was in flight, and `time_in_queue` is exactly the integral of the
//! in-flight count over time (= the sum over IOs of their time in flight,
//! the part of each IO inside the window). `Δio_ticks / Δt` is iostat's
//! `%util` and `Δtime_in_queue / Δt` its `aqu-sz` (see docs/metrics.md for
//! how later kernels differ and why we keep this definition).

use crate::TimeNs;

#[derive(Clone, Debug)]
pub(crate) struct DiskStats {
    /// IOs submitted and not yet completed.
    pub in_flight: u64,
    /// Time up to which `io_ticks_ns` and `time_in_queue_ns` are charged.
    pub stamp_ns: TimeNs,
    pub io_ticks_ns: u64,
    pub time_in_queue_ns: u64,
}

impl DiskStats {
    pub fn new(start_ns: TimeNs) -> Self {
        DiskStats {
            in_flight: 0,
            stamp_ns: start_ns,
            io_ticks_ns: 0,
            time_in_queue_ns: 0,
        }
    }

    /// Charges the time since `stamp_ns` (part_round_stats). The recorder
    /// never passes a time earlier than the stamp; saturating keeps a
    /// violated contract from wrapping.
    #[inline]
    pub fn round(&mut self, now_ns: TimeNs) {
        let elapsed_ns = now_ns.saturating_sub(self.stamp_ns);
        if self.in_flight > 0 {
            self.io_ticks_ns += elapsed_ns;
            self.time_in_queue_ns = self
                .time_in_queue_ns
                .saturating_add(self.in_flight.saturating_mul(elapsed_ns));
        }
        self.stamp_ns = self.stamp_ns.max(now_ns);
    }

    /// An IO enters the device at `now_ns`.
    #[inline]
    pub fn start(&mut self, now_ns: TimeNs) {
        self.round(now_ns);
        self.in_flight += 1;
    }

    /// An IO leaves the device at `now_ns`. False when none was in flight
    /// (a completion without a submit: the caller counts a violation).
    #[inline]
    pub fn done(&mut self, now_ns: TimeNs) -> bool {
        self.round(now_ns);
        if self.in_flight == 0 {
            return false;
        }
        self.in_flight -= 1;
        true
    }
}
