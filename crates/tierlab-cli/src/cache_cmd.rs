//! `tierlab cache`: cache-only hit-ratio studies (no timing). Every
//! policy × capacity pair is simulated in one pass over the trace; requests
//! are split into pages and every page reference is a lookup that inserts
//! on a miss (libCacheSim's semantics, see docs/metrics.md). The runs are
//! `tierlab_cache::{sim, mrc}`; this file parses and prints.

use clap::Args;
use tierlab_cache::mrc::{self, MrcMethod, MrcPoint};
use tierlab_cache::sim::{self, CacheSimResult};
use tierlab_trace::units::format_size_bytes;

use crate::CliResult;
use tierlab_experiments::input::{InputArgs, check_policy, parse_page_size, report_skipped};

#[derive(Args)]
pub struct CacheArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Eviction policies, comma separated (e.g. lru,fifo,arc).
    #[arg(
        long,
        short = 'p',
        value_delimiter = ',',
        required_unless_present = "mrc"
    )]
    pub policy: Vec<String>,
    /// Cache capacities, comma separated: bytes (`8388608`) or a size with a
    /// binary unit (`8MiB`), each a whole number of pages; a page count
    /// (`2048pages`); or a share of the trace's footprint (`1%`, its
    /// distinct pages; costs a first pass over the trace).
    #[arg(
        long,
        short = 'c',
        value_delimiter = ',',
        required_unless_present = "mrc"
    )]
    pub capacity: Vec<String>,
    /// Exact LRU miss ratios at these sizes (as --capacity, comma
    /// separated), all from one pass by stack distance; instead of
    /// --policy/--capacity.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["policy", "capacity"])]
    pub mrc: Vec<String>,
    /// With --mrc: the policy of the curve. LRU is exact (stack distances)
    /// unless --shards-rate is given; other policies need --shards-rate.
    #[arg(long, default_value = "lru", requires = "mrc")]
    pub mrc_policy: String,
    /// With --mrc: estimate the curve with SHARDS (Waldspurger et al., FAST '15)
    /// at this spatial sampling rate (0 < R <= 1), e.g. 0.01.
    #[arg(long, requires = "mrc")]
    pub shards_rate: Option<f64>,
    /// Page (block) size: requests are split into pages of this size.
    #[arg(long, default_value = "4KiB")]
    pub page_size: String,
    /// Print a JSON list, one object per policy × capacity.
    #[arg(long)]
    pub json: bool,
}

fn ratio(misses: u64, requests: u64) -> String {
    if requests == 0 {
        "-".to_string()
    } else {
        format!("{:.6}", misses as f64 / requests as f64)
    }
}

fn print_table(results: &[CacheSimResult]) {
    println!(
        "{:<10} {:>12} {:>10} {:>12} {:>12} {:>10} {:>10} {:>10}",
        "policy", "capacity", "pages", "requests", "misses", "miss_ratio", "read_mr", "write_mr"
    );
    for r in results {
        let bytes = r.capacity_pages.saturating_mul(r.page_size_bytes as u64);
        println!(
            "{:<10} {:>12} {:>10} {:>12} {:>12} {:>10} {:>10} {:>10}",
            r.policy,
            format_size_bytes(bytes),
            r.capacity_pages,
            r.requests,
            r.misses,
            ratio(r.misses, r.requests),
            ratio(r.read_misses, r.read_requests),
            ratio(r.write_misses, r.write_requests),
        );
    }
}

/// The curve's method from the options: exact for LRU unless a
/// sampling rate is given.
fn mrc_method(policy: &str, shards_rate: Option<f64>) -> CliResult<MrcMethod> {
    match (policy == "lru", shards_rate) {
        (true, None) => Ok(MrcMethod::ExactLru),
        (_, Some(rate)) => Ok(MrcMethod::Shards { rate }),
        (false, None) => Err(format!(
            "an exact one-pass curve exists only for LRU; for {policy:?} give --shards-rate (e.g. 0.01)"
        )
        .into()),
    }
}

/// Miss ratios at every size in `--mrc` from one pass (docs/cache.md).
fn run_mrc(args: &CacheArgs, page_size: u32) -> CliResult<Vec<MrcPoint>> {
    let policy = check_policy(&args.mrc_policy)?;
    let sizes = args.input.capacity_pages(&args.mrc, "--mrc", page_size)?;
    let method = mrc_method(&policy, args.shards_rate)?;
    let (points, reader) = args
        .input
        .read_with(|s| mrc::curve(s, &policy, method, &sizes, page_size))?;
    let points = points?;
    report_skipped(&reader);
    Ok(points)
}

pub fn run(args: CacheArgs) -> CliResult {
    let page_size = parse_page_size(&args.page_size)?;
    if !args.mrc.is_empty() {
        let results = run_mrc(&args, page_size)?;
        if let Some(first) = results.first().filter(|r| r.method == "shards") {
            eprintln!(
                "tierlab: {} miss ratios estimated with SHARDS at sampling rate {}",
                first.policy, first.sampling_rate
            );
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&results)?);
        } else {
            println!(
                "{:>12} {:>10} {:>12} {:>12} {:>10}",
                "capacity", "pages", "requests", "misses", "miss_ratio"
            );
            for r in &results {
                let bytes = r.capacity_pages.saturating_mul(page_size as u64);
                println!(
                    "{:>12} {:>10} {:>12} {:>12} {:>10}",
                    format_size_bytes(bytes),
                    r.capacity_pages,
                    r.requests,
                    r.misses,
                    ratio(r.misses, r.requests)
                );
            }
        }
        return Ok(());
    }
    // Policies first: a mistyped name fails before any pass over the trace.
    for p in &args.policy {
        check_policy(p)?;
    }
    let pages = args
        .input
        .capacity_pages(&args.capacity, "--capacity", page_size)?;
    let configs = sim::grid(&args.policy, &pages, page_size)?;
    // Parsing runs on a second thread, the caches on this one.
    let (results, reader) = args.input.read_with(|s| sim::run(s, &configs))?;
    let results = results?;
    report_skipped(&reader);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print_table(&results);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_policy_lists_names() {
        let e = check_policy("nope").unwrap_err().to_string();
        assert!(
            e.starts_with("`--policy`: expected a cache policy, one of: fifo"),
            "{e}"
        );
    }
}
