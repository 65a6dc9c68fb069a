//! Exact Zipf sampling over a fixed item count with a small table, and a
//! keyed permutation that scatters ranks over the address space.
//!
//! Rank k (1-based) has probability k^-theta / H(n, theta). Ranks 1..=4096
//! are alias-table entries of their own; the remaining ranks are cut into
//! buckets whose ends differ by a factor 1 + 1/64, each an alias entry
//! weighted by its exact mass (Euler–Maclaurin, error < 1e-12 relative).
//! Inside a bucket a rank is drawn uniformly and accepted with probability
//! (k/a)^-theta (rejection against the bucket's largest weight). The bound
//! ((b-1)/a)^-theta >= 0.98 is precomputed, so `powf` runs for ~1.5 % of
//! the tail draws only. The table has ~4096 + 65 ln(n/4096) entries: a few
//! hundred KiB even for 2^40 items, and no float pow per record.

use super::common::{Alias, Rng, mix64, splitmix64};

const HEAD_RANKS: u64 = 4096;
const BUCKET_GROWTH: f64 = 1.0 + 1.0 / 64.0;

#[derive(Clone, Debug)]
struct Bucket {
    /// First rank (1-based) of the bucket.
    start: u64,
    width: u64,
    /// Smallest acceptance probability in the bucket: ((b - 1) / a)^-theta.
    accept_floor: f64,
}

#[derive(Clone, Debug)]
pub(crate) struct Zipf {
    theta: f64,
    head: u64,
    table: Alias,
    buckets: Vec<Bucket>,
}

impl Zipf {
    /// `items >= 1`, `theta >= 0` finite (checked by callers).
    pub fn new(items: u64, theta: f64) -> Zipf {
        let head = items.min(HEAD_RANKS);
        let mut weights: Vec<f64> = (1..=head).map(|k| (k as f64).powf(-theta)).collect();
        let mut buckets = Vec::new();
        let mut a = head + 1;
        while a <= items {
            let grown = (a as f64 * BUCKET_GROWTH) as u64;
            let b = grown.max(a + 1).min(items + 1);
            weights.push(sum_powers(a, b, theta));
            buckets.push(Bucket {
                start: a,
                width: b - a,
                accept_floor: ((b - 1) as f64 / a as f64).powf(-theta),
            });
            a = b;
        }
        Zipf {
            theta,
            head,
            table: Alias::new(&weights),
            buckets,
        }
    }

    /// A 0-based rank: 0 is the most popular item.
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let i = self.table.sample(rng) as u64;
        if i < self.head {
            return i;
        }
        let b = &self.buckets[(i - self.head) as usize];
        loop {
            // One draw for both: the high half of x * width picks the rank
            // (bias <= width / 2^64), the low half is a uniform fraction for
            // the acceptance test.
            let m = rng.next_u64() as u128 * b.width as u128;
            let k = b.start + (m >> 64) as u64;
            let u = (m as u64) as f64 * (1.0 / 18_446_744_073_709_551_616.0);
            if u < b.accept_floor || u < (k as f64 / b.start as f64).powf(-self.theta) {
                return k - 1;
            }
        }
    }

    #[cfg(test)]
    pub fn table_len(&self) -> usize {
        self.table.len()
    }
}

/// sum_{k=a}^{b-1} k^-theta for a > 4096 by Euler–Maclaurin: the integral,
/// the trapezoid end correction and the first derivative term; the next term
/// is below 1e-13 of the sum at these ranks.
fn sum_powers(a: u64, b: u64, theta: f64) -> f64 {
    let (fa, fb) = (a as f64, b as f64);
    let f = |x: f64| x.powf(-theta);
    let df = |x: f64| -theta * x.powf(-theta - 1.0);
    let one_minus = 1.0 - theta;
    let integral = if one_minus.abs() < 1e-12 {
        (fb / fa).ln()
    } else {
        // a^(1-θ) (exp((1-θ) ln(b/a)) - 1) / (1-θ), stable near θ = 1.
        fa.powf(one_minus) * (one_minus * (fb / fa).ln()).exp_m1() / one_minus
    };
    integral + (f(fa) - f(fb)) / 2.0 + (df(fb) - df(fa)) / 12.0
}

/// A keyed bijection of `0..n` (4-round Feistel network on the smallest
/// power of two >= n, with cycle walking): ranks land on scattered items,
/// each item at most once. Expected < 2 network passes per call.
#[derive(Clone, Debug)]
pub(crate) struct Permutation {
    n: u64,
    lo_bits: u32,
    lo_mask: u64,
    hi_mask: u64,
    keys: [u64; 4],
}

impl Permutation {
    pub fn new(n: u64, seed: u64) -> Permutation {
        let bits = if n <= 1 {
            1
        } else {
            64 - (n - 1).leading_zeros()
        };
        let lo_bits = bits / 2;
        let hi_bits = bits - lo_bits;
        let mut s = seed;
        let keys = [
            splitmix64(&mut s),
            splitmix64(&mut s),
            splitmix64(&mut s),
            splitmix64(&mut s),
        ];
        Permutation {
            n,
            lo_bits,
            lo_mask: (1u64 << lo_bits) - 1,
            hi_mask: if hi_bits == 64 {
                u64::MAX
            } else {
                (1u64 << hi_bits) - 1
            },
            keys,
        }
    }

    #[inline]
    fn network(&self, x: u64) -> u64 {
        let mut lo = x & self.lo_mask;
        let mut hi = x >> self.lo_bits;
        // Unbalanced halves are fine: each round xors one half with a function
        // of the other, which is invertible whatever the widths.
        hi ^= mix64(lo ^ self.keys[0]) & self.hi_mask;
        lo ^= mix64(hi ^ self.keys[1]) & self.lo_mask;
        hi ^= mix64(lo ^ self.keys[2]) & self.hi_mask;
        lo ^= mix64(hi ^ self.keys[3]) & self.lo_mask;
        (hi << self.lo_bits) | lo
    }

    #[inline]
    pub fn apply(&self, x: u64) -> u64 {
        debug_assert!(x < self.n);
        let mut y = self.network(x);
        while y >= self.n {
            y = self.network(y);
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact probabilities by brute force: independent of the bucket code.
    fn exact_probabilities(n: u64, theta: f64) -> Vec<f64> {
        let w: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-theta)).collect();
        let total: f64 = w.iter().sum();
        w.into_iter().map(|x| x / total).collect()
    }

    /// Chi-square of observed counts over bins of ranks (`edges` are 0-based
    /// bin starts) against exact probabilities; returns (chi2, dof).
    fn chi_square(counts: &[u64], probs: &[f64], edges: &[u64], samples: u64) -> (f64, usize) {
        let mut chi2 = 0.0;
        for w in edges.windows(2) {
            let (lo, hi) = (w[0] as usize, w[1] as usize);
            let observed: u64 = counts[lo..hi].iter().sum();
            let expected: f64 = probs[lo..hi].iter().sum::<f64>() * samples as f64;
            chi2 += (observed as f64 - expected).powi(2) / expected;
        }
        (chi2, edges.len() - 2)
    }

    fn check_rank_frequency(n: u64, theta: f64, samples: u64, seed: u64) {
        let zipf = Zipf::new(n, theta);
        let probs = exact_probabilities(n, theta);
        let mut rng = Rng::new(seed, 0);
        let mut counts = vec![0u64; n as usize];
        for _ in 0..samples {
            counts[zipf.sample(&mut rng) as usize] += 1;
        }
        // Bins: the top 100 ranks one by one, then geometric bins (factor
        // 1.1) so that every bin expects plenty of samples and the tail's
        // bucket/rejection sampling is checked both across and within buckets.
        let mut edges: Vec<u64> = (0..100).collect();
        let mut e = 100.0f64;
        while (e as u64) < n {
            edges.push(e as u64);
            e *= 1.1;
        }
        edges.dedup();
        edges.push(n);
        let (chi2, dof) = chi_square(&counts, &probs, &edges, samples);
        // chi2 has mean dof and sd sqrt(2 dof): 6 sd keeps false alarms < 1e-8.
        let limit = dof as f64 + 6.0 * (2.0 * dof as f64).sqrt();
        assert!(
            chi2 < limit,
            "n={n} theta={theta}: chi2 {chi2:.1} > {limit:.1} (dof {dof})"
        );
    }

    #[test]
    fn rank_frequencies_match_exact_zipf() {
        check_rank_frequency(1000, 0.99, 1_000_000, 1);
        check_rank_frequency(300_000, 1.0, 2_000_000, 2);
        check_rank_frequency(300_000, 0.5, 2_000_000, 3);
        check_rank_frequency(300_000, 1.4, 1_000_000, 4);
    }

    #[test]
    fn theta_zero_is_uniform_and_table_is_small() {
        let zipf = Zipf::new(1 << 40, 0.99);
        assert!(zipf.table_len() < 6000, "{}", zipf.table_len());
        let uni = Zipf::new(10, 0.0);
        let mut rng = Rng::new(9, 0);
        let mut counts = [0u64; 10];
        for _ in 0..100_000 {
            counts[uni.sample(&mut rng) as usize] += 1;
        }
        for c in counts {
            assert!((c as i64 - 10_000).abs() < 600, "{counts:?}");
        }
    }

    #[test]
    fn permutation_is_a_bijection() {
        for n in [1u64, 2, 3, 1000, 4096, 5000, 65_537] {
            let p = Permutation::new(n, 42);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = p.apply(x);
                assert!(y < n);
                assert!(!seen[y as usize], "n={n}: {y} hit twice");
                seen[y as usize] = true;
            }
        }
        // Different keys give different orders.
        let (a, b) = (Permutation::new(1000, 1), Permutation::new(1000, 2));
        assert!((0..1000).any(|x| a.apply(x) != b.apply(x)));
    }
}
