//! Cost of one simulated IO in each model, driven the way an executor
//! drives them (advance to `next_event_ns`, resubmit on completion).
//! Not a test: run it with
//! `cargo run --release -p tierlab-devices --example device_throughput`.

use std::time::Instant;

use tierlab_core::device::DeviceModel;
use tierlab_core::{Completion, DeviceIo, Op};
use tierlab_devices::{DeviceConfig, HddParams, MemoryParams, SsdParams, build};

/// Closed loop with `outstanding` IOs until `count` complete; returns
/// wall-clock ns per IO.
fn closed_loop(model: &mut dyn DeviceModel, outstanding: u64, count: u64) -> f64 {
    let capacity_blocks = model.capacity_bytes() / 4096;
    // A cheap deterministic offset sequence (an LCG), so that generating
    // the workload costs next to nothing.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |tag: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        DeviceIo {
            tag,
            op: if x >> 63 == 0 { Op::Read } else { Op::Write },
            offset_bytes: (x >> 20) % capacity_blocks * 4096,
            size_bytes: 4096,
        }
    };
    let mut done: Vec<Completion> = Vec::with_capacity(1024);
    let mut tag = 0;
    let started = Instant::now();
    for _ in 0..outstanding {
        model.submit(0, next(tag));
        tag += 1;
    }
    let mut completed = 0;
    while completed < count {
        let t = model.next_event_ns().expect("IOs in flight");
        done.clear();
        model.advance(t, &mut done);
        completed += done.len() as u64;
        for _ in 0..done.len() {
            model.submit(t, next(tag));
            tag += 1;
        }
    }
    started.elapsed().as_nanos() as f64 / completed as f64
}

fn main() {
    let cases: Vec<(&str, DeviceConfig, u64)> = vec![
        (
            "memory dram",
            DeviceConfig::Memory(MemoryParams::dram()),
            10_000_000,
        ),
        (
            "memory ramdisk",
            DeviceConfig::Memory(MemoryParams::ramdisk()),
            10_000_000,
        ),
        (
            "ssd intel-p3700",
            DeviceConfig::Ssd(SsdParams::intel_p3700()),
            10_000_000,
        ),
        (
            "ssd intel-s3500",
            DeviceConfig::Ssd(SsdParams::intel_s3500()),
            10_000_000,
        ),
        (
            "hdd sata-7200-2tb",
            DeviceConfig::Hdd(HddParams::sata_7200_2tb()),
            1_000_000,
        ),
    ];
    for (name, config, count) in cases {
        for outstanding in [1, 32] {
            let mut model = build(&config, 1).expect("presets are valid");
            let ns = closed_loop(model.as_mut(), outstanding, count);
            println!(
                "{name:20} QD{outstanding:<3} {ns:6.1} ns per IO ({:.1} M IOs/s)",
                1e3 / ns
            );
        }
    }
}
