//! Flash SSD as a queueing model.
//!
//! Model:
//! - `parallel_units` flash units (channels × dies, abstracted) behind one
//!   FIFO queue: an IO waits for a free unit, in arrival order.
//! - On a unit, a read takes `read_latency_ns + size / unit_read_bandwidth`
//!   and a write `write_latency_ns + size / unit_write_bandwidth`, both
//!   multiplied by `1 + gc_slowdown × w`, where `w` is the recent write
//!   share: an exponentially weighted moving average of "was a write" over
//!   arrivals, with weight `1 / gc_window_ios` (so it remembers roughly the
//!   last `gc_window_ios` IOs). Garbage collection runs on the same units
//!   as host IO, so under write-heavy load it delays reads as well as
//!   writes; a read-only load runs at the base service times.
//! - The front end (controller + host link) is one pipe every IO crosses:
//!   an IO books a slot of `max(1 s / max_iops, size / device_bandwidth)`
//!   (per op) when it starts, right after the slots booked before it, and
//!   completes no earlier than its slot begins. Its own slot overlaps its
//!   unit time (an isolated IO is not slowed), but slots follow each other,
//!   so sustained throughput never exceeds the device bandwidth nor
//!   `max_*_iops`. Once the pipe is the bottleneck the units are held,
//!   the FIFO queue grows and latency rises with the load (Little's law:
//!   latency = outstanding / IOPS).
//! - Trim and flush hold a unit for the write latency, cross no pipe and do
//!   not count in the write share (the devices here have power-loss
//!   protected caches: a flush is cheap).
//! - The model does not tell sequential from random IO: a 4 KiB sequential
//!   write stream is capped by `max_write_iops` like a random one.
//!
//! Calibration of `intel-p3700` (800 GB NVMe). The ATSMF paper (seed
//! 000_749f2976663baebe.txt) measured 40 µs mean response time on
//! read-mostly replays and 80 µs on read-write mixes through CentOS 7.1,
//! device mapper and btreplay, i.e. end to end, above the datasheet's
//! 20 µs QD1 latency. The preset is tuned so that the calibration replay in
//! `tests/models/ssd.rs` lands there: Poisson arrivals at 20,000 IOPS
//! (moderate: ~6 % of the units' capacity), random offsets, the ATSMF
//! generator's size mix (4k:8, 8k:4, 16k:2, 32k:1, 64k:1; mean 12 KiB),
//! 1 % writes (the read-mostly traces have 0.03–1.2 % writes, Table 6) and
//! 50 % writes. Read latency sets the first number, `gc_slowdown` the
//! second. Datasheet values as commonly published for the 800 GB model set
//! the limits: 460 k / 90 k 4 KiB random read / write IOPS, 2,800 / 1,900
//! MB/s sequential, 18 channels (one unit each). The paper's dbt2 (100 %
//! writes, 61 µs) is not matched: its writes are sequential log writes,
//! which cause little GC; this model would give ~130 µs there.
//!
//! Calibration of `intel-s3500` (800 GB SATA): datasheet values as
//! commonly published: 75 k / 11.5 k 4 KiB random read / write IOPS, 500 /
//! 450 MB/s sequential read / write, 50 µs read and 65 µs write latency
//! (QD1). Eight units (an 8-channel controller). Read latency + 4 KiB at
//! the unit read bandwidth = 50 µs with no writes; `gc_slowdown` = 1 is
//! *our choice* (no datasheet number), and the write base is set so that a
//! write under a pure-write load (w = 1) takes 65 µs on its unit. The
//! datasheet's 65 µs is a sequential QD1 figure (15.4 k IOPS) while its
//! 11.5 k IOPS is random steady state; this model does not tell the
//! patterns apart, so a back-to-back QD1 write stream is held to 11.5 k
//! IOPS (87 µs per write) and only writes with gaps between them see
//! 65 µs.

use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::{Completion, DeviceIo, Op, ParamError, TimeNs};

use crate::check::{device_params, range, range_f64, transfer_ns, unknown_preset};
use crate::parallel::{Parallel, Service};

const MB_PER_S: u64 = 1_000_000;
const PS_PER_S: u128 = 1_000_000_000_000;
const PS_PER_NS: u128 = 1_000;

device_params! {
    /// Parameters of a flash SSD. Missing keys default to the
    /// `intel-p3700` preset.
    pub struct SsdParams / SsdOverrides {
        /// Addressable bytes. Default 800 GB (8e11).
        pub capacity_bytes: u64,
        /// Flash units serving IOs at once; more wait in FIFO order.
        /// Default 18.
        pub parallel_units: u32,
        /// Fixed unit time of a read, ns (before GC slowdown). Default
        /// 24,000.
        pub read_latency_ns: u64,
        /// Fixed unit time of a write, ns (before GC slowdown); also the
        /// time of a trim or flush. Default 20,000.
        pub write_latency_ns: u64,
        /// Transfer rate of one unit for reads, bytes/s. Default 800 MB/s.
        pub unit_read_bandwidth_bytes_per_s: u64,
        /// Transfer rate of one unit for writes, bytes/s. Default 400 MB/s.
        pub unit_write_bandwidth_bytes_per_s: u64,
        /// Device read bandwidth (front-end pipe), bytes/s. Default
        /// 2,800 MB/s.
        pub read_bandwidth_bytes_per_s: u64,
        /// Device write bandwidth (front-end pipe), bytes/s. Default
        /// 1,900 MB/s.
        pub write_bandwidth_bytes_per_s: u64,
        /// Read IOPS limit of the front end; 0 = none. Default 460,000.
        pub max_read_iops: u64,
        /// Write IOPS limit of the front end; 0 = none. Default 90,000.
        pub max_write_iops: u64,
        /// Unit times are multiplied by `1 + gc_slowdown × w` (w = recent
        /// write share, 0..1). 0 disables. Default 1.55.
        pub gc_slowdown: f64,
        /// Memory of the recent write share, IOs (EWMA weight
        /// 1/gc_window_ios). Default 1,000.
        pub gc_window_ios: u32,
    }
}

impl Default for SsdParams {
    fn default() -> Self {
        SsdParams::intel_p3700()
    }
}

impl SsdParams {
    /// Preset names accepted by [`SsdParams::preset`].
    pub const PRESETS: &'static [&'static str] = &["intel-p3700", "intel-s3500"];

    /// Intel DC P3700 800 GB (NVMe), calibrated to the ATSMF paper: see the
    /// module notes.
    pub fn intel_p3700() -> Self {
        SsdParams {
            capacity_bytes: 800_000_000_000,
            parallel_units: 18,
            read_latency_ns: 24_000,
            write_latency_ns: 20_000,
            unit_read_bandwidth_bytes_per_s: 800 * MB_PER_S,
            unit_write_bandwidth_bytes_per_s: 400 * MB_PER_S,
            read_bandwidth_bytes_per_s: 2_800 * MB_PER_S,
            write_bandwidth_bytes_per_s: 1_900 * MB_PER_S,
            max_read_iops: 460_000,
            max_write_iops: 90_000,
            gc_slowdown: 1.55,
            gc_window_ios: 1_000,
        }
    }

    /// Intel DC S3500 800 GB (SATA), datasheet values: see the module notes.
    pub fn intel_s3500() -> Self {
        SsdParams {
            capacity_bytes: 800_000_000_000,
            parallel_units: 8,
            // 29.52 µs + 4096 B / 200 MB/s (20.48 µs) = 50 µs.
            read_latency_ns: 29_520,
            // (12.02 µs + 20.48 µs) × (1 + 1.0 × 1) = 65 µs at w = 1.
            write_latency_ns: 12_020,
            unit_read_bandwidth_bytes_per_s: 200 * MB_PER_S,
            unit_write_bandwidth_bytes_per_s: 200 * MB_PER_S,
            read_bandwidth_bytes_per_s: 500 * MB_PER_S,
            write_bandwidth_bytes_per_s: 450 * MB_PER_S,
            max_read_iops: 75_000,
            max_write_iops: 11_500,
            gc_slowdown: 1.0,
            gc_window_ios: 1_000,
        }
    }

    /// The preset called `name`, or an error listing the known ones.
    pub fn preset(name: &str) -> Result<Self, ParamError> {
        match name {
            "intel-p3700" => Ok(Self::intel_p3700()),
            "intel-s3500" => Ok(Self::intel_s3500()),
            _ => Err(unknown_preset(name, Self::PRESETS)),
        }
    }

    /// Checks every parameter; the error names the parameter, its value
    /// and the allowed range.
    pub fn validate(&self) -> Result<(), ParamError> {
        const BW_MIN: u64 = 1_000;
        const BW_MAX: u64 = 10_000_000_000_000;
        const LATENCY_MAX: u64 = 1_000_000_000_000;
        range("capacity_bytes", self.capacity_bytes, 4096, 1 << 60)?;
        range("parallel_units", self.parallel_units, 1, 4096)?;
        range("read_latency_ns", self.read_latency_ns, 1, LATENCY_MAX)?;
        range("write_latency_ns", self.write_latency_ns, 1, LATENCY_MAX)?;
        for (name, value) in [
            (
                "unit_read_bandwidth_bytes_per_s",
                self.unit_read_bandwidth_bytes_per_s,
            ),
            (
                "unit_write_bandwidth_bytes_per_s",
                self.unit_write_bandwidth_bytes_per_s,
            ),
            (
                "read_bandwidth_bytes_per_s",
                self.read_bandwidth_bytes_per_s,
            ),
            (
                "write_bandwidth_bytes_per_s",
                self.write_bandwidth_bytes_per_s,
            ),
        ] {
            range(name, value, BW_MIN, BW_MAX)?;
        }
        range("max_read_iops", self.max_read_iops, 0, 1_000_000_000)?;
        range("max_write_iops", self.max_write_iops, 0, 1_000_000_000)?;
        range_f64("gc_slowdown", self.gc_slowdown, 0.0, 100.0)?;
        range("gc_window_ios", self.gc_window_ios, 1, 1_000_000_000)
    }
}

/// Front-end cost of one IO in picoseconds (integer ns would round
/// 1 s / 460,000 = 2,173.9 ns and miss the IOPS limit by 0.004 %).
fn io_ps(max_iops: u64) -> u128 {
    if max_iops == 0 {
        0
    } else {
        PS_PER_S / max_iops as u128
    }
}

pub(crate) struct SsdService {
    read_latency_ns: u64,
    write_latency_ns: u64,
    unit_read_bandwidth_bytes_per_s: u64,
    unit_write_bandwidth_bytes_per_s: u64,
    read_bandwidth_bytes_per_s: u128,
    write_bandwidth_bytes_per_s: u128,
    read_io_ps: u128,
    write_io_ps: u128,
    gc_slowdown: f64,
    /// EWMA weight of the newest arrival.
    gc_alpha: f64,
    /// Recent write share, 0..1.
    write_share: f64,
    /// When the front-end pipe is free, ps.
    front_end_free_ps: u128,
}

impl SsdService {
    fn new(p: &SsdParams) -> Self {
        SsdService {
            read_latency_ns: p.read_latency_ns,
            write_latency_ns: p.write_latency_ns,
            unit_read_bandwidth_bytes_per_s: p.unit_read_bandwidth_bytes_per_s,
            unit_write_bandwidth_bytes_per_s: p.unit_write_bandwidth_bytes_per_s,
            read_bandwidth_bytes_per_s: p.read_bandwidth_bytes_per_s as u128,
            write_bandwidth_bytes_per_s: p.write_bandwidth_bytes_per_s as u128,
            read_io_ps: io_ps(p.max_read_iops),
            write_io_ps: io_ps(p.max_write_iops),
            gc_slowdown: p.gc_slowdown,
            gc_alpha: 1.0 / p.gc_window_ios as f64,
            write_share: 0.0,
            front_end_free_ps: 0,
        }
    }
}

impl Service for SsdService {
    #[inline]
    fn arrive(&mut self, io: &DeviceIo) {
        let wrote = match io.op {
            Op::Read => 0.0,
            Op::Write => 1.0,
            Op::Trim | Op::Flush => return,
        };
        self.write_share += (wrote - self.write_share) * self.gc_alpha;
    }

    #[inline]
    fn complete_ns(&mut self, start_ns: TimeNs, io: &DeviceIo) -> TimeNs {
        let size = io.size_bytes;
        let (unit_ns, front_end_ps) = match io.op {
            Op::Read => (
                self.read_latency_ns + transfer_ns(size, self.unit_read_bandwidth_bytes_per_s),
                self.read_io_ps
                    .max(size as u128 * PS_PER_S / self.read_bandwidth_bytes_per_s),
            ),
            Op::Write => (
                self.write_latency_ns + transfer_ns(size, self.unit_write_bandwidth_bytes_per_s),
                self.write_io_ps
                    .max(size as u128 * PS_PER_S / self.write_bandwidth_bytes_per_s),
            ),
            Op::Trim | Op::Flush => return start_ns + self.write_latency_ns,
        };
        let slowdown = 1.0 + self.gc_slowdown * self.write_share;
        // Rounded, never below the base time (slowdown >= 1).
        let unit_ns = ((unit_ns as f64 * slowdown).round() as u64).max(unit_ns);
        let mut done_ns = start_ns + unit_ns;
        if front_end_ps > 0 {
            // The IO's own slot overlaps its unit time; only the backlog
            // booked before it (slots still running at its start) delays it.
            let begin_ps = self.front_end_free_ps.max(start_ns as u128 * PS_PER_NS);
            self.front_end_free_ps = begin_ps + front_end_ps;
            done_ns = done_ns.max(begin_ps.div_ceil(PS_PER_NS) as u64);
        }
        done_ns
    }
}

/// A flash SSD (see the module documentation).
pub struct SsdModel {
    capacity_bytes: u64,
    engine: Parallel<SsdService>,
}

impl SsdModel {
    /// Builds the model, or says which parameter is wrong.
    pub fn new(params: &SsdParams) -> Result<Self, ParamError> {
        params.validate()?;
        Ok(SsdModel {
            capacity_bytes: params.capacity_bytes,
            engine: Parallel::new(SsdService::new(params), params.parallel_units),
        })
    }

    /// The recent write share `w` (0..1) that drives the GC slowdown.
    pub fn recent_write_share(&self) -> f64 {
        self.engine.service.write_share
    }
}

impl DeviceModel for SsdModel {
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        self.engine.submit(now_ns, io);
    }

    fn next_event_ns(&self) -> Option<TimeNs> {
        self.engine.next_event_ns()
    }

    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        self.engine.advance(now_ns, done);
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn state(&self) -> DeviceState {
        self.engine.state()
    }

    fn in_flight(&self) -> usize {
        self.engine.in_flight()
    }
}
