//! LFU: evict the cached page with the fewest hits since it was inserted;
//! ties go to the least recently accessed of them. Frequencies are
//! in-cache (a page's count starts at 1 on insertion and is forgotten on
//! eviction), as in libCacheSim's `LFU`.
//!
//! O(1) per access (Shah, Mitra & Matani, "An O(1) algorithm for
//! implementing the LFU cache eviction scheme", 2010): a list of frequency
//! buckets in increasing order, each holding its pages in recency order;
//! a page's `aux` is its bucket. A hit moves the page to the next bucket
//! (created if the next one is not freq + 1); the victim is the tail of the
//! first bucket.

use super::list::{Arena, List, NIL};
use crate::{Access, Eviction, Key};
use rustc_hash::FxHashMap;

#[derive(Clone, Copy, Debug)]
struct Bucket {
    freq: u32,
    pages: List,
    /// Neighbouring buckets (lower / higher frequency).
    prev: u32,
    next: u32,
}

pub struct Lfu {
    cap: usize,
    len: usize,
    map: FxHashMap<Key, u32>,
    arena: Arena,
    buckets: Vec<Bucket>,
    free_buckets: Vec<u32>,
    /// Lowest-frequency bucket.
    first: u32,
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
            buckets: Vec::new(),
            free_buckets: Vec::new(),
            first: NIL,
        }
    }

    /// A new empty bucket for `freq` right after `after` (NIL = at the
    /// front).
    fn new_bucket(&mut self, freq: u32, after: u32) -> u32 {
        let next = if after == NIL {
            self.first
        } else {
            self.buckets[after as usize].next
        };
        let b = Bucket {
            freq,
            pages: List::default(),
            prev: after,
            next,
        };
        let i = match self.free_buckets.pop() {
            Some(i) => {
                self.buckets[i as usize] = b;
                i
            }
            None => {
                self.buckets.push(b);
                (self.buckets.len() - 1) as u32
            }
        };
        if after == NIL {
            self.first = i;
        } else {
            self.buckets[after as usize].next = i;
        }
        if next != NIL {
            self.buckets[next as usize].prev = i;
        }
        i
    }

    /// Takes page `i` off its bucket, dropping the bucket if it empties.
    fn unlink(&mut self, i: u32) {
        let b = self.arena.get(i).aux;
        let bucket = &mut self.buckets[b as usize];
        bucket.pages.unlink(&mut self.arena, i);
        if bucket.pages.len == 0 {
            let (prev, next) = (bucket.prev, bucket.next);
            if prev == NIL {
                self.first = next;
            } else {
                self.buckets[prev as usize].next = next;
            }
            if next != NIL {
                self.buckets[next as usize].prev = prev;
            }
            self.free_buckets.push(b);
        }
    }

    fn push(&mut self, b: u32, i: u32) {
        self.arena.get_mut(i).aux = b;
        self.buckets[b as usize]
            .pages
            .push_front(&mut self.arena, i);
    }

    fn insert_absent(&mut self, key: Key) -> Option<Key> {
        let mut evicted = None;
        if self.len >= self.cap && self.first != NIL {
            let b = self.first;
            let t = self.buckets[b as usize].pages.tail;
            self.unlink(t);
            let k = self.arena.get(t).key;
            self.map.remove(&k);
            self.arena.release(t);
            self.len -= 1;
            evicted = Some(k);
        }
        let b = if self.first != NIL && self.buckets[self.first as usize].freq == 1 {
            self.first
        } else {
            self.new_bucket(1, NIL)
        };
        let i = self.arena.alloc(key, 0);
        self.push(b, i);
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
            let b = self.arena.get(i).aux;
            let Bucket { freq, next, .. } = self.buckets[b as usize];
            if freq == u32::MAX {
                // Saturated: stay, but as the most recent of the bucket.
                self.buckets[b as usize]
                    .pages
                    .move_to_front(&mut self.arena, i);
                return Access::Hit;
            }
            // Find or create the freq + 1 bucket before `b` can be freed.
            let target = if next != NIL && self.buckets[next as usize].freq == freq + 1 {
                next
            } else {
                self.new_bucket(freq + 1, b)
            };
            self.unlink(i);
            self.push(target, i);
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
                self.unlink(i);
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
