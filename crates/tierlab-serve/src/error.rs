//! Why `tierlab serve` could not start or stopped: one typed error,
//! rendered once here, so the CLI prints it and Python maps its kinds to
//! exception classes (a bad option, a config error, an OS error).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use tierlab_core::ParamError;
use tierlab_core::metrics::MetricsError;
use tierlab_core::policy::IoError;
use tierlab_nbd::ExportError;
use tierlab_real::RunError;
use tierlab_real::error::{BackendError, DataPathError, EngineError};
use tierlab_stack::ConfigError;
use tierlab_trace::TraceError;

#[derive(Debug)]
pub enum ServeError {
    /// A serve option out of range or malformed: the flag (`--tcp`,
    /// `--io-threads`), what was given, what is allowed.
    Option(ParamError),
    /// The backing stores would not open (a device table's key, a file).
    Backends(BackendError),
    /// The stack's config refused: the policy's volume, the device models
    /// `--model-timing` needs.
    Config(Box<ConfigError>),
    /// The stack cannot run for real: the policy refused its config or
    /// moves no data, or `Policy::open` refused the stores
    /// (tierlab-real's error, as `tierlab run` reports it).
    Stack(Box<RunError>),
    /// As many backing stores as devices are needed (`bind_with_backends`).
    StoreCount { stores: usize, devices: usize },
    /// The policy's unit of data movement is no NBD block size.
    BlockSize { policy: String, align_bytes: u64 },
    /// The stack's volume holds no whole block.
    VolumeTooSmall { volume_bytes: u64, block_bytes: u32 },
    /// The export the stack would present is not valid NBD.
    Export(ExportError),
    /// The metrics recorder refused the settings.
    Metrics(MetricsError),
    /// The IO engine could not start.
    Engine(EngineError),
    /// A system call of the event loop failed (`epoll`, `timerfd`,
    /// `signalfd`, `epoll_wait`).
    Sys {
        call: &'static str,
        source: std::io::Error,
    },
    /// The Unix socket's path is taken by something the server must not
    /// replace.
    SocketPath {
        path: PathBuf,
        problem: &'static str,
    },
    /// A file or folder a flag names (`--unix`, `--record`, `--out`):
    /// what failed, and the OS error.
    File {
        flag: &'static str,
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    /// The TCP address could not be listened on.
    Tcp {
        address: SocketAddr,
        action: &'static str,
        source: std::io::Error,
    },
    /// Writing `--record`'s trace failed (boxed: a TraceError is large,
    /// and every function of the event loop returns this type).
    Record {
        path: PathBuf,
        error: Box<TraceError>,
    },
    /// The data path stopped serving: a device IO the policy could not
    /// survive, the policy misusing the data path, the engine failing.
    DataPath(DataPathError),
    /// The final sync of the backing stores failed: the last writes may
    /// not be durable (the failed device IOs, in words).
    FinalSync { device_errors: Vec<String> },
    /// A warm stop's FLUSH failed, so the cache is not durable.
    StopFlush {
        error: IoError,
        device_errors: Vec<String>,
    },
    /// Interrupted (a second signal) before the policy finished writing
    /// back (with the dirty bytes it reported, if any).
    Interrupted { dirty_bytes: Option<f64> },
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Option(e) => e.fmt(f),
            ServeError::Backends(e) => e.fmt(f),
            ServeError::Config(e) => e.fmt(f),
            ServeError::Stack(e) => e.fmt(f),
            ServeError::StoreCount { stores, devices } => {
                write!(f, "{stores} backing stores for {devices} devices")
            }
            ServeError::BlockSize {
                policy,
                align_bytes,
            } => write!(
                f,
                "policy {policy} moves data in units of {align_bytes} bytes; NBD's minimum block \
                 size must be a power of two ≤ 65536 (use a smaller page or block size)"
            ),
            ServeError::VolumeTooSmall {
                volume_bytes,
                block_bytes,
            } => write!(
                f,
                "the stack's volume is {volume_bytes} bytes, less than one {block_bytes}-byte block"
            ),
            ServeError::Export(e) => write!(f, "export: {e}"),
            ServeError::Metrics(e) => write!(f, "metrics: {e}"),
            ServeError::Engine(e) => e.fmt(f),
            ServeError::Sys { call, source } => write!(f, "{call}: {source}"),
            ServeError::SocketPath { path, problem } => {
                write!(f, "--unix {}: {problem}", path.display())
            }
            ServeError::File {
                flag,
                path,
                action,
                source,
            } => write!(f, "{flag} {}: {action}: {source}", path.display()),
            ServeError::Tcp {
                address,
                action,
                source,
            } => write!(f, "--tcp {address}: {action}: {source}"),
            ServeError::Record { path, error } => {
                write!(f, "--record {}: {error}", path.display())
            }
            ServeError::DataPath(e) => e.fmt(f),
            ServeError::FinalSync { device_errors } => write!(
                f,
                "the final sync of the backing stores failed, so the last writes may not be \
                 durable: {}",
                device_errors.join("; ")
            ),
            ServeError::StopFlush {
                error,
                device_errors,
            } => write!(
                f,
                "the stop's FLUSH failed ({}): {}",
                error.as_str(),
                device_errors.join("; ")
            ),
            ServeError::Interrupted { dirty_bytes } => {
                write!(f, "interrupted before the policy finished writing back")?;
                if let Some(d) = dirty_bytes {
                    write!(f, " ({d} dirty bytes on the fast tier)")?;
                }
                write!(f, ": the backing device may lack acknowledged writes")
            }
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Option(e) => Some(e),
            ServeError::Backends(e) => Some(e),
            ServeError::Config(e) => Some(e.as_ref()),
            ServeError::Stack(e) => Some(e.as_ref()),
            ServeError::Export(e) => Some(e),
            ServeError::Metrics(e) => Some(e),
            ServeError::Engine(e) => Some(e),
            ServeError::Sys { source, .. }
            | ServeError::File { source, .. }
            | ServeError::Tcp { source, .. } => Some(source),
            ServeError::Record { error, .. } => Some(error.as_ref()),
            ServeError::DataPath(e) => Some(e),
            _ => None,
        }
    }
}

impl ServeError {
    /// The OS error behind it, if one is known (for an exception class by
    /// `io::ErrorKind`).
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            ServeError::Sys { source, .. }
            | ServeError::File { source, .. }
            | ServeError::Tcp { source, .. } => Some(source),
            ServeError::Backends(e) => e.io_error(),
            ServeError::Stack(e) => e.io_error(),
            _ => None,
        }
    }

    /// The config error behind it, if it is one (the stores' keys, the
    /// policy's config, the device models).
    pub fn config_error(&self) -> Option<&ConfigError> {
        match self {
            ServeError::Config(e) => Some(e),
            ServeError::Backends(BackendError::Config(e)) => Some(e),
            ServeError::Stack(e) => match e.as_ref() {
                RunError::Config(e) => Some(e),
                RunError::Backends(BackendError::Config(e)) => Some(e),
                _ => None,
            },
            _ => None,
        }
    }
}

impl From<DataPathError> for ServeError {
    fn from(e: DataPathError) -> Self {
        ServeError::DataPath(e)
    }
}

impl From<EngineError> for ServeError {
    fn from(e: EngineError) -> Self {
        ServeError::Engine(e)
    }
}

impl From<BackendError> for ServeError {
    fn from(e: BackendError) -> Self {
        ServeError::Backends(e)
    }
}

impl From<RunError> for ServeError {
    fn from(e: RunError) -> Self {
        ServeError::Stack(Box::new(e))
    }
}

impl From<ConfigError> for ServeError {
    fn from(e: ConfigError) -> Self {
        ServeError::Config(Box::new(e))
    }
}
