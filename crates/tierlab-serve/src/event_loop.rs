//! The serving loop: accept, read requests, hand them to the stack, reply
//! as the stack finishes them, and stop cleanly.
//!
//! Each NBD request becomes one host IO of the stack (a WRITE_ZEROES
//! becomes writes of zeros, at most `ZERO_CHUNK_BYTES` each), identified
//! by its `Pending` slot. Replies that need durability (FLUSH, FUA) wait
//! for a barrier that fdatasyncs every backing store.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mio::{Events, Interest, Token};
use tierlab_core::policy::IoError;
use tierlab_core::{NS_PER_S, Op, TimeNs};
use tierlab_nbd::{Command, Connection, Errno, Event, Request};
use tierlab_real::datapath::{Finished, HostRequest};

use crate::conn::{Conn, Context, RECV_CHUNK_BYTES, Stream};
use crate::record::TraceRecord;
use crate::report::{ServeReport, write_into};
use crate::{FIRST_CONN, IO_WAKE, LISTENER, Listener, SIGNALS, ServeError, Server, TIMER, WAKER};

/// When stopping, clients get this long to disconnect after their last
/// request was answered (later requests are answered ESHUTDOWN); then
/// their connections are closed.
const STOP_GRACE_NS: TimeNs = 2 * NS_PER_S;

/// WRITE_ZEROES is written in pieces of at most this size...
const ZERO_CHUNK_BYTES: u64 = 1 << 20;
/// ...with at most this many in flight per request (bounded memory).
const ZERO_CHUNKS_IN_FLIGHT: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
}

/// One NBD request in the stack.
struct Pending {
    conn: Token,
    handle: u64,
    kind: Kind,
    fua: bool,
    /// Host IOs of this request in the stack (or held).
    parts: u32,
    /// WRITE_ZEROES: the part of the range not yet handed to the stack.
    zero_next_bytes: u64,
    zero_end_bytes: u64,
    /// FUA: the policy's FLUSH for this write was issued.
    fua_policy_flushed: bool,
    /// A part failed: the request is answered with this error once its
    /// other parts are done.
    error: Option<IoError>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Serving,
    /// No new connections or requests; in-flight ones finish.
    Stopping,
    /// The policy writes its dirty data back.
    Draining,
    /// The final barrier: every store fdatasync'ed.
    Syncing(u64),
    Done,
}

/// `Finished::user` of a warm stop's FLUSH (no pending request).
const STOP_FLUSH: u64 = u64::MAX;

struct Loop {
    server: Server,
    conns: HashMap<Token, Conn>,
    next_token: usize,
    next_conn_id: u32,
    pending: Vec<Option<Pending>>,
    free: Vec<usize>,
    /// Host IOs waiting for an overlapping write or trim, in order.
    held: VecDeque<HostRequest>,
    /// Barrier id → pending requests answered when it completes.
    barriers: HashMap<u64, Vec<usize>>,
    record: Option<TraceRecord>,
    report: ServeReport,
    host_ios: u64,
    issued_bytes: u64,
    phase: Phase,
    stop_requests: u32,
    stop_at_ns: TimeNs,
    /// A warm stop's FLUSH of the policy is in flight.
    stop_flush_pending: bool,
    /// The stop only flushes (the policy restarts warm), no write-back.
    warm_stop: bool,
    next_stats_ns: TimeNs,
    stats_interval_ns: TimeNs,
    interrupted: bool,
    /// When the timerfd is armed to fire (None: disarmed).
    timer_deadline_ns: Option<TimeNs>,
    /// How long to look for events before sleeping in epoll (zero: sleep
    /// at once); see `wait_poll`.
    wait_poll: Duration,
}

pub(crate) fn run(mut server: Server) -> Result<ServeReport, ServeError> {
    let record = match &server.opts.record {
        Some(p) => Some(TraceRecord::create(p)?),
        None => None,
    };
    if let Some(dir) = &server.opts.out_dir {
        std::fs::create_dir_all(dir).map_err(|source| ServeError::File {
            flag: "--out",
            path: dir.clone(),
            action: "cannot create the folder",
            source,
        })?;
    }
    let e = &server.export[0];
    let report = ServeReport {
        uri: server.uri.clone(),
        export_size_bytes: e.size_bytes,
        block_min_bytes: e.block_min_bytes,
        block_preferred_bytes: e.block_preferred_bytes,
        block_max_bytes: e.block_max_bytes,
        tiers: server.tier_names.clone(),
        ..Default::default()
    };
    let stats_interval_ns = (server.opts.stats_interval_s * NS_PER_S as f64).round() as TimeNs;
    server.core.recording = true;
    let mut l = Loop {
        server,
        conns: HashMap::new(),
        next_token: FIRST_CONN,
        next_conn_id: 0,
        pending: Vec::new(),
        free: Vec::new(),
        held: VecDeque::new(),
        barriers: HashMap::new(),
        record,
        report,
        host_ios: 0,
        issued_bytes: 0,
        phase: Phase::Serving,
        stop_requests: 0,
        stop_at_ns: 0,
        stop_flush_pending: false,
        warm_stop: false,
        next_stats_ns: stats_interval_ns,
        stats_interval_ns,
        interrupted: false,
        timer_deadline_ns: None,
        wait_poll: Duration::ZERO,
    };
    // On this (the loop's) thread: none if it may run on one CPU only.
    l.wait_poll =
        tierlab_real::engine::wait_poll(Duration::from_micros(l.server.opts.wait_poll_us.into()));
    if let Err(e) = l.serve() {
        l.server.core.abandon();
        // The outputs of what ran, then the error.
        let _ = l.write_outputs();
        return Err(e);
    }
    let now = l.server.core.now_ns();
    l.report.serving_s = now as f64 / NS_PER_S as f64;
    l.report.syncs_skipped = l.server.core.syncs_skipped;
    if let Some(r) = l.record.take() {
        l.report.recorded_ios = r.finish()?;
    }
    l.write_outputs()?;
    if let Some(Listener::Unix(_, path)) = l.server.listener.take() {
        let _ = std::fs::remove_file(path);
    }
    Ok(l.report)
}

impl Loop {
    fn serve(&mut self) -> Result<(), ServeError> {
        let mut events = Events::with_capacity(256);
        loop {
            let phase = self.phase;
            self.settle()?;
            self.write_all_out();
            self.resume_paused()?;
            self.close_finished_conns();
            #[cfg(debug_assertions)]
            self.check_invariants();
            if self.advance_phase()? {
                return Ok(());
            }
            if self.phase != phase {
                continue; // the next phase may start at once
            }
            self.server.core.io.submit_pending()?;
            let (now_please, deadline) = self.deadline();
            // Deadlines go to the timerfd (nanoseconds); epoll's own
            // timeout counts whole milliseconds.
            if !now_please {
                self.arm_timer(deadline);
            }
            let epoll_timeout = now_please.then_some(Duration::ZERO);
            // Poll before sleeping (ServeOptions::wait_poll_us). The
            // registrations are edge-triggered: events a look returned
            // are not returned again, so they are served, not re-polled.
            let polled = if now_please {
                Ok(false)
            } else {
                self.poll_before_sleep(&mut events)
            };
            let r = match polled {
                Ok(true) => Ok(()),
                Ok(false) => self.server.poll.poll(&mut events, epoll_timeout),
                Err(e) => Err(e),
            };
            match r {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(ServeError::Sys {
                        call: "epoll_wait",
                        source,
                    });
                }
            }
            // What fell due while asleep (device completions, model
            // events, timers) reaches the policy before the requests that
            // woke us: a completion must not be stamped with a later
            // arrival's time. (Nothing can be due when no device IO or
            // timer was pending: then this costs nothing.)
            let core = &self.server.core;
            if core.device_ios_in_flight() > 0 || core.next_timer_ns().is_some() {
                self.settle()?;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept()?,
                    IO_WAKE => self.server.core.io.clear_wake(),
                    TIMER => self.clear_timer(),
                    SIGNALS => self.read_signals(),
                    WAKER => {
                        if self.server.stop.swap(false, Ordering::SeqCst) {
                            self.request_stop("stop requested");
                        }
                    }
                    token => {
                        if ev.is_writable()
                            && let Some(c) = self.conns.get_mut(&token)
                        {
                            c.write_out();
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.read_conn(token)?;
                        }
                    }
                }
            }
        }
    }

    /// Looks for events without sleeping, yielding the CPU between looks,
    /// for up to `wait_poll` or until the next deadline; true when it
    /// found some (they are in `events`). Why: a thread asleep in epoll
    /// is woken from idle for each request, tens of µs on a VM that halts
    /// idle vCPUs (docs/serve.md, "Waiting for requests").
    fn poll_before_sleep(&mut self, events: &mut mio::Events) -> io::Result<bool> {
        if self.wait_poll.is_zero() {
            return Ok(false);
        }
        // Not past the next deadline: the timer's work comes first.
        let now_ns = self.server.core.now_ns();
        let poll = self.timer_deadline_ns.map_or(self.wait_poll, |t| {
            self.wait_poll
                .min(Duration::from_nanos(t.saturating_sub(now_ns)))
        });
        let registry = &mut self.server.poll;
        tierlab_real::engine::poll_yielding(poll, || {
            registry.poll(events, Some(Duration::ZERO))?;
            Ok(!events.is_empty())
        })
    }

    /// Arms the timerfd to fire at `deadline` (ns since the core started;
    /// None disarms it). Only when the deadline changed: most iterations
    /// make no system call here.
    fn arm_timer(&mut self, deadline: Option<TimeNs>) {
        if deadline == self.timer_deadline_ns {
            return;
        }
        self.timer_deadline_ns = deadline;
        let now = self.server.core.now_ns();
        // At least 1 ns: a zero value would disarm the timer.
        let after = deadline.map_or(Duration::ZERO, |t| {
            Duration::from_nanos(t.saturating_sub(now).max(1))
        });
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: a valid itimerspec and a descriptor we own.
        unsafe {
            libc::timerfd_settime(
                self.server.timer.as_raw_fd(),
                0,
                &spec,
                std::ptr::null_mut(),
            );
        }
    }

    fn clear_timer(&mut self) {
        self.timer_deadline_ns = None; // it fired: disarmed
        let mut v = [0u8; 8];
        // SAFETY: reading 8 bytes into an 8-byte buffer (non-blocking).
        unsafe { libc::read(self.server.timer.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
    }

    /// How long the loop may sleep: until the next timer, model event or
    /// stats write — zero when completions are already waiting.
    /// When the loop must wake at the latest (absolute ns), and whether it
    /// must not sleep at all (work is waiting).
    fn deadline(&self) -> (bool, Option<TimeNs>) {
        let core = &self.server.core;
        if core.io.has_ready() || !core.finished.is_empty() || !core.flushed.is_empty() {
            return (true, None);
        }
        // Outputs and --record checkpoints are due every stats interval.
        let periodic = self.server.opts.out_dir.is_some() || self.record.is_some();
        let stats = periodic.then_some(self.next_stats_ns);
        let grace = (self.phase != Phase::Serving && !self.conns.is_empty())
            .then_some(self.stop_at_ns + STOP_GRACE_NS + 1);
        let timer = (!self.warm_stop).then(|| core.next_timer_ns()).flatten();
        let at = [timer, core.next_model_event_ns(), stats, grace]
            .into_iter()
            .flatten()
            .min();
        (at.is_some_and(|t| t <= core.now_ns()), at)
    }

    /// Moves the stack forward without sleeping: completions, timers,
    /// finished host IOs (replies), barriers, held requests.
    fn settle(&mut self) -> Result<(), ServeError> {
        loop {
            let core = &mut self.server.core;
            let now = core.now_ns();
            let mut progressed = core.poll_completions()?;
            // A warm stop fires no more policy timers: idle cleaning would
            // turn it into a write-back, or start IO after the final sync.
            if !self.warm_stop {
                core.fire_timers(now)?;
            }
            core.sample(now);
            core.caps.clear(); // no tenants to cap when serving
            while let Some(f) = self.server.core.finished.pop_front() {
                progressed = true;
                self.finished(f)?;
            }
            while let Some((b, error)) = self.server.core.flushed.pop_front() {
                progressed = true;
                if self.phase == Phase::Syncing(b) {
                    if error.is_some() {
                        return Err(ServeError::FinalSync {
                            device_errors: self.server.core.device_error_messages.clone(),
                        });
                    }
                    self.phase = Phase::Done;
                }
                for p in self.barriers.remove(&b).unwrap_or_default() {
                    match error {
                        // A store's sync failed: the FLUSH (or FUA write)
                        // is not durable, and says so.
                        Some(e) => self.answer_error(p, e),
                        None => self.answer(p, None),
                    }
                }
            }
            progressed |= self.issue_held()?;
            if now >= self.next_stats_ns && self.stats_interval_ns > 0 {
                while self.next_stats_ns <= now {
                    self.next_stats_ns += self.stats_interval_ns;
                }
                if self.server.opts.out_dir.is_some() {
                    self.write_outputs()?;
                }
                if let Some(r) = &mut self.record {
                    r.checkpoint()?;
                }
            }
            if !progressed {
                return Ok(());
            }
        }
    }

    fn accept(&mut self) -> Result<(), ServeError> {
        loop {
            let accepted = match &self.server.listener {
                Some(Listener::Tcp(l)) => l.accept().map(|(s, a)| {
                    let _ = s.set_nodelay(true);
                    (Stream::Tcp(s), a.to_string())
                }),
                Some(Listener::Unix(l, _)) => l
                    .accept()
                    .map(|(s, _)| (Stream::Unix(s), "unix socket".to_string())),
                None => return Ok(()),
            };
            let (mut stream, peer) = match accepted {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of descriptors or the like: the listener stays, the
                // client retries.
                Err(e) => {
                    eprintln!("tierlab serve: accept: {e}");
                    return Ok(());
                }
            };
            let token = Token(self.next_token);
            self.next_token += 1;
            if let Err(e) = self.server.poll.registry().register(
                stream.source(),
                token,
                Interest::READABLE | Interest::WRITABLE,
            ) {
                eprintln!("tierlab serve: epoll: a new connection: {e}");
                continue;
            }
            let id = self.next_conn_id;
            self.next_conn_id += 1;
            if self.server.opts.verbose {
                eprintln!("tierlab serve: conn{id}: connected ({peer})");
            }
            let mut conn = Conn {
                token,
                id,
                peer,
                stream,
                proto: Connection::new(self.server.export.clone()),
                contexts: Vec::new(),
                paused: false,
                gone: None,
                in_flight: 0,
                requests: 0,
            };
            conn.write_out(); // the greeting
            self.conns.insert(token, conn);
            self.report.connections += 1;
            self.report.connections_open = self.conns.len() as u64;
            self.report.connections_open_max = self
                .report
                .connections_open_max
                .max(self.conns.len() as u64);
            // Data may already be there (edge-triggered: no new edge).
            self.read_conn(token)?;
        }
    }

    /// Reads what the socket has (bounded), and handles every event.
    fn read_conn(&mut self, token: Token) -> Result<(), ServeError> {
        loop {
            let Some(c) = self.conns.get_mut(&token) else {
                return Ok(());
            };
            // While stopping, requests are still read: they are answered
            // ESHUTDOWN (the protocol's way to tell a client to disconnect).
            if c.gone.is_some() || c.proto.is_closing() || self.phase == Phase::Done {
                return Ok(());
            }
            if c.must_pause() {
                c.paused = true;
                return Ok(());
            }
            c.paused = false;
            let buf = c.proto.recv_buffer(RECV_CHUNK_BYTES);
            let room = buf.len();
            match c.stream.read(buf) {
                Ok(0) => {
                    c.gone = Some("the client closed the connection".into());
                    return Ok(());
                }
                Ok(n) => {
                    c.proto.filled(n);
                    self.handle_events(token)?;
                    // A short read drained the socket: bytes that arrive
                    // later raise a new readiness edge, so the read that
                    // would only say EAGAIN is saved (one syscall a batch).
                    if n < room {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    c.gone = Some(format!("read: {e}"));
                    return Ok(());
                }
            }
        }
    }

    fn resume_paused(&mut self) -> Result<(), ServeError> {
        let paused: Vec<Token> = self
            .conns
            .values()
            .filter(|c| c.paused && !c.must_pause())
            .map(|c| c.token)
            .collect();
        for t in paused {
            self.read_conn(t)?;
        }
        Ok(())
    }

    fn handle_events(&mut self, token: Token) -> Result<(), ServeError> {
        loop {
            let Some(c) = self.conns.get_mut(&token) else {
                return Ok(());
            };
            let Some(ev) = c.proto.poll_event() else {
                return Ok(());
            };
            match ev {
                Event::Ready { meta_contexts, .. } => {
                    c.contexts = meta_contexts
                        .into_iter()
                        .filter_map(|(id, name)| match name.as_str() {
                            "base:allocation" => Some((id, Context::Allocation)),
                            "tierlab:tier" => Some((id, Context::Tier)),
                            _ => None,
                        })
                        .collect();
                    if self.server.opts.verbose {
                        eprintln!("tierlab serve: conn{}: transmission", c.id);
                    }
                }
                Event::Disconnect { reason, clean } => {
                    if !clean {
                        self.report.protocol_errors += 1;
                    }
                    if self.server.opts.verbose || !clean {
                        eprintln!("tierlab serve: conn{} ({}): {reason}", c.id, c.peer);
                    }
                }
                Event::Request(r) if self.phase != Phase::Serving => {
                    c.proto.reply_error(r.handle, Errno::Shutdown);
                    self.report.requests_refused_stopping += 1;
                }
                Event::Request(r) => {
                    c.requests += 1;
                    c.in_flight += 1;
                    self.start(token, r)?;
                }
            }
        }
    }

    /// What must hold between events (debug builds and tests): each
    /// connection's count of requests in the stack is its pending slots,
    /// and what the protocol layer thinks is unanswered; free slots are
    /// empty; every barrier waits for live pending requests.
    #[cfg(debug_assertions)]
    fn check_invariants(&self) {
        let mut per_conn: HashMap<Token, usize> = HashMap::new();
        for p in self.pending.iter().flatten() {
            *per_conn.entry(p.conn).or_default() += 1;
            assert!(
                p.kind == Kind::WriteZeroes || p.parts <= 1,
                "one host IO per request"
            );
        }
        for c in self.conns.values() {
            let pending = per_conn.get(&c.token).copied().unwrap_or(0);
            assert_eq!(
                c.in_flight, pending,
                "conn{}: in flight vs pending slots",
                c.id
            );
            if c.gone.is_none() && !c.proto.is_closing() {
                assert_eq!(
                    c.proto.requests_in_flight(),
                    c.in_flight,
                    "conn{}: the protocol's unanswered requests",
                    c.id
                );
            }
        }
        for &i in &self.free {
            assert!(self.pending[i].is_none(), "free slot {i} in use");
        }
        for waiters in self.barriers.values() {
            assert!(waiters.iter().all(|&p| self.pending[p].is_some()));
        }
        for h in &self.held {
            assert!(
                self.pending[h.user as usize].is_some(),
                "a held IO without its request"
            );
        }
    }

    fn alloc(&mut self, p: Pending) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.pending[i] = Some(p);
                i
            }
            None => {
                self.pending.push(Some(p));
                self.pending.len() - 1
            }
        }
    }

    /// Starts a request: a host IO (or several), or an answer at once.
    fn start(&mut self, token: Token, r: Request) -> Result<(), ServeError> {
        let counts = &mut self.report.requests;
        counts.fua += r.fua as u64;
        let pending = |kind| Pending {
            conn: token,
            handle: r.handle,
            kind,
            fua: r.fua,
            parts: 1,
            zero_next_bytes: 0,
            zero_end_bytes: 0,
            fua_policy_flushed: false,
            error: None,
        };
        let conn_id = self.conns[&token].id;
        match r.command {
            Command::Read {
                offset_bytes,
                len_bytes,
            } => {
                counts.read += 1;
                self.report.bytes_read += len_bytes as u64;
                let p = self.alloc(pending(Kind::Read));
                let buf = vec![0u8; len_bytes as usize];
                self.submit(p, Op::Read, offset_bytes, len_bytes, buf, false, conn_id)
            }
            Command::Write { offset_bytes, data } => {
                counts.write += 1;
                self.report.bytes_written += data.len() as u64;
                let p = self.alloc(pending(Kind::Write));
                let len = data.len() as u32;
                self.submit(p, Op::Write, offset_bytes, len, data, r.fua, conn_id)
            }
            Command::Flush => {
                counts.flush += 1;
                let p = self.alloc(pending(Kind::Flush));
                self.submit(p, Op::Flush, 0, 0, Vec::new(), false, conn_id)
            }
            Command::Trim {
                offset_bytes,
                len_bytes,
            } => {
                counts.trim += 1;
                self.report.bytes_trimmed += len_bytes as u64;
                let p = self.alloc(pending(Kind::Trim));
                self.submit(
                    p,
                    Op::Trim,
                    offset_bytes,
                    len_bytes,
                    Vec::new(),
                    r.fua,
                    conn_id,
                )
            }
            Command::WriteZeroes {
                offset_bytes,
                len_bytes,
                ..
            } => {
                // NO_HOLE or not, zeros are written: the range then reads
                // zeros through every tier, and stays allocated.
                counts.write_zeroes += 1;
                self.report.bytes_zeroed += len_bytes as u64;
                let mut pw = pending(Kind::WriteZeroes);
                pw.parts = 0;
                pw.zero_next_bytes = offset_bytes;
                pw.zero_end_bytes = offset_bytes + len_bytes as u64;
                let p = self.alloc(pw);
                self.issue_zeros(p)
            }
            Command::BlockStatus {
                offset_bytes,
                len_bytes,
                req_one,
            } => {
                counts.block_status += 1;
                self.block_status(token, r.handle, offset_bytes, len_bytes, req_one);
                Ok(())
            }
        }
    }

    /// Hands WRITE_ZEROES pieces to the stack while fewer than
    /// `ZERO_CHUNKS_IN_FLIGHT` are in it.
    fn issue_zeros(&mut self, p: usize) -> Result<(), ServeError> {
        loop {
            let Some(pw) = self.pending[p].as_mut() else {
                return Ok(());
            };
            if pw.parts >= ZERO_CHUNKS_IN_FLIGHT || pw.zero_next_bytes >= pw.zero_end_bytes {
                return Ok(());
            }
            let at = pw.zero_next_bytes;
            let n = (pw.zero_end_bytes - at).min(ZERO_CHUNK_BYTES);
            pw.zero_next_bytes += n;
            pw.parts += 1;
            let conn_id = self.conns.get(&pw.conn).map_or(u32::MAX, |c| c.id);
            self.submit(
                p,
                Op::Write,
                at,
                n as u32,
                vec![0u8; n as usize],
                false,
                conn_id,
            )?;
        }
    }

    /// Gives a host IO to the stack, or holds it behind an overlapping
    /// write or trim in flight (and behind anything already held).
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        p: usize,
        op: Op,
        offset_bytes: u64,
        size_bytes: u32,
        buf: Vec<u8>,
        fua: bool,
        conn_id: u32,
    ) -> Result<(), ServeError> {
        let core = &mut self.server.core;
        if let Some(r) = &mut self.record {
            r.write(core.now_ns(), op, offset_bytes, size_bytes, fua, conn_id)?;
        }
        self.issued_bytes += size_bytes as u64;
        let req = HostRequest {
            op,
            offset_bytes,
            size_bytes,
            tenant: 0,
            buf,
            user: p as u64,
            record: true,
        };
        if !self.held.is_empty() || core.conflicts(op, offset_bytes, size_bytes as u64) {
            self.report.requests_held_for_ordering += 1;
            self.held.push_back(req);
            return Ok(());
        }
        self.host_ios += 1;
        core.issue(core.now_ns(), req)?;
        Ok(())
    }

    /// Issues held host IOs, in order, while the first no longer conflicts.
    fn issue_held(&mut self) -> Result<bool, ServeError> {
        let mut any = false;
        while let Some(r) = self.held.front() {
            let core = &mut self.server.core;
            if core.conflicts(r.op, r.offset_bytes, r.size_bytes as u64) {
                break;
            }
            let r = self.held.pop_front().expect("just seen");
            self.host_ios += 1;
            core.issue(core.now_ns(), r)?;
            any = true;
        }
        Ok(any)
    }

    /// A host IO the stack finished.
    fn finished(&mut self, f: Finished) -> Result<(), ServeError> {
        if f.user == STOP_FLUSH {
            if let Some(e) = f.error {
                // A warm stop that cannot make the cache durable is no
                // clean stop: say so (the restart recovers as after a crash).
                return Err(ServeError::StopFlush {
                    error: e,
                    device_errors: self.server.core.device_error_messages.clone(),
                });
            }
            self.stop_flush_pending = false;
            return Ok(());
        }
        let p = f.user as usize;
        let pw = self.pending[p]
            .as_mut()
            .expect("a finished host IO belongs to a pending request");
        pw.parts -= 1;
        if let Some(e) = f.error {
            pw.error.get_or_insert(e);
        }
        match pw.kind {
            Kind::Read => {
                match f.error {
                    Some(e) => self.answer_error(p, e),
                    None => self.answer(p, Some(f.buf)),
                }
                Ok(())
            }
            Kind::WriteZeroes => {
                if pw.error.is_none() && pw.zero_next_bytes < pw.zero_end_bytes {
                    return self.issue_zeros(p);
                }
                if pw.parts > 0 {
                    return Ok(());
                }
                self.durable_then_answer(p)
            }
            Kind::Write | Kind::Trim | Kind::Flush => self.durable_then_answer(p),
        }
    }

    /// Answers now, or after a barrier that syncs every store (FLUSH, FUA).
    /// A FUA write first goes through a FLUSH of the policy: the policy
    /// must put it where a restart reads it (a write-back cache writes it
    /// back; a barrier alone would only sync the cache device).
    fn durable_then_answer(&mut self, p: usize) -> Result<(), ServeError> {
        let pw = self.pending[p].as_mut().expect("pending");
        if let Some(e) = pw.error {
            // Failed: nothing to make durable; answer once no part of it
            // is left in the stack.
            if pw.parts == 0 {
                self.answer_error(p, e);
            }
            return Ok(());
        }
        if pw.fua && pw.kind != Kind::Flush && !pw.fua_policy_flushed {
            pw.fua_policy_flushed = true;
            pw.parts += 1;
            self.host_ios += 1;
            let core = &mut self.server.core;
            let flush = HostRequest::flush(p as u64);
            core.issue(core.now_ns(), flush)?;
            return Ok(());
        }
        let pw = self.pending[p].as_ref().expect("pending");
        if pw.fua || pw.kind == Kind::Flush {
            let core = &mut self.server.core;
            let b = core.flush_backends(core.now_ns())?;
            self.report.durability_barriers += 1;
            self.barriers.entry(b).or_default().push(p);
        } else {
            self.answer(p, None);
        }
        Ok(())
    }

    /// Answers pending request `p` with `error` (NBD EIO or ENOSPC).
    fn answer_error(&mut self, p: usize, error: IoError) {
        self.report.requests_failed += 1;
        let errno = match error {
            IoError::Io => Errno::Io,
            IoError::NoSpace => Errno::NoSpc,
        };
        self.reply(p, |c, handle| c.reply_error(handle, errno));
    }

    /// Sends the reply of pending request `p` (its read data, or done).
    fn answer(&mut self, p: usize, data: Option<Vec<u8>>) {
        self.reply(p, |c, handle| match data {
            Some(d) => c.reply_read(handle, d),
            None => c.reply_ok(handle),
        });
    }

    /// Frees pending request `p`'s slot and sends its reply through `send`
    /// if its client is still there.
    fn reply(&mut self, p: usize, send: impl FnOnce(&mut Connection, u64)) {
        let pw = self.pending[p].take().expect("answered once");
        self.free.push(p);
        match self.conns.get_mut(&pw.conn) {
            Some(c) if c.gone.is_none() => {
                c.in_flight -= 1;
                send(&mut c.proto, pw.handle);
            }
            Some(c) => {
                c.in_flight -= 1;
                self.report.replies_dropped += 1;
            }
            None => self.report.replies_dropped += 1,
        }
    }

    fn block_status(&mut self, token: Token, handle: u64, offset: u64, len: u32, req_one: bool) {
        let Some(c) = self.conns.get_mut(&token) else {
            return;
        };
        let core = &self.server.core;
        let lists: Vec<(u32, Vec<tierlab_nbd::Extent>)> = c
            .contexts
            .iter()
            .map(|&(id, ctx)| {
                let e = crate::extents::extents(
                    &*core.policy,
                    &core.backends,
                    ctx,
                    offset,
                    len,
                    req_one,
                );
                (id, e)
            })
            .collect();
        c.in_flight -= 1;
        if lists.iter().any(|(_, e)| e.is_empty()) {
            c.proto.reply_error(handle, Errno::Inval);
            return;
        }
        let refs: Vec<(u32, &[tierlab_nbd::Extent])> =
            lists.iter().map(|(id, e)| (*id, e.as_slice())).collect();
        c.proto.reply_block_status(handle, &refs);
    }

    fn write_all_out(&mut self) {
        for c in self.conns.values_mut() {
            if c.proto.output_len() > 0 {
                c.write_out();
            }
        }
    }

    /// Closes connections that are done: the protocol says so (after the
    /// client's DISC, every request answered) or the client left — and,
    /// when stopping, those that stay connected `STOP_GRACE_NS` after every
    /// request they made was answered (a client that neither reads nor
    /// disconnects cannot hold the server).
    fn close_finished_conns(&mut self) {
        let stopping = self.phase != Phase::Serving;
        let now = self.server.core.now_ns();
        let grace_over = stopping && now.saturating_sub(self.stop_at_ns) > STOP_GRACE_NS;
        let done: Vec<Token> = self
            .conns
            .values()
            .filter(|c| {
                c.proto.should_close()
                    || c.gone.is_some()
                    || (grace_over && c.in_flight == 0)
                    || (stopping && !c.proto.in_transmission())
            })
            .map(|c| c.token)
            .collect();
        for t in done {
            let mut c = self.conns.remove(&t).expect("listed");
            let _ = self.server.poll.registry().deregister(c.stream.source());
            if self.server.opts.verbose {
                let why = c.gone.as_deref().unwrap_or("closed");
                eprintln!(
                    "tierlab serve: conn{}: {why} after {} requests",
                    c.id, c.requests
                );
            }
        }
        self.report.connections_open = self.conns.len() as u64;
    }

    fn read_signals(&mut self) {
        let Some(fd) = self.server.signals.as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        let mut buf = [0u8; 128]; // one signalfd_siginfo
        loop {
            // SAFETY: reading into a buffer of the size given.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            let signo = u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes"));
            let name = if signo == libc::SIGINT as u32 {
                "SIGINT"
            } else {
                "SIGTERM"
            };
            self.request_stop(name);
        }
    }

    fn request_stop(&mut self, why: &str) {
        self.stop_requests += 1;
        // The command says what it does on a signal; a library caller that
        // stops the server knows already.
        let tell = self.server.signals.is_some() || self.server.opts.verbose;
        if self.stop_requests == 1 {
            self.report.stopped_by = why.to_string();
            tell.then(|| {
                eprintln!(
                    "tierlab serve: {why}: finishing requests in flight, then writing dirty data \
                 back (again to abort)"
                )
            });
        } else if self.phase != Phase::Done {
            eprintln!("tierlab serve: {why} again: stopping without finishing");
            self.interrupted = true;
        }
    }

    /// Moves through the stop phases; true when the server is done.
    fn advance_phase(&mut self) -> Result<bool, ServeError> {
        if self.interrupted {
            let dirty = self
                .server
                .core
                .policy
                .counters()
                .into_iter()
                .find(|(k, _)| *k == "dirty_bytes")
                .filter(|(_, v)| *v > 0.0)
                .map(|(_, v)| v);
            return Err(ServeError::Interrupted { dirty_bytes: dirty });
        }
        let now = self.server.core.now_ns();
        match self.phase {
            Phase::Serving => {
                if self.stop_requests > 0 {
                    self.phase = Phase::Stopping;
                    self.stop_at_ns = now;
                    if let Some(mut l) = self.server.listener.take() {
                        let src: &mut dyn mio::event::Source = match &mut l {
                            Listener::Tcp(x) => x,
                            Listener::Unix(x, _) => x,
                        };
                        let _ = self.server.poll.registry().deregister(src);
                        if let Listener::Unix(_, path) = &l {
                            let _ = std::fs::remove_file(path);
                        }
                    }
                }
                Ok(false)
            }
            Phase::Stopping => {
                // Every request answered (replies a client leaves unread do
                // not hold up the write-back: their connections close after
                // a grace period, on their own).
                if self.conns.values().all(|c| c.in_flight == 0)
                    && self.held.is_empty()
                    && self.server.core.host_in_flight() == 0
                {
                    self.phase = Phase::Draining;
                    self.warm_stop = self.server.core.policy.restarts_warm()
                        && !self.server.opts.write_back_on_stop;
                    if self.warm_stop {
                        // The cache survives a restart: make it durable (a
                        // FLUSH of the policy), do not write it back.
                        self.stop_flush_pending = true;
                        let flush = HostRequest::flush(STOP_FLUSH);
                        self.server.core.issue(now, flush)?;
                    } else {
                        self.server.core.drain(now)?;
                    }
                }
                Ok(false)
            }
            Phase::Draining => {
                let done = if self.warm_stop {
                    // Its flush answered and nothing of it still in flight
                    // (an RMW or a commit runs to its end).
                    !self.stop_flush_pending && !self.server.core.busy()
                } else {
                    self.server.core.drained()
                };
                if done {
                    self.report.drain_s = (now - self.stop_at_ns) as f64 / NS_PER_S as f64;
                    self.report.warm_stop = self.warm_stop;
                    let b = self.server.core.flush_backends(now)?;
                    self.phase = Phase::Syncing(b);
                }
                Ok(false)
            }
            Phase::Syncing(_) => Ok(false),
            Phase::Done => {
                // Connections still waiting for their last replies to be read.
                if !self.conns.is_empty() && now.saturating_sub(self.stop_at_ns) <= STOP_GRACE_NS {
                    return Ok(false);
                }
                self.conns.clear();
                Ok(true)
            }
        }
    }

    /// summary.json, metrics and policy logs as `tierlab run` writes them,
    /// plus `serve` (this report) in summary.json.
    fn write_outputs(&mut self) -> Result<(), ServeError> {
        let Some(dir) = self.server.opts.out_dir.clone() else {
            return Ok(());
        };
        let core = &self.server.core;
        let now = core.now_ns();
        self.report.serving_s = now as f64 / NS_PER_S as f64;
        self.report.syncs_skipped = self.server.core.syncs_skipped;
        let tenants = vec![tierlab_sim::run::TenantReport {
            name: "nbd".into(),
            issued_ios: self.host_ios,
            issued_bytes: self.issued_bytes,
            completed_ios: self.host_ios - core.host_in_flight() as u64,
            retimed: 0,
            folded: 0,
            spread: "none",
            spread_records: 0,
            same_stamp_records: 0,
            timestamp_quantum_ns: None,
        }];
        let run = core.result(now, self.server.seed, self.host_ios, tenants, Vec::new());
        let real = tierlab_real::RealInfo {
            backends: core.backends.iter().map(|b| b.describe()).collect(),
            unaligned_ios: core.backends.iter().map(|b| b.unaligned_ios()).collect(),
            io_threads: self.server.opts.io_threads,
            io_engine: core.io.description.clone(),
            device_errors: core.device_errors,
            device_error_messages: core.device_error_messages.clone(),
            host_ios_failed: core.host_ios_failed,
            ..Default::default()
        };
        let result = tierlab_real::RealResult { run, real };
        write_into(&dir, &result, &self.report).map_err(|source| ServeError::File {
            flag: "--out",
            path: dir,
            action: "cannot write the outputs",
            source,
        })
    }
}
