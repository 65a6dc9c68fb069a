//! Facebook flashcache (the set-associative write-back cache of
//! device-mapper, github.com/facebookarchive/flashcache) as a configuration
//! of the page cache in `cache.rs`: same data path and write-back
//! correctness rules, with flashcache's placement and cleaning.
//!
//! - Blocks of `block_size_bytes` (4 KiB) in sets of `associativity` (512)
//!   blocks. flashcache's `hash_block()` takes the disk block number in
//!   sectors, shifts out the block and set sizes and takes the rest modulo
//!   the number of sets: `set = (dbn / (block_sectors * assoc)) % num_sets`.
//!   In pages that is `set = (page / assoc) % num_sets`, so each 2 MiB
//!   stretch of the disk competes for one set. The capacity is rounded down
//!   to whole sets (flashcache does the same).
//! - Replacement inside a set: FIFO (flashcache's default, `reclaim_policy`
//!   0) or LRU (1). A miss on a full set replaces that set's victim even if
//!   other sets have room: that conflict behaviour is the point of the
//!   model.
//! - Write-back with per-set cleaning: when a set holds more than
//!   `dirty_thresh_pct` % dirty blocks, its oldest dirty blocks are cleaned
//!   until it is below the threshold, sorted by disk block so adjacent blocks
//!   go out as one merged write (flashcache sorts a set's dirty blocks
//!   before cleaning and issues them through kcopyd).
//! - Idle ("fallow") cleaning after `idle_flush_ms` without host IO.
//!
//! Not modelled: cache slots are allocated from a free list rather than at
//! the block's fixed position inside its set on the SSD (placement on the
//! cache device matters little to its latency model), and flashcache's
//! on-SSD metadata updates are not charged.

use std::collections::{HashMap, VecDeque};

use serde::Deserialize;
use tierlab_cache::{Access, Eviction, Key};
use tierlab_core::ParamError;

use crate::cache::{self, ByteCount, Cache, CacheParams, SetCleaning, WriteMode};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetReplacement {
    #[default]
    Fifo,
    Lru,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlashcacheParams {
    pub capacity_bytes: ByteCount,
    #[serde(default = "default_block")]
    pub block_size_bytes: ByteCount,
    #[serde(default = "default_assoc")]
    pub associativity: u64,
    #[serde(default)]
    pub replacement: SetReplacement,
    #[serde(default = "default_thresh")]
    pub dirty_thresh_pct: f64,
    /// Clean every dirty block after this long without host IO; 0 = never.
    #[serde(default)]
    pub idle_flush_ms: f64,
    /// Largest merged cleaning write.
    #[serde(default = "default_flush_max")]
    pub max_flush_bytes: ByteCount,
    /// Keep slot metadata on the cache device (inside `capacity_bytes`),
    /// as flashcache does: a FLUSH makes dirty blocks durable where they
    /// are, and a restart comes up warm (docs/crash-consistency.md).
    #[serde(default = "default_persistent")]
    pub persistent: bool,
    /// flashcache's `skip_seq_thresh_kb` in bytes (the sequential cutoff
    /// of `cache.rs`: a stream past it is not cached); 0 = off. On at
    /// 4 MiB by default here (flashcache's own default is off).
    #[serde(default = "crate::cache::params::default_cutoff")]
    pub sequential_bypass_bytes: ByteCount,
    /// Sequential streams tracked at once.
    #[serde(default = "crate::cache::params::default_streams")]
    pub sequential_streams: usize,
}

fn default_block() -> ByteCount {
    ByteCount(4096)
}
fn default_assoc() -> u64 {
    512
}
fn default_thresh() -> f64 {
    20.0
}
fn default_flush_max() -> ByteCount {
    ByteCount(1 << 20)
}
fn default_persistent() -> bool {
    true
}

impl FlashcacheParams {
    pub fn with_capacity(capacity_bytes: u64) -> FlashcacheParams {
        FlashcacheParams {
            capacity_bytes: ByteCount(capacity_bytes),
            block_size_bytes: default_block(),
            associativity: default_assoc(),
            replacement: SetReplacement::Fifo,
            dirty_thresh_pct: default_thresh(),
            idle_flush_ms: 0.0,
            max_flush_bytes: default_flush_max(),
            persistent: default_persistent(),
            sequential_bypass_bytes: cache::params::default_cutoff(),
            sequential_streams: cache::params::default_streams(),
        }
    }
}

/// Set-associative replacement as an `Eviction` policy.
pub struct SetAssoc {
    assoc: u64,
    num_sets: u64,
    lru: bool,
    /// Per set: blocks, the next victim at the front.
    sets: Vec<VecDeque<Key>>,
    len: usize,
    members: HashMap<Key, ()>,
}

impl SetAssoc {
    pub fn new(assoc: u64, num_sets: u64, replacement: SetReplacement) -> SetAssoc {
        SetAssoc {
            assoc,
            num_sets,
            lru: replacement == SetReplacement::Lru,
            sets: vec![VecDeque::new(); num_sets as usize],
            len: 0,
            members: HashMap::new(),
        }
    }

    fn set_of(&self, key: Key) -> usize {
        ((key / self.assoc) % self.num_sets) as usize
    }

    fn take(&mut self, set: usize, key: Key) -> bool {
        let q = &mut self.sets[set];
        match q.iter().position(|&k| k == key) {
            Some(i) => {
                q.remove(i);
                true
            }
            None => false,
        }
    }
}

impl Eviction for SetAssoc {
    fn name(&self) -> &'static str {
        if self.lru { "set-lru" } else { "set-fifo" }
    }

    fn capacity(&self) -> usize {
        (self.assoc * self.num_sets) as usize
    }

    fn len(&self) -> usize {
        self.len
    }

    fn access(&mut self, key: Key) -> Access {
        if self.members.contains_key(&key) {
            if self.lru {
                let s = self.set_of(key);
                self.take(s, key);
                self.sets[s].push_back(key);
            }
            Access::Hit
        } else {
            Access::Miss {
                evicted: self.insert(key),
            }
        }
    }

    fn contains(&self, key: Key) -> bool {
        self.members.contains_key(&key)
    }

    fn insert(&mut self, key: Key) -> Option<Key> {
        let s = self.set_of(key);
        let mut evicted = None;
        if self.sets[s].len() as u64 >= self.assoc {
            if let Some(v) = self.sets[s].pop_front() {
                self.members.remove(&v);
                self.len -= 1;
                evicted = Some(v);
            }
        }
        self.sets[s].push_back(key);
        self.members.insert(key, ());
        self.len += 1;
        evicted
    }

    fn remove(&mut self, key: Key) -> bool {
        if self.members.remove(&key).is_none() {
            return false;
        }
        let s = self.set_of(key);
        self.take(s, key);
        self.len -= 1;
        true
    }
}

/// Builds the flashcache policy (a `Cache` named "flashcache").
pub fn new(p: &FlashcacheParams) -> Result<Cache, ParamError> {
    let block = p.block_size_bytes.0;
    if !block.is_power_of_two() || !(1024..=1 << 20).contains(&block) {
        return Err(ParamError::new(
            "block_size_bytes",
            block,
            "a power of two from 1 KiB to 1 MiB",
        ));
    }
    if p.associativity == 0 || p.associativity > 1 << 20 {
        return Err(ParamError::new(
            "associativity",
            p.associativity,
            "1 ..= 2^20",
        ));
    }
    let set_bytes = block * p.associativity;
    // Persistent metadata is carved out of the capacity first.
    let num_sets = cache::slots_in(p.capacity_bytes.0, block, p.persistent) / p.associativity;
    if num_sets == 0 {
        let need = cache::capacity_bytes_for(p.associativity, block, p.persistent);
        return Err(ParamError::new(
            "capacity_bytes",
            p.capacity_bytes.0,
            format!(
                "at least one whole set ({} blocks of {block} bytes = {set_bytes} bytes{}): \
                 {need} bytes",
                p.associativity,
                if p.persistent {
                    ", and its persistent metadata"
                } else {
                    ""
                }
            ),
        ));
    }
    if !(p.dirty_thresh_pct.is_finite() && (0.0..=100.0).contains(&p.dirty_thresh_pct)) {
        return Err(ParamError::new(
            "dirty_thresh_pct",
            p.dirty_thresh_pct,
            "0 ..= 100",
        ));
    }
    let mut params = CacheParams::with_capacity(cache::capacity_bytes_for(
        num_sets * p.associativity,
        block,
        p.persistent,
    ));
    params.page_size_bytes = ByteCount(block);
    params.write_mode = WriteMode::WriteBack;
    // Cleaning is per set; no global watermarks.
    params.high_watermark = 1.0;
    params.low_watermark = 1.0;
    params.idle_flush_ms = p.idle_flush_ms;
    params.max_flush_bytes = p.max_flush_bytes;
    params.persistent = p.persistent;
    params.sequential_bypass_bytes = p.sequential_bypass_bytes;
    params.sequential_streams = p.sequential_streams;
    let evict = SetAssoc::new(p.associativity, num_sets, p.replacement);
    let mut cache = Cache::with_eviction(&params, Box::new(evict))?;
    cache.set_name("flashcache");
    let thresh_pages = (p.associativity as f64 * p.dirty_thresh_pct / 100.0).floor() as u64;
    cache.sets = Some(SetCleaning {
        assoc: p.associativity,
        num_sets,
        thresh_pages,
        order: vec![VecDeque::new(); num_sets as usize],
        dirty: vec![0; num_sets as usize],
    });
    Ok(cache)
}
