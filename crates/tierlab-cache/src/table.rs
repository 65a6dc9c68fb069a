//! `StampTable`: page key → non-zero u64 (a stamp), open addressing with
//! linear probing, built for the cache-only hot loop.
//!
//! Why not a general hash map: a cache simulator is bound by random memory
//! touches, one or more per request. This table keeps key and value in one
//! 16-byte slot (a probe reads one cache line), deletes by backward shift
//! (no tombstones, so probe chains never rot under the insert/evict churn of
//! a full cache), and exposes `prefetch` so a batch loop can ask for a key's
//! slot many requests before it needs it — that hides most of the memory
//! latency, which a `HashMap` API cannot express.

/// One slot; `stamp == 0` marks it empty.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Slot {
    key: u64,
    stamp: u64,
}

pub struct StampTable {
    slots: Box<[Slot]>,
    len: usize,
}

const MIN_SLOTS: usize = 16;
/// Slots are at most an eighth full (any table size: the home slot is
/// scaled by a multiply, not masked, so the load does not jump with powers
/// of two). A cache's misses churn the table (a failed lookup, an insert
/// and a backward-shift removal each), and the shift loop's exit is an
/// unpredictable branch per slot of the cluster: LRU over a Zipf stream at
/// 8,041 pages took 30 / 23 / 22 / 21 ns per request at loads 1/2, 1/4,
/// 1/6 and 1/8 (the whole cache-only run, CPU time; at 80,414 pages 1/8 was
/// ~3 % slower than 1/6 — a bigger table, more TLB misses). The price is
/// 128 bytes of table per cached page.
const MAX_LOAD_NUM: usize = 1;
const MAX_LOAD_DEN: usize = 8;

impl StampTable {
    /// A table that will hold `expected_len` keys without growing (it grows
    /// past that as needed).
    pub fn with_capacity(expected_len: usize) -> Self {
        let want = expected_len
            .saturating_mul(MAX_LOAD_DEN)
            .div_ceil(MAX_LOAD_NUM)
            .saturating_add(1)
            .max(MIN_SLOTS);
        Self::with_slots(want)
    }

    fn with_slots(n: usize) -> Self {
        StampTable {
            slots: vec![Slot::default(); n].into_boxed_slice(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fibonacci hashing (the product's high bits spread consecutive keys
    /// evenly), scaled to the table's size by a multiply, not a modulo.
    #[inline]
    fn home(&self, key: u64) -> usize {
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((h as u128 * self.slots.len() as u128) >> 64) as usize
    }

    /// The slot after `i`, cyclically.
    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() { 0 } else { i + 1 }
    }

    /// Cyclic distance from slot `from` forward to slot `to`.
    #[inline]
    fn distance(&self, from: usize, to: usize) -> usize {
        if to >= from {
            to - from
        } else {
            to + self.slots.len() - from
        }
    }

    /// Hints the CPU to load `key`'s home slot (no effect on results).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let p = self.slots.as_ptr().wrapping_add(self.home(key)) as *const i8;
            // SAFETY: prefetch never faults and the address is in bounds.
            unsafe { std::arch::x86_64::_mm_prefetch(p, std::arch::x86_64::_MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = key;
    }

    /// Index of `key`'s slot, or of the empty slot where it would go.
    #[inline]
    fn find(&self, key: u64) -> (usize, bool) {
        let mut i = self.home(key);
        loop {
            let s = &self.slots[i];
            if s.stamp == 0 {
                return (i, false);
            }
            if s.key == key {
                return (i, true);
            }
            i = self.next(i);
        }
    }

    #[inline]
    pub fn get(&self, key: u64) -> Option<u64> {
        match self.find(key) {
            (i, true) => Some(self.slots[i].stamp),
            _ => None,
        }
    }

    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        self.find(key).1
    }

    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut u64> {
        match self.find(key) {
            (i, true) => Some(&mut self.slots[i].stamp),
            _ => None,
        }
    }

    /// Inserts or overwrites; `stamp` must be non-zero (0 marks empty).
    #[inline]
    pub fn insert(&mut self, key: u64, stamp: u64) {
        assert!(
            stamp != 0,
            "StampTable: stamp 0 is reserved for empty slots"
        );
        if (self.len + 1) * MAX_LOAD_DEN > self.slots.len() * MAX_LOAD_NUM {
            self.grow();
        }
        let (i, found) = self.find(key);
        self.slots[i] = Slot { key, stamp };
        self.len += !found as usize;
    }

    /// Sets `key`'s stamp to `stamp` (non-zero), inserting the key if it is
    /// absent; returns the stamp it had. One probe for a lookup-then-update.
    #[inline]
    pub fn upsert(&mut self, key: u64, stamp: u64) -> Option<u64> {
        assert!(
            stamp != 0,
            "StampTable: stamp 0 is reserved for empty slots"
        );
        let (mut i, found) = self.find(key);
        if found {
            return Some(std::mem::replace(&mut self.slots[i].stamp, stamp));
        }
        if (self.len + 1) * MAX_LOAD_DEN > self.slots.len() * MAX_LOAD_NUM {
            self.grow();
            i = self.find(key).0;
        }
        self.slots[i] = Slot { key, stamp };
        self.len += 1;
        None
    }

    #[cold]
    fn grow(&mut self) {
        let old = std::mem::replace(self, Self::with_slots(self.slots.len() * 2));
        for s in old.slots.iter().filter(|s| s.stamp != 0) {
            let (i, _) = self.find(s.key);
            self.slots[i] = *s;
        }
        self.len = old.len;
    }

    /// Removes `key` if present and, when `only_if` is given, only if its
    /// stamp equals it. Returns whether it was removed.
    #[inline]
    pub fn remove(&mut self, key: u64, only_if: Option<u64>) -> bool {
        let (mut hole, found) = self.find(key);
        if !found || only_if.is_some_and(|t| self.slots[hole].stamp != t) {
            return false;
        }
        // Backward shift: pull later entries of the probe run into the hole
        // when their home lies at or before it (cyclically).
        let mut j = hole;
        loop {
            j = self.next(j);
            let s = self.slots[j];
            if s.stamp == 0 {
                break;
            }
            let home = self.home(s.key);
            // Distance from home to j vs from hole to j: movable iff the
            // hole lies on s's probe path.
            if self.distance(home, j) >= self.distance(hole, j) {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = Slot::default();
        self.len -= 1;
        true
    }

    /// Every (key, stamp), in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots
            .iter()
            .filter(|s| s.stamp != 0)
            .map(|s| (s.key, s.stamp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Upsert(u64, u64),
        Remove(u64),
        RemoveIf(u64, u64),
        Get(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct keys and a tiny table: long probe runs, wrap-around,
        // and many backward shifts.
        let key = prop_oneof![0u64..40, any::<u64>()];
        prop_oneof![
            (key.clone(), 1u64..4).prop_map(|(k, v)| Op::Insert(k, v)),
            (key.clone(), 1u64..4).prop_map(|(k, v)| Op::Upsert(k, v)),
            key.clone().prop_map(Op::Remove),
            (key.clone(), 1u64..4).prop_map(|(k, v)| Op::RemoveIf(k, v)),
            key.prop_map(Op::Get),
        ]
    }

    proptest! {
        /// Same answers as std's HashMap after every operation.
        #[test]
        fn behaves_like_a_hash_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut t = StampTable::with_capacity(4);
            let mut m: HashMap<u64, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => { t.insert(k, v); m.insert(k, v); }
                    Op::Upsert(k, v) => prop_assert_eq!(t.upsert(k, v), m.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(t.remove(k, None), m.remove(&k).is_some()),
                    Op::RemoveIf(k, v) => {
                        let expect = m.get(&k) == Some(&v);
                        if expect { m.remove(&k); }
                        prop_assert_eq!(t.remove(k, Some(v)), expect);
                    }
                    Op::Get(k) => prop_assert_eq!(t.get(k), m.get(&k).copied()),
                }
                prop_assert_eq!(t.len(), m.len());
            }
            for (k, v) in &m {
                prop_assert_eq!(t.get(*k), Some(*v));
            }
            let mut all: Vec<_> = t.iter().collect();
            all.sort_unstable();
            let mut want: Vec<_> = m.into_iter().collect();
            want.sort_unstable();
            prop_assert_eq!(all, want);
        }
    }
}
