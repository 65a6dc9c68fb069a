//! End to end on this machine: `tierlab qos run` guarantees a real fio
//! tenant its IOPS on an HDD-like block device shared with a greedy one.
//!
//! The device: `tierlab emulate` serves a 1 GiB file through FUSE whose
//! every IO takes the time tierlab's HDD model says (a 15k rpm SAS disk
//! shrunk to 1 GiB, FIFO, no NCQ: ~5.5 ms per random IO, ~180 IOPS), and a
//! loop device with direct IO sits on it, so the kernel sees a block device
//! whose `%util` is linear in IOPS, as the paper's premise needs (a fast
//! virtual disk is not: docs/qos.md). Set `TIERLAB_QOS_E2E_DEVICE=/dev/sdX`
//! to run on a real disk instead (both tenants then only read).
//!
//! The tenants, each fio in its own cgroup: A does 4 KiB random reads,
//! 8 deep, capped at its target by its own cgroup limit (as the paper caps
//! A at its target); B does 4 KiB random reads and writes (70/30), 64 deep,
//! unthrottled. Without the controller B starves A; with `tierlab qos run`
//! capping B, A's IOPS over the settled second half of the run, as fio
//! itself measures them, must be within 10 % of the target; B's IOPS must
//! drop against its unthrottled run, and B's limit must be gone after the
//! controller exits. The test sets up and tears down the emulator, loop
//! device (its queue settings restored), cgroups and processes itself, and
//! skips with a message where it cannot run (not root, no fio, losetup,
//! loop devices, /dev/fuse or cgroup IO throttling). About 80 s; it runs
//! alone under nextest (.config/nextest.toml).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TARGET_IOPS: f64 = 50.0;
/// fio runs this long before the controller starts (B unthrottled).
const BASELINE_S: u64 = 12;
const CONTROL_S: u64 = 50;
const INTERVAL_S: u64 = 2;
const A_DEPTH: u32 = 8;
const B_DEPTH: u32 = 64;
const CAPACITY: &str = "1GiB";

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// (interface, hierarchy root) as `tierlab qos run` finds it.
fn hierarchy() -> Option<(&'static str, PathBuf)> {
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

/// Everything the test set up, undone in reverse order on drop.
struct Setup {
    dir: tempfile::TempDir,
    emulator: Option<Child>,
    mount: Option<PathBuf>,
    loop_dev: Option<String>,
    /// (sysfs file, original value) to write back.
    queue_settings: Vec<(PathBuf, String)>,
    cgroups: Vec<PathBuf>,
    children: Vec<Child>,
}

impl Setup {
    /// Stops the emulator (SIGTERM: it unmounts and writes its summary).
    fn stop_emulator(&mut self) {
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

/// Starts fio inside a cgroup (the shell joins it, then execs fio).
fn fio_in(cgroup: &Path, args: &[String], out: &Path) -> Child {
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
fn fio_mean_iops(log: &Path, from_s: f64, to_s: f64) -> f64 {
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
fn realtime_allowed() -> bool {
    std::thread::spawn(|| {
        let p = libc::sched_param { sched_priority: 1 };
        // SAFETY: a valid sched_param for the calling thread only.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
    })
    .join()
    .unwrap_or(false)
}

fn write_limit(interface: &str, cg: &Path, majmin: &str, iops: u64) {
    if interface == "v2" {
        std::fs::write(
            cg.join("io.max"),
            format!("{majmin} riops={iops} wiops={iops}\n"),
        )
        .unwrap();
    } else {
        for f in [
            "blkio.throttle.read_iops_device",
            "blkio.throttle.write_iops_device",
        ] {
            std::fs::write(cg.join(f), format!("{majmin} {iops}\n")).unwrap();
        }
    }
}

#[test]
fn qos_run_guarantees_a_real_fio_tenant_its_iops() {
    let skip = |why: &str| eprintln!("SKIP qos_run_guarantees_a_real_fio_tenant_its_iops: {why}");
    if unsafe { libc::geteuid() } != 0 {
        return skip("not root (cgroup limits, FUSE mounts and loop devices need root)");
    }
    if !have("fio") {
        return skip("fio is not installed (scripts/setup.sh installs it)");
    }
    let Some((interface, root)) = hierarchy() else {
        return skip("no cgroup IO throttling (neither cgroup v2 with `io` nor cgroup v1 blkio)");
    };
    let real_device = std::env::var("TIERLAB_QOS_E2E_DEVICE")
        .ok()
        .filter(|d| !d.is_empty());
    if real_device.is_none() {
        if !have("losetup") {
            return skip("losetup is not installed (util-linux)");
        }
        if !Path::new("/dev/loop-control").exists() {
            return skip("no loop devices (/dev/loop-control is missing)");
        }
        if !Path::new("/dev/fuse").exists() {
            return skip("no /dev/fuse (the HDD emulator serves its file through FUSE)");
        }
    }
    let started = Instant::now();
    let mut setup = Setup {
        dir: tempfile::tempdir_in("/var/tmp").expect("tempdir"),
        emulator: None,
        mount: None,
        loop_dev: None,
        queue_settings: Vec::new(),
        cgroups: Vec::new(),
        children: Vec::new(),
    };
    let dir = setup.dir.path().to_path_buf();
    let emu_summary = dir.join("emulate.json");
    let dev = match &real_device {
        Some(d) => d.clone(),
        None => {
            // The HDD-like device: the emulator, then a loop device over its file.
            let mnt = dir.join("mnt");
            std::fs::create_dir(&mnt).unwrap();
            let mut emu = Command::new(env!("CARGO_BIN_EXE_tierlab"));
            emu.args(["emulate", "--model", "hdd", "--preset", "sas-15k-600gb"]);
            // Real-time threads keep the model's completions on time while
            // other processes load the two cores (docs/emulate.md).
            let realtime = realtime_allowed();
            if realtime {
                emu.arg("--realtime");
            }
            eprintln!("emulator threads real-time: {realtime}");
            let emu = emu
                .args(["--set", "scheduler=fifo", "--set", "queue_depth=1"])
                .args(["--set", &format!("capacity_bytes={CAPACITY}")])
                .arg("--mount")
                .arg(&mnt)
                .arg("--summary")
                .arg(&emu_summary)
                .stdout(std::fs::File::create(dir.join("emulate.out")).unwrap())
                .stderr(std::fs::File::create(dir.join("emulate.err")).unwrap())
                .spawn()
                .expect("tierlab emulate");
            setup.emulator = Some(emu);
            setup.mount = Some(mnt.clone());
            let file = mnt.join("disk.img");
            let t = Instant::now();
            while !file.exists() {
                if let Some(Ok(Some(status))) = setup.emulator.as_mut().map(|e| e.try_wait()) {
                    let err = std::fs::read_to_string(dir.join("emulate.err")).unwrap_or_default();
                    setup.emulator = None;
                    return skip(&format!(
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
                return skip(&format!(
                    "losetup failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
            setup.loop_dev = Some(dev.clone());
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
                    setup.queue_settings.push((file, old));
                }
            }
            dev
        }
    };
    let name = std::fs::canonicalize(&dev).unwrap_or_else(|_| PathBuf::from(&dev));
    let name = name.file_name().unwrap().to_string_lossy().to_string();
    let majmin = std::fs::read_to_string(format!("/sys/class/block/{name}/dev"))
        .unwrap_or_else(|e| panic!("{dev}: no /sys/class/block/{name}/dev: {e}"))
        .trim()
        .to_string();
    let pid = std::process::id();
    let (a_name, b_name) = (
        format!("tierlab-e2e-{pid}-a"),
        format!("tierlab-e2e-{pid}-b"),
    );
    for n in [&a_name, &b_name] {
        let cg = root.join(n);
        if let Err(e) = std::fs::create_dir(&cg) {
            return skip(&format!("cannot create cgroup {}: {e}", cg.display()));
        }
        setup.cgroups.push(cg);
    }
    let (a_cg, b_cg) = (setup.cgroups[0].clone(), setup.cgroups[1].clone());
    // A's own limit is its target (the paper caps A at its target).
    write_limit(interface, &a_cg, &majmin, TARGET_IOPS as u64);
    let runtime = BASELINE_S + CONTROL_S + 2;
    let common = |who: &str, depth: u32| {
        vec![
            format!("--name={who}"),
            format!("--filename={dev}"),
            "--bs=4k".into(),
            "--direct=1".into(),
            "--ioengine=libaio".into(),
            format!("--iodepth={depth}"),
            "--time_based".into(),
            format!("--runtime={runtime}"),
            format!("--write_iops_log={}", dir.join(who).display()),
            "--log_avg_msec=1000".into(),
        ]
    };
    let mut b_args = common("b", B_DEPTH);
    if real_device.is_some() {
        b_args.push("--rw=randread".into());
    } else {
        b_args.extend(["--rw=randrw".to_string(), "--rwmixread=70".into()]);
    }
    let mut a_args = common("a", A_DEPTH);
    a_args.push("--rw=randread".into());
    let fio_t0 = Instant::now();
    setup
        .children
        .push(fio_in(&b_cg, &b_args, &dir.join("fio-b.out")));
    setup
        .children
        .push(fio_in(&a_cg, &a_args, &dir.join("fio-a.out")));
    std::thread::sleep(Duration::from_secs(BASELINE_S));
    let log = dir.join("qos.csv");
    let control_start_s = fio_t0.elapsed().as_secs_f64();
    let status = Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args(["qos", "run", "--device", &dev])
        .arg(format!("--guarantee={a_name}={TARGET_IOPS}"))
        .arg(format!("--throttle={b_name}"))
        .arg(format!("--interval-s={INTERVAL_S}"))
        .arg(format!("--duration-s={CONTROL_S}"))
        .arg("--log")
        .arg(&log)
        .stderr(std::fs::File::create(dir.join("qos.err")).unwrap())
        .status()
        .unwrap();
    let control_end_s = fio_t0.elapsed().as_secs_f64();
    let qos_err = std::fs::read_to_string(dir.join("qos.err")).unwrap_or_default();
    assert!(status.success(), "tierlab qos run failed:\n{qos_err}");
    // B's limit is gone after the controller exits.
    let limits = if interface == "v2" {
        std::fs::read_to_string(b_cg.join("io.max")).unwrap_or_default()
    } else {
        std::fs::read_to_string(b_cg.join("blkio.throttle.read_iops_device")).unwrap_or_default()
            + &std::fs::read_to_string(b_cg.join("blkio.throttle.write_iops_device"))
                .unwrap_or_default()
    };
    assert!(
        !limits
            .lines()
            .any(|l| l.starts_with(&majmin) && !l.contains("max")),
        "B's limit left behind: {limits:?}"
    );
    // fio ends by itself and writes its logs.
    for c in &mut setup.children {
        let t = Instant::now();
        while c.try_wait().unwrap().is_none() {
            assert!(t.elapsed() < Duration::from_secs(30), "fio did not end");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // fio's own measurements (its clock starts within a few ms of ours).
    let (a_log, b_log) = (dir.join("a_iops.1.log"), dir.join("b_iops.1.log"));
    let baseline = (2.0, control_start_s.floor());
    let settled = (
        (control_start_s + control_end_s) / 2.0,
        control_end_s.floor(),
    );
    let a_base = fio_mean_iops(&a_log, baseline.0, baseline.1);
    let b_base = fio_mean_iops(&b_log, baseline.0, baseline.1);
    let a_settled = fio_mean_iops(&a_log, settled.0, settled.1);
    let b_settled = fio_mean_iops(&b_log, settled.0, settled.1);
    let a_error_pct = 100.0 * (a_settled - TARGET_IOPS) / TARGET_IOPS;
    // The controller's log, for the record: X updates and B's caps.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |k: &str| header.iter().position(|h| *h == k).unwrap();
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    let num = |r: &Vec<String>, k: &str| r[col(k)].parse::<f64>().unwrap_or(f64::NAN);
    let caps: Vec<f64> = rows
        .iter()
        .map(|r| num(r, "b_cap_iops"))
        .filter(|c| *c > 0.0)
        .collect();
    let events: Vec<String> = rows
        .iter()
        .filter(|r| !matches!(r[col("event")].as_str(), "none" | "0"))
        .map(|r| format!("{:.0}s {}", num(r, "time_s"), r[col("event")]))
        .collect();
    let saturated = rows.iter().filter(|r| num(r, "saturated") >= 1.0).count();
    let x_last = rows
        .last()
        .map(|r| num(r, "target_busy_pct"))
        .unwrap_or(f64::NAN);
    let utils: Vec<f64> = rows.iter().map(|r| num(r, "util_pct")).collect();
    // The emulator's own report needs the loop device gone first.
    let emu_report = if real_device.is_none() {
        for (file, value) in setup.queue_settings.drain(..).rev() {
            let _ = std::fs::write(file, value);
        }
        if let Some(d) = setup.loop_dev.take() {
            let _ = Command::new("losetup").args(["-d", &d]).status();
        }
        setup.stop_emulator();
        std::fs::read_to_string(&emu_summary).unwrap_or_default()
    } else {
        String::new()
    };
    eprintln!(
        "qos e2e ({}, {interface} cgroups), {:.0} s in all:\n  \
         baseline (B unthrottled, {:.0}-{:.0} s): A {a_base:.1} IOPS of {TARGET_IOPS}, B {b_base:.1}\n  \
         settled ({:.0}-{:.0} s): A {a_settled:.1} IOPS ({a_error_pct:+.1} %), B {b_settled:.1}\n  \
         controller: {} samples, util {:.1}-{:.1} %, {saturated} saturated, X at the end {x_last} %, \
         events [{}], B cap {:.1}-{:.1} IOPS",
        real_device
            .as_deref()
            .unwrap_or("emulated HDD behind a loop device"),
        started.elapsed().as_secs_f64(),
        baseline.0,
        baseline.1,
        settled.0,
        settled.1,
        rows.len(),
        utils.iter().cloned().fold(f64::INFINITY, f64::min),
        utils.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        events.join(", "),
        caps.iter().cloned().fold(f64::INFINITY, f64::min),
        caps.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    );
    // Every sample: time, %util, A and B IOPS, busy_pct_per_iops, event, B's cap.
    for r in &rows {
        eprintln!(
            "  t={:5.1}s util {:6.2} % A {:5.1} B {:6.1} bpi {:.3} X {:.1} {} B cap {:.1}",
            num(r, "time_s"),
            num(r, "util_pct"),
            num(r, "a_iops"),
            num(r, "b_iops"),
            num(r, "busy_pct_per_iops"),
            num(r, "target_busy_pct"),
            r[col("event")],
            num(r, "b_cap_iops")
        );
    }
    if !emu_report.is_empty() {
        eprintln!("emulator summary:\n{emu_report}");
    }
    if a_base > 0.9 * TARGET_IOPS {
        if real_device.is_some() {
            return skip(&format!(
                "B does not starve A on {dev} without the controller (A {a_base:.0} IOPS of {TARGET_IOPS}): nothing to guarantee"
            ));
        }
        panic!(
            "B did not starve A on the emulated HDD without the controller: A {a_base:.1} of {TARGET_IOPS}"
        );
    }
    assert!(!caps.is_empty(), "the controller never capped B:\n{text}");
    assert!(
        a_error_pct.abs() <= 10.0,
        "A's IOPS {a_settled:.1} not within 10 % of {TARGET_IOPS}; controller log:\n{text}\n{qos_err}"
    );
    assert!(
        b_settled < 0.9 * b_base,
        "B was not throttled: {b_settled:.1} IOPS with the controller vs {b_base:.1} without"
    );
}
