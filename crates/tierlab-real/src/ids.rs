//! Tables keyed by the data path's own ids, cheap enough for every IO:
//! a slab for ids the data path hands out itself (device IO tags: the
//! slot is the id), and a hash map with a one-multiply hash for ids that
//! come from elsewhere (host IO ids the policy sees, staging buffers).
//! std's default SipHash is built to resist chosen keys; these keys are
//! counters, and SipHash was a visible share of each IO's time.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A HashMap over u64 ids with `IdHasher`.
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Hashes one u64 by a multiply with an odd constant (Fibonacci hashing):
/// the low bits (the bucket) differ for consecutive ids, and the high
/// bits (hashbrown's tag) mix all of them.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are meant; anything else still hashes correctly.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Values in reusable slots: `insert` returns the slot, the value's id
/// until `remove`. Memory: the most values held at once.
pub struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, value: T) -> u64 {
        self.len += 1;
        match self.free.pop() {
            Some(i) => {
                debug_assert!(self.slots[i as usize].is_none());
                self.slots[i as usize] = Some(value);
                i as u64
            }
            None => {
                assert!(self.slots.len() < u32::MAX as usize, "slab full");
                self.slots.push(Some(value));
                (self.slots.len() - 1) as u64
            }
        }
    }

    pub fn remove(&mut self, id: u64) -> Option<T> {
        let v = self.slots.get_mut(usize::try_from(id).ok()?)?.take()?;
        self.free.push(id as u32);
        self.len -= 1;
        Some(v)
    }

    pub fn get(&self, id: u64) -> Option<&T> {
        self.slots.get(usize::try_from(id).ok()?)?.as_ref()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_reuses_slots_and_counts() {
        let mut s = Slab::default();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!((a, b, s.len()), (0, 1, 2));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None, "removed once");
        assert_eq!(s.insert("c"), a, "the free slot again");
        assert_eq!((s.get(b), s.get(7), s.len()), (Some(&"b"), None, 2));
    }

    #[test]
    fn id_map_holds_consecutive_and_scattered_ids() {
        let mut m: IdMap<u64> = IdMap::default();
        for i in 0..10_000u64 {
            m.insert(i, i * 2);
            m.insert(i << 40, i);
        }
        assert_eq!(m.len(), 20_000 - 1, "0 << 40 is 0");
        assert_eq!(m.get(&9_999), Some(&19_998));
        assert_eq!(m.get(&(5 << 40)), Some(&5));
    }
}
