//! Deterministic synthetic request streams for tests, benchmarks and
//! examples: a seeded SplitMix64 generator and a Zipf sampler (inverse CDF
//! by binary search), so results do not depend on any external RNG crate's
//! version.

use crate::Key;

/// SplitMix64 (Steele et al. 2014): tiny, seedable, good enough to drive
/// workloads; the same seed always gives the same stream.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }

    /// Uniform in `0..n` (`n > 0`); the modulo bias is irrelevant here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The SplitMix64 finalizer: a bijective 64-bit mix, also used as the
/// spatial-sampling hash of SHARDS.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Zipf(alpha) over keys `0..n_keys`: key `r` has probability
/// proportional to `1 / (r + 1)^alpha`.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
    rng: SplitMix64,
}

impl Zipf {
    pub fn new(n_keys: usize, alpha: f64, seed: u64) -> Self {
        let n = n_keys.max(1);
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for r in 0..n {
            acc += 1.0 / ((r + 1) as f64).powf(alpha);
            cdf.push(acc);
        }
        for v in &mut cdf {
            *v /= acc;
        }
        Zipf {
            cdf,
            rng: SplitMix64::new(seed),
        }
    }

    pub fn next_key(&mut self) -> Key {
        let u = self.rng.unit();
        let r = self.cdf.partition_point(|&c| c < u);
        r.min(self.cdf.len() - 1) as Key
    }

    pub fn take(&mut self, n: usize) -> Vec<Key> {
        (0..n).map(|_| self.next_key()).collect()
    }
}

/// Uniform keys in `0..n_keys`.
pub fn uniform(n: usize, n_keys: u64, seed: u64) -> Vec<Key> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.below(n_keys)).collect()
}
