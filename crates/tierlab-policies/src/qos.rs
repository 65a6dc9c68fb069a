//! IO performance guarantee by busy rate per IOPS (spec/qos.md, seed 001):
//! guarantee tenant A an IOPS target `a` on a shared device by capping
//! tenant B, from OS statistics alone (`%util` and IOPS, as `iostat -x`).
//!
//! Two layers, both sans-IO:
//! - [`BusyRateController`]: the control law and the adaptation of the
//!   target busy rate X. It is fed one sample at a time (`%util`, total,
//!   A's and B's IOPS over the last interval) and answers with B's IOPS
//!   cap and a [`Decision`] record saying why. No clock, no IO: the
//!   simulator and `tierlab qos run` (live Linux) drive it unchanged.
//! - [`BusyRateQos`]: a [`Policy`] for the simulator. It passes every host
//!   IO through to device 0, measures that device the way iostat does
//!   (io_ticks = time with at least one IO outstanding; IOPS = completions
//!   per second), samples on a timer and caps tenant B with
//!   `Action::CapTenant`. Optionally a host IO scheduler
//!   ([`crate::host_sched`]) or page-cache write-back
//!   ([`crate::writeback`]) sits between the tenants and the device.
//!
//! The control law, every sample (units: `%util` in percent, so
//! `busy_pct_per_iops` is percentage points of `%util` per IOPS):
//! ```text
//! busy_pct_per_iops = util_pct / total_iops
//! b = (X − a · busy_pct_per_iops) / busy_pct_per_iops    [− cut · total_iops while saturated]
//! ```
//! Adapting X (docs/qos.md has the exact rules and their reasons):
//! - a sample is *saturated* when its `%util` printed as iostat does (two
//!   decimals) is at least `saturated_util_pct` (100);
//! - when at least `saturation_trigger_samples` (3) of the last
//!   `saturation_window_samples` (10) are saturated, the lowering is
//!   *armed*: point 1 is the latest saturated sample (`C` = its total IOPS,
//!   `c` = its busy_pct_per_iops); the first later sample that is not
//!   saturated, not below `reset_util_pct`, and has `d` = busy_pct_per_iops
//!   below `c` is point 2, and `X ← X − (c − d) · C · y`; the window is
//!   then cleared, so a further lowering needs fresh saturated samples
//!   (with `lowering_needs_full_window`, a full window of fresh samples);
//! - `%util` below `reset_util_pct` (20) resets X to its initial value;
//! - so does a sharp, persistent change of busy_pct_per_iops against its
//!   previous level (the rule the paper proposed after evaluation 1 but
//!   did not implement): the level is the mean busy_pct_per_iops of the
//!   settled samples since X was last set (no saturated sample and no
//!   change of X in the last `saturation_window_samples`), and X resets
//!   when [`RESET_BPI_PERSIST_SAMPLES`] (2) consecutive settled samples
//!   all differ from it in the same direction by at least
//!   `reset_bpi_change` (relative).

use std::collections::VecDeque;

/// Decisions a policy keeps in memory (`BusyRateQos::decisions`): the
/// counters need only the latest, and a server samples for days.
pub const DECISIONS_KEPT: usize = 4096;

use serde::Deserialize;
use tierlab_core::policy::{Action, BufRef, HostIo, Outbox, Policy};
use tierlab_core::{DeviceIo, NS_PER_S, Op, ParamError, TimeNs};

use crate::host_sched::{CfqStats, HostSched, HostSchedulerParams, QueuePer};
use crate::writeback::{Writeback, WritebackParams};

/// Consecutive settled samples that must all differ from the
/// busy_pct_per_iops level by `reset_bpi_change` (in the same direction)
/// to reset X: one sample off is a spike, two are a new level.
pub const RESET_BPI_PERSIST_SAMPLES: u32 = 2;
/// Settled samples the busy_pct_per_iops level needs before samples are
/// compared with it (a mean of fewer is as noisy as one sample).
pub const BPI_LEVEL_MIN_SAMPLES: u32 = 3;

/// The controller's thresholds. Defaults are the paper's, except
/// `reset_bpi_change` (the paper proposed the rule without a number).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BusyRateParams {
    /// Length of one sample (the paper's iostat interval), seconds.
    pub sample_interval_s: f64,
    /// X at the start and after a reset, percent.
    pub initial_target_busy_pct: f64,
    /// y in `New X = X − (c − d)·C·y`, 0 < y ≤ 1.
    pub lowering_gain: f64,
    /// A sample whose `%util` (rounded to 2 decimals, as iostat prints it)
    /// reaches this is saturated, percent.
    pub saturated_util_pct: f64,
    /// How many recent samples the saturation count looks at.
    pub saturation_window_samples: u32,
    /// Saturated samples in that window that arm the lowering of X.
    pub saturation_trigger_samples: u32,
    /// Arm the lowering only once the window holds
    /// `saturation_window_samples` samples taken since the start, the last
    /// lowering or reset ("3 of the past 10 measurements" counted only
    /// when there are 10), and then at any sample, saturated or not. Off
    /// (the default): a saturated sample arms as soon as the window, however
    /// short, holds enough of them. docs/qos.md ("The window after a
    /// lowering") has why and what it changes.
    pub lowering_needs_full_window: bool,
    /// While saturated, B's cap loses this fraction of the total IOPS.
    pub saturated_extra_cut: f64,
    /// `%util` below this resets X, percent.
    pub reset_util_pct: f64,
    /// A relative change of busy_pct_per_iops against its settled level
    /// (max(r, 1/r) − 1, r = sample / level) at least this, in
    /// [`RESET_BPI_PERSIST_SAMPLES`] consecutive settled samples in the
    /// same direction, resets X; 0 disables the rule (the paper's
    /// implementation). docs/qos.md has the measured noise and shifts.
    pub reset_bpi_change: f64,
    /// X never goes below this, percent.
    pub min_target_busy_pct: f64,
    /// B's cap never goes below this, IOPS (a cap of 0 would stop B for good).
    pub min_throttled_iops: f64,
}

impl Default for BusyRateParams {
    fn default() -> Self {
        BusyRateParams {
            sample_interval_s: 20.0,
            initial_target_busy_pct: 95.0,
            lowering_gain: 0.5,
            saturated_util_pct: 100.0,
            saturation_window_samples: 10,
            saturation_trigger_samples: 3,
            lowering_needs_full_window: false,
            saturated_extra_cut: 0.2,
            reset_util_pct: 20.0,
            reset_bpi_change: 0.1,
            min_target_busy_pct: 10.0,
            min_throttled_iops: 1.0,
        }
    }
}

impl BusyRateParams {
    /// Checks every value; the error names the key, the value and what is allowed.
    pub fn validate(&self) -> Result<(), ParamError> {
        let range = |key: &str, v: f64, lo: f64, hi: f64, lo_open: bool| {
            let ok = v.is_finite() && (if lo_open { v > lo } else { v >= lo }) && v <= hi;
            if ok {
                Ok(())
            } else {
                let open = if lo_open { "(" } else { "[" };
                Err(ParamError::new(key, v, format!("{open}{lo}, {hi}]")))
            }
        };
        range(
            "sample_interval_s",
            self.sample_interval_s,
            0.001,
            86_400.0,
            false,
        )?;
        range(
            "initial_target_busy_pct",
            self.initial_target_busy_pct,
            0.0,
            100.0,
            true,
        )?;
        range("lowering_gain", self.lowering_gain, 0.0, 1.0, true)?;
        range(
            "saturated_util_pct",
            self.saturated_util_pct,
            0.0,
            100.0,
            true,
        )?;
        range(
            "saturated_extra_cut",
            self.saturated_extra_cut,
            0.0,
            1.0,
            false,
        )?;
        range("reset_util_pct", self.reset_util_pct, 0.0, 100.0, false)?;
        range("reset_bpi_change", self.reset_bpi_change, 0.0, 1e9, false)?;
        range(
            "min_target_busy_pct",
            self.min_target_busy_pct,
            0.0,
            self.initial_target_busy_pct,
            true,
        )
        .map_err(|e| e.because("at most `initial_target_busy_pct`"))?;
        range(
            "min_throttled_iops",
            self.min_throttled_iops,
            0.0,
            1e12,
            true,
        )?;
        if self.saturation_window_samples == 0 {
            return Err(ParamError::new(
                "saturation_window_samples",
                0,
                "at least 1",
            ));
        }
        if self.saturation_trigger_samples == 0
            || self.saturation_trigger_samples > self.saturation_window_samples
        {
            return Err(ParamError::new(
                "saturation_trigger_samples",
                self.saturation_trigger_samples,
                format!(
                    "1 ..= `saturation_window_samples` ({})",
                    self.saturation_window_samples
                ),
            ));
        }
        if self.reset_util_pct >= self.saturated_util_pct {
            return Err(ParamError::new(
                "reset_util_pct",
                self.reset_util_pct,
                format!("below `saturated_util_pct` ({})", self.saturated_util_pct),
            ));
        }
        Ok(())
    }

    pub fn sample_interval_ns(&self) -> TimeNs {
        (self.sample_interval_s * NS_PER_S as f64).round() as TimeNs
    }
}

/// One sample as iostat would report it over the last interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleInput {
    /// End of the sample's interval (for the log only; the controller reads no clock).
    pub time_ns: TimeNs,
    /// `%util` of the device over the interval.
    pub util_pct: f64,
    /// `r/s + w/s` of the device.
    pub total_iops: f64,
    /// The guaranteed tenant's (A's) and the throttled tenant's (B's) IOPS.
    pub a_iops: f64,
    pub b_iops: f64,
    /// A's guarantee `a` from now on.
    pub a_target_iops: f64,
}

/// What a sample changed in the target busy rate X.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    None,
    /// No IO completed (or `%util` was 0): busy_pct_per_iops is undefined,
    /// B's cap is left as it was.
    Hold,
    /// The lowering was armed by this saturated sample.
    Armed,
    /// X lowered: `New X = X − (c − d)·C·y`.
    Lowered {
        c_busy_pct_per_iops: f64,
        d_busy_pct_per_iops: f64,
        c_total_iops: f64,
    },
    /// X reset to its initial value because `%util` fell below `reset_util_pct`.
    ResetLowUtil,
    /// X reset to its initial value because busy_pct_per_iops moved away
    /// from its settled level (`level_busy_pct_per_iops`) for
    /// [`RESET_BPI_PERSIST_SAMPLES`] samples.
    ResetBpiChange {
        level_busy_pct_per_iops: f64,
    },
}

impl Event {
    /// A number for CSV columns: 0 none, 1 hold, 2 armed, 3 lowered,
    /// 4 reset (low util), 5 reset (busy_pct_per_iops change).
    pub fn code(&self) -> u8 {
        match self {
            Event::None => 0,
            Event::Hold => 1,
            Event::Armed => 2,
            Event::Lowered { .. } => 3,
            Event::ResetLowUtil => 4,
            Event::ResetBpiChange { .. } => 5,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Event::None => "none",
            Event::Hold => "hold",
            Event::Armed => "armed",
            Event::Lowered { .. } => "lowered",
            Event::ResetLowUtil => "reset_low_util",
            Event::ResetBpiChange { .. } => "reset_bpi_change",
        }
    }
}

/// The controller's record of one sample: what it saw and what it decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// 0-based sample number.
    pub sample: u64,
    pub input: SampleInput,
    /// `%util` as used (clamped to [0, 100]).
    pub util_pct: f64,
    /// `util_pct / total_iops`; None when either is 0.
    pub busy_pct_per_iops: Option<f64>,
    pub saturated: bool,
    /// The settled busy_pct_per_iops level this sample was compared with
    /// (None: not compared — rule off, sample not settled, level too short).
    pub bpi_level: Option<f64>,
    /// This sample's signed relative change against `bpi_level`:
    /// `r − 1` if r = bpi / level ≥ 1, else `−(1/r − 1)`.
    pub bpi_deviation: Option<f64>,
    /// Saturated samples among the last `saturation_window_samples` (after this one).
    pub saturated_in_window: u32,
    /// Saturated samples since the start.
    pub saturated_total: u64,
    pub target_busy_pct_before: f64,
    /// X after this sample.
    pub target_busy_pct: f64,
    pub armed: bool,
    pub event: Event,
    /// The extra cut taken off B's cap while saturated, IOPS.
    pub extra_cut_iops: f64,
    /// B's cap from now on; None = B has never been capped.
    pub b_cap_iops: Option<f64>,
}

/// Point 1 of the lowering: the latest saturated sample.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Saturation {
    c_busy_pct_per_iops: f64,
    c_total_iops: f64,
    /// The sample it was (`samples` at the time).
    sample: u64,
}

/// The busy-rate controller: pure, one sample in, one decision out.
#[derive(Clone, Debug)]
pub struct BusyRateController {
    params: BusyRateParams,
    target_busy_pct: f64,
    window: VecDeque<bool>,
    saturated_total: u64,
    point1: Option<Saturation>,
    armed: bool,
    /// Samples since the last saturated sample or change of X (this one included).
    quiet_samples: u32,
    /// Sum and count of the settled samples' busy_pct_per_iops that make
    /// the level (reset at saturation, at a change of X, after a shift).
    level_sum: f64,
    level_n: u32,
    /// Consecutive settled samples off the level, their direction and the
    /// sum of their busy_pct_per_iops (folded into the level when the run
    /// breaks: they were swings, not a new level).
    off_run: u32,
    off_up: bool,
    off_sum: f64,
    b_cap_iops: Option<f64>,
    samples: u64,
    lowerings: u64,
    resets_low_util: u64,
    resets_bpi_change: u64,
}

impl BusyRateController {
    pub fn new(params: BusyRateParams) -> Result<BusyRateController, ParamError> {
        params.validate()?;
        Ok(BusyRateController {
            target_busy_pct: params.initial_target_busy_pct,
            window: VecDeque::with_capacity(params.saturation_window_samples as usize + 1),
            params,
            saturated_total: 0,
            point1: None,
            armed: false,
            quiet_samples: 0,
            level_sum: 0.0,
            level_n: 0,
            off_run: 0,
            off_up: false,
            off_sum: 0.0,
            b_cap_iops: None,
            samples: 0,
            lowerings: 0,
            resets_low_util: 0,
            resets_bpi_change: 0,
        })
    }

    pub fn params(&self) -> &BusyRateParams {
        &self.params
    }

    /// The current target busy rate X, percent.
    pub fn target_busy_pct(&self) -> f64 {
        self.target_busy_pct
    }

    pub fn b_cap_iops(&self) -> Option<f64> {
        self.b_cap_iops
    }

    pub fn lowerings(&self) -> u64 {
        self.lowerings
    }

    pub fn resets_low_util(&self) -> u64 {
        self.resets_low_util
    }

    pub fn resets_bpi_change(&self) -> u64 {
        self.resets_bpi_change
    }

    pub fn saturated_total(&self) -> u64 {
        self.saturated_total
    }

    fn forget_level(&mut self) {
        self.level_sum = 0.0;
        self.level_n = 0;
        self.off_run = 0;
        self.off_sum = 0.0;
    }

    /// The run of samples off the level ended without a reset: they count
    /// towards the level like any other settled sample.
    fn fold_off_run(&mut self) {
        self.level_sum += self.off_sum;
        self.level_n += self.off_run;
        self.off_run = 0;
        self.off_sum = 0.0;
    }

    fn reset_target(&mut self) -> bool {
        self.armed = false;
        self.point1 = None;
        self.window.clear();
        let changed = self.target_busy_pct != self.params.initial_target_busy_pct;
        self.target_busy_pct = self.params.initial_target_busy_pct;
        changed
    }

    /// Takes one sample and decides B's cap.
    pub fn step(&mut self, input: SampleInput) -> Decision {
        let p = self.params.clone();
        let finite = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
        let util_pct = finite(input.util_pct).min(100.0);
        let total_iops = finite(input.total_iops);
        let a_target = finite(input.a_target_iops);
        // iostat prints %util with two decimals; "100 %" is what it shows.
        let saturated = (util_pct * 100.0).round() / 100.0 >= p.saturated_util_pct;
        let bpi = (util_pct > 0.0 && total_iops > 0.0).then(|| util_pct / total_iops);
        let before = self.target_busy_pct;
        let mut event = if bpi.is_none() {
            Event::Hold
        } else {
            Event::None
        };

        self.window.push_back(saturated);
        while self.window.len() > p.saturation_window_samples as usize {
            self.window.pop_front();
        }
        // Settled: no saturated sample and no change of X in the last
        // `saturation_window_samples` (this one included). Only settled
        // samples make or meet the busy_pct_per_iops level: near the
        // proportional limit and right after a new X the controller's own
        // doing moves it (docs/qos.md, "Measured").
        if saturated {
            self.quiet_samples = 0;
            self.forget_level();
        } else {
            self.quiet_samples = self.quiet_samples.saturating_add(1);
        }
        let settled = !saturated && self.quiet_samples >= p.saturation_window_samples;
        let (mut bpi_level, mut bpi_deviation) = (None, None);
        if saturated {
            self.saturated_total += 1;
            if let Some(c) = bpi {
                self.point1 = Some(Saturation {
                    c_busy_pct_per_iops: c,
                    c_total_iops: total_iops,
                    sample: self.samples,
                });
            }
        }

        if util_pct < p.reset_util_pct {
            // Not compared, so it also ends a run of samples off the level.
            self.fold_off_run();
            // Far below any plausible target: the workload changed; start over.
            if self.reset_target() {
                event = Event::ResetLowUtil;
                self.resets_low_util += 1;
            }
        } else if let (Some(now), true, true) = (bpi, settled, p.reset_bpi_change > 0.0) {
            if self.level_n >= BPI_LEVEL_MIN_SAMPLES {
                let level = self.level_sum / self.level_n as f64;
                let r = now / level;
                let up = r >= 1.0;
                let change = r.max(1.0 / r) - 1.0;
                bpi_level = Some(level);
                bpi_deviation = Some(if up { change } else { -change });
                if change >= p.reset_bpi_change {
                    if self.off_run > 0 && self.off_up != up {
                        self.fold_off_run();
                    }
                    self.off_run += 1;
                    self.off_sum += now;
                    self.off_up = up;
                    if self.off_run >= RESET_BPI_PERSIST_SAMPLES {
                        // A new level. At the initial X there is nothing
                        // to reset (and an armed lowering stays armed):
                        // the level starts over from here.
                        self.forget_level();
                        if self.target_busy_pct != p.initial_target_busy_pct {
                            self.reset_target();
                            event = Event::ResetBpiChange {
                                level_busy_pct_per_iops: level,
                            };
                            self.resets_bpi_change += 1;
                        }
                    }
                } else {
                    self.fold_off_run();
                    self.level_sum += now;
                    self.level_n += 1;
                }
            } else {
                self.level_sum += now;
                self.level_n += 1;
            }
        } else {
            // Not compared (low util, no IO, not settled): a run of
            // samples off the level must be consecutive.
            self.fold_off_run();
        }

        let in_window = self.window.iter().filter(|s| **s).count() as u32;
        // With a full window required, the window can fill on an
        // unsaturated sample, which is then point 2 at once (below).
        let may_arm = if p.lowering_needs_full_window {
            self.window.len() >= p.saturation_window_samples as usize
        } else {
            saturated
        };
        // Point 1 must be in the window: saturated samples with no IO
        // completed (a hung device) make none, and in the full-window
        // reading an older one may have slid out.
        let point1_in_window = self
            .point1
            .is_some_and(|pt| self.samples - pt.sample < p.saturation_window_samples as u64);
        if may_arm
            && in_window >= p.saturation_trigger_samples
            && !self.armed
            && bpi.is_some()
            && point1_in_window
        {
            self.armed = true;
            event = Event::Armed;
        }
        if self.armed && !saturated && util_pct >= p.reset_util_pct {
            if let (Some(d), Some(pt)) = (bpi, self.point1) {
                if d < pt.c_busy_pct_per_iops {
                    let x = (pt.c_busy_pct_per_iops - d) * pt.c_total_iops * p.lowering_gain;
                    self.target_busy_pct = (self.target_busy_pct - x).max(p.min_target_busy_pct);
                    event = Event::Lowered {
                        c_busy_pct_per_iops: pt.c_busy_pct_per_iops,
                        d_busy_pct_per_iops: d,
                        c_total_iops: pt.c_total_iops,
                    };
                    self.lowerings += 1;
                    self.armed = false;
                    self.point1 = None;
                    self.window.clear();
                }
            }
        }
        let in_window = self.window.iter().filter(|s| **s).count() as u32;

        let mut extra_cut_iops = 0.0;
        if let Some(bpi) = bpi {
            let x = self.target_busy_pct;
            let b_busy = x - a_target * bpi;
            if saturated {
                extra_cut_iops = p.saturated_extra_cut * total_iops;
            }
            let b = b_busy / bpi - extra_cut_iops;
            self.b_cap_iops = Some(b.max(p.min_throttled_iops));
        }
        // A change of X moves the operating point (B's share, so the IO mix):
        // the level starts over once the new X has settled.
        if self.target_busy_pct != before {
            self.quiet_samples = 0;
            self.forget_level();
        }
        // The step's invariants: the window never exceeds its length, an
        // armed lowering has its point 1, and with a full window required
        // nothing is armed on a shorter one (a lowering or reset clears
        // both the window and the arming).
        debug_assert!(self.window.len() <= p.saturation_window_samples as usize);
        debug_assert!(!self.armed || self.point1.is_some());
        debug_assert!(
            !(self.armed
                && p.lowering_needs_full_window
                && self.window.len() < p.saturation_window_samples as usize),
            "armed on a window of {}",
            self.window.len()
        );
        let d = Decision {
            sample: self.samples,
            input,
            util_pct,
            busy_pct_per_iops: bpi,
            saturated,
            bpi_level,
            bpi_deviation,
            saturated_in_window: in_window,
            saturated_total: self.saturated_total,
            target_busy_pct_before: before,
            target_busy_pct: self.target_busy_pct,
            armed: self.armed,
            event,
            extra_cut_iops,
            b_cap_iops: self.b_cap_iops,
        };
        self.samples += 1;
        d
    }
}

/// Simulator policy parameters (`[policy] kind = "busy-rate-qos"`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosParams {
    /// Name of the tenant whose IOPS is guaranteed (A).
    pub guaranteed_tenant: String,
    /// Name of the tenant that is throttled (B).
    pub throttled_tenant: String,
    /// A's guarantee, IOPS; default: A's own `iops_schedule` / `iops_cap`.
    pub guaranteed_iops: Option<f64>,
    #[serde(default)]
    pub controller: BusyRateParams,
    /// A host IO scheduler between the tenants and device 0
    /// ([`crate::host_sched`]); none by default (every IO goes straight on).
    #[serde(default)]
    pub host_scheduler: Option<HostSchedulerParams>,
    /// Host page-cache write-back of the tenants' writes
    /// ([`crate::writeback`]); none by default. Not with `host_scheduler`.
    #[serde(default)]
    pub writeback: Option<WritebackParams>,
    /// Seconds from a sample's end until B's new cap takes effect; 0 (the
    /// default) applies it at once. The paper's controller read iostat's
    /// log and told B's load-control thread, which told its load threads:
    /// how long that took is not published. Below `sample_interval_s`.
    #[serde(default)]
    pub cap_delay_s: f64,
}

/// A's guarantee over time: (from time, IOPS), sorted; 0 before the first.
pub type IopsSchedule = Vec<(TimeNs, f64)>;

fn schedule_at(schedule: &[(TimeNs, f64)], t: TimeNs) -> f64 {
    let i = schedule.partition_point(|(from, _)| *from <= t);
    if i == 0 { 0.0 } else { schedule[i - 1].1 }
}

const SAMPLE_TIMER: u64 = 1;
/// The host scheduler's wake-up (the end of an idle wait).
const HOST_SCHED_TIMER: u64 = 2;

/// The write-back's periodic wake-up.
const WRITEBACK_TIMER: u64 = 3;
/// A delayed cap of B becoming effective (`with_cap_delay`).
const CAP_TIMER: u64 = 4;
/// `pending`'s host id of a write-back write (no host IO behind it).
const FLUSH_ID: u64 = u64::MAX;

/// An IO held by the host scheduler: its slot (the device tag) and what to send.
type HeldIo = (usize, DeviceIo, Option<BufRef>);

/// The controller as a simulator policy over device 0 (see the module docs).
pub struct BusyRateQos {
    controller: BusyRateController,
    guaranteed: u32,
    throttled: u32,
    guarantee: IopsSchedule,
    interval_ns: TimeNs,
    /// iostat's view of device 0 in the current window.
    in_flight: u64,
    busy_since_ns: TimeNs,
    io_ticks_ns: TimeNs,
    window_start_ns: TimeNs,
    completed: u64,
    completed_a: u64,
    completed_b: u64,
    arrivals: u64,
    timer_set: bool,
    /// Per in-flight IO (indexed by slot, the device tag): host id and tenant.
    pending: Vec<(u64, u32)>,
    free: Vec<usize>,
    /// The latest `DECISIONS_KEPT` decisions (a ring: a server runs for
    /// days, one sample a second); `samples` counts them all, and the
    /// latest lowering's inputs are kept apart for the counters.
    log: VecDeque<Decision>,
    samples: u64,
    last_lowered: Option<(f64, f64, f64)>,
    /// The host scheduler, if any (`with_host_scheduler`); IOs it holds
    /// count as in flight for `%util`, as Linux counts a request from its
    /// insertion into the elevator.
    host: Option<HostSched<HeldIo>>,
    /// Wake-up instants asked of the executor and not yet due.
    host_timers: Vec<TimeNs>,
    host_out: Vec<(u32, HeldIo)>,
    /// The scheduler queue of each IO (indexed by slot).
    host_queue_of: Vec<u32>,
    /// `queue_per = "thread"`: per tenant, its threads' queues with nothing
    /// outstanding, the most recently freed last; queues made so far.
    host_free_threads: Vec<Vec<u32>>,
    host_queues: u32,
    host_queue_per: QueuePer,
    /// Page-cache write-back, if any (`with_writeback`).
    wb: Option<Writeback>,
    wb_interval_ns: TimeNs,
    wb_timer_set: bool,
    wb_out: Vec<(u64, u32)>,
    /// `with_cap_delay`: how long a decided cap waits, and the caps
    /// decided but not yet effective (time due, IOPS), oldest first.
    cap_delay_ns: TimeNs,
    caps_due: std::collections::VecDeque<(TimeNs, f64)>,
}

impl BusyRateQos {
    /// `guarantee`: A's target over time (see [`IopsSchedule`]).
    pub fn new(
        params: BusyRateParams,
        guaranteed: u32,
        throttled: u32,
        guarantee: IopsSchedule,
    ) -> Result<BusyRateQos, ParamError> {
        if guaranteed == throttled {
            return Err(ParamError::new(
                "throttled_tenant",
                format!("tenant {throttled}, the guaranteed tenant"),
                "another tenant than `guaranteed_tenant`",
            ));
        }
        if guarantee.windows(2).any(|w| w[0].0 >= w[1].0) {
            let times: Vec<TimeNs> = guarantee.iter().map(|s| s.0).collect();
            return Err(ParamError::new(
                "guaranteed_iops",
                format!("a schedule at times {times:?} ns"),
                "increasing times",
            ));
        }
        if let Some((_, v)) = guarantee
            .iter()
            .find(|(_, v)| !(v.is_finite() && *v >= 0.0))
        {
            return Err(ParamError::new("guaranteed_iops", v, "a number >= 0"));
        }
        let interval_ns = params.sample_interval_ns().max(1);
        Ok(BusyRateQos {
            controller: BusyRateController::new(params)?,
            guaranteed,
            throttled,
            guarantee,
            interval_ns,
            in_flight: 0,
            busy_since_ns: 0,
            io_ticks_ns: 0,
            window_start_ns: 0,
            completed: 0,
            completed_a: 0,
            completed_b: 0,
            arrivals: 0,
            timer_set: false,
            pending: Vec::new(),
            free: Vec::new(),
            log: VecDeque::new(),
            samples: 0,
            last_lowered: None,
            host: None,
            host_timers: Vec::new(),
            host_out: Vec::new(),
            host_queue_of: Vec::new(),
            host_free_threads: Vec::new(),
            host_queues: 0,
            host_queue_per: QueuePer::Tenant,
            wb: None,
            wb_interval_ns: 1,
            wb_timer_set: false,
            wb_out: Vec::new(),
            cap_delay_ns: 0,
            caps_due: std::collections::VecDeque::new(),
        })
    }

    /// B's caps take effect `delay_s` after the sample that decided them
    /// (`QosParams::cap_delay_s`).
    pub fn with_cap_delay(mut self, delay_s: f64) -> Result<BusyRateQos, ParamError> {
        let interval_s = self.interval_ns as f64 / NS_PER_S as f64;
        if !(delay_s.is_finite() && delay_s >= 0.0 && delay_s < interval_s) {
            return Err(ParamError::new(
                "cap_delay_s",
                delay_s,
                format!("seconds >= 0 and below sample_interval_s ({interval_s})"),
            ));
        }
        self.cap_delay_ns = (delay_s * NS_PER_S as f64).round() as TimeNs;
        Ok(self)
    }

    /// Puts page-cache write-back between the tenants' writes and device 0.
    pub fn with_writeback(mut self, params: &WritebackParams) -> Result<BusyRateQos, ParamError> {
        if self.host.is_some() {
            return Err(ParamError::new(
                "writeback",
                "a write-back table next to `host_scheduler`",
                "one of the two: both together are not modelled",
            ));
        }
        self.wb = Some(Writeback::new(params).map_err(|e| e.within("writeback"))?);
        self.wb_interval_ns = params.interval_ns();
        Ok(self)
    }

    fn new_slot(&mut self, id: u64, tenant: u32) -> usize {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.pending.push((0, 0));
                self.pending.len() - 1
            }
        };
        self.pending[slot] = (id, tenant);
        slot
    }

    /// Sends the write-back writes due now (counted in flight, as iostat
    /// sees them) and keeps its timer going while anything is dirty.
    fn writeback_flush(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        let Some(wb) = self.wb.as_mut() else {
            return;
        };
        wb.next_flushes(now_ns, &mut self.wb_out);
        let busy = wb.busy();
        let flushes = std::mem::take(&mut self.wb_out);
        for &(offset_bytes, size_bytes) in &flushes {
            let slot = self.new_slot(FLUSH_ID, u32::MAX);
            if self.in_flight == 0 {
                self.busy_since_ns = now_ns;
            }
            self.in_flight += 1;
            out.device_ios.push((
                0,
                DeviceIo {
                    tag: slot as u64,
                    op: Op::Write,
                    offset_bytes,
                    size_bytes,
                },
            ));
        }
        self.wb_out = flushes;
        self.wb_out.clear();
        if busy && !self.wb_timer_set {
            self.wb_timer_set = true;
            let next = (now_ns / self.wb_interval_ns + 1) * self.wb_interval_ns;
            out.timers.push((next, WRITEBACK_TIMER));
        }
    }

    /// Puts a host IO scheduler between the tenants and device 0.
    pub fn with_host_scheduler(
        mut self,
        params: &HostSchedulerParams,
    ) -> Result<BusyRateQos, ParamError> {
        if self.wb.is_some() {
            return Err(ParamError::new(
                "host_scheduler",
                "a host scheduler next to `writeback`",
                "one of the two: both together are not modelled",
            ));
        }
        self.host = Some(HostSched::new(params).map_err(|e| e.within("host_scheduler"))?);
        self.host_queue_per = match params {
            HostSchedulerParams::Cfq(p) => p.queue_per,
            HostSchedulerParams::Fifo(_) => QueuePer::Tenant,
        };
        Ok(self)
    }

    /// The CFQ-like host scheduler's counters, if that is the one in use.
    pub fn host_scheduler_stats(&self) -> Option<CfqStats> {
        match &self.host {
            Some(HostSched::Cfq(h)) => Some(h.stats()),
            _ => None,
        }
    }

    fn send(out: &mut Outbox, slot: usize, io: DeviceIo, buf: Option<BufRef>) {
        out.device_ios.push((0, io));
        if let Some(buf) = buf {
            out.data_for(0, slot as u64, buf);
        }
    }

    /// Sends what the host scheduler releases now; asks for a wake-up if it idles.
    fn host_dispatch(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        let Some(host) = self.host.as_mut() else {
            return;
        };
        let wake = host.dispatch(now_ns, &mut self.host_out);
        for (_, (slot, io, buf)) in self.host_out.drain(..) {
            Self::send(out, slot, io, buf);
        }
        self.host_timers.retain(|&t| t > now_ns);
        if let Some(t) = wake
            && !self.host_timers.contains(&t)
        {
            self.host_timers.push(t);
            out.timers.push((t, HOST_SCHED_TIMER));
        }
    }

    /// The latest samples and decisions, oldest first: all of them up to
    /// `DECISIONS_KEPT` (about 200 bytes each), then the latest that many.
    pub fn decisions(&self) -> &VecDeque<Decision> {
        &self.log
    }

    pub fn controller(&self) -> &BusyRateController {
        &self.controller
    }

    fn set_timer(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        // Samples stay on multiples of the interval, idle gaps included.
        let next = (now_ns / self.interval_ns + 1) * self.interval_ns;
        self.window_start_ns = next - self.interval_ns;
        out.timers.push((next, SAMPLE_TIMER));
        self.timer_set = true;
    }
}

/// The names of the counters this policy reports (`Policy::counters`; the
/// docs define each): reports and experiments look values up by these
/// constants, so a renamed counter is a compile error, not a silent "-".
pub mod counter {
    pub const SAMPLES: &str = "samples";
    pub const SAMPLE_TIME_S: &str = "sample_time_s";
    pub const UTIL_PCT: &str = "util_pct";
    pub const IOPS: &str = "iops";
    pub const A_IOPS: &str = "a_iops";
    pub const B_IOPS: &str = "b_iops";
    pub const A_TARGET_IOPS: &str = "a_target_iops";
    pub const BUSY_PCT_PER_IOPS: &str = "busy_pct_per_iops";
    pub const SATURATED: &str = "saturated";
    pub const BPI_LEVEL: &str = "bpi_level";
    pub const BPI_DEVIATION: &str = "bpi_deviation";
    pub const SATURATED_IN_WINDOW: &str = "saturated_in_window";
    pub const SATURATED_SAMPLES_TOTAL: &str = "saturated_samples_total";
    pub const TARGET_BUSY_PCT: &str = "target_busy_pct";
    pub const EVENT: &str = "event";
    pub const EXTRA_CUT_IOPS: &str = "extra_cut_iops";
    pub const B_CAP_IOPS: &str = "b_cap_iops";
    pub const X_LOWERINGS: &str = "x_lowerings";
    pub const X_RESETS_LOW_UTIL: &str = "x_resets_low_util";
    pub const X_RESETS_BPI_CHANGE: &str = "x_resets_bpi_change";
    pub const LAST_LOWERING_C_BUSY_PCT_PER_IOPS: &str = "last_lowering_c_busy_pct_per_iops";
    pub const LAST_LOWERING_D_BUSY_PCT_PER_IOPS: &str = "last_lowering_d_busy_pct_per_iops";
    pub const LAST_LOWERING_C_TOTAL_IOPS: &str = "last_lowering_c_total_iops";
    // Only with a host scheduler (`host_*`) or write-back (`wb_*`).
    pub const HOST_SLICES: &str = "host_slices";
    pub const HOST_SLICES_EXPIRED: &str = "host_slices_expired";
    pub const HOST_IDLE_WAITS: &str = "host_idle_waits";
    pub const HOST_IDLE_TIMEOUTS: &str = "host_idle_timeouts";
    pub const HOST_WAITING_IOS: &str = "host_waiting_ios";
    pub const WB_DIRTY_BYTES: &str = "wb_dirty_bytes";
    pub const WB_IN_FLIGHT: &str = "wb_in_flight";
    pub const WB_ABSORBED: &str = "wb_absorbed";
    pub const WB_PASSED_THROUGH: &str = "wb_passed_through";
    pub const WB_FLUSHED: &str = "wb_flushed";
    pub const WB_PERIODIC_PASSES: &str = "wb_periodic_passes";

    /// Every name above, in the order `counters()` reports them.
    pub const ALL: &[&str] = &[
        SAMPLES,
        SAMPLE_TIME_S,
        UTIL_PCT,
        IOPS,
        A_IOPS,
        B_IOPS,
        A_TARGET_IOPS,
        BUSY_PCT_PER_IOPS,
        SATURATED,
        BPI_LEVEL,
        BPI_DEVIATION,
        SATURATED_IN_WINDOW,
        SATURATED_SAMPLES_TOTAL,
        TARGET_BUSY_PCT,
        EVENT,
        EXTRA_CUT_IOPS,
        B_CAP_IOPS,
        X_LOWERINGS,
        X_RESETS_LOW_UTIL,
        X_RESETS_BPI_CHANGE,
        LAST_LOWERING_C_BUSY_PCT_PER_IOPS,
        LAST_LOWERING_D_BUSY_PCT_PER_IOPS,
        LAST_LOWERING_C_TOTAL_IOPS,
        HOST_SLICES,
        HOST_SLICES_EXPIRED,
        HOST_IDLE_WAITS,
        HOST_IDLE_TIMEOUTS,
        HOST_WAITING_IOS,
        WB_DIRTY_BYTES,
        WB_IN_FLIGHT,
        WB_ABSORBED,
        WB_PASSED_THROUGH,
        WB_FLUSHED,
        WB_PERIODIC_PASSES,
    ];
}

impl Policy for BusyRateQos {
    fn name(&self) -> &str {
        "busy-rate-qos"
    }

    fn tier_names(&self) -> Vec<String> {
        vec!["device".into()]
    }

    fn on_host_io(&mut self, now_ns: TimeNs, io: HostIo, out: &mut Outbox) {
        if !self.timer_set {
            self.set_timer(now_ns, out);
        }
        if io.op == Op::Write
            && let Some(wb) = self.wb.as_mut()
            && wb.absorb(now_ns, io.offset_bytes, io.size_bytes)
        {
            // Copied into the page cache: done for the tenant, unseen by
            // iostat until written back.
            self.arrivals += 1;
            if io.tenant == self.guaranteed {
                self.completed_a += 1;
            } else if io.tenant == self.throttled {
                self.completed_b += 1;
            }
            out.complete.push((io.id, 0));
            self.writeback_flush(now_ns, out);
            return;
        }
        let slot = self.new_slot(io.id, io.tenant);
        if self.in_flight == 0 {
            self.busy_since_ns = now_ns;
        }
        self.in_flight += 1;
        self.arrivals += 1;
        let device_io = DeviceIo {
            tag: slot as u64,
            op: io.op,
            offset_bytes: io.offset_bytes,
            size_bytes: io.size_bytes,
        };
        // A pass-through: the host buffer is the device IO's buffer (trims
        // and flushes carry no data).
        let buf = matches!(io.op, Op::Read | Op::Write).then_some(BufRef::Host {
            host_id: io.id,
            offset_bytes: 0,
        });
        match self.host.as_mut() {
            None => Self::send(out, slot, device_io, buf),
            Some(host) => {
                let queue = match self.host_queue_per {
                    QueuePer::Tenant => io.tenant,
                    QueuePer::Thread => {
                        let t = io.tenant as usize;
                        if self.host_free_threads.len() <= t {
                            self.host_free_threads.resize(t + 1, Vec::new());
                        }
                        self.host_free_threads[t].pop().unwrap_or_else(|| {
                            self.host_queues += 1;
                            self.host_queues - 1
                        })
                    }
                };
                if self.host_queue_of.len() <= slot {
                    self.host_queue_of.resize(slot + 1, 0);
                }
                self.host_queue_of[slot] = queue;
                host.enqueue(queue, (slot, device_io, buf));
                self.host_dispatch(now_ns, out);
            }
        }
        debug_assert_eq!(
            self.in_flight as usize,
            self.pending.len() - self.free.len()
        );
    }

    /// Nothing in flight (a pass-through holds no data of its own; the
    /// default `locate`, device 0 at the same offset, is exact).
    fn is_drained(&self) -> bool {
        self.in_flight == 0 && self.wb.as_ref().is_none_or(|w| !w.busy())
    }

    /// Runs in the real executor (`tierlab run`): B's cap is tierlab's own
    /// per-tenant token bucket, `%util` the policy's own busy time.
    fn moves_data(&self) -> bool {
        // Write-back writes carry no host buffer: simulation only.
        self.wb.is_none()
    }

    fn on_device_completion(&mut self, now_ns: TimeNs, _device: usize, tag: u64, out: &mut Outbox) {
        let slot = tag as usize;
        let (id, tenant) = self.pending[slot];
        self.free.push(slot);
        self.in_flight -= 1;
        debug_assert_eq!(
            self.in_flight as usize,
            self.pending.len() - self.free.len()
        );
        if self.in_flight == 0 {
            self.io_ticks_ns += now_ns - self.busy_since_ns;
        }
        self.completed += 1;
        if id == FLUSH_ID {
            if let Some(wb) = self.wb.as_mut() {
                wb.flushed();
            }
            self.writeback_flush(now_ns, out);
            return;
        }
        if tenant == self.guaranteed {
            self.completed_a += 1;
        } else if tenant == self.throttled {
            self.completed_b += 1;
        }
        out.complete.push((id, 0));
        if let Some(host) = self.host.as_mut() {
            let queue = self.host_queue_of[slot];
            host.completed(queue);
            if self.host_queue_per == QueuePer::Thread {
                self.host_free_threads[tenant as usize].push(queue);
            }
            self.host_dispatch(now_ns, out);
        }
    }

    fn on_timer(&mut self, now_ns: TimeNs, timer_id: u64, out: &mut Outbox) {
        if timer_id == HOST_SCHED_TIMER {
            self.host_dispatch(now_ns, out);
            return;
        }
        if timer_id == CAP_TIMER {
            while let Some(&(due, iops)) = self.caps_due.front()
                && due <= now_ns
            {
                self.caps_due.pop_front();
                out.actions.push(Action::CapTenant {
                    tenant: self.throttled,
                    iops: Some(iops),
                });
            }
            return;
        }
        if timer_id == WRITEBACK_TIMER {
            self.wb_timer_set = false;
            if let Some(wb) = self.wb.as_mut() {
                wb.tick(now_ns);
            }
            self.writeback_flush(now_ns, out);
            return;
        }
        if timer_id != SAMPLE_TIMER {
            return;
        }
        if self.in_flight > 0 {
            // Close the busy span at the sample, as a diskstats read does.
            self.io_ticks_ns += now_ns - self.busy_since_ns;
            self.busy_since_ns = now_ns;
        }
        let duration_ns = now_ns.saturating_sub(self.window_start_ns).max(1);
        let duration_s = duration_ns as f64 / NS_PER_S as f64;
        let input = SampleInput {
            time_ns: now_ns,
            util_pct: 100.0 * self.io_ticks_ns as f64 / duration_ns as f64,
            total_iops: self.completed as f64 / duration_s,
            a_iops: self.completed_a as f64 / duration_s,
            b_iops: self.completed_b as f64 / duration_s,
            a_target_iops: schedule_at(&self.guarantee, now_ns),
        };
        let active = self.in_flight > 0 || self.completed > 0 || self.arrivals > 0;
        let decision = self.controller.step(input);
        if let Some(cap) = decision.b_cap_iops {
            if self.cap_delay_ns == 0 {
                out.actions.push(Action::CapTenant {
                    tenant: self.throttled,
                    iops: Some(cap),
                });
            } else {
                let due = now_ns + self.cap_delay_ns;
                self.caps_due.push_back((due, cap));
                out.timers.push((due, CAP_TIMER));
            }
        }
        // The delay is below the interval: a cap is due before the next
        // sample decides another.
        debug_assert!(self.caps_due.len() <= 1, "{:?}", self.caps_due);
        if let Event::Lowered {
            c_busy_pct_per_iops,
            d_busy_pct_per_iops,
            c_total_iops,
        } = decision.event
        {
            self.last_lowered = Some((c_busy_pct_per_iops, d_busy_pct_per_iops, c_total_iops));
        }
        if self.log.len() == DECISIONS_KEPT {
            self.log.pop_front();
        }
        self.log.push_back(decision);
        self.samples += 1;
        debug_assert!(self.log.len() <= DECISIONS_KEPT);
        self.io_ticks_ns = 0;
        self.completed = 0;
        self.completed_a = 0;
        self.completed_b = 0;
        self.arrivals = 0;
        self.window_start_ns = now_ns;
        if active {
            out.timers.push((now_ns + self.interval_ns, SAMPLE_TIMER));
        } else {
            // Idle: no timer keeps the run alive; the next IO sets one.
            self.timer_set = false;
        }
    }

    /// The latest decision (sample_index identifies it) and running totals;
    /// docs/qos.md defines each.
    fn counters(&self) -> Vec<(&'static str, f64)> {
        let last = self.log.back();
        let get = |f: &dyn Fn(&Decision) -> f64| last.map_or(0.0, f);
        let (c, d, big_c) = self.last_lowered.unwrap_or((0.0, 0.0, 0.0));
        let mut counters = vec![
            (counter::SAMPLES, self.samples as f64),
            (
                counter::SAMPLE_TIME_S,
                get(&|d| d.input.time_ns as f64 / NS_PER_S as f64),
            ),
            (counter::UTIL_PCT, get(&|d| d.util_pct)),
            (counter::IOPS, get(&|d| d.input.total_iops)),
            (counter::A_IOPS, get(&|d| d.input.a_iops)),
            (counter::B_IOPS, get(&|d| d.input.b_iops)),
            (counter::A_TARGET_IOPS, get(&|d| d.input.a_target_iops)),
            (
                counter::BUSY_PCT_PER_IOPS,
                get(&|d| d.busy_pct_per_iops.unwrap_or(0.0)),
            ),
            (counter::SATURATED, get(&|d| d.saturated as u8 as f64)),
            (counter::BPI_LEVEL, get(&|d| d.bpi_level.unwrap_or(0.0))),
            (
                counter::BPI_DEVIATION,
                get(&|d| d.bpi_deviation.unwrap_or(0.0)),
            ),
            (
                counter::SATURATED_IN_WINDOW,
                get(&|d| d.saturated_in_window as f64),
            ),
            (
                counter::SATURATED_SAMPLES_TOTAL,
                self.controller.saturated_total() as f64,
            ),
            (counter::TARGET_BUSY_PCT, self.controller.target_busy_pct()),
            (counter::EVENT, get(&|d| d.event.code() as f64)),
            (counter::EXTRA_CUT_IOPS, get(&|d| d.extra_cut_iops)),
            (
                counter::B_CAP_IOPS,
                self.controller.b_cap_iops().unwrap_or(0.0),
            ),
            (counter::X_LOWERINGS, self.controller.lowerings() as f64),
            (
                counter::X_RESETS_LOW_UTIL,
                self.controller.resets_low_util() as f64,
            ),
            (
                counter::X_RESETS_BPI_CHANGE,
                self.controller.resets_bpi_change() as f64,
            ),
            (counter::LAST_LOWERING_C_BUSY_PCT_PER_IOPS, c),
            (counter::LAST_LOWERING_D_BUSY_PCT_PER_IOPS, d),
            (counter::LAST_LOWERING_C_TOTAL_IOPS, big_c),
        ];
        // Only with a host scheduler, so runs without one keep their columns.
        // The FIFO has no slices or idling: only what it holds.
        if let Some(HostSched::Cfq(h)) = &self.host {
            let s = h.stats();
            counters.extend([
                (counter::HOST_SLICES, s.slices as f64),
                (counter::HOST_SLICES_EXPIRED, s.slices_expired as f64),
                (counter::HOST_IDLE_WAITS, s.idle_waits as f64),
                (counter::HOST_IDLE_TIMEOUTS, s.idle_timeouts as f64),
            ]);
        }
        if let Some(h) = &self.host {
            counters.push((counter::HOST_WAITING_IOS, h.waiting() as f64));
        }
        if let Some(w) = &self.wb {
            let s = w.stats();
            counters.extend([
                (counter::WB_DIRTY_BYTES, w.dirty_bytes() as f64),
                (counter::WB_IN_FLIGHT, f64::from(w.in_flight())),
                (counter::WB_ABSORBED, s.absorbed as f64),
                (counter::WB_PASSED_THROUGH, s.passed_through as f64),
                (counter::WB_FLUSHED, s.flushed as f64),
                (counter::WB_PERIODIC_PASSES, s.periodic_passes as f64),
            ]);
        }
        counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierlab_core::Op;

    fn ctl() -> BusyRateController {
        BusyRateController::new(BusyRateParams::default()).unwrap()
    }

    /// A sample with A and B's split irrelevant to the control law.
    fn s(util_pct: f64, total_iops: f64, a_target_iops: f64) -> SampleInput {
        SampleInput {
            time_ns: 0,
            util_pct,
            total_iops,
            a_iops: 0.0,
            b_iops: 0.0,
            a_target_iops,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn control_law_by_hand() {
        let mut c = ctl();
        // busy_pct_per_iops = 50/100 = 0.5; a_busy = 40·0.5 = 20;
        // b_busy = 95 − 20 = 75; b = 75/0.5 = 150.
        let d = c.step(s(50.0, 100.0, 40.0));
        assert!(close(d.busy_pct_per_iops.unwrap(), 0.5));
        assert!(close(d.b_cap_iops.unwrap(), 150.0), "{d:?}");
        assert_eq!(
            (d.event, d.saturated, d.target_busy_pct),
            (Event::None, false, 95.0)
        );
        // Saturated: 100/200 = 0.5; b = (95 − 50·0.5)/0.5 − 0.2·200 = 140 − 40 = 100.
        let d = c.step(s(100.0, 200.0, 50.0));
        assert!(d.saturated);
        assert!(
            close(d.extra_cut_iops, 40.0) && close(d.b_cap_iops.unwrap(), 100.0),
            "{d:?}"
        );
        // A guarantee beyond X: B gets the floor, never 0 or negative.
        let d = c.step(s(50.0, 100.0, 1000.0));
        assert_eq!(d.b_cap_iops, Some(1.0));
        // No IO: busy_pct_per_iops undefined, B's cap held.
        let d = c.step(s(0.0, 0.0, 50.0));
        assert_eq!(
            (d.event, d.busy_pct_per_iops, d.b_cap_iops),
            (Event::Hold, None, Some(1.0))
        );
    }

    #[test]
    fn saturation_is_what_iostat_prints_as_100() {
        let mut c = ctl();
        assert!(c.step(s(99.996, 100.0, 0.0)).saturated, "prints as 100.00");
        assert!(!c.step(s(99.994, 100.0, 0.0)).saturated, "prints as 99.99");
        assert!(c.step(s(100.7, 100.0, 0.0)).saturated, "clamped to 100");
        assert_eq!(c.saturated_total(), 2);
    }

    /// The paper's evaluation 2 structure: saturation → B cut → X 95 → 87.
    #[test]
    fn lowering_after_three_of_ten_saturated_samples_by_hand() {
        let mut c = ctl();
        // Point-1 samples: 100 % at C = 200 IOPS, c = 0.5; in between, the
        // extra cut gets util down to 90 % (not armed yet: not point 2).
        for (i, (u, t)) in [(100.0, 200.0), (90.0, 200.0), (100.0, 200.0), (92.0, 200.0)]
            .into_iter()
            .enumerate()
        {
            let d = c.step(s(u, t, 100.0));
            assert_eq!(d.event, Event::None, "sample {i}: {d:?}");
            assert_eq!(d.target_busy_pct, 95.0);
        }
        let d = c.step(s(100.0, 200.0, 100.0));
        assert_eq!(
            (d.event, d.saturated_in_window, d.armed),
            (Event::Armed, 3, true)
        );
        // Point 2: 84 % at 200 IOPS, d = 0.42. x = (0.5 − 0.42)·200·0.5 = 8.
        let d = c.step(s(84.0, 200.0, 100.0));
        match d.event {
            Event::Lowered {
                c_busy_pct_per_iops,
                d_busy_pct_per_iops,
                c_total_iops,
            } => {
                assert!(close(c_busy_pct_per_iops, 0.5) && close(d_busy_pct_per_iops, 0.42));
                assert_eq!(c_total_iops, 200.0);
            }
            e => panic!("expected a lowering, got {e:?}"),
        }
        assert!(close(d.target_busy_pct, 87.0), "{d:?}");
        // The new X applies at once: b = (87 − 100·0.42)/0.42.
        assert!(close(d.b_cap_iops.unwrap(), (87.0 - 42.0) / 0.42));
        assert_eq!(
            (d.saturated_in_window, d.armed, c.lowerings()),
            (0, false, 1)
        );

        // Repeat: three fresh saturated samples needed; then c = 100/250 = 0.4,
        // d = 70/200 = 0.35, x = 0.05·250·0.5 = 6.25 → X = 80.75.
        for _ in 0..2 {
            assert_eq!(c.step(s(100.0, 250.0, 100.0)).event, Event::None);
        }
        assert_eq!(c.step(s(100.0, 250.0, 100.0)).event, Event::Armed);
        let d = c.step(s(70.0, 200.0, 100.0));
        assert!(matches!(d.event, Event::Lowered { .. }));
        assert!(close(d.target_busy_pct, 87.0 - 6.25), "{d:?}");
    }

    #[test]
    fn the_window_is_ten_samples() {
        let mut c = ctl();
        // Two saturated samples, then nine calm ones: the first falls out of
        // the window, so a third saturated sample does not arm.
        c.step(s(100.0, 200.0, 0.0));
        c.step(s(100.0, 200.0, 0.0));
        for _ in 0..8 {
            c.step(s(80.0, 200.0, 0.0));
        }
        let d = c.step(s(100.0, 200.0, 0.0));
        assert_eq!((d.saturated_in_window, d.event), (2, Event::None));
        // Window [8 calm, S, S]: still 2; one more makes 3.
        assert_eq!(c.step(s(100.0, 200.0, 0.0)).saturated_in_window, 2);
        assert_eq!(c.step(s(100.0, 200.0, 0.0)).event, Event::Armed);
    }

    /// Evaluation 1's alternation (saturated, cut, saturated, ...) under
    /// both readings of "3 of the past 10": saturated samples at 0–2 and
    /// at every other sample from 10; unsaturated ones at 90 % (d = 0.45
    /// against c = 0.5, so each lowering takes (0.5 − 0.45)·200·0.5 = 5).
    #[test]
    fn a_full_window_spaces_the_lowerings_by_the_window() {
        let lowerings = |full: bool| -> Vec<(usize, f64)> {
            let mut c = BusyRateController::new(BusyRateParams {
                lowering_needs_full_window: full,
                ..BusyRateParams::default()
            })
            .unwrap();
            let mut out = Vec::new();
            for i in 0..20 {
                let saturated = i < 3 || (i >= 10 && i % 2 == 0);
                let d = c.step(s(if saturated { 100.0 } else { 90.0 }, 200.0, 0.0));
                if full && i < 9 {
                    // Never armed before the window holds 10 samples.
                    assert!(!d.armed && d.event == Event::None, "sample {i}: {d:?}");
                }
                if matches!(d.event, Event::Lowered { .. }) {
                    assert_eq!(d.saturated_in_window, 0, "sample {i}: window cleared");
                    out.push((i, d.target_busy_pct));
                }
            }
            out
        };
        // As soon as 3 are saturated: armed at 2, lowered at 3 (the first
        // unsaturated sample); fresh ones at 10, 12, 14 arm again, 15 lowers.
        assert_eq!(lowerings(false), vec![(3, 90.0), (15, 85.0)]);
        // A full window first: the window fills at sample 9, which is
        // unsaturated, so it arms and is point 2 at once; the next full
        // window of fresh samples ends at 19. Lowerings a window apart.
        assert_eq!(lowerings(true), vec![(9, 90.0), (19, 85.0)]);
    }

    /// Random samples, hung-device ones included (100 % with no IO done),
    /// under both readings: the step's debug assertions hold (tests run
    /// with them), and with a full window a lowering comes a whole window
    /// after the last lowering or reset at least.
    #[test]
    fn random_samples_keep_the_invariants() {
        for full in [false, true] {
            let p = BusyRateParams {
                lowering_needs_full_window: full,
                ..BusyRateParams::default()
            };
            let mut c = BusyRateController::new(p.clone()).unwrap();
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut next = || {
                // xorshift64: deterministic, no dependency.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut last_clear: Option<u64> = None;
            let (mut lowerings, mut armed) = (0, 0);
            for i in 0..20_000u64 {
                let r = next();
                let util = match r % 4 {
                    0 | 1 => 100.0,
                    2 => 50.0 + (r >> 8) as f64 % 50.0,
                    _ => (r >> 8) as f64 % 100.0,
                };
                let iops = if r % 17 == 0 {
                    0.0
                } else {
                    50.0 + (r >> 20) as f64 % 200.0
                };
                let d = c.step(s(util, iops, 50.0));
                armed += u32::from(d.event == Event::Armed);
                match d.event {
                    Event::Lowered { .. } => {
                        lowerings += 1;
                        if let (true, Some(k)) = (full, last_clear) {
                            let gap = i - k;
                            assert!(gap >= u64::from(p.saturation_window_samples), "{k} → {i}");
                        }
                        last_clear = Some(i);
                    }
                    Event::ResetLowUtil | Event::ResetBpiChange { .. } => last_clear = Some(i),
                    _ => {}
                }
            }
            // Not vacuous: the random walk arms and lowers many times.
            assert!(
                armed > 10 && lowerings > 10,
                "full {full}: {armed} armed, {lowerings} lowered"
            );
        }
    }

    /// Saturated samples with no IO done (a hung device) have no busy time
    /// per IO, so they cannot be point 1: a full window of them and calm
    /// samples does not arm, nor does a point 1 that has left the window.
    #[test]
    fn a_full_window_needs_its_point_one_inside() {
        let mut c = BusyRateController::new(BusyRateParams {
            lowering_needs_full_window: true,
            ..BusyRateParams::default()
        })
        .unwrap();
        // A saturated sample with IO (a point 1), then calm ones until it
        // has left the window.
        c.step(s(100.0, 200.0, 0.0));
        for _ in 0..10 {
            c.step(s(80.0, 200.0, 0.0));
        }
        // Three hung samples and calm ones: 3 of 10 saturated, window full.
        for _ in 0..3 {
            c.step(s(100.0, 0.0, 0.0));
        }
        for i in 0..7 {
            let d = c.step(s(80.0, 200.0, 0.0));
            assert!(!d.armed && d.event == Event::None, "calm sample {i}: {d:?}");
        }
        // One saturated sample with IO: a point 1 inside, 4 of 10 saturated;
        // the window is full, so it arms, and the next calm sample lowers.
        assert_eq!(c.step(s(100.0, 200.0, 0.0)).event, Event::Armed);
        assert!(matches!(
            c.step(s(80.0, 200.0, 0.0)).event,
            Event::Lowered { .. }
        ));
    }

    #[test]
    fn point_two_needs_a_lower_busy_per_iops() {
        let mut c = ctl();
        for _ in 0..3 {
            c.step(s(100.0, 200.0, 0.0));
        }
        // d = 99/180 = 0.55 > c = 0.5: no lowering, still armed.
        let d = c.step(s(99.0, 180.0, 0.0));
        assert_eq!(
            (d.event, d.armed, d.target_busy_pct),
            (Event::None, true, 95.0)
        );
        // Below reset_util_pct: not point 2, and a reset disarms.
        let d = c.step(s(10.0, 200.0, 0.0));
        assert!(!d.armed && d.target_busy_pct == 95.0);
        for _ in 0..3 {
            c.step(s(100.0, 200.0, 0.0));
        }
        // The latest saturated sample is point 1: C = 250, c = 0.4; d = 0.3.
        c.step(s(100.0, 250.0, 0.0));
        let d = c.step(s(60.0, 200.0, 0.0));
        assert!(close(d.target_busy_pct, 95.0 - 0.1 * 250.0 * 0.5), "{d:?}");
    }

    #[test]
    fn reset_when_util_falls_below_twenty_percent() {
        let mut c = ctl();
        for _ in 0..3 {
            c.step(s(100.0, 200.0, 0.0));
        }
        c.step(s(84.0, 200.0, 0.0));
        assert!(close(c.target_busy_pct(), 87.0));
        let d = c.step(s(20.0, 50.0, 0.0));
        assert_eq!(d.event, Event::None, "20 % is not below 20 %");
        let d = c.step(s(19.9, 50.0, 0.0));
        assert_eq!((d.event, d.target_busy_pct), (Event::ResetLowUtil, 95.0));
        assert_eq!(c.resets_low_util(), 1);
        // Already at the initial X: nothing to reset, no event.
        assert_eq!(c.step(s(5.0, 10.0, 0.0)).event, Event::None);
    }

    /// A controller with `reset_bpi_change = rule`, X lowered 95 → 63
    /// (C = 100, c = 1.0, d = 0.36: x = 0.64·100·0.5 = 32).
    fn lowered_to_63(rule: f64) -> BusyRateController {
        let mut c = BusyRateController::new(BusyRateParams {
            reset_bpi_change: rule,
            ..BusyRateParams::default()
        })
        .unwrap();
        for _ in 0..3 {
            c.step(s(100.0, 100.0, 50.0));
        }
        let d = c.step(s(36.0, 100.0, 50.0));
        assert!(close(d.target_busy_pct, 63.0), "{d:?}");
        c
    }

    /// The paper's evaluation 1 after A's target fell: X stuck at 63 % with
    /// `%util` near 50 %, busy_pct_per_iops 0.8 → 1.3. The rule resets X
    /// once the new level is held for two samples; without it
    /// (reset_bpi_change = 0, the paper's code) X stays.
    #[test]
    fn reset_on_a_sharp_change_of_busy_per_iops() {
        for (rule, want_x) in [(0.1, 95.0), (0.5, 95.0), (0.0, 63.0)] {
            let mut c = lowered_to_63(rule);
            // Right after the new X nothing is compared for a window of 10
            // samples (the 9 after the lowering and this side of it), even
            // a jump to 1.3 held twice.
            for i in 0..9 {
                let bpi = if i < 2 { (52.0, 40.0) } else { (50.0, 62.5) };
                let d = c.step(s(bpi.0, bpi.1, 50.0));
                assert_eq!((d.event, d.bpi_level), (Event::None, None), "{i}: {d:?}");
            }
            // Settled: three samples at 0.8 make the level ...
            for _ in 0..3 {
                let d = c.step(s(50.0, 62.5, 50.0));
                assert_eq!((d.event, d.bpi_level), (Event::None, None));
            }
            let d = c.step(s(50.0, 62.5, 50.0));
            if rule > 0.0 {
                assert!(close(d.bpi_level.unwrap(), 0.8) && close(d.bpi_deviation.unwrap(), 0.0));
            }
            // ... A's target drops: 52 % at 40 IOPS = 1.3; 1.3/0.8 − 1 = 0.625.
            // One sample is a spike, the second a new level.
            let d = c.step(s(52.0, 40.0, 5.0));
            assert_eq!((d.event, d.target_busy_pct), (Event::None, 63.0));
            if rule > 0.0 {
                assert!(close(d.bpi_deviation.unwrap(), 0.625), "{d:?}");
            }
            let d = c.step(s(52.0, 40.0, 5.0));
            assert!(close(d.target_busy_pct, want_x), "rule {rule}: {d:?}");
            if rule > 0.0 {
                assert!(matches!(
                    d.event,
                    Event::ResetBpiChange { level_busy_pct_per_iops } if close(level_busy_pct_per_iops, 0.8)
                ));
                assert_eq!(c.resets_bpi_change(), 1);
            } else {
                assert_eq!(d.bpi_level, None, "rule off: nothing compared");
            }
        }
    }

    /// Settles a controller lowered to 63 % at a level of 0.8 (4 samples).
    fn settled_at_0_8(rule: f64) -> BusyRateController {
        let mut c = lowered_to_63(rule);
        for _ in 0..13 {
            c.step(s(50.0, 62.5, 50.0));
        }
        let d = c.step(s(50.0, 62.5, 50.0));
        assert!(close(d.bpi_level.unwrap(), 0.8), "{d:?}");
        c
    }

    /// A +25 % level shift held two samples resets at the default 0.1;
    /// at 0.5 (the one-sample rule's threshold) it does not.
    #[test]
    fn a_held_shift_of_25_percent_resets() {
        let mut c = settled_at_0_8(BusyRateParams::default().reset_bpi_change);
        // 50 % at 50 IOPS = 1.0: +25 %.
        let d = c.step(s(50.0, 50.0, 5.0));
        assert_eq!(d.event, Event::None);
        assert!(close(d.bpi_deviation.unwrap(), 0.25), "{d:?}");
        let d = c.step(s(50.0, 50.0, 5.0));
        assert!(matches!(d.event, Event::ResetBpiChange { .. }), "{d:?}");
        assert_eq!(d.target_busy_pct, 95.0);
        // A new X: nothing compared until it has settled.
        assert_eq!(c.step(s(50.0, 50.0, 5.0)).bpi_level, None);

        let mut c = settled_at_0_8(0.5);
        for _ in 0..5 {
            let d = c.step(s(50.0, 50.0, 5.0));
            assert_eq!((d.event, d.target_busy_pct), (Event::None, 63.0));
        }
        // At the initial X a held shift has nothing to reset: the level
        // starts over (no event), three samples later it is the new one.
        let mut c = ctl();
        for _ in 0..13 {
            c.step(s(50.0, 62.5, 50.0));
        }
        assert_eq!(c.step(s(50.0, 50.0, 5.0)).event, Event::None);
        let d = c.step(s(50.0, 50.0, 5.0));
        assert_eq!(
            (d.event, d.target_busy_pct, c.resets_bpi_change()),
            (Event::None, 95.0, 0)
        );
        for _ in 0..3 {
            assert_eq!(c.step(s(50.0, 50.0, 5.0)).bpi_level, None);
        }
        assert!(close(c.step(s(50.0, 50.0, 5.0)).bpi_level.unwrap(), 1.0));
    }

    /// One sample off the level is a spike; swings in alternating
    /// directions are noise: neither resets, and both count towards the level.
    #[test]
    fn spikes_and_alternating_swings_do_not_reset() {
        let mut c = settled_at_0_8(0.1);
        // Level 0.8 from 4 samples (the 5th, checked above, is in it too:
        // 5 × 0.8). A spike to 1.0 (+25 %), then back.
        assert!(close(
            c.step(s(50.0, 50.0, 50.0)).bpi_deviation.unwrap(),
            0.25
        ));
        let d = c.step(s(50.0, 62.5, 50.0));
        assert_eq!((d.event, d.target_busy_pct), (Event::None, 63.0));
        assert!(
            close(d.bpi_level.unwrap(), 0.8),
            "the spike is not in the level yet"
        );
        // Now it is: (5·0.8 + 1.0 + 0.8) / 7 = 5.8 / 7.
        let level = 5.8 / 7.0;
        let d = c.step(s(49.0, 70.0, 50.0)); // 0.7: −(level/0.7 − 1) ≈ −18 %
        assert!(close(d.bpi_level.unwrap(), level), "{d:?}");
        assert!(close(d.bpi_deviation.unwrap(), -(level / 0.7 - 1.0)));
        // +20.7 % the other way: a swing, not a level (0.7 folded in).
        let d = c.step(s(50.0, 50.0, 50.0));
        assert!(
            d.bpi_deviation.unwrap() > 0.1 && d.event == Event::None,
            "{d:?}"
        );
        let level = (5.8 + 0.7) / 8.0;
        let d = c.step(s(49.0, 70.0, 50.0));
        assert!(close(d.bpi_level.unwrap(), level), "{d:?}");
        assert_eq!((d.event, d.target_busy_pct), (Event::None, 63.0));
        // A sample not compared (no IO) breaks a run: off, hold, off → no
        // reset (the 0.7 just above is off by −16 % already).
        assert_eq!(c.step(s(30.0, 0.0, 50.0)).event, Event::Hold);
        let d = c.step(s(49.0, 70.0, 50.0));
        assert!(d.bpi_deviation.unwrap() < -0.1, "{d:?}");
        assert_eq!((d.event, d.target_busy_pct), (Event::None, 63.0));
    }

    /// Swings around saturation and lowerings are the controller's own
    /// doing: a saturated sample drops the level, and nothing is compared
    /// until the window holds no saturated sample and no change of X.
    #[test]
    fn swings_around_saturation_do_not_reset() {
        let mut c = settled_at_0_8(0.1);
        // Two saturated samples (1.25; not enough to arm), then swings of
        // ±40 % held for several samples.
        for _ in 0..2 {
            let d = c.step(s(100.0, 80.0, 50.0));
            assert_eq!((d.event, d.bpi_level), (Event::None, None));
        }
        for (k, (u, t)) in [(50.0, 100.0), (50.0, 100.0), (55.0, 50.0), (55.0, 50.0)]
            .into_iter()
            .cycle()
            .take(9)
            .enumerate()
        {
            let d = c.step(s(u, t, 50.0));
            assert_eq!(
                (d.event, d.bpi_level, d.target_busy_pct),
                (Event::None, None, 63.0),
                "{k}"
            );
        }
        // Window clear again: a new level from the next three samples.
        for _ in 0..3 {
            assert_eq!(c.step(s(50.0, 50.0, 50.0)).bpi_level, None);
        }
        assert!(close(c.step(s(50.0, 50.0, 50.0)).bpi_level.unwrap(), 1.0));
        // Arming and lowering in between: the lowering's own jump
        // (saturated 1.25 → point 2 at 0.5) is not compared either.
        for _ in 0..3 {
            c.step(s(100.0, 80.0, 50.0));
        }
        let d = c.step(s(50.0, 100.0, 50.0));
        assert!(matches!(d.event, Event::Lowered { .. }), "{d:?}");
        let d = c.step(s(50.0, 100.0, 50.0));
        assert_eq!((d.event, d.bpi_level), (Event::None, None));
        assert_eq!(c.resets_bpi_change(), 0);
    }

    #[test]
    fn bad_params_name_the_key() {
        for (p, key) in [
            (
                BusyRateParams {
                    lowering_gain: 0.0,
                    ..Default::default()
                },
                "lowering_gain",
            ),
            (
                BusyRateParams {
                    sample_interval_s: f64::NAN,
                    ..Default::default()
                },
                "sample_interval_s",
            ),
            (
                BusyRateParams {
                    saturation_trigger_samples: 11,
                    ..Default::default()
                },
                "saturation_trigger_samples",
            ),
            (
                BusyRateParams {
                    min_target_busy_pct: 96.0,
                    ..Default::default()
                },
                "min_target_busy_pct",
            ),
            (
                BusyRateParams {
                    reset_util_pct: 100.0,
                    ..Default::default()
                },
                "reset_util_pct",
            ),
        ] {
            let e = BusyRateController::new(p).unwrap_err();
            assert_eq!(e.key(), key, "{e}");
        }
    }

    fn host(id: u64, tenant: u32) -> HostIo {
        HostIo {
            id,
            op: Op::Read,
            offset_bytes: 0,
            size_bytes: 4096,
            tenant,
        }
    }

    /// A server samples for days: the decisions kept stay at
    /// `DECISIONS_KEPT`, the counters still count every sample.
    #[test]
    fn the_decision_log_is_a_bounded_ring() {
        let params = BusyRateParams {
            sample_interval_s: 0.001,
            ..Default::default()
        };
        let mut p = BusyRateQos::new(params, 0, 1, vec![(0, 20.0)]).unwrap();
        let mut out = Outbox::default();
        let samples = DECISIONS_KEPT as u64 + 1000;
        for k in 0..samples {
            let t = k * 1_000_000;
            p.on_host_io(t, host(k, 0), &mut out);
            let tag = out.device_ios[0].1.tag;
            p.on_device_completion(t + 10_000, 0, tag, &mut out);
            out.clear();
            p.on_timer(t + 1_000_000, SAMPLE_TIMER, &mut out);
            out.clear();
        }
        assert_eq!(p.decisions().len(), DECISIONS_KEPT);
        let last = p.decisions().back().unwrap().input.time_ns;
        assert_eq!(last, samples * 1_000_000, "the newest is kept");
        let counters = p.counters();
        let get = |k: &str| counters.iter().find(|(n, _)| *n == k).unwrap().1;
        assert_eq!(get("samples"), samples as f64);
    }

    /// `%util` and IOPS as iostat computes them, from the policy's own view.
    #[test]
    fn policy_measures_like_iostat_and_caps_the_throttled_tenant() {
        let params = BusyRateParams {
            sample_interval_s: 0.1,
            ..Default::default()
        };
        let ms = 1_000_000;
        let mut p = BusyRateQos::new(params, 0, 1, vec![(0, 20.0)]).unwrap();
        let mut out = Outbox::default();
        // IOs [0, 10) ms (A) and [5, 20) ms (B), then [50, 60) ms (B):
        // io_ticks = 20 + 10 = 30 ms of 100 ms.
        p.on_host_io(0, host(7, 0), &mut out);
        assert_eq!(out.timers, vec![(100 * ms, SAMPLE_TIMER)]);
        let tag_a = out.device_ios[0].1.tag;
        out.clear();
        p.on_host_io(5 * ms, host(8, 1), &mut out);
        let tag_b = out.device_ios[0].1.tag;
        p.on_device_completion(10 * ms, 0, tag_a, &mut out);
        p.on_device_completion(20 * ms, 0, tag_b, &mut out);
        assert_eq!(out.complete, vec![(7, 0), (8, 0)]);
        out.clear();
        p.on_host_io(50 * ms, host(9, 1), &mut out);
        let tag = out.device_ios[0].1.tag;
        p.on_device_completion(60 * ms, 0, tag, &mut out);
        // An IO still in flight at the sample counts up to the sample.
        p.on_host_io(95 * ms, host(10, 0), &mut out);
        out.clear();
        p.on_timer(100 * ms, SAMPLE_TIMER, &mut out);
        let d = p.decisions()[0];
        assert!(close(d.util_pct, 35.0), "{d:?}");
        assert!(close(d.input.total_iops, 30.0) && close(d.input.a_iops, 10.0));
        assert!(close(d.input.b_iops, 20.0) && d.input.a_target_iops == 20.0);
        // b = (95 − 20·35/30)/(35/30).
        let bpi = 35.0 / 30.0;
        let want = (95.0 - 20.0 * bpi) / bpi;
        assert_eq!(out.timers, vec![(200 * ms, SAMPLE_TIMER)]);
        match &out.actions[..] {
            [
                Action::CapTenant {
                    tenant: 1,
                    iops: Some(b),
                },
            ] => assert!(close(*b, want)),
            a => panic!("{a:?}"),
        }
        let counters = p.counters();
        let get = |k: &str| counters.iter().find(|(n, _)| *n == k).unwrap().1;
        assert!(close(get("util_pct"), 35.0) && close(get("b_cap_iops"), want));
        assert_eq!(get("samples"), 1.0);
        // The IO in flight across the sample: 5 ms in the first window,
        // 5 ms in the second; then an idle window stops the timer.
        out.clear();
        p.on_device_completion(105 * ms, 0, 0, &mut out);
        p.on_timer(200 * ms, SAMPLE_TIMER, &mut out);
        assert!(close(p.decisions()[1].util_pct, 5.0));
        out.clear();
        p.on_timer(300 * ms, SAMPLE_TIMER, &mut out);
        assert!(out.timers.is_empty(), "idle: no timer keeps the run alive");
        assert!(BusyRateQos::new(BusyRateParams::default(), 1, 1, vec![]).is_err());
    }

    /// `cap_delay_s`: the sample decides B's cap, which takes effect (an
    /// action) only at the timer `cap_delay_s` later; a delay of a whole
    /// interval or more, or a negative one, is refused naming the key.
    #[test]
    fn a_delayed_cap_takes_effect_after_the_delay() {
        let params = BusyRateParams {
            sample_interval_s: 0.1,
            ..Default::default()
        };
        let ms = 1_000_000;
        let new = || BusyRateQos::new(params.clone(), 0, 1, vec![(0, 20.0)]).unwrap();
        for bad in [0.1, 0.5, -0.01, f64::NAN] {
            let e = new().with_cap_delay(bad).err().expect("refused");
            assert_eq!(e.key(), "cap_delay_s", "{e}");
        }
        let mut p = new().with_cap_delay(0.03).unwrap();
        let mut out = Outbox::default();
        p.on_host_io(0, host(7, 0), &mut out);
        let tag = out.device_ios[0].1.tag;
        p.on_device_completion(10 * ms, 0, tag, &mut out);
        out.clear();
        p.on_timer(100 * ms, SAMPLE_TIMER, &mut out);
        // 10 ms busy of 100 with 10 IOPS: b = (95 − 20·1)/1 = 75, not yet applied.
        assert!(out.actions.is_empty(), "{:?}", out.actions);
        assert!(
            out.timers.contains(&(130 * ms, CAP_TIMER)),
            "{:?}",
            out.timers
        );
        out.clear();
        p.on_timer(130 * ms, CAP_TIMER, &mut out);
        match &out.actions[..] {
            [
                Action::CapTenant {
                    tenant: 1,
                    iops: Some(b),
                },
            ] => assert!(close(*b, 75.0), "{b}"),
            a => panic!("{a:?}"),
        }
    }

    /// With the host scheduler, an IO it holds counts as in flight (Linux
    /// counts a request from its insertion into the elevator): A's IO
    /// [0, 10) ms, then CFQ idles for A until 18 ms with B's IO held, B's
    /// runs [18, 30) ms: io_ticks 30 ms of 100, not 22.
    #[test]
    fn policy_counts_ios_the_host_scheduler_holds_as_busy() {
        let params = BusyRateParams {
            sample_interval_s: 0.1,
            ..Default::default()
        };
        let ms = 1_000_000;
        let cfq = HostSchedulerParams::Cfq(crate::host_sched::CfqParams {
            quantum: 1,
            ..Default::default()
        });
        let mut p = BusyRateQos::new(params, 0, 1, vec![(0, 20.0)])
            .unwrap()
            .with_host_scheduler(&cfq)
            .unwrap();
        let mut out = Outbox::default();
        p.on_host_io(0, host(7, 0), &mut out);
        p.on_host_io(0, host(8, 1), &mut out);
        assert_eq!(out.device_ios.len(), 1, "B's IO waits for A's turn");
        let tag_a = out.device_ios[0].1.tag;
        out.clear();
        p.on_device_completion(10 * ms, 0, tag_a, &mut out);
        assert_eq!(out.complete, vec![(7, 0)]);
        assert!(out.device_ios.is_empty(), "idling for A");
        assert_eq!(out.timers, vec![(18 * ms, HOST_SCHED_TIMER)]);
        out.clear();
        p.on_timer(18 * ms, HOST_SCHED_TIMER, &mut out);
        assert_eq!(out.device_ios.len(), 1);
        let tag_b = out.device_ios[0].1.tag;
        p.on_device_completion(30 * ms, 0, tag_b, &mut out);
        assert_eq!(out.complete, vec![(8, 0)]);
        out.clear();
        p.on_timer(100 * ms, SAMPLE_TIMER, &mut out);
        let d = p.decisions()[0];
        assert!(close(d.util_pct, 30.0), "{d:?}");
        assert!(close(d.input.total_iops, 20.0));
        let counters = p.counters();
        let get = |k: &str| counters.iter().find(|(n, _)| *n == k).unwrap().1;
        assert_eq!((get("host_slices"), get("host_idle_timeouts")), (2.0, 1.0));
        assert!(p.is_drained());
    }

    /// The FIFO at depth 1: B's IO, arriving second, waits for A's and
    /// counts as busy while held; A's [0, 10) ms, B's [10, 25) ms: io_ticks
    /// 25 ms of 100. Its counters: what it holds, no slices.
    #[test]
    fn policy_with_a_fifo_sends_in_arrival_order() {
        let params = BusyRateParams {
            sample_interval_s: 0.1,
            ..Default::default()
        };
        let ms = 1_000_000;
        let fifo = HostSchedulerParams::Fifo(crate::host_sched::FifoParams { depth: 1 });
        let mut p = BusyRateQos::new(params, 0, 1, vec![(0, 20.0)])
            .unwrap()
            .with_host_scheduler(&fifo)
            .unwrap();
        let mut out = Outbox::default();
        p.on_host_io(0, host(7, 0), &mut out);
        p.on_host_io(0, host(8, 1), &mut out);
        assert_eq!(out.device_ios.len(), 1, "depth 1");
        let counters = p.counters();
        let get = |k: &str| counters.iter().find(|(n, _)| *n == k).map(|c| c.1);
        assert_eq!(
            (get("host_waiting_ios"), get("host_slices")),
            (Some(1.0), None)
        );
        let tag_a = out.device_ios[0].1.tag;
        out.clear();
        p.on_device_completion(10 * ms, 0, tag_a, &mut out);
        assert_eq!(out.complete, vec![(7, 0)]);
        assert_eq!(out.device_ios.len(), 1, "B's IO goes as A's completes");
        assert!(out.timers.is_empty());
        let tag_b = out.device_ios[0].1.tag;
        out.clear();
        p.on_device_completion(25 * ms, 0, tag_b, &mut out);
        p.on_timer(100 * ms, SAMPLE_TIMER, &mut out);
        let d = p.decisions()[0];
        assert!(close(d.util_pct, 25.0), "{d:?}");
        assert!(p.is_drained());
    }
}
