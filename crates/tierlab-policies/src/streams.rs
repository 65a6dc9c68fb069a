//! Sequential stream detection, as bcache's `sequential_cutoff` does it:
//! the policy remembers where the last `capacity` streams ended; an IO that
//! starts exactly where one ended continues it, any other starts a new one
//! (replacing the stream used least recently). Streams are per address,
//! not per tenant or connection: two interleaved sequential readers are two
//! streams, and one tenant reading two files at once is two streams too.
//!
//! A stream's *run* is the bytes it has covered so far, this IO included;
//! a caching policy bypasses IOs whose run has reached its cutoff (bcache:
//! `sequential_cutoff`, 4 MiB by default, over its 128 most recent IOs), so
//! a long sequential scan or copy does not wash the cache out and goes to
//! the backing device as the large IOs it already is.

use std::collections::HashMap;

/// The streams a policy tracks at most unless told otherwise.
pub const DEFAULT_STREAMS: usize = 128;

/// The most recent sequential streams (see the module docs).
#[derive(Clone, Debug)]
pub struct SeqStreams {
    capacity: usize,
    /// Per stream: (end offset, run bytes, last use).
    streams: Vec<(u64, u64, u64)>,
    /// End offset → stream index.
    by_end: HashMap<u64, usize>,
    clock: u64,
}

impl SeqStreams {
    /// Tracks at most `capacity` (≥ 1) streams.
    pub fn new(capacity: usize) -> SeqStreams {
        assert!(capacity >= 1, "at least one stream");
        SeqStreams {
            capacity,
            streams: Vec::with_capacity(capacity),
            by_end: HashMap::with_capacity(capacity),
            clock: 0,
        }
    }

    /// Counts an IO of `size_bytes` at `offset_bytes`; returns the run of
    /// its stream, this IO included.
    pub fn observe(&mut self, offset_bytes: u64, size_bytes: u64) -> u64 {
        self.clock += 1;
        let end = offset_bytes.saturating_add(size_bytes);
        let i = match self.by_end.remove(&offset_bytes) {
            Some(i) => {
                self.streams[i].1 = self.streams[i].1.saturating_add(size_bytes);
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
                let old_end = self.streams[i].0;
                if self.by_end.get(&old_end) == Some(&i) {
                    self.by_end.remove(&old_end);
                }
                self.streams[i] = (end, size_bytes, 0);
                i
            }
        };
        let s = &mut self.streams[i];
        s.0 = end;
        s.2 = self.clock;
        let run = s.1;
        // Two streams ending at one offset: the newer one continues there.
        if let Some(other) = self.by_end.insert(end, i)
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
        let mut s = SeqStreams::new(4);
        assert_eq!(s.observe(0, 4096), 4096);
        assert_eq!(s.observe(4096, 8192), 12288);
        // Elsewhere: a new stream.
        assert_eq!(s.observe(1 << 20, 4096), 4096);
        // The first stream goes on where it ended.
        assert_eq!(s.observe(12288, 4096), 16384);
        // Going back is not sequential.
        assert_eq!(s.observe(0, 4096), 4096);
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
