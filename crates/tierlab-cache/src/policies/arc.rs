//! ARC (Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement
//! Cache", FAST '03, Fig. 4), unit-size pages. T1/T2 hold cached pages seen
//! once / at least twice recently; B1/B2 are their ghost (history-only)
//! lists; the target size `p` of T1 adapts on ghost hits. Cases I-IV below
//! follow the paper's pseudo-code line by line; `p` is real-valued as in
//! the paper (delta = |B2|/|B1| or |B1|/|B2|, at least 1).
//!
//! One addition the paper does not need: `remove` (invalidation) can leave
//! |T1| + |T2| < c while ghosts exist, which the paper's invariants rule
//! out, so REPLACE only evicts when the cache is actually full.

use super::list::{Arena, List};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

const T1: u8 = 0;
const T2: u8 = 1;
const B1: u8 = 2;
const B2: u8 = 3;

pub struct Arc {
    c: usize,
    p: f64,
    map: FxHashMap<Key, u32>,
    arena: Arena,
    t1: List,
    t2: List,
    b1: List,
    b2: List,
}

impl Arc {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let c = capacity_pages.max(1);
        Arc {
            c,
            p: 0.0,
            map: FxHashMap::default(),
            arena: Arena::with_capacity((2 * c).min(1 << 24)),
            t1: List::default(),
            t2: List::default(),
            b1: List::default(),
            b2: List::default(),
        }
    }

    /// The adaptive target size of T1 (for tests and diagnostics).
    pub fn p(&self) -> f64 {
        self.p
    }

    /// (|T1|, |T2|, |B1|, |B2|).
    pub fn list_sizes(&self) -> (usize, usize, usize, usize) {
        (self.t1.len, self.t2.len, self.b1.len, self.b2.len)
    }

    fn list(&mut self, tag: u8) -> &mut List {
        match tag {
            T1 => &mut self.t1,
            T2 => &mut self.t2,
            B1 => &mut self.b1,
            _ => &mut self.b2,
        }
    }

    fn unlink(&mut self, i: u32) {
        let tag = self.arena.get(i).tag;
        let mut l = *self.list(tag);
        l.unlink(&mut self.arena, i);
        *self.list(tag) = l;
    }

    fn push(&mut self, tag: u8, i: u32) {
        self.arena.get_mut(i).tag = tag;
        let mut l = *self.list(tag);
        l.push_front(&mut self.arena, i);
        *self.list(tag) = l;
    }

    /// Forgets the LRU page of a ghost list entirely.
    fn drop_lru(&mut self, tag: u8) {
        let mut l = *self.list(tag);
        if let Some(t) = l.pop_back(&mut self.arena) {
            let k = self.arena.get(t).key;
            self.map.remove(&k);
            self.arena.release(t);
        }
        *self.list(tag) = l;
    }

    /// The paper's REPLACE(x_t, p): demote the LRU page of T1 (to B1) or of
    /// T2 (to B2). `in_b2` is "x_t is in B2".
    fn replace(&mut self, in_b2: bool) -> Option<Key> {
        if self.t1.len + self.t2.len < self.c {
            return None;
        }
        let t1 = self.t1.len as f64;
        let mut from_t1 = self.t1.len >= 1 && ((in_b2 && t1 == self.p) || t1 > self.p);
        // Unreachable under the paper's invariants; kept so a broken
        // invariant (after `remove`) cannot stall eviction.
        if !from_t1 && self.t2.len == 0 {
            from_t1 = true;
        }
        let (src, dst) = if from_t1 { (T1, B1) } else { (T2, B2) };
        let mut l = *self.list(src);
        let victim = l.pop_back(&mut self.arena)?;
        *self.list(src) = l;
        self.push(dst, victim);
        Some(self.arena.get(victim).key)
    }

    fn miss(&mut self, key: Key) -> Option<Key> {
        if let Some(&i) = self.map.get(&key) {
            let tag = self.arena.get(i).tag;
            let (b1, b2) = (self.b1.len as f64, self.b2.len as f64);
            let evicted = if tag == B1 {
                // Case II: a ghost hit in B1 says T1 should be larger.
                let delta = if b1 >= b2 { 1.0 } else { b2 / b1 };
                self.p = (self.p + delta).min(self.c as f64);
                self.replace(false)
            } else {
                // Case III: a ghost hit in B2 says T2 should be larger.
                let delta = if b2 >= b1 { 1.0 } else { b1 / b2 };
                self.p = (self.p - delta).max(0.0);
                self.replace(true)
            };
            self.unlink(i);
            self.push(T2, i);
            return evicted;
        }
        // Case IV: not in any list.
        let mut evicted = None;
        let l1 = self.t1.len + self.b1.len;
        if l1 >= self.c {
            // Case A: L1 has exactly c pages.
            if self.t1.len < self.c {
                self.drop_lru(B1);
                evicted = self.replace(false);
            } else {
                // B1 is empty: evict T1's LRU without remembering it.
                if let Some(t) = self.t1.pop_back(&mut self.arena) {
                    let k = self.arena.get(t).key;
                    self.map.remove(&k);
                    self.arena.release(t);
                    evicted = Some(k);
                }
            }
        } else {
            // Case B: L1 has fewer than c pages.
            let total = l1 + self.t2.len + self.b2.len;
            if total >= self.c {
                if total >= 2 * self.c {
                    self.drop_lru(B2);
                }
                evicted = self.replace(false);
            }
        }
        let i = self.arena.alloc(key, T1);
        self.push(T1, i);
        self.map.insert(key, i);
        evicted
    }
}

impl Eviction for Arc {
    fn name(&self) -> &'static str {
        "arc"
    }
    fn capacity(&self) -> usize {
        self.c
    }
    fn len(&self) -> usize {
        self.t1.len + self.t2.len
    }
    fn access(&mut self, key: Key) -> Access {
        if let Some(&i) = self.map.get(&key) {
            if self.arena.get(i).tag <= T2 {
                // Case I: a hit in T1 or T2 moves the page to T2's MRU end.
                self.unlink(i);
                self.push(T2, i);
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
            .is_some_and(|&i| self.arena.get(i).tag <= T2)
    }
    fn insert(&mut self, key: Key) -> Option<Key> {
        if self.contains(key) {
            return None;
        }
        self.miss(key)
    }
    fn remove(&mut self, key: Key) -> bool {
        if !self.contains(key) {
            return false;
        }
        if let Some(i) = self.map.remove(&key) {
            self.unlink(i);
            self.arena.release(i);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_grows_on_a_b1_ghost_hit() {
        let mut c = Arc::new(2);
        c.access(1);
        assert_eq!(c.access(1), Access::Hit); // 1 -> T2
        c.access(2); // T1 = [2], T2 = [1]
        // Case IV-B: |L1| = 1 < 2, total = 2 >= c; REPLACE: |T1| = 1 > p = 0
        // so T1's LRU (2) goes to B1.
        assert_eq!(c.access(3), Access::Miss { evicted: Some(2) });
        assert_eq!(c.list_sizes(), (1, 1, 1, 0));
        assert_eq!(c.p(), 0.0);
        // Case II: 2 is in B1, |B1| >= |B2| so delta = 1 and p = 1. REPLACE:
        // |T1| = 1 is not > p, so T2's LRU (1) goes to B2.
        assert_eq!(c.access(2), Access::Miss { evicted: Some(1) });
        assert_eq!(c.p(), 1.0);
        assert_eq!(c.list_sizes(), (1, 1, 0, 1));
        assert!(c.contains(2) && c.contains(3) && !c.contains(1));
        // Case III: 1 is in B2: p shrinks back by 1 (|B2| >= |B1|); REPLACE
        // with x in B2 and |T1| = 1 > p = 0 demotes T1's LRU (3).
        assert_eq!(c.access(1), Access::Miss { evicted: Some(3) });
        assert_eq!(c.p(), 0.0);
        assert_eq!(c.list_sizes(), (0, 2, 1, 0));
    }

    #[test]
    fn case_iv_a_drops_t1_lru_without_ghost_when_b1_empty() {
        let mut c = Arc::new(2);
        c.access(1);
        c.access(2);
        assert_eq!(c.access(3), Access::Miss { evicted: Some(1) });
        assert_eq!(c.list_sizes(), (2, 0, 0, 0));
    }
}
