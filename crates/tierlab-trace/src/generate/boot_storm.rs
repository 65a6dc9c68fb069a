//! Boot storm: many VMs booting at nearly the same time, each reading its
//! boot image mostly sequentially (with some random reads inside the image
//! and some small writes to its scratch area), as in the VDI morning peak.
//!
//! VM v starts at a uniform random time in `[0, start_window_s)` and issues
//! IOs as its own Poisson (or fixed-rate) process at `vm_rate_iops` until its
//! sequential read cursor has read the whole image. The VMs' streams are
//! merged in time order with a heap: memory grows with `vms`, never with the
//! number of records.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::Deserialize;

use super::common::show_bytes;
use super::common::{
    ArrivalKind, Chance, GIB, KIB, Limit, MIB, NS_PER_S, Rng, SizeMix, SizeSampler,
    check_alignment, ensure, ensure_positive, ensure_probability, positions,
};
use super::params::{KvList, KvParams, ParamInfo, param, show_opt};
use crate::error::Result;
use crate::reader::RecordStream;
use crate::record::{DeviceTable, IoRecord, Op, TimeBase};

/// Where VMs live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VmLayout {
    /// One device per VM (vm0000, vm0001, ...), each VM's area at offset 0.
    Devices,
    /// One LUN (lun0); VM v's area starts at `v * vm_stride_bytes`.
    Lun,
}

impl std::str::FromStr for VmLayout {
    type Err = crate::ParamError;
    fn from_str(s: &str) -> std::result::Result<Self, crate::ParamError> {
        match s {
            "devices" => Ok(Self::Devices),
            "lun" => Ok(Self::Lun),
            _ => Err(crate::ParamError::unknown_name("", s, ["devices", "lun"])),
        }
    }
}

impl std::fmt::Display for VmLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VmLayout::Devices => "devices",
            VmLayout::Lun => "lun",
        })
    }
}

/// Most VMs a boot storm will simulate.
pub const MAX_VMS: u32 = 1 << 20;

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BootStormParams {
    pub vms: u32,
    pub layout: VmLayout,
    /// Lun layout: distance between VM areas (bytes).
    pub vm_stride_bytes: u64,
    /// Bytes each VM reads sequentially to boot.
    pub image_size_bytes: u64,
    /// Writable area after the image, where the VM's writes land (bytes).
    pub scratch_size_bytes: u64,
    /// VM start times are uniform in `[0, start_window_s)`.
    pub start_window_s: f64,
    /// Requests per second of one booting VM.
    pub vm_rate_iops: f64,
    pub arrival: ArrivalKind,
    pub read_size_bytes: SizeMix,
    pub write_size_bytes: SizeMix,
    /// Share of a VM's IOs that are writes.
    pub write_ratio: f64,
    /// Share of reads at a random place in the image instead of the cursor.
    pub random_read_share: f64,
    pub alignment_bytes: u64,
    pub count: Option<u64>,
    pub duration_s: Option<f64>,
}

impl Default for BootStormParams {
    fn default() -> Self {
        BootStormParams {
            vms: 100,
            layout: VmLayout::Devices,
            vm_stride_bytes: 2 * GIB,
            image_size_bytes: 300 * MIB,
            scratch_size_bytes: GIB,
            start_window_s: 60.0,
            vm_rate_iops: 200.0,
            arrival: ArrivalKind::Poisson,
            read_size_bytes: SizeMix::weighted(&[
                (4 * KIB as u32, 1.0),
                (16 * KIB as u32, 1.0),
                (64 * KIB as u32, 2.0),
            ]),
            write_size_bytes: SizeMix::fixed(4 * KIB as u32),
            write_ratio: 0.1,
            random_read_share: 0.1,
            alignment_bytes: 4096,
            count: None,
            duration_s: None,
        }
    }
}

pub(crate) const PARAMS: &[ParamInfo] = &[
    param("vms", "count", "100", "booting VMs"),
    param(
        "layout",
        "devices|lun",
        "devices",
        "one device per VM, or VM areas on one LUN",
    ),
    param(
        "vm_stride_bytes",
        "bytes",
        "2g",
        "lun layout: distance between VM areas",
    ),
    param(
        "image_size_bytes",
        "bytes",
        "300m",
        "boot image each VM reads sequentially",
    ),
    param(
        "scratch_size_bytes",
        "bytes",
        "1g",
        "writable area after the image (writes land here)",
    ),
    param(
        "start_window_s",
        "s",
        "60",
        "VM start times are uniform in [0, start_window_s)",
    ),
    param(
        "vm_rate_iops",
        "requests/s",
        "200",
        "IO rate of one booting VM",
    ),
    param(
        "arrival",
        "fixed|poisson",
        "poisson",
        "arrival process of each VM",
    ),
    param(
        "read_size_bytes",
        "bytes or SIZE:WEIGHT,...",
        "4k:1,16k:1,64k:2",
        "read sizes",
    ),
    param(
        "write_size_bytes",
        "bytes or SIZE:WEIGHT,...",
        "4k",
        "write sizes",
    ),
    param("write_ratio", "0..1", "0.1", "share of writes"),
    param(
        "random_read_share",
        "0..1",
        "0.1",
        "share of reads at a random place in the image",
    ),
    param(
        "alignment_bytes",
        "bytes",
        "4k",
        "offsets are multiples of this",
    ),
    param("count", "records", "-", "stop after this many records"),
    param("duration_s", "s", "-", "stop at this time"),
];

impl BootStormParams {
    pub(crate) fn to_kv(&self) -> KvList {
        vec![
            ("vms", self.vms.to_string()),
            ("layout", self.layout.to_string()),
            ("vm_stride_bytes", show_bytes(self.vm_stride_bytes)),
            ("image_size_bytes", show_bytes(self.image_size_bytes)),
            ("scratch_size_bytes", show_bytes(self.scratch_size_bytes)),
            ("start_window_s", self.start_window_s.to_string()),
            ("vm_rate_iops", self.vm_rate_iops.to_string()),
            ("arrival", self.arrival.to_string()),
            ("read_size_bytes", self.read_size_bytes.to_string()),
            ("write_size_bytes", self.write_size_bytes.to_string()),
            ("write_ratio", self.write_ratio.to_string()),
            ("random_read_share", self.random_read_share.to_string()),
            ("alignment_bytes", show_bytes(self.alignment_bytes)),
            ("count", show_opt(&self.count)),
            ("duration_s", show_opt(&self.duration_s)),
        ]
    }

    pub(crate) fn apply_kv(&mut self, kv: &KvParams, generator: &str) -> Result<()> {
        let r = kv.reader(generator);
        r.u32("vms", &mut self.vms)?;
        r.choice("layout", &mut self.layout)?;
        r.bytes("vm_stride_bytes", &mut self.vm_stride_bytes)?;
        r.bytes("image_size_bytes", &mut self.image_size_bytes)?;
        r.bytes("scratch_size_bytes", &mut self.scratch_size_bytes)?;
        r.f64("start_window_s", &mut self.start_window_s)?;
        r.f64("vm_rate_iops", &mut self.vm_rate_iops)?;
        r.choice("arrival", &mut self.arrival)?;
        r.sizes("read_size_bytes", &mut self.read_size_bytes)?;
        r.sizes("write_size_bytes", &mut self.write_size_bytes)?;
        r.f64("write_ratio", &mut self.write_ratio)?;
        r.f64("random_read_share", &mut self.random_read_share)?;
        r.bytes("alignment_bytes", &mut self.alignment_bytes)?;
        r.opt_u64("count", &mut self.count)?;
        r.opt_f64("duration_s", &mut self.duration_s)
    }

    pub fn validate(&self) -> Result<()> {
        // Memory grows with the VM count (one heap entry and name each).
        ensure((1..=MAX_VMS).contains(&self.vms), || {
            format!("`vms` must be between 1 and {MAX_VMS}, got {}", self.vms)
        })?;
        check_alignment(self.alignment_bytes)?;
        self.read_size_bytes.validate("read_size_bytes")?;
        self.write_size_bytes.validate("write_size_bytes")?;
        ensure(
            self.image_size_bytes % self.alignment_bytes == 0 && self.image_size_bytes > 0,
            || {
                format!(
                    "`image_size_bytes` ({}) must be a positive multiple of `alignment_bytes` ({})",
                    self.image_size_bytes, self.alignment_bytes
                )
            },
        )?;
        positions(
            self.image_size_bytes,
            self.read_size_bytes.max_bytes(),
            self.alignment_bytes,
            "`image_size_bytes`",
        )?;
        ensure_probability("write_ratio", self.write_ratio)?;
        ensure(self.write_ratio < 1.0, || {
            "`write_ratio` must be below 1 (a boot must read its image)".into()
        })?;
        if self.write_ratio > 0.0 {
            positions(
                self.scratch_size_bytes,
                self.write_size_bytes.max_bytes(),
                self.alignment_bytes,
                "`scratch_size_bytes`",
            )?;
        }
        ensure_probability("random_read_share", self.random_read_share)?;
        ensure(self.random_read_share < 1.0, || {
            "`random_read_share` must be below 1".into()
        })?;
        ensure(
            self.start_window_s.is_finite() && self.start_window_s >= 0.0,
            || format!("`start_window_s` must be >= 0, got {}", self.start_window_s),
        )?;
        ensure_positive("vm_rate_iops", self.vm_rate_iops)?;
        if self.layout == VmLayout::Lun {
            let area = self.image_size_bytes + self.scratch_size_bytes;
            ensure(
                self.vm_stride_bytes >= area && self.vm_stride_bytes % self.alignment_bytes == 0,
                || {
                    format!(
                        "`vm_stride_bytes` ({}) must be a multiple of `alignment_bytes` and hold image + scratch ({area} bytes)",
                        self.vm_stride_bytes
                    )
                },
            )?;
            ensure(
                (self.vms as u64)
                    .checked_mul(self.vm_stride_bytes)
                    .is_some(),
                || "the LUN is larger than 2^64 bytes".into(),
            )?;
        }
        Ok(())
    }
}

struct Vm {
    /// Next IO time; f64 so Poisson gaps accumulate without rounding drift.
    next_ns: f64,
    /// Fixed arrivals: IOs issued so far (time = start + index × gap).
    issued: u64,
    start_ns: f64,
    cursor_bytes: u64,
    base_bytes: u64,
    device_id: u32,
}

pub struct BootStormGen {
    rng: Rng,
    limit: Limit,
    devices: DeviceTable,
    vms: Vec<Vm>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    arrival: ArrivalKind,
    gap_ns: f64,
    write: Chance,
    random_read: Chance,
    read_sizes: SizeSampler,
    write_sizes: SizeSampler,
    image_size_bytes: u64,
    image_positions: u64,
    scratch_positions: u64,
    alignment_bytes: u64,
}

impl BootStormGen {
    pub fn new(params: &BootStormParams, seed: u64) -> Result<BootStormGen> {
        params.validate()?;
        let mut rng = Rng::new(seed, 1);
        let window_ns = params.start_window_s * NS_PER_S;
        let devices: DeviceTable = match params.layout {
            VmLayout::Devices => (0..params.vms).map(|v| format!("vm{v:04}")).collect(),
            VmLayout::Lun => ["lun0".to_owned()].into_iter().collect(),
        };
        let mut vms = Vec::with_capacity(params.vms as usize);
        let mut heap = BinaryHeap::with_capacity(params.vms as usize);
        for v in 0..params.vms {
            let start_ns = rng.unit_f64() * window_ns;
            let (device_id, base_bytes) = match params.layout {
                VmLayout::Devices => (v, 0),
                VmLayout::Lun => (0, v as u64 * params.vm_stride_bytes),
            };
            vms.push(Vm {
                next_ns: start_ns,
                issued: 0,
                start_ns,
                cursor_bytes: 0,
                base_bytes,
                device_id,
            });
            heap.push(Reverse((start_ns as u64, v)));
        }
        let scratch_positions = if params.write_ratio > 0.0 {
            positions(
                params.scratch_size_bytes,
                params.write_size_bytes.max_bytes(),
                params.alignment_bytes,
                "`scratch_size_bytes`",
            )?
        } else {
            1
        };
        Ok(BootStormGen {
            rng,
            limit: Limit::new(params.count, params.duration_s, u64::MAX)?,
            devices,
            vms,
            heap,
            arrival: params.arrival,
            gap_ns: NS_PER_S / params.vm_rate_iops,
            write: Chance::new(params.write_ratio),
            random_read: Chance::new(params.random_read_share),
            read_sizes: SizeSampler::new(&params.read_size_bytes),
            write_sizes: SizeSampler::new(&params.write_size_bytes),
            image_size_bytes: params.image_size_bytes,
            image_positions: positions(
                params.image_size_bytes,
                params.read_size_bytes.max_bytes(),
                params.alignment_bytes,
                "`image_size_bytes`",
            )?,
            scratch_positions,
            alignment_bytes: params.alignment_bytes,
        })
    }
}

impl RecordStream for BootStormGen {
    fn next_record(&mut self) -> Result<Option<IoRecord>> {
        let Some(Reverse((time_ns, v))) = self.heap.pop() else {
            return Ok(None);
        };
        if !self.limit.take(time_ns) {
            self.heap.clear();
            return Ok(None);
        }
        let rng = &mut self.rng;
        let vm = &mut self.vms[v as usize];
        let mut booted = false;
        let (op, size_bytes, offset_bytes) = if self.write.draw(rng) {
            let size = self.write_sizes.sample(rng);
            let pos = rng.below(self.scratch_positions);
            (
                Op::Write,
                size,
                self.image_size_bytes + pos * self.alignment_bytes,
            )
        } else if self.random_read.draw(rng) {
            let size = self.read_sizes.sample(rng);
            (
                Op::Read,
                size,
                rng.below(self.image_positions) * self.alignment_bytes,
            )
        } else {
            // The last sequential read is cut at the image's end.
            let size =
                (self.read_sizes.sample(rng) as u64).min(self.image_size_bytes - vm.cursor_bytes);
            let offset = vm.cursor_bytes;
            vm.cursor_bytes += size.div_ceil(self.alignment_bytes) * self.alignment_bytes;
            booted = vm.cursor_bytes >= self.image_size_bytes;
            (Op::Read, size as u32, offset)
        };
        if !booted {
            vm.issued += 1;
            vm.next_ns = match self.arrival {
                ArrivalKind::Fixed => vm.start_ns + vm.issued as f64 * self.gap_ns,
                ArrivalKind::Poisson => vm.next_ns + rng.exp1() * self.gap_ns,
            };
            self.heap.push(Reverse((vm.next_ns as u64, v)));
        }
        Ok(Some(IoRecord {
            time_ns,
            offset_bytes: vm.base_bytes + offset_bytes,
            size_bytes,
            device_id: vm.device_id,
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
    use crate::generate::testing::collect;

    fn small() -> BootStormParams {
        BootStormParams {
            vms: 20,
            image_size_bytes: 64 * MIB,
            scratch_size_bytes: 256 * MIB,
            vm_stride_bytes: 512 * MIB,
            start_window_s: 10.0,
            ..BootStormParams::default()
        }
    }

    #[test]
    fn every_vm_reads_its_whole_image_mostly_sequentially() {
        for layout in [VmLayout::Devices, VmLayout::Lun] {
            let p = BootStormParams { layout, ..small() };
            let recs = collect(&mut BootStormGen::new(&p, 7).unwrap());
            assert_eq!(recs, collect(&mut BootStormGen::new(&p, 7).unwrap()));
            assert!(recs.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
            let vm_of = |r: &IoRecord| match layout {
                VmLayout::Devices => r.device_id as usize,
                VmLayout::Lun => (r.offset_bytes / (512 * MIB)) as usize,
            };
            // A read is sequential when it starts where an earlier read of
            // the same VM ended (or at 0); the image must be fully covered.
            let mut ends: Vec<std::collections::HashSet<u64>> = vec![[0].into(); 20];
            let mut covered = vec![vec![false; (64 * MIB / 4096) as usize]; 20];
            let mut first = [u64::MAX; 20];
            let (mut seq, mut reads, mut writes) = (0u64, 0u64, 0u64);
            for r in &recs {
                let v = vm_of(r);
                let local = r.offset_bytes
                    - if layout == VmLayout::Lun {
                        v as u64 * 512 * MIB
                    } else {
                        0
                    };
                first[v] = first[v].min(r.time_ns);
                assert_eq!(local % 4096, 0);
                if r.op == Op::Write {
                    writes += 1;
                    assert!(local >= 64 * MIB && local + r.size_bytes as u64 <= 320 * MIB);
                    continue;
                }
                reads += 1;
                let end = local + r.size_bytes as u64;
                assert!(end <= 64 * MIB);
                seq += ends[v].contains(&local) as u64;
                ends[v].insert(end.div_ceil(4096) * 4096);
                for block in local / 4096..end.div_ceil(4096) {
                    covered[v][block as usize] = true;
                }
            }
            // Every VM read its whole image, and started in the window.
            assert!(covered.iter().all(|c| c.iter().all(|&b| b)));
            assert!(first.iter().all(|&t| t < 10_000_000_000));
            let n = (reads + writes) as f64;
            assert!((writes as f64 / n - 0.1).abs() < 5.0 * (0.09 / n).sqrt());
            // 90 % of reads are at the cursor; a random read counts as
            // sequential when it happens to start at an earlier read's end
            // (at most ~15 % of the image's positions are such ends), so the
            // measured share lies in [0.9, 0.9 + 0.1 * 0.15] up to noise.
            let seq_share = seq as f64 / reads as f64;
            let noise = 5.0 * (0.09 / reads as f64).sqrt();
            assert!(
                seq_share > 0.9 - noise && seq_share < 0.915 + noise,
                "{seq_share}"
            );
        }
    }

    #[test]
    fn count_limit_and_bad_params() {
        let p = BootStormParams {
            count: Some(1000),
            ..small()
        };
        assert_eq!(collect(&mut BootStormGen::new(&p, 1).unwrap()).len(), 1000);
        let p = BootStormParams {
            layout: VmLayout::Lun,
            vm_stride_bytes: 100 * MIB,
            ..small()
        };
        assert!(
            BootStormGen::new(&p, 1)
                .err()
                .unwrap()
                .to_string()
                .contains("vm_stride_bytes")
        );
    }
}
