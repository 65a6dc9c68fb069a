//! `tierlab reproduce qos --quick`: the issue's "done when" in simulation
//! (docs/qos.md has what holds and what does not), the proportional-limit
//! curves, and byte-identical outputs for the same configs and seeds.

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
        "eval1-paper-reset/series.csv",
        "limit/fileshare_ab.svg",
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

    // Evaluation 2, not trivially: %util reached 100 at X = 95 % and X was
    // lowered (the paper: once, to 87 %), A within 10 % once settled.
    assert!(
        (1..=2).contains(&e2["x_lowerings"].as_u64().unwrap()),
        "{}",
        e2["x_history"]
    );
    assert!(e2["saturated_samples"].as_u64().unwrap() >= 3);

    // The proportional limit (the paper's Fig. 5: 80-95 %): with B's
    // token-bucket seconds half a second after A's, each mix's busy time
    // per IO is flat up to a %util in that range and then jumps (c > d);
    // with aligned windows it is flat to 100 % (file-share A+B: the model
    // before).
    for c in summary["proportional_limit"]["curves"].as_array().unwrap() {
        let v = &c["b_windows_offset"];
        let knee = v["highest_unsaturated_util_pct"].as_f64().unwrap();
        let c_over_d = v["c_over_d"].as_f64().unwrap();
        assert!((75.0..=95.0).contains(&knee), "{}: {knee}", c["mix"]);
        assert!(c_over_d >= 1.1, "{}: c/d {c_over_d}", c["mix"]);
        assert!(one.join(c["plot"].as_str().unwrap()).exists());
    }
    let fs = &summary["proportional_limit"]["curves"][0]["windows_aligned"];
    assert!(fs["c_over_d"].as_f64().unwrap() < 1.05, "{fs}");

    // Evaluation 1: %util reaches 100 at X = 95 % once A's target rises,
    // and X is lowered (the paper: twice, at ~500 and ~700 s), A at 50.
    let e1 = &evals[0];
    let lowered: Vec<f64> = e1["x_history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["event"] == "lowered")
        .map(|h| h["time_s"].as_f64().unwrap())
        .collect();
    assert!(
        !lowered.is_empty() && lowered.iter().all(|t| (300.0..=900.0).contains(t)),
        "{}",
        e1["x_history"]
    );
    let (h, rows) = csv(&one.join("eval1/series.csv"));
    let col = |k: &str| h.iter().position(|x| x == k).unwrap();
    let x_at = |t: f64| -> f64 {
        rows.iter()
            .find(|r| r[col("time_s")].parse::<f64>().unwrap() == t)
            .map(|r| r[col("target_busy_pct")].parse().unwrap())
            .unwrap()
    };
    assert!(x_at(880.0) < 95.0);
    let phase = &e1["phases"][1];
    assert_eq!(phase["settled"], true, "{phase}");
    assert!(phase["a_relative_error_after_settling"].as_f64().unwrap() <= 0.10);

    // After A's target drops (900 s): with the paper's own rule X stays
    // lowered (the paper's observation); the busy_per_iops rule (a shift
    // against the settled level held for two samples) resets X to its
    // initial value — issue 7's done-when.
    let ablation = summary["ablation"].as_array().unwrap();
    let paper = ablation
        .iter()
        .find(|a| a["name"] == "eval1-paper-reset")
        .unwrap();
    assert!(paper["final_target_busy_pct"].as_f64().unwrap() < 95.0);
    assert_eq!(paper["x_resets_bpi_change"], 0);
    let resets: Vec<f64> = e1["x_history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["event"] == "reset_bpi_change")
        .map(|h| {
            assert_eq!(h["target_busy_pct"], 95.0, "{h}");
            h["time_s"].as_f64().unwrap()
        })
        .collect();
    assert!(
        resets.len() == 1 && resets[0] > 900.0 && resets[0] <= 960.0,
        "{}",
        e1["x_history"]
    );
    assert_eq!(e1["final_target_busy_pct"], 95.0);
    let t_reset = resets[0];
    assert!(rows.iter().all(|r| {
        let t: f64 = r[col("time_s")].parse().unwrap();
        let x: f64 = r[col("target_busy_pct")].parse().unwrap();
        t < t_reset || x == 95.0
    }));
    // The shift the rule saw, against the noise it must ignore (where X
    // was lowered, away from A's target steps; docs/qos.md, "Measured").
    let shift = e1["phases"][2]["bpi_shift_at_start"].as_f64().unwrap();
    let noise = e1["bpi_shift_max_elsewhere"].as_f64().unwrap();
    assert!(shift >= 0.1 && noise < 0.1, "shift {shift}, noise {noise}");
    let e2_noise = evals[1]["bpi_shift_max_elsewhere"].as_f64().unwrap();
    assert!(e2_noise < 0.1, "{e2_noise}");

    // The mechanism: with A's and B's windows aligned, evaluations 1 and 2
    // never reach 100 % and X stays at 95 % (the model before).
    for name in ["eval1-aligned-windows", "eval2-aligned-windows"] {
        let a = ablation.iter().find(|a| a["name"] == name).unwrap();
        assert_eq!(a["x_lowerings"], 0, "{name}");
    }

    // Evaluation 1's settling, the paper's ~340 s, with its second lowering
    // ~200 s after the first and three samples at 100 % in between. Host
    // IOs through a FIFO of depth 4 with 512 KiB backups lower X 140 and
    // 260 s into the 50-IOPS phase (300-900 s) with 3 saturated samples
    // between; counting "3 of the past 10" only over a full window of
    // fresh samples gives 140 and 340 s but 5 saturated samples between
    // (docs/qos.md, "The window after a lowering").
    let lowerings = |name: &str| -> Vec<(f64, u64)> {
        let a = ablation.iter().find(|a| a["name"] == name).unwrap();
        a["x_history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["event"] == "lowered")
            .map(|h| {
                (
                    h["time_s"].as_f64().unwrap(),
                    h["saturated_samples_total"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let gaps = |l: &[(f64, u64)]| (l.len(), l[1].0 - l[0].0, l[1].1 - l[0].1);
    let fifo = lowerings("eval1-host-fifo4-backup-512k");
    let full = lowerings("eval1-host-fifo4-backup-512k-full-window");
    assert_eq!((fifo[0].0, gaps(&fifo)), (440.0, (2, 120.0, 3)), "{fifo:?}");
    assert_eq!((full[0].0, gaps(&full)), (440.0, (2, 200.0, 5)), "{full:?}");
    let settling = |name: &str| {
        let a = ablation.iter().find(|a| a["name"] == name).unwrap();
        a["phases"][1]["settling_time_s"].as_f64().unwrap()
    };
    assert_eq!(settling("eval1-host-fifo4-backup-512k"), 240.0);
    assert_eq!(settling("eval1-host-fifo4-backup-512k-full-window"), 320.0);
    // Neither fits both the time and the count: the row's cause is not
    // found, with every candidate measured (its `why` is the last field).
    let pvo = std::fs::read_to_string(one.join("paper_vs_ours.csv")).unwrap();
    let row = pvo
        .lines()
        .find(|l| l.starts_with("eval1_a_settling_time_s,"))
        .unwrap();
    assert!(
        row.contains(",differs,\"not found; ruled out by measurement: "),
        "{row}"
    );
}
