//! Cache-only throughput of every policy on a Zipf stream (one core):
//! `cargo run --release -p tierlab-cache --example throughput [N] [KEYS] [ALPHA] [CAP]`.
//! Keys are pre-generated so only `access` is timed; Belady's next-use
//! indices are computed beforehand too (not timed), as the simulator does.

use std::time::Instant;
use tierlab_cache::policies::{self, lru::Lru};
use tierlab_cache::sim::next_uses;
use tierlab_cache::workload::Zipf;
use tierlab_cache::{Eviction, mrc::LruMrc};

fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let n: usize = arg(1, 10_000_000);
    let n_keys: usize = arg(2, 1_000_000);
    let alpha: f64 = arg(3, 1.0);
    let cap: usize = arg(4, 100_000);
    let keys = Zipf::new(n_keys, alpha, 42).take(n);
    let next = next_uses(&keys);
    println!("zipf: {n} accesses, {n_keys} keys, alpha {alpha}, capacity {cap} pages");
    println!(
        "{:<14} {:>10} {:>12} {:>10}",
        "policy", "miss_ratio", "M_access/s", "seconds"
    );
    for name in policies::NAMES {
        let mut c = policies::build(name, cap).unwrap();
        let belady = *name == "belady";
        let t = Instant::now();
        let mut misses = 0u64;
        for (&k, &nx) in keys.iter().zip(&next) {
            if belady {
                c.set_next_access(nx);
            }
            misses += !c.access(k).is_hit() as u64;
        }
        report(name, misses, n, t.elapsed().as_secs_f64());
    }
    // Static dispatch, as a caller holding the concrete type would.
    let mut c = Lru::new(cap);
    let t = Instant::now();
    let misses = keys.iter().filter(|&&k| !c.access(k).is_hit()).count() as u64;
    report("lru (static)", misses, n, t.elapsed().as_secs_f64());
    let mut m = LruMrc::new();
    let t = Instant::now();
    keys.iter().for_each(|&k| m.access(k));
    report(
        "lru-mrc exact",
        m.misses_at(cap as u64),
        n,
        t.elapsed().as_secs_f64(),
    );
}

fn report(name: &str, misses: u64, n: usize, secs: f64) {
    println!(
        "{name:<14} {:>10.4} {:>12.1} {:>10.3}",
        misses as f64 / n as f64,
        n as f64 / secs / 1e6,
        secs
    );
}
