//! The detailed flash SSD (`model = "flash-ssd"`): hand-computed latencies
//! of single operations on an idle device, FTL sanity against the analytic
//! greedy-GC write amplification, preconditioning work, energy, RAID 1 of
//! two such SSDs (and its staggered GC), host control of GC, config errors,
//! determinism.

use tierlab_core::device::{Background, DeviceModel, DeviceState};
use tierlab_core::{Completion, DeviceIo, Op, TimeNs};
use tierlab_devices::flash_ftl::{Ftl, FtlConfig, Precondition, analytic_write_amplification};
use tierlab_devices::raid::{Raid, RaidLevel, ReadPolicy};
use tierlab_devices::{DeviceConfig, FlashSsd, FlashSsdParams};

use crate::driver::{Driver, TestRng, closed_loop, open_loop};

const KIB: u64 = 1024;

fn one_chip(precondition: Precondition) -> FlashSsdParams {
    FlashSsdParams {
        precondition,
        ..FlashSsdParams::mlc_1chip()
    }
}

/// `size` bytes at `bps` bytes/s, rounded up (the models' rule).
fn xfer(size: u64, bps: u64) -> u64 {
    (size * 1_000_000_000).div_ceil(bps)
}

#[test]
fn a_single_read_on_an_idle_device_costs_overhead_tr_channel_and_link() {
    let p = one_chip(Precondition::Fill);
    let mut ssd = FlashSsd::new(&p, 1).unwrap();
    let out = open_loop(&mut ssd, &[(0, Op::Read, 0, 4096)]);
    // 5 µs firmware + 50 µs tR + 4 KiB over the 200 MB/s channel + 4 KiB
    // over the 600 MB/s SATA link.
    let expected = 5_000 + 50_000 + xfer(4096, 200_000_000) + xfer(4096, 600_000_000);
    assert_eq!(expected, 5_000 + 50_000 + 20_480 + 6_827);
    assert_eq!(out.done[0].latency_ns(), expected);
    // Energy: one page read and 4 KiB on the channel (idle power aside).
    let [read_j, program_j, erase_j, transfer_j, _] = ssd.energy_j();
    assert!((read_j - 3.3 * 25e-3 * 50e-6).abs() < 1e-12, "{read_j}");
    assert!(
        (transfer_j - 4096.0 * 330e-12).abs() < 1e-15,
        "{transfer_j}"
    );
    assert_eq!((program_j, erase_j), (0.0, 0.0));
}

#[test]
fn a_read_of_never_written_data_needs_no_flash() {
    let mut ssd = FlashSsd::new(&one_chip(Precondition::None), 1).unwrap();
    let out = open_loop(&mut ssd, &[(0, Op::Read, 1 << 20, 4096)]);
    assert_eq!(out.done[0].latency_ns(), 5_000 + xfer(4096, 600_000_000));
}

#[test]
fn a_unit_write_is_acknowledged_from_the_buffer_then_programmed() {
    // One program unit of mlc-1chip: 2 planes × 8 KiB = 16 KiB.
    let mut ssd = FlashSsd::new(&one_chip(Precondition::None), 1).unwrap();
    let mut driver = Driver::new(&mut ssd);
    driver.submit(Op::Write, 0, 16384);
    driver.drain();
    let link = xfer(16384, 600_000_000);
    assert_eq!(driver.outcome.done[0].latency_ns(), link + 5_000);
    // The die programs after the data arrived: unit over the channel, then
    // tPROG; the device shows WRITE until then, and the state timeline
    // returns to IDLE exactly at its end.
    let program_end = link + xfer(16384, 200_000_000) + 900_000;
    assert_eq!(program_end, 27_307 + 81_920 + 900_000);
    let states = driver.outcome.states.clone();
    assert_eq!(
        states.last(),
        Some(&(program_end, DeviceState::Idle)),
        "{states:?}"
    );
    let before = states[states.len() - 2];
    assert_eq!(before.1, DeviceState::Write, "{states:?}");
    let c = ssd.counters();
    let get = |k: &str| c.iter().find(|(n, _)| *n == k).unwrap().1;
    assert_eq!(get("page_programs"), 2.0);
    assert_eq!(get("host_written_4k"), 4.0);
    // A read of that data now goes to flash: one page read (the 4 KiB sits
    // in one 8 KiB page).
    let out = open_loop(&mut ssd, &[(program_end, Op::Read, 4096, 4096)]);
    assert_eq!(out.done[0].latency_ns(), 5_000 + 50_000 + 20_480 + 6_827);
}

#[test]
fn sata_queue_depth_holds_the_33rd_command_on_the_host() {
    let mut ssd = FlashSsd::new(&one_chip(Precondition::Fill), 1).unwrap();
    let mut driver = Driver::new(&mut ssd);
    for i in 0..33u64 {
        driver.submit(Op::Read, i * 4096 * 1000, 4096);
    }
    driver.drain();
    // The 33rd read enters when the first completes; all 33 finish.
    assert_eq!(driver.outcome.done.len(), 33);
    let first_done = driver.outcome.done.iter().map(|d| d.done_ns).min().unwrap();
    let last = driver.outcome.done.iter().find(|d| d.io.tag == 32).unwrap();
    assert!(last.done_ns > first_done + 50_000, "{last:?}");
}

/// Random 4 KiB overwrites through the FTL alone (no timing): GC runs in
/// the foreground whenever a die wants it. Returns the write amplification
/// (programmed slots / host slots) over the last `measure` writes.
fn ftl_write_amplification(cfg: FtlConfig, warm: u64, measure: u64, seed: u64) -> f64 {
    let unit = cfg.slots_per_unit as usize;
    let logical = cfg.logical_slots;
    let mut ftl = Ftl::new(cfg).unwrap();
    let mut rng = TestRng::new(seed);
    let mut pending: Vec<(u64, u32)> = Vec::new();
    let mut mark = (0u64, 0u64);
    for i in 0..warm + measure {
        if i == warm {
            let s = ftl.stats;
            mark = (s.host_slots_buffered, s.gc_moved_slots);
        }
        let lpn = rng.below(logical) as u32;
        let seq = i;
        ftl.write_to_buffer(lpn, seq);
        pending.push((seq, lpn));
        if pending.len() == unit {
            while ftl.gc_wanted(0) {
                let job = ftl.gc_collect(0).expect("a victim");
                ftl.gc_erased(job.victim);
            }
            assert!(ftl.can_program(0));
            ftl.program_host_unit(0, pending.drain(..));
        }
    }
    let s = ftl.stats;
    let host = (s.host_slots_buffered - mark.0) as f64;
    let moved = (s.gc_moved_slots - mark.1) as f64;
    (host + moved) / host
}

fn wa_config(op_percent: f64, precondition: Precondition) -> FtlConfig {
    // One die of 512 superblocks of 1024 slots (256 pages × 4 slots).
    let (blocks, slots) = (512u32, 1024u32);
    let physical = blocks as u64 * slots as u64;
    FtlConfig {
        dies: 1,
        blocks_per_die: blocks,
        slots_per_page: 4,
        slots_per_unit: 8,
        slots_per_block: slots,
        logical_slots: (physical as f64 / (1.0 + op_percent / 100.0)) as u64,
        gc_low_free_blocks: 2,
        gc_high_free_blocks: 3,
        precondition,
    }
}

#[test]
fn write_amplification_matches_the_analytic_greedy_estimate_and_grows_with_utilization() {
    // Desnoyers 2012 (SYSTOR, "Analytic modeling of SSD write
    // performance"): for uniform random writes, the cleaned block's valid
    // fraction a solves a = exp(-alpha (1 - a)), alpha = physical /
    // logical, and WA = 1 / (1 - a); greedy approaches it as pages per block
    // grow (Hu et al. 2009 model greedy exactly: slightly lower WA). Here
    // 1024 slots per block: within 5 % at every point, four of them in
    // the 7-28 % range SSDs ship with (measured 0.2-2.2 %, below the
    // estimate).
    let mut previous = 0.0;
    println!("op %   utilization   alpha   WA measured   WA analytic");
    for op in [50.0, 28.0, 20.0, 15.0, 7.0] {
        let cfg = wa_config(op, Precondition::Steady);
        let logical = cfg.logical_slots;
        // Physical slots holding data: all but the free pool (on average
        // between the watermarks) and the open blocks.
        let in_use = (cfg.blocks_per_die as f64 - 3.0) * cfg.slots_per_block as f64;
        let alpha = in_use / logical as f64;
        let wa = ftl_write_amplification(cfg, logical, 2 * logical, 3);
        let analytic = analytic_write_amplification(alpha);
        let utilization = logical as f64 / (512.0 * 1024.0);
        println!("{op:4}   {utilization:.3}         {alpha:.3}   {wa:.3}         {analytic:.3}");
        assert!(wa > 1.0, "GC must copy at steady state");
        assert!(
            (wa - analytic).abs() / analytic < 0.05,
            "op {op}: WA {wa:.3} vs analytic {analytic:.3}"
        );
        assert!(wa > previous, "WA must grow with utilization");
        previous = wa;
    }
}

#[test]
fn analytic_preconditioning_starts_where_simulated_aging_ends() {
    // Independent path to the steady state: start empty, write every LPN
    // once sequentially, then 4 × the logical space of random overwrites,
    // simulated page by page. Its WA must match the WA measured right after
    // the analytic preconditioning (no warm-up at all).
    let op = 15.0;
    let aged = {
        let cfg = wa_config(op, Precondition::None);
        let logical = cfg.logical_slots;
        let unit = cfg.slots_per_unit as usize;
        let mut ftl = Ftl::new(cfg.clone()).unwrap();
        let mut pending = Vec::new();
        let mut rng = TestRng::new(5);
        let mut marks = (0, 0);
        let total = logical + 5 * logical;
        for i in 0..total {
            if i == logical + 4 * logical {
                marks = (ftl.stats.host_slots_buffered, ftl.stats.gc_moved_slots);
            }
            let lpn = if i < logical {
                i as u32
            } else {
                rng.below(logical) as u32
            };
            let seq = i;
            ftl.write_to_buffer(lpn, seq);
            pending.push((seq, lpn));
            if pending.len() == unit {
                while ftl.gc_wanted(0) {
                    let job = ftl.gc_collect(0).unwrap();
                    ftl.gc_erased(job.victim);
                }
                ftl.program_host_unit(0, pending.drain(..));
            }
        }
        let host = (ftl.stats.host_slots_buffered - marks.0) as f64;
        (host + (ftl.stats.gc_moved_slots - marks.1) as f64) / host
    };
    let cfg = wa_config(op, Precondition::Steady);
    let logical = cfg.logical_slots;
    let analytic_start = ftl_write_amplification(cfg, 0, logical, 9);
    println!(
        "WA after simulated aging {aged:.3}, right after analytic preconditioning {analytic_start:.3}"
    );
    assert!(
        (aged - analytic_start).abs() / aged < 0.05,
        "{aged} vs {analytic_start}"
    );
}

#[test]
fn preconditioning_a_1tb_device_touches_only_superblocks() {
    let p = FlashSsdParams::tlc_nvme();
    assert!(p.capacity_bytes() > 1_000_000_000_000);
    let started = std::time::Instant::now();
    let ssd = FlashSsd::new(&p, 1).unwrap();
    let elapsed = started.elapsed();
    // The work done: one count per closed superblock, nothing per page.
    let blocks = p.dies() * p.blocks_per_plane as u64;
    let closed = blocks - p.dies() * p.gc_high_free_blocks as u64;
    assert_eq!(ssd.ftl().precondition_blocks, closed);
    assert_eq!(ssd.ftl().map_entries(), 0);
    assert_eq!(ssd.ftl().valid_slots(), p.capacity_bytes() / 4096);
    // Loose: a shared, noisy machine (docs/flash-ssd.md has timings).
    assert!(elapsed.as_secs_f64() < 5.0, "{elapsed:?}");
    println!("1 TB preconditioning: {elapsed:?}, {closed} superblocks");
}

#[test]
fn steady_state_device_runs_gc_and_amplifies_writes() {
    // A small one-die device at steady state under random 4 KiB writes:
    // GC runs, erases happen, WA > 1, and the device shows GC and ERASE.
    let p = FlashSsdParams {
        dies_per_chip: 1,
        blocks_per_plane: 128,
        pages_per_block: 64,
        gc_low_free_blocks: 2,
        gc_high_free_blocks: 4,
        over_provisioning_percent: 15.0,
        ..FlashSsdParams::mlc_1chip()
    };
    let cap = p.capacity_bytes();
    let mut ssd = FlashSsd::new(&p, 3).unwrap();
    let mut rng = TestRng::new(1);
    let out = closed_loop(&mut ssd, 8, 20_000, || {
        (Op::Write, rng.below(cap / 4096) * 4096, 4096)
    });
    assert_eq!(out.done.len(), 20_000);
    let c = ssd.counters();
    let get = |k: &str| c.iter().find(|(n, _)| *n == k).unwrap().1;
    assert!(get("gc_count") > 0.0 && get("block_erases") > 0.0);
    assert!(get("write_amplification") > 1.5, "{c:?}");
    let states: std::collections::HashSet<_> = out.states.iter().map(|s| s.1).collect();
    assert!(states.contains(&DeviceState::Gc), "{states:?}");
    assert!(states.contains(&DeviceState::Erase), "{states:?}");
    assert!(get("energy_erase_j") > 0.0);
}

fn raid1(members: [FlashSsdParams; 2]) -> Raid {
    let [a, b] = members;
    Raid::new(
        RaidLevel::Raid1,
        64 * KIB,
        ReadPolicy::LeastOutstanding,
        &[],
        vec![
            Box::new(FlashSsd::new(&a, 1).unwrap()) as Box<dyn DeviceModel>,
            Box::new(FlashSsd::new(&b, 2).unwrap()),
        ],
    )
    .unwrap()
}

#[test]
fn raid1_of_two_ssds_reads_faster_than_one_when_the_die_queues() {
    let p = one_chip(Precondition::Steady);
    let cap = p.capacity_bytes();
    let run = |model: &mut dyn DeviceModel| {
        let mut rng = TestRng::new(4);
        closed_loop(model, 16, 4000, || {
            (Op::Read, rng.below(cap / 4096) * 4096, 4096)
        })
        .iops()
    };
    let single = run(&mut FlashSsd::new(&p, 1).unwrap());
    let mirrored = run(&mut raid1([p.clone(), p.clone()]));
    println!("QD16 4 KiB random reads: single {single:.0} IOPS, RAID 1 {mirrored:.0} IOPS");
    assert!(mirrored > 1.5 * single, "{single} vs {mirrored}");
}

/// A small SSD (one die, 128 superblocks of 1 MiB, 28 % over-provisioning)
/// at steady state, so that GC starts after 8 MiB of writes.
fn small_gc_ssd(host_gc_control: bool) -> FlashSsdParams {
    FlashSsdParams {
        dies_per_chip: 1,
        blocks_per_plane: 128,
        pages_per_block: 64,
        over_provisioning_percent: 28.0,
        gc_low_free_blocks: 8,
        gc_high_free_blocks: 16,
        host_gc_control,
        ..FlashSsdParams::mlc_1chip()
    }
}

/// Poisson arrivals (`rate` IOs/s, 30 % reads) of random 4 KiB IOs over
/// `cap` bytes for `seconds`, as (arrival, op, offset).
fn mixed_arrivals(cap: u64, rate: f64, seconds: f64, seed: u64) -> Vec<(TimeNs, Op, u64)> {
    let mut rng = TestRng::new(seed);
    let mut t = 0;
    let mut ios = Vec::new();
    while (t as f64) < seconds * 1e9 {
        t += rng.exp_ns(1e9 / rate);
        let op = if rng.unit() < 0.3 {
            Op::Read
        } else {
            Op::Write
        };
        ios.push((t, op, rng.below(cap / 4096) * 4096));
    }
    ios
}

/// Replays `ios` open loop, calling `check` after every step of the
/// model; returns each IO's (op, arrival, completion) in arrival order.
fn replay(
    model: &mut dyn DeviceModel,
    ios: &[(TimeNs, Op, u64)],
    mut check: impl FnMut(&dyn DeviceModel),
) -> Vec<(Op, TimeNs, TimeNs)> {
    let mut out: Vec<(Op, TimeNs, TimeNs)> = ios.iter().map(|&(t, op, _)| (op, t, 0)).collect();
    let mut done: Vec<Completion> = Vec::new();
    let mut next = 0;
    loop {
        let arrival = ios.get(next).map(|io| io.0);
        let event = model.next_event_ns();
        let now = match (arrival, event) {
            (None, None) => break,
            (a, e) => a.unwrap_or(TimeNs::MAX).min(e.unwrap_or(TimeNs::MAX)),
        };
        done.clear();
        model.advance(now, &mut done);
        for c in &done {
            out[c.tag as usize].2 = c.done_ns;
        }
        check(model);
        while ios.get(next).is_some_and(|io| io.0 == now) {
            let (_, op, offset_bytes) = ios[next];
            model.submit(
                now,
                DeviceIo {
                    tag: next as u64,
                    op,
                    offset_bytes,
                    size_bytes: 4096,
                },
            );
            next += 1;
            check(model);
        }
    }
    out
}

/// Reads / the union of their [arrival, completion) intervals (read IOPS of
/// `tierlab reproduce raid`), and their mean latency in µs.
fn read_iops_and_mean_us(ios: &[(Op, TimeNs, TimeNs)]) -> (f64, f64) {
    let mut reads: Vec<(TimeNs, TimeNs)> = ios
        .iter()
        .filter(|io| io.0 == Op::Read)
        .map(|io| (io.1, io.2))
        .collect();
    reads.sort_unstable();
    let (mut busy, mut end) = (0, 0);
    for &(a, d) in &reads {
        busy += d.saturating_sub(a.max(end));
        end = end.max(d);
    }
    let latency: u64 = reads.iter().map(|r| r.1 - r.0).sum();
    let n = reads.len() as f64;
    (n * 1e9 / busy as f64, latency as f64 / n / 1e3)
}

#[test]
fn host_gc_control_changes_nothing_alone_and_a_deferring_host_leaves_only_urgent_gc() {
    let cap = small_gc_ssd(false).capacity_bytes();
    let ios = mixed_arrivals(cap, 800.0, 10.0, 7);
    let plain = replay(
        &mut FlashSsd::new(&small_gc_ssd(false), 1).unwrap(),
        &ios,
        |_| {},
    );
    // With host control and nobody deferring, the same device.
    let mut ssd = FlashSsd::new(&small_gc_ssd(true), 1).unwrap();
    let mut seen = Vec::new();
    let controlled = replay(&mut ssd, &ios, |m| {
        let b = m.background();
        if seen.last() != Some(&b) {
            seen.push(b);
        }
    });
    assert_eq!(plain, controlled);
    assert!(seen.contains(&Background::Running), "{seen:?}");
    assert!(!seen.contains(&Background::Deferred), "{seen:?}");
    // Without host control nothing is reported.
    assert_eq!(
        FlashSsd::new(&small_gc_ssd(false), 1).unwrap().background(),
        Background::Idle
    );

    // A host that defers GC: the die collects only below the urgent level
    // (half the low watermark: 4 free superblocks) and back up to it; every
    // write still completes.
    let mut ssd = FlashSsd::new(&small_gc_ssd(true), 1).unwrap();
    ssd.set_background_allowed(0, false);
    let mut statuses = Vec::new();
    let deferred = replay(&mut ssd, &ios, |m| {
        let b = m.background();
        if statuses.last() != Some(&b) {
            statuses.push(b);
        }
    });
    assert!(deferred.iter().all(|io| io.2 >= io.1 && io.2 > 0));
    assert!(statuses.contains(&Background::Deferred), "{statuses:?}");
    assert!(statuses.contains(&Background::Urgent), "{statuses:?}");
    assert!(!statuses.contains(&Background::Running), "{statuses:?}");
    let free = ssd.ftl().free_blocks(0);
    assert!(
        (4..8).contains(&free),
        "free superblocks at the end: {free}"
    );
    assert!(ssd.ftl_stats().gc_count > 0);
    // Allowed again, it collects up to the high watermark at once.
    let t = deferred.iter().map(|io| io.2).max().unwrap();
    ssd.set_background_allowed(t, true);
    // (Urgent for a moment: the collection took a free superblock to
    // relocate into.)
    assert!(matches!(
        ssd.background(),
        Background::Running | Background::Urgent
    ));
    let mut done = Vec::new();
    while let Some(e) = ssd.next_event_ns() {
        ssd.advance(e, &mut done);
    }
    assert!(done.is_empty());
    assert_eq!(ssd.ftl().free_blocks(0), 16);
    assert_eq!(ssd.background(), Background::Idle);
}

#[test]
fn a_mirror_staggers_its_members_gc_and_reads_avoid_the_collecting_copy() {
    let cap = small_gc_ssd(true).capacity_bytes();
    let ios = mixed_arrivals(cap, 800.0, 20.0, 11);
    let (single_iops, single_us) = read_iops_and_mean_us(&replay(
        &mut FlashSsd::new(&small_gc_ssd(true), 1).unwrap(),
        &ios,
        |_| {},
    ));
    let (independent_iops, independent_us) = read_iops_and_mean_us(&replay(
        &mut raid1([small_gc_ssd(false), small_gc_ssd(false)]),
        &ios,
        |_| {},
    ));
    // Staggered: at every step at most one member runs GC that could wait
    // (a deferred member may still collect when it is urgent).
    let mut both_running = 0;
    let mut one_running = 0;
    let mut array = raid1([small_gc_ssd(true), small_gc_ssd(true)]);
    let staggered = replay(&mut array, &ios, |m| {
        let s: Vec<Background> = m.members().iter().map(|x| x.background()).collect();
        match s.iter().filter(|&&b| b == Background::Running).count() {
            0 => {}
            1 => one_running += 1,
            _ => both_running += 1,
        }
    });
    let (staggered_iops, staggered_us) = read_iops_and_mean_us(&staggered);
    println!(
        "read IOPS (mean µs): single {single_iops:.0} ({single_us:.0}), RAID 1 independent GC \
         {independent_iops:.0} ({independent_us:.0}), staggered {staggered_iops:.0} ({staggered_us:.0}); \
         steps with one member collecting {one_running}, both {both_running}"
    );
    assert!(one_running > 1000, "GC ran: {one_running}");
    assert_eq!(both_running, 0);
    // Reads go to the copy that is not collecting: faster than with the
    // members collecting at once, and than one SSD.
    assert!(
        staggered_us < 0.8 * independent_us,
        "{staggered_us} vs {independent_us}"
    );
    assert!(
        staggered_iops > 1.2 * single_iops,
        "{staggered_iops} vs {single_iops}"
    );
    assert!(staggered.iter().all(|io| io.2 >= io.1 && io.2 > 0));
}

#[test]
fn raid1_members_may_differ_and_the_array_reports_their_energy() {
    let fast = FlashSsdParams::slc_sata();
    let slow = FlashSsdParams {
        blocks_per_plane: 8192,
        ..FlashSsdParams::mlc_1chip()
    };
    let mut array = raid1([fast, slow]);
    let out = open_loop(
        &mut array,
        &[(0, Op::Write, 0, 65536), (1, Op::Read, 0, 4096)],
    );
    assert_eq!(out.done.len(), 2);
    let c = array.counters();
    let get = |k: &str| c.iter().find(|(n, _)| *n == k).map(|x| x.1);
    let members: f64 = array
        .members()
        .iter()
        .map(|m| {
            m.counters()
                .iter()
                .find(|(n, _)| *n == "energy_j")
                .unwrap()
                .1
        })
        .sum();
    assert_eq!(get("energy_j"), Some(members));
}

#[test]
fn a_raid_of_flash_ssds_from_toml_with_per_member_keys() {
    let text = r#"
model = "raid"
level = "raid1"
members = [
  { model = "flash-ssd", preset = "mlc-1chip" },
  { model = "flash-ssd", preset = "mlc-1chip", program_latency_ns = 1_300_000, dies_per_chip = 1 },
]
"#;
    let config: DeviceConfig = toml::from_str(text).unwrap();
    let DeviceConfig::Raid(r) = &config else {
        panic!()
    };
    let DeviceConfig::FlashSsd(m1) = &r.members[1] else {
        panic!()
    };
    assert_eq!((m1.program_latency_ns, m1.dies_per_chip), (1_300_000, 1));
    // RAID 1 holds the smaller member's capacity.
    assert_eq!(config.capacity_bytes() % 65536, 0);
    assert!(config.capacity_bytes() <= m1.capacity_bytes());
    tierlab_devices::build(&config, 1).unwrap();
}

#[test]
fn bad_flash_ssd_configs_name_the_key_the_value_and_what_is_allowed() {
    let err = |extra: &str| {
        toml::from_str::<DeviceConfig>(&format!("model = \"flash-ssd\"\n{extra}"))
            .unwrap_err()
            .to_string()
    };
    let e = err("queue_depth = 64");
    assert!(
        e.contains("key `queue_depth`") && e.contains("found 64") && e.contains("NCQ"),
        "{e}"
    );
    let e = err("page_bytes = 5000");
    assert!(
        e.contains("key `page_bytes`")
            && e.contains("found 5000")
            && e.contains("multiple of 4096"),
        "{e}"
    );
    let e = err("over_provisioning_percent = 0.5");
    assert!(e.contains("over_provisioning_percent"), "{e}");
    let e = err("preset = \"qlc\"");
    assert!(e.contains("mlc-1chip") && e.contains("qlc"), "{e}");
    let e = err("chanels = 2");
    assert!(e.contains("chanels"), "{e}");
    let e = err("precondition = \"aged\"");
    assert!(e.contains("steady"), "{e}");
    let e = err("gc_high_free_blocks = 4");
    assert!(e.contains("gc_high_free_blocks"), "{e}");
}

#[test]
fn same_inputs_same_completions_whatever_the_seed() {
    let p = FlashSsdParams {
        blocks_per_plane: 256,
        over_provisioning_percent: 15.0,
        ..FlashSsdParams::mlc_1chip()
    };
    let cap = p.capacity_bytes();
    let run = |seed: u64| {
        let mut ssd = FlashSsd::new(&p, seed).unwrap();
        let mut rng = TestRng::new(8);
        let out = closed_loop(&mut ssd, 8, 5000, || {
            let op = if rng.below(3) == 0 {
                Op::Write
            } else {
                Op::Read
            };
            (
                op,
                rng.below(cap / 4096) * 4096,
                4096 * (1 + rng.below(4) as u32),
            )
        });
        (out.completions(), ssd.counters())
    };
    assert_eq!(run(1), run(1));
    // Nothing is random: identical SSDs behave identically whatever the
    // seed (mirror members stay in step).
    assert_eq!(run(1), run(2));
}

#[test]
fn ios_past_the_end_complete_without_touching_the_ftl() {
    // The executor refuses them; a direct caller must still get no panic.
    for precondition in [Precondition::None, Precondition::Fill, Precondition::Steady] {
        let p = one_chip(precondition);
        let end = p.capacity_bytes();
        let mut ssd = FlashSsd::new(&p, 1).unwrap();
        let before = ssd.ftl().valid_slots();
        let out = open_loop(
            &mut ssd,
            &[
                (0, Op::Write, end + (1 << 20), 65536),
                (1, Op::Read, end + (1 << 20), 4096),
                (2, Op::Trim, end, 1 << 20),
                (3, Op::Flush, 0, 0),
            ],
        );
        assert_eq!(out.done.len(), 4);
        assert_eq!(ssd.ftl().valid_slots(), before);
    }
}
