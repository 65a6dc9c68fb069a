//! `tierlab qos run`: the busy-rate IOPS guarantee (docs/qos.md) on a live
//! Linux machine. Every interval it reads /proc/diskstats for the device,
//! computes `%util` and `r/s + w/s` as `iostat -x` does, reads every
//! tenant's IOs from its cgroup, asks the same `BusyRateController` the
//! simulator runs, and caps the throttled tenants through their cgroups'
//! IOPS throttle: cgroup v2 `io.max` (riops/wiops) or cgroup v1
//! `blkio.throttle.{read,write}_iops_device`. One or more guaranteed
//! tenants (the controller's `a` is the sum of their guarantees) and one or
//! more throttled ones (the controller's B cap is their total budget, split
//! by [`split_budget`]). Limits are removed from every throttled tenant on
//! exit, also on SIGINT/SIGTERM and on errors.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tierlab_policies::qos::{BusyRateController, BusyRateParams, Decision, Event, SampleInput};

use crate::ExpResult;

#[derive(Subcommand)]
pub enum QosCommand {
    /// Guarantee tenants' IOPS on a block device by capping other tenants (cgroups).
    Run(QosRunArgs),
}

#[derive(Args)]
pub struct QosRunArgs {
    /// Block device shared by the tenants (/dev/sdb, /dev/loop0 or loop0).
    #[arg(long)]
    pub device: String,
    /// A guaranteed tenant, as CGROUP=IOPS (cgroup path relative to the
    /// hierarchy root); repeat for several (the controller guarantees the sum).
    #[arg(long, value_name = "CGROUP=IOPS", required = true)]
    pub guarantee: Vec<String>,
    /// A throttled tenant's cgroup (relative to the hierarchy root); repeat
    /// for several (they share the controller's cap: docs/qos.md).
    #[arg(long, value_name = "CGROUP", required = true)]
    pub throttle: Vec<String>,
    /// Sample interval, seconds (the paper's iostat interval: 20).
    #[arg(long, default_value_t = 20.0)]
    pub interval_s: f64,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// CSV log of every sample and decision.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Which cgroup interface to use.
    #[arg(long, value_enum, default_value_t = CgroupChoice::Auto)]
    pub cgroup: CgroupChoice,
    /// Root of the cgroup hierarchy (default: found in /proc/self/mounts).
    #[arg(long)]
    pub cgroup_root: Option<PathBuf>,
    /// Initial target busy rate X, percent.
    #[arg(long, default_value_t = 95.0)]
    pub initial_target_busy_pct: f64,
    /// y in New X = X - (c - d)·C·y.
    #[arg(long, default_value_t = 0.5)]
    pub lowering_gain: f64,
    /// A sample whose %util (2 decimals) reaches this is saturated, percent.
    /// 100 as in the paper; lower it for a device whose %util cannot reach
    /// 100 under saturation (measure it: docs/qos.md).
    #[arg(long, default_value_t = 100.0)]
    pub saturated_util_pct: f64,
    /// X never goes below this, percent.
    #[arg(long, default_value_t = 10.0)]
    pub min_target_busy_pct: f64,
    /// Saturated samples (of --saturation-window-samples) that arm the lowering of X.
    #[arg(long, default_value_t = 3)]
    pub saturation_trigger_samples: u32,
    #[arg(long, default_value_t = 10)]
    pub saturation_window_samples: u32,
    /// Arm a lowering only once the window holds that many samples taken
    /// since the start or the last lowering or reset (docs/qos.md).
    #[arg(long)]
    pub lowering_needs_full_window: bool,
    /// While saturated, B's cap loses this fraction of the total IOPS.
    #[arg(long, default_value_t = 0.2)]
    pub saturated_extra_cut: f64,
    /// %util below this resets X, percent.
    #[arg(long, default_value_t = 20.0)]
    pub reset_util_pct: f64,
    /// Relative busy_pct_per_iops change, held two samples against the
    /// settled level, that resets X (0 disables; docs/qos.md).
    #[arg(long, default_value_t = 0.1)]
    pub reset_bpi_change: f64,
    /// B's cap never goes below this, IOPS; nor does each throttled
    /// tenant's share of it, nor each of its read and write limits.
    #[arg(long, default_value_t = 1.0)]
    pub min_throttled_iops: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CgroupChoice {
    /// cgroup v2 if its io controller is available, else cgroup v1 blkio.
    Auto,
    V1,
    V2,
}

/// One device line of /proc/diskstats: the counters iostat uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskStats {
    pub reads_completed: u64,
    pub writes_completed: u64,
    /// Field 10: milliseconds with at least one IO in flight.
    pub io_ticks_ms: u64,
}

/// Finds `major:minor` in /proc/diskstats text.
pub fn parse_diskstats(text: &str, major: u32, minor: u32) -> Option<DiskStats> {
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 14 || f[0].parse() != Ok(major) || f[1].parse() != Ok(minor) {
            return None;
        }
        let n = |i: usize| f[i].parse::<u64>().ok();
        Some(DiskStats {
            reads_completed: n(3)?,
            writes_completed: n(7)?,
            io_ticks_ms: n(12)?,
        })
    })
}

/// `%util` and `r/s + w/s` between two readings `elapsed_s` apart, as
/// sysstat's iostat computes them (util clamped at 100; counters that went
/// backwards count as 0).
pub fn iostat(before: &DiskStats, after: &DiskStats, elapsed_s: f64) -> (f64, f64) {
    let d = |a: u64, b: u64| b.saturating_sub(a) as f64;
    let util = (d(before.io_ticks_ms, after.io_ticks_ms) / (elapsed_s * 1000.0) * 100.0).min(100.0);
    let ios = d(before.reads_completed, after.reads_completed)
        + d(before.writes_completed, after.writes_completed);
    (util, ios / elapsed_s)
}

/// A cgroup's (reads, writes) on `major:minor`: cgroup v2 `io.stat`
/// (`MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=..`).
pub fn parse_io_stat(text: &str, major: u32, minor: u32) -> (u64, u64) {
    let key = format!("{major}:{minor}");
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if f.next() != Some(key.as_str()) {
            continue;
        }
        let (mut r, mut w) = (0, 0);
        for kv in f {
            match kv.split_once('=') {
                Some(("rios", v)) => r = v.parse().unwrap_or(0),
                Some(("wios", v)) => w = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        return (r, w);
    }
    (0, 0)
}

/// A cgroup's (reads, writes) on `major:minor`: cgroup v1
/// `blkio.throttle.io_serviced` (`MAJ:MIN Read N` / `MAJ:MIN Write N`).
pub fn parse_io_serviced(text: &str, major: u32, minor: u32) -> (u64, u64) {
    let key = format!("{major}:{minor}");
    let (mut r, mut w) = (0, 0);
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3 && f[0] == key {
            match f[1] {
                "Read" => r = f[2].parse().unwrap_or(0),
                "Write" => w = f[2].parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    (r, w)
}

/// Splits B's total cap into read and write IOPS by B's last read share,
/// each at least `floor` (so a direction B did not use is not shut).
pub fn split_cap(cap_iops: f64, reads: u64, writes: u64, floor: f64) -> (u64, u64) {
    let share = if reads + writes == 0 {
        0.5
    } else {
        reads as f64 / (reads + writes) as f64
    };
    let r = (cap_iops * share).round().max(floor.ceil()).max(1.0);
    let w = (cap_iops * (1.0 - share))
        .round()
        .max(floor.ceil())
        .max(1.0);
    (r as u64, w as u64)
}

/// Splits the controller's B cap, the total IOPS budget of all throttled
/// tenants, among them: max-min fair (water-filling) against each one's
/// demand estimated as twice its IOPS in the last sample (at least
/// `floor`). Tenants whose demand is below an equal share of what is left
/// get their demand; the others split the rest evenly; budget left over
/// once every demand is met is added evenly to all. Each share is at least
/// `floor` (so the shares add up to more than `budget` only when `budget <
/// n × floor`); otherwise they add up to `budget`.
///
/// Why: tenants that want more than an equal share get the same (fair
/// among greedy tenants); a light tenant's unused share goes to the others
/// instead of idling, yet it may double its rate from one sample to the
/// next (and a tenant held below its limit by its own read/write split, at
/// more than half its share, still counts as greedy and does not shrink);
/// an idle set is split evenly. A split in proportion to the last sample's
/// IOPS would freeze: capped tenants use about their caps, so the shares
/// of the first capped sample stay forever and a tenant that was idle then
/// stays at the floor. One throttled tenant gets the whole budget.
pub fn split_budget(budget: f64, last_iops: &[f64], floor: f64) -> Vec<f64> {
    let n = last_iops.len();
    let demand: Vec<f64> = last_iops
        .iter()
        .map(|u| (2.0 * u.max(0.0)).max(floor))
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| demand[i].total_cmp(&demand[j]));
    let mut share = vec![0.0; n];
    let mut remaining = budget.max(0.0);
    let mut left = n;
    for (k, &i) in order.iter().enumerate() {
        let equal = remaining / left as f64;
        if demand[i] > equal {
            // Every tenant from here on wants more than an equal share.
            for &j in &order[k..] {
                share[j] = equal;
            }
            remaining = 0.0;
            left = 0;
            break;
        }
        share[i] = demand[i];
        remaining -= demand[i];
        left -= 1;
    }
    if left == 0 && remaining > 0.0 && n > 0 {
        for s in &mut share {
            *s += remaining / n as f64;
        }
    }
    let share: Vec<f64> = share.into_iter().map(|s| s.max(floor)).collect();
    debug_assert!(
        n == 0
            || budget < n as f64 * floor
            || (share.iter().sum::<f64>() - budget).abs() <= 1e-9 * budget.max(1.0),
        "shares {share:?} do not add up to the budget {budget}"
    );
    share
}

/// The tenants of a run, validated: guaranteed (cgroup, IOPS) and
/// throttled cgroups, in the order given.
#[derive(Clone, Debug, PartialEq)]
pub struct Tenants {
    pub guaranteed: Vec<(String, f64)>,
    pub throttled: Vec<String>,
}

/// A cgroup path as the hierarchy sees it: `/a//b/` and `a/./b` are `a/b`.
fn cgroup_key(name: &str) -> String {
    name.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Parses `--guarantee CGROUP=IOPS` (repeated) and `--throttle CGROUP`
/// (repeated): at least one of each, every cgroup named once.
pub fn parse_tenants(guarantee: &[String], throttle: &[String]) -> ExpResult<Tenants> {
    if guarantee.is_empty() || throttle.is_empty() {
        return Err(format!(
            "{} missing: allowed one or more --guarantee CGROUP=IOPS and one or more --throttle CGROUP",
            if guarantee.is_empty() {
                "--guarantee"
            } else {
                "--throttle"
            }
        )
        .into());
    }
    let mut tenants = Tenants {
        guaranteed: Vec::new(),
        throttled: Vec::new(),
    };
    // (key, option, the value as given) of every tenant so far.
    let mut seen: Vec<(String, &str, &str)> = Vec::new();
    let named = guarantee
        .iter()
        .map(|g| ("--guarantee", g))
        .chain(throttle.iter().map(|t| ("--throttle", t)));
    for (option, given) in named {
        let name = if option == "--guarantee" {
            let (name, iops) = given
                .rsplit_once('=')
                .and_then(|(n, v)| Some((n, v.trim().parse::<f64>().ok()?)))
                .filter(|(_, v)| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    format!(
                        "--guarantee {given:?}: expected CGROUP=IOPS with IOPS a number ≥ 0, e.g. --guarantee tenantA=100"
                    )
                })?;
            tenants.guaranteed.push((name.to_string(), iops));
            name
        } else {
            tenants.throttled.push(given.clone());
            given.as_str()
        };
        let key = cgroup_key(name);
        if key.is_empty() {
            return Err(format!(
                "{option} {given:?}: empty cgroup path; allowed: a path relative to the hierarchy root, e.g. tenantA"
            )
            .into());
        }
        if let Some((_, other, other_given)) = seen.iter().find(|(k, _, _)| *k == key) {
            return Err(if *other == option {
                format!(
                    "{option} {given:?}: cgroup {key:?} is named twice ({other} {other_given:?} and {option} {given:?}); allowed: each cgroup once"
                )
            } else {
                format!(
                    "{option} {given:?}: cgroup {key:?} is also given as {other} {other_given:?}; allowed: a tenant is either guaranteed or throttled, not both"
                )
            }
            .into());
        }
        seen.push((key, option, given));
    }
    Ok(tenants)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interface {
    V1,
    V2,
}

/// A tenant's cgroup and how to read and throttle it.
struct Cgroup {
    dir: PathBuf,
    interface: Interface,
}

impl Cgroup {
    fn stats_file(&self) -> PathBuf {
        match self.interface {
            Interface::V2 => self.dir.join("io.stat"),
            Interface::V1 => self.dir.join("blkio.throttle.io_serviced"),
        }
    }

    fn ios(&self, major: u32, minor: u32) -> ExpResult<(u64, u64)> {
        let path = self.stats_file();
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(match self.interface {
            Interface::V2 => parse_io_stat(&text, major, minor),
            Interface::V1 => parse_io_serviced(&text, major, minor),
        })
    }

    /// Sets (or with None removes) the read and write IOPS limits.
    fn limit(&self, major: u32, minor: u32, iops: Option<(u64, u64)>) -> ExpResult {
        let write = |file: &str, text: String| -> ExpResult {
            let path = self.dir.join(file);
            fs::write(&path, &text).map_err(|e| {
                format!("{}: cannot write {:?}: {e}", path.display(), text.trim()).into()
            })
        };
        match (self.interface, iops) {
            (Interface::V2, Some((r, w))) => {
                write("io.max", format!("{major}:{minor} riops={r} wiops={w}\n"))
            }
            (Interface::V2, None) => {
                write("io.max", format!("{major}:{minor} riops=max wiops=max\n"))
            }
            (Interface::V1, Some((r, w))) => {
                write(
                    "blkio.throttle.read_iops_device",
                    format!("{major}:{minor} {r}\n"),
                )?;
                write(
                    "blkio.throttle.write_iops_device",
                    format!("{major}:{minor} {w}\n"),
                )
            }
            // 0 removes a v1 rule.
            (Interface::V1, None) => {
                write(
                    "blkio.throttle.read_iops_device",
                    format!("{major}:{minor} 0\n"),
                )?;
                write(
                    "blkio.throttle.write_iops_device",
                    format!("{major}:{minor} 0\n"),
                )
            }
        }
    }
}

/// The cgroup hierarchy to use: (interface, root directory).
fn find_hierarchy(choice: CgroupChoice, root: Option<&Path>) -> ExpResult<(Interface, PathBuf)> {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut v2 = None;
    let mut v1 = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let dir = PathBuf::from(f[1].replace("\\040", " "));
        if f[2] == "cgroup2" && v2.is_none() {
            let controllers =
                fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "io") {
                v2 = Some(dir);
            }
        } else if f[2] == "cgroup" && f[3].split(',').any(|o| o == "blkio") && v1.is_none() {
            v1 = Some(dir);
        }
    }
    if let Some(root) = root {
        let interface = match choice {
            CgroupChoice::V1 => Interface::V1,
            CgroupChoice::V2 => Interface::V2,
            CgroupChoice::Auto if root.join("cgroup.controllers").exists() => Interface::V2,
            CgroupChoice::Auto => Interface::V1,
        };
        return Ok((interface, root.to_path_buf()));
    }
    let found = match choice {
        CgroupChoice::V2 => v2.map(|d| (Interface::V2, d)),
        CgroupChoice::V1 => v1.map(|d| (Interface::V1, d)),
        CgroupChoice::Auto => v2
            .map(|d| (Interface::V2, d))
            .or(v1.map(|d| (Interface::V1, d))),
    };
    found.ok_or_else(|| {
        format!(
            "no cgroup IO throttling interface: {} (looked in /proc/self/mounts for {}); allowed: cgroup v2 with the `io` controller enabled, or a cgroup v1 `blkio` hierarchy",
            match choice {
                CgroupChoice::V2 => "no cgroup2 mount lists `io` in cgroup.controllers",
                CgroupChoice::V1 => "no cgroup v1 `blkio` mount",
                CgroupChoice::Auto => "neither a cgroup2 mount with the `io` controller nor a cgroup v1 `blkio` mount",
            },
            match choice {
                CgroupChoice::V2 => "cgroup2",
                CgroupChoice::V1 => "cgroup,blkio",
                CgroupChoice::Auto => "cgroup2 and cgroup,blkio",
            }
        )
        .into()
    })
}

fn open_cgroup(interface: Interface, root: &Path, name: &str, option: &str) -> ExpResult<Cgroup> {
    let rel = name.trim_start_matches('/');
    if rel.is_empty() || rel.split('/').any(|p| p == "..") {
        return Err(format!(
            "{option} {name:?}: not a cgroup path; allowed: a path relative to {} without `..`",
            root.display()
        )
        .into());
    }
    let dir = root.join(rel);
    if !dir.is_dir() {
        return Err(format!(
            "{option} {name:?}: no cgroup {} (cgroup {}); create it (mkdir) and move the tenant's processes into its cgroup.procs",
            dir.display(),
            if interface == Interface::V2 { "v2" } else { "v1 blkio" }
        )
        .into());
    }
    let cg = Cgroup { dir, interface };
    let needed: &[&str] = match interface {
        Interface::V2 => &["io.max", "io.stat"],
        Interface::V1 => &[
            "blkio.throttle.read_iops_device",
            "blkio.throttle.write_iops_device",
            "blkio.throttle.io_serviced",
        ],
    };
    for f in needed {
        if !cg.dir.join(f).exists() {
            return Err(format!(
                "{option} {name:?}: {} has no {f}; {}",
                cg.dir.display(),
                if interface == Interface::V2 {
                    "enable the io controller for it: echo +io > PARENT/cgroup.subtree_control"
                } else {
                    "the kernel lacks blk-throttle (CONFIG_BLK_DEV_THROTTLING)"
                }
            )
            .into());
        }
    }
    Ok(cg)
}

/// (major, minor) and /proc/diskstats name of a block device path or name.
fn resolve_device(device: &str) -> ExpResult<(u32, u32)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let path = if device.contains('/') {
        PathBuf::from(device)
    } else {
        Path::new("/dev").join(device)
    };
    let meta = fs::metadata(&path).map_err(|e| {
        format!(
            "--device {device}: {}: {e}; allowed: a block device such as /dev/sdb or loop0 (see /proc/diskstats)",
            path.display()
        )
    })?;
    if !meta.file_type().is_block_device() {
        return Err(format!(
            "--device {device}: {} is not a block device",
            path.display()
        )
        .into());
    }
    let rdev = meta.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Writes the throttled tenants' limits and removes every one it wrote
/// when dropped: normal end, error or panic.
struct LimitGuard<'a> {
    cgroups: &'a [Cgroup],
    major: u32,
    minor: u32,
    /// Whether tenant i's limit may be set (marked before the write, so a
    /// write that failed halfway is undone too).
    set: Vec<bool>,
}

impl<'a> LimitGuard<'a> {
    fn new(cgroups: &'a [Cgroup], major: u32, minor: u32) -> Self {
        LimitGuard {
            cgroups,
            major,
            minor,
            set: vec![false; cgroups.len()],
        }
    }

    /// Sets throttled tenant `i`'s (read, write) IOPS limits.
    fn limit(&mut self, i: usize, rw: (u64, u64)) -> ExpResult {
        self.set[i] = true;
        self.cgroups[i].limit(self.major, self.minor, Some(rw))
    }
}

impl Drop for LimitGuard<'_> {
    fn drop(&mut self) {
        for (cgroup, set) in self.cgroups.iter().zip(&self.set) {
            if !set {
                continue;
            }
            match cgroup.limit(self.major, self.minor, None) {
                Err(e) => eprintln!(
                    "tierlab qos: warning: could not remove the limit of {}: {e}",
                    cgroup.dir.display()
                ),
                Ok(()) => eprintln!(
                    "tierlab qos: removed the IOPS limit of {}",
                    cgroup.dir.display()
                ),
            }
        }
    }
}

/// The totals' columns (one guaranteed and one throttled tenant: the whole
/// log). `c_*`, `d_*`, `big_c_*`: the lowering's c, d and C (docs/qos.md,
/// point 2), filled on `lowered` samples only.
const LOG_HEADER: &str = "time_s,elapsed_s,util_pct,r_s,w_s,iops,a_iops,b_iops,a_target_iops,busy_pct_per_iops,saturated,saturated_in_window,saturated_samples_total,target_busy_pct,event,c_busy_pct_per_iops,d_busy_pct_per_iops,big_c_total_iops,extra_cut_iops,b_cap_iops,b_riops,b_wiops";
/// Columns of [`LOG_HEADER`].
const LOG_TOTAL_COLUMNS: usize = 22;

/// The log's header: the totals, then per guaranteed tenant i (1-based, in
/// the order of the --guarantee options) `ai_iops,ai_target_iops`, then per
/// throttled tenant `bi_iops,bi_cap_iops,bi_riops,bi_wiops`.
fn log_header(guaranteed: usize, throttled: usize) -> String {
    let mut h = LOG_HEADER.to_string();
    for i in 1..=guaranteed {
        h += &format!(",a{i}_iops,a{i}_target_iops");
    }
    for i in 1..=throttled {
        h += &format!(",b{i}_iops,b{i}_cap_iops,b{i}_riops,b{i}_wiops");
    }
    h
}

/// A guaranteed tenant in one sample: IOPS, guarantee.
#[derive(Clone, Copy, Debug, PartialEq)]
struct GuaranteedRow {
    iops: f64,
    target_iops: f64,
}

/// A throttled tenant in one sample: IOPS, its share of B's cap, the
/// (read, write) limits written (None: not capped).
#[derive(Clone, Copy, Debug, PartialEq)]
struct ThrottledRow {
    iops: f64,
    cap_iops: Option<f64>,
    limits: Option<(u64, u64)>,
}

/// One log line (no newline), the columns of [`log_header`].
fn log_row(
    d: &Decision,
    r_s: f64,
    w_s: f64,
    elapsed_s: f64,
    a: &[GuaranteedRow],
    b: &[ThrottledRow],
) -> String {
    let i = &d.input;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let written: Vec<(u64, u64)> = b.iter().filter_map(|t| t.limits).collect();
    let (r, w) = if written.is_empty() {
        (String::new(), String::new())
    } else {
        (
            written.iter().map(|l| l.0).sum::<u64>().to_string(),
            written.iter().map(|l| l.1).sum::<u64>().to_string(),
        )
    };
    let mut f = vec![
        (i.time_ns as f64 / 1e9).to_string(),
        elapsed_s.to_string(),
        d.util_pct.to_string(),
        r_s.to_string(),
        w_s.to_string(),
        i.total_iops.to_string(),
        i.a_iops.to_string(),
        i.b_iops.to_string(),
        i.a_target_iops.to_string(),
        opt(d.busy_pct_per_iops),
        (d.saturated as u8).to_string(),
        d.saturated_in_window.to_string(),
        d.saturated_total.to_string(),
        d.target_busy_pct.to_string(),
        d.event.name().to_string(),
    ];
    match d.event {
        Event::Lowered {
            c_busy_pct_per_iops,
            d_busy_pct_per_iops,
            c_total_iops,
        } => f.extend(
            [c_busy_pct_per_iops, d_busy_pct_per_iops, c_total_iops].map(|v| v.to_string()),
        ),
        _ => f.extend([String::new(), String::new(), String::new()]),
    }
    f.extend([d.extra_cut_iops.to_string(), opt(d.b_cap_iops), r, w]);
    debug_assert_eq!(f.len(), LOG_TOTAL_COLUMNS);
    for t in a {
        f.push(t.iops.to_string());
        f.push(t.target_iops.to_string());
    }
    for t in b {
        f.push(t.iops.to_string());
        f.push(opt(t.cap_iops));
        let (r, w) = t.limits.map_or((String::new(), String::new()), |(r, w)| {
            (r.to_string(), w.to_string())
        });
        f.push(r);
        f.push(w);
    }
    f.join(",")
}

fn read_diskstats(major: u32, minor: u32, device: &str) -> ExpResult<DiskStats> {
    let text =
        fs::read_to_string("/proc/diskstats").map_err(|e| format!("/proc/diskstats: {e}"))?;
    parse_diskstats(&text, major, minor).ok_or_else(|| {
        format!("--device {device}: {major}:{minor} is not in /proc/diskstats").into()
    })
}

pub fn run(cmd: QosCommand) -> ExpResult {
    match cmd {
        QosCommand::Run(args) => run_controller(args),
    }
}

/// The controller's keys from their options (each key is the option of
/// that name with dashes; the interval is `--interval-s`).
fn controller_params(args: &QosRunArgs) -> BusyRateParams {
    BusyRateParams {
        sample_interval_s: args.interval_s,
        initial_target_busy_pct: args.initial_target_busy_pct,
        lowering_gain: args.lowering_gain,
        saturation_window_samples: args.saturation_window_samples,
        saturation_trigger_samples: args.saturation_trigger_samples,
        lowering_needs_full_window: args.lowering_needs_full_window,
        saturated_extra_cut: args.saturated_extra_cut,
        reset_util_pct: args.reset_util_pct,
        reset_bpi_change: args.reset_bpi_change,
        min_throttled_iops: args.min_throttled_iops,
        saturated_util_pct: args.saturated_util_pct,
        min_target_busy_pct: args.min_target_busy_pct,
    }
}

fn run_controller(args: QosRunArgs) -> ExpResult {
    let tenants = parse_tenants(&args.guarantee, &args.throttle)?;
    if !(args.interval_s.is_finite() && args.interval_s >= 0.1) {
        return Err(format!("--interval-s {}: allowed ≥ 0.1 s", args.interval_s).into());
    }
    if let Some(d) = args.duration_s {
        if !(d.is_finite() && d > 0.0) {
            return Err(format!("--duration-s {d}: allowed a positive number of seconds").into());
        }
    }
    let params = controller_params(&args);
    let mut controller = BusyRateController::new(params).map_err(|e| {
        format!("{e} (each key is the option of that name with dashes, e.g. --lowering-gain)")
    })?;
    // Root before anything else: every later step needs it.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(format!(
            "tierlab qos run must run as root to write cgroup IO limits (effective uid {euid}); allowed: root (sudo)"
        )
        .into());
    }
    let (major, minor) = resolve_device(&args.device)?;
    let (interface, root) = find_hierarchy(args.cgroup, args.cgroup_root.as_deref())?;
    let guaranteed = tenants
        .guaranteed
        .iter()
        .map(|(name, _)| open_cgroup(interface, &root, name, "--guarantee"))
        .collect::<ExpResult<Vec<_>>>()?;
    let targets: Vec<f64> = tenants.guaranteed.iter().map(|(_, t)| *t).collect();
    // The controller guarantees the sum: a_busy = Σ a_i · busy_pct_per_iops.
    let a_target: f64 = targets.iter().sum();
    let throttled = tenants
        .throttled
        .iter()
        .map(|name| open_cgroup(interface, &root, name, "--throttle"))
        .collect::<ExpResult<Vec<_>>>()?;
    let mut log = match &args.log {
        Some(p) => {
            let mut f = fs::File::create(p).map_err(|e| format!("--log {}: {e}", p.display()))?;
            writeln!(f, "{}", log_header(guaranteed.len(), throttled.len()))?;
            Some(f)
        }
        None => None,
    };
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let list = |cgs: &[Cgroup], tag: &str, targets: Option<&[f64]>| -> String {
        cgs.iter()
            .enumerate()
            .map(|(i, c)| {
                let who = if cgs.len() > 1 {
                    format!("{tag}{} ", i + 1)
                } else {
                    String::new()
                };
                match targets {
                    Some(t) => format!("{who}{} ({} IOPS)", c.dir.display(), t[i]),
                    None => format!("{who}{}", c.dir.display()),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "tierlab qos: device {} ({major}:{minor}), cgroup {}: guarantee {a_target} IOPS to {}, throttle {}; sampling every {} s",
        args.device,
        if interface == Interface::V2 {
            "v2 io.max"
        } else {
            "v1 blkio.throttle"
        },
        list(&guaranteed, "a", Some(&targets)),
        list(&throttled, "b", None),
        args.interval_s
    );
    let mut guard = LimitGuard::new(&throttled, major, minor);
    let read_all = |cgs: &[Cgroup]| -> ExpResult<Vec<(u64, u64)>> {
        cgs.iter().map(|c| c.ios(major, minor)).collect()
    };
    let start = Instant::now();
    let mut disk = read_diskstats(major, minor, &args.device)?;
    let mut a_ios = read_all(&guaranteed)?;
    let mut b_ios = read_all(&throttled)?;
    let mut last = Instant::now();
    let interval = Duration::from_secs_f64(args.interval_s);
    let mut next = last + interval;
    loop {
        // Sleep in short steps so a signal ends the run promptly.
        while Instant::now() < next && !STOP.load(Ordering::SeqCst) {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(100)));
        }
        if STOP.load(Ordering::SeqCst) {
            eprintln!("tierlab qos: signal received, stopping");
            break;
        }
        let now = Instant::now();
        let elapsed_s = (now - last).as_secs_f64();
        let disk_now = read_diskstats(major, minor, &args.device)?;
        let a_now = read_all(&guaranteed)?;
        let b_now = read_all(&throttled)?;
        let (util_pct, iops) = iostat(&disk, &disk_now, elapsed_s);
        let r_s = disk_now
            .reads_completed
            .saturating_sub(disk.reads_completed) as f64
            / elapsed_s;
        let w_s = disk_now
            .writes_completed
            .saturating_sub(disk.writes_completed) as f64
            / elapsed_s;
        let delta =
            |x: &(u64, u64), y: &(u64, u64)| (y.0.saturating_sub(x.0), y.1.saturating_sub(x.1));
        let a_rw: Vec<(u64, u64)> = a_ios.iter().zip(&a_now).map(|(x, y)| delta(x, y)).collect();
        let b_rw: Vec<(u64, u64)> = b_ios.iter().zip(&b_now).map(|(x, y)| delta(x, y)).collect();
        let per_s = |(r, w): &(u64, u64)| (r + w) as f64 / elapsed_s;
        let a_each: Vec<f64> = a_rw.iter().map(per_s).collect();
        let b_each: Vec<f64> = b_rw.iter().map(per_s).collect();
        let decision = controller.step(SampleInput {
            time_ns: (now - start).as_nanos() as u64,
            util_pct,
            total_iops: iops,
            a_iops: a_each.iter().sum(),
            b_iops: b_each.iter().sum(),
            a_target_iops: a_target,
        });
        // B's cap is the throttled tenants' total budget.
        let shares = decision
            .b_cap_iops
            .map(|cap| split_budget(cap, &b_each, args.min_throttled_iops));
        let mut b_rows = Vec::with_capacity(throttled.len());
        for (i, &iops) in b_each.iter().enumerate() {
            let cap_iops = shares.as_ref().map(|s| s[i]);
            let limits =
                cap_iops.map(|c| split_cap(c, b_rw[i].0, b_rw[i].1, args.min_throttled_iops));
            if let Some(rw) = limits {
                guard.limit(i, rw)?;
            }
            b_rows.push(ThrottledRow {
                iops,
                cap_iops,
                limits,
            });
        }
        let a_rows: Vec<GuaranteedRow> = a_each
            .iter()
            .zip(&targets)
            .map(|(&iops, &target_iops)| GuaranteedRow { iops, target_iops })
            .collect();
        report(
            &decision,
            r_s,
            w_s,
            elapsed_s,
            &a_rows,
            &b_rows,
            log.as_mut(),
        )?;
        disk = disk_now;
        a_ios = a_now;
        b_ios = b_now;
        last = now;
        next += interval;
        if args
            .duration_s
            .is_some_and(|d| (now - start).as_secs_f64() >= d - 1e-3)
        {
            break;
        }
    }
    drop(guard);
    Ok(())
}

fn report(
    d: &Decision,
    r_s: f64,
    w_s: f64,
    elapsed_s: f64,
    a: &[GuaranteedRow],
    b: &[ThrottledRow],
    log: Option<&mut fs::File>,
) -> ExpResult {
    let i = &d.input;
    // Several tenants: each one's IOPS (and throttled ones' caps) too.
    let each = if a.len() > 1 || b.len() > 1 {
        let a_each: Vec<String> = a.iter().map(|t| format!("{:.1}", t.iops)).collect();
        let b_each: Vec<String> = b
            .iter()
            .map(|t| {
                format!(
                    "{:.1}/{}",
                    t.iops,
                    t.cap_iops.map_or("-".into(), |c| format!("{c:.1}"))
                )
            })
            .collect();
        format!(" A [{}] B [{}]", a_each.join(" "), b_each.join(" "))
    } else {
        String::new()
    };
    eprintln!(
        "t={:7.1}s util {:6.2} % iops {:8.1} A {:7.1}/{:.0} B {:7.1} X {:5.1} % {} B cap {}{each}",
        i.time_ns as f64 / 1e9,
        d.util_pct,
        i.total_iops,
        i.a_iops,
        i.a_target_iops,
        i.b_iops,
        d.target_busy_pct,
        d.event.name(),
        d.b_cap_iops.map_or("-".into(), |c| format!("{c:.1}"))
    );
    if let Some(f) = log {
        writeln!(f, "{}", log_row(d, r_s, w_s, elapsed_s, a, b))?;
        f.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISKSTATS: &str = "   7       0 loop0 120 0 960 50 30 0 240 20 2 1500 70 0 0 0 0 0 0
 254       0 vda 710116 21598 23012234 1277127 171460 293075 325013664 1109299 0 137184 2427833 232655 0 292571792 41209 5029 196
";

    #[test]
    fn diskstats_and_iostat_by_hand() {
        let s = parse_diskstats(DISKSTATS, 7, 0).unwrap();
        assert_eq!(
            s,
            DiskStats {
                reads_completed: 120,
                writes_completed: 30,
                io_ticks_ms: 1500
            }
        );
        assert_eq!(
            parse_diskstats(DISKSTATS, 254, 0).unwrap().io_ticks_ms,
            137184
        );
        assert!(parse_diskstats(DISKSTATS, 7, 1).is_none());
        // 2 s later: +1800 ms busy, +300 reads, +100 writes: 90 %, 200 IOPS.
        let later = DiskStats {
            reads_completed: 420,
            writes_completed: 130,
            io_ticks_ms: 3300,
        };
        let (util, iops) = iostat(&s, &later, 2.0);
        assert!((util - 90.0).abs() < 1e-9 && (iops - 200.0).abs() < 1e-9);
        // Busy longer than the interval (ms rounding): clamped as iostat does.
        let (util, _) = iostat(
            &s,
            &DiskStats {
                io_ticks_ms: 3600,
                ..later
            },
            2.0,
        );
        assert_eq!(util, 100.0);
    }

    #[test]
    fn cgroup_stats_by_hand() {
        let v2 = "254:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n7:0 rbytes=4096 wbytes=8192 rios=11 wios=22 dbytes=0 dios=0\n";
        assert_eq!(parse_io_stat(v2, 7, 0), (11, 22));
        assert_eq!(parse_io_stat(v2, 7, 1), (0, 0));
        let v1 = "7:0 Read 15\n7:0 Write 5\n7:0 Sync 20\n7:0 Async 0\n7:0 Discard 0\n7:0 Total 20\n254:0 Read 9\nTotal 29\n";
        assert_eq!(parse_io_serviced(v1, 7, 0), (15, 5));
        assert_eq!(parse_io_serviced(v1, 254, 0), (9, 0));
    }

    #[test]
    fn caps_split_by_read_share_with_a_floor() {
        assert_eq!(split_cap(100.0, 75, 25, 1.0), (75, 25));
        assert_eq!(split_cap(100.0, 0, 0, 1.0), (50, 50));
        assert_eq!(split_cap(40.0, 10, 0, 1.0), (40, 1));
        assert_eq!(split_cap(0.4, 1, 1, 1.0), (1, 1));
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn assert_shares(got: Vec<f64>, want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-9, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn budget_split_by_hand() {
        // One tenant gets the whole budget, whatever it did.
        assert_shares(split_budget(100.0, &[30.0], 1.0), &[100.0]);
        assert_shares(split_budget(100.0, &[0.0], 1.0), &[100.0]);
        assert_shares(split_budget(100.0, &[500.0], 1.0), &[100.0]);
        // Two greedy tenants (demands 120 and 140 > 50): even.
        assert_shares(split_budget(100.0, &[60.0, 70.0], 1.0), &[50.0, 50.0]);
        // A light one: demand 20 ≤ 50 gets 20, the other the remaining 80.
        assert_shares(split_budget(100.0, &[10.0, 80.0], 1.0), &[20.0, 80.0]);
        // Both light (demands 20 and 10): the 70 left over is added evenly.
        assert_shares(split_budget(100.0, &[10.0, 5.0], 1.0), &[55.0, 45.0]);
        // An idle set: demands at the floor, the rest evenly: 1 + 87/3.
        assert_shares(
            split_budget(90.0, &[0.0, 0.0, 0.0], 1.0),
            &[30.0, 30.0, 30.0],
        );
        // Water-filling over three: 10 ≤ 120/3; then 60 > 110/2 = 55.
        assert_shares(
            split_budget(120.0, &[5.0, 30.0, 100.0], 1.0),
            &[10.0, 55.0, 55.0],
        );
        // An idle tenant's demand is the floor: 10, the other gets 90.
        assert_shares(split_budget(100.0, &[0.0, 100.0], 10.0), &[10.0, 90.0]);
        // A tenant at more than half its share is not shrunk: 2 × 45 > 50.
        assert_shares(split_budget(100.0, &[45.0, 50.0], 1.0), &[50.0, 50.0]);
        // A budget below n × floor: each gets the floor (more than the budget).
        assert_shares(split_budget(1.5, &[5.0, 5.0], 1.0), &[1.0, 1.0]);
        assert_shares(split_budget(0.0, &[0.0, 3.0], 1.0), &[1.0, 1.0]);
        // Order does not matter.
        assert_shares(
            split_budget(120.0, &[100.0, 5.0, 30.0], 1.0),
            &[55.0, 10.0, 55.0],
        );
        assert!(split_budget(10.0, &[], 1.0).is_empty());
    }

    #[test]
    fn budget_split_adds_up_to_the_budget() {
        for budget in [2.0, 7.5, 33.0, 100.0, 1000.0] {
            for last in [
                vec![0.0, 0.0],
                vec![1.0, 200.0, 3.0],
                vec![50.0, 50.0, 50.0, 50.0],
                vec![0.5, 0.0, 9.0, 400.0, 12.0],
            ] {
                let s = split_budget(budget, &last, 0.4);
                let total: f64 = s.iter().sum();
                assert!((total - budget).abs() < 1e-9, "{budget} {last:?}: {s:?}");
                assert!(s.iter().all(|x| *x >= 0.4), "{s:?}");
            }
        }
    }

    #[test]
    fn tenants_parsed_and_validated() {
        // One each, as before.
        let t = parse_tenants(&strings(&["tenantA=100"]), &strings(&["tenantB"])).unwrap();
        assert_eq!(
            t,
            Tenants {
                guaranteed: vec![("tenantA".into(), 100.0)],
                throttled: vec!["tenantB".into()],
            }
        );
        // Several, in order; `=` inside a name is kept (the last one splits).
        let t = parse_tenants(
            &strings(&["a1=30", "x/a=2=12.5"]),
            &strings(&["b1", "b2", "/c/d"]),
        )
        .unwrap();
        assert_eq!(
            t.guaranteed,
            vec![("a1".to_string(), 30.0), ("x/a=2".to_string(), 12.5)]
        );
        assert_eq!(t.throttled, strings(&["b1", "b2", "/c/d"]));
        let err = |g: &[&str], b: &[&str]| {
            parse_tenants(&strings(g), &strings(b))
                .unwrap_err()
                .to_string()
        };
        // Named twice under one option (also as another spelling of the path).
        let e = err(&["a=10", "/a/=20"], &["b"]);
        assert!(
            e.starts_with("--guarantee \"/a/=20\": cgroup \"a\" is named twice")
                && e.contains("--guarantee \"a=10\""),
            "{e}"
        );
        let e = err(&["a=10"], &["b", "./b"]);
        assert!(
            e.starts_with("--throttle \"./b\": cgroup \"b\" is named twice")
                && e.contains("--throttle \"b\""),
            "{e}"
        );
        // Guaranteed and throttled.
        let e = err(&["a=10", "g/x=5"], &["b", "g//x"]);
        assert!(
            e.starts_with(
                "--throttle \"g//x\": cgroup \"g/x\" is also given as --guarantee \"g/x=5\""
            ) && e.contains("either guaranteed or throttled"),
            "{e}"
        );
        // Bad values.
        let e = err(&["a=-1"], &["b"]);
        assert!(
            e.starts_with("--guarantee \"a=-1\": expected CGROUP=IOPS"),
            "{e}"
        );
        let e = err(&["a"], &["b"]);
        assert!(
            e.starts_with("--guarantee \"a\": expected CGROUP=IOPS"),
            "{e}"
        );
        let e = err(&["a=NaN"], &["b"]);
        assert!(e.starts_with("--guarantee \"a=NaN\": expected"), "{e}");
        let e = err(&["/=5"], &["b"]);
        assert!(
            e.starts_with("--guarantee \"/=5\": empty cgroup path"),
            "{e}"
        );
        let e = err(&["a=5"], &[""]);
        assert!(e.starts_with("--throttle \"\": empty cgroup path"), "{e}");
        let e = err(&[], &["b"]);
        assert!(e.starts_with("--guarantee missing"), "{e}");
        let e = err(&["a=1"], &[]);
        assert!(e.starts_with("--throttle missing"), "{e}");
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        qos: QosCommand,
    }

    fn parse_cli(args: &[&str]) -> Result<QosRunArgs, clap::Error> {
        use clap::Parser as _;
        let cli = Cli::try_parse_from(["qos"].iter().chain(args))?;
        let QosCommand::Run(a) = cli.qos;
        Ok(a)
    }

    /// The fewest options `qos run` accepts.
    const MINIMAL: [&str; 7] = [
        "run",
        "--device",
        "loop0",
        "--guarantee",
        "a=5",
        "--throttle",
        "b",
    ];

    #[test]
    fn options_repeat() {
        let a = parse_cli(&MINIMAL).unwrap();
        assert_eq!(
            (a.guarantee, a.throttle),
            (strings(&["a=5"]), strings(&["b"]))
        );
        let a = parse_cli(&[
            "run",
            "--device=loop0",
            "--guarantee=a1=5",
            "--throttle=b1",
            "--guarantee",
            "a2=7",
            "--throttle",
            "b2",
        ])
        .unwrap();
        assert_eq!(a.guarantee, strings(&["a1=5", "a2=7"]));
        assert_eq!(a.throttle, strings(&["b1", "b2"]));
        // The controller's keys: defaults, and the one flag among them.
        let full = |extra: &[&str]| {
            let mut args = MINIMAL.to_vec();
            args.extend_from_slice(extra);
            controller_params(&parse_cli(&args).unwrap())
        };
        assert_eq!(full(&[]), BusyRateParams::default());
        let p = full(&["--lowering-needs-full-window", "--lowering-gain", "0.6"]);
        assert!(
            p.lowering_needs_full_window && p.lowering_gain == 0.6,
            "{p:?}"
        );
        // Both are required.
        assert!(parse_cli(&["run", "--device", "loop0", "--throttle", "b"]).is_err());
        assert!(parse_cli(&["run", "--device", "loop0", "--guarantee", "a=1"]).is_err());
    }

    /// A fake cgroup directory under `root` with the files `interface` needs.
    fn fake_cgroup(root: &Path, name: &str, interface: Interface) -> Cgroup {
        let dir = root.join(name);
        fs::create_dir_all(&dir).unwrap();
        let files: &[&str] = match interface {
            Interface::V2 => &["io.max", "io.stat"],
            Interface::V1 => &[
                "blkio.throttle.read_iops_device",
                "blkio.throttle.write_iops_device",
                "blkio.throttle.io_serviced",
            ],
        };
        for f in files {
            fs::write(dir.join(f), "").unwrap();
        }
        open_cgroup(interface, root, name, "--throttle").unwrap()
    }

    fn read(cg: &Cgroup, f: &str) -> String {
        fs::read_to_string(cg.dir.join(f)).unwrap()
    }

    #[test]
    fn v2_limits_written_and_removed_by_the_guard() {
        let root = tempfile::tempdir().unwrap();
        let cgs = vec![
            fake_cgroup(root.path(), "b1", Interface::V2),
            fake_cgroup(root.path(), "b2", Interface::V2),
            fake_cgroup(root.path(), "b3", Interface::V2),
        ];
        {
            let mut guard = LimitGuard::new(&cgs, 7, 3);
            guard.limit(0, (12, 4)).unwrap();
            guard.limit(1, (1, 30)).unwrap();
            assert_eq!(read(&cgs[0], "io.max"), "7:3 riops=12 wiops=4\n");
            assert_eq!(read(&cgs[1], "io.max"), "7:3 riops=1 wiops=30\n");
            // b3 never limited: the guard leaves it alone.
        }
        assert_eq!(read(&cgs[0], "io.max"), "7:3 riops=max wiops=max\n");
        assert_eq!(read(&cgs[1], "io.max"), "7:3 riops=max wiops=max\n");
        assert_eq!(read(&cgs[2], "io.max"), "");
        // Counts from io.stat.
        fs::write(
            cgs[0].dir.join("io.stat"),
            "7:3 rbytes=4096 wbytes=0 rios=9 wios=2 dbytes=0 dios=0\n",
        )
        .unwrap();
        assert_eq!(cgs[0].ios(7, 3).unwrap(), (9, 2));
    }

    #[test]
    fn v1_limits_written_and_removed_by_the_guard_on_an_error() {
        let root = tempfile::tempdir().unwrap();
        let cgs = vec![
            fake_cgroup(root.path(), "t/b1", Interface::V1),
            fake_cgroup(root.path(), "t/b2", Interface::V1),
        ];
        let run = || -> ExpResult {
            let mut guard = LimitGuard::new(&cgs, 8, 16);
            guard.limit(0, (20, 10))?;
            guard.limit(1, (5, 6))?;
            assert_eq!(
                read(&cgs[0], "blkio.throttle.read_iops_device"),
                "8:16 20\n"
            );
            assert_eq!(
                read(&cgs[0], "blkio.throttle.write_iops_device"),
                "8:16 10\n"
            );
            assert_eq!(read(&cgs[1], "blkio.throttle.read_iops_device"), "8:16 5\n");
            assert_eq!(
                read(&cgs[1], "blkio.throttle.write_iops_device"),
                "8:16 6\n"
            );
            Err("a later sample failed".into())
        };
        assert!(run().is_err());
        // 0 removes a v1 rule: every tenant's, read and write.
        for cg in &cgs {
            assert_eq!(read(cg, "blkio.throttle.read_iops_device"), "8:16 0\n");
            assert_eq!(read(cg, "blkio.throttle.write_iops_device"), "8:16 0\n");
        }
        // A write that fails halfway (the read limit written, the write
        // limit's file not writable) still leaves the tenant to the guard,
        // which removes what it can (and warns about the rest).
        let w = cgs[1].dir.join("blkio.throttle.write_iops_device");
        fs::remove_file(&w).unwrap();
        fs::create_dir(&w).unwrap();
        {
            let mut guard = LimitGuard::new(&cgs, 8, 16);
            guard.limit(0, (3, 3)).unwrap();
            assert!(guard.limit(1, (4, 4)).is_err());
            assert_eq!(guard.set, vec![true, true]);
        }
        assert_eq!(read(&cgs[0], "blkio.throttle.read_iops_device"), "8:16 0\n");
        assert_eq!(read(&cgs[1], "blkio.throttle.read_iops_device"), "8:16 0\n");
    }

    #[test]
    fn fake_cgroups_missing_files_are_errors() {
        let root = tempfile::tempdir().unwrap();
        let e = open_cgroup(Interface::V2, root.path(), "nope", "--throttle")
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("--throttle \"nope\": no cgroup"), "{e}");
        fs::create_dir(root.path().join("half")).unwrap();
        fs::write(root.path().join("half/io.stat"), "").unwrap();
        let e = open_cgroup(Interface::V2, root.path(), "half", "--guarantee")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("has no io.max") && e.contains("+io"), "{e}");
        let e = open_cgroup(Interface::V1, root.path(), "../x", "--throttle")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not a cgroup path"), "{e}");
    }

    #[test]
    fn log_rows_are_as_wide_as_the_header() {
        let mut c = BusyRateController::new(BusyRateParams {
            sample_interval_s: 2.0,
            initial_target_busy_pct: 95.0,
            lowering_gain: 0.5,
            saturation_window_samples: 10,
            saturation_trigger_samples: 3,
            saturated_extra_cut: 0.2,
            reset_util_pct: 20.0,
            reset_bpi_change: 0.1,
            min_throttled_iops: 1.0,
            saturated_util_pct: 100.0,
            min_target_busy_pct: 10.0,
            lowering_needs_full_window: false,
        })
        .unwrap();
        // util 90 % at 150 IOPS: bpi 0.6; a = 30 + 30 → B's cap (95 − 36) / 0.6.
        let d = c.step(SampleInput {
            time_ns: 2_000_000_000,
            util_pct: 90.0,
            total_iops: 150.0,
            a_iops: 50.0,
            b_iops: 100.0,
            a_target_iops: 60.0,
        });
        let cap = d.b_cap_iops.unwrap();
        assert!((cap - (95.0 - 36.0) / 0.6).abs() < 1e-9);
        let header = log_header(2, 2);
        let cols: Vec<&str> = header.split(',').collect();
        assert_eq!(LOG_HEADER.split(',').count(), LOG_TOTAL_COLUMNS);
        assert_eq!(cols.len(), LOG_TOTAL_COLUMNS + 2 * 2 + 2 * 4);
        assert_eq!(
            &cols[LOG_TOTAL_COLUMNS..],
            &[
                "a1_iops",
                "a1_target_iops",
                "a2_iops",
                "a2_target_iops",
                "b1_iops",
                "b1_cap_iops",
                "b1_riops",
                "b1_wiops",
                "b2_iops",
                "b2_cap_iops",
                "b2_riops",
                "b2_wiops"
            ]
        );
        let a = [
            GuaranteedRow {
                iops: 20.0,
                target_iops: 30.0,
            },
            GuaranteedRow {
                iops: 30.0,
                target_iops: 30.0,
            },
        ];
        let b = [
            ThrottledRow {
                iops: 80.0,
                cap_iops: Some(50.0),
                limits: Some((30, 20)),
            },
            ThrottledRow {
                iops: 20.0,
                cap_iops: Some(48.3),
                limits: Some((24, 24)),
            },
        ];
        let row = log_row(&d, 120.0, 30.0, 2.0, &a, &b);
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f.len(), cols.len());
        let at = |k: &str| f[cols.iter().position(|c| *c == k).unwrap()];
        assert_eq!((at("b_riops"), at("b_wiops")), ("54", "44"));
        assert_eq!(
            (at("a2_iops"), at("b1_cap_iops"), at("b2_wiops")),
            ("30", "50", "24")
        );
        assert_eq!(at("event"), "none");
        assert_eq!(
            (
                at("c_busy_pct_per_iops"),
                at("d_busy_pct_per_iops"),
                at("big_c_total_iops")
            ),
            ("", "", "")
        );
        // A lowering's c, d and C are logged with it.
        let mut lowered = d;
        lowered.event = Event::Lowered {
            c_busy_pct_per_iops: 0.93,
            d_busy_pct_per_iops: 0.891,
            c_total_iops: 107.0,
        };
        let row = log_row(&lowered, 120.0, 30.0, 2.0, &a, &b);
        let f: Vec<&str> = row.split(',').collect();
        let at = |k: &str| f[cols.iter().position(|c| *c == k).unwrap()];
        assert_eq!(
            (
                at("event"),
                at("c_busy_pct_per_iops"),
                at("d_busy_pct_per_iops"),
                at("big_c_total_iops")
            ),
            ("lowered", "0.93", "0.891", "107")
        );
        // Not capped yet: empty cells, same width; one tenant each: the old header.
        let none = [ThrottledRow {
            iops: 5.0,
            cap_iops: None,
            limits: None,
        }];
        let row = log_row(&d, 1.0, 1.0, 2.0, &a[..1], &none);
        assert_eq!(row.split(',').count(), log_header(1, 1).split(',').count());
        assert!(row.ends_with(",5,,,"), "{row}");
        assert!(log_header(0, 0) == LOG_HEADER);
    }
}
