//! `tierlab emulate`: serve a file over FUSE whose every IO takes the time
//! a tierlab device model says, in wall-clock time (docs/emulate.md). Put
//! a loop device over the file and any real workload (fio, a filesystem, a
//! database, `tierlab qos run`) runs against the modeled device.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use tierlab_emu::{Emulator, UnmountError};
use tierlab_real::backend::{Backend, FileBackend, RamBackend};
use tierlab_stack::device_table::DeviceTableSpec;
use tierlab_trace::units::{format_size_bytes, parse_size_bytes};

use crate::CliResult;

#[derive(Args)]
pub struct EmulateArgs {
    /// Directory to mount on; the file appears as DIR/NAME (--file-name).
    #[arg(long, value_name = "DIR")]
    pub mount: PathBuf,
    /// Device model: memory, ssd, hdd, smr, sswd, flash-ssd (or raid, with --set/--config).
    #[arg(long)]
    pub model: Option<String>,
    /// The model's preset (e.g. hdd: sata-7200-2tb, sas-15k-600gb, sata-5400-2tb).
    #[arg(long)]
    pub preset: Option<String>,
    /// A TOML file: one device table (`model = "hdd"` ...), or a sim
    /// config whose [[devices]] are picked by --device.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// With --config of a sim config: the [[devices]] entry's name (default: the only one).
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Override one key of the device table (repeatable): --set scheduler=fifo
    /// --set queue_depth=1 --set capacity_bytes=1GiB (sizes for *_bytes keys).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Size of the served file: the first SIZE bytes of the model's address
    /// space (default: the model's capacity).
    #[arg(long, value_name = "SIZE")]
    pub capacity: Option<String>,
    /// Name of the served file inside --mount.
    #[arg(long, default_value = "disk.img")]
    pub file_name: String,
    /// Where the data lives: `ram` (1 MiB chunks allocated on first
    /// write) or a file path (created sparse, O_DIRECT where possible).
    #[arg(long, default_value = "ram", value_name = "ram|PATH")]
    pub backing: String,
    /// Seed of the model (an HDD's initial platter angle).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Let other users open the file (FUSE allow_other).
    #[arg(long)]
    pub allow_other: bool,
    /// Stop after this many seconds (default: on SIGINT/SIGTERM). The
    /// file is unmounted only when nothing uses it (detach loop devices
    /// first); a second signal detaches it anyway.
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Print a line of statistics to stderr every N seconds (0: never).
    #[arg(long, default_value_t = 0.0)]
    pub stats_interval_s: f64,
    /// Real-time priority (SCHED_FIFO 10; root or CAP_SYS_NICE) for the
    /// emulator's threads: completions stay on time while other processes
    /// keep the CPUs busy.
    #[arg(long)]
    pub realtime: bool,
    /// Write the final report (JSON) here as well as to stdout.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
}

static SIGNALS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// The device table the options describe (`tierlab_stack::device_table`).
fn device_table(args: &EmulateArgs) -> CliResult<toml::Table> {
    Ok(tierlab_stack::device_table::device_table(
        &DeviceTableSpec {
            config: args.config.clone(),
            device: args.device.clone(),
            model: args.model.clone(),
            preset: args.preset.clone(),
            set: args.set.clone(),
        },
    )?)
}

pub fn run(args: EmulateArgs) -> CliResult {
    let table = device_table(&args)?;
    let seed = args.seed;
    // Validate here (the error names the key); the device thread builds its own.
    let model_capacity = tierlab_stack::standard_device(&table, seed)
        .map_err(|e| format!("device: {e}"))?
        .capacity_bytes();
    let capacity = match &args.capacity {
        Some(text) => {
            let c = parse_size_bytes(text).map_err(|e| format!("--capacity: {e}"))?;
            if c == 0 || c > model_capacity {
                return Err(format!(
                    "--capacity {text}: allowed 1 ..= the model's capacity, {model_capacity} bytes ({})",
                    format_size_bytes(model_capacity)
                )
                .into());
            }
            c
        }
        None => model_capacity,
    };
    if let Some(d) = args.duration_s {
        if !(d.is_finite() && d > 0.0) {
            return Err(format!("--duration-s {d}: allowed a positive number of seconds").into());
        }
    }
    if !(args.stats_interval_s.is_finite() && args.stats_interval_s >= 0.0) {
        return Err(format!(
            "--stats-interval-s {}: allowed 0 (off) or a positive number of seconds",
            args.stats_interval_s
        )
        .into());
    }
    let backend: Arc<dyn Backend> = if args.backing == "ram" {
        Arc::new(RamBackend::new(capacity))
    } else {
        Arc::new(
            FileBackend::open(Path::new(&args.backing), Some(capacity), true, true)
                .map_err(|e| format!("--backing: {e}"))?,
        )
    };
    let backing = backend.describe();
    if args.realtime {
        // Threads inherit the policy: set it before the emulator starts its own.
        let p = libc::sched_param { sched_priority: 10 };
        // SAFETY: a valid sched_param for the calling thread (pid 0).
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
            return Err(format!(
                "--realtime: cannot switch to SCHED_FIFO: {} (needs root or CAP_SYS_NICE)",
                std::io::Error::last_os_error()
            )
            .into());
        }
    }
    let factory_table = table.clone();
    let emu = Emulator::start(
        Box::new(move || Ok(tierlab_stack::standard_device(&factory_table, seed)?)),
        backend,
        capacity,
        &args.mount,
        &args.file_name,
        args.allow_other,
    )?;
    if emu.cleared_stale_mount() {
        eprintln!(
            "tierlab: note: {} held a stale mount left by an emulator that died (e.g. SIGKILL); \
             it was detached before mounting",
            args.mount.display()
        );
    }
    // SAFETY: installing a handler that only bumps an atomic counter.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let model = table.get("model").and_then(|m| m.as_str()).unwrap_or("?");
    let preset = table
        .get("preset")
        .and_then(|p| p.as_str())
        .map(|p| format!(" ({p})"))
        .unwrap_or_default();
    println!(
        "tierlab emulate: serving {} ({} bytes, {}) as model {model}{preset}, data in {backing}; stop with Ctrl-C",
        emu.file().display(),
        capacity,
        format_size_bytes(capacity)
    );
    let _ = std::io::stdout().flush();
    let emu = serve(emu, &args)?;
    let report = emu.finish();
    let mut json = serde_json::json!({
        "file": args.mount.join(&args.file_name),
        "capacity_bytes": capacity,
        "backing": backing,
        "seed": seed,
        "device": serde_json::to_value(&table)?,
    });
    if let (serde_json::Value::Object(o), serde_json::Value::Object(r)) =
        (&mut json, serde_json::to_value(&report)?)
    {
        o.extend(r);
    }
    let text = serde_json::to_string_pretty(&json)? + "\n";
    if let Some(p) = &args.summary {
        fs::write(p, &text).map_err(|e| format!("--summary {}: {e}", p.display()))?;
    }
    print!("{text}");
    Ok(())
}

/// Serves until the duration ends or a signal comes, then unmounts (a
/// busy file keeps being served until freed or a second signal).
fn serve(mut emu: Emulator, args: &EmulateArgs) -> CliResult<Emulator> {
    let started = Instant::now();
    let interval =
        (args.stats_interval_s > 0.0).then(|| Duration::from_secs_f64(args.stats_interval_s));
    let mut next_stats = interval.map(|i| started + i);
    let mut last = (emu.now_ns(), emu.counters());
    let mut said_busy = false;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let signals = SIGNALS.load(Ordering::SeqCst);
        let timed_out = args
            .duration_s
            .is_some_and(|d| started.elapsed().as_secs_f64() >= d);
        if signals >= 2 {
            eprintln!(
                "tierlab emulate: second signal: detaching {} while in use",
                emu.file().display()
            );
            return Ok(emu);
        }
        if signals >= 1 || timed_out {
            match emu.unmount() {
                Ok(()) => return Ok(emu),
                Err(UnmountError::Busy) => {
                    if !said_busy {
                        eprintln!(
                            "tierlab emulate: {} is in use (an open file or a loop device: losetup -d it); \
                             still serving, unmounting once it is free (signal again to detach anyway)",
                            emu.file().display()
                        );
                        said_busy = true;
                    }
                }
                Err(UnmountError::Other(e)) => return Err(e.into()),
            }
        }
        if let (Some(at), Some(every)) = (next_stats, interval) {
            if Instant::now() >= at {
                next_stats = Some(at + every);
                let (now, c) = (emu.now_ns(), emu.counters());
                eprintln!("{}", stats_line(now, &c, last.0, &last.1));
                last = (now, c);
            }
        }
    }
}

/// One interval's statistics: IOPS, the model's %util, mean model latency
/// and mean lateness of the IOs completed in the interval.
fn stats_line(
    now_ns: u64,
    c: &tierlab_emu::Counters,
    then_ns: u64,
    prev: &tierlab_emu::Counters,
) -> String {
    let dt_ns = now_ns.saturating_sub(then_ns).max(1) as f64;
    let ios = c.ios - prev.ios;
    let busy = c
        .busy_ns_at(now_ns)
        .saturating_sub(prev.busy_ns_at(then_ns)) as f64;
    let per_io = |sum: u128, before: u128| {
        if ios == 0 {
            0.0
        } else {
            (sum - before) as f64 / ios as f64 / 1e6
        }
    };
    format!(
        "tierlab emulate: t={:.1}s iops={:.1} util={:.1}% model_latency={:.3}ms lateness={:.3}ms in_flight={}",
        now_ns as f64 / 1e9,
        ios as f64 / (dt_ns / 1e9),
        (100.0 * busy / dt_ns).min(100.0),
        per_io(c.model_latency_sum_ns, prev.model_latency_sum_ns),
        per_io(c.lateness_sum_ns, prev.lateness_sum_ns),
        c.in_flight
    )
}
