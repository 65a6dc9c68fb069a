//! `tierlab reproduce raid --quick`: the table's exact columns, a single
//! and a RAID 1 row per workload, the plots, byte-identical reruns, the
//! thesis' shape (RAID 1 read IOPS not below one SSD's, on every row), and
//! errors.

use std::path::Path;
use std::process::{Command, Output};

fn tierlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args(args)
        .output()
        .expect("run tierlab")
}

fn traces_dir() -> Option<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    if dir.is_dir() {
        Some(dir.display().to_string())
    } else {
        println!(
            "SKIPPED the real-trace rows: {} is absent (only the generated workloads run)",
            dir.display()
        );
        None
    }
}

struct Row {
    workload: String,
    config: String,
    read_iops: f64,
    mean_latency_us: f64,
    energy_j: f64,
}

fn rows(table: &str) -> Vec<Row> {
    table
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 5, "{l}");
            Row {
                workload: f[0].to_string(),
                config: f[1].to_string(),
                read_iops: f[2].parse().unwrap(),
                mean_latency_us: f[3].parse().unwrap(),
                energy_j: f[4].parse().unwrap(),
            }
        })
        .collect()
}

#[test]
fn quick_run_writes_the_table_and_plots_and_keeps_the_thesis_shape() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("raid");
    let dir_s = dir.display().to_string();
    let traces = traces_dir();
    let with_traces = |out: &str| {
        let mut args = vec!["reproduce", "raid", "--quick", "--out", out];
        if let Some(t) = &traces {
            args.extend(["--traces", t.as_str()]);
        }
        tierlab(&args)
    };
    let o = with_traces(&dir_s);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let table = std::fs::read_to_string(dir.join("table.csv")).unwrap();
    assert!(table.starts_with("workload,config,read_iops,mean_latency_us,energy_j\n"));
    let rows = rows(&table);
    let presets: Vec<&Row> = rows
        .iter()
        .filter(|r| r.workload.starts_with("ssdraid."))
        .collect();
    assert_eq!(presets.len(), 18, "nine workloads × two configs");
    for pair in rows.chunks(2) {
        let (s, r) = (&pair[0], &pair[1]);
        assert_eq!((s.config.as_str(), r.config.as_str()), ("single", "raid1"));
        assert_eq!(s.workload, r.workload);
        assert!(s.read_iops > 0.0 && s.mean_latency_us > 0.0 && s.energy_j > 0.0);
        // Two SSDs draw more energy than one (idle power and mirrored writes).
        assert!(r.energy_j > s.energy_j, "{}", s.workload);
        // The mirror never reads slower, on any workload: its controller
        // staggers the members' GC, so a read finds a copy that is not
        // collecting (docs/flash-ssd.md). No tolerance.
        assert!(
            r.read_iops >= s.read_iops,
            "{}: RAID 1 {} < single {}",
            s.workload,
            r.read_iops,
            s.read_iops
        );
    }
    if traces.is_none() {
        // A user's clone has no traces folder: nothing outside the
        // checkout is named, and the note says how to add traces.
        assert!(
            stderr.contains("generated workloads only (--traces DIR") && !stderr.contains("shared"),
            "{stderr}"
        );
    } else {
        assert!(
            rows.iter().any(|r| r.workload.starts_with("trace:")),
            "{stderr}"
        );
        assert!(
            stderr.contains("skipped"),
            "traces that do not fit are named: {stderr}"
        );
    }
    for f in ["improvement.csv", "read_iops.svg", "improvement.svg"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    assert!(dir.join("configs/ssdraid.hm_0-raid1.toml").is_file());

    // Paper vs ours: the thesis' mean, max and websearch2 rows, each
    // difference with the variant run that measured its cause, and those
    // runs in variants.csv (the mirror with independent GC on every
    // generated workload; every generated workload as the thesis ran it:
    // independent GC, 32 outstanding).
    let pvo = std::fs::read_to_string(dir.join("paper_vs_ours.csv")).unwrap();
    assert!(pvo.starts_with("quantity,workload,paper,ours,ratio,verdict,why\n"));
    for q in [
        "raid1_read_iops_improvement_mean_pct,generated (ssdraid.*),10.93,",
        "raid1_read_iops_improvement_max_pct,generated (ssdraid.*),43.9,",
        "raid1_read_iops_improvement_pct,ssdraid.websearch2,43.9,",
    ] {
        let line = pvo
            .lines()
            .find(|l| l.starts_with(q))
            .unwrap_or_else(|| panic!("{q}: {pvo}"));
        assert!(
            line.contains(",holds,") || (line.contains(",differs,") && line.contains("measured:")),
            "{line}"
        );
    }
    let variants = std::fs::read_to_string(dir.join("variants.csv")).unwrap();
    assert_eq!(
        variants
            .lines()
            .filter(|l| l.contains(",independent-gc,"))
            .count(),
        9,
        "{variants}"
    );
    assert_eq!(
        variants
            .lines()
            .filter(|l| l.contains(",thesis-like-independent-gc-iodepth32,"))
            .count(),
        9,
        "{variants}"
    );
    let closed: Vec<&str> = variants
        .lines()
        .find(|l| l.starts_with("ssdraid.websearch2,thesis-like-independent-gc-iodepth32,"))
        .expect("the thesis-like websearch2 run")
        .split(',')
        .collect();
    // Closed loop the reads queue, and the mirror splits the queue.
    let (single, raid1): (f64, f64) = (closed[2].parse().unwrap(), closed[3].parse().unwrap());
    assert!(raid1 > 1.2 * single, "{variants}");

    // Same inputs, same bytes.
    let again = out.path().join("again");
    let again_s = again.display().to_string();
    let o = with_traces(&again_s);
    assert!(o.status.success());
    assert_eq!(
        std::fs::read(again.join("table.csv")).unwrap(),
        table.as_bytes()
    );
}

#[test]
fn bad_options_are_clear_errors() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().display().to_string();
    // `reproduce raid --quick --out DIR` plus `extra`: refused, its stderr.
    let refused = |extra: &[&str]| {
        let mut args = vec!["reproduce", "raid", "--quick", "--out", &dir];
        args.extend(extra);
        let o = tierlab(&args);
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success(), "{extra:?} was accepted: {e}");
        e
    };
    let e = refused(&["--precondition", "aged"]);
    assert!(e.contains("aged") && e.contains("steady"), "{e}");
    // A traces folder that is not there is the user's mistake, not a skip.
    let e = refused(&["--traces", "/nonexistent"]);
    assert!(e.contains("`--traces`: /nonexistent: not a folder"), "{e}");
    let e = refused(&["--rate-iops=-5"]);
    assert!(e.contains("rate"), "{e}");
    let e = refused(&["--background-gc", "sometimes"]);
    assert!(e.contains("staggered") && e.contains("independent"), "{e}");
}
