use tierlab_core::Op;
use tierlab_devices::{SsdModel, SsdParams};

use crate::driver::{Outcome, TestRng, closed_loop, open_loop};

const KIB: u32 = 1024;

/// The ATSMF concentration generator's default size mix
/// (4k:8, 8k:4, 16k:2, 32k:1, 64k:1; mean 12 KiB).
fn atsmf_size(rng: &mut TestRng) -> u32 {
    match rng.below(16) {
        0..=7 => 4 * KIB,
        8..=11 => 8 * KIB,
        12..=13 => 16 * KIB,
        14 => 32 * KIB,
        _ => 64 * KIB,
    }
}

fn random_offset(rng: &mut TestRng, capacity_bytes: u64, size: u32) -> u64 {
    rng.below((capacity_bytes - size as u64) / 4096) * 4096
}

/// Open-loop Poisson replay at `rate_iops` with the ATSMF size mix and
/// `write_share` writes; the first `warmup` IOs are dropped (the write-
/// share average starts at 0).
fn replay(params: &SsdParams, rate_iops: f64, write_share: f64, count: usize) -> Outcome {
    let mut rng = TestRng::new(7);
    let mut t = 0;
    let ios: Vec<_> = (0..count)
        .map(|_| {
            t += rng.exp_ns(1e9 / rate_iops);
            let size = atsmf_size(&mut rng);
            let op = if rng.unit() < write_share {
                Op::Write
            } else {
                Op::Read
            };
            (
                t,
                op,
                random_offset(&mut rng, params.capacity_bytes, size),
                size,
            )
        })
        .collect();
    let mut ssd = SsdModel::new(params).unwrap();
    let mut out = open_loop(&mut ssd, &ios);
    let warmup = count / 10;
    out.done.retain(|d| d.io.tag >= warmup as u64);
    out
}

fn closed_4k(params: &SsdParams, op: Op, outstanding: usize, count: usize) -> Outcome {
    let mut rng = TestRng::new(outstanding as u64);
    let mut ssd = SsdModel::new(params).unwrap();
    closed_loop(&mut ssd, outstanding, count, || {
        (
            op,
            random_offset(&mut rng, params.capacity_bytes, 4096),
            4096,
        )
    })
}

#[test]
fn one_read_takes_latency_plus_unit_transfer() {
    let p = SsdParams::intel_p3700();
    let mut ssd = SsdModel::new(&p).unwrap();
    // 24,000 + 4096 B / 800 MB/s (5,120) with no writes seen.
    let out = open_loop(&mut ssd, &[(0, Op::Read, 0, 4096)]);
    assert_eq!(out.done[0].latency_ns(), 24_000 + 5_120);
    // The S3500 is calibrated to its datasheet's 50 µs QD1 read.
    let mut ssd = SsdModel::new(&SsdParams::intel_s3500()).unwrap();
    let out = open_loop(&mut ssd, &[(0, Op::Read, 0, 4096)]);
    assert_eq!(out.done[0].latency_ns(), 50_000);
}

#[test]
fn writes_slow_the_units_by_the_recent_write_share() {
    // After n writes the share is 1 - (1 - 1/1000)^n; a read then takes
    // its base time times 1 + gc_slowdown * share.
    let p = SsdParams::intel_p3700();
    let mut ssd = SsdModel::new(&p).unwrap();
    let mut ios: Vec<_> = (0..3000u64)
        .map(|i| (i * 1_000_000, Op::Write, i * 4096, 4096))
        .collect();
    ios.push((3_000_000_000, Op::Read, 0, 4096));
    let out = open_loop(&mut ssd, &ios);
    let share_before_read = 1.0 - (1.0f64 - 1e-3).powi(3000);
    let share_at_read = share_before_read * (1.0 - 1e-3);
    assert!((ssd.recent_write_share() - share_at_read).abs() < 1e-9);
    let read = out.done.iter().find(|d| d.io.op == Op::Read).unwrap();
    let want = ((24_000.0 + 5_120.0) * (1.0 + 1.55 * share_at_read)).round() as u64;
    assert_eq!(read.latency_ns(), want);
    // The last write: (20,000 + 10,240) × (1 + 1.5 × share after 3000).
    let last_write = out.done.iter().rfind(|d| d.io.op == Op::Write).unwrap();
    let want = (30_240.0 * (1.0 + 1.55 * share_before_read)).round() as u64;
    assert_eq!(last_write.latency_ns(), want);

    // S3500 writes at w ≈ 1 with gaps (1,000 IOPS): the datasheet's 65 µs.
    let p = SsdParams::intel_s3500();
    let ios: Vec<_> = (0..20_000u64)
        .map(|i| (i * 1_000_000, Op::Write, i * 4096, 4096))
        .collect();
    let mut ssd = SsdModel::new(&p).unwrap();
    let out = open_loop(&mut ssd, &ios);
    let last = out.done.last().unwrap().latency_ns();
    assert!((last as f64 - 65_000.0).abs() < 10.0, "{last}");
    // Back to back at QD1 the 11.5 k IOPS limit holds them to 87 µs.
    let out = closed_4k(&p, Op::Write, 1, 20_000);
    let last = out.done.last().unwrap().latency_ns();
    assert!((last as f64 - 1e9 / 11_500.0).abs() < 2.0, "{last}");
}

#[test]
fn latency_rises_with_load_and_iops_saturates_at_the_limit() {
    for (name, op, limit_iops) in [
        ("intel-p3700", Op::Read, 460_000.0),
        ("intel-p3700", Op::Write, 90_000.0),
        ("intel-s3500", Op::Read, 75_000.0),
        ("intel-s3500", Op::Write, 11_500.0),
    ] {
        let p = SsdParams::preset(name).unwrap();
        let mut last_mean = 0.0;
        let mut report = Vec::new();
        for outstanding in [1, 2, 4, 8, 16, 32, 64, 128, 256] {
            let out = closed_4k(&p, op, outstanding, 40_000);
            // Drop the first quarter: the write share warms up.
            let steady = Outcome {
                done: out.done[out.done.len() / 4..].to_vec(),
                states: Vec::new(),
            };
            let mean = steady.mean_latency_ns();
            let iops = steady.iops();
            report.push(format!(
                "QD{outstanding}: {:.1} µs {:.0} IOPS",
                mean / 1e3,
                iops
            ));
            assert!(
                mean >= last_mean * 0.999,
                "{name} {op:?}: mean latency fell from {last_mean} to {mean} at QD{outstanding}"
            );
            assert!(
                iops <= limit_iops * 1.001,
                "{name} {op:?}: {iops} IOPS above the limit"
            );
            last_mean = mean;
            if outstanding == 256 {
                assert!(
                    (iops / limit_iops - 1.0).abs() < 0.01,
                    "{name} {op:?}: {iops} IOPS at QD256, limit {limit_iops}"
                );
                // Little's law at saturation.
                let want_ns = 256.0 * 1e9 / limit_iops;
                assert!((mean / want_ns - 1.0).abs() < 0.02, "{mean} vs {want_ns}");
            }
        }
        eprintln!(
            "calibration {name} 4 KiB {op:?} closed loop: {}",
            report.join(", ")
        );
    }
}

#[test]
fn sequential_bandwidth_is_capped_by_the_device() {
    // 128 KiB reads at QD64: 18 units could move 14.4 GB/s, the front end
    // only 2.8 GB/s.
    let p = SsdParams::intel_p3700();
    let mut ssd = SsdModel::new(&p).unwrap();
    let mut offset = 0;
    let out = closed_loop(&mut ssd, 64, 20_000, || {
        offset += 128 * 1024;
        (Op::Read, offset, 128 * 1024)
    });
    let got = out.bytes_per_s();
    assert!((got / 2.8e9 - 1.0).abs() < 0.01, "{got}");
}

/// Mean latency (µs) of the calibration replay: all, reads, writes.
fn replay_means(p: &SsdParams, rate_iops: f64, write_share: f64) -> (f64, f64, f64) {
    let out = replay(p, rate_iops, write_share, 200_000);
    (
        out.mean_latency_ns() / 1e3,
        out.mean_latency_where(|d| d.io.op == Op::Read) / 1e3,
        out.mean_latency_where(|d| d.io.op == Op::Write) / 1e3,
    )
}

#[test]
fn calibration_p3700_lands_on_the_atsmf_paper() {
    // ATSMF (seed 000): ~40 µs on read-mostly, ~80 µs on mixed loads.
    // Moderate load: 20,000 IOPS, ATSMF size mix; 1 % and 50 % writes.
    let p = SsdParams::intel_p3700();
    let (read_mostly, _, _) = replay_means(&p, 20_000.0, 0.01);
    let (mixed, mixed_reads, mixed_writes) = replay_means(&p, 20_000.0, 0.5);
    eprintln!(
        "calibration intel-p3700 at 20k IOPS: read-mostly {read_mostly:.1} µs, \
         mixed {mixed:.1} µs (reads {mixed_reads:.1}, writes {mixed_writes:.1})"
    );
    assert!((read_mostly - 40.0).abs() < 1.0, "{read_mostly}");
    assert!((mixed - 80.0).abs() < 2.0, "{mixed}");

    // Light, moderate and heavy load, for the record: latency grows with
    // the load, and the heavy mixed load is past the front end's limit.
    let mut last = (0.0, 0.0);
    for rate in [2_000.0, 20_000.0, 100_000.0, 200_000.0] {
        let (rm, _, _) = replay_means(&p, rate, 0.01);
        let (mx, _, _) = replay_means(&p, rate, 0.5);
        eprintln!(
            "calibration intel-p3700 at {rate} IOPS: read-mostly {rm:.1} µs, mixed {mx:.1} µs"
        );
        assert!(rm >= last.0 * 0.99 && mx >= last.1 * 0.99);
        last = (rm, mx);
    }
}
