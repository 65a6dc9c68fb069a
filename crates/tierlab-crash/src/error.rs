//! Why a check could not run — not what it found (violations are the
//! [`crate::Report`]).

use std::path::PathBuf;

use tierlab_core::ParamError;
use tierlab_real::error::BackendError;
use tierlab_stack::ConfigError;

#[derive(Debug)]
pub enum CrashError {
    /// The stack's config cannot be checked (key path, value, what is allowed).
    Config(ConfigError),
    /// An option out of range (`host_ios`, `read_percent`, ...).
    Option(ParamError),
    /// The checker could not assemble the stack over its in-memory stores
    /// (an array it cannot open: a key of its table, its bitmap).
    Media(BackendError),
    /// The recorded run failed: the policy refused its fresh stores, a
    /// device IO failed, or the workload did not finish.
    Run(String),
    /// Writing the report.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for CrashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CrashError::Config(e) => e.fmt(f),
            CrashError::Option(e) => e.fmt(f),
            CrashError::Media(e) => e.fmt(f),
            CrashError::Run(m) => f.write_str(m),
            CrashError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for CrashError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CrashError::Config(e) => Some(e),
            CrashError::Option(e) => Some(e),
            CrashError::Io { source, .. } => Some(source),
            CrashError::Media(e) => Some(e),
            CrashError::Run(_) => None,
        }
    }
}

impl From<ConfigError> for CrashError {
    fn from(e: ConfigError) -> Self {
        CrashError::Config(e)
    }
}

impl From<ParamError> for CrashError {
    fn from(e: ParamError) -> Self {
        CrashError::Option(e)
    }
}
