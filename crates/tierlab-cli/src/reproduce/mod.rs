//! `tierlab reproduce SYSTEM [--quick] --out DIR`: re-run a paper's
//! experiments end to end and write its tables and figures' data. One file
//! per paper; each registers one variant below.

use clap::Subcommand;

use crate::CliResult;

#[derive(Subcommand)]
pub enum ReproduceCommand {}

pub fn run(cmd: ReproduceCommand) -> CliResult {
    match cmd {}
}
