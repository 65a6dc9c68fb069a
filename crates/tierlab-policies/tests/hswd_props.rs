//! HSWD data tracking: randomized property tests over many seeds, in the
//! page-version data model of cache_props.rs.
//!
//! A tiny deterministic executor drives the policy: the SSD (device 0) and
//! the SMR native region (device 1) complete IOs after pseudo-random delays
//! (so out of order), timers fire in time order. Every 4 KiB block of data
//! is a (block, version) pair; host writes carry a fresh version per block.
//! A device read copies the device's blocks into the buffer its tag names
//! at completion; a device write takes the buffer's blocks at submission
//! and lands them at completion. Checked, through RMW, cleaning, RCache
//! reads, set and fully associative mappings and all three band
//! selections:
//! - a read returns, for every block, that block's data at a version no
//!   older than the newest write acknowledged before the read was issued
//!   and no newer than the newest issued;
//! - the NRegion only ever receives whole-band writes (the last band may be
//!   short), and its version of a block never goes backwards;
//! - metadata writes stay inside the metadata area, data never goes there,
//!   and no read touches a PCache slot that was never written;
//! - after `clean_all` at quiescence the PCache is empty and the NRegion
//!   holds the newest version of every block written;
//! - every host IO completes exactly once, nothing gets stuck.
//!
//! `TIERLAB_PROP_CASES=N` runs N cases per test instead of the default.

use std::collections::{BTreeMap, HashMap};

use tierlab_core::policy::{HostIo, Outbox, Policy};
use tierlab_core::{DeviceIo, Op};
use tierlab_policies::cache::ByteCount;
use tierlab_policies::hswd::{
    BandSelection, Hswd, HswdBuffer, HswdParams, Layout, Mapping, decode_tag,
};

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

type Data = (u64, u64); // (block, version)

struct PendingIo {
    device: usize,
    io: DeviceIo,
    data: Vec<Option<Data>>,
}

struct HostState {
    first: u64,
    n: u64,
    op: Op,
    floor: Vec<u64>,
}

struct Harness {
    rng: Rng,
    now: u64,
    max_delay: u64,
    seq: u64,
    layout: Layout,
    nregion_pages: u64,
    events: BTreeMap<(u64, u64), PendingIo>,
    timers: BTreeMap<(u64, u64), u64>,
    /// device → page → data (device 0 pages by byte offset / 4 KiB).
    devices: [HashMap<u64, Data>; 2],
    host_bufs: HashMap<u64, Vec<Option<Data>>>,
    staging: HashMap<u64, HashMap<u64, Data>>,
    hosts: HashMap<u64, HostState>,
    latest_written: HashMap<u64, u64>,
    latest_acked: HashMap<u64, u64>,
    writing: HashMap<u64, u32>,
    completed: u64,
    failures: Vec<String>,
}

impl Harness {
    fn new(seed: u64, max_delay: u64, layout: Layout, nregion_pages: u64) -> Harness {
        Harness {
            rng: Rng(seed),
            now: 0,
            max_delay,
            seq: 0,
            layout,
            nregion_pages,
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
            failures: Vec::new(),
        }
    }

    fn fail(&mut self, msg: String) {
        if self.failures.len() < 5 {
            self.failures.push(msg);
        }
    }

    fn nregion(&self, page: u64) -> Data {
        self.devices[1].get(&page).copied().unwrap_or((page, 0))
    }

    fn buffer_page(&self, buf: HswdBuffer, idx: u64) -> Option<Data> {
        match buf {
            HswdBuffer::Host(id) => self
                .host_bufs
                .get(&id)
                .and_then(|b| b.get(idx as usize).copied().flatten()),
            HswdBuffer::Staging(id) => self.staging.get(&id).and_then(|s| s.get(&idx).copied()),
            HswdBuffer::Metadata(_) => None,
        }
    }

    fn drain(&mut self, out: &mut Outbox) {
        for (device, io) in out.device_ios.drain(..).collect::<Vec<_>>() {
            let (buf, idx) = decode_tag(io.tag);
            let pages = io.size_bytes as u64 / PAGE;
            let meta_end = self.layout.metadata_bytes;
            let mut data = Vec::new();
            if device == 0 && io.end_bytes() > self.layout.device_bytes {
                self.fail(format!("{io:?} beyond the PCache"));
            }
            if device == 1 && io.end_bytes() > self.nregion_pages * PAGE {
                self.fail(format!("{io:?} beyond the NRegion"));
            }
            match (io.op, buf) {
                (Op::Write, HswdBuffer::Metadata(_))
                    if device != 0 || io.end_bytes() > meta_end =>
                {
                    self.fail(format!("metadata write {io:?} outside the metadata area"));
                }
                (Op::Write, HswdBuffer::Metadata(_)) => {}
                (Op::Write, _) => {
                    if device == 0 && io.offset_bytes < meta_end {
                        self.fail(format!("data write {io:?} into the metadata area"));
                    }
                    if device == 1 {
                        let band = self.layout.band_bytes;
                        let whole = io.offset_bytes % band == 0
                            && (io.size_bytes as u64 == band
                                || io.end_bytes() == self.nregion_pages * PAGE);
                        if !whole {
                            self.fail(format!("NRegion write {io:?} is not a whole band"));
                        }
                    }
                    for j in 0..pages {
                        let d = self.buffer_page(buf, idx + j);
                        if d.is_none() {
                            self.fail(format!(
                                "write {io:?} to device {device} from an unfilled buffer {buf:?}[{}]",
                                idx + j
                            ));
                        }
                        data.push(d);
                    }
                }
                (_, HswdBuffer::Metadata(_)) => {
                    self.fail(format!("metadata buffer on a non-write {io:?}"));
                }
                _ => {}
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
        if tier > 2 {
            self.fail(format!("host {host}: tier {tier}"));
        }
        let Some(h) = self.hosts.remove(&host) else {
            self.fail(format!("host {host} completed twice or never issued"));
            return;
        };
        self.completed += 1;
        match h.op {
            Op::Read => {
                let buf = self.host_bufs.get(&host).cloned().unwrap_or_default();
                for i in 0..h.n {
                    let p = h.first + i;
                    let newest = self.latest_written.get(&p).copied().unwrap_or(0);
                    match buf.get(i as usize).copied().flatten() {
                        Some((lp, v)) if lp == p && v >= h.floor[i as usize] && v <= newest => {}
                        got => self.fail(format!(
                            "read {host} block {p}: got {got:?}, want block {p} version in {}..={newest}",
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

    fn step(&mut self, policy: &mut Hswd, out: &mut Outbox) -> bool {
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
                        Some(self.nregion(base + j))
                    } else {
                        self.devices[0].get(&(base + j)).copied()
                    };
                    let Some(d) = d else {
                        self.fail(format!(
                            "read of never-written PCache page {} ({:?})",
                            base + j,
                            p.io
                        ));
                        continue;
                    };
                    match buf {
                        HswdBuffer::Host(id) => {
                            if let Some(slot) = self
                                .host_bufs
                                .get_mut(&id)
                                .and_then(|b| b.get_mut((idx + j) as usize))
                            {
                                *slot = Some(d);
                            }
                        }
                        HswdBuffer::Staging(id) => {
                            self.staging.entry(id).or_default().insert(idx + j, d);
                        }
                        HswdBuffer::Metadata(_) => {}
                    }
                }
            } else {
                for (j, d) in p.data.iter().enumerate() {
                    let Some(d) = *d else { continue };
                    let page = base + j as u64;
                    if p.device == 1 {
                        let old = self.nregion(page);
                        if d.0 != page {
                            self.fail(format!("NRegion block {page} got block {}'s data", d.0));
                        } else if d.1 < old.1 {
                            self.fail(format!(
                                "NRegion block {page} went back from version {} to {}",
                                old.1, d.1
                            ));
                        }
                    }
                    self.devices[p.device].insert(page, d);
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
}

/// Runs one random workload; returns the failures (empty = pass).
fn run(policy: &mut Hswd, seed: u64, case: &Case, max_delay: u64) -> Vec<String> {
    let mut h = Harness::new(seed, max_delay, policy.layout(), case.pages);
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
            let first = h.rng.below(case.pages + 1 - n.min(case.pages));
            let n = n.min(case.pages - first);
            let is_write = h.rng.chance(case.write_pct);
            let pages: Vec<u64> = (first..first + n).collect();
            if is_write && pages.iter().any(|p| h.writing.contains_key(p)) {
                if !h.step(policy, &mut out) {
                    h.fail(format!(
                        "stuck while a write is outstanding: {}",
                        policy.debug_state()
                    ));
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
    policy.clean_all(&mut out);
    h.drain(&mut out);
    let mut steps = 0;
    while h.step(policy, &mut out) {
        steps += 1;
        if steps > 2_000_000 {
            h.fail("cleaning never settles".into());
            break;
        }
    }
    if !policy.is_quiescent() || policy.cached_blocks() != 0 {
        h.fail(format!(
            "not clean after clean_all: {} cached blocks",
            policy.cached_blocks()
        ));
    }
    let written: Vec<(u64, u64)> = h.latest_written.iter().map(|(p, v)| (*p, *v)).collect();
    for (p, v) in written {
        let b = h.nregion(p);
        if b != (p, v) {
            h.fail(format!(
                "block {p}: NRegion holds {b:?} after cleaning, want version {v}"
            ));
        }
    }
    let s = policy.stats();
    if s.host_ios != issued || s.completed_ios != issued || h.completed != issued {
        h.fail(format!(
            "{issued} issued, policy counts {} / {} completed, harness {}",
            s.host_ios, s.completed_ios, h.completed
        ));
    }
    h.failures
}

fn cases(default: u64) -> u64 {
    std::env::var("TIERLAB_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const SELECTIONS: [BandSelection; 3] =
    [BandSelection::Fifo, BandSelection::Lru, BandSelection::Most];

/// Random small geometry: bands of 2–16 blocks, 1–4 sets of 1–12 blocks.
fn random_policy(rng: &mut Rng, selection: BandSelection) -> (HswdParams, Case) {
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
    p.metadata_entry_bytes = [16, 64, 512, 4096][rng.below(4) as usize];
    p.idle_clean_ms = if rng.chance(30) { 0.05 } else { 0.0 };
    let case = Case {
        // Several bands, the last one maybe short.
        pages: band_blocks * (1 + rng.below(6)) + rng.below(band_blocks),
        ios: 150 + rng.below(250),
        depth: 1 + rng.below(8),
        max_pages: 1 + rng.below(band_blocks.min(6)),
        write_pct: 30 + rng.below(65),
    };
    (p, case)
}

#[test]
fn hswd_never_loses_reorders_or_serves_stale_data() {
    let n = cases(600);
    let mut totals = [0u64; 4]; // rmw, rcache reads, stalls, set-assoc runs
    for seed in 0..n {
        let mut rng = Rng(seed * 6_364_136 + 11);
        let selection = SELECTIONS[(seed % 3) as usize];
        let (p, case) = random_policy(&mut rng, selection);
        let mut policy = Hswd::new(&p, case.pages * PAGE).unwrap();
        let max_delay = if rng.chance(20) {
            1
        } else {
            1 + rng.below(200_000)
        };
        let failures = run(&mut policy, seed, &case, max_delay);
        assert!(
            failures.is_empty(),
            "seed {seed} ({p:?}, pages {}, delay {max_delay}): {failures:#?}",
            case.pages
        );
        let s = policy.stats();
        totals[0] += s.rmw_count;
        totals[1] += s.read_rcache;
        totals[2] += s.write_stalls;
        totals[3] += u64::from(policy.layout().sets > 1);
    }
    // The cases reached every path the properties are about.
    if n >= 100 {
        assert!(totals.iter().all(|&t| t > 0), "coverage {totals:?}");
    }
}
