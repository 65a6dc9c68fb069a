//! Options shared by the commands that read one trace (`--format`,
//! `--skip-bad`, ...) and the cache-policy and page-size checks of the
//! cache studies.

use std::path::PathBuf;

use clap::Args;
use tierlab_trace::formats::blkparse;
use tierlab_trace::prefetch::with_prefetch;
use tierlab_trace::{Format, ParamError, ReadOptions, RecordStream, TraceReader};

use crate::ExpResult;

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
    /// Read any delimited text by a column mapping (implies --format csv),
    /// e.g. "time=2,op=3,size=4,lbn=5,header" (docs/trace-formats.md).
    #[arg(long, value_name = "MAPPING")]
    pub csv_columns: Option<tierlab_trace::formats::csv::CsvColumns>,
}

impl InputArgs {
    pub fn open(&self) -> ExpResult<TraceReader> {
        let options = ReadOptions {
            format: self.format,
            skip_bad: self.skip_bad,
            blkparse_event: self.blk_event,
            csv: self.csv_columns.clone(),
        };
        Ok(TraceReader::open(&self.input, &options)?)
    }

    /// Opens the trace and runs `consume` over it, the trace parsed ahead
    /// on a second thread where that pays (`tierlab_trace::prefetch`);
    /// returns the reader too, for its counters (records skipped).
    pub fn read_with<T>(
        &self,
        consume: impl FnOnce(&mut dyn RecordStream) -> T,
    ) -> ExpResult<(T, TraceReader)> {
        let reader = self.open()?;
        let worth_it = reader.prefetch_pays();
        Ok(with_prefetch(reader, worth_it, consume))
    }

    /// Cache sizes `texts` as pages ([`tierlab_cache::size::sizes_in_pages`]);
    /// a share of the footprint costs a first pass over the input (so not
    /// from stdin). `what` names the option in errors.
    pub fn capacity_pages(
        &self,
        texts: &[String],
        what: &str,
        page_size: u32,
    ) -> ExpResult<Vec<u64>> {
        let footprint = || {
            if self.input.as_os_str() == "-" {
                return Err(tierlab_trace::TraceError::Invalid(
                    "a share of the footprint needs a first pass over the trace, and stdin \
                     cannot be read twice; give bytes or pages"
                        .to_string(),
                ));
            }
            self.read_with(|s| tierlab_cache::size::footprint_pages(s, page_size))
                .map_err(|e| tierlab_trace::TraceError::Invalid(e.to_string()))?
                .0
        };
        Ok(
            tierlab_cache::size::sizes_in_pages(texts, page_size, footprint).map_err(
                |e| match e {
                    tierlab_trace::TraceError::Param(p) => p.with_key(what).to_string(),
                    e => format!("{what}: {e}"),
                },
            )?,
        )
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

/// Parses the page size (a whole number of 512-byte sectors).
pub fn parse_page_size(text: &str) -> Result<u32, ParamError> {
    tierlab_cache::size::parse_page_size(text, "--page-size")
}

/// Checks a policy name ([`tierlab_cache::policies::canonical_name`]);
/// errors name the flag `--policy` (`ParamError::with_key` for another).
pub fn check_policy(name: &str) -> Result<String, ParamError> {
    tierlab_cache::policies::canonical_name(name)
        .map(str::to_string)
        .map_err(|e| e.with_key("--policy"))
}
