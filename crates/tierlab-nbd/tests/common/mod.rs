//! A minimal NBD client for tests, written from the layouts in the protocol
//! document (doc/proto.md) — independent of the crate's own encoder: every
//! magic number and field offset is spelled out here again.
#![allow(dead_code)]

use std::sync::Arc;

use tierlab_nbd::{Connection, Event, Export};

// ---- Numbers from proto.md ----
pub const NBDMAGIC: &[u8; 8] = b"NBDMAGIC"; // 0x4e42444d41474943
pub const IHAVEOPT: &[u8; 8] = b"IHAVEOPT"; // 0x49484156454F5054
pub const OPTION_REPLY_MAGIC: u64 = 0x3e889045565a9;
pub const REQUEST_MAGIC: u32 = 0x25609513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x67446698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e33ef;

pub const C_FIXED_NEWSTYLE: u32 = 1;
pub const C_NO_ZEROES: u32 = 2;

pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = 0x8000_0001;
pub const REP_ERR_POLICY: u32 = 0x8000_0002;
pub const REP_ERR_INVALID: u32 = 0x8000_0003;
pub const REP_ERR_UNKNOWN: u32 = 0x8000_0006;
pub const REP_ERR_TOO_BIG: u32 = 0x8000_0009;

pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

pub const FLAG_FUA: u16 = 1;
pub const FLAG_NO_HOLE: u16 = 2;
pub const FLAG_DF: u16 = 4;
pub const FLAG_REQ_ONE: u16 = 8;
pub const FLAG_FAST_ZERO: u16 = 16;

pub const REPLY_FLAG_DONE: u16 = 1;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = 0x8001;

pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;

/// Transmission flags: HAS_FLAGS (bit 0) | SEND_FLUSH (2) | SEND_FUA (3) |
/// SEND_TRIM (5) | SEND_WRITE_ZEROES (6).
pub const TFLAGS_RW: u16 = 0b0110_1101;
/// Read-only: HAS_FLAGS (bit 0) | READ_ONLY (1) | SEND_FLUSH (2) |
/// CAN_MULTI_CONN (8) — no write-class command is offered.
pub const TFLAGS_RO_MULTI: u16 = 0b0000_0111 | 0x100;

pub const DISK_SIZE: u64 = 1 << 20;
pub const DISK_MAX: u32 = 64 * 1024;
pub const RO_SIZE: u64 = 64 * 1024;

/// Export 0 "disk": 1 MiB, min 512, preferred 4096, max 64 KiB, two contexts.
/// Export 1 "ro": read-only, multi-conn, 64 KiB, min 4096, one context.
pub fn exports() -> Arc<[Export]> {
    Arc::from(vec![
        Export {
            name: "disk".into(),
            description: "the disk".into(),
            size_bytes: DISK_SIZE,
            read_only: false,
            can_multi_conn: false,
            block_min_bytes: 512,
            block_preferred_bytes: 4096,
            block_max_bytes: DISK_MAX,
            meta_contexts: vec!["base:allocation".into(), "tierlab:tier".into()],
        },
        Export {
            name: "ro".into(),
            description: "".into(),
            size_bytes: RO_SIZE,
            read_only: true,
            can_multi_conn: true,
            block_min_bytes: 4096,
            block_preferred_bytes: 4096,
            block_max_bytes: 32 * 1024,
            meta_contexts: vec!["base:allocation".into()],
        },
    ])
}

// ---- Client → server encoders ----

pub fn option(option: u32, data: &[u8]) -> Vec<u8> {
    let mut out = IHAVEOPT.to_vec();
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// NBD_OPT_INFO / NBD_OPT_GO data: u32 name length, name, u16 count, u16 × count.
pub fn info_data(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut out = (name.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for info in infos {
        out.extend_from_slice(&info.to_be_bytes());
    }
    out
}

/// NBD_OPT_{LIST,SET}_META_CONTEXT data: u32 name length, name, u32 count,
/// (u32 length, query) × count.
pub fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut out = (name.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for query in queries {
        out.extend_from_slice(&(query.len() as u32).to_be_bytes());
        out.extend_from_slice(query.as_bytes());
    }
    out
}

/// A request header: magic, flags, type, cookie, offset, length (28 bytes).
pub fn request(flags: u16, command: u16, handle: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut out = REQUEST_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&command.to_be_bytes());
    out.extend_from_slice(&handle.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    assert_eq!(out.len(), 28);
    out
}

pub fn write_request(flags: u16, handle: u64, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut out = request(flags, CMD_WRITE, handle, offset, data.len() as u32);
    out.extend_from_slice(data);
    out
}

// ---- Server → client expectations, byte by byte ----

/// The bytes of an option reply.
pub fn option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut out = OPTION_REPLY_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

pub fn simple_reply(error: u32, handle: u64) -> Vec<u8> {
    let mut out = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&handle.to_be_bytes());
    out
}

pub fn chunk(flags: u16, reply_type: u16, handle: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&handle.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A parsed option reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionReply {
    pub option: u32,
    pub reply_type: u32,
    pub data: Vec<u8>,
}

/// Splits a byte stream of option replies (panics on anything malformed).
pub fn parse_option_replies(mut bytes: &[u8]) -> Vec<OptionReply> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        assert!(
            bytes.len() >= 20,
            "truncated option reply header: {bytes:?}"
        );
        let magic = u64::from_be_bytes(bytes[0..8].try_into().unwrap());
        assert_eq!(magic, OPTION_REPLY_MAGIC, "option reply magic");
        let option = u32::from_be_bytes(bytes[8..12].try_into().unwrap());
        let reply_type = u32::from_be_bytes(bytes[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(bytes[16..20].try_into().unwrap()) as usize;
        assert!(bytes.len() >= 20 + len, "truncated option reply data");
        out.push(OptionReply {
            option,
            reply_type,
            data: bytes[20..20 + len].to_vec(),
        });
        bytes = &bytes[20 + len..];
    }
    out
}

/// A parsed structured reply chunk: flags, type, cookie, payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub flags: u16,
    pub reply_type: u16,
    pub handle: u64,
    pub payload: Vec<u8>,
}

pub fn parse_chunk(bytes: &[u8]) -> (Chunk, &[u8]) {
    assert!(bytes.len() >= 20, "truncated chunk header");
    assert_eq!(
        u32::from_be_bytes(bytes[0..4].try_into().unwrap()),
        STRUCTURED_REPLY_MAGIC
    );
    let flags = u16::from_be_bytes(bytes[4..6].try_into().unwrap());
    let reply_type = u16::from_be_bytes(bytes[6..8].try_into().unwrap());
    let handle = u64::from_be_bytes(bytes[8..16].try_into().unwrap());
    let len = u32::from_be_bytes(bytes[16..20].try_into().unwrap()) as usize;
    assert!(bytes.len() >= 20 + len, "truncated chunk payload");
    (
        Chunk {
            flags,
            reply_type,
            handle,
            payload: bytes[20..20 + len].to_vec(),
        },
        &bytes[20 + len..],
    )
}

/// Checks an `NBD_REPLY_TYPE_ERROR` chunk: DONE, the cookie, the error, and a
/// well-formed (UTF-8, length-consistent) message; returns the message.
pub fn expect_error_chunk(bytes: &[u8], handle: u64, error: u32) -> String {
    let (chunk, rest) = parse_chunk(bytes);
    assert!(
        rest.is_empty(),
        "one chunk expected, {} bytes follow",
        rest.len()
    );
    assert_eq!(chunk.flags, REPLY_FLAG_DONE);
    assert_eq!(chunk.reply_type, REPLY_TYPE_ERROR);
    assert_eq!(chunk.handle, handle);
    assert!(chunk.payload.len() >= 6);
    assert_eq!(
        u32::from_be_bytes(chunk.payload[0..4].try_into().unwrap()),
        error,
        "error value"
    );
    let message_len = u16::from_be_bytes(chunk.payload[4..6].try_into().unwrap()) as usize;
    assert_eq!(
        chunk.payload.len(),
        6 + message_len,
        "message length vs chunk length"
    );
    String::from_utf8(chunk.payload[6..].to_vec()).expect("messages are UTF-8")
}

// ---- Driving a connection ----

/// All pending output, consumed.
pub fn drain(conn: &mut Connection) -> Vec<u8> {
    let mut bytes = Vec::new();
    {
        let mut slices = Vec::new();
        conn.output(&mut slices);
        for slice in &slices {
            bytes.extend_from_slice(slice);
        }
    }
    assert_eq!(bytes.len(), conn.output_len());
    conn.consume_output(bytes.len());
    assert_eq!(conn.output_len(), 0);
    bytes
}

pub fn events(conn: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| conn.poll_event()).collect()
}

/// A connection past the greeting and client flags.
pub fn connect(client_flags: u32) -> Connection {
    let mut conn = Connection::new(exports());
    let greeting = drain(&mut conn);
    let mut expected = NBDMAGIC.to_vec();
    expected.extend_from_slice(IHAVEOPT);
    expected.extend_from_slice(&[0x00, 0x03]); // FIXED_NEWSTYLE | NO_ZEROES
    assert_eq!(greeting, expected);
    conn.receive(&client_flags.to_be_bytes());
    assert!(events(&mut conn).is_empty());
    assert!(drain(&mut conn).is_empty());
    conn
}

/// Sends an option and returns the replies to it.
pub fn send_option(conn: &mut Connection, opt: u32, data: &[u8]) -> Vec<OptionReply> {
    conn.receive(&option(opt, data));
    let replies = parse_option_replies(&drain(conn));
    assert!(
        replies.iter().all(|r| r.option == opt),
        "replies name the option: {replies:?}"
    );
    replies
}

/// A connection in transmission on `export` via GO, optionally with structured
/// replies and metadata contexts; returns it and the Ready event.
pub fn ready(export: &str, structured: bool, contexts: &[&str]) -> (Connection, Event) {
    let mut conn = connect(C_FIXED_NEWSTYLE | C_NO_ZEROES);
    if structured {
        let replies = send_option(&mut conn, OPT_STRUCTURED_REPLY, &[]);
        assert_eq!(replies[0].reply_type, REP_ACK);
    }
    if !contexts.is_empty() {
        let replies = send_option(
            &mut conn,
            OPT_SET_META_CONTEXT,
            &meta_data(export, contexts),
        );
        assert_eq!(replies.last().unwrap().reply_type, REP_ACK);
    }
    let replies = send_option(&mut conn, OPT_GO, &info_data(export, &[INFO_BLOCK_SIZE]));
    assert_eq!(replies.last().unwrap().reply_type, REP_ACK, "{replies:?}");
    let mut evs = events(&mut conn);
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert!(conn.in_transmission());
    (conn, evs.remove(0))
}

/// The seeded RNG of the shared test kit.
#[allow(unused_imports)] // not every test binary draws random numbers
pub use tierlab_core::testkit::Rng;
