//! Framing is independent of how the input is cut: whole sessions fed in one
//! chunk, byte by byte, in random pieces through `receive`, and in random
//! pieces through `recv_buffer`/`filled` give the same events and output.
//! Seeded: a failure names its seed.

mod common;

use std::collections::BTreeMap;

use common::*;
use tierlab_nbd::{Command, Connection, Event, Extent, Request};

/// A random session: handshake (with a random mix of options), then random
/// requests — mostly valid, some refused — and maybe a DISC.
fn session(rng: &mut Rng) -> Vec<u8> {
    let exports = exports();
    let mut bytes = Vec::new();
    let no_zeroes = rng.chance(50);
    let flags = C_FIXED_NEWSTYLE | if no_zeroes { C_NO_ZEROES } else { 0 };
    bytes.extend_from_slice(&flags.to_be_bytes());
    let export_index = rng.below(2) as usize;
    let export = &exports[export_index];
    let name = if export_index == 0 && rng.chance(30) {
        ""
    } else {
        export.name.as_str()
    };
    if rng.chance(30) {
        bytes.extend(option(OPT_LIST, &[]));
    }
    if rng.chance(30) {
        bytes.extend(option(
            OPT_INFO,
            &info_data(name, &[INFO_NAME, INFO_DESCRIPTION]),
        ));
    }
    if rng.chance(20) {
        bytes.extend(option(0x77, &vec![1; rng.below(300) as usize]));
    }
    if rng.chance(60) {
        bytes.extend(option(OPT_STRUCTURED_REPLY, &[]));
        if rng.chance(30) {
            bytes.extend(option(OPT_LIST_META_CONTEXT, &meta_data(name, &[])));
        }
        if rng.chance(70) {
            let queries: &[&str] = if rng.chance(50) {
                &["base:allocation"]
            } else {
                &["tierlab:tier", "base:allocation"]
            };
            bytes.extend(option(OPT_SET_META_CONTEXT, &meta_data(name, queries)));
        }
    }
    if rng.chance(15) {
        bytes.extend(option(OPT_EXPORT_NAME, name.as_bytes()));
    } else {
        bytes.extend(option(OPT_GO, &info_data(name, &[INFO_BLOCK_SIZE])));
    }

    let min = u64::from(export.block_min_bytes);
    let blocks = export.size_bytes / min;
    let max_blocks = u64::from(export.block_max_bytes) / min;
    let mut handle = 0u64;
    for _ in 0..rng.below(40) {
        handle += 1 + rng.below(3);
        let offset_blocks = rng.below(blocks);
        let len_blocks = 1 + rng.below(max_blocks.min(blocks - offset_blocks));
        let (mut offset, mut len) = (offset_blocks * min, (len_blocks * min) as u32);
        if rng.chance(8) {
            offset += 1 + rng.below(min - 1).min(7); // unaligned (min ≥ 512)
        }
        if rng.chance(5) {
            offset = export.size_bytes; // past the end (unless len is 0)
        }
        if rng.chance(3) {
            len = 0;
        }
        let mut flags = if rng.chance(30) { FLAG_FUA } else { 0 };
        if rng.chance(4) {
            flags |= 1 << rng.below(16); // maybe a refused flag
        }
        match rng.below(7) {
            0 | 1 => bytes.extend(request(flags, CMD_READ, handle, offset, len)),
            2 | 3 => {
                let payload: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
                bytes.extend(write_request(flags, handle, offset, &payload));
            }
            4 => bytes.extend(request(flags & FLAG_FUA, CMD_FLUSH, handle, 0, 0)),
            5 => {
                let command = if rng.chance(50) {
                    CMD_TRIM
                } else {
                    CMD_WRITE_ZEROES
                };
                let extra = if rng.chance(50) { FLAG_NO_HOLE } else { 0 };
                bytes.extend(request(flags | extra, command, handle, offset, len));
            }
            _ => {
                let extra = if rng.chance(50) { FLAG_REQ_ONE } else { 0 };
                bytes.extend(request(
                    flags | extra,
                    CMD_BLOCK_STATUS,
                    handle,
                    offset,
                    len,
                ));
            }
        }
    }
    if rng.chance(50) {
        bytes.extend(request(0, CMD_DISC, handle + 1, 0, 0));
        if rng.chance(50) {
            bytes.extend(request(0, CMD_READ, handle + 2, 0, 512)); // ignored after DISC
        }
    }
    bytes
}

/// How to cut the input.
#[derive(Debug, Clone, Copy)]
enum Feed {
    Whole,
    ByteByByte,
    RandomReceive,
    RandomRecvBuffer,
}

/// Feeds `bytes`, then answers every request in event order, then collects
/// all output. Checks the buffering bound after every step.
fn run(bytes: &[u8], feed: Feed, rng: &mut Rng) -> (Vec<Event>, Vec<u8>) {
    let mut conn = Connection::new(exports());
    let mut output = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        match feed {
            Feed::Whole => {
                conn.receive(rest);
                rest = &[];
            }
            Feed::ByteByByte => {
                conn.receive(&rest[..1]);
                rest = &rest[1..];
            }
            Feed::RandomReceive => {
                let n = (1 + rng.below(700) as usize).min(rest.len());
                conn.receive(&rest[..n]);
                rest = &rest[n..];
            }
            Feed::RandomRecvBuffer => {
                let min = 1 + rng.below(9000) as usize;
                let buf = conn.recv_buffer(min);
                assert!(buf.len() >= min);
                let n = buf
                    .len()
                    .min(rest.len())
                    .min(1 + rng.below(20_000) as usize);
                buf[..n].copy_from_slice(&rest[..n]);
                conn.filled(n);
                rest = &rest[n..];
                if rng.chance(30) {
                    output.extend(drain(&mut conn)); // draining between reads changes nothing
                }
            }
        }
        assert!(conn.input_buffered_bytes() <= conn.input_buffered_bytes_max());
        conn.check_invariants();
    }
    let events = events(&mut conn);
    let mut contexts: Vec<u32> = Vec::new();
    for event in &events {
        match event {
            Event::Ready { meta_contexts, .. } => {
                contexts = meta_contexts.iter().map(|(id, _)| *id).collect()
            }
            Event::Request(request) => answer(&mut conn, request, &contexts),
            Event::Disconnect { .. } => {}
        }
    }
    assert_eq!(conn.requests_in_flight(), 0);
    output.extend(drain(&mut conn));
    if conn.is_closing() {
        assert!(conn.should_close());
    }
    (events, output)
}

fn answer(conn: &mut Connection, request: &Request, contexts: &[u32]) {
    match &request.command {
        Command::Read { len_bytes, .. } => conn.reply_read(
            request.handle,
            vec![request.handle as u8; *len_bytes as usize],
        ),
        Command::BlockStatus { len_bytes, .. } => {
            let extents = [Extent {
                len_bytes: *len_bytes,
                flags: 0,
            }];
            let per_context: Vec<(u32, &[Extent])> =
                contexts.iter().map(|&id| (id, &extents[..])).collect();
            conn.reply_block_status(request.handle, &per_context);
        }
        _ => conn.reply_ok(request.handle),
    }
}

fn kind(event: &Event) -> &'static str {
    match event {
        Event::Ready { .. } => "ready",
        Event::Disconnect { clean: true, .. } => "disconnect-clean",
        Event::Disconnect { clean: false, .. } => "disconnect-violation",
        Event::Request(Request { command, .. }) => match command {
            Command::Read { .. } => "read",
            Command::Write { .. } => "write",
            Command::Flush => "flush",
            Command::Trim { .. } => "trim",
            Command::WriteZeroes { .. } => "write-zeroes",
            Command::BlockStatus { .. } => "block-status",
        },
    }
}

#[test]
fn random_sessions_split_anywhere_give_the_same_events_and_output() {
    const SEEDS: u64 = 300;
    let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut refusals = 0usize;
    for seed in 0..SEEDS {
        let bytes = session(&mut Rng::new(seed));
        let (events, output) = run(&bytes, Feed::Whole, &mut Rng::new(0));
        for event in &events {
            *seen.entry(kind(event)).or_default() += 1;
        }
        // Refusals show as error replies; count the EINVAL/ENOSPC/EPERM values cheaply.
        refusals += output
            .windows(8)
            .filter(|w| {
                let magic = u32::from_be_bytes(w[0..4].try_into().unwrap());
                let error = u32::from_be_bytes(w[4..8].try_into().unwrap());
                magic == SIMPLE_REPLY_MAGIC && [EINVAL, ENOSPC, EPERM].contains(&error)
            })
            .count();
        for feed in [
            Feed::ByteByByte,
            Feed::RandomReceive,
            Feed::RandomRecvBuffer,
        ] {
            let mut rng = Rng::new(seed ^ 0x5eed);
            let (split_events, split_output) = run(&bytes, feed, &mut rng);
            assert_eq!(split_events, events, "seed {seed}, {feed:?}: events differ");
            assert!(
                split_output == output,
                "seed {seed}, {feed:?}: output differs"
            );
        }
    }
    // The generator reached every path worth checking.
    for kind in [
        "ready",
        "read",
        "write",
        "flush",
        "trim",
        "write-zeroes",
        "block-status",
        "disconnect-clean",
    ] {
        assert!(
            seen.get(kind).copied().unwrap_or(0) > 5,
            "{kind} seen {:?} times: {seen:?}",
            seen.get(kind)
        );
    }
    assert!(refusals > 20, "only {refusals} simple-reply refusals");
}

#[test]
fn byte_by_byte_equals_one_chunk_for_a_scripted_session() {
    let mut bytes = (C_FIXED_NEWSTYLE | C_NO_ZEROES).to_be_bytes().to_vec();
    bytes.extend(option(OPT_LIST, &[]));
    bytes.extend(option(0x4242, b"unknown"));
    bytes.extend(option(OPT_STRUCTURED_REPLY, &[]));
    bytes.extend(option(
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &["base:allocation", "tierlab:tier"]),
    ));
    bytes.extend(option(OPT_GO, &info_data("missing", &[])));
    bytes.extend(option(
        OPT_GO,
        &info_data("disk", &[INFO_BLOCK_SIZE, INFO_NAME]),
    ));
    bytes.extend(write_request(FLAG_FUA, 1, 0, &[1; 4096]));
    bytes.extend(write_request(0, 2, DISK_SIZE, &[2; 4096])); // refused, skipped
    bytes.extend(request(0, CMD_READ, 3, 0, 4096));
    bytes.extend(request(FLAG_REQ_ONE, CMD_BLOCK_STATUS, 4, 0, 8192));
    bytes.extend(request(0, CMD_READ, 5, 0, 0)); // zero length
    bytes.extend(request(0, CMD_FLUSH, 6, 0, 0));
    bytes.extend(request(0, CMD_DISC, 7, 0, 0));
    let whole = run(&bytes, Feed::Whole, &mut Rng::new(1));
    let bytewise = run(&bytes, Feed::ByteByByte, &mut Rng::new(1));
    assert_eq!(whole.0, bytewise.0);
    assert_eq!(whole.1, bytewise.1);
    let kinds: Vec<&str> = whole.0.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "ready",
            "write",
            "read",
            "block-status",
            "flush",
            "disconnect-clean"
        ]
    );
}

#[test]
fn garbage_never_panics_and_stays_bounded() {
    // Not a substitute for the fuzz target, but runs on every `cargo test`.
    for seed in 0..200u64 {
        let mut rng = Rng::new(seed);
        let mut conn = Connection::new(exports());
        // Start from a valid prefix half of the time so garbage hits transmission too.
        if rng.chance(50) {
            let mut prefix = (C_FIXED_NEWSTYLE).to_be_bytes().to_vec();
            if rng.chance(50) {
                prefix.extend(option(OPT_STRUCTURED_REPLY, &[]));
                prefix.extend(option(
                    OPT_SET_META_CONTEXT,
                    &meta_data("", &["base:allocation"]),
                ));
            }
            prefix.extend(option(OPT_GO, &info_data("", &[])));
            conn.receive(&prefix);
        }
        for _ in 0..50 {
            let mut piece: Vec<u8> = (0..rng.below(100)).map(|_| rng.below(256) as u8).collect();
            if rng.chance(30) {
                // A plausible header with random fields.
                let mut header = request(
                    rng.below(1 << 16) as u16,
                    rng.below(10) as u16,
                    rng.below(8),
                    rng.below(DISK_SIZE * 2) & !511,
                    (rng.below(1 << 17) as u32) & !511,
                );
                header.append(&mut piece);
                piece = header;
            }
            conn.receive(&piece);
            assert!(conn.input_buffered_bytes() <= conn.input_buffered_bytes_max());
            let evs = events(&mut conn);
            let contexts = vec![1];
            for event in &evs {
                if let Event::Request(request) = event {
                    answer(&mut conn, request, &contexts);
                }
            }
            drain(&mut conn);
        }
    }
}
