//! The busy-rate QoS controller in the real executor: B's IO goes through
//! tierlab, so B is capped by tierlab's own per-tenant token bucket (spec:
//! "or through tierlab's own token bucket when B's IO goes through
//! tierlab"). Over a real file, with data verification on.

use tierlab_real::{RealOptions, RealResult};
use tierlab_sim::config;

const CONFIG: &str = r#"seed = 5
[[devices]]
name = "disk"
path = "disk.img"
capacity_bytes = "64MiB"
create = true
[policy]
kind = "busy-rate-qos"
guaranteed_tenant = "A"
throttled_tenant = "B"
[policy.controller]
sample_interval_s = 1.0
# Well below what greedy B keeps the file busy (~100 %), so the cap binds
# however fast or loaded the machine is.
initial_target_busy_pct = 60.0
[[tenants]]
name = "A"
workload = { generator = "uniform", params = { count = 1000000, region_size_bytes = "32MiB", read_ratio = 1.0, size_bytes = "4k" } }
driver = { mode = "closed", iodepth = 4, duration_s = 7.0 }
region = { offset_bytes = 0, size_bytes = "32MiB" }
iops_schedule = [{ from_s = 0, iops = 200 }]
[[tenants]]
name = "B"
workload = { generator = "uniform", params = { count = 1000000, region_size_bytes = "32MiB", read_ratio = 0.7, size_bytes = "4k:3,16k:1" } }
driver = { mode = "closed", iodepth = 8, duration_s = 7.0 }
region = { offset_bytes = 33554432, size_bytes = "32MiB" }
[output]
interval_s = 0.25
"#;

fn run(dir: &std::path::Path) -> RealResult {
    let cfg = config::parse(CONFIG, "qos.toml", &[]).unwrap();
    let opts = RealOptions {
        verify: true,
        drain_s: 2.0,
        ..Default::default()
    };
    tierlab_real::run(&cfg, dir, &opts).unwrap()
}

#[test]
fn the_controller_caps_b_through_tierlabs_token_bucket_and_data_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path());
    assert!(r.real.sectors_verified > 1000, "{:?}", r.real);
    assert!(r.real.final_scan_sectors > 0);
    let col = |name: &str| {
        r.run
            .counter_names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
    };
    let (t, b_iops, b_cap) = (col("sample_time_s"), col("b_iops"), col("b_cap_iops"));
    // One row per controller sample (the counters are read 4x as often).
    let mut samples: Vec<(f64, f64, f64)> = Vec::new();
    for (_, v) in &r.run.counter_samples {
        if v[t] > 0.0 && samples.last().is_none_or(|s| s.0 != v[t]) {
            samples.push((v[t], v[b_iops], v[b_cap]));
        }
    }
    assert!(samples.len() >= 5, "{samples:?}");
    // After each decision, B's IOs in the next one-second sample stay
    // within the cap (plus what was in flight when the cap changed: at
    // most B's iodepth). The sample ends a little after the token bucket's
    // one-second window (the timer fires late by δ), and the next window
    // opens with a fresh budget: the IOs of that last δ — at B's own rate,
    // about b1·δ — are not this window's. And the cap bound B at least
    // once: it was below what B had just done.
    let mut bound = 0;
    for w in samples.windows(2) {
        let ((t0, b0, cap), (t1, b1, _)) = (w[0], w[1]);
        if cap <= 0.0 || (t1 - t0 - 1.0).abs() > 0.05 {
            continue;
        }
        let late_s = t1 - t1.floor();
        assert!(
            b1 * (1.0 - late_s) <= cap.floor().max(1.0) + 8.0,
            "sample at {t1} s: B did {b1} IOPS under a cap of {cap} set at {t0} s ({samples:?})"
        );
        if cap < b0 * 0.97 {
            bound += 1;
        }
    }
    assert!(bound >= 1, "the cap never bound B: {samples:?}");
}
