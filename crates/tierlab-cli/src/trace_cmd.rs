use std::path::PathBuf;

use clap::{Args, Subcommand};
use tierlab_trace::slice::{Rebase, Slice, SliceSpec, find_densest};
use tierlab_trace::units::{format_size_bytes, parse_size_bytes};
use tierlab_trace::writer::{WriteOptions, WriteSummary, write_trace};
use tierlab_trace::{Format, RecordStream, stats};

use crate::CliResult;
pub use tierlab_experiments::input::{InputArgs, report_skipped};

#[derive(Args, Clone)]
pub struct OutputArgs {
    /// Output file (`-` for stdout, except native). Text outputs ending in
    /// .gz/.bz2/.xz/.zst are compressed.
    pub output: PathBuf,
    /// Output format: fio, msr, disksim or native (default: from the output
    /// name — .iolog → fio, .csv → msr, .disksim → disksim, .tlt/.native → native).
    #[arg(long)]
    pub to: Option<Format>,
    /// fio: file name to write for each device (`{device}`, `{id}` are replaced).
    #[arg(long, value_name = "TEMPLATE")]
    pub fio_filename: Option<String>,
}

impl OutputArgs {
    pub fn format(&self) -> CliResult<Format> {
        if let Some(f) = self.to {
            return Ok(f);
        }
        Format::from_output_name(&self.output).ok_or_else(|| {
            format!(
                "cannot tell the output format from {:?}; pass --to (fio, msr, disksim or native)",
                self.output
            )
            .into()
        })
    }

    pub fn write(&self, stream: &mut dyn RecordStream) -> CliResult<WriteSummary> {
        let format = self.format()?;
        let options = WriteOptions {
            fio_filename: self.fio_filename.clone(),
        };
        let summary = write_trace(stream, &self.output, format, &options)?;
        if summary.rounded_to_us > 0 {
            eprintln!(
                "tierlab: note: {} records had times finer than fio's 1 µs resolution and were rounded down",
                summary.rounded_to_us
            );
        }
        if summary.retimed > 0 {
            eprintln!(
                "tierlab: note: {} records were earlier than the record before them; fio replays in order, so they were written at their predecessor's time",
                summary.retimed
            );
        }
        Ok(summary)
    }
}

fn parse_range<T>(
    text: &str,
    what: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> CliResult<(T, T)> {
    let (a, b) = text
        .split_once(['-', ':', '\u{2013}'])
        .ok_or_else(|| format!("invalid {what} {text:?}: expected START-END, e.g. 1920-2020"))?;
    Ok((parse(a.trim())?, parse(b.trim())?))
}

#[derive(Subcommand)]
pub enum TraceCommand {
    /// List the trace formats tierlab reads and writes.
    Formats,
    /// Generate a synthetic workload or a preset as a trace file.
    Gen(crate::gen_cmd::GenArgs),
    /// Convert a trace to another format.
    Convert {
        #[command(flatten)]
        input: InputArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Keep part of a trace: a time window, an LBA range, the first N records, one device.
    Slice {
        #[command(flatten)]
        input: InputArgs,
        #[command(flatten)]
        output: OutputArgs,
        /// Time window in minutes from the first record, START-END (e.g. 1920-2020).
        #[arg(long, value_name = "START-END")]
        minutes: Option<String>,
        /// Byte range START-END that a record's offset must fall in (units allowed: 0-800GiB).
        #[arg(long, value_name = "START-END")]
        lba: Option<String>,
        /// Keep at most this many records.
        #[arg(long, value_name = "N")]
        first: Option<u64>,
        /// Keep one device (by its name in the trace, e.g. hm_0 or 8,0).
        #[arg(long)]
        device: Option<String>,
    },
    /// Cut the contiguous region of SIZE holding the most IOs, re-based to offset 0.
    Densest {
        #[command(flatten)]
        input: InputArgs,
        #[command(flatten)]
        output: OutputArgs,
        /// Region size (e.g. 800GiB).
        #[arg(long)]
        size: String,
        /// Region alignment and counting granularity.
        #[arg(long, default_value = "1GiB")]
        granule: String,
        /// Only consider this device.
        #[arg(long)]
        device: Option<String>,
    },
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
        TraceCommand::Gen(args) => crate::gen_cmd::run(args),
        TraceCommand::Formats => {
            for f in Format::ALL {
                let w = if f.is_writable() {
                    "read/write"
                } else {
                    "read"
                };
                println!("{:<11} {:<10} {}", f.name(), w, f.description());
            }
            Ok(())
        }
        TraceCommand::Convert { input, output } => {
            let mut reader = input.open()?;
            let summary = output.write(&mut reader)?;
            report_skipped(&reader);
            eprintln!(
                "tierlab: wrote {} records ({} -> {})",
                summary.records,
                reader.format(),
                output.format()?
            );
            Ok(())
        }
        TraceCommand::Slice {
            input,
            output,
            minutes,
            lba,
            first,
            device,
        } => {
            let spec = SliceSpec {
                minutes: minutes
                    .map(|m| {
                        parse_range(&m, "minute window", |x| {
                            x.parse::<f64>()
                                .map_err(|_| format!("invalid minute {x:?}"))
                        })
                    })
                    .transpose()?,
                offset_range_bytes: lba
                    .map(|r| {
                        parse_range(&r, "LBA range", |t| {
                            parse_size_bytes(t).map_err(|e| e.to_string())
                        })
                    })
                    .transpose()?,
                first,
                device,
            };
            let reader = input.open()?;
            let mut slice = Slice::new(reader, spec)?;
            let summary = output.write(&mut slice)?;
            report_skipped(slice.inner());
            eprintln!(
                "tierlab: kept {} of {} records read",
                summary.records, slice.seen
            );
            if summary.records == 0 {
                // Legitimate (a window past the end), but never silent.
                eprintln!(
                    "tierlab: warning: the slice is empty: no record of the {} read matched{}",
                    slice.seen,
                    slice
                        .span_minutes()
                        .map(|m| format!(" (the trace spans {m:.2} minutes)"))
                        .unwrap_or_default()
                );
            }
            Ok(())
        }
        TraceCommand::Densest {
            input,
            output,
            size,
            granule,
            device,
        } => {
            let size_bytes = parse_size_bytes(&size)?;
            let granule_bytes = parse_size_bytes(&granule)?;
            if input.input.as_os_str() == "-" {
                return Err("densest reads the trace twice: give a file, not stdin".into());
            }
            let mut first_pass = input.open()?;
            let region = find_densest(
                &mut first_pass,
                size_bytes,
                granule_bytes,
                device.as_deref(),
            )?;
            report_skipped(&first_pass);
            eprintln!(
                "tierlab: densest {} region: device {:?} bytes {}..{} ({}..{}) holds {} of {} IOs ({:.1} %)",
                format_size_bytes(size_bytes),
                region.device,
                region.offset_bytes,
                region.offset_bytes.saturating_add(region.size_bytes),
                format_size_bytes(region.offset_bytes),
                format_size_bytes(region.offset_bytes.saturating_add(region.size_bytes)),
                region.ios_inside,
                region.ios_total,
                100.0 * region.ios_inside as f64 / region.ios_total as f64
            );
            let expected = region.ios_inside;
            let mut rebase = Rebase::new(input.open()?, region);
            output.write(&mut rebase)?;
            if rebase.kept != expected {
                // The two passes saw different data: a pipe, or a file that changed.
                let _ = std::fs::remove_file(&output.output);
                return Err(format!(
                    "the second pass over {} found {} IOs in the region, the first {expected}: give a regular file that does not change (not a pipe)",
                    input.input.display(),
                    rebase.kept
                )
                .into());
            }
            if rebase.clipped > 0 {
                eprintln!(
                    "tierlab: note: {} IOs ran past the region's end and were clipped to it",
                    rebase.clipped
                );
            }
            Ok(())
        }
        TraceCommand::Stats { input, json } => {
            // Parsing runs on a second thread, the statistics on this one.
            let (s, reader) = input.read_with(stats::compute)?;
            let s = s?;
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
