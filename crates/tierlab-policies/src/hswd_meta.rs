//! HSWD's metadata area on the PCache device: the on-disk format
//! (docs/crash-consistency.md has the same tables).
//!
//! The pages, their two copies and their 32-byte head are
//! [`crate::slot_meta`]'s (shared with the page cache's persistent mode);
//! HSWD's magics are `HSWH` (header) and `HSWE` (entries), its area starts
//! at byte 0 of the PCache device.
//!
//! Header payload (from byte 32): geometry as six u64 — block bytes, band
//! bytes, data blocks, sets, entry bytes, NRegion bytes — then the RMW
//! journal: u64 1/0 (a band is staged in the RCache / none), u64 band, u64
//! staged length in bytes; then the NRegion's volume id as two u64 (high
//! half first; 0, 0: none recorded — a header written before ids were, or
//! over an NRegion that cannot tell; [`crate::binding`]).
//!
//! Entry payload (from byte 32): one entry per data-area slot, `entry_bytes`
//! each (at least 16): u64 block number + 1 (0: the slot is free), u64 the
//! commit sequence that wrote it (when two slots claim one block after a
//! crash, the higher wins); the rest zero. Every cached block is dirty, so
//! no state field is needed.

use crate::binding;
use crate::slot_meta;
pub use crate::slot_meta::{
    Entries, MAX_SEQ, MIN_ENTRY_BYTES, PAGE, copy_offset, entries_per_page, entry_pages, newest,
};
use tierlab_core::volume::VolumeId;

const MAGIC_HEADER: &[u8; 4] = b"HSWH";
pub const MAGIC_ENTRIES: &[u8; 4] = b"HSWE";

/// The geometry a metadata area was made for: a restart with any other is
/// refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub block_bytes: u64,
    pub band_bytes: u64,
    pub blocks: u64,
    pub sets: u64,
    pub entry_bytes: u64,
    pub nregion_bytes: u64,
}

impl Geometry {
    const FIELDS: [&'static str; 6] = [
        "block_bytes",
        "band_bytes",
        "data blocks",
        "sets",
        "metadata_entry_bytes",
        "NRegion bytes",
    ];

    fn values(&self) -> [u64; 6] {
        [
            self.block_bytes,
            self.band_bytes,
            self.blocks,
            self.sets,
            self.entry_bytes,
            self.nregion_bytes,
        ]
    }

    /// "block_bytes 4096 there, 8192 here; ..." for every field that differs.
    pub fn differences(&self, here: &Geometry) -> String {
        Geometry::FIELDS
            .iter()
            .zip(self.values().iter().zip(here.values()))
            .filter(|(_, (a, b))| *a != b)
            .map(|(f, (a, b))| format!("{f} {a} on the device, {b} in the config"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The RMW journal record: band `band` is staged in the RCache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Journal {
    pub band: u64,
    pub len_bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub geometry: Geometry,
    pub journal: Option<Journal>,
    /// The NRegion this PCache's blocks belong to (None: not recorded).
    pub nregion_id: Option<VolumeId>,
}

pub fn encode_header(h: &Header, seq: u64) -> Vec<u8> {
    let mut fields = h.geometry.values().to_vec();
    match h.journal {
        Some(j) => fields.extend([1, j.band, j.len_bytes]),
        None => fields.extend([0, 0, 0]),
    }
    fields.extend(binding::to_fields(h.nregion_id));
    slot_meta::encode_header(MAGIC_HEADER, &fields, seq)
}

/// The header and its sequence, if this copy is valid.
pub fn decode_header(page: &[u8]) -> Result<(Header, u64), &'static str> {
    let (v, seq) = slot_meta::decode_header(MAGIC_HEADER, page, 9 + binding::ID_FIELDS)?;
    let geometry = Geometry {
        block_bytes: v[0],
        band_bytes: v[1],
        blocks: v[2],
        sets: v[3],
        entry_bytes: v[4],
        nregion_bytes: v[5],
    };
    let journal = match v[6] {
        0 => None,
        1 => Some(Journal {
            band: v[7],
            len_bytes: v[8],
        }),
        _ => return Err("a journal flag that is neither 0 nor 1"),
    };
    let nregion_id = binding::from_fields([v[9], v[10]]);
    Ok((
        Header {
            geometry,
            journal,
            nregion_id,
        },
        seq,
    ))
}

/// Entry page `page_no` (1..) holding `entries` (block + 1, commit seq)
/// for its slots.
pub fn encode_entries(page_no: u64, seq: u64, entry_bytes: u64, entries: &[(u64, u64)]) -> Vec<u8> {
    slot_meta::encode_entries(MAGIC_ENTRIES, page_no, seq, entry_bytes, entries)
}

/// The `n` entries of a valid copy, and its sequence.
pub fn decode_entries(
    page: &[u8],
    page_no: u64,
    entry_bytes: u64,
    n: usize,
) -> Result<(Entries, u64), &'static str> {
    slot_meta::decode_entries(MAGIC_ENTRIES, page, page_no, entry_bytes, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry {
            block_bytes: 4096,
            band_bytes: 1 << 20,
            blocks: 512,
            sets: 1,
            entry_bytes: 16,
            nregion_bytes: 8 << 20,
        }
    }

    #[test]
    fn pages_round_trip_and_any_damage_is_detected() {
        let h = Header {
            geometry: geometry(),
            journal: Some(Journal {
                band: 3,
                len_bytes: 1 << 20,
            }),
            nregion_id: VolumeId::new(0xfeed << 70 | 0xbeef),
        };
        let page = encode_header(&h, 7);
        assert_eq!(decode_header(&page), Ok((h, 7)));
        // A header written before ids were recorded: zeros there, no id.
        let old = slot_meta::encode_header(MAGIC_HEADER, &[4096, 1 << 20, 512, 1, 16, 8 << 20], 3);
        let (hd, _) = decode_header(&old).unwrap();
        assert_eq!((hd.journal, hd.nregion_id), (None, None));
        // A torn write of a full entry page: some sectors new, the rest of
        // the older version, either way round.
        let n = entries_per_page(16) as usize;
        let old_entries: Vec<(u64, u64)> = (0..n as u64).map(|i| (i + 1, 1)).collect();
        let new_entries: Vec<(u64, u64)> = (0..n as u64).map(|i| (i + 100, 2)).collect();
        let older = encode_entries(1, 1, 16, &old_entries);
        let newer = encode_entries(1, 2, 16, &new_entries);
        for cut in [512, 2048, 3584] {
            let mut torn = older.clone();
            torn[..cut].copy_from_slice(&newer[..cut]);
            assert_eq!(
                decode_entries(&torn, 1, 16, n).unwrap_err(),
                "checksum mismatch (torn or corrupt)"
            );
            let mut torn = newer.clone();
            torn[..cut].copy_from_slice(&older[..cut]);
            assert!(decode_entries(&torn, 1, 16, n).is_err());
        }
        // One flipped bit anywhere.
        for at in [0, 30, 100, 4095] {
            let mut bad = page.clone();
            bad[at] ^= 0x10;
            assert!(decode_header(&bad).is_err(), "byte {at}");
        }
        assert_eq!(
            decode_header(&vec![0u8; PAGE]).unwrap_err(),
            "never written"
        );
        // Entries: the right page only.
        let entries = vec![(0, 0), (42, 9), (7, 3)];
        let page = encode_entries(5, 2, 16, &entries);
        assert_eq!(decode_entries(&page, 5, 16, 3), Ok((entries, 2)));
        assert_eq!(
            decode_entries(&page, 6, 16, 3).unwrap_err(),
            "another page's copy"
        );
        assert!(decode_header(&page).is_err(), "an entry page is no header");
    }

    #[test]
    fn geometry_differences_name_each_field() {
        let a = geometry();
        let b = Geometry {
            block_bytes: 8192,
            sets: 2,
            ..a
        };
        let d = a.differences(&b);
        assert!(
            d.contains("block_bytes 4096 on the device, 8192 in the config"),
            "{d}"
        );
        assert!(d.contains("sets 1 on the device, 2 in the config"), "{d}");
        assert!(!d.contains("band_bytes"), "{d}");
    }
}
