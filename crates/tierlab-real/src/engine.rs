//! The IO engine: how the executor's device IOs reach the backing stores.
//!
//! - **io_uring** (the default where the kernel allows it): the executor's
//!   own thread puts each IO on a ring and reaps completions from it. At
//!   most `depth` IOs are in service; more wait in FIFO order. Backends
//!   that are not one file (a RAID of files) go through a thread pool of
//!   `depth` threads besides the ring — `depth` bounds the IOs on both
//!   together; the pool's completions bump an eventfd that the ring
//!   reads, so the same wait covers both. Memory backends are a copy:
//!   done inline.
//!
//!   What keeps the ring's cost per IO low (docs/benchmarks.md, "Where
//!   the time goes"):
//!   - *batches*: pushing an IO on the ring is no system call. One
//!     `io_uring_enter` hands every queued IO to the kernel and sleeps
//!     until the next completion (`wait`); completions are then taken
//!     from the ring in bulk, without system calls.
//!   - *deferred completion work* (`Waiting::InWait`, what `tierlab run`
//!     uses): the kernel finishes the IOs' completions on this thread,
//!     inside that same `io_uring_enter` (IORING_SETUP_DEFER_TASKRUN),
//!     rather than interrupting it for each one. The ring is then bound
//!     to the thread that made it (SINGLE_ISSUER).
//!   - *registered files and buffers*: the backends' descriptors and
//!     `depth` aligned buffers are registered once, so the kernel neither
//!     looks up a file nor maps a buffer per IO; the buffers come from a
//!     pool (`buffer`, `recycle`) and are O_DIRECT-aligned, so no IO
//!     needs a bounce copy.
//!   - *SQPOLL* (`--io-engine uring-sqpoll`): a kernel thread takes IOs
//!     off the ring as they are pushed — no system call to submit, at the
//!     price of a thread that polls (a core, while busy).
//! - **threads**: the pool of pool.rs (`depth` threads doing blocking
//!   pread/pwrite). Works on every kernel.
//! - **inline** (`depth` 0): every IO on the executor's thread,
//!   synchronously (queue depth 1).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError, channel};
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, types};
use tierlab_core::{Op, ParamError};

use crate::backend::{Backend, UringTarget};
use crate::error::EngineError;
use crate::iobuf::{BufPool, IoBuf};
use crate::pool::{self, Completion, Pool, Request};

/// Which engine a run asks for (`--io-engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// io_uring where the kernel allows it, else threads (and say why).
    Auto,
    Uring,
    /// io_uring with a kernel thread polling the submission queue
    /// (IORING_SETUP_SQPOLL): no system call to submit, at the price of
    /// a thread that spins for a while after each burst.
    UringSqpoll,
    Threads,
}

impl std::str::FromStr for EngineKind {
    type Err = ParamError;
    fn from_str(s: &str) -> Result<Self, ParamError> {
        match s {
            "auto" => Ok(EngineKind::Auto),
            "uring" | "io_uring" => Ok(EngineKind::Uring),
            "uring-sqpoll" | "io_uring-sqpoll" => Ok(EngineKind::UringSqpoll),
            "threads" => Ok(EngineKind::Threads),
            _ => Err(
                ParamError::unknown_name("", s, ["auto", "uring", "uring-sqpoll", "threads"])
                    .because("an IO engine"),
            ),
        }
    }
}

/// Where the caller sleeps until device IOs complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// In `wait` (`tierlab run`): the ring defers the kernel's completion
    /// work to the next `wait` (or to a `try_next` that sees it pending),
    /// so one system call submits a batch and reaps the last. Every call
    /// must come from the thread that made the `Io`.
    InWait,
    /// In epoll (`tierlab serve`), on `wake_fd`: the kernel bumps an
    /// eventfd on each completion, and any thread may drive the `Io`.
    Epoll,
}

pub struct Io {
    backends: Arc<Vec<Box<dyn Backend>>>,
    depth: usize,
    ready: VecDeque<Completion>,
    ring: Option<Ring>,
    /// The thread pool: the engine in `threads` mode; in io_uring mode,
    /// started on the first IO for a backend that is not one file.
    pool: Option<(Pool, Receiver<Completion>)>,
    /// io_uring mode: IOs on the ring or in the pool, at most `depth`.
    in_service: usize,
    /// io_uring mode: IOs waiting for one of those places, in order.
    waiting: VecDeque<Request>,
    /// Threads mode: the eventfd the pool bumps (`wake_fd`).
    pool_wake: Option<Arc<OwnedFd>>,
    /// Device IO buffers for reuse (`buffer`, `recycle`).
    bufs: BufPool,
    /// What runs the IOs, for summary.json.
    pub description: String,
    /// io_uring mode: how long `wait` polls for a completion before it
    /// sleeps (`poll_before_sleep`).
    poll: Duration,
}

impl Io {
    /// `depth`: IOs in service at once (threads, or ring slots); 0 = inline.
    pub fn new(
        backends: Arc<Vec<Box<dyn Backend>>>,
        kind: EngineKind,
        depth: usize,
        waiting: Waiting,
    ) -> Result<Io, EngineError> {
        let mut io = Io {
            backends,
            depth,
            ready: VecDeque::new(),
            ring: None,
            pool: None,
            in_service: 0,
            waiting: VecDeque::new(),
            pool_wake: None,
            bufs: BufPool::new(),
            description: String::new(),
            poll: Duration::ZERO,
        };
        if depth == 0 {
            if kind != EngineKind::Auto {
                return Err(EngineError::NeedsDepth {
                    engine: match kind {
                        EngineKind::Uring => "uring",
                        EngineKind::UringSqpoll => "uring-sqpoll",
                        _ => "threads",
                    },
                });
            }
            io.description = "inline (each IO on the executor's thread, queue depth 1)".into();
            return Ok(io);
        }
        let ring = match kind {
            EngineKind::Threads => None,
            _ => Some(Ring::new(depth, kind == EngineKind::UringSqpoll, waiting)),
        };
        match (ring, kind) {
            (Some(Ok((r, bufs))), _) => {
                io.description = ring_description(depth, &r.setup, Duration::ZERO, Duration::ZERO);
                if let Some((bufs, bytes)) = bufs {
                    io.bufs.registered(bufs, bytes);
                }
                io.ring = Some(r);
            }
            (Some(Err(e)), EngineKind::Uring | EngineKind::UringSqpoll) => {
                return Err(EngineError::UringUnavailable(Box::new(e)));
            }
            (why, _) => {
                // An eventfd the pool bumps per completion, so a server
                // loop can sleep on it (`wake_fd`) besides its sockets.
                let fd = new_eventfd(libc::EFD_NONBLOCK)?;
                io.pool_wake = Some(Arc::clone(&fd));
                io.start_pool(Some(fd));
                io.description = match why {
                    Some(Err(why)) => format!("threads ({depth}; io_uring unavailable: {why})"),
                    _ => format!("threads ({depth})"),
                };
            }
        }
        Ok(io)
    }

    fn start_pool(&mut self, notify: Option<Arc<OwnedFd>>) {
        let (tx, rx) = channel();
        let pool = Pool::with_notify(Arc::clone(&self.backends), self.depth, tx, notify);
        self.pool = Some((pool, rx));
    }

    /// A buffer for a device IO of `len_bytes` (aligned for O_DIRECT, and
    /// registered with the ring when one is free). Its bytes are stale:
    /// fill a write's. Give it back with `recycle` after the completion.
    pub fn buffer(&mut self, len_bytes: usize) -> IoBuf {
        self.bufs.take(len_bytes)
    }

    /// Takes back a completed IO's buffer for reuse.
    pub fn recycle(&mut self, buf: IoBuf) {
        self.bufs.give(buf);
    }

    /// io_uring mode: `wait` first polls for a completion for up to
    /// `poll`, yielding the CPU between looks, and sleeps only after.
    ///
    /// Why: a thread that sleeps for a completion a few µs away is woken
    /// from idle, and on a VM without guest halt-polling each such wake
    /// costs tens of µs (docs/real.md, "Waiting for completions"). Polling
    /// costs at most `poll` of CPU per wait. Yielding, not spinning, lets
    /// the kernel's IO worker run should it share this CPU. A thread that
    /// may run on one CPU only (pinned) sleeps at once: there the worker
    /// that completes the IO shares the CPU, so a poll can only delay it
    /// (+0.6 µs per QD1 IO measured on tmpfs). Zero sleeps at once.
    /// Threads mode and inline never poll. Call it from the thread that
    /// will wait.
    pub fn poll_before_sleep(&mut self, poll: Duration) {
        self.poll = wait_poll(poll);
        if let Some(r) = &self.ring {
            self.description = ring_description(self.depth, &r.setup, poll, self.poll);
        }
    }

    /// Starts one IO; its completion comes out of `try_next` or `wait`.
    pub fn submit(&mut self, r: Request) -> Result<(), EngineError> {
        let b = &self.backends[r.device];
        if self.depth == 0 || r.op == Op::Trim || (self.ring.is_some() && b.is_memory()) {
            self.ready.push_back(pool::serve(&self.backends, r));
            return Ok(());
        }
        if self.ring.is_some() {
            // One bound for the ring and the pool together.
            if self.in_service >= self.depth {
                self.waiting.push_back(r);
                return Ok(());
            }
            return self.dispatch(r);
        }
        let (pool, _) = self.pool.as_ref().expect("a pool in threads mode");
        pool.submit(r);
        Ok(())
    }

    /// io_uring mode: puts `r` on the ring, or in the pool when its
    /// backend is not one file.
    fn dispatch(&mut self, r: Request) -> Result<(), EngineError> {
        debug_assert!(self.in_service < self.depth);
        self.in_service += 1;
        let ring = self.ring.as_mut().expect("io_uring mode");
        if let Some(t) = self.backends[r.device].uring_target(r.op, r.offset_bytes, r.data.len()) {
            return ring.start(r, t);
        }
        if self.pool.is_none() {
            let fd = ring.watch_pool()?;
            self.start_pool(Some(fd));
        }
        let (pool, _) = self.pool.as_ref().expect("just started");
        pool.submit(r);
        Ok(())
    }

    /// io_uring mode: takes what the ring and the pool finished (no system
    /// call), and starts waiting IOs in the places they freed.
    fn reap(&mut self) -> Result<(), EngineError> {
        let before = self.ready.len();
        let ring = self.ring.as_mut().expect("io_uring mode");
        ring.reap(&mut self.ready, self.pool.as_ref().map(|p| &p.1))?;
        let done = self.ready.len() - before;
        assert!(
            done <= self.in_service,
            "more completions than IOs in service"
        );
        self.in_service -= done;
        while self.in_service < self.depth
            && let Some(r) = self.waiting.pop_front()
        {
            self.dispatch(r)?;
        }
        Ok(())
    }

    /// A completion that is already there, without waiting. With
    /// `Waiting::InWait` this hands queued IOs to the kernel only when it
    /// enters the kernel anyway (completion work is pending there); a
    /// caller that will not `wait` calls `submit_pending`.
    pub fn try_next(&mut self) -> Result<Option<Completion>, EngineError> {
        if let Some(c) = self.ready.pop_front() {
            return Ok(Some(c));
        }
        if let Some(ring) = &mut self.ring {
            if ring.waiting == Waiting::Epoll || ring.completions_pending() {
                ring.submit_queued()?;
            }
            self.reap()?;
        } else if let Some((_, rx)) = &self.pool {
            match rx.try_recv() {
                Ok(c) => return Ok(Some(c)),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    return Err(EngineError::ThreadsStopped);
                }
            }
        }
        Ok(self.ready.pop_front())
    }

    /// Hands out a completion the caller made itself (an IO it did inline,
    /// e.g. a memory copy), in order with the engine's own.
    pub fn push_ready(&mut self, c: Completion) {
        self.ready.push_back(c);
    }

    /// A descriptor that becomes readable when completions may be ready,
    /// for a loop that sleeps in epoll rather than in `wait`: the ring's
    /// (io_uring, `Waiting::Epoll` only) or the pool's eventfd (threads).
    /// None inline, where every IO completes inside `submit`. After a
    /// wake-up, take what is there with `try_next` (and `clear_wake`).
    pub fn wake_fd(&self) -> Option<RawFd> {
        if let Some(r) = &self.ring {
            return r.cq_event.as_ref().map(|f| f.as_raw_fd());
        }
        self.pool_wake.as_ref().map(|f| f.as_raw_fd())
    }

    /// Resets the wake-up eventfd after a wake-up, so a loop on a
    /// level-triggered poll does not spin.
    pub fn clear_wake(&self) {
        let fd = match &self.ring {
            Some(r) => r.cq_event.as_ref(),
            None => self.pool_wake.as_ref(),
        };
        if let Some(fd) = fd {
            let mut v = [0u8; 8];
            // SAFETY: reading 8 bytes into an 8-byte buffer; the eventfd
            // is non-blocking, so an empty one returns EAGAIN at once.
            unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
        }
    }

    /// Hands queued IOs to the kernel now (io_uring), before a loop
    /// sleeps somewhere else than in `wait`, or goes round without
    /// sleeping.
    pub fn submit_pending(&mut self) -> Result<(), EngineError> {
        match &mut self.ring {
            Some(r) => r.submit_queued(),
            None => Ok(()),
        }
    }

    /// True when completions are ready without a system call (inline IOs,
    /// or ones already reaped).
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The next completion, waiting at most `timeout` (None: none came).
    /// A `timeout` too long to be a deadline (`Duration::MAX`) waits for a
    /// completion however long it takes.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<Completion>, EngineError> {
        if let Some(c) = self.try_next()? {
            return Ok(Some(c));
        }
        if self.ring.is_some() {
            // The ring also wakes without a completion to hand out: a short
            // IO continued, a retry, a pool bump whose completion was
            // already taken. Sleep again until the deadline.
            let deadline = (timeout != Duration::MAX)
                .then(|| Instant::now().checked_add(timeout))
                .flatten();
            if self.in_service > 0 && !self.poll.is_zero() {
                let ring = self.ring.as_mut().expect("checked");
                ring.submit_queued()?;
                poll_yielding(self.poll.min(timeout), || Ok(ring.completion_ready()))
                    .map_err(sys("poll before sleep"))?;
            }
            loop {
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                self.ring.as_mut().expect("checked").wait(left)?;
                self.reap()?;
                if let Some(c) = self.ready.pop_front() {
                    return Ok(Some(c));
                }
                if left.is_some_and(|l| l.is_zero()) {
                    return Ok(None);
                }
            }
        }
        match &self.pool {
            Some((_, rx)) => match rx.recv_timeout(timeout) {
                Ok(c) => Ok(Some(c)),
                Err(RecvTimeoutError::Timeout) => Ok(None),
                Err(RecvTimeoutError::Disconnected) => Err(EngineError::ThreadsStopped),
            },
            None => {
                // Inline: nothing is in flight anywhere; just the deadline
                // (a wait for a completion that cannot come returns now).
                if timeout != Duration::MAX {
                    std::thread::sleep(timeout);
                }
                Ok(None)
            }
        }
    }
}

impl Drop for Io {
    fn drop(&mut self) {
        // The pool's threads first (they may still write the eventfd),
        // then the ring, which waits for its own IOs.
        self.pool.take();
        self.ring.take();
    }
}

/// CPUs the calling thread may run on (None if the kernel does not say).
pub fn cpus_allowed() -> Option<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills
    // at most its size, and CPU_COUNT only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
            .then(|| libc::CPU_COUNT(&set) as usize)
    }
}

/// The poll before sleeping that a thread asking for `requested` gets
/// (`Io::poll_before_sleep`, and `tierlab serve`'s loop): none when it may
/// run on one CPU only, where whoever would end the wait (the kernel's IO
/// worker, a client) shares that CPU and a poll can only delay it.
pub fn wait_poll(requested: Duration) -> Duration {
    if cpus_allowed() == Some(1) {
        Duration::ZERO
    } else {
        requested
    }
}

/// Looks until `look` finds something or `poll` has passed, yielding the
/// CPU between looks; true when it found something. The one poll before
/// sleeping: the ring's wait here, and `tierlab serve`'s loop.
pub fn poll_yielding(
    poll: Duration,
    mut look: impl FnMut() -> io::Result<bool>,
) -> io::Result<bool> {
    let until = Instant::now() + poll;
    loop {
        if look()? {
            return Ok(true);
        }
        if Instant::now() >= until {
            return Ok(false);
        }
        // SAFETY: sched_yield takes no arguments and cannot fail.
        unsafe { libc::sched_yield() };
    }
}

/// What runs the IOs in io_uring mode, for summary.json: the poll asked
/// for and the one `wait_poll` gave.
fn ring_description(depth: usize, setup: &str, requested: Duration, poll: Duration) -> String {
    let waits = if !poll.is_zero() {
        format!(
            "; polls {} µs for a completion before sleeping",
            poll.as_micros()
        )
    } else if !requested.is_zero() {
        "; sleeps at once for completions: one CPU allowed".to_string()
    } else {
        String::new()
    };
    format!("io_uring ({depth} IOs in service at most; {setup}{waits})")
}

/// `map_err` for a failed system call.
fn sys(call: &'static str) -> impl FnOnce(io::Error) -> EngineError {
    move |source| EngineError::Sys { call, source }
}

/// An eventfd (`flags`: 0 or EFD_NONBLOCK).
fn new_eventfd(flags: libc::c_int) -> Result<Arc<OwnedFd>, EngineError> {
    // SAFETY: eventfd returns a new descriptor or -1.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    if raw < 0 {
        return Err(EngineError::Sys {
            call: "eventfd",
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    Ok(Arc::new(unsafe { OwnedFd::from_raw_fd(raw) }))
}

/// user_data of the eventfd read that wakes the ring for pool completions.
const POOL_WAKE: u64 = u64::MAX;

/// Descriptors registered with a ring at most (a stack has a few).
const FILES_MAX: u32 = 64;

/// Bytes of registered buffers per ring at most (pinned memory), and per
/// buffer at most and at least.
const REGISTERED_TOTAL_BYTES: usize = 8 << 20;
const REGISTERED_BUF_BYTES_MAX: usize = 128 << 10;
const REGISTERED_BUF_BYTES_MIN: usize = 4 << 10;

/// How long the SQPOLL thread polls after the last IO before it sleeps.
const SQPOLL_IDLE_MS: u32 = 100;

/// Completions taken off the ring per pass (a stack array: no allocation).
const REAP_BATCH: usize = 64;

/// A descriptor as an SQE names it: the raw one, or its registered index.
#[derive(Clone, Copy, Debug)]
enum FileRef {
    Raw(RawFd),
    Fixed(u32),
}

/// One IO in service on the ring.
struct Slot {
    req: Request,
    file: FileRef,
    /// Bytes done so far (a short read or write is continued).
    done_bytes: usize,
}

struct Ring {
    ring: IoUring,
    waiting: Waiting,
    /// What was set up, for the description ("registered buffers, ...").
    setup: String,
    /// `Waiting::Epoll`: bumped by the kernel on each completion.
    cq_event: Option<Arc<OwnedFd>>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    in_service: usize,
    /// SQEs pushed but not yet submitted to the kernel.
    queued: bool,
    /// Registered descriptors, by index (empty when registration failed).
    files: Vec<RawFd>,
    files_ok: bool,
    /// Registered buffers' (address, capacity), by index.
    bufs: Vec<(usize, usize)>,
    /// The eventfd the pool bumps, and the 8-byte buffer its read fills.
    wake: Option<(Arc<OwnedFd>, Box<[u8; 8]>)>,
    wake_armed: bool,
}

impl Ring {
    /// A ring for `depth` IOs in service, and the buffers it registered
    /// (with their size) for the buffer pool.
    #[allow(clippy::type_complexity)]
    fn new(
        depth: usize,
        sqpoll: bool,
        waiting: Waiting,
    ) -> Result<(Ring, Option<(Vec<IoBuf>, usize)>), EngineError> {
        let entries = (depth + 1).next_power_of_two().max(8) as u32;
        let mut setup = Vec::new();
        let ring = if sqpoll {
            setup.push("SQPOLL");
            IoUring::builder()
                .setup_sqpoll(SQPOLL_IDLE_MS)
                .build(entries)
                .map_err(sys("io_uring_setup (SQPOLL)"))?
        } else if waiting == Waiting::InWait {
            // Deferred completion work needs Linux 6.1; without it the ring
            // still works, each completion then interrupting the thread.
            match IoUring::builder()
                .setup_single_issuer()
                .setup_defer_taskrun()
                .setup_taskrun_flag()
                .build(entries)
            {
                Ok(r) => {
                    setup.push("deferred completions");
                    r
                }
                Err(_) => IoUring::new(entries).map_err(sys("io_uring_setup"))?,
            }
        } else {
            IoUring::new(entries).map_err(sys("io_uring_setup"))?
        };
        // Waiting with a deadline needs IORING_FEAT_EXT_ARG (Linux 5.11).
        if !ring.params().is_feature_ext_arg() {
            return Err(EngineError::Unsupported(
                "the kernel's io_uring cannot wait with a timeout (before 5.11)",
            ));
        }
        let cq_event = match waiting {
            Waiting::InWait => None,
            Waiting::Epoll => {
                // The kernel bumps this eventfd on every completion, so a
                // loop that sleeps in epoll (tierlab serve) wakes for them.
                let fd = new_eventfd(libc::EFD_NONBLOCK)?;
                ring.submitter()
                    .register_eventfd(fd.as_raw_fd())
                    .map_err(sys("io_uring_register(EVENTFD)"))?;
                Some(fd)
            }
        };
        // A sparse file table (Linux 5.19), filled as descriptors are met.
        let files_ok = ring.submitter().register_files_sparse(FILES_MAX).is_ok();
        if files_ok {
            setup.push("registered files");
        }
        // One registered buffer per place in service, as large as the
        // pinned-memory budget allows; larger IOs take unregistered ones.
        let buf_bytes = (REGISTERED_TOTAL_BYTES / depth)
            .clamp(REGISTERED_BUF_BYTES_MIN, REGISTERED_BUF_BYTES_MAX)
            .next_power_of_two()
            .min(REGISTERED_BUF_BYTES_MAX);
        let mut bufs = BufPool::new_registered(depth, buf_bytes);
        let iovecs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| {
                let (base, len) = b.region();
                libc::iovec {
                    iov_base: base.cast(),
                    iov_len: len,
                }
            })
            .collect();
        // SAFETY: the buffers stay allocated while registered: the pool
        // keeps them, and one that leaves it is only freed (its pages stay
        // pinned by the kernel until the ring goes; nothing is written
        // into them, since the ring uses an index only for the buffer
        // registered there: `fixed_buf`).
        let registered = unsafe { ring.submitter().register_buffers(&iovecs) };
        let (bufs, table) = match registered {
            Ok(()) => {
                setup.push("registered buffers");
                let table = iovecs
                    .iter()
                    .map(|v| (v.iov_base as usize, v.iov_len))
                    .collect();
                (Some((std::mem::take(&mut bufs), buf_bytes)), table)
            }
            // E.g. RLIMIT_MEMLOCK too low: plain buffers work as well.
            Err(_) => (None, Vec::new()),
        };
        Ok((
            Ring {
                ring,
                waiting,
                setup: if setup.is_empty() {
                    "plain".into()
                } else {
                    setup.join(", ")
                },
                cq_event,
                slots: (0..depth).map(|_| None).collect(),
                free: (0..depth as u32).rev().collect(),
                in_service: 0,
                queued: false,
                files: Vec::new(),
                files_ok,
                bufs: table,
                wake: None,
                wake_armed: false,
            },
            bufs,
        ))
    }

    /// The registered index of `fd`, registering it on first sight while
    /// the table has room.
    fn file(&mut self, fd: RawFd) -> FileRef {
        if !self.files_ok {
            return FileRef::Raw(fd);
        }
        if let Some(i) = self.files.iter().position(|&f| f == fd) {
            return FileRef::Fixed(i as u32);
        }
        let i = self.files.len() as u32;
        if i < FILES_MAX
            && self
                .ring
                .submitter()
                .register_files_update(i, &[fd])
                .is_ok()
        {
            self.files.push(fd);
            return FileRef::Fixed(i);
        }
        FileRef::Raw(fd)
    }

    /// The registered-buffer index for an IO into `buf`, if it is the
    /// buffer registered at its index.
    fn fixed_buf(&self, buf: &mut IoBuf) -> Option<u16> {
        let i = buf.registered()?;
        let (base, cap) = buf.region();
        (self.bufs.get(i as usize) == Some(&(base as usize, cap))).then_some(i as u16)
    }

    /// True when a completion is there or the kernel holds completion
    /// work for the next enter: no system call.
    fn completion_ready(&mut self) -> bool {
        self.completions_pending() || !self.ring.completion().is_empty()
    }

    /// True when the kernel holds completion work that an enter would
    /// run (IORING_SQ_TASKRUN, with deferred completions).
    fn completions_pending(&mut self) -> bool {
        self.ring.submission().taskrun()
    }

    /// An eventfd for the pool to bump; the ring keeps a read armed on it.
    fn watch_pool(&mut self) -> Result<Arc<OwnedFd>, EngineError> {
        // Blocking: the ring's read of it must wait for a bump, not fail
        // with EAGAIN (io_uring honours O_NONBLOCK).
        let fd = new_eventfd(0)?;
        self.wake = Some((Arc::clone(&fd), Box::new([0; 8])));
        self.arm_wake()?;
        Ok(fd)
    }

    fn arm_wake(&mut self) -> Result<(), EngineError> {
        let (fd, buf) = self.wake.as_mut().expect("watch_pool ran");
        let sqe = opcode::Read::new(types::Fd(fd.as_raw_fd()), buf.as_mut_ptr(), 8)
            .build()
            .user_data(POOL_WAKE);
        self.push(&sqe)?;
        self.wake_armed = true;
        Ok(())
    }

    fn push(&mut self, sqe: &io_uring::squeue::Entry) -> Result<(), EngineError> {
        // SAFETY (for both pushes): every buffer an SQE points to lives in
        // a slot (or `wake`) until its completion is reaped; see Drop.
        if unsafe { self.ring.submission().push(sqe) }.is_err() {
            self.submit_queued()?;
            unsafe { self.ring.submission().push(sqe) }.map_err(|_| EngineError::QueueFull)?;
        }
        self.queued = true;
        Ok(())
    }

    fn start(&mut self, req: Request, target: UringTarget) -> Result<(), EngineError> {
        // `Io` keeps at most `depth` IOs here, and there are `depth` slots.
        let i = self.free.pop().expect("a free slot for each IO in service") as usize;
        debug_assert!(
            !target.direct
                || req.data.is_empty()
                || req.data.as_slice().as_ptr() as usize % crate::iobuf::DIRECT_ALIGN == 0,
            "O_DIRECT IOs come in aligned buffers"
        );
        let file = self.file(target.fd);
        self.slots[i] = Some(Slot {
            req,
            file,
            done_bytes: 0,
        });
        self.in_service += 1;
        self.push_slot(i)
    }

    /// Puts slot `i`'s (remaining) IO on the submission queue.
    fn push_slot(&mut self, i: usize) -> Result<(), EngineError> {
        let mut s = self.slots[i].take().expect("a slot in service");
        let fixed = self.fixed_buf(&mut s.req.data);
        let len = s.req.data.len();
        // SAFETY: `done_bytes` ≤ `len` ≤ the buffer's capacity.
        let ptr = unsafe { s.req.data.as_mut_ptr().add(s.done_bytes) };
        let rest = (len - s.done_bytes) as u32;
        let at = s.req.offset_bytes + s.done_bytes as u64;
        // The descriptor is a type parameter of each opcode: one arm each.
        macro_rules! sqe {
            ($fd:expr) => {
                match (s.req.op, fixed) {
                    (Op::Read, Some(b)) => {
                        opcode::ReadFixed::new($fd, ptr, rest, b).offset(at).build()
                    }
                    (Op::Read, None) => opcode::Read::new($fd, ptr, rest).offset(at).build(),
                    (Op::Write, Some(b)) => opcode::WriteFixed::new($fd, ptr, rest, b)
                        .offset(at)
                        .build(),
                    (Op::Write, None) => opcode::Write::new($fd, ptr, rest).offset(at).build(),
                    (Op::Flush, _) => opcode::Fsync::new($fd)
                        .flags(types::FsyncFlags::DATASYNC)
                        .build(),
                    (Op::Trim, _) => unreachable!("trims are done inline"),
                }
            };
        }
        let sqe = match s.file {
            FileRef::Raw(fd) => sqe!(types::Fd(fd)),
            FileRef::Fixed(f) => sqe!(types::Fixed(f)),
        };
        self.slots[i] = Some(s);
        self.push(&sqe.user_data(i as u64))
    }

    fn submit_queued(&mut self) -> Result<(), EngineError> {
        if self.queued || self.completions_pending() {
            self.ring.submit().map_err(sys("io_uring_enter"))?;
            self.queued = false;
        }
        Ok(())
    }

    /// Submits what is queued and sleeps until a completion or `timeout`
    /// (None: until a completion).
    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), EngineError> {
        let r = match timeout {
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            None => self.ring.submitter().submit_and_wait(1),
        };
        match r {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => {}
            Err(source) => {
                return Err(EngineError::Sys {
                    call: "io_uring_enter",
                    source,
                });
            }
        }
        self.queued = false;
        Ok(())
    }

    /// Moves finished IOs to `ready`; continues short ones. No system call.
    fn reap(
        &mut self,
        ready: &mut VecDeque<Completion>,
        pool: Option<&Receiver<Completion>>,
    ) -> Result<(), EngineError> {
        let mut batch = [(0u64, 0i32); REAP_BATCH];
        loop {
            let mut n = 0;
            for c in self.ring.completion().take(REAP_BATCH) {
                batch[n] = (c.user_data(), c.result());
                n += 1;
            }
            if n == 0 {
                break;
            }
            // When the kernel's completions were seen: before any of them
            // is processed (or continued), so latency is the device's.
            let seen = Instant::now();
            for &(ud, res) in &batch[..n] {
                if ud == POOL_WAKE {
                    self.wake_armed = false;
                    if let Some(rx) = pool {
                        ready.extend(rx.try_iter());
                    }
                    self.arm_wake()?;
                    continue;
                }
                self.finished(ud as usize, res, seen, ready)?;
            }
        }
        // A pool completion can land between the eventfd read and here;
        // the next bump wakes us for it, but take what is there now.
        if let Some(rx) = pool {
            ready.extend(rx.try_iter());
        }
        Ok(())
    }

    fn finished(
        &mut self,
        i: usize,
        res: i32,
        seen: Instant,
        ready: &mut VecDeque<Completion>,
    ) -> Result<(), EngineError> {
        let s = self.slots[i]
            .as_mut()
            .expect("a completion for a slot in service");
        let len = s.req.data.len();
        let result = if res == -libc::EINTR || res == -libc::EAGAIN {
            return self.push_slot(i); // try again
        } else if res < 0 {
            Err(io::Error::from_raw_os_error(-res))
        } else if s.req.op == Op::Flush {
            Ok(())
        } else if res == 0 && s.done_bytes < len {
            // What std's read_exact_at / write_all_at say.
            Err(match s.req.op {
                Op::Read => {
                    io::Error::new(io::ErrorKind::UnexpectedEof, "failed to fill whole buffer")
                }
                _ => io::Error::new(io::ErrorKind::WriteZero, "failed to write whole buffer"),
            })
        } else {
            s.done_bytes += res as usize;
            if s.done_bytes < len {
                return self.push_slot(i); // a short read or write: the rest
            }
            Ok(())
        };
        let s = self.slots[i].take().expect("checked above");
        self.free.push(i as u32);
        self.in_service -= 1;
        ready.push_back(Completion {
            device: s.req.device,
            tag: s.req.tag,
            op: s.req.op,
            offset_bytes: s.req.offset_bytes,
            result,
            data: s.req.data,
            done: seen,
        });
        Ok(())
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The kernel may still write into the buffers of IOs in service:
        // wait for them (bounded), and leak what is still out after that
        // rather than free memory the kernel can write.
        let give_up = Instant::now() + Duration::from_secs(10);
        let mut sink = VecDeque::new();
        while self.in_service > 0 && Instant::now() < give_up {
            if self.wait(Some(Duration::from_millis(100))).is_err()
                || self.reap(&mut sink, None).is_err()
            {
                break;
            }
            sink.clear();
        }
        if self.in_service > 0 {
            std::mem::forget(std::mem::take(&mut self.slots));
        }
        if let Some((_, buf)) = self.wake.take() {
            // An armed eventfd read points at this buffer until the ring is
            // torn down (asynchronously): 8 bytes, leaked.
            Box::leak(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{FileBackend, RamBackend};

    fn io_over(dir: &std::path::Path, kind: EngineKind, depth: usize) -> Io {
        let f = FileBackend::open(&dir.join("f"), Some(1 << 20), true, true).unwrap();
        let backends: Vec<Box<dyn Backend>> = vec![Box::new(f), Box::new(RamBackend::new(1 << 20))];
        Io::new(Arc::new(backends), kind, depth, Waiting::InWait).unwrap()
    }

    /// A named engine with no IO in service, and a name that is no
    /// engine, are refused by kind.
    #[test]
    fn engine_refusals_are_typed() {
        let backends: Vec<Box<dyn Backend>> = vec![Box::new(RamBackend::new(1 << 20))];
        let e = Io::new(Arc::new(backends), EngineKind::Uring, 0, Waiting::InWait)
            .err()
            .unwrap();
        assert!(
            matches!(e, EngineError::NeedsDepth { engine: "uring" }),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("--io-threads 0 means inline IO"),
            "{e}"
        );
        let e = "iouring".parse::<EngineKind>().unwrap_err();
        assert_eq!(e.found, "\"iouring\" (did you mean `uring`?)");
        assert!(e.expected.starts_with("one of: auto, uring"), "{e}");
    }

    fn req(device: usize, tag: u64, op: Op, offset_bytes: u64, data: Vec<u8>) -> Request {
        let mut buf = IoBuf::zeroed(data.len());
        buf.as_mut_slice().copy_from_slice(&data);
        Request {
            device,
            tag,
            op,
            offset_bytes,
            data: buf,
            trim_bytes: 0,
        }
    }

    /// Writes 64 patterned IOs (aligned and not, more than the depth),
    /// reads them back, and checks every byte and that every tag completes
    /// once — on each engine.
    #[test]
    fn every_engine_round_trips_bytes_beyond_its_depth() {
        for (kind, depth) in [
            (EngineKind::Uring, 4),
            (EngineKind::Threads, 4),
            (EngineKind::Auto, 0),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut io = io_over(dir.path(), kind, depth);
            let pattern = |i: u64, len: usize| -> Vec<u8> {
                (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect()
            };
            let ios: Vec<(u64, usize)> = (0..64)
                .map(|i| {
                    // Odd ones unaligned: they take the buffered descriptor.
                    if i % 2 == 0 {
                        (i * 8192, 4096)
                    } else {
                        (i * 8192 + 512, 1536)
                    }
                })
                .collect();
            let mut pending = std::collections::HashSet::new();
            for (i, &(off, len)) in ios.iter().enumerate() {
                io.submit(req(0, i as u64, Op::Write, off, pattern(i as u64, len)))
                    .unwrap();
                pending.insert(i as u64);
            }
            while !pending.is_empty() {
                let c = io
                    .wait(Duration::from_secs(10))
                    .unwrap()
                    .expect("a completion");
                c.result.unwrap();
                assert!(pending.remove(&c.tag), "tag {} twice", c.tag);
            }
            io.submit(req(0, 999, Op::Flush, 0, Vec::new())).unwrap();
            let c = io.wait(Duration::from_secs(10)).unwrap().unwrap();
            assert_eq!((c.tag, c.op), (999, Op::Flush));
            c.result.unwrap();
            for (i, &(off, len)) in ios.iter().enumerate() {
                io.submit(req(0, i as u64, Op::Read, off, vec![0; len]))
                    .unwrap();
                pending.insert(i as u64);
            }
            while !pending.is_empty() {
                let c = io.wait(Duration::from_secs(10)).unwrap().unwrap();
                c.result.unwrap();
                assert!(pending.remove(&c.tag));
                let (_, len) = ios[c.tag as usize];
                assert_eq!(
                    c.data.as_slice(),
                    pattern(c.tag, len),
                    "{kind:?}: IO {}",
                    c.tag
                );
            }
            // Memory: inline under io_uring, through the pool with threads.
            io.submit(req(1, 7, Op::Write, 100, vec![9; 10])).unwrap();
            io.wait(Duration::from_secs(10))
                .unwrap()
                .unwrap()
                .result
                .unwrap();
            io.submit(req(1, 8, Op::Read, 100, vec![0; 10])).unwrap();
            assert_eq!(
                io.wait(Duration::from_secs(10))
                    .unwrap()
                    .unwrap()
                    .data
                    .as_slice(),
                vec![9; 10]
            );
        }
    }

    /// A backend that is neither one file nor memory (like a RAID of
    /// files): under io_uring its IOs go to the pool, whose completions
    /// wake the ring through the eventfd — mixed with file IOs on the ring.
    /// Its IOs take `.1` each.
    struct NotAFile(RamBackend, Duration);
    impl Backend for NotAFile {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            std::thread::sleep(self.1);
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            std::thread::sleep(self.1);
            self.0.write_at(buf, offset)
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn capacity_bytes(&self) -> u64 {
            self.0.capacity_bytes()
        }
        fn describe(&self) -> String {
            "not a file".into()
        }
    }

    #[test]
    fn io_uring_waits_for_pool_completions_and_ring_completions_alike() {
        let dir = tempfile::tempdir().unwrap();
        let f = FileBackend::open(&dir.path().join("f"), Some(1 << 20), true, true).unwrap();
        let backends: Vec<Box<dyn Backend>> = vec![
            Box::new(f),
            Box::new(NotAFile(RamBackend::new(1 << 20), Duration::from_millis(2))),
        ];
        let mut io = Io::new(Arc::new(backends), EngineKind::Uring, 4, Waiting::InWait).unwrap();
        let mut pending = std::collections::HashSet::new();
        for i in 0..40u64 {
            let device = (i % 2) as usize;
            io.submit(req(device, i, Op::Write, i * 4096, vec![i as u8; 4096]))
                .unwrap();
            pending.insert(i);
        }
        // `wait` with a long timeout: a lost wake-up would hang here, so
        // bound the whole loop.
        let t = Instant::now();
        while !pending.is_empty() {
            let c = io
                .wait(Duration::from_secs(30))
                .unwrap()
                .expect("no lost wake-up");
            c.result.unwrap();
            assert!(pending.remove(&c.tag));
        }
        assert!(t.elapsed() < Duration::from_secs(20));
        for i in 0..40u64 {
            io.submit(req((i % 2) as usize, i, Op::Read, i * 4096, vec![0; 4096]))
                .unwrap();
        }
        for _ in 0..40 {
            let c = io.wait(Duration::from_secs(30)).unwrap().unwrap();
            assert_eq!(c.data.as_slice(), vec![c.tag as u8; 4096], "IO {}", c.tag);
        }
    }

    /// `depth` bounds the ring and the pool together: at depth 1 a mix
    /// of file and pool IOs runs one at a time, so they complete in the
    /// order they were submitted (with two places they would not: the
    /// pool's IOs sleep 2 ms, the file's do not).
    #[test]
    fn the_depth_bounds_ring_and_pool_together() {
        let dir = tempfile::tempdir().unwrap();
        let f = FileBackend::open(&dir.path().join("f"), Some(1 << 20), true, true).unwrap();
        let backends: Vec<Box<dyn Backend>> = vec![
            Box::new(f),
            Box::new(NotAFile(RamBackend::new(1 << 20), Duration::from_millis(2))),
        ];
        let mut io = Io::new(Arc::new(backends), EngineKind::Uring, 1, Waiting::InWait).unwrap();
        for i in 0..20u64 {
            let device = (i % 2) as usize;
            io.submit(req(device, i, Op::Write, i * 4096, vec![i as u8; 4096]))
                .unwrap();
        }
        let order: Vec<u64> = (0..20)
            .map(|_| {
                let c = io.wait(Duration::from_secs(30)).unwrap().unwrap();
                c.result.unwrap();
                c.tag
            })
            .collect();
        assert_eq!(order, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn a_read_past_the_end_of_the_file_is_an_error_not_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let mut io = io_over(dir.path(), EngineKind::Uring, 2);
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("f"))
            .unwrap()
            .set_len(8192)
            .unwrap();
        io.submit(req(0, 1, Op::Read, 8192, vec![0; 4096])).unwrap();
        let c = io.wait(Duration::from_secs(10)).unwrap().unwrap();
        let e = c.result.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    }

    /// The poll before sleeping ends at the wait's deadline or at the
    /// completion, whichever comes first, however long the poll is.
    #[test]
    fn polling_before_sleep_ends_at_the_deadline_or_the_completion() {
        let slow = NotAFile(RamBackend::new(1 << 20), Duration::from_millis(300));
        let backends: Vec<Box<dyn Backend>> = vec![Box::new(slow)];
        let mut io = Io::new(Arc::new(backends), EngineKind::Uring, 2, Waiting::InWait).unwrap();
        io.poll_before_sleep(Duration::from_secs(60));
        // (On one CPU it sleeps at once: the bounds below hold all the same.)
        assert_eq!(
            io.description.contains("polls 60000000 µs"),
            cpus_allowed().is_some_and(|n| n > 1),
            "{}",
            io.description
        );
        io.submit(req(0, 1, Op::Write, 0, vec![5; 4096])).unwrap();
        let t = Instant::now();
        assert!(io.wait(Duration::from_millis(20)).unwrap().is_none());
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let c = io.wait(Duration::MAX).unwrap().expect("the write");
        c.result.unwrap();
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(30),
            "{waited:?}"
        );
        io.submit(req(0, 2, Op::Read, 0, vec![0; 4096])).unwrap();
        let c = io.wait(Duration::MAX).unwrap().expect("the read");
        assert_eq!(c.data.as_slice(), vec![5; 4096]);
    }

    /// A thread allowed on one CPU does not poll (the IO worker shares
    /// that CPU); one allowed on more does. Each case in its own thread,
    /// so the test's affinity does not leak.
    #[test]
    fn a_thread_pinned_to_one_cpu_sleeps_at_once() {
        let describe = |pin: bool| {
            std::thread::spawn(move || {
                if pin {
                    // SAFETY: a set with CPU 0 only, for this thread (0).
                    unsafe {
                        let mut set: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(0, &mut set);
                        let size = std::mem::size_of::<libc::cpu_set_t>();
                        assert_eq!(libc::sched_setaffinity(0, size, &set), 0);
                    }
                }
                let dir = tempfile::tempdir().unwrap();
                let mut io = io_over(dir.path(), EngineKind::Uring, 2);
                io.poll_before_sleep(Duration::from_micros(50));
                (io.description.clone(), io.poll)
            })
            .join()
            .unwrap()
        };
        let (pinned, poll) = describe(true);
        assert!(pinned.contains("one CPU allowed"), "{pinned}");
        assert_eq!(poll, Duration::ZERO);
        if cpus_allowed().is_some_and(|n| n > 1) {
            let (free, poll) = describe(false);
            assert!(free.contains("polls 50 µs"), "{free}");
            assert_eq!(poll, Duration::from_micros(50));
        } else {
            eprintln!("one CPU here: only the pinned case can be checked");
        }
    }

    #[test]
    fn waiting_with_nothing_in_flight_returns_after_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let mut io = io_over(dir.path(), EngineKind::Uring, 2);
        let t = Instant::now();
        assert!(io.wait(Duration::from_millis(30)).unwrap().is_none());
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(25) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    }

    /// Writes then reads `n` 4 KiB blocks with the engine's own buffers
    /// (registered ones first), checking each block's bytes.
    fn round_trip_in_pool_buffers(io: &mut Io, n: u64) {
        for i in 0..n {
            let mut b = io.buffer(4096);
            b.as_mut_slice().fill(i as u8 ^ 0x5A);
            io.submit(Request {
                device: 0,
                tag: i,
                op: Op::Write,
                offset_bytes: i * 4096,
                data: b,
                trim_bytes: 0,
            })
            .unwrap();
        }
        for _ in 0..n {
            let c = io.wait(Duration::from_secs(10)).unwrap().expect("a write");
            c.result.unwrap();
            io.recycle(c.data);
        }
        for i in 0..n {
            let mut b = io.buffer(4096);
            b.as_mut_slice().fill(0);
            io.submit(Request {
                device: 0,
                tag: i,
                op: Op::Read,
                offset_bytes: i * 4096,
                data: b,
                trim_bytes: 0,
            })
            .unwrap();
        }
        for _ in 0..n {
            let c = io.wait(Duration::from_secs(10)).unwrap().expect("a read");
            c.result.unwrap();
            assert!(
                c.data.as_slice().iter().all(|&x| x == c.tag as u8 ^ 0x5A),
                "block {}",
                c.tag
            );
            io.recycle(c.data);
        }
    }

    /// The ring's registered buffers carry data both ways, and a buffer
    /// registered with another ring is used there as a plain one (its
    /// index names a different buffer here): the bytes are right either way.
    #[test]
    fn registered_buffers_round_trip_and_foreign_ones_are_plain() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = io_over(dir.path(), EngineKind::Uring, 4);
        assert!(
            a.description.contains("registered buffers"),
            "{}",
            a.description
        );
        round_trip_in_pool_buffers(&mut a, 24);
        let other = tempfile::tempdir().unwrap();
        let mut b = io_over(other.path(), EngineKind::Uring, 4);
        let mut foreign = b.buffer(4096);
        assert!(foreign.registered().is_some());
        foreign.as_mut_slice().fill(0xC3);
        a.submit(Request {
            device: 0,
            tag: 2,
            op: Op::Write,
            offset_bytes: 8192,
            data: foreign,
            trim_bytes: 0,
        })
        .unwrap();
        let c = a.wait(Duration::from_secs(10)).unwrap().unwrap();
        c.result.unwrap();
        let mut check = vec![0u8; 4096];
        std::fs::File::open(dir.path().join("f"))
            .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut check, 8192))
            .unwrap();
        assert_eq!(check, vec![0xC3; 4096]);
        b.recycle(c.data);
    }

    /// SQPOLL: the same bytes through a polled ring.
    #[test]
    fn a_polled_ring_round_trips_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let mut io = io_over(dir.path(), EngineKind::UringSqpoll, 4);
        assert!(io.description.contains("SQPOLL"), "{}", io.description);
        round_trip_in_pool_buffers(&mut io, 16);
    }

    /// With `Waiting::Epoll` the ring bumps the eventfd `wake_fd` gives,
    /// so a loop sleeping in poll(2) wakes for a completion.
    #[test]
    fn epoll_mode_wakes_the_descriptor_for_completions() {
        let dir = tempfile::tempdir().unwrap();
        let f = FileBackend::open(&dir.path().join("f"), Some(1 << 20), true, true).unwrap();
        let backends: Vec<Box<dyn Backend>> = vec![Box::new(f)];
        let mut io = Io::new(Arc::new(backends), EngineKind::Uring, 2, Waiting::Epoll).unwrap();
        let fd = io.wake_fd().expect("an eventfd in epoll mode");
        let mut b = io.buffer(4096);
        b.as_mut_slice().fill(1);
        io.submit(Request {
            device: 0,
            tag: 9,
            op: Op::Write,
            offset_bytes: 0,
            data: b,
            trim_bytes: 0,
        })
        .unwrap();
        io.submit_pending().unwrap();
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 10_000) };
        assert_eq!(n, 1, "the eventfd became readable");
        io.clear_wake();
        let c = io.try_next().unwrap().expect("the write, without waiting");
        assert_eq!(c.tag, 9);
        c.result.unwrap();
    }

    /// Inline, `wait(Duration::MAX)` (until a completion) returns at once:
    /// nothing is in flight that could complete.
    #[test]
    fn an_endless_wait_with_nothing_in_flight_returns_inline() {
        let dir = tempfile::tempdir().unwrap();
        let mut io = io_over(dir.path(), EngineKind::Auto, 0);
        let t = Instant::now();
        assert!(io.wait(Duration::MAX).unwrap().is_none());
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
