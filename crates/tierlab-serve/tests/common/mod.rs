//! Shared by the serve tests: a raw NBD client that builds every byte by
//! hand from the protocol document (doc/proto.md) — independent of
//! tierlab-nbd's encoder, so a mistake there cannot hide in both — and a
//! server started in-process (`Server::bind` / `bind_with_backends`, run in
//! a thread, stopped with its `StopHandle`).
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use tierlab_serve::{Listen, ServeError, ServeOptions, ServeReport, Server, StopHandle};
use tierlab_stack::StackConfig;

// ---- Numbers from proto.md (spelled out again on purpose) ----
pub const NBDMAGIC: &[u8; 8] = b"NBDMAGIC"; // 0x4e42444d41474943
pub const IHAVEOPT: &[u8; 8] = b"IHAVEOPT"; // 0x49484156454F5054
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

pub const FLAG_FIXED_NEWSTYLE: u16 = 1;
pub const C_FIXED_NEWSTYLE: u32 = 1;
pub const C_NO_ZEROES: u32 = 2;

pub const OPT_GO: u32 = 7;
pub const REP_ACK: u32 = 1;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = 0x8000_0001;
pub const INFO_EXPORT: u16 = 0;
pub const INFO_BLOCK_SIZE: u16 = 3;

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;

pub const CMD_FLAG_FUA: u16 = 1;

/// Transmission flags (16 bits in NBD_INFO_EXPORT).
pub const TF_HAS_FLAGS: u16 = 1 << 0;
pub const TF_READ_ONLY: u16 = 1 << 1;
pub const TF_SEND_FLUSH: u16 = 1 << 2;
pub const TF_SEND_FUA: u16 = 1 << 3;
pub const TF_SEND_TRIM: u16 = 1 << 5;
pub const TF_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TF_CAN_MULTI_CONN: u16 = 1 << 8;

pub const EPERM: u32 = 1;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;

/// No test waits longer than this for one reply: a hung server fails the
/// test instead of hanging it.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// The repository's configs/ folder.
pub fn configs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs")
}

/// Deterministic bytes for `seed` (xorshift64*): every write in these tests
/// is distinguishable from every other and from zeros.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The seeded RNG of the shared test kit.
#[allow(unused_imports)] // not every test binary draws random numbers
pub use tierlab_core::testkit::Rng;

/// Bytes read until EOF (or a reset): a disconnect. Err if the peer keeps
/// the connection open past `IO_TIMEOUT`.
pub fn read_until_closed(s: &mut UnixStream) -> Result<Vec<u8>, String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(got),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(format!(
                    "the server did not close the connection ({e}) after {} bytes",
                    got.len()
                ));
            }
        }
    }
}

/// A socket to the server with timeouts, nothing sent yet.
pub fn connect_raw(sock: &Path) -> UnixStream {
    let s = UnixStream::connect(sock).unwrap_or_else(|e| panic!("connect {}: {e}", sock.display()));
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// Reads the server's greeting: NBDMAGIC, IHAVEOPT, 16-bit handshake flags.
pub fn read_greeting(s: &mut UnixStream) -> u16 {
    let mut g = [0u8; 18];
    s.read_exact(&mut g).expect("the greeting (18 bytes)");
    assert_eq!(&g[0..8], NBDMAGIC, "greeting magic");
    assert_eq!(&g[8..16], IHAVEOPT, "newstyle magic");
    let flags = u16::from_be_bytes([g[16], g[17]]);
    assert!(
        flags & FLAG_FIXED_NEWSTYLE != 0,
        "the server offers fixed newstyle"
    );
    flags
}

/// C: IHAVEOPT, option, length, data.
pub fn send_option(s: &mut UnixStream, option: u32, data: &[u8]) {
    let mut b = Vec::with_capacity(16 + data.len());
    b.extend_from_slice(IHAVEOPT);
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).expect("send option");
}

/// S: reply magic, option, reply type, length, data.
pub fn read_option_reply(s: &mut UnixStream) -> (u32, u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).expect("an option reply header");
    let magic = u64::from_be_bytes(h[0..8].try_into().unwrap());
    assert_eq!(magic, OPTION_REPLY_MAGIC, "option reply magic");
    let option = u32::from_be_bytes(h[8..12].try_into().unwrap());
    let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
    assert!(len <= 64 << 10, "option reply of {len} bytes");
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data).expect("option reply data");
    (option, kind, data)
}

/// NBD_OPT_GO data: the default export (empty name), asking for
/// NBD_INFO_BLOCK_SIZE too.
pub fn go_data() -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&0u32.to_be_bytes()); // name length: "" = the default export
    d.extend_from_slice(&1u16.to_be_bytes()); // one information request
    d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    d
}

/// One request header (28 bytes).
pub fn request(
    flags: u16,
    command: u16,
    cookie: u64,
    offset_bytes: u64,
    len_bytes: u32,
) -> Vec<u8> {
    let mut b = Vec::with_capacity(28);
    b.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&command.to_be_bytes());
    b.extend_from_slice(&cookie.to_be_bytes());
    b.extend_from_slice(&offset_bytes.to_be_bytes());
    b.extend_from_slice(&len_bytes.to_be_bytes());
    b
}

/// A client in transmission (simple replies only: no structured replies
/// negotiated, so a read's data follows its reply header only on success).
pub struct Client {
    pub s: UnixStream,
    pub size_bytes: u64,
    pub transmission_flags: u16,
    pub block_min_bytes: u32,
    pub block_preferred_bytes: u32,
    pub block_max_bytes: u32,
    next_cookie: u64,
}

impl Client {
    /// Connects and completes the fixed newstyle handshake with NBD_OPT_GO.
    pub fn connect(sock: &Path) -> Client {
        let mut s = connect_raw(sock);
        read_greeting(&mut s);
        s.write_all(&(C_FIXED_NEWSTYLE | C_NO_ZEROES).to_be_bytes())
            .unwrap();
        Client::go(s)
    }

    /// Sends NBD_OPT_GO on a socket past the client flags; reads the
    /// replies up to NBD_REP_ACK.
    pub fn go(mut s: UnixStream) -> Client {
        send_option(&mut s, OPT_GO, &go_data());
        let mut c = Client {
            s,
            size_bytes: 0,
            transmission_flags: 0,
            block_min_bytes: 1,
            block_preferred_bytes: 4096,
            block_max_bytes: 32 << 20,
            next_cookie: 1,
        };
        loop {
            let (option, kind, data) = read_option_reply(&mut c.s);
            assert_eq!(option, OPT_GO, "a reply to GO");
            match kind {
                REP_ACK => break,
                REP_INFO => {
                    let info = u16::from_be_bytes([data[0], data[1]]);
                    match info {
                        INFO_EXPORT => {
                            assert_eq!(data.len(), 12, "NBD_INFO_EXPORT is 12 bytes");
                            c.size_bytes = u64::from_be_bytes(data[2..10].try_into().unwrap());
                            c.transmission_flags = u16::from_be_bytes([data[10], data[11]]);
                        }
                        INFO_BLOCK_SIZE => {
                            assert_eq!(data.len(), 14, "NBD_INFO_BLOCK_SIZE is 14 bytes");
                            let u = |at: usize| {
                                u32::from_be_bytes(data[at..at + 4].try_into().unwrap())
                            };
                            c.block_min_bytes = u(2);
                            c.block_preferred_bytes = u(6);
                            c.block_max_bytes = u(10);
                        }
                        _ => {}
                    }
                }
                other => panic!(
                    "NBD_OPT_GO refused: reply type {other:#x}: {}",
                    String::from_utf8_lossy(&data)
                ),
            }
        }
        assert!(c.size_bytes > 0, "NBD_INFO_EXPORT came before the ACK");
        c
    }

    pub fn cookie(&mut self) -> u64 {
        self.next_cookie += 1;
        self.next_cookie
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("send to the server");
    }

    /// A simple reply header: (error, cookie).
    pub fn reply(&mut self) -> (u32, u64) {
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h).expect("a simple reply");
        let magic = u32::from_be_bytes(h[0..4].try_into().unwrap());
        assert_eq!(magic, SIMPLE_REPLY_MAGIC, "simple reply magic");
        let error = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        (error, cookie)
    }

    /// A reply to `cookie` (asserts it is the one that comes).
    pub fn reply_to(&mut self, cookie: u64) -> u32 {
        let (error, got) = self.reply();
        assert_eq!(got, cookie, "the reply's cookie");
        error
    }

    pub fn read(&mut self, offset_bytes: u64, len_bytes: u32) -> Result<Vec<u8>, u32> {
        let c = self.cookie();
        self.send(&request(0, CMD_READ, c, offset_bytes, len_bytes));
        match self.reply_to(c) {
            0 => {
                let mut d = vec![0u8; len_bytes as usize];
                self.s.read_exact(&mut d).expect("read data");
                Ok(d)
            }
            e => Err(e),
        }
    }

    /// WRITE (FUA when `flags` says): the error value (0 = done).
    pub fn write_flags(&mut self, flags: u16, offset_bytes: u64, data: &[u8]) -> u32 {
        let c = self.cookie();
        let mut b = request(flags, CMD_WRITE, c, offset_bytes, data.len() as u32);
        b.extend_from_slice(data);
        self.send(&b);
        self.reply_to(c)
    }

    pub fn write(&mut self, offset_bytes: u64, data: &[u8]) -> u32 {
        self.write_flags(0, offset_bytes, data)
    }

    pub fn simple(&mut self, flags: u16, command: u16, offset_bytes: u64, len_bytes: u32) -> u32 {
        let c = self.cookie();
        self.send(&request(flags, command, c, offset_bytes, len_bytes));
        self.reply_to(c)
    }

    pub fn flush(&mut self) -> u32 {
        self.simple(0, CMD_FLUSH, 0, 0)
    }

    pub fn trim(&mut self, offset_bytes: u64, len_bytes: u32) -> u32 {
        self.simple(0, CMD_TRIM, offset_bytes, len_bytes)
    }

    pub fn write_zeroes(&mut self, flags: u16, offset_bytes: u64, len_bytes: u32) -> u32 {
        self.simple(flags, CMD_WRITE_ZEROES, offset_bytes, len_bytes)
    }

    /// Writes `data` at `offset_bytes` and reads it back.
    pub fn write_verify(&mut self, offset_bytes: u64, data: &[u8]) {
        assert_eq!(self.write(offset_bytes, data), 0, "write at {offset_bytes}");
        let back = self
            .read(offset_bytes, data.len() as u32)
            .expect("read back");
        assert!(
            back == data,
            "read back at {offset_bytes} differs from what was written"
        );
    }

    /// NBD_CMD_DISC, then the server closes.
    pub fn disconnect(mut self) {
        let c = self.cookie();
        self.send(&request(0, CMD_DISC, c, 0, 0));
        let rest = read_until_closed(&mut self.s).expect("the server closes after DISC");
        assert!(
            rest.is_empty(),
            "no reply to DISC, got {} bytes",
            rest.len()
        );
    }
}

/// A server running in a thread over its own temporary folder.
pub struct Running {
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
    pub uri: String,
    pub export: tierlab_nbd::Export,
    stop: StopHandle,
    thread: Option<JoinHandle<Result<ServeReport, String>>>,
}

impl Running {
    /// Stops (as SIGTERM would) and returns what `run` returned.
    pub fn stop_result(mut self) -> Result<ServeReport, String> {
        self.stop.stop();
        let t = self.thread.take().expect("running");
        t.join().expect("the server thread panicked")
    }

    /// Stops and asserts `run` returned Ok.
    pub fn stop(self) -> ServeReport {
        match self.stop_result() {
            Ok(r) => r,
            Err(e) => panic!("Server::run returned an error: {e}"),
        }
    }

    /// Asks the server to stop; `run`'s result if it returns within
    /// `limit`, else None (the server keeps running; drop stops it again).
    pub fn stop_within(&mut self, limit: Duration) -> Option<Result<ServeReport, String>> {
        self.stop.stop();
        self.wait_within(limit)
    }

    /// `run`'s result if it returns within `limit` (no new stop request: a
    /// second one aborts the drain).
    pub fn wait_within(&mut self, limit: Duration) -> Option<Result<ServeReport, String>> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
                let t = self.thread.take().expect("running");
                return Some(t.join().expect("the server thread panicked"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A failed assertion must not leave the thread serving.
        if let Some(t) = self.thread.take() {
            self.stop.stop();
            let _ = t.join();
        }
    }
}

/// Binds in a new thread and runs there: `Server` is not `Send` (its
/// policy and device models are plain trait objects), so it must live in
/// the thread that runs it; the stop handle, URI and export come back.
fn spawn(
    bind: impl FnOnce() -> Result<Server, ServeError> + Send + 'static,
    dir: tempfile::TempDir,
    sock: PathBuf,
) -> Running {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("tierlab-serve".into())
        .spawn(move || {
            let server = match bind() {
                Ok(s) => s,
                Err(e) => {
                    let e = e.to_string();
                    let _ = tx.send(Err(e.clone()));
                    return Err(e);
                }
            };
            let _ = tx.send(Ok((
                server.stop_handle(),
                server.uri().to_string(),
                server.export().clone(),
            )));
            server.run().map_err(|e| e.to_string())
        })
        .expect("spawn the server thread");
    let (stop, uri, export) = match rx.recv().expect("the server thread reports its bind") {
        Ok(x) => x,
        Err(e) => panic!("bind: {e}"),
    };
    Running {
        dir,
        sock,
        uri,
        export,
        stop,
        thread: Some(thread),
    }
}

/// Serves configs/`name` from a copy in a new temporary folder (images are
/// created next to the config), on a Unix socket there. `prepare` runs on
/// the folder before the server opens anything.
pub fn serve_config_with(
    name: &str,
    overrides: &[&str],
    opts: ServeOptions,
    prepare: impl FnOnce(&Path),
) -> Running {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config_path = dir.path().join(name);
    std::fs::copy(configs_dir().join(name), &config_path)
        .unwrap_or_else(|e| panic!("copy configs/{name}: {e}"));
    prepare(dir.path());
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let (config, _) = StackConfig::load(&config_path, &overrides).expect("the config loads");
    let sock = dir.path().join("nbd.sock");
    let (base, listen) = (dir.path().to_path_buf(), Listen::Unix(sock.clone()));
    spawn(
        move || Server::bind(&config, &base, &listen, opts),
        dir,
        sock,
    )
}

pub fn serve_config(name: &str, opts: ServeOptions) -> Running {
    serve_config_with(name, &[], opts, |_| {})
}

/// Serves a stack given as TOML text over backing stores the test opened.
pub fn serve_backends(
    config_toml: &str,
    backends: Vec<Box<dyn tierlab_real::backend::Backend>>,
    opts: ServeOptions,
) -> Running {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let (config, _) = StackConfig::parse(config_toml, "test stack", &[]).expect("the stack parses");
    let sock = dir.path().join("nbd.sock");
    let listen = Listen::Unix(sock.clone());
    spawn(
        move || Server::bind_with_backends(&config, backends, &listen, opts),
        dir,
        sock,
    )
}

/// Serves a stack given as TOML text, its stores opened by `Server::bind`
/// in a new temporary folder.
pub fn serve_toml(config_toml: &str, opts: ServeOptions) -> Running {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let (config, _) = StackConfig::parse(config_toml, "test stack", &[]).expect("the stack parses");
    let sock = dir.path().join("nbd.sock");
    let (base, listen) = (dir.path().to_path_buf(), Listen::Unix(sock.clone()));
    spawn(
        move || Server::bind(&config, &base, &listen, opts),
        dir,
        sock,
    )
}
