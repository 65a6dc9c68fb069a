//! Deterministic workload generators. Each is a lazy `RecordStream` built
//! from a params struct (serde-deserializable, documented defaults) and a
//! seed: same params + seed ⇒ the same records, byte for byte (on the same
//! platform: a few draws use the platform's `ln`/`exp`). Records come in
//! non-decreasing time order with a relative time base; memory does not
//! grow with the number of records.
//!
//! - `synthetic`: uniform, zipf, sequential, mixed
//! - `concentration`: IO-concentration workloads with planted ground truth
//!   (ATSMF), and the `atsmf.*` presets
//! - `boot_storm`: VMs booting at nearly the same time
//! - `qos`: the file-share and backup tenants of the QoS experiments
//! - `trace_like`: streams with a given write ratio, mean sizes and
//!   footprint, and the `hswd.*` / `ssdraid.*` trace presets
//!
//! `from_spec` builds any of them from a name and `key=value` parameters
//! (what the CLI passes); docs/generators.md lists every parameter.

pub mod boot_storm;
pub mod common;
pub mod concentration;
pub mod job;
pub mod params;
pub mod qos;
pub mod synthetic;
pub mod trace_like;
mod zipf;

pub use boot_storm::{BootStormGen, BootStormParams, VmLayout};
pub use common::{ArrivalKind, SizeMix, SizeWeight, parse_bytes, show_bytes};
pub use concentration::{
    Concentration, ConcentrationSchedule, DriftDirection, DurationDistribution, IoConcentrationGen,
    IoConcentrationParams, write_truth_csv,
};
pub use job::GenJob;
pub use params::{KvList, KvParams, ParamInfo};
pub use qos::{BackupParams, FileShareParams, ZonedGen};
pub use synthetic::{
    CommonParams, MixComponent, MixedParams, Pattern, SequentialParams, SyntheticGen,
    UniformParams, ZipfParams,
};
pub use trace_like::{TraceLikeGen, TraceLikeParams, TraceTargets};

use crate::error::{Result, TraceError};
use crate::reader::RecordStream;

/// A generator family, its parameters and what it models.
#[derive(Clone, Debug)]
pub struct GeneratorInfo {
    pub name: &'static str,
    pub description: &'static str,
    pub params: Vec<ParamInfo>,
}

/// A named parameter set of one generator.
#[derive(Clone, Debug)]
pub struct PresetInfo {
    pub name: &'static str,
    /// The generator it configures; its parameters can be overridden.
    pub generator: &'static str,
    pub description: String,
}

const UNIFORM: &str = "uniform";
const ZIPF: &str = "zipf";
const SEQUENTIAL: &str = "sequential";
const MIXED: &str = "mixed";
const IO_CONCENTRATION: &str = "io-concentration";
const BOOT_STORM: &str = "boot-storm";
const FILE_SHARE: &str = "file-share";
const BACKUP: &str = "backup";
const TRACE_LIKE: &str = "trace-like";

fn joined(parts: &[&[ParamInfo]]) -> Vec<ParamInfo> {
    parts.iter().flat_map(|p| p.iter().copied()).collect()
}

/// Every generator family with its parameters.
pub fn generators() -> Vec<GeneratorInfo> {
    use synthetic::{COMMON_PARAMS, MIXED_PARAMS, SEQUENTIAL_PARAMS, ZIPF_PARAMS};
    vec![
        GeneratorInfo {
            name: UNIFORM,
            description: "uniformly random aligned offsets over the region",
            params: joined(&[COMMON_PARAMS]),
        },
        GeneratorInfo {
            name: ZIPF,
            description: "Zipf(theta) popularity over the region's aligned positions",
            params: joined(&[COMMON_PARAMS, ZIPF_PARAMS]),
        },
        GeneratorInfo {
            name: SEQUENTIAL,
            description: "sequential streams, each over its own slice of the region",
            params: joined(&[COMMON_PARAMS, SEQUENTIAL_PARAMS]),
        },
        GeneratorInfo {
            name: MIXED,
            description: "weighted mixture of uniform, zipf and sequential",
            params: joined(&[COMMON_PARAMS, MIXED_PARAMS]),
        },
        GeneratorInfo {
            name: IO_CONCENTRATION,
            description: "hot groups of 1 GiB sub-LUNs appearing, lasting and drifting over a LUN (ATSMF)",
            params: joined(&[concentration::PARAMS]),
        },
        GeneratorInfo {
            name: BOOT_STORM,
            description: "many VMs reading their boot images at nearly the same time",
            params: joined(&[boot_storm::PARAMS]),
        },
        GeneratorInfo {
            name: FILE_SHARE,
            description: "QoS tenant: 4-64 KiB skewed small, 70 % reads, a few hot zones",
            params: joined(&[qos::FILE_SHARE_PARAMS]),
        },
        GeneratorInfo {
            name: BACKUP,
            description: "QoS tenant: 128 KiB, 50:50, inside 0-30 GiB and 300-330 GiB of the region",
            params: joined(&[qos::BACKUP_PARAMS]),
        },
        GeneratorInfo {
            name: TRACE_LIKE,
            description: "given write ratio, mean read/write sizes and footprint (the trace presets)",
            params: joined(&[trace_like::PARAMS]),
        },
    ]
}

/// Every preset: name, the generator it configures, one-line description.
pub fn presets() -> Vec<PresetInfo> {
    let mut out: Vec<PresetInfo> = concentration::ATSMF_PRESETS
        .iter()
        .map(|p| PresetInfo {
            name: p.name,
            generator: IO_CONCENTRATION,
            description: p.description(),
        })
        .collect();
    out.extend(trace_like::TRACE_PRESETS.iter().map(|p| PresetInfo {
        name: p.name,
        generator: TRACE_LIKE,
        description: p.description(),
    }));
    out
}

/// Fully resolved parameters of one generator.
#[derive(Clone, Debug, PartialEq)]
pub enum GeneratorParams {
    Uniform(UniformParams),
    Zipf(ZipfParams),
    Sequential(SequentialParams),
    Mixed(MixedParams),
    IoConcentration(IoConcentrationParams),
    BootStorm(BootStormParams),
    FileShare(FileShareParams),
    Backup(BackupParams),
    TraceLike(TraceLikeParams),
}

impl GeneratorParams {
    /// The parameters as `key=value` pairs that `resolve` turns back into
    /// these parameters (mixed: per-component overrides are not expressible
    /// this way and are left out).
    pub fn to_kv(&self) -> KvList {
        match self {
            GeneratorParams::Uniform(p) => p.common.to_kv(),
            GeneratorParams::Zipf(p) => p.to_kv(),
            GeneratorParams::Sequential(p) => p.to_kv(),
            GeneratorParams::Mixed(p) => p.to_kv(),
            GeneratorParams::IoConcentration(p) => p.to_kv(),
            GeneratorParams::BootStorm(p) => p.to_kv(),
            GeneratorParams::FileShare(p) => p.to_kv(),
            GeneratorParams::Backup(p) => p.to_kv(),
            GeneratorParams::TraceLike(p) => p.to_kv(),
        }
    }

    /// Builds the stream.
    pub fn build(&self, seed: u64) -> Result<Box<dyn RecordStream + Send>> {
        Ok(match self {
            GeneratorParams::Uniform(p) => Box::new(SyntheticGen::uniform(p, seed)?),
            GeneratorParams::Zipf(p) => Box::new(SyntheticGen::zipf(p, seed)?),
            GeneratorParams::Sequential(p) => Box::new(SyntheticGen::sequential(p, seed)?),
            GeneratorParams::Mixed(p) => Box::new(SyntheticGen::mixed(p, seed)?),
            GeneratorParams::IoConcentration(p) => Box::new(IoConcentrationGen::new(p, seed)?),
            GeneratorParams::BootStorm(p) => Box::new(BootStormGen::new(p, seed)?),
            GeneratorParams::FileShare(p) => Box::new(ZonedGen::file_share(p, seed)?),
            GeneratorParams::Backup(p) => Box::new(ZonedGen::backup(p, seed)?),
            GeneratorParams::TraceLike(p) => Box::new(TraceLikeGen::new(p, seed)?),
        })
    }
}

/// Default parameters of a generator or preset, with `params` applied on
/// top. Unknown names and parameters are errors that list what is known.
pub fn resolve(name: &str, params: &KvParams) -> Result<GeneratorParams> {
    let (kind, mut resolved) = if let Some(p) =
        concentration::ATSMF_PRESETS.iter().find(|p| p.name == name)
    {
        (
            IO_CONCENTRATION,
            GeneratorParams::IoConcentration(p.params()),
        )
    } else if let Some(p) = trace_like::TRACE_PRESETS.iter().find(|p| p.name == name) {
        (TRACE_LIKE, GeneratorParams::TraceLike(p.params()))
    } else {
        let defaults = match name {
            UNIFORM => GeneratorParams::Uniform(UniformParams::default()),
            ZIPF => GeneratorParams::Zipf(ZipfParams::default()),
            SEQUENTIAL => GeneratorParams::Sequential(SequentialParams::default()),
            MIXED => GeneratorParams::Mixed(MixedParams::default()),
            IO_CONCENTRATION => GeneratorParams::IoConcentration(IoConcentrationParams::default()),
            BOOT_STORM => GeneratorParams::BootStorm(BootStormParams::default()),
            FILE_SHARE => GeneratorParams::FileShare(FileShareParams::default()),
            BACKUP => GeneratorParams::Backup(BackupParams::default()),
            TRACE_LIKE => GeneratorParams::TraceLike(TraceLikeParams::default()),
            _ => return Err(unknown_name(name)),
        };
        (name, defaults)
    };
    let info = generators()
        .into_iter()
        .find(|g| g.name == kind)
        .expect("every kind is listed");
    params.check_known(name, &info.params)?;
    match &mut resolved {
        GeneratorParams::Uniform(p) => p.common.apply_kv(params, name)?,
        GeneratorParams::Zipf(p) => p.apply_kv(params, name)?,
        GeneratorParams::Sequential(p) => p.apply_kv(params, name)?,
        GeneratorParams::Mixed(p) => p.apply_kv(params, name)?,
        GeneratorParams::IoConcentration(p) => p.apply_kv(params, name)?,
        GeneratorParams::BootStorm(p) => p.apply_kv(params, name)?,
        GeneratorParams::FileShare(p) => p.apply_kv(params, name)?,
        GeneratorParams::Backup(p) => p.apply_kv(params, name)?,
        GeneratorParams::TraceLike(p) => p.apply_kv(params, name)?,
    }
    Ok(resolved)
}

/// Builds the generator or preset `name` with `key=value` overrides.
pub fn from_spec(name: &str, params: &KvParams, seed: u64) -> Result<Box<dyn RecordStream + Send>> {
    resolve(name, params)?.build(seed)
}

/// The planted concentrations of an IO-concentration generator or preset,
/// exactly as `from_spec(name, params, seed)` plants them; `Ok(None)` for
/// generators that plant none.
pub fn concentration_truth(
    name: &str,
    params: &KvParams,
    seed: u64,
) -> Result<Option<ConcentrationSchedule>> {
    match resolve(name, params)? {
        GeneratorParams::IoConcentration(p) => {
            Ok(Some(IoConcentrationGen::ground_truth(&p, seed)?))
        }
        _ => Ok(None),
    }
}

fn unknown_name(name: &str) -> TraceError {
    let preset_names: Vec<&str> = presets().iter().map(|p| p.name).collect();
    let mut similar: Vec<&str> = preset_names
        .iter()
        .copied()
        .filter(|p| {
            p.rsplit_once('.').is_some_and(|(_, v)| v == name)
                || (name.len() >= 3 && p.contains(name))
        })
        .collect();
    let generator_list = generators();
    if similar.is_empty() {
        let generator_names = generator_list.iter().map(|g| g.name);
        similar.extend(crate::names::nearest(
            name,
            generator_names.chain(preset_names.iter().copied()),
        ));
    }
    let hint = if similar.is_empty() {
        String::new()
    } else {
        format!(
            " (did you mean {}?)",
            similar
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        )
    };
    let kinds: Vec<&str> = generators().iter().map(|g| g.name).collect();
    TraceError::Invalid(format!(
        "unknown generator or preset `{name}`{hint}; generators: {}; presets: {}",
        kinds.join(", "),
        preset_names.join(", ")
    ))
}

#[cfg(test)]
pub(crate) mod testing {
    use crate::reader::RecordStream;
    use crate::record::IoRecord;

    pub fn collect(stream: &mut dyn RecordStream) -> Vec<IoRecord> {
        let mut out = Vec::new();
        while let Some(r) = stream.next_record().unwrap() {
            out.push(r);
        }
        out
    }

    /// Time order, alignment, region bounds and device ids.
    pub fn check_invariants(
        recs: &[IoRecord],
        region_offset: u64,
        region_size: u64,
        alignment: u64,
        devices: u32,
    ) {
        for (i, r) in recs.iter().enumerate() {
            if i > 0 {
                assert!(
                    recs[i - 1].time_ns <= r.time_ns,
                    "record {i} goes back in time"
                );
            }
            assert!(r.size_bytes > 0);
            assert_eq!(
                r.offset_bytes % alignment,
                0,
                "record {i} is not aligned: {r:?}"
            );
            assert!(
                r.offset_bytes >= region_offset,
                "record {i} before the region: {r:?}"
            );
            assert!(
                r.end_bytes() <= region_offset + region_size,
                "record {i} beyond the region: {r:?}"
            );
            assert!(r.device_id < devices);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::collect;
    use super::*;

    /// The defaults documented in the parameter lists (and docs) are the
    /// real defaults: applying them as key=value changes nothing.
    #[test]
    fn documented_defaults_are_the_defaults() {
        for g in generators() {
            let mut kv = KvParams::new();
            for p in &g.params {
                if p.default != "-" {
                    kv.set(p.name, p.default).unwrap();
                }
            }
            let with_defaults = resolve(g.name, &kv).unwrap();
            let plain = resolve(g.name, &KvParams::new()).unwrap();
            assert_eq!(with_defaults, plain, "generator {}", g.name);
        }
    }

    /// Rendering parameters as key=value and resolving them again gives
    /// the same parameters, for every generator and preset.
    #[test]
    fn parameters_round_trip_through_key_value() {
        let names = generators()
            .iter()
            .map(|g| g.name)
            .chain(presets().iter().map(|p| p.name))
            .collect::<Vec<_>>();
        for name in names {
            let resolved = resolve(name, &KvParams::new()).unwrap();
            let kv = resolved.to_kv();
            let kv = KvParams::parse(kv.iter().map(|(k, v)| format!("{k}={v}"))).unwrap();
            let base = presets()
                .iter()
                .find(|p| p.name == name)
                .map_or(name, |p| p.generator);
            assert_eq!(resolve(base, &kv).unwrap(), resolved, "{name}");
        }
    }

    #[test]
    fn every_generator_and_preset_builds_and_is_deterministic() {
        let names: Vec<String> = generators()
            .iter()
            .map(|g| g.name.to_owned())
            .chain(presets().iter().map(|p| p.name.to_owned()))
            .collect();
        for name in names {
            // Trace-like streams refuse a footprint 2000 requests cannot reach.
            let trace_like = matches!(
                resolve(&name, &KvParams::new()).unwrap(),
                GeneratorParams::TraceLike(_)
            );
            let kv = if trace_like {
                KvParams::parse(["count=2000", "footprint_bytes=4m"]).unwrap()
            } else {
                KvParams::parse(["count=2000"]).unwrap()
            };
            let a = collect(&mut *from_spec(&name, &kv, 1).unwrap());
            let b = collect(&mut *from_spec(&name, &kv, 1).unwrap());
            let c = collect(&mut *from_spec(&name, &kv, 2).unwrap());
            assert_eq!(a.len(), 2000, "{name}");
            assert_eq!(a, b, "{name}");
            assert_ne!(a, c, "{name}");
            assert!(a.windows(2).all(|w| w[0].time_ns <= w[1].time_ns), "{name}");
            let s = from_spec(&name, &kv, 1).unwrap();
            assert_eq!(s.time_base(), crate::TimeBase::Relative);
            assert!(!s.devices().is_empty());
        }
    }

    /// Same spec and seed ⇒ byte-identical trace files.
    #[test]
    fn written_files_are_byte_identical() {
        let dir = std::env::temp_dir().join(format!("tierlab-generate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kv = KvParams::parse(["count=20000"]).unwrap();
        let mut files = Vec::new();
        for (i, seed) in [(0, 9u64), (1, 9), (2, 10)] {
            let path = dir.join(format!("{i}.bin"));
            let mut s = from_spec("atsmf.src1_0", &kv, seed).unwrap();
            crate::writer::write_trace(&mut *s, &path, crate::Format::Native, &Default::default())
                .unwrap();
            files.push(std::fs::read(&path).unwrap());
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(files[0], files[1]);
        assert_ne!(files[0], files[2]);
    }

    #[test]
    fn errors_name_the_problem() {
        let kv = KvParams::parse(["x=1"]).unwrap();
        let e = from_spec("zipf", &kv, 0).err().unwrap().to_string();
        assert!(
            e.starts_with("key `x`: expected a parameter of generator `zipf`: count, duration_s,"),
            "{e}"
        );
        let e = from_spec("hm_0", &KvParams::new(), 0)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("did you mean `hswd.hm_0` or `ssdraid.hm_0`?"),
            "{e}"
        );
        let kv = KvParams::parse(["theta=high"]).unwrap();
        let e = from_spec("zipf", &kv, 0).err().unwrap().to_string();
        assert_eq!(
            e,
            "key `theta`: expected a number (parameter of generator `zipf`), found `high`"
        );
        let kv = KvParams::parse(["weights=zipf:1,random:1"]).unwrap();
        assert!(
            from_spec("mixed", &kv, 0)
                .err()
                .unwrap()
                .to_string()
                .contains("unknown pattern `random`")
        );
        for (name, kv) in [
            ("uniform", "devices=4000000000"),
            ("boot-storm", "vms=4000000000"),
            ("file-share", "hot_zones=100000000"),
            ("trace-like", "max_size_bytes=1g"),
        ] {
            let kv = KvParams::parse([kv]).unwrap();
            assert!(from_spec(name, &kv, 0).is_err(), "{name} {kv:?}");
        }
        let kv = KvParams::parse(["drift_direction=left"]).unwrap();
        assert_eq!(
            from_spec("atsmf.src1_0", &kv, 0).err().unwrap().to_string(),
            "key `drift_direction`: expected one of: up, down, random (parameter of generator \
             `atsmf.src1_0`), found \"left\""
        );
    }

    #[test]
    fn truth_matches_the_preset_and_overrides() {
        let kv = KvParams::parse(["mean_active=10"]).unwrap();
        let truth: Vec<_> = concentration_truth("atsmf.web2", &kv, 3)
            .unwrap()
            .unwrap()
            .collect();
        let p = match resolve("atsmf.web2", &kv).unwrap() {
            GeneratorParams::IoConcentration(p) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(p.mean_active, 10.0);
        let direct: Vec<_> = IoConcentrationGen::ground_truth(&p, 3).unwrap().collect();
        assert_eq!(truth, direct);
        assert!(
            concentration_truth("uniform", &KvParams::new(), 3)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn serde_params_have_defaults() {
        // Params structs deserialize from partial configs (here via the
        // serde value model, no format crate needed).
        use serde::Deserialize;
        use serde::de::IntoDeserializer;
        use serde::de::value::{Error, MapDeserializer};
        let entries = vec![("theta", 0.5f64)];
        let de: MapDeserializer<'_, _, Error> =
            MapDeserializer::new(entries.into_iter().map(|(k, v)| (k, v.into_deserializer())));
        let p = ZipfParams::deserialize(de).unwrap();
        assert_eq!(p.theta, 0.5);
        assert_eq!(p.common, CommonParams::default());
        let entries = vec![("thta", 0.5f64)];
        let de: MapDeserializer<'_, _, Error> =
            MapDeserializer::new(entries.into_iter().map(|(k, v)| (k, v.into_deserializer())));
        assert!(ZipfParams::deserialize(de).is_err());
    }

    /// Release-mode throughput, one core:
    /// `cargo test --release -p tierlab-trace --lib generate::tests::throughput -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn throughput() {
        let cases: &[(&str, &[&str], u64)] = &[
            ("uniform", &["count=20000000"], 20_000_000),
            (
                "uniform",
                &["count=20000000", "arrival=fixed", "size_bytes=4k:3,64k:1"],
                20_000_000,
            ),
            ("zipf", &["count=20000000"], 20_000_000),
            ("zipf", &["count=20000000", "scramble=false"], 20_000_000),
            ("sequential", &["count=20000000", "streams=8"], 20_000_000),
            ("mixed", &["count=20000000"], 20_000_000),
            (
                "io-concentration",
                &["count=20000000", "duration_s=1e6", "rate_iops=1000"],
                20_000_000,
            ),
            ("atsmf.src1_0", &["rate_iops=5000"], 0),
            ("file-share", &["count=20000000"], 20_000_000),
            ("backup", &["count=20000000"], 20_000_000),
            (
                "trace-like",
                &["count=20000000", "footprint_bytes=8g"],
                20_000_000,
            ),
            ("boot-storm", &["vms=2000"], 0),
        ];
        for (name, kv, expected) in cases {
            let kv = KvParams::parse(*kv).unwrap();
            let mut s = from_spec(name, &kv, 42).unwrap();
            let start = std::time::Instant::now();
            let mut n = 0u64;
            let mut check = 0u64;
            while let Some(r) = s.next_record().unwrap() {
                n += 1;
                check = check.wrapping_add(r.offset_bytes ^ r.time_ns);
            }
            let secs = start.elapsed().as_secs_f64();
            if *expected > 0 {
                assert_eq!(n, *expected);
            }
            println!(
                "{name:18} {:40} {n:>10} records {secs:6.3} s {:7.1} M records/s (checksum {check:x})",
                kv.keys().collect::<Vec<_>>().join(","),
                n as f64 / secs / 1e6
            );
        }
    }
}
