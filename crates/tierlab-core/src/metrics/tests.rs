//! Tests against hand-computed values and independent brute-force
//! computations (sorting for percentiles, interval unions for io_ticks).

use super::*;
use crate::device::DeviceState;
use crate::{NS_PER_MS, NS_PER_US};

fn config(devices: &[&str], tiers: &[&str], tenants: usize, interval_ns: u64) -> MetricsConfig {
    MetricsConfig {
        interval_ns,
        device_names: devices.iter().map(|s| s.to_string()).collect(),
        tier_names: tiers.iter().map(|s| s.to_string()).collect(),
        tenants,
        ..Default::default()
    }
}

fn recorder(devices: &[&str], interval_ns: u64) -> Recorder {
    Recorder::new(config(devices, &["t0"], 1, interval_ns)).unwrap()
}

/// A small deterministic generator (64-bit LCG, Knuth's constants), so the
/// tests need no RNG crate and replay identically.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------- histograms

#[test]
fn host_rates_divide_by_the_workload_window_device_rates_by_the_run() {
    // 1000 host IOs of 4 KiB, all done by 1 ms; one device busy from 0
    // to 1 s (a move after the workload). The run ends at 1 s.
    let mut rec = recorder(&["flash"], NS_PER_S);
    rec.device_submit(0, 0);
    for i in 1..=1000u64 {
        rec.host_io(0, i * NS_PER_US, Op::Read, 4096, 0, 0);
    }
    rec.device_complete(0, 0, NS_PER_S, Op::Read, 1 << 20);
    let m = rec.finish_after_workload(NS_PER_S, NS_PER_MS);
    assert_eq!((m.host_end_ns, m.host_duration_ns), (NS_PER_MS, NS_PER_MS));
    assert_eq!(m.background_tail_ns, NS_PER_S - NS_PER_MS);
    // 1000 IOs in 1 ms = 1,000,000 IO/s; 4,096,000 B in 1 ms = 4096 MB/s.
    assert_eq!(m.total.iops, Some(1_000_000.0));
    assert_eq!(m.total.mb_per_s, Some(4096.0));
    assert_eq!(m.tiers[0].io.iops, Some(1_000_000.0));
    // The device: 1 IO in the run's 1 s, busy all of it.
    assert_eq!(m.devices[0].io.iops, Some(1.0));
    assert_eq!(m.devices[0].util_percent, Some(100.0));
    // `finish` is the whole run for both.
    let mut rec = recorder(&[], NS_PER_S);
    rec.host_io(0, NS_PER_US, Op::Read, 4096, 0, 0);
    let m = rec.finish(NS_PER_S);
    assert_eq!((m.host_end_ns, m.background_tail_ns), (NS_PER_S, 0));
    assert_eq!(m.total.iops, Some(1.0));
}

#[test]
fn histogram_hand_computed_mean_and_percentiles() {
    // 1000 IOs with latencies 1, 2, ..., 1000 µs.
    let mut rec = recorder(&[], NS_PER_S);
    for i in 1..=1000u64 {
        rec.host_io(0, i * NS_PER_US, Op::Read, 4096, 0, 0);
    }
    let m = rec.finish(NS_PER_S);
    let t = &m.total;
    assert_eq!(t.ios, 1000);
    // Σ i for i = 1..1000 = 500,500 µs; / 1000 = 500.5 µs exactly.
    assert_eq!(t.mean_latency_us, Some(500.5));
    assert_eq!(t.min_latency_us, Some(1.0));
    assert_eq!(t.max_latency_us, Some(1000.0));
    // Nearest rank: p50 is the 500th value (500 µs), p90 the 900th, p99 the
    // 990th, p99.9 the 999th. Reported: the upper edge of the HDR bucket.
    // 500,000 ns lies in [2^18, 2^19) where buckets are 2^(18-10) = 256 ns
    // wide: bucket [1953·256, 1954·256) = [499,968, 500,224) → 500.223 µs.
    // 900,000 / 990,000 / 999,000 lie in [2^19, 2^20), 512 ns wide:
    // 1757·512 = 899,584 → 900,095; 1933·512 = 989,696 → 990,207;
    // 1951·512 = 998,912 → 999,423.
    assert_eq!(t.p50_latency_us, Some(500.223));
    assert_eq!(t.p90_latency_us, Some(900.095));
    assert_eq!(t.p99_latency_us, Some(990.207));
    assert_eq!(t.p999_latency_us, Some(999.423));
    assert_eq!(t.iops, Some(1000.0));
    // 4096 B × 1000 in 1 s = 4.096 MB/s.
    assert_eq!(t.mb_per_s, Some(4.096));
    assert_eq!(t.read_mb_per_s, Some(4.096));
    assert_eq!(t.write_mb_per_s, Some(0.0));
}

/// Values that hit every bucket boundary and a spread in between.
fn probe_values() -> Vec<u64> {
    let mut values: Vec<u64> = (0..5000).collect();
    for bit in 11..42 {
        let p = 1u64 << bit;
        values.extend([p - 1, p, p + 1, p + p / 3, p + p / 2 + 7]);
    }
    let mut rng = Lcg(11);
    values.extend((0..20_000).map(|_| rng.below(HISTOGRAM_HIGHEST_NS)));
    values.push(HISTOGRAM_HIGHEST_NS);
    values
}

fn reference_histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, HISTOGRAM_HIGHEST_NS, HISTOGRAM_SIGNIFICANT_DIGITS)
        .unwrap()
}

#[test]
fn bucket_layout_matches_the_hdrhistogram_crate() {
    let reference = reference_histogram();
    assert_eq!(histogram::COUNTS_LEN, reference.distinct_values());
    for v in probe_values() {
        let (low, high) = histogram::range_at(histogram::index_for(v));
        assert_eq!(
            (low, high),
            (
                reference.lowest_equivalent(v),
                reference.highest_equivalent(v)
            ),
            "value {v}"
        );
    }
}

#[test]
fn percentiles_and_cdf_match_the_hdrhistogram_crate() {
    let mut rng = Lcg(23);
    for n in [1u64, 3, 100, 1000, 12_345] {
        let mut ours = LatencyHistogram::new();
        let mut reference = reference_histogram();
        for _ in 0..n {
            // Log-spread latencies, 0 ns to 1 hour (beyond it the crate,
            // whose last bucket reaches 73 min, and we differ by design).
            let v = (rng.below(1 << 20) << rng.below(23)).min(HISTOGRAM_HIGHEST_NS);
            ours.record(v);
            reference.record(v).unwrap();
        }
        let max = ours.max_ns().unwrap();
        let expected_cdf: Vec<(u64, u64)> = {
            let mut cumulative = 0;
            reference
                .iter_recorded()
                .map(|b| {
                    cumulative += b.count_at_value();
                    (b.value_iterated_to().min(max), cumulative)
                })
                .collect()
        };
        assert_eq!(ours.cdf().collect::<Vec<_>>(), expected_cdf, "n={n}");
        // The crate takes rank ceil(q·n) in floating point; compare where
        // that equals our integer rank (it does for these q and n).
        let quantiles = [(1, 2), (9, 10), (99, 100), (999, 1000), (1, 1)];
        let got = ours.percentiles_ns(quantiles).unwrap();
        for ((num, den), p) in quantiles.into_iter().zip(got) {
            let q = num as f64 / den as f64;
            assert_eq!((q * n as f64).ceil() as u64, (n * num).div_ceil(den).max(1));
            assert_eq!(p, reference.value_at_quantile(q).min(max), "n={n} q={q}");
        }
    }
}

#[test]
fn clear_zeroes_only_what_was_used_and_reuses() {
    let mut h = LatencyHistogram::new();
    for v in [5, 70_000, 3_000_000] {
        h.record(v);
    }
    h.clear();
    assert_eq!(h.cdf().count(), 0);
    assert_eq!((h.count(), h.sum_ns(), h.max_ns()), (0, 0, None));
    h.record(9);
    assert_eq!(h.cdf().collect::<Vec<_>>(), [(9, 1)]);
}

#[test]
fn histogram_small_values_are_exact_and_capped_at_max() {
    let mut h = LatencyHistogram::new();
    for ns in [100, 200, 200, 3000] {
        h.record(ns);
    }
    // Below 2048 ns buckets are 1 ns wide. p90: rank ceil(3.6) = 4 → 3000,
    // whose bucket [3000, 3001] is capped at the exact max 3000.
    assert_eq!(
        h.percentiles_ns([(0, 1), (1, 4), (1, 2), (9, 10), (1, 1)]),
        Some([100, 100, 200, 3000, 3000])
    );
    let cdf: Vec<_> = h.cdf().collect();
    assert_eq!(cdf, vec![(100, 1), (200, 3), (3000, 4)]);
    assert_eq!(LatencyHistogram::new().percentiles_ns([(1, 2)]), None);
}

#[test]
fn percentiles_within_hdr_bound_of_exact_nearest_rank() {
    let mut rng = Lcg(7);
    let mut h = LatencyHistogram::new();
    let mut values = Vec::new();
    for _ in 0..20_000 {
        // Log-uniform from 1 ns to ~1 s, so every bucket size is exercised.
        let v = 1 + (rng.below(1 << 20) << rng.below(11)) + rng.below(1000);
        h.record(v);
        values.push(v);
    }
    values.sort_unstable();
    let n = values.len() as u64;
    let quantiles = [
        (1, 1000),
        (1, 2),
        (9, 10),
        (99, 100),
        (999, 1000),
        (9999, 10000),
    ];
    let got = h.percentiles_ns(quantiles).unwrap();
    for ((num, den), v) in quantiles.into_iter().zip(got) {
        let rank = (n * num).div_ceil(den).max(1);
        let exact = values[(rank - 1) as usize];
        assert!(v >= exact, "q={num}/{den}: {v} < exact {exact}");
        if exact < 2048 {
            assert_eq!(v, exact);
        } else {
            assert!(
                v - exact < exact / 1024 + 1,
                "q={num}/{den}: {v} vs {exact}"
            );
        }
    }
    // The mean is exact.
    let sum: u128 = values.iter().map(|&v| v as u128).sum();
    assert_eq!(h.sum_ns(), sum);
}

#[test]
fn interval_p99_buffer_and_histogram_paths_agree() {
    let mut rng = Lcg(3);
    let mut interval = histogram::IntervalLatency::default();
    // Sizes on both sides of the 4096-value buffer, reusing one accumulator.
    for n in [1u64, 2, 99, 100, 101, 1000, 4095, 4096, 4097, 10_000, 7] {
        let mut reference = LatencyHistogram::new();
        for _ in 0..n {
            let v = rng.below(1 << 22) >> rng.below(12);
            interval.record(v);
            reference.record(v);
        }
        for (num, den) in [(1, 2), (99, 100), (999, 1000), (1, 1)] {
            assert_eq!(
                interval.percentile_ns(num, den),
                reference.percentiles_ns([(num, den)]).map(|[p]| p),
                "n={n} q={num}/{den}"
            );
        }
        assert_eq!(interval.max_ns(), reference.max_ns());
        assert_eq!(interval.sum_ns(), reference.sum_ns());
        interval.clear();
        assert_eq!(interval.percentile_ns(99, 100), None);
    }
}

#[test]
fn over_range_latencies_are_counted_exactly() {
    let mut h = LatencyHistogram::new();
    h.record(2 * HISTOGRAM_HIGHEST_NS);
    h.record(5);
    assert_eq!(h.over_range(), 1);
    assert_eq!(h.max_ns(), Some(2 * HISTOGRAM_HIGHEST_NS));
    assert_eq!(h.sum_ns(), 2 * HISTOGRAM_HIGHEST_NS as u128 + 5);
}

#[test]
fn scopes_split_by_op_tier_tenant() {
    let mut rec = Recorder::new(config(&[], &["mem", "flash"], 2, NS_PER_S)).unwrap();
    rec.host_io(0, 10, Op::Read, 100, 0, 0);
    rec.host_io(0, 30, Op::Write, 200, 1, 1);
    rec.host_io(10, 30, Op::Read, 300, 1, 0);
    rec.host_io(20, 30, Op::Trim, 1000, 1, 1);
    rec.host_io(25, 30, Op::Flush, 0, 0, 1);
    let m = rec.finish(1000);
    assert_eq!(m.total.ios, 5);
    assert_eq!(
        (
            m.total.read_ios,
            m.total.write_ios,
            m.total.trim_ios,
            m.total.flush_ios
        ),
        (2, 1, 1, 1)
    );
    // Bytes are data bytes: reads + writes; trims are counted apart.
    assert_eq!(m.total.bytes, 600);
    assert_eq!(m.total.trim_bytes, 1000);
    // Latencies 10, 30, 20, 10, 5: mean 15 ns; reads (10, 20) mean 15 ns.
    assert_eq!(m.total.mean_latency_us, Some(0.015));
    assert_eq!(m.total.mean_read_latency_us, Some(0.015));
    assert_eq!(m.total.mean_write_latency_us, Some(0.03));
    let names: Vec<_> = m.ops.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["read", "write", "trim", "flush"]);
    assert_eq!(m.ops[0].io.ios, 2);
    assert_eq!(m.ops[2].io.mean_latency_us, Some(0.01));
    assert_eq!((m.tiers[0].name.as_str(), m.tiers[0].io.ios), ("mem", 2));
    assert_eq!((m.tiers[1].name.as_str(), m.tiers[1].io.ios), ("flash", 3));
    assert_eq!((m.tenants[0].name.as_str(), m.tenants[0].io.ios), ("0", 2));
    assert_eq!(m.tenants[1].io.ios, 3);
    assert_eq!(m.tenants[1].io.max_latency_us, Some(0.03));
    // 5 IOs in 1000 ns = 5,000,000 IO/s.
    assert_eq!(m.total.iops, Some(5_000_000.0));
    assert_eq!(m.contract_violations, 0);
    let scopes: Vec<_> = m.histograms().map(|(s, _)| s.to_string()).collect();
    assert_eq!(
        scopes,
        [
            "all",
            "op:read",
            "op:write",
            "op:trim",
            "op:flush",
            "tier:mem",
            "tier:flash",
            "tenant:0",
            "tenant:1"
        ]
    );
}

// ------------------------------------------------------------- disk stats

#[test]
fn two_overlapping_ios_util_and_queue_size() {
    // IOs [0, 10) and [5, 20) on a 20 ns window.
    let mut rec = recorder(&["d"], NS_PER_S);
    rec.device_submit(0, 0);
    rec.device_submit(0, 5);
    rec.device_complete(0, 0, 10, Op::Read, 512);
    rec.device_complete(0, 5, 20, Op::Read, 512);
    let m = rec.finish(20);
    let d = &m.devices[0];
    assert_eq!(d.io_ticks_ns, 20);
    // 10 + 15 ns in flight = 25 ns, the integral of [1, 2, 1] over
    // [0,5), [5,10), [10,20).
    assert_eq!(d.time_in_queue_ns, 25);
    assert_eq!(d.util_percent, Some(100.0));
    assert_eq!(d.avg_queue_size, Some(1.25));
    assert_eq!(d.io.ios, 2);
    // 12.5 ns, rounded half up to whole ns.
    assert_eq!(d.io.mean_latency_us, Some(0.013));
    assert_eq!(d.in_flight_at_end, 0);
}

#[test]
fn a_gap_lowers_util_exactly() {
    // [0, 10) and [15, 20): busy 15 of 20 ns.
    let mut rec = recorder(&["d"], NS_PER_S);
    rec.device_submit(0, 0);
    rec.device_complete(0, 0, 10, Op::Write, 512);
    rec.device_submit(0, 15);
    rec.device_complete(0, 15, 20, Op::Write, 512);
    let m = rec.finish(20);
    let d = &m.devices[0];
    assert_eq!((d.io_ticks_ns, d.time_in_queue_ns), (15, 15));
    assert_eq!(d.util_percent, Some(75.0));
    assert_eq!(d.avg_queue_size, Some(0.75));
}

#[test]
fn one_io_always_outstanding_is_100_percent_util() {
    let mut rec = recorder(&["hdd"], 100 * NS_PER_US);
    let service_ns = 7_919; // a prime, so IOs straddle interval boundaries
    let mut t = 0;
    rec.device_submit(0, t);
    while t + service_ns <= 10 * NS_PER_MS {
        rec.device_complete(0, t, t + service_ns, Op::Read, 4096);
        t += service_ns;
        rec.device_submit(0, t);
    }
    let m = rec.finish(t);
    let d = &m.devices[0];
    assert_eq!(d.io_ticks_ns, t);
    assert_eq!(d.time_in_queue_ns, t);
    assert_eq!(d.util_percent, Some(100.0));
    assert_eq!(d.avg_queue_size, Some(1.0));
    // And in every interval, like iostat -x at each sample.
    for row in m.device_series(0) {
        assert!(row.io_ticks_ns > 0);
    }
    for (host, dev) in m.host_series().iter().zip(m.device_series(0)) {
        assert_eq!(dev.io_ticks_ns, host.end_ns - host.start_ns);
        assert_eq!(dev.time_in_queue_ns, host.end_ns - host.start_ns);
    }
}

#[test]
fn constant_queue_depth_four() {
    let mut rec = recorder(&["ssd"], NS_PER_MS);
    let mut outstanding: Vec<u64> = Vec::new();
    for i in 0..4 {
        rec.device_submit(0, i);
        outstanding.push(i);
    }
    // Each completion is replaced at once: 4 in flight from t = 3 on.
    for k in 0..1000u64 {
        let submit = outstanding.remove(0);
        let done = 100 + k * 25;
        rec.device_complete(0, submit, done, Op::Read, 4096);
        rec.device_submit(0, done);
        outstanding.push(done);
    }
    let end = 100 + 999 * 25;
    let m = rec.finish(end);
    let d = &m.devices[0];
    // In flight: 1 on [0,1), 2 on [1,2), 3 on [2,3), 4 on [3,end).
    assert_eq!(d.time_in_queue_ns, 1 + 2 + 3 + 4 * (end - 3));
    assert_eq!(d.io_ticks_ns, end);
    assert_eq!(d.in_flight_at_end, 4);
}

#[test]
fn in_flight_at_end_counts_up_to_the_end() {
    let mut rec = recorder(&["d"], NS_PER_S);
    rec.device_submit(0, 10);
    let m = rec.finish(50);
    let d = &m.devices[0];
    assert_eq!(
        (d.io_ticks_ns, d.time_in_queue_ns, d.in_flight_at_end),
        (40, 40, 1)
    );
    assert_eq!(d.io.ios, 0);
    assert_eq!(d.io.mean_latency_us, None);
    assert_eq!(d.util_percent, Some(80.0));
}

// ---------------------------------------------------------------- series

#[test]
fn boundary_events_belong_to_the_interval_ending_there() {
    let mut rec = recorder(&[], 1000);
    rec.host_io(0, 0, Op::Read, 1, 0, 0); // at start: interval 0
    rec.host_io(0, 1000, Op::Read, 1, 0, 0); // at the boundary: interval 0
    rec.host_io(0, 1001, Op::Read, 1, 0, 0); // interval 1
    rec.host_io(0, 3500, Op::Read, 1, 0, 0); // interval 3 (2 is empty)
    let m = rec.finish(3500);
    let rows: Vec<_> = m
        .host_series()
        .iter()
        .map(|r| (r.start_ns, r.end_ns, r.ios))
        .collect();
    assert_eq!(
        rows,
        [
            (0, 1000, 2),
            (1000, 2000, 1),
            (2000, 3000, 0),
            (3000, 3500, 1)
        ]
    );
    assert_eq!(m.intervals, 4);
    assert_eq!(m.host_series()[2].p99_latency_ns, None);
}

/// Brute force, independent of the recorder: the length of the union of
/// `ios` clipped to [from, to), and the sum of their clipped lengths.
fn busy_and_queue_time(ios: &[(u64, u64)], from: u64, to: u64) -> (u64, u64) {
    let mut clipped: Vec<(u64, u64)> = ios
        .iter()
        .map(|&(s, e)| (s.max(from), e.min(to)))
        .filter(|&(s, e)| s < e)
        .collect();
    let queue = clipped.iter().map(|&(s, e)| e - s).sum();
    clipped.sort_unstable();
    let mut busy = 0;
    let mut cover_end = 0;
    for (s, e) in clipped {
        let s = s.max(cover_end);
        if e > s {
            busy += e - s;
            cover_end = e;
        }
    }
    (busy, queue)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    // At equal times completions sort before submissions (either is valid).
    Done { dev: usize, submit: u64, size: u32 },
    Submit { dev: usize },
}

/// A random two-device schedule with overlapping IOs and idle gaps, fed to
/// a recorder in time order. Returns it with the IO intervals per device
/// and the host IOs as (arrival, done, size).
#[allow(clippy::type_complexity)]
fn random_run(
    seed: u64,
    interval_ns: u64,
    timeline: bool,
) -> (Recorder, Vec<Vec<(u64, u64)>>, Vec<(u64, u64, u32)>, u64) {
    let mut cfg = config(&["nvme0", "hdd.1"], &["fast", "slow"], 3, interval_ns);
    cfg.timeline = timeline;
    random_run_with(seed, cfg)
}

/// `random_run` with a given config (two devices, two tiers, 3 tenants).
#[allow(clippy::type_complexity)]
fn random_run_with(
    seed: u64,
    cfg: MetricsConfig,
) -> (Recorder, Vec<Vec<(u64, u64)>>, Vec<(u64, u64, u32)>, u64) {
    let mut rng = Lcg(seed);
    let mut rec = Recorder::new(cfg).unwrap();
    let mut ios: Vec<Vec<(u64, u64)>> = vec![Vec::new(); 2];
    let mut events: Vec<(u64, Ev)> = Vec::new();
    let mut host = Vec::new();
    for (dev, dev_ios) in ios.iter_mut().enumerate() {
        let mut t = rng.below(50);
        for _ in 0..400 {
            let service = 1 + rng.below(if dev == 0 { 300 } else { 3000 });
            let size = 512 * (1 + rng.below(16)) as u32;
            dev_ios.push((t, t + service));
            events.push((t, Ev::Submit { dev }));
            events.push((
                t + service,
                Ev::Done {
                    dev,
                    submit: t,
                    size,
                },
            ));
            // Sometimes overlap, sometimes leave a gap.
            t += rng.below(2 * service);
        }
    }
    events.sort_unstable();
    let mut end = 0;
    for (i, &(t, ev)) in events.iter().enumerate() {
        match ev {
            Ev::Submit { dev } => {
                rec.device_submit(dev, t);
                rec.device_state(
                    dev,
                    t,
                    if dev == 0 {
                        DeviceState::Read
                    } else {
                        DeviceState::Seek
                    },
                );
            }
            Ev::Done { dev, submit, size } => {
                let op = if size % 1024 == 0 {
                    Op::Write
                } else {
                    Op::Read
                };
                rec.device_complete(dev, submit, t, op, size);
                if rec.device_in_flight(dev) == Some(0) {
                    rec.device_state(dev, t, DeviceState::Idle);
                }
                rec.host_io(
                    submit.saturating_sub(3),
                    t,
                    op,
                    size,
                    dev as u16,
                    (i % 3) as u32,
                );
                host.push((submit.saturating_sub(3), t, size));
            }
        }
        end = t;
    }
    (rec, ios, host, end + 17)
}

#[test]
fn series_match_brute_force_and_sum_to_totals() {
    let interval_ns = 1_000;
    let (rec, ios, host, end) = random_run(42, interval_ns, false);
    let m = rec.finish(end);
    assert_eq!(m.contract_violations, 0);
    let rows = m.host_series();
    assert_eq!(rows.len() as u64, end.div_ceil(interval_ns));
    for (dev, dev_ios) in ios.iter().enumerate() {
        let series: Vec<_> = m.device_series(dev).collect();
        assert_eq!(series.len(), rows.len());
        for (row, d) in rows.iter().zip(&series) {
            let (busy, queue) = busy_and_queue_time(dev_ios, row.start_ns, row.end_ns);
            assert_eq!(d.io_ticks_ns, busy, "dev {dev} interval {}", row.start_ns);
            assert_eq!(
                d.time_in_queue_ns, queue,
                "dev {dev} interval {}",
                row.start_ns
            );
        }
        let (busy, queue) = busy_and_queue_time(dev_ios, 0, end);
        let summary = &m.devices[dev];
        assert_eq!(summary.io_ticks_ns, busy);
        assert_eq!(summary.time_in_queue_ns, queue);
        assert_eq!(series.iter().map(|d| d.io_ticks_ns).sum::<u64>(), busy);
        assert_eq!(
            series.iter().map(|d| d.time_in_queue_ns).sum::<u64>(),
            queue
        );
        assert_eq!(series.iter().map(|d| d.ios).sum::<u64>(), summary.io.ios);
        assert_eq!(
            series.iter().map(|d| d.data_bytes).sum::<u64>(),
            summary.io.bytes
        );
        let latency_sum: u64 = dev_ios.iter().map(|(s, e)| e - s).sum();
        assert_eq!(
            series.iter().map(|d| d.latency_sum_ns).sum::<u64>(),
            latency_sum
        );
    }
    // Host rows: IOs completed in (start, end], interval 0 including 0.
    for row in rows {
        let in_row = |done: u64| {
            (done > row.start_ns || (row.start_ns == 0 && done == 0)) && done <= row.end_ns
        };
        let expect: Vec<_> = host.iter().filter(|h| in_row(h.1)).collect();
        assert_eq!(row.ios, expect.len() as u64);
        assert_eq!(
            row.latency_sum_ns,
            expect.iter().map(|h| h.1 - h.0).sum::<u64>()
        );
        assert_eq!(row.max_latency_ns, expect.iter().map(|h| h.1 - h.0).max());
        // p99: the HDR bucket edge of the exact nearest-rank value.
        let mut latencies: Vec<u64> = expect.iter().map(|h| h.1 - h.0).collect();
        latencies.sort_unstable();
        let exact = (!latencies.is_empty())
            .then(|| latencies[(latencies.len() * 99).div_ceil(100).max(1) - 1]);
        match (row.p99_latency_ns, exact) {
            (Some(p), Some(x)) => assert!(p >= x && p - x <= x / 1024, "{p} vs {x}"),
            (p, x) => assert_eq!(p, x),
        }
    }
    assert_eq!(rows.iter().map(|r| r.ios).sum::<u64>(), m.total.ios);
    assert_eq!(
        rows.iter().map(|r| r.data_bytes).sum::<u64>(),
        m.total.bytes
    );
    assert_eq!(
        rows.iter().map(|r| r.latency_sum_ns as u128).sum::<u128>(),
        m.histogram("all").unwrap().sum_ns()
    );
}

#[test]
fn series_csv_hand_computed() {
    let mut rec = recorder(&["d"], 10);
    rec.device_submit(0, 0);
    rec.device_submit(0, 5);
    rec.device_complete(0, 0, 10, Op::Read, 1000);
    rec.host_io(0, 10, Op::Read, 1000, 0, 0);
    rec.device_complete(0, 5, 20, Op::Write, 3000);
    rec.host_io(2, 20, Op::Write, 3000, 0, 0);
    let m = rec.finish(25);
    let mut out = Vec::new();
    m.write_series_csv(&mut out).unwrap();
    // (0,10]: host IO of 10 ns; device busy 10, in-flight integral 5 + 2·5 = 15.
    // (10,20]: host IO 18 ns; device busy 10, integral 10.
    // (20,25]: nothing; 1 IO in 10 ns = 1e8 IO/s; 1000 B in 10 ns = 100,000 MB/s.
    let expected = "\
start_ns,end_ns,scope,ios,iops,bytes,mb_per_s,mean_latency_us,p99_latency_us,max_latency_us,util_percent,avg_queue_size,io_ticks_ns,time_in_queue_ns
0,10,all,1,100000000.000,1000,100000.000,0.010,0.010,0.010,,,,
0,10,device:d,1,100000000.000,1000,100000.000,0.010,,,100.000,1.500,10,15
10,20,all,1,100000000.000,3000,300000.000,0.018,0.018,0.018,,,,
10,20,device:d,1,100000000.000,3000,300000.000,0.015,,,100.000,1.000,10,10
20,25,all,0,0.000,0,0.000,,,,,,,
20,25,device:d,0,0.000,0,0.000,,,,0.000,0.000,0,0
";
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn cdf_csv_hand_computed() {
    let mut rec = recorder(&[], NS_PER_S);
    for (arrival, done) in [(0, 100), (0, 200), (100, 300), (0, 3000)] {
        rec.host_io(arrival, done, Op::Read, 4096, 0, 0);
    }
    let m = rec.finish(NS_PER_S);
    let mut out = Vec::new();
    m.write_cdf_csv(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let expected = "\
scope,latency_us,cumulative_fraction
all,0.100,0.250000000
all,0.200,0.750000000
all,3.000,1.000000000
op:read,0.100,0.250000000
op:read,0.200,0.750000000
op:read,3.000,1.000000000
tier:t0,0.100,0.250000000
tier:t0,0.200,0.750000000
tier:t0,3.000,1.000000000
tenant:0,0.100,0.250000000
tenant:0,0.200,0.750000000
tenant:0,3.000,1.000000000
";
    assert_eq!(text, expected);
}

#[test]
fn series_stop_at_max_intervals_and_gaps_do_not_hang() {
    let mut cfg = config(&["d"], &["t"], 1, 10);
    cfg.max_intervals = 3;
    let mut rec = Recorder::new(cfg).unwrap();
    rec.device_submit(0, 1);
    rec.device_complete(0, 1, 45, Op::Read, 1);
    rec.host_io(1, 45, Op::Read, 1, 0, 0);
    // Far in the future: must not walk 10^17 intervals.
    rec.host_io(0, 1_000_000_000_000_000_000, Op::Read, 1, 0, 0);
    let m = rec.finish(1_000_000_000_000_000_001);
    assert!(m.series_truncated);
    assert_eq!(m.intervals, 3);
    assert_eq!(m.total.ios, 2);
    assert_eq!(m.devices[0].io_ticks_ns, 44);
}

// --------------------------------------------------------------- timeline

/// A minimal VCD reader, written from IEEE 1364 §18.2, independent of the
/// writer: returns (timescale, [(id, width, reference)], [(time, id, bits)]).
#[allow(clippy::type_complexity)]
fn parse_vcd(
    text: &str,
) -> (
    String,
    Vec<(String, u32, String)>,
    Vec<(u64, String, String)>,
) {
    let mut tokens = text.split_whitespace().peekable();
    let mut timescale = String::new();
    let mut vars = Vec::new();
    let mut scope_depth = 0;
    // Declarations: `$keyword ... $end`.
    loop {
        let keyword = tokens.next().expect("header ends with $enddefinitions");
        let body: Vec<&str> = tokens.by_ref().take_while(|t| *t != "$end").collect();
        match keyword {
            "$timescale" => timescale = body.join(" "),
            "$scope" => scope_depth += 1,
            "$upscope" => scope_depth -= 1,
            "$var" => {
                assert_eq!(body.len(), 4, "$var type size id reference: {body:?}");
                assert_eq!(body[0], "wire");
                assert_eq!(scope_depth, 1);
                vars.push((
                    body[2].to_string(),
                    body[1].parse().unwrap(),
                    body[3].to_string(),
                ));
            }
            "$enddefinitions" => break,
            "$version" | "$comment" | "$date" => {}
            other => panic!("unexpected declaration {other}"),
        }
    }
    assert_eq!(scope_depth, 0);
    let mut changes = Vec::new();
    let mut time = None;
    while let Some(token) = tokens.next() {
        if let Some(t) = token.strip_prefix('#') {
            let t: u64 = t.parse().unwrap();
            if let Some(previous) = time {
                assert!(t > previous, "time goes {previous} -> {t}");
            }
            time = Some(t);
        } else if token == "$dumpvars" || token == "$end" {
        } else if let Some(bits) = token.strip_prefix('b') {
            let id = tokens.next().unwrap();
            let var = vars.iter().find(|v| v.0 == id).expect("declared id");
            assert_eq!(bits.len() as u32, var.1);
            assert!(bits.chars().all(|c| matches!(c, '0' | '1' | 'x')));
            changes.push((
                time.expect("a time before values"),
                id.to_string(),
                bits.to_string(),
            ));
        } else {
            panic!("unexpected token {token}");
        }
    }
    (timescale, vars, changes)
}

#[test]
fn vcd_structure_values_and_collapsing() {
    let mut cfg = config(&["nvme0", "raid/m.1"], &["t"], 1, NS_PER_S);
    cfg.timeline = true;
    let mut rec = Recorder::new(cfg).unwrap();
    rec.device_state(1, 0, DeviceState::Failed); // initial value
    rec.device_state(0, 10, DeviceState::Read);
    rec.device_state(0, 10, DeviceState::Read); // not a change
    rec.device_state(0, 25, DeviceState::Write);
    rec.device_state(0, 25, DeviceState::Gc); // same instant: GC wins
    rec.device_state(1, 25, DeviceState::Seek);
    rec.device_state(0, 40, DeviceState::Idle);
    rec.device_state(0, 40, DeviceState::Gc); // back where it was: no change at 40
    rec.device_state(1, 40, DeviceState::Idle);
    let m = rec.finish(100);
    assert_eq!(m.timeline().unwrap().len(), 5);
    let mut out = Vec::new();
    m.write_vcd(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let (timescale, vars, changes) = parse_vcd(&text);
    assert_eq!(timescale, "1 ns");
    assert_eq!(
        vars,
        [
            ("!".to_string(), 3, "nvme0".to_string()),
            ("\"".to_string(), 3, "raid_m_1".to_string())
        ]
    );
    let expect = [
        (0, "!", "000"),
        (0, "\"", "110"),
        (10, "!", "001"),
        (25, "!", "101"),
        (25, "\"", "011"),
        (40, "\"", "000"),
    ];
    let got: Vec<_> = changes
        .iter()
        .map(|(t, id, b)| (*t, id.as_str(), b.as_str()))
        .collect();
    assert_eq!(got, expect);
    assert!(text.contains("0=IDLE 1=READ 2=WRITE 3=SEEK 4=ERASE 5=GC 6=FAILED"));
    assert!(text.trim_end().ends_with("#100"), "end marker");
}

#[test]
fn vcd_truncated_timeline_goes_unknown() {
    let mut cfg = config(&["d"], &["t"], 1, NS_PER_S);
    cfg.timeline = true;
    cfg.max_timeline_changes = 2;
    let mut rec = Recorder::new(cfg).unwrap();
    for (t, s) in [
        (1, DeviceState::Read),
        (2, DeviceState::Idle),
        (3, DeviceState::Write),
        (4, DeviceState::Idle),
    ] {
        rec.device_state(0, t, s);
    }
    let m = rec.finish(10);
    assert_eq!(m.timeline_truncated_at_ns, Some(3));
    let mut out = Vec::new();
    m.write_vcd(&mut out).unwrap();
    let (_, _, changes) = parse_vcd(&String::from_utf8(out).unwrap());
    let got: Vec<_> = changes.iter().map(|(t, _, b)| (*t, b.as_str())).collect();
    assert_eq!(got, [(0, "000"), (1, "001"), (2, "000"), (3, "xxx")]);
}

#[test]
fn back_to_back_ios_leave_no_timeline_entries() {
    // At each instant both devices finish an IO (IDLE) and start the next
    // (READ): no visible change, so nothing may accumulate.
    let mut cfg = config(&["a", "b"], &["t"], 1, NS_PER_S);
    cfg.timeline = true;
    let mut rec = Recorder::new(cfg).unwrap();
    rec.device_state(0, 0, DeviceState::Read);
    rec.device_state(1, 0, DeviceState::Read);
    for t in 1..1000 {
        rec.device_state(0, t, DeviceState::Idle);
        rec.device_state(1, t, DeviceState::Idle);
        rec.device_state(0, t, DeviceState::Read);
        rec.device_state(1, t, DeviceState::Read);
    }
    rec.device_state(1, 1000, DeviceState::Idle);
    let m = rec.finish(1000);
    let got: Vec<_> = m
        .timeline()
        .unwrap()
        .iter()
        .map(|c| (c.time_ns, c.device, c.state))
        .collect();
    assert_eq!(
        got,
        [
            (0, 0, DeviceState::Read),
            (0, 1, DeviceState::Read),
            (1000, 1, DeviceState::Idle)
        ]
    );
}

#[test]
fn vcd_matches_brute_force_final_state_per_instant() {
    // Random state calls for 3 devices, several per instant; expected VCD
    // changes: per instant, each device's last state, if it differs from
    // what was last shown.
    let mut rng = Lcg(5);
    let mut cfg = config(&["a", "b", "c"], &["t"], 1, 50);
    cfg.timeline = true;
    let mut rec = Recorder::new(cfg).unwrap();
    let mut calls = Vec::new();
    let mut t = 0;
    for _ in 0..5000 {
        t += rng.below(3);
        let dev = rng.below(3) as usize;
        let state = DeviceState::ALL[rng.below(3) as usize];
        rec.device_state(dev, t, state);
        calls.push((t, dev, state));
    }
    let m = rec.finish(t + 1);
    let mut shown = [DeviceState::Idle; 3];
    let mut expect = Vec::new();
    let mut i = 0;
    while i < calls.len() {
        let now = calls[i].0;
        let mut last: [Option<DeviceState>; 3] = [None; 3];
        while i < calls.len() && calls[i].0 == now {
            last[calls[i].1] = Some(calls[i].2);
            i += 1;
        }
        for dev in 0..3 {
            if let Some(state) = last[dev].filter(|&s| s != shown[dev]) {
                shown[dev] = state;
                expect.push((now, dev, state));
            }
        }
    }
    // The kept timeline holds exactly the visible changes...
    let mut kept: Vec<_> = m
        .timeline()
        .unwrap()
        .iter()
        .map(|c| (c.time_ns, c.device as usize, c.state))
        .collect();
    kept.sort_unstable_by_key(|&(t, dev, _)| (t, dev));
    assert_eq!(kept, expect);
    // ...and the VCD shows them (changes at time 0 are initial values).
    let mut out = Vec::new();
    m.write_vcd(&mut out).unwrap();
    let (_, vars, changes) = parse_vcd(&String::from_utf8(out).unwrap());
    let code = |s: DeviceState| format!("{:03b}", s as u8);
    let got: Vec<_> = changes
        .iter()
        .filter(|c| c.0 > 0)
        .map(|(t, id, bits)| {
            (
                *t,
                vars.iter().position(|v| &v.0 == id).unwrap(),
                bits.clone(),
            )
        })
        .collect();
    let want: Vec<_> = expect
        .iter()
        .filter(|c| c.0 > 0)
        .map(|&(t, dev, s)| (t, dev, code(s)))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn vcd_without_timeline_is_an_error() {
    let m = recorder(&["d"], NS_PER_S).finish(1);
    let err = m.write_vcd(Vec::new()).unwrap_err();
    assert!(err.to_string().contains("MetricsConfig::timeline"));
    // and device_state is then a no-op
    let mut rec = recorder(&["d"], NS_PER_S);
    rec.device_state(0, 5, DeviceState::Read);
    assert_eq!(rec.finish(5).timeline(), None);
}

#[test]
fn vcd_identifiers_are_unique_beyond_94_devices() {
    let ids: Vec<String> = (0..94 * 95 + 10)
        .map(super::export::vcd_identifier)
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len());
    assert_eq!(ids[0], "!");
    assert_eq!(ids[93], "~");
    assert_eq!(ids[94], "!!");
}

// ---------------------------------------------- determinism, files, JSON

fn all_outputs(seed: u64) -> Vec<Vec<u8>> {
    let (rec, _, _, end) = random_run(seed, 777, true);
    let m = rec.finish(end);
    let mut outs = vec![Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    m.write_summary_json(&mut outs[0]).unwrap();
    m.write_series_csv(&mut outs[1]).unwrap();
    m.write_cdf_csv(&mut outs[2]).unwrap();
    m.write_vcd(&mut outs[3]).unwrap();
    outs
}

#[test]
fn same_inputs_give_byte_identical_outputs() {
    let a = all_outputs(9);
    let b = all_outputs(9);
    assert_eq!(a, b);
    assert_ne!(a, all_outputs(10));
    for out in &a {
        assert!(out.len() > 100);
    }
}

#[test]
fn write_files_and_summary_json_keys() {
    let (rec, _, _, end) = random_run(3, 1000, true);
    let m = rec.finish(end);
    let dir = tempfile::tempdir().unwrap();
    m.write_files(dir.path()).unwrap();
    for name in [
        "summary.json",
        "series.csv",
        "latency_cdf.csv",
        "timeline.vcd",
    ] {
        assert!(
            dir.path().join(name).metadata().unwrap().len() > 0,
            "{name}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    for key in [
        "ios",
        "iops",
        "mean_latency_us",
        "p99_latency_us",
        "max_latency_us",
        "mb_per_s",
        "duration_ns",
    ] {
        assert!(json.get(key).is_some(), "{key}");
    }
    assert_eq!(json["ios"], m.total.ios);
    let dev = &json["devices"][1];
    assert_eq!(dev["name"], "hdd.1");
    for key in [
        "ios",
        "iops",
        "mean_latency_us",
        "p99_latency_us",
        "util_percent",
        "avg_queue_size",
        "bytes",
    ] {
        assert!(dev.get(key).is_some(), "device {key}");
    }
    assert_eq!(json["tenants"].as_array().unwrap().len(), 3);
    assert_eq!(json["contract_violations"], 0);
    // The VCD parses.
    let vcd = std::fs::read_to_string(dir.path().join("timeline.vcd")).unwrap();
    let (_, vars, changes) = parse_vcd(&vcd);
    assert_eq!(vars.len(), 2);
    assert!(changes.len() > 100);
}

/// Writes a sample run's files into a temp dir and checks the VCD. With
/// TIERLAB_METRICS_SAMPLE_DIR set, also writes them there, for external
/// validators (vcdvcd, pyvcd, GTKWave; see docs/metrics.md).
#[test]
fn sample_files_for_external_validators() {
    let (rec, _, _, end) = random_run(11, 1000, true);
    let m = rec.finish(end);
    let dir = tempfile::tempdir().unwrap();
    m.write_files(dir.path()).unwrap();
    let vcd = std::fs::read_to_string(dir.path().join("timeline.vcd")).unwrap();
    let (timescale, vars, changes) = parse_vcd(&vcd);
    assert_eq!(timescale, "1 ns");
    let refs: Vec<_> = vars.iter().map(|v| v.2.as_str()).collect();
    assert_eq!(refs, ["nvme0", "hdd_1"]);
    assert!(
        changes
            .iter()
            .all(|c| c.2 == "000" || c.2 == "001" || c.2 == "011")
    );
    // The same run with a timeline cut after 50 changes: signals go `x`.
    let mut cfg = config(&["nvme0", "hdd.1"], &["fast", "slow"], 3, 1000);
    cfg.timeline = true;
    cfg.max_timeline_changes = 50;
    let (rec, _, _, _) = random_run_with(11, cfg);
    let truncated = rec.finish(end);
    assert_eq!(truncated.timeline_changes, 50);
    let mut truncated_vcd = Vec::new();
    truncated.write_vcd(&mut truncated_vcd).unwrap();
    let (_, _, changes) = parse_vcd(std::str::from_utf8(&truncated_vcd).unwrap());
    assert_eq!(changes.iter().filter(|c| c.2 == "xxx").count(), 2);
    if let Some(out) = std::env::var_os("TIERLAB_METRICS_SAMPLE_DIR") {
        let out = std::path::PathBuf::from(out);
        std::fs::create_dir_all(&out).unwrap();
        m.write_files(&out).unwrap();
        std::fs::write(out.join("timeline_truncated.vcd"), truncated_vcd).unwrap();
    }
}

// ------------------------------------------------- config and contract

#[test]
fn bad_config_names_key_value_and_what_is_allowed() {
    let err = Recorder::new(MetricsConfig {
        interval_ns: 0,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(err.key(), "interval_ns");
    let err = Recorder::new(config(&["ok", "a b"], &[], 1, 1)).unwrap_err();
    assert_eq!(
        (err.key().as_str(), err.found.as_str()),
        ("device_names[1]", "\"a b\"")
    );
    assert!(err.to_string().contains("ASCII letters"), "{err}");
    let err = Recorder::new(config(&["x", "x"], &[], 1, 1)).unwrap_err();
    assert_eq!(err.expected, "names must be unique");
    let err = Recorder::new(config(&[], &["t,1"], 1, 1)).unwrap_err();
    assert_eq!(err.key(), "tier_names[0]");
    let err = Recorder::new(config(&[], &[], MAX_SCOPES + 1, 1)).unwrap_err();
    assert_eq!(err.key(), "tenants");
}

#[test]
fn contract_violations_are_counted_not_fatal() {
    let mut rec = recorder(&["d"], 10);
    rec.host_io(0, 50, Op::Read, 1, 0, 0);
    rec.host_io(0, 40, Op::Read, 1, 0, 0); // time goes back: 1
    rec.host_io(60, 55, Op::Read, 1, 0, 0); // done before arrival: 1
    rec.host_io(0, 60, Op::Read, 1, 9, 0); // unknown tier: 1
    rec.host_io(0, 60, Op::Read, 1, 0, 9); // unknown tenant: 1
    rec.device_complete(0, 0, 60, Op::Read, 1); // nothing in flight: 1
    rec.device_submit(7, 60); // unknown device: 1
    let m = rec.finish(30); // before the last event: 1
    assert_eq!(m.contract_violations, 7);
    assert_eq!(m.end_ns, 60);
    assert_eq!(m.total.ios, 5);
    // The late IO is accounted in the current interval, with its own latency.
    assert_eq!(m.total.max_latency_us, Some(0.06));
}

// ------------------------------------------------------------------ cost

/// Not a test: `cargo test --release -p tierlab-core --lib -- --ignored --nocapture recorder_cost`
/// prints the cost of recording one IO: a host IO alone; with one device
/// submit + complete; with the state timeline too; and with 100 µs
/// intervals (about one IO per interval, the worst case for the per-interval
/// p99). Simulated IOs are back to back, 2 to 202 µs each.
#[test]
#[ignore]
fn recorder_cost() {
    use std::time::Instant;
    let n: u64 = 10_000_000;
    let cases = [
        ("host_io only, 1 s intervals", false, false, NS_PER_S),
        (
            "host_io + device submit/complete, 1 s intervals",
            true,
            false,
            NS_PER_S,
        ),
        ("... + device_state timeline", true, true, NS_PER_S),
        (
            "host_io + device, 100 us intervals",
            true,
            false,
            100 * NS_PER_US,
        ),
    ];
    for (label, device, timeline, interval_ns) in cases {
        let mut cfg = config(&["mem", "nvme"], &["mem", "nvme"], 4, interval_ns);
        cfg.timeline = timeline;
        cfg.max_timeline_changes = usize::MAX;
        cfg.max_intervals = usize::MAX;
        let mut rec = Recorder::new(cfg).unwrap();
        let mut rng = Lcg(1);
        let started = Instant::now();
        let mut t = 0u64;
        for i in 0..n {
            let dev = (i & 1) as usize;
            let latency = 2_000 + rng.below(200_000);
            if device {
                rec.device_submit(dev, t);
                rec.device_state(dev, t, DeviceState::Read);
                rec.device_complete(dev, t, t + latency, Op::Read, 4096);
                rec.device_state(dev, t + latency, DeviceState::Idle);
            }
            rec.host_io(t, t + latency, Op::Read, 4096, dev as u16, (i & 3) as u32);
            t += latency;
        }
        let elapsed = started.elapsed();
        let m = rec.finish(t);
        assert_eq!(m.total.ios, n);
        println!(
            "{label}: {:.1} ns per IO ({n} IOs, {} intervals, {:.2} s)",
            elapsed.as_nanos() as f64 / n as f64,
            m.intervals,
            elapsed.as_secs_f64()
        );
    }
}
