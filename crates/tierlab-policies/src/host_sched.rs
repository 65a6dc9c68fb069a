//! A host IO scheduler in front of a device: a CFQ-like one, as the block
//! layer of the busy-rate QoS paper's testbed had (CentOS 5.3, Linux
//! 2.6.18, whose default elevator is CFQ), or one FIFO with a fixed depth
//! ([`Fifo`]: a short queue to an array that serves commands in arrival
//! order). Sans-IO: the owner feeds it arrivals ([`HostSched::enqueue`])
//! and device completions ([`HostSched::completed`]) and asks what to send
//! now ([`HostSched::dispatch`]); the answer names the instant to ask again
//! when it is idling.
//!
//! The CFQ model (docs/qos.md, "Host scheduler"), one queue per tenant:
//! - queues take turns, round robin in the order they became busy; the
//!   one whose turn it is (the *active* queue) is the only one whose IOs
//!   go to the device;
//! - its turn (slice) is `slice_ms` long, counted from its first dispatch;
//!   at most `quantum` of its IOs are in the device at once, in FIFO order;
//! - when it has nothing queued but IOs in the device, nothing is sent
//!   (CFQ keeps the queue until they complete);
//! - when it has nothing queued and nothing in the device, the scheduler
//!   *idles*: it waits up to `idle_ms` (not past the slice's end) for that
//!   queue's next IO, with the device idle even if other queues wait
//!   (CFQ's `slice_idle`, for a process issuing synchronous IOs one after
//!   another); `idle_ms = 0` switches at once;
//! - a slice ends when its time is up (checked whenever the scheduler is
//!   asked) or when idling ran out; a queue with IOs left goes to the back
//!   of the round.
//!
//! Left out of the model (CFQ has them): sorting by sector within a queue,
//! priorities and their slice lengths, the async/sync split (every IO is
//! treated as synchronous), preemption, and per-thread queues (in 2.6.18
//! each thread had its own io_context; here a tenant is one process).

use std::collections::VecDeque;

use serde::Deserialize;
use tierlab_core::{ParamError, TimeNs};

/// `[policy.host_scheduler]` of a `busy-rate-qos` policy.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum HostSchedulerParams {
    /// The CFQ-like per-tenant time-slice scheduler.
    Cfq(CfqParams),
    /// One FIFO for every tenant, at most `depth` IOs in the device.
    Fifo(FifoParams),
}

/// FIFO parameters.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FifoParams {
    /// At most this many IOs in the device at once (a RAID LUN's queue
    /// depth, or the commands its controller works on at a time).
    pub depth: u32,
}

impl Default for FifoParams {
    fn default() -> Self {
        FifoParams { depth: 1 }
    }
}

impl FifoParams {
    /// Checks every value; the error names the key, the value and what is allowed.
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.depth == 0 {
            return Err(ParamError::new("depth", 0, "at least 1"));
        }
        Ok(())
    }
}

/// CFQ-like scheduler parameters; defaults are Linux 2.6.18's CFQ
/// (`slice_sync` = HZ/10, `slice_idle` = HZ/125, `quantum` = 4).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CfqParams {
    /// A queue's turn, milliseconds from its first dispatch.
    pub slice_ms: f64,
    /// How long the scheduler waits for the active queue's next IO once it
    /// ran empty, milliseconds; 0: switch queues at once (work-conserving).
    pub idle_ms: f64,
    /// At most this many IOs of the active queue in the device at once.
    pub quantum: u32,
    /// What gets a queue of its own: each tenant, or each of a tenant's
    /// threads (Linux before 2.6.25 gave every thread its own io_context,
    /// hence its own CFQ queue; a thread has one IO outstanding).
    pub queue_per: QueuePer,
}

/// What a CFQ queue stands for (`queue_per`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueuePer {
    /// One queue per tenant (a process, or a cgroup).
    #[default]
    Tenant,
    /// One queue per thread: a tenant's IO goes to the queue of the thread
    /// that issues it, the one most recently left with nothing
    /// outstanding (the thread whose IO just completed, in a closed loop).
    Thread,
}

impl Default for CfqParams {
    fn default() -> Self {
        CfqParams {
            slice_ms: 100.0,
            idle_ms: 8.0,
            quantum: 4,
            queue_per: QueuePer::Tenant,
        }
    }
}

impl CfqParams {
    /// Checks every value; the error names the key, the value and what is allowed.
    /// Keys are relative to the `host_scheduler` table.
    pub fn validate(&self) -> Result<(), ParamError> {
        if !(self.slice_ms.is_finite() && self.slice_ms > 0.0 && self.slice_ms <= 60_000.0) {
            return Err(ParamError::new("slice_ms", self.slice_ms, "(0, 60000] ms"));
        }
        if !(self.idle_ms.is_finite() && self.idle_ms >= 0.0 && self.idle_ms <= 60_000.0) {
            return Err(ParamError::new("idle_ms", self.idle_ms, "[0, 60000] ms"));
        }
        if self.quantum == 0 {
            return Err(ParamError::new("quantum", 0, "at least 1"));
        }
        Ok(())
    }
}

fn ms_to_ns(ms: f64) -> TimeNs {
    (ms * 1e6).round() as TimeNs
}

struct Queue<T> {
    waiting: VecDeque<T>,
    in_device: u32,
    /// In the round-robin list (or active).
    listed: bool,
}

#[derive(Clone, Copy, Debug)]
struct Active {
    queue: u32,
    /// Set at the slice's first dispatch.
    slice_end_ns: Option<TimeNs>,
    /// Set while idling for this queue's next IO.
    idle_until_ns: Option<TimeNs>,
}

/// Counters since the start (`Cfq::stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CfqStats {
    pub enqueued: u64,
    pub dispatched: u64,
    pub completed: u64,
    /// Slices started (a queue became active).
    pub slices: u64,
    /// Slices that ended because their time was up.
    pub slices_expired: u64,
    /// Idle waits started, and those that ran out without an IO.
    pub idle_waits: u64,
    pub idle_timeouts: u64,
}

/// The CFQ-like scheduler over items `T` (the owner's IOs); queue ids are
/// small integers (tenants).
pub struct Cfq<T> {
    slice_ns: TimeNs,
    idle_ns: TimeNs,
    quantum: u32,
    queues: Vec<Queue<T>>,
    /// Queues with IOs waiting for a turn, in order (the active one is not here).
    round: VecDeque<u32>,
    active: Option<Active>,
    in_device: u64,
    stats: CfqStats,
}

impl<T> Cfq<T> {
    pub fn new(params: &CfqParams) -> Result<Cfq<T>, ParamError> {
        params.validate()?;
        Ok(Cfq {
            slice_ns: ms_to_ns(params.slice_ms).max(1),
            idle_ns: ms_to_ns(params.idle_ms),
            quantum: params.quantum,
            queues: Vec::new(),
            round: VecDeque::new(),
            active: None,
            in_device: 0,
            stats: CfqStats::default(),
        })
    }

    pub fn stats(&self) -> CfqStats {
        self.stats
    }

    /// IOs held (not yet sent to the device).
    pub fn waiting(&self) -> usize {
        self.queues.iter().map(|q| q.waiting.len()).sum()
    }

    /// IOs sent and not completed.
    pub fn in_device(&self) -> u64 {
        self.in_device
    }

    /// The queue whose turn it is, if any.
    pub fn active_queue(&self) -> Option<u32> {
        self.active.map(|a| a.queue)
    }

    fn queue(&mut self, q: u32) -> &mut Queue<T> {
        let i = q as usize;
        while self.queues.len() <= i {
            self.queues.push(Queue {
                waiting: VecDeque::new(),
                in_device: 0,
                listed: false,
            });
        }
        &mut self.queues[i]
    }

    /// An IO of queue `q` arrives. Call [`Cfq::dispatch`] afterwards.
    pub fn enqueue(&mut self, q: u32, item: T) {
        self.stats.enqueued += 1;
        let is_active = self.active.is_some_and(|a| a.queue == q);
        let queue = self.queue(q);
        queue.waiting.push_back(item);
        if !queue.listed && !is_active {
            queue.listed = true;
            self.round.push_back(q);
        }
    }

    /// An IO of queue `q` that was dispatched completed. Call
    /// [`Cfq::dispatch`] afterwards.
    pub fn completed(&mut self, q: u32) {
        let queue = self.queue(q);
        assert!(
            queue.in_device > 0,
            "queue {q} completed an IO it never sent"
        );
        queue.in_device -= 1;
        self.in_device -= 1;
        self.stats.completed += 1;
    }

    /// Ends the active queue's slice; a queue with IOs left rejoins the round.
    fn expire(&mut self) {
        if let Some(a) = self.active.take() {
            let queue = &mut self.queues[a.queue as usize];
            if queue.waiting.is_empty() {
                queue.listed = false;
            } else {
                queue.listed = true;
                self.round.push_back(a.queue);
            }
        }
    }

    /// Sends what may go to the device now, as (queue, item), appended to
    /// `out` in dispatch order. Returns the instant to call again if the
    /// scheduler is idling then (nothing else would wake it); `None` when
    /// the next arrival or completion is what it waits for.
    pub fn dispatch(&mut self, now_ns: TimeNs, out: &mut Vec<(u32, T)>) -> Option<TimeNs> {
        loop {
            let Some(mut a) = self.active else {
                let next = loop {
                    match self.round.pop_front() {
                        None => return None,
                        Some(q) if !self.queues[q as usize].waiting.is_empty() => break q,
                        Some(q) => self.queues[q as usize].listed = false,
                    }
                };
                self.active = Some(Active {
                    queue: next,
                    slice_end_ns: None,
                    idle_until_ns: None,
                });
                self.stats.slices += 1;
                continue;
            };
            if a.slice_end_ns.is_some_and(|end| now_ns >= end) {
                self.stats.slices_expired += 1;
                self.expire();
                continue;
            }
            let quantum = self.quantum;
            let queue = &mut self.queues[a.queue as usize];
            if !queue.waiting.is_empty() {
                a.idle_until_ns = None;
                if queue.in_device >= quantum {
                    self.active = Some(a);
                    return None;
                }
                let item = queue.waiting.pop_front().expect("not empty");
                queue.in_device += 1;
                self.in_device += 1;
                self.stats.dispatched += 1;
                a.slice_end_ns.get_or_insert(now_ns + self.slice_ns);
                self.active = Some(a);
                out.push((a.queue, item));
                continue;
            }
            if queue.in_device > 0 {
                // Its IOs are in the device: keep the queue until they complete.
                self.active = Some(a);
                return None;
            }
            if self.idle_ns == 0 {
                self.expire();
                continue;
            }
            match a.idle_until_ns {
                None => {
                    let until = a
                        .slice_end_ns
                        .map_or(now_ns + self.idle_ns, |end| end.min(now_ns + self.idle_ns));
                    a.idle_until_ns = Some(until);
                    self.active = Some(a);
                    self.stats.idle_waits += 1;
                    return Some(until);
                }
                Some(until) if now_ns < until => {
                    self.active = Some(a);
                    return Some(until);
                }
                Some(_) => {
                    self.stats.idle_timeouts += 1;
                    self.expire();
                }
            }
        }
    }
}

/// Counters since the start (`Fifo::stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FifoStats {
    pub enqueued: u64,
    pub dispatched: u64,
    pub completed: u64,
}

/// One FIFO for every queue: IOs go to the device in arrival order while
/// fewer than `depth` are there (work-conserving, no idling).
pub struct Fifo<T> {
    depth: u64,
    waiting: VecDeque<(u32, T)>,
    in_device: u64,
    stats: FifoStats,
}

impl<T> Fifo<T> {
    pub fn new(params: &FifoParams) -> Result<Fifo<T>, ParamError> {
        params.validate()?;
        Ok(Fifo {
            depth: u64::from(params.depth),
            waiting: VecDeque::new(),
            in_device: 0,
            stats: FifoStats::default(),
        })
    }

    pub fn stats(&self) -> FifoStats {
        self.stats
    }

    /// IOs held (not yet sent to the device).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// IOs sent and not completed.
    pub fn in_device(&self) -> u64 {
        self.in_device
    }

    /// An IO of queue `q` arrives (kept with it for [`Fifo::dispatch`]'s
    /// answer). Call [`Fifo::dispatch`] afterwards.
    pub fn enqueue(&mut self, q: u32, item: T) {
        self.stats.enqueued += 1;
        self.waiting.push_back((q, item));
    }

    /// An IO that was dispatched completed. Call [`Fifo::dispatch`] afterwards.
    pub fn completed(&mut self) {
        assert!(self.in_device > 0, "an IO completed that was never sent");
        self.in_device -= 1;
        self.stats.completed += 1;
    }

    /// Sends what may go to the device now, appended to `out` in arrival
    /// order. Never idles, so never asks for a wake-up.
    pub fn dispatch(&mut self, out: &mut Vec<(u32, T)>) {
        while self.in_device < self.depth {
            let Some(io) = self.waiting.pop_front() else {
                break;
            };
            self.in_device += 1;
            self.stats.dispatched += 1;
            out.push(io);
        }
    }
}

/// Either scheduler, behind the one interface its owner uses.
pub enum HostSched<T> {
    Cfq(Cfq<T>),
    Fifo(Fifo<T>),
}

impl<T> HostSched<T> {
    /// The scheduler `params` describe.
    pub fn new(params: &HostSchedulerParams) -> Result<HostSched<T>, ParamError> {
        Ok(match params {
            HostSchedulerParams::Cfq(p) => HostSched::Cfq(Cfq::new(p)?),
            HostSchedulerParams::Fifo(p) => HostSched::Fifo(Fifo::new(p)?),
        })
    }

    /// An IO of queue `q` arrives. Call [`HostSched::dispatch`] afterwards.
    pub fn enqueue(&mut self, q: u32, item: T) {
        match self {
            HostSched::Cfq(s) => s.enqueue(q, item),
            HostSched::Fifo(s) => s.enqueue(q, item),
        }
    }

    /// An IO of queue `q` that was dispatched completed. Call
    /// [`HostSched::dispatch`] afterwards.
    pub fn completed(&mut self, q: u32) {
        match self {
            HostSched::Cfq(s) => s.completed(q),
            HostSched::Fifo(s) => s.completed(),
        }
    }

    /// As [`Cfq::dispatch`]: what to send now, and when to ask again if idling.
    pub fn dispatch(&mut self, now_ns: TimeNs, out: &mut Vec<(u32, T)>) -> Option<TimeNs> {
        match self {
            HostSched::Cfq(s) => s.dispatch(now_ns, out),
            HostSched::Fifo(s) => {
                s.dispatch(out);
                None
            }
        }
    }

    /// IOs held (not yet sent to the device).
    pub fn waiting(&self) -> usize {
        match self {
            HostSched::Cfq(s) => s.waiting(),
            HostSched::Fifo(s) => s.waiting(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_errors_name_the_key() {
        let bad = |p: CfqParams, key: &str| {
            let e = p.validate().unwrap_err();
            assert_eq!(e.key(), key, "{e}");
        };
        bad(
            CfqParams {
                slice_ms: 0.0,
                ..CfqParams::default()
            },
            "slice_ms",
        );
        bad(
            CfqParams {
                idle_ms: -1.0,
                ..CfqParams::default()
            },
            "idle_ms",
        );
        bad(
            CfqParams {
                quantum: 0,
                ..CfqParams::default()
            },
            "quantum",
        );
        assert!(CfqParams::default().validate().is_ok());
        let e = FifoParams { depth: 0 }.validate().unwrap_err();
        assert_eq!(e.key(), "depth", "{e}");
        assert!(FifoParams::default().validate().is_ok());
    }
}
