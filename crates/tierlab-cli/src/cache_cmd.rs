//! `tierlab cache`: cache-only hit-ratio studies (no timing). Every
//! policy × capacity pair is simulated in one pass over the trace; requests
//! are split into pages and every page reference is a lookup that inserts
//! on a miss (libCacheSim's semantics, see docs/metrics.md).

use clap::Args;
use tierlab_cache::sim::{self, CacheSimResult};
use tierlab_trace::RecordStream;
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

/// `texts` as pages ([`tierlab_cache::size::sizes_in_pages`]); a share of
/// the footprint costs a first pass over `input`.
fn capacity_pages(
    texts: &[String],
    what: &str,
    page_size: u32,
    input: &InputArgs,
) -> CliResult<Vec<u64>> {
    let footprint = || {
        if input.input.as_os_str() == "-" {
            return Err(tierlab_trace::TraceError::Invalid(
                "a share of the footprint needs a first pass over the trace, and stdin \
                 cannot be read twice; give bytes or pages"
                    .to_string(),
            ));
        }
        let mut reader = input
            .open()
            .map_err(|e| tierlab_trace::TraceError::Invalid(e.to_string()))?;
        tierlab_cache::size::footprint_pages(&mut reader, page_size)
    };
    Ok(
        tierlab_cache::size::sizes_in_pages(texts, page_size, footprint).map_err(|e| match e {
            tierlab_trace::TraceError::Param(p) => p.with_key(what).to_string(),
            e => format!("{what}: {e}"),
        })?,
    )
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

/// One point of a miss-ratio curve.
#[derive(serde::Serialize)]
pub struct MrcPoint {
    pub policy: String,
    /// `exact` (LRU stack distances) or `shards` (sampled estimate).
    pub method: &'static str,
    pub sampling_rate: f64,
    pub capacity_pages: u64,
    pub page_size_bytes: u32,
    pub requests: u64,
    pub io_requests: u64,
    /// Exact, or `miss_ratio × requests` rounded for SHARDS.
    pub misses: u64,
    pub miss_ratio: f64,
}

/// Miss ratios at every size in `--mrc` from one pass: exact for LRU by
/// stack distance, SHARDS-sampled otherwise (docs/cache.md).
fn run_mrc(args: &CacheArgs, page_size: u32) -> CliResult<Vec<MrcPoint>> {
    let policy = check_policy(&args.mrc_policy)?;
    let sizes = capacity_pages(&args.mrc, "--mrc", page_size, &args.input)?;
    let mut reader = args.input.open()?;
    let mut io_requests = 0u64;
    let mut requests = 0u64;
    let exact = policy == "lru" && args.shards_rate.is_none();
    let mut lru = exact.then(tierlab_cache::mrc::LruMrc::new);
    let mut sampled = match (exact, args.shards_rate) {
        (true, _) => None,
        (false, Some(rate)) => Some(tierlab_cache::mrc::ShardsSim::new(&policy, &sizes, rate)?),
        (false, None) => {
            return Err(format!(
                "an exact one-pass curve exists only for LRU; for {policy:?} give --shards-rate (e.g. 0.01)"
            )
            .into());
        }
    };
    while let Some(rec) = reader.next_record()? {
        let mut any = false;
        for key in sim::record_pages(&rec, page_size) {
            match (&mut lru, &mut sampled) {
                (Some(m), _) => m.access(key),
                (_, Some(s)) => s.access(key),
                _ => {}
            }
            requests += 1;
            any = true;
        }
        io_requests += any as u64;
    }
    report_skipped(&reader);
    let ratios: Vec<f64> = match (&lru, &sampled) {
        (Some(m), _) => sizes.iter().map(|&c| m.miss_ratio_at(c)).collect(),
        (_, Some(s)) => s.miss_ratios(),
        _ => Vec::new(),
    };
    Ok(sizes
        .iter()
        .zip(ratios)
        .map(|(&capacity_pages, miss_ratio)| MrcPoint {
            policy: policy.clone(),
            method: if exact { "exact" } else { "shards" },
            sampling_rate: if exact {
                1.0
            } else {
                args.shards_rate.unwrap_or(1.0)
            },
            capacity_pages,
            page_size_bytes: page_size,
            requests,
            io_requests,
            misses: match &lru {
                Some(m) => m.misses_at(capacity_pages),
                None => (miss_ratio * requests as f64).round() as u64,
            },
            miss_ratio,
        })
        .collect())
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
    let pages = capacity_pages(&args.capacity, "--capacity", page_size, &args.input)?;
    let configs = sim::grid(&args.policy, &pages, page_size)?;
    let mut reader = args.input.open()?;
    let results = sim::run(&mut reader, &configs)?;
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
