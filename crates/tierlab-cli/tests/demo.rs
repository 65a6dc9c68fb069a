//! `tierlab demo`: deterministic, self-consistent, and shows what it claims.

use std::process::Command;

fn demo(out: &std::path::Path) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_tierlab"))
        // A 10-minute window keeps the test short (the default is 25 minutes).
        .args(["demo", "--minutes", "10", "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn demo_is_deterministic_and_consistent() {
    let tmp = tempfile::tempdir().unwrap();
    let a = demo(&tmp.path().join("a"));
    let b = demo(&tmp.path().join("b"));
    for file in [
        "workload.tlt",
        "concentrations.csv",
        "heatmap.csv",
        "summary.json",
        "compare/table.csv",
        "compare/cdf_src1_1.csv",
        "compare/memory_src1_1.csv",
    ] {
        assert!(
            std::fs::read(tmp.path().join("a").join(file)).unwrap()
                == std::fs::read(tmp.path().join("b").join(file)).unwrap(),
            "{file} differs between two runs with the same seed"
        );
    }
    assert_eq!(a, b);
    // The native file holds what the summary says, and the heat map counts every IO.
    let records = a["records"].as_u64().unwrap();
    assert_eq!(a["trace_stats"]["requests"].as_u64().unwrap(), records);
    let heat = std::fs::read_to_string(tmp.path().join("a/heatmap.csv")).unwrap();
    let heat_total: u64 = heat
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(heat_total, records);
    // The point of the workload: far more IO inside the concentrations than
    // the share of the LUN they cover.
    let inside = a["ios_inside_concentrations_share"].as_f64().unwrap();
    let covered = a["lun_share_covered_by_concentrations"].as_f64().unwrap();
    assert!(
        inside > 0.5 && covered < 0.1 && inside > 10.0 * covered,
        "inside {inside}, covered {covered}"
    );
    // The fio log replays the same IO count (checked against fio in fio_replay.rs).
    let iolog = std::fs::read_to_string(tmp.path().join("a/workload.iolog")).unwrap();
    let ios = iolog
        .lines()
        .filter(|l| l.contains(" read ") || l.contains(" write "))
        .count() as u64;
    assert_eq!(ios, records);

    // The comparison replays that very file: every system saw every IO.
    let rows = a["comparison"].as_array().unwrap();
    let systems: Vec<&str> = rows.iter().map(|r| r["system"].as_str().unwrap()).collect();
    assert_eq!(systems, ["flash", "atsmf", "flashcache", "arc"]);
    let row = |s: &str| rows.iter().find(|r| r["system"] == s).unwrap();
    for system in systems {
        let run: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(
                tmp.path()
                    .join(format!("a/compare/runs/src1_1-{system}/summary.json")),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(run["ios"].as_u64().unwrap(), records, "{system}");
        // summary.json's row is table.csv's row is the run's own mean.
        let mean_ms = run["mean_latency_us"].as_f64().unwrap() / 1e3;
        assert!((row(system)["mean_rt_ms"].as_f64().unwrap() - mean_ms).abs() < 1e-6);
    }
    // What the tour shows (the ATSMF paper's point, on a read-mostly
    // concentration workload): ATSMF serves most IOs from memory and cuts
    // the mean response time below flash only, while page caches with the
    // same memory serve far fewer IOs from it.
    let flash_ms = row("flash")["mean_rt_ms"].as_f64().unwrap();
    let mem = |s: &str| row(s)["mem_access_ratio"].as_f64().unwrap();
    assert!(row("atsmf")["mean_rt_ms"].as_f64().unwrap() < flash_ms);
    assert!(mem("atsmf") > 0.5, "{}", mem("atsmf"));
    for cache in ["flashcache", "arc"] {
        assert!(
            mem("atsmf") > 2.0 * mem(cache),
            "atsmf {} vs {cache} {}",
            mem("atsmf"),
            mem(cache)
        );
        assert!(
            row(cache)["mean_rt_ms"].as_f64().unwrap() <= flash_ms * 1.01,
            "{cache}"
        );
    }
}
