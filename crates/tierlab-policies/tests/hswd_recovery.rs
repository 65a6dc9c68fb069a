//! HSWD's `open` on metadata areas made by hand (hswd_meta's encoders):
//! format, refuse, replay the journal, resolve duplicate claims durably,
//! and refuse a PCache reattached to another NRegion.

use tierlab_core::policy::{Extent, Policy};
use tierlab_core::testkit::LabelledStores;
use tierlab_core::volume::VolumeId;
use tierlab_policies::cache::ByteCount;
use tierlab_policies::hswd::{Hswd, HswdParams, NREGION_DEVICE, PCACHE_DEVICE, TIER_PCACHE};
use tierlab_policies::hswd_meta::{self, Geometry, Header, Journal};

const BAND: u64 = 256 << 10;
const NREGION: u64 = 8 << 20;

fn params() -> HswdParams {
    let mut p = HswdParams::with_pcache(2 << 20);
    p.band_bytes = ByteCount(BAND);
    p
}

fn hswd() -> Hswd {
    Hswd::new(&params(), NREGION).unwrap()
}

fn stores(h: &Hswd) -> Vec<Vec<u8>> {
    vec![
        vec![0u8; h.layout().device_bytes as usize],
        vec![0u8; NREGION as usize],
    ]
}

fn geometry(h: &Hswd) -> Geometry {
    let l = h.layout();
    Geometry {
        block_bytes: l.block_bytes,
        band_bytes: l.band_bytes,
        blocks: l.blocks,
        sets: l.sets,
        entry_bytes: 16,
        nregion_bytes: NREGION,
    }
}

fn put(s: &mut [Vec<u8>], device: usize, at: u64, bytes: &[u8]) {
    s[device][at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
}

fn counter(h: &Hswd, name: &str) -> f64 {
    h.counters()
        .into_iter()
        .find(|(k, _)| *k == name)
        .unwrap()
        .1
}

#[test]
fn a_zero_area_is_formatted_and_opens_again_empty() {
    let mut h = hswd();
    let mut s = stores(&h);
    h.open(&mut s).unwrap();
    assert_eq!(counter(&h, "formatted"), 1.0);
    let (hd, seq) = hswd_meta::decode_header(&s[PCACHE_DEVICE][..4096]).unwrap();
    assert_eq!((hd.geometry, hd.journal, seq), (geometry(&h), None, 1));
    let mut again = hswd();
    again.open(&mut s).unwrap();
    assert_eq!(counter(&again, "formatted"), 0.0);
    assert_eq!(again.cached_blocks(), 0);
}

#[test]
fn damaged_or_foreign_metadata_is_refused_never_formatted_over() {
    // Garbage in the header (both copies): refused, and left as it was.
    let mut h = hswd();
    let mut s = stores(&h);
    put(&mut s, PCACHE_DEVICE, 100, b"something else's data");
    let before = s.clone();
    let e = h.open(&mut s).unwrap_err().to_string();
    assert!(
        e.contains("header is unreadable") && e.contains("refusing to format"),
        "{e}"
    );
    assert_eq!(s, before, "nothing was written");
    // Another geometry: the differences are named.
    let mut s = stores(&h);
    hswd().open(&mut s).unwrap();
    let mut other = params();
    other.block_bytes = ByteCount(8192);
    let e = Hswd::new(&other, NREGION)
        .unwrap()
        .open(&mut s)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("block_bytes 4096 on the device, 8192 in the config"),
        "{e}"
    );
    // An entry page unreadable in both copies.
    let mut s = stores(&h);
    hswd().open(&mut s).unwrap();
    put(
        &mut s,
        PCACHE_DEVICE,
        hswd_meta::copy_offset(1, 0) + 40,
        &[0xff; 8],
    );
    let e = hswd().open(&mut s).unwrap_err().to_string();
    assert!(
        e.contains("metadata page 1 is unreadable in both copies"),
        "{e}"
    );
    // A crc-valid journal record for a band past the NRegion.
    let mut s = stores(&h);
    hswd().open(&mut s).unwrap();
    let bad = Header {
        geometry: geometry(&h),
        journal: Some(Journal {
            band: 1 << 40,
            len_bytes: BAND,
        }),
        nregion_id: None,
    };
    put(
        &mut s,
        PCACHE_DEVICE,
        hswd_meta::copy_offset(0, 1),
        &hswd_meta::encode_header(&bad, 2),
    );
    let e = hswd().open(&mut s).unwrap_err().to_string();
    assert!(e.contains("journal record"), "{e}");
}

#[test]
fn a_journaled_band_is_rewritten_from_the_rcache() {
    let mut h = hswd();
    let mut s = stores(&h);
    h.open(&mut s).unwrap();
    let staged: Vec<u8> = (0..BAND).map(|i| (i % 251) as u8).collect();
    let rcache = h.layout().rcache_offset_bytes;
    put(&mut s, PCACHE_DEVICE, rcache, &staged);
    // Band 3 on the disk: half rewritten, the rest destroyed.
    put(&mut s, NREGION_DEVICE, 3 * BAND, &staged[..1000]);
    put(
        &mut s,
        NREGION_DEVICE,
        3 * BAND + 1000,
        &vec![0xa5; (BAND - 1000) as usize],
    );
    let set = Header {
        geometry: geometry(&h),
        journal: Some(Journal {
            band: 3,
            len_bytes: BAND,
        }),
        nregion_id: None,
    };
    put(
        &mut s,
        PCACHE_DEVICE,
        hswd_meta::copy_offset(0, 1),
        &hswd_meta::encode_header(&set, 2),
    );
    let mut r = hswd();
    r.open(&mut s).unwrap();
    assert_eq!(counter(&r, "journal_replays"), 1.0);
    assert_eq!(
        &s[NREGION_DEVICE][(3 * BAND) as usize..(4 * BAND) as usize],
        &staged[..]
    );
}

#[test]
fn two_slots_claiming_a_block_resolve_to_the_newer_commit_durably() {
    let mut h = hswd();
    let mut s = stores(&h);
    h.open(&mut s).unwrap();
    // Block 9 claimed by slot 2 (commit 4) and slot 5 (commit 7); block
    // 10 by slot 3 alone.
    let per = hswd_meta::entries_per_page(16) as usize;
    let mut entries = vec![(0u64, 0u64); per.min(h.layout().blocks as usize)];
    entries[2] = (10, 4);
    entries[5] = (10, 7);
    entries[3] = (11, 5);
    put(
        &mut s,
        PCACHE_DEVICE,
        hswd_meta::copy_offset(1, 1),
        &hswd_meta::encode_entries(1, 2, 16, &entries),
    );
    let mut r = hswd();
    r.open(&mut s).unwrap();
    assert_eq!(r.cached_blocks(), 2);
    assert_eq!(counter(&r, "recovered_blocks"), 2.0);
    let slot_of = |h: &Hswd, block: u64| {
        let mut ext: Vec<Extent> = Vec::new();
        h.locate(block * 4096, 4096, &mut ext);
        assert_eq!(ext.len(), 1);
        assert_eq!(ext[0].tier, TIER_PCACHE);
        (ext[0].device_offset_bytes - h.layout().data_offset_bytes) / 4096
    };
    assert_eq!(slot_of(&r, 9), 5, "the newer commit wins");
    assert_eq!(slot_of(&r, 10), 3);
    // The losing claim is already gone from the durable page (a second
    // crash cannot bring it back): the newest copy has slot 2 free.
    let a = hswd_meta::decode_entries(
        &s[PCACHE_DEVICE][..][hswd_meta::copy_offset(1, 0) as usize..][..4096],
        1,
        16,
        entries.len(),
    );
    let b = hswd_meta::decode_entries(
        &s[PCACHE_DEVICE][..][hswd_meta::copy_offset(1, 1) as usize..][..4096],
        1,
        16,
        entries.len(),
    );
    let (_, newest, seq) = hswd_meta::newest(a, b).unwrap();
    assert_eq!(seq, 3);
    assert_eq!(newest[2], (0, 0));
    assert_eq!(newest[5], (10, 7));
    // And a restart from there finds the same.
    let mut again = hswd();
    again.open(&mut s).unwrap();
    assert_eq!(slot_of(&again, 9), 5);
    assert_eq!(again.cached_blocks(), 2);
}

const NREGION_A: u128 = 0xaaaa_0000_0000_0000_0000_0000_0000_0001;
const NREGION_B: u128 = 0xbbbb_0000_0000_0000_0000_0000_0000_0002;

/// A PCache formatted over NRegion A, holding a cached block and a
/// journaled band (a crash in the middle of an RMW): what a recovery over
/// A would write into the NRegion.
fn pcache_of_a_with_work_pending() -> (Vec<u8>, Vec<u8>) {
    let mut h = hswd();
    let mut s = LabelledStores::new(
        stores(&h),
        &[Some(0x9c), Some(NREGION_A)],
        &["pcache", "nregion"],
    );
    h.open(&mut s).unwrap();
    let (hd, _) = hswd_meta::decode_header(&s.data[PCACHE_DEVICE][..4096]).unwrap();
    assert_eq!(
        hd.nregion_id,
        VolumeId::new(NREGION_A),
        "recorded at format"
    );
    let staged: Vec<u8> = (0..BAND).map(|i| (i % 251) as u8).collect();
    put(
        &mut s.data,
        PCACHE_DEVICE,
        h.layout().rcache_offset_bytes,
        &staged,
    );
    let journal = Header {
        geometry: geometry(&h),
        journal: Some(Journal {
            band: 3,
            len_bytes: BAND,
        }),
        nregion_id: VolumeId::new(NREGION_A),
    };
    put(
        &mut s.data,
        PCACHE_DEVICE,
        hswd_meta::copy_offset(0, 1),
        &hswd_meta::encode_header(&journal, 2),
    );
    let per = hswd_meta::entries_per_page(16) as usize;
    let mut entries = vec![(0u64, 0u64); per.min(h.layout().blocks as usize)];
    entries[0] = (6, 1); // block 5 in slot 0
    put(
        &mut s.data,
        PCACHE_DEVICE,
        hswd_meta::copy_offset(1, 1),
        &hswd_meta::encode_entries(1, 2, 16, &entries),
    );
    let pcache = s.data[PCACHE_DEVICE].clone();
    (pcache, s.data.swap_remove(NREGION_DEVICE))
}

/// Issue 35: a PCache reattached to another NRegion — another volume, or a
/// new empty file of the same size — is refused before anything is
/// written: the journaled band is not replayed into it, and neither store
/// changes by a byte.
#[test]
fn a_pcache_reattached_to_another_nregion_is_refused_before_any_write() {
    let (pcache, _) = pcache_of_a_with_work_pending();
    let other: Vec<u8> = (0..NREGION).map(|i| (i / 4096 % 199) as u8).collect();
    for created_now in [false, true] {
        let mut s = LabelledStores::new(
            vec![pcache.clone(), other.clone()],
            &[Some(0x9c), Some(NREGION_B)],
            &["pcache (file p.img)", "nregion (file b.img)"],
        );
        if created_now {
            s.replace_with_new(NREGION_DEVICE, NREGION_B);
        }
        let nregion_before = s.data[NREGION_DEVICE].clone();
        let e = hswd().open(&mut s).unwrap_err().to_string();
        for want in [
            "HSWD's metadata on the PCache device pcache (file p.img) belongs to another NRegion \
             device",
            "records volume id aaaa0000000000000000000000000001",
            "the NRegion device nregion (file b.img) is volume bbbb0000000000000000000000000002",
            "use the NRegion device this PCache was made for, or give a new or zeroed PCache \
             device to start empty",
        ] {
            assert!(e.contains(want), "{want:?} not in: {e}");
        }
        assert_eq!(e.contains("setfattr"), created_now, "{e}");
        assert!(s.data[PCACHE_DEVICE] == pcache, "the PCache is untouched");
        assert!(
            s.data[NREGION_DEVICE] == nregion_before,
            "the other NRegion is untouched (no journal replay)"
        );
    }
    // The NRegion it was made for: opened, the band replayed, block 5 cached.
    let (pcache, nregion) = pcache_of_a_with_work_pending();
    let mut s = LabelledStores::new(vec![pcache, nregion], &[Some(0x9c), Some(NREGION_A)], &[]);
    let mut h = hswd();
    h.open(&mut s).unwrap();
    assert_eq!(counter(&h, "journal_replays"), 1.0);
    assert_eq!(h.cached_blocks(), 1);
}

/// A header written before ids were recorded opens over any NRegion (it
/// cannot tell which it was made for) and records the NRegion's id at once:
/// from then on another NRegion is refused. An NRegion that cannot tell
/// (RAM) is not checked, and the recorded id is kept.
#[test]
fn an_old_header_is_bound_at_its_first_open_and_a_store_that_cannot_tell_is_not_checked() {
    // Formatted over stores that cannot tell: zeros where the id goes, the
    // bytes of a header written before ids were recorded.
    let h = hswd();
    let mut data = stores(&h);
    hswd().open(&mut data).unwrap();
    let (hd, _) = hswd_meta::decode_header(&data[PCACHE_DEVICE][..4096]).unwrap();
    assert_eq!(hd.nregion_id, None);
    let mut s = LabelledStores::new(data, &[Some(1), Some(NREGION_A)], &[]);
    hswd().open(&mut s).unwrap();
    let newest = |d: &[u8]| {
        let a = hswd_meta::decode_header(&d[..4096]);
        let b = hswd_meta::decode_header(&d[4096..8192]);
        hswd_meta::newest(a, b).unwrap()
    };
    let (_, hd, seq) = newest(&s.data[PCACHE_DEVICE]);
    assert_eq!((hd.nregion_id, seq), (VolumeId::new(NREGION_A), 2));
    s.labels[NREGION_DEVICE] = LabelledStores::new(vec![vec![]], &[Some(NREGION_B)], &[]).labels[0];
    assert!(hswd().open(&mut s).is_err(), "bound now");
    s.labels[NREGION_DEVICE] = None;
    hswd().open(&mut s).unwrap();
    let (_, hd, _) = newest(&s.data[PCACHE_DEVICE]);
    assert_eq!(hd.nregion_id, VolumeId::new(NREGION_A), "kept");
}
