//! A real RAID over files in a temporary directory (src/raid.rs): data
//! verification through RAID 5 (healthy and degraded, partial- and
//! full-stripe writes, concurrent writes to one stripe), RAID 0/1/10; an
//! independent check of the member files (parity XORs to zero, the data
//! in the simulator's layout, mirrors identical); a member truncated
//! underneath; bad configs; one config for the simulator and the real run.

use std::path::Path;

use tierlab_real::{RealOptions, RealResult};
use tierlab_sim::config;

fn run(dir: &Path, text: &str, verify: bool, io_threads: usize) -> Result<RealResult, String> {
    let cfg = config::parse(text, "test.toml", &[]).map_err(|e| e.to_string())?;
    let opts = RealOptions {
        verify,
        io_threads,
        ..Default::default()
    };
    let r = tierlab_real::run(&cfg, dir, &opts).map_err(|e| e.to_string())?;
    tierlab_real::write_outputs(&r, &dir.join("out")).map_err(|e| e.to_string())?;
    Ok(r)
}

fn check_verified(r: &RealResult) {
    assert!(r.real.verify);
    assert!(r.real.sectors_verified > 1000, "{:?}", r.real);
    assert!(r.real.final_scan_sectors > 0, "{:?}", r.real);
    assert_eq!(r.run.outcome.host_ios_unfinished, 0);
}

fn device_counter(r: &RealResult, device: &str, name: &str) -> u64 {
    r.run.info.device_counters[device][name]
        .as_u64()
        .unwrap_or_else(|| {
            panic!(
                "no counter {device}.{name}: {:?}",
                r.run.info.device_counters
            )
        })
}

const KIB: usize = 1024;
/// Each member file's size.
const MEMBER_BYTES: usize = 4 << 20;

/// A `[[devices]]` RAID named "array" over `n` member files m0.img ...;
/// failed members name a file that is never created.
fn raid_device(level: &str, unit: usize, n: usize, failed: &[usize]) -> String {
    let members: Vec<String> = (0..n)
        .map(|i| {
            if failed.contains(&i) {
                format!("{{ path = \"m{i}.img\" }}")
            } else {
                format!("{{ path = \"m{i}.img\", capacity_bytes = {MEMBER_BYTES}, create = true }}")
            }
        })
        .collect();
    format!(
        "[[devices]]\nname = \"array\"\nmodel = \"raid\"\nlevel = \"{level}\"\n\
         stripe_unit_bytes = {unit}\nfailed_members = {failed:?}\nmembers = [\n  {}\n]\n",
        members.join(",\n  ")
    )
}

/// Random IOs of mixed sizes over `region`, 16 deep, as fast as possible.
fn workload(count: u64, region: usize, read_ratio: f64, sizes: &str) -> String {
    format!(
        r#"[policy]
kind = "passthrough"
[[tenants]]
name = "t"
workload = {{ generator = "uniform", params = {{ count = {count}, region_size_bytes = {region}, read_ratio = {read_ratio}, size_bytes = "{sizes}" }} }}
driver = {{ mode = "afap", iodepth = 16 }}
[output]
interval_s = 1.0
"#
    )
}

/// With 16 KiB units and 4 members a stripe holds 48 KiB: 4-16 KiB writes
/// are partial (read-modify-write or reconstruct-write), 48 KiB ones
/// sometimes whole, 96 KiB ones always cover a whole stripe.
const MIXED: &str = "4k:4,8k:2,16k:2,32k:1,48k:2,96k:1";

fn member_files(dir: &Path, n: usize) -> Vec<Option<Vec<u8>>> {
    (0..n)
        .map(|i| std::fs::read(dir.join(format!("m{i}.img"))).ok())
        .collect()
}

/// A lost member's bytes: the XOR of the others (RAID 5).
fn rebuild_lost(members: &mut [Option<Vec<u8>>]) {
    let Some(lost) = members.iter().position(|m| m.is_none()) else {
        return;
    };
    let mut x = vec![0u8; MEMBER_BYTES];
    for m in members.iter().flatten() {
        for (a, b) in x.iter_mut().zip(m) {
            *a ^= b;
        }
    }
    members[lost] = Some(x);
}

/// Every byte position of the members XORs to zero: each row's parity is
/// the XOR of its data units.
fn assert_parity_consistent(members: &[Vec<u8>]) {
    for i in 0..MEMBER_BYTES {
        let x = members.iter().fold(0u8, |x, m| x ^ m[i]);
        assert!(
            x == 0,
            "parity inconsistent at member offset {i} (row {})",
            i / (16 * KIB)
        );
    }
}

/// The volume as the simulator lays it out (docs/raid.md), written out
/// here independently of the code under test.
fn volume_image(level: &str, unit: usize, members: &[Vec<u8>]) -> Vec<u8> {
    let n = members.len();
    let units_per_member = MEMBER_BYTES / unit;
    let mut out = Vec::new();
    match level {
        "raid5" => {
            for row in 0..units_per_member {
                let p = n - 1 - row % n;
                for j in 0..n - 1 {
                    let m = (p + 1 + j) % n;
                    out.extend_from_slice(&members[m][row * unit..(row + 1) * unit]);
                }
            }
        }
        "raid0" | "raid10" => {
            let (groups, copy) = if level == "raid0" { (n, 1) } else { (n / 2, 2) };
            for row in 0..units_per_member {
                for g in 0..groups {
                    out.extend_from_slice(&members[g * copy][row * unit..(row + 1) * unit]);
                }
            }
        }
        "raid1" => out.extend_from_slice(&members[0]),
        _ => unreachable!(),
    }
    out
}

/// Every sector of the volume is either never written (zeros) or a
/// complete verification stamp of that very sector (some version):
/// returns how many are stamped.
fn assert_stamps_in_place(image: &[u8]) -> usize {
    let mut stamped = 0;
    for (lba, s) in image.chunks_exact(512).enumerate() {
        if s.iter().all(|&b| b == 0) {
            continue;
        }
        let version = u64::from_le_bytes(s[16..24].try_into().unwrap());
        let mut want = vec![0u8; 512];
        tierlab_real::verify::stamp(&mut want, lba as u64, version);
        assert!(
            s == &want[..],
            "volume byte offset {}: not the stamp of sector {lba} (version {version})",
            lba * 512
        );
        stamped += 1;
    }
    stamped
}

#[test]
fn raid5_on_files_verifies_with_partial_full_and_concurrent_same_stripe_writes() {
    let dir = tempfile::tempdir().unwrap();
    // 3 MiB of the 12 MiB volume: 64 stripes under 16 IOs in flight, so
    // writes to different chunks of one stripe run at the same time.
    let text = format!(
        "seed = 11\n{}{}",
        raid_device("raid5", 16 * KIB, 4, &[]),
        workload(6000, 3 << 20, 0.3, MIXED)
    );
    let r = run(dir.path(), &text, true, 16).unwrap();
    check_verified(&r);
    assert!(r.real.backends[0].starts_with("raid5 of 4 members, 16 KiB stripe unit: [0] file "));
    for k in ["rmw_stripes", "rcw_stripes", "full_stripe_writes"] {
        assert!(device_counter(&r, "array", k) > 20, "{k}");
    }
    assert_eq!(device_counter(&r, "array", "degraded_stripe_reads"), 0);
    // The member files, read directly.
    let members: Vec<Vec<u8>> = member_files(dir.path(), 4).into_iter().flatten().collect();
    assert_parity_consistent(&members);
    let stamped = assert_stamps_in_place(&volume_image("raid5", 16 * KIB, &members));
    assert!(stamped > 3000, "{stamped}");
}

#[test]
fn raid5_degraded_reads_back_healthy_data_and_verifies_a_degraded_run() {
    let dir = tempfile::tempdir().unwrap();
    // 1. Healthy: write the whole volume's first 6 MiB.
    let text = format!(
        "seed = 12\n{}{}",
        raid_device("raid5", 16 * KIB, 4, &[]),
        workload(3000, 6 << 20, 0.0, MIXED)
    );
    check_verified(&run(dir.path(), &text, true, 16).unwrap());
    let healthy: Vec<Vec<u8>> = member_files(dir.path(), 4).into_iter().flatten().collect();
    let image = volume_image("raid5", 16 * KIB, &healthy);
    // 2. Member 2 is gone: every byte reads back the same, its chunks
    // rebuilt from the others and parity.
    std::fs::remove_file(dir.path().join("m2.img")).unwrap();
    let degraded = raid_device("raid5", 16 * KIB, 4, &[2]);
    let cfg = config::parse(
        &format!("{degraded}{}", workload(1, 4096, 1.0, "4k")),
        "t",
        &[],
    )
    .unwrap();
    let backends = tierlab_real::executor::open_backends(&cfg.devices, dir.path()).unwrap();
    assert!(
        backends[0].describe().contains("[2] failed, not opened: "),
        "{}",
        backends[0].describe()
    );
    let mut back = vec![0u8; image.len()];
    for (i, chunk) in back.chunks_mut(200 * KIB).enumerate() {
        backends[0].read_at(chunk, (i * 200 * KIB) as u64).unwrap();
    }
    assert!(
        back == image,
        "degraded reads differ from the healthy volume"
    );
    drop(backends);
    // 3. A degraded run, reads and writes over the same region, verifies.
    let text = format!(
        "seed = 13\n{degraded}{}",
        workload(5000, 6 << 20, 0.5, MIXED)
    );
    let r = run(dir.path(), &text, true, 16).unwrap();
    check_verified(&r);
    assert!(
        !dir.path().join("m2.img").exists(),
        "a failed member is never opened"
    );
    assert!(device_counter(&r, "array", "degraded_stripe_reads") > 100);
    assert!(device_counter(&r, "array", "degraded_stripe_writes") > 100);
    // The lost member, rebuilt from the others, completes a consistent array.
    let mut members = member_files(dir.path(), 4);
    rebuild_lost(&mut members);
    let members: Vec<Vec<u8>> = members.into_iter().flatten().collect();
    let stamped = assert_stamps_in_place(&volume_image("raid5", 16 * KIB, &members));
    assert!(stamped > 5000, "{stamped}");
}

#[test]
fn raid1_and_raid10_mirrors_are_byte_identical() {
    for (level, n, failed) in [
        ("raid1", 2, vec![]),
        ("raid10", 4, vec![]),
        ("raid10", 4, vec![3]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "seed = 14\n{}{}",
            raid_device(level, 16 * KIB, n, &failed),
            workload(4000, 4 << 20, 0.4, MIXED)
        );
        let r = run(dir.path(), &text, true, 16).unwrap_or_else(|e| panic!("{level}: {e}"));
        check_verified(&r);
        let members = member_files(dir.path(), n);
        for pair in members.chunks(if level == "raid1" { n } else { 2 }) {
            if let [Some(a), Some(b)] = pair {
                assert!(a == b, "{level}: copies differ");
            }
        }
        // A lost copy: its twin stands in.
        let members: Vec<Vec<u8>> = members
            .iter()
            .enumerate()
            .map(|(i, m)| m.clone().or_else(|| members[i ^ 1].clone()).unwrap())
            .collect();
        let stamped = assert_stamps_in_place(&volume_image(level, 16 * KIB, &members));
        assert!(stamped > 3000, "{level}: {stamped}");
    }
}

#[test]
fn every_level_lays_data_out_like_the_model_and_holds_what_a_single_file_holds() {
    // Inline IO (queue depth 1): the same seed writes the same versions in
    // the same order, so the array's volume must equal a plain file's.
    let region = 3 << 20;
    let dir = tempfile::tempdir().unwrap();
    let plain = format!(
        "seed = 15\n[[devices]]\nname = \"array\"\npath = \"plain.img\"\ncapacity_bytes = {region}\ncreate = true\n{}",
        workload(3000, region, 0.3, MIXED)
    );
    check_verified(&run(dir.path(), &plain, true, 0).unwrap());
    let want = std::fs::read(dir.path().join("plain.img")).unwrap();
    for (level, n) in [("raid0", 3), ("raid1", 2), ("raid5", 4), ("raid10", 4)] {
        let d = tempfile::tempdir().unwrap();
        let text = format!(
            "seed = 15\n{}{}",
            raid_device(level, 16 * KIB, n, &[]),
            workload(3000, region, 0.3, MIXED)
        );
        check_verified(&run(d.path(), &text, true, 0).unwrap_or_else(|e| panic!("{level}: {e}")));
        let members: Vec<Vec<u8>> = member_files(d.path(), n).into_iter().flatten().collect();
        let image = volume_image(level, 16 * KIB, &members);
        assert!(
            image[..region] == want[..],
            "{level}: the volume differs from the plain file"
        );
        assert!(
            image[region..].iter().all(|&b| b == 0),
            "{level}: bytes past the region"
        );
        if level == "raid5" {
            assert_parity_consistent(&members);
        }
    }
}

#[test]
fn a_member_truncated_underneath_fails_reads_naming_member_path_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "seed = 16\n{}[policy]\nkind = \"passthrough\"\n[[tenants]]\nname = \"t\"\nworkload = {{ generator = \"uniform\", params = {{ duration_s = 2, rate_iops = 2000, region_size_bytes = \"8MiB\", read_ratio = 1.0, size_bytes = \"4k\" }} }}\ndriver = {{ mode = \"open\", speed = 1.0 }}\n",
        raid_device("raid5", 16 * KIB, 3, &[])
    );
    let path = dir.path().join("m2.img");
    let truncate = {
        let path = path.clone();
        std::thread::spawn(move || {
            for _ in 0..200 {
                if std::fs::metadata(&path).is_ok_and(|m| m.len() == MEMBER_BYTES as u64) {
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
    // Passthrough survives device errors: the reads that needed the
    // truncated member fail (EIO to the host); the run goes on.
    let r = run(dir.path(), &text, false, 8).unwrap();
    truncate.join().unwrap();
    assert!(r.real.host_ios_failed > 50, "{:?}", r.real);
    let e = &r.real.device_error_messages[0];
    assert!(e.contains("device array (raid5 of 3 members"), "{e}");
    assert!(e.contains("raid5 member 2 (file "), "{e}");
    assert!(e.contains("m2.img"), "{e}");
    assert!(e.contains("at member offset"), "{e}");
    assert!(
        e.to_lowercase().contains("fill whole buffer") || e.contains("eof"),
        "{e}"
    );
}

#[test]
fn bad_raid_configs_are_refused_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let tail = workload(10, 4096, 1.0, "4k");
    let fail = |device: String| {
        run(dir.path(), &format!("{device}{tail}"), false, 1)
            .err()
            .expect("refused")
    };
    // The simulator's shape rules.
    let e = fail(raid_device("raid5", 16 * KIB, 2, &[]));
    assert!(
        e.contains("key `devices[0].members`: expected at least 3 devices for raid5"),
        "{e}"
    );
    let e = fail(raid_device("raid5", 16 * KIB, 4, &[0, 1]));
    assert!(e.contains("at most 1 failed member"), "{e}");
    let e = fail(raid_device("raid5", 1000, 3, &[]));
    assert!(
        e.contains("key `devices[0].stripe_unit_bytes`") && e.contains("found 1000"),
        "{e}"
    );
    // Unknown keys, listed by the simulator's parser.
    let e = fail(raid_device("raid5", 16 * KIB, 3, &[]).replace("level =", "levle ="));
    assert!(e.contains("devices[0]") && e.contains("levle"), "{e}");
    // A member needs a backing store, and only that.
    let e = fail(raid_device("raid5", 16 * KIB, 3, &[]).replace("{ path = \"m1.img\", ", "{ "));
    assert!(e.contains("devices[0].members[1].path"), "{e}");
    let e = fail(raid_device("raid5", 16 * KIB, 3, &[]).replace(
        "{ path = \"m1.img\"",
        "{ model = \"ssd\", path = \"m1.img\"",
    ));
    assert!(
        e.contains("devices[0].members[1].model") && e.contains("not a real-device key"),
        "{e}"
    );
}

#[test]
fn one_config_for_the_simulator_and_the_real_run() {
    // Members carry a model (simulation) and a file (real run), as
    // `tierlab compare` takes them.
    let dir = tempfile::tempdir().unwrap();
    let member = |i: usize| {
        format!(
            "{{ model = \"ssd\", preset = \"intel-p3700\", capacity_bytes = {MEMBER_BYTES}, path = \"m{i}.img\", create = true }}"
        )
    };
    let text = format!(
        "seed = 17\n[[devices]]\nname = \"array\"\nmodel = \"raid\"\nlevel = \"raid5\"\nstripe_unit_bytes = 16384\nfailed_members = [3]\nmembers = [{}, {}, {}, {{ model = \"ssd\", preset = \"intel-p3700\", capacity_bytes = {MEMBER_BYTES} }}]\n{}",
        member(0),
        member(1),
        member(2),
        workload(2000, 4 << 20, 0.5, MIXED)
    );
    let cfg = config::parse(&text, "t.toml", &[]).unwrap();
    let sim = tierlab_sim::run::run(&cfg, dir.path()).unwrap();
    assert_eq!(sim.outcome.host_ios, 2000);
    let mut real_cfg = cfg.clone();
    for (i, d) in real_cfg.devices.iter_mut().enumerate() {
        *d = tierlab_real::raid::real_device_table(d, &format!("devices[{i}]")).unwrap();
    }
    let opts = RealOptions {
        verify: true,
        ..Default::default()
    };
    let real = tierlab_real::run(&real_cfg, dir.path(), &opts).unwrap();
    check_verified(&real);
    assert_eq!(real.run.outcome.host_ios, 2000);
    // The same layout and write modes: exactly the model's member IOs.
    let (s, r) = (
        &sim.info.device_counters["array"],
        &real.run.info.device_counters["array"],
    );
    assert_eq!(s, r);
    for k in [
        "rmw_stripes",
        "degraded_stripe_writes",
        "degraded_stripe_reads",
    ] {
        assert!(r[k].as_u64().unwrap() > 100, "{k}: {r}");
    }
}
