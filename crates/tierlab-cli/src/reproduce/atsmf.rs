//! `tierlab reproduce atsmf [--quick] --out DIR`: the ATSMF paper's
//! Tables 5–6 and Figs. 8–14 (spec/atsmf.md) on the generated analogs of
//! its MSR windows (the `atsmf.*` presets) and on any real traces named.
//!
//! Per workload, four systems replay the same IO stream open loop:
//! flash only (the P3700 model), ATSMF (ramdisk memory tier over the same
//! flash), and two memory page caches sized to ATSMF's peak memory use as
//! the paper sized FlashCache: FlashCache (set-associative, FIFO, 4 KiB,
//! write-back) and ARC (the cache layer with ARC eviction, write-back).
//! Outputs (docs/atsmf.md "Reproduction"):
//! - `table.csv`: `workload,system,mean_rt_ms,rt_ratio_vs_flash,mem_access_ratio,peak_mem_bytes`;
//! - `memory_WORKLOAD.csv/.svg`: ATSMF's memory consumption over time;
//! - `cdf_WORKLOAD.csv/.svg`: response-time CDFs (all / memory / flash part);
//! - `runs/WORKLOAD-SYSTEM/`: each run's full outputs, `configs/` each config.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::Value;
use tierlab_sim::{config, run};
use tierlab_trace::generate::{GeneratorParams, KvParams};
use tierlab_trace::slice::{Slice, SliceSpec};
use tierlab_trace::{ReadOptions, TraceReader};

use crate::CliResult;
use crate::plot::{Chart, Series, line_chart_svg};

const GIB: u64 = 1 << 30;

#[derive(Args)]
pub struct AtsmfArgs {
    /// Quarter-length windows of every preset (under two minutes here).
    #[arg(long)]
    pub quick: bool,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Also run a real trace: NAME=PATH[@START_MIN-END_MIN] (repeatable),
    /// e.g. src1_0=MSR/src1_0.csv.gz@1920-2020 (minutes from its first record).
    #[arg(long = "trace", value_name = "NAME=PATH[@START-END]")]
    pub traces: Vec<String>,
    /// Only these presets (comma-separated, e.g. src1_0,usr1); `none` for
    /// only the --trace workloads.
    #[arg(long)]
    pub only: Option<String>,
    /// Seed of the generated workloads.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// One workload: a TOML `workload = ...` value and the LUN it needs.
struct Workload {
    name: String,
    workload_toml: String,
    lun_bytes: u64,
}

#[derive(Clone, Debug)]
struct Row {
    workload: String,
    system: &'static str,
    mean_rt_ms: f64,
    rt_ratio_vs_flash: f64,
    mem_access_ratio: f64,
    peak_mem_bytes: u64,
}

const SYSTEMS: [&str; 4] = ["flash", "atsmf", "flashcache", "arc"];

fn preset_workloads(args: &AtsmfArgs) -> CliResult<Vec<Workload>> {
    let wanted: Option<Vec<String>> = args
        .only
        .as_ref()
        .map(|s| s.split(',').map(|w| w.trim().to_string()).collect());
    let presets: Vec<&str> = tierlab_trace::generate::presets()
        .into_iter()
        .map(|p| p.name)
        .filter(|n| n.starts_with("atsmf."))
        .collect();
    if let Some(w) = &wanted {
        for name in w {
            if name != "none" && !presets.contains(&format!("atsmf.{name}").as_str()) {
                let known: Vec<&str> = presets.iter().map(|p| &p[6..]).collect();
                return Err(format!(
                    "--only: unknown workload {name:?}; known: {} (or none)",
                    known.join(", ")
                )
                .into());
            }
        }
    }
    let mut out = Vec::new();
    for preset in presets {
        let short = &preset["atsmf.".len()..];
        if wanted
            .as_ref()
            .is_some_and(|w| !w.iter().any(|n| n == short))
        {
            continue;
        }
        let GeneratorParams::IoConcentration(p) =
            tierlab_trace::generate::resolve(preset, &KvParams::default())?
        else {
            unreachable!("atsmf presets are io-concentration workloads");
        };
        let mut params = String::new();
        if args.quick {
            let _ = write!(
                params,
                ", params = {{ duration_s = {} }}",
                p.duration_s / 4.0
            );
        }
        out.push(Workload {
            name: short.to_string(),
            workload_toml: format!("{{ generator = \"{preset}\"{params} }}"),
            lun_bytes: p.sub_luns as u64 * p.sub_lun_size_bytes,
        });
    }
    Ok(out)
}

/// Slices a real trace to its window, rebased to start at its first kept
/// record, as a native file under `dir/traces`.
fn trace_workload(spec: &str, dir: &Path) -> CliResult<Workload> {
    let (name, rest) = spec
        .split_once('=')
        .ok_or_else(|| format!("--trace {spec:?}: expected NAME=PATH[@START_MIN-END_MIN]"))?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        return Err(
            format!("--trace {spec:?}: NAME must be letters, digits, '_', '-' or '.'").into(),
        );
    }
    let (path, window) = match rest.rsplit_once('@') {
        Some((p, w)) => {
            let (a, b) = w.split_once('-').ok_or_else(|| {
                format!("--trace {spec:?}: window {w:?} must be START_MIN-END_MIN, e.g. 1920-2020")
            })?;
            let parse = |s: &str| {
                s.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| format!("--trace {spec:?}: {s:?} is not a number of minutes"))
            };
            let (a, b) = (parse(a)?, parse(b)?);
            if b <= a {
                return Err(format!("--trace {spec:?}: the window ends before it starts").into());
            }
            (p, Some((a, b)))
        }
        None => (rest, None),
    };
    let reader = TraceReader::open(Path::new(path), &ReadOptions::default())
        .map_err(|e| format!("--trace {name}: {e}"))?;
    let mut slice = Slice::new(
        reader,
        SliceSpec {
            minutes: window,
            ..Default::default()
        },
    )?;
    std::fs::create_dir_all(dir.join("traces"))?;
    let out = dir.join("traces").join(format!("{name}.tlt"));
    let written = tierlab_trace::writer::write_trace(
        &mut slice,
        &out,
        tierlab_trace::Format::Native,
        &Default::default(),
    )?;
    if written.records == 0 {
        return Err(format!("--trace {name}: no record in the window {window:?}").into());
    }
    let stats =
        tierlab_trace::stats::compute(&mut TraceReader::open(&out, &ReadOptions::default())?)?;
    // The LUN: whole sub-LUNs up to the furthest byte touched.
    let lun_bytes = stats.max_offset_end_bytes.div_ceil(GIB).max(1) * GIB;
    // Absolute: the runs resolve relative paths against `dir`, a rerun of
    // a saved config against `dir/configs`.
    let out = std::fs::canonicalize(&out)?;
    Ok(Workload {
        name: name.to_string(),
        workload_toml: format!("{{ trace = {:?} }}", out.display().to_string()),
        lun_bytes,
    })
}

fn flash_device(lun_bytes: u64) -> String {
    format!(
        "[[devices]]\nname = \"flash\"\nmodel = \"ssd\"\npreset = \"intel-p3700\"\ncapacity_bytes = {lun_bytes}\n"
    )
}

fn memory_device(bytes: u64) -> String {
    format!(
        "[[devices]]\nname = \"memory\"\nmodel = \"memory\"\npreset = \"ramdisk\"\ncapacity_bytes = {bytes}\n"
    )
}

fn config_text(w: &Workload, system: &str, seed: u64, cache_bytes: u64) -> String {
    let (devices, policy) = match system {
        "flash" => (flash_device(w.lun_bytes), "kind = \"passthrough\"\n".to_string()),
        "atsmf" => (
            memory_device(w.lun_bytes + GIB) + &flash_device(w.lun_bytes),
            "kind = \"atsmf\"\n# The paper's: 1 GiB sub-LUNs, 24 s periods (20 s traced), N = 30, M = 60 %.\n\
             sub_lun_size_bytes = \"1GiB\"\nperiod_s = 24.0\ncollect_s = 20.0\ntop_n = 30\nshare_m = 0.6\n"
                .to_string(),
        ),
        "flashcache" => (
            memory_device(cache_bytes) + &flash_device(w.lun_bytes),
            format!(
                "kind = \"flashcache\"\n# Sized to ATSMF's peak memory; 4 KiB blocks, FIFO, write-back (the paper's setup).\n\
                 capacity_bytes = {cache_bytes}\nblock_size_bytes = 4096\nreplacement = \"fifo\"\n"
            ),
        ),
        "arc" => (
            memory_device(cache_bytes) + &flash_device(w.lun_bytes),
            format!(
                "kind = \"cache\"\n# Sized to ATSMF's peak memory; ARC over 4 KiB pages, write-back.\n\
                 capacity_bytes = {cache_bytes}\npage_size_bytes = 4096\neviction = \"arc\"\nwrite_mode = \"write-back\"\n"
            ),
        ),
        _ => unreachable!("SYSTEMS"),
    };
    format!(
        "# tierlab reproduce atsmf: workload {name}, system {system}\nseed = {seed}\n\n{devices}\n[policy]\n{policy}\n\
         [[tenants]]\nname = \"{name}\"\nworkload = {wl}\ndriver = {{ mode = \"open\", speed = 1.0 }}\n\n\
         [output]\ninterval_s = 24.0\n",
        name = w.name,
        wl = w.workload_toml,
    )
}

struct RunOut {
    summary: Value,
    dir: PathBuf,
}

fn run_one(
    dir: &Path,
    w: &Workload,
    system: &str,
    seed: u64,
    cache_bytes: u64,
) -> CliResult<RunOut> {
    let text = config_text(w, system, seed, cache_bytes);
    let config_path = dir
        .join("configs")
        .join(format!("{}-{system}.toml", w.name));
    std::fs::write(&config_path, &text)?;
    let cfg = config::parse(&text, &config_path.display().to_string(), &[])?;
    let result = crate::progress::run_sim(&cfg, dir, &format!("{}-{system}", w.name))?;
    let run_dir = dir.join("runs").join(format!("{}-{system}", w.name));
    run::write_outputs(&result, &run_dir).map_err(|e| format!("{}: {e}", run_dir.display()))?;
    let summary: Value = serde_json::from_slice(&std::fs::read(run_dir.join("summary.json"))?)?;
    Ok(RunOut {
        summary,
        dir: run_dir,
    })
}

/// (IOs, mean latency µs) of tier `index` (0 = memory/cache) of a run.
fn tier_ios(summary: &Value, index: usize) -> f64 {
    summary["tiers"]
        .as_array()
        .and_then(|t| t.get(index))
        .and_then(|t| t["ios"].as_f64())
        .unwrap_or(0.0)
}

fn row(workload: &str, system: &'static str, s: &Value, flash_rt_ms: f64, peak: u64) -> Row {
    let mean_rt_ms = s["mean_latency_us"].as_f64().unwrap_or(f64::NAN) / 1e3;
    let ios = s["ios"].as_f64().unwrap_or(0.0);
    let mem = if system == "flash" {
        0.0
    } else {
        tier_ios(s, 0)
    };
    Row {
        workload: workload.to_string(),
        system,
        mean_rt_ms,
        rt_ratio_vs_flash: mean_rt_ms / flash_rt_ms,
        mem_access_ratio: if ios > 0.0 { mem / ios } else { 0.0 },
        peak_mem_bytes: peak,
    }
}

/// `time_s,memory_bytes` from ATSMF's policy series.
fn memory_series(run_dir: &Path) -> CliResult<Vec<(f64, f64)>> {
    let text = std::fs::read_to_string(run_dir.join("policy_series.csv"))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == "memory_bytes")
        .ok_or("policy_series.csv has no memory_bytes column")?;
    Ok(lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.first()?.parse().ok()?, f.get(col)?.parse().ok()?))
        })
        .collect())
}

/// The CDF points of `scope` in a run's latency_cdf.csv.
fn cdf(run_dir: &Path, scope: &str) -> CliResult<Vec<(f64, f64)>> {
    let text = std::fs::read_to_string(run_dir.join("latency_cdf.csv"))?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split(',');
            (f.next()? == scope).then_some(())?;
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect())
}

fn write_table(dir: &Path, rows: &[Row]) -> CliResult {
    let mut csv = String::from(
        "workload,system,mean_rt_ms,rt_ratio_vs_flash,mem_access_ratio,peak_mem_bytes\n",
    );
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{},{:.6},{:.4},{:.4},{}",
            r.workload,
            r.system,
            r.mean_rt_ms,
            r.rt_ratio_vs_flash,
            r.mem_access_ratio,
            r.peak_mem_bytes
        );
    }
    std::fs::write(dir.join("table.csv"), csv)?;
    Ok(())
}

/// Memory-consumption and CDF files and charts of one workload.
fn figures(dir: &Path, w: &Workload, runs: &[(&'static str, RunOut)]) -> CliResult {
    let get = |system: &str| runs.iter().find(|(s, _)| *s == system).map(|(_, r)| &r.dir);
    let atsmf_dir = get("atsmf").ok_or("no ATSMF run")?;
    let memory = memory_series(atsmf_dir)?;
    let mut csv = String::from("time_s,memory_bytes\n");
    for (t, b) in &memory {
        let _ = writeln!(csv, "{t},{b}");
    }
    std::fs::write(dir.join(format!("memory_{}.csv", w.name)), csv)?;
    let gib: Vec<(f64, f64)> = memory
        .iter()
        .map(|&(t, b)| (t / 60.0, b / GIB as f64))
        .collect();
    line_chart_svg(
        &dir.join(format!("memory_{}.svg", w.name)),
        &Chart {
            title: &format!("ATSMF memory consumption — {}", w.name),
            x_label: "time (min)",
            y_label: "memory (GiB)",
            log_x: false,
        },
        &[Series {
            name: "ATSMF",
            points: &gib,
        }],
    )?;
    // Response-time CDFs: flash only; ATSMF and each cache: all / memory / flash.
    let mut curves: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (system, r) in runs {
        let parts: &[(&str, &str)] = match *system {
            "flash" => &[("all", "all")],
            "atsmf" => &[
                ("all", "all"),
                ("memory", "tier:memory"),
                ("flash", "tier:flash"),
            ],
            "flashcache" | "arc" => &[
                ("all", "all"),
                ("memory", "tier:cache"),
                ("flash", "tier:backing"),
            ],
            _ => &[],
        };
        for (label, scope) in parts {
            let points = cdf(&r.dir, scope)?;
            if !points.is_empty() {
                curves.push((format!("{system} {label}"), points));
            }
        }
    }
    let mut csv = String::from("curve,latency_us,cumulative_fraction\n");
    for (name, points) in &curves {
        for (x, y) in points {
            let _ = writeln!(csv, "{name},{x},{y}");
        }
    }
    std::fs::write(dir.join(format!("cdf_{}.csv", w.name)), csv)?;
    let series: Vec<Series> = curves
        .iter()
        .map(|(n, p)| Series { name: n, points: p })
        .collect();
    line_chart_svg(
        &dir.join(format!("cdf_{}.svg", w.name)),
        &Chart {
            title: &format!("response-time CDF — {}", w.name),
            x_label: "response time (µs)",
            y_label: "fraction of IOs",
            log_x: true,
        },
        &series,
    )?;
    Ok(())
}

pub fn run(args: AtsmfArgs) -> CliResult {
    let dir = &args.out;
    std::fs::create_dir_all(dir.join("configs"))?;
    let mut workloads = preset_workloads(&args)?;
    for t in &args.traces {
        workloads.push(trace_workload(t, dir)?);
    }
    if workloads.is_empty() {
        return Err("no workload: --only none needs at least one --trace".into());
    }
    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    for w in &workloads {
        let flash = run_one(dir, w, "flash", args.seed, 0)?;
        let flash_rt_ms = flash.summary["mean_latency_us"]
            .as_f64()
            .unwrap_or(f64::NAN)
            / 1e3;
        let atsmf = run_one(dir, w, "atsmf", args.seed, 0)?;
        let peak = atsmf.summary["run"]["policy_counters"]["peak_memory_bytes"]
            .as_u64()
            .unwrap_or(0);
        // The caches get ATSMF's peak memory, as the paper sized FlashCache
        // (at least one sub-LUN's worth when ATSMF moved nothing).
        let cache_bytes = peak.max(GIB);
        rows.push(row(&w.name, "flash", &flash.summary, flash_rt_ms, 0));
        rows.push(row(&w.name, "atsmf", &atsmf.summary, flash_rt_ms, peak));
        let mut runs = vec![("flash", flash), ("atsmf", atsmf)];
        for system in ["flashcache", "arc"] {
            let r = run_one(dir, w, system, args.seed, cache_bytes)?;
            rows.push(row(&w.name, system, &r.summary, flash_rt_ms, cache_bytes));
            runs.push((system, r));
        }
        figures(dir, w, &runs)?;
        for r in rows.iter().rev().take(SYSTEMS.len()).rev() {
            println!(
                "{:<10} {:<10} mean {:>9.4} ms  ×{:<6.2} vs flash  memory {:>5.1} %  peak {:>6.1} GiB",
                r.workload,
                r.system,
                r.mean_rt_ms,
                r.rt_ratio_vs_flash,
                r.mem_access_ratio * 100.0,
                r.peak_mem_bytes as f64 / GIB as f64
            );
        }
    }
    write_table(dir, &rows)?;
    println!(
        "tierlab reproduce atsmf: {} workloads × {} systems in {:.1} s; wrote {}",
        workloads.len(),
        SYSTEMS.len(),
        started.elapsed().as_secs_f64(),
        dir.join("table.csv").display()
    );
    Ok(())
}
