//! SMR and drive-managed SMR (SSWD): model sanity against hand-computed
//! costs from the HDD model's parameters. Exact times are checked against
//! the plain HDD model with the same mechanics and seed (the SMR disk's
//! platter is that disk's platter), and against the closed-form bounds
//! overhead + transfer ≤ t ≤ overhead + transfer + one revolution.

use tierlab_core::Op;
use tierlab_core::device::DeviceModel;
use tierlab_devices::smr::SmrParams;
use tierlab_devices::sswd::SswdParams;
use tierlab_devices::{DeviceConfig, HddModel, HddParams, SmrModel, SswdModel, build};

use crate::driver::{Driver, TestRng, open_loop};

const MIB: u64 = 1 << 20;
const KIB4: u32 = 4096;

fn counter(model: &dyn DeviceModel, name: &str) -> f64 {
    model
        .counters()
        .into_iter()
        .find(|(k, _)| *k == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

/// Media time of `bytes` at the outer edge's rate (ns).
fn outer_transfer_ns(p: &HddParams, bytes: u64) -> f64 {
    bytes as f64 * 1e9 / p.outer_rate_bytes_per_s as f64
}

/// One IO on a plain HDD with the same mechanics and seed: the reference.
fn hdd_time(p: &HddParams, seed: u64, op: Op, offset: u64, size: u32) -> u64 {
    let mut hdd = HddModel::new(p, seed).unwrap();
    let out = open_loop(&mut hdd, &[(0, op, offset, size)]);
    out.done[0].done_ns
}

#[test]
fn a_full_band_write_costs_no_rmw_and_exactly_the_media_write() {
    let p = SmrParams::smr_7200_2tb();
    let band = p.band_bytes;
    // Band 3 starts at media 3 × (band + guard).
    let media = 3 * (band + p.guard_bytes);
    let mut smr = SmrModel::new(&p, 7).unwrap();
    let out = open_loop(&mut smr, &[(0, Op::Write, 3 * band, band as u32)]);
    assert_eq!(counter(&smr, "rmw_count"), 0.0);
    assert_eq!(counter(&smr, "full_band_writes"), 1.0);
    let want = hdd_time(&p.disk, 7, Op::Write, media, band as u32);
    assert_eq!(out.done[0].done_ns, want);
    // Hand bounds: overhead + seek (+ settle) + rotation + 32 MiB at ~200 MB/s.
    let least = p.disk.command_overhead_ns as f64 + outer_transfer_ns(&p.disk, band);
    assert!(out.done[0].done_ns as f64 >= least * 0.999, "{out:?}");
    assert!(
        (out.done[0].done_ns as f64) < least * 1.01 + 8.34e6 + 2.0e6,
        "{} ns",
        out.done[0].done_ns
    );
}

#[test]
fn a_4k_write_inside_a_band_costs_one_band_rmw() {
    let p = SmrParams::smr_7200_2tb();
    let band = p.band_bytes;
    let mut smr = SmrModel::new(&p, 7).unwrap();
    let out = open_loop(&mut smr, &[(0, Op::Write, 5 * band + 8192, KIB4)]);
    assert_eq!(counter(&smr, "rmw_count"), 1.0);
    assert_eq!(counter(&smr, "rmw_bytes"), (2 * band) as f64);
    // Read the band, then write it: at least two band transfers, at most
    // those plus overheads, seeks and two revolutions.
    let two = 2.0 * outer_transfer_ns(&p.disk, band);
    let t = out.done[0].done_ns as f64;
    assert!(t >= two, "{t} < {two}");
    assert!(t <= two * 1.01 + 2.0 * 8.34e6 + 30e6, "{t}");
    // Partial writes to the band while it is being read join the RMW.
    let mut smr = SmrModel::new(&p, 7).unwrap();
    let ios: Vec<_> = (0..8)
        .map(|i| (i * 1_000_000, Op::Write, 5 * band + i * 4096 * 100, KIB4))
        .collect();
    let out = open_loop(&mut smr, &ios);
    assert_eq!(out.done.len(), 8);
    assert_eq!(counter(&smr, "rmw_count"), 1.0);
    assert_eq!(counter(&smr, "rmw_host_writes"), 8.0);
    // Guard gaps hide media: capacity = whole bands only.
    let bands = p.disk.capacity_bytes / (band + p.guard_bytes);
    assert_eq!(smr.capacity_bytes(), bands * band);
    assert_eq!(smr.bands(), bands);
}

/// A small drive-managed disk for fast tests: 4 MiB bands, 64 MiB log,
/// 8 MiB buffer.
fn small_sswd() -> SswdParams {
    SswdParams {
        band_bytes: 4 * MIB,
        guard_bytes: 256 << 10,
        persistent_cache_bytes: 64 * MIB,
        ram_buffer_bytes: 8 * MIB,
        max_append_bytes: MIB,
        idle_clean_ns: 0,
        ..SswdParams::sswd_7200_2tb()
    }
}

#[test]
fn a_random_4k_write_to_an_empty_sswd_is_one_log_append() {
    // No idle cleaning: the drain would otherwise clean the block later.
    let p = SswdParams {
        idle_clean_ns: 0,
        ..SswdParams::sswd_7200_2tb()
    };
    let mut d = SswdModel::new(&p, 3).unwrap();
    let mut driver = Driver::new(&mut d);
    // A random LBA far from the log.
    let offset = 1_234_567 * 4096;
    driver.submit(Op::Write, offset, KIB4);
    driver.submit(Op::Flush, 0, 0);
    driver.drain();
    let out = driver.outcome;
    // The write: command overhead + 4 KiB over the 600 MB/s interface.
    let ack = p.disk.command_overhead_ns + (4096u64 * 1_000_000_000).div_ceil(600_000_000);
    assert_eq!(out.done[0].done_ns, ack);
    assert_eq!(ack, 106_827);
    // The flush forced the append: one 4 KiB media write at the start of
    // the log (LBA 0 of the disk), which on the plain disk costs exactly:
    let append = hdd_time(&p.disk, 3, Op::Write, 0, KIB4);
    assert_eq!(out.done[1].done_ns, append);
    assert!(append as f64 >= p.disk.command_overhead_ns as f64 + outer_transfer_ns(&p.disk, 4096));
    assert!(append <= p.disk.command_overhead_ns + 8_333_334 + 21_000);
    let c = d.sswd_counters();
    assert_eq!((c.log_appends, c.log_append_bytes), (1, 4096));
    assert_eq!((c.rmw_count, c.full_band_writes), (0, 0));
    assert_eq!(d.smr().smr_counters().rmw_count, 0);
    assert_eq!(d.log_live_blocks(), 1);
}

#[test]
fn a_full_band_write_to_an_sswd_goes_straight_to_its_band() {
    let p = SswdParams {
        idle_clean_ns: 0,
        ..SswdParams::sswd_7200_2tb()
    };
    let band = p.band_bytes;
    let mut d = SswdModel::new(&p, 3).unwrap();
    let mut driver = Driver::new(&mut d);
    driver.submit(Op::Write, 2 * band, band as u32);
    driver.submit(Op::Flush, 0, 0);
    driver.drain();
    let out = driver.outcome;
    let ack = p.disk.command_overhead_ns + (band * 1_000_000_000).div_ceil(600_000_000);
    assert_eq!(out.done[0].done_ns, ack);
    let c = d.sswd_counters();
    assert_eq!((c.full_band_writes, c.log_appends, c.rmw_count), (1, 0, 0));
    assert_eq!(d.smr().smr_counters().rmw_count, 0);
    // The band write starts as soon as the buffer holds the whole band
    // (the media streams behind the faster link): exactly the plain disk's
    // time for a 32 MiB write at the band's media position.
    let media = p.persistent_cache_bytes + 2 * (band + p.guard_bytes);
    let want = hdd_time(&p.disk, 3, Op::Write, media, band as u32);
    assert_eq!(out.done[1].done_ns, want);
    assert!(want as f64 >= outer_transfer_ns(&p.disk, band));
    assert!(want >= ack);
}

#[test]
fn sustained_random_writes_fill_the_log_and_force_fifo_band_rmw() {
    let p = small_sswd();
    let mut d = SswdModel::new(&p, 5).unwrap();
    let mut rng = TestRng::new(11);
    // 120 MiB of random 4 KiB writes over 64 bands (256 MiB): more than
    // the 64 MiB log holds.
    let span_blocks = 64 * 4 * MIB / 4096;
    let ios: Vec<_> = (0..30_000u64)
        .map(|i| (i * 200_000, Op::Write, rng.below(span_blocks) * 4096, KIB4))
        .collect();
    let out = open_loop(&mut d, &ios);
    assert_eq!(out.done.len(), ios.len());
    let c = d.sswd_counters();
    assert!(c.rmw_count > 0, "{c:?}");
    assert!(c.log_appends > 0);
    // Every cleaning reads and writes its band, plus its log blocks.
    assert!(c.rmw_bytes >= c.rmw_count * 2 * p.band_bytes);
    assert_eq!(
        d.smr().smr_counters().rmw_count,
        0,
        "only whole bands reach the SMR disk"
    );
    // Writes that waited for cleaning are slow: the tail is RMW-sized.
    let max = out.done.iter().map(|x| x.latency_ns()).max().unwrap();
    assert!(max > 20_000_000, "max latency {max} ns");
    // The log never holds more than it can.
    assert!(d.log_used_blocks() <= p.persistent_cache_bytes / 4096);
}

#[test]
fn idle_time_cleaning_empties_the_log() {
    let mut p = small_sswd();
    p.idle_clean_ns = 100_000_000;
    let mut d = SswdModel::new(&p, 5).unwrap();
    let ios: Vec<_> = (0..50u64)
        .map(|i| (i * 1_000_000, Op::Write, i * 8 * MIB + 4096, KIB4))
        .collect();
    let out = open_loop(&mut d, &ios);
    assert_eq!(out.done.len(), 50);
    let c = d.sswd_counters();
    // 50 bands with one block each: 50 idle cleanings, nothing left.
    assert_eq!((c.rmw_count, c.idle_rmw_count), (50, 50));
    assert_eq!(d.log_live_blocks(), 0);
    assert_eq!(d.log_used_blocks(), 0);
    assert_eq!(d.next_event_ns(), None);
}

#[test]
fn reads_find_the_newest_copy_buffer_log_or_band() {
    let p = small_sswd();
    let mut d = SswdModel::new(&p, 5).unwrap();
    let mut driver = Driver::new(&mut d);
    driver.submit(Op::Write, 4096, KIB4);
    driver.run_until(1_000_000);
    // Still in the buffer: overhead + interface transfer.
    driver.submit(Op::Read, 4096, KIB4);
    driver.run_until(2_000_000);
    let r = driver.outcome.done[1];
    assert_eq!(r.latency_ns(), 100_000 + 6_827);
    driver.submit(Op::Flush, 0, 0);
    driver.drain();
    driver.submit(Op::Read, 4096, KIB4);
    driver.submit(Op::Read, 40 * MIB, KIB4);
    driver.drain();
    let c = d.sswd_counters();
    assert_eq!(
        (c.read_buffer_bytes, c.read_log_bytes, c.read_band_bytes),
        (4096, 4096, 4096)
    );
}

#[test]
fn configs_name_bad_keys_and_values() {
    let parse = |t: &str| toml::from_str::<DeviceConfig>(t).map_err(|e| e.to_string());
    let c = parse("model = \"sswd\"\npreset = \"sswd-7200-2tb\"\npersistent_cache_bytes = 1073741824\ndisk = { rpm = 5400 }\n").unwrap();
    let DeviceConfig::Sswd(p) = c else { panic!() };
    assert_eq!(p.persistent_cache_bytes, 1 << 30);
    assert_eq!(p.disk.rpm, 5400);
    assert_eq!(p.disk.capacity_bytes, 2_000_000_000_000);
    let c =
        parse("model = \"smr\"\nband_bytes = 16777216\ndisk = { preset = \"sata-5400-2tb\" }\n")
            .unwrap();
    let DeviceConfig::Smr(p) = c else { panic!() };
    assert_eq!((p.band_bytes, p.disk.rpm), (16 << 20, 5400));
    let e = parse("model = \"smr\"\nband_bytes = 1000\n").unwrap_err();
    assert!(e.contains("band_bytes") && e.contains("4096"), "{e}");
    let e = parse("model = \"sswd\"\npersistent_cache_bytes = 4096\n").unwrap_err();
    assert!(
        e.contains("key `persistent_cache_bytes`: expected 67108864 ..= "),
        "{e}"
    );
    let e = parse("model = \"sswd\"\nbogus = 1\n").unwrap_err();
    assert!(e.contains("bogus"), "{e}");
    let e = parse("model = \"sswd\"\npreset = \"nope\"\n").unwrap_err();
    assert!(e.contains("seagate-8tb-archive"), "{e}");
    let e = parse("model = \"smr\"\ndisk = { rpm = 1 }\n").unwrap_err();
    assert!(e.contains("disk") && e.contains("rpm"), "{e}");
    assert!(build(&DeviceConfig::Sswd(SswdParams::default()), 1).is_ok());
}

/// Every counter the SMR models report has a typed name (`counter::ALL`),
/// in the order reported: experiments look counters up by those constants.
#[test]
fn counters_are_named_by_their_constants() {
    let smr = build(&DeviceConfig::Smr(SmrParams::default()), 1).unwrap();
    let sswd = build(&DeviceConfig::Sswd(SswdParams::default()), 1).unwrap();
    for (model, all) in [
        (&smr, tierlab_devices::smr::counter::ALL),
        (&sswd, tierlab_devices::sswd::counter::ALL),
    ] {
        let reported: Vec<&str> = model.counters().iter().map(|c| c.0).collect();
        assert_eq!(reported, all);
    }
}
