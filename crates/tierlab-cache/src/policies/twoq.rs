//! 2Q, the full version (Johnson & Shasha, "2Q: A Low Overhead High
//! Performance Buffer Management Replacement Algorithm", VLDB '94, Fig. 2).
//! A1in: FIFO of pages seen once; A1out: FIFO of the keys (ghosts) evicted
//! from A1in; Am: LRU of pages re-referenced while in A1out. Parameters are
//! the paper's recommendation: Kin = 25 % and Kout = 50 % of the capacity in
//! pages (rounded down; Kout counts ghost keys, which hold no data).
//! A hit in A1in does nothing (the paper treats it as a correlated
//! reference).

use super::list::{Arena, List};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

const A1IN: u8 = 0;
const AM: u8 = 1;
const A1OUT: u8 = 2;

pub struct TwoQ {
    cap: usize,
    kin: usize,
    kout: usize,
    map: FxHashMap<Key, u32>,
    arena: Arena,
    a1in: List,
    am: List,
    a1out: List,
}

impl TwoQ {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        TwoQ {
            cap,
            kin: cap / 4,
            kout: cap / 2,
            map: FxHashMap::default(),
            arena: Arena::with_capacity(cap.min(1 << 24)),
            a1in: List::default(),
            am: List::default(),
            a1out: List::default(),
        }
    }

    fn forget(&mut self, i: u32) {
        let k = self.arena.get(i).key;
        self.map.remove(&k);
        self.arena.release(i);
    }

    /// The paper's reclaimfor(): make room for one page when full.
    fn reclaim(&mut self) -> Option<Key> {
        if self.a1in.len + self.am.len < self.cap {
            return None;
        }
        // Am empty while full implies A1in = cap > Kin; the fallback only
        // matters if that cannot hold (tiny capacities).
        if self.a1in.len > self.kin || self.am.len == 0 {
            let y = self.a1in.pop_back(&mut self.arena)?;
            let k = self.arena.get(y).key;
            self.arena.get_mut(y).tag = A1OUT;
            self.a1out.push_front(&mut self.arena, y);
            if self.a1out.len > self.kout {
                if let Some(z) = self.a1out.pop_back(&mut self.arena) {
                    self.forget(z);
                }
            }
            Some(k)
        } else {
            let y = self.am.pop_back(&mut self.arena)?;
            let k = self.arena.get(y).key;
            self.forget(y);
            Some(k)
        }
    }

    fn miss(&mut self, key: Key) -> Option<Key> {
        if let Some(&i) = self.map.get(&key) {
            // In A1out: take it off the ghost queue first so trimming A1out
            // inside reclaim cannot free the node we are about to promote.
            self.a1out.unlink(&mut self.arena, i);
            let evicted = self.reclaim();
            self.arena.get_mut(i).tag = AM;
            self.am.push_front(&mut self.arena, i);
            return evicted;
        }
        let evicted = self.reclaim();
        let i = self.arena.alloc(key, A1IN);
        self.a1in.push_front(&mut self.arena, i);
        self.map.insert(key, i);
        evicted
    }
}

impl Eviction for TwoQ {
    fn name(&self) -> &'static str {
        "2q"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.a1in.len + self.am.len
    }
    fn access(&mut self, key: Key) -> Access {
        if let Some(&i) = self.map.get(&key) {
            match self.arena.get(i).tag {
                AM => {
                    self.am.move_to_front(&mut self.arena, i);
                    return Access::Hit;
                }
                A1IN => return Access::Hit,
                _ => {}
            }
        }
        Access::Miss {
            evicted: self.miss(key),
        }
    }
    fn contains(&self, key: Key) -> bool {
        self.map
            .get(&key)
            .is_some_and(|&i| self.arena.get(i).tag != A1OUT)
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
            A1IN => self.a1in.unlink(&mut self.arena, i),
            AM => self.am.unlink(&mut self.arena, i),
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
    fn hand_computed() {
        // Capacity 4: Kin = 1, Kout = 2.
        let mut c = TwoQ::new(4);
        for k in [1, 2, 3, 4] {
            assert_eq!(c.access(k), Access::Miss { evicted: None });
        }
        // A1in = [4 3 2 1] (new -> old), |A1in| = 4 > Kin: 1 goes to A1out.
        assert_eq!(c.access(5), Access::Miss { evicted: Some(1) });
        assert_eq!(c.access(3), Access::Hit); // A1in hit: no change
        // 1 is a ghost in A1out: reclaim evicts A1in's oldest (2) and 1
        // enters Am.
        assert_eq!(c.access(1), Access::Miss { evicted: Some(2) });
        // A1out = [2], A1in = [5 4 3], Am = [1]. 6: A1in's oldest (3) out;
        // A1out = [3 2].
        assert_eq!(c.access(6), Access::Miss { evicted: Some(3) });
        // 7: 4 out to A1out = [4 3 2] > Kout = 2 -> 2 forgotten.
        assert_eq!(c.access(7), Access::Miss { evicted: Some(4) });
        // 2 is now unknown: plain miss into A1in, evicting 5 (|A1in| = 3).
        assert_eq!(c.access(2), Access::Miss { evicted: Some(5) });
        assert!(c.contains(1));
        // A1in = [2 7 6] > Kin, so Am keeps 1 while A1in drains.
        assert_eq!(c.access(8), Access::Miss { evicted: Some(6) });
        assert!(c.contains(1));
    }
}
