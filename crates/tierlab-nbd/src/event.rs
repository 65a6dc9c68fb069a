//! What the state machine tells its driver (events, requests) and what the
//! driver answers with (extents, error numbers).

use std::fmt;

/// `base:allocation` flag: the extent is a hole (not allocated).
pub const STATE_HOLE: u32 = 1;
/// `base:allocation` flag: the extent reads as zeroes.
pub const STATE_ZERO: u32 = 2;

/// What happened on the connection, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Entered transmission (GO or EXPORT_NAME) on `exports[export]`.
    /// `meta_contexts` are the negotiated (context id, name) pairs a
    /// [`Command::BlockStatus`] must be answered for; empty when none.
    Ready {
        export: usize,
        structured_replies: bool,
        meta_contexts: Vec<(u32, String)>,
    },
    /// A valid request to execute; answer it with one of the `Connection::reply_*` calls.
    Request(Request),
    /// The connection ends: the client's DISC or ABORT (`clean`), or a protocol
    /// violation (`reason` says what, for logs). No more input is parsed.
    Disconnect { reason: String, clean: bool },
}

/// A request that passed every protocol check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The client's cookie; unique among the requests in flight.
    pub handle: u64,
    /// `NBD_CMD_FLAG_FUA`: reply only once the command's writes are durable.
    /// The spec lets clients set it on any command (even reads); honour it for
    /// writes, ignore it where nothing is written.
    pub fua: bool,
    pub command: Command,
}

/// The commands an executor sees. Offsets and lengths are within the export,
/// aligned to its minimum block size; lengths are non-zero; READ and WRITE
/// lengths are at most the export's maximum payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Read {
        offset_bytes: u64,
        len_bytes: u32,
    },
    Write {
        offset_bytes: u64,
        data: Vec<u8>,
    },
    Flush,
    Trim {
        offset_bytes: u64,
        len_bytes: u32,
    },
    /// `no_hole`: the range must stay allocated (no trimming to zero it).
    WriteZeroes {
        offset_bytes: u64,
        len_bytes: u32,
        no_hole: bool,
    },
    /// `req_one`: only the first extent of each context is wanted (it is
    /// clamped to `len_bytes` on the way out).
    BlockStatus {
        offset_bytes: u64,
        len_bytes: u32,
        req_one: bool,
    },
}

/// One block status descriptor: `len_bytes` (non-zero) of the export, from
/// where the previous extent ended, with the context's `flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub len_bytes: u32,
    pub flags: u32,
}

/// The protocol's error values (proto.md, "Error values").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Errno {
    Perm,
    Io,
    NoMem,
    Inval,
    NoSpc,
    Overflow,
    NotSup,
    Shutdown,
}

impl Errno {
    /// The value on the wire.
    pub fn value(self) -> u32 {
        match self {
            Errno::Perm => 1,
            Errno::Io => 5,
            Errno::NoMem => 12,
            Errno::Inval => 22,
            Errno::NoSpc => 28,
            Errno::Overflow => 75,
            Errno::NotSup => 95,
            Errno::Shutdown => 108,
        }
    }

    /// The protocol's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Errno::Perm => "NBD_EPERM",
            Errno::Io => "NBD_EIO",
            Errno::NoMem => "NBD_ENOMEM",
            Errno::Inval => "NBD_EINVAL",
            Errno::NoSpc => "NBD_ENOSPC",
            Errno::Overflow => "NBD_EOVERFLOW",
            Errno::NotSup => "NBD_ENOTSUP",
            Errno::Shutdown => "NBD_ESHUTDOWN",
        }
    }

    /// Maps an IO error from the backend the way the spec asks: quota and
    /// file-too-big become `ENOSPC`, read-only file systems `EPERM`; anything
    /// without a better match is `EIO`. `ENOTSUP` is never produced (the spec
    /// reserves it for fast zeroes, which are not advertised).
    pub fn from_io_error(error: &std::io::Error) -> Errno {
        use std::io::ErrorKind;
        match error.kind() {
            ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => Errno::Perm,
            ErrorKind::StorageFull | ErrorKind::FileTooLarge | ErrorKind::QuotaExceeded => {
                Errno::NoSpc
            }
            ErrorKind::OutOfMemory => Errno::NoMem,
            ErrorKind::InvalidInput | ErrorKind::Unsupported => Errno::Inval,
            _ => Errno::Io,
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.value())
    }
}
