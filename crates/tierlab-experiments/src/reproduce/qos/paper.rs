//! The busy-rate QoS paper's numbers next to ours (`paper_vs_ours.csv`),
//! read from the reproduction's summary.json: the array's capacities
//! (Figs. 3–4), the lowerings of X and A's guarantee in evaluations 1–3,
//! and the reset the paper could not do. Each difference names the run
//! that measures its cause: the backup-size capacity variant
//! (`capacity.backup_512k`), the proportional-limit curves, the ablations
//! and evaluation 1's variants (host scheduler, 512 KiB backups,
//! write-back, per-thread budgets).

use serde_json::Value;
use tierlab_policies::qos::BusyRateParams;

use crate::reproduce::paper_vs_ours::{Comparison, TOLERANCE, claim, not_comparable, numeric};

/// The backup-size variant's request size (the generator's default: 128 KiB).
pub const LARGE_BACKUP_SIZE: &str = "512k";

/// Evaluation 1: seconds into A's 50-IOPS phase until A was stable, in
/// the paper: its second lowering "at 700 s", on a clock where the phase
/// began at ~360 s (A's target fell "after 960 s", 10 minutes later).
pub const PAPER_EVAL1_SETTLING_S: f64 = 340.0;

/// Evaluation 1's variants that measure the settling row's causes:
/// host IOs in arrival order through a short queue with the paper's
/// 512 KiB backups; that with B's cap 1 s late; and that with a lowering
/// armed only by a full window of fresh samples.
pub const FIFO4_512K: &str = "eval1-host-fifo4-backup-512k";
pub const FIFO4_512K_CAP_DELAY: &str = "eval1-host-fifo4-backup-512k-cap-delay-1s";
pub const FIFO4_512K_FULL_WINDOW: &str = "eval1-host-fifo4-backup-512k-full-window";

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn evaluation<'a>(summary: &'a Value, name: &str) -> Option<&'a Value> {
    summary["evaluations"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

fn ablation<'a>(summary: &'a Value, name: &str) -> Option<&'a Value> {
    summary["ablation"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

/// X after the evaluation's first lowering.
fn first_lowering(e: &Value) -> Option<f64> {
    e["x_history"]
        .as_array()?
        .iter()
        .find(|h| h["event"] == "lowered")
        .map(|h| f(&h["target_busy_pct"]))
}

/// `eval1`: evaluation 1's controller (its initial X and lowering gain y
/// turn the first lowering back into (c − d)·C).
pub fn compare(summary: &Value, eval1: &BusyRateParams) -> Vec<Comparison> {
    let mut out = Vec::new();
    capacity(summary, &mut out);
    lowerings(summary, eval1, &mut out);
    guarantee(summary, eval1.sample_interval_s, &mut out);
    out
}

fn capacity(summary: &Value, out: &mut Vec<Comparison>) {
    let cap = &summary["capacity"];
    let fs = &cap["file-share"]["simulated"];
    let backup = &cap["backup"]["simulated"];
    let large = &cap["backup_512k"]["simulated"];
    for (key, paper) in [("a_only_iops", 239.0), ("a_plus_b_iops", 167.0)] {
        out.push(numeric(
            &format!("capacity_{key}"),
            "file-share",
            paper,
            f(&fs[key]),
            || "not measured yet".to_string(),
        ));
    }
    out.push(numeric(
        "capacity_a_plus_b_over_a_only",
        "file-share",
        167.0 / 239.0,
        f(&fs["a_plus_b_iops"]) / f(&fs["a_only_iops"]),
        || "not measured yet".to_string(),
    ));
    for (key, paper) in [("a_only_iops", 65.0), ("a_plus_b_iops", 45.0)] {
        let variant = f(&large[key]);
        out.push(numeric(
            &format!("capacity_{key}"),
            "backup",
            paper,
            f(&backup[key]),
            || {
                let closes = (variant / paper - 1.0).abs() <= TOLERANCE;
                format!(
                    "{}the backup's request size, measured: with the spec's 128 KiB requests the \
                     array serves backup {:.2}x as fast as the paper's, while file-share is within \
                     12 %; the same run with {LARGE_BACKUP_SIZE} requests (summary.json \
                     capacity.backup_512k) gives {variant:.1} IOPS{}. What the paper's backup job \
                     really issued is not known (the text says 128 KiB); the evaluations keep 128 \
                     KiB and scale the backup rates x1.8 to load the array as the paper's did \
                     (docs/qos.md)",
                    if closes {
                        ""
                    } else {
                        "not measured yet (only partly): "
                    },
                    f(&backup[key]) / paper,
                    if closes {
                        format!(", within {:.0} % of the paper's {paper}", TOLERANCE * 100.0)
                    } else {
                        String::new()
                    }
                )
            },
        ));
    }
    out.push(numeric(
        "capacity_a_plus_b_over_a_only",
        "backup",
        45.0 / 65.0,
        f(&backup["a_plus_b_iops"]) / f(&backup["a_only_iops"]),
        || "not measured yet".to_string(),
    ));
}

fn lowerings(summary: &Value, eval1: &BusyRateParams, out: &mut Vec<Comparison>) {
    let (x0, y) = (eval1.initial_target_busy_pct, eval1.lowering_gain);
    let quick = summary["quick"] == true;
    let eval1_mix_c_over_d = summary["proportional_limit"]["curves"]
        .as_array()
        .and_then(|c| {
            c.iter().find(|m| {
                m["mix"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("evaluation 1"))
            })
        })
        .map_or(f64::NAN, |m| f(&m["b_windows_offset"]["c_over_d"]));
    let variant = |name: &str| {
        ablation(summary, name)
            .and_then(first_lowering)
            .unwrap_or(f64::NAN)
    };
    let (large, cfq, cfq_thread) = (
        variant("eval1-backup-512k"),
        variant("eval1-host-cfq"),
        variant("eval1-host-cfq-thread"),
    );
    let large_n = ablation(summary, "eval1-backup-512k").map_or(f64::NAN, |a| f(&a["x_lowerings"]));
    if let Some(x) = evaluation(summary, "eval1").and_then(first_lowering) {
        out.push(numeric(
            "eval1_x_after_first_lowering_pct",
            "eval1",
            63.0,
            x,
            || {
                let ours = (x0 - x) / y;
                let paper = (x0 - 63.0) / y;
                format!(
                    "the size of the step, measured: New X = X - (c - d)·C·y with y = \
                     {y}, so the step gives (c - d)·C = {ours:.1} %-points here and \
                     {paper:.1} in the paper: busy time per IO rose {:.1}x less between the last \
                     linear sample (d) and the saturated one (c) on our array. Measured without the \
                     controller, evaluation 1's mix has c/d = {eval1_mix_c_over_d:.2} here \
                     (summary.json proportional_limit); the paper's step needs c/d near {:.1} at \
                     C ~ 120 IOPS and d ~ 0.75 %/IOPS. Why the paper's array got that much slower \
                     per IO when saturated is not measured (its own Fig. 3 A+B curve is flat, c/d \
                     1.05). Measured variants (first lowering, this seed): 512 KiB backups at 50 \
                     IOPS {large:.1} % (eval1-backup-512k, then {large_n} lowerings in all); a \
                     CFQ-like host scheduler {cfq:.1} % per tenant, {cfq_thread:.1} % per thread \
                     (further from 63 %)",
                    paper / ours,
                    1.0 + paper / 120.0 / 0.75,
                )
            },
        ));
    }
    if let Some(x) = evaluation(summary, "eval2").and_then(first_lowering) {
        out.push(numeric(
            "eval2_x_after_first_lowering_pct",
            "eval2",
            87.0,
            x,
            || "not measured yet".to_string(),
        ));
    }
    for (name, paper) in [("eval1", 2.0), ("eval2", 1.0), ("eval3", 1.0)] {
        let Some(e) = evaluation(summary, name) else {
            continue;
        };
        if quick {
            out.push(not_comparable(
                "x_lowerings",
                name,
                paper,
                f(&e["x_lowerings"]),
                "--quick runs one seed, and the number of lowerings varies with the seed \
                 (docs/qos.md: evaluation 2 lowers once in 7 of 10 seeds, twice in 3): the full \
                 run compares the mean over its seeds",
            ));
        } else {
            let spread = &e["across_seeds"]["x_lowerings"];
            out.push(numeric(
                "x_lowerings_mean_over_seeds",
                name,
                paper,
                f(&spread["mean"]),
                || {
                    format!(
                        "not measured yet: {} to {} lowerings over {} seeds",
                        spread["min"], spread["max"], spread["runs"]
                    )
                },
            ));
        }
    }
}

fn guarantee(summary: &Value, interval_s: f64, out: &mut Vec<Comparison>) {
    let evals: Vec<&Value> = ["eval1", "eval2", "eval3"]
        .iter()
        .filter_map(|n| evaluation(summary, n))
        .collect();
    if !evals.is_empty() {
        let settled = evals
            .iter()
            .filter(|e| e["all_phases_settled"] == true)
            .count() as f64;
        out.push(claim(
            "claim: every evaluation, A settles within 10 % of its target in every phase (count)",
            3.0,
            settled,
            settled == evals.len() as f64,
            || "not measured yet".to_string(),
        ));
    }
    if let Some(e) = evaluation(summary, "eval1") {
        // The phase where A's target is 50 (300-900 s here). The paper's
        // clock runs ~60 s ahead of Table 4's schedule: A's target fell to
        // 5 "after 960 s", the end of the 10-minute phase, so the phase ran
        // ~360-960 s there. Its lowerings "at 500 s" and "at 700 s" (A
        // stable at 50 from the second) are then ~140 and ~340 s into it.
        let phase = e["phases"]
            .as_array()
            .and_then(|p| p.iter().find(|p| f(&p["a_target_iops"]) == 50.0));
        if let Some(p) = phase {
            let settling = |name: &str| {
                ablation(summary, name)
                    .and_then(|a| a["phases"].as_array())
                    .and_then(|p| p.iter().find(|p| f(&p["a_target_iops"]) == 50.0))
                    .map_or(f64::NAN, |p| f(&p["settling_time_s"]))
            };
            let aligned = settling("eval1-aligned-windows");
            let (cfq, cfq_thread) = (
                settling("eval1-host-cfq"),
                settling("eval1-host-cfq-thread"),
            );
            let large = settling("eval1-backup-512k");
            let wb = settling("eval1-writeback");
            let per_thread = settling("eval1-per-thread-budget");
            let fifo = settling(FIFO4_512K);
            let full = settling(FIFO4_512K_FULL_WINDOW);
            let delayed = settling(FIFO4_512K_CAP_DELAY);
            let lowerings_of =
                |name: &str| ablation(summary, name).map_or(f64::NAN, |a| f(&a["x_lowerings"]));
            let (fifo_lowerings, full_lowerings, delayed_lowerings) = (
                lowerings_of(FIFO4_512K),
                lowerings_of(FIFO4_512K_FULL_WINDOW),
                lowerings_of(FIFO4_512K_CAP_DELAY),
            );
            // When a variant lowered X, in seconds into the phase: A holds
            // 50 from about the second lowering, as the paper's did after
            // its second.
            let phase_from_s = f(&p["from_s"]);
            // A variant's lowerings: (seconds into the phase, saturated
            // samples so far). The paper's text counts three more samples at
            // 100 % before its second.
            let lowerings = |name: &str| -> Vec<(f64, f64)> {
                ablation(summary, name)
                    .and_then(|a| a["x_history"].as_array())
                    .map(|h| {
                        h.iter()
                            .filter(|e| e["event"] == "lowered")
                            .map(|e| {
                                (
                                    f(&e["time_s"]) - phase_from_s,
                                    f(&e["saturated_samples_total"]),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let at = |lowered: &[(f64, f64)]| {
                if lowered.is_empty() {
                    "never".to_string()
                } else {
                    let at: Vec<String> = lowered.iter().map(|(t, _)| format!("{t} s")).collect();
                    at.join(" and ")
                }
            };
            let between = |lowered: &[(f64, f64)]| match lowered {
                [a, b, ..] => format!("{} s", b.0 - a.0),
                _ => "never (no second lowering)".to_string(),
            };
            let saturated_between = |lowered: &[(f64, f64)]| match lowered {
                [a, b, ..] => format!("{}", b.1 - a.1),
                _ => "no second lowering, so no".to_string(),
            };
            let (fifo_lowered, full_lowered) =
                (lowerings(FIFO4_512K), lowerings(FIFO4_512K_FULL_WINDOW));
            let secs = |v: f64| {
                if v.is_nan() {
                    "never".to_string()
                } else {
                    format!("{v} s")
                }
            };
            let settles = |v: f64| {
                if v.is_nan() {
                    "never settles".to_string()
                } else {
                    format!("settles after {v} s")
                }
            };
            // How far the FIFO variant falls short, against the paper's
            // lowering and against the sample before it (our definition).
            let short = |paper: f64| format!("{:.0} %", (1.0 - fifo / paper) * 100.0);
            let (short_of_lowering, short_of_sample_before) = (
                short(PAPER_EVAL1_SETTLING_S),
                short(PAPER_EVAL1_SETTLING_S - interval_s),
            );
            let paper_sample_before = PAPER_EVAL1_SETTLING_S - interval_s;
            let (aligned, cfq, cfq_thread, large, wb, per_thread, fifo, full, delayed) = (
                secs(aligned),
                secs(cfq),
                secs(cfq_thread),
                secs(large),
                settles(wb),
                secs(per_thread),
                settles(fifo),
                settles(full),
                settles(delayed),
            );
            out.push(numeric(
                "eval1_a_settling_time_s",
                "eval1",
                PAPER_EVAL1_SETTLING_S,
                f(&p["settling_time_s"]),
                || {
                    format!(
                        "not found; ruled out by measurement: what made the paper's second \
                         lowering come ~200 s after its first. The part measured: host IOs \
                         served in arrival order through a short queue to the array (a FIFO of \
                         depth 4; the paper's queueing is not published, the depth is ours) with \
                         the paper's 512 KiB backups at 50 IOPS ({FIFO4_512K}): A and B share \
                         the saturated array by number of IOs, so A misses its target in every \
                         saturated sample until X is lowered, as the paper's A did; X is lowered \
                         {fifo_lowerings} times, {} into the phase, the paper ~140 and ~340 s (at \
                         ~500 and ~700 s on its clock; its phase ran ~360-960 s, as A's target \
                         fell 'after 960 s'), and A {fifo}, {short_of_lowering} short of ~{PAPER_EVAL1_SETTLING_S} s. (Our \
                         settling starts at the sample before the lowering that settles A, whose \
                         window has A at 50; read so, the paper's would be ~{paper_sample_before} s \
                         and ours {short_of_sample_before} short.) The gap left is the second lowering, {} \
                         after the first here: saturated and unsaturated samples alternate (B's \
                         cap, computed from a sample where B was cut and A ran alone, lets B \
                         saturate the array again), so the third fresh saturated sample arms it \
                         with {} samples at 100 % in between; the paper's text counts three in \
                         ~200 s. Candidates, each measured: (1) the other reading of '3 of the \
                         past 10 measurements', counted only once there are 10 since the last \
                         lowering ({FIFO4_512K_FULL_WINDOW}): X lowered {full_lowerings} times, \
                         {} into the phase, and A {full}; but that reading was picked because it \
                         gives the 200 s, and it leaves {} samples at 100 % between the \
                         lowerings against the paper's three: the timing, not the count; (2) \
                         fewer saturations after the first lowering, the reading the paper's \
                         count favours: with B's demand at 30-47 IOPS the array saturates either \
                         every other sample or hardly at all, and the disks' own write cache \
                         (4-16 MiB per disk), which does space the saturated samples 2-20 apart, \
                         lowers X once at most and leaves A short only in those samples, by a \
                         few IOPS, so A settles within 0-180 s (seeds 1-10, docs/qos.md); (3) B's cap taking effect 1 s after each sample \
                         ({FIFO4_512K_CAP_DELAY}): no sample reads 100 % (the array idles in \
                         the second before a raised cap arrives), X is lowered \
                         {delayed_lowerings} times and A {delayed}. The calibrated evaluation \
                         settles at once: its 128 KiB backups at 90 IOPS and IOs sent straight \
                         to the array let A's 10 threads get their 50 IOPS even against B \
                         uncapped. Ruled out as the queue's stand-in: A is within 10 % of 50 \
                         IOPS from the phase's first sample with token-bucket seconds aligned \
                         (eval1-aligned-windows) {aligned}; with each load thread its own share \
                         of the tenant's limit (eval1-per-thread-budget) {per_thread}; with a \
                         CFQ-like host scheduler, the paper's Linux 2.6.18 default, one queue \
                         per tenant (eval1-host-cfq) {cfq} and per thread \
                         (eval1-host-cfq-thread) {cfq_thread}; with 512 KiB backups alone \
                         (eval1-backup-512k) {large}; page-cache write-back (eval1-writeback), \
                         B's load reaching the array after the cut: A {wb}, %util stays mostly \
                         below 100 %, so X is not lowered and A never recovers (docs/qos.md, \
                         seeds 1-10)",
                        at(&fifo_lowered),
                        between(&fifo_lowered),
                        saturated_between(&fifo_lowered),
                        at(&full_lowered),
                        saturated_between(&full_lowered),
                    )
                },
            ));
        }
    }
    if let Some(a) = ablation(summary, "eval1-paper-reset") {
        // After A's target falls (900 s), the paper's rule (reset only below
        // 20 % util) never resets X.
        let reset_after_drop = a["x_history"].as_array().is_some_and(|h| {
            h.iter()
                .any(|u| f(&u["time_s"]) >= 900.0 && u["event"] != "lowered")
        });
        out.push(claim(
            "claim: eval 1 with the paper's reset rule, X is not reset after A's target falls (count)",
            1.0,
            f64::from(u8::from(!reset_after_drop)),
            !reset_after_drop,
            || "not measured yet".to_string(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::paper_vs_ours::Verdict;
    use serde_json::json;

    #[test]
    fn rows_from_a_summary_by_hand() {
        let summary = json!({
            "quick": true,
            "capacity": {
                "file-share": {"simulated": {"a_only_iops": 265.0, "a_plus_b_iops": 187.0}},
                "backup": {"simulated": {"a_only_iops": 115.0, "a_plus_b_iops": 80.0}},
                "backup_512k": {"simulated": {"a_only_iops": 69.0, "a_plus_b_iops": 47.0}},
            },
            "proportional_limit": {"curves": [
                {"mix": "evaluation 1: A file-share at 50, B backup", "b_windows_offset": {"c_over_d": 1.12}}
            ]},
            "evaluations": [
                {"name": "eval1", "x_lowerings": 2, "all_phases_settled": true,
                 "x_history": [{"time_s": 440.0, "event": "lowered", "target_busy_pct": 85.8}],
                 "phases": [{"a_target_iops": 50.0, "from_s": 300.0, "settling_time_s": 0.0}]},
                {"name": "eval2", "x_lowerings": 2, "all_phases_settled": true,
                 "x_history": [{"time_s": 440.0, "event": "lowered", "target_busy_pct": 85.6}]},
            ],
            "ablation": [
                {"name": "eval1-paper-reset", "x_history": [{"time_s": 440.0, "event": "lowered"}]},
                {"name": "eval1-aligned-windows", "phases": [{"a_target_iops": 50.0, "settling_time_s": 0.0}]},
                {"name": "eval1-host-cfq", "phases": [{"a_target_iops": 50.0, "settling_time_s": 20.0}],
                 "x_history": [{"time_s": 440.0, "event": "lowered", "target_busy_pct": 88.5}]},
                {"name": "eval1-host-cfq-thread", "phases": [{"a_target_iops": 50.0, "settling_time_s": 40.0}],
                 "x_history": [{"time_s": 440.0, "event": "lowered", "target_busy_pct": 91.8}]},
                {"name": "eval1-backup-512k", "x_lowerings": 3, "phases": [{"a_target_iops": 50.0, "settling_time_s": 60.0}],
                 "x_history": [{"time_s": 440.0, "event": "lowered", "target_busy_pct": 76.2}]},
                {"name": "eval1-writeback", "x_lowerings": 0, "phases": [{"a_target_iops": 50.0, "settling_time_s": null}]},
                {"name": "eval1-per-thread-budget", "phases": [{"a_target_iops": 50.0, "settling_time_s": 80.0}]},
                {"name": "eval1-host-fifo4-backup-512k", "x_lowerings": 2, "phases": [{"a_target_iops": 50.0, "settling_time_s": 240.0}],
                 "x_history": [{"time_s": 440.0, "event": "lowered", "saturated_samples_total": 3},
                               {"time_s": 560.0, "event": "lowered", "saturated_samples_total": 6}]},
                {"name": "eval1-host-fifo4-backup-512k-cap-delay-1s", "x_lowerings": 0, "phases": [{"a_target_iops": 50.0, "settling_time_s": null}]},
                {"name": "eval1-host-fifo4-backup-512k-full-window", "x_lowerings": 2, "phases": [{"a_target_iops": 50.0, "settling_time_s": 320.0}],
                 "x_history": [{"time_s": 440.0, "event": "lowered", "saturated_samples_total": 3},
                               {"time_s": 640.0, "event": "lowered", "saturated_samples_total": 8},
                               {"time_s": 940.0, "event": "reset_bpi_change"}]},
            ],
        });
        // The evaluation configs' controller: X from 95 %, y = 0.5.
        let c = compare(&summary, &BusyRateParams::default());
        let get = |q: &str, w: &str| {
            c.iter()
                .find(|r| r.quantity == q && r.workload == w)
                .unwrap_or_else(|| panic!("{q} {w}"))
        };
        assert_eq!(
            get("capacity_a_only_iops", "file-share").verdict,
            Verdict::Holds
        ); // 265 / 239
        let b = get("capacity_a_only_iops", "backup");
        assert_eq!(b.verdict, Verdict::Differs);
        // 69 against 65: within 25 %, the variant closes the gap.
        assert!(
            b.why.starts_with("the backup's request size, measured")
                && b.why.contains("69.0 IOPS, within 25 %"),
            "{}",
            b.why
        );
        let x1 = get("eval1_x_after_first_lowering_pct", "eval1");
        assert_eq!(x1.verdict, Verdict::Differs);
        // (95 - 85.8) / 0.5 = 18.4 here, (95 - 63) / 0.5 = 64 in the paper.
        assert!(
            x1.why.contains("(c - d)·C = 18.4 %-points here and 64.0"),
            "{}",
            x1.why
        );
        assert_eq!(
            get("eval2_x_after_first_lowering_pct", "eval2").verdict,
            Verdict::Holds
        );
        assert_eq!(get("x_lowerings", "eval2").verdict, Verdict::NotComparable);
        let settle = get("eval1_a_settling_time_s", "eval1");
        assert_eq!((settle.ours, settle.verdict), (0.0, Verdict::Differs));
        // Each variant's settling, by name, in the cause.
        assert!(
            settle.why.contains("(eval1-host-cfq) 20 s")
                && settle.why.contains("(eval1-host-cfq-thread) 40 s")
                && settle.why.contains("(eval1-backup-512k) 60 s")
                && settle.why.contains("after the cut: A never settles")
                && settle.why.contains("(eval1-per-thread-budget) 80 s")
                && settle
                    .why
                    .contains("(eval1-host-fifo4-backup-512k-cap-delay-1s)")
                && settle.why.contains("lowered 0 times and A never settles"),
            "{}",
            settle.why
        );
        // The FIFO variant: 240 s is 29 % short of 340 and 25 % of 320 (the
        // sample before the paper's lowering); 3 saturated samples between
        // its lowerings (440 and 560 s: 120 s apart).
        assert!(
            settle
                .why
                .starts_with("not found; ruled out by measurement")
                && settle.why.contains(
                    "X is lowered 2 times, 140 s and 260 s into the phase, the paper ~140 and \
                     ~340 s"
                )
                && settle
                    .why
                    .contains("A settles after 240 s, 29 % short of ~340 s")
                && settle.why.contains("would be ~320 s and ours 25 % short")
                && settle
                    .why
                    .contains("second lowering, 120 s after the first")
                && settle.why.contains("with 3 samples at 100 % in between"),
            "{}",
            settle.why
        );
        // The full window gives the timing (140 and 340 s, settled 320 s)
        // but 5 saturated samples between the lowerings, not the paper's 3.
        assert!(
            settle.why.contains(
                "X lowered 2 times, 140 s and 340 s into the phase, and A settles after 320 s"
            ) && settle
                .why
                .contains("it leaves 5 samples at 100 % between the lowerings"),
            "{}",
            settle.why
        );
        // A variant with no second lowering says so.
        let mut once = summary.clone();
        for a in once["ablation"].as_array_mut().unwrap() {
            if a["name"] == FIFO4_512K_FULL_WINDOW {
                a["x_history"].as_array_mut().unwrap().remove(1);
            }
        }
        let c1 = compare(&once, &BusyRateParams::default());
        let why = &c1
            .iter()
            .find(|r| r.quantity == "eval1_a_settling_time_s")
            .unwrap()
            .why;
        assert!(
            why.contains("it leaves no second lowering, so no samples at 100 % between"),
            "{why}"
        );
        assert!(
            x1.why
                .contains("IOPS 76.2 % (eval1-backup-512k, then 3 lowerings")
                && x1.why.contains("88.5 % per tenant, 91.8 % per thread"),
            "{}",
            x1.why
        );
        let reset = c
            .iter()
            .find(|r| r.quantity.contains("paper's reset rule"))
            .unwrap();
        assert_eq!(reset.verdict, Verdict::Holds);
    }
}
