//! SIGINT and SIGTERM as a stop request: blocked in the calling thread and
//! the threads it starts (so no IO thread dies of them) and received by one
//! watcher — a signalfd in `tierlab serve`'s event loop, a `sigtimedwait`
//! thread for `tierlab run`. The CLI also runs inside Python
//! (`tierlab.run_cli`), so everything is undone when the guard drops: the
//! caller's signal mask comes back and the watcher thread ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

fn stop_set() -> libc::sigset_t {
    // SAFETY: plain libc calls on a local sigset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// SIGINT/SIGTERM blocked in this thread until the guard drops (which
/// restores the mask it found). Create it before any IO thread starts.
pub struct BlockedStopSignals {
    old: libc::sigset_t,
}

impl BlockedStopSignals {
    /// Fails with the OS error (its kind kept), saying what failed.
    pub fn new() -> std::io::Result<BlockedStopSignals> {
        let set = stop_set();
        // SAFETY: valid sigsets; `old` receives the current mask.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        if rc != 0 {
            let e = std::io::Error::from_raw_os_error(rc);
            return Err(std::io::Error::new(
                e.kind(),
                format!("cannot block SIGINT/SIGTERM: {e}"),
            ));
        }
        Ok(BlockedStopSignals { old })
    }
}

impl Drop for BlockedStopSignals {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved in `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// A watcher that sets a stop flag on SIGINT/SIGTERM (and says so on
/// stderr) and exits the process with 130 on the second signal, for a user
/// who does not want to wait for the write-back. Dropping it ends the
/// watcher and restores the signal mask.
pub struct StopSignals {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    // Dropped after the thread ended (field order).
    _blocked: BlockedStopSignals,
}

impl StopSignals {
    pub fn watch(stop: Arc<AtomicBool>, what: &'static str) -> std::io::Result<StopSignals> {
        let blocked = BlockedStopSignals::new()?;
        let done = Arc::new(AtomicBool::new(false));
        let watching = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name("tierlab-signals".into())
            .spawn(move || {
                let set = stop_set();
                let tick = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: Duration::from_millis(100).as_nanos() as libc::c_long,
                };
                let mut first = true;
                while !watching.load(Ordering::SeqCst) {
                    // SAFETY: a valid sigset and timeout; no siginfo wanted.
                    let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &tick) };
                    if sig < 0 {
                        continue; // the tick (EAGAIN) or EINTR
                    }
                    let name = if sig == libc::SIGINT {
                        "SIGINT"
                    } else {
                        "SIGTERM"
                    };
                    if first {
                        first = false;
                        eprintln!(
                            "{what}: {name}: stopping; writing dirty data back (again to abort)"
                        );
                        stop.store(true, Ordering::SeqCst);
                    } else {
                        eprintln!(
                            "{what}: {name} again: aborting without finishing the write-back"
                        );
                        std::process::exit(130);
                    }
                }
            })
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot start the signal thread: {e}"))
            })?;
        Ok(StopSignals {
            done,
            thread: Some(thread),
            _blocked: blocked,
        })
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
