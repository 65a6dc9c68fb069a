//! The two tenant workloads of the busy-rate QoS experiments (spec/qos.md):
//! *file-share* (mixed small sizes, 70 % reads, offsets skewed toward a few
//! hot zones) and *backup* (128 KiB, 50:50, offsets inside two 30 GiB zones
//! at 0 and 300 GiB of the region). Both are "zoned" streams: each request
//! picks a zone by weight, then an aligned offset inside it (uniformly, or
//! at the zone's sequential cursor).

use serde::Deserialize;

use super::common::show_bytes;
use super::common::{
    Alias, ArrivalKind, Arrivals, Chance, GIB, KIB, Limit, Rng, SizeMix, SizeSampler,
    check_alignment, ensure, ensure_positive, ensure_probability, positions,
};
use super::params::{KvList, KvParams, ParamInfo, param, show_opt};
use super::synthetic::DEFAULT_COUNT;
use crate::error::Result;
use crate::reader::RecordStream;
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileShareParams {
    pub count: Option<u64>,
    pub duration_s: Option<f64>,
    pub arrival: ArrivalKind,
    /// Target request rate of the tenant.
    pub rate_iops: f64,
    pub read_ratio: f64,
    pub size_bytes: SizeMix,
    pub alignment_bytes: u64,
    pub region_offset_bytes: u64,
    pub region_size_bytes: u64,
    /// Hot zones, one placed at random inside each of `hot_zones` equal
    /// slices of the region (so they never overlap).
    pub hot_zones: u32,
    pub hot_zone_size_bytes: u64,
    /// Share of requests that go to the hot zones (equally); the rest are
    /// uniform over the whole region.
    pub hot_share: f64,
}

impl Default for FileShareParams {
    fn default() -> Self {
        FileShareParams {
            count: None,
            duration_s: None,
            arrival: ArrivalKind::Poisson,
            rate_iops: 100.0,
            read_ratio: 0.7,
            size_bytes: SizeMix::weighted(&[
                (4 * KIB as u32, 8.0),
                (8 * KIB as u32, 4.0),
                (16 * KIB as u32, 2.0),
                (32 * KIB as u32, 1.0),
                (64 * KIB as u32, 1.0),
            ]),
            alignment_bytes: 4096,
            region_offset_bytes: 0,
            region_size_bytes: 500 * GIB,
            hot_zones: 4,
            hot_zone_size_bytes: GIB,
            hot_share: 0.8,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackupParams {
    pub count: Option<u64>,
    pub duration_s: Option<f64>,
    pub arrival: ArrivalKind,
    pub rate_iops: f64,
    pub read_ratio: f64,
    pub size_bytes: SizeMix,
    pub alignment_bytes: u64,
    pub region_offset_bytes: u64,
    pub region_size_bytes: u64,
    /// Zone starts, relative to the region.
    pub zone_offsets_bytes: Vec<u64>,
    pub zone_size_bytes: u64,
    /// Sequential cursors per zone instead of uniform offsets.
    pub sequential: bool,
}

impl Default for BackupParams {
    fn default() -> Self {
        BackupParams {
            count: None,
            duration_s: None,
            arrival: ArrivalKind::Poisson,
            rate_iops: 30.0,
            read_ratio: 0.5,
            size_bytes: SizeMix::fixed(128 * KIB as u32),
            alignment_bytes: 4096,
            region_offset_bytes: 0,
            region_size_bytes: 500 * GIB,
            zone_offsets_bytes: vec![0, 300 * GIB],
            zone_size_bytes: 30 * GIB,
            sequential: false,
        }
    }
}

const TENANT_COMMON: [ParamInfo; 6] = [
    param(
        "count",
        "records",
        "-",
        "records to generate (1000000 when neither count nor duration_s is set)",
    ),
    param("duration_s", "s", "-", "stop at this time"),
    param("arrival", "fixed|poisson", "poisson", "arrival process"),
    param(
        "alignment_bytes",
        "bytes",
        "4k",
        "offsets are multiples of this",
    ),
    param(
        "region_offset_bytes",
        "bytes",
        "0",
        "start of the tenant's region",
    ),
    param(
        "region_size_bytes",
        "bytes",
        "500g",
        "size of the tenant's region",
    ),
];

pub(crate) const FILE_SHARE_PARAMS: &[ParamInfo] = &[
    TENANT_COMMON[0],
    TENANT_COMMON[1],
    TENANT_COMMON[2],
    param("rate_iops", "requests/s", "100", "target request rate"),
    param("read_ratio", "0..1", "0.7", "share of reads"),
    param(
        "size_bytes",
        "bytes or SIZE:WEIGHT,...",
        "4k:8,8k:4,16k:2,32k:1,64k:1",
        "request sizes (skewed small)",
    ),
    TENANT_COMMON[3],
    TENANT_COMMON[4],
    TENANT_COMMON[5],
    param(
        "hot_zones",
        "count",
        "4",
        "hot zones, one in each equal slice of the region",
    ),
    param(
        "hot_zone_size_bytes",
        "bytes",
        "1g",
        "size of each hot zone",
    ),
    param(
        "hot_share",
        "0..1",
        "0.8",
        "share of requests to the hot zones (rest uniform over the region)",
    ),
];

pub(crate) const BACKUP_PARAMS: &[ParamInfo] = &[
    TENANT_COMMON[0],
    TENANT_COMMON[1],
    TENANT_COMMON[2],
    param("rate_iops", "requests/s", "30", "target request rate"),
    param("read_ratio", "0..1", "0.5", "share of reads"),
    param(
        "size_bytes",
        "bytes or SIZE:WEIGHT,...",
        "128k",
        "request sizes",
    ),
    TENANT_COMMON[3],
    TENANT_COMMON[4],
    TENANT_COMMON[5],
    param(
        "zone_offsets_bytes",
        "bytes,...",
        "0,300g",
        "zone starts relative to the region",
    ),
    param("zone_size_bytes", "bytes", "30g", "size of each zone"),
    param(
        "sequential",
        "bool",
        "false",
        "sequential cursor per zone instead of uniform offsets",
    ),
];

impl FileShareParams {
    pub(crate) fn to_kv(&self) -> KvList {
        vec![
            ("count", show_opt(&self.count)),
            ("duration_s", show_opt(&self.duration_s)),
            ("arrival", self.arrival.to_string()),
            ("rate_iops", self.rate_iops.to_string()),
            ("read_ratio", self.read_ratio.to_string()),
            ("size_bytes", self.size_bytes.to_string()),
            ("alignment_bytes", show_bytes(self.alignment_bytes)),
            ("region_offset_bytes", show_bytes(self.region_offset_bytes)),
            ("region_size_bytes", show_bytes(self.region_size_bytes)),
            ("hot_zones", self.hot_zones.to_string()),
            ("hot_zone_size_bytes", show_bytes(self.hot_zone_size_bytes)),
            ("hot_share", self.hot_share.to_string()),
        ]
    }

    pub(crate) fn apply_kv(&mut self, kv: &KvParams, generator: &str) -> Result<()> {
        let r = kv.reader(generator);
        r.opt_u64("count", &mut self.count)?;
        r.opt_f64("duration_s", &mut self.duration_s)?;
        r.choice("arrival", &mut self.arrival)?;
        r.f64("rate_iops", &mut self.rate_iops)?;
        r.f64("read_ratio", &mut self.read_ratio)?;
        r.sizes("size_bytes", &mut self.size_bytes)?;
        r.bytes("alignment_bytes", &mut self.alignment_bytes)?;
        r.bytes("region_offset_bytes", &mut self.region_offset_bytes)?;
        r.bytes("region_size_bytes", &mut self.region_size_bytes)?;
        r.u32("hot_zones", &mut self.hot_zones)?;
        r.bytes("hot_zone_size_bytes", &mut self.hot_zone_size_bytes)?;
        r.f64("hot_share", &mut self.hot_share)
    }
}

impl BackupParams {
    pub(crate) fn to_kv(&self) -> KvList {
        let zones: Vec<String> = self
            .zone_offsets_bytes
            .iter()
            .map(|&z| show_bytes(z))
            .collect();
        vec![
            ("count", show_opt(&self.count)),
            ("duration_s", show_opt(&self.duration_s)),
            ("arrival", self.arrival.to_string()),
            ("rate_iops", self.rate_iops.to_string()),
            ("read_ratio", self.read_ratio.to_string()),
            ("size_bytes", self.size_bytes.to_string()),
            ("alignment_bytes", show_bytes(self.alignment_bytes)),
            ("region_offset_bytes", show_bytes(self.region_offset_bytes)),
            ("region_size_bytes", show_bytes(self.region_size_bytes)),
            ("zone_offsets_bytes", zones.join(",")),
            ("zone_size_bytes", show_bytes(self.zone_size_bytes)),
            ("sequential", self.sequential.to_string()),
        ]
    }

    pub(crate) fn apply_kv(&mut self, kv: &KvParams, generator: &str) -> Result<()> {
        let r = kv.reader(generator);
        r.opt_u64("count", &mut self.count)?;
        r.opt_f64("duration_s", &mut self.duration_s)?;
        r.choice("arrival", &mut self.arrival)?;
        r.f64("rate_iops", &mut self.rate_iops)?;
        r.f64("read_ratio", &mut self.read_ratio)?;
        r.sizes("size_bytes", &mut self.size_bytes)?;
        r.bytes("alignment_bytes", &mut self.alignment_bytes)?;
        r.bytes("region_offset_bytes", &mut self.region_offset_bytes)?;
        r.bytes("region_size_bytes", &mut self.region_size_bytes)?;
        r.bytes_list("zone_offsets_bytes", &mut self.zone_offsets_bytes)?;
        r.bytes("zone_size_bytes", &mut self.zone_size_bytes)?;
        r.bool("sequential", &mut self.sequential)
    }
}

/// An addressable zone: absolute start, aligned positions, sequential cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    pub offset_bytes: u64,
    pub size_bytes: u64,
    positions: u64,
    cursor_bytes: u64,
}

/// A tenant stream over weighted zones (file-share or backup).
pub struct ZonedGen {
    rng: Rng,
    arrivals: Arrivals,
    limit: Limit,
    devices: DeviceTable,
    read: Chance,
    sizes: SizeSampler,
    zones: Vec<Zone>,
    pick: Option<Alias>,
    sequential: bool,
    alignment_bytes: u64,
}

struct Shared<'a> {
    count: Option<u64>,
    duration_s: Option<f64>,
    arrival: ArrivalKind,
    rate_iops: f64,
    read_ratio: f64,
    size_bytes: &'a SizeMix,
    alignment_bytes: u64,
    region_offset_bytes: u64,
    region_size_bytes: u64,
}

impl Shared<'_> {
    fn validate(&self) -> Result<()> {
        ensure_positive("rate_iops", self.rate_iops)?;
        ensure_probability("read_ratio", self.read_ratio)?;
        self.size_bytes.validate("size_bytes")?;
        check_alignment(self.alignment_bytes)?;
        ensure(self.region_offset_bytes % self.alignment_bytes == 0, || {
            "`region_offset_bytes` must be a multiple of `alignment_bytes`".into()
        })?;
        ensure(
            self.region_offset_bytes
                .checked_add(self.region_size_bytes)
                .is_some(),
            || "the region ends beyond 2^64 bytes".into(),
        )
    }
}

impl ZonedGen {
    pub fn file_share(p: &FileShareParams, seed: u64) -> Result<ZonedGen> {
        let shared = Shared {
            count: p.count,
            duration_s: p.duration_s,
            arrival: p.arrival,
            rate_iops: p.rate_iops,
            read_ratio: p.read_ratio,
            size_bytes: &p.size_bytes,
            alignment_bytes: p.alignment_bytes,
            region_offset_bytes: p.region_offset_bytes,
            region_size_bytes: p.region_size_bytes,
        };
        shared.validate()?;
        ensure_probability("hot_share", p.hot_share)?;
        ensure(p.hot_zones <= 1 << 16, || {
            format!("`hot_zones` must be at most 65536, got {}", p.hot_zones)
        })?;
        ensure(p.hot_zones >= 1 || p.hot_share == 0.0, || {
            "`hot_zones` must be at least 1 when `hot_share` > 0".into()
        })?;
        let align = p.alignment_bytes;
        let mut zones = Vec::new();
        let mut weights = Vec::new();
        if p.hot_zones > 0 {
            let slice = p.region_size_bytes / p.hot_zones as u64 / align * align;
            ensure(
                slice >= p.hot_zone_size_bytes && p.hot_zone_size_bytes % align == 0,
                || {
                    format!(
                        "{} hot zones of {} bytes (a multiple of alignment_bytes) do not fit in a region of {} bytes",
                        p.hot_zones, p.hot_zone_size_bytes, p.region_size_bytes
                    )
                },
            )?;
            let mut place = Rng::new(seed, 3);
            for z in 0..p.hot_zones as u64 {
                let slack = (slice - p.hot_zone_size_bytes) / align + 1;
                let start = p.region_offset_bytes + z * slice + place.below(slack) * align;
                zones.push(Self::zone(
                    start,
                    p.hot_zone_size_bytes,
                    &p.size_bytes,
                    align,
                )?);
                weights.push(p.hot_share / p.hot_zones as f64);
            }
        }
        zones.push(Self::zone(
            p.region_offset_bytes,
            p.region_size_bytes,
            &p.size_bytes,
            align,
        )?);
        weights.push(1.0 - p.hot_share);
        Self::build(&shared, zones, &weights, false, seed)
    }

    pub fn backup(p: &BackupParams, seed: u64) -> Result<ZonedGen> {
        let shared = Shared {
            count: p.count,
            duration_s: p.duration_s,
            arrival: p.arrival,
            rate_iops: p.rate_iops,
            read_ratio: p.read_ratio,
            size_bytes: &p.size_bytes,
            alignment_bytes: p.alignment_bytes,
            region_offset_bytes: p.region_offset_bytes,
            region_size_bytes: p.region_size_bytes,
        };
        shared.validate()?;
        ensure(!p.zone_offsets_bytes.is_empty(), || {
            "`zone_offsets_bytes` lists no zones".into()
        })?;
        let mut zones = Vec::new();
        for &offset in &p.zone_offsets_bytes {
            ensure(
                offset % p.alignment_bytes == 0
                    && offset
                        .checked_add(p.zone_size_bytes)
                        .is_some_and(|end| end <= p.region_size_bytes),
                || {
                    format!(
                        "zone at {offset} (+{} bytes) must be aligned and inside the region ({} bytes)",
                        p.zone_size_bytes, p.region_size_bytes
                    )
                },
            )?;
            zones.push(Self::zone(
                p.region_offset_bytes + offset,
                p.zone_size_bytes,
                &p.size_bytes,
                p.alignment_bytes,
            )?);
        }
        let weights = vec![1.0; zones.len()];
        Self::build(&shared, zones, &weights, p.sequential, seed)
    }

    fn zone(offset_bytes: u64, size_bytes: u64, sizes: &SizeMix, align: u64) -> Result<Zone> {
        Ok(Zone {
            offset_bytes,
            size_bytes,
            positions: positions(size_bytes, sizes.max_bytes(), align, "a zone")?,
            cursor_bytes: offset_bytes,
        })
    }

    fn build(
        shared: &Shared,
        zones: Vec<Zone>,
        weights: &[f64],
        sequential: bool,
        seed: u64,
    ) -> Result<ZonedGen> {
        let positive: Vec<f64> = weights.iter().map(|w| w.max(0.0)).collect();
        Ok(ZonedGen {
            rng: Rng::new(seed, 1),
            arrivals: Arrivals::new(shared.arrival, shared.rate_iops),
            limit: Limit::new(shared.count, shared.duration_s, DEFAULT_COUNT)?,
            devices: ["dev0".to_owned()].into_iter().collect(),
            read: Chance::new(shared.read_ratio),
            sizes: SizeSampler::new(shared.size_bytes),
            pick: (zones.len() > 1).then(|| Alias::new(&positive)),
            zones,
            sequential,
            alignment_bytes: shared.alignment_bytes,
        })
    }

    /// The zones requests are drawn from (file-share: the hot zones first,
    /// then the whole region).
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }
}

impl RecordStream for ZonedGen {
    #[inline]
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        let rng = &mut self.rng;
        let time_ns = self.arrivals.next_ns(rng);
        if !self.limit.take(time_ns) {
            return Ok(None);
        }
        let op = if self.read.draw(rng) {
            Op::Read
        } else {
            Op::Write
        };
        let size_bytes = self.sizes.sample(rng);
        let zone = match &self.pick {
            None => &mut self.zones[0],
            Some(alias) => &mut self.zones[alias.sample(rng)],
        };
        let offset_bytes = if self.sequential {
            if zone.cursor_bytes + size_bytes as u64 > zone.offset_bytes + zone.size_bytes {
                zone.cursor_bytes = zone.offset_bytes;
            }
            let offset = zone.cursor_bytes;
            zone.cursor_bytes +=
                (size_bytes as u64).div_ceil(self.alignment_bytes) * self.alignment_bytes;
            offset
        } else {
            zone.offset_bytes + rng.below(zone.positions) * self.alignment_bytes
        };
        Ok(Some(IoRecord {
            time_ns,
            offset_bytes,
            size_bytes,
            device_id: 0,
            op,
            response_ns: None,
        }))
    }

    fn devices(&self) -> &DeviceTable {
        &self.devices
    }

    fn time_base(&self) -> TimeBase {
        TimeBase::Relative
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::testing::{check_invariants, collect};
    use crate::stats;

    #[test]
    fn file_share_mix_and_hot_zones() {
        let p = FileShareParams {
            count: Some(200_000),
            region_offset_bytes: 1500 * GIB,
            ..FileShareParams::default()
        };
        let zoned = ZonedGen::file_share(&p, 4).unwrap();
        let hot: Vec<Zone> = zoned.zones()[..4].to_vec();
        let recs = collect(&mut ZonedGen::file_share(&p, 4).unwrap());
        assert_eq!(recs, collect(&mut ZonedGen::file_share(&p, 4).unwrap()));
        check_invariants(&recs, 1500 * GIB, 500 * GIB, 4096, 1);
        let s = stats::compute(&mut ZonedGen::file_share(&p, 4).unwrap()).unwrap();
        let n = s.requests as f64;
        assert!((s.reads as f64 / n - 0.7).abs() < 5.0 * (0.21 / n).sqrt());
        // Mean size: (8*4 + 4*8 + 2*16 + 32 + 64) / 16 KiB = 12 KiB; sd ~ 15.2 KiB.
        let mean = (s.read_bytes + s.write_bytes) as f64 / n;
        assert!((mean - 12288.0).abs() < 5.0 * 15_600.0 / n.sqrt(), "{mean}");
        assert!(recs.iter().all(|r| (4096..=65536).contains(&r.size_bytes)));
        // Hot zones do not overlap; ~80 % of IOs plus the background's
        // chance (4 GiB of 500 GiB) land in them.
        for w in hot.windows(2) {
            assert!(w[0].offset_bytes + w[0].size_bytes <= w[1].offset_bytes);
        }
        let in_hot = recs
            .iter()
            .filter(|r| {
                hot.iter().any(|z| {
                    r.offset_bytes >= z.offset_bytes
                        && r.offset_bytes < z.offset_bytes + z.size_bytes
                })
            })
            .count() as f64;
        let expected = 0.8 + 0.2 * 4.0 / 500.0;
        assert!((in_hot / n - expected).abs() < 5.0 * (expected * (1.0 - expected) / n).sqrt());
    }

    #[test]
    fn backup_stays_in_its_two_zones() {
        for sequential in [false, true] {
            let p = BackupParams {
                count: Some(100_000),
                sequential,
                ..BackupParams::default()
            };
            let recs = collect(&mut ZonedGen::backup(&p, 8).unwrap());
            check_invariants(&recs, 0, 500 * GIB, 4096, 1);
            assert!(recs.iter().all(|r| r.size_bytes == 131_072));
            assert!(recs.iter().all(|r| {
                let (a, b) = (r.offset_bytes, r.end_bytes());
                (b <= 30 * GIB) || (a >= 300 * GIB && b <= 330 * GIB)
            }));
            let reads = recs.iter().filter(|r| r.op == Op::Read).count() as f64;
            assert!((reads / 1e5 - 0.5).abs() < 5.0 * (0.25f64 / 1e5).sqrt());
            let low = recs.iter().filter(|r| r.offset_bytes < 30 * GIB).count() as f64;
            assert!((low / 1e5 - 0.5).abs() < 5.0 * (0.25f64 / 1e5).sqrt());
        }
    }

    #[test]
    fn bad_zones_are_errors() {
        let p = BackupParams {
            zone_offsets_bytes: vec![490 * GIB],
            ..BackupParams::default()
        };
        assert!(
            ZonedGen::backup(&p, 0)
                .err()
                .unwrap()
                .to_string()
                .contains("inside the region")
        );
        let p = FileShareParams {
            hot_zones: 1000,
            ..FileShareParams::default()
        };
        assert!(
            ZonedGen::file_share(&p, 0)
                .err()
                .unwrap()
                .to_string()
                .contains("do not fit")
        );
    }
}
