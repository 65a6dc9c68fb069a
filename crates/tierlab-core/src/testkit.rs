//! The deterministic test kit, one copy for every harness that drives a
//! policy or a protocol with seeded randomness: the crash checker's
//! executor (tierlab-crash), the policies' property tests, the NBD and
//! serve protocol tests. TigerBeetle-style: a seed decides everything, so
//! a failing case is replayed by its seed.
//!
//! - [`Rng`]: splitmix64, dependency-free; `below` and `chance` for
//!   choices.
//! - [`Schedule`]: events ordered by (time, arrival), so equal times keep
//!   their order and a run never depends on a hash order.
//! - [`WriteFaults`]: a store that dies at its N-th write (every later
//!   write and trim fails, flushes fail once one did; reads work — like
//!   dm-flakey's `error_writes`), or one transient failed write.

use std::collections::BTreeMap;

use crate::TimeNs;

/// splitmix64: a seeded, dependency-free RNG.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n) (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `pct` %.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// Events due at a time; equal times come out in the order they were
/// pushed.
#[derive(Debug)]
pub struct Schedule<T> {
    due: BTreeMap<(TimeNs, u64), T>,
    pushed: u64,
}

impl<T> Default for Schedule<T> {
    fn default() -> Self {
        Schedule {
            due: BTreeMap::new(),
            pushed: 0,
        }
    }
}

impl<T> Schedule<T> {
    pub fn push(&mut self, at_ns: TimeNs, item: T) {
        self.pushed += 1;
        self.due.insert((at_ns, self.pushed), item);
    }

    /// The earliest event and its time.
    pub fn pop(&mut self) -> Option<(TimeNs, T)> {
        self.due.pop_first().map(|((at, _), item)| (at, item))
    }

    /// When the earliest event is due.
    pub fn next_at(&self) -> Option<TimeNs> {
        self.due.keys().next().map(|&(at, _)| at)
    }

    pub fn len(&self) -> usize {
        self.due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }

    /// The events not due yet, earliest first.
    pub fn items(&self) -> impl Iterator<Item = &T> {
        self.due.values()
    }
}

/// Which device writes fail (counted over every write and trim, 0-based,
/// in submission order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteFaults {
    /// Surprise shutdown with real errors: this write and every later one
    /// fails, and so does every flush once a write failed (the store died).
    pub fail_from: Option<u64>,
    /// A transient error: only this write fails; everything else works.
    pub fail_at: Option<u64>,
    writes: u64,
    died: bool,
}

impl WriteFaults {
    pub fn new(fail_from: Option<u64>, fail_at: Option<u64>) -> WriteFaults {
        WriteFaults {
            fail_from,
            fail_at,
            ..WriteFaults::default()
        }
    }

    /// A write or trim is submitted: whether it fails.
    pub fn write_fails(&mut self) -> bool {
        let nth = self.writes;
        self.writes += 1;
        if self.fail_from.is_some_and(|n| nth >= n) {
            self.died = true;
        }
        self.died || self.fail_at == Some(nth)
    }

    /// A flush is submitted: whether it fails.
    pub fn flush_fails(&self) -> bool {
        self.died
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_its_published_sequence() {
        // splitmix64 seeded with 0: the reference values of Vigna's
        // splitmix64.c.
        let mut r = Rng(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn equal_times_keep_their_order() {
        let mut s = Schedule::default();
        s.push(5, 'a');
        s.push(3, 'b');
        s.push(5, 'c');
        s.push(3, 'd');
        assert_eq!(s.next_at(), Some(3));
        let order: Vec<char> = std::iter::from_fn(|| s.pop().map(|x| x.1)).collect();
        assert_eq!(order, vec!['b', 'd', 'a', 'c']);
        assert!(s.is_empty());
    }

    #[test]
    fn a_dead_store_fails_every_later_write_and_flush_a_transient_one_only_its_write() {
        let mut f = WriteFaults::new(Some(2), None);
        let got: Vec<bool> = (0..4).map(|_| f.write_fails()).collect();
        assert_eq!(got, vec![false, false, true, true]);
        assert!(f.flush_fails());
        let mut f = WriteFaults::new(None, Some(1));
        let got: Vec<bool> = (0..3).map(|_| f.write_fails()).collect();
        assert_eq!(got, vec![false, true, false]);
        assert!(!f.flush_fails());
    }
}
