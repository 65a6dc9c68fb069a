//! ATSMF through the real config → build → run path, on small stacks:
//! 64 MiB sub-LUNs, 4 s periods, a DRAM tier over the P3700 model.
//! - one known concentration: promoted within two periods, then most of
//!   its IOs are served from memory; demoted after it ends;
//! - a uniform workload: nothing is promoted (no concentration is worth
//!   moving: judged and deferred, or the share M is never concentrated);
//! - the judgment never promotes when Y ≤ X (every logged decision);
//! - determinism and the decision log's shape.

use std::fmt::Write as _;
use std::path::Path;

use tierlab_sim::{config, run};

const SUB_LUN: u64 = 64 << 20;
const SUB_LUNS: u64 = 40;
const PERIOD_S: f64 = 4.0;

/// A tiny deterministic RNG (the test must not depend on a crate's stream).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// DiskSim ASCII (ns, 512-B sectors): `rate` IOs/s of 4 KiB for
/// `duration_s`; while `hot` is Some((sub_lun, from_s, to_s)), 80 % of
/// them go to that sub-LUN, the rest uniform over the LUN.
fn write_trace(path: &Path, rate: u64, duration_s: u64, hot: Option<(u64, f64, f64)>, seed: u64) {
    write_trace_drifting(path, rate, duration_s, hot, 0.0, seed)
}

/// As `write_trace`, the hot sub-LUN moving up by one every `step_s`
/// seconds (0: static).
fn write_trace_drifting(
    path: &Path,
    rate: u64,
    duration_s: u64,
    hot: Option<(u64, f64, f64)>,
    step_s: f64,
    seed: u64,
) {
    let mut rng = Lcg(seed);
    let mut text = String::new();
    let n = rate * duration_s;
    for i in 0..n {
        let t_ns = i * 1_000_000_000 / rate;
        let t_s = t_ns as f64 / 1e9;
        let sub = match hot {
            Some((h, from, to)) if t_s >= from && t_s < to && rng.below(100) < 80 => {
                let moved = if step_s > 0.0 {
                    ((t_s - from) / step_s) as u64
                } else {
                    0
                };
                (h + moved).min(SUB_LUNS - 1)
            }
            _ => rng.below(SUB_LUNS),
        };
        let page = rng.below(SUB_LUN / 4096);
        let sector = (sub * SUB_LUN + page * 4096) / 512;
        let read = (rng.below(10) < 7) as u8;
        writeln!(text, "{t_ns} 0 {sector} 8 {read}").unwrap();
    }
    std::fs::write(path, text).unwrap();
}

fn config_text(trace: &Path, extra_policy: &str) -> String {
    format!(
        r#"
seed = 1
[[devices]]
name = "dram"
model = "memory"
preset = "ramdisk"
capacity_bytes = {mem}
[[devices]]
name = "flash"
model = "ssd"
preset = "intel-p3700"
capacity_bytes = {lun}
[policy]
kind = "atsmf"
sub_lun_size_bytes = {SUB_LUN}
period_s = {PERIOD_S}
collect_s = {PERIOD_S}
top_n = 3
buffer_bytes = {SUB_LUN}
{extra_policy}
[[tenants]]
name = "t"
workload = {{ trace = "{trace}", format = "disksim" }}
driver = {{ mode = "open", speed = 1.0 }}
[output]
interval_s = 1.0
"#,
        mem = SUB_LUNS * SUB_LUN + SUB_LUN,
        lun = SUB_LUNS * SUB_LUN,
        trace = trace.display(),
    )
}

struct Outcome {
    summary: serde_json::Value,
    decisions: Vec<Vec<String>>,
    decision_header: Vec<String>,
    policy_series: String,
}

fn run_config(text: &str, dir: &Path) -> Outcome {
    let cfg = config::parse(text, "test", &[]).unwrap();
    let result = run::run(&cfg, dir).unwrap();
    let out = dir.join("out");
    run::write_outputs(&result, &out).unwrap();
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let log = std::fs::read_to_string(out.join("atsmf_decisions.csv")).unwrap();
    let mut lines = log.lines();
    let decision_header = lines.next().unwrap().split(',').map(String::from).collect();
    let decisions = lines
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    Outcome {
        summary,
        decisions,
        decision_header,
        policy_series: std::fs::read_to_string(out.join("policy_series.csv")).unwrap(),
    }
}

fn col(o: &Outcome, row: &[String], name: &str) -> String {
    let i = o
        .decision_header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name}"));
    row[i].clone()
}

fn counter(o: &Outcome, name: &str) -> f64 {
    o.summary["run"]["policy_counters"][name]
        .as_f64()
        .unwrap_or_else(|| panic!("no counter {name}"))
}

#[test]
fn one_known_concentration_is_promoted_within_two_periods_and_served_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("hot.txt");
    // 2,000 IOPS for 120 s; sub-LUN 17 is hot from 8 s to 80 s.
    write_trace(&trace, 2000, 120, Some((17, 8.0, 80.0)), 7);
    let o = run_config(&config_text(&trace, ""), dir.path());

    let promotes: Vec<&Vec<String>> = o.decisions.iter().filter(|r| r[2] == "promote").collect();
    assert!(!promotes.is_empty(), "no promotion: {:?}", o.decisions);
    let first = promotes[0];
    // The group holds sub-LUN 17 (a background neighbour that made the
    // top N may have merged into it).
    let covers_17 = |r: &Vec<String>| {
        let f: u32 = col(&o, r, "first_sub_lun").parse().unwrap();
        let n: u32 = col(&o, r, "size_sub_luns").parse().unwrap();
        (f..f + n).contains(&17)
    };
    assert!(covers_17(first), "{first:?}");
    let t_s: f64 = first[0].parse().unwrap();
    // It starts at 8 s: the period ending at 12 s sees it (A = 1); at the
    // latest the next one (16 s) must promote.
    assert!(t_s <= 8.0 + 2.0 * PERIOD_S + 0.01, "promoted at {t_s} s");
    // Every promotion is of this concentration, and it is static: no
    // prefetch.
    for r in &promotes {
        assert!(covers_17(r), "{r:?}");
        assert_eq!(col(&o, r, "prefetch_sub_luns"), "0", "{r:?}");
    }
    let promotions = counter(&o, "promotions");
    assert!((1.0..=3.0).contains(&promotions), "{promotions} promotions");
    // It ended at 80 s: everything demoted afterwards, memory empty.
    assert_eq!(counter(&o, "demotions"), promotions);
    assert_eq!(counter(&o, "memory_bytes"), 0.0);
    assert!(counter(&o, "peak_memory_bytes") <= 3.0 * SUB_LUN as f64);

    // Most of the hot sub-LUN's IOs came from memory: 80 % of the IOs go
    // to it for 72 s of 120 s; once moved (~16 s), memory serves at least
    // 80 % × (80 − 16) / 120 ≈ 43 % of all IOs, plus 1/40 of the rest.
    let memory_ios = o.summary["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "memory")
        .unwrap()["ios"]
        .as_f64()
        .unwrap();
    let all_ios = o.summary["ios"].as_f64().unwrap();
    let memory_share = memory_ios / all_ios;
    assert!(
        memory_share > 0.40,
        "memory served {memory_share:.3} of IOs"
    );
    // And memory is faster: the measured means the judgment used.
    assert!(counter(&o, "avem_us") < counter(&o, "avef_us"));
    // The memory-bytes series rises to one sub-LUN and falls back to zero.
    let mem_col = o
        .policy_series
        .lines()
        .next()
        .unwrap()
        .split(',')
        .position(|h| h == "memory_bytes")
        .unwrap();
    let series: Vec<f64> = o
        .policy_series
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(mem_col).unwrap().parse().unwrap())
        .collect();
    assert!(series.iter().any(|&b| b >= SUB_LUN as f64));
    assert_eq!(*series.last().unwrap(), 0.0);
}

#[test]
fn a_drifting_concentration_is_prefetched_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("drift.txt");
    // Hot from sub-LUN 5, one sub-LUN up every 8 s (two periods), 0–96 s.
    write_trace_drifting(&trace, 2000, 100, Some((5, 0.0, 96.0)), 8.0, 13);
    let o = run_config(&config_text(&trace, ""), dir.path());
    let prefetched: u32 = o
        .decisions
        .iter()
        .filter(|r| r[2] == "promote" || r[2] == "prefetch")
        .map(|r| col(&o, r, "prefetch_sub_luns").parse::<u32>().unwrap())
        .sum();
    assert!(prefetched >= 2, "{:?}", o.decisions);
    // Prefetching means the hot sub-LUN is often in memory when the
    // concentration reaches it: most of its IOs come from memory.
    let with = o.summary["tiers"][0]["ios"].as_f64().unwrap() / o.summary["ios"].as_f64().unwrap();
    let off = run_config(&config_text(&trace, "prefetch_moving = false"), dir.path());
    let without =
        off.summary["tiers"][0]["ios"].as_f64().unwrap() / off.summary["ios"].as_f64().unwrap();
    assert!(
        with > without,
        "memory share {with:.3} with prefetch, {without:.3} without"
    );
    assert!(with > 0.5, "{with}");
    eprintln!(
        "memory share {with:.3} with prefetch, {without:.3} without; {prefetched} prefetched"
    );
}

#[test]
fn uniform_workload_promotes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("uniform.txt");
    write_trace(&trace, 2000, 60, None, 3);
    let o = run_config(&config_text(&trace, ""), dir.path());
    // Top 3 of 40 uniform sub-LUNs hold ~7.5 % of the IOs, far below M =
    // 60 %: step 4 takes every kept group, and each lasts one period at a
    // fresh place, so the judgment sees at most a few short candidates;
    // none is moved.
    assert_eq!(counter(&o, "promotions"), 0.0, "{:?}", o.decisions);
    assert_eq!(counter(&o, "peak_memory_bytes"), 0.0);
    assert!(o.decisions.iter().all(|r| r[2] != "promote"));
}

#[test]
fn never_promotes_when_y_is_not_above_x() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("hot.txt");
    write_trace(&trace, 2000, 60, Some((5, 0.0, 60.0)), 11);
    // A move that costs a lot (initial AveMgTime of 100 s per sub-LUN, and
    // flash during moves much slower): X dominates until measured.
    let expensive = "initial_ave_mg_time_s = 100.0\ninitial_avef_with_mg_us = 10000.0";
    let o = run_config(&config_text(&trace, expensive), dir.path());
    assert!(!o.decisions.is_empty());
    for r in &o.decisions {
        let decision = &r[2];
        if decision == "promote" || decision == "defer" {
            let x: f64 = col(&o, r, "x_us_s").parse().unwrap();
            let y: f64 = col(&o, r, "y_us_s").parse().unwrap();
            assert_eq!(decision == "promote", y > x, "{r:?}");
        }
    }
    assert_eq!(counter(&o, "promotions"), 0.0);
    assert!(counter(&o, "deferred") >= 1.0);
}

#[test]
fn same_config_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("hot.txt");
    write_trace(&trace, 1000, 40, Some((30, 0.0, 30.0)), 5);
    let text = config_text(&trace, "");
    let a = run_config(&text, dir.path());
    let a_log = std::fs::read(dir.path().join("out/atsmf_decisions.csv")).unwrap();
    let b = run_config(&text, dir.path());
    let b_log = std::fs::read(dir.path().join("out/atsmf_decisions.csv")).unwrap();
    assert_eq!(a.summary, b.summary);
    assert_eq!(a_log, b_log);
    assert_eq!(a.policy_series, b.policy_series);
}

#[test]
fn bad_configs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.txt");
    write_trace(&trace, 10, 1, None, 1);
    let text = config_text(&trace, "").replace(
        &format!("capacity_bytes = {}", SUB_LUNS * SUB_LUN + SUB_LUN),
        &format!("capacity_bytes = {}", SUB_LUN),
    );
    let cfg = config::parse(&text, "test", &[]).unwrap();
    let e = run::run(&cfg, dir.path()).err().unwrap().to_string();
    assert!(
        e.contains("key `devices[0].capacity_bytes`") && e.contains("memory_cap_bytes"),
        "{e}"
    );
    let text = config_text(&trace, "share_m = 1.5");
    let e = match config::parse(&text, "test", &[]) {
        Ok(cfg) => run::run(&cfg, dir.path()).err().unwrap().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("share_m"), "{e}");
    let text = config_text(&trace, "no_such_key = 1");
    let e = config::parse(&text, "test", &[]).err().unwrap().to_string();
    assert!(e.contains("no_such_key"), "{e}");
}
