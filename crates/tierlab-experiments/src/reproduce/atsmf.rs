//! `tierlab reproduce atsmf [--quick] --out DIR`: the ATSMF paper's
//! Tables 5–6 and Figs. 8–14 (spec/atsmf.md) on the generated analogs of
//! its MSR windows (the `atsmf.*` presets) and on any real traces named.
//!
//! Per workload, four systems replay the same IO stream open loop:
//! flash only (the P3700 model), ATSMF (ramdisk memory tier over the same
//! flash), and two memory page caches sized to ATSMF's peak memory use as
//! the paper sized FlashCache: FlashCache (set-associative, FIFO, 4 KiB,
//! write-back) and ARC (the cache layer with ARC eviction, write-back).
//! Scale: the paper's settings (1 GiB sub-LUNs, 24 s periods, N = 30)
//! fit its volumes (182–800 GB) and windows (1–5 h). `--scale auto` fits a
//! real trace instead (`Scale::auto`): sub-LUNs and periods sized so the
//! volume-to-sub-LUN and window-to-period ratios are the paper's (the
//! geometric means of its eight experiments), periods long enough for
//! `MIN_IOS_PER_PERIOD` IOs. A trace workload whose volume holds fewer than
//! 16 sub-LUNs or whose window spans fewer than 3 periods is warned about,
//! with the auto settings.
//!
//! Outputs (docs/atsmf.md "Reproduction"):
//! - `table.csv`: `workload,system,mean_rt_ms,rt_ratio_vs_flash,mem_access_ratio,peak_mem_bytes,background_tail_s`;
//! - `scale.csv`: per workload the ATSMF settings used and what they give
//!   (sub-LUNs, periods, IOs per period), and any warning;
//! - `memory_WORKLOAD.csv/.svg`: ATSMF's memory consumption over time;
//! - `cdf_WORKLOAD.csv/.svg`: response-time CDFs (all / memory / flash part);
//! - `runs/WORKLOAD-SYSTEM/`: each run's full outputs, `configs/` each config.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::Value;
use tierlab_sim::{config, run};
use tierlab_trace::generate::{GeneratorParams, KvParams};
use tierlab_trace::slice::{Slice, SliceSpec};
use tierlab_trace::{ReadOptions, TraceReader};

use crate::ExpResult;
use crate::plot::{Chart, Series, line_chart_svg};

mod paper;

const GIB: u64 = 1 << 30;

#[derive(Args, Debug)]
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
    /// ATSMF's sub-LUN size and period for the --trace workloads: the
    /// paper's (1 GiB, 24 s), or derived from each trace's volume and
    /// duration so that their ratios match the paper's experiments (the
    /// presets are built at the paper's scale and always use it). Auto
    /// also spreads quantized timestamps evenly over their quantum.
    #[arg(long, value_enum, default_value_t = ScaleMode::Paper)]
    pub scale: ScaleMode,
}

impl AtsmfArgs {
    /// The full run into `out` with every option at its default (what
    /// `tierlab reproduce atsmf --out OUT` runs).
    pub fn new(out: PathBuf) -> Self {
        AtsmfArgs {
            quick: false,
            out,
            traces: Vec::new(),
            only: None,
            seed: 1,
            scale: ScaleMode::Paper,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ScaleMode {
    Paper,
    Auto,
}

/// The paper's experiments (Table 5): LUN GB and trace window minutes.
const PAPER_EXPERIMENTS: [(f64, f64); 8] = [
    (293.0, 100.0),
    (293.0, 120.0),
    (800.0, 320.0),
    (800.0, 130.0),
    (236.0, 210.0),
    (800.0, 260.0),
    (569.0, 160.0),
    (182.0, 60.0),
];
const PAPER_SUB_LUN_BYTES: u64 = GIB;
const PAPER_PERIOD_S: f64 = 24.0;
const PAPER_COLLECT_S: f64 = 20.0;
const PAPER_TOP_N: usize = 30;
const PAPER_HISTORY_S: f64 = 43_200.0;
/// `--scale auto` makes periods at least this long in IOs (the trace's
/// mean rate): fewer IOs than this per period leave the per-sub-LUN
/// counts too sparse to find concentrations in (our choice, not the
/// paper's; it lowers the period count of short sparse traces).
const MIN_IOS_PER_PERIOD: f64 = 500.0;
/// Below these the run warns (ATSMF then has too little to choose from,
/// or too few periods to decide and act in).
const MIN_SUB_LUNS: u64 = 16;
const MIN_PERIODS: f64 = 3.0;

/// Geometric means over the paper's experiments: sub-LUNs per LUN, and
/// periods per trace window.
fn paper_ratios() -> (f64, f64) {
    let n = PAPER_EXPERIMENTS.len() as f64;
    let gm = |f: &dyn Fn(&(f64, f64)) -> f64| {
        (PAPER_EXPERIMENTS.iter().map(|e| f(e).ln()).sum::<f64>() / n).exp()
    };
    let gb = (1u64 << 30) as f64 / 1e9; // a 1 GiB sub-LUN in GB
    (
        gm(&|&(lun_gb, _)| lun_gb / gb),
        gm(&|&(_, min)| min * 60.0 / PAPER_PERIOD_S),
    )
}

/// ATSMF's scale-dependent settings for one workload.
#[derive(Clone, Debug, PartialEq)]
struct Scale {
    sub_lun_bytes: u64,
    period_s: f64,
    collect_s: f64,
    top_n: usize,
    history_s: f64,
    move_chunk_bytes: u64,
}

impl Scale {
    fn paper() -> Scale {
        Scale {
            sub_lun_bytes: PAPER_SUB_LUN_BYTES,
            period_s: PAPER_PERIOD_S,
            collect_s: PAPER_COLLECT_S,
            top_n: PAPER_TOP_N,
            history_s: PAPER_HISTORY_S,
            move_chunk_bytes: 1 << 20,
        }
    }

    /// Fits a trace of `volume_bytes` (furthest byte touched), `span_s`
    /// and `ios`, keeping three of the paper's ratios (`paper_ratios`):
    /// - periods per trace window, but periods of at least
    ///   `MIN_IOS_PER_PERIOD` IOs;
    /// - sub-LUNs per volume, but a sub-LUN no bigger than the paper's
    ///   moves in the same share of a period (1 GiB per 24 s period: a
    ///   move the cost-benefit test can pay off within a few periods);
    /// - N per sub-LUN (30 of the paper's ~424: "a few %").
    ///
    /// The prediction history scales with the period.
    fn auto(volume_bytes: u64, span_s: f64, ios: u64) -> Scale {
        let (subs_per_lun, periods_per_window) = paper_ratios();
        let span_s = span_s.max(1e-3);
        let by_ratio = span_s / periods_per_window;
        let by_rate = span_s * MIN_IOS_PER_PERIOD / ios.max(1) as f64;
        // Whole microseconds: the configs print it.
        let period_s = ((by_ratio.max(by_rate) * 1e6).round() / 1e6).max(1e-6);
        let by_volume = volume_bytes as f64 / subs_per_lun;
        let by_move = PAPER_SUB_LUN_BYTES as f64 * period_s / PAPER_PERIOD_S;
        let raw = by_volume.min(by_move).ceil().max(4096.0) as u64;
        // Whole 64 KiB (1 MiB from 1 MiB up), so chunks divide it.
        let granule: u64 = if raw >= 1 << 20 { 1 << 20 } else { 64 << 10 };
        let sub_lun_bytes = raw.div_ceil(granule) * granule;
        let subs = volume_bytes.div_ceil(sub_lun_bytes).max(1);
        let top_n = ((subs as f64 * PAPER_TOP_N as f64 / subs_per_lun).round() as usize).max(1);
        Scale {
            sub_lun_bytes,
            period_s,
            collect_s: ((period_s * PAPER_COLLECT_S / PAPER_PERIOD_S) * 1e6).round() / 1e6,
            top_n,
            history_s: PAPER_HISTORY_S * period_s / PAPER_PERIOD_S,
            move_chunk_bytes: sub_lun_bytes.min(1 << 20),
        }
    }
}

/// One workload: a TOML `workload = ...` value and the LUN it needs.
struct Workload {
    name: String,
    workload_toml: String,
    lun_bytes: u64,
    scale: Scale,
    /// A trace's span and IOs (None for the presets).
    trace: Option<(f64, u64)>,
    /// Why this scale may not suit the workload (empty: none).
    warning: String,
    /// `driver.spread` of its replays: `even` at auto scale (quantized
    /// stamps spread over their quantum), else `none`.
    spread: &'static str,
    /// A preset: its generator and the parameters set on it (TOML inline
    /// table entries, e.g. `duration_s = 1500`).
    generator: Option<(String, String)>,
}

#[derive(Clone, Debug)]
struct Row {
    workload: String,
    system: &'static str,
    mean_rt_ms: f64,
    rt_ratio_vs_flash: f64,
    mem_access_ratio: f64,
    peak_mem_bytes: u64,
    /// How long the run went on after the workload (moves in flight).
    background_tail_s: f64,
    /// Mean response time of the IOs served by memory only and of those
    /// that touched flash (tiers 0 and 1), µs: what paper_vs_ours splits
    /// a response-time difference with.
    tier_mean_latency_us: [f64; 2],
}

const SYSTEMS: [&str; 4] = ["flash", "atsmf", "flashcache", "arc"];

fn preset_workloads(args: &AtsmfArgs) -> ExpResult<Vec<Workload>> {
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
        let params = if args.quick {
            format!("duration_s = {}", p.duration_s / 4.0)
        } else {
            String::new()
        };
        out.push(Workload {
            name: short.to_string(),
            workload_toml: generator_toml(preset, &params),
            generator: Some((preset.to_string(), params)),
            lun_bytes: p.sub_luns as u64 * p.sub_lun_size_bytes,
            scale: Scale::paper(),
            trace: None,
            warning: String::new(),
            spread: "none",
        });
    }
    Ok(out)
}

/// A generated workload's TOML value; `params`: inline-table entries.
fn generator_toml(preset: &str, params: &str) -> String {
    if params.is_empty() {
        format!("{{ generator = \"{preset}\" }}")
    } else {
        format!("{{ generator = \"{preset}\", params = {{ {params} }} }}")
    }
}

/// ATSMF alone on `w` (a preset) at other concentration shares
/// (`paper::SENSITIVITY_SHARES`); with the main run's share, the
/// memory access ratio at each (`sensitivity.csv`).
fn sensitivity(
    dir: &Path,
    w: &Workload,
    seed: u64,
    base_mem: f64,
    base_peak: u64,
) -> ExpResult<paper::Sensitivity> {
    let (preset, params) = w.generator.as_ref().expect("a preset");
    // ATSMF alone on the preset with one more generator parameter.
    let run_with = |extra: String, suffix: String| -> ExpResult<Value> {
        let all = if params.is_empty() {
            extra
        } else {
            format!("{params}, {extra}")
        };
        let variant = Workload {
            name: format!("{}-{suffix}", w.name),
            workload_toml: generator_toml(preset, &all),
            lun_bytes: w.lun_bytes,
            scale: w.scale.clone(),
            trace: None,
            warning: String::new(),
            spread: w.spread,
            generator: None,
        };
        Ok(run_one(dir, &variant, "atsmf", seed, 0)?.summary)
    };
    let mut by_share = vec![(paper::ANALOG_SHARE, base_mem)];
    for share in paper::SENSITIVITY_SHARES {
        let summary = run_with(
            format!("concentration_share = {share}"),
            format!("share{share}"),
        )?;
        let ios = summary["ios"].as_f64().unwrap_or(0.0);
        by_share.push((
            share,
            if ios > 0.0 {
                tier_ios(&summary, 0) / ios
            } else {
                0.0
            },
        ));
    }
    let mut peak_by_mean_active = vec![(paper::ANALOG_MEAN_ACTIVE, base_peak)];
    let summary = run_with(
        format!("mean_active = {}", paper::SENSITIVITY_MEAN_ACTIVE),
        format!("active{}", paper::SENSITIVITY_MEAN_ACTIVE),
    )?;
    peak_by_mean_active.push((paper::SENSITIVITY_MEAN_ACTIVE, peak_memory_bytes(&summary)?));
    by_share.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut csv = String::from(
        "workload,concentration_share,mean_active,atsmf_mem_access_ratio,atsmf_peak_mem_bytes\n",
    );
    for (share, mem) in &by_share {
        let peak = if *share == paper::ANALOG_SHARE {
            base_peak.to_string()
        } else {
            String::new()
        };
        let _ = writeln!(
            csv,
            "{},{share},{},{mem:.4},{peak}",
            w.name,
            paper::ANALOG_MEAN_ACTIVE
        );
    }
    for (active, peak) in &peak_by_mean_active[1..] {
        let _ = writeln!(csv, "{},{},{active},,{peak}", w.name, paper::ANALOG_SHARE);
    }
    std::fs::write(dir.join("sensitivity.csv"), csv)?;
    Ok(paper::Sensitivity {
        workload: w.name.clone(),
        by_share,
        peak_by_mean_active,
    })
}

/// ATSMF again with moves copying more chunks at once
/// (`paper::COPY_DEPTHS`, ours 4), on each preset whose response-time gap
/// the per-tier split puts on the flash part (`paper::flash_part_gap`):
/// the paper does not publish its copy depth, and a heavier copy load is
/// the suspected cause (`copy_depth.csv`).
fn copy_depth_runs(
    dir: &Path,
    workloads: &[Workload],
    rows: &[Row],
    seed: u64,
) -> ExpResult<Vec<paper::CopyDepth>> {
    let mut out = Vec::new();
    let mut csv = String::from("workload,move_iodepth,atsmf_rt_ratio_vs_flash,mem_access_ratio\n");
    for w in workloads.iter().filter(|w| w.generator.is_some()) {
        if !paper::flash_part_gap(rows, &w.name) {
            continue;
        }
        let flash_ms = rows
            .iter()
            .find(|r| r.workload == w.name && r.system == "flash")
            .map_or(f64::NAN, |r| r.mean_rt_ms);
        for depth in paper::COPY_DEPTHS {
            let r = run_one(dir, w, &format!("atsmf-copy{depth}"), seed, 0)?;
            let row = row(&w.name, "atsmf", &r.summary, flash_ms, 0);
            let _ = writeln!(
                csv,
                "{},{depth},{:.4},{:.4}",
                w.name, row.rt_ratio_vs_flash, row.mem_access_ratio
            );
            out.push(paper::CopyDepth {
                workload: w.name.clone(),
                move_iodepth: depth,
                rt_ratio_vs_flash: row.rt_ratio_vs_flash,
            });
        }
    }
    std::fs::write(dir.join("copy_depth.csv"), csv)?;
    Ok(out)
}

/// Slices a real trace to its window, rebased to start at its first kept
/// record, as a native file under `dir/traces`.
fn trace_workload(spec: &str, dir: &Path, mode: ScaleMode) -> ExpResult<Workload> {
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
    let span_s = stats.span_s.unwrap_or(0.0);
    let volume = stats.max_offset_end_bytes.max(1);
    let auto = Scale::auto(volume, span_s, stats.requests);
    let scale = match mode {
        ScaleMode::Paper => Scale::paper(),
        ScaleMode::Auto => auto.clone(),
    };
    // The LUN: whole sub-LUNs up to the furthest byte touched.
    let sub_luns = volume.div_ceil(scale.sub_lun_bytes).max(1);
    let lun_bytes = sub_luns * scale.sub_lun_bytes;
    let periods = span_s / scale.period_s;
    let mut why = Vec::new();
    if sub_luns < MIN_SUB_LUNS {
        why.push(format!(
            "its volume ({}) holds {sub_luns} sub-LUN(s) of {} (fewer than {MIN_SUB_LUNS}: ATSMF has little to choose from)",
            human_bytes(volume),
            human_bytes(scale.sub_lun_bytes)
        ));
    }
    if periods < MIN_PERIODS {
        why.push(format!(
            "its {span_s:.3} s span {} {periods:.2} period(s) of {} s (fewer than {MIN_PERIODS}: a concentration is found a period after it starts, moved after that)",
            if periods < 1.0 { "is" } else { "spans" },
            scale.period_s
        ));
    }
    let warning = if why.is_empty() {
        String::new()
    } else {
        let mut w = format!("--trace {name}: {}", why.join("; "));
        if scale != auto {
            let _ = write!(
                w,
                ". --scale auto would use sub-LUNs of {} and periods of {} s (N = {})",
                human_bytes(auto.sub_lun_bytes),
                auto.period_s,
                auto.top_n
            );
        }
        w
    };
    // Absolute: the runs resolve relative paths against `dir`, a rerun of
    // a saved config against `dir/configs`.
    let out = std::fs::canonicalize(&out)?;
    Ok(Workload {
        name: name.to_string(),
        workload_toml: format!("{{ trace = {:?} }}", out.display().to_string()),
        lun_bytes,
        scale,
        trace: Some((span_s, stats.requests)),
        warning,
        spread: match mode {
            ScaleMode::Paper => "none",
            ScaleMode::Auto => "even",
        },
        generator: None,
    })
}

/// Bytes for people: the largest binary unit that keeps 1–3 digits.
fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", units[u])
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// `scale.csv`: the ATSMF settings each workload ran with and what they
/// give.
fn write_scale(dir: &Path, workloads: &[Workload]) -> ExpResult {
    let mut csv = String::from(
        "workload,sub_lun_bytes,period_s,collect_s,top_n,sub_luns,trace_span_s,periods,ios_per_period,warning\n",
    );
    for w in workloads {
        let s = &w.scale;
        let (span, periods, per) = match w.trace {
            Some((span, ios)) => {
                let periods = span / s.period_s;
                (
                    format!("{span:.6}"),
                    format!("{periods:.3}"),
                    format!("{:.1}", ios as f64 / periods.max(1e-9)),
                )
            }
            None => (String::new(), String::new(), String::new()),
        };
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{span},{periods},{per},\"{}\"",
            w.name,
            s.sub_lun_bytes,
            s.period_s,
            s.collect_s,
            s.top_n,
            w.lun_bytes / s.sub_lun_bytes,
            w.warning.replace('"', "'")
        );
    }
    std::fs::write(dir.join("scale.csv"), csv)?;
    Ok(())
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
        "flash" => (
            flash_device(w.lun_bytes),
            "kind = \"passthrough\"\n".to_string(),
        ),
        _ if system.starts_with("atsmf") => {
            let s = &w.scale;
            // `atsmf-copyN`: the copy-depth variant (paper_vs_ours).
            let copy_depth = system
                .strip_prefix("atsmf-copy")
                .map_or(String::new(), |d| format!("move_iodepth = {d}\n"));
            let comment = if *s == Scale::paper() {
                "# The paper's: 1 GiB sub-LUNs, 24 s periods (20 s traced), N = 30, M = 60 %."
                    .to_string()
            } else {
                "# --scale auto: the paper's volume/sub-LUN and window/period ratios on this trace; M = 60 %."
                    .to_string()
            };
            (
                memory_device(w.lun_bytes + s.sub_lun_bytes) + &flash_device(w.lun_bytes),
                format!(
                    "kind = \"atsmf\"\n{comment}\nsub_lun_size_bytes = {}\nperiod_s = {:?}\ncollect_s = {:?}\n\
                     top_n = {}\nshare_m = 0.6\nhistory_s = {:?}\nmove_chunk_bytes = {}\nbuffer_bytes = {}\n{copy_depth}",
                    s.sub_lun_bytes,
                    s.period_s,
                    s.collect_s,
                    s.top_n,
                    s.history_s,
                    s.move_chunk_bytes,
                    s.sub_lun_bytes
                ),
            )
        }
        "flashcache" => (
            memory_device(cache_bytes) + &flash_device(w.lun_bytes),
            format!(
                "kind = \"flashcache\"\n# Sized to ATSMF's peak memory; 4 KiB blocks, FIFO, write-back (the paper's setup);\n\
                 # no sequential cutoff (flashcache's skip_seq_thresh_kb defaults to off).\n\
                 capacity_bytes = {cache_bytes}\nblock_size_bytes = 4096\nreplacement = \"fifo\"\nsequential_bypass_bytes = 0\n"
            ),
        ),
        "arc" => (
            memory_device(cache_bytes) + &flash_device(w.lun_bytes),
            format!(
                "kind = \"cache\"\n# Sized to ATSMF's peak memory; ARC over 4 KiB pages, write-back; every page\n\
                 # cached, as the baseline caches of the paper (no sequential cutoff).\n\
                 capacity_bytes = {cache_bytes}\npage_size_bytes = 4096\neviction = \"arc\"\nwrite_mode = \"write-back\"\n\
                 sequential_bypass_bytes = 0\n"
            ),
        ),
        _ => unreachable!("SYSTEMS"),
    };
    format!(
        "# tierlab reproduce atsmf: workload {name}, system {system}\nseed = {seed}\n\n{devices}\n[policy]\n{policy}\n\
         [[tenants]]\nname = \"{name}\"\nworkload = {wl}\ndriver = {{ mode = \"open\", speed = 1.0, spread = \"{spread}\" }}\n\n\
         [output]\ninterval_s = {interval:?}\n",
        name = w.name,
        wl = w.workload_toml,
        interval = w.scale.period_s,
        spread = w.spread,
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
) -> ExpResult<RunOut> {
    let text = config_text(w, system, seed, cache_bytes);
    let config_path = dir
        .join("configs")
        .join(format!("{}-{system}.toml", w.name));
    std::fs::write(&config_path, &text)?;
    let cfg = config::parse(&text, &config_path.display().to_string(), &[])?;
    let result = crate::progress::run_sim(&cfg, dir, &format!("{}-{system}", w.name))?;
    // The workload's own warnings (e.g. quantized stamps), once per workload.
    if system == "flash" {
        for warning in &result.info.warnings {
            eprintln!("warning: {}: {warning}", w.name);
        }
    }
    let run_dir = dir.join("runs").join(format!("{}-{system}", w.name));
    run::write_outputs(&result, &run_dir).map_err(|e| format!("{}: {e}", run_dir.display()))?;
    let summary: Value = serde_json::from_slice(&std::fs::read(run_dir.join("summary.json"))?)?;
    Ok(RunOut {
        summary,
        dir: run_dir,
    })
}

/// (IOs, mean latency µs) of tier `index` (0 = memory/cache) of a run.
fn tier_value(summary: &Value, index: usize, key: &str) -> Option<f64> {
    summary["tiers"]
        .as_array()
        .and_then(|t| t.get(index))
        .and_then(|t| t[key].as_f64())
}

fn tier_ios(summary: &Value, index: usize) -> f64 {
    tier_value(summary, index, "ios").unwrap_or(0.0)
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
        background_tail_s: s["background_tail_ns"].as_f64().unwrap_or(0.0) / 1e9,
        tier_mean_latency_us: [0, 1]
            .map(|i| tier_value(s, i, "mean_latency_us").unwrap_or(f64::NAN)),
    }
}

/// `time_s,memory_bytes` from ATSMF's policy series.
/// ATSMF's peak memory from a run's summary.json: an error, not a silent 0,
/// when the counter is missing (a renamed counter, a run of another policy).
fn peak_memory_bytes(summary: &Value) -> ExpResult<u64> {
    let name = tierlab_policies::atsmf::counter::PEAK_MEMORY_BYTES;
    summary["run"]["policy_counters"][name]
        .as_u64()
        .ok_or_else(|| format!("summary.json: run.policy_counters has no `{name}`").into())
}

fn memory_series(run_dir: &Path) -> ExpResult<Vec<(f64, f64)>> {
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
fn cdf(run_dir: &Path, scope: &str) -> ExpResult<Vec<(f64, f64)>> {
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

fn write_table(dir: &Path, rows: &[Row]) -> ExpResult {
    let mut csv = String::from(
        "workload,system,mean_rt_ms,rt_ratio_vs_flash,mem_access_ratio,peak_mem_bytes,background_tail_s\n",
    );
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{},{:.6},{:.4},{:.4},{},{:.6}",
            r.workload,
            r.system,
            r.mean_rt_ms,
            r.rt_ratio_vs_flash,
            r.mem_access_ratio,
            r.peak_mem_bytes,
            r.background_tail_s
        );
    }
    std::fs::write(dir.join("table.csv"), csv)?;
    Ok(())
}

/// Memory-consumption and CDF files and charts of one workload.
fn figures(dir: &Path, w: &Workload, runs: &[(&'static str, RunOut)]) -> ExpResult {
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

pub fn run(args: AtsmfArgs) -> ExpResult {
    let dir = &args.out;
    std::fs::create_dir_all(dir.join("configs"))?;
    let mut workloads = preset_workloads(&args)?;
    for t in &args.traces {
        workloads.push(trace_workload(t, dir, args.scale)?);
    }
    if workloads.is_empty() {
        return Err("no workload: --only none needs at least one --trace".into());
    }
    for w in &workloads {
        if !w.warning.is_empty() {
            eprintln!("warning: {}", w.warning);
        }
    }
    write_scale(dir, &workloads)?;
    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    for w in &workloads {
        let flash = run_one(dir, w, "flash", args.seed, 0)?;
        let flash_rt_ms = flash.summary["mean_latency_us"]
            .as_f64()
            .unwrap_or(f64::NAN)
            / 1e3;
        let atsmf = run_one(dir, w, "atsmf", args.seed, 0)?;
        let peak = peak_memory_bytes(&atsmf.summary)?;
        // The caches get ATSMF's peak memory, as the paper sized FlashCache
        // (at least one sub-LUN's worth when ATSMF moved nothing).
        let cache_bytes = peak.max(w.scale.sub_lun_bytes);
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
                "{:<10} {:<10} mean {:>9.4} ms  ×{:<6.2} vs flash  memory {:>5.1} %  peak {:>9}{}",
                r.workload,
                r.system,
                r.mean_rt_ms,
                r.rt_ratio_vs_flash,
                r.mem_access_ratio * 100.0,
                human_bytes(r.peak_mem_bytes),
                if r.background_tail_s > 0.0 {
                    format!("  (moving {:.3} s after the workload)", r.background_tail_s)
                } else {
                    String::new()
                }
            );
        }
    }
    write_table(dir, &rows)?;
    // Paper vs ours, with the sensitivity runs that measure its main
    // difference (on the first preset that ran).
    if let Some(w) = workloads.iter().find(|w| w.generator.is_some()) {
        let base = rows
            .iter()
            .find(|r| r.workload == w.name && r.system == "atsmf");
        let sens = sensitivity(
            dir,
            w,
            args.seed,
            base.map_or(0.0, |r| r.mem_access_ratio),
            base.map_or(0, |r| r.peak_mem_bytes),
        )?;
        let copy = copy_depth_runs(dir, &workloads, &rows, args.seed)?;
        let comparisons = paper::compare(&rows, args.quick, Some(&sens), &copy);
        crate::reproduce::paper_vs_ours::write_csv(dir, &comparisons)?;
        println!(
            "{}",
            crate::reproduce::paper_vs_ours::summary_line(&comparisons)
        );
    }
    println!(
        "tierlab reproduce atsmf: {} workloads × {} systems in {:.1} s; wrote {}",
        workloads.len(),
        SYSTEMS.len(),
        started.elapsed().as_secs_f64(),
        dir.join("table.csv").display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_ratios_are_the_geometric_means_of_its_experiments() {
        // Sub-LUNs per LUN: (293·293·800·800·236·800·569·182)^(1/8) GB over
        // a 1 GiB (1.073741824 GB) sub-LUN; periods per window:
        // (100·120·320·130·210·260·160·60)^(1/8) min × 60 / 24 s.
        let (subs, periods) = paper_ratios();
        assert!((subs - 396.2668).abs() < 1e-3, "{subs}");
        assert!((periods - 375.9736).abs() < 1e-3, "{periods}");
    }

    #[test]
    fn auto_scale_by_hand() {
        // 8 GiB, 1 s, 10,000 IOs: periods of 500 IOs (0.05 s > 1/376 s);
        // a sub-LUN of min(8 GiB / 396.27 = 21.7 MB, 1 GiB × 0.05 / 24 =
        // 2.24 MB) → whole MiB: 3 MiB; 2,731 sub-LUNs; N = 2731 × 30 /
        // 396.27 = 206.8 → 207.
        let s = Scale::auto(8 << 30, 1.0, 10_000);
        assert_eq!(s.period_s, 0.05);
        assert_eq!(s.sub_lun_bytes, 3 << 20);
        assert_eq!(s.top_n, 207);
        assert!((s.collect_s - 0.041667).abs() < 1e-9);
        assert!((s.history_s - 90.0).abs() < 1e-9);
        assert_eq!(s.move_chunk_bytes, 1 << 20);
        // One of the paper's experiments (800 GB, 260 min, many IOs) comes
        // back near its own scale: periods of 15,600 / 375.97 = 41.49 s; the
        // volume ratio gives 800e9 / 396.27 = 2.02 GB, the move bound
        // 2^30 × 41.49 / 24 = 1.856 GB → 1,771 MiB sub-LUNs.
        let s = Scale::auto(800_000_000_000, 260.0 * 60.0, 100_000_000);
        assert!((s.period_s - 41.49228).abs() < 1e-5, "{}", s.period_s);
        assert_eq!(s.sub_lun_bytes, 1771 << 20);
        // A 104 MiB volume, 147 s, 50,000 IOs: 500-IO periods (1.47 s);
        // 104 MiB / 396.27 = 275 KB → whole 64 KiB: 320 KiB; N = 25.
        let s = Scale::auto(109_051_904, 147.0, 50_000);
        assert_eq!(
            (s.period_s, s.sub_lun_bytes, s.top_n),
            (1.47, 320 << 10, 25)
        );
    }
}
