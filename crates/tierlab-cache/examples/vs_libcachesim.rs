//! Cache-only tierlab vs libCacheSim, side by side in one run
//! (docs/benchmarks.md, "Cache-only LRU vs libCacheSim"):
//!
//! ```sh
//! cargo build --release -p tierlab-cache --example vs_libcachesim
//! taskset -c 1 target/release/examples/vs_libcachesim --python /work/main/.venv/bin/python \
//!     [--requests 10000000] [--region 4g] [--theta 0.99] [--percent 1,10] [--rounds 5] \
//!     [--policy lru] [--default-table] [--tierlab-only] [--dir DIR]
//! ```
//!
//! Writes one Zipf stream of single-page requests as a native trace and an
//! oracleGeneral trace, then for each share of the footprint alternates
//! `--rounds` times: tierlab's cache-only run (opening and reading the
//! native trace included, as `tierlab cache`) and libCacheSim's
//! `process_trace` (its C loop; only that call is timed) with a hash table
//! sized to the cache (and, with `--default-table`, its default 2^24).
//! Prints both miss ratios to 9 decimals and fails if they differ.
//! `--policy` is lru, fifo, s3fifo (S3-FIFO: from 20 pages up) or arc.

use std::path::PathBuf;

use tierlab_cache::bench::{
    self, BenchStream, Clock, Comparison, ZipfStreamSpec, compare_with_libcachesim, median,
};

struct Args {
    python: PathBuf,
    spec: ZipfStreamSpec,
    percents: Vec<f64>,
    rounds: u32,
    policy: String,
    default_table: bool,
    /// Time tierlab alone (for profiling it).
    tierlab_only: bool,
    dir: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        python: PathBuf::from("python3"),
        spec: ZipfStreamSpec::default(),
        percents: vec![1.0, 10.0],
        rounds: 5,
        policy: "lru".into(),
        default_table: false,
        tierlab_only: false,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--default-table" || flag == "--tierlab-only" {
            a.default_table |= flag == "--default-table";
            a.tierlab_only |= flag == "--tierlab-only";
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value:?}: {e}");
        match flag.as_str() {
            "--python" => a.python = value.into(),
            "--requests" => a.spec.requests = value.parse().map_err(|e| bad(&e))?,
            "--region" => a.spec.region = value,
            "--theta" => a.spec.theta = value.parse().map_err(|e| bad(&e))?,
            "--seed" => a.spec.seed = value.parse().map_err(|e| bad(&e))?,
            "--rounds" => a.rounds = value.parse().map_err(|e| bad(&e))?,
            "--policy" => a.policy = value,
            "--dir" => a.dir = Some(value.into()),
            "--percent" => {
                a.percents = value
                    .split(',')
                    .map(|p| p.trim().trim_end_matches('%').parse::<f64>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| bad(&e))?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

/// libcachesim's Python class for a tierlab policy name.
fn lcs_class(policy: &str) -> Result<&'static str, String> {
    Ok(match policy {
        "lru" => "LRU",
        "fifo" => "FIFO",
        "s3fifo" => "S3FIFO",
        "arc" => "ARC",
        other => return Err(format!("--policy {other}: one of lru, fifo, s3fifo, arc")),
    })
}

fn report(c: &Comparison, which: &str) {
    println!("{} {} pages ({which}):", c.policy, c.capacity_pages);
    for (clock, name) in [(Clock::Wall, "wall"), (Clock::Cpu, "cpu ")] {
        let (tb, lb) = c.rates_best(clock);
        let (tm, lm) = c.rates_median(clock);
        println!(
            "  {name}  tierlab {:6.2} M/s best, {:6.2} median   libcachesim {:6.2} M/s best, {:6.2} median   ratio {:.2}x best, {:.2}x median",
            tb / 1e6,
            tm / 1e6,
            lb / 1e6,
            lm / 1e6,
            c.speed_ratio_best(clock),
            c.speed_ratio_median(clock),
        );
    }
    println!(
        "  miss ratio tierlab {:.9} ({} misses)  libcachesim {:.9} ({} misses)",
        c.tierlab_miss_ratio,
        c.tierlab_misses,
        c.libcachesim_miss_ratio,
        c.libcachesim_misses()
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let class = lcs_class(&args.policy)?;
    let tmp = args
        .dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("tierlab-vs-libcachesim-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let stream: BenchStream = bench::write_zipf_stream(&tmp, &args.spec)?;
    println!(
        "stream: {} single-page Zipf(theta={}) requests over {}, seed {}, {} distinct pages",
        stream.requests, args.spec.theta, args.spec.region, args.spec.seed, stream.footprint_pages
    );
    println!(
        "load: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    // Warm the page cache for both files.
    std::fs::read(&stream.native_path)?;
    std::fs::read(&stream.oracle_general_path)?;
    let mut failed = false;
    for &pct in &args.percents {
        let cap = stream.share_pages(pct);
        if args.tierlab_only {
            let config = tierlab_cache::sim::CacheSimConfig {
                policy: args.policy.clone(),
                capacity_pages: cap,
                page_size_bytes: bench::BENCH_PAGE_BYTES,
            };
            let runs: Vec<bench::Timing> = (0..args.rounds.max(1))
                .map(|_| bench::time_cache_sim(&stream.native_path, std::slice::from_ref(&config)))
                .map(|r| r.map(|(_, t)| t))
                .collect::<Result<_, _>>()?;
            let wall: Vec<f64> = runs.iter().map(|t| t.wall_s).collect();
            let cpu: Vec<f64> = runs.iter().filter_map(|t| t.cpu_s).collect();
            let ns = |s: f64| s * 1e9 / stream.requests as f64;
            println!(
                "{} {cap} pages: tierlab median of {}: wall {:.1} ns/request, cpu {:.1} ns/request",
                args.policy,
                runs.len(),
                ns(median(&wall)),
                ns(median(&cpu)),
            );
            continue;
        }
        let mut tables = vec![(bench::sized_hashpower(cap), "sized table")];
        if args.default_table {
            tables.push((24, "default table"));
        }
        for (hp, which) in tables {
            let c = compare_with_libcachesim(
                &stream,
                &args.policy,
                class,
                cap,
                hp,
                &args.python,
                args.rounds,
            )?;
            report(&c, &format!("{pct}% hp{hp} {which}"));
            if c.tierlab_misses != c.libcachesim_misses() {
                eprintln!("miss counts differ at {cap} pages");
                failed = true;
            }
        }
    }
    std::fs::remove_dir_all(&tmp)?;
    if failed {
        return Err("miss counts differ".into());
    }
    Ok(())
}
