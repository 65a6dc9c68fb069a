//! One simulation run from a config: build, run, collect metrics, write outputs.

use std::path::Path;

use serde::Serialize;
use tierlab_core::NS_PER_S;
use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::metrics::{MetricsConfig, Recorder, SimMetrics};
use tierlab_core::{Op, TimeNs};

use crate::build::{self, device_names};
use crate::config::{ConfigError, DriverConfig, SimConfig, WorkloadConfig};
use crate::engine::{Observer, Progress, RunOutcome};

impl Observer for Recorder {
    fn host_io(
        &mut self,
        arrival_ns: TimeNs,
        done_ns: TimeNs,
        op: Op,
        size_bytes: u32,
        tier: u16,
        tenant: u32,
    ) {
        Recorder::host_io(self, arrival_ns, done_ns, op, size_bytes, tier, tenant)
    }
    fn device_submit(&mut self, device: usize, now_ns: TimeNs) {
        Recorder::device_submit(self, device, now_ns)
    }
    fn device_complete(
        &mut self,
        device: usize,
        submit_ns: TimeNs,
        done_ns: TimeNs,
        op: Op,
        size_bytes: u32,
    ) {
        Recorder::device_complete(self, device, submit_ns, done_ns, op, size_bytes)
    }
    fn device_state(&mut self, device: usize, now_ns: TimeNs, state: DeviceState) {
        Recorder::device_state(self, device, now_ns, state)
    }
}

/// A policy counter as JSON/CSV: counts as integers, ratios as decimals.
pub fn counter_value(v: f64) -> serde_json::Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        serde_json::Value::from(v as i64)
    } else {
        serde_json::Value::from(v)
    }
}

/// What each tenant did, beyond the metrics.
#[derive(Clone, Debug, Serialize)]
pub struct TenantReport {
    pub name: String,
    pub issued_ios: u64,
    pub issued_bytes: u64,
    pub completed_ios: u64,
    /// Open loop: records whose trace time ran backwards, issued at their predecessor's time.
    pub retimed: u64,
    /// Records whose offset was folded (or clipped) into the tenant's region.
    pub folded: u64,
    /// Open loop: how quantized stamps were spread (`none`, `even`,
    /// `poisson`), records given a later time, records that shared their
    /// predecessor's stamp as read, and the smallest gap between stamps
    /// (the quantum, when quantized), ns.
    pub spread: &'static str,
    pub spread_records: u64,
    pub same_stamp_records: u64,
    pub timestamp_quantum_ns: Option<u64>,
}

impl From<&crate::Tenant> for TenantReport {
    fn from(t: &crate::Tenant) -> TenantReport {
        TenantReport {
            name: t.name.clone(),
            issued_ios: t.issued_ios,
            issued_bytes: t.issued_bytes,
            completed_ios: t.completed_ios,
            retimed: t.retimed,
            folded: t.folded,
            spread: t.spread().0.as_str(),
            spread_records: t.spread().2,
            same_stamp_records: t.spread().1.same_stamp_records,
            timestamp_quantum_ns: t.spread().1.min_gap_ns,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    pub seed: u64,
    pub policy: String,
    pub simulated_s: f64,
    pub events: u64,
    /// Host IOs still in flight when the run stopped (a run cut by `run.duration_s`).
    pub host_ios_unfinished: u64,
    pub tenants: Vec<TenantReport>,
    /// What the user should know about this run's inputs (e.g. quantized
    /// trace timestamps replayed as bursts); also printed by `tierlab sim`.
    pub warnings: Vec<String>,
    /// The policy's own end-of-run counters (`Policy::counters`).
    pub policy_counters: serde_json::Map<String, serde_json::Value>,
    /// Per device name, the model's own counters (`DeviceModel::counters`),
    /// for devices that have any.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub device_counters: serde_json::Map<String, serde_json::Value>,
}

/// Each device's counters by name, and each RAID member's under
/// `NAME.mI` (nested: `NAME.mI.mJ`), for devices that have any.
fn device_counters(
    names: &[String],
    devices: &[Box<dyn DeviceModel>],
) -> serde_json::Map<String, serde_json::Value> {
    fn add(
        name: String,
        d: &dyn DeviceModel,
        out: &mut serde_json::Map<String, serde_json::Value>,
    ) {
        let counters = d.counters();
        if !counters.is_empty() {
            let map: serde_json::Map<String, serde_json::Value> = counters
                .into_iter()
                .map(|(k, v)| (k.to_string(), counter_value(v)))
                .collect();
            out.insert(name.clone(), serde_json::Value::Object(map));
        }
        for (i, m) in d.members().into_iter().enumerate() {
            add(format!("{name}.m{i}"), m, out);
        }
    }
    let mut out = serde_json::Map::new();
    for (name, d) in names.iter().zip(devices) {
        add(name.clone(), &**d, &mut out);
    }
    out
}

pub struct RunResult {
    pub metrics: SimMetrics,
    pub info: RunInfo,
    pub outcome: RunOutcome,
    /// Counter names and (time, values) samples of the policy's counters.
    pub counter_names: Vec<&'static str>,
    pub counter_samples: Vec<(TimeNs, Vec<f64>)>,
    /// The policy's logs (`Policy::logs`): file name, CSV text.
    pub policy_logs: Vec<(&'static str, String)>,
}

/// How long a run will be, as far as the config tells without reading a
/// trace: for progress bars (a fraction and an ETA), never for results.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExpectedTotal {
    /// Host IOs, when every tenant's count is known (a generator's `count`,
    /// a closed-loop `ios`).
    pub host_ios: Option<u64>,
    /// Virtual time, when `run.duration_s` or every tenant's duration is
    /// known (a generator's `duration_s` over an open-loop `speed`, a
    /// closed-loop `duration_s`).
    pub simulated_ns: Option<TimeNs>,
}

impl ExpectedTotal {
    /// The share of the run done at `p`, in [0, 1], when a total is known.
    pub fn fraction(&self, p: &Progress) -> Option<f64> {
        let ios = self
            .host_ios
            .filter(|&n| n > 0)
            .map(|n| p.host_ios as f64 / n as f64);
        let time = self
            .simulated_ns
            .filter(|&n| n > 0)
            .map(|n| p.simulated_ns as f64 / n as f64);
        let f = match (ios, time) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b)?,
        };
        Some(f.clamp(0.0, 1.0))
    }
}

/// What the config says about the run's length (see `ExpectedTotal`).
pub fn expected_total(config: &SimConfig) -> ExpectedTotal {
    let s_to_ns = |s: f64| (s * NS_PER_S as f64).round() as TimeNs;
    let mut ios_total = Some(0u64);
    let mut end_ns = Some(0 as TimeNs);
    for t in &config.tenants {
        let (mut count, mut duration_s) = (None, None);
        if let WorkloadConfig::Generator { generator, params } = &t.workload {
            let kv: Vec<String> = params
                .iter()
                .map(|(k, v)| match v {
                    toml::Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect();
            if let Ok(resolved) = tierlab_trace::generate::KvParams::parse(kv)
                .and_then(|kv| tierlab_trace::generate::resolve(generator, &kv))
            {
                for (k, v) in resolved.to_kv() {
                    match k {
                        "count" => count = v.parse::<u64>().ok(),
                        "duration_s" => duration_s = v.parse::<f64>().ok(),
                        _ => {}
                    }
                }
            }
        }
        let mut tenant_ns = None;
        match &t.driver {
            DriverConfig::Open { speed, .. } => {
                tenant_ns = duration_s.map(|d| s_to_ns(d / speed));
            }
            DriverConfig::Closed {
                ios, duration_s, ..
            } => {
                count = match (count, *ios) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                tenant_ns = duration_s.map(s_to_ns);
            }
            DriverConfig::Afap { .. } => {}
        }
        ios_total = ios_total.zip(count).map(|(a, b)| a + b);
        end_ns = end_ns.zip(tenant_ns).map(|(a, b)| a.max(b));
    }
    let limit_ns = config.run.duration_s.map(s_to_ns);
    let simulated_ns = match (end_ns.filter(|&n| n > 0), limit_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    ExpectedTotal {
        host_ios: ios_total.filter(|&n| n > 0 && limit_ns.is_none()),
        simulated_ns,
    }
}

/// Runs a config. `base_dir` resolves relative trace paths.
pub fn run(config: &SimConfig, base_dir: &Path) -> Result<RunResult, Box<dyn std::error::Error>> {
    run_with_progress(config, base_dir, None)
}

/// As `run`, reporting progress (`Simulation::run_with_progress`); the
/// results are the same.
pub fn run_with_progress(
    config: &SimConfig,
    base_dir: &Path,
    progress: Option<&mut dyn FnMut(&Progress) -> bool>,
) -> Result<RunResult, Box<dyn std::error::Error>> {
    let mut sim = build::build(config, base_dir)?;
    let interval_ns = (config.output.interval_s * NS_PER_S as f64).round() as u64;
    // RAID members get their own waveforms (`NAME.mI`) next to the devices.
    let timeline_signals = if config.output.timeline {
        sim.record_member_states();
        crate::engine::member_signal_names(sim.devices(), &device_names(config))
    } else {
        Vec::new()
    };
    let mut recorder = Recorder::new(MetricsConfig {
        interval_ns,
        device_names: device_names(config),
        tier_names: sim.policy().tier_names(),
        tenants: config.tenants.len(),
        timeline: config.output.timeline,
        timeline_signals,
        ..MetricsConfig::default()
    })
    .map_err(|e| ConfigError::param(e.within("output")))?;
    sim.sample_policy_counters(interval_ns);
    let until = config
        .run
        .duration_s
        .map(|s| (s * NS_PER_S as f64).round() as TimeNs);
    let outcome = sim.run_with_progress(&mut recorder, until, progress)?;
    let metrics = recorder.finish_after_workload(outcome.end_ns, outcome.workload_end_ns);
    let info = RunInfo {
        seed: config.seed,
        policy: sim.policy().name().to_string(),
        simulated_s: outcome.end_ns as f64 / NS_PER_S as f64,
        events: outcome.events,
        host_ios_unfinished: outcome.host_ios_unfinished,
        warnings: sim
            .tenants()
            .iter()
            .filter_map(|t| t.quantized_warning())
            .collect(),
        policy_counters: sim
            .policy()
            .counters()
            .into_iter()
            .map(|(k, v)| (k.to_string(), counter_value(v)))
            .collect(),
        device_counters: device_counters(&device_names(config), sim.devices()),
        tenants: sim.tenants().iter().map(TenantReport::from).collect(),
    };
    let counter_names = sim
        .policy()
        .counters()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let counter_samples = sim.counter_samples().to_vec();
    let policy_logs = sim.policy().logs();
    Ok(RunResult {
        metrics,
        info,
        outcome,
        counter_names,
        counter_samples,
        policy_logs,
    })
}

/// policy_series.csv: the policy's counters at every interval boundary
/// (None for a policy without counters).
pub fn policy_series_csv(result: &RunResult) -> Option<String> {
    if result.counter_names.is_empty() {
        return None;
    }
    let mut csv = String::from("time_s");
    for name in &result.counter_names {
        csv.push(',');
        csv.push_str(name);
    }
    csv.push('\n');
    for (t, values) in &result.counter_samples {
        csv.push_str(&format!("{:.9}", *t as f64 / NS_PER_S as f64));
        for v in values {
            csv.push_str(&format!(",{}", counter_value(*v)));
        }
        csv.push('\n');
    }
    Some(csv)
}

/// Writes summary.json (metrics + run info), series.csv, latency_cdf.csv and,
/// when asked for, timeline.vcd into `dir`.
pub fn write_outputs(result: &RunResult, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    result.metrics.write_files(dir)?;
    // Merge the run info into the summary the metrics wrote.
    let path = dir.join("summary.json");
    let mut summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    summary["run"] = serde_json::to_value(&result.info)?;
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")?;
    if let Some(csv) = policy_series_csv(result) {
        std::fs::write(dir.join("policy_series.csv"), csv)?;
    }
    for (name, text) in &result.policy_logs {
        // A policy bug, not user input: refuse paths rather than write outside `dir`.
        let plain = !name.is_empty()
            && name.ends_with(".csv")
            && !name.contains(['/', '\\'])
            && !name.starts_with('.');
        if !plain {
            return Err(std::io::Error::other(format!(
                "policy log name {name:?} is not a plain .csv file name"
            )));
        }
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}
