//! The `Policy` trait's handlers: what arrives (host IOs, completions,
//! errors, timers, the clean stop) and where it goes.

use super::*;

impl Policy for Cache {
    fn moves_data(&self) -> bool {
        true
    }

    /// Whole pages only: a partial-page write is widened to its page
    /// without reading the rest first (docs/cache-layer.md), which is
    /// exact in timing but not in data.
    fn required_alignment_bytes(&self) -> u64 {
        self.page
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let s = self.stats();
        let mut v = vec![
            (counter::HOST_IOS, s.host_ios as f64),
            (counter::HOST_IOS_CACHE_ONLY, s.host_ios_cache_only as f64),
            (counter::MEMORY_ACCESS_RATIO, s.memory_access_ratio()),
            (counter::READ_HITS, s.read_hits as f64),
            (counter::READ_MISSES, s.read_misses as f64),
            (counter::WRITE_HITS, s.write_hits as f64),
            (counter::WRITE_MISSES, s.write_misses as f64),
            (counter::FILLS, s.fills as f64),
            (counter::BYPASSED_PAGES, s.bypassed_pages as f64),
            (counter::BYPASSED_IOS, s.bypassed_ios as f64),
            (counter::BYPASSED_BYTES, s.bypassed_bytes as f64),
            (counter::FLUSH_IOS, s.flush_ios as f64),
            (counter::FLUSH_BYTES, s.flush_bytes as f64),
            (counter::DIRTY_BYTES, s.dirty_bytes as f64),
            (
                counter::RESIDENT_BYTES,
                (self.map.len() as u64 * self.page) as f64,
            ),
            (counter::TRIMS, s.trims as f64),
            (counter::TRIMMED_PAGES, s.trimmed_pages as f64),
            (counter::TRIMMED_DIRTY_PAGES, s.trimmed_dirty_pages as f64),
            (counter::TRIM_KEPT_PAGES, s.trim_kept_pages as f64),
            (counter::TRIM_RACED_FLUSHES, s.trim_raced_flushes as f64),
            (counter::DRAIN_DIRTY_PAGES, s.drain_dirty_pages as f64),
            (counter::DRAIN_EVICTING_PAGES, s.drain_evicting_pages as f64),
            (counter::FLUSH_WAITS, s.flush_waits as f64),
            (counter::FLUSH_COMMIT_WAITS, s.flush_commit_waits as f64),
            (counter::WRITEBACK_RATE_WAITS, self.pacer.waits as f64),
            (counter::DEVICE_ERRORS, s.device_errors as f64),
            (
                counter::READS_RETRIED_FROM_BACKING,
                s.reads_retried_from_backing as f64,
            ),
            (counter::WRITE_BACKS_FAILED, s.write_backs_failed as f64),
            (counter::FLUSHES_FAILED, s.flushes_failed as f64),
            (
                counter::DRAIN_ABANDONED_PAGES,
                s.drain_abandoned_pages as f64,
            ),
            (counter::SLOT_WRITES_FAILED, s.slot_writes_failed as f64),
        ];
        if let Some(m) = &self.persist {
            let p = m.stats;
            v.extend([
                (counter::METADATA_COMMITS, m.table.commits as f64),
                (counter::METADATA_WRITES, p.metadata_writes as f64),
                (counter::METADATA_FORMATTED, p.formatted as f64),
                (counter::RECOVERED_PAGES, p.recovered_pages as f64),
                (counter::RECOVERED_PAGES_RESYNCED, p.resynced_pages as f64),
                (counter::OPENED_AFTER_CLEAN_STOP, p.opened_clean as f64),
                (
                    counter::RECOVERED_PAGES_DROPPED,
                    p.recovered_pages_dropped as f64,
                ),
                (
                    counter::CRASH_DROPPED_CLEAN_PAGES,
                    p.crash_dropped_clean_pages as f64,
                ),
                (
                    counter::MISSES_UNCACHED_WAITING_FOR_COMMIT,
                    p.misses_uncached_waiting_for_commit as f64,
                ),
            ]);
        }
        v
    }

    fn tier_names(&self) -> Vec<String> {
        vec!["cache".into(), "backing".into()]
    }

    fn on_host_io(&mut self, now_ns: TimeNs, io: HostIo, out: &mut Outbox) {
        self.now_ns = self.now_ns.max(now_ns);
        self.stats.host_ios += 1;
        self.last_host_ns = now_ns;
        self.idle_flushing = false;
        if self.idle_ns > 0 && !self.timer_armed {
            self.timer_armed = true;
            out.timers
                .push((now_ns.saturating_add(self.idle_ns), IDLE_TIMER));
        }
        let first = io.offset_bytes / self.page;
        let end = io.offset_bytes.saturating_add(io.size_bytes as u64);
        let n = end.div_ceil(self.page).saturating_sub(first);
        if io.op == Op::Flush {
            self.host_flush(io, out);
            if cfg!(debug_assertions) {
                self.check_invariants();
            }
            return;
        }
        if n == 0 {
            out.complete.push((io.id, TIER_BACKING));
            return;
        }
        assert!(
            !self.hosts.contains_key(&io.id),
            "host IO {} is already in flight",
            io.id
        );
        match io.op {
            Op::Read => {
                let bypass = self.bypass(&io);
                self.read(io, first, n, bypass, out)
            }
            Op::Write => {
                let bypass = self.bypass(&io);
                self.write(io, first, n, bypass, out)
            }
            Op::Trim => self.trim(io, out),
            Op::Flush => unreachable!("completed above"),
        }
        self.try_flush(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    fn on_device_completion(&mut self, now_ns: TimeNs, device: usize, tag: u64, out: &mut Outbox) {
        self.now_ns = self.now_ns.max(now_ns);
        // A completion of no IO in flight is an executor bug that would
        // corrupt the maps if ignored: stop here.
        let Some(rec) = self.inflight.remove(&(device, tag)) else {
            panic!(
                "{}: a completion for device {device} tag {tag}, which is not in flight",
                self.name
            );
        };
        match rec {
            Rec::HostRead {
                host, slots, fills, ..
            } => {
                if let Some((s, k)) = slots {
                    for slot in s..s + k {
                        self.unpin(slot);
                    }
                }
                self.fill(host, fills, out);
                self.host_part_done(host, device == CACHE_DEVICE, out);
            }
            Rec::SlotWrite {
                host,
                first_page,
                slot,
                incarnations,
            } => {
                for s in slot..slot + incarnations.len() as u64 {
                    self.unpin(s);
                }
                self.slots_written(first_page, incarnations, out);
                self.host_part_done(host, true, out);
            }
            Rec::FillWrite {
                first_page,
                slot,
                incarnations,
            } => {
                for s in slot..slot + incarnations.len() as u64 {
                    self.unpin(s);
                }
                self.slots_written(first_page, incarnations, out);
            }
            Rec::BackingWrite { host, first, n } => {
                self.backing_write_done(first, n);
                self.host_part_done(host, false, out);
            }
            Rec::FlushRead {
                staging,
                slot,
                slots,
            } => {
                for s in slot..slot + slots {
                    self.unpin(s);
                }
                let Some(st) = self.staging.get_mut(&staging) else {
                    return;
                };
                st.reads_left -= 1;
                if st.reads_left == 0 {
                    match st.failed {
                        // Another slot read of this write-back failed: the
                        // staging does not hold every page.
                        Some(e) => self.write_back_failed(staging, e, out),
                        None => {
                            let (first, k) = (st.first, st.pages.len() as u64);
                            self.stats.flush_ios += 1;
                            self.stats.flush_bytes += k * self.page;
                            let dio =
                                self.page_io(Op::Write, Buffer::Staging(staging), 0, first, k);
                            self.submit(out, BACKING_DEVICE, dio, Rec::FlushWrite { staging });
                        }
                    }
                }
            }
            Rec::FlushWrite { staging } => self.staging_done(staging, out),
            Rec::Trim { host } => self.trim_done(host, out),
            Rec::MetaFlush => self.commit_flush_done(out),
            Rec::MetaPage => {
                if self.persist.as_mut().unwrap().table.page_written() {
                    self.commit_done(out);
                }
            }
            Rec::StopFlush => self.write_stop_header(out),
            Rec::StopHeader => self.persist.as_mut().unwrap().stop = StopStep::Done,
        }
        self.try_flush(out);
        self.stop_progress(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Survives what it can answer without losing an acknowledged byte
    /// (docs/cache-layer.md): a failed cache read of a *clean* page is read
    /// again from the backing device (and the copy dropped); any other
    /// failed host read fails that host IO; a failed fill drops the copy it
    /// was making; a failed host write to the backing device alone (write-
    /// around, or an uncached page) fails that write. Everything else — a
    /// failed slot write, write-through backing write, write-back or trim —
    /// is refused (fail-stop): the executor stops.
    fn on_device_error(
        &mut self,
        now_ns: TimeNs,
        device: usize,
        tag: u64,
        error: IoError,
        out: &mut Outbox,
    ) -> bool {
        self.now_ns = self.now_ns.max(now_ns);
        let handled = match self.inflight.get(&(device, tag)) {
            Some(Rec::HostRead { .. }) => true,
            // A host write to the backing device: alone (write-around, a
            // page not cached), or write-through (its cached copy dropped).
            Some(Rec::BackingWrite { .. }) => true,
            // A write-back's slot read or backing write: the pages stay
            // dirty (their data is in their slots).
            Some(Rec::FlushRead { .. } | Rec::FlushWrite { .. }) => true,
            // A host write into a slot: the write fails; its page keeps
            // what the slot holds if it held acknowledged data, else goes.
            Some(Rec::SlotWrite { .. }) => true,
            // A host trim: it fails, the cached pages stay.
            Some(Rec::Trim { .. }) => true,
            // A fill: the copy it was making goes (or a host write queued
            // behind it overwrites the page).
            Some(Rec::FillWrite { .. }) => true,
            _ => false,
        };
        if !handled {
            return false;
        }
        self.stats.device_errors += 1;
        match self.inflight.remove(&(device, tag)).unwrap() {
            Rec::HostRead {
                host,
                slots,
                fills,
                hit,
            } => {
                let hits = slots.map_or(0, |(s, k)| {
                    for slot in s..s + k {
                        self.unpin(slot);
                    }
                    k
                });
                // A failed backing read fills nothing.
                for (p, inc, generation, _) in fills {
                    if let Some(e) = self.map.get_mut(&p)
                        && e.incarnation == inc
                        && e.filling == Some(generation)
                    {
                        e.filling = None;
                    }
                }
                // The backing device holds a page that is not dirty now: its
                // copy there is no older than the one the failed read would
                // have returned (a write-back since only brought it newer).
                // The run is read again from there if none of its pages is.
                let retry = hit.filter(|&(page, _)| {
                    device == CACHE_DEVICE
                        && (page..page + hits).all(|p| self.map.get(&p).is_none_or(|e| !e.dirty))
                });
                match retry {
                    Some((page, first)) => {
                        self.stats.reads_retried_from_backing += hits;
                        for p in page..page + hits {
                            let idle = self.map.get(&p).is_some_and(|e| {
                                !e.evicting
                                    && !e.slot_write_inflight
                                    && e.waiting.is_empty()
                                    && !e.flushing
                            });
                            if idle {
                                // The slot may be bad: stop using this copy.
                                self.evict.remove(p);
                                self.drop_entry(p, out);
                            }
                        }
                        let run = Some((page, hits, Vec::new()));
                        let parts = self.submit_backing_read(out, host, first, run);
                        if let Some(h) = self.hosts.get_mut(&host) {
                            h.parts += parts;
                        }
                        self.host_part_done(host, false, out);
                    }
                    None => {
                        if let Some(h) = self.hosts.get_mut(&host) {
                            h.failed.get_or_insert(error);
                        }
                        self.host_part_done(host, device == CACHE_DEVICE, out);
                    }
                }
            }
            Rec::FillWrite {
                first_page,
                slot,
                incarnations,
            } => {
                // The copies never landed: a host write queued behind a
                // fill goes on, else the copy goes (the backing device has
                // the page).
                for (k, inc) in incarnations.into_iter().enumerate() {
                    self.unpin(slot + k as u64);
                    self.slot_write_failed(first_page + k as u64, inc, out);
                }
            }
            Rec::BackingWrite { host, first, n } => {
                self.backing_write_done(first, n);
                if self.mode == WriteMode::WriteThrough {
                    // The backing pages hold something unknown now, the
                    // slots the failed write's data: drop the copies, so a
                    // read never changes its answer when one is evicted.
                    for p in first..first + n {
                        self.drop_failed_copy(p, out);
                    }
                }
                if let Some(h) = self.hosts.get_mut(&host) {
                    h.failed.get_or_insert(error);
                }
                self.host_part_done(host, false, out);
            }
            Rec::FlushRead {
                staging,
                slot,
                slots,
            } => {
                for s in slot..slot + slots {
                    self.unpin(s);
                }
                if let Some(st) = self.staging.get_mut(&staging) {
                    st.failed.get_or_insert(error);
                    st.reads_left -= 1;
                    if st.reads_left == 0 {
                        self.write_back_failed(staging, error, out);
                    }
                }
            }
            Rec::FlushWrite { staging } => self.write_back_failed(staging, error, out),
            Rec::SlotWrite {
                host,
                first_page,
                slot,
                incarnations,
            } => {
                self.stats.slot_writes_failed += incarnations.len() as u64;
                if let Some(h) = self.hosts.get_mut(&host) {
                    h.failed.get_or_insert(error);
                }
                for (k, inc) in incarnations.into_iter().enumerate() {
                    self.unpin(slot + k as u64);
                    self.slot_write_failed(first_page + k as u64, inc, out);
                }
                self.host_part_done(host, true, out);
            }
            Rec::Trim { host } => {
                let i = self
                    .trims
                    .iter()
                    .position(|t| t.host == host)
                    .expect("a trim error has its trim");
                let t = self.trims.swap_remove(i);
                for p in self.cached_pages_in(t.first_full_page, t.end_full_page) {
                    if !self.under_trim(p) {
                        self.map.get_mut(&p).unwrap().trim_raced = false;
                    }
                }
                if let Some(h) = self.hosts.get_mut(&host) {
                    h.failed.get_or_insert(error);
                }
                self.host_part_done(host, false, out);
            }
            _ => unreachable!("only the records checked above"),
        }
        self.try_flush(out);
        self.stop_progress(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
        true
    }

    fn on_timer(&mut self, now_ns: TimeNs, timer_id: u64, out: &mut Outbox) {
        self.now_ns = self.now_ns.max(now_ns);
        if timer_id == WRITEBACK_TIMER {
            self.pacer.timer_at = None;
            self.try_flush(out);
            if cfg!(debug_assertions) {
                self.check_invariants();
            }
            return;
        }
        if timer_id != IDLE_TIMER {
            return;
        }
        self.timer_armed = false;
        let due = self.last_host_ns.saturating_add(self.idle_ns);
        if now_ns >= due {
            self.idle_flushing = true;
            self.try_flush(out);
        } else {
            self.timer_armed = true;
            out.timers.push((due, IDLE_TIMER));
        }
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Flushes every dirty page; pages chosen for eviction are among them.
    fn drain(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        self.now_ns = self.now_ns.max(now_ns);
        self.draining = true;
        self.retry_failed_write_backs();
        self.stats.drain_dirty_pages = self.dirty_set.len() as u64;
        self.stats.drain_evicting_pages = self.map.values().filter(|e| e.evicting).count() as u64;
        self.try_flush(out);
        self.stop_progress(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Nothing in flight and nothing dirty: the backing device holds every
    /// page's newest data (write-through and write-around never hold dirty
    /// pages).
    fn is_drained(&self) -> bool {
        // A page whose write-back failed during the drain is given up
        // (`drain_abandoned_pages`; the device error is reported).
        self.inflight.is_empty()
            && self
                .dirty_set
                .iter()
                .all(|p| self.draining && self.map[p].write_back_failed)
            && self.hosts.is_empty()
            && self
                .persist
                .as_ref()
                .is_none_or(|m| m.stop == StopStep::Done)
    }

    /// Persistent mode: reads the metadata area and comes up warm (module
    /// docs); without it the cache starts cold.
    fn open(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        if self.persist.is_some() {
            self.recover(stores)?;
        }
        Ok(())
    }

    /// Per page, where `read` would send it now: the slot while it holds
    /// valid data (dirty or clean, also while a write-back of it runs),
    /// else the backing device at the same offset.
    fn locate(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) {
        let from = out.len();
        let end = offset_bytes.saturating_add(len_bytes);
        let page = self.page;
        let backing = |at: u64, end: u64| Extent {
            len_bytes: end - at,
            tier: TIER_BACKING,
            device: BACKING_DEVICE,
            device_offset_bytes: at,
        };
        let mut at = offset_bytes;
        for p in self.cached_pages_in(offset_bytes / page, end.div_ceil(page)) {
            let e = &self.map[&p];
            if !e.valid {
                continue;
            }
            let lo = (p * page).max(offset_bytes);
            let hi = ((p + 1) * page).min(end);
            if at < lo {
                push_extent(out, from, backing(at, lo));
            }
            let slot_bytes = e.slot * page;
            let ext = Extent {
                len_bytes: hi - lo,
                tier: TIER_CACHE,
                device: CACHE_DEVICE,
                device_offset_bytes: slot_bytes + (lo - p * page),
            };
            push_extent(out, from, ext);
            at = hi;
        }
        if at < end {
            push_extent(out, from, backing(at, end));
        }
    }
}
