//! Issue 35, with the real binary over real files: persistent metadata
//! belongs to the devices it was made over, and two devices of a stack are
//! never one file.
//!
//! - **Reattached stores are refused** (docs/crash-consistency.md,
//!   "Binding"): HSWD's PCache over another NRegion, ATSMF's tiering table
//!   over another memory file, a RAID bitmap over other members — after a
//!   clean stop and after a SIGKILL. The server exits before listening,
//!   naming both devices, and the other volume's files are byte for byte
//!   what they were (a digest before and after); so are the refused
//!   store's. The stores it was made for still open, with their data.
//! - **One file, two devices** (docs/real.md): the same path, `./`, a
//!   symlink, a hard link — refused naming both `[[devices]]` entries,
//!   before any file is created.

mod common_serve;

#[path = "../../tierlab-serve/tests/common/mod.rs"]
#[allow(unused_imports)]
mod nbd_client;

use std::hash::Hasher;
use std::path::Path;
use std::time::Duration;

use common_serve::*;
use nbd_client::Client;
use tierlab_crash::stamp::{self, SECTOR_BYTES};

const BLOCK: u64 = 4096;

/// A digest of a file's bytes (SipHash, streamed).
fn digest(path: &Path) -> u64 {
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.write(&buf[..n]);
    }
    h.finish()
}

fn digests(paths: &[&Path]) -> Vec<u64> {
    paths.iter().map(|p| digest(p)).collect()
}

fn data(block: u64, seq: u64) -> Vec<u8> {
    let mut d = vec![0u8; BLOCK as usize];
    stamp::fill(&mut d, block * BLOCK / SECTOR_BYTES as u64, seq);
    d
}

fn write_blocks(lab: &Lab, blocks: &[u64], seq: u64) {
    let mut c = Client::connect(&lab.socket());
    for &b in blocks {
        assert_eq!(c.write(b * BLOCK, &data(b, seq)), 0, "block {b}");
    }
    assert_eq!(c.flush(), 0);
    c.disconnect();
}

fn read_back(lab: &Lab, blocks: &[u64], seq: u64) {
    let mut c = Client::connect(&lab.socket());
    for &b in blocks {
        assert_eq!(
            c.read(b * BLOCK, BLOCK as u32).unwrap(),
            data(b, seq),
            "block {b}"
        );
    }
    c.disconnect();
}

/// Starts `lab` with `set` and expects a refusal whose output holds every
/// one of `want`.
fn refused(lab: &mut Lab, set: &[&str], want: &[&str]) -> String {
    let e = match lab.try_start_with(Opts {
        set,
        ..Opts::default()
    }) {
        Ok(mut srv) => {
            srv.kill();
            panic!("started over {set:?}, expected a refusal");
        }
        Err(e) => e,
    };
    for w in want {
        assert!(e.contains(w), "{w:?} not in:\n{e}");
    }
    e
}

fn all_zero(path: &Path) -> bool {
    std::fs::read(path).unwrap().iter().all(|&b| b == 0)
}

/// HSWD: A's PCache holds dirty blocks (a warm stop flushes, it does not
/// clean). Over B's NRegion (another HSWD volume) or a new NRegion file of
/// the same size it is refused; B's NRegion and A's PCache do not change.
#[test]
fn an_hswd_pcache_over_another_nregion_is_refused_after_a_stop_and_a_sigkill() {
    let mut b = Lab::new(&HSWD);
    let mut srv = b.start();
    write_blocks(&b, &[1, 2, 3], 7);
    srv.stop();
    let b_nregion = b.path("serve-hswd-nregion.img");
    let other = format!("devices.1.path={}", b_nregion.display());
    let mut a = Lab::new(&HSWD);
    let a_pcache = a.path("serve-hswd-pcache.img");
    let blocks: Vec<u64> = (0..200).map(|i| i * 5 + 1).collect();
    for how in ["clean stop", "SIGKILL"] {
        let mut srv = a.start();
        write_blocks(&a, &blocks, if how == "SIGKILL" { 2 } else { 1 });
        if how == "SIGKILL" {
            srv.kill();
        } else {
            srv.stop();
        }
        let seq = if how == "SIGKILL" { 2 } else { 1 };
        let before = digests(&[&b_nregion, &a_pcache]);
        let e = refused(
            &mut a,
            &[other.as_str()],
            &[
                "HSWD's metadata on the PCache device pcache (file",
                "belongs to another NRegion device: it records volume id",
                "use the NRegion device this PCache was made for",
            ],
        );
        assert!(e.contains(&b_nregion.display().to_string()), "{e}");
        assert_eq!(digests(&[&b_nregion, &a_pcache]), before, "after a {how}");
        // A new NRegion file of the same size: refused too, left empty.
        let fresh = format!("devices.1.path=fresh-{}.img", how.replace(' ', "-"));
        refused(
            &mut a,
            &[fresh.as_str()],
            &["had no tierlab volume id until now"],
        );
        let fresh_file = a.path(&fresh["devices.1.path=".len()..]);
        assert!(
            all_zero(&fresh_file),
            "after a {how}: the new NRegion stays empty"
        );
        assert_eq!(digest(&a_pcache), before[1]);
        // Its own NRegion: warm, with A's data.
        let mut srv = a.start();
        read_back(&a, &blocks, seq);
        srv.stop();
        eprintln!("hswd after a {how}: refused over B's NRegion and a new one; own NRegion warm");
    }
    // B is still B.
    let mut srv = b.start();
    read_back(&b, &[1, 2, 3], 7);
    srv.stop();
}

/// ATSMF with `persistent = true` and its memory tier on a file: the table
/// (written by a promotion, and by the clean stop) records the memory
/// file's id. Over B's memory file (another ATSMF's) it is refused and B's
/// file is untouched; a new memory file is adopted (memory is scratch) and
/// the sub-LUN comes back warm.
#[test]
fn an_atsmf_table_over_another_memory_file_is_refused_after_a_stop_and_a_sigkill() {
    let set = [
        "devices.0.path=memory.img",
        "devices.0.create=true",
        "policy.persistent=true",
        "policy.period_s=0.5",
        "policy.collect_s=0.5",
        "policy.min_samples=5",
        "policy.sub_lun_size_bytes=1MiB",
        "policy.move_chunk_bytes=256KiB",
        "policy.buffer_bytes=1MiB",
        "policy.demote_after_periods=1000000",
    ];
    let opts = |extra: &'static [&'static str]| -> Vec<&'static str> {
        set.iter().chain(extra).copied().collect()
    };
    let mut b = Lab::new(&ATSMF);
    let o = opts(&[]);
    let mut srv = b.start_with(Opts {
        set: &o,
        ..Opts::default()
    });
    write_blocks(&b, &[9], 3);
    srv.stop();
    let b_memory = b.path("memory.img");
    let mut a = Lab::new(&ATSMF);
    let a_flash = a.path("serve-atsmf-flash.img");
    // 256 blocks of sub-LUN 3, read hot until it is promoted (the table
    // is written then).
    let blocks: Vec<u64> = (0..256).map(|i| 3 * 256 + i).collect();
    for how in ["clean stop", "SIGKILL"] {
        let o = opts(&[]);
        let mut srv = a.start_with(Opts {
            set: &o,
            stats_interval_s: Some(0.05),
            ..Opts::default()
        });
        write_blocks(&a, &blocks, 5);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while srv.counter("promotions").unwrap_or(0.0)
            + srv.counter("warm_promoted_sub_luns").unwrap_or(0.0)
            < 1.0
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no promotion after 30 s"
            );
            read_back(&a, &blocks, 5);
        }
        if how == "SIGKILL" {
            srv.kill();
        } else {
            srv.stop();
        }
        let before = digests(&[&b_memory, &a_flash]);
        let over_b = format!("devices.0.path={}", b_memory.display());
        let o: Vec<&str> = set.iter().copied().chain([over_b.as_str()]).collect();
        refused(
            &mut a,
            &o,
            &[
                "ATSMF's tiering table on the flash device flash (file",
                "belongs to another memory device: it records volume id",
                "or set persistent = false to start cold",
            ],
        );
        assert_eq!(digests(&[&b_memory, &a_flash]), before, "after a {how}");
        // A new memory file: adopted, warm.
        std::fs::remove_file(a.path("memory.img")).unwrap();
        let o = opts(&[]);
        let mut srv = a.start_with(Opts {
            set: &o,
            stats_interval_s: Some(0.05),
            ..Opts::default()
        });
        let warm = poll_until(
            "atsmf",
            "a new memory file comes up warm",
            Duration::from_secs(10),
            |last| {
                let w = srv.counter("warm_promoted_sub_luns");
                *last = format!("warm_promoted_sub_luns = {w:?}");
                w.filter(|&w| w >= 1.0)
            },
        );
        assert_eq!(warm, 1.0, "after a {how}");
        read_back(&a, &blocks, 5);
        srv.stop();
        eprintln!("atsmf after a {how}: refused over B's memory file; a new one adopted, warm");
    }
}

/// RAID 5 with a bitmap: A is SIGKILLed with writes in flight (its bitmap
/// marks their regions), or stopped cleanly; its bitmap over B's members
/// is refused before any resync, and B's members and A's bitmap do not
/// change. A's own members open (and resynchronise after the kill).
#[test]
fn a_raid_bitmap_over_another_arrays_members_is_refused_after_a_stop_and_a_sigkill() {
    let small: Vec<String> = (0..4)
        .map(|i| format!("devices.0.members.{i}.capacity_bytes=16MiB"))
        .collect();
    let small: Vec<&str> = small.iter().map(|s| s.as_str()).collect();
    let mut b = Lab::new(&RAID5_BITMAP);
    let mut srv = b.start_with(Opts {
        set: &small,
        ..Opts::default()
    });
    write_blocks(&b, &[0, 100, 2000], 4);
    srv.stop();
    let b_members: Vec<_> = (0..4)
        .map(|i| b.path(&format!("serve-raid5-bitmap-m{i}.img")))
        .collect();
    let over_b: Vec<String> = (0..4)
        .map(|i| format!("devices.0.members.{i}.path={}", b_members[i].display()))
        .collect();
    let mut a = Lab::new(&RAID5_BITMAP);
    let a_bitmap = a.path("serve-raid5-bitmap.bitmap");
    let blocks: Vec<u64> = (0..300).map(|i| i * 13).collect();
    for how in ["clean stop", "SIGKILL"] {
        let mut srv = a.start_with(Opts {
            set: &small,
            ..Opts::default()
        });
        write_blocks(&a, &blocks, 1);
        if how == "SIGKILL" {
            // Writes after the last FLUSH: their regions stay marked.
            let mut c = Client::connect(&a.socket());
            for &b in &blocks[..50] {
                assert_eq!(c.write(b * BLOCK, &data(b, 1)), 0);
            }
            srv.kill();
        } else {
            srv.stop();
        }
        let paths: Vec<&Path> = b_members
            .iter()
            .map(|p| p.as_path())
            .chain([a_bitmap.as_path()])
            .collect();
        let before = digests(&paths);
        let set: Vec<&str> = small
            .iter()
            .copied()
            .chain(over_b.iter().map(|s| s.as_str()))
            .collect();
        refused(
            &mut a,
            &set,
            &[
                "key `devices[0].bitmap`",
                "was made for other members: member 0 (file",
                "Refused before any data was written (no resync)",
            ],
        );
        assert_eq!(digests(&paths), before, "after a {how}");
        let mut srv = a.start_with(Opts {
            set: &small,
            ..Opts::default()
        });
        if how == "SIGKILL" {
            // The summary is rewritten every 0.5 s.
            poll_until(
                "raid5",
                "the kill left regions to resynchronise",
                Duration::from_secs(10),
                |last| {
                    let r = srv.device_counter("array", "resync_regions");
                    *last = format!("resync_regions = {r:?}");
                    r.filter(|&r| r >= 1.0)
                },
            );
        }
        read_back(&a, &blocks, 1);
        srv.stop();
        eprintln!("raid5 after a {how}: refused over B's members; own members open");
    }
}

/// The page cache and flashcache (persistent, their default on files) over
/// a new backing file, after a clean stop and a SIGKILL with dirty pages:
/// refused, the new file left empty and the cache file untouched; over
/// their own backing file they open with the data.
#[test]
fn a_persistent_cache_over_another_backing_file_is_refused_after_a_stop_and_a_sigkill() {
    for (stack, cache_img) in [
        (&CACHE, "serve-cache-cache.img"),
        (&FLASHCACHE, "serve-flashcache-ssd.img"),
    ] {
        let persistent = ["policy.persistent=true", "policy.capacity_bytes=4MiB"];
        let mut a = Lab::new(stack);
        let a_cache = a.path(cache_img);
        let blocks: Vec<u64> = (0..200).map(|i| i * 3).collect();
        for how in ["clean stop", "SIGKILL"] {
            let mut srv = a.start_with(Opts {
                set: &persistent,
                ..Opts::default()
            });
            write_blocks(&a, &blocks, 1);
            if how == "SIGKILL" {
                let mut c = Client::connect(&a.socket());
                for &b in &blocks[..50] {
                    assert_eq!(c.write(b * BLOCK, &data(b, 1)), 0);
                }
                srv.kill();
            } else {
                srv.stop();
            }
            let before = digest(&a_cache);
            let fresh = format!("devices.1.path=fresh-{}.img", how.replace(' ', "-"));
            let set: Vec<&str> = persistent.iter().copied().chain([fresh.as_str()]).collect();
            refused(
                &mut a,
                &set,
                &[
                    "belongs to another backing device",
                    "use the backing device this cache was made for",
                ],
            );
            assert!(all_zero(&a.path(&fresh["devices.1.path=".len()..])));
            assert_eq!(digest(&a_cache), before, "{}: the cache file", stack.name);
            let mut srv = a.start_with(Opts {
                set: &persistent,
                ..Opts::default()
            });
            read_back(&a, &blocks, 1);
            srv.stop();
            eprintln!(
                "{} after a {how}: refused over a new backing file; its own opens",
                stack.name
            );
        }
    }
}

/// One file for two devices: the same path, `./`, an absolute path, a
/// symlink, a hard link. Refused naming both entries and the file, before
/// anything is opened or created.
#[test]
fn one_file_for_two_devices_is_refused_naming_both_entries() {
    let mut lab = Lab::new(&CACHE);
    let cache = lab.path("serve-cache-cache.img");
    let abs = format!("devices.1.path={}", cache.display());
    for set in [
        "devices.1.path=serve-cache-cache.img",
        "devices.1.path=./serve-cache-cache.img",
        abs.as_str(),
    ] {
        refused(
            &mut lab,
            &[set],
            &[
                "key `devices[1].path`: devices[1] (backing) and devices[0] (cache) are the same file",
                "serve-cache-cache.img",
                "Give each device its own file",
            ],
        );
        assert!(!cache.exists(), "nothing is created");
        assert!(!lab.path("serve-cache-backing.img").exists());
    }
    std::fs::write(&cache, vec![0u8; 32 << 20]).unwrap();
    std::os::unix::fs::symlink("serve-cache-cache.img", lab.path("link.img")).unwrap();
    refused(
        &mut lab,
        &["devices.1.path=link.img"],
        &["given as \"serve-cache-cache.img\" and \"link.img\""],
    );
    std::fs::hard_link(&cache, lab.path("hard.img")).unwrap();
    refused(
        &mut lab,
        &["devices.1.path=hard.img"],
        &["are hard links to inode"],
    );
    // Two files: serves.
    let mut srv = lab.start();
    srv.stop();
}
