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

/// A parameter (a config key, a flag, a constructor argument) whose value
/// is not allowed: which key, what was there, what is allowed. The config
/// counterpart of [`FieldError`]; every config check in tierlab returns it,
/// and each layer that knows where the key sits adds its part of the path
/// ([`ParamError::within`]), so the message names the key as the user wrote
/// it: ``key `devices[1].capacity_bytes`: expected 4096 ..= 2^60, found 0``.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError {
    /// Key path segments, outermost first (`devices[1]`, `capacity_bytes`);
    /// empty for a value that is not under a key (a bare argument).
    key: Vec<String>,
    /// The key is a full path already (a policy blaming a device's
    /// capacity: `devices[0].capacity_bytes`): `within` leaves it alone.
    rooted: bool,
    /// The value as the user gave it (or as it was computed from theirs).
    pub found: String,
    /// What is allowed, in words (`1 ..= 32`, `one of: lru, fifo`).
    pub expected: String,
}

impl ParamError {
    pub fn new(
        key: impl Into<String>,
        found: impl fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        let key = key.into();
        ParamError {
            key: if key.is_empty() {
                Vec::new()
            } else {
                vec![key]
            },
            rooted: false,
            found: found.to_string(),
            expected: expected.into(),
        }
    }

    /// An error about a key outside the caller's table, named by its full
    /// path from the config's root (`devices[0].capacity_bytes`).
    pub fn rooted(
        key: impl Into<String>,
        found: impl fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        ParamError {
            rooted: true,
            ..ParamError::new(key, found, expected)
        }
    }

    /// Fails unless `min <= value <= max` (NaN is never in range).
    pub fn check_range<T: PartialOrd + fmt::Display>(
        key: &str,
        value: T,
        min: T,
        max: T,
    ) -> Result<(), ParamError> {
        if value >= min && value <= max {
            Ok(())
        } else {
            Err(ParamError::new(key, &value, format!("{min} ..= {max}")))
        }
    }

    /// An unknown name among `known`, with the nearest one suggested.
    pub fn unknown_name<'a>(
        key: &str,
        found: &str,
        known: impl IntoIterator<Item = &'a str> + Clone,
    ) -> ParamError {
        let hint = crate::names::did_you_mean(found, known.clone());
        let list: Vec<&str> = known.into_iter().collect();
        ParamError::new(
            key,
            format!("{found:?}{hint}"),
            format!("one of: {}", list.join(", ")),
        )
    }

    /// The same error one level down: `e.within("devices[1]")` turns key
    /// `capacity_bytes` into `devices[1].capacity_bytes`.
    pub fn within(mut self, outer: impl Into<String>) -> Self {
        self.push_outer(outer);
        self
    }

    /// `within` in place, for an error held in a larger one.
    pub fn push_outer(&mut self, outer: impl Into<String>) {
        let outer = outer.into();
        if !outer.is_empty() && !self.rooted {
            self.key.insert(0, outer);
        }
    }

    /// The same error under another name: a library's `policy` is a
    /// config's `eviction`.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.key = if key.is_empty() {
            Vec::new()
        } else {
            vec![key]
        };
        self
    }

    /// Adds a reason to what is expected: `(SATA NCQ holds at most 32 commands)`.
    pub fn because(mut self, why: impl fmt::Display) -> Self {
        self.expected = format!("{} ({why})", self.expected);
        self
    }

    /// The key path as a user writes it (`tenants[0].driver.iodepth`);
    /// empty when the value was not under a key.
    pub fn key(&self) -> String {
        self.key
            .iter()
            .fold(String::new(), |path, segment| join_key(&path, segment))
    }
}

impl ParamError {
    /// Reads back what `Display` wrote: for an error that had to travel as
    /// text (serde's `try_from` hands the deserializer only a message).
    /// `None` for any other text.
    pub fn parse_display(text: &str) -> Option<ParamError> {
        let (key, rest) = match text.strip_prefix("key `") {
            Some(rest) => {
                let (key, rest) = rest.split_once("`: ")?;
                (key, rest)
            }
            None => ("", text),
        };
        let rest = rest.strip_prefix("expected ")?;
        // `expected` is ours and never says ", found "; `found` is the
        // user's text and may.
        let (expected, found) = rest.split_once(", found ")?;
        let segments = split_key_path(key);
        Some(ParamError {
            key: segments,
            rooted: false,
            found: found.to_string(),
            expected: expected.to_string(),
        })
    }
}

/// `outer` and `inner` as one key path: `devices[0]` + `rpm` is
/// `devices[0].rpm`, `members` + `[2]` is `members[2]`; either may be empty.
pub fn join_key(outer: &str, inner: &str) -> String {
    if outer.is_empty() {
        inner.to_string()
    } else if inner.is_empty() {
        outer.to_string()
    } else if inner.starts_with('[') {
        format!("{outer}{inner}")
    } else {
        format!("{outer}.{inner}")
    }
}

/// `devices[1].members[0].rpm` → `devices[1]`, `members[0]`, `rpm`
/// (the segments `ParamError::key` joins back).
fn split_key_path(key: &str) -> Vec<String> {
    key.split('.')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = self.key();
        if key.starts_with("--") {
            // A command-line flag rather than a config key.
            write!(f, "`{key}`: ")?;
        } else if !key.is_empty() {
            write!(f, "key `{key}`: ")?;
        }
        write!(f, "expected {}, found {}", self.expected, self.found)
    }
}

impl std::error::Error for ParamError {}

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
    /// A parameter (a generator's, a flag's) that is unknown or has a bad
    /// value; its key lets a config error name `...params.KEY`.
    Param(ParamError),
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

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "field `{}`: expected {}, found {:?}",
            self.field, self.expected, self.found
        )
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
                write!(f, ": {error}")
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
            TraceError::Param(e) => write!(f, "{e}"),
            TraceError::Invalid(message) => f.write_str(message),
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

impl From<ParamError> for TraceError {
    fn from(e: ParamError) -> Self {
        TraceError::Param(e)
    }
}

pub type Result<T, E = TraceError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_param_error_names_its_key_path_as_the_user_wrote_it() {
        let e = ParamError::new("rpm", 100, "3600 ..= 20000")
            .within("members[2]")
            .within("devices[0]");
        assert_eq!(e.key(), "devices[0].members[2].rpm");
        assert_eq!(
            e.to_string(),
            "key `devices[0].members[2].rpm`: expected 3600 ..= 20000, found 100"
        );
        // A key blamed from elsewhere keeps its full path.
        let e =
            ParamError::rooted("devices[0].capacity_bytes", 4096, "at least 8192").within("policy");
        assert_eq!(e.key(), "devices[0].capacity_bytes");
        // A flag is named as a flag; a bare value has no key.
        assert_eq!(
            ParamError::new("--policy", "\"x\"", "one of: lru").to_string(),
            "`--policy`: expected one of: lru, found \"x\""
        );
        assert_eq!(
            ParamError::new("", 0, "at least 1").to_string(),
            "expected at least 1, found 0"
        );
        assert_eq!(
            ParamError::new("", 0, "at least 1").within("top_n").key(),
            "top_n"
        );
        assert_eq!(
            ParamError::new("x", 1, "2").because("a reason").expected,
            "2 (a reason)"
        );
    }

    /// What crosses serde as text comes back as the error it was.
    #[test]
    fn display_reads_back() {
        for e in [
            ParamError::new("rpm", 100, "3600 ..= 20000").within("members[2]"),
            ParamError::new("", "\"4KB, found in a file\"", "a binary unit"),
            ParamError::unknown_name("preset", "intel-p370", ["intel-p3700", "intel-s3500"]),
        ] {
            assert_eq!(
                ParamError::parse_display(&e.to_string()),
                Some(e.clone()),
                "{e}"
            );
        }
        assert_eq!(
            ParamError::parse_display("unknown field `x`, expected one of `a`"),
            None
        );
        assert_eq!(
            ParamError::parse_display("invalid type: string, expected u64"),
            None
        );
    }
}
