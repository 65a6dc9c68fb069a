//! The IO engines side by side on a real disk:
//!
//!   cargo run --release -p tierlab-real --example io_engines [IOS] [DIR]
//!
//! Random 4 KiB O_DIRECT reads of a 1 GiB file in DIR (default: the
//! current directory, so put it on the disk to measure, not on tmpfs,
//! where io_uring hands every IO to kernel worker threads), through the
//! passthrough policy, at queue depth 1 and
//! 16, with io_uring and with the thread pool. Reports IOPS, tierlab's
//! mean host latency, and the CPU time the whole process (its IO threads
//! and io_uring's kernel workers included) spent per IO. Engines alternate
//! within each round; best of 3 rounds.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tierlab_real::EngineKind;

const FILE_BYTES: u64 = 1 << 30;

fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// (IOPS, mean latency µs, CPU µs per IO).
fn run(dir: &Path, n: usize, depth: usize, engine: EngineKind) -> (f64, f64, f64) {
    let text = format!(
        r#"seed = 1
[[devices]]
name = "disk"
path = "engines.img"
[policy]
kind = "passthrough"
[[tenants]]
name = "t"
workload = {{ generator = "uniform", params = {{ count = {n}, region_size_bytes = {FILE_BYTES}, read_ratio = 1.0, size_bytes = "4k" }} }}
driver = {{ mode = "afap", iodepth = {depth} }}
[output]
interval_s = 10.0
"#
    );
    let cfg = tierlab_sim::config::parse(&text, "engines.toml", &[]).unwrap();
    let opts = tierlab_real::RealOptions {
        verify: false,
        io_threads: depth,
        io_engine: engine,
        wait_poll_us: tierlab_real::WAIT_POLL_US_DEFAULT,
        drain_s: 1.0,
        stop: None,
    };
    let cpu0 = cpu_s();
    let r = tierlab_real::run(&cfg, dir, &opts).unwrap();
    let cpu = cpu_s() - cpu0;
    assert!(
        r.real.backends[0].contains("O_DIRECT"),
        "{}: this benchmark needs O_DIRECT (not tmpfs)",
        r.real.backends[0]
    );
    let out = dir.join("out");
    tierlab_real::write_outputs(&r, &out).unwrap();
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    (
        s["iops"].as_f64().unwrap(),
        s["mean_latency_us"].as_f64().unwrap(),
        cpu * 1e6 / n as f64,
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(20_000, |a| a.parse().expect("IOS"));
    let base = args.next().unwrap_or_else(|| ".".into());
    let dir = tempfile::tempdir_in(&base).unwrap();
    let path = dir.path().join("engines.img");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // Written for real, so reads hit allocated blocks.
    let chunk = vec![1u8; 1 << 20];
    for i in 0..FILE_BYTES >> 20 {
        f.write_all_at(&chunk, i << 20).unwrap();
    }
    f.sync_all().unwrap();
    println!(
        "{n} random 4 KiB O_DIRECT reads per run on {} (best of 3 rounds)",
        path.display()
    );
    println!(
        "{:<6} {:<9} {:>10} {:>12} {:>14}",
        "depth", "engine", "IOPS", "mean lat µs", "CPU µs per IO"
    );
    for depth in [1, 16] {
        let mut best = [(0.0f64, f64::MAX, f64::MAX); 2];
        for _ in 0..3 {
            for (k, engine) in [EngineKind::Uring, EngineKind::Threads]
                .into_iter()
                .enumerate()
            {
                let (iops, lat, cpu) = run(dir.path(), n, depth, engine);
                best[k] = (best[k].0.max(iops), best[k].1.min(lat), best[k].2.min(cpu));
            }
        }
        for (k, name) in ["io_uring", "threads"].into_iter().enumerate() {
            let (iops, lat, cpu) = best[k];
            println!("{depth:<6} {name:<9} {iops:>10.0} {lat:>12.1} {cpu:>14.2}");
        }
    }
}
