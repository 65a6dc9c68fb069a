//! LRU: evict the page used longest ago (libCacheSim's `LRU`). The hot path
//! is one hash lookup plus O(1) list relinking in a `Vec`: no allocation
//! once the cache is full, which is what makes > 10 M accesses/s possible.

use super::list::{Arena, List};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

pub struct Lru {
    cap: usize,
    map: FxHashMap<Key, u32>,
    arena: Arena,
    list: List,
}

impl Lru {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        let mut map = FxHashMap::default();
        map.reserve(cap.min(1 << 24));
        Lru {
            cap,
            map,
            arena: Arena::with_capacity(cap.min(1 << 24)),
            list: List::default(),
        }
    }

    #[inline]
    fn insert_absent(&mut self, key: Key) -> Option<Key> {
        if self.list.len >= self.cap {
            if let Some(t) = self.list.pop_back(&mut self.arena) {
                // Reuse the victim's slot in place: no free-list round trip.
                let old = self.arena.get(t).key;
                self.map.remove(&old);
                self.arena.get_mut(t).key = key;
                self.list.push_front(&mut self.arena, t);
                self.map.insert(key, t);
                return Some(old);
            }
        }
        let i = self.arena.alloc(key, 0);
        self.list.push_front(&mut self.arena, i);
        self.map.insert(key, i);
        None
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
        self.list.len
    }
    #[inline]
    fn access(&mut self, key: Key) -> Access {
        if let Some(&i) = self.map.get(&key) {
            self.list.move_to_front(&mut self.arena, i);
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
