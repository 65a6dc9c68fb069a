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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: ReproduceCommand,
    }

    /// `XArgs::new(out)` (what Rust and Python callers build) is what the
    /// command line gives with only `--out`: the defaults cannot drift.
    #[test]
    fn new_is_the_command_lines_defaults() {
        let parsed = |system: &str| {
            Cli::try_parse_from(["reproduce", system, "--out", "o"])
                .unwrap()
                .command
        };
        let out = std::path::PathBuf::from("o");
        let same = |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        };
        match parsed("atsmf") {
            ReproduceCommand::Atsmf(a) => same(&a, &atsmf::AtsmfArgs::new(out.clone())),
            _ => unreachable!(),
        }
        match parsed("hswd") {
            ReproduceCommand::Hswd(a) => same(&a, &hswd::HswdArgs::new(out.clone())),
            _ => unreachable!(),
        }
        match parsed("qos") {
            ReproduceCommand::Qos(a) => same(&a, &qos::QosArgs::new(out.clone())),
            _ => unreachable!(),
        }
        match parsed("raid") {
            ReproduceCommand::Raid(a) => same(&a, &raid::RaidArgs::new(out.clone())),
            _ => unreachable!(),
        }
    }
}
