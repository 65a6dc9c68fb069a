//! Cache-only simulation (no timing): hit/miss counts of several policies ×
//! sizes in one pass over a trace, under libCacheSim semantics — every page
//! reference is a lookup, a miss inserts, the op is ignored for the
//! decision (but counted in the read/write statistics).
//!
//! Each IO record is split into the pages its byte range overlaps (a 6 KiB
//! read at offset 2 KiB with 4 KiB pages touches pages 0 and 1 and is two
//! requests); flushes and zero-size records are skipped. Trims are lookups
//! too and count in `requests` but in neither the read nor the write
//! counters. Keys are `device_id << 48 | page index` (page indices wrap
//! modulo 2^48, i.e. beyond 1 EiB at 4 KiB pages).

use crate::policies;
use crate::{Eviction, Key};
use rustc_hash::FxHashMap;
use serde::Serialize;
use tierlab_trace::{DeviceTable, IoRecord, Op, ParamError, RecordStream, Result, TimeBase};

/// Bits of a key holding the page index; the device id sits above.
pub const PAGE_BITS: u32 = 48;
const PAGE_MASK: u64 = (1 << PAGE_BITS) - 1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheSimConfig {
    pub policy: String,
    pub capacity_pages: u64,
    pub page_size_bytes: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheSimResult {
    pub policy: String,
    pub capacity_pages: u64,
    pub page_size_bytes: u32,
    /// Page references (lookups).
    pub requests: u64,
    /// Trace records that produced at least one page reference.
    pub io_requests: u64,
    pub misses: u64,
    /// `misses / requests` (0 for an empty trace).
    pub miss_ratio: f64,
    /// Page references of read records, and how many of them missed.
    pub read_requests: u64,
    pub read_misses: u64,
    pub write_requests: u64,
    pub write_misses: u64,
}

/// The cache key of page `page` of device `device_id`.
#[inline]
pub fn page_key(device_id: u32, page: u64) -> Key {
    ((device_id as u64) << PAGE_BITS) | (page & PAGE_MASK)
}

/// The page keys a record touches, in address order; empty for flushes and
/// zero-size records. `page_size` must be non-zero.
#[inline]
pub fn record_pages(rec: &IoRecord, page_size: u32) -> impl Iterator<Item = Key> + use<> {
    let dev = rec.device_id;
    page_range(rec, page_size).map(move |p| page_key(dev, p))
}

/// The page indices a record touches (`first..end`, before [`page_key`]
/// wraps them); empty for flushes and zero-size records. The end is at
/// most `u64::MAX`.
#[inline]
pub fn page_range(rec: &IoRecord, page_size: u32) -> std::ops::Range<u64> {
    let ps = page_size.max(1) as u64;
    let skip = rec.op == Op::Flush || rec.size_bytes == 0;
    // saturating: offsets near u64::MAX; the end byte is then at most
    // u64::MAX - 1, so `last + 1` cannot overflow.
    let end_byte = rec
        .offset_bytes
        .saturating_add(rec.size_bytes as u64)
        .saturating_sub(1);
    // Page sizes are almost always powers of two: shift instead of two
    // 64-bit divisions per record (a third of the cache-only loop's cost).
    let (first, last) = if ps.is_power_of_two() {
        let shift = ps.trailing_zeros();
        (rec.offset_bytes >> shift, end_byte >> shift)
    } else {
        (rec.offset_bytes / ps, end_byte / ps)
    };
    // An exclusive end, so a skipped record is simply the empty range.
    first..if skip { first } else { last + 1 }
}

/// For each position `i`, the index of the next occurrence of `keys[i]`,
/// or `u64::MAX` if it does not occur again (what Belady needs).
pub fn next_uses(keys: &[Key]) -> Vec<u64> {
    let mut next = vec![u64::MAX; keys.len()];
    let mut seen: FxHashMap<Key, u64> = FxHashMap::default();
    for (i, &k) in keys.iter().enumerate().rev() {
        if let Some(n) = seen.insert(k, i as u64) {
            next[i] = n;
        }
    }
    next
}

/// Replays records collected in memory (tests, and `run`'s Belady pass).
pub struct VecStream {
    records: Vec<IoRecord>,
    pos: usize,
    devices: DeviceTable,
    time_base: TimeBase,
}

impl VecStream {
    pub fn new(records: Vec<IoRecord>, devices: DeviceTable, time_base: TimeBase) -> Self {
        VecStream {
            records,
            pos: 0,
            devices,
            time_base,
        }
    }
}

impl RecordStream for VecStream {
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        let r = self.records.get(self.pos).copied();
        self.pos += r.is_some() as usize;
        Ok(r)
    }
    fn devices(&self) -> &DeviceTable {
        &self.devices
    }
    fn time_base(&self) -> TimeBase {
        self.time_base
    }
}

struct Lane {
    cache: Box<dyn Eviction>,
    page_size: u32,
    /// Next-use indices of this page size's reference stream (Belady only).
    next: Option<usize>,
    pos: usize,
    res: CacheSimResult,
}

/// Runs every config over one pass of `stream`; results are in config
/// order.
///
/// Belady needs the future: when any config is `belady`, the records are
/// first collected in memory and next-use indices computed per page size —
/// memory proportional to the trace (16 bytes per page reference plus the
/// records), the one offline exception; otherwise memory is that of the
/// caches only.
pub fn run(
    stream: &mut dyn RecordStream,
    configs: &[CacheSimConfig],
) -> Result<Vec<CacheSimResult>> {
    let mut lanes = Vec::with_capacity(configs.len());
    for c in configs {
        if c.page_size_bytes == 0 {
            return Err(ParamError::new("page_size", 0, "at least 1 byte").into());
        }
        let cap = usize::try_from(c.capacity_pages).unwrap_or(usize::MAX);
        let cache = policies::build(&c.policy, cap)?;
        lanes.push(Lane {
            page_size: c.page_size_bytes,
            next: None,
            pos: 0,
            res: CacheSimResult {
                policy: cache.name().to_string(),
                capacity_pages: c.capacity_pages,
                page_size_bytes: c.page_size_bytes,
                requests: 0,
                io_requests: 0,
                misses: 0,
                miss_ratio: 0.0,
                read_requests: 0,
                read_misses: 0,
                write_requests: 0,
                write_misses: 0,
            },
            cache,
        });
    }
    if lanes.iter().any(|l| l.cache.name() == "belady") {
        let mut records = Vec::new();
        while let Some(r) = stream.next_record()? {
            records.push(r);
        }
        let mut futures: Vec<(u32, Vec<u64>)> = Vec::new();
        for lane in lanes.iter_mut().filter(|l| l.cache.name() == "belady") {
            let ps = lane.page_size;
            let idx = match futures.iter().position(|(p, _)| *p == ps) {
                Some(i) => i,
                None => {
                    let keys: Vec<Key> = records.iter().flat_map(|r| record_pages(r, ps)).collect();
                    futures.push((ps, next_uses(&keys)));
                    futures.len() - 1
                }
            };
            lane.next = Some(idx);
        }
        let mut vs = VecStream::new(records, stream.devices().clone(), stream.time_base());
        drive(&mut vs, &mut lanes, &futures)?;
    } else {
        drive(stream, &mut lanes, &[])?;
    }
    Ok(lanes
        .into_iter()
        .map(|mut l| {
            if l.res.requests > 0 {
                l.res.miss_ratio = l.res.misses as f64 / l.res.requests as f64;
            }
            l.res
        })
        .collect())
}

/// Records per batch: the policies see the batch's page keys at once (so
/// they can prefetch ahead), the counts are tallied per record afterwards.
const BATCH_RECORDS: usize = 4096;
/// ... and at most about this many page references, so a few huge records
/// cannot make a batch's key buffer huge.
const BATCH_PAGES: u64 = 1 << 16;

/// Records asked of the stream at a time while a batch fills (a few, so a
/// batch of huge records stops near `BATCH_PAGES`).
const READ_CHUNK_RECORDS: usize = 128;

/// Appends the page keys of `rec` to `keys`; returns how many.
#[inline]
fn push_pages(rec: &IoRecord, page_size: u32, keys: &mut Vec<Key>) -> usize {
    let pages = page_range(rec, page_size);
    let n = pages.end - pages.start;
    // Most records touch one page: no loop for them.
    if n == 1 {
        keys.push(page_key(rec.device_id, pages.start));
    } else {
        keys.extend(pages.map(|p| page_key(rec.device_id, p)));
    }
    n as usize
}

fn drive(
    stream: &mut dyn RecordStream,
    lanes: &mut [Lane],
    futures: &[(u32, Vec<u64>)],
) -> Result<()> {
    let mut records: Vec<IoRecord> = Vec::with_capacity(BATCH_RECORDS);
    let mut keys: Vec<Key> = Vec::new();
    let mut missed: Vec<bool> = Vec::new();
    let mut pages_per_record: Vec<usize> = Vec::with_capacity(BATCH_RECORDS);
    // A bound on a record's pages at every lane's page size, by a shift
    // (a division per record would cost more than the rest of the loop).
    let min_page_size = lanes.iter().map(|l| l.page_size.max(1)).min().unwrap_or(1);
    let page_shift = min_page_size.ilog2();
    loop {
        records.clear();
        let mut pages_bound = 0u64;
        while records.len() < BATCH_RECORDS && pages_bound < BATCH_PAGES {
            let before = records.len();
            let want = READ_CHUNK_RECORDS.min(BATCH_RECORDS - before);
            if stream.next_batch(&mut records, want)? == 0 {
                break;
            }
            pages_bound += records[before..]
                .iter()
                .map(|r| (r.size_bytes as u64 >> page_shift) + 2)
                .sum::<u64>();
        }
        if records.is_empty() {
            return Ok(());
        }
        for lane in lanes.iter_mut() {
            keys.clear();
            pages_per_record.clear();
            for rec in &records {
                pages_per_record.push(push_pages(rec, lane.page_size, &mut keys));
            }
            match lane.next.map(|i| futures[i].1.as_slice()) {
                // Belady needs each key's next use set just before it.
                Some(next) => {
                    missed.clear();
                    for &key in &keys {
                        lane.cache
                            .set_next_access(next.get(lane.pos).copied().unwrap_or(u64::MAX));
                        lane.pos += 1;
                        missed.push(!lane.cache.access(key).is_hit());
                    }
                }
                None => lane.cache.access_batch(&keys, &mut missed),
            }
            debug_assert_eq!(missed.len(), keys.len());
            // Local counters (registers), added to the result once per batch;
            // branch-free per record (ops and misses are unpredictable).
            let (mut ios, mut misses) = (0u64, 0u64);
            let (mut reads, mut read_misses, mut writes, mut write_misses) = (0u64, 0, 0, 0);
            let mut tally = |rec: &IoRecord, n: u64, m: u64| {
                let (is_read, is_write) =
                    ((rec.op == Op::Read) as u64, (rec.op == Op::Write) as u64);
                ios += (n > 0) as u64;
                misses += m;
                reads += is_read * n;
                read_misses += is_read * m;
                writes += is_write * n;
                write_misses += is_write * m;
            };
            if keys.len() == records.len() && pages_per_record.iter().all(|&n| n == 1) {
                // One page per record (the common case): no offsets to track.
                for (rec, &m) in records.iter().zip(&missed) {
                    tally(rec, 1, m as u64);
                }
            } else {
                let mut at = 0usize;
                for (rec, &n) in records.iter().zip(&pages_per_record) {
                    let m = missed[at..at + n].iter().filter(|&&b| b).count() as u64;
                    at += n;
                    tally(rec, n as u64, m);
                }
                debug_assert_eq!(at, keys.len());
            }
            let r = &mut lane.res;
            r.io_requests += ios;
            r.requests += keys.len() as u64;
            r.misses += misses;
            r.read_requests += reads;
            r.read_misses += read_misses;
            r.write_requests += writes;
            r.write_misses += write_misses;
        }
    }
}

pub use crate::size::parse_capacity_pages;

/// Every policy × capacity, policies outermost, in the order given; each
/// policy name checked ([`policies::canonical_name`]).
pub fn grid<S: AsRef<str>>(
    policy_names: &[S],
    capacities_pages: &[u64],
    page_size: u32,
) -> std::result::Result<Vec<CacheSimConfig>, ParamError> {
    let mut out = Vec::with_capacity(policy_names.len() * capacities_pages.len());
    for name in policy_names {
        let policy = policies::canonical_name(name.as_ref())?;
        for &capacity_pages in capacities_pages {
            out.push(CacheSimConfig {
                policy: policy.to_string(),
                capacity_pages,
                page_size_bytes: page_size,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(dev: u32, off: u64, size: u32, op: Op) -> IoRecord {
        IoRecord {
            time_ns: 0,
            offset_bytes: off,
            size_bytes: size,
            device_id: dev,
            op,
            response_ns: None,
        }
    }

    fn stream(recs: Vec<IoRecord>) -> VecStream {
        VecStream::new(recs, DeviceTable::new(), TimeBase::None)
    }

    fn cfg(policy: &str, cap: u64, ps: u32) -> CacheSimConfig {
        CacheSimConfig {
            policy: policy.into(),
            capacity_pages: cap,
            page_size_bytes: ps,
        }
    }

    #[test]
    fn page_splitting() {
        let r = rec(1, 2048, 6144, Op::Read);
        let keys: Vec<Key> = record_pages(&r, 4096).collect();
        assert_eq!(keys, vec![1 << 48, (1 << 48) | 1]);
        assert_eq!(record_pages(&rec(0, 4096, 4096, Op::Read), 4096).count(), 1);
        assert_eq!(record_pages(&rec(0, 4095, 2, Op::Read), 4096).count(), 2);
        assert_eq!(record_pages(&rec(0, 0, 0, Op::Read), 4096).count(), 0);
        assert_eq!(record_pages(&rec(0, 0, 512, Op::Flush), 4096).count(), 0);
        assert_eq!(
            record_pages(&rec(0, u64::MAX, 100, Op::Read), 4096).count(),
            1
        );
    }

    #[test]
    fn counts_by_hand() {
        // 4 KiB pages, LRU of 2 pages.
        let recs = vec![
            rec(0, 0, 8192, Op::Read),     // pages 0 1: 2 misses
            rec(0, 4096, 4096, Op::Write), // page 1: hit
            rec(0, 0, 0, Op::Write),       // skipped
            rec(0, 0, 512, Op::Flush),     // skipped
            rec(1, 0, 4096, Op::Write),    // device 1 page 0: miss, evicts 0:0
            rec(0, 0, 4096, Op::Trim),     // 0:0 again: miss, counted in neither
        ];
        let res = run(&mut stream(recs), &[cfg("lru", 2, 4096)]).unwrap();
        let r = &res[0];
        assert_eq!((r.requests, r.io_requests, r.misses), (5, 4, 4));
        assert_eq!((r.read_requests, r.read_misses), (2, 2));
        assert_eq!((r.write_requests, r.write_misses), (2, 1));
        assert!((r.miss_ratio - 0.8).abs() < 1e-12);
    }

    #[test]
    fn many_configs_one_pass_equal_separate_runs() {
        let mut rng = crate::workload::SplitMix64::new(5);
        let recs: Vec<IoRecord> = (0..3000)
            .map(|_| {
                let op = if rng.below(3) == 0 {
                    Op::Write
                } else {
                    Op::Read
                };
                rec(
                    rng.below(2) as u32,
                    rng.below(1 << 20),
                    512 * (1 + rng.below(24)) as u32,
                    op,
                )
            })
            .collect();
        let configs: Vec<CacheSimConfig> = policies::NAMES
            .iter()
            .flat_map(|p| [cfg(p, 16, 4096), cfg(p, 64, 8192)])
            .collect();
        let all = run(&mut stream(recs.clone()), &configs).unwrap();
        for (c, r) in configs.iter().zip(&all) {
            let alone = run(&mut stream(recs.clone()), std::slice::from_ref(c)).unwrap();
            assert_eq!(&alone[0], r);
        }
        // Belady is the lower bound at each size.
        for r in &all {
            let opt = all
                .iter()
                .find(|o| o.policy == "belady" && o.capacity_pages == r.capacity_pages)
                .unwrap();
            assert!(opt.misses <= r.misses, "{} {}", r.policy, r.capacity_pages);
        }
    }

    #[test]
    fn bad_configs_are_errors() {
        assert!(run(&mut stream(vec![]), &[cfg("lru", 0, 4096)]).is_err());
        assert!(run(&mut stream(vec![]), &[cfg("lru", 4, 0)]).is_err());
        let e = run(&mut stream(vec![]), &[cfg("xyz", 4, 4096)]).unwrap_err();
        assert!(e.to_string().contains("lru"));
    }
}
