//! `tierlab crashcheck`: exit status, report, artifact and replay.

use std::process::Command;

fn tierlab(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const CACHE: &str = "[[devices]]\nname = \"cache\"\npath = \"ram\"\ncapacity_bytes = \"1MiB\"\n\
[[devices]]\nname = \"disk\"\npath = \"disk.img\"\ncapacity_bytes = \"4MiB\"\n\
[policy]\nkind = \"cache\"\ncapacity_bytes = \"1MiB\"\nwrite_mode = \"write-back\"\n";

/// ATSMF with the FLUSH write-back turned off (the paper's design: a
/// FLUSH does not make the memory tier durable).
const ATSMF_VOLATILE: &str = "[[devices]]\nname = \"memory\"\npath = \"ram\"\ncapacity_bytes = \"3MiB\"\n\
[[devices]]\nname = \"flash\"\npath = \"f.img\"\ncapacity_bytes = \"8MiB\"\n\
[policy]\nkind = \"atsmf\"\nsub_lun_size_bytes = \"1MiB\"\nmove_chunk_bytes = \"256KiB\"\nbuffer_bytes = \"1MiB\"\n\
memory_cap_bytes = \"2MiB\"\nperiod_s = 0.01\ncollect_s = 0.01\nmin_samples = 5\ntop_n = 2\nflush_writes_back = false\n";

#[test]
fn a_clean_stack_passes_and_a_losing_one_fails_with_a_replayable_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache.toml");
    std::fs::write(&cache, CACHE).unwrap();
    let (rc, out, err) = tierlab(&["crashcheck", cache.to_str().unwrap(), "--states", "24"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("0 violations") && out.contains("checked 24 crash states"),
        "{out}"
    );

    // Flushed writes left in a volatile memory tier are lost by a crash,
    // and the checker says so.
    let atsmf = dir.path().join("atsmf.toml");
    std::fs::write(&atsmf, ATSMF_VOLATILE).unwrap();
    let outdir = dir.path().join("out");
    let (rc, out, err) = tierlab(&[
        "crashcheck",
        atsmf.to_str().unwrap(),
        "--states",
        "8",
        "--out",
        outdir.to_str().unwrap(),
    ]);
    assert_eq!(rc, 1, "{out}{err}");
    assert!(err.contains("crash states lose acknowledged data"), "{err}");
    assert!(out.contains("VIOLATION at crash point"), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(outdir.join("crashcheck.json")).unwrap())
            .unwrap();
    let v = &json["violations"][0];
    let replay = v["replay"].as_str().unwrap();
    let point_kind = replay.rsplit(' ').next().unwrap();
    // The replay checks that one state and finds the same thing.
    let (rc, out, _) = tierlab(&[
        "crashcheck",
        atsmf.to_str().unwrap(),
        "--states",
        "8",
        "--replay",
        point_kind,
    ]);
    assert_eq!(rc, 1);
    assert!(out.contains("checked 1 crash states"), "{out}");
    assert!(
        out.contains(v["message"].as_str().unwrap()),
        "{out}\nwanted {}",
        v["message"]
    );
}

#[test]
fn bad_arguments_say_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache.toml");
    std::fs::write(&cache, CACHE).unwrap();
    let c = cache.to_str().unwrap();
    let (rc, _, err) = tierlab(&["crashcheck", c, "--replay", "12:sideways"]);
    assert_eq!(rc, 2);
    assert!(err.contains("durable, everything, subset, torn"), "{err}");
    let (rc, _, err) = tierlab(&["crashcheck", c, "--iodepth", "0"]);
    assert_eq!(rc, 1);
    assert!(
        err.contains("`--iodepth`: expected at least 1, found 0"),
        "{err}"
    );
    let (rc, _, err) = tierlab(&["crashcheck", c, "--set", "devices.1.capacity_bytes=2GiB"]);
    assert_eq!(rc, 1);
    assert!(
        err.contains("cache.toml") && err.contains("at most"),
        "{err}"
    );
}

/// Issue 35: a stack whose every store is RAM has nothing that survives a
/// crash; the checker refuses it and says what to do, rather than report
/// every state as losing data. Following its advice, the check runs, and
/// the report names the store that does not survive.
#[test]
fn a_stack_of_ram_alone_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ram.toml");
    std::fs::write(&cfg, CACHE.replace("path = \"disk.img\"", "path = \"ram\"")).unwrap();
    let path = cfg.to_str().unwrap();
    let (rc, out, err) = tierlab(&["crashcheck", path, "--states", "8"]);
    assert_ne!(rc, 0, "{out}{err}");
    for want in [
        "every store of this stack is `path = \"ram\"` (cache, disk)",
        "nothing on RAM survives a crash",
        "--set devices.1.path=disk.img",
    ] {
        assert!(err.contains(want), "{want:?} not in: {err}");
    }
    assert!(!err.contains("lose acknowledged data"), "{err}");
    let (rc, out, err) = tierlab(&[
        "crashcheck",
        path,
        "--states",
        "8",
        "--set",
        "devices.1.path=disk.img",
    ]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains(
            "volatile (path = \"ram\"; zeros after every crash, so not expected to survive): cache"
        ),
        "{out}"
    );
}
