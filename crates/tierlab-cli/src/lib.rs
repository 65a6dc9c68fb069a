//! The `tierlab` command line. Kept thin: argument parsing, output
//! formatting, and calls into the library crates (the experiments —
//! reproductions, analyses, the live QoS controller — are
//! `tierlab-experiments`). Also linked into the
//! Python extension so `pip install` puts the same `tierlab` on PATH.

mod bench_cmd;
mod cache_cmd;
mod crashcheck_cmd;
mod demo_cmd;
mod emulate_cmd;
mod gen_cmd;
mod run_cmd;
mod serve_cmd;
mod sim_cmd;
mod trace_cmd;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tierlab_experiments::{analyze, progress, qos_live, reproduce};

#[derive(Parser)]
#[command(name = "tierlab", version, about = "Simulate, replay and run hybrid block storage", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// No progress line on stderr (shown for runs over a second when stderr
    /// is a terminal, or with TIERLAB_PROGRESS=always).
    #[arg(long, short, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Read, convert, slice and summarise block IO traces.
    #[command(subcommand)]
    Trace(trace_cmd::TraceCommand),
    /// Simulate a storage stack described by a TOML config.
    Sim(sim_cmd::SimArgs),
    /// Run the same stack for real over files, block devices and RAM.
    Run(run_cmd::RunArgs),
    /// Simulate a stack and run it for real, side by side (per-tier latency and shares).
    Compare(run_cmd::CompareArgs),
    /// The one-minute tour on data tierlab generates itself (what setup.sh runs).
    Demo(tierlab_experiments::demo::DemoArgs),
    /// Measure trace parsing and generation throughput (see docs/benchmarks.md).
    Bench(bench_cmd::BenchCliArgs),
    /// Cache-only hit-ratio study: policies × capacities in one pass.
    Cache(cache_cmd::CacheArgs),
    /// Workload analyses of a trace (IO concentrations: docs/atsmf.md).
    #[command(subcommand)]
    Analyze(analyze::AnalyzeCommand),
    /// Re-run a paper's experiments and write its tables and figure data.
    #[command(subcommand)]
    Reproduce(reproduce::ReproduceCommand),
    /// Busy-rate IOPS guarantee on a live Linux machine (cgroup IO throttling; docs/qos.md).
    #[command(subcommand)]
    Qos(qos_live::QosCommand),
    /// Serve a file (FUSE) whose IOs take the time a device model says: real workloads on a modeled device (docs/emulate.md).
    Emulate(emulate_cmd::EmulateArgs),
    /// Serve a stack (ATSMF, HSWD, a cache, RAID of files, ...) as a block device over NBD (docs/serve.md).
    Serve(serve_cmd::ServeArgs),
    /// Check that a stack keeps every write acknowledged before a FLUSH through any crash (docs/crash-consistency.md).
    Crashcheck(crashcheck_cmd::CrashcheckArgs),
    /// Commands of the Python package's `tierlab`: this binary only says
    /// where they are (and clap would otherwise suggest `reproduce`).
    #[command(hide = true)]
    Report {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    #[command(hide = true)]
    Sweep {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// The error for a command of the Python package run on this binary.
pub(crate) fn python_command(name: &str) -> CliResult {
    Err(format!(
        "`tierlab {name}` is a command of the Python package, not of this binary: run it with \
         the Python package's tierlab (`.venv/bin/tierlab {name} ...` after ./scripts/setup.sh, \
         or `pip install` the project)"
    )
    .into())
}

/// Runs the CLI with explicit arguments (the first is the program name).
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // `--report` (the HTML report) is the Python package's: say so
            // rather than leave a bare "unexpected argument".
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && args.iter().any(|a| a == "--report")
            {
                eprintln!(
                    "\ntip: `--report` (the HTML report) is an option of the Python package's \
                     tierlab (`.venv/bin/tierlab ... --report` after ./scripts/setup.sh); this \
                     binary writes the same tables, and `.venv/bin/tierlab report DIR` renders \
                     them afterwards"
                );
            }
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    progress::set_quiet(cli.quiet);
    let result = match cli.command {
        Command::Trace(cmd) => trace_cmd::run(cmd),
        Command::Bench(args) => bench_cmd::run(args),
        Command::Demo(args) => demo_cmd::run(args),
        Command::Sim(args) => sim_cmd::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::Compare(args) => run_cmd::compare(args),
        Command::Cache(args) => cache_cmd::run(args),
        Command::Analyze(cmd) => analyze::run(cmd),
        Command::Reproduce(cmd) => reproduce::run(cmd),
        Command::Qos(cmd) => qos_live::run(cmd),
        Command::Emulate(args) => emulate_cmd::run(args),
        Command::Serve(args) => serve_cmd::run(args),
        Command::Crashcheck(args) => crashcheck_cmd::run(args),
        Command::Report { .. } => python_command("report"),
        Command::Sweep { .. } => python_command("sweep"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tierlab: error: {e}");
            ExitCode::from(1)
        }
    }
}

pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;
