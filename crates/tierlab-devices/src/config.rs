//! A device as a config names it, and the constructor the executor uses.
//!
//! In a config file a device is a table with `model = "memory" | "ssd" |
//! "hdd"`, an optional `preset` and any of the model's keys, e.g.
//!
//! ```toml
//! model = "ssd"
//! preset = "intel-p3700"
//! capacity_bytes = 400_000_000_000   # the 400 GB model
//! ```
//!
//! Values start from the preset (or the model's defaults when no preset is
//! named), then every key given replaces the preset's value. Unknown keys
//! are errors that name the key and list the allowed ones (serde's
//! `deny_unknown_fields` message); unknown presets list the known presets;
//! the merged values are validated before the config is accepted.
//!
//! Adding a model (e.g. RAID): add a variant to `DeviceConfig` and to
//! `RawDeviceConfig` (with the same name), a conversion arm in
//! `TryFrom<RawDeviceConfig>` and an arm in `build`. A model without
//! presets can use its params struct directly as the raw variant.

use serde::{Deserialize, Serialize};
use tierlab_core::ParamError;
use tierlab_core::device::DeviceModel;

use crate::flash_ssd::{FlashSsd, FlashSsdOverrides, FlashSsdParams};
use crate::hdd::{HddModel, HddOverrides, HddParams};
use crate::memory::{MemoryModel, MemoryOverrides, MemoryParams};
use crate::raid::{Raid, RaidParams};
use crate::smr::{SmrModel, SmrOverrides, SmrParams};
use crate::ssd::{SsdModel, SsdOverrides, SsdParams};
use crate::sswd::{SswdModel, SswdOverrides, SswdParams};

/// One device of a run, after preset and overrides have been merged.
/// Serializes back with every key explicit (no preset), so a run's output
/// records exactly the values used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase", try_from = "RawDeviceConfig")]
pub enum DeviceConfig {
    Memory(MemoryParams),
    Ssd(SsdParams),
    Hdd(HddParams),
    /// A RAID array over member devices, each configured on its own.
    Raid(RaidParams),
    /// A shingled (SMR) disk: bands, guard gaps, band read-modify-write.
    Smr(SmrParams),
    /// A drive-managed SMR disk: RAM buffer, on-platter persistent cache.
    Sswd(SswdParams),
    /// A detailed flash SSD: host queues, write buffer, page-level FTL,
    /// channels × chips × dies × planes, energy (docs/flash-ssd.md).
    #[serde(rename = "flash-ssd")]
    FlashSsd(FlashSsdParams),
}

/// What the config file holds: the model tag, an optional preset and the
/// keys to override, each model's keys checked by its overrides struct.
#[derive(Deserialize)]
#[serde(tag = "model", rename_all = "lowercase")]
enum RawDeviceConfig {
    Memory(MemoryOverrides),
    Ssd(SsdOverrides),
    Hdd(HddOverrides),
    /// No presets: the params are the keys (members are full configs).
    Raid(RaidParams),
    Smr(SmrOverrides),
    Sswd(SswdOverrides),
    #[serde(rename = "flash-ssd")]
    FlashSsd(FlashSsdOverrides),
}

impl TryFrom<RawDeviceConfig> for DeviceConfig {
    type Error = ParamError;

    fn try_from(raw: RawDeviceConfig) -> Result<Self, ParamError> {
        let config = match raw {
            RawDeviceConfig::Memory(keys) => {
                let mut params = match &keys.preset {
                    Some(name) => MemoryParams::preset(name)?,
                    None => MemoryParams::default(),
                };
                keys.apply_to(&mut params);
                DeviceConfig::Memory(params)
            }
            RawDeviceConfig::Ssd(keys) => {
                let mut params = match &keys.preset {
                    Some(name) => SsdParams::preset(name)?,
                    None => SsdParams::default(),
                };
                keys.apply_to(&mut params);
                DeviceConfig::Ssd(params)
            }
            RawDeviceConfig::Hdd(keys) => {
                let mut params = match &keys.preset {
                    Some(name) => HddParams::preset(name)?,
                    None => HddParams::default(),
                };
                keys.apply_to(&mut params);
                DeviceConfig::Hdd(params)
            }
            RawDeviceConfig::Raid(params) => DeviceConfig::Raid(params),
            RawDeviceConfig::Smr(keys) => DeviceConfig::Smr(keys.into_params()?),
            RawDeviceConfig::Sswd(keys) => DeviceConfig::Sswd(keys.into_params()?),
            RawDeviceConfig::FlashSsd(keys) => {
                let mut params = match &keys.preset {
                    Some(name) => FlashSsdParams::preset(name)?,
                    None => FlashSsdParams::default(),
                };
                keys.apply_to(&mut params);
                DeviceConfig::FlashSsd(params)
            }
        };
        config.validate()?;
        Ok(config)
    }
}

impl DeviceConfig {
    /// The model name as written in configs.
    pub fn model(&self) -> &'static str {
        match self {
            DeviceConfig::Memory(_) => "memory",
            DeviceConfig::Ssd(_) => "ssd",
            DeviceConfig::Hdd(_) => "hdd",
            DeviceConfig::Raid(_) => "raid",
            DeviceConfig::Smr(_) => "smr",
            DeviceConfig::Sswd(_) => "sswd",
            DeviceConfig::FlashSsd(_) => "flash-ssd",
        }
    }

    /// Checks the parameters (configs built in code skip deserialization).
    pub fn validate(&self) -> Result<(), ParamError> {
        match self {
            DeviceConfig::Memory(p) => p.validate(),
            DeviceConfig::Ssd(p) => p.validate(),
            DeviceConfig::Hdd(p) => p.validate(),
            DeviceConfig::Raid(p) => p.validate(),
            DeviceConfig::Smr(p) => p.validate(),
            DeviceConfig::Sswd(p) => p.validate(),
            DeviceConfig::FlashSsd(p) => p.validate(),
        }
    }

    /// Addressable bytes of the device this config builds.
    pub fn capacity_bytes(&self) -> u64 {
        match self {
            DeviceConfig::Memory(p) => p.capacity_bytes,
            DeviceConfig::Ssd(p) => p.capacity_bytes,
            DeviceConfig::Hdd(p) => p.capacity_bytes,
            DeviceConfig::Raid(p) => p.capacity_bytes(),
            DeviceConfig::Smr(p) => p.capacity_bytes(),
            DeviceConfig::Sswd(p) => p.capacity_bytes(),
            DeviceConfig::FlashSsd(p) => p.capacity_bytes(),
        }
    }
}

/// Builds the model a config describes. `seed` feeds the model's own
/// generator (today only the HDD's initial platter angle); composite
/// devices should derive distinct seeds for their members.
pub fn build(config: &DeviceConfig, seed: u64) -> Result<Box<dyn DeviceModel>, ParamError> {
    Ok(match config {
        DeviceConfig::Memory(p) => Box::new(MemoryModel::new(p)?),
        DeviceConfig::Ssd(p) => Box::new(SsdModel::new(p)?),
        DeviceConfig::Hdd(p) => Box::new(HddModel::new(p, seed)?),
        DeviceConfig::Raid(p) => Box::new(Raid::build(p, seed)?),
        DeviceConfig::Smr(p) => Box::new(SmrModel::new(p, seed)?),
        DeviceConfig::Sswd(p) => Box::new(SswdModel::new(p, seed)?),
        DeviceConfig::FlashSsd(p) => Box::new(FlashSsd::new(p, seed)?),
    })
}
