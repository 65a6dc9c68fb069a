//! One device's table from a file, a `[[devices]]` entry of a config,
//! and `KEY=VALUE` overrides: what `tierlab emulate` serves.

use std::fs;
use std::path::PathBuf;

use tierlab_trace::units::parse_size_bytes;

use crate::ConfigError;

/// A `--set` value: a size for `*_bytes` keys, else TOML (number, bool,
/// quoted string), else a bare string.
pub fn set_value(key: &str, text: &str) -> toml::Value {
    if key.ends_with("_bytes") {
        if let Ok(n) = parse_size_bytes(text) {
            if let Ok(n) = i64::try_from(n) {
                return toml::Value::Integer(n);
            }
        }
    }
    match toml::from_str::<toml::Table>(&format!("v = {text}")) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(text.into())),
        Err(_) => toml::Value::String(text.into()),
    }
}

/// Where one device's table comes from: the options of `tierlab emulate`
/// (named after them in errors).
#[derive(Clone, Debug, Default)]
pub struct DeviceTableSpec {
    /// A TOML file: one device table, or a config whose `[[devices]]` entry
    /// is picked by `device` (or is the only one).
    pub config: Option<PathBuf>,
    pub device: Option<String>,
    /// `model` and `preset` keys, set over the file's.
    pub model: Option<String>,
    pub preset: Option<String>,
    /// `KEY=VALUE` overrides, applied last (see [`set_value`]).
    pub set: Vec<String>,
}

/// The device table `args` describe, without its name and without the
/// real executor's keys (its backing store), ready for
/// [`crate::standard_device`].
pub fn device_table(args: &DeviceTableSpec) -> Result<toml::Table, ConfigError> {
    let mut table = match &args.config {
        Some(path) => {
            let origin = path.display().to_string();
            let text = fs::read_to_string(path).map_err(|e| ConfigError::io(path, e))?;
            let mut t: toml::Table = toml::from_str(&text).map_err(|e| {
                ConfigError::syntax(e.to_string().trim_end().to_string()).at(&origin)
            })?;
            match t.remove("devices") {
                Some(toml::Value::Array(devices)) => {
                    let tables: Vec<toml::Table> = devices
                        .into_iter()
                        .filter_map(|d| match d {
                            toml::Value::Table(t) => Some(t),
                            _ => None,
                        })
                        .collect();
                    let name_of =
                        |t: &toml::Table| t.get("name").and_then(|n| n.as_str()).map(String::from);
                    let names: Vec<String> = tables.iter().filter_map(name_of).collect();
                    match &args.device {
                        Some(want) => tables
                            .into_iter()
                            .find(|t| name_of(t).as_deref() == Some(want.as_str()))
                            .ok_or_else(|| {
                                ConfigError::value(
                                    "--device",
                                    format!("`{want}`"),
                                    format!(
                                        "the name of a [[devices]] entry in {origin}: {}",
                                        names.join(", ")
                                    ),
                                )
                            })?,
                        None if tables.len() == 1 => tables.into_iter().next().expect("one"),
                        None => {
                            return Err(ConfigError::key(
                                "--device",
                                format!(
                                    "missing: {origin} has {} [[devices]], pick one with \
                                     --device NAME ({})",
                                    tables.len(),
                                    names.join(", ")
                                ),
                            ));
                        }
                    }
                }
                Some(_) => {
                    return Err(ConfigError::key("devices", "not an array of tables").at(&origin));
                }
                None => {
                    if args.device.is_some() {
                        return Err(ConfigError::key(
                            "--device",
                            format!(
                                "{origin} is a device table, not a sim config with [[devices]]"
                            ),
                        ));
                    }
                    t
                }
            }
        }
        None => toml::Table::new(),
    };
    table.remove("name");
    if let Some(m) = &args.model {
        table.insert("model".into(), toml::Value::String(m.clone()));
    }
    if let Some(p) = &args.preset {
        table.insert("preset".into(), toml::Value::String(p.clone()));
    }
    for kv in &args.set {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| {
                ConfigError::value(
                    "--set",
                    format!("{kv:?}"),
                    "KEY=VALUE, e.g. --set queue_depth=1",
                )
            })?;
        table.insert(k.trim().to_string(), set_value(k.trim(), v.trim()));
    }
    if !table.contains_key("model") {
        return Err(ConfigError::key(
            "--model",
            "missing: give --model (memory, ssd, hdd, smr, sswd, flash-ssd) or --config FILE",
        ));
    }
    // The real executor's keys of a `tierlab run` config (its backing store).
    for k in crate::REAL_DEVICE_KEYS {
        table.remove(k);
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(model: Option<&str>, preset: Option<&str>, set: &[&str]) -> DeviceTableSpec {
        DeviceTableSpec {
            model: model.map(String::from),
            preset: preset.map(String::from),
            set: set.iter().map(|s| s.to_string()).collect(),
            ..DeviceTableSpec::default()
        }
    }

    #[test]
    fn set_values_are_sizes_numbers_bools_or_strings() {
        assert_eq!(
            set_value("capacity_bytes", "1GiB"),
            toml::Value::Integer(1 << 30)
        );
        assert_eq!(set_value("queue_depth", "1"), toml::Value::Integer(1));
        assert_eq!(set_value("write_cache", "true"), toml::Value::Boolean(true));
        assert_eq!(
            set_value("scheduler", "fifo"),
            toml::Value::String("fifo".into())
        );
        assert_eq!(
            set_value("scheduler", "\"sstf\""),
            toml::Value::String("sstf".into())
        );
    }

    #[test]
    fn the_device_table_comes_from_model_preset_and_sets_or_a_sim_config() {
        let t = device_table(&spec(
            Some("hdd"),
            Some("sas-15k-600gb"),
            &["scheduler=fifo", "queue_depth=1", "capacity_bytes=1GiB"],
        ))
        .unwrap();
        let dev = crate::standard_device(&t, 1).unwrap();
        assert_eq!(dev.capacity_bytes(), 1 << 30);
        // The RAID 5 of configs/qos-eval1.toml, by name.
        let cfg = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../configs/qos-eval1.toml"
        ));
        let from = |device: &str| DeviceTableSpec {
            config: Some(cfg.clone()),
            device: Some(device.into()),
            ..DeviceTableSpec::default()
        };
        let t = device_table(&from("raid5")).unwrap();
        assert_eq!(t["model"].as_str(), Some("raid"));
        assert!(crate::standard_device(&t, 1).is_ok());
        let e = device_table(&from("nope")).unwrap_err();
        assert_eq!(e.key_path().as_deref(), Some("--device"));
        let shown = e.to_string();
        assert!(
            shown.starts_with("`--device`: expected the name of a [[devices]] entry in")
                && shown.contains(": raid5")
                && shown.ends_with("found `nope`"),
            "{shown}"
        );
        let e = device_table(&DeviceTableSpec::default()).unwrap_err();
        assert_eq!(e.key_path().as_deref(), Some("--model"));
        assert!(e.to_string().starts_with("`--model`: missing"), "{e}");
        let e = device_table(&spec(Some("hdd"), None, &["oops"])).unwrap_err();
        assert_eq!(e.key_path().as_deref(), Some("--set"));
        assert!(e.to_string().contains("KEY=VALUE"), "{e}");
        // An unreadable file is an IO error that names the file.
        let missing = PathBuf::from("/nonexistent/dev.toml");
        let e = device_table(&DeviceTableSpec {
            config: Some(missing),
            ..DeviceTableSpec::default()
        })
        .unwrap_err();
        assert!(
            matches!(e.kind.as_ref(), crate::config::ConfigErrorKind::Io(_)),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("/nonexistent/dev.toml: "), "{e}");
    }
}
