//! `tierlab analyze concentrations`: the workload analysis of the ATSMF
//! paper (seed 000 §3, Table 1, Figs. 1–2) for any trace — IO counts per
//! sub-LUN per minute (the heat map), the IO concentrations of every period
//! followed across periods, and the Table-1 / Fig-1 metrics.
//!
//! Extraction and tracking are the ATSMF analyzer's own `extract` and
//! `Tracker` (tierlab-policies), so what this command reports is what the
//! tiering policy sees. One streaming pass; memory is the per-period counts,
//! the per-minute heat map and one small row per period. A second pass
//! simulates the page cache when its size comes from the first (the
//! default). Every metric is defined in docs/atsmf.md "Workload analysis".

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::Serialize;
use tierlab_cache::sim::{parse_capacity_pages, record_pages};
use tierlab_cache::{Eviction, policies};
use tierlab_policies::atsmf::analyzer::{ExtractParams, Group, Tracked, Tracker, extract};
use tierlab_trace::units::{format_size_bytes, parse_size_bytes};
use tierlab_trace::{DeviceTable, IoRecord, Op, ParamError, RecordStream, TimeBase};

use crate::ExpResult;
use crate::input::{InputArgs, report_skipped};
use crate::input::{check_policy, parse_page_size};
use crate::plot::{Heatmap, heatmap_svg};

#[derive(Subcommand)]
pub enum AnalyzeCommand {
    /// IO concentrations (ATSMF paper §3): per-minute heat map, the
    /// concentrations of every period tracked across periods, and the
    /// Table-1 / Fig-1 metrics (docs/atsmf.md "Workload analysis").
    Concentrations(ConcentrationsArgs),
}

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    tierlab trace gen atsmf.src1_0 --seed 5 --out src1_0.tlt --truth truth.csv\n  \
    tierlab analyze concentrations src1_0.tlt --out src1_0-analysis\n  \
    tierlab analyze concentrations src1_0.csv.gz --device 0 --start 1920min --end 2020min --json")]
pub struct ConcentrationsArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// The LUN to analyse, by its device name in the trace (required when
    /// the trace has several devices).
    #[arg(long)]
    pub device: Option<String>,
    /// Sub-LUN size (paper: 1 GB, read as 1 GiB).
    #[arg(long, default_value = "1GiB")]
    pub sub_lun_size: String,
    /// Collector period (paper: 24 s). Units: ns, us, ms, s, min, h; a bare
    /// number is seconds.
    #[arg(long, default_value = "24s")]
    pub period: String,
    /// Step 2: keep the N busiest sub-LUNs of each period (paper: 30).
    #[arg(long, default_value_t = 30)]
    pub top_n: usize,
    /// Step 4: take sub-LUN groups until they hold this share of the
    /// period's IOs (paper: 0.6).
    #[arg(long, default_value_t = 0.6)]
    pub share_m: f64,
    /// LUN size (default: the highest offset seen, rounded up to whole
    /// sub-LUNs). An IO beyond it is an error.
    #[arg(long)]
    pub lun_size: Option<String>,
    /// Analyse from this time after the trace's first record (e.g. 1920min).
    #[arg(long)]
    pub start: Option<String>,
    /// ... up to this time after the trace's first record (exclusive).
    #[arg(long)]
    pub end: Option<String>,
    /// A new concentration is "arbitrary" when none of its sub-LUNs was in
    /// any concentration this long before it appeared.
    #[arg(long, default_value = "1h")]
    pub arbitrary_lookback: String,
    /// Page cache for the hit ratio (paper: FlashCache, FIFO).
    #[arg(long, default_value = "fifo")]
    pub cache_policy: String,
    /// Page-cache size: bytes or a size with a unit (`8GiB`), or a page
    /// count (`2048pages`). Default: the peak memory of the concentrations,
    /// the largest number of sub-LUNs in concentrations in one period times
    /// the sub-LUN size (needs a second pass over the trace).
    #[arg(long)]
    pub cache_size: Option<String>,
    /// Page-cache page size (paper: FlashCache with 4 KB blocks).
    #[arg(long, default_value = "4KiB")]
    pub page_size: String,
    /// Skip the page-cache simulation.
    #[arg(long, conflicts_with = "cache_size")]
    pub no_cache: bool,
    /// Write heatmap.csv/.svg, concentrations.csv, periods.csv and
    /// summary.json to this directory (created if needed).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the summary as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: AnalyzeCommand) -> ExpResult {
    match cmd {
        AnalyzeCommand::Concentrations(args) => run_concentrations(args),
    }
}

const NS_PER_S: f64 = 1e9;
const NS_PER_MIN: u64 = 60_000_000_000;
/// Sub-LUN indices are u32 in the analyzer; far fewer keep the per-period
/// counts and the heat map small, and more means a wrong --sub-lun-size or
/// a corrupt offset.
const MAX_SUB_LUNS: u64 = 1 << 24;
/// Heat-map cells (u32 each): 256 MiB.
const MAX_HEAT_CELLS: u64 = 1 << 26;
/// The SVG heat map bins cells down to at most this many columns and rows,
/// so the file stays a few MB whatever the trace length.
const SVG_MAX_COLUMNS: usize = 300;
const SVG_MAX_ROWS: usize = 200;

/// Parses a duration: `24s`, `1.5min`, `500ms`, `2h`, `1d`; a bare number is
/// seconds. `what` is the flag or key the error names (`--period`).
pub fn parse_duration_ns(text: &str, what: &str) -> Result<u64, ParamError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "" | "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86400e9,
        other => {
            return Err(ParamError::new(
                what,
                format!("{t:?} (unknown unit `{other}`)"),
                "a duration with a unit of ns, us, ms, s, min, h or d (e.g. 24s, 1920min)",
            ));
        }
    };
    let value: f64 = number.replace('_', "").parse().map_err(|_| {
        ParamError::new(what, format!("{t:?}"), "a duration (e.g. 24s, 1.5min, 1h)")
    })?;
    let ns = value * scale;
    if !ns.is_finite() || ns >= u64::MAX as f64 {
        return Err(ParamError::new(
            what,
            format!("{t:?}"),
            "a duration shorter than 2^64 ns (584 years)",
        ));
    }
    Ok(ns.round() as u64)
}

/// The analysis parameters, checked.
#[derive(Clone, Debug)]
pub struct Config {
    pub sub_lun_size_bytes: u64,
    pub period_ns: u64,
    pub extract: ExtractParams,
    /// From --lun-size; None: from the highest offset seen.
    pub lun_sub_luns: Option<u32>,
    pub lun_size_bytes: Option<u64>,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    pub lookback_ns: u64,
    pub device: Option<String>,
}

impl Config {
    fn from_args(a: &ConcentrationsArgs) -> Result<Config, String> {
        let sub_lun_size_bytes =
            parse_size_bytes(&a.sub_lun_size).map_err(|e| format!("--sub-lun-size: {e}"))?;
        if sub_lun_size_bytes == 0 {
            return Err("--sub-lun-size must be at least 1 byte".into());
        }
        let period_ns = parse_duration_ns(&a.period, "--period").map_err(|e| e.to_string())?;
        if period_ns < 1_000_000 {
            return Err(format!(
                "--period {:?}: must be at least 1 ms (paper: 24s)",
                a.period
            ));
        }
        if a.top_n == 0 {
            return Err("--top-n must be at least 1 (paper: 30)".into());
        }
        if !(a.share_m > 0.0 && a.share_m <= 1.0) {
            return Err(format!(
                "--share-m {}: must be in (0, 1] (paper: 0.6)",
                a.share_m
            ));
        }
        let (lun_sub_luns, lun_size_bytes) = match &a.lun_size {
            None => (None, None),
            Some(text) => {
                let bytes = parse_size_bytes(text).map_err(|e| format!("--lun-size: {e}"))?;
                if bytes == 0 {
                    return Err("--lun-size must be at least 1 byte".into());
                }
                let n = bytes.div_ceil(sub_lun_size_bytes);
                if n > MAX_SUB_LUNS {
                    return Err(format!(
                        "--lun-size {text} is {n} sub-LUNs of {}; at most {MAX_SUB_LUNS}: use a larger --sub-lun-size",
                        format_size_bytes(sub_lun_size_bytes)
                    ));
                }
                (Some(n as u32), Some(bytes))
            }
        };
        let start_ns = a
            .start
            .as_deref()
            .map(|s| parse_duration_ns(s, "--start"))
            .transpose()
            .map_err(|e| e.to_string())?
            .unwrap_or(0);
        let end_ns = a
            .end
            .as_deref()
            .map(|s| parse_duration_ns(s, "--end"))
            .transpose()
            .map_err(|e| e.to_string())?;
        if let Some(end) = end_ns {
            if end <= start_ns {
                return Err(format!(
                    "--end ({} s) must be after --start ({} s)",
                    end as f64 / NS_PER_S,
                    start_ns as f64 / NS_PER_S
                ));
            }
        }
        let lookback_ns = parse_duration_ns(&a.arbitrary_lookback, "--arbitrary-lookback")
            .map_err(|e| e.to_string())?;
        if lookback_ns == 0 {
            return Err("--arbitrary-lookback must be longer than 0 (spec: 1h)".into());
        }
        Ok(Config {
            sub_lun_size_bytes,
            period_ns,
            extract: ExtractParams {
                top_n: a.top_n,
                share_m: a.share_m,
            },
            lun_sub_luns,
            lun_size_bytes,
            start_ns,
            end_ns,
            lookback_ns,
            device: a.device.clone(),
        })
    }

    fn period_s(&self) -> f64 {
        self.period_ns as f64 / NS_PER_S
    }

    /// Look-back in whole periods (rounded up: at least the time asked for).
    fn lookback_periods(&self) -> u64 {
        self.lookback_ns.div_ceil(self.period_ns)
    }
}

/// Which records are analysed: one device, reads and writes, inside the
/// time window. Times count from the trace's first record (of any device),
/// as `tierlab trace slice --minutes` does.
struct Window {
    start_ns: u64,
    end_ns: Option<u64>,
    device: Option<String>,
    device_id: Option<u32>,
    first_time_ns: Option<u64>,
    /// Records of other ops (trim, flush): not IOs to a sub-LUN here.
    other_ops: u64,
    admitted: u64,
}

impl Window {
    fn new(cfg: &Config) -> Window {
        Window {
            start_ns: cfg.start_ns,
            end_ns: cfg.end_ns,
            device: cfg.device.clone(),
            device_id: None,
            first_time_ns: None,
            other_ops: 0,
            admitted: 0,
        }
    }

    /// The record's time since the window start, or None to skip it.
    fn admit(&mut self, r: &IoRecord, devices: &DeviceTable) -> Result<Option<u64>, String> {
        let first = *self.first_time_ns.get_or_insert(r.time_ns);
        match (&self.device, self.device_id) {
            (_, Some(id)) if id != r.device_id => {
                if self.device.is_some() {
                    return Ok(None);
                }
                let names = devices.names().join(", ");
                return Err(format!(
                    "the trace has several devices ({names}); analyse one LUN at a time with --device NAME"
                ));
            }
            (Some(name), None) => {
                if devices.name(r.device_id) != Some(name.as_str()) {
                    return Ok(None);
                }
                self.device_id = Some(r.device_id);
            }
            (None, None) => self.device_id = Some(r.device_id),
            _ => {}
        }
        if !matches!(r.op, Op::Read | Op::Write) {
            self.other_ops += 1;
            return Ok(None);
        }
        // An out-of-order record older than the first counts as time 0.
        let since = r.time_ns.saturating_sub(first);
        if since < self.start_ns || self.end_ns.is_some_and(|e| since >= e) {
            return Ok(None);
        }
        self.admitted += 1;
        Ok(Some(since - self.start_ns))
    }

    /// After the pass: an error if the chosen device never appeared.
    fn check_device_seen(&self, devices: &DeviceTable) -> Result<(), String> {
        match (&self.device, self.device_id) {
            (Some(name), None) => Err(format!(
                "device {name:?} is not in the trace; devices: {}",
                if devices.is_empty() {
                    "(none)".to_string()
                } else {
                    devices.names().join(", ")
                }
            )),
            _ => Ok(()),
        }
    }
}

/// The page cache of the hit ratio: every page of a read or write is a
/// lookup that inserts on a miss (tierlab cache's semantics).
struct PageCache {
    cache: Box<dyn Eviction>,
    page_size_bytes: u32,
    refs: [u64; 2],
    hits: [u64; 2],
}

impl PageCache {
    fn new(
        policy: &str,
        capacity_pages: u64,
        page_size_bytes: u32,
    ) -> Result<PageCache, ParamError> {
        let cap = usize::try_from(capacity_pages).unwrap_or(usize::MAX);
        Ok(PageCache {
            cache: policies::build(policy, cap)?,
            page_size_bytes,
            refs: [0; 2],
            hits: [0; 2],
        })
    }

    fn access(&mut self, r: &IoRecord) {
        let w = (r.op == Op::Write) as usize;
        for key in record_pages(r, self.page_size_bytes) {
            self.refs[w] += 1;
            self.hits[w] += self.cache.access(key).is_hit() as u64;
        }
    }
}

/// A concentration being followed.
#[derive(Clone, Debug)]
struct Live {
    /// The period it got its id in (a split gets a new id; see `split`).
    born_period: u64,
    last_period: u64,
    /// The paper's `A` in the latest period (a split inherits its parent's).
    periods: u32,
    start_group: Group,
    end_group: Group,
    max_size_sub_luns: u32,
    ios: u64,
    split: bool,
    arbitrary: Option<bool>,
    /// Least squares of the IO-weighted centre (sub-LUNs) against periods
    /// since `born_period`: n, Σx, Σy, Σxx, Σxy.
    fit: [f64; 5],
}

impl Live {
    fn observe(&mut self, period: u64, t: &Tracked, centre: f64) {
        self.last_period = period;
        self.periods = t.periods;
        self.end_group = t.group;
        self.max_size_sub_luns = self.max_size_sub_luns.max(t.group.size_sub_luns);
        self.ios += t.group.ios;
        let x = (period - self.born_period) as f64;
        let f = &mut self.fit;
        f[0] += 1.0;
        f[1] += x;
        f[2] += centre;
        f[3] += x * x;
        f[4] += x * centre;
    }

    /// Drift of the centre in sub-LUNs per period (0 with one observation).
    fn slope_sub_luns_per_period(&self) -> f64 {
        let [n, sx, sy, sxx, sxy] = self.fit;
        let den = n * sxx - sx * sx;
        if n < 2.0 || den <= 0.0 {
            0.0
        } else {
            (n * sxy - sx * sy) / den
        }
    }
}

/// One row of concentrations.csv.
#[derive(Clone, Debug, Serialize)]
pub struct ConcentrationRow {
    pub id: u64,
    pub start_period: u64,
    pub start_s: f64,
    pub end_s: f64,
    pub periods: u32,
    pub duration_s: f64,
    pub start_first_sub_lun: u32,
    pub start_last_sub_lun: u32,
    pub end_first_sub_lun: u32,
    pub end_last_sub_lun: u32,
    pub max_size_sub_luns: u32,
    pub ios: u64,
    pub moving: bool,
    pub speed_sub_luns_per_min: f64,
    pub drift_sub_luns: f64,
    /// None: not judged (a split, or born before a full look-back).
    pub arbitrary: Option<bool>,
    pub split: bool,
    pub ongoing_at_start: bool,
    pub ongoing_at_end: bool,
}

const CONCENTRATIONS_HEADER: &str = "id,start_period,start_s,end_s,periods,duration_s,start_first_sub_lun,start_last_sub_lun,end_first_sub_lun,end_last_sub_lun,max_size_sub_luns,ios,moving,speed_sub_luns_per_min,drift_sub_luns,arbitrary,split,ongoing_at_start,ongoing_at_end";

impl ConcentrationRow {
    fn csv(&self) -> String {
        let arbitrary = match self.arbitrary {
            Some(b) => b.to_string(),
            None => String::new(),
        };
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6},{:.4},{},{},{},{}",
            self.id,
            self.start_period,
            self.start_s,
            self.end_s,
            self.periods,
            self.duration_s,
            self.start_first_sub_lun,
            self.start_last_sub_lun,
            self.end_first_sub_lun,
            self.end_last_sub_lun,
            self.max_size_sub_luns,
            self.ios,
            self.moving,
            self.speed_sub_luns_per_min,
            self.drift_sub_luns,
            arbitrary,
            self.split,
            self.ongoing_at_start,
            self.ongoing_at_end
        )
    }
}

/// One period's numbers (periods.csv; Fig. 1 per period).
#[derive(Clone, Copy, Debug, Default)]
struct PeriodRow {
    ios: u64,
    writes: u64,
    concentrations: u32,
    concentration_sub_luns: u32,
    concentration_ios: u64,
}

/// Sums over finished concentrations.
#[derive(Debug, Default)]
struct Totals {
    count: u64,
    sum_periods: u64,
    max_periods: u32,
    complete: u64,
    complete_sum_periods: u64,
    moving: u64,
    split: u64,
    judged: u64,
    arbitrary: u64,
}

/// The streaming analysis of one LUN.
struct Analysis {
    cfg: Config,
    lookback_periods: u64,
    /// IOs per sub-LUN in the current period (the data collector).
    counts: Vec<u64>,
    period: u64,
    current: PeriodRow,
    /// Highest sub-LUN seen + 1.
    sub_luns_seen: u32,
    /// heat[minute][sub_lun]; rows grow as sub-LUNs appear.
    heat: Vec<Vec<u32>>,
    tracker: Tracker,
    live: HashMap<u64, Live>,
    /// Per sub-LUN: 1 + the last period it was in a concentration (0: never).
    last_in_concentration: Vec<u64>,
    periods: Vec<PeriodRow>,
    totals: Totals,
    rows_out: Option<BufWriter<File>>,
    reads: u64,
    writes: u64,
    late_records: u64,
    cache: Option<PageCache>,
}

impl Analysis {
    fn new(cfg: Config, rows_out: Option<BufWriter<File>>, cache: Option<PageCache>) -> Self {
        let n = cfg.lun_sub_luns.unwrap_or(0) as usize;
        Analysis {
            lookback_periods: cfg.lookback_periods(),
            counts: vec![0; n],
            period: 0,
            current: PeriodRow::default(),
            sub_luns_seen: 0,
            heat: Vec::new(),
            tracker: Tracker::new(),
            live: HashMap::new(),
            last_in_concentration: vec![0; n],
            periods: Vec::new(),
            totals: Totals::default(),
            rows_out,
            reads: 0,
            writes: 0,
            late_records: 0,
            cache,
            cfg,
        }
    }

    fn heat_cells_check(&self, minutes: u64, sub_luns: u64) -> Result<(), String> {
        if minutes.saturating_mul(sub_luns.max(1)) > MAX_HEAT_CELLS {
            return Err(format!(
                "the heat map would hold {minutes} minutes x {sub_luns} sub-LUNs, more than {MAX_HEAT_CELLS} cells: analyse a shorter window (--start/--end) or use a larger --sub-lun-size"
            ));
        }
        Ok(())
    }

    /// One admitted record, `rel_ns` after the window start.
    fn feed(&mut self, rel_ns: u64, r: &IoRecord, record_no: u64) -> Result<(), String> {
        let sub_lun = r.offset_bytes / self.cfg.sub_lun_size_bytes;
        let limit = self.cfg.lun_sub_luns.map_or(MAX_SUB_LUNS, |n| n as u64);
        if sub_lun >= limit {
            return Err(match self.cfg.lun_size_bytes {
                Some(lun) => format!(
                    "record {record_no}: offset {} is beyond --lun-size {} ({} sub-LUNs of {})",
                    r.offset_bytes,
                    format_size_bytes(lun),
                    limit,
                    format_size_bytes(self.cfg.sub_lun_size_bytes)
                ),
                None => format!(
                    "record {record_no}: offset {} would make the LUN more than {MAX_SUB_LUNS} sub-LUNs of {}: use a larger --sub-lun-size or check the trace",
                    r.offset_bytes,
                    format_size_bytes(self.cfg.sub_lun_size_bytes)
                ),
            });
        }
        let sub_lun = sub_lun as usize;
        let p = rel_ns / self.cfg.period_ns;
        if p > self.period {
            self.advance_to(p);
        } else if p < self.period {
            // Out of order across a period boundary: the period it belongs
            // to is closed; count it in the current one.
            self.late_records += 1;
        }
        if sub_lun >= self.counts.len() {
            self.counts.resize(sub_lun + 1, 0);
            self.last_in_concentration.resize(sub_lun + 1, 0);
        }
        self.sub_luns_seen = self.sub_luns_seen.max(sub_lun as u32 + 1);
        self.counts[sub_lun] += 1;
        self.current.ios += 1;
        if r.op == Op::Write {
            self.current.writes += 1;
            self.writes += 1;
        } else {
            self.reads += 1;
        }
        let minute = (rel_ns / NS_PER_MIN) as usize;
        if minute >= self.heat.len() || sub_lun >= self.heat[minute].len() {
            let total_sub_luns = self.cfg.lun_sub_luns.unwrap_or(self.sub_luns_seen);
            self.heat_cells_check(
                (minute.max(self.heat.len().saturating_sub(1)) + 1) as u64,
                total_sub_luns as u64,
            )?;
            if minute >= self.heat.len() {
                self.heat.resize_with(minute + 1, Vec::new);
            }
            let row = &mut self.heat[minute];
            if sub_lun >= row.len() {
                row.resize(sub_lun + 1, 0);
            }
        }
        let cell = &mut self.heat[minute][sub_lun];
        *cell = cell.saturating_add(1);
        if let Some(c) = &mut self.cache {
            c.access(r);
        }
        Ok(())
    }

    /// Closes periods until `p` is the current one.
    fn advance_to(&mut self, p: u64) {
        while self.period < p {
            let idle = self.current.ios == 0 && self.tracker.current().is_empty();
            if idle {
                // Nothing to extract and nothing to end: skip straight on.
                let skip = p - self.period;
                self.periods
                    .extend(std::iter::repeat_n(PeriodRow::default(), skip as usize));
                self.period = p;
                return;
            }
            self.close_period();
        }
    }

    /// Steps 2–4 on the period's counts, tracking, and the period's row.
    fn close_period(&mut self) {
        let p = self.period;
        let groups = extract(&self.counts, &self.cfg.extract);
        let update = self.tracker.update(p, &groups);
        for t in &update.ended {
            self.finish(t, false);
        }
        for t in self.tracker.current() {
            let centre = centre_of(&self.counts, t.group.first_sub_lun, t.group.size_sub_luns);
            let live = self.live.entry(t.id).or_insert_with(|| {
                let split = t.periods > 1;
                // Judged only with a full look-back inside the window.
                let arbitrary = (!split && p >= self.lookback_periods).then(|| {
                    let since = p - self.lookback_periods;
                    !(t.group.first_sub_lun..t.group.end_sub_lun()).any(|s| {
                        // Stored as 1 + period: in one at `since` or later.
                        self.last_in_concentration[s as usize] > since
                    })
                });
                Live {
                    born_period: p,
                    last_period: p,
                    periods: t.periods,
                    start_group: t.group,
                    end_group: t.group,
                    max_size_sub_luns: 0,
                    ios: 0,
                    split,
                    arbitrary,
                    fit: [0.0; 5],
                }
            });
            live.observe(p, t, centre);
        }
        for g in &groups {
            for s in g.first_sub_lun..g.end_sub_lun() {
                self.last_in_concentration[s as usize] = p + 1;
            }
            self.current.concentrations += 1;
            self.current.concentration_sub_luns += g.size_sub_luns;
            self.current.concentration_ios += g.ios;
        }
        self.periods.push(self.current);
        self.current = PeriodRow::default();
        self.counts.fill(0);
        self.period += 1;
    }

    fn finish(&mut self, t: &Tracked, ongoing_at_end: bool) {
        let Some(l) = self.live.remove(&t.id) else {
            return;
        };
        let ps = self.cfg.period_s();
        let start_period = (l.last_period + 1).saturating_sub(l.periods as u64);
        let slope = l.slope_sub_luns_per_period();
        let drift = slope * (l.last_period - l.born_period) as f64;
        let row = ConcentrationRow {
            id: t.id,
            start_period,
            start_s: start_period as f64 * ps,
            end_s: (l.last_period + 1) as f64 * ps,
            periods: l.periods,
            duration_s: l.periods as f64 * ps,
            start_first_sub_lun: l.start_group.first_sub_lun,
            start_last_sub_lun: l.start_group.end_sub_lun() - 1,
            end_first_sub_lun: l.end_group.first_sub_lun,
            end_last_sub_lun: l.end_group.end_sub_lun() - 1,
            max_size_sub_luns: l.max_size_sub_luns,
            ios: l.ios,
            moving: drift.abs() >= 1.0,
            speed_sub_luns_per_min: slope / (ps / 60.0),
            drift_sub_luns: drift,
            arbitrary: l.arbitrary,
            split: l.split,
            ongoing_at_start: start_period == 0,
            ongoing_at_end,
        };
        let tot = &mut self.totals;
        tot.count += 1;
        tot.sum_periods += row.periods as u64;
        tot.max_periods = tot.max_periods.max(row.periods);
        if !row.ongoing_at_start && !row.ongoing_at_end {
            tot.complete += 1;
            tot.complete_sum_periods += row.periods as u64;
        }
        tot.moving += row.moving as u64;
        tot.split += row.split as u64;
        if let Some(a) = row.arbitrary {
            tot.judged += 1;
            tot.arbitrary += a as u64;
        }
        if let Some(w) = &mut self.rows_out {
            // A failed write shows up at the final flush.
            let _ = writeln!(w, "{}", row.csv());
        }
    }

    /// Closes the last period and the concentrations still running.
    fn finish_all(&mut self, any_record: bool) {
        if any_record {
            self.close_period();
        }
        let still: Vec<Tracked> = self.tracker.current().to_vec();
        for t in &still {
            self.finish(t, true);
        }
    }
}

/// IO-weighted centre of a group in sub-LUN units (sub-LUN i spans [i, i+1)):
/// robust to quiet neighbours that step 2 kept by chance.
fn centre_of(counts: &[u64], first_sub_lun: u32, size_sub_luns: u32) -> f64 {
    let (mut w, mut sum) = (0.0, 0.0);
    for s in first_sub_lun..first_sub_lun + size_sub_luns {
        let c = counts.get(s as usize).copied().unwrap_or(0) as f64;
        w += c;
        sum += c * (s as f64 + 0.5);
    }
    if w > 0.0 {
        sum / w
    } else {
        first_sub_lun as f64 + size_sub_luns as f64 / 2.0
    }
}

#[derive(Serialize)]
struct PageCacheSummary {
    policy: String,
    page_size_bytes: u32,
    capacity_pages: u64,
    capacity_bytes: u64,
    /// `--cache-size` or `peak_concentration_memory`.
    capacity_source: &'static str,
    page_references: u64,
    hits: u64,
    hit_ratio: Option<f64>,
    read_hit_ratio: Option<f64>,
    write_hit_ratio: Option<f64>,
}

#[derive(Serialize)]
struct Summary {
    trace: String,
    device: Option<String>,
    sub_lun_size_bytes: u64,
    period_s: f64,
    top_n: usize,
    share_m: f64,
    arbitrary_lookback_s: f64,
    window_start_s: f64,
    window_end_s: Option<f64>,
    lun_size_bytes: u64,
    lun_sub_luns: u32,
    /// `--lun-size` or `max_offset`.
    lun_size_source: &'static str,
    periods: u64,
    minutes: u64,
    ios: u64,
    reads: u64,
    writes: u64,
    write_ratio: Option<f64>,
    skipped_other_ops: u64,
    late_records: u64,
    concentrations: u64,
    mean_duration_s: Option<f64>,
    mean_duration_min: Option<f64>,
    mean_duration_periods: Option<f64>,
    complete_concentrations: u64,
    mean_duration_complete_min: Option<f64>,
    max_duration_min: Option<f64>,
    moving_concentrations: u64,
    moving_share: Option<f64>,
    split_concentrations: u64,
    arbitrary_judged: u64,
    arbitrary_concentrations: u64,
    arbitrary_share: Option<f64>,
    concentration_ios: u64,
    io_share_in_concentrations: Option<f64>,
    lun_share_mean: Option<f64>,
    lun_share_max: Option<f64>,
    lun_share_ever: Option<f64>,
    peak_concentration_sub_luns: u32,
    peak_concentration_bytes: u64,
    page_cache: Option<PageCacheSummary>,
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

fn write_file(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> ExpResult {
    let f = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = BufWriter::new(f);
    write(&mut w)
        .and_then(|_| w.flush())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

/// One pass over the input feeding `each` with admitted records.
fn pass(
    args: &ConcentrationsArgs,
    cfg: &Config,
    mut each: impl FnMut(u64, &IoRecord, u64) -> Result<(), String>,
) -> ExpResult<(Window, DeviceTable, u64)> {
    let mut reader = args.input.open()?;
    if reader.time_base() == TimeBase::None {
        return Err(format!(
            "{}: this trace has no timestamps; periods and minutes need them",
            args.input.input.display()
        )
        .into());
    }
    let mut window = Window::new(cfg);
    let mut record_no = 0u64;
    while let Some(r) = reader.next_record()? {
        record_no += 1;
        let admitted = window
            .admit(&r, reader.devices())
            .map_err(|e| format!("{}: record {record_no}: {e}", args.input.input.display()))?;
        if let Some(rel) = admitted {
            each(rel, &r, record_no).map_err(|e| format!("{}: {e}", args.input.input.display()))?;
        }
    }
    report_skipped(&reader);
    let devices = reader.devices().clone();
    window.check_device_seen(&devices)?;
    Ok((window, devices, record_no))
}

fn run_concentrations(args: ConcentrationsArgs) -> ExpResult {
    let cfg = Config::from_args(&args)?;
    let page_size = parse_page_size(&args.page_size)?;
    let policy = check_policy(&args.cache_policy).map_err(|e| e.with_key("--cache-policy"))?;
    if policy == "belady" {
        return Err(
            "--cache-policy belady needs the future; choose an online policy (paper: fifo)".into(),
        );
    }
    let fixed_cache_pages = args
        .cache_size
        .as_deref()
        .map(|c| parse_capacity_pages(c, page_size).map_err(|e| format!("--cache-size: {e}")))
        .transpose()?;
    let stdin = args.input.input.as_os_str() == "-";
    if stdin && !args.no_cache && fixed_cache_pages.is_none() {
        return Err("reading stdin: the default page-cache size comes from a first pass, and stdin cannot be read twice; give --cache-size SIZE or --no-cache".into());
    }
    if let Some(dir) = &args.out {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let rows_out = match &args.out {
        Some(dir) => {
            let path = dir.join("concentrations.csv");
            let f = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut w = BufWriter::new(f);
            writeln!(w, "{CONCENTRATIONS_HEADER}")?;
            Some(w)
        }
        None => None,
    };
    let cache = match (args.no_cache, fixed_cache_pages) {
        (false, Some(pages)) => Some(PageCache::new(&policy, pages, page_size)?),
        _ => None,
    };
    let mut an = Analysis::new(cfg.clone(), rows_out, cache);
    let (window, devices, _) = pass(&args, &cfg, |rel, r, n| an.feed(rel, r, n))?;
    an.finish_all(window.admitted > 0);
    if let Some(mut w) = an.rows_out.take() {
        w.flush()?;
    }

    let lun_sub_luns = cfg.lun_sub_luns.unwrap_or(an.sub_luns_seen);
    let peak_sub_luns = an
        .periods
        .iter()
        .map(|p| p.concentration_sub_luns)
        .max()
        .unwrap_or(0);
    let peak_bytes = peak_sub_luns as u64 * cfg.sub_lun_size_bytes;

    // The page cache: in the first pass at a given size, else a second pass
    // at the concentrations' peak memory.
    let (cache, capacity_source) = match (args.no_cache, an.cache.take()) {
        (true, _) => (None, ""),
        (false, Some(c)) => (Some(c), "--cache-size"),
        (false, None) => {
            let pages = peak_bytes.div_ceil(page_size as u64);
            if pages == 0 {
                (None, "")
            } else {
                let mut c = PageCache::new(&policy, pages, page_size)?;
                pass(&args, &cfg, |_, r, _| {
                    c.access(r);
                    Ok(())
                })?;
                (Some(c), "peak_concentration_memory")
            }
        }
    };

    let tot = &an.totals;
    let ps = cfg.period_s();
    let ios = an.reads + an.writes;
    let active: Vec<&PeriodRow> = an.periods.iter().filter(|p| p.ios > 0).collect();
    let lun = lun_sub_luns.max(1) as f64;
    let ever = an.last_in_concentration.iter().filter(|&&l| l > 0).count() as u64;
    let conc_ios: u64 = an.periods.iter().map(|p| p.concentration_ios).sum();
    let summary = Summary {
        trace: args.input.input.display().to_string(),
        device: match (&cfg.device, window.device_id) {
            (Some(d), _) => Some(d.clone()),
            (None, Some(id)) => devices.name(id).map(str::to_string),
            _ => None,
        },
        sub_lun_size_bytes: cfg.sub_lun_size_bytes,
        period_s: ps,
        top_n: cfg.extract.top_n,
        share_m: cfg.extract.share_m,
        arbitrary_lookback_s: an.lookback_periods as f64 * ps,
        window_start_s: cfg.start_ns as f64 / NS_PER_S,
        window_end_s: cfg.end_ns.map(|e| e as f64 / NS_PER_S),
        lun_size_bytes: cfg
            .lun_size_bytes
            .unwrap_or(lun_sub_luns as u64 * cfg.sub_lun_size_bytes),
        lun_sub_luns,
        lun_size_source: if cfg.lun_size_bytes.is_some() {
            "--lun-size"
        } else {
            "max_offset"
        },
        periods: an.periods.len() as u64,
        minutes: an.heat.len() as u64,
        ios,
        reads: an.reads,
        writes: an.writes,
        write_ratio: ratio(an.writes, ios),
        skipped_other_ops: window.other_ops,
        late_records: an.late_records,
        concentrations: tot.count,
        mean_duration_s: ratio(tot.sum_periods, tot.count).map(|p| p * ps),
        mean_duration_min: ratio(tot.sum_periods, tot.count).map(|p| p * ps / 60.0),
        mean_duration_periods: ratio(tot.sum_periods, tot.count),
        complete_concentrations: tot.complete,
        mean_duration_complete_min: ratio(tot.complete_sum_periods, tot.complete)
            .map(|p| p * ps / 60.0),
        max_duration_min: (tot.count > 0).then(|| tot.max_periods as f64 * ps / 60.0),
        moving_concentrations: tot.moving,
        moving_share: ratio(tot.moving, tot.count),
        split_concentrations: tot.split,
        arbitrary_judged: tot.judged,
        arbitrary_concentrations: tot.arbitrary,
        arbitrary_share: ratio(tot.arbitrary, tot.judged),
        concentration_ios: conc_ios,
        io_share_in_concentrations: ratio(conc_ios, ios),
        lun_share_mean: (!active.is_empty()).then(|| {
            active
                .iter()
                .map(|p| p.concentration_sub_luns as f64 / lun)
                .sum::<f64>()
                / active.len() as f64
        }),
        lun_share_max: (!active.is_empty()).then(|| peak_sub_luns as f64 / lun),
        lun_share_ever: (!active.is_empty()).then(|| ever as f64 / lun),
        peak_concentration_sub_luns: peak_sub_luns,
        peak_concentration_bytes: peak_bytes,
        page_cache: cache.map(|c| {
            let refs = c.refs[0] + c.refs[1];
            let hits = c.hits[0] + c.hits[1];
            let capacity_pages = c.cache.capacity() as u64;
            PageCacheSummary {
                policy: policy.clone(),
                page_size_bytes: page_size,
                capacity_pages,
                capacity_bytes: capacity_pages * page_size as u64,
                capacity_source,
                page_references: refs,
                hits,
                hit_ratio: ratio(hits, refs),
                read_hit_ratio: ratio(c.hits[0], c.refs[0]),
                write_hit_ratio: ratio(c.hits[1], c.refs[1]),
            }
        }),
    };

    if let Some(dir) = &args.out {
        write_outputs(dir, &an, &summary, lun_sub_luns)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_text(&summary);
    }
    if window.admitted == 0 {
        eprintln!("tierlab: warning: no read or write fell in the analysed window");
    }
    Ok(())
}

fn write_outputs(dir: &Path, an: &Analysis, summary: &Summary, lun_sub_luns: u32) -> ExpResult {
    let n = lun_sub_luns as usize;
    // Long format, every cell (zeros too): `pivot` gives the matrix.
    write_file(&dir.join("heatmap.csv"), |w| {
        writeln!(w, "minute,sub_lun,ios")?;
        for (m, row) in an.heat.iter().enumerate() {
            for s in 0..n {
                writeln!(w, "{m},{s},{}", row.get(s).copied().unwrap_or(0))?;
            }
        }
        Ok(())
    })?;
    let lun = lun_sub_luns.max(1) as f64;
    let ps = summary.period_s;
    write_file(&dir.join("periods.csv"), |w| {
        writeln!(
            w,
            "period,start_s,ios,writes,concentrations,concentration_sub_luns,concentration_ios,io_share,lun_share"
        )?;
        for (i, p) in an.periods.iter().enumerate() {
            let io_share = ratio(p.concentration_ios, p.ios)
                .map(|r| format!("{r:.6}"))
                .unwrap_or_default();
            writeln!(
                w,
                "{i},{},{},{},{},{},{},{io_share},{:.6}",
                i as f64 * ps,
                p.ios,
                p.writes,
                p.concentrations,
                p.concentration_sub_luns,
                p.concentration_ios,
                p.concentration_sub_luns as f64 / lun
            )?;
        }
        Ok(())
    })?;
    write_file(&dir.join("summary.json"), |w| {
        serde_json::to_writer_pretty(&mut *w, summary)?;
        writeln!(w)
    })?;
    // The SVG: minutes x sub-LUNs, binned down to a drawable grid.
    let minutes = an.heat.len();
    let cols = minutes.clamp(1, SVG_MAX_COLUMNS);
    let rows = n.clamp(1, SVG_MAX_ROWS);
    let mut values = vec![0.0; cols * rows];
    for (m, row) in an.heat.iter().enumerate() {
        let x = m * cols / minutes.max(1);
        for (s, &c) in row.iter().enumerate() {
            let y = s * rows / n.max(1);
            values[x * rows + y] += c as f64;
        }
    }
    let svg = dir.join("heatmap.svg");
    let title = if cols < minutes || rows < n {
        format!("IOs per sub-LUN per minute (binned to {cols} x {rows} cells)")
    } else {
        "IOs per sub-LUN per minute".to_string()
    };
    heatmap_svg(
        &svg,
        &Heatmap {
            title: &title,
            x_label: "minute",
            y_label: "sub-LUN",
            columns: cols,
            rows,
            values: &values,
            x_range: (0.0, minutes.max(1) as f64),
            y_range: (0.0, n.max(1) as f64),
        },
    )?;
    Ok(())
}

fn opt(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) => format!("{x:.digits$}"),
        None => "-".to_string(),
    }
}

fn print_text(s: &Summary) {
    println!("trace                       {}", s.trace);
    if let Some(d) = &s.device {
        println!("device                      {d}");
    }
    println!(
        "lun                         {} sub-LUNs of {} ({})",
        s.lun_sub_luns,
        format_size_bytes(s.sub_lun_size_bytes),
        s.lun_size_source
    );
    println!(
        "periods                     {} of {} s ({} minutes)",
        s.periods, s.period_s, s.minutes
    );
    println!("ios                         {}", s.ios);
    println!("write_ratio                 {}", opt(s.write_ratio, 4));
    println!("concentrations              {}", s.concentrations);
    println!(
        "mean_duration_min           {}",
        opt(s.mean_duration_min, 2)
    );
    println!(
        "mean_duration_complete_min  {} ({} neither cut by the window's start nor end)",
        opt(s.mean_duration_complete_min, 2),
        s.complete_concentrations
    );
    println!("max_duration_min            {}", opt(s.max_duration_min, 2));
    println!("moving_share                {}", opt(s.moving_share, 4));
    println!(
        "arbitrary_share             {} ({} of {} judged, look-back {} s)",
        opt(s.arbitrary_share, 4),
        s.arbitrary_concentrations,
        s.arbitrary_judged,
        s.arbitrary_lookback_s
    );
    println!(
        "io_share_in_concentrations  {}",
        opt(s.io_share_in_concentrations, 4)
    );
    println!(
        "lun_share mean/max/ever     {} / {} / {}",
        opt(s.lun_share_mean, 4),
        opt(s.lun_share_max, 4),
        opt(s.lun_share_ever, 4)
    );
    match &s.page_cache {
        Some(c) => println!(
            "page_cache_hit_ratio        {} ({}, {} pages of {}, {})",
            opt(c.hit_ratio, 4),
            c.policy,
            c.capacity_pages,
            format_size_bytes(c.page_size_bytes as u64),
            c.capacity_source
        ),
        None => println!("page_cache_hit_ratio        - (not simulated)"),
    }
    if s.late_records > 0 {
        println!("late_records                {}", s.late_records);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("24s", "x"), Ok(24_000_000_000));
        assert_eq!(parse_duration_ns("24", "x"), Ok(24_000_000_000));
        assert_eq!(parse_duration_ns("1.5min", "x"), Ok(90_000_000_000));
        assert_eq!(parse_duration_ns("1920min", "x"), Ok(115_200_000_000_000));
        assert_eq!(parse_duration_ns("1h", "x"), Ok(3_600_000_000_000));
        assert_eq!(parse_duration_ns("500ms", "x"), Ok(500_000_000));
        let e = parse_duration_ns("3 weeks", "--period").unwrap_err();
        assert_eq!(e.key(), "--period");
        assert_eq!(e.found, "\"3 weeks\" (unknown unit `weeks`)");
        let e = e.to_string();
        assert!(
            e.contains("`--period`") && e.contains("unknown unit"),
            "{e}"
        );
        assert!(parse_duration_ns("s", "x").is_err());
        assert!(parse_duration_ns("1e30d", "x").is_err());
    }

    #[test]
    fn centre_weights_by_ios() {
        let counts = [0, 90, 10, 0];
        assert!((centre_of(&counts, 1, 2) - (0.9 * 1.5 + 0.1 * 2.5)).abs() < 1e-12);
    }
}
