//! The host read and write paths: admission, sequential bypass, device IOs
//! to the cache and backing devices, and host IO completion.

use super::*;

impl Cache {
    pub(super) fn page_io(
        &self,
        op: Op,
        buffer: Buffer,
        page_in_buf: u64,
        offset_page: u64,
        n: u64,
    ) -> DeviceIo {
        DeviceIo {
            tag: encode_tag(buffer, page_in_buf),
            op,
            offset_bytes: offset_page * self.page,
            size_bytes: (n * self.page) as u32,
        }
    }

    /// Sends a pending run of missed pages `(first page, pages, fills)` of
    /// host read `id` to the backing device; returns the parts issued (0/1).
    pub(super) fn submit_backing_read(
        &mut self,
        out: &mut Outbox,
        id: u64,
        first: u64,
        run: Option<(u64, u64, Vec<Fill>)>,
    ) -> u32 {
        let Some((f, k, fills)) = run else { return 0 };
        let dio = self.page_io(Op::Read, Buffer::Host(id), f - first, f, k);
        self.submit(
            out,
            BACKING_DEVICE,
            dio,
            Rec::HostRead {
                host: id,
                slots: None,
                fills,
                hit: None,
            },
        );
        1
    }

    /// Sends a pending run of hits of host read `id` (pinned when they
    /// joined it) to the cache device as one read; returns the parts
    /// issued (0/1).
    fn submit_hit_read(
        &mut self,
        out: &mut Outbox,
        id: u64,
        first: u64,
        run: Option<SlotRun>,
    ) -> u32 {
        let Some(r) = run else { return 0 };
        let dio = self.page_io(Op::Read, Buffer::Host(id), r.page_in_buf, r.slot, r.len());
        self.submit(
            out,
            CACHE_DEVICE,
            dio,
            Rec::HostRead {
                host: id,
                slots: Some((r.slot, r.len())),
                fills: Vec::new(),
                hit: Some((r.first_page, first)),
            },
        );
        1
    }

    /// Sends a pending run of host writes into slots (their pages marked
    /// as being written and their slots pinned when they joined it) as one
    /// cache-device write, as a part of host IO `host`.
    fn submit_slot_writes(&mut self, out: &mut Outbox, host: u64, run: Option<SlotRun>) {
        let Some(r) = run else { return };
        self.add_part(host);
        let dio = self.page_io(
            Op::Write,
            Buffer::Host(host),
            r.page_in_buf,
            r.slot,
            r.len(),
        );
        self.submit(
            out,
            CACHE_DEVICE,
            dio,
            Rec::SlotWrite {
                host,
                first_page: r.first_page,
                slot: r.slot,
                incarnations: r.incarnations,
            },
        );
    }

    /// A backing read of host read `host` completed: the pages it should
    /// fill are written into their slots, pages in consecutive slots as one
    /// IO — unless written since the read began (the read's data would be
    /// older than the slot's) or the page left the cache.
    pub(super) fn fill(&mut self, host: u64, fills: Vec<Fill>, out: &mut Outbox) {
        let max_io = self.max_io_pages();
        let mut run: Option<SlotRun> = None;
        for (p, inc, generation, page_in_buf) in fills {
            let Some(e) = self.map.get_mut(&p) else {
                continue;
            };
            if e.incarnation != inc || e.filling != Some(generation) {
                continue;
            }
            e.filling = None;
            if e.generation != generation || e.slot_write_inflight {
                continue;
            }
            e.slot_write_inflight = true;
            let slot = e.slot;
            self.pins[slot as usize] += 1;
            self.stats.fills += 1;
            match &mut run {
                Some(r) if r.extends(p, slot, page_in_buf, max_io) => r.incarnations.push(inc),
                _ => {
                    self.submit_fill(out, host, run.take());
                    run = Some(SlotRun::new(p, slot, page_in_buf, inc));
                }
            }
        }
        self.submit_fill(out, host, run.take());
    }

    fn submit_fill(&mut self, out: &mut Outbox, host: u64, run: Option<SlotRun>) {
        let Some(r) = run else { return };
        let dio = self.page_io(
            Op::Write,
            Buffer::Host(host),
            r.page_in_buf,
            r.slot,
            r.len(),
        );
        self.submit(
            out,
            CACHE_DEVICE,
            dio,
            Rec::FillWrite {
                first_page: r.first_page,
                slot: r.slot,
                incarnations: r.incarnations,
            },
        );
    }

    /// The largest device IO in pages.
    fn max_io_pages(&self) -> u64 {
        (u32::MAX as u64 / self.page).min(TAG_PAGE_MASK)
    }

    pub(super) fn submit(&mut self, out: &mut Outbox, device: usize, io: DeviceIo, rec: Rec) {
        let fresh = self.inflight.insert((device, io.tag), rec).is_none();
        assert!(
            fresh,
            "device {device} tag {:#x} is already in flight",
            io.tag
        );
        out.device_ios.push((device, io));
        // The simulator moves no data; trims and flushes carry none.
        if !out.wants_data || !matches!(io.op, Op::Read | Op::Write) {
            return;
        }
        // The tag names the buffer (see `decode_tag`): tell a real executor.
        let (buffer, page_in_buf) = decode_tag(io.tag);
        let offset_bytes = page_in_buf * self.page;
        let buf = match buffer {
            Buffer::Host(host_id) => BufRef::Host {
                host_id,
                offset_bytes,
            },
            Buffer::Staging(id) => BufRef::Staging { id, offset_bytes },
        };
        out.data_for(device, io.tag, buf);
    }

    /// Makes room for and inserts `page`; None when every slot is busy.
    pub(super) fn admit(&mut self, page: u64, out: &mut Outbox) -> Option<u64> {
        if let Some(v) = self.evict.insert(page) {
            self.handle_victim(v, out);
        }
        // After the previous page's slot when that one is free: a run of
        // pages admitted in order gets a run of slots.
        let after = page
            .checked_sub(1)
            .and_then(|q| self.map.get(&q))
            .map(|e| e.slot);
        let Some(slot) = self.free.take(after) else {
            // Every slot waits for a write-back, an IO or (persistent mode)
            // a commit: serve uncached.
            self.evict.remove(page);
            if let Some(m) = &mut self.persist
                && m.table.slots_waiting() > 0
            {
                m.stats.misses_uncached_waiting_for_commit += 1;
                self.try_commit(out);
            }
            return None;
        };
        self.owned[slot as usize] = true;
        self.next_incarnation += 1;
        self.map
            .insert(page, Entry::new(self.next_incarnation, slot, false));
        Some(slot)
    }

    /// Admission control on a miss.
    pub(super) fn wants(&mut self, page: u64) -> bool {
        match self.admission {
            Admission::Always => true,
            Admission::NHit => {
                let n = self.admission_hits;
                let c = match self.ghost.get_mut(&page) {
                    Some(c) => {
                        *c += 1;
                        *c
                    }
                    None => {
                        if self.ghost_cap == 0 {
                            return n <= 1;
                        }
                        // Bounded: forget the oldest remembered page.
                        while self.ghost.len() >= self.ghost_cap {
                            match self.ghost_order.pop_front() {
                                Some(old) => {
                                    self.ghost.remove(&old);
                                }
                                None => break,
                            }
                        }
                        self.ghost.insert(page, 1);
                        self.ghost_order.push_back(page);
                        1
                    }
                };
                if c >= n {
                    self.ghost.remove(&page);
                    true
                } else {
                    false
                }
            }
        }
    }

    pub(super) fn host_part_done(&mut self, host: u64, cache: bool, out: &mut Outbox) {
        let Some(h) = self.hosts.get_mut(&host) else {
            return;
        };
        h.cache_only &= cache;
        h.parts -= 1;
        if h.parts == 0 {
            let tier = if h.cache_only {
                TIER_CACHE
            } else {
                TIER_BACKING
            };
            let h = self.hosts.remove(&host).unwrap();
            if let Some(e) = h.failed {
                out.failed.push((host, e));
                return;
            }
            if h.cache_only {
                self.stats.host_ios_cache_only += 1;
            }
            out.complete.push((host, tier));
        }
    }

    /// The sequential cutoff (`crate::streams`): an IO whose stream has
    /// covered `sequential_bypass_bytes` or more, this IO included, admits
    /// nothing (pages it finds cached are still used, so the cache stays
    /// coherent) — unless it is a write of a stream the host flushes as it
    /// goes (a log), whose FLUSHes would otherwise wait for the backing
    /// device.
    pub(super) fn bypass(&mut self, io: &HostIo) -> bool {
        let v =
            self.streams
                .observe_flushed(io.offset_bytes, io.size_bytes as u64, self.host_flushes);
        let log = io.op == Op::Write && v.flushed_as_it_goes();
        let bypass = self.bypass_bytes > 0 && v.run_bytes >= self.bypass_bytes && !log;
        if bypass {
            self.stats.bypassed_ios += 1;
            self.stats.bypassed_bytes += io.size_bytes as u64;
        }
        bypass
    }

    pub(super) fn read(&mut self, io: HostIo, first: u64, n: u64, bypass: bool, out: &mut Outbox) {
        let id = io.id;
        let mut parts = 0u32;
        let mut cache_only = true;
        // A backing read run: (first page, pages, fills it feeds).
        let mut run: Option<(u64, u64, Vec<Fill>)> = None;
        // A cache read run: hits in consecutive slots, read as one IO.
        let mut hits: Option<SlotRun> = None;
        let max_io = self.max_io_pages();
        let mut i = 0;
        while i < n {
            let p = first + i;
            let hit = self.map.get(&p).is_some_and(|e| e.valid);
            if hit {
                self.stats.read_hits += 1;
                let e = self.map.get_mut(&p).unwrap();
                // Clean-evicted pages are gone from the map; evicting (dirty)
                // ones are re-admitted only by writes.
                let (slot, evicting) = (e.slot, e.evicting);
                if !evicting {
                    self.evict.access(p);
                }
                parts += self.submit_backing_read(out, id, first, run.take());
                // Pinned now: a victim chosen later in this IO keeps its
                // slot until the read is done.
                self.pins[slot as usize] += 1;
                match &mut hits {
                    Some(r) if r.extends(p, slot, i, max_io) => r.incarnations.push(0),
                    _ => {
                        parts += self.submit_hit_read(out, id, first, hits.take());
                        hits = Some(SlotRun::new(p, slot, i, 0));
                    }
                }
            } else {
                parts += self.submit_hit_read(out, id, first, hits.take());
                self.stats.read_misses += 1;
                cache_only = false;
                let mut fill = None;
                if !self.map.contains_key(&p)
                    && !bypass
                    && !self.backing_inflight.contains_key(&p)
                    && self.wants(p)
                {
                    if self.admit(p, out).is_some() {
                        let e = self.map.get_mut(&p).unwrap();
                        e.filling = Some(e.generation);
                        fill = Some((p, e.incarnation, e.generation, i));
                    }
                } else if bypass {
                    self.stats.bypassed_pages += 1;
                }
                match &mut run {
                    Some((f, k, fills)) if *f + *k == p && *k < max_io => {
                        *k += 1;
                        fills.extend(fill);
                    }
                    _ => {
                        parts += self.submit_backing_read(out, id, first, run.take());
                        run = Some((p, 1, fill.into_iter().collect()));
                    }
                }
            }
            i += 1;
        }
        parts += self.submit_hit_read(out, id, first, hits.take());
        parts += self.submit_backing_read(out, id, first, run.take());
        self.hosts.insert(
            id,
            HostPending {
                parts,
                cache_only,
                failed: None,
            },
        );
    }

    /// Issues (or queues behind an earlier one) a host write into a page's slot.
    pub(super) fn slot_write(&mut self, host: u64, page: u64, page_in_buf: u64, out: &mut Outbox) {
        let e = self.map.get_mut(&page).unwrap();
        if e.slot_write_inflight {
            e.waiting.push_back((host, page_in_buf));
            return;
        }
        e.slot_write_inflight = true;
        let (slot, incarnation) = (e.slot, e.incarnation);
        self.pins[slot as usize] += 1;
        let dio = self.page_io(Op::Write, Buffer::Host(host), page_in_buf, slot, 1);
        self.submit(
            out,
            CACHE_DEVICE,
            dio,
            Rec::SlotWrite {
                host,
                first_page: page,
                slot,
                incarnations: vec![incarnation],
            },
        );
    }

    pub(super) fn write(&mut self, io: HostIo, first: u64, n: u64, bypass: bool, out: &mut Outbox) {
        let id = io.id;
        // Registered first, with one extra part released at the end, and
        // each part counted as soon as it exists: making room for a page may
        // complete this IO's queued parts early (a clean victim with queued
        // write-through parts), which must not complete the IO itself.
        self.hosts.insert(
            id,
            HostPending {
                parts: 1,
                cache_only: true,
                failed: None,
            },
        );
        let mut cache_only = true;
        // Direct backing run: (first page, pages).
        let mut run: Option<(u64, u64)> = None;
        // Slot writes of pages in consecutive slots, written as one IO.
        let mut slots: Option<SlotRun> = None;
        let max_io = self.max_io_pages();
        for i in 0..n {
            let p = first + i;
            let cached = self.map.contains_key(&p);
            if cached {
                self.stats.write_hits += 1;
            } else {
                self.stats.write_misses += 1;
            }
            let to_cache = match self.mode {
                WriteMode::WriteAround => {
                    if cached {
                        // Invalidate: the backing write makes the copy stale.
                        self.evict.remove(p);
                        self.drop_entry(p, out);
                    }
                    false
                }
                _ => {
                    if cached {
                        let e = self.map.get_mut(&p).unwrap();
                        if e.evicting {
                            e.evicting = false;
                            if let Some(v) = self.evict.insert(p) {
                                self.handle_victim(v, out);
                            }
                        } else {
                            self.evict.access(p);
                        }
                        true
                    } else if bypass {
                        self.stats.bypassed_pages += 1;
                        false
                    } else {
                        self.wants(p) && self.admit(p, out).is_some()
                    }
                }
            };
            let to_backing = !to_cache || self.mode == WriteMode::WriteThrough;
            if to_cache {
                let e = self.map.get_mut(&p).unwrap();
                e.generation += 1;
                e.write_back_failed = false;
                e.drop_after_write = false;
                if e.slot_write_inflight {
                    // Queued behind the write in flight (one part).
                    e.waiting.push_back((id, i));
                    self.add_part(id);
                } else {
                    // Marked as being written and pinned now; submitted with
                    // its run of consecutive slots.
                    e.slot_write_inflight = true;
                    let (slot, incarnation) = (e.slot, e.incarnation);
                    self.pins[slot as usize] += 1;
                    match &mut slots {
                        Some(r) if r.extends(p, slot, i, max_io) => {
                            r.incarnations.push(incarnation)
                        }
                        _ => {
                            self.submit_slot_writes(out, id, slots.take());
                            slots = Some(SlotRun::new(p, slot, i, incarnation));
                        }
                    }
                }
                if self.mode == WriteMode::WriteBack {
                    self.set_dirty(p, true);
                }
                // After the page is marked as being written, so the cleaning
                // cannot pick it and read the slot before the new data lands.
                if self.mode == WriteMode::WriteBack {
                    self.clean_set_if_needed(p, out);
                }
            }
            if to_backing {
                cache_only = false;
                *self.backing_inflight.entry(p).or_insert(0) += 1;
                match &mut run {
                    Some((f, k)) if *f + *k == p && *k < max_io => *k += 1,
                    _ => {
                        if let Some((f, k)) = run.take() {
                            self.add_part(id);
                            let dio = self.page_io(Op::Write, Buffer::Host(id), f - first, f, k);
                            self.submit(
                                out,
                                BACKING_DEVICE,
                                dio,
                                Rec::BackingWrite {
                                    host: id,
                                    first: f,
                                    n: k,
                                },
                            );
                        }
                        run = Some((p, 1));
                    }
                }
            }
        }
        self.submit_slot_writes(out, id, slots.take());
        if let Some((f, k)) = run.take() {
            self.add_part(id);
            let dio = self.page_io(Op::Write, Buffer::Host(id), f - first, f, k);
            self.submit(
                out,
                BACKING_DEVICE,
                dio,
                Rec::BackingWrite {
                    host: id,
                    first: f,
                    n: k,
                },
            );
        }
        if let Some(h) = self.hosts.get_mut(&id) {
            h.cache_only &= cache_only;
        }
        self.host_part_done(id, true, out);
    }

    /// A direct backing write of pages [first, first + n) ended (done or
    /// failed): fills of those pages may run again.
    pub(super) fn backing_write_done(&mut self, first: u64, n: u64) {
        for p in first..first + n {
            if let Some(c) = self.backing_inflight.get_mut(&p) {
                *c -= 1;
                if *c == 0 {
                    self.backing_inflight.remove(&p);
                }
            }
        }
    }

    pub(super) fn add_part(&mut self, host: u64) {
        if let Some(h) = self.hosts.get_mut(&host) {
            h.parts += 1;
        }
    }
}
