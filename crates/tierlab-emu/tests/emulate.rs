//! The emulator end to end: data through the FUSE file round-trips, the
//! file behaves like a fixed-size device, and QD1 random reads through it
//! run at the rate the HDD model predicts. The FUSE tests need root and
//! /dev/fuse and skip with a message otherwise; the timing tests run alone
//! under nextest (.config/nextest.toml).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use tierlab_core::{Completion, DeviceIo, Op};
use tierlab_devices::{DeviceConfig, HddParams, MemoryParams, Scheduler};
use tierlab_emu::{Emulator, ModelFactory, TimedDevice};
use tierlab_real::backend::RamBackend;

const CAPACITY: u64 = 1 << 30;

/// A 15k rpm SAS disk shrunk to 1 GiB, no NCQ: every random IO pays a seek
/// and a rotation (~5.5 ms), as the paper's disks did.
fn hdd() -> DeviceConfig {
    let mut p = HddParams::sas_15k_600gb();
    p.capacity_bytes = CAPACITY;
    p.scheduler = Scheduler::Fifo;
    p.queue_depth = 1;
    DeviceConfig::Hdd(p)
}

fn factory(config: DeviceConfig) -> ModelFactory {
    Box::new(move || Ok(tierlab_devices::build(&config, 1)?))
}

fn fuse_skip_reason() -> Option<String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (mounting FUSE without fusermount3 needs root)".into());
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    None
}

/// Real-time priority for this test's thread and the emulator threads it
/// starts (they inherit it), where allowed: the timing then holds while
/// other processes load the machine (`tierlab emulate --realtime`).
fn realtime_if_allowed() -> bool {
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: a valid sched_param for the calling thread only.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
}

/// Offsets of 4 KiB-aligned random IOs over the capacity (xorshift).
fn offsets(n: usize, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (CAPACITY / 4096)) * 4096
        })
        .collect()
}

/// The model's mean latency of QD1 random 4 KiB reads, in virtual time:
/// each read submitted when the previous one completes.
fn model_qd1_mean_ns(config: &DeviceConfig, n: usize) -> f64 {
    let mut m = tierlab_devices::build(config, 7).unwrap();
    let (mut t, mut sum, mut done) = (0u64, 0u128, Vec::<Completion>::new());
    for (tag, off) in offsets(n, 99).into_iter().enumerate() {
        m.submit(
            t,
            DeviceIo {
                tag: tag as u64,
                op: Op::Read,
                offset_bytes: off,
                size_bytes: 4096,
            },
        );
        while done.is_empty() {
            let next = m.next_event_ns().expect("an IO in flight");
            m.advance(next, &mut done);
        }
        let end = done.pop().unwrap().done_ns;
        sum += (end - t) as u128;
        t = end;
    }
    sum as f64 / n as f64
}

#[test]
fn data_round_trips_through_the_fuse_file_and_its_size_is_fixed() {
    if let Some(why) = fuse_skip_reason() {
        eprintln!("SKIP data_round_trips_through_the_fuse_file_and_its_size_is_fixed: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A fast model: this test is about data, not time.
    let mem = DeviceConfig::Memory(MemoryParams {
        capacity_bytes: 64 << 20,
        ..MemoryParams::default()
    });
    let cap = 64u64 << 20;
    let emu = Emulator::start(
        factory(mem),
        Arc::new(RamBackend::new(cap)),
        cap,
        dir.path(),
        "dev.img",
        false,
    )
    .unwrap();
    let path = emu.file().to_path_buf();
    assert_eq!(path, dir.path().canonicalize().unwrap().join("dev.img"));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), cap);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["dev.img"]);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // Aligned, unaligned, across the 1 MiB RAM chunks, up to the last byte.
    let pieces: [(u64, usize); 4] = [
        (0, 4096),
        (12_345, 3000),
        ((1 << 20) - 100, 300_000),
        (cap - 777, 777),
    ];
    for (i, &(off, len)) in pieces.iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|k| (k * 31 + i * 7) as u8).collect();
        f.write_all_at(&data, off).unwrap();
        let mut back = vec![0u8; len];
        f.read_exact_at(&mut back, off).unwrap();
        assert_eq!(back, data, "piece {i} at {off}");
    }
    // Never written: zeros.
    let mut z = vec![1u8; 8192];
    f.read_exact_at(&mut z, 32 << 20).unwrap();
    assert!(z.iter().all(|&b| b == 0));
    // Reads stop at the end; writes past it fail (the part before is written).
    let mut tail = vec![0u8; 4096];
    assert_eq!(f.read_at(&mut tail, cap - 100).unwrap(), 100);
    assert_eq!(f.read_at(&mut tail, cap).unwrap(), 0);
    let e = f.write_at(b"x", cap).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    assert_eq!(f.write_at(&[9u8; 10], cap - 4).unwrap(), 4);
    // The size is the device's.
    assert_eq!(
        f.set_len(cap / 2).unwrap_err().raw_os_error(),
        Some(libc::EPERM)
    );
    f.set_len(cap).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let c = emu.counters();
    let r = emu.finish();
    assert!(!path.exists(), "unmounted");
    assert_eq!(r.flushes, 1);
    assert_eq!(r.writes, c.writes);
    // Each write above is one FUSE request except the 300,000-byte one
    // (within max_write) and the 4-byte tail: 5 in all.
    assert_eq!(r.writes, 5, "{r:?}");
    assert_eq!(r.bytes_written, 4096 + 3000 + 300_000 + 777 + 4);
    // 6 reads with data; the read at the end may or may not reach us.
    assert!((6..=7).contains(&r.reads), "{r:?}");
}

#[test]
fn the_device_thread_alone_follows_the_hdd_model_at_qd1() {
    // No FUSE: the driver's own timing error (its lateness) and the model's
    // latency as a client sees it through the callbacks.
    let config = hdd();
    let predicted_ns = model_qd1_mean_ns(&config, 20_000);
    let realtime = realtime_if_allowed();
    let dev = TimedDevice::start(factory(config)).unwrap();
    let h = dev.handle();
    let n = 300;
    let t0 = Instant::now();
    for off in offsets(n, 5) {
        let (tx, rx) = channel();
        h.submit(Op::Read, off, 4096, Box::new(move || tx.send(()).unwrap()));
        rx.recv().unwrap();
    }
    let client_ns = t0.elapsed().as_nanos() as f64 / n as f64;
    let r = dev.finish();
    let model_ns = r.read_latency.mean_ns as f64;
    eprintln!(
        "QD1 random 4 KiB reads, sas-15k 1 GiB fifo (real-time: {realtime}): model predicts {:.3} ms, the model served these in {:.3} ms, \
         the client saw {:.3} ms; lateness mean {:.1} us, p99 {:.1} us",
        predicted_ns / 1e6,
        model_ns / 1e6,
        client_ns / 1e6,
        r.lateness.mean_ns as f64 / 1e3,
        r.lateness.p99_ns as f64 / 1e3
    );
    // 300 IOs of ~5.5 ms ± 1.9 ms: the sample mean is within ~2 % of the
    // model's long-run mean; 8 % leaves room for noise.
    assert!(
        (model_ns / predicted_ns - 1.0).abs() < 0.08,
        "{model_ns} vs {predicted_ns}"
    );
    assert!(
        (client_ns / predicted_ns - 1.0).abs() < 0.10,
        "{client_ns} vs {predicted_ns}"
    );
}

#[test]
fn qd1_reads_through_the_fuse_file_run_at_the_models_rate() {
    if let Some(why) = fuse_skip_reason() {
        eprintln!("SKIP qd1_reads_through_the_fuse_file_run_at_the_models_rate: {why}");
        return;
    }
    let config = hdd();
    let predicted_ns = model_qd1_mean_ns(&config, 20_000);
    let realtime = realtime_if_allowed();
    let dir = tempfile::tempdir().unwrap();
    let emu = Emulator::start(
        factory(config),
        Arc::new(RamBackend::new(CAPACITY)),
        CAPACITY,
        dir.path(),
        "disk.img",
        false,
    )
    .unwrap();
    let f = OpenOptions::new().read(true).open(emu.file()).unwrap();
    let mut buf = vec![0u8; 4096];
    let offs = offsets(400, 11);
    let t0 = Instant::now();
    for &off in &offs {
        f.read_exact_at(&mut buf, off).unwrap();
    }
    let elapsed = t0.elapsed();
    drop(f);
    let r = emu.finish();
    let measured_iops = offs.len() as f64 / elapsed.as_secs_f64();
    let predicted_iops = 1e9 / predicted_ns;
    eprintln!(
        "QD1 random 4 KiB reads through FUSE (real-time: {realtime}): {measured_iops:.1} IOPS measured, {predicted_iops:.1} predicted \
         by the model ({:+.1} %); the model's latency on these IOs {:.3} ms, lateness mean {:.1} us, p99 {:.1} us; \
         model util {:.1} %",
        100.0 * (measured_iops / predicted_iops - 1.0),
        r.read_latency.mean_ns as f64 / 1e6,
        r.lateness.mean_ns as f64 / 1e3,
        r.lateness.p99_ns as f64 / 1e3,
        r.util_pct
    );
    assert_eq!(r.reads, offs.len() as u64);
    assert!(
        (measured_iops / predicted_iops - 1.0).abs() < 0.10,
        "{measured_iops:.1} IOPS vs {predicted_iops:.1} predicted"
    );
    assert!(elapsed > Duration::from_millis(1500));
}

#[test]
fn a_bad_file_name_size_or_mount_point_is_refused_by_kind() {
    use tierlab_emu::{EmuError, EmulatedFs, Mounted};
    let backend = Arc::new(RamBackend::new(1 << 20));
    let dev = TimedDevice::start(factory(hdd())).unwrap();
    for bad in ["", "a/b", ".."] {
        let e = EmulatedFs::new(bad, 4096, backend.clone(), dev.handle())
            .err()
            .unwrap();
        assert!(
            matches!(&e, EmuError::File(p) if p.key() == "name"),
            "{e:?}"
        );
        assert!(e.to_string().contains("one path component"), "{e}");
    }
    let e = EmulatedFs::new("disk.img", 2 << 20, backend.clone(), dev.handle())
        .err()
        .unwrap();
    assert!(
        matches!(&e, EmuError::File(p) if p.key() == "capacity_bytes" && p.found == "2097152"),
        "{e:?}"
    );
    // A regular file is no mount point; nothing is mounted (no root needed).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let fs = EmulatedFs::new("disk.img", 4096, backend, dev.handle()).unwrap();
    let e = Mounted::mount(fs, &file, false).err().unwrap();
    assert!(
        matches!(&e, EmuError::Mount { mountpoint, .. } if mountpoint == &file),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!("mount point {}: not a directory", file.display())
    );
    dev.finish();
}
