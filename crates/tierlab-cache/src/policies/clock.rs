//! CLOCK: FIFO with one reference bit per page (second chance). A hit sets
//! the bit; the hand, at the oldest page, clears set bits and passes over
//! those pages (they go back to the head, as if reinserted) until it finds a
//! clear bit, which is evicted. New pages enter with the bit clear, as in
//! libCacheSim's `Clock` with one bit. Kept as a list rather than a ring so
//! `remove` leaves no hole; the order is the same as a ring with a hand.

use super::list::{Arena, List};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

pub struct Clock {
    cap: usize,
    map: FxHashMap<Key, u32>,
    arena: Arena,
    list: List,
}

impl Clock {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        Clock {
            cap,
            map: FxHashMap::default(),
            arena: Arena::with_capacity(cap.min(1 << 24)),
            list: List::default(),
        }
    }

    fn evict(&mut self) -> Option<Key> {
        // Terminates: each pass clears a bit, so within len + 1 steps a
        // clear bit is at the tail.
        while let Some(t) = self.list.pop_back(&mut self.arena) {
            if self.arena.get(t).aux != 0 {
                self.arena.get_mut(t).aux = 0;
                self.list.push_front(&mut self.arena, t);
            } else {
                let k = self.arena.get(t).key;
                self.map.remove(&k);
                self.arena.release(t);
                return Some(k);
            }
        }
        None
    }

    fn insert_absent(&mut self, key: Key) -> Option<Key> {
        let evicted = if self.list.len >= self.cap {
            self.evict()
        } else {
            None
        };
        let i = self.arena.alloc(key, 0);
        self.list.push_front(&mut self.arena, i);
        self.map.insert(key, i);
        evicted
    }
}

impl Eviction for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.list.len
    }
    fn access(&mut self, key: Key) -> Access {
        if let Some(&i) = self.map.get(&key) {
            self.arena.get_mut(i).aux = 1;
            return Access::Hit;
        }
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
        match self.map.remove(&key) {
            Some(i) => {
                self.list.unlink(&mut self.arena, i);
                self.arena.release(i);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_chance() {
        // Capacity 3: 1 2 3, hit 1 (bit set). 4: the hand is at 1, clears
        // its bit and moves it to the head, then evicts 2 (clear bit).
        let mut c = Clock::new(3);
        for k in [1, 2, 3] {
            c.access(k);
        }
        assert_eq!(c.access(1), Access::Hit);
        assert_eq!(c.access(4), Access::Miss { evicted: Some(2) });
        // Order now (old -> new): 3 1 4, all bits clear: 5 evicts 3, then
        // 6 evicts 1 - its second chance was used up.
        assert_eq!(c.access(5), Access::Miss { evicted: Some(3) });
        assert_eq!(c.access(6), Access::Miss { evicted: Some(1) });
    }

    #[test]
    fn all_bits_set_degrades_to_fifo() {
        let mut c = Clock::new(2);
        c.access(1);
        c.access(2);
        c.access(1);
        c.access(2);
        // Both bits set: the hand clears 1 and 2, comes back to 1.
        assert_eq!(c.access(3), Access::Miss { evicted: Some(1) });
    }
}
