//! LFU: evict the cached page with the fewest hits since it was inserted;
//! ties go to the least recently accessed of them. Frequencies are
//! in-cache (a page's count starts at 1 on insertion and is forgotten on
//! eviction), as in libCacheSim's `LFU`. One LRU-ordered list per
//! frequency in a `BTreeMap`, so the victim is the tail of the first
//! bucket: O(log #distinct frequencies) per access.

use super::list::{Arena, List};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

pub struct Lfu {
    cap: usize,
    len: usize,
    map: FxHashMap<Key, u32>,
    arena: Arena,
    buckets: BTreeMap<u32, List>,
}

impl Lfu {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        let cap = capacity_pages.max(1);
        Lfu {
            cap,
            len: 0,
            map: FxHashMap::default(),
            arena: Arena::with_capacity(cap.min(1 << 24)),
            buckets: BTreeMap::new(),
        }
    }

    fn unlink(&mut self, i: u32) {
        let f = self.arena.get(i).aux;
        if let Some(l) = self.buckets.get_mut(&f) {
            l.unlink(&mut self.arena, i);
            if l.len == 0 {
                self.buckets.remove(&f);
            }
        }
    }

    fn push(&mut self, i: u32) {
        let f = self.arena.get(i).aux;
        self.buckets
            .entry(f)
            .or_default()
            .push_front(&mut self.arena, i);
    }

    fn insert_absent(&mut self, key: Key) -> Option<Key> {
        let mut evicted = None;
        if self.len >= self.cap {
            if let Some(mut e) = self.buckets.first_entry() {
                if let Some(t) = e.get_mut().pop_back(&mut self.arena) {
                    if e.get().len == 0 {
                        e.remove();
                    }
                    let k = self.arena.get(t).key;
                    self.map.remove(&k);
                    self.arena.release(t);
                    self.len -= 1;
                    evicted = Some(k);
                }
            }
        }
        let i = self.arena.alloc(key, 0);
        self.arena.get_mut(i).aux = 1;
        self.push(i);
        self.map.insert(key, i);
        self.len += 1;
        evicted
    }
}

impl Eviction for Lfu {
    fn name(&self) -> &'static str {
        "lfu"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.len
    }
    fn access(&mut self, key: Key) -> Access {
        if let Some(&i) = self.map.get(&key) {
            self.unlink(i);
            let n = self.arena.get_mut(i);
            n.aux = n.aux.saturating_add(1);
            self.push(i);
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
        match self.map.get(&key).copied() {
            Some(i) => {
                self.unlink(i);
                self.map.remove(&key);
                self.arena.release(i);
                self.len -= 1;
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
    fn least_frequent_then_least_recent() {
        let mut c = Lfu::new(3);
        for k in [1, 2, 3, 1, 1, 3] {
            c.access(k);
        }
        // Counts: 1 -> 3, 2 -> 1, 3 -> 2.
        assert_eq!(c.access(4), Access::Miss { evicted: Some(2) });
        // 4 has count 1, the lowest: the newcomer goes next.
        assert_eq!(c.access(5), Access::Miss { evicted: Some(4) });
        c.access(5); // 5 -> 2, ties with 3; 3 was accessed less recently.
        assert_eq!(c.access(6), Access::Miss { evicted: Some(3) });
    }
}
