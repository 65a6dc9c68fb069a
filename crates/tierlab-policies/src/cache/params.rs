//! `[policy]` parameters of the page cache.

use serde::Deserialize;
use serde::de::{self, Deserializer};

/// A byte count as an integer or with a unit ("64MiB"), as in the configs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByteCount(pub u64);

impl<'de> Deserialize<'de> for ByteCount {
    /// A visitor, not an untagged enum: a missing key keeps serde's
    /// "missing field `capacity_bytes`", and a wrong type says what a byte
    /// count is.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteCount, D::Error> {
        struct Visit;
        impl de::Visitor<'_> for Visit {
            type Value = ByteCount;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a byte count: an integer or a string like \"64MiB\"")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ByteCount, E> {
                Ok(ByteCount(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ByteCount, E> {
                u64::try_from(n)
                    .map(ByteCount)
                    .map_err(|_| E::custom(format!("{n} is not a byte count (negative)")))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ByteCount, E> {
                tierlab_trace::units::parse_size_bytes(s)
                    .map(ByteCount)
                    .map_err(E::custom)
            }
        }
        d.deserialize_any(Visit)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    #[default]
    WriteBack,
    WriteThrough,
    WriteAround,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Admission {
    #[default]
    Always,
    /// Admit a page on its `admission_hits`-th miss.
    NHit,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheParams {
    pub capacity_bytes: ByteCount,
    #[serde(default = "default_page")]
    pub page_size_bytes: ByteCount,
    /// A tierlab-cache eviction policy name.
    #[serde(default = "default_eviction")]
    pub eviction: String,
    #[serde(default)]
    pub write_mode: WriteMode,
    /// Dirty share of the capacity that starts background flushing.
    #[serde(default = "default_high")]
    pub high_watermark: f64,
    /// Dirty share at which background flushing stops.
    #[serde(default = "default_low")]
    pub low_watermark: f64,
    /// Flush every dirty page after this long without host IO; 0 = never.
    #[serde(default = "default_idle_ms")]
    pub idle_flush_ms: f64,
    #[serde(default)]
    pub admission: Admission,
    /// n for n-hit admission.
    #[serde(default = "default_hits")]
    pub admission_hits: u32,
    /// Pages remembered by the n-hit miss counter (default: the capacity in pages).
    #[serde(default)]
    pub admission_table_pages: Option<u64>,
    /// The sequential cutoff: an IO of a stream that has covered this
    /// many bytes (it included) is not cached (`crate::streams`); 0 = off.
    /// bcache's default, 4 MiB.
    #[serde(default = "default_cutoff")]
    pub sequential_bypass_bytes: ByteCount,
    /// Sequential streams tracked at once (bcache: the last 128 IOs).
    #[serde(default = "default_streams")]
    pub sequential_streams: usize,
    /// Largest merged flush write.
    #[serde(default = "default_flush_max")]
    pub max_flush_bytes: ByteCount,
    /// Keep slot metadata on the cache device (after the slots, inside
    /// `capacity_bytes`), so that a FLUSH makes dirty pages durable where
    /// they are instead of writing them back, and a restart comes up warm
    /// (docs/crash-consistency.md). On by default, as bcache, dm-cache and
    /// Open CAS keep theirs.
    #[serde(default = "default_persistent")]
    pub persistent: bool,
    /// Background flush batches in flight at once.
    #[serde(default = "default_flush_depth")]
    pub flush_iodepth: u32,
    /// Paced write-back (`cache/pacing.rs`): while host IO is active,
    /// watermark write-back runs at (dirty bytes above the low watermark)
    /// ÷ this many seconds per second (bcache's p term, 40), at least
    /// `writeback_rate_min_bytes` per second; 0 = never paced.
    #[serde(default = "default_rate_p_s")]
    pub writeback_rate_p_s: f64,
    #[serde(default = "default_rate_min")]
    pub writeback_rate_min_bytes: ByteCount,
    /// Host IO counts as active this long after the last one arrived.
    #[serde(default = "default_wb_idle_ms")]
    pub writeback_idle_ms: f64,
}

fn default_page() -> ByteCount {
    ByteCount(4096)
}
fn default_eviction() -> String {
    "lru".into()
}
fn default_high() -> f64 {
    0.5
}
fn default_low() -> f64 {
    0.25
}
fn default_idle_ms() -> f64 {
    1000.0
}
fn default_hits() -> u32 {
    2
}
fn default_flush_max() -> ByteCount {
    ByteCount(1 << 20)
}
fn default_flush_depth() -> u32 {
    4
}
fn default_persistent() -> bool {
    true
}
fn default_rate_p_s() -> f64 {
    40.0
}
fn default_rate_min() -> ByteCount {
    ByteCount(4 << 20)
}
fn default_wb_idle_ms() -> f64 {
    100.0
}
pub(crate) fn default_cutoff() -> ByteCount {
    ByteCount(4 << 20)
}
pub(crate) fn default_streams() -> usize {
    crate::streams::DEFAULT_STREAMS
}

impl CacheParams {
    /// Defaults for everything but the capacity.
    pub fn with_capacity(capacity_bytes: u64) -> CacheParams {
        CacheParams {
            capacity_bytes: ByteCount(capacity_bytes),
            page_size_bytes: default_page(),
            eviction: default_eviction(),
            write_mode: WriteMode::WriteBack,
            high_watermark: default_high(),
            low_watermark: default_low(),
            idle_flush_ms: default_idle_ms(),
            admission: Admission::Always,
            admission_hits: default_hits(),
            admission_table_pages: None,
            sequential_bypass_bytes: default_cutoff(),
            sequential_streams: default_streams(),
            max_flush_bytes: default_flush_max(),
            flush_iodepth: default_flush_depth(),
            writeback_rate_p_s: default_rate_p_s(),
            writeback_rate_min_bytes: default_rate_min(),
            writeback_idle_ms: default_wb_idle_ms(),
            persistent: default_persistent(),
        }
    }
}
