//! Quantized timestamps: many public traces stamp IOs in whole seconds
//! (Tencent CBS, FlashNet) or milliseconds, so hundreds of IOs share one
//! stamp and an open-loop replay sends them all at one instant — a burst
//! the real system never saw, which then dominates every latency.
//!
//! [`Spread`] wraps a record stream and spreads each run of records that
//! share a stamp over the quantum that follows it (up to the next distinct
//! stamp): evenly (record k of n at `t + k·gap/n`) or as a Poisson process
//! (n arrivals of a Poisson process known to have n events in the gap are n
//! sorted uniform draws). The last run uses the previous gap. Records stay
//! in trace order. [`QuantumStats`] measures what it spread (and a reader
//! without spreading can measure the same to warn).

use std::collections::VecDeque;

use crate::error::Result;
use crate::generate::common::Rng;
use crate::reader::RecordStream;
use crate::record::{DeviceTable, IoRecord, TimeBase};

/// How the records of one stamp are spread over its quantum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpreadMode {
    /// As stamped (every record of a stamp at the same instant).
    #[default]
    None,
    /// Evenly: record k of n at `t + k·gap/n`.
    Even,
    /// As a Poisson process conditioned on n arrivals in the gap: n sorted
    /// uniform times (seeded).
    Poisson,
}

impl SpreadMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SpreadMode::None => "none",
            SpreadMode::Even => "even",
            SpreadMode::Poisson => "poisson",
        }
    }
}

/// What a stream's timestamps look like (counted as records pass).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuantumStats {
    pub records: u64,
    /// Records whose stamp equals their predecessor's.
    pub same_stamp_records: u64,
    /// The smallest positive gap between consecutive stamps (the trace's
    /// time quantum when it is quantized), ns.
    pub min_gap_ns: Option<u64>,
}

impl QuantumStats {
    /// Counts record `time_ns` following `prev_ns`.
    pub fn add(&mut self, prev_ns: Option<u64>, time_ns: u64) {
        self.records += 1;
        match prev_ns {
            Some(p) if p == time_ns => self.same_stamp_records += 1,
            Some(p) if time_ns > p => {
                let gap = time_ns - p;
                self.min_gap_ns = Some(self.min_gap_ns.map_or(gap, |m| m.min(gap)));
            }
            _ => {}
        }
    }

    /// Records per distinct stamp, on average.
    pub fn records_per_stamp(&self) -> f64 {
        let stamps = self.records - self.same_stamp_records;
        self.records as f64 / stamps.max(1) as f64
    }

    /// Quantized enough to distort an open-loop replay: at least half the
    /// records share their predecessor's stamp, and stamps are at least
    /// 1 µs apart (finer stamps are a recorder's resolution, not a burst).
    pub fn is_quantized(&self) -> bool {
        self.records >= 2
            && self.same_stamp_records * 2 >= self.records
            && self.min_gap_ns.is_some_and(|g| g >= 1_000)
    }

    /// A sentence for a warning, naming `who` (e.g. "tenant web").
    pub fn warning(&self, who: &str) -> String {
        let quantum = self.min_gap_ns.unwrap_or(0) as f64 / 1e9;
        format!(
            "{who}: the trace's timestamps are quantized ({:.1} % of records share their \
             predecessor's stamp; {:.0} records per stamp on average; stamps at least {quantum} s \
             apart): an open-loop replay sends each stamp's records at one instant, a burst that \
             dominates the latencies. Set the tenant's `driver.spread = \"even\"` (or \"poisson\") \
             to spread them over the quantum (docs/simulation.md)",
            100.0 * self.same_stamp_records as f64 / self.records as f64,
            self.records_per_stamp(),
        )
    }
}

/// Longest run of one stamp held at once; a longer run is spread in
/// pieces of this many records (over the previous gap each).
const MAX_RUN: usize = 1 << 20;

/// A record stream with each stamp's records spread over its quantum.
pub struct Spread<S> {
    inner: S,
    mode: SpreadMode,
    rng: Rng,
    run: VecDeque<IoRecord>,
    /// The first record after the run (read ahead to find the gap).
    next: Option<IoRecord>,
    last_gap_ns: Option<u64>,
    /// Records given a later time than stamped.
    pub spread_records: u64,
    /// The stamps as read (before spreading).
    pub stats: QuantumStats,
    prev_stamp_ns: Option<u64>,
}

impl<S: RecordStream> Spread<S> {
    pub fn new(inner: S, mode: SpreadMode, seed: u64) -> Spread<S> {
        Spread {
            inner,
            mode,
            rng: Rng::new(seed, 0x5350_5245_4144), // "SPREAD" in ASCII
            run: VecDeque::new(),
            next: None,
            last_gap_ns: None,
            spread_records: 0,
            stats: QuantumStats::default(),
            prev_stamp_ns: None,
        }
    }

    /// The wrapped stream (before any record was read).
    pub fn into_inner(self) -> S {
        assert!(
            self.run.is_empty() && self.next.is_none(),
            "into_inner after records were read"
        );
        self.inner
    }

    /// The next record of the inner stream, counted in `stats`.
    fn pull(&mut self) -> Result<Option<IoRecord>> {
        let r = self.inner.next_record()?;
        if let Some(r) = &r {
            self.stats.add(self.prev_stamp_ns, r.time_ns);
            self.prev_stamp_ns = Some(r.time_ns);
        }
        Ok(r)
    }

    /// Reads the next run of one stamp and spreads it.
    fn fill(&mut self) -> Result<()> {
        let first = match self.next.take() {
            Some(r) => r,
            None => match self.pull()? {
                Some(r) => r,
                None => return Ok(()),
            },
        };
        let t = first.time_ns;
        self.run.push_back(first);
        while self.run.len() < MAX_RUN {
            let Some(r) = self.pull()? else {
                break;
            };
            if r.time_ns == t {
                self.run.push_back(r);
            } else {
                self.next = Some(r);
                break;
            }
        }
        let gap = match self.next {
            Some(n) if n.time_ns > t => Some(n.time_ns - t),
            _ => self.last_gap_ns,
        };
        self.last_gap_ns = gap;
        let n = self.run.len() as u64;
        let Some(gap) = gap.filter(|_| n > 1 && self.mode != SpreadMode::None) else {
            return Ok(());
        };
        match self.mode {
            SpreadMode::Even => {
                for (k, r) in self.run.iter_mut().enumerate() {
                    r.time_ns = t + (gap as u128 * k as u128 / n as u128) as u64;
                }
            }
            SpreadMode::Poisson => {
                let mut offsets: Vec<u64> = (0..n).map(|_| self.rng.below(gap)).collect();
                offsets.sort_unstable();
                for (r, o) in self.run.iter_mut().zip(offsets) {
                    r.time_ns = t + o;
                }
            }
            SpreadMode::None => unreachable!(),
        }
        self.spread_records += self.run.iter().filter(|r| r.time_ns != t).count() as u64;
        Ok(())
    }
}

impl<S: RecordStream> RecordStream for Spread<S> {
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        if self.mode == SpreadMode::None {
            return self.pull();
        }
        if self.run.is_empty() {
            self.fill()?;
        }
        Ok(self.run.pop_front())
    }

    fn devices(&self) -> &DeviceTable {
        self.inner.devices()
    }

    fn time_base(&self) -> TimeBase {
        self.inner.time_base()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Op;
    use crate::slice::tests::VecStream;

    /// Records at the given stamps (seconds), offsets 0, 1, 2, ... so the
    /// order can be checked.
    fn spread(stamps_s: &[u64], mode: SpreadMode) -> (Vec<(u64, u64)>, Spread<VecStream>) {
        let records: Vec<IoRecord> = stamps_s
            .iter()
            .enumerate()
            .map(|(i, &s)| IoRecord {
                time_ns: s * 1_000_000_000,
                offset_bytes: i as u64,
                size_bytes: 4096,
                device_id: 0,
                op: Op::Read,
                response_ns: None,
            })
            .collect();
        let mut s = Spread::new(VecStream::new(records, &[]), mode, 1);
        let mut out = Vec::new();
        while let Some(r) = s.next_record().unwrap() {
            out.push((r.time_ns, r.offset_bytes));
        }
        (out, s)
    }

    #[test]
    fn even_spreads_each_stamp_over_the_gap_to_the_next() {
        // 4 records at 10 s, 1 at 12 s, 2 at 13 s (the last run takes the
        // previous gap, 1 s).
        let (out, s) = spread(&[10, 10, 10, 10, 12, 13, 13], SpreadMode::Even);
        let ms = |t: u64| t / 1_000_000;
        let got: Vec<(u64, u64)> = out.iter().map(|&(t, o)| (ms(t), o)).collect();
        assert_eq!(
            got,
            vec![
                (10_000, 0),
                (10_500, 1),
                (11_000, 2),
                (11_500, 3),
                (12_000, 4),
                (13_000, 5),
                (13_500, 6)
            ]
        );
        assert_eq!(s.spread_records, 4);
        assert_eq!(
            s.stats,
            QuantumStats {
                records: 7,
                same_stamp_records: 4,
                min_gap_ns: Some(1_000_000_000),
            }
        );
        assert!(s.stats.is_quantized());
        assert!((s.stats.records_per_stamp() - 7.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn poisson_keeps_order_inside_the_quantum_and_is_seeded() {
        let stamps: Vec<u64> = (0..1000).map(|i| i / 100).collect(); // 100 per second
        let (a, _) = spread(&stamps, SpreadMode::Poisson);
        let (b, _) = spread(&stamps, SpreadMode::Poisson);
        assert_eq!(a, b, "same seed, same times");
        for (i, w) in a.windows(2).enumerate() {
            assert!(w[0].0 <= w[1].0, "times go back at {i}");
        }
        for (i, &(t, o)) in a.iter().enumerate() {
            assert_eq!(o, i as u64, "trace order kept");
            let second = stamps[i] * 1_000_000_000;
            assert!((second..second + 1_000_000_000).contains(&t));
        }
        // Uniform inside each second: the mean offset is near 0.5 s.
        let mean = a.iter().map(|&(t, _)| t % 1_000_000_000).sum::<u64>() as f64 / 1000.0 / 1e9;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
    }

    #[test]
    fn none_and_fine_stamps_change_nothing() {
        let stamps = [1, 1, 2, 5];
        let (out, s) = spread(&stamps, SpreadMode::None);
        let want: Vec<u64> = stamps.iter().map(|s| s * 1_000_000_000).collect();
        assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), want);
        assert_eq!(s.spread_records, 0);
        // Distinct stamps: not quantized; nothing to spread.
        let (out, s) = spread(&[1, 2, 3], SpreadMode::Even);
        assert_eq!(
            out.iter().map(|x| x.0 / 1_000_000_000).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert!(!s.stats.is_quantized());
    }
}
