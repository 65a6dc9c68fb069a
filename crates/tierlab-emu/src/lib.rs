//! tierlab-emu: run real workloads against a *modeled* device.
//!
//! [`Emulator`] serves one file through FUSE (`MOUNTPOINT/NAME`) whose
//! every read, write and fsync takes the time a tierlab device model says
//! (an HDD with its seeks and rotation, a RAID 5 of HDDs, an SSD...), in
//! wall-clock time, with the data kept for real (RAM or a backing file).
//! Put a loop device over the file and the kernel sees a block device with
//! the model's timing: fio, a filesystem, a database or `tierlab qos run`
//! can then be run against it (docs/emulate.md).
//!
//! - [`timed`]: the wall-clock executor of a model (one thread owns the
//!   model; IOs are submitted at their arrival instants and answered at
//!   the model's completion instants) and its metrics;
//! - [`fs`]: the FUSE filesystem and its mount.

mod error;
pub mod fs;
pub mod timed;

use std::path::Path;
use std::sync::Arc;

use tierlab_real::backend::Backend;

pub use error::EmuError;
pub use fs::{EmulatedFs, MAX_IO_BYTES, Mounted, UnmountError};
pub use timed::{Counters, DeviceHandle, EmuReport, LatencySummary, ModelFactory, TimedDevice};

/// A mounted emulated file and the device behind it.
pub struct Emulator {
    // Field order: the mount goes before the device on drop.
    mounted: Mounted,
    device: TimedDevice,
}

impl Emulator {
    /// Builds the model (on the device thread) and mounts the file
    /// `mountpoint/name` of `capacity_bytes` over `backend`.
    pub fn start(
        factory: ModelFactory,
        backend: Arc<dyn Backend>,
        capacity_bytes: u64,
        mountpoint: &Path,
        name: &str,
        allow_other: bool,
    ) -> Result<Emulator, EmuError> {
        let device = TimedDevice::start(factory)?;
        let fs = EmulatedFs::new(name, capacity_bytes, backend, device.handle())?;
        let mounted = Mounted::mount(fs, mountpoint, allow_other)?;
        Ok(Emulator { mounted, device })
    }

    /// The served file.
    /// Whether starting cleared a stale mount left on the mount point by an
    /// emulator that died (SIGKILL): say so to the user.
    pub fn cleared_stale_mount(&self) -> bool {
        self.mounted.cleared_stale_mount()
    }

    pub fn file(&self) -> &Path {
        self.mounted.file()
    }

    /// Nanoseconds since the device started.
    pub fn now_ns(&self) -> u64 {
        self.device.now_ns()
    }

    /// Running totals.
    pub fn counters(&self) -> Counters {
        self.device.counters()
    }

    /// Unmounts (only if nothing uses the file: `Busy` otherwise, and the
    /// emulator keeps serving).
    pub fn unmount(&mut self) -> Result<(), UnmountError> {
        self.mounted.unmount()
    }

    /// Unmounts, lazily if busy (IOs still coming fail), stops the device
    /// and returns its report.
    pub fn finish(mut self) -> EmuReport {
        if self.mounted.unmount().is_err() {
            self.mounted.detach();
        }
        self.device.finish()
    }
}
