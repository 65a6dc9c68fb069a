//! The run configuration: one TOML file describes devices, the policy
//! stack, the tenants (workload + driver) and the outputs. Unknown keys are
//! errors that name the key path; bad values name the key, the value and
//! what is allowed. `--set a.b.0.c=value` overrides any key before parsing.

use std::path::{Path, PathBuf};
use tierlab_trace::spread::SpreadMode;

use crate::driver::IopsBudget;

use serde::Deserialize;

pub use tierlab_stack::config::{Bytes, ConfigError, ConfigErrorKind, ParamError, apply_overrides};
pub use tierlab_stack::policies::PolicySpec as PolicyConfig;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Seed for every random draw of the run (generators, device models).
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub run: RunConfig,
    /// Device models; the policy addresses them by index in this list.
    pub devices: Vec<toml::Table>,
    #[serde(default)]
    pub policy: PolicyConfig,
    pub tenants: Vec<TenantConfig>,
    #[serde(default)]
    pub output: OutputConfig,
    /// Where the config came from (the file, `<config dict>`), so that
    /// errors found when the run is built name it too.
    #[serde(skip)]
    pub origin: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Stop the whole run at this virtual time (seconds).
    pub duration_s: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    pub workload: WorkloadConfig,
    #[serde(default)]
    pub driver: DriverConfig,
    pub region: Option<RegionConfig>,
    /// IOPS cap (per-second token bucket).
    pub iops_cap: Option<f64>,
    /// The cap over time: from each entry's `from_s` on, `iops` (a
    /// tenant whose demand changes, as in the QoS evaluations); before the
    /// first entry `iops_cap` applies.
    #[serde(default)]
    pub iops_schedule: Vec<IopsStep>,
    /// Where the token bucket's one-second windows start, seconds past each
    /// whole second (0 ≤ offset < 1): a load-control thread's own second
    /// (docs/simulation.md). Default 0.
    #[serde(default)]
    pub iops_window_offset_s: f64,
    /// How the cap reaches a closed loop's threads: `shared` (default),
    /// `per-thread` or `paced` (docs/simulation.md).
    #[serde(default)]
    pub iops_budget: IopsBudget,
}

/// One step of a tenant's `iops_schedule`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IopsStep {
    pub from_s: f64,
    pub iops: f64,
}

/// A tenant's workload: a trace or a generator (deserialized by hand, so a
/// mistake gets a message in the config's terms, not serde's "did not
/// match any variant of untagged enum").
#[derive(Clone, Debug)]
pub enum WorkloadConfig {
    /// A trace file; relative paths are relative to the config file.
    Trace {
        trace: PathBuf,
        format: Option<String>,
        /// Keep only this device of a multi-device trace.
        device: Option<String>,
        skip_bad: bool,
    },
    /// A generator or preset (`tierlab trace gen --list`) with `key = value` parameters.
    Generator {
        generator: String,
        params: toml::Table,
    },
}

impl<'de> Deserialize<'de> for WorkloadConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Trace {
            trace: PathBuf,
            format: Option<String>,
            device: Option<String>,
            #[serde(default)]
            skip_bad: bool,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Generator {
            generator: String,
            #[serde(default)]
            params: toml::Table,
        }
        let table = toml::Table::deserialize(d)?;
        let value = toml::Value::Table(table.clone());
        if table.contains_key("trace") {
            let t = Trace::deserialize(value).map_err(|e| D::Error::custom(e.message()))?;
            Ok(WorkloadConfig::Trace {
                trace: t.trace,
                format: t.format,
                device: t.device,
                skip_bad: t.skip_bad,
            })
        } else if table.contains_key("generator") {
            let g = Generator::deserialize(value).map_err(|e| D::Error::custom(e.message()))?;
            Ok(WorkloadConfig::Generator {
                generator: g.generator,
                params: g.params,
            })
        } else {
            let hint: String = table
                .keys()
                .map(|k| tierlab_trace::names::did_you_mean(k, ["trace", "generator"]))
                .find(|h| !h.is_empty())
                .unwrap_or_default();
            let keys: Vec<&str> = table.keys().map(String::as_str).collect();
            Err(D::Error::custom(format!(
                "a workload is a trace, `{{ trace = PATH }}` (with `format`, `device`, \
                 `skip_bad`), or a generator, `{{ generator = NAME, params = {{ ... }} }}`; \
                 found keys: {}{hint}",
                if keys.is_empty() {
                    "none".to_string()
                } else {
                    keys.join(", ")
                }
            )))
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "mode", rename_all = "kebab-case")]
pub enum DriverConfig {
    /// Replay timestamps; `speed` 2 replays twice as fast; `spread`
    /// spreads the records of one quantized stamp over its quantum
    /// (docs/simulation.md).
    Open {
        #[serde(default = "one")]
        speed: f64,
        #[serde(default)]
        spread: SpreadMode,
    },
    /// N outstanding IOs, ignoring timestamps.
    Closed {
        iodepth: u32,
        total_bytes: Option<Bytes>,
        duration_s: Option<f64>,
        ios: Option<u64>,
    },
    /// As fast as possible, in trace order, with `iodepth` outstanding (fio's replay_no_stall).
    Afap {
        #[serde(default = "default_afap_depth")]
        iodepth: u32,
    },
}

fn one() -> f64 {
    1.0
}

fn default_afap_depth() -> u32 {
    32
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig::Open {
            speed: 1.0,
            spread: SpreadMode::None,
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionConfig {
    pub offset_bytes: Bytes,
    pub size_bytes: Bytes,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Interval of the time series, seconds.
    #[serde(default = "one")]
    pub interval_s: f64,
    /// Write per-device state timelines (VCD).
    #[serde(default)]
    pub timeline: bool,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            interval_s: 1.0,
            timeline: false,
        }
    }
}

/// Reads, overrides and checks a config file.
pub fn load(path: &Path, overrides: &[String]) -> Result<SimConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            tierlab_trace::names::missing_path_hint(path)
        } else {
            String::new()
        };
        let e = if hint.is_empty() {
            e
        } else {
            std::io::Error::new(e.kind(), format!("{e}{hint}"))
        };
        ConfigError::io(path, e)
    })?;
    parse(&text, &path.display().to_string(), overrides)
}

/// Parses config text (`origin` names it in errors).
pub fn parse(text: &str, origin: &str, overrides: &[String]) -> Result<SimConfig, ConfigError> {
    let mut doc: toml::Table =
        toml::from_str(text).map_err(|e| ConfigError::syntax(e.to_string()).at(origin))?;
    apply_overrides(&mut doc, overrides).map_err(|e| e.at(origin))?;
    tierlab_stack::config::device_byte_units(&mut doc, origin)?;
    let mut config: SimConfig =
        serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
            let path = e.path().to_string();
            // The message alone: toml's Display adds its own key path.
            let message = e.inner().message();
            let hint = mode_switch_hint(&path, overrides);
            // `.` is serde_path_to_error's name for the document itself.
            let e = if path == "." {
                ConfigError::key("", format!("the top level: {message}{hint}"))
            } else {
                match ParamError::parse_display(message) {
                    Some(p) if hint.is_empty() => ConfigError::param(p.within(path)),
                    _ => ConfigError::key(path, format!("{message}{hint}")),
                }
            };
            e.at(origin)
        })?;
    config.validate(origin)?;
    config.origin = origin.to_string();
    Ok(config)
}

/// When a `--set` switched a tagged table's `mode` (e.g. a driver from
/// `open` to `closed`) and that table now fails, the keys of the old mode
/// are the likely cause: say how to replace the whole table instead.
fn mode_switch_hint(error_path: &str, overrides: &[String]) -> String {
    // serde_path_to_error writes `tenants[0].driver`; --set writes
    // `tenants.0.driver`.
    let normalized = error_path.replace('[', ".").replace(']', "");
    overrides
        .iter()
        .filter_map(|o| o.split_once('='))
        .find_map(|(key, value)| {
            let table = key.strip_suffix(".mode")?;
            let value = value.trim().trim_matches('"');
            (table == normalized).then(|| {
                format!(
                    " (--set {key}={value} switched the mode, and the table keeps the old mode's \
                     keys: replace the whole table, e.g. --set '{table}={{ mode = \"{value}\", ... }}')"
                )
            })
        })
        .unwrap_or_default()
}

impl SimConfig {
    fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let err = |key: &str, found: String, expected: &str| {
            Err(ConfigError::value(key, found, expected).at(origin))
        };
        if self.devices.is_empty() {
            return err("devices", "none".into(), "at least one device");
        }
        if self.tenants.is_empty() {
            return err("tenants", "none".into(), "at least one tenant");
        }
        self.policy.check().map_err(|e| e.at(origin))?;
        if let Some(d) = self.run.duration_s {
            if !(d.is_finite() && d > 0.0) {
                return err("run.duration_s", d.to_string(), "a number of seconds > 0");
            }
        }
        if !(self.output.interval_s.is_finite() && self.output.interval_s >= 1e-6) {
            return err(
                "output.interval_s",
                self.output.interval_s.to_string(),
                "a number of seconds >= 1e-6",
            );
        }
        for (i, t) in self.tenants.iter().enumerate() {
            match &t.driver {
                DriverConfig::Open { speed, .. } if !(speed.is_finite() && *speed > 0.0) => {
                    return err(
                        &format!("tenants[{i}].driver.speed"),
                        speed.to_string(),
                        "a number > 0",
                    );
                }
                DriverConfig::Closed { iodepth: 0, .. } | DriverConfig::Afap { iodepth: 0 } => {
                    return err(
                        &format!("tenants[{i}].driver.iodepth"),
                        "0".into(),
                        "at least 1",
                    );
                }
                DriverConfig::Closed {
                    duration_s: Some(d),
                    ..
                } if !(d.is_finite() && *d > 0.0) => {
                    return err(
                        &format!("tenants[{i}].driver.duration_s"),
                        d.to_string(),
                        "a number of seconds > 0",
                    );
                }
                _ => {}
            }
            if let Some(cap) = t.iops_cap {
                if !(cap.is_finite() && cap > 0.0) {
                    return err(
                        &format!("tenants[{i}].iops_cap"),
                        cap.to_string(),
                        "an IOPS value > 0",
                    );
                }
            }
            if !(t.iops_window_offset_s.is_finite() && (0.0..1.0).contains(&t.iops_window_offset_s))
            {
                return err(
                    &format!("tenants[{i}].iops_window_offset_s"),
                    t.iops_window_offset_s.to_string(),
                    "[0, 1) s",
                );
            }
            let mut previous_s = None;
            for (j, step) in t.iops_schedule.iter().enumerate() {
                let key = format!("tenants[{i}].iops_schedule[{j}]");
                if !(step.from_s.is_finite() && step.from_s >= 0.0) {
                    return err(
                        &format!("{key}.from_s"),
                        step.from_s.to_string(),
                        "a time >= 0 s",
                    );
                }
                if previous_s.is_some_and(|p| step.from_s <= p) {
                    return err(
                        &format!("{key}.from_s"),
                        format!("{} s", step.from_s),
                        &format!(
                            "a time after the previous step's {} s (steps in time order)",
                            previous_s.unwrap()
                        ),
                    );
                }
                previous_s = Some(step.from_s);
                if !(step.iops.is_finite() && step.iops > 0.0) {
                    return err(
                        &format!("{key}.iops"),
                        step.iops.to_string(),
                        "an IOPS value > 0",
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
seed = 7
[[devices]]
model = "ssd"
preset = "intel-p3700"

[[tenants]]
name = "A"
workload = { generator = "uniform", params = { count = 1000 } }
driver = { mode = "closed", iodepth = 4, total_bytes = "1MiB" }
iops_cap = 50
"#;

    #[test]
    fn parses_and_overrides() {
        let c = parse(BASE, "t.toml", &[]).unwrap();
        assert_eq!(c.seed, 7);
        assert!(matches!(
            c.tenants[0].driver,
            DriverConfig::Closed {
                iodepth: 4,
                total_bytes: Some(Bytes(1048576)),
                ..
            }
        ));
        let c = parse(
            BASE,
            "t.toml",
            &[
                "tenants.0.driver.iodepth=16".into(),
                "seed=9".into(),
                "devices.0.preset=intel-s3500".into(),
                "output.interval_s=0.5".into(),
            ],
        )
        .unwrap();
        assert!(matches!(
            c.tenants[0].driver,
            DriverConfig::Closed { iodepth: 16, .. }
        ));
        assert_eq!(c.seed, 9);
        assert_eq!(c.devices[0]["preset"].as_str(), Some("intel-s3500"));
        assert_eq!(c.output.interval_s, 0.5);
    }

    #[test]
    fn errors_name_the_key_and_what_is_allowed() {
        let e = parse(&BASE.replace("iodepth = 4", "iodepht = 4"), "t.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.toml") && e.contains("iodepht"), "{e}");
        let e = parse(
            &BASE.replace("iops_cap = 50", "iops_cap = -1"),
            "t.toml",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("key `tenants[0].iops_cap`") && e.contains("-1"),
            "{e}"
        );
        let e = parse(&BASE.replace("\"1MiB\"", "\"1MB\""), "t.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tenants[0].driver") && e.contains("ambiguous"),
            "{e}"
        );
        let e = parse(&format!("{BASE}\nbogus = 1\n"), "t.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
        let e = parse(BASE, "t.toml", &["tenants.3.iops_cap=5".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("index 3 is out of range"), "{e}");
        let e = parse(BASE, "t.toml", &["nonsense".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("KEY=VALUE"), "{e}");
        let e = parse("seed = [", "t.toml", &[]).unwrap_err().to_string();
        assert!(e.starts_with("t.toml: "), "{e}");
        let e = parse(
            &BASE.replace("mode = \"closed\"", "mode = \"sideways\""),
            "t.toml",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("sideways") && e.contains("open"), "{e}");
    }
}
