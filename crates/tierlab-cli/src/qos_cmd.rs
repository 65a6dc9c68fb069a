//! `tierlab qos run`: the busy-rate IOPS guarantee (docs/qos.md) on a live
//! Linux machine. Every interval it reads /proc/diskstats for the device,
//! computes `%util` and `r/s + w/s` as `iostat -x` does, reads the two
//! tenants' IOs from their cgroups, asks the same `BusyRateController` the
//! simulator runs, and caps tenant B through the cgroup's IOPS throttle:
//! cgroup v2 `io.max` (riops/wiops) or cgroup v1
//! `blkio.throttle.{read,write}_iops_device`. Limits are removed on exit,
//! also on SIGINT/SIGTERM and on errors.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tierlab_policies::qos::{BusyRateController, BusyRateParams, Decision, SampleInput};

use crate::CliResult;

#[derive(Subcommand)]
pub enum QosCommand {
    /// Guarantee tenant A's IOPS on a block device by capping tenant B (cgroups).
    Run(QosRunArgs),
}

#[derive(Args)]
pub struct QosRunArgs {
    /// Block device shared by the tenants (/dev/sdb, /dev/loop0 or loop0).
    #[arg(long)]
    pub device: String,
    /// The guaranteed tenant, as CGROUP=IOPS (cgroup path relative to the hierarchy root).
    #[arg(long, value_name = "CGROUP=IOPS")]
    pub guarantee: String,
    /// The throttled tenant's cgroup (relative to the hierarchy root).
    #[arg(long, value_name = "CGROUP")]
    pub throttle: String,
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
    /// B's cap never goes below this, IOPS.
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

    fn ios(&self, major: u32, minor: u32) -> CliResult<(u64, u64)> {
        let path = self.stats_file();
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(match self.interface {
            Interface::V2 => parse_io_stat(&text, major, minor),
            Interface::V1 => parse_io_serviced(&text, major, minor),
        })
    }

    /// Sets (or with None removes) the read and write IOPS limits.
    fn limit(&self, major: u32, minor: u32, iops: Option<(u64, u64)>) -> CliResult {
        let write = |file: &str, text: String| -> CliResult {
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
fn find_hierarchy(choice: CgroupChoice, root: Option<&Path>) -> CliResult<(Interface, PathBuf)> {
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

fn open_cgroup(interface: Interface, root: &Path, name: &str, option: &str) -> CliResult<Cgroup> {
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
fn resolve_device(device: &str) -> CliResult<(u32, u32)> {
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

/// Removes B's limit when dropped: normal end, error or panic.
struct LimitGuard<'a> {
    cgroup: &'a Cgroup,
    major: u32,
    minor: u32,
    set: bool,
}

impl Drop for LimitGuard<'_> {
    fn drop(&mut self) {
        if self.set {
            if let Err(e) = self.cgroup.limit(self.major, self.minor, None) {
                eprintln!("tierlab qos: warning: could not remove the limit: {e}");
            } else {
                eprintln!(
                    "tierlab qos: removed the IOPS limit of {}",
                    self.cgroup.dir.display()
                );
            }
        }
    }
}

const LOG_HEADER: &str = "time_s,elapsed_s,util_pct,r_s,w_s,iops,a_iops,b_iops,a_target_iops,busy_pct_per_iops,saturated,saturated_in_window,saturated_samples_total,target_busy_pct,event,extra_cut_iops,b_cap_iops,b_riops,b_wiops\n";

fn read_diskstats(major: u32, minor: u32, device: &str) -> CliResult<DiskStats> {
    let text =
        fs::read_to_string("/proc/diskstats").map_err(|e| format!("/proc/diskstats: {e}"))?;
    parse_diskstats(&text, major, minor).ok_or_else(|| {
        format!("--device {device}: {major}:{minor} is not in /proc/diskstats").into()
    })
}

pub fn run(cmd: QosCommand) -> CliResult {
    match cmd {
        QosCommand::Run(args) => run_controller(args),
    }
}

fn run_controller(args: QosRunArgs) -> CliResult {
    let (a_name, a_target) = args
        .guarantee
        .split_once('=')
        .and_then(|(n, v)| Some((n.to_string(), v.trim().parse::<f64>().ok()?)))
        .filter(|(n, v)| !n.is_empty() && v.is_finite() && *v >= 0.0)
        .ok_or_else(|| {
            format!(
                "--guarantee {:?}: expected CGROUP=IOPS with IOPS a number ≥ 0, e.g. --guarantee tenantA=100",
                args.guarantee
            )
        })?;
    if !(args.interval_s.is_finite() && args.interval_s >= 0.1) {
        return Err(format!("--interval-s {}: allowed ≥ 0.1 s", args.interval_s).into());
    }
    if let Some(d) = args.duration_s {
        if !(d.is_finite() && d > 0.0) {
            return Err(format!("--duration-s {d}: allowed a positive number of seconds").into());
        }
    }
    let params = BusyRateParams {
        sample_interval_s: args.interval_s,
        initial_target_busy_pct: args.initial_target_busy_pct,
        lowering_gain: args.lowering_gain,
        saturation_window_samples: args.saturation_window_samples,
        saturation_trigger_samples: args.saturation_trigger_samples,
        saturated_extra_cut: args.saturated_extra_cut,
        reset_util_pct: args.reset_util_pct,
        reset_bpi_change: args.reset_bpi_change,
        min_throttled_iops: args.min_throttled_iops,
        saturated_util_pct: args.saturated_util_pct,
        min_target_busy_pct: args.min_target_busy_pct,
    };
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
    let a = open_cgroup(interface, &root, &a_name, "--guarantee")?;
    let b = open_cgroup(interface, &root, &args.throttle, "--throttle")?;
    let mut log = match &args.log {
        Some(p) => {
            let mut f = fs::File::create(p).map_err(|e| format!("--log {}: {e}", p.display()))?;
            f.write_all(LOG_HEADER.as_bytes())?;
            Some(f)
        }
        None => None,
    };
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    eprintln!(
        "tierlab qos: device {} ({major}:{minor}), cgroup {}: guarantee {a_target} IOPS to {}, throttle {}; sampling every {} s",
        args.device,
        if interface == Interface::V2 {
            "v2 io.max"
        } else {
            "v1 blkio.throttle"
        },
        a.dir.display(),
        b.dir.display(),
        args.interval_s
    );
    let mut guard = LimitGuard {
        cgroup: &b,
        major,
        minor,
        set: false,
    };
    let start = Instant::now();
    let mut disk = read_diskstats(major, minor, &args.device)?;
    let mut a_ios = a.ios(major, minor)?;
    let mut b_ios = b.ios(major, minor)?;
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
        let a_now = a.ios(major, minor)?;
        let b_now = b.ios(major, minor)?;
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
            |x: (u64, u64), y: (u64, u64)| (y.0.saturating_sub(x.0), y.1.saturating_sub(x.1));
        let (ar, aw) = delta(a_ios, a_now);
        let (br, bw) = delta(b_ios, b_now);
        let decision = controller.step(SampleInput {
            time_ns: (now - start).as_nanos() as u64,
            util_pct,
            total_iops: iops,
            a_iops: (ar + aw) as f64 / elapsed_s,
            b_iops: (br + bw) as f64 / elapsed_s,
            a_target_iops: a_target,
        });
        let split = decision
            .b_cap_iops
            .map(|cap| split_cap(cap, br, bw, args.min_throttled_iops));
        if let Some(rw) = split {
            b.limit(major, minor, Some(rw))?;
            guard.set = true;
        }
        report(&decision, r_s, w_s, elapsed_s, split, log.as_mut())?;
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
    split: Option<(u64, u64)>,
    log: Option<&mut fs::File>,
) -> CliResult {
    let i = &d.input;
    eprintln!(
        "t={:7.1}s util {:6.2} % iops {:8.1} A {:7.1}/{:.0} B {:7.1} X {:5.1} % {} B cap {}",
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
        let (r, w) = split.map_or((String::new(), String::new()), |(r, w)| {
            (r.to_string(), w.to_string())
        });
        writeln!(
            f,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            i.time_ns as f64 / 1e9,
            elapsed_s,
            d.util_pct,
            r_s,
            w_s,
            i.total_iops,
            i.a_iops,
            i.b_iops,
            i.a_target_iops,
            d.busy_pct_per_iops.map_or(String::new(), |v| v.to_string()),
            d.saturated as u8,
            d.saturated_in_window,
            d.saturated_total,
            d.target_busy_pct,
            d.event.name(),
            d.extra_cut_iops,
            d.b_cap_iops.map_or(String::new(), |v| v.to_string()),
            r,
            w
        )?;
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
}
