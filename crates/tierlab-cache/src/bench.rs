//! The tierlab side of the cache-only benchmarks that are compared with
//! libCacheSim (docs/benchmarks.md, "Cache-only LRU vs libCacheSim"): one
//! page-reference stream written twice — a native trace for tierlab and a
//! libCacheSim oracleGeneral trace (`obj_size` 1, so its byte-counted
//! `cache_size` is a page count) — and a timed cache-only run over the
//! native file, the same code path as `tierlab cache`.
//!
//! The peer runs in Python (`libcachesim` from PyPI), see
//! [`libcachesim_snippet`]; [`compare_with_libcachesim`] alternates both
//! sides (the `vs_libcachesim` example prints it).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use tierlab_trace::generate::{KvParams, from_spec};
use tierlab_trace::writer::{WriteOptions, write_trace};
use tierlab_trace::{Format, RecordStream, Result, TraceError, error::Location};

use crate::sim::{self, CacheSimConfig, CacheSimResult};

/// A Zipf stream of single-page requests (what docs/benchmarks.md uses).
#[derive(Clone, Debug, PartialEq)]
pub struct ZipfStreamSpec {
    pub requests: u64,
    pub theta: f64,
    /// The region the offsets fall in, as the generator's
    /// `region_size_bytes` (e.g. `4g` = 1,048,576 pages of 4 KiB).
    pub region: String,
    pub seed: u64,
}

impl Default for ZipfStreamSpec {
    fn default() -> Self {
        ZipfStreamSpec {
            requests: 10_000_000,
            theta: 0.99,
            region: "4g".into(),
            seed: 42,
        }
    }
}

/// Page size of the bench streams: every request is one 4 KiB page.
pub const BENCH_PAGE_BYTES: u32 = 4096;

/// The two files of one stream and what they hold.
#[derive(Clone, Debug)]
pub struct BenchStream {
    pub native_path: PathBuf,
    pub oracle_general_path: PathBuf,
    pub requests: u64,
    /// Distinct pages (what `1%` of the footprint is a share of).
    pub footprint_pages: u64,
}

impl BenchStream {
    /// `percent` % of the footprint in pages, rounded down, at least 1 (as
    /// `tierlab cache --capacity 1%`).
    pub fn share_pages(&self, percent: f64) -> u64 {
        ((self.footprint_pages as f64 * percent / 100.0) as u64).max(1)
    }
}

/// oracleGeneral: 24-byte records `u32 clock_time, u64 obj_id, u32
/// obj_size, i64 next_access_vtime` (-1: unknown).
const ORACLE_RECORD_BYTES: usize = 24;

/// Writes `spec`'s stream into `dir` as `zipf.tlt` (native) and
/// `zipf.oracleGeneral` (obj_id = page index, obj_size = 1).
pub fn write_zipf_stream(dir: &Path, spec: &ZipfStreamSpec) -> Result<BenchStream> {
    let params = KvParams::parse([
        format!("count={}", spec.requests),
        format!("theta={}", spec.theta),
        "size_bytes=4k".to_string(),
        format!("region_size_bytes={}", spec.region),
    ])?;
    let native_path = dir.join("zipf.tlt");
    let oracle_general_path = dir.join("zipf.oracleGeneral");
    write_trace(
        &mut from_spec("zipf", &params, spec.seed)?,
        &native_path,
        Format::Native,
        &WriteOptions::default(),
    )?;
    // Keys from the native file, so both files hold the same stream.
    let mut reader = tierlab_trace::open(&native_path)?;
    let io_err = |e| TraceError::io(&oracle_general_path, Location::Input, e);
    let mut out = BufWriter::new(std::fs::File::create(&oracle_general_path).map_err(io_err)?);
    let mut pages: Vec<u64> = Vec::with_capacity(spec.requests as usize);
    while let Some(rec) = reader.next_record()? {
        for key in sim::record_pages(&rec, BENCH_PAGE_BYTES) {
            let mut r = [0u8; ORACLE_RECORD_BYTES];
            r[4..12].copy_from_slice(&key.to_le_bytes());
            r[12..16].copy_from_slice(&1u32.to_le_bytes());
            r[16..24].copy_from_slice(&(-1i64).to_le_bytes());
            out.write_all(&r).map_err(io_err)?;
            pages.push(key);
        }
    }
    out.flush().map_err(io_err)?;
    let requests = pages.len() as u64;
    pages.sort_unstable();
    pages.dedup();
    Ok(BenchStream {
        native_path,
        oracle_general_path,
        requests,
        footprint_pages: pages.len() as u64,
    })
}

/// Seconds of one run: wall clock, and CPU time of the running thread
/// (what a busy machine's other processes disturb least; Linux only).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Timing {
    pub wall_s: f64,
    pub cpu_s: Option<f64>,
}

/// CPU time of the calling thread in ns (`/proc/thread-self/schedstat`).
pub fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Times `f` (wall and thread CPU).
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Timing) {
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    let out = f();
    let wall_s = start.elapsed().as_secs_f64();
    let cpu_s = cpu0
        .zip(thread_cpu_ns())
        .map(|(a, b)| b.saturating_sub(a) as f64 / 1e9);
    (out, Timing { wall_s, cpu_s })
}

/// One timed cache-only run of `configs` over the native trace `native`
/// (opening and reading it included, as `tierlab cache` does).
pub fn time_cache_sim(
    native: &Path,
    configs: &[CacheSimConfig],
) -> Result<(Vec<CacheSimResult>, Timing)> {
    let (results, timing) = timed(|| -> Result<_> {
        let mut reader = tierlab_trace::open(native)?;
        sim::run(&mut reader, configs)
    });
    Ok((results?, timing))
}

/// A Python snippet that times libCacheSim's `policy` (libcachesim class
/// name: `LRU`, `S3FIFO`, ...) on the oracleGeneral file at
/// `capacity_pages`, with a hash table of 2^`hashpower` buckets, and prints
/// `wall_seconds cpu_seconds miss_ratio` (only `process_trace` is timed;
/// CPU time is the thread's). Run it with the Python that has `libcachesim`.
pub fn libcachesim_snippet(
    oracle_general: &Path,
    policy: &str,
    capacity_pages: u64,
    hashpower: u32,
) -> String {
    format!(
        "import time, libcachesim as lcs\n\
         c = lcs.{policy}(cache_size={capacity_pages}, hashpower={hashpower})\n\
         r = lcs.TraceReader({path:?}, lcs.TraceType.ORACLE_GENERAL_TRACE)\n\
         t, tc = time.perf_counter(), time.thread_time()\n\
         mr, _ = c.process_trace(r)\n\
         print(time.perf_counter() - t, time.thread_time() - tc, repr(mr))\n",
        path = oracle_general.display().to_string(),
    )
}

/// libCacheSim's hash table sized to the cache: 2^(⌈log2 capacity⌉ + 1)
/// buckets, much faster than its default 2^24 for small caches (the fair
/// comparison).
pub fn sized_hashpower(capacity_pages: u64) -> u32 {
    (64 - capacity_pages.saturating_sub(1).leading_zeros()).max(1) + 1
}

/// One side-by-side comparison: tierlab's cache-only run and libCacheSim's
/// on the same stream, alternated `rounds` times.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub policy: String,
    pub capacity_pages: u64,
    pub requests: u64,
    /// libCacheSim's hash table: 2^hashpower buckets.
    pub libcachesim_hashpower: u32,
    /// Every round, in order (the two sides alternate).
    pub tierlab: Vec<Timing>,
    pub libcachesim: Vec<Timing>,
    pub tierlab_misses: u64,
    pub tierlab_miss_ratio: f64,
    /// As libCacheSim returns it (a double, within 1e-15 of misses/requests).
    pub libcachesim_miss_ratio: f64,
}

/// Which clock a ratio is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    Wall,
    /// Thread CPU time (NaN where unavailable).
    Cpu,
}

fn seconds(t: &[Timing], clock: Clock) -> Vec<f64> {
    t.iter()
        .map(|t| match clock {
            Clock::Wall => t.wall_s,
            Clock::Cpu => t.cpu_s.unwrap_or(f64::NAN),
        })
        .collect()
}

impl Comparison {
    /// Best-of speed ratio, tierlab / libCacheSim (> 1: tierlab is faster).
    pub fn speed_ratio_best(&self, clock: Clock) -> f64 {
        min(&seconds(&self.libcachesim, clock)) / min(&seconds(&self.tierlab, clock))
    }
    /// Median-of speed ratio.
    pub fn speed_ratio_median(&self, clock: Clock) -> f64 {
        median(&seconds(&self.libcachesim, clock)) / median(&seconds(&self.tierlab, clock))
    }
    /// Requests per second of tierlab and of libCacheSim (best of the rounds).
    pub fn rates_best(&self, clock: Clock) -> (f64, f64) {
        let n = self.requests as f64;
        (
            n / min(&seconds(&self.tierlab, clock)),
            n / min(&seconds(&self.libcachesim, clock)),
        )
    }
    /// Requests per second (median of the rounds).
    pub fn rates_median(&self, clock: Clock) -> (f64, f64) {
        let n = self.requests as f64;
        (
            n / median(&seconds(&self.tierlab, clock)),
            n / median(&seconds(&self.libcachesim, clock)),
        )
    }
    /// libCacheSim's miss count (its ratio × requests, rounded).
    pub fn libcachesim_misses(&self) -> u64 {
        (self.libcachesim_miss_ratio * self.requests as f64).round() as u64
    }
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Why a comparison could not run.
#[derive(Debug)]
pub enum CompareError {
    Trace(TraceError),
    /// The Python peer failed to start or exited with an error.
    Peer {
        command: String,
        message: String,
    },
}

impl std::fmt::Display for CompareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompareError::Trace(e) => write!(f, "{e}"),
            CompareError::Peer { command, message } => {
                write!(f, "libcachesim peer (`{command}`) failed: {message}")
            }
        }
    }
}

impl std::error::Error for CompareError {}

impl From<TraceError> for CompareError {
    fn from(e: TraceError) -> Self {
        CompareError::Trace(e)
    }
}

/// Runs libCacheSim's `lcs_policy` once through `python` (a Python with
/// the `libcachesim` package); returns the time of `process_trace` alone
/// and the miss ratio.
pub fn run_libcachesim(
    python: &Path,
    oracle_general: &Path,
    lcs_policy: &str,
    capacity_pages: u64,
    hashpower: u32,
) -> std::result::Result<(Timing, f64), CompareError> {
    let code = libcachesim_snippet(oracle_general, lcs_policy, capacity_pages, hashpower);
    let command = format!("{} -c <libcachesim_snippet>", python.display());
    let fail = |message: String| CompareError::Peer {
        command: command.clone(),
        message,
    };
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(&code)
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    let mut num = || -> Option<f64> { words.next()?.parse().ok() };
    match (num(), num(), num()) {
        (Some(wall_s), Some(cpu_s), Some(ratio)) => Ok((
            Timing {
                wall_s,
                cpu_s: Some(cpu_s),
            },
            ratio,
        )),
        _ => Err(fail(format!(
            "expected `wall_seconds cpu_seconds miss_ratio`, got {text:?}"
        ))),
    }
}

/// tierlab's `policy` (a [`crate::policies`] name) and libCacheSim's
/// `lcs_policy` (its Python class: `LRU`, `S3FIFO`, ...) at
/// `capacity_pages` on `stream`, alternating `rounds` times: tierlab first,
/// then libCacheSim with a table of 2^`hashpower` buckets.
pub fn compare_with_libcachesim(
    stream: &BenchStream,
    policy: &str,
    lcs_policy: &str,
    capacity_pages: u64,
    hashpower: u32,
    python: &Path,
    rounds: u32,
) -> std::result::Result<Comparison, CompareError> {
    let config = CacheSimConfig {
        policy: policy.to_string(),
        capacity_pages,
        page_size_bytes: BENCH_PAGE_BYTES,
    };
    let mut c = Comparison {
        policy: policy.to_string(),
        capacity_pages,
        requests: stream.requests,
        libcachesim_hashpower: hashpower,
        tierlab: Vec::new(),
        libcachesim: Vec::new(),
        tierlab_misses: 0,
        tierlab_miss_ratio: 0.0,
        libcachesim_miss_ratio: 0.0,
    };
    for _ in 0..rounds.max(1) {
        let (res, timing) = time_cache_sim(&stream.native_path, std::slice::from_ref(&config))?;
        assert_eq!(
            res[0].requests, stream.requests,
            "the stream changed under the bench"
        );
        c.tierlab.push(timing);
        c.tierlab_misses = res[0].misses;
        c.tierlab_miss_ratio = res[0].miss_ratio;
        let (timing, ratio) = run_libcachesim(
            python,
            &stream.oracle_general_path,
            lcs_policy,
            capacity_pages,
            hashpower,
        )?;
        c.libcachesim.push(timing);
        c.libcachesim_miss_ratio = ratio;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_files_agree() {
        let dir = tempfile_dir();
        let spec = ZipfStreamSpec {
            requests: 20_000,
            region: "64m".into(),
            ..Default::default()
        };
        let s = write_zipf_stream(&dir, &spec).unwrap();
        assert_eq!(s.requests, 20_000);
        let og = std::fs::read(&s.oracle_general_path).unwrap();
        assert_eq!(og.len(), 20_000 * ORACLE_RECORD_BYTES);
        // Same keys in both files, in order.
        let mut reader = tierlab_trace::open(&s.native_path).unwrap();
        let mut i = 0;
        while let Some(rec) = reader.next_record().unwrap() {
            let key = rec.offset_bytes / BENCH_PAGE_BYTES as u64;
            let r = &og[i * ORACLE_RECORD_BYTES..];
            assert_eq!(u64::from_le_bytes(r[4..12].try_into().unwrap()), key);
            i += 1;
        }
        assert!(s.footprint_pages > 1000 && s.footprint_pages <= 16_384);
        assert_eq!(s.share_pages(1.0), s.footprint_pages / 100);
        let cfg = CacheSimConfig {
            policy: "lru".into(),
            capacity_pages: s.share_pages(10.0),
            page_size_bytes: BENCH_PAGE_BYTES,
        };
        let (res, timing) = time_cache_sim(&s.native_path, &[cfg]).unwrap();
        assert_eq!(res[0].requests, 20_000);
        assert!(timing.wall_s > 0.0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hashpower_fits_the_cache() {
        assert_eq!(sized_hashpower(1), 2);
        assert_eq!(sized_hashpower(8041), 14);
        assert_eq!(sized_hashpower(8192), 14);
        assert_eq!(sized_hashpower(65_536), 17);
        assert_eq!(sized_hashpower(262_144), 19);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("tierlab-cache-bench-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
