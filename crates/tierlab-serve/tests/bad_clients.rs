//! Clients that break the NBD protocol (or leave at a bad moment), each
//! against a fresh in-process server on a Unix socket, built byte by byte
//! from the protocol document. For every case: the right error reply or a
//! clean disconnect; a client connected *before* the bad one keeps working
//! (its data intact, new IOs served); a client connecting *after* it writes
//! and reads back; and the server stops with `run()` returning Ok, its
//! `protocol_errors` counting exactly the sessions it had to cut.
//!
//! The same client under the `tierlab` binary's SIGPIPE disposition is in
//! sigpipe.rs; a client that never reads its replies does not hold up the
//! stop (the test at the end).

mod common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use common::*;
use tierlab_serve::{ServeOptions, ServeReport};

/// The write-back cache stack: 4 KiB pages, so the export's minimum block
/// is 4096 (unaligned requests can be refused).
const CACHE: &str = "serve-cache.toml";
/// Passthrough over one file (minimum block 512).
const FILE: &str = "serve-file.toml";

/// Where the veteran (connected before the bad client) and the newcomer
/// (connected after) keep their data.
const VETERAN_AT: u64 = 0;
const VETERAN_LATE_AT: u64 = 1 << 20;
const NEWCOMER_AT: u64 = 2 << 20;
const CHECK_BYTES: usize = 64 << 10;

/// Runs `bad` between a veteran client's setup and the checks that the
/// server is unharmed; the server must count `protocol_errors` sessions
/// cut for a violation. Returns the report for case-specific checks.
fn around_bad_client(config: &str, bad: impl FnOnce(&Path), protocol_errors: u64) -> ServeReport {
    let srv = serve_config(config, ServeOptions::default());
    let mut veteran = Client::connect(&srv.sock);
    let before = pattern(1, CHECK_BYTES);
    veteran.write_verify(VETERAN_AT, &before);

    bad(&srv.sock);

    // The veteran's session survived: its data is there, new IO works.
    let back = veteran
        .read(VETERAN_AT, CHECK_BYTES as u32)
        .expect("veteran read");
    assert!(
        back == before,
        "the veteran's data changed after the bad client"
    );
    let late = pattern(2, CHECK_BYTES);
    veteran.write_verify(VETERAN_LATE_AT, &late);

    // A newcomer connects, writes, reads back, and sees the veteran's data.
    let mut newcomer = Client::connect(&srv.sock);
    let mine = pattern(3, CHECK_BYTES);
    newcomer.write_verify(NEWCOMER_AT, &mine);
    let seen = newcomer
        .read(VETERAN_LATE_AT, CHECK_BYTES as u32)
        .expect("newcomer read");
    assert!(
        seen == late,
        "the newcomer does not see the veteran's write"
    );
    let seen = veteran
        .read(NEWCOMER_AT, CHECK_BYTES as u32)
        .expect("veteran read");
    assert!(
        seen == mine,
        "the veteran does not see the newcomer's write"
    );
    newcomer.disconnect();
    veteran.disconnect();

    let report = srv.stop();
    assert_eq!(
        report.protocol_errors, protocol_errors,
        "protocol_errors in the report: {report:#?}"
    );
    assert_eq!(report.connections_open, 0, "every connection closed");
    report
}

/// A socket past the greeting, nothing sent.
fn greeted(sock: &Path) -> UnixStream {
    let mut s = connect_raw(sock);
    read_greeting(&mut s);
    s
}

fn assert_closed(s: &mut UnixStream, what: &str) {
    let got = read_until_closed(s).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        got.is_empty(),
        "{what}: the server sent {} bytes before closing (a hard disconnect sends nothing)",
        got.len()
    );
}

#[test]
fn client_flags_without_fixed_newstyle_end_the_session() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut s = greeted(sock);
            // Plain (non-fixed) newstyle: client flags 0.
            s.write_all(&0u32.to_be_bytes()).unwrap();
            assert_closed(&mut s, "client flags 0");
        },
        1,
    );
}

#[test]
fn unknown_client_flags_and_a_wrong_handshake_magic_end_the_session() {
    around_bad_client(
        CACHE,
        |sock| {
            // "MUST close the TCP connection if it does not recognize the
            // client's flags": FIXED_NEWSTYLE plus an unknown bit.
            let mut s = greeted(sock);
            s.write_all(&(C_FIXED_NEWSTYLE | 1 << 7).to_be_bytes())
                .unwrap();
            assert_closed(&mut s, "client flags 0x81");
            // A confused client echoing the server's NBDMAGIC instead of
            // its flags ('NBDM' = 0x4e42444d: odd, unknown bits set).
            let mut s = greeted(sock);
            s.write_all(NBDMAGIC).unwrap();
            s.write_all(IHAVEOPT).unwrap();
            assert_closed(&mut s, "NBDMAGIC as client flags");
        },
        2,
    );
}

#[test]
fn a_wrong_option_magic_ends_the_session() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut s = greeted(sock);
            s.write_all(&(C_FIXED_NEWSTYLE | C_NO_ZEROES).to_be_bytes())
                .unwrap();
            let mut b = Vec::new();
            b.extend_from_slice(b"IHAVEOPX");
            b.extend_from_slice(&OPT_GO.to_be_bytes());
            let data = go_data();
            b.extend_from_slice(&(data.len() as u32).to_be_bytes());
            b.extend_from_slice(&data);
            s.write_all(&b).unwrap();
            assert_closed(&mut s, "option magic IHAVEOPX");
        },
        1,
    );
}

#[test]
fn an_unknown_option_gets_err_unsup_and_the_session_goes_on() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut s = greeted(sock);
            s.write_all(&(C_FIXED_NEWSTYLE | C_NO_ZEROES).to_be_bytes())
                .unwrap();
            for (option, data) in [
                (0x7777u32, &b"hello"[..]),
                (4, &b""[..]),
                (0xdead_beef, &[0u8; 300][..]),
            ] {
                send_option(&mut s, option, data);
                let (got, kind, _msg) = read_option_reply(&mut s);
                assert_eq!(got, option, "the reply names option {option:#x}");
                assert_eq!(kind, REP_ERR_UNSUP, "option {option:#x}: NBD_REP_ERR_UNSUP");
            }
            // The same session then enters transmission and does IO.
            let mut c = Client::go(s);
            c.write_verify(8 << 20, &pattern(10, 8192));
            c.disconnect();
        },
        0,
    );
}

#[test]
fn requests_past_the_end_are_refused_and_the_session_goes_on() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut c = Client::connect(sock);
            let size = c.size_bytes;
            let block = c.block_min_bytes;
            assert_eq!(
                c.read(size - block as u64, 2 * block),
                Err(EINVAL),
                "READ across the end"
            );
            assert_eq!(c.read(size, block), Err(EINVAL), "READ at the end");
            let data = pattern(11, 2 * block as usize);
            // The payload is sent whole and must be consumed, not parsed
            // as requests.
            assert_eq!(
                c.write(size - block as u64, &data),
                ENOSPC,
                "WRITE across the end"
            );
            assert_eq!(
                c.write(u64::MAX - block as u64 + 1, &data),
                ENOSPC,
                "WRITE whose end overflows"
            );
            assert_eq!(c.trim(size, block), EINVAL, "TRIM past the end");
            assert_eq!(
                c.write_zeroes(0, size, block),
                ENOSPC,
                "WRITE_ZEROES past the end"
            );
            // The last block itself is fine.
            c.write_verify(size - block as u64, &data[..block as usize]);
            c.disconnect();
        },
        0,
    );
}

#[test]
fn requests_not_aligned_to_the_minimum_block_get_einval() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut c = Client::connect(sock);
            assert_eq!(
                c.block_min_bytes, 4096,
                "the cache's page is the minimum block"
            );
            assert_eq!(c.read(512, 4096), Err(EINVAL), "READ at offset 512");
            assert_eq!(c.read(4096, 512), Err(EINVAL), "READ of 512 bytes");
            assert_eq!(
                c.write(4096, &pattern(12, 1024)),
                EINVAL,
                "WRITE of 1024 bytes"
            );
            assert_eq!(
                c.write(2048, &pattern(13, 4096)),
                EINVAL,
                "WRITE at offset 2048"
            );
            assert_eq!(c.trim(4096 + 512, 4096), EINVAL, "TRIM at offset 4608");
            c.write_verify(12 << 20, &pattern(14, 4096));
            c.disconnect();
        },
        0,
    );
}

#[test]
fn a_payload_above_the_maximum_gets_einval_is_consumed_and_the_session_goes_on() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut c = Client::connect(sock);
            let max = c.block_max_bytes;
            assert_eq!(
                max,
                tierlab_serve::BLOCK_MAX_BYTES,
                "advertised maximum payload"
            );
            let over = max + 4096;
            assert_eq!(c.read(0, over), Err(EINVAL), "READ above the maximum");
            // 32 MiB + 4 KiB of payload the server must read and drop. A
            // pattern, so a server that parsed it as requests would see
            // garbage magic and disconnect.
            let data = pattern(15, over as usize);
            assert_eq!(c.write(0, &data), EINVAL, "WRITE above the maximum");
            c.write_verify(16 << 20, &pattern(16, 65536));
            // Exactly the maximum is fine.
            let at_max = pattern(17, max as usize);
            assert_eq!(c.write(32 << 20, &at_max), 0, "WRITE of the maximum");
            c.disconnect();
        },
        0,
    );
}

#[test]
fn an_unknown_command_gets_einval_and_the_session_goes_on() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut c = Client::connect(sock);
            // CACHE (5) is not advertised; 9 and 0xffff do not exist.
            for command in [CMD_CACHE, 9, 0x00ff, 0xffff] {
                assert_eq!(c.simple(0, command, 0, 4096), EINVAL, "command {command}");
            }
            // An unknown flag on a known command too (bit 15).
            assert_eq!(
                c.simple(1 << 15, CMD_FLUSH, 0, 0),
                EINVAL,
                "FLUSH with flag 0x8000"
            );
            c.write_verify(20 << 20, &pattern(18, 8192));
            c.disconnect();
        },
        0,
    );
}

#[test]
fn a_wrong_request_magic_ends_the_session() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut c = Client::connect(sock);
            c.write_verify(24 << 20, &pattern(19, 4096));
            let mut b = request(0, CMD_READ, 77, 0, 4096);
            b[0..4].copy_from_slice(&0x2560_9514u32.to_be_bytes());
            c.send(&b);
            assert_closed(&mut c.s, "request magic 0x25609514");
        },
        1,
    );
}

#[test]
fn a_client_leaving_in_the_middle_of_a_write_payload_changes_nothing() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut c = Client::connect(sock);
            // Half of a 64 KiB write over the veteran's data, then gone.
            let mut b = request(0, CMD_WRITE, 5, VETERAN_AT, CHECK_BYTES as u32);
            b.extend_from_slice(&pattern(20, CHECK_BYTES / 2));
            c.send(&b);
            drop(c);
            // The veteran's read (in around_bad_client) checks that no part
            // of the torn write landed. Give the server time to see the EOF
            // first.
            std::thread::sleep(Duration::from_millis(100));
        },
        0,
    );
}

#[test]
fn a_client_leaving_in_the_middle_of_the_handshake_is_forgotten() {
    around_bad_client(
        CACHE,
        |sock| {
            let mut s = greeted(sock);
            s.write_all(&(C_FIXED_NEWSTYLE | C_NO_ZEROES).to_be_bytes())
                .unwrap();
            // Half an option header.
            s.write_all(&IHAVEOPT[..]).unwrap();
            s.write_all(&OPT_GO.to_be_bytes()[..2]).unwrap();
            drop(s);
            std::thread::sleep(Duration::from_millis(100));
        },
        0,
    );
}

#[test]
fn a_client_leaving_with_reads_in_flight_and_replies_unread() {
    let report = around_bad_client(
        CACHE,
        |sock| {
            let mut c = Client::connect(sock);
            // 64 reads of 1 MiB pipelined: 64 MiB of replies, far more than
            // the socket buffers, so the server is still writing when the
            // client leaves.
            let mut b = Vec::new();
            for i in 0..64u64 {
                b.extend_from_slice(&request(0, CMD_READ, 100 + i, i << 20, 1 << 20));
            }
            c.send(&b);
            std::thread::sleep(Duration::from_millis(200));
            drop(c);
            std::thread::sleep(Duration::from_millis(100));
        },
        0,
    );
    assert!(
        report.requests.read >= 64,
        "the 64 reads were received: {report:#?}"
    );
}

#[test]
fn a_read_only_export_refuses_writes_with_eperm() {
    // Passthrough over a file holding a known pattern, served read-only:
    // the veteran and the newcomer can only read, so this case has its own
    // checks instead of around_bad_client's writes.
    let image = pattern(30, 4 << 20);
    let image_for_prepare = image.clone();
    let opts = ServeOptions {
        read_only: true,
        ..ServeOptions::default()
    };
    let srv = serve_config_with(FILE, &[], opts, move |dir| {
        let mut f = std::fs::File::create(dir.join("serve-file-disk.img")).unwrap();
        f.write_all(&image_for_prepare).unwrap();
        f.set_len(256 << 20).unwrap();
    });
    let mut veteran = Client::connect(&srv.sock);
    assert!(
        veteran.transmission_flags & TF_READ_ONLY != 0,
        "NBD_FLAG_READ_ONLY advertised (flags {:#x})",
        veteran.transmission_flags
    );
    assert_eq!(
        veteran.transmission_flags & (TF_SEND_FUA | TF_SEND_TRIM | TF_SEND_WRITE_ZEROES),
        0,
        "no write-class command advertised"
    );
    assert!(veteran.read(0, 1 << 20).unwrap() == image[..1 << 20]);

    let mut bad = Client::connect(&srv.sock);
    assert_eq!(bad.write(0, &pattern(31, 65536)), EPERM, "WRITE");
    assert_eq!(
        bad.write_flags(CMD_FLAG_FUA, 4096, &pattern(32, 4096)),
        EPERM,
        "FUA WRITE"
    );
    assert_eq!(bad.trim(0, 65536), EPERM, "TRIM");
    assert_eq!(bad.write_zeroes(0, 0, 65536), EPERM, "WRITE_ZEROES");
    assert_eq!(bad.flush(), 0, "FLUSH is allowed on a read-only export");
    // The session goes on, and nothing changed.
    assert!(
        bad.read(0, 65536).unwrap() == image[..65536],
        "data after refused writes"
    );
    bad.disconnect();

    assert!(
        veteran.read(0, 4 << 20).unwrap() == image,
        "the veteran still reads the image"
    );
    let mut newcomer = Client::connect(&srv.sock);
    assert!(newcomer.read(1 << 20, 1 << 20).unwrap() == image[1 << 20..2 << 20]);
    newcomer.disconnect();
    veteran.disconnect();
    let report = srv.stop();
    assert_eq!(report.protocol_errors, 0, "{report:#?}");
    assert_eq!(report.requests.write, 0, "no write reached the stack");
    assert_eq!(report.requests.trim + report.requests.write_zeroes, 0);
}

#[test]
fn every_bad_client_in_turn_against_one_server() {
    // The cases above each on a fresh server; here one server takes all the
    // disconnecting kinds in a row, with the veteran checked after each, and
    // counts them.
    let srv = serve_config(CACHE, ServeOptions::default());
    let mut veteran = Client::connect(&srv.sock);
    let mut expected_errors = 0;
    for round in 0..4u64 {
        let data = pattern(100 + round, 16384);
        let at = (40 << 20) + round * 65536;
        veteran.write_verify(at, &data);
        let mut s = greeted(&srv.sock);
        match round {
            0 => s.write_all(&0u32.to_be_bytes()).unwrap(),
            1 => {
                s.write_all(&C_FIXED_NEWSTYLE.to_be_bytes()).unwrap();
                s.write_all(b"XXXXXXXX\0\0\0\x07\0\0\0\0").unwrap();
            }
            2 => {
                s.write_all(&C_FIXED_NEWSTYLE.to_be_bytes()).unwrap();
                let mut c = Client::go(s);
                c.send(&[0u8; 28]);
                assert_closed(&mut c.s, "a zero request header");
                expected_errors += 1;
                assert!(veteran.read(at, 16384).unwrap() == data);
                continue;
            }
            _ => {
                s.write_all(&(C_FIXED_NEWSTYLE | 0x4).to_be_bytes())
                    .unwrap();
            }
        }
        assert_closed(&mut s, &format!("round {round}"));
        expected_errors += 1;
        assert!(veteran.read(at, 16384).unwrap() == data, "round {round}");
    }
    veteran.disconnect();
    let report = srv.stop();
    assert_eq!(report.protocol_errors, expected_errors, "{report:#?}");
    assert_eq!(report.connections, 5);
}

#[test]
fn a_client_that_never_reads_its_replies_does_not_block_the_stop() {
    let mut srv = serve_config(CACHE, ServeOptions::default());
    let mut veteran = Client::connect(&srv.sock);
    veteran.write_verify(0, &pattern(1, 65536));
    // 64 MiB of read replies requested, none read, the socket kept open.
    let mut stuck = Client::connect(&srv.sock);
    let mut b = Vec::new();
    for i in 0..64u64 {
        b.extend_from_slice(&request(0, CMD_READ, 100 + i, i << 20, 1 << 20));
    }
    stuck.send(&b);
    std::thread::sleep(Duration::from_millis(300));
    veteran.disconnect();
    let stopped = srv.stop_within(Duration::from_secs(10));
    // Let the server finish before asserting, so a failure does not leave
    // the test hanging in Drop.
    drop(stuck);
    let result = match stopped {
        Some(r) => r,
        None => {
            let late = srv.wait_within(Duration::from_secs(10));
            panic!(
                "Server::run did not return within 10 s of the stop while a client left its \
                 replies unread; after that client closed: {}",
                match late {
                    Some(Ok(_)) => "it returned Ok".to_string(),
                    Some(Err(e)) => format!("it returned Err({e})"),
                    None => "still running".to_string(),
                }
            );
        }
    };
    let report = result.expect("run returns Ok");
    assert_eq!(report.connections, 2);
}
