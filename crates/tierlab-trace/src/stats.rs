//! Trace statistics: counts, bytes, footprint, span. Definitions are in
//! docs/metrics.md; they match the reference table of ../shared/traces.

use serde::Serialize;

use crate::distinct::{DistinctBlocks, PendingRange};

use crate::error::Result;
use crate::reader::RecordStream;
use crate::record::{IoRecord, Op, TimeBase};

/// Footprint granularity: distinct 4 KiB blocks.
pub const FOOTPRINT_BLOCK_BYTES: u64 = 4096;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TraceStats {
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub trims: u64,
    pub flushes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub trim_bytes: u64,
    /// Distinct (device, 4 KiB block) pairs touched by any request's byte range.
    pub footprint_4k_blocks: u64,
    /// Latest minus earliest timestamp, in seconds; `None` when the format has no time.
    pub span_s: Option<f64>,
    pub devices: u64,
    pub first_time_ns: Option<u64>,
    pub min_time_ns: Option<u64>,
    pub max_time_ns: Option<u64>,
    /// Records whose time is earlier than the previous record's.
    pub out_of_order: u64,
    pub mean_read_bytes: Option<f64>,
    pub mean_write_bytes: Option<f64>,
    /// Share of requests that are writes (0..1).
    pub write_ratio: Option<f64>,
    pub max_offset_end_bytes: u64,
    /// Mean recorded response time, where the format has one.
    pub mean_response_ns: Option<f64>,
    pub time_base: &'static str,
}

/// Block ranges wait this many records between their prefetch and their
/// insert: enough to cover a miss to memory at parse speed.
const PREFETCH_RECORDS: usize = 16;

/// Accumulates statistics one record at a time.
#[derive(Default)]
pub struct StatsBuilder {
    s: TraceStats,
    blocks: DistinctBlocks,
    /// The block ranges of the last records, prefetched and not inserted
    /// yet; a ring of `PREFETCH_RECORDS`.
    pending: [PendingRange; PREFETCH_RECORDS],
    pending_len: usize,
    pending_next: usize,
    last_time: Option<u64>,
    response_sum_ns: u128,
    response_count: u64,
}

impl StatsBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn add(&mut self, r: &IoRecord) {
        let s = &mut self.s;
        s.requests += 1;
        match r.op {
            Op::Read => {
                s.reads += 1;
                s.read_bytes += r.size_bytes as u64;
            }
            Op::Write => {
                s.writes += 1;
                s.write_bytes += r.size_bytes as u64;
            }
            Op::Trim => {
                s.trims += 1;
                s.trim_bytes += r.size_bytes as u64;
            }
            Op::Flush => s.flushes += 1,
        }
        if s.first_time_ns.is_none() {
            s.first_time_ns = Some(r.time_ns);
        }
        s.min_time_ns = Some(s.min_time_ns.map_or(r.time_ns, |t| t.min(r.time_ns)));
        s.max_time_ns = Some(s.max_time_ns.map_or(r.time_ns, |t| t.max(r.time_ns)));
        if self.last_time.is_some_and(|t| r.time_ns < t) {
            s.out_of_order += 1;
        }
        self.last_time = Some(r.time_ns);
        // Readers refuse records that end beyond 2^64 bytes; other streams
        // saturate rather than wrap.
        let end_bytes = r.offset_bytes.saturating_add(r.size_bytes as u64);
        s.max_offset_end_bytes = s.max_offset_end_bytes.max(end_bytes);
        if let Some(rt) = r.response_ns {
            self.response_sum_ns += rt as u128;
            self.response_count += 1;
        }
        if r.size_bytes > 0 && r.op != Op::Flush {
            let first = r.offset_bytes / FOOTPRINT_BLOCK_BYTES;
            let last = (end_bytes - 1) / FOOTPRINT_BLOCK_BYTES;
            // Footprints of random IO spread over megabytes of bitmaps:
            // fetch this range's word now, insert it 16 records later.
            let pending = self.blocks.prefetch_range(r.device_id, first, last);
            let slot = &mut self.pending[self.pending_next];
            if self.pending_len == PREFETCH_RECORDS {
                self.blocks.insert_pending(*slot);
            } else {
                self.pending_len += 1;
            }
            *slot = pending;
            self.pending_next = (self.pending_next + 1) % PREFETCH_RECORDS;
        }
    }

    pub fn finish(mut self, devices: u64, time_base: TimeBase) -> TraceStats {
        for &p in &self.pending[..self.pending_len] {
            self.blocks.insert_pending(p);
        }
        let s = &mut self.s;
        s.footprint_4k_blocks = self.blocks.len();
        s.devices = devices;
        s.time_base = match time_base {
            TimeBase::UnixEpoch => "unix_epoch",
            TimeBase::Relative => "relative",
            TimeBase::None => "none",
        };
        s.span_s = match (time_base, s.min_time_ns, s.max_time_ns) {
            (TimeBase::None, _, _) => None,
            (_, Some(lo), Some(hi)) => Some((hi - lo) as f64 / 1e9),
            _ => None,
        };
        if time_base == TimeBase::None {
            s.first_time_ns = None;
            s.min_time_ns = None;
            s.max_time_ns = None;
        }
        s.mean_read_bytes = (s.reads > 0).then(|| s.read_bytes as f64 / s.reads as f64);
        s.mean_write_bytes = (s.writes > 0).then(|| s.write_bytes as f64 / s.writes as f64);
        s.write_ratio = (s.requests > 0).then(|| s.writes as f64 / s.requests as f64);
        s.mean_response_ns = (self.response_count > 0)
            .then(|| self.response_sum_ns as f64 / self.response_count as f64);
        self.s
    }
}

/// Statistics of a whole stream.
pub fn compute(stream: &mut dyn RecordStream) -> Result<TraceStats> {
    let mut b = StatsBuilder::new();
    while let Some(r) = stream.next_record()? {
        b.add(&r);
    }
    Ok(b.finish(stream.devices().len() as u64, stream.time_base()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{KvParams, from_spec};
    use rustc_hash::FxHashSet;

    fn rec(device_id: u32, op: Op, offset_bytes: u64, size_bytes: u32) -> IoRecord {
        IoRecord {
            time_ns: 0,
            offset_bytes,
            size_bytes,
            device_id,
            op,
            response_ns: None,
        }
    }

    fn footprint(records: &[IoRecord]) -> u64 {
        let mut b = StatsBuilder::new();
        for r in records {
            b.add(r);
        }
        b.finish(2, TimeBase::None).footprint_4k_blocks
    }

    /// The footprint as it was computed before the region sets: one hash
    /// set entry per (device, block).
    fn footprint_by_hash_set(records: &[IoRecord]) -> u64 {
        let mut blocks = FxHashSet::default();
        for r in records {
            if r.size_bytes > 0 && r.op != Op::Flush {
                let first = r.offset_bytes / FOOTPRINT_BLOCK_BYTES;
                let last = (r.end_bytes() - 1) / FOOTPRINT_BLOCK_BYTES;
                for block in first..=last {
                    blocks.insert((r.device_id, block));
                }
            }
        }
        blocks.len() as u64
    }

    #[test]
    fn footprint_by_hand() {
        let top = u64::MAX - 4096; // ends at 2^64 - 1
        let records = [
            rec(0, Op::Read, 0, 4096),             // block 0
            rec(0, Op::Write, 4095, 2),            // blocks 0, 1: one new
            rec(0, Op::Read, 8192, 3 * 4096 + 1),  // blocks 2..=5: four
            rec(1, Op::Read, 0, 512),              // device 1, block 0
            rec(0, Op::Flush, 0, 0),               // nothing
            rec(0, Op::Read, 40960, 0),            // size 0: nothing
            rec(0, Op::Flush, 1 << 20, 4096),      // flushes touch no block
            rec(0, Op::Read, top, 4096),           // blocks 2^52 - 2 and 2^52 - 1
            rec(0, Op::Write, u64::MAX - 1, 1),    // block 2^52 - 1 again
            rec(0, Op::Read, 1 << 60, 4096),       // far away, alone
            rec(0, Op::Trim, 0, 8192),             // trims count; nothing new
            rec(1, Op::Trim, 4096 * 65_535, 8192), // across a region edge: two
        ];
        assert_eq!(footprint(&records), 1 + 1 + 4 + 1 + 2 + 1 + 2);
        assert_eq!(footprint_by_hash_set(&records), footprint(&records));
        let mut b = StatsBuilder::new();
        for r in &records {
            b.add(r);
        }
        assert_eq!(b.finish(2, TimeBase::None).max_offset_end_bytes, u64::MAX);
    }

    #[test]
    fn same_stats_as_the_hash_set_on_generated_traces() {
        for (name, params) in [
            ("uniform", "count=200000"),
            ("zipf", "count=200000"),
            ("mixed", "count=200000"),
            ("hswd.hm_0", "count=200000"),
            ("file-share", "count=100000"),
            ("boot-storm", "count=100000"),
        ] {
            let kv = KvParams::parse([params.to_string()]).unwrap();
            let mut stream = from_spec(name, &kv, 5).unwrap();
            let mut records = Vec::new();
            while let Some(r) = stream.next_record().unwrap() {
                records.push(r);
            }
            let expected = footprint_by_hash_set(&records);
            assert!(expected > 1000, "{name}: {expected}");
            assert_eq!(footprint(&records), expected, "{name}");
            // And the rest of the statistics through `compute`.
            let s = compute(&mut from_spec(name, &kv, 5).unwrap()).unwrap();
            assert_eq!(s.footprint_4k_blocks, expected, "{name}");
            assert_eq!(s.requests, records.len() as u64, "{name}");
        }
    }
}
