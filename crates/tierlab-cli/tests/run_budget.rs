//! `tierlab run` honours a tenant's `iops_budget` on real IO: a closed loop
//! of 4 threads capped at 40 IOPS for 2 s issues 80 IOs whether the limit
//! is shared or split per thread (10 per thread per second), and the
//! per-thread run hands each completion back to the thread that issued it
//! (a thread that never got its IO back would stop issuing: fewer IOs).

mod common_cli;
use common_cli::{stderr, tierlab};

fn ios_with(budget: &str) -> u64 {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("f.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let config = tmp.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            r#"seed = 1
[[devices]]
name = "f"
path = "{}"
[policy]
kind = "passthrough"
[[tenants]]
name = "t"
workload = {{ generator = "uniform", params = {{ count = 100000, region_size_bytes = "64MiB", read_ratio = 1.0, size_bytes = "4k" }} }}
driver = {{ mode = "closed", iodepth = 4, duration_s = 2.0 }}
iops_schedule = [{{ from_s = 0, iops = 40 }}]
iops_budget = "{budget}"
"#,
            img.display()
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = tierlab(&[
        "run",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    summary["ios"].as_u64().unwrap()
}

#[test]
fn a_capped_closed_loop_issues_its_limit_shared_or_per_thread() {
    // 40 IOPS × 2 s: two one-second windows.
    assert_eq!(ios_with("shared"), 80);
    assert_eq!(ios_with("per-thread"), 80);
}
