//! HSWD data tracking: randomized property tests over many seeds, in the
//! page-version data model of cache_props.rs.
//!
//! A tiny deterministic executor drives the policy the way the real
//! executor does (`Outbox::wants_data` set): the SSD (device 0) and the
//! SMR native region (device 1) complete IOs after pseudo-random delays
//! (so out of order), timers fire in time order. Every 4 KiB block of data
//! is a (block, version) pair; host writes carry a fresh version per block.
//! Data moves only as the policy describes it (`Outbox::data_for`,
//! `BufRef`), never from the tags: a device write takes the buffer's blocks
//! at submission and lands them on the device either at once or at
//! completion (chosen at random per IO: a real device may do either); a
//! device read samples the device either at submission or at completion and
//! copies into its buffer at completion. Checked, through RMW, cleaning,
//! RCache reads, set and fully associative mappings and all three band
//! selections:
//! - every device IO is described exactly once, consistently with its tag
//!   ([`decode_tag`]); buffers exist when used (a write from a staging
//!   buffer never filled, or released, or from a host IO already completed,
//!   and a read into a completed host IO all fail, as in the real
//!   executor); every staging buffer is released in the end;
//! - in *strict* cases (half of them) the host never overlaps a write with
//!   another IO of the same block (as `tierlab run --verify` does), and
//!   then no device IO may overlap a device write in flight that changes
//!   the bytes (outside the metadata area): the data is exact whatever
//!   the device timing, and reads return exactly the newest version;
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

use std::collections::{BTreeMap, HashMap, HashSet};

use tierlab_core::policy::{BufRef, HostIo, Outbox, Policy};
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
    buf: BufRef,
    /// A write's blocks, taken at submission.
    data: Vec<Option<Data>>,
    /// A write landed at submission / a read sampled at submission.
    early: bool,
    sampled: Vec<Option<Data>>,
    seq: u64,
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
    released: HashSet<u64>,
    hosts: HashMap<u64, HostState>,
    /// Strict mode: device IOs in flight per (device, page): (seq, a write
    /// that changes the page's bytes).
    strict: bool,
    in_flight: HashMap<(usize, u64), Vec<(u64, bool)>>,
    reading: HashMap<u64, u32>,
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
            released: HashSet::new(),
            hosts: HashMap::new(),
            strict: false,
            in_flight: HashMap::new(),
            reading: HashMap::new(),
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

    /// The device's block at `page` now (None: a PCache page never written).
    fn device_page(&self, device: usize, page: u64) -> Option<Data> {
        if device == 1 {
            Some(self.nregion(page))
        } else {
            self.devices[0].get(&page).copied()
        }
    }

    /// Block `j` of a write's source buffer, as the real executor would
    /// copy it: Err when the buffer does not exist (never filled, released,
    /// or its host IO completed).
    fn buffer_page(&self, buf: BufRef, j: u64) -> Result<Option<Data>, String> {
        match buf {
            BufRef::Host {
                host_id,
                offset_bytes,
            } => {
                if !self.hosts.contains_key(&host_id) {
                    return Err(format!("host IO {host_id}, which has completed"));
                }
                let idx = offset_bytes / PAGE + j;
                Ok(self
                    .host_bufs
                    .get(&host_id)
                    .and_then(|b| b.get(idx as usize).copied().flatten()))
            }
            BufRef::Staging { id, offset_bytes } => {
                if self.released.contains(&id) {
                    return Err(format!("staging buffer {id}, which was released"));
                }
                let s = self
                    .staging
                    .get(&id)
                    .ok_or_else(|| format!("staging buffer {id}, which was never filled"))?;
                Ok(s.get(&(offset_bytes / PAGE + j)).copied())
            }
            BufRef::Zeros => Ok(None),
        }
    }

    /// A device write lands: the NRegion checks, then the device's blocks.
    fn land(&mut self, device: usize, io: &DeviceIo, data: &[Option<Data>]) {
        let base = io.offset_bytes / PAGE;
        for (j, d) in data.iter().enumerate() {
            let Some(d) = *d else { continue };
            let page = base + j as u64;
            if device == 1 {
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
            self.devices[device].insert(page, d);
        }
    }

    /// What a device read finds on the device now.
    fn sample(&mut self, device: usize, io: &DeviceIo) -> Vec<Option<Data>> {
        let base = io.offset_bytes / PAGE;
        let pages = io.size_bytes as u64 / PAGE;
        let mut got = Vec::with_capacity(pages as usize);
        for j in 0..pages {
            let d = self.device_page(device, base + j);
            if d.is_none() {
                self.fail(format!(
                    "read of never-written PCache page {} ({io:?})",
                    base + j
                ));
            }
            got.push(d);
        }
        got
    }

    /// Device pages an IO covers that the strict check watches (not the
    /// metadata area, whose bytes are not host data).
    fn watched_pages(&self, device: usize, io: &DeviceIo) -> std::ops::Range<u64> {
        let first = io.offset_bytes / PAGE;
        let end = io.end_bytes().div_ceil(PAGE);
        if device == 0 {
            first.max(self.layout.metadata_bytes.div_ceil(PAGE))..end.max(first)
        } else {
            first..end
        }
    }

    fn drain(&mut self, out: &mut Outbox) {
        let ios = std::mem::take(&mut out.device_ios);
        let mut descs = std::mem::take(&mut out.data);
        for (device, io) in ios {
            let (tag_buf, idx) = decode_tag(io.tag);
            let found: Vec<usize> = descs
                .iter()
                .enumerate()
                .filter(|(_, (d, t, _))| *d == device && *t == io.tag)
                .map(|(i, _)| i)
                .collect();
            if found.len() != 1 {
                self.fail(format!(
                    "device {device} IO {io:?} described {} times",
                    found.len()
                ));
                continue;
            }
            let buf = descs.swap_remove(found[0]).2;
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
                (HswdBuffer::Metadata(_), BufRef::Zeros) => true,
                _ => false,
            };
            if !consistent {
                self.fail(format!(
                    "{io:?}: tag says {tag_buf:?}[{idx}], data says {buf:?}"
                ));
            }
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
                (Op::Write, BufRef::Zeros) if device != 0 || io.end_bytes() > meta_end => {
                    self.fail(format!("metadata write {io:?} outside the metadata area"));
                }
                (Op::Write, BufRef::Zeros) => {}
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
                        match self.buffer_page(buf, j) {
                            Ok(Some(d)) => data.push(Some(d)),
                            Ok(None) => {
                                self.fail(format!(
                                    "write {io:?} to device {device} from an unfilled buffer {buf:?} (block {j})"
                                ));
                                data.push(None);
                            }
                            Err(e) => {
                                self.fail(format!("write {io:?} to device {device} from {e}"));
                                data.push(None);
                            }
                        }
                    }
                }
                (_, BufRef::Zeros) => {
                    self.fail(format!("a read {io:?} into no buffer"));
                }
                _ => {}
            }
            self.seq += 1;
            let seq = self.seq;
            if self.strict {
                let first = io.offset_bytes / PAGE;
                let is_write = io.op == Op::Write;
                for page in self.watched_pages(device, &io) {
                    let changes = is_write
                        && data
                            .get((page - first) as usize)
                            .is_some_and(|d| *d != self.device_page(device, page));
                    let list = self.in_flight.entry((device, page)).or_default();
                    // A clash needs a write that changes the bytes (a
                    // read or an identical rewrite changes nothing).
                    let clash = list.iter().any(|&(_, c)| changes || c);
                    list.push((seq, changes));
                    if clash {
                        let msg = format!(
                            "device {device} page {page}: {io:?} overlaps a device IO in flight \
                             that changes (or would change) its bytes"
                        );
                        self.fail(msg);
                    }
                }
            }
            let early = self.rng.chance(50);
            let mut sampled = Vec::new();
            if early {
                match io.op {
                    Op::Write => self.land(device, &io, &data),
                    _ => sampled = self.sample(device, &io),
                }
            }
            let delay = 1 + self.rng.below(self.max_delay);
            self.events.insert(
                (self.now + delay, seq),
                PendingIo {
                    device,
                    io,
                    buf,
                    data,
                    early,
                    sampled,
                    seq,
                },
            );
        }
        for (device, tag, buf) in descs {
            self.fail(format!(
                "a description ({buf:?}) for device {device} tag {tag:#x}, which was not submitted"
            ));
        }
        for id in std::mem::take(&mut out.release) {
            if !self.released.insert(id) {
                self.fail(format!("staging buffer {id} released twice"));
            }
            self.staging.remove(&id);
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
                let buf = self.host_bufs.remove(&host).unwrap_or_default();
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
                    let r = self.reading.get_mut(&p).unwrap();
                    *r -= 1;
                    if *r == 0 {
                        self.reading.remove(&p);
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
                self.host_bufs.remove(&host);
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
            if self.strict {
                for page in self.watched_pages(p.device, &p.io) {
                    if let Some(list) = self.in_flight.get_mut(&(p.device, page)) {
                        list.retain(|&(s, _)| s != p.seq);
                        if list.is_empty() {
                            self.in_flight.remove(&(p.device, page));
                        }
                    }
                }
            }
            if p.io.op == Op::Read {
                let got = if p.early {
                    p.sampled
                } else {
                    self.sample(p.device, &p.io)
                };
                for (j, d) in got.into_iter().enumerate() {
                    let Some(d) = d else { continue };
                    let j = j as u64;
                    match p.buf {
                        BufRef::Host {
                            host_id,
                            offset_bytes,
                        } => {
                            if !self.hosts.contains_key(&host_id) {
                                self.fail(format!(
                                    "a device read for host IO {host_id} landed after that IO completed"
                                ));
                                break;
                            }
                            if let Some(slot) = self
                                .host_bufs
                                .get_mut(&host_id)
                                .and_then(|b| b.get_mut((offset_bytes / PAGE + j) as usize))
                            {
                                *slot = Some(d);
                            } else {
                                self.fail(format!(
                                    "a device read {:?} past the end of host IO {host_id}",
                                    p.io
                                ));
                            }
                        }
                        BufRef::Staging { id, offset_bytes } => {
                            if self.released.contains(&id) {
                                self.fail(format!(
                                    "a device read landed in staging buffer {id} after its release"
                                ));
                                break;
                            }
                            self.staging
                                .entry(id)
                                .or_default()
                                .insert(offset_bytes / PAGE + j, d);
                        }
                        BufRef::Zeros => {}
                    }
                }
            } else if !p.early {
                self.land(p.device, &p.io, &p.data);
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
    /// The host never overlaps a write with another IO of its blocks.
    strict: bool,
}

/// Runs one random workload; returns the failures (empty = pass).
fn run(policy: &mut Hswd, seed: u64, case: &Case, max_delay: u64) -> Vec<String> {
    let mut h = Harness::new(seed, max_delay, policy.layout(), case.pages);
    h.strict = case.strict;
    let mut out = Outbox {
        wants_data: true,
        ..Outbox::default()
    };
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
            let overlaps_write = pages.iter().any(|p| h.writing.contains_key(p));
            let overlaps_read = pages.iter().any(|p| h.reading.contains_key(p));
            let blocked = if h.strict {
                overlaps_write || (is_write && overlaps_read)
            } else {
                is_write && overlaps_write
            };
            if blocked {
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
                for &p in &pages {
                    *h.reading.entry(p).or_insert(0) += 1;
                }
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
    if !h.staging.is_empty() {
        h.fail(format!(
            "staging buffers never released: {:?}",
            h.staging.keys().collect::<Vec<_>>()
        ));
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
    p.metadata_entry_bytes = [16, 64, 512, 4096][rng.below(4) as usize];
    p.idle_clean_ms = if rng.chance(30) { 0.05 } else { 0.0 };
    let case = Case {
        // Several bands, the last one maybe short.
        pages: band_blocks * (1 + rng.below(6)) + rng.below(band_blocks),
        ios: 150 + rng.below(250),
        depth: 1 + rng.below(8),
        max_pages: 1 + rng.below(band_blocks.min(6)),
        write_pct: 30 + rng.below(65),
        strict,
    };
    (p, case)
}

#[test]
fn hswd_never_loses_reorders_or_serves_stale_data() {
    let n = cases(600);
    // rmw, rcache reads, stalls, set-assoc runs, strict runs, host reads
    // and writes of the band under RMW, merged blocks rewritten, writes
    // held for an RMW's slot read
    let mut totals = [0u64; 9];
    for seed in 0..n {
        let mut rng = Rng(seed * 6_364_136 + 11);
        let selection = SELECTIONS[(seed % 3) as usize];
        let strict = seed % 2 == 0;
        let (p, case) = random_policy(&mut rng, selection, strict);
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
        totals[4] += u64::from(strict);
        totals[5] += s.rmw_band_read_blocks;
        totals[6] += s.rmw_band_write_blocks;
        totals[7] += s.rmw_rewritten_blocks;
        totals[8] += s.rmw_held_writes;
    }
    // The cases reached every path the properties are about.
    eprintln!("coverage {totals:?}");
    if n >= 100 {
        assert!(totals.iter().all(|&t| t > 0), "coverage {totals:?}");
    }
}
