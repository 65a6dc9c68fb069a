//! ATSMF data tracking: randomized property tests over many seeds, on the
//! shared executor and data model of `common` (its module docs list what
//! every run checks: exact data through every buffer description, reads
//! never stale, the flash never going back, `locate` exact, trims never
//! exposing older data, strict runs free of device-overlap races). Data is
//! tracked per 512-byte sector (ATSMF's alignment), the memory device is
//! faster than the flash (so the manager finds promotions worth it), and a
//! drifting hot spot makes concentrations appear, move and end, so
//! sub-LUNs are promoted and demoted while host IO (reads, writes, trims,
//! flushes) goes on. Here, on top:
//! - ATSMF's invariants hold after every event
//!   (`Atsmf::check_invariants_full`);
//! - every run ends with `drain` (maybe with host IOs in flight): every
//!   sub-LUN is demoted through the move machinery, and then the flash
//!   alone holds the newest acknowledged version of every sector (or zeros
//!   if trimmed since);
//! - every host IO completes exactly once, nothing gets stuck.
//!
//! `TIERLAB_PROP_CASES=N` runs N cases per test instead of the default.

mod common;

use common::{
    Geometry, Reached, Rng, Sim, Target, Workload, cases, check_counts, complete_host_ios,
    issue_workload,
};
use tierlab_core::policy::{BufRef, Policy};
use tierlab_core::{DeviceIo, Op};
use tierlab_policies::atsmf::{
    Atsmf, AtsmfParams, FLASH_DEVICE, MEMORY_DEVICE, TIER_FLASH, TIER_MEMORY,
};
use tierlab_policies::cache::ByteCount;

const SECTOR: u64 = 512;

impl Target for Atsmf {
    fn check_full(&self) {
        self.check_invariants_full();
    }

    fn state(&self) -> String {
        format!(
            "in memory {:?}, moves {}, counters {:?}",
            self.sub_luns_in_memory(),
            self.moves_running(),
            self.counters()
        )
    }

    fn busy(&self) -> bool {
        self.moves_running() > 0
    }

    /// The sync's reads of the move buffer (into staging) may overlap a
    /// newer write of the same sector to the buffer: that write marks the
    /// sector unsynced again when it lands, and the move flips only after
    /// a sync that started after it, so what the racing read found never
    /// stays at the destination.
    fn strict_watches(&self, device: usize, io: &DeviceIo, buf: Option<BufRef>) -> bool {
        let sync_read = device == MEMORY_DEVICE
            && io.op == Op::Read
            && matches!(buf, Some(BufRef::Staging { .. }))
            && io.offset_bytes >= self.buffer_offset_bytes();
        !sync_read
    }
}

fn counter(a: &Atsmf, name: &str) -> u64 {
    a.counters()
        .iter()
        .find(|c| c.0 == name)
        .map(|c| c.1 as u64)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

#[derive(Clone, Debug)]
struct Case {
    p: AtsmfParams,
    lun_bytes: u64,
    memory_bytes: u64,
    w: Workload,
    strict: bool,
    drain_early: bool,
    memory_max_delay_ns: u64,
    flash_max_delay_ns: u64,
    /// Device IOs that fail, per mille (`Sim::device_error_per_mille`),
    /// and whether only host data path IOs do.
    device_error_per_mille: u64,
    host_path_errors_only: bool,
}

/// Random small geometry: 3–10 sub-LUNs of 4–16 KiB (the last maybe
/// short), periods of 0.2–1 ms, small move chunks, a memory cap now and
/// then; a hot spot of one or two sub-LUNs drifting across the LUN.
fn random_case(rng: &mut Rng) -> Case {
    let sub_sectors = [8, 16, 24, 32][rng.below(4) as usize];
    let sub = sub_sectors * SECTOR;
    let n_subs = 3 + rng.below(8);
    let short = if rng.chance(30) {
        rng.below(sub_sectors) * SECTOR
    } else {
        0
    };
    let lun_bytes = n_subs * sub - short;
    let max_moves = 1 + rng.below(3) as u32;
    let cap_slots = if rng.chance(30) {
        1 + rng.below(n_subs)
    } else {
        n_subs
    };
    let period_s = (2 + rng.below(9)) as f64 * 1e-4;
    let p = AtsmfParams {
        sub_lun_size_bytes: ByteCount(sub),
        period_s,
        collect_s: period_s,
        top_n: 1 + rng.below(3) as usize,
        share_m: (30 + rng.below(40)) as f64 / 100.0,
        min_samples: [5, 100][rng.below(2) as usize],
        stats_window_periods: 1 + rng.below(10) as u32,
        move_chunk_bytes: ByteCount((1 + rng.below(sub_sectors)) * SECTOR),
        move_iodepth: 1 + rng.below(4) as u32,
        max_concurrent_moves: max_moves,
        prefetch_moving: rng.chance(50),
        demote_after_periods: 1 + rng.below(2) as u32,
        demote_hold_ratio: [1.5, 1e6][rng.below(2) as usize],
        memory_cap_bytes: (cap_slots < n_subs).then_some(ByteCount(cap_slots * sub)),
        buffer_bytes: ByteCount(max_moves as u64 * sub),
        ..AtsmfParams::default()
    };
    let memory_bytes = cap_slots * sub + p.buffer_bytes.0;
    let mut w = Workload::new(
        300 + rng.below(500),
        1 + rng.below(8),
        1 + rng.below(16),
        20 + rng.below(50),
    );
    w.trim_pct = rng.below(12);
    w.flush_pct = rng.below(4);
    w.hot_pct = 70 + rng.below(25);
    w.hot_units = sub_sectors * (1 + rng.below(2));
    w.hot_drift_ios = 60 + rng.below(200);
    w.locate_pct = 10;
    Case {
        p,
        lun_bytes,
        memory_bytes,
        w,
        strict: rng.chance(50),
        drain_early: rng.chance(50),
        // Mostly fast memory; sometimes as slow as the flash (wider
        // windows for races between moves and host IO).
        memory_max_delay_ns: if rng.chance(25) {
            10_000 + rng.below(60_000)
        } else {
            1 + rng.below(5_000)
        },
        flash_max_delay_ns: 10_000 + rng.below(60_000),
        device_error_per_mille: 0,
        host_path_errors_only: false,
    }
}

/// Runs one case; returns the failures (empty = pass), what it reached and
/// the policy.
fn run(seed: u64, case: &Case) -> (Vec<String>, Reached, Atsmf) {
    let mut policy = Atsmf::new(case.p.clone(), case.lun_bytes, case.memory_bytes).unwrap();
    let mut g = Geometry::backed(
        SECTOR,
        vec![case.memory_bytes, case.lun_bytes],
        FLASH_DEVICE,
        case.lun_bytes / SECTOR,
    );
    g.locate_end_bytes = Some(case.lun_bytes);
    let mut sim = Sim::new(seed, case.flash_max_delay_ns, g, policy.tier_names().len());
    sim.device_max_delay = vec![case.memory_max_delay_ns, case.flash_max_delay_ns];
    sim.strict = case.strict;
    sim.device_error_per_mille = case.device_error_per_mille;
    sim.device_errors_on_host_path_only = case.host_path_errors_only;
    let mut out = Sim::outbox();
    if policy.required_alignment_bytes() != SECTOR {
        sim.fail(format!(
            "alignment {} bytes, the move buffer tracks {SECTOR}-byte sectors",
            policy.required_alignment_bytes()
        ));
    }
    issue_workload(&mut sim, &mut policy, &mut out, &case.w);
    if !case.drain_early {
        complete_host_ios(&mut sim, &mut policy, &mut out);
    }
    sim.drain_and_check(&mut policy, &mut out);
    if sim.stopped {
        // Fail-stop: what it left is the crash checker's to judge.
        return (sim.failures, sim.reached, policy);
    }
    if !policy.sub_luns_in_memory().is_empty() || policy.memory_bytes() != 0 {
        let msg = format!(
            "drained with sub-LUNs {:?} in memory, {} bytes of slots held",
            policy.sub_luns_in_memory(),
            policy.memory_bytes()
        );
        sim.fail(msg);
    }
    check_counts(&mut sim);
    (sim.failures, sim.reached, policy)
}

#[derive(Debug, Default)]
struct Totals {
    reached: Reached,
    promotions: u64,
    demotions: u64,
    buffered_writes: u64,
    trims_during_move: u64,
    drain_memory_sub_luns: u64,
    drain_moving_sub_luns: u64,
    drain_cancelled_promotions: u64,
    strict_runs: u64,
    capped_runs: u64,
    flush_waits: u64,
    flush_back_bytes: u64,
}

fn sweep(n: u64, salt: u64, make: impl Fn(&mut Rng) -> Case) -> Totals {
    let mut t = Totals::default();
    for seed in 0..n {
        let mut rng = Rng(seed * 2_654_435_761 + salt);
        let case = make(&mut rng);
        let (failures, reached, a) = run(seed, &case);
        assert!(failures.is_empty(), "seed {seed} ({case:?}): {failures:#?}");
        assert!(
            !case.host_path_errors_only || reached.stopped_runs == 0,
            "seed {seed} ({case:?}): stopped at a host data path error"
        );
        t.reached.add(&reached);
        t.promotions += counter(&a, "promotions");
        t.demotions += counter(&a, "demotions");
        t.buffered_writes += counter(&a, "buffered_writes");
        t.trims_during_move += counter(&a, "trims_during_move");
        t.drain_memory_sub_luns += counter(&a, "drain_memory_sub_luns");
        t.drain_moving_sub_luns += counter(&a, "drain_moving_sub_luns");
        t.drain_cancelled_promotions += counter(&a, "drain_cancelled_promotions");
        t.flush_waits += counter(&a, "flush_waits");
        t.flush_back_bytes += counter(&a, "flush_back_bytes");
        t.strict_runs += u64::from(case.strict);
        t.capped_runs += u64::from(case.p.memory_cap_bytes.is_some());
    }
    eprintln!("coverage {t:?}");
    t
}

/// Everything interleaved: promotions and demotions under reads, writes,
/// trims and flushes, `locate` between events, a drain at the end.
#[test]
fn atsmf_never_loses_reorders_or_serves_stale_data() {
    let n = cases(300);
    let t = sweep(n, 21, random_case);
    if n >= 100 {
        let r = &t.reached;
        let paths = [
            t.promotions,
            t.demotions,
            t.buffered_writes,
            t.trims_during_move,
            t.strict_runs,
            t.capped_runs,
            t.flush_waits,
            t.flush_back_bytes,
            r.zero_reads,
            r.writes_after_trim,
            r.flushes,
            r.locate_calls_busy,
            r.located_units_per_tier[TIER_MEMORY as usize],
            r.located_units_per_tier[TIER_FLASH as usize],
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// `drain` with sub-LUNs in memory, moves running and promotions queued,
/// sometimes with host IOs in flight.
#[test]
fn atsmf_drain_demotes_everything_to_flash() {
    let n = cases(200);
    let t = sweep(n, 23, |rng| {
        let mut case = random_case(rng);
        // Stop in the middle of the action: short runs over many sub-LUNs,
        // one move at a time so promotions queue up.
        case.w.ios = 100 + rng.below(300);
        if rng.chance(50) {
            case.p.max_concurrent_moves = 1;
        }
        case
    });
    if n >= 100 {
        let paths = [
            t.drain_memory_sub_luns,
            t.drain_moving_sub_luns,
            t.drain_cancelled_promotions,
            t.reached.drains_with_host_io,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// Trim-heavy runs: trims of sub-LUNs on flash, in memory and moving.
#[test]
fn atsmf_trims_never_expose_older_data() {
    let n = cases(200);
    let t = sweep(n, 25, |rng| {
        let mut case = random_case(rng);
        case.w.trim_pct = 15 + rng.below(20);
        case.w.write_pct = case.w.write_pct.min(90 - case.w.trim_pct);
        case
    });
    if n >= 100 {
        let r = &t.reached;
        let paths = [t.trims_during_move, r.zero_reads, r.writes_after_trim];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// `locate` often, especially while sub-LUNs move (buffered sectors in the
/// move buffer, the rest at the move's source).
#[test]
fn atsmf_locate_reports_where_a_read_would_go() {
    let n = cases(150);
    let t = sweep(n, 27, |rng| {
        let mut case = random_case(rng);
        case.w.locate_pct = 40;
        case
    });
    if n >= 100 {
        let r = &t.reached;
        assert!(
            r.locate_calls_busy > 100
                && r.located_units_per_tier[TIER_MEMORY as usize] > 0
                && r.located_units_per_tier[TIER_FLASH as usize] > 0,
            "coverage {t:?}"
        );
    }
}

/// Memory is device 0, the LUN device 1 (what the harness assumes).
#[test]
fn devices_are_memory_then_flash() {
    assert_eq!((MEMORY_DEVICE, FLASH_DEVICE), (0, 1));
}

/// Device errors: 0.5–3 % of device IOs fail (a failed write lands on a
/// random subset of its sectors or on none). ATSMF fails only the host IOs
/// whose device IO failed and goes on with the host model intact (half
/// the runs fail only host data path IOs, and must never stop); a failed
/// move copy, sync, write-back or table write stops it (fail-stop).
#[test]
fn atsmf_survives_host_path_device_errors_and_stops_at_the_rest() {
    let n = cases(300);
    let salt = std::cell::Cell::new(0u64);
    let t = sweep(n, 41, |rng| {
        let mut case = random_case(rng);
        case.device_error_per_mille = 5 + rng.below(26);
        salt.set(salt.get() + 1);
        case.host_path_errors_only = salt.get() % 2 == 1;
        case
    });
    if n >= 100 {
        let r = &t.reached;
        assert!(
            r.host_ios_failed > 0
                && r.stopped_runs > 0
                && r.stopped_runs <= n / 2
                && t.promotions > 0,
            "coverage {t:?}"
        );
    }
}
