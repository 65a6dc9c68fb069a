//! Latency of one scope: exact count, sum, min and max, plus an HDR
//! histogram (the `hdrhistogram` crate) for percentiles and the CDF.
//!
//! Why both: the mean and the extremes can be exact for free (integer
//! sums), so only percentiles carry the histogram's bounded error.

use hdrhistogram::Histogram;

use crate::NS_PER_S;

/// Significant decimal digits the histogram keeps: every value is stored
/// in a bucket no wider than 1/1024 of the bucket's lowest value.
pub const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// Largest latency the histogram resolves (1 hour). Larger latencies are
/// counted exactly in `count`/`sum`/`max` and in
/// `LatencyHistogram::over_range`, but sit in the histogram at this value.
pub const HISTOGRAM_HIGHEST_NS: u64 = 3_600 * NS_PER_S;

/// Latencies of one scope (all IOs, one op, one tier, tenant or device).
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
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
        // Lowest discernible value 1 ns: unit resolution below 2048 ns,
        // then 3 significant digits, up to 1 hour: 33,792 u64 counters
        // (264 KiB) per histogram.
        let hist =
            Histogram::new_with_bounds(1, HISTOGRAM_HIGHEST_NS, HISTOGRAM_SIGNIFICANT_DIGITS)
                .expect("constant histogram bounds are valid");
        LatencyHistogram {
            hist,
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
        // In range by construction, so this never clamps further.
        self.hist.saturating_record(stored_ns);
        self.count += 1;
        self.sum_ns += latency_ns as u128;
        self.min_ns = self.min_ns.min(latency_ns);
        self.max_ns = self.max_ns.max(latency_ns);
    }

    /// Forgets everything. Costs a pass over the counters (264 KiB), so it
    /// is skipped when nothing was recorded.
    pub fn clear(&mut self) {
        if self.count == 0 {
            return;
        }
        self.hist.reset();
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
        let mut cumulative = 0u64;
        for bucket in self.hist.iter_recorded() {
            cumulative += bucket.count_at_value();
            while next < N && cumulative >= ranks[next] {
                out[next] = bucket.value_iterated_to().min(self.max_ns);
                next += 1;
            }
            if next == N {
                break;
            }
        }
        Some(out)
    }

    /// The CDF at the histogram's bucket edges: for every non-empty bucket
    /// in ascending order, (upper edge capped at the exact max, IOs with
    /// latency ≤ that value). Exact at these points: every IO in the bucket
    /// is ≤ its upper edge, every IO in a later bucket is above it.
    pub fn cdf(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut cumulative = 0u64;
        let max_ns = self.max_ns;
        self.hist.iter_recorded().map(move |bucket| {
            cumulative += bucket.count_at_value();
            (bucket.value_iterated_to().min(max_ns), cumulative)
        })
    }
}
