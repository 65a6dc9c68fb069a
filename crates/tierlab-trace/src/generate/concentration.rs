//! IO-concentration workloads (spec/atsmf.md, seed 000): a LUN of 1 GiB
//! sub-LUNs where hot groups of adjacent sub-LUNs ("concentrations") appear
//! at arbitrary places over time, last for a random duration, and some drift
//! to the adjacent sub-LUN at a set speed. A share of the IOs goes to the
//! active concentrations; the rest is uniform background over the LUN.
//!
//! The concentrations are planted by a `ConcentrationSchedule`, a streaming
//! iterator on its own RNG stream: the generator consumes one, and
//! `IoConcentrationGen::ground_truth` hands an identical one to analysis code
//! (or `write_truth_csv` to a file), so planted and generated always agree.

use std::io::{self, Write};

use serde::Deserialize;

use super::common::show_bytes;
use super::common::{
    ArrivalKind, Arrivals, Chance, GIB, KIB, Limit, NS_PER_S, Rng, SizeMix, SizeSampler,
    check_alignment, ensure, ensure_positive, ensure_probability, positions,
};
use super::params::{KvList, KvParams, ParamInfo, param, show_opt};
use crate::error::Result;
use crate::reader::RecordStream;
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

/// How concentration durations are distributed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DurationDistribution {
    /// Exponential with mean `mean_duration_s` (memoryless).
    Exponential,
    /// Lognormal with mean `mean_duration_s` and log-sd `duration_sigma`:
    /// the longer a concentration has lasted, the longer it is expected to
    /// last (the shape of the paper's Table 2).
    Lognormal,
}

impl std::str::FromStr for DurationDistribution {
    type Err = crate::ParamError;
    fn from_str(s: &str) -> std::result::Result<Self, crate::ParamError> {
        match s {
            "exponential" => Ok(Self::Exponential),
            "lognormal" => Ok(Self::Lognormal),
            _ => Err(crate::ParamError::unknown_name(
                "",
                s,
                ["exponential", "lognormal"],
            )),
        }
    }
}

/// Which way drifting concentrations move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftDirection {
    /// Towards higher sub-LUN numbers.
    Up,
    /// Towards lower sub-LUN numbers.
    Down,
    /// Up or down with equal probability, per concentration.
    Random,
}

impl std::str::FromStr for DriftDirection {
    type Err = crate::ParamError;
    fn from_str(s: &str) -> std::result::Result<Self, crate::ParamError> {
        match s {
            "up" => Ok(Self::Up),
            "down" => Ok(Self::Down),
            "random" => Ok(Self::Random),
            _ => Err(crate::ParamError::unknown_name(
                "",
                s,
                ["up", "down", "random"],
            )),
        }
    }
}

impl std::fmt::Display for DurationDistribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Exponential => "exponential",
            Self::Lognormal => "lognormal",
        })
    }
}

impl std::fmt::Display for DriftDirection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Up => "up",
            Self::Down => "down",
            Self::Random => "random",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IoConcentrationParams {
    /// Sub-LUNs in the LUN; the LUN is `sub_luns * sub_lun_size_bytes`.
    pub sub_luns: u32,
    pub sub_lun_size_bytes: u64,
    /// Window length (s); the stream ends here (or after `count`).
    pub duration_s: f64,
    pub count: Option<u64>,
    pub arrival: ArrivalKind,
    pub rate_iops: f64,
    pub write_ratio: f64,
    pub size_bytes: SizeMix,
    pub alignment_bytes: u64,
    /// Share of IOs that go to the active concentrations (when at least one
    /// is active); the rest is uniform over the LUN.
    pub concentration_share: f64,
    /// Mean number of concentrations active at once; concentrations arrive as
    /// a Poisson process at `mean_active / mean_duration_s` per second.
    pub mean_active: f64,
    pub duration_distribution: DurationDistribution,
    pub mean_duration_s: f64,
    /// Lognormal only: sd of ln(duration).
    pub duration_sigma: f64,
    /// Concentration sizes in sub-LUNs, as (size, weight) pairs.
    pub group_sub_luns: Vec<(u32, f64)>,
    /// Share of concentrations that drift.
    pub drift_share: f64,
    /// Drift speed of drifting concentrations (sub-LUNs per minute).
    pub drift_sub_luns_per_min: f64,
    pub drift_direction: DriftDirection,
    /// Share of concentrations placed anywhere on the LUN; the rest reappear
    /// where one of the last 16 concentrations started (a "revisit").
    pub arbitrary_share: f64,
}

impl Default for IoConcentrationParams {
    fn default() -> Self {
        IoConcentrationParams {
            sub_luns: 300,
            sub_lun_size_bytes: GIB,
            duration_s: 3600.0,
            count: None,
            arrival: ArrivalKind::Poisson,
            rate_iops: 1000.0,
            write_ratio: 0.3,
            size_bytes: default_sizes(),
            alignment_bytes: 4096,
            concentration_share: 0.7,
            mean_active: 3.0,
            duration_distribution: DurationDistribution::Exponential,
            mean_duration_s: 1800.0,
            duration_sigma: 1.0,
            group_sub_luns: vec![(1, 4.0), (2, 3.0), (3, 2.0), (4, 1.0)],
            drift_share: 0.3,
            drift_sub_luns_per_min: 0.5,
            drift_direction: DriftDirection::Random,
            arbitrary_share: 1.0,
        }
    }
}

/// Our choice (the seed gives no size mix): mostly small, mean 12 KiB.
fn default_sizes() -> SizeMix {
    SizeMix::weighted(&[
        (4 * KIB as u32, 8.0),
        (8 * KIB as u32, 4.0),
        (16 * KIB as u32, 2.0),
        (32 * KIB as u32, 1.0),
        (64 * KIB as u32, 1.0),
    ])
}

pub(crate) const PARAMS: &[ParamInfo] = &[
    param(
        "sub_luns",
        "count",
        "300",
        "sub-LUNs in the LUN (LUN size = sub_luns × sub_lun_size_bytes)",
    ),
    param("sub_lun_size_bytes", "bytes", "1g", "sub-LUN size"),
    param(
        "duration_s",
        "s",
        "3600",
        "window length; the stream ends here",
    ),
    param(
        "count",
        "records",
        "-",
        "stop after this many records (before duration_s if smaller)",
    ),
    param("arrival", "fixed|poisson", "poisson", "IO arrival process"),
    param("rate_iops", "requests/s", "1000", "mean IO rate"),
    param("write_ratio", "0..1", "0.3", "share of writes"),
    param(
        "size_bytes",
        "bytes or SIZE:WEIGHT,...",
        "4k:8,8k:4,16k:2,32k:1,64k:1",
        "request sizes",
    ),
    param(
        "alignment_bytes",
        "bytes",
        "4k",
        "offsets are multiples of this",
    ),
    param(
        "concentration_share",
        "0..1",
        "0.7",
        "share of IOs sent to active concentrations (rest: uniform background)",
    ),
    param(
        "mean_active",
        "count",
        "3",
        "mean number of concentrations active at once (sets the Poisson arrival rate)",
    ),
    param(
        "duration_distribution",
        "exponential|lognormal",
        "exponential",
        "distribution of concentration durations",
    ),
    param(
        "mean_duration_s",
        "s",
        "1800",
        "mean concentration duration",
    ),
    param(
        "duration_sigma",
        "ln s",
        "1",
        "lognormal only: sd of ln(duration)",
    ),
    param(
        "group_sub_luns",
        "N:WEIGHT,...",
        "1:4,2:3,3:2,4:1",
        "concentration size in adjacent sub-LUNs",
    ),
    param(
        "drift_share",
        "0..1",
        "0.3",
        "share of concentrations that drift",
    ),
    param(
        "drift_sub_luns_per_min",
        "sub-LUNs/min",
        "0.5",
        "drift speed",
    ),
    param(
        "drift_direction",
        "up|down|random",
        "random",
        "drift direction",
    ),
    param(
        "arbitrary_share",
        "0..1",
        "1",
        "share placed anywhere; the rest revisit a recent concentration's place",
    ),
];

impl IoConcentrationParams {
    pub(crate) fn to_kv(&self) -> KvList {
        let groups: Vec<String> = self
            .group_sub_luns
            .iter()
            .map(|(n, w)| format!("{n}:{w}"))
            .collect();
        vec![
            ("sub_luns", self.sub_luns.to_string()),
            ("sub_lun_size_bytes", show_bytes(self.sub_lun_size_bytes)),
            ("duration_s", self.duration_s.to_string()),
            ("count", show_opt(&self.count)),
            ("arrival", self.arrival.to_string()),
            ("rate_iops", self.rate_iops.to_string()),
            ("write_ratio", self.write_ratio.to_string()),
            ("size_bytes", self.size_bytes.to_string()),
            ("alignment_bytes", show_bytes(self.alignment_bytes)),
            ("concentration_share", self.concentration_share.to_string()),
            ("mean_active", self.mean_active.to_string()),
            (
                "duration_distribution",
                self.duration_distribution.to_string(),
            ),
            ("mean_duration_s", self.mean_duration_s.to_string()),
            ("duration_sigma", self.duration_sigma.to_string()),
            ("group_sub_luns", groups.join(",")),
            ("drift_share", self.drift_share.to_string()),
            (
                "drift_sub_luns_per_min",
                self.drift_sub_luns_per_min.to_string(),
            ),
            ("drift_direction", self.drift_direction.to_string()),
            ("arbitrary_share", self.arbitrary_share.to_string()),
        ]
    }

    pub(crate) fn apply_kv(&mut self, kv: &KvParams, generator: &str) -> Result<()> {
        let r = kv.reader(generator);
        r.u32("sub_luns", &mut self.sub_luns)?;
        r.bytes("sub_lun_size_bytes", &mut self.sub_lun_size_bytes)?;
        r.f64("duration_s", &mut self.duration_s)?;
        r.opt_u64("count", &mut self.count)?;
        r.choice("arrival", &mut self.arrival)?;
        r.f64("rate_iops", &mut self.rate_iops)?;
        r.f64("write_ratio", &mut self.write_ratio)?;
        r.sizes("size_bytes", &mut self.size_bytes)?;
        r.bytes("alignment_bytes", &mut self.alignment_bytes)?;
        r.f64("concentration_share", &mut self.concentration_share)?;
        r.f64("mean_active", &mut self.mean_active)?;
        r.choice("duration_distribution", &mut self.duration_distribution)?;
        r.f64("mean_duration_s", &mut self.mean_duration_s)?;
        r.f64("duration_sigma", &mut self.duration_sigma)?;
        r.counts_weighted("group_sub_luns", &mut self.group_sub_luns)?;
        r.f64("drift_share", &mut self.drift_share)?;
        r.f64("drift_sub_luns_per_min", &mut self.drift_sub_luns_per_min)?;
        r.choice("drift_direction", &mut self.drift_direction)?;
        r.f64("arbitrary_share", &mut self.arbitrary_share)
    }

    pub fn validate(&self) -> Result<()> {
        ensure(self.sub_luns >= 1, || {
            "`sub_luns` must be at least 1".into()
        })?;
        check_alignment(self.alignment_bytes)?;
        ensure(
            self.sub_lun_size_bytes % self.alignment_bytes == 0 && self.sub_lun_size_bytes > 0,
            || {
                format!(
                    "`sub_lun_size_bytes` ({}) must be a positive multiple of `alignment_bytes` ({})",
                    self.sub_lun_size_bytes, self.alignment_bytes
                )
            },
        )?;
        ensure(
            (self.sub_luns as u64)
                .checked_mul(self.sub_lun_size_bytes)
                .is_some(),
            || "the LUN is larger than 2^64 bytes".into(),
        )?;
        ensure_positive("duration_s", self.duration_s)?;
        ensure_positive("rate_iops", self.rate_iops)?;
        ensure_probability("write_ratio", self.write_ratio)?;
        self.size_bytes.validate("size_bytes")?;
        ensure_probability("concentration_share", self.concentration_share)?;
        ensure(
            self.mean_active.is_finite() && self.mean_active >= 0.0,
            || format!("`mean_active` must be >= 0, got {}", self.mean_active),
        )?;
        ensure_positive("mean_duration_s", self.mean_duration_s)?;
        ensure(self.mean_duration_s >= 1e-3, || {
            format!(
                "`mean_duration_s` must be at least 1 ms, got {:e}",
                self.mean_duration_s
            )
        })?;
        // The schedule plants about mean_active × (window + warm-up) /
        // mean_duration concentrations; bound it so a parameter typo cannot
        // make the generator run (or allocate) without end.
        let planted =
            self.mean_active * (self.duration_s / self.mean_duration_s + WARMUP_MEAN_DURATIONS);
        ensure(planted <= MAX_PLANTED_CONCENTRATIONS, || {
            format!(
                "`mean_active` {} over a {} s window with `mean_duration_s` {} would plant about {planted:.3e} concentrations; at most {MAX_PLANTED_CONCENTRATIONS:e} are allowed (raise mean_duration_s or lower mean_active)",
                self.mean_active, self.duration_s, self.mean_duration_s
            )
        })?;
        ensure(
            self.duration_sigma.is_finite()
                && self.duration_sigma >= 0.0
                && self.duration_sigma <= 5.0,
            || {
                format!(
                    "`duration_sigma` must be between 0 and 5, got {}",
                    self.duration_sigma
                )
            },
        )?;
        ensure(!self.group_sub_luns.is_empty(), || {
            "`group_sub_luns` lists no sizes".into()
        })?;
        for &(n, w) in &self.group_sub_luns {
            ensure(n >= 1 && n <= self.sub_luns, || {
                format!(
                    "`group_sub_luns`: size {n} must be between 1 and sub_luns ({})",
                    self.sub_luns
                )
            })?;
            ensure(w.is_finite() && w >= 0.0, || {
                format!("`group_sub_luns`: weight {w} must be >= 0")
            })?;
        }
        ensure(self.group_sub_luns.iter().any(|g| g.1 > 0.0), || {
            "`group_sub_luns`: at least one weight must be > 0".into()
        })?;
        ensure_probability("drift_share", self.drift_share)?;
        ensure(
            self.drift_share == 0.0 || self.drift_sub_luns_per_min > 0.0,
            || "`drift_sub_luns_per_min` must be > 0 when `drift_share` > 0".into(),
        )?;
        ensure(
            self.drift_sub_luns_per_min.is_finite() && self.drift_sub_luns_per_min >= 0.0,
            || "`drift_sub_luns_per_min` must be a finite number >= 0".into(),
        )?;
        ensure_probability("arbitrary_share", self.arbitrary_share)?;
        positions(
            self.sub_lun_size_bytes,
            self.size_bytes.max_bytes(),
            self.alignment_bytes,
            "`sub_lun_size_bytes`",
        )?;
        Ok(())
    }

    fn end_ns(&self) -> u64 {
        (self.duration_s * NS_PER_S) as u64
    }
}

/// One planted concentration: the ground truth analysis code is tested
/// against.
///
/// A concentration covers `size_sub_luns` adjacent sub-LUNs starting at
/// `first_sub_lun_at(t)` during `[start_ns, start_ns + duration_ns)`. While
/// it is active, each IO that goes to concentrations (probability
/// `concentration_share`) picks one sub-LUN of the active concentrations
/// uniformly (so a concentration's share is proportional to its size) and a
/// uniformly random aligned offset inside it. A drifting concentration moves
/// one sub-LUN every `drift_step_ns` in `drift_direction` and stops at the
/// LUN's edge.
#[derive(Clone, Debug, PartialEq)]
pub struct Concentration {
    /// 0, 1, 2, ... in start order, counting those that ended before the
    /// window opened (those are not listed).
    pub id: u64,
    /// May be negative: the process starts before the window so that the
    /// window opens in steady state.
    pub start_ns: i64,
    pub duration_ns: u64,
    /// First sub-LUN at `start_ns`.
    pub first_sub_lun: u32,
    pub size_sub_luns: u32,
    /// -1 (down), 0 (static) or +1 (up).
    pub drift_direction: i8,
    /// Time between moves; 0 when static.
    pub drift_step_ns: u64,
    /// Placed where a recent concentration started, not at an arbitrary place.
    pub revisit: bool,
    /// Sub-LUNs in the LUN (the drift stops at its edges).
    pub lun_sub_luns: u32,
}

impl Concentration {
    pub fn end_ns(&self) -> i64 {
        self.start_ns
            .saturating_add(self.duration_ns.min(i64::MAX as u64) as i64)
    }

    pub fn is_active_at(&self, t_ns: i64) -> bool {
        self.start_ns <= t_ns && t_ns < self.end_ns()
    }

    /// Signed drift speed (sub-LUNs per minute; 0 when static).
    pub fn drift_sub_luns_per_min(&self) -> f64 {
        if self.drift_step_ns == 0 {
            0.0
        } else {
            self.drift_direction as f64 * 60.0 * NS_PER_S / self.drift_step_ns as f64
        }
    }

    /// Moves made by `t_ns`, before clamping at the LUN's edge.
    fn steps_at(&self, t_ns: i64) -> u64 {
        if self.drift_step_ns == 0 || t_ns <= self.start_ns {
            0
        } else {
            (t_ns - self.start_ns) as u64 / self.drift_step_ns
        }
    }

    /// The first sub-LUN covered at `t_ns` (meaningful while active).
    pub fn first_sub_lun_at(&self, t_ns: i64) -> u32 {
        let steps = self.steps_at(t_ns);
        let highest = (self.lun_sub_luns - self.size_sub_luns) as u64;
        let first = self.first_sub_lun as u64;
        match self.drift_direction {
            1 => (first + steps).min(highest) as u32,
            -1 => first.saturating_sub(steps) as u32,
            _ => self.first_sub_lun,
        }
    }

    /// Whether `sub_lun` is part of this concentration at `t_ns`.
    pub fn covers(&self, t_ns: i64, sub_lun: u32) -> bool {
        let first = self.first_sub_lun_at(t_ns);
        self.is_active_at(t_ns) && sub_lun >= first && sub_lun < first + self.size_sub_luns
    }

    /// When the covered sub-LUNs next change (i64::MAX if they do not).
    fn next_move_ns(&self, t_ns: i64) -> i64 {
        if self.drift_step_ns == 0 {
            return i64::MAX;
        }
        let at_edge = match self.drift_direction {
            1 => self.first_sub_lun_at(t_ns) + self.size_sub_luns >= self.lun_sub_luns,
            _ => self.first_sub_lun_at(t_ns) == 0,
        };
        if at_edge {
            return i64::MAX;
        }
        let next =
            (self.steps_at(t_ns) + 1) as i128 * self.drift_step_ns as i128 + self.start_ns as i128;
        next.min(i64::MAX as i128) as i64
    }
}

/// Upper bound on the concentrations one schedule may plant (see `validate`).
const MAX_PLANTED_CONCENTRATIONS: f64 = 1e7;

/// How many recent start places a revisit chooses from.
const RECENT_PLACES: usize = 16;
/// The process starts this many mean durations before the window.
const WARMUP_MEAN_DURATIONS: f64 = 10.0;

/// The planted concentrations in start order, streaming: those active at
/// some point of `[0, until)`.
#[derive(Clone)]
pub struct ConcentrationSchedule {
    rng: Rng,
    next_start_ns: f64,
    mean_gap_ns: f64,
    until_ns: i64,
    next_id: u64,
    sub_luns: u32,
    group: SizeSampler,
    duration_distribution: DurationDistribution,
    mean_duration_ns: f64,
    /// ln-mean of lognormal durations.
    log_mu: f64,
    sigma: f64,
    drift: Chance,
    drift_step_ns: u64,
    drift_direction: DriftDirection,
    arbitrary: Chance,
    recent: [u32; RECENT_PLACES],
    recent_len: usize,
    recent_next: usize,
}

impl ConcentrationSchedule {
    fn new(p: &IoConcentrationParams, seed: u64) -> ConcentrationSchedule {
        let mean_duration_ns = p.mean_duration_s * NS_PER_S;
        let rate_per_ns = p.mean_active / mean_duration_ns;
        // Reuse the size sampler for group sizes (sizes are small integers).
        let group = SizeSampler::new(&SizeMix::weighted(
            &p.group_sub_luns
                .iter()
                .map(|&(n, w)| (n, w))
                .collect::<Vec<_>>(),
        ));
        let mean_gap_ns = if rate_per_ns > 0.0 {
            1.0 / rate_per_ns
        } else {
            f64::INFINITY
        };
        let mut rng = Rng::new(seed, 2);
        // The first arrival is one exponential gap after the warm-up start
        // (never, when no concentrations are asked for).
        let next_start_ns = if mean_gap_ns.is_finite() {
            -WARMUP_MEAN_DURATIONS * mean_duration_ns + rng.exp1() * mean_gap_ns
        } else {
            f64::INFINITY
        };
        ConcentrationSchedule {
            rng,
            next_start_ns,
            mean_gap_ns,
            until_ns: p.end_ns() as i64,
            next_id: 0,
            sub_luns: p.sub_luns,
            group,
            duration_distribution: p.duration_distribution,
            mean_duration_ns,
            log_mu: mean_duration_ns.ln() - p.duration_sigma * p.duration_sigma / 2.0,
            sigma: p.duration_sigma,
            drift: Chance::new(p.drift_share),
            drift_step_ns: if p.drift_sub_luns_per_min > 0.0 {
                ((60.0 * NS_PER_S / p.drift_sub_luns_per_min).round() as u64).max(1)
            } else {
                0
            },
            drift_direction: p.drift_direction,
            arbitrary: Chance::new(p.arbitrary_share),
            recent: [0; RECENT_PLACES],
            recent_len: 0,
            recent_next: 0,
        }
    }

    /// Lists only concentrations that start before `until_ns` (e.g. the time
    /// of the last generated record, when `count` ended the stream early).
    pub fn until(mut self, until_ns: i64) -> Self {
        self.until_ns = self.until_ns.min(until_ns);
        self
    }

    fn draw_duration_ns(&mut self) -> u64 {
        let d = match self.duration_distribution {
            DurationDistribution::Exponential => self.rng.exp1() * self.mean_duration_ns,
            DurationDistribution::Lognormal => {
                (self.log_mu + self.sigma * self.rng.std_normal()).exp()
            }
        };
        (d.round() as u64).max(1)
    }
}

impl Iterator for ConcentrationSchedule {
    type Item = Concentration;

    fn next(&mut self) -> Option<Concentration> {
        loop {
            let start = self.next_start_ns;
            if start >= self.until_ns as f64 {
                return None;
            }
            self.next_start_ns += self.rng.exp1() * self.mean_gap_ns;
            let id = self.next_id;
            self.next_id += 1;
            let duration_ns = self.draw_duration_ns();
            let size = self.group.sample(&mut self.rng);
            let highest = self.sub_luns - size;
            let revisit = self.recent_len > 0 && !self.arbitrary.draw(&mut self.rng);
            let first = if revisit {
                let place = self.recent[self.rng.below(self.recent_len as u64) as usize];
                place.min(highest)
            } else {
                self.rng.below(highest as u64 + 1) as u32
            };
            self.recent[self.recent_next] = first;
            self.recent_next = (self.recent_next + 1) % RECENT_PLACES;
            self.recent_len = (self.recent_len + 1).min(RECENT_PLACES);
            let drifts = self.drift_step_ns > 0 && self.drift.draw(&mut self.rng);
            let direction = match (drifts, self.drift_direction) {
                (false, _) => 0,
                (true, DriftDirection::Up) => 1,
                (true, DriftDirection::Down) => -1,
                (true, DriftDirection::Random) => {
                    if self.rng.next_u64() >> 63 == 0 {
                        1
                    } else {
                        -1
                    }
                }
            };
            let c = Concentration {
                id,
                start_ns: start.floor() as i64,
                duration_ns,
                first_sub_lun: first,
                size_sub_luns: size,
                drift_direction: direction,
                drift_step_ns: if drifts { self.drift_step_ns } else { 0 },
                revisit,
                lun_sub_luns: self.sub_luns,
            };
            if c.end_ns() > 0 {
                return Some(c);
            }
        }
    }
}

/// Writes the ground truth as CSV: one row per concentration, times in
/// seconds relative to the window start (negative = started before it);
/// `first_sub_lun` is the place at the start, `first_sub_lun_at_window_start`
/// the place when the window opens (they differ for drifting concentrations
/// that started earlier).
pub fn write_truth_csv(schedule: ConcentrationSchedule, out: &mut dyn Write) -> io::Result<u64> {
    writeln!(
        out,
        "id,start_s,duration_s,end_s,first_sub_lun,first_sub_lun_at_window_start,size_sub_luns,drift_sub_luns_per_min,drift_step_s,revisit"
    )?;
    let mut rows = 0;
    for c in schedule {
        writeln!(
            out,
            "{},{:.9},{:.9},{:.9},{},{},{},{},{:.9},{}",
            c.id,
            c.start_ns as f64 / NS_PER_S,
            c.duration_ns as f64 / NS_PER_S,
            c.end_ns() as f64 / NS_PER_S,
            c.first_sub_lun,
            c.first_sub_lun_at(c.start_ns.max(0)),
            c.size_sub_luns,
            c.drift_sub_luns_per_min(),
            c.drift_step_ns as f64 / NS_PER_S,
            c.revisit
        )?;
        rows += 1;
    }
    Ok(rows)
}

struct Active {
    c: Concentration,
    first: u32,
}

/// The IO-concentration workload generator.
pub struct IoConcentrationGen {
    rng: Rng,
    arrivals: Arrivals,
    limit: Limit,
    devices: DeviceTable,
    schedule: ConcentrationSchedule,
    pending: Option<Concentration>,
    active: Vec<Active>,
    /// Sub-LUNs covered by `active[..=i]`.
    cumulative: Vec<u64>,
    next_change_ns: i64,
    write: Chance,
    to_concentration: Chance,
    sizes: SizeSampler,
    sub_lun_size_bytes: u64,
    sub_lun_positions: u64,
    sub_luns: u64,
    alignment_bytes: u64,
}

impl IoConcentrationGen {
    pub fn new(params: &IoConcentrationParams, seed: u64) -> Result<IoConcentrationGen> {
        params.validate()?;
        let max_size = params.size_bytes.max_bytes();
        let mut schedule = ConcentrationSchedule::new(params, seed);
        let pending = schedule.next();
        Ok(IoConcentrationGen {
            rng: Rng::new(seed, 1),
            arrivals: Arrivals::new(params.arrival, params.rate_iops),
            limit: Limit::new(params.count, Some(params.duration_s), 0)?,
            devices: ["lun0".to_owned()].into_iter().collect(),
            schedule,
            pending,
            active: Vec::new(),
            cumulative: Vec::new(),
            next_change_ns: i64::MIN,
            write: Chance::new(params.write_ratio),
            to_concentration: Chance::new(params.concentration_share),
            sizes: SizeSampler::new(&params.size_bytes),
            sub_lun_size_bytes: params.sub_lun_size_bytes,
            sub_lun_positions: positions(
                params.sub_lun_size_bytes,
                max_size,
                params.alignment_bytes,
                "`sub_lun_size_bytes`",
            )?,
            sub_luns: params.sub_luns as u64,
            alignment_bytes: params.alignment_bytes,
        })
    }

    /// The concentrations this generator plants for `(params, seed)`, in
    /// start order: every one active at some time in `[0, duration_s)`.
    pub fn ground_truth(
        params: &IoConcentrationParams,
        seed: u64,
    ) -> Result<ConcentrationSchedule> {
        params.validate()?;
        Ok(ConcentrationSchedule::new(params, seed))
    }

    /// Brings the active set up to date at `t_ns`: starts, ends, drift moves.
    fn update(&mut self, t_ns: i64) {
        while let Some(c) = self.pending.take() {
            if c.start_ns > t_ns {
                self.pending = Some(c);
                break;
            }
            self.active.push(Active { c, first: 0 });
            self.pending = self.schedule.next();
        }
        self.active.retain(|a| a.c.end_ns() > t_ns);
        let mut next = self.pending.as_ref().map_or(i64::MAX, |c| c.start_ns);
        self.cumulative.clear();
        let mut total = 0u64;
        for a in &mut self.active {
            a.first = a.c.first_sub_lun_at(t_ns);
            next = next.min(a.c.end_ns()).min(a.c.next_move_ns(t_ns));
            total += a.c.size_sub_luns as u64;
            self.cumulative.push(total);
        }
        self.next_change_ns = next;
    }
}

impl RecordStream for IoConcentrationGen {
    #[inline]
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        let time_ns = self.arrivals.next_ns(&mut self.rng);
        if !self.limit.take(time_ns) {
            return Ok(None);
        }
        let t = time_ns as i64;
        if t >= self.next_change_ns {
            self.update(t);
        }
        let rng = &mut self.rng;
        let op = if self.write.draw(rng) {
            Op::Write
        } else {
            Op::Read
        };
        let size_bytes = self.sizes.sample(rng);
        let total = self.cumulative.last().copied().unwrap_or(0);
        let offset_bytes = if total > 0 && self.to_concentration.draw(rng) {
            let r = rng.below(total);
            let i = self.cumulative.iter().position(|&c| r < c).unwrap_or(0);
            let before = if i == 0 { 0 } else { self.cumulative[i - 1] };
            let sub_lun = self.active[i].first as u64 + (r - before);
            sub_lun * self.sub_lun_size_bytes
                + rng.below(self.sub_lun_positions) * self.alignment_bytes
        } else {
            // Background, also inside one sub-LUN so per-sub-LUN counts are exact.
            rng.below(self.sub_luns) * self.sub_lun_size_bytes
                + rng.below(self.sub_lun_positions) * self.alignment_bytes
        };
        Ok(Some(IoRecord {
            time_ns,
            offset_bytes,
            size_bytes,
            device_id: 0,
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

/// One ATSMF preset: an MSR window from the paper's Tables 4–6 and Table 1.
pub(crate) struct AtsmfPreset {
    pub name: &'static str,
    pub volume: &'static str,
    /// LUN size (GB in the paper = 1 GiB sub-LUNs; Table 4/6).
    pub lun_gb: u32,
    /// Window start and end, minutes from the first record (Table 4).
    pub window_min: (u32, u32),
    /// Write ratio of the replayed window (Table 6).
    pub write_ratio_window: f64,
    /// Write ratio of the whole-trace analysis (Table 1), for reference.
    pub write_ratio_table1: f64,
    /// Mean concentration duration, minutes (Table 1).
    pub mean_duration_min: f64,
    /// Share of concentrations at arbitrary places (Table 1).
    pub arbitrary_share: f64,
}

pub(crate) const ATSMF_PRESETS: &[AtsmfPreset] = &[
    AtsmfPreset {
        name: "atsmf.src1_0",
        volume: "src1_0",
        lun_gb: 293,
        window_min: (1920, 2020),
        write_ratio_window: 0.8424,
        write_ratio_table1: 0.44,
        mean_duration_min: 87.0,
        arbitrary_share: 0.90,
    },
    AtsmfPreset {
        name: "atsmf.src1_1",
        volume: "src1_1",
        lun_gb: 293,
        window_min: (480, 600),
        write_ratio_window: 0.0091,
        write_ratio_table1: 0.05,
        mean_duration_min: 66.0,
        arbitrary_share: 0.89,
    },
    AtsmfPreset {
        name: "atsmf.proj1",
        volume: "proj_1",
        lun_gb: 800,
        window_min: (230, 550),
        write_ratio_window: 0.0116,
        write_ratio_table1: 0.11,
        mean_duration_min: 60.0,
        arbitrary_share: 0.75,
    },
    AtsmfPreset {
        name: "atsmf.proj2",
        volume: "proj_2",
        lun_gb: 800,
        window_min: (6760, 6890),
        write_ratio_window: 0.4249,
        write_ratio_table1: 0.12,
        mean_duration_min: 54.0,
        arbitrary_share: 0.88,
    },
    AtsmfPreset {
        name: "atsmf.proj4",
        volume: "proj_4",
        lun_gb: 236,
        window_min: (7390, 7600),
        write_ratio_window: 0.0022,
        write_ratio_table1: 0.02,
        mean_duration_min: 40.0,
        arbitrary_share: 0.75,
    },
    AtsmfPreset {
        name: "atsmf.usr1",
        volume: "usr_1",
        lun_gb: 800,
        window_min: (2090, 2350),
        write_ratio_window: 0.0025,
        write_ratio_table1: 0.09,
        mean_duration_min: 86.0,
        arbitrary_share: 0.66,
    },
    AtsmfPreset {
        name: "atsmf.usr2",
        volume: "usr_2",
        lun_gb: 569,
        window_min: (5970, 6130),
        write_ratio_window: 0.0022,
        write_ratio_table1: 0.19,
        mean_duration_min: 32.0,
        arbitrary_share: 0.84,
    },
    AtsmfPreset {
        name: "atsmf.web2",
        volume: "web_2",
        lun_gb: 182,
        window_min: (5870, 5930),
        write_ratio_window: 0.0003,
        write_ratio_table1: 0.01,
        mean_duration_min: 58.0,
        arbitrary_share: 1.00,
    },
];

/// Our choices where the seed gives no number (docs/generators.md).
pub(crate) const ATSMF_RATE_IOPS: f64 = 200.0;
pub(crate) const ATSMF_CONCENTRATION_SHARE: f64 = 0.7;
pub(crate) const ATSMF_MEAN_ACTIVE: f64 = 4.0;
pub(crate) const ATSMF_DRIFT_SHARE: f64 = 0.5;
pub(crate) const ATSMF_DRIFT_SUB_LUNS_PER_MIN: f64 = 1.0 / 3.0;
pub(crate) const ATSMF_DURATION_SIGMA: f64 = 1.0;

impl AtsmfPreset {
    pub fn params(&self) -> IoConcentrationParams {
        IoConcentrationParams {
            sub_luns: self.lun_gb,
            duration_s: (self.window_min.1 - self.window_min.0) as f64 * 60.0,
            rate_iops: ATSMF_RATE_IOPS,
            write_ratio: self.write_ratio_window,
            concentration_share: ATSMF_CONCENTRATION_SHARE,
            mean_active: ATSMF_MEAN_ACTIVE,
            duration_distribution: DurationDistribution::Lognormal,
            mean_duration_s: self.mean_duration_min * 60.0,
            duration_sigma: ATSMF_DURATION_SIGMA,
            drift_share: ATSMF_DRIFT_SHARE,
            drift_sub_luns_per_min: ATSMF_DRIFT_SUB_LUNS_PER_MIN,
            arbitrary_share: self.arbitrary_share,
            ..IoConcentrationParams::default()
        }
    }

    pub fn description(&self) -> String {
        format!(
            "ATSMF: MSR {} window {}-{} min, {} GiB LUN, write ratio {} (whole trace: {}), mean concentration {} min",
            self.volume,
            self.window_min.0,
            self.window_min.1,
            self.lun_gb,
            self.write_ratio_window,
            self.write_ratio_table1,
            self.mean_duration_min
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::testing::collect;

    fn test_params() -> IoConcentrationParams {
        IoConcentrationParams {
            sub_luns: 200,
            sub_lun_size_bytes: 64 << 20,
            duration_s: 4.0 * 3600.0,
            rate_iops: 50.0,
            mean_active: 3.0,
            mean_duration_s: 600.0,
            ..IoConcentrationParams::default()
        }
    }

    #[test]
    fn deterministic_ordered_and_inside_the_lun() {
        let p = test_params();
        let a = collect(&mut IoConcentrationGen::new(&p, 1).unwrap());
        let b = collect(&mut IoConcentrationGen::new(&p, 1).unwrap());
        let c = collect(&mut IoConcentrationGen::new(&p, 2).unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        let lun = 200 * (64u64 << 20);
        crate::generate::testing::check_invariants(&a, 0, lun, 4096, 1);
        // Every IO stays inside one sub-LUN.
        assert!(
            a.iter()
                .all(|r| r.offset_bytes / (64 << 20) == (r.end_bytes() - 1) / (64 << 20))
        );
        let truth_a: Vec<_> = IoConcentrationGen::ground_truth(&p, 1).unwrap().collect();
        let truth_b: Vec<_> = IoConcentrationGen::ground_truth(&p, 1).unwrap().collect();
        assert_eq!(truth_a, truth_b);
        assert!(truth_a.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        assert!(
            truth_a
                .iter()
                .all(|c| c.end_ns() > 0 && c.start_ns < (4 * 3600) * 1_000_000_000)
        );
    }

    /// With concentration_share = 1, every IO issued while a concentration
    /// is active must fall in a sub-LUN the truth says is covered then; with
    /// the default share, the fraction inside matches the share plus the
    /// background's chance of landing there.
    #[test]
    fn records_agree_with_the_planted_truth() {
        let mut p = test_params();
        p.concentration_share = 1.0;
        p.drift_share = 0.5;
        p.drift_sub_luns_per_min = 2.0;
        let truth: Vec<_> = IoConcentrationGen::ground_truth(&p, 3).unwrap().collect();
        let recs = collect(&mut IoConcentrationGen::new(&p, 3).unwrap());
        let sub_lun_bytes = 64u64 << 20;
        let mut inside = 0;
        let mut with_active = 0;
        for r in &recs {
            let t = r.time_ns as i64;
            let s = (r.offset_bytes / sub_lun_bytes) as u32;
            if truth.iter().any(|c| c.is_active_at(t)) {
                with_active += 1;
                assert!(
                    truth.iter().any(|c| c.covers(t, s)),
                    "IO at {t} ns in sub-LUN {s} is outside every active concentration"
                );
                inside += 1;
            }
        }
        assert!(
            with_active > recs.len() * 9 / 10,
            "{with_active} of {}",
            recs.len()
        );
        assert_eq!(inside, with_active);

        p.concentration_share = 0.6;
        let truth: Vec<_> = IoConcentrationGen::ground_truth(&p, 4).unwrap().collect();
        let recs = collect(&mut IoConcentrationGen::new(&p, 4).unwrap());
        let (mut n, mut hit, mut expected) = (0u64, 0u64, 0.0f64);
        for r in &recs {
            let t = r.time_ns as i64;
            let active: Vec<_> = truth.iter().filter(|c| c.is_active_at(t)).collect();
            if active.is_empty() {
                continue;
            }
            n += 1;
            let s = (r.offset_bytes / sub_lun_bytes) as u32;
            hit += active.iter().any(|c| c.covers(t, s)) as u64;
            // Background IOs land in the covered sub-LUNs by chance too.
            let mut covered: Vec<u32> = active
                .iter()
                .flat_map(|c| {
                    let f = c.first_sub_lun_at(t);
                    f..f + c.size_sub_luns
                })
                .collect();
            covered.sort_unstable();
            covered.dedup();
            expected += 0.6 + 0.4 * covered.len() as f64 / 200.0;
        }
        let mean_expected = expected / n as f64;
        let share = hit as f64 / n as f64;
        // Bernoulli mean of n ~ 700k: sd < 0.5/sqrt(n) ≈ 0.0006.
        assert!(
            (share - mean_expected).abs() < 0.005,
            "{share} vs {mean_expected}"
        );
    }

    #[test]
    fn planted_durations_and_drift_follow_the_parameters() {
        // Many short concentrations: the sample mean of the durations of
        // those starting inside the window (not length-biased) is within
        // 5 sd of the configured mean (exponential: sd = mean / sqrt(n)).
        let mut p = test_params();
        p.duration_s = 1e6;
        p.mean_active = 20.0;
        p.mean_duration_s = 300.0;
        p.drift_share = 0.4;
        p.drift_direction = DriftDirection::Random;
        let truth: Vec<_> = IoConcentrationGen::ground_truth(&p, 5)
            .unwrap()
            .filter(|c| c.start_ns >= 0)
            .collect();
        let n = truth.len() as f64;
        // Expected count: rate × window = 20 / 300 s × 1e6 s ≈ 66,667.
        assert!((n - 66_667.0).abs() < 5.0 * 66_667f64.sqrt(), "{n}");
        let mean = truth
            .iter()
            .map(|c| c.duration_ns as f64 / 1e9)
            .sum::<f64>()
            / n;
        assert!((mean - 300.0).abs() < 5.0 * 300.0 / n.sqrt(), "{mean}");
        let drifting = truth.iter().filter(|c| c.drift_direction != 0).count() as f64;
        assert!((drifting / n - 0.4).abs() < 5.0 * (0.24 / n).sqrt());
        let up = truth.iter().filter(|c| c.drift_direction == 1).count() as f64;
        assert!((up / drifting - 0.5).abs() < 5.0 * (0.25 / drifting).sqrt());
        assert!(
            truth.iter().filter(|c| c.drift_direction != 0).all(|c| (c
                .drift_sub_luns_per_min()
                .abs()
                - 0.5)
                .abs()
                < 1e-9)
        );

        // Lognormal: log-durations have mean ln(m) - sigma^2 / 2, sd sigma.
        p.duration_distribution = DurationDistribution::Lognormal;
        p.duration_sigma = 1.2;
        let truth: Vec<_> = IoConcentrationGen::ground_truth(&p, 6)
            .unwrap()
            .filter(|c| c.start_ns >= 0)
            .collect();
        let n = truth.len() as f64;
        let logs: Vec<f64> = truth
            .iter()
            .map(|c| (c.duration_ns as f64 / 1e9).ln())
            .collect();
        let mu = logs.iter().sum::<f64>() / n;
        let sd = (logs.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / n).sqrt();
        assert!(
            (mu - (300f64.ln() - 0.72)).abs() < 5.0 * 1.2 / n.sqrt(),
            "{mu}"
        );
        assert!((sd - 1.2).abs() < 0.02, "{sd}");
    }

    /// One long drifting concentration and no background: the mean sub-LUN
    /// of its IOs, regressed on time, moves at the configured speed.
    #[test]
    fn drift_speed_measured_from_records() {
        // A long LUN of small sub-LUNs so that a concentration that started
        // hours before the window is not yet stopped at the edge.
        let p = IoConcentrationParams {
            sub_luns: 100_000,
            sub_lun_size_bytes: 1 << 20,
            duration_s: 3600.0,
            rate_iops: 100.0,
            concentration_share: 1.0,
            mean_active: 1.0,
            mean_duration_s: 36_000.0,
            group_sub_luns: vec![(3, 1.0)],
            drift_share: 1.0,
            drift_sub_luns_per_min: 3.0,
            drift_direction: DriftDirection::Up,
            ..IoConcentrationParams::default()
        };
        // A seed whose window holds exactly one concentration, active from
        // start to end and moving all along (~30 % of seeds).
        let hour = 3600 * 1_000_000_000i64;
        let seed = (0..100)
            .find(|&s| {
                let t: Vec<_> = IoConcentrationGen::ground_truth(&p, s).unwrap().collect();
                t.len() == 1
                    && t[0].start_ns <= 0
                    && t[0].end_ns() > hour
                    && t[0].first_sub_lun_at(hour) + 3 < 100_000
            })
            .expect("a seed with one active concentration");
        let recs = collect(&mut IoConcentrationGen::new(&p, seed).unwrap());
        let xs: Vec<f64> = recs.iter().map(|r| r.time_ns as f64 / 60e9).collect();
        let ys: Vec<f64> = recs.iter().map(|r| (r.offset_bytes >> 20) as f64).collect();
        let n = xs.len() as f64;
        let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
        let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
        let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
        let slope = sxy / sxx;
        // Staircase plus uniform jitter over 3 sub-LUNs: the slope error is
        // far below 1 %.
        assert!((slope - 3.0).abs() < 0.03, "measured {slope} sub-LUNs/min");
    }

    #[test]
    fn presets_build_and_match_the_paper_windows() {
        for preset in ATSMF_PRESETS {
            let p = preset.params();
            assert_eq!(p.sub_luns, preset.lun_gb);
            let built = IoConcentrationGen::new(&p, 0);
            assert!(built.is_ok(), "{}", preset.name);
        }
        let src = ATSMF_PRESETS[0].params();
        assert_eq!(src.duration_s, 6000.0);
        assert_eq!(src.mean_duration_s, 87.0 * 60.0);
    }

    #[test]
    fn truth_csv_has_a_row_per_concentration() {
        let p = test_params();
        let mut out = Vec::new();
        let rows =
            write_truth_csv(IoConcentrationGen::ground_truth(&p, 1).unwrap(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count() as u64, rows + 1);
        assert!(text.starts_with(
            "id,start_s,duration_s,end_s,first_sub_lun,first_sub_lun_at_window_start,size_sub_luns,"
        ));
    }
}
