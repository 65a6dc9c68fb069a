//! The real executor's run loop (`tierlab run`): the same policy, tenants
//! and metrics as the simulator, driven by the wall clock over real
//! backing stores.
//!
//! One thread owns the stack (`Core`, core.rs: the data path shared with
//! `tierlab serve`). It issues host IOs when their tenant allows (open loop
//! at trace time / speed, closed loop at an iodepth), fires the policy's
//! timers when they are due, and sleeps in the IO engine (engine.rs:
//! io_uring, threads or inline) until the next completion or deadline.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use tierlab_core::metrics::{MetricsConfig, Recorder};
use tierlab_core::{NS_PER_S, Op, TimeNs};
use tierlab_sim::Tenant;
use tierlab_sim::config::SimConfig;

use crate::datapath::{Core, Finished, HostRequest};
use crate::engine::{EngineKind, Io, Waiting};
use crate::error::{DataPathError, RunError};
use crate::verify::{self, SECTOR, Verifier};

pub use crate::open::{build_real_policy, build_stack, open_backends, open_device};

/// Options of a real run (command-line flags; the config is `tierlab sim`'s).
#[derive(Clone, Debug)]
pub struct RealOptions {
    /// Stamp every written sector and check every read, then read back
    /// every written sector at the end.
    pub verify: bool,
    /// Device IOs in service at once (threads or io_uring slots); 0 does
    /// each IO inline on the executor's thread.
    pub io_threads: usize,
    /// io_uring, threads, or io_uring where the kernel allows it.
    pub io_engine: EngineKind,
    /// io_uring: µs to poll for a completion, yielding the CPU between
    /// looks, before sleeping (`Io::poll_before_sleep`); 0 sleeps at once.
    pub wait_poll_us: u32,
    /// After the workload: wait at most this long for the policy's timers
    /// and background IO (flushes, moves) to finish.
    pub drain_s: f64,
    /// Set (e.g. by a SIGINT/SIGTERM handler) to stop issuing the
    /// workload: IOs in flight finish, the policy writes its dirty data
    /// back, every store is synced and the result says `interrupted`.
    pub stop: Option<Arc<AtomicBool>>,
}

/// `RealOptions::wait_poll_us` unless set: longer than a fast device's
/// IO (tmpfs, NVMe: 5–20 µs), so a QD1 run on one rarely sleeps; short
/// enough that a slow device's wait costs little CPU (50 µs of a 5 ms
/// disk IO is 1 %).
pub const WAIT_POLL_US_DEFAULT: u32 = 50;

/// The longest `wait_poll_us` accepted (10 ms: past that a wait is
/// better slept).
pub const WAIT_POLL_US_MAX: u32 = 10_000;

impl Default for RealOptions {
    fn default() -> Self {
        RealOptions {
            verify: false,
            io_threads: 16,
            io_engine: EngineKind::Auto,
            wait_poll_us: WAIT_POLL_US_DEFAULT,
            drain_s: 30.0,
            stop: None,
        }
    }
}

/// What the real run adds to summary.json (`real`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RealInfo {
    /// Per device: what backs it ("file /x (O_DIRECT)", "ram (N bytes)").
    pub backends: Vec<String>,
    /// Per device: IOs that could not use O_DIRECT (misaligned) and went buffered.
    pub unaligned_ios: Vec<u64>,
    pub io_threads: usize,
    /// What ran the IOs: "io_uring (…)", "threads (…)" (and why, when
    /// io_uring was wanted but unavailable), or "inline".
    pub io_engine: String,
    pub verify: bool,
    /// Sectors whose content was checked (reads during the run + final scan).
    pub sectors_verified: u64,
    /// Sectors read that were never written in this run (not checkable).
    pub sectors_unverified: u64,
    /// Sectors read back by the final scan.
    pub final_scan_sectors: u64,
    /// Host IOs held back because they overlapped a write in flight (verify mode).
    pub ios_held_for_ordering: u64,
    /// Open loop: host IOs issued more than 1 ms after their due time.
    pub late_issues: u64,
    /// Timers still pending when the drain time ran out.
    pub timers_pending_at_end: u64,
    /// The run was stopped (`RealOptions::stop`, SIGINT/SIGTERM) before
    /// its workload ended.
    pub interrupted: bool,
    /// Seconds the policy took, after the workload, to write every byte
    /// only its fast tier held back to the backing device (`Policy::drain`);
    /// then every backing store was fdatasync'ed.
    pub write_back_s: f64,
    /// The policy's counters once that write-back ended (`run`'s
    /// `policy_counters` stop at the end of the workload): what the drain
    /// itself did, e.g. the cache's `drain_abandoned_pages`.
    pub policy_counters_after_drain: serde_json::Map<String, serde_json::Value>,
    /// Device IOs that failed and the policy survived (it failed the host
    /// IOs that needed them); the first ones in words.
    pub device_errors: u64,
    pub device_error_messages: Vec<String>,
    /// Host IOs answered with an error (EIO, ENOSPC) instead of data.
    pub host_ios_failed: u64,
}

/// A real run's result: what the simulator's run gives, plus `RealInfo`.
pub struct RealResult {
    pub run: tierlab_sim::run::RunResult,
    pub real: RealInfo,
}

/// The run driver: tenants and verification over the shared data path.
struct Exec {
    core: Core,
    tenants: Vec<Tenant>,
    verifier: Option<Verifier>,
    /// Verify mode: host IOs waiting because they overlap a write in flight.
    held: VecDeque<(u32, tierlab_sim::Arrival)>,
    /// Host IO id → the tenant thread that issued it (`Arrival::thread`),
    /// handed back to the tenant on completion.
    threads: HashMap<u64, u32>,
    info: RealInfo,
    host_ios: u64,
    stop: Option<Arc<AtomicBool>>,
    /// Host IO buffers back from finished IOs, for the next ones (the
    /// hot loop allocates none).
    spare_bufs: Vec<Vec<u8>>,
}

/// Spare host buffers kept at most (more than any iodepth needs).
const SPARE_BUFS_MAX: usize = 4096;

/// `Finished::user` of a final-scan read (a write's is its stamp version).
const SCAN: u64 = 1;

impl Exec {
    fn now_ns(&self) -> TimeNs {
        self.core.now_ns()
    }

    fn fail(&self, message: String) -> RunError {
        RunError::Policy {
            policy: self.core.policy.name().to_string(),
            message,
        }
    }

    /// Carries out what the stack finished: caps, verification, tenants.
    fn settle(&mut self) -> Result<(), RunError> {
        for (tenant, iops) in std::mem::take(&mut self.core.caps) {
            // As in simulation: a cap for a tenant that does not exist is
            // the policy's bug, not something to ignore.
            let n = self.tenants.len();
            let Some(t) = self.tenants.get_mut(tenant as usize) else {
                return Err(self.fail(format!(
                    "cap for tenant {tenant}, but there are {n} tenants"
                )));
            };
            t.set_iops_cap(iops);
        }
        while let Some(f) = self.core.finished.pop_front() {
            self.host_done(f)?;
        }
        Ok(())
    }

    fn host_done(&mut self, h: Finished) -> Result<(), RunError> {
        let first = h.offset_bytes / SECTOR;
        let n = (h.size_bytes as u64).div_ceil(SECTOR);
        let version = h.user;
        if let Some(v) = &mut self.verifier {
            match h.op {
                // A failed write or trim leaves its range undefined (old
                // bytes, new, or a mix): nothing to check there any more.
                Op::Write | Op::Trim if h.error.is_some() => v.trimmed(first, n),
                Op::Read if h.error.is_some() => {}
                Op::Write => v.written(first, n, version),
                Op::Trim => v.trimmed(first, n),
                Op::Read => {
                    v.check(&h.buf, first)
                        .map_err(|mismatch| RunError::Verification {
                            policy: self.core.policy.name().to_string(),
                            mismatch,
                        })?;
                    if !h.record && h.user == SCAN {
                        self.info.final_scan_sectors += n;
                    }
                }
                Op::Flush => {}
            }
        }
        if h.record {
            // Only per-thread budgets hand out threads other than 0.
            let thread = if self.threads.is_empty() {
                0
            } else {
                self.threads.remove(&h.id).unwrap_or(0)
            };
            self.tenants[h.tenant as usize].complete(thread);
        }
        if self.spare_bufs.len() < SPARE_BUFS_MAX && h.buf.capacity() > 0 {
            self.spare_bufs.push(h.buf);
        }
        Ok(())
    }

    /// A zeroed host buffer of `size` bytes, reused when one is spare
    /// (zeroed all the same: a write without --verify writes zeros, as a
    /// fresh buffer would).
    fn host_buf(&mut self, size: usize) -> Vec<u8> {
        match self.spare_bufs.pop() {
            Some(mut b) => {
                b.clear();
                b.resize(size, 0);
                b
            }
            None => vec![0u8; size],
        }
    }

    fn issue(
        &mut self,
        now: TimeNs,
        tenant: u32,
        a: tierlab_sim::Arrival,
        scan: bool,
    ) -> Result<(), RunError> {
        let size = a.size_bytes as usize;
        let mut version = 0;
        let buf = match a.op {
            Op::Write => {
                let mut b = self.host_buf(size);
                if let Some(v) = &mut self.verifier {
                    version = v.next_version();
                    verify::stamp(&mut b, a.offset_bytes / SECTOR, version);
                }
                b
            }
            Op::Read => self.host_buf(size),
            _ => Vec::new(),
        };
        if !scan {
            self.host_ios += 1;
        }
        let id = self
            .core
            .issue(
                now,
                HostRequest {
                    op: a.op,
                    offset_bytes: a.offset_bytes,
                    size_bytes: a.size_bytes,
                    tenant,
                    buf,
                    user: if scan { SCAN } else { version },
                    record: !scan,
                },
            )
            .map_err(RunError::DataPath)?;
        // Thread 0 is what a completion gets back without an entry: no map
        // work per IO unless a tenant's budget is per thread.
        if !scan && a.thread != 0 {
            self.threads.insert(id, a.thread);
        }
        self.settle()
    }

    /// Issues what is due; returns the next issue time, if any.
    fn issue_due(&mut self, now: TimeNs) -> Result<Option<TimeNs>, RunError> {
        // Held IOs first, in order, while they no longer conflict.
        while let Some((t, a)) = self.held.front() {
            if self
                .core
                .conflicts(a.op, a.offset_bytes, a.size_bytes as u64)
            {
                break;
            }
            let (t, a) = (*t, *a);
            self.held.pop_front();
            self.issue(now, t, a, false)?;
        }
        let mut next: Option<TimeNs> = None;
        for i in 0..self.tenants.len() {
            while let Some(t) = self.tenants[i]
                .next_issue_ns(now)
                .map_err(RunError::Trace)?
            {
                if t > now {
                    next = Some(next.map_or(t, |n: TimeNs| n.min(t)));
                    break;
                }
                if now - t > 1_000_000 {
                    self.info.late_issues += 1;
                }
                let Some(a) = self.tenants[i].issue(now) else {
                    break;
                };
                let align = self.core.policy.required_alignment_bytes().max(1);
                if a.offset_bytes % align != 0 || a.size_bytes as u64 % align != 0 {
                    return Err(RunError::Unaligned {
                        policy: self.core.policy.name().to_string(),
                        align_bytes: align,
                        tenant: i,
                        size_bytes: a.size_bytes,
                        offset_bytes: a.offset_bytes,
                    });
                }
                if self.verifier.is_some() {
                    if a.offset_bytes % SECTOR != 0 || a.size_bytes as u64 % SECTOR != 0 {
                        return Err(RunError::VerifyUnaligned {
                            tenant: i,
                            size_bytes: a.size_bytes,
                            offset_bytes: a.offset_bytes,
                        });
                    }
                    if !self.held.is_empty()
                        || self
                            .core
                            .conflicts(a.op, a.offset_bytes, a.size_bytes as u64)
                    {
                        self.info.ios_held_for_ordering += 1;
                        self.held.push_back((i as u32, a));
                        continue;
                    }
                }
                self.issue(now, i as u32, a, false)?;
            }
        }
        Ok(next)
    }

    /// Runs until the workload is done and the stack is quiet (or the
    /// drain deadline passes with only timers left).
    fn run_loop(&mut self, drain_ns: TimeNs, workload: bool) -> Result<TimeNs, RunError> {
        let mut drain_until: Option<TimeNs> = None;
        let mut workload = workload;
        loop {
            let now = self.now_ns().max(self.core.recorder.now_ns());
            if workload
                && self
                    .stop
                    .as_ref()
                    .is_some_and(|s| s.load(Ordering::Relaxed))
            {
                // Stop issuing; what is in flight (and held) finishes.
                self.info.interrupted = true;
                self.held.clear();
                workload = false;
            }
            self.core.sample(now);
            let next_issue = if workload { self.issue_due(now)? } else { None };
            let next_timer = self.core.fire_timers(now).map_err(RunError::DataPath)?;
            self.settle()?;
            // Completions that are already there; each may free a tenant
            // slot or trigger policy work, so go round again right away.
            if self.core.poll_completions().map_err(RunError::DataPath)? {
                self.settle()?;
                continue;
            }
            let tenants_done =
                !workload || self.tenants.iter().all(|t| t.finished()) && self.held.is_empty();
            let busy = self.core.busy();
            if tenants_done && !busy {
                if self.core.timers_pending() == 0 {
                    return Ok(now);
                }
                let until = *drain_until.get_or_insert(now + drain_ns);
                if next_timer.is_some_and(|t| t > until) {
                    self.info.timers_pending_at_end = self.core.timers_pending() as u64;
                    return Ok(now);
                }
            }
            let deadline = [next_issue, next_timer, self.core.next_model_event_ns()]
                .into_iter()
                .flatten()
                .min();
            let wait = match deadline {
                Some(t) if t <= now => Duration::ZERO,
                // A stop request is noticed within 100 ms.
                Some(t) if self.stop.is_some() => {
                    Duration::from_nanos(t - now).min(Duration::from_millis(100))
                }
                Some(t) => Duration::from_nanos(t - now),
                // A completion wakes us (however long it takes); held IOs
                // wait for one.
                None if busy => Duration::MAX,
                None if !self.held.is_empty() => Duration::ZERO,
                None if !tenants_done => Duration::from_millis(1),
                None => Duration::ZERO,
            };
            if wait.is_zero() {
                // Round again without sleeping: what was queued goes to
                // the kernel now (`wait` would have taken it).
                self.core
                    .io
                    .submit_pending()
                    .map_err(DataPathError::Engine)?;
                continue;
            }
            if self.core.wait(wait).map_err(RunError::DataPath)? {
                self.settle()?;
            }
        }
    }

    /// `Policy::drain`, until the policy holds no data its backing device
    /// lacks and nothing is in flight.
    fn write_back(&mut self) -> Result<(), RunError> {
        let now = self.now_ns();
        self.core.drain(now).map_err(RunError::DataPath)?;
        loop {
            self.settle()?;
            if self.core.drained() {
                return Ok(());
            }
            let now = self.now_ns();
            let next_timer = self.core.fire_timers(now).map_err(RunError::DataPath)?;
            self.settle()?;
            if self.core.poll_completions().map_err(RunError::DataPath)? {
                self.settle()?;
                continue;
            }
            if !self.core.busy() && next_timer.is_none() && !self.core.drained() {
                return Err(RunError::DrainStalled {
                    policy: self.core.policy.name().to_string(),
                });
            }
            let wait = next_timer
                .map(|t| Duration::from_nanos(t.saturating_sub(now)))
                .unwrap_or(Duration::from_millis(100))
                .min(Duration::from_millis(100));
            if self.core.wait(wait).map_err(RunError::DataPath)? {
                self.settle()?;
            }
        }
    }

    /// Verify mode: reads every written sector back through the policy.
    fn final_scan(&mut self, drain_ns: TimeNs) -> Result<(), RunError> {
        let runs = self
            .verifier
            .as_ref()
            .map(|v| v.written_runs(256))
            .unwrap_or_default();
        const DEPTH: usize = 16;
        let mut next = 0;
        while next < runs.len() || self.core.host_in_flight() > 0 {
            let now = self.now_ns().max(self.core.recorder.now_ns());
            while next < runs.len() && self.core.host_in_flight() < DEPTH {
                let (a, e) = runs[next];
                next += 1;
                let arrival = tierlab_sim::Arrival {
                    time_ns: now,
                    op: Op::Read,
                    offset_bytes: a * SECTOR,
                    size_bytes: ((e - a) * SECTOR) as u32,
                    thread: 0,
                };
                self.issue(now, 0, arrival, true)?;
            }
            self.core.fire_timers(now).map_err(RunError::DataPath)?;
            self.settle()?;
            if self.core.poll_completions().map_err(RunError::DataPath)? {
                self.settle()?;
                continue;
            }
            if self.core.host_in_flight() == 0 && next >= runs.len() {
                break;
            }
            let deadline = Duration::from_secs(SCAN_STALL_S);
            let started = std::time::Instant::now();
            let mut progressed = false;
            while !progressed && started.elapsed() < deadline {
                progressed = self
                    .core
                    .wait(Duration::from_millis(100))
                    .map_err(RunError::DataPath)?
                    || self.core.poll_completions().map_err(RunError::DataPath)?;
            }
            if !progressed {
                return Err(RunError::ScanStalled {
                    waited_s: SCAN_STALL_S,
                });
            }
            self.settle()?;
        }
        self.run_loop(drain_ns, false)?;
        Ok(())
    }
}

/// The final scan gives up when no read completes for this long: the
/// stack is stuck, and the error says so rather than hanging the run.
const SCAN_STALL_S: u64 = 60;

/// Runs `config` for real. Relative paths resolve against `base_dir`.
pub fn run(
    config: &SimConfig,
    base_dir: &Path,
    opts: &RealOptions,
) -> Result<RealResult, RunError> {
    if !(opts.drain_s.is_finite() && opts.drain_s >= 0.0) {
        return Err(RunError::Option {
            option: "drain_s",
            found: opts.drain_s.to_string(),
            expected: "a number of seconds >= 0",
        });
    }
    if opts.wait_poll_us > WAIT_POLL_US_MAX {
        return Err(RunError::Option {
            option: "wait_poll_us",
            found: opts.wait_poll_us.to_string(),
            expected: "0 to 10000 µs",
        });
    }
    let backends = open_backends(&config.devices, base_dir).map_err(RunError::Backends)?;
    let (policy, tenants) = build_stack(config, base_dir, &backends)?;
    let names = tierlab_stack::device_names(&config.devices);
    let interval_ns = (config.output.interval_s * NS_PER_S as f64).round() as u64;
    let recorder = Recorder::new(MetricsConfig {
        interval_ns,
        device_names: names.clone(),
        tier_names: policy.tier_names(),
        tenants: config.tenants.len(),
        timeline: config.output.timeline,
        ..MetricsConfig::default()
    })
    .map_err(RunError::Output)?;
    let info = RealInfo {
        backends: backends.iter().map(|b| b.describe()).collect(),
        io_threads: opts.io_threads,
        verify: opts.verify,
        ..Default::default()
    };
    let backends = Arc::new(backends);
    // This thread makes and drives the engine, sleeping in `wait`.
    let mut io = Io::new(
        Arc::clone(&backends),
        opts.io_engine,
        opts.io_threads,
        Waiting::InWait,
    )
    .map_err(RunError::Engine)?;
    io.poll_before_sleep(Duration::from_micros(opts.wait_poll_us.into()));
    let info = RealInfo {
        io_engine: io.description.clone(),
        ..info
    };
    let mut core = Core::new(policy, backends, names, io, recorder, interval_ns);
    // Recover the policy's persistent state from the stores (or format).
    core.open_policy()?;
    let mut exec = Exec {
        core,
        tenants,
        verifier: opts.verify.then(Verifier::new),
        held: VecDeque::new(),
        threads: HashMap::new(),
        info,
        host_ios: 0,
        stop: opts.stop.clone(),
        spare_bufs: Vec::new(),
    };
    let drain_ns = (opts.drain_s * NS_PER_S as f64) as TimeNs;
    let end_ns = match exec.run_loop(drain_ns, true) {
        Ok(t) => t,
        Err(e) => {
            exec.core.abandon();
            return Err(e);
        }
    };
    exec.core.sample(end_ns);
    let tenants = exec
        .tenants
        .iter()
        .map(tierlab_sim::run::TenantReport::from)
        .collect();
    // Counters and metrics up to the end of the workload (the final
    // verification scan is not part of the run).
    let warnings = exec
        .tenants
        .iter()
        .filter_map(|t| t.quantized_warning())
        .collect();
    let result = exec
        .core
        .result(end_ns, config.seed, exec.host_ios, tenants, warnings);
    exec.core.recording = false;
    // The end of every run: the policy writes back what only its fast tier
    // holds, so the backing device alone has every acknowledged write...
    let started = std::time::Instant::now();
    exec.write_back()?;
    exec.info.write_back_s = started.elapsed().as_secs_f64();
    exec.info.policy_counters_after_drain = exec
        .core
        .policy
        .counters()
        .into_iter()
        .map(|(k, v)| (k.to_string(), tierlab_sim::run::counter_value(v)))
        .collect();
    if opts.verify {
        // ...which the final scan reads back through the policy.
        exec.final_scan(drain_ns)?;
    }
    // And every store is made durable, whatever the options. A store
    // whose IOs already failed (and the policy survived them) may fail
    // this too: counted with the rest, not an end to the run.
    for (d, b) in exec.core.backends.iter().enumerate() {
        if let Err(source) = b.flush() {
            let e = RunError::FinalSync {
                device: exec.core.names[d].clone(),
                backend: b.describe(),
                source,
            };
            if exec.core.device_errors == 0 {
                return Err(e);
            }
            exec.core.device_errors += 1;
            exec.core.device_error_messages.push(e.to_string());
        }
    }
    exec.info.device_errors = exec.core.device_errors;
    exec.info.device_error_messages = exec.core.device_error_messages.clone();
    exec.info.host_ios_failed = exec.core.host_ios_failed;
    if let Some(v) = &exec.verifier {
        exec.info.sectors_verified = v.sectors_checked;
        exec.info.sectors_unverified = v.sectors_unverified;
    }
    exec.info.unaligned_ios = exec
        .core
        .backends
        .iter()
        .map(|b| b.unaligned_ios())
        .collect();
    Ok(RealResult {
        run: result,
        real: exec.info.clone(),
    })
}

/// Writes the same files as `tierlab sim`, plus `real` in summary.json.
pub fn write_outputs(result: &RealResult, dir: &Path) -> std::io::Result<()> {
    tierlab_sim::run::write_outputs(&result.run, dir)?;
    let path = dir.join("summary.json");
    let mut summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    summary["real"] = serde_json::to_value(&result.real)?;
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
}
