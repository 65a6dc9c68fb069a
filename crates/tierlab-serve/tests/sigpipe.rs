//! A client that leaves while the server is still writing its replies,
//! under the signal disposition the `tierlab` binary runs with.
//!
//! `tierlab`'s main (crates/tierlab-cli/src/main.rs) restores SIGPIPE to
//! its default (terminate) so `tierlab trace convert x - | head` dies
//! quietly. A plain writev on a socket whose peer has gone raises
//! SIGPIPE — under that disposition one client closing its socket with
//! replies pending would kill the whole server, write-back data and all —
//! so the serve loop sends with `MSG_NOSIGNAL` (conn.rs). The test harness
//! ignores SIGPIPE (Rust's runtime default),
//! which is why bad_clients.rs cannot see this: this test restores the
//! binary's disposition first. Its own file, so `cargo test` (one process
//! per test binary) does not change the disposition for other tests.

mod common;

use std::time::Duration;

use common::*;
use tierlab_serve::ServeOptions;

#[test]
fn a_client_leaving_with_replies_pending_does_not_kill_the_server_under_the_cli_signal_setup() {
    // SAFETY: as the CLI's main does, at the start of this test's process
    // (nextest runs each test in its own process; this file has one test).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let srv = serve_config("serve-cache.toml", ServeOptions::default());
    let mut veteran = Client::connect(&srv.sock);
    veteran.write_verify(0, &pattern(1, 65536));
    for round in 0..3u64 {
        let mut c = Client::connect(&srv.sock);
        let mut b = Vec::new();
        for i in 0..64u64 {
            b.extend_from_slice(&request(0, CMD_READ, 100 + i, i << 20, 1 << 20));
        }
        c.send(&b);
        // The server fills the socket buffer and waits for the client to
        // read; the client leaves instead.
        std::thread::sleep(Duration::from_millis(200));
        drop(c);
        std::thread::sleep(Duration::from_millis(100));
        // Reaching here at all means the process survived the writes to a
        // closed socket.
        assert!(
            veteran.read(0, 65536).unwrap() == pattern(1, 65536),
            "round {round}"
        );
    }
    veteran.disconnect();
    let report = srv.stop();
    assert!(
        report.replies_dropped > 0 || report.requests.read >= 192,
        "{report:#?}"
    );
}
