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

use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

pub struct Lru {
    cap: usize,
    /// Page → stamp of its latest access.
    map: FxHashMap<Key, u64>,
    /// Accesses in order; entries whose stamp is not their page's latest are stale.
    log: VecDeque<(Key, u64)>,
    clock: u64,
}

impl Lru {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        let mut map = FxHashMap::default();
        // One spare slot: a miss inserts before it removes the victim.
        map.reserve(cap.min(1 << 24) + 1);
        Lru {
            cap,
            map,
            log: VecDeque::with_capacity(cap.min(1 << 24) * 2 + 16),
            clock: 0,
        }
    }

    #[inline]
    fn stamp(&mut self, key: Key) -> u64 {
        self.clock += 1;
        self.log.push_back((key, self.clock));
        if self.log.len() > 4 * self.cap + 64 {
            self.compact();
        }
        self.clock
    }

    /// Drops stale log entries, keeping order (amortized: at least 3/4 of
    /// the log is stale when this runs).
    #[cold]
    fn compact(&mut self) {
        let map = &self.map;
        self.log.retain(|(k, t)| map.get(k) == Some(t));
    }

    /// Removes the least recently used page.
    #[inline]
    fn evict(&mut self) -> Option<Key> {
        while let Some((k, t)) = self.log.pop_front() {
            if let std::collections::hash_map::Entry::Occupied(e) = self.map.entry(k) {
                if *e.get() == t {
                    e.remove();
                    return Some(k);
                }
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
        let t = self.stamp(key);
        self.map.insert(key, t);
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
        self.clock += 1;
        let now = self.clock;
        if let Some(t) = self.map.get_mut(&key) {
            *t = now;
            self.log.push_back((key, now));
            if self.log.len() > 4 * self.cap + 64 {
                self.compact();
            }
            return Access::Hit;
        }
        self.clock -= 1; // insert_absent stamps it
        Access::Miss {
            evicted: self.insert_absent(key),
        }
    }
    fn contains(&self, key: Key) -> bool {
        self.map.contains_key(&key)
    }
    fn insert(&mut self, key: Key) -> Option<Key> {
        if self.map.contains_key(&key) {
            return None;
        }
        self.insert_absent(key)
    }
    fn remove(&mut self, key: Key) -> bool {
        // Its log entries become stale and are skipped or compacted away.
        self.map.remove(&key).is_some()
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
}
