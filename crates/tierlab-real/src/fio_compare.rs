//! tierlab's real data path against fio on the same file: `tierlab run`
//! (passthrough policy, closed loop at an iodepth, in this process) and
//! `fio` (a child process) do the same random 4 KiB reads or writes of the
//! same file, alternately, for several rounds; each round gives a ratio
//! of the two sides measured minutes apart at most, and the result keeps
//! every round's numbers and the median of each ratio (docs/benchmarks.md,
//! "Real executor against fio").
//!
//! What each side's numbers mean:
//! - IOPS: fio's own (IOs over its job's run time); tierlab's host IOs
//!   over its workload window (`iops` in summary.json). `us_per_io` is
//!   1e6 / IOPS: at queue depth 1 the time one IO takes end to end.
//! - Latency: fio's `lat_ns` mean (submission to completion); tierlab's
//!   mean host latency (arrival at the stack to completion).
//! - CPU: user + system seconds of everything the side ran — fio's child
//!   processes as `getrusage(RUSAGE_CHILDREN)` counts them after the wait,
//!   tierlab's whole process (`RUSAGE_SELF`) around the run. Both include
//!   io_uring's kernel worker threads (`iou-wrk`, `iou-sqp`), which belong
//!   to the process that owns the ring. Setup (fio's start, tierlab's
//!   config and stack) is in both and small next to the IOs.
//!
//! The runs are not timed tests: callers print or record the numbers
//! (`tierlab bench --compare`, `examples/vs_fio.rs`).

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use tierlab_core::Op;

use crate::{EngineKind, RealOptions, RunError};

/// One workload both sides run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FioCase {
    /// `Op::Read` (fio `randread`) or `Op::Write` (`randwrite`).
    pub op: Op,
    pub iodepth: u32,
    /// tierlab's engine, and fio's peer for it: `Uring` (fio's
    /// io_uring), `UringSqpoll` (fio's io_uring with `--sqthread_poll=1`),
    /// `Threads` (fio's io_uring: fio has no pool of `iodepth` threads
    /// sharing one queue), or `Auto` at iodepth 1, meaning inline IO on
    /// tierlab's thread (`--io-threads 0`; fio's `psync`). tierlab runs
    /// `iodepth` device IOs in service (`--io-threads`).
    pub engine: EngineKind,
}

impl FioCase {
    fn fio_engine(&self) -> &'static str {
        if self.inline() { "psync" } else { "io_uring" }
    }
    /// tierlab does each IO on its own thread (`--io-threads 0`).
    fn inline(&self) -> bool {
        self.engine == EngineKind::Auto
    }
    /// "randread QD32 io_uring", for tables.
    pub fn label(&self) -> String {
        format!(
            "rand{} QD{} {}",
            if self.op == Op::Read { "read" } else { "write" },
            self.iodepth,
            match self.engine {
                EngineKind::Auto => "inline/psync",
                EngineKind::Uring => "io_uring",
                EngineKind::UringSqpoll => "io_uring+sqpoll",
                EngineKind::Threads => "threads/io_uring",
            }
        )
    }
}

/// What to compare, and where.
#[derive(Clone, Debug)]
pub struct FioCompareOptions {
    /// The file both sides use; created, or extended, and filled with
    /// non-zero bytes when it holds fewer than `file_bytes`. On /dev/shm
    /// (tmpfs) the device time is a memory copy and the rest is the path.
    pub path: PathBuf,
    pub file_bytes: u64,
    pub ios_per_run: u64,
    /// Rounds; in each, every case runs fio and tierlab once, in an order
    /// that alternates from round to round (fio first in even rounds).
    pub rounds: usize,
    pub cases: Vec<FioCase>,
    /// The fio binary (`fio` on the PATH by default).
    pub fio: PathBuf,
    /// O_DIRECT on both sides (fio `--direct=1`; tierlab's default).
    pub direct: bool,
}

impl Default for FioCompareOptions {
    fn default() -> Self {
        FioCompareOptions {
            path: PathBuf::from("/dev/shm/tierlab-vs-fio.img"),
            file_bytes: 1 << 30,
            ios_per_run: 300_000,
            rounds: 5,
            cases: FioCompareOptions::issue_21_cases(),
            fio: PathBuf::from("fio"),
            direct: true,
        }
    }
}

impl FioCompareOptions {
    /// The cases issue 21 sets targets for: io_uring at QD1 and QD32,
    /// random reads and writes.
    pub fn issue_21_cases() -> Vec<FioCase> {
        let mut cases = Vec::new();
        for iodepth in [1, 32] {
            for op in [Op::Read, Op::Write] {
                cases.push(FioCase {
                    op,
                    iodepth,
                    engine: EngineKind::Uring,
                });
            }
        }
        cases
    }
}

/// One side's numbers in one round.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SideSample {
    pub ios: u64,
    pub iops: f64,
    /// 1e6 / `iops`.
    pub us_per_io: f64,
    pub latency_us_mean: f64,
    /// User + system CPU seconds.
    pub cpu_s: f64,
    /// `cpu_s` × 1e6 / `ios`.
    pub cpu_us_per_io: f64,
}

impl SideSample {
    fn new(ios: u64, iops: f64, latency_us_mean: f64, cpu_s: f64) -> SideSample {
        SideSample {
            ios,
            iops,
            us_per_io: 1e6 / iops,
            latency_us_mean,
            cpu_s,
            cpu_us_per_io: cpu_s * 1e6 / ios.max(1) as f64,
        }
    }
}

/// One case over every round.
#[derive(Clone, Debug)]
pub struct FioCaseResult {
    pub case: FioCase,
    /// One per round, in round order.
    pub fio: Vec<SideSample>,
    pub tierlab: Vec<SideSample>,
    /// Medians over rounds of tierlab / fio IOPS (per round, then the median).
    pub iops_ratio: f64,
    /// Median of tierlab's µs per IO minus fio's: what tierlab adds.
    pub added_us_per_io: f64,
    /// Median of tierlab / fio CPU per IO.
    pub cpu_ratio: f64,
    /// Medians of each side's own numbers (field by field).
    pub fio_median: SideSample,
    pub tierlab_median: SideSample,
    /// What ran tierlab's IOs (summary.json's `real.io_engine`).
    pub tierlab_engine: String,
}

/// The whole comparison.
#[derive(Clone, Debug)]
pub struct FioComparison {
    pub cases: Vec<FioCaseResult>,
    /// `fio --version`.
    pub fio_version: String,
    /// /proc/loadavg before the first run and after the last.
    pub loadavg_before: String,
    pub loadavg_after: String,
}

impl FioComparison {
    /// A table, one line per case (medians over rounds).
    pub fn render(&self) -> String {
        let mut s = format!(
            "{:<28} {:>10} {:>10} {:>7} {:>8} {:>8} {:>7} {:>8} {:>8} {:>6}\n",
            "case",
            "fio IOPS",
            "tierlab",
            "ratio",
            "fio µs",
            "tl µs",
            "added",
            "fio cpu",
            "tl cpu",
            "ratio"
        );
        for c in &self.cases {
            s += &format!(
                "{:<28} {:>10.0} {:>10.0} {:>6.2}× {:>8.2} {:>8.2} {:>7.2} {:>8.2} {:>8.2} {:>5.2}×\n",
                c.case.label(),
                c.fio_median.iops,
                c.tierlab_median.iops,
                c.iops_ratio,
                c.fio_median.us_per_io,
                c.tierlab_median.us_per_io,
                c.added_us_per_io,
                c.fio_median.cpu_us_per_io,
                c.tierlab_median.cpu_us_per_io,
                c.cpu_ratio
            );
        }
        s += "µs = µs per IO (1e6 / IOPS); added = tierlab µs − fio µs; cpu = CPU µs per IO \
              (user + system, io_uring workers included); ratios tierlab / fio, medians of \
              per-round ratios\n";
        s
    }
}

/// Why a comparison could not run.
#[derive(Debug)]
pub enum FioCompareError {
    /// An option out of range.
    Option {
        option: &'static str,
        found: String,
        expected: &'static str,
    },
    /// Creating or filling the file.
    File { path: PathBuf, source: io::Error },
    /// fio would not start.
    FioStart { fio: PathBuf, source: io::Error },
    /// fio ran and failed.
    FioFailed {
        command: String,
        status: String,
        stderr: String,
    },
    /// fio's JSON output lacked what is read from it.
    FioOutput { command: String, problem: String },
    /// tierlab's run failed (boxed: a RunError is large).
    Tierlab { case: String, source: Box<RunError> },
}

impl fmt::Display for FioCompareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FioCompareError::Option {
                option,
                found,
                expected,
            } => write!(f, "option `{option}`: found {found}, expected {expected}"),
            FioCompareError::File { path, source } => {
                write!(f, "{}: cannot prepare the file: {source}", path.display())
            }
            FioCompareError::FioStart { fio, source } => write!(
                f,
                "cannot start `{}` ({source}); install fio (apt-get install fio) or give its path",
                fio.display()
            ),
            FioCompareError::FioFailed {
                command,
                status,
                stderr,
            } => write!(f, "`{command}` failed ({status}): {}", stderr.trim()),
            FioCompareError::FioOutput { command, problem } => {
                write!(f, "`{command}`: unexpected output: {problem}")
            }
            FioCompareError::Tierlab { case, source } => {
                write!(f, "tierlab run ({case}): {source}")
            }
        }
    }
}

impl std::error::Error for FioCompareError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FioCompareError::File { source, .. } | FioCompareError::FioStart { source, .. } => {
                Some(source)
            }
            FioCompareError::Tierlab { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// Block size of every IO.
const IO_BYTES: u64 = 4096;

/// Runs the comparison (`opts.rounds` × cases × 2 runs). tierlab's CPU
/// is this process's: run nothing else in it meanwhile.
pub fn compare_with_fio(opts: &FioCompareOptions) -> Result<FioComparison, FioCompareError> {
    let bad = |option, found: String, expected| {
        Err(FioCompareError::Option {
            option,
            found,
            expected,
        })
    };
    if opts.rounds == 0 {
        return bad("rounds", "0".into(), "at least 1");
    }
    if opts.file_bytes < IO_BYTES || opts.file_bytes % IO_BYTES != 0 {
        return bad(
            "file_bytes",
            opts.file_bytes.to_string(),
            "a positive multiple of 4096",
        );
    }
    if opts.ios_per_run == 0 {
        return bad("ios_per_run", "0".into(), "at least 1");
    }
    for c in &opts.cases {
        if !matches!(c.op, Op::Read | Op::Write) {
            return bad("cases.op", c.op.as_str().into(), "read or write");
        }
        if c.iodepth == 0 || c.iodepth > 4096 {
            return bad("cases.iodepth", c.iodepth.to_string(), "1 to 4096");
        }
        if c.engine == EngineKind::Auto && c.iodepth != 1 {
            return bad(
                "cases.engine",
                format!("auto (inline) at iodepth {}", c.iodepth),
                "inline IO at iodepth 1 only",
            );
        }
    }
    let fio_version = fio_version(&opts.fio)?;
    prepare_file(&opts.path, opts.file_bytes)?;
    let loadavg_before = loadavg();
    let mut samples: Vec<(Vec<SideSample>, Vec<SideSample>, String)> =
        vec![(Vec::new(), Vec::new(), String::new()); opts.cases.len()];
    for round in 0..opts.rounds {
        for (k, case) in opts.cases.iter().enumerate() {
            let fio_first = round % 2 == 0;
            for side in 0..2 {
                if (side == 0) == fio_first {
                    samples[k].0.push(run_fio(opts, case)?);
                } else {
                    let (s, engine) = run_tierlab(opts, case)?;
                    samples[k].1.push(s);
                    samples[k].2 = engine;
                }
            }
        }
    }
    let cases = opts
        .cases
        .iter()
        .zip(samples)
        .map(|(case, (fio, tierlab, tierlab_engine))| {
            let per_round = |f: &dyn Fn(&SideSample, &SideSample) -> f64| {
                median(fio.iter().zip(&tierlab).map(|(a, b)| f(a, b)).collect())
            };
            FioCaseResult {
                case: *case,
                iops_ratio: per_round(&|f, t| t.iops / f.iops),
                added_us_per_io: per_round(&|f, t| t.us_per_io - f.us_per_io),
                cpu_ratio: per_round(&|f, t| t.cpu_us_per_io / f.cpu_us_per_io),
                fio_median: median_sample(&fio),
                tierlab_median: median_sample(&tierlab),
                fio,
                tierlab,
                tierlab_engine,
            }
        })
        .collect();
    Ok(FioComparison {
        cases,
        fio_version,
        loadavg_before,
        loadavg_after: loadavg(),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "at least one round");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn median_sample(v: &[SideSample]) -> SideSample {
    let m = |f: fn(&SideSample) -> f64| median(v.iter().map(f).collect());
    SideSample {
        ios: v[0].ios,
        iops: m(|s| s.iops),
        us_per_io: m(|s| s.us_per_io),
        latency_us_mean: m(|s| s.latency_us_mean),
        cpu_s: m(|s| s.cpu_s),
        cpu_us_per_io: m(|s| s.cpu_us_per_io),
    }
}

/// /proc/loadavg's three averages ("" where there is none).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn fio_version(fio: &Path) -> Result<String, FioCompareError> {
    let out = Command::new(fio)
        .arg("--version")
        .output()
        .map_err(|source| FioCompareError::FioStart {
            fio: fio.to_path_buf(),
            source,
        })?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Makes `path` hold `bytes` of non-zero data (so reads touch real pages;
/// tmpfs answers a hole without copying).
fn prepare_file(path: &Path, bytes: u64) -> Result<(), FioCompareError> {
    let err = |source| FioCompareError::File {
        path: path.to_path_buf(),
        source,
    };
    if std::fs::metadata(path).is_ok_and(|m| m.len() >= bytes) {
        return Ok(());
    }
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(err)?;
    const CHUNK: u64 = 1 << 20;
    let mut chunk = vec![0u8; CHUNK as usize];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for b in chunk.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x as u8) | 1;
    }
    let mut at = 0;
    while at < bytes {
        let n = CHUNK.min(bytes - at) as usize;
        f.write_all_at(&chunk[..n], at).map_err(err)?;
        at += n as u64;
    }
    f.sync_all().map_err(err)
}

/// User + system CPU seconds of `who` (RUSAGE_SELF or RUSAGE_CHILDREN).
fn cpu_s(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn run_fio(opts: &FioCompareOptions, case: &FioCase) -> Result<SideSample, FioCompareError> {
    let rw = if case.op == Op::Read {
        "randread"
    } else {
        "randwrite"
    };
    let mut args = vec![
        "--name=tierlab-peer".to_string(),
        format!("--filename={}", opts.path.display()),
        format!("--size={}", opts.file_bytes),
        // The IO count, independent of the region (`number_ios` cannot
        // go past one pass over `size`).
        format!("--io_size={}", opts.ios_per_run * IO_BYTES),
        format!("--ioengine={}", case.fio_engine()),
        format!("--direct={}", u8::from(opts.direct)),
        format!("--rw={rw}"),
        format!("--bs={IO_BYTES}"),
        format!("--iodepth={}", case.iodepth),
        // tierlab's uniform generator repeats offsets too.
        "--norandommap".into(),
        "--output-format=json".into(),
    ];
    if case.engine == EngineKind::UringSqpoll {
        args.push("--sqthread_poll=1".into());
    }
    let command = format!("{} {}", opts.fio.display(), args.join(" "));
    let cpu0 = cpu_s(libc::RUSAGE_CHILDREN);
    let out = Command::new(&opts.fio)
        .args(&args)
        .output()
        .map_err(|source| FioCompareError::FioStart {
            fio: opts.fio.clone(),
            source,
        })?;
    let cpu = cpu_s(libc::RUSAGE_CHILDREN) - cpu0;
    if !out.status.success() {
        return Err(FioCompareError::FioFailed {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let (ios, iops, latency_us) = parse_fio_json(&String::from_utf8_lossy(&out.stdout), case.op)
        .map_err(|problem| FioCompareError::FioOutput {
            command: command.clone(),
            problem,
        })?;
    if ios != opts.ios_per_run {
        return Err(FioCompareError::FioOutput {
            command,
            problem: format!("fio did {ios} IOs, {} were asked for", opts.ios_per_run),
        });
    }
    Ok(SideSample::new(ios, iops, latency_us, cpu))
}

/// (IOs, IOPS, mean latency µs) of `op` in fio's `--output-format=json`
/// (first job); what is missing, in words.
fn parse_fio_json(text: &str, op: Op) -> Result<(u64, f64, f64), String> {
    // fio may print notes before the JSON object.
    let json = text
        .find('{')
        .map(|i| &text[i..])
        .ok_or_else(|| "no JSON object".to_string())?;
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    let rw = if op == Op::Read { "read" } else { "write" };
    let side = &v["jobs"][0][rw];
    let num = |key: &str, x: &serde_json::Value| {
        x.as_f64()
            .ok_or_else(|| format!("no number at jobs[0].{rw}.{key}"))
    };
    let ios = num("total_ios", &side["total_ios"])? as u64;
    let iops = num("iops", &side["iops"])?;
    let latency_ns = num("lat_ns.mean", &side["lat_ns"]["mean"])?;
    Ok((ios, iops, latency_ns / 1e3))
}

/// tierlab's side: `tierlab run` with the passthrough policy, in this
/// process; also returns what ran its IOs.
fn run_tierlab(
    opts: &FioCompareOptions,
    case: &FioCase,
) -> Result<(SideSample, String), FioCompareError> {
    let text = format!(
        r#"seed = 1
[[devices]]
name = "file"
path = "{path}"
direct = {direct}
[policy]
kind = "passthrough"
[[tenants]]
name = "t"
workload = {{ generator = "uniform", params = {{ count = {n}, region_size_bytes = {bytes}, read_ratio = {read}, size_bytes = {IO_BYTES} }} }}
driver = {{ mode = "afap", iodepth = {depth} }}
[output]
interval_s = 10.0
"#,
        path = opts.path.display(),
        direct = opts.direct,
        n = opts.ios_per_run,
        bytes = opts.file_bytes,
        read = if case.op == Op::Read { "1.0" } else { "0.0" },
        depth = case.iodepth,
    );
    let label = case.label();
    let fail = |source| FioCompareError::Tierlab {
        case: label.clone(),
        source: Box::new(source),
    };
    let cfg = tierlab_sim::config::parse(&text, "vs-fio.toml", &[])
        .map_err(|e| fail(RunError::Config(Box::new(e))))?;
    let real = RealOptions {
        verify: false,
        io_threads: if case.inline() {
            0
        } else {
            case.iodepth as usize
        },
        io_engine: case.engine,
        drain_s: 1.0,
        stop: None,
    };
    let base = opts.path.parent().unwrap_or(Path::new("."));
    let cpu0 = cpu_s(libc::RUSAGE_SELF);
    let r = crate::run(&cfg, base, &real).map_err(fail)?;
    let cpu = cpu_s(libc::RUSAGE_SELF) - cpu0;
    let m = &r.run.metrics.total;
    let ios = m.ios;
    let iops = m.iops.unwrap_or(0.0);
    let latency = m.mean_latency_us.unwrap_or(0.0);
    Ok((SideSample::new(ios, iops, latency, cpu), r.real.io_engine))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    /// The parts of fio 3.33's JSON that are read (trimmed from a real
    /// `fio --output-format=json` run), after a note fio printed first.
    #[test]
    fn fio_json_gives_ios_iops_and_latency() {
        let text = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "tierlab-peer",
      "read" : { "io_bytes" : 1228800000, "total_ios" : 300000, "iops" : 256410.256410,
                 "lat_ns" : { "min" : 2104, "max" : 912331, "mean" : 124590.5 } },
      "write" : { "total_ios" : 0, "iops" : 0.0, "lat_ns" : { "mean" : 0.0 } }
    }
  ]
}"#;
        let (ios, iops, lat_us) = parse_fio_json(text, Op::Read).unwrap();
        assert_eq!(ios, 300_000);
        assert!((iops - 256_410.256_41).abs() < 1e-6);
        assert!((lat_us - 124.5905).abs() < 1e-9);
        let e = parse_fio_json(r#"{"jobs": [{"write": {}}]}"#, Op::Write).unwrap_err();
        assert_eq!(e, "no number at jobs[0].write.total_ios");
        assert_eq!(
            parse_fio_json("fio: error", Op::Read).unwrap_err(),
            "no JSON object"
        );
    }

    #[test]
    fn inline_is_only_for_queue_depth_one() {
        let opts = FioCompareOptions {
            cases: vec![FioCase {
                op: Op::Read,
                iodepth: 8,
                engine: EngineKind::Auto,
            }],
            ..Default::default()
        };
        let e = compare_with_fio(&opts).unwrap_err();
        assert!(e.to_string().contains("inline IO at iodepth 1 only"), "{e}");
    }
}
