//! Why a real run (`executor::run`) stopped: one typed error, rendered
//! once here, so front ends (the CLI, Python) can tell a bad option from a
//! refused store, a policy's bug from a device that failed, and a data
//! mismatch from all of them — without parsing text.

use std::fmt;

use tierlab_core::metrics::MetricsError;
use tierlab_core::policy::OpenError;

use crate::verify::Mismatch;

#[derive(Debug)]
pub enum RunError {
    /// A run option out of range (`RealOptions`).
    Option {
        option: &'static str,
        found: String,
        expected: &'static str,
    },
    /// Opening the backing stores from the config's `[[devices]]`: a key
    /// not allowed, a file or RAID array that will not open (open.rs,
    /// raid.rs). Text until those are typed: it names the key and the path.
    Backends(String),
    /// The policy or the tenants refused their part of the config (boxed:
    /// a ConfigError is large, and every function of the run loop returns
    /// this type).
    Config(Box<tierlab_stack::ConfigError>),
    /// The policy cannot run on real devices: it does not describe its
    /// data movement (`Policy::moves_data`).
    PolicyMovesNoData { policy: String, movers: Vec<String> },
    /// The metrics recorder refused the output settings.
    Output(MetricsError),
    /// The IO engine could not start (io_uring or threads).
    Engine(String),
    /// `Policy::open` refused the stores or a store failed under it.
    OpenPolicy { policy: String, source: OpenError },
    /// The policy broke the executor's protocol (a cap for a tenant that
    /// does not exist, a drain that stalls): its bug, not the run's.
    Policy { policy: String, message: String },
    /// A tenant issued an IO the policy cannot move exactly.
    Unaligned {
        policy: String,
        align_bytes: u64,
        tenant: usize,
        size_bytes: u32,
        offset_bytes: u64,
    },
    /// `--verify` needs 512-byte aligned IOs.
    VerifyUnaligned {
        tenant: usize,
        size_bytes: u32,
        offset_bytes: u64,
    },
    /// A read returned bytes other than the last write's (`--verify`).
    Verification { policy: String, mismatch: Mismatch },
    /// The policy's drain stalled: it reports data not yet written back,
    /// with nothing in flight and no timer set.
    DrainStalled { policy: String },
    /// The trace behind a tenant could not be read.
    Trace(tierlab_trace::TraceError),
    /// The final verification scan made no progress.
    ScanStalled { waited_s: u64 },
    /// A store refused the final sync (and no device error was survived
    /// before it, which would make this one expected).
    FinalSync {
        device: String,
        backend: String,
        source: std::io::Error,
    },
    /// The data path stopped the run: a device IO failed and the policy
    /// did not survive it, or the policy misused the data path. Text until
    /// datapath.rs and engine.rs are typed.
    DataPath(String),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Option {
                option,
                found,
                expected,
            } => write!(f, "{option}: {found} is not {expected}"),
            RunError::Backends(m) | RunError::Engine(m) | RunError::DataPath(m) => f.write_str(m),
            RunError::Config(e) => e.fmt(f),
            RunError::PolicyMovesNoData { policy, movers } => write!(
                f,
                "policy `{policy}` does not describe its data movement yet, so it cannot run on \
                 real devices; policies that can: {} (docs/real.md)",
                movers.join(", ")
            ),
            RunError::Output(e) => write!(f, "output: {e}"),
            RunError::OpenPolicy { policy, source } => {
                write!(f, "opening policy {policy}: {source}")
            }
            RunError::Policy { policy, message } => write!(f, "{message} (policy {policy})"),
            RunError::Unaligned {
                policy,
                align_bytes,
                tenant,
                size_bytes,
                offset_bytes,
            } => write!(
                f,
                "policy {policy} moves real data in units of {align_bytes} bytes; tenant {tenant} \
                 issued {size_bytes} bytes at offset {offset_bytes}, which is not aligned \
                 (partial units are not read-modify-written yet)"
            ),
            RunError::VerifyUnaligned {
                tenant,
                size_bytes,
                offset_bytes,
            } => write!(
                f,
                "verification needs 512-byte aligned IOs; tenant {tenant} issued {size_bytes} \
                 bytes at offset {offset_bytes}"
            ),
            RunError::Verification { policy, mismatch } => {
                write!(f, "{mismatch} (policy {policy})")
            }
            RunError::DrainStalled { policy } => write!(
                f,
                "policy {policy} reports data not yet written back, with nothing in flight and \
                 no timer set: its drain stalled"
            ),
            RunError::Trace(e) => e.fmt(f),
            RunError::ScanStalled { waited_s } => {
                write!(f, "the final verification scan stalled for {waited_s} s")
            }
            RunError::FinalSync {
                device,
                backend,
                source,
            } => write!(
                f,
                "device {device} ({backend}): the final sync failed: {source}"
            ),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::OpenPolicy { source, .. } => Some(source),
            RunError::FinalSync { source, .. } => Some(source),
            RunError::Trace(e) => Some(e),
            RunError::Config(e) => Some(e.as_ref()),
            RunError::Output(e) => Some(e),
            _ => None,
        }
    }
}

impl From<tierlab_stack::ConfigError> for RunError {
    fn from(e: tierlab_stack::ConfigError) -> RunError {
        RunError::Config(Box::new(e))
    }
}

impl RunError {
    /// The OS error behind the run's end, if one is known (for mapping to
    /// an exception class by `io::ErrorKind`).
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            RunError::FinalSync { source, .. } => Some(source),
            RunError::OpenPolicy {
                source: OpenError::Store(e),
                ..
            } => e.io_error(),
            _ => None,
        }
    }
}
