//! `tierlab reproduce raid [--quick] --out DIR`: the SSD-RAID thesis'
//! experiment (spec/ssd-raid.md, seed 003) on the detailed flash SSD:
//! RAID 1 of two single-chip SSDs against one such SSD, read IOPS, on
//! generated workloads matching the nine traces of the thesis' Table 1
//! (`ssdraid.*` presets) and, with `--traces DIR`, on the public real
//! traces in DIR whose addresses fit the SSD (the others are skipped with
//! a message).
//!
//! Every run replays its workload open loop at its own timestamps. **Read
//! IOPS** = reads completed / read-busy time, where read-busy time is the
//! length of the union of the reads' [arrival, completion) intervals: the
//! rate at which the device delivers reads while the host is waiting for
//! one. Open-loop throughput would equal the arrival rate for both configs;
//! this measures how fast reads are served when they are wanted, so a
//! mirror helps exactly when splitting the reads shortens the time the
//! host waits (docs/flash-ssd.md, "The SSD-RAID experiment").
//!
//! The SSDs let their host defer garbage collection (`host_gc_control`),
//! and the RAID controller staggers its members' GC, so a read always finds
//! a copy that is not collecting unless both must (`--background-gc
//! independent` runs each SSD's GC on its own, as without host control;
//! docs/flash-ssd.md).
//!
//! Outputs: `DIR/table.csv` (`workload,config,read_iops,mean_latency_us,energy_j`),
//! `DIR/improvement.csv` (RAID 1 over single, per workload),
//! `DIR/variants.csv` (the runs that measure why ours differs from the
//! thesis: the mirror with independent GC; independent GC closed loop at
//! NCQ depth 32, as the thesis ran),
//! `DIR/paper_vs_ours.csv` (docs/fidelity.md), `DIR/read_iops.svg`,
//! `DIR/improvement.svg`, and each run's config in `DIR/configs/` (rerun
//! any row with `tierlab sim`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use tierlab_core::device::DeviceState;
use tierlab_core::{Op, TimeNs};
use tierlab_sim::Observer;

use crate::ExpResult;
use crate::plot::{Chart, Series, line_chart_svg};

mod paper;

/// The nine traces of the thesis' Table 1, as generator presets.
const PRESETS: [&str; 9] = [
    "financial1",
    "financial2",
    "websearch2",
    "hm_0",
    "proj_0",
    "proj_3",
    "prxy_0",
    "prxy_1",
    "web_0",
];

/// Real traces that may fit the single-chip SSD: (path under the traces
/// folder, device to keep).
const REAL_TRACES: [(&str, Option<&str>); 6] = [
    ("msr/hm_0-sample-1k.csv", None),
    ("msr/msr-window-rw20_80.replay.txt", None),
    ("msr/msr-window-rw40_60.replay.txt", None),
    ("umass-spc/websearch-60s.disksim.txt", Some("0")),
    ("tencent-cbs/cbs-window-rw60_40.flashnet.csv", None),
    ("tencent-cbs/cbs-window-size_thpt.flashnet.csv", None),
];

#[derive(Args, Debug)]
pub struct RaidArgs {
    /// Smaller workloads (2 % of the presets' 1.2 M requests; well under
    /// two minutes in release builds).
    #[arg(long)]
    pub quick: bool,
    /// Output directory (table.csv, improvement.csv, SVG plots, configs).
    #[arg(long)]
    pub out: PathBuf,
    /// Folder of public real traces to add (the MSR, UMass and Tencent
    /// windows listed in docs/flash-ssd.md; those missing from it are
    /// skipped with a message). Without it only the generated workloads run.
    #[arg(long)]
    pub traces: Option<PathBuf>,
    /// Arrival rate of the generated workloads, requests/s.
    #[arg(long, default_value_t = RaidArgs::RATE_IOPS)]
    pub rate_iops: f64,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Host queue depth: 0 replays open loop at the workload's timestamps;
    /// N > 0 replays as fast as possible in trace order with N outstanding.
    #[arg(long, default_value_t = 0)]
    pub iodepth: u32,
    /// State the SSDs start in: none, fill or steady.
    #[arg(long, default_value = RaidArgs::PRECONDITION)]
    pub precondition: String,
    /// Garbage collection of the mirror's SSDs: `staggered` (the SSDs let
    /// their host defer GC and the RAID controller lets one collect at a
    /// time) or `independent` (each SSD collects on its own).
    #[arg(long, value_enum, default_value_t = BackgroundGc::Staggered)]
    pub background_gc: BackgroundGc,
}

impl RaidArgs {
    /// Defaults of the options, shared by the command line and [`RaidArgs::new`].
    pub const RATE_IOPS: f64 = 200.0;
    pub const PRECONDITION: &str = "steady";

    /// The full run into `out` with every option at its default (what
    /// `tierlab reproduce raid --out OUT` runs).
    pub fn new(out: PathBuf) -> Self {
        RaidArgs {
            quick: false,
            out,
            traces: None,
            rate_iops: Self::RATE_IOPS,
            seed: 1,
            iodepth: 0,
            precondition: Self::PRECONDITION.to_string(),
            background_gc: BackgroundGc::Staggered,
        }
    }
}

/// How the mirror's SSDs collect garbage (`--background-gc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackgroundGc {
    Staggered,
    Independent,
}

/// What one run measured.
#[derive(Default)]
struct Observed {
    /// (arrival, done) of every host read.
    reads: Vec<(TimeNs, TimeNs)>,
    ios: u64,
}

impl Observer for Observed {
    fn host_io(&mut self, arrival_ns: TimeNs, done_ns: TimeNs, op: Op, _: u32, _: u16, _: u32) {
        self.ios += 1;
        if op == Op::Read {
            self.reads.push((arrival_ns, done_ns));
        }
    }
    fn device_submit(&mut self, _: usize, _: TimeNs) {}
    fn device_complete(&mut self, _: usize, _: TimeNs, _: TimeNs, _: Op, _: u32) {}
    fn device_state(&mut self, _: usize, _: TimeNs, _: DeviceState) {}
}

/// Length of the union of the intervals (read-busy time), ns.
fn busy_ns(intervals: &mut [(TimeNs, TimeNs)]) -> u64 {
    intervals.sort_unstable();
    let mut total = 0;
    let mut current: Option<(TimeNs, TimeNs)> = None;
    for &(a, b) in intervals.iter() {
        current = match current {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((s, e)) = current {
        total += e - s;
    }
    total
}

struct Row {
    workload: String,
    config: &'static str,
    reads: u64,
    read_iops: f64,
    mean_latency_us: f64,
    energy_j: f64,
}

/// Both configurations use the same SSD, with host control of GC when
/// staggered (a lone SSD collects as usual: nobody defers its GC).
fn device_toml(config: &str, precondition: &str, gc: BackgroundGc) -> String {
    let host_gc_control = gc == BackgroundGc::Staggered;
    match config {
        "single" => format!(
            "[[devices]]\nname = \"ssd\"\nmodel = \"flash-ssd\"\npreset = \"mlc-1chip\"\n\
             precondition = {precondition:?}\nhost_gc_control = {host_gc_control}\n"
        ),
        _ => {
            let ssd = format!(
                "{{ model = \"flash-ssd\", preset = \"mlc-1chip\", precondition = {precondition:?}, \
                 host_gc_control = {host_gc_control} }}"
            );
            format!(
                "[[devices]]\nname = \"mirror\"\nmodel = \"raid\"\nlevel = \"raid1\"\n\
                 read_policy = \"least_outstanding\"\nmembers = [\n  {ssd},\n  {ssd},\n]\n"
            )
        }
    }
}

/// How one run replays and collects: the command's options, or a
/// variant's (`name` then suffixes its config file).
#[derive(Clone, Copy)]
struct Setup<'a> {
    gc: BackgroundGc,
    iodepth: u32,
    name: &'a str,
}

fn run_one(
    args: &RaidArgs,
    workload: &str,
    config: &'static str,
    workload_toml: &str,
    setup: Setup,
) -> ExpResult<Option<Row>> {
    let dir = &args.out;
    let seed = args.seed;
    let iodepth = setup.iodepth;
    let driver = if iodepth == 0 {
        "{ mode = \"open\" }".to_string()
    } else {
        format!("{{ mode = \"afap\", iodepth = {iodepth} }}")
    };
    let text = format!(
        "# tierlab reproduce raid: {config} on {workload}\nseed = {seed}\n\n{}\n\
         [[tenants]]\nname = \"host\"\n{workload_toml}driver = {driver}\n",
        device_toml(config, &args.precondition, setup.gc)
    );
    let path = dir
        .join("configs")
        .join(format!("{workload}-{config}{}.toml", setup.name));
    std::fs::write(&path, &text)?;
    let cfg = tierlab_sim::config::parse(&text, &path.display().to_string(), &[])?;
    let mut sim = tierlab_sim::build::build(&cfg, dir)?;
    let mut obs = Observed::default();
    match sim.run(&mut obs, None) {
        Ok(outcome) if outcome.host_ios_unfinished > 0 => {
            return Err(format!(
                "{workload}/{config}: {} host IOs never completed",
                outcome.host_ios_unfinished
            )
            .into());
        }
        Ok(_) => {}
        Err(e) if e.to_string().contains("beyond the end of device") => {
            eprintln!("  skipped {workload}: it addresses past the SSD's end ({e})");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    }
    let reads = obs.reads.len() as u64;
    let latency_sum: u128 = obs.reads.iter().map(|(a, d)| (d - a) as u128).sum();
    let busy = busy_ns(&mut obs.reads);
    let energy_j = sim.devices()[0]
        .counters()
        .into_iter()
        .find(|(k, _)| *k == "energy_j")
        .map_or(0.0, |(_, v)| v);
    Ok(Some(Row {
        workload: workload.to_string(),
        config,
        reads,
        read_iops: if busy == 0 {
            0.0
        } else {
            reads as f64 * 1e9 / busy as f64
        },
        mean_latency_us: if reads == 0 {
            0.0
        } else {
            latency_sum as f64 / reads as f64 / 1e3
        },
        energy_j,
    }))
}

/// A workload's name as a file name.
fn file_name(workload: &str) -> String {
    workload
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// RAID 1's read-IOPS improvement over the single SSD, percent (0 when
/// the single SSD read nothing).
fn improvement_pct(single: &Row, raid1: &Row) -> f64 {
    if single.read_iops > 0.0 {
        (raid1.read_iops / single.read_iops - 1.0) * 100.0
    } else {
        0.0
    }
}

/// The variant runs behind paper_vs_ours' causes (docs/fidelity.md):
/// every generated workload's mirror with each SSD collecting on its own
/// (the single SSD's rows are the same bytes in both GC modes, so only the
/// mirror reruns), and every generated workload as the thesis ran it as
/// far as it says: drives without host GC control (independent GC), the
/// trace replayed with the SSD's NCQ depth of 32 outstanding, so reads
/// queue as in the bursty original traces.
/// Returns (workload, variant, improvement %) and writes variants.csv.
fn variants(
    args: &RaidArgs,
    workloads: &[(String, String)],
    rows: &[Row],
) -> ExpResult<Vec<paper::Variant>> {
    let mut out = Vec::new();
    let mut csv =
        String::from("workload,variant,single_read_iops,raid1_read_iops,improvement_percent\n");
    let independent = Setup {
        gc: BackgroundGc::Independent,
        iodepth: args.iodepth,
        name: "-independent-gc",
    };
    let thesis_like = Setup {
        gc: BackgroundGc::Independent,
        iodepth: paper::THESIS_LIKE_IODEPTH,
        name: "-thesis-like",
    };
    for (name, toml) in workloads.iter().filter(|(n, _)| n.starts_with("ssdraid.")) {
        let Some(single) = rows
            .iter()
            .find(|r| &r.workload == name && r.config == "single")
        else {
            continue;
        };
        let mut runs = Vec::new();
        if args.background_gc == BackgroundGc::Staggered {
            if let Some(r) = run_one(args, &file_name(name), "raid1", toml, independent)? {
                runs.push((
                    paper::INDEPENDENT_GC,
                    single.read_iops,
                    r.read_iops,
                    improvement_pct(single, &r),
                ));
            }
        }
        if args.iodepth == 0 {
            let s = run_one(args, &file_name(name), "single", toml, thesis_like)?;
            let r = run_one(args, &file_name(name), "raid1", toml, thesis_like)?;
            if let (Some(s), Some(r)) = (s, r) {
                runs.push((
                    paper::THESIS_LIKE,
                    s.read_iops,
                    r.read_iops,
                    improvement_pct(&s, &r),
                ));
            }
        }
        for (variant, s, r, gain) in runs {
            writeln!(csv, "{name},{variant},{s:.3},{r:.3},{gain:.3}")?;
            out.push(paper::Variant {
                workload: name.clone(),
                variant,
                improvement_pct: gain,
            });
        }
    }
    std::fs::write(args.out.join("variants.csv"), csv)?;
    Ok(out)
}

pub fn run(args: RaidArgs) -> ExpResult {
    if !(args.rate_iops.is_finite() && args.rate_iops > 0.0) {
        return Err(format!("--rate-iops {} is not a positive rate", args.rate_iops).into());
    }
    let dir = &args.out;
    std::fs::create_dir_all(dir.join("configs"))?;
    let scale = if args.quick { 0.02 } else { 0.25 };
    let mut workloads: Vec<(String, String)> = PRESETS
        .iter()
        .map(|p| {
            (
                format!("ssdraid.{p}"),
                format!(
                    "workload = {{ generator = \"ssdraid.{p}\", params = {{ scale = {scale}, rate_iops = {} }} }}\n",
                    args.rate_iops
                ),
            )
        })
        .collect();
    match &args.traces {
        Some(dir) if !dir.is_dir() => {
            return Err(format!(
                "`--traces`: {}: not a folder (expected the folder holding msr/, umass-spc/ \
                 and tencent-cbs/ trace windows; leave it out to run the generated workloads only)",
                dir.display()
            )
            .into());
        }
        Some(dir) => {
            for (file, device) in REAL_TRACES {
                let path = dir.join(file);
                if !path.exists() {
                    eprintln!("  skipped {file}: not in {}", dir.display());
                    continue;
                }
                let abs = std::fs::canonicalize(&path)?;
                let device = device.map_or(String::new(), |d| format!(", device = \"{d}\""));
                let name = file.rsplit('/').next().unwrap_or(file).to_string();
                workloads.push((
                    format!("trace:{name}"),
                    format!(
                        "workload = {{ trace = {:?}{device} }}\n",
                        abs.display().to_string()
                    ),
                ));
            }
        }
        None => eprintln!("  generated workloads only (--traces DIR adds public real traces)"),
    }
    let started = Instant::now();
    let as_asked = Setup {
        gc: args.background_gc,
        iodepth: args.iodepth,
        name: "",
    };
    let mut rows = Vec::new();
    for (name, toml) in &workloads {
        let file_name = file_name(name);
        let single = run_one(&args, &file_name, "single", toml, as_asked)?;

        let Some(mut s) = single else { continue };
        let raid = run_one(&args, &file_name, "raid1", toml, as_asked)?;
        if let Some(mut r) = raid {
            s.workload = name.clone();
            r.workload = name.clone();
            eprintln!(
                "  {name}: {} reads; read IOPS single {:.0}, RAID 1 {:.0} ({:+.1} %)",
                s.reads,
                s.read_iops,
                r.read_iops,
                (r.read_iops / s.read_iops - 1.0) * 100.0
            );
            rows.push(s);
            rows.push(r);
        }
    }
    let mut table = String::from("workload,config,read_iops,mean_latency_us,energy_j\n");
    let mut gains = String::from("workload,single_read_iops,raid1_read_iops,improvement_percent\n");
    let mut points_single = Vec::new();
    let mut points_raid = Vec::new();
    let mut points_gain = Vec::new();
    let mut improvements = Vec::new();
    for (k, pair) in rows.chunks(2).enumerate() {
        for r in pair {
            writeln!(
                table,
                "{},{},{:.3},{:.3},{:.6}",
                r.workload, r.config, r.read_iops, r.mean_latency_us, r.energy_j
            )?;
        }
        let (s, r) = (&pair[0], &pair[1]);
        let gain = improvement_pct(s, r);
        writeln!(
            gains,
            "{},{:.3},{:.3},{:.3}",
            s.workload, s.read_iops, r.read_iops, gain
        )?;
        points_single.push((k as f64, s.read_iops));
        points_raid.push((k as f64, r.read_iops));
        points_gain.push((k as f64, gain));
        if s.reads > 0 {
            improvements.push(gain);
        }
    }
    std::fs::write(dir.join("table.csv"), table)?;
    std::fs::write(dir.join("improvement.csv"), gains)?;
    let names: Vec<String> = rows
        .chunks(2)
        .enumerate()
        .map(|(k, p)| format!("{k}={}", p[0].workload))
        .collect();
    let x_label = format!("workload ({})", names.join(", "));
    line_chart_svg(
        &dir.join("read_iops.svg"),
        &Chart {
            title: "Read IOPS (reads / read-busy time): one single-chip SSD vs RAID 1 of two",
            x_label: &x_label,
            y_label: "read IOPS",
            log_x: false,
        },
        &[
            Series {
                name: "single SSD",
                points: &points_single,
            },
            Series {
                name: "RAID 1 of two",
                points: &points_raid,
            },
        ],
    )?;
    line_chart_svg(
        &dir.join("improvement.svg"),
        &Chart {
            title: "RAID 1 read-IOPS improvement over one SSD (thesis: mean 10.93 %, max 43.9 %)",
            x_label: &x_label,
            y_label: "improvement (%)",
            log_x: false,
        },
        &[Series {
            name: "RAID 1 / single − 1",
            points: &points_gain,
        }],
    )?;
    let variant_runs = variants(&args, &workloads, &rows)?;
    let measured: Vec<paper::Measured> = rows
        .chunks(2)
        .filter(|p| p[0].reads > 0)
        .map(|p| paper::Measured {
            workload: p[0].workload.clone(),
            improvement_pct: improvement_pct(&p[0], &p[1]),
        })
        .collect();
    let comparisons = paper::compare(&measured, &variant_runs);
    crate::reproduce::paper_vs_ours::write_csv(dir, &comparisons)?;
    eprintln!(
        "{}",
        crate::reproduce::paper_vs_ours::summary_line(&comparisons)
    );
    if !improvements.is_empty() {
        let mean = improvements.iter().sum::<f64>() / improvements.len() as f64;
        let max = improvements
            .iter()
            .cloned()
            .fold(f64::NEG_INFINITY, f64::max);
        eprintln!(
            "tierlab reproduce raid: {} workloads in {:.1} s; read-IOPS improvement mean {mean:.2} %, max {max:.2} % (thesis: 10.93 %, 43.9 %); wrote {}",
            improvements.len(),
            started.elapsed().as_secs_f64(),
            dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::busy_ns;

    #[test]
    fn read_busy_time_is_the_union_of_the_intervals() {
        let mut v = vec![(5, 20), (0, 10), (30, 40), (35, 38)];
        assert_eq!(busy_ns(&mut v), 20 + 10);
        assert_eq!(busy_ns(&mut []), 0);
    }
}
