//! A page cache in front of a slower device, as a sans-IO policy over two
//! devices: device 0 is the cache device (DRAM, an SSD), device 1 the
//! backing device. Host IOs are split into pages (4 KiB by default); the
//! cache keeps whole pages, so an IO that does not start or end on a page
//! boundary is widened to whole pages (the model charges the device for the
//! whole page, as a real page cache does when it must read-modify-write).
//!
//! Write modes: write-back (writes go to the cache device only; dirty pages
//! reach the backing device by flushing), write-through (both, the host IO
//! completes when both did), write-around (the backing device only; a cached
//! copy is invalidated). Reads that hit every page are served by the cache
//! device; missing pages are read from the backing device and, if admitted,
//! written into the cache device by a real device IO (a *fill*).
//!
//! Data movement is explicit so that a real executor (and the property
//! tests) can move bytes: every device IO's tag names a buffer (see
//! [`decode_tag`]). A device read fills the buffer at the given page index, a
//! device write takes its data from it *when the write is submitted*. Host
//! buffers are the host IO's own memory; staging buffers are the policy's
//! (used by flushes: cache-device reads into staging, then one merged
//! backing write out of it).
//!
//! Correctness rules (each closes a race found while designing the tests):
//! - Writes to one cache slot are serialised per page (a later write waits
//!   for the earlier one), so the slot's final content is the newest write.
//! - A slot is reused only when no device IO on it is in flight, so a late
//!   write cannot clobber another page's data and a read in flight keeps
//!   reading the page it asked for.
//! - A page is flushed only when no write to its slot is in flight (else the
//!   flush might read the old data and mark the new data clean), at most one
//!   flush per page is in flight (backing versions never go backwards), and
//!   the page is marked clean only if no host write arrived since the flush
//!   read its data (a generation counter).
//! - A dirty page chosen for eviction stays readable from its slot until its
//!   write-back completes; a host write to it re-admits it.
//! - A fill is abandoned when the page was written after the backing read
//!   started, and not started while a direct backing write of the page is in
//!   flight, so a fill never installs stale data.
//!
//! Trims (a hint that a range's content is no longer needed): the backing
//! range is trimmed (`Op::Trim`, the executor punches a hole), and when that
//! completes the cached pages the trim covers entirely are dropped, clean or
//! dirty (a dirty page's write-back is skipped: its backing copy is a hole
//! now). Until then the pages stay cached, so a read during the trim never
//! sees an older backing version. A page is kept (with its newest data,
//! which a trimmed page may still read back) when a device IO writes its slot
//! or flushes it, or when a flush write of it raced the backing trim while
//! it was dirty (the backing may hold that flush's older data, landed after
//! the hole: the page must still be written back). The host trim completes
//! with the backing trim.
//!
//! Host FLUSH (durability, docs/crash-consistency.md): the cache keeps no
//! persistent metadata, so a restart starts cold and only the backing
//! device counts. A FLUSH therefore completes when every page dirty at its
//! arrival has been written back (at that generation or later; the
//! executor then syncs every device). Write-through and write-around hold
//! nothing dirty, so their FLUSH completes at once.
//!
//! `drain` flushes every dirty page; `locate` reports a page in the cache
//! tier (its slot) while its slot holds valid data, else in the backing
//! tier — exactly where a read issued now would go.

use std::collections::{BTreeSet, VecDeque};

// Fx hashing: page and tag keys are not adversarial, and SipHash was a
// tenth of the served write path (perf, 4 KiB random writes).
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use tierlab_cache::Eviction;
use tierlab_core::policy::{BufRef, Extent, HostIo, IoError, OpenError, Outbox, Policy, Stores};
use tierlab_core::{DeviceIo, Op, ParamError, TimeNs};

use crate::extent::push_extent;
use crate::free_slots::FreeSlots;
use crate::streams::SeqStreams;

mod flush;
mod host_io;
mod invariants;
mod pacing;
pub(crate) mod params;
mod persist;
mod policy;
mod slots;
mod stats;
mod tag;
mod trim;
mod writeback;

use crate::slot_meta::{self, CommitState, SlotTable};
pub use params::{Admission, ByteCount, CacheParams, WriteMode};
pub use stats::{CacheStats, counter};
pub use tag::{Buffer, decode_tag, encode_tag};

pub const CACHE_DEVICE: usize = 0;
pub const BACKING_DEVICE: usize = 1;
/// Tier indices in `Outbox::complete`.
pub const TIER_CACHE: u16 = 0;
pub const TIER_BACKING: u16 = 1;

const TAG_STAGING: u64 = 1 << 63;
const TAG_PAGE_BITS: u32 = 22;
const TAG_ID_BITS: u32 = 41;
const TAG_ID_MASK: u64 = (1 << TAG_ID_BITS) - 1;
const TAG_PAGE_MASK: u64 = (1 << TAG_PAGE_BITS) - 1;
const IDLE_TIMER: u64 = 1;
/// Wakes the paced write-back (`pacing`).
const WRITEBACK_TIMER: u64 = 2;
/// Staging ids of metadata writes and flushes (flush staging ids stay
/// below it).
const META_STAGING: u64 = 1 << (TAG_ID_BITS - 1);
const STAGING_ID_MASK: u64 = META_STAGING - 1;
const MAGIC_HEADER: &[u8; 4] = b"TLCH";
const MAGIC_ENTRIES: &[u8; 4] = b"TLCE";
/// Block + commit + flags (`slot_meta::FLAG_DIRTY`): 16-byte entries
/// without flags were tierlab's first format (every entry recovered).
const META_ENTRY_BYTES: u64 = slot_meta::FLAGGED_ENTRY_BYTES;
/// Header fields: kind (1 cache, 2 flashcache), page bytes, slots, entry
/// bytes, backing device bytes, associativity, sets, clean (1: written by
/// a clean stop after every page was written back).
const HEADER_FIELDS: [&str; 7] = [
    "policy",
    "page bytes",
    "slots",
    "entry bytes",
    "backing device bytes",
    "associativity",
    "sets",
];

/// Per-set dirty-threshold cleaning (flashcache): set of page p is
/// `(p / assoc) % num_sets`.
pub(crate) struct SetCleaning {
    pub assoc: u64,
    pub num_sets: u64,
    /// A set is cleaned when it holds more dirty pages than this.
    pub thresh_pages: u64,
    /// Per set: pages in the order they became dirty (may hold stale
    /// entries for pages cleaned since; skipped when met).
    pub order: Vec<VecDeque<u64>>,
    pub dirty: Vec<u64>,
}

impl SetCleaning {
    fn set_of(&self, page: u64) -> usize {
        ((page / self.assoc) % self.num_sets) as usize
    }
}

struct Entry {
    /// Distinguishes this residency of the page from earlier ones, so late
    /// completions of a dropped entry are recognised.
    incarnation: u64,
    slot: u64,
    /// The slot holds data at least as new as the latest acknowledged write.
    valid: bool,
    dirty: bool,
    /// Host writes accepted for this page (bumped when accepted).
    generation: u64,
    slot_write_inflight: bool,
    /// Host write parts waiting for the slot: (host id, page in host buffer).
    waiting: VecDeque<(u64, u64)>,
    flushing: bool,
    /// Out of the eviction policy, waiting for its write-back.
    evicting: bool,
    /// A fill is in progress; the generation it started at.
    filling: Option<u64>,
    /// A flush of this page raced a trim in flight: the backing device may
    /// hold the flush's data rather than the hole, so the trim must not drop
    /// the page while it is dirty.
    trim_raced: bool,
    /// Its last write-back failed (a device error): not tried again until
    /// a host write to it, the next host FLUSH or `drain` (no hot retry
    /// loop against a failing device).
    write_back_failed: bool,
    /// A failed write left the copy unknown (write-through: the backing
    /// page may differ): dropped once the slot writes in flight end.
    drop_after_write: bool,
}

impl Entry {
    /// A new residency of a page in `slot`: clean, nothing in flight;
    /// `valid` when the slot already holds its data (a recovered page).
    fn new(incarnation: u64, slot: u64, valid: bool) -> Entry {
        Entry {
            incarnation,
            slot,
            valid,
            dirty: false,
            generation: 0,
            slot_write_inflight: false,
            waiting: VecDeque::new(),
            flushing: false,
            evicting: false,
            filling: None,
            trim_raced: false,
            write_back_failed: false,
            drop_after_write: false,
        }
    }
}

/// A host FLUSH waiting for the pages that were dirty when it arrived to
/// reach the backing device.
struct FlushWait {
    host: u64,
    /// page -> (incarnation, generation a write-back must have read).
    pages: HashMap<u64, (u64, u64)>,
    /// Persistent mode: the metadata commits that must have completed
    /// (one begun after the FLUSH arrived), so no entry the FLUSH's writes
    /// made stale survives it.
    commits_needed: u64,
}

/// The persistent half of the cache (`persistent = true`).
struct Persist {
    table: SlotTable,
    /// Header kind: 1 cache, 2 flashcache.
    kind: u64,
    /// Commits completed.
    commits_done: u64,
    /// Per slot: its cleared entry must be durable before it is reused.
    blocked: Vec<bool>,
    /// Device flushes of the running commit still in flight (the cache
    /// device's, and the backing device's when write-backs need it).
    commit_flushes_left: u32,
    /// A write-back (or a trim that dropped dirty pages) completed on the
    /// backing device since the last commit's backing flush: the next
    /// commit, which may mark those pages clean or free on the cache
    /// device, flushes the backing device first.
    backing_unflushed: bool,
    /// Pages written back since the last commit began: a batch of
    /// `commit_batch_slots` starts one (so they are clean on the device
    /// before they are evicted, and their slots free at once).
    written_back_since_commit: u64,
    /// Slots waiting for a commit that start one (module docs, "FLUSH").
    commit_batch_slots: u64,
    /// The clean stop: None, then the final commit, the flush, the header.
    stop: StopStep,
    /// The backing device's size (known at `open`; 0 in simulation).
    backing_bytes: u64,
    /// The backing device's volume id, recorded in the header (None: the
    /// store cannot tell, or a simulation).
    backing_id: Option<crate::binding::VolumeId>,
    next_id: u64,
    stats: PersistStats,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopStep {
    None,
    Commit,
    Flush,
    Header,
    Done,
}

/// Counters of the persistent mode (docs/crash-consistency.md).
#[derive(Clone, Copy, Debug, Default)]
struct PersistStats {
    metadata_writes: u64,
    formatted: u64,
    recovered_pages: u64,
    /// Recovered after a crash: copied to the backing device at open.
    resynced_pages: u64,
    opened_clean: u64,
    /// Recovered after a crash beyond their set's ways (flashcache): dropped
    /// once copied back.
    recovered_pages_dropped: u64,
    /// Entries of clean copies found after a crash: dropped (not trusted).
    crash_dropped_clean_pages: u64,
    misses_uncached_waiting_for_commit: u64,
}

/// A host trim whose backing trim is in flight.
struct TrimInFlight {
    host: u64,
    /// The pages it covers entirely, [first, end): dropped when it completes.
    first_full_page: u64,
    end_full_page: u64,
}

/// Pages of one host IO with consecutive slots, gathered for one
/// cache-device IO: `incarnations.len()` pages from `first_page` (at
/// `page_in_buf` in the host buffer) in slots from `slot`.
struct SlotRun {
    first_page: u64,
    slot: u64,
    page_in_buf: u64,
    incarnations: Vec<u64>,
}

impl SlotRun {
    fn new(first_page: u64, slot: u64, page_in_buf: u64, incarnation: u64) -> SlotRun {
        SlotRun {
            first_page,
            slot,
            page_in_buf,
            incarnations: vec![incarnation],
        }
    }

    fn len(&self) -> u64 {
        self.incarnations.len() as u64
    }

    /// Whether page `page` in slot `slot` at `page_in_buf` extends the run
    /// (below `max_pages`).
    fn extends(&self, page: u64, slot: u64, page_in_buf: u64, max_pages: u64) -> bool {
        let n = self.len();
        n < max_pages
            && self.first_page + n == page
            && self.slot + n == slot
            && self.page_in_buf + n == page_in_buf
    }
}

/// A page a backing read should fill into the cache afterwards:
/// (page, incarnation, generation, page in the host buffer).
type Fill = (u64, u64, u64, u64);

enum Rec {
    /// A cache-device read of a run of hits (consecutive pages in
    /// consecutive slots), or a backing read that may fill pages.
    HostRead {
        host: u64,
        /// Hits: (first slot, slots).
        slots: Option<(u64, u64)>,
        fills: Vec<Fill>,
        /// Hits: (their first page, the host IO's first page), to read them
        /// from the backing device instead if the cache read fails.
        hit: Option<(u64, u64)>,
    },
    /// A host write into a run of slots: pages `first_page..` of one
    /// host IO, in slots `slot..`, one incarnation per page.
    SlotWrite {
        host: u64,
        first_page: u64,
        slot: u64,
        incarnations: Vec<u64>,
    },
    /// A host write straight to the backing device (pages first..first+n).
    BackingWrite {
        host: u64,
        first: u64,
        n: u64,
    },
    /// Fills of a run of pages into a run of slots.
    FillWrite {
        first_page: u64,
        slot: u64,
        incarnations: Vec<u64>,
    },
    /// A write-back's read of a run of slots into its staging buffer.
    FlushRead {
        staging: u64,
        slot: u64,
        slots: u64,
    },
    FlushWrite {
        staging: u64,
    },
    /// A host trim's backing trim.
    Trim {
        host: u64,
    },
    /// Persistent mode: a commit's cache-device flush, a commit's entry
    /// page write, the clean stop's flush and header write.
    MetaFlush,
    MetaPage,
    StopFlush,
    StopHeader,
}

struct Staging {
    /// (page, incarnation, generation read)
    pages: Vec<(u64, u64, u64)>,
    first: u64,
    /// Slot reads (runs of slots) still in flight.
    reads_left: u32,
    /// A slot read for it failed: no backing write is issued.
    failed: Option<IoError>,
}

struct HostPending {
    parts: u32,
    cache_only: bool,
    /// A part failed (a device error): the IO fails once every part ended.
    failed: Option<IoError>,
}

pub struct Cache {
    name: String,
    mode: WriteMode,
    page: u64,
    capacity_pages: u64,
    evict: Box<dyn Eviction>,
    map: HashMap<u64, Entry>,
    /// Per slot: IOs in flight, and whether an entry owns it.
    pins: Vec<u32>,
    owned: Vec<bool>,
    free: FreeSlots,
    next_incarnation: u64,
    inflight: HashMap<(usize, u64), Rec>,
    hosts: HashMap<u64, HostPending>,
    staging: HashMap<u64, Staging>,
    next_staging: u64,
    /// Direct backing writes in flight per page (no fill meanwhile).
    backing_inflight: HashMap<u64, u32>,
    dirty_set: BTreeSet<u64>,
    flush_cursor: u64,
    flushes_inflight: u32,
    flush_iodepth: u32,
    max_flush_pages: u64,
    high_pages: f64,
    low_pages: f64,
    watermark_active: bool,
    idle_ns: u64,
    last_host_ns: TimeNs,
    /// The time of the event being handled.
    now_ns: TimeNs,
    timer_armed: bool,
    pacer: pacing::Pacer,
    idle_flushing: bool,
    flush_all: bool,
    admission: Admission,
    admission_hits: u32,
    ghost: HashMap<u64, u32>,
    ghost_order: VecDeque<u64>,
    ghost_cap: usize,
    bypass_bytes: u64,
    /// Per tenant: (end of its last IO, length of its sequential run).
    streams: SeqStreams,
    /// Host FLUSHes so far (streams flushed as they go are not bypassed).
    host_flushes: u64,
    pub(crate) sets: Option<SetCleaning>,
    /// Host trims in flight (at most one per host IO in flight).
    trims: Vec<TrimInFlight>,
    /// `drain` was called: flush everything, whatever the watermarks.
    draining: bool,
    /// Host FLUSHes in flight (write-back): each completes when its pages
    /// are written back.
    flush_waits: Vec<FlushWait>,
    /// Pages marked `write_back_failed` (may also name pages that left the
    /// cache or were rewritten since: checked when used).
    failed_write_backs: HashSet<u64>,
    /// Test builds only: FLUSH completes at once, as before write-back on
    /// FLUSH existed (the crash checker must catch it).
    #[doc(hidden)]
    pub broken_flush_skips_write_back: bool,
    /// Test builds only (persistent mode): entries are committed without
    /// flushing their data first (the crash checker must catch it).
    #[doc(hidden)]
    pub broken_commit_skips_flush: bool,
    /// Test builds only (persistent mode): commits never flush the backing
    /// device, so a page's clean mark (or its slot's reuse) can be durable
    /// before its write-back is (the crash checker must catch it).
    #[doc(hidden)]
    pub broken_commit_skips_backing_flush: bool,
    persist: Option<Persist>,
    stats: CacheStats,
}

/// Persistent mode: where the metadata area starts on the cache device
/// (after `slots` slots, 4 KiB-aligned).
fn meta_base_bytes(slots: u64, page: u64) -> u64 {
    (slots * page).next_multiple_of(slot_meta::PAGE as u64)
}

/// Bytes of the cache device `slots` slots of `page` bytes use: the slots,
/// and in persistent mode the metadata area after them.
pub fn capacity_bytes_for(slots: u64, page: u64, persistent: bool) -> u64 {
    if persistent {
        meta_base_bytes(slots, page) + slot_meta::area_bytes(slots, META_ENTRY_BYTES)
    } else {
        slots * page
    }
}

/// The slots `capacity_bytes` of cache device holds: in persistent mode
/// the metadata is carved out of it, as OCF and bcache carve theirs out of
/// the cache device (`capacity_bytes_for` of the result fits).
pub fn slots_in(capacity_bytes: u64, page: u64, persistent: bool) -> u64 {
    let mut slots = capacity_bytes / page;
    while slots > 0 && capacity_bytes_for(slots, page, persistent) > capacity_bytes {
        let over = capacity_bytes_for(slots, page, persistent) - capacity_bytes;
        slots = slots.saturating_sub(over.div_ceil(page).max(1));
    }
    // The step may overshoot by a slot or so: take back what fits.
    while capacity_bytes_for(slots + 1, page, persistent) <= capacity_bytes {
        slots += 1;
    }
    slots
}

/// Builds a tierlab-cache eviction policy by name.
pub fn build_eviction(name: &str, capacity_pages: usize) -> Result<Box<dyn Eviction>, ParamError> {
    tierlab_cache::policies::build(name, capacity_pages)
}

impl Cache {
    pub fn new(p: &CacheParams) -> Result<Cache, ParamError> {
        // Belady needs each request's next use, which a cache in a running
        // stack cannot know: it would silently degrade to arbitrary choices.
        if matches!(
            p.eviction.to_ascii_lowercase().as_str(),
            "belady" | "min" | "opt"
        ) {
            return Err(ParamError::new(
                "eviction",
                format!("{:?}, which needs future knowledge", p.eviction),
                "a policy that runs online (Belady is for cache-only runs: `tierlab cache`)",
            ));
        }
        let page = p.page_size_bytes.0;
        let cap = slots_in(p.capacity_bytes.0, page.max(1), p.persistent);
        let evict = match tierlab_cache::policies::canonical_name(&p.eviction) {
            Err(e) => return Err(e.with_key("eviction")),
            Ok(_) => build_eviction(&p.eviction, cap as usize)
                .map_err(|e| e.with_key("capacity_bytes"))?,
        };
        Cache::with_eviction(p, evict)
    }

    /// With a ready eviction policy (its capacity is the cache's in pages).
    pub fn with_eviction(p: &CacheParams, evict: Box<dyn Eviction>) -> Result<Cache, ParamError> {
        let page = p.page_size_bytes.0;
        // The tag holds 22 bits of page index: 2^22 pages of 1 KiB cover the
        // largest host IO (4 GiB).
        if !page.is_power_of_two() || !(1024..=1 << 20).contains(&page) {
            return Err(ParamError::new(
                "page_size_bytes",
                page,
                "a power of two from 1 KiB to 1 MiB",
            ));
        }
        let cap = slots_in(p.capacity_bytes.0, page, p.persistent);
        if cap == 0 {
            let need = capacity_bytes_for(1, page, p.persistent);
            return Err(ParamError::new(
                "capacity_bytes",
                p.capacity_bytes.0,
                if p.persistent {
                    format!(
                        "at least one page (`page_size_bytes` = {page}) and its persistent \
                         metadata: {need} bytes (or `persistent = false`)"
                    )
                } else {
                    format!("at least one page (`page_size_bytes` = {page})")
                },
            ));
        }
        if cap > u32::MAX as u64 {
            return Err(ParamError::new(
                "capacity_bytes",
                format!("{} ({cap} pages)", p.capacity_bytes.0),
                "at most 2^32 pages",
            ));
        }
        // A caller's bug rather than the user's, but still a parameter mismatch.
        if evict.capacity() as u64 != cap {
            return Err(ParamError::new(
                "eviction",
                format!("a policy of {} pages", evict.capacity()),
                format!("the cache's capacity, {cap} pages"),
            ));
        }
        let (h, l) = (p.high_watermark, p.low_watermark);
        if !(h.is_finite() && l.is_finite() && 0.0 <= l && l <= h && h <= 1.0) {
            return Err(ParamError::new(
                "low_watermark",
                format!("{l} (with `high_watermark` = {h})"),
                "0 <= `low_watermark` <= `high_watermark` <= 1",
            ));
        }
        if !(p.idle_flush_ms.is_finite() && p.idle_flush_ms >= 0.0) {
            return Err(ParamError::new(
                "idle_flush_ms",
                p.idle_flush_ms,
                "a number >= 0",
            ));
        }
        if p.admission_hits == 0 {
            return Err(ParamError::new("admission_hits", 0, "at least 1"));
        }
        if !(1..=1 << 16).contains(&p.sequential_streams) {
            return Err(ParamError::new(
                "sequential_streams",
                p.sequential_streams,
                "1 ..= 65536",
            ));
        }
        let max_flush_pages = p.max_flush_bytes.0 / page;
        if max_flush_pages == 0 || max_flush_pages > TAG_PAGE_MASK {
            return Err(ParamError::new(
                "max_flush_bytes",
                p.max_flush_bytes.0,
                format!("one page ({page} bytes) to 2^22 pages"),
            ));
        }
        if !(p.writeback_rate_p_s.is_finite() && p.writeback_rate_p_s >= 0.0) {
            return Err(ParamError::new(
                "writeback_rate_p_s",
                p.writeback_rate_p_s,
                "a number >= 0 (0: write-back is never paced)",
            ));
        }
        if p.writeback_rate_min_bytes.0 == 0 {
            return Err(ParamError::new(
                "writeback_rate_min_bytes",
                0,
                "at least 1 byte per second",
            ));
        }
        if !(p.writeback_idle_ms.is_finite() && p.writeback_idle_ms >= 0.0) {
            return Err(ParamError::new(
                "writeback_idle_ms",
                p.writeback_idle_ms,
                "a number >= 0",
            ));
        }
        if p.flush_iodepth == 0 {
            return Err(ParamError::new("flush_iodepth", 0, "at least 1"));
        }
        Ok(Cache {
            name: "cache".into(),
            mode: p.write_mode,
            page,
            capacity_pages: cap,
            evict,
            map: HashMap::default(),
            pins: vec![0; cap as usize],
            owned: vec![false; cap as usize],
            // Popped from the end: slot 0 first.
            free: FreeSlots::all(cap),
            next_incarnation: 0,
            inflight: HashMap::default(),
            hosts: HashMap::default(),
            staging: HashMap::default(),
            next_staging: 0,
            backing_inflight: HashMap::default(),
            dirty_set: BTreeSet::new(),
            flush_cursor: 0,
            flushes_inflight: 0,
            flush_iodepth: p.flush_iodepth,
            max_flush_pages,
            high_pages: h * cap as f64,
            low_pages: l * cap as f64,
            watermark_active: false,
            idle_ns: (p.idle_flush_ms * 1e6).round() as u64,
            last_host_ns: 0,
            now_ns: 0,
            timer_armed: false,
            pacer: pacing::Pacer::new(
                p.writeback_rate_p_s,
                p.writeback_rate_min_bytes.0 as f64,
                (p.writeback_idle_ms * 1e6).round() as u64,
                (max_flush_pages * page) as f64,
            ),
            idle_flushing: false,
            flush_all: false,
            admission: p.admission,
            admission_hits: p.admission_hits,
            ghost: HashMap::default(),
            ghost_order: VecDeque::new(),
            ghost_cap: p.admission_table_pages.unwrap_or(cap).min(1 << 32) as usize,
            bypass_bytes: p.sequential_bypass_bytes.0,
            streams: SeqStreams::new(p.sequential_streams),
            host_flushes: 0,
            sets: None,
            trims: Vec::new(),
            draining: false,
            flush_waits: Vec::new(),
            failed_write_backs: HashSet::default(),
            broken_flush_skips_write_back: false,
            broken_commit_skips_flush: false,
            broken_commit_skips_backing_flush: false,
            persist: p.persistent.then(|| Persist {
                table: SlotTable::new(
                    MAGIC_ENTRIES,
                    meta_base_bytes(cap, page),
                    cap,
                    META_ENTRY_BYTES,
                )
                .with_disposable_clean_entries(),
                kind: 1,
                commits_done: 0,
                blocked: vec![false; cap as usize],
                commit_flushes_left: 0,
                backing_unflushed: false,
                written_back_since_commit: 0,
                commit_batch_slots: (cap / 64).clamp(1, 1024),
                stop: StopStep::None,
                backing_bytes: 0,
                backing_id: None,
                next_id: 0,
                stats: PersistStats::default(),
            }),
            stats: CacheStats::default(),
        })
    }

    pub(crate) fn set_name(&mut self, name: &str) {
        self.name = name.into();
        if let Some(m) = &mut self.persist {
            m.kind = if name == "flashcache" { 2 } else { 1 };
        }
    }

    /// Bytes of the cache device the cache uses: its slots, and in
    /// persistent mode the metadata area after them.
    pub fn cache_device_bytes(&self) -> u64 {
        capacity_bytes_for(self.capacity_pages, self.page, self.persist.is_some())
    }

    pub fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }

    pub fn page_size_bytes(&self) -> u64 {
        self.page
    }

    pub fn stats(&self) -> CacheStats {
        let mut s = self.stats;
        s.dirty_bytes = self.dirty_set.len() as u64 * self.page;
        s
    }

    pub fn dirty_pages(&self) -> u64 {
        self.dirty_set.len() as u64
    }

    /// True when no device IO is in flight and nothing is dirty.
    pub fn is_quiescent(&self) -> bool {
        self.inflight.is_empty() && self.dirty_set.is_empty()
    }
}
