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

// The trace pipeline side by side with libCacheSim's CSV reader, and
// `tierlab cache` on CSV against the same run on native (issue 21).

/// Wall time and CPU time (user + system, every thread of the process) of
/// one run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct TimedRun {
    pub wall_s: f64,
    pub cpu_s: f64,
}

fn cpu_seconds_of_process() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_SELF) cannot fail");
    let s = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    s(usage.ru_utime) + s(usage.ru_stime)
}

fn timed<T>(f: impl FnOnce() -> ExpResult<T>) -> ExpResult<(TimedRun, T)> {
    let cpu_start_s = cpu_seconds_of_process();
    let start = Instant::now();
    let out = f()?;
    let run = TimedRun {
        wall_s: start.elapsed().as_secs_f64(),
        cpu_s: cpu_seconds_of_process() - cpu_start_s,
    };
    Ok((run, out))
}

fn input_args(path: &Path) -> crate::input::InputArgs {
    crate::input::InputArgs {
        input: path.to_path_buf(),
        format: None,
        skip_bad: false,
        blk_event: None,
        csv_columns: None,
    }
}

/// `tierlab trace stats PATH`, timed: the library calls the command makes
/// (parsing on a second thread where that pays).
pub fn time_trace_stats(path: &Path) -> ExpResult<(TimedRun, tierlab_trace::stats::TraceStats)> {
    let input = input_args(path);
    timed(|| {
        let (stats, _reader) = input.read_with(tierlab_trace::stats::compute)?;
        Ok(stats?)
    })
}

/// `tierlab cache PATH -p POLICY -c CAPACITY` with 4 KiB pages, timed: the
/// library calls the command makes. A share of the footprint (`1%`)
/// includes the first pass that counts the footprint.
pub fn time_cache(
    path: &Path,
    policy: &str,
    capacity: &str,
) -> ExpResult<(TimedRun, tierlab_cache::sim::CacheSimResult)> {
    const PAGE_BYTES: u32 = 4096;
    let input = input_args(path);
    timed(|| {
        let pages = input.capacity_pages(&[capacity.to_string()], "--capacity", PAGE_BYTES)?;
        let configs = tierlab_cache::sim::grid(&[policy], &pages, PAGE_BYTES)?;
        let (results, _reader) = input.read_with(|s| tierlab_cache::sim::run(s, &configs))?;
        let mut results = results?;
        assert_eq!(results.len(), 1, "one policy at one capacity");
        Ok(results.remove(0))
    })
}

/// What the libCacheSim peer does with the CSV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LibCacheSimCsv {
    /// `Reader.get_num_of_req()`: its C loop reads and parses every line
    /// (`read_one_req`), nothing else — the reader alone.
    Read,
    /// `cal_working_set_size(reader)`: the same loop plus a GLib hash set of
    /// the object ids (offsets) — the closest to `trace stats`.
    Distinct,
}

/// The peer, scripts/libcachesim_msr_csv.py, run as `python -c
/// LIBCACHESIM_MSR_CSV_PY MODE CSV` (or `python scripts/libcachesim_msr_csv.py
/// MODE CSV`, MODE `read` or `distinct`): reads an
/// MSR Cambridge CSV with libCacheSim's CSV reader (PyPI `libcachesim`,
/// C code; columns 1 time, 5 offset as the object id, 6 size; no header)
/// and prints one JSON line `{"wall_s", "cpu_s", "count"}` timing only the
/// C call. `count` is the records read (`read`) or the distinct offsets
/// (`distinct`). libCacheSim samples the working set of files over 1 GiB,
/// so `distinct` is exact only below that.
pub const LIBCACHESIM_MSR_CSV_PY: &str = include_str!("../../../scripts/libcachesim_msr_csv.py");

/// One run of the libCacheSim peer (see [`LIBCACHESIM_MSR_CSV_PY`]) with
/// `python` (an interpreter with `libcachesim` installed); returns its
/// timing and count.
pub fn time_libcachesim_msr_csv(
    python: &Path,
    csv: &Path,
    mode: LibCacheSimCsv,
) -> ExpResult<(TimedRun, u64)> {
    const SAMPLED_ABOVE_BYTES: u64 = 1 << 30;
    if mode == LibCacheSimCsv::Distinct && std::fs::metadata(csv)?.len() > SAMPLED_ABOVE_BYTES {
        return Err(format!(
            "{}: libCacheSim samples the working set of files over 1 GiB; use a smaller CSV \
             (10 M bench records are ~520 MB)",
            csv.display()
        )
        .into());
    }
    let mode_arg = match mode {
        LibCacheSimCsv::Read => "read",
        LibCacheSimCsv::Distinct => "distinct",
    };
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(LIBCACHESIM_MSR_CSV_PY)
        .arg(mode_arg)
        .arg(csv)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!(
            "the libCacheSim peer ({} -c ...) failed: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    // libCacheSim logs to stdout too: the result is the last JSON line.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("the libCacheSim peer printed no result: {stdout}"))?;
    #[derive(serde::Deserialize)]
    struct Reply {
        wall_s: f64,
        cpu_s: f64,
        count: u64,
    }
    let reply: Reply = serde_json::from_str(line)?;
    Ok((
        TimedRun {
            wall_s: reply.wall_s,
            cpu_s: reply.cpu_s,
        },
        reply.count,
    ))
}

/// What [`compare_trace_pipeline`] measures.
#[derive(Clone, Debug)]
pub struct PipelineCompareOptions {
    /// Records of the bench input ([`write_input`]), written once as MSR
    /// CSV and once as native.
    pub records: u64,
    /// Rounds; each runs every side once, in a fixed order.
    pub rounds: u32,
    /// A Python with `libcachesim`; without it the peer is skipped.
    pub python: Option<PathBuf>,
    /// `tierlab cache` runs: one policy, each capacity on CSV and native.
    pub cache_policy: String,
    pub cache_capacities: Vec<String>,
    /// Where the input files go (default: the system temp dir).
    pub dir: Option<PathBuf>,
}

/// One `tierlab cache` capacity on CSV and on native, round by round.
#[derive(Clone, Debug, Serialize)]
pub struct CacheCsvVsNative {
    pub capacity: String,
    pub misses: u64,
    pub csv: Vec<TimedRun>,
    pub native: Vec<TimedRun>,
    /// Median CSV wall time over median native wall time (issue 21's
    /// target: at most 1.5).
    pub csv_over_native: f64,
}

/// The trace-pipeline comparisons, every side run once per round.
#[derive(Clone, Debug, Serialize)]
pub struct PipelineComparison {
    pub records: u64,
    pub rounds: u32,
    /// /proc/loadavg before and after (these machines are shared).
    pub load_before: String,
    pub load_after: String,
    pub footprint_4k_blocks: u64,
    /// `tierlab trace stats` on the MSR CSV.
    pub stats_csv: Vec<TimedRun>,
    /// The peer: libCacheSim's reader alone, and with its distinct count.
    pub libcachesim_read: Vec<TimedRun>,
    pub libcachesim_distinct: Vec<TimedRun>,
    pub libcachesim_distinct_objects: Option<u64>,
    /// Median peer wall time over median `trace stats` wall time (issue
    /// 21's target: at least 4 against the reader).
    pub stats_speedup_over_libcachesim_read: Option<f64>,
    pub stats_speedup_over_libcachesim_distinct: Option<f64>,
    pub cache_policy: String,
    pub cache: Vec<CacheCsvVsNative>,
}

fn median_wall_s(runs: &[TimedRun]) -> f64 {
    let mut w: Vec<f64> = runs.iter().map(|r| r.wall_s).collect();
    w.sort_by(f64::total_cmp);
    match w.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => w[n / 2],
        n => (w[n / 2 - 1] + w[n / 2]) / 2.0,
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Writes the bench input as MSR CSV and native, warms the page cache, then
/// runs, `rounds` times in turn: `trace stats` on the CSV, the libCacheSim
/// reader and its distinct count on the same CSV, and `tierlab cache` on
/// CSV then native at each capacity. Every round must give the same
/// results (footprint, miss count).
pub fn compare_trace_pipeline(o: &PipelineCompareOptions) -> ExpResult<PipelineComparison> {
    let dir = tempfile::Builder::new()
        .prefix("tierlab-bench")
        .tempdir_in(o.dir.clone().unwrap_or_else(std::env::temp_dir))?;
    let csv = dir.path().join("bench.csv");
    let native = dir.path().join("bench.tlt");
    write_input(&csv, Format::Msr, o.records)?;
    write_input(&native, Format::Native, o.records)?;
    // Warm the page cache: parsing is measured, not the disk.
    drain(&mut tierlab_trace::open(&csv)?)?;
    drain(&mut tierlab_trace::open(&native)?)?;
    let mut out = PipelineComparison {
        records: o.records,
        rounds: o.rounds,
        load_before: loadavg(),
        load_after: String::new(),
        footprint_4k_blocks: 0,
        stats_csv: Vec::new(),
        libcachesim_read: Vec::new(),
        libcachesim_distinct: Vec::new(),
        libcachesim_distinct_objects: None,
        stats_speedup_over_libcachesim_read: None,
        stats_speedup_over_libcachesim_distinct: None,
        cache_policy: o.cache_policy.clone(),
        cache: o
            .cache_capacities
            .iter()
            .map(|c| CacheCsvVsNative {
                capacity: c.clone(),
                misses: 0,
                csv: Vec::new(),
                native: Vec::new(),
                csv_over_native: f64::NAN,
            })
            .collect(),
    };
    let same = |what: &str, kept: &mut u64, now: u64, round: u32| -> ExpResult<()> {
        if round > 0 && *kept != now {
            return Err(format!("{what} differs between rounds: {kept} then {now}").into());
        }
        *kept = now;
        Ok(())
    };
    for round in 0..o.rounds.max(1) {
        let (run, stats) = time_trace_stats(&csv)?;
        out.stats_csv.push(run);
        same(
            "the footprint",
            &mut out.footprint_4k_blocks,
            stats.footprint_4k_blocks,
            round,
        )?;
        assert_eq!(stats.requests, o.records, "trace stats read every record");
        if let Some(python) = &o.python {
            let (run, requests) = time_libcachesim_msr_csv(python, &csv, LibCacheSimCsv::Read)?;
            if requests != o.records {
                return Err(format!("libCacheSim read {requests} of {} records", o.records).into());
            }
            out.libcachesim_read.push(run);
            let (run, distinct) = time_libcachesim_msr_csv(python, &csv, LibCacheSimCsv::Distinct)?;
            out.libcachesim_distinct.push(run);
            let kept = out.libcachesim_distinct_objects.get_or_insert(distinct);
            same("libCacheSim's distinct count", kept, distinct, round)?;
        }
        for c in &mut out.cache {
            let (run, r) = time_cache(&csv, &o.cache_policy, &c.capacity)?;
            c.csv.push(run);
            same("the cache misses on CSV", &mut c.misses, r.misses, round)?;
            let (run, r) = time_cache(&native, &o.cache_policy, &c.capacity)?;
            c.native.push(run);
            if r.misses != c.misses {
                return Err(format!("misses on native {} != on CSV {}", r.misses, c.misses).into());
            }
        }
    }
    out.load_after = loadavg();
    let stats_s = median_wall_s(&out.stats_csv);
    if o.python.is_some() {
        out.stats_speedup_over_libcachesim_read =
            Some(median_wall_s(&out.libcachesim_read) / stats_s);
        out.stats_speedup_over_libcachesim_distinct =
            Some(median_wall_s(&out.libcachesim_distinct) / stats_s);
    }
    for c in &mut out.cache {
        c.csv_over_native = median_wall_s(&c.csv) / median_wall_s(&c.native);
    }
    Ok(out)
}
