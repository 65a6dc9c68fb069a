//! Shingled magnetic recording (SMR) disk: the HDD model's mechanics under
//! a band layout, for host-managed use (the host writes whole bands, as
//! HSWD's NRegion does) and as the native region of the drive-managed
//! model in `sswd.rs`.
//!
//! Layout (LBA → media):
//! - an optional **conventional zone** of `conventional_bytes` at LBA 0,
//!   on the outermost tracks, rewritable in place (real host-managed drives
//!   have one; the drive-managed model puts its persistent cache there);
//! - then `n` **bands** of `band_bytes`, each followed on the media by a
//!   **guard gap** of `guard_bytes` that holds no data (so band `i` starts at
//!   media byte `conventional + i · (band + guard)`); `n` is as many as fit
//!   on the disk. The LBA space is the conventional zone plus the bands, so
//!   guard gaps are invisible to the host but move bands outward/inward on
//!   the platter exactly as they would on a real drive (seek distances and
//!   zone rates use the media position).
//!
//! Writes: shingled tracks can only be appended, so a write that does not
//! cover whole bands is carried out by the drive as a **band
//! read-modify-write** (RMW): read the whole band, then write the whole band
//! back (the host write completes when that band write does). We charge the
//! whole band as the HSWD paper does; physically only the tracks from the
//! first modified one to the band's end would need rewriting. Partial
//! writes to a band that arrive while its RMW is still reading join that RMW
//! (the drive merges them into the same band image); those arriving while it
//! writes wait for the next RMW of the band. A write that covers a band
//! completely goes straight to the media (no RMW): the host-managed way.
//! We chose to enforce RMW inside the model rather than reject partial
//! writes because the `DeviceModel` interface has no error path for a
//! submitted IO; the `rmw_count` counter makes any such write visible, and
//! HSWD's tests check that it stays 0 under HSWD.
//!
//! Reads, trims and flushes go to the media unchanged (trim and flush cost
//! the command overhead, as on the HDD). The HDD's own queue (NCQ, SSTF)
//! schedules everything, RMW reads and writes included.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::{Completion, DeviceIo, Op, ParamError, TimeNs};

use crate::check::{range, unknown_preset};
use crate::hdd::{HddModel, HddOverrides, HddParams};

const MIB: u64 = 1 << 20;
/// Layout granularity: band, guard and conventional sizes are multiples.
pub(crate) const SECTOR_4K: u64 = 4096;

/// Parameters of an SMR disk. Missing keys default to the `smr-7200-2tb`
/// preset.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SmrParams {
    /// Bytes of one band (multiple of 4 KiB). Default 32 MiB.
    pub band_bytes: u64,
    /// Media bytes of the guard gap after each band (multiple of 4 KiB,
    /// may be 0). Default 1 MiB.
    pub guard_bytes: u64,
    /// Rewritable zone at LBA 0 (multiple of 4 KiB). Default 0.
    pub conventional_bytes: u64,
    /// The mechanics (every key of `model = "hdd"`); `capacity_bytes` is
    /// the media size, guard gaps included.
    pub disk: HddParams,
}

impl Default for SmrParams {
    fn default() -> Self {
        SmrParams::smr_7200_2tb()
    }
}

impl SmrParams {
    pub const PRESETS: &'static [&'static str] = &["smr-7200-2tb"];
    /// The config keys of this model (besides `model` and `preset`).
    pub const KEYS: &'static [&'static str] =
        &["band_bytes", "guard_bytes", "conventional_bytes", "disk"];

    /// HSWD's NRegion: the `sata-7200-2tb` mechanics (write cache off)
    /// with 32 MiB bands (the paper's band size) and 1 MiB guard gaps
    /// (*ours*: a few shingled tracks).
    pub fn smr_7200_2tb() -> Self {
        SmrParams {
            band_bytes: 32 * MIB,
            guard_bytes: MIB,
            conventional_bytes: 0,
            disk: HddParams::sata_7200_2tb(),
        }
    }

    pub fn preset(name: &str) -> Result<Self, ParamError> {
        match name {
            "smr-7200-2tb" => Ok(Self::smr_7200_2tb()),
            _ => Err(unknown_preset(name, Self::PRESETS)),
        }
    }

    pub fn validate(&self) -> Result<(), ParamError> {
        self.disk.validate().map_err(|e| e.within("disk"))?;
        validate_layout(
            self.band_bytes,
            self.guard_bytes,
            self.conventional_bytes,
            self.disk.capacity_bytes,
        )
    }

    /// Addressable bytes: the conventional zone plus whole bands.
    pub fn capacity_bytes(&self) -> u64 {
        self.layout().capacity_bytes()
    }

    pub(crate) fn layout(&self) -> BandLayout {
        BandLayout::new(
            self.conventional_bytes,
            self.band_bytes,
            self.guard_bytes,
            self.disk.capacity_bytes,
        )
    }
}

/// Checks a band layout; shared with the drive-managed model.
pub(crate) fn validate_layout(
    band_bytes: u64,
    guard_bytes: u64,
    conventional_bytes: u64,
    media_bytes: u64,
) -> Result<(), ParamError> {
    // A band is one device IO, whose size is a u32.
    range("band_bytes", band_bytes, SECTOR_4K, 1 << 31)?;
    range("guard_bytes", guard_bytes, 0, band_bytes)?;
    for (name, v) in [
        ("band_bytes", band_bytes),
        ("guard_bytes", guard_bytes),
        ("conventional_bytes", conventional_bytes),
    ] {
        if v % SECTOR_4K != 0 {
            return Err(ParamError::new(name, v, "a multiple of 4096 bytes"));
        }
    }
    if conventional_bytes + band_bytes + guard_bytes > media_bytes {
        return Err(ParamError::new(
            "conventional_bytes",
            conventional_bytes,
            format!(
                "room for one band of {band_bytes} bytes (+ {guard_bytes} guard) on a disk of \
                 {media_bytes} bytes"
            ),
        ));
    }
    Ok(())
}

/// Config keys given next to `model = "smr"`: each replaces the preset's
/// value; `disk` is a table of HDD keys (optionally with its own `preset`)
/// applied on top of the preset's mechanics.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SmrOverrides {
    #[serde(default)]
    pub preset: Option<String>,
    #[serde(default)]
    pub band_bytes: Option<u64>,
    #[serde(default)]
    pub guard_bytes: Option<u64>,
    #[serde(default)]
    pub conventional_bytes: Option<u64>,
    #[serde(default)]
    pub disk: Option<HddOverrides>,
}

impl SmrOverrides {
    pub fn into_params(self) -> Result<SmrParams, ParamError> {
        let mut p = match &self.preset {
            Some(name) => SmrParams::preset(name)?,
            None => SmrParams::default(),
        };
        if let Some(v) = self.band_bytes {
            p.band_bytes = v;
        }
        if let Some(v) = self.guard_bytes {
            p.guard_bytes = v;
        }
        if let Some(v) = self.conventional_bytes {
            p.conventional_bytes = v;
        }
        if let Some(disk) = self.disk {
            p.disk = merge_disk(p.disk, disk).map_err(|e| e.within("disk"))?;
        }
        Ok(p)
    }
}

/// HDD keys on top of a base: a `preset` in the table replaces the base.
pub(crate) fn merge_disk(base: HddParams, keys: HddOverrides) -> Result<HddParams, ParamError> {
    let mut disk = match &keys.preset {
        Some(name) => HddParams::preset(name)?,
        None => base,
    };
    keys.apply_to(&mut disk);
    Ok(disk)
}

/// Where LBAs live on the media.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BandLayout {
    pub conventional_bytes: u64,
    pub band_bytes: u64,
    pub guard_bytes: u64,
    pub bands: u64,
}

/// One piece of an LBA range that lies in one region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// `None` for the conventional zone.
    pub band: Option<u64>,
    pub lba: u64,
    pub media: u64,
    pub len: u64,
}

impl BandLayout {
    pub fn new(conventional: u64, band: u64, guard: u64, media_bytes: u64) -> BandLayout {
        BandLayout {
            conventional_bytes: conventional,
            band_bytes: band,
            guard_bytes: guard,
            bands: media_bytes.saturating_sub(conventional) / (band + guard),
        }
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.conventional_bytes + self.bands * self.band_bytes
    }

    /// Media offset of band `b`'s first byte.
    pub fn band_media(&self, b: u64) -> u64 {
        self.conventional_bytes + b * (self.band_bytes + self.guard_bytes)
    }

    /// Splits `[lba, lba + len)` into pieces that each lie in one region.
    pub fn split(&self, lba: u64, len: u64, out: &mut Vec<Piece>) {
        out.clear();
        let end = (lba + len).min(self.capacity_bytes());
        let mut x = lba.min(end);
        while x < end {
            if x < self.conventional_bytes {
                let e = end.min(self.conventional_bytes);
                out.push(Piece {
                    band: None,
                    lba: x,
                    media: x,
                    len: e - x,
                });
                x = e;
            } else {
                let rel = x - self.conventional_bytes;
                let b = rel / self.band_bytes;
                let within = rel % self.band_bytes;
                let e = end.min(x + self.band_bytes - within);
                out.push(Piece {
                    band: Some(b),
                    lba: x,
                    media: self.band_media(b) + within,
                    len: e - x,
                });
                x = e;
            }
        }
    }
}

/// What an IO on the inner disk is for.
#[derive(Clone, Copy, Debug)]
enum InnerOp {
    /// Part of host IO `host` (its sequence number).
    Host(u64),
    RmwRead(u64),
    RmwWrite(u64),
}

/// The RMW of one band in progress.
#[derive(Debug, Default)]
struct BandRmw {
    /// Reading the band; host writes arriving now join this RMW.
    reading: bool,
    /// Host writes (sequence numbers) this RMW completes.
    joined: Vec<u64>,
    /// Host writes that arrived during the band write: the next RMW's.
    next: Vec<u64>,
}

/// A host IO in progress: its tag and the inner parts still running.
#[derive(Debug)]
struct HostIoState {
    tag: u64,
    parts: u32,
}

/// End-of-run counters (see `DeviceModel::counters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmrCounters {
    /// Band read-modify-writes completed.
    pub rmw_count: u64,
    /// Bytes read and written by those RMWs (2 × band per RMW).
    pub rmw_bytes: u64,
    /// Host write pieces carried out by an RMW (one per band touched).
    pub rmw_host_writes: u64,
    /// Host write pieces that covered a whole band (no RMW).
    pub full_band_writes: u64,
}

/// An SMR disk (see the module documentation).
pub struct SmrModel {
    inner: HddModel,
    layout: BandLayout,
    now_ns: TimeNs,
    next_seq: u64,
    next_inner_tag: u64,
    inner_ops: HashMap<u64, InnerOp>,
    hosts: HashMap<u64, HostIoState>,
    rmws: HashMap<u64, BandRmw>,
    /// Host IOs done and not yet reported: (done, seq, tag).
    ready: VecDeque<(TimeNs, u64, u64)>,
    in_flight: usize,
    pieces: Vec<Piece>,
    buffer: Vec<Completion>,
    counters: SmrCounters,
}

impl SmrModel {
    pub fn new(params: &SmrParams, seed: u64) -> Result<Self, ParamError> {
        params.validate()?;
        Ok(SmrModel {
            inner: HddModel::new(&params.disk, seed)?,
            layout: params.layout(),
            now_ns: 0,
            next_seq: 0,
            next_inner_tag: 0,
            inner_ops: HashMap::new(),
            hosts: HashMap::new(),
            rmws: HashMap::new(),
            ready: VecDeque::new(),
            in_flight: 0,
            pieces: Vec::new(),
            buffer: Vec::new(),
            counters: SmrCounters::default(),
        })
    }

    pub fn band_bytes(&self) -> u64 {
        self.layout.band_bytes
    }

    pub fn bands(&self) -> u64 {
        self.layout.bands
    }

    pub fn smr_counters(&self) -> SmrCounters {
        self.counters
    }

    /// The mechanics, for calibration (seek curve, zone rates).
    pub fn disk(&self) -> &HddModel {
        &self.inner
    }

    fn inner_submit(&mut self, t: TimeNs, op: Op, media: u64, len: u64, what: InnerOp) {
        let tag = self.next_inner_tag;
        self.next_inner_tag += 1;
        self.inner_ops.insert(tag, what);
        self.inner.submit(
            t,
            DeviceIo {
                tag,
                op,
                offset_bytes: media,
                size_bytes: len as u32,
            },
        );
    }

    fn start_rmw(&mut self, t: TimeNs, band: u64, joined: Vec<u64>) {
        self.rmws.insert(
            band,
            BandRmw {
                reading: true,
                joined,
                next: Vec::new(),
            },
        );
        let media = self.layout.band_media(band);
        let len = self.layout.band_bytes;
        self.inner_submit(t, Op::Read, media, len, InnerOp::RmwRead(band));
    }

    fn part_done(&mut self, t: TimeNs, host: u64) {
        let Some(h) = self.hosts.get_mut(&host) else {
            return;
        };
        h.parts -= 1;
        if h.parts == 0 {
            let tag = h.tag;
            self.hosts.remove(&host);
            self.ready.push_back((t, host, tag));
        }
    }

    fn inner_done(&mut self, c: Completion) {
        let t = c.done_ns;
        let Some(what) = self.inner_ops.remove(&c.tag) else {
            return;
        };
        match what {
            InnerOp::Host(host) => self.part_done(t, host),
            InnerOp::RmwRead(band) => {
                if let Some(r) = self.rmws.get_mut(&band) {
                    r.reading = false;
                }
                let media = self.layout.band_media(band);
                let len = self.layout.band_bytes;
                self.inner_submit(t, Op::Write, media, len, InnerOp::RmwWrite(band));
            }
            InnerOp::RmwWrite(band) => {
                let r = self.rmws.remove(&band).unwrap_or_default();
                self.counters.rmw_count += 1;
                self.counters.rmw_bytes += 2 * self.layout.band_bytes;
                for host in r.joined {
                    self.part_done(t, host);
                }
                if !r.next.is_empty() {
                    self.start_rmw(t, band, r.next);
                }
            }
        }
    }

    /// Processes the inner disk's events up to `now`, one instant at a
    /// time, so follow-up IOs (an RMW's write) are submitted at the moment
    /// their predecessor finished.
    fn settle(&mut self, now_ns: TimeNs) {
        while let Some(t) = self.inner.next_event_ns().filter(|&t| t <= now_ns) {
            let mut buffer = std::mem::take(&mut self.buffer);
            buffer.clear();
            self.inner.advance(t, &mut buffer);
            for c in buffer.drain(..) {
                self.inner_done(c);
            }
            self.buffer = buffer;
        }
    }
}

/// The names of the counters this model reports (`DeviceModel::counters`):
/// experiments look values up by these constants, so a renamed counter is a
/// compile error, not a silent "-".
pub mod counter {
    pub const RMW_COUNT: &str = "rmw_count";
    pub const RMW_BYTES: &str = "rmw_bytes";
    pub const RMW_HOST_WRITES: &str = "rmw_host_writes";
    pub const FULL_BAND_WRITES: &str = "full_band_writes";

    /// Every name above, in the order `counters()` reports them.
    pub const ALL: &[&str] = &[RMW_COUNT, RMW_BYTES, RMW_HOST_WRITES, FULL_BAND_WRITES];
}

impl DeviceModel for SmrModel {
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight += 1;
        if matches!(io.op, Op::Trim | Op::Flush) || io.size_bytes == 0 {
            self.hosts.insert(
                seq,
                HostIoState {
                    tag: io.tag,
                    parts: 1,
                },
            );
            let op = if io.size_bytes == 0 { Op::Flush } else { io.op };
            let what = InnerOp::Host(seq);
            self.inner_submit(now_ns, op, 0, 0, what);
            return;
        }
        let mut pieces = std::mem::take(&mut self.pieces);
        self.layout
            .split(io.offset_bytes, io.size_bytes as u64, &mut pieces);
        if pieces.is_empty() {
            // Beyond the capacity (the executor checks ranges): the
            // command overhead only.
            self.hosts.insert(
                seq,
                HostIoState {
                    tag: io.tag,
                    parts: 1,
                },
            );
            self.inner_submit(now_ns, Op::Flush, 0, 0, InnerOp::Host(seq));
            self.pieces = pieces;
            return;
        }
        self.hosts.insert(
            seq,
            HostIoState {
                tag: io.tag,
                parts: pieces.len() as u32,
            },
        );
        for p in &pieces {
            let whole_band = p.band.is_some() && p.len == self.layout.band_bytes;
            match (io.op, p.band) {
                (Op::Write, Some(band)) if !whole_band => {
                    self.counters.rmw_host_writes += 1;
                    match self.rmws.get_mut(&band) {
                        Some(r) if r.reading => r.joined.push(seq),
                        Some(r) => r.next.push(seq),
                        None => self.start_rmw(now_ns, band, vec![seq]),
                    }
                }
                _ => {
                    if io.op == Op::Write {
                        self.counters.full_band_writes += u64::from(whole_band);
                    }
                    self.inner_submit(now_ns, io.op, p.media, p.len, InnerOp::Host(seq));
                }
            }
        }
        self.pieces = pieces;
    }

    fn next_event_ns(&self) -> Option<TimeNs> {
        let ready = self.ready.iter().map(|r| r.0).min();
        match (ready, self.inner.next_event_ns()) {
            (Some(r), Some(i)) => Some(r.min(i)),
            (r, i) => r.or(i),
        }
    }

    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        self.in_flight -= self.ready.len();
        self.ready.make_contiguous().sort_unstable();
        done.extend(
            self.ready
                .drain(..)
                .map(|(done_ns, _, tag)| Completion { tag, done_ns }),
        );
    }

    fn capacity_bytes(&self) -> u64 {
        self.layout.capacity_bytes()
    }

    fn state(&self) -> DeviceState {
        self.inner.state()
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let c = self.counters;
        vec![
            (counter::RMW_COUNT, c.rmw_count as f64),
            (counter::RMW_BYTES, c.rmw_bytes as f64),
            (counter::RMW_HOST_WRITES, c.rmw_host_writes as f64),
            (counter::FULL_BAND_WRITES, c.full_band_writes as f64),
        ]
    }
}
