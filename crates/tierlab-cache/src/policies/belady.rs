//! Belady's MIN (Belady 1966; Mattson et al. 1970 for the optimality proof
//! under demand paging): evict the cached page whose next request is
//! farthest in the future (never requested again = infinitely far; ties go
//! to the larger key, so runs are deterministic). It needs the future: the
//! caller passes, via `set_next_access` right before each `access`, the
//! request index of the next access to the same key (`u64::MAX` if none).
//! Without it a page is treated as never requested again.
//!
//! Under libCacheSim semantics every miss inserts, so this is the optimum
//! among policies that must admit every missed page.
//!
//! A max-heap of (next request, key) with lazy deletion: an entry is live
//! only if it matches the key's current next request; stale entries are
//! skipped on pop and the heap is rebuilt when they dominate.

use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;
use std::collections::BinaryHeap;

pub struct Belady {
    cap: usize,
    next: FxHashMap<Key, u64>,
    heap: BinaryHeap<(u64, Key)>,
    pending: u64,
}

impl Belady {
    /// `capacity_pages` of 0 is raised to 1 (`policies::build` rejects 0).
    pub fn new(capacity_pages: usize) -> Self {
        Belady {
            cap: capacity_pages.max(1),
            next: FxHashMap::default(),
            heap: BinaryHeap::new(),
            pending: u64::MAX,
        }
    }

    fn evict(&mut self) -> Option<Key> {
        while let Some((n, k)) = self.heap.pop() {
            if self.next.get(&k) == Some(&n) {
                self.next.remove(&k);
                return Some(k);
            }
        }
        None
    }

    fn record(&mut self, key: Key, next: u64) {
        self.next.insert(key, next);
        self.heap.push((next, key));
        if self.heap.len() > 4 * self.next.len() + 64 {
            self.heap = self.next.iter().map(|(&k, &n)| (n, k)).collect();
        }
    }

    fn insert_absent(&mut self, key: Key, next: u64) -> Option<Key> {
        let evicted = if self.next.len() >= self.cap {
            self.evict()
        } else {
            None
        };
        self.record(key, next);
        evicted
    }
}

impl Eviction for Belady {
    fn name(&self) -> &'static str {
        "belady"
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.next.len()
    }
    fn access(&mut self, key: Key) -> Access {
        let next = std::mem::replace(&mut self.pending, u64::MAX);
        if self.next.contains_key(&key) {
            self.record(key, next);
            return Access::Hit;
        }
        Access::Miss {
            evicted: self.insert_absent(key, next),
        }
    }
    fn contains(&self, key: Key) -> bool {
        self.next.contains_key(&key)
    }
    fn insert(&mut self, key: Key) -> Option<Key> {
        let next = std::mem::replace(&mut self.pending, u64::MAX);
        if self.next.contains_key(&key) {
            return None;
        }
        self.insert_absent(key, next)
    }
    fn remove(&mut self, key: Key) -> bool {
        self.next.remove(&key).is_some()
    }
    fn set_next_access(&mut self, next_request: u64) {
        self.pending = next_request;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::next_uses;

    fn run(keys: &[Key], cap: usize) -> Vec<Access> {
        let next = next_uses(keys);
        let mut c = Belady::new(cap);
        keys.iter()
            .zip(&next)
            .map(|(&k, &n)| {
                c.set_next_access(n);
                c.access(k)
            })
            .collect()
    }

    #[test]
    fn hand_computed() {
        // Capacity 2 on 1 2 3 1 2: at 3, 1 is next needed at index 3 and 2
        // at 4, so 2 (farther) is evicted; then 1 hits, 2 misses evicting
        // 3 (never needed again).
        let r = run(&[1, 2, 3, 1, 2], 2);
        assert_eq!(r[2], Access::Miss { evicted: Some(2) });
        assert_eq!(r[3], Access::Hit);
        assert_eq!(r[4], Access::Miss { evicted: Some(3) });
    }
}
