//! `tierlab serve CONFIG (--unix SOCKET | --tcp [HOST:]PORT)`: the stack of
//! a config as a real block device over NBD (docs/serve.md).

use std::path::PathBuf;

use clap::Args;
use tierlab_real::EngineKind;
use tierlab_serve::{Listen, ServeOptions, Server};
use tierlab_stack::StackConfig;

use crate::CliResult;

#[derive(Args)]
#[command(group(clap::ArgGroup::new("listen").required(true).args(["unix", "tcp"])))]
pub struct ServeArgs {
    /// Stack configuration (TOML): the `[[devices]]` and `[policy]` of a
    /// `tierlab run` config (its tenants and outputs are ignored).
    pub config: PathBuf,
    /// Listen on a Unix socket at this path (clients: nbd+unix:///NAME?socket=PATH).
    #[arg(long, value_name = "SOCKET")]
    pub unix: Option<PathBuf>,
    /// Listen on TCP: PORT (loopback only), or HOST:PORT (e.g. 0.0.0.0:10809 for every interface).
    #[arg(long, value_name = "[HOST:]PORT")]
    pub tcp: Option<String>,
    /// The export's name (listed by NBD_OPT_LIST; the default export too).
    #[arg(long, default_value = "tierlab")]
    pub export: String,
    /// Refuse writes, trims and zeroing (EPERM).
    #[arg(long)]
    pub read_only: bool,
    /// Device IOs complete when the device models say: each `[[devices]]`
    /// table carries a model (model, preset, ...) besides its backing store.
    #[arg(long)]
    pub model_timing: bool,
    /// Write summary.json, metrics and policy logs here, every
    /// --stats-interval-s and at exit (the files of `tierlab run`, plus `serve`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seconds between outputs (and between checkpoints of --record); also
    /// the metrics' time-series interval.
    #[arg(long, default_value_t = 10.0)]
    pub stats_interval_s: f64,
    /// Record every host IO as a native tierlab trace (replay it with `tierlab sim`).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Device IOs in service at once (io_uring slots or threads); 0 does each inline.
    #[arg(long, default_value_t = 32)]
    pub io_threads: usize,
    /// io_uring (`uring`), io_uring with a kernel thread polling it (`uring-sqpoll`), a
    /// thread pool (`threads`), or io_uring where the kernel allows it (`auto`).
    #[arg(long, default_value = "auto", value_parser = parse_engine)]
    pub io_engine: EngineKind,
    /// Look for requests and completions this long (µs), yielding the CPU
    /// between looks, before sleeping; 0 sleeps at once (less CPU, more
    /// latency: docs/serve.md, "Waiting for requests").
    #[arg(long, default_value_t = tierlab_real::WAIT_POLL_US_DEFAULT,
          value_parser = clap::value_parser!(u32).range(0..=tierlab_real::WAIT_POLL_US_MAX as i64))]
    pub wait_poll_us: u32,
    /// Override a config key, e.g. --set policy.capacity_bytes=64MiB (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// At stop, write every cached byte back to the backing device even
    /// when the policy's cache survives a restart (HSWD); without it such a
    /// cache is flushed and comes back warm.
    #[arg(long)]
    pub write_back_on_stop: bool,
    /// Log each connection on stderr.
    #[arg(long, short)]
    pub verbose: bool,
}

fn parse_engine(s: &str) -> Result<EngineKind, tierlab_core::ParamError> {
    s.parse()
}

pub fn run(args: ServeArgs) -> CliResult {
    let (config, skipped) = StackConfig::load(&args.config, &args.set)?;
    let base_dir = args.config.parent().map(PathBuf::from).unwrap_or_default();
    if args.io_threads > 1024 {
        return Err(format!("--io-threads {}: give 0 to 1024", args.io_threads).into());
    }
    let listen = match (&args.unix, &args.tcp) {
        (Some(p), None) => Listen::Unix(p.clone()),
        (None, Some(t)) => Listen::parse_tcp(t)?,
        _ => unreachable!("clap requires exactly one of --unix and --tcp"),
    };
    let opts = ServeOptions {
        export_name: args.export.clone(),
        read_only: args.read_only,
        model_timing: args.model_timing,
        out_dir: args.out.clone(),
        stats_interval_s: args.stats_interval_s,
        record: args.record.clone(),
        io_engine: args.io_engine,
        io_threads: args.io_threads,
        wait_poll_us: args.wait_poll_us,
        verbose: args.verbose,
        write_back_on_stop: args.write_back_on_stop,
    };
    // Before any thread starts, so none of them takes SIGINT/SIGTERM (the
    // guard restores the mask when serving ends: the CLI also runs inside
    // Python).
    let _blocked = tierlab_real::signals::BlockedStopSignals::new()?;
    let mut server = Server::bind(&config, &base_dir, &listen, opts)
        .map_err(|e| format!("{}: {e}", args.config.display()))?;
    server.watch_signals()?;
    let e = server.export();
    println!("tierlab serve: {}", server.uri());
    println!(
        "  export {:?}: {} bytes{}, blocks {} / {} / {} bytes (min / preferred / max)",
        e.name,
        e.size_bytes,
        if e.read_only { ", read-only" } else { "" },
        e.block_min_bytes,
        e.block_preferred_bytes,
        e.block_max_bytes
    );
    println!("  stack: {}", e.description);
    println!(
        "  tierlab:tier flags: {}",
        server
            .tier_names()
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{i} = {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("  IO engine: {}", server.io_engine());
    if !e.can_multi_conn {
        println!(
            "  note: this policy's FLUSH does not make acknowledged data durable where a \
             restart reads it (docs/crash-consistency.md), so CAN_MULTI_CONN is not advertised"
        );
    }
    if !skipped.is_empty() {
        println!("  (ignored the config's {})", skipped.join(", "));
    }
    println!("  stop with Ctrl-C or SIGTERM: dirty data is written back first");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let report = server.run()?;
    println!(
        "tierlab serve: stopped ({}) after {:.1} s: {} connections, {} reads, {} writes, {} flushes, \
         {} trims, {} zeroings; write-back took {:.2} s",
        report.stopped_by,
        report.serving_s,
        report.connections,
        report.requests.read,
        report.requests.write,
        report.requests.flush,
        report.requests.trim,
        report.requests.write_zeroes,
        report.drain_s
    );
    if let Some(dir) = &args.out {
        println!("  outputs: {}", dir.display());
    }
    if let Some(r) = &args.record {
        println!(
            "  recorded {} host IOs: {}",
            report.recorded_ios,
            r.display()
        );
    }
    Ok(())
}
