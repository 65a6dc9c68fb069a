use std::path::PathBuf;

use clap::{Args, Subcommand};
use tierlab_trace::formats::blkparse;
use tierlab_trace::{Format, ReadOptions, TraceReader, stats};

use crate::CliResult;

#[derive(Args, Clone)]
pub struct InputArgs {
    /// Trace file (`-` for stdin); .gz/.bz2/.xz/.zst are decompressed transparently.
    pub input: PathBuf,
    /// Trace format (detected from the content when omitted).
    #[arg(long, short = 'f')]
    pub format: Option<Format>,
    /// Skip malformed records and report how many, instead of stopping at the first.
    #[arg(long)]
    pub skip_bad: bool,
    /// blkparse: the event that marks an IO, Q or D (default: D if present, else Q).
    #[arg(long, value_name = "Q|D")]
    pub blk_event: Option<blkparse::Event>,
}

impl InputArgs {
    pub fn open(&self) -> CliResult<TraceReader> {
        let options = ReadOptions {
            format: self.format,
            skip_bad: self.skip_bad,
            blkparse_event: self.blk_event,
        };
        Ok(TraceReader::open(&self.input, &options)?)
    }
}

/// Reports records skipped under --skip-bad, so nothing is dropped silently.
pub fn report_skipped(reader: &TraceReader) {
    if reader.skipped_bad() > 0 {
        eprintln!(
            "tierlab: warning: skipped {} malformed records in {} (--skip-bad)",
            reader.skipped_bad(),
            reader.path().display()
        );
    }
}

#[derive(Subcommand)]
pub enum TraceCommand {
    /// Summary statistics of a trace.
    Stats {
        #[command(flatten)]
        input: InputArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: TraceCommand) -> CliResult {
    match cmd {
        TraceCommand::Stats { input, json } => {
            let mut reader = input.open()?;
            let s = stats::compute(&mut reader)?;
            report_skipped(&reader);
            if json {
                let mut v = serde_json::to_value(&s)?;
                v["format"] = reader.format().name().into();
                v["skipped_bad"] = reader.skipped_bad().into();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("format               {}", reader.format());
                println!("requests             {}", s.requests);
                println!("reads                {}", s.reads);
                println!("writes               {}", s.writes);
                if s.trims + s.flushes > 0 {
                    println!("trims                {}", s.trims);
                    println!("flushes              {}", s.flushes);
                }
                println!("read_bytes           {}", s.read_bytes);
                println!("write_bytes          {}", s.write_bytes);
                println!("footprint_4k_blocks  {}", s.footprint_4k_blocks);
                match s.span_s {
                    Some(span) => println!("span_s               {span:.3}"),
                    None => println!("span_s               - (no timestamps)"),
                }
                println!("devices              {}", s.devices);
                if let Some(w) = s.write_ratio {
                    println!("write_ratio          {w:.4}");
                }
                if let Some(rt) = s.mean_response_ns {
                    println!("mean_response_us     {:.1}", rt / 1e3);
                }
                if reader.skipped_bad() > 0 {
                    println!("skipped_bad          {}", reader.skipped_bad());
                }
            }
            Ok(())
        }
    }
}
