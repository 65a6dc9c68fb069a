//! `[[devices]]` tables: names, the keys only a real executor reads, and
//! device models for the simulator (and for `--model-timing`).

use tierlab_core::device::DeviceModel;

/// `[[devices]]` keys that only the real executors read (their backing
/// store); the simulator ignores them, so one config can describe a stack
/// for both (`tierlab compare`, `tierlab serve --model-timing`).
pub const REAL_DEVICE_KEYS: [&str; 4] = ["path", "create", "direct", "fail_after_writes"];

/// Keys of a `model = "raid"` table that only the real executors read: its
/// write-intent bitmap (a store of its own) and the region a bit covers.
pub const REAL_RAID_KEYS: [&str; 2] = ["bitmap", "bitmap_chunk_bytes"];

/// Removes the real executors' keys from a device table and, for a RAID,
/// from its members (each may name its own backing store), recursively.
pub fn strip_real_device_keys(table: &mut toml::Table) {
    for k in REAL_DEVICE_KEYS.iter().chain(&REAL_RAID_KEYS) {
        table.remove(*k);
    }
    if let Some(toml::Value::Array(members)) = table.get_mut("members") {
        for m in members {
            if let toml::Value::Table(t) = m {
                strip_real_device_keys(t);
            }
        }
    }
}

/// Builds a device model from a `[[devices]]` table with tierlab-devices'
/// models; `name` and the real executors' keys (`REAL_DEVICE_KEYS`, in
/// RAID members too) are ignored.
/// Keys in errors are relative to the table (`rpm`, `members[2].rpm`).
pub fn standard_device(
    table: &toml::Table,
    seed: u64,
) -> Result<Box<dyn DeviceModel>, crate::ConfigError> {
    let mut table = table.clone();
    table.remove("name");
    strip_real_device_keys(&mut table);
    let config: tierlab_devices::DeviceConfig =
        serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| crate::ConfigError::from_serde("", e))?;
    Ok(tierlab_devices::build(&config, seed)?)
}

/// The seed of device `index` of a stack seeded with `seed`: each device
/// draws from its own stream.
pub fn device_seed(seed: u64, index: usize) -> u64 {
    seed.wrapping_add(0x5851_F42D_4C95_7F2D_u64.wrapping_mul(index as u64 + 1))
}

/// Device names for outputs: `name` from the config, else `model` + index.
pub fn device_names(devices: &[toml::Table]) -> Vec<String> {
    devices
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

/// Every device of a stack as a model, in order; errors name the table.
pub fn build_models(
    devices: &[toml::Table],
    seed: u64,
) -> Result<Vec<Box<dyn DeviceModel>>, crate::ConfigError> {
    devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            standard_device(d, device_seed(seed, i)).map_err(|e| e.within(&format!("devices[{i}]")))
        })
        .collect()
}
