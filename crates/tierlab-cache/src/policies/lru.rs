//! LRU: evict the page used longest ago (libCacheSim's `LRU`).
//!
//! Implemented with a last-access stamp per page and a FIFO log of
//! (page, stamp) accesses instead of a linked list: the least recently used
//! page is the first log entry whose stamp is still its page's latest, so
//! eviction pops stale entries until it finds one. A hit is one hash update
//! plus an append to the log (sequential memory) where a list needs the
//! page's node and both neighbours — fewer random memory touches per access,
//! which is what bounds a cache simulator. The log is compacted when it
//! grows past a few times the capacity, so memory stays O(capacity) and the
//! work stays O(1) amortized. Eviction order is exactly LRU's (tests check it
//! against a brute-force LRU and libCacheSim).

use std::collections::VecDeque;

use crate::table::StampTable;
use crate::{Access, Eviction, Key};

pub struct Lru {
    cap: usize,
    /// Page → stamp of its latest access.
    map: StampTable,
    /// Accesses in order; entries whose stamp is not their page's latest are stale.
    log: VecDeque<(Key, u64)>,
    clock: u64,
    /// Log entries popped so far, and the absolute log position up to
    /// which `access_batch` has prefetched the entries' slots: eviction
    /// checks each popped entry against the table (a random touch), and
    /// most popped entries are stale, so they are prefetched in order.
    log_popped: u64,
    log_prefetched: u64,
}

/// How many requests ahead `access_batch` prefetches a key's table slot:
/// enough to cover a DRAM miss at a few ns of work per request.
const PREFETCH_AHEAD: usize = 16;

impl Lru {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        Lru {
            cap,
            // One spare slot: a miss inserts before it removes the victim.
            map: StampTable::with_capacity(cap.min(1 << 24) + 1),
            log: VecDeque::with_capacity(cap.min(1 << 24) * 2 + 16),
            clock: 0,
            log_popped: 0,
            log_prefetched: 0,
        }
    }

    #[inline]
    fn log_access(&mut self, key: Key, t: u64) {
        self.log.push_back((key, t));
        if self.log.len() > 4 * self.cap + 64 {
            self.compact();
        }
    }

    /// Drops stale log entries, keeping order (amortized: at least 3/4 of
    /// the log is stale when this runs).
    #[cold]
    fn compact(&mut self) {
        let map = &self.map;
        self.log.retain(|&(k, t)| map.get(k) == Some(t));
        self.log_prefetched = self.log_popped; // positions moved
    }

    /// Removes the least recently used page.
    #[inline]
    fn evict(&mut self) -> Option<Key> {
        while let Some((k, t)) = self.log.pop_front() {
            self.log_popped += 1;
            if self.map.remove(k, Some(t)) {
                return Some(k);
            }
        }
        None
    }

    #[inline]
    fn insert_absent(&mut self, key: Key) -> Option<Key> {
        let evicted = if self.map.len() >= self.cap {
            self.evict()
        } else {
            None
        };
        self.clock += 1;
        let t = self.clock;
        self.map.insert(key, t);
        self.log_access(key, t);
        evicted
    }
}

impl Eviction for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.map.len()
    }
    #[inline]
    fn access(&mut self, key: Key) -> Access {
        if let Some(t) = self.map.get_mut(key) {
            self.clock += 1;
            *t = self.clock;
            let now = self.clock;
            self.log_access(key, now);
            return Access::Hit;
        }
        Access::Miss {
            evicted: self.insert_absent(key),
        }
    }
    fn contains(&self, key: Key) -> bool {
        self.map.contains(key)
    }
    fn insert(&mut self, key: Key) -> Option<Key> {
        if self.map.contains(key) {
            return None;
        }
        self.insert_absent(key)
    }
    fn remove(&mut self, key: Key) -> bool {
        // Its log entries become stale and are skipped or compacted away.
        self.map.remove(key, None)
    }
    fn access_batch(&mut self, keys: &[Key], missed: &mut Vec<bool>) {
        missed.clear();
        missed.reserve(keys.len());
        for (i, &key) in keys.iter().enumerate() {
            // The slot of a key a few requests ahead, and of the entry
            // eviction will look at next: both are random DRAM touches.
            if let Some(&ahead) = keys.get(i + PREFETCH_AHEAD) {
                self.map.prefetch(ahead);
            }
            self.log_prefetched = self.log_prefetched.max(self.log_popped);
            while self.log_prefetched < self.log_popped + PREFETCH_AHEAD as u64 {
                match self
                    .log
                    .get((self.log_prefetched - self.log_popped) as usize)
                {
                    Some(&(old, _)) => self.map.prefetch(old),
                    None => break,
                }
                self.log_prefetched += 1;
            }
            missed.push(!self.access(key).is_hit());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_1_2_3_1_4() {
        // Capacity 3: the hit on 1 makes it most recent, so 4 evicts 2
        // (FIFO would evict 1).
        let mut c = Lru::new(3);
        for k in [1, 2, 3] {
            assert_eq!(c.access(k), Access::Miss { evicted: None });
        }
        assert_eq!(c.access(1), Access::Hit);
        assert_eq!(c.access(4), Access::Miss { evicted: Some(2) });
        assert_eq!(c.access(5), Access::Miss { evicted: Some(3) });
        assert_eq!(c.access(1), Access::Hit);
    }

    #[test]
    fn batch_path_equals_one_by_one_across_compactions() {
        // Skewed keys from a fixed LCG: many hits (log compactions) and
        // many evictions; the batch path (prefetching) must agree exactly.
        let mut x = 12345u64;
        let keys: Vec<Key> = (0..200_000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (x >> 33) % 1000;
                if r < 700 { r % 50 } else { r * 7 }
            })
            .collect();
        let (mut one, mut batch) = (Lru::new(64), Lru::new(64));
        let want: Vec<bool> = keys.iter().map(|&k| !one.access(k).is_hit()).collect();
        let mut got = Vec::new();
        let mut missed = Vec::new();
        for chunk in keys.chunks(999) {
            batch.access_batch(chunk, &mut missed);
            got.extend_from_slice(&missed);
        }
        assert_eq!(got, want);
        assert!(want.iter().filter(|&&m| m).count() > 10_000);
        assert!(want.iter().filter(|&&m| !m).count() > 100_000);
    }
}
