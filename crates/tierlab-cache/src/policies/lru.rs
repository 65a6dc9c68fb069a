//! LRU: evict the page used longest ago (libCacheSim's `LRU`).
//!
//! Implemented with an access ring instead of a linked list: every access
//! appends the page's key at the ring's back, and the table maps each
//! cached page to the ring position of its latest access. That position's
//! entry is *live*; the page's older entries are marked dead (one bit in a
//! bitset) as it is accessed again. The least recently used page is then
//! the first live entry from the front, found by scanning the bitset a word
//! at a time. A hit is one table probe (the slot is rewritten in place),
//! one bit cleared and one sequential append, where a list needs the page's
//! node and both neighbours; a miss adds the eviction: a bit scan, one
//! sequential read and one table removal. No per-entry table lookups are
//! needed to skip stale entries, and nothing is allocated per access.
//!
//! When the ring fills (its span from front to back reaches its size), it
//! doubles if more than a quarter of it is live, else the live entries are
//! slid to the front in order and their table positions rewritten — at
//! most a quarter of the ring's entries per ring's worth of accesses, O(1)
//! amortized. Eviction order is
//! exactly LRU's (tests check it against a brute-force LRU and libCacheSim).

use crate::table::StampTable;
use crate::{Access, Eviction, Key};

pub struct Lru {
    cap: usize,
    /// Page → absolute ring position of its latest access (positions start
    /// at 1: the table reserves 0 for empty slots).
    map: StampTable,
    /// Keys by position modulo its length (a power of two).
    ring: Vec<Key>,
    /// One bit per ring slot: is the entry its page's latest access?
    live: Vec<u64>,
    /// `ring.len() - 1`.
    mask: u64,
    /// Absolute positions: entries in `front..back` are in the ring; none
    /// before `front` is live.
    front: u64,
    back: u64,
    /// `access_batch`: the live entry up to which eviction's table slots
    /// have been prefetched (eviction removes the front entry's key, a
    /// random table touch).
    prefetched: u64,
}

/// How many requests ahead `access_batch` prefetches a key's table slot,
/// and how many live ring entries ahead eviction's slots are prefetched:
/// enough to cover a DRAM miss at a few ns of work per request.
const PREFETCH_AHEAD: usize = 16;
const FIRST_POSITION: u64 = 1;
/// Ring entries allocated up front (more as the cache fills).
const RING_LEN_INITIAL: usize = 1 << 12;

impl Lru {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        // The ring grows to hold at least 4 × the live entries (cap + 1:
        // a miss inserts before it evicts); small caches start there.
        let ring_len = (4 * (cap + 1))
            .next_power_of_two()
            .clamp(64, RING_LEN_INITIAL);
        Lru {
            cap,
            map: StampTable::with_capacity(cap.min(1 << 24) + 1),
            ring: vec![0; ring_len],
            live: vec![0; ring_len / 64],
            mask: ring_len as u64 - 1,
            front: FIRST_POSITION,
            back: FIRST_POSITION,
            prefetched: FIRST_POSITION,
        }
    }

    #[inline]
    fn is_live(&self, pos: u64) -> bool {
        let i = pos & self.mask;
        (self.live[(i >> 6) as usize] >> (i & 63)) & 1 != 0
    }

    #[inline]
    fn set_live(live: &mut [u64], mask: u64, pos: u64) {
        let i = pos & mask;
        live[(i >> 6) as usize] |= 1 << (i & 63);
    }

    #[inline]
    fn kill(&mut self, pos: u64) {
        debug_assert!(self.is_live(pos), "position {pos} is not live");
        let i = pos & self.mask;
        self.live[(i >> 6) as usize] &= !(1 << (i & 63));
    }

    /// Appends `key` at `back` (its table entry already says `back`).
    #[inline]
    fn append(&mut self, key: Key) {
        let pos = self.back;
        self.ring[(pos & self.mask) as usize] = key;
        Self::set_live(&mut self.live, self.mask, pos);
        self.back += 1;
        if self.back - self.front > self.mask {
            self.make_room();
        }
    }

    /// The ring is full: double it while more than a quarter of it is live,
    /// else slide the live entries to the front (so a compaction frees at
    /// least 3/4 of the ring: at most 1/3 of a table write per access).
    #[cold]
    fn make_room(&mut self) {
        // A warm-up of distinct pages fills the whole span with live
        // entries (every slot): then the ring doubles.
        let live_count = self.map.len();
        assert!(
            live_count <= self.ring.len(),
            "more live entries than ring slots"
        );
        if live_count * 4 > self.ring.len() {
            let len = self.ring.len() * 2;
            let mask = len as u64 - 1;
            let mut ring = vec![0; len];
            let mut live = vec![0; len / 64];
            for pos in (self.front..self.back).filter(|&p| self.is_live(p)) {
                ring[(pos & mask) as usize] = self.ring[(pos & self.mask) as usize];
                Self::set_live(&mut live, mask, pos);
            }
            (self.ring, self.live, self.mask) = (ring, live, mask);
            return;
        }
        let mut to = self.front;
        for from in self.front..self.back {
            if !self.is_live(from) {
                continue;
            }
            if from != to {
                let key = self.ring[(from & self.mask) as usize];
                self.kill(from);
                self.ring[(to & self.mask) as usize] = key;
                Self::set_live(&mut self.live, self.mask, to);
                *self
                    .map
                    .get_mut(key)
                    .expect("every live ring entry is in the table") = to;
            }
            to += 1;
        }
        debug_assert_eq!((to - self.front) as usize, live_count);
        self.back = to;
        self.prefetched = self.front;
    }

    /// The first live position in `pos..back`, scanning the bitset a word
    /// at a time.
    #[inline]
    fn next_live(&self, mut pos: u64) -> Option<u64> {
        while pos < self.back {
            let i = pos & self.mask;
            let bits = self.live[(i >> 6) as usize] >> (i & 63);
            if bits != 0 {
                // Slots past `back` hold entries from before `front`: dead.
                let found = pos + bits.trailing_zeros() as u64;
                debug_assert!(found < self.back);
                return Some(found);
            }
            pos = (pos | 63) + 1;
        }
        None
    }

    /// Removes the least recently used page.
    #[inline]
    fn evict(&mut self) -> Key {
        let pos = self
            .next_live(self.front)
            .expect("a full cache has a live ring entry");
        let key = self.ring[(pos & self.mask) as usize];
        self.kill(pos);
        self.front = pos + 1;
        let removed = self.map.remove(key, None);
        debug_assert!(removed, "a live ring entry's page is cached");
        key
    }

    #[inline]
    fn access_inner(&mut self, key: Key) -> Access {
        match self.map.upsert(key, self.back) {
            Some(old) => {
                self.kill(old);
                self.append(key);
                Access::Hit
            }
            None => {
                self.append(key);
                let evicted = (self.map.len() > self.cap).then(|| self.evict());
                debug_assert!(self.map.len() <= self.cap);
                Access::Miss { evicted }
            }
        }
    }

    /// Prefetches the table slot of the live entry after the last one
    /// prefetched (restarting `PREFETCH_AHEAD` entries past the front if
    /// eviction has overtaken it).
    #[inline]
    fn prefetch_victims(&mut self) {
        if self.prefetched < self.front {
            self.prefetched = self.front;
            for _ in 0..PREFETCH_AHEAD {
                if !self.prefetch_next_victim() {
                    return;
                }
            }
        }
        self.prefetch_next_victim();
    }

    #[inline]
    fn prefetch_next_victim(&mut self) -> bool {
        match self.next_live(self.prefetched) {
            Some(pos) => {
                self.map.prefetch(self.ring[(pos & self.mask) as usize]);
                self.prefetched = pos + 1;
                true
            }
            None => {
                self.prefetched = self.back;
                false
            }
        }
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
        self.access_inner(key)
    }
    fn contains(&self, key: Key) -> bool {
        self.map.contains(key)
    }
    fn insert(&mut self, key: Key) -> Option<Key> {
        if self.map.contains(key) {
            return None;
        }
        match self.access_inner(key) {
            Access::Miss { evicted } => evicted,
            Access::Hit => unreachable!("the key was absent"),
        }
    }
    fn remove(&mut self, key: Key) -> bool {
        let Some(pos) = self.map.get(key) else {
            return false;
        };
        self.kill(pos);
        self.map.remove(key, None)
    }
    fn access_batch(&mut self, keys: &[Key], missed: &mut Vec<bool>) {
        missed.clear();
        missed.reserve(keys.len());
        // The first keys' slots all at once (their misses overlap), then
        // each key's a few requests ahead: random touches.
        for &key in keys.iter().take(PREFETCH_AHEAD) {
            self.map.prefetch(key);
        }
        for (i, &key) in keys.iter().enumerate() {
            if let Some(&ahead) = keys.get(i + PREFETCH_AHEAD) {
                self.map.prefetch(ahead);
            }
            let hit = self.access_inner(key).is_hit();
            // After an eviction, the slot of a victim a few evictions ahead.
            if !hit && self.map.len() == self.cap {
                self.prefetch_victims();
            }
            missed.push(!hit);
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

    /// Brute-force LRU: a Vec ordered from least to most recently used.
    fn reference(cap: usize, keys: &[Key]) -> Vec<Access> {
        let mut v: Vec<Key> = Vec::new();
        keys.iter()
            .map(|&k| {
                if let Some(p) = v.iter().position(|&x| x == k) {
                    v.remove(p);
                    v.push(k);
                    return Access::Hit;
                }
                let evicted = (v.len() == cap).then(|| v.remove(0));
                v.push(k);
                Access::Miss { evicted }
            })
            .collect()
    }

    /// 70 % of the keys from a hot set of 50, the rest over `universe`
    /// (a fixed LCG): many hits and many evictions.
    fn skewed_keys(n: usize, universe: u64, seed: u64) -> Vec<Key> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = x >> 33;
                if r % 10 < 7 {
                    r % 50
                } else {
                    50 + r % universe
                }
            })
            .collect()
    }

    /// Phases of `skewed_keys` alternating with phases that re-access a
    /// working set smaller than `cap`: all hits while the least recently
    /// used page stays put, so the ring fills with dead entries.
    fn phased_keys(n: usize, cap: usize, universe: u64, seed: u64) -> Vec<Key> {
        let random = skewed_keys(n, universe, seed);
        let working = (cap as u64 - 1).max(1);
        random
            .chunks(2500)
            .enumerate()
            .flat_map(|(i, chunk)| {
                let hot = (i % 2 == 1).then(|| chunk[0] % 7 * 1000);
                chunk.iter().map(move |&k| match hot {
                    Some(base) => 1_000_000 + base + k % working,
                    None => k,
                })
            })
            .collect()
    }

    #[test]
    fn every_eviction_equals_brute_force_across_ring_growth_and_compaction() {
        // Small rings (at full size from the start) and one that grows from
        // the initial 4096 entries (capacity 3000: to 8192, then 16384).
        for (cap, universe) in [(1, 5), (2, 9), (3, 30), (17, 300), (64, 1000), (3000, 9000)] {
            let n = 60_000;
            let keys = phased_keys(n, cap, universe, 7 + cap as u64);
            let mut c = Lru::new(cap);
            let got: Vec<Access> = keys.iter().map(|&k| c.access(k)).collect();
            assert_eq!(got, reference(cap, &keys), "capacity {cap}");
            // Compacted (positions were reused) ...
            assert!(c.back < FIRST_POSITION + n as u64, "capacity {cap}");
            // ... and grew to 4 × the live entries or more.
            let want = (4 * (cap + 1)).next_power_of_two().max(64);
            assert_eq!(c.ring.len(), want, "capacity {cap}");
        }
    }

    #[test]
    fn a_cold_start_of_distinct_pages_larger_than_the_first_ring_grows_it() {
        // Every access a new page until the cache is full: the ring's whole
        // span is live when it first fills (a panic before this test).
        let cap = 3 * RING_LEN_INITIAL;
        let keys: Vec<Key> = (0..2 * cap as u64).chain(0..cap as u64 / 2).collect();
        let mut c = Lru::new(cap);
        let got: Vec<Access> = keys.iter().map(|&k| c.access(k)).collect();
        assert_eq!(got, reference(cap, &keys));
    }

    #[test]
    fn remove_and_insert_keep_lru_order() {
        let mut c = Lru::new(3);
        for k in [1, 2, 3] {
            c.access(k);
        }
        assert!(c.remove(2));
        assert!(!c.remove(2));
        assert_eq!(c.insert(4), None); // room left by 2
        assert_eq!(c.insert(4), None); // already cached
        assert_eq!(c.access(5), Access::Miss { evicted: Some(1) });
        assert_eq!(c.access(6), Access::Miss { evicted: Some(3) });
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn batch_path_equals_one_by_one_across_compactions() {
        let keys = skewed_keys(200_000, 950, 12345);
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
