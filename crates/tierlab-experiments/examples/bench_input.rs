//! Writes `tierlab bench`'s input trace to a file, for measuring commands
//! (and peers such as libCacheSim) on it from the shell:
//! `cargo run --release -p tierlab-experiments --example bench_input -- 10000000 /tmp/bench.csv`
//! (the format follows the file name: .csv → MSR, .tlt → native).

use std::path::PathBuf;

use tierlab_trace::Format;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: bench_input RECORDS OUTPUT (.csv for MSR, .tlt for native)";
    let records: u64 = args.next().ok_or(usage)?.parse().map_err(|_| usage)?;
    let path = PathBuf::from(args.next().ok_or(usage)?);
    let format = Format::from_output_name(&path).ok_or(usage)?;
    tierlab_experiments::bench::write_input(&path, format, records)?;
    Ok(())
}
