//! The executor and the data model every policy property test shares
//! (cache_props.rs, hswd_props.rs, atsmf_props.rs, linear_props.rs).
//!
//! A tiny deterministic executor drives a policy the way the real executor
//! does (`Outbox::wants_data` set): devices complete IOs after pseudo-random
//! delays (so out of order), timers fire in time order. Data is modelled per
//! *unit* (the policy's alignment: 4 KiB pages, 512-byte sectors): every
//! unit of data is `Data::Block { unit, version }` (host writes carry a
//! fresh version per unit) or `Data::Zero` (a trimmed or zero-written
//! unit). Data moves only as the policy describes it (`Outbox::data_for`,
//! `BufRef`), never from the tags: a device write takes its buffer's units
//! at submission and lands them either at once or at completion (chosen at
//! random per IO: a real device may do either); a device read samples the
//! device at submission or at completion and copies into its buffer at
//! completion; a device trim zeroes its units at submission or completion.
//!
//! The reference model is the host's, not the policy's: per unit the newest
//! version issued, the newest acknowledged, and whether the unit may read
//! as zeros (a trim was issued since its last acknowledged write). Checked
//! everywhere:
//! - every read and write device IO is described exactly once, trims and
//!   flushes never; buffers exist when used (a write from a staging buffer
//!   never filled or released, or from a host IO already completed, and a
//!   read landing in a completed host IO or a released buffer all fail, as
//!   in the real executor); IOs stay inside their device and are whole
//!   units;
//! - a host read returns, for every unit, that unit's data at a version no
//!   older than the newest write acknowledged before the read was issued
//!   and no newer than the newest issued — or zeros if a trim of the unit
//!   was issued since its last acknowledged write (before or during the
//!   read);
//! - a unit's *home* (where it lives at rest: a cache's backing device, a
//!   linear segment; see `Home`) only ever receives that unit's data, and
//!   its version never goes back below one it held;
//! - no read touches a device unit outside every home that was never
//!   written;
//! - in *strict* runs (the host never overlaps a write or trim with another
//!   IO of the same unit) no device read or write may overlap a device
//!   write in flight that changes the bytes, outside `unwatched_below`:
//!   the data is then exact whatever the device timing. Trims take no part:
//!   what a range reads after a trim is either of two values by definition,
//!   and the value checks judge it;
//! - `locate` (`check_locate`, at random points between events): extents
//!   cover the asked range (up to `locate_end_bytes`) in order, non-empty,
//!   inside their device, merged; and the bytes at each reported place are
//!   the newest acknowledged data of every unit with no write or trim in
//!   flight (or zeros after a trim);
//! - `drain` (`drain_and_check`): the policy drains in bounded steps, then
//!   nothing is in flight, every host IO completed, every staging buffer is
//!   released, the homes alone hold every unit's newest acknowledged data
//!   (or zeros if trimmed since), and timers that still fire issue nothing.
//!
//! Device errors (`Sim::device_error_per_mille`, optionally only on the
//! host data path): a device IO fails instead of completing
//! (`Policy::on_device_error`); a failed write lands on a random subset of
//! its units (or did at submission), a failed read delivers nothing. The
//! policy fails host IOs (`Outbox::failed`: only after some device error),
//! and the model goes on: a failed write or trim stays issued but is never
//! acknowledged, so its units may read as it or as before — never older
//! than the newest acknowledged — and every check above still holds. A
//! policy that reports pages given up after failed write-backs
//! (`drain_abandoned_pages`) may leave older data at the homes of units a
//! failed IO carried (or that were gathered into a staging buffer with
//! one). A policy that refuses an error stops the run (`Sim::stopped`,
//! fail-stop): nothing after it is checked — the crash checker judges
//! what a stopped stack left.

#![allow(dead_code)] // each test file uses a part

use std::collections::{HashMap, HashSet};

use tierlab_core::policy::{BufRef, Extent, HostIo, Outbox, Policy};
use tierlab_core::{DeviceIo, Op};

/// The seeded RNG and event schedule of the shared test kit (the crash
/// checker's executor uses the same).
#[allow(unused_imports)] // not every test binary draws random numbers
pub use tierlab_core::testkit::Rng;
use tierlab_core::testkit::{Events, Next, RandomFaults, end_device_io};

/// `TIERLAB_PROP_CASES=N` runs N cases per test instead of the default
/// (a longer hunt).
pub fn cases(default: u64) -> u64 {
    std::env::var("TIERLAB_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Data {
    Zero,
    Block { unit: u64, version: u64 },
}

/// A run of host units stored, at rest, on one device (for a cache, its
/// backing device): host unit `host_first + i` is unit `device_first + i`
/// there, initially version 0 of that host unit.
#[derive(Clone, Copy, Debug)]
pub struct Home {
    pub host_first: u64,
    pub units: u64,
    pub device: usize,
    pub device_first: u64,
}

/// Where things are, in bytes.
#[derive(Clone, Debug)]
pub struct Geometry {
    /// The data unit (the policy's required alignment).
    pub unit_bytes: u64,
    pub device_bytes: Vec<u64>,
    /// Where every host unit lives at rest (covering [0, host_units)):
    /// after a drain those places alone must hold the data.
    pub homes: Vec<Home>,
    /// Host IOs stay in [0, host_units).
    pub host_units: u64,
    /// `locate` covers host bytes below this (None: whatever is asked).
    pub locate_end_bytes: Option<u64>,
    /// Per device: units below this are not host data (metadata) and not
    /// watched by the strict check.
    pub unwatched_below: Vec<u64>,
}

impl Geometry {
    /// One backing device that holds host unit u at its unit u.
    pub fn backed(
        unit_bytes: u64,
        device_bytes: Vec<u64>,
        backing: usize,
        host_units: u64,
    ) -> Geometry {
        let n = device_bytes.len();
        Geometry {
            unit_bytes,
            device_bytes,
            homes: vec![Home {
                host_first: 0,
                units: host_units,
                device: backing,
                device_first: 0,
            }],
            host_units,
            locate_end_bytes: None,
            unwatched_below: vec![0; n],
        }
    }

    /// The home place of host unit `unit`.
    pub fn home(&self, unit: u64) -> (usize, u64) {
        let h = self
            .homes
            .iter()
            .find(|h| (h.host_first..h.host_first + h.units).contains(&unit))
            .expect("every host unit has a home");
        (h.device, h.device_first + unit - h.host_first)
    }

    /// The host unit whose home is (device, unit), if any.
    pub fn home_of(&self, device: usize, unit: u64) -> Option<u64> {
        self.homes
            .iter()
            .find(|h| {
                h.device == device && (h.device_first..h.device_first + h.units).contains(&unit)
            })
            .map(|h| h.host_first + unit - h.device_first)
    }
}

/// What a test knows about its policy beyond `Policy`.
pub trait Target: Policy {
    /// Every invariant (test-only, linear cost), run between events.
    fn check_full(&self) {}
    /// Policy-specific checks of a device IO at submission.
    fn check_submit(
        &self,
        device: usize,
        io: &DeviceIo,
        buf: Option<BufRef>,
    ) -> Result<(), String> {
        let _ = (device, io, buf);
        Ok(())
    }
    /// A state dump for failure messages.
    fn state(&self) -> String {
        String::new()
    }
    /// Whether the strict check watches this device IO (default: all reads
    /// and writes). A policy may exempt its own reads whose data it reads
    /// again if a write changed it meanwhile (they cannot make data wrong).
    fn strict_watches(&self, device: usize, io: &DeviceIo, buf: Option<BufRef>) -> bool {
        let _ = (device, io, buf);
        true
    }
    /// Data is moving inside the policy now (an ATSMF move, an HSWD RMW):
    /// `locate` checks made meanwhile are counted apart.
    fn busy(&self) -> bool {
        false
    }
}

struct PendingIo {
    device: usize,
    io: DeviceIo,
    buf: Option<BufRef>,
    /// A write's units, taken at submission (None: unfilled or no buffer).
    data: Vec<Option<Data>>,
    /// A write landed (a trim zeroed) at submission / a read sampled then.
    early: bool,
    sampled: Vec<Option<Data>>,
    seq: u64,
    /// Recorded by the strict check.
    watched: bool,
}

pub struct HostState {
    pub first: u64,
    pub n: u64,
    pub op: Op,
    /// Reads, per unit at issue: the newest acknowledged version, whether
    /// zeros were acceptable, and the unit's trim count.
    floor: Vec<u64>,
    zero_ok: Vec<bool>,
    trim_epoch: Vec<u64>,
}

/// Counters of what the runs reached (for coverage asserts).
#[derive(Clone, Debug, Default)]
pub struct Reached {
    pub locate_calls: u64,
    /// `locate` calls while the policy was busy (see `Target::busy`).
    pub locate_calls_busy: u64,
    /// Units whose located bytes were compared, per tier.
    pub located_units_per_tier: Vec<u64>,
    pub trims: u64,
    /// Reads of a unit that returned zeros after a trim.
    pub zero_reads: u64,
    /// Writes acknowledged to a unit trimmed before.
    pub writes_after_trim: u64,
    pub flushes: u64,
    pub drains: u64,
    /// Drains called while host IOs were in flight.
    pub drains_with_host_io: u64,
    /// Device IOs failed on purpose (`Sim::device_error_per_mille`), host
    /// IOs the policy failed, runs the policy stopped (fail-stop).
    pub device_errors: u64,
    pub host_ios_failed: u64,
    pub stopped_runs: u64,
}

impl Reached {
    pub fn add(&mut self, o: &Reached) {
        self.locate_calls += o.locate_calls;
        self.locate_calls_busy += o.locate_calls_busy;
        if self.located_units_per_tier.len() < o.located_units_per_tier.len() {
            self.located_units_per_tier
                .resize(o.located_units_per_tier.len(), 0);
        }
        for (a, b) in self
            .located_units_per_tier
            .iter_mut()
            .zip(&o.located_units_per_tier)
        {
            *a += b;
        }
        self.trims += o.trims;
        self.zero_reads += o.zero_reads;
        self.writes_after_trim += o.writes_after_trim;
        self.flushes += o.flushes;
        self.drains += o.drains;
        self.drains_with_host_io += o.drains_with_host_io;
        self.device_errors += o.device_errors;
        self.host_ios_failed += o.host_ios_failed;
        self.stopped_runs += o.stopped_runs;
    }
}

pub struct Sim {
    pub rng: Rng,
    pub max_delay: u64,
    /// Per device, when set: its own largest delay (else `max_delay`).
    pub device_max_delay: Vec<u64>,
    /// Device IOs submitted (their identity in the strict check).
    seq: u64,
    pub g: Geometry,
    /// Device IOs in flight and timers: the shared random-delay core.
    q: Events<PendingIo>,
    /// device → unit → data.
    pub devices: Vec<HashMap<u64, Data>>,
    /// The highest version each home unit ever held (by host unit).
    home_max: HashMap<u64, u64>,
    pub host_bufs: HashMap<u64, Vec<Option<Data>>>,
    staging: HashMap<u64, HashMap<u64, Data>>,
    released: HashSet<u64>,
    pub hosts: HashMap<u64, HostState>,
    /// Strict mode: device IOs in flight per (device, unit): (seq, a write
    /// that changes the unit's bytes).
    pub strict: bool,
    in_flight: HashMap<(usize, u64), Vec<(u64, bool)>>,
    // The host's model, per unit.
    newest: HashMap<u64, u64>,
    floor: HashMap<u64, u64>,
    zero_ok: HashSet<u64>,
    trim_epoch: HashMap<u64, u64>,
    /// Host writes and trims in flight per unit; reads in flight per unit.
    pub writing: HashMap<u64, u32>,
    pub reading: HashMap<u64, u32>,
    next_host_id: u64,
    next_version: u64,
    pub issued: u64,
    pub completed: u64,
    pub completed_per_tier: Vec<u64>,
    tiers: usize,
    pub reached: Reached,
    pub failures: Vec<String>,
    /// Run `Target::check_full` after every event.
    pub full_checks: bool,
    /// Device errors: each device IO fails with this chance (per mille)
    /// instead of completing (`Policy::on_device_error`). A failed write
    /// or trim lands on a random subset of its units (at submission or
    /// not at all), a failed read delivers nothing.
    pub device_error_per_mille: u64,
    /// Only IOs of the host data path fail: those moving a host buffer's
    /// bytes, and trims (to drive a policy far past many survived errors).
    pub device_errors_on_host_path_only: bool,
    /// The policy refused a device error (fail-stop): the process would
    /// stop here, so the run does; nothing after it is checked.
    pub stopped: bool,
    /// Host units whose data a failed device IO carried (a write's, or
    /// what a read would have found): if the policy reports it gave pages
    /// up (`drain_abandoned_pages`), their homes may hold an older version
    /// after the drain.
    failed_io_units: HashSet<u64>,
    /// Staging buffers a failed device read was to fill: a policy may give
    /// up every page gathered in one (a write-back run), so at release
    /// their units join `failed_io_units`.
    tainted_staging: HashSet<u64>,
}

impl Sim {
    pub fn new(seed: u64, max_delay: u64, g: Geometry, tiers: usize) -> Sim {
        let devices = vec![HashMap::new(); g.device_bytes.len()];
        Sim {
            rng: Rng(seed),
            max_delay: max_delay.max(1),
            device_max_delay: Vec::new(),
            seq: 0,
            g,
            q: Events::default(),
            devices,
            home_max: HashMap::new(),
            host_bufs: HashMap::new(),
            staging: HashMap::new(),
            released: HashSet::new(),
            hosts: HashMap::new(),
            strict: false,
            in_flight: HashMap::new(),
            newest: HashMap::new(),
            floor: HashMap::new(),
            zero_ok: HashSet::new(),
            trim_epoch: HashMap::new(),
            writing: HashMap::new(),
            reading: HashMap::new(),
            next_host_id: 0,
            next_version: 0,
            issued: 0,
            completed: 0,
            completed_per_tier: vec![0; tiers],
            tiers,
            reached: Reached {
                located_units_per_tier: vec![0; tiers],
                ..Reached::default()
            },
            failures: Vec::new(),
            full_checks: true,
            device_error_per_mille: 0,
            device_errors_on_host_path_only: false,
            stopped: false,
            failed_io_units: HashSet::new(),
            tainted_staging: HashSet::new(),
        }
    }

    /// A fresh Outbox as the real executor sets it up.
    pub fn outbox() -> Outbox {
        Outbox {
            wants_data: true,
            ..Outbox::default()
        }
    }

    pub fn fail(&mut self, msg: String) {
        if self.failures.len() < 5 {
            self.failures.push(msg);
        }
    }

    pub fn device_ios_in_flight(&self) -> usize {
        self.q.devices_in_flight()
    }

    /// Staging buffers filled and not released yet.
    pub fn staging_left(&self) -> usize {
        self.staging.len()
    }

    pub fn in_flight_on(&self, device: usize) -> usize {
        self.q.devices().filter(|p| p.device == device).count()
    }

    /// Host unit `unit` at its home now.
    pub fn backing(&self, unit: u64) -> Data {
        let (device, at) = self.g.home(unit);
        self.unit_at(device, at).unwrap()
    }

    /// A device's unit now (None: a unit outside every home never written).
    pub fn unit_at(&self, device: usize, unit: u64) -> Option<Data> {
        match self.devices[device].get(&unit) {
            Some(d) => Some(*d),
            None => self.g.home_of(device, unit).map(|h| Data::Block {
                unit: h,
                version: 0,
            }),
        }
    }

    /// The newest acknowledged version of a unit, and whether it may read
    /// as zeros instead.
    pub fn acked(&self, unit: u64) -> (u64, bool) {
        (
            self.floor.get(&unit).copied().unwrap_or(0),
            self.zero_ok.contains(&unit),
        )
    }

    /// Whether `d` is what unit `unit` may hold once nothing is in flight:
    /// its newest acknowledged version, or a newer one a write that failed
    /// (so was never acknowledged) may have left (or zeros if trimmed since).
    fn settled_ok(&self, unit: u64, d: Data) -> bool {
        let (v, zero) = self.acked(unit);
        let newest = self.newest.get(&unit).copied().unwrap_or(0);
        match d {
            Data::Block { unit: u, version } => u == unit && version >= v && version <= newest,
            Data::Zero => zero,
        }
    }

    fn buffer_unit(&self, buf: BufRef, j: u64) -> Result<Option<Data>, String> {
        let u = self.g.unit_bytes;
        match buf {
            BufRef::Host {
                host_id,
                offset_bytes,
            } => {
                if !self.hosts.contains_key(&host_id) {
                    return Err(format!("host IO {host_id}, which has completed"));
                }
                if offset_bytes % u != 0 {
                    return Err(format!(
                        "host IO {host_id} at unaligned offset {offset_bytes}"
                    ));
                }
                let idx = offset_bytes / u + j;
                Ok(self
                    .host_bufs
                    .get(&host_id)
                    .and_then(|b| b.get(idx as usize).copied().flatten()))
            }
            BufRef::Staging { id, offset_bytes } => {
                if self.released.contains(&id) {
                    return Err(format!("staging buffer {id}, which was released"));
                }
                let s = self
                    .staging
                    .get(&id)
                    .ok_or_else(|| format!("staging buffer {id}, which was never filled"))?;
                Ok(s.get(&(offset_bytes / u + j)).copied())
            }
            BufRef::Zeros => Ok(Some(Data::Zero)),
        }
    }

    /// A device write lands (or a trim zeroes).
    fn land(&mut self, device: usize, io: &DeviceIo, data: &[Option<Data>]) {
        let base = io.offset_bytes / self.g.unit_bytes;
        for (j, d) in data.iter().enumerate() {
            let Some(d) = *d else { continue };
            let unit = base + j as u64;
            if let Some(host) = self.g.home_of(device, unit)
                && let Data::Block {
                    unit: owner,
                    version,
                } = d
            {
                let max = self.home_max.entry(host).or_insert(0);
                if owner != host {
                    let msg = format!(
                        "home of unit {host} (device {device} unit {unit}) got unit {owner}'s data ({io:?})"
                    );
                    self.fail(msg);
                } else if version < *max {
                    let msg = format!(
                        "home of unit {host} went back from version {} to {version} ({io:?})",
                        *max
                    );
                    self.fail(msg);
                } else {
                    *max = version;
                }
            }
            self.devices[device].insert(unit, d);
        }
    }

    /// What a device range holds now (never-written units: None).
    fn sample_quiet(&self, device: usize, io: &DeviceIo) -> Vec<Option<Data>> {
        let u = self.g.unit_bytes;
        let base = io.offset_bytes / u;
        (0..io.size_bytes as u64 / u)
            .map(|j| self.unit_at(device, base + j))
            .collect()
    }

    /// What a device read finds on the device now.
    fn sample(&mut self, device: usize, io: &DeviceIo) -> Vec<Option<Data>> {
        let u = self.g.unit_bytes;
        let base = io.offset_bytes / u;
        let units = io.size_bytes as u64 / u;
        let mut got = Vec::with_capacity(units as usize);
        for j in 0..units {
            let d = self.unit_at(device, base + j);
            if d.is_none() {
                self.fail(format!(
                    "read of never-written unit {} of device {device} ({io:?})",
                    base + j
                ));
            }
            got.push(d);
        }
        got
    }

    fn watched_units(&self, device: usize, io: &DeviceIo) -> std::ops::Range<u64> {
        let u = self.g.unit_bytes;
        let first = io.offset_bytes / u;
        let end = io.end_bytes().div_ceil(u);
        first.max(self.g.unwatched_below[device])..end.max(first)
    }

    /// Takes what the policy asked for: device IOs (with their data),
    /// releases, completions, timers.
    pub fn apply<P: Target + ?Sized>(&mut self, policy: &P, out: &mut Outbox) {
        // Policy-made bytes (metadata pages): no host data, so modelled as
        // zero units; a write from them must never reach a home.
        for (id, bytes) in std::mem::take(&mut out.fills) {
            if self.released.contains(&id) {
                self.fail(format!("staging buffer {id} filled after its release"));
            }
            let units = (bytes.len() as u64).div_ceil(self.g.unit_bytes);
            self.staging
                .insert(id, (0..units).map(|j| (j, Data::Zero)).collect());
        }
        let ios = std::mem::take(&mut out.device_ios);
        let mut descs = std::mem::take(&mut out.data);
        let u = self.g.unit_bytes;
        for (device, io) in ios {
            let found: Vec<usize> = descs
                .iter()
                .enumerate()
                .filter(|(_, (d, t, _))| *d == device && *t == io.tag)
                .map(|(i, _)| i)
                .collect();
            let has_data = matches!(io.op, Op::Read | Op::Write);
            if found.len() != usize::from(has_data) {
                self.fail(format!(
                    "device {device} IO {io:?} described {} times",
                    found.len()
                ));
                continue;
            }
            let buf = found.first().map(|&i| descs.swap_remove(i).2);
            if let Err(e) = policy.check_submit(device, &io, buf) {
                self.fail(e);
            }
            if device >= self.g.device_bytes.len() {
                self.fail(format!("{io:?} to device {device}, which does not exist"));
                continue;
            }
            if io.end_bytes() > self.g.device_bytes[device] {
                self.fail(format!(
                    "{io:?} beyond the end of device {device} ({} bytes)",
                    self.g.device_bytes[device]
                ));
            }
            if io.op != Op::Flush && (io.offset_bytes % u != 0 || io.size_bytes as u64 % u != 0) {
                self.fail(format!(
                    "{io:?} to device {device} is not whole units of {u}"
                ));
            }
            if io.op == Op::Flush && io.size_bytes != 0 {
                self.fail(format!("a flush {io:?} with a size"));
            }
            let units = io.size_bytes as u64 / u;
            let mut data = Vec::new();
            match (io.op, buf) {
                (Op::Write, Some(b)) => {
                    for j in 0..units {
                        match self.buffer_unit(b, j) {
                            Ok(Some(d)) => data.push(Some(d)),
                            Ok(None) => {
                                self.fail(format!(
                                    "write {io:?} to device {device} from an unfilled buffer {b:?} (unit {j})"
                                ));
                                data.push(None);
                            }
                            Err(e) => {
                                self.fail(format!("write {io:?} to device {device} from {e}"));
                                data.push(None);
                            }
                        }
                    }
                }
                (Op::Read, Some(BufRef::Zeros)) => {
                    self.fail(format!("a read {io:?} into no buffer"));
                }
                (Op::Trim, _) => data = vec![Some(Data::Zero); units as usize],
                _ => {}
            }
            self.seq += 1;
            let seq = self.seq;
            let watched = has_data && policy.strict_watches(device, &io, buf);
            if self.strict && watched {
                let first = io.offset_bytes / u;
                let is_write = io.op == Op::Write;
                for unit in self.watched_units(device, &io) {
                    let changes = is_write
                        && data
                            .get((unit - first) as usize)
                            .is_some_and(|d| *d != self.unit_at(device, unit));
                    let list = self.in_flight.entry((device, unit)).or_default();
                    // A clash needs a write that changes the bytes (a read
                    // or an identical rewrite changes nothing).
                    let clash = list.iter().any(|&(_, c)| changes || c);
                    list.push((seq, changes));
                    if clash {
                        let seqs: Vec<u64> = list.iter().map(|&(s, _)| s).collect();
                        let others: Vec<String> = self
                            .q
                            .devices()
                            .filter(|p| seqs.contains(&p.seq))
                            .map(|p| format!("{:?} {:?}", p.io, p.buf))
                            .collect();
                        let msg = format!(
                            "device {device} unit {unit}: {io:?} {buf:?} overlaps a device IO in \
                             flight that changes (or would change) its bytes: {others:?}"
                        );
                        self.fail(msg);
                    }
                }
            }
            let early = self.rng.chance(50);
            let mut sampled = Vec::new();
            if early {
                match io.op {
                    Op::Write | Op::Trim => self.land(device, &io, &data),
                    Op::Read => sampled = self.sample(device, &io),
                    Op::Flush => {}
                }
            }
            let max = self
                .device_max_delay
                .get(device)
                .copied()
                .unwrap_or(self.max_delay);
            self.q.submit(
                &mut self.rng,
                max,
                PendingIo {
                    device,
                    io,
                    buf,
                    data,
                    early,
                    sampled,
                    seq,
                    watched,
                },
            );
        }
        for (device, tag, buf) in descs {
            self.fail(format!(
                "a description ({buf:?}) for device {device} tag {tag:#x}, which was not submitted"
            ));
        }
        for id in std::mem::take(&mut out.release) {
            if !self.released.insert(id) {
                self.fail(format!("staging buffer {id} released twice"));
            }
            let gathered = self.staging.remove(&id);
            if self.tainted_staging.remove(&id) {
                for d in gathered.unwrap_or_default().into_values() {
                    if let Data::Block { unit, .. } = d {
                        self.failed_io_units.insert(unit);
                    }
                }
            }
        }
        for (host, tier) in std::mem::take(&mut out.complete) {
            self.host_done(host, tier);
        }
        for (host, _) in std::mem::take(&mut out.failed) {
            self.host_failed(host);
        }
        for (at, id) in std::mem::take(&mut out.timers) {
            self.q.set_timer(at, id);
        }
        out.clear();
    }

    /// The policy failed host IO `host`: no data to check (a failed read's
    /// buffer is undefined); a failed write or trim stays issued but never
    /// acknowledged, so its units may read as it or as before.
    fn host_failed(&mut self, host: u64) {
        let Some(h) = self.hosts.remove(&host) else {
            self.fail(format!(
                "host {host} failed after it completed, or never issued"
            ));
            return;
        };
        if self.reached.device_errors == 0 {
            self.fail(format!("host {host} failed with no device error"));
        }
        self.reached.host_ios_failed += 1;
        self.host_bufs.remove(&host);
        for p in h.first..h.first + h.n {
            match h.op {
                Op::Read => dec(&mut self.reading, p),
                Op::Write | Op::Trim => dec(&mut self.writing, p),
                Op::Flush => {}
            }
        }
    }

    fn host_done(&mut self, host: u64, tier: u16) {
        if tier as usize >= self.tiers {
            self.fail(format!(
                "host {host} completed in tier {tier} of {}",
                self.tiers
            ));
        } else {
            self.completed_per_tier[tier as usize] += 1;
        }
        let Some(h) = self.hosts.remove(&host) else {
            self.fail(format!("host {host} completed twice or never issued"));
            return;
        };
        self.completed += 1;
        let buf = self.host_bufs.remove(&host).unwrap_or_default();
        for i in 0..h.n {
            let p = h.first + i;
            match h.op {
                Op::Read => {
                    let newest = self.newest.get(&p).copied().unwrap_or(0);
                    let i = i as usize;
                    let trimmed_since =
                        self.trim_epoch.get(&p).copied().unwrap_or(0) != h.trim_epoch[i];
                    match buf.get(i).copied().flatten() {
                        Some(Data::Block { unit, version })
                            if unit == p && version >= h.floor[i] && version <= newest => {}
                        Some(Data::Zero) if h.zero_ok[i] || trimmed_since => {
                            self.reached.zero_reads += 1;
                        }
                        got => self.fail(format!(
                            "read {host} unit {p}: got {got:?}, want unit {p} version in {}..={newest}{}",
                            h.floor[i],
                            if h.zero_ok[i] { " or zeros" } else { "" }
                        )),
                    }
                    dec(&mut self.reading, p);
                }
                Op::Write => {
                    let Some(Data::Block { version, .. }) = buf[i as usize] else {
                        unreachable!("host writes carry blocks")
                    };
                    let a = self.floor.entry(p).or_insert(0);
                    *a = (*a).max(version);
                    if self.zero_ok.remove(&p) {
                        self.reached.writes_after_trim += 1;
                    }
                    dec(&mut self.writing, p);
                }
                Op::Trim => dec(&mut self.writing, p),
                Op::Flush => {}
            }
        }
    }

    /// The current time, ns.
    pub fn now(&self) -> u64 {
        self.q.now_ns
    }

    /// Device IO `p` ends now: completes, or (by `device_error_per_mille`)
    /// fails.
    fn device_event<P: Target + ?Sized>(&mut self, p: PendingIo, policy: &mut P, out: &mut Outbox) {
        let eligible = !self.device_errors_on_host_path_only
            || matches!(p.buf, Some(BufRef::Host { .. }))
            || p.io.op == Op::Trim;
        let faults = RandomFaults {
            per_mille: if eligible {
                self.device_error_per_mille
            } else {
                0
            },
        };
        let now = self.now();
        if !faults.fails(&mut self.rng) {
            self.device_done(&p);
            end_device_io(policy, now, p.device, p.io.tag, false, out);
            return;
        }
        self.reached.device_errors += 1;
        self.unwatch(&p);
        if p.io.op == Op::Read {
            if let Some(BufRef::Staging { id, .. }) = p.buf {
                self.tainted_staging.insert(id);
            }
            for d in self.sample_quiet(p.device, &p.io).into_iter().flatten() {
                if let Data::Block { unit, .. } = d {
                    self.failed_io_units.insert(unit);
                }
            }
        }
        if matches!(p.io.op, Op::Write | Op::Trim) {
            if let Some(BufRef::Staging { id, .. }) = p.buf {
                self.tainted_staging.insert(id);
            }
            for d in p.data.iter().flatten() {
                if let Data::Block { unit, .. } = d {
                    self.failed_io_units.insert(*unit);
                }
            }
            if !p.early {
                let partial: Vec<Option<Data>> = p
                    .data
                    .iter()
                    .map(|d| if self.rng.chance(50) { *d } else { None })
                    .collect();
                self.land(p.device, &p.io, &partial);
            }
        }
        if !end_device_io(policy, now, p.device, p.io.tag, true, out) {
            self.stopped = true;
            self.reached.stopped_runs += 1;
            out.clear();
        }
    }

    /// Runs the earliest event (device completion or timer); false if none
    /// (or the policy stopped at a device error).
    pub fn step<P: Target + ?Sized>(&mut self, policy: &mut P, out: &mut Outbox) -> bool {
        if self.stopped {
            return false;
        }
        match self.q.pop_next() {
            None => return false,
            Some(Next::Timer(id)) => policy.on_timer(self.now(), id, out),
            Some(Next::Device(p)) => self.device_event(p, policy, out),
        }
        self.apply(policy, out);
        if self.full_checks {
            policy.check_full();
        }
        true
    }

    /// Runs device events only (timers wait), until none is left or
    /// `limit` ran; false if the limit stopped it.
    pub fn settle<P: Target + ?Sized>(
        &mut self,
        policy: &mut P,
        out: &mut Outbox,
        limit: u64,
    ) -> bool {
        let mut n = 0;
        while self.q.devices_in_flight() > 0 && !self.stopped {
            n += 1;
            if n > limit {
                return false;
            }
            let p = self.q.next_device().unwrap();
            self.device_event(p, policy, out);
            if self.stopped {
                return true;
            }
            self.apply(policy, out);
            if self.full_checks {
                policy.check_full();
            }
        }
        true
    }

    /// The strict check forgets a device IO that ended.
    fn unwatch(&mut self, p: &PendingIo) {
        if self.strict && p.watched {
            for unit in self.watched_units(p.device, &p.io) {
                if let Some(list) = self.in_flight.get_mut(&(p.device, unit)) {
                    list.retain(|&(s, _)| s != p.seq);
                    if list.is_empty() {
                        self.in_flight.remove(&(p.device, unit));
                    }
                }
            }
        }
    }

    fn device_done(&mut self, p: &PendingIo) {
        let u = self.g.unit_bytes;
        self.unwatch(p);
        match p.io.op {
            Op::Read => {
                let got = if p.early {
                    p.sampled.clone()
                } else {
                    self.sample(p.device, &p.io)
                };
                let Some(buf) = p.buf else { return };
                for (j, d) in got.into_iter().enumerate() {
                    let Some(d) = d else { continue };
                    let j = j as u64;
                    match buf {
                        BufRef::Host {
                            host_id,
                            offset_bytes,
                        } => {
                            if !self.hosts.contains_key(&host_id) {
                                self.fail(format!(
                                    "a device read for host IO {host_id} landed after that IO completed"
                                ));
                                break;
                            }
                            if let Some(slot) = self
                                .host_bufs
                                .get_mut(&host_id)
                                .and_then(|b| b.get_mut((offset_bytes / u + j) as usize))
                            {
                                *slot = Some(d);
                            } else {
                                self.fail(format!(
                                    "a device read {:?} past the end of host IO {host_id}",
                                    p.io
                                ));
                            }
                        }
                        BufRef::Staging { id, offset_bytes } => {
                            if self.released.contains(&id) {
                                self.fail(format!(
                                    "a device read landed in staging buffer {id} after its release"
                                ));
                                break;
                            }
                            self.staging
                                .entry(id)
                                .or_default()
                                .insert(offset_bytes / u + j, d);
                        }
                        BufRef::Zeros => {}
                    }
                }
            }
            Op::Write | Op::Trim if !p.early => {
                let data = p.data.clone();
                self.land(p.device, &p.io, &data);
            }
            _ => {}
        }
    }

    /// Whether host units [first, first + n) are free for an `op` now
    /// (the host is well-formed: never two writes or trims of a unit at
    /// once; strict: never a write or trim with any other IO of a unit).
    pub fn can_issue(&self, op: Op, first: u64, n: u64) -> bool {
        let changes = matches!(op, Op::Write | Op::Trim);
        (first..first + n).all(|p| {
            let w = self.writing.contains_key(&p);
            let r = self.reading.contains_key(&p);
            if self.strict {
                !(w || changes && r)
            } else {
                !(changes && w)
            }
        })
    }

    /// Issues a host IO of units [first, first + n) (a flush: n = 0).
    pub fn issue<P: Target + ?Sized>(
        &mut self,
        policy: &mut P,
        out: &mut Outbox,
        op: Op,
        first: u64,
        n: u64,
    ) -> u64 {
        self.next_host_id += 1;
        let id = self.next_host_id;
        self.issued += 1;
        let units: Vec<u64> = (first..first + n).collect();
        let buf: Vec<Option<Data>> = match op {
            Op::Write => units
                .iter()
                .map(|&p| {
                    self.next_version += 1;
                    self.newest.insert(p, self.next_version);
                    Some(Data::Block {
                        unit: p,
                        version: self.next_version,
                    })
                })
                .collect(),
            _ => vec![None; n as usize],
        };
        let mut h = HostState {
            first,
            n,
            op,
            floor: Vec::new(),
            zero_ok: Vec::new(),
            trim_epoch: Vec::new(),
        };
        for &p in &units {
            match op {
                Op::Read => {
                    *self.reading.entry(p).or_insert(0) += 1;
                    let (v, zero) = self.acked(p);
                    h.floor.push(v);
                    h.zero_ok.push(zero);
                    h.trim_epoch
                        .push(self.trim_epoch.get(&p).copied().unwrap_or(0));
                }
                Op::Write => *self.writing.entry(p).or_insert(0) += 1,
                Op::Trim => {
                    *self.writing.entry(p).or_insert(0) += 1;
                    *self.trim_epoch.entry(p).or_insert(0) += 1;
                    self.zero_ok.insert(p);
                }
                Op::Flush => {}
            }
        }
        match op {
            Op::Trim => self.reached.trims += 1,
            Op::Flush => self.reached.flushes += 1,
            _ => {}
        }
        self.host_bufs.insert(id, buf);
        self.hosts.insert(id, h);
        let u = self.g.unit_bytes;
        let io = HostIo {
            id,
            op,
            offset_bytes: if op == Op::Flush { 0 } else { first * u },
            size_bytes: (n * u) as u32,
            tenant: 0,
        };
        policy.on_host_io(self.now(), io, out);
        self.apply(policy, out);
        if self.full_checks {
            policy.check_full();
        }
        id
    }

    /// Asks `locate` for a random range and checks the answer (see the
    /// module docs).
    pub fn check_locate<P: Target + ?Sized>(&mut self, policy: &P) {
        let u = self.g.unit_bytes;
        // Mostly unit-aligned ranges inside the volume; sometimes ragged,
        // sometimes past its end.
        let mut offset = self.rng.below(self.g.host_units) * u;
        let mut len = (1 + self.rng.below(self.g.host_units.min(48))) * u;
        if self.rng.chance(20) {
            offset += self.rng.below(u);
            len = 1 + self.rng.below(len);
        }
        if self.rng.chance(10) {
            len += self.rng.below(4 * u);
        }
        if self.g.locate_end_bytes.is_none() {
            // No address-space end to test: stay inside the host range.
            len = len.min(self.g.host_units * u - offset);
        }
        let end = offset + len;
        let covered_end = match self.g.locate_end_bytes {
            Some(e) => end.min(e),
            None => end,
        };
        let want = covered_end.saturating_sub(offset);
        // Something of the caller's own already in the vector must stay.
        let sentinel = Extent {
            len_bytes: 1,
            tier: 0,
            device: 0,
            device_offset_bytes: 0,
        };
        let mut v = vec![sentinel];
        policy.locate(offset, len, &mut v);
        self.reached.locate_calls += 1;
        self.reached.locate_calls_busy += u64::from(policy.busy());
        let ctx = format!("locate({offset}, {len})");
        if v[0] != sentinel {
            self.fail(format!("{ctx} changed the caller's extent: {:?}", v[0]));
        }
        let exts = &v[1..];
        let total: u64 = exts.iter().map(|e| e.len_bytes).sum();
        if total != want {
            self.fail(format!(
                "{ctx}: extents cover {total} bytes, want {want}: {exts:?}"
            ));
            return;
        }
        for (i, e) in exts.iter().enumerate() {
            let bad = if e.len_bytes == 0 {
                Some("is empty")
            } else if e.tier as usize >= self.tiers {
                Some("has no such tier")
            } else if e.device >= self.g.device_bytes.len() {
                Some("has no such device")
            } else if e.device_offset_bytes + e.len_bytes > self.g.device_bytes[e.device] {
                Some("ends past its device")
            } else if i > 0 && {
                let p = exts[i - 1];
                p.tier == e.tier
                    && p.device == e.device
                    && p.device_offset_bytes + p.len_bytes == e.device_offset_bytes
            } {
                Some("continues the one before (not merged)")
            } else {
                None
            };
            if let Some(why) = bad {
                self.fail(format!(
                    "{ctx}: extent {i} {e:?} {why}: {exts:?}\n{}",
                    policy.state()
                ));
                return;
            }
        }
        // Compare the bytes at every reported place of a settled unit.
        let mut at = offset;
        let mut failed = false;
        for e in exts {
            let ext_end = at + e.len_bytes;
            let mut unit = at.div_ceil(u);
            while (unit + 1) * u <= ext_end && !failed {
                let host_byte = unit * u;
                let dev_byte = e.device_offset_bytes + (host_byte - at);
                unit += 1;
                let p = unit - 1;
                if p >= self.g.host_units || self.writing.contains_key(&p) {
                    continue; // not host data, or a write or trim in flight
                }
                if dev_byte % u != 0 {
                    self.fail(format!(
                        "{ctx}: unit {p} at unaligned device byte {dev_byte}: {e:?}"
                    ));
                    failed = true;
                    continue;
                }
                let got = self.unit_at(e.device, dev_byte / u);
                let ok = got.is_some_and(|d| self.settled_ok(p, d));
                if ok {
                    self.reached.located_units_per_tier[e.tier as usize] += 1;
                } else {
                    let (v, zero) = self.acked(p);
                    self.fail(format!(
                        "{ctx}: unit {p} is in tier {} at device {} byte {dev_byte}, which holds {got:?}; \
                         want version {v}{} ({exts:?})\n{}",
                        e.tier,
                        e.device,
                        if zero { " or zeros" } else { "" },
                        policy.state()
                    ));
                    failed = true;
                }
            }
            at = ext_end;
        }
    }

    /// `drain`, then events until `is_drained` (bounded); then the checks
    /// of the module docs.
    pub fn drain_and_check<P: Target + ?Sized>(&mut self, policy: &mut P, out: &mut Outbox) {
        if self.stopped {
            return;
        }
        self.reached.drains += 1;
        self.reached.drains_with_host_io += u64::from(!self.hosts.is_empty());
        policy.drain(self.now(), out);
        self.apply(policy, out);
        if self.full_checks {
            policy.check_full();
        }
        let mut steps = 0u64;
        while !policy.is_drained() {
            steps += 1;
            if steps > 2_000_000 {
                self.fail(format!("never drains\n{}", policy.state()));
                return;
            }
            if !self.step(policy, out) {
                if self.stopped {
                    return;
                }
                self.fail(format!(
                    "not drained and nothing left to wait for\n{}",
                    policy.state()
                ));
                return;
            }
        }
        if self.q.devices_in_flight() > 0 {
            self.fail(format!(
                "drained with {} device IOs in flight\n{}",
                self.q.devices_in_flight(),
                policy.state()
            ));
        }
        if !self.hosts.is_empty() {
            self.fail(format!(
                "drained with {} host IOs in flight",
                self.hosts.len()
            ));
        }
        if !self.staging.is_empty() {
            self.fail(format!(
                "staging buffers never released: {:?}",
                self.staging.keys().collect::<Vec<_>>()
            ));
        }
        // A policy that gave pages up after failed write-backs (a clean
        // stop must end) may leave the homes of units a failed write
        // carried older; every other unit must be exact.
        let gave_up = policy
            .counters()
            .iter()
            .any(|&(name, v)| name == "drain_abandoned_pages" && v > 0.0);
        self.check_homes("after the drain", gave_up);
        // Timers may still fire; they must leave everything as it is.
        let mut n = 0;
        while let Some(id) = self.q.next_timer() {
            n += 1;
            if n > 1000 {
                self.fail("timers keep firing after the drain".into());
                break;
            }
            policy.on_timer(self.now(), id, out);
            if !out.device_ios.is_empty() || !policy.is_drained() {
                self.fail(format!(
                    "timer {id} after the drain issued {:?} / undrained the policy",
                    out.device_ios
                ));
            }
            self.apply(policy, out);
        }
        self.settle(policy, out, 1000);
    }

    /// The homes alone hold every unit's newest acknowledged data (or zeros
    /// if trimmed since).
    pub fn check_backing(&mut self, when: &str) {
        self.check_homes(when, false);
    }

    /// As `check_backing`; `gave_up`: units a failed device write carried
    /// may hold any of their versions (or zeros).
    fn check_homes(&mut self, when: &str, gave_up: bool) {
        for p in 0..self.g.host_units {
            let b = self.backing(p);
            let lost_ok = gave_up
                && self.failed_io_units.contains(&p)
                && match b {
                    Data::Block { unit, version } => {
                        unit == p && version <= self.newest.get(&p).copied().unwrap_or(0)
                    }
                    Data::Zero => true,
                };
            if !self.settled_ok(p, b) && !lost_ok {
                let (v, zero) = self.acked(p);
                self.fail(format!(
                    "unit {p}: its home holds {b:?} {when}, want version {v}{}",
                    if zero { " or zeros" } else { "" }
                ));
            }
        }
    }
}

fn dec(m: &mut HashMap<u64, u32>, k: u64) {
    let c = m.get_mut(&k).expect("counted");
    *c -= 1;
    if *c == 0 {
        m.remove(&k);
    }
}

/// A random host workload.
#[derive(Clone, Debug)]
pub struct Workload {
    pub ios: u64,
    /// Host IOs in flight at most.
    pub depth: u64,
    pub max_units: u64,
    /// Of all host IOs, %; the rest are reads.
    pub write_pct: u64,
    pub trim_pct: u64,
    pub flush_pct: u64,
    /// % of IOs inside a hot region that drifts by one region length every
    /// `hot_drift_ios` IOs (0: fixed), for tiering policies.
    pub hot_pct: u64,
    pub hot_units: u64,
    pub hot_drift_ios: u64,
    /// % of IOs that continue a sequential run (exercises bypasses).
    pub sequential_pct: u64,
    /// % of loop turns that check `locate` first.
    pub locate_pct: u64,
}

impl Workload {
    pub fn new(ios: u64, depth: u64, max_units: u64, write_pct: u64) -> Workload {
        Workload {
            ios,
            depth,
            max_units,
            write_pct,
            trim_pct: 0,
            flush_pct: 0,
            hot_pct: 0,
            hot_units: 0,
            hot_drift_ios: 0,
            sequential_pct: 0,
            locate_pct: 0,
        }
    }
}

/// Issues `w` (each IO when the host may, else events run first); returns
/// with host IOs maybe still in flight once all are issued.
pub fn issue_workload<P: Target + ?Sized>(
    sim: &mut Sim,
    policy: &mut P,
    out: &mut Outbox,
    w: &Workload,
) {
    let units = sim.g.host_units;
    let mut issued = 0u64;
    let mut guard = 0u64;
    while issued < w.ios && !sim.stopped {
        guard += 1;
        if guard > 2_000_000 {
            sim.fail(format!("no progress\n{}", policy.state()));
            return;
        }
        if w.locate_pct > 0 && sim.rng.chance(w.locate_pct) {
            sim.check_locate(policy);
        }
        let can = (sim.hosts.len() as u64) < w.depth;
        if !(can && (sim.device_ios_in_flight() == 0 || sim.rng.chance(50))) {
            if !sim.step(policy, out) && !sim.stopped {
                sim.fail(format!(
                    "stuck: {} host IOs never completed\n{}",
                    sim.hosts.len(),
                    policy.state()
                ));
                return;
            }
            continue;
        }
        let roll = sim.rng.below(100);
        let op = if roll < w.flush_pct {
            Op::Flush
        } else if roll < w.flush_pct + w.trim_pct {
            Op::Trim
        } else if roll < w.flush_pct + w.trim_pct + w.write_pct {
            Op::Write
        } else {
            Op::Read
        };
        let (first, n) = if op == Op::Flush {
            (0, 0)
        } else {
            let n = (1 + sim.rng.below(w.max_units)).min(units);
            let first = if w.sequential_pct > 0 && sim.rng.chance(w.sequential_pct) {
                (issued * 2) % (units + 1 - n)
            } else if w.hot_pct > 0 && sim.rng.chance(w.hot_pct) {
                let hot = w.hot_units.clamp(n, units);
                let shift = issued.checked_div(w.hot_drift_ios).unwrap_or(0) * hot;
                (shift + sim.rng.below(hot + 1 - n)) % (units + 1 - n)
            } else {
                sim.rng.below(units + 1 - n)
            };
            (first, n)
        };
        if !sim.can_issue(op, first, n) {
            if !sim.step(policy, out) && !sim.stopped {
                sim.fail(format!(
                    "stuck while a write is outstanding\n{}",
                    policy.state()
                ));
                return;
            }
            continue;
        }
        issued += 1;
        sim.issue(policy, out, op, first, n);
    }
}

/// Runs events until every host IO has completed (bounded).
pub fn complete_host_ios<P: Target + ?Sized>(sim: &mut Sim, policy: &mut P, out: &mut Outbox) {
    let mut steps = 0u64;
    while !sim.hosts.is_empty() && !sim.stopped {
        steps += 1;
        if steps > 2_000_000 || !sim.step(policy, out) && !sim.stopped {
            sim.fail(format!(
                "stuck: {} host IOs never completed\n{}",
                sim.hosts.len(),
                policy.state()
            ));
            return;
        }
    }
}

/// Checks that every issued host IO completed (or failed) exactly once,
/// unless the policy stopped at a device error.
pub fn check_counts(sim: &mut Sim) {
    let failed = sim.reached.host_ios_failed;
    if sim.completed + failed != sim.issued && !sim.stopped {
        let msg = format!(
            "{} of {} host IOs completed, {failed} failed",
            sim.completed, sim.issued
        );
        sim.fail(msg);
    }
}
