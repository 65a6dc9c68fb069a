//! Host page-cache write-back, as the busy-rate QoS paper's host had it
//! (Linux 2.6.18, 2 GB of memory, a user-level benchmark writing through
//! the page cache): tenants' writes complete once copied into memory, and
//! the kernel writes them to the device later, on its own schedule and
//! not under the tenants' IOPS caps. Sans-IO: the owner offers writes
//! ([`Writeback::absorb`]), ticks it every `interval_s`
//! ([`Writeback::tick`]), reports flushed writes' completions
//! ([`Writeback::flushed`]) and asks what to write now
//! ([`Writeback::next_flushes`]).
//!
//! The model (docs/qos.md, "Write-back"), with 2.6.18's rules for one
//! dirty block device inode (the tenants write to one volume):
//! - a write is absorbed (completes at once) while the dirty bytes stay
//!   within `dirty_bytes`; past it the caller sends it through and the
//!   writer waits for the device (in place of `balance_dirty_pages`);
//! - *periodic write-back* (pdflush's `wb_kupdate`): every `interval_s`,
//!   once the volume has been dirty for `expire_s`, everything dirty then
//!   is written out (a whole inode's pages, oldest inode first: here the
//!   only one);
//! - *background write-back*: while the dirty bytes exceed
//!   `dirty_background_bytes`, write until they do not;
//! - writes go out in ascending offset order from where the last pass
//!   stopped (`write_cache_pages` over the inode's page index, cyclic), at
//!   most `depth` in the device at once (the request queue's congestion
//!   threshold, 113 of 2.6.18's 128 requests);
//! - a write to an offset already dirty replaces it (no bytes added if
//!   not larger).
//!
//! Left out: reads served from the page cache (the workloads read far
//! more data than the memory holds), merging adjacent writes into one
//! request, per-tenant accounting of dirty memory.

use std::collections::BTreeMap;

use serde::Deserialize;
use tierlab_core::{NS_PER_S, ParamError, TimeNs};

/// `[policy.writeback]` of a `busy-rate-qos` policy. Defaults: Linux
/// 2.6.18's ratios of the paper's 2 GB (`dirty_background_ratio` 10 %,
/// `dirty_ratio` 40 %), `dirty_expire_centisecs` 3000,
/// `dirty_writeback_centisecs` 500.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WritebackParams {
    /// Background write-back starts above this many dirty bytes.
    pub dirty_background_bytes: u64,
    /// Writes are not absorbed past this many dirty bytes.
    pub dirty_bytes: u64,
    /// Dirty data older than this is written by the periodic pass, s.
    pub expire_s: f64,
    /// The periodic pass runs this often, s.
    pub interval_s: f64,
    /// At most this many write-back writes in the device at once.
    pub depth: u32,
}

impl Default for WritebackParams {
    fn default() -> Self {
        let memory: u64 = 2 << 30;
        WritebackParams {
            dirty_background_bytes: memory / 10,
            dirty_bytes: memory * 4 / 10,
            expire_s: 30.0,
            interval_s: 5.0,
            depth: 113,
        }
    }
}

impl WritebackParams {
    /// Checks every value; the error names the key, the value and what is allowed.
    /// Keys are relative to the `writeback` table.
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.dirty_bytes == 0 {
            return Err(ParamError::new("dirty_bytes", 0, "at least 1"));
        }
        if self.dirty_background_bytes > self.dirty_bytes {
            return Err(ParamError::new(
                "dirty_background_bytes",
                self.dirty_background_bytes,
                format!("at most `dirty_bytes` ({})", self.dirty_bytes),
            ));
        }
        for (key, v) in [("expire_s", self.expire_s), ("interval_s", self.interval_s)] {
            if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
                return Err(ParamError::new(key, v, "(0, 86400] s"));
            }
        }
        if self.depth == 0 {
            return Err(ParamError::new("depth", 0, "at least 1"));
        }
        Ok(())
    }

    pub fn interval_ns(&self) -> TimeNs {
        ((self.interval_s * NS_PER_S as f64).round() as TimeNs).max(1)
    }
}

/// Counters since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WritebackStats {
    pub absorbed: u64,
    pub passed_through: u64,
    pub flushed: u64,
    pub periodic_passes: u64,
}

pub struct Writeback {
    background: u64,
    limit: u64,
    expire_ns: TimeNs,
    depth: u32,
    /// Dirty extents by offset: size.
    dirty: BTreeMap<u64, u32>,
    dirty_bytes: u64,
    /// When the volume last went from clean to dirty (or a pass ended
    /// with data left).
    dirty_since: Option<TimeNs>,
    /// Where the next write-back write starts looking.
    cursor: u64,
    /// Bytes the running periodic pass still has to write.
    pass_left: u64,
    in_flight: u32,
    stats: WritebackStats,
}

impl Writeback {
    pub fn new(params: &WritebackParams) -> Result<Writeback, ParamError> {
        params.validate()?;
        Ok(Writeback {
            background: params.dirty_background_bytes,
            limit: params.dirty_bytes,
            expire_ns: (params.expire_s * NS_PER_S as f64).round() as TimeNs,
            depth: params.depth,
            dirty: BTreeMap::new(),
            dirty_bytes: 0,
            dirty_since: None,
            cursor: 0,
            pass_left: 0,
            in_flight: 0,
            stats: WritebackStats::default(),
        })
    }

    pub fn stats(&self) -> WritebackStats {
        self.stats
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Whether anything is dirty or being written (the owner keeps ticking).
    pub fn busy(&self) -> bool {
        self.dirty_bytes > 0 || self.in_flight > 0
    }

    /// Offers a write; true: absorbed (complete it now), false: over the
    /// dirty limit, send it through.
    pub fn absorb(&mut self, now_ns: TimeNs, offset_bytes: u64, size_bytes: u32) -> bool {
        let old = self.dirty.get(&offset_bytes).copied().unwrap_or(0);
        let added = u64::from(size_bytes.saturating_sub(old));
        if self.dirty_bytes + added > self.limit {
            self.stats.passed_through += 1;
            return false;
        }
        if size_bytes > old {
            self.dirty.insert(offset_bytes, size_bytes);
        }
        self.dirty_bytes += added;
        if self.dirty_since.is_none() {
            self.dirty_since = Some(now_ns);
        }
        self.stats.absorbed += 1;
        true
    }

    /// The periodic wake-up: starts a pass over everything dirty once the
    /// volume has been dirty for `expire_s`.
    pub fn tick(&mut self, now_ns: TimeNs) {
        if self.pass_left == 0
            && self
                .dirty_since
                .is_some_and(|t| now_ns.saturating_sub(t) >= self.expire_ns)
        {
            self.pass_left = self.dirty_bytes;
            self.stats.periodic_passes += 1;
        }
    }

    /// A write-back write completed.
    pub fn flushed(&mut self) {
        assert!(self.in_flight > 0, "a write-back completion never sent");
        self.in_flight -= 1;
    }

    /// Write-back writes to send now, (offset, size), appended to `out`.
    pub fn next_flushes(&mut self, now_ns: TimeNs, out: &mut Vec<(u64, u32)>) {
        while self.in_flight < self.depth
            && self.dirty_bytes > 0
            && (self.pass_left > 0 || self.dirty_bytes > self.background)
        {
            let (&offset, &size) = self
                .dirty
                .range(self.cursor..)
                .next()
                .or_else(|| self.dirty.iter().next())
                .expect("dirty bytes > 0");
            self.dirty.remove(&offset);
            self.dirty_bytes -= u64::from(size);
            let in_pass = self.pass_left > 0;
            self.pass_left = self.pass_left.saturating_sub(u64::from(size));
            self.cursor = offset + u64::from(size);
            self.in_flight += 1;
            self.stats.flushed += 1;
            out.push((offset, size));
            if in_pass && self.pass_left == 0 {
                // The pass is over; what is dirty now ages from here.
                self.dirty_since = (self.dirty_bytes > 0).then_some(now_ns);
            }
        }
        if self.dirty_bytes == 0 {
            self.dirty_since = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: TimeNs = NS_PER_S;

    fn wb(background: u64, limit: u64, depth: u32) -> Writeback {
        Writeback::new(&WritebackParams {
            dirty_background_bytes: background,
            dirty_bytes: limit,
            expire_s: 30.0,
            interval_s: 5.0,
            depth,
        })
        .unwrap()
    }

    /// Three writes absorbed at 0, 10 and 40 s; the 5-s ticks start a pass
    /// at 30 s (dirty since 0) that writes the two then dirty in offset
    /// order, two at a time; the third ages from the pass's end.
    #[test]
    fn periodic_pass_writes_everything_dirty_in_offset_order() {
        let mut w = wb(1 << 20, 1 << 30, 2);
        let mut out = Vec::new();
        assert!(w.absorb(0, 8192, 4096));
        assert!(w.absorb(10 * S, 0, 4096));
        for t in [5, 10, 15, 20, 25] {
            w.tick(t * S);
            w.next_flushes(t * S, &mut out);
            assert!(out.is_empty(), "nothing before 30 s");
        }
        w.tick(30 * S);
        w.next_flushes(30 * S, &mut out);
        assert_eq!(out, vec![(0, 4096), (8192, 4096)]);
        assert_eq!((w.dirty_bytes(), w.in_flight()), (0, 2));
        w.flushed();
        w.flushed();
        out.clear();
        assert!(w.absorb(40 * S, 4096, 4096));
        w.tick(65 * S);
        w.next_flushes(65 * S, &mut out);
        assert!(out.is_empty(), "dirty since 40 s");
        w.tick(70 * S);
        w.next_flushes(70 * S, &mut out);
        assert_eq!(out, vec![(4096, 4096)]);
        assert_eq!(w.stats().periodic_passes, 2);
    }

    /// Above the background threshold writes go out at once, at most
    /// `depth` in flight, down to the threshold; past the limit a write is
    /// not absorbed; an overwrite adds nothing.
    #[test]
    fn background_and_limit() {
        let mut w = wb(8192, 16384, 1);
        let mut out = Vec::new();
        assert!(w.absorb(0, 0, 4096));
        assert!(w.absorb(0, 0, 4096), "an overwrite");
        assert_eq!(w.dirty_bytes(), 4096);
        assert!(w.absorb(0, 4096, 4096));
        assert!(w.absorb(0, 8192, 4096));
        assert!(w.absorb(0, 12288, 4096));
        assert!(!w.absorb(0, 16384, 4096), "over the limit");
        w.next_flushes(1, &mut out);
        assert_eq!(out, vec![(0, 4096)], "depth 1");
        w.flushed();
        w.next_flushes(2, &mut out);
        assert_eq!(out, vec![(0, 4096), (4096, 4096)]);
        w.flushed();
        w.next_flushes(3, &mut out);
        assert_eq!(out.len(), 2, "at the background threshold: stop");
        assert_eq!(w.dirty_bytes(), 8192);
        assert!(w.validate_ok());
    }

    /// Random writes, ticks and completions: the dirty bytes always equal
    /// the dirty extents' sum, at most `depth` in flight, every absorbed
    /// write's offset is written back after its last absorption (nothing
    /// lost), and ticking on with completions empties the cache.
    #[test]
    fn random_runs_lose_nothing_and_drain() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..200 {
            let depth = 1 + rnd(8) as u32;
            let mut w = wb(rnd(64) * 4096, 64 * 4096 + rnd(64) * 4096, depth);
            // offset -> absorbed since its last write-back
            let mut owed = std::collections::BTreeMap::new();
            let mut out = Vec::new();
            let mut now = 0;
            for _ in 0..300 {
                now += rnd(3 * S);
                match rnd(3) {
                    0 => {
                        let off = rnd(32) * 4096;
                        if w.absorb(now, off, 4096) {
                            owed.insert(off, true);
                        }
                    }
                    1 if w.in_flight() > 0 => w.flushed(),
                    _ => w.tick(now),
                }
                out.clear();
                w.next_flushes(now, &mut out);
                for (off, _) in &out {
                    owed.remove(off);
                }
                assert!(w.validate_ok() && w.in_flight() <= depth);
            }
            for _ in 0..10_000 {
                if !w.busy() {
                    break;
                }
                now += 5 * S;
                while w.in_flight() > 0 {
                    w.flushed();
                }
                w.tick(now);
                out.clear();
                w.next_flushes(now, &mut out);
                for (off, _) in &out {
                    owed.remove(off);
                }
            }
            while w.in_flight() > 0 {
                w.flushed();
            }
            assert!(!w.busy() && owed.is_empty(), "left: {owed:?}");
        }
    }

    impl Writeback {
        fn validate_ok(&self) -> bool {
            self.dirty.values().map(|&s| u64::from(s)).sum::<u64>() == self.dirty_bytes
        }
    }
}
