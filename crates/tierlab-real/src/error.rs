//! Why a real run (`executor::run`) stopped: one typed error, rendered
//! once here, so front ends (the CLI, Python) can tell a bad option from a
//! refused store, a policy's bug from a device that failed, and a data
//! mismatch from all of them — without parsing text.

use std::fmt;
use std::path::PathBuf;

use tierlab_core::apply::PolicyError;
use tierlab_core::metrics::MetricsError;
use tierlab_core::policy::OpenError;
use tierlab_core::{Op, ParamError};
use tierlab_stack::ConfigError;
use tierlab_trace::error::join_key;

use crate::raid_bitmap::BitmapError;
use crate::verify::Mismatch;

/// Why a backing store would not open: a `[[devices]]` table of a real
/// run (open.rs, raid.rs), the file or block device it names, or a RAID's
/// write-intent bitmap. Every kind names the key it is about, as the
/// config spells it (`devices[0].members[2].path`).
#[derive(Debug)]
pub enum BackendError {
    /// A key the table does not take, one it needs, or a value not
    /// allowed: a `ConfigError` (Param: key, found, expected; Key: what
    /// is wrong with the key, in words).
    Config(ConfigError),
    /// The file or block device `path` at key `key`: what was being done
    /// (`cannot open read-write`) and the OS error.
    Io {
        key: String,
        path: PathBuf,
        action: String,
        source: std::io::Error,
    },
    /// The RAID at `key` (`devices[0].bitmap`) refused its bitmap or
    /// could not resynchronise what it marks.
    Bitmap { key: String, error: BitmapError },
}

impl BackendError {
    /// A bad value (key relative to the table; `within` adds the table).
    pub fn param(e: ParamError) -> Self {
        BackendError::Config(ConfigError::param(e))
    }

    /// A key that is wrong as a key (unknown, missing), in words.
    pub fn key(key: impl Into<String>, message: impl Into<String>) -> Self {
        BackendError::Config(ConfigError::key(key, message))
    }

    /// The same error one table down: `within("devices[1]")`.
    pub fn within(self, outer: &str) -> Self {
        match self {
            BackendError::Config(e) => BackendError::Config(e.within(outer)),
            BackendError::Io {
                key,
                path,
                action,
                source,
            } => BackendError::Io {
                key: join_key(outer, &key),
                path,
                action,
                source,
            },
            BackendError::Bitmap { key, error } => BackendError::Bitmap {
                key: join_key(outer, &key),
                error,
            },
        }
    }

    /// The key path the error is about (empty: none).
    pub fn key_path(&self) -> String {
        match self {
            BackendError::Config(e) => e.key_path().unwrap_or_default(),
            BackendError::Io { key, .. } | BackendError::Bitmap { key, .. } => key.clone(),
        }
    }

    /// The OS error behind it, if any (for an exception class by kind).
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            BackendError::Io { source, .. } => Some(source),
            BackendError::Bitmap {
                error: BitmapError::Io { source, .. },
                ..
            } => Some(source),
            _ => None,
        }
    }
}

/// `key `devices[0]`: ` before a message about that key (nothing for none;
/// a flag is named as one, `--backing`).
fn show_key(f: &mut fmt::Formatter<'_>, key: &str) -> fmt::Result {
    if key.is_empty() {
        Ok(())
    } else if key.starts_with("--") {
        write!(f, "`{key}`: ")
    } else {
        write!(f, "key `{key}`: ")
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Config(e) => e.fmt(f),
            BackendError::Io {
                key,
                path,
                action,
                source,
            } => {
                show_key(f, key)?;
                write!(f, "{}: {action}: {source}", path.display())
            }
            BackendError::Bitmap { key, error } => {
                show_key(f, key)?;
                error.fmt(f)
            }
        }
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BackendError::Config(e) => Some(e),
            BackendError::Io { source, .. } => Some(source),
            BackendError::Bitmap { error, .. } => Some(error),
        }
    }
}

impl From<ConfigError> for BackendError {
    fn from(e: ConfigError) -> Self {
        BackendError::Config(e)
    }
}

/// Why the IO engine (engine.rs: io_uring, threads) failed to start or
/// stopped.
#[derive(Debug)]
pub enum EngineError {
    /// A system call of the engine failed (`io_uring_setup`,
    /// `io_uring_enter`, `eventfd`, ...).
    Sys {
        call: &'static str,
        source: std::io::Error,
    },
    /// The kernel's io_uring lacks what the engine needs.
    Unsupported(&'static str),
    /// `--io-engine uring` (or `uring-sqpoll`) where io_uring cannot start.
    UringUnavailable(Box<EngineError>),
    /// An engine named with no IO in service (`--io-threads 0` is inline
    /// IO, which takes no engine).
    NeedsDepth { engine: &'static str },
    /// The submission queue stayed full after a submit.
    QueueFull,
    /// The thread pool's threads are gone.
    ThreadsStopped,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Sys { call, source } => write!(f, "{call}: {source}"),
            EngineError::Unsupported(what) => f.write_str(what),
            EngineError::UringUnavailable(e) => {
                write!(
                    f,
                    "io_uring is not available here ({e}); use --io-engine threads"
                )
            }
            EngineError::NeedsDepth { engine } => write!(
                f,
                "--io-engine {engine} needs at least one IO in service; --io-threads 0 means \
                 inline IO, which takes no engine (leave --io-engine at auto)"
            ),
            EngineError::QueueFull => f.write_str("the io_uring submission queue is full"),
            EngineError::ThreadsStopped => f.write_str("the IO threads stopped unexpectedly"),
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Sys { source, .. } => Some(source),
            EngineError::UringUnavailable(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

/// Why the data path (datapath.rs: the policy over the backing stores)
/// stopped.
#[derive(Debug)]
pub enum DataPathError {
    /// The policy broke the executor protocol: tierlab-core's checks of
    /// its outbox, or the data path's own (a buffer that is not there, a
    /// host IO completed twice).
    Policy(PolicyError),
    /// A device IO failed and the policy could not survive it.
    Device(DeviceIoError),
    /// The IO engine failed.
    Engine(EngineError),
    /// Model timing over stores that do not fit the models: a model per
    /// store, each at least as large (`devices[i].capacity_bytes`).
    Models(ParamError),
}

/// A device IO that failed: which device (its stack name and what backs
/// it), the operation, where, and the OS error.
#[derive(Debug)]
pub struct DeviceIoError {
    pub device: String,
    pub backend: String,
    pub op: Op,
    pub size_bytes: u32,
    pub offset_bytes: u64,
    pub source: std::io::Error,
}

impl fmt::Display for DeviceIoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {} ({}): {} of {} bytes at offset {} failed: {}",
            self.device,
            self.backend,
            self.op.as_str(),
            self.size_bytes,
            self.offset_bytes,
            self.source
        )
    }
}

impl std::error::Error for DeviceIoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl fmt::Display for DataPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataPathError::Policy(e) => e.fmt(f),
            DataPathError::Device(e) => e.fmt(f),
            DataPathError::Engine(e) => e.fmt(f),
            DataPathError::Models(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for DataPathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DataPathError::Policy(e) => Some(e),
            DataPathError::Device(e) => Some(e),
            DataPathError::Engine(e) => Some(e),
            DataPathError::Models(e) => Some(e),
        }
    }
}

impl From<PolicyError> for DataPathError {
    fn from(e: PolicyError) -> Self {
        DataPathError::Policy(e)
    }
}

impl From<EngineError> for DataPathError {
    fn from(e: EngineError) -> Self {
        DataPathError::Engine(e)
    }
}

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
    /// raid.rs).
    Backends(BackendError),
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
    Engine(EngineError),
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
    /// did not survive it, the policy misused the data path, the engine
    /// failed.
    DataPath(DataPathError),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Option {
                option,
                found,
                expected,
            } => write!(f, "{option}: {found} is not {expected}"),
            RunError::Backends(e) => e.fmt(f),
            RunError::Engine(e) => e.fmt(f),
            RunError::DataPath(e) => e.fmt(f),
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
            RunError::Backends(e) => Some(e),
            RunError::Engine(e) => Some(e),
            RunError::DataPath(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DataPathError> for RunError {
    fn from(e: DataPathError) -> RunError {
        RunError::DataPath(e)
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
            RunError::Backends(e) => e.io_error(),
            RunError::DataPath(DataPathError::Device(e)) => Some(&e.source),
            _ => None,
        }
    }
}
