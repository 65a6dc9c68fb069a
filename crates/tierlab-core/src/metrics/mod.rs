//! Metrics every run reports, fed by an executor (the simulator, later the
//! real executor) through a [`Recorder`] and turned into [`SimMetrics`] by
//! [`Recorder::finish`]. Every number is defined in docs/metrics.md
//! ("Simulation metrics").
//!
//! ```text
//! let mut rec = Recorder::new(MetricsConfig { interval_ns: NS_PER_S,
//!     device_names: vec!["nvme0".into()], tier_names: vec!["flash".into()],
//!     tenants: 1, timeline: true, ..Default::default() })?;
//! rec.device_submit(0, t0);                                  // device IO starts
//! rec.device_state(0, t0, DeviceState::Read);                // optional timeline
//! rec.device_complete(0, t0, t1, Op::Read, 4096);            // device IO ends
//! rec.device_state(0, t1, DeviceState::Idle);
//! rec.host_io(arrival, t1, Op::Read, 4096, /*tier*/ 0, /*tenant*/ 0);
//! let m = rec.finish(end_ns);
//! m.write_summary_json(file)?; m.write_series_csv(..)?; m.write_cdf_csv(..)?; m.write_vcd(..)?;
//! ```
//!
//! Contract: calls come in non-decreasing time order (the time of a call
//! is `done_ns` for completions, `now_ns` otherwise), as a discrete-event
//! loop produces them. An earlier time is a contract violation: it is
//! counted (`contract_violations` in the output) and the event is
//! accounted at the recorder's current time; latencies always use the
//! times given. Recording costs no allocation and never panics.

mod disk;
mod export;
mod histogram;
mod summary;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::device::DeviceState;
use crate::{NS_PER_S, Op, TimeNs};
use disk::DiskStats;
pub use export::{CDF_FILE, SERIES_FILE, SUMMARY_FILE, VCD_FILE};
use histogram::IntervalLatency;
pub use histogram::{HISTOGRAM_HIGHEST_NS, HISTOGRAM_SIGNIFICANT_DIGITS, LatencyHistogram};
pub use summary::{
    DeviceInterval, DeviceSummary, HostInterval, IoSummary, ScopeSummary, SimMetrics, StateChange,
};

/// Most devices, tiers or tenants one recorder accepts. Each has its own
/// latency histogram (264 KiB), so this bounds memory at ~0.8 GiB even in
/// the worst case.
pub const MAX_SCOPES: usize = 1024;

/// Longest device or tier name.
pub const MAX_NAME_BYTES: usize = 128;

/// What to record. Build it with struct update syntax from `Default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Time origin: interval 0 starts here and durations are measured
    /// from here (0 in the simulator; the run's start in a real executor).
    pub start_ns: TimeNs,
    /// Length of one interval of the per-interval series (> 0).
    pub interval_ns: u64,
    /// One per device index passed to `device_*` (RAID members included).
    pub device_names: Vec<String>,
    /// One per tier index passed to `host_io` (`Policy::tier_names`).
    pub tier_names: Vec<String>,
    /// Tenants are numbered `0..tenants`.
    pub tenants: usize,
    /// Keep per-device state timelines (for `write_vcd`).
    pub timeline: bool,
    /// Extra timeline-only signals (e.g. the members of a RAID device),
    /// addressed by `device_state` as indices `device_names.len()..`; they
    /// have no IO metrics.
    pub timeline_signals: Vec<String>,
    /// Most intervals kept in memory; past it the series stop and
    /// `series_truncated` says so. Memory: 48 + 40 × devices bytes each.
    pub max_intervals: usize,
    /// Most state changes kept (16 bytes each); past it the timeline stops
    /// and `timeline_truncated_at_ns` says when.
    pub max_timeline_changes: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            start_ns: 0,
            interval_ns: NS_PER_S,
            device_names: Vec::new(),
            tier_names: Vec::new(),
            tenants: 1,
            timeline: false,
            timeline_signals: Vec::new(),
            // 1 s intervals for 27 hours, or 1 ms intervals for 100 s.
            max_intervals: 100_000,
            // 64 MiB of state changes.
            max_timeline_changes: 4 << 20,
        }
    }
}

/// A metrics config value that is not allowed (a name, an interval).
pub type MetricsError = crate::ParamError;

fn config_error(key: impl Into<String>, value: impl fmt::Debug, allowed: &str) -> MetricsError {
    crate::ParamError::new(key, format!("{value:?}"), allowed)
}

/// Names become CSV fields, `scope` prefixes and VCD identifiers, so they
/// are restricted to characters none of those formats quote or split on.
fn valid_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '+' | '@')
}

fn validate_names(key: &str, names: &[String]) -> Result<(), MetricsError> {
    if names.len() > MAX_SCOPES {
        return Err(config_error(
            format!("{key} (count)"),
            names.len(),
            &format!("at most {MAX_SCOPES} names"),
        ));
    }
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() || name.len() > MAX_NAME_BYTES || !name.chars().all(valid_name_char) {
            return Err(config_error(
                format!("{key}[{i}]"),
                name,
                &format!(
                    "1 to {MAX_NAME_BYTES} characters among ASCII letters, digits and _ - . / + @"
                ),
            ));
        }
        if names[..i].contains(name) {
            return Err(config_error(
                format!("{key}[{i}]"),
                name,
                "names must be unique",
            ));
        }
    }
    Ok(())
}

/// Counts and latencies of one scope, split by op.
#[derive(Clone, Debug, Default)]
pub(crate) struct ScopeAcc {
    pub latency: LatencyHistogram,
    pub ios_by_op: [u64; 4],
    pub bytes_by_op: [u64; 4],
    pub latency_sum_by_op_ns: [u128; 4],
}

impl ScopeAcc {
    #[inline]
    fn record(&mut self, latency_ns: u64, op: Op, size_bytes: u32) {
        let i = op as usize;
        self.latency.record(latency_ns);
        self.ios_by_op[i] += 1;
        self.bytes_by_op[i] += size_bytes as u64;
        self.latency_sum_by_op_ns[i] += latency_ns as u128;
    }

    /// Bytes moved: reads and writes (trims and flushes move no data).
    #[inline]
    fn data_bytes(&self) -> u64 {
        self.bytes_by_op[Op::Read as usize] + self.bytes_by_op[Op::Write as usize]
    }
}

/// Totals of a device at the start of the current interval, so that a row
/// is a difference of two readings, as iostat computes it.
#[derive(Clone, Copy, Debug, Default)]
struct DeviceMark {
    ios: u64,
    data_bytes: u64,
    latency_sum_ns: u128,
    io_ticks_ns: u64,
    time_in_queue_ns: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct DeviceAcc {
    pub scope: ScopeAcc,
    pub disk: DiskStats,
    mark: DeviceMark,
}

/// The host IOs completed in the current interval.
#[derive(Clone, Debug, Default)]
struct IntervalAcc {
    ios: u64,
    data_bytes: u64,
    latency: IntervalLatency,
}

#[derive(Clone, Debug)]
pub(crate) struct Timeline {
    pub changes: Vec<StateChange>,
    /// Each device's latest state (changes equal to it are not changes).
    pub current: Vec<DeviceState>,
    /// Index in `changes` of each device's latest entry (usize::MAX: none),
    /// so two changes at one instant collapse into the last one.
    last_entry: Vec<usize>,
    /// Each device's state before its latest entry.
    previous: Vec<DeviceState>,
    max_changes: usize,
    pub truncated_at_ns: Option<TimeNs>,
}

/// Collects the metrics of one run. See the module docs for the contract.
#[derive(Clone, Debug)]
pub struct Recorder {
    start_ns: TimeNs,
    interval_ns: u64,
    /// Latest event time seen.
    clock_ns: TimeNs,
    contract_violations: u64,
    all: ScopeAcc,
    ops: [ScopeAcc; 4],
    tiers: Vec<ScopeAcc>,
    tenants: Vec<ScopeAcc>,
    devices: Vec<DeviceAcc>,
    device_names: Vec<String>,
    tier_names: Vec<String>,
    timeline_signals: Vec<String>,
    /// Current interval k covers (start + k·I, start + (k+1)·I], interval 0
    /// also holds `start_ns` itself: an event at a boundary belongs to the
    /// interval that ends there, as an iostat sample taken at that instant
    /// includes it.
    interval_index: u64,
    interval_end_ns: TimeNs,
    interval: IntervalAcc,
    host_series: Vec<HostInterval>,
    device_series: Vec<DeviceInterval>,
    max_intervals: usize,
    series_truncated: bool,
    timeline: Option<Timeline>,
}

impl Recorder {
    pub fn new(config: MetricsConfig) -> Result<Recorder, MetricsError> {
        if config.interval_ns == 0 {
            return Err(config_error(
                "interval_ns",
                0,
                "an interval of at least 1 ns",
            ));
        }
        validate_names("device_names", &config.device_names)?;
        validate_names("tier_names", &config.tier_names)?;
        validate_names("timeline_signals", &config.timeline_signals)?;
        if config.tenants > MAX_SCOPES {
            return Err(config_error(
                "tenants",
                config.tenants,
                &format!("0 to {MAX_SCOPES} tenants"),
            ));
        }
        let devices = config.device_names.len();
        let signals = devices + config.timeline_signals.len();
        let timeline = config.timeline.then(|| Timeline {
            changes: Vec::new(),
            current: vec![DeviceState::Idle; signals],
            last_entry: vec![usize::MAX; signals],
            previous: vec![DeviceState::Idle; signals],
            max_changes: config.max_timeline_changes,
            truncated_at_ns: None,
        });
        Ok(Recorder {
            start_ns: config.start_ns,
            interval_ns: config.interval_ns,
            clock_ns: config.start_ns,
            contract_violations: 0,
            all: ScopeAcc::default(),
            ops: Default::default(),
            tiers: vec![ScopeAcc::default(); config.tier_names.len()],
            tenants: vec![ScopeAcc::default(); config.tenants],
            devices: vec![
                DeviceAcc {
                    scope: ScopeAcc::default(),
                    disk: DiskStats::new(config.start_ns),
                    mark: DeviceMark::default(),
                };
                devices
            ],
            device_names: config.device_names,
            tier_names: config.tier_names,
            timeline_signals: config.timeline_signals,
            interval_index: 0,
            interval_end_ns: config.start_ns.saturating_add(config.interval_ns),
            interval: IntervalAcc::default(),
            host_series: Vec::new(),
            device_series: Vec::new(),
            max_intervals: config.max_intervals,
            series_truncated: false,
            timeline,
        })
    }

    /// A host IO that arrived at `arrival_ns` completed at `done_ns`,
    /// served by tier `tier` (an index into `tier_names`) for tenant
    /// `tenant`. Latency = `done_ns - arrival_ns`.
    #[inline]
    pub fn host_io(
        &mut self,
        arrival_ns: TimeNs,
        done_ns: TimeNs,
        op: Op,
        size_bytes: u32,
        tier: u16,
        tenant: u32,
    ) {
        self.observe(done_ns);
        let latency_ns = self.latency(arrival_ns, done_ns);
        self.all.record(latency_ns, op, size_bytes);
        self.ops[op as usize].record(latency_ns, op, size_bytes);
        match self.tiers.get_mut(tier as usize) {
            Some(scope) => scope.record(latency_ns, op, size_bytes),
            None => self.contract_violations += 1,
        }
        match self.tenants.get_mut(tenant as usize) {
            Some(scope) => scope.record(latency_ns, op, size_bytes),
            None => self.contract_violations += 1,
        }
        if !self.series_truncated {
            self.interval.ios += 1;
            if matches!(op, Op::Read | Op::Write) {
                self.interval.data_bytes += size_bytes as u64;
            }
            self.interval.latency.record(latency_ns);
        }
    }

    /// Device `dev` accepted an IO at `now_ns` (it is now in flight).
    #[inline]
    pub fn device_submit(&mut self, dev: usize, now_ns: TimeNs) {
        let now_ns = self.observe(now_ns);
        match self.devices.get_mut(dev) {
            Some(device) => device.disk.start(now_ns),
            None => self.contract_violations += 1,
        }
    }

    /// Device `dev` completed at `done_ns` the IO submitted at `submit_ns`.
    #[inline]
    pub fn device_complete(
        &mut self,
        dev: usize,
        submit_ns: TimeNs,
        done_ns: TimeNs,
        op: Op,
        size_bytes: u32,
    ) {
        let at_ns = self.observe(done_ns);
        let latency_ns = self.latency(submit_ns, done_ns);
        let Some(device) = self.devices.get_mut(dev) else {
            self.contract_violations += 1;
            return;
        };
        if !device.disk.done(at_ns) {
            self.contract_violations += 1;
        }
        device.scope.record(latency_ns, op, size_bytes);
    }

    /// Device `dev` is in `state` from `now_ns` on. Only changes are kept,
    /// and only when `MetricsConfig::timeline` is set (otherwise this
    /// returns at once), so an executor may call it after every event.
    #[inline]
    pub fn device_state(&mut self, dev: usize, now_ns: TimeNs, state: DeviceState) {
        if self.timeline.is_none() {
            return;
        }
        let at_ns = self.observe(now_ns);
        let Some(timeline) = self.timeline.as_mut() else {
            return;
        };
        let Some(current) = timeline.current.get_mut(dev) else {
            self.contract_violations += 1;
            return;
        };
        if *current == state {
            return;
        }
        let previous = std::mem::replace(current, state);
        if timeline.truncated_at_ns.is_some() {
            return;
        }
        let last = timeline.last_entry[dev];
        if last != usize::MAX && timeline.changes[last].time_ns == at_ns {
            // Several changes at one instant: only the last is visible.
            if state == timeline.previous[dev] {
                // Back to the state before this instant (an IO completes
                // and the next starts at once): no change at all. Entries
                // at the latest instant are the tail of `changes`, so
                // removing one out of order keeps time order.
                timeline.changes.swap_remove(last);
                if let Some(moved) = timeline.changes.get(last) {
                    timeline.last_entry[moved.device as usize] = last;
                }
                timeline.last_entry[dev] = usize::MAX;
            } else {
                timeline.changes[last].state = state;
            }
            return;
        }
        if timeline.changes.len() >= timeline.max_changes {
            timeline.truncated_at_ns = Some(at_ns);
            return;
        }
        timeline.previous[dev] = previous;
        timeline.last_entry[dev] = timeline.changes.len();
        timeline.changes.push(StateChange {
            time_ns: at_ns,
            device: dev as u32,
            state,
        });
    }

    /// The latest event time seen (the recorder's clock).
    pub fn now_ns(&self) -> TimeNs {
        self.clock_ns
    }

    /// IOs in flight on `dev` (submitted, not completed).
    pub fn device_in_flight(&self, dev: usize) -> Option<u64> {
        self.devices.get(dev).map(|d| d.disk.in_flight)
    }

    #[inline]
    fn latency(&mut self, from_ns: TimeNs, to_ns: TimeNs) -> u64 {
        match to_ns.checked_sub(from_ns) {
            Some(latency_ns) => latency_ns,
            None => {
                self.contract_violations += 1;
                0
            }
        }
    }

    /// Moves the clock to `time_ns` (closing intervals it passes) and
    /// returns the time to account the event at.
    #[inline]
    fn observe(&mut self, time_ns: TimeNs) -> TimeNs {
        let at_ns = if time_ns < self.clock_ns {
            self.contract_violations += 1;
            self.clock_ns
        } else {
            self.clock_ns = time_ns;
            time_ns
        };
        if at_ns > self.interval_end_ns {
            self.advance_intervals(at_ns);
        }
        at_ns
    }

    #[cold]
    fn advance_intervals(&mut self, time_ns: TimeNs) {
        while time_ns > self.interval_end_ns {
            if self.series_truncated {
                // Nothing is kept any more: jump straight to the interval
                // holding `time_ns` instead of walking a long gap.
                self.interval_index = (time_ns - self.start_ns - 1) / self.interval_ns;
                self.interval_end_ns = self.interval_start_ns(self.interval_index + 1);
                return;
            }
            self.close_interval(self.interval_end_ns);
            self.interval_index += 1;
            self.interval_end_ns = self.interval_start_ns(self.interval_index + 1);
        }
    }

    fn interval_start_ns(&self, index: u64) -> TimeNs {
        self.start_ns
            .saturating_add(index.saturating_mul(self.interval_ns))
    }

    /// Appends the current interval's rows, ending at `end_ns`, and resets
    /// the interval accumulators.
    fn close_interval(&mut self, end_ns: TimeNs) {
        if self.series_truncated {
            return;
        }
        if self.host_series.len() >= self.max_intervals {
            self.series_truncated = true;
            return;
        }
        let start_ns = self.interval_start_ns(self.interval_index);
        let p99_latency_ns = self.interval.latency.percentile_ns(99, 100);
        self.host_series.push(HostInterval {
            start_ns,
            end_ns,
            ios: self.interval.ios,
            data_bytes: self.interval.data_bytes,
            latency_sum_ns: saturate_u64(self.interval.latency.sum_ns()),
            p99_latency_ns,
            max_latency_ns: self.interval.latency.max_ns(),
        });
        self.interval.ios = 0;
        self.interval.data_bytes = 0;
        self.interval.latency.clear();
        for device in &mut self.devices {
            // Reading /proc/diskstats at the boundary: charge up to it.
            device.disk.round(end_ns);
            let now = DeviceMark {
                ios: device.scope.latency.count(),
                data_bytes: device.scope.data_bytes(),
                latency_sum_ns: device.scope.latency.sum_ns(),
                io_ticks_ns: device.disk.io_ticks_ns,
                time_in_queue_ns: device.disk.time_in_queue_ns,
            };
            let before = std::mem::replace(&mut device.mark, now);
            self.device_series.push(DeviceInterval {
                ios: now.ios - before.ios,
                data_bytes: now.data_bytes - before.data_bytes,
                latency_sum_ns: saturate_u64(now.latency_sum_ns - before.latency_sum_ns),
                io_ticks_ns: now.io_ticks_ns - before.io_ticks_ns,
                time_in_queue_ns: now.time_in_queue_ns - before.time_in_queue_ns,
            });
        }
    }

    /// Ends the run at `end_ns` (not earlier than any event: an earlier
    /// value is a counted violation and the latest event time is used).
    /// IOs still in flight count in `io_ticks`/`time_in_queue` up to the
    /// end but have no latency.
    pub fn finish(self, end_ns: TimeNs) -> SimMetrics {
        self.finish_after_workload(end_ns, end_ns)
    }

    /// As `finish`, for a run that went on after its workload ended at
    /// `workload_end_ns` (every host IO issued and completed; the stack
    /// still moving data): host IO/s and MB/s divide by the workload's
    /// window, not the run's (`SimMetrics::host_end_ns`).
    pub fn finish_after_workload(mut self, end_ns: TimeNs, workload_end_ns: TimeNs) -> SimMetrics {
        let end_ns = self.observe(end_ns);
        self.close_interval(end_ns);
        for device in &mut self.devices {
            device.disk.round(end_ns);
        }
        let host_end_ns = workload_end_ns.clamp(self.start_ns, end_ns);
        summary::build(self, end_ns, host_end_ns)
    }
}

pub(crate) fn saturate_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}
