//! `tierlab crashcheck CONFIG`: does the stack keep what it acknowledged
//! through a power cut? Records a workload over in-memory stores, rebuilds
//! the stores as crashes could leave them, restarts the stack on each and
//! checks every sector (docs/crash-consistency.md).

use std::path::PathBuf;

use clap::Args;
use tierlab_core::ParamError;
use tierlab_crash::{CrashError, Options, Report, Stack, StateKind};
use tierlab_stack::StackConfig;

use crate::CliResult;

#[derive(Args)]
pub struct CrashcheckArgs {
    /// Stack configuration (TOML): `[[devices]]` (each with capacity_bytes;
    /// `path = "ram"` is volatile) and `[policy]`. The stores are held in
    /// memory: at most 1 GiB in all.
    pub config: PathBuf,
    /// Seeds the workload, the device timing and every crash state.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Host IOs in the recorded workload.
    #[arg(long, default_value_t = 2000)]
    pub host_ios: u64,
    /// A FLUSH after every this many host IOs on average (0: none).
    #[arg(long, default_value_t = 25)]
    pub flush_every: u64,
    #[arg(long, default_value_t = 30)]
    pub read_percent: u64,
    /// Share of IOs (percent) to a hot eighth of the region.
    #[arg(long, default_value_t = 60)]
    pub hot_percent: u64,
    /// Host IOs in flight at most.
    #[arg(long, default_value_t = 4)]
    pub iodepth: u64,
    /// Largest host IO, in the policy's alignment units.
    #[arg(long, default_value_t = 4)]
    pub max_io_units: u64,
    /// The workload's region of the volume (e.g. 4MiB; the whole volume if larger).
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub region_bytes: u64,
    /// Crash states to check (four per crash point: durable, everything, subset, torn).
    /// Ignored with --surprise-every.
    #[arg(long, default_value_t = 400)]
    pub states: u64,
    /// Surprise shutdown instead of random states: at every N-th device
    /// write, every write before it landed and none after (1: every write).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub surprise_every: u64,
    /// Real device errors: every device write from the N-th on (0-based)
    /// fails, and every flush once one failed, as a store that died; the
    /// policy is told, and one that cannot survive it stops there.
    #[arg(long, value_name = "N")]
    pub fail_writes_from: Option<u64>,
    /// A transient device error: only the N-th device write (0-based)
    /// fails; flushes keep working (a stack must not acknowledge it).
    #[arg(long, value_name = "N")]
    pub fail_write_at: Option<u64>,
    /// Replay one state: CRASH_POINT:KIND (as a violation prints it).
    #[arg(long, value_name = "POINT:KIND", value_parser = parse_replay)]
    pub replay: Option<(u64, StateKind)>,
    /// Write crashcheck.json (the report and every violation) here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Override a config key, e.g. --set policy.capacity_bytes=1MiB (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

fn parse_size(s: &str) -> Result<u64, String> {
    tierlab_trace::units::parse_size_bytes(s).map_err(|e| e.to_string())
}

fn parse_replay(s: &str) -> Result<(u64, StateKind), String> {
    let kinds = StateKind::ALL.map(|k| k.as_str()).join(", ");
    let (p, k) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}`: expected CRASH_POINT:KIND, e.g. 812:torn"))?;
    let p = p
        .parse()
        .map_err(|_| format!("`{p}`: the crash point is a whole number"))?;
    let k = StateKind::parse(k).ok_or_else(|| format!("`{k}`: the kind is one of {kinds}"))?;
    Ok((p, k))
}

pub fn run(args: CrashcheckArgs) -> CliResult {
    let (config, _) = StackConfig::load(&args.config, &args.set)?;
    let origin = args.config.display().to_string();
    let stack = Stack::from_config(&config).map_err(|e| e.at(&origin))?;
    let opts = Options {
        seed: args.seed,
        host_ios: args.host_ios,
        flush_every: args.flush_every,
        read_percent: args.read_percent,
        hot_percent: args.hot_percent,
        iodepth: args.iodepth,
        max_io_units: args.max_io_units,
        region_bytes: args.region_bytes,
        states: args.states,
        only: args.replay,
        surprise_every: args.surprise_every,
        fail_writes_from: args.fail_writes_from,
        fail_write_at: args.fail_write_at,
        ..Options::default()
    };
    let report = tierlab_crash::check(&stack, &opts).map_err(|e| match e {
        // An option is a flag here: `--host-ios`, not `host_ios`.
        CrashError::Option(p) => ParamError::new(
            format!("--{}", p.key().replace('_', "-")),
            p.found,
            p.expected,
        )
        .to_string(),
        e => format!("{origin}: {e}"),
    })?;
    print_report(&report);
    let replay_base = replay_command(&args);
    for v in report.violations.iter().take(5) {
        println!(
            "  VIOLATION at crash point {} ({}): {}\n    needs {} of its {} unflushed writes{}; replay: {replay_base} --replay {}:{}",
            v.crash_point,
            v.kind.as_str(),
            v.message,
            v.writes_applied.len(),
            v.unflushed_writes,
            if v.torn.is_some() {
                " and a torn write"
            } else {
                ""
            },
            v.crash_point,
            v.kind.as_str()
        );
    }
    if let Some(dir) = &args.out {
        let config = args.config.display().to_string();
        tierlab_crash::output::write_report_json(dir, &config, args.seed, &report, &replay_base)?;
    }
    if !report.violations.is_empty() {
        return Err(format!(
            "{}: {} of {} crash states lose acknowledged data (or fail to restart)",
            args.config.display(),
            report.violations.len(),
            report.states()
        )
        .into());
    }
    Ok(())
}

fn print_report(r: &Report) {
    let kinds: Vec<String> = StateKind::ALL
        .iter()
        .zip(r.states_by_kind)
        .map(|(k, n)| format!("{} {n}", k.as_str()))
        .collect();
    println!(
        "{}: {} host writes, {} FLUSHes, {} device writes, {} device flushes ({} log events)",
        r.policy, r.host_writes, r.host_flushes, r.device_writes, r.device_flushes, r.log_events
    );
    println!(
        "checked {} crash states at {} crash points ({}), {} sectors read back: {} violations",
        r.states(),
        r.crash_points,
        kinds.join(", "),
        r.sectors_checked,
        r.violations.len()
    );
    if !r.volatile_stores.is_empty() {
        println!(
            "volatile (path = \"ram\"; zeros after every crash, so not expected to survive): {}",
            r.volatile_stores.join(", ")
        );
    }
    if r.host_ios_failed > 0 || r.stopped_at_error {
        println!(
            "device errors: {} host IOs answered with an error{}",
            r.host_ios_failed,
            if r.stopped_at_error {
                "; the stack stopped at a failed device IO (fail-stop), the log ends there"
            } else {
                ""
            }
        );
    }
    if r.degraded_reads > 0 {
        println!(
            "{} of those states were also read back with one array member lost after the restart",
            r.degraded_reads
        );
    }
}

/// The command line that replays this run (a violation adds --replay).
fn replay_command(a: &CrashcheckArgs) -> String {
    let mut c = format!(
        "tierlab crashcheck {} --seed {} --host-ios {} --flush-every {} --read-percent {} --hot-percent {} --iodepth {} --max-io-units {} --region-bytes {}",
        a.config.display(),
        a.seed,
        a.host_ios,
        a.flush_every,
        a.read_percent,
        a.hot_percent,
        a.iodepth,
        a.max_io_units,
        a.region_bytes
    );
    if let Some(n) = a.fail_writes_from {
        c.push_str(&format!(" --fail-writes-from {n}"));
    }
    if let Some(n) = a.fail_write_at {
        c.push_str(&format!(" --fail-write-at {n}"));
    }
    if a.surprise_every > 0 {
        c.push_str(&format!(" --surprise-every {}", a.surprise_every));
    }
    for s in &a.set {
        c.push_str(&format!(" --set {s}"));
    }
    c
}
