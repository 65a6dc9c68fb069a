//! `tierlab cache --mrc`: exact LRU curves against one-size simulations, and
//! SHARDS estimates for other policies against full simulations.

use std::process::Command;

fn tierlab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args(args)
        .output()
        .unwrap()
}

fn json(o: std::process::Output) -> Vec<serde_json::Value> {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn curves_agree_with_simulation() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("z.tlt");
    let t = trace.to_str().unwrap();
    let o = tierlab(&[
        "trace",
        "gen",
        "zipf",
        "count=200000",
        "size_bytes=4k",
        "region_size_bytes=1g",
        "--seed",
        "3",
        "--out",
        t,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sizes = "512pages,4096pages,16384pages";
    // Exact LRU curve = LRU simulated at each size, to the miss.
    let exact = json(tierlab(&["cache", t, "--mrc", sizes, "--json"]));
    let simulated = json(tierlab(&[
        "cache",
        t,
        "--policy",
        "lru,arc",
        "--capacity",
        sizes,
        "--json",
    ]));
    for (e, s) in exact
        .iter()
        .zip(simulated.iter().filter(|r| r["policy"] == "lru"))
    {
        assert_eq!(e["misses"], s["misses"]);
        assert_eq!(e["method"], "exact");
    }
    // SHARDS at R = 0.1 lands near the full simulation, for LRU and ARC.
    for policy in ["lru", "arc"] {
        let est = json(tierlab(&[
            "cache",
            t,
            "--mrc",
            sizes,
            "--mrc-policy",
            policy,
            "--shards-rate",
            "0.1",
            "--json",
        ]));
        for (e, s) in est
            .iter()
            .zip(simulated.iter().filter(|r| r["policy"] == policy))
        {
            let (a, b) = (
                e["miss_ratio"].as_f64().unwrap(),
                s["miss_ratio"].as_f64().unwrap(),
            );
            assert!(
                (a - b).abs() < 0.05,
                "{policy} at {}: SHARDS {a} vs simulated {b}",
                s["capacity_pages"]
            );
            assert_eq!(e["method"], "shards");
        }
    }
    // Non-LRU curves need sampling.
    let o = tierlab(&["cache", t, "--mrc", sizes, "--mrc-policy", "arc"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--shards-rate"));
}
