//! Opening a real stack: each `[[devices]]` table's backing store (a file,
//! a block device, RAM, a RAID of those), and the policy over their sizes
//! (built by tierlab-stack, the builder every executor shares).

use std::path::{Path, PathBuf};

use tierlab_core::policy::Policy;
use tierlab_sim::Tenant;
use tierlab_sim::config::SimConfig;

use tierlab_core::ParamError;
use tierlab_trace::error::join_key;

use crate::backend::{Backend, FailingBackend, FileBackend, RamBackend};
use crate::error::{BackendError, RunError};

/// `at.key` as a byte count (an integer or "64MiB"); `at` names the table
/// in errors (`devices[0]`, `devices[0].members[2]`).
pub(crate) fn toml_u64(t: &toml::Table, key: &str, at: &str) -> Result<Option<u64>, BackendError> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Integer(n)) if *n > 0 => Ok(Some(*n as u64)),
        Some(toml::Value::String(s)) => tierlab_trace::units::parse_size_bytes(s)
            .map(Some)
            .map_err(|e| BackendError::param(e.with_key(key).within(at))),
        Some(v) => Err(BackendError::param(
            ParamError::new(key, v, "a positive byte count").within(at),
        )),
    }
}

fn toml_bool(t: &toml::Table, key: &str, at: &str, default: bool) -> Result<bool, BackendError> {
    match t.get(key) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(v) => Err(BackendError::param(
            ParamError::new(key, v, "true or false").within(at),
        )),
    }
}

/// Opens the backing store of each `[[devices]]` table: `path = "FILE or
/// /dev/X"` (with optional `capacity_bytes`, `create`, `direct`) or
/// `path = "ram"` with `capacity_bytes`; or `model = "raid"` over member
/// backing stores (raid.rs).
///
/// Two devices (members, bitmaps) that are one file are refused before
/// anything is opened (same_file.rs), and checked again once every file
/// exists (a dangling symlink to a file another device creates).
pub fn open_backends(
    devices: &[toml::Table],
    base_dir: &Path,
) -> Result<Vec<Box<dyn Backend>>, BackendError> {
    crate::same_file::refuse_shared_files(devices, base_dir)?;
    let mut out: Vec<Box<dyn Backend>> = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        out.push(open_device(d, &format!("devices[{i}]"), base_dir)?);
    }
    if out.is_empty() {
        return Err(BackendError::key("devices", "no device"));
    }
    crate::same_file::refuse_shared_files(devices, base_dir)?;
    Ok(out)
}

/// Opens one device table (`at` names it in errors); a RAID opens its
/// members through this too.
pub fn open_device(
    d: &toml::Table,
    at: &str,
    base_dir: &Path,
) -> Result<Box<dyn Backend>, BackendError> {
    let store = open_store(d, at, base_dir)?;
    Ok(match toml_u64_or_zero(d, "fail_after_writes", at)? {
        None => store,
        Some(n) => Box::new(FailingBackend::new(store, n)),
    })
}

/// `fail_after_writes`: a count, 0 allowed (fail from the first write).
fn toml_u64_or_zero(t: &toml::Table, key: &str, at: &str) -> Result<Option<u64>, BackendError> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Integer(n)) if *n >= 0 => Ok(Some(*n as u64)),
        Some(v) => Err(BackendError::key(
            join_key(at, key),
            format!("{v} is not a count of writes (0 or more)"),
        )),
    }
}

fn open_store(
    d: &toml::Table,
    at: &str,
    base_dir: &Path,
) -> Result<Box<dyn Backend>, BackendError> {
    if d.get("model").and_then(|m| m.as_str()) == Some("raid") {
        let mut d = d.clone();
        d.remove("fail_after_writes");
        return Ok(Box::new(crate::raid::open(&d, at, base_dir)?));
    }
    for k in d.keys() {
        let own = k == "name" || k == "capacity_bytes";
        if !own && !tierlab_stack::REAL_DEVICE_KEYS.contains(&k.as_str()) {
            return Err(BackendError::key(
                join_key(at, k),
                "not a real-device key; a real device takes name, path, capacity_bytes, \
                 create, direct, fail_after_writes, or is model = \"raid\" over such members \
                 (other models and presets are for `tierlab sim`)",
            ));
        }
    }
    let path = match d.get("path") {
        Some(toml::Value::String(p)) => p.clone(),
        _ => {
            return Err(BackendError::key(
                join_key(at, "path"),
                "missing; give a file, a block device, or \"ram\"",
            ));
        }
    };
    let capacity = toml_u64(d, "capacity_bytes", at)?;
    if path == "ram" {
        let c = capacity.ok_or_else(|| {
            BackendError::key(
                join_key(at, "capacity_bytes"),
                "a ram device needs its size",
            )
        })?;
        return Ok(Box::new(RamBackend::new(c)));
    }
    let p = PathBuf::from(&path);
    let p = if p.is_absolute() { p } else { base_dir.join(p) };
    let create = toml_bool(d, "create", at, false)?;
    let direct = toml_bool(d, "direct", at, true)?;
    Ok(Box::new(
        FileBackend::open(&p, capacity, create, direct).map_err(|e| e.within(at))?,
    ))
}

/// Builds the policy (over the backing stores' sizes) and the tenants of
/// a config whose devices are real.
pub fn build_stack(
    config: &SimConfig,
    base_dir: &Path,
    backends: &[Box<dyn Backend>],
) -> Result<(Box<dyn Policy>, Vec<Tenant>), RunError> {
    let capacities: Vec<u64> = backends.iter().map(|b| b.capacity_bytes()).collect();
    let policy = build_real_policy(&config.policy, &config.stack_context(&capacities))?;
    let tenants = tierlab_sim::build::build_tenants(config, base_dir).map_err(RunError::from)?;
    Ok((policy, tenants))
}

/// Builds a policy for a real executor: one that describes its data
/// movement (`Policy::moves_data`), else an error naming those that do.
pub fn build_real_policy(
    spec: &tierlab_stack::PolicySpec,
    ctx: &tierlab_stack::StackContext,
) -> Result<Box<dyn Policy>, RunError> {
    let policy = tierlab_stack::build_policy(spec, ctx).map_err(RunError::from)?;
    if !policy.moves_data() {
        return Err(RunError::PolicyMovesNoData {
            policy: policy.name().to_string(),
            movers: tierlab_stack::policies_that_move_data()
                .iter()
                .map(|m| m.to_string())
                .collect(),
        });
    }
    Ok(policy)
}
