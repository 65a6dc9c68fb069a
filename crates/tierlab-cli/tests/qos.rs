//! `tierlab reproduce qos --quick`: the issue's "done when" in simulation,
//! and byte-identical outputs for the same configs and seeds.

use std::path::Path;
use std::process::Command;

fn reproduce(out: &Path) {
    let status = Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args(["reproduce", "qos", "--quick", "--out"])
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success());
}

fn csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap().split(',').map(String::from).collect();
    (
        header,
        lines
            .map(|l| l.split(',').map(String::from).collect())
            .collect(),
    )
}

#[test]
fn evaluations_meet_the_issue_and_are_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    reproduce(&one);
    reproduce(&two);
    for f in [
        "summary.json",
        "eval1/series.csv",
        "eval2/series.csv",
        "eval3/series.csv",
        "eval2/iops.svg",
    ] {
        assert_eq!(
            std::fs::read(one.join(f)).unwrap(),
            std::fs::read(two.join(f)).unwrap(),
            "{f} differs between two runs"
        );
    }
    for e in ["eval1", "eval2", "eval3"] {
        for svg in ["iops.svg", "util.svg", "saturated.svg", "target_busy.svg"] {
            let text = std::fs::read_to_string(one.join(e).join(svg)).unwrap();
            assert!(
                text.contains("<svg") && text.contains("<polyline"),
                "{e}/{svg}"
            );
        }
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(one.join("summary.json")).unwrap()).unwrap();
    let evals = summary["evaluations"].as_array().unwrap();

    // Evaluation 2: A settles within 10 % of 100 IOPS after at most two X updates.
    let e2 = &evals[1];
    let phase = e2["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["a_target_iops"] == 100.0)
        .unwrap();
    assert_eq!(phase["settled"], true, "{phase}");
    assert!(
        phase["x_updates_in_phase"].as_u64().unwrap() <= 2,
        "{phase}"
    );
    assert!(
        phase["a_relative_error_after_settling"].as_f64().unwrap() <= 0.10,
        "{phase}"
    );
    // Check the summary against the series itself: A's mean after settling.
    let (h, rows) = csv(&one.join("eval2/series.csv"));
    let col = |k: &str| h.iter().position(|x| x == k).unwrap();
    let settled_at = phase["settled_at_s"].as_f64().unwrap();
    let a: Vec<f64> = rows
        .iter()
        .filter(|r| {
            let t: f64 = r[col("time_s")].parse().unwrap();
            t - 20.0 >= settled_at && t <= 900.0
        })
        .map(|r| r[col("a_iops")].parse().unwrap())
        .collect();
    let mae = a.iter().map(|x| (x - 100.0).abs()).sum::<f64>() / a.len() as f64;
    assert!((mae - phase["a_mae_after_settling_iops"].as_f64().unwrap()).abs() < 1e-9);

    // Evaluation 1: X is back at (or still at) its initial value once A's target dropped.
    let (h, rows) = csv(&one.join("eval1/series.csv"));
    let col = |k: &str| h.iter().position(|x| x == k).unwrap();
    let after: Vec<f64> = rows
        .iter()
        .filter(|r| r[col("time_s")].parse::<f64>().unwrap() > 960.0)
        .map(|r| r[col("target_busy_pct")].parse().unwrap())
        .collect();
    assert!(
        !after.is_empty() && after.iter().all(|x| *x == 95.0),
        "{after:?}"
    );
    assert_eq!(evals[0]["final_target_busy_pct"], 95.0);
}
