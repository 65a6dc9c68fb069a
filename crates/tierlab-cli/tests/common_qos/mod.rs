//! Harness for `tierlab qos run`'s end-to-end tests (qos_real.rs,
//! qos_real_multi.rs): what the test needs and whether it may run here,
//! an emulated device behind a loop device (`tierlab emulate` serving a
//! file through FUSE, its queue settings restored), tenant cgroups with
//! fio in them, fio's per-second IOPS logs, the controller's `--log` CSV,
//! and a `Setup` that undoes all of it on drop (processes by pid, cgroups,
//! queue settings, loop device, emulator).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// (interface, hierarchy root) as `tierlab qos run` finds it.
pub fn hierarchy() -> Option<(&'static str, PathBuf)> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 4 && f[2] == "cgroup2" {
            let c = std::fs::read_to_string(Path::new(f[1]).join("cgroup.controllers"))
                .unwrap_or_default();
            if c.split_whitespace().any(|x| x == "io") {
                return Some(("v2", PathBuf::from(f[1])));
            }
        }
    }
    mounts.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "blkio"))
            .then(|| ("v1", PathBuf::from(f[1])))
    })
}

/// Why the test cannot run here (root, fio, cgroup IO throttling and, for
/// an emulated device, losetup, loop devices and /dev/fuse), or the
/// cgroup interface and hierarchy root to use.
pub fn preconditions(emulated: bool) -> Result<(&'static str, PathBuf), String> {
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (cgroup limits, FUSE mounts and loop devices need root)".into());
    }
    if !have("fio") {
        return Err("fio is not installed (scripts/setup.sh installs it)".into());
    }
    let Some(found) = hierarchy() else {
        return Err(
            "no cgroup IO throttling (neither cgroup v2 with `io` nor cgroup v1 blkio)".into(),
        );
    };
    if emulated {
        if !have("losetup") {
            return Err("losetup is not installed (util-linux)".into());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Err("no loop devices (/dev/loop-control is missing)".into());
        }
        if !Path::new("/dev/fuse").exists() {
            return Err("no /dev/fuse (the HDD emulator serves its file through FUSE)".into());
        }
    }
    Ok(found)
}

/// Bytes free (to root) in the filesystem of `dir`.
pub fn free_bytes(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a statvfs to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return 0;
    }
    s.f_bfree as u64 * s.f_frsize as u64
}

/// Everything a test set up, undone in reverse order on drop.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub emulator: Option<Child>,
    pub mount: Option<PathBuf>,
    pub loop_dev: Option<String>,
    /// (sysfs file, original value) to write back.
    pub queue_settings: Vec<(PathBuf, String)>,
    pub cgroups: Vec<PathBuf>,
    pub children: Vec<Child>,
}

impl Setup {
    pub fn new() -> Setup {
        Setup {
            dir: tempfile::tempdir_in("/var/tmp").expect("tempdir"),
            emulator: None,
            mount: None,
            loop_dev: None,
            queue_settings: Vec::new(),
            cgroups: Vec::new(),
            children: Vec::new(),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Stops the emulator (SIGTERM: it unmounts and writes its summary).
    pub fn stop_emulator(&mut self) {
        let Some(mut emu) = self.emulator.take() else {
            return;
        };
        unsafe { libc::kill(emu.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = emu.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Ok(None) = emu.try_wait() {
            let _ = emu.kill();
            let _ = emu.wait();
        }
        if let Some(m) = self.mount.take() {
            // Only if it is still mounted (an emulator that was killed).
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&m)
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Restores the loop device's queue, detaches it and stops the
    /// emulator; returns the emulator's summary (JSON) from `summary`.
    pub fn release_device(&mut self, summary: &Path) -> String {
        for (file, value) in self.queue_settings.drain(..).rev() {
            let _ = std::fs::write(file, value);
        }
        if let Some(d) = self.loop_dev.take() {
            let _ = Command::new("losetup").args(["-d", &d]).status();
        }
        self.stop_emulator();
        std::fs::read_to_string(summary).unwrap_or_default()
    }

    /// `tierlab emulate` with `args` (the model, its keys, `--backing`…)
    /// serving `disk.img` under the test's directory, and a loop device
    /// with direct IO over it whose IO scheduler is `none` and
    /// `nr_requests` 128 (restored on drop): the device's path, or why the
    /// test cannot run here. The emulator's summary goes to `summary`.
    pub fn emulated_loop_device(
        &mut self,
        args: &[String],
        summary: &Path,
    ) -> Result<String, String> {
        let dir = self.path();
        let mnt = dir.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mut emu = Command::new(env!("CARGO_BIN_EXE_tierlab"));
        emu.arg("emulate").args(args);
        // Real-time threads keep the model's completions on time while
        // other processes load the two cores (docs/emulate.md).
        let realtime = realtime_allowed();
        if realtime {
            emu.arg("--realtime");
        }
        eprintln!("emulator threads real-time: {realtime}");
        let emu = emu
            .arg("--mount")
            .arg(&mnt)
            .arg("--summary")
            .arg(summary)
            .stdout(std::fs::File::create(dir.join("emulate.out")).unwrap())
            .stderr(std::fs::File::create(dir.join("emulate.err")).unwrap())
            .spawn()
            .expect("tierlab emulate");
        self.emulator = Some(emu);
        self.mount = Some(mnt.clone());
        let file = mnt.join("disk.img");
        let t = Instant::now();
        while !file.exists() {
            if let Some(Ok(Some(status))) = self.emulator.as_mut().map(|e| e.try_wait()) {
                let err = std::fs::read_to_string(dir.join("emulate.err")).unwrap_or_default();
                self.emulator = None;
                return Err(format!(
                    "tierlab emulate could not serve its file ({status}): {}",
                    err.trim()
                ));
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the emulator did not mount in 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = Command::new("losetup")
            .args(["--direct-io=on", "-f", "--show"])
            .arg(&file)
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        self.loop_dev = Some(dev.clone());
        let _ = Command::new("udevadm")
            .arg("settle")
            .stderr(Stdio::null())
            .status();
        // No IO scheduler in front of the model (its own queue decides)
        // and room for every tenant's IOs: the kernel's queue must not
        // be what limits the queue depth the model sees.
        let queue = PathBuf::from(format!(
            "/sys/block/{}/queue",
            dev.trim_start_matches("/dev/")
        ));
        for (name, value) in [("scheduler", "none"), ("nr_requests", "128")] {
            let file = queue.join(name);
            let old = std::fs::read_to_string(&file).unwrap_or_default();
            let old = match old.split_once('[') {
                Some((_, rest)) => rest.split(']').next().unwrap_or("").to_string(),
                None => old.trim().to_string(),
            };
            if std::fs::write(&file, value).is_ok() {
                self.queue_settings.push((file, old));
            }
        }
        Ok(dev)
    }

    /// Creates cgroup `name` under `root` (removed on drop).
    pub fn cgroup(&mut self, root: &Path, name: &str) -> Result<PathBuf, String> {
        let cg = root.join(name);
        std::fs::create_dir(&cg)
            .map_err(|e| format!("cannot create cgroup {}: {e}", cg.display()))?;
        self.cgroups.push(cg.clone());
        Ok(cg)
    }

    /// Waits for every child (fio) to end by itself, at most `limit`.
    pub fn wait_children(&mut self, limit: Duration) {
        for c in &mut self.children {
            let t = Instant::now();
            while c.try_wait().unwrap().is_none() {
                assert!(t.elapsed() < limit, "fio did not end");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // fio forks its jobs: end every process left in the test's own
        // cgroups (all started by this test), by pid.
        for cg in &self.cgroups {
            for _ in 0..50 {
                let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
                let pids: Vec<i32> = procs
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        for cg in self.cgroups.iter().rev() {
            for _ in 0..50 {
                if std::fs::remove_dir(cg).is_ok() || !cg.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        for (file, value) in self.queue_settings.iter().rev() {
            let _ = std::fs::write(file, value);
        }
        if let Some(dev) = &self.loop_dev {
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
        self.stop_emulator();
        let _ = &self.dir;
    }
}

/// `MAJ:MIN` of a block device path.
pub fn majmin(dev: &str) -> String {
    let name = std::fs::canonicalize(dev).unwrap_or_else(|_| PathBuf::from(dev));
    let name = name.file_name().unwrap().to_string_lossy().to_string();
    std::fs::read_to_string(format!("/sys/class/block/{name}/dev"))
        .unwrap_or_else(|e| panic!("{dev}: no /sys/class/block/{name}/dev: {e}"))
        .trim()
        .to_string()
}

/// Runs `tierlab qos run --device DEV ARGS... --log LOG` to its end, its
/// stderr to `dir/qos.err`: whether it succeeded, and that stderr.
pub fn run_controller(dev: &str, args: &[String], log: &Path, dir: &Path) -> (bool, String) {
    let err_path = dir.join("qos.err");
    let status = Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args(["qos", "run", "--device", dev])
        .args(args)
        .arg("--log")
        .arg(log)
        .stderr(std::fs::File::create(&err_path).unwrap())
        .status()
        .unwrap();
    (
        status.success(),
        std::fs::read_to_string(&err_path).unwrap_or_default(),
    )
}

/// Starts fio inside a cgroup (the shell joins it, then execs fio).
pub fn fio_in(cgroup: &Path, args: &[String], out: &Path) -> Child {
    let cmd = format!(
        "echo $$ > {}/cgroup.procs && exec fio {} > {} 2>&1",
        cgroup.display(),
        args.join(" "),
        out.display()
    );
    Command::new("sh").args(["-c", &cmd]).spawn().expect("fio")
}

/// Mean IOPS over `(from_s, to_s]` from a fio `--write_iops_log` file
/// with `--log_avg_msec=1000` (one line per second and direction:
/// `msec, iops, direction, ...`): the per-direction means, added.
pub fn fio_mean_iops(log: &Path, from_s: f64, to_s: f64) -> f64 {
    let text =
        std::fs::read_to_string(log).unwrap_or_else(|e| panic!("fio log {}: {e}", log.display()));
    let mut per_dir = [(0.0f64, 0u32); 3];
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() < 3 {
            continue;
        }
        let (Ok(ms), Ok(v), Ok(d)) = (
            f[0].parse::<f64>(),
            f[1].parse::<f64>(),
            f[2].parse::<usize>(),
        ) else {
            continue;
        };
        let t = ms / 1000.0;
        if t > from_s && t <= to_s && d < 3 {
            per_dir[d].0 += v;
            per_dir[d].1 += 1;
        }
    }
    per_dir
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| s / *n as f64)
        .sum()
}

/// Whether this process may use SCHED_FIFO (probed on a throwaway thread).
pub fn realtime_allowed() -> bool {
    std::thread::spawn(|| {
        let p = libc::sched_param { sched_priority: 1 };
        // SAFETY: a valid sched_param for the calling thread only.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
    })
    .join()
    .unwrap_or(false)
}

/// Sets a cgroup's (read, write) IOPS limits on `majmin`.
pub fn write_limit(interface: &str, cg: &Path, majmin: &str, riops: u64, wiops: u64) {
    if interface == "v2" {
        std::fs::write(
            cg.join("io.max"),
            format!("{majmin} riops={riops} wiops={wiops}\n"),
        )
        .unwrap();
    } else {
        for (f, iops) in [
            ("blkio.throttle.read_iops_device", riops),
            ("blkio.throttle.write_iops_device", wiops),
        ] {
            std::fs::write(cg.join(f), format!("{majmin} {iops}\n")).unwrap();
        }
    }
}

/// A cgroup's limit lines on `majmin` that are set (not `max`, v1 lines
/// present): empty when it has none.
pub fn limits_set(interface: &str, cg: &Path, majmin: &str) -> Vec<String> {
    let text = if interface == "v2" {
        std::fs::read_to_string(cg.join("io.max")).unwrap_or_default()
    } else {
        std::fs::read_to_string(cg.join("blkio.throttle.read_iops_device")).unwrap_or_default()
            + &std::fs::read_to_string(cg.join("blkio.throttle.write_iops_device"))
                .unwrap_or_default()
    };
    text.lines()
        .filter(|l| l.starts_with(majmin) && !l.contains("max"))
        .map(String::from)
        .collect()
}

/// The controller's `--log` CSV.
pub struct QosLog {
    pub text: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl QosLog {
    pub fn read(path: &Path) -> QosLog {
        let text = std::fs::read_to_string(path).unwrap();
        let mut lines = text.lines();
        let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
        let rows: Vec<Vec<String>> = lines
            .map(|l| l.split(',').map(String::from).collect())
            .collect();
        for r in &rows {
            assert_eq!(
                r.len(),
                header.len(),
                "a log row is not as wide as the header: {r:?}"
            );
        }
        QosLog { text, header, rows }
    }

    pub fn col(&self, k: &str) -> usize {
        self.header
            .iter()
            .position(|h| h == k)
            .unwrap_or_else(|| panic!("no column {k} in the log: {:?}", self.header))
    }

    /// Column `k` of row `r` as a number (NaN when empty).
    pub fn num(&self, r: &[String], k: &str) -> f64 {
        r[self.col(k)].parse::<f64>().unwrap_or(f64::NAN)
    }

    pub fn str<'a>(&self, r: &'a [String], k: &str) -> &'a str {
        r[self.col(k)].as_str()
    }

    /// Every value of column `k`.
    pub fn column(&self, k: &str) -> Vec<f64> {
        self.rows.iter().map(|r| self.num(r, k)).collect()
    }

    /// "TIME EVENT" of every row whose event is not `none`.
    pub fn events(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter(|r| !matches!(self.str(r, "event"), "none" | "0"))
            .map(|r| format!("{:.0}s {}", self.num(r, "time_s"), self.str(r, "event")))
            .collect()
    }

    pub fn saturated(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| self.num(r, "saturated") >= 1.0)
            .count()
    }
}

/// (min, max) of the finite values.
pub fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(*x), hi.max(*x))
        })
}
