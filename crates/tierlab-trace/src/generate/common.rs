//! Building blocks shared by the generators: a seeded RNG with the few draws
//! the generators need, alias tables, size mixes, arrival processes and stop
//! limits. Everything here is allocation-free per record.

use std::fmt;

use rand::Rng as _;
use rand_distr::{Distribution, Exp1, StandardNormal};
use rand_pcg::Pcg64Mcg;
use serde::Deserialize;

use crate::error::{ParamError, Result, TraceError};

pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = 1024 * KIB;
pub(crate) const GIB: u64 = 1024 * MIB;
pub(crate) const NS_PER_S: f64 = 1e9;

pub(crate) fn invalid(message: impl Into<String>) -> TraceError {
    TraceError::Invalid(message.into())
}

/// Fails with `message` unless `ok`.
pub(crate) fn ensure(ok: bool, message: impl FnOnce() -> String) -> Result<()> {
    if ok { Ok(()) } else { Err(invalid(message())) }
}

pub(crate) fn ensure_probability(name: &str, value: f64) -> Result<()> {
    ensure((0.0..=1.0).contains(&value), || {
        format!("`{name}` must be between 0 and 1, got {value}")
    })
}

pub(crate) fn ensure_positive(name: &str, value: f64) -> Result<()> {
    ensure(value.is_finite() && value > 0.0, || {
        format!("`{name}` must be a positive number, got {value}")
    })
}

/// SplitMix64: turns one seed into well-mixed, independent-looking words.
#[inline]
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    mix64(*state)
}

/// The SplitMix64 finalizer: a fast bijective 64-bit mixer.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A deterministic RNG (PCG64 MCG, "pcg64_fast"). Each generator derives its
/// streams from `(seed, stream)` so that independent parts (e.g. the
/// concentration schedule and the records) can be replayed on their own.
#[derive(Clone)]
pub(crate) struct Rng(Pcg64Mcg);

impl Rng {
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut s = seed ^ mix64(stream.wrapping_add(0x5851_F42D_4C95_7F2D));
        let lo = splitmix64(&mut s);
        let hi = splitmix64(&mut s);
        Rng(Pcg64Mcg::new(((hi as u128) << 64) | lo as u128))
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (n > 0), unbiased (Lemire's multiply-and-reject).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let mut m = self.next_u64() as u128 * n as u128;
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = self.next_u64() as u128 * n as u128;
            }
        }
        (m >> 64) as u64
    }

    /// Uniform in [0, 1) with 53 random bits.
    #[inline]
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Exponential with mean 1 (ziggurat: no logarithm in the common case).
    #[inline]
    pub fn exp1(&mut self) -> f64 {
        Exp1.sample(&mut self.0)
    }

    /// Standard normal (ziggurat).
    #[inline]
    pub fn std_normal(&mut self) -> f64 {
        StandardNormal.sample(&mut self.0)
    }
}

/// A Bernoulli draw precomputed as a 64-bit threshold: one compare per draw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chance {
    threshold: u64,
    always: bool,
}

impl Chance {
    pub fn new(p: f64) -> Chance {
        if p >= 1.0 {
            Chance {
                threshold: u64::MAX,
                always: true,
            }
        } else {
            Chance {
                threshold: (p.max(0.0) * 18_446_744_073_709_551_616.0) as u64,
                always: false,
            }
        }
    }

    /// Certain outcomes consume no random numbers.
    #[inline]
    pub fn draw(&self, rng: &mut Rng) -> bool {
        if self.always {
            true
        } else if self.threshold == 0 {
            false
        } else {
            rng.next_u64() < self.threshold
        }
    }
}

/// Walker/Vose alias table: O(1) weighted choice from one 64-bit random
/// number (the high part picks a column, the low part decides alias or not).
#[derive(Clone, Debug)]
pub(crate) struct Alias {
    n: u64,
    cells: Vec<AliasCell>,
}

#[derive(Clone, Copy, Debug)]
struct AliasCell {
    /// Keep the column when the low 64 bits are below this.
    keep_below: u64,
    alias: u32,
}

impl Alias {
    /// `weights` must be finite, non-negative, not all zero (checked by callers).
    pub fn new(weights: &[f64]) -> Alias {
        let n = weights.len();
        assert!(n > 0 && n <= u32::MAX as usize);
        let total: f64 = weights.iter().sum();
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut cells = vec![
            AliasCell {
                keep_below: u64::MAX,
                alias: 0,
            };
            n
        ];
        let mut small: Vec<usize> = Vec::new();
        let mut large: Vec<usize> = Vec::new();
        for (i, &p) in scaled.iter().enumerate() {
            if p < 1.0 {
                small.push(i)
            } else {
                large.push(i)
            }
        }
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            cells[s] = AliasCell {
                keep_below: (scaled[s] * 18_446_744_073_709_551_616.0) as u64,
                alias: l as u32,
            };
            scaled[l] -= 1.0 - scaled[s];
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Leftovers are 1 up to rounding: they always keep their own column.
        for i in small.into_iter().chain(large) {
            cells[i] = AliasCell {
                keep_below: u64::MAX,
                alias: i as u32,
            };
        }
        Alias { n: n as u64, cells }
    }

    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let m = rng.next_u64() as u128 * self.n as u128;
        let cell = self.cells[(m >> 64) as usize];
        if (m as u64) < cell.keep_below {
            (m >> 64) as usize
        } else {
            cell.alias as usize
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.cells.len()
    }
}

/// One entry of a weighted size list.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeWeight {
    pub size_bytes: u32,
    pub weight: f64,
}

/// Request sizes: one fixed size, or a weighted list. In `key=value` form:
/// `4k` or `4k:3,64k:1` (weights need not sum to 1). In config files either
/// that string, a plain number, or a list of `{ size_bytes, weight }`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "SizeMixRepr")]
pub struct SizeMix(pub Vec<SizeWeight>);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeMixRepr {
    Fixed(u32),
    Text(String),
    List(Vec<SizeWeight>),
}

impl TryFrom<SizeMixRepr> for SizeMix {
    type Error = ParamError;
    fn try_from(repr: SizeMixRepr) -> std::result::Result<Self, ParamError> {
        match repr {
            SizeMixRepr::Fixed(size_bytes) => Ok(SizeMix::fixed(size_bytes)),
            SizeMixRepr::Text(text) => text.parse(),
            SizeMixRepr::List(list) => Ok(SizeMix(list)),
        }
    }
}

impl SizeMix {
    pub fn fixed(size_bytes: u32) -> SizeMix {
        SizeMix(vec![SizeWeight {
            size_bytes,
            weight: 1.0,
        }])
    }

    pub fn weighted(entries: &[(u32, f64)]) -> SizeMix {
        SizeMix(
            entries
                .iter()
                .map(|&(size_bytes, weight)| SizeWeight { size_bytes, weight })
                .collect(),
        )
    }

    pub fn validate(&self, name: &str) -> Result<()> {
        ensure(!self.0.is_empty(), || format!("`{name}` lists no sizes"))?;
        for e in &self.0 {
            ensure(e.size_bytes > 0, || format!("`{name}`: sizes must be > 0"))?;
            ensure(e.weight.is_finite() && e.weight >= 0.0, || {
                format!(
                    "`{name}`: weights must be finite and >= 0, got {}",
                    e.weight
                )
            })?;
        }
        ensure(self.0.iter().any(|e| e.weight > 0.0), || {
            format!("`{name}`: at least one weight must be > 0")
        })
    }

    pub fn max_bytes(&self) -> u64 {
        self.0
            .iter()
            .map(|e| e.size_bytes as u64)
            .max()
            .unwrap_or(0)
    }

    /// Expected size in bytes.
    pub fn mean_bytes(&self) -> f64 {
        let total: f64 = self.0.iter().map(|e| e.weight).sum();
        self.0
            .iter()
            .map(|e| e.size_bytes as f64 * e.weight)
            .sum::<f64>()
            / total
    }
}

impl std::str::FromStr for SizeMix {
    type Err = ParamError;
    /// A size, or a `SIZE:WEIGHT,...` list; the error has no key (the
    /// caller's: a generator parameter, a config key).
    fn from_str(text: &str) -> std::result::Result<Self, ParamError> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim) {
            let (size, weight) = match part.split_once(':') {
                Some((s, w)) => (s, Some(w)),
                None => (part, None),
            };
            let size_bytes = parse_bytes(size)?;
            let size_bytes = u32::try_from(size_bytes)
                .map_err(|_| ParamError::new("", format!("`{size}`"), "a size below 4 GiB"))?;
            let weight = match weight {
                Some(w) => w.trim().parse::<f64>().map_err(|_| {
                    ParamError::new("", format!("`{w}`"), "a number as the weight of a size")
                })?,
                None => 1.0,
            };
            out.push(SizeWeight { size_bytes, weight });
        }
        Ok(SizeMix(out))
    }
}

impl fmt::Display for SizeMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", show_bytes(e.size_bytes as u64))?;
            if self.0.len() > 1 {
                write!(f, ":{}", e.weight)?;
            }
        }
        Ok(())
    }
}

/// Draws sizes from a `SizeMix`; a single size costs no random number.
#[derive(Clone, Debug)]
pub(crate) struct SizeSampler {
    sizes: Vec<u32>,
    alias: Option<Alias>,
}

impl SizeSampler {
    pub fn new(mix: &SizeMix) -> SizeSampler {
        let kept: Vec<&SizeWeight> = mix.0.iter().filter(|e| e.weight > 0.0).collect();
        let sizes: Vec<u32> = kept.iter().map(|e| e.size_bytes).collect();
        let alias = (sizes.len() > 1)
            .then(|| Alias::new(&kept.iter().map(|e| e.weight).collect::<Vec<_>>()));
        SizeSampler { sizes, alias }
    }

    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        match &self.alias {
            None => self.sizes[0],
            Some(alias) => self.sizes[alias.sample(rng)],
        }
    }
}

// One size syntax across tierlab (CLI flags and generator parameters).
pub use crate::units::{format_size_bytes as show_bytes, parse_size_bytes as parse_bytes};

/// How request arrival times are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalKind {
    /// Exactly `1 / rate` apart: record i at `floor(i * 1e9 / rate_iops)` ns.
    Fixed,
    /// A Poisson process: exponential gaps with mean `1 / rate`.
    Poisson,
}

impl std::str::FromStr for ArrivalKind {
    type Err = ParamError;
    fn from_str(s: &str) -> std::result::Result<Self, ParamError> {
        match s {
            "fixed" => Ok(ArrivalKind::Fixed),
            "poisson" => Ok(ArrivalKind::Poisson),
            _ => Err(ParamError::unknown_name("", s, ["fixed", "poisson"])),
        }
    }
}

impl fmt::Display for ArrivalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ArrivalKind::Fixed => "fixed",
            ArrivalKind::Poisson => "poisson",
        })
    }
}

/// Arrival times in ns. Poisson times accumulate in f64 so that rounding
/// never makes them go backwards; fixed times are recomputed from the index
/// so that they never drift.
#[derive(Clone, Debug)]
pub(crate) struct Arrivals {
    kind: ArrivalKind,
    gap_ns: f64,
    index: u64,
    t_ns: f64,
}

impl Arrivals {
    pub fn new(kind: ArrivalKind, rate_iops: f64) -> Arrivals {
        Arrivals::starting_at(kind, rate_iops, 0.0)
    }

    pub fn starting_at(kind: ArrivalKind, rate_iops: f64, start_ns: f64) -> Arrivals {
        Arrivals {
            kind,
            gap_ns: NS_PER_S / rate_iops,
            index: 0,
            t_ns: start_ns,
        }
    }

    #[inline]
    pub fn next(&mut self, rng: &mut Rng) -> f64 {
        match self.kind {
            ArrivalKind::Fixed => {
                let t = self.t_ns + self.index as f64 * self.gap_ns;
                self.index += 1;
                t
            }
            ArrivalKind::Poisson => {
                self.t_ns += rng.exp1() * self.gap_ns;
                self.t_ns
            }
        }
    }

    #[inline]
    pub fn next_ns(&mut self, rng: &mut Rng) -> u64 {
        self.next(rng) as u64
    }
}

/// When a stream ends: after `count` records or at `end_ns`, whichever first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    pub remaining: u64,
    pub end_ns: u64,
}

impl Limit {
    /// `count`/`duration_s` as given by the user; with neither, `default_count`.
    pub fn new(count: Option<u64>, duration_s: Option<f64>, default_count: u64) -> Result<Limit> {
        if let Some(d) = duration_s {
            ensure(d.is_finite() && d > 0.0, || {
                format!("`duration_s` must be a positive number of seconds, got {d}")
            })?;
        }
        let remaining = match (count, duration_s) {
            (Some(c), _) => c,
            (None, Some(_)) => u64::MAX,
            (None, None) => default_count,
        };
        let end_ns = match duration_s {
            Some(d) => {
                let ns = d * NS_PER_S;
                if ns >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    ns as u64
                }
            }
            None => u64::MAX,
        };
        Ok(Limit { remaining, end_ns })
    }

    /// Counts one record at `t_ns`; false when the stream is over.
    #[inline]
    pub fn take(&mut self, t_ns: u64) -> bool {
        if self.remaining == 0 || t_ns >= self.end_ns {
            self.remaining = 0;
            return false;
        }
        self.remaining -= 1;
        true
    }
}

/// Number of aligned start positions in `space_bytes` such that a request of
/// `max_size_bytes` still fits.
pub(crate) fn positions(
    space_bytes: u64,
    max_size_bytes: u64,
    alignment_bytes: u64,
    what: &str,
) -> Result<u64> {
    ensure(space_bytes >= max_size_bytes, || {
        format!(
            "{what} ({space_bytes} bytes) is smaller than the largest request ({max_size_bytes} bytes)"
        )
    })?;
    Ok((space_bytes - max_size_bytes) / alignment_bytes + 1)
}

pub(crate) fn check_alignment(alignment_bytes: u64) -> Result<()> {
    ensure(alignment_bytes > 0, || {
        "`alignment_bytes` must be > 0".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_frequencies_match_weights() {
        let weights = [5.0, 1.0, 0.0, 3.0, 1.0];
        let alias = Alias::new(&weights);
        let mut rng = Rng::new(7, 0);
        let mut counts = [0u64; 5];
        let n = 400_000u64;
        for _ in 0..n {
            counts[alias.sample(&mut rng)] += 1;
        }
        assert_eq!(counts[2], 0, "a zero weight is never drawn");
        for (i, &w) in weights.iter().enumerate() {
            let p = w / 10.0;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            let dev = (counts[i] as f64 - n as f64 * p).abs();
            assert!(
                dev <= 5.0 * sd + 1.0,
                "column {i}: {} vs {}",
                counts[i],
                n as f64 * p
            );
        }
    }

    #[test]
    fn below_is_in_range_and_uniform() {
        let mut rng = Rng::new(1, 2);
        let mut counts = [0u64; 3];
        for _ in 0..300_000 {
            counts[rng.below(3) as usize] += 1;
        }
        for c in counts {
            // Binomial(300k, 1/3): sd ~ 258.
            assert!((c as i64 - 100_000).abs() < 1_500, "{counts:?}");
        }
    }

    #[test]
    fn bytes_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("4k"), Ok(4096));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("1.5g"), Ok(3 * 512 * MIB));
        assert_eq!(parse_bytes("300M"), Ok(300 * MIB));
        assert!(parse_bytes("4KB").unwrap_err().found.contains("ambiguous"));
        assert!(parse_bytes("four").is_err());
        assert!(parse_bytes("0.3k").is_err());
        assert_eq!(show_bytes(4096), "4k");
        assert_eq!(show_bytes(1000), "1000");
        let mix: SizeMix = "4k:3, 64k:1".parse().unwrap();
        assert_eq!(mix, SizeMix::weighted(&[(4096, 3.0), (65536, 1.0)]));
        assert_eq!(mix.mean_bytes(), (3.0 * 4096.0 + 65536.0) / 4.0);
        assert_eq!(mix.to_string(), "4k:3,64k:1");
    }

    #[test]
    fn fixed_arrivals_are_exact_and_poisson_mean_matches() {
        let mut rng = Rng::new(3, 0);
        let mut a = Arrivals::new(ArrivalKind::Fixed, 3.0);
        let times: Vec<u64> = (0..4).map(|_| a.next_ns(&mut rng)).collect();
        assert_eq!(times, vec![0, 333_333_333, 666_666_666, 1_000_000_000]);
        let mut p = Arrivals::new(ArrivalKind::Poisson, 1000.0);
        let n = 200_000;
        let mut last = 0.0;
        for _ in 0..n {
            last = p.next(&mut rng);
        }
        // Sum of n Exp(1 ms): mean n ms, sd sqrt(n) ms.
        let mean_gap_ms = last / 1e6 / n as f64;
        assert!(
            (mean_gap_ms - 1.0).abs() < 5.0 / (n as f64).sqrt(),
            "{mean_gap_ms}"
        );
    }
}
