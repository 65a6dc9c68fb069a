//! The policy registry: every policy a config can name, in one list. An
//! entry says how to check the `[policy]` table's keys (at config time, so
//! a mistyped key fails before anything runs) and how the policy builds
//! itself from those keys and the stack's devices and tenants. Adding a
//! policy is its file in tierlab-policies plus one entry here.

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use tierlab_core::TimeNs;
use tierlab_core::policy::{Passthrough, Policy};
use tierlab_policies::{atsmf, cache, flashcache, hswd, qos};

use crate::config::{Bytes, ConfigError, ParamError};

/// The `[policy]` table: `kind` and that policy's own keys, kept as TOML
/// until the stack is built (`check` parses them at config time).
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySpec {
    pub kind: String,
    pub params: toml::Table,
}

impl Default for PolicySpec {
    /// No `[policy]` table: every IO goes to device 0.
    fn default() -> Self {
        PolicySpec {
            kind: "passthrough".into(),
            params: toml::Table::new(),
        }
    }
}

impl<'de> Deserialize<'de> for PolicySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PolicySpec, D::Error> {
        let mut params = toml::Table::deserialize(d)?;
        let kind = match params.remove("kind") {
            Some(toml::Value::String(k)) => k,
            Some(v) => {
                return Err(serde::de::Error::custom(format!(
                    "`kind` must be a policy name (a string), not {v}; allowed: {}",
                    kinds()
                )));
            }
            None => {
                return Err(serde::de::Error::custom(format!(
                    "missing `kind`; allowed: {}",
                    kinds()
                )));
            }
        };
        Ok(PolicySpec { kind, params })
    }
}

impl PolicySpec {
    /// The registry entry of `kind`, or an error that lists the kinds.
    pub fn registration(&self) -> Result<&'static Registration, ConfigError> {
        POLICIES
            .iter()
            .find(|r| r.kind == self.kind)
            .ok_or_else(|| {
                ConfigError::param(ParamError::unknown_name(
                    "policy.kind",
                    &self.kind,
                    POLICIES.iter().map(|r| r.kind),
                ))
            })
    }

    /// Parses the policy's keys alone (no devices needed): unknown keys
    /// and bad values fail here, naming `policy.KEY`.
    pub fn check(&self) -> Result<(), ConfigError> {
        (self.registration()?.check)(&self.params)
    }

    /// The policy's keys as its params type (errors name `policy.KEY`).
    pub fn typed<P: DeserializeOwned>(&self) -> Result<P, ConfigError> {
        typed(&self.params)
    }
}

/// A device as a policy sees it when it is built.
#[derive(Clone, Debug)]
pub struct DeviceSpec {
    /// The device's name in outputs.
    pub name: String,
    pub capacity_bytes: u64,
    /// The `[[devices]]` table (a policy may check the model's geometry,
    /// e.g. HSWD's band size against an SMR model's).
    pub table: toml::Table,
}

/// A tenant as a policy sees it (the busy-rate QoS policy finds its
/// tenants by name and takes A's guarantee from A's own limit).
#[derive(Clone, Debug, Default)]
pub struct TenantSpec {
    pub name: String,
    pub iops_cap: Option<f64>,
    /// (from time, IOPS) steps of the tenant's cap.
    pub iops_schedule_ns: Vec<(TimeNs, f64)>,
}

/// What a policy is built over.
#[derive(Clone, Debug, Default)]
pub struct StackContext {
    pub devices: Vec<DeviceSpec>,
    pub tenants: Vec<TenantSpec>,
}

/// Builds a policy from its `[policy]` keys over a stack.
pub type BuildFn = fn(&toml::Table, &StackContext) -> Result<Box<dyn Policy>, ConfigError>;

/// One policy a config can name.
pub struct Registration {
    /// `[policy] kind = "..."`.
    pub kind: &'static str,
    /// One line for listings.
    pub summary: &'static str,
    /// Parses the policy's keys without building it.
    pub check: fn(&toml::Table) -> Result<(), ConfigError>,
    /// Builds the policy over the stack's devices (and tenants).
    pub build: BuildFn,
    /// The size of the volume the policy presents to hosts (what `tierlab
    /// serve` exports), for params that built.
    pub volume_bytes: fn(&toml::Table, &StackContext) -> u64,
    /// Keys for a small example of the policy (`policies_that_move_data`
    /// builds each policy from them over two 64 MiB devices).
    pub example: &'static str,
}

/// Every policy, in the order listings show them.
pub static POLICIES: &[Registration] = &[
    Registration {
        kind: "passthrough",
        summary: "every IO goes to device 0",
        check: check_typed::<NoParams>,
        build: |_, ctx| {
            need_devices(ctx, 1, "passthrough needs a device")?;
            Ok(Box::new(Passthrough))
        },
        volume_bytes: |_, ctx| ctx.devices[0].capacity_bytes,
        example: "",
    },
    Registration {
        kind: "linear",
        summary: "the devices laid end to end (device-mapper linear)",
        check: check_typed::<LinearParams>,
        build: build_linear,
        volume_bytes: linear_volume_bytes,
        example: "",
    },
    Registration {
        kind: "cache",
        summary: "a page cache: device 0 caches device 1 (docs/cache-layer.md)",
        check: check_typed::<cache::CacheParams>,
        build: |t, ctx| {
            let p: cache::CacheParams = typed(&with_persistence(t, ctx)?)?;
            let c = cache::Cache::new(&p).map_err(policy_err)?;
            check_cache_devices(ctx, &c)?;
            Ok(Box::new(c))
        },
        volume_bytes: |_, ctx| ctx.devices[1].capacity_bytes,
        example: "capacity_bytes = \"1MiB\"",
    },
    Registration {
        kind: "flashcache",
        summary: "flashcache's set-associative write-back cache: device 0 caches device 1",
        check: check_typed::<flashcache::FlashcacheParams>,
        build: |t, ctx| {
            let p: flashcache::FlashcacheParams = typed(&with_persistence(t, ctx)?)?;
            let c = flashcache::new(&p).map_err(policy_err)?;
            check_cache_devices(ctx, &c)?;
            Ok(Box::new(c))
        },
        volume_bytes: |_, ctx| ctx.devices[1].capacity_bytes,
        example: "capacity_bytes = \"4MiB\"",
    },
    Registration {
        kind: "atsmf",
        summary: "ATSMF sub-LUN tiering: device 0 memory, device 1 the flash LUN (docs/atsmf.md)",
        check: check_typed::<atsmf::AtsmfParams>,
        build: |t, ctx| {
            let p: atsmf::AtsmfParams = typed(t)?;
            need_devices(
                ctx,
                2,
                "ATSMF needs exactly two devices (0 = memory, 1 = flash LUN)",
            )?;
            let (memory, flash) = (&ctx.devices[0], &ctx.devices[1]);
            Ok(Box::new(
                atsmf::Atsmf::new(p, flash.capacity_bytes, memory.capacity_bytes)
                    .map_err(policy_err)?,
            ))
        },
        // With `persistent`, the tiering table takes the flash device's end.
        volume_bytes: |t, ctx| {
            let flash = ctx.devices[1].capacity_bytes;
            typed::<atsmf::AtsmfParams>(t).map_or(flash, |p| atsmf::lun_bytes(&p, flash))
        },
        example: "sub_lun_size_bytes = \"1MiB\"\nmove_chunk_bytes = \"256KiB\"\nbuffer_bytes = \"1MiB\"\nmemory_cap_bytes = \"8MiB\"",
    },
    Registration {
        kind: "hswd",
        summary: "HSWD: an SSD persistent cache (device 0) over an SMR native region (device 1) (docs/hswd.md)",
        check: check_typed::<hswd::HswdParams>,
        build: build_hswd,
        volume_bytes: |t, ctx| {
            // Blocks past the native region's last whole block are not
            // addressable.
            let block = typed::<hswd::HswdParams>(t)
                .ok()
                .and_then(|p| hswd::Layout::new(&p).ok())
                .map_or(1, |l| l.block_bytes.max(1));
            ctx.devices[1].capacity_bytes / block * block
        },
        example: "pcache_bytes = \"8MiB\"\nband_bytes = \"1MiB\"",
    },
    Registration {
        kind: "busy-rate-qos",
        summary: "busy-rate IOPS guarantee: one tenant's IOPS kept by capping another (docs/qos.md)",
        check: check_typed::<qos::QosParams>,
        build: build_qos,
        volume_bytes: |_, ctx| ctx.devices[0].capacity_bytes,
        example: "guaranteed_tenant = \"A\"\nthrottled_tenant = \"B\"\nguaranteed_iops = 100",
    },
];

fn linear_volume_bytes(t: &toml::Table, ctx: &StackContext) -> u64 {
    let sizes = typed::<LinearParams>(t)
        .map(|p| p.sizes_bytes)
        .unwrap_or_default();
    ctx.devices
        .iter()
        .enumerate()
        .map(|(i, d)| sizes.get(i).map_or(d.capacity_bytes, |b| b.0))
        .sum()
}

/// The size of the volume the policy `spec` presents over `ctx` (call
/// after `build_policy` succeeded).
pub fn volume_bytes(spec: &PolicySpec, ctx: &StackContext) -> Result<u64, ConfigError> {
    Ok((spec.registration()?.volume_bytes)(&spec.params, ctx))
}

/// Builds the policy `spec` names over the stack `ctx` describes.
pub fn build_policy(spec: &PolicySpec, ctx: &StackContext) -> Result<Box<dyn Policy>, ConfigError> {
    let r = spec.registration()?;
    (r.build)(&spec.params, ctx)
}

/// The kinds whose policy describes its data movement
/// (`Policy::moves_data`), so it can run over real devices: asked of each
/// policy built from its example over two 64 MiB devices.
pub fn policies_that_move_data() -> Vec<&'static str> {
    let device = |name: &str| DeviceSpec {
        name: name.into(),
        capacity_bytes: 64 << 20,
        table: toml::Table::new(),
    };
    let ctx = StackContext {
        devices: vec![device("fast"), device("slow")],
        tenants: ["A", "B"]
            .map(|n| TenantSpec {
                name: n.into(),
                ..Default::default()
            })
            .into(),
    };
    POLICIES
        .iter()
        .filter(|r| {
            let params: toml::Table = toml::from_str(r.example).expect("a registry example parses");
            let policy = (r.build)(&params, &ctx)
                .unwrap_or_else(|e| panic!("the registry example of {} builds: {e}", r.kind));
            policy.moves_data()
        })
        .map(|r| r.kind)
        .collect()
}

fn kinds() -> String {
    POLICIES
        .iter()
        .map(|r| r.kind)
        .collect::<Vec<_>>()
        .join(", ")
}

fn typed<P: DeserializeOwned>(params: &toml::Table) -> Result<P, ConfigError> {
    serde_path_to_error::deserialize(toml::Value::Table(params.clone()))
        .map_err(|e| ConfigError::from_serde("policy", e))
}

fn check_typed<P: DeserializeOwned>(params: &toml::Table) -> Result<(), ConfigError> {
    typed::<P>(params).map(|_| ())
}

/// A policy's own check, under the `policy` table (a rooted key, such as
/// a device's capacity, stays as it is).
fn policy_err(e: ParamError) -> ConfigError {
    ConfigError::param(e.within("policy"))
}

fn need_devices(ctx: &StackContext, n: usize, what: &str) -> Result<(), ConfigError> {
    let found = ctx.devices.len();
    let ok = if n == 1 { found >= 1 } else { found == n };
    if ok {
        Ok(())
    } else {
        Err(ConfigError::value(
            "devices",
            format!("{found} devices"),
            what,
        ))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinearParams {
    /// Device i's share of the volume (default: its whole capacity).
    #[serde(default)]
    sizes_bytes: Vec<Bytes>,
}

fn build_linear(t: &toml::Table, ctx: &StackContext) -> Result<Box<dyn Policy>, ConfigError> {
    let p: LinearParams = typed(t)?;
    need_devices(ctx, 1, "linear needs at least one device")?;
    if !p.sizes_bytes.is_empty() && p.sizes_bytes.len() != ctx.devices.len() {
        return Err(ConfigError::value(
            "policy.sizes_bytes",
            format!("{} sizes", p.sizes_bytes.len()),
            format!("one per device ({}) or none", ctx.devices.len()),
        ));
    }
    let mut segments = Vec::new();
    for (i, d) in ctx.devices.iter().enumerate() {
        let size = p.sizes_bytes.get(i).map_or(d.capacity_bytes, |b| b.0);
        if size > d.capacity_bytes {
            return Err(ConfigError::value(
                format!("policy.sizes_bytes[{i}]"),
                size,
                format!(
                    "at most what device {:?} holds ({} bytes)",
                    d.name, d.capacity_bytes
                ),
            ));
        }
        segments.push((d.name.clone(), size));
    }
    Ok(Box::new(
        tierlab_policies::Linear::new(&segments).map_err(policy_err)?,
    ))
}

impl DeviceSpec {
    /// Loses its content when the process or the machine stops: a real
    /// store in RAM (`path = "ram"`), or a simulated DRAM device
    /// (`model = "memory"`).
    pub fn volatile(&self) -> bool {
        match self.table.get("path").and_then(|v| v.as_str()) {
            Some(path) => path == "ram",
            None => self.table.get("model").and_then(|v| v.as_str()) == Some("memory"),
        }
    }
}

/// A cache's `persistent` key as its cache device allows: unset, the
/// metadata is kept where it survives a restart (device 0 not volatile)
/// and not otherwise (a RAM cache writes dirty data back on FLUSH);
/// `persistent = true` on a volatile device is refused, as it would
/// promise a warm restart and keep FLUSHed data where a crash erases it.
fn with_persistence(t: &toml::Table, ctx: &StackContext) -> Result<toml::Table, ConfigError> {
    let mut t = t.clone();
    let Some(cache_device) = ctx.devices.first() else {
        return Ok(t);
    };
    let volatile = cache_device.volatile();
    match t.get("persistent").and_then(|v| v.as_bool()) {
        None if !t.contains_key("persistent") => {
            t.insert("persistent".into(), toml::Value::Boolean(!volatile));
        }
        Some(true) if volatile => {
            return Err(ConfigError::value(
                "policy.persistent",
                "true",
                format!(
                    "false, or no key, for a cache on device 0 ({:?}), which is volatile (RAM): \
                     nothing on it survives a restart, so the cache writes dirty data back on \
                     FLUSH instead; give it a file or block device to keep its metadata",
                    cache_device.name
                ),
            ));
        }
        _ => {}
    }
    Ok(t)
}

/// A cache needs a cache device (0) large enough and a backing device (1).
fn check_cache_devices(ctx: &StackContext, c: &cache::Cache) -> Result<(), ConfigError> {
    need_devices(
        ctx,
        2,
        "a cache needs exactly two devices (0 = cache, 1 = backing)",
    )?;
    let slots = c.capacity_pages() * c.page_size_bytes();
    let need = c.cache_device_bytes();
    let have = ctx.devices[0].capacity_bytes;
    if need > have {
        let what = if need > slots {
            format!(
                "its slots ({slots} bytes) and their persistent metadata ({} bytes) need {need} bytes",
                need - slots
            )
        } else {
            format!("{need} bytes")
        };
        return Err(ConfigError::value(
            "devices[0].capacity_bytes",
            have,
            format!(
                "at least {need} bytes for the cache's `policy.capacity_bytes`: {what} (or a \
                 smaller cache)"
            ),
        ));
    }
    Ok(())
}

/// HSWD: the PCache (metadata + data + RCache) must fit on device 0, and an
/// SMR native region must have the policy's band size.
fn build_hswd(t: &toml::Table, ctx: &StackContext) -> Result<Box<dyn Policy>, ConfigError> {
    let p: hswd::HswdParams = typed(t)?;
    let layout = hswd::Layout::new(&p).map_err(policy_err)?;
    need_devices(
        ctx,
        2,
        "HSWD needs exactly two devices (0 = SSD PCache, 1 = SMR native region)",
    )?;
    if layout.device_bytes > ctx.devices[0].capacity_bytes {
        return Err(ConfigError::value(
            "devices[0].capacity_bytes",
            ctx.devices[0].capacity_bytes,
            format!(
                "at least the PCache's {} bytes (`policy.pcache_bytes`: metadata {} + data + \
                 RCache)",
                layout.device_bytes, layout.metadata_bytes
            ),
        ));
    }
    let mut nregion = ctx.devices[1].table.clone();
    nregion.remove("name");
    crate::devices::strip_real_device_keys(&mut nregion);
    if let Ok(tierlab_devices::DeviceConfig::Smr(smr)) =
        toml::Value::Table(nregion).try_into::<tierlab_devices::DeviceConfig>()
        && smr.band_bytes != layout.band_bytes
    {
        return Err(ConfigError::value(
            "policy.band_bytes",
            layout.band_bytes,
            format!(
                "the band size of the SMR native region (devices[1]): {}",
                smr.band_bytes
            ),
        ));
    }
    Ok(Box::new(
        hswd::Hswd::new(&p, ctx.devices[1].capacity_bytes).map_err(policy_err)?,
    ))
}

/// The busy-rate QoS policy: tenants by name, A's guarantee from the
/// policy or else from A's own limit (the paper caps A at its target).
fn build_qos(t: &toml::Table, ctx: &StackContext) -> Result<Box<dyn Policy>, ConfigError> {
    let params: qos::QosParams = typed(t)?;
    need_devices(ctx, 1, "busy-rate-qos needs a device")?;
    let names: Vec<&str> = ctx.tenants.iter().map(|t| t.name.as_str()).collect();
    let find = |key: &str, name: &str| {
        names.iter().position(|n| *n == name).ok_or_else(|| {
            ConfigError::value(
                format!("policy.{key}"),
                format!("{name:?}"),
                format!("a tenant's name: {names:?}"),
            )
        })
    };
    let a = find("guaranteed_tenant", &params.guaranteed_tenant)?;
    let b = find("throttled_tenant", &params.throttled_tenant)?;
    let guarantee = match params.guaranteed_iops {
        Some(v) if !(v.is_finite() && v >= 0.0) => {
            return Err(ConfigError::value(
                "policy.guaranteed_iops",
                v,
                "an IOPS value >= 0",
            ));
        }
        Some(v) => vec![(0, v)],
        None => {
            let ta = &ctx.tenants[a];
            let steps = &ta.iops_schedule_ns;
            // The own limit: iops_cap until the schedule's first step.
            let mut s: Vec<(u64, f64)> = match (ta.iops_cap, steps.first()) {
                (Some(c), Some((t, _))) if *t > 0 => vec![(0, c)],
                (Some(c), None) => vec![(0, c)],
                _ => Vec::new(),
            };
            s.extend(steps.iter().copied());
            if s.is_empty() {
                return Err(ConfigError::value(
                    "policy.guaranteed_iops",
                    "no value",
                    format!(
                        "a value, or an `iops_cap` or `iops_schedule` on tenant {:?} to take it \
                         from",
                        ta.name
                    ),
                ));
            }
            s
        }
    };
    qos::BusyRateQos::new(params.controller.clone(), a as u32, b as u32, guarantee)
        .and_then(|p| match &params.host_scheduler {
            Some(h) => p.with_host_scheduler(h),
            None => Ok(p),
        })
        .and_then(|p| match &params.writeback {
            Some(w) => p.with_writeback(w),
            None => Ok(p),
        })
        .and_then(|p| p.with_cap_delay(params.cap_delay_s))
        .map(|p| Box::new(p) as Box<dyn Policy>)
        .map_err(policy_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every counter a registered policy reports has a typed name
    /// (`counter::ALL` of its module), once: experiments look counters up
    /// by those constants, so a counter added without one, or a name
    /// reported twice, fails here.
    #[test]
    fn every_reported_counter_has_a_typed_name() {
        let ctx = StackContext {
            devices: ["fast", "slow"]
                .map(|n| DeviceSpec {
                    name: n.into(),
                    capacity_bytes: 64 << 20,
                    table: toml::Table::new(),
                })
                .into(),
            tenants: ["A", "B"]
                .map(|n| TenantSpec {
                    name: n.into(),
                    ..Default::default()
                })
                .into(),
        };
        let typed: &[(&str, &[&str])] = &[
            ("cache", cache::counter::ALL),
            ("flashcache", cache::counter::ALL),
            ("atsmf", atsmf::counter::ALL),
            ("hswd", hswd::counter::ALL),
            ("busy-rate-qos", qos::counter::ALL),
        ];
        for (kind, all) in typed {
            let mut seen = std::collections::HashSet::new();
            assert!(
                all.iter().all(|n| seen.insert(*n)),
                "{kind}: a name twice in ALL"
            );
        }
        for r in POLICIES {
            let params: toml::Table = toml::from_str(r.example).unwrap();
            let policy = (r.build)(&params, &ctx).unwrap();
            let reported: Vec<&str> = policy.counters().iter().map(|c| c.0).collect();
            let all = typed
                .iter()
                .find(|(k, _)| *k == r.kind)
                .map_or(&[][..], |t| t.1);
            for name in &reported {
                assert!(
                    all.contains(name),
                    "{}: counter `{name}` has no typed name",
                    r.kind
                );
            }
            let distinct: std::collections::HashSet<_> = reported.iter().collect();
            assert_eq!(
                distinct.len(),
                reported.len(),
                "{}: a counter twice",
                r.kind
            );
        }
    }

    fn spec(text: &str) -> PolicySpec {
        let t: toml::Table = toml::from_str(text).unwrap();
        toml::Value::Table(t).try_into().unwrap()
    }

    #[test]
    fn every_registered_example_builds_and_data_movers_are_derived() {
        let movers = policies_that_move_data();
        // Each of these describes its data (a real executor runs them);
        // the list is asked of the policies, not written down.
        for k in [
            "passthrough",
            "linear",
            "cache",
            "flashcache",
            "atsmf",
            "hswd",
        ] {
            assert!(movers.contains(&k), "{k} missing from {movers:?}");
        }
        assert!(
            POLICIES
                .iter()
                .all(|r| r.kind.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        );
    }

    #[test]
    fn errors_name_the_key_and_the_choices() {
        let e = spec("kind = \"lur\"").check().unwrap_err();
        assert_eq!(e.key_path().as_deref(), Some("policy.kind"));
        let e = e.to_string();
        assert!(
            e.contains("found \"lur\"") && e.contains("one of: passthrough"),
            "{e}"
        );
        let e = spec("kind = \"hwsd\"").check().unwrap_err().to_string();
        assert!(e.contains("did you mean `hswd`"), "{e}");
        let e = spec("kind = \"cache\"\ncapacity_bytes = \"1MiB\"\nwrte_mode = \"write-back\"")
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("wrte_mode"), "{e}");
        let e = spec("kind = \"cache\"").check().unwrap_err().to_string();
        assert!(e.contains("missing field `capacity_bytes`"), "{e}");
        let e = spec("kind = \"cache\"\ncapacity_bytes = 1.5")
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key `policy.capacity_bytes`") && e.contains("a byte count"),
            "{e}"
        );
        let t: toml::Table = toml::from_str("capacity_bytes = 1").unwrap();
        let e = toml::Value::Table(t).try_into::<PolicySpec>().unwrap_err();
        assert!(e.to_string().contains("missing `kind`"), "{e}");
    }

    #[test]
    fn build_checks_devices() {
        let ctx = StackContext {
            devices: vec![DeviceSpec {
                name: "d".into(),
                capacity_bytes: 1 << 20,
                table: toml::Table::new(),
            }],
            tenants: vec![],
        };
        let e = build_policy(&spec("kind = \"cache\"\ncapacity_bytes = \"1MiB\""), &ctx)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("exactly two devices"), "{e}");
        assert_eq!(
            build_policy(&PolicySpec::default(), &ctx).unwrap().name(),
            "passthrough"
        );
    }
}
