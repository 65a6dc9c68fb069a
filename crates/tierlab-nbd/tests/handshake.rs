//! The fixed newstyle handshake, option by option, with byte-exact replies.

mod common;

use common::*;
use tierlab_nbd::{
    Connection, Event, OPTION_DATA_BYTES_MAX, OPTION_DISCARD_BYTES_MAX, OPTIONS_COUNT_MAX,
};

fn be64(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

fn expect_disconnect(conn: &mut Connection, reason_contains: &str) {
    let evs = events(conn);
    match evs.as_slice() {
        [
            Event::Disconnect {
                reason,
                clean: false,
            },
        ] => {
            assert!(
                reason.contains(reason_contains),
                "reason {reason:?} lacks {reason_contains:?}"
            )
        }
        other => panic!("expected one unclean Disconnect, got {other:?}"),
    }
    assert!(conn.is_closing());
    assert!(!conn.in_transmission());
}

#[test]
fn greeting_is_nbdmagic_ihaveopt_and_handshake_flags() {
    let mut conn = Connection::new(exports());
    let bytes = drain(&mut conn);
    assert_eq!(
        bytes,
        [
            0x4e, 0x42, 0x44, 0x4d, 0x41, 0x47, 0x49, 0x43, // NBDMAGIC
            0x49, 0x48, 0x41, 0x56, 0x45, 0x4f, 0x50, 0x54, // IHAVEOPT
            0x00, 0x03, // NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES
        ]
    );
    assert!(!conn.is_closing());
    assert!(events(&mut conn).is_empty());
}

#[test]
fn client_without_fixed_newstyle_is_disconnected() {
    let mut conn = Connection::new(exports());
    drain(&mut conn);
    conn.receive(&0u32.to_be_bytes());
    expect_disconnect(&mut conn, "FIXED_NEWSTYLE");
    assert!(drain(&mut conn).is_empty());
    assert!(conn.should_close());
    // Nothing more is parsed.
    conn.receive(&option(OPT_LIST, &[]));
    assert!(events(&mut conn).is_empty());
    assert!(drain(&mut conn).is_empty());
}

#[test]
fn client_with_unknown_flag_bits_is_disconnected() {
    for flags in [
        C_FIXED_NEWSTYLE | 4,
        C_FIXED_NEWSTYLE | C_NO_ZEROES | 0x8000_0000,
    ] {
        let mut conn = Connection::new(exports());
        drain(&mut conn);
        conn.receive(&flags.to_be_bytes());
        expect_disconnect(&mut conn, "bits other than");
    }
}

#[test]
fn export_name_sends_size_flags_and_124_zeroes_without_no_zeroes() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    conn.receive(&option(OPT_EXPORT_NAME, b"disk"));
    let bytes = drain(&mut conn);
    let mut expected = be64(DISK_SIZE).to_vec();
    expected.extend_from_slice(&TFLAGS_RW.to_be_bytes());
    expected.extend_from_slice(&[0u8; 124]);
    assert_eq!(bytes, expected);
    assert_eq!(
        events(&mut conn),
        vec![Event::Ready {
            export: 0,
            structured_replies: false,
            meta_contexts: vec![]
        }]
    );
    assert!(conn.in_transmission());
}

#[test]
fn export_name_honours_no_zeroes() {
    let mut conn = connect(C_FIXED_NEWSTYLE | C_NO_ZEROES);
    conn.receive(&option(OPT_EXPORT_NAME, b"ro"));
    let mut expected = be64(RO_SIZE).to_vec();
    expected.extend_from_slice(&TFLAGS_RO_MULTI.to_be_bytes());
    assert_eq!(drain(&mut conn), expected);
    assert!(matches!(
        events(&mut conn)[..],
        [Event::Ready { export: 1, .. }]
    ));
}

#[test]
fn export_name_empty_selects_the_default_export() {
    let mut conn = connect(C_FIXED_NEWSTYLE | C_NO_ZEROES);
    conn.receive(&option(OPT_EXPORT_NAME, b""));
    assert_eq!(&drain(&mut conn)[..8], &be64(DISK_SIZE));
    assert!(matches!(
        events(&mut conn)[..],
        [Event::Ready { export: 0, .. }]
    ));
}

#[test]
fn export_name_unknown_disconnects_as_it_cannot_error() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    conn.receive(&option(OPT_EXPORT_NAME, b"nope"));
    assert!(drain(&mut conn).is_empty());
    expect_disconnect(&mut conn, "unknown export");
}

#[test]
fn export_name_longer_than_4096_disconnects() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    conn.receive(&option(OPT_EXPORT_NAME, &[b'a'; 4097]));
    expect_disconnect(&mut conn, "4097-byte name");
}

#[test]
fn wrong_option_magic_disconnects() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let mut bytes = option(OPT_LIST, &[]);
    bytes[0] ^= 0xff;
    conn.receive(&bytes);
    expect_disconnect(&mut conn, "IHAVEOPT");
    assert!(drain(&mut conn).is_empty());
}

#[test]
fn requests_before_go_are_not_requests() {
    // A request header in the handshake is a bad option magic.
    let mut conn = connect(C_FIXED_NEWSTYLE);
    conn.receive(&request(0, CMD_READ, 1, 0, 512));
    expect_disconnect(&mut conn, "IHAVEOPT");
}

#[test]
fn abort_is_acknowledged_then_the_session_ends_cleanly() {
    for data in [&[][..], &b"ignored"[..]] {
        let mut conn = connect(C_FIXED_NEWSTYLE);
        conn.receive(&option(OPT_ABORT, data));
        assert_eq!(drain(&mut conn), option_reply(OPT_ABORT, REP_ACK, &[]));
        assert_eq!(
            events(&mut conn),
            vec![Event::Disconnect {
                reason: "client sent NBD_OPT_ABORT".into(),
                clean: true
            }]
        );
        assert!(conn.is_closing());
        assert!(conn.should_close());
    }
}

#[test]
fn abort_waits_for_its_ack_to_be_written() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    conn.receive(&option(OPT_ABORT, &[]));
    assert!(conn.is_closing());
    assert!(!conn.should_close(), "the ACK is still pending");
    drain(&mut conn);
    assert!(conn.should_close());
}

#[test]
fn list_sends_one_server_reply_per_export_then_ack() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    conn.receive(&option(OPT_LIST, &[]));
    let mut expected = Vec::new();
    // NBD_REP_SERVER: u32 name length, name, then the description.
    expected.extend(option_reply(
        OPT_LIST,
        REP_SERVER,
        b"\x00\x00\x00\x04diskthe disk",
    ));
    expected.extend(option_reply(OPT_LIST, REP_SERVER, b"\x00\x00\x00\x02ro"));
    expected.extend(option_reply(OPT_LIST, REP_ACK, &[]));
    assert_eq!(drain(&mut conn), expected);
    assert!(events(&mut conn).is_empty());
}

#[test]
fn list_with_data_is_invalid() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_LIST, b"x");
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
    // Still negotiating.
    assert_eq!(send_option(&mut conn, OPT_LIST, &[]).len(), 3);
}

fn info_export_bytes(size: u64, flags: u16) -> Vec<u8> {
    let mut data = INFO_EXPORT.to_be_bytes().to_vec();
    data.extend_from_slice(&size.to_be_bytes());
    data.extend_from_slice(&flags.to_be_bytes());
    data
}

fn info_block_size_bytes(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut data = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    data.extend_from_slice(&min.to_be_bytes());
    data.extend_from_slice(&preferred.to_be_bytes());
    data.extend_from_slice(&max.to_be_bytes());
    data
}

#[test]
fn info_replies_export_requested_name_and_description_block_size_and_ack() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    conn.receive(&option(
        OPT_INFO,
        &info_data("disk", &[INFO_NAME, INFO_DESCRIPTION]),
    ));
    let mut expected = Vec::new();
    expected.extend(option_reply(
        OPT_INFO,
        REP_INFO,
        &info_export_bytes(DISK_SIZE, TFLAGS_RW),
    ));
    expected.extend(option_reply(OPT_INFO, REP_INFO, b"\x00\x01disk"));
    expected.extend(option_reply(OPT_INFO, REP_INFO, b"\x00\x02the disk"));
    expected.extend(option_reply(
        OPT_INFO,
        REP_INFO,
        &info_block_size_bytes(512, 4096, DISK_MAX),
    ));
    expected.extend(option_reply(OPT_INFO, REP_ACK, &[]));
    assert_eq!(drain(&mut conn), expected);
    // INFO does not enter transmission.
    assert!(events(&mut conn).is_empty());
    assert!(!conn.in_transmission());
}

#[test]
fn info_always_sends_block_size_even_unrequested() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_INFO, &info_data("ro", &[]));
    let kinds: Vec<_> = replies
        .iter()
        .map(|r| (r.reply_type, r.data.clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (REP_INFO, info_export_bytes(RO_SIZE, TFLAGS_RO_MULTI)),
            (REP_INFO, info_block_size_bytes(4096, 4096, 32 * 1024)),
            (REP_ACK, vec![]),
        ]
    );
}

#[test]
fn info_name_for_the_default_export_is_its_canonical_name() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_INFO, &info_data("", &[INFO_NAME]));
    assert!(
        replies
            .iter()
            .any(|r| r.reply_type == REP_INFO && r.data == b"\x00\x01disk")
    );
}

#[test]
fn go_replies_like_info_then_enters_transmission() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    conn.receive(&option(OPT_GO, &info_data("disk", &[INFO_BLOCK_SIZE])));
    let mut expected = Vec::new();
    expected.extend(option_reply(
        OPT_GO,
        REP_INFO,
        &info_export_bytes(DISK_SIZE, TFLAGS_RW),
    ));
    expected.extend(option_reply(
        OPT_GO,
        REP_INFO,
        &info_block_size_bytes(512, 4096, DISK_MAX),
    ));
    expected.extend(option_reply(OPT_GO, REP_ACK, &[]));
    // No zero padding after GO's ACK, whatever NO_ZEROES says.
    assert_eq!(drain(&mut conn), expected);
    assert_eq!(
        events(&mut conn),
        vec![Event::Ready {
            export: 0,
            structured_replies: false,
            meta_contexts: vec![]
        }]
    );
    assert!(conn.in_transmission());
}

#[test]
fn go_without_block_size_request_is_accepted() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_GO, &info_data("ro", &[]));
    assert_eq!(replies.last().unwrap().reply_type, REP_ACK);
    assert!(matches!(
        events(&mut conn)[..],
        [Event::Ready { export: 1, .. }]
    ));
}

#[test]
fn go_unknown_export_is_refused_and_negotiation_continues() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_GO, &info_data("missing", &[]));
    assert_eq!(replies.len(), 1, "no NBD_REP_INFO before an UNKNOWN error");
    assert_eq!(replies[0].reply_type, REP_ERR_UNKNOWN);
    assert!(
        std::str::from_utf8(&replies[0].data)
            .unwrap()
            .contains("missing")
    );
    assert!(!conn.in_transmission());
    let replies = send_option(&mut conn, OPT_GO, &info_data("", &[]));
    assert_eq!(replies.last().unwrap().reply_type, REP_ACK);
    assert!(conn.in_transmission());
}

#[test]
fn go_and_info_with_bad_lengths_are_invalid() {
    let good = info_data("disk", &[INFO_NAME]);
    let mut name_too_long = good.clone();
    name_too_long[3] = 200; // name length past the data
    let mut trailing = good.clone();
    trailing.push(0);
    let mut count_too_big = good.clone();
    let count_at = 4 + 4;
    count_too_big[count_at + 1] = 2; // two requests, one present
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("shorter than 6", vec![0, 0, 0, 0, 0]),
        ("name length past end", name_too_long),
        ("trailing byte", trailing),
        ("count past end", count_too_big),
    ];
    for opt in [OPT_INFO, OPT_GO] {
        for (what, data) in &cases {
            let mut conn = connect(C_FIXED_NEWSTYLE);
            let replies = send_option(&mut conn, opt, data);
            assert_eq!(replies.len(), 1, "{what}");
            assert_eq!(replies[0].reply_type, REP_ERR_INVALID, "{what}");
            assert!(!conn.in_transmission(), "{what}");
            assert!(!conn.is_closing(), "{what}");
        }
    }
}

#[test]
fn structured_reply_is_acked_once() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    conn.receive(&option(OPT_STRUCTURED_REPLY, &[]));
    assert_eq!(
        drain(&mut conn),
        option_reply(OPT_STRUCTURED_REPLY, REP_ACK, &[])
    );
    let again = send_option(&mut conn, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(again[0].reply_type, REP_ERR_INVALID);
    let (_, ready) = {
        let replies = send_option(&mut conn, OPT_GO, &info_data("", &[]));
        assert_eq!(replies.last().unwrap().reply_type, REP_ACK);
        ((), events(&mut conn).remove(0))
    };
    assert_eq!(
        ready,
        Event::Ready {
            export: 0,
            structured_replies: true,
            meta_contexts: vec![]
        }
    );
}

#[test]
fn structured_reply_with_data_is_invalid() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_STRUCTURED_REPLY, b"\0");
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
    // Not negotiated by the failed attempt.
    let replies = send_option(&mut conn, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(replies[0].reply_type, REP_ACK);
}

fn meta_reply(id: u32, name: &str) -> Vec<u8> {
    let mut data = id.to_be_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    data
}

fn list_meta(queries: &[&str]) -> Vec<(u32, Vec<u8>)> {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    send_option(&mut conn, OPT_STRUCTURED_REPLY, &[]);
    send_option(
        &mut conn,
        OPT_LIST_META_CONTEXT,
        &meta_data("disk", queries),
    )
    .into_iter()
    .map(|r| (r.reply_type, r.data))
    .collect()
}

#[test]
fn list_meta_context_queries() {
    let all = vec![
        (REP_META_CONTEXT, meta_reply(0, "base:allocation")),
        (REP_META_CONTEXT, meta_reply(0, "tierlab:tier")),
        (REP_ACK, vec![]),
    ];
    assert_eq!(list_meta(&[]), all, "no query lists everything");
    assert_eq!(
        list_meta(&["base:"]),
        vec![
            (REP_META_CONTEXT, meta_reply(0, "base:allocation")),
            (REP_ACK, vec![])
        ]
    );
    assert_eq!(
        list_meta(&["tierlab:"]),
        vec![
            (REP_META_CONTEXT, meta_reply(0, "tierlab:tier")),
            (REP_ACK, vec![])
        ]
    );
    assert_eq!(
        list_meta(&["base:allocation"]),
        vec![
            (REP_META_CONTEXT, meta_reply(0, "base:allocation")),
            (REP_ACK, vec![])
        ]
    );
    assert_eq!(
        list_meta(&["qemu:dirty-bitmap:x", "base:nope"]),
        vec![(REP_ACK, vec![])]
    );
    assert_eq!(
        list_meta(&["tierlab:tier", "base:", "tierlab:"]),
        all,
        "each context once"
    );
}

#[test]
fn list_meta_context_errors() {
    let replies = list_meta(&["nocolon"]);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].0, REP_ERR_INVALID);

    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_LIST_META_CONTEXT, &meta_data("missing", &[]));
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ERR_UNKNOWN);

    let mut data = meta_data("disk", &["base:allocation"]);
    data[8 + 3] = 2; // count 2, one query present
    let replies = send_option(&mut conn, OPT_LIST_META_CONTEXT, &data);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);

    let mut data = meta_data("disk", &["base:allocation"]);
    data.push(0);
    let replies = send_option(&mut conn, OPT_LIST_META_CONTEXT, &data);
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
}

#[test]
fn list_meta_context_works_without_structured_replies() {
    // The spec lets servers refuse this ("MAY"); we answer it (listing changes nothing).
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_LIST_META_CONTEXT, &meta_data("", &[]));
    assert_eq!(replies.len(), 3);
}

#[test]
fn set_meta_context_needs_structured_replies() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(
        &mut conn,
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &["base:allocation"]),
    );
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
}

#[test]
fn set_meta_context_selects_exact_names_with_stable_ids() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    send_option(&mut conn, OPT_STRUCTURED_REPLY, &[]);
    conn.receive(&option(
        OPT_SET_META_CONTEXT,
        &meta_data(
            "disk",
            &[
                "tierlab:tier",
                "x-unknown:foo",
                "base:",
                "base:allocation",
                "tierlab:tier",
            ],
        ),
    ));
    let mut expected = Vec::new();
    expected.extend(option_reply(
        OPT_SET_META_CONTEXT,
        REP_META_CONTEXT,
        &meta_reply(1, "base:allocation"),
    ));
    expected.extend(option_reply(
        OPT_SET_META_CONTEXT,
        REP_META_CONTEXT,
        &meta_reply(2, "tierlab:tier"),
    ));
    expected.extend(option_reply(OPT_SET_META_CONTEXT, REP_ACK, &[]));
    assert_eq!(drain(&mut conn), expected);

    // Again with one name: same id for the same name.
    let replies = send_option(
        &mut conn,
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &["tierlab:tier"]),
    );
    assert_eq!(replies[0].data, meta_reply(2, "tierlab:tier"));
    send_option(&mut conn, OPT_GO, &info_data("disk", &[]));
    assert_eq!(
        events(&mut conn),
        vec![Event::Ready {
            export: 0,
            structured_replies: true,
            meta_contexts: vec![(2, "tierlab:tier".into())]
        }]
    );
}

#[test]
fn set_meta_context_namespace_only_or_empty_selects_nothing() {
    for queries in [&["base:"][..], &[][..]] {
        let mut conn = connect(C_FIXED_NEWSTYLE);
        send_option(&mut conn, OPT_STRUCTURED_REPLY, &[]);
        let replies = send_option(&mut conn, OPT_SET_META_CONTEXT, &meta_data("disk", queries));
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].reply_type, REP_ACK);
    }
}

#[test]
fn meta_contexts_for_another_export_do_not_carry_over() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    send_option(&mut conn, OPT_STRUCTURED_REPLY, &[]);
    send_option(
        &mut conn,
        OPT_SET_META_CONTEXT,
        &meta_data("ro", &["base:allocation"]),
    );
    send_option(&mut conn, OPT_GO, &info_data("disk", &[]));
    assert_eq!(
        events(&mut conn),
        vec![Event::Ready {
            export: 0,
            structured_replies: true,
            meta_contexts: vec![]
        }]
    );
}

#[test]
fn the_default_name_and_the_canonical_name_share_meta_contexts() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    send_option(&mut conn, OPT_STRUCTURED_REPLY, &[]);
    send_option(
        &mut conn,
        OPT_SET_META_CONTEXT,
        &meta_data("", &["base:allocation"]),
    );
    send_option(&mut conn, OPT_GO, &info_data("disk", &[]));
    assert!(matches!(
        &events(&mut conn)[..],
        [Event::Ready { meta_contexts, .. }] if meta_contexts == &vec![(1, "base:allocation".to_string())]
    ));
}

#[test]
fn a_failed_set_meta_context_clears_the_selection() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    send_option(&mut conn, OPT_STRUCTURED_REPLY, &[]);
    send_option(
        &mut conn,
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &["base:allocation"]),
    );
    let replies = send_option(
        &mut conn,
        OPT_SET_META_CONTEXT,
        &meta_data("missing", &["base:allocation"]),
    );
    assert_eq!(replies[0].reply_type, REP_ERR_UNKNOWN);
    send_option(&mut conn, OPT_GO, &info_data("disk", &[]));
    assert!(
        matches!(&events(&mut conn)[..], [Event::Ready { meta_contexts, .. }] if meta_contexts.is_empty())
    );
}

#[test]
fn starttls_is_refused_by_policy() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_STARTTLS, &[]);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ERR_POLICY);
    let replies = send_option(&mut conn, OPT_STARTTLS, b"x");
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
}

#[test]
fn extended_headers_and_unknown_options_are_unsupported_and_skipped() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, OPT_EXTENDED_HEADERS, &[]);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ERR_UNSUP);
    // Options 4 (PEEK_EXPORT, withdrawn), 0 and a made-up one, with data.
    for opt in [4, 0, 0xdead_beef] {
        let replies = send_option(&mut conn, opt, &[7u8; 100]);
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].reply_type, REP_ERR_UNSUP);
    }
    // The next option parses.
    assert_eq!(send_option(&mut conn, OPT_LIST, &[]).len(), 3);
}

#[test]
fn an_error_reply_carries_a_message() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let replies = send_option(&mut conn, 0x1234, &[]);
    let message = String::from_utf8(replies[0].data.clone()).unwrap();
    assert!(message.contains("4660"), "{message}");
}

#[test]
fn option_data_over_the_limit_is_too_big_and_skipped() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let data = vec![0u8; OPTION_DATA_BYTES_MAX + 1];
    // Fed in odd pieces: nothing of it stays buffered.
    let bytes = option(OPT_INFO, &data);
    for piece in bytes.chunks(7001) {
        conn.receive(piece);
        assert!(conn.input_buffered_bytes() < 16);
    }
    let replies = parse_option_replies(&drain(&mut conn));
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].option, OPT_INFO);
    assert_eq!(replies[0].reply_type, REP_ERR_TOO_BIG);
    assert_eq!(send_option(&mut conn, OPT_LIST, &[]).len(), 3);
}

#[test]
fn option_data_at_the_limit_is_parsed() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let mut data = meta_data("disk", &[]);
    data.resize(OPTION_DATA_BYTES_MAX, 0); // trailing bytes: parsed, found invalid
    let replies = send_option(&mut conn, OPT_LIST_META_CONTEXT, &data);
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
}

#[test]
fn option_data_beyond_the_skip_limit_disconnects() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    let mut header = IHAVEOPT.to_vec();
    header.extend_from_slice(&0x99u32.to_be_bytes());
    header.extend_from_slice(&(OPTION_DISCARD_BYTES_MAX as u32 + 1).to_be_bytes());
    conn.receive(&header);
    expect_disconnect(&mut conn, "more than");
}

#[test]
fn too_many_options_disconnect() {
    let mut conn = connect(C_FIXED_NEWSTYLE);
    for _ in 0..OPTIONS_COUNT_MAX {
        conn.receive(&option(OPT_STARTTLS, &[]));
    }
    assert!(events(&mut conn).is_empty());
    conn.receive(&option(OPT_STARTTLS, &[]));
    expect_disconnect(&mut conn, "options in one handshake");
}

#[test]
fn pipelined_options_and_requests_in_one_chunk() {
    // A client may send GO and its first request back to back.
    let mut conn = connect(C_FIXED_NEWSTYLE | C_NO_ZEROES);
    let mut bytes = option(OPT_STRUCTURED_REPLY, &[]);
    bytes.extend(option(OPT_GO, &info_data("disk", &[])));
    bytes.extend(request(0, CMD_READ, 9, 0, 512));
    conn.receive(&bytes);
    let evs = events(&mut conn);
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert!(matches!(
        evs[0],
        Event::Ready {
            structured_replies: true,
            ..
        }
    ));
    assert!(matches!(&evs[1], Event::Request(r) if r.handle == 9));
}
