//! Write-back correctness of the page cache and flashcache, by randomized
//! property tests over many seeds, on the shared executor and data model
//! of `common` (its module docs list what every run checks: reads never
//! return another page's data or a version older than the newest
//! acknowledged, the backing device never goes back, `locate` is exact,
//! trims never expose older data, every device IO's data is described).
//! Here, on top:
//! - every device IO's tag names the buffer its description names
//!   ([`decode_tag`]), and the cache's own invariants hold after every
//!   event (`Cache::check_invariants_full`);
//! - a run ends with `flush_all` calls, an idle flush (timers only) or a
//!   `drain` (maybe with host IOs still in flight); then nothing is dirty
//!   and the backing device alone holds the newest acknowledged version of
//!   every page (or zeros if trimmed since);
//! - every host IO completes exactly once, nothing gets stuck, and the
//!   cache-only count matches the tiers host IOs completed in.
//!
//! The host is well-formed: it never has two writes or trims of one page in
//! flight at once (their order would be undefined on any block device);
//! in strict runs it never overlaps a write or trim with any other IO of
//! the page. `TIERLAB_PROP_CASES=N` runs N cases per test.

mod common;

use common::{
    Data, Geometry, Reached, Rng, Sim, Target, Workload, cases, check_counts, complete_host_ios,
    issue_workload,
};
use tierlab_core::policy::{BufRef, HostIo, Outbox, Policy};
use tierlab_core::{DeviceIo, Op};
use tierlab_policies::cache::{
    self, Admission, BACKING_DEVICE, Buffer, ByteCount, CACHE_DEVICE, Cache, CacheParams,
    CacheStats, TIER_BACKING, TIER_CACHE, WriteMode, decode_tag,
};
use tierlab_policies::flashcache::{self, FlashcacheParams, SetReplacement};

const PAGE: u64 = 4096;

impl Target for Cache {
    fn check_full(&self) {
        self.check_invariants_full();
    }

    fn check_submit(
        &self,
        device: usize,
        io: &DeviceIo,
        buf: Option<BufRef>,
    ) -> Result<(), String> {
        let Some(b) = buf else { return Ok(()) };
        let (tag_buf, idx) = decode_tag(io.tag);
        let consistent = match (tag_buf, b) {
            (
                Buffer::Host(id),
                BufRef::Host {
                    host_id,
                    offset_bytes,
                },
            ) => id == host_id && offset_bytes == idx * PAGE,
            (
                Buffer::Staging(id),
                BufRef::Staging {
                    id: s,
                    offset_bytes,
                },
            ) => id == s && offset_bytes == idx * PAGE,
            _ => false,
        };
        if consistent {
            Ok(())
        } else {
            Err(format!(
                "{io:?} on device {device}: tag says {tag_buf:?}[{idx}], data says {b:?}"
            ))
        }
    }

    fn state(&self) -> String {
        format!(
            "dirty pages {}, stats {:?}",
            self.dirty_pages(),
            self.stats()
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    FlushAll,
    /// The idle timer alone flushes (the cache must have idle flushing).
    Idle,
    Drain,
}

#[derive(Clone, Debug)]
struct Case {
    pages: u64,
    w: Workload,
    end: End,
    /// Drain while host IOs are still in flight.
    drain_early: bool,
    strict: bool,
    /// Device IOs that fail, per mille (`Sim::device_error_per_mille`).
    device_error_per_mille: u64,
}

/// Runs one random workload; returns the failures (empty = pass) and what
/// it reached.
fn run(policy: &mut Cache, seed: u64, case: &Case, max_delay: u64) -> (Vec<String>, Reached) {
    let g = Geometry::backed(
        PAGE,
        vec![policy.cache_device_bytes(), case.pages * PAGE],
        BACKING_DEVICE,
        case.pages,
    );
    let mut sim = Sim::new(seed, max_delay, g, policy.tier_names().len());
    sim.strict = case.strict;
    sim.device_error_per_mille = case.device_error_per_mille;
    let mut out = Sim::outbox();
    issue_workload(&mut sim, policy, &mut out, &case.w);
    if sim.stopped {
        // Fail-stop: what it left is the crash checker's to judge.
        return (sim.failures, sim.reached);
    }
    if case.end == End::Drain {
        if !case.drain_early {
            complete_host_ios(&mut sim, policy, &mut out);
        }
        sim.drain_and_check(policy, &mut out);
        if sim.stopped {
            return (sim.failures, sim.reached);
        }
        // Pages whose write-back failed again during the drain are given
        // up (`drain_abandoned_pages`), still dirty: nothing else may be.
        let abandoned = policy.stats().drain_abandoned_pages;
        if policy.dirty_pages() > abandoned || abandoned == 0 && !policy.is_quiescent() {
            sim.fail(format!(
                "drained with {} dirty pages ({abandoned} given up)",
                policy.dirty_pages()
            ));
        }
    } else {
        complete_host_ios(&mut sim, policy, &mut out);
        // Quiescence: an idle flush (timers only) or explicit flush_all calls.
        for round in 0..50 {
            if case.end == End::FlushAll || round > 0 {
                policy.flush_all(&mut out);
                sim.apply(policy, &mut out);
            }
            let mut steps = 0;
            while sim.step(policy, &mut out) {
                steps += 1;
                if steps > 1_000_000 {
                    sim.fail("flush never settles".into());
                    break;
                }
            }
            if policy.is_quiescent() {
                if case.end == End::Idle && round > 0 {
                    sim.fail("the idle flush left dirty pages".into());
                }
                break;
            }
        }
        if !policy.is_quiescent() {
            sim.fail(format!(
                "not quiescent after flushing: {} dirty pages",
                policy.dirty_pages()
            ));
        }
        if policy.stats().dirty_bytes != 0 {
            sim.fail("dirty bytes after flushing".into());
        }
        sim.check_backing("after the final flush");
    }
    check_counts(&mut sim);
    let s = policy.stats();
    if (s.host_ios, s.host_ios_cache_only) != (sim.issued, sim.completed_per_tier[0]) {
        let msg = format!(
            "stats count {} host IOs, {} cache-only; the run issued {}, {} completed in tier 0",
            s.host_ios, s.host_ios_cache_only, sim.issued, sim.completed_per_tier[0]
        );
        sim.fail(msg);
    }
    (sim.failures, sim.reached)
}

const EVICTIONS: &[&str] = &[
    "lru", "fifo", "clock", "arc", "2q", "sieve", "s3fifo", "lirs", "lfu",
];

/// A random workload; `trims`: host trims and flushes among the IOs.
fn random_case(rng: &mut Rng, trims: bool) -> Case {
    let pages = 8 + rng.below(56);
    let mut w = Workload::new(
        150 + rng.below(250),
        1 + rng.below(8),
        1 + rng.below(4),
        20 + rng.below(70),
    );
    w.sequential_pct = 20;
    if trims {
        w.trim_pct = rng.below(15);
        w.flush_pct = rng.below(5);
        w.write_pct = w.write_pct.min(90 - w.trim_pct - w.flush_pct);
        w.locate_pct = [0, 10][rng.below(2) as usize];
    }
    Case {
        pages,
        w,
        end: End::FlushAll,
        drain_early: false,
        device_error_per_mille: 0,
        // The cache lets a host write into a slot overlap a flush's read of
        // it (the generation counter decides what is clean), so the strict
        // device-overlap check does not apply.
        strict: false,
    }
}

/// Random cache parameters (every mode, eviction, watermark, admission).
fn random_params(rng: &mut Rng) -> CacheParams {
    let mode = [
        WriteMode::WriteBack,
        WriteMode::WriteThrough,
        WriteMode::WriteAround,
    ][rng.below(3) as usize];
    let cap_pages = [1, 2, 3, 5, 8, 16, 32][rng.below(7) as usize];
    let mut p = CacheParams::with_capacity(cap_pages * PAGE);
    p.write_mode = mode;
    p.eviction = EVICTIONS[rng.below(EVICTIONS.len() as u64) as usize].into();
    let low = rng.below(60) as f64 / 100.0;
    p.low_watermark = low;
    p.high_watermark = (low + rng.below(50) as f64 / 100.0).min(1.0);
    // Short idle flushes (50 µs) happen during the run; 0 = off.
    p.idle_flush_ms = if rng.chance(50) { 0.05 } else { 0.0 };
    if rng.chance(30) {
        p.admission = Admission::NHit;
        p.admission_hits = 1 + rng.below(3) as u32;
        p.admission_table_pages = Some(rng.below(16));
    }
    if rng.chance(25) {
        p.sequential_bypass_bytes = ByteCount((1 + rng.below(4)) * PAGE);
    }
    p.max_flush_bytes = ByteCount((1 + rng.below(8)) * PAGE);
    p.flush_iodepth = 1 + rng.below(4) as u32;
    // Paced write-back (its timers interleave with everything): off, or a
    // floor of 1 to 64 pages per ms of the harness's clock, active for
    // 10 µs to 1 ms after a host IO.
    if rng.chance(30) {
        p.writeback_rate_p_s = 0.0;
    } else {
        p.writeback_rate_min_bytes = ByteCount((1 + rng.below(64)) * PAGE * 1000);
        p.writeback_idle_ms = [0.01, 0.1, 1.0][rng.below(3) as usize];
    }
    // Persistent slot metadata: commits, deferred slot reuse, FLUSHes
    // waiting for commits (the data rules must hold unchanged).
    p.persistent = rng.chance(30);
    // The slots the case asks for, persistent metadata on top.
    p.capacity_bytes = ByteCount(cache::capacity_bytes_for(cap_pages, PAGE, p.persistent));
    p
}

fn random_delay(rng: &mut Rng) -> u64 {
    if rng.chance(20) {
        1
    } else {
        1 + rng.below(200_000)
    }
}

/// Sums of the counters the coverage asserts look at.
#[derive(Debug, Default)]
struct Totals {
    reached: Reached,
    stats: CacheStats,
    write_back_runs: u64,
}

impl Totals {
    fn add(&mut self, r: &Reached, s: &CacheStats, write_back: bool) {
        self.reached.add(r);
        let t = &mut self.stats;
        t.trims += s.trims;
        t.trimmed_pages += s.trimmed_pages;
        t.trimmed_dirty_pages += s.trimmed_dirty_pages;
        t.trim_kept_pages += s.trim_kept_pages;
        t.trim_raced_flushes += s.trim_raced_flushes;
        t.drain_dirty_pages += s.drain_dirty_pages;
        t.drain_evicting_pages += s.drain_evicting_pages;
        t.flush_ios += s.flush_ios;
        self.write_back_runs += u64::from(write_back);
    }
}

/// Everything interleaved: reads, writes, trims, flushes, `locate`, every
/// mode and end.
#[test]
fn cache_never_loses_reorders_or_serves_stale_data() {
    let n = cases(1000);
    let mut t = Totals::default();
    for seed in 0..n {
        let mut rng = Rng(seed * 7919 + 1);
        let p = random_params(&mut rng);
        let mut case = random_case(&mut rng, seed % 2 == 1);
        case.end = match rng.below(3) {
            0 if p.idle_flush_ms > 0.0 => End::Idle,
            1 => End::Drain,
            _ => End::FlushAll,
        };
        case.drain_early = rng.chance(50);
        let mut cache = Cache::new(&p).unwrap();
        let max_delay = random_delay(&mut rng);
        let (failures, reached) = run(&mut cache, seed, &case, max_delay);
        assert!(
            failures.is_empty(),
            "seed {seed} ({p:?}, {case:?}, delay {max_delay}): {failures:#?}"
        );
        t.add(
            &reached,
            &cache.stats(),
            p.write_mode == WriteMode::WriteBack,
        );
    }
    eprintln!("coverage {t:?}");
    if n >= 100 {
        let r = &t.reached;
        let paths = [
            r.trims,
            r.flushes,
            r.drains,
            r.zero_reads,
            r.writes_after_trim,
            r.located_units_per_tier[0],
            r.located_units_per_tier[1],
            t.stats.trimmed_dirty_pages,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// `drain` after random write-heavy runs over tiny caches (dirty pages
/// waiting for their eviction write-back when it is called), sometimes
/// with host IOs still in flight.
#[test]
fn cache_drain_leaves_every_page_on_the_backing_device() {
    let n = cases(400);
    let mut t = Totals::default();
    for seed in 0..n {
        let mut rng = Rng(seed * 15_485_863 + 5);
        let mut p = random_params(&mut rng);
        if rng.chance(70) {
            p.write_mode = WriteMode::WriteBack;
        }
        // High watermarks: many dirty pages left for the drain.
        p.low_watermark = 0.9;
        p.high_watermark = 1.0;
        let with_trims = rng.chance(50);
        let mut case = random_case(&mut rng, with_trims);
        case.w.write_pct = case
            .w
            .write_pct
            .max(50)
            .min(95 - case.w.trim_pct - case.w.flush_pct);
        case.w.ios = 50 + rng.below(200);
        case.end = End::Drain;
        case.drain_early = rng.chance(50);
        let mut cache = Cache::new(&p).unwrap();
        let max_delay = random_delay(&mut rng);
        let (failures, reached) = run(&mut cache, seed, &case, max_delay);
        assert!(
            failures.is_empty(),
            "seed {seed} ({p:?}, {case:?}, delay {max_delay}): {failures:#?}"
        );
        t.add(
            &reached,
            &cache.stats(),
            p.write_mode == WriteMode::WriteBack,
        );
    }
    eprintln!("coverage {t:?}");
    if n >= 100 {
        let paths = [
            t.stats.drain_dirty_pages,
            t.stats.drain_evicting_pages,
            t.reached.drains_with_host_io,
            t.write_back_runs,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// Trim-heavy runs: trims of clean, dirty, evicting and flushing pages,
/// then reads and rewrites of them.
#[test]
fn cache_trims_drop_pages_and_never_expose_older_data() {
    let n = cases(500);
    let mut t = Totals::default();
    for seed in 0..n {
        let mut rng = Rng(seed * 32_452_843 + 7);
        let mut p = random_params(&mut rng);
        if rng.chance(60) {
            p.write_mode = WriteMode::WriteBack;
        }
        let mut case = random_case(&mut rng, true);
        case.w.trim_pct = 15 + rng.below(20);
        case.w.write_pct = 30 + rng.below(30);
        case.pages = 4 + rng.below(24);
        case.end = [End::FlushAll, End::Drain][rng.below(2) as usize];
        let mut cache = Cache::new(&p).unwrap();
        let max_delay = random_delay(&mut rng);
        let (failures, reached) = run(&mut cache, seed, &case, max_delay);
        assert!(
            failures.is_empty(),
            "seed {seed} ({p:?}, {case:?}, delay {max_delay}): {failures:#?}"
        );
        t.add(
            &reached,
            &cache.stats(),
            p.write_mode == WriteMode::WriteBack,
        );
    }
    eprintln!("coverage {t:?}");
    if n >= 100 {
        let s = &t.stats;
        let paths = [
            s.trimmed_dirty_pages,
            s.trimmed_pages - s.trimmed_dirty_pages,
            s.trim_kept_pages,
            s.trim_raced_flushes,
            t.reached.zero_reads,
            t.reached.writes_after_trim,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// `locate` at random points of random runs: cached, dirty, evicting,
/// filling pages and uncached ones.
#[test]
fn cache_locate_reports_where_a_read_would_go() {
    let n = cases(300);
    let mut t = Totals::default();
    for seed in 0..n {
        let mut rng = Rng(seed * 49_979_687 + 9);
        let p = random_params(&mut rng);
        let mut case = random_case(&mut rng, true);
        case.w.locate_pct = 30;
        let mut cache = Cache::new(&p).unwrap();
        let max_delay = random_delay(&mut rng);
        let (failures, reached) = run(&mut cache, seed, &case, max_delay);
        assert!(
            failures.is_empty(),
            "seed {seed} ({p:?}, {case:?}, delay {max_delay}): {failures:#?}"
        );
        t.add(
            &reached,
            &cache.stats(),
            p.write_mode == WriteMode::WriteBack,
        );
    }
    eprintln!("coverage {t:?}");
    if n >= 100 {
        let r = &t.reached;
        assert!(
            r.located_units_per_tier[0] > 0 && r.located_units_per_tier[1] > 0,
            "coverage {t:?}"
        );
    }
}

#[test]
fn flashcache_never_loses_reorders_or_serves_stale_data() {
    let n = cases(500);
    let mut t = Totals::default();
    for seed in 0..n {
        let mut rng = Rng(seed * 104_729 + 3);
        let assoc = [1, 2, 4, 8][rng.below(4) as usize];
        let sets = 1 + rng.below(4);
        let persistent = rng.chance(30);
        let mut p = FlashcacheParams::with_capacity(cache::capacity_bytes_for(
            assoc * sets,
            PAGE,
            persistent,
        ));
        p.persistent = persistent;
        p.associativity = assoc;
        p.replacement = if rng.chance(50) {
            SetReplacement::Fifo
        } else {
            SetReplacement::Lru
        };
        p.dirty_thresh_pct = rng.below(101) as f64;
        p.max_flush_bytes = ByteCount((1 + rng.below(8)) * PAGE);
        p.idle_flush_ms = if rng.chance(50) { 0.05 } else { 0.0 };
        let mut case = random_case(&mut rng, seed % 2 == 1);
        case.end = match rng.below(3) {
            0 if p.idle_flush_ms > 0.0 => End::Idle,
            1 => End::Drain,
            _ => End::FlushAll,
        };
        case.drain_early = rng.chance(50);
        let mut cache = flashcache::new(&p).unwrap();
        let max_delay = 1 + rng.below(200_000);
        let (failures, reached) = run(&mut cache, seed, &case, max_delay);
        assert!(
            failures.is_empty(),
            "seed {seed} ({p:?}, {case:?}, delay {max_delay}): {failures:#?}"
        );
        t.add(&reached, &cache.stats(), true);
    }
    eprintln!("coverage {t:?}");
    if n >= 100 {
        let s = &t.stats;
        let paths = [
            s.trimmed_dirty_pages,
            s.drain_dirty_pages,
            t.reached.zero_reads,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// Device errors: 1–4 % of device IOs fail (a failed write lands on a
/// random subset of its pages or on none). The page cache in every mode
/// and flashcache fail only the host IOs that needed a failed IO and go on
/// — reads never return data older than the newest acknowledged, the
/// backing device never goes back, the drain still ends — except that a
/// persistent cache stops (fail-stop) at a failed metadata IO.
#[test]
fn caches_survive_device_errors_and_keep_the_host_model() {
    let n = cases(400);
    let mut t = Totals::default();
    let mut flashcache_runs = 0;
    for seed in 0..n {
        let mut rng = Rng(seed * 7_368_787 + 11);
        let mut case = random_case(&mut rng, seed % 2 == 1);
        case.end = End::Drain;
        case.drain_early = rng.chance(50);
        case.device_error_per_mille = 10 + rng.below(31);
        let max_delay = random_delay(&mut rng);
        let (failures, reached, persistent, stats, what) = if rng.chance(30) {
            flashcache_runs += 1;
            let assoc = [1, 2, 4, 8][rng.below(4) as usize];
            let blocks = assoc * (1 + rng.below(4));
            let persistent = rng.chance(30);
            let mut p = FlashcacheParams::with_capacity(cache::capacity_bytes_for(
                blocks, PAGE, persistent,
            ));
            p.associativity = assoc;
            p.dirty_thresh_pct = rng.below(101) as f64;
            p.persistent = persistent;
            let mut cache = flashcache::new(&p).unwrap();
            let (f, r) = run(&mut cache, seed, &case, max_delay);
            (f, r, p.persistent, cache.stats(), format!("{p:?}"))
        } else {
            let p = random_params(&mut rng);
            let mut cache = Cache::new(&p).unwrap();
            let (f, r) = run(&mut cache, seed, &case, max_delay);
            (f, r, p.persistent, cache.stats(), format!("{p:?}"))
        };
        assert!(
            failures.is_empty(),
            "seed {seed} ({what}, {case:?}, delay {max_delay}): {failures:#?}\n{stats:?}\n{reached:?}"
        );
        assert!(
            reached.stopped_runs == 0 || persistent,
            "seed {seed} ({what}): stopped at a device error without persistent metadata"
        );
        t.add(&reached, &stats, true);
    }
    eprintln!("coverage {t:?}, {flashcache_runs} flashcache runs");
    if n >= 100 {
        let r = &t.reached;
        let paths = [
            r.device_errors,
            r.host_ios_failed,
            r.stopped_runs,
            r.drains,
            flashcache_runs,
        ];
        assert!(paths.iter().all(|&x| x > 0), "coverage {t:?}");
    }
}

/// A cache that answers the host IOs a device error failed as done: the
/// harness must catch it (a failed read's data is missing, a failed
/// write's version is taken as acknowledged and later reads find older).
struct AcksFailures(Cache);

impl AcksFailures {
    fn lie(out: &mut Outbox) {
        for (host, _) in std::mem::take(&mut out.failed) {
            out.complete.push((host, 0));
        }
    }
}

impl Policy for AcksFailures {
    fn name(&self) -> &str {
        "acks-failures"
    }
    fn tier_names(&self) -> Vec<String> {
        self.0.tier_names()
    }
    fn on_host_io(&mut self, now: u64, io: HostIo, out: &mut Outbox) {
        self.0.on_host_io(now, io, out);
        Self::lie(out);
    }
    fn on_device_completion(&mut self, now: u64, device: usize, tag: u64, out: &mut Outbox) {
        self.0.on_device_completion(now, device, tag, out);
        Self::lie(out);
    }
    fn on_device_error(
        &mut self,
        now: u64,
        device: usize,
        tag: u64,
        error: tierlab_core::policy::IoError,
        out: &mut Outbox,
    ) -> bool {
        let survived = self.0.on_device_error(now, device, tag, error, out);
        Self::lie(out);
        survived
    }
    fn on_timer(&mut self, now: u64, id: u64, out: &mut Outbox) {
        self.0.on_timer(now, id, out);
        Self::lie(out);
    }
    fn counters(&self) -> Vec<(&'static str, f64)> {
        self.0.counters()
    }
    fn drain(&mut self, now: u64, out: &mut Outbox) {
        self.0.drain(now, out);
        Self::lie(out);
    }
    fn is_drained(&self) -> bool {
        self.0.is_drained()
    }
}

impl Target for AcksFailures {}

#[test]
fn the_harness_catches_a_cache_that_acknowledges_failed_ios() {
    let mut caught = 0;
    for seed in 0..40 {
        let mut rng = Rng(seed * 31 + 7);
        let mut case = random_case(&mut rng, false);
        case.w.write_pct = 60;
        let mut p = CacheParams::with_capacity(8 * PAGE);
        p.persistent = false;
        p.write_mode = WriteMode::WriteBack;
        let mut policy = AcksFailures(Cache::new(&p).unwrap());
        let g = Geometry::backed(
            PAGE,
            vec![policy.0.cache_device_bytes(), case.pages * PAGE],
            BACKING_DEVICE,
            case.pages,
        );
        let mut sim = Sim::new(seed, 1000, g, 2);
        sim.device_error_per_mille = 30;
        let mut out = Sim::outbox();
        issue_workload(&mut sim, &mut policy, &mut out, &case.w);
        complete_host_ios(&mut sim, &mut policy, &mut out);
        sim.drain_and_check(&mut policy, &mut out);
        assert_eq!(
            sim.reached.host_ios_failed, 0,
            "every failure was turned into a completion"
        );
        caught += u64::from(!sim.failures.is_empty());
    }
    eprintln!("caught in {caught} of 40 runs");
    assert!(caught >= 20, "caught in only {caught} of 40 runs");
}

/// A deterministic executor over the cache alone (no delays), for the
/// direct tests below.
fn direct_sim(pages: u64, cache: &Cache) -> (Sim, Outbox) {
    let g = Geometry::backed(
        PAGE,
        vec![cache.cache_device_bytes(), pages * PAGE],
        BACKING_DEVICE,
        pages,
    );
    (Sim::new(1, 10, g, 2), Sim::outbox())
}

/// Issues one host IO and runs to completion.
fn io_to_end(c: &mut Cache, sim: &mut Sim, out: &mut Outbox, op: Op, first: u64, n: u64) {
    sim.issue(c, out, op, first, n);
    while sim.step(c, out) {}
}

fn newest(sim: &Sim, page: u64) -> Data {
    Data::Block {
        unit: page,
        version: sim.acked(page).0,
    }
}

/// The data path itself: hits are served by the cache device, a run of
/// pages in consecutive slots is one device IO (write, read back, and the
/// write-back's slot read), dirty adjacent pages are flushed as one merged
/// write, counters add up.
#[test]
fn hits_merging_and_counters() {
    let mut p = CacheParams::with_capacity(64 * PAGE);
    p.persistent = false;
    p.idle_flush_ms = 0.0;
    let mut c = Cache::new(&p).unwrap();
    let (mut sim, mut out) = direct_sim(64, &c);
    // Write 4 pages (write-back: cache device only), then read them back.
    sim.issue(&mut c, &mut out, Op::Write, 10, 4);
    assert_eq!(sim.device_ios_in_flight(), 1, "slots 0..4: one write");
    assert_eq!(sim.in_flight_on(BACKING_DEVICE), 0);
    while sim.step(&mut c, &mut out) {}
    sim.issue(&mut c, &mut out, Op::Read, 10, 4);
    assert_eq!(sim.device_ios_in_flight(), 1, "one read of slots 0..4");
    assert_eq!(sim.in_flight_on(BACKING_DEVICE), 0);
    while sim.step(&mut c, &mut out) {}
    assert!(sim.failures.is_empty(), "{:?}", sim.failures);
    let s = c.stats();
    assert_eq!(
        (s.write_misses, s.read_hits, s.dirty_bytes),
        (4, 4, 4 * PAGE)
    );
    assert_eq!((s.host_ios, s.host_ios_cache_only), (2, 2));
    assert_eq!(s.memory_access_ratio(), 1.0);
    // One merged 16 KiB flush write, its pages read in one slot read.
    c.flush_all(&mut out);
    sim.apply(&c, &mut out);
    assert_eq!(sim.in_flight_on(CACHE_DEVICE), 1);
    while sim.step(&mut c, &mut out) {}
    let s = c.stats();
    assert_eq!(
        (s.flush_ios, s.flush_bytes, s.dirty_bytes),
        (1, 4 * PAGE, 0)
    );
    assert_eq!(sim.backing(12), newest(&sim, 12));
}

#[test]
fn bad_parameters_are_errors_not_panics() {
    let mut p = CacheParams::with_capacity(100);
    p.persistent = false;
    assert!(Cache::new(&p).is_err());
    p.capacity_bytes = ByteCount(1 << 20);
    p.page_size_bytes = ByteCount(3000);
    assert!(Cache::new(&p).is_err());
    p.page_size_bytes = ByteCount(4096);
    p.eviction = "nope".into();
    assert!(Cache::new(&p).is_err());
    p.eviction = "lru".into();
    p.low_watermark = 0.9;
    assert!(Cache::new(&p).is_err());
    assert!(flashcache::new(&FlashcacheParams::with_capacity(1 << 20)).is_err());
    // One set of 512 blocks, with and without its persistent metadata.
    assert!(flashcache::new(&FlashcacheParams::with_capacity(2 << 20)).is_err());
    let mut fp = FlashcacheParams::with_capacity(cache::capacity_bytes_for(512, PAGE, true));
    assert!(flashcache::new(&fp).is_ok());
    fp.persistent = false;
    fp.capacity_bytes = ByteCount(2 << 20);
    assert!(flashcache::new(&fp).is_ok());
}

#[test]
fn flashcache_cleans_a_set_past_its_dirty_threshold() {
    // 2 sets of 4 blocks, threshold 50 %: a set may hold 2 dirty blocks.
    let mut p = FlashcacheParams::with_capacity(8 * PAGE);
    p.persistent = false;
    p.associativity = 4;
    p.dirty_thresh_pct = 50.0;
    let mut c = flashcache::new(&p).unwrap();
    assert_eq!(c.capacity_pages(), 8);
    let (mut sim, mut out) = direct_sim(64, &c);
    // Blocks 0..2 are set 0 ((block / 4) % 2 == 0): two dirty is allowed.
    io_to_end(&mut c, &mut sim, &mut out, Op::Write, 0, 2);
    assert_eq!((c.dirty_pages(), c.stats().flush_ios), (2, 0));
    // Block 8 is set 0 again ((8 / 4) % 2): three dirty > 2, so the oldest
    // dirty blocks (0 and 1, adjacent: one merged write) are cleaned.
    io_to_end(&mut c, &mut sim, &mut out, Op::Write, 8, 1);
    let s = c.stats();
    assert_eq!((s.flush_ios, s.flush_bytes), (1, 2 * PAGE));
    assert_eq!(c.dirty_pages(), 1);
    assert_eq!(
        (sim.backing(0), sim.backing(1)),
        (newest(&sim, 0), newest(&sim, 1))
    );
    // Block 4 is set 1: untouched by set 0's cleaning.
    io_to_end(&mut c, &mut sim, &mut out, Op::Write, 4, 1);
    assert_eq!((c.dirty_pages(), c.stats().flush_ios), (2, 1));
    assert!(sim.failures.is_empty(), "{:?}", sim.failures);
}

/// One write that fills a set past its threshold by itself: its pages are
/// not cleanable while their slot writes are in flight, so the cleaning
/// must happen as they land — not wait for the next write to the set
/// (found serving flashcache: a 1 MiB write left 256 dirty blocks in a set
/// whose threshold is 102).
#[test]
fn flashcache_cleans_a_set_one_write_filled_past_its_threshold() {
    let mut p = FlashcacheParams::with_capacity(8 * PAGE);
    p.persistent = false;
    p.associativity = 4;
    p.dirty_thresh_pct = 50.0;
    let mut c = flashcache::new(&p).unwrap();
    let (mut sim, mut out) = direct_sim(64, &c);
    // Blocks 0..4: all of set 0, four dirty where two are allowed.
    io_to_end(&mut c, &mut sim, &mut out, Op::Write, 0, 4);
    assert!(
        c.dirty_pages() < 2,
        "set 0 still holds {} dirty blocks after the write settled (threshold 2)",
        c.dirty_pages()
    );
    assert!(c.stats().flush_ios >= 1);
    // What was cleaned is on the backing device, newest version.
    let cleaned = (0..4)
        .filter(|&b| sim.backing(b) == newest(&sim, b))
        .count() as u64;
    assert_eq!(cleaned, 4 - c.dirty_pages());
    assert!(sim.failures.is_empty(), "{:?}", sim.failures);
}

/// One 1 MiB write fills a quarter of a 1,024-block set whose threshold is
/// 20 %: it lands as one cache write, and the cleaning it starts writes the
/// set's run back in merged writes (one per 1 MiB `max_flush_bytes`), not
/// a block at a time.
#[test]
fn flashcache_cleans_a_written_run_in_merged_writes() {
    let mut p = FlashcacheParams::with_capacity(1024 * PAGE);
    p.persistent = false;
    p.associativity = 1024;
    p.sequential_bypass_bytes = ByteCount(0);
    let mut c = flashcache::new(&p).unwrap();
    let (mut sim, mut out) = direct_sim(4096, &c);
    sim.issue(&mut c, &mut out, Op::Write, 0, 256);
    assert_eq!(
        sim.in_flight_on(CACHE_DEVICE),
        1,
        "one cache write of 256 blocks"
    );
    while sim.step(&mut c, &mut out) {}
    let s = c.stats();
    // Threshold 204 blocks: the whole run goes, merged (flush_run takes its
    // neighbours up to 256 blocks = 1 MiB).
    assert!(c.dirty_pages() <= 204, "{} dirty", c.dirty_pages());
    assert_eq!(
        (s.flush_ios, s.flush_bytes),
        (1, 256 * PAGE),
        "one merged write-back"
    );
    assert!(sim.failures.is_empty(), "{:?}", sim.failures);
}

#[test]
fn write_modes_route_writes_and_set_tiers() {
    for (mode, cache_ios, backing_ios, tier0) in [
        (WriteMode::WriteBack, 1, 0, 1),
        (WriteMode::WriteThrough, 1, 1, 0),
        (WriteMode::WriteAround, 0, 1, 0),
    ] {
        let mut p = CacheParams::with_capacity(16 * PAGE);
        p.persistent = false;
        p.write_mode = mode;
        p.idle_flush_ms = 0.0;
        let mut c = Cache::new(&p).unwrap();
        let mut out = Outbox::default();
        c.on_host_io(
            0,
            HostIo {
                id: 1,
                op: Op::Write,
                offset_bytes: 0,
                size_bytes: PAGE as u32,
                tenant: 0,
            },
            &mut out,
        );
        let on = |d| out.device_ios.iter().filter(|(x, _)| *x == d).count();
        assert_eq!((on(0), on(1)), (cache_ios, backing_ios), "{mode:?}");
        let ios: Vec<_> = out.device_ios.drain(..).collect();
        for (d, io) in ios {
            c.on_device_completion(5, d, io.tag, &mut out);
        }
        assert_eq!(out.complete.len(), 1, "{mode:?}");
        assert_eq!(c.stats().host_ios_cache_only, tier0, "{mode:?}");
    }
}

#[test]
fn n_hit_admission_and_sequential_bypass() {
    let mut p = CacheParams::with_capacity(64 * PAGE);
    p.persistent = false;
    p.admission = Admission::NHit;
    p.admission_hits = 2;
    p.idle_flush_ms = 0.0;
    let mut c = Cache::new(&p).unwrap();
    let (mut sim, mut out) = direct_sim(64, &c);
    io_to_end(&mut c, &mut sim, &mut out, Op::Write, 5, 1);
    // First miss: not admitted, written to the backing device.
    assert_eq!((c.dirty_pages(), sim.backing(5)), (0, newest(&sim, 5)));
    io_to_end(&mut c, &mut sim, &mut out, Op::Write, 5, 1);
    assert_eq!(c.dirty_pages(), 1);

    let mut p = CacheParams::with_capacity(64 * PAGE);
    p.persistent = false;
    p.sequential_bypass_bytes = ByteCount(2 * PAGE);
    p.idle_flush_ms = 0.0;
    let mut c = Cache::new(&p).unwrap();
    let (mut sim, mut out) = direct_sim(64, &c);
    // A sequential stream: cached until its run reaches the cutoff (the
    // IO that reaches it included, as bcache counts), then bypassed.
    for i in 0..4 {
        io_to_end(&mut c, &mut sim, &mut out, Op::Write, 20 + i, 1);
    }
    let s = c.stats();
    assert_eq!((c.dirty_pages(), s.bypassed_pages), (1, 3));
    assert_eq!((s.bypassed_ios, s.bypassed_bytes), (3, 3 * PAGE));
    assert_eq!(sim.backing(23), newest(&sim, 23));
    let mut p = CacheParams::with_capacity(64 * PAGE);
    p.persistent = false;
    p.eviction = "belady".into();
    assert!(Cache::new(&p).is_err());
}

/// Trims by hand, each step in a chosen order: a trim of pages being
/// flushed keeps them; one of idle clean pages drops them; one of a dirty
/// page drops it without a write-back; the backing device is trimmed every
/// time; host flushes complete at once; `locate` follows.
#[test]
fn trims_drop_idle_pages_and_keep_pages_being_flushed() {
    let mut p = CacheParams::with_capacity(16 * PAGE);
    p.persistent = false;
    p.idle_flush_ms = 0.0;
    let mut c = Cache::new(&p).unwrap();
    let mut out = Sim::outbox();
    let host = |id, op, first: u64, n: u64| HostIo {
        id,
        op,
        offset_bytes: first * PAGE,
        size_bytes: (n * PAGE) as u32,
        tenant: 0,
    };
    let finish_all = |c: &mut Cache, out: &mut Outbox| {
        let mut done = Vec::new();
        out.data.clear();
        while let Some((d, io)) = out.device_ios.pop() {
            c.on_device_completion(1, d, io.tag, out);
            out.data.clear();
            done.append(&mut out.complete);
        }
        done
    };
    // Pages 0..4 dirty.
    c.on_host_io(0, host(1, Op::Write, 0, 4), &mut out);
    assert_eq!(finish_all(&mut c, &mut out), vec![(1, TIER_CACHE)]);
    assert_eq!(c.dirty_pages(), 4);
    // A flush of them starts (one read of their 4 consecutive slots) ...
    c.flush_all(&mut out);
    out.data.clear();
    let flush_reads: Vec<_> = out.device_ios.drain(..).collect();
    assert_eq!(flush_reads.len(), 1);
    assert_eq!(flush_reads[0].1.size_bytes, 4 * PAGE as u32);
    // ... and a trim of pages 2..6 arrives: one backing trim, no data.
    c.on_host_io(0, host(2, Op::Trim, 2, 4), &mut out);
    assert_eq!(out.device_ios.len(), 1);
    let (d, trim) = out.device_ios.pop().unwrap();
    assert_eq!(
        (d, trim.op, trim.offset_bytes, trim.size_bytes),
        (BACKING_DEVICE, Op::Trim, 2 * PAGE, 4 * PAGE as u32)
    );
    assert!(out.data.is_empty());
    // The trim completes first: pages 2 and 3 are being flushed, so kept.
    c.on_device_completion(1, d, trim.tag, &mut out);
    assert_eq!(out.complete, vec![(2, TIER_BACKING)]);
    out.complete.clear();
    let s = c.stats();
    assert_eq!(
        (s.trim_raced_flushes, s.trim_kept_pages, s.trimmed_pages),
        (2, 2, 0)
    );
    // The flush ends: everything clean, still cached.
    out.device_ios = flush_reads;
    finish_all(&mut c, &mut out);
    assert!(c.is_quiescent());
    let mut ext = Vec::new();
    c.locate(0, 4 * PAGE, &mut ext);
    assert_eq!(
        (ext.len(), ext[0].tier, ext[0].len_bytes),
        (1, TIER_CACHE, 4 * PAGE)
    );
    // A trim of idle clean pages 0..2 drops them when the backing trim ends.
    c.on_host_io(0, host(3, Op::Trim, 0, 2), &mut out);
    assert_eq!(finish_all(&mut c, &mut out), vec![(3, TIER_BACKING)]);
    let s = c.stats();
    assert_eq!((s.trimmed_pages, s.trimmed_dirty_pages), (2, 0));
    // A dirty page trimmed: dropped, no write-back.
    c.on_host_io(0, host(4, Op::Write, 8, 1), &mut out);
    finish_all(&mut c, &mut out);
    assert_eq!(c.dirty_pages(), 1);
    c.on_host_io(0, host(5, Op::Trim, 8, 1), &mut out);
    finish_all(&mut c, &mut out);
    let s = c.stats();
    assert_eq!(
        (s.trimmed_pages, s.trimmed_dirty_pages, s.flush_ios),
        (3, 1, 1)
    );
    assert!(c.is_drained() && c.dirty_pages() == 0);
    // Where things are now: 0..2 backing, 2..4 cache, 4.. backing.
    ext.clear();
    c.locate(PAGE / 2, 5 * PAGE, &mut ext);
    let tiers: Vec<(u16, usize, u64)> = ext
        .iter()
        .map(|e| (e.tier, e.device, e.len_bytes))
        .collect();
    assert_eq!(
        tiers,
        vec![
            (TIER_BACKING, BACKING_DEVICE, 3 * PAGE / 2),
            (TIER_CACHE, CACHE_DEVICE, 2 * PAGE),
            (TIER_BACKING, BACKING_DEVICE, 3 * PAGE / 2),
        ]
    );
    assert_eq!(ext[0].device_offset_bytes, PAGE / 2);
    // Nothing dirty: a host flush completes at once, with no device IO.
    c.on_host_io(0, host(6, Op::Flush, 0, 0), &mut out);
    assert!(out.device_ios.is_empty());
    assert_eq!(out.complete, vec![(6, TIER_BACKING)]);
}

/// A host FLUSH in write-back mode completes only once every page dirty
/// when it arrived has been written back (a restart starts cold, so only
/// the backing device counts); a write arriving after the FLUSH is not
/// waited for; write-through has nothing dirty and completes at once.
#[test]
fn a_flush_completes_after_the_write_back_of_the_pages_dirty_when_it_came() {
    let mut p = CacheParams::with_capacity(16 * PAGE);
    p.persistent = false;
    p.idle_flush_ms = 0.0;
    let mut c = Cache::new(&p).unwrap();
    let mut out = Sim::outbox();
    let host = |id, op, first: u64, n: u64| HostIo {
        id,
        op,
        offset_bytes: first * PAGE,
        size_bytes: (n * PAGE) as u32,
        tenant: 0,
    };
    // Pages 0..2 dirty (the slot writes done).
    c.on_host_io(0, host(1, Op::Write, 0, 2), &mut out);
    let ios: Vec<_> = out.device_ios.drain(..).collect();
    out.data.clear();
    for (d, io) in &ios {
        c.on_device_completion(1, *d, io.tag, &mut out);
    }
    assert_eq!(out.complete, vec![(1, TIER_CACHE)]);
    out.complete.clear();
    assert_eq!(c.dirty_pages(), 2);
    // The FLUSH: not complete; the write-back starts (cache-device reads).
    c.on_host_io(2, host(2, Op::Flush, 0, 0), &mut out);
    assert!(out.complete.is_empty(), "FLUSH waits for the write-back");
    let reads: Vec<_> = out.device_ios.drain(..).collect();
    out.data.clear();
    assert!(
        !reads.is_empty()
            && reads
                .iter()
                .all(|(d, io)| *d == CACHE_DEVICE && io.op == Op::Read)
    );
    // A write after the FLUSH, to page 5: not waited for.
    c.on_host_io(3, host(3, Op::Write, 5, 1), &mut out);
    let later: Vec<_> = out.device_ios.drain(..).collect();
    out.data.clear();
    for (d, io) in reads {
        c.on_device_completion(4, d, io.tag, &mut out);
    }
    assert!(out.complete.is_empty(), "the backing write has not landed");
    let writes: Vec<_> = out.device_ios.drain(..).collect();
    out.data.clear();
    assert_eq!(writes.len(), 1, "pages 0..2 in one merged write");
    assert_eq!((writes[0].0, writes[0].1.op), (BACKING_DEVICE, Op::Write));
    c.on_device_completion(5, writes[0].0, writes[0].1.tag, &mut out);
    assert_eq!(
        out.complete,
        vec![(2, TIER_BACKING)],
        "FLUSH done with its pages"
    );
    out.complete.clear();
    out.device_ios.clear();
    out.data.clear();
    for (d, io) in later {
        c.on_device_completion(6, d, io.tag, &mut out);
    }
    assert_eq!(c.stats().flush_waits, 1);
    // Write-through: nothing dirty, the FLUSH completes at once.
    let mut p = CacheParams::with_capacity(16 * PAGE);
    p.persistent = false;
    p.write_mode = WriteMode::WriteThrough;
    let mut c = Cache::new(&p).unwrap();
    let mut out = Sim::outbox();
    c.on_host_io(0, host(1, Op::Flush, 0, 0), &mut out);
    assert!(out.device_ios.is_empty());
    assert_eq!(out.complete, vec![(1, TIER_BACKING)]);
}

/// Persistent metadata is carved out of `capacity_bytes`, by hand: 32 MiB
/// holds 8,094 slots (33,153,024 bytes) and their area, 2 × (1 +
/// ⌈8094 / 169⌉ = 49) × 4 KiB = 401,408 bytes: 33,554,432 exactly; one
/// slot more needs 4 KiB more. Without persistence: 8,192 slots.
#[test]
fn persistent_metadata_is_carved_out_of_the_capacity() {
    assert_eq!(cache::slots_in(32 << 20, PAGE, true), 8094);
    assert_eq!(cache::capacity_bytes_for(8094, PAGE, true), 32 << 20);
    assert_eq!(
        cache::capacity_bytes_for(8095, PAGE, true),
        (32 << 20) + PAGE
    );
    assert_eq!(cache::slots_in(32 << 20, PAGE, false), 8192);
    let c = Cache::new(&CacheParams::with_capacity(32 << 20)).unwrap();
    assert_eq!(
        (c.capacity_pages(), c.cache_device_bytes()),
        (8094, 32 << 20)
    );
}

/// Paced write-back, by hand: 32 dirty pages, none adjacent (one page per
/// write-back), a 25 % high watermark, a floor of 10 pages/s and a rate
/// that never exceeds it. While host IO is recent (the writes at t = 0,
/// active for 1 s) write-back goes at 10 pages per second after the bucket's
/// first page or two; once the host has been idle for 1 s, every dirty page
/// is written back at once (down to the low watermark, 0).
#[test]
fn watermark_write_back_is_paced_while_the_host_is_busy() {
    let mut p = CacheParams::with_capacity(64 * PAGE);
    p.persistent = false;
    p.idle_flush_ms = 0.0;
    p.high_watermark = 0.25;
    p.low_watermark = 0.0;
    p.max_flush_bytes = ByteCount(PAGE);
    p.flush_iodepth = 64;
    p.writeback_rate_p_s = 1e12;
    p.writeback_rate_min_bytes = ByteCount(10 * PAGE);
    p.writeback_idle_ms = 1000.0;
    let mut c = Cache::new(&p).unwrap();
    let mut out = Outbox::default();
    let mut timers: Vec<(u64, u64)> = Vec::new();
    let mut write_backs: Vec<u64> = Vec::new(); // their times
    // Completes every device IO at `now` (and what they start), keeping
    // timers and counting backing writes.
    let mut settle = |c: &mut Cache, out: &mut Outbox, now: u64, timers: &mut Vec<(u64, u64)>| {
        loop {
            timers.append(&mut out.timers);
            out.complete.clear();
            let ios: Vec<_> = out.device_ios.drain(..).collect();
            if ios.is_empty() {
                break;
            }
            for (d, io) in ios {
                if d == BACKING_DEVICE && io.op == Op::Write {
                    write_backs.push(now);
                }
                c.on_device_completion(now, d, io.tag, out);
            }
        }
    };
    for i in 0..32u64 {
        let io = HostIo {
            id: i,
            op: Op::Write,
            offset_bytes: 2 * i * PAGE,
            size_bytes: PAGE as u32,
            tenant: 0,
        };
        c.on_host_io(0, io, &mut out);
        settle(&mut c, &mut out, 0, &mut timers);
    }
    // Time goes on through the pacing timers only.
    while let Some(k) = (0..timers.len()).min_by_key(|&k| timers[k].0) {
        let (at, id) = timers.swap_remove(k);
        c.on_timer(at, id, &mut out);
        settle(&mut c, &mut out, at, &mut timers);
    }
    let busy = write_backs.iter().filter(|&&t| t < 1_000_000_000).count();
    // The bucket's page, one more on the empty bucket, then one every 0.1 s
    // until t = 1 s: 2 + 9 or 10.
    assert!(
        (11..=12).contains(&busy),
        "{busy} write-backs while busy: {write_backs:?}"
    );
    assert!(write_backs.windows(2).all(|w| w[1] >= w[0]));
    // The rest once idle, all at one instant; nothing dirty is left.
    let idle: Vec<u64> = write_backs[busy..].to_vec();
    assert_eq!(idle.len(), 32 - busy);
    assert!(
        idle.iter().all(|&t| t == idle[0] && t >= 1_000_000_000),
        "{idle:?}"
    );
    assert_eq!(c.dirty_pages(), 0);
}

/// The sequential cutoff takes a copy, not a log: 2-page appends each
/// followed by a FLUSH (a write-ahead log) stay cached past the cutoff,
/// while the same appends with no FLUSH between them are bypassed from the
/// IO that reaches it on (persistent: a FLUSH writes nothing back).
#[test]
fn a_log_flushed_as_it_goes_is_not_cut_off() {
    for flushed in [true, false] {
        let mut p = CacheParams::with_capacity(cache::capacity_bytes_for(256, PAGE, true));
        p.sequential_bypass_bytes = ByteCount(16 * PAGE);
        p.idle_flush_ms = 0.0;
        let mut c = Cache::new(&p).unwrap();
        let (mut sim, mut out) = direct_sim(1024, &c);
        for k in 0..32 {
            io_to_end(&mut c, &mut sim, &mut out, Op::Write, 2 * k, 2);
            if flushed {
                io_to_end(&mut c, &mut sim, &mut out, Op::Flush, 0, 0);
            }
        }
        let s = c.stats();
        let expect = if flushed { 0 } else { 32 - 7 };
        assert_eq!(s.bypassed_ios, expect, "flushed {flushed}: {s:?}");
        assert!(sim.failures.is_empty(), "{:?}", sim.failures);
    }
}
