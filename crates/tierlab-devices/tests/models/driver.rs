//! A tiny executor for the tests: open loop (IOs at given times) and
//! closed loop (N outstanding), stepping through `next_event_ns`. It checks
//! the `DeviceModel` contract on every step, so every test that drives a
//! model also checks the contract:
//! - completions reported by `advance(now)` lie in (previous now, now],
//!   in (done, submission) order, and each tag completes exactly once;
//! - advancing to `next_event_ns` makes progress (a completion, or the
//!   next event moves later), and `next_event_ns` is `None` only when
//!   nothing is in flight;
//! - `in_flight` = submitted − reported.

use rand_core::Rng as _;
use rand_pcg::Pcg64Mcg;
use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::{Completion, DeviceIo, Op, TimeNs};

/// A seeded generator for test workloads.
pub struct TestRng(Pcg64Mcg);

impl TestRng {
    pub fn new(seed: u64) -> TestRng {
        TestRng(Pcg64Mcg::new(
            ((seed as u128) << 64) | 0x2545_F491_4F6C_DD1D_u128 | 1,
        ))
    }

    pub fn below(&mut self, n: u64) -> u64 {
        ((self.0.next_u64() as u128 * n as u128) >> 64) as u64
    }

    pub fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with the given mean (ns), at least 1.
    pub fn exp_ns(&mut self, mean_ns: f64) -> TimeNs {
        ((-(1.0 - self.unit()).ln()) * mean_ns).round().max(1.0) as TimeNs
    }
}

/// One finished IO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub io: DeviceIo,
    pub submit_ns: TimeNs,
    pub done_ns: TimeNs,
}

impl Done {
    pub fn latency_ns(&self) -> u64 {
        self.done_ns - self.submit_ns
    }
}

/// What a run produced, in completion order, plus the states seen.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub done: Vec<Done>,
    pub states: Vec<(TimeNs, DeviceState)>,
}

impl Outcome {
    pub fn mean_latency_ns(&self) -> f64 {
        self.done.iter().map(|d| d.latency_ns() as f64).sum::<f64>() / self.done.len() as f64
    }

    pub fn mean_latency_where(&self, keep: impl Fn(&Done) -> bool) -> f64 {
        let kept: Vec<_> = self.done.iter().filter(|d| keep(d)).collect();
        kept.iter().map(|d| d.latency_ns() as f64).sum::<f64>() / kept.len() as f64
    }

    /// IOs per second between the first submission and the last completion.
    pub fn iops(&self) -> f64 {
        let first = self.done.iter().map(|d| d.submit_ns).min().unwrap();
        let last = self.done.iter().map(|d| d.done_ns).max().unwrap();
        self.done.len() as f64 * 1e9 / (last - first) as f64
    }

    pub fn bytes_per_s(&self) -> f64 {
        let first = self.done.iter().map(|d| d.submit_ns).min().unwrap();
        let last = self.done.iter().map(|d| d.done_ns).max().unwrap();
        let bytes: u64 = self.done.iter().map(|d| d.io.size_bytes as u64).sum();
        bytes as f64 * 1e9 / (last - first) as f64
    }

    /// (tag, done) in reported order: what determinism compares.
    pub fn completions(&self) -> Vec<(u64, TimeNs)> {
        self.done.iter().map(|d| (d.io.tag, d.done_ns)).collect()
    }
}

/// Drives one model, checking the contract.
pub struct Driver<'a> {
    model: &'a mut dyn DeviceModel,
    /// Submitted IO and time by tag (tags are 0, 1, 2, ...).
    submitted: Vec<(DeviceIo, TimeNs)>,
    completed: Vec<bool>,
    now_ns: TimeNs,
    /// The `now` of the last `advance` (submissions may move `now_ns`
    /// without advancing).
    advanced_ns: TimeNs,
    last: Option<(TimeNs, u64)>,
    buffer: Vec<Completion>,
    pub outcome: Outcome,
}

impl<'a> Driver<'a> {
    pub fn new(model: &'a mut dyn DeviceModel) -> Self {
        Driver {
            model,
            submitted: Vec::new(),
            completed: Vec::new(),
            now_ns: 0,
            advanced_ns: 0,
            last: None,
            buffer: Vec::new(),
            outcome: Outcome::default(),
        }
    }

    fn outstanding(&self) -> usize {
        self.submitted.len() - self.outcome.done.len()
    }

    fn record_state(&mut self) {
        let state = self.model.state();
        if self.outcome.states.last().map(|s| s.1) != Some(state) {
            self.outcome.states.push((self.now_ns, state));
        }
    }

    /// Submits at `t` without advancing the model first (an executor may
    /// do that: the model must settle itself).
    pub fn submit_at(&mut self, t: TimeNs, op: Op, offset_bytes: u64, size_bytes: u32) -> u64 {
        assert!(t >= self.now_ns);
        self.now_ns = t;
        self.submit(op, offset_bytes, size_bytes)
    }

    /// Submits at the current time (after `advance_to`), with the next tag.
    pub fn submit(&mut self, op: Op, offset_bytes: u64, size_bytes: u32) -> u64 {
        let tag = self.submitted.len() as u64;
        let io = DeviceIo {
            tag,
            op,
            offset_bytes,
            size_bytes,
        };
        self.model.submit(self.now_ns, io);
        self.submitted.push((io, self.now_ns));
        self.completed.push(false);
        assert_eq!(self.model.in_flight(), self.outstanding());
        assert!(
            self.model.next_event_ns().is_some(),
            "an IO is in flight, so an event must be pending"
        );
        self.record_state();
        tag
    }

    /// Advances to `t`, checks and records what completed.
    pub fn advance_to(&mut self, t: TimeNs) {
        assert!(t >= self.now_ns, "the driver never goes back in time");
        let before_ns = self.advanced_ns;
        self.advanced_ns = t;
        self.buffer.clear();
        self.model.advance(t, &mut self.buffer);
        self.now_ns = t;
        for c in std::mem::take(&mut self.buffer) {
            let tag = c.tag as usize;
            assert!(tag < self.submitted.len(), "unknown tag {tag}");
            assert!(!self.completed[tag], "tag {tag} completed twice");
            self.completed[tag] = true;
            let (io, submit_ns) = self.submitted[tag];
            // Anything done at or before the previous `now` had to be
            // reported then, unless it was submitted at that very instant.
            assert!(
                c.done_ns > before_ns || (c.done_ns == before_ns && submit_ns == before_ns),
                "completion at {} reported by advance({t}) but not by the previous advance({before_ns})",
                c.done_ns
            );
            assert!(c.done_ns <= t, "completion at {} after now {t}", c.done_ns);
            assert!(c.done_ns >= submit_ns, "completed before submission");
            let key = (c.done_ns, c.tag);
            // Tags are submission order: (done, tag) must increase.
            if let Some(last) = self.last {
                assert!(
                    last < key,
                    "completions out of order: {last:?} then {key:?}"
                );
            }
            self.last = Some(key);
            self.outcome.done.push(Done {
                io,
                submit_ns,
                done_ns: c.done_ns,
            });
        }
        assert_eq!(self.model.in_flight(), self.outstanding());
        // With IOs in flight an event must be pending (with none, a write
        // cache may still have destaging to do: that is an event too).
        if self.outstanding() > 0 {
            assert!(self.model.next_event_ns().is_some());
        }
        self.record_state();
    }

    /// Advances to the model's next event and checks that it was honest.
    /// Returns false when the model has no event.
    pub fn step(&mut self) -> bool {
        let Some(t) = self.model.next_event_ns() else {
            return false;
        };
        let t = t.max(self.now_ns);
        let done_before = self.outcome.done.len();
        self.advance_to(t);
        let progressed = self.outcome.done.len() > done_before
            || self.model.next_event_ns().is_none_or(|next| next > t);
        assert!(
            progressed,
            "advancing to next_event_ns = {t} made no progress"
        );
        true
    }

    /// Steps through every event up to `t`, then advances to `t`.
    pub fn run_until(&mut self, t: TimeNs) {
        while self.model.next_event_ns().is_some_and(|next| next <= t) {
            self.step();
        }
        self.advance_to(t.max(self.now_ns));
    }

    /// Runs every event until the model is idle.
    pub fn drain(&mut self) {
        while self.step() {}
        assert_eq!(self.outstanding(), 0, "model idle with IOs in flight");
        assert!(self.completed.iter().all(|&c| c));
    }

    pub fn now_ns(&self) -> TimeNs {
        self.now_ns
    }
}

/// Open loop: submits each IO at its time (times nondecreasing), then
/// drains.
pub fn open_loop(model: &mut dyn DeviceModel, ios: &[(TimeNs, Op, u64, u32)]) -> Outcome {
    let mut driver = Driver::new(model);
    for &(t, op, offset, size) in ios {
        driver.run_until(t);
        driver.submit(op, offset, size);
    }
    driver.drain();
    driver.outcome
}

/// Closed loop: keeps `outstanding` IOs in flight (a new one is submitted
/// the moment one completes) until `count` IOs have been submitted, then
/// drains. `next_io` gives (op, offset, size) for each new IO.
pub fn closed_loop(
    model: &mut dyn DeviceModel,
    outstanding: usize,
    count: usize,
    mut next_io: impl FnMut() -> (Op, u64, u32),
) -> Outcome {
    let mut driver = Driver::new(model);
    let mut submitted = 0;
    while submitted < count.min(outstanding) {
        let (op, offset, size) = next_io();
        driver.submit(op, offset, size);
        submitted += 1;
    }
    while driver.outstanding() > 0 {
        let before = driver.outcome.done.len();
        assert!(driver.step(), "IOs in flight but no event");
        let finished = driver.outcome.done.len() - before;
        for _ in 0..finished {
            if submitted < count {
                let (op, offset, size) = next_io();
                driver.submit(op, offset, size);
                submitted += 1;
            }
        }
    }
    driver.drain();
    driver.outcome
}
