//! Persistent slot metadata for caches on a device: which cache slot holds
//! which block, kept crash-safe on the cache device itself. One
//! implementation shared by HSWD's PCache and the page cache's persistent
//! mode (docs/crash-consistency.md has the formats).
//!
//! **Pages.** The area is 4 KiB pages — page 0 a policy's header, pages
//! 1.. the per-slot entries — each kept in **two copies** (copy `c` of page
//! `p` at `base + (2p + c) × 4096`). A page is rewritten into the copy that
//! does not hold its newest version, with a sequence number one higher, so
//! a torn or lost write leaves the previous version intact; recovery takes,
//! per page, the valid copy with the highest sequence. Every page starts
//! with a 32-byte head, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic (the policy's header or entries magic) |
//! | 4..6 | format version (1) |
//! | 6..8 | 0 |
//! | 8..16 | page number |
//! | 16..24 | sequence number |
//! | 24..28 | crc32c of the whole page with these four bytes zero |
//! | 28..32 | 0 |
//!
//! A header's payload is a policy's list of u64 fields; an entry page's is
//! one entry per slot, `entry_bytes` each (at least 16): u64 block + 1 (0:
//! the slot is free), u64 the commit sequence that wrote it (when two
//! slots claim one block after a crash, the higher wins); with
//! `entry_bytes` ≥ 24, u64 flags ([`FLAG_DIRTY`]); the rest zero.
//!
//! **Disposable clean entries** ([`SlotTable::with_disposable_clean_entries`],
//! the page cache): after a crash only entries flagged dirty are
//! recovered — a clean one says only that the slot held a copy of a block
//! the backing device also holds, which nothing needs — so a slot whose
//! entries were never dirty on the device may take another block at once;
//! only a slot that may hold a durable *dirty* entry waits for its clear
//! to be durable. Without it (HSWD, where every cached block is dirty)
//! every entry counts.
//!
//! **Commits** ([`SlotTable`]): an entry is set only once its slot's data
//! landed; a commit first flushes the device (making that data, and the
//! previous commit's pages, durable), then writes the entry pages changed
//! since the last commit — their bytes taken when the commit began, so no
//! entry whose data landed later is written before that data is durable.
//! A slot whose block left the cache is reused only once its cleared entry
//! is durable (the flush of the commit after the one that wrote it), so no
//! crash finds an old entry over new data.

use std::collections::BTreeSet;

use tierlab_core::policy::{OpenError, StoreError, Stores};

pub const PAGE: usize = 4096;
const HEAD: usize = 32;
pub const VERSION: u16 = 1;
/// Sequence numbers (page and commit) at or above this are corrupt.
pub const MAX_SEQ: u64 = 1 << 62;
/// Smallest entry: block + commit sequence.
pub const MIN_ENTRY_BYTES: u64 = 16;
/// Smallest entry with flags: block + commit sequence + flags.
pub const FLAGGED_ENTRY_BYTES: u64 = 24;
/// Entry flag: the slot holds data newer than the block's copy on the
/// backing device (recovery copies it there).
pub const FLAG_DIRTY: u64 = 1;

/// Entries per metadata page.
pub fn entries_per_page(entry_bytes: u64) -> u64 {
    (PAGE - HEAD) as u64 / entry_bytes
}

/// Entry pages for `slots` slots.
pub fn entry_pages(slots: u64, entry_bytes: u64) -> u64 {
    slots.div_ceil(entries_per_page(entry_bytes))
}

/// Bytes of an area (header + entry pages, two copies each).
pub fn area_bytes(slots: u64, entry_bytes: u64) -> u64 {
    2 * (1 + entry_pages(slots, entry_bytes)) * PAGE as u64
}

/// Byte offset of copy `copy` of page `page`, from the area's start.
pub fn copy_offset(page: u64, copy: u8) -> u64 {
    (2 * page + copy as u64) * PAGE as u64
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn seal(page: &mut [u8], magic: &[u8; 4], page_no: u64, seq: u64) {
    page[0..4].copy_from_slice(magic);
    page[4..6].copy_from_slice(&VERSION.to_le_bytes());
    put_u64(page, 8, page_no);
    put_u64(page, 16, seq);
    page[24..28].fill(0);
    let crc = crc32c::crc32c(page);
    page[24..28].copy_from_slice(&crc.to_le_bytes());
}

/// A copy's sequence, or why it is not trusted.
fn check(page: &[u8], magic: &[u8; 4], page_no: u64) -> Result<u64, &'static str> {
    if page.iter().all(|&b| b == 0) {
        return Err("never written");
    }
    if &page[0..4] != magic {
        return Err("wrong magic");
    }
    if u16::from_le_bytes([page[4], page[5]]) != VERSION {
        return Err("unknown format version");
    }
    if u64_at(page, 8) != page_no {
        return Err("another page's copy");
    }
    let stored = u32::from_le_bytes(page[24..28].try_into().unwrap());
    let mut copy = page.to_vec();
    copy[24..28].fill(0);
    if crc32c::crc32c(&copy) != stored {
        return Err("checksum mismatch (torn or corrupt)");
    }
    let seq = u64_at(page, 16);
    // Sequences only grow by one per write: one this large is corrupt (and
    // would wrap).
    if seq >= MAX_SEQ {
        return Err("an impossible sequence number");
    }
    Ok(seq)
}

/// A header page (page 0): `fields` as u64s after the head.
pub fn encode_header(magic: &[u8; 4], fields: &[u64], seq: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAGE];
    for (i, v) in fields.iter().enumerate() {
        put_u64(&mut p, HEAD + 8 * i, *v);
    }
    seal(&mut p, magic, 0, seq);
    p
}

/// The first `n` fields of a valid header copy, and its sequence.
pub fn decode_header(
    magic: &[u8; 4],
    page: &[u8],
    n: usize,
) -> Result<(Vec<u64>, u64), &'static str> {
    let seq = check(page, magic, 0)?;
    Ok(((0..n).map(|i| u64_at(page, HEAD + 8 * i)).collect(), seq))
}

/// Per slot: (block number + 1, commit sequence); (0, 0) is a free slot.
pub type Entries = Vec<(u64, u64)>;

/// Entry page `page_no` (1..) holding `entries` (block + 1, commit seq)
/// for its slots.
pub fn encode_entries(
    magic: &[u8; 4],
    page_no: u64,
    seq: u64,
    entry_bytes: u64,
    entries: &[(u64, u64)],
) -> Vec<u8> {
    encode_flagged_entries(magic, page_no, seq, entry_bytes, entries, &[])
}

/// As [`encode_entries`], with each slot's flags (`entry_bytes` ≥ 24;
/// `flags` empty: all zero).
pub fn encode_flagged_entries(
    magic: &[u8; 4],
    page_no: u64,
    seq: u64,
    entry_bytes: u64,
    entries: &[(u64, u64)],
    flags: &[u64],
) -> Vec<u8> {
    assert!(flags.is_empty() || flags.len() == entries.len());
    assert!(flags.iter().all(|&f| f == 0) || entry_bytes >= FLAGGED_ENTRY_BYTES);
    let mut p = vec![0u8; PAGE];
    for (i, &(block_plus_one, cseq)) in entries.iter().enumerate() {
        let at = HEAD + i * entry_bytes as usize;
        put_u64(&mut p, at, block_plus_one);
        put_u64(&mut p, at + 8, cseq);
        if let Some(&f) = flags.get(i) {
            put_u64(&mut p, at + 16, f);
        }
    }
    seal(&mut p, magic, page_no, seq);
    p
}

/// The `n` entries of a valid copy, and its sequence.
pub fn decode_entries(
    magic: &[u8; 4],
    page: &[u8],
    page_no: u64,
    entry_bytes: u64,
    n: usize,
) -> Result<(Entries, u64), &'static str> {
    let seq = check(page, magic, page_no)?;
    let entries = (0..n)
        .map(|i| {
            let at = HEAD + i * entry_bytes as usize;
            (u64_at(page, at), u64_at(page, at + 8))
        })
        .collect();
    Ok((entries, seq))
}

/// Each slot's flags on a page [`decode_entries`] accepted (zeros when
/// entries have no flags word).
fn decode_flags(page: &[u8], entry_bytes: u64, n: usize) -> Vec<u64> {
    if entry_bytes < FLAGGED_ENTRY_BYTES {
        return vec![0; n];
    }
    (0..n)
        .map(|i| u64_at(page, HEAD + i * entry_bytes as usize + 16))
        .collect()
}

/// Of a page's two copies, the valid one with the highest sequence:
/// (copy, its result).
pub fn newest<T>(
    a: Result<(T, u64), &'static str>,
    b: Result<(T, u64), &'static str>,
) -> Option<(u8, T, u64)> {
    match (a, b) {
        (Ok((x, sa)), Ok((y, sb))) => Some(if sb > sa { (1, y, sb) } else { (0, x, sa) }),
        (Ok((x, s)), Err(_)) => Some((0, x, s)),
        (Err(_), Ok((y, s))) => Some((1, y, s)),
        (Err(_), Err(_)) => None,
    }
}

/// The commit running now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitState {
    Idle,
    /// The commit's device flush is in flight.
    Flushing,
    /// Entry page writes in flight.
    Writing(u32),
}

/// A metadata page write a commit asks for: where (bytes from the device's
/// start) and the page (None in simulation, which moves no data).
pub struct PageWrite {
    pub page: u64,
    pub offset_bytes: u64,
    pub bytes: Option<Vec<u8>>,
}

/// What the entry pages hold or are about to, and the commit protocol
/// over them (module docs). The policy issues the IOs: it calls `begin`
/// and flushes its device, `flushed` when that flush completes and writes
/// the pages it returns, `page_written` as each completes.
pub struct SlotTable {
    magic: [u8; 4],
    /// Where the area starts on the device (page 0, copy 0).
    pub base_bytes: u64,
    pub entry_bytes: u64,
    /// Per slot: (block + 1, commit sequence) as its entry should read.
    entries: Vec<(u64, u64)>,
    /// Per slot: its entry's flags (all zero without a flags word).
    flags: Vec<u64>,
    /// Entries without `FLAG_DIRTY` are not recovered after a crash
    /// (module docs).
    disposable_clean: bool,
    /// Per slot: a started commit may have written an entry for it that a
    /// recovery would act on (a clear must then be durable before the
    /// slot is reused).
    maybe_on_disk: Vec<bool>,
    /// Per page (0: header): the sequence of its newest copy and which copy
    /// holds it (the next write goes to the other).
    page_seq: Vec<u64>,
    page_copy: Vec<u8>,
    /// Entry pages changed since the last commit began.
    dirty_pages: BTreeSet<u64>,
    /// Among those changes, one a recovery after a crash would see (an
    /// entry it acts on set, or one it might act on changed or cleared).
    recoverable_changes: bool,
    pub state: CommitState,
    /// The sequence the next commit writes into entries.
    pub next_commit: u64,
    /// Cleared slots: waiting for the next commit, in the running one,
    /// written and waiting for the next commit's flush to be durable.
    clear_next: Vec<u64>,
    clear_running: Vec<u64>,
    clear_written: Vec<u64>,
    release_at_flush: Vec<u64>,
    /// Disposable clean entries: slots whose entry a commit rewrites from
    /// dirty to clean, in the same stages as the clears — once the clean
    /// version is durable, a clear of the slot need not wait.
    demote_running: Vec<u64>,
    demote_written: Vec<u64>,
    demote_at_flush: Vec<u64>,
    pages_running: Vec<(u64, Option<Vec<u8>>)>,
    /// Commits begun.
    pub commits: u64,
}

/// Slots recovered from an area: per block the claim with the highest
/// commit sequence, (slot, block, commit) sorted by slot, and each claim's
/// flags (same order); and the slots of older claims, cleared durably by
/// `load`.
pub struct Loaded {
    pub claims: Vec<(u64, u64, u64)>,
    pub flags: Vec<u64>,
    pub losers: Vec<u64>,
}

impl SlotTable {
    pub fn new(magic: &[u8; 4], base_bytes: u64, slots: u64, entry_bytes: u64) -> SlotTable {
        let pages = 1 + entry_pages(slots, entry_bytes) as usize;
        SlotTable {
            magic: *magic,
            base_bytes,
            entry_bytes,
            entries: vec![(0, 0); slots as usize],
            flags: vec![0; slots as usize],
            disposable_clean: false,
            maybe_on_disk: vec![false; slots as usize],
            page_seq: vec![0; pages],
            page_copy: vec![1; pages],
            dirty_pages: BTreeSet::new(),
            recoverable_changes: false,
            state: CommitState::Idle,
            next_commit: 1,
            clear_next: Vec::new(),
            clear_running: Vec::new(),
            clear_written: Vec::new(),
            release_at_flush: Vec::new(),
            demote_running: Vec::new(),
            demote_written: Vec::new(),
            demote_at_flush: Vec::new(),
            pages_running: Vec::new(),
            commits: 0,
        }
    }

    /// Entries without `FLAG_DIRTY` are disposable (module docs): needs a
    /// flags word (`entry_bytes` ≥ 24).
    pub fn with_disposable_clean_entries(mut self) -> SlotTable {
        assert!(
            self.entry_bytes >= FLAGGED_ENTRY_BYTES,
            "flags need 24-byte entries"
        );
        self.disposable_clean = true;
        self
    }

    pub fn slots(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Slot `slot`'s flags as its entry should read.
    pub fn flags(&self, slot: u64) -> u64 {
        self.flags[slot as usize]
    }

    /// Whether a recovery after a crash would act on this entry.
    fn counts(&self, slot: usize) -> bool {
        self.entries[slot].0 != 0 && (!self.disposable_clean || self.flags[slot] & FLAG_DIRTY != 0)
    }

    pub fn pages(&self) -> u64 {
        self.page_seq.len() as u64
    }

    pub fn entry(&self, slot: u64) -> (u64, u64) {
        self.entries[slot as usize]
    }

    fn page_of_slot(&self, slot: u64) -> u64 {
        1 + slot / entries_per_page(self.entry_bytes)
    }

    /// Where the next version of `page` goes, and its sequence; counted as
    /// written (the caller writes it now).
    pub fn next_version(&mut self, page: u64) -> (u64, u64) {
        let p = page as usize;
        let seq = self.page_seq[p] + 1;
        let copy = 1 - self.page_copy[p];
        self.page_seq[p] = seq;
        self.page_copy[p] = copy;
        (self.base_bytes + copy_offset(page, copy), seq)
    }

    /// The sequence the next version of `page` will carry.
    pub fn next_seq(&self, page: u64) -> u64 {
        self.page_seq[page as usize] + 1
    }

    /// Slot `slot` holds `block`'s data (which has landed): its entry says
    /// so from the next commit on.
    pub fn set(&mut self, slot: u64, block: u64) {
        self.set_flagged(slot, block, 0);
    }

    /// As [`SlotTable::set`], with the entry's flags.
    pub fn set_flagged(&mut self, slot: u64, block: u64, flags: u64) {
        assert!(flags == 0 || self.entry_bytes >= FLAGGED_ENTRY_BYTES);
        let s = slot as usize;
        self.entries[s] = (block + 1, self.next_commit);
        self.flags[s] = flags;
        self.recoverable_changes |= self.maybe_on_disk[s] || self.counts(s);
        let page = self.page_of_slot(slot);
        self.dirty_pages.insert(page);
    }

    /// Slot `slot`'s block left it. True: the slot may take another block
    /// now (no entry of it can be on the device); false: it is reused only
    /// once `flushed` returns it.
    pub fn clear(&mut self, slot: u64) -> bool {
        let s = slot as usize;
        let was = self.entries[s].0 != 0;
        self.entries[s] = (0, 0);
        self.flags[s] = 0;
        if was {
            let page = self.page_of_slot(slot);
            self.dirty_pages.insert(page);
        }
        if !self.maybe_on_disk[s] {
            return true;
        }
        self.recoverable_changes = true;
        self.clear_next.push(slot);
        false
    }

    /// Whether the changes since the last commit began include one a
    /// recovery after a crash would see: without one, a commit would
    /// change nothing a crash can tell (the changed entries are clean,
    /// disposable ones).
    pub fn recoverable_changes_pending(&self) -> bool {
        self.recoverable_changes
    }

    /// Whether a commit would change anything (and none runs).
    pub fn due(&self) -> bool {
        self.state == CommitState::Idle
            && !(self.dirty_pages.is_empty()
                && self.clear_next.is_empty()
                && self.clear_written.is_empty())
    }

    /// Begins a commit (even one with nothing to write: a FLUSH may need
    /// its flush): the caller now flushes the device and calls `flushed`.
    pub fn begin(&mut self, with_bytes: bool) {
        assert_eq!(self.state, CommitState::Idle, "one commit at a time");
        self.state = CommitState::Flushing;
        self.recoverable_changes = false;
        self.next_commit += 1;
        self.commits += 1;
        self.clear_running = std::mem::take(&mut self.clear_next);
        self.release_at_flush = std::mem::take(&mut self.clear_written);
        self.demote_at_flush = std::mem::take(&mut self.demote_written);
        let per = entries_per_page(self.entry_bytes) as usize;
        let pages = std::mem::take(&mut self.dirty_pages);
        self.pages_running = pages
            .into_iter()
            .map(|page| {
                let first = (page as usize - 1) * per;
                let end = (first + per).min(self.entries.len());
                for s in first..end {
                    if self.counts(s) {
                        self.maybe_on_disk[s] = true;
                    } else if self.maybe_on_disk[s] && self.entries[s].0 != 0 {
                        self.demote_running.push(s as u64);
                    }
                }
                let bytes = with_bytes.then(|| self.encode_page(page, self.next_seq(page)));
                (page, bytes)
            })
            .collect();
    }

    /// The commit's flush completed: the slots whose cleared entries it
    /// made durable (free to reuse), and the page writes to issue now (then
    /// `page_written` for each; none: the commit is done already).
    pub fn flushed(&mut self) -> (Vec<u64>, Vec<PageWrite>) {
        assert_eq!(self.state, CommitState::Flushing);
        let released = std::mem::take(&mut self.release_at_flush);
        for &s in &released {
            if !self.counts(s as usize) {
                self.maybe_on_disk[s as usize] = false;
            }
        }
        // A clean version written by the last commit is durable now; a
        // slot cleared since is in the clear stages instead.
        for s in std::mem::take(&mut self.demote_at_flush) {
            let s = s as usize;
            if self.entries[s].0 != 0 && !self.counts(s) {
                self.maybe_on_disk[s] = false;
            }
        }
        let writes: Vec<PageWrite> = std::mem::take(&mut self.pages_running)
            .into_iter()
            .map(|(page, bytes)| {
                let (offset_bytes, seq) = self.next_version(page);
                debug_assert!(bytes.as_ref().is_none_or(|b| {
                    decode_entries(&self.magic, b, page, self.entry_bytes, 0).map(|x| x.1)
                        == Ok(seq)
                }));
                PageWrite {
                    page,
                    offset_bytes,
                    bytes,
                }
            })
            .collect();
        self.state = CommitState::Writing(writes.len() as u32);
        if writes.is_empty() {
            self.finish();
        }
        (released, writes)
    }

    /// A commit page write completed; true when it was the last (the
    /// commit is done: its entries are written, durable at the next flush).
    pub fn page_written(&mut self) -> bool {
        let CommitState::Writing(n) = self.state else {
            panic!("a metadata page write outside a commit");
        };
        if n > 1 {
            self.state = CommitState::Writing(n - 1);
            return false;
        }
        self.finish();
        true
    }

    fn finish(&mut self) {
        self.state = CommitState::Idle;
        let cleared = std::mem::take(&mut self.clear_running);
        self.clear_written.extend(cleared);
        let demoted = std::mem::take(&mut self.demote_running);
        self.demote_written.extend(demoted);
    }

    /// Slots waiting for a commit before they can be reused.
    pub fn slots_waiting(&self) -> usize {
        self.clear_next.len()
            + self.clear_running.len()
            + self.clear_written.len()
            + self.release_at_flush.len()
    }

    /// Clears `slots`' entries on the device now (their pages rewritten and
    /// synced), outside any commit: at open, before any IO.
    pub fn clear_now(
        &mut self,
        stores: &mut dyn Stores,
        device: usize,
        slots: &[u64],
    ) -> Result<(), StoreError> {
        assert_eq!(self.state, CommitState::Idle, "at open, before any IO");
        for &s in slots {
            self.entries[s as usize] = (0, 0);
            self.flags[s as usize] = 0;
        }
        self.write_pages_now(stores, device, slots)
    }

    /// Rewrites the pages holding `slots` as the entries say, synced; the
    /// slots' entries are then durable (free, for cleared ones).
    fn write_pages_now(
        &mut self,
        stores: &mut dyn Stores,
        device: usize,
        slots: &[u64],
    ) -> Result<(), StoreError> {
        let mut pages: Vec<u64> = slots.iter().map(|&s| self.page_of_slot(s)).collect();
        pages.sort_unstable();
        pages.dedup();
        for &page in &pages {
            let bytes = self.encode_page(page, self.next_seq(page));
            let (offset, _) = self.next_version(page);
            stores.write_at(device, offset, &bytes)?;
        }
        if !pages.is_empty() {
            stores.sync(device)?;
        }
        for &s in slots {
            if !self.counts(s as usize) {
                self.maybe_on_disk[s as usize] = false;
            }
        }
        Ok(())
    }

    /// Entry page `page` as the entries say now, with sequence `seq`.
    fn encode_page(&self, page: u64, seq: u64) -> Vec<u8> {
        let per = entries_per_page(self.entry_bytes) as usize;
        let first = (page as usize - 1) * per;
        let end = (first + per).min(self.entries.len());
        let flags = if self.entry_bytes >= FLAGGED_ENTRY_BYTES {
            &self.flags[first..end]
        } else {
            &[]
        };
        encode_flagged_entries(
            &self.magic,
            page,
            seq,
            self.entry_bytes,
            &self.entries[first..end],
            flags,
        )
    }

    /// Slots whose cleared entries are on their way to being durable.
    pub fn releasing(&self) -> Vec<u64> {
        self.clear_next
            .iter()
            .chain(&self.clear_running)
            .chain(&self.clear_written)
            .chain(&self.release_at_flush)
            .copied()
            .collect()
    }

    /// The table's own invariants (for a policy's `check_invariants_full`).
    pub fn check_invariants(&self) {
        if self.state == CommitState::Idle {
            assert!(
                self.clear_running.is_empty()
                    && self.release_at_flush.is_empty()
                    && self.demote_running.is_empty()
                    && self.demote_at_flush.is_empty()
                    && self.pages_running.is_empty(),
                "an idle table has a commit's state"
            );
        }
        for s in self.releasing() {
            assert_eq!(
                self.entries[s as usize].0, 0,
                "slot {s} is released with an entry"
            );
            assert!(
                self.maybe_on_disk[s as usize],
                "slot {s} waits for no durable clear"
            );
        }
        for (s, &(b, c)) in self.entries.iter().enumerate() {
            assert!(
                b == 0 || c <= self.next_commit,
                "slot {s}: entry of a future commit"
            );
            assert!(
                b != 0 || self.flags[s] == 0,
                "slot {s}: flags on a free entry"
            );
            assert!(
                !self.counts(s)
                    || self.maybe_on_disk[s]
                    || self.dirty_pages.contains(&self.page_of_slot(s as u64)),
                "slot {s}: an entry a recovery acts on, neither on the device nor to be committed"
            );
        }
    }

    /// Writes a never-written area's entry pages (every slot free) into
    /// copy 0, zeroes copy 1; the caller then syncs and writes its header.
    pub fn format(&mut self, stores: &mut dyn Stores, device: usize) -> Result<(), StoreError> {
        let zeros = vec![0u8; PAGE];
        for page in 1..self.pages() {
            let bytes = self.encode_page(page, 1);
            stores.write_at(device, self.base_bytes + copy_offset(page, 0), &bytes)?;
            stores.write_at(device, self.base_bytes + copy_offset(page, 1), &zeros)?;
        }
        for p in 1..self.page_seq.len() {
            self.page_seq[p] = 1;
            self.page_copy[p] = 0;
        }
        Ok(())
    }

    /// The header's newest version is `seq` in `copy` (read by the policy).
    pub fn header_loaded(&mut self, seq: u64, copy: u8) {
        self.page_seq[0] = seq;
        self.page_copy[0] = copy;
    }

    /// Reads the entry pages from `device`; `check_claim(slot, block)`
    /// says why a claim cannot belong to this configuration. Keeps per
    /// block the claim with the highest commit, clears the others durably
    /// (before anything can reuse their slots or clean the winner: a second
    /// crash must not bring an older claim back).
    pub fn load(
        &mut self,
        stores: &mut dyn Stores,
        device: usize,
        check_claim: &dyn Fn(u64, u64) -> Result<(), String>,
    ) -> Result<Loaded, OpenError> {
        let per = entries_per_page(self.entry_bytes);
        let mut claims: std::collections::HashMap<u64, (u64, u64)> = Default::default();
        let mut flags_of: std::collections::HashMap<u64, u64> = Default::default();
        let mut losers = Vec::new();
        let mut max_cseq = 0;
        for page in 1..self.pages() {
            let first = (page - 1) * per;
            let n = per.min(self.slots() - first) as usize;
            let mut a = vec![0u8; PAGE];
            let mut b = vec![0u8; PAGE];
            stores.read_at(device, self.base_bytes + copy_offset(page, 0), &mut a)?;
            stores.read_at(device, self.base_bytes + copy_offset(page, 1), &mut b)?;
            let decode = |x: &[u8]| decode_entries(&self.magic, x, page, self.entry_bytes, n);
            let (da, db) = (decode(&a), decode(&b));
            let (ra, rb) = (da.as_ref().err().copied(), db.as_ref().err().copied());
            let Some((copy, entries, seq)) = newest(da, db) else {
                // A formatted area has a valid copy of every page, and a
                // write only ever replaces the other one.
                return Err(OpenError::mismatch(format!(
                    "metadata page {page} is unreadable in both copies (copy 0: {}; copy 1: {}): \
                     the cache's map is lost; refusing to guess",
                    ra.unwrap_or("valid"),
                    rb.unwrap_or("valid")
                )));
            };
            self.page_seq[page as usize] = seq;
            self.page_copy[page as usize] = copy;
            let flags = decode_flags(if copy == 0 { &a } else { &b }, self.entry_bytes, n);
            for (i, (block_plus_one, cseq)) in entries.into_iter().enumerate() {
                if block_plus_one == 0 {
                    continue;
                }
                let (slot, block) = (first + i as u64, block_plus_one - 1);
                check_claim(slot, block).map_err(|why| {
                    OpenError::mismatch(format!(
                        "metadata page {page} maps slot {slot} to block {block}, which is {why}: \
                         the metadata area does not belong to this configuration"
                    ))
                })?;
                if cseq >= MAX_SEQ {
                    return Err(OpenError::mismatch(format!(
                        "metadata page {page} gives slot {slot} the impossible commit {cseq}"
                    )));
                }
                max_cseq = max_cseq.max(cseq);
                flags_of.insert(slot, flags[i]);
                match claims.get(&block) {
                    Some(&(_, oc)) if oc >= cseq => losers.push(slot),
                    Some(&(other, _)) => {
                        losers.push(other);
                        claims.insert(block, (slot, cseq));
                    }
                    None => {
                        claims.insert(block, (slot, cseq));
                    }
                }
            }
        }
        let mut won: Vec<(u64, u64, u64)> = claims
            .into_iter()
            .map(|(b, (slot, c))| (slot, b, c))
            .collect();
        won.sort_unstable();
        let mut won_flags = Vec::with_capacity(won.len());
        for &(slot, block, cseq) in &won {
            let s = slot as usize;
            self.entries[s] = (block + 1, cseq);
            self.flags[s] = flags_of[&slot];
            self.maybe_on_disk[s] = self.counts(s);
            won_flags.push(self.flags[s]);
        }
        self.write_pages_now(stores, device, &losers)?;
        self.next_commit = max_cseq + 1;
        Ok(Loaded {
            claims: won,
            flags: won_flags,
            losers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: &[u8; 4] = b"TEST";

    #[test]
    fn pages_round_trip_and_any_damage_is_detected() {
        let page = encode_header(MAGIC, &[1, 2, 3], 7);
        assert_eq!(decode_header(MAGIC, &page, 3), Ok((vec![1, 2, 3], 7)));
        assert_eq!(decode_header(b"ELSE", &page, 3).unwrap_err(), "wrong magic");
        // A torn write of a full entry page: some sectors new, the rest of
        // the older version, either way round.
        let n = entries_per_page(16) as usize;
        let old_entries: Vec<(u64, u64)> = (0..n as u64).map(|i| (i + 1, 1)).collect();
        let new_entries: Vec<(u64, u64)> = (0..n as u64).map(|i| (i + 100, 2)).collect();
        let older = encode_entries(MAGIC, 1, 1, 16, &old_entries);
        let newer = encode_entries(MAGIC, 1, 2, 16, &new_entries);
        for cut in [512, 2048, 3584] {
            let mut torn = older.clone();
            torn[..cut].copy_from_slice(&newer[..cut]);
            assert_eq!(
                decode_entries(MAGIC, &torn, 1, 16, n).unwrap_err(),
                "checksum mismatch (torn or corrupt)"
            );
            let mut torn = newer.clone();
            torn[..cut].copy_from_slice(&older[..cut]);
            assert!(decode_entries(MAGIC, &torn, 1, 16, n).is_err());
        }
        for at in [0, 30, 100, 4095] {
            let mut bad = page.clone();
            bad[at] ^= 0x10;
            assert!(decode_header(MAGIC, &bad, 3).is_err(), "byte {at}");
        }
        assert_eq!(
            decode_header(MAGIC, &vec![0u8; PAGE], 1).unwrap_err(),
            "never written"
        );
        let entries = vec![(0, 0), (42, 9), (7, 3)];
        let page = encode_entries(MAGIC, 5, 2, 16, &entries);
        assert_eq!(decode_entries(MAGIC, &page, 5, 16, 3), Ok((entries, 2)));
        assert_eq!(
            decode_entries(MAGIC, &page, 6, 16, 3).unwrap_err(),
            "another page's copy"
        );
        assert!(
            decode_header(MAGIC, &page, 1).is_err(),
            "an entry page is no header"
        );
    }

    #[test]
    fn the_newest_valid_copy_wins() {
        let ok = |s| Ok(((), s));
        let bad = || Err("torn");
        assert_eq!(newest(ok(3), ok(4)).map(|x| (x.0, x.2)), Some((1, 4)));
        assert_eq!(newest(ok(5), ok(4)).map(|x| (x.0, x.2)), Some((0, 5)));
        assert_eq!(newest(bad(), ok(4)).map(|x| (x.0, x.2)), Some((1, 4)));
        assert_eq!(newest(ok(2), bad()).map(|x| (x.0, x.2)), Some((0, 2)));
        assert!(newest::<()>(bad(), bad()).is_none());
    }

    fn run_commit(t: &mut SlotTable, dev: &mut [Vec<u8>]) -> Vec<u64> {
        t.begin(true);
        let (released, writes) = t.flushed();
        for w in writes {
            let at = w.offset_bytes as usize;
            dev[0][at..at + PAGE].copy_from_slice(&w.bytes.unwrap());
            t.page_written();
        }
        assert_eq!(t.state, CommitState::Idle);
        released
    }

    fn below_1000(_slot: u64, block: u64) -> Result<(), String> {
        if block < 1000 {
            Ok(())
        } else {
            Err("past the end".into())
        }
    }

    fn load(dev: &mut Vec<Vec<u8>>, slots: u64) -> (SlotTable, Loaded) {
        let mut t = SlotTable::new(MAGIC, 4096, slots, 16);
        let loaded = t.load(dev, 0, &below_1000).unwrap();
        (t, loaded)
    }

    /// The reuse rule, by hand: a slot whose entry may be on the device is
    /// released only by the flush of the commit after the one that cleared
    /// it; one never committed is free at once; two claims of one block
    /// resolve to the newer commit, and the loser is cleared on the device.
    #[test]
    fn cleared_slots_wait_for_a_durable_clear_and_newer_claims_win() {
        let slots = 600; // three entry pages
        let mut dev = vec![vec![0u8; 4096 + area_bytes(slots, 16) as usize]];
        let mut t = SlotTable::new(MAGIC, 4096, slots, 16);
        t.format(&mut dev, 0).unwrap();
        t.set(3, 10);
        assert!(t.clear(3), "never committed: free now");
        t.set(3, 10);
        t.set(500, 11);
        assert!(run_commit(&mut t, &mut dev).is_empty());
        // Block 10 moves from slot 3 to slot 4: slot 3 waits until its
        // cleared entry is written and then flushed by the next commit.
        assert!(!t.clear(3));
        t.set(4, 10);
        assert!(
            run_commit(&mut t, &mut dev).is_empty(),
            "clear written, not durable"
        );
        assert_eq!(
            run_commit(&mut t, &mut dev),
            vec![3],
            "released by the next flush"
        );
        let (_, loaded) = load(&mut dev, slots);
        assert_eq!(loaded.claims, vec![(4, 10, 2), (500, 11, 1)]);
        assert!(loaded.losers.is_empty());
        // Both claims on the device (as if page 1's clear were lost): the
        // newer wins and the loser is cleared durably.
        let older = 4096 + copy_offset(1, 0) as usize;
        let newer = 4096 + copy_offset(1, 1) as usize;
        let seq_of = |d: &Vec<Vec<u8>>, at: usize| {
            decode_entries(MAGIC, &d[0][at..at + PAGE], 1, 16, 254)
                .unwrap()
                .1
        };
        let stale = if seq_of(&dev, older) > seq_of(&dev, newer) {
            newer
        } else {
            older
        };
        let mut two = vec![(0u64, 0u64); 254];
        two[3] = (11, 1);
        two[4] = (11, 2);
        let page = encode_entries(MAGIC, 1, 99, 16, &two);
        dev[0][stale..stale + PAGE].copy_from_slice(&page);
        let (t2, loaded) = load(&mut dev, slots);
        assert_eq!(loaded.claims, vec![(4, 10, 2), (500, 11, 1)]);
        assert_eq!(loaded.losers, vec![3]);
        assert_eq!(t2.entry(3), (0, 0));
        let (_, again) = load(&mut dev, slots);
        assert!(
            again.losers.is_empty(),
            "the loser's clear is on the device"
        );
        // A claim outside the configuration is refused with the page named.
        let mut bad = vec![(0u64, 0u64); 254];
        bad[0] = (5000, 1);
        let page = encode_entries(MAGIC, 1, 200, 16, &bad);
        dev[0][stale..stale + PAGE].copy_from_slice(&page);
        let mut t3 = SlotTable::new(MAGIC, 4096, slots, 16);
        let e = t3.load(&mut dev, 0, &below_1000).err().unwrap().to_string();
        assert!(
            e.contains("metadata page 1 maps slot 0 to block 4999"),
            "{e}"
        );
    }
}
