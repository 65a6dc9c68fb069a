//! `tierlab compare`: one config simulated and run for real; the same IOs
//! on both sides, per-tier shares and latencies side by side.

use std::process::Command;

#[test]
fn atsmf_simulated_and_real_side_by_side() {
    let tmp = tempfile::tempdir().unwrap();
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/atsmf-compare.toml");
    // Run from a copy so the flash file is created in the temp dir.
    let cfg = tmp.path().join("c.toml");
    std::fs::copy(&src, &cfg).unwrap();
    let out = tmp.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args([
            "compare",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--verify",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    assert_eq!(c["ios"]["simulated"], c["ios"]["real"]);
    assert!(c["ios"]["real"].as_f64().unwrap() > 10_000.0);
    for k in [
        "tier memory: share of IOs",
        "tier flash: mean_latency_us",
        "p99_latency_us",
    ] {
        assert!(
            c[k]["simulated"].is_number() && c[k]["real"].is_number(),
            "{k}: {}",
            c[k]
        );
    }
    // Both halves promoted concentrations to memory.
    assert!(
        c["tier memory: share of IOs"]["simulated"]
            .as_f64()
            .unwrap()
            > 0.2
    );
    assert!(c["tier memory: share of IOs"]["real"].as_f64().unwrap() > 0.2);
    let real: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("real/summary.json")).unwrap()).unwrap();
    assert!(real["real"]["sectors_verified"].as_u64().unwrap() > 0);
    assert!(out.join("sim/summary.json").exists());
    // A device without a backing store is a clear error.
    let bad = tmp.path().join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&src)
            .unwrap()
            .replace("path = \"ram\"\n", ""),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args([
            "compare",
            bad.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("devices[0]") && e.contains("both `model`"),
        "{e}"
    );
}
