//! Traces stamped in whole seconds (Tencent CBS, FlashNet) replayed open
//! loop: every stamp's IOs arrive at one instant. The run says so
//! (`run.warnings`, the tenant's `same_stamp_records` and
//! `timestamp_quantum_ns`), and `driver.spread` spreads them over each
//! second: the arrivals then match the hand-computed times, and the burst
//! latency goes away.

use std::path::Path;

use tierlab_sim::{config, run};

/// An MSR CSV: `per_second` 4 KiB reads at each of `seconds` whole-second
/// stamps (Windows filetime, 100 ns ticks), offsets spread over 1 GiB.
fn trace(path: &Path, seconds: u64, per_second: u64) {
    let t0: u64 = 128_166_372_000_000_000;
    let mut text = String::new();
    for s in 0..seconds {
        for k in 0..per_second {
            let offset = ((s * per_second + k) * 7919 % 262_144) * 4096;
            text.push_str(&format!(
                "{},h,0,Read,{offset},4096,100\n",
                t0 + s * 10_000_000
            ));
        }
    }
    std::fs::write(path, text).unwrap();
}

fn sim(trace: &Path, spread: &str) -> run::RunResult {
    let text = format!(
        "seed = 3\n[[devices]]\nname = \"flash\"\nmodel = \"ssd\"\npreset = \"intel-p3700\"\n\
         capacity_bytes = 2147483648\n[policy]\nkind = \"passthrough\"\n[[tenants]]\nname = \"cbs\"\n\
         workload = {{ trace = {:?} }}\ndriver = {{ mode = \"open\", spread = \"{spread}\" }}\n",
        trace.display().to_string()
    );
    let cfg = config::parse(&text, "test.toml", &[]).unwrap();
    run::run(&cfg, Path::new(".")).unwrap()
}

#[test]
fn whole_second_stamps_are_warned_about_and_spread_on_request() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cbs.csv");
    trace(&path, 10, 400);
    let burst = sim(&path, "none");
    let t = &burst.info.tenants[0];
    assert_eq!(
        (
            t.spread,
            t.spread_records,
            t.same_stamp_records,
            t.timestamp_quantum_ns
        ),
        ("none", 0, 10 * 399, Some(1_000_000_000))
    );
    assert_eq!(burst.info.warnings.len(), 1);
    let w = &burst.info.warnings[0];
    assert!(
        w.contains("tenant cbs")
            && w.contains("99.8 % of records share")
            && w.contains("400 records per stamp")
            && w.contains("at least 1 s apart")
            && w.contains("driver.spread"),
        "{w}"
    );
    // Even: IO k of a second at k × 2.5 ms; no warning.
    let even = sim(&path, "even");
    let t = &even.info.tenants[0];
    assert_eq!((t.spread, t.spread_records), ("even", 10 * 399));
    assert!(even.info.warnings.is_empty(), "{:?}", even.info.warnings);
    // 400 4 KiB reads per second: one at a time when spread (the model's
    // read service time, ~29 µs), 400 deep at each second's instant
    // otherwise (queued behind the drive's internal parallelism: ~435 µs).
    let mean = |r: &run::RunResult| r.metrics.total.mean_latency_us.unwrap();
    assert!(
        mean(&burst) > 10.0 * mean(&even),
        "{} vs {}",
        mean(&burst),
        mean(&even)
    );
    // The same IOs, the same span (the last second spread over the
    // previous gap: the run ends ~1 s later).
    assert_eq!(burst.metrics.total.ios, even.metrics.total.ios);
    let poisson = sim(&path, "poisson");
    assert_eq!(poisson.info.tenants[0].spread, "poisson");
    assert!(mean(&poisson) < mean(&burst) / 5.0);
    // Seeded: the same config gives the same run.
    assert_eq!(
        sim(&path, "poisson").metrics.total.mean_latency_us,
        poisson.metrics.total.mean_latency_us
    );
}

#[test]
fn a_bad_spread_names_the_key_and_the_choices() {
    let text = "[[devices]]\nname = \"d\"\nmodel = \"ssd\"\npreset = \"intel-p3700\"\n\
                capacity_bytes = 1073741824\n[policy]\nkind = \"passthrough\"\n[[tenants]]\n\
                name = \"t\"\nworkload = { trace = \"x.csv\" }\n\
                driver = { mode = \"open\", spread = \"uniform\" }\n";
    let e = config::parse(text, "test.toml", &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("uniform") && e.contains("even") && e.contains("poisson"),
        "{e}"
    );
}
