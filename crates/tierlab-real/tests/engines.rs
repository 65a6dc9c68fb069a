//! The IO engines (io_uring, threads, inline) carry the same verified
//! workload to the same bytes: a write-back cache over a file with
//! constant evictions and flushes, plus a RAM tier, under `--verify`.

use std::path::Path;

use tierlab_real::{EngineKind, RealOptions, RealResult};
use tierlab_sim::config;

fn run(dir: &Path, text: &str, engine: EngineKind, depth: usize) -> Result<RealResult, String> {
    run_polling(dir, text, engine, depth, tierlab_real::WAIT_POLL_US_DEFAULT)
}

fn run_polling(
    dir: &Path,
    text: &str,
    engine: EngineKind,
    depth: usize,
    wait_poll_us: u32,
) -> Result<RealResult, String> {
    let cfg = config::parse(text, "test.toml", &[]).map_err(|e| e.to_string())?;
    let opts = RealOptions {
        verify: true,
        io_threads: depth,
        io_engine: engine,
        wait_poll_us,
        drain_s: 5.0,
        stop: None,
    };
    tierlab_real::run(&cfg, dir, &opts).map_err(|e| e.to_string())
}

const CACHE_OVER_FILE: &str = r#"seed = 7
[[devices]]
name = "ram"
path = "ram"
capacity_bytes = "1MiB"
[[devices]]
name = "disk"
path = "disk.img"
capacity_bytes = "16MiB"
create = true
[policy]
kind = "cache"
capacity_bytes = "1MiB"
write_mode = "write-back"
idle_flush_ms = 5
[[tenants]]
name = "t"
workload = { generator = "uniform", params = { count = 4000, region_size_bytes = "16MiB", read_ratio = 0.5, size_bytes = "4k:6,8k:2,64k:1" } }
driver = { mode = "afap", iodepth = 16 }
"#;

#[test]
fn every_engine_verifies_the_same_workload() {
    let mut disk_bytes = Vec::new();
    // io_uring twice: polling before each sleep (the default) and
    // sleeping at once; the two only differ in how the thread waits.
    for (engine, depth, poll_us, says) in [
        (EngineKind::Uring, 16, 50, "io_uring"),
        (EngineKind::Uring, 1, 0, "io_uring"),
        (EngineKind::Threads, 16, 50, "threads (16)"),
        (EngineKind::Auto, 0, 50, "inline"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let r = run_polling(dir.path(), CACHE_OVER_FILE, engine, depth, poll_us).unwrap();
        // A run allowed on one CPU only sleeps at once (engine.rs).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(
            r.real.io_engine.contains("polls 50 µs"),
            engine == EngineKind::Uring && poll_us == 50 && cpus > 1,
            "{}",
            r.real.io_engine
        );
        assert!(r.real.io_engine.starts_with(says), "{}", r.real.io_engine);
        assert!(r.real.sectors_verified > 1000, "{:?}", r.real);
        assert!(r.real.final_scan_sectors > 0, "{:?}", r.real);
        assert_eq!(r.run.outcome.host_ios, 4000);
        // Every engine moved bytes to the file (flushes of dirty pages).
        let bytes = std::fs::read(dir.path().join("disk.img")).unwrap();
        assert!(bytes.iter().any(|&b| b != 0), "{says}: disk.img untouched");
        disk_bytes.push(bytes.len());
    }
    assert!(disk_bytes.iter().all(|&n| n == 16 << 20));
}

#[test]
fn auto_picks_io_uring_where_the_kernel_allows_it() {
    // Skips on kernels where io_uring is off (sysctl kernel.io_uring_disabled).
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|s| s.trim() != "0")
        .unwrap_or(false);
    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path(), CACHE_OVER_FILE, EngineKind::Auto, 4).unwrap();
    if disabled {
        assert!(
            r.real.io_engine.contains("io_uring unavailable"),
            "{}",
            r.real.io_engine
        );
        eprintln!("io_uring is disabled on this kernel: auto fell back to threads, as it should");
    } else {
        assert!(
            r.real.io_engine.starts_with("io_uring"),
            "{}",
            r.real.io_engine
        );
    }
}
