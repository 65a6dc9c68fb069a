//! SIEVE (Zhang et al., "SIEVE is Simpler than LRU", NSDI '24, Fig. 1 /
//! Algorithm 1). One FIFO queue, new pages at the head; a hit only sets the
//! page's visited bit. The hand starts at the tail and moves towards the
//! head: a visited page has its bit cleared and is passed over (it stays
//! in place, unlike CLOCK), the first unvisited page is evicted, and the
//! hand stays at the next page; past the head it wraps to the tail.

use super::list::{Arena, List, NIL};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

pub struct Sieve {
    cap: usize,
    map: FxHashMap<Key, u32>,
    arena: Arena,
    queue: List,
    hand: u32,
}

impl Sieve {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        Sieve {
            cap,
            map: FxHashMap::default(),
            arena: Arena::with_capacity(cap.min(1 << 24)),
            queue: List::default(),
            hand: NIL,
        }
    }

    fn evict(&mut self) -> Option<Key> {
        if self.queue.len == 0 {
            return None;
        }
        let mut o = if self.hand != NIL {
            self.hand
        } else {
            self.queue.tail
        };
        // Terminates: each visited page passed over loses its bit.
        while self.arena.get(o).aux != 0 {
            self.arena.get_mut(o).aux = 0;
            let p = self.arena.get(o).prev;
            o = if p != NIL { p } else { self.queue.tail };
        }
        self.hand = self.arena.get(o).prev;
        let k = self.arena.get(o).key;
        self.queue.unlink(&mut self.arena, o);
        self.map.remove(&k);
        self.arena.release(o);
        Some(k)
    }

    fn insert_absent(&mut self, key: Key) -> Option<Key> {
        let evicted = if self.queue.len >= self.cap {
            self.evict()
        } else {
            None
        };
        let i = self.arena.alloc(key, 0);
        self.queue.push_front(&mut self.arena, i);
        self.map.insert(key, i);
        evicted
    }
}

impl Eviction for Sieve {
    fn name(&self) -> &'static str {
        "sieve"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.queue.len
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
                if self.hand == i {
                    self.hand = self.arena.get(i).prev;
                }
                self.queue.unlink(&mut self.arena, i);
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
    fn hand_stays_put_and_survivors_keep_their_place() {
        // Capacity 3. 1 2 3 (queue head->tail: 3 2 1), hit 1.
        let mut c = Sieve::new(3);
        for k in [1, 2, 3] {
            c.access(k);
        }
        assert_eq!(c.access(1), Access::Hit);
        // 4: hand starts at the tail (1), visited -> cleared, moves to 2,
        // which is evicted; hand now at 3. Queue: 4 3 1.
        assert_eq!(c.access(4), Access::Miss { evicted: Some(2) });
        // 5: hand at 3 (unvisited) -> evicted; hand at 4. Queue: 5 4 1.
        // LRU would have evicted 1 here; SIEVE keeps it in place.
        assert_eq!(c.access(5), Access::Miss { evicted: Some(3) });
        assert_eq!(c.access(1), Access::Hit);
        // 6: hand at 4 -> evicted; hand at 5. Queue: 6 5 1.
        assert_eq!(c.access(6), Access::Miss { evicted: Some(4) });
        // 7: hand at 5 -> evicted; hand at 6. Queue: 7 6 1.
        assert_eq!(c.access(7), Access::Miss { evicted: Some(5) });
        // 8, 9: evict 6, then 7; hand at 8. Queue: 9 8 1.
        assert_eq!(c.access(8), Access::Miss { evicted: Some(6) });
        assert_eq!(c.access(9), Access::Miss { evicted: Some(7) });
        // 10: evict 8; the hand moves past the head (NIL). Queue: 10 9 1.
        assert_eq!(c.access(10), Access::Miss { evicted: Some(8) });
        // 11: the hand wraps to the tail: 1 is visited (bit cleared, kept),
        // 9 is evicted.
        assert_eq!(c.access(11), Access::Miss { evicted: Some(9) });
        assert!(c.contains(1));
        // 12: hand at 10 -> evicted; 1 has no second chance left after that.
        assert_eq!(c.access(12), Access::Miss { evicted: Some(10) });
        assert!(c.contains(1));
    }
}
