//! What the real executor adds per IO at queue depth 1, against a plain
//! pread/pwrite loop over the same RAM-backed file (docs/benchmarks.md):
//!
//!   cargo run --release -p tierlab-real --example qd1_overhead [IOS] [DIR]
//!
//! DIR defaults to /dev/shm (tmpfs: the file lives in RAM, so the device
//! time is a memory copy and what remains is overhead). Both sides do the
//! same random 4 KiB reads (then writes) at the same offsets, one at a
//! time; rounds alternate and the best of each is kept. tierlab's latency
//! is its own host-IO mean from summary.json (arrival to completion,
//! through the passthrough policy), with IO done inline (`--io-threads 0`),
//! through io_uring at depth 1, and on one IO thread.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

const FILE_BYTES: u64 = 256 << 20;
const IO: usize = 4096;

fn offsets(n: usize) -> Vec<u64> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (FILE_BYTES / IO as u64)) * IO as u64
        })
        .collect()
}

/// Mean µs per IO of a plain loop.
fn plain(path: &Path, offs: &[u64], write: bool) -> f64 {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut buf = vec![7u8; IO];
    let t = Instant::now();
    for &o in offs {
        if write {
            f.write_all_at(&buf, o).unwrap();
        } else {
            f.read_exact_at(&mut buf, o).unwrap();
        }
    }
    t.elapsed().as_secs_f64() * 1e6 / offs.len() as f64
}

/// (mean host-IO latency, wall time per IO), µs, of `tierlab run` over the
/// same file.
fn tierlab(
    dir: &Path,
    path: &Path,
    n: usize,
    write: bool,
    io_threads: usize,
    io_engine: tierlab_real::EngineKind,
) -> (f64, f64) {
    let text = format!(
        r#"seed = 1
[[devices]]
name = "shm"
path = "{}"
[policy]
kind = "passthrough"
[[tenants]]
name = "t"
workload = {{ generator = "uniform", params = {{ count = {n}, region_size_bytes = {FILE_BYTES}, read_ratio = {}, size_bytes = "4k" }} }}
driver = {{ mode = "afap", iodepth = 1 }}
[output]
interval_s = 10.0
"#,
        path.display(),
        if write { 0.0 } else { 1.0 }
    );
    let cfg = tierlab_sim::config::parse(&text, "qd1.toml", &[]).unwrap();
    let opts = tierlab_real::RealOptions {
        verify: false,
        io_threads,
        io_engine,
        drain_s: 1.0,
        stop: None,
    };
    let r = tierlab_real::run(&cfg, dir, &opts).unwrap();
    let out = dir.join("out");
    tierlab_real::write_outputs(&r, &out).unwrap();
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let wall_us = s["run"]["simulated_s"].as_f64().unwrap() * 1e6 / n as f64;
    (s["mean_latency_us"].as_f64().unwrap(), wall_us)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(200_000, |a| a.parse().expect("IOS"));
    let base = args.next().unwrap_or_else(|| "/dev/shm".into());
    let dir = tempfile::tempdir_in(&base).unwrap();
    let path = dir.path().join("qd1.img");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let chunk = vec![1u8; 1 << 20];
    for i in 0..FILE_BYTES >> 20 {
        f.write_all_at(&chunk, i << 20).unwrap();
    }
    let offs = offsets(n);
    println!(
        "{n} IOs of 4 KiB at queue depth 1 on {} (best of 3 rounds)",
        path.display()
    );
    println!(
        "µs per IO: plain loop; tierlab's mean host latency (and wall time per IO) with IO inline, through io_uring, on one IO thread; added = latency - plain"
    );
    println!(
        "{:<6} {:>7} {:>15} {:>15} {:>15} {:>9} {:>9} {:>9}",
        "op", "plain", "inline", "io_uring", "thread", "+inline", "+uring", "+thread"
    );
    use tierlab_real::EngineKind::{Auto, Threads, Uring};
    for write in [false, true] {
        let mut p = f64::MAX;
        let mut best = [(f64::MAX, f64::MAX); 3];
        for _ in 0..3 {
            p = p.min(plain(&path, &offs, write));
            for (k, (threads, engine)) in [(0, Auto), (1, Uring), (1, Threads)]
                .into_iter()
                .enumerate()
            {
                let (l, w) = tierlab(dir.path(), &path, n, write, threads, engine);
                best[k] = (best[k].0.min(l), best[k].1.min(w));
            }
        }
        let cell = |(l, w): (f64, f64)| format!("{l:.2} ({w:.2})");
        println!(
            "{:<6} {:>7.2} {:>15} {:>15} {:>15} {:>9.2} {:>9.2} {:>9.2}",
            if write { "write" } else { "read" },
            p,
            cell(best[0]),
            cell(best[1]),
            cell(best[2]),
            best[0].0 - p,
            best[1].0 - p,
            best[2].0 - p
        );
    }
}
