//! Asynchronous device IO on a pool of threads: the executor's loop submits
//! requests and receives completions on a channel, so the policy never
//! waits on a device. Each thread does blocking `pread`/`pwrite` (O_DIRECT
//! where the backend has it); `threads` bounds the IOs in service at once,
//! more wait in FIFO order.
//!
//! With no threads (`io_threads = 0`) the executor does each IO inline,
//! synchronously: queue depth 1, and no thread hand-off per IO — the
//! cheapest path for QD1 latency measurements.
//!
//! The io_uring engine (engine.rs) uses this pool for backends that are
//! not one file (a RAID of files): each completion then also bumps an
//! eventfd that the ring watches, so one wait covers both.

use std::io;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tierlab_core::Op;

use crate::backend::Backend;
use crate::iobuf::IoBuf;

pub struct Request {
    pub device: usize,
    pub tag: u64,
    pub op: Op,
    pub offset_bytes: u64,
    /// Writes: the data. Reads: a buffer of the IO's size to fill (its
    /// length is the IO's). Empty for flushes and trims.
    pub data: IoBuf,
    /// Trims: the length of the range (no buffer).
    pub trim_bytes: u64,
}

pub struct Completion {
    pub device: usize,
    pub tag: u64,
    pub op: Op,
    pub offset_bytes: u64,
    pub result: io::Result<()>,
    /// Reads: the bytes read. Writes: the buffer back (for reuse:
    /// `Io::recycle`).
    pub data: IoBuf,
    pub done: Instant,
}

pub struct Pool {
    submit: Option<Sender<Request>>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts `threads` IO threads over `backends`; completions go to `done`.
    pub fn new(
        backends: Arc<Vec<Box<dyn Backend>>>,
        threads: usize,
        done: Sender<Completion>,
    ) -> Pool {
        Pool::with_notify(backends, threads, done, None)
    }

    /// As `new`; after each completion is sent, writes 1 to `notify` (an eventfd).
    pub fn with_notify(
        backends: Arc<Vec<Box<dyn Backend>>>,
        threads: usize,
        done: Sender<Completion>,
        notify: Option<Arc<std::os::fd::OwnedFd>>,
    ) -> Pool {
        let (tx, rx) = channel::<Request>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..threads.max(1))
            .map(|i| {
                let rx: Arc<Mutex<Receiver<Request>>> = Arc::clone(&rx);
                let backends = Arc::clone(&backends);
                let done = done.clone();
                let notify = notify.clone();
                std::thread::Builder::new()
                    .name(format!("tierlab-io-{i}"))
                    .spawn(move || worker(rx, backends, done, notify))
                    .expect("spawn an IO thread")
            })
            .collect();
        Pool {
            submit: Some(tx),
            threads,
        }
    }

    pub fn submit(&self, r: Request) {
        // The workers outlive every submit (joined in Drop), so this cannot fail.
        let _ = self.submit.as_ref().expect("pool is running").send(r);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.submit.take(); // workers see the channel close and exit
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Does one request on the calling thread.
pub fn serve(backends: &[Box<dyn Backend>], r: Request) -> Completion {
    let mut data = r.data;
    let b = &backends[r.device];
    let result = match r.op {
        Op::Read => b.read_at(data.as_mut_slice(), r.offset_bytes),
        Op::Write => b.write_at(data.as_slice(), r.offset_bytes),
        Op::Flush => b.flush(),
        Op::Trim => b.trim(r.offset_bytes, r.trim_bytes),
    };
    Completion {
        device: r.device,
        tag: r.tag,
        op: r.op,
        offset_bytes: r.offset_bytes,
        result,
        data,
        done: Instant::now(),
    }
}

fn worker(
    rx: Arc<Mutex<Receiver<Request>>>,
    backends: Arc<Vec<Box<dyn Backend>>>,
    done: Sender<Completion>,
    notify: Option<Arc<std::os::fd::OwnedFd>>,
) {
    use std::os::fd::AsRawFd;
    loop {
        let r = match rx.lock().expect("not poisoned").recv() {
            Ok(r) => r,
            Err(_) => return,
        };
        if done.send(serve(&backends, r)).is_err() {
            return; // the executor is gone
        }
        if let Some(fd) = &notify {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to an eventfd; an
            // eventfd write only fails on counter overflow, which a reader
            // that drains it never lets happen.
            unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }
}
