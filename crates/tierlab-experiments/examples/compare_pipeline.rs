//! Issue 21's trace-pipeline comparisons in one run, until `tierlab bench
//! --compare` runs them: `trace stats` on a 10 M-record MSR CSV against
//! libCacheSim's CSV reader, and `tierlab cache` on CSV against native.
//!
//! cargo run --release -p tierlab-experiments --example compare_pipeline -- \
//!     [--records 10000000] [--rounds 5] [--python .venv/bin/python] \
//!     [--policy lru] [--capacity 1%,41941pages] [--dir /tmp] [--json]

use std::path::PathBuf;

use tierlab_experiments::bench::{PipelineCompareOptions, TimedRun, compare_trace_pipeline};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut o = PipelineCompareOptions {
        records: 10_000_000,
        rounds: 5,
        python: None,
        cache_policy: "lru".to_string(),
        cache_capacities: vec!["1%".to_string()],
        dir: None,
    };
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--records" => o.records = value()?.parse()?,
            "--rounds" => o.rounds = value()?.parse()?,
            "--python" => o.python = Some(PathBuf::from(value()?)),
            "--policy" => o.cache_policy = value()?,
            "--capacity" => o.cache_capacities = value()?.split(',').map(String::from).collect(),
            "--dir" => o.dir = Some(PathBuf::from(value()?)),
            "--json" => json = true,
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    let r = compare_trace_pipeline(&o)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let show = |runs: &[TimedRun]| {
        runs.iter()
            .map(|r| format!("{:.2}/{:.2}", r.wall_s, r.cpu_s))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "records {}, rounds {}, load {} → {}",
        r.records, r.rounds, r.load_before, r.load_after
    );
    println!("(each run: wall s / CPU s)");
    println!(
        "trace stats, CSV            {}  footprint {}",
        show(&r.stats_csv),
        r.footprint_4k_blocks
    );
    if let (Some(read), Some(distinct)) = (
        r.stats_speedup_over_libcachesim_read,
        r.stats_speedup_over_libcachesim_distinct,
    ) {
        println!("libCacheSim reader          {}", show(&r.libcachesim_read));
        println!(
            "libCacheSim distinct count  {}  objects {}",
            show(&r.libcachesim_distinct),
            r.libcachesim_distinct_objects.unwrap_or(0)
        );
        println!(
            "trace stats speed-up (medians): {read:.2}x the reader, {distinct:.2}x the distinct count"
        );
    }
    for c in &r.cache {
        println!(
            "cache {} -c {} CSV     {}",
            r.cache_policy,
            c.capacity,
            show(&c.csv)
        );
        println!(
            "cache {} -c {} native  {}",
            r.cache_policy,
            c.capacity,
            show(&c.native)
        );
        println!(
            "  misses {}, CSV / native (medians) {:.2}",
            c.misses, c.csv_over_native
        );
    }
    Ok(())
}
