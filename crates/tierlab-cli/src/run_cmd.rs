//! `tierlab run CONFIG --out DIR`: the config of `tierlab sim`, with devices
//! naming files, block devices or `ram`, run for real (docs/real.md).

use std::path::PathBuf;

use clap::Args;
use tierlab_real::{EngineKind, RealOptions};
use tierlab_sim::config;

use crate::CliResult;

#[derive(Args)]
pub struct RunArgs {
    /// Run configuration (TOML): `[[devices]]` take `path` (a file, a block
    /// device, or "ram"), `capacity_bytes`, `create`, `direct`.
    pub config: PathBuf,
    /// Override a config key, e.g. --set tenants.0.driver.iodepth=8 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Output directory: the same files as `tierlab sim`, plus `real` in summary.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Stamp every written sector and check every read; read every written
    /// sector back at the end. Any mismatch fails the run.
    #[arg(long)]
    pub verify: bool,
    /// Device IOs in service at once (IO threads, or io_uring slots); 0
    /// does each IO inline on the executor's thread (queue depth 1).
    #[arg(long, default_value_t = 16)]
    pub io_threads: usize,
    /// How device IOs are done: io_uring (`uring`), io_uring with a
    /// kernel thread polling it (`uring-sqpoll`: pays only with cores to
    /// spare), a thread pool (`threads`), or io_uring where the kernel
    /// allows it (`auto`).
    #[arg(long, default_value = "auto", value_parser = parse_engine)]
    pub io_engine: EngineKind,
    /// io_uring: poll this long (µs) for a completion, yielding the CPU
    /// between looks, before sleeping; 0 sleeps at once (less CPU, more
    /// latency on fast devices: docs/real.md, "Waiting for completions").
    #[arg(long, default_value_t = tierlab_real::WAIT_POLL_US_DEFAULT,
          value_parser = clap::value_parser!(u32).range(0..=tierlab_real::WAIT_POLL_US_MAX as i64))]
    pub wait_poll_us: u32,
    /// After the workload, wait at most this long (s) for the policy's
    /// timers and background IO.
    #[arg(long, default_value_t = 30.0, value_parser = seconds)]
    pub drain_s: f64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A number of seconds: finite and not negative.
fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds >= 0")),
    }
}

fn parse_engine(s: &str) -> Result<EngineKind, tierlab_core::ParamError> {
    s.parse()
}

pub fn run(args: RunArgs) -> CliResult {
    let config = config::load(&args.config, &args.set)?;
    let base_dir = args.config.parent().map(PathBuf::from).unwrap_or_default();
    if args.io_threads > 1024 {
        return Err(format!("--io-threads {}: give 0 to 1024", args.io_threads).into());
    }
    // SIGINT/SIGTERM: stop the workload, write dirty data back, sync,
    // write the outputs, exit 1 (blocked before the IO threads start).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _signals =
        tierlab_real::signals::StopSignals::watch(std::sync::Arc::clone(&stop), "tierlab run")?;
    let opts = RealOptions {
        verify: args.verify,
        io_threads: args.io_threads,
        io_engine: args.io_engine,
        wait_poll_us: args.wait_poll_us,
        drain_s: args.drain_s,
        stop: Some(stop),
    };
    let result = tierlab_real::run(&config, &base_dir, &opts)
        .map_err(|e| format!("{}: {e}", args.config.display()))?;
    tierlab_real::write_outputs(&result, &args.out)
        .map_err(|e| format!("{}: {e}", args.out.display()))?;
    for w in &result.run.info.warnings {
        eprintln!("warning: {w}");
    }
    if result.real.interrupted {
        return Err(format!(
            "{}: interrupted: the workload was stopped early; dirty data was written back \
             ({:.2} s), every store synced, and {} written",
            args.config.display(),
            result.real.write_back_s,
            args.out.display()
        )
        .into());
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(args.out.join("summary.json"))?)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    let get = |k: &str| summary.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
    println!(
        "tierlab run: {} — {} IOs in {:.3} s ({:.0} IOPS), mean {:.1} µs, p99 {:.1} µs",
        args.config.display(),
        get("ios") as u64,
        result.run.info.simulated_s,
        get("iops"),
        get("mean_latency_us"),
        get("p99_latency_us"),
    );
    println!("  IO engine: {}", result.real.io_engine);
    println!(
        "  end of run: dirty data written back in {:.2} s, every store fdatasync'ed",
        result.real.write_back_s
    );
    for (name, b) in summary["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(&result.real.backends)
    {
        println!(
            "  device {:<10} {:>9} IOs, mean {:.1} µs  — {b}",
            name["name"].as_str().unwrap_or("?"),
            name["ios"].as_u64().unwrap_or(0),
            name["mean_latency_us"].as_f64().unwrap_or(f64::NAN),
        );
    }
    if args.verify {
        println!(
            "  verified {} sectors ({} in the final scan); {} read sectors were never written",
            result.real.sectors_verified,
            result.real.final_scan_sectors,
            result.real.sectors_unverified
        );
    }
    if result.real.device_errors > 0 {
        println!(
            "  device errors: {} device IOs failed and the policy survived them; {} host IOs \
             were answered with an error (real.device_error_messages has the first: {})",
            result.real.device_errors,
            result.real.host_ios_failed,
            result
                .real
                .device_error_messages
                .first()
                .map_or("", String::as_str)
        );
    }
    println!("  wrote {}", args.out.display());
    Ok(())
}

#[derive(Args)]
pub struct CompareArgs {
    /// A config whose `[[devices]]` carry both a model (for the simulator:
    /// `model`, `preset`, ...) and a backing store (for the real run:
    /// `path`, `create`, `direct`; `capacity_bytes` serves both).
    pub config: PathBuf,
    /// Override a config key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Output directory: `sim/`, `real/` (each a full run's outputs) and compare.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Device IOs in service at once in the real run (0 = inline).
    #[arg(long, default_value_t = 16)]
    pub io_threads: usize,
    /// The real run's IO engine: auto, uring, uring-sqpoll, threads.
    #[arg(long, default_value = "auto", value_parser = parse_engine)]
    pub io_engine: EngineKind,
    /// The real run's poll before sleeping for a completion (µs; see `tierlab run`).
    #[arg(long, default_value_t = tierlab_real::WAIT_POLL_US_DEFAULT,
          value_parser = clap::value_parser!(u32).range(0..=tierlab_real::WAIT_POLL_US_MAX as i64))]
    pub wait_poll_us: u32,
    /// Verify data in the real run.
    #[arg(long)]
    pub verify: bool,
}

/// `tierlab compare`: prints `tierlab_real::compare::compare`'s rows.
pub fn compare(args: CompareArgs) -> CliResult {
    let config = config::load(&args.config, &args.set)?;
    let base_dir = args.config.parent().map(PathBuf::from).unwrap_or_default();
    let opts = RealOptions {
        verify: args.verify,
        io_threads: args.io_threads,
        io_engine: args.io_engine,
        wait_poll_us: args.wait_poll_us,
        drain_s: 30.0,
        stop: None,
    };
    let origin = args.config.display().to_string();
    let rows = tierlab_real::compare::compare(&config, &base_dir, &origin, &opts, &args.out)?;
    println!(
        "{:<36} {:>14} {:>14} {:>10}",
        "", "simulated", "real", "real/sim"
    );
    for r in &rows {
        let (k, a, b) = (&r.name, r.simulated, r.real);
        println!("{k:<36} {a:>14.3} {b:>14.3} {:>10.3}", b / a);
    }
    println!("  wrote {}", args.out.display());
    Ok(())
}
