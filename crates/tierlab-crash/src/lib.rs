//! tierlab-crash: does a stack keep what it acknowledged when the power
//! goes? Proved by enumerating crash states, not by hoping.
//!
//! 1. **Record** (`record`): a seeded host workload (stamped writes, reads,
//!    a FLUSH every few IOs) runs through the policy over in-memory stores
//!    (`exec::Exec`); every device write, trim and flush is logged with
//!    when it was submitted and completed, and so is every host
//!    acknowledgement and FLUSH.
//! 2. **Crash** (`states`): at crash points (every host FLUSH's end, just
//!    before it, and random points inside epochs) the stores are rebuilt as
//!    a power cut could leave them. A write is *durable* once a flush of its
//!    device that was submitted after the write completed has completed;
//!    every other write submitted before the crash may or may not have
//!    reached the medium, in any order, and may be torn at a 512-byte
//!    sector. Four kinds of state per point: only what was durable;
//!    everything submitted; a random subset in random order; the same with
//!    one write torn. Volatile stores (`path = "ram"`) come back as zeros.
//! 3. **Restart and check**: a new policy is built over the rebuilt stores
//!    and reads the whole workload region back. Every 512-byte sector must
//!    hold the last value acknowledged before the last completed FLUSH, or
//!    a value some write issued later put there — never an older one, never
//!    zeros once a write of it was flushed, never bytes no write of that
//!    sector produced. The restart itself must not fail, panic or hang.
//!
//! Policies that keep state across a restart recover it from the stores
//! when they are built over them; policies without persistent metadata
//! start cold, so for them every acknowledged-and-flushed byte must be
//! where a cold start reads it (docs/crash-consistency.md).

mod error;
pub mod exec;
pub mod media;
pub mod output;
pub mod stamp;
mod states;

use std::panic::AssertUnwindSafe;

use tierlab_core::Op;
use tierlab_core::ParamError;
use tierlab_core::policy::Policy;
use tierlab_stack::{ConfigError, DeviceSpec, StackConfig, StackContext};

pub use error::CrashError;
pub use states::{StateKind, Violation};

use exec::{Exec, Log};
use media::{DeviceMap, Media};
use stamp::SECTOR_BYTES;

/// The seeded RNG of the shared test kit (`tierlab_core::testkit`).
pub use tierlab_core::testkit::Rng;
use tierlab_core::testkit::WriteFaults;

/// The stack under test: how to build its policy, its physical stores
/// (what a crash acts on) and the policy's devices over them.
pub struct Stack {
    /// Builds the policy (for the recorded run, and anew after each crash).
    pub build: Box<dyn Fn() -> Result<Box<dyn Policy>, ConfigError>>,
    /// Per physical store: its name, size, ...
    pub device_names: Vec<String>,
    pub capacities_bytes: Vec<u64>,
    /// Loses its content at a crash (a RAM store).
    pub volatile: Vec<bool>,
    /// A shingled (SMR) store and its band size: a write a crash
    /// interrupts lands a prefix and destroys the rest of its band.
    pub shingled_band_bytes: Vec<Option<u64>>,
    /// The size of the volume the policy presents.
    pub volume_bytes: u64,
    /// The policy's devices over the stores (RAID arrays); empty: one
    /// device per store, in order.
    pub devices: Vec<DeviceMap>,
    /// Arrays with redundancy and no failed member: (device, members).
    /// Each state that reads back right is read again with one member
    /// lost (seeded), as a rebuild after the restart would read it.
    pub redundant_arrays: Vec<(usize, usize)>,
}

/// The largest stack the checker holds in memory (every store, twice,
/// plus the recorded writes).
pub const MAX_STACK_BYTES: u64 = 1 << 30;

impl Stack {
    /// The stack a config describes (`[[devices]]` and `[policy]`; a
    /// device with `path = "ram"` is volatile).
    pub fn from_config(config: &StackConfig) -> Result<Stack, ConfigError> {
        let names = config.device_names();
        let mut stores = Stores::default();
        let mut maps = Vec::new();
        let mut redundant_arrays = Vec::new();
        for (i, t) in config.devices.iter().enumerate() {
            let at = format!("devices[{i}]");
            if t.get("model").and_then(|m| m.as_str()) == Some("raid") {
                let (table, members, redundant) = stores.add_array(t, &at, &names[i])?;
                if redundant {
                    redundant_arrays.push((i, members));
                }
                maps.push(DeviceMap::Raid {
                    table,
                    name: names[i].clone(),
                    broken_bitmap_skip_flush: false,
                });
            } else {
                maps.push(DeviceMap::Store(stores.add(t, &at, names[i].clone())?));
            }
        }
        // Nothing on RAM survives a crash: with every store RAM, every
        // state loses whatever was written, and the report would say so of
        // any policy. Refused, with what to do instead.
        if stores.volatile.iter().all(|&v| v) {
            let last = config.devices.len().saturating_sub(1);
            return Err(ConfigError::key(
                "devices",
                format!(
                    "every store of this stack is `path = \"ram\"` ({}): nothing on RAM \
                     survives a crash, so every crash state would lose what was written, whatever \
                     the policy does — there is nothing to check. Give the devices whose data \
                     must survive a file path (the checker still keeps every store in memory; \
                     any path but \"ram\" counts as persistent), e.g. --set \
                     devices.{last}.path=disk.img",
                    stores.names.join(", ")
                ),
            ));
        }
        let total: u64 = stores.capacities_bytes.iter().sum();
        if total > MAX_STACK_BYTES {
            return Err(ConfigError::key(
                "devices",
                format!(
                    "the stack's devices hold {total} bytes; the checker keeps every store in \
                     memory and allows at most {MAX_STACK_BYTES} (1 GiB): give the devices (and \
                     the policy) smaller capacity_bytes, e.g. with --set"
                ),
            ));
        }
        // The devices' sizes, as the policy sees them (an array's follows
        // from its members).
        let zeros = stores
            .capacities_bytes
            .iter()
            .map(|&c| vec![0u8; c as usize])
            .collect();
        let media = Media::new(&maps, zeros, &stores.volatile, None)
            .map_err(|e| ConfigError::key("devices", e.to_string()))?;
        let devices: Vec<DeviceSpec> = config
            .devices
            .iter()
            .enumerate()
            .map(|(i, t)| DeviceSpec {
                name: names[i].clone(),
                capacity_bytes: media.capacity_bytes(i),
                table: t.clone(),
            })
            .collect();
        drop(media);
        let ctx = StackContext {
            devices: devices.clone(),
            tenants: vec![tierlab_stack::TenantSpec {
                name: "host".into(),
                ..Default::default()
            }],
        };
        let spec = config.policy.clone();
        // HSWD's NRegion is a shingled disk: a band write a crash
        // interrupts destroys the rest of the band (docs/crash-consistency.md).
        let mut shingled_band_bytes = vec![None; stores.capacities_bytes.len()];
        if spec.kind == "hswd" && devices.len() > 1 {
            let band = match spec.params.get("band_bytes") {
                Some(v) => bytes(v, "policy.band_bytes")?,
                None => 32 << 20,
            };
            // (An array of shingled disks is not modelled: its members
            // are written as plain stores.)
            if let DeviceMap::Store(p) = maps[1] {
                shingled_band_bytes[p] = Some(band);
            }
        }
        let first = tierlab_stack::build_policy(&spec, &ctx)?;
        if !first.moves_data() {
            return Err(ConfigError::value(
                "policy.kind",
                format!("`{}`", spec.kind),
                format!(
                    "a policy that describes its data movement, so its data can be checked: {}",
                    tierlab_stack::policies_that_move_data().join(", ")
                ),
            ));
        }
        let volume_bytes = tierlab_stack::volume_bytes(&spec, &ctx)?;
        Ok(Stack {
            build: Box::new(move || tierlab_stack::build_policy(&spec, &ctx)),
            device_names: stores.names,
            capacities_bytes: stores.capacities_bytes,
            volatile: stores.volatile,
            shingled_band_bytes,
            volume_bytes,
            devices: maps,
            redundant_arrays,
        })
    }

    /// The policy's devices over the stores.
    pub fn maps(&self) -> Vec<DeviceMap> {
        if self.devices.is_empty() {
            (0..self.capacities_bytes.len())
                .map(DeviceMap::Store)
                .collect()
        } else {
            self.devices.clone()
        }
    }

    /// A policy device's name.
    pub fn device_label(&self, device: usize) -> String {
        match &self.maps()[device] {
            DeviceMap::Store(p) => self.device_names[*p].clone(),
            DeviceMap::Raid { name, .. } => name.clone(),
        }
    }

    /// Test only: every array's bitmap page is no longer flushed before
    /// its member writes.
    #[doc(hidden)]
    pub fn break_bitmap_flush(&mut self) {
        for d in &mut self.devices {
            if let DeviceMap::Raid {
                broken_bitmap_skip_flush,
                ..
            } = d
            {
                *broken_bitmap_skip_flush = true;
            }
        }
    }
}

/// A byte count (an integer or "64MiB") at config key `key`.
fn bytes(v: &toml::Value, key: &str) -> Result<u64, ConfigError> {
    let b: tierlab_stack::Bytes = v.clone().try_into().map_err(|e: toml::de::Error| {
        let message = e.to_string().trim_end().to_string();
        match ParamError::parse_display(&message) {
            Some(inner) => ConfigError::param(inner.within(key)),
            None => ConfigError::key(key, message),
        }
    })?;
    Ok(b.0)
}

/// `fail_after_writes` injects faults into a real run; the checker makes
/// its own crash states, and ignoring the key would check something else.
fn refuse_faults(t: &toml::Table, at: &str) -> Result<(), ConfigError> {
    if t.contains_key("fail_after_writes") {
        return Err(ConfigError::key(
            format!("{at}.fail_after_writes"),
            "fault injection is for `tierlab run` and `tierlab serve`; the checker makes its \
             own crash states (remove the key, or use --surprise-every for a store that fails \
             from one write on)",
        ));
    }
    Ok(())
}

/// Physical stores as `from_config` assigns them.
#[derive(Default)]
struct Stores {
    names: Vec<String>,
    capacities_bytes: Vec<u64>,
    volatile: Vec<bool>,
}

impl Stores {
    /// A plain store from a device table (`path`, `capacity_bytes`).
    fn add(&mut self, t: &toml::Table, at: &str, name: String) -> Result<usize, ConfigError> {
        refuse_faults(t, at)?;
        let cap = t.get("capacity_bytes").ok_or_else(|| {
            ConfigError::key(
                format!("{at}.capacity_bytes"),
                "missing (the checker holds each store in memory and needs its size)",
            )
        })?;
        let cap = bytes(cap, &format!("{at}.capacity_bytes"))?;
        Ok(self.push(
            name,
            cap,
            t.get("path").and_then(|p| p.as_str()) == Some("ram"),
        ))
    }

    fn push(&mut self, name: String, capacity_bytes: u64, volatile: bool) -> usize {
        self.names.push(name);
        self.capacities_bytes.push(capacity_bytes);
        self.volatile.push(volatile);
        self.names.len() - 1
    }

    /// An array's members (and bitmap) as stores: the table with their
    /// paths rewritten to `phys:N`, its member count, and whether it has
    /// redundancy and no failed member.
    fn add_array(
        &mut self,
        t: &toml::Table,
        at: &str,
        name: &str,
    ) -> Result<(toml::Table, usize, bool), ConfigError> {
        refuse_faults(t, at)?;
        let mut table = t.clone();
        let failed = match t.get("failed_members") {
            Some(toml::Value::Array(a)) => a.iter().filter_map(|v| v.as_integer()).collect(),
            _ => Vec::new(),
        };
        let Some(toml::Value::Array(members)) = table.get_mut("members") else {
            return Err(ConfigError::key(
                format!("{at}.members"),
                "missing; an array lists its members",
            ));
        };
        let n = members.len();
        let mut min_member = u64::MAX;
        for (k, m) in members.iter_mut().enumerate() {
            let mat = format!("{at}.members[{k}]");
            let toml::Value::Table(mt) = m else {
                return Err(ConfigError::key(mat, "not a table"));
            };
            if failed.contains(&(k as i64)) {
                continue;
            }
            if mt.get("model").and_then(|v| v.as_str()) == Some("raid") {
                return Err(ConfigError::key(
                    mat,
                    "an array of arrays; the checker takes arrays of plain stores",
                ));
            }
            let p = self.add(mt, &mat, format!("{name}.members[{k}]"))?;
            min_member = min_member.min(self.capacities_bytes[p]);
            mt.insert("path".into(), toml::Value::String(format!("phys:{p}")));
            mt.remove("create");
            mt.remove("direct");
        }
        if let Some(b) = table.get("bitmap") {
            let volatile = match b {
                toml::Value::String(p) => p == "ram",
                toml::Value::Table(bt) => bt.get("path").and_then(|p| p.as_str()) == Some("ram"),
                _ => false,
            };
            let chunk = match table.get("bitmap_chunk_bytes") {
                Some(v) => bytes(v, &format!("{at}.bitmap_chunk_bytes"))?,
                None => tierlab_real::raid_bitmap::DEFAULT_CHUNK_BYTES,
            };
            // Sized for members of the smallest member's size (the array
            // uses at most that much of each).
            let bytes = tierlab_real::raid_bitmap::store_bytes_for(min_member, chunk);
            let p = self.push(format!("{name}.bitmap"), bytes, volatile);
            let mut bt = toml::Table::new();
            bt.insert("path".into(), toml::Value::String(format!("phys:{p}")));
            table.insert("bitmap".into(), toml::Value::Table(bt));
        }
        let level = t.get("level").and_then(|v| v.as_str()).unwrap_or("");
        Ok((table, n, level != "raid0" && failed.is_empty()))
    }
}

/// What to run and how many crash states to try.
#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    /// Host IOs in the recorded workload (writes, reads, FLUSHes).
    pub host_ios: u64,
    /// A FLUSH after every this many host IOs on average (0: none).
    pub flush_every: u64,
    pub read_percent: u64,
    /// This share of the IOs (percent) goes to a hot eighth of the region
    /// (so caches keep data and ATSMF sees an IO concentration).
    pub hot_percent: u64,
    /// Host IOs in flight at most.
    pub iodepth: u64,
    /// Largest host IO, in the policy's alignment units.
    pub max_io_units: u64,
    /// The workload touches [0, region_bytes) of the volume (the whole
    /// volume if larger).
    pub region_bytes: u64,
    /// Crash states to check in all.
    pub states: u64,
    /// Device IOs complete 1 ns to this long after submission.
    pub max_delay_ns: u64,
    /// Check only this state (crash point, kind): a replay of a violation.
    pub only: Option<(u64, StateKind)>,
    /// Surprise shutdown instead of random states: at every this-many-th
    /// device write, a state where every write before it landed and none
    /// after (1: at every write; 0: off).
    pub surprise_every: u64,
    /// Real device errors: every device write from this one on (0-based)
    /// fails, and every flush once one failed, as a store that died. The
    /// policy is told (`on_device_error`); one that cannot survive it stops
    /// the run there (fail-stop), as the process would.
    pub fail_writes_from: Option<u64>,
    /// A transient device error: only this device write (0-based) fails;
    /// flushes keep working, so a stack that acknowledged the failed write
    /// is caught by the next FLUSH's promise.
    pub fail_write_at: Option<u64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            seed: 1,
            host_ios: 2000,
            flush_every: 25,
            read_percent: 30,
            hot_percent: 60,
            iodepth: 4,
            max_io_units: 4,
            region_bytes: 4 << 20,
            states: 400,
            max_delay_ns: 200_000,
            only: None,
            surprise_every: 0,
            fail_writes_from: None,
            fail_write_at: None,
        }
    }
}

impl Options {
    /// Refuses options that cannot run, naming the option.
    pub fn check(&self) -> Result<(), ParamError> {
        let positive = [
            ("host_ios", self.host_ios),
            ("iodepth", self.iodepth),
            ("max_io_units", self.max_io_units),
            ("region_bytes", self.region_bytes),
            ("states", self.states),
            ("max_delay_ns", self.max_delay_ns),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(ParamError::new(name, 0, "at least 1"));
            }
        }
        for (name, v) in [
            ("read_percent", self.read_percent),
            ("hot_percent", self.hot_percent),
        ] {
            if v > 100 {
                return Err(ParamError::new(name, v, "0 to 100"));
            }
        }
        Ok(())
    }
}

/// What a check did and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub policy: String,
    pub host_writes: u64,
    pub host_flushes: u64,
    pub device_writes: u64,
    pub device_flushes: u64,
    /// Log events (a crash point is a prefix of them).
    pub log_events: u64,
    pub crash_points: u64,
    /// States checked, per kind (`StateKind::ALL` order).
    pub states_by_kind: [u64; 5],
    /// States also read back with an array member lost after the restart.
    pub degraded_reads: u64,
    /// With `fail_writes_from`: host IOs the stack answered with an error,
    /// and whether it stopped at a device error (fail-stop).
    pub host_ios_failed: u64,
    pub stopped_at_error: bool,
    pub sectors_checked: u64,
    /// The stores that come back as zeros after every crash (`path =
    /// "ram"`): what they hold is not expected to survive.
    pub volatile_stores: Vec<String>,
    /// Every violation found (each state reports its first).
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn states(&self) -> u64 {
        self.states_by_kind.iter().sum()
    }
}

/// Steps (events) a run may take before it counts as hung.
const STEP_BOUND: u64 = 50_000_000;

/// A recorded workload: the log, the executor at its end, and the stores
/// as the policy's `open` left them before the first IO (durable: the
/// base of every crash state).
pub struct Recording {
    pub log: Log,
    pub exec: Exec,
    pub initial: Vec<Vec<u8>>,
}

/// Runs the workload and records it.
pub fn record(stack: &Stack, opts: &Options) -> Result<Recording, CrashError> {
    opts.check()?;
    let mut policy = (stack.build)()?;
    let unit = policy.required_alignment_bytes().max(SECTOR_BYTES as u64);
    let region = opts.region_bytes.min(stack.volume_bytes) / unit * unit;
    if region < unit {
        return Err(CrashError::Run(format!(
            "the volume ({} bytes) is smaller than one IO unit ({unit} bytes)",
            stack.volume_bytes
        )));
    }
    let zeros = stack
        .capacities_bytes
        .iter()
        .map(|&c| vec![0u8; c as usize])
        .collect();
    let mut media = Media::new(&stack.maps(), zeros, &stack.volatile, None)?;
    // Fresh stores: the policy formats them (synced, so durable).
    policy
        .open(&mut media)
        .map_err(|e| CrashError::Run(format!("opening fresh stores: {e}")))?;
    let initial = media.images();
    let mut ex = Exec::new(policy, media, opts.seed ^ 0x5eed, opts.max_delay_ns).with_log();
    ex.faults = WriteFaults::new(opts.fail_writes_from, opts.fail_write_at);
    let mut rng = Rng(opts.seed);
    let units = region / unit;
    let mut issued = 0;
    let mut write_seq = 0;
    let mut blocked = None; // an IO waiting for an overlapping one to end
    while issued < opts.host_ios || !ex.host.is_empty() {
        if let Some(e) = ex.error.take() {
            return Err(CrashError::Run(e));
        }
        if ex.stopped {
            break; // fail-stop: the process ends here
        }
        if ex.steps() > STEP_BOUND {
            return Err(CrashError::Run(format!(
                "the workload did not finish within {STEP_BOUND} events"
            )));
        }
        if issued < opts.host_ios && (ex.host.len() as u64) < opts.iodepth {
            let io = blocked.take().unwrap_or_else(|| {
                let r = rng.below(100);
                if opts.flush_every > 0 && rng.below(opts.flush_every) == 0 {
                    (Op::Flush, 0, 0)
                } else {
                    let n = 1 + rng.below(opts.max_io_units.min(units));
                    // The hot eighth sits a third of the way in.
                    let hot = (units / 8).max(n);
                    let (lo, span) = if rng.below(100) < opts.hot_percent {
                        ((units / 3).min(units - hot), hot)
                    } else {
                        (0, units)
                    };
                    let first = lo + rng.below(span - n + 1);
                    let op = if r < opts.read_percent {
                        Op::Read
                    } else {
                        Op::Write
                    };
                    (op, first * unit, n * unit)
                }
            });
            let (op, off, len) = io;
            let overlaps = op != Op::Flush
                && ex.host.values().any(|h| {
                    h.op != Op::Flush
                        && off < h.offset_bytes + h.size_bytes as u64
                        && h.offset_bytes < off + len
                });
            if !overlaps {
                let mut buf = vec![0u8; len as usize];
                let mut seq = 0;
                if op == Op::Write {
                    write_seq += 1;
                    seq = write_seq;
                    stamp::fill(&mut buf, off / SECTOR_BYTES as u64, seq);
                }
                ex.issue(op, off, buf, len as u32, seq);
                issued += 1;
                ex.finished.clear();
                continue;
            }
            blocked = Some(io);
        }
        if !ex.step() {
            return Err(CrashError::Run(format!(
                "{} host IOs never completed and nothing is left to happen (policy {})",
                ex.host.len(),
                ex.policy.name()
            )));
        }
        ex.finished.clear();
    }
    if let Some(e) = ex.error.take() {
        return Err(CrashError::Run(e));
    }
    let log = ex.log.take().unwrap();
    Ok(Recording {
        log,
        exec: ex,
        initial,
    })
}
/// Records the workload, then checks `opts.states` crash states.
pub fn check(stack: &Stack, opts: &Options) -> Result<Report, CrashError> {
    let Recording {
        log,
        exec: ex,
        initial,
    } = record(stack, opts)?;
    let unit = ex
        .policy
        .required_alignment_bytes()
        .max(SECTOR_BYTES as u64);
    let region = opts.region_bytes.min(stack.volume_bytes) / unit * unit;
    let mut report = Report {
        policy: ex.policy.name().to_string(),
        host_writes: log.host_writes.len() as u64,
        host_flushes: log.host_flushes.len() as u64,
        device_writes: log.writes.len() as u64,
        device_flushes: log.flushes.len() as u64,
        log_events: log.events.len() as u64,
        host_ios_failed: ex.host_ios_failed,
        stopped_at_error: ex.stopped,
        volatile_stores: stack
            .device_names
            .iter()
            .zip(&stack.volatile)
            .filter(|(_, v)| **v)
            .map(|(n, _)| n.clone())
            .collect(),
        ..Default::default()
    };
    drop(ex);
    states::explore(stack, opts, &log, initial, region, unit, &mut report);
    Ok(report)
}

/// Restarts the stack on `stores` (with array member `lost` = (device,
/// member) failed, if given) and reads [0, region) back through it: the
/// bytes and the stores afterwards, or why the restart failed.
pub(crate) fn restart_and_read(
    stack: &Stack,
    stores: Vec<Vec<u8>>,
    lost: Option<(usize, usize)>,
    region: u64,
    unit: u64,
    seed: u64,
    max_delay_ns: u64,
) -> Result<(Vec<u8>, Vec<Vec<u8>>), String> {
    let run = || -> Result<(Vec<u8>, Vec<Vec<u8>>), String> {
        let mut policy = (stack.build)().map_err(|e| format!("the restart failed: {e}"))?;
        let mut media = Media::new(&stack.maps(), stores, &stack.volatile, lost)
            .map_err(|e| format!("the restart failed: {e}"))?;
        policy
            .open(&mut media)
            .map_err(|e| format!("recovery failed: {e}"))?;
        let mut ex = Exec::new(policy, media, seed, max_delay_ns);
        let chunk = (64 * 1024 / unit).max(1) * unit;
        let mut image = vec![0u8; region as usize];
        let mut next = 0u64;
        let mut owner = std::collections::HashMap::new();
        loop {
            while next < region && ex.host.len() < 8 {
                let len = chunk.min(region - next);
                let id = ex.issue(Op::Read, next, vec![0u8; len as usize], len as u32, 0);
                owner.insert(id, next);
                next += len;
            }
            for (id, h) in ex.finished.drain(..) {
                let at = owner.remove(&id).unwrap() as usize;
                image[at..at + h.buf.len()].copy_from_slice(&h.buf);
            }
            if let Some(e) = ex.error.take() {
                return Err(format!("after the restart: {e}"));
            }
            if next >= region && ex.host.is_empty() {
                return Ok((image, ex.media.images()));
            }
            if ex.steps() > STEP_BOUND {
                return Err(format!(
                    "reading back did not finish within {STEP_BOUND} events"
                ));
            }
            if !ex.step() {
                return Err(format!(
                    "after the restart {} reads never completed and nothing is left to happen",
                    ex.host.len()
                ));
            }
        }
    };
    match std::panic::catch_unwind(AssertUnwindSafe(run)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(format!("the restarted stack panicked: {msg}"))
        }
    }
}
