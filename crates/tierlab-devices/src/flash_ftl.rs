//! The page-level FTL of the detailed flash SSD (`flash_ssd.rs`): mapping,
//! block bookkeeping, greedy garbage collection and analytic
//! preconditioning. No time here: the SSD model decides *when* the flash
//! operations this module asks for happen.
//!
//! Mapping unit: one 4 KiB *slot* (a logical page number, LPN, addresses
//! 4 KiB of host space). A flash page holds `slots_per_page` slots; the
//! FTL's erase unit is a *superblock*: one block of every plane of a die,
//! programmed a *unit* (one page per plane) at a time and erased together
//! (multi-plane operations).
//!
//! Memory. A dense L2P array for a 1 TB device is 244 M entries (1 GiB at
//! 4 bytes each) and its reverse map as much again. This FTL keeps instead:
//! - per superblock: valid / cold / written slot counts, erase count, a
//!   bucket link for greedy victim selection, and the list of explicitly
//!   mapped slots written into it (freed when the block is erased);
//! - an explicit L2P hash map only for LPNs the run has written or trimmed;
//! - every other LPN is *cold*: it holds data written before the run
//!   (preconditioning), and only the per-block counts of cold slots are
//!   kept, in a Fenwick tree. Where a cold LPN lives is a deterministic draw
//!   over those counts (by rank for a sequential fill; by a hash of the LPN
//!   after random aging, when placement is exchangeable). Writing or
//!   trimming a cold LPN takes one cold slot out of the block drawn.
//!
//! So memory is O(superblocks + LPNs written during the run), and
//! preconditioning is O(superblocks): no per-page loop, whatever the
//! capacity.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use tierlab_core::ParamError;

use serde::{Deserialize, Serialize};

/// Bytes one mapping entry addresses.
pub const SLOT_BYTES: u64 = 4096;

/// The state the device starts in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precondition {
    /// Fresh out of the box: every block erased, nothing mapped. Reads of
    /// unwritten LPNs are answered by the controller without flash access.
    None,
    /// Every LPN written once, sequentially (units striped over the dies
    /// in turn): all blocks full and valid, no garbage yet.
    Fill,
    /// Filled, then aged by uniform random overwrites until greedy GC is in
    /// steady state: the analytic valid-slot profile (docs/flash-ssd.md).
    #[default]
    Steady,
}

/// Shape of the FTL, derived by the SSD model from its parameters.
#[derive(Clone, Debug)]
pub struct FtlConfig {
    pub dies: u32,
    pub blocks_per_die: u32,
    pub slots_per_page: u32,
    /// Slots of one program unit (one page on every plane of a die).
    pub slots_per_unit: u32,
    /// Slots of one superblock (a multiple of `slots_per_unit`).
    pub slots_per_block: u32,
    pub logical_slots: u64,
    pub gc_low_free_blocks: u32,
    pub gc_high_free_blocks: u32,
    pub precondition: Precondition,
}

/// Where an LPN's latest data is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    /// Never written (precondition `none`): no flash access needed.
    Unmapped,
    /// Trimmed: no flash access needed.
    Trimmed,
    /// In the controller's write buffer, as buffer sequence number `seq`.
    Buffered(u64),
    /// On flash: superblock (global index) and a page key; slots with the
    /// same (block, page key) are read by one page read.
    Flash { block: u32, page_key: u64 },
}

/// What one garbage collection asks the die to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcJob {
    pub victim: u32,
    /// Valid slots relocated.
    pub moved_slots: u32,
    /// Page reads to fetch them (expected pages holding valid data).
    pub page_reads: u32,
    /// Program units completed in the GC destination by this job.
    pub unit_programs: u32,
}

/// End-of-run FTL counters (docs/flash-ssd.md defines each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FtlStats {
    /// 4 KiB slots the host wrote into the buffer (coalesced overwrites
    /// of buffered data not counted).
    pub host_slots_buffered: u64,
    /// Slots programmed for the host (padding of partial units included).
    pub host_slots_programmed: u64,
    /// Slots programmed by GC relocation.
    pub gc_slots_programmed: u64,
    pub gc_count: u64,
    /// Valid slots GC relocated.
    pub gc_moved_slots: u64,
    pub gc_page_reads: u64,
    /// Superblock erases (each erases one block per plane).
    pub superblock_erases: u64,
}

const NONE: u32 = u32::MAX;
const FREE: u8 = 0;
const OPEN: u8 = 1;
const CLOSED: u8 = 2;
const ERASING: u8 = 3;

const TAG_SHIFT: u32 = 62;
const TAG_BUF: u64 = 1;
const TAG_TRIM: u64 = 2;
const TRIM_VALUE: u64 = TAG_TRIM << TAG_SHIFT;

/// Fibonacci hashing of u32 keys: one multiply, deterministic (no random
/// state, so runs are reproducible), entropy in the high bits where
/// hashbrown takes its control byte and mixed down for the bucket index.
#[derive(Default)]
pub struct LpnHasher(u64);

impl Hasher for LpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u32(&mut self, n: u32) {
        let h = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

type LpnMap = HashMap<u32, u64, BuildHasherDefault<LpnHasher>>;

/// SplitMix64's finaliser: a good 64-bit mix for hashed cold placement.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The greedy-GC steady state for uniform random writes (Desnoyers 2012,
/// LRU/FIFO model, which greedy approaches as pages per block grow): the
/// valid fraction `a` of the block cleaned solves `a = exp(-alpha (1 - a))`,
/// `alpha` = physical slots in use / logical slots. Write amplification is
/// `1 / (1 - a)`. Returns `a` (bisection: exact to 1e-12).
pub fn steady_victim_valid_fraction(alpha: f64) -> f64 {
    if alpha <= 1.0 {
        return 1.0;
    }
    let g = |a: f64| a - (-alpha * (1.0 - a)).exp();
    // g(0) < 0; g is positive just below 1 when alpha > 1.
    let (mut lo, mut hi) = (0.0f64, 1.0 - 1e-9);
    if g(hi) <= 0.0 {
        return hi;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if g(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-13 {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// Analytic write amplification of greedy GC under uniform random writes
/// at spare factor `alpha` (physical / logical): `1 / (1 - a)`.
pub fn analytic_write_amplification(alpha: f64) -> f64 {
    1.0 / (1.0 - steady_victim_valid_fraction(alpha))
}

pub struct Ftl {
    cfg: FtlConfig,
    map: LpnMap,
    valid: Vec<u32>,
    cold: Vec<u32>,
    written: Vec<u32>,
    erases: Vec<u32>,
    state: Vec<u8>,
    /// Explicitly mapped slots written into each block: (lpn, slot).
    explicit: Vec<Vec<(u32, u32)>>,
    /// Greedy buckets: closed blocks by valid count, intrusive lists.
    next: Vec<u32>,
    prev: Vec<u32>,
    heads: Vec<u32>,
    min_bucket: Vec<u32>,
    /// Fenwick tree of cold slots per block (1-based).
    fenwick: Vec<u64>,
    fenwick_top: usize,
    cold_total: u64,
    /// Per die: free superblocks (FIFO: the longest-erased first, a simple
    /// wear leveller), open host and GC blocks, GC slots written so far.
    free: Vec<VecDeque<u32>>,
    host_open: Vec<u32>,
    gc_open: Vec<u32>,
    gc_slots_total: Vec<u64>,
    /// Cold slots each die got in a sequential fill, as prefix sums (rank
    /// of a cold LPN = slots of earlier dies + position in its die).
    fill_die_prefix: Vec<u64>,
    pub stats: FtlStats,
    /// Superblocks whose counts preconditioning set (its whole work).
    pub precondition_blocks: u64,
}

impl Ftl {
    /// Builds the FTL in its preconditioned state, or says why the shape
    /// cannot hold the logical space.
    pub fn new(cfg: FtlConfig) -> Result<Ftl, ParamError> {
        let blocks = cfg.dies as usize * cfg.blocks_per_die as usize;
        let s = cfg.slots_per_block;
        let buckets = s as usize + 1;
        let mut top = 1;
        while top * 2 <= blocks {
            top *= 2;
        }
        let mut ftl = Ftl {
            map: LpnMap::default(),
            valid: vec![0; blocks],
            cold: vec![0; blocks],
            written: vec![0; blocks],
            erases: vec![0; blocks],
            state: vec![FREE; blocks],
            explicit: (0..blocks).map(|_| Vec::new()).collect(),
            next: vec![NONE; blocks],
            prev: vec![NONE; blocks],
            heads: vec![NONE; cfg.dies as usize * buckets],
            min_bucket: vec![s + 1; cfg.dies as usize],
            fenwick: vec![0; blocks + 1],
            fenwick_top: top,
            cold_total: 0,
            free: vec![VecDeque::new(); cfg.dies as usize],
            host_open: vec![NONE; cfg.dies as usize],
            gc_open: vec![NONE; cfg.dies as usize],
            gc_slots_total: vec![0; cfg.dies as usize],
            fill_die_prefix: vec![0; cfg.dies as usize + 1],
            stats: FtlStats::default(),
            precondition_blocks: 0,
            cfg,
        };
        ftl.precondition()?;
        Ok(ftl)
    }

    pub fn config(&self) -> &FtlConfig {
        &self.cfg
    }

    fn fill_slots_of_die(&self, die: u32) -> u64 {
        fill_slots_of_die(&self.cfg, die)
    }

    /// Checks that the spare space can hold the GC watermarks with room to
    /// clean (without building anything): the closed superblocks of a die
    /// (all but `gc_high_free_blocks`) must hold 2 % more than its logical
    /// data, whatever the preconditioning (a run can fill the device).
    pub fn check_shape(cfg: &FtlConfig) -> Result<(), ParamError> {
        // Die 0 gets the most logical slots.
        steady_profile(
            fill_slots_of_die(cfg, 0),
            cfg.blocks_per_die,
            cfg.gc_high_free_blocks,
            cfg.slots_per_block as u64,
            false,
        )
        .map(|_| ())
    }

    fn precondition(&mut self) -> Result<(), ParamError> {
        let dies = self.cfg.dies;
        let bpd = self.cfg.blocks_per_die;
        let s = self.cfg.slots_per_block as u64;
        let high = self.cfg.gc_high_free_blocks;
        for d in 0..dies {
            let per_die = self.fill_slots_of_die(d);
            self.fill_die_prefix[d as usize + 1] = self.fill_die_prefix[d as usize] + per_die;
            let base = d * bpd;
            match self.cfg.precondition {
                Precondition::None => {
                    for b in 0..bpd {
                        self.free[d as usize].push_back(base + b);
                    }
                }
                Precondition::Fill => {
                    let used = per_die.div_ceil(s) as u32;
                    if used + high + 1 > bpd {
                        return Err(ParamError::new(
                            "over_provisioning_percent",
                            format!(
                                "a logical space that needs {used} of the {bpd} superblocks \
                                 per die"
                            ),
                            format!(
                                "at least `gc_high_free_blocks` + 1 = {} free superblocks per \
                                 die (raise `over_provisioning_percent` or lower the watermarks)",
                                high + 1
                            ),
                        ));
                    }
                    let mut left = per_die;
                    for b in 0..bpd {
                        let g = base + b;
                        if left > 0 {
                            let v = left.min(s) as u32;
                            left -= v as u64;
                            self.set_cold_block(g, v);
                        } else {
                            self.free[d as usize].push_back(g);
                        }
                    }
                }
                Precondition::Steady => {
                    let profile = steady_profile(per_die, bpd, high, s, true)?;
                    for b in 0..bpd {
                        let g = base + b;
                        match profile.get(b as usize) {
                            Some(&v) => self.set_cold_block(g, v),
                            None => self.free[d as usize].push_back(g),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A full (closed) block holding `v` cold slots.
    fn set_cold_block(&mut self, g: u32, v: u32) {
        self.precondition_blocks += 1;
        self.written[g as usize] = self.cfg.slots_per_block;
        self.valid[g as usize] = v;
        self.cold[g as usize] = v;
        self.fenwick_add(g as usize, v as i64);
        self.state[g as usize] = CLOSED;
        self.bucket_insert(g);
    }

    // ---- Fenwick tree of cold slots ----

    fn fenwick_add(&mut self, i: usize, delta: i64) {
        self.cold_total = (self.cold_total as i64 + delta) as u64;
        let mut k = i + 1;
        while k < self.fenwick.len() {
            self.fenwick[k] = (self.fenwick[k] as i64 + delta) as u64;
            k += k & k.wrapping_neg();
        }
    }

    /// The block holding cold rank `r` (< cold_total) and the rank's
    /// offset inside that block.
    fn fenwick_find(&self, mut r: u64) -> (usize, u64) {
        let mut pos = 0;
        let mut step = self.fenwick_top;
        let n = self.fenwick.len() - 1;
        while step > 0 {
            if pos + step <= n && self.fenwick[pos + step] <= r {
                pos += step;
                r -= self.fenwick[pos];
            }
            step >>= 1;
        }
        (pos, r)
    }

    /// Where cold LPN `lpn` lives: a block drawn over the cold counts and
    /// a page key (the rank's page for a fill, unique per LPN otherwise).
    fn cold_location(&self, lpn: u32) -> (u32, u64) {
        debug_assert!(self.cold_total > 0, "a cold LPN with no cold slot left");
        let total = self.cold_total;
        let (rank, by_rank) = match self.cfg.precondition {
            Precondition::Fill => {
                let unit = self.cfg.slots_per_unit as u64;
                let dies = self.cfg.dies as u64;
                let x = lpn as u64;
                let k = x / unit;
                let die = (k % dies) as usize;
                let pos = (k / dies) * unit + x % unit;
                let rank = self.fill_die_prefix[die] + pos;
                // Exact while nothing left the cold pool; afterwards the
                // ranks are spread over what is left.
                let logical = self.cfg.logical_slots;
                let r = if total == logical {
                    rank
                } else {
                    (rank as u128 * total as u128 / logical as u128) as u64
                };
                (r, true)
            }
            _ => {
                // Not seeded: identical SSDs with identical histories have
                // identical layouts (mirror members, a single SSD and its
                // mirrored twin compare fairly).
                let h = mix64(lpn as u64);
                (((h as u128 * total as u128) >> 64) as u64, false)
            }
        };
        let (block, offset) = self.fenwick_find(rank.min(total - 1));
        let page_key = if by_rank {
            offset / self.cfg.slots_per_page as u64
        } else {
            (1 << 63) | lpn as u64
        };
        (block as u32, page_key)
    }

    // ---- greedy buckets ----

    fn bucket_head(&self, die: u32, v: u32) -> usize {
        die as usize * (self.cfg.slots_per_block as usize + 1) + v as usize
    }

    fn die_of(&self, g: u32) -> u32 {
        g / self.cfg.blocks_per_die
    }

    fn bucket_insert(&mut self, g: u32) {
        let die = self.die_of(g);
        let v = self.valid[g as usize];
        let h = self.bucket_head(die, v);
        let old = self.heads[h];
        self.next[g as usize] = old;
        self.prev[g as usize] = NONE;
        if old != NONE {
            self.prev[old as usize] = g;
        }
        self.heads[h] = g;
        if v < self.min_bucket[die as usize] {
            self.min_bucket[die as usize] = v;
        }
    }

    fn bucket_remove(&mut self, g: u32) {
        let die = self.die_of(g);
        let v = self.valid[g as usize];
        let (p, n) = (self.prev[g as usize], self.next[g as usize]);
        if p != NONE {
            self.next[p as usize] = n;
        } else {
            let h = self.bucket_head(die, v);
            self.heads[h] = n;
        }
        if n != NONE {
            self.prev[n as usize] = p;
        }
        self.next[g as usize] = NONE;
        self.prev[g as usize] = NONE;
    }

    /// One slot of block `g` stops being valid.
    fn invalidate(&mut self, g: u32) {
        let closed = self.state[g as usize] == CLOSED;
        if closed {
            self.bucket_remove(g);
        }
        debug_assert!(self.valid[g as usize] > 0);
        self.valid[g as usize] -= 1;
        if closed {
            self.bucket_insert(g);
        }
    }

    fn close(&mut self, g: u32) {
        self.state[g as usize] = CLOSED;
        self.bucket_insert(g);
    }

    // ---- mapping ----

    /// Where LPN `lpn`'s data is now.
    pub fn lookup(&self, lpn: u32) -> Loc {
        match self.map.get(&lpn) {
            Some(&v) => decode(v, self.cfg.slots_per_page),
            // Beyond the logical space, or nothing cold is left: no data.
            None if self.cfg.precondition == Precondition::None
                || lpn as u64 >= self.cfg.logical_slots
                || self.cold_total == 0 =>
            {
                Loc::Unmapped
            }
            None => {
                let (block, page_key) = self.cold_location(lpn);
                Loc::Flash { block, page_key }
            }
        }
    }

    /// The buffer sequence number holding `lpn`'s latest data, if buffered.
    pub fn buffered_seq(&self, lpn: u32) -> Option<u64> {
        match self.map.get(&lpn) {
            Some(&v) if v >> TAG_SHIFT == TAG_BUF => Some(v & ((1 << TAG_SHIFT) - 1)),
            _ => None,
        }
    }

    /// Drops whatever `lpn` held (its slot becomes garbage).
    fn invalidate_current(&mut self, lpn: u32) {
        match self.map.get(&lpn) {
            Some(&v) if v >> TAG_SHIFT == 0 => self.invalidate((v >> 32) as u32),
            Some(_) => {}
            None if self.cfg.precondition != Precondition::None
                && (lpn as u64) < self.cfg.logical_slots
                && self.cold_total > 0 =>
            {
                let (g, _) = self.cold_location(lpn);
                self.cold[g as usize] -= 1;
                self.fenwick_add(g as usize, -1);
                self.invalidate(g);
            }
            None => {}
        }
    }

    /// The host wrote `lpn`; its new data is buffer entry `seq`.
    pub fn write_to_buffer(&mut self, lpn: u32, seq: u64) {
        self.invalidate_current(lpn);
        self.map.insert(lpn, (TAG_BUF << TAG_SHIFT) | seq);
        self.stats.host_slots_buffered += 1;
    }

    /// The host trimmed `lpn`.
    pub fn trim(&mut self, lpn: u32) {
        self.invalidate_current(lpn);
        if self.cfg.precondition == Precondition::None {
            self.map.remove(&lpn);
        } else {
            // Absent means cold here, so a trimmed LPN needs a marker.
            self.map.insert(lpn, TRIM_VALUE);
        }
    }

    /// Explicit mapping entries (LPNs written or trimmed during the run).
    pub fn map_entries(&self) -> usize {
        self.map.len()
    }

    pub fn free_blocks(&self, die: u32) -> u32 {
        self.free[die as usize].len() as u32
    }

    /// A host unit can be programmed on `die` now: the open block has
    /// room, or a free block can be opened while one stays for GC.
    pub fn can_program(&self, die: u32) -> bool {
        self.host_open[die as usize] != NONE || self.free[die as usize].len() > 1
    }

    fn open_block(&mut self, die: u32) -> u32 {
        let g = self.free[die as usize]
            .pop_front()
            .expect("caller checked for a free block");
        self.state[g as usize] = OPEN;
        self.written[g as usize] = 0;
        g
    }

    /// Programs one host unit on `die`: `entries` are the unit's (buffer
    /// seq, lpn), at most `slots_per_unit` (the rest is padding). Entries
    /// whose LPN was overwritten since are programmed but not valid.
    pub fn program_host_unit(&mut self, die: u32, entries: impl Iterator<Item = (u64, u32)>) {
        let d = die as usize;
        if self.host_open[d] == NONE {
            self.host_open[d] = self.open_block(die);
        }
        let g = self.host_open[d];
        let first = self.written[g as usize];
        for (i, (seq, lpn)) in entries.enumerate() {
            let slot = first + i as u32;
            if self.map.get(&lpn) == Some(&((TAG_BUF << TAG_SHIFT) | seq)) {
                self.map.insert(lpn, ((g as u64) << 32) | slot as u64);
                self.valid[g as usize] += 1;
                self.explicit[g as usize].push((lpn, slot));
            }
        }
        let unit = self.cfg.slots_per_unit;
        self.written[g as usize] = first + unit;
        self.stats.host_slots_programmed += unit as u64;
        if self.written[g as usize] >= self.cfg.slots_per_block {
            self.close(g);
            self.host_open[d] = NONE;
        }
    }

    /// GC should run on `die` (free blocks below the low watermark).
    pub fn gc_wanted(&self, die: u32) -> bool {
        self.free_blocks(die) < self.cfg.gc_low_free_blocks
    }

    /// GC may stop on `die` (free blocks back at the high watermark).
    pub fn gc_satisfied(&self, die: u32) -> bool {
        self.free_blocks(die) >= self.cfg.gc_high_free_blocks
    }

    /// Relocates `lpn` into the next GC slot of `die`, opening a GC block
    /// when needed (the block is closed only after its counts are final,
    /// so it enters the right greedy bucket).
    fn gc_relocate(&mut self, die: u32, lpn: u32) {
        let d = die as usize;
        if self.gc_open[d] == NONE {
            self.gc_open[d] = self.open_block(die);
        }
        let g = self.gc_open[d];
        let slot = self.written[g as usize];
        self.written[g as usize] += 1;
        self.map.insert(lpn, ((g as u64) << 32) | slot as u64);
        self.valid[g as usize] += 1;
        self.explicit[g as usize].push((lpn, slot));
        if self.written[g as usize] >= self.cfg.slots_per_block {
            self.close(g);
            self.gc_open[d] = NONE;
        }
    }

    /// Greedy GC on `die`: the closed block with the fewest valid slots;
    /// its valid data is relocated (mapping updated now; the model spends
    /// the time) and it waits for its erase. `None` when no block would
    /// gain space, or no block is available to relocate into.
    pub fn gc_collect(&mut self, die: u32) -> Option<GcJob> {
        let d = die as usize;
        let s = self.cfg.slots_per_block;
        let mut v = self.min_bucket[d];
        while v < s && self.heads[self.bucket_head(die, v)] == NONE {
            v += 1;
        }
        self.min_bucket[d] = v;
        if v >= s {
            return None;
        }
        let room = match self.gc_open[d] {
            NONE => 0,
            g => s - self.written[g as usize],
        };
        if v > room && self.free[d].is_empty() {
            return None;
        }
        let victim = self.heads[self.bucket_head(die, v)];
        self.bucket_remove(victim);
        self.state[victim as usize] = ERASING;
        let before_units = self.gc_slots_total[d] / self.cfg.slots_per_unit as u64;
        // Explicit valid slots first, then the cold ones as a count.
        let entries = std::mem::take(&mut self.explicit[victim as usize]);
        let mut moved = 0u32;
        for &(lpn, slot) in &entries {
            let here = ((victim as u64) << 32) | slot as u64;
            if self.map.get(&lpn) == Some(&here) {
                self.gc_relocate(die, lpn);
                moved += 1;
            }
        }
        drop(entries);
        let mut cold_left = self.cold[victim as usize];
        if cold_left > 0 {
            self.fenwick_add(victim as usize, -(cold_left as i64));
            self.cold[victim as usize] = 0;
        }
        while cold_left > 0 {
            if self.gc_open[d] == NONE {
                self.gc_open[d] = self.open_block(die);
            }
            let g = self.gc_open[d];
            let k = cold_left.min(s - self.written[g as usize]);
            self.written[g as usize] += k;
            self.valid[g as usize] += k;
            self.cold[g as usize] += k;
            self.fenwick_add(g as usize, k as i64);
            cold_left -= k;
            moved += k;
            if self.written[g as usize] >= s {
                self.close(g);
                self.gc_open[d] = NONE;
            }
        }
        debug_assert_eq!(moved, self.valid[victim as usize], "valid count drifted");
        self.valid[victim as usize] = 0;
        self.gc_slots_total[d] += moved as u64;
        let after_units = self.gc_slots_total[d] / self.cfg.slots_per_unit as u64;
        let unit_programs = (after_units - before_units) as u32;
        // Valid slots spread uniformly over the pages (random
        // invalidation): expected pages holding at least one.
        let pages = s / self.cfg.slots_per_page;
        let f = moved as f64 / s as f64;
        let expected = pages as f64 * (1.0 - (1.0 - f).powi(self.cfg.slots_per_page as i32));
        let page_reads = (expected.ceil() as u32).min(moved);
        self.stats.gc_count += 1;
        self.stats.gc_moved_slots += moved as u64;
        self.stats.gc_slots_programmed += unit_programs as u64 * self.cfg.slots_per_unit as u64;
        self.stats.gc_page_reads += page_reads as u64;
        Some(GcJob {
            victim,
            moved_slots: moved,
            page_reads,
            unit_programs,
        })
    }

    /// The victim's erase finished: it is free again.
    pub fn gc_erased(&mut self, victim: u32) {
        debug_assert_eq!(self.state[victim as usize], ERASING);
        self.state[victim as usize] = FREE;
        self.written[victim as usize] = 0;
        self.erases[victim as usize] += 1;
        self.explicit[victim as usize] = Vec::new();
        self.stats.superblock_erases += 1;
        let die = self.die_of(victim);
        self.free[die as usize].push_back(victim);
    }

    /// Superblocks on `die` that are closed (hold data), for tests.
    pub fn closed_blocks(&self, die: u32) -> u32 {
        let base = die * self.cfg.blocks_per_die;
        (base..base + self.cfg.blocks_per_die)
            .filter(|&g| self.state[g as usize] == CLOSED)
            .count() as u32
    }

    /// Valid slots over all blocks (logical data on flash), for tests.
    pub fn valid_slots(&self) -> u64 {
        self.valid.iter().map(|&v| v as u64).sum()
    }

    pub fn max_erase_count(&self) -> u32 {
        self.erases.iter().copied().max().unwrap_or(0)
    }

    pub fn mean_erase_count(&self) -> f64 {
        self.erases.iter().map(|&e| e as u64).sum::<u64>() as f64 / self.erases.len() as f64
    }

    /// Bytes of the FTL's own structures, approximately (for docs/tests).
    pub fn approx_heap_bytes(&self) -> usize {
        let blocks = self.valid.len();
        let per_block = 4 * 4 + 1 + 4 * 2 + 8 + std::mem::size_of::<Vec<(u32, u32)>>();
        let lists: usize = self.explicit.iter().map(|l| l.capacity() * 8).sum();
        blocks * per_block + lists + self.map.capacity() * 13 + self.heads.len() * 4
    }
}

/// Logical slots die `die` holds in a sequential fill (units striped over
/// the dies in turn).
fn fill_slots_of_die(cfg: &FtlConfig, die: u32) -> u64 {
    let unit = cfg.slots_per_unit as u64;
    let round = unit * cfg.dies as u64;
    let full = cfg.logical_slots / round;
    let rest = cfg.logical_slots % round;
    full * unit + rest.saturating_sub(die as u64 * unit).min(unit)
}

fn decode(v: u64, slots_per_page: u32) -> Loc {
    match v >> TAG_SHIFT {
        0 => {
            let block = (v >> 32) as u32;
            let slot = v as u32;
            Loc::Flash {
                block,
                page_key: (slot / slots_per_page) as u64,
            }
        }
        TAG_BUF => Loc::Buffered(v & ((1 << TAG_SHIFT) - 1)),
        _ => Loc::Trimmed,
    }
}

/// Valid slots of the `bpd - high` closed superblocks of one die in the
/// greedy steady state, newest first: block k (of M) holds
/// `S exp(-c (k + 1/2) / M)` with `c = alpha (1 - a)`, `alpha = M S / U`
/// and `a` the victim's valid fraction, then rounded so that the sum is
/// exactly `U` (every logical slot of the die valid exactly once).
fn steady_profile(
    u: u64,
    bpd: u32,
    high: u32,
    s: u64,
    build: bool,
) -> Result<Vec<u32>, ParamError> {
    let m = bpd.saturating_sub(high) as u64;
    let alpha = (m * s) as f64 / u.max(1) as f64;
    // Below ~2 % spare the steady state is a write amplification in the
    // hundreds and GC can wedge on rounding: refuse such shapes.
    if u > 0 && alpha < 1.02 {
        return Err(ParamError::new(
            "over_provisioning_percent",
            format!(
                "a spare factor of {alpha:.4} ({u} logical slots of 4 KiB per die in {} slots \
                 of closed superblocks: blocks per die − `gc_high_free_blocks` = {m})",
                m * s
            ),
            "a spare factor of at least 1.02: the closed superblocks hold 2 % more than the \
             die's logical data (raise `over_provisioning_percent` or lower \
             `gc_high_free_blocks`)",
        ));
    }
    if u == 0 || !build {
        return Ok(Vec::new());
    }
    let a = steady_victim_valid_fraction(alpha);
    let c = alpha * (1.0 - a);
    let mut out: Vec<u32> = (0..m)
        .map(|k| {
            let f = (-c * (k as f64 + 0.5) / m as f64).exp();
            ((s as f64 * f).round() as u64).min(s) as u32
        })
        .collect();
    // Fix the rounding so the die holds exactly `u` valid slots.
    let mut sum: i64 = out.iter().map(|&v| v as i64).sum();
    let target = u as i64;
    let mut k = 0usize;
    let mut guard = 0u64;
    while sum != target && guard < 4 * m * s {
        let i = k % out.len();
        if sum < target && (out[i] as u64) < s {
            out[i] += 1;
            sum += 1;
        } else if sum > target && out[i] > 0 {
            out[i] -= 1;
            sum -= 1;
        }
        k += 1;
        guard += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(precondition: Precondition, logical_slots: u64) -> FtlConfig {
        FtlConfig {
            dies: 2,
            blocks_per_die: 64,
            slots_per_page: 4,
            slots_per_unit: 8,
            slots_per_block: 256,
            logical_slots,
            gc_low_free_blocks: 2,
            gc_high_free_blocks: 4,
            precondition,
        }
    }

    #[test]
    fn analytic_fraction_solves_its_equation() {
        for alpha in [1.05, 1.1, 1.28, 1.5, 2.0] {
            let a = steady_victim_valid_fraction(alpha);
            assert!((a - (-alpha * (1.0 - a)).exp()).abs() < 1e-9, "{alpha}");
            assert!(a > 0.0 && a < 1.0);
        }
        // Known point: alpha = 2 gives a = 0.2032 (W-function solution).
        assert!((steady_victim_valid_fraction(2.0) - 0.20319).abs() < 1e-4);
    }

    #[test]
    fn steady_precondition_holds_every_logical_slot_once() {
        let logical = 2 * 50 * 256; // ~ 50 of 64 blocks per die
        let ftl = Ftl::new(cfg(Precondition::Steady, logical)).unwrap();
        assert_eq!(ftl.valid_slots(), logical);
        assert_eq!(ftl.cold_total, logical);
        assert_eq!(ftl.free_blocks(0), 4);
        assert_eq!(ftl.precondition_blocks, 2 * 60);
    }

    #[test]
    fn fill_maps_sequential_lpns_to_pages_in_order() {
        let ftl = Ftl::new(cfg(Precondition::Fill, 2 * 40 * 256)).unwrap();
        // Unit 0 (LPNs 0..8) on die 0 block 0, unit 1 on die 1 block 64.
        let Loc::Flash { block, page_key } = ftl.lookup(5) else {
            panic!()
        };
        assert_eq!((block, page_key), (0, 1));
        let Loc::Flash { block, .. } = ftl.lookup(8) else {
            panic!()
        };
        assert_eq!(block, 64);
    }

    #[test]
    fn write_and_trim_keep_the_counts_consistent() {
        let logical = 2 * 50 * 256;
        let mut ftl = Ftl::new(cfg(Precondition::Steady, logical)).unwrap();
        for (i, lpn) in [3u32, 17, 3, 999].iter().enumerate() {
            ftl.write_to_buffer(*lpn, i as u64);
        }
        ftl.trim(5);
        // 3 distinct LPNs left flash for the buffer, 1 was trimmed.
        assert_eq!(ftl.valid_slots(), logical - 4);
        ftl.program_host_unit(0, [(1u64, 17u32), (2, 3), (3, 999), (0, 3)].into_iter());
        // (0, 3) is stale: overwritten by seq 2.
        assert_eq!(ftl.valid_slots(), logical - 1);
        assert_eq!(ftl.lookup(5), Loc::Trimmed);
    }
}
