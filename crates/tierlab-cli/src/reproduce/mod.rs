//! `tierlab reproduce SYSTEM [--quick] --out DIR`: re-run a paper's
//! experiments end to end and write its tables and figures' data. One file
//! per paper; each registers one variant below.

use clap::Subcommand;

use crate::CliResult;

mod qos;

#[derive(Subcommand)]
pub enum ReproduceCommand {
    /// Busy-rate IOPS guarantee (spec/qos.md): evaluations 1-3 (docs/qos.md).
    Qos(qos::QosArgs),
}

pub fn run(cmd: ReproduceCommand) -> CliResult {
    match cmd {
        ReproduceCommand::Qos(args) => qos::run(args),
    }
}
