//! `tierlab sim CONFIG [--set key=value ...] --out DIR`.

use std::path::PathBuf;

use clap::Args;
use tierlab_sim::{config, run};

use crate::CliResult;

#[derive(Args)]
pub struct SimArgs {
    /// Run configuration (TOML; see configs/ and docs/simulation.md).
    pub config: PathBuf,
    /// Override a config key, e.g. --set tenants.0.driver.iodepth=8 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Output directory: summary.json, series.csv, latency_cdf.csv, timeline.vcd.
    #[arg(long)]
    pub out: PathBuf,
    /// Print the summary as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SimArgs) -> CliResult {
    let config = config::load(&args.config, &args.set)?;
    let base_dir = args.config.parent().map(PathBuf::from).unwrap_or_default();
    let started = std::time::Instant::now();
    let label = args.config.display().to_string();
    let result = tierlab_experiments::progress::run_sim(&config, &base_dir, &label)?;
    let wall_s = started.elapsed().as_secs_f64();
    run::write_outputs(&result, &args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    for w in &result.info.warnings {
        eprintln!("warning: {w}");
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(args.out.join("summary.json"))?)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    let get = |k: &str| summary.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
    println!(
        "tierlab sim: {} — {} IOs in {:.3} s simulated ({:.2} s wall, {:.1} M IOs/s)",
        args.config.display(),
        get("ios") as u64,
        result.info.simulated_s,
        wall_s,
        result.outcome.host_ios as f64 / wall_s / 1e6
    );
    println!(
        "  {:.0} IOPS, mean {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        get("iops"),
        get("mean_latency_us"),
        get("p99_latency_us"),
        get("max_latency_us")
    );
    if let Some(devices) = summary.get("devices").and_then(|d| d.as_array()) {
        for d in devices {
            println!(
                "  device {:<10} {:>9} IOs, mean {:.1} µs, util {:.1} %, avg queue {:.2}",
                d["name"].as_str().unwrap_or("?"),
                d["ios"].as_u64().unwrap_or(0),
                d["mean_latency_us"].as_f64().unwrap_or(f64::NAN),
                d["util_percent"].as_f64().unwrap_or(f64::NAN),
                d["avg_queue_size"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    if result.info.host_ios_unfinished > 0 {
        println!(
            "  {} IOs still in flight when the run stopped (run.duration_s)",
            result.info.host_ios_unfinished
        );
    }
    println!("  wrote {}", args.out.display());
    Ok(())
}
