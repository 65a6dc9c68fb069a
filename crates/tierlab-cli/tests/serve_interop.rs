//! `tierlab serve` against the standard NBD tools, for each ready serve
//! config (configs/serve-*.toml: passthrough over a file, a write-back page
//! cache, flashcache, ATSMF over RAM + file, HSWD over an SMR-layout file,
//! RAID 5 of four files):
//!
//! - `nbdinfo_and_map`: `nbdinfo --json` (size, block sizes, flags) and
//!   `nbdinfo --map` / `--map=tierlab:tier` against independent truth (a
//!   fresh volume is all hole + zero on its slow tier; written bytes are data
//!   on the tier the policy docs say, a trimmed range a hole on the slow
//!   tier; the policy's own counters agree with the map; after a clean stop
//!   the slow image's SEEK_DATA layout is what the map then reports), and
//!   `--read-only` (flag set, writes, trims and zeroing refused with EPERM).
//! - `qemu_io_unaligned`: patterns written by `qemu-io` at offsets not
//!   aligned to the stack's geometry (crossing sub-LUN / band / stripe
//!   boundaries, odd 4 KiB multiples, 512-byte-aligned, byte-unaligned
//!   ones that qemu read-modify-writes, FUA, WRITE_ZEROES, trim then
//!   rewrite, overwrites), read back with `-P`, before and after a clean
//!   restart.
//! - `nbdcopy_compare`: 64 MiB of random data copied in with `nbdcopy`,
//!   `qemu-img compare` (the rest of the export must read as zeros), the
//!   tier map against the policy counters; after a restart, `nbdcopy` back
//!   out and compared byte for byte.
//! - `fio_verify`: fio's nbd engine, 4 jobs (4 connections) of random
//!   writes in their own regions with crc32c verification and a FLUSH every
//!   8 writes (the server counts as many FLUSHes as fio sent); the maps
//!   after it; after a restart `--verify_only` checks everything again.
//! - `ext4`: nbdfuse → losetup → mkfs.ext4 → a tree of files → fsck →
//!   checksums, across a restart of the server (root, /dev/fuse and loop
//!   devices needed).
//! - `sigterm_under_load`: libnbd (Python) writes pages 16 deep until the
//!   server is stopped with SIGTERM; after a restart every page holds its
//!   last acknowledged write (or the one in flight at the stop).
//!
//! Plus: ATSMF promotion (a hot region driven by fio shows up as tier 0, in
//! agreement with the policy counters, and is demoted by the clean stop);
//! serving over TCP with a custom export name; libnbd protocol variants
//! (simple replies, option negotiation, BLOCK_STATUS queries against the
//! full maps); NBD_OPT_ABORT without waiting for the reply (`nbdinfo
//! --list`); and that a stop does not cost a pipelining client the replies
//! the server sent (requests after the stop are answered NBD_ESHUTDOWN).
//! Every test has its own temp dir, images and socket, and skips (passing,
//! with a message on stderr) when a tool is missing.

mod common_serve;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common_serve::*;

const T_SHORT: Duration = Duration::from_secs(60);
const T_LONG: Duration = Duration::from_secs(240);

// ---------------------------------------------------------------------------
// qemu-io

/// Runs `qemu-io -f raw` (`-r`: read-only open) with these commands; fails
/// on a non-zero exit or a pattern mismatch.
fn qemu_io(label: &str, uri: &str, read_only: bool, cmds: &[String]) -> Ran {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw"]);
    if read_only {
        c.arg("-r");
    }
    for x in cmds {
        c.arg("-c").arg(x);
    }
    c.arg(uri);
    let r = run(label, &mut c, T_LONG);
    let bad = r.stdout.contains("verification failed")
        || r.stderr.contains("verification failed")
        || r.stdout.contains("failed:")
        || r.stderr.contains("failed:");
    assert!(r.status.success() && !bad, "[{label}] {}", r.describe());
    r
}

/// A write of `pattern` (0 = WRITE_ZEROES) at [offset, offset + len).
#[derive(Clone, Copy, Debug)]
struct Write {
    offset: u64,
    len: u64,
    pattern: u8,
}

fn write_cmd(w: &Write) -> String {
    if w.pattern == 0 {
        format!("write -z {} {}", w.offset, w.len)
    } else {
        format!("write -P {:#04x} {} {}", w.pattern, w.offset, w.len)
    }
}

/// `read -P` commands that check every byte of `windows` against the
/// writes applied in order (bytes never written read as zeros).
fn verify_cmds(writes: &[Write], windows: &[(u64, u64)]) -> Vec<String> {
    let mut cmds = Vec::new();
    for &(ws, we) in &merge_ranges(windows) {
        let mut cuts: Vec<u64> = vec![ws, we];
        for w in writes {
            for p in [w.offset, w.offset + w.len] {
                if p > ws && p < we {
                    cuts.push(p);
                }
            }
        }
        cuts.sort();
        cuts.dedup();
        let mut runs: Vec<(u64, u64, u8)> = Vec::new();
        for pair in cuts.windows(2) {
            let (s, e) = (pair[0], pair[1]);
            let pat = writes
                .iter()
                .rev()
                .find(|w| w.offset <= s && s < w.offset + w.len)
                .map_or(0, |w| w.pattern);
            match runs.last_mut() {
                Some(r) if r.2 == pat && r.1 == s => r.1 = e,
                _ => runs.push((s, e, pat)),
            }
        }
        for (s, e, pat) in runs {
            // Reads of at most 8 MiB each.
            let mut at = s;
            while at < e {
                let n = (e - at).min(8 * MIB);
                cmds.push(format!("read -P {pat:#04x} {at} {n}"));
                at += n;
            }
        }
    }
    cmds
}

// ---------------------------------------------------------------------------
// 1. nbdinfo: flags, sizes, maps

fn nbdinfo_json(label: &str, uri: &str) -> serde_json::Value {
    // --no-content: nbdinfo would otherwise read the first sectors to guess
    // the content, and a cache admits what is read (the maps would show it).
    let r = run_ok(
        label,
        &mut cmd("nbdinfo", &["--json", "--no-content", uri]),
        T_SHORT,
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("[{label}] `{}`: not JSON ({e})\n{}", r.cmdline, r.stdout));
    v["exports"][0].clone()
}

fn check_export_json(label: &str, stack: &Stack, e: &serde_json::Value, read_only: bool) {
    let num = |k: &str| {
        e[k].as_u64()
            .unwrap_or_else(|| panic!("[{label}] nbdinfo --json: no number {k:?} in {e:#}"))
    };
    let flag = |k: &str| {
        e[k].as_bool()
            .unwrap_or_else(|| panic!("[{label}] nbdinfo --json: no boolean {k:?} in {e:#}"))
    };
    assert_eq!(
        e["export-name"], "tierlab",
        "[{label}] export name in {e:#}"
    );
    assert_eq!(
        num("export-size"),
        stack.size_bytes,
        "[{label}] export-size in {e:#}"
    );
    assert_eq!(
        num("block_size_minimum"),
        stack.block_min_bytes,
        "[{label}] block_size_minimum in {e:#}"
    );
    assert_eq!(num("block_size_preferred"), 4096, "[{label}] in {e:#}");
    assert_eq!(num("block_size_maximum"), 32 * MIB, "[{label}] in {e:#}");
    assert_eq!(
        flag("is_read_only"),
        read_only,
        "[{label}] is_read_only in {e:#}"
    );
    assert!(flag("can_flush"), "[{label}] can_flush in {e:#}");
    assert_eq!(
        flag("can_multi_conn"),
        stack.multi_conn,
        "[{label}] can_multi_conn in {e:#}"
    );
    if !read_only {
        for k in ["can_fua", "can_trim", "can_zero"] {
            assert!(flag(k), "[{label}] {k} in {e:#}");
        }
    }
    let contexts: Vec<&str> = e["contexts"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
        .unwrap_or_default();
    for c in ["base:allocation", "tierlab:tier"] {
        assert!(
            contexts.contains(&c),
            "[{label}] context {c} missing in {e:#}"
        );
    }
}

fn check_banner(label: &str, stack: &Stack, srv: &Server) {
    assert_eq!(
        srv.tiers,
        stack.tiers,
        "[{label}] tier names\n{}",
        srv.banner.join("\n")
    );
    assert_eq!(
        srv.size_bytes, stack.size_bytes,
        "[{label}] size in the banner"
    );
    assert_eq!(
        srv.blocks,
        (stack.block_min_bytes, 4096, 32 * MIB),
        "[{label}] block sizes in the banner"
    );
    let note = srv
        .banner
        .iter()
        .any(|l| l.contains("CAN_MULTI_CONN is not advertised"));
    assert_eq!(
        note,
        !stack.multi_conn,
        "[{label}] the banner's CAN_MULTI_CONN note\n{}",
        srv.banner.join("\n")
    );
}

/// Waits until the policy counter `name` (summary.json, rewritten every
/// 0.5 s) equals `want`.
fn wait_counter(label: &str, srv: &Server, name: &str, want: u64) {
    poll_until(
        label,
        &format!("run.policy_counters.{name} == {want} in summary.json"),
        Duration::from_secs(10),
        |last| {
            let v = srv.counter(name);
            *last = format!("{name} = {v:?}");
            (v == Some(want as f64)).then_some(())
        },
    );
}

fn nbdinfo_and_map(stack: &'static Stack) {
    let test = format!("{}::nbdinfo_and_map", stack.name);
    if !require(&test, &["nbdinfo", "qemu-io"]) {
        return;
    }
    let mut lab = Lab::new(stack);
    // Background cleaning off, so what the maps show is set by the writes
    // and the trim alone: the cache flushes dirty pages after 1 s idle by
    // default, and flashcache cleans a set the 1 MiB write fills past its
    // threshold — a trim racing such a flush may keep its pages (NBD allows
    // it; the trimmed range is then not all hole). Cleaning is tested in
    // the policies' property tests.
    let set: &[&str] = match stack.name {
        "cache" => &["policy.idle_flush_ms=0"],
        "flashcache" => &["policy.dirty_thresh_pct=100"],
        _ => &[],
    };
    // The stop writes everything back (also HSWD's warm cache), so the
    // slow image alone holds the data afterwards.
    let mut srv = lab.start_with(Opts {
        set,
        write_back_on_stop: true,
        ..Opts::default()
    });
    let label = format!("{} (fresh volume)", stack.name);
    check_banner(&label, stack, &srv);
    let size = stack.size_bytes;
    let (fast, slow) = (stack.written_tier, stack.rest_tier);

    // Before anything reads or writes: fresh sparse images.
    let alloc = nbd_map(&label, &srv.uri, None, size);
    let unwritten = if stack.allocation_known {
        HOLE_ZERO
    } else {
        DATA
    };
    assert_map(
        &label,
        "nbdinfo --map",
        &alloc,
        &layout(size, &[], 0, unwritten),
    );
    let tier = nbd_map(&label, &srv.uri, Some("tierlab:tier"), size);
    assert_map(
        &label,
        "nbdinfo --map=tierlab:tier",
        &tier,
        &layout(size, &[], 0, slow),
    );

    let e = nbdinfo_json(&label, &srv.uri);
    check_export_json(&label, stack, &e, false);

    // Aligned writes: 64 KiB at 1 MiB, 16 KiB across the 4 MiB boundary
    // (sub-LUN 0/1 of ATSMF, band 0/1 of HSWD), 1 MiB at 8 MiB of which
    // the middle 256 KiB is then trimmed (where the map can tell: a trimmed
    // range must then be a hole that reads as zeros).
    let writes = [
        Write {
            offset: MIB,
            len: 64 * KIB,
            pattern: 0xa1,
        },
        Write {
            offset: 4 * MIB - 8 * KIB,
            len: 16 * KIB,
            pattern: 0xb2,
        },
        Write {
            offset: 8 * MIB,
            len: MIB,
            pattern: 0xc3,
        },
    ];
    let trimmed = (8 * MIB + 256 * KIB, 8 * MIB + 512 * KIB);
    let mut cmds: Vec<String> = writes.iter().map(write_cmd).collect();
    let mut written: Vec<(u64, u64)> = writes
        .iter()
        .map(|w| (w.offset, w.offset + w.len))
        .collect();
    let mut model = writes.to_vec();
    if stack.allocation_known {
        cmds.push(format!("discard {} {}", trimmed.0, trimmed.1 - trimmed.0));
        written.pop();
        written.extend([(8 * MIB, trimmed.0), (trimmed.1, 9 * MIB)]);
        model.push(Write {
            offset: trimmed.0,
            len: trimmed.1 - trimmed.0,
            pattern: 0,
        });
    }
    let label = format!("{} (after writes)", stack.name);
    qemu_io(&label, &srv.uri, false, &cmds);
    let alloc = nbd_map(&label, &srv.uri, None, size);
    let want = if stack.allocation_known {
        layout(size, &written, DATA, HOLE_ZERO)
    } else {
        layout(size, &[], 0, DATA)
    };
    assert_map(&label, "nbdinfo --map", &alloc, &want);
    let tier = nbd_map(&label, &srv.uri, Some("tierlab:tier"), size);
    assert_map(
        &label,
        "nbdinfo --map=tierlab:tier",
        &tier,
        &layout(size, &written, fast, slow),
    );
    if let Some(counter) = stack.tier0_counter {
        // The policy's own count of what it holds on tier 0.
        wait_counter(&label, &srv, counter, bytes_with(&tier, 0));
    }
    let stopped = srv.stop();
    eprintln!("[{label}] {stopped}");
    let s = srv.summary().expect("summary.json after the stop");
    for k in ["dirty_bytes", "cached_bytes", "sub_luns_in_memory"] {
        if let Some(v) = s.pointer(&format!("/run/policy_counters/{k}")) {
            assert_eq!(
                v.as_f64(),
                Some(0.0),
                "[{label}] {k} after a clean stop: {v}"
            );
        }
    }

    // The slow image now holds everything: its own layout is the truth.
    let label = format!("{} (restarted)", stack.name);
    let truth = stack.volume_image.map(|img| {
        let t = file_data_ranges(&lab.path(img), size);
        assert_eq!(
            t,
            round_out(&written, stack.drain_granule_bytes),
            "[{label}] data ranges of {img} (SEEK_DATA) after the drain"
        );
        t
    });
    let mut srv = lab.start();
    let alloc = nbd_map(&label, &srv.uri, None, size);
    let want = match &truth {
        Some(t) => layout(size, t, DATA, HOLE_ZERO),
        None => layout(size, &[], 0, DATA),
    };
    assert_map(&label, "nbdinfo --map", &alloc, &want);
    let tier = nbd_map(&label, &srv.uri, Some("tierlab:tier"), size);
    let kept: &[(u64, u64)] = if stack.restart_keeps_cached {
        &written
    } else {
        &[]
    };
    assert_map(
        &label,
        "nbdinfo --map=tierlab:tier",
        &tier,
        &layout(size, kept, fast, slow),
    );
    let windows: Vec<(u64, u64)> = writes
        .iter()
        .map(|w| (w.offset - 64 * KIB, w.offset + w.len + 64 * KIB))
        .collect();
    qemu_io(&label, &srv.uri, false, &verify_cmds(&model, &windows));
    eprintln!("[{label}] {}", srv.stop());

    // Read-only: the flag, refused writes, the data still there.
    let label = format!("{} (--read-only)", stack.name);
    let mut srv = lab.start_with(Opts {
        read_only: true,
        ..Opts::default()
    });
    assert!(srv.read_only, "[{label}] banner lacks `read-only`");
    let e = nbdinfo_json(&label, &srv.uri);
    check_export_json(&label, stack, &e, true);
    // qemu-io refuses to open a read-only export for writing.
    let r = run(
        &label,
        &mut cmd(
            "qemu-io",
            &["-f", "raw", "-c", "write -P 0xee 0 4096", &srv.uri],
        ),
        T_SHORT,
    );
    assert!(
        !r.status.success(),
        "[{label}] a write was accepted: {}",
        r.describe()
    );
    match python_with_nbd() {
        // libnbd checks the flag itself; with strict mode off the request
        // reaches the server, which must refuse it (EPERM).
        Some(py) => {
            let script = r#"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.set_strict_mode(0)
for name, f in [("write", lambda: h.pwrite(b"x" * 4096, 0)),
                ("trim", lambda: h.trim(4096, 0)),
                ("zero", lambda: h.zero(4096, 0))]:
    try:
        f()
        print(name, "ACCEPTED")
    except nbd.Error as e:
        print(name, "refused", e.errnum)
h.shutdown()
"#;
            let r = run_ok(&label, &mut cmd(&py, &["-c", script, &srv.uri]), T_SHORT);
            for op in ["write", "trim", "zero"] {
                let want = format!("{op} refused {}", libc::EPERM);
                assert!(
                    r.stdout.lines().any(|l| l == want),
                    "[{label}] expected `{want}` (EPERM from the server)\n{}",
                    r.describe()
                );
            }
        }
        None => eprintln!(
            "[{label}] python3-nbd not installed: the server-side refusal (strict mode off) is not checked"
        ),
    }
    qemu_io(&label, &srv.uri, true, &verify_cmds(&model, &windows));
    let stopped = srv.stop();
    assert!(
        stopped.contains(" 0 writes,") && stopped.contains(" 0 trims, 0 zeroings"),
        "[{label}] the read-only server counted writes: {stopped}"
    );
}

// ---------------------------------------------------------------------------
// 2. qemu-io patterns at unaligned offsets

fn qemu_io_unaligned(stack: &'static Stack) {
    let test = format!("{}::qemu_io_unaligned", stack.name);
    if !require(&test, &["qemu-io"]) {
        return;
    }
    let g = stack.geometry_bytes;
    let s = stack.size_bytes;
    let k4 = 4 * KIB;
    let mut writes = vec![
        // Odd 4 KiB multiples across a boundary.
        Write {
            offset: g - 3 * k4,
            len: 7 * k4,
            pattern: 0x11,
        },
        // 512-byte aligned, not 4 KiB aligned (qemu read-modify-writes it
        // where the minimum block is 4 KiB).
        Write {
            offset: 2 * g - 3584,
            len: 9216,
            pattern: 0x22,
        },
        // Byte-unaligned across a boundary.
        Write {
            offset: 3 * g - 777,
            len: 5000,
            pattern: 0x33,
        },
        // One byte.
        Write {
            offset: 4 * g + 3 * k4 + 1,
            len: 1,
            pattern: 0x44,
        },
        // About one geometry unit, crossing a boundary, ragged ends.
        Write {
            offset: 5 * g - 20992,
            len: g + 13288,
            pattern: 0x55,
        },
        Write {
            offset: 7 * g + 7 * k4,
            len: 13 * k4,
            pattern: 0x66,
        },
        // The end of the export.
        Write {
            offset: s - 20480 - 512,
            len: 20480,
            pattern: 0x77,
        },
        Write {
            offset: s - 512,
            len: 512,
            pattern: 0x78,
        },
        // Overwrites: part of an earlier write, unaligned; zeros (WRITE_ZEROES)
        // over the boundary of the big one.
        Write {
            offset: 2 * g + 1000,
            len: 100,
            pattern: 0x99,
        },
        Write {
            offset: 5 * g - 8 * k4,
            len: 16 * k4,
            pattern: 0,
        },
        Write {
            offset: g - k4 - 100,
            len: 300,
            pattern: 0xab,
        },
    ];
    // Past 100 MiB too (well inside a 256 MiB volume), a 3 MiB write.
    writes.push(Write {
        offset: 100 * MIB + 4608,
        len: 3 * MIB + 1,
        pattern: 0xcd,
    });
    let mut cmds: Vec<String> = writes.iter().map(write_cmd).collect();
    // A FUA write (qemu-io -f), odd 4 KiB multiples across a boundary.
    let w = Write {
        offset: 9 * g - 5 * k4,
        len: 11 * k4,
        pattern: 0xe1,
    };
    cmds.push(format!("write -f -P 0xe1 {} {}", w.offset, w.len));
    writes.push(w);
    // WRITE_ZEROES that may punch a hole (-u) inside the 3 MiB write.
    let w = Write {
        offset: 101 * MIB,
        len: 256 * KIB,
        pattern: 0,
    };
    cmds.push(format!("write -z -u {} {}", w.offset, w.len));
    writes.push(w);
    // A trim, then a write of the same range: the write wins.
    let w = Write {
        offset: 102 * MIB + 4096,
        len: 512 * KIB,
        pattern: 0xd7,
    };
    cmds.push(format!("discard {} {}", w.offset, w.len));
    cmds.push(write_cmd(&w));
    writes.push(w);
    let windows: Vec<(u64, u64)> = writes
        .iter()
        .map(|w| {
            (
                w.offset.saturating_sub(8 * KIB),
                (w.offset + w.len + 8 * KIB).min(s),
            )
        })
        .collect();
    let mut lab = Lab::new(stack);
    let mut srv = lab.start();
    let label = format!("{} (write, read back)", stack.name);
    cmds.extend(verify_cmds(&writes, &windows));
    qemu_io(&label, &srv.uri, false, &cmds);
    eprintln!("[{label}] {}", srv.stop());
    let label = format!("{} (after a clean restart)", stack.name);
    let mut srv = lab.start();
    qemu_io(&label, &srv.uri, false, &verify_cmds(&writes, &windows));
    eprintln!("[{label}] {}", srv.stop());
}

/// Once the map and summary.json have settled (the summary lags up to
/// 0.5 s; cleaning or write-back may still run), what the `tierlab:tier`
/// map puts on tier 0 agrees with the policy's own counters: HSWD's
/// `cached_bytes` equal it; a cache holds at most its capacity, its dirty
/// bytes among them; ATSMF's tier 0 is whole sub-LUNs, `sub_luns_in_memory`
/// of them; a single-tier stack is all tier 0. Returns the tier-0 bytes.
fn tier0_agrees_with_counters(label: &str, stack: &Stack, srv: &Server) -> u64 {
    let size = stack.size_bytes;
    poll_until(
        label,
        "the tierlab:tier map agrees with run.policy_counters",
        Duration::from_secs(20),
        |last| {
            let before = nbd_map(label, &srv.uri, Some("tierlab:tier"), size);
            let c = srv.summary()?.pointer("/run/policy_counters")?.clone();
            let after = nbd_map(label, &srv.uri, Some("tierlab:tier"), size);
            let t0 = bytes_with(&after, 0);
            let get = |k: &str| c[k].as_f64().unwrap_or(f64::NAN);
            *last = format!(
                "counters: {c}\nmap ({} extents):\n{}",
                after.len(),
                fmt_map(&after[..after.len().min(40)])
            );
            let ok = match stack.name {
                "hswd" => get("cached_bytes") == t0 as f64 && bytes_with(&after, 2) == 0,
                "cache" | "flashcache" => t0 <= 32 * MIB && get("dirty_bytes") <= t0 as f64,
                "atsmf" => {
                    get("sub_luns_in_memory") * (4 * MIB) as f64 == t0 as f64
                        && after
                            .iter()
                            .filter(|e| e.flags == 0)
                            .all(|e| e.offset % (4 * MIB) == 0 && e.len % (4 * MIB) == 0)
                }
                _ => t0 == size,
            };
            (before == after && ok).then_some(t0)
        },
    )
}

// ---------------------------------------------------------------------------
// 3. nbdcopy + qemu-img compare

const COPY_BYTES: usize = 64 << 20;

fn nbdcopy_compare(stack: &'static Stack) {
    let test = format!("{}::nbdcopy_compare", stack.name);
    if !require(&test, &["nbdcopy", "qemu-img", "nbdinfo"]) {
        return;
    }
    let mut lab = Lab::new(stack);
    let reference = lab.path("reference.img");
    let data = random_bytes(
        COPY_BYTES,
        0x5eed ^ stack.size_bytes ^ stack.name.len() as u64,
    );
    std::fs::write(&reference, &data).expect("write the reference");
    let mut srv = lab.start();
    let label = format!("{} (nbdcopy in)", stack.name);
    let r = lab.path("reference.img");
    run_ok(
        &label,
        &mut cmd("nbdcopy", &["--flush", r.to_str().unwrap(), &srv.uri]),
        T_LONG,
    );
    let compare = |label: &str, uri: &str| {
        let r = run(
            label,
            &mut cmd(
                "qemu-img",
                &[
                    "compare",
                    "-f",
                    "raw",
                    "-F",
                    "raw",
                    reference.to_str().unwrap(),
                    uri,
                ],
            ),
            T_LONG,
        );
        assert!(
            r.status.success() && r.stdout.contains("Images are identical"),
            "[{label}] the export differs from the reference (the first 64 MiB, the rest zeros): {}",
            r.describe()
        );
    };
    compare(&label, &srv.uri);
    let t0 = tier0_agrees_with_counters(&label, stack, &srv);
    if stack.name == "hswd" {
        // 64 MiB through a 28 MiB data area: bands were cleaned.
        let rmw = srv.counter("rmw_count").unwrap_or(0.0);
        assert!(
            rmw > 0.0,
            "[{label}] 64 MiB through a 28 MiB PCache but rmw_count = {rmw}"
        );
    }
    if stack.name.contains("cache") {
        assert!(t0 > 0, "[{label}] nothing cached after 64 MiB of writes");
    }
    eprintln!("[{label}] {}", srv.stop());

    let label = format!("{} (restarted, nbdcopy out)", stack.name);
    let mut srv = lab.start();
    let copy = lab.path("copy.img");
    run_ok(
        &label,
        &mut cmd("nbdcopy", &[&srv.uri, copy.to_str().unwrap()]),
        T_LONG,
    );
    let got = std::fs::read(&copy).expect("read the copy");
    assert_eq!(
        got.len() as u64,
        stack.size_bytes,
        "[{label}] size of the copy"
    );
    if let Some(i) = (0..COPY_BYTES).find(|&i| got[i] != data[i]) {
        panic!(
            "[{label}] byte {i} of the copy is {:#04x}, the reference has {:#04x}",
            got[i], data[i]
        );
    }
    if let Some(i) = got[COPY_BYTES..].iter().position(|&b| b != 0) {
        panic!("[{label}] byte {} of the copy is not zero", COPY_BYTES + i);
    }
    eprintln!("[{label}] {}", srv.stop());
}

// ---------------------------------------------------------------------------
// 4. fio, 4 connections, verify

/// Bytes each fio job writes (its region), then verifies.
const FIO_JOB_BYTES: u64 = 24 * MIB;

/// Where each fio job's region starts: off any 4 MiB boundary.
fn fio_regions() -> [u64; 4] {
    [0, 1, 2, 3].map(|j| j * 32 * MIB + 2 * MIB + j * 36 * KIB)
}

fn fio_job(stack: &Stack, uri: &str) -> String {
    let bs_min = if stack.block_min_bytes >= 4096 {
        "4k"
    } else {
        "512"
    };
    let mut job = format!(
        "[global]\nioengine=nbd\nuri={uri}\nrw=randwrite\nbsrange={bs_min}-32k\niodepth=8\n\
         verify=crc32c\nverify_fatal=1\ndo_verify=1\nfsync=8\nsize={FIO_JOB_BYTES}\nrandseed=4242\n"
    );
    // Each job its own region, starting off any 4 MiB boundary.
    for (j, offset) in fio_regions().iter().enumerate() {
        job.push_str(&format!("[j{j}]\noffset={offset}\n"));
    }
    job
}

fn fio_json(label: &str, path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("[{label}] {e}"));
    // fio may print notes before the JSON document.
    let start = text.find('{').unwrap_or(0);
    serde_json::from_str(&text[start..])
        .unwrap_or_else(|e| panic!("[{label}] fio JSON: {e}\n{text}"))
}

/// Asserts every job ended without error and read back (verified) its
/// whole region; returns the sum of the jobs' syncs.
fn check_fio_jobs(label: &str, v: &serde_json::Value, ran: &Ran) -> u64 {
    let jobs = v["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("[{label}] no jobs: {v}"));
    assert_eq!(jobs.len(), 4, "[{label}] fio jobs");
    let mut syncs = 0;
    for j in jobs {
        let name = j["jobname"].as_str().unwrap_or("?");
        assert_eq!(
            j["error"].as_u64(),
            Some(0),
            "[{label}] fio job {name}: error {} (a verify error is EILSEQ = 84)\n{}",
            j["error"],
            ran.describe()
        );
        assert_eq!(
            j["read"]["io_bytes"].as_u64(),
            Some(FIO_JOB_BYTES),
            "[{label}] fio job {name} verified {} bytes of {FIO_JOB_BYTES}",
            j["read"]["io_bytes"]
        );
        syncs += j["sync"]["total_ios"].as_u64().unwrap_or(0);
    }
    syncs
}

fn fio_verify(stack: &'static Stack) {
    let test = format!("{}::fio_verify", stack.name);
    if !require_fio_nbd(&test) {
        return;
    }
    let mut lab = Lab::new(stack);
    let mut srv = lab.start();
    let label = format!("{} (fio randwrite + verify, 4 connections)", stack.name);
    let job = lab.path("verify.fio");
    std::fs::write(&job, fio_job(stack, &srv.uri)).expect("job file");
    let out = lab.path("fio.json");
    let r = run(
        &label,
        Command::new("fio")
            .arg("--output-format=json")
            .arg(format!("--output={}", out.display()))
            .arg(&job)
            .current_dir(lab.dir.path()),
        T_LONG,
    );
    assert!(
        r.status.success(),
        "[{label}] {}\n{}",
        r.describe(),
        std::fs::read_to_string(&out).unwrap_or_default()
    );
    let syncs = check_fio_jobs(&label, &fio_json(&label, &out), &r);
    assert!(syncs > 0, "[{label}] fio issued no FLUSH");
    // fio wrote every block of its four regions, nothing else.
    let regions: Vec<(u64, u64)> = fio_regions()
        .iter()
        .map(|&o| (o, o + FIO_JOB_BYTES))
        .collect();
    let alloc = nbd_map(&label, &srv.uri, None, stack.size_bytes);
    if stack.allocation_known {
        // Data: the regions, widened at most to what the slow device writes
        // at once (HSWD cleans whole bands).
        let data: Vec<(u64, u64)> = alloc
            .iter()
            .filter(|e| e.flags == DATA)
            .map(|e| (e.offset, e.offset + e.len))
            .collect();
        let widest = round_out(&regions, stack.drain_granule_bytes);
        let covered = regions
            .iter()
            .all(|&(s, e)| data.iter().any(|&(ds, de)| ds <= s && e <= de));
        let within = data
            .iter()
            .all(|&(s, e)| widest.iter().any(|&(ws, we)| ws <= s && e <= we));
        let kinds_ok = alloc
            .iter()
            .all(|e| e.flags == DATA || e.flags == HOLE_ZERO);
        assert!(
            covered && within && kinds_ok,
            "[{label}] nbdinfo --map after fio: data must cover the regions {regions:?} and lie \
             within {widest:?}, the rest hole+zero\n{}",
            fmt_map(&alloc)
        );
    } else {
        assert_map(
            &label,
            "nbdinfo --map after fio",
            &alloc,
            &layout(stack.size_bytes, &[], 0, DATA),
        );
    }
    tier0_agrees_with_counters(&label, stack, &srv);
    eprintln!("[{label}] {}", srv.stop());
    let s = srv.summary().expect("summary.json");
    let flushes = s.pointer("/serve/requests/flush").and_then(|v| v.as_u64());
    assert_eq!(
        flushes,
        Some(syncs),
        "[{label}] the server counted {flushes:?} FLUSH requests, fio issued {syncs}"
    );
    let label = format!("{} (restarted, fio --verify_only)", stack.name);
    let mut srv = lab.start();
    std::fs::write(&job, fio_job(stack, &srv.uri)).expect("job file");
    let out = lab.path("fio-verify.json");
    let r = run(
        &label,
        Command::new("fio")
            .arg("--output-format=json")
            .arg(format!("--output={}", out.display()))
            .arg("--verify_only")
            .arg(&job)
            .current_dir(lab.dir.path()),
        T_LONG,
    );
    assert!(
        r.status.success(),
        "[{label}] {}\n{}",
        r.describe(),
        std::fs::read_to_string(&out).unwrap_or_default()
    );
    check_fio_jobs(&label, &fio_json(&label, &out), &r);
    eprintln!("[{label}] {}", srv.stop());
}

// ---------------------------------------------------------------------------
// 5. ext4 over nbdfuse + a loop device

fn is_root() -> bool {
    // SAFETY: no arguments, no side effects.
    unsafe { libc::geteuid() == 0 }
}

/// nbdfuse's file, a loop device on it, and a mount: torn down in reverse
/// order on drop, whatever happened.
struct FsRig {
    label: String,
    fuse_dir: PathBuf,
    mnt: PathBuf,
    nbdfuse: Option<Child>,
    nbdfuse_err: PathBuf,
    loop_dev: Option<String>,
    mounted: bool,
}

impl FsRig {
    fn attach(label: &str, lab: &Lab, srv: &Server, tag: &str) -> FsRig {
        let fuse_dir = lab.path(&format!("fuse-{tag}"));
        let mnt = lab.path("mnt");
        std::fs::create_dir_all(&fuse_dir).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        let pidfile = lab.path(&format!("nbdfuse-{tag}.pid"));
        let nbdfuse_err = lab.path(&format!("nbdfuse-{tag}.stderr"));
        let child = Command::new("nbdfuse")
            .arg("-P")
            .arg(&pidfile)
            .arg(&fuse_dir)
            .arg(&srv.uri)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&nbdfuse_err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("[{label}] nbdfuse: {e}"));
        let mut rig = FsRig {
            label: label.to_string(),
            fuse_dir,
            mnt,
            nbdfuse: Some(child),
            nbdfuse_err,
            loop_dev: None,
            mounted: false,
        };
        let file = rig.fuse_dir.join("nbd");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = std::fs::read_to_string(&pidfile).is_ok_and(|p| !p.trim().is_empty())
                && std::fs::metadata(&file).is_ok_and(|m| m.len() == srv.size_bytes);
            if ready {
                break;
            }
            if let Some(Ok(Some(st))) = rig.nbdfuse.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "[{label}] nbdfuse exited ({st}): {}",
                    std::fs::read_to_string(&rig.nbdfuse_err).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "[{label}] nbdfuse: {} did not appear with {} bytes",
                file.display(),
                srv.size_bytes
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // The loop device's logical blocks must be whole NBD minimum
        // blocks: libnbd refuses smaller requests.
        let sector = srv.blocks.0.max(512).to_string();
        let r = run_ok(
            label,
            &mut cmd(
                "losetup",
                &[
                    "--direct-io=on",
                    "--sector-size",
                    &sector,
                    "-f",
                    "--show",
                    file.to_str().unwrap(),
                ],
            ),
            T_SHORT,
        );
        rig.loop_dev = Some(r.stdout.trim().to_string());
        rig
    }

    fn dev(&self) -> &str {
        self.loop_dev.as_deref().expect("loop device")
    }

    fn mount(&mut self) {
        run_ok(
            &self.label,
            &mut cmd(
                "mount",
                &["-t", "ext4", self.dev(), self.mnt.to_str().unwrap()],
            ),
            T_SHORT,
        );
        self.mounted = true;
    }

    fn umount(&mut self) {
        run_ok(
            &self.label,
            &mut cmd("umount", &[self.mnt.to_str().unwrap()]),
            T_SHORT,
        );
        self.mounted = false;
    }

    fn fsck(&self) {
        let r = run(
            &self.label,
            &mut cmd("fsck.ext4", &["-fn", self.dev()]),
            T_LONG,
        );
        assert!(
            r.status.success(),
            "[{}] fsck.ext4 -fn is not clean: {}",
            self.label,
            r.describe()
        );
    }

    /// Unmounts, detaches the loop device and unmounts nbdfuse (which then
    /// exits, closing its connections); panics on failure unless quiet.
    fn teardown(&mut self, quiet: bool) {
        let check = |what: &str, ok: bool| {
            if !ok && !quiet {
                panic!("[{}] teardown: {what} failed", self.label);
            }
        };
        let status = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if self.mounted {
            let mnt = self.mnt.to_str().unwrap().to_string();
            let ok = status("umount", &[&mnt]) || {
                std::thread::sleep(Duration::from_millis(500));
                status("umount", &[&mnt])
            };
            if !ok {
                status("umount", &["-l", &mnt]);
            }
            self.mounted = false;
            check("umount", ok);
        }
        if let Some(dev) = self.loop_dev.take() {
            check("losetup -d", status("losetup", &["-d", &dev]));
        }
        if let Some(mut child) = self.nbdfuse.take() {
            let dir = self.fuse_dir.to_str().unwrap().to_string();
            // The loop device lets go of the file asynchronously.
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut ok = false;
            while Instant::now() < deadline {
                if status("fusermount3", &["-u", &dir]) {
                    ok = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if !ok {
                status("fusermount3", &["-u", "-z", &dir]);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
            check("fusermount3 -u", ok);
        }
    }
}

impl Drop for FsRig {
    fn drop(&mut self) {
        self.teardown(true);
    }
}

/// The tree: (relative path, content seed, size).
fn tree() -> Vec<(String, u64, usize)> {
    let mut files = Vec::new();
    for i in 0..300u64 {
        let path = format!("d{}/s{}/t{}/f{i:03}.bin", i % 6, (i / 6) % 5, (i / 30) % 2);
        let size = ((i * 7919) % 20_000) as usize + if i % 50 == 0 { 70_000 } else { 0 };
        files.push((path, 1000 + i, size));
    }
    files.push(("big0.bin".into(), 7, 6 << 20));
    files.push(("d1/big1.bin".into(), 8, (9 << 19) + 123));
    files
}

fn write_tree(label: &str, root: &Path) {
    for (rel, seed, size) in tree() {
        let p = root.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, random_bytes(size, seed))
            .unwrap_or_else(|e| panic!("[{label}] write {}: {e}", p.display()));
    }
    // SAFETY: no arguments.
    unsafe { libc::sync() };
}

fn check_tree(label: &str, root: &Path) {
    let files = tree();
    for (rel, seed, size) in &files {
        let p = root.join(rel);
        let got =
            std::fs::read(&p).unwrap_or_else(|e| panic!("[{label}] read {}: {e}", p.display()));
        assert!(
            got == random_bytes(*size, *seed),
            "[{label}] {rel}: content differs ({} bytes, {size} written)",
            got.len()
        );
    }
    fn count(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let t = e.file_type().unwrap();
                if t.is_dir() {
                    if e.file_name() == "lost+found" {
                        0
                    } else {
                        count(&e.path())
                    }
                } else {
                    1
                }
            })
            .sum()
    }
    assert_eq!(count(root), files.len(), "[{label}] files in the tree");
}

fn ext4(stack: &'static Stack) {
    let test = format!("{}::ext4", stack.name);
    if !is_root() {
        eprintln!("skipped {test}: needs root (losetup, mount)");
        return;
    }
    if !Path::new("/dev/fuse").exists() {
        eprintln!("skipped {test}: /dev/fuse is missing");
        return;
    }
    if !require(
        &test,
        &[
            "nbdfuse",
            "fusermount3",
            "losetup",
            "mkfs.ext4",
            "fsck.ext4",
            "mount",
            "umount",
        ],
    ) {
        return;
    }
    let probe = Command::new("losetup").arg("-f").output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped {test}: no free loop device (losetup -f: {probe:?})");
        return;
    }
    let mut lab = Lab::new(stack);
    let mut srv = lab.start();
    let label = format!("{} (ext4, first run)", stack.name);
    {
        let mut rig = FsRig::attach(&label, &lab, &srv, "1");
        run_ok(
            &label,
            &mut cmd(
                "mkfs.ext4",
                &[
                    "-F",
                    "-q",
                    "-b",
                    "4096",
                    "-E",
                    "lazy_itable_init=0,lazy_journal_init=0",
                    rig.dev(),
                ],
            ),
            T_LONG,
        );
        rig.mount();
        write_tree(&label, &rig.mnt);
        rig.umount();
        rig.fsck();
        rig.mount();
        check_tree(&label, &rig.mnt);
        rig.umount();
        rig.teardown(false);
    }
    eprintln!("[{label}] {}", srv.stop());
    let label = format!("{} (ext4, after a clean restart)", stack.name);
    let mut srv = lab.start();
    {
        let mut rig = FsRig::attach(&label, &lab, &srv, "2");
        rig.fsck();
        rig.mount();
        check_tree(&label, &rig.mnt);
        rig.umount();
        rig.teardown(false);
    }
    eprintln!("[{label}] {}", srv.stop());
}

// ---------------------------------------------------------------------------
// 6. SIGTERM under load: every acknowledged write survives

/// Writes 4 KiB pages at random in a region, up to DEPTH in flight and never
/// two in flight on one page (a share HOT of them in the region's first
/// quarter), until the connection dies (the server stops) or MAX_S passes. Page content: its sequence number (8 bytes LE) repeated.
/// Prints `writing` once connected, then JSON: per page the last
/// acknowledged sequence number, and the one in flight when it ended.
const ACKED_WRITER: &str = r#"
import nbd, sys, random, time, json
uri, off, length, depth, max_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
hot = float(sys.argv[6])  # share of writes to the first quarter of the region
h = nbd.NBD()
h.connect_uri(uri)
pages = length // 4096
rng = random.Random(7)
acked, inflight, busy = {}, {}, set()
seq, dead = 0, None
print("writing", flush=True)
start = time.time()
try:
    while time.time() - start < max_s:
        while len(inflight) < depth:
            p = rng.randrange(pages // 4) if rng.random() < hot else rng.randrange(pages)
            if p in busy:
                continue
            seq += 1
            buf = nbd.Buffer.from_bytearray(bytearray(seq.to_bytes(8, "little") * 512))
            inflight[h.aio_pwrite(buf, off + p * 4096)] = (p, seq, buf)
            busy.add(p)
        h.poll(-1)
        for c in list(inflight):
            if h.aio_command_completed(c):
                p, s, _ = inflight.pop(c)
                busy.discard(p)
                acked[p] = s
except nbd.Error as e:
    dead = str(e)
# The first error (ESHUTDOWN for a request sent after the stop began)
# ends the writing, not the replies: those of requests the server took
# before may still be on their way, so keep reading until every command
# is answered or the connection is gone (a server that hung up early is
# still caught: its commands stay unanswered).
refused = {}
deadline = time.time() + 10
while inflight and time.time() < deadline:
    for c in list(inflight):
        try:
            if h.aio_command_completed(c):
                p, s, _ = inflight.pop(c)
                acked[p] = s
        except nbd.Error:
            refused[c] = inflight.pop(c)
    if not inflight:
        break
    try:
        h.poll(100)
    except nbd.Error:
        break
inflight.update(refused)
pending = {p: s for (p, s, _) in inflight.values()}
print(json.dumps({"dead": dead, "seq": seq, "acked": acked, "pending": pending}))
"#;

/// Runs ACKED_WRITER against `srv` for `load_ms`, then stops the server
/// with SIGTERM (asserting a clean exit); returns the writer's log.
fn write_then_sigterm(
    label: &str,
    py: &str,
    srv: &mut Server,
    region: (u64, u64),
    load_ms: u64,
) -> serde_json::Value {
    let mut writer = Command::new(py)
        .args([
            "-c",
            ACKED_WRITER,
            &srv.uri,
            &region.0.to_string(),
            &(region.1 - region.0).to_string(),
            "16",
            "60",
            "0.8",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut out = std::io::BufReader::new(writer.stdout.take().unwrap());
    let mut first = String::new();
    use std::io::BufRead;
    out.read_line(&mut first).expect("writer output");
    assert_eq!(
        first.trim(),
        "writing",
        "[{label}] the writer did not start"
    );
    std::thread::sleep(Duration::from_millis(load_ms));
    let stopped = srv.stop_with(libc::SIGTERM, "SIGTERM");
    eprintln!("[{label}] {stopped}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = writer.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut writer.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        status.success(),
        "[{label}] the writer failed ({status}):\n{rest}\n{err}"
    );
    let log: serde_json::Value = serde_json::from_str(rest.trim())
        .unwrap_or_else(|e| panic!("[{label}] writer log: {e}\n{rest}\n{err}"));
    assert!(
        !log["dead"].is_null(),
        "[{label}] the writer ran out of time: the server kept serving after SIGTERM"
    );
    log
}

fn stop_under_load(stack: &'static Stack) {
    let test = format!("{}::sigterm_under_load", stack.name);
    if !require(&test, &["nbdcopy"]) {
        return;
    }
    let Some(py) = python_with_nbd() else {
        eprintln!("skipped {test}: python3-nbd not installed (apt-get install python3-libnbd)");
        return;
    };
    let region = (8 * MIB, 40 * MIB); // more than a cache, across sub-LUNs and bands
    let mut lab = Lab::new(stack);
    let mut srv = lab.start();
    let label = format!("{} (SIGTERM while writing)", stack.name);
    // ATSMF: long enough for a period (2 s) to find the hot 8 MiB and
    // promote it, so the stop drains sub-LUNs that are being written.
    let load = if stack.name == "atsmf" { 4000 } else { 1500 };
    let log = write_then_sigterm(&label, &py, &mut srv, region, load);
    let c = srv
        .summary()
        .and_then(|s| s.pointer("/run/policy_counters").cloned());
    eprintln!("[{label}] policy counters at the stop: {c:?}");
    if stack.name == "atsmf" {
        let promotions = c
            .as_ref()
            .and_then(|c| c["promotions"].as_f64())
            .unwrap_or(0.0);
        assert!(
            promotions > 0.0,
            "[{label}] no promotion under a hot load: {c:?}"
        );
    }
    let acked = log["acked"].as_object().expect("acked");
    let pending = log["pending"].as_object().expect("pending");
    assert!(
        acked.len() > 100,
        "[{label}] only {} pages acknowledged",
        acked.len()
    );

    let label = format!("{} (restarted after SIGTERM)", stack.name);
    let mut srv = lab.start();
    let copy = lab.path("copy.img");
    run_ok(
        &label,
        &mut cmd("nbdcopy", &[&srv.uri, copy.to_str().unwrap()]),
        T_LONG,
    );
    eprintln!("[{label}] {}", srv.stop());
    let img = std::fs::read(&copy).unwrap();
    let pages = ((region.1 - region.0) / 4096) as usize;
    let mut lost = Vec::new();
    for p in 0..pages {
        let at = region.0 as usize + p * 4096;
        let page = &img[at..at + 4096];
        let seq = u64::from_le_bytes(page[..8].try_into().unwrap());
        let whole = page.chunks(8).all(|c| c == &page[..8]);
        let key = p.to_string();
        let a = acked.get(&key).and_then(|v| v.as_u64()).unwrap_or(0);
        let f = pending.get(&key).and_then(|v| v.as_u64());
        if !whole || !(seq == a || Some(seq) == f) {
            lost.push(format!(
                "page {p} (offset {at}): holds {} but the last acknowledged write is {a}{}",
                if whole {
                    format!("write {seq}")
                } else {
                    "a torn mix".into()
                },
                f.map(|f| format!(" (write {f} was in flight)"))
                    .unwrap_or_default()
            ));
        }
    }
    assert!(
        lost.is_empty(),
        "[{label}] {} of {} pages lost acknowledged data after a SIGTERM stop, e.g.:\n{}",
        lost.len(),
        pages,
        lost[..lost.len().min(20)].join("\n")
    );
    eprintln!(
        "[{label}] {} pages acknowledged, {} in flight at the stop: all as expected",
        acked.len(),
        pending.len()
    );
}

/// At a stop the NBD spec (doc/proto.md, "Terminating the transmission
/// phase") says the server SHOULD let in-flight requests finish before a
/// hard disconnect and SHOULD answer requests received after that with
/// NBD_ESHUTDOWN, upon which the client MUST do a soft disconnect. A server
/// that instead closed each connection as soon as its requests were
/// answered (this one did, once) cut a pipelining client mid-send: libnbd's
/// next send fails, the handle goes DEAD and every command in flight fails,
/// replies already sent included — the client is told writes failed that
/// the server executed and made durable. Every write the server counted
/// must be one the client saw acknowledged.
#[test]
fn sigterm_answers_every_request_it_executed() {
    let test = "sigterm_answers_every_request_it_executed";
    let Some(py) = python_with_nbd() else {
        eprintln!("skipped {test}: python3-nbd not installed (apt-get install python3-libnbd)");
        return;
    };
    let mut lab = Lab::new(&FILE);
    let mut srv = lab.start();
    let label = "file (SIGTERM while writing)";
    let log = write_then_sigterm(label, &py, &mut srv, (8 * MIB, 40 * MIB), 1000);
    let serve = srv
        .summary()
        .and_then(|s| s.get("serve").cloned())
        .expect("summary.json: serve");
    let executed = serve["requests"]["write"]
        .as_u64()
        .expect("serve.requests.write");
    let issued = log["seq"].as_u64().unwrap();
    let pending = log["pending"].as_object().unwrap().len() as u64;
    let acked = issued - pending;
    assert_eq!(
        acked, executed,
        "[{label}] the server executed {executed} writes, the client got {acked} \
         acknowledgements ({pending} of {issued} failed; the connection ended with {}; \
         the server's replies_dropped: {})",
        log["dead"], serve["replies_dropped"]
    );
}

// ---------------------------------------------------------------------------
// The six stacks

macro_rules! stack_tests {
    ($($module:ident => $stack:expr;)*) => {$(
        mod $module {
            use super::*;
            #[test]
            fn nbdinfo_and_map() {
                super::nbdinfo_and_map(&$stack);
            }
            #[test]
            fn qemu_io_unaligned() {
                super::qemu_io_unaligned(&$stack);
            }
            #[test]
            fn nbdcopy_compare() {
                super::nbdcopy_compare(&$stack);
            }
            #[test]
            fn fio_verify() {
                super::fio_verify(&$stack);
            }
            #[test]
            fn ext4() {
                super::ext4(&$stack);
            }
            #[test]
            fn sigterm_under_load() {
                super::stop_under_load(&$stack);
            }
        }
    )*};
}

stack_tests! {
    file => FILE;
    cache => CACHE;
    flashcache => FLASHCACHE;
    atsmf => ATSMF;
    hswd => HSWD;
    raid5 => RAID5;
}

// ---------------------------------------------------------------------------
// ATSMF: a hot region is promoted, the map and the counters agree

#[test]
fn atsmf_promotion_shows_in_tier_map() {
    let test = "atsmf_promotion_shows_in_tier_map";
    if !require(test, &["nbdinfo", "qemu-io"]) || !require_fio_nbd(test) {
        return;
    }
    let stack = &ATSMF;
    let sub_lun = 4 * MIB;
    let size = stack.size_bytes;
    let hot = (10 * MIB, 18 * MIB); // sub-LUNs 2, 3, 4
    let hot_cover = (8 * MIB, 20 * MIB);
    let mut lab = Lab::new(stack);
    let mut srv = lab.start();
    let label = "atsmf (hot region)";
    let mut writes = vec![
        Write {
            offset: hot.0,
            len: hot.1 - hot.0,
            pattern: 0x5a,
        },
        Write {
            offset: 40 * MIB,
            len: MIB,
            pattern: 0x6b,
        },
    ];
    qemu_io(
        label,
        &srv.uri,
        false,
        &writes.iter().map(write_cmd).collect::<Vec<_>>(),
    );
    let tier = nbd_map(label, &srv.uri, Some("tierlab:tier"), size);
    assert_map(
        label,
        "tierlab:tier before any period",
        &tier,
        &layout(size, &[], 0, 1),
    );

    // Random reads over the hot region, in the background, for up to 40 s.
    let fio_out = lab.path("fio-hot.txt");
    struct KillOnDrop(Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut fio = KillOnDrop(
        Command::new("fio")
            .args([
                "--name=hot",
                "--ioengine=nbd",
                &format!("--uri={}", srv.uri),
                "--rw=randread",
                "--bs=4k",
                "--iodepth=4",
                &format!("--offset={}", hot.0),
                &format!("--size={}", hot.1 - hot.0),
                "--time_based",
                "--runtime=40",
                &format!("--output={}", fio_out.display()),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fio"),
    );
    let started = Instant::now();
    // Poll: map, counters, map again (unchanged), until memory holds part
    // of the hot region and the counters say the same.
    let (tier, counters) = poll_until(
        label,
        "promotion of the hot region",
        Duration::from_secs(30),
        |last| {
            let before = nbd_map(label, &srv.uri, Some("tierlab:tier"), size);
            let s = srv.summary()?;
            let after = nbd_map(label, &srv.uri, Some("tierlab:tier"), size);
            let c = s.pointer("/run/policy_counters")?.clone();
            let get = |k: &str| c[k].as_f64().unwrap_or(-1.0);
            *last = format!("map:\n{}\ncounters: {c}", fmt_map(&after));
            let t0 = bytes_with(&after, 0);
            let in_memory = get("sub_luns_in_memory");
            let ok = before == after
                && t0 > 0
                && get("moves_queued") == 0.0
                && in_memory * sub_lun as f64 == t0 as f64
                && get("promotions") >= in_memory;
            ok.then_some((after, c))
        },
    );
    eprintln!(
        "[{label}] promoted after {:.1} s: {counters}",
        started.elapsed().as_secs_f64()
    );
    // Tier 0 lies on whole sub-LUNs of the hot region only.
    for e in tier.iter().filter(|e| e.flags == 0) {
        assert!(
            e.offset % sub_lun == 0
                && e.len % sub_lun == 0
                && e.offset >= hot_cover.0
                && e.offset + e.len <= hot_cover.1,
            "[{label}] tier 0 outside the hot sub-LUNs {hot_cover:?}:\n{}",
            fmt_map(&tier)
        );
    }
    let alloc = nbd_map(label, &srv.uri, None, size);
    for e in alloc.iter().filter(|e| e.flags != DATA) {
        assert!(
            e.offset + e.len <= hot.0 || e.offset >= hot.1,
            "[{label}] the hot region is not all data in memory:\n{}",
            fmt_map(&alloc)
        );
    }
    // While promoted: the data reads back, and new writes land in memory.
    writes.push(Write {
        offset: 12 * MIB + 512,
        len: MIB - 1024,
        pattern: 0x7c,
    });
    let mut cmds = vec![write_cmd(writes.last().unwrap())];
    let windows = [
        (hot.0 - MIB, hot.1 + MIB),
        (40 * MIB - 4096, 41 * MIB + 4096),
    ];
    cmds.extend(verify_cmds(&writes, &windows));
    qemu_io(label, &srv.uri, false, &cmds);
    // SAFETY: a signal to our own child (fio ends its jobs on SIGTERM).
    unsafe {
        libc::kill(fio.0.id() as i32, libc::SIGTERM);
    }
    let st = fio.0.wait().expect("fio");
    // fio exits non-zero when a signal ended it: judge its report.
    let report = std::fs::read_to_string(&fio_out).unwrap_or_default();
    assert!(
        report.contains("err= 0"),
        "[{label}] fio ({st}) reports an error:\n{report}"
    );
    let stopped = srv.stop();
    eprintln!("[{label}] {stopped}");
    // The clean stop demoted everything to flash.
    let c = srv
        .summary()
        .expect("summary.json")
        .pointer("/run/policy_counters")
        .cloned()
        .unwrap();
    assert_eq!(
        c["sub_luns_in_memory"].as_f64(),
        Some(0.0),
        "[{label}] after the stop: {c}"
    );
    assert_eq!(
        c["memory_bytes"].as_f64(),
        Some(0.0),
        "[{label}] after the stop: {c}"
    );
    assert_eq!(
        c["promotions"].as_f64(),
        c["demotions"].as_f64(),
        "[{label}] every promoted sub-LUN demoted at the stop: {c}"
    );
    let label = "atsmf (restarted)";
    let mut srv = lab.start();
    let tier = nbd_map(label, &srv.uri, Some("tierlab:tier"), size);
    assert_map(
        label,
        "tierlab:tier after a clean restart",
        &tier,
        &layout(size, &[], 0, 1),
    );
    qemu_io(label, &srv.uri, false, &verify_cmds(&writes, &windows));
    eprintln!("[{label}] {}", srv.stop());
}

// ---------------------------------------------------------------------------
// TCP, a custom export name

#[test]
fn tcp_with_export_name() {
    let test = "tcp_with_export_name";
    if !require(test, &["nbdinfo", "qemu-io", "nbdcopy", "qemu-img"]) {
        return;
    }
    let stack = &CACHE;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut lab = Lab::new(stack);
    let mut srv = lab.start_with(Opts {
        tcp: Some(&addr),
        export: Some("tcpdisk"),
        ..Opts::default()
    });
    let label = "cache over TCP";
    assert_eq!(
        srv.uri,
        format!("nbd://{addr}/tcpdisk"),
        "[{label}] URI in the banner"
    );
    let e = nbdinfo_json(label, &srv.uri);
    assert_eq!(
        e["export-name"], "tcpdisk",
        "[{label}] nbdinfo --json: {e:#}"
    );
    assert_eq!(
        e["export-size"].as_u64(),
        Some(stack.size_bytes),
        "[{label}] nbdinfo --json: {e:#}"
    );
    assert_eq!(
        e["can_multi_conn"].as_bool(),
        Some(true),
        "[{label}] nbdinfo --json: {e:#}"
    );
    let r = run_ok(
        label,
        &mut cmd("nbdinfo", &["--list", "--json", &format!("nbd://{addr}")]),
        T_SHORT,
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("[{label}] nbdinfo --list --json: {e}\n{}", r.stdout));
    let names: Vec<&str> = v["exports"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["export-name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["tcpdisk"], "[{label}] NBD_OPT_LIST\n{}", r.stdout);
    // The default export ("") is the same export.
    let r = run_ok(
        label,
        &mut cmd("nbdinfo", &["--size", &format!("nbd://{addr}")]),
        T_SHORT,
    );
    assert_eq!(
        r.stdout.trim(),
        stack.size_bytes.to_string(),
        "[{label}] size of the default export"
    );
    let writes = [
        Write {
            offset: 4 * MIB - 5000,
            len: 10_000,
            pattern: 0x3c,
        },
        Write {
            offset: 9 * MIB,
            len: 5 * MIB + 4096,
            pattern: 0x4d,
        },
    ];
    let mut cmds: Vec<String> = writes.iter().map(write_cmd).collect();
    let windows = [(3 * MIB, 15 * MIB)];
    cmds.extend(verify_cmds(&writes, &windows));
    qemu_io(label, &srv.uri, false, &cmds);
    let copy = lab.path("copy.img");
    run_ok(
        label,
        &mut cmd("nbdcopy", &[&srv.uri, copy.to_str().unwrap()]),
        T_LONG,
    );
    let got = std::fs::read(&copy).unwrap();
    for w in &writes {
        let r = &got[w.offset as usize..(w.offset + w.len) as usize];
        assert!(
            r.iter().all(|&b| b == w.pattern),
            "[{label}] nbdcopy out: {w:?}"
        );
    }
    eprintln!("[{label}] {}", srv.stop());
}

// ---------------------------------------------------------------------------
// NBD_OPT_ABORT

/// `nbdinfo --list` and `nbdinfo --json --no-content` stay in option
/// negotiation and end with libnbd's `nbd_opt_abort`: NBD_OPT_ABORT, then
/// the socket is closed without reading the server's NBD_REP_ACK. The NBD
/// spec (doc/proto.md, NBD_OPT_ABORT): "the server SHOULD gracefully handle
/// the client sending an NBD_OPT_ABORT and closing the connection without
/// waiting for a reply". The server must survive it, keep serving, and
/// list its export.
#[test]
fn nbd_opt_abort_then_close_leaves_the_server_running() {
    let test = "nbd_opt_abort_then_close_leaves_the_server_running";
    if !require(test, &["nbdinfo"]) {
        return;
    }
    let stack = &FILE;
    let mut lab = Lab::new(stack);
    let mut srv = lab.start();
    for round in 0..10 {
        let label = format!("file (NBD_OPT_ABORT, round {round})");
        let r = run_ok(
            &label,
            &mut cmd("nbdinfo", &["--list", "--json", &srv.uri]),
            T_SHORT,
        );
        let v: serde_json::Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("[{label}] nbdinfo --list --json: {e}\n{}", r.stdout));
        let names: Vec<&str> = v["exports"]
            .as_array()
            .map(|a| a.iter().filter_map(|e| e["export-name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, ["tierlab"], "[{label}] NBD_OPT_LIST\n{}", r.stdout);
        let r = run_ok(
            &label,
            &mut cmd("nbdinfo", &["--json", "--no-content", &srv.uri]),
            T_SHORT,
        );
        let v: serde_json::Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("[{label}] nbdinfo --json --no-content: {e}\n{}", r.stdout));
        check_export_json(&label, stack, &v["exports"][0], false);
    }
    eprintln!("[file (NBD_OPT_ABORT)] {}", srv.stop());
}

// ---------------------------------------------------------------------------
// libnbd's own client, protocol variants and BLOCK_STATUS queries

/// Sessions with and without structured replies and NO_ZEROES, option
/// negotiation (INFO, GO to an unknown and to the default export, meta
/// contexts), every command, and random BLOCK_STATUS queries (with and
/// without REQ_ONE) checked against the full map of each context.
const LIBNBD_VARIANTS: &str = r#"
import nbd, sys, random
uri = sys.argv[1]
fails = []
def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (" " + str(detail) if detail else ""))
    if not ok:
        fails.append(what)
def session(name, setup):
    h = nbd.NBD()
    setup(h)
    try:
        h.connect_uri(uri)
        h.pwrite(b"\x42" * 8192, 65536)
        check(name + ": write, read", h.pread(8192, 65536) == b"\x42" * 8192)
        h.flush()
        h.pwrite(b"\x43" * 4096, 0, nbd.CMD_FLAG_FUA)
        check(name + ": FUA write", h.pread(4096, 0) == b"\x43" * 4096)
        h.zero(4096, 4096)
        check(name + ": write zeroes", h.pread(4096, 4096) == bytes(4096))
        h.trim(8192, 65536)
        h.pwrite(b"\x44" * 8192, 65536)
        check(name + ": trim then write", h.pread(8192, 65536) == b"\x44" * 8192)
        check(name + ": reply style", True,
              "structured" if h.get_structured_replies_negotiated() else "simple")
        h.shutdown()
    except nbd.Error as e:
        check(name, False, e)
session("default", lambda h: None)
session("no structured replies", lambda h: h.set_request_structured_replies(False))
session("no NO_ZEROES", lambda h: h.set_handshake_flags(nbd.HANDSHAKE_FLAG_FIXED_NEWSTYLE))

h = nbd.NBD()
h.set_opt_mode(True)
h.connect_uri(uri)
h.opt_info()
size = h.get_size()
check("NBD_OPT_INFO size", size > 0, size)
h.set_export_name("no-such-export")
try:
    h.opt_go()
    check("NBD_OPT_GO to an unknown export refused", False)
except nbd.Error as e:
    check("NBD_OPT_GO to an unknown export refused", True, e.errnum)
h.set_export_name("tierlab")
h.opt_go()
check("NBD_OPT_GO after a refusal", h.get_size() == size)
h.shutdown()

h = nbd.NBD()
h.set_export_name("")
h.connect_uri(uri.replace("/tierlab?", "/?"))
check("the default export (empty name)", h.get_size() == size)
h.shutdown()

h = nbd.NBD()
h.add_meta_context("foo:bar")
h.add_meta_context("tierlab:tier")
h.connect_uri(uri)
check("unknown meta context not negotiated", not h.can_meta_context("foo:bar"))
check("tierlab:tier negotiated", h.can_meta_context("tierlab:tier"))
h.shutdown()

# BLOCK_STATUS: random ranges against the full maps.
h = nbd.NBD()
h.add_meta_context("base:allocation")
h.add_meta_context("tierlab:tier")
h.connect_uri(uri)
minb = h.get_block_size(nbd.SIZE_MINIMUM)
for off, n, pat in [(1 << 20, 1 << 20, 0x11), (5 << 20, 12288, 0x12), (100 << 20, 3 << 20, 0x13)]:
    h.pwrite(bytes([pat]) * n, off)
h.trim(256 << 10, (1 << 20) + (256 << 10))
def full(ctx):
    out, off = [], 0
    while off < size:
        got = []
        def cb(meta, offset, entries, err):
            if meta == ctx:
                got.append(list(entries))
        h.block_status(min(size - off, 1 << 31), off, cb)
        ents = got[0]
        for i in range(0, len(ents), 2):
            out.append((off, ents[i], ents[i + 1]))
            off += ents[i]
    return out
maps = {c: full(c) for c in ["base:allocation", "tierlab:tier"]}
def flag_at(m, x):
    for (o, l, f) in m:
        if o <= x < o + l:
            return f
rng = random.Random(3)
bad = []
for trial in range(300):
    off = rng.randrange(0, size // minb) * minb
    n = rng.randrange(1, min(size - off, 64 << 20) // minb + 1) * minb
    flags = nbd.CMD_FLAG_REQ_ONE if trial % 3 == 0 else 0
    got = {}
    def cb(meta, offset, entries, err):
        got[meta] = (offset, list(entries))
    h.block_status(n, off, cb, flags)
    for c, m in maps.items():
        o, ents = got.get(c, (None, []))
        x = off
        if o != off or not ents or (flags and len(ents) != 2):
            bad.append((c, off, n, o, ents[:4]))
            continue
        for i in range(0, len(ents), 2):
            l, f = ents[i], ents[i + 1]
            for probe in (x, x + l - 1):
                if probe < size and flag_at(m, probe) != f:
                    bad.append((c, off, n, x, l, f, flag_at(m, probe)))
            x += l
        if x > off + n:
            bad.append((c, off, n, "past the request", x))
check("300 BLOCK_STATUS queries agree with the full maps", not bad, bad[:5])
h.shutdown()
print("ALL OK" if not fails else "FAILED: " + ", ".join(fails))
"#;

#[test]
fn libnbd_protocol_variants() {
    let test = "libnbd_protocol_variants";
    let Some(py) = python_with_nbd() else {
        eprintln!("skipped {test}: python3-nbd not installed (apt-get install python3-libnbd)");
        return;
    };
    for stack in [&CACHE, &ATSMF] {
        let mut lab = Lab::new(stack);
        let mut srv = lab.start();
        let label = format!("{} (libnbd variants)", stack.name);
        let r = run(
            &label,
            &mut cmd(&py, &["-c", LIBNBD_VARIANTS, &srv.uri]),
            T_LONG,
        );
        assert!(
            r.status.success() && r.stdout.trim_end().ends_with("ALL OK"),
            "[{label}] {}",
            r.describe()
        );
        eprintln!("[{label}] {}", srv.stop());
    }
}
