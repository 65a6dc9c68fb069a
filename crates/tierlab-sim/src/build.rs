//! From a config to a ready `Simulation`: workloads, tenants, devices, policy.

use std::path::Path;

use tierlab_core::NS_PER_S;
use tierlab_core::device::DeviceModel;
use tierlab_core::policy::{Passthrough, Policy};
use tierlab_policies::Linear;
use tierlab_trace::generate::KvParams;
use tierlab_trace::slice::{Slice, SliceSpec};
use tierlab_trace::{Format, ReadOptions, RecordStream, TraceReader};

use crate::config::{
    ConfigError, DriverConfig, PolicyConfig, SimConfig, TenantConfig, WorkloadConfig,
};
use crate::driver::{DriverMode, Region, StopAfter, Tenant};
use crate::engine::Simulation;

/// Builds one device from its config table (`[[devices]]` entry) and a seed.
pub type DeviceBuilder<'a> = &'a dyn Fn(&toml::Table, u64) -> Result<Box<dyn DeviceModel>, String>;

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
            let format = format
                .as_deref()
                .map(|f| {
                    f.parse::<Format>()
                        .map_err(|e| ConfigError(format!("key `{}`: {e}", key("format"))))
                })
                .transpose()?;
            let reader = TraceReader::open(
                &path,
                &ReadOptions {
                    format,
                    skip_bad: *skip_bad,
                    ..Default::default()
                },
            )
            .map_err(|e| ConfigError(format!("key `{}`: {e}", key("trace"))))?;
            match device {
                Some(d) => Ok(Box::new(
                    Slice::new(
                        reader,
                        SliceSpec {
                            device: Some(d.clone()),
                            ..Default::default()
                        },
                    )
                    .map_err(|e| ConfigError(format!("key `{}`: {e}", key("device"))))?,
                )),
                None => Ok(Box::new(reader)),
            }
        }
        WorkloadConfig::Generator { generator, params } => {
            let mut kv = Vec::new();
            for (k, v) in params {
                let text = toml_scalar(v).ok_or_else(|| {
                    ConfigError(format!(
                        "key `{}.{k}`: expected a number, string or boolean",
                        key("params")
                    ))
                })?;
                kv.push(format!("{k}={text}"));
            }
            let kv = KvParams::parse(kv)
                .map_err(|e| ConfigError(format!("key `{}`: {e}", key("params"))))?;
            // Each tenant draws from its own stream of the run's seed.
            let tenant_seed = seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(index as u64 + 1));
            tierlab_trace::generate::from_spec(generator, &kv, tenant_seed)
                .map_err(|e| ConfigError(format!("key `{}`: {e}", key("generator"))))
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
        DriverConfig::Open { speed } => {
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
    Tenant::new(&t.name, workload, mode, stop, region, t.iops_cap)
        .and_then(|t| t.with_iops_schedule(schedule))
        .and_then(|t| t.with_window_offset_ns(offset_ns))
        .map_err(|e| ConfigError(format!("key `tenants[{index}]`: {e}")))
}

/// A tenant's `iops_schedule` in ns.
fn iops_schedule_ns(t: &TenantConfig) -> Vec<(u64, f64)> {
    t.iops_schedule
        .iter()
        .map(|s| ((s.from_s * NS_PER_S as f64).round() as u64, s.iops))
        .collect()
}

/// The busy-rate QoS policy: tenants by name, A's guarantee from the
/// policy or else from A's own limit (the paper caps A at its target).
fn busy_rate_qos(
    config: &SimConfig,
    params: &tierlab_policies::qos::QosParams,
) -> Result<Box<dyn Policy>, ConfigError> {
    let names: Vec<&str> = config.tenants.iter().map(|t| t.name.as_str()).collect();
    let find = |key: &str, name: &str| {
        names.iter().position(|n| *n == name).ok_or_else(|| {
            ConfigError(format!(
                "key `policy.{key}`: no tenant is named {name:?}; tenants: {names:?}"
            ))
        })
    };
    let a = find("guaranteed_tenant", &params.guaranteed_tenant)?;
    let b = find("throttled_tenant", &params.throttled_tenant)?;
    let guarantee = match params.guaranteed_iops {
        Some(v) if !(v.is_finite() && v >= 0.0) => {
            return Err(ConfigError(format!(
                "key `policy.guaranteed_iops`: {v} is not an IOPS value ≥ 0"
            )));
        }
        Some(v) => vec![(0, v)],
        None => {
            let ta = &config.tenants[a];
            let steps = iops_schedule_ns(ta);
            // The own limit: iops_cap until the schedule's first step.
            let mut s: Vec<(u64, f64)> = match (ta.iops_cap, steps.first()) {
                (Some(c), Some((t, _))) if *t > 0 => vec![(0, c)],
                (Some(c), None) => vec![(0, c)],
                _ => Vec::new(),
            };
            s.extend(steps);
            if s.is_empty() {
                return Err(ConfigError(format!(
                    "key `policy.guaranteed_iops`: not set, and tenant {:?} has neither `iops_cap` nor `iops_schedule` to take it from",
                    ta.name
                )));
            }
            s
        }
    };
    tierlab_policies::qos::BusyRateQos::new(
        params.controller.clone(),
        a as u32,
        b as u32,
        guarantee,
    )
    .map(|p| Box::new(p) as Box<dyn Policy>)
    .map_err(|e| ConfigError(format!("key `policy`: {e}")))
}

/// Device names for outputs: `name` from the config, else `model` + index.
pub fn device_names(config: &SimConfig) -> Vec<String> {
    config
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| match d.get("name").and_then(|v| v.as_str()) {
            Some(n) => n.to_string(),
            None => format!(
                "{}{i}",
                d.get("model").and_then(|v| v.as_str()).unwrap_or("device")
            ),
        })
        .collect()
}

/// HSWD: the PCache (metadata + data + RCache) must fit on device 0, and an
/// SMR native region must have the policy's band size.
fn hswd_policy(
    config: &SimConfig,
    built: &[Box<dyn DeviceModel>],
    params: &tierlab_policies::hswd::HswdParams,
) -> Result<Box<dyn Policy>, ConfigError> {
    let layout = tierlab_policies::hswd::Layout::new(params)
        .map_err(|e| ConfigError(format!("key `policy`: {e}")))?;
    if built.len() != 2 {
        return Err(ConfigError(format!(
            "key `devices`: HSWD needs exactly two devices (0 = SSD PCache, 1 = SMR native region), found {}",
            built.len()
        )));
    }
    if layout.device_bytes > built[0].capacity_bytes() {
        return Err(ConfigError(format!(
            "key `policy.pcache_bytes`: the PCache needs {} bytes of devices[0] (metadata {} + data + RCache), which holds {}",
            layout.device_bytes,
            layout.metadata_bytes,
            built[0].capacity_bytes()
        )));
    }
    let mut nregion = config.devices[1].clone();
    nregion.remove("name");
    if let Ok(tierlab_devices::DeviceConfig::Smr(smr)) =
        toml::Value::Table(nregion).try_into::<tierlab_devices::DeviceConfig>()
        && smr.band_bytes != layout.band_bytes
    {
        return Err(ConfigError(format!(
            "key `policy.band_bytes`: {} bytes, but the SMR native region (devices[1]) has bands of {} bytes; make them equal",
            layout.band_bytes, smr.band_bytes
        )));
    }
    Ok(Box::new(
        tierlab_policies::hswd::Hswd::new(params, built[1].capacity_bytes())
            .map_err(|e| ConfigError(format!("key `policy`: {e}")))?,
    ))
}

/// A cache needs a cache device (0) large enough and a backing device (1).
fn check_cache_devices(
    built: &[Box<dyn DeviceModel>],
    capacity_bytes: u64,
) -> Result<(), ConfigError> {
    if built.len() != 2 {
        return Err(ConfigError(format!(
            "key `devices`: a cache needs exactly two devices (0 = cache, 1 = backing), found {}",
            built.len()
        )));
    }
    if capacity_bytes > built[0].capacity_bytes() {
        return Err(ConfigError(format!(
            "key `policy.capacity_bytes`: {capacity_bytes} bytes is more than the cache device holds ({} bytes)",
            built[0].capacity_bytes()
        )));
    }
    Ok(())
}

pub fn build(
    config: &SimConfig,
    base_dir: &Path,
    devices: DeviceBuilder<'_>,
) -> Result<Simulation, ConfigError> {
    let mut built = Vec::new();
    for (i, d) in config.devices.iter().enumerate() {
        let mut table = d.clone();
        table.remove("name");
        let device_seed = config
            .seed
            .wrapping_add(0x5851_F42D_4C95_7F2D_u64.wrapping_mul(i as u64 + 1));
        built.push(
            devices(&table, device_seed)
                .map_err(|e| ConfigError(format!("key `devices[{i}]`: {e}")))?,
        );
    }
    let policy: Box<dyn Policy> = match &config.policy {
        PolicyConfig::Passthrough => Box::new(Passthrough),
        PolicyConfig::Linear { sizes_bytes } => {
            let names = device_names(config);
            if !sizes_bytes.is_empty() && sizes_bytes.len() != built.len() {
                return Err(ConfigError(format!(
                    "key `policy.sizes_bytes`: {} sizes for {} devices; give one per device or none",
                    sizes_bytes.len(),
                    built.len()
                )));
            }
            let mut segments = Vec::new();
            for (i, d) in built.iter().enumerate() {
                let size = sizes_bytes.get(i).map_or(d.capacity_bytes(), |b| b.0);
                if size > d.capacity_bytes() {
                    return Err(ConfigError(format!(
                        "key `policy.sizes_bytes[{i}]`: {size} bytes is more than device {:?} holds ({} bytes)",
                        names[i],
                        d.capacity_bytes()
                    )));
                }
                segments.push((names[i].clone(), size));
            }
            Box::new(Linear::new(&segments).map_err(|e| ConfigError(format!("key `policy`: {e}")))?)
        }
        PolicyConfig::Cache(params) => {
            check_cache_devices(&built, params.capacity_bytes.0)?;
            Box::new(
                tierlab_policies::cache::Cache::new(params)
                    .map_err(|e| ConfigError(format!("key `policy`: {e}")))?,
            )
        }
        PolicyConfig::Flashcache(params) => {
            check_cache_devices(&built, params.capacity_bytes.0)?;
            Box::new(
                tierlab_policies::flashcache::new(params)
                    .map_err(|e| ConfigError(format!("key `policy`: {e}")))?,
            )
        }
        PolicyConfig::Atsmf(params) => {
            if built.len() != 2 {
                return Err(ConfigError(format!(
                    "key `devices`: ATSMF needs exactly two devices (0 = memory, 1 = flash LUN), found {}",
                    built.len()
                )));
            }
            Box::new(
                tierlab_policies::atsmf::Atsmf::new(
                    params.clone(),
                    built[1].capacity_bytes(),
                    built[0].capacity_bytes(),
                )
                .map_err(|e| ConfigError(format!("key `policy`: {e}")))?,
            )
        }
        PolicyConfig::BusyRateQos(params) => busy_rate_qos(config, params)?,
        PolicyConfig::Hswd(params) => hswd_policy(config, &built, params)?,
    };
    let tenants = config
        .tenants
        .iter()
        .enumerate()
        .map(|(i, t)| tenant(t, i, base_dir, config.seed))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Simulation::new(policy, built, tenants))
}
