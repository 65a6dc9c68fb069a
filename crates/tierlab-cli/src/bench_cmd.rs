//! `tierlab bench`: prints the results of `tierlab_experiments::bench`
//! as a Markdown table (for docs/benchmarks.md) or JSON.

use std::path::PathBuf;

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
    /// Only write the benchmark's input trace (`--records` of them) to this
    /// file, MSR CSV or native by its name (.csv, .tlt), for timing other
    /// tools on it; measure nothing.
    #[arg(long, value_name = "FILE")]
    pub write_input: Option<PathBuf>,
}

pub fn run(args: BenchCliArgs) -> CliResult {
    if args.compare {
        return crate::python_command("bench --compare");
    }
    if let Some(path) = &args.write_input {
        let format = tierlab_trace::Format::from_output_name(path).ok_or_else(|| {
            format!(
                "--write-input {}: name the file by its format: .csv (MSR Cambridge), .tlt (native), or another that `tierlab trace formats` lists as written",
                path.display()
            )
        })?;
        bench::write_input(path, format, args.bench.records)?;
        return Ok(());
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
