//! The input buffer: bytes received but not yet parsed.
//!
//! The connection parses eagerly, so after every public call this holds less
//! than one fixed-size item (a header, or one option's data). Write payloads
//! never stay here: they are moved (or received directly) into the request's
//! own `Vec`.

/// Received-but-unparsed bytes live in `storage[start..end]`; `storage[end..]`
/// is initialised spare space lent to `recv()` by [`InputBuffer::spare`].
#[derive(Debug, Default)]
pub(crate) struct InputBuffer {
    storage: Vec<u8>,
    start: usize,
    end: usize,
}

impl InputBuffer {
    /// Unparsed bytes.
    pub(crate) fn unparsed(&self) -> &[u8] {
        &self.storage[self.start..self.end]
    }

    pub(crate) fn unparsed_len(&self) -> usize {
        self.end - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Marks `n` unparsed bytes as parsed.
    pub(crate) fn consume(&mut self, n: usize) {
        assert!(
            n <= self.unparsed_len(),
            "consume {n} of {} unparsed bytes",
            self.unparsed_len()
        );
        self.start += n;
        if self.start == self.end {
            // Cheap reset so the spare space is contiguous again.
            self.start = 0;
            self.end = 0;
        }
    }

    /// Drops everything unparsed (the connection takes no more input).
    pub(crate) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Moves the unparsed bytes to the front so the spare space is maximal.
    fn compact(&mut self) {
        if self.start > 0 {
            self.storage.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Appends bytes received by copy.
    pub(crate) fn append(&mut self, bytes: &[u8]) {
        let spare = self.spare(bytes.len());
        spare[..bytes.len()].copy_from_slice(bytes);
        self.filled(bytes.len());
    }

    /// At least `min_bytes` of spare space after the unparsed bytes.
    pub(crate) fn spare(&mut self, min_bytes: usize) -> &mut [u8] {
        if self.storage.len() - self.end < min_bytes {
            self.compact();
            if self.storage.len() - self.end < min_bytes {
                self.storage.resize(self.end + min_bytes, 0);
            }
        }
        debug_assert!(self.storage.len() - self.end >= min_bytes);
        &mut self.storage[self.end..]
    }

    /// `n` bytes were written into the space [`InputBuffer::spare`] returned.
    pub(crate) fn filled(&mut self, n: usize) {
        assert!(
            n <= self.storage.len() - self.end,
            "filled({n}) beyond the {} spare bytes lent",
            self.storage.len() - self.end
        );
        self.end += n;
    }
}
