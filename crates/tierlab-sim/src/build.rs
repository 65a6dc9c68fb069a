//! From a config to a ready `Simulation`: workloads and tenants here; the
//! devices' models and the policy from tierlab-stack, the one builder every
//! executor shares.

use std::path::Path;
use tierlab_trace::spread::SpreadMode;

use tierlab_core::NS_PER_S;
use tierlab_stack::{DeviceSpec, StackContext, TenantSpec};
use tierlab_trace::generate::KvParams;
use tierlab_trace::prefetch::Prefetch;
use tierlab_trace::slice::{Slice, SliceSpec};
use tierlab_trace::{ReadOptions, RecordStream, TraceReader};

use crate::config::{ConfigError, DriverConfig, SimConfig, TenantConfig, WorkloadConfig};
use crate::driver::{DriverMode, Region, StopAfter, Tenant};
use crate::engine::Simulation;

fn toml_scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The workload of one tenant as a record stream.
pub fn workload(
    t: &TenantConfig,
    index: usize,
    base_dir: &Path,
    seed: u64,
) -> Result<Box<dyn RecordStream + Send>, ConfigError> {
    let key = |k: &str| format!("tenants[{index}].workload.{k}");
    match &t.workload {
        WorkloadConfig::Trace {
            trace,
            format,
            device,
            skip_bad,
        } => {
            let path = if trace.is_absolute() {
                trace.clone()
            } else {
                base_dir.join(trace)
            };
            // A format name, or `csv:MAPPING` for any delimited text.
            let (format, csv) = match format.as_deref() {
                Some(f) => {
                    let (format, csv) = tierlab_trace::formats::csv::parse_format_spec(f)
                        .map_err(|e| ConfigError::param(e.with_key(key("format"))))?;
                    (Some(format), csv)
                }
                None => (None, None),
            };
            let reader = TraceReader::open(
                &path,
                &ReadOptions {
                    format,
                    skip_bad: *skip_bad,
                    csv,
                    ..Default::default()
                },
            )
            .map_err(|e| ConfigError::trace(key("trace"), e))?;
            // Text traces are parsed ahead on a second core while the
            // simulation runs (the records are the same).
            let prefetch = reader.prefetch_pays() && tierlab_trace::prefetch::second_core();
            let stream: Box<dyn RecordStream + Send> = match device {
                Some(d) => Box::new(
                    Slice::new(
                        reader,
                        SliceSpec {
                            device: Some(d.clone()),
                            ..Default::default()
                        },
                    )
                    .map_err(|e| ConfigError::trace(key("device"), e))?,
                ),
                None => Box::new(reader),
            };
            Ok(if prefetch {
                Box::new(Prefetch::spawn(stream))
            } else {
                stream
            })
        }
        WorkloadConfig::Generator { generator, params } => {
            let mut kv = Vec::new();
            for (k, v) in params {
                let text = toml_scalar(v).ok_or_else(|| {
                    ConfigError::value(
                        format!("{}.{k}", key("params")),
                        v,
                        "a number, string or boolean",
                    )
                })?;
                kv.push(format!("{k}={text}"));
            }
            let kv = KvParams::parse(kv).map_err(|e| ConfigError::trace(key("params"), e))?;
            // Each tenant draws from its own stream of the run's seed.
            let tenant_seed = seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(index as u64 + 1));
            tierlab_trace::generate::from_spec(generator, &kv, tenant_seed).map_err(|e| match e {
                tierlab_trace::TraceError::Param(_) => ConfigError::trace(key("params"), e),
                e => ConfigError::trace(key("generator"), e),
            })
        }
    }
}

fn tenant(
    t: &TenantConfig,
    index: usize,
    base_dir: &Path,
    seed: u64,
) -> Result<Tenant, ConfigError> {
    let workload = workload(t, index, base_dir, seed)?;
    let (mode, stop) = match &t.driver {
        DriverConfig::Open { speed, .. } => {
            (DriverMode::OpenLoop { speed: *speed }, StopAfter::default())
        }
        DriverConfig::Afap { iodepth } => (
            DriverMode::ClosedLoop { iodepth: *iodepth },
            StopAfter::default(),
        ),
        DriverConfig::Closed {
            iodepth,
            total_bytes,
            duration_s,
            ios,
        } => (
            DriverMode::ClosedLoop { iodepth: *iodepth },
            StopAfter {
                total_bytes: total_bytes.map(|b| b.0),
                duration_ns: duration_s.map(|d| (d * NS_PER_S as f64).round() as u64),
                ios: *ios,
            },
        ),
    };
    let region = t.region.map(|r| Region {
        offset_bytes: r.offset_bytes.0,
        size_bytes: r.size_bytes.0,
    });
    let schedule = iops_schedule_ns(t);
    let offset_ns = (t.iops_window_offset_s * NS_PER_S as f64).round() as u64;
    let spread = match t.driver {
        DriverConfig::Open { spread, .. } => spread,
        _ => SpreadMode::None,
    };
    let t_budget = t.iops_budget;
    // Each tenant its own stream of spread times.
    let spread_seed = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    Tenant::new(&t.name, workload, mode, stop, region, t.iops_cap)
        .map(|t| t.with_spread(spread, spread_seed))
        .and_then(|t| t.with_iops_schedule(schedule))
        .and_then(|t| t.with_window_offset_ns(offset_ns))
        .and_then(|t| t.with_iops_budget(t_budget))
        .map_err(|e| ConfigError::param(e.within(format!("tenants[{index}]"))))
}

/// A tenant's `iops_schedule` in ns.
fn iops_schedule_ns(t: &TenantConfig) -> Vec<(u64, f64)> {
    t.iops_schedule
        .iter()
        .map(|s| ((s.from_s * NS_PER_S as f64).round() as u64, s.iops))
        .collect()
}

/// Device names for outputs: `name` from the config, else `model` + index.
pub fn device_names(config: &SimConfig) -> Vec<String> {
    tierlab_stack::device_names(&config.devices)
}

impl SimConfig {
    /// What the policy is built over: the devices (with these capacities,
    /// of models or of backing stores) and the tenants.
    pub fn stack_context(&self, capacities_bytes: &[u64]) -> StackContext {
        let names = device_names(self);
        StackContext {
            devices: self
                .devices
                .iter()
                .zip(names)
                .zip(capacities_bytes)
                .map(|((table, name), &capacity_bytes)| DeviceSpec {
                    name,
                    capacity_bytes,
                    table: table.clone(),
                })
                .collect(),
            tenants: self
                .tenants
                .iter()
                .map(|t| TenantSpec {
                    name: t.name.clone(),
                    iops_cap: t.iops_cap,
                    iops_schedule_ns: iops_schedule_ns(t),
                })
                .collect(),
        }
    }
}

/// Builds the simulation: device models, the policy over them, tenants.
pub fn build(config: &SimConfig, base_dir: &Path) -> Result<Simulation, ConfigError> {
    let at = |e: ConfigError| e.at(&config.origin);
    let models = tierlab_stack::devices::build_models(&config.devices, config.seed).map_err(at)?;
    let capacities: Vec<u64> = models.iter().map(|m| m.capacity_bytes()).collect();
    let policy = tierlab_stack::build_policy(&config.policy, &config.stack_context(&capacities))
        .map_err(at)?;
    let tenants = build_tenants(config, base_dir)?;
    Ok(Simulation::new(policy, models, tenants))
}

/// The tenants of a config, each with its workload and driver.
pub fn build_tenants(config: &SimConfig, base_dir: &Path) -> Result<Vec<Tenant>, ConfigError> {
    config
        .tenants
        .iter()
        .enumerate()
        .map(|(i, t)| tenant(t, i, base_dir, config.seed).map_err(|e| e.at(&config.origin)))
        .collect()
}
