use tierlab_core::device::DeviceState;
use tierlab_core::{Op, ParamError};
use tierlab_devices::{HddModel, HddParams, Scheduler};

use crate::driver::{Driver, Outcome, TestRng, closed_loop, open_loop};

const KIB: u32 = 1024;

fn fifo(mut p: HddParams) -> HddParams {
    p.scheduler = Scheduler::Fifo;
    p
}

/// Random 4 KiB reads, one at a time, uniform aligned offsets.
fn random_reads(p: &HddParams, outstanding: usize, count: usize, seed: u64) -> Outcome {
    let mut rng = TestRng::new(seed);
    let mut hdd = HddModel::new(p, seed).unwrap();
    let blocks = (p.capacity_bytes - 4096) / 4096;
    closed_loop(&mut hdd, outstanding, count, || {
        (Op::Read, rng.below(blocks) * 4096, 4096)
    })
}

#[test]
fn seek_curve_meets_its_three_points() {
    for name in HddParams::PRESETS {
        let p = HddParams::preset(name).unwrap();
        let hdd = HddModel::new(&p, 0).unwrap();
        let t2t = p.track_to_track_seek_ns as f64;
        let avg = p.average_seek_ns as f64;
        let full = p.full_stroke_seek_ns as f64;
        assert!((hdd.seek_curve_ns(1.0) - full).abs() < 1e-6 * full);
        assert!((hdd.seek_curve_ns(1e-9) - t2t).abs() < 1e-3 * t2t);
        // Mean over |X - Y| (density 2(1 - d)) by the midpoint rule.
        let n = 200_000;
        let mean: f64 = (0..n)
            .map(|i| {
                let d = (i as f64 + 0.5) / n as f64;
                hdd.seek_curve_ns(d) * 2.0 * (1.0 - d) / n as f64
            })
            .sum();
        assert!(
            (mean / avg - 1.0).abs() < 1e-4,
            "{name}: mean seek {mean} vs {avg}"
        );
        // Continuous and increasing through the knee.
        let k = hdd.seek_knee();
        assert!(k > 0.0 && k < 1.0, "{name}: knee {k}");
        let below = hdd.seek_curve_ns(k - 1e-9);
        let above = hdd.seek_curve_ns(k + 1e-9);
        assert!((above - below).abs() < 1.0 && above > below);
        eprintln!("calibration {name}: seek knee at {:.3} of the stroke", k);
    }
}

#[test]
fn random_read_service_time_is_seek_plus_half_rotation_plus_transfer() {
    // One IO at a time, uniform 4 KiB reads: mean service time ≈ average
    // seek + half a revolution + 4 KiB × E[1/rate] + command overhead,
    // E[1/rate] = ln(outer/inner) / (outer − inner) for a rate linear in
    // the LBA.
    for name in HddParams::PRESETS {
        let p = fifo(HddParams::preset(name).unwrap());
        let outer = p.outer_rate_bytes_per_s as f64;
        let inner = p.inner_rate_bytes_per_s as f64;
        let transfer_ns = 4096.0 * (outer / inner).ln() / (outer - inner) * 1e9;
        let half_revolution_ns = 30e9 / p.rpm as f64;
        let want = p.average_seek_ns as f64
            + half_revolution_ns
            + transfer_ns
            + p.command_overhead_ns as f64;
        let out = random_reads(&p, 1, 20_000, 11);
        let got = out.mean_latency_ns();
        eprintln!(
            "calibration {name}: mean random 4 KiB read {:.3} ms, formula {:.3} ms \
             (seek {:.3} + half rotation {:.3} + transfer {:.3} + overhead {:.3})",
            got / 1e6,
            want / 1e6,
            p.average_seek_ns as f64 / 1e6,
            half_revolution_ns / 1e6,
            transfer_ns / 1e6,
            p.command_overhead_ns as f64 / 1e6
        );
        assert!((got / want - 1.0).abs() < 0.02, "{name}: {got} vs {want}");
    }
}

fn sequential(p: &HddParams, op: Op, start: u64, size: u32, outstanding: usize) -> Outcome {
    let mut hdd = HddModel::new(p, 3).unwrap();
    let mut offset = start;
    closed_loop(&mut hdd, outstanding, 2_000, || {
        let io = (op, offset, size);
        offset += size as u64;
        io
    })
}

#[test]
fn sequential_reads_run_at_the_zone_rate() {
    let p = HddParams::sata_7200_2tb();
    let hdd = HddModel::new(&p, 0).unwrap();
    for start in [0, p.capacity_bytes / 2, p.capacity_bytes - (1 << 30)] {
        let zone_rate = hdd.rate_bytes_per_s_at(start);
        // 256 KiB at QD1: the 0.1 ms overhead hides inside the 1.3–2.6 ms
        // transfers, thanks to read-ahead.
        let out = sequential(&p, Op::Read, start, 256 * KIB, 1);
        let got = out.bytes_per_s();
        eprintln!(
            "calibration sata-7200-2tb sequential 256 KiB reads at {:.0} GB: {:.1} MB/s (zone {:.1} MB/s)",
            start as f64 / 1e9,
            got / 1e6,
            zone_rate / 1e6
        );
        assert!((got / zone_rate - 1.0).abs() < 0.01, "{got} vs {zone_rate}");
    }
    // 4 KiB at QD1: the overhead (0.1 ms) is longer than a 4 KiB transfer
    // (20 µs), so the host, not the media, sets the pace: 4 KiB per 0.1 ms
    // once the first read has found its place.
    let out = sequential(&p, Op::Read, 0, 4 * KIB, 1);
    let first = &out.done[0];
    let last = out.done.last().unwrap();
    let per_io_ns = (last.done_ns - first.done_ns) as f64 / (out.done.len() - 1) as f64;
    assert!((per_io_ns - 100_000.0).abs() < 1.0, "{per_io_ns}");
}

#[test]
fn sequential_writes_without_cache_lose_a_revolution_at_qd1_and_stream_when_queued() {
    let p = HddParams::sata_7200_2tb();
    let hdd = HddModel::new(&p, 0).unwrap();
    let size = 256 * KIB;
    let rate = hdd.rate_bytes_per_s_at(0);
    let transfer_ns = size as f64 / rate * 1e9;
    // QD1: the next write arrives after the previous one ended, the
    // overhead lets its first sector pass: one revolution per write.
    let out = sequential(&p, Op::Write, 0, size, 1);
    let per_io_ns = 1e9 / out.iops();
    let want = hdd.revolution_ns() + transfer_ns;
    assert!(
        (per_io_ns / want - 1.0).abs() < 0.01,
        "{per_io_ns} vs {want}"
    );
    // QD2: a queued write has paid its overhead during the previous
    // transfer and starts where the head is.
    let out = sequential(&p, Op::Write, 0, size, 2);
    let got = out.bytes_per_s();
    assert!((got / rate - 1.0).abs() < 0.01, "{got} vs {rate}");
}

#[test]
fn sstf_beats_fifo_on_random_reads_at_queue_depth_32() {
    let p = HddParams::sata_7200_2tb();
    let sstf = random_reads(&p, 32, 20_000, 5);
    let qd1 = random_reads(&fifo(p.clone()), 1, 5_000, 5);
    let fifo = random_reads(&fifo(p), 32, 20_000, 5);
    eprintln!(
        "calibration sata-7200-2tb random 4 KiB reads: QD1 {:.0} IOPS, QD32 fifo {:.0} IOPS \
         ({:.1} ms), QD32 sstf {:.0} IOPS ({:.1} ms)",
        qd1.iops(),
        fifo.iops(),
        fifo.mean_latency_ns() / 1e6,
        sstf.iops(),
        sstf.mean_latency_ns() / 1e6
    );
    // FIFO at any depth serves random IOs like QD1.
    assert!((fifo.iops() / qd1.iops() - 1.0).abs() < 0.03);
    assert!(sstf.iops() > 1.5 * fifo.iops());
    assert!(sstf.mean_latency_ns() < fifo.mean_latency_ns());
}

#[test]
fn queue_depth_limits_what_the_scheduler_sees() {
    // With queue_depth 1, SSTF has one candidate: it is FIFO.
    let mut p = HddParams::sata_7200_2tb();
    p.queue_depth = 1;
    let sstf = random_reads(&p, 32, 3_000, 9);
    let in_order = random_reads(&fifo(p), 32, 3_000, 9);
    assert_eq!(sstf.completions(), in_order.completions());
}

#[test]
fn a_read_shows_seek_then_read_then_idle() {
    let p = HddParams::sata_7200_2tb();
    let mut hdd = HddModel::new(&p, 1).unwrap();
    let mut driver = Driver::new(&mut hdd);
    driver.advance_to(1_000);
    driver.submit(Op::Read, p.capacity_bytes / 2, 64 * KIB);
    driver.drain();
    let states: Vec<DeviceState> = driver.outcome.states.iter().map(|s| s.1).collect();
    assert_eq!(
        states,
        vec![
            DeviceState::Idle,
            DeviceState::Seek,
            DeviceState::Read,
            DeviceState::Idle
        ]
    );
    // The read phase is the 64 KiB transfer at the mid-disk rate.
    let read_ns = driver.outcome.states[3].0 - driver.outcome.states[2].0;
    let want = 65536.0 / 150e6 * 1e9;
    assert!(
        (read_ns as f64 / want - 1.0).abs() < 0.01,
        "{read_ns} vs {want}"
    );
    // A write destaged from the cache shows SEEK then WRITE after its
    // completion was reported.
    let mut p = HddParams::sata_7200_2tb();
    p.write_cache = true;
    let mut hdd = HddModel::new(&p, 1).unwrap();
    let mut driver = Driver::new(&mut hdd);
    driver.submit(Op::Write, p.capacity_bytes / 2, 4 * KIB);
    driver.drain();
    let states: Vec<DeviceState> = driver.outcome.states.iter().map(|s| s.1).collect();
    assert_eq!(
        states,
        vec![DeviceState::Seek, DeviceState::Write, DeviceState::Idle]
    );
}

#[test]
fn write_cache_completes_writes_early_and_flush_waits_for_destage() {
    let mut p = HddParams::sata_7200_2tb();
    p.write_cache = true;
    let mut rng = TestRng::new(4);
    let blocks = (p.capacity_bytes - 4096) / 4096;
    // 20 random 4 KiB writes 10 µs apart, then a flush.
    let mut ios: Vec<_> = (0..20u64)
        .map(|i| (i * 10_000, Op::Write, rng.below(blocks) * 4096, 4096))
        .collect();
    ios.push((200_000, Op::Flush, 0, 0));
    let mut hdd = HddModel::new(&p, 1).unwrap();
    let out = open_loop(&mut hdd, &ios);
    // Each write: overhead 0.1 ms + 4096 B over 600 MB/s (6,827 ns); the
    // interface is free again long before the next one.
    for d in out.done.iter().filter(|d| d.io.op == Op::Write) {
        assert_eq!(d.latency_ns(), 100_000 + 6_827);
    }
    // The flush waits for 20 random media writes, each at least a write
    // settle plus a short seek.
    let flush = out.done.iter().find(|d| d.io.op == Op::Flush).unwrap();
    assert!(
        flush.latency_ns() > 20 * 1_800_000,
        "{}",
        flush.latency_ns()
    );
    assert_eq!(out.done.last().unwrap().io.op, Op::Flush);

    // With the cache off the same flush costs the overhead only.
    p.write_cache = false;
    let mut hdd = HddModel::new(&p, 1).unwrap();
    let out = open_loop(&mut hdd, &ios);
    let flush = out.done.iter().find(|d| d.io.op == Op::Flush).unwrap();
    assert_eq!(flush.latency_ns(), 100_000);
}

#[test]
fn full_write_cache_writes_through_and_keeps_destaging() {
    // A 64 KiB cache and a long burst of 4 KiB random writes: the first
    // 16 are cached, later ones alternate with destaging; every write
    // completes and the model ends idle and clean.
    let mut p = HddParams::sata_7200_2tb();
    p.write_cache = true;
    p.write_cache_bytes = 64 * 1024;
    let mut rng = TestRng::new(8);
    let blocks = (p.capacity_bytes - 4096) / 4096;
    let mut hdd = HddModel::new(&p, 2).unwrap();
    let out = closed_loop(&mut hdd, 8, 2_000, || {
        (Op::Write, rng.below(blocks) * 4096, 4096)
    });
    let fast = out
        .done
        .iter()
        .filter(|d| d.latency_ns() == 100_000 + 6_827)
        .count();
    assert!(fast >= 16, "{fast}");
    assert!(fast < out.done.len(), "a full cache must write through");
}

#[test]
fn seeds_turn_the_platter_and_nothing_else() {
    let p = HddParams::sata_7200_2tb();
    let a = random_reads(&p, 4, 2_000, 21);
    let b = random_reads(&p, 4, 2_000, 21);
    assert_eq!(a.completions(), b.completions());
    let mut rng = TestRng::new(21);
    let blocks = (p.capacity_bytes - 4096) / 4096;
    let ios: Vec<_> = (0..500u64)
        .map(|i| (i * 20_000_000, Op::Read, rng.below(blocks) * 4096, 4096))
        .collect();
    let run = |seed| {
        let mut hdd = HddModel::new(&p, seed).unwrap();
        open_loop(&mut hdd, &ios).completions()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn bad_parameters_are_named_with_value_and_range() {
    let mut p = HddParams::sata_7200_2tb();
    p.average_seek_ns = 3_000_000;
    let err = p.validate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "key `average_seek_ns`: expected 6200000 ..= 9440000 (what the sqrt-then-linear seek \
         curve can fit with `track_to_track_seek_ns` = 800000 and `full_stroke_seek_ns` = \
         17000000), found 3000000"
    );
    let mut p = HddParams::sata_7200_2tb();
    p.rpm = 100;
    assert_eq!(
        HddModel::new(&p, 0).err().unwrap(),
        ParamError::new("rpm", 100, "3600 ..= 20000")
    );
    let mut p = HddParams::sata_7200_2tb();
    p.inner_rate_bytes_per_s = 300_000_000;
    let err = p.validate().unwrap_err();
    assert_eq!(err.key(), "inner_rate_bytes_per_s");
    assert_eq!(err.found, "300000000");
    assert!(err.expected.ends_with("..= 200000000"), "{err}");
    let mut p = HddParams::sata_7200_2tb();
    p.track_to_track_seek_ns = 20_000_000;
    assert_eq!(p.validate().unwrap_err().key(), "track_to_track_seek_ns");
    let mut p = HddParams::sata_7200_2tb();
    p.full_stroke_seek_ns = 0;
    let err = p.validate().unwrap_err();
    assert_eq!(
        (err.key().as_str(), err.found.as_str()),
        ("full_stroke_seek_ns", "0")
    );
    for name in HddParams::PRESETS {
        HddParams::preset(name).unwrap().validate().unwrap();
    }
}
