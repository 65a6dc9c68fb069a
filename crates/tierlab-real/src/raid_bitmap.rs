//! A write-intent bitmap for a real RAID (md's `--bitmap=FILE`): it closes
//! the RAID 5 write hole left by a crash in the middle of a stripe write.
//!
//! **Why.** A stripe write lands its data units and its parity one after
//! the other. A crash between them leaves the stripe's parity stale. Every
//! read still returns the right data, but once a member fails, its units
//! in that stripe are rebuilt from the stale parity, so *flushed* data of
//! a member nobody wrote is rebuilt wrong (docs/crash-consistency.md
//! measures it).
//!
//! **How.** The member address space is cut into regions of
//! `chunk_bytes` (one bit each). Before the first write to a region whose
//! bit is clear, the bit is set and the bitmap page is written and flushed,
//! so no member write can land in a region the bitmap says is clean. A
//! bit is cleared lazily: by an array flush, once every member has been
//! flushed, if no write to the region started since the flush began. At
//! open, every region whose bit is set is resynchronised: RAID 5 parity is
//! recomputed from the data units, mirror copies are copied from the first
//! survivor. A region with a write in flight at the crash is thus made
//! consistent before anything can be rebuilt from it.
//!
//! **Format** (version 1, in a store of its own, 4 KiB pages):
//! - page 0, the header: magic `TLRBMAP1`, version, crc32c, and the
//!   geometry (level, members, stripe unit, chunk, member span, bits), then
//!   at byte 64 a u32 count and from byte 72 that many member volume ids
//!   (16 bytes each: two u64, high half first; zeros for a member that
//!   could not tell). It is written once, when the bitmap is made (after
//!   the bit pages are zeroed and flushed); a header that is damaged, made
//!   for another geometry or for other members (their volume ids,
//!   `tierlab_core::volume`) is refused before anything is written, never
//!   reinterpreted. A header made before ids were recorded (count 0) is
//!   not bound to its members.
//! - pages 1..: each a crc32c, its page number, then 32,704 bits. A page
//!   whose crc does not match (a torn write) counts as all bits set; an
//!   all-zero page (never written) as none set — a bit is only relied on
//!   once its page's write was flushed.

use std::io;
use std::sync::{Mutex, PoisonError};

use tierlab_core::volume::{Bond, VolumeId, VolumeLabel, bind};
use tierlab_devices::raid::RaidLevel;

use crate::backend::Backend;

pub const PAGE_BYTES: usize = 4096;
const MAGIC: &[u8; 8] = b"TLRBMAP1";
const VERSION: u32 = 1;
/// Bytes of a bit page before its bits: crc32c, page number.
const PAGE_HEAD_BYTES: usize = 8;
pub const BITS_PER_PAGE: u64 = ((PAGE_BYTES - PAGE_HEAD_BYTES) * 8) as u64;
/// The default region a bit covers, per member.
pub const DEFAULT_CHUNK_BYTES: u64 = 4 << 20;
/// Regions at most (12 bytes of state each in memory): 4 MiB regions of
/// 16 TiB members.
pub const MAX_BITS: u64 = 1 << 22;
/// Where the header's member ids start, and how many fit (an array of
/// more members records none: it is not bound).
const IDS_AT: usize = 72;
pub const MAX_RECORDED_MEMBERS: usize = (PAGE_BYTES - IDS_AT) / 16;

/// A member as the bitmap checks it: its volume id now (None: it cannot
/// tell, as RAM) and how messages name it; a failed member is not checked.
#[derive(Clone, Debug)]
pub struct MemberLabel {
    pub what: String,
    pub label: Option<VolumeLabel>,
    pub failed: bool,
}

/// A member that is not the volume the bitmap was made over.
#[derive(Clone, Debug)]
pub struct MemberMismatch {
    pub member: usize,
    pub what: String,
    pub recorded: VolumeId,
    pub found: VolumeLabel,
    /// The member position that recorded the id found here, if any (the
    /// members are listed in another order).
    pub recorded_at: Option<usize>,
}

/// Bytes of store a bitmap needs over members of `member_span_bytes` cut
/// into regions of `chunk_bytes` (an upper bound for any span up to it).
pub fn store_bytes_for(member_span_bytes: u64, chunk_bytes: u64) -> u64 {
    let bits = member_span_bytes.div_ceil(chunk_bytes.max(1));
    (1 + bits.div_ceil(BITS_PER_PAGE)) * PAGE_BYTES as u64
}

/// Why a write-intent bitmap was refused or failed: each names the
/// bitmap's store (`what`, as `Backend::describe` says it).
#[derive(Debug)]
pub enum BitmapError {
    /// More regions than the bitmap keeps in memory.
    TooManyRegions {
        what: String,
        regions: u64,
        chunk_bytes: u64,
        /// The smallest region that fits.
        chunk_bytes_min: u64,
    },
    /// The store is smaller than the bitmap.
    TooSmall {
        what: String,
        have_bytes: u64,
        need_bytes: u64,
        regions: u64,
        chunk_bytes: u64,
    },
    /// The store failed a read, write or sync.
    Io { what: String, source: io::Error },
    /// The header is not a bitmap's, is damaged, or of another version:
    /// refused, never reinterpreted.
    Header {
        what: String,
        problem: HeaderProblem,
    },
    /// The header describes another array: what differs, in words
    /// (`bitmap_chunk_bytes 65536 (this config: 131072)`).
    Foreign {
        what: String,
        differences: Vec<String>,
    },
    /// The header was made over other members (their volume ids): refused
    /// before anything is written — its bits say nothing of these members'
    /// unfinished writes, and a resync by them would rewrite these members.
    OtherMembers {
        what: String,
        mismatches: Vec<MemberMismatch>,
    },
    /// The regions the bitmap marked could not be resynchronised.
    Resync {
        what: String,
        regions: usize,
        source: io::Error,
    },
    /// The array cannot have this bitmap (raid0; a region that is not a
    /// multiple of the stripe unit): keys relative to the array's table.
    Geometry(tierlab_core::ParamError),
}

/// What is wrong with a stored bitmap header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderProblem {
    NoMagic,
    BadCrc,
    Version(u32),
}

impl std::fmt::Display for BitmapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BitmapError::TooManyRegions {
                what,
                regions,
                chunk_bytes,
                chunk_bytes_min,
            } => write!(
                f,
                "write-intent bitmap {what}: {regions} regions of {chunk_bytes} bytes per member \
                 is more than the {MAX_BITS} this bitmap keeps in memory; give a bigger \
                 bitmap_chunk_bytes (at least {chunk_bytes_min})"
            ),
            BitmapError::TooSmall {
                what,
                have_bytes,
                need_bytes,
                regions,
                chunk_bytes,
            } => write!(
                f,
                "write-intent bitmap {what}: holds {have_bytes} bytes; this array's bitmap needs \
                 {need_bytes} ({regions} bits of {chunk_bytes} bytes per member)"
            ),
            BitmapError::Io { what, source } => write!(f, "write-intent bitmap {what}: {source}"),
            BitmapError::Header { what, problem } => {
                write!(f, "write-intent bitmap {what}: ")?;
                match problem {
                    HeaderProblem::NoMagic => {
                        f.write_str("its header is not a tierlab RAID bitmap's (no TLRBMAP1 magic)")
                    }
                    HeaderProblem::BadCrc => {
                        f.write_str("its header fails its crc32c check (damaged)")
                    }
                    HeaderProblem::Version(v) => write!(
                        f,
                        "its format version is {v}; this tierlab reads version {VERSION}"
                    ),
                }?;
                f.write_str(
                    "; refusing to use it. If the array was stopped cleanly, delete the file to \
                     start a new bitmap",
                )
            }
            BitmapError::Foreign { what, differences } => write!(
                f,
                "write-intent bitmap {what} was made for another array: {}; give this array its \
                 own bitmap file",
                differences.join(", ")
            ),
            BitmapError::OtherMembers { what, mismatches } => {
                write!(f, "write-intent bitmap {what} was made for other members: ")?;
                for (i, m) in mismatches.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(
                        f,
                        "member {} ({}) was volume {} when the bitmap was made and is volume {} \
                         now ({})",
                        m.member,
                        m.what,
                        m.recorded,
                        m.found.id,
                        m.found.kind.as_str()
                    )?;
                    if let Some(at) = m.recorded_at {
                        write!(f, " — the bitmap recorded that volume as member {at}")?;
                    }
                    if m.found.created_now {
                        f.write_str(
                            ", and had no tierlab volume id until now (a new file, or a \
                                     copy made without its extended attributes)",
                        )?;
                    }
                }
                f.write_str(
                    ". Refused before any data was written (no resync): its bits say nothing of \
                     these members' unfinished writes. List the members this bitmap was made \
                     for, in their order; or, to use these members, delete the bitmap file \
                     (after a crash of these members that accepts the write hole of the regions \
                     they were writing)",
                )
            }
            BitmapError::Resync {
                what,
                regions,
                source,
            } => write!(
                f,
                "resynchronising {regions} region(s) that {what} marks as written when the array \
                 stopped: {source}"
            ),
            BitmapError::Geometry(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BitmapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BitmapError::Io { source, .. } | BitmapError::Resync { source, .. } => Some(source),
            BitmapError::Geometry(e) => Some(e),
            _ => None,
        }
    }
}

/// What the bitmap describes: refused at open when it differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub level: RaidLevel,
    pub members: u32,
    pub stripe_unit_bytes: u64,
    pub chunk_bytes: u64,
    /// Bytes of each member the array uses.
    pub member_span_bytes: u64,
}

impl Geometry {
    pub fn bits(&self) -> u64 {
        self.member_span_bytes.div_ceil(self.chunk_bytes)
    }
    fn pages(&self) -> u64 {
        self.bits().div_ceil(BITS_PER_PAGE)
    }
    /// Bytes of store the bitmap needs.
    pub fn store_bytes(&self) -> u64 {
        store_bytes_for(self.member_span_bytes, self.chunk_bytes)
    }
    pub(crate) fn level_code(level: RaidLevel) -> u32 {
        match level {
            RaidLevel::Raid0 => 0,
            RaidLevel::Raid1 => 1,
            RaidLevel::Raid5 => 5,
            RaidLevel::Raid10 => 10,
        }
    }
    /// The header page, recording `ids` (one per member; none if more
    /// than fit).
    fn encode(&self, ids: &[Option<VolumeId>]) -> [u8; PAGE_BYTES] {
        let mut p = [0u8; PAGE_BYTES];
        if ids.len() <= MAX_RECORDED_MEMBERS {
            p[64..68].copy_from_slice(&(ids.len() as u32).to_le_bytes());
            for (i, id) in ids.iter().enumerate() {
                let [hi, lo] = VolumeId::to_fields(*id);
                let at = IDS_AT + 16 * i;
                p[at..at + 8].copy_from_slice(&hi.to_le_bytes());
                p[at + 8..at + 16].copy_from_slice(&lo.to_le_bytes());
            }
        }
        p[0..8].copy_from_slice(MAGIC);
        p[8..12].copy_from_slice(&VERSION.to_le_bytes());
        // 12..16: crc32c of the page with these four bytes zero.
        p[16..20].copy_from_slice(&Self::level_code(self.level).to_le_bytes());
        p[20..24].copy_from_slice(&self.members.to_le_bytes());
        p[24..32].copy_from_slice(&self.stripe_unit_bytes.to_le_bytes());
        p[32..40].copy_from_slice(&self.chunk_bytes.to_le_bytes());
        p[40..48].copy_from_slice(&self.member_span_bytes.to_le_bytes());
        p[48..56].copy_from_slice(&self.bits().to_le_bytes());
        let crc = crc32c::crc32c(&p);
        p[12..16].copy_from_slice(&crc.to_le_bytes());
        p
    }
    /// The differences between a stored header and this geometry, in words
    /// (empty: it matches), or why the header cannot be read.
    fn compare(&self, p: &[u8]) -> Result<Vec<String>, HeaderProblem> {
        if &p[0..8] != MAGIC {
            return Err(HeaderProblem::NoMagic);
        }
        let u32_at = |a: usize| u32::from_le_bytes(p[a..a + 4].try_into().unwrap());
        let u64_at = |a: usize| u64::from_le_bytes(p[a..a + 8].try_into().unwrap());
        let mut copy = p[..PAGE_BYTES].to_vec();
        copy[12..16].fill(0);
        if crc32c::crc32c(&copy) != u32_at(12) {
            return Err(HeaderProblem::BadCrc);
        }
        if u32_at(8) != VERSION {
            return Err(HeaderProblem::Version(u32_at(8)));
        }
        let mut diff = Vec::new();
        let mut cmp = |what: &str, stored: u64, ours: u64| {
            if stored != ours {
                diff.push(format!("{what} {stored} (this config: {ours})"));
            }
        };
        cmp(
            "RAID level",
            u32_at(16) as u64,
            Self::level_code(self.level) as u64,
        );
        cmp("members", u32_at(20) as u64, self.members as u64);
        cmp("stripe_unit_bytes", u64_at(24), self.stripe_unit_bytes);
        cmp("bitmap_chunk_bytes", u64_at(32), self.chunk_bytes);
        cmp("bytes used per member", u64_at(40), self.member_span_bytes);
        Ok(diff)
    }
}

/// The member ids a (valid) header records: empty for a header made
/// before they were.
fn recorded_ids(p: &[u8]) -> Vec<Option<VolumeId>> {
    let n = u32::from_le_bytes(p[64..68].try_into().unwrap()) as usize;
    let u64_at = |a: usize| u64::from_le_bytes(p[a..a + 8].try_into().unwrap());
    (0..n.min(MAX_RECORDED_MEMBERS))
        .map(|i| {
            let at = IDS_AT + 16 * i;
            VolumeId::from_fields([u64_at(at), u64_at(at + 8)])
        })
        .collect()
}

/// The members that are not the volumes `recorded` names (failed members
/// and members that cannot tell are not checked; nor is a bitmap that
/// recorded nothing).
fn member_mismatches(
    recorded: &[Option<VolumeId>],
    members: &[MemberLabel],
) -> Vec<MemberMismatch> {
    let mut out = Vec::new();
    for (i, m) in members.iter().enumerate() {
        if m.failed {
            continue;
        }
        let r = recorded.get(i).copied().flatten();
        if let Err(e) = bind(r, m.label, Bond::Data) {
            out.push(MemberMismatch {
                member: i,
                what: m.what.clone(),
                recorded: e.recorded,
                found: e.found,
                recorded_at: recorded.iter().position(|x| *x == Some(e.found.id)),
            });
        }
    }
    out
}

struct State {
    /// The bits as last written (set before any write to the region).
    bits: Vec<u64>,
    /// Member writes in progress per region.
    pending: Vec<u32>,
    /// Bumped by every write that starts in a region: a flush clears a bit
    /// only if no write started there while the members were flushed.
    started: Vec<u64>,
    /// Regions where a member write failed part-way: their copies or
    /// parity may disagree, so no flush clears their bit (the next open
    /// resynchronises them).
    needs_resync: std::collections::BTreeSet<u64>,
    sets: u64,
    clears: u64,
    page_writes: u64,
    flushes: u64,
}

impl State {
    fn get(&self, b: u64) -> bool {
        self.bits[(b / 64) as usize] >> (b % 64) & 1 == 1
    }
    fn put(&mut self, b: u64, on: bool) {
        let w = &mut self.bits[(b / 64) as usize];
        if on {
            *w |= 1 << (b % 64);
        } else {
            *w &= !(1 << (b % 64));
        }
    }
}

/// Counters the array reports (docs/real.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BitmapCounters {
    pub bits_set: u64,
    pub bits_cleared: u64,
    pub page_writes: u64,
    pub flushes: u64,
}

pub struct Bitmap {
    geo: Geometry,
    store: Box<dyn Backend>,
    what: String,
    /// The member ids the header records (empty: none).
    recorded: Vec<Option<VolumeId>>,
    state: Mutex<State>,
    /// Test only: the bit page is not flushed before the member writes
    /// (the checker must catch it).
    pub broken_skip_flush: bool,
}

/// Regions found dirty at open, for the array to resynchronise.
pub struct Opened {
    pub bitmap: Bitmap,
    pub dirty: Vec<u64>,
}

impl Bitmap {
    /// Opens the bitmap in `store` (made fresh if the store is all zeros,
    /// recording the `members`' volume ids) and lists the regions to
    /// resynchronise; a bitmap made over other members is refused before
    /// anything is written.
    pub fn open(
        geo: Geometry,
        store: Box<dyn Backend>,
        members: &[MemberLabel],
    ) -> Result<Opened, BitmapError> {
        assert_eq!(members.len(), geo.members as usize, "one label per member");
        let what = store.describe();
        if geo.bits() > MAX_BITS {
            return Err(BitmapError::TooManyRegions {
                what,
                regions: geo.bits(),
                chunk_bytes: geo.chunk_bytes,
                chunk_bytes_min: geo.member_span_bytes.div_ceil(MAX_BITS),
            });
        }
        let need = geo.store_bytes();
        if store.capacity_bytes() < need {
            return Err(BitmapError::TooSmall {
                what,
                have_bytes: store.capacity_bytes(),
                need_bytes: need,
                regions: geo.bits(),
                chunk_bytes: geo.chunk_bytes,
            });
        }
        let io = |source: io::Error| BitmapError::Io {
            what: what.clone(),
            source,
        };
        let mut header = vec![0u8; PAGE_BYTES];
        store.read_at(&mut header, 0).map_err(io)?;
        let words = geo.bits().div_ceil(64) as usize;
        let mut state = State {
            bits: vec![0; words],
            pending: vec![0; geo.bits() as usize],
            started: vec![0; geo.bits() as usize],
            needs_resync: Default::default(),
            sets: 0,
            clears: 0,
            page_writes: 0,
            flushes: 0,
        };
        let mut dirty = Vec::new();
        let recorded;
        if header.iter().all(|&b| b == 0) {
            // New: zero the bit pages, make them durable, then the header.
            let ids: Vec<Option<VolumeId>> =
                members.iter().map(|m| m.label.map(|l| l.id)).collect();
            let zeros = vec![0u8; (geo.pages() as usize) * PAGE_BYTES];
            store.write_at(&zeros, PAGE_BYTES as u64).map_err(io)?;
            store.flush().map_err(io)?;
            store.write_at(&geo.encode(&ids), 0).map_err(io)?;
            store.flush().map_err(io)?;
            recorded = if ids.len() <= MAX_RECORDED_MEMBERS {
                ids
            } else {
                Vec::new()
            };
        } else {
            let diff = geo
                .compare(&header)
                .map_err(|problem| BitmapError::Header {
                    what: what.clone(),
                    problem,
                })?;
            if !diff.is_empty() {
                return Err(BitmapError::Foreign {
                    what,
                    differences: diff,
                });
            }
            recorded = recorded_ids(&header);
            let mismatches = member_mismatches(&recorded, members);
            if !mismatches.is_empty() {
                return Err(BitmapError::OtherMembers { what, mismatches });
            }
            let mut page = vec![0u8; PAGE_BYTES];
            for pg in 0..geo.pages() {
                store
                    .read_at(&mut page, (1 + pg) * PAGE_BYTES as u64)
                    .map_err(io)?;
                let first = pg * BITS_PER_PAGE;
                let last = (first + BITS_PER_PAGE).min(geo.bits());
                if page.iter().all(|&b| b == 0) {
                    continue;
                }
                let ok = {
                    let mut c = page.clone();
                    c[0..4].fill(0);
                    crc32c::crc32c(&c) == u32::from_le_bytes(page[0..4].try_into().unwrap())
                        && u32::from_le_bytes(page[4..8].try_into().unwrap()) as u64 == pg
                };
                for b in first..last {
                    let i = (b - first) as usize;
                    if !ok || page[PAGE_HEAD_BYTES + i / 8] >> (i % 8) & 1 == 1 {
                        dirty.push(b);
                    }
                }
            }
            // The bits stay set (in memory and on the store) until the
            // array has resynchronised the regions: `clear_resynced`.
            for &b in &dirty {
                state.put(b, true);
            }
        }
        Ok(Opened {
            bitmap: Bitmap {
                geo,
                store,
                what,
                recorded,
                state: Mutex::new(state),
                broken_skip_flush: false,
            },
            dirty,
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The volume id the header records for `member` (None: none
    /// recorded, or the member could not tell).
    pub fn recorded_member_id(&self, member: usize) -> Option<VolumeId> {
        self.recorded.get(member).copied().flatten()
    }

    pub fn describe(&self) -> String {
        format!(
            "write-intent bitmap {} ({} KiB regions)",
            self.what,
            self.geo.chunk_bytes / 1024
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The region a member offset is in.
    pub fn region(&self, member_offset: u64) -> u64 {
        member_offset / self.geo.chunk_bytes
    }

    fn page_bytes(&self, st: &State, pg: u64) -> Vec<u8> {
        let mut p = vec![0u8; PAGE_BYTES];
        p[4..8].copy_from_slice(&(pg as u32).to_le_bytes());
        let first = pg * BITS_PER_PAGE;
        let last = (first + BITS_PER_PAGE).min(self.geo.bits());
        for b in first..last {
            if st.get(b) {
                let i = (b - first) as usize;
                p[PAGE_HEAD_BYTES + i / 8] |= 1 << (i % 8);
            }
        }
        let crc = crc32c::crc32c(&p);
        p[0..4].copy_from_slice(&crc.to_le_bytes());
        p
    }

    fn write_page(&self, st: &mut State, pg: u64) -> io::Result<()> {
        let p = self.page_bytes(st, pg);
        st.page_writes += 1;
        self.store
            .write_at(&p, (1 + pg) * PAGE_BYTES as u64)
            .map_err(|e| self.err(e))
    }

    fn err(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("write-intent bitmap {}: {e}", self.what))
    }

    /// Before a member write to `region`: sets its bit durably if it is
    /// clear. Pair with `end_write`.
    pub fn start_write(&self, region: u64) -> io::Result<()> {
        let mut st = self.lock();
        st.pending[region as usize] += 1;
        st.started[region as usize] += 1;
        if !st.get(region) {
            st.put(region, true);
            st.sets += 1;
            let r = self
                .write_page(&mut st, region / BITS_PER_PAGE)
                .and_then(|()| {
                    if self.broken_skip_flush {
                        return Ok(());
                    }
                    st.flushes += 1;
                    self.store.flush().map_err(|e| self.err(e))
                });
            if let Err(e) = r {
                // Not known durable: the next write tries again.
                st.put(region, false);
                st.pending[region as usize] -= 1;
                return Err(e);
            }
        }
        Ok(())
    }

    /// A member write in `region` failed part-way: keep its bit set until
    /// the region is resynchronised at the next open.
    pub fn needs_resync(&self, region: u64) {
        self.lock().needs_resync.insert(region);
    }

    pub fn end_write(&self, region: u64) {
        let mut st = self.lock();
        st.pending[region as usize] -= 1;
    }

    /// The first half of an array flush: the set regions with no write in
    /// progress, and how many writes each had started.
    pub fn flush_candidates(&self) -> Vec<(u64, u64)> {
        let st = self.lock();
        let mut out = Vec::new();
        // Set bits only: a clean array's flush scans words, not regions.
        for (w, &word) in st.bits.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                let b = w as u64 * 64 + rest.trailing_zeros() as u64;
                rest &= rest - 1;
                if st.pending[b as usize] == 0 && !st.needs_resync.contains(&b) {
                    out.push((b, st.started[b as usize]));
                }
            }
        }
        out
    }

    /// The second half, after every member was flushed: clears the bits of
    /// `candidates` no write touched since, and writes their pages (not
    /// flushed: a clear that is lost costs only a resynchronisation).
    pub fn clear_flushed(&self, candidates: &[(u64, u64)]) -> io::Result<()> {
        let mut st = self.lock();
        let mut pages = Vec::new();
        for &(b, started) in candidates {
            if st.get(b) && st.pending[b as usize] == 0 && st.started[b as usize] == started {
                st.put(b, false);
                st.clears += 1;
                let pg = b / BITS_PER_PAGE;
                if pages.last() != Some(&pg) {
                    pages.push(pg);
                }
            }
        }
        for pg in pages {
            self.write_page(&mut st, pg)?;
        }
        Ok(())
    }

    /// After the array resynchronised `regions` (and flushed its members):
    /// clears their bits durably.
    pub fn clear_resynced(&self, regions: &[u64]) -> io::Result<()> {
        let mut st = self.lock();
        let mut pages: Vec<u64> = Vec::new();
        for &b in regions {
            st.put(b, false);
            pages.push(b / BITS_PER_PAGE);
        }
        pages.dedup();
        for pg in pages {
            self.write_page(&mut st, pg)?;
        }
        st.flushes += 1;
        self.store.flush().map_err(|e| self.err(e))
    }

    pub fn flush_store(&self) -> io::Result<()> {
        self.lock().flushes += 1;
        self.store.flush().map_err(|e| self.err(e))
    }

    /// Regions waiting for a resynchronisation at the next open (a member
    /// write failed there).
    pub fn regions_needing_resync(&self) -> u64 {
        self.lock().needs_resync.len() as u64
    }

    pub fn counters(&self) -> BitmapCounters {
        let st = self.lock();
        BitmapCounters {
            bits_set: st.sets,
            bits_cleared: st.clears,
            page_writes: st.page_writes,
            flushes: st.flushes,
        }
    }

    /// Set bits now (tests, counters).
    pub fn dirty_regions(&self) -> u64 {
        let st = self.lock();
        st.bits.iter().map(|w| w.count_ones() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RamBackend;

    fn unlabelled(n: usize) -> Vec<MemberLabel> {
        (0..n)
            .map(|i| MemberLabel {
                what: format!("m{i}"),
                label: None,
                failed: false,
            })
            .collect()
    }

    fn bitmap() -> Bitmap {
        let geo = Geometry {
            level: RaidLevel::Raid5,
            members: 3,
            stripe_unit_bytes: 4096,
            chunk_bytes: 65536,
            member_span_bytes: 1 << 20,
        };
        Bitmap::open(
            geo,
            Box::new(RamBackend::new(geo.store_bytes())),
            &unlabelled(3),
        )
        .unwrap()
        .bitmap
    }

    /// A write that starts (and even ends) while the members are being
    /// flushed is not covered by that flush: its region keeps its bit.
    #[test]
    fn a_write_during_the_member_flush_keeps_its_bit() {
        let b = bitmap();
        b.start_write(3).unwrap();
        b.end_write(3);
        let candidates = b.flush_candidates();
        assert_eq!(candidates.len(), 1);
        // ...the members are flushed while another write comes and goes...
        b.start_write(3).unwrap();
        b.end_write(3);
        b.clear_flushed(&candidates).unwrap();
        assert_eq!(b.dirty_regions(), 1);
        // The next flush covers it.
        let candidates = b.flush_candidates();
        b.clear_flushed(&candidates).unwrap();
        assert_eq!(b.dirty_regions(), 0);
    }

    /// A write in progress when the flush begins is no candidate at all.
    #[test]
    fn a_write_in_progress_is_not_a_candidate() {
        let b = bitmap();
        b.start_write(0).unwrap();
        b.start_write(9).unwrap();
        b.end_write(9);
        let c = b.flush_candidates();
        assert_eq!(c.iter().map(|x| x.0).collect::<Vec<_>>(), vec![9]);
        b.clear_flushed(&c).unwrap();
        assert_eq!(b.dirty_regions(), 1);
        b.end_write(0);
    }

    #[test]
    fn too_many_regions_are_refused_with_the_chunk_to_use() {
        let geo = Geometry {
            level: RaidLevel::Raid1,
            members: 2,
            stripe_unit_bytes: 4096,
            chunk_bytes: 4096,
            member_span_bytes: 1 << 40,
        };
        let e = Bitmap::open(geo, Box::new(RamBackend::new(4096)), &unlabelled(2))
            .err()
            .unwrap();
        assert!(
            matches!(
                e,
                BitmapError::TooManyRegions {
                    chunk_bytes_min: 262144,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("give a bigger bitmap_chunk_bytes (at least 262144)"),
            "{e}"
        );
    }
}
