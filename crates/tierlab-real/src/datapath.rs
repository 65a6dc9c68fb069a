//! The data path every real executor shares (`tierlab run`, `tierlab
//! serve`): a policy over real backing stores, wall-clock time, real bytes.
//!
//! `Core` owns the policy, the IO engine and every buffer. A driver hands
//! it host IOs (`issue`), device completions (`poll_completions`, `wait`)
//! and the time (`fire_timers`, `advance_models`); the host IOs the policy
//! completes come out of `finished`, with their buffers (a read's data).
//! Data moves as the policy describes it (`Outbox::data_for`): a device
//! write copies its bytes out of a host or staging buffer when submitted,
//! a device read copies them in when it completes.
//!
//! Besides the policy's IOs, `flush_backends` makes every backing store
//! durable (fdatasync) as one barrier — what NBD FLUSH and FUA need.
//!
//! Model timing (`with_models`): every device IO also goes to a device
//! model, and its completion reaches the policy only when both the backing
//! store and the model are done, so a real workload sees the model's
//! timing under a real policy (as `tierlab emulate` does for one device).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierlab_core::apply::{OutboxSink, PolicyError};
use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::metrics::Recorder;
use tierlab_core::policy::{BufRef, HostIo, IoError, Outbox, Policy, StoreError, StoreOp};
use tierlab_core::{Completion as ModelCompletion, DeviceIo, Op, ParamError, TimeNs};

use crate::backend::Backend;
use crate::engine::Io;
use crate::error::{DataPathError, DeviceIoError, RunError};
use crate::ids::{IdMap, Slab};
use crate::iobuf::IoBuf;
use crate::pool::{Completion, Request};

/// A host IO as a driver hands it to the stack.
pub struct HostRequest {
    pub op: Op,
    pub offset_bytes: u64,
    pub size_bytes: u32,
    pub tenant: u32,
    /// A write's data; a read's result lands here (len = size_bytes).
    pub buf: Vec<u8>,
    /// The driver's own value, returned in `Finished`.
    pub user: u64,
    /// Counted in the metrics (false for a verification scan).
    pub record: bool,
}

impl HostRequest {
    /// A FLUSH the driver sends itself (not a host IO in the metrics).
    pub fn flush(user: u64) -> HostRequest {
        HostRequest {
            op: Op::Flush,
            offset_bytes: 0,
            size_bytes: 0,
            tenant: 0,
            buf: Vec::new(),
            user,
            record: false,
        }
    }
}

/// A host IO the policy completed.
pub struct Finished {
    pub id: u64,
    pub tier: u16,
    pub arrival_ns: TimeNs,
    pub done_ns: TimeNs,
    pub op: Op,
    pub offset_bytes: u64,
    pub size_bytes: u32,
    pub tenant: u32,
    pub buf: Vec<u8>,
    pub user: u64,
    pub record: bool,
    /// Set when the host IO failed (a device IO it needed failed and the
    /// policy survived it): answer the host with this error.
    pub error: Option<IoError>,
}

struct Host {
    arrival_ns: TimeNs,
    req: HostRequest,
}

/// Whose a device IO is: the policy's (its tag), or the executor's own
/// flush of a backing store (a barrier id).
#[derive(Clone, Copy)]
enum Owner {
    Policy(u64),
    Barrier(u64),
}

struct DeviceInFlight {
    owner: Owner,
    submit_ns: TimeNs,
    op: Op,
    size_bytes: u32,
    target: Option<BufRef>,
    /// A flush: the store's `writes_ended` when it was submitted (what a
    /// success makes durable).
    writes_before: u64,
}

struct ModelTiming {
    models: Vec<Box<dyn DeviceModel>>,
    /// Backing-store completions waiting for their model.
    parked: HashMap<u64, Completion>,
    /// Tags the model finished before the backing store did.
    model_done: HashSet<u64>,
    /// When each model completed a tag (the completion's time).
    done_at: HashMap<u64, TimeNs>,
    scratch: Vec<ModelCompletion>,
}

pub struct Core {
    pub policy: Box<dyn Policy>,
    pub backends: Arc<Vec<Box<dyn Backend>>>,
    /// Device names, for errors and outputs.
    pub names: Vec<String>,
    pub io: Io,
    start: Instant,
    /// The latest time any policy call was given (`policy_time`).
    policy_clock_ns: TimeNs,
    /// The policy's name, for errors (kept: `apply` needs it per call).
    policy_name: String,
    out: Outbox,
    host: IdMap<Host>,
    next_host_id: u64,
    staging: IdMap<Vec<u8>>,
    /// Device IOs in flight; the slot is the tag the engine carries.
    devices: Slab<(usize, DeviceInFlight)>,
    in_flight: Vec<u32>,
    timers: BinaryHeap<Reverse<(TimeNs, u64, u64)>>,
    timer_seq: u64,
    /// Barrier id → backing-store flushes still in flight, and the error
    /// of one that failed.
    barriers: HashMap<u64, (usize, Option<IoError>)>,
    next_barrier: u64,
    models: Option<ModelTiming>,
    pub recorder: Recorder,
    /// Device IOs and host IOs go into the metrics while true.
    pub recording: bool,
    /// Policy calls (completions and timers), for summary.json.
    pub events: u64,
    /// Host IOs the policy completed, oldest first: the driver takes them.
    pub finished: VecDeque<Finished>,
    /// Barriers (`flush_backends`) whose flushes all completed, with the
    /// error of a store whose flush failed.
    pub flushed: VecDeque<(u64, Option<IoError>)>,
    /// Device IOs and store syncs that failed, and host IOs failed.
    pub device_errors: u64,
    /// Per store: a sync failed once. Sticky, so that no later FLUSH
    /// reports durable what that failure may have lost (a store's next
    /// fdatasync can succeed although the failed writes are gone).
    sync_failed: Vec<bool>,
    /// Per store: writes and trims that ended (done or failed), and how
    /// many of them a successful flush (the policy's or a barrier's) made
    /// durable — None before the first. A barrier skips a store with
    /// nothing new to make durable: a FLUSH then costs a fdatasync only
    /// where something was written since.
    writes_ended: Vec<u64>,
    writes_synced: Vec<Option<u64>>,
    /// Barrier flushes skipped (nothing written since the store's last
    /// sync), for summary.json.
    pub syncs_skipped: u64,
    pub host_ios_failed: u64,
    /// The first failed device IOs, in words (bounded), for the report.
    pub device_error_messages: Vec<String>,
    /// Tenant caps the policy asked for (`Action::CapTenant`), in order:
    /// the driver owns the tenants and carries them out.
    pub caps: Vec<(u32, Option<f64>)>,
    counter_interval_ns: TimeNs,
    next_sample_ns: TimeNs,
    pub counter_samples: Vec<(TimeNs, Vec<f64>)>,
}

impl Core {
    pub fn new(
        policy: Box<dyn Policy>,
        backends: Arc<Vec<Box<dyn Backend>>>,
        names: Vec<String>,
        io: Io,
        recorder: Recorder,
        counter_interval_ns: TimeNs,
    ) -> Core {
        let n = backends.len();
        assert_eq!(names.len(), n, "one name per backing store");
        let counter_interval_ns = if policy.counters().is_empty() {
            0
        } else {
            counter_interval_ns
        };
        Core {
            policy_name: policy.name().to_string(),
            policy,
            backends,
            names,
            io,
            start: Instant::now(),
            policy_clock_ns: 0,
            out: Outbox {
                wants_data: true,
                ..Default::default()
            },
            host: IdMap::default(),
            next_host_id: 0,
            staging: IdMap::default(),
            devices: Slab::default(),
            in_flight: vec![0; n],
            timers: BinaryHeap::new(),
            timer_seq: 0,
            barriers: HashMap::new(),
            next_barrier: 0,
            models: None,
            recorder,
            recording: true,
            events: 0,
            finished: VecDeque::new(),
            flushed: VecDeque::new(),
            device_errors: 0,
            sync_failed: vec![false; n],
            writes_ended: vec![0; n],
            writes_synced: vec![None; n],
            syncs_skipped: 0,
            host_ios_failed: 0,
            device_error_messages: Vec::new(),
            caps: Vec::new(),
            counter_interval_ns,
            next_sample_ns: 0,
            counter_samples: Vec::new(),
        }
    }

    /// Opens the policy over the backing stores (`Policy::open`: recovers
    /// its persistent state, or formats fresh stores). Call once, before
    /// the first IO.
    pub fn open_policy(&mut self) -> Result<(), RunError> {
        let backends = Arc::clone(&self.backends);
        let mut stores = OpenStores {
            backends: &backends,
            names: &self.names,
        };
        self.policy
            .open(&mut stores)
            .map_err(|source| RunError::OpenPolicy {
                policy: self.policy.name().to_string(),
                source,
            })
    }

    /// Model timing: device IOs complete only when the backing store and
    /// `models[device]` are both done. One model per backing store, each
    /// at least as large.
    pub fn with_models(mut self, models: Vec<Box<dyn DeviceModel>>) -> Result<Core, DataPathError> {
        if models.len() != self.backends.len() {
            return Err(DataPathError::Models(ParamError::rooted(
                "devices",
                format!("{} models", models.len()),
                format!(
                    "one model per device for model timing ({} devices)",
                    self.backends.len()
                ),
            )));
        }
        for (i, (m, b)) in models.iter().zip(self.backends.iter()).enumerate() {
            if m.capacity_bytes() < b.capacity_bytes() {
                return Err(DataPathError::Models(ParamError::rooted(
                    format!("devices[{i}].capacity_bytes"),
                    format!("a model of {} bytes", m.capacity_bytes()),
                    format!(
                        "a model at least as large as its backing store ({}, {} bytes)",
                        b.describe(),
                        b.capacity_bytes()
                    ),
                )));
            }
        }
        self.models = Some(ModelTiming {
            models,
            parked: HashMap::new(),
            model_done: HashSet::new(),
            done_at: HashMap::new(),
            scratch: Vec::new(),
        });
        Ok(self)
    }

    /// Nanoseconds since the core started.
    pub fn now_ns(&self) -> TimeNs {
        self.start.elapsed().as_nanos() as TimeNs
    }

    /// Nanoseconds since the core started at `t`.
    pub fn at_ns(&self, t: Instant) -> TimeNs {
        t.saturating_duration_since(self.start).as_nanos() as TimeNs
    }

    /// The time a policy call is given: never before the previous call's.
    /// (Wall-clock stamps come from different places — a completion's
    /// reap time, an IO's entry, the loop's wake-up — and can be out of
    /// order by microseconds; a policy must never see time go back.)
    fn policy_time(&mut self, t: TimeNs) -> TimeNs {
        self.policy_clock_ns = self.policy_clock_ns.max(t).max(self.recorder.now_ns());
        self.policy_clock_ns
    }

    /// The policy misused the data path (`message` says how).
    fn fail(&self, message: String) -> DataPathError {
        DataPathError::Policy(PolicyError::Other {
            policy: self.policy.name().to_string(),
            message,
        })
    }

    /// Host IOs issued and not finished.
    pub fn host_in_flight(&self) -> usize {
        self.host.len()
    }

    /// Whether a host IO over [offset, offset + size) of `op` would overlap
    /// one in flight where either writes (or trims): such IOs must wait to
    /// keep their order.
    pub fn conflicts(&self, op: Op, offset_bytes: u64, size_bytes: u64) -> bool {
        let (s, e) = (offset_bytes, offset_bytes + size_bytes);
        let changes = |o: Op| matches!(o, Op::Write | Op::Trim);
        self.host.values().any(|h| {
            let hs = h.req.offset_bytes;
            let he = hs + h.req.size_bytes as u64;
            s < he && hs < e && (changes(h.req.op) || changes(op))
        })
    }

    /// Device IOs in flight (the policy's and the executor's own).
    pub fn device_ios_in_flight(&self) -> usize {
        self.devices.len()
    }

    /// True while any host or device IO is in flight.
    pub fn busy(&self) -> bool {
        !self.devices.is_empty() || !self.host.is_empty()
    }

    pub fn timers_pending(&self) -> usize {
        self.timers.len()
    }

    /// When the next policy timer is due.
    pub fn next_timer_ns(&self) -> Option<TimeNs> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Hands a host IO to the policy; returns its id.
    pub fn issue(&mut self, now: TimeNs, req: HostRequest) -> Result<u64, DataPathError> {
        let now = self.policy_time(self.now_ns().max(now));
        let id = self.next_host_id;
        self.next_host_id += 1;
        let io = HostIo {
            id,
            op: req.op,
            offset_bytes: req.offset_bytes,
            size_bytes: req.size_bytes,
            tenant: req.tenant,
        };
        debug_assert!(
            req.op != Op::Write || req.buf.len() == req.size_bytes as usize,
            "a write carries its data"
        );
        self.host.insert(
            id,
            Host {
                arrival_ns: now,
                req,
            },
        );
        self.policy.on_host_io(now, io, &mut self.out);
        self.apply(now)?;
        Ok(id)
    }

    /// Flushes every backing store (fdatasync) as one barrier: its id comes
    /// out of `flushed` when every store has finished. Writes completed
    /// before the call are durable then.
    pub fn flush_backends(&mut self, now: TimeNs) -> Result<u64, DataPathError> {
        let now = self.policy_time(self.now_ns().max(now));
        let barrier = self.next_barrier;
        self.next_barrier += 1;
        let stale: Vec<usize> = (0..self.backends.len())
            .filter(|&d| self.writes_synced[d] != Some(self.writes_ended[d]) || self.sync_failed[d])
            .collect();
        self.syncs_skipped += (self.backends.len() - stale.len()) as u64;
        if stale.is_empty() {
            // Every store is durable up to its last ended write already.
            self.flushed.push_back((barrier, None));
            return Ok(barrier);
        }
        self.barriers.insert(barrier, (stale.len(), None));
        for d in stale {
            let io = DeviceIo {
                tag: 0,
                op: Op::Flush,
                offset_bytes: 0,
                size_bytes: 0,
            };
            self.start_device_io(now, d, io, None, Owner::Barrier(barrier))?;
        }
        Ok(barrier)
    }

    /// Carries out the policy's outbox (`Outbox::apply`, shared by every
    /// executor; this executor's side is `impl OutboxSink for Core`).
    fn apply(&mut self, now: TimeNs) -> Result<(), DataPathError> {
        let mut out = std::mem::take(&mut self.out);
        let name = std::mem::take(&mut self.policy_name);
        let result = out.apply(&name, now, self);
        self.out = out;
        self.policy_name = name;
        result
    }

    fn start_device_io(
        &mut self,
        now: TimeNs,
        d: usize,
        io: DeviceIo,
        target: Option<BufRef>,
        owner: Owner,
    ) -> Result<(), DataPathError> {
        let len = io.size_bytes as usize;
        // Memory stores: copy straight between the policy's buffer and the
        // store, inline (no intermediate buffer, no thread), unless model
        // timing wants the IO in flight.
        let direct = self.models.is_none()
            && matches!(io.op, Op::Read | Op::Write)
            && self.backends[d].is_memory();
        // The engine's buffer (reused, aligned): a write's bytes are
        // copied in here, a read's copied out when it completes.
        let data = match io.op {
            Op::Read | Op::Write if !direct => {
                let mut b = self.io.buffer(len);
                if io.op == Op::Write {
                    if let Err(e) = self.copy_out(target, b.as_mut_slice()) {
                        self.io.recycle(b);
                        return Err(e);
                    }
                }
                b
            }
            _ => IoBuf::empty(),
        };
        let tag = self.devices.insert((
            d,
            DeviceInFlight {
                owner,
                submit_ns: now,
                op: io.op,
                size_bytes: io.size_bytes,
                // A direct read has landed already.
                target: if direct { None } else { target },
                writes_before: self.writes_ended[d],
            },
        ));
        self.in_flight[d] += 1;
        if self.recording {
            self.recorder.device_submit(d, now);
            if self.in_flight[d] == 1 {
                let state = if io.op == Op::Read {
                    DeviceState::Read
                } else {
                    DeviceState::Write
                };
                self.recorder.device_state(d, now, state);
            }
        }
        if let Some(m) = &mut self.models {
            m.models[d].submit(now, DeviceIo { tag, ..io });
        }
        if direct {
            let result = self.memory_io(d, io, target);
            self.io.push_ready(Completion {
                device: d,
                tag,
                op: io.op,
                offset_bytes: io.offset_bytes,
                result,
                data: IoBuf::empty(),
                done: Instant::now(),
            });
            return Ok(());
        }
        self.io.submit(Request {
            device: d,
            tag,
            op: io.op,
            offset_bytes: io.offset_bytes,
            data,
            trim_bytes: if io.op == Op::Trim {
                io.size_bytes as u64
            } else {
                0
            },
        })?;
        Ok(())
    }

    /// A read or write of a memory store, straight from or into the buffer
    /// the policy named.
    fn memory_io(&mut self, d: usize, io: DeviceIo, buf: Option<BufRef>) -> std::io::Result<()> {
        let len = io.size_bytes as usize;
        let at = io.offset_bytes;
        let backend = Arc::clone(&self.backends);
        let b = &backend[d];
        let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
        match (io.op, buf) {
            (
                Op::Write,
                Some(BufRef::Host {
                    host_id,
                    offset_bytes,
                }),
            ) => {
                let h = self.host.get(&host_id).ok_or_else(|| {
                    bad(format!(
                        "a write from host IO {host_id}, which does not exist"
                    ))
                })?;
                let off = offset_bytes as usize;
                let src = h.req.buf.get(off..off + len).ok_or_else(|| bad(format!("a write of {len} bytes from host IO {host_id} at offset {off}, which holds {} bytes", h.req.buf.len())))?;
                b.write_at(src, at)
            }
            (Op::Write, Some(BufRef::Staging { id, offset_bytes })) => {
                let st = self.staging.get(&id).ok_or_else(|| {
                    bad(format!(
                        "a write from staging buffer {id}, which does not exist"
                    ))
                })?;
                let off = offset_bytes as usize;
                let src = st.get(off..off + len).ok_or_else(|| bad(format!("a write of {len} bytes from staging buffer {id} at offset {off}, which holds {} bytes", st.len())))?;
                b.write_at(src, at)
            }
            (Op::Write, _) => b.write_at(&vec![0u8; len], at),
            (
                Op::Read,
                Some(BufRef::Host {
                    host_id,
                    offset_bytes,
                }),
            ) => {
                let h = self.host.get_mut(&host_id).ok_or_else(|| {
                    bad(format!(
                        "a device read for host IO {host_id}, which does not exist"
                    ))
                })?;
                let off = offset_bytes as usize;
                let have = h.req.buf.len();
                let dst = h.req.buf.get_mut(off..off + len).ok_or_else(|| bad(format!("a device read of {len} bytes into host IO {host_id} at offset {off}, which holds {have}")))?;
                b.read_at(dst, at)
            }
            (Op::Read, Some(BufRef::Staging { id, offset_bytes })) => {
                let off = offset_bytes as usize;
                let st = self.staging.entry(id).or_default();
                if st.len() < off + len {
                    st.resize(off + len, 0);
                }
                b.read_at(&mut st[off..off + len], at)
            }
            (Op::Read, _) => b.read_at(&mut vec![0u8; len], at),
            _ => unreachable!("only reads and writes are direct"),
        }
    }

    /// Fills `dst` with the bytes a device write takes from `src` (None:
    /// zeros, as for a write with no source; `apply` refuses those unless
    /// the executor moves no data).
    fn copy_out(&self, src: Option<BufRef>, dst: &mut [u8]) -> Result<(), DataPathError> {
        let len = dst.len();
        let Some(src) = src else {
            dst.fill(0);
            return Ok(());
        };
        let (buf, off, what, id) = match src {
            BufRef::Host {
                host_id,
                offset_bytes,
            } => (
                self.host.get(&host_id).map(|h| &h.req.buf),
                offset_bytes,
                "host IO",
                host_id,
            ),
            BufRef::Staging { id, offset_bytes } => {
                (self.staging.get(&id), offset_bytes, "staging buffer", id)
            }
            BufRef::Zeros => {
                dst.fill(0);
                return Ok(());
            }
        };
        let buf = buf
            .ok_or_else(|| self.fail(format!("a write from {what} {id}, which does not exist")))?;
        let off = off as usize;
        let from = buf.get(off..off + len).ok_or_else(|| {
            self.fail(format!(
                "a write of {len} bytes from {what} {id} at offset {off}, which holds {} bytes",
                buf.len()
            ))
        })?;
        dst.copy_from_slice(from);
        Ok(())
    }

    fn copy_in(&mut self, dst: BufRef, data: &[u8]) -> Result<(), DataPathError> {
        match dst {
            BufRef::Host {
                host_id,
                offset_bytes,
            } => {
                let off = offset_bytes as usize;
                let Some(h) = self.host.get_mut(&host_id) else {
                    return Err(self.fail(format!(
                        "a device read for host IO {host_id} landed after that IO completed"
                    )));
                };
                let len = h.req.buf.len();
                let Some(dst) = h.req.buf.get_mut(off..off + data.len()) else {
                    return Err(self.fail(format!(
                        "a device read of {} bytes into host IO {host_id} at offset {off}, which \
                         holds {len}",
                        data.len()
                    )));
                };
                dst.copy_from_slice(data);
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

    /// Takes every completion that is already there (and those model
    /// timing releases by now); true if any reached the stack.
    pub fn poll_completions(&mut self) -> Result<bool, DataPathError> {
        let mut progressed = false;
        while let Some(c) = self.io.try_next()? {
            progressed |= self.device_done(c)?;
        }
        if self.models.is_some() {
            let now = self.now_ns();
            progressed |= self.advance_models(now)?;
        }
        Ok(progressed)
    }

    /// Sleeps in the IO engine until a completion or `timeout`
    /// (`Duration::MAX`: until a completion), and hands what came to the
    /// stack; true if any did.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, DataPathError> {
        match self.io.wait(timeout)? {
            Some(c) => self.device_done(c),
            None => Ok(false),
        }
    }

    /// A backing store finished an IO. With model timing it may wait for
    /// its model; returns true when it reached the stack.
    pub fn device_done(&mut self, c: Completion) -> Result<bool, DataPathError> {
        if let Some(m) = &mut self.models {
            if !m.model_done.remove(&c.tag) {
                m.parked.insert(c.tag, c);
                return Ok(false);
            }
        }
        let at = self.at_ns(c.done);
        let at = match &mut self.models {
            // Model timing: the later of the two.
            Some(m) => m.done_at.remove(&c.tag).map_or(at, |t| t.max(at)),
            None => at,
        };
        self.deliver(c, at)?;
        Ok(true)
    }

    /// Advances the device models to `now`; completions whose backing IO
    /// is also done reach the stack. True if any did.
    pub fn advance_models(&mut self, now: TimeNs) -> Result<bool, DataPathError> {
        let Some(m) = &mut self.models else {
            return Ok(false);
        };
        let mut ready = Vec::new();
        for model in &mut m.models {
            if model.next_event_ns().is_some_and(|t| t <= now) {
                m.scratch.clear();
                model.advance(now, &mut m.scratch);
                for mc in &m.scratch {
                    match m.parked.remove(&mc.tag) {
                        Some(c) => ready.push((c, mc.done_ns)),
                        None => {
                            m.model_done.insert(mc.tag);
                            m.done_at.insert(mc.tag, mc.done_ns);
                        }
                    }
                }
            }
        }
        let progressed = !ready.is_empty();
        for (c, done_ns) in ready {
            let at = self.at_ns(c.done).max(done_ns);
            self.deliver(c, at)?;
        }
        Ok(progressed)
    }

    /// When the next model event is due (model timing).
    pub fn next_model_event_ns(&self) -> Option<TimeNs> {
        self.models
            .as_ref()?
            .models
            .iter()
            .filter_map(|m| m.next_event_ns())
            .min()
    }

    fn deliver(&mut self, mut c: Completion, at: TimeNs) -> Result<(), DataPathError> {
        let now = self.policy_time(at);
        let (d, dev) = self
            .devices
            .remove(c.tag)
            .expect("a completion for an IO the executor submitted");
        let failed = std::mem::replace(&mut c.result, Ok(())).err().map(|e| {
            (
                IoError::from_io(&e),
                DeviceIoError {
                    device: self.names[d].clone(),
                    backend: self.backends[d].describe(),
                    op: c.op,
                    size_bytes: dev.size_bytes,
                    offset_bytes: c.offset_bytes,
                    source: e,
                },
            )
        });
        let copied = match dev.target {
            Some(t) if failed.is_none() && c.op == Op::Read => self.copy_in(t, c.data.as_slice()),
            _ => Ok(()),
        };
        self.io
            .recycle(std::mem::replace(&mut c.data, IoBuf::empty()));
        copied?;
        self.in_flight[d] -= 1;
        match dev.op {
            Op::Write | Op::Trim => self.writes_ended[d] += 1,
            Op::Flush if failed.is_none() => {
                let synced =
                    self.writes_synced[d].map_or(dev.writes_before, |s| s.max(dev.writes_before));
                self.writes_synced[d] = Some(synced);
            }
            _ => {}
        }
        if self.recording {
            self.recorder
                .device_complete(d, dev.submit_ns, now, dev.op, dev.size_bytes);
            if self.in_flight[d] == 0 {
                self.recorder.device_state(d, now, DeviceState::Idle);
            }
        }
        if let Some((_, error)) = &failed {
            self.device_errors += 1;
            if self.device_error_messages.len() < 20 {
                self.device_error_messages.push(error.to_string());
            }
        }
        match (dev.owner, failed) {
            (Owner::Policy(tag), None) => {
                self.events += 1;
                self.policy.on_device_completion(now, d, tag, &mut self.out);
                self.apply(now)
            }
            (Owner::Policy(tag), Some((error, device_error))) => {
                self.events += 1;
                if !self
                    .policy
                    .on_device_error(now, d, tag, error, &mut self.out)
                {
                    // The policy cannot survive it: stop (fail-stop).
                    return Err(DataPathError::Device(device_error));
                }
                self.apply(now)
            }
            (Owner::Barrier(b), failed) => {
                if failed.is_some() {
                    self.sync_failed[d] = true;
                }
                let (left, error) = self.barriers.get_mut(&b).expect("a barrier in flight");
                *left -= 1;
                if let Some((e, _)) = failed {
                    error.get_or_insert(e);
                }
                if *left == 0 {
                    let (_, error) = self.barriers.remove(&b).unwrap();
                    let sticky = self.sync_failed.iter().any(|&f| f).then_some(IoError::Io);
                    self.flushed.push_back((b, error.or(sticky)));
                }
                Ok(())
            }
        }
    }

    /// Fires the timers that are due; returns when the next one is.
    pub fn fire_timers(&mut self, now: TimeNs) -> Result<Option<TimeNs>, DataPathError> {
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

    /// Asks the policy to write every byte only a fast tier holds to its
    /// backing device (`Policy::drain`); `drained` says when it is done.
    pub fn drain(&mut self, now: TimeNs) -> Result<(), DataPathError> {
        let now = self.policy_time(now);
        self.policy.drain(now, &mut self.out);
        self.apply(now)
    }

    /// True when the policy holds no data its backing device lacks and
    /// nothing is in flight.
    pub fn drained(&self) -> bool {
        self.policy.is_drained() && !self.busy()
    }

    /// Samples the policy's counters at every interval boundary up to `now`.
    pub fn sample(&mut self, now: TimeNs) {
        while self.counter_interval_ns > 0 && now >= self.next_sample_ns {
            let values = self.policy.counters().into_iter().map(|(_, v)| v).collect();
            self.counter_samples.push((self.next_sample_ns, values));
            self.next_sample_ns += self.counter_interval_ns;
        }
    }

    /// The run's results so far, as `tierlab sim` reports them (the metrics
    /// from a copy of the recorder, so serving can report periodically).
    pub fn result(
        &self,
        end_ns: TimeNs,
        seed: u64,
        host_ios: u64,
        tenants: Vec<tierlab_sim::run::TenantReport>,
        warnings: Vec<String>,
    ) -> tierlab_sim::run::RunResult {
        use tierlab_sim::run::counter_value;
        let counters = self.policy.counters();
        let mut counter_samples = self.counter_samples.clone();
        if self.counter_interval_ns > 0 && counter_samples.last().is_none_or(|(t, _)| *t < end_ns) {
            counter_samples.push((end_ns, counters.iter().map(|(_, v)| *v).collect()));
        }
        // Backing stores' own counters (a RAID's), like a model's.
        let device_counters = self
            .names
            .iter()
            .zip(self.backends.iter())
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
        tierlab_sim::run::RunResult {
            metrics: self.recorder.clone().finish(end_ns),
            info: tierlab_sim::run::RunInfo {
                seed,
                policy: self.policy.name().to_string(),
                simulated_s: end_ns as f64 / tierlab_core::NS_PER_S as f64,
                events: self.events,
                host_ios_unfinished: self.host.len() as u64,
                tenants,
                warnings,
                policy_counters: counters
                    .iter()
                    .map(|(k, v)| (k.to_string(), counter_value(*v)))
                    .collect(),
                device_counters,
            },
            outcome: tierlab_sim::RunOutcome {
                end_ns,
                // The window includes the final drain (docs/real.md).
                workload_end_ns: end_ns,
                host_ios,
                events: self.events,
                host_ios_unfinished: self.host.len() as u64,
            },
            counter_names: counters.iter().map(|(k, _)| *k).collect(),
            counter_samples,
            policy_logs: self.policy.logs(),
        }
    }

    /// After an error: lets device IOs in flight finish (bounded) so that
    /// nothing is left half done behind it.
    pub fn abandon(&mut self) {
        let give_up = Instant::now() + Duration::from_secs(10);
        while !self.devices.is_empty() && Instant::now() < give_up {
            match self.io.wait(Duration::from_millis(100)) {
                Ok(Some(c)) => {
                    self.devices.remove(c.tag);
                }
                Ok(None) => {}
                Err(_) => break,
            }
        }
    }

    fn host_done(
        &mut self,
        now: TimeNs,
        id: u64,
        tier: u16,
        error: Option<IoError>,
    ) -> Result<(), DataPathError> {
        let h = self
            .host
            .remove(&id)
            .ok_or_else(|| self.fail(format!("host IO {id} completed twice or never issued")))?;
        if error.is_some() {
            self.host_ios_failed += 1;
        } else if h.req.record && self.recording {
            self.recorder.host_io(
                h.arrival_ns,
                now,
                h.req.op,
                h.req.size_bytes,
                tier,
                h.req.tenant,
            );
        }
        self.finished.push_back(Finished {
            id,
            tier,
            arrival_ns: h.arrival_ns,
            done_ns: now,
            op: h.req.op,
            offset_bytes: h.req.offset_bytes,
            size_bytes: h.req.size_bytes,
            tenant: h.req.tenant,
            buf: h.req.buf,
            user: h.req.user,
            record: h.req.record,
            error,
        });
        Ok(())
    }
}

impl OutboxSink for Core {
    type Error = DataPathError;

    fn device_count(&self) -> usize {
        self.backends.len()
    }

    fn device_capacity_bytes(&self, device: usize) -> u64 {
        self.backends[device].capacity_bytes()
    }

    fn submit(
        &mut self,
        now: TimeNs,
        d: usize,
        io: DeviceIo,
        target: Option<BufRef>,
    ) -> Result<(), DataPathError> {
        self.start_device_io(now, d, io, target, Owner::Policy(io.tag))
    }

    fn complete(&mut self, now: TimeNs, host_id: u64, tier: u16) -> Result<(), DataPathError> {
        self.host_done(now, host_id, tier, None)
    }

    fn fail_host(
        &mut self,
        now: TimeNs,
        host_id: u64,
        error: IoError,
    ) -> Result<(), DataPathError> {
        self.host_done(now, host_id, 0, Some(error))
    }

    fn timer(&mut self, _now: TimeNs, at_ns: TimeNs, timer_id: u64) {
        self.timer_seq += 1;
        self.timers.push(Reverse((at_ns, self.timer_seq, timer_id)));
    }

    fn cap_tenant(&mut self, tenant: u32, iops: Option<f64>) -> Result<(), DataPathError> {
        // The driver owns the tenants: it takes `caps` after each call.
        self.caps.push((tenant, iops));
        Ok(())
    }

    fn release(&mut self, staging_id: u64) {
        self.staging.remove(&staging_id);
    }

    fn fill(&mut self, staging_id: u64, bytes: Vec<u8>) {
        self.staging.insert(staging_id, bytes);
    }
}

/// The backing stores, synchronously, for `Policy::open`.
struct OpenStores<'a> {
    backends: &'a [Box<dyn Backend>],
    names: &'a [String],
}

impl OpenStores<'_> {
    /// Names the device as the rest of the executor does: its stack name
    /// and what backs it.
    fn label(&self, d: usize) -> String {
        format!("{} ({})", self.names[d], self.backends[d].describe())
    }
}

impl tierlab_core::policy::Stores for OpenStores<'_> {
    fn capacity_bytes(&self, device: usize) -> u64 {
        self.backends[device].capacity_bytes()
    }
    fn read_at(&mut self, d: usize, offset_bytes: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.backends[d].read_at(buf, offset_bytes).map_err(|e| {
            StoreError::io(d, StoreOp::Read, offset_bytes, buf.len() as u64, e)
                .labelled(self.label(d))
        })
    }
    fn write_at(&mut self, d: usize, offset_bytes: u64, data: &[u8]) -> Result<(), StoreError> {
        self.backends[d].write_at(data, offset_bytes).map_err(|e| {
            StoreError::io(d, StoreOp::Write, offset_bytes, data.len() as u64, e)
                .labelled(self.label(d))
        })
    }
    fn sync(&mut self, d: usize) -> Result<(), StoreError> {
        self.backends[d]
            .flush()
            .map_err(|e| StoreError::io(d, StoreOp::Sync, 0, 0, e).labelled(self.label(d)))
    }
    fn volume_label(
        &mut self,
        d: usize,
    ) -> Result<Option<tierlab_core::volume::VolumeLabel>, StoreError> {
        self.backends[d]
            .volume_label()
            .map_err(|e| StoreError::io(d, StoreOp::Label, 0, 0, e).labelled(self.label(d)))
    }
    fn describe(&self, d: usize) -> String {
        self.label(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RamBackend;
    use crate::engine::{EngineKind, Waiting};
    use std::sync::atomic::{AtomicU64, Ordering};
    use tierlab_core::metrics::MetricsConfig;
    use tierlab_core::policy::Passthrough;

    /// RAM whose first flush fails and whose writes fail from the `n`-th on.
    struct Flaky {
        ram: RamBackend,
        flushes: AtomicU64,
        writes: AtomicU64,
        fail_writes_from: u64,
    }

    impl Backend for Flaky {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.ram.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            if self.writes.fetch_add(1, Ordering::SeqCst) + 1 >= self.fail_writes_from {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            self.ram.write_at(buf, offset)
        }
        fn flush(&self) -> std::io::Result<()> {
            if self.flushes.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(std::io::Error::from_raw_os_error(5));
            }
            Ok(())
        }
        fn capacity_bytes(&self) -> u64 {
            self.ram.capacity_bytes()
        }
        fn describe(&self) -> String {
            "flaky ram".into()
        }
    }

    fn core(fail_writes_from: u64) -> Core {
        let backends: Arc<Vec<Box<dyn Backend>>> = Arc::new(vec![Box::new(Flaky {
            ram: RamBackend::new(1 << 20),
            flushes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            fail_writes_from,
        })]);
        let io = Io::new(Arc::clone(&backends), EngineKind::Auto, 0, Waiting::InWait).unwrap();
        let recorder = Recorder::new(MetricsConfig::default()).unwrap();
        Core::new(
            Box::new(Passthrough),
            backends,
            vec!["disk".into()],
            io,
            recorder,
            0,
        )
    }

    fn settle(c: &mut Core) {
        while c.poll_completions().unwrap() {}
    }

    /// Model timing needs a model per store: refused as a bad value of
    /// `devices`, by kind.
    #[test]
    fn model_timing_without_a_model_per_store_is_refused() {
        let e = core(u64::MAX).with_models(Vec::new()).err().unwrap();
        let DataPathError::Models(p) = &e else {
            panic!("{e:?}")
        };
        assert_eq!((p.key(), p.found.as_str()), ("devices".into(), "0 models"));
    }

    /// A sync that failed once fails every later FLUSH, although the
    /// store's next fdatasync succeeds: the writes it covered may be gone.
    #[test]
    fn a_failed_sync_fails_every_later_barrier() {
        let mut c = core(u64::MAX);
        let b1 = c.flush_backends(0).unwrap();
        settle(&mut c);
        assert_eq!(c.flushed.pop_front(), Some((b1, Some(IoError::Io))));
        let b2 = c.flush_backends(0).unwrap();
        settle(&mut c);
        assert_eq!(c.flushed.pop_front(), Some((b2, Some(IoError::Io))));
        assert_eq!(c.device_errors, 1, "the store's second sync succeeded");
    }

    /// A failed device write fails its host IO with the store's error
    /// (ENOSPC here), and the next one is served.
    #[test]
    fn a_failed_write_fails_its_host_io_and_serving_goes_on() {
        let mut c = core(2);
        for (i, expect) in [(0u64, None), (1, Some(IoError::NoSpace))] {
            c.issue(
                0,
                HostRequest {
                    op: Op::Write,
                    offset_bytes: i * 4096,
                    size_bytes: 4096,
                    tenant: 0,
                    buf: vec![1u8; 4096],
                    user: i,
                    record: true,
                },
            )
            .unwrap();
            settle(&mut c);
            let f = c.finished.pop_front().expect("answered");
            assert_eq!((f.user, f.error), (i, expect));
        }
        assert_eq!((c.device_errors, c.host_ios_failed), (1, 1));
        assert!(
            c.device_error_messages[0]
                .contains("device disk (flaky ram): write of 4096 bytes at offset 4096 failed")
        );
    }

    fn write(c: &mut Core, user: u64) {
        let buf = vec![7u8; 4096];
        let req = HostRequest {
            op: Op::Write,
            offset_bytes: 0,
            size_bytes: 4096,
            tenant: 0,
            buf,
            user,
            record: true,
        };
        c.issue(0, req).unwrap();
        settle(c);
        assert!(c.finished.pop_front().is_some_and(|f| f.error.is_none()));
    }

    /// A barrier syncs a store only when a write ended there since its last
    /// successful sync (the first barrier always syncs).
    #[test]
    fn a_barrier_skips_a_store_with_nothing_new_to_sync() {
        let mut c = core(u64::MAX);
        // Flaky's first flush fails; forget it (this test is not about it).
        write(&mut c, 1);
        let b = c.flush_backends(0).unwrap();
        settle(&mut c);
        assert_eq!(c.flushed.pop_front(), Some((b, Some(IoError::Io))));
        c.sync_failed[0] = false;
        // Written since the last successful sync (none yet): synced.
        let b = c.flush_backends(0).unwrap();
        assert_eq!((c.syncs_skipped, c.in_flight[0]), (0, 1));
        settle(&mut c);
        assert_eq!(c.flushed.pop_front(), Some((b, None)));
        // Nothing written since: no flush IO, the barrier is done at once.
        let b = c.flush_backends(0).unwrap();
        assert_eq!(c.flushed.pop_front(), Some((b, None)));
        assert_eq!((c.syncs_skipped, c.in_flight[0]), (1, 0));
        // Written again: synced again.
        write(&mut c, 2);
        let b = c.flush_backends(0).unwrap();
        assert_eq!((c.syncs_skipped, c.in_flight[0]), (1, 1));
        settle(&mut c);
        assert_eq!(c.flushed.pop_front(), Some((b, None)));
    }
}
