//! Detailed flash SSD: host interface with a queue depth, controller with a
//! write buffer and a page-level FTL (`flash_ftl.rs`: mapping, greedy GC
//! between free-block watermarks, analytic preconditioning), and the flash
//! array: channels × chips × dies × planes, with per-operation latency and
//! energy for each memory type. docs/flash-ssd.md is the full description;
//! in short:
//!
//! - **Host interface**: at most `host_queues × queue_depth` commands in
//!   the device (SATA NCQ: one queue of 32); more wait in a host FIFO.
//!   Data crosses one link (`link_bandwidth_bytes_per_s`): half duplex for
//!   SATA (one pipe both ways), full duplex for NVMe (one pipe each way).
//!   Every command costs `controller_overhead_ns` of firmware time.
//! - **Writes** enter the write buffer (4 KiB slots) after their link
//!   transfer and are acknowledged then; an overwrite of a slot not yet
//!   handed to flash replaces it in place. A write that does not fit waits
//!   for programs to free space. Every `slots_per_unit` buffered slots form
//!   a program unit, sent to the dies in turn (round robin).
//! - **Reads** look up each 4 KiB slot: buffered or unmapped/trimmed slots
//!   need no flash; flash slots are grouped by page, one page read each.
//!   The host read completes when its last page arrived, plus its link
//!   transfer.
//! - **A die** runs one operation at a time, chosen when it frees: host
//!   reads first, then a GC step if GC is active, then host programs.
//!   Read: `read_latency_ns` on the die, then the bytes over the channel.
//!   Program: the unit over the channel, then `program_latency_ns` (all
//!   planes at once). Erase: `erase_latency_ns`. The channel is booked
//!   first come first served at dispatch.
//! - **GC** starts on a die when its free superblocks fall below
//!   `gc_low_free_blocks` and stops once `gc_high_free_blocks` are free
//!   again; each collection is page reads and unit programs interleaved,
//!   then the erase; the victim is free when the erase ends.
//! - **Host control of GC** (`host_gc_control`): the device reports its
//!   GC status and lets its host defer GC that can wait (ATA Advanced
//!   Background Operations, eMMC/UFS BKOPS, NVMe Predictable Latency
//!   Mode). A deferred die still collects when its free superblocks fall
//!   below the urgent level (half the low watermark, at least 2), and only
//!   back up to it. A RAID controller uses this to stagger its mirrors' GC.
//! - **Energy**: every page read, page program, block erase and channel
//!   byte costs its preset energy; `idle_power_mw` is drawn all the time.
//!
//! States for waveforms: ERASE while a die erases; else GC while a die
//! runs a GC read/program; else WRITE while a die programs host data or a
//! host write is in the device; else READ while a die reads for the host
//! or a host read is in the device; else IDLE.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::{Deserialize, Serialize};
use tierlab_core::device::{Background, DeviceModel, DeviceState};
use tierlab_core::{Completion, DeviceIo, Op, ParamError, TimeNs};

use crate::check::{device_params, range, range_f64, transfer_ns, unknown_preset};
use crate::flash_ftl::{Ftl, FtlConfig, FtlStats, Loc, Precondition, SLOT_BYTES};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The host interface protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Interface {
    /// Serial ATA: one NCQ queue of at most 32 commands, half-duplex link.
    Sata,
    /// NVMe: several queues, full-duplex link.
    Nvme,
}

device_params! {
    /// Parameters of the detailed flash SSD. Missing keys default to the
    /// `mlc-1chip` preset. The user capacity is derived: raw flash /
    /// (1 + over-provisioning), in whole 4 KiB slots.
    pub struct FlashSsdParams / FlashSsdOverrides {
        /// `sata` or `nvme`.
        pub interface: Interface,
        /// Submission queues (SATA: 1).
        pub host_queues: u32,
        /// Commands per queue the device accepts (SATA NCQ: at most 32).
        pub queue_depth: u32,
        /// Host link data rate, bytes/s.
        pub link_bandwidth_bytes_per_s: u64,
        /// Firmware time per command, ns.
        pub controller_overhead_ns: u64,
        /// Controller write buffer, bytes (a multiple of 4 KiB).
        pub write_buffer_bytes: u64,
        pub channels: u32,
        pub chips_per_channel: u32,
        pub dies_per_chip: u32,
        pub planes_per_die: u32,
        pub blocks_per_plane: u32,
        pub pages_per_block: u32,
        /// Flash page, bytes (a multiple of 4 KiB).
        pub page_bytes: u32,
        /// Channel (flash bus) data rate, bytes/s.
        pub channel_bandwidth_bytes_per_s: u64,
        /// Array read of a page (tR), ns.
        pub read_latency_ns: u64,
        /// Program of a page on every plane at once (tPROG), ns.
        pub program_latency_ns: u64,
        /// Erase of a block on every plane at once (tBERS), ns.
        pub erase_latency_ns: u64,
        /// (raw − user) / user, percent.
        pub over_provisioning_percent: f64,
        /// GC starts on a die below this many free superblocks.
        pub gc_low_free_blocks: u32,
        /// GC stops on a die at this many free superblocks.
        pub gc_high_free_blocks: u32,
        /// `none`, `fill` or `steady` (docs/flash-ssd.md).
        pub precondition: Precondition,
        /// Energy of one page read (array), nJ.
        pub read_energy_nj: f64,
        /// Energy of one page program, nJ.
        pub program_energy_nj: f64,
        /// Energy of one block erase (one plane), nJ.
        pub erase_energy_nj: f64,
        /// Energy per byte moved over a channel, pJ.
        pub transfer_energy_pj_per_byte: f64,
        /// Power drawn at all times (controller + idle chips), mW.
        pub idle_power_mw: f64,
        /// The device reports its GC status and lets its host defer GC
        /// that can wait (docs/flash-ssd.md); alone it collects as usual.
        pub host_gc_control: bool,
    }
}

impl Default for FlashSsdParams {
    fn default() -> Self {
        FlashSsdParams::mlc_1chip()
    }
}

/// `V × I × t` in nJ: datasheet supply voltage, typical active current and
/// operation time give an operation's energy (docs/flash-ssd.md).
fn vit_nj(volts: f64, milliamps: f64, ns: u64) -> f64 {
    volts * milliamps * 1e-3 * ns as f64
}

impl FlashSsdParams {
    /// Preset names accepted by [`FlashSsdParams::preset`].
    pub const PRESETS: &'static [&'static str] =
        &["mlc-1chip", "slc-sata", "mlc-sata", "tlc-nvme", "scm-nvme"];

    /// The thesis' device: a SATA SSD of one MLC chip (two dies of two
    /// planes, 16 GiB raw), NCQ 32.
    pub fn mlc_1chip() -> Self {
        FlashSsdParams {
            interface: Interface::Sata,
            host_queues: 1,
            queue_depth: 32,
            link_bandwidth_bytes_per_s: 600_000_000,
            controller_overhead_ns: 5_000,
            write_buffer_bytes: 4 * MIB,
            channels: 1,
            chips_per_channel: 1,
            dies_per_chip: 2,
            planes_per_die: 2,
            blocks_per_plane: 2048,
            pages_per_block: 256,
            page_bytes: 8192,
            channel_bandwidth_bytes_per_s: 200_000_000,
            read_latency_ns: 50_000,
            program_latency_ns: 900_000,
            erase_latency_ns: 3_500_000,
            over_provisioning_percent: 7.0,
            gc_low_free_blocks: 8,
            gc_high_free_blocks: 16,
            precondition: Precondition::Steady,
            read_energy_nj: vit_nj(3.3, 25.0, 50_000),
            program_energy_nj: vit_nj(3.3, 25.0, 900_000),
            erase_energy_nj: vit_nj(3.3, 25.0, 3_500_000),
            transfer_energy_pj_per_byte: 330.0,
            idle_power_mw: 50.0,
            host_gc_control: false,
        }
    }

    /// A SATA SSD of SLC NAND: 8 channels × 2 chips, 32 GiB raw.
    pub fn slc_sata() -> Self {
        FlashSsdParams {
            write_buffer_bytes: 32 * MIB,
            channels: 8,
            chips_per_channel: 2,
            dies_per_chip: 1,
            planes_per_die: 2,
            blocks_per_plane: 4096,
            pages_per_block: 64,
            page_bytes: 4096,
            read_latency_ns: 25_000,
            program_latency_ns: 200_000,
            erase_latency_ns: 1_500_000,
            gc_low_free_blocks: 8,
            gc_high_free_blocks: 16,
            read_energy_nj: vit_nj(3.3, 25.0, 25_000),
            program_energy_nj: vit_nj(3.3, 25.0, 200_000),
            erase_energy_nj: vit_nj(3.3, 25.0, 1_500_000),
            idle_power_mw: 300.0,
            ..Self::mlc_1chip()
        }
    }

    /// A SATA SSD of MLC NAND: 8 channels × 4 chips × 2 dies, 256 GiB raw.
    pub fn mlc_sata() -> Self {
        FlashSsdParams {
            write_buffer_bytes: 32 * MIB,
            channels: 8,
            chips_per_channel: 4,
            idle_power_mw: 300.0,
            ..Self::mlc_1chip()
        }
    }

    /// An NVMe SSD of TLC NAND: 8 channels × 4 chips × 2 dies × 4 planes,
    /// 16 KiB pages, 1 TiB raw (~1 TB user at 7 % over-provisioning).
    pub fn tlc_nvme() -> Self {
        FlashSsdParams {
            interface: Interface::Nvme,
            host_queues: 8,
            queue_depth: 1024,
            link_bandwidth_bytes_per_s: 3_500_000_000,
            controller_overhead_ns: 2_000,
            write_buffer_bytes: 64 * MIB,
            channels: 8,
            chips_per_channel: 4,
            dies_per_chip: 2,
            planes_per_die: 4,
            blocks_per_plane: 1024,
            pages_per_block: 256,
            page_bytes: 16384,
            channel_bandwidth_bytes_per_s: 800_000_000,
            read_latency_ns: 60_000,
            program_latency_ns: 1_000_000,
            erase_latency_ns: 3_500_000,
            over_provisioning_percent: 7.0,
            gc_low_free_blocks: 8,
            gc_high_free_blocks: 16,
            precondition: Precondition::Steady,
            read_energy_nj: vit_nj(3.3, 25.0, 60_000),
            program_energy_nj: vit_nj(3.3, 25.0, 1_000_000),
            erase_energy_nj: vit_nj(3.3, 25.0, 3_500_000),
            transfer_energy_pj_per_byte: 45.0,
            idle_power_mw: 1000.0,
            host_gc_control: false,
        }
    }

    /// An NVMe SSD of storage-class memory (PCM-like): 4 KiB pages read in
    /// 3 µs, written in 10 µs, erase nearly free (write in place).
    pub fn scm_nvme() -> Self {
        FlashSsdParams {
            channels: 8,
            chips_per_channel: 2,
            dies_per_chip: 1,
            planes_per_die: 1,
            blocks_per_plane: 4096,
            pages_per_block: 256,
            page_bytes: 4096,
            channel_bandwidth_bytes_per_s: 1_600_000_000,
            read_latency_ns: 3_000,
            program_latency_ns: 10_000,
            erase_latency_ns: 1,
            // Lee et al. 2009 (ISCA), PCM array energy per bit.
            read_energy_nj: 2.47e-3 * 32768.0,
            program_energy_nj: 16.82e-3 * 32768.0,
            erase_energy_nj: 0.0,
            transfer_energy_pj_per_byte: 45.0,
            write_buffer_bytes: 16 * MIB,
            ..Self::tlc_nvme()
        }
    }

    /// The named preset, or an error listing the known ones.
    pub fn preset(name: &str) -> Result<Self, ParamError> {
        match name {
            "mlc-1chip" => Ok(Self::mlc_1chip()),
            "slc-sata" => Ok(Self::slc_sata()),
            "mlc-sata" => Ok(Self::mlc_sata()),
            "tlc-nvme" => Ok(Self::tlc_nvme()),
            "scm-nvme" => Ok(Self::scm_nvme()),
            _ => Err(unknown_preset(name, Self::PRESETS)),
        }
    }

    pub fn dies(&self) -> u64 {
        self.channels as u64 * self.chips_per_channel as u64 * self.dies_per_chip as u64
    }

    /// Raw flash bytes.
    pub fn raw_bytes(&self) -> u64 {
        self.dies()
            * self.planes_per_die as u64
            * self.blocks_per_plane as u64
            * self.pages_per_block as u64
            * self.page_bytes as u64
    }

    /// Addressable bytes: raw / (1 + over-provisioning), whole 4 KiB slots.
    pub fn capacity_bytes(&self) -> u64 {
        let user = self.raw_bytes() as f64 / (1.0 + self.over_provisioning_percent / 100.0);
        (user / SLOT_BYTES as f64).floor() as u64 * SLOT_BYTES
    }

    /// Checks every parameter; the error names the parameter, its value
    /// and the allowed range.
    pub fn validate(&self) -> Result<(), ParamError> {
        const NS_MAX: u64 = 10_000_000_000;
        const BW_MIN: u64 = 1_000_000;
        const BW_MAX: u64 = 1_000_000_000_000;
        match self.interface {
            Interface::Sata => {
                range("host_queues", self.host_queues, 1, 1)
                    .map_err(|e| e.because("SATA has one NCQ queue"))?;
                range("queue_depth", self.queue_depth, 1, 32)
                    .map_err(|e| e.because("SATA NCQ holds at most 32 commands"))?;
            }
            Interface::Nvme => {
                range("host_queues", self.host_queues, 1, 65_535)?;
                range("queue_depth", self.queue_depth, 1, 65_536)?;
            }
        }
        range(
            "link_bandwidth_bytes_per_s",
            self.link_bandwidth_bytes_per_s,
            BW_MIN,
            BW_MAX,
        )?;
        range(
            "channel_bandwidth_bytes_per_s",
            self.channel_bandwidth_bytes_per_s,
            BW_MIN,
            BW_MAX,
        )?;
        range(
            "controller_overhead_ns",
            self.controller_overhead_ns,
            0,
            NS_MAX,
        )?;
        range("channels", self.channels, 1, 256)?;
        range("chips_per_channel", self.chips_per_channel, 1, 256)?;
        range("dies_per_chip", self.dies_per_chip, 1, 16)?;
        range("planes_per_die", self.planes_per_die, 1, 16)?;
        range("pages_per_block", self.pages_per_block, 1, 4096)?;
        range("blocks_per_plane", self.blocks_per_plane, 4, 1 << 20)?;
        if self.page_bytes == 0
            || self.page_bytes as u64 % SLOT_BYTES != 0
            || self.page_bytes > 65536
        {
            return Err(ParamError::new(
                "page_bytes",
                self.page_bytes,
                "a multiple of 4096, at most 65536",
            ));
        }
        if self.dies() * self.blocks_per_plane as u64 >= 1 << 30 {
            return Err(ParamError::new(
                "blocks_per_plane",
                format!(
                    "{} ({} dies × {} = {} superblocks)",
                    self.blocks_per_plane,
                    self.dies(),
                    self.blocks_per_plane,
                    self.dies() * self.blocks_per_plane as u64
                ),
                "fewer than 2^30 superblocks (dies × `blocks_per_plane`)",
            ));
        }
        range("read_latency_ns", self.read_latency_ns, 1, NS_MAX)?;
        range("program_latency_ns", self.program_latency_ns, 1, NS_MAX)?;
        range("erase_latency_ns", self.erase_latency_ns, 1, NS_MAX)?;
        range_f64(
            "over_provisioning_percent",
            self.over_provisioning_percent,
            0.0,
            400.0,
        )?;
        let half = self.blocks_per_plane / 2;
        range("gc_low_free_blocks", self.gc_low_free_blocks, 2, half)?;
        range(
            "gc_high_free_blocks",
            self.gc_high_free_blocks,
            self.gc_low_free_blocks,
            half,
        )
        .map_err(|e| e.because("at least `gc_low_free_blocks`, at most half the blocks"))?;
        let unit_bytes = self.planes_per_die as u64 * self.page_bytes as u64;
        if self.write_buffer_bytes % SLOT_BYTES != 0
            || self.write_buffer_bytes < unit_bytes
            || self.write_buffer_bytes > 1 << 40
        {
            return Err(ParamError::new(
                "write_buffer_bytes",
                self.write_buffer_bytes,
                format!(
                    "a multiple of 4096 from one program unit (`planes_per_die` × \
                     `page_bytes` = {unit_bytes}) to 2^40"
                ),
            ));
        }
        let slots = self.capacity_bytes() / SLOT_BYTES;
        if slots == 0 || slots > u32::MAX as u64 {
            return Err(ParamError::new(
                "capacity_bytes",
                format!("{} ({slots} slots of 4 KiB)", self.capacity_bytes()),
                "1 ..= 2^32 − 1 slots of 4 KiB (16 TiB)",
            ));
        }
        for (name, value) in [
            ("read_energy_nj", self.read_energy_nj),
            ("program_energy_nj", self.program_energy_nj),
            ("erase_energy_nj", self.erase_energy_nj),
            (
                "transfer_energy_pj_per_byte",
                self.transfer_energy_pj_per_byte,
            ),
        ] {
            range_f64(name, value, 0.0, 1e9)?;
        }
        range_f64("idle_power_mw", self.idle_power_mw, 0.0, 1e6)?;
        // The FTL checks that the spare space can hold the watermarks.
        self.ftl_config().and_then(|c| Ftl::check_shape(&c))
    }

    fn ftl_config(&self) -> Result<FtlConfig, ParamError> {
        let slots_per_page = self.page_bytes / SLOT_BYTES as u32;
        let slots_per_unit = slots_per_page * self.planes_per_die;
        Ok(FtlConfig {
            dies: self.dies() as u32,
            blocks_per_die: self.blocks_per_plane,
            slots_per_page,
            slots_per_unit,
            slots_per_block: slots_per_unit * self.pages_per_block,
            logical_slots: self.capacity_bytes() / SLOT_BYTES,
            gc_low_free_blocks: self.gc_low_free_blocks,
            gc_high_free_blocks: self.gc_high_free_blocks,
            precondition: self.precondition,
        })
    }
}

/// What a die is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DieOp {
    HostRead { cmd: u32 },
    HostProgram { unit: u64 },
    GcRead,
    GcProgram,
    Erase { victim: u32 },
}

#[derive(Clone, Copy, Debug)]
struct GcProgress {
    victim: u32,
    reads_total: u32,
    reads_done: u32,
    programs_total: u32,
    programs_done: u32,
}

struct Die {
    channel: u32,
    current: Option<DieOp>,
    /// Host page reads waiting: (command, bytes, earliest start).
    reads: VecDeque<(u32, u32, TimeNs)>,
    /// Host program units waiting.
    programs: VecDeque<u64>,
    gc_active: bool,
    gc: Option<GcProgress>,
    /// With GC active and host programs waiting, the two take turns.
    gc_turn: bool,
}

/// A host command in the device (or waiting to enter it).
#[derive(Clone, Copy, Debug)]
struct Cmd {
    tag: u64,
    op: Op,
    offset_bytes: u64,
    size_bytes: u32,
    seq: u64,
    parts_left: u32,
}

/// A program unit: buffer entries [first_seq, first_seq + count).
#[derive(Clone, Copy, Debug)]
struct Unit {
    first_seq: u64,
    count: u32,
    done: bool,
    /// When its last data arrived over the link (programs start no earlier).
    ready_ns: TimeNs,
}

const EV_DIE: u8 = 0;
const EV_HOST: u8 = 1;

/// Counts of operations, for counters and energy.
#[derive(Clone, Copy, Debug, Default)]
struct OpCounts {
    host_page_reads: u64,
    host_unit_programs: u64,
    gc_unit_programs: u64,
    gc_page_reads: u64,
    channel_bytes: u64,
    buffer_read_slots: u64,
    coalesced_slots: u64,
}

/// The detailed flash SSD (see the module documentation).
pub struct FlashSsd {
    p: FlashSsdParams,
    ftl: Ftl,
    capacity_bytes: u64,
    max_in_device: usize,
    slots_per_unit: u32,
    unit_bytes: u32,
    page_bytes: u32,
    dies: Vec<Die>,
    channel_free_ns: Vec<TimeNs>,
    /// Link free times: [host→device, device→host]; SATA uses [0] for both.
    link_free_ns: [TimeNs; 2],
    events: BinaryHeap<Reverse<(TimeNs, u8, u64, u32)>>,
    event_seq: u64,
    cmds: Vec<Cmd>,
    free_cmds: Vec<u32>,
    host_wait: VecDeque<u32>,
    buffer_wait: VecDeque<u32>,
    flush_wait: Vec<(u64, u32)>,
    in_device: usize,
    in_flight: usize,
    next_seq: u64,
    ready: VecDeque<Completion>,
    now_ns: TimeNs,
    // Write buffer.
    buffer_capacity_slots: u64,
    buffer_used_slots: u64,
    /// LPNs of buffer entries from `buffer_base_seq` on.
    buffer_lpns: VecDeque<u32>,
    buffer_base_seq: u64,
    buffer_next_seq: u64,
    /// Entries before this one are in program units.
    formed_seq: u64,
    units: VecDeque<Unit>,
    unit_base: u64,
    next_die: usize,
    // Activity, for `state()`.
    dies_reading: u32,
    dies_programming: u32,
    dies_gc: u32,
    dies_erasing: u32,
    host_reads: u32,
    host_writes: u32,
    ops: OpCounts,
    /// Scratch for grouping a read's slots into page reads.
    parts: Vec<(u32, u32)>,
    /// The host allows GC that can wait (`host_gc_control`; always true
    /// without it).
    background_allowed: bool,
    /// Below this many free superblocks a die collects even when the host
    /// defers GC.
    urgent_free_blocks: u32,
}

impl FlashSsd {
    /// Builds the device in its preconditioned state, or says which
    /// parameter is wrong. The model draws nothing at random: `seed` is
    /// accepted for the common constructor shape and unused, so two SSDs
    /// with the same parameters and inputs behave identically.
    pub fn new(params: &FlashSsdParams, seed: u64) -> Result<Self, ParamError> {
        let _ = seed;
        params.validate()?;
        let ftl = Ftl::new(params.ftl_config()?)?;
        let dies = (0..params.dies())
            .map(|i| Die {
                // Dies numbered channel-first, so consecutive units go to
                // different channels (striping over channels first).
                channel: (i % params.channels as u64) as u32,
                current: None,
                reads: VecDeque::new(),
                programs: VecDeque::new(),
                gc_active: false,
                gc: None,
                gc_turn: true,
            })
            .collect();
        let slots_per_unit = params.planes_per_die * (params.page_bytes / SLOT_BYTES as u32);
        Ok(FlashSsd {
            capacity_bytes: params.capacity_bytes(),
            max_in_device: params.host_queues as usize * params.queue_depth as usize,
            slots_per_unit,
            unit_bytes: slots_per_unit * SLOT_BYTES as u32,
            page_bytes: params.page_bytes,
            dies,
            channel_free_ns: vec![0; params.channels as usize],
            link_free_ns: [0; 2],
            events: BinaryHeap::new(),
            event_seq: 0,
            cmds: Vec::new(),
            free_cmds: Vec::new(),
            host_wait: VecDeque::new(),
            buffer_wait: VecDeque::new(),
            flush_wait: Vec::new(),
            in_device: 0,
            in_flight: 0,
            next_seq: 0,
            ready: VecDeque::new(),
            now_ns: 0,
            buffer_capacity_slots: params.write_buffer_bytes / SLOT_BYTES,
            buffer_used_slots: 0,
            buffer_lpns: VecDeque::new(),
            buffer_base_seq: 0,
            buffer_next_seq: 0,
            formed_seq: 0,
            units: VecDeque::new(),
            unit_base: 0,
            next_die: 0,
            dies_reading: 0,
            dies_programming: 0,
            dies_gc: 0,
            dies_erasing: 0,
            host_reads: 0,
            host_writes: 0,
            ops: OpCounts::default(),
            parts: Vec::new(),
            background_allowed: true,
            urgent_free_blocks: (params.gc_low_free_blocks / 2).max(2),
            ftl,
            p: params.clone(),
        })
    }

    pub fn params(&self) -> &FlashSsdParams {
        &self.p
    }

    /// The FTL's counters so far.
    pub fn ftl_stats(&self) -> FtlStats {
        self.ftl.stats
    }

    /// The FTL, for tests and reports (read only).
    pub fn ftl(&self) -> &Ftl {
        &self.ftl
    }

    /// Energy so far by operation, joules: (read, program, erase,
    /// transfer, idle). Idle energy runs to the model's clock (its last
    /// event or submission).
    pub fn energy_j(&self) -> [f64; 5] {
        let planes = self.p.planes_per_die as f64;
        let reads = (self.ops.host_page_reads + self.ops.gc_page_reads) as f64;
        let programs = (self.ops.host_unit_programs + self.ops.gc_unit_programs) as f64 * planes;
        let erases = self.ftl.stats.superblock_erases as f64 * planes;
        [
            reads * self.p.read_energy_nj * 1e-9,
            programs * self.p.program_energy_nj * 1e-9,
            erases * self.p.erase_energy_nj * 1e-9,
            self.ops.channel_bytes as f64 * self.p.transfer_energy_pj_per_byte * 1e-12,
            self.p.idle_power_mw * 1e-3 * self.now_ns as f64 * 1e-9,
        ]
    }

    fn push_event(&mut self, t: TimeNs, kind: u8, seq: u64, index: u32) {
        self.events.push(Reverse((t, kind, seq, index)));
    }

    fn push_die_event(&mut self, t: TimeNs, die: usize) {
        self.event_seq += 1;
        let seq = self.event_seq;
        self.push_event(t, EV_DIE, seq, die as u32);
    }

    fn link(&mut self, t: TimeNs, bytes: u32, to_host: bool) -> TimeNs {
        let i = match self.p.interface {
            Interface::Sata => 0,
            Interface::Nvme => to_host as usize,
        };
        let start = self.link_free_ns[i].max(t);
        let end = start + transfer_ns(bytes, self.p.link_bandwidth_bytes_per_s);
        self.link_free_ns[i] = end;
        end
    }

    fn channel(&mut self, die: usize, t: TimeNs, bytes: u32) -> TimeNs {
        let c = self.dies[die].channel as usize;
        let start = self.channel_free_ns[c].max(t);
        let end = start + transfer_ns(bytes, self.p.channel_bandwidth_bytes_per_s);
        self.channel_free_ns[c] = end;
        self.ops.channel_bytes += bytes as u64;
        end
    }

    /// Processes every internal event at or before `now_ns`.
    fn settle(&mut self, now_ns: TimeNs) {
        while let Some(&Reverse((t, kind, _, index))) = self.events.peek() {
            if t > now_ns {
                break;
            }
            self.events.pop();
            match kind {
                EV_DIE => self.die_done(t, index as usize),
                _ => self.host_done(t, index),
            }
        }
    }

    fn alloc_cmd(&mut self, cmd: Cmd) -> u32 {
        match self.free_cmds.pop() {
            Some(i) => {
                self.cmds[i as usize] = cmd;
                i
            }
            None => {
                self.cmds.push(cmd);
                (self.cmds.len() - 1) as u32
            }
        }
    }

    /// The 4 KiB slots a command covers, clipped to the logical space (the
    /// executor refuses IOs past the end; a direct caller gets no-ops).
    fn slots_of(&self, cmd: &Cmd) -> (u64, u64) {
        let logical = self.capacity_bytes / SLOT_BYTES;
        let first = (cmd.offset_bytes / SLOT_BYTES).min(logical);
        let end = (cmd.offset_bytes + cmd.size_bytes as u64).div_ceil(SLOT_BYTES);
        (first, end.max(first + 1).min(logical))
    }

    /// A command enters the device at `t`.
    fn admit(&mut self, t: TimeNs, i: u32) {
        self.in_device += 1;
        let cmd = self.cmds[i as usize];
        let ready = t + self.p.controller_overhead_ns;
        match cmd.op {
            Op::Read => {
                self.host_reads += 1;
                let (first, end) = self.slots_of(&cmd);
                let req_start = cmd.offset_bytes;
                let req_end = cmd.offset_bytes + cmd.size_bytes as u64;
                // Consecutive slots on one page are one page read.
                self.parts.clear();
                let mut last_key: Option<(u32, u64)> = None;
                for lpn in first..end {
                    let lo = (lpn * SLOT_BYTES).max(req_start);
                    let hi = ((lpn + 1) * SLOT_BYTES).min(req_end).max(lo);
                    let bytes = (hi - lo).max(1) as u32;
                    match self.ftl.lookup(lpn as u32) {
                        Loc::Flash { block, page_key } => {
                            let die = block / self.p.blocks_per_plane;
                            if last_key == Some((block, page_key)) {
                                self.parts.last_mut().expect("grouped").1 += bytes;
                            } else {
                                self.parts.push((die, bytes));
                                last_key = Some((block, page_key));
                            }
                        }
                        Loc::Buffered(_) => {
                            self.ops.buffer_read_slots += 1;
                            last_key = None;
                        }
                        Loc::Unmapped | Loc::Trimmed => last_key = None,
                    }
                }
                self.cmds[i as usize].parts_left = self.parts.len() as u32;
                if self.parts.is_empty() {
                    self.finish_read(ready, i);
                    return;
                }
                for k in 0..self.parts.len() {
                    let (die, bytes) = self.parts[k];
                    self.dies[die as usize].reads.push_back((i, bytes, ready));
                    self.kick(die as usize, t);
                }
            }
            Op::Write => {
                self.host_writes += 1;
                if self.buffer_wait.is_empty() && self.buffer_fits(&cmd) {
                    self.accept_write(t, i);
                } else {
                    self.buffer_wait.push_back(i);
                }
            }
            Op::Trim => {
                let (first, end) = self.slots_of(&cmd);
                for lpn in first..end {
                    self.ftl.trim(lpn as u32);
                }
                self.push_event(ready, EV_HOST, cmd.seq, i);
            }
            Op::Flush => {
                self.host_writes += 1;
                if self.buffer_next_seq > self.formed_seq {
                    self.form_unit(t, t);
                }
                let target = self.buffer_next_seq;
                if self.buffer_base_seq >= target {
                    self.push_event(ready, EV_HOST, cmd.seq, i);
                } else {
                    self.flush_wait.push((target, i));
                }
            }
        }
    }

    /// Buffer slots a write needs that it cannot merge into unformed ones.
    fn new_slots(&self, cmd: &Cmd) -> u64 {
        let (first, end) = self.slots_of(cmd);
        (first..end)
            .filter(|&lpn| {
                self.ftl
                    .buffered_seq(lpn as u32)
                    .is_none_or(|q| q < self.formed_seq)
            })
            .count() as u64
    }

    fn buffer_fits(&self, cmd: &Cmd) -> bool {
        // An empty buffer takes any write, so a write larger than the
        // buffer cannot wait forever.
        self.buffer_used_slots == 0
            || self.buffer_used_slots + self.new_slots(cmd) <= self.buffer_capacity_slots
    }

    fn accept_write(&mut self, t: TimeNs, i: u32) {
        let cmd = self.cmds[i as usize];
        let arrived = self.link(t, cmd.size_bytes, false);
        let (first, end) = self.slots_of(&cmd);
        for lpn in first..end {
            let lpn = lpn as u32;
            if self
                .ftl
                .buffered_seq(lpn)
                .is_some_and(|q| q >= self.formed_seq)
            {
                // Overwrite of a slot still in the open buffer: in place.
                self.ops.coalesced_slots += 1;
                continue;
            }
            let seq = self.buffer_next_seq;
            self.buffer_next_seq += 1;
            self.buffer_lpns.push_back(lpn);
            self.buffer_used_slots += 1;
            self.ftl.write_to_buffer(lpn, seq);
        }
        self.push_event(arrived + self.p.controller_overhead_ns, EV_HOST, cmd.seq, i);
        while self.buffer_next_seq - self.formed_seq >= self.slots_per_unit as u64 {
            self.form_unit(t, arrived);
        }
    }

    /// Hands the oldest unformed buffer entries (up to a unit; fewer on a
    /// flush, padded) to the next die.
    fn form_unit(&mut self, t: TimeNs, ready_ns: TimeNs) {
        let count = (self.buffer_next_seq - self.formed_seq).min(self.slots_per_unit as u64);
        let id = self.unit_base + self.units.len() as u64;
        self.units.push_back(Unit {
            first_seq: self.formed_seq,
            count: count as u32,
            done: false,
            ready_ns,
        });
        self.formed_seq += count;
        let die = self.next_die;
        self.next_die = (self.next_die + 1) % self.dies.len();
        self.dies[die].programs.push_back(id);
        self.kick(die, t);
    }

    /// GC may start (or go on) on `die`: the host allows it, or the die
    /// is short of free superblocks.
    fn gc_may_start(&self, die: u32) -> bool {
        self.background_allowed || self.ftl.free_blocks(die) < self.urgent_free_blocks
    }

    fn kick(&mut self, die: usize, t: TimeNs) {
        if self.dies[die].current.is_none() {
            self.dispatch(die, t);
        }
    }

    fn start(&mut self, die: usize, op: DieOp, end: TimeNs) {
        match op {
            DieOp::HostRead { .. } => self.dies_reading += 1,
            DieOp::HostProgram { .. } => self.dies_programming += 1,
            DieOp::GcRead | DieOp::GcProgram => self.dies_gc += 1,
            DieOp::Erase { .. } => self.dies_erasing += 1,
        }
        self.dies[die].current = Some(op);
        self.push_die_event(end, die);
    }

    /// The die is free at `t`: start its next operation, if any.
    fn dispatch(&mut self, d: usize, t: TimeNs) {
        let die_id = d as u32;
        if let Some((cmd, bytes, ready)) = self.dies[d].reads.pop_front() {
            let start = t.max(ready);
            let end = self.channel(d, start + self.p.read_latency_ns, bytes);
            self.ops.host_page_reads += 1;
            self.start(d, DieOp::HostRead { cmd }, end);
            return;
        }
        if self.dies[d].gc_active && self.dies[d].gc.is_none() && !self.gc_may_start(die_id) {
            // The host deferred GC and it is not urgent (any more): stop
            // between collections.
            self.dies[d].gc_active = false;
        }
        if !self.dies[d].gc_active && self.ftl.gc_wanted(die_id) && self.gc_may_start(die_id) {
            self.dies[d].gc_active = true;
        }
        let programs_ready = !self.dies[d].programs.is_empty() && self.ftl.can_program(die_id);
        // Background GC takes turns with host programs; it runs alone when
        // host programs cannot proceed (no free block for them).
        let gc_now = self.dies[d].gc_active && (!programs_ready || self.dies[d].gc_turn);
        if gc_now {
            self.dies[d].gc_turn = false;
            if self.dies[d].gc.is_none() {
                match self.ftl.gc_collect(die_id) {
                    Some(job) => {
                        self.dies[d].gc = Some(GcProgress {
                            victim: job.victim,
                            reads_total: job.page_reads,
                            reads_done: 0,
                            programs_total: job.unit_programs,
                            programs_done: 0,
                        });
                    }
                    // Nothing to gain: stop rather than spin.
                    None => self.dies[d].gc_active = false,
                }
            }
            if let Some(mut g) = self.dies[d].gc {
                // Reads paced so each program has the data it needs.
                let want_read = g.reads_done < g.reads_total
                    && (g.programs_done == g.programs_total
                        || (g.reads_done as u64) * (g.programs_total as u64)
                            < (g.programs_done as u64 + 1) * (g.reads_total as u64));
                if want_read {
                    g.reads_done += 1;
                    self.dies[d].gc = Some(g);
                    self.ops.gc_page_reads += 1;
                    let end = self.channel(d, t + self.p.read_latency_ns, self.page_bytes);
                    self.start(d, DieOp::GcRead, end);
                } else if g.programs_done < g.programs_total {
                    g.programs_done += 1;
                    self.dies[d].gc = Some(g);
                    self.ops.gc_unit_programs += 1;
                    let end = self.channel(d, t, self.unit_bytes) + self.p.program_latency_ns;
                    self.start(d, DieOp::GcProgram, end);
                } else {
                    self.dies[d].gc = None;
                    let end = t + self.p.erase_latency_ns;
                    self.start(d, DieOp::Erase { victim: g.victim }, end);
                }
                return;
            }
        }
        if programs_ready {
            self.dies[d].gc_turn = true;
            let unit_id = self.dies[d].programs.pop_front().expect("checked");
            let unit = self.units[(unit_id - self.unit_base) as usize];
            let base = self.buffer_base_seq;
            let lpns = &self.buffer_lpns;
            let entries = (unit.first_seq..unit.first_seq + unit.count as u64)
                .map(|q| (q, lpns[(q - base) as usize]));
            self.ftl.program_host_unit(die_id, entries);
            self.ops.host_unit_programs += 1;
            let start = t.max(unit.ready_ns);
            let end = self.channel(d, start, self.unit_bytes) + self.p.program_latency_ns;
            self.start(d, DieOp::HostProgram { unit: unit_id }, end);
            if self.ftl.gc_wanted(die_id) && self.gc_may_start(die_id) {
                self.dies[d].gc_active = true;
            }
        }
    }

    fn die_done(&mut self, t: TimeNs, d: usize) {
        let op = self.dies[d]
            .current
            .take()
            .expect("an event for a busy die");
        match op {
            DieOp::HostRead { cmd } => {
                self.dies_reading -= 1;
                let c = &mut self.cmds[cmd as usize];
                c.parts_left -= 1;
                if c.parts_left == 0 {
                    self.finish_read(t, cmd);
                }
            }
            DieOp::HostProgram { unit } => {
                self.dies_programming -= 1;
                let k = (unit - self.unit_base) as usize;
                self.units[k].done = true;
                self.buffer_used_slots -= self.units[k].count as u64;
                while self.units.front().is_some_and(|u| u.done) {
                    let u = self.units.pop_front().expect("checked");
                    self.unit_base += 1;
                    for _ in 0..u.count {
                        self.buffer_lpns.pop_front();
                    }
                    self.buffer_base_seq = u.first_seq + u.count as u64;
                }
                self.release_flushes(t);
                self.admit_buffered_writes(t);
            }
            DieOp::GcRead | DieOp::GcProgram => self.dies_gc -= 1,
            DieOp::Erase { victim } => {
                self.dies_erasing -= 1;
                self.ftl.gc_erased(victim);
                if self.ftl.gc_satisfied(d as u32) || !self.gc_may_start(d as u32) {
                    self.dies[d].gc_active = false;
                }
            }
        }
        // Writes admitted above may already have started this die.
        self.kick(d, t);
    }

    fn release_flushes(&mut self, t: TimeNs) {
        let base = self.buffer_base_seq;
        let mut k = 0;
        while k < self.flush_wait.len() {
            if self.flush_wait[k].0 <= base {
                let (_, i) = self.flush_wait.swap_remove(k);
                let seq = self.cmds[i as usize].seq;
                self.push_event(t + self.p.controller_overhead_ns, EV_HOST, seq, i);
            } else {
                k += 1;
            }
        }
    }

    fn admit_buffered_writes(&mut self, t: TimeNs) {
        while let Some(&i) = self.buffer_wait.front() {
            let cmd = self.cmds[i as usize];
            if !self.buffer_fits(&cmd) {
                break;
            }
            self.buffer_wait.pop_front();
            self.accept_write(t, i);
        }
    }

    fn finish_read(&mut self, t: TimeNs, i: u32) {
        let cmd = self.cmds[i as usize];
        let end = self.link(t, cmd.size_bytes, true);
        self.push_event(end, EV_HOST, cmd.seq, i);
    }

    fn host_done(&mut self, t: TimeNs, i: u32) {
        let cmd = self.cmds[i as usize];
        match cmd.op {
            Op::Read => self.host_reads -= 1,
            Op::Write | Op::Flush => self.host_writes -= 1,
            Op::Trim => {}
        }
        self.ready.push_back(Completion {
            tag: cmd.tag,
            done_ns: t,
        });
        self.free_cmds.push(i);
        self.in_device -= 1;
        if let Some(next) = self.host_wait.pop_front() {
            self.admit(t, next);
        }
    }
}

impl DeviceModel for FlashSsd {
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight += 1;
        let i = self.alloc_cmd(Cmd {
            tag: io.tag,
            op: io.op,
            offset_bytes: io.offset_bytes,
            size_bytes: io.size_bytes,
            seq,
            parts_left: 0,
        });
        if self.in_device < self.max_in_device {
            self.admit(now_ns, i);
        } else {
            self.host_wait.push_back(i);
        }
    }

    fn next_event_ns(&self) -> Option<TimeNs> {
        match self.ready.front() {
            Some(c) => Some(c.done_ns),
            None => self.events.peek().map(|Reverse((t, ..))| *t),
        }
    }

    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        self.in_flight -= self.ready.len();
        done.extend(self.ready.drain(..));
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn state(&self) -> DeviceState {
        if self.dies_erasing > 0 {
            DeviceState::Erase
        } else if self.dies_gc > 0 {
            DeviceState::Gc
        } else if self.dies_programming > 0 || self.host_writes > 0 {
            DeviceState::Write
        } else if self.dies_reading > 0 || self.host_reads > 0 {
            DeviceState::Read
        } else {
            DeviceState::Idle
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// `Idle` unless `host_gc_control`. Otherwise the most urgent die's:
    /// `Urgent` below the urgent level, `Running` while collecting (or due
    /// and allowed, starting when the die frees), `Deferred` when due (below
    /// the low watermark) and not allowed.
    fn background(&self) -> Background {
        if !self.p.host_gc_control {
            return Background::Idle;
        }
        let mut status = Background::Idle;
        for (d, die) in self.dies.iter().enumerate() {
            let d = d as u32;
            let wanted = self.ftl.gc_wanted(d);
            let die_status = if self.ftl.free_blocks(d) < self.urgent_free_blocks {
                Background::Urgent
            } else if die.gc_active || die.gc.is_some() || (wanted && self.background_allowed) {
                Background::Running
            } else if wanted {
                Background::Deferred
            } else {
                Background::Idle
            };
            status = status.max(die_status);
        }
        status
    }

    /// Ignored unless `host_gc_control`. Allowing starts GC at once on
    /// idle dies that want it; deferring stops it after the collection in
    /// progress (urgent GC goes on).
    fn set_background_allowed(&mut self, now_ns: TimeNs, allowed: bool) {
        if !self.p.host_gc_control || allowed == self.background_allowed {
            return;
        }
        let now_ns = now_ns.max(self.now_ns);
        self.settle(now_ns);
        self.now_ns = now_ns;
        self.background_allowed = allowed;
        if allowed {
            for d in 0..self.dies.len() {
                self.kick(d, now_ns);
            }
        }
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let f = self.ftl.stats;
        let planes = self.p.planes_per_die as u64;
        let host = f.host_slots_buffered;
        let flash = f.host_slots_programmed + f.gc_slots_programmed;
        let [read, program, erase, transfer, idle] = self.energy_j();
        vec![
            ("host_written_4k", host as f64),
            ("flash_written_4k", flash as f64),
            (
                "write_amplification",
                if host == 0 {
                    0.0
                } else {
                    flash as f64 / host as f64
                },
            ),
            ("gc_count", f.gc_count as f64),
            ("gc_moved_4k", f.gc_moved_slots as f64),
            ("gc_page_reads", f.gc_page_reads as f64),
            ("host_page_reads", self.ops.host_page_reads as f64),
            (
                "page_programs",
                ((self.ops.host_unit_programs + self.ops.gc_unit_programs) * planes) as f64,
            ),
            ("block_erases", (f.superblock_erases * planes) as f64),
            ("max_block_erases", self.ftl.max_erase_count() as f64),
            ("buffer_read_4k", self.ops.buffer_read_slots as f64),
            ("coalesced_4k", self.ops.coalesced_slots as f64),
            ("channel_bytes", self.ops.channel_bytes as f64),
            ("mapping_entries", self.ftl.map_entries() as f64),
            ("energy_read_j", read),
            ("energy_program_j", program),
            ("energy_erase_j", erase),
            ("energy_transfer_j", transfer),
            ("energy_idle_j", idle),
            ("energy_j", read + program + erase + transfer + idle),
        ]
    }
}
