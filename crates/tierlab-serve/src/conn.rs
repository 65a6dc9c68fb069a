//! One client connection: its socket and its NBD protocol state machine.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::AsRawFd;

use mio::Token;
use mio::net::{TcpStream, UnixStream};
use tierlab_nbd::Connection;

/// A client's socket, TCP or Unix.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub(crate) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }
    /// sendmsg with MSG_NOSIGNAL: a peer that has gone is an EPIPE error
    /// for this connection, not a SIGPIPE that kills the server (and its
    /// write-back of dirty data).
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let fd = match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        };
        // SAFETY: IoSlice is ABI-compatible with iovec; the msghdr points
        // at `bufs`, which outlives the call.
        let n = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = bufs.len() as _;
            libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL)
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a negotiated metadata context reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Context {
    /// `base:allocation`: holes of the backing stores where the bytes live.
    Allocation,
    /// `tierlab:tier`: the policy's tier holding the bytes now.
    Tier,
}

pub(crate) struct Conn {
    pub token: Token,
    /// Its number in this server's life (`connN` in `--record` traces).
    pub id: u32,
    pub peer: String,
    pub stream: Stream,
    pub proto: Connection,
    /// Negotiated contexts: (id on the wire, what it reports).
    pub contexts: Vec<(u32, Context)>,
    /// Reading stopped by a bound (output backlog, requests in flight);
    /// resumed without waiting for a new readiness edge.
    pub paused: bool,
    /// The peer closed its side, or the socket failed.
    pub gone: Option<String>,
    /// Requests surfaced to the stack and not yet answered.
    pub in_flight: usize,
    /// Requests handled on this connection.
    pub requests: u64,
}

/// Bytes read per `read` call (a 4 KiB write and its header fit many times).
pub(crate) const RECV_CHUNK_BYTES: usize = 256 << 10;
/// A connection whose replies pile up beyond this is not read from until
/// the client takes them (a client that never reads cannot grow us).
pub(crate) const OUTPUT_BACKLOG_MAX_BYTES: usize = 64 << 20;
/// Requests one connection may have in the stack at once.
pub(crate) const IN_FLIGHT_MAX: usize = 512;

impl Conn {
    /// Reading must wait: replies unread, or too many requests in flight.
    pub(crate) fn must_pause(&self) -> bool {
        self.proto.output_len() > OUTPUT_BACKLOG_MAX_BYTES || self.in_flight >= IN_FLIGHT_MAX
    }

    /// Writes as much pending output as the socket takes; an error ends
    /// the connection (`gone`).
    pub(crate) fn write_out(&mut self) {
        while self.gone.is_none() && self.proto.output_len() > 0 {
            let written = {
                let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(64);
                self.proto.output(&mut slices);
                // writev takes at most IOV_MAX (1024) slices.
                slices.truncate(1024);
                self.stream.write_vectored(&slices)
            };
            match written {
                Ok(0) => self.gone = Some("the socket took no bytes".into()),
                Ok(n) => self.proto.consume_output(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.gone = Some(format!("write: {e}")),
            }
        }
    }
}
