//! Errors that say what went wrong, where (file, line or byte offset, field),
//! and what would have been allowed — ripgrep-style, one line each.

use std::fmt;
use std::path::PathBuf;

/// Where in an input a problem was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// 1-based line of a text format (after decompression).
    Line(u64),
    /// Byte offset of a binary record (after decompression).
    Byte(u64),
    /// The whole input (e.g. format detection, a truncated stream).
    Input,
}

/// A record that could not be parsed: which field, what was there, what was
/// expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: &'static str,
    pub found: String,
    pub expected: String,
}

impl FieldError {
    pub fn new(field: &'static str, found: &[u8], expected: impl Into<String>) -> Self {
        const MAX_SHOWN: usize = 80;
        let mut found = String::from_utf8_lossy(found).into_owned();
        if found.len() > MAX_SHOWN {
            let mut cut = MAX_SHOWN;
            while !found.is_char_boundary(cut) {
                cut -= 1;
            }
            found.truncate(cut);
            found.push('…');
        }
        FieldError {
            field,
            found,
            expected: expected.into(),
        }
    }
}

#[derive(Debug)]
pub enum TraceError {
    /// A malformed record.
    Parse {
        path: PathBuf,
        location: Location,
        error: FieldError,
    },
    /// Reading the file (or its decompressor) failed.
    Io {
        path: PathBuf,
        location: Location,
        source: std::io::Error,
    },
    /// The format could not be detected, or an explicit one does not fit.
    Format { path: PathBuf, message: String },
    /// A record cannot be represented in the output format.
    Write {
        format: &'static str,
        message: String,
    },
    /// A bad argument (a slice range, a preset's value, ...).
    Invalid(String),
    /// A generator parameter that is unknown or has a bad value: its key,
    /// so a config error can name `...params.KEY`.
    Param { key: String, message: String },
}

impl TraceError {
    /// An IO error at `path`; a missing file gets the nearest name in its
    /// folder (`crate::names::missing_path_hint`).
    pub fn io(path: impl Into<PathBuf>, location: Location, source: std::io::Error) -> Self {
        let path = path.into();
        let source = if source.kind() == std::io::ErrorKind::NotFound {
            let hint = crate::names::missing_path_hint(&path);
            if hint.is_empty() {
                source
            } else {
                std::io::Error::new(source.kind(), format!("{source}{hint}"))
            }
        } else {
            source
        };
        TraceError::Io {
            path,
            location,
            source,
        }
    }
}

fn show_location(
    f: &mut fmt::Formatter<'_>,
    path: &std::path::Path,
    location: &Location,
) -> fmt::Result {
    write!(f, "{}", path.display())?;
    match location {
        Location::Line(n) => write!(f, ":{n}"),
        Location::Byte(b) => write!(f, ": byte {b}"),
        Location::Input => Ok(()),
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Parse {
                path,
                location,
                error,
            } => {
                show_location(f, path, location)?;
                write!(
                    f,
                    ": field `{}`: expected {}, found {:?}",
                    error.field, error.expected, error.found
                )
            }
            TraceError::Io {
                path,
                location,
                source,
            } => {
                show_location(f, path, location)?;
                write!(f, ": {source}")
            }
            TraceError::Format { path, message } => write!(f, "{}: {message}", path.display()),
            TraceError::Write { format, message } => {
                write!(f, "cannot write {format}: {message}")
            }
            TraceError::Invalid(message) | TraceError::Param { message, .. } => {
                f.write_str(message)
            }
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type Result<T, E = TraceError> = std::result::Result<T, E>;
