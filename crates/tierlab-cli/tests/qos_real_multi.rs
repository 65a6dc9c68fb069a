//! End to end with several tenants: `tierlab qos run` guarantees two fio
//! tenants their IOPS on the paper's RAID 5 by capping two others, each
//! tenant in its own cgroup.
//!
//! The device: `tierlab emulate --config configs/qos-eval1.toml --device
//! raid5` — the paper's RAID 5 of six 7200 rpm disks (400 GB each, FIFO,
//! no NCQ, 64 KiB stripe units), 2 TB in a sparse backing file — and a
//! loop device with direct IO over it. Unlike the one-disk test
//! (qos_real.rs), the members serve in parallel, so `%util` reaches 100 %
//! before the array's IOPS do: the proportional limit that makes the
//! controller lower X (docs/qos.md, "Real mode: what we measured").
//!
//! The tenants, as evaluation 1 places them: A1 and A2 file-share-like
//! (4–64 KiB, a read job and a write job each, 4 deep each) in the two
//! halves of the last 500 GiB, each capped at its target by its own cgroup
//! limits (20 reads/s + 10 writes/s = 30 IOPS: the kernel's IOPS throttle
//! is exact only in steps of 10 IOPS here, docs/qos.md); B1 and B2
//! backup-like (128 KiB, 50 % reads, 48 deep each, unthrottled) in 0–30
//! GiB and 300–330 GiB. 8 s without the controller (B starves the A's),
//! then `tierlab qos run --guarantee A1=30 --guarantee A2=30 --throttle B1
//! --throttle B2 --interval-s 2 --initial-target-busy-pct 100
//! --saturated-util-pct 99.8` for 100 s.
//!
//! Asserted: B starves the A's without the controller (their sum < 90 %
//! of 60); with it the A's sum over the second half of the run, as fio
//! measures it, is within 10 % of 60 and each A within 20 % of its 30; the
//! B's together drop below 90 % of their unthrottled rate; X is lowered at
//! least once; both B cgroups had limits written while the controller ran
//! (seen in their cgroup files) and the log's per-tenant caps add up to
//! the total cap; no B limit is left after the controller exits, and the
//! A's own limits are untouched. About 115 s; it runs alone under nextest
//! (.config/nextest.toml), and skips with a message where it cannot run.

mod common_qos;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common_qos::*;

/// Each guaranteed tenant's own (read, write) limits: its target is the sum.
const A_LIMITS: [(u64, u64); 2] = [(20, 10), (20, 10)];
/// fio runs this long before the controller starts (B unthrottled).
const BASELINE_S: u64 = 8;
/// Long enough for the X rule to arm from the settled regime too: it arms
/// from the start-up transient in most runs, not in all (docs/qos.md).
const CONTROL_S: u64 = 100;
const INTERVAL_S: u64 = 2;
/// The controller's initial X: 100 %, above this array's proportional
/// limit, so the lowering is needed rather than incidental. From the
/// paper's 95 % the array reaches `%util` 99.8 only now and then: each
/// saturated sample's extra cut drops the next to ~76 %, and in one CI run
/// 6 saturated samples in 50 never made 3 within 10, so X stayed put
/// (docs/qos.md, "Why start at X = 100 %").
const INITIAL_X: f64 = 100.0;
/// `--saturated-util-pct`: a 2 s sample's `%util` moves in steps of 0.2
/// points here (io_ticks counts 4 ms jiffies at HZ 250), so 99.80 is a
/// sample with at most 4 ms of its 2 s without an IO in flight — what the
/// paper's 100.00 is at 2 s samples. At 100 the rule needs all 500 jiffies
/// busy and fired in 3 of 4 runs (docs/qos.md).
const SATURATED_UTIL_PCT: f64 = 99.8;
/// Per fio job (each A has a read job and a write job).
const A_DEPTH: u32 = 4;
const B_DEPTH: u32 = 48;
const GIB: u64 = 1 << 30;
/// configs/qos-eval1.toml's tenant A region: the last 500 GiB of the array.
const A_REGION_OFFSET: u64 = 1_463_128_883_200;
/// Free space the backing file may need (B's writes land in it).
const FREE_BYTES_NEEDED: u64 = 4 * GIB;

/// Mean IOPS over `(from_s, to_s]` of every fio log `{base}_iops.*.log` in `dir`.
fn fio_iops(dir: &Path, base: &str, from_s: f64, to_s: f64) -> f64 {
    let prefix = format!("{base}_iops.");
    let logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".log"))
        })
        .collect();
    assert!(
        !logs.is_empty(),
        "no fio log {base}_iops.*.log in {}",
        dir.display()
    );
    logs.iter().map(|l| fio_mean_iops(l, from_s, to_s)).sum()
}

#[test]
fn qos_run_guarantees_two_fio_tenants_their_iops_on_an_emulated_raid5() {
    let skip = |why: &str| {
        eprintln!("SKIP qos_run_guarantees_two_fio_tenants_their_iops_on_an_emulated_raid5: {why}")
    };
    let (interface, root) = match preconditions(true) {
        Ok(found) => found,
        Err(why) => return skip(&why),
    };
    let free = free_bytes(Path::new("/var/tmp"));
    if free < FREE_BYTES_NEEDED {
        return skip(&format!(
            "{} MiB free in /var/tmp, the backing file needs up to {} MiB",
            free >> 20,
            FREE_BYTES_NEEDED >> 20
        ));
    }
    let started = Instant::now();
    let mut setup = Setup::new();
    let dir = setup.path();
    let emu_summary = dir.join("emulate.json");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/qos-eval1.toml");
    let emu_args: Vec<String> = vec![
        "--config".into(),
        config.display().to_string(),
        "--device".into(),
        "raid5".into(),
        "--backing".into(),
        dir.join("backing").display().to_string(),
    ];
    let dev = match setup.emulated_loop_device(&emu_args, &emu_summary) {
        Ok(dev) => dev,
        Err(why) => return skip(&why),
    };
    let majmin = majmin(&dev);
    let pid = std::process::id();
    let names: Vec<String> = ["a1", "a2", "b1", "b2"]
        .iter()
        .map(|t| format!("tierlab-e2e-{pid}-{t}"))
        .collect();
    let mut cgs = Vec::new();
    for n in &names {
        match setup.cgroup(&root, n) {
            Ok(cg) => cgs.push(cg),
            Err(why) => return skip(&why),
        }
    }
    let (a_cgs, b_cgs) = (cgs[..2].to_vec(), cgs[2..].to_vec());
    // Each A's own limits are its target (the paper caps A at its target).
    for (cg, (r, w)) in a_cgs.iter().zip(A_LIMITS) {
        write_limit(interface, cg, &majmin, r, w);
    }
    let a_targets: Vec<f64> = A_LIMITS.iter().map(|(r, w)| (r + w) as f64).collect();
    let a_target_sum: f64 = a_targets.iter().sum();
    let runtime = BASELINE_S + CONTROL_S + 2;
    let global = [
        format!("--filename={dev}"),
        "--direct=1".into(),
        "--ioengine=libaio".into(),
        "--time_based".into(),
        format!("--runtime={runtime}"),
        "--log_avg_msec=1000".into(),
    ];
    let job = |name: &str, offset: u64, size_gib: u64, rest: &[&str]| -> Vec<String> {
        let mut v = vec![
            format!("--name={name}"),
            format!("--offset={offset}"),
            format!("--size={size_gib}G"),
            format!("--write_iops_log={}", dir.join(name).display()),
        ];
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    };
    // file-share's sizes (docs/generators.md: 4k:8,8k:4,16k:2,32k:1,64k:1).
    let file_share = "--bssplit=4k/50:8k/25:16k/12:32k/7:64k/6";
    let a_depth = format!("--iodepth={A_DEPTH}");
    let b_depth = format!("--iodepth={B_DEPTH}");
    let fio_t0 = Instant::now();
    for (i, cg) in b_cgs.iter().enumerate() {
        let mut args = global.to_vec();
        args.extend(job(
            &format!("b{}", i + 1),
            i as u64 * 300 * GIB,
            30,
            &["--rw=randrw", "--rwmixread=50", "--bs=128k", &b_depth],
        ));
        setup
            .children
            .push(fio_in(cg, &args, &dir.join(format!("fio-b{}.out", i + 1))));
    }
    for (i, cg) in a_cgs.iter().enumerate() {
        let offset = A_REGION_OFFSET + i as u64 * 250 * GIB;
        let mut args = global.to_vec();
        for (suffix, rw) in [("r", "--rw=randread"), ("w", "--rw=randwrite")] {
            args.extend(job(
                &format!("a{}{suffix}", i + 1),
                offset,
                250,
                &[rw, file_share, "--blockalign=4k", &a_depth],
            ));
        }
        setup
            .children
            .push(fio_in(cg, &args, &dir.join(format!("fio-a{}.out", i + 1))));
    }
    std::thread::sleep(Duration::from_secs(BASELINE_S));
    // Watch the B cgroups' limit files while the controller runs.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, b_cgs, majmin) = (stop.clone(), b_cgs.clone(), majmin.clone());
        std::thread::spawn(move || {
            let mut seen: Vec<Vec<String>> = vec![Vec::new(); b_cgs.len()];
            while !stop.load(Ordering::SeqCst) {
                for (cg, seen) in b_cgs.iter().zip(&mut seen) {
                    for l in limits_set(interface, cg, &majmin) {
                        if !seen.contains(&l) {
                            seen.push(l);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            seen
        })
    };
    let log = dir.join("qos.csv");
    let control_start_s = fio_t0.elapsed().as_secs_f64();
    let mut args: Vec<String> = names[..2]
        .iter()
        .zip(&a_targets)
        .map(|(n, t)| format!("--guarantee={n}={t}"))
        .collect();
    args.extend(names[2..].iter().map(|n| format!("--throttle={n}")));
    args.extend([
        format!("--interval-s={INTERVAL_S}"),
        format!("--duration-s={CONTROL_S}"),
        format!("--initial-target-busy-pct={INITIAL_X}"),
        format!("--saturated-util-pct={SATURATED_UTIL_PCT}"),
    ]);
    let (ran, qos_err) = run_controller(&dev, &args, &log, &dir);
    let control_end_s = fio_t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let b_limits_seen = watcher.join().unwrap();
    assert!(ran, "tierlab qos run failed:\n{qos_err}");
    // Every B's limit is gone after the controller exits; the A's own stay.
    for (i, cg) in b_cgs.iter().enumerate() {
        let left = limits_set(interface, cg, &majmin);
        assert!(left.is_empty(), "B{}'s limit left behind: {left:?}", i + 1);
    }
    for (i, cg) in a_cgs.iter().enumerate() {
        let own = limits_set(interface, cg, &majmin);
        assert!(
            !own.is_empty(),
            "A{}'s own limits were removed: the controller must not touch a guaranteed tenant",
            i + 1
        );
    }
    // fio ends by itself and writes its logs.
    setup.wait_children(Duration::from_secs(30));
    // fio's own measurements (its clock starts within a few ms of ours).
    let baseline = (2.0, control_start_s.floor());
    let settled = (
        (control_start_s + control_end_s) / 2.0,
        control_end_s.floor(),
    );
    let a_iops = |i: usize, (from, to): (f64, f64)| {
        fio_iops(&dir, &format!("a{}r", i + 1), from, to)
            + fio_iops(&dir, &format!("a{}w", i + 1), from, to)
    };
    let b_iops =
        |i: usize, (from, to): (f64, f64)| fio_iops(&dir, &format!("b{}", i + 1), from, to);
    let a_base: Vec<f64> = (0..2).map(|i| a_iops(i, baseline)).collect();
    let a_settled: Vec<f64> = (0..2).map(|i| a_iops(i, settled)).collect();
    let b_base: Vec<f64> = (0..2).map(|i| b_iops(i, baseline)).collect();
    let b_settled: Vec<f64> = (0..2).map(|i| b_iops(i, settled)).collect();
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    let a_error_pct = 100.0 * (sum(&a_settled) - a_target_sum) / a_target_sum;
    // The controller's log.
    let qlog = QosLog::read(&log);
    let text = &qlog.text;
    let events = qlog.events();
    let saturated = qlog.saturated();
    let xs = qlog.column("target_busy_pct");
    // X's path: its initial value, then every change.
    let x_changes: Vec<String> = std::iter::once(format!("{INITIAL_X:.1} %"))
        .chain((xs[0] != INITIAL_X).then(|| {
            format!(
                "{:.1} % at {:.0} s",
                xs[0],
                qlog.num(&qlog.rows[0], "time_s")
            )
        }))
        .chain(
            xs.windows(2)
                .zip(&qlog.rows[1..])
                .filter(|(w, _)| w[0] != w[1])
                .map(|(w, r)| format!("{:.1} % at {:.0} s", w[1], qlog.num(r, "time_s"))),
        )
        .collect();
    let (util_lo, util_hi) = range(&qlog.column("util_pct"));
    let b_cap_ranges: Vec<(f64, f64)> = (1..=2)
        .map(|i| range(&qlog.column(&format!("b{i}_cap_iops"))))
        .collect();
    // The emulator's own report needs the loop device gone first.
    let emu_report = setup.release_device(&emu_summary);
    eprintln!(
        "qos e2e, 2 guaranteed + 2 throttled tenants (emulated RAID 5 behind a loop device, {interface} cgroups), {:.0} s in all:\n  \
         baseline (B unthrottled, {:.0}-{:.0} s): A1 {:.1} A2 {:.1} (sum {:.1} of {a_target_sum}), B1 {:.1} B2 {:.1}\n  \
         settled ({:.0}-{:.0} s): A1 {:.1} A2 {:.1} (sum {:.1}, {a_error_pct:+.1} %), B1 {:.1} B2 {:.1}\n  \
         controller: {} samples, util {util_lo:.1}-{util_hi:.1} %, {saturated} saturated, X {}, \
         events [{}], B1 cap {:.1}-{:.1}, B2 cap {:.1}-{:.1} IOPS; limits seen B1 {:?} B2 {:?}",
        started.elapsed().as_secs_f64(),
        baseline.0,
        baseline.1,
        a_base[0],
        a_base[1],
        sum(&a_base),
        b_base[0],
        b_base[1],
        settled.0,
        settled.1,
        a_settled[0],
        a_settled[1],
        sum(&a_settled),
        b_settled[0],
        b_settled[1],
        qlog.rows.len(),
        x_changes.join(" → "),
        events.join(", "),
        b_cap_ranges[0].0,
        b_cap_ranges[0].1,
        b_cap_ranges[1].0,
        b_cap_ranges[1].1,
        b_limits_seen[0].len(),
        b_limits_seen[1].len(),
    );
    for r in &qlog.rows {
        eprintln!(
            "  t={:5.1}s util {:6.2} % A {:5.1} [{:.1} {:.1}] B {:5.1} [{:.1} {:.1}] bpi {:.3} X {:.1} {} B cap {:.1} [{:.1} {:.1}]",
            qlog.num(r, "time_s"),
            qlog.num(r, "util_pct"),
            qlog.num(r, "a_iops"),
            qlog.num(r, "a1_iops"),
            qlog.num(r, "a2_iops"),
            qlog.num(r, "b_iops"),
            qlog.num(r, "b1_iops"),
            qlog.num(r, "b2_iops"),
            qlog.num(r, "busy_pct_per_iops"),
            qlog.num(r, "target_busy_pct"),
            qlog.str(r, "event"),
            qlog.num(r, "b_cap_iops"),
            qlog.num(r, "b1_cap_iops"),
            qlog.num(r, "b2_cap_iops"),
        );
    }
    if !emu_report.is_empty() {
        eprintln!("emulator summary:\n{emu_report}");
    }

    // Each lowering is logged with its c, d and C, and moved X by the
    // paper's rule: New X = X − (c − d)·C·y (y = 0.5; floor 10 %).
    let mut x_before = INITIAL_X;
    for r in &qlog.rows {
        let x = qlog.num(r, "target_busy_pct");
        if qlog.str(r, "event") == "lowered" {
            let c = qlog.num(r, "c_busy_pct_per_iops");
            let d = qlog.num(r, "d_busy_pct_per_iops");
            let big_c = qlog.num(r, "big_c_total_iops");
            let expected = (x_before - (c - d) * big_c * 0.5).max(10.0);
            assert!(
                (x - expected).abs() < 1e-6 * x_before,
                "lowering at {}: X {x_before} -> {x}, c {c}, d {d}, C {big_c} (expected {expected})",
                qlog.num(r, "time_s")
            );
        } else {
            assert!(qlog.num(r, "c_busy_pct_per_iops").is_nan());
        }
        x_before = x;
    }
    // The log: the totals are the per-tenant sums; the caps split the budget.
    for r in &qlog.rows {
        let t = qlog.num(r, "time_s");
        assert_eq!(qlog.num(r, "a_target_iops"), a_target_sum, "t={t}");
        let a_each = qlog.num(r, "a1_iops") + qlog.num(r, "a2_iops");
        assert!(
            (qlog.num(r, "a_iops") - a_each).abs() < 1e-6,
            "t={t}: a_iops"
        );
        let b_each = qlog.num(r, "b1_iops") + qlog.num(r, "b2_iops");
        assert!(
            (qlog.num(r, "b_iops") - b_each).abs() < 1e-6,
            "t={t}: b_iops"
        );
        let cap = qlog.num(r, "b_cap_iops");
        if cap.is_nan() {
            continue;
        }
        let shares = [qlog.num(r, "b1_cap_iops"), qlog.num(r, "b2_cap_iops")];
        assert!(
            shares.iter().all(|s| *s >= 1.0),
            "t={t}: a B share below the floor: {shares:?}"
        );
        if cap >= 2.0 {
            assert!(
                (shares[0] + shares[1] - cap).abs() < 1e-6 * cap,
                "t={t}: B's shares {shares:?} do not add up to the cap {cap}"
            );
        }
        for k in ["riops", "wiops"] {
            let each = qlog.num(r, &format!("b1_{k}")) + qlog.num(r, &format!("b2_{k}"));
            assert_eq!(qlog.num(r, &format!("b_{k}")), each, "t={t}: b_{k}");
        }
    }
    if sum(&a_base) > 0.9 * a_target_sum {
        panic!(
            "B did not starve the A's on the emulated RAID 5 without the controller: {a_base:?} IOPS, targets {a_targets:?}"
        );
    }
    for (i, seen) in b_limits_seen.iter().enumerate() {
        assert!(
            !seen.is_empty(),
            "no limit of B{} was seen in its cgroup while the controller ran",
            i + 1
        );
    }
    assert!(
        qlog.rows.iter().any(|r| qlog.str(r, "event") == "lowered")
            && xs.iter().any(|x| *x < INITIAL_X),
        "X was never lowered: {x_changes:?}; controller log:\n{text}"
    );
    assert!(
        a_error_pct.abs() <= 10.0,
        "the A's IOPS {a_settled:?} (sum {:.1}) not within 10 % of {a_target_sum}; controller log:\n{text}\n{qos_err}",
        sum(&a_settled)
    );
    for i in 0..2 {
        let err = (a_settled[i] - a_targets[i]) / a_targets[i];
        assert!(
            err.abs() <= 0.2,
            "A{}'s IOPS {:.1} not within 20 % of its {}",
            i + 1,
            a_settled[i],
            a_targets[i]
        );
    }
    assert!(
        sum(&b_settled) < 0.9 * sum(&b_base),
        "the B's were not throttled: {b_settled:?} IOPS with the controller vs {b_base:?} without"
    );
}
