//! `tierlab compare`: the same stack simulated and run for real, side by
//! side — how honest the device models are for this workload.

use std::path::Path;

use tierlab_sim::config::SimConfig;

use crate::RealOptions;

/// One compared quantity.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareRow {
    /// e.g. `mean_latency_us`, `tier memory: share of IOs`.
    pub name: String,
    pub simulated: f64,
    pub real: f64,
}

/// Runs `config` in the simulator (its real-only keys ignored) into
/// `out/sim` and for real (with only its real keys) into `out/real`, and
/// writes `out/compare.json`: overall IOs and latencies, and per tier its
/// share of IOs and mean latency. `base_dir` resolves relative paths;
/// `origin` names the config in errors.
pub fn compare(
    config: &SimConfig,
    base_dir: &Path,
    origin: &str,
    opts: &RealOptions,
    out: &Path,
) -> Result<Vec<CompareRow>, Box<dyn std::error::Error>> {
    // The simulator ignores the real-only keys; the real run gets only
    // its own.
    let sim_cfg = config.clone();
    let mut real_cfg = config.clone();
    for (i, r) in real_cfg.devices.iter_mut().enumerate() {
        *r = crate::raid::real_device_table(r, &format!("devices[{i}]"))
            .map_err(|e| format!("{origin}: {e}"))?;
    }
    let sim = tierlab_sim::run::run(&sim_cfg, base_dir)?;
    tierlab_sim::run::write_outputs(&sim, &out.join("sim"))?;
    let real =
        crate::run(&real_cfg, base_dir, opts).map_err(|e| format!("{origin}: real run: {e}"))?;
    crate::write_outputs(&real, &out.join("real"))?;
    // The summaries as written (the metrics render them once, to JSON).
    let read = |d: &str| -> Result<serde_json::Value, Box<dyn std::error::Error>> {
        Ok(serde_json::from_slice(&std::fs::read(
            out.join(d).join("summary.json"),
        )?)?)
    };
    let (s, r) = (read("sim")?, read("real")?);
    let mut rows: Vec<CompareRow> = Vec::new();
    let mut row = |name: String, simulated: f64, real: f64| {
        rows.push(CompareRow {
            name,
            simulated,
            real,
        })
    };
    for k in [
        "ios",
        "mean_latency_us",
        "p50_latency_us",
        "p99_latency_us",
        "max_latency_us",
    ] {
        row(
            k.to_string(),
            s[k].as_f64().unwrap_or(f64::NAN),
            r[k].as_f64().unwrap_or(f64::NAN),
        );
    }
    let total = |v: &serde_json::Value| v["ios"].as_f64().unwrap_or(0.0).max(1.0);
    for (ts, tr) in s["tiers"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(r["tiers"].as_array().into_iter().flatten())
    {
        let name = ts["name"].as_str().unwrap_or("?");
        row(
            format!("tier {name}: share of IOs"),
            ts["ios"].as_f64().unwrap_or(0.0) / total(&s),
            tr["ios"].as_f64().unwrap_or(0.0) / total(&r),
        );
        row(
            format!("tier {name}: mean_latency_us"),
            ts["mean_latency_us"].as_f64().unwrap_or(f64::NAN),
            tr["mean_latency_us"].as_f64().unwrap_or(f64::NAN),
        );
    }
    let mut json = serde_json::Map::new();
    for r in &rows {
        json.insert(
            r.name.clone(),
            serde_json::json!({ "simulated": r.simulated, "real": r.real }),
        );
    }
    std::fs::write(
        out.join("compare.json"),
        serde_json::to_string_pretty(&serde_json::Value::Object(json))? + "\n",
    )?;
    Ok(rows)
}
