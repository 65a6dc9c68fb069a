//! The progress line of long simulation runs, on stderr.
//!
//! Hand-written rather than a crate (indicatif would bring console,
//! unicode-width, portable-atomic ... into every build for one line of
//! output): the simulator calls back every `PROGRESS_EVERY_EVENTS` events,
//! this redraws at most 10 times a second, from the second second of a run
//! on, so short runs print nothing. Drawn only when stderr is a terminal
//! (`TIERLAB_PROGRESS=always` forces it, e.g. for logs; `never` or the
//! global `--quiet` turns it off). The line is erased when the run ends,
//! so stdout and stderr read as without it.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tierlab_sim::Progress;
use tierlab_sim::config::SimConfig;
use tierlab_sim::run::{self, ExpectedTotal, RunResult};

static QUIET: AtomicBool = AtomicBool::new(false);

/// `--quiet`: no progress line for the rest of this command.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

const SHOW_AFTER: Duration = Duration::from_secs(1);
const REDRAW_EVERY: Duration = Duration::from_millis(100);

fn enabled() -> bool {
    if QUIET.load(Ordering::Relaxed) {
        return false;
    }
    match std::env::var("TIERLAB_PROGRESS").as_deref() {
        Ok("always") => true,
        Ok("never") => false,
        _ => std::io::stderr().is_terminal(),
    }
}

/// A compact count: 950, 12.3 k, 4.56 M.
fn count(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.1} k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

fn duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// One progress line: `label [####......]  42%  1.23 M IOs  2.1 M IOs/s  sim 61s  ETA 3s`.
pub fn line(label: &str, p: &Progress, total: &ExpectedTotal, elapsed_s: f64) -> String {
    const WIDTH: usize = 24;
    let rate = p.host_ios as f64 / elapsed_s.max(1e-9);
    let sim = format!("sim {}", duration(p.simulated_ns as f64 / 1e9));
    match total.fraction(p) {
        Some(f) => {
            let filled = (f * WIDTH as f64).round() as usize;
            let eta = if f > 0.0 {
                duration(elapsed_s * (1.0 - f) / f)
            } else {
                "?".into()
            };
            format!(
                "{label} [{}{}] {:>3.0}%  {} IOs  {} IOs/s  {sim}  ETA {eta}",
                "#".repeat(filled.min(WIDTH)),
                ".".repeat(WIDTH - filled.min(WIDTH)),
                f * 100.0,
                count(p.host_ios as f64),
                count(rate),
            )
        }
        None => format!(
            "{label}  {} IOs  {} IOs/s  {sim}  elapsed {}",
            count(p.host_ios as f64),
            count(rate),
            duration(elapsed_s)
        ),
    }
}

/// `tierlab_sim::run::run` with a progress line labelled `label`.
pub fn run_sim(
    config: &SimConfig,
    base_dir: &Path,
    label: &str,
) -> Result<RunResult, Box<dyn std::error::Error>> {
    if !enabled() {
        return run::run(config, base_dir);
    }
    let total = run::expected_total(config);
    let started = Instant::now();
    let mut last_draw: Option<Instant> = None;
    let mut drawn = false;
    let mut report = |p: &Progress| {
        let now = Instant::now();
        let elapsed = now - started;
        if elapsed >= SHOW_AFTER && last_draw.is_none_or(|t| now - t >= REDRAW_EVERY) {
            last_draw = Some(now);
            drawn = true;
            let text = line(label, p, &total, elapsed.as_secs_f64());
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{text}");
            let _ = err.flush();
        }
        true
    };
    let result = run::run_with_progress(config, base_dir, Some(&mut report));
    if drawn {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
    result
}
