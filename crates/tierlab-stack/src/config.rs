//! Config vocabulary shared by every executor: byte counts with units,
//! config errors that name the file and key, and `--set` overrides.

/// A byte count written as an integer or with a binary unit ("64MiB"):
/// the policies' type, one implementation for every config.
pub use tierlab_policies::cache::ByteCount as Bytes;

pub use tierlab_core::ParamError;
use tierlab_trace::error::join_key;

/// A config error: where (the config's origin, a file or `<dict>`, when
/// known) and what. Rendered once, here; Python maps the kinds to
/// exception classes.
#[derive(Debug)]
pub struct ConfigError {
    /// The file (or `--set`, `<dict>`) the config came from.
    pub origin: Option<String>,
    /// Boxed: errors travel up many `Result`s; keep them a few words wide.
    pub kind: Box<ConfigErrorKind>,
}

#[derive(Debug)]
pub enum ConfigErrorKind {
    /// A key whose value is not allowed: key path, found, expected.
    Param(ParamError),
    /// A key the schema does not take here (unknown, missing, of the wrong
    /// type): the key path, and what is wrong in the deserializer's words.
    Key { key: String, message: String },
    /// A trace the config names (`tenants[0].workload.trace`) could not
    /// be opened or read: the trace's own error, which names its file.
    Trace {
        key: String,
        error: tierlab_trace::TraceError,
    },
    /// The config file could not be read.
    Io(std::io::Error),
    /// The text is not a config: TOML that does not parse, a malformed
    /// `--set`.
    Syntax(String),
}

impl ConfigError {
    pub fn param(e: ParamError) -> Self {
        ConfigError {
            origin: None,
            kind: Box::new(ConfigErrorKind::Param(e)),
        }
    }

    /// A bad value at `key`: what was found, what is allowed.
    pub fn value(
        key: impl Into<String>,
        found: impl std::fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        ConfigError::param(ParamError::new(key, found, expected))
    }

    pub fn key(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            origin: None,
            kind: Box::new(ConfigErrorKind::Key {
                key: key.into(),
                message: message.into(),
            }),
        }
    }

    pub fn trace(key: impl Into<String>, error: tierlab_trace::TraceError) -> Self {
        match error {
            // A generator's bad parameter is a config value like any other.
            tierlab_trace::TraceError::Param(e) => ConfigError::param(e.within(key)),
            error => ConfigError {
                origin: None,
                kind: Box::new(ConfigErrorKind::Trace {
                    key: key.into(),
                    error,
                }),
            },
        }
    }

    pub fn syntax(message: impl Into<String>) -> Self {
        ConfigError {
            origin: None,
            kind: Box::new(ConfigErrorKind::Syntax(message.into())),
        }
    }

    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        ConfigError {
            origin: Some(path.display().to_string()),
            kind: Box::new(ConfigErrorKind::Io(source)),
        }
    }

    /// A serde_path_to_error failure under `prefix` (`policy`,
    /// `devices[0]`): a value our own checks refused comes back as the
    /// `ParamError` it was; anything else is the deserializer's message.
    pub fn from_serde<E: std::fmt::Display>(
        prefix: &str,
        e: serde_path_to_error::Error<E>,
    ) -> Self {
        let path = e.path().to_string();
        // `.` is serde_path_to_error's name for the table itself.
        let key = join_key(prefix, if path == "." { "" } else { &path });
        // toml ends its messages with a newline.
        let message = e.inner().to_string().trim_end().to_string();
        match ParamError::parse_display(&message) {
            Some(inner) => ConfigError::param(inner.within(key)),
            None => ConfigError::key(key, message),
        }
    }

    /// Names where the config came from, unless already named.
    pub fn at(mut self, origin: &str) -> Self {
        if self.origin.is_none() && !origin.is_empty() {
            self.origin = Some(origin.to_string());
        }
        self
    }

    /// The same error one table down (`devices[1]`).
    pub fn within(mut self, outer: &str) -> Self {
        match self.kind.as_mut() {
            ConfigErrorKind::Param(e) => e.push_outer(outer),
            ConfigErrorKind::Key { key, .. } | ConfigErrorKind::Trace { key, .. } => {
                *key = join_key(outer, key)
            }
            ConfigErrorKind::Io(_) | ConfigErrorKind::Syntax(_) => {}
        }
        self
    }

    /// The key path the error is about, when it is about one.
    pub fn key_path(&self) -> Option<String> {
        match self.kind.as_ref() {
            ConfigErrorKind::Param(e) => Some(e.key()).filter(|k| !k.is_empty()),
            ConfigErrorKind::Key { key, .. } | ConfigErrorKind::Trace { key, .. } => {
                Some(key.clone())
            }
            _ => None,
        }
    }
}

impl From<ParamError> for ConfigError {
    fn from(e: ParamError) -> Self {
        ConfigError::param(e)
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(origin) = &self.origin {
            write!(f, "{origin}: ")?;
        }
        match self.kind.as_ref() {
            ConfigErrorKind::Param(e) => write!(f, "{e}"),
            ConfigErrorKind::Key { key, message } if key.is_empty() => f.write_str(message),
            // A command-line flag is named as such, as ParamError does.
            ConfigErrorKind::Key { key, message } if key.starts_with("--") => {
                write!(f, "`{key}`: {message}")
            }
            ConfigErrorKind::Key { key, message } => write!(f, "key `{key}`: {message}"),
            ConfigErrorKind::Trace { key, error } => write!(f, "key `{key}`: {error}"),
            ConfigErrorKind::Io(e) => write!(f, "{e}"),
            ConfigErrorKind::Syntax(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.kind.as_ref() {
            ConfigErrorKind::Param(e) => Some(e),
            ConfigErrorKind::Io(e) => Some(e),
            ConfigErrorKind::Trace { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Applies `key.path=value` overrides to a parsed TOML document. Array
/// elements are addressed by index (`tenants.0.iops_cap=50`). The value is
/// read as TOML (`8`, `1.5`, `true`, `"text"`), else taken as a string.
pub fn apply_overrides(doc: &mut toml::Table, overrides: &[String]) -> Result<(), ConfigError> {
    for item in overrides {
        let (path, raw) = item.split_once('=').ok_or_else(|| {
            ConfigError::syntax(format!(
                "--set {item:?}: expected KEY=VALUE, e.g. tenants.0.driver.iodepth=8"
            ))
        })?;
        let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        let keys: Vec<&str> = path.split('.').collect();
        if keys.iter().any(|k| k.is_empty()) {
            return Err(ConfigError::syntax(format!(
                "--set {item:?}: empty key in {path:?}"
            )));
        }
        let mut node = &mut *doc;
        for (i, key) in keys.iter().enumerate() {
            let last = i + 1 == keys.len();
            // An array element: `name.N`.
            if let Some(next) = keys.get(i + 1).and_then(|k| k.parse::<usize>().ok()) {
                let arr = node
                    .get_mut(*key)
                    .and_then(|v| v.as_array_mut())
                    .ok_or_else(|| {
                        ConfigError::syntax(format!(
                            "--set {item:?}: `{key}` is not a list in the config"
                        ))
                    })?;
                let len = arr.len();
                let elem = arr.get_mut(next).ok_or_else(|| {
                    ConfigError::syntax(format!(
                        "--set {item:?}: `{key}` has {len} entries, index {next} is out of range"
                    ))
                })?;
                if i + 2 == keys.len() {
                    *elem = value.clone();
                    break;
                }
                node = elem.as_table_mut().ok_or_else(|| {
                    ConfigError::syntax(format!("--set {item:?}: `{key}.{next}` is not a table"))
                })?;
                continue;
            }
            if key.parse::<usize>().is_ok() {
                continue; // consumed as an index above
            }
            if last {
                node.insert(key.to_string(), value.clone());
            } else {
                let entry = node
                    .entry(key.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                node = entry.as_table_mut().ok_or_else(|| {
                    ConfigError::syntax(format!("--set {item:?}: `{key}` is not a table"))
                })?;
            }
        }
    }
    Ok(())
}

/// Turns every `*_bytes` key of the `devices` tables (members and nested
/// tables included) written with a unit (`capacity_bytes = "64MiB"`) into
/// its byte count, so device keys take sizes as the policies' keys do: one
/// parser ([`tierlab_trace::units::parse_size_bytes`]) for every config.
pub fn device_byte_units(doc: &mut toml::Table, origin: &str) -> Result<(), ConfigError> {
    fn walk(v: &mut toml::Value, path: &str, origin: &str) -> Result<(), ConfigError> {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t.iter_mut() {
                    let key_path = format!("{path}.{k}");
                    if k.ends_with("_bytes")
                        && let toml::Value::String(s) = v
                    {
                        let bytes = tierlab_trace::units::parse_size_bytes(s)
                            .map_err(|e| ConfigError::param(e.within(&key_path)).at(origin))?;
                        let n = i64::try_from(bytes).map_err(|_| {
                            ConfigError::value(&key_path, format!("{s:?}"), "at most 8 EiB")
                                .at(origin)
                        })?;
                        *v = toml::Value::Integer(n);
                    } else {
                        walk(v, &key_path, origin)?;
                    }
                }
            }
            toml::Value::Array(a) => {
                for (i, v) in a.iter_mut().enumerate() {
                    walk(v, &format!("{path}[{i}]"), origin)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
    match doc.get_mut("devices") {
        Some(v) => walk(v, "devices", origin),
        None => Ok(()),
    }
}
