//! Sequential stream detection, after bcache's `sequential_cutoff`: the
//! policy remembers the extent [start, end) of the last `capacity`
//! streams; an IO that starts exactly where one ends, or ends exactly where
//! one starts, continues it (an IO that does both joins the two), any other
//! starts a new one (replacing the stream used least recently). Matching
//! both ends keeps a stream whole when its IOs arrive slightly out of order
//! — written through several connections (nbdfuse opens four) or a deep
//! queue — where bcache's end-only match would see many short streams;
//! matching exactly (not "near") keeps random IOs from piling up into
//! runs. Streams are per address, not per tenant or connection: two
//! interleaved sequential readers are two streams, and one tenant reading
//! two files at once is two streams too.
//!
//! A stream's *run* is the bytes it has covered so far, this IO included;
//! a caching policy bypasses IOs whose run has reached its cutoff (bcache:
//! `sequential_cutoff`, 4 MiB by default, over its 128 most recent IOs), so
//! a long sequential scan or copy does not wash the cache out and goes to
//! the backing device as the large IOs it already is.
//!
//! A stream also counts how many of its IOs came after a host FLUSH that
//! arrived since its previous one (the caller numbers its FLUSHes): a log
//! the host flushes as it goes — a database's write-ahead log, committed
//! and FLUSHed every few KiB — is sequential, but bypassing it would make
//! every FLUSH wait for the backing device. bcache keeps such writes
//! cached for the same reason (its `should_writeback` takes every
//! `REQ_SYNC` write, sequential or not).

use rustc_hash::FxHashMap as HashMap;

/// The streams a policy tracks at most unless told otherwise.
pub const DEFAULT_STREAMS: usize = 128;

#[derive(Clone, Copy, Debug)]
struct Stream {
    start: u64,
    end: u64,
    run: u64,
    last_use: u64,
    /// IOs, and of those the ones that came after a FLUSH that arrived
    /// since the stream's previous IO.
    ios: u64,
    flushed_ios: u64,
    /// The FLUSH count at its latest IO.
    flush_epoch: u64,
}

/// What `SeqStreams::observe` says of the IO's stream, this IO included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamView {
    pub run_bytes: u64,
    pub ios: u64,
    /// IOs that followed a FLUSH arriving since the stream's previous IO.
    pub flushed_ios: u64,
}

impl StreamView {
    /// Whether the host flushes this stream as it goes (at least one IO
    /// in four follows a FLUSH): a log, not a copy.
    pub fn flushed_as_it_goes(&self) -> bool {
        self.flushed_ios * 4 >= self.ios
    }
}

/// The most recent sequential streams (see the module docs).
#[derive(Clone, Debug)]
pub struct SeqStreams {
    capacity: usize,
    /// Live streams (`None`: a slot freed by a join).
    streams: Vec<Option<Stream>>,
    by_start: HashMap<u64, usize>,
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
            by_start: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            by_end: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            clock: 0,
        }
    }

    fn unlink(&mut self, i: usize) -> Stream {
        let s = self.streams[i].take().expect("a live stream");
        if self.by_start.get(&s.start) == Some(&i) {
            self.by_start.remove(&s.start);
        }
        if self.by_end.get(&s.end) == Some(&i) {
            self.by_end.remove(&s.end);
        }
        s
    }

    fn link(&mut self, i: usize, s: Stream) {
        // A stream already keyed at one of these offsets (two streams
        // touching the same point) loses that key: the newer one continues
        // there.
        self.by_start.insert(s.start, i);
        self.by_end.insert(s.end, i);
        self.streams[i] = Some(s);
    }

    /// A free index for a new stream: an unused one, a new one below
    /// `capacity`, else the least recently used stream's (forgotten).
    fn slot_for_new(&mut self) -> usize {
        if let Some(i) = self.streams.iter().position(|s| s.is_none()) {
            return i;
        }
        if self.streams.len() < self.capacity {
            self.streams.push(None);
            return self.streams.len() - 1;
        }
        // A linear scan: `capacity` is small, and this runs once per new
        // stream.
        let i = (0..self.streams.len())
            .min_by_key(|&i| self.streams[i].map_or(0, |s| s.last_use))
            .expect("capacity >= 1");
        self.unlink(i);
        i
    }

    /// Counts an IO of `size_bytes` at `offset_bytes`; returns the run of
    /// its stream, this IO included.
    pub fn observe(&mut self, offset_bytes: u64, size_bytes: u64) -> u64 {
        self.observe_flushed(offset_bytes, size_bytes, 0).run_bytes
    }

    /// As [`SeqStreams::observe`], with `flush_epoch` the number of host
    /// FLUSHes so far: also counts whether the stream is flushed as it goes.
    pub fn observe_flushed(
        &mut self,
        offset_bytes: u64,
        size_bytes: u64,
        flush_epoch: u64,
    ) -> StreamView {
        self.clock += 1;
        let end = offset_bytes.saturating_add(size_bytes);
        let before = self.by_end.get(&offset_bytes).copied();
        let after = self
            .by_start
            .get(&end)
            .copied()
            .filter(|&j| Some(j) != before);
        let s = match (before, after) {
            (Some(i), Some(j)) => {
                let (a, b) = (self.unlink(i), self.unlink(j));
                let flushed = u64::from(flush_epoch != a.flush_epoch.max(b.flush_epoch));
                let s = Stream {
                    start: a.start,
                    end: b.end,
                    run: a.run.saturating_add(size_bytes).saturating_add(b.run),
                    last_use: self.clock,
                    ios: a.ios + b.ios + 1,
                    flushed_ios: a.flushed_ios + b.flushed_ios + flushed,
                    flush_epoch,
                };
                self.link(i, s);
                s
            }
            (Some(i), None) | (None, Some(i)) => {
                let mut s = self.unlink(i);
                s.start = s.start.min(offset_bytes);
                s.end = s.end.max(end);
                s.run = s.run.saturating_add(size_bytes);
                s.last_use = self.clock;
                s.ios += 1;
                s.flushed_ios += u64::from(flush_epoch != s.flush_epoch);
                s.flush_epoch = flush_epoch;
                self.link(i, s);
                s
            }
            (None, None) => {
                let i = self.slot_for_new();
                let s = Stream {
                    start: offset_bytes,
                    end,
                    run: size_bytes,
                    last_use: self.clock,
                    ios: 1,
                    flushed_ios: 0,
                    flush_epoch,
                };
                self.link(i, s);
                s
            }
        };
        debug_assert!(self.len() <= self.capacity);
        debug_assert!(self.by_start.len() <= self.len() && self.by_end.len() <= self.len());
        debug_assert!(s.flushed_ios < s.ios.max(1));
        StreamView {
            run_bytes: s.run,
            ios: s.ios,
            flushed_ios: s.flushed_ios,
        }
    }

    /// Streams tracked now.
    pub fn len(&self) -> usize {
        self.streams.iter().filter(|s| s.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        // Near but not at an end is not sequential.
        assert_eq!(s.observe(16384 + 4096, 4096), 4096);
        assert_eq!(s.observe(8192, 4096), 4096, "inside a stream");
    }

    /// A stream whose IOs arrive out of order (several connections) is one
    /// stream: an IO ending where a stream starts continues it too, and one
    /// that fills the gap between two streams joins them.
    #[test]
    fn a_stream_arriving_out_of_order_is_one_stream() {
        let io = 128 * 1024;
        // Pairs swapped: 1, 0, 3, 2, 5, 4, ...
        let mut s = SeqStreams::new(4);
        let mut run = 0;
        for k in (0..32u64).map(|i| i ^ 1) {
            run = s.observe(k * io, io);
        }
        assert_eq!((run, s.len()), (32 * io, 1));
        // Gaps filled last: 0, 2, 4, 6, then 1, 3, 5.
        let mut s = SeqStreams::new(8);
        for k in [0u64, 2, 4, 6, 1, 3] {
            s.observe(k * io, io);
        }
        assert_eq!(s.observe(5 * io, io), 7 * io, "one stream of 7 IOs");
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

    /// A log flushed after every append is flushed as it goes; a copy with
    /// a FLUSH now and then is not.
    #[test]
    fn a_stream_flushed_as_it_goes_is_told_from_a_copy() {
        let mut s = SeqStreams::new(4);
        let mut v = s.observe_flushed(0, 8192, 0);
        for k in 1..100u64 {
            v = s.observe_flushed(k * 8192, 8192, k);
        }
        assert_eq!((v.ios, v.flushed_ios), (100, 99));
        assert!(v.flushed_as_it_goes());
        let base = 1 << 30;
        for k in 0..100u64 {
            v = s.observe_flushed(base + k * 8192, 8192, 100 + k / 10);
        }
        assert_eq!((v.ios, v.flushed_ios, v.run_bytes), (100, 9, 100 * 8192));
        assert!(!v.flushed_as_it_goes());
    }

    #[test]
    fn streams_stay_bounded() {
        let mut s = SeqStreams::new(DEFAULT_STREAMS);
        for i in 0..10_000u64 {
            s.observe(i * 7919 * 4096, 4096);
        }
        assert_eq!(s.len(), DEFAULT_STREAMS);
        assert!(s.by_end.len() <= DEFAULT_STREAMS && s.by_start.len() <= DEFAULT_STREAMS);
    }
}
