//! The results of a run: summaries (serialized to summary.json), the
//! per-interval series, the latency histograms and the state timelines.
//!
//! Every derived number is computed from integers and rounded once, half
//! up, to a fixed number of decimals (3, or 9 for CDF fractions), so the
//! same inputs give the same bytes on every platform and every float
//! prints as the short decimal it is.

use serde::Serialize;

use super::{LatencyHistogram, Recorder, ScopeAcc};
use crate::device::DeviceState;
use crate::{NS_PER_S, Op, TimeNs};

/// round(num / den × 10^decimals), half up; `None` when `den` is 0.
pub(crate) fn scaled(num: u128, den: u128, decimals: u32) -> Option<u128> {
    if den == 0 {
        return None;
    }
    let scale = 10u128.pow(decimals);
    Some((num * scale * 2 + den) / (2 * den))
}

/// num / den rounded to 3 decimals, as the f64 nearest that decimal (which
/// JSON prints back as exactly that decimal).
pub(crate) fn fixed3(num: u128, den: u128) -> Option<f64> {
    scaled(num, den, 3).map(|k| k as f64 / 1000.0)
}

/// Latency in ns → µs, exact to 3 decimals.
fn ns_to_us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Host IOs of one scope, or device IOs of one device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IoSummary {
    /// IOs completed.
    pub ios: u64,
    pub iops: Option<f64>,
    /// Read + write bytes.
    pub bytes: u64,
    pub mb_per_s: Option<f64>,
    pub read_ios: u64,
    pub write_ios: u64,
    pub trim_ios: u64,
    pub flush_ios: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub trim_bytes: u64,
    pub read_mb_per_s: Option<f64>,
    pub write_mb_per_s: Option<f64>,
    pub mean_latency_us: Option<f64>,
    pub mean_read_latency_us: Option<f64>,
    pub mean_write_latency_us: Option<f64>,
    pub min_latency_us: Option<f64>,
    pub p50_latency_us: Option<f64>,
    pub p90_latency_us: Option<f64>,
    pub p99_latency_us: Option<f64>,
    pub p999_latency_us: Option<f64>,
    pub max_latency_us: Option<f64>,
    /// Latencies above the histogram's range (1 hour).
    pub latency_over_range_ios: u64,
}

impl IoSummary {
    fn from_scope(scope: &ScopeAcc, duration_ns: u64) -> IoSummary {
        let h = &scope.latency;
        let duration = duration_ns as u128;
        let ios = h.count();
        let [read, write, trim, flush] =
            [Op::Read, Op::Write, Op::Trim, Op::Flush].map(|op| op as usize);
        let bytes = scope.bytes_by_op[read] + scope.bytes_by_op[write];
        // IO/s = ios / (duration_ns / 1e9); MB/s = bytes / 1e6 / (duration_ns / 1e9).
        let per_s = |count: u64| fixed3(count as u128 * NS_PER_S as u128, duration);
        let mb_per_s = |b: u64| fixed3(b as u128 * 1_000, duration);
        // Mean in µs = sum_ns / (n × 1000), 3 decimals (whole ns).
        let mean_us = |sum_ns: u128, n: u64| fixed3(sum_ns, n as u128 * 1000);
        let percentiles = h.percentiles_ns([(1, 2), (9, 10), (99, 100), (999, 1000)]);
        let p = |i: usize| percentiles.map(|p| ns_to_us(p[i]));
        IoSummary {
            ios,
            iops: per_s(ios),
            bytes,
            mb_per_s: mb_per_s(bytes),
            read_ios: scope.ios_by_op[read],
            write_ios: scope.ios_by_op[write],
            trim_ios: scope.ios_by_op[trim],
            flush_ios: scope.ios_by_op[flush],
            read_bytes: scope.bytes_by_op[read],
            write_bytes: scope.bytes_by_op[write],
            trim_bytes: scope.bytes_by_op[trim],
            read_mb_per_s: mb_per_s(scope.bytes_by_op[read]),
            write_mb_per_s: mb_per_s(scope.bytes_by_op[write]),
            mean_latency_us: mean_us(h.sum_ns(), ios),
            mean_read_latency_us: mean_us(scope.latency_sum_by_op_ns[read], scope.ios_by_op[read]),
            mean_write_latency_us: mean_us(
                scope.latency_sum_by_op_ns[write],
                scope.ios_by_op[write],
            ),
            min_latency_us: h.min_ns().map(ns_to_us),
            p50_latency_us: p(0),
            p90_latency_us: p(1),
            p99_latency_us: p(2),
            p999_latency_us: p(3),
            max_latency_us: h.max_ns().map(ns_to_us),
            latency_over_range_ios: h.over_range(),
        }
    }
}

/// One op, tier or tenant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScopeSummary {
    /// Op name (`read`...), tier name, or tenant number.
    pub name: String,
    #[serde(flatten)]
    pub io: IoSummary,
}

/// One device: its IOs plus the Linux disk stats.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceSummary {
    pub name: String,
    #[serde(flatten)]
    pub io: IoSummary,
    /// Time with at least one IO in flight.
    pub io_ticks_ns: u64,
    /// Integral of the in-flight count over time.
    pub time_in_queue_ns: u64,
    /// 100 × io_ticks / duration (iostat %util).
    pub util_percent: Option<f64>,
    /// time_in_queue / duration (iostat aqu-sz, formerly avgqu-sz).
    pub avg_queue_size: Option<f64>,
    /// IOs submitted and not completed at the end.
    pub in_flight_at_end: u64,
    /// IO amplification: this device's reads and writes per host read or
    /// write (None without host data IOs).
    pub data_ios_per_host_io: Option<f64>,
    /// This device's read and write bytes per host read or write byte.
    pub data_bytes_per_host_byte: Option<f64>,
}

/// One interval of the host series: host IOs completed in
/// (start_ns, end_ns] (interval 0 also holds start_ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostInterval {
    pub start_ns: TimeNs,
    pub end_ns: TimeNs,
    pub ios: u64,
    /// Read + write bytes.
    pub data_bytes: u64,
    pub latency_sum_ns: u64,
    pub p99_latency_ns: Option<u64>,
    pub max_latency_ns: Option<u64>,
}

/// One device in one interval (times: the host row of the same interval).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInterval {
    pub ios: u64,
    pub data_bytes: u64,
    pub latency_sum_ns: u64,
    pub io_ticks_ns: u64,
    pub time_in_queue_ns: u64,
}

/// A device entering a state (timeline entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateChange {
    pub time_ns: TimeNs,
    pub device: u32,
    pub state: DeviceState,
}

/// Everything a run reports. Serializes to summary.json (the series,
/// histograms and timeline go to their own files: see `write_*`).
#[derive(Clone, Debug, Serialize)]
pub struct SimMetrics {
    pub start_ns: TimeNs,
    pub end_ns: TimeNs,
    pub duration_ns: u64,
    /// The workload's window: from `start_ns` to the end of the workload
    /// (`Recorder::finish_after_workload`; `end_ns` otherwise). Host IO/s
    /// and MB/s divide by it, so work the stack does after the workload
    /// (moves, write-backs) does not dilute them; device rates divide by
    /// `duration_ns`.
    pub host_end_ns: TimeNs,
    pub host_duration_ns: u64,
    /// `end_ns - host_end_ns`: how long the run went on after its
    /// workload ended.
    pub background_tail_ns: u64,
    pub interval_ns: u64,
    /// Rows of the series (intervals kept).
    pub intervals: usize,
    pub series_truncated: bool,
    /// All host IOs.
    #[serde(flatten)]
    pub total: IoSummary,
    pub ops: Vec<ScopeSummary>,
    pub tiers: Vec<ScopeSummary>,
    pub tenants: Vec<ScopeSummary>,
    pub devices: Vec<DeviceSummary>,
    /// State changes kept (0 without a timeline).
    pub timeline_changes: usize,
    pub timeline_truncated_at_ns: Option<TimeNs>,
    /// Calls that broke the recorder's contract (see `Recorder`); 0 in a
    /// correct executor.
    pub contract_violations: u64,
    #[serde(skip)]
    pub(crate) host_series: Vec<HostInterval>,
    #[serde(skip)]
    pub(crate) device_series: Vec<DeviceInterval>,
    /// (scope, histogram) in the order of `write_cdf_csv`.
    #[serde(skip)]
    pub(crate) histograms: Vec<(String, LatencyHistogram)>,
    #[serde(skip)]
    pub(crate) timeline: Option<Vec<StateChange>>,
    /// Names of the timeline-only signals after the devices.
    #[serde(skip)]
    pub(crate) timeline_signals: Vec<String>,
}

impl SimMetrics {
    /// The host series, one row per interval.
    pub fn host_series(&self) -> &[HostInterval] {
        &self.host_series
    }

    /// Device `dev`'s series, one row per interval (aligned with
    /// `host_series`).
    pub fn device_series(&self, dev: usize) -> impl Iterator<Item = &DeviceInterval> + '_ {
        let devices = self.devices.len();
        let rows = if dev < devices {
            self.host_series.len()
        } else {
            0
        };
        (0..rows).map(move |k| &self.device_series[k * devices + dev])
    }

    /// Latency histograms by scope (`all`, `op:read`, `tier:NAME`,
    /// `tenant:N`, `device:NAME`).
    pub fn histograms(&self) -> impl Iterator<Item = (&str, &LatencyHistogram)> + '_ {
        self.histograms.iter().map(|(scope, h)| (scope.as_str(), h))
    }

    pub fn histogram(&self, scope: &str) -> Option<&LatencyHistogram> {
        self.histograms
            .iter()
            .find(|(s, _)| s == scope)
            .map(|(_, h)| h)
    }

    /// State changes in time order; `None` without a timeline.
    pub fn timeline(&self) -> Option<&[StateChange]> {
        self.timeline.as_deref()
    }
}

pub(super) fn build(rec: Recorder, end_ns: TimeNs, host_end_ns: TimeNs) -> SimMetrics {
    let duration_ns = end_ns - rec.start_ns;
    let host_duration_ns = host_end_ns - rec.start_ns;
    let named = |name: String, scope: &ScopeAcc| ScopeSummary {
        name,
        io: IoSummary::from_scope(scope, host_duration_ns),
    };
    let ops: Vec<ScopeSummary> = Op::ALL
        .iter()
        .map(|&op| named(op.as_str().to_string(), &rec.ops[op as usize]))
        .collect();
    let tiers = rec
        .tier_names
        .iter()
        .zip(&rec.tiers)
        .map(|(name, scope)| named(name.clone(), scope))
        .collect();
    let tenants = rec
        .tenants
        .iter()
        .enumerate()
        .map(|(i, scope)| named(i.to_string(), scope))
        .collect();
    let duration = duration_ns as u128;
    let total = IoSummary::from_scope(&rec.all, host_duration_ns);
    let (host_data_ios, host_data_bytes) = (
        (total.read_ios + total.write_ios) as u128,
        (total.read_bytes + total.write_bytes) as u128,
    );
    let devices = rec
        .device_names
        .iter()
        .zip(&rec.devices)
        .map(|(name, d)| {
            let io = IoSummary::from_scope(&d.scope, duration_ns);
            let data_ios = (io.read_ios + io.write_ios) as u128;
            let data_bytes = (io.read_bytes + io.write_bytes) as u128;
            DeviceSummary {
                name: name.clone(),
                data_ios_per_host_io: fixed3(data_ios, host_data_ios),
                data_bytes_per_host_byte: fixed3(data_bytes, host_data_bytes),
                io,
                io_ticks_ns: d.disk.io_ticks_ns,
                time_in_queue_ns: d.disk.time_in_queue_ns,
                util_percent: fixed3(d.disk.io_ticks_ns as u128 * 100, duration),
                avg_queue_size: fixed3(d.disk.time_in_queue_ns as u128, duration),
                in_flight_at_end: d.disk.in_flight,
            }
        })
        .collect();

    let mut histograms =
        Vec::with_capacity(5 + rec.tiers.len() + rec.tenants.len() + rec.devices.len());
    histograms.push(("all".to_string(), rec.all.latency));
    for (op, scope) in Op::ALL.iter().zip(rec.ops) {
        histograms.push((format!("op:{}", op.as_str()), scope.latency));
    }
    for (name, scope) in rec.tier_names.iter().zip(rec.tiers) {
        histograms.push((format!("tier:{name}"), scope.latency));
    }
    for (i, scope) in rec.tenants.into_iter().enumerate() {
        histograms.push((format!("tenant:{i}"), scope.latency));
    }
    for (name, device) in rec.device_names.iter().zip(rec.devices) {
        histograms.push((format!("device:{name}"), device.scope.latency));
    }

    let (timeline, timeline_truncated_at_ns) = match rec.timeline {
        Some(t) => (Some(t.changes), t.truncated_at_ns),
        None => (None, None),
    };
    SimMetrics {
        start_ns: rec.start_ns,
        end_ns,
        duration_ns,
        host_end_ns,
        host_duration_ns,
        background_tail_ns: end_ns - host_end_ns,
        interval_ns: rec.interval_ns,
        intervals: rec.host_series.len(),
        series_truncated: rec.series_truncated,
        total,
        ops,
        tiers,
        tenants,
        devices,
        timeline_changes: timeline.as_ref().map_or(0, Vec::len),
        timeline_truncated_at_ns,
        contract_violations: rec.contract_violations,
        host_series: rec.host_series,
        device_series: rec.device_series,
        histograms,
        timeline,
        timeline_signals: rec.timeline_signals,
    }
}
