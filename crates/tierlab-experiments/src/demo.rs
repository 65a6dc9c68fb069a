//! The one-minute tour (`tierlab demo --out DIR`), on data tierlab makes
//! itself. Generate an IO-concentration workload resembling an MSR window
//! (the ATSMF paper's setting), write it in the native and fio formats,
//! measure — from the records and the planted ground truth — how much IO
//! lands in how little of the LUN (the property sub-LUN tiering exploits),
//! then replay that very file through flash only, ATSMF, FlashCache and ARC
//! (`reproduce::atsmf` with the file as its one trace, into DIR/compare).
//! The Python package's `tierlab demo` also writes DIR/report.html.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;
use tierlab_trace::generate::{Concentration, GeneratorParams, KvParams, resolve, write_truth_csv};
use tierlab_trace::writer::{WriteOptions, write_trace};
use tierlab_trace::{Format, RecordStream, stats};

use crate::ExpResult;
use crate::reproduce::atsmf::{AtsmfArgs, ScaleMode};

#[derive(Args)]
pub struct DemoArgs {
    /// Output directory (created).
    #[arg(long)]
    pub out: PathBuf,
    /// The IO-concentration preset to generate (see `tierlab trace gen --list`).
    /// The default, MSR src1_1's window, is read-mostly: a page cache gains
    /// little there and sub-LUN tiering a lot, the paper's point (on the
    /// write-heavy src1_0 a write-back cache absorbs the writes instead).
    #[arg(long, default_value = "atsmf.src1_1")]
    pub preset: String,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Length of the workload in minutes (default: a quarter of the
    /// preset's, as `reproduce atsmf --quick`).
    #[arg(long)]
    pub minutes: Option<f64>,
    /// Only the workload and its analysis, not the four-system comparison.
    #[arg(long)]
    pub no_compare: bool,
}

/// One system of the comparison: a row of compare/table.csv.
#[derive(Clone, Debug, PartialEq)]
pub struct ComparisonRow {
    pub system: String,
    pub mean_rt_ms: f64,
    pub rt_ratio_vs_flash: f64,
    /// Share of IOs served from memory, 0..=1 (docs/metrics.md).
    pub mem_access_ratio: f64,
}

/// What the demo found; every number is also in DIR/summary.json.
#[derive(Clone, Debug)]
pub struct DemoResult {
    pub records: u64,
    pub span_s: Option<f64>,
    pub lun_bytes: u64,
    pub write_ratio: Option<f64>,
    pub footprint_4k_blocks: u64,
    pub concentrations_planted: usize,
    pub concentrations_drifting: usize,
    /// Share of IOs inside an active planted concentration, 0..=1.
    pub ios_inside_concentrations_share: f64,
    /// Mean share of the LUN the active concentrations cover, 0..=1.
    pub lun_share_covered_by_concentrations: f64,
    /// The four systems on the workload; `None` with `--no-compare`.
    pub comparison: Option<Vec<ComparisonRow>>,
}

/// Runs the demo into `args.out` (created) and returns what it found.
pub fn run(args: &DemoArgs) -> ExpResult<DemoResult> {
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let GeneratorParams::IoConcentration(full) = resolve(&args.preset, &KvParams::new())? else {
        return Err(format!(
            "{} is not an IO-concentration preset (see `tierlab trace gen --list`)",
            args.preset
        )
        .into());
    };
    let duration_s = match args.minutes {
        Some(m) if m.is_finite() && m > 0.0 => m * 60.0,
        Some(m) => return Err(format!("--minutes {m}: must be a positive number").into()),
        None => full.duration_s / 4.0,
    };
    let params = KvParams::parse([format!("duration_s={duration_s}")])?;
    let GeneratorParams::IoConcentration(p) = resolve(&args.preset, &params)? else {
        return Err(format!("{}: the preset changed kind with duration_s", args.preset).into());
    };
    let spec = GeneratorParams::IoConcentration(p.clone());
    let native = args.out.join("workload.tlt");
    let iolog = args.out.join("workload.iolog");
    let truth_csv = args.out.join("concentrations.csv");

    // 1. The workload, in native form (numpy-mappable) and as a fio replay log.
    let written = write_trace(
        &mut *spec.build(args.seed)?,
        &native,
        Format::Native,
        &WriteOptions::default(),
    )?;
    let fio_target = args.out.join("fio-target.dat");
    write_trace(
        &mut tierlab_trace::open(&native)?,
        &iolog,
        Format::FioIolog,
        &WriteOptions {
            fio_filename: Some(fio_target.display().to_string()),
        },
    )?;
    let trace_stats = stats::compute(&mut tierlab_trace::open(&native)?)?;

    // 2. The planted concentrations (ground truth).
    let schedule = tierlab_trace::generate::IoConcentrationGen::ground_truth(&p, args.seed)?;
    let planted: Vec<Concentration> = schedule.clone().collect();
    write_truth_csv(schedule, &mut BufWriter::new(File::create(&truth_csv)?))?;

    // 3. From the records: share of IOs inside an active concentration, the
    //    share of the LUN those cover, and a minute × sub-LUN heat map.
    let sub_lun_bytes = p.sub_lun_size_bytes;
    let lun_sub_luns = p.sub_luns as u64;
    let mut inside = 0u64;
    let mut total = 0u64;
    let mut covered_sub_lun_samples = 0u64;
    let mut heat: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut reader = tierlab_trace::open(&native)?;
    let mut next = 0usize; // planted[..next] have started
    let mut active: Vec<&Concentration> = Vec::new();
    while let Some(r) = reader.next_record()? {
        let t = r.time_ns as i64;
        while next < planted.len() && planted[next].start_ns <= t {
            active.push(&planted[next]);
            next += 1;
        }
        active.retain(|c| c.end_ns() > t);
        let sub_lun = r.offset_bytes / sub_lun_bytes;
        total += 1;
        if active.iter().any(|c| c.covers(t, sub_lun as u32)) {
            inside += 1;
        }
        covered_sub_lun_samples += active.iter().map(|c| c.size_sub_luns as u64).sum::<u64>();
        *heat
            .entry((r.time_ns / 60_000_000_000, sub_lun))
            .or_default() += 1;
    }
    let inside_share = inside as f64 / total.max(1) as f64;
    let lun_share = covered_sub_lun_samples as f64 / total.max(1) as f64 / lun_sub_luns as f64;
    let mut heat_out = BufWriter::new(File::create(args.out.join("heatmap.csv"))?);
    writeln!(heat_out, "minute,sub_lun,ios")?;
    for ((minute, sub_lun), ios) in &heat {
        writeln!(heat_out, "{minute},{sub_lun},{ios}")?;
    }
    heat_out.flush()?;

    let drifting = planted.iter().filter(|c| c.drift_step_ns > 0).count();

    // 4. The same file through flash only, ATSMF, FlashCache and ARC.
    let comparison = if args.no_compare {
        serde_json::Value::Null
    } else {
        compare(args, &native)?
    };
    let summary = json!({
        "preset": args.preset,
        "seed": args.seed,
        "records": written.records,
        "lun_bytes": lun_sub_luns * sub_lun_bytes,
        "sub_lun_bytes": sub_lun_bytes,
        "concentrations_planted": planted.len(),
        "concentrations_drifting": drifting,
        "ios_inside_concentrations_share": inside_share,
        "lun_share_covered_by_concentrations": lun_share,
        "duration_s": duration_s,
        "trace_stats": trace_stats,
        "comparison": comparison,
    });
    std::fs::write(
        args.out.join("summary.json"),
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    std::fs::write(
        args.out.join("README.txt"),
        format!(
            "tierlab demo ({preset}, seed {seed})\n\n\
             workload.tlt       the workload, tierlab native format (tierlab.load_native)\n\
             workload.iolog     the same for fio: create {target} (>= {end} bytes) and run\n\
             \x20                  fio --name=replay --read_iolog={iolog}\n\
             concentrations.csv the planted IO concentrations (ground truth)\n\
             heatmap.csv        IOs per minute per 1 GiB sub-LUN\n\
             summary.json       the numbers below; metric definitions in docs/metrics.md\n\
             compare/           flash only, ATSMF, FlashCache and ARC on workload.tlt\n\
             \x20                  (tierlab reproduce atsmf: table.csv, CDFs, memory; docs/atsmf.md)\n\
             report.html        all of it as one page (written by the Python package's\n\
             \x20                  `tierlab demo`, or `tierlab report DIR`)\n",
            preset = args.preset,
            seed = args.seed,
            target = fio_target.display(),
            end = trace_stats.max_offset_end_bytes,
            iolog = iolog.display(),
        ),
    )?;

    // The typed rows come from the very values summary.json holds (the
    // table's text parsed once), so what is printed matches the file.
    let comparison = comparison.as_array().map(|rows| {
        rows.iter()
            .map(|r| ComparisonRow {
                system: r["system"].as_str().unwrap_or("?").to_string(),
                mean_rt_ms: r["mean_rt_ms"].as_f64().unwrap_or(f64::NAN),
                rt_ratio_vs_flash: r["rt_ratio_vs_flash"].as_f64().unwrap_or(f64::NAN),
                mem_access_ratio: r["mem_access_ratio"].as_f64().unwrap_or(f64::NAN),
            })
            .collect()
    });
    Ok(DemoResult {
        records: written.records,
        span_s: trace_stats.span_s,
        lun_bytes: lun_sub_luns * sub_lun_bytes,
        write_ratio: trace_stats.write_ratio,
        footprint_4k_blocks: trace_stats.footprint_4k_blocks,
        concentrations_planted: planted.len(),
        concentrations_drifting: drifting,
        ios_inside_concentrations_share: inside_share,
        lun_share_covered_by_concentrations: lun_share,
        comparison,
    })
}

/// Runs `reproduce atsmf` on the demo's workload file and returns its
/// table.csv rows as JSON objects (numbers as numbers): summary.json
/// embeds the table exactly as written, digits included.
fn compare(args: &DemoArgs, native: &Path) -> ExpResult<serde_json::Value> {
    let dir = args.out.join("compare");
    let name = args.preset.strip_prefix("atsmf.").unwrap_or(&args.preset);
    // Absolute, so the saved configs name the trace wherever they are run from.
    let native = std::fs::canonicalize(native)?;
    crate::reproduce::atsmf::run(AtsmfArgs {
        quick: false,
        out: dir.clone(),
        traces: vec![format!("{name}={}", native.display())],
        only: Some("none".into()),
        seed: args.seed,
        scale: ScaleMode::Paper,
    })?;
    let table = std::fs::read_to_string(dir.join("table.csv"))?;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let rows = lines
        .map(|l| {
            let obj: serde_json::Map<String, serde_json::Value> = header
                .iter()
                .zip(l.split(','))
                .map(|(k, v)| {
                    let value = v
                        .parse::<u64>()
                        .map(serde_json::Value::from)
                        .or_else(|_| v.parse::<f64>().map(serde_json::Value::from))
                        .unwrap_or_else(|_| serde_json::Value::from(v));
                    (k.to_string(), value)
                })
                .collect();
            serde_json::Value::Object(obj)
        })
        .collect();
    Ok(serde_json::Value::Array(rows))
}
