//! FIFO: evict the page inserted longest ago; hits change nothing
//! (libCacheSim's `FIFO`).

use super::list::{Arena, List};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

pub struct Fifo {
    cap: usize,
    map: FxHashMap<Key, u32>,
    arena: Arena,
    queue: List,
}

impl Fifo {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        Fifo {
            cap,
            map: FxHashMap::default(),
            arena: Arena::with_capacity(cap.min(1 << 24)),
            queue: List::default(),
        }
    }

    fn insert_absent(&mut self, key: Key) -> Option<Key> {
        let mut evicted = None;
        if self.queue.len >= self.cap {
            if let Some(t) = self.queue.pop_back(&mut self.arena) {
                let k = self.arena.get(t).key;
                self.map.remove(&k);
                self.arena.release(t);
                evicted = Some(k);
            }
        }
        let i = self.arena.alloc(key, 0);
        self.queue.push_front(&mut self.arena, i);
        self.map.insert(key, i);
        evicted
    }
}

impl Eviction for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.queue.len
    }
    fn access(&mut self, key: Key) -> Access {
        if self.map.contains_key(&key) {
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
    fn hand_computed_1_2_3_1_4() {
        // Capacity 3: 1 2 3 miss, 1 hits without reordering, 4 evicts the
        // oldest insertion (1) even though it was just used.
        let mut c = Fifo::new(3);
        for k in [1, 2, 3] {
            assert_eq!(c.access(k), Access::Miss { evicted: None });
        }
        assert_eq!(c.access(1), Access::Hit);
        assert_eq!(c.access(4), Access::Miss { evicted: Some(1) });
        assert_eq!(c.access(1), Access::Miss { evicted: Some(2) });
    }
}
