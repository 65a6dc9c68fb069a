//! The persistent mode (`persistent = true`): metadata commits, the clean
//! stop, and recovery at `open` (docs/crash-consistency.md).

use super::*;
use crate::binding::{self, Bond, Bound};

/// The page cache's metadata belongs to one backing device (its dirty
/// pages are that volume's data): docs/crash-consistency.md, "Binding".
const BACKING_BINDING: Bound = Bound {
    metadata_device: CACHE_DEVICE,
    metadata: "the page cache's metadata",
    owner: "cache",
    metadata_role: "cache device",
    device: BACKING_DEVICE,
    role: "backing device",
    bond: Bond::Data,
    advice: None,
};

impl Cache {
    pub(super) fn meta_io(
        &mut self,
        device: usize,
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
        self.submit(out, device, io, rec);
        if op == Op::Write && out.wants_data {
            // The write took its bytes when submitted.
            out.release.push(id);
        }
    }

    /// Begins a commit when one is needed, none running (commits are on
    /// demand, not after every change): a FLUSH waits for one not begun
    /// yet; the clean stop; slots wait for durable clears while no slot is
    /// free, or a batch of them does; a batch of pages were written back
    /// (marking them clean on the device frees their slots at eviction).
    /// A commit flushes the cache device (the data its entries name has
    /// landed) and, after write-backs, the backing device (the copies its
    /// clean marks rely on), then writes the changed entry pages.
    pub(super) fn try_commit(&mut self, out: &mut Outbox) {
        let Some(m) = &mut self.persist else { return };
        if m.table.state != CommitState::Idle {
            return;
        }
        let begun = m.table.commits;
        let flush_needs = self.flush_waits.iter().any(|w| w.commits_needed > begun);
        let stopping = m.stop == StopStep::Commit && (m.table.due() || m.table.slots_waiting() > 0);
        let waiting = m.table.slots_waiting() as u64;
        let slots_needed = waiting > 0 && (self.free.is_empty() || waiting >= m.commit_batch_slots);
        let demotions = m.written_back_since_commit >= m.commit_batch_slots;
        if !(flush_needs || stopping || slots_needed || demotions) {
            return;
        }
        m.table.begin(out.wants_data);
        m.written_back_since_commit = 0;
        let flush_backing =
            std::mem::take(&mut m.backing_unflushed) && !self.broken_commit_skips_backing_flush;
        m.commit_flushes_left = 1 + flush_backing as u32;
        if self.broken_commit_skips_flush {
            self.persist.as_mut().unwrap().commit_flushes_left = 0;
            self.commit_flushed(out);
            return;
        }
        self.meta_io(CACHE_DEVICE, Op::Flush, 0, Rec::MetaFlush, None, out);
        if flush_backing {
            self.meta_io(BACKING_DEVICE, Op::Flush, 0, Rec::MetaFlush, None, out);
        }
    }

    /// One of the running commit's device flushes completed.
    pub(super) fn commit_flush_done(&mut self, out: &mut Outbox) {
        let m = self.persist.as_mut().unwrap();
        m.commit_flushes_left -= 1;
        if m.commit_flushes_left == 0 {
            self.commit_flushed(out);
        }
    }

    /// The commit's flushes completed: free the slots whose cleared entries
    /// they made durable, write the changed entry pages.
    pub(super) fn commit_flushed(&mut self, out: &mut Outbox) {
        let m = self.persist.as_mut().unwrap();
        let (released, writes) = m.table.flushed();
        for &slot in &released {
            m.blocked[slot as usize] = false;
        }
        for slot in released {
            self.free_if_unused(slot);
        }
        for w in writes {
            self.meta_io(
                CACHE_DEVICE,
                Op::Write,
                w.offset_bytes,
                Rec::MetaPage,
                w.bytes,
                out,
            );
        }
        if self.persist.as_ref().unwrap().table.state == CommitState::Idle {
            self.commit_done(out);
        }
    }

    pub(super) fn commit_done(&mut self, out: &mut Outbox) {
        self.persist.as_mut().unwrap().commits_done += 1;
        self.complete_flush_waits(out);
        self.try_commit(out);
        self.stop_progress(out);
    }

    /// The clean stop (`drain`): once every page is written back and no
    /// host IO is left, a last commit, a flush, then the header marked
    /// clean (a restart then trusts the entries as clean copies).
    pub(super) fn stop_progress(&mut self, out: &mut Outbox) {
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
                    self.meta_io(CACHE_DEVICE, Op::Flush, 0, Rec::StopFlush, None, out);
                } else {
                    self.try_commit(out);
                }
            }
            _ => {}
        }
    }

    pub(super) fn header_fields(&self, backing_bytes: u64, clean: bool) -> Vec<u64> {
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
            binding::to_fields(m.backing_id)[0],
            binding::to_fields(m.backing_id)[1],
        ]
    }

    pub(super) fn write_stop_header(&mut self, out: &mut Outbox) {
        let backing_bytes = self.persist.as_ref().unwrap().backing_bytes;
        let fields = self.header_fields(backing_bytes, true);
        let m = self.persist.as_mut().unwrap();
        let seq = m.table.next_seq(0);
        let (offset, _) = m.table.next_version(0);
        let bytes = out
            .wants_data
            .then(|| slot_meta::encode_header(MAGIC_HEADER, &fields, seq));
        m.stop = StopStep::Header;
        self.meta_io(CACHE_DEVICE, Op::Write, offset, Rec::StopHeader, bytes, out);
    }

    /// Persistent mode, `Policy::open`: formats a never-written area;
    /// refuses one of another configuration or a damaged one; loads the
    /// entries (per page the claim of the newest commit). After a clean
    /// stop they are all clean copies. After a crash only entries marked
    /// dirty are recovered: such a slot holds data newer than its backing
    /// block (or equal, once written back), so it is copied there first, as
    /// md resyncs its dirty regions, and kept as a clean copy; a clean
    /// entry may name a slot reused since (clean entries are committed
    /// lazily), so it is dropped and cleared on the device. Then the header
    /// is marked not clean (synced) before any IO runs.
    pub(super) fn recover(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
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
        let n = HEADER_FIELDS.len() + 1 + binding::ID_FIELDS;
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
        // The backing device it was made for, before anything is written
        // (the loads below clear losers, a crash's recovery copies slots to
        // the backing device).
        let at = HEADER_FIELDS.len() + 1;
        let recorded = binding::from_fields([fields[at], fields[at + 1]]);
        let bound = binding::check(stores, &BACKING_BINDING, recorded)?;
        // Recorded from the next header write on (the not-clean rewrite
        // below, before any IO), also when the header held none yet.
        self.persist.as_mut().unwrap().backing_id = bound.id;
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
        let mut claims = Vec::with_capacity(loaded.claims.len());
        let mut dropped = Vec::new();
        for (&claim, &flags) in loaded.claims.iter().zip(&loaded.flags) {
            if clean || flags & slot_meta::FLAG_DIRTY != 0 {
                claims.push(claim);
            } else {
                dropped.push(claim.0);
            }
        }
        let clean_dropped = dropped.len() as u64;
        // Oldest commit first: the eviction policy sees the newest last.
        claims.sort_unstable_by_key(|&(slot, _, cseq)| (cseq, slot));
        if !clean {
            let mut buf = vec![0u8; self.page as usize];
            for &(slot, page, _) in &claims {
                stores.read_at(CACHE_DEVICE, slot * self.page, &mut buf)?;
                stores.write_at(BACKING_DEVICE, page * self.page, &buf)?;
            }
            stores.sync(BACKING_DEVICE)?;
            // Clean now: the next commit says so, and their slots are free
            // at eviction once it is durable.
            let m = self.persist.as_mut().unwrap();
            for &(slot, page, _) in &claims {
                m.table.set_flagged(slot, page, 0);
            }
        }
        let mut taken = vec![false; self.capacity_pages as usize];
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
        m.stats.recovered_pages_dropped = dropped.len() as u64 - clean_dropped;
        m.stats.crash_dropped_clean_pages = clean_dropped;
        self.free = FreeSlots::from_free(self.capacity_pages, |s| !taken[s as usize]);
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
        m.stats.recovered_pages = claims.len() as u64 - (dropped.len() as u64 - clean_dropped);
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
    pub(super) fn format(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        self.persist.as_mut().unwrap().backing_id = binding::id_at_format(stores, BACKING_DEVICE)?;
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
}
