//! tierlab-devices: device models for the simulator, one file per device
//! kind, each a sans-IO state machine behind `tierlab_core::device::DeviceModel`.
//!
//! - [`memory`]: DRAM, NVDIMM and a ramdisk behind the block layer
//!   (fixed latency + bandwidth over parallel channels);
//! - [`ssd`]: flash SSD as a queueing model (parallel units behind a FIFO
//!   queue, GC slowdown with the recent write share, IOPS/bandwidth caps);
//! - [`flash_ssd`]: detailed flash SSD (host queues, write buffer,
//!   page-level FTL with greedy GC, channels/chips/dies/planes, energy),
//!   its FTL in [`flash_ftl`];
//! - [`hdd`]: seek curve, rotation, zoned transfer rate, command overhead,
//!   write cache, read-ahead, FIFO/SSTF queueing;
//! - [`smr`]: shingled disk (bands, guard gaps, band read-modify-write) on
//!   the HDD's mechanics;
//! - [`sswd`]: drive-managed SMR (RAM buffer, on-platter log-structured
//!   persistent cache, FIFO cleaning, idle-time cleaning).
//!
//! Every model is deterministic: time is integer nanoseconds and the only
//! randomness (the HDD's initial platter angle) comes from the seed given
//! to the constructor. Parameters are checked by `validate()` methods that
//! name the parameter, its value and the allowed range; nothing panics on a
//! bad config. A config names a model and optionally a preset whose values
//! the other keys override: see [`DeviceConfig`] and [`build`].
//!
//! Calibration notes live in each module's documentation and in
//! `docs/devices.md`.

mod check;
mod config;
pub mod flash_ftl;
pub mod flash_ssd;
pub mod hdd;
pub mod memory;
mod parallel;
pub mod raid;
pub mod smr;
pub mod ssd;
pub mod sswd;

pub use config::{DeviceConfig, build};
pub use flash_ssd::{FlashSsd, FlashSsdParams};
pub use hdd::{HddModel, HddParams, Scheduler};
pub use memory::{MemoryModel, MemoryParams};
pub use smr::{SmrModel, SmrParams};
pub use ssd::{SsdModel, SsdParams};
pub use sswd::{SswdModel, SswdParams};
