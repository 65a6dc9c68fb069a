//! Transmission: request headers, their validation, and what is tracked per
//! request in flight. Refused requests are answered here and never surfaced,
//! so the executor only sees valid requests.

use std::fmt;

use crate::WRITE_DISCARD_BYTES_MAX;
use crate::connection::{Connection, Reading};
use crate::event::{Command, Errno, Request};
use crate::violation::Violation;
use crate::wire::{
    CMD_BLOCK_STATUS, CMD_DISC, CMD_FLAG_FAST_ZERO, CMD_FLAG_FUA, CMD_FLAG_NO_HOLE,
    CMD_FLAG_REQ_ONE, CMD_FLUSH, CMD_READ, CMD_TRIM, CMD_WRITE, CMD_WRITE_ZEROES,
    REQUEST_HEADER_BYTES, REQUEST_MAGIC, Reader, command_name,
};

/// A request header as received (after the magic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestHeader {
    pub(crate) flags: u16,
    pub(crate) command: u16,
    pub(crate) handle: u64,
    pub(crate) offset_bytes: u64,
    pub(crate) len_bytes: u32,
}

impl RequestHeader {
    /// Splits a raw header into its magic and fields.
    fn parse(bytes: &[u8; REQUEST_HEADER_BYTES]) -> (u32, RequestHeader) {
        let mut reader = Reader::new(bytes);
        let fields = (|| {
            Some((
                reader.u32()?,
                RequestHeader {
                    flags: reader.u16()?,
                    command: reader.u16()?,
                    handle: reader.u64()?,
                    offset_bytes: reader.u64()?,
                    len_bytes: reader.u32()?,
                },
            ))
        })();
        fields.expect("a 28-byte header holds 4 + 2 + 2 + 8 + 8 + 4 bytes")
    }
}

/// What a request in flight needs for its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InFlight {
    Read {
        offset_bytes: u64,
        len_bytes: u32,
    },
    /// WRITE, FLUSH, TRIM, WRITE_ZEROES: answered with `reply_ok` or an error.
    NoData {
        command: u16,
    },
    BlockStatus {
        offset_bytes: u64,
        len_bytes: u32,
        req_one: bool,
    },
}

/// Why a request is refused; rendered into the structured error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    DuplicateHandle {
        handle: u64,
    },
    UnknownCommand {
        command: u16,
    },
    /// `NBD_FLAG_SEND_FAST_ZERO` is not advertised, so the spec says `EINVAL`
    /// ("SHOULD NOT fail with NBD_ENOTSUP ... SHOULD fail with NBD_EINVAL").
    FastZeroNotAdvertised,
    FlagsNotAllowed {
        command: u16,
        flags: u16,
    },
    ReadOnly {
        command: u16,
    },
    FlushNotZero {
        offset_bytes: u64,
        len_bytes: u32,
    },
    NoMetaContext,
    Unaligned {
        command: u16,
        offset_bytes: u64,
        len_bytes: u32,
        block_min_bytes: u32,
    },
    TooLarge {
        command: u16,
        len_bytes: u32,
        block_max_bytes: u32,
    },
    BeyondEnd {
        command: u16,
        offset_bytes: u64,
        len_bytes: u32,
        size_bytes: u64,
    },
    ZeroLengthBlockStatus,
}

impl Rejection {
    /// The error value, following the spec's "Error values" section.
    pub(crate) fn errno(&self) -> Errno {
        match self {
            Rejection::ReadOnly { .. } => Errno::Perm,
            // Writes past the end are "no space"; reads, trims and status
            // queries past the end are invalid.
            Rejection::BeyondEnd { command, .. }
                if matches!(*command, CMD_WRITE | CMD_WRITE_ZEROES) =>
            {
                Errno::NoSpc
            }
            _ => Errno::Inval,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::DuplicateHandle { handle } => {
                write!(
                    f,
                    "cookie {handle:#x} is already in use by a request in flight"
                )
            }
            Rejection::UnknownCommand { command } => {
                write!(f, "command type {command} is not supported")
            }
            Rejection::FastZeroNotAdvertised => {
                write!(
                    f,
                    "NBD_CMD_FLAG_FAST_ZERO was not advertised (no NBD_FLAG_SEND_FAST_ZERO)"
                )
            }
            Rejection::FlagsNotAllowed { command, flags } => write!(
                f,
                "command flags {flags:#06x} are not allowed on {}",
                command_name(*command)
            ),
            Rejection::ReadOnly { command } => {
                write!(f, "{} on a read-only export", command_name(*command))
            }
            Rejection::FlushNotZero {
                offset_bytes,
                len_bytes,
            } => write!(
                f,
                "NBD_CMD_FLUSH must have offset and length 0, got offset {offset_bytes} length {len_bytes}"
            ),
            Rejection::NoMetaContext => write!(
                f,
                "NBD_CMD_BLOCK_STATUS without a metadata context negotiated for this export"
            ),
            Rejection::Unaligned {
                command,
                offset_bytes,
                len_bytes,
                block_min_bytes,
            } => write!(
                f,
                "{} offset {offset_bytes} length {len_bytes} is not aligned to the minimum block size {block_min_bytes}",
                command_name(*command)
            ),
            Rejection::TooLarge {
                command,
                len_bytes,
                block_max_bytes,
            } => write!(
                f,
                "{} length {len_bytes} exceeds the maximum payload {block_max_bytes}",
                command_name(*command)
            ),
            Rejection::BeyondEnd {
                command,
                offset_bytes,
                len_bytes,
                size_bytes,
            } => write!(
                f,
                "{} offset {offset_bytes} length {len_bytes} extends past the export size {size_bytes}",
                command_name(*command)
            ),
            Rejection::ZeroLengthBlockStatus => {
                write!(
                    f,
                    "NBD_CMD_BLOCK_STATUS of length 0 has no extent to describe"
                )
            }
        }
    }
}

impl Connection {
    pub(crate) fn on_request_header(&mut self, bytes: [u8; REQUEST_HEADER_BYTES]) {
        let (magic, header) = RequestHeader::parse(&bytes);
        if magic != REQUEST_MAGIC {
            self.close_hard(Violation::RequestMagic { magic });
            return;
        }
        if header.command == CMD_DISC {
            // No reply to DISC; whatever its other fields say, the client has
            // stopped sending ("MUST NOT send anything ... after").
            self.close_soft("client sent NBD_CMD_DISC");
            return;
        }
        let verdict = self.validate(&header);
        if header.command == CMD_WRITE {
            self.on_write_header(header, verdict);
            return;
        }
        match verdict {
            Err(rejection) => self.send_rejection(header.handle, &rejection),
            Ok(()) if header.len_bytes == 0 && header.command != CMD_FLUSH => {
                self.answer_zero_length(&header)
            }
            Ok(()) => self.surface_header(&header),
        }
    }

    /// A WRITE's payload follows its header whatever we think of it: receive
    /// it for a valid request, skip it for a refused one.
    fn on_write_header(&mut self, header: RequestHeader, verdict: Result<(), Rejection>) {
        match verdict {
            Ok(()) if header.len_bytes == 0 => self.answer_zero_length(&header),
            Ok(()) => {
                // Bounded by the export's block_max_bytes (validated). Zeroed
                // allocation is calloc, so large payloads cost no memset.
                let data = vec![0u8; header.len_bytes as usize];
                self.reading = Reading::WritePayload {
                    header,
                    data,
                    filled_bytes: 0,
                };
            }
            Err(rejection) if header.len_bytes == 0 => {
                self.send_rejection(header.handle, &rejection)
            }
            Err(rejection) if header.len_bytes <= WRITE_DISCARD_BYTES_MAX => {
                self.reading = Reading::WriteDiscard {
                    handle: header.handle,
                    remaining_bytes: header.len_bytes,
                    rejection,
                };
            }
            Err(_) => self.close_hard(Violation::WriteTooLong {
                len_bytes: header.len_bytes,
                len_bytes_max: WRITE_DISCARD_BYTES_MAX,
            }),
        }
    }

    /// Checks in the order: cookie, command, flags, read-only, command
    /// specifics, alignment, payload size, bounds.
    fn validate(&self, header: &RequestHeader) -> Result<(), Rejection> {
        let Some(transmission) = &self.transmission else {
            unreachable!("requests are parsed only in transmission");
        };
        let export = &self.exports[transmission.export];
        let RequestHeader {
            flags,
            command,
            handle,
            offset_bytes,
            len_bytes,
        } = *header;

        // Replies are matched by cookie, so two in flight could not be told apart.
        if self.in_flight.contains_key(&handle) {
            return Err(Rejection::DuplicateHandle { handle });
        }
        // FUA is valid on every command once SEND_FUA is advertised ("the server
        // MUST accept all commands with this bit set").
        let flags_allowed = match command {
            CMD_READ | CMD_WRITE | CMD_FLUSH | CMD_TRIM => CMD_FLAG_FUA,
            CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
            CMD_BLOCK_STATUS => CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
            _ => return Err(Rejection::UnknownCommand { command }),
        };
        if command == CMD_WRITE_ZEROES && flags & CMD_FLAG_FAST_ZERO != 0 {
            return Err(Rejection::FastZeroNotAdvertised);
        }
        if flags & !flags_allowed != 0 {
            return Err(Rejection::FlagsNotAllowed {
                command,
                flags: flags & !flags_allowed,
            });
        }
        if export.read_only && matches!(command, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES) {
            return Err(Rejection::ReadOnly { command });
        }
        if command == CMD_FLUSH {
            if offset_bytes != 0 || len_bytes != 0 {
                return Err(Rejection::FlushNotZero {
                    offset_bytes,
                    len_bytes,
                });
            }
            return Ok(());
        }
        if command == CMD_BLOCK_STATUS && transmission.context_ids.is_empty() {
            return Err(Rejection::NoMetaContext);
        }
        let block_min_bytes = export.block_min_bytes;
        debug_assert!(block_min_bytes.is_power_of_two());
        let alignment_mask = u64::from(block_min_bytes) - 1;
        if offset_bytes & alignment_mask != 0 || u64::from(len_bytes) & alignment_mask != 0 {
            return Err(Rejection::Unaligned {
                command,
                offset_bytes,
                len_bytes,
                block_min_bytes,
            });
        }
        if matches!(command, CMD_READ | CMD_WRITE) && len_bytes > export.block_max_bytes {
            return Err(Rejection::TooLarge {
                command,
                len_bytes,
                block_max_bytes: export.block_max_bytes,
            });
        }
        let within = offset_bytes
            .checked_add(u64::from(len_bytes))
            .is_some_and(|end_bytes| end_bytes <= export.size_bytes);
        if !within {
            return Err(Rejection::BeyondEnd {
                command,
                offset_bytes,
                len_bytes,
                size_bytes: export.size_bytes,
            });
        }
        if command == CMD_BLOCK_STATUS && len_bytes == 0 {
            // A successful reply needs at least one extent of non-zero length
            // no longer than the request: impossible here.
            return Err(Rejection::ZeroLengthBlockStatus);
        }
        Ok(())
    }

    /// Zero-length READ, WRITE, TRIM and WRITE_ZEROES (valid otherwise) do
    /// nothing, so they succeed here without bothering the executor. The spec
    /// leaves their behaviour unspecified but says not to disconnect.
    fn answer_zero_length(&mut self, header: &RequestHeader) {
        debug_assert_eq!(header.len_bytes, 0);
        debug_assert!(matches!(
            header.command,
            CMD_READ | CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES
        ));
        if header.command == CMD_READ {
            self.send_empty_read(header.handle);
        } else {
            self.send_ok(header.handle);
        }
    }

    /// Surfaces a valid request without payload.
    fn surface_header(&mut self, header: &RequestHeader) {
        let RequestHeader {
            flags,
            command,
            handle,
            offset_bytes,
            len_bytes,
        } = *header;
        let (command, in_flight) = match command {
            CMD_READ => (
                Command::Read {
                    offset_bytes,
                    len_bytes,
                },
                InFlight::Read {
                    offset_bytes,
                    len_bytes,
                },
            ),
            CMD_FLUSH => (Command::Flush, InFlight::NoData { command }),
            CMD_TRIM => (
                Command::Trim {
                    offset_bytes,
                    len_bytes,
                },
                InFlight::NoData { command },
            ),
            CMD_WRITE_ZEROES => (
                Command::WriteZeroes {
                    offset_bytes,
                    len_bytes,
                    no_hole: flags & CMD_FLAG_NO_HOLE != 0,
                },
                InFlight::NoData { command },
            ),
            CMD_BLOCK_STATUS => {
                let req_one = flags & CMD_FLAG_REQ_ONE != 0;
                (
                    Command::BlockStatus {
                        offset_bytes,
                        len_bytes,
                        req_one,
                    },
                    InFlight::BlockStatus {
                        offset_bytes,
                        len_bytes,
                        req_one,
                    },
                )
            }
            other => unreachable!("validate lets through no {}", command_name(other)),
        };
        let request = Request {
            handle,
            fua: flags & CMD_FLAG_FUA != 0,
            command,
        };
        self.surface(request, in_flight);
    }

    /// Surfaces a valid write once its payload is complete.
    pub(crate) fn surface_write(&mut self, header: RequestHeader, data: Vec<u8>) {
        debug_assert_eq!(header.command, CMD_WRITE);
        debug_assert_eq!(data.len(), header.len_bytes as usize);
        let request = Request {
            handle: header.handle,
            fua: header.flags & CMD_FLAG_FUA != 0,
            command: Command::Write {
                offset_bytes: header.offset_bytes,
                data,
            },
        };
        self.surface(request, InFlight::NoData { command: CMD_WRITE });
    }
}
