//! S3-FIFO (Yang et al., "FIFO queues are all you need for cache
//! eviction", SOSP '23), exactly as libCacheSim implements it
//! (`cache/eviction/S3FIFO.c`, the version the `libcachesim` 0.3.5 Python
//! package wraps) for every capacity libCacheSim can run usefully
//! (≥ 20 pages); python/tests/test_cache.py checks miss counts against it.
//!
//! A small FIFO S (target ⌊10 % of the capacity⌋), a main FIFO M (the rest)
//! and a ghost FIFO G of keys only (⌊90 % of the capacity⌋ keys). Each
//! cached page has a frequency, +1 on every hit.
//! * Miss whose key is in G: the key leaves G and the page enters M with
//!   frequency 0. Any other miss enters S — except during warm-up (before
//!   the first eviction), when S is already at its target: then it enters
//!   M, so the cache fills with S at its target and M full.
//! * Evict (one page per miss, the cache being full): from M if M holds
//!   more than its share or S is empty, else from S.
//! * From S: the oldest page with frequency ≥ 2 moves to M's head with
//!   frequency 0 (libCacheSim inserts a fresh object), and the next oldest
//!   is examined; the first with frequency < 2 is evicted and its key
//!   enters G (G's oldest key dropped when G is full). If S empties
//!   without evicting, evict from M.
//! * From M: the oldest page with frequency f ≥ 1 is reinserted at the head
//!   with min(f, 3) − 1 (a 2-bit clock); the first with 0 is evicted.
//!
//! Frequencies are stored capped at 3: the decisions only read `f ≥ 2`,
//! `f ≥ 1` and `min(f, 3)`, so capping on the hit gives the same results as
//! libCacheSim's uncapped counter.
//!
//! **The one deliberate difference: caches under 20 pages.** libCacheSim
//! refuses a small queue smaller than 2 pages: under 10 pages its S would
//! be 0 and `S3FIFO_init` aborts; from 10 to 19 pages S is 1 page and it
//! admits only objects strictly smaller than S, so a 1-page object is never
//! cached and every request misses (a deliberate guard for large objects
//! that, with unit-size pages, leaves a cache that caches nothing). Here S
//! is at least 1 page and a page is always admitted, so S3-FIFO at 1–19
//! pages is a working cache; from 20 pages on the rules above are
//! libCacheSim's to the page.

use super::list::{Arena, List};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

const SMALL: u8 = 0;
const MAIN: u8 = 1;
const GHOST: u8 = 2;
/// Frequency at which a page leaves S for M instead of G
/// (libCacheSim's `move-to-main-threshold`).
const MOVE_TO_MAIN_FREQ: u32 = 2;
/// Frequencies are kept in 0..=3 (see the module comment).
const FREQ_MAX: u32 = 3;

/// S's target in pages: libCacheSim's `(int64_t)(cache_size * 0.1)`, i.e.
/// ⌊capacity / 10⌋ (exact for every capacity; a test checks), raised to 1.
pub fn small_target_pages(capacity_pages: usize) -> usize {
    (capacity_pages / 10).max(1)
}

/// G's size in keys: libCacheSim's `(int64_t)(cache_size * 0.9)`, i.e.
/// ⌊9 × capacity / 10⌋ (not M's share, which is ⌈9 × capacity / 10⌉).
pub fn ghost_keys(capacity_pages: usize) -> usize {
    capacity_pages.saturating_mul(9) / 10
}

pub struct S3Fifo {
    cap: usize,
    small_cap: usize,
    main_cap: usize,
    ghost_cap: usize,
    /// Set by the first eviction; until then a miss finding S at its target
    /// goes to M (libCacheSim's `has_evicted`).
    has_evicted: bool,
    map: FxHashMap<Key, u32>,
    arena: Arena,
    small: List,
    main: List,
    ghost: List,
}

impl S3Fifo {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        let small_cap = small_target_pages(cap);
        S3Fifo {
            cap,
            small_cap,
            main_cap: cap - small_cap,
            ghost_cap: ghost_keys(cap),
            has_evicted: false,
            map: FxHashMap::default(),
            arena: Arena::with_capacity((cap + ghost_keys(cap)).min(1 << 24)),
            small: List::default(),
            main: List::default(),
            ghost: List::default(),
        }
    }

    fn forget(&mut self, i: u32) {
        let k = self.arena.get(i).key;
        self.map.remove(&k);
        self.arena.release(i);
    }

    /// Evicts one page from M (M is not empty: the caller checked).
    fn evict_main(&mut self) -> Option<Key> {
        // Each pass lowers a frequency (≤ 3), so this ends within
        // 3 × |M| + 1 steps.
        while let Some(t) = self.main.pop_back(&mut self.arena) {
            let n = self.arena.get_mut(t);
            if n.aux > 0 {
                n.aux -= 1;
                self.main.push_front(&mut self.arena, t);
            } else {
                let k = n.key;
                self.forget(t);
                return Some(k);
            }
        }
        None
    }

    /// Evicts one page from S, promoting the frequently used ones it passes
    /// to M; `None` if S empties without evicting.
    fn evict_small(&mut self) -> Option<Key> {
        while let Some(t) = self.small.pop_back(&mut self.arena) {
            let n = self.arena.get_mut(t);
            if n.aux >= MOVE_TO_MAIN_FREQ {
                n.tag = MAIN;
                n.aux = 0;
                self.main.push_front(&mut self.arena, t);
                continue;
            }
            n.tag = GHOST;
            n.aux = 0;
            let k = n.key;
            self.ghost.push_front(&mut self.arena, t);
            if self.ghost.len > self.ghost_cap
                && let Some(g) = self.ghost.pop_back(&mut self.arena)
            {
                self.forget(g);
            }
            return Some(k);
        }
        None
    }

    fn evict(&mut self) -> Option<Key> {
        self.has_evicted = true;
        if self.main.len <= self.main_cap
            && self.small.len > 0
            && let Some(k) = self.evict_small()
        {
            return Some(k);
        }
        self.evict_main()
    }

    fn miss(&mut self, key: Key) -> Option<Key> {
        let ghost = self.map.get(&key).copied();
        if let Some(i) = ghost {
            debug_assert_eq!(self.arena.get(i).tag, GHOST);
            // Off G before evicting, so trimming G cannot free this node.
            self.ghost.unlink(&mut self.arena, i);
        }
        let evicted = if self.small.len + self.main.len >= self.cap {
            let e = self.evict();
            debug_assert!(e.is_some(), "a full cache always has a page to evict");
            e
        } else {
            None
        };
        match ghost {
            Some(i) => {
                let n = self.arena.get_mut(i);
                n.tag = MAIN;
                n.aux = 0;
                self.main.push_front(&mut self.arena, i);
            }
            None => {
                let to_main = !self.has_evicted && self.small.len >= self.small_cap;
                let i = self.arena.alloc(key, if to_main { MAIN } else { SMALL });
                if to_main {
                    self.main.push_front(&mut self.arena, i);
                } else {
                    self.small.push_front(&mut self.arena, i);
                }
                self.map.insert(key, i);
            }
        }
        debug_assert!(self.small.len + self.main.len <= self.cap);
        debug_assert!(self.ghost.len <= self.ghost_cap);
        evicted
    }
}

impl Eviction for S3Fifo {
    fn name(&self) -> &'static str {
        "s3fifo"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.small.len + self.main.len
    }
    fn access(&mut self, key: Key) -> Access {
        if let Some(&i) = self.map.get(&key) {
            let n = self.arena.get_mut(i);
            if n.tag != GHOST {
                n.aux = (n.aux + 1).min(FREQ_MAX);
                return Access::Hit;
            }
        }
        Access::Miss {
            evicted: self.miss(key),
        }
    }
    fn contains(&self, key: Key) -> bool {
        self.map
            .get(&key)
            .is_some_and(|&i| self.arena.get(i).tag != GHOST)
    }
    fn insert(&mut self, key: Key) -> Option<Key> {
        if self.contains(key) {
            return None;
        }
        self.miss(key)
    }
    fn remove(&mut self, key: Key) -> bool {
        let Some(&i) = self.map.get(&key) else {
            return false;
        };
        match self.arena.get(i).tag {
            SMALL => self.small.unlink(&mut self.arena, i),
            MAIN => self.main.unlink(&mut self.arena, i),
            _ => return false,
        }
        self.forget(i);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_sizes_are_libcachesims_float_truncations() {
        // libCacheSim: small = (int64_t)(size * 0.1), ghost = (int64_t)(size * 0.9).
        let caps = (1..=200_000usize).chain([(1 << 30) - 1, 1 << 30, 14_514, 145_147]);
        for cap in caps {
            assert_eq!(
                small_target_pages(cap),
                ((cap as f64 * 0.1) as usize).max(1),
                "{cap}"
            );
            assert_eq!(ghost_keys(cap), (cap as f64 * 0.9) as usize, "{cap}");
        }
    }

    #[test]
    fn hand_computed() {
        // Capacity 20: S target 2, M share 18, G holds 18 keys.
        let mut c = S3Fifo::new(20);
        // Warm-up: 1 and 2 fill S; 3..=20 go straight to M (S at target,
        // nothing evicted yet).
        for k in 1..=20 {
            assert_eq!(c.access(k), Access::Miss { evicted: None });
        }
        assert_eq!((c.small.len, c.main.len), (2, 18));
        // 1 is hit twice (freq 2: promoted when S is evicted), 2 once.
        c.access(1);
        c.access(1);
        c.access(2);
        // 21: M at its share, so evict from S: 1 moves to M (freq reset to
        // 0, M now 19 > 18), 2 (freq 1) is evicted into G; 21 enters S.
        assert_eq!(c.access(21), Access::Miss { evicted: Some(2) });
        assert!(c.contains(1) && !c.contains(2));
        assert_eq!((c.small.len, c.main.len, c.ghost.len), (1, 19, 1));
        // 2 is a ghost: it goes to M. M is over its share, so M's oldest
        // with freq 0 leaves: 3 (inserted first into M during warm-up).
        assert_eq!(c.access(2), Access::Miss { evicted: Some(3) });
        assert!(c.contains(2) && c.ghost.len == 0);
        // M at 19 > 18 still: the next miss evicts from M again (4), and
        // the new page enters S.
        assert_eq!(c.access(22), Access::Miss { evicted: Some(4) });
        assert_eq!((c.small.len, c.main.len), (2, 18));
        // Now S is at target and M at its share: evict S's oldest, 21
        // (freq 0), into G.
        assert_eq!(c.access(23), Access::Miss { evicted: Some(21) });
        // 1 was promoted with freq 0: a hit makes it 1, so M's clock
        // passes over it once before evicting it.
        assert!(c.contains(1));
    }

    #[test]
    fn tiny_caches_cache_pages() {
        // The deliberate difference from libCacheSim (which aborts under 10
        // pages and caches nothing from 10 to 19): a loop over 3 keys fits
        // in every cache of ≥ 3 pages and hits after the first round.
        for cap in [3, 5, 10, 19] {
            let mut c = S3Fifo::new(cap);
            let misses = (0..300u64).filter(|i| !c.access(i % 3).is_hit()).count();
            assert_eq!(misses, 3, "capacity {cap}");
        }
        // Capacity 1: a repeated key hits.
        let mut c = S3Fifo::new(1);
        assert!(!c.access(7).is_hit());
        assert!(c.access(7).is_hit());
        assert_eq!(c.access(8), Access::Miss { evicted: Some(7) });
    }
}
