//! tierlab-cache: a page-cache policy library usable on its own (cache-only
//! hit-ratio studies, miss-ratio curves) and by the cache layers in
//! tierlab-policies. One eviction policy per file behind one trait, in the
//! spirit of libCacheSim (get / find / insert / evict / remove).
//!
//! Semantics match libCacheSim's for comparison: objects are unit-size
//! pages named by a `Key`; capacity is counted in pages; `access` is
//! libCacheSim's `get`: a lookup that, on a miss, inserts (evicting first
//! when full).

pub mod mrc;
pub mod policies;
pub mod sim;
pub mod size;
pub mod table;
pub mod workload;

/// A cached object: a page number (for block traces, `device << 48 | page`).
pub type Key = u64;

/// What one access did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Hit,
    /// Missed and inserted; `evicted` is the page that made room, if any.
    Miss {
        evicted: Option<Key>,
    },
}

impl Access {
    pub fn is_hit(self) -> bool {
        matches!(self, Access::Hit)
    }
}

/// An eviction policy over unit-size pages.
///
/// Contract (tests check it for every policy): `len() <= capacity()` after
/// every call; `access(k)` then `contains(k)` is true; a key reported as
/// evicted is no longer contained; the same sequence of calls gives the
/// same results (no hashing order or randomness leaks into decisions unless
/// seeded).
pub trait Eviction {
    fn name(&self) -> &'static str;
    /// Capacity in pages.
    fn capacity(&self) -> usize;
    /// Pages cached now.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Lookup; on a hit update the policy's state, on a miss insert.
    fn access(&mut self, key: Key) -> Access;
    /// Lookup without any state change.
    fn contains(&self, key: Key) -> bool;
    /// Inserts a page known to be absent (admission control decided to
    /// admit it); returns the page evicted to make room, if any.
    fn insert(&mut self, key: Key) -> Option<Key>;
    /// Drops a page (invalidation); false if it was not cached.
    fn remove(&mut self, key: Key) -> bool;
    /// Belady/MIN only: the request index at which `key` (the key about to
    /// be accessed) is next requested, `u64::MAX` for never. Other policies
    /// ignore it.
    fn set_next_access(&mut self, _next_request: u64) {}
    /// `access` on each key in order; `missed[i]` is set to whether
    /// `keys[i]` missed (`missed` is cleared first). Same results as the
    /// loop; a policy overrides it only to go faster (e.g. prefetching).
    fn access_batch(&mut self, keys: &[Key], missed: &mut Vec<bool>) {
        missed.clear();
        missed.extend(keys.iter().map(|&k| !self.access(k).is_hit()));
    }
}
