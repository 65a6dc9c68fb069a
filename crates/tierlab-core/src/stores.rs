//! Errors of the synchronous store access a policy makes while it opens
//! (`Policy::open` over `policy::Stores`): typed, so an executor can tell a
//! failing device (an OS error to report as one) from stores that hold
//! something the policy refuses to take, and rendered once, here.

use std::fmt;

/// What a store was asked to do when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    Read,
    Write,
    Sync,
    /// Reading or storing the store's volume id (`Stores::volume_label`).
    Label,
}

/// Why a store access failed.
#[derive(Debug)]
pub enum StoreFault {
    /// The range runs past the store's end. In-memory stores check this
    /// themselves; a file or device reports it as an IO error instead.
    PastEnd { capacity_bytes: u64 },
    /// The OS (or an emulated array over the stores) refused the access.
    Io(std::io::Error),
}

/// A read, write or sync of one backing store that failed.
#[derive(Debug)]
pub struct StoreError {
    /// The device's index in the stack.
    pub device: usize,
    /// How the executor names the device, e.g. "cache (file /srv/c.img)";
    /// None: messages name it by its index.
    pub device_label: Option<String>,
    pub op: StoreOp,
    pub offset_bytes: u64,
    /// 0 for a sync.
    pub len_bytes: u64,
    pub fault: StoreFault,
}

impl StoreError {
    pub fn io(
        device: usize,
        op: StoreOp,
        offset_bytes: u64,
        len_bytes: u64,
        source: std::io::Error,
    ) -> StoreError {
        StoreError {
            device,
            device_label: None,
            op,
            offset_bytes,
            len_bytes,
            fault: StoreFault::Io(source),
        }
    }

    pub fn past_end(
        device: usize,
        op: StoreOp,
        offset_bytes: u64,
        len_bytes: u64,
        capacity_bytes: u64,
    ) -> StoreError {
        StoreError {
            device,
            device_label: None,
            op,
            offset_bytes,
            len_bytes,
            fault: StoreFault::PastEnd { capacity_bytes },
        }
    }

    /// Names the device as the executor knows it (messages say
    /// "device cache (file /x)" rather than "device 1").
    pub fn labelled(mut self, label: impl Into<String>) -> StoreError {
        self.device_label = Some(label.into());
        self
    }

    /// The OS error, if the fault is one (for mapping to an exception class
    /// by `io::ErrorKind`).
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match &self.fault {
            StoreFault::Io(e) => Some(e),
            StoreFault::PastEnd { .. } => None,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.device_label {
            Some(label) => write!(f, "device {label}: ")?,
            None => write!(f, "device {}: ", self.device)?,
        }
        let (len, at) = (self.len_bytes, self.offset_bytes);
        match (&self.fault, self.op) {
            (StoreFault::PastEnd { .. }, StoreOp::Read) => {
                write!(f, "a read of {len} bytes at {at} is past its end")
            }
            (StoreFault::PastEnd { .. }, StoreOp::Write) => {
                write!(f, "a write of {len} bytes at {at} is past its end")
            }
            (StoreFault::PastEnd { .. }, StoreOp::Sync) => write!(f, "a sync is past its end"),
            (StoreFault::PastEnd { .. }, StoreOp::Label) => {
                write!(f, "its volume id is past its end")
            }
            (StoreFault::Io(e), StoreOp::Read) => write!(f, "reading {len} bytes at {at}: {e}"),
            (StoreFault::Io(e), StoreOp::Write) => write!(f, "writing {len} bytes at {at}: {e}"),
            (StoreFault::Io(e), StoreOp::Sync) => write!(f, "syncing: {e}"),
            (StoreFault::Io(e), StoreOp::Label) => write!(f, "its volume id: {e}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.fault {
            StoreFault::Io(e) => Some(e),
            StoreFault::PastEnd { .. } => None,
        }
    }
}

/// Why `Policy::open` failed.
#[derive(Debug)]
pub enum OpenError {
    /// A store failed under the policy's reads, writes or syncs.
    Store(StoreError),
    /// The stores hold something the policy refuses to take: state made
    /// for another configuration, stores too small, damaged metadata. The
    /// message says what differs and what to do; the policy knows it best,
    /// so it stays text.
    Mismatch(String),
}

impl OpenError {
    pub fn mismatch(why: impl Into<String>) -> OpenError {
        OpenError::Mismatch(why.into())
    }
}

impl From<StoreError> for OpenError {
    fn from(e: StoreError) -> OpenError {
        OpenError::Store(e)
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Store(e) => e.fmt(f),
            OpenError::Mismatch(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Store(e) => Some(e),
            OpenError::Mismatch(_) => None,
        }
    }
}
