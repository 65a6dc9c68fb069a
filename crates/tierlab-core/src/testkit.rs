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
//! - [`RandomFaults`]: any device IO fails with a seeded chance.
//! - [`Events`]: the random-delay event core both test executors run on
//!   (the crash checker's `Exec`, the property harness's `Sim`): device
//!   IOs complete a seeded random delay after submission (so out of
//!   order), timers fire at their time, a step count bounds a run, and
//!   [`end_device_io`] tells the policy how an IO ended.
//! - [`LabelledStores`]: in-memory stores that carry volume ids, for
//!   tests of a policy's binding to its devices (`crate::volume`).

use std::collections::BTreeMap;

use crate::TimeNs;
use crate::policy::{IoError, Outbox, Policy};

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

/// Device IOs that fail at random: each with a chance of `per_mille`
/// thousandths (drawn only when non-zero, so a run without faults draws
/// the same numbers as before).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RandomFaults {
    pub per_mille: u64,
}

impl RandomFaults {
    /// Whether the IO ending now fails.
    pub fn fails(&self, rng: &mut Rng) -> bool {
        self.per_mille > 0 && rng.below(1000) < self.per_mille
    }
}

/// What happens next in a run.
#[derive(Debug)]
pub enum Next<D> {
    /// A device IO ends (its executor's record of it).
    Device(D),
    Timer(u64),
}

/// The random-delay event core of a simulated run: device IOs end a
/// seeded random delay (1 ns to `max_delay_ns`) after submission, timers
/// at their time; equal times keep their order, a device IO before a
/// timer. Time never goes back.
#[derive(Debug)]
pub struct Events<D> {
    pub now_ns: TimeNs,
    devices: Schedule<D>,
    timers: Schedule<u64>,
    /// Events handled (`pop_next`, `next_device`, `next_timer`): bounds a run that never
    /// settles.
    pub steps: u64,
}

impl<D> Default for Events<D> {
    fn default() -> Self {
        Events {
            now_ns: 0,
            devices: Schedule::default(),
            timers: Schedule::default(),
            steps: 0,
        }
    }
}

impl<D> Events<D> {
    /// A device IO submitted now ends after a random delay.
    pub fn submit(&mut self, rng: &mut Rng, max_delay_ns: u64, io: D) {
        let delay = 1 + rng.below(max_delay_ns.max(1));
        self.devices.push(self.now_ns + delay, io);
    }

    /// Timer `id` fires at `at_ns` (now, if that has passed).
    pub fn set_timer(&mut self, at_ns: TimeNs, id: u64) {
        self.timers.push(at_ns.max(self.now_ns), id);
    }

    /// The earliest event, time advanced to it; None if none is left.
    pub fn pop_next(&mut self) -> Option<Next<D>> {
        let timer_first = match (self.devices.next_at(), self.timers.next_at()) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(d), Some(t)) => t < d,
        };
        let (at, next) = if timer_first {
            let (at, id) = self.timers.pop().unwrap();
            (at, Next::Timer(id))
        } else {
            let (at, io) = self.devices.pop().unwrap();
            (at, Next::Device(io))
        };
        self.now_ns = self.now_ns.max(at);
        self.steps += 1;
        Some(next)
    }

    /// The earliest device IO's end, timers left waiting (to settle the
    /// devices alone).
    pub fn next_device(&mut self) -> Option<D> {
        let (at, io) = self.devices.pop()?;
        self.now_ns = self.now_ns.max(at);
        self.steps += 1;
        Some(io)
    }

    /// The earliest timer, devices left waiting.
    pub fn next_timer(&mut self) -> Option<u64> {
        let (at, id) = self.timers.pop()?;
        self.now_ns = self.now_ns.max(at);
        self.steps += 1;
        Some(id)
    }

    pub fn devices_in_flight(&self) -> usize {
        self.devices.len()
    }

    /// The device IOs in flight, earliest end first.
    pub fn devices(&self) -> impl Iterator<Item = &D> {
        self.devices.items()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty() && self.timers.is_empty()
    }
}

/// Tells `policy` that device IO (`device`, `tag`) ended, completed or
/// `failed` (as `IoError::Io`). False: the policy refused the error
/// (fail-stop) — the run stops there, as the process would.
pub fn end_device_io<P: Policy + ?Sized>(
    policy: &mut P,
    now_ns: TimeNs,
    device: usize,
    tag: u64,
    failed: bool,
    out: &mut Outbox,
) -> bool {
    if failed {
        return policy.on_device_error(now_ns, device, tag, IoError::Io, out);
    }
    policy.on_device_completion(now_ns, device, tag, out);
    true
}

/// In-memory stores (`Vec<Vec<u8>>`'s) whose devices carry volume ids,
/// for tests of binding: `labels[d]` is what `volume_label(d)` answers
/// (None: the store cannot tell, as RAM). A label with `created_now` is
/// answered once so, then as stored — as a file's new xattr is.
pub struct LabelledStores {
    pub data: Vec<Vec<u8>>,
    pub labels: Vec<Option<crate::volume::VolumeLabel>>,
    /// Names for messages (`Stores::describe`); empty: "device N".
    pub names: Vec<String>,
}

impl LabelledStores {
    /// Every device labelled with `ids[d]` (stored, not new), named by `names`.
    pub fn new(data: Vec<Vec<u8>>, ids: &[Option<u128>], names: &[&str]) -> LabelledStores {
        assert_eq!(data.len(), ids.len(), "one id (or None) per store");
        let labels = ids
            .iter()
            .map(|id| {
                id.map(|bits| crate::volume::VolumeLabel {
                    id: crate::volume::VolumeId::new(bits).expect("a non-zero id"),
                    kind: crate::volume::LabelKind::Synthetic,
                    created_now: false,
                })
            })
            .collect();
        LabelledStores {
            data,
            labels,
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    /// Device `d` becomes a new store: zeros, and an id made on first use.
    pub fn replace_with_new(&mut self, d: usize, bits: u128) {
        self.data[d].fill(0);
        self.labels[d] = Some(crate::volume::VolumeLabel {
            id: crate::volume::VolumeId::new(bits).expect("a non-zero id"),
            kind: crate::volume::LabelKind::Synthetic,
            created_now: true,
        });
    }
}

impl crate::policy::Stores for LabelledStores {
    fn capacity_bytes(&self, device: usize) -> u64 {
        self.data.capacity_bytes(device)
    }
    fn read_at(
        &mut self,
        device: usize,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<(), crate::stores::StoreError> {
        self.data.read_at(device, offset_bytes, buf)
    }
    fn write_at(
        &mut self,
        device: usize,
        offset_bytes: u64,
        data: &[u8],
    ) -> Result<(), crate::stores::StoreError> {
        self.data.write_at(device, offset_bytes, data)
    }
    fn sync(&mut self, device: usize) -> Result<(), crate::stores::StoreError> {
        self.data.sync(device)
    }
    fn volume_label(
        &mut self,
        device: usize,
    ) -> Result<Option<crate::volume::VolumeLabel>, crate::stores::StoreError> {
        let now = self.labels[device];
        if let Some(l) = &mut self.labels[device] {
            l.created_now = false;
        }
        Ok(now)
    }
    fn describe(&self, device: usize) -> String {
        match self.names.get(device) {
            Some(n) => n.clone(),
            None => format!("device {device}"),
        }
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

    #[test]
    fn events_end_in_time_order_devices_before_timers_at_equal_times() {
        let mut e: Events<&str> = Events::default();
        let mut rng = Rng(3);
        e.set_timer(5, 1);
        // Delay 1 exactly: both device IOs end at 1.
        e.submit(&mut rng, 1, "a");
        e.submit(&mut rng, 1, "b");
        e.set_timer(1, 2);
        let order: Vec<String> = std::iter::from_fn(|| e.pop_next())
            .map(|n| match n {
                Next::Device(d) => d.to_string(),
                Next::Timer(id) => format!("t{id}"),
            })
            .collect();
        assert_eq!(order, vec!["a", "b", "t2", "t1"]);
        assert_eq!((e.now_ns, e.steps), (5, 4));
        // A timer set in the past fires now; devices alone settle first.
        e.set_timer(0, 3);
        e.submit(&mut rng, 10, "c");
        assert_eq!(e.next_device(), Some("c"));
        assert!(e.now_ns > 5);
        assert!(matches!(e.pop_next(), Some(Next::Timer(3))));
        assert!(e.is_empty());
    }

    #[test]
    fn random_faults_draw_nothing_when_off() {
        let mut a = Rng(9);
        let mut b = Rng(9);
        assert!(!RandomFaults::default().fails(&mut a));
        assert_eq!(a.next_u64(), b.next_u64(), "no number was drawn");
        let all = RandomFaults { per_mille: 1000 };
        assert!((0..100).all(|_| all.fails(&mut a)));
    }
}
