//! What used to pass in silence (issue 20, "Silent acceptances" and
//! "Config"): each now a clear error, or a warning where an empty result is
//! legitimate.

mod common_cli;

use std::path::Path;
use std::process::Command;

use common_cli::{fails_with, stderr, tierlab};

/// A two-device MSR-style trace (devices `a` and `b`), one minute long.
fn msr_trace(dir: &Path) -> String {
    let path = dir.join("two.csv");
    let mut text = String::new();
    for i in 0..20u64 {
        // Timestamps in 100 ns units; 3 s apart.
        let t = 128_166_372_000_000_000 + i * 30_000_000;
        let host = if i % 2 == 0 { "a" } else { "b" };
        text.push_str(&format!("{t},{host},0,Read,{},4096,100\n", i * 4096));
    }
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn sim_config(dir: &Path, device_table: &str, workload: &str) -> String {
    let path = dir.join("c.toml");
    std::fs::write(
        &path,
        format!(
            "[[devices]]\nname = \"ram\"\nmodel = \"memory\"\n{device_table}\n\n[[tenants]]\nname = \"t\"\nworkload = {workload}\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_device_filter_that_matches_nothing_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let t = msr_trace(tmp.path());
    let out = tmp.path().join("out");
    let out = out.to_str().unwrap();
    // The simulator used to run 0 IOs and print NaN metrics with exit 0.
    let c = sim_config(
        tmp.path(),
        "",
        &format!("{{ trace = \"{t}\", device = \"nope\" }}"),
    );
    fails_with(
        tierlab(&["sim", &c, "--out", out]),
        &[
            "device \"nope\" is not in the trace; devices:",
            "a_0",
            "b_0",
        ],
    );
    let sliced = tmp.path().join("s.csv");
    fails_with(
        tierlab(&[
            "trace",
            "slice",
            "--device",
            "nope",
            &t,
            sliced.to_str().unwrap(),
        ]),
        &["device \"nope\" is not in the trace"],
    );
    // A device that is there still works.
    let o = tierlab(&[
        "trace",
        "slice",
        "--device",
        "a_0",
        &t,
        sliced.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("kept 10 of 20"), "{}", stderr(&o));
}

#[test]
fn an_empty_slice_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let t = msr_trace(tmp.path());
    let sliced = tmp.path().join("s.csv");
    let o = tierlab(&[
        "trace",
        "slice",
        "--minutes",
        "500-600",
        &t,
        sliced.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: the slice is empty") && err.contains("spans 0.95 minutes"),
        "{err}"
    );
}

#[test]
fn a_forced_format_of_the_other_kind_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = msr_trace(tmp.path());
    // `--format oracle` on a CSV used to read garbage records, exit 0.
    fails_with(
        tierlab(&["trace", "stats", &t, "--format", "oracle"]),
        &[
            "the forced format `oracle` is binary, but this file reads as text `msr`",
            "force `msr`",
        ],
    );
    let o = tierlab(&["trace", "stats", &t, "--format", "msr"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A text format on another text format: the first record's field
    // error, and the format detection picks (it used to be the field
    // error alone).
    fails_with(
        tierlab(&["trace", "stats", &t, "--format", "systor"]),
        &[
            "the forced format `systor` does not read this file (line 1: field `Timestamp`",
            "detection reads it as `msr`",
            "force `msr`",
        ],
    );
}

#[test]
fn device_sizes_take_units_like_every_other_key() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out = out.to_str().unwrap();
    let workload =
        "{ generator = \"uniform\", params = { count = 10, region_size_bytes = \"1MiB\" } }";
    let c = sim_config(tmp.path(), "capacity_bytes = \"64MiB\"", workload);
    let o = tierlab(&["sim", &c, "--out", out]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The device is 64 MiB: a 128 MiB workload runs past its end.
    let big =
        "{ generator = \"uniform\", params = { count = 100, region_size_bytes = \"128MiB\" } }";
    let c = sim_config(tmp.path(), "capacity_bytes = \"64MiB\"", big);
    fails_with(
        tierlab(&["sim", &c, "--out", out]),
        &["beyond the end of device 0 (67108864 bytes)"],
    );
    let c = sim_config(tmp.path(), "capacity_bytes = \"64MB\"", workload);
    fails_with(
        tierlab(&["sim", &c, "--out", out]),
        &[
            "key `devices[0].capacity_bytes`",
            "decimal units are ambiguous",
        ],
    );
    // `--set` with a unit, and EiB (the largest binary unit) parses.
    let c = sim_config(tmp.path(), "", workload);
    let o = tierlab(&[
        "sim",
        &c,
        "--set",
        "devices.0.capacity_bytes=\"2GiB\"",
        "--out",
        out,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn run_refuses_a_drain_time_that_is_not_a_number() {
    fails_with(
        tierlab(&["run", "nonexistent.toml", "--drain-s", "NaN", "--out", "x"]),
        &["--drain-s", "\"NaN\" is not a number of seconds >= 0"],
    );
}

#[test]
fn reproduce_hswd_reads_a_bad_trace_before_any_run() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.csv");
    std::fs::write(&bad, "garbage,line\n").unwrap();
    let out = tmp.path().join("h");
    let o = tierlab(&[
        "reproduce",
        "hswd",
        "--quick",
        "--trace",
        bad.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    fails_with(o, &["--trace", "match no known format"]);
    // Refused before the first of its runs started.
    assert!(
        !out.join("table.csv").exists()
            && !out
                .join("configs")
                .read_dir()
                .is_ok_and(|mut d| d.next().is_some()),
        "runs were made before the trace was read"
    );
}

#[test]
fn config_errors_speak_the_configs_terms() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out = out.to_str().unwrap();
    let run = |body: &str, set: &[&str]| {
        let path = tmp.path().join("c.toml");
        std::fs::write(
            &path,
            format!("[[devices]]\nname = \"ram\"\nmodel = \"memory\"\n{body}"),
        )
        .unwrap();
        let mut args = vec!["sim", path.to_str().unwrap(), "--out", out];
        for s in set {
            args.extend(["--set", s]);
        }
        tierlab(&args)
    };
    // No serde internals ("untagged enum WorkloadConfig", "key `.`").
    fails_with(
        run(
            "[[tenants]]\nname = \"a\"\nworkload = { generater = \"uniform\" }\n",
            &[],
        ),
        &[
            "key `tenants[0].workload`: a workload is a trace",
            "found keys: generater (did you mean `generator`?)",
        ],
    );
    fails_with(run("", &[]), &["the top level: missing field `tenants`"]);
    // A generator's parameter is reported under params, not `generator`.
    fails_with(
        run(
            "[[tenants]]\nname = \"a\"\nworkload = { generator = \"uniform\", params = { count = 10, bogus = 1 } }\n",
            &[],
        ),
        &[
            "key `tenants[0].workload.params.bogus`: expected a parameter of generator `uniform`",
            "found unknown parameter `bogus`",
        ],
    );
    // Switching a driver's mode with --set: the old mode's keys are named as
    // the cause, and replacing the whole table works.
    let body = "[[tenants]]\nname = \"a\"\nworkload = { generator = \"uniform\", params = { count = 10, region_size_bytes = \"1MiB\" } }\ndriver = { mode = \"open\", speed = 2.0 }\n";
    fails_with(
        run(body, &["tenants.0.driver.mode=closed"]),
        &[
            "unknown field `speed`",
            "switched the mode",
            "--set 'tenants.0.driver={ mode = \"closed\", ... }'",
        ],
    );
    let o = run(
        body,
        &["tenants.0.driver={ mode = \"closed\", iodepth = 4 }"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn python_commands_on_the_rust_binary_say_where_they_are() {
    // clap used to suggest `reproduce` for `report`.
    fails_with(
        tierlab(&["report", "out/x"]),
        &[
            "`tierlab report` is a command of the Python package",
            ".venv/bin/tierlab report",
        ],
    );
    fails_with(
        tierlab(&["sweep", "a.toml"]),
        &["`tierlab sweep` is a command of the Python package"],
    );
    // `reproduce raid --report` used to end at clap's "unexpected argument".
    fails_with(
        tierlab(&["reproduce", "raid", "--quick", "--out", "x", "--report"]),
        &[
            "unexpected argument '--report'",
            "`--report` (the HTML report) is an option of the Python package's tierlab",
        ],
    );
}

/// The emulator SIGKILLed leaves its FUSE mount dangling ("Transport
/// endpoint is not connected"); the next start detaches it and says so.
#[test]
fn emulate_clears_the_stale_mount_a_killed_emulator_left() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: needs root and /dev/fuse to mount FUSE");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mount = tmp.path().join("m");
    std::fs::create_dir(&mount).unwrap();
    let m = mount.to_str().unwrap();
    let args = [
        "emulate",
        "--mount",
        m,
        "--model",
        "memory",
        "--capacity",
        "1MiB",
    ];
    let mut first = Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let file = mount.join("disk.img");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the emulator never mounted"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    first.kill().unwrap(); // SIGKILL: no unmount
    first.wait().unwrap();
    let e = std::fs::metadata(&mount).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN), "{e}");
    let o = tierlab(&[&args[..], &["--duration-s", "0.5"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("held a stale mount left by an emulator that died"),
        "{}",
        stderr(&o)
    );
    // Unmounted cleanly at the end: an empty directory again.
    assert_eq!(std::fs::read_dir(&mount).unwrap().count(), 0);
}

#[test]
fn any_text_trace_reads_through_a_column_mapping() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cloudPhysicsIO.csv");
    std::fs::write(
        &path,
        "version,time,op,size,lbn\n1,0.5,0x28,4096,16\n1,1.25,42,8192,2048\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let o = tierlab(&[
        "trace",
        "stats",
        p,
        "--csv-columns",
        "time=2,op=3,size=4,lbn=5,header",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Detection recognizes libCacheSim's CloudPhysics layout and reads it
    // with that mapping: the same statistics without the flag.
    let detected = tierlab(&["trace", "stats", p, "--json"]);
    assert!(detected.status.success(), "{}", stderr(&detected));
    assert_eq!(detected.stdout, o.stdout);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (s["reads"].as_u64(), s["writes"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(s["write_bytes"].as_u64(), Some(8192));
    fails_with(
        tierlab(&["trace", "stats", p, "--format", "csv"]),
        &["format csv needs a column mapping"],
    );
    fails_with(
        tierlab(&["trace", "stats", p, "--csv-columns", "tiem=2,size=4,lbn=5"]),
        &["unknown key `tiem` (did you mean `time`?)"],
    );
}

/// A mistyped path names the file it meant ("Why": `No such file or
/// directory (os error 2)` alone).
#[test]
fn a_mistyped_path_suggests_the_file_next_to_it() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = msr_trace(tmp.path());
    let config = sim_config(
        tmp.path(),
        "",
        "{ generator = \"uniform\", params = { count = 10 } }",
    );
    let typo = |p: &str, from: &str, to: &str| p.replace(from, to);
    fails_with(
        tierlab(&["trace", "stats", &typo(&trace, "two.csv", "tow.csv")]),
        &[
            "tow.csv: No such file or directory",
            "(did you mean `",
            "two.csv`?)",
        ],
    );
    let out = tmp.path().join("out");
    fails_with(
        tierlab(&[
            "sim",
            &typo(&config, "c.toml", "c.tml"),
            "--out",
            out.to_str().unwrap(),
        ]),
        &["c.tml: No such file or directory", "c.toml`?)"],
    );
    fails_with(
        tierlab(&[
            "trace",
            "stats",
            tmp.path().join("gone/x.csv").to_str().unwrap(),
        ]),
        &["(the folder `", "gone` does not exist)"],
    );
}
