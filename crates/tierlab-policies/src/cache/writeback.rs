//! Write-back of dirty pages: merged flushes, watermarks, idle and
//! explicit flushing, flashcache's per-set cleaning.

use super::*;

impl Cache {
    pub(super) fn flushable(&self, page: u64) -> bool {
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
    pub(super) fn retry_failed_write_backs(&mut self) {
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
    pub(super) fn write_back_failed(&mut self, sid: u64, error: IoError, out: &mut Outbox) {
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
    /// merged backing write; returns its pages (0: `page` cannot be flushed
    /// now).
    pub(super) fn flush_run(&mut self, page: u64, out: &mut Outbox) -> u64 {
        if !self.flushable(page) {
            return 0;
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
        hi - lo
    }

    pub(super) fn flush_range(&mut self, lo: u64, hi: u64, out: &mut Outbox) {
        let sid = self.next_staging;
        self.next_staging = (self.next_staging + 1) & STAGING_ID_MASK;
        let mut pages = Vec::new();
        // Runs of consecutive slots: (first slot, slots, index in staging),
        // each read as one IO.
        let mut reads: Vec<(u64, u64, u64)> = Vec::new();
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
            match reads.last_mut() {
                Some((s, k, _)) if *s + *k == slot => *k += 1,
                _ => reads.push((slot, 1, i as u64)),
            }
        }
        for &(slot, slots, at) in &reads {
            let dio = self.page_io(Op::Read, Buffer::Staging(sid), at, slot, slots);
            self.submit(
                out,
                CACHE_DEVICE,
                dio,
                Rec::FlushRead {
                    staging: sid,
                    slot,
                    slots,
                },
            );
        }
        self.flushes_inflight += 1;
        self.staging.insert(
            sid,
            Staging {
                reads_left: reads.len() as u32,
                pages,
                first: lo,
                failed: None,
            },
        );
    }

    /// flashcache: clean a set whose dirty count passed its threshold, oldest
    /// dirty pages first, down below the threshold.
    pub(super) fn clean_set_if_needed(&mut self, page: u64, out: &mut Outbox) {
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
        let mut seen = HashSet::default();
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
        // blocks by disk block and merges contiguous ones before cleaning:
        // each picked block takes the run of flushable dirty blocks around
        // it (up to `max_flush_bytes`), so a set filled by a sequential
        // stream is cleaned in large writes rather than a block or two at
        // every write that passes the threshold.
        pick.sort_unstable();
        for p in pick {
            self.flush_run(p, out);
        }
    }

    /// Background flushing by watermarks, idleness and `flush_all`.
    pub(super) fn try_flush(&mut self, out: &mut Outbox) {
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
        // Watermark write-back while the host is busy goes at a rate.
        let paced = !urgent && self.pacer.active(self.now_ns, self.last_host_ns);
        let excess_pages = (self.dirty_set.len() as f64 - self.low_pages).max(0.0);
        let rate = self.pacer.rate(excess_pages * self.page as f64);
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
            if paced && !self.pacer.may_go(self.now_ns, rate) {
                if self.pacer.timer_at.is_none() {
                    // A pause of the write-back (counted once, however many
                    // calls find it paused).
                    self.pacer.waits += 1;
                    let at = self.pacer.wake_ns(self.now_ns, rate);
                    self.pacer.timer_at = Some(at);
                    out.timers.push((at, WRITEBACK_TIMER));
                }
                break;
            }
            scanned += 1;
            self.flush_cursor = p + 1;
            let pages = self.flush_run(p, out);
            if pages > 0 {
                if paced {
                    self.pacer.charge(pages * self.page);
                }
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
    pub(super) fn end_write_back(&mut self, sid: u64, out: &mut Outbox) -> Vec<(u64, u64, u64)> {
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
    pub(super) fn write_back_ended(&mut self, p: u64, inc: u64) -> bool {
        match self.map.get_mut(&p) {
            Some(e) if e.incarnation == inc => {
                e.flushing = false;
                true
            }
            _ => false,
        }
    }

    pub(super) fn staging_done(&mut self, sid: u64, out: &mut Outbox) {
        let pages = self.end_write_back(sid, out);
        if let Some(m) = &mut self.persist {
            // The pages' clean marks and clears rely on this write: the
            // commit that writes them flushes the backing device first.
            m.backing_unflushed = true;
            m.written_back_since_commit += pages.len() as u64;
        }
        for (p, inc, generation) in pages {
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
        self.try_commit(out);
    }
}
