//! Device IO tags: each names the buffer its data comes from or goes to.

use super::*;

/// The buffer a device IO reads into or writes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// The host IO's memory; the id is the host IO id (its low 41 bits).
    Host(u64),
    /// A policy staging buffer.
    Staging(u64),
}

/// Tag layout: bit 63 = staging, bits 62..22 = buffer id, bits 21..0 = the
/// page index inside the buffer where the device IO's first page goes.
pub fn encode_tag(buffer: Buffer, page_in_buffer: u64) -> u64 {
    let (flag, id) = match buffer {
        Buffer::Host(id) => (0, id),
        Buffer::Staging(id) => (TAG_STAGING, id),
    };
    flag | (id & TAG_ID_MASK) << TAG_PAGE_BITS | (page_in_buffer & TAG_PAGE_MASK)
}

/// The inverse of [`encode_tag`]: (buffer, page index inside it).
pub fn decode_tag(tag: u64) -> (Buffer, u64) {
    let id = (tag >> TAG_PAGE_BITS) & TAG_ID_MASK;
    let page = tag & TAG_PAGE_MASK;
    if tag & TAG_STAGING != 0 {
        (Buffer::Staging(id), page)
    } else {
        (Buffer::Host(id), page)
    }
}
