//! Slots and entries: pins, the free list, dirty marks, eviction victims,
//! and what a landed (or failed) slot write does.

use super::*;

impl Cache {
    pub(super) fn unpin(&mut self, slot: u64) {
        let s = slot as usize;
        self.pins[s] -= 1;
        self.free_if_unused(slot);
    }

    /// Puts a slot no entry owns on the free list once no IO uses it and
    /// (persistent mode) its cleared entry is durable.
    pub(super) fn free_if_unused(&mut self, slot: u64) {
        let s = slot as usize;
        let blocked = self.persist.as_ref().is_some_and(|m| m.blocked[s]);
        if self.pins[s] == 0 && !self.owned[s] && !blocked {
            self.free.push(slot);
        }
    }

    pub(super) fn set_dirty(&mut self, page: u64, dirty: bool) {
        let Some(e) = self.map.get_mut(&page) else {
            return;
        };
        if e.dirty == dirty {
            return;
        }
        e.dirty = dirty;
        let slot = e.slot;
        if dirty {
            self.dirty_set.insert(page);
        } else {
            self.dirty_set.remove(&page);
            // Persistent mode: the entry turns clean with the next commit
            // (which flushes the backing device first: see `try_commit`).
            // It turns dirty only once the new data has landed
            // (`slot_written`).
            if let Some(m) = &mut self.persist
                && m.table.entry(slot).0 == page + 1
                && m.table.flags(slot) != 0
            {
                m.table.set_flagged(slot, page, 0);
            }
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
                    let mut seen = HashSet::default();
                    sets.order[s]
                        .retain(|p| map.get(p).is_some_and(|e| e.dirty) && seen.insert(*p));
                }
            } else {
                sets.dirty[s] -= 1;
            }
        }
    }

    /// Removes an entry whose data the backing device holds.
    pub(super) fn drop_entry(&mut self, page: u64, out: &mut Outbox) {
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
    pub(super) fn handle_victim(&mut self, victim: u64, out: &mut Outbox) {
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

    /// A write into a run of slots completed (host write or fills): pages
    /// `first_page..`, one incarnation each. Every page's data counts as
    /// landed before any follow-up runs, so a write-back or set cleaning it
    /// starts merges the whole run rather than one page whose neighbours
    /// still look in flight.
    pub(super) fn slots_written(
        &mut self,
        first_page: u64,
        incarnations: Vec<u64>,
        out: &mut Outbox,
    ) {
        let landed: Vec<u64> = incarnations
            .into_iter()
            .enumerate()
            .filter_map(|(k, inc)| {
                let page = first_page + k as u64;
                self.slot_landed(page, inc, out).then_some(page)
            })
            .collect();
        for page in landed {
            self.after_slot_landed(page, out);
        }
    }

    /// A page's data landed in its slot: its state, and the next write
    /// queued for the slot. True when the follow-ups are still due
    /// (`after_slot_landed`).
    fn slot_landed(&mut self, page: u64, incarnation: u64, out: &mut Outbox) -> bool {
        let Some(e) = self.map.get_mut(&page) else {
            return false;
        };
        if e.incarnation != incarnation {
            return false;
        }
        e.valid = true;
        e.slot_write_inflight = false;
        if e.drop_after_write && e.waiting.is_empty() {
            self.drop_failed_copy(page, out);
            return false;
        }
        let (dirty, slot) = (e.dirty, e.slot);
        let next_write = e.waiting.pop_front();
        // Persistent mode: the slot holds the page's data now, dirty or a
        // clean copy; the next commit says so.
        let flags = if dirty { slot_meta::FLAG_DIRTY } else { 0 };
        if let Some(m) = &mut self.persist
            && (m.table.entry(slot).0 != page + 1 || m.table.flags(slot) != flags)
        {
            m.table.set_flagged(slot, page, flags);
        }
        match next_write {
            Some((host, page_in_buf)) => {
                self.slot_write(host, page, page_in_buf, out);
                false
            }
            None => true,
        }
    }

    /// After its run landed: a page chosen for eviction (or everything
    /// being flushed) is written back; set cleaning (flashcache) runs —
    /// the write that pushed the set over its threshold could not pick
    /// pages whose slot writes were still in flight.
    fn after_slot_landed(&mut self, page: u64, out: &mut Outbox) {
        let Some(e) = self.map.get(&page) else {
            return;
        };
        if e.slot_write_inflight {
            return; // a write queued for it went out meanwhile
        }
        let (dirty, evicting) = (e.dirty, e.evicting);
        if evicting || self.flushing_everything() {
            self.flush_run(page, out);
        } else if dirty && self.mode == WriteMode::WriteBack {
            self.clean_set_if_needed(page, out);
        }
    }

    /// A host write into the page's slot failed: the slot's bytes for the
    /// page are unknown. The next queued write (a whole page) goes on; else
    /// a page that held acknowledged data keeps what the slot holds (dirty
    /// in write-back: a failed write leaves its range unspecified, and it
    /// stays one answer), and one that held none — or a write-through copy,
    /// whose backing page may now differ — is dropped.
    pub(super) fn slot_write_failed(&mut self, page: u64, incarnation: u64, out: &mut Outbox) {
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
    pub(super) fn drop_failed_copy(&mut self, page: u64, out: &mut Outbox) {
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
}
