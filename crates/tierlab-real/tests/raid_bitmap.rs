//! The RAID 5 write hole on real files, and the write-intent bitmap that
//! closes it (src/raid_bitmap.rs).
//!
//! The crash is made by hand: a stripe whose new data reached its member
//! but whose parity did not (what a crash between the two member writes
//! leaves). Without a bitmap, a member lost afterwards is rebuilt from the
//! stale parity, so flushed data nobody rewrote comes back wrong; with
//! the bitmap, the reopen resynchronises the region first. The rest: the
//! bitmap's lifecycle (set before the first write, cleared by a flush),
//! torn and foreign bitmaps, and configs refused.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tierlab_real::backend::Backend;
use tierlab_real::error::BackendError;
use tierlab_real::raid::{RaidBackend, open};
use tierlab_real::raid_bitmap::BitmapError;

const UNIT: u64 = 16 << 10;
const MEMBER_BYTES: u64 = 1 << 20;

fn table(_dir: &Path, failed: &[usize], bitmap: Option<&str>, extra: &str) -> toml::Table {
    let members: Vec<String> = (0..3)
        .map(|i| {
            if failed.contains(&i) {
                format!("{{ path = \"m{i}.img\" }}")
            } else {
                format!(
                    "{{ path = \"m{i}.img\", capacity_bytes = {MEMBER_BYTES}, create = true, direct = false }}"
                )
            }
        })
        .collect();
    let bitmap = bitmap.map_or(String::new(), |b| format!("bitmap = {b}\n"));
    let text = format!(
        "model = \"raid\"\nlevel = \"raid5\"\nstripe_unit_bytes = {UNIT}\n\
         failed_members = {failed:?}\nmembers = [{}]\n{bitmap}{extra}",
        members.join(", ")
    );
    toml::from_str(&text).unwrap()
}

fn array(dir: &Path, failed: &[usize], bitmap: Option<&str>) -> Result<RaidBackend, String> {
    // 64 KiB regions: 4 stripes of 16 KiB per member.
    let chunk = if bitmap.is_some() {
        "bitmap_chunk_bytes = 65536\n"
    } else {
        ""
    };
    open(&table(dir, failed, bitmap, chunk), "devices[0]", dir).map_err(|e| e.to_string())
}

fn counter(a: &RaidBackend, name: &str) -> f64 {
    a.counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

/// Stripe 0 of a 3-member RAID 5 (left-symmetric): data units on members
/// 0 and 1, parity on member 2. Fills the stripe and flushes it, then
/// lands a new unit 0 on member 0 without its parity, as a crash between
/// the two writes does. Returns unit 1's flushed bytes.
fn crash_mid_stripe_write(dir: &Path, bitmap: Option<&str>) -> Vec<u8> {
    let a = array(dir, &[], bitmap).unwrap();
    let unit1 = pattern(7, UNIT as usize);
    let mut stripe = pattern(3, UNIT as usize);
    stripe.extend_from_slice(&unit1);
    a.write_at(&stripe, 0).unwrap();
    a.flush().unwrap();
    if bitmap.is_some() {
        assert_eq!(
            counter(&a, "bitmap_dirty_regions"),
            0.0,
            "the flush cleared the bit"
        );
        // The write that the crash interrupts: through the array, so the
        // bitmap marks the region before any member write starts...
        a.write_at(&pattern(9, UNIT as usize), 0).unwrap();
        assert_eq!(counter(&a, "bitmap_dirty_regions"), 1.0);
    }
    drop(a); // the crash: no flush, no clean stop
    // ...and what the crash left: the new data landed, the parity did not.
    let m0 = OpenOptions::new()
        .write(true)
        .open(dir.join("m0.img"))
        .unwrap();
    m0.write_all_at(&pattern(9, UNIT as usize), 0).unwrap();
    let m2 = OpenOptions::new()
        .write(true)
        .open(dir.join("m2.img"))
        .unwrap();
    let old_parity: Vec<u8> = pattern(3, UNIT as usize)
        .iter()
        .zip(&unit1)
        .map(|(a, b)| a ^ b)
        .collect();
    m2.write_all_at(&old_parity, 0).unwrap();
    unit1
}

#[test]
fn without_a_bitmap_a_lost_member_is_rebuilt_from_stale_parity() {
    let dir = tempfile::tempdir().unwrap();
    let unit1 = crash_mid_stripe_write(dir.path(), None);
    // Healthy, the array reads right: the write hole is invisible...
    let a = array(dir.path(), &[], None).unwrap();
    let mut got = vec![0u8; UNIT as usize];
    a.read_at(&mut got, UNIT).unwrap();
    assert_eq!(got, unit1);
    drop(a);
    // ...until member 1 is lost: its unit is rebuilt as P ^ D0, with the
    // old parity and the new D0, so flushed data comes back wrong.
    let a = array(dir.path(), &[1], None).unwrap();
    a.read_at(&mut got, UNIT).unwrap();
    assert_ne!(got, unit1, "the write hole: the rebuilt unit is wrong");
    let wrong = got.iter().zip(&unit1).filter(|(a, b)| a != b).count();
    assert!(wrong > UNIT as usize / 2, "{wrong} bytes differ");
}

#[test]
fn the_bitmap_resynchronises_the_stripe_so_the_rebuild_is_right() {
    let dir = tempfile::tempdir().unwrap();
    let unit1 = crash_mid_stripe_write(dir.path(), Some("\"raid.bitmap\""));
    let a = array(dir.path(), &[], Some("\"raid.bitmap\"")).unwrap();
    assert_eq!(counter(&a, "resync_regions"), 1.0);
    // One region of 64 KiB per member = 4 stripes of 16 KiB, parity rewritten.
    assert_eq!(counter(&a, "resync_member_bytes"), (4 * UNIT) as f64);
    assert_eq!(counter(&a, "bitmap_dirty_regions"), 0.0);
    drop(a);
    // Parity is P = D0' ^ D1 now: the rebuild of member 1 is right.
    let a = array(dir.path(), &[1], Some("\"raid.bitmap\""));
    let a = a.unwrap();
    let mut got = vec![0u8; UNIT as usize];
    a.read_at(&mut got, UNIT).unwrap();
    assert_eq!(got, unit1);
    // And the interrupted write's data is whole (it had landed).
    a.read_at(&mut got, 0).unwrap();
    assert_eq!(got, pattern(9, UNIT as usize));
}

#[test]
fn a_dirty_region_with_a_lost_member_is_refused_not_rebuilt_wrong() {
    let dir = tempfile::tempdir().unwrap();
    crash_mid_stripe_write(dir.path(), Some("\"raid.bitmap\""));
    let e = array(dir.path(), &[1], Some("\"raid.bitmap\""))
        .err()
        .expect("refused");
    assert!(
        e.contains("devices[0].bitmap") && e.contains("member 1"),
        "{e}"
    );
    assert!(e.contains("delete the bitmap file"), "{e}");
}

#[test]
fn bits_are_set_before_the_first_write_and_cleared_by_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let a = array(dir.path(), &[], Some("{ path = \"raid.bitmap\" }")).unwrap();
    assert!(
        a.describe().contains("write-intent bitmap"),
        "{}",
        a.describe()
    );
    // Two regions of one member each hold 4 stripes (8 units of data).
    a.write_at(&pattern(1, 4096), 0).unwrap();
    a.write_at(&pattern(2, 4096), 4096).unwrap();
    a.write_at(&pattern(3, 4096), 8 * UNIT).unwrap();
    assert_eq!(counter(&a, "bitmap_bits_set"), 2.0);
    assert_eq!(counter(&a, "bitmap_flushes"), 2.0, "one flush per bit set");
    assert_eq!(counter(&a, "bitmap_dirty_regions"), 2.0);
    a.flush().unwrap();
    assert_eq!(counter(&a, "bitmap_dirty_regions"), 0.0);
    assert_eq!(counter(&a, "bitmap_bits_cleared"), 2.0);
    drop(a);
    // A clean stop leaves nothing to resynchronise.
    let a = array(dir.path(), &[], Some("\"raid.bitmap\"")).unwrap();
    assert_eq!(counter(&a, "resync_regions"), 0.0);
    let mut got = vec![0u8; 4096];
    a.read_at(&mut got, 8 * UNIT).unwrap();
    assert_eq!(got, pattern(3, 4096));
}

#[test]
fn a_torn_bitmap_page_resynchronises_every_region_it_covers() {
    let dir = tempfile::tempdir().unwrap();
    let a = array(dir.path(), &[], Some("\"raid.bitmap\"")).unwrap();
    a.write_at(&pattern(1, 4096), 0).unwrap();
    a.flush().unwrap();
    drop(a);
    // Half of the bit page (page 1) overwritten: its crc fails.
    let f = OpenOptions::new()
        .write(true)
        .open(dir.path().join("raid.bitmap"))
        .unwrap();
    f.write_all_at(&[0xAB; 512], 4096 + 512).unwrap();
    let a = array(dir.path(), &[], Some("\"raid.bitmap\"")).unwrap();
    // 1 MiB members in 64 KiB regions: all 16.
    assert_eq!(counter(&a, "resync_regions"), 16.0);
    let mut got = vec![0u8; 4096];
    a.read_at(&mut got, 0).unwrap();
    assert_eq!(got, pattern(1, 4096));
}

#[test]
fn a_bitmap_of_another_array_or_a_damaged_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(array(dir.path(), &[], Some("\"raid.bitmap\"")).unwrap());
    // Another region size.
    let e = open(
        &table(
            dir.path(),
            &[],
            Some("\"raid.bitmap\""),
            "bitmap_chunk_bytes = 131072\n",
        ),
        "devices[0]",
        dir.path(),
    )
    .err()
    .unwrap();
    // Typed: the bitmap's key and what differs, one item each.
    match &e {
        BackendError::Bitmap {
            key,
            error: BitmapError::Foreign { differences, .. },
        } => {
            assert_eq!(key, "devices[0].bitmap");
            assert_eq!(
                differences,
                &["bitmap_chunk_bytes 65536 (this config: 131072)".to_string()]
            );
        }
        other => panic!("{other:?}"),
    }
    let e = e.to_string();
    assert!(
        e.contains("made for another array")
            && e.contains("bitmap_chunk_bytes 65536 (this config: 131072)"),
        "{e}"
    );
    // A damaged header.
    let f = OpenOptions::new()
        .write(true)
        .open(dir.path().join("raid.bitmap"))
        .unwrap();
    f.write_all_at(&[1], 30).unwrap();
    let e = array(dir.path(), &[], Some("\"raid.bitmap\""))
        .err()
        .unwrap();
    assert!(e.contains("crc32c") && e.contains("refusing"), "{e}");
    // Not a bitmap at all.
    std::fs::write(dir.path().join("other.bin"), vec![7u8; 8192]).unwrap();
    let e = array(dir.path(), &[], Some("\"other.bin\"")).err().unwrap();
    assert!(e.contains("not a tierlab RAID bitmap"), "{e}");
}

#[test]
fn bitmap_configs_that_cannot_work_are_refused_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases = [
        (
            "bitmap = \"b\"\nbitmap_chunk_bytes = 1000\n",
            "key `devices[0].bitmap_chunk_bytes`: expected a positive multiple of \
             `stripe_unit_bytes` (16384), found 1000",
        ),
        ("bitmap_chunk_bytes = 65536\n", "given without `bitmap`"),
        ("bitmap = 3\n", "devices[0].bitmap`: 3 is not a path"),
        (
            "bitmap = { path = \"b\", size = 1 }\n",
            "devices[0].bitmap.size`",
        ),
        (
            "bitmap = { direct = false }\n",
            "devices[0].bitmap.path`: missing",
        ),
    ];
    for (extra, want) in cases {
        let e = open(&table(d, &[], None, extra), "devices[0]", d)
            .err()
            .unwrap_or_else(|| panic!("{extra} accepted"));
        assert!(e.to_string().contains(want), "{extra}: {e}");
    }
    let raid0: toml::Table = toml::from_str(&format!(
        "model = \"raid\"\nlevel = \"raid0\"\nstripe_unit_bytes = {UNIT}\nbitmap = \"b\"\n\
         members = [{{ path = \"a\", capacity_bytes = {MEMBER_BYTES}, create = true }}, \
         {{ path = \"c\", capacity_bytes = {MEMBER_BYTES}, create = true }}]"
    ))
    .unwrap();
    let e = open(&raid0, "devices[0]", d).err().unwrap().to_string();
    assert!(
        e.contains("key `devices[0].bitmap`") && e.contains("raid0 keeps no redundancy"),
        "{e}"
    );
}

/// A 3-member RAID 5 table over the member files `paths` (in that order)
/// with the bitmap file `bitmap` (64 KiB regions).
fn table_over(paths: &[&Path], bitmap: &Path) -> toml::Table {
    let members: Vec<String> = paths
        .iter()
        .map(|p| {
            format!(
                "{{ path = {:?}, capacity_bytes = {MEMBER_BYTES}, create = true, direct = false }}",
                p.display().to_string()
            )
        })
        .collect();
    let text = format!(
        "model = \"raid\"\nlevel = \"raid5\"\nstripe_unit_bytes = {UNIT}\n\
         members = [{}]\nbitmap = {:?}\nbitmap_chunk_bytes = 65536\n",
        members.join(", "),
        bitmap.display().to_string()
    );
    toml::from_str(&text).unwrap()
}

fn files(dir: &Path, names: &[&str]) -> Vec<Vec<u8>> {
    names
        .iter()
        .map(|n| std::fs::read(dir.join(n)).unwrap())
        .collect()
}

/// Issue 35: a write-intent bitmap belongs to the members it was made
/// over (their volume ids, recorded in its header). Array X crashed in the
/// middle of a stripe write, so its bitmap marks region 0; opening that
/// bitmap over another array's members (Y, whose stripe 0 parity is
/// deliberately stale so a resync would rewrite it), or over X's own
/// members in another order, is refused before any resync: Y's members and
/// X's bitmap stay byte for byte as they were. X's members in their order
/// open and resynchronise.
#[test]
fn a_bitmap_over_other_members_is_refused_before_any_resync() {
    let x = tempfile::tempdir().unwrap();
    let y = tempfile::tempdir().unwrap();
    crash_mid_stripe_write(x.path(), Some("\"raid.bitmap\""));
    let xm: Vec<_> = (0..3).map(|i| x.path().join(format!("m{i}.img"))).collect();
    let ym: Vec<_> = (0..3).map(|i| y.path().join(format!("m{i}.img"))).collect();
    let bitmap = x.path().join("raid.bitmap");
    {
        let a = open(
            &table_over(&[&ym[0], &ym[1], &ym[2]], &y.path().join("own.bitmap")),
            "devices[0]",
            y.path(),
        )
        .unwrap();
        a.write_at(&pattern(5, 2 * UNIT as usize), 0).unwrap();
        a.flush().unwrap();
    }
    // Y's stripe 0 parity (member 2) made stale: a resync would fix it.
    OpenOptions::new()
        .write(true)
        .open(&ym[2])
        .unwrap()
        .write_all_at(&[0x5a; 512], 0)
        .unwrap();
    let names = ["m0.img", "m1.img", "m2.img"];
    let (y_before, bitmap_before) = (files(y.path(), &names), std::fs::read(&bitmap).unwrap());
    let e = open(
        &table_over(&[&ym[0], &ym[1], &ym[2]], &bitmap),
        "devices[0]",
        y.path(),
    )
    .err()
    .expect("refused");
    let BackendError::Bitmap {
        key,
        error: BitmapError::OtherMembers { mismatches, .. },
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(key, "devices[0].bitmap");
    assert_eq!(
        mismatches.iter().map(|m| m.member).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    let text = e.to_string();
    assert!(
        text.contains("was made for other members: member 0 (file")
            && text.contains("was volume")
            && text.contains("Refused before any data was written (no resync)"),
        "{text}"
    );
    assert!(files(y.path(), &names) == y_before, "Y's members untouched");
    assert!(
        std::fs::read(&bitmap).unwrap() == bitmap_before,
        "the bitmap untouched"
    );
    // X's own members, two swapped: refused, the swap named.
    let e = open(
        &table_over(&[&xm[1], &xm[0], &xm[2]], &bitmap),
        "devices[0]",
        x.path(),
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(
        e.contains("the bitmap recorded that volume as member 1")
            && e.contains("the bitmap recorded that volume as member 0"),
        "{e}"
    );
    assert!(std::fs::read(&bitmap).unwrap() == bitmap_before);
    // X's members in their order: the region is resynchronised.
    let a = open(
        &table_over(&[&xm[0], &xm[1], &xm[2]], &bitmap),
        "devices[0]",
        x.path(),
    )
    .unwrap();
    assert_eq!(counter(&a, "resync_regions"), 1.0);
}

/// An array's volume id is derived from its members' ids in order (so a
/// cache over the array is bound to these members): stable across opens,
/// the same degraded when the bitmap recorded the lost member's id, and
/// unknown degraded without one.
#[test]
fn an_array_id_is_its_members_and_survives_a_lost_member_through_the_bitmap() {
    use tierlab_core::volume::LabelKind;
    let dir = tempfile::tempdir().unwrap();
    let id = |failed: &[usize], bitmap: Option<&str>| {
        array(dir.path(), failed, bitmap)
            .unwrap()
            .volume_label()
            .unwrap()
    };
    let first = id(&[], Some("\"raid.bitmap\"")).unwrap();
    assert_eq!(first.kind, LabelKind::Array);
    assert_eq!(
        id(&[], Some("\"raid.bitmap\"")).map(|l| l.id),
        Some(first.id)
    );
    assert_eq!(
        id(&[], None).map(|l| l.id),
        Some(first.id),
        "the bitmap is no part"
    );
    assert_eq!(
        id(&[1], Some("\"raid.bitmap\"")).map(|l| l.id),
        Some(first.id)
    );
    assert_eq!(id(&[1], None), None, "a lost member nobody recorded");
    // Another member in place 2: another volume.
    std::fs::remove_file(dir.path().join("m2.img")).unwrap();
    assert_ne!(id(&[], None).map(|l| l.id), Some(first.id));
}
