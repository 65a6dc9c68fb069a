//! Wire constants and big-endian helpers, transcribed from the NBD protocol
//! document (NetworkBlockDevice/nbd `doc/proto.md`). Every number on the wire is
//! big-endian ("network byte order").
//!
//! Only this module spells protocol numbers; the rest of the crate names them.

// ---- Handshake (newstyle) ----

/// `NBDMAGIC`, the first 8 bytes the server sends ("INIT_PASSWD").
pub(crate) const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the newstyle magic in the greeting and in front of every option.
pub(crate) const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
/// Magic in front of every option reply.
pub(crate) const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;

/// Handshake flags (server → client, 16 bits).
pub(crate) const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub(crate) const FLAG_NO_ZEROES: u16 = 1 << 1;

/// Client flags (client → server, 32 bits).
pub(crate) const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub(crate) const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Transmission flags (16 bits, in the `NBD_OPT_EXPORT_NAME` reply and `NBD_INFO_EXPORT`).
pub(crate) const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub(crate) const FLAG_READ_ONLY: u16 = 1 << 1;
pub(crate) const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub(crate) const FLAG_SEND_FUA: u16 = 1 << 3;
pub(crate) const FLAG_SEND_TRIM: u16 = 1 << 5;
pub(crate) const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub(crate) const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;

// Option types.
pub(crate) const OPT_EXPORT_NAME: u32 = 1;
pub(crate) const OPT_ABORT: u32 = 2;
pub(crate) const OPT_LIST: u32 = 3;
pub(crate) const OPT_STARTTLS: u32 = 5;
pub(crate) const OPT_INFO: u32 = 6;
pub(crate) const OPT_GO: u32 = 7;
pub(crate) const OPT_STRUCTURED_REPLY: u32 = 8;
pub(crate) const OPT_LIST_META_CONTEXT: u32 = 9;
pub(crate) const OPT_SET_META_CONTEXT: u32 = 10;

// Option reply types. Errors have bit 31 set.
pub(crate) const REP_ACK: u32 = 1;
pub(crate) const REP_SERVER: u32 = 2;
pub(crate) const REP_INFO: u32 = 3;
pub(crate) const REP_META_CONTEXT: u32 = 4;
pub(crate) const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub(crate) const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub(crate) const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub(crate) const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub(crate) const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

// `NBD_REP_INFO` information types.
pub(crate) const INFO_EXPORT: u16 = 0;
pub(crate) const INFO_NAME: u16 = 1;
pub(crate) const INFO_DESCRIPTION: u16 = 2;
pub(crate) const INFO_BLOCK_SIZE: u16 = 3;

/// Bytes of the fixed option header: magic (8), option (4), length (4).
pub(crate) const OPTION_HEADER_BYTES: usize = 16;
/// Bytes of the client flags field.
pub(crate) const CLIENT_FLAGS_BYTES: usize = 4;
/// Zero padding after the `NBD_OPT_EXPORT_NAME` reply unless `NO_ZEROES` was negotiated.
pub(crate) const EXPORT_NAME_ZEROES_BYTES: usize = 124;

// ---- Transmission ----

pub(crate) const REQUEST_MAGIC: u32 = 0x2560_9513;
pub(crate) const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub(crate) const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Bytes of a request header: magic (4), flags (2), type (2), cookie (8),
/// offset (8), length (4).
pub(crate) const REQUEST_HEADER_BYTES: usize = 28;
/// Bytes of a simple reply header: magic (4), error (4), cookie (8).
pub(crate) const SIMPLE_REPLY_BYTES: usize = 16;
/// Bytes of a structured reply chunk header: magic (4), flags (2), type (2),
/// cookie (8), length (4).
pub(crate) const CHUNK_HEADER_BYTES: usize = 20;

// Command types.
pub(crate) const CMD_READ: u16 = 0;
pub(crate) const CMD_WRITE: u16 = 1;
pub(crate) const CMD_DISC: u16 = 2;
pub(crate) const CMD_FLUSH: u16 = 3;
pub(crate) const CMD_TRIM: u16 = 4;
pub(crate) const CMD_CACHE: u16 = 5;
pub(crate) const CMD_WRITE_ZEROES: u16 = 6;
pub(crate) const CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub(crate) const CMD_FLAG_FUA: u16 = 1 << 0;
pub(crate) const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub(crate) const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub(crate) const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply flags and types.
pub(crate) const REPLY_FLAG_DONE: u16 = 1 << 0;
pub(crate) const REPLY_TYPE_NONE: u16 = 0;
pub(crate) const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub(crate) const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub(crate) const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

/// The protocol's limit on every string (export names, descriptions, error
/// messages, metadata context names and queries): "MUST be no longer than 4096 bytes".
pub(crate) const STRING_MAX_BYTES: usize = 4096;

/// Name of a command type, for messages and logs.
pub(crate) fn command_name(command: u16) -> &'static str {
    match command {
        CMD_READ => "NBD_CMD_READ",
        CMD_WRITE => "NBD_CMD_WRITE",
        CMD_DISC => "NBD_CMD_DISC",
        CMD_FLUSH => "NBD_CMD_FLUSH",
        CMD_TRIM => "NBD_CMD_TRIM",
        CMD_CACHE => "NBD_CMD_CACHE",
        CMD_WRITE_ZEROES => "NBD_CMD_WRITE_ZEROES",
        CMD_BLOCK_STATUS => "NBD_CMD_BLOCK_STATUS",
        _ => "unknown command",
    }
}

/// Name of an option, for messages and logs.
pub(crate) fn option_name(option: u32) -> &'static str {
    match option {
        OPT_EXPORT_NAME => "NBD_OPT_EXPORT_NAME",
        OPT_ABORT => "NBD_OPT_ABORT",
        OPT_LIST => "NBD_OPT_LIST",
        4 => "NBD_OPT_PEEK_EXPORT",
        OPT_STARTTLS => "NBD_OPT_STARTTLS",
        OPT_INFO => "NBD_OPT_INFO",
        OPT_GO => "NBD_OPT_GO",
        OPT_STRUCTURED_REPLY => "NBD_OPT_STRUCTURED_REPLY",
        OPT_LIST_META_CONTEXT => "NBD_OPT_LIST_META_CONTEXT",
        OPT_SET_META_CONTEXT => "NBD_OPT_SET_META_CONTEXT",
        11 => "NBD_OPT_EXTENDED_HEADERS",
        _ => "unknown option",
    }
}

/// A bounds-checked big-endian reader over peer-supplied bytes: every method
/// returns `None` instead of panicking when the data runs out.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    pub(crate) fn remaining_bytes(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Some(out)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_be_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_be_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_be_bytes)
    }
}
