//! Drivers turn workloads into host IO arrivals: open loop (trace timestamps,
//! scaled by a speed factor, like btreplay and fio's replay_scale) and closed
//! loop (N outstanding IOs, fio iodepth semantics, stopping after a total
//! size, a duration, or the end of the workload). A tenant wraps a driver
//! with its own region of the volume and an optional IOPS cap (a per-second
//! token bucket, as in spec/qos.md: count the tenant's IOs and hold the rest
//! of each second once the cap is reached; the seconds may start at an
//! offset, as a load-control thread's own do). The cap is the lower of the
//! tenant's own limit (fixed, or a schedule over time: its demand) and a
//! policy's cap (`Action::CapTenant`), as the paper's load-control thread
//! takes the smaller of the table's rate and the controller's. How the
//! limit reaches a closed loop's threads is `IopsBudget`.

use std::collections::VecDeque;

use tierlab_core::{NS_PER_S, Op, ParamError, TimeNs};
use tierlab_trace::spread::{QuantumStats, Spread, SpreadMode};
use tierlab_trace::{IoRecord, RecordStream};

/// How a tenant issues IOs.
#[derive(Clone, Debug, PartialEq)]
pub enum DriverMode {
    /// Each record arrives at `(time - first_time) / speed`.
    OpenLoop { speed: f64 },
    /// Keep `iodepth` IOs outstanding, in workload order, ignoring timestamps.
    ClosedLoop { iodepth: u32 },
}

/// How a capped closed-loop tenant's limit reaches its `iodepth` threads
/// (the load-control thread "notifies the upper limit to the load threads",
/// seed 001, Fig. 8; how they share it is not said).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IopsBudget {
    /// One bucket per tenant second: any free thread issues while the
    /// tenant's count is below the cap, so fast threads take up the slack
    /// of slow ones.
    #[default]
    Shared,
    /// Each thread its own per-second bucket (same windows): thread i gets
    /// `floor(cap) / N`, the first `floor(cap) mod N` threads one more. A
    /// thread behind a slow IO catches up only within its second and
    /// cannot borrow another thread's IOs.
    PerThread,
    /// Each thread issues at most one IO per `N / cap` seconds from its
    /// previous issue: a thread whose IO took longer issues at once when
    /// it completes, and the lost time is not made up.
    Paced,
}

impl IopsBudget {
    pub fn name(self) -> &'static str {
        match self {
            IopsBudget::Shared => "shared",
            IopsBudget::PerThread => "per-thread",
            IopsBudget::Paced => "paced",
        }
    }
}

/// One of a closed loop's threads under a per-thread budget.
#[derive(Clone, Copy, Debug, Default)]
struct LoadThread {
    busy: bool,
    /// `PerThread`: its window (shifted time, as the tenant's) and IOs in it.
    window_start_ns: TimeNs,
    window_ios: u64,
    /// `Paced`: when it last issued.
    last_issue_ns: Option<TimeNs>,
}

/// When a closed-loop tenant stops issuing (it also stops at the end of its workload).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StopAfter {
    pub total_bytes: Option<u64>,
    pub duration_ns: Option<TimeNs>,
    pub ios: Option<u64>,
}

/// A tenant's region: offsets from the workload are folded into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub offset_bytes: u64,
    pub size_bytes: u64,
}

/// An IO ready to enter the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub time_ns: TimeNs,
    pub op: Op,
    pub offset_bytes: u64,
    pub size_bytes: u32,
    /// The closed-loop thread that issued it (0 unless the tenant's
    /// budget is per thread); give it back to `Tenant::complete`.
    pub thread: u32,
}

pub struct Tenant {
    pub name: String,
    /// The workload, its quantized stamps spread or not (`with_spread`).
    workload: Spread<Box<dyn RecordStream + Send>>,
    spread: SpreadMode,
    mode: DriverMode,
    stop: StopAfter,
    region: Option<Region>,
    /// The tenant's own IOs per second, `None` for uncapped.
    iops_cap: Option<f64>,
    /// The tenant's own limit over time, (from, IOPS) with increasing
    /// times; replaces `iops_cap` from the first entry's time on.
    iops_schedule: Vec<(TimeNs, f64)>,
    /// A policy's cap (`Action::CapTenant`), `None` for none.
    policy_cap: Option<f64>,
    /// Token bucket: the current one-second window and IOs issued in it.
    /// Windows start `offset` past each whole second; times are kept
    /// shifted by `window_shift_ns` = (1 s − offset) mod 1 s so windows are
    /// multiples of a second (`window_start_ns` is in shifted time).
    window_start_ns: TimeNs,
    window_ios: u64,
    window_shift_ns: TimeNs,
    budget: IopsBudget,
    /// Per-thread budgets: one per `iodepth` thread (empty when shared).
    threads: Vec<LoadThread>,
    /// Open loop: trace time of the first record.
    first_time_ns: Option<TimeNs>,
    last_arrival_ns: TimeNs,
    /// Records read ahead (open loop: the next one; held back by the cap).
    pending: VecDeque<Arrival>,
    exhausted: bool,
    pub outstanding: u32,
    pub issued_ios: u64,
    pub issued_bytes: u64,
    pub completed_ios: u64,
    /// Open loop: records whose time ran backwards and were issued at their predecessor's time.
    pub retimed: u64,
    /// Records whose range was folded or clipped to fit the region.
    pub folded: u64,
}

impl Tenant {
    pub fn new(
        name: impl Into<String>,
        workload: Box<dyn RecordStream + Send>,
        mode: DriverMode,
        stop: StopAfter,
        region: Option<Region>,
        iops_cap: Option<f64>,
    ) -> Result<Tenant, ParamError> {
        let name = name.into();
        match &mode {
            DriverMode::OpenLoop { speed } if !(speed.is_finite() && *speed > 0.0) => {
                return Err(ParamError::new("driver.speed", speed, "a number > 0"));
            }
            DriverMode::ClosedLoop { iodepth: 0 } => {
                return Err(ParamError::new("driver.iodepth", 0, "at least 1"));
            }
            _ => {}
        }
        if let Some(cap) = iops_cap
            && !(cap.is_finite() && cap > 0.0)
        {
            return Err(ParamError::new("iops_cap", cap, "a number > 0"));
        }
        if let Some(r) = region
            && r.size_bytes < 4096
        {
            return Err(ParamError::new(
                "region.size_bytes",
                r.size_bytes,
                "at least 4096",
            ));
        }
        Ok(Tenant {
            name,
            workload: Spread::new(workload, SpreadMode::None, 0),
            spread: SpreadMode::None,
            mode,
            stop,
            region,
            iops_cap,
            iops_schedule: Vec::new(),
            policy_cap: None,
            window_start_ns: 0,
            window_ios: 0,
            window_shift_ns: 0,
            budget: IopsBudget::Shared,
            threads: Vec::new(),
            first_time_ns: None,
            last_arrival_ns: 0,
            pending: VecDeque::new(),
            exhausted: false,
            outstanding: 0,
            issued_ios: 0,
            issued_bytes: 0,
            completed_ios: 0,
            retimed: 0,
            folded: 0,
        })
    }

    /// Makes the tenant's own limit follow `schedule`: (from time, IOPS),
    /// times strictly increasing, IOPS positive. Before the first entry the
    /// fixed `iops_cap` (if any) applies.
    /// Spreads the records of each quantized stamp over its quantum
    /// (tierlab_trace::spread; open loop only: a closed loop ignores
    /// times). `seed` drives `SpreadMode::Poisson`.
    pub fn with_spread(mut self, mode: SpreadMode, seed: u64) -> Tenant {
        self.workload = Spread::new(self.workload.into_inner(), mode, seed);
        self.spread = mode;
        self
    }

    /// How the workload's stamps were spread, what they looked like as
    /// read, and how many records got a later time.
    pub fn spread(&self) -> (SpreadMode, QuantumStats, u64) {
        (
            self.spread,
            self.workload.stats,
            self.workload.spread_records,
        )
    }

    /// Open loop with quantized stamps left as they are: the warning to
    /// give (None if there is nothing to warn about).
    pub fn quantized_warning(&self) -> Option<String> {
        let open = matches!(self.mode, DriverMode::OpenLoop { .. });
        (open && self.spread == SpreadMode::None && self.workload.stats.is_quantized()).then(|| {
            self.workload
                .stats
                .warning(&format!("tenant {}", self.name))
        })
    }

    pub fn with_iops_schedule(
        mut self,
        schedule: Vec<(TimeNs, f64)>,
    ) -> Result<Tenant, ParamError> {
        if let Some(w) = schedule.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(ParamError::new(
                "iops_schedule",
                format!(
                    "{} s followed by {} s",
                    w[0].0 as f64 / NS_PER_S as f64,
                    w[1].0 as f64 / NS_PER_S as f64
                ),
                "increasing times",
            ));
        }
        if let Some((_, v)) = schedule.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Err(ParamError::new(
                "iops_schedule",
                format!("{v} IOPS"),
                "IOPS > 0",
            ));
        }
        self.iops_schedule = schedule;
        Ok(self)
    }

    /// Starts the token bucket's one-second windows `offset_ns` past each
    /// whole second (a load-control thread started at that phase);
    /// 0 ≤ offset < 1 s.
    pub fn with_window_offset_ns(mut self, offset_ns: TimeNs) -> Result<Tenant, ParamError> {
        if offset_ns >= NS_PER_S {
            return Err(ParamError::new(
                "iops_window_offset_s",
                offset_ns as f64 / NS_PER_S as f64,
                "below 1 s",
            ));
        }
        self.window_shift_ns = (NS_PER_S - offset_ns) % NS_PER_S;
        Ok(self)
    }

    /// How the cap reaches the closed loop's threads (default shared). A
    /// per-thread budget needs a closed loop: an open loop has no threads.
    pub fn with_iops_budget(mut self, budget: IopsBudget) -> Result<Tenant, ParamError> {
        self.budget = budget;
        self.threads = match (budget, &self.mode) {
            (IopsBudget::Shared, _) => Vec::new(),
            (_, DriverMode::ClosedLoop { iodepth }) => {
                vec![LoadThread::default(); *iodepth as usize]
            }
            (_, DriverMode::OpenLoop { .. }) => {
                return Err(ParamError::new(
                    "iops_budget",
                    budget.name(),
                    "\"shared\" for an open-loop driver (per-thread budgets need a closed loop's threads)",
                ));
            }
        };
        Ok(self)
    }

    /// The window holding `t`, in shifted time.
    fn window_of(&self, t: TimeNs) -> TimeNs {
        (t + self.window_shift_ns) / NS_PER_S * NS_PER_S
    }

    /// A policy's cap (`Action::CapTenant`); the tenant's own limit still applies.
    pub fn set_iops_cap(&mut self, cap: Option<f64>) {
        self.policy_cap = cap.filter(|c| c.is_finite() && *c > 0.0);
    }

    /// The tenant's own limit at `t` (schedule, else the fixed cap).
    pub fn own_iops_cap_at(&self, t: TimeNs) -> Option<f64> {
        let i = self.iops_schedule.partition_point(|(from, _)| *from <= t);
        if i == 0 {
            self.iops_cap
        } else {
            Some(self.iops_schedule[i - 1].1)
        }
    }

    /// The cap in force at `t`: the lower of the own limit and the policy's.
    pub fn iops_cap_at(&self, t: TimeNs) -> Option<f64> {
        match (self.own_iops_cap_at(t), self.policy_cap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn fold(&mut self, r: &IoRecord) -> (u64, u32) {
        let Some(region) = self.region else {
            return (r.offset_bytes, r.size_bytes);
        };
        let size = (r.size_bytes as u64).min(region.size_bytes);
        let mut offset = r.offset_bytes % region.size_bytes;
        if offset + size > region.size_bytes {
            offset = region.size_bytes - size;
        }
        if offset != r.offset_bytes || size != r.size_bytes as u64 {
            self.folded += 1;
        }
        (region.offset_bytes + offset, size as u32)
    }

    /// Reads the next workload record as an arrival (time per the mode).
    fn pull(&mut self, now_ns: TimeNs) -> tierlab_trace::Result<Option<Arrival>> {
        if self.exhausted {
            return Ok(None);
        }
        let limit_hit = self
            .stop
            .ios
            .is_some_and(|n| self.issued_ios + self.pending.len() as u64 >= n)
            || self
                .stop
                .total_bytes
                .is_some_and(|b| self.issued_bytes >= b);
        if limit_hit {
            self.exhausted = true;
            return Ok(None);
        }
        let Some(r) = self.workload.next_record()? else {
            self.exhausted = true;
            return Ok(None);
        };
        let (offset_bytes, size_bytes) = self.fold(&r);
        let time_ns = match self.mode {
            DriverMode::OpenLoop { speed } => {
                let first = *self.first_time_ns.get_or_insert(r.time_ns);
                let t = if r.time_ns >= first {
                    ((r.time_ns - first) as f64 / speed).round() as TimeNs
                } else {
                    0
                };
                if t < self.last_arrival_ns {
                    self.retimed += 1;
                }
                let t = t.max(self.last_arrival_ns);
                self.last_arrival_ns = t;
                t
            }
            DriverMode::ClosedLoop { .. } => now_ns,
        };
        if let Some(d) = self.stop.duration_ns {
            if time_ns >= d {
                self.exhausted = true;
                return Ok(None);
            }
        }
        Ok(Some(Arrival {
            time_ns,
            op: r.op,
            offset_bytes,
            size_bytes,
            thread: 0,
        }))
    }

    /// The earliest time this tenant wants to issue an IO, given the cap.
    pub fn next_issue_ns(&mut self, now_ns: TimeNs) -> tierlab_trace::Result<Option<TimeNs>> {
        if let DriverMode::ClosedLoop { iodepth } = self.mode {
            if self.outstanding >= iodepth {
                return Ok(None);
            }
        }
        if self.pending.is_empty() {
            match self.pull(now_ns)? {
                Some(a) => self.pending.push_back(a),
                None => return Ok(None),
            }
        }
        let want = self.pending.front().map(|a| a.time_ns).unwrap_or(now_ns);
        let at = if self.threads.is_empty() {
            self.cap_delay(want)
        } else {
            // The earliest of the free threads (closed loop: `want` ≤ now,
            // and `issue` asks at now).
            let want = want.max(now_ns);
            match (0..self.threads.len())
                .filter(|&i| !self.threads[i].busy)
                .map(|i| self.thread_delay(i, want))
                .min()
            {
                Some(at) => at,
                None => return Ok(None),
            }
        };
        if self.stop.duration_ns.is_some_and(|d| at >= d) {
            // Held by the cap past the end: the run is over for this tenant.
            self.pending.clear();
            self.exhausted = true;
            return Ok(None);
        }
        Ok(Some(at))
    }

    /// The earliest time ≥ `t` at which the token bucket allows an IO.
    fn cap_delay(&self, t: TimeNs) -> TimeNs {
        self.bucket_delay(t, self.window_start_ns, self.window_ios, |cap| {
            cap.floor().max(1.0) as u64
        })
    }

    /// The earliest time ≥ `t` at which a per-second bucket whose window
    /// `window_start_ns` (shifted time) has seen `window_ios` allows an
    /// IO, `limit` turning the cap into IOs per window.
    fn bucket_delay(
        &self,
        t: TimeNs,
        window_start_ns: TimeNs,
        window_ios: u64,
        limit: impl Fn(f64) -> u64,
    ) -> TimeNs {
        let Some(cap) = self.iops_cap_at(t) else {
            return t;
        };
        // A fresh window has seen nothing.
        let fresh = self.window_of(t) > window_start_ns;
        let seen = if fresh { 0 } else { window_ios };
        let allows = |cap: f64| seen < limit(cap);
        if allows(cap) {
            return t;
        }
        // A schedule step later in this window may lift the cap; else the
        // next window (which a per-thread share of 0 may not allow either:
        // asked again then).
        let start = self.window_of(t);
        let end = start + NS_PER_S - self.window_shift_ns;
        self.iops_schedule
            .iter()
            .map(|(from, _)| *from)
            .filter(|from| *from > t && *from < end)
            .find(|from| self.iops_cap_at(*from).is_none_or(allows))
            .unwrap_or(end)
    }

    /// Thread `i`'s IOs per window under `PerThread` at `cap`.
    fn thread_share(&self, i: usize, cap: f64) -> u64 {
        let n = self.threads.len() as u64;
        let total = cap.floor().max(1.0) as u64;
        total / n + u64::from((i as u64) < total % n)
    }

    /// The earliest time ≥ `t` at which free thread `i` may issue.
    fn thread_delay(&self, i: usize, t: TimeNs) -> TimeNs {
        let th = &self.threads[i];
        match self.budget {
            IopsBudget::Shared => self.cap_delay(t),
            IopsBudget::PerThread => {
                self.bucket_delay(t, th.window_start_ns, th.window_ios, |cap| {
                    self.thread_share(i, cap)
                })
            }
            IopsBudget::Paced => {
                let Some(last) = th.last_issue_ns else {
                    return t;
                };
                let n = self.threads.len() as f64;
                // Allowed at s once s ≥ last + N / cap(s). The cap is
                // constant between schedule steps (a policy's cap changes
                // between calls): the first such stretch with a time that
                // qualifies gives it.
                let mut from = t;
                loop {
                    let until = self
                        .iops_schedule
                        .iter()
                        .map(|(s, _)| *s)
                        .find(|s| *s > from)
                        .unwrap_or(TimeNs::MAX);
                    let at = match self.iops_cap_at(from) {
                        None => from,
                        Some(cap) => from.max(last + (n / cap * NS_PER_S as f64).round() as TimeNs),
                    };
                    if at < until {
                        return at;
                    }
                    from = until;
                }
            }
        }
    }

    /// Takes the next IO to issue at `now_ns` (which `next_issue_ns` allowed).
    pub fn issue(&mut self, now_ns: TimeNs) -> Option<Arrival> {
        if self.pending.is_empty() {
            return None;
        }
        let thread = if self.threads.is_empty() {
            0
        } else {
            // The lowest-numbered free thread allowed now.
            let i = (0..self.threads.len())
                .find(|&i| !self.threads[i].busy && self.thread_delay(i, now_ns) <= now_ns)?;
            let window = self.window_of(now_ns);
            let th = &mut self.threads[i];
            if window != th.window_start_ns {
                th.window_start_ns = window;
                th.window_ios = 0;
            }
            th.window_ios += 1;
            th.last_issue_ns = Some(now_ns);
            th.busy = true;
            i as u32
        };
        let mut a = self.pending.pop_front()?;
        a.time_ns = now_ns;
        a.thread = thread;
        let window = self.window_of(now_ns);
        if window != self.window_start_ns {
            self.window_start_ns = window;
            self.window_ios = 0;
        }
        self.window_ios += 1;
        self.outstanding += 1;
        self.issued_ios += 1;
        self.issued_bytes += a.size_bytes as u64;
        Some(a)
    }

    /// An IO of `thread` (its `Arrival::thread`) completed.
    pub fn complete(&mut self, thread: u32) {
        if let Some(th) = self.threads.get_mut(thread as usize) {
            debug_assert!(th.busy, "thread {thread} completed an IO it never issued");
            th.busy = false;
        }
        self.outstanding -= 1;
        self.completed_ios += 1;
    }

    /// Nothing left to issue and nothing outstanding.
    pub fn finished(&self) -> bool {
        self.exhausted && self.pending.is_empty() && self.outstanding == 0
    }
}
