//! The output queue: bytes to send, in order, gathered as `IoSlice`s for
//! `writev`.
//!
//! Read data handed over by the executor is queued as its own segment and
//! never copied; small things (reply headers, option replies) are coalesced
//! into shared segments so that many small replies cost few iovecs.

use std::collections::VecDeque;
use std::io::IoSlice;

/// Small writes are appended to the last segment while it stays below this,
/// so one `writev` carries many headers in one iovec.
const COALESCE_MAX_BYTES: usize = 64 * 1024;

/// Recycled coalescing buffers kept at most (about a queue depth's worth of
/// read headers).
const SPARES_MAX: usize = 64;

/// Initial capacity of a coalescing buffer: a few headers; it grows as needed.
const COALESCE_INITIAL_BYTES: usize = 512;

#[derive(Debug)]
struct Segment {
    bytes: Vec<u8>,
    /// Coalescing segment (ours, may be appended to and recycled), as opposed
    /// to a payload handed over by the executor.
    coalescing: bool,
}

#[derive(Debug, Default)]
pub(crate) struct OutputQueue {
    segments: VecDeque<Segment>,
    /// Bytes of the front segment already written.
    front_written_bytes: usize,
    /// Bytes queued and not yet written.
    pending_bytes: usize,
    /// Drained coalescing buffers kept for reuse: with read replies, every
    /// header starts a new coalescing segment (the data segment ends the
    /// previous one), so recycling saves an allocation per read.
    spares: Vec<Vec<u8>>,
}

impl OutputQueue {
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Queues a copy of small bytes (headers, option replies).
    pub(crate) fn push_copy(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let fits_back = matches!(
            self.segments.back(),
            Some(back) if back.coalescing && back.bytes.len() + bytes.len() <= COALESCE_MAX_BYTES
        );
        if !fits_back {
            if bytes.len() > COALESCE_MAX_BYTES {
                self.push_owned(bytes.to_vec());
                return;
            }
            let mut fresh = self.spares.pop().unwrap_or_default();
            debug_assert!(fresh.is_empty());
            fresh.reserve(bytes.len().max(COALESCE_INITIAL_BYTES));
            self.segments.push_back(Segment {
                bytes: fresh,
                coalescing: true,
            });
        }
        let back = self
            .segments
            .back_mut()
            .expect("a coalescing segment was just ensured");
        back.bytes.extend_from_slice(bytes);
        self.pending_bytes += bytes.len();
    }

    /// Queues an owned buffer without copying it.
    pub(crate) fn push_owned(&mut self, bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        self.pending_bytes += bytes.len();
        self.segments.push_back(Segment {
            bytes,
            coalescing: false,
        });
    }

    /// Appends one `IoSlice` per segment, in order, from the first unwritten byte.
    pub(crate) fn gather<'a>(&'a self, out: &mut Vec<IoSlice<'a>>) {
        for (i, segment) in self.segments.iter().enumerate() {
            let from = if i == 0 { self.front_written_bytes } else { 0 };
            debug_assert!(from < segment.bytes.len());
            out.push(IoSlice::new(&segment.bytes[from..]));
        }
    }

    /// `n` bytes from the front were written.
    pub(crate) fn consume(&mut self, n: usize) {
        assert!(
            n <= self.pending_bytes,
            "consume_output({n}) with only {} bytes pending",
            self.pending_bytes
        );
        self.pending_bytes -= n;
        let mut left = n;
        while left > 0 {
            let front = self
                .segments
                .front()
                .expect("pending bytes imply a segment");
            let unwritten = front.bytes.len() - self.front_written_bytes;
            if left < unwritten {
                self.front_written_bytes += left;
                break;
            }
            left -= unwritten;
            self.front_written_bytes = 0;
            let done = self.segments.pop_front().expect("front exists");
            if done.coalescing
                && done.bytes.capacity() <= 2 * COALESCE_MAX_BYTES
                && self.spares.len() < SPARES_MAX
            {
                let mut bytes = done.bytes;
                bytes.clear();
                self.spares.push(bytes);
            }
        }
    }

    /// Consistency of the counters with the segments (debug builds and tests).
    pub(crate) fn check_invariants(&self) {
        let total: usize = self.segments.iter().map(|s| s.bytes.len()).sum();
        assert_eq!(total - self.front_written_bytes, self.pending_bytes);
        assert!(self.segments.iter().all(|s| !s.bytes.is_empty()));
        assert!(self.spares.len() <= SPARES_MAX);
        assert!(self.spares.iter().all(|s| s.is_empty()));
        if let Some(front) = self.segments.front() {
            assert!(self.front_written_bytes < front.bytes.len());
        } else {
            assert_eq!(self.front_written_bytes, 0);
        }
    }
}
