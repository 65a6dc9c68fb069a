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

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use serde::Deserialize;
use serde::de::{self, Deserializer};
use tierlab_cache::Eviction;
use tierlab_core::policy::{BufRef, Extent, HostIo, IoError, OpenError, Outbox, Policy, Stores};
use tierlab_core::{DeviceIo, Op, ParamError, TimeNs};

use crate::extent::push_extent;
use crate::slot_meta::{self, CommitState, SlotTable};

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
/// Staging ids of metadata writes and flushes (flush staging ids stay
/// below it).
const META_STAGING: u64 = 1 << (TAG_ID_BITS - 1);
const STAGING_ID_MASK: u64 = META_STAGING - 1;
const MAGIC_HEADER: &[u8; 4] = b"TLCH";
const MAGIC_ENTRIES: &[u8; 4] = b"TLCE";
const META_ENTRY_BYTES: u64 = 16;
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

/// The buffer a device IO reads into or writes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// The host IO's memory; the id is the host IO id (its low 41 bits).
    Host(u64),
    /// A policy staging buffer.
    Staging(u64),
}

/// Tag layout: bit 63 = staging, bits 62..22 = buffer id, bits 21..0 = the
/// page index inside the buffer where the device IO's first page goes.
pub fn encode_tag(buffer: Buffer, page_in_buffer: u64) -> u64 {
    let (flag, id) = match buffer {
        Buffer::Host(id) => (0, id),
        Buffer::Staging(id) => (TAG_STAGING, id),
    };
    flag | (id & TAG_ID_MASK) << TAG_PAGE_BITS | (page_in_buffer & TAG_PAGE_MASK)
}

/// The inverse of [`encode_tag`]: (buffer, page index inside it).
pub fn decode_tag(tag: u64) -> (Buffer, u64) {
    let id = (tag >> TAG_PAGE_BITS) & TAG_ID_MASK;
    let page = tag & TAG_PAGE_MASK;
    if tag & TAG_STAGING != 0 {
        (Buffer::Staging(id), page)
    } else {
        (Buffer::Host(id), page)
    }
}

/// A byte count as an integer or with a unit ("64MiB"), as in the configs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByteCount(pub u64);

impl<'de> Deserialize<'de> for ByteCount {
    /// A visitor, not an untagged enum: a missing key keeps serde's
    /// "missing field `capacity_bytes`", and a wrong type says what a byte
    /// count is.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteCount, D::Error> {
        struct Visit;
        impl de::Visitor<'_> for Visit {
            type Value = ByteCount;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a byte count: an integer or a string like \"64MiB\"")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ByteCount, E> {
                Ok(ByteCount(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ByteCount, E> {
                u64::try_from(n)
                    .map(ByteCount)
                    .map_err(|_| E::custom(format!("{n} is not a byte count (negative)")))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ByteCount, E> {
                tierlab_trace::units::parse_size_bytes(s)
                    .map(ByteCount)
                    .map_err(E::custom)
            }
        }
        d.deserialize_any(Visit)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    #[default]
    WriteBack,
    WriteThrough,
    WriteAround,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Admission {
    #[default]
    Always,
    /// Admit a page on its `admission_hits`-th miss.
    NHit,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheParams {
    pub capacity_bytes: ByteCount,
    #[serde(default = "default_page")]
    pub page_size_bytes: ByteCount,
    /// A tierlab-cache eviction policy name.
    #[serde(default = "default_eviction")]
    pub eviction: String,
    #[serde(default)]
    pub write_mode: WriteMode,
    /// Dirty share of the capacity that starts background flushing.
    #[serde(default = "default_high")]
    pub high_watermark: f64,
    /// Dirty share at which background flushing stops.
    #[serde(default = "default_low")]
    pub low_watermark: f64,
    /// Flush every dirty page after this long without host IO; 0 = never.
    #[serde(default = "default_idle_ms")]
    pub idle_flush_ms: f64,
    #[serde(default)]
    pub admission: Admission,
    /// n for n-hit admission.
    #[serde(default = "default_hits")]
    pub admission_hits: u32,
    /// Pages remembered by the n-hit miss counter (default: the capacity in pages).
    #[serde(default)]
    pub admission_table_pages: Option<u64>,
    /// A sequential run longer than this bypasses the cache; 0 = off.
    #[serde(default)]
    pub sequential_bypass_bytes: ByteCount,
    /// Largest merged flush write.
    #[serde(default = "default_flush_max")]
    pub max_flush_bytes: ByteCount,
    /// Keep slot metadata on the cache device (after the slots), so a
    /// restart comes up warm (docs/crash-consistency.md).
    #[serde(default)]
    pub persistent: bool,
    /// Background flush batches in flight at once.
    #[serde(default = "default_flush_depth")]
    pub flush_iodepth: u32,
}

fn default_page() -> ByteCount {
    ByteCount(4096)
}
fn default_eviction() -> String {
    "lru".into()
}
fn default_high() -> f64 {
    0.5
}
fn default_low() -> f64 {
    0.25
}
fn default_idle_ms() -> f64 {
    1000.0
}
fn default_hits() -> u32 {
    2
}
fn default_flush_max() -> ByteCount {
    ByteCount(256 * 1024)
}
fn default_flush_depth() -> u32 {
    4
}

impl CacheParams {
    /// Defaults for everything but the capacity.
    pub fn with_capacity(capacity_bytes: u64) -> CacheParams {
        CacheParams {
            capacity_bytes: ByteCount(capacity_bytes),
            page_size_bytes: default_page(),
            eviction: default_eviction(),
            write_mode: WriteMode::WriteBack,
            high_watermark: default_high(),
            low_watermark: default_low(),
            idle_flush_ms: default_idle_ms(),
            admission: Admission::Always,
            admission_hits: default_hits(),
            admission_table_pages: None,
            sequential_bypass_bytes: ByteCount(0),
            max_flush_bytes: default_flush_max(),
            flush_iodepth: default_flush_depth(),
            persistent: false,
        }
    }
}

/// Counters; pages unless named bytes or IOs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub host_ios: u64,
    /// Host IOs whose every device IO went to the cache device (tier 0).
    pub host_ios_cache_only: u64,
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    pub fills: u64,
    pub bypassed_pages: u64,
    pub flush_ios: u64,
    pub flush_bytes: u64,
    pub dirty_bytes: u64,
    /// Host trims.
    pub trims: u64,
    /// Cached pages dropped by trims, and of those the dirty ones (whose
    /// write-back was skipped).
    pub trimmed_pages: u64,
    pub trimmed_dirty_pages: u64,
    /// Cached pages a trim covered but kept: a device IO wrote or flushed
    /// them when it completed, or a flush of the dirty page raced it.
    pub trim_kept_pages: u64,
    /// Flushes of a page that raced a trim of it (issued or in flight while
    /// the backing trim was).
    pub trim_raced_flushes: u64,
    /// When `drain` was called: dirty pages, and of those the ones chosen
    /// for eviction and waiting for their write-back.
    pub drain_dirty_pages: u64,
    pub drain_evicting_pages: u64,
    /// Host FLUSHes that waited for dirty pages to be written back (the
    /// others found nothing dirty).
    pub flush_waits: u64,
    /// Device IOs that failed and the cache survived (`on_device_error`),
    /// and of those the cache reads of clean pages read again from the
    /// backing device.
    pub device_errors: u64,
    pub reads_retried_from_backing: u64,
    /// Page write-backs that failed (their pages stayed dirty), host
    /// FLUSHes failed because of them, and pages `drain` gave up on after
    /// its retry failed too.
    pub write_backs_failed: u64,
    pub flushes_failed: u64,
    pub drain_abandoned_pages: u64,
    /// Host writes into the cache whose slot write failed.
    pub slot_writes_failed: u64,
}

impl CacheStats {
    /// Host IOs served entirely by the cache device / all host IOs.
    pub fn memory_access_ratio(&self) -> f64 {
        if self.host_ios == 0 {
            0.0
        } else {
            self.host_ios_cache_only as f64 / self.host_ios as f64
        }
    }
}

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
    /// The clean stop: None, then the final commit, the flush, the header.
    stop: StopStep,
    /// The backing device's size (known at `open`; 0 in simulation).
    backing_bytes: u64,
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
    misses_uncached_waiting_for_commit: u64,
}

/// A host trim whose backing trim is in flight.
struct TrimInFlight {
    host: u64,
    /// The pages it covers entirely, [first, end): dropped when it completes.
    first_full_page: u64,
    end_full_page: u64,
}

/// A page a backing read should fill into the cache afterwards:
/// (page, incarnation, generation, page in the host buffer).
type Fill = (u64, u64, u64, u64);

enum Rec {
    /// A cache-device read of a hit, or a backing read that may fill pages.
    HostRead {
        host: u64,
        slot: Option<u64>,
        fills: Vec<Fill>,
        /// A hit: (its page, the host IO's first page), to read it from the
        /// backing device instead if the cache read fails.
        hit: Option<(u64, u64)>,
    },
    /// A host write into a slot.
    SlotWrite {
        host: u64,
        page: u64,
        incarnation: u64,
        slot: u64,
    },
    /// A host write straight to the backing device (pages first..first+n).
    BackingWrite {
        host: u64,
        first: u64,
        n: u64,
    },
    FillWrite {
        page: u64,
        incarnation: u64,
        slot: u64,
    },
    FlushRead {
        staging: u64,
        slot: u64,
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
    free: Vec<u64>,
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
    timer_armed: bool,
    idle_flushing: bool,
    flush_all: bool,
    admission: Admission,
    admission_hits: u32,
    ghost: HashMap<u64, u32>,
    ghost_order: VecDeque<u64>,
    ghost_cap: usize,
    bypass_bytes: u64,
    /// Per tenant: (end of its last IO, length of its sequential run).
    streams: HashMap<u32, (u64, u64)>,
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
    persist: Option<Persist>,
    stats: CacheStats,
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
        let cap = p.capacity_bytes.0 / page.max(1);
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
        let cap = p.capacity_bytes.0 / page;
        if cap == 0 {
            return Err(ParamError::new(
                "capacity_bytes",
                p.capacity_bytes.0,
                format!("at least one page (`page_size_bytes` = {page})"),
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
        let max_flush_pages = p.max_flush_bytes.0 / page;
        if max_flush_pages == 0 || max_flush_pages > TAG_PAGE_MASK {
            return Err(ParamError::new(
                "max_flush_bytes",
                p.max_flush_bytes.0,
                format!("one page ({page} bytes) to 2^22 pages"),
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
            map: HashMap::new(),
            pins: vec![0; cap as usize],
            owned: vec![false; cap as usize],
            // Popped from the end: slot 0 first.
            free: (0..cap).rev().collect(),
            next_incarnation: 0,
            inflight: HashMap::new(),
            hosts: HashMap::new(),
            staging: HashMap::new(),
            next_staging: 0,
            backing_inflight: HashMap::new(),
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
            timer_armed: false,
            idle_flushing: false,
            flush_all: false,
            admission: p.admission,
            admission_hits: p.admission_hits,
            ghost: HashMap::new(),
            ghost_order: VecDeque::new(),
            ghost_cap: p.admission_table_pages.unwrap_or(cap).min(1 << 32) as usize,
            bypass_bytes: p.sequential_bypass_bytes.0,
            streams: HashMap::new(),
            sets: None,
            trims: Vec::new(),
            draining: false,
            flush_waits: Vec::new(),
            failed_write_backs: HashSet::new(),
            broken_flush_skips_write_back: false,
            broken_commit_skips_flush: false,
            persist: p.persistent.then(|| Persist {
                table: SlotTable::new(
                    MAGIC_ENTRIES,
                    Cache::meta_base_bytes(cap, page),
                    cap,
                    META_ENTRY_BYTES,
                ),
                kind: 1,
                commits_done: 0,
                blocked: vec![false; cap as usize],
                stop: StopStep::None,
                backing_bytes: 0,
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

    /// Persistent mode: where the metadata area starts on the cache device
    /// (after the slots, 4 KiB-aligned).
    fn meta_base_bytes(capacity_pages: u64, page: u64) -> u64 {
        (capacity_pages * page).next_multiple_of(slot_meta::PAGE as u64)
    }

    /// Bytes of the cache device the cache uses: its slots, and in
    /// persistent mode the metadata area after them.
    pub fn cache_device_bytes(&self) -> u64 {
        match &self.persist {
            Some(m) => {
                m.table.base_bytes + slot_meta::area_bytes(self.capacity_pages, META_ENTRY_BYTES)
            }
            None => self.capacity_pages * self.page,
        }
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

    /// Flushes every dirty page (issued now where possible, the rest as the
    /// writes they wait for complete) — e.g. before shutdown.
    pub fn flush_all(&mut self, out: &mut Outbox) {
        self.flush_all = true;
        self.try_flush(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Every dirty page is to be flushed now (not just down to a watermark).
    fn flushing_everything(&self) -> bool {
        self.flush_all || self.idle_flushing || self.draining || !self.flush_waits.is_empty()
    }

    /// A host FLUSH: every write acknowledged before it must be where a
    /// restart reads it. Nothing survives in the cache across a restart
    /// (no persistent cache metadata yet: a restart starts cold), so that
    /// is the backing device: the FLUSH completes when every page dirty
    /// now has been written back at this generation or a later one (the
    /// executor then syncs every device). Write-through and write-around
    /// hold nothing dirty: their FLUSH completes at once.
    fn host_flush(&mut self, io: HostIo, out: &mut Outbox) {
        self.retry_failed_write_backs();
        let pages: HashMap<u64, (u64, u64)> = self
            .dirty_set
            .iter()
            .map(|p| {
                let e = &self.map[p];
                (*p, (e.incarnation, e.generation))
            })
            .collect();
        let pages = if self.broken_flush_skips_write_back {
            HashMap::new()
        } else {
            pages
        };
        // Persistent mode: entries the FLUSH's writes made stale (a page
        // written around its cached copy, trimmed) must be cleared on the
        // device too — by a commit begun from now on. With nothing to
        // commit and none running, the last commit's pages are written
        // and the executor's sync makes them durable.
        let commits_needed = match &self.persist {
            Some(m) if m.table.due() || m.table.state != CommitState::Idle => m.table.commits + 1,
            Some(m) => m.commits_done,
            None => 0,
        };
        let w = FlushWait {
            host: io.id,
            pages,
            commits_needed,
        };
        if self.flush_wait_done(&w) {
            out.complete.push((io.id, TIER_BACKING));
            return;
        }
        if !w.pages.is_empty() {
            self.stats.flush_waits += 1;
        }
        self.flush_waits.push(w);
        self.try_flush(out);
        self.try_commit(out);
    }

    fn flush_wait_done(&self, w: &FlushWait) -> bool {
        w.pages.is_empty()
            && self
                .persist
                .as_ref()
                .is_none_or(|m| m.commits_done >= w.commits_needed)
    }

    /// FLUSHes whose pages are written back and whose commits are done
    /// complete.
    fn complete_flush_waits(&mut self, out: &mut Outbox) {
        let done: Vec<bool> = self
            .flush_waits
            .iter()
            .map(|w| self.flush_wait_done(w))
            .collect();
        let mut i = 0;
        self.flush_waits.retain(|w| {
            i += 1;
            if done[i - 1] {
                out.complete.push((w.host, TIER_BACKING));
                false
            } else {
                true
            }
        });
    }

    /// Page `page` (incarnation `inc`) reached the backing device at
    /// `generation`, or left the cache (`None`: trimmed, or dropped once
    /// clean): FLUSHes waiting for it may complete.
    fn flush_waits_page_done(
        &mut self,
        page: u64,
        inc: u64,
        generation: Option<u64>,
        out: &mut Outbox,
    ) {
        if self.flush_waits.is_empty() {
            return;
        }
        for w in &mut self.flush_waits {
            if let Some(&(i, need)) = w.pages.get(&page)
                && i == inc
                && generation.is_none_or(|g| g >= need)
            {
                w.pages.remove(&page);
            }
        }
        self.complete_flush_waits(out);
    }

    // ---- persistent mode: commits, the clean stop, recovery -------------

    fn meta_io(
        &mut self,
        op: Op,
        offset_bytes: u64,
        rec: Rec,
        bytes: Option<Vec<u8>>,
        out: &mut Outbox,
    ) {
        let m = self.persist.as_mut().expect("persistent mode");
        let id = META_STAGING | m.next_id;
        m.next_id = (m.next_id + 1) & STAGING_ID_MASK;
        let size_bytes = if op == Op::Write {
            m.stats.metadata_writes += 1;
            slot_meta::PAGE as u32
        } else {
            0
        };
        if let Some(b) = bytes {
            out.fills.push((id, b));
        }
        let io = DeviceIo {
            tag: encode_tag(Buffer::Staging(id), 0),
            op,
            offset_bytes,
            size_bytes,
        };
        self.submit(out, CACHE_DEVICE, io, rec);
        if op == Op::Write && out.wants_data {
            // The write took its bytes when submitted.
            out.release.push(id);
        }
    }

    /// Begins a commit when entries changed, slots wait for one, or a FLUSH
    /// waits for one not begun yet; none runs at a time.
    fn try_commit(&mut self, out: &mut Outbox) {
        let Some(m) = &mut self.persist else { return };
        if m.table.state != CommitState::Idle {
            return;
        }
        let begun = m.table.commits;
        let flush_needs = self.flush_waits.iter().any(|w| w.commits_needed > begun);
        let stopping = m.stop == StopStep::Commit;
        if !(m.table.due() || flush_needs || (stopping && m.table.slots_waiting() > 0)) {
            return;
        }
        m.table.begin(out.wants_data);
        if self.broken_commit_skips_flush {
            self.commit_flushed(out);
            return;
        }
        self.meta_io(Op::Flush, 0, Rec::MetaFlush, None, out);
    }

    /// The commit's flush completed: free the slots whose cleared entries
    /// it made durable, write the changed entry pages.
    fn commit_flushed(&mut self, out: &mut Outbox) {
        let m = self.persist.as_mut().unwrap();
        let (released, writes) = m.table.flushed();
        for &slot in &released {
            m.blocked[slot as usize] = false;
        }
        for slot in released {
            self.free_if_unused(slot);
        }
        for w in writes {
            self.meta_io(Op::Write, w.offset_bytes, Rec::MetaPage, w.bytes, out);
        }
        if self.persist.as_ref().unwrap().table.state == CommitState::Idle {
            self.commit_done(out);
        }
    }

    fn commit_done(&mut self, out: &mut Outbox) {
        self.persist.as_mut().unwrap().commits_done += 1;
        self.complete_flush_waits(out);
        self.try_commit(out);
        self.stop_progress(out);
    }

    /// The clean stop (`drain`): once every page is written back and no
    /// host IO is left, a last commit, a flush, then the header marked
    /// clean (a restart then trusts the entries as clean copies).
    fn stop_progress(&mut self, out: &mut Outbox) {
        if !self.draining {
            return;
        }
        // Pages whose write-back failed during the drain are given up: the
        // stop goes on, but does not mark the metadata clean — the restart
        // then copies their slots to the backing device (a retry).
        let abandoned = !self.dirty_set.is_empty();
        let quiet =
            self.hosts.is_empty() && self.dirty_set.iter().all(|p| self.map[p].write_back_failed);
        let Some(m) = &mut self.persist else { return };
        match m.stop {
            StopStep::None if quiet => {
                m.stop = StopStep::Commit;
                self.stop_progress(out);
            }
            StopStep::Commit => {
                if m.table.state == CommitState::Idle && !m.table.due() {
                    let data_ios = self
                        .inflight
                        .values()
                        .any(|r| !matches!(r, Rec::MetaFlush | Rec::MetaPage));
                    if data_ios {
                        return;
                    }
                    if abandoned {
                        // The executor's final sync makes the last commit
                        // durable; the header stays "not clean".
                        m.stop = StopStep::Done;
                        return;
                    }
                    m.stop = StopStep::Flush;
                    self.meta_io(Op::Flush, 0, Rec::StopFlush, None, out);
                } else {
                    self.try_commit(out);
                }
            }
            _ => {}
        }
    }

    fn header_fields(&self, backing_bytes: u64, clean: bool) -> Vec<u64> {
        let m = self.persist.as_ref().unwrap();
        let (assoc, sets) = self.sets.as_ref().map_or((0, 0), |s| (s.assoc, s.num_sets));
        vec![
            m.kind,
            self.page,
            self.capacity_pages,
            META_ENTRY_BYTES,
            backing_bytes,
            assoc,
            sets,
            clean as u64,
        ]
    }

    fn write_stop_header(&mut self, out: &mut Outbox) {
        let backing_bytes = self.persist.as_ref().unwrap().backing_bytes;
        let fields = self.header_fields(backing_bytes, true);
        let m = self.persist.as_mut().unwrap();
        let seq = m.table.next_seq(0);
        let (offset, _) = m.table.next_version(0);
        let bytes = out
            .wants_data
            .then(|| slot_meta::encode_header(MAGIC_HEADER, &fields, seq));
        m.stop = StopStep::Header;
        self.meta_io(Op::Write, offset, Rec::StopHeader, bytes, out);
    }

    /// A host trim in flight covers `page` entirely.
    fn under_trim(&self, page: u64) -> bool {
        self.trims
            .iter()
            .any(|t| t.first_full_page <= page && page < t.end_full_page)
    }

    /// The cached pages in [lo, hi), ascending; by lookups or by a scan of
    /// the map, whichever is smaller (a trim or a locate may span far more
    /// pages than the cache holds).
    fn cached_pages_in(&self, lo: u64, hi: u64) -> Vec<u64> {
        if hi <= lo {
            return Vec::new();
        }
        if hi - lo <= self.map.len() as u64 {
            (lo..hi).filter(|p| self.map.contains_key(p)).collect()
        } else {
            let mut v: Vec<u64> = self
                .map
                .keys()
                .copied()
                .filter(|p| (lo..hi).contains(p))
                .collect();
            v.sort_unstable();
            v
        }
    }

    /// True when no device IO is in flight and nothing is dirty.
    pub fn is_quiescent(&self) -> bool {
        self.inflight.is_empty() && self.dirty_set.is_empty()
    }

    fn page_io(
        &self,
        op: Op,
        buffer: Buffer,
        page_in_buf: u64,
        offset_page: u64,
        n: u64,
    ) -> DeviceIo {
        DeviceIo {
            tag: encode_tag(buffer, page_in_buf),
            op,
            offset_bytes: offset_page * self.page,
            size_bytes: (n * self.page) as u32,
        }
    }

    /// Sends a pending run of missed pages `(first page, pages, fills)` of
    /// host read `id` to the backing device; returns the parts issued (0/1).
    fn submit_backing_read(
        &mut self,
        out: &mut Outbox,
        id: u64,
        first: u64,
        run: Option<(u64, u64, Vec<Fill>)>,
    ) -> u32 {
        let Some((f, k, fills)) = run else { return 0 };
        let dio = self.page_io(Op::Read, Buffer::Host(id), f - first, f, k);
        self.submit(
            out,
            BACKING_DEVICE,
            dio,
            Rec::HostRead {
                host: id,
                slot: None,
                fills,
                hit: None,
            },
        );
        1
    }

    fn submit(&mut self, out: &mut Outbox, device: usize, io: DeviceIo, rec: Rec) {
        let fresh = self.inflight.insert((device, io.tag), rec).is_none();
        assert!(
            fresh,
            "device {device} tag {:#x} is already in flight",
            io.tag
        );
        out.device_ios.push((device, io));
        // The simulator moves no data; trims and flushes carry none.
        if !out.wants_data || !matches!(io.op, Op::Read | Op::Write) {
            return;
        }
        // The tag names the buffer (see `decode_tag`): tell a real executor.
        let (buffer, page_in_buf) = decode_tag(io.tag);
        let offset_bytes = page_in_buf * self.page;
        let buf = match buffer {
            Buffer::Host(host_id) => BufRef::Host {
                host_id,
                offset_bytes,
            },
            Buffer::Staging(id) => BufRef::Staging { id, offset_bytes },
        };
        out.data_for(device, io.tag, buf);
    }

    fn unpin(&mut self, slot: u64) {
        let s = slot as usize;
        self.pins[s] -= 1;
        self.free_if_unused(slot);
    }

    /// Puts a slot no entry owns on the free list once no IO uses it and
    /// (persistent mode) its cleared entry is durable.
    fn free_if_unused(&mut self, slot: u64) {
        let s = slot as usize;
        let blocked = self.persist.as_ref().is_some_and(|m| m.blocked[s]);
        if self.pins[s] == 0 && !self.owned[s] && !blocked {
            self.free.push(slot);
        }
    }

    fn set_dirty(&mut self, page: u64, dirty: bool) {
        let Some(e) = self.map.get_mut(&page) else {
            return;
        };
        if e.dirty == dirty {
            return;
        }
        e.dirty = dirty;
        if dirty {
            self.dirty_set.insert(page);
        } else {
            self.dirty_set.remove(&page);
        }
        if let Some(sets) = &mut self.sets {
            let s = sets.set_of(page);
            if dirty {
                sets.dirty[s] += 1;
                sets.order[s].push_back(page);
                // Cleaned pages stay in the order until met; compact now and
                // then so a set that never passes its threshold stays bounded.
                if sets.order[s].len() as u64 > 4 * sets.assoc {
                    let map = &self.map;
                    let mut seen = HashSet::new();
                    sets.order[s]
                        .retain(|p| map.get(p).is_some_and(|e| e.dirty) && seen.insert(*p));
                }
            } else {
                sets.dirty[s] -= 1;
            }
        }
    }

    /// Removes an entry whose data the backing device holds.
    fn drop_entry(&mut self, page: u64, out: &mut Outbox) {
        let Some(e) = self.map.remove(&page) else {
            return;
        };
        debug_assert!(!e.dirty);
        self.flush_waits_page_done(page, e.incarnation, None, out);
        // Host writes still queued for the slot (write-through) complete
        // now: their backing part carries the data.
        for (host, _) in e.waiting {
            self.host_part_done(host, false, out);
        }
        let s = e.slot as usize;
        self.owned[s] = false;
        if let Some(m) = &mut self.persist
            && !m.table.clear(e.slot)
        {
            m.blocked[s] = true;
            self.try_commit(out);
        }
        self.free_if_unused(e.slot);
    }

    /// The eviction policy chose `victim`: drop it if clean, else write it
    /// back first (it stays readable meanwhile).
    fn handle_victim(&mut self, victim: u64, out: &mut Outbox) {
        let Some(e) = self.map.get_mut(&victim) else {
            return;
        };
        if e.dirty {
            e.evicting = true;
            self.flush_run(victim, out);
        } else {
            self.drop_entry(victim, out);
        }
    }

    /// Makes room for and inserts `page`; None when every slot is busy.
    fn admit(&mut self, page: u64, out: &mut Outbox) -> Option<u64> {
        if let Some(v) = self.evict.insert(page) {
            self.handle_victim(v, out);
        }
        let Some(slot) = self.free.pop() else {
            // Every slot waits for a write-back, an IO or (persistent mode)
            // a commit: serve uncached.
            self.evict.remove(page);
            if let Some(m) = &mut self.persist
                && m.table.slots_waiting() > 0
            {
                m.stats.misses_uncached_waiting_for_commit += 1;
            }
            return None;
        };
        self.owned[slot as usize] = true;
        self.next_incarnation += 1;
        self.map
            .insert(page, Entry::new(self.next_incarnation, slot, false));
        Some(slot)
    }

    /// Admission control on a miss.
    fn wants(&mut self, page: u64) -> bool {
        match self.admission {
            Admission::Always => true,
            Admission::NHit => {
                let n = self.admission_hits;
                let c = match self.ghost.get_mut(&page) {
                    Some(c) => {
                        *c += 1;
                        *c
                    }
                    None => {
                        if self.ghost_cap == 0 {
                            return n <= 1;
                        }
                        // Bounded: forget the oldest remembered page.
                        while self.ghost.len() >= self.ghost_cap {
                            match self.ghost_order.pop_front() {
                                Some(old) => {
                                    self.ghost.remove(&old);
                                }
                                None => break,
                            }
                        }
                        self.ghost.insert(page, 1);
                        self.ghost_order.push_back(page);
                        1
                    }
                };
                if c >= n {
                    self.ghost.remove(&page);
                    true
                } else {
                    false
                }
            }
        }
    }

    fn host_part_done(&mut self, host: u64, cache: bool, out: &mut Outbox) {
        let Some(h) = self.hosts.get_mut(&host) else {
            return;
        };
        h.cache_only &= cache;
        h.parts -= 1;
        if h.parts == 0 {
            let tier = if h.cache_only {
                TIER_CACHE
            } else {
                TIER_BACKING
            };
            let h = self.hosts.remove(&host).unwrap();
            if let Some(e) = h.failed {
                out.failed.push((host, e));
                return;
            }
            if h.cache_only {
                self.stats.host_ios_cache_only += 1;
            }
            out.complete.push((host, tier));
        }
    }

    /// Sequential-stream detection per tenant.
    fn bypass(&mut self, io: &HostIo) -> bool {
        let end = io.offset_bytes.saturating_add(io.size_bytes as u64);
        let s = self.streams.entry(io.tenant).or_insert((u64::MAX, 0));
        if s.0 == io.offset_bytes {
            s.1 = s.1.saturating_add(io.size_bytes as u64);
        } else {
            s.1 = io.size_bytes as u64;
        }
        s.0 = end;
        self.bypass_bytes > 0 && s.1 > self.bypass_bytes
    }

    fn read(&mut self, io: HostIo, first: u64, n: u64, bypass: bool, out: &mut Outbox) {
        let id = io.id;
        let mut parts = 0u32;
        let mut cache_only = true;
        // A backing read run: (first page, pages, fills it feeds).
        let mut run: Option<(u64, u64, Vec<Fill>)> = None;
        let max_io = u32::MAX as u64 / self.page;
        let mut i = 0;
        while i < n {
            let p = first + i;
            let hit = self.map.get(&p).is_some_and(|e| e.valid);
            if hit {
                self.stats.read_hits += 1;
                let e = self.map.get_mut(&p).unwrap();
                // Clean-evicted pages are gone from the map; evicting (dirty)
                // ones are re-admitted only by writes.
                let (slot, evicting) = (e.slot, e.evicting);
                if !evicting {
                    self.evict.access(p);
                }
                parts += self.submit_backing_read(out, id, first, run.take());
                self.pins[slot as usize] += 1;
                parts += 1;
                let dio = self.page_io(Op::Read, Buffer::Host(id), i, slot, 1);
                self.submit(
                    out,
                    CACHE_DEVICE,
                    dio,
                    Rec::HostRead {
                        host: id,
                        slot: Some(slot),
                        fills: Vec::new(),
                        hit: Some((p, first)),
                    },
                );
            } else {
                self.stats.read_misses += 1;
                cache_only = false;
                let mut fill = None;
                if !self.map.contains_key(&p)
                    && !bypass
                    && !self.backing_inflight.contains_key(&p)
                    && self.wants(p)
                {
                    if self.admit(p, out).is_some() {
                        let e = self.map.get_mut(&p).unwrap();
                        e.filling = Some(e.generation);
                        fill = Some((p, e.incarnation, e.generation, i));
                    }
                } else if bypass {
                    self.stats.bypassed_pages += 1;
                }
                match &mut run {
                    Some((f, k, fills)) if *f + *k == p && *k < max_io => {
                        *k += 1;
                        fills.extend(fill);
                    }
                    _ => {
                        parts += self.submit_backing_read(out, id, first, run.take());
                        run = Some((p, 1, fill.into_iter().collect()));
                    }
                }
            }
            i += 1;
        }
        parts += self.submit_backing_read(out, id, first, run.take());
        self.hosts.insert(
            id,
            HostPending {
                parts,
                cache_only,
                failed: None,
            },
        );
    }

    /// Issues (or queues behind an earlier one) a host write into a page's slot.
    fn slot_write(&mut self, host: u64, page: u64, page_in_buf: u64, out: &mut Outbox) {
        let e = self.map.get_mut(&page).unwrap();
        if e.slot_write_inflight {
            e.waiting.push_back((host, page_in_buf));
            return;
        }
        e.slot_write_inflight = true;
        let (slot, incarnation) = (e.slot, e.incarnation);
        self.pins[slot as usize] += 1;
        let dio = self.page_io(Op::Write, Buffer::Host(host), page_in_buf, slot, 1);
        self.submit(
            out,
            CACHE_DEVICE,
            dio,
            Rec::SlotWrite {
                host,
                page,
                incarnation,
                slot,
            },
        );
    }

    fn write(&mut self, io: HostIo, first: u64, n: u64, bypass: bool, out: &mut Outbox) {
        let id = io.id;
        // Registered first, with one extra part released at the end, and
        // each part counted as soon as it exists: making room for a page may
        // complete this IO's queued parts early (a clean victim with queued
        // write-through parts), which must not complete the IO itself.
        self.hosts.insert(
            id,
            HostPending {
                parts: 1,
                cache_only: true,
                failed: None,
            },
        );
        let mut cache_only = true;
        // Direct backing run: (first page, pages).
        let mut run: Option<(u64, u64)> = None;
        let max_io = u32::MAX as u64 / self.page;
        for i in 0..n {
            let p = first + i;
            let cached = self.map.contains_key(&p);
            if cached {
                self.stats.write_hits += 1;
            } else {
                self.stats.write_misses += 1;
            }
            let to_cache = match self.mode {
                WriteMode::WriteAround => {
                    if cached {
                        // Invalidate: the backing write makes the copy stale.
                        self.evict.remove(p);
                        self.drop_entry(p, out);
                    }
                    false
                }
                _ => {
                    if cached {
                        let e = self.map.get_mut(&p).unwrap();
                        if e.evicting {
                            e.evicting = false;
                            if let Some(v) = self.evict.insert(p) {
                                self.handle_victim(v, out);
                            }
                        } else {
                            self.evict.access(p);
                        }
                        true
                    } else if bypass {
                        self.stats.bypassed_pages += 1;
                        false
                    } else {
                        self.wants(p) && self.admit(p, out).is_some()
                    }
                }
            };
            let to_backing = !to_cache || self.mode == WriteMode::WriteThrough;
            if to_cache {
                let e = self.map.get_mut(&p).unwrap();
                e.generation += 1;
                e.write_back_failed = false;
                e.drop_after_write = false;
                self.add_part(id);
                if self.mode == WriteMode::WriteBack {
                    self.set_dirty(p, true);
                }
                self.slot_write(id, p, i, out);
                // After the slot write is issued, so the cleaning cannot pick
                // this page and read the slot before the new data lands.
                if self.mode == WriteMode::WriteBack {
                    self.clean_set_if_needed(p, out);
                }
            }
            if to_backing {
                cache_only = false;
                *self.backing_inflight.entry(p).or_insert(0) += 1;
                match &mut run {
                    Some((f, k)) if *f + *k == p && *k < max_io => *k += 1,
                    _ => {
                        if let Some((f, k)) = run.take() {
                            self.add_part(id);
                            let dio = self.page_io(Op::Write, Buffer::Host(id), f - first, f, k);
                            self.submit(
                                out,
                                BACKING_DEVICE,
                                dio,
                                Rec::BackingWrite {
                                    host: id,
                                    first: f,
                                    n: k,
                                },
                            );
                        }
                        run = Some((p, 1));
                    }
                }
            }
        }
        if let Some((f, k)) = run.take() {
            self.add_part(id);
            let dio = self.page_io(Op::Write, Buffer::Host(id), f - first, f, k);
            self.submit(
                out,
                BACKING_DEVICE,
                dio,
                Rec::BackingWrite {
                    host: id,
                    first: f,
                    n: k,
                },
            );
        }
        if let Some(h) = self.hosts.get_mut(&id) {
            h.cache_only &= cache_only;
        }
        self.host_part_done(id, true, out);
    }

    /// A direct backing write of pages [first, first + n) ended (done or
    /// failed): fills of those pages may run again.
    fn backing_write_done(&mut self, first: u64, n: u64) {
        for p in first..first + n {
            if let Some(c) = self.backing_inflight.get_mut(&p) {
                *c -= 1;
                if *c == 0 {
                    self.backing_inflight.remove(&p);
                }
            }
        }
    }

    fn add_part(&mut self, host: u64) {
        if let Some(h) = self.hosts.get_mut(&host) {
            h.parts += 1;
        }
    }

    fn flushable(&self, page: u64) -> bool {
        self.map.get(&page).is_some_and(|e| {
            e.dirty
                && e.valid
                && !e.flushing
                && !e.slot_write_inflight
                && e.waiting.is_empty()
                && !e.write_back_failed
        })
    }

    /// Pages whose write-back failed get one more try (a host FLUSH
    /// arrived, or `drain`): only those, so a FLUSH costs nothing more in
    /// a large cache.
    fn retry_failed_write_backs(&mut self) {
        for p in std::mem::take(&mut self.failed_write_backs) {
            if let Some(e) = self.map.get_mut(&p) {
                e.write_back_failed = false;
            }
        }
    }

    /// The write-back of staging `sid` failed (its slot reads or its
    /// backing write): its pages stay dirty, with their data in their
    /// slots, and are not tried again until a retry; the FLUSHes waiting
    /// for them fail (`Outbox::failed`) — a later FLUSH tries again.
    fn write_back_failed(&mut self, sid: u64, error: IoError, out: &mut Outbox) {
        for (p, inc, _) in self.end_write_back(sid, out) {
            if !self.write_back_ended(p, inc) {
                continue;
            }
            self.map.get_mut(&p).unwrap().write_back_failed = true;
            self.failed_write_backs.insert(p);
            self.stats.write_backs_failed += 1;
            if self.draining {
                self.stats.drain_abandoned_pages += 1;
            }
            let failed: Vec<u64> = self
                .flush_waits
                .iter()
                .filter(|w| w.pages.get(&p).is_some_and(|&(i, _)| i == inc))
                .map(|w| w.host)
                .collect();
            self.flush_waits.retain(|w| !failed.contains(&w.host));
            for host in failed {
                self.stats.flushes_failed += 1;
                out.failed.push((host, error));
            }
        }
    }

    /// Flushes the run of adjacent flushable dirty pages around `page` as one
    /// merged backing write. False if `page` cannot be flushed now.
    fn flush_run(&mut self, page: u64, out: &mut Outbox) -> bool {
        if !self.flushable(page) {
            return false;
        }
        let mut lo = page;
        let mut hi = page + 1;
        while hi - lo < self.max_flush_pages && lo > 0 && self.flushable(lo - 1) {
            lo -= 1;
        }
        while hi - lo < self.max_flush_pages && self.flushable(hi) {
            hi += 1;
        }
        self.flush_range(lo, hi, out);
        true
    }

    fn flush_range(&mut self, lo: u64, hi: u64, out: &mut Outbox) {
        let sid = self.next_staging;
        self.next_staging = (self.next_staging + 1) & STAGING_ID_MASK;
        let mut pages = Vec::new();
        for (i, p) in (lo..hi).enumerate() {
            let raced = self.under_trim(p);
            let e = self.map.get_mut(&p).unwrap();
            debug_assert!(e.dirty && !e.flushing);
            e.flushing = true;
            if raced && !e.trim_raced {
                e.trim_raced = true;
                self.stats.trim_raced_flushes += 1;
            }
            pages.push((p, e.incarnation, e.generation));
            let slot = e.slot;
            self.pins[slot as usize] += 1;
            let dio = self.page_io(Op::Read, Buffer::Staging(sid), i as u64, slot, 1);
            self.submit(
                out,
                CACHE_DEVICE,
                dio,
                Rec::FlushRead { staging: sid, slot },
            );
        }
        self.flushes_inflight += 1;
        self.staging.insert(
            sid,
            Staging {
                reads_left: pages.len() as u32,
                pages,
                first: lo,
                failed: None,
            },
        );
    }

    /// flashcache: clean a set whose dirty count passed its threshold, oldest
    /// dirty pages first, down below the threshold.
    fn clean_set_if_needed(&mut self, page: u64, out: &mut Outbox) {
        let Some(sets) = &self.sets else {
            return;
        };
        let s = sets.set_of(page);
        if sets.dirty[s] <= sets.thresh_pages {
            return;
        }
        let mut excess = sets.dirty[s] - sets.thresh_pages + 1;
        // Pages already being flushed count towards the cleaning.
        let mut pick = Vec::new();
        let order: Vec<u64> = self.sets.as_ref().unwrap().order[s]
            .iter()
            .copied()
            .collect();
        let mut keep = VecDeque::new();
        let mut seen = HashSet::new();
        for p in order {
            let Some(e) = self.map.get(&p) else { continue };
            if !e.dirty {
                continue; // stale: cleaned since
            }
            if !seen.insert(p) {
                continue;
            }
            keep.push_back(p);
            if excess > 0 {
                if e.flushing {
                    excess -= 1;
                } else if self.flushable(p) {
                    pick.push(p);
                    excess -= 1;
                }
            }
        }
        self.sets.as_mut().unwrap().order[s] = keep;
        // Adjacent blocks in one write, as flashcache sorts a set's dirty
        // blocks by disk block before cleaning.
        pick.sort_unstable();
        let mut i = 0;
        while i < pick.len() {
            let mut j = i + 1;
            while j < pick.len()
                && pick[j] == pick[j - 1] + 1
                && ((j - i) as u64) < self.max_flush_pages
            {
                j += 1;
            }
            self.flush_range(pick[i], pick[j - 1] + 1, out);
            i = j;
        }
    }

    /// Background flushing by watermarks, idleness and `flush_all`.
    fn try_flush(&mut self, out: &mut Outbox) {
        let dirty = self.dirty_set.len() as f64;
        if dirty > self.high_pages && self.high_pages < self.capacity_pages as f64 {
            self.watermark_active = true;
        }
        if dirty <= self.low_pages {
            self.watermark_active = false;
        }
        if self.dirty_set.is_empty() {
            self.flush_all = false;
            self.idle_flushing = false;
            return;
        }
        let urgent = self.flushing_everything();
        if !(urgent || self.watermark_active) {
            return;
        }
        // Idle and explicit flushes are not rate-limited; watermark flushing
        // keeps `flush_iodepth` batches in flight so it does not starve host IO.
        let limit = if urgent {
            self.flush_iodepth.saturating_mul(16)
        } else {
            self.flush_iodepth
        };
        // Bounded per call: pages that cannot be flushed now (a write in
        // flight) are retried when that write completes.
        let mut scanned = 0;
        let total = self.dirty_set.len().min(1024);
        while self.flushes_inflight < limit && scanned < total {
            let next = self
                .dirty_set
                .range(self.flush_cursor..)
                .next()
                .or_else(|| self.dirty_set.iter().next())
                .copied();
            let Some(p) = next else { break };
            scanned += 1;
            self.flush_cursor = p + 1;
            if self.flush_run(p, out) {
                // Skip past the pages just queued.
                while self.map.get(&self.flush_cursor).is_some_and(|e| e.flushing) {
                    self.flush_cursor += 1;
                }
            }
            if !urgent && (self.dirty_set.len() as f64) <= self.low_pages {
                break;
            }
        }
    }

    /// Write-back `sid` ended (done or failed): its staging is released;
    /// returns its pages (page, incarnation, generation read).
    fn end_write_back(&mut self, sid: u64, out: &mut Outbox) -> Vec<(u64, u64, u64)> {
        let Some(st) = self.staging.remove(&sid) else {
            return Vec::new();
        };
        out.release.push(sid);
        self.flushes_inflight -= 1;
        st.pages
    }

    /// A write-back of page `p` (residency `inc`) ended: it is no longer
    /// being flushed. False if the page left the cache since (nothing to
    /// do). Page by page, so an earlier page's new write-back cannot merge
    /// a later one still marked as flushing.
    fn write_back_ended(&mut self, p: u64, inc: u64) -> bool {
        match self.map.get_mut(&p) {
            Some(e) if e.incarnation == inc => {
                e.flushing = false;
                true
            }
            _ => false,
        }
    }

    fn staging_done(&mut self, sid: u64, out: &mut Outbox) {
        for (p, inc, generation) in self.end_write_back(sid, out) {
            if !self.write_back_ended(p, inc) {
                continue;
            }
            self.flush_waits_page_done(p, inc, Some(generation), out);
            let Some(e) = self.map.get_mut(&p) else {
                continue;
            };
            if e.generation == generation {
                self.set_dirty(p, false);
                let e = &self.map[&p];
                if e.evicting {
                    self.drop_entry(p, out);
                }
            } else if e.evicting || self.flushing_everything() {
                self.flush_run(p, out);
            }
        }
    }
}

/// The names of the counters this policy reports (`Policy::counters`; the
/// docs define each): reports and experiments look values up by these
/// constants, so a renamed counter is a compile error, not a silent "-".
pub mod counter {
    pub const HOST_IOS: &str = "host_ios";
    pub const HOST_IOS_CACHE_ONLY: &str = "host_ios_cache_only";
    pub const MEMORY_ACCESS_RATIO: &str = "memory_access_ratio";
    pub const READ_HITS: &str = "read_hits";
    pub const READ_MISSES: &str = "read_misses";
    pub const WRITE_HITS: &str = "write_hits";
    pub const WRITE_MISSES: &str = "write_misses";
    pub const FILLS: &str = "fills";
    pub const BYPASSED_PAGES: &str = "bypassed_pages";
    pub const FLUSH_IOS: &str = "flush_ios";
    pub const FLUSH_BYTES: &str = "flush_bytes";
    pub const DIRTY_BYTES: &str = "dirty_bytes";
    pub const RESIDENT_BYTES: &str = "resident_bytes";
    pub const TRIMS: &str = "trims";
    pub const TRIMMED_PAGES: &str = "trimmed_pages";
    pub const TRIMMED_DIRTY_PAGES: &str = "trimmed_dirty_pages";
    pub const TRIM_KEPT_PAGES: &str = "trim_kept_pages";
    pub const TRIM_RACED_FLUSHES: &str = "trim_raced_flushes";
    pub const DRAIN_DIRTY_PAGES: &str = "drain_dirty_pages";
    pub const DRAIN_EVICTING_PAGES: &str = "drain_evicting_pages";
    pub const FLUSH_WAITS: &str = "flush_waits";
    pub const DEVICE_ERRORS: &str = "device_errors";
    pub const READS_RETRIED_FROM_BACKING: &str = "reads_retried_from_backing";
    pub const WRITE_BACKS_FAILED: &str = "write_backs_failed";
    pub const FLUSHES_FAILED: &str = "flushes_failed";
    pub const DRAIN_ABANDONED_PAGES: &str = "drain_abandoned_pages";
    pub const SLOT_WRITES_FAILED: &str = "slot_writes_failed";
    pub const METADATA_COMMITS: &str = "metadata_commits";
    pub const METADATA_WRITES: &str = "metadata_writes";
    pub const METADATA_FORMATTED: &str = "metadata_formatted";
    pub const RECOVERED_PAGES: &str = "recovered_pages";
    pub const RECOVERED_PAGES_RESYNCED: &str = "recovered_pages_resynced";
    pub const OPENED_AFTER_CLEAN_STOP: &str = "opened_after_clean_stop";
    pub const RECOVERED_PAGES_DROPPED: &str = "recovered_pages_dropped";
    pub const MISSES_UNCACHED_WAITING_FOR_COMMIT: &str = "misses_uncached_waiting_for_commit";

    /// Every name above, in the order `counters()` reports them.
    pub const ALL: &[&str] = &[
        HOST_IOS,
        HOST_IOS_CACHE_ONLY,
        MEMORY_ACCESS_RATIO,
        READ_HITS,
        READ_MISSES,
        WRITE_HITS,
        WRITE_MISSES,
        FILLS,
        BYPASSED_PAGES,
        FLUSH_IOS,
        FLUSH_BYTES,
        DIRTY_BYTES,
        RESIDENT_BYTES,
        TRIMS,
        TRIMMED_PAGES,
        TRIMMED_DIRTY_PAGES,
        TRIM_KEPT_PAGES,
        TRIM_RACED_FLUSHES,
        DRAIN_DIRTY_PAGES,
        DRAIN_EVICTING_PAGES,
        FLUSH_WAITS,
        DEVICE_ERRORS,
        READS_RETRIED_FROM_BACKING,
        WRITE_BACKS_FAILED,
        FLUSHES_FAILED,
        DRAIN_ABANDONED_PAGES,
        SLOT_WRITES_FAILED,
        METADATA_COMMITS,
        METADATA_WRITES,
        METADATA_FORMATTED,
        RECOVERED_PAGES,
        RECOVERED_PAGES_RESYNCED,
        OPENED_AFTER_CLEAN_STOP,
        RECOVERED_PAGES_DROPPED,
        MISSES_UNCACHED_WAITING_FOR_COMMIT,
    ];
}

impl Policy for Cache {
    fn moves_data(&self) -> bool {
        true
    }

    /// Whole pages only: a partial-page write is widened to its page
    /// without reading the rest first (docs/cache-layer.md), which is
    /// exact in timing but not in data.
    fn required_alignment_bytes(&self) -> u64 {
        self.page
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let s = self.stats();
        let mut v = vec![
            (counter::HOST_IOS, s.host_ios as f64),
            (counter::HOST_IOS_CACHE_ONLY, s.host_ios_cache_only as f64),
            (counter::MEMORY_ACCESS_RATIO, s.memory_access_ratio()),
            (counter::READ_HITS, s.read_hits as f64),
            (counter::READ_MISSES, s.read_misses as f64),
            (counter::WRITE_HITS, s.write_hits as f64),
            (counter::WRITE_MISSES, s.write_misses as f64),
            (counter::FILLS, s.fills as f64),
            (counter::BYPASSED_PAGES, s.bypassed_pages as f64),
            (counter::FLUSH_IOS, s.flush_ios as f64),
            (counter::FLUSH_BYTES, s.flush_bytes as f64),
            (counter::DIRTY_BYTES, s.dirty_bytes as f64),
            (
                counter::RESIDENT_BYTES,
                (self.map.len() as u64 * self.page) as f64,
            ),
            (counter::TRIMS, s.trims as f64),
            (counter::TRIMMED_PAGES, s.trimmed_pages as f64),
            (counter::TRIMMED_DIRTY_PAGES, s.trimmed_dirty_pages as f64),
            (counter::TRIM_KEPT_PAGES, s.trim_kept_pages as f64),
            (counter::TRIM_RACED_FLUSHES, s.trim_raced_flushes as f64),
            (counter::DRAIN_DIRTY_PAGES, s.drain_dirty_pages as f64),
            (counter::DRAIN_EVICTING_PAGES, s.drain_evicting_pages as f64),
            (counter::FLUSH_WAITS, s.flush_waits as f64),
            (counter::DEVICE_ERRORS, s.device_errors as f64),
            (
                counter::READS_RETRIED_FROM_BACKING,
                s.reads_retried_from_backing as f64,
            ),
            (counter::WRITE_BACKS_FAILED, s.write_backs_failed as f64),
            (counter::FLUSHES_FAILED, s.flushes_failed as f64),
            (
                counter::DRAIN_ABANDONED_PAGES,
                s.drain_abandoned_pages as f64,
            ),
            (counter::SLOT_WRITES_FAILED, s.slot_writes_failed as f64),
        ];
        if let Some(m) = &self.persist {
            let p = m.stats;
            v.extend([
                (counter::METADATA_COMMITS, m.table.commits as f64),
                (counter::METADATA_WRITES, p.metadata_writes as f64),
                (counter::METADATA_FORMATTED, p.formatted as f64),
                (counter::RECOVERED_PAGES, p.recovered_pages as f64),
                (counter::RECOVERED_PAGES_RESYNCED, p.resynced_pages as f64),
                (counter::OPENED_AFTER_CLEAN_STOP, p.opened_clean as f64),
                (
                    counter::RECOVERED_PAGES_DROPPED,
                    p.recovered_pages_dropped as f64,
                ),
                (
                    counter::MISSES_UNCACHED_WAITING_FOR_COMMIT,
                    p.misses_uncached_waiting_for_commit as f64,
                ),
            ]);
        }
        v
    }

    fn tier_names(&self) -> Vec<String> {
        vec!["cache".into(), "backing".into()]
    }

    fn on_host_io(&mut self, now_ns: TimeNs, io: HostIo, out: &mut Outbox) {
        self.stats.host_ios += 1;
        self.last_host_ns = now_ns;
        self.idle_flushing = false;
        if self.idle_ns > 0 && !self.timer_armed {
            self.timer_armed = true;
            out.timers
                .push((now_ns.saturating_add(self.idle_ns), IDLE_TIMER));
        }
        let first = io.offset_bytes / self.page;
        let end = io.offset_bytes.saturating_add(io.size_bytes as u64);
        let n = end.div_ceil(self.page).saturating_sub(first);
        if io.op == Op::Flush {
            self.host_flush(io, out);
            if cfg!(debug_assertions) {
                self.check_invariants();
            }
            return;
        }
        if n == 0 {
            out.complete.push((io.id, TIER_BACKING));
            return;
        }
        assert!(
            !self.hosts.contains_key(&io.id),
            "host IO {} is already in flight",
            io.id
        );
        match io.op {
            Op::Read => {
                let bypass = self.bypass(&io);
                self.read(io, first, n, bypass, out)
            }
            Op::Write => {
                let bypass = self.bypass(&io);
                self.write(io, first, n, bypass, out)
            }
            Op::Trim => self.trim(io, out),
            Op::Flush => unreachable!("completed above"),
        }
        self.try_flush(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    fn on_device_completion(&mut self, _now_ns: TimeNs, device: usize, tag: u64, out: &mut Outbox) {
        // A completion of no IO in flight is an executor bug that would
        // corrupt the maps if ignored: stop here.
        let Some(rec) = self.inflight.remove(&(device, tag)) else {
            panic!(
                "{}: a completion for device {device} tag {tag}, which is not in flight",
                self.name
            );
        };
        match rec {
            Rec::HostRead {
                host, slot, fills, ..
            } => {
                if let Some(s) = slot {
                    self.unpin(s);
                }
                for (p, inc, generation, page_in_buf) in fills {
                    let Some(e) = self.map.get_mut(&p) else {
                        continue;
                    };
                    if e.incarnation != inc || e.filling != Some(generation) {
                        continue;
                    }
                    e.filling = None;
                    if e.generation != generation || e.slot_write_inflight {
                        // Written since the backing read began: the read's
                        // data is older than the slot's.
                        continue;
                    }
                    e.slot_write_inflight = true;
                    let slot = e.slot;
                    self.pins[slot as usize] += 1;
                    self.stats.fills += 1;
                    let dio = self.page_io(Op::Write, Buffer::Host(host), page_in_buf, slot, 1);
                    self.submit(
                        out,
                        CACHE_DEVICE,
                        dio,
                        Rec::FillWrite {
                            page: p,
                            incarnation: inc,
                            slot,
                        },
                    );
                }
                self.host_part_done(host, device == CACHE_DEVICE, out);
            }
            Rec::SlotWrite {
                host,
                page,
                incarnation,
                slot,
            } => {
                self.unpin(slot);
                self.slot_written(page, incarnation, out);
                self.host_part_done(host, true, out);
            }
            Rec::FillWrite {
                page,
                incarnation,
                slot,
            } => {
                self.unpin(slot);
                self.slot_written(page, incarnation, out);
            }
            Rec::BackingWrite { host, first, n } => {
                self.backing_write_done(first, n);
                self.host_part_done(host, false, out);
            }
            Rec::FlushRead { staging, slot } => {
                self.unpin(slot);
                let Some(st) = self.staging.get_mut(&staging) else {
                    return;
                };
                st.reads_left -= 1;
                if st.reads_left == 0 {
                    match st.failed {
                        // Another slot read of this write-back failed: the
                        // staging does not hold every page.
                        Some(e) => self.write_back_failed(staging, e, out),
                        None => {
                            let (first, k) = (st.first, st.pages.len() as u64);
                            self.stats.flush_ios += 1;
                            self.stats.flush_bytes += k * self.page;
                            let dio =
                                self.page_io(Op::Write, Buffer::Staging(staging), 0, first, k);
                            self.submit(out, BACKING_DEVICE, dio, Rec::FlushWrite { staging });
                        }
                    }
                }
            }
            Rec::FlushWrite { staging } => self.staging_done(staging, out),
            Rec::Trim { host } => self.trim_done(host, out),
            Rec::MetaFlush => self.commit_flushed(out),
            Rec::MetaPage => {
                if self.persist.as_mut().unwrap().table.page_written() {
                    self.commit_done(out);
                }
            }
            Rec::StopFlush => self.write_stop_header(out),
            Rec::StopHeader => self.persist.as_mut().unwrap().stop = StopStep::Done,
        }
        self.try_flush(out);
        self.stop_progress(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Survives what it can answer without losing an acknowledged byte
    /// (docs/cache-layer.md): a failed cache read of a *clean* page is read
    /// again from the backing device (and the copy dropped); any other
    /// failed host read fails that host IO; a failed fill drops the copy it
    /// was making; a failed host write to the backing device alone (write-
    /// around, or an uncached page) fails that write. Everything else — a
    /// failed slot write, write-through backing write, write-back or trim —
    /// is refused (fail-stop): the executor stops.
    fn on_device_error(
        &mut self,
        _now_ns: TimeNs,
        device: usize,
        tag: u64,
        error: IoError,
        out: &mut Outbox,
    ) -> bool {
        let handled = match self.inflight.get(&(device, tag)) {
            Some(Rec::HostRead { .. }) => true,
            // A host write to the backing device: alone (write-around, a
            // page not cached), or write-through (its cached copy dropped).
            Some(Rec::BackingWrite { .. }) => true,
            // A write-back's slot read or backing write: the pages stay
            // dirty (their data is in their slots).
            Some(Rec::FlushRead { .. } | Rec::FlushWrite { .. }) => true,
            // A host write into a slot: the write fails; its page keeps
            // what the slot holds if it held acknowledged data, else goes.
            Some(Rec::SlotWrite { .. }) => true,
            // A host trim: it fails, the cached pages stay.
            Some(Rec::Trim { .. }) => true,
            // A fill: the copy it was making goes (or a host write queued
            // behind it overwrites the page).
            Some(Rec::FillWrite { .. }) => true,
            _ => false,
        };
        if !handled {
            return false;
        }
        self.stats.device_errors += 1;
        match self.inflight.remove(&(device, tag)).unwrap() {
            Rec::HostRead {
                host,
                slot,
                fills,
                hit,
            } => {
                if let Some(s) = slot {
                    self.unpin(s);
                }
                // A failed backing read fills nothing.
                for (p, inc, generation, _) in fills {
                    if let Some(e) = self.map.get_mut(&p)
                        && e.incarnation == inc
                        && e.filling == Some(generation)
                    {
                        e.filling = None;
                    }
                }
                // The backing device holds a page that is not dirty now: its
                // copy there is no older than the one the failed read would
                // have returned (a write-back since only brought it newer).
                let retry = hit.filter(|&(page, _)| {
                    device == CACHE_DEVICE && self.map.get(&page).is_none_or(|e| !e.dirty)
                });
                match retry {
                    Some((page, first)) => {
                        self.stats.reads_retried_from_backing += 1;
                        let idle = self.map.get(&page).is_some_and(|e| {
                            !e.evicting
                                && !e.slot_write_inflight
                                && e.waiting.is_empty()
                                && !e.flushing
                        });
                        if idle {
                            // The slot may be bad: stop using this copy.
                            self.evict.remove(page);
                            self.drop_entry(page, out);
                        }
                        let parts =
                            self.submit_backing_read(out, host, first, Some((page, 1, Vec::new())));
                        if let Some(h) = self.hosts.get_mut(&host) {
                            h.parts += parts;
                        }
                        self.host_part_done(host, false, out);
                    }
                    None => {
                        if let Some(h) = self.hosts.get_mut(&host) {
                            h.failed.get_or_insert(error);
                        }
                        self.host_part_done(host, device == CACHE_DEVICE, out);
                    }
                }
            }
            Rec::FillWrite {
                page,
                incarnation,
                slot,
            } => {
                // The copy never landed: a host write queued behind the
                // fill goes on, else the copy goes (the backing device has
                // the page).
                self.unpin(slot);
                self.slot_write_failed(page, incarnation, out);
            }
            Rec::BackingWrite { host, first, n } => {
                self.backing_write_done(first, n);
                if self.mode == WriteMode::WriteThrough {
                    // The backing pages hold something unknown now, the
                    // slots the failed write's data: drop the copies, so a
                    // read never changes its answer when one is evicted.
                    for p in first..first + n {
                        self.drop_failed_copy(p, out);
                    }
                }
                if let Some(h) = self.hosts.get_mut(&host) {
                    h.failed.get_or_insert(error);
                }
                self.host_part_done(host, false, out);
            }
            Rec::FlushRead { staging, slot } => {
                self.unpin(slot);
                if let Some(st) = self.staging.get_mut(&staging) {
                    st.failed.get_or_insert(error);
                    st.reads_left -= 1;
                    if st.reads_left == 0 {
                        self.write_back_failed(staging, error, out);
                    }
                }
            }
            Rec::FlushWrite { staging } => self.write_back_failed(staging, error, out),
            Rec::SlotWrite {
                host,
                page,
                incarnation,
                slot,
            } => {
                self.unpin(slot);
                self.stats.slot_writes_failed += 1;
                if let Some(h) = self.hosts.get_mut(&host) {
                    h.failed.get_or_insert(error);
                }
                self.slot_write_failed(page, incarnation, out);
                self.host_part_done(host, true, out);
            }
            Rec::Trim { host } => {
                let i = self
                    .trims
                    .iter()
                    .position(|t| t.host == host)
                    .expect("a trim error has its trim");
                let t = self.trims.swap_remove(i);
                for p in self.cached_pages_in(t.first_full_page, t.end_full_page) {
                    if !self.under_trim(p) {
                        self.map.get_mut(&p).unwrap().trim_raced = false;
                    }
                }
                if let Some(h) = self.hosts.get_mut(&host) {
                    h.failed.get_or_insert(error);
                }
                self.host_part_done(host, false, out);
            }
            _ => unreachable!("only the records checked above"),
        }
        self.try_flush(out);
        self.stop_progress(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
        true
    }

    fn on_timer(&mut self, now_ns: TimeNs, timer_id: u64, out: &mut Outbox) {
        if timer_id != IDLE_TIMER {
            return;
        }
        self.timer_armed = false;
        let due = self.last_host_ns.saturating_add(self.idle_ns);
        if now_ns >= due {
            self.idle_flushing = true;
            self.try_flush(out);
        } else {
            self.timer_armed = true;
            out.timers.push((due, IDLE_TIMER));
        }
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Flushes every dirty page; pages chosen for eviction are among them.
    fn drain(&mut self, _now_ns: TimeNs, out: &mut Outbox) {
        self.draining = true;
        self.retry_failed_write_backs();
        self.stats.drain_dirty_pages = self.dirty_set.len() as u64;
        self.stats.drain_evicting_pages = self.map.values().filter(|e| e.evicting).count() as u64;
        self.try_flush(out);
        self.stop_progress(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Nothing in flight and nothing dirty: the backing device holds every
    /// page's newest data (write-through and write-around never hold dirty
    /// pages).
    fn is_drained(&self) -> bool {
        // A page whose write-back failed during the drain is given up
        // (`drain_abandoned_pages`; the device error is reported).
        self.inflight.is_empty()
            && self
                .dirty_set
                .iter()
                .all(|p| self.draining && self.map[p].write_back_failed)
            && self.hosts.is_empty()
            && self
                .persist
                .as_ref()
                .is_none_or(|m| m.stop == StopStep::Done)
    }

    /// Persistent mode: reads the metadata area and comes up warm (module
    /// docs); without it the cache starts cold.
    fn open(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        if self.persist.is_some() {
            self.recover(stores)?;
        }
        Ok(())
    }

    /// Per page, where `read` would send it now: the slot while it holds
    /// valid data (dirty or clean, also while a write-back of it runs),
    /// else the backing device at the same offset.
    fn locate(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) {
        let from = out.len();
        let end = offset_bytes.saturating_add(len_bytes);
        let page = self.page;
        let backing = |at: u64, end: u64| Extent {
            len_bytes: end - at,
            tier: TIER_BACKING,
            device: BACKING_DEVICE,
            device_offset_bytes: at,
        };
        let mut at = offset_bytes;
        for p in self.cached_pages_in(offset_bytes / page, end.div_ceil(page)) {
            let e = &self.map[&p];
            if !e.valid {
                continue;
            }
            let lo = (p * page).max(offset_bytes);
            let hi = ((p + 1) * page).min(end);
            if at < lo {
                push_extent(out, from, backing(at, lo));
            }
            let slot_bytes = e.slot * page;
            let ext = Extent {
                len_bytes: hi - lo,
                tier: TIER_CACHE,
                device: CACHE_DEVICE,
                device_offset_bytes: slot_bytes + (lo - p * page),
            };
            push_extent(out, from, ext);
            at = hi;
        }
        if at < end {
            push_extent(out, from, backing(at, end));
        }
    }
}

impl Cache {
    /// A host trim: the backing range is trimmed now, the cached pages it
    /// covers are dropped when that completes (`trim_done`). A flush already
    /// running on one of them races the backing trim.
    fn trim(&mut self, io: HostIo, out: &mut Outbox) {
        self.stats.trims += 1;
        let end = io.offset_bytes + io.size_bytes as u64;
        let t = TrimInFlight {
            host: io.id,
            first_full_page: io.offset_bytes.div_ceil(self.page),
            end_full_page: end / self.page,
        };
        for p in self.cached_pages_in(t.first_full_page, t.end_full_page) {
            let e = self.map.get_mut(&p).unwrap();
            if e.flushing && !e.trim_raced {
                e.trim_raced = true;
                self.stats.trim_raced_flushes += 1;
            }
        }
        self.trims.push(t);
        self.hosts.insert(
            io.id,
            HostPending {
                parts: 1,
                cache_only: false,
                failed: None,
            },
        );
        let dio = DeviceIo {
            tag: encode_tag(Buffer::Host(io.id), 0),
            op: Op::Trim,
            offset_bytes: io.offset_bytes,
            size_bytes: io.size_bytes,
        };
        self.submit(out, BACKING_DEVICE, dio, Rec::Trim { host: io.id });
    }

    /// The backing trim of host trim `host` completed: drop the pages it
    /// covers unless a device IO writes or flushes them, or they are dirty
    /// and a flush raced the trim (see the module docs); then complete it.
    fn trim_done(&mut self, host: u64, out: &mut Outbox) {
        let i = self
            .trims
            .iter()
            .position(|t| t.host == host)
            .expect("a trim completion has its trim");
        let t = self.trims.swap_remove(i);
        for p in self.cached_pages_in(t.first_full_page, t.end_full_page) {
            // Overlapping trims (an ill-formed host): the other one still
            // needs the mark.
            let still_trimmed = self.under_trim(p);
            let e = self.map.get_mut(&p).unwrap();
            let busy = e.flushing || e.slot_write_inflight || !e.waiting.is_empty();
            let stale_backing = e.dirty && e.trim_raced;
            if !still_trimmed {
                e.trim_raced = false;
            }
            if busy || stale_backing {
                self.stats.trim_kept_pages += 1;
                continue;
            }
            let (dirty, evicting) = (e.dirty, e.evicting);
            if dirty {
                self.set_dirty(p, false);
                self.stats.trimmed_dirty_pages += 1;
            }
            // An evicting page already left the eviction policy.
            if !evicting {
                self.evict.remove(p);
            }
            self.drop_entry(p, out);
            self.stats.trimmed_pages += 1;
        }
        self.host_part_done(host, false, out);
    }

    /// Persistent mode, `Policy::open`: formats a never-written area;
    /// refuses one of another configuration or a damaged one; loads the
    /// entries (per page the claim of the newest commit). After a clean
    /// stop they are clean copies; after a crash a slot may hold a write
    /// newer than its backing block (or its backing block one newer than a
    /// slot whose clear was not durable yet — never a flushed one), so every
    /// recovered slot is copied to its backing block first, as md resyncs
    /// its dirty regions. Then the header is marked not clean (synced)
    /// before any IO runs.
    fn recover(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        assert!(
            self.map.is_empty() && self.inflight.is_empty(),
            "open before any IO"
        );
        let need = self.cache_device_bytes();
        let have = stores.capacity_bytes(CACHE_DEVICE);
        if have < need {
            return Err(OpenError::mismatch(format!(
                "the cache device holds {have} bytes; {} pages of {} bytes and their metadata need {need}",
                self.capacity_pages, self.page
            )));
        }
        let backing_bytes = stores.capacity_bytes(BACKING_DEVICE);
        self.persist.as_mut().unwrap().backing_bytes = backing_bytes;
        // What a killed process left may sit in the OS's cache only: make
        // it durable before building on it.
        stores.sync(CACHE_DEVICE)?;
        stores.sync(BACKING_DEVICE)?;
        let base = self.persist.as_ref().unwrap().table.base_bytes;
        let mut a = vec![0u8; slot_meta::PAGE];
        let mut b = vec![0u8; slot_meta::PAGE];
        stores.read_at(CACHE_DEVICE, base + slot_meta::copy_offset(0, 0), &mut a)?;
        stores.read_at(CACHE_DEVICE, base + slot_meta::copy_offset(0, 1), &mut b)?;
        let n = HEADER_FIELDS.len() + 1;
        let (ha, hb) = (
            slot_meta::decode_header(MAGIC_HEADER, &a, n),
            slot_meta::decode_header(MAGIC_HEADER, &b, n),
        );
        let (ra, rb) = (ha.as_ref().err().copied(), hb.as_ref().err().copied());
        let Some((copy, fields, seq)) = slot_meta::newest(ha, hb) else {
            // Only an area never written is formatted: a damaged or foreign
            // one holds data nobody should wipe silently.
            if a.iter().chain(&b).all(|&x| x == 0) {
                return self.format(stores);
            }
            return Err(OpenError::mismatch(format!(
                "{}: the cache device's metadata header (at byte {base}) is unreadable \
                 (copy 0: {}; copy 1: {}): refusing to format over what it may hold; give a \
                 new or zeroed cache device to start with an empty cache",
                self.name,
                ra.unwrap_or("valid"),
                rb.unwrap_or("valid")
            )));
        };
        let here = self.header_fields(backing_bytes, false);
        let differ: Vec<String> = HEADER_FIELDS
            .iter()
            .enumerate()
            .filter(|(i, _)| fields[*i] != here[*i])
            .map(|(i, f)| {
                let show = |v: u64| match (i, v) {
                    (0, 1) => "cache".to_string(),
                    (0, 2) => "flashcache".to_string(),
                    _ => v.to_string(),
                };
                format!(
                    "{f} {} on the device, {} in the config",
                    show(fields[i]),
                    show(here[i])
                )
            })
            .collect();
        if !differ.is_empty() {
            return Err(OpenError::mismatch(format!(
                "{}: the cache device holds a cache made for another configuration ({}); \
                 refusing to reinterpret it: use the configuration it was made with, or a new \
                 (or zeroed) cache device to start with an empty cache",
                self.name,
                differ.join("; ")
            )));
        }
        let clean = match fields[HEADER_FIELDS.len()] {
            0 => false,
            1 => true,
            v => {
                return Err(OpenError::mismatch(format!(
                    "{}: the metadata header's clean flag is {v}, neither 0 nor 1",
                    self.name
                )));
            }
        };
        let backing_pages = backing_bytes / self.page;
        let table = &mut self.persist.as_mut().unwrap().table;
        table.header_loaded(seq, copy);
        let loaded = table.load(stores, CACHE_DEVICE, &|_, page| {
            if page < backing_pages {
                Ok(())
            } else {
                Err(format!("past the backing device's {backing_pages} pages"))
            }
        })?;
        // Oldest commit first: the eviction policy sees the newest last.
        let mut claims = loaded.claims;
        claims.sort_unstable_by_key(|&(slot, _, cseq)| (cseq, slot));
        if !clean {
            let mut buf = vec![0u8; self.page as usize];
            for &(slot, page, _) in &claims {
                stores.read_at(CACHE_DEVICE, slot * self.page, &mut buf)?;
                stores.write_at(BACKING_DEVICE, page * self.page, &buf)?;
            }
            stores.sync(BACKING_DEVICE)?;
        }
        let mut taken = vec![false; self.capacity_pages as usize];
        let mut dropped = Vec::new();
        for &(slot, page, _) in &claims {
            taken[slot as usize] = true;
            self.owned[slot as usize] = true;
            self.next_incarnation += 1;
            self.map
                .insert(page, Entry::new(self.next_incarnation, slot, true));
            // After a crash a set of flashcache can hold more claims than it
            // has ways: a page evicted (its entry's clear not durable yet)
            // and the page that took its place (committed). The older
            // goes — its slot was copied to the backing device above — and
            // its entry is cleared on the device now.
            if let Some(v) = self.evict.insert(page) {
                let e = self.map.remove(&v).expect("a victim is cached");
                taken[e.slot as usize] = false;
                self.owned[e.slot as usize] = false;
                dropped.push(e.slot);
            }
        }
        let m = self.persist.as_mut().unwrap();
        m.table.clear_now(stores, CACHE_DEVICE, &dropped)?;
        m.stats.recovered_pages_dropped = dropped.len() as u64;
        self.free = (0..self.capacity_pages)
            .rev()
            .filter(|&s| !taken[s as usize])
            .collect();
        // Not clean from now on, durably, before any IO changes a slot.
        let fields = self.header_fields(backing_bytes, false);
        let m = self.persist.as_mut().unwrap();
        let seq = m.table.next_seq(0);
        let (offset, _) = m.table.next_version(0);
        stores.write_at(
            CACHE_DEVICE,
            offset,
            &slot_meta::encode_header(MAGIC_HEADER, &fields, seq),
        )?;
        stores.sync(CACHE_DEVICE)?;
        m.stats.recovered_pages = claims.len() as u64 - dropped.len() as u64;
        m.stats.opened_clean = clean as u64;
        if !clean {
            m.stats.resynced_pages = claims.len() as u64;
        }
        if cfg!(debug_assertions) {
            self.check_invariants_full();
        }
        Ok(())
    }

    /// A never-written area: entry pages (every slot free) in copy 0, copy 1
    /// zeroed, synced; then the header, synced — so a crash during the
    /// format leaves no header over stale entries.
    fn format(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        let backing_bytes = self.persist.as_ref().unwrap().backing_bytes;
        let fields = self.header_fields(backing_bytes, false);
        let m = self.persist.as_mut().unwrap();
        m.table.format(stores, CACHE_DEVICE)?;
        let base = m.table.base_bytes;
        stores.write_at(
            CACHE_DEVICE,
            base + slot_meta::copy_offset(0, 1),
            &vec![0u8; slot_meta::PAGE],
        )?;
        stores.sync(CACHE_DEVICE)?;
        let seq = m.table.next_seq(0);
        let (offset, _) = m.table.next_version(0);
        stores.write_at(
            CACHE_DEVICE,
            offset,
            &slot_meta::encode_header(MAGIC_HEADER, &fields, seq),
        )?;
        stores.sync(CACHE_DEVICE)?;
        m.stats.formatted = 1;
        Ok(())
    }

    /// Cheap invariants, checked after every handler in debug builds.
    fn check_invariants(&self) {
        let cap = self.capacity_pages as usize;
        assert!(
            self.map.len() + self.free.len() <= cap,
            "{} entries and {} free slots in a cache of {cap}",
            self.map.len(),
            self.free.len()
        );
        assert!(self.dirty_set.len() <= self.map.len());
        assert!(self.mode == WriteMode::WriteBack || self.dirty_set.is_empty());
        assert!(self.evict.len() <= self.map.len());
        assert_eq!(self.flushes_inflight as usize, self.staging.len());
        assert!(self.staging.len() <= self.inflight.len());
        assert!(self.trims.len() <= self.hosts.len());
    }

    /// Every invariant, at a cost linear in the cache and the IOs in
    /// flight: for tests, between events.
    #[doc(hidden)]
    pub fn check_invariants_full(&self) {
        self.check_invariants();
        // A FLUSH waits only for dirty pages of their current residency.
        for w in &self.flush_waits {
            assert!(
                !self.flush_wait_done(w),
                "FLUSH {} waits for nothing",
                w.host
            );
            for (p, (inc, _)) in &w.pages {
                let e = self
                    .map
                    .get(p)
                    .unwrap_or_else(|| panic!("FLUSH {} waits for page {p}, not cached", w.host));
                assert_eq!(
                    e.incarnation, *inc,
                    "FLUSH {} waits for an old residency of page {p}",
                    w.host
                );
                assert!(e.dirty, "FLUSH {} waits for clean page {p}", w.host);
            }
        }
        let cap = self.capacity_pages as usize;
        let mut owner: Vec<Option<u64>> = vec![None; cap];
        for (&p, e) in &self.map {
            let s = e.slot as usize;
            assert!(
                owner[s].is_none(),
                "slot {s} owned by pages {:?} and {p}",
                owner[s]
            );
            owner[s] = Some(p);
            assert!(self.owned[s], "page {p}'s slot {s} is not marked owned");
            assert_eq!(
                e.dirty,
                self.dirty_set.contains(&p),
                "page {p}: dirty flag vs set"
            );
            assert!(!e.flushing || e.dirty, "page {p} is flushed but clean");
            assert!(
                !e.write_back_failed || (e.dirty && self.failed_write_backs.contains(&p)),
                "page {p}: a failed write-back mark on a clean page, or not listed"
            );
            assert!(
                !(e.drop_after_write && e.dirty && e.valid),
                "page {p}: acknowledged dirty data marked to be dropped"
            );
            assert!(
                e.waiting.is_empty() || e.slot_write_inflight,
                "page {p} waits for nothing"
            );
            assert_eq!(
                e.evicting,
                !self.evict.contains(p),
                "page {p}: evicting vs the eviction policy"
            );
            assert!(
                !e.trim_raced || self.under_trim(p),
                "page {p}: a stale trim mark"
            );
            // A fill over valid data only if a write made it valid since (the
            // fill is then abandoned).
            assert!(
                e.filling.is_none_or(|g| !e.valid || e.generation != g),
                "page {p}: a fill would overwrite valid data"
            );
        }
        let resident = self.map.values().filter(|e| !e.evicting).count();
        assert_eq!(self.evict.len(), resident, "the eviction policy's pages");
        let mut in_free = vec![false; cap];
        for &s in &self.free {
            let s = s as usize;
            assert!(!in_free[s], "slot {s} is free twice");
            in_free[s] = true;
            assert!(
                owner[s].is_none() && self.pins[s] == 0,
                "free slot {s} is in use"
            );
        }
        let mut pins = vec![0u32; cap];
        let mut backing: HashMap<u64, u32> = HashMap::new();
        for rec in self.inflight.values() {
            match rec {
                Rec::HostRead { slot: Some(s), .. }
                | Rec::SlotWrite { slot: s, .. }
                | Rec::FillWrite { slot: s, .. }
                | Rec::FlushRead { slot: s, .. } => pins[*s as usize] += 1,
                Rec::BackingWrite { first, n, .. } => {
                    for p in *first..first + n {
                        *backing.entry(p).or_insert(0) += 1;
                    }
                }
                _ => {}
            }
        }
        for s in 0..cap {
            assert_eq!(pins[s], self.pins[s], "slot {s}: pins vs IOs in flight");
            assert_eq!(owner[s].is_some(), self.owned[s], "slot {s}: owned flag");
            let blocked = self.persist.as_ref().is_some_and(|m| m.blocked[s]);
            assert!(
                self.owned[s] || self.pins[s] > 0 || in_free[s] || blocked,
                "slot {s} is lost: neither owned, pinned, free nor waiting for a commit"
            );
            assert!(!(in_free[s] && blocked), "free slot {s} waits for a commit");
            // Persistent mode: an entry names only a valid page in its slot.
            if let Some(m) = &self.persist {
                let (b, _) = m.table.entry(s as u64);
                if b != 0 {
                    let e = self.map.get(&(b - 1));
                    assert!(
                        e.is_some_and(|e| e.slot == s as u64 && e.valid),
                        "slot {s}'s entry names page {} which it does not hold",
                        b - 1
                    );
                }
            }
        }
        assert_eq!(
            backing, self.backing_inflight,
            "direct backing writes in flight"
        );
        if let Some(sets) = &self.sets {
            let mut dirty = vec![0u64; sets.num_sets as usize];
            for &p in &self.dirty_set {
                dirty[sets.set_of(p)] += 1;
            }
            assert_eq!(dirty, sets.dirty, "dirty pages per set");
        }
    }

    /// A host write into the page's slot failed: the slot's bytes for the
    /// page are unknown. The next queued write (a whole page) goes on; else
    /// a page that held acknowledged data keeps what the slot holds (dirty
    /// in write-back: a failed write leaves its range unspecified, and it
    /// stays one answer), and one that held none — or a write-through copy,
    /// whose backing page may now differ — is dropped.
    fn slot_write_failed(&mut self, page: u64, incarnation: u64, out: &mut Outbox) {
        let Some(e) = self.map.get_mut(&page) else {
            return;
        };
        if e.incarnation != incarnation {
            return;
        }
        e.slot_write_inflight = false;
        if let Some((host, page_in_buf)) = e.waiting.pop_front() {
            self.slot_write(host, page, page_in_buf, out);
            return;
        }
        if e.valid && self.mode == WriteMode::WriteBack {
            if e.evicting || self.flushing_everything() {
                self.flush_run(page, out);
            }
            return;
        }
        self.drop_failed_copy(page, out);
    }

    /// Drops page `page`'s cached copy after a failed write, unless an IO
    /// still writes or flushes it (that IO decides what it holds).
    fn drop_failed_copy(&mut self, page: u64, out: &mut Outbox) {
        let Some(e) = self.map.get_mut(&page) else {
            return;
        };
        // Never a copy holding acknowledged data not written back.
        if e.dirty && e.valid {
            e.drop_after_write = false;
            return;
        }
        if e.slot_write_inflight || !e.waiting.is_empty() || e.flushing {
            e.drop_after_write = true;
            return;
        }
        let evicting = e.evicting;
        self.set_dirty(page, false);
        if !evicting {
            self.evict.remove(page);
        }
        self.drop_entry(page, out);
    }

    /// A write into the page's slot completed (host write or fill).
    fn slot_written(&mut self, page: u64, incarnation: u64, out: &mut Outbox) {
        let Some(e) = self.map.get_mut(&page) else {
            return;
        };
        if e.incarnation != incarnation {
            return;
        }
        e.valid = true;
        e.slot_write_inflight = false;
        if e.drop_after_write && e.waiting.is_empty() {
            return self.drop_failed_copy(page, out);
        }
        let (dirty, slot, evicting) = (e.dirty, e.slot, e.evicting);
        let next_write = e.waiting.pop_front();
        // Persistent mode: the slot holds the page's data now; the next
        // commit says so.
        if let Some(m) = &mut self.persist
            && m.table.entry(slot).0 != page + 1
        {
            m.table.set(slot, page);
            self.try_commit(out);
        }
        if let Some((host, page_in_buf)) = next_write {
            self.slot_write(host, page, page_in_buf, out);
        } else if evicting || self.flushing_everything() {
            self.flush_run(page, out);
        } else if dirty && self.mode == WriteMode::WriteBack {
            // Set cleaning (flashcache): the write that pushed the set over
            // its threshold could not pick pages whose slot writes were
            // still in flight — this one can be cleaned now.
            self.clean_set_if_needed(page, out);
        }
    }
}
