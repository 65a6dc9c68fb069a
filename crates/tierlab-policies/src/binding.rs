//! Binding persistent metadata to the devices it describes: a header
//! records the volume id of each device its state belongs to when it is
//! formatted, and the open compares them before it writes anything
//! (docs/crash-consistency.md, "Binding"). One implementation for HSWD's
//! PCache header, ATSMF's tiering table and the page cache's metadata.
//!
//! # Using it in a policy (the page cache, say)
//!
//! 1. Give the header two u64 fields for the backing device's id
//!    ([`ID_FIELDS`]). A header made before them holds zeros there: that
//!    reads as "none recorded" and opens as before (unbound).
//! 2. **Format** (a never-written area): `let id = binding::id_at_format(stores,
//!    BACKING)?;` and write `binding::to_fields(id)` into the header. This
//!    labels an unlabelled backing file (its xattr) on the way.
//! 3. **Open** (a header decoded): before any write — no resync, no
//!    journal replay, no header rewrite — call
//!
//!    ```ignore
//!    let b = binding::check(stores, &CACHE_BINDING, binding::from_fields([f[i], f[i + 1]]))?;
//!    ```
//!
//!    with a `const CACHE_BINDING: Bound = Bound { metadata_device: CACHE,
//!    metadata: "the page cache's metadata", owner: "cache", metadata_role:
//!    "cache device", device: BACKING, role: "backing device", bond:
//!    Bond::Data, advice: None }`. An `Err` is the `OpenError` to return
//!    as is (it names both devices, shows both ids, says what to do).
//! 4. Keep `b.id` and write `to_fields(b.id)` into every later header.
//!    When `b.record` is true the header on the device does not hold it
//!    yet (an old header): the page cache's open rewrites its header
//!    anyway (clean = 0, synced, before any IO changes a slot), so that
//!    write records it; HSWD and ATSMF write theirs once more at the end
//!    of the open. (Waiting for a later header write is safe with
//!    `Bond::Data` — a crash before it leaves the header unbound, as it
//!    was — but not with `Bond::Scratch`, whose adoption replaces an id.)
//!
//! A store that cannot tell (`Stores::volume_label` gives `None`: RAM, a
//! degraded array without a bitmap, an in-memory test store) is not
//! checked, and the recorded id is kept.
//!
//! Tests: `tierlab_core::testkit::LabelledStores` is `Vec<Vec<u8>>` stores
//! with an id per device (`replace_with_new` makes a device a new, empty
//! store whose id is made on first use); `hswd_recovery.rs` shows the
//! refusal checked with neither store changed. The end-to-end test for the
//! cache is written: `a_persistent_cache_over_another_backing_file_...` in
//! `crates/tierlab-cli/tests/serve_binding.rs`, `#[ignore]`d until wired.

use tierlab_core::policy::{OpenError, Stores};
use tierlab_core::volume::bind;
pub use tierlab_core::volume::{
    BindMismatch, Binding, Bond, VOLUME_ID_XATTR, VolumeId, VolumeLabel,
};

/// u64 fields an id takes in a header ([`to_fields`]).
pub const ID_FIELDS: usize = 2;

/// The id as a header's two u64 fields (`[0, 0]`: none).
pub fn to_fields(id: Option<VolumeId>) -> [u64; ID_FIELDS] {
    VolumeId::to_fields(id)
}

/// Back from a header's two u64 fields (`[0, 0]`, an old header's: none).
pub fn from_fields(fields: [u64; ID_FIELDS]) -> Option<VolumeId> {
    VolumeId::from_fields(fields)
}

/// One binding of a header, in the words its messages use.
#[derive(Clone, Copy, Debug)]
pub struct Bound<'a> {
    /// The device the header is on (the cache device, the PCache).
    pub metadata_device: usize,
    /// What the header is: "the page cache's metadata".
    pub metadata: &'a str,
    /// What owns it, after "this": "cache" ("the backing device this cache
    /// was made for").
    pub owner: &'a str,
    /// The role of `metadata_device`: "cache device".
    pub metadata_role: &'a str,
    /// The device the state belongs to (the backing device, the NRegion).
    pub device: usize,
    /// Its role: "backing device".
    pub role: &'a str,
    pub bond: Bond,
    /// What to do, replacing the default ("use the {role} this {owner} was
    /// made for, or give a new or zeroed {metadata_role} to start empty").
    pub advice: Option<&'a str>,
}

/// The id to record when a header is formatted: `device`'s, made and
/// stored on first use (None: the store cannot tell).
pub fn id_at_format(stores: &mut dyn Stores, device: usize) -> Result<Option<VolumeId>, OpenError> {
    Ok(stores.volume_label(device)?.map(|l| l.id))
}

/// Compares the id a header `recorded` with `b.device`'s now
/// (`tierlab_core::volume::bind` has the table). Call before the open
/// writes anything. `Err`: the header belongs to another device — the
/// message names both devices (`Stores::describe`), shows both ids and
/// says what to do.
pub fn check(
    stores: &mut dyn Stores,
    b: &Bound,
    recorded: Option<VolumeId>,
) -> Result<Binding, OpenError> {
    let label = stores.volume_label(b.device)?;
    bind(recorded, label, b.bond).map_err(|m| {
        OpenError::mismatch(mismatch_message(
            b,
            &stores.describe(b.metadata_device),
            &stores.describe(b.device),
            &m,
        ))
    })
}

/// The refusal's text (public so that a header kept outside a policy —
/// the RAID bitmap — words its refusal the same way).
pub fn mismatch_message(
    b: &Bound,
    metadata_device: &str,
    device: &str,
    m: &BindMismatch,
) -> String {
    let default_advice = format!(
        "use the {} this {} was made for, or give a new or zeroed {} to start empty",
        b.role, b.owner, b.metadata_role
    );
    let consequence = match b.bond {
        Bond::Data => format!(
            "what the {} holds of another volume is never written into this one",
            b.owner
        ),
        Bond::Scratch => format!(
            "the open would overwrite the {}, which belongs to another volume",
            b.role
        ),
    };
    let mut s = format!(
        "{} on the {} {metadata_device} belongs to another {}: it records volume id {}, and the \
         {} {device} is volume {} ({}). Refused before any data was written: {}; {consequence}",
        b.metadata,
        b.metadata_role,
        b.role,
        m.recorded,
        b.role,
        m.found.id,
        m.found.kind.as_str(),
        b.advice.unwrap_or(&default_advice),
    );
    if m.found.created_now {
        s.push_str(&format!(
            ". The {} had no tierlab volume id until now: a new store, or a copy made without its \
             extended attributes (plain `cp` drops them; `cp --preserve=xattr` keeps them). If it \
             is a copy of the volume this {} was made for, give it that id back — `setfattr -n \
             {VOLUME_ID_XATTR} -v {} FILE` — and open again",
            b.role, b.owner, m.recorded
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierlab_core::testkit::LabelledStores;

    const B: Bound = Bound {
        metadata_device: 0,
        metadata: "the page cache's metadata",
        owner: "cache",
        metadata_role: "cache device",
        device: 1,
        role: "backing device",
        bond: Bond::Data,
        advice: None,
    };

    #[test]
    fn a_mismatch_names_both_devices_both_ids_and_what_to_do() {
        let mut s = LabelledStores::new(
            vec![vec![0; 8], vec![0; 8]],
            &[Some(1), Some(0xb)],
            &["cache (file c.img)", "backing (file b.img)"],
        );
        let recorded = VolumeId::new(0xa);
        let e = check(&mut s, &B, recorded).unwrap_err().to_string();
        for want in [
            "the page cache's metadata on the cache device cache (file c.img) belongs to another \
             backing device",
            "records volume id 0000000000000000000000000000000a",
            "the backing device backing (file b.img) is volume 0000000000000000000000000000000b",
            "use the backing device this cache was made for, or give a new or zeroed cache \
             device to start empty",
            "never written into this one",
        ] {
            assert!(e.contains(want), "{want:?} not in: {e}");
        }
        assert!(!e.contains("setfattr"), "{e}");
        // A new backing store: refused too, with the way back for a copy.
        s.replace_with_new(1, 0xc);
        let e = check(&mut s, &B, recorded).unwrap_err().to_string();
        assert!(
            e.contains("setfattr -n user.tierlab.volume-id -v 0000000000000000000000000000000a"),
            "{e}"
        );
        // The recorded store: accepted.
        s.labels[1] = s.labels[1].map(|l| VolumeLabel {
            id: recorded.unwrap(),
            ..l
        });
        assert_eq!(
            check(&mut s, &B, recorded).unwrap(),
            Binding {
                id: recorded,
                record: false
            }
        );
    }
}
