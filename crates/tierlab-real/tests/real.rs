//! The real executor end to end, on files in a temporary directory and RAM:
//! data verification through every policy that moves data (passthrough,
//! linear, the cache layer in each write mode, flashcache, ATSMF with moves
//! in flight, HSWD with band RMWs in flight), and injected IO errors
//! reported with device, offset and cause.

use std::path::Path;

use tierlab_real::{RealOptions, RealResult};
use tierlab_sim::config;

fn run(dir: &Path, text: &str, verify: bool) -> Result<RealResult, String> {
    run_with(dir, text, verify, 8)
}

fn run_with(dir: &Path, text: &str, verify: bool, io_threads: usize) -> Result<RealResult, String> {
    let cfg = config::parse(text, "test.toml", &[]).map_err(|e| e.to_string())?;
    let opts = RealOptions {
        verify,
        io_threads,
        drain_s: 5.0,
        ..Default::default()
    };
    let r = tierlab_real::run(&cfg, dir, &opts).map_err(|e| e.to_string())?;
    tierlab_real::write_outputs(&r, &dir.join("out")).map_err(|e| e.to_string())?;
    Ok(r)
}

fn counter(r: &RealResult, name: &str) -> f64 {
    r.run.info.policy_counters[name]
        .as_f64()
        .unwrap_or_else(|| panic!("no counter {name}"))
}

const UNIFORM: &str = r#"
[[tenants]]
name = "t"
workload = { generator = "uniform", params = { count = COUNT, region_size_bytes = "REGION", read_ratio = 0.5, size_bytes = "4k:6,8k:2,64k:1" } }
driver = { mode = "afap", iodepth = 8 }
[output]
interval_s = 1.0
"#;

fn uniform(count: u64, region: &str) -> String {
    UNIFORM
        .replace("COUNT", &count.to_string())
        .replace("REGION", region)
}

fn file_device(name: &str, size: &str) -> String {
    format!(
        "[[devices]]\nname = \"{name}\"\npath = \"{name}.img\"\ncapacity_bytes = \"{size}\"\ncreate = true\n"
    )
}

fn ram_device(name: &str, size: &str) -> String {
    format!("[[devices]]\nname = \"{name}\"\npath = \"ram\"\ncapacity_bytes = \"{size}\"\n")
}

fn check_verified(r: &RealResult) {
    assert!(r.real.verify);
    assert!(r.real.sectors_verified > 1000, "{:?}", r.real);
    assert!(r.real.final_scan_sectors > 0, "{:?}", r.real);
    assert_eq!(r.run.outcome.host_ios_unfinished, 0);
}

#[test]
fn passthrough_on_a_file_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "seed = 1\n{}[policy]\nkind = \"passthrough\"\n{}",
        file_device("disk", "32MiB"),
        uniform(5000, "32MiB")
    );
    let r = run(dir.path(), &text, true).unwrap();
    check_verified(&r);
    assert_eq!(r.run.outcome.host_ios, 5000);
    // The same files as `tierlab sim`, plus the real block.
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["ios"], 5000);
    assert!(
        s["real"]["backends"][0]
            .as_str()
            .unwrap()
            .contains("disk.img")
    );
    assert!(dir.path().join("out/latency_cdf.csv").exists());
}

#[test]
fn linear_over_two_files_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "seed = 2\n{}{}[policy]\nkind = \"linear\"\n{}",
        file_device("a", "8MiB"),
        file_device("b", "24MiB"),
        uniform(4000, "32MiB")
    );
    let r = run(dir.path(), &text, true).unwrap();
    check_verified(&r);
    // Both files got data.
    for f in ["a.img", "b.img"] {
        let bytes = std::fs::read(dir.path().join(f)).unwrap();
        assert!(bytes.iter().any(|&b| b != 0), "{f} untouched");
    }
}

#[test]
fn cache_layer_verifies_in_every_write_mode() {
    for mode in ["write-back", "write-through", "write-around"] {
        let dir = tempfile::tempdir().unwrap();
        // A 2 MiB cache over 32 MiB: evictions and dirty flushes all the time.
        let text = format!(
            "seed = 3\n{}{}[policy]\nkind = \"cache\"\ncapacity_bytes = \"2MiB\"\nwrite_mode = \"{mode}\"\nidle_flush_ms = 5\n{}",
            ram_device("ram", "2MiB"),
            file_device("disk", "32MiB"),
            uniform(5000, "32MiB")
        );
        let r = run(dir.path(), &text, true).unwrap_or_else(|e| panic!("{mode}: {e}"));
        check_verified(&r);
        if mode == "write-back" {
            assert!(counter(&r, "flush_ios") > 0.0, "{mode}: no flush");
        }
    }
}

#[test]
fn inline_io_verifies_through_a_write_back_cache() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "seed = 7\n{}{}[policy]\nkind = \"cache\"\ncapacity_bytes = \"2MiB\"\n{}",
        ram_device("ram", "2MiB"),
        file_device("disk", "16MiB"),
        uniform(4000, "16MiB")
    );
    let r = run_with(dir.path(), &text, true, 0).unwrap();
    check_verified(&r);
    assert_eq!(r.real.io_threads, 0);
}

#[test]
fn flashcache_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "seed = 4\n{}{}[policy]\nkind = \"flashcache\"\ncapacity_bytes = \"4MiB\"\n{}",
        ram_device("ram", "4MiB"),
        file_device("disk", "32MiB"),
        uniform(5000, "32MiB")
    );
    let r = run(dir.path(), &text, true).unwrap();
    check_verified(&r);
}

#[test]
fn atsmf_verifies_with_moves_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    // 32 sub-LUNs of 1 MiB; concentrations come and go every second or so;
    // 100 ms periods, so moves (1 MiB in 64 KiB chunks) run under load.
    let text = format!(
        r#"seed = 5
{ram}{disk}
[policy]
kind = "atsmf"
sub_lun_size_bytes = "1MiB"
period_s = 0.1
collect_s = 0.1
top_n = 4
share_m = 0.5
move_chunk_bytes = "64KiB"
buffer_bytes = "1MiB"
min_samples = 20
[[tenants]]
name = "t"
workload = {{ generator = "io-concentration", params = {{ sub_luns = 32, sub_lun_size_bytes = "1MiB", duration_s = 3, rate_iops = 4000, write_ratio = 0.5, size_bytes = "4k:4,8k:2,16k:1", concentration_share = 0.9, mean_active = 2, mean_duration_s = 0.8, group_sub_luns = "1:3,2:1", drift_share = 0.5, drift_sub_luns_per_min = 60 }} }}
driver = {{ mode = "open", speed = 1.0 }}
[output]
interval_s = 0.5
"#,
        ram = ram_device("memory", "33MiB"),
        disk = file_device("flash", "32MiB"),
    );
    let r = run(dir.path(), &text, true).unwrap();
    check_verified(&r);
    assert!(
        counter(&r, "promotions") >= 2.0,
        "{:?}",
        r.run.info.policy_counters
    );
    assert!(
        counter(&r, "demotions") >= 1.0,
        "{:?}",
        r.run.info.policy_counters
    );
    assert!(counter(&r, "memory_ios") > 0.0);
    // Host writes landed in the move buffer while sub-LUNs moved.
    assert!(
        counter(&r, "buffered_writes") > 0.0,
        "{:?}",
        r.run.info.policy_counters
    );
    assert!(dir.path().join("out/atsmf_decisions.csv").exists());
}

/// HSWD over two files: a 512 KiB PCache (128 blocks + a 128 KiB RCache)
/// in front of a 4 MiB "SMR" file of 32 bands, under random 4–32 KiB reads
/// and writes over all of it, so band RMWs run back to back and host IOs
/// keep landing in the band being cleaned.
fn hswd_stack(seed: u64, mapping: &str, selection: &str) -> String {
    format!(
        r#"seed = {seed}
{ssd}{smr}
[policy]
kind = "hswd"
pcache_bytes = "640KiB"
band_bytes = "128KiB"
mapping = "{mapping}"
band_selection = "{selection}"
clean_start_pct = 80
clean_stop_pct = 60
[[tenants]]
name = "t"
workload = {{ generator = "uniform", params = {{ count = 3000, region_size_bytes = "4MiB", read_ratio = 0.5, size_bytes = "4k:6,8k:2,32k:1" }} }}
driver = {{ mode = "afap", iodepth = 8 }}
[output]
interval_s = 1.0
"#,
        ssd = file_device("ssd", "1MiB"),
        smr = file_device("smr", "4MiB"),
    )
}

/// Every band selection, with 16 IO threads and inline IO: verification
/// passes, RMWs ran, and host reads and writes hit the band under RMW
/// while it was in flight. Returns the summed counters.
fn hswd_verifies(mapping: &str) -> [f64; 5] {
    let mut totals = [0.0; 5];
    for (i, selection) in ["fifo", "lru", "most"].into_iter().enumerate() {
        for threads in [16, 0] {
            let dir = tempfile::tempdir().unwrap();
            let text = hswd_stack(20 + i as u64, mapping, selection);
            let r = run_with(dir.path(), &text, true, threads)
                .unwrap_or_else(|e| panic!("{mapping}/{selection}/{threads} threads: {e}"));
            check_verified(&r);
            let what = format!(
                "{mapping}/{selection}/{threads}: {:?}",
                r.run.info.policy_counters
            );
            let c = [
                counter(&r, "rmw_count"),
                counter(&r, "rmw_band_read_blocks"),
                counter(&r, "rmw_band_write_blocks"),
                counter(&r, "rmw_rewritten_blocks"),
                counter(&r, "rmw_held_writes"),
            ];
            assert!(c[0] >= 20.0, "few RMWs, {what}");
            assert!(c[1] > 0.0, "no host read of a band under RMW, {what}");
            assert!(c[2] > 0.0, "no host write to a band under RMW, {what}");
            assert_eq!(
                counter(&r, "completed_ios"),
                counter(&r, "host_ios"),
                "{what}"
            );
            for (t, v) in totals.iter_mut().zip(c) {
                *t += v;
            }
            // Both files got data; the SMR file only through band writes.
            for f in ["ssd.img", "smr.img"] {
                let bytes = std::fs::read(dir.path().join(f)).unwrap();
                assert!(bytes.iter().any(|&b| b != 0), "{f} untouched, {what}");
            }
        }
    }
    eprintln!(
        "hswd {mapping}: rmw_count, rmw_band_read_blocks, rmw_band_write_blocks, \
         rmw_rewritten_blocks, rmw_held_writes = {totals:?}"
    );
    totals
}

#[test]
fn hswd_fully_associative_verifies_with_rmw_in_flight() {
    hswd_verifies("fully");
}

#[test]
fn hswd_set_associative_verifies_with_rmw_in_flight() {
    hswd_verifies("set");
}

#[test]
fn a_file_truncated_underneath_fails_the_reads_past_its_end_naming_device_offset_and_cause() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "seed = 6\n{}[policy]\nkind = \"passthrough\"\n[[tenants]]\nname = \"t\"\nworkload = {{ generator = \"uniform\", params = {{ duration_s = 2, rate_iops = 2000, region_size_bytes = \"16MiB\", read_ratio = 1.0, size_bytes = \"4k\" }} }}\ndriver = {{ mode = \"open\", speed = 1.0 }}\n",
        file_device("disk", "16MiB")
    );
    let path = dir.path().join("disk.img");
    let truncate = {
        let path = path.clone();
        std::thread::spawn(move || {
            // Wait for the run to create the file, then cut it to 4 KiB.
            for _ in 0..200 {
                if std::fs::metadata(&path).is_ok_and(|m| m.len() == 16 << 20) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(4096)
                .unwrap();
        })
    };
    // Passthrough survives device errors: each read past the new end fails
    // (EIO to the host), the run goes on and reports them.
    let r = run(dir.path(), &text, false).unwrap();
    truncate.join().unwrap();
    let real = &r.real;
    assert!(real.host_ios_failed > 100, "{real:?}");
    assert_eq!(real.device_errors, real.host_ios_failed);
    let e = &real.device_error_messages[0];
    assert!(e.contains("device disk"), "{e}");
    assert!(e.contains("disk.img"), "{e}");
    assert!(e.contains("at offset"), "{e}");
    assert!(e.contains("read of 4096 bytes"), "{e}");
    assert!(
        e.to_lowercase().contains("fill whole buffer") || e.contains("eof"),
        "{e}"
    );
}

#[test]
fn bad_setups_are_refused_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    // A model where a path belongs.
    let text = format!(
        "[[devices]]\nname = \"x\"\nmodel = \"ssd\"\n[policy]\nkind = \"passthrough\"\n{}",
        uniform(10, "1MiB")
    );
    let e = run(dir.path(), &text, false).err().unwrap();
    assert!(e.contains("devices[0].model") && e.contains("path"), "{e}");
    // HSWD moves whole 4 KiB blocks: 512-byte IOs are refused.
    let text = format!(
        "{}{}[policy]\nkind = \"hswd\"\npcache_bytes = \"640KiB\"\nband_bytes = \"128KiB\"\n[[tenants]]\nname = \"t\"\nworkload = {{ generator = \"uniform\", params = {{ count = 10, region_size_bytes = \"1MiB\", size_bytes = \"512\", alignment_bytes = \"512\" }} }}\ndriver = {{ mode = \"afap\", iodepth = 1 }}\n",
        file_device("ssd", "1MiB"),
        file_device("smr", "4MiB")
    );
    let e = run(dir.path(), &text, false).err().unwrap();
    assert!(
        e.contains("hswd") && e.contains("units of 4096 bytes") && e.contains("not aligned"),
        "{e}"
    );
    // Unaligned IOs under a page cache.
    let text = format!(
        "{}{}[policy]\nkind = \"cache\"\ncapacity_bytes = \"1MiB\"\n[[tenants]]\nname = \"t\"\nworkload = {{ generator = \"uniform\", params = {{ count = 10, region_size_bytes = \"1MiB\", size_bytes = \"512\", alignment_bytes = \"512\" }} }}\ndriver = {{ mode = \"afap\", iodepth = 1 }}\n",
        ram_device("ram", "1MiB"),
        file_device("disk", "4MiB")
    );
    let e = run(dir.path(), &text, false).err().unwrap();
    assert!(
        e.contains("units of 4096 bytes") && e.contains("not aligned"),
        "{e}"
    );
    // A read-only file (immutable; skipped where chattr is unavailable).
    let ro = dir.path().join("ro.img");
    std::fs::write(&ro, vec![0u8; 1 << 20]).unwrap();
    let immutable = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&ro)
        .status()
        .is_ok_and(|s| s.success());
    if immutable {
        let text = format!(
            "[[devices]]\nname = \"ro\"\npath = \"ro.img\"\n[policy]\nkind = \"passthrough\"\n{}",
            uniform(10, "1MiB")
        );
        let e = run(dir.path(), &text, false).err().unwrap();
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&ro)
            .status();
        assert!(
            e.contains("ro.img") && e.contains("cannot open read-write"),
            "{e}"
        );
    } else {
        eprintln!("skipped the read-only file case: chattr +i is not available here");
    }
}

/// A write-back cache whose pages would otherwise stay dirty (idle flush
/// off, a cache larger than the workload): after `tierlab run` the backing
/// file alone holds every written sector — the run ends with the policy's
/// write-back and an fdatasync of every store. The counter at the end of
/// the workload is the negative control: the data was in the cache only.
#[test]
fn a_run_ends_with_the_dirty_data_written_back_to_the_backing_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}{}[policy]\nkind = \"cache\"\ncapacity_bytes = \"8MiB\"\nwrite_mode = \"write-back\"\nidle_flush_ms = 0\n\
         [[tenants]]\nname = \"t\"\n\
         workload = {{ generator = \"sequential\", params = {{ count = 512, size_bytes = \"4k\", read_ratio = 0 }} }}\n\
         driver = {{ mode = \"afap\", iodepth = 4 }}\n",
        ram_device("cache", "8MiB"),
        file_device("disk", "8MiB")
    );
    let r = run(dir.path(), &text, true).unwrap();
    check_verified(&r);
    assert_eq!(
        counter(&r, "dirty_bytes"),
        512.0 * 4096.0,
        "at the end of the workload every page was dirty in the cache"
    );
    let disk = std::fs::read(dir.path().join("disk.img")).unwrap();
    for (i, sector) in disk[..512 * 4096].chunks_exact(512).enumerate() {
        let (lba, _version) = tierlab_real::verify::read_stamp(sector)
            .unwrap_or_else(|e| panic!("sector {i} of the backing file: {e}"));
        assert_eq!(lba, i as u64, "sector {i} holds sector {lba}'s data");
    }
    assert!(!r.real.interrupted);
}

/// A stop request mid-workload (what SIGINT does in `tierlab run`): the
/// run ends early, reports it, and still writes back what the cache held:
/// every sector of the backing file is zeros (never written) or a whole
/// stamp of its own — and the stamped ones are at least what was dirty.
#[test]
fn a_stopped_run_writes_back_what_it_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}{}[policy]\nkind = \"cache\"\ncapacity_bytes = \"64MiB\"\nwrite_mode = \"write-back\"\nidle_flush_ms = 0\n\
         [[tenants]]\nname = \"t\"\n\
         workload = {{ generator = \"uniform\", params = {{ count = 10000000, size_bytes = \"4k\", read_ratio = 0, region_size_bytes = \"64MiB\" }} }}\n\
         driver = {{ mode = \"afap\", iodepth = 4 }}\n",
        ram_device("cache", "64MiB"),
        file_device("disk", "64MiB")
    );
    let cfg = config::parse(&text, "test.toml", &[]).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&stop);
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(400));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let opts = RealOptions {
        verify: true, // stamped writes: the backing file tells what it holds
        io_threads: 8,
        stop: Some(stop),
        ..Default::default()
    };
    let r = tierlab_real::run(&cfg, dir.path(), &opts).unwrap();
    stopper.join().unwrap();
    assert!(r.real.interrupted, "the run was stopped");
    assert!(r.run.outcome.host_ios < 10_000_000, "stopped early");
    let dirty_sectors = (counter(&r, "dirty_bytes") / 512.0) as usize;
    assert!(dirty_sectors > 0, "the cache held dirty data at the stop");
    let disk = std::fs::read(dir.path().join("disk.img")).unwrap();
    let mut stamped = 0;
    for (i, sector) in disk.chunks_exact(512).enumerate() {
        if sector.iter().all(|&b| b == 0) {
            continue;
        }
        let (lba, _) = tierlab_real::verify::read_stamp(sector)
            .unwrap_or_else(|e| panic!("sector {i} of the backing file: {e}"));
        assert_eq!(lba, i as u64);
        stamped += 1;
    }
    assert!(
        stamped >= dirty_sectors,
        "{stamped} stamped sectors on the backing file, {dirty_sectors} were dirty in the cache"
    );
}
