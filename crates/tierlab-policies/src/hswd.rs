//! HSWD: a hybrid shingled-write disk (spec/hswd.md, seed 002). An SSD
//! persistent cache (PCache, device 0) in front of the native region of an
//! SMR disk (NRegion, device 1, addressed like the volume). Every host
//! write goes to the PCache; dirty blocks reach the NRegion only by band
//! read-modify-write (RMW), so the NRegion only ever sees whole-band
//! writes.
//!
//! PCache layout on device 0 (byte offsets):
//! - **metadata area** at 0 (format: [`crate::hswd_meta`]): a header page
//!   (geometry, and the RMW journal record "band b is staged in the
//!   RCache"), then the per-slot entries (disk block + the commit that
//!   wrote it) packed into 4 KiB pages; every page in two copies,
//!   versioned and crc32c-checked;
//! - **data area**: `blocks` cache blocks of `block_bytes`;
//! - **reserved area (RCache)**: one band, where an RMW is staged.
//!
//! `pcache_bytes` is data area + RCache (the paper's "256 MB PCache = 224 MB
//! data + 32 MB reserved"); the metadata area comes on top.
//!
//! Mapping: the data area is split into `sets` equal sets (band `i` → set
//! `i % sets`, fully associative inside a set); `mapping = "fully"` is one
//! set. Every cached block is dirty (reads are not cached), so a set's
//! "dirty share" is its used blocks over its size.
//!
//! Write (per block): a block cached in its set is overwritten in place
//! (a write hit; writes to one slot are serialised, and wait for an RMW
//! reading the slot). Otherwise a free block
//! of the set is taken (a miss): data write, then a metadata *commit* (a
//! PCache flush, then the changed entry pages), then the host write
//! completes (see *Persistence* below). Without a free block the block
//! waits (in arrival order) until cleaning frees one. After each write, a
//! set whose dirty share is ≥ `clean_start_pct` is queued for cleaning.
//!
//! Cleaning: one RMW at a time (the RCache holds one band): take the first
//! queued set; while its dirty share is ≥ `clean_stop_pct` (or writes wait
//! for it), select a band of the set (`fifo`: bands in order of their first
//! cached write; `lru`: least recently accessed band, reads and writes
//! counted; `most`: the band with most cached blocks, ties to the lowest
//! band) and RMW it:
//! 1. read the whole band from the NRegion into a staging buffer;
//! 2. read the band's cached blocks from the PCache into it (blocks with a
//!    write in flight are left for a later RMW);
//! 3. stage it: clear a journal record still set (and flush), write the
//!    merged band into the RCache (and flush), set the journal record in
//!    the header page (and flush);
//! 4. write the band back to the NRegion (one sequential write), then flush
//!    the NRegion — while this runs, reads of the band's uncached blocks
//!    are served from the RCache (the band on the disk is being rewritten);
//! 5. free the merged blocks unless a host write reached them since step 2:
//!    their entries are cleared by the next commit, their slots reused only
//!    once that is durable; then serve waiting writes.
//!
//! Persistence (docs/crash-consistency.md): a write is acknowledged only
//! once its data landed and its block's entry was written by a completed
//! commit, so the executor's sync after a FLUSH makes both durable;
//! `Policy::open` (`recover`) formats a never-written area (recording the
//! NRegion's volume id), refuses one made for another NRegion, of another
//! geometry or a damaged one, finishes a journaled RMW from the RCache and
//! rebuilds the maps from the entries.
//!
//! Reads: a cached block from its PCache slot, else (band in step 4) from
//! the RCache, else from the NRegion; adjacent blocks from the same place
//! go as one IO (PCache slots one by one).
//!
//! Idle cleaning (`idle_clean_ms` > 0, off by default as in the paper's
//! algorithms): after that long without host IO, bands are cleaned (most
//! used set first, by the band selection) until a host IO arrives or the
//! PCache is empty.
//!
//! Sub-block IOs are widened to whole 4 KiB blocks; a partial-block write
//! is charged as a whole-block write (a real implementation would first
//! fill the rest of the block: not modelled).
//!
//! Data movement is explicit for a real executor and the property tests:
//! every device IO's tag names a buffer ([`decode_tag`]): the host IO's own
//! memory, an RMW staging buffer (one band), or a metadata write (no host
//! data: `BufRef::Zeros`). When the executor moves data
//! (`Outbox::wants_data`) each device IO is described with
//! `Outbox::data_for`: host writes go from the host buffer to their slot,
//! host reads land in the host buffer at the block's offset (slot, RCache
//! or NRegion, so a read spanning cached and uncached blocks is assembled
//! part by part), an RMW reads the band into staging buffer `id`, overlays
//! the cached blocks, writes it to the RCache and the NRegion, and
//! releases it once the band write has taken its bytes. IOs must be
//! whole blocks (`required_alignment_bytes`).
//!
//! Ordering on the devices (what makes the data exact whatever the IO
//! timing): no device read overlaps a device write in flight that changes
//! the bytes it reads, and no two data writes overlap in flight, unless the
//! host's own IOs overlap. Slot writes of a block are serialised; a slot is
//! reused only when no read of it is in flight (pins); a host write to a
//! block whose slot an RMW is reading (step 2) waits for that read
//! (`rmw_held_writes`), so the staged copy is one version, not a torn mix;
//! the RCache is rewritten only when no read of it is in flight; the band
//! write rewrites a band's uncached blocks with the bytes they already
//! hold, so NRegion reads still in flight read the same data.
//!
//! Trims: the NRegion range is trimmed (`Op::Trim`: the executor punches a
//! hole; an SMR drive would mark the range unwritten), and when that
//! completes the cached blocks the trim covers entirely are dropped (their
//! RMW skipped) unless a write to them is in flight. Until then the blocks
//! stay cached, so reads never see an older NRegion copy. Trims and RMWs
//! of a band never overlap: a band write would carry the bytes its band
//! read found (from before the hole) over the hole, so a trim that touches
//! the band under RMW waits for the RMW to end (`trims_deferred`), and no
//! RMW starts on a band with a trim in flight. The host trim completes with
//! the NRegion trim; host flushes complete at once (every acknowledged
//! write's data and entry are on the PCache, which the executor syncs).
//!
//! `drain` cleans every cached block (as `clean_all`). `locate` reports
//! where `read` would go now: a block's PCache slot while it holds valid
//! data, else the RCache while its band is being written back (step 4),
//! else the NRegion.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde::Deserialize;
use tierlab_core::policy::{BufRef, Extent, HostIo, IoError, OpenError, Outbox, Policy, Stores};
use tierlab_core::{DeviceIo, NS_PER_MS, Op, ParamError, TimeNs};

use crate::binding::{self, Bond, Bound};
use crate::cache::ByteCount;
use crate::extent::push_extent;
use crate::hswd_meta::{self, Geometry, Header, Journal};
use crate::slot_meta::{CommitState, SlotTable};

pub const PCACHE_DEVICE: usize = 0;
pub const NREGION_DEVICE: usize = 1;
/// Tier indices in `Outbox::complete`.
pub const TIER_PCACHE: u16 = 0;
pub const TIER_NREGION: u16 = 1;
pub const TIER_RCACHE: u16 = 2;

const META_PAGE: u64 = 4096;
const IDLE_TIMER: u64 = 1;

/// The PCache's header records the NRegion's volume id: every cached block
/// is dirty, newer than the NRegion's copy, and the recovery writes a
/// staged band into the NRegion — so another NRegion, even a new one, is
/// refused (docs/crash-consistency.md, "Binding").
const NREGION_BINDING: Bound = Bound {
    metadata_device: PCACHE_DEVICE,
    metadata: "HSWD's metadata",
    owner: "PCache",
    metadata_role: "PCache device",
    device: NREGION_DEVICE,
    role: "NRegion device",
    bond: Bond::Data,
    advice: None,
};
const KIND_SHIFT: u32 = 62;
const ID_BITS: u32 = 40;
const PAGE_BITS: u32 = 22;
const ID_MASK: u64 = (1 << ID_BITS) - 1;
const PAGE_MASK: u64 = (1 << PAGE_BITS) - 1;
/// Staging ids of metadata page writes (apart from the RMWs' band ids):
/// `Metadata(id)` writes from staging buffer `META_STAGING | id`.
pub const META_STAGING: u64 = 1 << 41;

/// Where a device IO's data comes from or goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HswdBuffer {
    /// The host IO's memory (id = host IO id, low 40 bits).
    Host(u64),
    /// The staging buffer of RMW number `id` (one band).
    Staging(u64),
    /// A metadata write (header or entry pages): no user data.
    Metadata(u64),
}

/// Tag layout: bits 63..62 kind (0 host, 1 staging, 2 metadata), bits
/// 61..22 buffer id, bits 21..0 the page (block) index inside the buffer
/// where the IO's first block goes.
pub fn encode_tag(buffer: HswdBuffer, page: u64) -> u64 {
    let (kind, id) = match buffer {
        HswdBuffer::Host(id) => (0, id),
        HswdBuffer::Staging(id) => (1, id),
        HswdBuffer::Metadata(id) => (2, id),
    };
    kind << KIND_SHIFT | (id & ID_MASK) << PAGE_BITS | (page & PAGE_MASK)
}

/// The inverse of [`encode_tag`].
pub fn decode_tag(tag: u64) -> (HswdBuffer, u64) {
    let id = (tag >> PAGE_BITS) & ID_MASK;
    let page = tag & PAGE_MASK;
    let buffer = match tag >> KIND_SHIFT {
        0 => HswdBuffer::Host(id),
        1 => HswdBuffer::Staging(id),
        _ => HswdBuffer::Metadata(id),
    };
    (buffer, page)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mapping {
    /// One set: any band's blocks anywhere in the data area.
    #[default]
    Fully,
    /// `sets` sets; band i → set i % sets.
    Set,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BandSelection {
    Fifo,
    Lru,
    /// The band with the most cached blocks (the paper's final choice).
    #[default]
    Most,
}

impl BandSelection {
    pub fn as_str(self) -> &'static str {
        match self {
            BandSelection::Fifo => "fifo",
            BandSelection::Lru => "lru",
            BandSelection::Most => "most",
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HswdParams {
    /// Data area + RCache (the paper's PCache size).
    pub pcache_bytes: ByteCount,
    #[serde(default = "default_block")]
    pub block_bytes: ByteCount,
    /// Band size of the NRegion (and of the RCache).
    #[serde(default = "default_band")]
    pub band_bytes: ByteCount,
    #[serde(default)]
    pub mapping: Mapping,
    /// Sets for `mapping = "set"` (default: data area / band size, the
    /// paper's "set size = band size"). Must be 1 (or absent) for `fully`.
    #[serde(default)]
    pub sets: Option<u64>,
    #[serde(default)]
    pub band_selection: BandSelection,
    /// Dirty share of a set (%) that starts its cleaning.
    #[serde(default = "default_start")]
    pub clean_start_pct: f64,
    /// Cleaning of a set stops below this dirty share (%).
    #[serde(default = "default_stop")]
    pub clean_stop_pct: f64,
    /// Bytes of one block's metadata entry (disk block number + state).
    #[serde(default = "default_entry")]
    pub metadata_entry_bytes: u64,
    /// Clean in idle time after this long without host IO; 0 = never.
    #[serde(default)]
    pub idle_clean_ms: f64,
    /// A set whose writes wait for a free block is cleaned before sets
    /// queued only for crossing `clean_start_pct` (default: queue order).
    #[serde(default)]
    pub clean_stalled_first: bool,
    /// Algorithm 2 read literally: the write path runs the set's cleaning
    /// (`HSWD_clean_set`) before it returns, so a write that lands while
    /// its set is queued for cleaning is acknowledged only once that
    /// cleaning ends (default: cleaning runs behind the writes).
    #[serde(default)]
    pub clean_in_write_path: bool,
}

fn default_block() -> ByteCount {
    ByteCount(4096)
}
fn default_band() -> ByteCount {
    ByteCount(32 << 20)
}
fn default_start() -> f64 {
    80.0
}
fn default_stop() -> f64 {
    60.0
}
fn default_entry() -> u64 {
    16
}

impl HswdParams {
    /// Paper defaults (fully associative, MOST, 80 % / 60 %) for a PCache.
    pub fn with_pcache(pcache_bytes: u64) -> HswdParams {
        HswdParams {
            pcache_bytes: ByteCount(pcache_bytes),
            block_bytes: default_block(),
            band_bytes: default_band(),
            mapping: Mapping::Fully,
            sets: None,
            band_selection: BandSelection::Most,
            clean_start_pct: default_start(),
            clean_stop_pct: default_stop(),
            metadata_entry_bytes: default_entry(),
            idle_clean_ms: 0.0,
            clean_stalled_first: false,
            clean_in_write_path: false,
        }
    }
}

/// The layout derived from the parameters (bytes on device 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub block_bytes: u64,
    pub band_bytes: u64,
    pub blocks: u64,
    pub sets: u64,
    pub blocks_per_set: u64,
    pub metadata_bytes: u64,
    pub data_offset_bytes: u64,
    pub rcache_offset_bytes: u64,
    /// Bytes of device 0 the PCache occupies (metadata + data + RCache).
    pub device_bytes: u64,
}

impl Layout {
    pub fn new(p: &HswdParams) -> Result<Layout, ParamError> {
        let block = p.block_bytes.0;
        if !block.is_power_of_two() || !(512..=1 << 20).contains(&block) {
            return Err(ParamError::new(
                "block_bytes",
                block,
                "a power of two from 512 bytes to 1 MiB",
            ));
        }
        let band = p.band_bytes.0;
        if band < block || band % block != 0 || band > 1 << 31 {
            return Err(ParamError::new(
                "band_bytes",
                band,
                format!("a multiple of `block_bytes` ({block}), at most 2 GiB"),
            ));
        }
        // The staging buffer's block index lives in 22 tag bits.
        if band / block > PAGE_MASK {
            return Err(ParamError::new(
                "band_bytes",
                band,
                format!("at most 2^22 blocks of `block_bytes` ({block})"),
            ));
        }
        let pcache = p.pcache_bytes.0;
        if pcache < band + block {
            return Err(ParamError::new(
                "pcache_bytes",
                pcache,
                format!(
                    "at least the RCache (one band, {band} bytes) and one block ({})",
                    band + block
                ),
            ));
        }
        let data = pcache - band;
        let sets = match (p.mapping, p.sets) {
            (Mapping::Fully, None | Some(1)) => 1,
            (Mapping::Fully, Some(s)) => {
                return Err(ParamError::new(
                    "sets",
                    s,
                    "1 with mapping = \"fully\" (for more sets use mapping = \"set\")",
                ));
            }
            (Mapping::Set, Some(s)) => s,
            (Mapping::Set, None) => (data / band).max(1),
        };
        let blocks_per_set = (data / block).checked_div(sets).unwrap_or(0);
        if sets == 0 || blocks_per_set == 0 {
            return Err(ParamError::new(
                "sets",
                sets,
                format!("at least one whole block per set of the {data}-byte data area"),
            ));
        }
        if !(p.clean_stop_pct.is_finite()
            && p.clean_start_pct.is_finite()
            && 0.0 < p.clean_stop_pct
            && p.clean_stop_pct <= p.clean_start_pct
            && p.clean_start_pct <= 100.0)
        {
            return Err(ParamError::new(
                "clean_stop_pct",
                format!(
                    "{} (with `clean_start_pct` = {})",
                    p.clean_stop_pct, p.clean_start_pct
                ),
                "0 < `clean_stop_pct` <= `clean_start_pct` <= 100",
            ));
        }
        if !(hswd_meta::MIN_ENTRY_BYTES..=META_PAGE / 2).contains(&p.metadata_entry_bytes) {
            return Err(ParamError::new(
                "metadata_entry_bytes",
                p.metadata_entry_bytes,
                format!(
                    "{} (block number + commit sequence) ..= 2048",
                    hswd_meta::MIN_ENTRY_BYTES
                ),
            ));
        }
        if !(p.idle_clean_ms.is_finite() && p.idle_clean_ms >= 0.0) {
            return Err(ParamError::new(
                "idle_clean_ms",
                p.idle_clean_ms,
                "a number >= 0",
            ));
        }
        let blocks = blocks_per_set * sets;
        // Header + entry pages, each in two copies (hswd_meta).
        let pages = 1 + hswd_meta::entry_pages(blocks, p.metadata_entry_bytes);
        let metadata_bytes = 2 * pages * META_PAGE;
        let data_offset = metadata_bytes.div_ceil(block) * block;
        let rcache = data_offset + blocks * block;
        Ok(Layout {
            block_bytes: block,
            band_bytes: band,
            blocks,
            sets,
            blocks_per_set,
            metadata_bytes,
            data_offset_bytes: data_offset,
            rcache_offset_bytes: rcache,
            device_bytes: rcache + band,
        })
    }
}

/// Counters; blocks unless named otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HswdStats {
    pub host_ios: u64,
    pub completed_ios: u64,
    pub read_hits: u64,
    pub read_misses: u64,
    /// Missed blocks read from the RCache (band under RMW).
    pub read_rcache: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    /// Write blocks that had to wait for cleaning to free a block.
    pub write_stalls: u64,
    /// The stalled write block that waited through the most RMWs: how
    /// many (of any set), and how many of them cleaned its own set.
    pub longest_stall_rmws: u64,
    pub longest_stall_own_set_rmws: u64,
    pub rmw_count: u64,
    /// `clean_in_write_path`: host writes acknowledged only once their
    /// set's cleaning ended.
    pub writes_held: u64,
    /// Bytes of PCache blocks merged into the NRegion by RMWs.
    pub rmw_cleaned_bytes: u64,
    /// Device bytes RMWs moved: NRegion read + write, PCache reads,
    /// RCache write.
    pub rmw_io_bytes: u64,
    /// RMWs that found no block they could merge (all had writes in flight).
    pub rmw_empty: u64,
    /// RMWs started by idle-time cleaning.
    pub idle_rmw_count: u64,
    /// Metadata page writes (entry pages by commits, header pages by
    /// RMWs) and their bytes.
    pub metadata_writes: u64,
    pub metadata_bytes: u64,
    /// Metadata commits (a PCache flush, then the changed entry pages),
    /// and device flushes the policy issued (commits and RMW steps).
    pub commits: u64,
    pub device_flushes: u64,
    /// At `open`: cached blocks recovered from the metadata area, RMWs
    /// finished from the RCache copy, and whether the area was formatted.
    pub recovered_blocks: u64,
    pub journal_replays: u64,
    pub formatted: u64,
    /// Host-read blocks of the band under RMW, read while it ran.
    pub rmw_band_read_blocks: u64,
    /// Host-written blocks of the band under RMW, written while it ran.
    pub rmw_band_write_blocks: u64,
    /// Blocks an RMW merged that a host write reached before it ended
    /// (they stay dirty).
    pub rmw_rewritten_blocks: u64,
    /// Host write blocks held until the RMW's read of their slot finished.
    pub rmw_held_writes: u64,
    /// Host trims; cached blocks they dropped (RMW skipped); cached blocks
    /// they covered but kept (a write to them in flight: only when the
    /// host overlaps a write with a trim).
    pub trims: u64,
    pub trimmed_blocks: u64,
    pub trim_kept_blocks: u64,
    /// Trims that waited for the RMW of a band they touch.
    pub trims_deferred: u64,
    /// When `drain` was called: cached blocks, and whether an RMW ran.
    pub drain_cached_blocks: u64,
    pub drain_during_rmw: u64,
    /// Device IOs that failed (`Policy::on_device_error`), the host IOs
    /// failed for them, and cached blocks dropped because the first write
    /// of their data failed (nothing acknowledged was in the slot).
    pub device_errors: u64,
    pub host_ios_failed: u64,
    pub failed_first_writes_dropped: u64,
    pub cached_bytes: u64,
    pub latency_sum_ns: u128,
    pub latency_max_ns: u64,
}

struct Entry {
    slot: u64,
    /// Host writes accepted for the block.
    generation: u64,
    /// The slot holds the block's data (a first write has landed).
    valid: bool,
    write_inflight: bool,
    /// An RMW is reading the slot (step 2): host writes wait for it, so
    /// the staged copy is never torn by a concurrent overwrite.
    rmw_reading: bool,
    /// Host write parts queued behind the one in flight (or behind the
    /// RMW's read): (host, page).
    waiting: VecDeque<(u64, u64)>,
    /// Its metadata entry has been written by a completed commit: a write
    /// to it is acknowledged when its data lands (before that, the write
    /// waits for the next commit).
    committed: bool,
}

/// A host trim of NRegion bytes [offset_bytes, end_bytes).
#[derive(Clone, Copy, Debug)]
struct Trim {
    host: u64,
    offset_bytes: u64,
    end_bytes: u64,
}

impl Entry {
    /// An RMW could merge the block now.
    fn mergeable(&self) -> bool {
        self.valid && !self.write_inflight && !self.rmw_reading && self.waiting.is_empty()
    }
}

#[derive(Default)]
struct BandInfo {
    /// Cached blocks of the band.
    blocks: BTreeSet<u64>,
    /// Its key in the set's selection order (absent while under RMW).
    key: Option<u64>,
    last_access: u64,
}

struct SetState {
    free: Vec<u64>,
    used: u64,
    /// Selection order: (key, band), the first is cleaned next.
    order: BTreeMap<(u64, u64), ()>,
    /// Write blocks waiting for a free block, in arrival order.
    waiters: VecDeque<Waiter>,
    queued: bool,
    /// RMWs finished on this set's bands.
    rmw_count: u64,
    /// `clean_in_write_path`: finished host writes acknowledged when the
    /// set leaves the clean queue.
    held: Vec<(u64, HostPending)>,
}

/// A write block waiting for a free block of its set.
#[derive(Clone, Copy)]
struct Waiter {
    host: u64,
    page: u64,
    block: u64,
    /// `HswdStats::rmw_count` and the set's own count when it stalled:
    /// how many RMWs (any set's, its own set's) it waited through.
    rmws_at_stall: u64,
    own_rmws_at_stall: u64,
}

enum Rec {
    /// Host read parts (slot: a pinned PCache slot; rcache: pinned RCache).
    Read {
        host: u64,
        slot: Option<u64>,
        rcache: bool,
        tier: u16,
    },
    SlotWrite {
        host: u64,
        block: u64,
        slot: u64,
    },
    /// A host trim's NRegion trim.
    Trim {
        host: u64,
    },
    /// A commit's PCache flush, and its entry page writes.
    CommitFlush,
    CommitPage,
    RmwBandRead,
    RmwBlockRead {
        slot: u64,
        block: u64,
    },
    /// An RMW step's IO: a header (journal) write, a flush, the RCache
    /// write, the band write.
    RmwStep,
}

struct HostPending {
    parts: u32,
    tier: u16,
    arrival_ns: TimeNs,
    /// A device IO one of its parts needed failed: the host IO fails
    /// (`Outbox::failed`) once every part is done.
    failed: Option<IoError>,
    /// `clean_in_write_path`: the set whose cleaning this write waits for
    /// (of a write over several sets, the last one queued).
    held_by: Option<usize>,
}

/// An RMW's steps; each waits for the previous one's IOs. Staging is made
/// crash-safe by the journal record in the header page: it is cleared
/// (and that made durable) before the RCache is overwritten, and set (and
/// made durable) only once the RCache copy is durable, before the band on
/// the disk is touched; the band write is made durable before the merged
/// entries are cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    BandRead,
    BlockReads,
    /// Waiting for RCache readers of the previous RMW, then staging.
    Stage,
    /// Header write: no band staged (skipped when none is).
    JournalClear,
    JournalClearFlush,
    RcacheWrite,
    RcacheFlush,
    /// Header write: this band is staged in the RCache.
    JournalSet,
    JournalSetFlush,
    BandWrite,
    /// NRegion flush: the band is durable before its entries are cleared.
    BandFlush,
}

/// What the metadata area holds or is about to: the persistent half of
/// HSWD (hswd_meta has the format; `SlotTable` the entries and the commit
/// protocol, shared with the persistent page cache).
struct Durable {
    /// Per slot entries, the pages' versions, and the commits.
    table: SlotTable,
    /// The journal as the newest header says.
    journal: Option<Journal>,
    /// The NRegion's volume id, written into every header (None: not
    /// known — a simulation, or an NRegion that cannot tell).
    nregion_id: Option<tierlab_core::volume::VolumeId>,
    /// New entries (block, slot) and host write parts (host) waiting for
    /// the next commit, and those of the running one.
    new_next: Vec<(u64, u64)>,
    new_running: Vec<(u64, u64)>,
    hosts_next: Vec<u64>,
    hosts_running: Vec<u64>,
    next_meta_staging: u64,
}

struct Rmw {
    id: u64,
    band: u64,
    set: usize,
    step: Step,
    pending: u32,
    /// (block, slot, generation) merged into the band.
    merged: Vec<(u64, u64, u64)>,
    idle: bool,
}

pub struct Hswd {
    layout: Layout,
    selection: BandSelection,
    band_blocks: u64,
    nregion_bytes: u64,
    start_blocks: u64,
    stop_blocks: u64,
    entry_bytes: u64,
    idle_ns: u64,
    map: HashMap<u64, Entry>,
    bands: HashMap<u64, BandInfo>,
    sets: Vec<SetState>,
    pins: Vec<u32>,
    /// Slot freed while pinned: return it to its set when unpinned.
    free_on_unpin: Vec<bool>,
    hosts: HashMap<u64, HostPending>,
    inflight: HashMap<(usize, u64), Rec>,
    clean_queue: VecDeque<usize>,
    rmw: Option<Rmw>,
    /// The band whose uncached reads go to the RCache (step 4).
    rcache_band: Option<u64>,
    rcache_pins: u32,
    next_rmw: u64,
    /// Order counter for FIFO keys and LRU stamps.
    clock: u64,
    last_host_ns: TimeNs,
    timer_armed: bool,
    idle_cleaning: bool,
    clean_stalled_first: bool,
    clean_in_write_path: bool,
    /// Time of the event being handled (held writes complete at it).
    now_ns: TimeNs,
    /// Host trims whose NRegion trim is in flight, and per band how many
    /// of them touch it (no RMW starts there meanwhile).
    trims: Vec<Trim>,
    trim_bands: HashMap<u64, u32>,
    /// Host trims waiting for the RMW of a band they touch to end.
    deferred_trims: VecDeque<Trim>,
    stats: HswdStats,
    /// Mean latency of every 10,000 completed host IOs, ns.
    window_sum_ns: u128,
    window_ios: u64,
    window_means_ns: Vec<f64>,
    nregion_blocks: u64,
    durable: Durable,
    #[doc(hidden)]
    pub broken: Broken,
}

/// Test builds of HSWD with one persistence step removed: the crash
/// checker must catch each (tierlab-crash's tests).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Broken {
    #[default]
    None,
    /// A commit writes its entry pages without flushing the data first.
    SkipCommitFlush,
    /// An RMW rewrites the band without the journal record.
    SkipJournal,
    /// A write to a new block is acknowledged before a commit wrote its entry.
    AckBeforeCommit,
}

/// Host IOs per window of `Hswd::window_means_ms`.
pub const LATENCY_WINDOW_IOS: u64 = 10_000;

impl Hswd {
    /// `nregion_bytes`: capacity of device 1 (the last band may be short).
    pub fn new(p: &HswdParams, nregion_bytes: u64) -> Result<Hswd, ParamError> {
        let layout = Layout::new(p)?;
        let per_set = layout.blocks_per_set;
        let sets = (0..layout.sets)
            .map(|s| SetState {
                // Popped from the end: the set's lowest slot first.
                free: (s * per_set..(s + 1) * per_set).rev().collect(),
                used: 0,
                order: BTreeMap::new(),
                waiters: VecDeque::new(),
                queued: false,
                rmw_count: 0,
                held: Vec::new(),
            })
            .collect();
        let threshold = |pct: f64| ((per_set as f64 * pct / 100.0).ceil() as u64).clamp(1, per_set);
        Ok(Hswd {
            selection: p.band_selection,
            band_blocks: layout.band_bytes / layout.block_bytes,
            nregion_bytes,
            start_blocks: threshold(p.clean_start_pct),
            stop_blocks: threshold(p.clean_stop_pct),
            entry_bytes: p.metadata_entry_bytes,
            idle_ns: (p.idle_clean_ms * NS_PER_MS as f64).round() as u64,
            clean_stalled_first: p.clean_stalled_first,
            clean_in_write_path: p.clean_in_write_path,
            now_ns: 0,
            map: HashMap::new(),
            bands: HashMap::new(),
            sets,
            pins: vec![0; layout.blocks as usize],
            free_on_unpin: vec![false; layout.blocks as usize],
            hosts: HashMap::new(),
            inflight: HashMap::new(),
            clean_queue: VecDeque::new(),
            rmw: None,
            rcache_band: None,
            rcache_pins: 0,
            next_rmw: 0,
            clock: 0,
            last_host_ns: 0,
            timer_armed: false,
            idle_cleaning: false,
            trims: Vec::new(),
            trim_bands: HashMap::new(),
            deferred_trims: VecDeque::new(),
            stats: HswdStats::default(),
            window_sum_ns: 0,
            window_ios: 0,
            window_means_ns: Vec::new(),
            nregion_blocks: nregion_bytes / layout.block_bytes,
            broken: Broken::None,
            durable: Durable {
                table: SlotTable::new(
                    hswd_meta::MAGIC_ENTRIES,
                    0,
                    layout.blocks,
                    p.metadata_entry_bytes,
                ),
                journal: None,
                nregion_id: None,
                new_next: Vec::new(),
                new_running: Vec::new(),
                hosts_next: Vec::new(),
                hosts_running: Vec::new(),
                next_meta_staging: 0,
            },
            layout,
        })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The NRegion's capacity (device 1), as given to `new`.
    pub fn nregion_bytes(&self) -> u64 {
        self.nregion_bytes
    }

    pub fn stats(&self) -> HswdStats {
        let mut s = self.stats;
        s.cached_bytes = self.map.len() as u64 * self.layout.block_bytes;
        s
    }

    /// Cached (dirty) blocks now.
    pub fn cached_blocks(&self) -> u64 {
        self.map.len() as u64
    }

    /// Mean host latency of each full window of 10,000 completed IOs
    /// (completion order), ms.
    pub fn window_means_ms(&self) -> Vec<f64> {
        self.window_means_ns.iter().map(|n| n / 1e6).collect()
    }

    /// True when nothing is in flight and no cleaning runs.
    pub fn is_quiescent(&self) -> bool {
        self.inflight.is_empty() && self.rmw.is_none()
    }

    /// Cleans every cached block (e.g. before shutdown): RMW after RMW
    /// until the PCache is empty; progress comes with device completions.
    pub fn clean_all(&mut self, out: &mut Outbox) {
        self.idle_cleaning = true;
        self.try_clean(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// An RMW runs now (tests use it to tell when paths were reached).
    pub fn rmw_running(&self) -> bool {
        self.rmw.is_some()
    }

    /// The cached blocks in [lo, hi), ascending; by lookups or by a scan of
    /// the map, whichever is smaller.
    fn cached_blocks_in(&self, lo: u64, hi: u64) -> Vec<u64> {
        if hi <= lo {
            return Vec::new();
        }
        if hi - lo <= self.map.len() as u64 {
            (lo..hi).filter(|b| self.map.contains_key(b)).collect()
        } else {
            let mut v: Vec<u64> = self
                .map
                .keys()
                .copied()
                .filter(|b| (lo..hi).contains(b))
                .collect();
            v.sort_unstable();
            v
        }
    }

    /// The bands bytes [offset, end) touch.
    fn bands_of(&self, t: &Trim) -> std::ops::RangeInclusive<u64> {
        let band_bytes = self.layout.band_bytes;
        t.offset_bytes / band_bytes..=(t.end_bytes - 1) / band_bytes
    }

    /// A host trim of bytes [offset, end) (within the addressable
    /// NRegion): trims the NRegion now, or after the RMW of a band it
    /// touches; `trim_done` drops the cached blocks when that completes.
    fn trim(&mut self, id: u64, offset: u64, end: u64, out: &mut Outbox) {
        assert!(offset < end);
        self.stats.trims += 1;
        self.hosts.get_mut(&id).unwrap().parts += 1;
        let t = Trim {
            host: id,
            offset_bytes: offset,
            end_bytes: end,
        };
        let bands = self.bands_of(&t);
        if self.rmw.as_ref().is_some_and(|r| bands.contains(&r.band)) {
            self.stats.trims_deferred += 1;
            self.deferred_trims.push_back(t);
            return;
        }
        self.issue_trim(t, out);
    }

    fn issue_trim(&mut self, t: Trim, out: &mut Outbox) {
        debug_assert!(
            self.rmw
                .as_ref()
                .is_none_or(|r| !self.bands_of(&t).contains(&r.band))
        );
        for band in self.bands_of(&t) {
            *self.trim_bands.entry(band).or_insert(0) += 1;
        }
        self.trims.push(t);
        let io = Self::io(
            encode_tag(HswdBuffer::Host(t.host), 0),
            Op::Trim,
            t.offset_bytes,
            t.end_bytes - t.offset_bytes,
        );
        self.submit(out, NREGION_DEVICE, io, Rec::Trim { host: t.host });
    }

    /// The NRegion trim of host trim `host` completed: drop the cached
    /// blocks it covers entirely that no write is reaching (no RMW of
    /// their band ran meanwhile), then complete it. If it failed, the
    /// NRegion range may still hold older data than the cached blocks:
    /// they stay, and the host trim fails.
    fn trim_done(&mut self, host: u64, failed: bool, now_ns: TimeNs, out: &mut Outbox) {
        let i = self
            .trims
            .iter()
            .position(|t| t.host == host)
            .expect("a trim completion has its trim");
        let t = self.trims.swap_remove(i);
        for band in self.bands_of(&t) {
            let n = self.trim_bands.get_mut(&band).expect("counted");
            *n -= 1;
            if *n == 0 {
                self.trim_bands.remove(&band);
            }
        }
        let bb = self.layout.block_bytes;
        let blocks = if failed {
            Vec::new()
        } else {
            self.cached_blocks_in(t.offset_bytes.div_ceil(bb), t.end_bytes / bb)
        };
        for b in blocks {
            if !self.map[&b].mergeable() {
                self.stats.trim_kept_blocks += 1;
                continue;
            }
            self.stats.trimmed_blocks += 1;
            self.uncache(b, out);
        }
        self.try_commit(out);
        self.host_part_done(host, TIER_NREGION, now_ns, out);
    }

    /// `block` leaves the PCache (no IO of it in flight): its slot is
    /// free once its cleared entry is durable.
    fn uncache(&mut self, block: u64, out: &mut Outbox) {
        let band = block / self.band_blocks;
        let slot = self.map.remove(&block).unwrap().slot;
        if let Some(info) = self.bands.get_mut(&band) {
            info.blocks.remove(&block);
        }
        self.refile(band);
        let set = self.set_of_band(band);
        self.sets[set].used -= 1;
        self.clear_entry(slot, out);
    }

    fn set_of_band(&self, band: u64) -> usize {
        (band % self.layout.sets) as usize
    }

    fn band_len_bytes(&self, band: u64) -> u64 {
        let start = band * self.layout.band_bytes;
        self.layout
            .band_bytes
            .min(self.nregion_bytes.saturating_sub(start))
    }

    fn slot_offset(&self, slot: u64) -> u64 {
        self.layout.data_offset_bytes + slot * self.layout.block_bytes
    }

    fn submit(&mut self, out: &mut Outbox, device: usize, io: DeviceIo, rec: Rec) {
        let fresh = self.inflight.insert((device, io.tag), rec).is_none();
        assert!(
            fresh,
            "device {device} tag {:#x} is already in flight",
            io.tag
        );
        out.device_ios.push((device, io));
        // The simulator moves no data; trims carry none.
        if !out.wants_data || !matches!(io.op, Op::Read | Op::Write) {
            return;
        }
        // The tag names the buffer (see `decode_tag`): tell a real executor.
        let (buffer, page) = decode_tag(io.tag);
        let offset_bytes = page * self.layout.block_bytes;
        let buf = match buffer {
            HswdBuffer::Host(host_id) => BufRef::Host {
                host_id,
                offset_bytes,
            },
            HswdBuffer::Staging(id) => BufRef::Staging { id, offset_bytes },
            // Metadata pages: the bytes the policy made (`write_meta_page`).
            HswdBuffer::Metadata(id) => BufRef::Staging {
                id: META_STAGING | id,
                offset_bytes: 0,
            },
        };
        out.data_for(device, io.tag, buf);
    }

    fn io(tag: u64, op: Op, offset_bytes: u64, bytes: u64) -> DeviceIo {
        DeviceIo {
            tag,
            op,
            offset_bytes,
            size_bytes: bytes as u32,
        }
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            block_bytes: self.layout.block_bytes,
            band_bytes: self.layout.band_bytes,
            blocks: self.layout.blocks,
            sets: self.layout.sets,
            entry_bytes: self.entry_bytes,
            nregion_bytes: self.nregion_bytes,
        }
    }

    /// Writes a metadata page (its bytes `bytes`, None in simulation) at
    /// `offset_bytes` of the PCache (a version `SlotTable` placed).
    fn write_meta_page(
        &mut self,
        offset_bytes: u64,
        bytes: Option<Vec<u8>>,
        rec: Rec,
        out: &mut Outbox,
    ) {
        let id = self.durable.next_meta_staging;
        self.durable.next_meta_staging = (id + 1) & ID_MASK;
        if out.wants_data {
            out.fills.push((
                META_STAGING | id,
                bytes.expect("page bytes when data moves"),
            ));
        }
        let io = Self::io(
            encode_tag(HswdBuffer::Metadata(id), 0),
            Op::Write,
            offset_bytes,
            META_PAGE,
        );
        self.stats.metadata_writes += 1;
        self.stats.metadata_bytes += META_PAGE;
        self.submit(out, PCACHE_DEVICE, io, rec);
        if out.wants_data {
            // The write took its bytes when submitted.
            out.release.push(META_STAGING | id);
        }
    }

    /// Writes the header page with `journal`.
    fn write_header(&mut self, journal: Option<Journal>, out: &mut Outbox) {
        self.durable.journal = journal;
        let seq = self.durable.table.next_seq(0);
        let bytes = out.wants_data.then(|| {
            let h = Header {
                geometry: self.geometry(),
                journal,
                nregion_id: self.durable.nregion_id,
            };
            hswd_meta::encode_header(&h, seq)
        });
        let (offset, _) = self.durable.table.next_version(0);
        self.write_meta_page(offset, bytes, Rec::RmwStep, out);
    }

    /// A device flush (PCache or NRegion).
    fn flush_device(&mut self, device: usize, rec: Rec, out: &mut Outbox) {
        let id = self.durable.next_meta_staging;
        self.durable.next_meta_staging = (id + 1) & ID_MASK;
        self.stats.device_flushes += 1;
        let io = Self::io(encode_tag(HswdBuffer::Metadata(id), 0), Op::Flush, 0, 0);
        self.submit(out, device, io, rec);
    }

    /// Block `b` left the cache from `slot`: its entry is cleared (at the
    /// next commit) and the slot is released once that is durable — at
    /// once if no commit ever wrote its entry.
    fn clear_entry(&mut self, slot: u64, out: &mut Outbox) {
        if self.durable.table.clear(slot) {
            self.release_slots(vec![slot], out);
        }
    }

    /// Slots that may take new blocks: free now, or once no read of them is
    /// in flight; writes waiting for their sets are served.
    fn release_slots(&mut self, slots: Vec<u64>, out: &mut Outbox) {
        let mut sets = BTreeSet::new();
        for slot in slots {
            let set = (slot / self.layout.blocks_per_set) as usize;
            if self.pins[slot as usize] == 0 {
                self.sets[set].free.push(slot);
            } else {
                self.free_on_unpin[slot as usize] = true;
            }
            sets.insert(set);
        }
        for set in sets {
            if !self.sets[set].waiters.is_empty() {
                self.serve_waiters(set, out);
            }
        }
    }

    /// Starts a commit if one is due and none runs: first a PCache flush
    /// (the data of every new entry, and the previous commit's pages, are
    /// durable after it), then the changed entry pages — their bytes taken
    /// now, so no entry whose data landed later is written before its data
    /// is durable.
    fn try_commit(&mut self, out: &mut Outbox) {
        let d = &mut self.durable;
        if d.table.state != CommitState::Idle
            || !(d.table.due() || !d.hosts_next.is_empty() || !d.new_next.is_empty())
        {
            return;
        }
        d.new_running = std::mem::take(&mut d.new_next);
        d.hosts_running = std::mem::take(&mut d.hosts_next);
        d.table.begin(out.wants_data);
        self.stats.commits += 1;
        if self.broken == Broken::SkipCommitFlush {
            self.commit_flushed(self.last_host_ns, out);
            return;
        }
        self.flush_device(PCACHE_DEVICE, Rec::CommitFlush, out);
    }

    /// The commit's flush completed: release the slots whose cleared
    /// entries it made durable, then write the changed pages.
    fn commit_flushed(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        let (released, writes) = self.durable.table.flushed();
        for w in writes {
            self.write_meta_page(w.offset_bytes, w.bytes, Rec::CommitPage, out);
        }
        let done = self.durable.table.state == CommitState::Idle;
        self.release_slots(released, out);
        if done {
            self.commit_done(now_ns, out);
        }
    }

    /// The commit's pages are written: its new entries are committed, its
    /// host writes acknowledged (its cleared slots wait for the next
    /// flush, in the table).
    fn commit_done(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        for (b, slot) in std::mem::take(&mut self.durable.new_running) {
            if let Some(e) = self.map.get_mut(&b)
                && e.slot == slot
            {
                e.committed = true;
            }
        }
        for host in std::mem::take(&mut self.durable.hosts_running) {
            self.host_part_done(host, 0, now_ns, out);
        }
        self.try_commit(out);
    }

    // ---- band selection order -------------------------------------------

    fn order_key(&mut self, band: u64) -> u64 {
        match self.selection {
            BandSelection::Fifo => {
                self.clock += 1;
                self.clock
            }
            BandSelection::Lru => self.bands[&band].last_access,
            BandSelection::Most => u64::MAX - self.bands[&band].blocks.len() as u64,
        }
    }

    /// Re-files a band after its cached count or recency changed (FIFO
    /// keeps its place; bands under RMW are filed when it ends).
    fn refile(&mut self, band: u64) {
        let set = self.set_of_band(band);
        let under_rmw = self.rmw.as_ref().is_some_and(|r| r.band == band);
        let Some(info) = self.bands.get(&band) else {
            return;
        };
        let old = info.key;
        let empty = info.blocks.is_empty();
        if under_rmw {
            return;
        }
        if empty {
            if let Some(k) = old {
                self.sets[set].order.remove(&(k, band));
            }
            self.bands.remove(&band);
            return;
        }
        if self.selection == BandSelection::Fifo && old.is_some() {
            return;
        }
        let key = self.order_key(band);
        if old == Some(key) {
            return;
        }
        if let Some(k) = old {
            self.sets[set].order.remove(&(k, band));
        }
        self.sets[set].order.insert((key, band), ());
        self.bands.get_mut(&band).unwrap().key = Some(key);
    }

    fn touch_band(&mut self, band: u64) {
        self.clock += 1;
        let stamp = self.clock;
        if let Some(info) = self.bands.get_mut(&band) {
            info.last_access = stamp;
            if self.selection == BandSelection::Lru {
                self.refile(band);
            }
        }
    }

    // ---- host IO ----------------------------------------------------------

    fn host_part_done(&mut self, host: u64, tier: u16, now_ns: TimeNs, out: &mut Outbox) {
        let Some(h) = self.hosts.get_mut(&host) else {
            return;
        };
        h.tier = h.tier.max(tier);
        h.parts -= 1;
        if h.parts == 0 {
            let h = self.hosts.remove(&host).unwrap();
            if let Some(error) = h.failed {
                self.stats.host_ios_failed += 1;
                out.failed.push((host, error));
                return;
            }
            if let Some(set) = h.held_by
                && self.sets[set].queued
            {
                self.stats.writes_held += 1;
                self.sets[set].held.push((host, h));
                return;
            }
            self.complete_host(host, h, now_ns, out);
        }
    }

    /// Acknowledges a host IO whose parts are all done.
    fn complete_host(&mut self, host: u64, h: HostPending, now_ns: TimeNs, out: &mut Outbox) {
        // NRegion (1) and RCache (2) both mean "not served by the PCache
        // alone"; NRegion wins over RCache.
        let tier = match h.tier {
            0 => TIER_PCACHE,
            2 => TIER_RCACHE,
            _ => TIER_NREGION,
        };
        let latency = now_ns - h.arrival_ns;
        self.stats.completed_ios += 1;
        self.stats.latency_sum_ns += latency as u128;
        self.stats.latency_max_ns = self.stats.latency_max_ns.max(latency);
        self.window_sum_ns += latency as u128;
        self.window_ios += 1;
        if self.window_ios == LATENCY_WINDOW_IOS {
            self.window_means_ns
                .push(self.window_sum_ns as f64 / LATENCY_WINDOW_IOS as f64);
            self.window_sum_ns = 0;
            self.window_ios = 0;
        }
        out.complete.push((host, tier));
    }

    fn read(&mut self, id: u64, first: u64, n: u64, out: &mut Outbox) {
        let bb = self.layout.block_bytes;
        // Runs to the NRegion or RCache: (first block, blocks, rcache).
        let mut run: Option<(u64, u64, bool)> = None;
        let mut parts = 0u32;
        let flush_run = |this: &mut Hswd, run: Option<(u64, u64, bool)>, out: &mut Outbox| -> u32 {
            let Some((f, k, rcache)) = run else { return 0 };
            let tag = encode_tag(HswdBuffer::Host(id), f - first);
            if rcache {
                let band = f / this.band_blocks;
                let off = this.layout.rcache_offset_bytes + (f - band * this.band_blocks) * bb;
                this.rcache_pins += 1;
                let io = Self::io(tag, Op::Read, off, k * bb);
                this.submit(
                    out,
                    PCACHE_DEVICE,
                    io,
                    Rec::Read {
                        host: id,
                        slot: None,
                        rcache: true,
                        tier: 2,
                    },
                );
            } else {
                let io = Self::io(tag, Op::Read, f * bb, k * bb);
                this.submit(
                    out,
                    NREGION_DEVICE,
                    io,
                    Rec::Read {
                        host: id,
                        slot: None,
                        rcache: false,
                        tier: 1,
                    },
                );
            }
            1
        };
        let mut last_band = u64::MAX;
        let mut in_rmw = false;
        for i in 0..n {
            let b = first + i;
            let band = b / self.band_blocks;
            if band != last_band {
                self.touch_band(band);
                last_band = band;
                in_rmw = self.rmw.as_ref().is_some_and(|r| r.band == band);
            }
            self.stats.rmw_band_read_blocks += u64::from(in_rmw);
            if let Some(e) = self.map.get(&b).filter(|e| e.valid) {
                self.stats.read_hits += 1;
                let slot = e.slot;
                parts += flush_run(self, run.take(), out);
                self.pins[slot as usize] += 1;
                let io = Self::io(
                    encode_tag(HswdBuffer::Host(id), i),
                    Op::Read,
                    self.slot_offset(slot),
                    bb,
                );
                self.submit(
                    out,
                    PCACHE_DEVICE,
                    io,
                    Rec::Read {
                        host: id,
                        slot: Some(slot),
                        rcache: false,
                        tier: 0,
                    },
                );
                parts += 1;
                continue;
            }
            self.stats.read_misses += 1;
            let rcache = self.rcache_band == Some(band);
            self.stats.read_rcache += u64::from(rcache);
            match &mut run {
                Some((f, k, r))
                    if *f + *k == b
                        && *r == rcache
                        && (*f / self.band_blocks == band || !rcache)
                        && *k < (u32::MAX as u64 / bb) =>
                {
                    *k += 1
                }
                _ => {
                    parts += flush_run(self, run.take(), out);
                    run = Some((b, 1, rcache));
                }
            }
        }
        parts += flush_run(self, run.take(), out);
        self.hosts.get_mut(&id).unwrap().parts += parts;
    }

    /// Issues (or queues behind the one in flight) a host write of `block`.
    fn slot_write(&mut self, host: u64, page: u64, block: u64, out: &mut Outbox) {
        let e = self.map.get_mut(&block).unwrap();
        if e.write_inflight || e.rmw_reading || !e.waiting.is_empty() {
            self.stats.rmw_held_writes += u64::from(e.rmw_reading);
            e.waiting.push_back((host, page));
            return;
        }
        self.submit_slot_write(host, page, block, out);
    }

    fn submit_slot_write(&mut self, host: u64, page: u64, block: u64, out: &mut Outbox) {
        let e = self.map.get_mut(&block).unwrap();
        e.write_inflight = true;
        let slot = e.slot;
        self.pins[slot as usize] += 1;
        let io = Self::io(
            encode_tag(HswdBuffer::Host(host), page),
            Op::Write,
            self.slot_offset(slot),
            self.layout.block_bytes,
        );
        self.submit(out, PCACHE_DEVICE, io, Rec::SlotWrite { host, block, slot });
    }

    /// Issues the oldest write queued for `block` if its slot is free to
    /// be written (no write in flight, no RMW reading it).
    fn next_slot_write(&mut self, block: u64, out: &mut Outbox) {
        let Some(e) = self.map.get_mut(&block) else {
            return;
        };
        if e.write_inflight || e.rmw_reading {
            return;
        }
        if let Some((h, page)) = e.waiting.pop_front() {
            self.submit_slot_write(h, page, block, out);
        }
    }

    /// Places one block of a host write: hit, new block, or wait.
    fn place(&mut self, host: u64, page: u64, block: u64, out: &mut Outbox) -> bool {
        if let Some(e) = self.map.get_mut(&block) {
            e.generation += 1;
            self.slot_write(host, page, block, out);
            return true;
        }
        let band = block / self.band_blocks;
        let set = self.set_of_band(band);
        let Some(slot) = self.sets[set].free.pop() else {
            return false;
        };
        self.sets[set].used += 1;
        self.map.insert(
            block,
            Entry {
                slot,
                generation: 1,
                valid: false,
                write_inflight: false,
                rmw_reading: false,
                waiting: VecDeque::new(),
                committed: false,
            },
        );
        self.clock += 1;
        let stamp = self.clock;
        let info = self.bands.entry(band).or_default();
        info.blocks.insert(block);
        if info.last_access == 0 {
            info.last_access = stamp;
        }
        self.refile(band);
        self.slot_write(host, page, block, out);
        true
    }

    fn write(&mut self, id: u64, first: u64, n: u64, out: &mut Outbox) {
        let mut last_band = u64::MAX;
        let mut in_rmw = false;
        for i in 0..n {
            let b = first + i;
            let band = b / self.band_blocks;
            if band != last_band {
                self.touch_band(band);
                last_band = band;
                in_rmw = self.rmw.as_ref().is_some_and(|r| r.band == band);
            }
            self.stats.rmw_band_write_blocks += u64::from(in_rmw);
            if self.map.contains_key(&b) {
                self.stats.write_hits += 1;
            } else {
                self.stats.write_misses += 1;
            }
            self.hosts.get_mut(&id).unwrap().parts += 1;
            let set = self.set_of_band(band);
            // Arrival order: behind blocks already waiting for the set.
            let placed = self.sets[set].waiters.is_empty() && self.place(id, i, b, out)
                || self.map.contains_key(&b) && self.place(id, i, b, out);
            if !placed {
                self.stats.write_stalls += 1;
                let waiter = Waiter {
                    host: id,
                    page: i,
                    block: b,
                    rmws_at_stall: self.stats.rmw_count,
                    own_rmws_at_stall: self.sets[set].rmw_count,
                };
                self.sets[set].waiters.push_back(waiter);
                self.queue_clean(set);
            }
            if self.sets[set].used >= self.start_blocks {
                self.queue_clean(set);
            }
            if self.clean_in_write_path && self.sets[set].queued {
                self.hosts.get_mut(&id).unwrap().held_by = Some(set);
            }
        }
    }

    /// Gives freed blocks to the writes waiting for them, in arrival order.
    fn serve_waiters(&mut self, set: usize, out: &mut Outbox) {
        while let Some(&w) = self.sets[set].waiters.front() {
            if !self.place(w.host, w.page, w.block, out) {
                break;
            }
            self.sets[set].waiters.pop_front();
            let waited = self.stats.rmw_count - w.rmws_at_stall;
            if waited > self.stats.longest_stall_rmws {
                self.stats.longest_stall_rmws = waited;
                self.stats.longest_stall_own_set_rmws =
                    self.sets[set].rmw_count - w.own_rmws_at_stall;
            }
        }
        if self.sets[set].used >= self.start_blocks || !self.sets[set].waiters.is_empty() {
            self.queue_clean(set);
        }
    }

    // ---- cleaning ---------------------------------------------------------

    fn queue_clean(&mut self, set: usize) {
        if !self.sets[set].queued {
            self.sets[set].queued = true;
            self.clean_queue.push_back(set);
        }
    }

    /// A band of `set` with at least one block an RMW could merge now, in
    /// selection order; not one with a trim in flight (its band read could
    /// find bytes from before the hole and write them back over it).
    fn select_band(&self, set: usize) -> Option<u64> {
        self.sets[set]
            .order
            .keys()
            .map(|&(_, band)| band)
            .filter(|band| !self.trim_bands.contains_key(band))
            .find(|band| {
                self.bands[band]
                    .blocks
                    .iter()
                    .any(|b| self.map.get(b).is_some_and(Entry::mergeable))
            })
    }

    fn set_needs_cleaning(&self, set: usize) -> bool {
        self.sets[set].used >= self.stop_blocks || !self.sets[set].waiters.is_empty()
    }

    /// Starts the next RMW if none runs and a set (or idle time) asks.
    fn try_clean(&mut self, out: &mut Outbox) {
        if self.rmw.is_some() {
            return;
        }
        // Trims that waited for the RMW that just ended go first, so that
        // the next RMW sees their bands as trimming.
        while let Some(t) = self.deferred_trims.pop_front() {
            self.issue_trim(t, out);
        }
        if self.clean_stalled_first {
            // Stalled sets take turns, one RMW each: the set served goes to
            // the back of the queue.
            let stalled = self.clean_queue.iter().enumerate().find_map(|(i, &set)| {
                if self.sets[set].waiters.is_empty() {
                    return None;
                }
                self.select_band(set).map(|band| (i, set, band))
            });
            if let Some((i, set, band)) = stalled {
                self.clean_queue.remove(i);
                self.clean_queue.push_back(set);
                self.start_rmw(set, band, false, out);
                return;
            }
        }
        while let Some(&set) = self.clean_queue.front() {
            if self.set_needs_cleaning(set) {
                if let Some(band) = self.select_band(set) {
                    self.start_rmw(set, band, false, out);
                    return;
                }
                // Every block has a write in flight: retry when one lands.
                return;
            }
            self.clean_queue.pop_front();
            self.sets[set].queued = false;
            // Its cleaning is over: the writes that waited for it return.
            for (host, h) in std::mem::take(&mut self.sets[set].held) {
                self.complete_host(host, h, self.now_ns, out);
            }
        }
        if self.idle_cleaning {
            // Most used set first; ties to the lowest set.
            let mut best: Option<(u64, usize)> = None;
            for (i, s) in self.sets.iter().enumerate() {
                if s.used > 0 && best.is_none_or(|(u, _)| s.used > u) {
                    best = Some((s.used, i));
                }
            }
            if let Some((_, set)) = best
                && let Some(band) = self.select_band(set)
            {
                self.start_rmw(set, band, true, out);
            }
        }
    }

    fn start_rmw(&mut self, set: usize, band: u64, idle: bool, out: &mut Outbox) {
        let id = self.next_rmw;
        self.next_rmw = (self.next_rmw + 1) & ID_MASK;
        if let Some(info) = self.bands.get_mut(&band)
            && let Some(k) = info.key.take()
        {
            self.sets[set].order.remove(&(k, band));
        }
        debug_assert!(!self.trim_bands.contains_key(&band));
        let len = self.band_len_bytes(band);
        self.stats.rmw_io_bytes += len;
        let io = Self::io(
            encode_tag(HswdBuffer::Staging(id), 0),
            Op::Read,
            band * self.layout.band_bytes,
            len,
        );
        self.submit(out, NREGION_DEVICE, io, Rec::RmwBandRead);
        self.rmw = Some(Rmw {
            id,
            band,
            set,
            step: Step::BandRead,
            pending: 1,
            merged: Vec::new(),
            idle,
        });
    }

    /// The current RMW step's IOs are all done: start the next step.
    fn rmw_advance(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        let Some(mut r) = self.rmw.take() else { return };
        let bb = self.layout.block_bytes;
        let band_first = r.band * self.band_blocks;
        match r.step {
            Step::BandRead => {
                r.step = Step::BlockReads;
                let blocks: Vec<u64> = self.bands[&r.band].blocks.iter().copied().collect();
                for b in blocks {
                    let e = self.map.get_mut(&b).unwrap();
                    if !e.mergeable() {
                        continue; // left for a later RMW
                    }
                    e.rmw_reading = true;
                    let (slot, generation) = (e.slot, e.generation);
                    r.merged.push((b, slot, generation));
                    self.pins[slot as usize] += 1;
                    let io = Self::io(
                        encode_tag(HswdBuffer::Staging(r.id), b - band_first),
                        Op::Read,
                        self.slot_offset(slot),
                        bb,
                    );
                    self.stats.rmw_io_bytes += bb;
                    self.submit(out, PCACHE_DEVICE, io, Rec::RmwBlockRead { slot, block: b });
                    r.pending += 1;
                }
                if r.pending == 0 {
                    self.rmw = Some(r);
                    return self.rmw_advance(now_ns, out);
                }
            }
            Step::BlockReads | Step::Stage => {
                if self.rcache_pins > 0 {
                    // Reads of the previous band's RCache copy still run.
                    r.step = Step::Stage;
                    self.rmw = Some(r);
                    return;
                }
                if self.durable.journal.is_some() {
                    // The RCache still backs an older journal record: clear
                    // it durably before overwriting the RCache.
                    r.step = Step::JournalClear;
                    r.pending = 1;
                    self.write_header(None, out);
                } else {
                    r.step = Step::JournalClearFlush;
                    self.rmw = Some(r);
                    return self.rmw_advance(now_ns, out);
                }
            }
            Step::JournalClear => {
                r.step = Step::JournalClearFlush;
                r.pending = 1;
                self.flush_device(PCACHE_DEVICE, Rec::RmwStep, out);
            }
            Step::JournalClearFlush => {
                r.step = Step::RcacheWrite;
                r.pending = 1;
                let len = self.band_len_bytes(r.band);
                self.stats.rmw_io_bytes += len;
                let io = Self::io(
                    encode_tag(HswdBuffer::Staging(r.id), 0),
                    Op::Write,
                    self.layout.rcache_offset_bytes,
                    len,
                );
                self.submit(out, PCACHE_DEVICE, io, Rec::RmwStep);
            }
            Step::RcacheWrite => {
                r.step = Step::RcacheFlush;
                r.pending = 1;
                self.flush_device(PCACHE_DEVICE, Rec::RmwStep, out);
            }
            Step::RcacheFlush if self.broken == Broken::SkipJournal => {
                r.step = Step::JournalSetFlush;
                self.rmw = Some(r);
                return self.rmw_advance(now_ns, out);
            }
            Step::RcacheFlush => {
                // The journal record: band r.band is staged in the RCache.
                r.step = Step::JournalSet;
                r.pending = 1;
                let journal = Journal {
                    band: r.band,
                    len_bytes: self.band_len_bytes(r.band),
                };
                self.write_header(Some(journal), out);
            }
            Step::JournalSet => {
                r.step = Step::JournalSetFlush;
                r.pending = 1;
                self.flush_device(PCACHE_DEVICE, Rec::RmwStep, out);
            }
            Step::JournalSetFlush => {
                // Staged and journaled: now rewrite the band on the disk
                // (uncached reads of the band go to the RCache meanwhile).
                r.step = Step::BandWrite;
                r.pending = 1;
                self.rcache_band = Some(r.band);
                let len = self.band_len_bytes(r.band);
                self.stats.rmw_io_bytes += len;
                let io = Self::io(
                    encode_tag(HswdBuffer::Staging(r.id), 0),
                    Op::Write,
                    r.band * self.layout.band_bytes,
                    len,
                );
                self.submit(out, NREGION_DEVICE, io, Rec::RmwStep);
                // The band write took its bytes: the staging buffer is no
                // longer needed.
                if out.wants_data {
                    out.release.push(r.id);
                }
            }
            Step::BandWrite => {
                r.step = Step::BandFlush;
                r.pending = 1;
                self.flush_device(NREGION_DEVICE, Rec::RmwStep, out);
            }
            Step::BandFlush => {
                self.rcache_band = None;
                self.finish_rmw(r, now_ns, out);
                return;
            }
        }
        self.rmw = Some(r);
    }

    fn finish_rmw(&mut self, r: Rmw, _now_ns: TimeNs, out: &mut Outbox) {
        self.stats.rmw_count += 1;
        self.sets[r.set].rmw_count += 1;
        if r.merged.is_empty() {
            self.stats.rmw_empty += 1;
        }
        for &(b, slot, generation) in &r.merged {
            let Some(e) = self.map.get(&b) else { continue };
            if e.generation != generation || e.write_inflight || e.slot != slot {
                self.stats.rmw_rewritten_blocks += 1;
                continue; // written since: stays dirty
            }
            self.map.remove(&b);
            self.stats.rmw_cleaned_bytes += self.layout.block_bytes;
            if let Some(info) = self.bands.get_mut(&r.band) {
                info.blocks.remove(&b);
            }
            self.sets[r.set].used -= 1;
            // The band is durable on the disk: the entry may go, and the
            // slot once that is durable. (The journal record stays until
            // the next RMW clears it: replaying it rewrites the same bytes.)
            self.clear_entry(slot, out);
        }
        self.try_commit(out);
        self.stats.idle_rmw_count += u64::from(r.idle);
        // File the band again if blocks remain (new writes, skipped blocks).
        self.refile(r.band);
        for set in 0..self.sets.len() {
            if !self.sets[set].waiters.is_empty() {
                self.serve_waiters(set, out);
            }
        }
    }

    fn unpin(&mut self, slot: u64, out: &mut Outbox) {
        let s = slot as usize;
        self.pins[s] -= 1;
        if self.pins[s] == 0 && self.free_on_unpin[s] {
            self.free_on_unpin[s] = false;
            let set = (slot / self.layout.blocks_per_set) as usize;
            self.sets[set].free.push(slot);
            if !self.sets[set].waiters.is_empty() {
                self.serve_waiters(set, out);
            }
        }
    }

    /// Device IO `rec` completed, or failed with `error` (only host data
    /// path IOs: `on_device_error`).
    fn io_done(&mut self, now_ns: TimeNs, rec: Rec, error: Option<IoError>, out: &mut Outbox) {
        if let Some(error) = error {
            let host = match rec {
                Rec::Read { host, .. } | Rec::SlotWrite { host, .. } | Rec::Trim { host } => host,
                _ => unreachable!("only host data path IOs fail softly"),
            };
            if let Some(h) = self.hosts.get_mut(&host) {
                h.failed.get_or_insert(error);
            }
        }
        match rec {
            Rec::Read {
                host,
                slot,
                rcache,
                tier,
            } => {
                if let Some(s) = slot {
                    self.unpin(s, out);
                }
                if rcache {
                    self.rcache_pins -= 1;
                    if self.rcache_pins == 0
                        && self.rmw.as_ref().is_some_and(|r| r.step == Step::Stage)
                    {
                        self.rmw_advance(now_ns, out);
                    }
                }
                self.host_part_done(host, tier, now_ns, out);
            }
            Rec::SlotWrite { host, block, slot } => {
                self.unpin(slot, out);
                let mut committed = true;
                let mut drop_block = false;
                if let Some(e) = self.map.get_mut(&block) {
                    e.write_inflight = false;
                    if error.is_none() {
                        let first_data = !e.valid;
                        e.valid = true;
                        committed = e.committed || self.broken == Broken::AckBeforeCommit;
                        if first_data && e.slot == slot {
                            // The block's first data landed: its entry goes
                            // into the next commit (after a flush of this
                            // data).
                            self.durable.table.set(slot, block);
                            self.durable.new_next.push((block, slot));
                        }
                    } else {
                        // The slot never held this block's data and no
                        // write is queued for it: the block is uncached
                        // again (its NRegion copy is the newest landed).
                        drop_block = !e.valid && e.waiting.is_empty() && e.slot == slot;
                    }
                }
                if drop_block {
                    self.stats.failed_first_writes_dropped += 1;
                    self.uncache(block, out);
                    self.try_commit(out);
                } else {
                    self.next_slot_write(block, out);
                }
                // (A failed part ends now: `committed` stayed true.)
                if committed {
                    self.host_part_done(host, 0, now_ns, out);
                } else {
                    // Acknowledged once a commit has written its entry.
                    self.durable.hosts_next.push(host);
                    self.try_commit(out);
                }
            }
            Rec::Trim { host } => self.trim_done(host, error.is_some(), now_ns, out),
            Rec::CommitFlush => self.commit_flushed(now_ns, out),
            Rec::CommitPage => {
                if self.durable.table.page_written() {
                    self.commit_done(now_ns, out);
                }
            }
            Rec::RmwBandRead | Rec::RmwStep => self.rmw_part_done(now_ns, out),
            Rec::RmwBlockRead { slot, block } => {
                self.unpin(slot, out);
                if let Some(e) = self.map.get_mut(&block) {
                    e.rmw_reading = false;
                }
                // Writes held for the read go now, before the RMW moves on.
                self.next_slot_write(block, out);
                self.rmw_part_done(now_ns, out);
            }
        }
        self.try_clean(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    fn rmw_part_done(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        if let Some(r) = self.rmw.as_mut() {
            r.pending -= 1;
            if r.pending == 0 {
                self.rmw_advance(now_ns, out);
            }
        }
    }
}

/// The names of the counters this policy reports (`Policy::counters`; the
/// docs define each): reports and experiments look values up by these
/// constants, so a renamed counter is a compile error, not a silent "-".
pub mod counter {
    pub const HOST_IOS: &str = "host_ios";
    pub const COMPLETED_IOS: &str = "completed_ios";
    pub const READ_HITS: &str = "read_hits";
    pub const READ_MISSES: &str = "read_misses";
    pub const READ_RCACHE: &str = "read_rcache";
    pub const WRITE_HITS: &str = "write_hits";
    pub const WRITE_MISSES: &str = "write_misses";
    pub const WRITE_HIT_RATIO: &str = "write_hit_ratio";
    pub const WRITE_STALLS: &str = "write_stalls";
    pub const WRITES_HELD: &str = "writes_held";
    pub const LONGEST_STALL_RMWS: &str = "longest_stall_rmws";
    pub const LONGEST_STALL_OWN_SET_RMWS: &str = "longest_stall_own_set_rmws";
    pub const RMW_COUNT: &str = "rmw_count";
    pub const RMW_CLEANED_BYTES: &str = "rmw_cleaned_bytes";
    pub const CLEANED_BYTES_PER_RMW: &str = "cleaned_bytes_per_rmw";
    pub const RMW_IO_BYTES: &str = "rmw_io_bytes";
    pub const RMW_EMPTY: &str = "rmw_empty";
    pub const IDLE_RMW_COUNT: &str = "idle_rmw_count";
    pub const METADATA_WRITES: &str = "metadata_writes";
    pub const METADATA_BYTES: &str = "metadata_bytes";
    pub const COMMITS: &str = "commits";
    pub const DEVICE_FLUSHES: &str = "device_flushes";
    pub const RECOVERED_BLOCKS: &str = "recovered_blocks";
    pub const JOURNAL_REPLAYS: &str = "journal_replays";
    pub const FORMATTED: &str = "formatted";
    pub const RMW_BAND_READ_BLOCKS: &str = "rmw_band_read_blocks";
    pub const RMW_BAND_WRITE_BLOCKS: &str = "rmw_band_write_blocks";
    pub const RMW_REWRITTEN_BLOCKS: &str = "rmw_rewritten_blocks";
    pub const RMW_HELD_WRITES: &str = "rmw_held_writes";
    pub const TRIMS: &str = "trims";
    pub const TRIMMED_BLOCKS: &str = "trimmed_blocks";
    pub const TRIM_KEPT_BLOCKS: &str = "trim_kept_blocks";
    pub const TRIMS_DEFERRED: &str = "trims_deferred";
    pub const DRAIN_CACHED_BLOCKS: &str = "drain_cached_blocks";
    pub const DRAIN_DURING_RMW: &str = "drain_during_rmw";
    pub const DEVICE_ERRORS: &str = "device_errors";
    pub const HOST_IOS_FAILED: &str = "host_ios_failed";
    pub const FAILED_FIRST_WRITES_DROPPED: &str = "failed_first_writes_dropped";
    pub const CACHED_BYTES: &str = "cached_bytes";
    pub const MEAN_LATENCY_MS: &str = "mean_latency_ms";
    pub const MAX_LATENCY_MS: &str = "max_latency_ms";

    /// Every name above, in the order `counters()` reports them.
    pub const ALL: &[&str] = &[
        HOST_IOS,
        COMPLETED_IOS,
        READ_HITS,
        READ_MISSES,
        READ_RCACHE,
        WRITE_HITS,
        WRITE_MISSES,
        WRITE_HIT_RATIO,
        WRITE_STALLS,
        WRITES_HELD,
        LONGEST_STALL_RMWS,
        LONGEST_STALL_OWN_SET_RMWS,
        RMW_COUNT,
        RMW_CLEANED_BYTES,
        CLEANED_BYTES_PER_RMW,
        RMW_IO_BYTES,
        RMW_EMPTY,
        IDLE_RMW_COUNT,
        METADATA_WRITES,
        METADATA_BYTES,
        COMMITS,
        DEVICE_FLUSHES,
        RECOVERED_BLOCKS,
        JOURNAL_REPLAYS,
        FORMATTED,
        RMW_BAND_READ_BLOCKS,
        RMW_BAND_WRITE_BLOCKS,
        RMW_REWRITTEN_BLOCKS,
        RMW_HELD_WRITES,
        TRIMS,
        TRIMMED_BLOCKS,
        TRIM_KEPT_BLOCKS,
        TRIMS_DEFERRED,
        DRAIN_CACHED_BLOCKS,
        DRAIN_DURING_RMW,
        DEVICE_ERRORS,
        HOST_IOS_FAILED,
        FAILED_FIRST_WRITES_DROPPED,
        CACHED_BYTES,
        MEAN_LATENCY_MS,
        MAX_LATENCY_MS,
    ];
}

impl Policy for Hswd {
    fn name(&self) -> &str {
        "hswd"
    }

    fn tier_names(&self) -> Vec<String> {
        vec!["pcache".into(), "nregion".into(), "rcache".into()]
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let s = self.stats();
        let ratio = |a: u64, b: u64| {
            if a + b == 0 {
                0.0
            } else {
                a as f64 / (a + b) as f64
            }
        };
        let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        vec![
            (counter::HOST_IOS, s.host_ios as f64),
            (counter::COMPLETED_IOS, s.completed_ios as f64),
            (counter::READ_HITS, s.read_hits as f64),
            (counter::READ_MISSES, s.read_misses as f64),
            (counter::READ_RCACHE, s.read_rcache as f64),
            (counter::WRITE_HITS, s.write_hits as f64),
            (counter::WRITE_MISSES, s.write_misses as f64),
            (
                counter::WRITE_HIT_RATIO,
                ratio(s.write_hits, s.write_misses),
            ),
            (counter::WRITE_STALLS, s.write_stalls as f64),
            (counter::WRITES_HELD, s.writes_held as f64),
            (counter::LONGEST_STALL_RMWS, s.longest_stall_rmws as f64),
            (
                counter::LONGEST_STALL_OWN_SET_RMWS,
                s.longest_stall_own_set_rmws as f64,
            ),
            (counter::RMW_COUNT, s.rmw_count as f64),
            (counter::RMW_CLEANED_BYTES, s.rmw_cleaned_bytes as f64),
            (
                counter::CLEANED_BYTES_PER_RMW,
                per(s.rmw_cleaned_bytes, s.rmw_count),
            ),
            (counter::RMW_IO_BYTES, s.rmw_io_bytes as f64),
            (counter::RMW_EMPTY, s.rmw_empty as f64),
            (counter::IDLE_RMW_COUNT, s.idle_rmw_count as f64),
            (counter::METADATA_WRITES, s.metadata_writes as f64),
            (counter::METADATA_BYTES, s.metadata_bytes as f64),
            (counter::COMMITS, s.commits as f64),
            (counter::DEVICE_FLUSHES, s.device_flushes as f64),
            (counter::RECOVERED_BLOCKS, s.recovered_blocks as f64),
            (counter::JOURNAL_REPLAYS, s.journal_replays as f64),
            (counter::FORMATTED, s.formatted as f64),
            (counter::RMW_BAND_READ_BLOCKS, s.rmw_band_read_blocks as f64),
            (
                counter::RMW_BAND_WRITE_BLOCKS,
                s.rmw_band_write_blocks as f64,
            ),
            (counter::RMW_REWRITTEN_BLOCKS, s.rmw_rewritten_blocks as f64),
            (counter::RMW_HELD_WRITES, s.rmw_held_writes as f64),
            (counter::TRIMS, s.trims as f64),
            (counter::TRIMMED_BLOCKS, s.trimmed_blocks as f64),
            (counter::TRIM_KEPT_BLOCKS, s.trim_kept_blocks as f64),
            (counter::TRIMS_DEFERRED, s.trims_deferred as f64),
            (counter::DRAIN_CACHED_BLOCKS, s.drain_cached_blocks as f64),
            (counter::DRAIN_DURING_RMW, s.drain_during_rmw as f64),
            (counter::DEVICE_ERRORS, s.device_errors as f64),
            (counter::HOST_IOS_FAILED, s.host_ios_failed as f64),
            (
                counter::FAILED_FIRST_WRITES_DROPPED,
                s.failed_first_writes_dropped as f64,
            ),
            (counter::CACHED_BYTES, s.cached_bytes as f64),
            (
                counter::MEAN_LATENCY_MS,
                if s.completed_ios == 0 {
                    0.0
                } else {
                    (s.latency_sum_ns as f64 / s.completed_ios as f64).round() / 1e6
                },
            ),
            (counter::MAX_LATENCY_MS, s.latency_max_ns as f64 / 1e6),
        ]
    }

    fn moves_data(&self) -> bool {
        true
    }

    /// Yes: every acknowledged write's data and entry are on the PCache,
    /// which `open` recovers (docs/crash-consistency.md).
    fn flush_is_durable(&self) -> bool {
        true
    }

    fn open(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        self.recover(stores)
    }

    /// The PCache (data, entries, journal) is what `open` recovers.
    fn restarts_warm(&self) -> bool {
        true
    }

    /// Whole blocks only: IOs are widened to whole blocks, and a
    /// partial-block write is not read-modify-written (see the module
    /// docs), which is exact in timing but not in data.
    fn required_alignment_bytes(&self) -> u64 {
        self.layout.block_bytes
    }

    fn on_host_io(&mut self, now_ns: TimeNs, io: HostIo, out: &mut Outbox) {
        self.now_ns = now_ns;
        self.stats.host_ios += 1;
        self.last_host_ns = now_ns;
        self.idle_cleaning = false;
        if self.idle_ns > 0 && !self.timer_armed {
            self.timer_armed = true;
            out.timers
                .push((now_ns.saturating_add(self.idle_ns), IDLE_TIMER));
        }
        let bb = self.layout.block_bytes;
        // Blocks past the NRegion's last whole block are not addressable
        // (set a tenant region to fit a workload).
        let end = io
            .offset_bytes
            .saturating_add(io.size_bytes as u64)
            .min(self.nregion_bytes / bb * bb);
        let first = io.offset_bytes / bb;
        let n = end.div_ceil(bb).saturating_sub(first);
        assert!(
            !self.hosts.contains_key(&io.id),
            "host IO {} is already in flight",
            io.id
        );
        // One extra part, released at the end, so that parts finishing
        // while the IO is being split cannot complete it early.
        self.hosts.insert(
            io.id,
            HostPending {
                parts: 1,
                tier: 0,
                arrival_ns: now_ns,
                failed: None,
                held_by: None,
            },
        );
        if n > 0 {
            match io.op {
                Op::Read => self.read(io.id, first, n, out),
                Op::Write => self.write(io.id, first, n, out),
                Op::Trim => self.trim(io.id, io.offset_bytes, end, out),
                // Every acknowledged write is on the PCache with its entry
                // written (a commit ran before it was acknowledged): the
                // executor's sync after the flush makes both durable.
                Op::Flush => {}
            }
        }
        self.host_part_done(io.id, 0, now_ns, out);
        self.try_clean(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    fn on_device_completion(&mut self, now_ns: TimeNs, device: usize, tag: u64, out: &mut Outbox) {
        self.now_ns = now_ns;
        // A completion of no IO in flight is an executor bug that would
        // corrupt the maps if ignored: stop here.
        let Some(rec) = self.inflight.remove(&(device, tag)) else {
            panic!("hswd: a completion for device {device} tag {tag}, which is not in flight");
        };
        self.io_done(now_ns, rec, None, out);
    }

    /// Survives a failed IO of the host data path: a PCache, RCache or
    /// NRegion read (its host read fails), a slot write (its host write
    /// fails; a block whose first data it was goes back to uncached, a
    /// block holding acknowledged data keeps its slot, whose bytes the
    /// failed write left unspecified), an NRegion trim (the host trim
    /// fails, the cached blocks stay). A failed commit or RMW IO is
    /// refused (fail-stop): the metadata or the band on the disk would be
    /// in a state recovery alone can judge (docs/crash-consistency.md).
    fn on_device_error(
        &mut self,
        now_ns: TimeNs,
        device: usize,
        tag: u64,
        error: IoError,
        out: &mut Outbox,
    ) -> bool {
        self.now_ns = now_ns;
        match self.inflight.get(&(device, tag)) {
            Some(Rec::Read { .. } | Rec::SlotWrite { .. } | Rec::Trim { .. }) => {}
            Some(_) => return false,
            None => {
                panic!("hswd: an error for device {device} tag {tag}, which is not in flight")
            }
        }
        let rec = self.inflight.remove(&(device, tag)).unwrap();
        self.stats.device_errors += 1;
        self.io_done(now_ns, rec, Some(error), out);
        true
    }

    fn on_timer(&mut self, now_ns: TimeNs, timer_id: u64, out: &mut Outbox) {
        if timer_id != IDLE_TIMER {
            return;
        }
        self.now_ns = now_ns;
        self.timer_armed = false;
        let due = self.last_host_ns.saturating_add(self.idle_ns);
        if now_ns >= due {
            self.idle_cleaning = true;
            self.try_clean(out);
        } else {
            self.timer_armed = true;
            out.timers.push((due, IDLE_TIMER));
        }
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Cleans every cached block, RMW after RMW (`clean_all`); an RMW
    /// running now finishes first.
    fn drain(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        self.now_ns = now_ns;
        self.stats.drain_cached_blocks = self.map.len() as u64;
        self.stats.drain_during_rmw = u64::from(self.rmw.is_some());
        self.clean_all(out);
    }

    /// Nothing in flight, no RMW, nothing cached: the NRegion holds every
    /// block's newest data.
    fn is_drained(&self) -> bool {
        let d = &self.durable;
        self.inflight.is_empty()
            && self.rmw.is_none()
            && self.map.is_empty()
            && self.hosts.is_empty()
            && self.sets.iter().all(|s| s.held.is_empty())
            && d.table.state == CommitState::Idle
            && !d.table.due()
    }

    /// Per block, where `read` would go now (see the module docs): the
    /// PCache slot of a valid cached block; the RCache copy of the band
    /// being written back (step 4: the disk band is being rewritten, and
    /// its staged copy holds the newest data of every uncached block);
    /// else the NRegion. Bytes past the last whole block of the NRegion
    /// are not addressable and left out.
    fn locate(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) {
        let from = out.len();
        let bb = self.layout.block_bytes;
        let end = offset_bytes
            .saturating_add(len_bytes)
            .min(self.nregion_bytes / bb * bb);
        if end <= offset_bytes {
            return;
        }
        let band_bytes = self.band_blocks * bb;
        // Uncached bytes [at, hi): the RCache for the band under write-back,
        // else the NRegion; split at band edges.
        let uncached = |out: &mut Vec<Extent>, mut at: u64, hi: u64| {
            while at < hi {
                let band = at / band_bytes;
                let band_end = ((band + 1) * band_bytes).min(hi);
                let ext = if self.rcache_band == Some(band) {
                    Extent {
                        len_bytes: band_end - at,
                        tier: TIER_RCACHE,
                        device: PCACHE_DEVICE,
                        device_offset_bytes: self.layout.rcache_offset_bytes
                            + (at - band * band_bytes),
                    }
                } else {
                    Extent {
                        len_bytes: band_end - at,
                        tier: TIER_NREGION,
                        device: NREGION_DEVICE,
                        device_offset_bytes: at,
                    }
                };
                push_extent(out, from, ext);
                at = band_end;
            }
        };
        let mut at = offset_bytes;
        for b in self.cached_blocks_in(offset_bytes / bb, end.div_ceil(bb)) {
            let e = &self.map[&b];
            if !e.valid {
                continue;
            }
            let lo = (b * bb).max(offset_bytes);
            let hi = ((b + 1) * bb).min(end);
            uncached(out, at, lo);
            let ext = Extent {
                len_bytes: hi - lo,
                tier: TIER_PCACHE,
                device: PCACHE_DEVICE,
                device_offset_bytes: self.slot_offset(e.slot) + (lo - b * bb),
            };
            push_extent(out, from, ext);
            at = hi;
        }
        uncached(out, at, end);
    }
}

impl Hswd {
    /// `Policy::open`: reads the metadata area; formats it if it was never
    /// written; refuses one made for another NRegion (its volume id, before
    /// anything is written) or another geometry; finishes an RMW
    /// whose journal record is durable by writing the RCache copy to its
    /// band (the band may be half rewritten); rebuilds the cache's maps
    /// from the entries (every recovered block is dirty and committed).
    fn recover(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        assert!(
            self.map.is_empty() && self.hosts.is_empty() && self.inflight.is_empty(),
            "open before any IO"
        );
        let need = self.layout.device_bytes;
        let have = stores.capacity_bytes(PCACHE_DEVICE);
        if have < need {
            return Err(OpenError::mismatch(format!(
                "the PCache device holds {have} bytes; this layout needs {need}"
            )));
        }
        // What a killed process left may sit in the OS's cache only: make
        // it durable before building on it (the next writes go to the
        // other copies, trusting these).
        stores.sync(PCACHE_DEVICE)?;
        stores.sync(NREGION_DEVICE)?;
        let read = |stores: &mut dyn Stores, page: u64, copy: u8| -> Result<Vec<u8>, OpenError> {
            let mut b = vec![0u8; META_PAGE as usize];
            stores.read_at(PCACHE_DEVICE, hswd_meta::copy_offset(page, copy), &mut b)?;
            Ok(b)
        };
        let (a, b) = (read(stores, 0, 0)?, read(stores, 0, 1)?);
        let (ha, hb) = (hswd_meta::decode_header(&a), hswd_meta::decode_header(&b));
        let (ra, rb) = (ha.as_ref().err().copied(), hb.as_ref().err().copied());
        let Some((copy, header, seq)) = hswd_meta::newest(ha, hb) else {
            // Only an area never written is formatted: a damaged or
            // foreign one holds data nobody should wipe silently.
            if a.iter().chain(&b).all(|&x| x == 0) {
                return self.format(stores);
            }
            return Err(OpenError::mismatch(format!(
                "the PCache device's metadata header is unreadable (copy 0: {}; copy 1: {}): \
                 refusing to format over what it may hold; give a new or zeroed PCache device \
                 to start with an empty cache",
                ra.unwrap_or("valid"),
                rb.unwrap_or("valid")
            )));
        };
        // Another NRegion is refused before anything is written: no
        // duplicate-claim clears, no journal replay, no header rewrite.
        let bound = binding::check(stores, &NREGION_BINDING, header.nregion_id)?;
        if header.geometry != self.geometry() {
            return Err(OpenError::mismatch(format!(
                "the PCache device holds an HSWD cache made for another configuration ({}); \
                 refusing to reinterpret it: use the configuration it was made with, or a new \
                 (or emptied) PCache device to start with an empty cache",
                header.geometry.differences(&self.geometry())
            )));
        }
        self.durable.table.header_loaded(seq, copy);
        self.durable.journal = header.journal;
        // The entries: per block the claim with the highest commit sequence
        // (older claims are cleared durably by `load`, before anything can
        // reuse their slots or clean the winner).
        let (blocks_per_set, nregion_blocks, band_blocks, sets) = (
            self.layout.blocks_per_set,
            self.nregion_blocks,
            self.band_blocks,
            self.layout.sets,
        );
        let loaded = self
            .durable
            .table
            .load(stores, PCACHE_DEVICE, &|slot, block| {
                let set = slot / blocks_per_set;
                if block >= nregion_blocks {
                    Err("past the NRegion".into())
                } else if (block / band_blocks) % sets != set {
                    Err(format!("not in the slot's set {set}"))
                } else {
                    Ok(())
                }
            })?;
        // An RMW journaled but maybe not finished: write the staged band.
        if let Some(j) = header.journal {
            let bands = self.nregion_bytes.div_ceil(self.layout.band_bytes);
            if j.band >= bands || j.len_bytes == 0 || j.len_bytes != self.band_len_bytes(j.band) {
                return Err(OpenError::mismatch(format!(
                    "the journal record stages {} bytes of band {}, which do not fit the NRegion",
                    j.len_bytes, j.band
                )));
            }
            let mut staged = vec![0u8; j.len_bytes as usize];
            stores.read_at(PCACHE_DEVICE, self.layout.rcache_offset_bytes, &mut staged)?;
            stores.write_at(NREGION_DEVICE, j.band * self.layout.band_bytes, &staged)?;
            stores.sync(NREGION_DEVICE)?;
            self.stats.journal_replays += 1;
        }
        // Rebuild the maps.
        let recovered = loaded.claims;
        let mut taken = vec![false; self.layout.blocks as usize];
        for &(slot, block, _) in &recovered {
            taken[slot as usize] = true;
            self.map.insert(
                block,
                Entry {
                    slot,
                    generation: 0,
                    valid: true,
                    write_inflight: false,
                    rmw_reading: false,
                    waiting: VecDeque::new(),
                    committed: true,
                },
            );
            let band = block / self.band_blocks;
            self.bands.entry(band).or_default().blocks.insert(block);
            let set = self.set_of_band(band);
            self.sets[set].used += 1;
        }
        let per_set = self.layout.blocks_per_set;
        for (i, set) in self.sets.iter_mut().enumerate() {
            let i = i as u64;
            set.free = (i * per_set..(i + 1) * per_set)
                .rev()
                .filter(|&s| !taken[s as usize])
                .collect();
        }
        let mut bands: Vec<u64> = self.bands.keys().copied().collect();
        bands.sort_unstable();
        for band in bands {
            self.clock += 1;
            let stamp = self.clock;
            self.bands.get_mut(&band).unwrap().last_access = stamp;
            self.refile(band);
        }
        for set in 0..self.sets.len() {
            if self.sets[set].used >= self.start_blocks {
                self.queue_clean(set);
            }
        }
        self.stats.recovered_blocks = recovered.len() as u64;
        // A header that does not record the NRegion's id yet (written
        // before ids were): record it now, into the other copy, synced.
        self.durable.nregion_id = bound.id;
        if bound.record {
            let seq = self.durable.table.next_seq(0);
            let h = Header {
                geometry: self.geometry(),
                journal: self.durable.journal,
                nregion_id: bound.id,
            };
            let (offset, _) = self.durable.table.next_version(0);
            stores.write_at(PCACHE_DEVICE, offset, &hswd_meta::encode_header(&h, seq))?;
            stores.sync(PCACHE_DEVICE)?;
        }
        if cfg!(debug_assertions) {
            self.check_invariants_full();
        }
        Ok(())
    }

    /// A never-written metadata area: every entry page (all slots free) in
    /// copy 0 and copy 1 zeroed, synced; then the header, synced — so a
    /// crash during the format leaves no header over stale entries.
    fn format(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        // The NRegion's id (labelling an unlabelled NRegion file now).
        self.durable.nregion_id = binding::id_at_format(stores, NREGION_DEVICE)?;
        let header = Header {
            geometry: self.geometry(),
            journal: None,
            nregion_id: self.durable.nregion_id,
        };
        self.durable.table.format(stores, PCACHE_DEVICE)?;
        stores.write_at(
            PCACHE_DEVICE,
            hswd_meta::copy_offset(0, 1),
            &vec![0u8; META_PAGE as usize],
        )?;
        stores.sync(PCACHE_DEVICE)?;
        let seq = self.durable.table.next_seq(0);
        let (offset, _) = self.durable.table.next_version(0);
        stores.write_at(
            PCACHE_DEVICE,
            offset,
            &hswd_meta::encode_header(&header, seq),
        )?;
        stores.sync(PCACHE_DEVICE)?;
        self.stats.formatted = 1;
        Ok(())
    }

    /// Cheap invariants, checked after every handler in debug builds.
    fn check_invariants(&self) {
        assert!(self.map.len() as u64 <= self.layout.blocks);
        assert!(self.rcache_band.is_none() || self.rmw.is_some());
        assert!(self.rcache_pins as usize <= self.inflight.len());
        assert!(self.trims.len() + self.deferred_trims.len() <= self.hosts.len());
        // Deferred trims wait for an RMW; without one they are issued.
        assert!(self.deferred_trims.is_empty() || self.rmw.is_some());
        if let Some(r) = &self.rmw {
            assert!(
                r.pending > 0 || r.step == Step::Stage,
                "RMW of band {} waits for nothing in step {:?}",
                r.band,
                r.step
            );
            assert!(r.merged.len() as u64 <= self.band_blocks);
        }
        assert!(self.clean_queue.len() <= self.sets.len());
    }

    /// Every invariant, at a cost linear in the PCache and the IOs in
    /// flight: for tests, between events.
    #[doc(hidden)]
    pub fn check_invariants_full(&self) {
        self.check_invariants();
        let blocks = self.layout.blocks as usize;
        let per_set = self.layout.blocks_per_set;
        let mut owner: Vec<Option<u64>> = vec![None; blocks];
        let mut used = vec![0u64; self.sets.len()];
        let rmw_band = self.rmw.as_ref().map(|r| r.band);
        for (&b, e) in &self.map {
            let s = e.slot as usize;
            let band = b / self.band_blocks;
            let set = self.set_of_band(band);
            assert_eq!(
                s as u64 / per_set,
                set as u64,
                "block {b}'s slot {s} is in another set"
            );
            assert!(
                owner[s].is_none(),
                "slot {s} held by blocks {:?} and {b}",
                owner[s]
            );
            owner[s] = Some(b);
            assert!(
                !self.free_on_unpin[s],
                "slot {s} of block {b} is to be freed"
            );
            used[set] += 1;
            assert!(
                self.bands.get(&band).is_some_and(|i| i.blocks.contains(&b)),
                "block {b} is missing from band {band}"
            );
            assert!(
                e.waiting.is_empty() || e.write_inflight || e.rmw_reading,
                "block {b} waits for nothing"
            );
        }
        let mut trim_bands: HashMap<u64, u32> = HashMap::new();
        for t in &self.trims {
            for band in self.bands_of(t) {
                *trim_bands.entry(band).or_insert(0) += 1;
            }
        }
        assert_eq!(trim_bands, self.trim_bands, "bands with trims in flight");
        if let Some(band) = rmw_band {
            assert!(
                !trim_bands.contains_key(&band),
                "band {band} under RMW and trim"
            );
        }
        let mut pins = vec![0u32; blocks];
        let mut rcache_pins = 0;
        for rec in self.inflight.values() {
            match rec {
                Rec::Read { slot: Some(s), .. }
                | Rec::SlotWrite { slot: s, .. }
                | Rec::RmwBlockRead { slot: s, .. } => pins[*s as usize] += 1,
                Rec::Read { rcache: true, .. } => rcache_pins += 1,
                _ => {}
            }
        }
        assert_eq!(rcache_pins, self.rcache_pins, "RCache reads in flight");
        let mut free = vec![false; blocks];
        for (i, set) in self.sets.iter().enumerate() {
            assert_eq!(set.used, used[i], "set {i}: used blocks");
            for &slot in &set.free {
                let s = slot as usize;
                assert_eq!(
                    slot / per_set,
                    i as u64,
                    "set {i} frees slot {s} of another set"
                );
                assert!(!free[s] && owner[s].is_none(), "free slot {s} is in use");
                assert!(
                    pins[s] == 0 && !self.free_on_unpin[s],
                    "free slot {s} is pinned"
                );
                free[s] = true;
            }
            assert_eq!(
                set.queued,
                self.clean_queue.contains(&i),
                "set {i}: queued flag"
            );
            assert!(
                set.held.is_empty() || set.queued,
                "set {i}: writes held for a cleaning that is over"
            );
        }
        // Slots whose cleared entry is on its way to being durable.
        let d = &self.durable;
        d.table.check_invariants();
        let mut releasing = vec![false; blocks];
        for slot in d.table.releasing() {
            let s = slot as usize;
            assert!(
                !releasing[s] && owner[s].is_none() && !free[s],
                "slot {s} released twice or in use"
            );
            releasing[s] = true;
        }
        // The entries say what the cache holds: a block's slot from its
        // first landed write on, nothing for other slots.
        for (s, holder) in owner.iter().enumerate() {
            let (block_plus_one, _) = d.table.entry(s as u64);
            match *holder {
                Some(b) if self.map[&b].valid => {
                    assert_eq!(block_plus_one, b + 1, "slot {s}: entry vs block {b}")
                }
                _ => assert_eq!(
                    block_plus_one, 0,
                    "slot {s}: an entry for a slot holding no landed block"
                ),
            }
        }
        if d.table.state == CommitState::Idle {
            assert!(d.new_running.is_empty() && d.hosts_running.is_empty());
        }
        for s in 0..blocks {
            assert_eq!(pins[s], self.pins[s], "slot {s}: pins vs IOs in flight");
            assert!(
                owner[s].is_some() || free[s] || self.free_on_unpin[s] || releasing[s],
                "slot {s} is lost: neither held, free nor to be freed"
            );
            assert!(
                !self.free_on_unpin[s] || pins[s] > 0,
                "slot {s} waits for no unpin"
            );
        }
        for (i, set) in self.sets.iter().enumerate() {
            let held = (0..blocks)
                .filter(|&s| {
                    s as u64 / per_set == i as u64 && (releasing[s] || self.free_on_unpin[s])
                })
                .count() as u64;
            assert_eq!(
                set.used + set.free.len() as u64 + held,
                per_set,
                "set {i}: used + free + being released"
            );
        }
        for (&band, info) in &self.bands {
            let set = self.set_of_band(band);
            match info.key {
                Some(k) => assert!(self.sets[set].order.contains_key(&(k, band))),
                None => assert_eq!(rmw_band, Some(band), "band {band} is filed nowhere"),
            }
            assert!(
                !info.blocks.is_empty() || rmw_band == Some(band),
                "empty band {band} is kept"
            );
        }
        for set in &self.sets {
            for &(k, band) in set.order.keys() {
                assert_eq!(self.bands.get(&band).and_then(|i| i.key), Some(k));
            }
        }
    }

    #[doc(hidden)]
    pub fn debug_state(&self) -> String {
        format!(
            "rmw={:?} queue={:?} sets={:?} map={:?} inflight={} rcache_pins={}",
            self.rmw.as_ref().map(|r| (r.band, r.step, r.pending)),
            self.clean_queue,
            self.sets
                .iter()
                .map(|s| (
                    s.used,
                    s.free.len(),
                    s.waiters.len(),
                    s.queued,
                    s.order.len()
                ))
                .collect::<Vec<_>>(),
            self.map
                .iter()
                .map(|(b, e)| (*b, e.slot, e.valid, e.write_inflight, e.waiting.len()))
                .collect::<Vec<_>>(),
            self.inflight.len(),
            self.rcache_pins,
        )
    }
}
