//! `tierlab serve` killed for real: nothing flushed is lost, and HSWD's
//! persistent cache comes back warm.
//!
//! - **SIGKILL loop** (per stack, 20 kills by default,
//!   `TIERLAB_SERVE_KILLS=N` for more): a client writes stamped 4 KiB
//!   blocks (every 512-byte sector says which block and which write put it
//!   there: tierlab-crash's stamps) and FLUSHes every few writes, while the
//!   server is SIGKILLed at a random moment; the server is restarted on the
//!   same files and every block written so far is read back. Each sector
//!   must hold a write to that block no older than the last one
//!   acknowledged before the last completed FLUSH — never an older one,
//!   never zeros after a flushed write, never another block's bytes.
//! - **Warm restart** (HSWD, and the page cache and flashcache with
//!   `persistent = true`): the blocks cached before a clean stop or a
//!   SIGKILL (after a FLUSH) are cached after the restart — the same reads
//!   hit — with the same data.

mod common_serve;

#[path = "../../tierlab-serve/tests/common/mod.rs"]
#[allow(unused_imports)]
mod nbd_client;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common_serve::*;
use nbd_client::{Client, Rng};
use tierlab_crash::stamp::{self, SECTOR_BYTES, Sector};

const BLOCK: u64 = 4096;

/// What the client knows: per block, every write issued to it, the newest
/// acknowledged by the server running now, and the newest a completed FLUSH
/// covers.
#[derive(Default)]
struct Model {
    issued: HashMap<u64, Vec<u64>>,
    acked: HashMap<u64, u64>,
    flushed: HashMap<u64, u64>,
    next_seq: u64,
    writes_acked: u64,
    flushes_done: u64,
    /// Requests answered with an error (a failing store).
    errors: u64,
}

/// Writes random stamped blocks of [0, blocks), a FLUSH every
/// `flush_every`, until a request fails (the thread returns) or the server
/// goes away (the client then panics on the dead socket: the thread ends).
fn writer(
    sock: std::path::PathBuf,
    model: Arc<Mutex<Model>>,
    blocks: u64,
    flush_every: u64,
    seed: u64,
) {
    let mut c = Client::connect(&sock);
    let mut rng = Rng::new(seed);
    loop {
        let b = rng.below(blocks);
        let seq = {
            let mut m = model.lock().unwrap();
            m.next_seq += 1;
            let s = m.next_seq;
            m.issued.entry(b).or_default().push(s);
            s
        };
        let mut data = vec![0u8; BLOCK as usize];
        stamp::fill(&mut data, b * BLOCK / SECTOR_BYTES as u64, seq);
        if c.write(b * BLOCK, &data) != 0 {
            // Not acknowledged: the block may hold it or not.
            model.lock().unwrap().errors += 1;
            return;
        }
        {
            let mut m = model.lock().unwrap();
            m.acked.insert(b, seq);
            m.writes_acked += 1;
        }
        if rng.below(flush_every) == 0 {
            // Covers every write acknowledged before it is sent.
            let covered = model.lock().unwrap().acked.clone();
            if c.flush() != 0 {
                // Covers nothing.
                model.lock().unwrap().errors += 1;
                return;
            }
            let mut m = model.lock().unwrap();
            m.flushes_done += 1;
            for (b, s) in covered {
                let f = m.flushed.entry(b).or_insert(0);
                *f = (*f).max(s);
            }
        }
    }
}

/// Reads back every block written so far; the first broken promise.
fn verify(sock: &std::path::Path, model: &Model) -> Result<u64, String> {
    let mut c = Client::connect(sock);
    let mut blocks: Vec<u64> = model.issued.keys().copied().collect();
    blocks.sort_unstable();
    for &b in &blocks {
        let data = c
            .read(b * BLOCK, BLOCK as u32)
            .map_err(|e| format!("block {b}: read failed with NBD error {e}"))?;
        let need = model.flushed.get(&b).copied().unwrap_or(0);
        let issued = &model.issued[&b];
        for (i, sector) in data.chunks_exact(SECTOR_BYTES).enumerate() {
            let lba = b * BLOCK / SECTOR_BYTES as u64 + i as u64;
            let ok = match stamp::decode(sector, lba) {
                Sector::Zeros => need == 0,
                Sector::Written { seq } => seq >= need && issued.contains(&seq),
                Sector::Foreign { .. } => false,
            };
            if !ok {
                return Err(format!(
                    "block {b} sector {i}: {:?}; the newest flushed write was #{need}, writes issued {issued:?}",
                    stamp::decode(sector, lba)
                ));
            }
        }
    }
    c.disconnect();
    Ok(blocks.len() as u64)
}

/// `busy_counter`: a policy counter (or `DEVICE/NAME`, a backing store's)
/// that shows the interesting machinery ran before some kill (RMWs,
/// promotions, write-backs, resynchronisations): summed over the rounds
/// (as last reported before each kill), it must be positive. Returns the
/// lab, what the client knows, and the server running on the final state
/// (None when the test is skipped).
fn kill_loop(
    stack: &'static Stack,
    set: &[&str],
    blocks: u64,
    busy_counter: Option<&str>,
) -> Option<(Lab, Arc<Mutex<Model>>, Server)> {
    if !require("serve_crash", &[]) {
        return None;
    }
    let kills: u64 = std::env::var("TIERLAB_SERVE_KILLS")
        .ok()
        .map_or(20, |v| v.parse().expect("TIERLAB_SERVE_KILLS is a number"));
    let mut lab = Lab::new(stack);
    let model = Arc::new(Mutex::new(Model::default()));
    let mut rng = Rng::new(0x5eed ^ stack.name.len() as u64);
    let mut verified = 0;
    let mut busy = 0.0;
    // At least `kills` rounds, and more (up to 3×) until the machinery the
    // test is about has run: a loaded machine acknowledges fewer writes
    // per round.
    let mut round = 0;
    while round < kills || (busy_counter.is_some() && busy == 0.0 && round < 3 * kills) {
        round += 1;
        let mut srv = lab.start_with(Opts {
            set,
            stats_interval_s: Some(0.05),
            ..Opts::default()
        });
        let sock = lab.socket();
        if let Err(e) = verify(&sock, &model.lock().unwrap()) {
            panic!(
                "[{} kill {round}] after the restart: {e}\n{}",
                stack.name,
                srv.output()
            );
        }
        // A write acknowledged before the kill and not flushed may be lost:
        // a FLUSH sent to this server covers only what it acknowledged.
        model.lock().unwrap().acked.clear();
        verified += model.lock().unwrap().issued.len() as u64;
        let m = Arc::clone(&model);
        let seed = rng.next_u64();
        let w = std::thread::spawn(move || writer(sock, m, blocks, 8, seed));
        std::thread::sleep(Duration::from_millis(60 + rng.below(240)));
        if let Some(c) = busy_counter {
            busy += match c.split_once('/') {
                Some((device, name)) => srv.device_counter(device, name),
                None => srv.counter(c),
            }
            .unwrap_or(0.0);
        }
        srv.kill();
        // The writer ends on the dead socket (its panic is the expected end).
        assert!(w.join().is_err(), "the writer outlived the server");
    }
    let srv = lab.start_with(Opts {
        set,
        ..Opts::default()
    });
    let m = model.lock().unwrap();
    let n =
        verify(&lab.socket(), &m).unwrap_or_else(|e| panic!("[{}] final check: {e}", stack.name));
    let verified_at_end = m.issued.len();
    eprintln!(
        "[{}] {round} SIGKILLs: {} writes acknowledged, {} FLUSHes, {} block reads verified, {n} blocks at the end; {busy_counter:?} before the kills: {busy}",
        stack.name, m.writes_acked, m.flushes_done, verified
    );
    assert!(
        m.flushes_done >= kills && m.writes_acked >= 10 * kills,
        "the workload ran"
    );
    if let Some(c) = busy_counter {
        assert!(
            busy > 0.0,
            "[{}] {c} stayed 0 in every round: the test proves little",
            stack.name
        );
    }
    drop(m);
    assert!(verified_at_end > 0);
    Some((lab, model, srv))
}

/// RAID 5 with a write-intent bitmap, SIGKILLed mid-write: nothing flushed
/// is lost, each restart resynchronises the regions written at the kill,
/// and after a clean stop a member lost for good is rebuilt right from
/// parity (without the bitmap a kill between a stripe's data and parity
/// writes would leave that parity stale: docs/crash-consistency.md).
#[test]
fn sigkill_loop_raid5_with_a_bitmap_then_a_member_lost() {
    let set = ["devices.0.bitmap_chunk_bytes=256KiB"];
    let Some((mut lab, model, mut srv)) =
        kill_loop(&RAID5_BITMAP, &set, 2048, Some("array/resync_regions"))
    else {
        return;
    };
    srv.stop();
    for lost in 0..4 {
        let failed = format!("devices.0.failed_members=[{lost}]");
        let _srv = lab.start_with(Opts {
            set: &[set[0], &failed],
            ..Opts::default()
        });
        let n = verify(&lab.socket(), &model.lock().unwrap())
            .unwrap_or_else(|e| panic!("[raid5-bitmap] with member {lost} lost: {e}"));
        eprintln!("[raid5-bitmap] member {lost} lost: {n} blocks rebuilt right");
    }
}

#[test]
fn sigkill_loop_file() {
    kill_loop(&FILE, &[], 2048, None);
}

#[test]
fn sigkill_loop_write_back_cache() {
    // A small cache, so writes also evict and write back under the kills.
    kill_loop(
        &CACHE,
        &["policy.capacity_bytes=2MiB"],
        2048,
        Some("flush_ios"),
    );
}

#[test]
fn sigkill_loop_persistent_cache() {
    // Restarts come up warm: the recovered slots are copied back, and the
    // cache keeps evicting and committing under the kills.
    kill_loop(
        &CACHE,
        &["policy.capacity_bytes=2MiB", "policy.persistent=true"],
        2048,
        Some("recovered_pages"),
    );
}

#[test]
fn sigkill_loop_flashcache() {
    kill_loop(
        &FLASHCACHE,
        // 3 sets of 256 blocks and their persistent metadata (the default).
        &["policy.capacity_bytes=3200KiB", "policy.associativity=256"],
        2048,
        Some("flush_ios"),
    );
}

#[test]
fn sigkill_loop_atsmf() {
    // Short periods, so sub-LUNs are promoted (and the memory tier holds
    // acknowledged writes) within a round.
    kill_loop(
        &ATSMF,
        &[
            "policy.period_s=0.05",
            "policy.collect_s=0.05",
            "policy.min_samples=5",
            "policy.sub_lun_size_bytes=1MiB",
        ],
        2048,
        Some("flush_back_bytes"),
    );
}

#[test]
fn sigkill_loop_atsmf_with_its_tiering_table() {
    // Every restart re-promotes, from flash, the sub-LUNs in memory when
    // the table was last written.
    kill_loop(
        &ATSMF,
        &[
            "policy.persistent=true",
            "policy.period_s=0.05",
            "policy.collect_s=0.05",
            "policy.min_samples=5",
            "policy.sub_lun_size_bytes=1MiB",
        ],
        2048,
        Some("warm_promoted_sub_luns"),
    );
}

#[test]
fn sigkill_loop_hswd() {
    // A 1.25 MiB PCache (1 MiB of data, 256 KiB bands) under an 8 MiB
    // working set: the cache fills within a round or two (it restarts
    // warm), and RMWs run, and are killed, from then on.
    kill_loop(
        &HSWD,
        &["policy.pcache_bytes=1280KiB", "policy.band_bytes=256KiB"],
        2048,
        Some("rmw_count"),
    );
}

/// HSWD's cache after a restart: the blocks cached before a clean stop
/// (warm: only flushed) or a SIGKILL (after a FLUSH) are cached again —
/// reading them back hits every one — and hold the same data.
#[test]
fn hswd_restarts_warm_after_a_clean_stop_and_after_a_sigkill() {
    restarts_warm(&HSWD, &[], "recovered_blocks", true);
}

/// The same for the page cache and flashcache with `persistent = true`
/// (their clean stop writes every dirty page back, then marks the
/// metadata clean). After a crash they recover the pages that were dirty
/// (clean copies are dropped: their entries are committed lazily), so the
/// blocks are written again and FLUSHed before the SIGKILL.
#[test]
fn persistent_caches_restart_warm_after_a_clean_stop_and_after_a_sigkill() {
    // Nothing is written back before the SIGKILL (no idle flush, no set
    // cleaning), so every block is dirty then and must be recovered.
    restarts_warm(
        &CACHE,
        &[
            "policy.persistent=true",
            "policy.capacity_bytes=4MiB",
            "policy.idle_flush_ms=0",
        ],
        "recovered_pages",
        false,
    );
    restarts_warm(
        &FLASHCACHE,
        &[
            "policy.persistent=true",
            "policy.capacity_bytes=4MiB",
            "policy.dirty_thresh_pct=100",
        ],
        "recovered_pages",
        false,
    );
}

fn restarts_warm(stack: &'static Stack, set: &[&str], recovered: &str, warm_stop: bool) {
    if !require("restarts_warm", &[]) {
        return;
    }
    let mut lab = Lab::new(stack);
    let opts = || Opts {
        set,
        ..Opts::default()
    };
    let blocks: Vec<u64> = (0..300).map(|i| i * 7 + 3).collect(); // < the PCache's 80 %
    // Version `v` of block `b`.
    let data = |b: u64, v: u64| {
        let mut d = vec![0u8; BLOCK as usize];
        stamp::fill(&mut d, b * BLOCK / SECTOR_BYTES as u64, v * 100_000 + b + 1);
        d
    };
    let write_all = |c: &mut Client, v: u64| {
        for &b in &blocks {
            assert_eq!(c.write(b * BLOCK, &data(b, v)), 0);
        }
        assert_eq!(c.flush(), 0);
    };
    let mut srv = lab.start_with(opts());
    let mut c = Client::connect(&lab.socket());
    write_all(&mut c, 1);
    let read_all = |c: &mut Client, v: u64| {
        for &b in &blocks {
            assert_eq!(
                c.read(b * BLOCK, BLOCK as u32).unwrap(),
                data(b, v),
                "block {b}"
            );
        }
    };
    read_all(&mut c, 1);
    c.disconnect();
    let name = stack.name;
    let before = counter_when(&srv, "read_hits", blocks.len() as f64);
    assert_eq!(
        before,
        blocks.len() as f64,
        "{name}: every block was a hit before the stop"
    );
    let line = srv.stop();
    eprintln!("{line}");
    let s = srv.summary().unwrap();
    assert_eq!(
        s.pointer("/serve/warm_stop").and_then(|v| v.as_bool()),
        Some(warm_stop),
        "{s:#}"
    );

    for (how, v) in [("clean stop", 1), ("SIGKILL", 2)] {
        let mut srv = lab.start_with(opts());
        let mut c = Client::connect(&lab.socket());
        read_all(&mut c, v);
        let got = counter_when(&srv, recovered, blocks.len() as f64);
        assert_eq!(
            got,
            blocks.len() as f64,
            "{name} after a {how}: blocks recovered"
        );
        let hits = counter_when(&srv, "read_hits", blocks.len() as f64);
        assert_eq!(
            hits,
            blocks.len() as f64,
            "{name} after a {how}: the same reads hit"
        );
        assert_eq!(
            srv.counter("read_misses"),
            Some(0.0),
            "{name} after a {how}"
        );
        eprintln!(
            "{name} after a {how}: {got} blocks recovered, {hits} of {} reads hit",
            blocks.len()
        );
        if how == "clean stop" {
            // Dirty again, and FLUSHed: what a crash must not lose.
            write_all(&mut c, 2);
            c.disconnect();
            srv.kill();
        } else {
            c.disconnect();
            srv.stop();
        }
    }
}

/// ATSMF with `persistent = true`: a sub-LUN promoted by a hot read loop is
/// memory-resident again after a clean stop (which demotes everything) and
/// after a SIGKILL: the same reads are all served from memory, with the
/// same data.
#[test]
fn atsmf_restarts_warm_after_a_clean_stop_and_after_a_sigkill() {
    if !require("atsmf_restarts_warm", &[]) {
        return;
    }
    let set = [
        "policy.persistent=true",
        "policy.period_s=0.5",
        "policy.collect_s=0.5",
        "policy.min_samples=5",
        "policy.sub_lun_size_bytes=1MiB",
        "policy.move_chunk_bytes=256KiB",
        "policy.buffer_bytes=1MiB",
        // The test is about the restart: nothing is demoted while the
        // client pauses between its passes.
        "policy.demote_after_periods=1000000",
    ];
    let opts = || Opts {
        set: &set,
        stats_interval_s: Some(0.05),
        ..Opts::default()
    };
    let mut lab = Lab::new(&ATSMF);
    // 256 blocks of sub-LUN 3.
    let blocks: Vec<u64> = (0..256).map(|i| 3 * 256 + i).collect();
    let data = |b: u64| {
        let mut d = vec![0u8; BLOCK as usize];
        stamp::fill(&mut d, b * BLOCK / SECTOR_BYTES as u64, b + 1);
        d
    };
    let read_all = |c: &mut Client| {
        for &b in &blocks {
            assert_eq!(
                c.read(b * BLOCK, BLOCK as u32).unwrap(),
                data(b),
                "block {b}"
            );
        }
    };
    // Host IOs served from memory by a pass over the blocks. The summary
    // is rewritten every 50 ms: wait until it counts every host IO this
    // server answered (`answered`, FLUSHes included), before and after.
    let counted = |srv: &Server, answered: u64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let m = srv.counter("memory_ios").unwrap_or(0.0);
            let f = srv.counter("flash_ios").unwrap_or(0.0);
            if m + f >= answered as f64 {
                return m;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the summary never counted {answered} host IOs ({m} + {f})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let memory_ios_of_a_pass = |srv: &Server, c: &mut Client, answered: &mut u64| {
        let before = counted(srv, *answered);
        read_all(c);
        *answered += blocks.len() as u64;
        counted(srv, *answered) - before
    };
    let mut srv = lab.start_with(opts());
    let mut c = Client::connect(&lab.socket());
    for &b in &blocks {
        assert_eq!(c.write(b * BLOCK, &data(b)), 0);
    }
    assert_eq!(c.flush(), 0);
    let mut answered = blocks.len() as u64 + 1;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while srv.counter("promotions").unwrap_or(0.0) < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no promotion after 30 s of hot reads"
        );
        read_all(&mut c);
        answered += blocks.len() as u64;
    }
    let before = memory_ios_of_a_pass(&srv, &mut c, &mut answered);
    assert_eq!(
        before,
        blocks.len() as f64,
        "every read from memory before the stop"
    );
    c.disconnect();
    eprintln!("{}", srv.stop());
    for how in ["clean stop", "SIGKILL"] {
        let mut srv = lab.start_with(opts());
        let warm = counter_when(&srv, "warm_promoted_sub_luns", 1.0);
        assert_eq!(
            warm, 1.0,
            "after a {how}: sub-LUN 3 promoted at the restart"
        );
        let mut c = Client::connect(&lab.socket());
        let after = memory_ios_of_a_pass(&srv, &mut c, &mut 0);
        eprintln!(
            "atsmf after a {how}: {warm} sub-LUN warm, {after} of {} reads from memory",
            blocks.len()
        );
        assert_eq!(after, before, "after a {how}: the same reads from memory");
        c.disconnect();
        if how == "clean stop" {
            srv.kill();
        } else {
            srv.stop();
        }
    }
}

/// The counter once it reached `want` (or its last value after 10 s).
fn counter_when(srv: &Server, name: &str, want: f64) -> f64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let v = srv.counter(name);
        if v == Some(want) || std::time::Instant::now() > deadline {
            return v.unwrap_or(f64::NAN);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The negative control, on demand (`TIERLAB_SERVE_RAID_HOLE=1`, with
/// `TIERLAB_SERVE_KILLS=60`): the same loop on RAID 5 without a bitmap,
/// then each member lost in turn. It shows the write hole on real
/// processes and files (docs/crash-consistency.md has the numbers) but is
/// not in the default suite: whether a kill lands between a stripe's data
/// and parity writes is a matter of timing.
#[test]
fn raid5_without_a_bitmap_rebuilds_flushed_blocks_wrong_after_kills() {
    if std::env::var_os("TIERLAB_SERVE_RAID_HOLE").is_none() {
        eprintln!("skipped: set TIERLAB_SERVE_RAID_HOLE=1 to run the write-hole demonstration");
        return;
    }
    let Some((mut lab, model, mut srv)) = kill_loop(&RAID5, &[], 2048, None) else {
        return;
    };
    srv.stop();
    let mut wrong = 0;
    for lost in 0..4 {
        let failed = format!("devices.0.failed_members=[{lost}]");
        let _srv = lab.start_with(Opts {
            set: &[&failed],
            ..Opts::default()
        });
        match verify(&lab.socket(), &model.lock().unwrap()) {
            Ok(n) => eprintln!("[raid5] member {lost} lost: {n} blocks rebuilt right"),
            Err(e) => {
                wrong += 1;
                eprintln!("[raid5] member {lost} lost: {e}");
            }
        }
    }
    assert!(wrong > 0, "no lost member rebuilt a flushed block wrong");
}

/// Open CAS's surprise-shutdown test on real files and a real server: one
/// backing store fails every write from write N on (`fail_after_writes`),
/// for N over a sweep. A client writes stamped blocks and FLUSHes until a
/// request fails or the server stops; the server is then restarted on the
/// same files, without the fault, and every flushed write must be there.
/// A policy that survives device errors (passthrough) answers EIO and
/// goes on serving reads; the others stop at the first failed device IO
/// (fail-stop), which must lose nothing flushed either.
/// `TIERLAB_SERVE_SURPRISE_MAX=N` sweeps every N up to that.
fn surprise_shutdown(
    stack: &'static Stack,
    set: &[&str],
    device: usize,
    survives: bool,
) -> (u64, u64) {
    if !require("serve_crash", &[]) {
        return (0, 0);
    }
    let ns: Vec<u64> = match std::env::var("TIERLAB_SERVE_SURPRISE_MAX") {
        Ok(v) => (0..=v.parse().expect("TIERLAB_SERVE_SURPRISE_MAX is a number")).collect(),
        Err(_) => vec![0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144],
    };
    let mut lab = Lab::new(stack);
    let model = Arc::new(Mutex::new(Model::default()));
    let (mut survived, mut stopped) = (0, 0);
    for (round, &n) in ns.iter().enumerate() {
        let fault = format!("devices.{device}.fail_after_writes={n}");
        let mut with_fault: Vec<&str> = set.to_vec();
        with_fault.push(&fault);
        let label = format!("[{} device {device} failing after {n} writes]", stack.name);
        let mut srv = match lab.try_start_with(Opts {
            set: &with_fault,
            stats_interval_s: Some(0.05),
            ..Opts::default()
        }) {
            Ok(srv) => srv,
            Err(e) => {
                // Its open (recovery, format) wrote and failed: refused
                // with the failed IO named; the restart must still work.
                assert!(e.contains("Input/output error"), "{label}: {e}");
                stopped += 1;
                let _srv = lab.start_with(Opts {
                    set,
                    ..Opts::default()
                });
                verify(&lab.socket(), &model.lock().unwrap())
                    .unwrap_or_else(|e| panic!("{label}, after the restart: {e}"));
                continue;
            }
        };
        let sock = lab.socket();
        model.lock().unwrap().acked.clear();
        let errors_before = model.lock().unwrap().errors;
        let m = Arc::clone(&model);
        let w = std::thread::spawn(move || writer(sock, m, 2048, 8, 1000 + round as u64));
        // The writer ends at the first failed request or a dead server.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !w.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(w.is_finished(), "{label}: the client never saw an error");
        let answered_error = w.join().is_ok();
        if survives {
            // The failed request was answered with an error, the server
            // runs on, and every flushed block still reads right through it.
            assert!(
                answered_error && model.lock().unwrap().errors > errors_before,
                "{label}: the client stopped without an error\n{}",
                srv.output()
            );
            verify(&lab.socket(), &model.lock().unwrap())
                .unwrap_or_else(|e| panic!("{label}, before the restart: {e}"));
            assert!(srv.exited().is_none(), "{label}: the server stopped");
            survived += 1;
        } else {
            // Fail-stop: the first failed device IO the policy needed stops
            // the server, non-zero, naming it (a failed sync of the stores
            // alone fails only its FLUSH: the server may still be up).
            // (A dead connection means it is exiting: give it time.)
            let wait = if answered_error { 200 } else { 5000 };
            let deadline = std::time::Instant::now() + Duration::from_millis(wait);
            while srv.exited().is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            match srv.exited() {
                Some(status) => {
                    assert!(!status.success(), "{label} exited 0\n{}", srv.output());
                    assert!(
                        srv.output().contains("Input/output error"),
                        "{label} stopped without naming the failed IO\n{}",
                        srv.output()
                    );
                    stopped += 1;
                }
                None => assert!(
                    answered_error,
                    "{label}: the connection died, the server runs on"
                ),
            }
        }
        srv.kill();
        // Restarted without the fault: nothing flushed is missing.
        let _srv = lab.start_with(Opts {
            set,
            ..Opts::default()
        });
        verify(&lab.socket(), &model.lock().unwrap())
            .unwrap_or_else(|e| panic!("{label}, after the restart: {e}"));
    }
    let m = model.lock().unwrap();
    eprintln!(
        "[{} device {device}] surprise shutdown at {} points: {survived} served on (EIO), {stopped} stopped; {} writes acknowledged, {} FLUSHes, 0 flushed writes lost",
        stack.name,
        ns.len(),
        m.writes_acked,
        m.flushes_done
    );
    (survived, stopped)
}

#[test]
fn surprise_shutdown_file_answers_eio_and_loses_nothing_flushed() {
    surprise_shutdown(&FILE, &[], 0, true);
}

#[test]
fn surprise_shutdown_caches_lose_nothing_flushed() {
    for device in [0, 1] {
        // Both survive a failing cache file and a failing backing file:
        // the failed writes and FLUSHes are answered with EIO, and they
        // serve on. (Their FLUSH writes dirty pages back: with persistent
        // metadata, the default, a failed metadata commit stops the
        // server, as dm-cache's metadata errors do — tierlab-crash's
        // `a_store_that_dies_mid_workload_loses_nothing_flushed`.)
        let cold = ["policy.capacity_bytes=2MiB", "policy.persistent=false"];
        surprise_shutdown(&CACHE, &cold, device, true);
        surprise_shutdown(&FLASHCACHE, &cold, device, true);
    }
}

#[test]
fn surprise_shutdown_atsmf_and_hswd_lose_nothing_flushed() {
    surprise_shutdown(
        &ATSMF,
        &[
            "policy.period_s=0.05",
            "policy.collect_s=0.05",
            "policy.min_samples=5",
        ],
        1,
        false,
    );
    for device in [0, 1] {
        surprise_shutdown(
            &HSWD,
            &["policy.pcache_bytes=1280KiB", "policy.band_bytes=256KiB"],
            device,
            false,
        );
    }
}
