//! A generated workload written to a file, with its planted ground truth:
//! what `tierlab trace gen` does, as a library call (resolve first, so a
//! bad parameter fails before any file exists; then the trace; then the
//! truth, cut where the trace ended).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::{ConcentrationSchedule, GeneratorParams, KvParams, concentration_truth, resolve};
use crate::writer::{WriteOptions, WriteSummary, write_trace};
use crate::{DeviceTable, Format, IoRecord, RecordStream, Result, TimeBase};

/// One generator (or preset) with its parameters and seed, ready to write.
pub struct GenJob {
    resolved: GeneratorParams,
    seed: u64,
    truth: Option<ConcentrationSchedule>,
    /// Time of the last record written (to cut the ground truth where a
    /// `count` limit ended the stream).
    last_time_ns: Option<u64>,
}

impl GenJob {
    /// Resolves `name` with `params`; with `truth`, also the schedule of
    /// planted concentrations (see [`GenJob::has_truth`]).
    pub fn new(name: &str, params: &KvParams, seed: u64, truth: bool) -> Result<GenJob> {
        let resolved = resolve(name, params)?;
        let truth = if truth {
            concentration_truth(name, params, seed)?
        } else {
            None
        };
        Ok(GenJob {
            resolved,
            seed,
            truth,
            last_time_ns: None,
        })
    }

    /// Whether the ground truth was asked for and the generator plants
    /// concentrations (only io-concentration and the atsmf.* presets do).
    pub fn has_truth(&self) -> bool {
        self.truth.is_some()
    }

    /// Writes the workload to `out` in `format`. Times are rounded down to
    /// the format's resolution (MSR: 100 ns ticks; rounding down keeps the
    /// order).
    pub fn write_trace(&mut self, out: &Path, format: Format) -> Result<WriteSummary> {
        let mut stream = Tracking {
            inner: self.resolved.build(self.seed)?,
            last_time_ns: None,
            quantum_ns: if format == Format::Msr { 100 } else { 1 },
        };
        let summary = write_trace(&mut stream, out, format, &WriteOptions::default())?;
        self.last_time_ns = stream.last_time_ns;
        Ok(summary)
    }

    /// Writes the planted concentrations as CSV to `path` and returns how
    /// many; those that start after the last record written by
    /// [`GenJob::write_trace`] were never seen and are left out. `Ok(None)`
    /// when there is no truth (see [`GenJob::has_truth`]).
    pub fn write_truth(&self, path: &Path) -> std::io::Result<Option<u64>> {
        let Some(schedule) = &self.truth else {
            return Ok(None);
        };
        let until = self.last_time_ns.map_or(0, |t| t as i64 + 1);
        let mut w = BufWriter::new(File::create(path)?);
        let rows = super::write_truth_csv(schedule.clone().until(until), &mut w)?;
        w.flush()?;
        Ok(Some(rows))
    }
}

/// Passes records through, remembering the last time and rounding times
/// down to a multiple of `quantum_ns`.
struct Tracking {
    inner: Box<dyn RecordStream + Send>,
    last_time_ns: Option<u64>,
    quantum_ns: u64,
}

impl RecordStream for Tracking {
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        let mut r = self.inner.next_record()?;
        if let Some(r) = &mut r {
            r.time_ns -= r.time_ns % self.quantum_ns;
            self.last_time_ns = Some(r.time_ns);
        }
        Ok(r)
    }
    fn devices(&self) -> &DeviceTable {
        self.inner.devices()
    }
    fn time_base(&self) -> TimeBase {
        self.inner.time_base()
    }
}
