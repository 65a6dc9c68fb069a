//! `tierlab cache`: cache-only hit-ratio studies (no timing). Every
//! policy × capacity pair is simulated in one pass over the trace; requests
//! are split into pages and every page reference is a lookup that inserts
//! on a miss (libCacheSim's semantics, see docs/metrics.md).

use clap::Args;
use tierlab_cache::policies;
use tierlab_cache::sim::parse_capacity_pages;
use tierlab_cache::sim::{self, CacheSimConfig, CacheSimResult};
use tierlab_trace::RecordStream;
use tierlab_trace::units::{format_size_bytes, parse_size_bytes};

use crate::CliResult;
use crate::trace_cmd::{InputArgs, report_skipped};

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
    /// Cache capacities, comma separated: a page count (`14514`) or a size
    /// with a binary unit (`64MiB`, a whole number of pages).
    #[arg(
        long,
        short = 'c',
        value_delimiter = ',',
        required_unless_present = "mrc"
    )]
    pub capacity: Vec<String>,
    /// Exact LRU miss ratios at these sizes (pages or sizes with units,
    /// comma separated), all from one pass by stack distance; instead of
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

/// Parses the page size: a byte size, > 0, that fits 32 bits.
pub fn parse_page_size(text: &str) -> Result<u32, String> {
    let bytes = parse_size_bytes(text).map_err(|e| format!("--page-size: {e}"))?;
    if bytes == 0 {
        return Err(format!("--page-size {text:?}: must be at least 1 byte"));
    }
    u32::try_from(bytes).map_err(|_| format!("--page-size {text:?}: must be below 4 GiB"))
}

/// Checks a policy name against the library's list.
pub fn check_policy(name: &str) -> Result<String, String> {
    let lower = name.trim().to_ascii_lowercase();
    if policies::NAMES.contains(&lower.as_str()) {
        Ok(lower)
    } else {
        Err(format!(
            "unknown policy {name:?}; available: {}",
            policies::NAMES.join(", ")
        ))
    }
}

/// Every policy × capacity, policies outermost, in the order given.
pub fn configs(
    policies: &[String],
    capacities: &[String],
    page_size: u32,
) -> Result<Vec<CacheSimConfig>, String> {
    let policies = policies
        .iter()
        .map(|p| check_policy(p))
        .collect::<Result<Vec<_>, _>>()?;
    let capacities = capacities
        .iter()
        .map(|c| parse_capacity_pages(c, page_size))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::with_capacity(policies.len() * capacities.len());
    for policy in &policies {
        for &capacity_pages in &capacities {
            out.push(CacheSimConfig {
                policy: policy.clone(),
                capacity_pages,
                page_size_bytes: page_size,
            });
        }
    }
    Ok(out)
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
    let sizes = args
        .mrc
        .iter()
        .map(|c| parse_capacity_pages(c, page_size))
        .collect::<Result<Vec<_>, _>>()?;
    let policy = check_policy(&args.mrc_policy)?;
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
    let configs = configs(&args.policy, &args.capacity, page_size)?;
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
    fn capacities() {
        assert_eq!(parse_capacity_pages("14514", 4096), Ok(14514));
        assert_eq!(parse_capacity_pages("1_000", 4096), Ok(1000));
        assert_eq!(parse_capacity_pages("64MiB", 4096), Ok(16384));
        assert_eq!(parse_capacity_pages("64m", 512), Ok(131072));
        let e = parse_capacity_pages("6k", 4096).unwrap_err();
        assert!(e.contains("not a whole number of 4096-byte pages"), "{e}");
        assert!(parse_capacity_pages("0", 4096).is_err());
        assert!(
            parse_capacity_pages("64MB", 4096)
                .unwrap_err()
                .contains("ambiguous")
        );
        assert!(parse_capacity_pages("lots", 4096).is_err());
    }

    #[test]
    fn page_sizes() {
        assert_eq!(parse_page_size("4KiB"), Ok(4096));
        assert_eq!(parse_page_size("512"), Ok(512));
        assert!(parse_page_size("0").is_err());
        assert!(parse_page_size("8g").is_err());
    }

    #[test]
    fn unknown_policy_lists_names() {
        let e = check_policy("nope").unwrap_err();
        assert!(e.contains("available:"), "{e}");
    }
}
