//! Sequential stream detection, after bcache's `sequential_cutoff`: the
//! policy remembers the frontier (highest end) of the last `capacity`
//! streams; an IO that starts near a frontier continues that stream, any
//! other starts a new one (replacing the stream used least recently).
//! "Near" is within `REORDER_IOS` IOs of its own size, before or after the
//! frontier: a stream written through several connections or a deep queue
//! (nbdfuse's four, a loop device's) arrives slightly out of order, which
//! an exact match (bcache's) would see as many short streams. Streams are
//! per address, not per tenant or connection: two interleaved sequential
//! readers are two streams, and one tenant reading two files at once is
//! two streams too.
//!
//! A stream's *run* is the bytes it has covered so far, this IO included;
//! a caching policy bypasses IOs whose run has reached its cutoff (bcache:
//! `sequential_cutoff`, 4 MiB by default, over its 128 most recent IOs), so
//! a long sequential scan or copy does not wash the cache out and goes to
//! the backing device as the large IOs it already is.

use std::collections::BTreeMap;

/// The streams a policy tracks at most unless told otherwise.
pub const DEFAULT_STREAMS: usize = 128;

/// How far out of order (in IOs of the arriving IO's size) an IO may be
/// and still continue a stream.
pub const REORDER_IOS: u64 = 8;

/// The most recent sequential streams (see the module docs).
#[derive(Clone, Debug)]
pub struct SeqStreams {
    capacity: usize,
    /// Per stream: (frontier, run bytes, last use).
    streams: Vec<(u64, u64, u64)>,
    /// Frontier → stream index (one stream per frontier: a second stream
    /// reaching another's frontier merges into it).
    by_end: BTreeMap<u64, usize>,
    clock: u64,
}

impl SeqStreams {
    /// Tracks at most `capacity` (≥ 1) streams.
    pub fn new(capacity: usize) -> SeqStreams {
        assert!(capacity >= 1, "at least one stream");
        SeqStreams {
            capacity,
            streams: Vec::with_capacity(capacity),
            by_end: BTreeMap::new(),
            clock: 0,
        }
    }

    /// The stream whose frontier is nearest `offset_bytes`, within the
    /// reorder window of an IO of `size_bytes`.
    fn nearest(&self, offset_bytes: u64, size_bytes: u64) -> Option<usize> {
        let window = size_bytes.max(1).saturating_mul(REORDER_IOS);
        let lo = offset_bytes.saturating_sub(window);
        let hi = offset_bytes.saturating_add(window);
        self.by_end
            .range(lo..=hi)
            .min_by_key(|&(&end, _)| end.abs_diff(offset_bytes))
            .map(|(_, &i)| i)
    }

    /// Counts an IO of `size_bytes` at `offset_bytes`; returns the run of
    /// its stream, this IO included.
    pub fn observe(&mut self, offset_bytes: u64, size_bytes: u64) -> u64 {
        self.clock += 1;
        let end = offset_bytes.saturating_add(size_bytes);
        let i = match self.nearest(offset_bytes, size_bytes) {
            Some(i) => {
                let s = &mut self.streams[i];
                self.by_end.remove(&s.0);
                s.0 = s.0.max(end);
                s.1 = s.1.saturating_add(size_bytes);
                i
            }
            None if self.streams.len() < self.capacity => {
                self.streams.push((end, size_bytes, 0));
                self.streams.len() - 1
            }
            None => {
                // The least recently used stream makes room (a linear scan:
                // `capacity` is small, and this runs once per new stream).
                let (i, _) = self
                    .streams
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, s)| s.2)
                    .expect("capacity >= 1");
                if self.by_end.get(&self.streams[i].0) == Some(&i) {
                    self.by_end.remove(&self.streams[i].0);
                }
                self.streams[i] = (end, size_bytes, 0);
                i
            }
        };
        let s = &mut self.streams[i];
        s.2 = self.clock;
        let (frontier, run) = (s.0, s.1);
        // Another stream with this frontier: this one continues there.
        if let Some(other) = self.by_end.insert(frontier, i)
            && other != i
        {
            self.streams[other].0 = u64::MAX;
        }
        debug_assert!(self.by_end.len() <= self.streams.len());
        debug_assert!(self.streams.len() <= self.capacity);
        run
    }

    /// Streams tracked now.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_grows_only_where_its_stream_ended() {
        let base = 1 << 30;
        let mut s = SeqStreams::new(4);
        assert_eq!(s.observe(base, 4096), 4096);
        assert_eq!(s.observe(base + 4096, 8192), 12288);
        // Elsewhere: a new stream.
        assert_eq!(s.observe(base + (1 << 20), 4096), 4096);
        // The first stream goes on where it ended.
        assert_eq!(s.observe(base + 12288, 4096), 16384);
        // Far behind its frontier (more than 8 IOs of 4 KiB) is not
        // sequential.
        assert_eq!(s.observe(base + 16384 - 9 * 4096, 4096), 4096);
    }

    /// A stream whose IOs arrive a few out of order (several connections)
    /// is one stream: each IO within 8 IOs of its size of the frontier
    /// continues it. Random IOs far apart are not.
    #[test]
    fn a_stream_arriving_out_of_order_is_one_stream() {
        let mut s = SeqStreams::new(4);
        let io = 128 * 1024;
        // Pairs swapped: 1, 0, 3, 2, 5, 4, ...
        let order: Vec<u64> = (0..32u64).map(|i| i ^ 1).collect();
        let mut run = 0;
        for k in order {
            run = s.observe(k * io, io);
        }
        assert_eq!(run, 32 * io);
        assert_eq!(s.len(), 1);
        // 4 KiB IOs 1 MiB apart: each its own stream.
        let mut t = SeqStreams::new(4);
        for k in 0..10u64 {
            assert_eq!(t.observe(k << 20, 4096), 4096);
        }
    }

    /// Two interleaved sequential readers are two streams, each with its
    /// own run (a per-tenant detector would see neither as sequential).
    #[test]
    fn interleaved_streams_keep_their_runs() {
        let mut s = SeqStreams::new(2);
        let (mut a, mut b) = (0u64, 1u64 << 30);
        for i in 1..=10u64 {
            assert_eq!(s.observe(a, 65536), i * 65536);
            a += 65536;
            assert_eq!(s.observe(b, 65536), i * 65536);
            b += 65536;
        }
    }

    /// The least recently used stream is forgotten when a new one needs
    /// room; the others keep their runs.
    #[test]
    fn the_least_recently_used_stream_makes_room() {
        let mut s = SeqStreams::new(2);
        s.observe(0, 100); // stream A, ends at 100
        s.observe(1000, 100); // stream B, ends at 1100
        s.observe(100, 100); // A again (now most recent), ends at 200
        s.observe(5000, 100); // C replaces B
        assert_eq!(s.len(), 2);
        assert_eq!(s.observe(1100, 100), 100, "B was forgotten");
        // B's new stream took A's place (A was used before C).
        assert_eq!(s.observe(5100, 100), 200, "C kept its run");
        assert_eq!(s.observe(200, 100), 100, "A was forgotten");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn streams_stay_bounded() {
        let mut s = SeqStreams::new(DEFAULT_STREAMS);
        for i in 0..10_000u64 {
            s.observe(i * 7919 * 4096, 4096);
        }
        assert_eq!(s.len(), DEFAULT_STREAMS);
        assert!(s.by_end.len() <= DEFAULT_STREAMS);
    }
}
