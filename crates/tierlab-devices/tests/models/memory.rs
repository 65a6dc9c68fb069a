use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::{Op, ParamError};
use tierlab_devices::{MemoryModel, MemoryParams};

use crate::driver::{Driver, closed_loop, open_loop};

#[test]
fn one_io_costs_latency_plus_size_over_bandwidth() {
    let mut dram = MemoryModel::new(&MemoryParams::dram()).unwrap();
    // 100 ns + 4096 B / 10 GB/s = 100 + 409.6 -> 410 (rounded up).
    let out = open_loop(&mut dram, &[(1_000, Op::Read, 0, 4096)]);
    assert_eq!(out.done[0].latency_ns(), 510);

    let mut nvdimm = MemoryModel::new(&MemoryParams::nvdimm()).unwrap();
    // Read 305 + 4096/6.6e9 s (620.6 -> 621); write 94 + 4096/2.3e9 s
    // (1780.9 -> 1781).
    let out = open_loop(
        &mut nvdimm,
        &[(0, Op::Read, 0, 4096), (10_000, Op::Write, 8192, 4096)],
    );
    assert_eq!(out.done[0].latency_ns(), 305 + 621);
    assert_eq!(out.done[1].latency_ns(), 94 + 1781);

    let mut ramdisk = MemoryModel::new(&MemoryParams::ramdisk()).unwrap();
    // 3000 + 682.7 -> 683; 3500 + 683; flush and trim: write latency only.
    let out = open_loop(
        &mut ramdisk,
        &[
            (0, Op::Read, 0, 4096),
            (100_000, Op::Write, 0, 4096),
            (200_000, Op::Flush, 0, 0),
            (300_000, Op::Trim, 0, 1 << 20),
        ],
    );
    let latencies: Vec<u64> = out.done.iter().map(|d| d.latency_ns()).collect();
    assert_eq!(latencies, vec![3_683, 4_183, 3_500, 3_500]);
}

#[test]
fn channels_serve_in_parallel_then_queue_fifo() {
    // Four channels, eight 4 KiB reads at t = 0: four finish at 510 ns,
    // the next four start then and finish at 1020 ns, in submission order.
    let mut dram = MemoryModel::new(&MemoryParams::dram()).unwrap();
    let ios: Vec<_> = (0..8).map(|i| (0, Op::Read, i * 4096, 4096)).collect();
    let out = open_loop(&mut dram, &ios);
    let got: Vec<(u64, u64)> = out.done.iter().map(|d| (d.io.tag, d.done_ns)).collect();
    let want: Vec<(u64, u64)> = (0..8)
        .map(|i| (i, if i < 4 { 510 } else { 1020 }))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn throughput_is_channels_times_bandwidth() {
    // 1 MiB reads, 16 outstanding on 4 channels: each takes 100 ns +
    // 104,858 ns, so 4 / 104,958 ns = 38,110 IOs/s ≈ 39.96 GB/s.
    let mut dram = MemoryModel::new(&MemoryParams::dram()).unwrap();
    let mut offset = 0;
    let out = closed_loop(&mut dram, 16, 4_000, || {
        offset += 1 << 20;
        (Op::Read, offset, 1 << 20)
    });
    let want = 4.0 * (1u64 << 20) as f64 * 1e9 / 104_958.0;
    let got = out.bytes_per_s();
    assert!((got / want - 1.0).abs() < 1e-3, "{got} vs {want}");
}

#[test]
fn state_follows_the_ops_in_service() {
    let mut dram = MemoryModel::new(&MemoryParams::dram()).unwrap();
    let mut driver = Driver::new(&mut dram);
    assert_eq!(driver.outcome.states.len(), 0);
    driver.submit(Op::Read, 0, 4096);
    driver.submit(Op::Write, 4096, 4096);
    driver.drain();
    let states: Vec<DeviceState> = driver.outcome.states.iter().map(|s| s.1).collect();
    assert_eq!(
        states,
        vec![DeviceState::Read, DeviceState::Write, DeviceState::Idle]
    );
    assert_eq!(dram.in_flight(), 0);
    assert_eq!(dram.next_event_ns(), None);
}

#[test]
fn bad_parameters_are_named_with_value_and_range() {
    let mut p = MemoryParams::dram();
    p.channels = 0;
    let err = MemoryModel::new(&p).err().unwrap();
    assert_eq!(err, ParamError::new("channels", 0, "1 ..= 4096"));
    let mut p = MemoryParams::dram();
    p.write_bandwidth_bytes_per_s = 10;
    let err = p.validate().unwrap_err();
    assert_eq!(
        err,
        ParamError::new("write_bandwidth_bytes_per_s", 10, "1000 ..= 10000000000000")
    );
    for name in MemoryParams::PRESETS {
        MemoryParams::preset(name).unwrap().validate().unwrap();
    }
    assert_eq!(
        MemoryParams::preset("sram").unwrap_err().to_string(),
        "key `preset`: expected one of: dram, nvdimm, ramdisk, found \"sram\" (did you mean `dram`?)"
    );
}
