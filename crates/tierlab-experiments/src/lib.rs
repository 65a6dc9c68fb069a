//! tierlab's experiments as a library: the papers' reproductions
//! (`reproduce`), the workload analyses (`analyze`) and the live busy-rate
//! QoS controller (`qos_live`). Each takes typed options — clap-derived
//! structs, so the `tierlab` command line parses exactly these and stays a
//! thin layer — and writes its results (CSV, JSON, SVG) into an output
//! directory that Python reads back as DataFrames (docs/design.md).

pub mod analyze;
pub mod bench;
pub mod demo;
pub mod input;
pub mod plot;
pub mod progress;
pub mod qos_live;
pub mod reproduce;

/// What every experiment returns: its error is a message for the user
/// (what, where, what is allowed).
pub type ExpResult<T = ()> = Result<T, Box<dyn std::error::Error>>;
