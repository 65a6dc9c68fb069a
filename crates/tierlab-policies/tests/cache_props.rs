//! Write-back correctness of the page cache and flashcache, by randomized
//! property tests over many seeds.
//!
//! A tiny deterministic executor drives the policy: two devices complete
//! IOs after a pseudo-random delay (so out of order), timers fire in time
//! order. Data is modelled only through the device IOs the policy issues:
//! every page of data is a (logical page, version) pair; host writes carry
//! a fresh version per page; a device read copies the device's pages into
//! the buffer its tag names, a device write copies the buffer's pages (as
//! they are at submission) onto the device when it completes. Checked:
//! - a read returns, for every page, that page's data (not another page's)
//!   at a version no older than the newest write acknowledged before the
//!   read was issued, and no newer than the newest issued;
//! - the backing device's version of a page never goes backwards;
//! - after `flush_all` (or an idle flush) at quiescence nothing is dirty and
//!   the backing device holds the newest version of every page written;
//! - every host IO completes exactly once and nothing gets stuck.
//!
//! The host is well-formed: it never has two writes to one page in flight
//! at once (their order would be undefined on any block device), while
//! reads may overlap writes freely.

use std::collections::{BTreeMap, HashMap};

use tierlab_core::policy::{HostIo, Outbox, Policy};
use tierlab_core::{DeviceIo, Op};
use tierlab_policies::cache::{
    Admission, Buffer, ByteCount, Cache, CacheParams, WriteMode, decode_tag,
};
use tierlab_policies::flashcache::{self, FlashcacheParams, SetReplacement};

const PAGE: u64 = 4096;

/// splitmix64: a seeded, dependency-free RNG.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

type Data = (u64, u64); // (logical page, version)

struct PendingIo {
    device: usize,
    io: DeviceIo,
    /// For writes: the data taken from the buffer at submission.
    data: Vec<Data>,
}

struct HostState {
    first: u64,
    n: u64,
    op: Op,
    /// For reads: the newest acknowledged version per page at issue.
    floor: Vec<u64>,
}

struct Harness {
    rng: Rng,
    now: u64,
    max_delay: u64,
    seq: u64,
    /// (done time, seq) -> IO
    events: BTreeMap<(u64, u64), PendingIo>,
    timers: BTreeMap<(u64, u64), u64>,
    /// device -> device page -> data
    devices: [HashMap<u64, Data>; 2],
    host_bufs: HashMap<u64, Vec<Option<Data>>>,
    staging: HashMap<u64, HashMap<u64, Data>>,
    hosts: HashMap<u64, HostState>,
    latest_written: HashMap<u64, u64>,
    latest_acked: HashMap<u64, u64>,
    /// Pages with a host write in flight.
    writing: HashMap<u64, u32>,
    completed: u64,
    tier0: u64,
    failures: Vec<String>,
}

impl Harness {
    fn new(seed: u64, max_delay: u64) -> Harness {
        Harness {
            rng: Rng(seed),
            now: 0,
            max_delay,
            seq: 0,
            events: BTreeMap::new(),
            timers: BTreeMap::new(),
            devices: [HashMap::new(), HashMap::new()],
            host_bufs: HashMap::new(),
            staging: HashMap::new(),
            hosts: HashMap::new(),
            latest_written: HashMap::new(),
            latest_acked: HashMap::new(),
            writing: HashMap::new(),
            completed: 0,
            tier0: 0,
            failures: Vec::new(),
        }
    }

    fn fail(&mut self, msg: String) {
        if self.failures.len() < 5 {
            self.failures.push(msg);
        }
    }

    fn backing(&self, page: u64) -> Data {
        // The backing device starts with version 0 of every page.
        self.devices[1].get(&page).copied().unwrap_or((page, 0))
    }

    fn buffer_page(&self, buf: Buffer, idx: u64) -> Option<Data> {
        match buf {
            Buffer::Host(id) => self
                .host_bufs
                .get(&id)
                .and_then(|b| b.get(idx as usize).copied().flatten()),
            Buffer::Staging(id) => self.staging.get(&id).and_then(|s| s.get(&idx).copied()),
        }
    }

    fn drain(&mut self, out: &mut Outbox) {
        for (device, io) in out.device_ios.drain(..).collect::<Vec<_>>() {
            let (buf, idx) = decode_tag(io.tag);
            let pages = io.size_bytes as u64 / PAGE;
            let mut data = Vec::new();
            if io.op == Op::Write {
                for j in 0..pages {
                    match self.buffer_page(buf, idx + j) {
                        Some(d) => data.push(d),
                        None => {
                            self.fail(format!(
                                "write {io:?} to device {device} from an unfilled buffer {buf:?}[{}]",
                                idx + j
                            ));
                            data.push((u64::MAX, 0));
                        }
                    }
                }
            }
            let delay = 1 + self.rng.below(self.max_delay);
            self.seq += 1;
            self.events
                .insert((self.now + delay, self.seq), PendingIo { device, io, data });
        }
        for (host, tier) in out.complete.drain(..).collect::<Vec<_>>() {
            self.host_done(host, tier);
        }
        for (at, id) in out.timers.drain(..) {
            self.seq += 1;
            self.timers.insert((at.max(self.now), self.seq), id);
        }
        out.clear();
    }

    fn host_done(&mut self, host: u64, tier: u16) {
        if tier > 1 {
            self.fail(format!("host {host}: tier {tier}"));
        }
        let Some(h) = self.hosts.remove(&host) else {
            self.fail(format!("host {host} completed twice or never issued"));
            return;
        };
        self.completed += 1;
        self.tier0 += u64::from(tier == 0);
        match h.op {
            Op::Read => {
                let buf = self.host_bufs.get(&host).cloned().unwrap_or_default();
                for i in 0..h.n {
                    let p = h.first + i;
                    let newest = self.latest_written.get(&p).copied().unwrap_or(0);
                    match buf.get(i as usize).copied().flatten() {
                        Some((lp, v)) if lp == p && v >= h.floor[i as usize] && v <= newest => {}
                        got => self.fail(format!(
                            "read {host} page {p}: got {got:?}, want page {p} version in {}..={newest}",
                            h.floor[i as usize]
                        )),
                    }
                }
            }
            _ => {
                for i in 0..h.n {
                    let p = h.first + i;
                    let v = self.host_bufs[&host][i as usize].unwrap().1;
                    let a = self.latest_acked.entry(p).or_insert(0);
                    *a = (*a).max(v);
                    let w = self.writing.get_mut(&p).unwrap();
                    *w -= 1;
                    if *w == 0 {
                        self.writing.remove(&p);
                    }
                }
            }
        }
    }

    /// Runs the earliest event (device completion or timer); false if none.
    fn step(&mut self, policy: &mut dyn Policy, out: &mut Outbox) -> bool {
        let next_io = self.events.keys().next().copied();
        let next_timer = self.timers.keys().next().copied();
        let take_timer = match (next_io, next_timer) {
            (None, None) => return false,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(a), Some(b)) => b.0 < a.0,
        };
        if take_timer {
            let (key, id) = self.timers.pop_first().unwrap();
            self.now = key.0;
            policy.on_timer(self.now, id, out);
        } else {
            let (key, p) = self.events.pop_first().unwrap();
            self.now = key.0;
            let base = p.io.offset_bytes / PAGE;
            let pages = p.io.size_bytes as u64 / PAGE;
            let (buf, idx) = decode_tag(p.io.tag);
            if p.io.op == Op::Read {
                for j in 0..pages {
                    let d = if p.device == 1 {
                        Some(self.backing(base + j))
                    } else {
                        self.devices[0].get(&(base + j)).copied()
                    };
                    let Some(d) = d else {
                        self.fail(format!("read of never-written cache slot {}", base + j));
                        continue;
                    };
                    match buf {
                        Buffer::Host(id) => {
                            if let Some(b) = self.host_bufs.get_mut(&id) {
                                if let Some(slot) = b.get_mut((idx + j) as usize) {
                                    *slot = Some(d);
                                }
                            }
                        }
                        Buffer::Staging(id) => {
                            self.staging.entry(id).or_default().insert(idx + j, d);
                        }
                    }
                }
            } else {
                for (j, d) in p.data.iter().enumerate() {
                    let page = base + j as u64;
                    if p.device == 1 {
                        let old = self.backing(page);
                        if d.0 != page {
                            self.fail(format!("backing page {page} got page {}'s data", d.0));
                        } else if d.1 < old.1 {
                            self.fail(format!(
                                "backing page {page} went back from version {} to {}",
                                old.1, d.1
                            ));
                        }
                    }
                    self.devices[p.device].insert(page, *d);
                }
            }
            policy.on_device_completion(self.now, p.device, p.io.tag, out);
        }
        self.drain(out);
        true
    }
}

struct Case {
    pages: u64,
    ios: u64,
    depth: u64,
    max_pages: u64,
    write_pct: u64,
    idle_end: bool,
}

/// Runs one random workload; returns the failures (empty = pass).
fn run(policy: &mut Cache, seed: u64, case: &Case, max_delay: u64) -> Vec<String> {
    let mut h = Harness::new(seed, max_delay);
    let mut out = Outbox::default();
    let mut issued = 0u64;
    let mut version = 0u64;
    let mut guard = 0u64;
    while issued < case.ios || !h.hosts.is_empty() {
        guard += 1;
        if guard > 2_000_000 {
            h.fail("no progress".into());
            break;
        }
        let can_issue = issued < case.ios && (h.hosts.len() as u64) < case.depth;
        if can_issue && (h.events.is_empty() || h.rng.chance(50)) {
            let n = 1 + h.rng.below(case.max_pages);
            // Sequential runs now and then exercise the bypass.
            let first = if h.rng.chance(20) {
                (issued * 2) % case.pages
            } else {
                h.rng.below(case.pages)
            };
            let is_write = h.rng.chance(case.write_pct);
            let pages: Vec<u64> = (first..first + n).collect();
            if is_write && pages.iter().any(|p| h.writing.contains_key(p)) {
                // Well-formed host: wait for the earlier write instead.
                if !h.step(policy, &mut out) {
                    h.fail("stuck while a write is outstanding".into());
                    break;
                }
                continue;
            }
            issued += 1;
            let id = issued;
            let op = if is_write { Op::Write } else { Op::Read };
            let buf: Vec<Option<Data>> = if is_write {
                pages
                    .iter()
                    .map(|&p| {
                        version += 1;
                        h.latest_written.insert(p, version);
                        *h.writing.entry(p).or_insert(0) += 1;
                        Some((p, version))
                    })
                    .collect()
            } else {
                vec![None; n as usize]
            };
            let floor = pages
                .iter()
                .map(|p| h.latest_acked.get(p).copied().unwrap_or(0))
                .collect();
            h.host_bufs.insert(id, buf);
            h.hosts.insert(
                id,
                HostState {
                    first,
                    n,
                    op,
                    floor,
                },
            );
            policy.on_host_io(
                h.now,
                HostIo {
                    id,
                    op,
                    offset_bytes: first * PAGE,
                    size_bytes: (n * PAGE) as u32,
                    tenant: 0,
                },
                &mut out,
            );
            h.drain(&mut out);
        } else if !h.step(policy, &mut out) {
            if !h.hosts.is_empty() {
                h.fail(format!("stuck: {} host IOs never completed", h.hosts.len()));
            }
            break;
        }
    }
    // Quiescence: an idle flush (timers only) or explicit flush_all calls.
    for round in 0..50 {
        if !case.idle_end || round > 0 {
            policy.flush_all(&mut out);
            h.drain(&mut out);
        }
        let mut steps = 0;
        while h.step(policy, &mut out) {
            steps += 1;
            if steps > 1_000_000 {
                h.fail("flush never settles".into());
                break;
            }
        }
        if policy.is_quiescent() {
            if case.idle_end && round > 0 {
                h.fail("the idle flush left dirty pages".into());
            }
            break;
        }
    }
    if !policy.is_quiescent() {
        h.fail(format!(
            "not quiescent after flushing: {} dirty pages",
            policy.dirty_pages()
        ));
    }
    if policy.stats().dirty_bytes != 0 {
        h.fail("dirty bytes after flushing".into());
    }
    let written: Vec<(u64, u64)> = h.latest_written.iter().map(|(p, v)| (*p, *v)).collect();
    for (p, v) in written {
        let b = h.backing(p);
        if b != (p, v) {
            h.fail(format!(
                "page {p}: backing holds {b:?} after the final flush, want version {v}"
            ));
        }
    }
    let s = policy.stats();
    if (s.host_ios, s.host_ios_cache_only) != (issued, h.tier0) {
        h.fail(format!(
            "stats count {} host IOs, {} cache-only; the run issued {issued}, {} completed in tier 0",
            s.host_ios, s.host_ios_cache_only, h.tier0
        ));
    }
    if h.completed != issued {
        h.fail(format!("{} of {issued} host IOs completed", h.completed));
    }
    h.failures
}

/// `TIERLAB_PROP_CASES=N` runs N cases instead (a longer hunt).
fn cases(default: u64) -> u64 {
    std::env::var("TIERLAB_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const EVICTIONS: &[&str] = &[
    "lru", "fifo", "clock", "arc", "2q", "sieve", "s3fifo", "lirs", "lfu",
];

fn random_case(rng: &mut Rng) -> Case {
    Case {
        pages: 8 + rng.below(56),
        ios: 150 + rng.below(250),
        depth: 1 + rng.below(8),
        max_pages: 1 + rng.below(4),
        write_pct: 20 + rng.below(70),
        idle_end: false,
    }
}

#[test]
fn cache_never_loses_reorders_or_serves_stale_data() {
    let cases = cases(1000);
    for seed in 0..cases {
        let mut rng = Rng(seed * 7919 + 1);
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
        let mut case = random_case(&mut rng);
        // Short idle flushes (50 µs) happen during the run; 0 = off.
        p.idle_flush_ms = if rng.chance(50) { 0.05 } else { 0.0 };
        case.idle_end = p.idle_flush_ms > 0.0 && rng.chance(50);
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
        let mut cache = Cache::new(&p).unwrap();
        let max_delay = if rng.chance(20) {
            1
        } else {
            1 + rng.below(200_000)
        };
        let failures = run(&mut cache, seed, &case, max_delay);
        assert!(
            failures.is_empty(),
            "seed {seed} ({p:?}, delay {max_delay}): {failures:#?}"
        );
    }
}

#[test]
fn flashcache_never_loses_reorders_or_serves_stale_data() {
    let cases = cases(500);
    for seed in 0..cases {
        let mut rng = Rng(seed * 104_729 + 3);
        let assoc = [1, 2, 4, 8][rng.below(4) as usize];
        let sets = 1 + rng.below(4);
        let mut p = FlashcacheParams::with_capacity(assoc * sets * PAGE);
        p.associativity = assoc;
        p.replacement = if rng.chance(50) {
            SetReplacement::Fifo
        } else {
            SetReplacement::Lru
        };
        p.dirty_thresh_pct = rng.below(101) as f64;
        p.max_flush_bytes = ByteCount((1 + rng.below(8)) * PAGE);
        p.idle_flush_ms = if rng.chance(50) { 0.05 } else { 0.0 };
        let mut case = random_case(&mut rng);
        case.idle_end = p.idle_flush_ms > 0.0 && rng.chance(50);
        let mut cache = flashcache::new(&p).unwrap();
        let max_delay = 1 + rng.below(200_000);
        let failures = run(&mut cache, seed, &case, max_delay);
        assert!(
            failures.is_empty(),
            "seed {seed} ({p:?}, delay {max_delay}): {failures:#?}"
        );
    }
}

/// The data path itself: hits are served by the cache device, dirty
/// adjacent pages are flushed as one merged write, counters add up.
#[test]
fn hits_merging_and_counters() {
    let mut p = CacheParams::with_capacity(64 * PAGE);
    p.idle_flush_ms = 0.0;
    let mut c = Cache::new(&p).unwrap();
    let mut h = Harness::new(1, 10);
    let mut out = Outbox::default();
    let io = |id, op, first: u64, n: u64| HostIo {
        id,
        op,
        offset_bytes: first * PAGE,
        size_bytes: (n * PAGE) as u32,
        tenant: 0,
    };
    // Write 4 pages (write-back: cache device only), then read them back.
    h.host_bufs
        .insert(1, (0..4).map(|i| Some((10 + i, 1))).collect());
    h.hosts.insert(
        1,
        HostState {
            first: 10,
            n: 4,
            op: Op::Write,
            floor: vec![],
        },
    );
    for i in 0..4 {
        h.latest_written.insert(10 + i, 1);
        h.writing.insert(10 + i, 1);
    }
    c.on_host_io(0, io(1, Op::Write, 10, 4), &mut out);
    assert!(out.device_ios.iter().all(|(d, _)| *d == 0));
    h.drain(&mut out);
    while h.step(&mut c, &mut out) {}
    h.host_bufs.insert(2, vec![None; 4]);
    h.hosts.insert(
        2,
        HostState {
            first: 10,
            n: 4,
            op: Op::Read,
            floor: vec![1; 4],
        },
    );
    c.on_host_io(100, io(2, Op::Read, 10, 4), &mut out);
    assert!(out.device_ios.iter().all(|(d, _)| *d == 0));
    h.drain(&mut out);
    while h.step(&mut c, &mut out) {}
    assert!(h.failures.is_empty(), "{:?}", h.failures);
    let s = c.stats();
    assert_eq!(
        (s.write_misses, s.read_hits, s.dirty_bytes),
        (4, 4, 4 * PAGE)
    );
    assert_eq!((s.host_ios, s.host_ios_cache_only), (2, 2));
    assert_eq!(s.memory_access_ratio(), 1.0);
    // One merged 16 KiB flush write.
    c.flush_all(&mut out);
    h.drain(&mut out);
    while h.step(&mut c, &mut out) {}
    let s = c.stats();
    assert_eq!(
        (s.flush_ios, s.flush_bytes, s.dirty_bytes),
        (1, 4 * PAGE, 0)
    );
    assert_eq!(h.backing(12), (12, 1));
}

#[test]
fn bad_parameters_are_errors_not_panics() {
    let mut p = CacheParams::with_capacity(100);
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
    assert!(flashcache::new(&FlashcacheParams::with_capacity(2 << 20)).is_ok());
}

/// Writes `n` pages at `first` (version `v`) and runs to completion.
fn write_pages(c: &mut Cache, h: &mut Harness, id: u64, first: u64, n: u64, v: u64) {
    let mut out = Outbox::default();
    h.host_bufs
        .insert(id, (0..n).map(|i| Some((first + i, v))).collect());
    h.hosts.insert(
        id,
        HostState {
            first,
            n,
            op: Op::Write,
            floor: vec![],
        },
    );
    for i in 0..n {
        h.latest_written.insert(first + i, v);
        h.writing.insert(first + i, 1);
    }
    c.on_host_io(
        h.now,
        HostIo {
            id,
            op: Op::Write,
            offset_bytes: first * PAGE,
            size_bytes: (n * PAGE) as u32,
            tenant: 0,
        },
        &mut out,
    );
    h.drain(&mut out);
    while h.step(c, &mut out) {}
}

#[test]
fn flashcache_cleans_a_set_past_its_dirty_threshold() {
    // 2 sets of 4 blocks, threshold 50 %: a set may hold 2 dirty blocks.
    let mut p = FlashcacheParams::with_capacity(8 * PAGE);
    p.associativity = 4;
    p.dirty_thresh_pct = 50.0;
    let mut c = flashcache::new(&p).unwrap();
    assert_eq!(c.capacity_pages(), 8);
    let mut h = Harness::new(2, 10);
    // Blocks 0..2 are set 0 ((block / 4) % 2 == 0): two dirty is allowed.
    write_pages(&mut c, &mut h, 1, 0, 2, 1);
    assert_eq!((c.dirty_pages(), c.stats().flush_ios), (2, 0));
    // Block 8 is set 0 again ((8 / 4) % 2): three dirty > 2, so the oldest
    // dirty blocks (0 and 1, adjacent: one merged write) are cleaned.
    write_pages(&mut c, &mut h, 2, 8, 1, 2);
    let s = c.stats();
    assert_eq!((s.flush_ios, s.flush_bytes), (1, 2 * PAGE));
    assert_eq!(c.dirty_pages(), 1);
    assert_eq!((h.backing(0), h.backing(1)), ((0, 1), (1, 1)));
    // Block 4 is set 1: untouched by set 0's cleaning.
    write_pages(&mut c, &mut h, 3, 4, 1, 3);
    assert_eq!((c.dirty_pages(), c.stats().flush_ios), (2, 1));
    assert!(h.failures.is_empty(), "{:?}", h.failures);
}

#[test]
fn write_modes_route_writes_and_set_tiers() {
    for (mode, cache_ios, backing_ios, tier0) in [
        (WriteMode::WriteBack, 1, 0, 1),
        (WriteMode::WriteThrough, 1, 1, 0),
        (WriteMode::WriteAround, 0, 1, 0),
    ] {
        let mut p = CacheParams::with_capacity(16 * PAGE);
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
    p.admission = Admission::NHit;
    p.admission_hits = 2;
    p.idle_flush_ms = 0.0;
    let mut c = Cache::new(&p).unwrap();
    let mut h = Harness::new(3, 10);
    write_pages(&mut c, &mut h, 1, 5, 1, 1);
    // First miss: not admitted, written to the backing device.
    assert_eq!((c.dirty_pages(), h.backing(5)), (0, (5, 1)));
    write_pages(&mut c, &mut h, 2, 5, 1, 2);
    assert_eq!(c.dirty_pages(), 1);

    let mut p = CacheParams::with_capacity(64 * PAGE);
    p.sequential_bypass_bytes = ByteCount(2 * PAGE);
    p.idle_flush_ms = 0.0;
    let mut c = Cache::new(&p).unwrap();
    let mut h = Harness::new(4, 10);
    // A sequential stream: the first 2 pages are cached, the rest bypass.
    for i in 0..4 {
        write_pages(&mut c, &mut h, 10 + i, 20 + i, 1, 1);
    }
    let s = c.stats();
    assert_eq!((c.dirty_pages(), s.bypassed_pages), (2, 2));
    assert_eq!(h.backing(23), (23, 1));
    let mut p = CacheParams::with_capacity(64 * PAGE);
    p.eviction = "belady".into();
    assert!(Cache::new(&p).is_err());
}
