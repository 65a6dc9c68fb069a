//! HSWD's metadata area on the PCache device: the on-disk format
//! (docs/crash-consistency.md has the same tables).
//!
//! The area is `pages` 4 KiB metadata pages — page 0 the volume header,
//! pages 1.. the per-block entries — each kept in **two copies** (copy `c`
//! of page `p` at byte `(2p + c) × 4096`). A page is rewritten into the copy
//! that does not hold its newest version, with a sequence number one
//! higher, so a torn or lost write leaves the previous version intact;
//! recovery takes, per page, the valid copy with the highest sequence.
//!
//! Every page starts with a 32-byte head, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic: `HSWH` (header) or `HSWE` (entries) |
//! | 4..6 | format version (1) |
//! | 6..8 | 0 |
//! | 8..16 | page number |
//! | 16..24 | sequence number |
//! | 24..28 | crc32c of the whole page with these four bytes zero |
//! | 28..32 | 0 |
//!
//! Header payload (from byte 32): geometry as six u64 — block bytes, band
//! bytes, data blocks, sets, entry bytes, NRegion bytes — then the RMW
//! journal: u64 1/0 (a band is staged in the RCache / none), u64 band, u64
//! staged length in bytes.
//!
//! Entry payload (from byte 32): one entry per data-area slot, `entry_bytes`
//! each (at least 16): u64 block number + 1 (0: the slot is free), u64 the
//! commit sequence that wrote it (when two slots claim one block after a
//! crash, the higher wins); the rest zero. Every cached block is dirty, so
//! no state field is needed.

pub const PAGE: usize = 4096;
const HEAD: usize = 32;
const MAGIC_HEADER: &[u8; 4] = b"HSWH";
const MAGIC_ENTRIES: &[u8; 4] = b"HSWE";
pub const VERSION: u16 = 1;
/// Sequence numbers (page and commit) at or above this are corrupt.
pub const MAX_SEQ: u64 = 1 << 62;
/// Smallest entry: block + commit sequence.
pub const MIN_ENTRY_BYTES: u64 = 16;

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
}

/// Per slot: (block number + 1, commit sequence); (0, 0) is a free slot.
pub type Entries = Vec<(u64, u64)>;

/// Entries per metadata page.
pub fn entries_per_page(entry_bytes: u64) -> u64 {
    (PAGE - HEAD) as u64 / entry_bytes
}

/// Entry pages for `blocks` slots.
pub fn entry_pages(blocks: u64, entry_bytes: u64) -> u64 {
    blocks.div_ceil(entries_per_page(entry_bytes))
}

/// Byte offset of copy `copy` of page `page`.
pub fn copy_offset(page: u64, copy: u8) -> u64 {
    (2 * page + copy as u64) * PAGE as u64
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn seal(page: &mut [u8], magic: &[u8; 4], page_no: u64, seq: u64) {
    page[0..4].copy_from_slice(magic);
    page[4..6].copy_from_slice(&VERSION.to_le_bytes());
    put_u64(page, 8, page_no);
    put_u64(page, 16, seq);
    page[24..28].fill(0);
    let crc = crc32c::crc32c(page);
    page[24..28].copy_from_slice(&crc.to_le_bytes());
}

/// A copy's sequence, or why it is not trusted.
fn check(page: &[u8], magic: &[u8; 4], page_no: u64) -> Result<u64, &'static str> {
    if page.iter().all(|&b| b == 0) {
        return Err("never written");
    }
    if &page[0..4] != magic {
        return Err("wrong magic");
    }
    if u16::from_le_bytes([page[4], page[5]]) != VERSION {
        return Err("unknown format version");
    }
    if u64_at(page, 8) != page_no {
        return Err("another page's copy");
    }
    let stored = u32::from_le_bytes(page[24..28].try_into().unwrap());
    let mut copy = page.to_vec();
    copy[24..28].fill(0);
    if crc32c::crc32c(&copy) != stored {
        return Err("checksum mismatch (torn or corrupt)");
    }
    let seq = u64_at(page, 16);
    // Sequences only grow by one per write: one this large is corrupt (and
    // would wrap).
    if seq >= MAX_SEQ {
        return Err("an impossible sequence number");
    }
    Ok(seq)
}

pub fn encode_header(h: &Header, seq: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAGE];
    for (i, v) in h.geometry.values().iter().enumerate() {
        put_u64(&mut p, HEAD + 8 * i, *v);
    }
    if let Some(j) = h.journal {
        put_u64(&mut p, HEAD + 48, 1);
        put_u64(&mut p, HEAD + 56, j.band);
        put_u64(&mut p, HEAD + 64, j.len_bytes);
    }
    seal(&mut p, MAGIC_HEADER, 0, seq);
    p
}

/// The header and its sequence, if this copy is valid.
pub fn decode_header(page: &[u8]) -> Result<(Header, u64), &'static str> {
    let seq = check(page, MAGIC_HEADER, 0)?;
    let v = |i: usize| u64_at(page, HEAD + 8 * i);
    let geometry = Geometry {
        block_bytes: v(0),
        band_bytes: v(1),
        blocks: v(2),
        sets: v(3),
        entry_bytes: v(4),
        nregion_bytes: v(5),
    };
    let journal = match v(6) {
        0 => None,
        1 => Some(Journal {
            band: v(7),
            len_bytes: v(8),
        }),
        _ => return Err("a journal flag that is neither 0 nor 1"),
    };
    Ok((Header { geometry, journal }, seq))
}

/// Entry page `page_no` (1..) holding `entries` (block + 1, commit seq)
/// for its slots.
pub fn encode_entries(page_no: u64, seq: u64, entry_bytes: u64, entries: &[(u64, u64)]) -> Vec<u8> {
    let mut p = vec![0u8; PAGE];
    for (i, &(block_plus_one, cseq)) in entries.iter().enumerate() {
        let at = HEAD + i * entry_bytes as usize;
        put_u64(&mut p, at, block_plus_one);
        put_u64(&mut p, at + 8, cseq);
    }
    seal(&mut p, MAGIC_ENTRIES, page_no, seq);
    p
}

/// The `n` entries of a valid copy, and its sequence.
pub fn decode_entries(
    page: &[u8],
    page_no: u64,
    entry_bytes: u64,
    n: usize,
) -> Result<(Entries, u64), &'static str> {
    let seq = check(page, MAGIC_ENTRIES, page_no)?;
    let entries = (0..n)
        .map(|i| {
            let at = HEAD + i * entry_bytes as usize;
            (u64_at(page, at), u64_at(page, at + 8))
        })
        .collect();
    Ok((entries, seq))
}

/// Of a page's two copies, the valid one with the highest sequence:
/// (copy, its result).
pub fn newest<T>(
    a: Result<(T, u64), &'static str>,
    b: Result<(T, u64), &'static str>,
) -> Option<(u8, T, u64)> {
    match (a, b) {
        (Ok((x, sa)), Ok((y, sb))) => Some(if sb > sa { (1, y, sb) } else { (0, x, sa) }),
        (Ok((x, s)), Err(_)) => Some((0, x, s)),
        (Err(_), Ok((y, s))) => Some((1, y, s)),
        (Err(_), Err(_)) => None,
    }
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
        };
        let page = encode_header(&h, 7);
        assert_eq!(decode_header(&page), Ok((h, 7)));
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
    fn the_newest_valid_copy_wins() {
        let ok = |s| Ok(((), s));
        let bad = || Err("torn");
        assert_eq!(newest(ok(3), ok(4)).map(|x| (x.0, x.2)), Some((1, 4)));
        assert_eq!(newest(ok(5), ok(4)).map(|x| (x.0, x.2)), Some((0, 5)));
        assert_eq!(newest(bad(), ok(4)).map(|x| (x.0, x.2)), Some((1, 4)));
        assert_eq!(newest(ok(2), bad()).map(|x| (x.0, x.2)), Some((0, 2)));
        assert!(newest::<()>(bad(), bad()).is_none());
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
