//! tierlab-stack: from a config to a stack — the devices and the policy
//! over them. The one home that `tierlab sim`, `run`, `emulate` and
//! `serve` all use: the simulator builds device *models* from the
//! `[[devices]]` tables, the real executors open backing stores and only
//! need their sizes; both build the policy here, through the registry in
//! `policies.rs`.

pub mod config;
pub mod device_table;
pub mod devices;
pub mod policies;

pub use config::{Bytes, ConfigError, apply_overrides};
pub use devices::{
    REAL_DEVICE_KEYS, REAL_RAID_KEYS, device_names, standard_device, strip_real_device_keys,
};
pub use policies::{
    DeviceSpec, POLICIES, PolicySpec, Registration, StackContext, TenantSpec, build_policy,
    policies_that_move_data, volume_bytes,
};

use std::path::Path;

use serde::Deserialize;

/// A stack without a workload: what `tierlab serve` serves. A `tierlab
/// run` config is one too: its `[[tenants]]`, `[output]` and `[run]`
/// tables are not part of the stack and are skipped (`load`'s second
/// result names those it skipped).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackConfig {
    #[serde(default)]
    pub seed: u64,
    pub devices: Vec<toml::Table>,
    #[serde(default)]
    pub policy: PolicySpec,
}

/// Top-level tables of a run config that are not part of a stack.
pub const WORKLOAD_KEYS: [&str; 3] = ["tenants", "output", "run"];

impl StackConfig {
    /// Reads a stack from a config file (a `tierlab run` config works:
    /// its workload tables are skipped and listed in the second result),
    /// applies `--set` overrides and checks the policy's parameters.
    pub fn load(
        path: &Path,
        overrides: &[String],
    ) -> Result<(StackConfig, Vec<String>), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(path, e))?;
        StackConfig::parse(&text, &path.display().to_string(), overrides)
    }

    pub fn parse(
        text: &str,
        origin: &str,
        overrides: &[String],
    ) -> Result<(StackConfig, Vec<String>), ConfigError> {
        let mut doc: toml::Table =
            toml::from_str(text).map_err(|e| ConfigError::syntax(e.to_string()).at(origin))?;
        apply_overrides(&mut doc, overrides).map_err(|e| e.at(origin))?;
        config::device_byte_units(&mut doc, origin)?;
        let mut skipped = Vec::new();
        for k in WORKLOAD_KEYS {
            if doc.remove(k).is_some() {
                skipped.push(k.to_string());
            }
        }
        let config: StackConfig =
            serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
                let allowed = "allowed: seed, devices, policy (and a run config's tenants, output, run, which are skipped)";
                if e.path().to_string() == "." {
                    ConfigError::key("", format!("{}; {allowed}", e.inner())).at(origin)
                } else {
                    ConfigError::from_serde("", e).at(origin)
                }
            })?;
        if config.devices.is_empty() {
            return Err(ConfigError::value("devices", "none", "at least one device").at(origin));
        }
        config.policy.check().map_err(|e| e.at(origin))?;
        Ok((config, skipped))
    }

    /// Device names for outputs (`name`, else model + index).
    pub fn device_names(&self) -> Vec<String> {
        device_names(&self.devices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN_CONFIG: &str = r#"
seed = 3
[[devices]]
name = "cache"
path = "ram"
capacity_bytes = "4MiB"
[[devices]]
name = "disk"
path = "disk.img"
capacity_bytes = "64MiB"
create = true
[policy]
kind = "cache"
capacity_bytes = "4MiB"
write_mode = "write-back"
[[tenants]]
name = "A"
workload = { generator = "uniform", params = { count = 10 } }
[output]
interval_s = 0.5
"#;

    #[test]
    fn a_run_config_is_a_stack_with_its_workload_skipped() {
        let (c, skipped) = StackConfig::parse(RUN_CONFIG, "t.toml", &[]).unwrap();
        assert_eq!(c.seed, 3);
        assert_eq!(c.devices.len(), 2);
        assert_eq!(c.policy.kind, "cache");
        assert_eq!(skipped, ["tenants", "output"]);
        assert_eq!(c.device_names(), ["cache", "disk"]);
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let e = StackConfig::parse(&format!("bogus = 1\n{RUN_CONFIG}"), "t.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t.toml") && e.contains("bogus") && e.contains("expected one of"),
            "{e}"
        );
        let e = StackConfig::parse(
            RUN_CONFIG,
            "t.toml",
            &["policy.capacity_bytes=\"4MB\"".into()],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("t.toml: key `policy.capacity_bytes`"), "{e}");
        let e = StackConfig::parse(RUN_CONFIG, "t.toml", &["policy.kind=cahce".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cahce") && e.contains("did you mean `cache`"),
            "{e}"
        );
        let e = StackConfig::parse("seed = 1\ndevices = []\n", "t.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("key `devices`"), "{e}");
    }
}
