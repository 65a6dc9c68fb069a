//! tierlab-sim: the simulator executor. A deterministic discrete-event loop
//! drives a sans-IO policy over device models, fed by drivers (open-loop
//! replay, closed-loop iodepth, tenants with IOPS caps).

pub mod build;
pub mod config;
pub mod driver;
pub mod engine;
pub mod run;
mod slab;

pub use driver::{Arrival, DriverMode, IopsBudget, Region, StopAfter, Tenant};
pub use engine::{Counts, Observer, Progress, RunOutcome, SimError, Simulation};
