//! The NBD protocol, server side, as a sans-IO state machine: bytes in,
//! requests and replies out. No sockets, threads, clocks or files — a server
//! loop (tierlab-serve) owns the socket and drives a [`Connection`].
//!
//! The reference is the NBD protocol document (NetworkBlockDevice/nbd
//! `doc/proto.md`). What is served:
//! - fixed newstyle handshake only (`NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES`);
//! - options EXPORT_NAME, ABORT, LIST, INFO, GO, STRUCTURED_REPLY,
//!   LIST_META_CONTEXT, SET_META_CONTEXT; STARTTLS is refused by policy; every
//!   other option is unsupported;
//! - commands READ, WRITE, FLUSH, TRIM, WRITE_ZEROES, BLOCK_STATUS, DISC, with
//!   every protocol check done here: the executor only sees valid requests.
//!
//! Files by concern: `wire` (numbers and byte layouts), `export` (what is
//! offered), `connection` (framing and lifecycle), `handshake` (options),
//! `transmission` (requests and their validation), `reply` (replies),
//! `input` / `output` (the buffers).

#![forbid(unsafe_code)]

mod connection;
mod event;
mod export;
mod handshake;
mod input;
mod output;
mod reply;
mod transmission;
mod violation;
mod wire;

pub use connection::Connection;
pub use event::{Command, Errno, Event, Extent, Request, STATE_HOLE, STATE_ZERO};
pub use export::{Export, ExportError, validate_exports};

/// Option data buffered and parsed at most. Real options are tiny (strings are
/// at most 4096 bytes); longer data for a known option is skipped and answered
/// with `NBD_REP_ERR_TOO_BIG`.
pub const OPTION_DATA_BYTES_MAX: usize = 64 * 1024;

/// Option data skipped at most (unknown options, or too big known ones); more
/// ends the session, as the spec allows for a denial of service. Skipping costs
/// no memory, only time, so this is generous.
pub const OPTION_DISCARD_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Options in one handshake at most. libnbd's `nbdinfo --list` sends about
/// three per export; a client sending a thousand is looping.
pub const OPTIONS_COUNT_MAX: u32 = 1024;

/// The largest `Export::block_max_bytes` accepted: one WRITE payload is
/// buffered whole, so this bounds input memory per connection. Twice the
/// spec's 2^25 interoperability ceiling, as nbdkit allows.
pub const BLOCK_MAX_BYTES_LIMIT: u32 = 64 * 1024 * 1024;

/// A refused WRITE's payload is read and dropped to stay in sync if at most
/// this long; longer ends the session (the spec: payloads up to 2^25 "SHOULD
/// NOT be considered a denial of service").
pub const WRITE_DISCARD_BYTES_MAX: u32 = 64 * 1024 * 1024;

/// Requests in flight at most; more ends the session. A server loop applying
/// backpressure (not reading while its queue is full) never gets near this;
/// it guards memory against a loop that does not.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 16 * 1024;

/// Extents in one block status chunk at most (the spec's "SHOULD NOT send
/// more than 2^20"); the export's maximum payload may lower it further.
pub const EXTENTS_PER_CHUNK_MAX: usize = 1 << 20;
