//! ATSMF: automated tiering between fast memory and slow flash
//! (spec/atsmf.md, seed 000), as one sans-IO policy over two devices:
//! device 0 is the memory tier, device 1 the flash LUN.
//!
//! - **Tiering manager** (runs at every period boundary, a timer): the data
//!   collector's per-sub-LUN IO counts go through the workload analyzer
//!   ([`analyzer`]: extraction, tracking, prediction); each concentration
//!   with sub-LUNs not yet in memory is judged with the paper's X/Y rule
//!   from response times this policy measured itself; the mover queues
//!   promotions (plus the sub-LUNs a drifting concentration will reach) and
//!   demotions of sub-LUNs that left every concentration.
//! - **Tiering driver** (every host IO): the tiering table says where each
//!   sub-LUN lives; the dispatcher sends IOs there. While a sub-LUN moves,
//!   writes land in the memory buffer, reads of buffered sectors are served
//!   from it, the rest from the move's source; when the copy ends the
//!   buffer is synced to the destination, then the table flips.
//! - **Moves are device IOs**: chunked reads from the source and writes to
//!   the destination, a few chunks in flight, competing with host IO — so
//!   `AvefWithMg` (flash response time while a move runs) is measured, not
//!   assumed.
//!
//! Memory layout on device 0: sub-LUN slots of `sub_lun_size_bytes` from
//! offset 0, then the move buffer (`buffer_bytes`).
//!
//! Host IOs must be whole 512-byte sectors (`required_alignment_bytes`):
//! the move buffer tracks sectors, and its sync copies whole sectors.
//!
//! Trims go where the sub-LUN's data is (flash or its memory slot) and
//! count as writes in flight, so a move starts copying only after they
//! landed; a trim of a sub-LUN that is moving completes at once, dropped
//! (a hole under the copy would make the copied bytes depend on timing).
//! Flushes go to flash. Neither carries data. `drain` cancels queued
//! promotions, decides no new ones, and demotes every memory-resident
//! sub-LUN through the normal move machinery (a promotion running finishes,
//! then is demoted). `locate` reports where a read would go now: the slot
//! (memory) or flash by the tiering table; while a sub-LUN moves, buffered
//! sectors in the move buffer (memory) and the others at the move's source.

pub mod analyzer;

use std::collections::{BTreeSet, VecDeque};
use std::fmt::Write as _;

use serde::Deserialize;
use tierlab_core::policy::{BufRef, Extent, HostIo, IoError, OpenError, Outbox, Policy, Stores};
use tierlab_core::{DeviceIo, NS_PER_S, Op, ParamError, TimeNs};

use crate::cache::ByteCount;
use crate::extent::push_extent;
use analyzer::{ExtractParams, PredictionTable, Tracker};

pub const MEMORY_DEVICE: usize = 0;
pub const FLASH_DEVICE: usize = 1;
/// Tier indices in `Outbox::complete`.
pub const TIER_MEMORY: u16 = 0;
pub const TIER_FLASH: u16 = 1;

const PERIOD_TIMER: u64 = 1;
/// Buffer tracking granularity: a sector, so sector-aligned IOs are exact.
const SECTOR_BYTES: u64 = 512;

/// `[policy]` keys of `kind = "atsmf"` (docs/atsmf.md).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtsmfParams {
    /// Sub-LUN size (paper: 1 GiB).
    #[serde(default = "d_sub_lun")]
    pub sub_lun_size_bytes: ByteCount,
    /// Collector interval (paper: 24 s = 20 s of tracing + 4 s of analysis).
    #[serde(default = "d_period")]
    pub period_s: f64,
    /// IOs are counted during the first `collect_s` of each period.
    #[serde(default = "d_collect")]
    pub collect_s: f64,
    /// Step 2's N.
    #[serde(default = "d_top_n")]
    pub top_n: usize,
    /// Step 4's M (a share, 0..1).
    #[serde(default = "d_share_m")]
    pub share_m: f64,
    /// The prediction table forgets concentrations that ended longer ago
    /// (paper: "e.g. half a day"); 0 keeps all.
    #[serde(default = "d_history")]
    pub history_s: f64,
    /// A fixed prediction table, `B(A) − A` in periods for A = 1, 2, ...
    /// (e.g. Table 2: [0.73, 1.37, 1.83, 2.37, 3.0]); empty = learn online.
    #[serde(default)]
    pub prediction_rest_periods: Vec<f64>,
    /// Seed the prediction table from the first `warmup_s` of the run:
    /// analyse and learn, but move nothing.
    #[serde(default)]
    pub warmup_s: f64,
    /// Values used until enough completions were measured.
    #[serde(default = "d_avef")]
    pub initial_avef_us: f64,
    #[serde(default = "d_avef_mg")]
    pub initial_avef_with_mg_us: f64,
    #[serde(default = "d_avem")]
    pub initial_avem_us: f64,
    /// Until a move has been timed: this, or (when not given) the
    /// sub-LUN size at `initial_move_bytes_per_s`.
    #[serde(default)]
    pub initial_ave_mg_time_s: Option<f64>,
    #[serde(default = "d_move_rate")]
    pub initial_move_bytes_per_s: f64,
    /// Completions needed before a measured mean replaces its initial value.
    #[serde(default = "d_min_samples")]
    pub min_samples: u64,
    /// Response-time means are over the last this many periods.
    #[serde(default = "d_stats_window")]
    pub stats_window_periods: u32,
    /// Size of each copy IO of a move.
    #[serde(default = "d_chunk")]
    pub move_chunk_bytes: ByteCount,
    /// Copy chunks in flight per move.
    #[serde(default = "d_move_depth")]
    pub move_iodepth: u32,
    /// Sub-LUN moves running at once.
    #[serde(default = "d_moves")]
    pub max_concurrent_moves: u32,
    /// Also promote the sub-LUNs a drifting concentration will reach
    /// within its predicted remaining duration.
    #[serde(default = "d_true")]
    pub prefetch_moving: bool,
    /// A memory sub-LUN outside every concentration (and prefetch range)
    /// for this many periods is demoted.
    #[serde(default = "d_demote_after")]
    pub demote_after_periods: u32,
    /// Demotion is held back while `AvefWithMg > demote_hold_ratio × Avef`,
    /// with `AvefWithMg` measured over the period that just ended (no move
    /// in it: no hold).
    #[serde(default = "d_hold_ratio")]
    pub demote_hold_ratio: f64,
    /// Optional cap on the memory used for sub-LUNs (beyond the paper,
    /// which let memory grow). When a promotion does not fit, idle memory
    /// sub-LUNs are demoted coldest first (ignoring the hold); a
    /// concentration that still does not fit is deferred (`defer_cap`).
    #[serde(default)]
    pub memory_cap_bytes: Option<ByteCount>,
    /// Memory buffer for writes during moves (placed after the slots).
    #[serde(default = "d_buffer")]
    pub buffer_bytes: ByteCount,
    /// A host FLUSH writes every sector acknowledged in memory back to
    /// flash before it completes (memory is volatile: without this a
    /// FLUSH does not make memory-resident writes durable). Costs nothing
    /// on a workload without FLUSHes (every trace the paper replays);
    /// docs/crash-consistency.md measures it with them.
    #[serde(default = "d_true")]
    pub flush_writes_back: bool,
    /// Keep the tiering table (which sub-LUNs are in memory) in the last
    /// 8 KiB of the flash device, so a restart re-promotes them (warm);
    /// the LUN is that much smaller (docs/crash-consistency.md).
    #[serde(default)]
    pub persistent: bool,
}

/// The persistent tiering table: two 4 KiB copies at the end of the flash
/// device (`slot_meta`'s page format, magic `ATST`): fields sub-LUN
/// bytes, LUN bytes, memory slots, count, then the sub-LUN numbers, then
/// the memory device's volume id (two u64; 0, 0 or no room after the list:
/// none recorded — a table written before ids were).
const TABLE_MAGIC: &[u8; 4] = b"ATST";
const TABLE_BYTES: u64 = 2 * crate::slot_meta::PAGE as u64;
const TABLE_FIELDS: usize = 4;
/// u64 fields a table page holds.
const TABLE_PAGE_FIELDS: usize = (crate::slot_meta::PAGE - 32) / 8;
/// Sub-LUNs one table page lists (with room for the id after them).
const TABLE_MAX_SUBS: usize = TABLE_PAGE_FIELDS - TABLE_FIELDS - crate::binding::ID_FIELDS;

/// The table records the memory device's volume id: the open copies the
/// listed sub-LUNs from flash into it, so a memory device of another
/// volume is refused rather than overwritten. Memory is scratch (flash
/// holds every flushed byte), so a new memory file is adopted
/// (docs/crash-consistency.md, "Binding").
const MEMORY_BINDING: crate::binding::Bound = crate::binding::Bound {
    metadata_device: FLASH_DEVICE,
    metadata: "ATSMF's tiering table",
    owner: "tiering table",
    metadata_role: "flash device",
    device: MEMORY_DEVICE,
    role: "memory device",
    bond: crate::binding::Bond::Scratch,
    advice: Some(
        "use the memory device this table was made for, or a new memory file (the memory-resident \
         sub-LUNs are copied into it from flash at open), or set persistent = false to start cold",
    ),
};

/// The LUN on a flash device of `flash_bytes`: all of it, or with
/// `persistent` what the tiering table leaves (4 KiB-aligned).
pub fn lun_bytes(p: &AtsmfParams, flash_bytes: u64) -> u64 {
    if p.persistent {
        flash_bytes.saturating_sub(TABLE_BYTES) / 4096 * 4096
    } else {
        flash_bytes
    }
}

/// The tiering table's state (`persistent = true`).
struct Table {
    /// Where copy 0 starts on the flash device.
    offset_bytes: u64,
    /// The newest version's sequence and copy.
    seq: u64,
    copy: u8,
    /// A write in flight, and whether the table changed since it began.
    writing: bool,
    changed: bool,
    /// `drain` wrote the placement it found: no later change is recorded
    /// (the restart re-promotes what was in memory before the stop);
    /// `last` is that placement while an earlier write is in flight.
    frozen: bool,
    last: Option<Vec<u32>>,
    /// The memory device's volume id, written into every table (None: not
    /// known — RAM, a simulation).
    memory_id: Option<tierlab_core::volume::VolumeId>,
    writes: u64,
    truncated: u64,
    warm_sub_luns: u64,
    warm_bytes: u64,
}

fn d_sub_lun() -> ByteCount {
    ByteCount(1 << 30)
}
fn d_period() -> f64 {
    24.0
}
fn d_collect() -> f64 {
    20.0
}
fn d_top_n() -> usize {
    30
}
fn d_share_m() -> f64 {
    0.6
}
fn d_history() -> f64 {
    43_200.0
}
fn d_avef() -> f64 {
    80.0
}
fn d_avef_mg() -> f64 {
    120.0
}
fn d_avem() -> f64 {
    10.0
}
fn d_move_rate() -> f64 {
    1e9
}
fn d_min_samples() -> u64 {
    100
}
fn d_stats_window() -> u32 {
    10
}
fn d_chunk() -> ByteCount {
    ByteCount(1 << 20)
}
fn d_move_depth() -> u32 {
    4
}
fn d_moves() -> u32 {
    1
}
fn d_true() -> bool {
    true
}
fn d_demote_after() -> u32 {
    1
}
fn d_hold_ratio() -> f64 {
    1.5
}
fn d_buffer() -> ByteCount {
    ByteCount(1 << 30)
}

impl Default for AtsmfParams {
    fn default() -> Self {
        toml_defaults()
    }
}

fn toml_defaults() -> AtsmfParams {
    AtsmfParams::deserialize(serde::de::value::MapDeserializer::<
        std::iter::Empty<(String, String)>,
        serde::de::value::Error,
    >::new(std::iter::empty()))
    .expect("every AtsmfParams key has a default")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Flash,
    Memory,
    Promoting,
    Demoting,
}

#[derive(Clone, Copy, Debug)]
struct SubLun {
    place: Place,
    /// Memory slot while not on flash.
    slot: u32,
    /// Last period it was in a concentration or a prefetch range.
    last_hot_period: u64,
    /// Index into `moves` while moving.
    mv: u32,
    /// Waiting in the mover's queue, and to go where.
    queued: Option<Dir>,
    /// Host writes and trims in flight to its current place: a move copies
    /// only once they have landed (later writes go to the move buffer).
    host_writes_in_flight: u32,
    /// Its part of a FLUSH write-back round (memory sub-LUNs only).
    flush_back: FlushBack,
}

/// A memory sub-LUN's part of a FLUSH write-back round. Its dirty sectors
/// are read from the slot only when no host write to it is in flight, and
/// new host writes wait until those reads have landed, so a read never
/// races a write of the same bytes (the slot may be rewritten as soon as
/// the reads have landed in staging).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlushBack {
    Idle,
    /// Waiting for its host writes in flight to land.
    Draining,
    /// Slot reads in flight.
    Reading(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Promote,
    Demote,
}

#[derive(Debug)]
struct Move {
    dir: Dir,
    /// This move's region of the memory buffer (one sub-LUN per move slot).
    buffer_base: u64,
    /// Copying waits for host writes in flight to the source.
    draining: bool,
    started_ns: TimeNs,
    len_bytes: u64,
    next_chunk_offset: u64,
    chunks_in_flight: u32,
    /// Sectors whose newest data is in the buffer.
    buffered: Vec<u64>,
    /// Buffered sectors not yet written to the destination.
    unsynced: Vec<u64>,
    unsynced_any: bool,
    buffer_writes_in_flight: u32,
    sync_writes_in_flight: u32,
    copy_done: bool,
}

impl Move {
    fn bit(v: &[u64], i: u64) -> bool {
        v[(i / 64) as usize] >> (i % 64) & 1 == 1
    }
    fn set(v: &mut [u64], i: u64) {
        v[(i / 64) as usize] |= 1 << (i % 64);
    }
}

#[derive(Clone, Copy, Debug)]
enum Rec {
    /// A part of a host IO; the index is into `pending`. `write_sub`: a
    /// write counted in that sub-LUN's `host_writes_in_flight`; `slot`: a
    /// memory slot this IO holds (`NO_SLOT` for none).
    Host {
        pi: u32,
        write_sub: u32,
        slot: u32,
    },
    /// A host write or trim into memory slot `slot`: sectors [first, end)
    /// of the slot become dirty (newer than flash) when it lands.
    SlotWrite {
        pi: u32,
        sub: u32,
        slot: u32,
        first: u64,
        end: u64,
    },
    /// A part of a host IO written into the move buffer of sub-LUN `sub`.
    BufferWrite {
        pending: u32,
        sub: u32,
        first: u64,
        end: u64,
    },
    /// A part of host read `pi` of sub-LUN `sub`, served from move buffer
    /// region `region`.
    BufferRead {
        pi: u32,
        sub: u32,
        region: u32,
    },
    MoveRead {
        sub: u32,
        offset: u64,
        len: u32,
        staging: u64,
    },
    MoveWrite {
        sub: u32,
        staging: u64,
    },
    SyncRead {
        sub: u32,
        in_sub: u64,
        len: u32,
        staging: u64,
    },
    SyncWrite {
        sub: u32,
        staging: u64,
    },
    /// FLUSH write-back: dirty sectors of a memory sub-LUN read from its
    /// slot, then written to flash.
    FlushBackRead {
        sub: u32,
        in_sub: u64,
        len: u32,
        staging: u64,
    },
    FlushBackWrite {
        staging: u64,
    },
    /// A tiering-table page write to flash.
    TableWrite,
    Free,
}

const NO_SLOT: u32 = u32::MAX;
const NO_SUB: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, Default)]
struct Pending {
    host_id: u64,
    arrived_ns: TimeNs,
    parts_left: u32,
    touched_flash: bool,
    during_move: bool,
    /// A part failed (a device error): the host IO fails once every part
    /// ended.
    failed: Option<IoError>,
}

/// Sum and count of response times.
#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    n: u64,
    sum_ns: u128,
}

impl Acc {
    fn add(&mut self, ns: u64) {
        self.n += 1;
        self.sum_ns += ns as u128;
    }
    fn merge(&mut self, o: &Acc) {
        self.n += o.n;
        self.sum_ns += o.sum_ns;
    }
    fn mean_us(&self) -> f64 {
        self.sum_ns as f64 / self.n.max(1) as f64 / 1e3
    }
}

const FLASH: usize = 0;
const FLASH_WITH_MG: usize = 1;
const MEMORY: usize = 2;

/// The four measured values of Fig. 6.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub avef_us: f64,
    pub avef_with_mg_us: f64,
    pub avem_us: f64,
    pub ave_mg_time_s: f64,
}

/// The promotion judgment, eqs. (1)–(4). Returns (X, Y) in µs·s (a
/// response-time change times a duration); promote iff `Y > X`.
pub fn judge(m: &Measured, pduration_s: f64, sub_luns: u32) -> (f64, f64) {
    let x_duration_s = m.ave_mg_time_s * sub_luns as f64; // (1)
    let y_duration_s = pduration_s - x_duration_s; // (2)
    let x = (m.avef_with_mg_us - m.avef_us) * x_duration_s; // (3)
    let y = (m.avef_us - m.avem_us) * y_duration_s; // (4)
    (x, y)
}

#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    host_ios: u64,
    memory_ios: u64,
    flash_ios: u64,
    buffered_writes: u64,
    promotions: u64,
    demotions: u64,
    moved_bytes: u64,
    periods: u64,
    judgments: u64,
    deferred: u64,
    demotions_held: u64,
    peak_memory_bytes: u64,
    trims: u64,
    /// Trims of a sub-LUN while it moved (dropped).
    trims_during_move: u64,
    /// When `drain` was called: sub-LUNs in memory, sub-LUNs moving, and
    /// queued promotions it cancelled.
    drain_memory_sub_luns: u64,
    drain_moving_sub_luns: u64,
    drain_cancelled_promotions: u64,
    /// Host FLUSHes that waited for memory data to be written back, the
    /// write-back rounds that ran for them, and the bytes they wrote.
    flush_waits: u64,
    flush_back_rounds: u64,
    flush_back_bytes: u64,
    /// Device IOs of host IOs that failed and were survived, and the host
    /// IOs failed because of them.
    device_errors: u64,
    host_ios_failed: u64,
}

pub struct Atsmf {
    p: AtsmfParams,
    sub_lun_bytes: u64,
    lun_bytes: u64,
    period_ns: TimeNs,
    collect_ns: TimeNs,
    warmup_ns: TimeNs,
    extract: ExtractParams,
    subs: Vec<SubLun>,
    free_slots: BTreeSet<u32>,
    slots_total: u32,
    /// Host IOs in flight on each slot, and slots to free once that is 0
    /// (a demoted slot is reused only after reads of it have finished).
    slot_refs: Vec<u32>,
    slot_free_pending: Vec<bool>,
    next_staging: u64,
    buffer_base: u64,
    /// Moves running, indexed by the buffer region (one sub-LUN each) they
    /// use; host reads in flight per region. A region is reused only when
    /// no read of it is in flight: the next move's writes there would land
    /// under the read.
    moves: Vec<Option<Move>>,
    buffer_refs: Vec<u32>,
    queue: VecDeque<(u32, Dir)>,
    // Collector.
    counts: Vec<u64>,
    period: u64,
    period_start_ns: TimeNs,
    timer_armed: bool,
    // Analyzer.
    tracker: Tracker,
    prediction: PredictionTable,
    // Driver measurements.
    acc_now: [Acc; 3],
    acc_ring: VecDeque<[Acc; 3]>,
    move_times_ns: VecDeque<u64>,
    // Tags.
    recs: Vec<Rec>,
    free_recs: Vec<u32>,
    pending: Vec<Pending>,
    free_pending: Vec<u32>,
    stats: Stats,
    /// Host IOs seen when the last period ended (the period clock stops
    /// while the volume is idle).
    last_period_host_ios: u64,
    decisions: String,
    /// `drain` was called: demote everything, promote nothing.
    drain_called: bool,
    /// Per memory slot: sectors acknowledged in memory and not yet on
    /// flash (allocated on first use), and whether any bit is set.
    slot_dirty: Vec<Vec<u64>>,
    slot_dirty_any: Vec<bool>,
    /// Host FLUSHes (pending indices) waiting for the next write-back
    /// round, and those the running round will complete.
    flushes_waiting: Vec<u32>,
    flushes_in_round: Vec<u32>,
    /// Write-back IOs of the running round in flight (reads and writes),
    /// and sub-LUNs of the round still draining their host writes.
    flush_back_in_flight: u32,
    flush_back_draining: u32,
    /// Host write parts to a sub-LUN whose write-back reads are in flight:
    /// (pending index, the host IO, offset, size), dispatched when they land.
    held_writes: Vec<(u32, HostIo, u64, u64)>,
    table: Option<Table>,
}

const DECISION_HEADER: &str = "time_s,period,decision,concentration_id,first_sub_lun,size_sub_luns,ios,periods_a,pduration_s,sub_luns_to_move,prefetch_sub_luns,avef_us,avef_with_mg_us,avem_us,ave_mg_time_s,x_us_s,y_us_s\n";

impl Atsmf {
    /// `lun_bytes`: the flash device's capacity; `memory_bytes`: the memory
    /// device's, which must hold the slots and the buffer.
    pub fn new(p: AtsmfParams, flash_bytes: u64, memory_bytes: u64) -> Result<Self, ParamError> {
        let lun_bytes = lun_bytes(&p, flash_bytes);
        if p.persistent && lun_bytes == 0 {
            return Err(ParamError::rooted(
                "devices[1].capacity_bytes",
                flash_bytes,
                format!(
                    "room for a LUN and the {TABLE_BYTES}-byte tiering table (`persistent` = true)"
                ),
            ));
        }
        let sub = p.sub_lun_size_bytes.0;
        if sub < SECTOR_BYTES || sub % SECTOR_BYTES != 0 {
            return Err(ParamError::new(
                "sub_lun_size_bytes",
                sub,
                format!("a positive multiple of {SECTOR_BYTES}"),
            ));
        }
        if !(p.period_s > 0.0 && p.period_s.is_finite()) {
            return Err(ParamError::new("period_s", p.period_s, "a number > 0"));
        }
        if !(p.collect_s > 0.0 && p.collect_s <= p.period_s) {
            return Err(ParamError::new(
                "collect_s",
                p.collect_s,
                format!("(0, `period_s` = {}]", p.period_s),
            ));
        }
        if !(0.0..=1.0).contains(&p.share_m) || p.share_m == 0.0 {
            return Err(ParamError::new("share_m", p.share_m, "(0, 1]"));
        }
        if p.top_n == 0 {
            return Err(ParamError::new("top_n", 0, "at least 1"));
        }
        let chunk = p.move_chunk_bytes.0;
        if chunk == 0 || chunk % SECTOR_BYTES != 0 || chunk > u32::MAX as u64 {
            return Err(ParamError::new(
                "move_chunk_bytes",
                chunk,
                format!("a positive multiple of {SECTOR_BYTES} below 4 GiB"),
            ));
        }
        if p.move_iodepth == 0 {
            return Err(ParamError::new("move_iodepth", 0, "at least 1"));
        }
        if p.max_concurrent_moves == 0 {
            return Err(ParamError::new("max_concurrent_moves", 0, "at least 1"));
        }
        if p.demote_hold_ratio.is_nan() || p.demote_hold_ratio < 1.0 {
            return Err(ParamError::new(
                "demote_hold_ratio",
                p.demote_hold_ratio,
                "at least 1",
            ));
        }
        for (k, v) in [
            ("initial_avef_us", p.initial_avef_us),
            ("initial_avef_with_mg_us", p.initial_avef_with_mg_us),
            ("initial_avem_us", p.initial_avem_us),
            (
                "initial_ave_mg_time_s",
                p.initial_ave_mg_time_s.unwrap_or(0.0),
            ),
            ("initial_move_bytes_per_s", p.initial_move_bytes_per_s),
            ("warmup_s", p.warmup_s),
            ("history_s", p.history_s),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(ParamError::new(k, v, "a finite number >= 0"));
            }
        }
        if p.initial_move_bytes_per_s <= 0.0 {
            return Err(ParamError::new(
                "initial_move_bytes_per_s",
                p.initial_move_bytes_per_s,
                "a number > 0",
            ));
        }
        if lun_bytes == 0 {
            return Err(ParamError::rooted(
                "devices[1].capacity_bytes",
                0,
                "at least 1",
            ));
        }
        let n_subs = lun_bytes.div_ceil(sub);
        if n_subs > u32::MAX as u64 / 2 {
            return Err(ParamError::new(
                "sub_lun_size_bytes",
                format!("{sub} ({n_subs} sub-LUNs)"),
                format!(
                    "a size that cuts the LUN into at most {} sub-LUNs",
                    u32::MAX / 2
                ),
            ));
        }
        let cap_slots = match p.memory_cap_bytes {
            Some(c) => c.0 / sub,
            None => n_subs,
        }
        .min(n_subs);
        if let Some(cap) = p.memory_cap_bytes
            && cap_slots == 0
        {
            return Err(ParamError::new(
                "memory_cap_bytes",
                cap.0,
                format!("at least one sub-LUN ({sub} bytes)"),
            ));
        }
        let buffer_base = cap_slots * sub;
        let needed = buffer_base + p.buffer_bytes.0;
        let buffer_min = sub * p.max_concurrent_moves as u64;
        if p.buffer_bytes.0 < buffer_min {
            return Err(ParamError::new(
                "buffer_bytes",
                p.buffer_bytes.0,
                format!(
                    "at least `max_concurrent_moves` ({}) sub-LUNs of {sub} bytes: each moving \
                     sub-LUN buffers its writes in its own region",
                    p.max_concurrent_moves
                ),
            ));
        }
        if memory_bytes < needed {
            return Err(ParamError::rooted(
                "devices[0].capacity_bytes",
                memory_bytes,
                format!(
                    "at least {needed} bytes for ATSMF: {cap_slots} sub-LUN slots of {sub} bytes + \
                     `policy.buffer_bytes` ({}); raise it or set `policy.memory_cap_bytes`",
                    p.buffer_bytes.0
                ),
            ));
        }
        let period_ns = (p.period_s * NS_PER_S as f64).round() as TimeNs;
        let history_periods = (p.history_s / p.period_s).ceil() as u64;
        let prediction = if p.prediction_rest_periods.is_empty() {
            PredictionTable::new(history_periods)
        } else {
            if p.prediction_rest_periods
                .iter()
                .any(|v| v.is_nan() || *v < 0.0)
            {
                return Err(ParamError::new(
                    "prediction_rest_periods",
                    format!("{:?}", p.prediction_rest_periods),
                    "entries >= 0",
                ));
            }
            PredictionTable::fixed(p.prediction_rest_periods.clone())
        };
        Ok(Atsmf {
            sub_lun_bytes: sub,
            lun_bytes,
            period_ns,
            collect_ns: (p.collect_s * NS_PER_S as f64).round() as TimeNs,
            warmup_ns: (p.warmup_s * NS_PER_S as f64).round() as TimeNs,
            extract: ExtractParams {
                top_n: p.top_n,
                share_m: p.share_m,
            },
            subs: vec![
                SubLun {
                    place: Place::Flash,
                    slot: 0,
                    last_hot_period: 0,
                    mv: 0,
                    queued: None,
                    host_writes_in_flight: 0,
                    flush_back: FlushBack::Idle,
                };
                n_subs as usize
            ],
            free_slots: (0..cap_slots as u32).collect(),
            slots_total: cap_slots as u32,
            slot_refs: vec![0; cap_slots as usize],
            slot_free_pending: vec![false; cap_slots as usize],
            next_staging: 0,
            buffer_base,
            moves: Vec::new(),
            // Regions for twice the moves that may run: a move seldom waits
            // for reads of a region to finish (and the search stays short).
            buffer_refs: vec![
                0;
                (p.buffer_bytes.0 / sub).min(2 * p.max_concurrent_moves as u64)
                    as usize
            ],
            queue: VecDeque::new(),
            counts: vec![0; n_subs as usize],
            period: 0,
            period_start_ns: 0,
            timer_armed: false,
            tracker: Tracker::new(),
            prediction,
            acc_now: Default::default(),
            acc_ring: VecDeque::new(),
            move_times_ns: VecDeque::new(),
            recs: Vec::new(),
            free_recs: Vec::new(),
            pending: Vec::new(),
            free_pending: Vec::new(),
            stats: Stats::default(),
            last_period_host_ios: 0,
            decisions: String::from(DECISION_HEADER),
            drain_called: false,
            slot_dirty: vec![Vec::new(); cap_slots as usize],
            slot_dirty_any: vec![false; cap_slots as usize],
            flushes_waiting: Vec::new(),
            flushes_in_round: Vec::new(),
            flush_back_in_flight: 0,
            flush_back_draining: 0,
            held_writes: Vec::new(),
            table: p.persistent.then_some(Table {
                offset_bytes: lun_bytes,
                seq: 0,
                copy: 1,
                writing: false,
                changed: false,
                frozen: false,
                last: None,
                memory_id: None,
                writes: 0,
                truncated: 0,
                warm_sub_luns: 0,
                warm_bytes: 0,
            }),
            p,
        })
    }

    /// Memory used by sub-LUN slots now (moving sub-LUNs hold theirs).
    pub fn memory_bytes(&self) -> u64 {
        (self.slots_total as u64 - self.free_slots.len() as u64) * self.sub_lun_bytes
    }

    /// Sub-LUNs whose data is in memory (moved and not moving back).
    pub fn sub_luns_in_memory(&self) -> Vec<u32> {
        (0..self.subs.len() as u32)
            .filter(|&i| self.subs[i as usize].place == Place::Memory)
            .collect()
    }

    /// Where the move buffer starts on the memory device.
    pub fn buffer_offset_bytes(&self) -> u64 {
        self.buffer_base
    }

    /// Sub-LUN moves running now.
    pub fn moves_running(&self) -> usize {
        self.moves.iter().filter(|m| m.is_some()).count()
    }

    /// The decision log (CSV with a header).
    pub fn decision_log(&self) -> &str {
        &self.decisions
    }

    /// The four values the judgment would use now.
    pub fn measured(&self) -> Measured {
        let mut acc = self.acc_now;
        for r in &self.acc_ring {
            for i in 0..3 {
                acc[i].merge(&r[i]);
            }
        }
        let pick = |a: &Acc, init: f64| {
            if a.n >= self.p.min_samples && a.n > 0 {
                a.mean_us()
            } else {
                init
            }
        };
        let ave_mg_time_s = if self.move_times_ns.is_empty() {
            self.p
                .initial_ave_mg_time_s
                .unwrap_or(self.sub_lun_bytes as f64 / self.p.initial_move_bytes_per_s)
        } else {
            self.move_times_ns.iter().sum::<u64>() as f64
                / self.move_times_ns.len() as f64
                / NS_PER_S as f64
        };
        Measured {
            avef_us: pick(&acc[FLASH], self.p.initial_avef_us),
            avef_with_mg_us: pick(&acc[FLASH_WITH_MG], self.p.initial_avef_with_mg_us),
            avem_us: pick(&acc[MEMORY], self.p.initial_avem_us),
            ave_mg_time_s,
        }
    }

    fn sub_len(&self, sub: u32) -> u64 {
        let start = sub as u64 * self.sub_lun_bytes;
        self.sub_lun_bytes.min(self.lun_bytes - start)
    }

    fn tag(&mut self, rec: Rec) -> u64 {
        match self.free_recs.pop() {
            Some(i) => {
                self.recs[i as usize] = rec;
                i as u64
            }
            None => {
                self.recs.push(rec);
                (self.recs.len() - 1) as u64
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        out: &mut Outbox,
        device: usize,
        op: Op,
        offset: u64,
        size: u64,
        rec: Rec,
        buf: Option<BufRef>,
    ) {
        let tag = self.tag(rec);
        out.device_ios.push((
            device,
            DeviceIo {
                tag,
                op,
                offset_bytes: offset,
                size_bytes: size as u32,
            },
        ));
        if let Some(b) = buf {
            out.data_for(device, tag, b);
        }
    }

    fn staging(&mut self) -> u64 {
        self.next_staging += 1;
        self.next_staging
    }

    fn any_move_running(&self) -> bool {
        self.moves.iter().any(|m| m.is_some())
    }

    /// One part of a host IO inside one sub-LUN.
    fn dispatch_part(&mut self, out: &mut Outbox, pi: u32, io: &HostIo, offset: u64, size: u64) {
        let sub = (offset / self.sub_lun_bytes) as u32;
        let s = self.subs[sub as usize];
        let in_sub = offset - sub as u64 * self.sub_lun_bytes;
        let slot_offset = s.slot as u64 * self.sub_lun_bytes + in_sub;
        let host_id = io.id;
        let io_offset = io.offset_bytes;
        // The host buffer at absolute LUN offset `at`.
        let host_buf = move |at: u64| {
            Some(BufRef::Host {
                host_id,
                offset_bytes: at - io_offset,
            })
        };
        let op = io.op;
        // Trims change the bytes too: a move must not copy under them.
        let changes = matches!(op, Op::Write | Op::Trim);
        let write_sub = if changes { sub } else { NO_SUB };
        // Trims carry no data.
        let host_buf = move |at: u64| if op == Op::Trim { None } else { host_buf(at) };
        if op == Op::Trim {
            self.stats.trims += 1;
            if matches!(s.place, Place::Promoting | Place::Demoting) {
                // A hint, dropped: the move is copying the range, and a hole
                // punched in its source under the copy would make what the
                // destination holds depend on timing (the copy may carry the
                // old bytes over, and a later move may write them back over
                // a hole that reads saw).
                self.stats.trims_during_move += 1;
                self.finish_part(self.pending[pi as usize].arrived_ns, pi, out);
                return;
            }
        }
        match s.place {
            Place::Flash => {
                self.pending[pi as usize].touched_flash = true;
                self.subs[sub as usize].host_writes_in_flight += changes as u32;
                let rec = Rec::Host {
                    pi,
                    write_sub,
                    slot: NO_SLOT,
                };
                self.submit(out, FLASH_DEVICE, op, offset, size, rec, host_buf(offset));
            }
            // Held while its write-back drains or reads (no starvation:
            // the writes in flight land, the reads follow, then these go).
            Place::Memory if changes && s.flush_back != FlushBack::Idle => {
                self.held_writes.push((pi, *io, offset, size));
            }
            Place::Memory => {
                self.subs[sub as usize].host_writes_in_flight += changes as u32;
                self.slot_refs[s.slot as usize] += 1;
                let rec = if changes {
                    Rec::SlotWrite {
                        pi,
                        sub,
                        slot: s.slot,
                        first: in_sub / SECTOR_BYTES,
                        end: (in_sub + size).div_ceil(SECTOR_BYTES),
                    }
                } else {
                    Rec::Host {
                        pi,
                        write_sub,
                        slot: s.slot,
                    }
                };
                self.submit(
                    out,
                    MEMORY_DEVICE,
                    op,
                    slot_offset,
                    size,
                    rec,
                    host_buf(offset),
                );
            }
            Place::Promoting | Place::Demoting => {
                let first = in_sub / SECTOR_BYTES;
                let end = (in_sub + size).div_ceil(SECTOR_BYTES);
                let promoting = s.place == Place::Promoting;
                let mv = self.moves[s.mv as usize]
                    .as_mut()
                    .expect("moving sub-LUN has a move");
                let buffer_base = mv.buffer_base;
                if op == Op::Write {
                    // Its sectors count as buffered only once it has landed
                    // (`Rec::BufferWrite`): until then the buffer holds
                    // whatever was there before (maybe another sub-LUN's
                    // data), and a read racing the write must get the old
                    // data from the source instead.
                    mv.buffer_writes_in_flight += 1;
                    self.stats.buffered_writes += 1;
                    let rec = Rec::BufferWrite {
                        pending: pi,
                        sub,
                        first,
                        end,
                    };
                    let at = buffer_base + in_sub;
                    self.submit(out, MEMORY_DEVICE, op, at, size, rec, host_buf(offset));
                    return;
                }
                // Reads: each run of buffered sectors from the buffer, each
                // run of the others from the move's source.
                debug_assert_eq!(op, Op::Read);
                let mut runs: Vec<(u64, u64, bool)> = Vec::new();
                for i in first..end {
                    let b = Move::bit(&mv.buffered, i);
                    match runs.last_mut() {
                        Some((_, e, rb)) if *rb == b => *e = i + 1,
                        _ => runs.push((i, i + 1, b)),
                    }
                }
                self.pending[pi as usize].parts_left += runs.len() as u32 - 1;
                let sub_base = sub as u64 * self.sub_lun_bytes;
                for (run_first, run_end, buffered) in runs {
                    let lo = (run_first * SECTOR_BYTES).max(in_sub);
                    let hi = (run_end * SECTOR_BYTES).min(in_sub + size);
                    let buf = host_buf(sub_base + lo);
                    if buffered {
                        self.buffer_refs[s.mv as usize] += 1;
                        let rec = Rec::BufferRead {
                            pi,
                            sub,
                            region: s.mv,
                        };
                        self.submit(out, MEMORY_DEVICE, op, buffer_base + lo, hi - lo, rec, buf);
                        continue;
                    }
                    let (device, at, slot) = if promoting {
                        self.pending[pi as usize].touched_flash = true;
                        (FLASH_DEVICE, sub_base + lo, NO_SLOT)
                    } else {
                        self.slot_refs[s.slot as usize] += 1;
                        (
                            MEMORY_DEVICE,
                            s.slot as u64 * self.sub_lun_bytes + lo,
                            s.slot,
                        )
                    };
                    let rec = Rec::Host {
                        pi,
                        write_sub: NO_SUB,
                        slot,
                    };
                    self.submit(out, device, op, at, hi - lo, rec, buf);
                }
            }
        }
    }

    /// A host IO part finished on a device: release what it held.
    fn host_part_done(
        &mut self,
        now_ns: TimeNs,
        pi: u32,
        write_sub: u32,
        slot: u32,
        out: &mut Outbox,
    ) {
        if slot != NO_SLOT {
            self.slot_refs[slot as usize] -= 1;
            if self.slot_refs[slot as usize] == 0 && self.slot_free_pending[slot as usize] {
                self.slot_free_pending[slot as usize] = false;
                self.free_slots.insert(slot);
                // A promotion may have been waiting for this slot.
                self.start_moves(now_ns, out);
            }
        }
        if write_sub != NO_SUB {
            let e = &mut self.subs[write_sub as usize];
            e.host_writes_in_flight -= 1;
            if e.host_writes_in_flight == 0 && e.flush_back == FlushBack::Draining {
                self.flush_back_draining -= 1;
                self.flush_back_reads(write_sub, out);
            }
            let e = &mut self.subs[write_sub as usize];
            if e.host_writes_in_flight == 0 && matches!(e.place, Place::Promoting | Place::Demoting)
            {
                let mi = e.mv as usize;
                if let Some(mv) = self.moves[mi].as_mut()
                    && mv.draining
                {
                    mv.draining = false;
                    for _ in 0..self.p.move_iodepth {
                        self.issue_chunk(write_sub, out);
                    }
                }
            }
        }
        self.finish_part(now_ns, pi, out);
    }

    fn finish_part(&mut self, now_ns: TimeNs, pi: u32, out: &mut Outbox) {
        let p = &mut self.pending[pi as usize];
        p.parts_left -= 1;
        if p.parts_left > 0 {
            return;
        }
        let p = *p;
        if let Some(e) = p.failed {
            self.stats.host_ios_failed += 1;
            out.failed.push((p.host_id, e));
            self.free_pending.push(pi);
            return;
        }
        let latency = now_ns - p.arrived_ns;
        let class = if !p.touched_flash {
            self.stats.memory_ios += 1;
            MEMORY
        } else {
            self.stats.flash_ios += 1;
            if p.during_move || self.any_move_running() {
                FLASH_WITH_MG
            } else {
                FLASH
            }
        };
        self.acc_now[class].add(latency);
        out.complete.push((
            p.host_id,
            if p.touched_flash {
                TIER_FLASH
            } else {
                TIER_MEMORY
            },
        ));
        self.free_pending.push(pi);
    }

    // ---- mover ----

    fn enqueue(&mut self, sub: u32, dir: Dir) {
        if self.subs[sub as usize].queued.is_none() {
            self.subs[sub as usize].queued = Some(dir);
            self.queue.push_back((sub, dir));
        }
    }

    fn start_moves(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        // A FLUSH waiting or writing back holds new moves: a move would
        // change where the data it writes back lives.
        if self.flush_blocks_moves() {
            return;
        }
        loop {
            let running = self.moves.iter().filter(|m| m.is_some()).count();
            if running >= self.p.max_concurrent_moves as usize {
                return;
            }
            // A buffer region with no move and no read in flight; else wait
            // for one (`Rec::BufferRead` retries).
            let region = (0..self.buffer_refs.len()).find(|&i| {
                self.buffer_refs[i] == 0 && self.moves.get(i).is_none_or(|m| m.is_none())
            });
            let Some(mi) = region else {
                return;
            };
            let free = !self.free_slots.is_empty();
            let Some(qi) = self
                .queue
                .iter()
                .position(|&(_, d)| d == Dir::Demote || free)
            else {
                return;
            };
            let (sub, dir) = self.queue.remove(qi).expect("position is in range");
            self.subs[sub as usize].queued = None;
            let s = self.subs[sub as usize];
            // Stale requests: the sub-LUN is already where it was to go.
            let startable = match dir {
                Dir::Promote => s.place == Place::Flash,
                Dir::Demote => s.place == Place::Memory,
            };
            if !startable {
                continue;
            }
            let slot = match dir {
                Dir::Promote => self.free_slots.pop_first().expect("checked free"),
                Dir::Demote => s.slot,
            };
            let sectors = self.sub_len(sub).div_ceil(SECTOR_BYTES);
            let words = sectors.div_ceil(64) as usize;
            let draining = s.host_writes_in_flight > 0;
            let mv = Move {
                dir,
                buffer_base: self.buffer_base + mi as u64 * self.sub_lun_bytes,
                draining,
                started_ns: now_ns,
                len_bytes: self.sub_len(sub),
                next_chunk_offset: 0,
                chunks_in_flight: 0,
                buffered: vec![0; words],
                unsynced: vec![0; words],
                unsynced_any: false,
                buffer_writes_in_flight: 0,
                sync_writes_in_flight: 0,
                copy_done: false,
            };
            if mi >= self.moves.len() {
                self.moves.resize_with(mi + 1, || None);
            }
            self.moves[mi] = Some(mv);
            let e = &mut self.subs[sub as usize];
            e.slot = slot;
            e.mv = mi as u32;
            e.place = match dir {
                Dir::Promote => Place::Promoting,
                Dir::Demote => Place::Demoting,
            };
            self.stats.peak_memory_bytes = self.stats.peak_memory_bytes.max(self.memory_bytes());
            // Writes in flight to the source must land before it is copied
            // (new ones go to the buffer from now on); `host_part_done`
            // starts the copy when the last one has.
            if !draining {
                for _ in 0..self.p.move_iodepth {
                    self.issue_chunk(sub, out);
                }
            }
        }
    }

    fn issue_chunk(&mut self, sub: u32, out: &mut Outbox) {
        let mi = self.subs[sub as usize].mv as usize;
        let chunk = self.p.move_chunk_bytes.0;
        let mv = self.moves[mi].as_mut().expect("moving");
        if mv.next_chunk_offset >= mv.len_bytes {
            return;
        }
        let offset = mv.next_chunk_offset;
        let len = chunk.min(mv.len_bytes - offset);
        mv.next_chunk_offset += len;
        mv.chunks_in_flight += 1;
        let dir = mv.dir;
        let staging = self.staging();
        let (device, base) = match dir {
            Dir::Promote => (FLASH_DEVICE, sub as u64 * self.sub_lun_bytes),
            Dir::Demote => (
                MEMORY_DEVICE,
                self.subs[sub as usize].slot as u64 * self.sub_lun_bytes,
            ),
        };
        self.submit(
            out,
            device,
            Op::Read,
            base + offset,
            len,
            Rec::MoveRead {
                sub,
                offset,
                len: len as u32,
                staging,
            },
            Some(BufRef::Staging {
                id: staging,
                offset_bytes: 0,
            }),
        );
    }

    /// Called whenever a move may have made progress: issues the sync of
    /// the buffer once the copy is done, flips the table when all is done.
    fn advance_move(&mut self, now_ns: TimeNs, sub: u32, out: &mut Outbox) {
        let mi = self.subs[sub as usize].mv as usize;
        let mv = self.moves[mi].as_mut().expect("moving");
        if !mv.copy_done && mv.next_chunk_offset >= mv.len_bytes && mv.chunks_in_flight == 0 {
            mv.copy_done = true;
        }
        if !mv.copy_done || mv.sync_writes_in_flight > 0 {
            return;
        }
        if mv.unsynced_any {
            // Sync: every run of buffered-but-unsynced sectors is read from
            // the buffer and written to the destination, in chunk-sized IOs.
            let runs = take_runs(&mut mv.unsynced);
            mv.unsynced_any = false;
            let buffer_base = mv.buffer_base;
            let chunk = self.p.move_chunk_bytes.0;
            for (first, end) in runs {
                let (mut at, run_end) = (first * SECTOR_BYTES, end * SECTOR_BYTES);
                while at < run_end {
                    let n = (run_end - at).min(chunk);
                    let staging = self.staging();
                    self.moves[mi]
                        .as_mut()
                        .expect("moving")
                        .sync_writes_in_flight += 1;
                    let rec = Rec::SyncRead {
                        sub,
                        in_sub: at,
                        len: n as u32,
                        staging,
                    };
                    let buf = Some(BufRef::Staging {
                        id: staging,
                        offset_bytes: 0,
                    });
                    self.submit(out, MEMORY_DEVICE, Op::Read, buffer_base + at, n, rec, buf);
                    at += n;
                }
            }
            return;
        }
        if mv.buffer_writes_in_flight > 0 {
            return; // their sectors become unsynced when they land
        }
        // Done: flip the table.
        let mv = self.moves[mi].take().expect("moving");
        let e = &mut self.subs[sub as usize];
        match mv.dir {
            Dir::Promote => {
                e.place = Place::Memory;
                let slot = e.slot;
                self.stats.promotions += 1;
                self.table_changed(out);
                // Writes during the promotion were synced into the slot
                // from the buffer: newer than flash.
                if mv.buffered.iter().any(|&w| w != 0) {
                    self.mark_dirty_bits(slot, &mv.buffered);
                }
                if self.drain_called {
                    // Promoted while draining: straight back to flash.
                    self.enqueue(sub, Dir::Demote);
                }
            }
            Dir::Demote => {
                e.place = Place::Flash;
                // The copy and the sync put everything on flash.
                self.slot_dirty_any[e.slot as usize] = false;
                self.slot_dirty[e.slot as usize]
                    .iter_mut()
                    .for_each(|w| *w = 0);
                // Reads of the slot still in flight keep it until they finish.
                if self.slot_refs[e.slot as usize] == 0 {
                    self.free_slots.insert(e.slot);
                } else {
                    self.slot_free_pending[e.slot as usize] = true;
                }
                self.stats.demotions += 1;
                self.table_changed(out);
            }
        }
        self.stats.moved_bytes += mv.len_bytes;
        self.move_times_ns.push_back(now_ns - mv.started_ns);
        if self.move_times_ns.len() > 32 {
            self.move_times_ns.pop_front();
        }
        self.try_flush_back(now_ns, out);
        self.start_moves(now_ns, out);
    }

    // ---- the persistent tiering table ----

    /// The sub-LUNs in memory changed: write the table (one write at a
    /// time; a change during one writes again when it lands).
    fn table_changed(&mut self, out: &mut Outbox) {
        let Some(t) = &mut self.table else { return };
        if t.frozen {
            return;
        }
        if t.writing {
            t.changed = true;
            return;
        }
        let subs = self.memory_sub_luns();
        self.write_table(subs, out);
    }

    fn memory_sub_luns(&self) -> Vec<u32> {
        (0..self.subs.len() as u32)
            .filter(|&s| self.subs[s as usize].place == Place::Memory)
            .collect()
    }

    fn table_fields(&self, subs: &[u32]) -> Vec<u64> {
        let mut f = vec![
            self.sub_lun_bytes,
            self.lun_bytes,
            self.slots_total as u64,
            subs.len() as u64,
        ];
        f.extend(subs.iter().map(|&s| s as u64));
        let memory_id = self.table.as_ref().and_then(|t| t.memory_id);
        f.extend(crate::binding::to_fields(memory_id));
        f
    }

    fn write_table(&mut self, mut subs: Vec<u32>, out: &mut Outbox) {
        let truncated = subs.len().saturating_sub(TABLE_MAX_SUBS) as u64;
        subs.truncate(TABLE_MAX_SUBS);
        let fields = self.table_fields(&subs);
        let staging = self.staging();
        let t = self.table.as_mut().unwrap();
        t.truncated = t.truncated.max(truncated);
        t.seq += 1;
        t.copy = 1 - t.copy;
        t.writing = true;
        t.changed = false;
        t.writes += 1;
        let offset = t.offset_bytes + crate::slot_meta::copy_offset(0, t.copy);
        let seq = t.seq;
        let buf = out.wants_data.then(|| {
            out.fills.push((
                staging,
                crate::slot_meta::encode_header(TABLE_MAGIC, &fields, seq),
            ));
            BufRef::Staging {
                id: staging,
                offset_bytes: 0,
            }
        });
        self.submit(
            out,
            FLASH_DEVICE,
            Op::Write,
            offset,
            crate::slot_meta::PAGE as u64,
            Rec::TableWrite,
            buf,
        );
        if out.wants_data {
            // The write took its bytes when submitted.
            out.release.push(staging);
        }
    }

    fn table_written(&mut self, out: &mut Outbox) {
        let t = self.table.as_mut().expect("a table write");
        t.writing = false;
        if let Some(last) = t.last.take() {
            self.write_table(last, out);
        } else if t.changed && !t.frozen {
            let subs = self.memory_sub_luns();
            self.write_table(subs, out);
        }
    }

    /// `open` with `persistent`: reads the table; a never-written one
    /// starts cold, a damaged or foreign one or one for another geometry
    /// is refused; the sub-LUNs it lists are copied from flash into memory
    /// slots (flash is their home and holds every flushed write) and come
    /// up memory-resident.
    fn load_table(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        use crate::slot_meta::{PAGE, copy_offset, decode_header, newest};
        let offset = self.table.as_ref().unwrap().offset_bytes;
        let need = offset + TABLE_BYTES;
        let have = stores.capacity_bytes(FLASH_DEVICE);
        if have < need {
            return Err(OpenError::mismatch(format!(
                "the flash device holds {have} bytes; the LUN and the tiering table need {need}"
            )));
        }
        stores.sync(FLASH_DEVICE)?;
        let mut a = vec![0u8; PAGE];
        let mut b = vec![0u8; PAGE];
        stores.read_at(FLASH_DEVICE, offset + copy_offset(0, 0), &mut a)?;
        stores.read_at(FLASH_DEVICE, offset + copy_offset(0, 1), &mut b)?;
        let n = TABLE_PAGE_FIELDS;
        debug_assert_eq!(n, (PAGE - 32) / 8);
        let (da, db) = (
            decode_header(TABLE_MAGIC, &a, n),
            decode_header(TABLE_MAGIC, &b, n),
        );
        let (ra, rb) = (da.as_ref().err().copied(), db.as_ref().err().copied());
        let Some((copy, fields, seq)) = newest(da, db) else {
            if a.iter().chain(&b).all(|&x| x == 0) {
                // Never written: a cold start; the first table written
                // records the memory device's id.
                let id = crate::binding::id_at_format(stores, MEMORY_DEVICE)?;
                self.table.as_mut().unwrap().memory_id = id;
                return Ok(());
            }
            return Err(OpenError::mismatch(format!(
                "atsmf: the tiering table at byte {offset} of the flash device is unreadable \
                 (copy 0: {}; copy 1: {}): refusing to guess what it holds; give a new or \
                 zeroed flash device, or set persistent = false",
                ra.unwrap_or("valid"),
                rb.unwrap_or("valid")
            )));
        };
        // Before anything is written (no warm copy into memory, no table
        // rewrite): the memory device must be the one recorded, or new.
        let count = fields[3] as usize;
        let recorded = if count <= TABLE_MAX_SUBS {
            let at = TABLE_FIELDS + count;
            crate::binding::from_fields([fields[at], fields[at + 1]])
        } else {
            None // a full table of an older format: no room, none recorded
        };
        let bound = crate::binding::check(stores, &MEMORY_BINDING, recorded)?;
        let names = ["sub_lun_size_bytes", "LUN bytes", "memory slots"];
        let here = self.table_fields(&[]);
        let differ: Vec<String> = (0..3)
            .filter(|&i| fields[i] != here[i])
            .map(|i| {
                format!(
                    "{} {} on the device, {} in the config",
                    names[i], fields[i], here[i]
                )
            })
            .collect();
        if !differ.is_empty() {
            return Err(OpenError::mismatch(format!(
                "atsmf: the flash device's tiering table was made for another configuration \
                 ({}); refusing to reinterpret it",
                differ.join("; ")
            )));
        }
        // (An older format listed up to two more: still read.)
        if count > (TABLE_MAX_SUBS + 2).min(self.slots_total as usize) {
            return Err(OpenError::mismatch(format!(
                "atsmf: the tiering table lists {count} sub-LUNs, more than its {} memory slots",
                self.slots_total
            )));
        }
        let t = self.table.as_mut().unwrap();
        t.seq = seq;
        t.copy = copy;
        let mut chunk = vec![0u8; (1 << 20).min(self.sub_lun_bytes) as usize];
        for &id in &fields[TABLE_FIELDS..TABLE_FIELDS + count] {
            let sub = id as usize;
            if sub >= self.subs.len() || self.subs[sub].place != Place::Flash {
                return Err(OpenError::mismatch(format!(
                    "atsmf: the tiering table lists sub-LUN {id} {}",
                    if sub >= self.subs.len() {
                        "past the LUN"
                    } else {
                        "twice"
                    }
                )));
            }
            let slot = self.free_slots.pop_first().expect("count <= slots");
            let len = self.sub_len(id as u32);
            let (from, to) = (id * self.sub_lun_bytes, slot as u64 * self.sub_lun_bytes);
            let mut at = 0;
            while at < len {
                let n = (len - at).min(chunk.len() as u64) as usize;
                stores.read_at(FLASH_DEVICE, from + at, &mut chunk[..n])?;
                stores.write_at(MEMORY_DEVICE, to + at, &chunk[..n])?;
                at += n as u64;
            }
            let e = &mut self.subs[sub];
            e.place = Place::Memory;
            e.slot = slot;
            let t = self.table.as_mut().unwrap();
            t.warm_sub_luns += 1;
            t.warm_bytes += len;
        }
        let used = self.memory_bytes();
        self.stats.peak_memory_bytes = self.stats.peak_memory_bytes.max(used);
        // The table does not record this memory device's id yet (a table
        // from before ids, or a new memory file adopted): record it now,
        // into the other copy, synced — a crash before the next table
        // write must not leave the old id over this device.
        self.table.as_mut().unwrap().memory_id = bound.id;
        if bound.record {
            let mut subs = self.memory_sub_luns();
            subs.truncate(TABLE_MAX_SUBS);
            let fields = self.table_fields(&subs);
            let t = self.table.as_mut().unwrap();
            t.seq += 1;
            t.copy = 1 - t.copy;
            let at = offset + copy_offset(0, t.copy);
            let page = crate::slot_meta::encode_header(TABLE_MAGIC, &fields, t.seq);
            stores.write_at(FLASH_DEVICE, at, &page)?;
            stores.sync(FLASH_DEVICE)?;
        }
        if cfg!(debug_assertions) {
            self.check_invariants_full();
        }
        Ok(())
    }

    // ---- FLUSH write-back ----

    fn flush_blocks_moves(&self) -> bool {
        !self.flushes_waiting.is_empty() || !self.flushes_in_round.is_empty()
    }

    fn mark_dirty(&mut self, slot: u32, first: u64, end: u64) {
        let words = (self.sub_lun_bytes / SECTOR_BYTES).div_ceil(64) as usize;
        let bits = &mut self.slot_dirty[slot as usize];
        if bits.is_empty() {
            bits.resize(words, 0);
        }
        for i in first..end {
            Move::set(bits, i);
        }
        self.slot_dirty_any[slot as usize] = true;
    }

    fn mark_dirty_bits(&mut self, slot: u32, from: &[u64]) {
        let bits = &mut self.slot_dirty[slot as usize];
        if bits.is_empty() {
            bits.resize(from.len(), 0);
        }
        for (w, f) in bits.iter_mut().zip(from) {
            *w |= f;
        }
        self.slot_dirty_any[slot as usize] = true;
    }

    /// A host FLUSH: complete now if memory holds nothing newer than flash
    /// and nothing moves (the flash flush as before), else wait for a
    /// write-back round.
    fn host_flush(&mut self, now_ns: TimeNs, pi: u32, out: &mut Outbox) {
        let dirty = self.slot_dirty_any.iter().any(|&d| d);
        if !self.p.flush_writes_back
            || (!dirty && !self.any_move_running() && !self.flush_blocks_moves())
        {
            self.flush_to_flash(pi, out);
            return;
        }
        self.stats.flush_waits += 1;
        self.flushes_waiting.push(pi);
        self.try_flush_back(now_ns, out);
    }

    fn flush_to_flash(&mut self, pi: u32, out: &mut Outbox) {
        let rec = Rec::Host {
            pi,
            write_sub: NO_SUB,
            slot: NO_SLOT,
        };
        self.submit(out, FLASH_DEVICE, Op::Flush, 0, 0, rec, None);
    }

    /// Starts a write-back round for the FLUSHes waiting, once no move
    /// runs and no round does: every dirty sector of every memory slot is
    /// read and written to flash; the round's FLUSHes complete when all of
    /// it has landed. A write acknowledged later marks its sectors again
    /// for the next round.
    fn try_flush_back(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        if self.flushes_waiting.is_empty()
            || !self.flushes_in_round.is_empty()
            || self.any_move_running()
        {
            return;
        }
        self.flushes_in_round = std::mem::take(&mut self.flushes_waiting);
        self.stats.flush_back_rounds += 1;
        for sub in 0..self.subs.len() as u32 {
            let e = self.subs[sub as usize];
            if e.place != Place::Memory || !self.slot_dirty_any[e.slot as usize] {
                continue;
            }
            if e.host_writes_in_flight > 0 {
                self.subs[sub as usize].flush_back = FlushBack::Draining;
                self.flush_back_draining += 1;
            } else {
                self.flush_back_reads(sub, out);
            }
        }
        self.end_flush_back_round(now_ns, out);
    }

    /// Reads the dirty sectors of memory sub-LUN `sub` from its slot (each
    /// read's completion writes them to flash).
    fn flush_back_reads(&mut self, sub: u32, out: &mut Outbox) {
        let e = self.subs[sub as usize];
        debug_assert!(e.place == Place::Memory && e.host_writes_in_flight == 0);
        self.slot_dirty_any[e.slot as usize] = false;
        let runs = take_runs(&mut self.slot_dirty[e.slot as usize]);
        let chunk = self.p.move_chunk_bytes.0;
        let mut reads = 0;
        for (first, end) in runs {
            let (mut at, run_end) = (
                first * SECTOR_BYTES,
                (end * SECTOR_BYTES).min(self.sub_len(sub)),
            );
            while at < run_end {
                let n = (run_end - at).min(chunk);
                let staging = self.staging();
                self.flush_back_in_flight += 1;
                reads += 1;
                self.stats.flush_back_bytes += n;
                // The slot is held like a read of it.
                self.slot_refs[e.slot as usize] += 1;
                let rec = Rec::FlushBackRead {
                    sub,
                    in_sub: at,
                    len: n as u32,
                    staging,
                };
                let buf = Some(BufRef::Staging {
                    id: staging,
                    offset_bytes: 0,
                });
                let slot_at = e.slot as u64 * self.sub_lun_bytes + at;
                self.submit(out, MEMORY_DEVICE, Op::Read, slot_at, n, rec, buf);
                at += n;
            }
        }
        self.subs[sub as usize].flush_back = if reads > 0 {
            FlushBack::Reading(reads)
        } else {
            FlushBack::Idle
        };
    }

    /// A write-back read of `sub` landed: when its last has, the writes
    /// held for it go on.
    fn flush_back_read_done(&mut self, now_ns: TimeNs, sub: u32, out: &mut Outbox) {
        let FlushBack::Reading(n) = self.subs[sub as usize].flush_back else {
            unreachable!("a write-back read of a sub-LUN not reading");
        };
        if n > 1 {
            self.subs[sub as usize].flush_back = FlushBack::Reading(n - 1);
            return;
        }
        self.subs[sub as usize].flush_back = FlushBack::Idle;
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held_writes)
            .into_iter()
            .partition(|h| (h.2 / self.sub_lun_bytes) as u32 == sub);
        self.held_writes = rest;
        for (pi, io, offset, size) in mine {
            self.dispatch_part(out, pi, &io, offset, size);
        }
        let _ = now_ns;
    }

    /// When the round's write-back has landed: its FLUSHes go on to the
    /// flash flush; moves and the next round may start.
    fn end_flush_back_round(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        if self.flush_back_in_flight > 0
            || self.flush_back_draining > 0
            || self.flushes_in_round.is_empty()
        {
            return;
        }
        for pi in std::mem::take(&mut self.flushes_in_round) {
            self.flush_to_flash(pi, out);
        }
        self.try_flush_back(now_ns, out);
        self.start_moves(now_ns, out);
    }

    // ---- manager ----

    fn log(&mut self, now_ns: TimeNs, decision: &str, row: &str) {
        let _ = writeln!(
            self.decisions,
            "{:.3},{},{decision},{row}",
            now_ns as f64 / NS_PER_S as f64,
            self.period
        );
    }

    fn end_period(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        let period = self.period;
        self.stats.periods += 1;
        if self.drain_called {
            // Draining: every memory sub-LUN is queued for demotion already
            // and nothing may be promoted; the clock just moves on.
            self.counts.iter_mut().for_each(|c| *c = 0);
            self.period += 1;
            self.period_start_ns = now_ns;
            self.start_moves(now_ns, out);
            return;
        }
        let groups = analyzer::extract(&self.counts, &self.extract);
        let update = self.tracker.update(period, &groups);
        for ended in &update.ended {
            self.prediction.record(period, ended.periods);
        }
        // Roll the response-time window.
        self.acc_ring.push_back(std::mem::take(&mut self.acc_now));
        while self.acc_ring.len() > self.p.stats_window_periods.max(1) as usize {
            self.acc_ring.pop_front();
        }
        let m = self.measured();
        let warming = now_ns < self.warmup_ns;
        let n_subs = self.subs.len() as u32;
        let concentrations: Vec<analyzer::Tracked> = self.tracker.current().to_vec();
        for c in &concentrations {
            let g = c.group;
            for s in g.first_sub_lun..g.end_sub_lun() {
                self.subs[s as usize].last_hot_period = period;
            }
            let pduration_periods = self.prediction.rest_periods(c.periods);
            let pduration_s = pduration_periods * self.p.period_s;
            // Prefetch range of a drifting concentration.
            let speed = c.speed_sub_luns_per_period();
            let reach = if self.p.prefetch_moving && speed != 0.0 {
                (speed.abs() * pduration_periods).ceil() as u32
            } else {
                0
            };
            let prefetch: Vec<u32> = if speed > 0.0 {
                (g.end_sub_lun()..g.end_sub_lun().saturating_add(reach).min(n_subs)).collect()
            } else if speed < 0.0 {
                (g.first_sub_lun.saturating_sub(reach)..g.first_sub_lun).collect()
            } else {
                Vec::new()
            };
            // On flash and not already queued for promotion.
            let on_flash = |s: &u32| {
                let e = self.subs[*s as usize];
                e.place == Place::Flash && e.queued != Some(Dir::Promote)
            };
            let missing: Vec<u32> = (g.first_sub_lun..g.end_sub_lun())
                .filter(on_flash)
                .collect();
            let prefetch_missing: Vec<u32> = prefetch.iter().copied().filter(on_flash).collect();
            let row = |x: f64, y: f64, to_move: usize, pre: usize| {
                format!(
                    "{},{},{},{},{},{:.4},{},{},{:.3},{:.3},{:.3},{:.6},{:.3},{:.3}",
                    c.id,
                    g.first_sub_lun,
                    g.size_sub_luns,
                    g.ios,
                    c.periods,
                    pduration_s,
                    to_move,
                    pre,
                    m.avef_us,
                    m.avef_with_mg_us,
                    m.avem_us,
                    m.ave_mg_time_s,
                    x,
                    y
                )
            };
            if missing.is_empty() {
                // Resident: keep its prefetch range warm, extend it if needed.
                for &s in &prefetch {
                    self.subs[s as usize].last_hot_period = period;
                }
                if !warming && !prefetch_missing.is_empty() {
                    let r = row(0.0, 0.0, 0, prefetch_missing.len());
                    self.log(now_ns, "prefetch", &r);
                    for &s in &prefetch_missing {
                        self.enqueue(s, Dir::Promote);
                    }
                }
                continue;
            }
            self.stats.judgments += 1;
            let (x, y) = judge(&m, pduration_s, missing.len() as u32);
            if warming {
                let r = row(x, y, missing.len(), 0);
                self.log(now_ns, "warmup", &r);
                continue;
            }
            if y <= x {
                self.stats.deferred += 1;
                let r = row(x, y, missing.len(), 0);
                self.log(now_ns, "defer", &r);
                continue;
            }
            let want = missing.len() + prefetch_missing.len();
            if !self.make_room(now_ns, period, missing.len()) {
                self.stats.deferred += 1;
                let r = row(x, y, missing.len(), 0);
                self.log(now_ns, "defer_cap", &r);
                continue;
            }
            let prefetch_fits = self.make_room(now_ns, period, want);
            let pre = if prefetch_fits {
                prefetch_missing.len()
            } else {
                0
            };
            let r = row(x, y, missing.len(), pre);
            self.log(now_ns, "promote", &r);
            for &s in &missing {
                self.enqueue(s, Dir::Promote);
            }
            for &s in prefetch_missing.iter().take(pre) {
                self.subs[s as usize].last_hot_period = period;
                self.enqueue(s, Dir::Promote);
            }
        }
        // Demotion of sub-LUNs that left every concentration.
        if !warming {
            // Hold while moves are slowing flash down now: the last
            // period's own AvefWithMg (a stale one from moves long done
            // says nothing about the present).
            let last = self.acc_ring.back().copied().unwrap_or_default();
            let hold = last[FLASH_WITH_MG].n > 0
                && last[FLASH_WITH_MG].mean_us() > self.p.demote_hold_ratio * m.avef_us;
            for s in 0..n_subs {
                let e = self.subs[s as usize];
                if e.place != Place::Memory
                    || period.saturating_sub(e.last_hot_period) < self.p.demote_after_periods as u64
                    || e.queued.is_some()
                {
                    continue;
                }
                if hold {
                    self.stats.demotions_held += 1;
                    let r = format!(
                        ",{s},1,{},,,1,,{:.3},{:.3},{:.3},{:.6},,",
                        self.counts[s as usize],
                        m.avef_us,
                        m.avef_with_mg_us,
                        m.avem_us,
                        m.ave_mg_time_s
                    );
                    self.log(now_ns, "hold_demote", &r);
                    continue;
                }
                let r = format!(
                    ",{s},1,{},,,1,,{:.3},{:.3},{:.3},{:.6},,",
                    self.counts[s as usize],
                    m.avef_us,
                    m.avef_with_mg_us,
                    m.avem_us,
                    m.ave_mg_time_s
                );
                self.log(now_ns, "demote", &r);
                self.enqueue(s, Dir::Demote);
            }
        }
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.period += 1;
        self.period_start_ns = now_ns;
        self.start_moves(now_ns, out);
    }

    /// Under a memory cap: makes sure `needed` more slots will be free,
    /// demoting idle memory sub-LUNs (coldest first, ignoring the hold) if
    /// that is enough. False if even that cannot make room.
    fn make_room(&mut self, now_ns: TimeNs, period: u64, needed: usize) -> bool {
        let queued_promotions = self.queue.iter().filter(|q| q.1 == Dir::Promote).count();
        let queued_demotions = self.queue.iter().filter(|q| q.1 == Dir::Demote).count();
        let available =
            (self.free_slots.len() + queued_demotions).saturating_sub(queued_promotions);
        if available >= needed {
            return true;
        }
        let mut idle: Vec<u32> = (0..self.subs.len() as u32)
            .filter(|&s| {
                let e = self.subs[s as usize];
                e.place == Place::Memory && e.last_hot_period < period && e.queued.is_none()
            })
            .collect();
        if available + idle.len() < needed {
            return false;
        }
        idle.sort_by_key(|&s| (self.counts[s as usize], s));
        for &s in idle.iter().take(needed - available) {
            let r = format!(",{s},1,{},,,1,,,,,,,", self.counts[s as usize]);
            self.log(now_ns, "demote_for_cap", &r);
            self.enqueue(s, Dir::Demote);
        }
        true
    }
}

/// Clears `bits` and returns its runs of set bits as [first, end) ranges.
fn take_runs(bits: &mut [u64]) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    let mut start: Option<u64> = None;
    for (w, word) in bits.iter_mut().enumerate() {
        if *word == 0 && start.is_none() {
            continue;
        }
        for b in 0..64 {
            let i = w as u64 * 64 + b;
            let set = *word >> b & 1 == 1;
            match (set, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    runs.push((s, i));
                    start = None;
                }
                _ => {}
            }
        }
        *word = 0;
    }
    if let Some(s) = start {
        runs.push((s, bits.len() as u64 * 64));
    }
    runs
}

/// The names of the counters this policy reports (`Policy::counters`; the
/// docs define each): reports and experiments look values up by these
/// constants, so a renamed counter is a compile error, not a silent "-".
pub mod counter {
    pub const MEMORY_BYTES: &str = "memory_bytes";
    pub const PEAK_MEMORY_BYTES: &str = "peak_memory_bytes";
    pub const SUB_LUNS_IN_MEMORY: &str = "sub_luns_in_memory";
    pub const PROMOTIONS: &str = "promotions";
    pub const DEMOTIONS: &str = "demotions";
    pub const MOVED_BYTES: &str = "moved_bytes";
    pub const MOVES_QUEUED: &str = "moves_queued";
    pub const MEMORY_IOS: &str = "memory_ios";
    pub const FLASH_IOS: &str = "flash_ios";
    pub const BUFFERED_WRITES: &str = "buffered_writes";
    pub const TRIMS: &str = "trims";
    pub const TRIMS_DURING_MOVE: &str = "trims_during_move";
    pub const DRAIN_MEMORY_SUB_LUNS: &str = "drain_memory_sub_luns";
    pub const DRAIN_MOVING_SUB_LUNS: &str = "drain_moving_sub_luns";
    pub const DRAIN_CANCELLED_PROMOTIONS: &str = "drain_cancelled_promotions";
    pub const PERIODS: &str = "periods";
    pub const CONCENTRATIONS: &str = "concentrations";
    pub const JUDGMENTS: &str = "judgments";
    pub const DEFERRED: &str = "deferred";
    pub const DEMOTIONS_HELD: &str = "demotions_held";
    pub const FLUSH_WAITS: &str = "flush_waits";
    pub const FLUSH_BACK_ROUNDS: &str = "flush_back_rounds";
    pub const FLUSH_BACK_BYTES: &str = "flush_back_bytes";
    pub const DEVICE_ERRORS: &str = "device_errors";
    pub const HOST_IOS_FAILED: &str = "host_ios_failed";
    pub const AVEF_US: &str = "avef_us";
    pub const AVEF_WITH_MG_US: &str = "avef_with_mg_us";
    pub const AVEM_US: &str = "avem_us";
    pub const AVE_MG_TIME_S: &str = "ave_mg_time_s";
    pub const TIERING_TABLE_WRITES: &str = "tiering_table_writes";
    pub const TIERING_TABLE_TRUNCATED_SUB_LUNS: &str = "tiering_table_truncated_sub_luns";
    pub const WARM_PROMOTED_SUB_LUNS: &str = "warm_promoted_sub_luns";
    pub const WARM_PROMOTED_BYTES: &str = "warm_promoted_bytes";

    /// Every name above, in the order `counters()` reports them.
    pub const ALL: &[&str] = &[
        MEMORY_BYTES,
        PEAK_MEMORY_BYTES,
        SUB_LUNS_IN_MEMORY,
        PROMOTIONS,
        DEMOTIONS,
        MOVED_BYTES,
        MOVES_QUEUED,
        MEMORY_IOS,
        FLASH_IOS,
        BUFFERED_WRITES,
        TRIMS,
        TRIMS_DURING_MOVE,
        DRAIN_MEMORY_SUB_LUNS,
        DRAIN_MOVING_SUB_LUNS,
        DRAIN_CANCELLED_PROMOTIONS,
        PERIODS,
        CONCENTRATIONS,
        JUDGMENTS,
        DEFERRED,
        DEMOTIONS_HELD,
        FLUSH_WAITS,
        FLUSH_BACK_ROUNDS,
        FLUSH_BACK_BYTES,
        DEVICE_ERRORS,
        HOST_IOS_FAILED,
        AVEF_US,
        AVEF_WITH_MG_US,
        AVEM_US,
        AVE_MG_TIME_S,
        TIERING_TABLE_WRITES,
        TIERING_TABLE_TRUNCATED_SUB_LUNS,
        WARM_PROMOTED_SUB_LUNS,
        WARM_PROMOTED_BYTES,
    ];
}

impl Policy for Atsmf {
    fn name(&self) -> &str {
        "atsmf"
    }

    fn tier_names(&self) -> Vec<String> {
        vec!["memory".into(), "flash".into()]
    }

    fn on_host_io(&mut self, now_ns: TimeNs, io: HostIo, out: &mut Outbox) {
        self.stats.host_ios += 1;
        if !self.timer_armed {
            self.timer_armed = true;
            self.period_start_ns = now_ns;
            out.timers.push((now_ns + self.period_ns, PERIOD_TIMER));
        }
        let end = io
            .offset_bytes
            .saturating_add(io.size_bytes as u64)
            .min(self.lun_bytes);
        let pi = match self.free_pending.pop() {
            Some(i) => i,
            None => {
                self.pending.push(Pending::default());
                (self.pending.len() - 1) as u32
            }
        };
        if io.op == Op::Flush || io.size_bytes == 0 || io.offset_bytes >= self.lun_bytes {
            // Flushes go to flash, after memory data is written back there
            // (`host_flush`); an IO past the LUN goes there too, so the
            // device reports the error.
            self.pending[pi as usize] = Pending {
                host_id: io.id,
                arrived_ns: now_ns,
                parts_left: 1,
                touched_flash: true,
                during_move: self.any_move_running(),
                failed: None,
            };
            if io.op == Op::Flush {
                self.host_flush(now_ns, pi, out);
                if cfg!(debug_assertions) {
                    self.check_invariants();
                }
                return;
            }
            let rec = Rec::Host {
                pi,
                write_sub: NO_SUB,
                slot: NO_SLOT,
            };
            // Flushes and trims carry no data.
            let buf = matches!(io.op, Op::Read | Op::Write).then_some(BufRef::Host {
                host_id: io.id,
                offset_bytes: 0,
            });
            let (offset, size) = (io.offset_bytes, io.size_bytes as u64);
            self.submit(out, FLASH_DEVICE, io.op, offset, size, rec, buf);
            if cfg!(debug_assertions) {
                self.check_invariants();
            }
            return;
        }
        let sub = (io.offset_bytes / self.sub_lun_bytes) as usize;
        if now_ns - self.period_start_ns < self.collect_ns {
            self.counts[sub] += 1;
        }
        // Parts: one per sub-LUN the IO touches (almost always one).
        let parts = (end - 1) / self.sub_lun_bytes - io.offset_bytes / self.sub_lun_bytes + 1;
        self.pending[pi as usize] = Pending {
            host_id: io.id,
            arrived_ns: now_ns,
            parts_left: parts as u32,
            touched_flash: false,
            during_move: self.any_move_running(),
            failed: None,
        };
        let mut at = io.offset_bytes;
        while at < end {
            let sub_end = (at / self.sub_lun_bytes + 1) * self.sub_lun_bytes;
            let n = sub_end.min(end) - at;
            self.dispatch_part(out, pi, &io, at, n);
            at += n;
        }
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    fn on_device_completion(&mut self, now_ns: TimeNs, _device: usize, tag: u64, out: &mut Outbox) {
        // A completion of no IO in flight is an executor bug that would
        // corrupt the tiering table if ignored: stop here.
        let rec = match self.recs.get(tag as usize) {
            Some(&rec) if !matches!(rec, Rec::Free) => rec,
            _ => panic!("atsmf: a completion for tag {tag}, which is not in flight"),
        };
        self.recs[tag as usize] = Rec::Free;
        self.free_recs.push(tag as u32);
        match rec {
            Rec::Free => unreachable!("a free record was refused above"),
            Rec::TableWrite => self.table_written(out),
            Rec::Host {
                pi,
                write_sub,
                slot,
            } => self.host_part_done(now_ns, pi, write_sub, slot, out),
            Rec::SlotWrite {
                pi,
                sub,
                slot,
                first,
                end,
            } => {
                // Acknowledged in memory: newer than flash until written
                // back (before `host_part_done` completes it, so a FLUSH
                // arriving after the acknowledgement sees it).
                self.mark_dirty(slot, first, end);
                self.host_part_done(now_ns, pi, sub, slot, out)
            }
            Rec::FlushBackRead {
                sub,
                in_sub,
                len,
                staging,
            } => {
                let slot = self.subs[sub as usize].slot;
                self.slot_refs[slot as usize] -= 1;
                let buf = Some(BufRef::Staging {
                    id: staging,
                    offset_bytes: 0,
                });
                let at = sub as u64 * self.sub_lun_bytes + in_sub;
                self.submit(
                    out,
                    FLASH_DEVICE,
                    Op::Write,
                    at,
                    len as u64,
                    Rec::FlushBackWrite { staging },
                    buf,
                );
                self.flush_back_read_done(now_ns, sub, out);
            }
            Rec::FlushBackWrite { staging } => {
                out.release.push(staging);
                self.flush_back_in_flight -= 1;
                self.end_flush_back_round(now_ns, out);
            }
            Rec::BufferRead { pi, region, .. } => {
                let r = region as usize;
                self.buffer_refs[r] -= 1;
                if self.buffer_refs[r] == 0 && self.moves[r].is_none() {
                    // A move may have been waiting for the region.
                    self.start_moves(now_ns, out);
                }
                self.finish_part(now_ns, pi, out);
            }
            Rec::BufferWrite {
                pending,
                sub,
                first,
                end,
            } => {
                let mi = self.subs[sub as usize].mv as usize;
                // The host IO failed (this part or another): sectors not
                // buffered before keep the source's copy as their answer
                // (the buffer there may hold another sub-LUN's bytes);
                // those buffered before hold this sector's bytes, old or
                // new, and are synced again.
                let failed = self.pending[pending as usize].failed.is_some();
                if let Some(mv) = self.moves[mi].as_mut() {
                    mv.buffer_writes_in_flight -= 1;
                    for i in first..end {
                        if !failed {
                            Move::set(&mut mv.buffered, i);
                        }
                        if Move::bit(&mv.buffered, i) {
                            Move::set(&mut mv.unsynced, i);
                            mv.unsynced_any = true;
                        }
                    }
                }
                self.finish_part(now_ns, pending, out);
                self.advance_move(now_ns, sub, out);
            }
            Rec::MoveRead {
                sub,
                offset,
                len,
                staging,
            } => {
                let slot = self.subs[sub as usize].slot;
                let mi = self.subs[sub as usize].mv as usize;
                let dir = self.moves[mi].as_ref().expect("moving").dir;
                let (device, base) = match dir {
                    Dir::Promote => (MEMORY_DEVICE, slot as u64 * self.sub_lun_bytes),
                    Dir::Demote => (FLASH_DEVICE, sub as u64 * self.sub_lun_bytes),
                };
                let buf = Some(BufRef::Staging {
                    id: staging,
                    offset_bytes: 0,
                });
                let rec = Rec::MoveWrite { sub, staging };
                self.submit(out, device, Op::Write, base + offset, len as u64, rec, buf);
            }
            Rec::MoveWrite { sub, staging } => {
                out.release.push(staging);
                let mi = self.subs[sub as usize].mv as usize;
                self.moves[mi].as_mut().expect("moving").chunks_in_flight -= 1;
                self.issue_chunk(sub, out);
                self.advance_move(now_ns, sub, out);
            }
            Rec::SyncRead {
                sub,
                in_sub,
                len,
                staging,
            } => {
                let e = self.subs[sub as usize];
                let dir = self.moves[e.mv as usize].as_ref().expect("moving").dir;
                let (device, at) = match dir {
                    Dir::Promote => (MEMORY_DEVICE, e.slot as u64 * self.sub_lun_bytes + in_sub),
                    Dir::Demote => (FLASH_DEVICE, sub as u64 * self.sub_lun_bytes + in_sub),
                };
                let buf = Some(BufRef::Staging {
                    id: staging,
                    offset_bytes: 0,
                });
                let rec = Rec::SyncWrite { sub, staging };
                self.submit(out, device, Op::Write, at, len as u64, rec, buf);
            }
            Rec::SyncWrite { sub, staging } => {
                out.release.push(staging);
                let mi = self.subs[sub as usize].mv as usize;
                self.moves[mi]
                    .as_mut()
                    .expect("moving")
                    .sync_writes_in_flight -= 1;
                self.advance_move(now_ns, sub, out);
            }
        }
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    fn on_timer(&mut self, now_ns: TimeNs, timer_id: u64, out: &mut Outbox) {
        if timer_id != PERIOD_TIMER {
            return;
        }
        self.end_period(now_ns, out);
        // Keep the period clock running only while there is host IO: an
        // idle volume must not keep the simulation alive forever.
        if self.stats.host_ios > self.last_period_host_ios {
            out.timers.push((now_ns + self.period_ns, PERIOD_TIMER));
        } else {
            self.timer_armed = false;
        }
        self.last_period_host_ios = self.stats.host_ios;
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let s = &self.stats;
        let m = self.measured();
        let mut v = vec![
            (counter::MEMORY_BYTES, self.memory_bytes() as f64),
            (counter::PEAK_MEMORY_BYTES, s.peak_memory_bytes as f64),
            (
                counter::SUB_LUNS_IN_MEMORY,
                self.sub_luns_in_memory().len() as f64,
            ),
            (counter::PROMOTIONS, s.promotions as f64),
            (counter::DEMOTIONS, s.demotions as f64),
            (counter::MOVED_BYTES, s.moved_bytes as f64),
            (counter::MOVES_QUEUED, self.queue.len() as f64),
            (counter::MEMORY_IOS, s.memory_ios as f64),
            (counter::FLASH_IOS, s.flash_ios as f64),
            (counter::BUFFERED_WRITES, s.buffered_writes as f64),
            (counter::TRIMS, s.trims as f64),
            (counter::TRIMS_DURING_MOVE, s.trims_during_move as f64),
            (
                counter::DRAIN_MEMORY_SUB_LUNS,
                s.drain_memory_sub_luns as f64,
            ),
            (
                counter::DRAIN_MOVING_SUB_LUNS,
                s.drain_moving_sub_luns as f64,
            ),
            (
                counter::DRAIN_CANCELLED_PROMOTIONS,
                s.drain_cancelled_promotions as f64,
            ),
            (counter::PERIODS, s.periods as f64),
            (counter::CONCENTRATIONS, self.tracker.current().len() as f64),
            (counter::JUDGMENTS, s.judgments as f64),
            (counter::DEFERRED, s.deferred as f64),
            (counter::DEMOTIONS_HELD, s.demotions_held as f64),
            (counter::FLUSH_WAITS, s.flush_waits as f64),
            (counter::FLUSH_BACK_ROUNDS, s.flush_back_rounds as f64),
            (counter::FLUSH_BACK_BYTES, s.flush_back_bytes as f64),
            (counter::DEVICE_ERRORS, s.device_errors as f64),
            (counter::HOST_IOS_FAILED, s.host_ios_failed as f64),
            (counter::AVEF_US, m.avef_us),
            (counter::AVEF_WITH_MG_US, m.avef_with_mg_us),
            (counter::AVEM_US, m.avem_us),
            (counter::AVE_MG_TIME_S, m.ave_mg_time_s),
        ];
        if let Some(t) = &self.table {
            v.extend([
                (counter::TIERING_TABLE_WRITES, t.writes as f64),
                (
                    counter::TIERING_TABLE_TRUNCATED_SUB_LUNS,
                    t.truncated as f64,
                ),
                (counter::WARM_PROMOTED_SUB_LUNS, t.warm_sub_luns as f64),
                (counter::WARM_PROMOTED_BYTES, t.warm_bytes as f64),
            ]);
        }
        v
    }

    fn logs(&self) -> Vec<(&'static str, String)> {
        vec![("atsmf_decisions.csv", self.decisions.clone())]
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn flush_is_durable(&self) -> bool {
        self.p.flush_writes_back
    }

    /// Whole sectors: the move buffer marks 512-byte sectors as buffered
    /// and its sync copies whole sectors, so a partial-sector write to a
    /// moving sub-LUN would carry the rest of the sector from whatever the
    /// buffer held before.
    fn required_alignment_bytes(&self) -> u64 {
        SECTOR_BYTES
    }

    /// Survives a failed device IO of a host IO (docs/atsmf.md): the host
    /// IO fails, and the IO's bookkeeping runs as if it had landed — a
    /// failed write leaves its range unspecified, so a slot range it
    /// touched counts as newer than flash (written back at the next FLUSH,
    /// demoted with its sub-LUN) and reads keep one answer. A move buffer
    /// range counts as buffered only where it already was: elsewhere the
    /// buffer may still hold another sub-LUN's bytes, so the source's copy
    /// stays the answer. A failed move chunk, sync, FLUSH write-back or
    /// tiering-table write is refused (fail-stop).
    fn on_device_error(
        &mut self,
        now_ns: TimeNs,
        device: usize,
        tag: u64,
        error: IoError,
        out: &mut Outbox,
    ) -> bool {
        let pi = match self.recs.get(tag as usize) {
            Some(Rec::Host { pi, .. } | Rec::SlotWrite { pi, .. } | Rec::BufferRead { pi, .. }) => {
                *pi
            }
            Some(Rec::BufferWrite { pending, .. }) => *pending,
            _ => return false,
        };
        self.stats.device_errors += 1;
        self.pending[pi as usize].failed.get_or_insert(error);
        self.on_device_completion(now_ns, device, tag, out);
        true
    }

    /// With `persistent`: recovers the tiering table (`load_table`).
    fn open(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        if self.table.is_some() {
            self.load_table(stores)?;
        }
        Ok(())
    }

    /// Cancels queued promotions and queues a demotion of every sub-LUN in
    /// memory; a promotion already running is demoted when it ends. Period
    /// boundaries still come but decide nothing.
    fn drain(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        self.drain_called = true;
        // The restart re-promotes what is in memory now, not the empty
        // memory the demotions below leave.
        if self.table.is_some() {
            let snapshot = self.memory_sub_luns();
            let t = self.table.as_mut().unwrap();
            t.frozen = true;
            if t.writing {
                t.last = Some(snapshot);
            } else {
                self.write_table(snapshot, out);
            }
        }
        let subs = &mut self.subs;
        let mut cancelled = 0;
        self.queue.retain(|&(sub, dir)| {
            let keep = dir == Dir::Demote;
            if !keep {
                subs[sub as usize].queued = None;
                cancelled += 1;
            }
            keep
        });
        self.stats.drain_cancelled_promotions = cancelled;
        for sub in 0..self.subs.len() as u32 {
            match self.subs[sub as usize].place {
                Place::Memory => {
                    self.stats.drain_memory_sub_luns += 1;
                    self.enqueue(sub, Dir::Demote);
                }
                Place::Promoting | Place::Demoting => self.stats.drain_moving_sub_luns += 1,
                Place::Flash => {}
            }
        }
        self.start_moves(now_ns, out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Every sub-LUN on flash, nothing queued, moving or in flight.
    fn is_drained(&self) -> bool {
        self.recs.len() == self.free_recs.len()
            && self.pending.len() == self.free_pending.len()
            && self.queue.is_empty()
            && self.moves.iter().all(Option::is_none)
            && self.subs.iter().all(|s| s.place == Place::Flash)
    }

    /// Where a read issued now would go (see the module docs): by the
    /// tiering table, and for a moving sub-LUN per sector run: buffered
    /// sectors in the move buffer (tier memory), the others at the move's
    /// source (flash while promoting, the slot while demoting). Bytes past
    /// the LUN are left out.
    fn locate(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) {
        let from = out.len();
        let end = offset_bytes.saturating_add(len_bytes).min(self.lun_bytes);
        let sub_bytes = self.sub_lun_bytes;
        let flash = |at: u64, hi: u64| Extent {
            len_bytes: hi - at,
            tier: TIER_FLASH,
            device: FLASH_DEVICE,
            device_offset_bytes: at,
        };
        let memory = |at: u64, hi: u64, base: u64| Extent {
            len_bytes: hi - at,
            tier: TIER_MEMORY,
            device: MEMORY_DEVICE,
            device_offset_bytes: base + at % sub_bytes,
        };
        let mut at = offset_bytes;
        while at < end {
            let sub = at / sub_bytes;
            let sub_base = sub * sub_bytes;
            let sub_end = (sub_base + sub_bytes).min(end);
            let s = self.subs[sub as usize];
            let slot_base = s.slot as u64 * sub_bytes;
            match s.place {
                Place::Flash => push_extent(out, from, flash(at, sub_end)),
                Place::Memory => push_extent(out, from, memory(at, sub_end, slot_base)),
                Place::Promoting | Place::Demoting => {
                    let mv = self.moves[s.mv as usize].as_ref().expect("moving");
                    let mut x = at;
                    while x < sub_end {
                        let i = (x - sub_base) / SECTOR_BYTES;
                        let buffered = Move::bit(&mv.buffered, i);
                        let limit = (sub_end - sub_base).div_ceil(SECTOR_BYTES);
                        let j = run_end(&mv.buffered, i, limit, buffered);
                        let hi = (sub_base + j * SECTOR_BYTES).min(sub_end);
                        let ext = if buffered {
                            memory(x, hi, mv.buffer_base)
                        } else if s.place == Place::Promoting {
                            flash(x, hi)
                        } else {
                            memory(x, hi, slot_base)
                        };
                        push_extent(out, from, ext);
                        x = hi;
                    }
                }
            }
            at = sub_end;
        }
    }
}

/// The end of the run of bits equal to `value` that starts at bit `i`, at
/// most `limit` (whole words of the other value are skipped at once).
fn run_end(bits: &[u64], i: u64, limit: u64, value: bool) -> u64 {
    let other = if value { 0 } else { u64::MAX };
    let mut j = i;
    while j < limit {
        let w = bits[(j / 64) as usize];
        if j % 64 == 0 && w == !other && j + 64 <= limit {
            j += 64;
            continue;
        }
        if (w >> (j % 64) & 1 == 1) != value {
            break;
        }
        j += 1;
    }
    j.min(limit)
}

impl Atsmf {
    /// Cheap invariants, checked after every handler in debug builds.
    fn check_invariants(&self) {
        assert!(self.free_slots.len() <= self.slots_total as usize);
        assert!(self.free_recs.len() <= self.recs.len());
        assert!(self.free_pending.len() <= self.pending.len());
        assert!(self.queue.len() <= self.subs.len());
        assert!(self.moves.len() <= self.buffer_refs.len());
        let running = self.moves.iter().filter(|m| m.is_some()).count();
        assert!(
            running <= self.p.max_concurrent_moves as usize,
            "{running} moves run, at most {} may",
            self.p.max_concurrent_moves
        );
        for mv in self.moves.iter().flatten() {
            assert!(mv.next_chunk_offset <= mv.len_bytes);
            assert!(!mv.copy_done || mv.chunks_in_flight == 0);
            assert!(!mv.draining || mv.chunks_in_flight == 0);
            assert!(mv.chunks_in_flight <= self.p.move_iodepth);
        }
        if self.drain_called {
            assert!(
                self.queue.iter().all(|q| q.1 == Dir::Demote),
                "a promotion queued while draining"
            );
        }
        // A write-back round runs only with no move, and holds them off.
        assert!(self.flush_back_in_flight == 0 || !self.flushes_in_round.is_empty());
        assert!(
            self.flushes_in_round.is_empty() || running == 0,
            "a move runs during a FLUSH write-back"
        );
    }

    /// Every invariant, at a cost linear in the sub-LUNs, slots and IOs in
    /// flight: for tests, between events.
    #[doc(hidden)]
    pub fn check_invariants_full(&self) {
        self.check_invariants();
        let n_slots = self.slots_total as usize;
        let mut holder: Vec<Option<u32>> = vec![None; n_slots];
        let mut move_owner: Vec<Option<u32>> = vec![None; self.moves.len()];
        for (i, s) in self.subs.iter().enumerate() {
            let i = i as u32;
            if s.place != Place::Flash {
                let slot = s.slot as usize;
                assert!(
                    holder[slot].is_none(),
                    "slot {slot} held by {:?} and {i}",
                    holder[slot]
                );
                holder[slot] = Some(i);
                assert!(
                    !self.free_slots.contains(&s.slot),
                    "sub-LUN {i}'s slot {slot} is free"
                );
                assert!(
                    !self.slot_free_pending[slot],
                    "sub-LUN {i}'s slot is being freed"
                );
            }
            if let Place::Promoting | Place::Demoting = s.place {
                let mv = self.moves[s.mv as usize]
                    .as_ref()
                    .expect("a moving sub-LUN's move");
                let dir = if s.place == Place::Promoting {
                    Dir::Promote
                } else {
                    Dir::Demote
                };
                assert_eq!(mv.dir, dir, "sub-LUN {i}'s move");
                assert!(move_owner[s.mv as usize].is_none(), "move {} shared", s.mv);
                move_owner[s.mv as usize] = Some(i);
            }
            let queued = self.queue.iter().filter(|q| q.0 == i).count();
            assert_eq!(
                queued,
                usize::from(s.queued.is_some()),
                "sub-LUN {i}: queued"
            );
            if let Some(d) = s.queued {
                assert!(
                    self.queue.contains(&(i, d)),
                    "sub-LUN {i}: queued to go elsewhere"
                );
            }
        }
        for (m, mv) in self.moves.iter().enumerate() {
            assert_eq!(
                mv.is_some(),
                move_owner[m].is_some(),
                "move {m} has no sub-LUN"
            );
        }
        let mut buffer_refs = vec![0u32; self.buffer_refs.len()];
        let mut slot_refs = vec![0u32; n_slots];
        let mut writes = vec![0u32; self.subs.len()];
        // Per move: buffer writes, copy chunks, sync IOs in flight.
        let mut move_ios = vec![(0u32, 0u32, 0u32); self.moves.len()];
        let mut flush_back = 0u32;
        let mut free_recs = vec![false; self.recs.len()];
        for &r in &self.free_recs {
            assert!(!free_recs[r as usize], "tag {r} freed twice");
            free_recs[r as usize] = true;
        }
        let mut table_writes = 0u32;
        for (tag, rec) in self.recs.iter().enumerate() {
            assert_eq!(
                matches!(rec, Rec::Free),
                free_recs[tag],
                "tag {tag}: free list vs record"
            );
            let mv_of = |sub: u32| self.subs[sub as usize].mv as usize;
            match *rec {
                Rec::Free => {}
                Rec::TableWrite => table_writes += 1,
                Rec::Host {
                    write_sub, slot, ..
                } => {
                    if slot != NO_SLOT {
                        slot_refs[slot as usize] += 1;
                    }
                    if write_sub != NO_SUB {
                        writes[write_sub as usize] += 1;
                    }
                }
                Rec::SlotWrite { sub, slot, .. } => {
                    slot_refs[slot as usize] += 1;
                    writes[sub as usize] += 1;
                }
                Rec::FlushBackRead { sub, .. } => {
                    slot_refs[self.subs[sub as usize].slot as usize] += 1;
                    flush_back += 1;
                }
                Rec::FlushBackWrite { .. } => flush_back += 1,
                Rec::BufferWrite { sub, .. } => move_ios[mv_of(sub)].0 += 1,
                Rec::BufferRead { sub, region, .. } => {
                    buffer_refs[region as usize] += 1;
                    // The region is another sub-LUN's only once no read of
                    // it is in flight.
                    let r = region as usize;
                    let owner = (self.moves.get(r).is_some_and(|m| m.is_some()))
                        .then(|| move_owner[r])
                        .flatten();
                    assert!(
                        owner.is_none_or(|o| o == sub),
                        "buffer region {r} moves sub-LUN {owner:?} under a read of sub-LUN {sub}"
                    );
                }
                Rec::MoveRead { sub, .. } | Rec::MoveWrite { sub, .. } => {
                    move_ios[mv_of(sub)].1 += 1
                }
                Rec::SyncRead { sub, .. } | Rec::SyncWrite { sub, .. } => {
                    move_ios[mv_of(sub)].2 += 1
                }
            }
        }
        assert_eq!(
            flush_back, self.flush_back_in_flight,
            "FLUSH write-back IOs in flight"
        );
        assert_eq!(
            table_writes,
            u32::from(self.table.as_ref().is_some_and(|t| t.writing)),
            "tiering-table writes in flight"
        );
        let draining = self
            .subs
            .iter()
            .filter(|s| s.flush_back == FlushBack::Draining)
            .count();
        assert_eq!(
            draining as u32, self.flush_back_draining,
            "sub-LUNs draining for a write-back"
        );
        for (pi, _, offset, _) in &self.held_writes {
            let sub = (offset / self.sub_lun_bytes) as usize;
            assert!(
                self.subs[sub].flush_back != FlushBack::Idle,
                "a write held for sub-LUN {sub}, which writes nothing back"
            );
            assert!(self.pending[*pi as usize].parts_left > 0);
        }
        if self.flushes_in_round.is_empty() {
            assert!(
                self.subs.iter().all(|s| s.flush_back == FlushBack::Idle)
                    && self.held_writes.is_empty()
            );
        }
        // Dirty sectors only in slots of memory sub-LUNs (a demotion
        // cleared its slot's).
        for (slot, held) in holder.iter().enumerate() {
            if self.slot_dirty_any[slot] {
                assert!(
                    held.is_some_and(|sub| self.subs[sub as usize].place != Place::Flash),
                    "slot {slot} has dirty sectors but holds no sub-LUN"
                );
            }
        }
        for slot in 0..n_slots {
            assert_eq!(
                slot_refs[slot], self.slot_refs[slot],
                "slot {slot}: refs vs IOs in flight"
            );
            let free = self.free_slots.contains(&(slot as u32));
            let pending = self.slot_free_pending[slot];
            assert!(
                !pending || slot_refs[slot] > 0,
                "slot {slot} waits for no IO"
            );
            assert_eq!(
                usize::from(holder[slot].is_some()) + usize::from(free) + usize::from(pending),
                1,
                "slot {slot}: held {:?}, free {free}, being freed {pending}",
                holder[slot]
            );
        }
        for (i, s) in self.subs.iter().enumerate() {
            assert_eq!(
                writes[i], s.host_writes_in_flight,
                "sub-LUN {i}: writes in flight"
            );
        }
        assert_eq!(
            buffer_refs, self.buffer_refs,
            "reads in flight per buffer region"
        );
        for (m, mv) in self.moves.iter().enumerate() {
            if let Some(mv) = mv {
                let (buffer, chunks, sync) = move_ios[m];
                assert_eq!(
                    buffer, mv.buffer_writes_in_flight,
                    "move {m}: buffer writes"
                );
                assert_eq!(chunks, mv.chunks_in_flight, "move {m}: copy chunks");
                assert_eq!(sync, mv.sync_writes_in_flight, "move {m}: sync IOs");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;
    const SUB: u64 = 64 * KIB;

    /// 4 sub-LUNs of 64 KiB, 16 KiB move chunks, 4 in flight, a 64 KiB buffer.
    fn small() -> Atsmf {
        let p = AtsmfParams {
            sub_lun_size_bytes: ByteCount(SUB),
            move_chunk_bytes: ByteCount(16 * KIB),
            buffer_bytes: ByteCount(SUB),
            period_s: 1.0,
            collect_s: 1.0,
            ..AtsmfParams::default()
        };
        Atsmf::new(p, 4 * SUB, 5 * SUB).unwrap()
    }

    fn host(a: &mut Atsmf, id: u64, op: Op, offset: u64, size: u32) -> Outbox {
        let mut out = Outbox::default();
        let io = HostIo {
            id,
            op,
            offset_bytes: offset,
            size_bytes: size,
            tenant: 0,
        };
        a.on_host_io(0, io, &mut out);
        out
    }

    fn complete(a: &mut Atsmf, dev: usize, tag: u64) -> Outbox {
        let mut out = Outbox::default();
        a.on_device_completion(1_000, dev, tag, &mut out);
        out
    }

    fn ios(out: &Outbox) -> Vec<(usize, Op, u64, u32)> {
        out.device_ios
            .iter()
            .map(|(d, io)| (*d, io.op, io.offset_bytes, io.size_bytes))
            .collect()
    }

    /// The tiering table by hand: a table listing sub-LUN 2 brings it up
    /// in memory with flash's bytes; another geometry, a damaged table and
    /// a sub-LUN listed twice are refused; an all-zero area starts cold.
    #[test]
    fn a_persistent_tiering_table_is_loaded_or_refused() {
        use crate::slot_meta::{copy_offset, encode_header};
        let p = AtsmfParams {
            sub_lun_size_bytes: ByteCount(SUB),
            move_chunk_bytes: ByteCount(16 * KIB),
            buffer_bytes: ByteCount(SUB),
            persistent: true,
            ..AtsmfParams::default()
        };
        let flash_bytes = 4 * SUB + TABLE_BYTES;
        assert_eq!(lun_bytes(&p, flash_bytes), 4 * SUB);
        let flash: Vec<u8> = (0..flash_bytes).map(|i| (i / 512 % 251) as u8).collect();
        let stores_with = |fields: &[u64], damage: bool| {
            let mut f = flash.clone();
            f[4 * SUB as usize..].fill(0);
            let mut page = encode_header(TABLE_MAGIC, fields, 1);
            if damage {
                page[100] ^= 1;
            }
            let at = (4 * SUB + copy_offset(0, 0)) as usize;
            f[at..at + page.len()].copy_from_slice(&page);
            vec![vec![0u8; 5 * SUB as usize], f]
        };
        let open = |stores: &mut Vec<Vec<u8>>| {
            let mut a = Atsmf::new(p.clone(), flash_bytes, 5 * SUB).unwrap();
            a.open(stores).map(|_| a).map_err(|e| e.to_string())
        };
        let mut stores = stores_with(&[SUB, 4 * SUB, 4, 1, 2], false);
        let a = open(&mut stores).unwrap();
        assert_eq!(a.sub_luns_in_memory(), vec![2]);
        let slot = a.subs[2].slot as usize * SUB as usize;
        assert_eq!(
            stores[0][slot..slot + SUB as usize],
            flash[2 * SUB as usize..3 * SUB as usize]
        );
        assert_eq!(a.table.as_ref().unwrap().warm_bytes, SUB);
        let e = open(&mut stores_with(&[2 * SUB, 4 * SUB, 4, 1, 2], false))
            .err()
            .unwrap();
        assert!(
            e.contains("sub_lun_size_bytes 131072 on the device, 65536 in the config"),
            "{e}"
        );
        let e = open(&mut stores_with(&[SUB, 4 * SUB, 4, 1, 2], true))
            .err()
            .unwrap();
        assert!(e.contains("unreadable") && e.contains("checksum"), "{e}");
        let e = open(&mut stores_with(&[SUB, 4 * SUB, 4, 2, 1, 1], false))
            .err()
            .unwrap();
        assert!(e.contains("sub-LUN 1 twice"), "{e}");
        let mut cold = vec![vec![0u8; 5 * SUB as usize], flash.clone()];
        cold[1][4 * SUB as usize..].fill(0);
        assert!(open(&mut cold).unwrap().sub_luns_in_memory().is_empty());
    }

    /// Issue 35: the table records the memory device's volume id. A memory
    /// device of another volume is refused before the warm copy would
    /// overwrite it (both stores untouched); a new memory file is adopted
    /// (memory is scratch: flash holds every flushed byte) and the table
    /// rewritten at once to record it; a table from before ids opens and
    /// records the memory device's id. Memory that cannot tell (RAM) is
    /// not checked.
    #[test]
    fn the_tiering_table_is_bound_to_its_memory_device() {
        use crate::slot_meta::{copy_offset, decode_header, encode_header, newest};
        use tierlab_core::testkit::LabelledStores;
        use tierlab_core::volume::VolumeId;
        let p = AtsmfParams {
            sub_lun_size_bytes: ByteCount(SUB),
            move_chunk_bytes: ByteCount(16 * KIB),
            buffer_bytes: ByteCount(SUB),
            persistent: true,
            ..AtsmfParams::default()
        };
        let flash_bytes = 4 * SUB + TABLE_BYTES;
        let (mem_a, mem_b, flash_id) = (0xa1u128, 0xb2u128, 0xf1u128);
        let flash_with = |fields: &[u64]| {
            let mut f: Vec<u8> = (0..flash_bytes).map(|i| (i / 512 % 251) as u8).collect();
            f[4 * SUB as usize..].fill(0);
            let page = encode_header(TABLE_MAGIC, fields, 1);
            let at = (4 * SUB + copy_offset(0, 0)) as usize;
            f[at..at + page.len()].copy_from_slice(&page);
            f
        };
        let bound_to_a = [SUB, 4 * SUB, 4, 1, 2, 0, mem_a as u64];
        let other_memory: Vec<u8> = (0..5 * SUB).map(|i| (i % 7) as u8 + 1).collect();
        let stores = |flash: Vec<u8>, memory_id: Option<u128>| {
            LabelledStores::new(
                vec![other_memory.clone(), flash],
                &[memory_id, Some(flash_id)],
                &["memory (file m.img)", "flash (file f.img)"],
            )
        };
        let open = |s: &mut LabelledStores| {
            let mut a = Atsmf::new(p.clone(), flash_bytes, 5 * SUB).unwrap();
            a.open(s).map(|_| a).map_err(|e| e.to_string())
        };
        let recorded = |s: &LabelledStores| {
            let at = 4 * SUB as usize;
            let page = |c: u8| {
                let o = at + copy_offset(0, c) as usize;
                decode_header(TABLE_MAGIC, &s.data[1][o..o + 4096], TABLE_PAGE_FIELDS)
            };
            let (_, f, _) = newest(page(0), page(1)).unwrap();
            let n = f[3] as usize;
            crate::binding::from_fields([f[4 + n], f[5 + n]])
        };
        // Another volume's memory device: refused, nothing written.
        let mut s = stores(flash_with(&bound_to_a), Some(mem_b));
        let before = s.data.clone();
        let e = open(&mut s).err().unwrap();
        for want in [
            "ATSMF's tiering table on the flash device flash (file f.img) belongs to another \
             memory device",
            "records volume id 000000000000000000000000000000a1",
            "the memory device memory (file m.img) is volume 000000000000000000000000000000b2",
            "or set persistent = false to start cold",
            "the open would overwrite the memory device",
        ] {
            assert!(e.contains(want), "{want:?} not in: {e}");
        }
        assert!(s.data == before, "neither store changed");
        // The recorded one: warm, nothing rewritten.
        let mut s = stores(flash_with(&bound_to_a), Some(mem_a));
        let a = open(&mut s).unwrap();
        assert_eq!(a.sub_luns_in_memory(), vec![2]);
        assert_eq!(recorded(&s), VolumeId::new(mem_a));
        // A new memory file: adopted, warm, and recorded at once.
        let mut s = stores(flash_with(&bound_to_a), None);
        s.replace_with_new(MEMORY_DEVICE, mem_b);
        let a = open(&mut s).unwrap();
        assert_eq!(a.sub_luns_in_memory(), vec![2]);
        assert_eq!(recorded(&s), VolumeId::new(mem_b));
        let again = open(&mut s).unwrap();
        assert_eq!(
            again.sub_luns_in_memory(),
            vec![2],
            "the table still lists it"
        );
        // A table from before ids: opens over any memory device, records it.
        let mut s = stores(flash_with(&[SUB, 4 * SUB, 4, 1, 2]), Some(mem_b));
        assert_eq!(recorded(&s), None);
        open(&mut s).unwrap();
        assert_eq!(recorded(&s), VolumeId::new(mem_b));
        // RAM (cannot tell): not checked, the recorded id kept.
        let mut s = stores(flash_with(&bound_to_a), None);
        let a = open(&mut s).unwrap();
        assert_eq!(a.table.as_ref().unwrap().memory_id, VolumeId::new(mem_a));
        // A cold start records the memory device's id for the first table.
        let mut s = stores(flash_with(&[]), Some(mem_a));
        s.data[1][4 * SUB as usize..].fill(0);
        let a = open(&mut s).unwrap();
        assert_eq!(a.table.as_ref().unwrap().memory_id, VolumeId::new(mem_a));
    }

    #[test]
    fn judgment_equations_by_hand() {
        // Avef 80 µs, AvefWithMg 120 µs, Avem 10 µs, 2 s per sub-LUN; 3
        // sub-LUNs, Pduration 32.88 s (Table 2, A = 2):
        // Xduration = 6 s, Yduration = 26.88 s,
        // X = 40 µs × 6 s = 240, Y = 70 µs × 26.88 s = 1881.6 → promote.
        let m = Measured {
            avef_us: 80.0,
            avef_with_mg_us: 120.0,
            avem_us: 10.0,
            ave_mg_time_s: 2.0,
        };
        let (x, y) = judge(&m, 32.88, 3);
        assert!(
            (x - 240.0).abs() < 1e-9 && (y - 1881.6).abs() < 1e-9,
            "{x} {y}"
        );
        // A remaining duration shorter than the move: Y < 0 < X → defer.
        let (x, y) = judge(&m, 5.0, 3);
        assert!(y < 0.0 && x > 0.0);
    }

    #[test]
    fn move_buffer_routes_writes_and_reads_then_syncs_and_flips() {
        let mut a = small();
        let flash = FLASH_DEVICE;
        let mem = MEMORY_DEVICE;
        // Promote sub-LUN 1 (slot 0): four 16 KiB chunk reads from flash.
        let mut out = Outbox::default();
        a.enqueue(1, Dir::Promote);
        a.start_moves(0, &mut out);
        let reads = ios(&out);
        assert_eq!(
            reads,
            (0..4)
                .map(|i| (flash, Op::Read, SUB + i * 16 * KIB, 16 * 1024))
                .collect::<Vec<_>>()
        );
        let chunk_tags: Vec<u64> = out.device_ios.iter().map(|(_, io)| io.tag).collect();
        assert_eq!(a.subs[1].place, Place::Promoting);
        assert_eq!(a.memory_bytes(), SUB, "the slot is held from the start");

        // A write during the move goes to the buffer (memory, after the slot).
        let w = host(&mut a, 1, Op::Write, SUB + 4096, 4096);
        assert_eq!(ios(&w), vec![(mem, Op::Write, 4 * SUB + 4096, 4096)]);
        // A read racing it is served from the source: the buffer holds its
        // bytes only once it has landed.
        let r = host(&mut a, 10, Op::Read, SUB + 4096, 4096);
        assert_eq!(ios(&r), vec![(flash, Op::Read, SUB + 4096, 4096)]);
        complete(&mut a, flash, r.device_ios[0].1.tag);
        // It lands: the host IO completes from memory (the copy runs: no
        // sync yet).
        let o = complete(&mut a, mem, w.device_ios[0].1.tag);
        assert_eq!(o.complete, vec![(1, TIER_MEMORY)]);
        assert!(o.device_ios.is_empty());
        // Now a read of that range is served from the buffer ...
        let r = host(&mut a, 2, Op::Read, SUB + 4096, 4096);
        assert_eq!(ios(&r), vec![(mem, Op::Read, 4 * SUB + 4096, 4096)]);
        let done = complete(&mut a, mem, r.device_ios[0].1.tag);
        assert_eq!(done.complete, vec![(2, TIER_MEMORY)]);
        // ... a read elsewhere from the source (flash) ...
        let r = host(&mut a, 3, Op::Read, SUB + 32 * KIB, 4096);
        assert_eq!(ios(&r), vec![(flash, Op::Read, SUB + 32 * KIB, 4096)]);
        // ... and one straddling both: its unbuffered sector run from flash,
        // its buffered run from the buffer, completing on the last.
        let r = host(&mut a, 4, Op::Read, SUB, 8192);
        assert_eq!(
            ios(&r),
            vec![
                (flash, Op::Read, SUB, 4096),
                (mem, Op::Read, 4 * SUB + 4096, 4096)
            ]
        );
        assert!(
            complete(&mut a, flash, r.device_ios[0].1.tag)
                .complete
                .is_empty()
        );
        assert_eq!(
            complete(&mut a, mem, r.device_ios[1].1.tag).complete,
            vec![(4, TIER_FLASH)]
        );

        // A second buffered write stays in flight while the copy ends.
        let w2 = host(&mut a, 11, Op::Write, SUB + 12 * KIB, 4096);
        assert_eq!(ios(&w2), vec![(mem, Op::Write, 4 * SUB + 12 * KIB, 4096)]);
        let w2_tag = w2.device_ios[0].1.tag;
        // Chunk reads complete → chunk writes into the slot (memory offset
        // 0..); the last one ends the copy, and the sync reads the landed
        // write's sector run from the buffer.
        let mut sync = Vec::new();
        for (i, &t) in chunk_tags.iter().enumerate() {
            let o = complete(&mut a, flash, t);
            assert_eq!(
                ios(&o),
                vec![(mem, Op::Write, i as u64 * 16 * KIB, 16 * 1024)]
            );
            let o2 = complete(&mut a, mem, o.device_ios[0].1.tag);
            if i + 1 < chunk_tags.len() {
                assert!(o2.device_ios.is_empty());
            } else {
                assert_eq!(ios(&o2), vec![(mem, Op::Read, 4 * SUB + 4096, 4096)]);
                sync = o2.device_ios.clone();
            }
        }
        // ... and writes it into the slot; the second write is still in
        // flight: no flip yet.
        let o = complete(&mut a, mem, sync[0].1.tag);
        assert_eq!(ios(&o), vec![(mem, Op::Write, 4096, 4096)]);
        let o = complete(&mut a, mem, o.device_ios[0].1.tag);
        assert!(o.device_ios.is_empty());
        assert_eq!(
            a.subs[1].place,
            Place::Promoting,
            "flips after every buffered write"
        );
        // The second write lands: synced in turn, then the table flips.
        let o = complete(&mut a, mem, w2_tag);
        assert_eq!(o.complete, vec![(11, TIER_MEMORY)]);
        assert_eq!(ios(&o), vec![(mem, Op::Read, 4 * SUB + 12 * KIB, 4096)]);
        let o = complete(&mut a, mem, o.device_ios[0].1.tag);
        assert_eq!(ios(&o), vec![(mem, Op::Write, 12 * KIB, 4096)]);
        let o = complete(&mut a, mem, o.device_ios[0].1.tag);
        assert!(o.device_ios.is_empty());
        assert_eq!(a.subs[1].place, Place::Memory);
        assert_eq!(a.stats.promotions, 1);
        // Now every IO to sub-LUN 1 goes to its slot; other sub-LUNs to flash.
        let r5 = host(&mut a, 5, Op::Read, SUB + 8192, 512);
        assert_eq!(ios(&r5), vec![(mem, Op::Read, 8192, 512)]);
        let r = host(&mut a, 6, Op::Write, 2 * SUB, 512);
        assert_eq!(ios(&r), vec![(flash, Op::Write, 2 * SUB, 512)]);
        // An IO across the boundary of sub-LUNs 1 and 2 is split.
        let r7 = host(&mut a, 7, Op::Read, 2 * SUB - 512, 1024);
        assert_eq!(
            ios(&r7),
            vec![
                (mem, Op::Read, SUB - 512, 512),
                (flash, Op::Read, 2 * SUB, 512)
            ]
        );

        // Demotion: reads of unbuffered sectors come from the memory source
        // (tier memory); writes go to the buffer; the sync goes to flash.
        let mut out = Outbox::default();
        a.enqueue(1, Dir::Demote);
        a.start_moves(0, &mut out);
        assert_eq!(out.device_ios.len(), 4);
        assert!(
            out.device_ios
                .iter()
                .all(|(d, io)| *d == mem && io.op == Op::Read)
        );
        let chunk_tags: Vec<u64> = out.device_ios.iter().map(|(_, io)| io.tag).collect();
        let r = host(&mut a, 8, Op::Read, SUB + 40 * KIB, 4096);
        assert_eq!(ios(&r), vec![(mem, Op::Read, 40 * KIB, 4096)]);
        assert_eq!(
            complete(&mut a, mem, r.device_ios[0].1.tag).complete,
            vec![(8, TIER_MEMORY)]
        );
        let w = host(&mut a, 9, Op::Write, SUB + 60 * KIB, 4096);
        assert_eq!(ios(&w), vec![(mem, Op::Write, 4 * SUB + 60 * KIB, 4096)]);
        complete(&mut a, mem, w.device_ios[0].1.tag);
        for &t in &chunk_tags {
            let o = complete(&mut a, mem, t);
            assert_eq!(o.device_ios[0].0, flash);
            let last = complete(&mut a, flash, o.device_ios[0].1.tag);
            if t == *chunk_tags.last().unwrap() {
                // Copy done: sync the buffered sectors to flash.
                assert_eq!(ios(&last), vec![(mem, Op::Read, 4 * SUB + 60 * KIB, 4096)]);
                let w = complete(&mut a, mem, last.device_ios[0].1.tag);
                assert_eq!(ios(&w), vec![(flash, Op::Write, SUB + 60 * KIB, 4096)]);
                complete(&mut a, flash, w.device_ios[0].1.tag);
            }
        }
        assert_eq!(a.subs[1].place, Place::Flash);
        assert_eq!(a.stats.demotions, 1);
        // Reads 5 and 7 of the old slot are still in flight: the slot is
        // not reusable until they finish.
        assert_eq!(a.memory_bytes(), SUB);
        complete(&mut a, mem, r5.device_ios[0].1.tag);
        assert_eq!(a.memory_bytes(), SUB);
        assert_eq!(
            complete(&mut a, mem, r7.device_ios[0].1.tag).complete,
            vec![]
        );
        assert_eq!(a.memory_bytes(), 0);
    }

    #[test]
    fn the_move_buffer_is_reused_only_after_reads_of_it_finish() {
        // One buffer region (max_concurrent_moves 1): sub-LUNs 1 and 2
        // promoted one after the other.
        let mut a = small();
        let mem = MEMORY_DEVICE;
        let mut out = Outbox::default();
        a.enqueue(1, Dir::Promote);
        a.enqueue(2, Dir::Promote);
        a.start_moves(0, &mut out);
        let chunks: Vec<(usize, u64)> = out.device_ios.iter().map(|(d, io)| (*d, io.tag)).collect();
        // A buffered write to sub-LUN 1 lands; a read of it is served from
        // the buffer and stays in flight.
        let w = host(&mut a, 1, Op::Write, SUB + 4096, 4096);
        complete(&mut a, mem, w.device_ios[0].1.tag);
        let r = host(&mut a, 2, Op::Read, SUB + 4096, 4096);
        assert_eq!(ios(&r), vec![(mem, Op::Read, 4 * SUB + 4096, 4096)]);
        // The move copies, syncs and flips.
        let mut pending: Vec<(usize, u64)> = chunks;
        while let Some((d, t)) = pending.pop() {
            let o = complete(&mut a, d, t);
            pending.extend(o.device_ios.iter().map(|(d, io)| (*d, io.tag)));
        }
        assert_eq!(a.subs[1].place, Place::Memory);
        // Sub-LUN 2's promotion must not take the buffer region while the
        // read of it is in flight: a write there could land before the
        // read samples it (sub-LUN 2's data in sub-LUN 1's read).
        assert_eq!(a.subs[2].place, Place::Flash, "waits for the buffer");
        let o = complete(&mut a, mem, r.device_ios[0].1.tag);
        assert_eq!(o.complete, vec![(2, TIER_MEMORY)]);
        assert_eq!(a.subs[2].place, Place::Promoting, "starts once it is free");
        let w = host(&mut a, 3, Op::Write, 2 * SUB + 4096, 4096);
        assert_eq!(ios(&w), vec![(mem, Op::Write, 4 * SUB + 4096, 4096)]);
    }

    #[test]
    fn a_move_copies_only_after_writes_in_flight_to_the_source_land() {
        let mut a = small();
        // A write to sub-LUN 2 on flash, still in flight when its promotion starts.
        let w = host(&mut a, 1, Op::Write, 2 * SUB + 512, 512);
        assert_eq!(ios(&w), vec![(FLASH_DEVICE, Op::Write, 2 * SUB + 512, 512)]);
        let mut out = Outbox::default();
        a.enqueue(2, Dir::Promote);
        a.start_moves(0, &mut out);
        assert!(out.device_ios.is_empty(), "copy must wait: {:?}", ios(&out));
        assert_eq!(a.subs[2].place, Place::Promoting);
        // A new write already goes to the buffer.
        let w2 = host(&mut a, 2, Op::Write, 2 * SUB + 4096, 512);
        assert_eq!(ios(&w2)[0].0, MEMORY_DEVICE);
        // The first write lands: now the copy starts.
        let o = complete(&mut a, FLASH_DEVICE, w.device_ios[0].1.tag);
        assert_eq!(o.complete, vec![(1, TIER_FLASH)]);
        assert_eq!(o.device_ios.len(), 4);
        assert!(
            o.device_ios
                .iter()
                .all(|(d, io)| *d == FLASH_DEVICE && io.op == Op::Read)
        );
    }

    #[test]
    fn memory_cap_demotes_idle_sub_luns_first_or_defers() {
        let p = AtsmfParams {
            sub_lun_size_bytes: ByteCount(SUB),
            move_chunk_bytes: ByteCount(16 * KIB),
            buffer_bytes: ByteCount(SUB),
            memory_cap_bytes: Some(ByteCount(2 * SUB)),
            ..AtsmfParams::default()
        };
        let mut a = Atsmf::new(p, 8 * SUB, 3 * SUB).unwrap();
        assert_eq!(a.slots_total, 2);
        // Two sub-LUNs in memory, 0 idle since period 0, 1 hot now.
        for s in [0, 1] {
            a.subs[s].place = Place::Memory;
            a.subs[s].slot = a.free_slots.pop_first().unwrap();
        }
        a.subs[1].last_hot_period = 5;
        // One more slot needed in period 5: sub-LUN 0 (idle) gives way.
        assert!(a.make_room(0, 5, 1));
        assert_eq!(a.subs[0].queued, Some(Dir::Demote));
        // Two more: only one idle sub-LUN can give way → refused.
        assert!(!a.make_room(0, 5, 2));
        assert!(a.decision_log().contains("demote_for_cap"));
    }
}
