//! The crash-state checker on every stack that moves data, and on stacks
//! broken on purpose (it must catch them).
//!
//! `TIERLAB_CRASH_STATES=N` checks N states per stack instead of the
//! default suite's sample (the long mode: docs/crash-consistency.md).

use tierlab_core::policy::{BufRef, HostIo, Outbox, Policy};
use tierlab_core::{DeviceIo, Op, TimeNs};
use tierlab_crash::{CrashError, Options, Stack, StateKind, check};
use tierlab_policies::cache::{self, Cache, CacheParams, WriteMode};
use tierlab_stack::StackConfig;

fn dev(name: &str, path: &str, size: &str) -> String {
    format!("[[devices]]\nname = \"{name}\"\npath = \"{path}\"\ncapacity_bytes = \"{size}\"\n")
}

fn stack(text: &str) -> Stack {
    let (cfg, _) = StackConfig::parse(text, "test.toml", &[]).unwrap();
    Stack::from_config(&cfg).unwrap()
}

fn states(default: u64) -> u64 {
    std::env::var("TIERLAB_CRASH_STATES")
        .ok()
        .map_or(default, |v| {
            v.parse().expect("TIERLAB_CRASH_STATES is a number")
        })
}

fn assert_clean(name: &str, s: &Stack, seed: u64) {
    let n = states(160);
    let opts = Options {
        seed,
        states: n,
        // Enough log events for that many distinct crash points.
        host_ios: n.max(2000),
        ..Default::default()
    };
    let r = check(s, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    eprintln!(
        "{name}: {} states at {} crash points, {} device writes, {} FLUSHes, {} violations",
        r.states(),
        r.crash_points,
        r.device_writes,
        r.host_flushes,
        r.violations.len()
    );
    assert!(
        r.host_flushes > 10 && r.host_writes > 500,
        "{name}: the workload flushes and writes: {r:?}"
    );
    assert!(
        r.states() >= opts.states * 9 / 10,
        "{name}: {} states checked",
        r.states()
    );
    if let Some(v) = r.violations.first() {
        panic!(
            "{name}: {} of {} states lose acknowledged data; first: crash point {} ({}), {}",
            r.violations.len(),
            r.states(),
            v.crash_point,
            v.kind.as_str(),
            v.message
        );
    }
}

/// A cache whose FLUSH writes dirty pages back (`persistent = false`; on
/// RAM that is the default, and the key is left out to check it).
fn cache_stack(mode: &str, cache_path: &str) -> Stack {
    let persistent = if cache_path == "ram" {
        ""
    } else {
        "persistent = false\n"
    };
    stack(&format!(
        "{}{}[policy]\nkind = \"cache\"\ncapacity_bytes = \"1MiB\"\nwrite_mode = \"{mode}\"\n{persistent}",
        dev("cache", cache_path, "1MiB"),
        dev("disk", "disk.img", "4MiB")
    ))
}

/// A cache as configured by default on a file: persistent metadata carved
/// out of its 1 MiB, FLUSH commits it instead of writing back.
fn default_cache_stack(kind: &str) -> Stack {
    stack(&format!(
        "{}{}[policy]\nkind = \"{kind}\"\ncapacity_bytes = \"1MiB\"\n{}",
        dev("cache", "cache.img", "1MiB"),
        dev("disk", "disk.img", "4MiB"),
        if kind == "flashcache" {
            "associativity = 64\n"
        } else {
            ""
        }
    ))
}

#[test]
fn passthrough_keeps_every_flushed_write() {
    assert_clean("passthrough", &stack(&dev("disk", "disk.img", "4MiB")), 1);
}

#[test]
fn write_back_caches_keep_every_flushed_write_on_ram_and_on_files() {
    assert_clean(
        "cache write-back, RAM cache",
        &cache_stack("write-back", "ram"),
        2,
    );
    assert_clean(
        "cache write-back, file cache",
        &cache_stack("write-back", "cache.img"),
        3,
    );
    for (i, kind) in ["cache", "flashcache"].into_iter().enumerate() {
        assert_clean(
            &format!("{kind}, file cache, persistent by default"),
            &default_cache_stack(kind),
            7 + i as u64,
        );
    }
}

#[test]
fn write_through_and_write_around_caches_keep_every_flushed_write() {
    assert_clean(
        "cache write-through",
        &cache_stack("write-through", "ram"),
        4,
    );
    assert_clean("cache write-around", &cache_stack("write-around", "ram"), 5);
}

#[test]
fn flashcache_keeps_every_flushed_write() {
    let s = stack(&format!(
        "{}{}[policy]\nkind = \"flashcache\"\ncapacity_bytes = \"2MiB\"\npersistent = false\n",
        dev("ssd", "ssd.img", "2MiB"),
        dev("disk", "disk.img", "8MiB")
    ));
    assert_clean("flashcache", &s, 6);
}

/// A cache that keeps its slot metadata on the cache device file and
/// restarts warm (`persistent = true`).
fn persistent_cache_stack(kind: &str, mode: &str) -> Stack {
    let policy = if kind == "flashcache" {
        "kind = \"flashcache\"\ncapacity_bytes = \"1MiB\"\nassociativity = 64\n".to_string()
    } else {
        format!("kind = \"cache\"\ncapacity_bytes = \"1MiB\"\nwrite_mode = \"{mode}\"\n")
    };
    stack(&format!(
        "{}{}[policy]\n{policy}persistent = true\n",
        dev("cache", "cache.img", "2MiB"),
        dev("disk", "disk.img", "4MiB")
    ))
}

#[test]
fn persistent_caches_restart_warm_and_keep_every_flushed_write() {
    for (i, (kind, mode)) in [
        ("cache", "write-back"),
        ("cache", "write-through"),
        ("cache", "write-around"),
        ("flashcache", "write-back"),
    ]
    .into_iter()
    .enumerate()
    {
        assert_clean(
            &format!("{kind} {mode}, persistent"),
            &persistent_cache_stack(kind, mode),
            20 + i as u64,
        );
    }
}

/// A cache broken on purpose by `breaks`, on a cache device of
/// `cache_bytes` (RAM if `volatile`) over a 4 MiB disk.
fn broken_cache_stack(
    p: CacheParams,
    cache_bytes: u64,
    volatile: bool,
    breaks: fn(&mut Cache),
) -> Stack {
    Stack {
        build: Box::new(move || {
            let mut c = Cache::new(&p)?;
            breaks(&mut c);
            Ok(Box::new(c) as Box<dyn Policy>)
        }),
        device_names: vec!["cache".into(), "disk".into()],
        capacities_bytes: vec![cache_bytes, 4 << 20],
        volatile: vec![volatile, false],
        shingled_band_bytes: vec![None, None],
        volume_bytes: 4 << 20,
        devices: Vec::new(),
        redundant_arrays: Vec::new(),
    }
}

/// The persistent cache with its commits' data flush removed: an entry can
/// reach the device before the data it names; the checker must see a
/// restart serve (and copy back) bytes no write of that block produced.
#[test]
fn the_checker_catches_a_persistent_cache_whose_commit_skips_the_flush() {
    let mut p = CacheParams::with_capacity(1 << 20);
    p.persistent = true;
    let s = broken_cache_stack(p, 2 << 20, false, |c| c.broken_commit_skips_flush = true);
    let opts = Options {
        states: states(400),
        ..Default::default()
    };
    let r = check(&s, &opts).unwrap();
    eprintln!(
        "persistent cache, commit without flush: {} of {} states violate",
        r.violations.len(),
        r.states()
    );
    assert!(
        !r.violations.is_empty(),
        "not caught in {} states",
        r.states()
    );
}

/// The persistent cache with its commits' backing flush removed: a page
/// written back, marked clean (or evicted, its slot reused) by a commit,
/// can lose its write-back in a crash while the cache no longer says it is
/// dirty. A cache small for the workload, so pages are written back and
/// evicted between FLUSHes.
#[test]
fn the_checker_catches_a_persistent_cache_whose_commit_skips_the_backing_flush() {
    let mut p = CacheParams::with_capacity(cache::capacity_bytes_for(32, 4096, true));
    p.persistent = true;
    let s = broken_cache_stack(p, 2 << 20, false, |c| {
        c.broken_commit_skips_backing_flush = true
    });
    let opts = Options {
        states: states(150),
        ..Default::default()
    };
    let r = check(&s, &opts).unwrap();
    eprintln!(
        "persistent cache, commit without backing flush: {} of {} states violate",
        r.violations.len(),
        r.states()
    );
    assert!(
        !r.violations.is_empty(),
        "not caught in {} states",
        r.states()
    );
}

/// The cache with its FLUSH write-back removed (a FLUSH completes at once,
/// as before the checker existed): the checker must catch it, and shrink
/// the failing state to the fewest unflushed writes.
#[test]
fn the_checker_catches_a_cache_whose_flush_skips_the_write_back() {
    let mut p = CacheParams::with_capacity(1 << 20);
    p.write_mode = WriteMode::WriteBack;
    p.persistent = false;
    let s = broken_cache_stack(p, 1 << 20, true, |c| c.broken_flush_skips_write_back = true);
    let opts = Options {
        states: 40,
        ..Default::default()
    };
    let r = check(&s, &opts).unwrap();
    assert!(
        r.violations.len() > r.states() as usize / 2,
        "caught in most states: {} of {}",
        r.violations.len(),
        r.states()
    );
    let v = &r.violations[0];
    assert!(
        v.message.contains("acknowledged before a completed FLUSH"),
        "{}",
        v.message
    );
    // The shrinker: a state that applied unflushed writes and failed is
    // cut down to the writes its failure needs (here, mostly none: the
    // flushed write was never on the backing device at all).
    let shrunk = r
        .violations
        .iter()
        .filter(|v| {
            v.kind == StateKind::Everything && v.unflushed_writes > 0 && v.writes_applied.is_empty()
        })
        .count();
    assert!(
        shrunk > 0,
        "{:?}",
        r.violations
            .iter()
            .map(|v| (v.unflushed_writes, v.writes_applied.len()))
            .collect::<Vec<_>>()
    );
    assert!(
        r.violations
            .iter()
            .all(|v| v.writes_applied.len() as u64 <= v.unflushed_writes)
    );
    // Replaying one state gives the same finding.
    let again = check(
        &s,
        &Options {
            only: Some((v.crash_point, v.kind)),
            ..opts.clone()
        },
    )
    .unwrap();
    assert_eq!(again.states(), 1);
    assert_eq!(again.violations[0].message, v.message);
}

/// A passthrough that acknowledges a write as soon as it is submitted (a
/// drive lying about its cache): a write acknowledged before a FLUSH may
/// still be in flight when the FLUSH's device flush starts, so it is not
/// covered — the checker must see the write lost in some state.
#[derive(Default)]
struct AckEarly {
    reads: std::collections::HashSet<u64>,
}

impl Policy for AckEarly {
    fn name(&self) -> &str {
        "ack-early"
    }
    fn tier_names(&self) -> Vec<String> {
        vec!["device".into()]
    }
    fn moves_data(&self) -> bool {
        true
    }
    fn on_host_io(&mut self, _now: TimeNs, io: HostIo, out: &mut Outbox) {
        match io.op {
            Op::Flush => return out.complete.push((io.id, 0)),
            Op::Read => {
                self.reads.insert(io.id);
            }
            // The lie: acknowledged before the device is done.
            _ => out.complete.push((io.id, 0)),
        }
        out.device_ios.push((
            0,
            DeviceIo {
                tag: io.id,
                op: io.op,
                offset_bytes: io.offset_bytes,
                size_bytes: io.size_bytes,
            },
        ));
        out.data_for(
            0,
            io.id,
            BufRef::Host {
                host_id: io.id,
                offset_bytes: 0,
            },
        );
    }
    fn on_device_completion(&mut self, _now: TimeNs, _device: usize, tag: u64, out: &mut Outbox) {
        if self.reads.remove(&tag) {
            out.complete.push((tag, 0));
        }
    }
}

/// A hand-made policy over one 4 MiB disk.
fn one_disk_stack(build: impl Fn() -> Box<dyn Policy> + 'static) -> Stack {
    Stack {
        build: Box::new(move || Ok(build())),
        device_names: vec!["disk".into()],
        capacities_bytes: vec![4 << 20],
        volatile: vec![false],
        shingled_band_bytes: vec![None],
        volume_bytes: 4 << 20,
        devices: Vec::new(),
        redundant_arrays: Vec::new(),
    }
}

#[test]
fn the_checker_catches_writes_acknowledged_before_they_completed() {
    let s = one_disk_stack(|| Box::new(AckEarly::default()));
    let r = check(
        &s,
        &Options {
            states: 60,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        !r.violations.is_empty(),
        "an early acknowledgement must be caught: {r:?}"
    );
    // Lost where only what was durable reached the medium.
    assert!(
        r.violations.iter().any(|v| v.kind == StateKind::Durable),
        "{:?}",
        r.violations
    );
}

#[test]
fn same_options_same_report() {
    let s = cache_stack("write-back", "ram");
    let opts = Options {
        states: 24,
        host_ios: 400,
        ..Default::default()
    };
    let a = check(&s, &opts).unwrap();
    let b = check(&s, &opts).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let c = check(&s, &Options { seed: 9, ..opts }).unwrap();
    assert_ne!(a.log_events, c.log_events, "another seed, another workload");
}

#[test]
fn bad_options_and_stacks_are_refused_with_the_reason() {
    let s = cache_stack("write-back", "ram");
    let e = check(
        &s,
        &Options {
            iodepth: 0,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(&e, CrashError::Option(p) if p.key() == "iodepth"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "key `iodepth`: expected at least 1, found 0");
    let e = check(
        &s,
        &Options {
            read_percent: 101,
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert_eq!(e, "key `read_percent`: expected 0 to 100, found 101");
    let (cfg, _) = StackConfig::parse(&dev("disk", "d.img", "2GiB"), "big.toml", &[]).unwrap();
    let e = Stack::from_config(&cfg).err().unwrap().to_string();
    assert!(e.contains("at most") && e.contains("--set"), "{e}");
    // Fault injection is for real runs, on a store or an array.
    let faulty = format!("{}fail_after_writes = 3\n", dev("disk", "d.img", "4MiB"));
    let (cfg, _) = StackConfig::parse(&faulty, "f.toml", &[]).unwrap();
    let e = Stack::from_config(&cfg).err().unwrap().to_string();
    assert!(
        e.contains("devices[0].fail_after_writes") && e.contains("--surprise-every"),
        "{e}"
    );
    // An array's failed member needs no store; a bad one is named.
    let (cfg, _) = StackConfig::parse(
        "[[devices]]\nname = \"a\"\nmodel = \"raid\"\nlevel = \"raid5\"\nstripe_unit_bytes = 16384\n\
         members = [{ path = \"m0\", capacity_bytes = \"1MiB\" }, { path = \"m1\" }, \
         { path = \"m2\", capacity_bytes = \"1MiB\" }]\n",
        "r.toml",
        &[],
    )
    .unwrap();
    let e = Stack::from_config(&cfg).err().unwrap().to_string();
    assert!(
        e.contains("devices[0].members[1].capacity_bytes`: missing"),
        "{e}"
    );
}

fn atsmf_stack(flush_writes_back: bool) -> Stack {
    atsmf_stack_with(flush_writes_back, false)
}

fn atsmf_stack_with(flush_writes_back: bool, persistent: bool) -> Stack {
    stack(&format!(
        "{}{}[policy]\nkind = \"atsmf\"\nsub_lun_size_bytes = \"1MiB\"\nmove_chunk_bytes = \"256KiB\"\n\
         buffer_bytes = \"1MiB\"\nmemory_cap_bytes = \"2MiB\"\nperiod_s = 0.01\ncollect_s = 0.01\n\
         min_samples = 5\ntop_n = 2\nflush_writes_back = {flush_writes_back}\npersistent = {persistent}\n",
        dev("memory", "ram", "3MiB"),
        dev("flash", "flash.img", "8MiB")
    ))
}

#[test]
fn atsmf_with_its_tiering_table_restarts_warm_and_keeps_every_flushed_write() {
    let s = atsmf_stack_with(true, true);
    // Power cut at the end of the workload: the restart re-promotes the
    // sub-LUNs the table lists (those in memory then), from flash.
    let rec = tierlab_crash::record(&s, &Options::default()).unwrap();
    let before: std::collections::HashMap<_, _> = rec.exec.policy.counters().into_iter().collect();
    assert!(
        before["promotions"] >= 1.0 && before["tiering_table_writes"] >= 1.0,
        "{before:?}"
    );
    let mut policy = (s.build)().unwrap();
    let mut media =
        tierlab_crash::media::Media::new(&s.maps(), rec.exec.media.images(), &s.volatile, None)
            .unwrap();
    policy.open(&mut media).unwrap();
    let after: std::collections::HashMap<_, _> = policy.counters().into_iter().collect();
    eprintln!(
        "atsmf, persistent: {} promotions, {} table writes; after a restart {} sub-LUNs warm",
        before["promotions"], before["tiering_table_writes"], after["warm_promoted_sub_luns"]
    );
    assert!(after["warm_promoted_sub_luns"] >= 1.0, "{after:?}");
    assert_clean("atsmf, persistent", &s, 30);
}

#[test]
fn atsmf_keeps_every_flushed_write_and_its_memory_tier_is_used() {
    let s = atsmf_stack(true);
    // The workload's hot region must be promoted, or this proves nothing.
    let rec = tierlab_crash::record(&s, &Options::default()).unwrap();
    let counters: std::collections::HashMap<_, _> =
        rec.exec.policy.counters().into_iter().collect();
    assert!(
        counters["promotions"] >= 1.0 && counters["memory_ios"] > 100.0,
        "{counters:?}"
    );
    assert!(
        counters["flush_back_bytes"] > 0.0,
        "FLUSHes wrote memory data back: {counters:?}"
    );
    assert_clean("atsmf", &s, 7);
}

/// ATSMF with `flush_writes_back = false` (the paper's design: memory is
/// not made durable by a FLUSH): the checker must catch it.
#[test]
fn the_checker_catches_atsmf_without_the_flush_write_back() {
    let r = check(
        &atsmf_stack(false),
        &Options {
            states: 40,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!r.violations.is_empty(), "{r:?}");
    assert!(
        r.violations
            .iter()
            .any(|v| v.message.contains("acknowledged before a completed FLUSH"))
    );
}

fn hswd_stack(mapping: &str) -> Stack {
    stack(&format!(
        "{}{}[policy]\nkind = \"hswd\"\npcache_bytes = \"2MiB\"\nband_bytes = \"256KiB\"\nmapping = \"{mapping}\"\n\
         clean_start_pct = 60\nclean_stop_pct = 30\n",
        dev("pcache", "pcache.img", "3MiB"),
        dev("smr", "smr.img", "8MiB")
    ))
}

#[test]
fn hswd_keeps_every_flushed_write_through_rmws_fully_and_set_associative() {
    for (mapping, seed) in [("fully", 8), ("set", 9)] {
        let s = hswd_stack(mapping);
        // RMWs must run during the workload, or this proves little.
        let rec = tierlab_crash::record(&s, &Options::default()).unwrap();
        let counters: std::collections::HashMap<_, _> =
            rec.exec.policy.counters().into_iter().collect();
        assert!(
            counters["rmw_count"] >= 3.0 && counters["commits"] > 10.0,
            "{mapping}: {counters:?}"
        );
        assert_clean(&format!("hswd {mapping}"), &s, seed);
    }
}

/// HSWD with one persistence step removed, each: the checker must catch it.
#[test]
fn the_checker_catches_each_hswd_persistence_step_removed() {
    use tierlab_policies::hswd::{Broken, Hswd, HswdParams, Mapping};
    for broken in [
        Broken::SkipCommitFlush,
        Broken::SkipJournal,
        Broken::AckBeforeCommit,
    ] {
        let s = Stack {
            build: Box::new(move || {
                let mut p = HswdParams::with_pcache(2 << 20);
                p.band_bytes = tierlab_policies::cache::ByteCount(256 << 10);
                p.mapping = Mapping::Fully;
                p.clean_start_pct = 60.0;
                p.clean_stop_pct = 30.0;
                let mut h = Hswd::new(&p, 8 << 20)?;
                h.broken = broken;
                Ok(Box::new(h) as Box<dyn Policy>)
            }),
            device_names: vec!["pcache".into(), "smr".into()],
            capacities_bytes: vec![3 << 20, 8 << 20],
            volatile: vec![false, false],
            shingled_band_bytes: vec![None, Some(256 << 10)],
            volume_bytes: 8 << 20,
            devices: Vec::new(),
            redundant_arrays: Vec::new(),
        };
        let r = check(
            &s,
            &Options {
                states: 400,
                ..Default::default()
            },
        )
        .unwrap();
        eprintln!(
            "{broken:?}: {} of {} states violate",
            r.violations.len(),
            r.states()
        );
        assert!(
            !r.violations.is_empty(),
            "{broken:?} was not caught in {} states",
            r.states()
        );
    }
}

/// Surprise shutdown (Open CAS's test, on the recorded workload): at every
/// device write N, the stores hold every write before N and none after;
/// the restarted stack must still read every flushed write.
#[test]
fn surprise_shutdown_at_every_write_loses_nothing_flushed() {
    let every: u64 = std::env::var("TIERLAB_CRASH_SURPRISE_EVERY")
        .ok()
        .map_or(4, |v| v.parse().unwrap());
    let stacks: Vec<(&str, Stack)> = vec![
        ("passthrough", stack(&dev("disk", "disk.img", "4MiB"))),
        ("cache write-back", cache_stack("write-back", "ram")),
        (
            "cache write-back, persistent",
            persistent_cache_stack("cache", "write-back"),
        ),
        (
            "flashcache",
            stack(&format!(
                "{}{}[policy]\nkind = \"flashcache\"\ncapacity_bytes = \"2MiB\"\npersistent = false\n",
                dev("ssd", "ssd.img", "2MiB"),
                dev("disk", "disk.img", "8MiB")
            )),
        ),
        ("atsmf", atsmf_stack(true)),
        ("hswd", hswd_stack("fully")),
        ("raid5 + bitmap", raid5_stack(true)),
    ];
    for (name, s) in stacks {
        // A workload of more than 2,000 host writes.
        let opts = Options {
            surprise_every: every,
            host_ios: 3500,
            ..Default::default()
        };
        let t = std::time::Instant::now();
        let r = check(&s, &opts).unwrap();
        eprintln!(
            "{name}: surprise shutdown at {} of {} device writes ({} host writes) in {:.1} s: {} violations",
            r.states(),
            r.device_writes,
            r.host_writes,
            t.elapsed().as_secs_f64(),
            r.violations.len()
        );
        assert!(
            r.host_writes >= 2000,
            "{name}: a workload of {} host writes",
            r.host_writes
        );
        assert!(
            r.states() as f64 >= r.device_writes as f64 / every as f64,
            "{name}"
        );
        if let Some(v) = r.violations.first() {
            panic!(
                "{name}: {} violations; first at {}: {}",
                r.violations.len(),
                v.crash_point,
                v.message
            );
        }
    }
}

/// Passthrough over a RAID 5 of three member files (16 KiB stripe unit),
/// with or without a write-intent bitmap of 64 KiB regions.
fn raid5_stack(bitmap: bool) -> Stack {
    let member = |i: usize| format!("{{ path = \"m{i}.img\", capacity_bytes = \"2MiB\" }}");
    let bitmap = if bitmap {
        "bitmap = { path = \"raid.bitmap\" }\nbitmap_chunk_bytes = \"64KiB\"\n"
    } else {
        ""
    };
    stack(&format!(
        "[[devices]]\nname = \"array\"\nmodel = \"raid\"\nlevel = \"raid5\"\n\
         stripe_unit_bytes = 16384\n{bitmap}members = [{}, {}, {}]\n",
        member(0),
        member(1),
        member(2)
    ))
}

/// The write hole, measured: without a bitmap every state reads back
/// right through the healthy array, but some do not once a member is lost
/// after the restart (a stripe whose data reached the medium without its
/// parity — an unflushed write, or a flush that had reached only some
/// members — is rebuilt wrong) — and those are the only violations.
#[test]
fn raid5_without_a_bitmap_reads_wrong_data_only_when_a_member_is_lost() {
    let s = raid5_stack(false);
    assert_eq!(s.redundant_arrays, vec![(0, 3)]);
    let r = check(
        &s,
        &Options {
            states: 120,
            ..Default::default()
        },
    )
    .unwrap();
    eprintln!(
        "raid5, no bitmap: {} of {} states read wrong data with a member lost ({} degraded reads)",
        r.violations.len(),
        r.states(),
        r.degraded_reads
    );
    assert!(r.degraded_reads > r.states() / 2, "{r:?}");
    assert!(!r.violations.is_empty(), "the write hole was not found");
    for v in &r.violations {
        assert!(
            v.message.contains("lost after the restart"),
            "a violation with the array healthy: {}",
            v.message
        );
    }
}

#[test]
fn raid5_with_a_bitmap_keeps_every_flushed_write_even_after_a_member_is_lost() {
    let s = raid5_stack(true);
    // 3 members + the bitmap.
    assert_eq!(s.capacities_bytes.len(), 4);
    assert_clean("raid5 + bitmap", &s, 21);
}

#[test]
fn the_checker_catches_a_bitmap_bit_not_flushed_before_the_member_writes() {
    let mut s = raid5_stack(true);
    s.break_bitmap_flush();
    let r = check(
        &s,
        &Options {
            states: 200,
            ..Default::default()
        },
    )
    .unwrap();
    eprintln!(
        "raid5, bitmap not flushed first: {} of {} states violate",
        r.violations.len(),
        r.states()
    );
    assert!(
        !r.violations.is_empty(),
        "not caught in {} states",
        r.states()
    );
}

#[test]
fn raid1_and_raid10_keep_every_flushed_write_even_after_a_member_is_lost() {
    for (level, n) in [("raid1", 2), ("raid10", 4)] {
        let members: Vec<String> = (0..n)
            .map(|i| format!("{{ path = \"m{i}.img\", capacity_bytes = \"4MiB\" }}"))
            .collect();
        let s = stack(&format!(
            "[[devices]]\nname = \"array\"\nmodel = \"raid\"\nlevel = \"{level}\"\n\
             stripe_unit_bytes = 16384\nmembers = [{}]\n",
            members.join(", ")
        ));
        assert_clean(level, &s, 23);
    }
}

/// Surprise shutdown with real device errors: every device write from
/// write N on fails, as a store that died, for N across the workload. The
/// stack is told (`on_device_error`): passthrough and linear fail the host
/// IOs that needed the writes and go on, the caches survive failed fills
/// and stop at a failed write-back or slot write, ATSMF and HSWD stop at
/// the first (fail-stop). Every crash state must still hold every write a
/// completed FLUSH covered — a failed write is never acknowledged, and a
/// FLUSH whose syncs failed covers nothing.
#[test]
fn a_store_that_dies_mid_workload_loses_nothing_flushed() {
    let linear = stack(&format!(
        "{}{}[policy]\nkind = \"linear\"\n",
        dev("a", "a.img", "2MiB"),
        dev("b", "b.img", "2MiB")
    ));
    let stacks: Vec<(&str, Stack, bool)> = vec![
        ("passthrough", stack(&dev("disk", "disk.img", "4MiB")), true),
        ("linear", linear, true),
        (
            "cache write-back",
            cache_stack("write-back", "cache.img"),
            true,
        ),
        (
            "cache write-through",
            cache_stack("write-through", "cache.img"),
            true,
        ),
        (
            "cache write-around",
            cache_stack("write-around", "cache.img"),
            true,
        ),
        // A failed metadata write stops it (fail-stop, as dm-cache's
        // metadata errors do).
        (
            "cache write-back, persistent",
            persistent_cache_stack("cache", "write-back"),
            false,
        ),
        ("atsmf", atsmf_stack(true), false),
        ("hswd", hswd_stack("fully"), false),
        ("raid5 + bitmap", raid5_stack(true), true),
    ];
    for (name, s, survives) in stacks {
        let (mut failed, mut stopped) = (0, 0);
        for n in [0, 40, 400, 1500] {
            let opts = Options {
                fail_writes_from: Some(n),
                states: 24,
                host_ios: 1200,
                ..Default::default()
            };
            let r = check(&s, &opts).unwrap_or_else(|e| panic!("{name} failing from {n}: {e}"));
            if let Some(v) = r.violations.first() {
                panic!(
                    "{name}, writes failing from {n}: {} of {} states lose flushed data; first: crash point {} ({}), {}",
                    r.violations.len(),
                    r.states(),
                    v.crash_point,
                    v.kind.as_str(),
                    v.message
                );
            }
            failed += r.host_ios_failed;
            stopped += r.stopped_at_error as u64;
        }
        eprintln!("{name}: {failed} host IOs failed, stopped at the error in {stopped} of 4 runs");
        if survives {
            assert!(
                failed > 0 && stopped == 0,
                "{name}: {failed} failed, {stopped} stopped"
            );
        } else {
            assert!(stopped > 0, "{name} never stopped at an error");
        }
    }
}

/// A transient device error: one device write fails, everything else
/// (flushes included) works, for several positions in the workload. A
/// stack must not acknowledge the failed write — the next FLUSH would then
/// promise it — and every flushed write must survive.
#[test]
fn one_failed_device_write_is_never_acknowledged() {
    let stacks: Vec<(&str, Stack, bool)> = vec![
        ("passthrough", stack(&dev("disk", "disk.img", "4MiB")), true),
        (
            "cache write-around",
            cache_stack("write-around", "cache.img"),
            true,
        ),
        (
            "cache write-back",
            cache_stack("write-back", "cache.img"),
            true,
        ),
        (
            "cache write-through",
            cache_stack("write-through", "cache.img"),
            true,
        ),
        (
            "flashcache",
            stack(&format!(
                "{}{}[policy]\nkind = \"flashcache\"\ncapacity_bytes = \"1MiB\"\nassociativity = 64\n",
                dev("ssd", "ssd.img", "1MiB"),
                dev("disk", "disk.img", "4MiB")
            )),
            true,
        ),
        ("raid5 + bitmap", raid5_stack(true), true),
        // Survive a failed host data path IO, stop at a failed commit, RMW
        // or move IO (fail-stop).
        ("hswd", hswd_stack("fully"), false),
        ("atsmf", atsmf_stack(true), false),
    ];
    for (name, s, survives) in stacks {
        let (mut failed, mut stopped) = (0, 0);
        for n in [0, 5, 100, 600] {
            let opts = Options {
                fail_write_at: Some(n),
                states: 40,
                host_ios: 1200,
                ..Default::default()
            };
            let r = check(&s, &opts).unwrap_or_else(|e| panic!("{name}, write {n} failing: {e}"));
            assert!(
                r.violations.is_empty(),
                "{name}, write {n} failing: {}",
                r.violations[0].message
            );
            failed += r.host_ios_failed;
            stopped += r.stopped_at_error as u64;
            if survives {
                assert!(!r.stopped_at_error, "{name} stopped at write {n}");
            }
        }
        eprintln!(
            "{name}: {failed} host IOs failed over 4 runs with one failed device write each, {stopped} stopped"
        );
        assert!(failed > 0, "{name}: no host IO failed");
    }
}

/// A passthrough that answers a failed write as done: the checker must
/// catch it (the next FLUSH covers a write that never landed).
struct AcksFailedWrites(tierlab_core::policy::Passthrough);

impl Policy for AcksFailedWrites {
    fn name(&self) -> &str {
        "acks-failed-writes"
    }
    fn tier_names(&self) -> Vec<String> {
        self.0.tier_names()
    }
    fn moves_data(&self) -> bool {
        true
    }
    fn on_host_io(&mut self, now: TimeNs, io: HostIo, out: &mut Outbox) {
        self.0.on_host_io(now, io, out)
    }
    fn on_device_completion(&mut self, now: TimeNs, device: usize, tag: u64, out: &mut Outbox) {
        self.0.on_device_completion(now, device, tag, out)
    }
    fn on_device_error(
        &mut self,
        _now: TimeNs,
        _device: usize,
        tag: u64,
        _error: tierlab_core::policy::IoError,
        out: &mut Outbox,
    ) -> bool {
        out.complete.push((tag, 0)); // the lie
        true
    }
}

#[test]
fn the_checker_catches_a_failed_write_acknowledged() {
    let s = one_disk_stack(|| Box::new(AcksFailedWrites(tierlab_core::policy::Passthrough)));
    let mut caught = 0;
    for n in [5, 100, 600] {
        let r = check(
            &s,
            &Options {
                fail_write_at: Some(n),
                states: 200,
                ..Default::default()
            },
        )
        .unwrap();
        caught += r.violations.len();
    }
    eprintln!("acks-failed-writes: {caught} violating states");
    assert!(caught > 0, "an acknowledged failed write was not caught");
}
