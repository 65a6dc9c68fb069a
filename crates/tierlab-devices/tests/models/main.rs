//! Behaviour tests of the device models against hand-computed
//! expectations, the `DeviceModel` contract and the model-sanity checks of
//! issue 3. One test binary (one link) for all of them.
//!
//! Calibration numbers are printed with `--nocapture`:
//! `cargo test -p tierlab-devices --test models -- --nocapture calibration`.

mod config;
mod contract;
mod driver;
mod flash_ssd;
mod hdd;
mod memory;
mod smr;
mod ssd;
