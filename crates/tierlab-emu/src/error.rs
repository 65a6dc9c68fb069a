//! Why an emulator could not start.

use std::path::PathBuf;

use tierlab_core::ParamError;

#[derive(Debug)]
pub enum EmuError {
    /// The device model could not be built (the factory's error).
    Model(Box<dyn std::error::Error + Send + Sync>),
    /// The device thread could not be started, or ended while building.
    Thread(String),
    /// The served file's name or size.
    File(ParamError),
    /// The mount point: missing, not a directory, a stale mount that could
    /// not be cleared, or FUSE refusing to mount (with the remedy).
    Mount {
        mountpoint: PathBuf,
        message: String,
    },
}

impl std::fmt::Display for EmuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmuError::Model(e) => e.fmt(f),
            EmuError::Thread(m) => f.write_str(m),
            EmuError::File(e) => e.fmt(f),
            EmuError::Mount {
                mountpoint,
                message,
            } => {
                write!(f, "mount point {}: {message}", mountpoint.display())
            }
        }
    }
}

impl std::error::Error for EmuError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EmuError::Model(e) => Some(e.as_ref()),
            EmuError::File(e) => Some(e),
            EmuError::Thread(_) | EmuError::Mount { .. } => None,
        }
    }
}
