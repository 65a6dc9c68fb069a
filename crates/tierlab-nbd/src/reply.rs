//! Replies to requests: simple replies unless structured replies were
//! negotiated, then structured chunks where the spec requires or prefers them.
//!
//! Choices (the spec allows either where not stated):
//! - Success of WRITE, FLUSH, TRIM, WRITE_ZEROES: a 16-byte simple reply,
//!   structured or not (allowed for replies without payload, and the
//!   cheapest; libnbd, qemu and the kernel all accept it).
//! - Errors with structured replies: an `NBD_REPLY_TYPE_ERROR` chunk (the spec
//!   "SHOULD prefer" it, and it carries a message); without: a simple reply.
//! - READ with structured replies: one `OFFSET_DATA` chunk flagged DONE.
//! - BLOCK_STATUS: one chunk per negotiated context, DONE on the last.

use crate::EXTENTS_PER_CHUNK_MAX;
use crate::connection::{Closing, Connection};
use crate::event::{Errno, Extent};
use crate::handshake::wire_len;
use crate::transmission::InFlight;
use crate::wire::{
    CHUNK_HEADER_BYTES, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, REPLY_TYPE_ERROR,
    REPLY_TYPE_NONE, REPLY_TYPE_OFFSET_DATA, SIMPLE_REPLY_BYTES, SIMPLE_REPLY_MAGIC,
    STRING_MAX_BYTES, STRUCTURED_REPLY_MAGIC,
};

fn simple_reply(error: u32, handle: u64) -> [u8; SIMPLE_REPLY_BYTES] {
    let mut header = [0u8; SIMPLE_REPLY_BYTES];
    header[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    header[4..8].copy_from_slice(&error.to_be_bytes());
    header[8..16].copy_from_slice(&handle.to_be_bytes());
    header
}

fn chunk_header(
    flags: u16,
    reply_type: u16,
    handle: u64,
    len_bytes: u32,
) -> [u8; CHUNK_HEADER_BYTES] {
    let mut header = [0u8; CHUNK_HEADER_BYTES];
    header[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    header[4..6].copy_from_slice(&flags.to_be_bytes());
    header[6..8].copy_from_slice(&reply_type.to_be_bytes());
    header[8..16].copy_from_slice(&handle.to_be_bytes());
    header[16..20].copy_from_slice(&len_bytes.to_be_bytes());
    header
}

/// Cuts a message to `len_bytes_max` at a character boundary and drops NULs
/// (protocol strings must not contain them).
fn protocol_string(message: &str, len_bytes_max: usize) -> std::borrow::Cow<'_, str> {
    let mut end = message.len().min(len_bytes_max);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = &message[..end];
    if cut.contains('\0') {
        cut.replace('\0', "").into()
    } else {
        cut.into()
    }
}

/// Makes the executor's extents for one context valid for the request:
/// zero-length extents dropped, at most `extents_max`, the first N-1 summing
/// to less than the request, the last not past `end_bytes_max` (the request's
/// end with REQ_ONE, else the export's end: the spec lets the final extent
/// run past the request), and at least one extent.
fn normalise_extents(
    extents: &[Extent],
    offset_bytes: u64,
    len_bytes: u32,
    end_bytes_max: u64,
    extents_max: usize,
) -> Vec<Extent> {
    debug_assert!(
        len_bytes > 0,
        "zero-length block status is refused before the executor"
    );
    debug_assert!(offset_bytes + u64::from(len_bytes) <= end_bytes_max);
    debug_assert!(extents_max >= 1);
    let request_end_bytes = offset_bytes + u64::from(len_bytes);
    let mut out = Vec::with_capacity(extents.len().min(extents_max));
    let mut covered_end_bytes = offset_bytes;
    for extent in extents {
        if out.len() == extents_max || covered_end_bytes >= request_end_bytes {
            break;
        }
        if extent.len_bytes == 0 {
            debug_assert!(
                false,
                "block status extent of length 0 (the spec requires non-zero)"
            );
            continue;
        }
        let room_bytes = end_bytes_max - covered_end_bytes;
        debug_assert!(room_bytes > 0);
        let len = u64::from(extent.len_bytes).min(room_bytes);
        out.push(Extent {
            len_bytes: len as u32,
            flags: extent.flags,
        });
        covered_end_bytes += len;
    }
    if out.is_empty() {
        debug_assert!(false, "block status reply without extents");
        // Status 0 is always a safe answer ("the server MAY always safely report a status of 0").
        out.push(Extent {
            len_bytes,
            flags: 0,
        });
    }
    out
}

impl Connection {
    /// WRITE / FLUSH / TRIM / WRITE_ZEROES succeeded.
    pub fn reply_ok(&mut self, handle: u64) {
        let Some(in_flight) = self.take_in_flight(handle) else {
            return;
        };
        match in_flight {
            InFlight::NoData { .. } => self.send_ok(handle),
            InFlight::Read { .. } | InFlight::BlockStatus { .. } => {
                debug_assert!(false, "reply_ok to {in_flight:?} (handle {handle:#x})");
                self.send_error(handle, Errno::Io, "internal error: the server gave no data");
            }
        }
    }

    /// A READ succeeded; `data.len()` must equal the request's length. The
    /// buffer is queued for output as is, never copied.
    pub fn reply_read(&mut self, handle: u64, data: Vec<u8>) {
        let Some(in_flight) = self.take_in_flight(handle) else {
            return;
        };
        let InFlight::Read {
            offset_bytes,
            len_bytes,
        } = in_flight
        else {
            debug_assert!(false, "reply_read to {in_flight:?} (handle {handle:#x})");
            self.send_error(
                handle,
                Errno::Io,
                "internal error: data for a command without data",
            );
            return;
        };
        if data.len() != len_bytes as usize {
            debug_assert!(
                false,
                "reply_read with {} bytes for a {len_bytes}-byte read",
                data.len()
            );
            // Sending a different length would desynchronise a simple-reply client.
            self.send_error(handle, Errno::Io, "internal error: short read");
            return;
        }
        self.send_read(handle, offset_bytes, data);
    }

    /// A request failed.
    pub fn reply_error(&mut self, handle: u64, error: Errno) {
        self.reply_error_message(handle, error, "");
    }

    /// A request failed, with a message for the human at the client (sent
    /// only with structured replies; cut to 4096 bytes and to the export's
    /// maximum payload).
    pub fn reply_error_message(&mut self, handle: u64, error: Errno, message: &str) {
        let Some(_) = self.take_in_flight(handle) else {
            return;
        };
        self.send_error(handle, error, message);
    }

    /// A BLOCK_STATUS succeeded: `(context id, extents)` for each negotiated
    /// context (ids from `Event::Ready`). Extents are made valid on the way
    /// out: with REQ_ONE only the first is sent, clamped to the request;
    /// without, extents after the one reaching the request's end are dropped
    /// and the last is clamped to the export's end.
    pub fn reply_block_status(&mut self, handle: u64, contexts: &[(u32, &[Extent])]) {
        let Some(in_flight) = self.take_in_flight(handle) else {
            return;
        };
        let InFlight::BlockStatus {
            offset_bytes,
            len_bytes,
            req_one,
        } = in_flight
        else {
            debug_assert!(
                false,
                "reply_block_status to {in_flight:?} (handle {handle:#x})"
            );
            self.send_error(
                handle,
                Errno::Io,
                "internal error: block status for another command",
            );
            return;
        };
        let Some(transmission) = &self.transmission else {
            unreachable!("requests in flight imply transmission");
        };
        let export = &self.exports[transmission.export];
        let context_ids = transmission.context_ids.clone();
        debug_assert!(
            contexts.iter().all(|(id, _)| context_ids.contains(id)),
            "block status for a context that was not negotiated: {:?} vs {context_ids:?}",
            contexts.iter().map(|(id, _)| id).collect::<Vec<_>>()
        );
        debug_assert!(
            contexts
                .iter()
                .enumerate()
                .all(|(i, (id, _))| !contexts[..i].iter().any(|(other, _)| other == id)),
            "block status lists a context twice"
        );
        let (end_bytes_max, extents_max) = if req_one {
            (offset_bytes + u64::from(len_bytes), 1)
        } else {
            // "A server MUST NOT send a chunk where any variable-length portion
            // of the chunk is larger than any advertised maximum payload size".
            let by_payload = (export.block_max_bytes as usize / 8).max(1);
            (export.size_bytes, by_payload.min(EXTENTS_PER_CHUNK_MAX))
        };
        for (i, id) in context_ids.iter().enumerate() {
            let given = contexts
                .iter()
                .find(|(given_id, _)| given_id == id)
                .map(|(_, e)| *e);
            debug_assert!(given.is_some(), "no extents for negotiated context {id}");
            let extents = normalise_extents(
                given.unwrap_or(&[]),
                offset_bytes,
                len_bytes,
                end_bytes_max,
                extents_max,
            );
            let payload_bytes = 4 + 8 * extents.len();
            let flags = if i + 1 == context_ids.len() {
                REPLY_FLAG_DONE
            } else {
                0
            };
            let mut chunk = Vec::with_capacity(CHUNK_HEADER_BYTES + payload_bytes);
            chunk.extend_from_slice(&chunk_header(
                flags,
                REPLY_TYPE_BLOCK_STATUS,
                handle,
                wire_len(payload_bytes),
            ));
            chunk.extend_from_slice(&id.to_be_bytes());
            for extent in &extents {
                chunk.extend_from_slice(&extent.len_bytes.to_be_bytes());
                chunk.extend_from_slice(&extent.flags.to_be_bytes());
            }
            if chunk.len() <= 4096 {
                self.output.push_copy(&chunk);
            } else {
                self.output.push_owned(chunk);
            }
        }
    }

    /// Removes a request from the in-flight table for its reply. `None` when
    /// nothing is to be sent: an unknown handle (a caller bug) or a connection
    /// dropped for a protocol violation.
    fn take_in_flight(&mut self, handle: u64) -> Option<InFlight> {
        let Some(in_flight) = self.in_flight.remove(&handle) else {
            debug_assert!(false, "reply to handle {handle:#x}, which is not in flight");
            return None;
        };
        if self.closing == Some(Closing::Hard) {
            return None;
        }
        debug_assert!(
            self.structured_replies() || !matches!(in_flight, InFlight::BlockStatus { .. }),
            "block status needs a metadata context, which needs structured replies"
        );
        Some(in_flight)
    }

    fn structured_replies(&self) -> bool {
        self.transmission
            .as_ref()
            .is_some_and(|t| t.structured_replies)
    }

    /// Success without data: always a simple reply (see the module comment).
    pub(crate) fn send_ok(&mut self, handle: u64) {
        self.output.push_copy(&simple_reply(0, handle));
    }

    /// An error reply: structured (with the message) when negotiated, else simple.
    pub(crate) fn send_error(&mut self, handle: u64, error: Errno, message: &str) {
        if !self.structured_replies() {
            self.output.push_copy(&simple_reply(error.value(), handle));
            return;
        }
        // Strings are at most 4096 bytes, and no variable-length part of a
        // chunk may exceed the advertised maximum payload.
        let block_max_bytes = self.transmission.as_ref().map_or(STRING_MAX_BYTES, |t| {
            self.exports[t.export].block_max_bytes as usize
        });
        let message = protocol_string(message, STRING_MAX_BYTES.min(block_max_bytes));
        let message_len = message.len();
        debug_assert!(message_len <= STRING_MAX_BYTES);
        let mut chunk = Vec::with_capacity(CHUNK_HEADER_BYTES + 6 + message_len);
        chunk.extend_from_slice(&chunk_header(
            REPLY_FLAG_DONE,
            REPLY_TYPE_ERROR,
            handle,
            wire_len(6 + message_len),
        ));
        chunk.extend_from_slice(&error.value().to_be_bytes());
        chunk.extend_from_slice(&(message_len as u16).to_be_bytes());
        chunk.extend_from_slice(message.as_bytes());
        self.output.push_copy(&chunk);
    }

    /// Read data: a simple reply followed by the data, or one structured
    /// `OFFSET_DATA` chunk (offset, then data) flagged DONE. The data buffer
    /// becomes an output segment of its own.
    fn send_read(&mut self, handle: u64, offset_bytes: u64, data: Vec<u8>) {
        debug_assert!(
            !data.is_empty(),
            "zero-length reads are answered before the executor"
        );
        if self.structured_replies() {
            let mut header = [0u8; CHUNK_HEADER_BYTES + 8];
            header[..CHUNK_HEADER_BYTES].copy_from_slice(&chunk_header(
                REPLY_FLAG_DONE,
                REPLY_TYPE_OFFSET_DATA,
                handle,
                wire_len(8 + data.len()),
            ));
            header[CHUNK_HEADER_BYTES..].copy_from_slice(&offset_bytes.to_be_bytes());
            self.output.push_copy(&header);
        } else {
            self.output.push_copy(&simple_reply(0, handle));
        }
        self.output.push_owned(data);
    }

    /// A successful read of nothing: a simple reply without data, or a lone
    /// `NBD_REPLY_TYPE_NONE` chunk (an `OFFSET_DATA` chunk cannot be empty).
    pub(crate) fn send_empty_read(&mut self, handle: u64) {
        if self.structured_replies() {
            self.output
                .push_copy(&chunk_header(REPLY_FLAG_DONE, REPLY_TYPE_NONE, handle, 0));
        } else {
            self.output.push_copy(&simple_reply(0, handle));
        }
    }
}
