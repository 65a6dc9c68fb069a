//! `tierlab reproduce SYSTEM [--quick] --out DIR`: re-run a paper's
//! experiments end to end and write its tables and figures' data. One file
//! per paper; each registers one variant below.

use clap::Subcommand;

use crate::ExpResult;

pub mod atsmf;
pub mod hswd;
pub mod paper_vs_ours;
pub mod qos;
pub mod raid;

#[derive(Subcommand)]
pub enum ReproduceCommand {
    /// ATSMF memory/flash tiering: Tables 5-6, memory use, CDFs (docs/atsmf.md).
    Atsmf(atsmf::AtsmfArgs),
    /// Busy-rate IOPS guarantee: evaluations 1-3 (docs/qos.md).
    Qos(qos::QosArgs),
    /// HSWD over SMR: mapping, band selection, HSWD vs SSWD vs Flashcache (docs/hswd.md).
    Hswd(hswd::HswdArgs),
    /// RAID 1 of two single-chip flash SSDs vs one: read IOPS, latency, energy (docs/flash-ssd.md).
    Raid(raid::RaidArgs),
}

pub fn run(cmd: ReproduceCommand) -> ExpResult {
    match cmd {
        ReproduceCommand::Atsmf(args) => atsmf::run(args),
        ReproduceCommand::Qos(args) => qos::run(args),
        ReproduceCommand::Hswd(args) => hswd::run(args),
        ReproduceCommand::Raid(args) => raid::run(args),
    }
}
