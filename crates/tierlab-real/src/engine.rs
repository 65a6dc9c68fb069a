//! The IO engine: how the executor's device IOs reach the backing stores.
//!
//! - **io_uring** (the default where the kernel allows it): the executor's
//!   own thread puts each IO on a ring and reaps completions from it; one
//!   `io_uring_enter` both submits what is queued and sleeps until the next
//!   completion or deadline. No thread hand-off per IO. At most `depth` IOs
//!   are in service; more wait in FIFO order. O_DIRECT IOs go through an
//!   aligned bounce buffer per IO in service. Backends that are not one
//!   file (a RAID of files) go through a thread pool of `depth` threads
//!   besides the ring — `depth` bounds the IOs on both together; the
//!   pool's completions bump an eventfd that the ring reads, so the same
//!   wait covers both.
//!   Memory backends are a copy: done inline.
//! - **threads**: the pool of pool.rs (`depth` threads doing blocking
//!   pread/pwrite). Works on every kernel.
//! - **inline** (`depth` 0): every IO on the executor's thread,
//!   synchronously (queue depth 1).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError, channel};
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, types};
use tierlab_core::Op;

use crate::backend::{Aligned, Backend, UringTarget};
use crate::pool::{self, Completion, Pool, Request};

/// Which engine a run asks for (`--io-engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// io_uring where the kernel allows it, else threads (and say why).
    Auto,
    Uring,
    Threads,
}

impl std::str::FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(EngineKind::Auto),
            "uring" | "io_uring" => Ok(EngineKind::Uring),
            "threads" => Ok(EngineKind::Threads),
            _ => Err(format!(
                "unknown IO engine `{s}`; allowed: auto, uring, threads"
            )),
        }
    }
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
    /// What runs the IOs, for summary.json.
    pub description: String,
}

impl Io {
    /// `depth`: IOs in service at once (threads, or ring slots); 0 = inline.
    pub fn new(
        backends: Arc<Vec<Box<dyn Backend>>>,
        kind: EngineKind,
        depth: usize,
    ) -> Result<Io, String> {
        let mut io = Io {
            backends,
            depth,
            ready: VecDeque::new(),
            ring: None,
            pool: None,
            in_service: 0,
            waiting: VecDeque::new(),
            pool_wake: None,
            description: String::new(),
        };
        if depth == 0 {
            if kind != EngineKind::Auto {
                return Err(format!(
                    "--io-engine {} needs at least one IO in service; --io-threads 0 means \
                     inline IO, which takes no engine (leave --io-engine at auto)",
                    if kind == EngineKind::Uring {
                        "uring"
                    } else {
                        "threads"
                    }
                ));
            }
            io.description = "inline (each IO on the executor's thread, queue depth 1)".into();
            return Ok(io);
        }
        let ring = match kind {
            EngineKind::Threads => Err("--io-engine threads".to_string()),
            _ => Ring::new(depth),
        };
        match (ring, kind) {
            (Ok(r), _) => {
                io.ring = Some(r);
                io.description = format!("io_uring ({depth} IOs in service at most)");
            }
            (Err(e), EngineKind::Uring) => {
                return Err(format!(
                    "io_uring is not available here ({e}); use --io-engine threads"
                ));
            }
            (Err(why), _) => {
                // An eventfd the pool bumps per completion, so a server
                // loop can sleep on it (`wake_fd`) besides its sockets.
                let fd = new_eventfd(libc::EFD_NONBLOCK)?;
                io.pool_wake = Some(Arc::clone(&fd));
                io.start_pool(Some(fd));
                io.description = if kind == EngineKind::Threads {
                    format!("threads ({depth})")
                } else {
                    format!("threads ({depth}; io_uring unavailable: {why})")
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

    /// Starts one IO; its completion comes out of `try_next` or `wait`.
    pub fn submit(&mut self, r: Request) -> Result<(), String> {
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
    fn dispatch(&mut self, r: Request) -> Result<(), String> {
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

    /// io_uring mode: takes what the ring and the pool finished, and
    /// starts waiting IOs in the places they freed.
    fn reap(&mut self) -> Result<(), String> {
        let before = self.ready.len();
        let ring = self.ring.as_mut().expect("io_uring mode");
        ring.reap(&mut self.ready, self.pool.as_ref().map(|p| &p.1))?;
        self.in_service -= self.ready.len() - before;
        while self.in_service < self.depth
            && let Some(r) = self.waiting.pop_front()
        {
            self.dispatch(r)?;
        }
        Ok(())
    }

    /// A completion that is already there, without waiting.
    pub fn try_next(&mut self) -> Result<Option<Completion>, String> {
        if let Some(c) = self.ready.pop_front() {
            return Ok(Some(c));
        }
        if let Some(ring) = &mut self.ring {
            ring.submit_queued()?;
            self.reap()?;
        } else if let Some((_, rx)) = &self.pool {
            match rx.try_recv() {
                Ok(c) => return Ok(Some(c)),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    return Err("the IO threads stopped unexpectedly".into());
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
    /// (io_uring) or the pool's eventfd (threads). None inline, where
    /// every IO completes inside `submit`. After a wake-up, take what is
    /// there with `try_next` (and `clear_wake`).
    pub fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        if let Some(r) = &self.ring {
            return Some(r.cq_event.as_raw_fd());
        }
        self.pool_wake.as_ref().map(|f| f.as_raw_fd())
    }

    /// Resets the wake-up eventfd after a wake-up, so a loop on a
    /// level-triggered poll does not spin.
    pub fn clear_wake(&self) {
        let fd = match &self.ring {
            Some(r) => Some(&r.cq_event),
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
    /// sleeps somewhere else than in `wait`.
    pub fn submit_pending(&mut self) -> Result<(), String> {
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
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<Completion>, String> {
        if let Some(c) = self.try_next()? {
            return Ok(Some(c));
        }
        if self.ring.is_some() {
            // The ring also wakes without a completion to hand out: a short
            // IO continued, a retry, a pool bump whose completion was
            // already taken. Sleep again until the deadline.
            let deadline = Instant::now() + timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                self.ring.as_mut().expect("checked").wait(left)?;
                self.reap()?;
                if let Some(c) = self.ready.pop_front() {
                    return Ok(Some(c));
                }
                if left.is_zero() {
                    return Ok(None);
                }
            }
        }
        match &self.pool {
            Some((_, rx)) => match rx.recv_timeout(timeout) {
                Ok(c) => Ok(Some(c)),
                Err(RecvTimeoutError::Timeout) => Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    Err("the IO threads stopped unexpectedly".into())
                }
            },
            None => {
                // Inline: nothing is in flight anywhere; just the deadline.
                std::thread::sleep(timeout);
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

/// An eventfd (`flags`: 0 or EFD_NONBLOCK).
fn new_eventfd(flags: libc::c_int) -> Result<Arc<OwnedFd>, String> {
    // SAFETY: eventfd returns a new descriptor or -1.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    if raw < 0 {
        return Err(format!("eventfd: {}", io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    Ok(Arc::new(unsafe { OwnedFd::from_raw_fd(raw) }))
}

/// user_data of the eventfd read that wakes the ring for pool completions.
const POOL_WAKE: u64 = u64::MAX;

/// One IO in service on the ring.
struct Slot {
    req: Request,
    target: UringTarget,
    /// O_DIRECT: the aligned buffer the kernel reads into / writes from.
    bounce: Option<Aligned>,
    /// Bytes done so far (a short read or write is continued).
    done_bytes: usize,
}

struct Ring {
    /// Bumped by the kernel on each completion (`Io::wake_fd`).
    cq_event: Arc<OwnedFd>,
    ring: IoUring,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    in_service: usize,
    /// IOs waiting for a slot, in arrival order.
    backlog: VecDeque<(Request, UringTarget)>,
    /// SQEs pushed but not yet submitted to the kernel.
    queued: bool,
    /// The eventfd the pool bumps, and the 8-byte buffer its read fills.
    wake: Option<(Arc<OwnedFd>, Box<[u8; 8]>)>,
    wake_armed: bool,
}

impl Ring {
    fn new(depth: usize) -> Result<Ring, String> {
        let entries = (depth + 1).next_power_of_two().max(8) as u32;
        let ring = IoUring::new(entries).map_err(|e| format!("io_uring_setup: {e}"))?;
        // Waiting with a deadline needs IORING_FEAT_EXT_ARG (Linux 5.11).
        if !ring.params().is_feature_ext_arg() {
            return Err("the kernel's io_uring cannot wait with a timeout (before 5.11)".into());
        }
        // The kernel bumps this eventfd on every completion, so a loop that
        // sleeps in epoll (tierlab serve) wakes for the ring's IOs.
        let cq_event = new_eventfd(libc::EFD_NONBLOCK)?;
        ring.submitter()
            .register_eventfd(cq_event.as_raw_fd())
            .map_err(|e| format!("io_uring_register(EVENTFD): {e}"))?;
        Ok(Ring {
            cq_event,
            ring,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            in_service: 0,
            backlog: VecDeque::new(),
            queued: false,
            wake: None,
            wake_armed: false,
        })
    }

    /// An eventfd for the pool to bump; the ring keeps a read armed on it.
    fn watch_pool(&mut self) -> Result<Arc<OwnedFd>, String> {
        // Blocking: the ring's read of it must wait for a bump, not fail
        // with EAGAIN (io_uring honours O_NONBLOCK).
        let fd = new_eventfd(0)?;
        self.wake = Some((Arc::clone(&fd), Box::new([0; 8])));
        self.arm_wake()?;
        Ok(fd)
    }

    fn arm_wake(&mut self) -> Result<(), String> {
        let (fd, buf) = self.wake.as_mut().expect("watch_pool ran");
        let sqe = opcode::Read::new(types::Fd(fd.as_raw_fd()), buf.as_mut_ptr(), 8)
            .build()
            .user_data(POOL_WAKE);
        self.push(&sqe)?;
        self.wake_armed = true;
        Ok(())
    }

    fn push(&mut self, sqe: &io_uring::squeue::Entry) -> Result<(), String> {
        // SAFETY (for both pushes): every buffer an SQE points to lives in
        // a slot (or `wake`) until its completion is reaped; see Drop.
        if unsafe { self.ring.submission().push(sqe) }.is_err() {
            self.submit_queued()?;
            unsafe { self.ring.submission().push(sqe) }
                .map_err(|_| "the io_uring submission queue is full".to_string())?;
        }
        self.queued = true;
        Ok(())
    }

    fn start(&mut self, req: Request, target: UringTarget) -> Result<(), String> {
        let Some(i) = self.free.pop() else {
            self.backlog.push_back((req, target));
            return Ok(());
        };
        let bounce = target.direct.then(|| {
            let mut a = Aligned::new(req.data.len());
            if req.op == Op::Write {
                a.slice(req.data.len()).copy_from_slice(&req.data);
            }
            a
        });
        self.slots[i] = Some(Slot {
            req,
            target,
            bounce,
            done_bytes: 0,
        });
        self.in_service += 1;
        self.push_slot(i)
    }

    /// Puts slot `i`'s (remaining) IO on the submission queue.
    fn push_slot(&mut self, i: usize) -> Result<(), String> {
        let s = self.slots[i].as_mut().expect("a slot in service");
        let fd = types::Fd(s.target.fd);
        let len = s.req.data.len();
        let base = match &mut s.bounce {
            Some(b) => b.slice(len).as_mut_ptr(),
            None => s.req.data.as_mut_ptr(),
        };
        // SAFETY: `done_bytes` ≤ `len`, so the pointer stays in the buffer.
        let ptr = unsafe { base.add(s.done_bytes) };
        let rest = (len - s.done_bytes) as u32;
        let at = s.req.offset_bytes + s.done_bytes as u64;
        let sqe = match s.req.op {
            Op::Read => opcode::Read::new(fd, ptr, rest).offset(at).build(),
            Op::Write => opcode::Write::new(fd, ptr, rest).offset(at).build(),
            Op::Flush => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            Op::Trim => unreachable!("trims are done inline"),
        };
        self.push(&sqe.user_data(i as u64))
    }

    fn submit_queued(&mut self) -> Result<(), String> {
        if self.queued {
            self.ring
                .submit()
                .map_err(|e| format!("io_uring_enter: {e}"))?;
            self.queued = false;
        }
        Ok(())
    }

    /// Submits what is queued and sleeps until a completion or `timeout`.
    fn wait(&mut self, timeout: Duration) -> Result<(), String> {
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => {}
            Err(e) => return Err(format!("io_uring_enter: {e}")),
        }
        self.queued = false;
        Ok(())
    }

    /// Moves finished IOs to `ready`; continues short ones.
    fn reap(
        &mut self,
        ready: &mut VecDeque<Completion>,
        pool: Option<&Receiver<Completion>>,
    ) -> Result<(), String> {
        loop {
            let cqes: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            if cqes.is_empty() {
                break;
            }
            // When the kernel's completions were seen: before any of them
            // is processed (or continued), so latency is the device's.
            let seen = Instant::now();
            for (ud, res) in cqes {
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
    ) -> Result<(), String> {
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
        let mut s = self.slots[i].take().expect("checked above");
        if s.req.op == Op::Read
            && result.is_ok()
            && let Some(b) = &mut s.bounce
        {
            s.req.data.copy_from_slice(b.slice(len));
        }
        self.free.push(i);
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
        if let Some((r, t)) = self.backlog.pop_front() {
            self.start(r, t)?;
        }
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
            let _ = self.wait(Duration::from_millis(100));
            self.backlog.clear();
            if self.reap(&mut sink, None).is_err() {
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
        Io::new(Arc::new(backends), kind, depth).unwrap()
    }

    fn req(device: usize, tag: u64, op: Op, offset_bytes: u64, data: Vec<u8>) -> Request {
        Request {
            device,
            tag,
            op,
            offset_bytes,
            data,
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
                assert_eq!(c.data, pattern(c.tag, len), "{kind:?}: IO {}", c.tag);
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
                io.wait(Duration::from_secs(10)).unwrap().unwrap().data,
                vec![9; 10]
            );
        }
    }

    /// A backend that is neither one file nor memory (like a RAID of
    /// files): under io_uring its IOs go to the pool, whose completions
    /// wake the ring through the eventfd — mixed with file IOs on the ring.
    struct NotAFile(RamBackend);
    impl Backend for NotAFile {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            std::thread::sleep(Duration::from_millis(2));
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            std::thread::sleep(Duration::from_millis(2));
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
        let backends: Vec<Box<dyn Backend>> =
            vec![Box::new(f), Box::new(NotAFile(RamBackend::new(1 << 20)))];
        let mut io = Io::new(Arc::new(backends), EngineKind::Uring, 4).unwrap();
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
            assert_eq!(c.data, vec![c.tag as u8; 4096], "IO {}", c.tag);
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
        let backends: Vec<Box<dyn Backend>> =
            vec![Box::new(f), Box::new(NotAFile(RamBackend::new(1 << 20)))];
        let mut io = Io::new(Arc::new(backends), EngineKind::Uring, 1).unwrap();
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
}
