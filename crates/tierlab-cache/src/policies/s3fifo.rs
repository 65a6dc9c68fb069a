//! S3-FIFO (Yang et al., "FIFO queues are all you need for cache
//! eviction", SOSP '23, Algorithm 1). A small FIFO S (10 % of the capacity,
//! at least 1 page), a main FIFO M (the rest) and a ghost FIFO G of keys
//! only, holding as many keys as M holds pages. Each cached page has a
//! 2-bit frequency (capped at 3) bumped on hits. New pages enter S, or M if
//! their key is in G. Evicting from S: a tail page with freq > 1 moves to
//! M's head (keeping its freq), otherwise it leaves for G. Evicting from M:
//! a tail page with freq > 0 is reinserted at the head with freq - 1,
//! otherwise evicted. S is evicted from when |S| >= its target, else M.
//!
//! One deviation, so each miss evicts exactly one page (the trait reports
//! one): the paper calls evictM when a promotion fills M in the middle of
//! evictS; here M may run over its share briefly and the next eviction
//! (|S| below target) takes from M. Total occupancy never exceeds capacity.

use super::list::{Arena, List};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

const SMALL: u8 = 0;
const MAIN: u8 = 1;
const GHOST: u8 = 2;
const MAX_FREQ: u32 = 3;

pub struct S3Fifo {
    cap: usize,
    small_cap: usize,
    ghost_cap: usize,
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
        let small_cap = (cap / 10).max(1);
        S3Fifo {
            cap,
            small_cap,
            ghost_cap: cap - small_cap,
            map: FxHashMap::default(),
            arena: Arena::with_capacity(cap.min(1 << 24)),
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

    fn evict_main(&mut self) -> Option<Key> {
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

    fn evict(&mut self) -> Option<Key> {
        if self.small.len >= self.small_cap || self.main.len == 0 {
            while let Some(t) = self.small.pop_back(&mut self.arena) {
                let n = self.arena.get_mut(t);
                if n.aux > 1 {
                    n.tag = MAIN;
                    self.main.push_front(&mut self.arena, t);
                } else {
                    n.tag = GHOST;
                    let k = n.key;
                    self.ghost.push_front(&mut self.arena, t);
                    if self.ghost.len > self.ghost_cap {
                        if let Some(g) = self.ghost.pop_back(&mut self.arena) {
                            self.forget(g);
                        }
                    }
                    return Some(k);
                }
            }
        }
        self.evict_main()
    }

    fn miss(&mut self, key: Key) -> Option<Key> {
        let ghost = self.map.get(&key).copied();
        if let Some(i) = ghost {
            // Off G before evicting, so trimming G cannot free this node.
            self.ghost.unlink(&mut self.arena, i);
        }
        let evicted = if self.small.len + self.main.len >= self.cap {
            self.evict()
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
                let i = self.arena.alloc(key, SMALL);
                self.small.push_front(&mut self.arena, i);
                self.map.insert(key, i);
            }
        }
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
                n.aux = (n.aux + 1).min(MAX_FREQ);
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
    fn hand_computed() {
        // Capacity 10: S target 1, M share 9, G holds 9 keys.
        let mut c = S3Fifo::new(10);
        for k in 1..=10 {
            assert_eq!(c.access(k), Access::Miss { evicted: None });
        }
        // All ten sit in S. 1 is hit twice (freq 2 > 1), 2 once.
        c.access(1);
        c.access(1);
        c.access(2);
        // 11: |S| = 10 >= 1, evictS: 1 (freq 2) is promoted to M, 2 (freq
        // 1) goes to G and is the victim.
        assert_eq!(c.access(11), Access::Miss { evicted: Some(2) });
        assert!(c.contains(1));
        // 2 is a ghost: re-access inserts it into M; the victim is 3.
        assert_eq!(c.access(2), Access::Miss { evicted: Some(3) });
        assert!(c.contains(2));
        // A one-hit scan of new keys passes through S without touching M:
        for k in 100..120 {
            c.access(k);
        }
        assert!(c.contains(1) && c.contains(2));
    }
}
