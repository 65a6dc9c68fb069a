//! Miss-ratio curves: the miss ratio of a cache at many sizes from one pass.
//!
//! * Exact LRU (Mattson et al. 1970): LRU has the inclusion property, so a
//!   reference hits in every LRU cache at least as large as its stack
//!   distance (the number of distinct pages referenced since the previous
//!   reference to the same page, itself included). Distances come from a
//!   Fenwick tree over access times holding a 1 at each page's last access
//!   time (Bennett & Kruskal 1975; Almási et al. 2002): O(log n) per access.
//!   Times are renumbered when the tree fills, so memory is proportional to
//!   the distinct pages, not to the trace length.
//! * SHARDS (Waldspurger et al., FAST '15), fixed-rate: a page is sampled iff
//!   `hash(key) mod P < T` (R = T/P), so all references to a sampled page
//!   are kept. For LRU the sampled stream's stack distances are scaled by
//!   1/R (a sampled distance d stands for d/R, so it hits at size c iff
//!   d <= c·R). Other policies have no stack property: for each requested
//!   size c we simulate the policy itself at size c·R (rounded, at least 1
//!   page) on the sampled stream — the "mini-simulation" approach of
//!   Waldspurger et al., ATC '17 — which costs one sampled cache per size.

use crate::policies;
use crate::sim::record_pages;
use crate::workload::mix64;
use crate::{Eviction, Key};
use rustc_hash::FxHashMap;
use tierlab_trace::{ParamError, RecordStream, Result, TraceError};

/// SHARDS' hash modulus P (2^24, as in the paper's implementation).
pub const SHARDS_MODULUS: u64 = 1 << 24;

/// Stack distances by a Fenwick tree over access times.
#[derive(Debug)]
struct StackDistance {
    last: FxHashMap<Key, u32>,
    /// 1-based Fenwick tree over time slots 0..size; counts fit in u32.
    tree: Vec<u32>,
    now: usize,
}

impl StackDistance {
    fn new() -> Self {
        StackDistance {
            last: FxHashMap::default(),
            tree: vec![0; 1025],
            now: 0,
        }
    }

    fn size(&self) -> usize {
        self.tree.len() - 1
    }

    fn add(&mut self, slot: usize, delta: u32) {
        let mut i = slot + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Marks in slots 0..=slot.
    fn prefix(&self, slot: usize) -> u32 {
        let mut i = slot + 1;
        let mut s = 0u32;
        while i > 0 {
            s = s.wrapping_add(self.tree[i]);
            i &= i - 1;
        }
        s
    }

    /// Renumbers the live last-access times 0..live in order and rebuilds
    /// the tree at twice the live count: growth and compaction in one.
    fn rebuild(&mut self) {
        let mut live: Vec<(u32, Key)> = self.last.iter().map(|(&k, &t)| (t, k)).collect();
        live.sort_unstable();
        let size = (2 * live.len()).max(1024);
        let mut tree = vec![0u32; size + 1];
        for (new_t, &(_, k)) in live.iter().enumerate() {
            self.last.insert(k, new_t as u32);
            tree[new_t + 1] = 1;
        }
        for i in 1..=size {
            let j = i + (i & i.wrapping_neg());
            if j <= size {
                tree[j] = tree[j].wrapping_add(tree[i]);
            }
        }
        self.tree = tree;
        self.now = live.len();
    }

    /// The stack distance of this reference (1 = re-reference of the most
    /// recent page), or `None` for a first reference.
    fn access(&mut self, key: Key) -> Option<u64> {
        if self.now >= self.size() {
            self.rebuild();
        }
        let t = self.now;
        self.now += 1;
        let d = self.last.insert(key, t as u32).map(|s| {
            let s = s as usize;
            let before = if s == 0 { 0 } else { self.prefix(s - 1) };
            let d = self.prefix(t - 1).wrapping_sub(before);
            self.add(s, u32::MAX); // -1
            d as u64
        });
        self.add(t, 1);
        d
    }
}

/// Exact LRU miss-ratio curve, built one reference at a time.
#[derive(Debug)]
pub struct LruMrc {
    sd: StackDistance,
    /// `hist[d]`: references with stack distance d (index 0 unused).
    hist: Vec<u64>,
    cold: u64,
    total: u64,
}

impl Default for LruMrc {
    fn default() -> Self {
        Self::new()
    }
}

impl LruMrc {
    pub fn new() -> Self {
        LruMrc {
            sd: StackDistance::new(),
            hist: vec![0],
            cold: 0,
            total: 0,
        }
    }

    pub fn access(&mut self, key: Key) {
        self.total += 1;
        match self.sd.access(key) {
            Some(d) => {
                let d = d as usize;
                if d >= self.hist.len() {
                    self.hist.resize(d + 1, 0);
                }
                self.hist[d] += 1;
            }
            None => self.cold += 1,
        }
    }

    pub fn requests(&self) -> u64 {
        self.total
    }

    /// Compulsory misses (first references).
    pub fn cold_misses(&self) -> u64 {
        self.cold
    }

    /// Misses of an LRU cache of `size` pages.
    pub fn misses_at(&self, size: u64) -> u64 {
        let upto = (size as usize).min(self.hist.len() - 1);
        let hits: u64 = self.hist[1..=upto].iter().sum();
        self.total - hits
    }

    pub fn miss_ratio_at(&self, size: u64) -> f64 {
        ratio(self.misses_at(size), self.total)
    }

    /// Miss ratios at every size 0..=max_size (a step function: flat from
    /// the largest stack distance on).
    pub fn curve(&self, max_size: u64) -> Vec<f64> {
        let mut out = Vec::with_capacity(max_size as usize + 1);
        let mut hits = 0u64;
        for c in 0..=max_size as usize {
            if c >= 1 {
                hits += self.hist.get(c).copied().unwrap_or(0);
            }
            out.push(ratio(self.total - hits, self.total));
        }
        out
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// SHARDS_adj (Waldspurger et al. FAST '15, Sec. 4.2): a few very hot
/// pages being in or out of the sample moves the sampled reference count
/// far from its expectation N·R; the surplus or deficit is credited to the
/// smallest distances (hits at every size), which leaves the sampled misses
/// over the expected count: misses / (N·R).
fn adjusted(sampled_misses: u64, total: u64, rate: f64) -> f64 {
    let expected = total as f64 * rate;
    if expected <= 0.0 {
        return 0.0;
    }
    (sampled_misses as f64 / expected).min(1.0)
}

/// Fixed-rate spatial sampling: `hash(key) mod P < T`.
#[derive(Clone, Copy, Debug)]
pub struct Shards {
    threshold: u64,
}

impl Shards {
    /// `rate` in (0, 1]; rounded to a multiple of 1/P.
    pub fn new(rate: f64) -> std::result::Result<Self, ParamError> {
        if !(rate > 0.0 && rate <= 1.0) {
            return Err(ParamError::new(
                "sample_rate",
                rate,
                "a SHARDS rate in (0, 1]",
            ));
        }
        let threshold = ((rate * SHARDS_MODULUS as f64).round() as u64).max(1);
        Ok(Shards { threshold })
    }

    /// The effective rate R = T / P.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / SHARDS_MODULUS as f64
    }

    #[inline]
    pub fn sampled(&self, key: Key) -> bool {
        // Offset first: the finalizer maps 0 to 0, and key 0 is often the
        // hottest page (page 0 of device 0), which would always be sampled.
        mix64(key.wrapping_add(0x9E37_79B9_7F4A_7C15)) % SHARDS_MODULUS < self.threshold
    }

    /// The sampled cache size standing for `size` pages.
    pub fn scaled_size(&self, size: u64) -> u64 {
        ((size as f64 * self.rate()).round() as u64).max(1)
    }
}

/// SHARDS for LRU: sampled stack distances, rescaled.
#[derive(Debug)]
pub struct ShardsLru {
    shards: Shards,
    mrc: LruMrc,
    /// All references, sampled or not (for the SHARDS_adj correction).
    total: u64,
}

impl ShardsLru {
    pub fn new(rate: f64) -> std::result::Result<Self, ParamError> {
        Ok(ShardsLru {
            shards: Shards::new(rate)?,
            mrc: LruMrc::new(),
            total: 0,
        })
    }

    pub fn access(&mut self, key: Key) {
        self.total += 1;
        if self.shards.sampled(key) {
            self.mrc.access(key);
        }
    }

    /// Estimated LRU miss ratio at `size` pages: a sampled distance d
    /// stands for d / R, a hit iff d <= size · R.
    pub fn miss_ratio_at(&self, size: u64) -> f64 {
        let scaled = (size as f64 * self.shards.rate()).floor() as u64;
        adjusted(self.mrc.misses_at(scaled), self.total, self.shards.rate())
    }

    pub fn sampled_requests(&self) -> u64 {
        self.mrc.requests()
    }
}

/// SHARDS for any policy: one scaled-down cache per requested size, fed
/// the sampled references.
pub struct ShardsSim {
    shards: Shards,
    sizes: Vec<u64>,
    caches: Vec<Box<dyn Eviction>>,
    misses: Vec<u64>,
    sampled: u64,
    total: u64,
}

impl ShardsSim {
    /// Belady is refused: it needs next-access times, which sampling
    /// would have to precompute over the whole trace anyway.
    pub fn new(policy: &str, sizes: &[u64], rate: f64) -> std::result::Result<Self, ParamError> {
        let shards = Shards::new(rate)?;
        let mut caches = Vec::with_capacity(sizes.len());
        for &c in sizes {
            if c == 0 {
                return Err(ParamError::new("sizes", "0 pages", "at least 1 page"));
            }
            let cache = policies::build(policy, shards.scaled_size(c) as usize)?;
            if cache.name() == "belady" {
                return Err(ParamError::new(
                    "policy",
                    "belady, which needs look-ahead",
                    "a policy that runs online (SHARDS samples one pass)",
                ));
            }
            caches.push(cache);
        }
        Ok(ShardsSim {
            shards,
            sizes: sizes.to_vec(),
            misses: vec![0; sizes.len()],
            caches,
            sampled: 0,
            total: 0,
        })
    }

    pub fn access(&mut self, key: Key) {
        self.total += 1;
        if !self.shards.sampled(key) {
            return;
        }
        self.sampled += 1;
        for (c, m) in self.caches.iter_mut().zip(&mut self.misses) {
            *m += !c.access(key).is_hit() as u64;
        }
    }

    /// References that fell in the sample.
    pub fn sampled_requests(&self) -> u64 {
        self.sampled
    }

    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    /// Estimated miss ratios, one per requested size.
    pub fn miss_ratios(&self) -> Vec<f64> {
        let r = self.shards.rate();
        self.misses
            .iter()
            .map(|&m| adjusted(m, self.total, r))
            .collect()
    }
}

/// The exact LRU MRC of a trace (pages as in `sim::run`).
pub fn lru_mrc(stream: &mut dyn RecordStream, page_size_bytes: u32) -> Result<LruMrc> {
    if page_size_bytes == 0 {
        return Err(TraceError::Invalid(
            "page size must be at least 1 byte".into(),
        ));
    }
    let mut mrc = LruMrc::new();
    while let Some(rec) = stream.next_record()? {
        for k in record_pages(&rec, page_size_bytes) {
            mrc.access(k);
        }
    }
    Ok(mrc)
}

/// SHARDS miss ratios of `policy` at `sizes` (pages as in `sim::run`); LRU
/// uses rescaled stack distances, other policies mini-simulations.
pub fn shards_mrc(
    stream: &mut dyn RecordStream,
    page_size_bytes: u32,
    policy: &str,
    sizes: &[u64],
    rate: f64,
) -> Result<Vec<f64>> {
    if page_size_bytes == 0 {
        return Err(TraceError::Invalid(
            "page size must be at least 1 byte".into(),
        ));
    }
    if policy.eq_ignore_ascii_case("lru") {
        let mut s = ShardsLru::new(rate)?;
        while let Some(rec) = stream.next_record()? {
            for k in record_pages(&rec, page_size_bytes) {
                s.access(k);
            }
        }
        return Ok(sizes.iter().map(|&c| s.miss_ratio_at(c)).collect());
    }
    let mut s = ShardsSim::new(policy, sizes, rate)?;
    while let Some(rec) = stream.next_record()? {
        for k in record_pages(&rec, page_size_bytes) {
            s.access(k);
        }
    }
    Ok(s.miss_ratios())
}

/// How a curve is computed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MrcMethod {
    /// Exact, by LRU stack distances (LRU only).
    ExactLru,
    /// SHARDS-sampled at this spatial rate (0 < rate <= 1), any policy.
    Shards { rate: f64 },
}

/// One point of a miss-ratio curve (`tierlab cache --mrc`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct MrcPoint {
    pub policy: String,
    /// `exact` (LRU stack distances) or `shards` (sampled estimate).
    pub method: &'static str,
    pub sampling_rate: f64,
    pub capacity_pages: u64,
    pub page_size_bytes: u32,
    pub requests: u64,
    pub io_requests: u64,
    /// Exact, or `miss_ratio × requests` rounded for SHARDS.
    pub misses: u64,
    pub miss_ratio: f64,
}

/// The miss ratios of `policy` (a canonical name) at every size in
/// `sizes_pages` from one pass over `stream`, its requests split into pages
/// of `page_size` bytes (docs/cache.md).
pub fn curve(
    stream: &mut dyn RecordStream,
    policy: &str,
    method: MrcMethod,
    sizes_pages: &[u64],
    page_size: u32,
) -> Result<Vec<MrcPoint>> {
    let mut io_requests = 0u64;
    let mut requests = 0u64;
    let (mut lru, mut sampled) = match method {
        MrcMethod::ExactLru => {
            if policy != "lru" {
                return Err(TraceError::Invalid(format!(
                    "an exact one-pass curve exists only for LRU, not {policy:?}"
                )));
            }
            (Some(LruMrc::new()), None)
        }
        MrcMethod::Shards { rate } => (None, Some(ShardsSim::new(policy, sizes_pages, rate)?)),
    };
    while let Some(rec) = stream.next_record()? {
        let mut any = false;
        for key in record_pages(&rec, page_size) {
            match (&mut lru, &mut sampled) {
                (Some(m), _) => m.access(key),
                (_, Some(s)) => s.access(key),
                _ => {}
            }
            requests += 1;
            any = true;
        }
        io_requests += any as u64;
    }
    let ratios: Vec<f64> = match (&lru, &sampled) {
        (Some(m), _) => sizes_pages.iter().map(|&c| m.miss_ratio_at(c)).collect(),
        (_, Some(s)) => s.miss_ratios(),
        _ => Vec::new(),
    };
    let (method_name, sampling_rate) = match method {
        MrcMethod::ExactLru => ("exact", 1.0),
        MrcMethod::Shards { rate } => ("shards", rate),
    };
    Ok(sizes_pages
        .iter()
        .zip(ratios)
        .map(|(&capacity_pages, miss_ratio)| MrcPoint {
            policy: policy.to_string(),
            method: method_name,
            sampling_rate,
            capacity_pages,
            page_size_bytes: page_size,
            requests,
            io_requests,
            misses: match &lru {
                Some(m) => m.misses_at(capacity_pages),
                None => (miss_ratio * requests as f64).round() as u64,
            },
            miss_ratio,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Zipf, uniform};

    fn lru_misses(keys: &[Key], cap: usize) -> u64 {
        let mut c = policies::build("lru", cap).unwrap();
        keys.iter().filter(|&&k| !c.access(k).is_hit()).count() as u64
    }

    #[test]
    fn hand_computed_distances() {
        // a b c a b b: distances -, -, -, 3, 3, 1.
        let mut m = LruMrc::new();
        for k in [1, 2, 3, 1, 2, 2] {
            m.access(k);
        }
        assert_eq!(m.cold_misses(), 3);
        assert_eq!(m.misses_at(0), 6);
        assert_eq!(m.misses_at(1), 5);
        assert_eq!(m.misses_at(2), 5);
        assert_eq!(m.misses_at(3), 3);
        assert_eq!(m.curve(4), vec![1.0, 5.0 / 6.0, 5.0 / 6.0, 0.5, 0.5]);
    }

    #[test]
    fn exact_mrc_equals_lru_at_every_size() {
        // Enough references to force several renumberings of the tree
        // (few keys) and growth (many keys).
        for (seed, n_keys) in [(1, 7), (2, 50), (3, 300), (4, 3000)] {
            let keys = uniform(20_000, n_keys, seed);
            let mut m = LruMrc::new();
            keys.iter().for_each(|&k| m.access(k));
            let sizes: Vec<u64> = (1..=n_keys + 2)
                .step_by((n_keys as usize / 40).max(1))
                .collect();
            for &c in &sizes {
                assert_eq!(
                    m.misses_at(c),
                    lru_misses(&keys, c as usize),
                    "keys {n_keys} size {c}"
                );
            }
        }
        let keys = Zipf::new(2000, 0.9, 8).take(50_000);
        let mut m = LruMrc::new();
        keys.iter().for_each(|&k| m.access(k));
        let curve = m.curve(2100);
        for c in [1, 2, 5, 17, 100, 999, 2000, 2100] {
            let want = lru_misses(&keys, c) as f64 / keys.len() as f64;
            assert_eq!(curve[c], want);
            assert_eq!(m.miss_ratio_at(c as u64), want);
        }
    }

    #[test]
    fn shards_close_to_exact_on_zipf() {
        let keys = Zipf::new(200_000, 0.9, 11).take(1_000_000);
        let mut exact = LruMrc::new();
        let mut lru = ShardsLru::new(0.1).unwrap();
        let sizes = [1000u64, 5000, 20_000, 50_000, 100_000];
        let mut sim = ShardsSim::new("lru", &sizes, 0.1).unwrap();
        let mut s3 = ShardsSim::new("s3fifo", &sizes, 0.1).unwrap();
        for &k in &keys {
            exact.access(k);
            lru.access(k);
            sim.access(k);
            s3.access(k);
        }
        let mini = sim.miss_ratios();
        let s3_est = s3.miss_ratios();
        for (i, &c) in sizes.iter().enumerate() {
            let want = exact.miss_ratio_at(c);
            assert!((lru.miss_ratio_at(c) - want).abs() < 0.03, "size {c}");
            assert!((mini[i] - want).abs() < 0.03, "mini-sim size {c}");
            // Non-LRU: against a full simulation of the same policy.
            let mut full = policies::build("s3fifo", c as usize).unwrap();
            let m = keys.iter().filter(|&&k| !full.access(k).is_hit()).count();
            let full_ratio = m as f64 / keys.len() as f64;
            assert!((s3_est[i] - full_ratio).abs() < 0.03, "s3fifo size {c}");
        }
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(Shards::new(0.0).is_err());
        assert!(Shards::new(1.5).is_err());
        assert!(Shards::new(f64::NAN).is_err());
        assert!(ShardsSim::new("belady", &[10], 0.5).is_err());
        assert!(ShardsSim::new("lru", &[0], 0.5).is_err());
        assert!(ShardsSim::new("nope", &[10], 0.5).is_err());
    }
}
