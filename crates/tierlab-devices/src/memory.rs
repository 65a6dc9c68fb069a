//! Memory devices: DRAM, NVDIMM, and a ramdisk behind the Linux block
//! layer.
//!
//! Model: `channels` identical channels behind one FIFO queue. An IO holds
//! one channel for `latency + size / bandwidth` (per op); with all channels
//! busy, IOs wait in arrival order. Trim and flush hold a channel for the
//! write latency and move no data (nothing to discard or persist in RAM).
//!
//! Calibration (all per IO, 4 KiB figures in brackets):
//! - `dram`: 100 ns + 4 KiB at 10 GB/s per channel [510 ns], 4 channels.
//!   100 ns is a load-to-use DRAM latency on a two-socket Xeon (Intel MLC
//!   reports 80–100 ns idle); 10 GB/s is what one core's memcpy streams
//!   (a DDR3-1866 channel peaks at 14.9 GB/s); 4 channels per socket as on
//!   the ATSMF host (Xeon E5-2660, 256 GB). An NVDIMM-N such as the
//!   AGIGARAM the ATSMF paper cites performs like DRAM: use `dram`.
//! - `nvdimm`: Intel Optane DC persistent memory in App Direct mode, per
//!   DIMM as commonly cited from Izraelevitz et al., "Basic Performance
//!   Measurements of the Intel Optane DC Persistent Memory Module"
//!   (arXiv:1903.05714, 2019): random read 305 ns, write 94 ns (to the
//!   persistence domain), 6.6 GB/s read and 2.3 GB/s write per DIMM, six
//!   DIMMs per socket [read 926 ns, write 1.9 µs]. It matches the paper's
//!   "2–4× DRAM latency" for 3D XPoint.
//! - `ramdisk`: Linux `brd` (`/dev/ramN`, the ATSMF memory tier) through
//!   the block layer: 3.0 µs read / 3.5 µs write of fixed cost + 6 GB/s
//!   copy per submitting CPU [3.7 µs read, 4.2 µs write], 20 channels (one
//!   per core of the ATSMF host). fio 4 KiB QD1 on `brd` typically
//!   reports 250–350 k IOPS per job, 3–4 µs per IO including the syscall;
//!   writes cost a little more because brd allocates pages on first
//!   write. *Our choice*, not measured here. The ATSMF paper's own numbers
//!   imply ~10 µs per memory-tier IO end to end (usr1: 15 µs mean at 85 %
//!   memory accesses with flash at 40 µs), which adds device mapper and
//!   btreplay overheads; override `read_latency_ns`/`write_latency_ns` to
//!   reproduce that.

use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::{Completion, DeviceIo, Op, ParamError, TimeNs};

use crate::check::{device_params, range, transfer_ns, unknown_preset};
use crate::parallel::{Parallel, Service};

const GIB: u64 = 1 << 30;
const GB_PER_S: u64 = 1_000_000_000;

device_params! {
    /// Parameters of a memory device. Missing keys default to the `dram`
    /// preset.
    pub struct MemoryParams / MemoryOverrides {
        /// Addressable bytes. Default 256 GiB.
        pub capacity_bytes: u64,
        /// IOs served at once; more wait in FIFO order. Default 4.
        pub channels: u32,
        /// Fixed cost of a read, ns. Default 100.
        pub read_latency_ns: u64,
        /// Fixed cost of a write (and of a trim or flush), ns. Default 100.
        pub write_latency_ns: u64,
        /// Read bandwidth of one channel, bytes/s. Default 10 GB/s.
        pub read_bandwidth_bytes_per_s: u64,
        /// Write bandwidth of one channel, bytes/s. Default 10 GB/s.
        pub write_bandwidth_bytes_per_s: u64,
    }
}

impl Default for MemoryParams {
    fn default() -> Self {
        MemoryParams::dram()
    }
}

impl MemoryParams {
    /// Preset names accepted by [`MemoryParams::preset`].
    pub const PRESETS: &'static [&'static str] = &["dram", "nvdimm", "ramdisk"];

    /// DRAM accessed directly (a page cache hit): see the module notes.
    pub fn dram() -> Self {
        MemoryParams {
            capacity_bytes: 256 * GIB,
            channels: 4,
            read_latency_ns: 100,
            write_latency_ns: 100,
            read_bandwidth_bytes_per_s: 10 * GB_PER_S,
            write_bandwidth_bytes_per_s: 10 * GB_PER_S,
        }
    }

    /// Optane DC persistent memory, six DIMMs: see the module notes.
    pub fn nvdimm() -> Self {
        MemoryParams {
            capacity_bytes: 6 * 128 * GIB,
            channels: 6,
            read_latency_ns: 305,
            write_latency_ns: 94,
            read_bandwidth_bytes_per_s: 6_600_000_000,
            write_bandwidth_bytes_per_s: 2_300_000_000,
        }
    }

    /// Linux `brd` ramdisk through the block layer: see the module notes.
    pub fn ramdisk() -> Self {
        MemoryParams {
            capacity_bytes: 256 * GIB,
            channels: 20,
            read_latency_ns: 3_000,
            write_latency_ns: 3_500,
            read_bandwidth_bytes_per_s: 6 * GB_PER_S,
            write_bandwidth_bytes_per_s: 6 * GB_PER_S,
        }
    }

    /// The preset called `name`, or an error listing the known ones.
    pub fn preset(name: &str) -> Result<Self, ParamError> {
        match name {
            "dram" => Ok(Self::dram()),
            "nvdimm" => Ok(Self::nvdimm()),
            "ramdisk" => Ok(Self::ramdisk()),
            _ => Err(unknown_preset(name, Self::PRESETS)),
        }
    }

    /// Checks every parameter; the error names the parameter, its value
    /// and the allowed range.
    pub fn validate(&self) -> Result<(), ParamError> {
        range("capacity_bytes", self.capacity_bytes, 4096, 1 << 60)?;
        range("channels", self.channels, 1, 4096)?;
        range(
            "read_latency_ns",
            self.read_latency_ns,
            1,
            1_000_000_000_000,
        )?;
        range(
            "write_latency_ns",
            self.write_latency_ns,
            1,
            1_000_000_000_000,
        )?;
        range(
            "read_bandwidth_bytes_per_s",
            self.read_bandwidth_bytes_per_s,
            1_000,
            10_000_000_000_000,
        )?;
        range(
            "write_bandwidth_bytes_per_s",
            self.write_bandwidth_bytes_per_s,
            1_000,
            10_000_000_000_000,
        )
    }
}

pub(crate) struct MemoryService {
    read_latency_ns: u64,
    write_latency_ns: u64,
    read_bandwidth_bytes_per_s: u64,
    write_bandwidth_bytes_per_s: u64,
}

impl Service for MemoryService {
    #[inline]
    fn arrive(&mut self, _io: &DeviceIo) {}

    #[inline]
    fn complete_ns(&mut self, start_ns: TimeNs, io: &DeviceIo) -> TimeNs {
        let service_ns = match io.op {
            Op::Read => {
                self.read_latency_ns + transfer_ns(io.size_bytes, self.read_bandwidth_bytes_per_s)
            }
            Op::Write => {
                self.write_latency_ns + transfer_ns(io.size_bytes, self.write_bandwidth_bytes_per_s)
            }
            Op::Trim | Op::Flush => self.write_latency_ns,
        };
        start_ns + service_ns
    }
}

/// A memory device (see the module documentation).
pub struct MemoryModel {
    capacity_bytes: u64,
    engine: Parallel<MemoryService>,
}

impl MemoryModel {
    /// Builds the model, or says which parameter is wrong.
    pub fn new(params: &MemoryParams) -> Result<Self, ParamError> {
        params.validate()?;
        let service = MemoryService {
            read_latency_ns: params.read_latency_ns,
            write_latency_ns: params.write_latency_ns,
            read_bandwidth_bytes_per_s: params.read_bandwidth_bytes_per_s,
            write_bandwidth_bytes_per_s: params.write_bandwidth_bytes_per_s,
        };
        Ok(MemoryModel {
            capacity_bytes: params.capacity_bytes,
            engine: Parallel::new(service, params.channels),
        })
    }
}

impl DeviceModel for MemoryModel {
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        self.engine.submit(now_ns, io);
    }

    fn next_event_ns(&self) -> Option<TimeNs> {
        self.engine.next_event_ns()
    }

    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        self.engine.advance(now_ns, done);
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn state(&self) -> DeviceState {
        self.engine.state()
    }

    fn in_flight(&self) -> usize {
        self.engine.in_flight()
    }
}
