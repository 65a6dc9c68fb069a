//! The real executor's loop: the same policy, tenants and metrics as the
//! simulator, driven by the wall clock over real backing stores.
//!
//! One thread owns the policy. It issues host IOs when their tenant allows
//! (open loop at trace time / speed, closed loop at an iodepth), fires the
//! policy's timers when they are due, and hands device IOs to the IO
//! engine (engine.rs: io_uring, threads or inline); it sleeps in the
//! engine until the next completion or deadline. Data moves as the policy
//! describes it (`Outbox::data_for`): a device write copies its bytes out
//! of a host or staging buffer when submitted, a device read copies them
//! in when it completes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::metrics::{MetricsConfig, Recorder};
use tierlab_core::policy::{Action, BufRef, HostIo, Outbox, Policy};
use tierlab_core::{Completion as SimCompletion, DeviceIo, NS_PER_S, Op, TimeNs};
use tierlab_sim::config::SimConfig;
use tierlab_sim::run::counter_value;
use tierlab_sim::{RunOutcome, Tenant};

use crate::backend::{Backend, FileBackend, RamBackend};
use crate::engine::{EngineKind, Io};
use crate::pool::{Completion, Request};
use crate::verify::{self, SECTOR, Verifier};

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
    /// After the workload: wait at most this long for the policy's timers
    /// and background IO (flushes, moves) to finish.
    pub drain_s: f64,
}

impl Default for RealOptions {
    fn default() -> Self {
        RealOptions {
            verify: false,
            io_threads: 16,
            io_engine: EngineKind::Auto,
            drain_s: 30.0,
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
}

/// A device as the policy builder sees it: only its capacity matters.
struct Shell {
    capacity_bytes: u64,
}

impl DeviceModel for Shell {
    fn submit(&mut self, _now_ns: TimeNs, _io: DeviceIo) {
        unreachable!("the real executor never submits to a model")
    }
    fn next_event_ns(&self) -> Option<TimeNs> {
        None
    }
    fn advance(&mut self, _now_ns: TimeNs, _done: &mut Vec<SimCompletion>) {}
    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
    fn state(&self) -> DeviceState {
        DeviceState::Idle
    }
    fn in_flight(&self) -> usize {
        0
    }
}

/// `at.key` as a byte count (an integer or "64MiB"); `at` names the table
/// in errors (`devices[0]`, `devices[0].members[2]`).
pub(crate) fn toml_u64(t: &toml::Table, key: &str, at: &str) -> Result<Option<u64>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Integer(n)) if *n > 0 => Ok(Some(*n as u64)),
        Some(toml::Value::String(s)) => tierlab_trace::units::parse_size_bytes(s)
            .map(Some)
            .map_err(|e| format!("key `{at}.{key}`: {e}")),
        Some(v) => Err(format!(
            "key `{at}.{key}`: {v} is not a positive byte count"
        )),
    }
}

fn toml_bool(t: &toml::Table, key: &str, at: &str, default: bool) -> Result<bool, String> {
    match t.get(key) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(v) => Err(format!("key `{at}.{key}`: {v} is not true or false")),
    }
}

/// Opens the backing store of each `[[devices]]` table: `path = "FILE or
/// /dev/X"` (with optional `capacity_bytes`, `create`, `direct`) or
/// `path = "ram"` with `capacity_bytes`; or `model = "raid"` over member
/// backing stores (raid.rs).
pub fn open_backends(config: &SimConfig, base_dir: &Path) -> Result<Vec<Box<dyn Backend>>, String> {
    let mut out: Vec<Box<dyn Backend>> = Vec::new();
    for (i, d) in config.devices.iter().enumerate() {
        out.push(open_device(d, &format!("devices[{i}]"), base_dir)?);
    }
    if out.is_empty() {
        return Err("key `devices`: no device".into());
    }
    Ok(out)
}

/// Opens one device table (`at` names it in errors); a RAID opens its
/// members through this too.
pub fn open_device(d: &toml::Table, at: &str, base_dir: &Path) -> Result<Box<dyn Backend>, String> {
    if d.get("model").and_then(|m| m.as_str()) == Some("raid") {
        return Ok(Box::new(crate::raid::open(d, at, base_dir)?));
    }
    for k in d.keys() {
        let own = k == "name" || k == "capacity_bytes";
        if !own && !tierlab_sim::run::REAL_DEVICE_KEYS.contains(&k.as_str()) {
            return Err(format!(
                "key `{at}.{k}`: not a real-device key; a real device takes \
                 name, path, capacity_bytes, create, direct, or is model = \"raid\" \
                 over such members (other models and presets are for `tierlab sim`)"
            ));
        }
    }
    let path = match d.get("path") {
        Some(toml::Value::String(p)) => p.clone(),
        _ => {
            return Err(format!(
                "key `{at}.path`: missing; give a file, a block device, or \"ram\""
            ));
        }
    };
    let capacity = toml_u64(d, "capacity_bytes", at)?;
    if path == "ram" {
        let c = capacity
            .ok_or_else(|| format!("key `{at}.capacity_bytes`: a ram device needs its size"))?;
        return Ok(Box::new(RamBackend::new(c)));
    }
    let p = PathBuf::from(&path);
    let p = if p.is_absolute() { p } else { base_dir.join(p) };
    let create = toml_bool(d, "create", at, false)?;
    let direct = toml_bool(d, "direct", at, true)?;
    Ok(Box::new(
        FileBackend::open(&p, capacity, create, direct).map_err(|e| format!("key `{at}`: {e}"))?,
    ))
}

/// Builds the policy and tenants from a config whose devices are real.
pub fn build_stack(
    config: &SimConfig,
    base_dir: &Path,
    backends: &[Box<dyn Backend>],
) -> Result<(Box<dyn Policy>, Vec<Tenant>), String> {
    let index = std::cell::Cell::new(0usize);
    let shells = |_: &toml::Table, _seed: u64| -> Result<Box<dyn DeviceModel>, String> {
        let i = index.get();
        index.set(i + 1);
        Ok(Box::new(Shell {
            capacity_bytes: backends[i].capacity_bytes(),
        }))
    };
    let sim = tierlab_sim::build::build(config, base_dir, &shells).map_err(|e| e.to_string())?;
    let (policy, _, tenants) = sim.into_parts();
    if !policy.moves_data() {
        return Err(format!(
            "policy `{}` does not describe its data movement yet, so it cannot run on real \
             devices; policies that can: passthrough, linear, cache, flashcache, atsmf, hswd (docs/real.md)",
            policy.name()
        ));
    }
    Ok((policy, tenants))
}

struct Host {
    arrival_ns: TimeNs,
    op: Op,
    offset_bytes: u64,
    size_bytes: u32,
    tenant: u32,
    buf: Vec<u8>,
    version: u64,
    /// Final-scan reads are not recorded in the metrics.
    scan: bool,
}

struct DeviceInFlight {
    policy_tag: u64,
    submit_ns: TimeNs,
    op: Op,
    size_bytes: u32,
    target: Option<BufRef>,
}

/// A real run's result: what the simulator's run gives, plus `RealInfo`.
pub struct RealResult {
    pub run: tierlab_sim::run::RunResult,
    pub real: RealInfo,
}

struct Exec {
    policy: Box<dyn Policy>,
    tenants: Vec<Tenant>,
    backends: Arc<Vec<Box<dyn Backend>>>,
    names: Vec<String>,
    io: Io,
    start: Instant,
    /// The latest time any policy call was given (`policy_time`).
    policy_clock_ns: TimeNs,
    out: Outbox,
    host: HashMap<u64, Host>,
    next_host_id: u64,
    staging: HashMap<u64, Vec<u8>>,
    devices: HashMap<u64, (usize, DeviceInFlight)>,
    next_device_tag: u64,
    in_flight: Vec<u32>,
    timers: BinaryHeap<Reverse<(TimeNs, u64, u64)>>,
    timer_seq: u64,
    recorder: Recorder,
    verifier: Option<Verifier>,
    /// Verify mode: host IOs waiting because they overlap a write in flight.
    held: VecDeque<(u32, tierlab_sim::Arrival)>,
    info: RealInfo,
    host_ios: u64,
    events: u64,
    counter_interval_ns: TimeNs,
    next_sample_ns: TimeNs,
    counter_samples: Vec<(TimeNs, Vec<f64>)>,
    recording: bool,
}

impl Exec {
    fn now_ns(&self) -> TimeNs {
        self.start.elapsed().as_nanos() as TimeNs
    }

    /// The time a policy call is given: never before the previous call's.
    /// (Wall-clock stamps come from different places — a completion's
    /// reap time, an IO's entry, the loop's wake-up — and can be out of
    /// order by microseconds; a policy must never see time go back.)
    fn policy_time(&mut self, t: TimeNs) -> TimeNs {
        self.policy_clock_ns = self.policy_clock_ns.max(t);
        self.policy_clock_ns
    }

    fn fail(&self, msg: String) -> String {
        format!("{} (policy {})", msg, self.policy.name())
    }

    fn apply(&mut self, now: TimeNs) -> Result<(), String> {
        let mut out = std::mem::take(&mut self.out);
        for &(d, io) in &out.device_ios {
            let Some(backend) = self.backends.get(d) else {
                return Err(self.fail(format!(
                    "an IO for device {d}; the stack has {}",
                    self.backends.len()
                )));
            };
            if io.end_bytes() > backend.capacity_bytes() {
                return Err(self.fail(format!(
                    "IO [{}, {}) is beyond the end of device {} ({}, {} bytes)",
                    io.offset_bytes,
                    io.end_bytes(),
                    self.names[d],
                    backend.describe(),
                    backend.capacity_bytes()
                )));
            }
            let target = out
                .data
                .iter()
                .find(|(dd, t, _)| *dd == d && *t == io.tag)
                .map(|x| x.2);
            let len = io.size_bytes as usize;
            let data = match io.op {
                Op::Write => {
                    let src = target.ok_or_else(|| {
                        self.fail(format!(
                            "a write of {len} bytes to device {} without saying where its data comes from",
                            self.names[d]
                        ))
                    })?;
                    self.copy_out(src, len)?
                }
                Op::Read => vec![0u8; len],
                Op::Trim | Op::Flush => Vec::new(),
            };
            let tag = self.next_device_tag;
            self.next_device_tag += 1;
            self.devices.insert(
                tag,
                (
                    d,
                    DeviceInFlight {
                        policy_tag: io.tag,
                        submit_ns: now,
                        op: io.op,
                        size_bytes: io.size_bytes,
                        target,
                    },
                ),
            );
            self.in_flight[d] += 1;
            if self.recording {
                self.recorder.device_submit(d, now);
            }
            if self.in_flight[d] == 1 && self.recording {
                let state = if io.op == Op::Read {
                    DeviceState::Read
                } else {
                    DeviceState::Write
                };
                self.recorder.device_state(d, now, state);
            }
            let r = Request {
                device: d,
                tag,
                op: io.op,
                offset_bytes: io.offset_bytes,
                data,
            };
            self.io.submit(r)?;
        }
        for &(id, tier) in &out.complete {
            self.host_done(now, id, tier)?;
        }
        for &(t, id) in &out.timers {
            self.timer_seq += 1;
            self.timers.push(Reverse((t.max(now), self.timer_seq, id)));
        }
        for a in &out.actions {
            match a {
                Action::CapTenant { tenant, iops } => {
                    // As in simulation: a cap for a tenant that does not
                    // exist is the policy's bug, not something to ignore.
                    let n = self.tenants.len();
                    let Some(t) = self.tenants.get_mut(*tenant as usize) else {
                        return Err(self.fail(format!(
                            "cap for tenant {tenant}, but there are {n} tenants"
                        )));
                    };
                    t.set_iops_cap(*iops);
                }
            }
        }
        for id in &out.release {
            self.staging.remove(id);
        }
        out.clear();
        self.out = out;
        Ok(())
    }

    /// The bytes a device write takes from `src`.
    fn copy_out(&self, src: BufRef, len: usize) -> Result<Vec<u8>, String> {
        let (buf, off, what) = match src {
            BufRef::Host {
                host_id,
                offset_bytes,
            } => (
                self.host.get(&host_id).map(|h| &h.buf),
                offset_bytes,
                format!("host IO {host_id}"),
            ),
            BufRef::Staging { id, offset_bytes } => (
                self.staging.get(&id),
                offset_bytes,
                format!("staging buffer {id}"),
            ),
            BufRef::Zeros => return Ok(vec![0u8; len]),
        };
        let buf =
            buf.ok_or_else(|| self.fail(format!("a write from {what}, which does not exist")))?;
        let off = off as usize;
        buf.get(off..off + len).map(|s| s.to_vec()).ok_or_else(|| {
            self.fail(format!(
                "a write of {len} bytes from {what} at offset {off}, which holds {} bytes",
                buf.len()
            ))
        })
    }

    fn copy_in(&mut self, dst: BufRef, data: &[u8]) -> Result<(), String> {
        match dst {
            BufRef::Host {
                host_id,
                offset_bytes,
            } => {
                let off = offset_bytes as usize;
                let name = self.policy.name().to_string();
                let h = self.host.get_mut(&host_id).ok_or_else(|| {
                    format!("a device read for host IO {host_id} landed after that IO completed (policy {name})")
                })?;
                let len = h.buf.len();
                h.buf
                    .get_mut(off..off + data.len())
                    .ok_or_else(|| {
                        format!(
                            "a device read of {} bytes into host IO {host_id} at offset {off}, which holds {len} (policy {name})",
                            data.len()
                        )
                    })?
                    .copy_from_slice(data);
            }
            BufRef::Staging { id, offset_bytes } => {
                let off = offset_bytes as usize;
                let b = self.staging.entry(id).or_default();
                if b.len() < off + data.len() {
                    b.resize(off + data.len(), 0);
                }
                b[off..off + data.len()].copy_from_slice(data);
            }
            BufRef::Zeros => {}
        }
        Ok(())
    }

    fn host_done(&mut self, now: TimeNs, id: u64, tier: u16) -> Result<(), String> {
        let h = self
            .host
            .remove(&id)
            .ok_or_else(|| self.fail(format!("host IO {id} completed twice or never issued")))?;
        let first = h.offset_bytes / SECTOR;
        let n = (h.size_bytes as u64).div_ceil(SECTOR);
        if let Some(v) = &mut self.verifier {
            match h.op {
                Op::Write => v.written(first, n, h.version),
                Op::Trim => v.trimmed(first, n),
                Op::Read => {
                    v.check(&h.buf, first)
                        .map_err(|m| format!("{m} (policy {})", self.policy.name()))?;
                    if h.scan {
                        self.info.final_scan_sectors += n;
                    }
                }
                Op::Flush => {}
            }
        }
        if !h.scan {
            if self.recording {
                self.recorder
                    .host_io(h.arrival_ns, now, h.op, h.size_bytes, tier, h.tenant);
            }
            self.tenants[h.tenant as usize].complete();
        }
        Ok(())
    }

    fn overlaps_write_in_flight(&self, a: &tierlab_sim::Arrival) -> bool {
        let (s, e) = (a.offset_bytes, a.offset_bytes + a.size_bytes as u64);
        self.host.values().any(|h| {
            let (hs, he) = (h.offset_bytes, h.offset_bytes + h.size_bytes as u64);
            s < he
                && hs < e
                && (h.op == Op::Write || a.op == Op::Write || h.op == Op::Trim || a.op == Op::Trim)
        })
    }

    fn issue(
        &mut self,
        now: TimeNs,
        tenant: u32,
        a: tierlab_sim::Arrival,
        scan: bool,
    ) -> Result<(), String> {
        // The IO enters the stack now, not when the loop woke up.
        let now = self.policy_time(self.now_ns().max(now));
        let id = self.next_host_id;
        self.next_host_id += 1;
        let size = a.size_bytes as usize;
        let mut version = 0;
        let buf = match a.op {
            Op::Write => {
                let mut b = vec![0u8; size];
                if let Some(v) = &mut self.verifier {
                    version = v.next_version();
                    verify::stamp(&mut b, a.offset_bytes / SECTOR, version);
                }
                b
            }
            Op::Read => vec![0u8; size],
            _ => Vec::new(),
        };
        self.host.insert(
            id,
            Host {
                arrival_ns: now,
                op: a.op,
                offset_bytes: a.offset_bytes,
                size_bytes: a.size_bytes,
                tenant,
                buf,
                version,
                scan,
            },
        );
        if !scan {
            self.host_ios += 1;
        }
        let io = HostIo {
            id,
            op: a.op,
            offset_bytes: a.offset_bytes,
            size_bytes: a.size_bytes,
            tenant,
        };
        self.policy.on_host_io(now, io, &mut self.out);
        self.apply(now)
    }

    /// Issues what is due; returns the next issue time, if any.
    fn issue_due(&mut self, now: TimeNs) -> Result<Option<TimeNs>, String> {
        // Held IOs first, in order, while they no longer conflict.
        while let Some((t, a)) = self.held.front() {
            if self.overlaps_write_in_flight(a) {
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
                .map_err(|e| e.to_string())?
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
                let align = self.policy.required_alignment_bytes().max(1);
                if a.offset_bytes % align != 0 || a.size_bytes as u64 % align != 0 {
                    return Err(format!(
                        "policy {} moves real data in units of {align} bytes; tenant {i} issued {} \
                         bytes at offset {}, which is not aligned (partial units are not \
                         read-modify-written yet)",
                        self.policy.name(),
                        a.size_bytes,
                        a.offset_bytes
                    ));
                }
                if self.verifier.is_some() {
                    if a.offset_bytes % SECTOR != 0 || a.size_bytes as u64 % SECTOR != 0 {
                        return Err(format!(
                            "verification needs 512-byte aligned IOs; tenant {i} issued {} bytes at offset {}",
                            a.size_bytes, a.offset_bytes
                        ));
                    }
                    if !self.held.is_empty() || self.overlaps_write_in_flight(&a) {
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

    fn device_done(&mut self, c: Completion) -> Result<(), String> {
        let now = (c.done.saturating_duration_since(self.start)).as_nanos() as TimeNs;
        let now = self.policy_time(now.max(self.recorder.now_ns()));
        let (d, dev) = self
            .devices
            .remove(&c.tag)
            .expect("a completion for an IO the executor submitted");
        if let Err(e) = c.result {
            return Err(format!(
                "device {} ({}): {} of {} bytes at offset {} failed: {e}",
                self.names[d],
                self.backends[d].describe(),
                match c.op {
                    Op::Read => "read",
                    Op::Write => "write",
                    Op::Trim => "trim",
                    Op::Flush => "flush",
                },
                dev.size_bytes,
                c.offset_bytes
            ));
        }
        if c.op == Op::Read
            && let Some(t) = dev.target
        {
            self.copy_in(t, &c.data)?;
        }
        self.in_flight[d] -= 1;
        if self.recording {
            self.recorder
                .device_complete(d, dev.submit_ns, now, dev.op, dev.size_bytes);
        }
        if self.in_flight[d] == 0 && self.recording {
            self.recorder.device_state(d, now, DeviceState::Idle);
        }
        self.events += 1;
        self.policy
            .on_device_completion(now, d, dev.policy_tag, &mut self.out);
        self.apply(now)
    }

    fn fire_timers(&mut self, now: TimeNs) -> Result<Option<TimeNs>, String> {
        let now = self.policy_time(now);
        while let Some(Reverse((t, _, id))) = self.timers.peek().copied() {
            if t > now {
                return Ok(Some(t));
            }
            self.timers.pop();
            self.events += 1;
            self.policy.on_timer(now, id, &mut self.out);
            self.apply(now)?;
        }
        Ok(None)
    }

    fn sample(&mut self, now: TimeNs) {
        while self.counter_interval_ns > 0 && now >= self.next_sample_ns {
            let values = self.policy.counters().into_iter().map(|(_, v)| v).collect();
            self.counter_samples.push((self.next_sample_ns, values));
            self.next_sample_ns += self.counter_interval_ns;
        }
    }

    /// Runs until the workload is done and the stack is quiet (or the
    /// drain deadline passes with only timers left).
    fn run_loop(&mut self, drain_ns: TimeNs, workload: bool) -> Result<TimeNs, String> {
        let mut drain_until: Option<TimeNs> = None;
        loop {
            let now = self.now_ns().max(self.recorder.now_ns());
            self.sample(now);
            let next_issue = if workload { self.issue_due(now)? } else { None };
            let next_timer = self.fire_timers(now)?;
            // Completions that are already there; each may free a tenant
            // slot or trigger policy work, so go round again right away.
            let mut progressed = false;
            while let Some(c) = self.io.try_next()? {
                self.device_done(c)?;
                progressed = true;
            }
            if progressed {
                continue;
            }
            let tenants_done =
                !workload || self.tenants.iter().all(|t| t.finished()) && self.held.is_empty();
            let busy = !self.devices.is_empty() || !self.host.is_empty();
            if tenants_done && !busy {
                if self.timers.is_empty() {
                    return Ok(now);
                }
                let until = *drain_until.get_or_insert(now + drain_ns);
                if next_timer.is_some_and(|t| t > until) {
                    self.info.timers_pending_at_end = self.timers.len() as u64;
                    return Ok(now);
                }
            }
            let deadline = [next_issue, next_timer].into_iter().flatten().min();
            let wait = match deadline {
                Some(t) if t <= now => Duration::ZERO,
                Some(t) => Duration::from_nanos(t - now),
                // A completion wakes us; held IOs wait for one.
                None if busy => Duration::from_secs(3600),
                None if !self.held.is_empty() => Duration::ZERO,
                None if !tenants_done => Duration::from_millis(1),
                None => Duration::ZERO,
            };
            if wait.is_zero() {
                continue;
            }
            if let Some(c) = self.io.wait(wait)? {
                self.device_done(c)?;
            }
        }
    }

    /// Verify mode: reads every written sector back through the policy.
    fn final_scan(&mut self, drain_ns: TimeNs) -> Result<(), String> {
        let runs = self
            .verifier
            .as_ref()
            .map(|v| v.written_runs(256))
            .unwrap_or_default();
        const DEPTH: usize = 16;
        let mut next = 0;
        while next < runs.len() || !self.host.is_empty() {
            let now = self.now_ns().max(self.recorder.now_ns());
            while next < runs.len() && self.host.len() < DEPTH {
                let (a, e) = runs[next];
                next += 1;
                let arrival = tierlab_sim::Arrival {
                    time_ns: now,
                    op: Op::Read,
                    offset_bytes: a * SECTOR,
                    size_bytes: ((e - a) * SECTOR) as u32,
                };
                self.issue(now, 0, arrival, true)?;
            }
            self.fire_timers(now)?;
            match self.io.wait(Duration::from_secs(60))? {
                Some(c) => self.device_done(c)?,
                None => return Err("the final verification scan stalled for 60 s".into()),
            }
        }
        self.run_loop(drain_ns, false)?;
        Ok(())
    }
}

/// Runs `config` for real. Relative paths resolve against `base_dir`.
pub fn run(config: &SimConfig, base_dir: &Path, opts: &RealOptions) -> Result<RealResult, String> {
    let backends = open_backends(config, base_dir)?;
    let (policy, tenants) = build_stack(config, base_dir, &backends)?;
    let names = tierlab_sim::build::device_names(config);
    let interval_ns = (config.output.interval_s * NS_PER_S as f64).round() as u64;
    let recorder = Recorder::new(MetricsConfig {
        interval_ns,
        device_names: names.clone(),
        tier_names: policy.tier_names(),
        tenants: config.tenants.len(),
        timeline: config.output.timeline,
        ..MetricsConfig::default()
    })
    .map_err(|e| format!("output: {e}"))?;
    let info = RealInfo {
        backends: backends.iter().map(|b| b.describe()).collect(),
        io_threads: opts.io_threads,
        verify: opts.verify,
        ..Default::default()
    };
    let backends = Arc::new(backends);
    let io = Io::new(Arc::clone(&backends), opts.io_engine, opts.io_threads)?;
    let info = RealInfo {
        io_engine: io.description.clone(),
        ..info
    };
    let n = backends.len();
    let out = Outbox {
        wants_data: true,
        ..Default::default()
    };
    let mut exec = Exec {
        policy,
        tenants,
        backends,
        names,
        io,
        start: Instant::now(),
        policy_clock_ns: 0,
        out,
        host: HashMap::new(),
        next_host_id: 0,
        staging: HashMap::new(),
        devices: HashMap::new(),
        next_device_tag: 0,
        in_flight: vec![0; n],
        timers: BinaryHeap::new(),
        timer_seq: 0,
        recorder,
        verifier: opts.verify.then(Verifier::new),
        held: VecDeque::new(),
        info,
        host_ios: 0,
        events: 0,
        counter_interval_ns: if interval_ns > 0 { interval_ns } else { 0 },
        next_sample_ns: 0,
        counter_samples: Vec::new(),
        recording: true,
    };
    if exec.policy.counters().is_empty() {
        exec.counter_interval_ns = 0;
    }
    let drain_ns = (opts.drain_s.max(0.0) * NS_PER_S as f64) as TimeNs;
    let result = exec.run_loop(drain_ns, true);
    let end_ns = match result {
        Ok(t) => t,
        Err(e) => {
            // Let IOs in flight finish (bounded) so nothing is left half
            // done behind the error, then report it.
            let give_up = Instant::now() + Duration::from_secs(10);
            while !exec.devices.is_empty() && Instant::now() < give_up {
                match exec.io.wait(Duration::from_millis(100)) {
                    Ok(Some(c)) => {
                        exec.devices.remove(&c.tag);
                    }
                    Ok(None) => {}
                    Err(_) => break,
                }
            }
            return Err(e);
        }
    };
    exec.sample(end_ns);
    let counter_names = exec.policy.counters().into_iter().map(|(k, _)| k).collect();
    if exec.counter_interval_ns > 0 {
        let values = exec.policy.counters().into_iter().map(|(_, v)| v).collect();
        exec.counter_samples.push((end_ns, values));
    }
    let policy_counters = exec
        .policy
        .counters()
        .into_iter()
        .map(|(k, v)| (k.to_string(), counter_value(v)))
        .collect();
    let policy_logs = exec.policy.logs();
    // Backends' own counters (a RAID's), like a model's, before the scan.
    let device_counters = exec
        .names
        .iter()
        .zip(exec.backends.iter())
        .filter_map(|(name, b)| {
            let c = b.counters();
            (!c.is_empty()).then(|| {
                let map: serde_json::Map<String, serde_json::Value> = c
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), counter_value(v)))
                    .collect();
                (name.clone(), serde_json::Value::Object(map))
            })
        })
        .collect();
    // The final scan runs after the metrics stop recording.
    exec.recording = false;
    if opts.verify {
        exec.final_scan(drain_ns)?;
        for b in exec.backends.iter() {
            b.flush()
                .map_err(|e| format!("{}: flush: {e}", b.describe()))?;
        }
    }
    if let Some(v) = &exec.verifier {
        exec.info.sectors_verified = v.sectors_checked;
        exec.info.sectors_unverified = v.sectors_unverified;
    }
    exec.info.unaligned_ios = exec.backends.iter().map(|b| b.unaligned_ios()).collect();
    let recorder = std::mem::replace(
        &mut exec.recorder,
        Recorder::new(MetricsConfig::default()).map_err(|e| e.to_string())?,
    );
    let metrics = recorder.finish(end_ns);
    let info = tierlab_sim::run::RunInfo {
        seed: config.seed,
        policy: exec.policy.name().to_string(),
        simulated_s: end_ns as f64 / NS_PER_S as f64,
        events: exec.events,
        host_ios_unfinished: 0,
        tenants: exec
            .tenants
            .iter()
            .map(tierlab_sim::run::TenantReport::from)
            .collect(),
        policy_counters,
        device_counters,
    };
    Ok(RealResult {
        run: tierlab_sim::run::RunResult {
            metrics,
            info,
            outcome: RunOutcome {
                end_ns,
                host_ios: exec.host_ios,
                events: exec.events,
                host_ios_unfinished: 0,
            },
            counter_names,
            counter_samples: std::mem::take(&mut exec.counter_samples),
            policy_logs,
        },
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
