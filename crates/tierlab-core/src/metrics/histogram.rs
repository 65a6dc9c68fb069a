//! Latency of one scope: exact count, sum, min and max, plus an HDR
//! (High Dynamic Range, log-linear) histogram for percentiles and the CDF.
//!
//! Why both: the mean and the extremes can be exact for free (integer
//! sums), so only percentiles carry the histogram's bounded error.
//!
//! Why our own histogram and not the `hdrhistogram` crate's: its record
//! path (range check returning a `Result`, its own min/max, not inlined)
//! was a third of the recorder's cost (perf, release build). The bucket
//! layout here is exactly the crate's for lowest value 1 ns, 3 significant
//! digits; the tests check every bucket edge, percentile and CDF point
//! against the crate, which stays as the independent reference.

use crate::NS_PER_S;

/// Significant decimal digits the histogram keeps: every value is stored
/// in a bucket no wider than 1/1024 of the bucket's lowest value.
pub const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// Largest latency the histogram resolves (1 hour). Larger latencies are
/// counted exactly in `count`/`sum`/`max` and in
/// `LatencyHistogram::over_range`, but sit in the histogram at this value.
pub const HISTOGRAM_HIGHEST_NS: u64 = 3_600 * NS_PER_S;

// The layout, as HdrHistogram derives it: unit resolution up to
// 2·10^digits = 2000 needs 2048 sub-buckets (the next power of two), so
// bucket 0 holds 0..2047 in 1 ns steps and bucket b ≥ 1 holds
// [1024·2^b, 2048·2^b) in 2^b ns steps, 1024 sub-buckets each.
const SUB_BUCKET_HALF_MAGNITUDE: u32 = 10;
const SUB_BUCKET_HALF_COUNT: usize = 1 << SUB_BUCKET_HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (2 << SUB_BUCKET_HALF_MAGNITUDE) - 1;
/// 64 minus the bits of the largest bucket-0 value (2047).
const LEADING_ZERO_BASE: u32 = 64 - (SUB_BUCKET_HALF_MAGNITUDE + 1);
const _: () =
    assert!((SUB_BUCKET_MASK + 1) as u32 >= 2 * 10u32.pow(HISTOGRAM_SIGNIFICANT_DIGITS as u32));
/// Counters: one past the index of the highest value (33,421 of them,
/// rounded up to whole buckets: 33,792 u64 = 264 KiB per histogram).
pub(super) const COUNTS_LEN: usize =
    (index_for(HISTOGRAM_HIGHEST_NS) / SUB_BUCKET_HALF_COUNT + 1) * SUB_BUCKET_HALF_COUNT;

/// The bucket of `value`: log2 of its step size.
#[inline]
const fn bucket_of(value: u64) -> u32 {
    LEADING_ZERO_BASE - (value | SUB_BUCKET_MASK).leading_zeros()
}

/// The counter index of `value` (≤ `HISTOGRAM_HIGHEST_NS`).
#[inline]
pub(super) const fn index_for(value: u64) -> usize {
    let bucket = bucket_of(value);
    let sub_bucket = (value >> bucket) as usize;
    ((bucket as usize + 1) << SUB_BUCKET_HALF_MAGNITUDE) + sub_bucket - SUB_BUCKET_HALF_COUNT
}

/// The smallest and largest value counted at `index`.
pub(super) fn range_at(index: usize) -> (u64, u64) {
    let bucket = (index >> SUB_BUCKET_HALF_MAGNITUDE).saturating_sub(1);
    let sub_bucket = if index < 2 * SUB_BUCKET_HALF_COUNT {
        index
    } else {
        (index & (SUB_BUCKET_HALF_COUNT - 1)) + SUB_BUCKET_HALF_COUNT
    };
    let lowest = (sub_bucket as u64) << bucket;
    (lowest, lowest + (1u64 << bucket) - 1)
}

/// Latencies of one scope (all IOs, one op, one tier, tenant or device).
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    counts: Box<[u64]>,
    count: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
    over_range: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        LatencyHistogram {
            // Zeroed pages come from the OS lazily: untouched buckets cost
            // no RAM.
            counts: vec![0u64; COUNTS_LEN].into_boxed_slice(),
            count: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            over_range: 0,
        }
    }

    /// Records one latency. Allocation-free.
    #[inline]
    pub fn record(&mut self, latency_ns: u64) {
        let stored_ns = if latency_ns > HISTOGRAM_HIGHEST_NS {
            self.over_range += 1;
            HISTOGRAM_HIGHEST_NS
        } else {
            latency_ns
        };
        self.counts[index_for(stored_ns)] += 1;
        self.count += 1;
        self.sum_ns += latency_ns as u128;
        self.min_ns = self.min_ns.min(latency_ns);
        self.max_ns = self.max_ns.max(latency_ns);
    }

    /// The counter indices that can be non-zero.
    fn used_indices(&self) -> std::ops::Range<usize> {
        if self.count == 0 {
            return 0..0;
        }
        index_for(self.min_ns.min(HISTOGRAM_HIGHEST_NS))
            ..index_for(self.max_ns.min(HISTOGRAM_HIGHEST_NS)) + 1
    }

    /// Forgets everything; zeroes only the counters between min and max.
    pub fn clear(&mut self) {
        let used = self.used_indices();
        self.counts[used].fill(0);
        self.count = 0;
        self.sum_ns = 0;
        self.min_ns = u64::MAX;
        self.max_ns = 0;
        self.over_range = 0;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact sum of the recorded latencies.
    pub fn sum_ns(&self) -> u128 {
        self.sum_ns
    }

    /// Exact smallest latency, `None` when empty.
    pub fn min_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min_ns)
    }

    /// Exact largest latency, `None` when empty.
    pub fn max_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max_ns)
    }

    /// Latencies above `HISTOGRAM_HIGHEST_NS`.
    pub fn over_range(&self) -> u64 {
        self.over_range
    }

    /// Percentiles for `quantiles` = [(numerator, denominator)], ascending,
    /// in one pass. For quantile q = num/den over n IOs the rank is
    /// r = max(1, ceil(n·num/den)) (integer arithmetic, so 0.99 × 100 is
    /// exactly rank 99); the answer is the upper edge of the histogram
    /// bucket holding the r-th smallest latency, capped at the exact max.
    /// It is never below the exact nearest-rank percentile x and is less
    /// than x·(1 + 1/1024) (exact for x < 2048 ns). `None` when empty.
    pub fn percentiles_ns<const N: usize>(&self, quantiles: [(u64, u64); N]) -> Option<[u64; N]> {
        if self.count == 0 {
            return None;
        }
        let ranks = quantiles.map(|(num, den)| {
            assert!(
                den > 0 && num <= den,
                "quantile {num}/{den} is not in [0, 1]"
            );
            ((self.count as u128 * num as u128).div_ceil(den as u128) as u64).max(1)
        });
        debug_assert!(
            ranks.windows(2).all(|w| w[0] <= w[1]),
            "quantiles must ascend"
        );
        let mut out = [self.max_ns; N];
        let mut next = 0;
        for (upper_ns, cumulative) in self.cdf() {
            while next < N && cumulative >= ranks[next] {
                out[next] = upper_ns;
                next += 1;
            }
            if next == N {
                break;
            }
        }
        Some(out)
    }

    /// The upper edge of the bucket `latency_ns` falls in (values above the
    /// range: the edge of the last bucket).
    pub fn bucket_upper_edge_ns(&self, latency_ns: u64) -> u64 {
        range_at(index_for(latency_ns.min(HISTOGRAM_HIGHEST_NS))).1
    }

    /// The CDF at the histogram's bucket edges: for every non-empty bucket
    /// in ascending order, (upper edge capped at the exact max, IOs with
    /// latency ≤ that value). Exact at these points: every IO in the bucket
    /// is ≤ its upper edge, every IO in a later bucket is above it.
    pub fn cdf(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let used = self.used_indices();
        let first = used.start;
        let mut cumulative = 0u64;
        let max_ns = self.max_ns;
        self.counts[used]
            .iter()
            .enumerate()
            .filter(|&(_, &count)| count > 0)
            .map(move |(offset, &count)| {
                cumulative += count;
                (range_at(first + offset).1.min(max_ns), cumulative)
            })
    }
}

/// Latencies of one series interval. Only the p99 of an interval is
/// needed, and intervals may hold a handful of IOs each, while scanning
/// and clearing a histogram costs up to its whole 264 KiB per interval
/// (~15 µs, measured with 1 IO per interval). So the first
/// `BUFFERED_LATENCIES` latencies are kept raw (in a buffer allocated
/// once) and the p99 found by selection; only a busier interval spills
/// into the histogram, whose scan and clear are then shared by ≥ 4096 IOs. Both
/// paths give the same number: the bucket upper edge of the rank-r
/// latency, capped at the max (as `LatencyHistogram::percentiles_ns`).
#[derive(Clone, Debug)]
pub(crate) struct IntervalLatency {
    buffer: Vec<u64>,
    hist: LatencyHistogram,
    spilled: bool,
    count: u64,
    sum_ns: u128,
    max_ns: u64,
}

const BUFFERED_LATENCIES: usize = 4096;

impl Default for IntervalLatency {
    fn default() -> Self {
        IntervalLatency {
            buffer: Vec::with_capacity(BUFFERED_LATENCIES),
            hist: LatencyHistogram::new(),
            spilled: false,
            count: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

impl IntervalLatency {
    #[inline]
    pub fn record(&mut self, latency_ns: u64) {
        self.count += 1;
        self.sum_ns += latency_ns as u128;
        self.max_ns = self.max_ns.max(latency_ns);
        if self.spilled {
            self.hist.record(latency_ns);
        } else if self.buffer.len() < BUFFERED_LATENCIES {
            // Within capacity: never allocates.
            self.buffer.push(latency_ns);
        } else {
            self.spill(latency_ns);
        }
    }

    #[cold]
    fn spill(&mut self, latency_ns: u64) {
        for &v in &self.buffer {
            self.hist.record(v);
        }
        self.buffer.clear();
        self.hist.record(latency_ns);
        self.spilled = true;
    }

    pub fn sum_ns(&self) -> u128 {
        self.sum_ns
    }

    pub fn max_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max_ns)
    }

    /// The percentile num/den, defined as `LatencyHistogram::percentiles_ns`.
    /// Reorders the buffer (it is cleared next anyway).
    pub fn percentile_ns(&mut self, num: u64, den: u64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        if self.spilled {
            return self.hist.percentiles_ns([(num, den)]).map(|[p]| p);
        }
        let rank = ((self.count as u128 * num as u128).div_ceil(den as u128) as u64).max(1);
        let (_, &mut nth, _) = self.buffer.select_nth_unstable(rank as usize - 1);
        Some(self.hist.bucket_upper_edge_ns(nth).min(self.max_ns))
    }

    pub fn clear(&mut self) {
        self.buffer.clear();
        if self.spilled {
            self.hist.clear();
            self.spilled = false;
        }
        self.count = 0;
        self.sum_ns = 0;
        self.max_ns = 0;
    }
}
