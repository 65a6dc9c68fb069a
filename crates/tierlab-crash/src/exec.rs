//! A deterministic executor that moves real bytes: a policy over in-memory
//! stores, device IOs completing after seeded random delays (so out of
//! order, as real devices complete them), timers in time order. It records
//! what a crash could depend on (`Log`): every device write with its bytes,
//! when it was submitted and completed, every device flush, and the host's
//! acknowledgements and FLUSHes — what dm-log-writes records for Linux.
//!
//! A host FLUSH is answered as `tierlab serve` answers NBD FLUSH: the
//! policy completes it, then every store is flushed as one barrier, and
//! only then is the FLUSH done.

use std::collections::HashMap;

use tierlab_core::apply::{OutboxSink, PolicyError};
use tierlab_core::policy::{BufRef, HostIo, IoError, Outbox, Policy};
use tierlab_core::testkit::{Events, Next, WriteFaults, end_device_io};
use tierlab_core::{DeviceIo, Op, TimeNs};

use crate::Rng;
use crate::media::{Media, PhysOp};

/// One device write (or trim, whose data is zeros) as the log keeps it.
pub struct LoggedWrite {
    /// The physical store (`Media`): a plain device's own, or an array
    /// member or bitmap.
    pub device: usize,
    pub offset_bytes: u64,
    /// None for a trim (reads back as zeros).
    pub data: Option<Vec<u8>>,
    pub len_bytes: u64,
    /// Log positions (indices into `Log::events`).
    pub submitted_at: usize,
    pub completed_at: Option<usize>,
    /// The device answered it with an error at this log position: it may
    /// have landed, until a flush of its store submitted after the error
    /// completes — from then on it is taken as not landed (a write that
    /// failed does not land later, over newer writes).
    pub failed_at: Option<usize>,
}

/// A device flush: writes to `device` completed before `submitted_at`
/// are durable once it completes.
pub struct LoggedFlush {
    /// The physical store, as for a write.
    pub device: usize,
    pub submitted_at: usize,
    pub completed_at: Option<usize>,
}

/// A host write, acknowledged at `acked_at` (if it was).
pub struct LoggedHostWrite {
    pub seq: u64,
    pub first_sector: u64,
    pub sectors: u64,
    pub issued_at: usize,
    pub acked_at: Option<usize>,
}

/// A host FLUSH: covers the host writes acknowledged before `issued_at`.
pub struct LoggedHostFlush {
    pub issued_at: usize,
    pub done_at: Option<usize>,
}

#[derive(Clone, Copy, Debug)]
pub enum Event {
    WriteSubmitted(usize),
    WriteCompleted(usize),
    WriteFailed(usize),
    FlushSubmitted(usize),
    FlushCompleted(usize),
    HostWriteIssued(usize),
    HostWriteAcked(usize),
    HostFlushIssued(usize),
    HostFlushDone(usize),
}

#[derive(Default)]
pub struct Log {
    /// Everything in the order it happened; a crash point is a prefix.
    pub events: Vec<Event>,
    pub writes: Vec<LoggedWrite>,
    pub flushes: Vec<LoggedFlush>,
    pub host_writes: Vec<LoggedHostWrite>,
    pub host_flushes: Vec<LoggedHostFlush>,
}

impl Log {
    fn push(&mut self, e: Event) -> usize {
        self.events.push(e);
        self.events.len() - 1
    }
}

/// Whose a device IO is.
#[derive(Clone, Copy)]
enum Owner {
    Policy(u64),
    /// Part of the barrier that finishes host FLUSH `host_id`.
    Barrier(u64),
}

struct DeviceIoInFlight {
    device: usize,
    owner: Owner,
    io: DeviceIo,
    /// A write's bytes (taken at submission), a read's destination.
    data: Option<Vec<u8>>,
    target: Option<BufRef>,
    /// Index into `Log::writes` / `Log::flushes`.
    logged: Option<usize>,
    /// The store has died (`fail_writes_from`): this IO fails.
    fails: bool,
}

pub struct HostInFlight {
    pub op: Op,
    pub offset_bytes: u64,
    pub size_bytes: u32,
    pub buf: Vec<u8>,
    /// Index into `Log::host_writes` / `Log::host_flushes`.
    logged: Option<usize>,
    /// Policy completed a FLUSH: barrier device flushes still in flight.
    barrier_left: Option<usize>,
    /// One of those flushes failed: the FLUSH fails.
    barrier_failed: bool,
}

pub struct Exec {
    pub policy: Box<dyn Policy>,
    pub media: Media,
    out: Outbox,
    rng: Rng,
    max_delay_ns: u64,
    /// Device IOs in flight (keys into `devices`) and timers: the shared
    /// random-delay core (its step count bounds a run).
    q: Events<u64>,
    devices: HashMap<u64, DeviceIoInFlight>,
    next_device_io: u64,
    pub host: HashMap<u64, HostInFlight>,
    next_host_id: u64,
    staging: HashMap<u64, Vec<u8>>,
    /// Host IOs the stack answered, with their buffers, oldest first.
    pub finished: Vec<(u64, HostInFlight)>,
    pub log: Option<Log>,
    /// A protocol error the policy made (the run stops at the first).
    pub error: Option<String>,
    /// Device writes that fail (surprise shutdown with real errors, or one
    /// transient error): the shared test kit's plan.
    pub faults: WriteFaults,
    /// The policy did not survive a failed device IO (fail-stop): the
    /// process would stop here, so the run does.
    pub stopped: bool,
    /// Host IOs the policy failed (answered with an error).
    pub host_ios_failed: u64,
}

impl Exec {
    pub fn new(policy: Box<dyn Policy>, media: Media, seed: u64, max_delay_ns: u64) -> Exec {
        Exec {
            policy,
            media,
            out: Outbox {
                wants_data: true,
                ..Default::default()
            },
            rng: Rng(seed),
            max_delay_ns: max_delay_ns.max(1),
            q: Events::default(),
            devices: HashMap::new(),
            next_device_io: 0,
            host: HashMap::new(),
            next_host_id: 0,
            staging: HashMap::new(),
            finished: Vec::new(),
            log: None,
            error: None,
            faults: WriteFaults::default(),
            stopped: false,
            host_ios_failed: 0,
        }
    }

    pub fn with_log(mut self) -> Exec {
        self.log = Some(Log::default());
        self
    }

    /// The current time, ns.
    pub fn now_ns(&self) -> TimeNs {
        self.q.now_ns
    }

    /// Events handled: bounds a policy that never finishes.
    pub fn steps(&self) -> u64 {
        self.q.steps
    }

    /// Hands a host IO to the policy. `write_seq` (for a write) is the
    /// sequence number its data is stamped with, for the log.
    pub fn issue(
        &mut self,
        op: Op,
        offset_bytes: u64,
        buf: Vec<u8>,
        size_bytes: u32,
        write_seq: u64,
    ) -> u64 {
        let id = self.next_host_id;
        self.next_host_id += 1;
        let mut logged = None;
        if let Some(log) = &mut self.log {
            match op {
                Op::Write => {
                    let w = log.host_writes.len();
                    let at = log.push(Event::HostWriteIssued(w));
                    log.host_writes.push(LoggedHostWrite {
                        seq: write_seq,
                        first_sector: offset_bytes / crate::stamp::SECTOR_BYTES as u64,
                        sectors: size_bytes as u64 / crate::stamp::SECTOR_BYTES as u64,
                        issued_at: at,
                        acked_at: None,
                    });
                    logged = Some(w);
                }
                Op::Flush => {
                    let f = log.host_flushes.len();
                    let at = log.push(Event::HostFlushIssued(f));
                    log.host_flushes.push(LoggedHostFlush {
                        issued_at: at,
                        done_at: None,
                    });
                    logged = Some(f);
                }
                _ => {}
            }
        }
        self.host.insert(
            id,
            HostInFlight {
                op,
                offset_bytes,
                size_bytes,
                buf,
                logged,
                barrier_left: None,
                barrier_failed: false,
            },
        );
        let io = HostIo {
            id,
            op,
            offset_bytes,
            size_bytes,
            tenant: 0,
        };
        self.policy.on_host_io(self.now_ns(), io, &mut self.out);
        self.apply();
        id
    }

    fn apply(&mut self) {
        let mut out = std::mem::take(&mut self.out);
        let name = self.policy.name().to_string();
        if let Err(e) = out.apply(&name, self.now_ns(), self) {
            self.error.get_or_insert(e.to_string());
        }
        self.out = out;
    }

    /// True while anything can still happen.
    pub fn has_events(&self) -> bool {
        !self.q.is_empty()
    }

    /// Device IOs in flight.
    pub fn device_ios_in_flight(&self) -> usize {
        self.devices.len()
    }

    /// Handles the next event (a device completion or a timer). False if
    /// there is none.
    pub fn step(&mut self) -> bool {
        match self.q.pop_next() {
            None => return false,
            Some(Next::Timer(id)) => {
                self.policy.on_timer(self.now_ns(), id, &mut self.out);
                self.apply();
            }
            Some(Next::Device(key)) => self.device_done(key),
        }
        true
    }

    fn device_done(&mut self, key: u64) {
        let mut d = self
            .devices
            .remove(&key)
            .expect("a due device IO is in flight");
        let (dev, io) = (d.device, d.io);
        if d.fails {
            return self.device_failed(d);
        }
        let r = match io.op {
            Op::Write | Op::Trim => self.media.write(
                dev,
                io.offset_bytes,
                d.data.as_deref(),
                io.size_bytes as usize,
            ),
            Op::Read => {
                let mut bytes = vec![0u8; io.size_bytes as usize];
                let r = self.media.read(dev, io.offset_bytes, &mut bytes);
                if let Some(t) = d.target {
                    self.copy_in(t, &bytes);
                }
                r
            }
            Op::Flush => Ok(()), // done at submission
        };
        if let Err(e) = r {
            self.error.get_or_insert(e.to_string());
        }
        // An array's member writes happen now (a plain store's write was
        // logged at submission).
        self.log_physical(self.media.store_of(dev).is_none());
        if let (Some(log), Some(i)) = (&mut self.log, d.logged.take()) {
            if io.op == Op::Flush {
                let at = log.push(Event::FlushCompleted(i));
                log.flushes[i].completed_at = Some(at);
            } else {
                let at = log.push(Event::WriteCompleted(i));
                log.writes[i].completed_at = Some(at);
            }
        }
        match d.owner {
            Owner::Policy(tag) => {
                let now = self.now_ns();
                end_device_io(&mut *self.policy, now, dev, tag, false, &mut self.out);
                self.apply();
            }
            Owner::Barrier(host_id) => self.barrier_flush_done(host_id, false),
        }
    }

    /// One store flush of host FLUSH `host_id`'s barrier ended (`failed`:
    /// with an error). The FLUSH ends with the last: done, or failed if
    /// any of them failed (then it covers nothing).
    fn barrier_flush_done(&mut self, host_id: u64, failed: bool) {
        let h = self
            .host
            .get_mut(&host_id)
            .expect("a barrier's FLUSH is in flight");
        h.barrier_failed |= failed;
        let left = h.barrier_left.as_mut().unwrap();
        *left -= 1;
        if *left > 0 {
            return;
        }
        let h = self.host.remove(&host_id).unwrap();
        if h.barrier_failed {
            self.host_ios_failed += 1;
        } else if let (Some(log), Some(f)) = (&mut self.log, h.logged) {
            let at = log.push(Event::HostFlushDone(f));
            log.host_flushes[f].done_at = Some(at);
        }
        self.finished.push((host_id, h));
    }

    fn start(&mut self, device: usize, io: DeviceIo, target: Option<BufRef>, owner: Owner) {
        let data = match (io.op, target) {
            (Op::Write, Some(src)) => match self.copy_out(src, io.size_bytes as usize) {
                Ok(d) => Some(d),
                Err(e) => {
                    self.error.get_or_insert(e.to_string());
                    Some(vec![0; io.size_bytes as usize])
                }
            },
            (Op::Write, None) => Some(vec![0; io.size_bytes as usize]),
            _ => None,
        };
        let mut logged = None;
        let store = self.media.store_of(device);
        let fails = match io.op {
            Op::Write | Op::Trim => self.faults.write_fails(),
            Op::Flush => self.faults.flush_fails(),
            Op::Read => false,
        };
        if store.is_none() && io.op == Op::Flush && !fails {
            // An array flushes its members (and clears its bitmap) now.
            if let Err(e) = self.media.flush(device) {
                self.error.get_or_insert(e.to_string());
            }
            self.log_physical(true);
        }
        if let (Some(log), Some(device)) = (&mut self.log, store) {
            match io.op {
                Op::Write | Op::Trim => {
                    let w = log.writes.len();
                    let at = log.push(Event::WriteSubmitted(w));
                    log.writes.push(LoggedWrite {
                        device,
                        offset_bytes: io.offset_bytes,
                        data: data.clone(),
                        len_bytes: io.size_bytes as u64,
                        submitted_at: at,
                        completed_at: None,
                        failed_at: None,
                    });
                    logged = Some(w);
                }
                Op::Flush => {
                    let f = log.flushes.len();
                    let at = log.push(Event::FlushSubmitted(f));
                    log.flushes.push(LoggedFlush {
                        device,
                        submitted_at: at,
                        completed_at: None,
                    });
                    logged = Some(f);
                }
                Op::Read => {}
            }
        }
        let key = self.next_device_io;
        self.next_device_io += 1;
        self.devices.insert(
            key,
            DeviceIoInFlight {
                device,
                owner,
                io,
                data,
                target,
                logged,
                fails,
            },
        );
        self.q.submit(&mut self.rng, self.max_delay_ns, key);
    }

    /// A device IO that fails ends: nothing of it is applied to the stores
    /// the run reads, a failed write is logged as failed (a crash state may
    /// have it landed, whole or torn, until a later flush of its store —
    /// never durably), and the policy is told.
    fn device_failed(&mut self, mut d: DeviceIoInFlight) {
        if let (Some(log), Some(w)) = (&mut self.log, d.logged.take())
            && d.io.op != Op::Flush
        {
            let at = log.push(Event::WriteFailed(w));
            log.writes[w].failed_at = Some(at);
        }
        match d.owner {
            Owner::Policy(tag) => {
                let now = self.now_ns();
                if end_device_io(&mut *self.policy, now, d.device, tag, true, &mut self.out) {
                    self.apply();
                } else {
                    self.stopped = true;
                }
            }
            Owner::Barrier(host_id) => self.barrier_flush_done(host_id, true),
        }
    }

    /// Logs the physical writes and flushes the media journaled (each as
    /// submitted and completed at once), or drops them when `keep` is false.
    fn log_physical(&mut self, keep: bool) {
        let ops = self.media.take_journal();
        let Some(log) = self.log.as_mut().filter(|_| keep) else {
            return;
        };
        for op in ops {
            match op {
                PhysOp::Write {
                    store,
                    offset_bytes,
                    data,
                } => {
                    let w = log.writes.len();
                    let at = log.push(Event::WriteSubmitted(w));
                    log.writes.push(LoggedWrite {
                        device: store,
                        offset_bytes,
                        len_bytes: data.len() as u64,
                        data: Some(data),
                        submitted_at: at,
                        completed_at: None,
                        failed_at: None,
                    });
                    let at = log.push(Event::WriteCompleted(w));
                    log.writes[w].completed_at = Some(at);
                }
                PhysOp::Flush { store } => {
                    let f = log.flushes.len();
                    let at = log.push(Event::FlushSubmitted(f));
                    log.flushes.push(LoggedFlush {
                        device: store,
                        submitted_at: at,
                        completed_at: None,
                    });
                    let at = log.push(Event::FlushCompleted(f));
                    log.flushes[f].completed_at = Some(at);
                }
            }
        }
    }

    fn copy_out(&self, src: BufRef, len: usize) -> Result<Vec<u8>, PolicyError> {
        let fail = |message: String| PolicyError::Other {
            policy: self.policy.name().to_string(),
            message,
        };
        let (buf, off) = match src {
            BufRef::Host {
                host_id,
                offset_bytes,
            } => (
                self.host.get(&host_id).map(|h| &h.buf).ok_or_else(|| {
                    fail(format!(
                        "a device write from host IO {host_id}, which is not in flight"
                    ))
                })?,
                offset_bytes,
            ),
            BufRef::Staging { id, offset_bytes } => (
                self.staging.get(&id).ok_or_else(|| {
                    fail(format!(
                        "a device write from staging buffer {id}, which does not exist"
                    ))
                })?,
                offset_bytes,
            ),
            BufRef::Zeros => return Ok(vec![0; len]),
        };
        let off = off as usize;
        buf.get(off..off + len).map(|s| s.to_vec()).ok_or_else(|| {
            fail(format!(
                "a device write of {len} bytes at {off} of a {}-byte buffer",
                buf.len()
            ))
        })
    }

    fn copy_in(&mut self, dst: BufRef, data: &[u8]) {
        match dst {
            BufRef::Host {
                host_id,
                offset_bytes,
            } => {
                let off = offset_bytes as usize;
                let name = self.policy.name().to_string();
                match self.host.get_mut(&host_id) {
                    Some(h) if h.buf.len() >= off + data.len() => {
                        h.buf[off..off + data.len()].copy_from_slice(data)
                    }
                    _ => {
                        self.error.get_or_insert(format!(
                            "{name}: a device read for host IO {host_id} that is not in flight or too small"
                        ));
                    }
                }
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
    }
}

impl OutboxSink for Exec {
    type Error = PolicyError;

    fn device_count(&self) -> usize {
        self.media.devices()
    }

    fn device_capacity_bytes(&self, device: usize) -> u64 {
        self.media.capacity_bytes(device)
    }

    fn submit(
        &mut self,
        _now: TimeNs,
        device: usize,
        io: DeviceIo,
        data: Option<BufRef>,
    ) -> Result<(), PolicyError> {
        self.start(device, io, data, Owner::Policy(io.tag));
        Ok(())
    }

    fn complete(&mut self, _now: TimeNs, host_id: u64, _tier: u16) -> Result<(), PolicyError> {
        let policy = self.policy.name().to_string();
        let Some(h) = self.host.get_mut(&host_id) else {
            return Err(PolicyError::Other {
                policy,
                message: format!("host IO {host_id} completed twice or never issued"),
            });
        };
        if h.barrier_left.is_some() {
            return Err(PolicyError::Other {
                policy,
                message: format!("host FLUSH {host_id} completed twice"),
            });
        }
        if h.op == Op::Flush {
            // As `tierlab serve` answers NBD FLUSH: every store flushed
            // after the policy is done with it.
            h.barrier_left = Some(self.media.devices());
            for d in 0..self.media.devices() {
                let io = DeviceIo {
                    tag: 0,
                    op: Op::Flush,
                    offset_bytes: 0,
                    size_bytes: 0,
                };
                self.start(d, io, None, Owner::Barrier(host_id));
            }
            return Ok(());
        }
        let h = self.host.remove(&host_id).unwrap();
        if let (Some(log), Some(w)) = (&mut self.log, h.logged) {
            let at = log.push(Event::HostWriteAcked(w));
            log.host_writes[w].acked_at = Some(at);
        }
        self.finished.push((host_id, h));
        Ok(())
    }

    fn fail_host(
        &mut self,
        _now: TimeNs,
        host_id: u64,
        _error: IoError,
    ) -> Result<(), PolicyError> {
        let Some(h) = self.host.remove(&host_id) else {
            return Err(PolicyError::Other {
                policy: self.policy.name().to_string(),
                message: format!("host IO {host_id} failed twice or never issued"),
            });
        };
        // Not acknowledged: nothing is logged for it.
        self.host_ios_failed += 1;
        self.finished.push((host_id, h));
        Ok(())
    }

    fn timer(&mut self, _now: TimeNs, at_ns: TimeNs, timer_id: u64) {
        // (`now` is the core's time: a past time fires now.)
        self.q.set_timer(at_ns, timer_id);
    }

    fn cap_tenant(&mut self, _tenant: u32, _iops: Option<f64>) -> Result<(), PolicyError> {
        Ok(()) // one host, no caps to carry out
    }

    fn release(&mut self, staging_id: u64) {
        self.staging.remove(&staging_id);
    }

    fn fill(&mut self, staging_id: u64, bytes: Vec<u8>) {
        self.staging.insert(staging_id, bytes);
    }
}
