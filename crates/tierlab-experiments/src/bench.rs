//! `tierlab bench`: throughput of the trace pipeline, measured side by side
//! in one run (these machines are shared and noisy; compare ratios).
//! Numbers go to docs/benchmarks.md with the command that produced them.
//! The command line prints the [`BenchResult`]s this returns.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use tierlab_trace::writer::{WriteOptions, write_trace};
use tierlab_trace::{DeviceTable, Format, IoRecord, Op, RecordStream, TimeBase};

use tierlab_trace::generate::{KvParams, from_spec};

use crate::ExpResult;

#[derive(Args)]
pub struct BenchArgs {
    /// Records per benchmark.
    #[arg(long, default_value_t = 5_000_000)]
    pub records: u64,
    /// Repetitions; the best (least disturbed) run is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Directory for the temporary trace files (default: the system temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// A cheap deterministic stream (splitmix64) used to make the bench input
/// files, so parsing is measured on data with realistic field widths.
struct BenchInput {
    left: u64,
    state: u64,
    time_ns: u64,
    devices: DeviceTable,
}

impl BenchInput {
    fn new(records: u64) -> Self {
        let mut devices = DeviceTable::new();
        devices.intern("hm_0");
        BenchInput {
            left: records,
            state: 0x9e37_79b9_7f4a_7c15,
            time_ns: 1_172_164_929_551_466_300,
            devices,
        }
    }
}

impl RecordStream for BenchInput {
    fn next_record(&mut self) -> tierlab_trace::Result<Option<IoRecord>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        self.time_ns += 100 * (1 + (z & 0x3fff));
        Ok(Some(IoRecord {
            time_ns: self.time_ns,
            offset_bytes: (z >> 20) % (1 << 22) * 4096,
            size_bytes: 512 << ((z >> 8) % 8),
            device_id: 0,
            op: if z & 0x10000 == 0 {
                Op::Read
            } else {
                Op::Write
            },
            response_ns: Some(100 * ((z >> 40) & 0xffff)),
        }))
    }
    fn devices(&self) -> &DeviceTable {
        &self.devices
    }
    fn time_base(&self) -> TimeBase {
        TimeBase::UnixEpoch
    }
}

/// Writes the bench input (`records` records with MSR Cambridge field
/// widths: 18-digit filetimes, 11-digit offsets, 512 B–64 KiB requests over
/// 16 GiB of one volume) to `path` in `format`; the same records every time.
pub fn write_input(path: &Path, format: Format, records: u64) -> ExpResult<()> {
    write_trace(
        &mut BenchInput::new(records),
        path,
        format,
        &WriteOptions::default(),
    )?;
    Ok(())
}

/// One benchmark: the best of the repetitions.
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub name: String,
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub target_records_per_s: Option<f64>,
}

/// Drains a stream, returning (records, xor of offsets) so the work cannot
/// be optimised away.
fn drain(stream: &mut dyn RecordStream) -> ExpResult<(u64, u64)> {
    let mut n = 0u64;
    let mut check = 0u64;
    while let Some(r) = stream.next_record()? {
        n += 1;
        check ^= r.offset_bytes.wrapping_add(r.time_ns);
    }
    Ok((n, check))
}

fn best_of<F: FnMut() -> ExpResult<(u64, u64)>>(repeat: u32, mut f: F) -> ExpResult<(u64, f64)> {
    let mut best = f64::INFINITY;
    let mut records = 0;
    let mut checks = Vec::new();
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let (n, check) = f()?;
        best = best.min(start.elapsed().as_secs_f64());
        records = n;
        checks.push(check);
    }
    // Every repetition must have read the same data.
    assert!(
        checks.windows(2).all(|w| w[0] == w[1]),
        "bench runs disagree: {checks:?}"
    );
    Ok((records, best))
}

/// Writes the bench input files into a temporary directory (under
/// `args.dir`), then measures reading, stats and every generator of
/// [`generators`], `args.repeat` times each.
pub fn run(args: &BenchArgs) -> ExpResult<Vec<BenchResult>> {
    let dir = tempfile::Builder::new()
        .prefix("tierlab-bench")
        .tempdir_in(args.dir.clone().unwrap_or_else(std::env::temp_dir))?;
    let msr = dir.path().join("bench.csv");
    let native = dir.path().join("bench.tlt");
    eprintln!(
        "tierlab: writing {} records as MSR CSV and native ...",
        args.records
    );
    write_input(&msr, Format::Msr, args.records)?;
    write_input(&native, Format::Native, args.records)?;
    let mut results = Vec::new();
    let mut record = |name: &str, (n, secs): (u64, f64), target: Option<f64>| {
        results.push(BenchResult {
            name: name.to_string(),
            records: n,
            seconds: secs,
            records_per_s: n as f64 / secs,
            target_records_per_s: target,
        });
    };
    // Warm the page cache once so the runs measure parsing, not the disk.
    drain(&mut tierlab_trace::open(&msr)?)?;
    record(
        "read MSR CSV (1 core)",
        best_of(args.repeat, || drain(&mut tierlab_trace::open(&msr)?))?,
        Some(5e6),
    );
    drain(&mut tierlab_trace::open(&native)?)?;
    record(
        "read native binary (1 core)",
        best_of(args.repeat, || drain(&mut tierlab_trace::open(&native)?))?,
        Some(50e6),
    );
    record(
        "stats on native (footprint set)",
        best_of(args.repeat, || {
            let s = tierlab_trace::stats::compute(&mut tierlab_trace::open(&native)?)?;
            Ok((s.requests, s.footprint_4k_blocks))
        })?,
        None,
    );
    for (name, target) in generators() {
        let n = args.records;
        record(
            &format!("generate {name}"),
            best_of(args.repeat, || drain(&mut *make(name, n)?))?,
            target,
        );
    }
    Ok(results)
}

/// (generator or preset name, target records/s). The target is
/// 20 M records/s for the generators; boot-storm merges per-VM streams
/// through a heap and has no target.
pub fn generators() -> Vec<(&'static str, Option<f64>)> {
    vec![
        ("uniform", Some(20e6)),
        ("zipf", Some(20e6)),
        ("sequential", Some(20e6)),
        ("mixed", Some(20e6)),
        ("io-concentration", Some(20e6)),
        ("atsmf.src1_0", Some(20e6)),
        ("file-share", Some(20e6)),
        ("backup", Some(20e6)),
        ("hswd.hm_0", Some(20e6)),
        ("boot-storm", None),
    ]
}

/// The stream of generator or preset `name`, `records` long (seed 1).
pub fn make(name: &str, records: u64) -> ExpResult<Box<dyn RecordStream>> {
    let params = KvParams::parse([format!("count={records}")])?;
    Ok(from_spec(name, &params, 1)?)
}
