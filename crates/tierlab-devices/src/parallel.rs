//! The engine shared by the memory and SSD models: `units` identical
//! servers behind one FIFO queue (an M/G/c queue when arrivals are
//! random). A device-specific `Service` says how long an IO takes once it
//! starts on a unit; the engine owns queueing, completion order and the
//! `DeviceModel` bookkeeping.
//!
//! Events are completions only: a queued IO starts exactly when a unit
//! frees, which is a completion, so the next completion is the only time
//! the state can change and `next_event_ns` is exact.
//!
//! Cost per IO: one heap push and pop (O(log in-service)), no allocation
//! once the queues have grown to the working set.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use tierlab_core::device::DeviceState;
use tierlab_core::{Completion, DeviceIo, Op, TimeNs};

/// How long an IO occupies a unit.
pub(crate) trait Service {
    /// Called once per IO when it arrives (before it may start), in
    /// submission order: models that track the recent load update it here.
    fn arrive(&mut self, io: &DeviceIo);
    /// `io` starts on a free unit at `start_ns`; returns when it completes
    /// (strictly later than `start_ns`).
    fn complete_ns(&mut self, start_ns: TimeNs, io: &DeviceIo) -> TimeNs;
}

#[derive(Clone, Copy, Debug)]
struct Queued {
    seq: u64,
    io: DeviceIo,
}

/// An IO on a unit. Ordered so that the max-heap pops the earliest
/// completion first, ties by submission order (the contract's order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InService {
    done_ns: TimeNs,
    seq: u64,
    tag: u64,
    writes: bool,
}

impl Ord for InService {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.done_ns, other.seq).cmp(&(self.done_ns, self.seq))
    }
}

impl PartialOrd for InService {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

pub(crate) struct Parallel<S> {
    pub(crate) service: S,
    units: u32,
    busy_units: u32,
    /// Units serving a write, trim or flush: the state shows WRITE then.
    busy_writing_units: u32,
    waiting: VecDeque<Queued>,
    in_service: BinaryHeap<InService>,
    /// Completed but not yet reported: `submit` settles the model up to its
    /// `now` (so an IO never waits for a unit that is already free), and
    /// what that finds is reported by the next `advance`.
    ready: VecDeque<Completion>,
    now_ns: TimeNs,
    next_seq: u64,
    in_flight: usize,
}

impl<S: Service> Parallel<S> {
    pub(crate) fn new(service: S, units: u32) -> Self {
        Parallel {
            service,
            units,
            busy_units: 0,
            busy_writing_units: 0,
            waiting: VecDeque::new(),
            in_service: BinaryHeap::new(),
            ready: VecDeque::new(),
            now_ns: 0,
            next_seq: 0,
            in_flight: 0,
        }
    }

    pub(crate) fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        // Time never runs backwards: a late `now` is read as the present.
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        self.service.arrive(&io);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight += 1;
        if self.busy_units < self.units {
            self.start(now_ns, Queued { seq, io });
        } else {
            self.waiting.push_back(Queued { seq, io });
        }
    }

    pub(crate) fn next_event_ns(&self) -> Option<TimeNs> {
        // Everything in `ready` completed no later than the heap's top.
        match self.ready.front() {
            Some(c) => Some(c.done_ns),
            None => self.in_service.peek().map(|s| s.done_ns),
        }
    }

    pub(crate) fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        self.in_flight -= self.ready.len();
        done.extend(self.ready.drain(..));
    }

    pub(crate) fn state(&self) -> DeviceState {
        if self.busy_units == 0 {
            DeviceState::Idle
        } else if self.busy_writing_units > 0 {
            DeviceState::Write
        } else {
            DeviceState::Read
        }
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn start(&mut self, start_ns: TimeNs, q: Queued) {
        let done_ns = self.service.complete_ns(start_ns, &q.io);
        debug_assert!(done_ns > start_ns, "a service must take time");
        let writes = q.io.op != Op::Read;
        self.busy_units += 1;
        self.busy_writing_units += writes as u32;
        self.in_service.push(InService {
            done_ns,
            seq: q.seq,
            tag: q.io.tag,
            writes,
        });
    }

    /// Completes every IO done at or before `now_ns`, starting queued IOs
    /// on the freed units at the instant they free.
    fn settle(&mut self, now_ns: TimeNs) {
        while let Some(top) = self.in_service.peek() {
            if top.done_ns > now_ns {
                break;
            }
            let finished = self.in_service.pop().expect("peeked");
            self.busy_units -= 1;
            self.busy_writing_units -= finished.writes as u32;
            self.ready.push_back(Completion {
                tag: finished.tag,
                done_ns: finished.done_ns,
            });
            if let Some(next) = self.waiting.pop_front() {
                self.start(finished.done_ns, next);
            }
        }
    }
}
