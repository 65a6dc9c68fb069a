//! Hard disk drive: one actuator serving a queue of commands.
//!
//! Model (every rule is ours unless a source is named in the presets):
//! - **Seek curve** over the distance `d` = |target − head| / capacity
//!   (fraction of the LBA span; zoning is ignored for distance): no seek
//!   within one track; otherwise `t2t + b·√d` up to a knee `k`, then a
//!   straight line to `full_stroke` at `d = 1`, continuous with the same
//!   slope at the knee (Ruemmler & Wilkes' sqrt-then-linear shape). Given
//!   track-to-track `T`, full stroke `F` and average `A`, the line's slope
//!   is `(F − T)/(1 + k)`, `b = 2√k·(F − T)/(1 + k)`, and `k` is solved
//!   (bisection) so that the mean seek over two uniformly random positions
//!   (density 2(1 − d)) equals `A`. The shape can reach averages from
//!   `T + (F − T)/3` (a straight line) to `T + 8/15·(F − T)` (pure √);
//!   others are rejected. Writes add `write_settle_ns` after a seek.
//! - **Rotation** is deterministic: the platter angle is
//!   `(t · rpm + phase) mod 60e9` in units of ns·rpm (one revolution =
//!   60e9), with `phase` drawn once from the seed. A byte's angle is the
//!   fractional part of its track number, so a transfer that ends at byte
//!   `x` leaves the head exactly over `x`: back-to-back sequential media
//!   access needs no rotational wait. A sector the head reaches up to
//!   100 ns late is taken as on time (it absorbs integer rounding).
//! - **Zoned transfer rate** falls linearly over the LBA space from
//!   `outer_rate` (LBA 0) to `inner_rate` (last LBA); bytes per track =
//!   rate × revolution time, so a track always passes in one revolution.
//!   Head and track switches are inside these sustained rates.
//! - **Command overhead** is controller time counted from the command's
//!   arrival: at an idle drive it delays positioning; for a command queued
//!   behind others it overlaps their media work (NCQ), so queued
//!   sequential commands stream.
//! - **Queue**: at most `queue_depth` commands in the drive (queued + in
//!   service); more wait in a host FIFO. When the head frees, `fifo` takes
//!   the oldest command, `sstf` the one with the shortest seek distance
//!   from the head (ties: oldest) — NCQ-like, and it can starve far
//!   requests under constant load, as plain SSTF does.
//! - **Read-ahead**: after a read the head keeps reading the following
//!   bytes into the drive's buffer at media speed, up to `readahead_bytes`
//!   past the last byte delivered, until the head is needed elsewhere. A
//!   read that starts inside that stream completes when its last byte has
//!   come under the head (at once if buffered) plus the command overhead;
//!   a stream that filled its buffer and stopped restarts after a
//!   rotational wait. So QD1 sequential reads run at the zone rate when the
//!   overhead is shorter than a request's transfer.
//! - **Write cache** (`write_cache = true`): a write that fits in the free
//!   part of the `write_cache_bytes` cache completes after the command
//!   overhead and its transfer over the interface (serialised at
//!   `interface_rate`), without the head. Dirty writes are destaged in
//!   arrival order as media writes: when the drive has no queued command,
//!   or first whenever the cache is full or a flush waits. A write that
//!   finds the cache full is written through (queued like a read). A
//!   flush completes once nothing is dirty (at least the overhead after its
//!   arrival) — writes cached after it included, which a real drive need
//!   not wait for (simpler, and only slower); with the cache off it costs
//!   the overhead only. Trim costs the overhead and touches nothing.
//! - **States**: SEEK from the moment the head takes a command until the
//!   transfer starts (overhead not yet elapsed, seek, settle, rotation),
//!   then READ or WRITE; destaging shows SEEK then WRITE; IDLE otherwise
//!   (background read-ahead included).
//! - Offsets beyond the capacity are clamped to it for positioning (the
//!   executor checks ranges).
//!
//! Presets (numbers as commonly published in product manuals; what a
//! manual does not give is marked *ours*):
//! - `sata-7200-2tb`: Seagate Barracuda ST2000DM001 class, 2 TB, 7200 rpm:
//!   8.5 ms average read seek, 9.5 ms write (so 1 ms write settle), 210
//!   MB/s maximum sustained rate (we use 200 → 100 MB/s outer → inner, the
//!   usual 2:1 zoning of a 3.5" drive); track-to-track 0.8 ms and full
//!   stroke 17 ms are typical of the class (*ours*). Command overhead 0.1
//!   ms (*ours*), write cache off (HSWD's setup), 64 MiB cache, SATA 6 Gb/s
//!   (600 MB/s), NCQ depth 32 with SSTF, 2 MiB read-ahead (*ours*).
//! - `sas-15k-600gb`: Seagate Cheetah 15K.7 ST3600057SS, 600 GB, 15,000
//!   rpm: 0.2 ms track-to-track, 3.4 ms average read seek (3.9 ms write),
//!   122–204 MB/s sustained; full stroke 6.6 ms (*ours*, ~2× average),
//!   16 MiB cache, SAS 6 Gb/s, overhead 0.05 ms (*ours*).
//! - `sata-5400-2tb`: a 5400 rpm 2 TB desktop drive (WD Green WD20EARX
//!   class): ~140 → 70 MB/s; seek times are not published for this class,
//!   we use 1 ms / 12 ms / 24 ms (track-to-track / average / full stroke,
//!   as reviews measure) and 1 ms write settle (*ours*); 64 MiB cache,
//!   overhead 0.1 ms.
//!
//! Mean service time of a random 4 KiB read at queue depth 1 is then
//! `average_seek + half a revolution + 4 KiB × E[1/rate] + overhead`,
//! which `tests/models/hdd.rs` checks (for `sata-7200-2tb`:
//! 8.5 + 4.167 + 0.028 + 0.1 = 12.795 ms).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand_core::Rng as _;
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};
use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::{Completion, DeviceIo, Op, ParamError, TimeNs};

use crate::check::{device_params, range, unknown_preset};

const MIB: u64 = 1 << 20;
const MB_PER_S: u64 = 1_000_000;
const NS_PER_MS: u64 = 1_000_000;
/// One revolution in angle units (ns × rpm): the angle advances by `rpm`
/// units per nanosecond whatever the speed, so it stays an exact integer.
const REVOLUTION_UNITS: u128 = 60_000_000_000;
/// A sector the head reaches this late is taken as on time.
const ROTATION_TOLERANCE_NS: u128 = 100;

/// How the drive picks the next command from its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// Oldest first.
    Fifo,
    /// Shortest seek distance from the head first (NCQ-like).
    Sstf,
}

device_params! {
    /// Parameters of a hard disk. Missing keys default to the
    /// `sata-7200-2tb` preset.
    pub struct HddParams / HddOverrides {
        /// Addressable bytes. Default 2 TB (2e12).
        pub capacity_bytes: u64,
        /// Spindle speed, revolutions per minute. Default 7200.
        pub rpm: u32,
        /// Seek to the next track, ns. Default 800,000.
        pub track_to_track_seek_ns: u64,
        /// Mean seek between uniformly random positions, ns. Default
        /// 8,500,000.
        pub average_seek_ns: u64,
        /// Seek across the whole LBA span, ns. Default 17,000,000.
        pub full_stroke_seek_ns: u64,
        /// Extra settling after a seek before a write, ns. Default
        /// 1,000,000.
        pub write_settle_ns: u64,
        /// Media transfer rate at LBA 0 (outer edge), bytes/s. Default
        /// 200 MB/s.
        pub outer_rate_bytes_per_s: u64,
        /// Media transfer rate at the last LBA (inner edge), bytes/s.
        /// Default 100 MB/s.
        pub inner_rate_bytes_per_s: u64,
        /// Controller time per command from its arrival, ns. Default
        /// 100,000.
        pub command_overhead_ns: u64,
        /// On-disk write cache enabled. Default false.
        pub write_cache: bool,
        /// Dirty bytes the write cache holds. Default 64 MiB.
        pub write_cache_bytes: u64,
        /// Host interface rate for cached writes, bytes/s. Default 600 MB/s.
        pub interface_rate_bytes_per_s: u64,
        /// Read-ahead past the last byte read, bytes; 0 disables. Default
        /// 2 MiB.
        pub readahead_bytes: u64,
        /// Commands in the drive (queued + in service), 1 = no NCQ.
        /// Default 32.
        pub queue_depth: u32,
        /// `fifo` or `sstf`. Default `sstf`.
        pub scheduler: Scheduler,
    }
}

impl Default for HddParams {
    fn default() -> Self {
        HddParams::sata_7200_2tb()
    }
}

impl HddParams {
    /// Preset names accepted by [`HddParams::preset`].
    pub const PRESETS: &'static [&'static str] =
        &["sata-7200-2tb", "sas-15k-600gb", "sata-5400-2tb"];

    /// 7200 rpm 2 TB SATA, write cache off: see the module notes.
    pub fn sata_7200_2tb() -> Self {
        HddParams {
            capacity_bytes: 2_000_000_000_000,
            rpm: 7200,
            track_to_track_seek_ns: 800_000,
            average_seek_ns: 8_500_000,
            full_stroke_seek_ns: 17_000_000,
            write_settle_ns: NS_PER_MS,
            outer_rate_bytes_per_s: 200 * MB_PER_S,
            inner_rate_bytes_per_s: 100 * MB_PER_S,
            command_overhead_ns: 100_000,
            write_cache: false,
            write_cache_bytes: 64 * MIB,
            interface_rate_bytes_per_s: 600 * MB_PER_S,
            readahead_bytes: 2 * MIB,
            queue_depth: 32,
            scheduler: Scheduler::Sstf,
        }
    }

    /// 15,000 rpm 600 GB SAS: see the module notes.
    pub fn sas_15k_600gb() -> Self {
        HddParams {
            capacity_bytes: 600_000_000_000,
            rpm: 15_000,
            track_to_track_seek_ns: 200_000,
            average_seek_ns: 3_400_000,
            full_stroke_seek_ns: 6_600_000,
            write_settle_ns: 500_000,
            outer_rate_bytes_per_s: 204 * MB_PER_S,
            inner_rate_bytes_per_s: 122 * MB_PER_S,
            command_overhead_ns: 50_000,
            write_cache: false,
            write_cache_bytes: 16 * MIB,
            interface_rate_bytes_per_s: 600 * MB_PER_S,
            readahead_bytes: 2 * MIB,
            queue_depth: 32,
            scheduler: Scheduler::Sstf,
        }
    }

    /// 5400 rpm 2 TB SATA desktop drive: see the module notes.
    pub fn sata_5400_2tb() -> Self {
        HddParams {
            capacity_bytes: 2_000_000_000_000,
            rpm: 5400,
            track_to_track_seek_ns: NS_PER_MS,
            average_seek_ns: 12 * NS_PER_MS,
            full_stroke_seek_ns: 24 * NS_PER_MS,
            write_settle_ns: NS_PER_MS,
            outer_rate_bytes_per_s: 140 * MB_PER_S,
            inner_rate_bytes_per_s: 70 * MB_PER_S,
            command_overhead_ns: 100_000,
            write_cache: false,
            write_cache_bytes: 64 * MIB,
            interface_rate_bytes_per_s: 600 * MB_PER_S,
            readahead_bytes: 2 * MIB,
            queue_depth: 32,
            scheduler: Scheduler::Sstf,
        }
    }

    /// The preset called `name`, or an error listing the known ones.
    pub fn preset(name: &str) -> Result<Self, ParamError> {
        match name {
            "sata-7200-2tb" => Ok(Self::sata_7200_2tb()),
            "sas-15k-600gb" => Ok(Self::sas_15k_600gb()),
            "sata-5400-2tb" => Ok(Self::sata_5400_2tb()),
            _ => Err(unknown_preset(name, Self::PRESETS)),
        }
    }

    /// Checks every parameter; the error names the parameter, its value
    /// and the allowed range.
    pub fn validate(&self) -> Result<(), ParamError> {
        const RATE_MIN: u64 = 100_000;
        const RATE_MAX: u64 = 100_000_000_000;
        const SEEK_MAX_NS: u64 = 1_000_000_000;
        range("capacity_bytes", self.capacity_bytes, MIB, 1 << 50)?;
        range("rpm", self.rpm, 3_600, 20_000)?;
        range(
            "full_stroke_seek_ns",
            self.full_stroke_seek_ns,
            3,
            SEEK_MAX_NS,
        )?;
        range(
            "track_to_track_seek_ns",
            self.track_to_track_seek_ns,
            1,
            self.full_stroke_seek_ns - 2,
        )?;
        let (low, high) = self.average_seek_bounds_ns();
        if !(low..=high).contains(&(self.average_seek_ns as f64)) {
            return Err(ParamError::new(
                "average_seek_ns",
                self.average_seek_ns,
                format!(
                    "{} ..= {} (what the sqrt-then-linear seek curve can fit with \
                     `track_to_track_seek_ns` = {} and `full_stroke_seek_ns` = {})",
                    low.ceil() as u64,
                    high.floor() as u64,
                    self.track_to_track_seek_ns,
                    self.full_stroke_seek_ns,
                ),
            ));
        }
        range("write_settle_ns", self.write_settle_ns, 0, SEEK_MAX_NS)?;
        range(
            "outer_rate_bytes_per_s",
            self.outer_rate_bytes_per_s,
            RATE_MIN,
            RATE_MAX,
        )?;
        range(
            "inner_rate_bytes_per_s",
            self.inner_rate_bytes_per_s,
            RATE_MIN,
            self.outer_rate_bytes_per_s,
        )?;
        range(
            "command_overhead_ns",
            self.command_overhead_ns,
            0,
            SEEK_MAX_NS,
        )?;
        range("write_cache_bytes", self.write_cache_bytes, 0, 1 << 40)?;
        range(
            "interface_rate_bytes_per_s",
            self.interface_rate_bytes_per_s,
            RATE_MIN,
            RATE_MAX,
        )?;
        range("readahead_bytes", self.readahead_bytes, 0, 1 << 30)?;
        range("queue_depth", self.queue_depth, 1, 256)
    }

    /// The averages the seek curve can reach with these end points.
    fn average_seek_bounds_ns(&self) -> (f64, f64) {
        let t = self.track_to_track_seek_ns as f64;
        let f = self.full_stroke_seek_ns as f64;
        (t + (f - t) / 3.0, t + (f - t) * 8.0 / 15.0)
    }
}

/// The sqrt-then-linear seek curve, in ns over the distance fraction.
#[derive(Clone, Copy, Debug)]
struct SeekCurve {
    t2t_ns: f64,
    knee: f64,
    /// Coefficient of √d below the knee.
    sqrt_ns: f64,
    /// Value at the knee and slope after it.
    knee_ns: f64,
    slope_ns: f64,
}

impl SeekCurve {
    fn with_knee(t2t_ns: f64, full_ns: f64, knee: f64) -> SeekCurve {
        let span = full_ns - t2t_ns;
        let sqrt_ns = 2.0 * knee.sqrt() * span / (1.0 + knee);
        SeekCurve {
            t2t_ns,
            knee,
            sqrt_ns,
            knee_ns: t2t_ns + sqrt_ns * knee.sqrt(),
            slope_ns: span / (1.0 + knee),
        }
    }

    /// Fits the knee so that the mean over uniform random pairs is
    /// `average_ns` (the mean grows with the knee, so bisection works).
    fn fit(t2t_ns: f64, average_ns: f64, full_ns: f64) -> SeekCurve {
        let (mut low, mut high) = (0.0f64, 1.0f64);
        for _ in 0..100 {
            let mid = 0.5 * (low + high);
            if SeekCurve::with_knee(t2t_ns, full_ns, mid).mean_ns() < average_ns {
                low = mid;
            } else {
                high = mid;
            }
        }
        SeekCurve::with_knee(t2t_ns, full_ns, 0.5 * (low + high))
    }

    /// Seek time at distance fraction `d` in (0, 1].
    fn at(&self, d: f64) -> f64 {
        if d <= self.knee {
            self.t2t_ns + self.sqrt_ns * d.sqrt()
        } else {
            self.knee_ns + self.slope_ns * (d - self.knee)
        }
    }

    /// Mean of `at(|X − Y|)` for X, Y uniform on [0, 1]: the distance has
    /// density 2(1 − d); integrated in closed form piece by piece.
    fn mean_ns(&self) -> f64 {
        let k = self.knee;
        let e = 1.0 - k;
        let sqrt_part = self.t2t_ns * (2.0 * k - k * k)
            + self.sqrt_ns * (4.0 / 3.0 * k.powf(1.5) - 4.0 / 5.0 * k.powf(2.5));
        let line_part = self.knee_ns * e * e + self.slope_ns * e * e * e / 3.0;
        sqrt_part + line_part
    }
}

/// Where bytes are: tracks, angles and transfer times over the zoned
/// surface, and the seek curve.
#[derive(Clone, Debug)]
struct Geometry {
    capacity_bytes: u64,
    rpm: u128,
    revolution_ns: f64,
    /// Bytes per track at LBA 0, and its change per byte of LBA.
    outer_track_bytes: f64,
    track_bytes_per_byte: f64,
    outer_rate: f64,
    rate_per_byte: f64,
    seek: SeekCurve,
    /// Platter angle at t = 0, in angle units.
    phase_units: u128,
}

impl Geometry {
    fn new(p: &HddParams, seed: u64) -> Geometry {
        let revolution_ns = 60e9 / p.rpm as f64;
        let revolution_s = 60.0 / p.rpm as f64;
        let capacity = p.capacity_bytes as f64;
        let outer_rate = p.outer_rate_bytes_per_s as f64;
        let inner_rate = p.inner_rate_bytes_per_s as f64;
        // The seed only turns the platter: splitmix-style scrambling so
        // that seeds 0, 1, 2 start at unrelated angles.
        let mut rng =
            Pcg64Mcg::new((seed as u128) << 64 | (seed ^ 0x9E37_79B9_7F4A_7C15) as u128 | 1);
        let phase_units = rng.next_u64() as u128 % REVOLUTION_UNITS;
        Geometry {
            capacity_bytes: p.capacity_bytes,
            rpm: p.rpm as u128,
            revolution_ns,
            outer_track_bytes: outer_rate * revolution_s,
            track_bytes_per_byte: (inner_rate - outer_rate) * revolution_s / capacity,
            outer_rate,
            rate_per_byte: (inner_rate - outer_rate) / capacity,
            seek: SeekCurve::fit(
                p.track_to_track_seek_ns as f64,
                p.average_seek_ns as f64,
                p.full_stroke_seek_ns as f64,
            ),
            phase_units,
        }
    }

    /// Track number (fractional) of byte `x`: ∫ dx / track_bytes(x).
    fn tracks(&self, x: u64) -> f64 {
        let x = x as f64;
        let g = self.track_bytes_per_byte;
        if g.abs() < 1e-300 {
            x / self.outer_track_bytes
        } else {
            (g * x / self.outer_track_bytes).ln_1p() / g
        }
    }

    fn rate_at(&self, x: u64) -> f64 {
        self.outer_rate + self.rate_per_byte * x as f64
    }

    /// Media time to pass the bytes from `from` to `to` under the head:
    /// one revolution per track.
    fn media_ns(&self, from: u64, to: u64) -> u64 {
        if to <= from {
            return 0;
        }
        let ns = ((self.tracks(to) - self.tracks(from)) * self.revolution_ns).round() as u64;
        ns.max(1)
    }

    fn seek_ns(&self, from: u64, to: u64) -> u64 {
        if (self.tracks(to) - self.tracks(from)).abs() < 1.0 {
            return 0;
        }
        let d = from.abs_diff(to) as f64 / self.capacity_bytes as f64;
        self.seek.at(d).round() as u64
    }

    /// Nanoseconds from `t_ns` until byte `x` comes under the head.
    fn rotation_ns(&self, t_ns: TimeNs, x: u64) -> u64 {
        let platter = (t_ns as u128 * self.rpm + self.phase_units) % REVOLUTION_UNITS;
        let target = (self.tracks(x).fract() * REVOLUTION_UNITS as f64) as u128 % REVOLUTION_UNITS;
        let wait = (target + REVOLUTION_UNITS - platter) % REVOLUTION_UNITS;
        if wait + ROTATION_TOLERANCE_NS * self.rpm >= REVOLUTION_UNITS {
            0
        } else {
            wait.div_ceil(self.rpm) as u64
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Job {
    seq: u64,
    tag: u64,
    op: Op,
    /// Clamped to the capacity.
    offset: u64,
    end: u64,
    arrival_ns: TimeNs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Positioning,
    Transfer,
}

/// The command the head is working on.
#[derive(Clone, Copy, Debug)]
struct Active {
    job: Job,
    /// False for the destage of a cached write (no host completion).
    host: bool,
    /// Served from the read-ahead stream.
    streamed: bool,
    phase: Phase,
    transfer_start_ns: TimeNs,
    done_ns: TimeNs,
}

impl Active {
    fn phase_end_ns(&self) -> TimeNs {
        match self.phase {
            Phase::Positioning => self.transfer_start_ns,
            Phase::Transfer => self.done_ns,
        }
    }
}

/// Background read-ahead: the media passes `anchor_offset` at `anchor_ns`
/// and streams on until `limit`; bytes from `buffer_start` on are (or will
/// be) in the buffer.
#[derive(Clone, Copy, Debug)]
struct Stream {
    anchor_offset: u64,
    anchor_ns: TimeNs,
    limit: u64,
    buffer_start: u64,
}

impl Stream {
    /// When byte `x` has passed under the head. Bytes before the anchor
    /// were read before the stream (re)started: they are buffered already.
    fn time_at(&self, geo: &Geometry, x: u64) -> TimeNs {
        if x <= self.anchor_offset {
            0
        } else {
            self.anchor_ns + geo.media_ns(self.anchor_offset, x)
        }
    }

    /// Where the head is at `t_ns` (local rate; used for seek distances).
    fn position(&self, geo: &Geometry, t_ns: TimeNs) -> u64 {
        if t_ns <= self.anchor_ns {
            return self.anchor_offset;
        }
        let moved = geo.rate_at(self.anchor_offset) * (t_ns - self.anchor_ns) as f64 / 1e9;
        (self.anchor_offset + moved as u64).min(self.limit)
    }
}

/// A hard disk drive (see the module documentation).
pub struct HddModel {
    geo: Geometry,
    overhead_ns: u64,
    write_settle_ns: u64,
    write_cache: bool,
    write_cache_bytes: u64,
    interface_rate_bytes_per_s: u64,
    readahead_bytes: u64,
    queue_depth: usize,
    scheduler: Scheduler,

    now_ns: TimeNs,
    next_seq: u64,
    in_flight: usize,
    /// Commands in the drive, oldest first.
    device_queue: Vec<Job>,
    /// Commands beyond the queue depth, waiting in the host.
    host_queue: VecDeque<Job>,
    /// Cached writes not yet on the media, oldest first.
    dirty: VecDeque<Job>,
    /// Bytes of cached writes not yet on the media (including one being
    /// destaged).
    dirty_bytes: u64,
    /// Flushes waiting for the cache to be clean.
    flushes: Vec<Job>,
    /// Completions that do not need the head (cached writes, trims,
    /// flushes): (done, seq, tag), earliest first.
    immediate: BinaryHeap<Reverse<(TimeNs, u64, u64)>>,
    interface_free_ns: TimeNs,
    active: Option<Active>,
    /// Where the head is when no stream runs: the end of the last transfer.
    head_offset: u64,
    stream: Option<Stream>,
    /// Completed, not yet reported (see `Parallel::ready`): (done, seq,
    /// tag). A flush released by a destage can complete at the same instant
    /// as, yet be older than, an IO already listed: `advance` sorts before
    /// reporting so ties stay in submission order.
    ready: VecDeque<(TimeNs, u64, u64)>,
}

impl HddModel {
    /// Builds the model, or says which parameter is wrong. The seed sets
    /// the platter's initial angle.
    pub fn new(params: &HddParams, seed: u64) -> Result<Self, ParamError> {
        params.validate()?;
        Ok(HddModel {
            geo: Geometry::new(params, seed),
            overhead_ns: params.command_overhead_ns,
            write_settle_ns: params.write_settle_ns,
            write_cache: params.write_cache,
            write_cache_bytes: params.write_cache_bytes,
            interface_rate_bytes_per_s: params.interface_rate_bytes_per_s,
            readahead_bytes: params.readahead_bytes,
            queue_depth: params.queue_depth as usize,
            scheduler: params.scheduler,
            now_ns: 0,
            next_seq: 0,
            in_flight: 0,
            device_queue: Vec::with_capacity(params.queue_depth as usize),
            host_queue: VecDeque::new(),
            dirty: VecDeque::new(),
            dirty_bytes: 0,
            flushes: Vec::new(),
            immediate: BinaryHeap::new(),
            interface_free_ns: 0,
            active: None,
            head_offset: 0,
            stream: None,
            ready: VecDeque::new(),
        })
    }

    /// The fitted seek time for a distance fraction `d` of the LBA span
    /// (0 < d ≤ 1), ns. For calibration reports and tests.
    pub fn seek_curve_ns(&self, d: f64) -> f64 {
        self.geo.seek.at(d)
    }

    /// The knee of the fitted seek curve (distance fraction).
    pub fn seek_knee(&self) -> f64 {
        self.geo.seek.knee
    }

    /// Media transfer rate at byte `offset_bytes`, bytes/s.
    pub fn rate_bytes_per_s_at(&self, offset_bytes: u64) -> f64 {
        self.geo.rate_at(offset_bytes.min(self.geo.capacity_bytes))
    }

    /// One revolution, ns.
    pub fn revolution_ns(&self) -> f64 {
        self.geo.revolution_ns
    }

    fn head_position(&self, t_ns: TimeNs) -> u64 {
        match &self.stream {
            Some(s) => s.position(&self.geo, t_ns),
            None => self.head_offset,
        }
    }

    fn push_immediate(&mut self, done_ns: TimeNs, job: &Job) {
        self.immediate.push(Reverse((done_ns, job.seq, job.tag)));
    }

    fn active_host_commands(&self) -> usize {
        self.active.is_some_and(|a| a.host) as usize
    }

    /// Moves commands from the host queue into the drive while it has room.
    fn refill(&mut self) {
        while self.device_queue.len() + self.active_host_commands() < self.queue_depth {
            match self.host_queue.pop_front() {
                Some(job) => self.device_queue.push(job),
                None => break,
            }
        }
    }

    /// Processes every event at or before `now_ns`, in time order (ties by
    /// submission order).
    fn settle(&mut self, now_ns: TimeNs) {
        loop {
            let head = self
                .active
                .map(|a| (a.phase_end_ns(), a.job.seq))
                .filter(|h| h.0 <= now_ns);
            let other = self
                .immediate
                .peek()
                .map(|Reverse((t, seq, _))| (*t, *seq))
                .filter(|o| o.0 <= now_ns);
            match (head, other) {
                (None, None) => break,
                (Some(h), Some(o)) if o < h => self.pop_immediate(),
                (Some(_), _) => self.head_event(),
                (None, Some(_)) => self.pop_immediate(),
            }
        }
    }

    fn pop_immediate(&mut self) {
        if let Some(Reverse(entry)) = self.immediate.pop() {
            self.ready.push_back(entry);
        }
    }

    fn head_event(&mut self) {
        let mut active = self.active.expect("head event without a command");
        match active.phase {
            Phase::Positioning => {
                active.phase = Phase::Transfer;
                self.active = Some(active);
            }
            Phase::Transfer => {
                self.active = None;
                self.finish(&active);
                self.refill();
                self.schedule(active.done_ns);
            }
        }
    }

    /// Bookkeeping when the head finishes a command at `active.done_ns`.
    fn finish(&mut self, active: &Active) {
        let job = &active.job;
        let done_ns = active.done_ns;
        if active.host {
            self.ready.push_back((done_ns, job.seq, job.tag));
        } else {
            self.dirty_bytes -= job.end - job.offset;
        }
        self.head_offset = job.end;
        self.stream = if job.op == Op::Read {
            let limit = (job.end + self.readahead_bytes).min(self.geo.capacity_bytes);
            match (active.streamed, self.stream) {
                (true, Some(mut s)) => {
                    // Keep prefetching past what was just delivered; a
                    // stream that had filled its buffer and stopped has to
                    // wait for its next byte to come round.
                    if limit > s.limit && s.time_at(&self.geo, s.limit) <= done_ns {
                        s.anchor_offset = s.limit;
                        s.anchor_ns = done_ns + self.geo.rotation_ns(done_ns, s.limit);
                    }
                    s.limit = s.limit.max(limit);
                    s.buffer_start = job.end;
                    Some(s)
                }
                _ => Some(Stream {
                    anchor_offset: job.end,
                    anchor_ns: done_ns,
                    limit,
                    buffer_start: job.end,
                }),
            }
        } else {
            None
        };
        if self.dirty_bytes == 0 && !self.flushes.is_empty() {
            // Taken out while completing them, then given back (empty) so
            // its allocation is reused.
            let mut flushes = std::mem::take(&mut self.flushes);
            for flush in flushes.drain(..) {
                let flush_done_ns = done_ns.max(flush.arrival_ns + self.overhead_ns);
                self.push_immediate(flush_done_ns, &flush);
            }
            self.flushes = flushes;
        }
    }

    /// The head is free at `t_ns`: start the next piece of work, if any.
    fn schedule(&mut self, t_ns: TimeNs) {
        if self.active.is_some() {
            return;
        }
        let cache_pressed = !self.flushes.is_empty() || self.dirty_bytes >= self.write_cache_bytes;
        if cache_pressed && let Some(job) = self.dirty.pop_front() {
            self.start_media(t_ns, job, false);
        } else if let Some(job) = self.pick_command(t_ns) {
            if job.op == Op::Read
                && let Some(s) = self.stream
                && s.buffer_start <= job.offset
                && job.offset <= s.limit
            {
                self.start_streamed_read(t_ns, job, s);
            } else {
                self.start_media(t_ns, job, true);
            }
        } else if let Some(job) = self.dirty.pop_front() {
            self.start_media(t_ns, job, false);
        }
    }

    fn pick_command(&mut self, t_ns: TimeNs) -> Option<Job> {
        if self.device_queue.is_empty() {
            return None;
        }
        let index = match self.scheduler {
            Scheduler::Fifo => 0,
            Scheduler::Sstf => {
                let head = self.head_position(t_ns);
                // The queue is in arrival order, so the first minimum is
                // the oldest among equals.
                let mut best = 0;
                let mut best_distance = u64::MAX;
                for (i, job) in self.device_queue.iter().enumerate() {
                    let distance = job.offset.abs_diff(head);
                    if distance < best_distance {
                        best = i;
                        best_distance = distance;
                    }
                }
                best
            }
        };
        Some(self.device_queue.remove(index))
    }

    /// A read inside the read-ahead stream.
    fn start_streamed_read(&mut self, t_ns: TimeNs, job: Job, mut s: Stream) {
        let ready_ns = t_ns.max(job.arrival_ns + self.overhead_ns);
        let stopped_ns = s.time_at(&self.geo, s.limit);
        let (transfer_start_ns, done_ns) = if job.end <= s.limit || stopped_ns > t_ns {
            // Still streaming (or already buffered): keep the stream going
            // up to this read's end.
            s.limit = s.limit.max(job.end);
            (t_ns, ready_ns.max(s.time_at(&self.geo, job.end)))
        } else {
            // The stream filled its buffer and stopped: wait for the rest
            // to come round, then read it.
            let start_ns = ready_ns + self.geo.rotation_ns(ready_ns, s.limit);
            let done_ns = start_ns + self.geo.media_ns(s.limit, job.end);
            s.anchor_offset = s.limit;
            s.anchor_ns = start_ns;
            s.limit = job.end;
            (start_ns, done_ns)
        };
        self.stream = Some(s);
        self.begin(t_ns, job, true, true, transfer_start_ns, done_ns);
    }

    /// A media access: overhead (host commands), seek (+ settle for
    /// writes), rotation, transfer.
    fn start_media(&mut self, t_ns: TimeNs, job: Job, host: bool) {
        let from = self.head_position(t_ns);
        self.stream = None;
        let ready_ns = if host {
            t_ns.max(job.arrival_ns + self.overhead_ns)
        } else {
            t_ns
        };
        let target = job.offset.min(self.geo.capacity_bytes - 1);
        let mut seek_ns = self.geo.seek_ns(from, target);
        if seek_ns > 0 && job.op == Op::Write {
            seek_ns += self.write_settle_ns;
        }
        let on_track_ns = ready_ns + seek_ns;
        let transfer_start_ns = on_track_ns + self.geo.rotation_ns(on_track_ns, target);
        let done_ns = transfer_start_ns + self.geo.media_ns(job.offset, job.end);
        self.begin(t_ns, job, host, false, transfer_start_ns, done_ns);
    }

    fn begin(
        &mut self,
        t_ns: TimeNs,
        job: Job,
        host: bool,
        streamed: bool,
        transfer_start_ns: TimeNs,
        done_ns: TimeNs,
    ) {
        let phase = if transfer_start_ns > t_ns {
            Phase::Positioning
        } else {
            Phase::Transfer
        };
        self.active = Some(Active {
            job,
            host,
            streamed,
            phase,
            transfer_start_ns,
            done_ns,
        });
    }
}

impl DeviceModel for HddModel {
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        let capacity = self.geo.capacity_bytes;
        let offset = io.offset_bytes.min(capacity);
        let job = Job {
            seq: self.next_seq,
            tag: io.tag,
            op: io.op,
            offset,
            end: io.end_bytes().min(capacity),
            arrival_ns: now_ns,
        };
        self.next_seq += 1;
        self.in_flight += 1;
        let size_bytes = job.end - job.offset;
        match io.op {
            Op::Trim => self.push_immediate(now_ns + self.overhead_ns, &job),
            Op::Flush if self.dirty_bytes == 0 => {
                self.push_immediate(now_ns + self.overhead_ns, &job)
            }
            Op::Flush => self.flushes.push(job),
            Op::Write
                if self.write_cache && self.dirty_bytes + size_bytes <= self.write_cache_bytes =>
            {
                let start_ns = (now_ns + self.overhead_ns).max(self.interface_free_ns);
                let done_ns = start_ns
                    + (size_bytes * crate::check::NS_PER_S)
                        .div_ceil(self.interface_rate_bytes_per_s);
                self.interface_free_ns = done_ns;
                self.push_immediate(done_ns, &job);
                if size_bytes > 0 {
                    self.dirty.push_back(job);
                    self.dirty_bytes += size_bytes;
                }
            }
            Op::Read | Op::Write => {
                if self.device_queue.len() + self.active_host_commands() < self.queue_depth {
                    self.device_queue.push(job);
                } else {
                    self.host_queue.push_back(job);
                }
            }
        }
        self.schedule(now_ns);
    }

    fn next_event_ns(&self) -> Option<TimeNs> {
        if let Some(done_ns) = self.ready.iter().map(|r| r.0).min() {
            return Some(done_ns);
        }
        let head = self.active.map(|a| a.phase_end_ns());
        let other = self.immediate.peek().map(|Reverse((t, _, _))| *t);
        match (head, other) {
            (Some(h), Some(o)) => Some(h.min(o)),
            (h, o) => h.or(o),
        }
    }

    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        self.in_flight -= self.ready.len();
        // Almost always 0 or 1 entries, already in order.
        self.ready.make_contiguous().sort_unstable();
        done.extend(
            self.ready
                .drain(..)
                .map(|(done_ns, _, tag)| Completion { tag, done_ns }),
        );
    }

    fn capacity_bytes(&self) -> u64 {
        self.geo.capacity_bytes
    }

    fn state(&self) -> DeviceState {
        match self.active {
            None => DeviceState::Idle,
            Some(a) if a.phase == Phase::Positioning => DeviceState::Seek,
            Some(a) if a.job.op == Op::Read => DeviceState::Read,
            Some(_) => DeviceState::Write,
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}
