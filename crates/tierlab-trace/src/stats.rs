//! Trace statistics: counts, bytes, footprint, span. Definitions are in
//! docs/metrics.md; they match the reference table of ../shared/traces.

use rustc_hash::FxHashSet;
use serde::Serialize;

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

/// Accumulates statistics one record at a time.
#[derive(Default)]
pub struct StatsBuilder {
    s: TraceStats,
    blocks: FxHashSet<(u32, u64)>,
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
        s.max_offset_end_bytes = s.max_offset_end_bytes.max(r.end_bytes());
        if let Some(rt) = r.response_ns {
            self.response_sum_ns += rt as u128;
            self.response_count += 1;
        }
        if r.size_bytes > 0 && r.op != Op::Flush {
            let first = r.offset_bytes / FOOTPRINT_BLOCK_BYTES;
            let last = (r.end_bytes() - 1) / FOOTPRINT_BLOCK_BYTES;
            for block in first..=last {
                self.blocks.insert((r.device_id, block));
            }
        }
    }

    pub fn finish(mut self, devices: u64, time_base: TimeBase) -> TraceStats {
        let s = &mut self.s;
        s.footprint_4k_blocks = self.blocks.len() as u64;
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
