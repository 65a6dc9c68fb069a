//! A slab with a free list: O(1) insert/remove without per-item allocation
//! in the steady state. Keys carry a generation so a stale key is caught
//! instead of silently naming a reused slot.

pub struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
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
    /// Inserts and returns a key unique for the slab's lifetime (until 2^32 reuses of a slot).
    pub fn insert(&mut self, value: T) -> u64 {
        self.len += 1;
        match self.free.pop() {
            Some(i) => {
                let slot = &mut self.slots[i as usize];
                slot.0 = slot.0.wrapping_add(1);
                slot.1 = Some(value);
                ((slot.0 as u64) << 32) | i as u64
            }
            None => {
                let i = self.slots.len() as u32;
                self.slots.push((0, Some(value)));
                i as u64
            }
        }
    }

    pub fn remove(&mut self, key: u64) -> Option<T> {
        let i = (key & 0xffff_ffff) as usize;
        let generation = (key >> 32) as u32;
        let slot = self.slots.get_mut(i)?;
        if slot.0 != generation {
            return None;
        }
        let value = slot.1.take()?;
        self.free.push(i as u32);
        self.len -= 1;
        Some(value)
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_stale_keys_miss() {
        let mut s = Slab::default();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!(s.remove(a), Some("a"));
        let c = s.insert("c");
        assert_ne!(a, c, "a reused slot gets a new key");
        assert_eq!(s.remove(a), None);
        assert_eq!(s.len(), 2);
        assert_eq!(s.remove(c), Some("c"));
        assert_eq!(s.remove(b), Some("b"));
        assert_eq!(s.len(), 0);
    }
}
