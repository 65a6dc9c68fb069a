//! Synthetic generators: uniform, Zipf, sequential streams, and a weighted
//! mixture of them. All share `CommonParams` (count/duration, arrivals, read
//! ratio, sizes, alignment, region, devices).
//!
//! Addressing: a device's region holds `positions = (region_size_bytes -
//! largest size) / alignment_bytes + 1` aligned start offsets, so every
//! request stays inside the region. With several devices each device has the
//! same region; uniform and Zipf draw over all (device, position) pairs.

use serde::Deserialize;

use super::common::show_bytes;
use super::common::{
    Alias, ArrivalKind, Arrivals, Chance, GIB, Limit, Rng, SizeMix, SizeSampler, check_alignment,
    ensure, ensure_positive, ensure_probability, positions,
};
use super::params::{KvList, KvParams, ParamInfo, param, show_opt};
use super::zipf::{Permutation, Zipf};
use crate::error::Result;
use crate::reader::RecordStream;
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

/// Most devices a synthetic generator will name.
pub const MAX_DEVICES: u32 = 1 << 20;

/// Records generated when neither `count` nor `duration_s` is given.
pub const DEFAULT_COUNT: u64 = 1_000_000;

/// Parameters every synthetic generator takes.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommonParams {
    /// Records to generate; with `duration_s` the stream stops at whichever
    /// comes first; with neither, 1,000,000.
    pub count: Option<u64>,
    /// Stop before the first record at or after this time (s).
    pub duration_s: Option<f64>,
    pub arrival: ArrivalKind,
    /// Mean request rate (requests per second).
    pub rate_iops: f64,
    /// Share of requests that are reads (0..1); the rest are writes.
    pub read_ratio: f64,
    pub size_bytes: SizeMix,
    /// Offsets are multiples of this (bytes).
    pub alignment_bytes: u64,
    pub region_offset_bytes: u64,
    pub region_size_bytes: u64,
    /// Devices (named dev0, dev1, ...), each with the same region.
    pub devices: u32,
}

impl Default for CommonParams {
    fn default() -> Self {
        CommonParams {
            count: None,
            duration_s: None,
            arrival: ArrivalKind::Poisson,
            rate_iops: 10_000.0,
            read_ratio: 0.7,
            size_bytes: SizeMix::fixed(4096),
            alignment_bytes: 4096,
            region_offset_bytes: 0,
            region_size_bytes: 64 * GIB,
            devices: 1,
        }
    }
}

pub(crate) const COMMON_PARAMS: &[ParamInfo] = &[
    param(
        "count",
        "records",
        "-",
        "records to generate (1000000 when neither count nor duration_s is set)",
    ),
    param(
        "duration_s",
        "s",
        "-",
        "stop at this time (whichever of count/duration_s comes first)",
    ),
    param("arrival", "fixed|poisson", "poisson", "arrival process"),
    param("rate_iops", "requests/s", "10000", "mean request rate"),
    param(
        "read_ratio",
        "0..1",
        "0.7",
        "share of reads (the rest are writes)",
    ),
    param(
        "size_bytes",
        "bytes or SIZE:WEIGHT,...",
        "4k",
        "request size, or a weighted list like 4k:3,64k:1",
    ),
    param(
        "alignment_bytes",
        "bytes",
        "4k",
        "offsets are multiples of this",
    ),
    param(
        "region_offset_bytes",
        "bytes",
        "0",
        "start of the addressed region",
    ),
    param(
        "region_size_bytes",
        "bytes",
        "64g",
        "size of the addressed region",
    ),
    param(
        "devices",
        "count",
        "1",
        "devices dev0..devN-1, each with the same region",
    ),
];

impl CommonParams {
    pub(crate) fn to_kv(&self) -> KvList {
        vec![
            ("count", show_opt(&self.count)),
            ("duration_s", show_opt(&self.duration_s)),
            ("arrival", self.arrival.to_string()),
            ("rate_iops", self.rate_iops.to_string()),
            ("read_ratio", self.read_ratio.to_string()),
            ("size_bytes", self.size_bytes.to_string()),
            ("alignment_bytes", show_bytes(self.alignment_bytes)),
            ("region_offset_bytes", show_bytes(self.region_offset_bytes)),
            ("region_size_bytes", show_bytes(self.region_size_bytes)),
            ("devices", self.devices.to_string()),
        ]
    }

    pub(crate) fn apply_kv(&mut self, kv: &KvParams, generator: &str) -> Result<()> {
        let r = kv.reader(generator);
        r.opt_u64("count", &mut self.count)?;
        r.opt_f64("duration_s", &mut self.duration_s)?;
        r.choice("arrival", &mut self.arrival)?;
        r.f64("rate_iops", &mut self.rate_iops)?;
        r.f64("read_ratio", &mut self.read_ratio)?;
        r.sizes("size_bytes", &mut self.size_bytes)?;
        r.bytes("alignment_bytes", &mut self.alignment_bytes)?;
        r.bytes("region_offset_bytes", &mut self.region_offset_bytes)?;
        r.bytes("region_size_bytes", &mut self.region_size_bytes)?;
        r.u32("devices", &mut self.devices)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        ensure_positive("rate_iops", self.rate_iops)?;
        ensure_probability("read_ratio", self.read_ratio)?;
        self.size_bytes.validate("size_bytes")?;
        check_alignment(self.alignment_bytes)?;
        ensure(self.region_offset_bytes % self.alignment_bytes == 0, || {
            format!(
                "`region_offset_bytes` ({}) must be a multiple of `alignment_bytes` ({})",
                self.region_offset_bytes, self.alignment_bytes
            )
        })?;
        ensure(
            self.region_offset_bytes
                .checked_add(self.region_size_bytes)
                .is_some(),
            || "the region ends beyond 2^64 bytes".into(),
        )?;
        // Each device has a name in memory: keep that bounded.
        ensure((1..=MAX_DEVICES).contains(&self.devices), || {
            format!(
                "`devices` must be between 1 and {MAX_DEVICES}, got {}",
                self.devices
            )
        })
    }

    fn device_table(&self) -> DeviceTable {
        (0..self.devices).map(|i| format!("dev{i}")).collect()
    }
}

/// How one component chooses offsets.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "pattern", rename_all = "snake_case", deny_unknown_fields)]
pub enum Pattern {
    /// Every aligned position equally likely.
    Uniform,
    /// Position popularity follows Zipf(theta) by rank; with `scramble` the
    /// ranks are spread over the region by a seeded permutation, otherwise
    /// rank 0 is the region's first position.
    Zipf {
        #[serde(default = "default_theta")]
        theta: f64,
        #[serde(default = "default_true")]
        scramble: bool,
    },
    /// `streams` sequential streams, each over its own equal slice of the
    /// region (stream s on device s mod devices), wrapping at the slice end;
    /// each request picks a stream uniformly at random.
    Sequential {
        #[serde(default = "default_streams")]
        streams: u32,
    },
}

fn default_theta() -> f64 {
    0.99
}

fn default_true() -> bool {
    true
}

fn default_streams() -> u32 {
    1
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UniformParams {
    pub common: CommonParams,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZipfParams {
    pub common: CommonParams,
    /// Skew: rank k has weight k^-theta (0 = uniform).
    pub theta: f64,
    pub scramble: bool,
}

impl Default for ZipfParams {
    fn default() -> Self {
        ZipfParams {
            common: CommonParams::default(),
            theta: 0.99,
            scramble: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SequentialParams {
    pub common: CommonParams,
    pub streams: u32,
}

impl Default for SequentialParams {
    fn default() -> Self {
        SequentialParams {
            common: CommonParams::default(),
            streams: 1,
        }
    }
}

/// One part of a mixture: its pattern and, optionally, its own read ratio
/// and sizes (else the common ones).
#[derive(Clone, Debug, PartialEq, Deserialize)]
// No deny_unknown_fields here: serde does not support it with `flatten`;
// `Pattern` rejects the unknown fields instead.
pub struct MixComponent {
    pub weight: f64,
    #[serde(flatten)]
    pub pattern: Pattern,
    #[serde(default)]
    pub read_ratio: Option<f64>,
    #[serde(default)]
    pub size_bytes: Option<SizeMix>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MixedParams {
    pub common: CommonParams,
    pub components: Vec<MixComponent>,
}

impl Default for MixedParams {
    fn default() -> Self {
        MixedParams {
            common: CommonParams::default(),
            components: vec![
                MixComponent {
                    weight: 0.6,
                    pattern: Pattern::Zipf {
                        theta: 0.99,
                        scramble: true,
                    },
                    read_ratio: None,
                    size_bytes: None,
                },
                MixComponent {
                    weight: 0.2,
                    pattern: Pattern::Uniform,
                    read_ratio: None,
                    size_bytes: None,
                },
                MixComponent {
                    weight: 0.2,
                    pattern: Pattern::Sequential { streams: 4 },
                    read_ratio: None,
                    size_bytes: None,
                },
            ],
        }
    }
}

pub(crate) const ZIPF_PARAMS: &[ParamInfo] = &[
    param(
        "theta",
        ">= 0",
        "0.99",
        "Zipf skew: rank k has weight k^-theta",
    ),
    param(
        "scramble",
        "bool",
        "true",
        "spread ranks over the region by a seeded permutation",
    ),
];

pub(crate) const SEQUENTIAL_PARAMS: &[ParamInfo] = &[param(
    "streams",
    "count",
    "1",
    "sequential streams, each over its own slice of the region",
)];

pub(crate) const MIXED_PARAMS: &[ParamInfo] = &[
    param(
        "weights",
        "PATTERN:WEIGHT,...",
        "zipf:0.6,uniform:0.2,sequential:0.2",
        "mixture of uniform, zipf, sequential",
    ),
    param("theta", ">= 0", "0.99", "skew of the zipf component"),
    param(
        "scramble",
        "bool",
        "true",
        "scramble the zipf component's ranks",
    ),
    param(
        "streams",
        "count",
        "4",
        "streams of the sequential component",
    ),
];

impl ZipfParams {
    pub(crate) fn to_kv(&self) -> KvList {
        let mut kv = self.common.to_kv();
        kv.push(("theta", self.theta.to_string()));
        kv.push(("scramble", self.scramble.to_string()));
        kv
    }

    pub(crate) fn apply_kv(&mut self, kv: &KvParams, generator: &str) -> Result<()> {
        self.common.apply_kv(kv, generator)?;
        let r = kv.reader(generator);
        r.f64("theta", &mut self.theta)?;
        r.bool("scramble", &mut self.scramble)
    }
}

impl SequentialParams {
    pub(crate) fn to_kv(&self) -> KvList {
        let mut kv = self.common.to_kv();
        kv.push(("streams", self.streams.to_string()));
        kv
    }

    pub(crate) fn apply_kv(&mut self, kv: &KvParams, generator: &str) -> Result<()> {
        self.common.apply_kv(kv, generator)?;
        kv.reader(generator).u32("streams", &mut self.streams)
    }
}

impl MixedParams {
    /// Only the common parameters and the weights can be written as
    /// key=value; per-component read ratios and sizes (config files only)
    /// are left out.
    pub(crate) fn to_kv(&self) -> KvList {
        let mut kv = self.common.to_kv();
        let mut weights = Vec::new();
        for c in &self.components {
            let name = match &c.pattern {
                Pattern::Uniform => "uniform",
                Pattern::Zipf { theta, scramble } => {
                    kv.push(("theta", theta.to_string()));
                    kv.push(("scramble", scramble.to_string()));
                    "zipf"
                }
                Pattern::Sequential { streams } => {
                    kv.push(("streams", streams.to_string()));
                    "sequential"
                }
            };
            weights.push(format!("{name}:{}", c.weight));
        }
        kv.push(("weights", weights.join(",")));
        kv
    }

    /// `key=value` form: one zipf, one uniform and one sequential component at
    /// most, weighted by `weights`, sharing the common parameters.
    pub(crate) fn apply_kv(&mut self, kv: &KvParams, generator: &str) -> Result<()> {
        self.common.apply_kv(kv, generator)?;
        let r = kv.reader(generator);
        let (mut theta, mut scramble, mut streams) = (0.99, true, 4);
        r.f64("theta", &mut theta)?;
        r.bool("scramble", &mut scramble)?;
        r.u32("streams", &mut streams)?;
        let mut weights = vec![
            ("zipf".to_owned(), 0.6),
            ("uniform".to_owned(), 0.2),
            ("sequential".to_owned(), 0.2),
        ];
        if let Some(text) = kv.get("weights") {
            weights.clear();
            for part in text.split(',').map(str::trim) {
                let (name, w) = part.split_once(':').unwrap_or((part, "1"));
                let w: f64 = w.trim().parse().map_err(|_| {
                    crate::TraceError::Invalid(format!(
                        "parameter `weights` of generator `{generator}`: `{part}` is not PATTERN:WEIGHT"
                    ))
                })?;
                weights.push((name.trim().to_owned(), w));
            }
        }
        self.components = weights
            .into_iter()
            .map(|(name, weight)| {
                let pattern = match name.as_str() {
                    "uniform" => Pattern::Uniform,
                    "zipf" => Pattern::Zipf { theta, scramble },
                    "sequential" => Pattern::Sequential { streams },
                    other => {
                        return Err(crate::TraceError::Invalid(format!(
                            "parameter `weights` of generator `{generator}`: unknown pattern `{other}`; known: uniform, zipf, sequential"
                        )));
                    }
                };
                Ok(MixComponent {
                    weight,
                    pattern,
                    read_ratio: None,
                    size_bytes: None,
                })
            })
            .collect::<Result<_>>()?;
        Ok(())
    }
}

/// Per-component addressing state.
enum Addr {
    Uniform {
        positions: u64,
    },
    Zipf {
        zipf: Zipf,
        perm: Option<Permutation>,
        positions: u64,
    },
    Sequential {
        streams: Vec<Stream>,
    },
}

struct Stream {
    device_id: u32,
    start_bytes: u64,
    end_bytes: u64,
    cursor_bytes: u64,
}

struct Component {
    read: Chance,
    sizes: SizeSampler,
    addr: Addr,
}

/// Uniform, Zipf, sequential or mixed synthetic stream.
pub struct SyntheticGen {
    rng: Rng,
    arrivals: Arrivals,
    limit: Limit,
    devices: DeviceTable,
    device_count: u64,
    region_offset_bytes: u64,
    alignment_bytes: u64,
    components: Vec<Component>,
    pick: Option<Alias>,
}

impl SyntheticGen {
    pub fn uniform(params: &UniformParams, seed: u64) -> Result<SyntheticGen> {
        Self::build(&params.common, &[(1.0, Pattern::Uniform, None, None)], seed)
    }

    pub fn zipf(params: &ZipfParams, seed: u64) -> Result<SyntheticGen> {
        let pattern = Pattern::Zipf {
            theta: params.theta,
            scramble: params.scramble,
        };
        Self::build(&params.common, &[(1.0, pattern, None, None)], seed)
    }

    pub fn sequential(params: &SequentialParams, seed: u64) -> Result<SyntheticGen> {
        let pattern = Pattern::Sequential {
            streams: params.streams,
        };
        Self::build(&params.common, &[(1.0, pattern, None, None)], seed)
    }

    pub fn mixed(params: &MixedParams, seed: u64) -> Result<SyntheticGen> {
        ensure(!params.components.is_empty(), || {
            "`components` of a mixed generator must not be empty".into()
        })?;
        let parts: Vec<_> = params
            .components
            .iter()
            .map(|c| {
                (
                    c.weight,
                    c.pattern.clone(),
                    c.read_ratio,
                    c.size_bytes.clone(),
                )
            })
            .collect();
        Self::build(&params.common, &parts, seed)
    }

    fn build(
        common: &CommonParams,
        parts: &[(f64, Pattern, Option<f64>, Option<SizeMix>)],
        seed: u64,
    ) -> Result<SyntheticGen> {
        common.validate()?;
        let limit = Limit::new(common.count, common.duration_s, DEFAULT_COUNT)?;
        for (w, ..) in parts {
            ensure(w.is_finite() && *w >= 0.0, || {
                format!("component weights must be finite and >= 0, got {w}")
            })?;
        }
        ensure(parts.iter().any(|(w, ..)| *w > 0.0), || {
            "at least one component weight must be > 0".into()
        })?;
        let align = common.alignment_bytes;
        let region = common.region_size_bytes;
        let devices = common.devices as u64;
        let mut components = Vec::with_capacity(parts.len());
        for (index, (_, pattern, read_ratio, sizes)) in parts.iter().enumerate() {
            let read_ratio = read_ratio.unwrap_or(common.read_ratio);
            ensure_probability("read_ratio", read_ratio)?;
            let sizes = sizes.as_ref().unwrap_or(&common.size_bytes);
            sizes.validate("size_bytes")?;
            let max_size = sizes.max_bytes();
            let addr = match pattern {
                Pattern::Uniform => Addr::Uniform {
                    positions: positions(region, max_size, align, "`region_size_bytes`")?,
                },
                Pattern::Zipf { theta, scramble } => {
                    ensure(theta.is_finite() && (0.0..=20.0).contains(theta), || {
                        format!("`theta` must be between 0 and 20, got {theta}")
                    })?;
                    let per_device = positions(region, max_size, align, "`region_size_bytes`")?;
                    let items = per_device.checked_mul(devices).ok_or_else(|| {
                        crate::TraceError::Invalid(
                            "too many zipf items (devices × positions overflows)".into(),
                        )
                    })?;
                    Addr::Zipf {
                        zipf: Zipf::new(items, *theta),
                        perm: scramble
                            .then(|| Permutation::new(items, seed ^ (0x5eed_0000 + index as u64))),
                        positions: per_device,
                    }
                }
                Pattern::Sequential { streams } => {
                    ensure(*streams >= 1, || "`streams` must be at least 1".into())?;
                    let per_device = (*streams as u64).div_ceil(devices);
                    let slice = region / per_device / align * align;
                    ensure(slice >= max_size, || {
                        format!(
                            "each of the {per_device} stream slices per device ({slice} bytes) is smaller than the largest request ({max_size} bytes)"
                        )
                    })?;
                    let streams = (0..*streams as u64)
                        .map(|s| {
                            let start = common.region_offset_bytes + (s / devices) * slice;
                            Stream {
                                device_id: (s % devices) as u32,
                                start_bytes: start,
                                end_bytes: start + slice,
                                cursor_bytes: start,
                            }
                        })
                        .collect();
                    Addr::Sequential { streams }
                }
            };
            components.push(Component {
                read: Chance::new(read_ratio),
                sizes: SizeSampler::new(sizes),
                addr,
            });
        }
        let pick =
            (parts.len() > 1).then(|| Alias::new(&parts.iter().map(|p| p.0).collect::<Vec<_>>()));
        Ok(SyntheticGen {
            rng: Rng::new(seed, 1),
            arrivals: Arrivals::new(common.arrival, common.rate_iops),
            limit,
            devices: common.device_table(),
            device_count: devices,
            region_offset_bytes: common.region_offset_bytes,
            alignment_bytes: align,
            components,
            pick,
        })
    }
}

impl RecordStream for SyntheticGen {
    #[inline]
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        let rng = &mut self.rng;
        let time_ns = self.arrivals.next_ns(rng);
        if !self.limit.take(time_ns) {
            return Ok(None);
        }
        let c = match &self.pick {
            None => &mut self.components[0],
            Some(alias) => &mut self.components[alias.sample(rng)],
        };
        let op = if c.read.draw(rng) {
            Op::Read
        } else {
            Op::Write
        };
        let size_bytes = c.sizes.sample(rng);
        let (device_id, offset_bytes) = match &mut c.addr {
            Addr::Uniform { positions } => {
                let device = if self.device_count > 1 {
                    rng.below(self.device_count)
                } else {
                    0
                };
                let pos = rng.below(*positions);
                (
                    device as u32,
                    self.region_offset_bytes + pos * self.alignment_bytes,
                )
            }
            Addr::Zipf {
                zipf,
                perm,
                positions,
            } => {
                let rank = zipf.sample(rng);
                let item = match perm {
                    Some(p) => p.apply(rank),
                    None => rank,
                };
                let (device, pos) = if self.device_count > 1 {
                    (item / *positions, item % *positions)
                } else {
                    (0, item)
                };
                (
                    device as u32,
                    self.region_offset_bytes + pos * self.alignment_bytes,
                )
            }
            Addr::Sequential { streams } => {
                let i = if streams.len() > 1 {
                    rng.below(streams.len() as u64) as usize
                } else {
                    0
                };
                let s = &mut streams[i];
                if s.cursor_bytes + size_bytes as u64 > s.end_bytes {
                    s.cursor_bytes = s.start_bytes;
                }
                let offset = s.cursor_bytes;
                // Advance by whole alignment units so every offset stays aligned.
                s.cursor_bytes +=
                    (size_bytes as u64).div_ceil(self.alignment_bytes) * self.alignment_bytes;
                (s.device_id, offset)
            }
        };
        Ok(Some(IoRecord {
            time_ns,
            offset_bytes,
            size_bytes,
            device_id,
            op,
            response_ns: None,
        }))
    }

    fn devices(&self) -> &DeviceTable {
        &self.devices
    }

    fn time_base(&self) -> TimeBase {
        TimeBase::Relative
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::testing::{check_invariants, collect};
    use crate::stats;

    fn small_common() -> CommonParams {
        CommonParams {
            count: Some(200_000),
            region_offset_bytes: 1 << 30,
            region_size_bytes: 1 << 30,
            size_bytes: SizeMix::weighted(&[(4096, 3.0), (16384, 1.0), (65536, 1.0)]),
            ..CommonParams::default()
        }
    }

    #[test]
    fn uniform_is_deterministic_in_region_and_matches_ratios() {
        let p = UniformParams {
            common: CommonParams {
                devices: 3,
                read_ratio: 0.25,
                ..small_common()
            },
        };
        let a = collect(&mut SyntheticGen::uniform(&p, 11).unwrap());
        let b = collect(&mut SyntheticGen::uniform(&p, 11).unwrap());
        let c = collect(&mut SyntheticGen::uniform(&p, 12).unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 200_000);
        check_invariants(&a, 1 << 30, 1 << 30, 4096, 3);
        let s = stats::compute(&mut SyntheticGen::uniform(&p, 11).unwrap()).unwrap();
        // Binomial sd of the read count: sqrt(n p (1-p)) = 194 → 5 sd = ~0.005.
        let read_ratio = s.reads as f64 / s.requests as f64;
        assert!((read_ratio - 0.25).abs() < 0.005, "{read_ratio}");
        // Sizes: mean 4096*0.6 + 16384*0.2 + 65536*0.2 = 18841.6; sd ~ 23.6k,
        // so the mean of 200k is within 5 * 23.6k / 447 = 264 bytes.
        let total = (s.read_bytes + s.write_bytes) as f64 / s.requests as f64;
        assert!((total - 18841.6).abs() < 264.0, "{total}");
        // Every device is used about equally.
        let per_device: Vec<usize> = (0..3)
            .map(|d| a.iter().filter(|r| r.device_id == d).count())
            .collect();
        for n in per_device {
            assert!((n as f64 - 200_000.0 / 3.0).abs() < 1100.0);
        }
        // Offsets cover the region evenly: the mean position is the middle.
        let mean_offset = a
            .iter()
            .map(|r| (r.offset_bytes - (1 << 30)) as f64)
            .sum::<f64>()
            / a.len() as f64;
        let middle = ((1u64 << 30) - 65536) as f64 / 2.0;
        // Uniform over [0, L): sd L/sqrt(12); 5 sd of the mean of 200k.
        assert!((mean_offset - middle).abs() < 5.0 * middle * 2.0 / 12f64.sqrt() / 447.0);
    }

    #[test]
    fn fixed_rate_and_duration_limit() {
        let p = UniformParams {
            common: CommonParams {
                count: None,
                duration_s: Some(2.0),
                arrival: ArrivalKind::Fixed,
                rate_iops: 1000.0,
                ..small_common()
            },
        };
        let recs = collect(&mut SyntheticGen::uniform(&p, 1).unwrap());
        // Times 0, 1 ms, ..., 1999 ms: exactly 2000 records before 2 s.
        assert_eq!(recs.len(), 2000);
        assert_eq!(recs[1].time_ns, 1_000_000);
        assert_eq!(recs[1999].time_ns, 1_999_000_000);
    }

    #[test]
    fn zipf_rank_frequency_follows_theta() {
        // Unscrambled, so rank r is position r: compare the measured
        // frequencies of the top ranks with k^-theta / H(n, theta).
        let positions = 10_000u64;
        let theta = 0.8;
        let p = ZipfParams {
            common: CommonParams {
                count: Some(500_000),
                region_size_bytes: positions * 4096,
                ..CommonParams::default()
            },
            theta,
            scramble: false,
        };
        let recs = collect(&mut SyntheticGen::zipf(&p, 5).unwrap());
        let mut counts = vec![0u64; positions as usize];
        for r in &recs {
            counts[(r.offset_bytes / 4096) as usize] += 1;
        }
        let h: f64 = (1..=positions).map(|k| (k as f64).powf(-theta)).sum();
        for k in [1u64, 2, 3, 10, 100] {
            let p = (k as f64).powf(-theta) / h;
            let expected = p * recs.len() as f64;
            let sd = (expected * (1.0 - p)).sqrt();
            let got = counts[(k - 1) as usize] as f64;
            assert!(
                (got - expected).abs() < 5.0 * sd,
                "rank {k}: {got} vs {expected}"
            );
        }
        // The log-log slope between ranks 1..=1000 recovers -theta.
        let (mut sx, mut sy, mut sxx, mut sxy, mut n) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for k in 1..=1000usize {
            let (x, y) = ((k as f64).ln(), (counts[k - 1] as f64).ln());
            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
            n += 1.0;
        }
        let slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
        assert!((slope + theta).abs() < 0.03, "slope {slope}");

        // Scrambled: the same frequencies land on other positions, but the
        // hottest position still gets rank 1's share.
        let scrambled = ZipfParams {
            scramble: true,
            ..p
        };
        let recs = collect(&mut SyntheticGen::zipf(&scrambled, 5).unwrap());
        let mut counts2 = vec![0u64; positions as usize];
        for r in &recs {
            counts2[(r.offset_bytes / 4096) as usize] += 1;
        }
        let hottest = counts2.iter().enumerate().max_by_key(|(_, c)| **c).unwrap();
        assert_ne!(
            hottest.0, 0,
            "scrambling moves rank 1 away from position 0 (seed-specific)"
        );
        let expected = recs.len() as f64 / h;
        assert!((*hottest.1 as f64 - expected).abs() < 5.0 * expected.sqrt());
    }

    #[test]
    fn sequential_streams_advance_and_wrap() {
        let p = SequentialParams {
            common: CommonParams {
                count: Some(10_000),
                region_offset_bytes: 0,
                region_size_bytes: 4 << 20, // 4 MiB: two 2 MiB slices
                size_bytes: SizeMix::weighted(&[(4096, 1.0), (6000, 1.0)]),
                devices: 1,
                ..CommonParams::default()
            },
            streams: 2,
        };
        let recs = collect(&mut SyntheticGen::sequential(&p, 3).unwrap());
        check_invariants(&recs, 0, 4 << 20, 4096, 1);
        let slice = 2u64 << 20;
        let mut next = [0u64, slice];
        let mut wraps = 0;
        for r in &recs {
            let s = (r.offset_bytes / slice) as usize;
            if r.offset_bytes != next[s] {
                // Only a wrap back to the slice start may break the run.
                assert_eq!(r.offset_bytes, s as u64 * slice);
                wraps += 1;
            }
            next[s] = r.offset_bytes + (r.size_bytes as u64).div_ceil(4096) * 4096;
        }
        // 10,000 requests advance 6 KiB on average (4k or 8k): 61.4 MB over
        // 2 MiB slices ≈ 29 wraps in total.
        assert!((26..=31).contains(&wraps), "{wraps}");
    }

    #[test]
    fn mixed_uses_components_by_weight() {
        let p = MixedParams {
            common: CommonParams {
                count: Some(100_000),
                region_size_bytes: 1 << 30,
                ..CommonParams::default()
            },
            components: vec![
                MixComponent {
                    weight: 3.0,
                    pattern: Pattern::Uniform,
                    read_ratio: Some(1.0),
                    size_bytes: Some(SizeMix::fixed(4096)),
                },
                MixComponent {
                    weight: 1.0,
                    pattern: Pattern::Sequential { streams: 1 },
                    read_ratio: Some(0.0),
                    size_bytes: Some(SizeMix::fixed(65536)),
                },
            ],
        };
        let recs = collect(&mut SyntheticGen::mixed(&p, 9).unwrap());
        let seq = recs.iter().filter(|r| r.op == Op::Write).count();
        assert!(
            recs.iter()
                .all(|r| (r.op == Op::Write) == (r.size_bytes == 65536))
        );
        // Binomial(100k, 0.25): sd 137.
        assert!((seq as i64 - 25_000).abs() < 700, "{seq}");
        let writes: Vec<_> = recs.iter().filter(|r| r.op == Op::Write).collect();
        assert!(
            writes
                .windows(2)
                .all(|w| w[1].offset_bytes == w[0].offset_bytes + 65536 || w[1].offset_bytes == 0)
        );
    }

    #[test]
    fn bad_parameters_are_errors() {
        let mut p = UniformParams::default();
        p.common.read_ratio = 1.5;
        assert!(
            SyntheticGen::uniform(&p, 0)
                .err()
                .unwrap()
                .to_string()
                .contains("read_ratio")
        );
        let mut p = UniformParams::default();
        p.common.region_size_bytes = 1000;
        assert!(
            SyntheticGen::uniform(&p, 0)
                .err()
                .unwrap()
                .to_string()
                .contains("smaller than the largest request")
        );
        let p = ZipfParams {
            theta: -1.0,
            ..ZipfParams::default()
        };
        assert!(SyntheticGen::zipf(&p, 0).is_err());
        let mut p = UniformParams::default();
        p.common.region_offset_bytes = 100;
        assert!(
            SyntheticGen::uniform(&p, 0)
                .err()
                .unwrap()
                .to_string()
                .contains("multiple of")
        );
    }
}
