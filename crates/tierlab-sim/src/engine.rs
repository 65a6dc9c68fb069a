//! The discrete-event loop. Virtual time in integer ns; deterministic: at
//! equal times, device events are handled in device order, then timers in
//! (time, set order), then arrivals in tenant order; nothing depends on hash
//! order or wall-clock time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tierlab_core::apply::{OutboxSink, PolicyError};
use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::policy::{BufRef, HostIo, Outbox, Policy};
use tierlab_core::{Completion, DeviceIo, Op, TimeNs};

use crate::driver::Tenant;
use crate::slab::Slab;

/// What the loop reports, for metrics. Implemented by the metrics recorder;
/// a no-op implementation measures the bare loop.
pub trait Observer {
    fn host_io(
        &mut self,
        arrival_ns: TimeNs,
        done_ns: TimeNs,
        op: Op,
        size_bytes: u32,
        tier: u16,
        tenant: u32,
    );
    fn device_submit(&mut self, device: usize, now_ns: TimeNs);
    fn device_complete(
        &mut self,
        device: usize,
        submit_ns: TimeNs,
        done_ns: TimeNs,
        op: Op,
        size_bytes: u32,
    );
    fn device_state(&mut self, device: usize, now_ns: TimeNs, state: DeviceState);
}

/// Counts only; for benchmarks of the loop itself and for tests.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Counts {
    pub host_ios: u64,
    pub host_latency_sum_ns: u128,
    pub device_ios: Vec<u64>,
}

impl Observer for Counts {
    fn host_io(
        &mut self,
        arrival_ns: TimeNs,
        done_ns: TimeNs,
        _op: Op,
        _size: u32,
        _tier: u16,
        _tenant: u32,
    ) {
        self.host_ios += 1;
        self.host_latency_sum_ns += (done_ns - arrival_ns) as u128;
    }
    fn device_submit(&mut self, _device: usize, _now_ns: TimeNs) {}
    fn device_complete(
        &mut self,
        device: usize,
        _submit_ns: TimeNs,
        _done_ns: TimeNs,
        _op: Op,
        _size: u32,
    ) {
        if self.device_ios.len() <= device {
            self.device_ios.resize(device + 1, 0);
        }
        self.device_ios[device] += 1;
    }
    fn device_state(&mut self, _device: usize, _now_ns: TimeNs, _state: DeviceState) {}
}

struct HostInFlight {
    arrival_ns: TimeNs,
    op: Op,
    size_bytes: u32,
    tenant: u32,
    /// The tenant's thread that issued it (`Arrival::thread`).
    thread: u32,
}

struct DeviceInFlight {
    policy_tag: u64,
    submit_ns: TimeNs,
    op: Op,
    size_bytes: u32,
}

/// Where a run is, for progress reporting (`Simulation::run_with_progress`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Virtual time reached.
    pub simulated_ns: TimeNs,
    /// Host IOs issued so far.
    pub host_ios: u64,
    /// Events handled so far.
    pub events: u64,
}

/// The progress callback runs every this many events (a power of two):
/// cheap enough to leave on (one mask test per event), often enough for a
/// smooth bar at millions of events per second.
pub const PROGRESS_EVERY_EVENTS: u64 = 1 << 14;

/// Why a run stopped early.
#[derive(Debug)]
pub enum SimError {
    Workload(tierlab_trace::TraceError),
    /// The policy broke the protocol (e.g. sent an IO to a device that does not exist).
    Policy(String),
    /// The progress callback asked to stop (e.g. Ctrl-C in Python).
    Interrupted,
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Workload(e) => write!(f, "{e}"),
            SimError::Policy(m) => write!(f, "policy error: {m}"),
            SimError::Interrupted => write!(f, "interrupted"),
        }
    }
}

impl std::error::Error for SimError {}

impl From<tierlab_trace::TraceError> for SimError {
    fn from(e: tierlab_trace::TraceError) -> Self {
        SimError::Workload(e)
    }
}

/// End-of-run facts the metrics do not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub end_ns: TimeNs,
    /// When the workload ended: every tenant done issuing and every host
    /// IO completed (the last completion); `end_ns` for a run stopped by
    /// its time limit or left with host IOs unfinished. After it the stack
    /// may still move data (ATSMF moves, write-backs): `end_ns` includes
    /// that, host IO/s does not (`Recorder::finish_after_workload`).
    pub workload_end_ns: TimeNs,
    pub host_ios: u64,
    pub events: u64,
    /// Host IOs the policy never completed (a policy bug, reported).
    pub host_ios_unfinished: u64,
}

pub struct Simulation {
    now_ns: TimeNs,
    policy: Box<dyn Policy>,
    devices: Vec<Box<dyn DeviceModel>>,
    tenants: Vec<Tenant>,
    timers: BinaryHeap<Reverse<(TimeNs, u64, u64)>>,
    timer_seq: u64,
    host: Slab<HostInFlight>,
    device_io: Slab<DeviceInFlight>,
    outbox: Outbox,
    done: Vec<Completion>,
    states: Vec<DeviceState>,
    host_ios: u64,
    /// The latest host IO completion.
    last_host_done_ns: TimeNs,
    events: u64,
    /// Policy counters sampled every `sample_interval_ns` (see `sample_policy_counters`).
    sample_interval_ns: Option<TimeNs>,
    next_sample_ns: TimeNs,
    counter_samples: Vec<(TimeNs, Vec<f64>)>,
    /// Member state timelines (`record_member_states`): per device, the
    /// index of its first member among the extra signals; the members'
    /// last states; scratch for a walk.
    member_base: Option<Vec<usize>>,
    member_states: Vec<DeviceState>,
    member_scratch: Vec<DeviceState>,
}

/// Every member of `device`, depth first (a member, then its own members).
fn member_states(device: &dyn DeviceModel, out: &mut Vec<DeviceState>) {
    for m in device.members() {
        out.push(m.state());
        member_states(m, out);
    }
}

/// Names of the member signals `record_member_states` reports, in its
/// order: `NAME.mI` for member I of device NAME, `NAME.mI.mJ` below it.
pub fn member_signal_names(devices: &[Box<dyn DeviceModel>], names: &[String]) -> Vec<String> {
    fn walk(device: &dyn DeviceModel, prefix: &str, out: &mut Vec<String>) {
        for (i, m) in device.members().into_iter().enumerate() {
            let name = format!("{prefix}.m{i}");
            out.push(name.clone());
            walk(m, &name, out);
        }
    }
    let mut out = Vec::new();
    for (d, name) in devices.iter().zip(names) {
        walk(&**d, name, &mut out);
    }
    out
}

impl Simulation {
    pub fn new(
        policy: Box<dyn Policy>,
        devices: Vec<Box<dyn DeviceModel>>,
        tenants: Vec<Tenant>,
    ) -> Simulation {
        let states = vec![DeviceState::Idle; devices.len()];
        Simulation {
            now_ns: 0,
            policy,
            devices,
            tenants,
            timers: BinaryHeap::new(),
            timer_seq: 0,
            host: Slab::default(),
            device_io: Slab::default(),
            outbox: Outbox::default(),
            done: Vec::new(),
            states,
            host_ios: 0,
            last_host_done_ns: 0,
            events: 0,
            sample_interval_ns: None,
            next_sample_ns: 0,
            counter_samples: Vec::new(),
            member_base: None,
            member_states: Vec::new(),
            member_scratch: Vec::new(),
        }
    }

    /// The parts a different executor drives (the real executor builds a
    /// stack with `build::build` and takes it apart here).
    #[allow(clippy::type_complexity)]
    pub fn into_parts(self) -> (Box<dyn Policy>, Vec<Box<dyn DeviceModel>>, Vec<Tenant>) {
        (self.policy, self.devices, self.tenants)
    }

    /// Samples `Policy::counters` at every multiple of `interval_ns` (the
    /// state just before that instant's events) and at the end of the run:
    /// e.g. a cache's dirty bytes over time. Policies without counters are
    /// not sampled.
    pub fn sample_policy_counters(&mut self, interval_ns: TimeNs) {
        if interval_ns > 0 && !self.policy.counters().is_empty() {
            self.sample_interval_ns = Some(interval_ns);
            self.next_sample_ns = interval_ns;
        }
    }

    /// (time, counter values in `Policy::counters` order).
    pub fn counter_samples(&self) -> &[(TimeNs, Vec<f64>)] {
        &self.counter_samples
    }

    fn sample_until(&mut self, t: TimeNs) {
        let Some(interval) = self.sample_interval_ns else {
            return;
        };
        while self.next_sample_ns <= t {
            let values = self.policy.counters().into_iter().map(|(_, v)| v).collect();
            self.counter_samples.push((self.next_sample_ns, values));
            self.next_sample_ns += interval;
        }
    }

    pub fn tenants(&self) -> &[Tenant] {
        &self.tenants
    }

    pub fn devices(&self) -> &[Box<dyn DeviceModel>] {
        &self.devices
    }

    pub fn policy(&self) -> &dyn Policy {
        &*self.policy
    }

    /// Runs until every tenant is finished and every IO has completed, or
    /// until `until_ns` of virtual time.
    pub fn run(
        &mut self,
        obs: &mut dyn Observer,
        until_ns: Option<TimeNs>,
    ) -> Result<RunOutcome, SimError> {
        self.run_with_progress(obs, until_ns, None)
    }

    /// As `run`, calling `progress` every `PROGRESS_EVERY_EVENTS` events;
    /// it returns false to stop the run (`SimError::Interrupted`). It sees
    /// the loop's state only, so the results are the same with or without it.
    pub fn run_with_progress(
        &mut self,
        obs: &mut dyn Observer,
        until_ns: Option<TimeNs>,
        mut progress: Option<&mut dyn FnMut(&Progress) -> bool>,
    ) -> Result<RunOutcome, SimError> {
        for d in 0..self.devices.len() {
            obs.device_state(d, 0, self.devices[d].state());
            self.states[d] = self.devices[d].state();
            self.note_member_states(d, obs, true);
        }
        let mut stopped_by_limit = false;
        loop {
            // The next event of each kind.
            let mut next = TimeNs::MAX;
            for d in &self.devices {
                if let Some(t) = d.next_event_ns() {
                    next = next.min(t);
                }
            }
            if let Some(Reverse((t, _, _))) = self.timers.peek() {
                next = next.min(*t);
            }
            for i in 0..self.tenants.len() {
                let now = self.now_ns;
                if let Some(t) = self.tenants[i].next_issue_ns(now)? {
                    next = next.min(t.max(now));
                }
            }
            if next == TimeNs::MAX {
                break; // nothing left anywhere
            }
            if until_ns.is_some_and(|u| next > u) {
                self.now_ns = until_ns.unwrap();
                stopped_by_limit = true;
                break;
            }
            self.sample_until(next);
            debug_assert!(
                next >= self.now_ns,
                "time ran backwards: {next} < {}",
                self.now_ns
            );
            self.now_ns = next;
            let now = next;
            self.events += 1;
            if self.events & (PROGRESS_EVERY_EVENTS - 1) == 0
                && let Some(report) = progress.as_mut()
            {
                let p = Progress {
                    simulated_ns: now,
                    host_ios: self.host_ios,
                    events: self.events,
                };
                if !report(&p) {
                    return Err(SimError::Interrupted);
                }
            }

            // 1. Device completions, in device order.
            for d in 0..self.devices.len() {
                if self.devices[d].next_event_ns().is_some_and(|t| t <= now) {
                    self.done.clear();
                    self.devices[d].advance(now, &mut self.done);
                    for i in 0..self.done.len() {
                        let c = self.done[i];
                        let io = self.device_io.remove(c.tag).ok_or_else(|| {
                            SimError::Policy(format!(
                                "device {d} completed an IO it was never given (tag {})",
                                c.tag
                            ))
                        })?;
                        obs.device_complete(d, io.submit_ns, c.done_ns, io.op, io.size_bytes);
                        self.policy
                            .on_device_completion(now, d, io.policy_tag, &mut self.outbox);
                        self.apply(obs)?;
                    }
                    self.note_state(d, obs);
                }
            }
            // 2. Timers due.
            while let Some(Reverse((t, _, id))) = self.timers.peek().copied() {
                if t > now {
                    break;
                }
                self.timers.pop();
                self.policy.on_timer(now, id, &mut self.outbox);
                self.apply(obs)?;
            }
            // 3. Arrivals due, in tenant order.
            for i in 0..self.tenants.len() {
                while self.tenants[i]
                    .next_issue_ns(now)?
                    .is_some_and(|t| t <= now)
                {
                    let Some(a) = self.tenants[i].issue(now) else {
                        break;
                    };
                    let id = self.host.insert(HostInFlight {
                        arrival_ns: now,
                        op: a.op,
                        size_bytes: a.size_bytes,
                        tenant: i as u32,
                        thread: a.thread,
                    });
                    self.host_ios += 1;
                    let io = HostIo {
                        id,
                        op: a.op,
                        offset_bytes: a.offset_bytes,
                        size_bytes: a.size_bytes,
                        tenant: i as u32,
                    };
                    self.policy.on_host_io(now, io, &mut self.outbox);
                    self.apply(obs)?;
                }
            }
        }
        if self.sample_interval_ns.is_some() {
            self.sample_until(self.now_ns);
            if self
                .counter_samples
                .last()
                .is_none_or(|(t, _)| *t < self.now_ns)
            {
                let values = self.policy.counters().into_iter().map(|(_, v)| v).collect();
                self.counter_samples.push((self.now_ns, values));
            }
        }
        let workload_end_ns = if stopped_by_limit || self.host.len() > 0 {
            self.now_ns
        } else {
            self.last_host_done_ns
        };
        Ok(RunOutcome {
            end_ns: self.now_ns,
            workload_end_ns,
            host_ios: self.host_ios,
            events: self.events,
            host_ios_unfinished: self.host.len() as u64,
        })
    }

    pub fn now_ns(&self) -> TimeNs {
        self.now_ns
    }

    fn note_state(&mut self, d: usize, obs: &mut dyn Observer) {
        let s = self.devices[d].state();
        if s != self.states[d] {
            self.states[d] = s;
            obs.device_state(d, self.now_ns, s);
        }
        self.note_member_states(d, obs, false);
    }

    /// Reports the states of device `d`'s members (RAID members, nested
    /// arrays) as timeline signals `devices.len() + k`, after
    /// `record_member_states`; `all` reports unchanged ones too.
    fn note_member_states(&mut self, d: usize, obs: &mut dyn Observer, all: bool) {
        let Some(base) = self.member_base.as_ref().map(|b| b[d]) else {
            return;
        };
        self.member_scratch.clear();
        member_states(&*self.devices[d], &mut self.member_scratch);
        let first_signal = self.devices.len() + base;
        for (k, &s) in self.member_scratch.iter().enumerate() {
            if all || self.member_states[base + k] != s {
                self.member_states[base + k] = s;
                obs.device_state(first_signal + k, self.now_ns, s);
            }
        }
    }

    /// Also report the state of every member of a composite device (RAID)
    /// to the observer, as device indices after the last device, in the
    /// order of `member_signal_names`. Costs a walk of the members after
    /// each event of such a device, so it is off unless asked for.
    pub fn record_member_states(&mut self) {
        let mut base = Vec::with_capacity(self.devices.len());
        let mut total = 0;
        for d in &self.devices {
            base.push(total);
            self.member_scratch.clear();
            member_states(&**d, &mut self.member_scratch);
            total += self.member_scratch.len();
        }
        self.member_states = vec![DeviceState::Idle; total];
        self.member_base = (total > 0).then_some(base);
    }

    /// Carries out what the policy asked for (`Outbox::apply`, the one
    /// implementation every executor shares).
    fn apply(&mut self, obs: &mut dyn Observer) -> Result<(), SimError> {
        let now = self.now_ns;
        let mut out = std::mem::take(&mut self.outbox);
        let name = self.policy.name().to_string();
        let result = out.apply(&name, now, &mut SimSink { sim: self, obs });
        self.outbox = out;
        result
    }
}

/// The simulator's side of `Outbox::apply`: device IOs go to the models,
/// completions to the observer and the tenants.
struct SimSink<'a> {
    sim: &'a mut Simulation,
    obs: &'a mut dyn Observer,
}

impl From<PolicyError> for SimError {
    fn from(e: PolicyError) -> SimError {
        SimError::Policy(e.to_string())
    }
}

impl OutboxSink for SimSink<'_> {
    type Error = SimError;

    fn device_count(&self) -> usize {
        self.sim.devices.len()
    }

    fn device_capacity_bytes(&self, device: usize) -> u64 {
        self.sim.devices[device].capacity_bytes()
    }

    fn submit(
        &mut self,
        now_ns: TimeNs,
        device: usize,
        io: DeviceIo,
        _data: Option<BufRef>,
    ) -> Result<(), SimError> {
        let tag = self.sim.device_io.insert(DeviceInFlight {
            policy_tag: io.tag,
            submit_ns: now_ns,
            op: io.op,
            size_bytes: io.size_bytes,
        });
        self.obs.device_submit(device, now_ns);
        self.sim.devices[device].submit(now_ns, DeviceIo { tag, ..io });
        self.sim.note_state(device, self.obs);
        Ok(())
    }

    fn complete(&mut self, now_ns: TimeNs, host_id: u64, tier: u16) -> Result<(), SimError> {
        let h = self.sim.host.remove(host_id).ok_or_else(|| {
            SimError::Policy(format!(
                "{} completed host IO {host_id} twice or never received it",
                self.sim.policy.name()
            ))
        })?;
        self.obs
            .host_io(h.arrival_ns, now_ns, h.op, h.size_bytes, tier, h.tenant);
        self.sim.last_host_done_ns = self.sim.last_host_done_ns.max(now_ns);
        self.sim.tenants[h.tenant as usize].complete(h.thread);
        Ok(())
    }

    fn timer(&mut self, _now_ns: TimeNs, at_ns: TimeNs, timer_id: u64) {
        self.sim.timer_seq += 1;
        self.sim
            .timers
            .push(Reverse((at_ns, self.sim.timer_seq, timer_id)));
    }

    fn cap_tenant(&mut self, tenant: u32, iops: Option<f64>) -> Result<(), SimError> {
        let n_tenants = self.sim.tenants.len();
        let t = self.sim.tenants.get_mut(tenant as usize).ok_or_else(|| {
            SimError::Policy(format!(
                "cap for tenant {tenant}, but there are {n_tenants} tenants"
            ))
        })?;
        t.set_iops_cap(iops);
        Ok(())
    }
}
