//! tierlab-real: the real executor. The same sans-IO policies, configs,
//! tenants and metrics as the simulator, over real files, block devices
//! and RAM, moving real bytes (docs/real.md).

pub mod backend;
pub mod compare;
pub mod datapath;
pub mod engine;
pub mod error;
pub mod executor;
pub mod identity;
pub mod ids;
pub mod iobuf;
pub mod open;
pub mod pool;
pub mod raid;
pub mod raid_bitmap;
pub mod same_file;
pub mod signals;
pub mod verify;

pub use engine::EngineKind;
pub use error::RunError;
pub use executor::{
    RealInfo, RealOptions, RealResult, WAIT_POLL_US_DEFAULT, WAIT_POLL_US_MAX, run, write_outputs,
};
