//! Volume ids: which persistent store is which, so that metadata made for
//! one store is never applied to another (docs/crash-consistency.md,
//! "Binding").
//!
//! A persistent cache's metadata says "slot 7 holds page 4711 of the
//! backing device, newer than the backing device's copy". That sentence is
//! only true of *one* backing device. bcache writes a UUID into the cache
//! set and the backing device's superblocks and refuses a pair that does
//! not match; tierlab's stores carry no superblock of their own (the host
//! owns every byte of a backing file), so a store's identity lives beside
//! its bytes:
//!
//! - a file: 128 random bits in its extended attribute
//!   `user.tierlab.volume-id` ([`VOLUME_ID_XATTR`]), made on first use;
//!   where the file system keeps no user xattrs, a fingerprint of the file
//!   (device, inode, birth time);
//! - a block device: a fingerprint (its device number and size);
//! - a RAID: derived from its members' ids, in order;
//! - RAM: none (it holds nothing across a restart).
//!
//! A metadata header records the ids of the stores its state belongs to
//! when it is made, and [`bind`] compares them at open, before anything is
//! written. This module is the vocabulary; executors find the ids
//! (`policy::Stores::volume_label`), policies record and compare them.

use std::fmt;

/// The extended attribute that holds a file's volume id: 32 lowercase hex
/// digits (`getfattr -n user.tierlab.volume-id FILE` shows it; `setfattr
/// -n user.tierlab.volume-id -v ID FILE` gives a copy its id back).
pub const VOLUME_ID_XATTR: &str = "user.tierlab.volume-id";

/// 128 bits naming one persistent store; never zero (a header's all-zero
/// id field means "none recorded").
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeId(u128);

impl VolumeId {
    /// None for zero (no id).
    pub fn new(bits: u128) -> Option<VolumeId> {
        (bits != 0).then_some(VolumeId(bits))
    }

    pub fn bits(self) -> u128 {
        self.0
    }

    /// The id as two u64 fields of a metadata header, high half first;
    /// `None` is `[0, 0]` ("none recorded").
    pub fn to_fields(id: Option<VolumeId>) -> [u64; 2] {
        match id {
            Some(VolumeId(b)) => [(b >> 64) as u64, b as u64],
            None => [0, 0],
        }
    }

    /// Back from [`VolumeId::to_fields`]: `[0, 0]` (what a header made
    /// before ids were recorded holds there) is `None`.
    pub fn from_fields(fields: [u64; 2]) -> Option<VolumeId> {
        VolumeId::new(((fields[0] as u128) << 64) | fields[1] as u128)
    }

    /// An id that is a function of `parts` under `domain` (a RAID's, from
    /// its members'; a fingerprint, from a file's numbers). Two lanes of
    /// splitmix64-style mixing: not cryptographic, but a change of any
    /// byte changes both halves. **Frozen**: derived ids are recorded in
    /// headers, so changing this function unbinds every one of them.
    pub fn derive(domain: &str, parts: &[&[u8]]) -> VolumeId {
        fn mix(mut z: u64) -> u64 {
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        let mut a: u64 = 0x7469_6572_6c61_6231; // "tierlab1"
        let mut b: u64 = 0x766f_6c75_6d65_6964; // "volumeid"
        let mut feed = |byte: u8| {
            a = mix(a ^ byte as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
            b = mix(b.rotate_left(17) ^ (byte as u64) << 8).wrapping_add(a);
        };
        // Lengths first, so ("ab", "c") and ("a", "bc") differ.
        for x in (domain.len() as u64).to_le_bytes() {
            feed(x);
        }
        domain.bytes().for_each(&mut feed);
        for p in parts {
            for x in (p.len() as u64).to_le_bytes() {
                feed(x);
            }
            p.iter().copied().for_each(&mut feed);
        }
        let bits = ((mix(a ^ b.rotate_left(32)) as u128) << 64) | mix(b ^ a) as u128;
        VolumeId(bits.max(1))
    }

    /// Parses the xattr's value: 32 hex digits (dashes allowed, as in a
    /// UUID; surrounding whitespace and a trailing NUL ignored), or the 16
    /// raw bytes. None: not an id.
    pub fn parse(value: &[u8]) -> Option<VolumeId> {
        if let Ok(raw) = <[u8; 16]>::try_from(value) {
            return VolumeId::new(u128::from_be_bytes(raw));
        }
        let text = std::str::from_utf8(value).ok()?;
        let digits: String = text
            .trim_matches(|c: char| c.is_whitespace() || c == '\0')
            .chars()
            .filter(|&c| c != '-')
            .collect();
        if digits.len() != 32 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        VolumeId::new(u128::from_str_radix(&digits, 16).ok()?)
    }
}

/// 32 lowercase hex digits: what the xattr holds and messages show.
impl fmt::Display for VolumeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for VolumeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VolumeId({self})")
    }
}

/// Where a store's id comes from (it says how far the id can be trusted,
/// and what a user can do about a mismatch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelKind {
    /// Random bits in the file's `user.tierlab.volume-id` xattr: they stay
    /// with the file through renames and `cp --preserve=xattr`, and are
    /// lost by a plain `cp`.
    Xattr,
    /// The file system keeps no user xattrs: a fingerprint of the file
    /// (its device and inode numbers, and its birth time where statx gives
    /// one). A copy of the file is another volume; so is the same file
    /// once its device number changes, and an inode number reused by a new
    /// file without a birth time looks like the old file.
    FileFingerprint,
    /// A block device: its device number and size (a disk that comes back
    /// under another device number is another volume).
    BlockDevice,
    /// An array: derived from its members' ids, in member order.
    Array,
    /// An in-memory store of a test or the crash checker: fixed per store.
    Synthetic,
}

impl LabelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LabelKind::Xattr => "its user.tierlab.volume-id xattr",
            LabelKind::FileFingerprint => {
                "a fingerprint of the file (its file system keeps no user xattrs)"
            }
            LabelKind::BlockDevice => "a fingerprint of the block device (number and size)",
            LabelKind::Array => "derived from its members' ids",
            LabelKind::Synthetic => "fixed for the in-memory store",
        }
    }
}

/// A store's id as the store reports it (`Stores::volume_label`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeLabel {
    pub id: VolumeId,
    pub kind: LabelKind,
    /// The store had no id before this open asked: one was made and stored
    /// now. A new file — or a copy that lost its xattrs.
    pub created_now: bool,
}

/// What a metadata header's state is to the store it records: decides
/// what [`bind`] does with a store that carries another id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bond {
    /// The metadata describes bytes of that store which exist nowhere else
    /// or would be written into it at open (a cache's dirty pages, a
    /// staged band): any other store is refused, a new one included.
    Data,
    /// The store is scratch that the open fills from elsewhere (ATSMF's
    /// memory tier, copied from flash): a store that had no id until now
    /// (a new file) is adopted; one that is another volume is refused, so
    /// the open does not overwrite it.
    Scratch,
}

/// The outcome of a successful [`bind`]: what the header records from now
/// on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The id to write into the header from now on (`VolumeId::to_fields`):
    /// the store's id, or the recorded one while the store cannot tell.
    pub id: Option<VolumeId>,
    /// The header does not record `id` yet (made before ids were recorded,
    /// formatted over a store that could not tell, or a new scratch store
    /// adopted): the next header write records it.
    pub record: bool,
}

/// A store that is not the one a header records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindMismatch {
    pub recorded: VolumeId,
    pub found: VolumeLabel,
}

/// Compares the id a header `recorded` with the store's `label` now:
///
/// | recorded | store says | result |
/// |---|---|---|
/// | any | nothing (RAM, a store that cannot tell) | accepted, the recorded id kept |
/// | none (an old header) | an id | accepted, `record` the id |
/// | X | X | accepted |
/// | X | Y, new now, `Bond::Scratch` | accepted, `record` Y |
/// | X | Y otherwise | `Err`: refused |
pub fn bind(
    recorded: Option<VolumeId>,
    label: Option<VolumeLabel>,
    bond: Bond,
) -> Result<Binding, BindMismatch> {
    match (recorded, label) {
        (_, None) => Ok(Binding {
            id: recorded,
            record: false,
        }),
        (None, Some(l)) => Ok(Binding {
            id: Some(l.id),
            record: true,
        }),
        (Some(r), Some(l)) if r == l.id => Ok(Binding {
            id: Some(r),
            record: false,
        }),
        (Some(_), Some(l)) if bond == Bond::Scratch && l.created_now => Ok(Binding {
            id: Some(l.id),
            record: true,
        }),
        (Some(r), Some(l)) => Err(BindMismatch {
            recorded: r,
            found: l,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(bits: u128, created_now: bool) -> Option<VolumeLabel> {
        Some(VolumeLabel {
            id: VolumeId::new(bits).unwrap(),
            kind: LabelKind::Xattr,
            created_now,
        })
    }

    #[test]
    fn ids_round_trip_through_text_bytes_and_header_fields() {
        let id = VolumeId::new(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210).unwrap();
        let text = id.to_string();
        assert_eq!(text, "0123456789abcdeffedcba9876543210");
        assert_eq!(VolumeId::parse(text.as_bytes()), Some(id));
        assert_eq!(
            VolumeId::parse(b"01234567-89ab-cdef-fedc-ba9876543210\n"),
            Some(id)
        );
        assert_eq!(VolumeId::parse(&id.bits().to_be_bytes()), Some(id));
        assert_eq!(
            VolumeId::from_fields(VolumeId::to_fields(Some(id))),
            Some(id)
        );
        assert_eq!(VolumeId::to_fields(None), [0, 0]);
        assert_eq!(VolumeId::from_fields([0, 0]), None);
        for bad in [&b"xyz"[..], b"0123", &[0u8; 16], &[b'0'; 32]] {
            assert_eq!(VolumeId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn derived_ids_depend_on_every_part_and_its_place() {
        let d = |parts: &[&[u8]]| VolumeId::derive("t", parts);
        let ab = d(&[b"a", b"b"]);
        assert_eq!(ab, d(&[b"a", b"b"]), "deterministic");
        assert_ne!(ab, d(&[b"b", b"a"]), "order matters");
        assert_ne!(d(&[b"ab", b"c"]), d(&[b"a", b"bc"]), "boundaries matter");
        assert_ne!(ab, VolumeId::derive("u", &[b"a", b"b"]), "domain matters");
        // Frozen: ids derived today are recorded in headers.
        assert_eq!(ab.to_string(), "219d78d9a69f218a0aeb4b463c38b199");
    }

    #[test]
    fn bind_accepts_the_recorded_store_and_refuses_another() {
        let x = VolumeId::new(7);
        let ok = |id, record| Ok(Binding { id, record });
        assert_eq!(bind(x, label(7, false), Bond::Data), ok(x, false));
        assert_eq!(bind(x, None, Bond::Data), ok(x, false), "cannot tell");
        assert_eq!(
            bind(None, label(9, true), Bond::Data),
            ok(VolumeId::new(9), true)
        );
        let e = bind(x, label(9, false), Bond::Data).unwrap_err();
        assert_eq!(
            (e.recorded, e.found.id),
            (x.unwrap(), VolumeId::new(9).unwrap())
        );
        // A new store: refused where the metadata holds its data, adopted
        // where it is scratch; another volume is refused either way.
        assert!(bind(x, label(9, true), Bond::Data).is_err());
        assert_eq!(
            bind(x, label(9, true), Bond::Scratch),
            ok(VolumeId::new(9), true)
        );
        assert!(bind(x, label(9, false), Bond::Scratch).is_err());
    }
}
