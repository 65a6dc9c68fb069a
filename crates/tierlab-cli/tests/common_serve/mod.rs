//! Harness for `tierlab serve` interoperability tests: a temp directory with
//! a copy of a ready config (so its images are created there), the server
//! started on a socket in it (banner parsed, stopped with SIGINT and its
//! exit checked, killed on drop), external commands run with a timeout and
//! reported in full when they fail, `nbdinfo --map` parsed, the sparse
//! layout of an image read with SEEK_DATA / SEEK_HOLE, and deterministic
//! data.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;

/// How long the server may take to print its banner.
const BANNER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a clean stop (finish requests, drain, fdatasync) may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

/// One ready config of `configs/` and what is known about it independently
/// of the server (from the config's numbers and the policy docs).
pub struct Stack {
    pub name: &'static str,
    pub config: &'static str,
    /// Volume size: the host address space (from the config).
    pub size_bytes: u64,
    /// NBD minimum block: the policy's alignment (4 KiB pages / blocks) or 512.
    pub block_min_bytes: u64,
    /// `tierlab:tier` flags index these (the policy's tier names).
    pub tiers: &'static [&'static str],
    /// Tier of freshly written bytes (before any move or write-back).
    pub written_tier: u32,
    /// Tier of every byte of a fresh volume, and after a clean stop and
    /// restart unless `restart_keeps_cached`.
    pub rest_tier: u32,
    /// A clean stop writes everything back but keeps it cached (persistent
    /// cache metadata, the default of the caches on files): after a
    /// restart the written bytes are still on `written_tier`.
    pub restart_keeps_cached: bool,
    /// The image that holds volume byte x at offset x once drained (the
    /// slow device), for the independent check of `base:allocation`.
    pub volume_image: Option<&'static str>,
    /// `base:allocation` reflects the sparse files; false: the store cannot
    /// tell and every extent is data (RAID of files; documented in
    /// crates/tierlab-serve/src/extents.rs).
    pub allocation_known: bool,
    /// What the slow device writes at once when the fast tier drains into
    /// it: 4 KiB pages, or a whole band (HSWD's band RMW).
    pub drain_granule_bytes: u64,
    /// A policy counter (summary.json `run.policy_counters`) that equals the
    /// bytes on tier 0 after aligned writes and no reads.
    pub tier0_counter: Option<&'static str>,
    /// Where sub-LUN / band boundaries fall (unaligned-IO tests cross them).
    pub geometry_bytes: u64,
    /// CAN_MULTI_CONN: a FLUSH makes every acknowledged write durable — not
    /// when RAM holds data next to persistent stores (ATSMF's memory tier;
    /// docs/serve.md).
    pub multi_conn: bool,
}

pub static FILE: Stack = Stack {
    name: "file",
    config: "serve-file.toml",
    size_bytes: 256 * MIB,
    block_min_bytes: 512,
    tiers: &["device"],
    written_tier: 0,
    rest_tier: 0,
    restart_keeps_cached: false,
    volume_image: Some("serve-file-disk.img"),
    allocation_known: true,
    drain_granule_bytes: 4 * KIB,
    tier0_counter: None,
    geometry_bytes: 4 * MIB,
    multi_conn: true,
};

pub static CACHE: Stack = Stack {
    name: "cache",
    config: "serve-cache.toml",
    size_bytes: 256 * MIB,
    block_min_bytes: 4096,
    tiers: &["cache", "backing"],
    written_tier: 0,
    rest_tier: 1,
    restart_keeps_cached: true,
    volume_image: Some("serve-cache-backing.img"),
    allocation_known: true,
    drain_granule_bytes: 4 * KIB,
    // Pages in the cache, dirty or clean (qemu-io's FLUSH at exit writes
    // them back and leaves them cached).
    tier0_counter: Some("resident_bytes"),
    geometry_bytes: 4 * MIB,
    multi_conn: true,
};

pub static FLASHCACHE: Stack = Stack {
    name: "flashcache",
    config: "serve-flashcache.toml",
    size_bytes: 256 * MIB,
    block_min_bytes: 4096,
    tiers: &["cache", "backing"],
    written_tier: 0,
    rest_tier: 1,
    restart_keeps_cached: true,
    volume_image: Some("serve-flashcache-disk.img"),
    allocation_known: true,
    drain_granule_bytes: 4 * KIB,
    tier0_counter: Some("resident_bytes"),
    // flashcache: each 2 MiB stretch of the disk maps to one set.
    geometry_bytes: 2 * MIB,
    multi_conn: true,
};

pub static ATSMF: Stack = Stack {
    name: "atsmf",
    config: "serve-atsmf.toml",
    size_bytes: 256 * MIB,
    block_min_bytes: 512,
    tiers: &["memory", "flash"],
    written_tier: 1,
    rest_tier: 1,
    restart_keeps_cached: false,
    volume_image: Some("serve-atsmf-flash.img"),
    allocation_known: true,
    drain_granule_bytes: 4 * KIB,
    tier0_counter: None,
    geometry_bytes: 4 * MIB,
    multi_conn: true,
};

pub static HSWD: Stack = Stack {
    name: "hswd",
    config: "serve-hswd.toml",
    size_bytes: 256 * MIB,
    block_min_bytes: 4096,
    tiers: &["pcache", "nregion", "rcache"],
    written_tier: 0,
    rest_tier: 1,
    restart_keeps_cached: false,
    volume_image: Some("serve-hswd-nregion.img"),
    allocation_known: true,
    drain_granule_bytes: 4 * MIB,
    tier0_counter: Some("cached_bytes"),
    geometry_bytes: 4 * MIB,
    multi_conn: true,
};

pub static RAID5: Stack = Stack {
    name: "raid5",
    config: "serve-raid5.toml",
    size_bytes: 3 * 96 * MIB,
    block_min_bytes: 512,
    tiers: &["device"],
    written_tier: 0,
    rest_tier: 0,
    restart_keeps_cached: false,
    volume_image: None,
    allocation_known: false,
    drain_granule_bytes: 4 * KIB,
    tier0_counter: None,
    // 64 KiB stripe units, 3 data units per stripe.
    geometry_bytes: 192 * KIB,
    multi_conn: true,
};

/// RAID 5 with a write-intent bitmap (the crash tests).
pub static RAID5_BITMAP: Stack = Stack {
    name: "raid5-bitmap",
    config: "serve-raid5-bitmap.toml",
    ..RAID5
};

// ---------------------------------------------------------------------------
// Tools

/// The Debian package that ships `tool`, for skip messages.
fn package_of(tool: &str) -> &'static str {
    match tool {
        "nbdinfo" | "nbdcopy" | "nbdsh" => "libnbd-bin",
        "nbdfuse" => "nbdfuse",
        "qemu-io" | "qemu-img" => "qemu-utils",
        "fio" => "fio",
        "losetup" | "mount" | "umount" => "mount",
        "mkfs.ext4" | "fsck.ext4" => "e2fsprogs",
        "fusermount3" => "fuse3",
        _ => "?",
    }
}

pub fn on_path(tool: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        let p = dir.join(tool);
        std::fs::metadata(&p).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    })
}

/// True when every tool is installed; otherwise prints why the test is
/// skipped (it then passes).
pub fn require(test: &str, tools: &[&str]) -> bool {
    for t in tools {
        if !on_path(t) {
            eprintln!(
                "skipped {test}: {t} not installed (apt-get install {})",
                package_of(t)
            );
            return false;
        }
    }
    true
}

/// fio built with the `nbd` IO engine (libnbd).
pub fn require_fio_nbd(test: &str) -> bool {
    if !require(test, &["fio"]) {
        return false;
    }
    let ok = Command::new("fio")
        .arg("--enghelp=nbd")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped {test}: this fio has no nbd IO engine (fio --enghelp=nbd fails)");
    }
    ok
}

/// A Python that has libnbd's bindings (`import nbd`): Debian's python3-nbd
/// lives in /usr/bin/python3's path, which a pyenv python3 on PATH lacks.
pub fn python_with_nbd() -> Option<String> {
    ["/usr/bin/python3", "python3"].into_iter().find_map(|py| {
        Command::new(py)
            .args(["-c", "import nbd"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            .then(|| py.to_string())
    })
}

// ---------------------------------------------------------------------------
// Running commands

/// A finished command.
pub struct Ran {
    pub cmdline: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn describe(&self) -> String {
        format!(
            "`{}` exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}{}",
            self.cmdline,
            self.status,
            tail(&self.stdout, 4000),
            tail(&self.stderr, 4000),
            servers_state()
        )
    }
}

/// A running server, for failure messages of client commands.
struct Running {
    label: String,
    pid: i32,
    stderr_path: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
}

thread_local! {
    static RUNNING: std::cell::RefCell<Vec<Running>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether each server of this test still runs, and its output.
fn servers_state() -> String {
    RUNNING.with(|r| {
        r.borrow()
            .iter()
            .map(|s| {
                let state = exit_state(s.pid);
                format!(
                    "\n=== server {} (pid {}) {state} ===\n--- its stdout ---\n{}\n--- its stderr ---\n{}",
                    s.label,
                    s.pid,
                    tail(&s.lines.lock().unwrap().join("\n"), 3000),
                    tail(&std::fs::read_to_string(&s.stderr_path).unwrap_or_default(), 3000)
                )
            })
            .collect()
    })
}

/// "is running", or how the child exited (peeked at without reaping it).
fn exit_state(pid: i32) -> String {
    // SAFETY: waitid on our own child with WNOWAIT leaves it to be reaped
    // by its `Child`; the siginfo is a local.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        if rc != 0 {
            return format!(
                "state unknown (waitid: {})",
                std::io::Error::last_os_error()
            );
        }
        if info.si_pid() == 0 {
            return "is running".into();
        }
        let status = info.si_status();
        match info.si_code {
            libc::CLD_EXITED => format!("HAS EXITED with status {status}"),
            libc::CLD_KILLED => format!("WAS KILLED by signal {status}"),
            libc::CLD_DUMPED => format!("DUMPED CORE on signal {status}"),
            c => format!("stopped (si_code {c}, status {status})"),
        }
    }
}

fn forget_server(pid: i32) {
    RUNNING.with(|r| r.borrow_mut().retain(|s| s.pid != pid));
}

fn tail(s: &str, max_chars: usize) -> String {
    let n = s.chars().count();
    if n <= max_chars {
        s.to_string()
    } else {
        let skip = n - max_chars;
        format!(
            "[... {skip} chars]{}",
            s.chars().skip(skip).collect::<String>()
        )
    }
}

fn cmdline(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    for a in cmd.get_args() {
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
            parts.push(format!("'{}'", a.replace('\'', "'\\''")));
        } else {
            parts.push(a.into_owned());
        }
    }
    parts.join(" ")
}

fn reader_thread<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs `cmd` to completion (killed after `timeout`, which fails the test);
/// the caller judges the exit status.
pub fn run(label: &str, cmd: &mut Command, timeout: Duration) -> Ran {
    let line = cmdline(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("[{label}] cannot start `{line}`: {e}"));
    let out = reader_thread(child.stdout.take().expect("piped"));
    let err = reader_thread(child.stderr.take().expect("piped"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                let stdout = out.join().unwrap_or_default();
                let stderr = err.join().unwrap_or_default();
                panic!(
                    "[{label}] `{line}` did not finish within {timeout:?} (killed)\n--- stdout ---\n{}\n--- stderr ---\n{}{}",
                    tail(&stdout, 4000),
                    tail(&stderr, 4000),
                    servers_state()
                );
            }
            Err(e) => panic!("[{label}] waiting for `{line}`: {e}"),
        }
    };
    Ran {
        cmdline: line,
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Runs `cmd`, failing the test (with its output) unless it exits 0.
pub fn run_ok(label: &str, cmd: &mut Command, timeout: Duration) -> Ran {
    let r = run(label, cmd, timeout);
    assert!(r.status.success(), "[{label}] {}", r.describe());
    r
}

pub fn cmd(program: &str, args: &[&str]) -> Command {
    let mut c = Command::new(program);
    c.args(args);
    c
}

// ---------------------------------------------------------------------------
// The lab: a temp dir with the config, and the server

pub struct Lab {
    pub stack: &'static Stack,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    starts: u32,
}

fn configs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs")
}

/// Options of one server start.
#[derive(Default)]
pub struct Opts<'a> {
    pub read_only: bool,
    /// `--tcp` value instead of the lab's Unix socket.
    pub tcp: Option<&'a str>,
    pub export: Option<&'a str>,
    /// `--stats-interval-s` (summary.json is rewritten this often).
    pub stats_interval_s: Option<f64>,
    /// `--set KEY=VALUE` overrides.
    pub set: &'a [&'a str],
    /// `--write-back-on-stop` (HSWD's stop then cleans every band).
    pub write_back_on_stop: bool,
}

impl Lab {
    pub fn new(stack: &'static Stack) -> Lab {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tl-serve-{}-", stack.name))
            .tempdir()
            .expect("temp dir");
        let src = configs_dir().join(stack.config);
        let config = dir.path().join(stack.config);
        std::fs::copy(&src, &config)
            .unwrap_or_else(|e| panic!("copy {} to {}: {e}", src.display(), config.display()));
        Lab {
            stack,
            dir,
            config,
            starts: 0,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn socket(&self) -> PathBuf {
        self.path("nbd.sock")
    }

    /// Starts `tierlab serve` on the lab's socket with `--out outN`.
    pub fn start(&mut self) -> Server {
        self.start_with(Opts::default())
    }

    pub fn start_with(&mut self, o: Opts) -> Server {
        self.try_start_with(o).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server; Err (with its output) if it exits before listening.
    pub fn try_start_with(&mut self, o: Opts) -> Result<Server, String> {
        self.starts += 1;
        let n = self.starts;
        let label = format!("{} server #{n}", self.stack.name);
        let out_dir = self.path(&format!("out{n}"));
        let stderr_path = self.path(&format!("server{n}.stderr"));
        let mut c = Command::new(env!("CARGO_BIN_EXE_tierlab"));
        c.arg("serve").arg(&self.config);
        match o.tcp {
            Some(t) => c.args(["--tcp", t]),
            None => c.arg("--unix").arg(self.socket()),
        };
        c.arg("--out").arg(&out_dir);
        c.args([
            "--stats-interval-s",
            &o.stats_interval_s.unwrap_or(0.5).to_string(),
        ]);
        if o.read_only {
            c.arg("--read-only");
        }
        if o.write_back_on_stop {
            c.arg("--write-back-on-stop");
        }
        if let Some(e) = o.export {
            c.args(["--export", e]);
        }
        for kv in o.set {
            c.args(["--set", kv]);
        }
        let line = cmdline(&c);
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("[{label}] cannot start `{line}`: {e}"));
        let stdout = child.stdout.take().expect("piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let reader = {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for l in BufReader::new(stdout).lines() {
                    let Ok(l) = l else { break };
                    lines.lock().unwrap().push(l.clone());
                    let _ = tx.send(l);
                }
            })
        };
        let mut server = Server {
            label,
            cmdline: line,
            child: Some(child),
            reader: Some(reader),
            lines,
            stderr_path,
            out_dir,
            uri: String::new(),
            banner: Vec::new(),
            tiers: Vec::new(),
            size_bytes: 0,
            blocks: (0, 0, 0),
            read_only: false,
        };
        let deadline = Instant::now() + BANNER_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) => {
                    let last = l.starts_with("  stop with Ctrl-C");
                    server.banner.push(l);
                    if last {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "[{}] no complete banner within {BANNER_TIMEOUT:?}: `{}`\n{}",
                    server.label,
                    server.cmdline,
                    server.output()
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = server.child.as_mut().and_then(|c| c.wait().ok());
                    return Err(format!(
                        "[{}] exited before listening ({status:?}): `{}`\n{}",
                        server.label,
                        server.cmdline,
                        server.output()
                    ));
                }
            }
        }
        server.parse_banner();
        RUNNING.with(|r| {
            r.borrow_mut().push(Running {
                label: server.label.clone(),
                pid: server.pid(),
                stderr_path: server.stderr_path.clone(),
                lines: Arc::clone(&server.lines),
            })
        });
        Ok(server)
    }
}

pub struct Server {
    pub label: String,
    pub cmdline: String,
    child: Option<Child>,
    reader: Option<std::thread::JoinHandle<()>>,
    lines: Arc<Mutex<Vec<String>>>,
    pub stderr_path: PathBuf,
    pub out_dir: PathBuf,
    pub uri: String,
    pub banner: Vec<String>,
    /// From `  tierlab:tier flags: 0 = cache, 1 = backing`.
    pub tiers: Vec<String>,
    pub size_bytes: u64,
    /// (min, preferred, max) from the banner.
    pub blocks: (u64, u64, u64),
    pub read_only: bool,
}

impl Server {
    /// Its stdout so far and its stderr, for failure messages.
    pub fn output(&self) -> String {
        let out = self.lines.lock().unwrap().join("\n");
        let err = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        format!(
            "--- server stdout ---\n{}\n--- server stderr ---\n{}",
            tail(&out, 4000),
            tail(&err, 4000)
        )
    }

    fn parse_banner(&mut self) {
        let b = self.banner.clone();
        let fail =
            |what: &str| -> ! { panic!("[{}] banner: {what}\n{}", self.label, b.join("\n")) };
        self.uri = b[0]
            .strip_prefix("tierlab serve: ")
            .unwrap_or_else(|| fail("the first line is not `tierlab serve: URI`"))
            .trim()
            .to_string();
        // `  export "tierlab": 268435456 bytes, blocks 4096 / 4096 / 33554432 bytes (min / ...)`
        let export = b
            .iter()
            .find(|l| l.starts_with("  export "))
            .unwrap_or_else(|| fail("no `export` line"));
        let after = export
            .split("\": ")
            .nth(1)
            .unwrap_or_else(|| fail("export line"));
        self.size_bytes = after
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| fail("export size"));
        self.read_only = after.contains(", read-only");
        let blocks: Vec<u64> = after
            .split("blocks ")
            .nth(1)
            .unwrap_or_else(|| fail("block sizes"))
            .split(" bytes")
            .next()
            .unwrap_or_default()
            .split(" / ")
            .map(|n| {
                n.trim()
                    .parse()
                    .unwrap_or_else(|_| fail("block size number"))
            })
            .collect();
        if blocks.len() != 3 {
            fail("three block sizes");
        }
        self.blocks = (blocks[0], blocks[1], blocks[2]);
        let tiers = b
            .iter()
            .find_map(|l| l.strip_prefix("  tierlab:tier flags: "))
            .unwrap_or_else(|| fail("no `tierlab:tier flags:` line"));
        self.tiers = tiers
            .split(", ")
            .enumerate()
            .map(|(i, part)| {
                let (idx, name) = part
                    .split_once(" = ")
                    .unwrap_or_else(|| fail("tier entry `I = NAME`"));
                if idx.parse::<usize>().ok() != Some(i) {
                    fail("tier indices 0, 1, ... in order");
                }
                name.to_string()
            })
            .collect();
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// SIGKILL: the process dies with no chance to flush or write back
    /// (a crash, as far as the stores are concerned).
    /// The exit status, if the server has exited by itself.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("server running");
        forget_server(child.id() as i32);
        let _ = child.kill();
        let _ = child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }

    /// Stops with SIGINT; asserts exit 0 and the `stopped (SIGINT)` line;
    /// returns that line.
    pub fn stop(&mut self) -> String {
        self.stop_with(libc::SIGINT, "SIGINT")
    }

    /// Stops with `signal` (SIGINT or SIGTERM, named `name`); asserts exit
    /// 0 and the `stopped (NAME)` line; returns that line.
    pub fn stop_with(&mut self, signal: i32, name: &str) -> String {
        let mut child = self.child.take().expect("server running");
        forget_server(child.id() as i32);
        // SAFETY: a signal to our own child.
        unsafe {
            libc::kill(child.id() as i32, signal);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "[{}] did not stop within {STOP_TIMEOUT:?} of {name} (killed)\n{}",
                        self.label,
                        self.output()
                    );
                }
                Err(e) => panic!("[{}] wait: {e}", self.label),
            }
        };
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        assert!(
            status.success(),
            "[{}] exited with {status} after {name}, expected 0\n{}",
            self.label,
            self.output()
        );
        let lines = self.lines.lock().unwrap().clone();
        lines
            .iter()
            .find(|l| l.starts_with(&format!("tierlab serve: stopped ({name})")))
            .cloned()
            .unwrap_or_else(|| {
                panic!(
                    "[{}] no `tierlab serve: stopped ({name}) ...` line after {name}\n{}",
                    self.label,
                    self.output()
                )
            })
    }

    /// summary.json of `--out` as last written (None while it is being
    /// rewritten or not yet written).
    pub fn summary(&self) -> Option<serde_json::Value> {
        let text = std::fs::read(self.out_dir.join("summary.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    pub fn counter(&self, name: &str) -> Option<f64> {
        self.summary()?
            .pointer(&format!("/run/policy_counters/{name}"))?
            .as_f64()
    }

    /// A backing store's counter (`run.device_counters.DEVICE.NAME`).
    pub fn device_counter(&self, device: &str, name: &str) -> Option<f64> {
        self.summary()?
            .pointer(&format!("/run/device_counters/{device}/{name}"))?
            .as_f64()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            forget_server(c.id() as i32);
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

// ---------------------------------------------------------------------------
// Maps

/// One extent of `nbdinfo --map`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ext {
    pub offset: u64,
    pub len: u64,
    pub flags: u32,
}

pub const HOLE_ZERO: u32 = 3;
pub const DATA: u32 = 0;

/// `nbdinfo --map[=CONTEXT] URI`, parsed, adjacent equal extents merged,
/// checked to cover the export from 0 to `size_bytes` without gaps.
pub fn nbd_map(label: &str, uri: &str, context: Option<&str>, size_bytes: u64) -> Vec<Ext> {
    let flag = match context {
        Some(c) => format!("--map={c}"),
        None => "--map".to_string(),
    };
    let r = run_ok(
        label,
        &mut cmd("nbdinfo", &[&flag, uri]),
        Duration::from_secs(60),
    );
    let mut out: Vec<Ext> = Vec::new();
    for line in r.stdout.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parse = |i: usize| -> u64 {
            f.get(i)
                .and_then(|x| x.parse().ok())
                .unwrap_or_else(|| panic!("[{label}] `{}`: cannot parse line {line:?}", r.cmdline))
        };
        let e = Ext {
            offset: parse(0),
            len: parse(1),
            flags: parse(2) as u32,
        };
        let at = out.last().map_or(0, |l| l.offset + l.len);
        assert_eq!(
            e.offset, at,
            "[{label}] `{}`: extent at {} where {at} was expected (gap or overlap)\n{}",
            r.cmdline, e.offset, r.stdout
        );
        match out.last_mut() {
            Some(l) if l.flags == e.flags => l.len += e.len,
            _ => out.push(e),
        }
    }
    let end = out.last().map_or(0, |l| l.offset + l.len);
    assert_eq!(
        end, size_bytes,
        "[{label}] `{}` covers {end} bytes of {size_bytes}\n{}",
        r.cmdline, r.stdout
    );
    out
}

/// The map of a volume of `size` bytes whose `ranges` (start, end) have
/// `inside` and the rest `outside`.
pub fn layout(size: u64, ranges: &[(u64, u64)], inside: u32, outside: u32) -> Vec<Ext> {
    let ranges = merge_ranges(ranges);
    let mut out: Vec<Ext> = Vec::new();
    let mut push = |offset: u64, end: u64, flags: u32| {
        if end <= offset {
            return;
        }
        match out.last_mut() {
            Some(l) if l.flags == flags => l.len += end - offset,
            _ => out.push(Ext {
                offset,
                len: end - offset,
                flags,
            }),
        }
    };
    let mut at = 0;
    for &(s, e) in &ranges {
        let (s, e) = (s.min(size), e.min(size));
        push(at, s, outside);
        push(s, e, inside);
        at = e;
    }
    push(at, size, outside);
    out
}

/// Sorted, overlapping or touching ranges merged.
pub fn merge_ranges(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut r: Vec<(u64, u64)> = ranges.iter().copied().filter(|(s, e)| e > s).collect();
    r.sort();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in r {
        match out.last_mut() {
            Some(l) if s <= l.1 => l.1 = l.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Ranges rounded out to multiples of `granule`.
pub fn round_out(ranges: &[(u64, u64)], granule: u64) -> Vec<(u64, u64)> {
    merge_ranges(
        &ranges
            .iter()
            .map(|&(s, e)| (s / granule * granule, e.div_ceil(granule) * granule))
            .collect::<Vec<_>>(),
    )
}

pub fn fmt_map(m: &[Ext]) -> String {
    m.iter()
        .map(|e| format!("{:>12} {:>12} {}", e.offset, e.len, e.flags))
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn assert_map(label: &str, what: &str, actual: &[Ext], expected: &[Ext]) {
    assert!(
        actual == expected,
        "[{label}] {what}: the map differs\n--- got (offset length flags) ---\n{}\n--- expected ---\n{}",
        fmt_map(actual),
        fmt_map(expected)
    );
}

/// Bytes with `flags` in a map.
pub fn bytes_with(m: &[Ext], flags: u32) -> u64 {
    m.iter().filter(|e| e.flags == flags).map(|e| e.len).sum()
}

/// The (start, end) ranges of a sparse file that hold data, within
/// [0, limit): SEEK_DATA / SEEK_HOLE, the truth `base:allocation` reports.
pub fn file_data_ranges(path: &Path, limit: u64) -> Vec<(u64, u64)> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut at: i64 = 0;
    while (at as u64) < limit {
        // SAFETY: lseek on a descriptor we own.
        let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if data < 0 {
            break; // ENXIO: no data past `at`
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        assert!(hole >= data, "SEEK_HOLE on {}", path.display());
        out.push((data as u64, (hole as u64).min(limit)));
        at = hole;
    }
    out.retain(|(s, e)| s < e);
    out
}

// ---------------------------------------------------------------------------
// Data

/// Deterministic bytes (xorshift64*), different for each seed.
pub fn fill_random(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_random(&mut v, seed);
    v
}

/// Polls `f` until it returns Some, or fails after `timeout` with `what`
/// and the last diagnostic `f` left in `last`.
pub fn poll_until<T>(
    label: &str,
    what: &str,
    timeout: Duration,
    mut f: impl FnMut(&mut String) -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        if let Some(v) = f(&mut last) {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("[{label}] {what}: not reached within {timeout:?}; last seen:\n{last}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
