//! HSWD data tracking: randomized property tests over many seeds, on the
//! shared executor and data model of `common` (its module docs list what
//! every run checks: exact data through every buffer description, reads
//! never stale, homes never going back, `locate` exact, trims never
//! exposing older data, strict runs free of device-overlap races). Here,
//! on top, through RMW, cleaning, RCache reads, set and fully associative
//! mappings and all three band selections:
//! - every device IO's tag names the buffer its description names
//!   ([`decode_tag`]; metadata writes come from the pages the policy
//!   made, `Outbox::fills`), and HSWD's invariants
//!   hold after every event (`Hswd::check_invariants_full`);
//! - the NRegion only ever receives whole-band writes (the last band may be
//!   short); metadata writes stay inside the metadata area, data never goes
//!   there;
//! - a run ends with `clean_all` or `drain` (maybe with host IOs in flight):
//!   then the PCache is empty and the NRegion alone holds the newest
//!   acknowledged version of every block (or zeros if trimmed since);
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
use tierlab_policies::cache::ByteCount;
use tierlab_policies::hswd::{
    BandSelection, Hswd, HswdBuffer, HswdParams, HswdStats, META_STAGING, Mapping, NREGION_DEVICE,
    PCACHE_DEVICE, TIER_NREGION, TIER_PCACHE, TIER_RCACHE, decode_tag,
};

const PAGE: u64 = 4096;

impl Target for Hswd {
    fn check_full(&self) {
        self.check_invariants_full();
    }

    fn check_submit(
        &self,
        device: usize,
        io: &DeviceIo,
        buf: Option<BufRef>,
    ) -> Result<(), String> {
        let layout = self.layout();
        let Some(buf) = buf else {
            return match (device, io.op) {
                (NREGION_DEVICE, Op::Trim) => Ok(()),
                // Commits and RMW steps flush either device.
                (PCACHE_DEVICE | NREGION_DEVICE, Op::Flush) => Ok(()),
                _ => Err(format!(
                    "{io:?} to device {device}: an IO HSWD never issues"
                )),
            };
        };
        let (tag_buf, idx) = decode_tag(io.tag);
        let consistent = match (tag_buf, buf) {
            (
                HswdBuffer::Host(id),
                BufRef::Host {
                    host_id,
                    offset_bytes,
                },
            ) => id == host_id && offset_bytes == idx * PAGE,
            (
                HswdBuffer::Staging(id),
                BufRef::Staging {
                    id: s,
                    offset_bytes,
                },
            ) => id == s && offset_bytes == idx * PAGE,
            (
                HswdBuffer::Metadata(id),
                BufRef::Staging {
                    id: s,
                    offset_bytes: 0,
                },
            ) => s == META_STAGING | id,
            _ => false,
        };
        if !consistent {
            return Err(format!(
                "{io:?}: tag says {tag_buf:?}[{idx}], data says {buf:?}"
            ));
        }
        let meta_end = layout.metadata_bytes;
        let metadata = matches!(tag_buf, HswdBuffer::Metadata(_));
        match (io.op, buf) {
            (Op::Write, _)
                if metadata && (device != PCACHE_DEVICE || io.end_bytes() > meta_end) =>
            {
                Err(format!("metadata write {io:?} outside the metadata area"))
            }
            (Op::Write, _) if metadata => Ok(()),
            (Op::Write, _) if device == PCACHE_DEVICE && io.offset_bytes < meta_end => {
                Err(format!("data write {io:?} into the metadata area"))
            }
            (Op::Write, _) if device == NREGION_DEVICE => {
                let band = layout.band_bytes;
                let whole = io.offset_bytes % band == 0
                    && (io.size_bytes as u64 == band || io.end_bytes() == self.nregion_bytes());
                if whole {
                    Ok(())
                } else {
                    Err(format!("NRegion write {io:?} is not a whole band"))
                }
            }
            _ => Ok(()),
        }
    }

    fn state(&self) -> String {
        self.debug_state()
    }

    fn busy(&self) -> bool {
        self.rmw_running()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    CleanAll,
    Drain,
}

#[derive(Clone, Debug)]
struct Case {
    pages: u64,
    w: Workload,
    /// The host never overlaps a write or trim with another IO of its blocks.
    strict: bool,
    end: End,
    drain_early: bool,
    /// Device IOs that fail, per mille (`Sim::device_error_per_mille`),
    /// and whether only host data path IOs do.
    device_error_per_mille: u64,
    host_path_errors_only: bool,
}

/// Runs one random workload; returns the failures (empty = pass) and what
/// it reached.
fn run(policy: &mut Hswd, seed: u64, case: &Case, max_delay: u64) -> (Vec<String>, Reached) {
    let layout = policy.layout();
    let mut g = Geometry::backed(
        PAGE,
        vec![layout.device_bytes, case.pages * PAGE],
        NREGION_DEVICE,
        case.pages,
    );
    g.locate_end_bytes = Some(case.pages * PAGE);
    g.unwatched_below[PCACHE_DEVICE] = layout.metadata_bytes.div_ceil(PAGE);
    let mut sim = Sim::new(seed, max_delay, g, policy.tier_names().len());
    sim.strict = case.strict;
    sim.device_error_per_mille = case.device_error_per_mille;
    sim.device_errors_on_host_path_only = case.host_path_errors_only;
    let mut out = Sim::outbox();
    issue_workload(&mut sim, policy, &mut out, &case.w);
    match case.end {
        End::Drain => {
            if !case.drain_early {
                complete_host_ios(&mut sim, policy, &mut out);
            }
            sim.drain_and_check(policy, &mut out);
        }
        End::CleanAll => {
            complete_host_ios(&mut sim, policy, &mut out);
            if sim.stopped {
                return (sim.failures, sim.reached);
            }
            policy.clean_all(&mut out);
            sim.apply(policy, &mut out);
            let mut steps = 0;
            while sim.step(policy, &mut out) {
                steps += 1;
                if steps > 2_000_000 {
                    sim.fail("cleaning never settles".into());
                    break;
                }
            }
            if sim.stopped {
                return (sim.failures, sim.reached);
            }
            if sim.staging_left() > 0 {
                let msg = format!("{} staging buffers never released", sim.staging_left());
                sim.fail(msg);
            }
            sim.check_backing("after cleaning");
        }
    }
    if sim.stopped {
        // Fail-stop: what it left is the crash checker's to judge.
        return (sim.failures, sim.reached);
    }
    if !policy.is_quiescent() || policy.cached_blocks() != 0 {
        let msg = format!(
            "not clean at the end: {} cached blocks",
            policy.cached_blocks()
        );
        sim.fail(msg);
    }
    check_counts(&mut sim);
    let s = policy.stats();
    if s.host_ios != sim.issued
        || s.completed_ios + s.host_ios_failed != sim.issued
        || s.host_ios_failed != sim.reached.host_ios_failed
    {
        let msg = format!(
            "{} issued ({} failed), policy counts {} / {} completed / {} failed",
            sim.issued, sim.reached.host_ios_failed, s.host_ios, s.completed_ios, s.host_ios_failed
        );
        sim.fail(msg);
    }
    (sim.failures, sim.reached)
}

const SELECTIONS: [BandSelection; 3] =
    [BandSelection::Fifo, BandSelection::Lru, BandSelection::Most];

/// Random small geometry: bands of 2–16 blocks, 1–4 sets of 1–12 blocks.
fn random_policy(rng: &mut Rng, selection: BandSelection, strict: bool) -> (HswdParams, Case) {
    let band_blocks = 2 + rng.below(15);
    let sets = 1 + rng.below(4);
    let per_set = 1 + rng.below(12);
    let data_blocks = sets * per_set;
    let mut p = HswdParams::with_pcache((data_blocks + band_blocks) * PAGE);
    p.band_bytes = ByteCount(band_blocks * PAGE);
    p.band_selection = selection;
    if sets > 1 || rng.chance(30) {
        p.mapping = Mapping::Set;
        p.sets = Some(sets);
    }
    let stop = 1 + rng.below(100);
    p.clean_stop_pct = stop as f64;
    p.clean_start_pct = (stop + rng.below(101 - stop)) as f64;
    p.metadata_entry_bytes = [16, 64, 512, 2048][rng.below(4) as usize];
    p.idle_clean_ms = if rng.chance(30) { 0.05 } else { 0.0 };
    let w = Workload::new(
        150 + rng.below(250),
        1 + rng.below(8),
        1 + rng.below(band_blocks.min(6)),
        30 + rng.below(65),
    );
    let case = Case {
        // Several bands, the last one maybe short.
        pages: band_blocks * (1 + rng.below(6)) + rng.below(band_blocks),
        w,
        strict,
        end: End::CleanAll,
        drain_early: false,
        device_error_per_mille: 0,
        host_path_errors_only: false,
    };
    p.clean_stalled_first = rng.chance(50);
    p.clean_in_write_path = rng.chance(50);
    (p, case)
}

/// Adds trims and flushes (and `locate` checks) to a case's workload.
fn with_trims(rng: &mut Rng, case: &mut Case, trim_pct: u64) {
    case.w.trim_pct = trim_pct;
    case.w.flush_pct = rng.below(5);
    case.w.write_pct = case.w.write_pct.min(95 - trim_pct - case.w.flush_pct);
    case.w.locate_pct = 10;
}

fn random_delay(rng: &mut Rng) -> u64 {
    if rng.chance(20) {
        1
    } else {
        1 + rng.below(200_000)
    }
}

#[derive(Debug, Default)]
struct Totals {
    reached: Reached,
    stats: HswdStats,
    set_runs: u64,
    strict_runs: u64,
}

impl Totals {
    fn add(&mut self, r: &Reached, s: &HswdStats, sets: u64, strict: bool) {
        self.reached.add(r);
        let t = &mut self.stats;
        t.rmw_count += s.rmw_count;
        t.read_rcache += s.read_rcache;
        t.write_stalls += s.write_stalls;
        t.rmw_band_read_blocks += s.rmw_band_read_blocks;
        t.rmw_band_write_blocks += s.rmw_band_write_blocks;
        t.rmw_rewritten_blocks += s.rmw_rewritten_blocks;
        t.rmw_held_writes += s.rmw_held_writes;
        t.writes_held += s.writes_held;
        t.trims += s.trims;
        t.trimmed_blocks += s.trimmed_blocks;
        t.trim_kept_blocks += s.trim_kept_blocks;
        t.trims_deferred += s.trims_deferred;
        t.drain_cached_blocks += s.drain_cached_blocks;
        t.drain_during_rmw += s.drain_during_rmw;
        t.failed_first_writes_dropped += s.failed_first_writes_dropped;
        self.set_runs += u64::from(sets > 1);
        self.strict_runs += u64::from(strict);
    }
}

/// Runs `n` seeded cases built by `make`, asserting each passes; returns
/// the sums.
fn sweep(n: u64, salt: u64, make: impl Fn(u64, &mut Rng) -> (HswdParams, Case)) -> Totals {
    let mut t = Totals::default();
    for seed in 0..n {
        let mut rng = Rng(seed * 6_364_136 + salt);
        let (p, case) = make(seed, &mut rng);
        let mut policy = Hswd::new(&p, case.pages * PAGE).unwrap();
        let max_delay = random_delay(&mut rng);
        let (failures, reached) = run(&mut policy, seed, &case, max_delay);
        assert!(
            failures.is_empty(),
            "seed {seed} ({p:?}, {case:?}, delay {max_delay}): {failures:#?}"
        );
        assert!(
            !case.host_path_errors_only || reached.stopped_runs == 0,
            "seed {seed} ({p:?}, {case:?}): stopped at a host data path error"
        );
        let s = policy.stats();
        // A stall waits through its own set's RMWs among all RMWs; with no
        // stall there is no longest one.
        assert!(
            s.longest_stall_own_set_rmws <= s.longest_stall_rmws
                && s.longest_stall_rmws <= s.rmw_count
                && (s.write_stalls > 0 || s.longest_stall_rmws == 0),
            "seed {seed}: {s:?}"
        );
        t.add(&reached, &s, policy.layout().sets, case.strict);
    }
    eprintln!("coverage {t:?}");
    t
}

/// Reads and writes, on half the seeds trims, flushes and `locate`; the
/// run ends with `clean_all` or `drain` (maybe with host IOs in flight).
fn mixed_case(seed: u64, rng: &mut Rng) -> (HswdParams, Case) {
    let (p, mut case) = random_policy(rng, SELECTIONS[(seed % 3) as usize], seed % 2 == 0);
    if seed % 4 >= 2 {
        let trim_pct = rng.below(15);
        with_trims(rng, &mut case, trim_pct);
    }
    case.end = [End::CleanAll, End::Drain][rng.below(2) as usize];
    case.drain_early = rng.chance(50);
    (p, case)
}

/// Everything interleaved: reads, writes, and on odd seeds trims, flushes
/// and `locate`; the runs end with `clean_all` or `drain`.
#[test]
fn hswd_never_loses_reorders_or_serves_stale_data() {
    let n = cases(600);
    let t = sweep(n, 11, mixed_case);
    // The cases reached every path the properties are about.
    if n >= 100 {
        let s = &t.stats;
        let paths = [
            s.rmw_count,
            s.read_rcache,
            s.write_stalls,
            t.set_runs,
            t.strict_runs,
            s.rmw_band_read_blocks,
            s.rmw_band_write_blocks,
            s.rmw_rewritten_blocks,
            s.rmw_held_writes,
            s.writes_held,
            s.trimmed_blocks,
            t.reached.drains,
            t.reached.flushes,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// `drain` with cached blocks left, an RMW running, writes stalled for a
/// free block, sometimes host IOs in flight.
#[test]
fn hswd_drain_leaves_every_block_on_the_nregion() {
    let n = cases(300);
    let t = sweep(n, 13, |seed, rng| {
        let (mut p, mut case) = random_policy(rng, SELECTIONS[(seed % 3) as usize], seed % 2 == 0);
        // Late cleaning: much is cached when the drain comes.
        p.clean_start_pct = 100.0;
        p.clean_stop_pct = 50.0 + rng.below(51) as f64;
        case.w.ios = 40 + rng.below(200);
        case.w.write_pct = 60 + rng.below(35);
        if rng.chance(30) {
            let trim_pct = rng.below(10);
            with_trims(rng, &mut case, trim_pct);
        }
        case.end = End::Drain;
        case.drain_early = rng.chance(50);
        (p, case)
    });
    if n >= 100 {
        let paths = [
            t.stats.drain_cached_blocks,
            t.stats.drain_during_rmw,
            t.reached.drains_with_host_io,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// Trim-heavy runs: trims of cached blocks, of uncached ones, of the band
/// under RMW (they wait for it), then reads and rewrites of them.
#[test]
fn hswd_trims_drop_blocks_and_never_expose_older_data() {
    let n = cases(400);
    let t = sweep(n, 17, |seed, rng| {
        let (p, mut case) = random_policy(rng, SELECTIONS[(seed % 3) as usize], seed % 2 == 0);
        let trim_pct = 15 + rng.below(20);
        with_trims(rng, &mut case, trim_pct);
        case.end = [End::CleanAll, End::Drain][rng.below(2) as usize];
        (p, case)
    });
    if n >= 100 {
        let s = &t.stats;
        let r = &t.reached;
        let paths = [
            s.trimmed_blocks,
            s.trims_deferred,
            r.zero_reads,
            r.writes_after_trim,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// `locate` at random points: cached blocks, uncached ones, and the band
/// under RMW served from the RCache.
#[test]
fn hswd_locate_reports_where_a_read_would_go() {
    let n = cases(300);
    let t = sweep(n, 19, |seed, rng| {
        let (p, mut case) = random_policy(rng, SELECTIONS[(seed % 3) as usize], seed % 2 == 0);
        let trim_pct = rng.below(10);
        with_trims(rng, &mut case, trim_pct);
        case.w.locate_pct = 30;
        (p, case)
    });
    if n >= 100 {
        let l = &t.reached.located_units_per_tier;
        assert!(
            l[TIER_PCACHE as usize] > 0
                && l[TIER_NREGION as usize] > 0
                && l[TIER_RCACHE as usize] > 0,
            "coverage {t:?}"
        );
    }
}

/// Device errors: 0.5–3 % of device IOs fail (a failed write lands on a
/// random subset of its blocks or on none). HSWD fails only the host IOs
/// whose read, slot write or trim failed and goes on with the host model
/// intact; at a failed commit or RMW IO it stops (fail-stop, which the
/// crash checker judges).
#[test]
fn hswd_survives_host_path_device_errors_and_stops_at_the_rest() {
    let n = cases(400);
    let t = sweep(n, 29, |seed, rng| {
        let (p, mut case) = mixed_case(seed, rng);
        case.device_error_per_mille = 5 + rng.below(26);
        // Half the runs fail only host data path IOs: they never stop.
        case.host_path_errors_only = seed % 2 == 1;
        (p, case)
    });
    if n >= 100 {
        let r = &t.reached;
        assert!(
            r.host_ios_failed > 0
                && r.stopped_runs > 0
                && r.stopped_runs <= n / 2
                && t.stats.failed_first_writes_dropped > 0,
            "coverage {t:?}"
        );
    }
}
