//! A trace converted to fio iolog replays with real fio, and fio reports the
//! same number of IOs (reads, writes) as the trace holds.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tierlab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tierlab"))
}

fn shared_traces() -> Option<PathBuf> {
    let dir = std::env::var_os("TIERLAB_SHARED_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
        });
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIPPED: {} is absent", dir.display());
        None
    }
}

/// fio is installed by scripts/setup.sh; without it the test says so and
/// passes only outside CI (where setup must have installed it).
fn have_fio() -> bool {
    let ok = Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "fio is not installed in CI: scripts/setup.sh must install it"
        );
        eprintln!("SKIPPED: fio is not installed (run ./scripts/setup.sh)");
    }
    ok
}

fn stats(path: &Path) -> serde_json::Value {
    let out = tierlab()
        .args(["trace", "stats", "--json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Converts `trace` to fio iolog over sparse target files and replays it.
fn replay(trace: &Path, dir: &Path) -> (u64, u64) {
    let iolog = dir.join("replay.iolog");
    let template = dir.join("target-{id}.dat");
    let out = tierlab()
        .args(["trace", "convert"])
        .arg(trace)
        .arg(&iolog)
        .arg("--fio-filename")
        .arg(&template)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Sparse targets big enough for the furthest IO of any device.
    let s = stats(trace);
    let end = s["max_offset_end_bytes"].as_u64().unwrap();
    for id in 0..s["devices"].as_u64().unwrap() {
        let f = std::fs::File::create(dir.join(format!("target-{id}.dat"))).unwrap();
        f.set_len(end).unwrap();
    }
    let out = Command::new("fio")
        .args([
            "--name=replay",
            "--ioengine=psync",
            "--replay_no_stall=1",
            "--output-format=json",
        ])
        .arg(format!("--read_iolog={}", iolog.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before the JSON object.
    let json: serde_json::Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    let job = &json["jobs"][0];
    (
        job["read"]["total_ios"].as_u64().unwrap(),
        job["write"]["total_ios"].as_u64().unwrap(),
    )
}

#[test]
fn fio_replays_converted_traces_with_the_same_io_count() {
    let Some(traces) = shared_traces() else {
        return;
    };
    if !have_fio() {
        return;
    }
    for file in ["msr/hm_0-sample-1k.csv", "mqsim/tpcc-small.disksim.txt"] {
        let tmp = tempfile::tempdir().unwrap();
        let path = traces.join(file);
        let s = stats(&path);
        let (reads, writes) = replay(&path, tmp.path());
        assert_eq!(
            (reads, writes),
            (s["reads"].as_u64().unwrap(), s["writes"].as_u64().unwrap()),
            "{file}: fio's (reads, writes) vs the trace's"
        );
    }
}

#[test]
fn fio_replays_a_handmade_trace_without_shared_data() {
    if !have_fio() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("t.replay.txt");
    let mut text = String::new();
    for i in 0..300u64 {
        text.push_str(&format!(
            "{}.5 0 {} {} {}\n",
            i,
            (i * 7919 % 1000) * 4096,
            4096 * (1 + i % 4),
            i % 3 % 2
        ));
    }
    std::fs::write(&src, text).unwrap();
    let (reads, writes) = replay(&src, tmp.path());
    let s = stats(&src);
    assert_eq!(reads + writes, 300);
    assert_eq!(
        (reads, writes),
        (s["reads"].as_u64().unwrap(), s["writes"].as_u64().unwrap())
    );
}
