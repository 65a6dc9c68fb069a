//! Drive-managed SMR disk (SSWD): Seagate's shingled drives as the
//! Skylight work reverse-engineered them (Aghayev & Desnoyers, "Skylight —
//! a window on shingled disk operation", FAST 2015), the baseline of the
//! HSWD paper (seed 002).
//!
//! The drive is an SMR disk (`smr.rs`) whose conventional zone at the outer
//! edge holds a **persistent cache** (PCache) of `persistent_cache_bytes`,
//! organised as a circular log of 4 KiB blocks; the **native region**
//! (NRegion) is the bands after it. Host LBA `x` lives in the NRegion at
//! `persistent_cache_bytes + x` of the SMR disk, so reaching the log from
//! the bands costs a real seek to the outer edge.
//!
//! - **RAM buffer**: a write is accepted into a volatile buffer of
//!   `ram_buffer_bytes` and completes after the command overhead plus its
//!   transfer at the interface rate (serialised), without the head. A write
//!   that does not fit waits until destaging frees room (in arrival order);
//!   a write larger than the whole buffer is accepted alone into an empty
//!   buffer. Writes are tracked in 4 KiB blocks (partial blocks are widened,
//!   as the drive's log stores whole sectors groups).
//! - **Destaging**: when the buffer holds every block of a band, that band
//!   is written straight to the NRegion (one full-band write, no RMW).
//!   Otherwise buffered writes go to the PCache as **log appends** (up to
//!   `max_append_bytes`, in arrival order, one sequential write at the log's
//!   tail) once the buffer is `destage_start_pct` full, a flush waits, a
//!   write waits for room, or no host IO arrived for `buffer_idle_ns`.
//! - **Cleaning** is FIFO from the log head, as on the real drive: take the
//!   band of the oldest live block in the log, read all of that band's
//!   live blocks from the log and the whole band from the NRegion, then
//!   write the band back (one band read-modify-write). Blocks are freed in
//!   the middle of the log, but space is reclaimed only at the head, so a
//!   head band with few blocks frees little. Cleaning runs when an append
//!   finds no room, when the log is `clean_start_pct` full, and in idle
//!   time: after `idle_clean_ns` without host IO the drive cleans band after
//!   band until the log is empty or a host IO arrives (the running RMW is
//!   finished first).
//! - **Reads** of a block come from the buffer (overhead + interface
//!   transfer), else from its newest log copy, else from its band; a host
//!   read is split into pieces by where its blocks are.
//! - One background operation (an append, a band write, or one cleaning
//!   RMW) runs at a time; host reads are queued on the disk alongside it
//!   and the disk's NCQ scheduler (SSTF) orders everything.
//! - A flush completes once every write accepted before it is on the media
//!   (log or band); trims cost the command overhead.
//!
//! Not modelled: the log's own metadata (Skylight saw the drive's mapping
//! kept in DRAM and journaled), log-structured writes of the band map, the
//! drive merging buffered blocks of a band into the band it cleans, and
//! bands that vary in size across the platter (15–40 MiB on the real
//! drive; one size here).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::{Completion, DeviceIo, Op, ParamError, TimeNs};

use crate::check::{range, range_f64, unknown_preset};
use crate::hdd::{HddOverrides, HddParams, Scheduler};
use crate::smr::{SECTOR_4K, SmrModel, SmrParams, merge_disk, validate_layout};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const MB_PER_S: u64 = 1_000_000;
const NS_PER_MS: u64 = 1_000_000;
const BLOCK: u64 = SECTOR_4K;

/// Parameters of a drive-managed SMR disk. Missing keys default to the
/// `seagate-8tb-archive` preset.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SswdParams {
    /// Size of the on-platter persistent cache (log), bytes, multiple of
    /// 4 KiB. Default 20 GiB.
    pub persistent_cache_bytes: u64,
    /// Volatile RAM write buffer, bytes. Default 128 MiB.
    pub ram_buffer_bytes: u64,
    /// Buffer fill (% of `ram_buffer_bytes`) that starts destaging.
    /// Default 50.
    pub destage_start_pct: f64,
    /// Largest log append, bytes (multiple of 4 KiB). Default 4 MiB.
    pub max_append_bytes: u64,
    /// Destage everything after this long without host IO, ns. Default
    /// 50,000,000 (50 ms).
    pub buffer_idle_ns: u64,
    /// Log fill (% of `persistent_cache_bytes`) at which the drive cleans
    /// while busy. Default 90.
    pub clean_start_pct: f64,
    /// Clean in the background after this long without host IO, ns; 0 =
    /// never. Default 1,000,000,000 (1 s).
    pub idle_clean_ns: u64,
    /// Band size of the native region, bytes. Default 32 MiB.
    pub band_bytes: u64,
    /// Guard gap after each band, bytes. Default 1 MiB.
    pub guard_bytes: u64,
    /// The mechanics (every key of `model = "hdd"`); `capacity_bytes` is
    /// the whole media, persistent cache and guard gaps included.
    pub disk: HddParams,
}

impl Default for SswdParams {
    fn default() -> Self {
        SswdParams::seagate_8tb_archive()
    }
}

impl SswdParams {
    pub const PRESETS: &'static [&'static str] = &["seagate-8tb-archive", "sswd-7200-2tb"];
    pub const KEYS: &'static [&'static str] = &[
        "persistent_cache_bytes",
        "ram_buffer_bytes",
        "destage_start_pct",
        "max_append_bytes",
        "buffer_idle_ns",
        "clean_start_pct",
        "idle_clean_ns",
        "band_bytes",
        "guard_bytes",
        "disk",
    ];

    /// Seagate Archive HDD 8 TB (ST8000AS0002), the drive Skylight dissected
    /// and the HSWD paper's SSWD: 8 TB, 5900 rpm, 128 MiB cache, up to
    /// 190 MB/s sustained (datasheet); a persistent cache of about 20 GB
    /// (Skylight); 32 MiB bands (the paper's choice within Skylight's
    /// 15–40 MB). Seek times are not published: 1 / 12 / 24 ms
    /// (track-to-track / average / full stroke) as for 5400–5900 rpm
    /// desktop drives, 1 ms write settle, inner rate 95 MB/s (2:1 zoning),
    /// the thresholds and delays (*ours*).
    pub fn seagate_8tb_archive() -> Self {
        SswdParams {
            persistent_cache_bytes: 20 * GIB,
            ram_buffer_bytes: 128 * MIB,
            destage_start_pct: 50.0,
            max_append_bytes: 4 * MIB,
            buffer_idle_ns: 50 * NS_PER_MS,
            clean_start_pct: 90.0,
            idle_clean_ns: 1_000 * NS_PER_MS,
            band_bytes: 32 * MIB,
            guard_bytes: MIB,
            disk: HddParams {
                capacity_bytes: 8_000_000_000_000,
                rpm: 5900,
                track_to_track_seek_ns: NS_PER_MS,
                average_seek_ns: 12 * NS_PER_MS,
                full_stroke_seek_ns: 24 * NS_PER_MS,
                write_settle_ns: NS_PER_MS,
                outer_rate_bytes_per_s: 190 * MB_PER_S,
                inner_rate_bytes_per_s: 95 * MB_PER_S,
                command_overhead_ns: 100_000,
                write_cache: false,
                write_cache_bytes: 128 * MIB,
                interface_rate_bytes_per_s: 600 * MB_PER_S,
                readahead_bytes: 2 * MIB,
                queue_depth: 32,
                scheduler: Scheduler::Sstf,
            },
        }
    }

    /// The same drive logic on HSWD's NRegion mechanics (`sata-7200-2tb`),
    /// so that HSWD and SSWD differ only in where the cache is and how it
    /// is cleaned.
    pub fn sswd_7200_2tb() -> Self {
        SswdParams {
            disk: HddParams::sata_7200_2tb(),
            ..SswdParams::seagate_8tb_archive()
        }
    }

    pub fn preset(name: &str) -> Result<Self, ParamError> {
        match name {
            "seagate-8tb-archive" => Ok(Self::seagate_8tb_archive()),
            "sswd-7200-2tb" => Ok(Self::sswd_7200_2tb()),
            _ => Err(unknown_preset(name, Self::PRESETS)),
        }
    }

    pub fn validate(&self) -> Result<(), ParamError> {
        self.disk.validate().map_err(|e| e.within("disk"))?;
        validate_layout(
            self.band_bytes,
            self.guard_bytes,
            self.persistent_cache_bytes,
            self.disk.capacity_bytes,
        )?;
        range("ram_buffer_bytes", self.ram_buffer_bytes, BLOCK, 1 << 40)?;
        range_f64("destage_start_pct", self.destage_start_pct, 0.0, 100.0)?;
        range("max_append_bytes", self.max_append_bytes, BLOCK, 1 << 31)?;
        if self.max_append_bytes % BLOCK != 0 {
            return Err(ParamError::new(
                "max_append_bytes",
                self.max_append_bytes,
                "a multiple of 4096 bytes",
            ));
        }
        // One append (whole buffered pieces of at most a band) must fit in
        // an empty log, with room to spare for cleaning to make progress.
        let least = 2 * self.band_bytes.max(self.max_append_bytes);
        range(
            "persistent_cache_bytes",
            self.persistent_cache_bytes,
            least,
            self.disk.capacity_bytes,
        )?;
        range(
            "buffer_idle_ns",
            self.buffer_idle_ns,
            1,
            3_600 * 1_000 * NS_PER_MS,
        )?;
        range_f64("clean_start_pct", self.clean_start_pct, 1.0, 100.0)?;
        range(
            "idle_clean_ns",
            self.idle_clean_ns,
            0,
            3_600 * 1_000 * NS_PER_MS,
        )?;
        Ok(())
    }

    /// Host-visible bytes: the NRegion's whole bands.
    pub fn capacity_bytes(&self) -> u64 {
        self.smr().capacity_bytes() - self.persistent_cache_bytes
    }

    fn smr(&self) -> SmrParams {
        SmrParams {
            band_bytes: self.band_bytes,
            guard_bytes: self.guard_bytes,
            conventional_bytes: self.persistent_cache_bytes,
            disk: self.disk.clone(),
        }
    }
}

/// Config keys given next to `model = "sswd"` (see `SmrOverrides`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SswdOverrides {
    #[serde(default)]
    pub preset: Option<String>,
    #[serde(default)]
    pub persistent_cache_bytes: Option<u64>,
    #[serde(default)]
    pub ram_buffer_bytes: Option<u64>,
    #[serde(default)]
    pub destage_start_pct: Option<f64>,
    #[serde(default)]
    pub max_append_bytes: Option<u64>,
    #[serde(default)]
    pub buffer_idle_ns: Option<u64>,
    #[serde(default)]
    pub clean_start_pct: Option<f64>,
    #[serde(default)]
    pub idle_clean_ns: Option<u64>,
    #[serde(default)]
    pub band_bytes: Option<u64>,
    #[serde(default)]
    pub guard_bytes: Option<u64>,
    #[serde(default)]
    pub disk: Option<HddOverrides>,
}

impl SswdOverrides {
    pub fn into_params(self) -> Result<SswdParams, ParamError> {
        let mut p = match &self.preset {
            Some(name) => SswdParams::preset(name)?,
            None => SswdParams::default(),
        };
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { p.$f = v; } )* };
        }
        set!(
            persistent_cache_bytes,
            ram_buffer_bytes,
            destage_start_pct,
            max_append_bytes,
            buffer_idle_ns,
            clean_start_pct,
            idle_clean_ns,
            band_bytes,
            guard_bytes
        );
        if let Some(disk) = self.disk {
            p.disk = merge_disk(p.disk, disk).map_err(|e| e.within("disk"))?;
        }
        Ok(p)
    }
}

/// End-of-run counters (see `DeviceModel::counters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SswdCounters {
    /// Cleaning band read-modify-writes completed.
    pub rmw_count: u64,
    /// Bytes they moved: band read + band write + log blocks read.
    pub rmw_bytes: u64,
    /// Of `rmw_count`, those started by idle-time cleaning.
    pub idle_rmw_count: u64,
    /// Log blocks merged into bands by cleaning.
    pub cleaned_blocks: u64,
    pub log_appends: u64,
    pub log_append_bytes: u64,
    /// Bands written whole from the buffer (no RMW).
    pub full_band_writes: u64,
    /// Host read bytes served from the RAM buffer / the log / the bands.
    pub read_buffer_bytes: u64,
    pub read_log_bytes: u64,
    pub read_band_bytes: u64,
}

/// A buffered piece of a host write (never crosses a band).
#[derive(Clone, Copy, Debug)]
struct BufEntry {
    /// Host write sequence number (for flush barriers).
    seq: u64,
    band: u64,
    first: u64,
    n: u64,
    /// The background operation writing it out, if any.
    batch: Option<u64>,
}

/// A run of log positions written by one append.
#[derive(Debug)]
struct Extent {
    start: u64,
    /// The block at each position.
    blocks: Vec<u64>,
    live: u64,
    in_flight: bool,
}

#[derive(Debug)]
enum Bg {
    Append {
        batch: u64,
        extent: u64,
        parts: u32,
    },
    BandWrite {
        batch: u64,
        band: u64,
    },
    Clean {
        band: u64,
        /// (block, log position) merged by this RMW.
        blocks: Vec<(u64, u64)>,
        reads: u32,
        writing: bool,
        idle: bool,
    },
}

#[derive(Clone, Copy, Debug)]
enum InnerOp {
    HostRead(u64),
    Background,
}

struct WaitingWrite {
    seq: u64,
    tag: u64,
    arrival_ns: TimeNs,
    first: u64,
    n: u64,
}

/// A drive-managed SMR disk (see the module documentation).
pub struct SswdModel {
    inner: SmrModel,
    band_blocks: u64,
    log_blocks: u64,
    overhead_ns: u64,
    interface_rate: u64,
    ram_buffer_bytes: u64,
    destage_start_bytes: u64,
    max_append_blocks: u64,
    buffer_idle_ns: u64,
    clean_start_blocks: u64,
    idle_clean_ns: u64,
    capacity_bytes: u64,

    now_ns: TimeNs,
    next_seq: u64,
    next_inner_tag: u64,
    next_batch: u64,
    in_flight: usize,
    last_host_ns: TimeNs,
    interface_free_ns: TimeNs,
    inner_ops: HashMap<u64, InnerOp>,
    /// Host reads in progress: seq → (tag, parts left).
    reads: HashMap<u64, (u64, u32)>,
    /// Completions not yet reported: (done, seq, tag).
    pending: BinaryHeap<Reverse<(TimeNs, u64, u64)>>,
    ready: Vec<(TimeNs, u64, u64)>,

    buffer: VecDeque<BufEntry>,
    buffered_bytes: u64,
    /// Buffer entries holding each block.
    buf_count: HashMap<u64, u32>,
    /// Distinct buffered blocks per band.
    band_buffered: HashMap<u64, u64>,
    /// Bands whose every block is buffered.
    full_bands: BTreeSet<u64>,
    waiting: VecDeque<WaitingWrite>,
    /// Flushes: (barrier seq, seq, tag, arrival).
    flushes: Vec<(u64, u64, u64, TimeNs)>,

    head: u64,
    tail: u64,
    extents: VecDeque<Extent>,
    /// Id of `extents[0]`.
    extent_base: u64,
    /// Newest on-media log copy of each block: (position, extent id).
    log_map: HashMap<u64, (u64, u64)>,
    /// Live log blocks per band.
    band_log: HashMap<u64, BTreeSet<u64>>,
    bg: Option<Bg>,
    counters: SswdCounters,
    scratch: Vec<Completion>,
}

impl SswdModel {
    pub fn new(params: &SswdParams, seed: u64) -> Result<Self, ParamError> {
        params.validate()?;
        let smr = params.smr();
        Ok(SswdModel {
            inner: SmrModel::new(&smr, seed)?,
            band_blocks: params.band_bytes / BLOCK,
            log_blocks: params.persistent_cache_bytes / BLOCK,
            overhead_ns: params.disk.command_overhead_ns,
            interface_rate: params.disk.interface_rate_bytes_per_s,
            ram_buffer_bytes: params.ram_buffer_bytes,
            destage_start_bytes: (params.ram_buffer_bytes as f64 * params.destage_start_pct / 100.0)
                .round() as u64,
            max_append_blocks: params.max_append_bytes / BLOCK,
            buffer_idle_ns: params.buffer_idle_ns,
            clean_start_blocks: ((params.persistent_cache_bytes / BLOCK) as f64
                * params.clean_start_pct
                / 100.0)
                .round() as u64,
            idle_clean_ns: params.idle_clean_ns,
            capacity_bytes: params.capacity_bytes(),
            now_ns: 0,
            next_seq: 0,
            next_inner_tag: 0,
            next_batch: 0,
            in_flight: 0,
            last_host_ns: 0,
            interface_free_ns: 0,
            inner_ops: HashMap::new(),
            reads: HashMap::new(),
            pending: BinaryHeap::new(),
            ready: Vec::new(),
            buffer: VecDeque::new(),
            buffered_bytes: 0,
            buf_count: HashMap::new(),
            band_buffered: HashMap::new(),
            full_bands: BTreeSet::new(),
            waiting: VecDeque::new(),
            flushes: Vec::new(),
            head: 0,
            tail: 0,
            extents: VecDeque::new(),
            extent_base: 0,
            log_map: HashMap::new(),
            band_log: HashMap::new(),
            bg: None,
            counters: SswdCounters::default(),
            scratch: Vec::new(),
        })
    }

    pub fn sswd_counters(&self) -> SswdCounters {
        self.counters
    }

    /// Live blocks in the persistent cache.
    pub fn log_live_blocks(&self) -> u64 {
        self.log_map.len() as u64
    }

    /// Log positions in use (head to tail), blocks.
    pub fn log_used_blocks(&self) -> u64 {
        self.tail - self.head
    }

    pub fn buffered_bytes(&self) -> u64 {
        self.buffered_bytes
    }

    /// The SMR disk underneath (its RMW counter must stay 0: the drive
    /// only ever writes whole bands to it).
    pub fn smr(&self) -> &SmrModel {
        &self.inner
    }

    fn band_of(&self, block: u64) -> u64 {
        block / self.band_blocks
    }

    /// LBA of the SMR disk for a log position / a host block.
    fn log_lba(&self, pos: u64) -> u64 {
        (pos % self.log_blocks) * BLOCK
    }

    fn band_lba(&self, block: u64) -> u64 {
        self.log_blocks * BLOCK + block * BLOCK
    }

    fn inner_submit(&mut self, t: TimeNs, op: Op, lba: u64, blocks: u64, what: InnerOp) {
        let tag = self.next_inner_tag;
        self.next_inner_tag += 1;
        self.inner_ops.insert(tag, what);
        self.inner.submit(
            t,
            DeviceIo {
                tag,
                op,
                offset_bytes: lba,
                size_bytes: (blocks * BLOCK) as u32,
            },
        );
    }

    fn transfer_ns(&self, bytes: u64) -> u64 {
        (bytes * crate::check::NS_PER_S).div_ceil(self.interface_rate)
    }

    /// Accepts waiting writes into the buffer while they fit.
    fn admit(&mut self, t: TimeNs) {
        while let Some(w) = self.waiting.front() {
            let bytes = w.n * BLOCK;
            if self.buffered_bytes + bytes > self.ram_buffer_bytes && self.buffered_bytes > 0 {
                break;
            }
            let w = self.waiting.pop_front().unwrap();
            let start = t
                .max(w.arrival_ns + self.overhead_ns)
                .max(self.interface_free_ns);
            let done = start + self.transfer_ns(bytes);
            self.interface_free_ns = done;
            self.pending.push(Reverse((done, w.seq, w.tag)));
            // One entry per band touched.
            let mut b = w.first;
            let end = w.first + w.n;
            while b < end {
                let band = self.band_of(b);
                let e = end.min((band + 1) * self.band_blocks);
                self.buffer.push_back(BufEntry {
                    seq: w.seq,
                    band,
                    first: b,
                    n: e - b,
                    batch: None,
                });
                for block in b..e {
                    let c = self.buf_count.entry(block).or_insert(0);
                    *c += 1;
                    if *c == 1 {
                        let k = self.band_buffered.entry(band).or_insert(0);
                        *k += 1;
                        if *k == self.band_blocks {
                            self.full_bands.insert(band);
                        }
                    }
                }
                b = e;
            }
            self.buffered_bytes += bytes;
        }
    }

    /// Drops the entries of a finished batch from the buffer.
    fn release_batch(&mut self, batch: u64) {
        let mut kept = VecDeque::with_capacity(self.buffer.len());
        for e in std::mem::take(&mut self.buffer) {
            if e.batch != Some(batch) {
                kept.push_back(e);
                continue;
            }
            self.buffered_bytes -= e.n * BLOCK;
            for block in e.first..e.first + e.n {
                let c = self.buf_count.get_mut(&block).unwrap();
                *c -= 1;
                if *c == 0 {
                    self.buf_count.remove(&block);
                    let k = self.band_buffered.get_mut(&e.band).unwrap();
                    *k -= 1;
                    self.full_bands.remove(&e.band);
                    if *k == 0 {
                        self.band_buffered.remove(&e.band);
                    }
                }
            }
        }
        self.buffer = kept;
    }

    /// The block's log copy is obsolete (a newer copy reached the media).
    fn kill(&mut self, block: u64) {
        let Some((_, ext)) = self.log_map.remove(&block) else {
            return;
        };
        let i = (ext - self.extent_base) as usize;
        self.extents[i].live -= 1;
        let band = self.band_of(block);
        if let Some(set) = self.band_log.get_mut(&band) {
            set.remove(&block);
            if set.is_empty() {
                self.band_log.remove(&band);
            }
        }
    }

    /// Reclaims dead extents at the log head.
    fn advance_head(&mut self) {
        while let Some(e) = self.extents.front() {
            if e.in_flight || e.live > 0 {
                break;
            }
            self.head = e.start + e.blocks.len() as u64;
            self.extents.pop_front();
            self.extent_base += 1;
        }
        if self.extents.is_empty() {
            self.head = self.tail;
        }
    }

    fn unbatched_blocks(&self) -> bool {
        self.buffer.iter().any(|e| e.batch.is_none())
    }

    /// When the drive will act on its own (destage or clean after idling),
    /// if nothing else happens first.
    fn deadline(&self) -> Option<TimeNs> {
        if self.bg.is_some() {
            return None;
        }
        if self.buffered_bytes > 0 {
            return Some(self.last_host_ns + self.buffer_idle_ns);
        }
        if self.idle_clean_ns > 0 && !self.log_map.is_empty() {
            return Some(self.last_host_ns + self.idle_clean_ns);
        }
        None
    }

    /// Starts the next background operation, if one is due.
    fn kick(&mut self, t: TimeNs) {
        if self.bg.is_some() {
            return;
        }
        if let Some(&band) = self.full_bands.iter().next() {
            self.start_band_write(t, band);
            return;
        }
        let free = self.log_blocks - (self.tail - self.head);
        let idle_buffer = t >= self.last_host_ns + self.buffer_idle_ns;
        let destage = self.buffered_bytes > 0
            && (self.buffered_bytes >= self.destage_start_bytes
                || !self.waiting.is_empty()
                || !self.flushes.is_empty()
                || idle_buffer)
            && self.unbatched_blocks();
        if destage {
            let want: u64 = self.next_append_blocks();
            if want <= free {
                self.start_append(t);
            } else {
                self.start_clean(t, false);
            }
            return;
        }
        if self.tail - self.head >= self.clean_start_blocks && !self.log_map.is_empty() {
            self.start_clean(t, false);
            return;
        }
        let idle = self.idle_clean_ns > 0
            && self.buffered_bytes == 0
            && t >= self.last_host_ns + self.idle_clean_ns;
        if idle && !self.log_map.is_empty() {
            self.start_clean(t, true);
        }
    }

    /// Blocks the next append would take: whole entries in arrival order up
    /// to `max_append_blocks` (at least one entry).
    fn next_append_blocks(&self) -> u64 {
        let mut n = 0;
        for e in self.buffer.iter().filter(|e| e.batch.is_none()) {
            if n > 0 && n + e.n > self.max_append_blocks {
                break;
            }
            n += e.n;
        }
        n
    }

    fn start_append(&mut self, t: TimeNs) {
        let batch = self.next_batch;
        self.next_batch += 1;
        let mut blocks = Vec::new();
        for e in self.buffer.iter_mut().filter(|e| e.batch.is_none()) {
            if !blocks.is_empty() && blocks.len() as u64 + e.n > self.max_append_blocks {
                break;
            }
            e.batch = Some(batch);
            blocks.extend(e.first..e.first + e.n);
        }
        let start = self.tail;
        let n = blocks.len() as u64;
        self.tail += n;
        let extent = self.extent_base + self.extents.len() as u64;
        self.extents.push_back(Extent {
            start,
            blocks,
            live: 0,
            in_flight: true,
        });
        // The log is circular: an append that reaches its end continues at
        // its start (two writes).
        let first_len = n.min(self.log_blocks - start % self.log_blocks);
        let lba = self.log_lba(start);
        self.inner_submit(t, Op::Write, lba, first_len, InnerOp::Background);
        let mut parts = 1;
        if first_len < n {
            self.inner_submit(t, Op::Write, 0, n - first_len, InnerOp::Background);
            parts += 1;
        }
        self.counters.log_appends += 1;
        self.counters.log_append_bytes += n * BLOCK;
        self.bg = Some(Bg::Append {
            batch,
            extent,
            parts,
        });
    }

    fn start_band_write(&mut self, t: TimeNs, band: u64) {
        let batch = self.next_batch;
        self.next_batch += 1;
        for e in self.buffer.iter_mut() {
            if e.band == band && e.batch.is_none() {
                e.batch = Some(batch);
            }
        }
        let lba = self.band_lba(band * self.band_blocks);
        self.inner_submit(t, Op::Write, lba, self.band_blocks, InnerOp::Background);
        self.counters.full_band_writes += 1;
        self.bg = Some(Bg::BandWrite { batch, band });
    }

    /// FIFO cleaning: the band of the oldest live block in the log.
    fn start_clean(&mut self, t: TimeNs, idle: bool) {
        let Some(band) = self.head_band() else {
            return;
        };
        let mut blocks: Vec<(u64, u64)> = self.band_log[&band]
            .iter()
            .map(|b| (*b, self.log_map[b].0))
            .collect();
        blocks.sort_unstable_by_key(|&(_, pos)| pos);
        // Log reads: runs of consecutive positions (not across the log's
        // wrap), then the whole band.
        let mut reads = 0;
        let mut i = 0;
        while i < blocks.len() {
            let mut j = i + 1;
            while j < blocks.len()
                && blocks[j].1 == blocks[j - 1].1 + 1
                && blocks[j].1 % self.log_blocks != 0
                && ((j - i) as u64) < self.band_blocks
            {
                j += 1;
            }
            let lba = self.log_lba(blocks[i].1);
            self.inner_submit(t, Op::Read, lba, (j - i) as u64, InnerOp::Background);
            self.counters.rmw_bytes += (j - i) as u64 * BLOCK;
            reads += 1;
            i = j;
        }
        let lba = self.band_lba(band * self.band_blocks);
        self.inner_submit(t, Op::Read, lba, self.band_blocks, InnerOp::Background);
        reads += 1;
        self.bg = Some(Bg::Clean {
            band,
            blocks,
            reads,
            writing: false,
            idle,
        });
    }

    fn head_band(&self) -> Option<u64> {
        for e in &self.extents {
            for (i, &block) in e.blocks.iter().enumerate() {
                let pos = e.start + i as u64;
                if self.log_map.get(&block).is_some_and(|&(p, _)| p == pos) {
                    return Some(self.band_of(block));
                }
            }
        }
        None
    }

    fn background_done(&mut self, t: TimeNs) {
        let Some(bg) = self.bg.take() else {
            return;
        };
        match bg {
            Bg::Append {
                batch,
                extent,
                parts,
            } => {
                if parts > 1 {
                    self.bg = Some(Bg::Append {
                        batch,
                        extent,
                        parts: parts - 1,
                    });
                    return;
                }
                let i = (extent - self.extent_base) as usize;
                self.extents[i].in_flight = false;
                let start = self.extents[i].start;
                let blocks = self.extents[i].blocks.clone();
                // In log order, so a block appended twice keeps its later
                // copy (the earlier one dies like any overwritten copy).
                for (k, &block) in blocks.iter().enumerate() {
                    self.kill(block);
                    self.log_map.insert(block, (start + k as u64, extent));
                    self.extents[i].live += 1;
                    self.band_log
                        .entry(block / self.band_blocks)
                        .or_default()
                        .insert(block);
                }
                self.release_batch(batch);
                self.advance_head();
            }
            Bg::BandWrite { batch, band } => {
                let dead: Vec<u64> = self
                    .band_log
                    .get(&band)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default();
                for block in dead {
                    self.kill(block);
                }
                self.release_batch(batch);
                self.advance_head();
            }
            Bg::Clean {
                band,
                blocks,
                reads,
                writing,
                idle,
            } => {
                if !writing && reads > 1 {
                    self.bg = Some(Bg::Clean {
                        band,
                        blocks,
                        reads: reads - 1,
                        writing,
                        idle,
                    });
                    return;
                }
                if !writing {
                    let lba = self.band_lba(band * self.band_blocks);
                    self.inner_submit(t, Op::Write, lba, self.band_blocks, InnerOp::Background);
                    self.bg = Some(Bg::Clean {
                        band,
                        blocks,
                        reads: 0,
                        writing: true,
                        idle,
                    });
                    return;
                }
                // Log copies the band now holds are dead, unless a newer
                // copy reached the log meanwhile (it cannot: one background
                // operation at a time, but checked anyway).
                for &(block, pos) in &blocks {
                    if self.log_map.get(&block).is_some_and(|&(p, _)| p == pos) {
                        self.kill(block);
                    }
                }
                self.counters.rmw_count += 1;
                self.counters.idle_rmw_count += u64::from(idle);
                self.counters.cleaned_blocks += blocks.len() as u64;
                self.counters.rmw_bytes += 2 * self.band_blocks * BLOCK;
                self.advance_head();
            }
        }
        self.admit(t);
        self.release_flushes(t);
    }

    /// Completes flushes whose writes are all on the media.
    fn release_flushes(&mut self, t: TimeNs) {
        if self.flushes.is_empty() {
            return;
        }
        let oldest_buffered = self
            .buffer
            .iter()
            .map(|e| e.seq)
            .chain(self.waiting.iter().map(|w| w.seq))
            .min()
            .unwrap_or(u64::MAX);
        let overhead = self.overhead_ns;
        let pending = &mut self.pending;
        self.flushes.retain(|&(barrier, seq, tag, arrival)| {
            if oldest_buffered > barrier {
                pending.push(Reverse((t.max(arrival + overhead), seq, tag)));
                false
            } else {
                true
            }
        });
    }

    fn inner_done(&mut self, c: Completion) {
        let Some(what) = self.inner_ops.remove(&c.tag) else {
            return;
        };
        match what {
            InnerOp::HostRead(seq) => {
                if let Some(r) = self.reads.get_mut(&seq) {
                    r.1 -= 1;
                    if r.1 == 0 {
                        let tag = r.0;
                        self.reads.remove(&seq);
                        self.ready.push((c.done_ns, seq, tag));
                    }
                }
            }
            InnerOp::Background => self.background_done(c.done_ns),
        }
    }

    /// Processes the disk's events and the drive's own deadlines up to
    /// `now`, one instant at a time.
    fn settle(&mut self, now_ns: TimeNs) {
        loop {
            let inner = self.inner.next_event_ns();
            let deadline = self.deadline();
            let t = match (inner, deadline) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if t > now_ns {
                break;
            }
            if inner == Some(t) {
                let mut buffer = std::mem::take(&mut self.scratch);
                buffer.clear();
                self.inner.advance(t, &mut buffer);
                for c in buffer.drain(..) {
                    self.inner_done(c);
                }
                self.scratch = buffer;
            }
            self.kick(t);
        }
    }

    fn read(&mut self, t: TimeNs, seq: u64, tag: u64, first: u64, n: u64) {
        // Runs of blocks with the same source: (kind, start LBA, blocks);
        // kind 0 = buffer, 1 = log, 2 = band.
        let mut runs: Vec<(u8, u64, u64)> = Vec::new();
        for block in first..first + n {
            let (kind, lba) = if self.buf_count.contains_key(&block) {
                (0, 0)
            } else if let Some(&(pos, _)) = self.log_map.get(&block) {
                (1, self.log_lba(pos))
            } else {
                (2, self.band_lba(block))
            };
            match runs.last_mut() {
                Some(r) if r.0 == kind && (kind == 0 || r.1 + r.2 * BLOCK == lba) => r.2 += 1,
                _ => runs.push((kind, lba, 1)),
            }
        }
        let mut parts = 0;
        let mut buffer_done = None;
        for &(kind, lba, blocks) in &runs {
            match kind {
                0 => {
                    self.counters.read_buffer_bytes += blocks * BLOCK;
                    let done = t + self.overhead_ns + self.transfer_ns(blocks * BLOCK);
                    buffer_done = Some(buffer_done.unwrap_or(0).max(done));
                }
                1 | 2 => {
                    if kind == 1 {
                        self.counters.read_log_bytes += blocks * BLOCK;
                    } else {
                        self.counters.read_band_bytes += blocks * BLOCK;
                    }
                    parts += 1;
                    self.inner_submit(t, Op::Read, lba, blocks, InnerOp::HostRead(seq));
                }
                _ => unreachable!(),
            }
        }
        match (parts, buffer_done) {
            (0, Some(done)) => self.pending.push(Reverse((done, seq, tag))),
            (0, None) => self.pending.push(Reverse((t + self.overhead_ns, seq, tag))),
            _ => {
                // Buffered pieces are ready long before the media pieces.
                self.reads.insert(seq, (tag, parts));
            }
        }
    }
}

/// The names of the counters this model reports (`DeviceModel::counters`):
/// experiments look values up by these constants, so a renamed counter is a
/// compile error, not a silent "-".
pub mod counter {
    pub const RMW_COUNT: &str = "rmw_count";
    pub const RMW_BYTES: &str = "rmw_bytes";
    pub const BYTES_PER_RMW: &str = "bytes_per_rmw";
    pub const IDLE_RMW_COUNT: &str = "idle_rmw_count";
    pub const CLEANED_BLOCKS: &str = "cleaned_blocks";
    pub const LOG_APPENDS: &str = "log_appends";
    pub const LOG_APPEND_BYTES: &str = "log_append_bytes";
    pub const FULL_BAND_WRITES: &str = "full_band_writes";
    pub const READ_BUFFER_BYTES: &str = "read_buffer_bytes";
    pub const READ_LOG_BYTES: &str = "read_log_bytes";
    pub const READ_BAND_BYTES: &str = "read_band_bytes";
    pub const LOG_LIVE_BYTES: &str = "log_live_bytes";
    pub const LOG_USED_BYTES: &str = "log_used_bytes";
    pub const SMR_RMW_COUNT: &str = "smr_rmw_count";

    /// Every name above, in the order `counters()` reports them.
    pub const ALL: &[&str] = &[
        RMW_COUNT,
        RMW_BYTES,
        BYTES_PER_RMW,
        IDLE_RMW_COUNT,
        CLEANED_BLOCKS,
        LOG_APPENDS,
        LOG_APPEND_BYTES,
        FULL_BAND_WRITES,
        READ_BUFFER_BYTES,
        READ_LOG_BYTES,
        READ_BAND_BYTES,
        LOG_LIVE_BYTES,
        LOG_USED_BYTES,
        SMR_RMW_COUNT,
    ];
}

impl DeviceModel for SswdModel {
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        self.last_host_ns = now_ns;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight += 1;
        let end = io.end_bytes().min(self.capacity_bytes);
        let first = io.offset_bytes.min(end) / BLOCK;
        let n = end.div_ceil(BLOCK).saturating_sub(first);
        match io.op {
            Op::Trim => self
                .pending
                .push(Reverse((now_ns + self.overhead_ns, seq, io.tag))),
            Op::Flush => {
                self.flushes.push((seq, seq, io.tag, now_ns));
                self.release_flushes(now_ns);
            }
            _ if n == 0 => self
                .pending
                .push(Reverse((now_ns + self.overhead_ns, seq, io.tag))),
            Op::Read => self.read(now_ns, seq, io.tag, first, n),
            Op::Write => {
                self.waiting.push_back(WaitingWrite {
                    seq,
                    tag: io.tag,
                    arrival_ns: now_ns,
                    first,
                    n,
                });
                self.admit(now_ns);
            }
        }
        self.kick(now_ns);
    }

    fn next_event_ns(&self) -> Option<TimeNs> {
        [
            self.ready.iter().map(|r| r.0).min(),
            self.pending.peek().map(|Reverse(p)| p.0),
            self.inner.next_event_ns(),
            self.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        while let Some(Reverse(p)) = self.pending.peek().copied() {
            if p.0 > now_ns {
                break;
            }
            self.pending.pop();
            self.ready.push(p);
        }
        self.in_flight -= self.ready.len();
        self.ready.sort_unstable();
        done.extend(
            self.ready
                .drain(..)
                .map(|(done_ns, _, tag)| Completion { tag, done_ns }),
        );
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn state(&self) -> DeviceState {
        match (self.inner.state(), &self.bg) {
            (DeviceState::Idle, _) => DeviceState::Idle,
            (_, Some(Bg::Clean { .. })) => DeviceState::Gc,
            (s, _) => s,
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let c = self.counters;
        let per_rmw = if c.rmw_count == 0 {
            0.0
        } else {
            c.rmw_bytes as f64 / c.rmw_count as f64
        };
        vec![
            (counter::RMW_COUNT, c.rmw_count as f64),
            (counter::RMW_BYTES, c.rmw_bytes as f64),
            (counter::BYTES_PER_RMW, per_rmw),
            (counter::IDLE_RMW_COUNT, c.idle_rmw_count as f64),
            (counter::CLEANED_BLOCKS, c.cleaned_blocks as f64),
            (counter::LOG_APPENDS, c.log_appends as f64),
            (counter::LOG_APPEND_BYTES, c.log_append_bytes as f64),
            (counter::FULL_BAND_WRITES, c.full_band_writes as f64),
            (counter::READ_BUFFER_BYTES, c.read_buffer_bytes as f64),
            (counter::READ_LOG_BYTES, c.read_log_bytes as f64),
            (counter::READ_BAND_BYTES, c.read_band_bytes as f64),
            (
                counter::LOG_LIVE_BYTES,
                (self.log_map.len() as u64 * BLOCK) as f64,
            ),
            (
                counter::LOG_USED_BYTES,
                ((self.tail - self.head) * BLOCK) as f64,
            ),
            (
                counter::SMR_RMW_COUNT,
                self.inner.smr_counters().rmw_count as f64,
            ),
        ]
    }
}
