//! Host trims: the backing range is trimmed, then the cached pages it
//! covers are dropped (module docs of `cache`).

use super::*;

impl Cache {
    /// A host trim in flight covers `page` entirely.
    pub(super) fn under_trim(&self, page: u64) -> bool {
        self.trims
            .iter()
            .any(|t| t.first_full_page <= page && page < t.end_full_page)
    }

    /// The cached pages in [lo, hi), ascending; by lookups or by a scan of
    /// the map, whichever is smaller (a trim or a locate may span far more
    /// pages than the cache holds).
    pub(super) fn cached_pages_in(&self, lo: u64, hi: u64) -> Vec<u64> {
        if hi <= lo {
            return Vec::new();
        }
        if hi - lo <= self.map.len() as u64 {
            (lo..hi).filter(|p| self.map.contains_key(p)).collect()
        } else {
            let mut v: Vec<u64> = self
                .map
                .keys()
                .copied()
                .filter(|p| (lo..hi).contains(p))
                .collect();
            v.sort_unstable();
            v
        }
    }

    /// A host trim: the backing range is trimmed now, the cached pages it
    /// covers are dropped when that completes (`trim_done`). A flush already
    /// running on one of them races the backing trim.
    pub(super) fn trim(&mut self, io: HostIo, out: &mut Outbox) {
        self.stats.trims += 1;
        let end = io.offset_bytes + io.size_bytes as u64;
        let t = TrimInFlight {
            host: io.id,
            first_full_page: io.offset_bytes.div_ceil(self.page),
            end_full_page: end / self.page,
        };
        for p in self.cached_pages_in(t.first_full_page, t.end_full_page) {
            let e = self.map.get_mut(&p).unwrap();
            if e.flushing && !e.trim_raced {
                e.trim_raced = true;
                self.stats.trim_raced_flushes += 1;
            }
        }
        self.trims.push(t);
        self.hosts.insert(
            io.id,
            HostPending {
                parts: 1,
                cache_only: false,
                failed: None,
            },
        );
        let dio = DeviceIo {
            tag: encode_tag(Buffer::Host(io.id), 0),
            op: Op::Trim,
            offset_bytes: io.offset_bytes,
            size_bytes: io.size_bytes,
        };
        self.submit(out, BACKING_DEVICE, dio, Rec::Trim { host: io.id });
    }

    /// The backing trim of host trim `host` completed: drop the pages it
    /// covers unless a device IO writes or flushes them, or they are dirty
    /// and a flush raced the trim (see the module docs); then complete it.
    pub(super) fn trim_done(&mut self, host: u64, out: &mut Outbox) {
        let i = self
            .trims
            .iter()
            .position(|t| t.host == host)
            .expect("a trim completion has its trim");
        let t = self.trims.swap_remove(i);
        for p in self.cached_pages_in(t.first_full_page, t.end_full_page) {
            // Overlapping trims (an ill-formed host): the other one still
            // needs the mark.
            let still_trimmed = self.under_trim(p);
            let e = self.map.get_mut(&p).unwrap();
            let busy = e.flushing || e.slot_write_inflight || !e.waiting.is_empty();
            let stale_backing = e.dirty && e.trim_raced;
            if !still_trimmed {
                e.trim_raced = false;
            }
            if busy || stale_backing {
                self.stats.trim_kept_pages += 1;
                continue;
            }
            let (dirty, evicting) = (e.dirty, e.evicting);
            if dirty {
                self.set_dirty(p, false);
                self.stats.trimmed_dirty_pages += 1;
                // Its entry's clear relies on the backing trim (else a
                // crash could bring back an older backing copy).
                if let Some(m) = &mut self.persist {
                    m.backing_unflushed = true;
                }
            }
            // An evicting page already left the eviction policy.
            if !evicting {
                self.evict.remove(p);
            }
            self.drop_entry(p, out);
            self.stats.trimmed_pages += 1;
        }
        self.host_part_done(host, false, out);
    }
}
