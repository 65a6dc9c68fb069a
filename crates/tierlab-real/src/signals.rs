//! SIGINT and SIGTERM as a stop request: blocked in every thread (so no IO
//! thread dies of them) and received by one watcher — a signalfd in
//! `tierlab serve`'s event loop, a `sigwait` thread for `tierlab run`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Blocks SIGINT and SIGTERM in the calling thread and the threads it
/// starts later. Call before any IO thread starts.
pub fn block_stop_signals() -> Result<(), String> {
    let set = stop_set();
    // SAFETY: a valid sigset; the old mask is not wanted.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(format!(
            "cannot block SIGINT/SIGTERM: {}",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    Ok(())
}

/// After `block_stop_signals`: a thread that sets `stop` on the first
/// SIGINT/SIGTERM (and says so on stderr) and exits the process with 130
/// on the second, for a user who does not want to wait for the write-back.
pub fn watch_stop_signals(stop: Arc<AtomicBool>, what: &'static str) -> Result<(), String> {
    std::thread::Builder::new()
        .name("tierlab-signals".into())
        .spawn(move || {
            let set = stop_set();
            let mut first = true;
            loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: a valid sigset and an out-parameter.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    continue;
                }
                let name = if sig == libc::SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                };
                if first {
                    first = false;
                    eprintln!("{what}: {name}: stopping; writing dirty data back (again to abort)");
                    stop.store(true, Ordering::SeqCst);
                } else {
                    eprintln!("{what}: {name} again: aborting without finishing the write-back");
                    std::process::exit(130);
                }
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the signal thread: {e}"))
}
