//! A real RAID: levels 0, 1, 5 and 10 over member backing stores (files,
//! block devices, RAM, or arrays themselves), moving real bytes, with XOR
//! parity for RAID 5.
//!
//! The layout is the simulator's (`tierlab_devices::raid`, docs/raid.md):
//! the same functions place every unit and parity, and RAID 5 picks
//! read-modify-write or reconstruct-write with the same rule
//! (`raid5_write_mode`: the fewer member reads), so a config runs on the
//! model and on real files with the same member IOs per host IO.
//!
//! - **RAID 5 writes** hold their stripe's lock (a table of `LOCKS`
//!   mutexes keyed by the stripe number) from the first read to the last
//!   write, so two writes to different chunks of one stripe never race on
//!   its parity; a host IO over several stripes takes them one at a time.
//!   Data is written before parity. A write of a whole stripe reads
//!   nothing; a partial one reads old data and old parity (read-modify-
//!   write) or the data it leaves alone (reconstruct-write).
//! - **Degraded** (`failed_members`): a failed member is never opened (its
//!   `path` may be absent). RAID 5 reads of its chunks are rebuilt, under
//!   the stripe lock, as the XOR of every survivor; writes to its chunks
//!   update the parity only; with the parity member lost, data is written
//!   as is. RAID 1/10 serve from and write to the surviving copies.
//! - **Mirrors** (RAID 1/10) write each unit-sized piece to every copy
//!   under that unit's lock, so copies stay byte-identical even when two
//!   writes overlap; reads pick a copy by `read_policy`.
//! - **Errors**: a member IO that fails fails the host IO with the member's
//!   index, its backing store, the member offset and the OS's cause. The
//!   array does not drop a member at run time (a run stops on the error;
//!   a half-written stripe's parity may then be stale — no journal, like md
//!   without one).
//!
//! Member IOs of one host IO are done one after the other on the calling
//! IO thread; the executor's IO threads run host IOs in parallel.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tierlab_devices::raid::{
    Raid5Stripe, Raid5WriteMode, RaidLevel, RaidParams, ReadPolicy, UnitRange,
    array_capacity_bytes, raid5_parity_range, raid5_unit_range, raid5_write_mode, rcw_need,
    striped_piece,
};

use tierlab_core::ParamError;
use tierlab_trace::error::join_key;

use crate::backend::Backend;
use crate::error::BackendError;
use crate::raid_bitmap::{Bitmap, BitmapError, Geometry, MemberLabel, Opened};
use tierlab_core::volume::{LabelKind, VolumeId, VolumeLabel};

/// Stripe (or unit) locks: a fixed table, keyed by a hash of the number.
/// Two stripes may share a lock; nobody holds two at once, so that only
/// costs a little parallelism.
const LOCKS: usize = 1024;

/// One member of an array.
pub enum RaidMember {
    Store(Box<dyn Backend>),
    /// Failed from the start (`failed_members`): never opened. `what`
    /// names it (its path) for `describe`; its size counts for the array
    /// size when the config gives it.
    Failed {
        what: String,
        capacity_bytes: Option<u64>,
    },
}

struct Member {
    store: Option<Box<dyn Backend>>,
    what: String,
    in_flight: AtomicU64,
}

/// The model's counters (same names, docs/raid.md), counted for real.
#[derive(Default)]
struct Stats {
    member_reads: AtomicU64,
    member_writes: AtomicU64,
    member_other: AtomicU64,
    rmw_stripes: AtomicU64,
    rcw_stripes: AtomicU64,
    full_stripe_writes: AtomicU64,
    degraded_stripe_writes: AtomicU64,
    degraded_stripe_reads: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

pub struct RaidBackend {
    level: RaidLevel,
    unit: u64,
    read_policy: ReadPolicy,
    members: Vec<Member>,
    capacity_bytes: u64,
    /// Members per mirror group (1 for RAID 0 and 5, n for RAID 1, 2 for RAID 10).
    group_size: usize,
    /// Round-robin cursor per mirror group.
    rr: Vec<AtomicUsize>,
    locks: Box<[Mutex<()>]>,
    stats: Stats,
    /// The write-intent bitmap (`bitmap`), when the config gives one.
    bitmap: Option<Bitmap>,
    /// Regions resynchronised at open, and the member bytes rewritten.
    resync_regions: u64,
    resync_member_bytes: u64,
}

/// Marks a bitmap region busy for as long as it lives. Dropped before
/// `done` (a member write failed part-way), the region keeps its bit until
/// the next open resynchronises it: its copies or parity may disagree.
struct RegionWrite<'a> {
    bitmap: Option<&'a Bitmap>,
    region: u64,
    done: bool,
}

impl RegionWrite<'_> {
    fn done(mut self) {
        self.done = true;
    }
}

impl Drop for RegionWrite<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.bitmap {
            if !self.done {
                b.needs_resync(self.region);
            }
            b.end_write(self.region);
        }
    }
}

fn xor_into(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= *s;
    }
}

fn len(r: UnitRange) -> usize {
    (r.1 - r.0) as usize
}

impl RaidBackend {
    /// An array over `members` (in member order). The shape (level,
    /// stripe unit, member count, which members may fail) is checked by
    /// the simulator's rules.
    pub fn new(
        level: RaidLevel,
        stripe_unit_bytes: u64,
        read_policy: ReadPolicy,
        members: Vec<RaidMember>,
    ) -> Result<RaidBackend, ParamError> {
        let n = members.len();
        let failed: Vec<usize> = (0..n)
            .filter(|&i| matches!(members[i], RaidMember::Failed { .. }))
            .collect();
        RaidParams {
            level,
            stripe_unit_bytes,
            read_policy,
            failed_members: failed,
            members: vec![(); n],
        }
        .validate_shape()?;
        let min_member_bytes = members
            .iter()
            .filter_map(|m| match m {
                RaidMember::Store(b) => Some(b.capacity_bytes()),
                RaidMember::Failed { capacity_bytes, .. } => *capacity_bytes,
            })
            .min()
            .unwrap_or(0);
        let capacity_bytes = array_capacity_bytes(level, stripe_unit_bytes, n, min_member_bytes)?;
        let group_size = match level {
            RaidLevel::Raid0 | RaidLevel::Raid5 => 1,
            RaidLevel::Raid1 => n,
            RaidLevel::Raid10 => 2,
        };
        let members = members
            .into_iter()
            .map(|m| match m {
                RaidMember::Store(b) => Member {
                    what: b.describe(),
                    store: Some(b),
                    in_flight: AtomicU64::new(0),
                },
                RaidMember::Failed { what, .. } => Member {
                    what: format!("failed, not opened: {what}"),
                    store: None,
                    in_flight: AtomicU64::new(0),
                },
            })
            .collect();
        Ok(RaidBackend {
            level,
            unit: stripe_unit_bytes,
            read_policy,
            members,
            capacity_bytes,
            group_size,
            rr: (0..n / group_size).map(|_| AtomicUsize::new(0)).collect(),
            locks: (0..LOCKS).map(|_| Mutex::new(())).collect(),
            stats: Stats::default(),
            bitmap: None,
            resync_regions: 0,
            resync_member_bytes: 0,
        })
    }

    /// Bytes of each member the array uses.
    fn member_span_bytes(&self) -> u64 {
        let data_members = match self.level {
            RaidLevel::Raid0 => self.members.len(),
            RaidLevel::Raid1 => 1,
            RaidLevel::Raid5 => self.members.len() - 1,
            RaidLevel::Raid10 => self.members.len() / 2,
        } as u64;
        self.capacity_bytes / data_members
    }

    /// The geometry a write-intent bitmap of `chunk_bytes` regions has
    /// over this array, or why it cannot have one.
    /// Keys in errors are relative to the array's table.
    pub fn bitmap_geometry(&self, chunk_bytes: u64) -> Result<Geometry, ParamError> {
        if self.level == RaidLevel::Raid0 {
            return Err(ParamError::new(
                "bitmap",
                "a bitmap on raid0",
                "no bitmap: raid0 keeps no redundancy, so it has nothing for a write-intent \
                 bitmap to resynchronise",
            ));
        }
        if chunk_bytes == 0 || chunk_bytes % self.unit != 0 {
            return Err(ParamError::new(
                "bitmap_chunk_bytes",
                chunk_bytes,
                format!("a positive multiple of `stripe_unit_bytes` ({})", self.unit),
            ));
        }
        Ok(Geometry {
            level: self.level,
            members: self.members.len() as u32,
            stripe_unit_bytes: self.unit,
            chunk_bytes,
            member_span_bytes: self.member_span_bytes(),
        })
    }

    /// Puts the array under a write-intent bitmap kept in `store` (made
    /// there if the store is all zeros), after resynchronising every
    /// region the bitmap says a crash may have left inconsistent.
    pub fn with_bitmap(
        mut self,
        store: Box<dyn Backend>,
        chunk_bytes: u64,
        broken_skip_flush: bool,
    ) -> Result<RaidBackend, BitmapError> {
        let geo = self
            .bitmap_geometry(chunk_bytes)
            .map_err(BitmapError::Geometry)?;
        let members = self.member_labels().map_err(|source| BitmapError::Io {
            what: store.describe(),
            source,
        })?;
        let Opened { mut bitmap, dirty } = Bitmap::open(geo, store, &members)?;
        bitmap.broken_skip_flush = broken_skip_flush;
        if !dirty.is_empty() {
            self.resync(&bitmap, &dirty)
                .map_err(|source| BitmapError::Resync {
                    what: bitmap.describe(),
                    regions: dirty.len(),
                    source,
                })?;
        }
        self.bitmap = Some(bitmap);
        Ok(self)
    }

    /// Makes each region's redundancy agree with its data again: RAID 5
    /// parity recomputed from the data units, mirror copies copied from
    /// the group's first survivor. Then flushes the members and clears the
    /// regions' bits durably.
    fn resync(&mut self, bitmap: &Bitmap, regions: &[u64]) -> io::Result<()> {
        let n = self.members.len();
        let u = self.unit;
        let span = self.member_span_bytes();
        let chunk = bitmap.geometry().chunk_bytes;
        if self.level == RaidLevel::Raid5
            && let Some(m) = (0..n).find(|&m| self.failed(m))
        {
            return Err(io::Error::other(format!(
                "member {m} ({}) is failed, so the parity of those stripes cannot be recomputed \
                 and their rebuilt data may be wrong (a crash and a lost member together: the \
                 write hole a bitmap cannot close). Bring the member back to resynchronise, or \
                 delete the bitmap file to accept the risk",
                self.members[m].what
            )));
        }
        let mut buf = vec![0u8; u as usize];
        let mut parity = vec![0u8; u as usize];
        for &b in regions {
            let (lo, hi) = (b * chunk, ((b + 1) * chunk).min(span));
            for row in (lo..hi).step_by(u as usize) {
                match self.level {
                    RaidLevel::Raid5 => {
                        let geo = Raid5Stripe { n, stripe: row / u };
                        parity.fill(0);
                        for j in 0..n - 1 {
                            self.mread(geo.data_member(j), &mut buf, row)?;
                            xor_into(&mut parity, &buf);
                        }
                        self.mwrite(geo.parity_member(), &parity, row)?;
                        self.resync_member_bytes += u;
                    }
                    _ => {
                        let gs = self.group_size;
                        for g in 0..n / gs {
                            let copies: Vec<usize> = (g * gs..(g + 1) * gs)
                                .filter(|&m| !self.failed(m))
                                .collect();
                            let Some((&first, rest)) = copies.split_first() else {
                                continue;
                            };
                            self.mread(first, &mut buf, row)?;
                            for &m in rest {
                                self.mwrite(m, &buf, row)?;
                                self.resync_member_bytes += u;
                            }
                        }
                    }
                }
            }
            self.resync_regions += 1;
        }
        self.flush_members()?;
        bitmap.clear_resynced(regions)
    }

    /// Test only: the bitmap's page is no longer flushed before member
    /// writes (the crash checker must catch it).
    #[doc(hidden)]
    pub fn broken_bitmap_skip_flush(&mut self) {
        if let Some(b) = &mut self.bitmap {
            b.broken_skip_flush = true;
        }
    }

    /// Marks the bitmap region of `member_offset` busy (setting its bit
    /// durably first if it is clear) until the guard drops.
    fn region_write(&self, member_offset: u64) -> io::Result<RegionWrite<'_>> {
        let Some(b) = &self.bitmap else {
            return Ok(RegionWrite {
                bitmap: None,
                region: 0,
                done: false,
            });
        };
        let region = b.region(member_offset);
        b.start_write(region)?;
        Ok(RegionWrite {
            bitmap: Some(b),
            region,
            done: false,
        })
    }

    fn flush_members(&self) -> io::Result<()> {
        for (m, member) in self.members.iter().enumerate() {
            if let Some(s) = &member.store {
                bump(&self.stats.member_other);
                s.flush()
                    .map_err(|e| self.member_error(m, "flush", 0, 0, e))?;
            }
        }
        Ok(())
    }

    pub fn level(&self) -> RaidLevel {
        self.level
    }

    /// Every member's volume id now (a failed member's: none).
    fn member_labels(&self) -> io::Result<Vec<MemberLabel>> {
        self.members
            .iter()
            .enumerate()
            .map(|(m, member)| {
                let label = match &member.store {
                    Some(s) => s.volume_label().map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("{} member {m} ({}): {e}", self.level.as_str(), member.what),
                        )
                    })?,
                    None => None,
                };
                Ok(MemberLabel {
                    what: member.what.clone(),
                    label,
                    failed: member.store.is_none(),
                })
            })
            .collect()
    }

    fn failed(&self, m: usize) -> bool {
        self.members[m].store.is_none()
    }

    fn lock(&self, key: u64) -> MutexGuard<'_, ()> {
        let i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % LOCKS;
        self.locks[i].lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn member_error(
        &self,
        m: usize,
        what: &str,
        len: usize,
        offset: u64,
        e: io::Error,
    ) -> io::Error {
        io::Error::new(
            e.kind(),
            format!(
                "{} member {m} ({}): {what} of {len} bytes at member offset {offset} failed: {e}",
                self.level.as_str(),
                self.members[m].what
            ),
        )
    }

    fn store(&self, m: usize) -> &dyn Backend {
        self.members[m]
            .store
            .as_deref()
            .expect("no IO is planned on a failed member")
    }

    fn mread(&self, m: usize, buf: &mut [u8], offset: u64) -> io::Result<()> {
        bump(&self.stats.member_reads);
        let member = &self.members[m];
        member.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = self.store(m).read_at(buf, offset);
        member.in_flight.fetch_sub(1, Ordering::Relaxed);
        r.map_err(|e| self.member_error(m, "read", buf.len(), offset, e))
    }

    fn mwrite(&self, m: usize, buf: &[u8], offset: u64) -> io::Result<()> {
        bump(&self.stats.member_writes);
        let member = &self.members[m];
        member.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = self.store(m).write_at(buf, offset);
        member.in_flight.fetch_sub(1, Ordering::Relaxed);
        r.map_err(|e| self.member_error(m, "write", buf.len(), offset, e))
    }

    fn check_range(&self, offset: u64, len: usize) -> io::Result<()> {
        crate::backend::check_range(offset, len, self.capacity_bytes, || {
            format!("the {} array", self.level.as_str())
        })
    }

    // ---- RAID 0 / 1 / 10 ---------------------------------------------------

    /// The member of mirror group `g` that serves a read (a survivor).
    fn pick_reader(&self, g: usize) -> usize {
        let gs = self.group_size;
        let first = g * gs;
        if gs == 1 {
            return first;
        }
        let start = match self.read_policy {
            ReadPolicy::PrimaryOnly => 0,
            _ => self.rr[g].fetch_add(1, Ordering::Relaxed) % gs,
        };
        let mut best: Option<(usize, u64)> = None;
        for k in 0..gs {
            let m = first + (start + k) % gs;
            if self.failed(m) {
                continue;
            }
            match self.read_policy {
                ReadPolicy::LeastOutstanding => {
                    let q = self.members[m].in_flight.load(Ordering::Relaxed);
                    if best.is_none_or(|(_, bq)| q < bq) {
                        best = Some((m, q));
                    }
                }
                ReadPolicy::RoundRobin | ReadPolicy::PrimaryOnly => {
                    best = Some((m, 0));
                    break;
                }
            }
        }
        // The shape check keeps a survivor in every group.
        best.map_or(first, |(m, _)| m)
    }

    fn groups(&self) -> u64 {
        (self.members.len() / self.group_size) as u64
    }

    fn mirrored_read(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        let mut at = offset;
        while at < end {
            let (g, member_offset, n) = striped_piece(self.unit, self.groups(), at, end);
            let m = self.pick_reader(g);
            let i = (at - offset) as usize;
            self.mread(m, &mut buf[i..i + n as usize], member_offset)?;
            at += n;
        }
        Ok(())
    }

    fn mirrored_write(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        let gs = self.group_size;
        let mut at = offset;
        while at < end {
            let (g, member_offset, n) = striped_piece(self.unit, self.groups(), at, end);
            // One unit at a time (RAID 1 is not split by the layout), each
            // under its unit's lock when there are copies to keep equal.
            let n = n.min(self.unit - at % self.unit);
            let _guard = (gs > 1).then(|| self.lock(at / self.unit));
            let busy = self.region_write(member_offset)?;
            let i = (at - offset) as usize;
            for m in g * gs..(g + 1) * gs {
                if !self.failed(m) {
                    self.mwrite(m, &buf[i..i + n as usize], member_offset)?;
                }
            }
            busy.done();
            at += n;
        }
        Ok(())
    }

    // ---- RAID 5 --------------------------------------------------------------

    fn stripe_data_bytes(&self) -> u64 {
        (self.members.len() as u64 - 1) * self.unit
    }

    /// Calls `f(stripe, lo, hi, at)` for each stripe a host range touches:
    /// [lo, hi) within the stripe's data, `at` the offset in the host buffer.
    fn for_each_stripe(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(u64, u64, u64, usize) -> io::Result<()>,
    ) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let sd = self.stripe_data_bytes();
        let end = offset + len as u64;
        for stripe in offset / sd..=(end - 1) / sd {
            let base = stripe * sd;
            let lo = offset.max(base) - base;
            let hi = end.min(base + sd) - base;
            f(stripe, lo, hi, (base + lo - offset) as usize)?;
        }
        Ok(())
    }

    /// Reads [lo, hi) of a stripe's data into `out`. A lost chunk is the
    /// XOR of every survivor over its range; each survivor is read once,
    /// over the hull of its own part and the lost range (as in the model).
    fn raid5_read_stripe(&self, stripe: u64, lo: u64, hi: u64, out: &mut [u8]) -> io::Result<()> {
        let u = self.unit;
        let geo = Raid5Stripe {
            n: self.members.len(),
            stripe,
        };
        let row = stripe * u;
        let d = geo.n - 1;
        // Where data unit j's part lands in `out`.
        let at = |j: usize, w: UnitRange| (j as u64 * u + w.0 - lo) as usize;
        let lost = (0..d).find_map(|j| {
            self.failed(geo.data_member(j))
                .then(|| raid5_unit_range(u, j, lo, hi).map(|w| (j, w)))
                .flatten()
        });
        let Some((lj, lw)) = lost else {
            for j in 0..d {
                if let Some(w) = raid5_unit_range(u, j, lo, hi) {
                    let a = at(j, w);
                    self.mread(geo.data_member(j), &mut out[a..a + len(w)], row + w.0)?;
                }
            }
            return Ok(());
        };
        // Degraded: the survivors must not change under the rebuild.
        let _guard = self.lock(stripe);
        bump(&self.stats.degraded_stripe_reads);
        let la = at(lj, lw);
        out[la..la + len(lw)].fill(0);
        let mut tmp = Vec::new();
        for m in 0..geo.n {
            if self.failed(m) {
                continue;
            }
            let own = (0..d)
                .find(|&j| geo.data_member(j) == m)
                .and_then(|j| raid5_unit_range(u, j, lo, hi).map(|w| (j, w)));
            let (a, b) = match own {
                Some((_, w)) => (w.0.min(lw.0), w.1.max(lw.1)),
                None => lw,
            };
            tmp.clear();
            tmp.resize((b - a) as usize, 0);
            self.mread(m, &mut tmp, row + a)?;
            if let Some((j, w)) = own {
                let o = at(j, w);
                out[o..o + len(w)].copy_from_slice(&tmp[(w.0 - a) as usize..(w.1 - a) as usize]);
            }
            xor_into(
                &mut out[la..la + len(lw)],
                &tmp[(lw.0 - a) as usize..(lw.1 - a) as usize],
            );
        }
        Ok(())
    }

    /// Writes `data` over [lo, hi) of a stripe's data, keeping its parity
    /// the XOR of its data units.
    fn raid5_write_stripe(&self, stripe: u64, lo: u64, hi: u64, data: &[u8]) -> io::Result<()> {
        let u = self.unit;
        let geo = Raid5Stripe {
            n: self.members.len(),
            stripe,
        };
        let row = stripe * u;
        let d = geo.n - 1;
        let p = geo.parity_member();
        let (pa, pb) = raid5_parity_range(u, lo, hi);
        // Data unit j's written range and its new bytes.
        let new = |j: usize| {
            raid5_unit_range(u, j, lo, hi).map(|w| {
                let a = (j as u64 * u + w.0 - lo) as usize;
                (w, &data[a..a + len(w)])
            })
        };
        // Where a unit range sits in the parity buffer.
        let pr = |w: UnitRange| (w.0 - pa) as usize..(w.1 - pa) as usize;
        let _guard = self.lock(stripe);
        let busy = self.region_write(row)?;
        let mode = raid5_write_mode(geo, u, lo, hi, |m| self.failed(m));
        let mut parity = vec![0u8; (pb - pa) as usize];
        let mut old = Vec::new();
        match mode {
            Raid5WriteMode::ReadModifyWrite => {
                bump(&self.stats.rmw_stripes);
                // new parity = old parity ^ old data ^ new data
                self.mread(p, &mut parity, row + pa)?;
                for j in 0..d {
                    if let Some((w, bytes)) = new(j) {
                        old.clear();
                        old.resize(len(w), 0);
                        self.mread(geo.data_member(j), &mut old, row + w.0)?;
                        xor_into(&mut parity[pr(w)], &old);
                        xor_into(&mut parity[pr(w)], bytes);
                    }
                }
            }
            Raid5WriteMode::ReconstructWrite => {
                // parity = XOR of the new data and the data left alone.
                if lo == 0 && hi == d as u64 * u {
                    bump(&self.stats.full_stripe_writes);
                } else {
                    bump(&self.stats.rcw_stripes);
                }
                for j in 0..d {
                    let w = new(j);
                    if let Some((w, bytes)) = w {
                        xor_into(&mut parity[pr(w)], bytes);
                    }
                    if let Some(r) = rcw_need(w.map(|x| x.0), (pa, pb)) {
                        old.clear();
                        old.resize(len(r), 0);
                        self.mread(geo.data_member(j), &mut old, row + r.0)?;
                        xor_into(&mut parity[pr(r)], &old);
                    }
                }
            }
            Raid5WriteMode::Rebuild => {
                // A written unit is lost: its old bytes are the XOR of every
                // survivor over the parity range; then as read-modify-write.
                bump(&self.stats.degraded_stripe_writes);
                let mut survivors: Vec<Option<Vec<u8>>> = vec![None; geo.n];
                let mut lost_old = vec![0u8; (pb - pa) as usize];
                for (m, slot) in survivors.iter_mut().enumerate() {
                    if self.failed(m) {
                        continue;
                    }
                    let mut b = vec![0u8; (pb - pa) as usize];
                    self.mread(m, &mut b, row + pa)?;
                    xor_into(&mut lost_old, &b);
                    *slot = Some(b);
                }
                parity.copy_from_slice(survivors[p].as_ref().expect("parity survives"));
                for j in 0..d {
                    if let Some((w, bytes)) = new(j) {
                        let old = survivors[geo.data_member(j)].as_ref().unwrap_or(&lost_old);
                        xor_into(&mut parity[pr(w)], &old[pr(w)]);
                        xor_into(&mut parity[pr(w)], bytes);
                    }
                }
            }
            Raid5WriteMode::NoParity => bump(&self.stats.degraded_stripe_writes),
        }
        for j in 0..d {
            let m = geo.data_member(j);
            if let Some((w, bytes)) = new(j)
                && !self.failed(m)
            {
                self.mwrite(m, bytes, row + w.0)?;
            }
        }
        if mode != Raid5WriteMode::NoParity {
            self.mwrite(p, &parity, row + pa)?;
        }
        busy.done();
        Ok(())
    }
}

impl Backend for RaidBackend {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_range(offset, buf.len())?;
        match self.level {
            RaidLevel::Raid5 => self.for_each_stripe(offset, buf.len(), |s, lo, hi, at| {
                let n = (hi - lo) as usize;
                self.raid5_read_stripe(s, lo, hi, &mut buf[at..at + n])
            }),
            _ => self.mirrored_read(buf, offset),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_range(offset, buf.len())?;
        match self.level {
            RaidLevel::Raid5 => self.for_each_stripe(offset, buf.len(), |s, lo, hi, at| {
                self.raid5_write_stripe(s, lo, hi, &buf[at..at + (hi - lo) as usize])
            }),
            _ => self.mirrored_write(buf, offset),
        }
    }

    fn flush(&self) -> io::Result<()> {
        let Some(b) = &self.bitmap else {
            return self.flush_members();
        };
        // Regions idle now whose writes the member flush makes durable.
        let candidates = b.flush_candidates();
        self.flush_members()?;
        if !candidates.is_empty() {
            b.clear_flushed(&candidates)?;
            // So that a clean stop leaves nothing to resynchronise.
            b.flush_store()?;
        }
        Ok(())
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn describe(&self) -> String {
        let unit = if self.unit % 1024 == 0 {
            format!("{} KiB", self.unit / 1024)
        } else {
            format!("{} bytes", self.unit)
        };
        let members: Vec<String> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| format!("[{i}] {}", m.what))
            .collect();
        let bitmap = self
            .bitmap
            .as_ref()
            .map_or(String::new(), |b| format!("; {}", b.describe()));
        format!(
            "{} of {} members, {unit} stripe unit: {}{bitmap}",
            self.level.as_str(),
            self.members.len(),
            members.join("; ")
        )
    }

    fn unaligned_ios(&self) -> u64 {
        self.members
            .iter()
            .filter_map(|m| m.store.as_ref())
            .map(|s| s.unaligned_ios())
            .sum()
    }

    /// Derived from the members' ids in member order, with the level and
    /// stripe unit (the same members in another layout are another
    /// volume). A failed member counts with the id the bitmap recorded for
    /// it; without one — or with a member that cannot tell (RAM) — the
    /// array cannot tell either.
    fn volume_label(&self) -> io::Result<Option<VolumeLabel>> {
        let mut parts: Vec<[u8; 16]> = Vec::with_capacity(self.members.len() + 1);
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&(Geometry::level_code(self.level) as u64).to_le_bytes());
        head[8..].copy_from_slice(&self.unit.to_le_bytes());
        parts.push(head);
        let mut created_now = false;
        for (m, l) in self.member_labels()?.into_iter().enumerate() {
            let id = match l.label {
                Some(l) => {
                    created_now |= l.created_now;
                    l.id
                }
                None => match self.bitmap.as_ref().and_then(|b| b.recorded_member_id(m)) {
                    Some(id) if l.failed => id,
                    _ => return Ok(None),
                },
            };
            parts.push(id.bits().to_be_bytes());
        }
        let parts: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        Ok(Some(VolumeLabel {
            id: VolumeId::derive("raid", &parts),
            kind: LabelKind::Array,
            created_now,
        }))
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let s = &self.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
        let mut out = vec![
            ("member_reads", get(&s.member_reads)),
            ("member_writes", get(&s.member_writes)),
            ("member_other", get(&s.member_other)),
        ];
        if self.level == RaidLevel::Raid5 {
            out.extend([
                ("rmw_stripes", get(&s.rmw_stripes)),
                ("rcw_stripes", get(&s.rcw_stripes)),
                ("full_stripe_writes", get(&s.full_stripe_writes)),
                ("degraded_stripe_writes", get(&s.degraded_stripe_writes)),
                ("degraded_stripe_reads", get(&s.degraded_stripe_reads)),
            ]);
        }
        if let Some(b) = &self.bitmap {
            let c = b.counters();
            out.extend([
                ("bitmap_bits_set", c.bits_set as f64),
                ("bitmap_bits_cleared", c.bits_cleared as f64),
                ("bitmap_page_writes", c.page_writes as f64),
                ("bitmap_flushes", c.flushes as f64),
                ("bitmap_dirty_regions", b.dirty_regions() as f64),
                (
                    "bitmap_regions_needing_resync",
                    b.regions_needing_resync() as f64,
                ),
                ("resync_regions", self.resync_regions as f64),
                ("resync_member_bytes", self.resync_member_bytes as f64),
            ]);
        }
        out
    }
}

fn toml_str<'a>(t: &'a toml::Table, key: &str) -> Option<&'a str> {
    t.get(key).and_then(|v| v.as_str())
}

/// Opens a `model = "raid"` device table of a real run (`at` names it in
/// errors, e.g. `devices[0]`): the simulator's keys and checks (level,
/// stripe_unit_bytes, read_policy, failed_members, members), each member a
/// backing store opened like a plain device (`executor::open_device`; a
/// member may be an array).
pub fn open(table: &toml::Table, at: &str, base_dir: &Path) -> Result<RaidBackend, BackendError> {
    open_with(
        table,
        at,
        &mut |m, mat| crate::executor::open_device(m, mat, base_dir),
        &mut |b, bat, need| open_bitmap_store(b, bat, need, base_dir),
    )
}

/// Opens a RAID device table with `open_member(table, at)` opening each
/// member that is not failed and `open_bitmap(table, at, bytes needed)`
/// the write-intent bitmap's store (the crash checker passes in-memory
/// stores; `open` passes files).
#[allow(clippy::type_complexity)]
pub fn open_with(
    table: &toml::Table,
    at: &str,
    open_member: &mut dyn FnMut(&toml::Table, &str) -> Result<Box<dyn Backend>, BackendError>,
    open_bitmap: &mut dyn FnMut(&toml::Table, &str, u64) -> Result<Box<dyn Backend>, BackendError>,
) -> Result<RaidBackend, BackendError> {
    let mut t = table.clone();
    t.remove("name");
    t.remove("model");
    let bitmap = t.remove("bitmap");
    let chunk = match t.remove("bitmap_chunk_bytes") {
        None => None,
        Some(v) => {
            let mut one = toml::Table::new();
            one.insert("bitmap_chunk_bytes".into(), v);
            crate::open::toml_u64(&one, "bitmap_chunk_bytes", at)?
        }
    };
    let params: RaidParams<toml::Table> = toml::Value::Table(t)
        .try_into()
        .map_err(|e| BackendError::key(at, format!("raid: {}", e.to_string().trim_end())))?;
    params
        .validate_shape()
        .map_err(|e| BackendError::param(e.within(at)))?;
    let mut members = Vec::with_capacity(params.members.len());
    for (k, m) in params.members.iter().enumerate() {
        let mat = format!("{at}.members[{k}]");
        if params.failed_members.contains(&k) {
            let what = match toml_str(m, "path") {
                Some(p) => p.to_string(),
                None => "no path".to_string(),
            };
            let capacity_bytes = crate::open::toml_u64(m, "capacity_bytes", &mat)?;
            members.push(RaidMember::Failed {
                what,
                capacity_bytes,
            });
        } else {
            members.push(RaidMember::Store(open_member(m, &mat)?));
        }
    }
    let array = RaidBackend::new(
        params.level,
        params.stripe_unit_bytes,
        params.read_policy,
        members,
    )
    .map_err(|e| BackendError::param(e.within(at)))?;
    let bitmap = match bitmap {
        None if chunk.is_some() => {
            return Err(BackendError::key(
                join_key(at, "bitmap_chunk_bytes"),
                "given without `bitmap`; add bitmap = { path = \"FILE\" } or remove it",
            ));
        }
        None => return Ok(array),
        Some(toml::Value::Table(b)) => b,
        Some(toml::Value::String(p)) => {
            let mut b = toml::Table::new();
            b.insert("path".into(), toml::Value::String(p));
            b
        }
        Some(v) => {
            return Err(BackendError::key(
                join_key(at, "bitmap"),
                format!("{v} is not a path or a table like {{ path = \"FILE\" }}"),
            ));
        }
    };
    let chunk = chunk.unwrap_or(crate::raid_bitmap::DEFAULT_CHUNK_BYTES);
    let bat = join_key(at, "bitmap");
    let geo = array
        .bitmap_geometry(chunk)
        .map_err(|e| BackendError::param(e.within(at)))?;
    let store = open_bitmap(&bitmap, &bat, geo.store_bytes())?;
    array
        .with_bitmap(store, chunk, false)
        .map_err(|error| BackendError::Bitmap { key: bat, error })
}

/// A bitmap table's store: `path` (made if missing, sized by the array),
/// or "ram" (lost at a stop: only for tests).
fn open_bitmap_store(
    b: &toml::Table,
    at: &str,
    need: u64,
    base_dir: &Path,
) -> Result<Box<dyn Backend>, BackendError> {
    for k in b.keys() {
        if k != "path" && k != "direct" {
            return Err(BackendError::key(
                join_key(at, k),
                "not a bitmap key; a bitmap takes path and direct (its size follows from the \
                 array)",
            ));
        }
    }
    let Some(path) = toml_str(b, "path") else {
        return Err(BackendError::key(
            join_key(at, "path"),
            "missing; give the bitmap's file",
        ));
    };
    if path == "ram" {
        return Ok(Box::new(crate::backend::RamBackend::new(need)));
    }
    let p = Path::new(path);
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    };
    let direct = match b.get("direct") {
        None => false,
        Some(toml::Value::Boolean(d)) => *d,
        Some(v) => {
            return Err(BackendError::param(
                ParamError::new("direct", v, "true or false").within(at),
            ));
        }
    };
    let store = crate::backend::FileBackend::open(&p, Some(need), true, direct)
        .map_err(|e| e.within(at))?;
    Ok(Box::new(store))
}

/// The part of a `[[devices]]` table that the real run reads, for a config
/// whose devices carry both a model and a backing store (`tierlab
/// compare`): `name`, `capacity_bytes` and the real-only keys; for a RAID,
/// its array keys and each member's real part (a failed member needs no
/// backing store).
pub fn real_device_table(t: &toml::Table, at: &str) -> Result<toml::Table, BackendError> {
    if toml_str(t, "model") == Some("raid") {
        let failed: Vec<i64> = match t.get("failed_members") {
            Some(toml::Value::Array(a)) => a.iter().filter_map(|v| v.as_integer()).collect(),
            _ => Vec::new(),
        };
        let mut out = t.clone();
        if let Some(toml::Value::Array(members)) = out.get_mut("members") {
            for (k, m) in members.iter_mut().enumerate() {
                let toml::Value::Table(mt) = m else { continue };
                let mat = format!("{at}.members[{k}]");
                *mt = if failed.contains(&(k as i64)) && !mt.contains_key("path") {
                    mt.iter()
                        .filter(|(key, _)| *key == "capacity_bytes")
                        .map(|(key, v)| (key.clone(), v.clone()))
                        .collect()
                } else {
                    real_device_table(mt, &mat)?
                };
            }
        }
        return Ok(out);
    }
    if !t.contains_key("path") || !t.contains_key("model") {
        return Err(BackendError::key(
            at,
            "compare needs both `model` (simulation) and `path` (real run)",
        ));
    }
    Ok(t.iter()
        .filter(|(k, _)| {
            *k == "name"
                || *k == "capacity_bytes"
                || tierlab_stack::REAL_DEVICE_KEYS.contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RamBackend;

    fn ram_members(n: usize, bytes: u64, failed: &[usize]) -> Vec<RaidMember> {
        (0..n)
            .map(|i| {
                if failed.contains(&i) {
                    RaidMember::Failed {
                        what: format!("m{i}"),
                        capacity_bytes: None,
                    }
                } else {
                    RaidMember::Store(Box::new(RamBackend::new(bytes)))
                }
            })
            .collect()
    }

    fn raid(level: RaidLevel, n: usize, unit: u64, failed: &[usize]) -> RaidBackend {
        RaidBackend::new(
            level,
            unit,
            ReadPolicy::default(),
            ram_members(n, 64 * unit, failed),
        )
        .unwrap()
    }

    /// RAM that refuses its `nth` write (1-based) only.
    struct FailsOneWrite {
        ram: RamBackend,
        nth: u64,
        writes: AtomicU64,
    }

    impl Backend for FailsOneWrite {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.ram.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            if self.writes.fetch_add(1, Ordering::SeqCst) + 1 == self.nth {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.ram.write_at(buf, offset)
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn capacity_bytes(&self) -> u64 {
            self.ram.capacity_bytes()
        }
        fn describe(&self) -> String {
            "ram failing one write".into()
        }
    }

    /// A member write that fails part-way through a stripe write leaves the
    /// stripe's parity stale: its region must keep its bit through every
    /// later flush, so that the next open resynchronises it.
    #[test]
    fn a_failed_member_write_keeps_its_region_dirty_through_flushes() {
        let unit = 16 * 1024;
        let mut members = ram_members(3, 64 * unit, &[]);
        members[2] = RaidMember::Store(Box::new(FailsOneWrite {
            ram: RamBackend::new(64 * unit),
            nth: 2,
            writes: AtomicU64::new(0),
        }));
        let r = RaidBackend::new(RaidLevel::Raid5, unit, ReadPolicy::default(), members)
            .unwrap()
            .with_bitmap(Box::new(RamBackend::new(1 << 20)), 4 * unit, false)
            .unwrap();
        let count = |name: &str| {
            r.counters()
                .into_iter()
                .find(|(n, _)| *n == name)
                .unwrap()
                .1
        };
        // Stripe 0: data on members 0 and 1, parity on member 2.
        r.write_at(&vec![7u8; 2 * unit as usize], 0).unwrap();
        r.flush().unwrap();
        assert_eq!(count("bitmap_dirty_regions"), 0.0);
        // Unit 0 rewritten: its data lands, the parity write fails.
        let e = r.write_at(&vec![9u8; 4096], 0).unwrap_err();
        assert!(e.to_string().contains("raid5 member 2"), "{e}");
        assert_eq!(count("bitmap_regions_needing_resync"), 1.0);
        r.flush().unwrap();
        assert_eq!(
            count("bitmap_dirty_regions"),
            1.0,
            "a flush must not clear it"
        );
        // Other regions still clear normally.
        r.write_at(&vec![1u8; 4096], 8 * unit).unwrap();
        assert_eq!(count("bitmap_dirty_regions"), 2.0);
        r.flush().unwrap();
        assert_eq!(count("bitmap_dirty_regions"), 1.0);
    }

    /// Every member's bytes (zeros for a failed one).
    fn member_bytes(r: &RaidBackend) -> Vec<Vec<u8>> {
        r.members
            .iter()
            .map(|m| {
                let mut b = vec![0u8; 64 * r.unit as usize];
                if let Some(s) = &m.store {
                    s.read_at(&mut b, 0).unwrap();
                }
                b
            })
            .collect()
    }

    /// RAID 5: every row's units XOR to zero (a lost member is taken as the
    /// XOR of the others, so this holds by construction for it).
    fn parity_consistent(r: &RaidBackend) -> bool {
        let mb = member_bytes(r);
        let lost: Vec<bool> = (0..mb.len()).map(|m| r.failed(m)).collect();
        if lost.iter().any(|&l| l) {
            return true;
        }
        (0..mb[0].len()).all(|i| mb.iter().fold(0u8, |x, m| x ^ m[i]) == 0)
    }

    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Random writes and reads against a shadow copy of the volume.
    fn random_against_shadow(r: &RaidBackend, ios: usize, seed: u64) {
        let cap = r.capacity_bytes() as usize;
        let mut shadow = vec![0u8; cap];
        let mut x = seed | 1;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for i in 0..ios {
            let sectors = [1, 2, 8, 31, 64, 200][next(6) as usize];
            let len = sectors * 512;
            let off = next((cap - len) as u64 / 512 + 1) as usize * 512;
            if next(3) > 0 {
                let data = pattern(len, i as u64 + seed);
                r.write_at(&data, off as u64).unwrap();
                shadow[off..off + len].copy_from_slice(&data);
            } else {
                let mut b = vec![0u8; len];
                r.read_at(&mut b, off as u64).unwrap();
                assert_eq!(b, shadow[off..off + len], "read at {off} +{len}");
            }
        }
        let mut all = vec![0u8; cap];
        r.read_at(&mut all, 0).unwrap();
        assert!(all == shadow, "final image differs");
    }

    #[test]
    fn raid5_random_writes_read_back_and_keep_parity() {
        for n in [3, 4, 5] {
            let r = raid(RaidLevel::Raid5, n, 4096, &[]);
            random_against_shadow(&r, 3000, n as u64);
            assert!(parity_consistent(&r), "n = {n}");
            let c: std::collections::HashMap<_, _> = r.counters().into_iter().collect();
            // Three members: reconstruct-write never reads more (one read).
            let modes: &[&str] = if n == 3 {
                &["rcw_stripes", "full_stripe_writes"]
            } else {
                &["rmw_stripes", "rcw_stripes", "full_stripe_writes"]
            };
            for &k in modes {
                assert!(c[k] > 0.0, "n = {n}: {k} = 0 ({c:?})");
            }
        }
    }

    #[test]
    fn raid5_degraded_every_member_lost_in_turn() {
        for lost in 0..4 {
            let r = raid(RaidLevel::Raid5, 4, 4096, &[lost]);
            random_against_shadow(&r, 2000, 10 + lost as u64);
            let c: std::collections::HashMap<_, _> = r.counters().into_iter().collect();
            assert!(c["degraded_stripe_reads"] > 0.0, "{c:?}");
            assert!(c["degraded_stripe_writes"] > 0.0, "{c:?}");
        }
    }

    #[test]
    fn raid5_data_written_whole_reads_back_after_losing_any_member() {
        // Write on a healthy array, then "lose" each member in turn: the
        // array over the other members' bytes reads back the same volume.
        let healthy = raid(RaidLevel::Raid5, 4, 4096, &[]);
        random_against_shadow(&healthy, 2000, 99);
        let mut image = vec![0u8; healthy.capacity_bytes() as usize];
        healthy.read_at(&mut image, 0).unwrap();
        let mb = member_bytes(&healthy);
        for lost in 0..4 {
            let members = (0..4)
                .map(|i| {
                    if i == lost {
                        RaidMember::Failed {
                            what: "gone".into(),
                            capacity_bytes: None,
                        }
                    } else {
                        let b = RamBackend::new(mb[i].len() as u64);
                        b.write_at(&mb[i], 0).unwrap();
                        RaidMember::Store(Box::new(b))
                    }
                })
                .collect();
            let r =
                RaidBackend::new(RaidLevel::Raid5, 4096, ReadPolicy::default(), members).unwrap();
            let mut back = vec![0u8; image.len()];
            r.read_at(&mut back, 0).unwrap();
            assert!(back == image, "lost member {lost}");
        }
    }

    #[test]
    fn mirrored_and_striped_levels_read_back_and_mirrors_match() {
        for (level, n, failed) in [
            (RaidLevel::Raid0, 3, vec![]),
            (RaidLevel::Raid1, 2, vec![]),
            (RaidLevel::Raid1, 3, vec![1]),
            (RaidLevel::Raid10, 4, vec![]),
            (RaidLevel::Raid10, 6, vec![0, 3]),
        ] {
            let r = raid(level, n, 4096, &failed);
            random_against_shadow(&r, 2000, n as u64 + 7);
            let mb = member_bytes(&r);
            let gs = r.group_size;
            for g in 0..n / gs {
                let alive: Vec<usize> = (g * gs..(g + 1) * gs).filter(|&m| !r.failed(m)).collect();
                for w in alive.windows(2) {
                    assert!(mb[w[0]] == mb[w[1]], "{level:?}: copies {w:?} differ");
                }
            }
        }
    }

    #[test]
    fn layout_is_the_models() {
        // RAID 5 of 4, unit 512: host unit k at row k / 3, member
        // (p(row) + 1 + k % 3) % 4 with p(row) = 3 - row % 4 (docs/raid.md).
        let r = raid(RaidLevel::Raid5, 4, 512, &[]);
        for k in 0..24u64 {
            r.write_at(&[k as u8 + 1; 512], k * 512).unwrap();
        }
        let mb = member_bytes(&r);
        for k in 0..24u64 {
            let row = k / 3;
            let p = 3 - (row % 4) as usize;
            let m = (p + 1 + (k % 3) as usize) % 4;
            assert_eq!(mb[m][(row * 512) as usize], k as u8 + 1, "unit {k}");
        }
        // RAID 10 of 4: unit k on pair k % 2, row k / 2.
        let r = raid(RaidLevel::Raid10, 4, 512, &[]);
        for k in 0..8u64 {
            r.write_at(&[k as u8 + 1; 512], k * 512).unwrap();
        }
        let mb = member_bytes(&r);
        for k in 0..8u64 {
            let pair = (k % 2) as usize;
            let at = ((k / 2) * 512) as usize;
            assert_eq!(mb[2 * pair][at], k as u8 + 1);
            assert_eq!(mb[2 * pair + 1][at], k as u8 + 1);
        }
    }

    /// RAM that takes a while (a yield) per IO, so that races show.
    struct Slow(RamBackend);

    impl Backend for Slow {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            std::thread::sleep(std::time::Duration::from_micros(20));
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            std::thread::sleep(std::time::Duration::from_micros(20));
            self.0.write_at(buf, offset)
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn capacity_bytes(&self) -> u64 {
            self.0.capacity_bytes()
        }
        fn describe(&self) -> String {
            "slow ram".into()
        }
    }

    #[test]
    fn concurrent_writes_to_one_stripe_keep_its_parity() {
        // 16 threads, each owning one 512-byte slice of the same few
        // stripes, all writing at once: without the stripe lock two
        // read-modify-writes would race on the parity.
        let members = (0..5)
            .map(|_| RaidMember::Store(Box::new(Slow(RamBackend::new(64 * 2048)))))
            .collect();
        let r = RaidBackend::new(RaidLevel::Raid5, 2048, ReadPolicy::default(), members).unwrap();
        let sd = 4 * 2048u64;
        std::thread::scope(|s| {
            for t in 0..16u64 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..150u64 {
                        let stripe = i % 3;
                        let off = stripe * sd + t * 512;
                        r.write_at(&pattern(512, t * 1000 + i), off).unwrap();
                    }
                });
            }
        });
        assert!(parity_consistent(&r));
        for t in 0..16u64 {
            for stripe in 0..3u64 {
                let last = (0..150u64).filter(|i| i % 3 == stripe).max().unwrap();
                let mut b = vec![0u8; 512];
                r.read_at(&mut b, stripe * sd + t * 512).unwrap();
                assert_eq!(b, pattern(512, t * 1000 + last));
            }
        }
    }

    #[test]
    fn shape_errors_are_the_models_and_member_errors_name_the_member() {
        let e = RaidBackend::new(
            RaidLevel::Raid5,
            4096,
            ReadPolicy::default(),
            ram_members(2, 1 << 20, &[]),
        )
        .err()
        .unwrap();
        assert_eq!(e.key(), "members");
        assert_eq!(e.expected, "at least 3 devices for raid5");
        let e = RaidBackend::new(
            RaidLevel::Raid5,
            4096,
            ReadPolicy::default(),
            ram_members(4, 1 << 20, &[0, 2]),
        )
        .err()
        .unwrap();
        assert!(e.expected.contains("at most 1 failed member"), "{e}");
        // A failed member's configured size counts; IOs past the end fail.
        let members = vec![
            RaidMember::Store(Box::new(RamBackend::new(1 << 20))),
            RaidMember::Store(Box::new(RamBackend::new(1 << 20))),
            RaidMember::Failed {
                what: "x".into(),
                capacity_bytes: Some(1 << 20),
            },
        ];
        let r = RaidBackend::new(RaidLevel::Raid5, 4096, ReadPolicy::default(), members).unwrap();
        assert_eq!(r.capacity_bytes(), 2 << 20);
        assert!(
            r.describe().contains("[2] failed, not opened: x"),
            "{}",
            r.describe()
        );
        let e = r.write_at(&[0; 512], 2 << 20).unwrap_err();
        assert!(e.to_string().contains("beyond the end"), "{e}");
    }
}
