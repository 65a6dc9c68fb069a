//! `tierlab bench`: prints the results of `tierlab_experiments::bench`
//! as a Markdown table (for docs/benchmarks.md) or JSON.

use clap::Args;
use tierlab_experiments::bench::{self, BenchArgs};

use crate::CliResult;

#[derive(Args)]
pub struct BenchCliArgs {
    #[command(flatten)]
    pub bench: BenchArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Each benchmark next to its peer (fio, libCacheSim, nbdkit), as
    /// ratios: a command of the Python package (its peers are Python
    /// packages and processes), so this binary only says where it is.
    #[arg(long)]
    pub compare: bool,
}

pub fn run(args: BenchCliArgs) -> CliResult {
    if args.compare {
        return crate::python_command("bench --compare");
    }
    let results = bench::run(&args.bench)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
        return Ok(());
    }
    println!("| benchmark | records | best s | records/s | target |");
    println!("|---|---:|---:|---:|---:|");
    for r in &results {
        let target = r
            .target_records_per_s
            .map_or("—".to_string(), |t| format!("≥ {:.0} M/s", t / 1e6));
        let pass = match r.target_records_per_s {
            Some(t) if r.records_per_s >= t => " ✓",
            Some(_) => " ✗",
            None => "",
        };
        println!(
            "| {} | {} | {:.3} | {:.1} M/s | {target}{pass} |",
            r.name,
            r.records,
            r.seconds,
            r.records_per_s / 1e6
        );
    }
    Ok(())
}
