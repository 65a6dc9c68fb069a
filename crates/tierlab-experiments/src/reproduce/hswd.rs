//! `tierlab reproduce hswd [--quick] --out DIR`: the HSWD paper's
//! experiments (spec/hswd.md, seed 002) on the simulator. docs/hswd.md
//! describes the setup, the metrics and the results next to the paper's.
//!
//! 1. `mapping`: fio-like random writes (4 KiB, iodepth 31, every block of a
//!    2 GiB region once in random order, as fio's default random map does),
//!    256 MiB PCache, fully vs set-associative (7 sets): the Table-3 analog
//!    and IOPS per 4 s.
//! 2. `policies`: FIFO / LRU / MOST at 128 / 256 / 384 MiB on the
//!    `hswd.mds_0`, `prxy_0`, `rsrch_0`, `src2_0` workloads (and any trace
//!    given with `--trace`), plus src2_0's mean latency per 10,000 requests.
//! 3. `systems`: HSWD vs SSWD vs Flashcache (over the same SMR disk, and
//!    over a conventional disk for reference) with 1 GiB of cache on the
//!    `hswd.prn_0`, `hm_0`, `proj_0` workloads.
//!
//! `--quick` scales every size by 1/8 (band, PCache, fio region, workload
//! count and footprint) and experiment 3 by 1/32 (the same plus the SSWD's
//! log), so every ratio that matters (cache / footprint, writes / cache,
//! band / cache) is kept; only absolute RMW times shrink with the band.
//!
//! Each run's config is written to `DIR/configs/` so any row can be re-run
//! with `tierlab sim`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use tierlab_core::device::DeviceState;
use tierlab_core::{Op, TimeNs};
use tierlab_devices::{smr, sswd};
use tierlab_policies::hswd;
use tierlab_sim::Observer;

use crate::ExpResult;
use crate::plot::{Chart, Series, line_chart_svg};

mod paper;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const BUCKET_NS: u64 = 4_000_000_000;
const WINDOW_IOS: u64 = 10_000;

#[derive(Args, Debug)]
pub struct HswdArgs {
    /// Scaled-down runs (about a minute on 2 cores; see docs/hswd.md).
    #[arg(long)]
    pub quick: bool,
    /// Output directory (table.csv, per-run series, SVG plots, configs).
    #[arg(long)]
    pub out: PathBuf,
    /// A real trace to add to experiment 2 (repeatable), e.g. src2_0.csv.gz.
    #[arg(long = "trace")]
    pub traces: Vec<PathBuf>,
    /// Format of the `--trace` files (default: detected).
    #[arg(long)]
    pub trace_format: Option<String>,
    /// Keep only this device (volume) of the `--trace` files.
    #[arg(long)]
    pub trace_device: Option<String>,
    /// Replay speed of the `--trace` files (2 = twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub trace_speed: f64,
    /// Only these experiments (mapping, policies, systems); default all.
    #[arg(long = "only", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl HswdArgs {
    /// The full run into `out` with every option at its default (what
    /// `tierlab reproduce hswd --out OUT` runs).
    pub fn new(out: PathBuf) -> Self {
        HswdArgs {
            quick: false,
            out,
            traces: Vec::new(),
            trace_format: None,
            trace_device: None,
            trace_speed: 1.0,
            only: Vec::new(),
            seed: 1,
        }
    }
}

/// What one run measured (definitions in docs/hswd.md).
#[derive(Default)]
struct Observed {
    ios: u64,
    latency_sum_ns: u128,
    latency_max_ns: u64,
    /// Host reads and the sum of their latencies.
    read_ios: u64,
    read_latency_sum_ns: u128,
    last_done_ns: TimeNs,
    /// Host IOs completed per 4 s bucket.
    buckets: Vec<u64>,
    window_sum_ns: u128,
    window_ios: u64,
    /// Mean latency of each 10,000 completed host IOs, ns.
    windows_ns: Vec<f64>,
}

impl Observer for Observed {
    fn host_io(&mut self, arrival_ns: TimeNs, done_ns: TimeNs, op: Op, _: u32, _: u16, _: u32) {
        let latency = done_ns - arrival_ns;
        self.ios += 1;
        self.latency_sum_ns += latency as u128;
        if op == Op::Read {
            self.read_ios += 1;
            self.read_latency_sum_ns += latency as u128;
        }
        self.latency_max_ns = self.latency_max_ns.max(latency);
        self.last_done_ns = self.last_done_ns.max(done_ns);
        // Bucket k holds completions in (4k, 4(k+1)] s, as series.csv.
        let k = (done_ns.saturating_sub(1) / BUCKET_NS) as usize;
        if self.buckets.len() <= k {
            self.buckets.resize(k + 1, 0);
        }
        self.buckets[k] += 1;
        self.window_sum_ns += latency as u128;
        self.window_ios += 1;
        if self.window_ios == WINDOW_IOS {
            self.windows_ns
                .push(self.window_sum_ns as f64 / WINDOW_IOS as f64);
            self.window_sum_ns = 0;
            self.window_ios = 0;
        }
    }
    fn device_submit(&mut self, _: usize, _: TimeNs) {}
    fn device_complete(&mut self, _: usize, _: TimeNs, _: TimeNs, _: Op, _: u32) {}
    fn device_state(&mut self, _: usize, _: TimeNs, _: DeviceState) {}
}

impl Observed {
    /// Mean latency of the host reads, ms; None without reads.
    fn mean_read_latency_ms(&self) -> Option<f64> {
        (self.read_ios > 0).then(|| self.read_latency_sum_ns as f64 / self.read_ios as f64 / 1e6)
    }
    /// Mean latency of the host writes, ms; None without writes.
    fn mean_write_latency_ms(&self) -> Option<f64> {
        let writes = self.ios - self.read_ios;
        (writes > 0)
            .then(|| (self.latency_sum_ns - self.read_latency_sum_ns) as f64 / writes as f64 / 1e6)
    }
}

struct Spec {
    experiment: &'static str,
    workload: String,
    system: &'static str,
    mapping: String,
    policy: String,
    pcache_bytes: u64,
    config: String,
}

struct Row {
    spec: Spec,
    iops: f64,
    mean_latency_ms: f64,
    max_latency_ms: f64,
    rmw_count: Option<f64>,
    write_hit_ratio: Option<f64>,
    /// The policy's counters at the end (docs/hswd.md, Metrics).
    policy_counters: Vec<(&'static str, f64)>,
    obs: Observed,
    wall_s: f64,
}

impl Row {
    fn policy_counter(&self, name: &str) -> Option<f64> {
        counter(&self.policy_counters, name)
    }
}

impl Spec {
    fn name(&self) -> String {
        let mut n = format!(
            "{}-{}-{}-{}-{}-{}m",
            self.experiment,
            self.workload,
            self.system,
            self.mapping,
            self.policy,
            self.pcache_bytes / MIB
        );
        n.retain(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
        n
    }
}

fn counter(list: &[(&'static str, f64)], name: &str) -> Option<f64> {
    list.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

fn run_one(spec: Spec, dir: &Path) -> ExpResult<Row> {
    let name = spec.name();
    let path = dir.join("configs").join(format!("{name}.toml"));
    std::fs::write(&path, &spec.config)?;
    let config = tierlab_sim::config::parse(&spec.config, &path.display().to_string(), &[])?;
    let started = Instant::now();
    let mut sim = tierlab_sim::build::build(&config, dir)?;
    let mut obs = Observed::default();
    let outcome = sim.run(&mut obs, None)?;
    if outcome.host_ios_unfinished > 0 {
        return Err(format!(
            "{name}: {} host IOs never completed (a policy bug)",
            outcome.host_ios_unfinished
        )
        .into());
    }
    let policy = sim.policy().counters();
    // The device that carries out RMWs: the SSWD itself, or the SMR NRegion.
    let device = sim
        .devices()
        .last()
        .map(|d| d.counters())
        .unwrap_or_default();
    let rmw_count = counter(&policy, hswd::counter::RMW_COUNT)
        .or_else(|| counter(&device, sswd::counter::RMW_COUNT))
        .or_else(|| counter(&device, smr::counter::RMW_COUNT));
    let write_hit_ratio = counter(&policy, hswd::counter::WRITE_HIT_RATIO).or_else(|| {
        let hits = counter(&policy, hswd::counter::WRITE_HITS)?;
        let misses = counter(&policy, hswd::counter::WRITE_MISSES)?;
        (hits + misses > 0.0).then(|| hits / (hits + misses))
    });
    let ios = obs.ios.max(1) as f64;
    let row = Row {
        iops: if obs.last_done_ns == 0 {
            0.0
        } else {
            obs.ios as f64 * 1e9 / obs.last_done_ns as f64
        },
        mean_latency_ms: obs.latency_sum_ns as f64 / ios / 1e6,
        max_latency_ms: obs.latency_max_ns as f64 / 1e6,
        rmw_count,
        write_hit_ratio,
        policy_counters: policy,
        obs,
        wall_s: started.elapsed().as_secs_f64(),
        spec,
    };
    eprintln!(
        "  {name}: {:.1} IOPS, mean {:.2} ms, max {:.0} ms, RMW {} ({:.1} s)",
        row.iops,
        row.mean_latency_ms,
        row.max_latency_ms,
        row.rmw_count.map_or("-".into(), |v| format!("{v}")),
        row.wall_s
    );
    Ok(row)
}

// ---- configs ----------------------------------------------------------------

fn ssd_device() -> &'static str {
    "[[devices]]\nname = \"ssd\"\nmodel = \"ssd\"\npreset = \"intel-s3500\"\n"
}

fn smr_device(band: u64) -> String {
    smr_device_at(band, None)
}

/// The SMR NRegion; with `rate_bytes_per_s` its media transfers (inner and
/// outer edge alike) run at that rate.
fn smr_device_at(band: u64, rate_bytes_per_s: Option<u64>) -> String {
    let mut d = format!(
        "[[devices]]\nname = \"smr\"\nmodel = \"smr\"\npreset = \"smr-7200-2tb\"\nband_bytes = {band}\n"
    );
    if let Some(r) = rate_bytes_per_s {
        writeln!(
            d,
            "disk = {{ outer_rate_bytes_per_s = {r}, inner_rate_bytes_per_s = {r} }}"
        )
        .expect("write to String");
    }
    d
}

fn hswd_stack(seed: u64, band: u64, pcache: u64, mapping: &str, selection: &str) -> String {
    hswd_stack_at(seed, band, pcache, mapping, selection, None)
}

/// `hswd_stack` over an NRegion whose media run at `disk_rate_bytes_per_s`.
fn hswd_stack_at(
    seed: u64,
    band: u64,
    pcache: u64,
    mapping: &str,
    selection: &str,
    disk_rate_bytes_per_s: Option<u64>,
) -> String {
    format!(
        "seed = {seed}\n{}{}\n[policy]\nkind = \"hswd\"\npcache_bytes = {pcache}\nband_bytes = {band}\nmapping = \"{mapping}\"\nband_selection = \"{selection}\"\n\n",
        ssd_device(),
        smr_device_at(band, disk_rate_bytes_per_s)
    )
}

/// The drive-managed SMR disk with a `log`-byte persistent cache; its
/// volatile RAM buffer (128 MiB on the drive) shrinks with the band (32
/// MiB on the drive) so a scaled-down run keeps buffer / cache / band
/// ratios like every other size.
fn sswd_stack(seed: u64, band: u64, log: u64) -> String {
    let ram_buffer = 128 * MIB / (32 * MIB / band).max(1);
    format!(
        "seed = {seed}\n[[devices]]\nname = \"sswd\"\nmodel = \"sswd\"\npreset = \"seagate-8tb-archive\"\nband_bytes = {band}\npersistent_cache_bytes = {log}\nram_buffer_bytes = {ram_buffer}\n\n[policy]\nkind = \"passthrough\"\n\n"
    )
}

fn flashcache_stack(seed: u64, band: u64, cache: u64, smr: bool) -> String {
    let backing = if smr {
        smr_device(band)
    } else {
        "[[devices]]\nname = \"hdd\"\nmodel = \"hdd\"\npreset = \"sata-7200-2tb\"\n".into()
    };
    format!(
        "seed = {seed}\n{}{backing}\n[policy]\nkind = \"flashcache\"\ncapacity_bytes = {cache}\n\
         # The baseline as the paper's comparison models it: its on-SSD metadata is not charged,\n\
         # and no sequential cutoff (flashcache's skip_seq_thresh_kb defaults to off).\n\
         persistent = false\nsequential_bypass_bytes = 0\n\n",
        ssd_device()
    )
}

fn preset_tenant(preset: &str, scale: f64, rate_iops: f64) -> String {
    format!(
        "[[tenants]]\nname = \"{preset}\"\nworkload = {{ generator = \"{preset}\", params = {{ scale = {scale}, rate_iops = {rate_iops} }} }}\ndriver = {{ mode = \"open\" }}\n"
    )
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// fio's randwrite with its default random map: every 4 KiB block of the
/// region written exactly once, in a seeded random order. Written as an MSR
/// trace (timestamps do not matter: the driver is closed-loop).
fn fio_trace(path: &Path, region_bytes: u64, seed: u64) -> ExpResult {
    let blocks = region_bytes / 4096;
    let mut order: Vec<u64> = (0..blocks).collect();
    // Fisher–Yates with splitmix64: deterministic for a seed.
    let mut state = seed ^ 0xF10_F10;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..order.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (i, b) in order.iter().enumerate() {
        // MSR: Timestamp (100 ns ticks), Hostname, DiskNumber, Type, Offset, Size, ResponseTime.
        writeln!(
            out,
            "{},fio,0,Write,{},4096,0",
            128_166_372_000_000_000u64 + i as u64,
            b * 4096
        )?;
    }
    out.flush()?;
    Ok(())
}

// ---- experiments --------------------------------------------------------------

fn mapping_specs(a: &HswdArgs, dir: &Path) -> ExpResult<Vec<Spec>> {
    let s = if a.quick { 8 } else { 1 };
    let band = 32 * MIB / s;
    let pcache = 256 * MIB / s;
    let region = 2 * GIB / s;
    let trace = dir.join("workloads").join("fio-randwrite.csv");
    fio_trace(&trace, region, a.seed)?;
    let tenant = format!(
        "[[tenants]]\nname = \"fio\"\nworkload = {{ trace = {}, format = \"msr\" }}\ndriver = {{ mode = \"closed\", iodepth = 31, total_bytes = {region} }}\n",
        toml_str(&trace.display().to_string())
    );
    let mut specs: Vec<Spec> = ["fully", "set"]
        .iter()
        .map(|mapping| Spec {
            experiment: "mapping",
            workload: "fio-randwrite".into(),
            system: "hswd",
            mapping: mapping.to_string(),
            policy: "most".into(),
            pcache_bytes: pcache,
            config: hswd_stack(a.seed, band, pcache, mapping, "most") + &tenant,
        })
        .collect();
    // The variant behind the set-associative worst-latency row: sets whose
    // writes wait take turns at the one RCache ahead of threshold cleaning.
    specs.push(Spec {
        experiment: paper::MAPPING_VARIANTS,
        workload: "fio-randwrite".into(),
        system: paper::STALLED_FIRST,
        mapping: "set".into(),
        policy: "most".into(),
        pcache_bytes: pcache,
        config: hswd_stack(a.seed, band, pcache, "set", "most")
            .trim_end()
            .to_string()
            + "\nclean_stalled_first = true\n\n"
            + &tenant,
    });
    Ok(specs)
}

/// Reads the first records of a `--trace` now, so that a file tierlab
/// cannot read fails before the first run, not after dozens of them.
fn check_trace(path: &Path, format: Option<&str>) -> Result<(), tierlab_trace::TraceError> {
    let format = format
        .map(|f| {
            f.parse()
                .map_err(|why: tierlab_trace::format::UnknownFormat| {
                    tierlab_trace::ParamError::new(
                        "--trace-format",
                        format!("{f:?}"),
                        "a trace format",
                    )
                    .because(why.to_string())
                })
        })
        .transpose()?;
    let options = tierlab_trace::ReadOptions {
        format,
        ..Default::default()
    };
    let mut reader = tierlab_trace::TraceReader::open(path, &options)?;
    for _ in 0..1000 {
        if tierlab_trace::RecordStream::next_record(&mut reader)?.is_none() {
            break;
        }
    }
    Ok(())
}

fn policy_specs(a: &HswdArgs) -> ExpResult<Vec<Spec>> {
    let s = if a.quick { 8 } else { 1 };
    let scale = 1.0 / s as f64;
    let band = 32 * MIB / s;
    let mut workloads: Vec<(String, String)> = ["mds_0", "prxy_0", "rsrch_0", "src2_0"]
        .iter()
        .map(|w| {
            (
                w.to_string(),
                preset_tenant(&format!("hswd.{w}"), scale, 200.0),
            )
        })
        .collect();
    for t in &a.traces {
        let name = t
            .file_name()
            .and_then(|n| n.to_str())
            .map(|n| n.split('.').next().unwrap_or(n).to_string())
            .unwrap_or_else(|| "trace".into());
        let path = std::fs::canonicalize(t).map_err(|e| format!("--trace {}: {e}", t.display()))?;
        check_trace(&path, a.trace_format.as_deref())
            .map_err(|e| format!("--trace {}: {e}", t.display()))?;
        let mut w = format!(
            "workload = {{ trace = {}",
            toml_str(&path.display().to_string())
        );
        if let Some(f) = &a.trace_format {
            write!(w, ", format = {}", toml_str(f))?;
        }
        if let Some(d) = &a.trace_device {
            write!(w, ", device = {}", toml_str(d))?;
        }
        w.push_str(" }");
        if !(a.trace_speed.is_finite() && a.trace_speed > 0.0) {
            return Err(
                format!("--trace-speed: {} is not a positive number", a.trace_speed).into(),
            );
        }
        let tenant = format!(
            "[[tenants]]\nname = \"{name}\"\n{w}\ndriver = {{ mode = \"open\", speed = {} }}\n",
            a.trace_speed
        );
        workloads.push((name, tenant));
    }
    let mut specs = Vec::new();
    for (workload, tenant) in &workloads {
        for pcache_mib in [128, 256, 384] {
            for policy in ["fifo", "lru", "most"] {
                let pcache = pcache_mib * MIB / s;
                specs.push(Spec {
                    experiment: "policies",
                    workload: workload.clone(),
                    system: "hswd",
                    mapping: "fully".into(),
                    policy: policy.into(),
                    pcache_bytes: pcache,
                    config: hswd_stack(a.seed, band, pcache, "fully", policy) + tenant,
                });
            }
        }
    }
    Ok(specs)
}

/// Experiment 3's systems as (system, mapping, policy, cache bytes, stack):
/// HSWD, the SSWD, Flashcache over the SMR disk and, with `with_hdd`,
/// Flashcache over a conventional disk.
fn system_stacks(
    seed: u64,
    band: u64,
    cache: u64,
    log: u64,
    with_hdd: bool,
) -> Vec<(&'static str, &'static str, &'static str, u64, String)> {
    let mut runs = vec![
        (
            "hswd",
            "fully",
            "most",
            cache,
            hswd_stack(seed, band, cache, "fully", "most"),
        ),
        ("sswd", "fully", "fifo", log, sswd_stack(seed, band, log)),
        (
            "flashcache",
            "set",
            "fifo",
            cache,
            flashcache_stack(seed, band, cache, true),
        ),
    ];
    if with_hdd {
        runs.push((
            "flashcache-hdd",
            "set",
            "fifo",
            cache,
            flashcache_stack(seed, band, cache, false),
        ));
    }
    runs
}

/// Experiment 3's sizes (`--quick`: all / 32): (workload scale, band,
/// cache, SSWD log).
fn system_sizes(a: &HswdArgs) -> (f64, u64, u64, u64) {
    let s = if a.quick { 32 } else { 1 };
    (1.0 / s as f64, 32 * MIB / s, GIB / s, 20 * GIB / s)
}

/// The systems of `system_stacks` on prn_0, hm_0 and proj_0 offered
/// `rate_iops`, as `experiment`.
fn systems_at(a: &HswdArgs, experiment: &'static str, rate_iops: f64, with_hdd: bool) -> Vec<Spec> {
    let (scale, band, cache, log) = system_sizes(a);
    let mut specs = Vec::new();
    for w in ["prn_0", "hm_0", "proj_0"] {
        let tenant = preset_tenant(&format!("hswd.{w}"), scale, rate_iops);
        for (system, mapping, policy, bytes, stack) in
            system_stacks(a.seed, band, cache, log, with_hdd)
        {
            specs.push(Spec {
                experiment,
                workload: w.into(),
                system,
                mapping: mapping.into(),
                policy: policy.into(),
                pcache_bytes: bytes,
                config: stack + &tenant,
            });
        }
    }
    specs
}

fn system_specs(a: &HswdArgs) -> Vec<Spec> {
    // 100 IOPS (ours): the traces give no rate; at 200 IOPS hm_0's reads
    // alone would keep a 7200 rpm disk ~90 % busy.
    systems_at(a, "systems", 100.0, true)
}

/// Experiment 2's variants behind paper_vs_ours' policy rows, each with
/// FIFO, LRU and MOST:
/// - `policies-skewed`: src2_0's Table-2 numbers (count, footprint, write
///   ratio, ~8 KiB requests) with offsets from an unscrambled Zipf, so hot
///   blocks sit together and some bands collect cached blocks far faster
///   than others (128 MiB-equivalent PCache);
/// - `policies-clustered`: the same with 40 % of the requests from four
///   sequential streams, which fill bands once and leave them (cold, full
///   bands next to hot ones);
/// - `policies-slow-rmw` (the four presets at 256 MiB) and
///   `policies-clustered-slow-rmw`: the NRegion's media at the rate the
///   paper's RMWs ran (its experiment 1: 2 band transfers per 3.96 s);
/// - `policies-write-path` (the four presets at 256 MiB) and
///   `policies-clustered-write-path`: Algorithm 2 read literally, writes
///   acknowledged only once the cleaning they triggered (or landed in)
///   ended (`clean_in_write_path`).
fn policy_variant_specs(a: &HswdArgs) -> Vec<Spec> {
    let s = if a.quick { 8 } else { 1 };
    let scale = 1.0 / s as f64;
    let band = 32 * MIB / s;
    let footprint = (0.46 * GIB as f64 / s as f64) as u64 / 4096 * 4096;
    let count = 1_200_000 / s;
    let src2_0_like = |name: &str, offsets: &str| {
        format!(
            "[[tenants]]\nname = \"{name}\"\nworkload = {{ generator = {offsets}, count = {count}, \
             read_ratio = 0.124, size_bytes = \"8k\", region_size_bytes = {footprint}, \
             rate_iops = 200.0 }} }}\ndriver = {{ mode = \"open\" }}\n"
        )
    };
    let skewed = src2_0_like(
        paper::SKEWED_WORKLOAD,
        "\"zipf\", params = { theta = 0.99, scramble = false",
    );
    let clustered = src2_0_like(
        paper::CLUSTERED_WORKLOAD,
        "\"mixed\", params = { weights = \"zipf:0.6,sequential:0.4\", streams = 4, theta = 0.99, \
         scramble = false",
    );
    let slow = Some(paper::paper_rmw_rate_bytes_per_s());
    struct Variant {
        experiment: &'static str,
        workload: String,
        tenant: String,
        pcache_mib: u64,
        disk_rate_bytes_per_s: Option<u64>,
        clean_in_write_path: bool,
    }
    let variant =
        |experiment, workload: &str, tenant: &str, pcache_mib, rate, write_path| Variant {
            experiment,
            workload: workload.into(),
            tenant: tenant.into(),
            pcache_mib,
            disk_rate_bytes_per_s: rate,
            clean_in_write_path: write_path,
        };
    let mut runs = vec![
        variant(
            paper::POLICIES_SKEWED,
            paper::SKEWED_WORKLOAD,
            &skewed,
            128,
            None,
            false,
        ),
        variant(
            paper::POLICIES_CLUSTERED,
            paper::CLUSTERED_WORKLOAD,
            &clustered,
            128,
            None,
            false,
        ),
        variant(
            paper::POLICIES_CLUSTERED_SLOW_RMW,
            paper::CLUSTERED_WORKLOAD,
            &clustered,
            128,
            slow,
            false,
        ),
        variant(
            paper::POLICIES_CLUSTERED_WRITE_PATH,
            paper::CLUSTERED_WORKLOAD,
            &clustered,
            128,
            None,
            true,
        ),
    ];
    for w in ["mds_0", "prxy_0", "rsrch_0", "src2_0"] {
        let tenant = preset_tenant(&format!("hswd.{w}"), scale, 200.0);
        runs.push(variant(
            paper::POLICIES_SLOW_RMW,
            w,
            &tenant,
            256,
            slow,
            false,
        ));
        runs.push(variant(
            paper::POLICIES_WRITE_PATH,
            w,
            &tenant,
            256,
            None,
            true,
        ));
    }
    let mut specs = Vec::new();
    for v in runs {
        let pcache = v.pcache_mib * MIB / s;
        for policy in ["fifo", "lru", "most"] {
            let mut config = hswd_stack_at(
                a.seed,
                band,
                pcache,
                "fully",
                policy,
                v.disk_rate_bytes_per_s,
            );
            if v.clean_in_write_path {
                config += "clean_in_write_path = true\n\n";
            }
            specs.push(Spec {
                experiment: v.experiment,
                workload: v.workload.clone(),
                system: "hswd",
                mapping: "fully".into(),
                policy: policy.into(),
                pcache_bytes: pcache,
                config: config + &v.tenant,
            });
        }
    }
    specs
}

/// Experiment 3's variants behind paper_vs_ours' system rows: the SSWD
/// with a persistent log as small as HSWD's PCache, on every workload; HSWD,
/// the SSWD and Flashcache at a quarter of the rate; and HSWD and the SSWD
/// on hm_0 without its reads.
fn system_variant_specs(a: &HswdArgs) -> Vec<Spec> {
    let (scale, band, cache, log) = system_sizes(a);
    let mut specs = Vec::new();
    for w in ["prn_0", "hm_0", "proj_0"] {
        specs.push(Spec {
            experiment: paper::SYSTEMS_VARIANTS,
            workload: w.into(),
            system: paper::SSWD_EQUAL_CACHE,
            mapping: "fully".into(),
            policy: "fifo".into(),
            pcache_bytes: cache,
            config: sswd_stack(a.seed, band, cache)
                + &preset_tenant(&format!("hswd.{w}"), scale, 100.0),
        });
    }
    // The same three systems at a quarter of the offered rate (ours: the
    // paper replayed the traces' own timing, which it does not give).
    specs.extend(systems_at(
        a,
        paper::SYSTEMS_LOW_RATE,
        paper::LOW_RATE_IOPS,
        false,
    ));
    let writes_only = format!(
        "[[tenants]]\nname = \"hswd.hm_0\"\nworkload = {{ generator = \"hswd.hm_0\", params = {{ scale = {scale}, \
         rate_iops = 100.0, write_ratio = 1.0 }} }}\ndriver = {{ mode = \"open\" }}\n"
    );
    specs.push(Spec {
        experiment: paper::SYSTEMS_VARIANTS,
        workload: paper::HM0_WRITES_ONLY.into(),
        system: "hswd",
        mapping: "fully".into(),
        policy: "most".into(),
        pcache_bytes: cache,
        config: hswd_stack(a.seed, band, cache, "fully", "most") + &writes_only,
    });
    specs.push(Spec {
        experiment: paper::SYSTEMS_VARIANTS,
        workload: paper::HM0_WRITES_ONLY.into(),
        system: "sswd",
        mapping: "fully".into(),
        policy: "fifo".into(),
        pcache_bytes: log,
        config: sswd_stack(a.seed, band, log) + &writes_only,
    });
    specs
}

// ---- outputs ------------------------------------------------------------------

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.6}"))
}

fn opt3(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.3}"))
}

fn write_table(dir: &Path, rows: &[Row]) -> ExpResult {
    let mut csv = String::from(
        "experiment,workload,system,mapping,policy,pcache_bytes,iops,mean_latency_ms,max_latency_ms,\
         mean_read_latency_ms,mean_write_latency_ms,rmw_count,write_hit_ratio\n",
    );
    for r in rows {
        let s = &r.spec;
        writeln!(
            csv,
            "{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{},{},{}",
            s.experiment,
            s.workload,
            s.system,
            s.mapping,
            s.policy,
            s.pcache_bytes,
            r.iops,
            r.mean_latency_ms,
            r.max_latency_ms,
            opt3(r.obs.mean_read_latency_ms()),
            opt3(r.obs.mean_write_latency_ms()),
            r.rmw_count.map_or(String::new(), |v| format!("{v}")),
            opt(r.write_hit_ratio)
        )?;
    }
    std::fs::write(dir.join("table.csv"), csv)?;
    Ok(())
}

fn write_series(dir: &Path, rows: &[Row]) -> ExpResult {
    let mut iops = String::from("run,bucket_end_s,iops\n");
    let mut windows = String::from("run,requests,mean_latency_ms\n");
    for r in rows {
        let name = r.spec.name();
        for (k, n) in r.obs.buckets.iter().enumerate() {
            writeln!(
                iops,
                "{name},{},{:.3}",
                (k as u64 + 1) * BUCKET_NS / 1_000_000_000,
                *n as f64 / 4.0
            )?;
        }
        for (k, m) in r.obs.windows_ns.iter().enumerate() {
            writeln!(
                windows,
                "{name},{},{:.3}",
                (k as u64 + 1) * WINDOW_IOS,
                m / 1e6
            )?;
        }
    }
    std::fs::write(dir.join("iops_4s.csv"), iops)?;
    std::fs::write(dir.join("latency_per_10k.csv"), windows)?;
    Ok(())
}

fn plots(dir: &Path, rows: &[Row]) -> ExpResult {
    let pick = |f: &dyn Fn(&Spec) -> bool| rows.iter().filter(|r| f(&r.spec)).collect::<Vec<_>>();
    // 1. IOPS per 4 s, fully vs set.
    let fio = pick(&|s| s.experiment == "mapping");
    if !fio.is_empty() {
        let points: Vec<Vec<(f64, f64)>> = fio
            .iter()
            .map(|r| {
                r.obs
                    .buckets
                    .iter()
                    .enumerate()
                    .map(|(k, n)| ((k as f64 + 1.0) * 4.0, *n as f64 / 4.0))
                    .collect()
            })
            .collect();
        let series: Vec<Series> = fio
            .iter()
            .zip(&points)
            .map(|(r, p)| Series {
                name: &r.spec.mapping,
                points: p,
            })
            .collect();
        line_chart_svg(
            &dir.join("mapping_iops_4s.svg"),
            &Chart {
                title: "HSWD, fio random 4 KiB writes: IOPS per 4 s (Fig. 7 analog)",
                x_label: "time (s)",
                y_label: "IOPS",
                log_x: false,
            },
            &series,
        )?;
    }
    // 2. Per workload: RMW count and mean latency against the PCache size.
    let pol = pick(&|s| s.experiment == "policies");
    let mut workloads: Vec<&str> = pol.iter().map(|r| r.spec.workload.as_str()).collect();
    workloads.dedup();
    for w in workloads {
        for (metric, label) in [("rmw", "RMW count"), ("latency", "mean latency (ms)")] {
            let mut points = Vec::new();
            for policy in ["fifo", "lru", "most"] {
                let p: Vec<(f64, f64)> = pol
                    .iter()
                    .filter(|r| r.spec.workload == w && r.spec.policy == policy)
                    .map(|r| {
                        let y = if metric == "rmw" {
                            r.rmw_count.unwrap_or(0.0)
                        } else {
                            r.mean_latency_ms
                        };
                        (r.spec.pcache_bytes as f64 / MIB as f64, y)
                    })
                    .collect();
                points.push((policy, p));
            }
            let series: Vec<Series> = points
                .iter()
                .map(|(n, p)| Series { name: n, points: p })
                .collect();
            let title = format!("HSWD on {w}: {label} by PCache size and band selection");
            line_chart_svg(
                &dir.join(format!("policies_{w}_{metric}.svg")),
                &Chart {
                    title: &title,
                    x_label: "PCache (MiB)",
                    y_label: label,
                    log_x: false,
                },
                &series,
            )?;
        }
    }
    // src2_0: mean latency per 10,000 requests at the middle PCache size.
    let src2: Vec<&&Row> = pol.iter().filter(|r| r.spec.workload == "src2_0").collect();
    if let Some(mid) = src2.iter().map(|r| r.spec.pcache_bytes).nth(3) {
        let points: Vec<(String, Vec<(f64, f64)>)> = src2
            .iter()
            .filter(|r| r.spec.pcache_bytes == mid)
            .map(|r| {
                (
                    r.spec.policy.clone(),
                    r.obs
                        .windows_ns
                        .iter()
                        .enumerate()
                        .map(|(k, m)| (((k + 1) as u64 * WINDOW_IOS) as f64, m / 1e6))
                        .collect(),
                )
            })
            .collect();
        let series: Vec<Series> = points
            .iter()
            .map(|(n, p)| Series { name: n, points: p })
            .collect();
        line_chart_svg(
            &dir.join("policies_src2_0_latency_per_10k.svg"),
            &Chart {
                title: "HSWD on src2_0: mean latency per 10,000 requests (Fig. 11 analog)",
                x_label: "requests",
                y_label: "mean latency (ms)",
                log_x: false,
            },
            &series,
        )?;
    }
    // 3. Mean latency per system over the three workloads (x = workload #).
    let sys = pick(&|s| s.experiment == "systems");
    if !sys.is_empty() {
        let mut names: Vec<&str> = sys.iter().map(|r| r.spec.system).collect();
        names.sort();
        names.dedup();
        let mut order: Vec<&str> = sys.iter().map(|r| r.spec.workload.as_str()).collect();
        order.dedup();
        let points: Vec<(&str, Vec<(f64, f64)>)> = names
            .iter()
            .map(|n| {
                (
                    *n,
                    sys.iter()
                        .filter(|r| r.spec.system == *n)
                        .map(|r| {
                            let i = order.iter().position(|w| *w == r.spec.workload).unwrap();
                            ((i + 1) as f64, r.mean_latency_ms)
                        })
                        .collect(),
                )
            })
            .collect();
        let series: Vec<Series> = points
            .iter()
            .map(|(n, p)| Series { name: n, points: p })
            .collect();
        let title = format!(
            "Mean latency by system (Fig. 14 analog); x: {}",
            order
                .iter()
                .enumerate()
                .map(|(i, w)| format!("{} = {w}", i + 1))
                .collect::<Vec<_>>()
                .join(", ")
        );
        line_chart_svg(
            &dir.join("systems_latency.svg"),
            &Chart {
                title: &title,
                x_label: "workload",
                y_label: "mean latency (ms)",
                log_x: false,
            },
            &series,
        )?;
    }
    Ok(())
}

pub fn run(a: HswdArgs) -> ExpResult {
    const EXPERIMENTS: [&str; 3] = ["mapping", "policies", "systems"];
    for e in &a.only {
        if !EXPERIMENTS.contains(&e.as_str()) {
            return Err(format!(
                "--only: unknown experiment {e:?}; known: {}",
                EXPERIMENTS.join(", ")
            )
            .into());
        }
    }
    let wanted = |e: &str| a.only.is_empty() || a.only.iter().any(|o| o == e);
    // Absolute: the run configs name workload files under it, and a
    // config's relative paths are relative to the config file.
    let dir = &std::path::absolute(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    std::fs::create_dir_all(dir.join("configs"))?;
    std::fs::create_dir_all(dir.join("workloads"))?;
    let mut specs = Vec::new();
    if wanted("mapping") {
        specs.extend(mapping_specs(&a, dir)?);
    }
    if wanted("policies") {
        specs.extend(policy_specs(&a)?);
        specs.extend(policy_variant_specs(&a));
    }
    if wanted("systems") {
        specs.extend(system_specs(&a));
        specs.extend(system_variant_specs(&a));
    }
    let started = Instant::now();
    let total = specs.len();
    let mut rows = Vec::new();
    for (i, spec) in specs.into_iter().enumerate() {
        eprintln!("[{}/{total}] {}", i + 1, spec.name());
        rows.push(run_one(spec, dir)?);
    }
    write_table(dir, &rows)?;
    write_series(dir, &rows)?;
    plots(dir, &rows)?;
    let comparisons = paper::compare(&rows, if a.quick { 8 } else { 1 });
    crate::reproduce::paper_vs_ours::write_csv(dir, &comparisons)?;
    eprintln!(
        "{}",
        crate::reproduce::paper_vs_ours::summary_line(&comparisons)
    );
    eprintln!(
        "wrote {} ({} runs in {:.1} s)",
        dir.join("table.csv").display(),
        rows.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
