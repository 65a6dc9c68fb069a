//! Config vocabulary shared by every executor: byte counts with units,
//! config errors that name the file and key, and `--set` overrides.

/// A byte count written as an integer or with a binary unit ("64MiB"):
/// the policies' type, one implementation for every config.
pub use tierlab_policies::cache::ByteCount as Bytes;

/// A config error, with the file and key path when known.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Applies `key.path=value` overrides to a parsed TOML document. Array
/// elements are addressed by index (`tenants.0.iops_cap=50`). The value is
/// read as TOML (`8`, `1.5`, `true`, `"text"`), else taken as a string.
pub fn apply_overrides(doc: &mut toml::Table, overrides: &[String]) -> Result<(), ConfigError> {
    for item in overrides {
        let (path, raw) = item.split_once('=').ok_or_else(|| {
            ConfigError(format!(
                "--set {item:?}: expected KEY=VALUE, e.g. tenants.0.driver.iodepth=8"
            ))
        })?;
        let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        let keys: Vec<&str> = path.split('.').collect();
        if keys.iter().any(|k| k.is_empty()) {
            return Err(ConfigError(format!(
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
                        ConfigError(format!(
                            "--set {item:?}: `{key}` is not a list in the config"
                        ))
                    })?;
                let len = arr.len();
                let elem = arr.get_mut(next).ok_or_else(|| {
                    ConfigError(format!(
                        "--set {item:?}: `{key}` has {len} entries, index {next} is out of range"
                    ))
                })?;
                if i + 2 == keys.len() {
                    *elem = value.clone();
                    break;
                }
                node = elem.as_table_mut().ok_or_else(|| {
                    ConfigError(format!("--set {item:?}: `{key}.{next}` is not a table"))
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
                    ConfigError(format!("--set {item:?}: `{key}` is not a table"))
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
                            .map_err(|e| ConfigError(format!("{origin}: key `{key_path}`: {e}")))?;
                        let n = i64::try_from(bytes).map_err(|_| {
                            ConfigError(format!("{origin}: key `{key_path}`: {s:?} is above 8 EiB"))
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
