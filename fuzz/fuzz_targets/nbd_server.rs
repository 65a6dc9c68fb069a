//! The NBD server state machine over arbitrary bytes fed in arbitrary chunks:
//! every surfaced request is answered (in and out of order), output is
//! consumed in odd amounts. It must never panic, buffered input must stay
//! within its bound, and the connection's invariants must hold throughout.
//!
//! Input layout: byte 0 picks a canned handshake prefix (so the fuzzer reaches
//! transmission quickly) and the feeding style; bytes 1..9 seed the chunking
//! and reply scheduling; the rest is what the client sends.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tierlab_nbd::{Command, Connection, Errno, Event, Export, Extent, Request};

fn exports() -> Arc<[Export]> {
    Arc::from(vec![
        Export {
            name: "disk".into(),
            description: "fuzz disk".into(),
            size_bytes: 1 << 20,
            read_only: false,
            can_multi_conn: false,
            block_min_bytes: 512,
            block_preferred_bytes: 4096,
            block_max_bytes: 64 * 1024,
            meta_contexts: vec!["base:allocation".into(), "tierlab:tier".into()],
        },
        Export {
            name: "ro".into(),
            description: String::new(),
            size_bytes: 64 * 1024,
            read_only: true,
            can_multi_conn: true,
            block_min_bytes: 4096,
            block_preferred_bytes: 4096,
            block_max_bytes: 32 * 1024,
            meta_contexts: vec!["base:allocation".into()],
        },
    ])
}

fn option(out: &mut Vec<u8>, option: u32, data: &[u8]) {
    out.extend_from_slice(b"IHAVEOPT");
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

fn go(out: &mut Vec<u8>, name: &str) {
    let mut data = (name.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    option(out, 7, &data);
}

fn prefix(mode: u8) -> Vec<u8> {
    let mut out = Vec::new();
    match mode & 3 {
        0 => {}
        1 => {
            out.extend_from_slice(&3u32.to_be_bytes());
            go(&mut out, "");
        }
        2 => {
            out.extend_from_slice(&1u32.to_be_bytes());
            option(&mut out, 8, &[]);
            let mut meta = 4u32.to_be_bytes().to_vec();
            meta.extend_from_slice(b"disk");
            meta.extend_from_slice(&2u32.to_be_bytes());
            for query in ["base:allocation", "tierlab:tier"] {
                meta.extend_from_slice(&(query.len() as u32).to_be_bytes());
                meta.extend_from_slice(query.as_bytes());
            }
            option(&mut out, 10, &meta);
            go(&mut out, "disk");
        }
        _ => {
            out.extend_from_slice(&3u32.to_be_bytes());
            option(&mut out, 1, b"ro");
        }
    }
    out
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn answer(conn: &mut Connection, request: &Request, contexts: &[u32]) {
    if request.handle % 5 == 4 {
        conn.reply_error(request.handle, Errno::Io);
        return;
    }
    match &request.command {
        Command::Read { len_bytes, .. } => {
            assert!(*len_bytes > 0);
            conn.reply_read(request.handle, vec![0; *len_bytes as usize]);
        }
        Command::BlockStatus { len_bytes, .. } => {
            assert!(!contexts.is_empty(), "block status only with negotiated contexts");
            let extents = [Extent { len_bytes: *len_bytes, flags: 0 }];
            let per_context: Vec<(u32, &[Extent])> = contexts.iter().map(|&id| (id, &extents[..])).collect();
            conn.reply_block_status(request.handle, &per_context);
        }
        Command::Write { data, .. } => {
            assert!(!data.is_empty());
            conn.reply_ok(request.handle);
        }
        Command::Flush | Command::Trim { .. } | Command::WriteZeroes { .. } => {
            conn.reply_ok(request.handle)
        }
    }
}

fn drain_some(conn: &mut Connection, rng: &mut Rng) {
    let pending = conn.output_len();
    if pending == 0 {
        return;
    }
    let n = {
        let mut slices = Vec::new();
        conn.output(&mut slices);
        let total: usize = slices.iter().map(|s| s.len()).sum();
        assert_eq!(total, pending);
        (1 + rng.below(pending as u64 * 2) as usize).min(pending)
    };
    conn.consume_output(n);
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let mode = data[0];
    let mut rng = Rng(u64::from_le_bytes(data[1..9].try_into().unwrap()));
    let mut input = prefix(mode);
    input.extend_from_slice(&data[9..]);
    let use_recv_buffer = mode & 4 != 0;

    let mut conn = Connection::new(exports());
    let mut contexts: Vec<u32> = Vec::new();
    let mut pending: Vec<Request> = Vec::new();
    let mut rest = &input[..];
    while !rest.is_empty() {
        let chunk = (1 + rng.below(512) as usize).min(rest.len());
        if use_recv_buffer {
            let min = 1 + rng.below(8192) as usize;
            let buf = conn.recv_buffer(min);
            assert!(buf.len() >= min);
            let n = chunk.min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            conn.filled(n);
            rest = &rest[n..];
        } else {
            conn.receive(&rest[..chunk]);
            rest = &rest[chunk..];
        }
        assert!(conn.input_buffered_bytes() <= conn.input_buffered_bytes_max());
        conn.check_invariants();
        while let Some(event) = conn.poll_event() {
            match event {
                Event::Ready { meta_contexts, structured_replies, .. } => {
                    assert!(structured_replies || meta_contexts.is_empty());
                    contexts = meta_contexts.iter().map(|(id, _)| *id).collect();
                }
                Event::Request(request) => pending.push(request),
                Event::Disconnect { .. } => assert!(conn.is_closing()),
            }
        }
        // Answer some of what is pending, in a shuffled order.
        while !pending.is_empty() && rng.below(3) != 0 {
            let i = rng.below(pending.len() as u64) as usize;
            let request = pending.swap_remove(i);
            answer(&mut conn, &request, &contexts);
        }
        drain_some(&mut conn, &mut rng);
        conn.check_invariants();
    }
    for request in pending.drain(..) {
        answer(&mut conn, &request, &contexts);
    }
    assert_eq!(conn.requests_in_flight(), 0);
    while conn.output_len() > 0 {
        drain_some(&mut conn, &mut rng);
    }
    if conn.is_closing() {
        assert!(conn.should_close());
    }
    conn.check_invariants();
});
