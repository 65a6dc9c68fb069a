//! Invariants: the cheap ones after every handler (debug builds), the
//! full ones for tests.

use super::*;

impl Cache {
    /// Cheap invariants, checked after every handler in debug builds.
    pub(super) fn check_invariants(&self) {
        let cap = self.capacity_pages as usize;
        assert!(
            self.map.len() + self.free.len() as usize <= cap,
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
        for s in self.free.iter() {
            let s = s as usize;
            in_free[s] = true;
            assert!(
                owner[s].is_none() && self.pins[s] == 0,
                "free slot {s} is in use"
            );
        }
        let mut pins = vec![0u32; cap];
        let mut backing: HashMap<u64, u32> = HashMap::default();
        for rec in self.inflight.values() {
            match rec {
                Rec::HostRead {
                    slots: Some((s, k)),
                    ..
                }
                | Rec::FlushRead {
                    slot: s, slots: k, ..
                } => {
                    for slot in *s..s + k {
                        pins[slot as usize] += 1;
                    }
                }
                Rec::SlotWrite {
                    slot: s,
                    incarnations,
                    ..
                }
                | Rec::FillWrite {
                    slot: s,
                    incarnations,
                    ..
                } => {
                    for slot in *s..s + incarnations.len() as u64 {
                        pins[slot as usize] += 1;
                    }
                }
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
                    // Marked dirty only while the page is: a recovery
                    // copies a dirty entry's slot over the backing block.
                    assert!(
                        m.table.flags(s as u64) & slot_meta::FLAG_DIRTY == 0
                            || e.is_some_and(|e| e.dirty),
                        "slot {s}: entry dirty, page {} clean",
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
}
