//! Device errors on real files (`fail_after_writes`): a policy that
//! survives them (passthrough, linear, the caches, ATSMF's host IOs) fails
//! only the host IOs that needed the failed device IO and runs on; one that
//! does not (HSWD, ATSMF's moves) stops the run at the first, naming the IO
//! (fail-stop).

use std::path::Path;

use tierlab_real::error::DataPathError;
use tierlab_real::{RealOptions, RealResult, RunError};
use tierlab_sim::config;

fn run(dir: &Path, text: &str) -> Result<RealResult, String> {
    run_typed(dir, text).map_err(|e| e.to_string())
}

fn run_typed(dir: &Path, text: &str) -> Result<RealResult, RunError> {
    let cfg = config::parse(text, "test.toml", &[]).map_err(RunError::from)?;
    let opts = RealOptions {
        verify: true,
        io_threads: 4,
        ..Default::default()
    };
    tierlab_real::run(&cfg, dir, &opts)
}

fn workload(count: u64) -> String {
    format!(
        r#"[[tenants]]
name = "t"
workload = {{ generator = "uniform", params = {{ count = {count}, region_size_bytes = 4194304, read_ratio = 0.5, size_bytes = "4096" }} }}
driver = {{ mode = "afap", iodepth = 8 }}
"#
    )
}

#[test]
fn passthrough_fails_the_writes_after_the_fault_and_runs_on_verified() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[devices]]\nname = \"disk\"\npath = \"disk.img\"\ncapacity_bytes = \"4MiB\"\ncreate = true\n\
         fail_after_writes = 200\n[policy]\nkind = \"passthrough\"\n{}",
        workload(2000)
    );
    let r = run(dir.path(), &text).unwrap();
    let real = &r.real;
    // About half of 2,000 IOs are writes: 200 land, the rest fail.
    assert!(
        (600..=900).contains(&real.host_ios_failed),
        "{} host IOs failed",
        real.host_ios_failed
    );
    // Each failed write, and the final sync of the failing store.
    assert_eq!(real.device_errors, real.host_ios_failed + 1);
    assert!(
        real.device_error_messages
            .last()
            .unwrap()
            .contains("the final sync failed"),
        "{:?}",
        real.device_error_messages
    );
    assert!(
        real.device_error_messages[0].contains("device disk")
            && real.device_error_messages[0].contains("Input/output error"),
        "{:?}",
        real.device_error_messages
    );
    // Every read checked what the landed writes put there.
    assert!(real.sectors_verified > 1000, "{real:?}");
    assert_eq!(r.run.outcome.host_ios_unfinished, 0);
}

#[test]
fn linear_fails_the_host_io_whose_part_failed() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[devices]]\nname = \"a\"\npath = \"a.img\"\ncapacity_bytes = \"2MiB\"\ncreate = true\n\
         fail_after_writes = 0\n\
         [[devices]]\nname = \"b\"\npath = \"b.img\"\ncapacity_bytes = \"2MiB\"\ncreate = true\n\
         [policy]\nkind = \"linear\"\n{}",
        workload(1000)
    );
    let r = run(dir.path(), &text).unwrap();
    // Writes to the first half fail, to the second land: about a quarter.
    let failed = r.real.host_ios_failed;
    assert!((150..=350).contains(&failed), "{failed} host IOs failed");
    assert!(r.real.sectors_verified > 500, "{:?}", r.real);
}

#[test]
fn a_policy_that_cannot_survive_a_device_error_stops_the_run_naming_it() {
    // HSWD survives no device error: its PCache failing stops the run.
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[devices]]\nname = \"pcache\"\npath = \"pcache.img\"\ncapacity_bytes = \"3MiB\"\ncreate = true\n\
         fail_after_writes = 50\n\
         [[devices]]\nname = \"smr\"\npath = \"smr.img\"\ncapacity_bytes = \"8MiB\"\ncreate = true\n\
         [policy]\nkind = \"hswd\"\npcache_bytes = \"2MiB\"\nband_bytes = \"256KiB\"\n{}",
        workload(1000)
    );
    let e = run_typed(dir.path(), &text).err().expect("the run stops");
    // Typed: the device IO that failed, with the OS error.
    match &e {
        RunError::DataPath(DataPathError::Device(d)) => {
            assert_eq!(d.device, "pcache");
            // Once the fault is on, the PCache's writes and its flushes
            // (HSWD's durability barrier) both fail; which one HSWD meets
            // first depends on when the engine completes them.
            assert!(
                matches!(d.op, tierlab_core::Op::Write | tierlab_core::Op::Flush),
                "{:?}",
                d.op
            );
            assert_eq!(d.source.raw_os_error(), Some(libc::EIO));
        }
        other => panic!("{other:?}"),
    }
    assert!(e.io_error().is_some());
    let e = e.to_string();
    assert!(
        e.contains("device pcache")
            && e.contains("failing every write after 50")
            && e.contains("Input/output error"),
        "{e}"
    );
}

#[test]
fn atsmf_fails_the_host_ios_whose_flash_io_failed_and_runs_on() {
    // No move runs in this short workload (24 s periods): every failed
    // flash write is a host write's, answered with an error.
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[devices]]\nname = \"memory\"\npath = \"ram\"\ncapacity_bytes = \"3MiB\"\n\
         [[devices]]\nname = \"flash\"\npath = \"flash.img\"\ncapacity_bytes = \"4MiB\"\ncreate = true\n\
         fail_after_writes = 200\n\
         [policy]\nkind = \"atsmf\"\nsub_lun_size_bytes = \"1MiB\"\nmove_chunk_bytes = \"256KiB\"\n\
         buffer_bytes = \"1MiB\"\nmemory_cap_bytes = \"2MiB\"\n{}",
        workload(2000)
    );
    let r = run(dir.path(), &text).unwrap();
    assert!(
        (600..=900).contains(&r.real.host_ios_failed),
        "{} host IOs failed",
        r.real.host_ios_failed
    );
    let c = &r.run.info.policy_counters;
    assert_eq!(
        c["host_ios_failed"].as_f64().unwrap(),
        r.real.host_ios_failed as f64,
        "the policy and the executor count the same failures"
    );
    assert!(r.real.sectors_verified > 1000, "{:?}", r.real);
    assert_eq!(r.run.outcome.host_ios_unfinished, 0);
}

#[test]
fn a_write_back_cache_whose_disk_fails_keeps_the_data_dirty_and_fails_its_flushes() {
    // The disk dies after 10 writes: write-backs fail, their pages stay
    // dirty in the cache (readable, verified), the final drain gives them
    // one retry and gives up, and the run reports the failed final sync
    // instead of hanging. With persistent metadata (the default on a file)
    // the first commit that must make write-backs durable on the disk
    // meets the failed disk flush and stops the run, naming it (fail-stop,
    // as a failed metadata IO does: a clean mark it cannot make durable
    // would let a restart lose the page).
    for persistent in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[[devices]]\nname = \"cache\"\npath = \"cache.img\"\ncapacity_bytes = \"5MiB\"\ncreate = true\n\
             [[devices]]\nname = \"disk\"\npath = \"disk.img\"\ncapacity_bytes = \"4MiB\"\ncreate = true\n\
             fail_after_writes = 10\n\
             [policy]\nkind = \"cache\"\ncapacity_bytes = \"4MiB\"\nwrite_mode = \"write-back\"\n\
             persistent = {persistent}\n{}",
            workload(2000)
        );
        if persistent {
            let e = run(dir.path(), &text).err().expect("the run stops");
            assert!(
                e.contains("device disk")
                    && e.contains("flush")
                    && e.contains("Input/output error"),
                "{e}"
            );
            continue;
        }
        let r = run(dir.path(), &text).unwrap();
        let c = &r.run.info.policy_counters;
        let get = |k: &str| c[k].as_f64().unwrap();
        assert!(get("write_backs_failed") > 0.0, "{c:?}");
        // The drain's own count comes after the workload's counters.
        let after = &r.real.policy_counters_after_drain;
        let abandoned = after["drain_abandoned_pages"].as_f64().unwrap();
        assert!(abandoned > 0.0, "{after:?}");
        assert!(
            after["dirty_bytes"].as_f64().unwrap() >= abandoned * 4096.0,
            "the abandoned pages are still dirty in the cache: {after:?}"
        );
        assert!(
            r.real
                .device_error_messages
                .last()
                .is_some_and(|m| m.contains("the final sync failed")),
            "{:?}",
            r.real
        );
        assert!(r.real.sectors_verified > 1000, "{:?}", r.real);
        assert_eq!(r.run.outcome.host_ios_unfinished, 0);
    }
}

#[test]
fn a_write_back_cache_whose_cache_file_fails_fails_those_writes_and_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[devices]]\nname = \"cache\"\npath = \"cache.img\"\ncapacity_bytes = \"1MiB\"\ncreate = true\n\
         fail_after_writes = 600\n\
         [[devices]]\nname = \"disk\"\npath = \"disk.img\"\ncapacity_bytes = \"4MiB\"\ncreate = true\n\
         [policy]\nkind = \"cache\"\ncapacity_bytes = \"1MiB\"\nwrite_mode = \"write-back\"\n\
         persistent = false\n{}",
        workload(2000)
    );
    let r = run(dir.path(), &text).unwrap();
    let c = &r.run.info.policy_counters;
    assert!(c["slot_writes_failed"].as_f64().unwrap() > 0.0, "{c:?}");
    assert!(r.real.host_ios_failed > 0, "{:?}", r.real);
    // Reads before the fault, and of pages no failed write touched.
    assert!(r.real.sectors_verified > 500, "{:?}", r.real);
    assert_eq!(r.run.outcome.host_ios_unfinished, 0);
}

#[test]
fn fail_after_writes_must_be_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[devices]]\nname = \"disk\"\npath = \"disk.img\"\ncapacity_bytes = \"4MiB\"\ncreate = true\n\
         fail_after_writes = -1\n[policy]\nkind = \"passthrough\"\n{}",
        workload(10)
    );
    let e = run(dir.path(), &text).err().unwrap();
    assert!(
        e.contains("devices[0].fail_after_writes") && e.contains("not a count"),
        "{e}"
    );
}

#[test]
fn a_write_around_cache_whose_cache_file_fails_serves_every_io_from_the_disk() {
    // Write-around: host writes go to the disk; the cache device only
    // receives fills, and a failed fill drops the copy — nothing fails.
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[devices]]\nname = \"cache\"\npath = \"cache.img\"\ncapacity_bytes = \"1MiB\"\ncreate = true\n\
         fail_after_writes = 20\n\
         [[devices]]\nname = \"disk\"\npath = \"disk.img\"\ncapacity_bytes = \"4MiB\"\ncreate = true\n\
         [policy]\nkind = \"cache\"\ncapacity_bytes = \"1MiB\"\nwrite_mode = \"write-around\"\n\
         persistent = false\n{}",
        workload(2000)
    );
    let r = run(dir.path(), &text).unwrap();
    assert_eq!(r.real.host_ios_failed, 0, "{:?}", r.real);
    let fills_failed = r.run.info.policy_counters["device_errors"]
        .as_f64()
        .unwrap();
    assert!(fills_failed > 50.0, "{fills_failed} failed fills");
    // The policy's counters stop at the end of the workload; the executor
    // also counts the final scan's failed fills and the final sync.
    assert!(r.real.device_errors > fills_failed as u64, "{:?}", r.real);
    assert!(r.real.sectors_verified > 1000, "{:?}", r.real);
}
