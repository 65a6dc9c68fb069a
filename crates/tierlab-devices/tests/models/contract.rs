//! The `DeviceModel` contract, on every model and preset, with a mixed
//! workload (reads, writes, trims, flushes; sizes 512 B–256 KiB; bursts
//! and gaps). The driver checks ordering, honest `next_event_ns` and
//! `in_flight` on every step; here we add minimum service times,
//! determinism, and independence from how the executor calls the model.

use tierlab_core::device::DeviceState;
use tierlab_core::{Op, TimeNs};
use tierlab_devices::{
    DeviceConfig, HddParams, MemoryParams, Scheduler, SmrParams, SsdParams, SswdParams, build,
};

use crate::driver::{Driver, Outcome, TestRng, open_loop};

type Io = (TimeNs, Op, u64, u32);

/// Every model with its mean inter-arrival time (a load that queues now
/// and then).
fn models() -> Vec<(String, DeviceConfig, f64)> {
    let mut out = Vec::new();
    for name in MemoryParams::PRESETS {
        let p = MemoryParams::preset(name).unwrap();
        out.push((name.to_string(), DeviceConfig::Memory(p), 300.0));
    }
    for name in SsdParams::PRESETS {
        let p = SsdParams::preset(name).unwrap();
        out.push((name.to_string(), DeviceConfig::Ssd(p), 8_000.0));
    }
    for name in HddParams::PRESETS {
        let p = HddParams::preset(name).unwrap();
        out.push((name.to_string(), DeviceConfig::Hdd(p), 8e6));
    }
    let mut p = HddParams::sata_7200_2tb();
    p.scheduler = Scheduler::Fifo;
    out.push(("sata-7200-2tb fifo".into(), DeviceConfig::Hdd(p), 8e6));
    let mut p = HddParams::sata_7200_2tb();
    p.write_cache = true;
    p.write_cache_bytes = 1 << 20;
    out.push((
        "sata-7200-2tb write cache".into(),
        DeviceConfig::Hdd(p),
        8e6,
    ));
    let mut p = HddParams::sata_7200_2tb();
    p.readahead_bytes = 0;
    p.queue_depth = 4;
    out.push((
        "sata-7200-2tb no read-ahead".into(),
        DeviceConfig::Hdd(p),
        8e6,
    ));
    for name in SmrParams::PRESETS {
        let p = SmrParams::preset(name).unwrap();
        out.push((name.to_string(), DeviceConfig::Smr(p), 8e6));
    }
    for name in SswdParams::PRESETS {
        let p = SswdParams::preset(name).unwrap();
        out.push((name.to_string(), DeviceConfig::Sswd(p), 8e6));
    }
    // A log small enough for the workload to force cleaning.
    let p = SswdParams {
        band_bytes: 4 << 20,
        persistent_cache_bytes: 16 << 20,
        ram_buffer_bytes: 1 << 20,
        max_append_bytes: 256 << 10,
        ..SswdParams::sswd_7200_2tb()
    };
    out.push(("sswd small log".into(), DeviceConfig::Sswd(p), 8e6));
    out
}

/// A mixed workload: bursts of back-to-back IOs, sequential runs and
/// random jumps, every op.
fn workload(capacity_bytes: u64, mean_gap_ns: f64, count: usize, seed: u64) -> Vec<Io> {
    let mut rng = TestRng::new(seed);
    let mut t = 0;
    let mut offset = 0;
    (0..count)
        .map(|_| {
            // A third of the IOs arrive together with the previous one.
            if rng.below(3) > 0 {
                t += rng.exp_ns(mean_gap_ns * 1.5);
            }
            let op = match rng.below(20) {
                0 => Op::Trim,
                1 => Op::Flush,
                2..=7 => Op::Write,
                _ => Op::Read,
            };
            let size = match op {
                Op::Flush => 0,
                _ => 512 << rng.below(10),
            };
            // Half sequential, half random.
            if rng.below(2) == 0 || offset + size as u64 > capacity_bytes {
                offset = rng.below((capacity_bytes - (256 << 10)) / 512) * 512;
            }
            let io = (t, op, offset, size);
            offset += size as u64;
            io
        })
        .collect()
}

/// The least time an IO can take, computed from the parameters by hand.
fn min_service_ns(config: &DeviceConfig, op: Op, size: u32) -> u64 {
    let over = |bytes_per_s: u64| (size as u64 * 1_000_000_000).div_ceil(bytes_per_s);
    match config {
        DeviceConfig::Memory(p) => match op {
            Op::Read => p.read_latency_ns + over(p.read_bandwidth_bytes_per_s),
            Op::Write => p.write_latency_ns + over(p.write_bandwidth_bytes_per_s),
            Op::Trim | Op::Flush => p.write_latency_ns,
        },
        DeviceConfig::Ssd(p) => match op {
            Op::Read => p.read_latency_ns + over(p.unit_read_bandwidth_bytes_per_s),
            Op::Write => p.write_latency_ns + over(p.unit_write_bandwidth_bytes_per_s),
            Op::Trim | Op::Flush => p.write_latency_ns,
        },
        DeviceConfig::Hdd(p) => match op {
            // Through the cache: overhead + the interface transfer.
            Op::Write if p.write_cache => {
                p.command_overhead_ns + over(p.interface_rate_bytes_per_s)
            }
            // On the media: overhead + transfer at the fastest zone (−1 ns
            // for rounding).
            Op::Write => p.command_overhead_ns + over(p.outer_rate_bytes_per_s).saturating_sub(1),
            // Reads may come from the read-ahead buffer.
            Op::Read | Op::Trim | Op::Flush => p.command_overhead_ns,
        },
        DeviceConfig::Smr(p) => match op {
            Op::Write => {
                p.disk.command_overhead_ns + over(p.disk.outer_rate_bytes_per_s).saturating_sub(1)
            }
            Op::Read | Op::Trim | Op::Flush => p.disk.command_overhead_ns,
        },
        // Writes may be served by the RAM buffer, reads by read-ahead.
        DeviceConfig::Sswd(p) => match op {
            Op::Write => p.disk.command_overhead_ns + over(p.disk.interface_rate_bytes_per_s),
            Op::Read | Op::Trim | Op::Flush => p.disk.command_overhead_ns,
        },
        other => panic!("no minimum service time for {}", other.model()),
    }
}

fn run(config: &DeviceConfig, seed: u64, ios: &[Io]) -> Outcome {
    let mut model = build(config, seed).unwrap();
    open_loop(model.as_mut(), ios)
}

#[test]
fn every_model_keeps_the_contract() {
    for (name, config, gap_ns) in models() {
        let count = if matches!(
            config,
            DeviceConfig::Hdd(_) | DeviceConfig::Smr(_) | DeviceConfig::Sswd(_)
        ) {
            1_500
        } else {
            20_000
        };
        let ios = workload(config.capacity_bytes(), gap_ns, count, 1);
        let out = run(&config, 1, &ios);
        assert_eq!(out.done.len(), ios.len(), "{name}");
        for d in &out.done {
            let least = min_service_ns(&config, d.io.op, d.io.size_bytes);
            assert!(
                d.latency_ns() >= least,
                "{name}: {:?} took {} ns, less than the minimum {least}",
                d.io,
                d.latency_ns()
            );
        }
        // Ends idle with nothing left to do.
        let mut model = build(&config, 1).unwrap();
        let mut driver = Driver::new(model.as_mut());
        for &(t, op, offset, size) in &ios[..50] {
            driver.run_until(t);
            driver.submit(op, offset, size);
        }
        driver.drain();
        assert_eq!(model.state(), DeviceState::Idle, "{name}");
        assert_eq!(model.next_event_ns(), None, "{name}");
        assert_eq!(model.in_flight(), 0, "{name}");
    }
}

#[test]
fn same_seed_and_inputs_give_the_same_completions() {
    for (name, config, gap_ns) in models() {
        let ios = workload(config.capacity_bytes(), gap_ns, 2_000, 2);
        let a = run(&config, 9, &ios).completions();
        let b = run(&config, 9, &ios).completions();
        assert_eq!(a, b, "{name}");
    }
}

/// Results must not depend on how the executor calls the model: advancing
/// at extra times, or submitting without advancing first.
#[test]
fn results_do_not_depend_on_how_often_the_executor_advances() {
    for (name, config, gap_ns) in models() {
        let ios = workload(config.capacity_bytes(), gap_ns, 2_000, 3);
        let eager = run(&config, 4, &ios);
        let mut want: Vec<(u64, TimeNs)> = eager.completions();
        want.sort();

        // Lazy: submit every IO at its time without advancing, then drain.
        let mut model = build(&config, 4).unwrap();
        let mut driver = Driver::new(model.as_mut());
        for &(t, op, offset, size) in &ios {
            driver.submit_at(t, op, offset, size);
        }
        driver.drain();
        let mut got = driver.outcome.completions();
        got.sort();
        assert_eq!(got, want, "{name}: lazy executor");

        // Busy: also advance at random times between events.
        let mut rng = TestRng::new(5);
        let mut model = build(&config, 4).unwrap();
        let mut driver = Driver::new(model.as_mut());
        for &(t, op, offset, size) in &ios {
            while driver.now_ns() < t {
                let hop = driver.now_ns() + 1 + rng.below((gap_ns / 3.0) as u64);
                driver.advance_to(hop.min(t));
            }
            driver.submit(op, offset, size);
        }
        driver.drain();
        assert_eq!(
            driver.outcome.completions(),
            eager.completions(),
            "{name}: busy executor"
        );
    }
}
