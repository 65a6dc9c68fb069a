//! Counters (`Policy::counters`; docs/cache-layer.md defines each).

/// Counters; pages unless named bytes or IOs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub host_ios: u64,
    /// Host IOs whose every device IO went to the cache device (tier 0).
    pub host_ios_cache_only: u64,
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    pub fills: u64,
    pub bypassed_pages: u64,
    /// Host IOs the sequential cutoff bypassed, and their bytes.
    pub bypassed_ios: u64,
    pub bypassed_bytes: u64,
    pub flush_ios: u64,
    pub flush_bytes: u64,
    pub dirty_bytes: u64,
    /// Host trims.
    pub trims: u64,
    /// Cached pages dropped by trims, and of those the dirty ones (whose
    /// write-back was skipped).
    pub trimmed_pages: u64,
    pub trimmed_dirty_pages: u64,
    /// Cached pages a trim covered but kept: a device IO wrote or flushed
    /// them when it completed, or a flush of the dirty page raced it.
    pub trim_kept_pages: u64,
    /// Flushes of a page that raced a trim of it (issued or in flight while
    /// the backing trim was).
    pub trim_raced_flushes: u64,
    /// When `drain` was called: dirty pages, and of those the ones chosen
    /// for eviction and waiting for their write-back.
    pub drain_dirty_pages: u64,
    pub drain_evicting_pages: u64,
    /// Host FLUSHes that waited for dirty pages to be written back (the
    /// others found nothing dirty, or the cache is persistent).
    pub flush_waits: u64,
    /// Persistent mode: host FLUSHes that waited for a metadata commit (the
    /// others found nothing a recovery sees changed).
    pub flush_commit_waits: u64,
    /// Device IOs that failed and the cache survived (`on_device_error`),
    /// and of those the cache reads of clean pages read again from the
    /// backing device.
    pub device_errors: u64,
    pub reads_retried_from_backing: u64,
    /// Page write-backs that failed (their pages stayed dirty), host
    /// FLUSHes failed because of them, and pages `drain` gave up on after
    /// its retry failed too.
    pub write_backs_failed: u64,
    pub flushes_failed: u64,
    pub drain_abandoned_pages: u64,
    /// Host writes into the cache whose slot write failed.
    pub slot_writes_failed: u64,
}

impl CacheStats {
    /// Host IOs served entirely by the cache device / all host IOs.
    pub fn memory_access_ratio(&self) -> f64 {
        if self.host_ios == 0 {
            0.0
        } else {
            self.host_ios_cache_only as f64 / self.host_ios as f64
        }
    }
}

/// The names of the counters this policy reports (`Policy::counters`; the
/// docs define each): reports and experiments look values up by these
/// constants, so a renamed counter is a compile error, not a silent "-".
pub mod counter {
    pub const HOST_IOS: &str = "host_ios";
    pub const HOST_IOS_CACHE_ONLY: &str = "host_ios_cache_only";
    pub const MEMORY_ACCESS_RATIO: &str = "memory_access_ratio";
    pub const READ_HITS: &str = "read_hits";
    pub const READ_MISSES: &str = "read_misses";
    pub const WRITE_HITS: &str = "write_hits";
    pub const WRITE_MISSES: &str = "write_misses";
    pub const FILLS: &str = "fills";
    pub const BYPASSED_PAGES: &str = "bypassed_pages";
    pub const BYPASSED_IOS: &str = "bypassed_ios";
    pub const BYPASSED_BYTES: &str = "bypassed_bytes";
    pub const FLUSH_IOS: &str = "flush_ios";
    pub const FLUSH_BYTES: &str = "flush_bytes";
    pub const DIRTY_BYTES: &str = "dirty_bytes";
    pub const RESIDENT_BYTES: &str = "resident_bytes";
    pub const TRIMS: &str = "trims";
    pub const TRIMMED_PAGES: &str = "trimmed_pages";
    pub const TRIMMED_DIRTY_PAGES: &str = "trimmed_dirty_pages";
    pub const TRIM_KEPT_PAGES: &str = "trim_kept_pages";
    pub const TRIM_RACED_FLUSHES: &str = "trim_raced_flushes";
    pub const DRAIN_DIRTY_PAGES: &str = "drain_dirty_pages";
    pub const DRAIN_EVICTING_PAGES: &str = "drain_evicting_pages";
    pub const FLUSH_WAITS: &str = "flush_waits";
    pub const FLUSH_COMMIT_WAITS: &str = "flush_commit_waits";
    pub const WRITEBACK_RATE_WAITS: &str = "writeback_rate_waits";
    pub const DEVICE_ERRORS: &str = "device_errors";
    pub const READS_RETRIED_FROM_BACKING: &str = "reads_retried_from_backing";
    pub const WRITE_BACKS_FAILED: &str = "write_backs_failed";
    pub const FLUSHES_FAILED: &str = "flushes_failed";
    pub const DRAIN_ABANDONED_PAGES: &str = "drain_abandoned_pages";
    pub const SLOT_WRITES_FAILED: &str = "slot_writes_failed";
    pub const METADATA_COMMITS: &str = "metadata_commits";
    pub const METADATA_WRITES: &str = "metadata_writes";
    pub const METADATA_FORMATTED: &str = "metadata_formatted";
    pub const RECOVERED_PAGES: &str = "recovered_pages";
    pub const RECOVERED_PAGES_RESYNCED: &str = "recovered_pages_resynced";
    pub const OPENED_AFTER_CLEAN_STOP: &str = "opened_after_clean_stop";
    pub const RECOVERED_PAGES_DROPPED: &str = "recovered_pages_dropped";
    pub const CRASH_DROPPED_CLEAN_PAGES: &str = "crash_dropped_clean_pages";
    pub const MISSES_UNCACHED_WAITING_FOR_COMMIT: &str = "misses_uncached_waiting_for_commit";

    /// Every name above, in the order `counters()` reports them.
    pub const ALL: &[&str] = &[
        HOST_IOS,
        HOST_IOS_CACHE_ONLY,
        MEMORY_ACCESS_RATIO,
        READ_HITS,
        READ_MISSES,
        WRITE_HITS,
        WRITE_MISSES,
        FILLS,
        BYPASSED_PAGES,
        BYPASSED_IOS,
        BYPASSED_BYTES,
        FLUSH_IOS,
        FLUSH_BYTES,
        DIRTY_BYTES,
        RESIDENT_BYTES,
        TRIMS,
        TRIMMED_PAGES,
        TRIMMED_DIRTY_PAGES,
        TRIM_KEPT_PAGES,
        TRIM_RACED_FLUSHES,
        DRAIN_DIRTY_PAGES,
        DRAIN_EVICTING_PAGES,
        FLUSH_WAITS,
        FLUSH_COMMIT_WAITS,
        WRITEBACK_RATE_WAITS,
        DEVICE_ERRORS,
        READS_RETRIED_FROM_BACKING,
        WRITE_BACKS_FAILED,
        FLUSHES_FAILED,
        DRAIN_ABANDONED_PAGES,
        SLOT_WRITES_FAILED,
        METADATA_COMMITS,
        METADATA_WRITES,
        METADATA_FORMATTED,
        RECOVERED_PAGES,
        RECOVERED_PAGES_RESYNCED,
        OPENED_AFTER_CLEAN_STOP,
        RECOVERED_PAGES_DROPPED,
        CRASH_DROPPED_CLEAN_PAGES,
        MISSES_UNCACHED_WAITING_FOR_COMMIT,
    ];
}
