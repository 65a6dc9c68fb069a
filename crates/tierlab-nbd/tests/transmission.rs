//! Transmission: requests surfaced, refusals answered in place, replies
//! byte-exact (simple and structured), block status clamping, zero copy.

mod common;

use common::*;
use tierlab_nbd::{Command, Connection, Errno, Event, Extent, Request, STATE_HOLE, STATE_ZERO};

fn one_request(conn: &mut Connection) -> Request {
    match &events(conn)[..] {
        [Event::Request(request)] => request.clone(),
        other => panic!("expected one request, got {other:?}"),
    }
}

fn no_events(conn: &mut Connection) {
    let evs = events(conn);
    assert!(evs.is_empty(), "unexpected events {evs:?}");
}

fn disk(structured: bool) -> Connection {
    ready("disk", structured, &[]).0
}

fn disk_with_contexts() -> Connection {
    let (conn, ready_event) = ready("disk", true, &["base:allocation", "tierlab:tier"]);
    assert_eq!(
        ready_event,
        Event::Ready {
            export: 0,
            structured_replies: true,
            meta_contexts: vec![(1, "base:allocation".into()), (2, "tierlab:tier".into())],
        }
    );
    conn
}

#[test]
fn read_with_simple_reply_is_header_then_data() {
    let mut conn = disk(false);
    conn.receive(&request(0, CMD_READ, 0x0102_0304_0506_0708, 4096, 1024));
    let req = one_request(&mut conn);
    assert_eq!(
        req,
        Request {
            handle: 0x0102_0304_0506_0708,
            fua: false,
            command: Command::Read {
                offset_bytes: 4096,
                len_bytes: 1024
            }
        }
    );
    assert_eq!(conn.requests_in_flight(), 1);
    assert!(
        drain(&mut conn).is_empty(),
        "nothing is sent before the reply"
    );
    let data: Vec<u8> = (0..1024).map(|i| i as u8).collect();
    conn.reply_read(req.handle, data.clone());
    assert_eq!(conn.requests_in_flight(), 0);
    let mut expected = vec![0x67, 0x44, 0x66, 0x98, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    expected.extend_from_slice(&data);
    assert_eq!(drain(&mut conn), expected);
}

#[test]
fn read_with_structured_replies_is_one_offset_data_chunk_flagged_done() {
    let mut conn = disk(true);
    conn.receive(&request(0, CMD_READ, 5, 8192, 512));
    let req = one_request(&mut conn);
    conn.reply_read(req.handle, vec![0xab; 512]);
    let mut expected = vec![
        0x66, 0x8e, 0x33, 0xef, // NBD_STRUCTURED_REPLY_MAGIC
        0x00, 0x01, // NBD_REPLY_FLAG_DONE
        0x00, 0x01, // NBD_REPLY_TYPE_OFFSET_DATA
        0, 0, 0, 0, 0, 0, 0, 5, // cookie
        0, 0, 0x02, 0x08, // length 8 + 512
        0, 0, 0, 0, 0, 0, 0x20, 0x00, // offset 8192
    ];
    expected.extend_from_slice(&[0xab; 512]);
    assert_eq!(drain(&mut conn), expected);
}

#[test]
fn read_data_is_not_copied() {
    for structured in [false, true] {
        let mut conn = disk(structured);
        conn.receive(&request(0, CMD_READ, 1, 0, DISK_MAX));
        let req = one_request(&mut conn);
        let data = vec![7u8; DISK_MAX as usize];
        let data_ptr = data.as_ptr();
        conn.reply_read(req.handle, data);
        let mut slices = Vec::new();
        conn.output(&mut slices);
        let data_slice = slices
            .iter()
            .find(|s| s.len() == DISK_MAX as usize)
            .expect("data slice");
        assert_eq!(
            data_slice.as_ptr(),
            data_ptr,
            "the executor's buffer is the iovec"
        );
    }
}

#[test]
fn write_with_fua_surfaces_its_payload_and_is_acked_with_a_simple_reply() {
    for structured in [false, true] {
        let mut conn = disk(structured);
        let payload: Vec<u8> = (0..2048).map(|i| (i * 7) as u8).collect();
        conn.receive(&write_request(FLAG_FUA, 42, 1024, &payload));
        let req = one_request(&mut conn);
        assert_eq!(
            req,
            Request {
                handle: 42,
                fua: true,
                command: Command::Write {
                    offset_bytes: 1024,
                    data: payload
                }
            }
        );
        conn.reply_ok(42);
        // Success without data is a simple reply even with structured replies.
        assert_eq!(drain(&mut conn), simple_reply(0, 42));
    }
}

#[test]
fn flush_trim_write_zeroes_and_block_status_surface_their_fields() {
    let mut conn = disk_with_contexts();
    conn.receive(&request(0, CMD_FLUSH, 1, 0, 0));
    conn.receive(&request(FLAG_FUA, CMD_TRIM, 2, 512, 4096));
    conn.receive(&request(FLAG_NO_HOLE, CMD_WRITE_ZEROES, 3, 0, 65536 * 4));
    conn.receive(&request(
        FLAG_FUA | FLAG_NO_HOLE,
        CMD_WRITE_ZEROES,
        4,
        512,
        512,
    ));
    conn.receive(&request(FLAG_REQ_ONE, CMD_BLOCK_STATUS, 5, 1024, 1 << 19));
    conn.receive(&request(0, CMD_BLOCK_STATUS, 6, 0, 512));
    // FUA is accepted on any command once SEND_FUA is advertised.
    conn.receive(&request(FLAG_FUA, CMD_READ, 7, 0, 512));
    let commands: Vec<(u64, bool, Command)> = events(&mut conn)
        .into_iter()
        .map(|e| match e {
            Event::Request(r) => (r.handle, r.fua, r.command),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        commands,
        vec![
            (1, false, Command::Flush),
            (
                2,
                true,
                Command::Trim {
                    offset_bytes: 512,
                    len_bytes: 4096
                }
            ),
            (
                3,
                false,
                Command::WriteZeroes {
                    offset_bytes: 0,
                    len_bytes: 65536 * 4,
                    no_hole: true
                }
            ),
            (
                4,
                true,
                Command::WriteZeroes {
                    offset_bytes: 512,
                    len_bytes: 512,
                    no_hole: true
                }
            ),
            (
                5,
                false,
                Command::BlockStatus {
                    offset_bytes: 1024,
                    len_bytes: 1 << 19,
                    req_one: true
                }
            ),
            (
                6,
                false,
                Command::BlockStatus {
                    offset_bytes: 0,
                    len_bytes: 512,
                    req_one: false
                }
            ),
            (
                7,
                true,
                Command::Read {
                    offset_bytes: 0,
                    len_bytes: 512
                }
            ),
        ]
    );
    assert_eq!(conn.requests_in_flight(), 7);
}

#[test]
fn trim_and_write_zeroes_may_exceed_the_maximum_payload() {
    let mut conn = disk(false);
    conn.receive(&request(0, CMD_TRIM, 1, 0, DISK_SIZE as u32));
    conn.receive(&request(0, CMD_WRITE_ZEROES, 2, 0, DISK_SIZE as u32));
    assert_eq!(events(&mut conn).len(), 2);
    assert!(drain(&mut conn).is_empty());
}

#[test]
fn disc_ends_the_session_cleanly_after_in_flight_requests_are_answered() {
    let mut conn = disk(false);
    conn.receive(&request(0, CMD_READ, 1, 0, 512));
    let mut bytes = request(0, CMD_DISC, 2, 0, 0);
    bytes.extend(request(0, CMD_READ, 3, 0, 512)); // after DISC: ignored
    conn.receive(&bytes);
    let evs = events(&mut conn);
    assert_eq!(evs.len(), 2);
    assert!(matches!(&evs[0], Event::Request(r) if r.handle == 1));
    assert_eq!(
        evs[1],
        Event::Disconnect {
            reason: "client sent NBD_CMD_DISC".into(),
            clean: true
        }
    );
    assert!(conn.is_closing());
    assert!(!conn.should_close(), "a request is still in flight");
    conn.receive(&request(0, CMD_READ, 4, 0, 512));
    no_events(&mut conn);
    assert_eq!(conn.input_buffered_bytes(), 0);
    conn.reply_read(1, vec![0; 512]);
    assert!(!conn.should_close(), "its reply is not written yet");
    assert_eq!(drain(&mut conn).len(), 16 + 512);
    assert!(conn.should_close());
}

#[test]
fn wrong_request_magic_disconnects() {
    for magic in [0x1256_0953u32, 0x21e4_1c71, 0] {
        let mut conn = disk(false);
        let mut bytes = request(0, CMD_READ, 1, 0, 512);
        bytes[0..4].copy_from_slice(&magic.to_be_bytes());
        conn.receive(&bytes);
        match &events(&mut conn)[..] {
            [
                Event::Disconnect {
                    reason,
                    clean: false,
                },
            ] => assert!(reason.contains("magic")),
            other => panic!("{other:?}"),
        }
        assert!(conn.should_close());
    }
}

/// Sends one request (with `payload` for writes) and returns what it was
/// answered with, checking nothing reached the executor.
fn refused(conn: &mut Connection, flags: u16, command: u16, offset: u64, len: u32) -> Vec<u8> {
    let mut bytes = request(flags, command, 77, offset, len);
    if command == CMD_WRITE {
        bytes.extend(vec![0x5a; len as usize]);
    }
    conn.receive(&bytes);
    no_events(conn);
    assert_eq!(conn.requests_in_flight(), 0);
    drain(conn)
}

/// Each refusal: (what, flags, command, offset, length, error).
fn refusal_cases() -> Vec<(&'static str, u16, u16, u64, u32, u32)> {
    let end = DISK_SIZE;
    vec![
        ("CACHE is not supported", 0, CMD_CACHE, 0, 512, EINVAL),
        ("unknown command", 0, 99, 0, 512, EINVAL),
        ("RESIZE is not supported", 0, 8, 0, 0, EINVAL),
        ("DF is not advertised", FLAG_DF, CMD_READ, 0, 512, EINVAL),
        ("REQ_ONE on READ", FLAG_REQ_ONE, CMD_READ, 0, 512, EINVAL),
        ("NO_HOLE on WRITE", FLAG_NO_HOLE, CMD_WRITE, 0, 512, EINVAL),
        ("NO_HOLE on TRIM", FLAG_NO_HOLE, CMD_TRIM, 0, 512, EINVAL),
        ("unknown flag bit", 0x40, CMD_READ, 0, 512, EINVAL),
        (
            "FAST_ZERO is not advertised",
            FLAG_FAST_ZERO,
            CMD_WRITE_ZEROES,
            0,
            512,
            EINVAL,
        ),
        (
            "FAST_ZERO on TRIM",
            FLAG_FAST_ZERO,
            CMD_TRIM,
            0,
            512,
            EINVAL,
        ),
        ("FLUSH with an offset", 0, CMD_FLUSH, 512, 0, EINVAL),
        ("FLUSH with a length", 0, CMD_FLUSH, 0, 512, EINVAL),
        (
            "BLOCK_STATUS without a context",
            0,
            CMD_BLOCK_STATUS,
            0,
            512,
            EINVAL,
        ),
        ("unaligned READ offset", 0, CMD_READ, 100, 512, EINVAL),
        ("unaligned READ length", 0, CMD_READ, 0, 100, EINVAL),
        ("unaligned WRITE", 0, CMD_WRITE, 0, 513, EINVAL),
        ("unaligned TRIM", 0, CMD_TRIM, 1, 512, EINVAL),
        (
            "unaligned WRITE_ZEROES",
            0,
            CMD_WRITE_ZEROES,
            0,
            1000,
            EINVAL,
        ),
        (
            "READ above max payload",
            0,
            CMD_READ,
            0,
            DISK_MAX + 512,
            EINVAL,
        ),
        (
            "WRITE above max payload",
            0,
            CMD_WRITE,
            0,
            DISK_MAX + 512,
            EINVAL,
        ),
        ("READ past the end", 0, CMD_READ, end - 512, 1024, EINVAL),
        (
            "READ starting past the end",
            0,
            CMD_READ,
            end + 512,
            0,
            EINVAL,
        ),
        (
            "READ overflowing u64",
            0,
            CMD_READ,
            u64::MAX - 511,
            1024,
            EINVAL,
        ),
        ("TRIM past the end", 0, CMD_TRIM, end, 512, EINVAL),
        ("WRITE past the end", 0, CMD_WRITE, end - 512, 1024, ENOSPC),
        (
            "WRITE_ZEROES past the end",
            0,
            CMD_WRITE_ZEROES,
            end - 512,
            1024,
            ENOSPC,
        ),
        (
            "WRITE_ZEROES overflowing u64",
            0,
            CMD_WRITE_ZEROES,
            u64::MAX - 511,
            1024,
            ENOSPC,
        ),
    ]
}

#[test]
fn refusals_with_simple_replies() {
    for (what, flags, command, offset, len, error) in refusal_cases() {
        let mut conn = disk(false);
        assert_eq!(
            refused(&mut conn, flags, command, offset, len),
            simple_reply(error, 77),
            "{what}"
        );
        // The stream is still in sync: the next request parses.
        conn.receive(&request(0, CMD_READ, 78, 0, 512));
        assert_eq!(one_request(&mut conn).handle, 78, "{what}");
    }
}

#[test]
fn refusals_with_structured_replies_are_error_chunks_with_messages() {
    for (what, flags, command, offset, len, error) in refusal_cases() {
        let mut conn = disk(true);
        let bytes = refused(&mut conn, flags, command, offset, len);
        let message = expect_error_chunk(&bytes, 77, error);
        assert!(!message.is_empty(), "{what}");
        conn.receive(&request(0, CMD_READ, 78, 0, 512));
        assert_eq!(one_request(&mut conn).handle, 78, "{what}");
    }
}

#[test]
fn structured_error_chunk_is_byte_exact() {
    let mut conn = disk(true);
    let bytes = refused(&mut conn, 0, CMD_READ, 0, 100);
    let message = b"NBD_CMD_READ offset 0 length 100 is not aligned to the minimum block size 512";
    let mut payload = vec![0, 0, 0, 22, 0, message.len() as u8];
    payload.extend_from_slice(message);
    assert_eq!(
        bytes,
        chunk(REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 77, &payload)
    );
}

#[test]
fn write_class_commands_on_a_read_only_export_are_eperm_and_payload_skipped() {
    for structured in [false, true] {
        let mut conn = ready("ro", structured, &[]).0;
        for (command, len) in [
            (CMD_WRITE, 4096),
            (CMD_TRIM, 4096),
            (CMD_WRITE_ZEROES, 8192),
        ] {
            let bytes = refused(&mut conn, 0, command, 0, len);
            if structured {
                expect_error_chunk(&bytes, 77, EPERM);
            } else {
                assert_eq!(bytes, simple_reply(EPERM, 77));
            }
        }
        // Reads and flushes work.
        conn.receive(&request(0, CMD_READ, 1, 4096, 4096));
        conn.receive(&request(0, CMD_FLUSH, 2, 0, 0));
        assert_eq!(events(&mut conn).len(), 2);
    }
}

#[test]
fn read_only_export_checks_alignment_to_its_own_minimum() {
    let mut conn = ready("ro", false, &[]).0;
    assert_eq!(
        refused(&mut conn, 0, CMD_READ, 512, 4096),
        simple_reply(EINVAL, 77)
    );
    assert_eq!(
        refused(&mut conn, 0, CMD_READ, 0, 64 * 1024),
        simple_reply(EINVAL, 77),
        "above max"
    );
}

#[test]
fn refused_write_payload_is_skipped_even_fed_byte_by_byte() {
    let mut conn = disk(false);
    let mut bytes = request(0, CMD_WRITE, 1, DISK_SIZE, 4096); // past the end
    bytes.extend(vec![0x25; 4096]); // payload that looks like request magic
    bytes.extend(request(0, CMD_READ, 2, 0, 512));
    for b in &bytes {
        conn.receive(std::slice::from_ref(b));
        assert!(conn.input_buffered_bytes() < 28);
    }
    assert_eq!(one_request(&mut conn).handle, 2);
    assert_eq!(drain(&mut conn), simple_reply(ENOSPC, 1));
}

#[test]
fn write_above_the_skip_limit_disconnects() {
    let mut conn = disk(false);
    conn.receive(&request(
        0,
        CMD_WRITE,
        1,
        0,
        tierlab_nbd::WRITE_DISCARD_BYTES_MAX + 512,
    ));
    match &events(&mut conn)[..] {
        [
            Event::Disconnect {
                clean: false,
                reason,
            },
        ] => assert!(reason.contains("NBD_CMD_WRITE")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn block_status_without_structured_replies_is_einval() {
    let mut conn = disk(false);
    assert_eq!(
        refused(&mut conn, 0, CMD_BLOCK_STATUS, 0, 512),
        simple_reply(EINVAL, 77)
    );
}

#[test]
fn zero_length_requests_succeed_without_the_executor() {
    let mut conn = disk(false);
    for (handle, command) in [
        (1, CMD_READ),
        (2, CMD_WRITE),
        (3, CMD_TRIM),
        (4, CMD_WRITE_ZEROES),
    ] {
        conn.receive(&request(0, command, handle, 512, 0));
        no_events(&mut conn);
        assert_eq!(drain(&mut conn), simple_reply(0, handle));
    }
    // Structured: a zero-length read cannot be an OFFSET_DATA chunk; it is NONE.
    let mut conn = disk_with_contexts();
    conn.receive(&request(0, CMD_READ, 5, 0, 0));
    no_events(&mut conn);
    assert_eq!(
        drain(&mut conn),
        chunk(REPLY_FLAG_DONE, REPLY_TYPE_NONE, 5, &[])
    );
    conn.receive(&request(0, CMD_WRITE, 6, 0, 0));
    assert_eq!(drain(&mut conn), simple_reply(0, 6));
    // Zero-length block status has no valid reply: EINVAL.
    conn.receive(&request(0, CMD_BLOCK_STATUS, 7, 0, 0));
    no_events(&mut conn);
    expect_error_chunk(&drain(&mut conn), 7, EINVAL);
}

#[test]
fn zero_length_requests_are_still_checked() {
    let mut conn = disk(false);
    assert_eq!(
        refused(&mut conn, 0, CMD_READ, DISK_SIZE + 512, 0),
        simple_reply(EINVAL, 77)
    );
    assert_eq!(
        refused(&mut conn, 0, CMD_WRITE, 100, 0),
        simple_reply(EINVAL, 77)
    );
    let mut ro = ready("ro", false, &[]).0;
    assert_eq!(
        refused(&mut ro, 0, CMD_WRITE, 0, 0),
        simple_reply(EPERM, 77)
    );
}

#[test]
fn a_duplicate_in_flight_handle_is_refused_and_reuse_after_reply_is_fine() {
    let mut conn = disk(false);
    conn.receive(&request(0, CMD_READ, 9, 0, 512));
    one_request(&mut conn);
    // Same cookie while the first is in flight: EINVAL, the write's payload skipped.
    conn.receive(&write_request(0, 9, 512, &[1; 512]));
    no_events(&mut conn);
    assert_eq!(drain(&mut conn), simple_reply(EINVAL, 9));
    assert_eq!(conn.requests_in_flight(), 1);
    conn.reply_read(9, vec![0; 512]);
    drain(&mut conn);
    // Once answered, the cookie may be reused.
    conn.receive(&write_request(0, 9, 512, &[1; 512]));
    assert!(matches!(
        one_request(&mut conn).command,
        Command::Write { .. }
    ));
}

#[test]
fn replies_go_out_in_the_order_given_not_the_order_requested() {
    let mut conn = disk(false);
    conn.receive(&request(0, CMD_READ, 1, 0, 512));
    conn.receive(&request(0, CMD_FLUSH, 2, 0, 0));
    conn.receive(&request(0, CMD_TRIM, 3, 0, 512));
    assert_eq!(events(&mut conn).len(), 3);
    conn.reply_error(3, Errno::Io);
    conn.reply_ok(2);
    conn.reply_read(1, vec![9; 512]);
    let mut expected = simple_reply(EIO, 3);
    expected.extend(simple_reply(0, 2));
    expected.extend(simple_reply(0, 1));
    expected.extend(vec![9; 512]);
    assert_eq!(drain(&mut conn), expected);
    assert_eq!(conn.requests_in_flight(), 0);
}

#[test]
fn executor_errors_are_simple_or_structured() {
    let mut conn = disk(false);
    conn.receive(&request(0, CMD_READ, 1, 0, 512));
    events(&mut conn);
    conn.reply_error(1, Errno::Io);
    assert_eq!(
        drain(&mut conn),
        simple_reply(EIO, 1),
        "no data after a simple read error"
    );

    let mut conn = disk(true);
    conn.receive(&write_request(0, 2, 0, &[0; 512]));
    conn.receive(&request(0, CMD_READ, 3, 0, 512));
    events(&mut conn);
    conn.reply_error(2, Errno::NoSpc);
    assert_eq!(
        drain(&mut conn),
        chunk(REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 2, &[0, 0, 0, 28, 0, 0])
    );
    conn.reply_error_message(3, Errno::Io, "media error");
    let mut payload = vec![0, 0, 0, 5, 0, 11];
    payload.extend_from_slice(b"media error");
    assert_eq!(
        drain(&mut conn),
        chunk(REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 3, &payload)
    );
}

#[test]
fn errno_values_are_the_protocols() {
    let values: Vec<u32> = [
        Errno::Perm,
        Errno::Io,
        Errno::NoMem,
        Errno::Inval,
        Errno::NoSpc,
        Errno::Overflow,
        Errno::NotSup,
        Errno::Shutdown,
    ]
    .iter()
    .map(|e| e.value())
    .collect();
    assert_eq!(values, vec![1, 5, 12, 22, 28, 75, 95, 108]);
}

fn extents_bytes(id: u32, extents: &[(u32, u32)]) -> Vec<u8> {
    let mut out = id.to_be_bytes().to_vec();
    for (len, flags) in extents {
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
    out
}

fn block_status(conn: &mut Connection, flags: u16, offset: u64, len: u32) -> u64 {
    conn.receive(&request(flags, CMD_BLOCK_STATUS, 50, offset, len));
    let req = one_request(conn);
    assert!(matches!(req.command, Command::BlockStatus { .. }));
    req.handle
}

#[test]
fn block_status_is_one_chunk_per_context_done_on_the_last() {
    let mut conn = disk_with_contexts();
    let handle = block_status(&mut conn, 0, 0, 8192);
    let allocation = [
        Extent {
            len_bytes: 4096,
            flags: 0,
        },
        Extent {
            len_bytes: 4096,
            flags: STATE_HOLE | STATE_ZERO,
        },
    ];
    let tier = [Extent {
        len_bytes: 8192,
        flags: 1,
    }];
    // Executor order is free; chunks follow the negotiated order.
    conn.reply_block_status(handle, &[(2, &tier), (1, &allocation)]);
    let mut expected = chunk(
        0,
        REPLY_TYPE_BLOCK_STATUS,
        50,
        &extents_bytes(1, &[(4096, 0), (4096, 3)]),
    );
    expected.extend(chunk(
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        50,
        &extents_bytes(2, &[(8192, 1)]),
    ));
    assert_eq!(drain(&mut conn), expected);
    assert_eq!(conn.requests_in_flight(), 0);
}

#[test]
fn block_status_with_one_context() {
    let (mut conn, _) = ready("disk", true, &["tierlab:tier"]);
    let handle = block_status(&mut conn, 0, 512, 512);
    conn.reply_block_status(
        handle,
        &[(
            2,
            &[Extent {
                len_bytes: 512,
                flags: 0,
            }],
        )],
    );
    assert_eq!(
        drain(&mut conn),
        chunk(
            REPLY_FLAG_DONE,
            REPLY_TYPE_BLOCK_STATUS,
            50,
            &extents_bytes(2, &[(512, 0)])
        )
    );
}

fn one_context_reply(conn: &mut Connection, handle: u64, extents: &[Extent]) -> Vec<(u32, u32)> {
    conn.reply_block_status(handle, &[(1, extents)]);
    let bytes = drain(conn);
    let (chunk, rest) = parse_chunk(&bytes);
    assert!(rest.is_empty());
    assert_eq!(chunk.flags, REPLY_FLAG_DONE);
    assert_eq!(chunk.reply_type, REPLY_TYPE_BLOCK_STATUS);
    assert_eq!((chunk.payload.len() - 4) % 8, 0);
    assert_eq!(&chunk.payload[0..4], &1u32.to_be_bytes());
    chunk.payload[4..]
        .chunks(8)
        .map(|e| {
            (
                u32::from_be_bytes(e[0..4].try_into().unwrap()),
                u32::from_be_bytes(e[4..8].try_into().unwrap()),
            )
        })
        .collect()
}

#[test]
fn block_status_req_one_sends_one_extent_clamped_to_the_request() {
    let (mut conn, _) = ready("disk", true, &["base:allocation"]);
    let handle = block_status(&mut conn, FLAG_REQ_ONE, 0, 4096);
    let extents = [
        Extent {
            len_bytes: 65536,
            flags: 2,
        },
        Extent {
            len_bytes: 512,
            flags: 0,
        },
    ];
    assert_eq!(
        one_context_reply(&mut conn, handle, &extents),
        vec![(4096, 2)]
    );
}

#[test]
fn block_status_extents_after_the_request_end_are_dropped() {
    let (mut conn, _) = ready("disk", true, &["base:allocation"]);
    let handle = block_status(&mut conn, 0, 0, 1024);
    let extents = [
        Extent {
            len_bytes: 512,
            flags: 0,
        },
        Extent {
            len_bytes: 4096,
            flags: 1,
        }, // reaches past the end: allowed as the last
        Extent {
            len_bytes: 512,
            flags: 0,
        },
    ];
    assert_eq!(
        one_context_reply(&mut conn, handle, &extents),
        vec![(512, 0), (4096, 1)]
    );

    let handle = block_status(&mut conn, 0, 0, 1024);
    let extents = [
        Extent {
            len_bytes: 512,
            flags: 0,
        },
        Extent {
            len_bytes: 512,
            flags: 3,
        },
        Extent {
            len_bytes: 512,
            flags: 0,
        },
    ];
    assert_eq!(
        one_context_reply(&mut conn, handle, &extents),
        vec![(512, 0), (512, 3)]
    );
}

#[test]
fn block_status_last_extent_is_clamped_to_the_export_end() {
    let (mut conn, _) = ready("disk", true, &["base:allocation"]);
    let handle = block_status(&mut conn, 0, DISK_SIZE - 1024, 1024);
    let extents = [
        Extent {
            len_bytes: 512,
            flags: 0,
        },
        Extent {
            len_bytes: 1 << 20,
            flags: 3,
        },
    ];
    assert_eq!(
        one_context_reply(&mut conn, handle, &extents),
        vec![(512, 0), (512, 3)]
    );
}

#[test]
fn block_status_may_describe_less_than_asked() {
    let (mut conn, _) = ready("disk", true, &["base:allocation"]);
    let handle = block_status(&mut conn, 0, 0, 1 << 19);
    assert_eq!(
        one_context_reply(
            &mut conn,
            handle,
            &[Extent {
                len_bytes: 512,
                flags: 0
            }]
        ),
        vec![(512, 0)]
    );
}

#[test]
fn block_status_extent_count_respects_the_maximum_payload() {
    // 64 KiB maximum payload: at most 8192 descriptors in one chunk.
    let (mut conn, _) = ready("disk", true, &["base:allocation"]);
    let handle = block_status(&mut conn, 0, 0, DISK_SIZE as u32);
    // 64-byte extents (finer than the spec's SHOULD, but not refused): 16384 of them.
    let extents: Vec<Extent> = (0..(DISK_SIZE / 64))
        .map(|i| Extent {
            len_bytes: 64,
            flags: (i % 2) as u32,
        })
        .collect();
    let sent = one_context_reply(&mut conn, handle, &extents);
    assert_eq!(sent.len(), DISK_MAX as usize / 8);
}

#[test]
fn write_payload_is_received_in_place_through_recv_buffer() {
    let mut conn = disk(false);
    conn.receive(&request(FLAG_FUA, CMD_WRITE, 1, 0, DISK_MAX));
    no_events(&mut conn);
    // The lent buffer is the payload itself (exactly what remains of it).
    let buf = conn.recv_buffer(4096);
    assert_eq!(buf.len(), DISK_MAX as usize);
    buf[..1000].fill(1);
    let payload_ptr = buf.as_ptr();
    conn.filled(1000);
    assert_eq!(conn.input_buffered_bytes(), 1000);
    let buf = conn.recv_buffer(4096);
    assert_eq!(buf.len(), DISK_MAX as usize - 1000);
    buf.fill(2);
    let n = buf.len();
    conn.filled(n);
    let Some(Event::Request(Request {
        command: Command::Write { data, .. },
        ..
    })) = conn.poll_event()
    else {
        panic!("a write request");
    };
    assert_eq!(
        data.as_ptr(),
        payload_ptr,
        "no copy between recv and the request"
    );
    assert!(data[..1000].iter().all(|&b| b == 1) && data[1000..].iter().all(|&b| b == 2));
    assert_eq!(conn.input_buffered_bytes(), 0);
}

#[test]
fn recv_buffer_falls_back_to_the_input_buffer_for_a_short_payload_tail() {
    let mut conn = disk(false);
    let mut bytes = write_request(0, 1, 0, &[3; 1024]);
    bytes.extend(request(0, CMD_READ, 2, 0, 512));
    // Header plus part of the payload, then the rest through recv_buffer(4096).
    conn.receive(&bytes[..100]);
    let rest = &bytes[100..];
    let buf = conn.recv_buffer(4096);
    assert!(
        buf.len() >= 4096,
        "the 952-byte tail is short of min: the input buffer is lent"
    );
    buf[..rest.len()].copy_from_slice(rest);
    conn.filled(rest.len());
    let evs = events(&mut conn);
    assert_eq!(evs.len(), 2);
    assert!(
        matches!(&evs[0], Event::Request(Request { command: Command::Write { data, .. }, .. }) if data == &vec![3; 1024])
    );
}

#[test]
fn output_can_be_consumed_in_odd_pieces() {
    let mut conn = disk(true);
    for handle in 0..20u64 {
        conn.receive(&request(0, CMD_READ, handle, handle * 512, 512));
    }
    events(&mut conn);
    let mut expected = Vec::new();
    for handle in 0..20u64 {
        conn.reply_read(handle, vec![handle as u8; 512]);
        let mut payload = (handle * 512).to_be_bytes().to_vec();
        payload.extend(vec![handle as u8; 512]);
        expected.extend(chunk(
            REPLY_FLAG_DONE,
            REPLY_TYPE_OFFSET_DATA,
            handle,
            &payload,
        ));
    }
    let mut got = Vec::new();
    while conn.output_len() > 0 {
        let piece = {
            let mut slices = Vec::new();
            conn.output(&mut slices);
            let first = &slices[0];
            let n = first.len().min(13);
            got.extend_from_slice(&first[..n]);
            n
        };
        conn.consume_output(piece);
    }
    assert_eq!(got, expected);
}

#[test]
fn replies_after_a_protocol_violation_are_dropped() {
    let mut conn = disk(false);
    conn.receive(&request(0, CMD_READ, 1, 0, 512));
    events(&mut conn);
    conn.receive(&[0xff; 28]);
    assert!(matches!(
        &events(&mut conn)[..],
        [Event::Disconnect { clean: false, .. }]
    ));
    assert!(conn.should_close(), "in-flight requests are not waited for");
    conn.reply_read(1, vec![0; 512]);
    assert_eq!(conn.output_len(), 0);
    assert_eq!(conn.requests_in_flight(), 0);
}
