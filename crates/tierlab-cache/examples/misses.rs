//! Miss counts of policies on a key stream (one decimal key per line), for
//! cross-checking against other simulators (e.g. libCacheSim with unit-size
//! objects; python/tests/test_cache.py runs it against the `libcachesim`
//! package): `cargo run -p tierlab-cache --example misses -- KEYS_FILE CAPS POLICY...`
//! where CAPS is a capacity in pages or a comma-separated list of them.
//! Prints `policy capacity misses` per policy and capacity.

use tierlab_cache::policies;
use tierlab_cache::sim::next_uses;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: misses KEYS_FILE CAPACITY[,CAPACITY...] POLICY...".into());
    }
    let text = std::fs::read_to_string(&args[1]).map_err(|e| format!("{}: {e}", args[1]))?;
    let keys: Vec<u64> = text
        .split_whitespace()
        .map(|s| s.parse().map_err(|e| format!("bad key {s:?}: {e}")))
        .collect::<Result<_, _>>()?;
    let caps: Vec<usize> = args[2]
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|e| format!("bad capacity {s:?}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let next = next_uses(&keys);
    for name in &args[3..] {
        for &cap in &caps {
            let mut c = policies::build(name, cap)?;
            let mut misses = 0u64;
            for (&k, &n) in keys.iter().zip(&next) {
                c.set_next_access(n);
                misses += !c.access(k).is_hit() as u64;
            }
            println!("{name} {cap} {misses}");
        }
    }
    Ok(())
}
