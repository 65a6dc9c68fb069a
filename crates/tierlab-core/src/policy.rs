//! Storage policies: sans-IO state machines between the host and the
//! devices. A policy is told what happened (a host IO arrived, a device IO
//! completed, a timer fired) and answers through an `Outbox` with what
//! should happen (device IOs to send, host IOs that are now complete,
//! timers to set, actions such as capping a tenant). It never sees a clock
//! except the `now_ns` it is given, so the simulator and the real executor
//! drive it unchanged.

pub use crate::stores::{OpenError, StoreError, StoreFault, StoreOp};
pub use crate::volume::{VolumeId, VolumeLabel};
use crate::{DeviceIo, Op, TimeNs};

/// An IO from the host (a workload or tenant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostIo {
    /// Unique per run; echoed in `Outbox::complete`.
    pub id: u64,
    pub op: Op,
    pub offset_bytes: u64,
    pub size_bytes: u32,
    pub tenant: u32,
}

/// Something a policy asks of the executor besides IO.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Limit a tenant to `iops` (None removes the cap).
    CapTenant { tenant: u32, iops: Option<f64> },
}

/// Where a device IO's bytes come from (a write) or go to (a read), for an
/// executor that moves real data. A write takes its bytes from the buffer
/// when it is submitted; a read's bytes land in the buffer when it
/// completes. The simulator ignores data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufRef {
    /// The host IO's own memory: the data it writes, or where its read
    /// result goes; `offset_bytes` into the host IO's range.
    Host { host_id: u64, offset_bytes: u64 },
    /// A policy-owned staging buffer (created on first use, dropped when
    /// the policy lists it in `Outbox::release`).
    Staging { id: u64, offset_bytes: u64 },
    /// No buffer: a write writes zeros, a read's bytes are dropped. For
    /// IOs whose content the policy does not model (e.g. HSWD's metadata
    /// pages), so they need no staging buffer.
    Zeros,
}

/// Why a device IO failed. Only real backing stores fail (the simulator's
/// device models never do); the error reaches the host as NBD's EIO or
/// ENOSPC, or in a run's `host_ios_failed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoError {
    /// The store reported an IO error (EIO, and any cause but the next).
    Io,
    /// The store is out of space (ENOSPC: a sparse file on a full
    /// filesystem).
    NoSpace,
}

impl IoError {
    pub fn from_io(e: &std::io::Error) -> IoError {
        // ENOSPC; a RAID rewraps member errors, keeping only their kind.
        if e.raw_os_error() == Some(28) || e.kind() == std::io::ErrorKind::StorageFull {
            IoError::NoSpace
        } else {
            IoError::Io
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IoError::Io => "EIO",
            IoError::NoSpace => "ENOSPC",
        }
    }
}

/// What a policy wants done. Cleared by the executor after each call.
#[derive(Debug, Default)]
pub struct Outbox {
    /// (device index, IO): device IOs to submit now.
    pub device_ios: Vec<(usize, DeviceIo)>,
    /// (host IO id, tier index): host IOs now complete, and which tier
    /// served them (an index into `Policy::tier_names`).
    pub complete: Vec<(u64, u16)>,
    /// (host IO id, error): host IOs that failed (instead of completing),
    /// after a device IO they needed failed (`Policy::on_device_error`).
    pub failed: Vec<(u64, IoError)>,
    /// (fire time, timer id): timers to set.
    pub timers: Vec<(TimeNs, u64)>,
    pub actions: Vec<Action>,
    /// (device, tag, buffer): the data of device IOs submitted in this
    /// call, filled only when `wants_data` (see `Outbox::data_for`).
    pub data: Vec<(usize, u64, BufRef)>,
    /// Staging buffers the policy no longer needs.
    pub release: Vec<u64>,
    /// (staging buffer, bytes): bytes the policy made itself (metadata
    /// pages) put into a staging buffer before this call's device IOs are
    /// submitted. Filled only when `wants_data`.
    pub fills: Vec<(u64, Vec<u8>)>,
    /// Set by an executor that moves real data; policies then describe
    /// every device IO's data. Never cleared.
    pub wants_data: bool,
}

impl Outbox {
    /// Records where the data of device IO (`device`, `tag`) comes from or
    /// goes to, if the executor moves real data (a no-op in simulation).
    #[inline]
    pub fn data_for(&mut self, device: usize, tag: u64, buf: BufRef) {
        if self.wants_data {
            self.data.push((device, tag, buf));
        }
    }

    pub fn clear(&mut self) {
        self.device_ios.clear();
        self.complete.clear();
        self.failed.clear();
        self.timers.clear();
        self.actions.clear();
        self.data.clear();
        self.release.clear();
        self.fills.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.device_ios.is_empty()
            && self.complete.is_empty()
            && self.failed.is_empty()
            && self.timers.is_empty()
            && self.actions.is_empty()
            && self.data.is_empty()
            && self.release.is_empty()
            && self.fills.is_empty()
    }
}

/// The backing stores as a policy sees them while it opens them
/// (`Policy::open`): synchronous reads and writes before any IO runs.
/// Devices are indexed as in the stack; errors name the device.
pub trait Stores {
    fn capacity_bytes(&self, device: usize) -> u64;
    fn read_at(
        &mut self,
        device: usize,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<(), StoreError>;
    fn write_at(&mut self, device: usize, offset_bytes: u64, data: &[u8])
    -> Result<(), StoreError>;
    /// Makes the writes so far durable.
    fn sync(&mut self, device: usize) -> Result<(), StoreError>;
    /// The store's tierlab volume id (`crate::volume`), made and stored
    /// durably on first use where the store keeps one (a file's xattr),
    /// so that metadata formatted over a store can record which store it
    /// is. `Ok(None)`: this store cannot tell (RAM, an in-memory test
    /// store) — binding to it is then not checked. Asking writes nothing
    /// into the store's bytes.
    fn volume_label(&mut self, device: usize) -> Result<Option<VolumeLabel>, StoreError> {
        let _ = device;
        Ok(None)
    }
    /// How messages name the device: "cache (file /srv/c.img (O_DIRECT))"
    /// in a real run (its config name and what backs it).
    fn describe(&self, device: usize) -> String {
        format!("device {device}")
    }
}

/// In-memory stores (tests, the crash checker).
impl Stores for Vec<Vec<u8>> {
    fn capacity_bytes(&self, device: usize) -> u64 {
        self[device].len() as u64
    }
    fn read_at(
        &mut self,
        device: usize,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        let at = offset_bytes as usize;
        let capacity_bytes = self[device].len() as u64;
        let src = self[device].get(at..at + buf.len()).ok_or_else(|| {
            StoreError::past_end(
                device,
                StoreOp::Read,
                offset_bytes,
                buf.len() as u64,
                capacity_bytes,
            )
        })?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_at(
        &mut self,
        device: usize,
        offset_bytes: u64,
        data: &[u8],
    ) -> Result<(), StoreError> {
        let at = offset_bytes as usize;
        let capacity_bytes = self[device].len() as u64;
        let dst = self[device].get_mut(at..at + data.len()).ok_or_else(|| {
            StoreError::past_end(
                device,
                StoreOp::Write,
                offset_bytes,
                data.len() as u64,
                capacity_bytes,
            )
        })?;
        dst.copy_from_slice(data);
        Ok(())
    }
    fn sync(&mut self, _device: usize) -> Result<(), StoreError> {
        Ok(())
    }
}

pub trait Policy {
    fn name(&self) -> &str;
    /// Names of the tiers `Outbox::complete` refers to (e.g. ["memory", "flash"]).
    fn tier_names(&self) -> Vec<String>;
    fn on_host_io(&mut self, now_ns: TimeNs, io: HostIo, out: &mut Outbox);
    fn on_device_completion(&mut self, now_ns: TimeNs, device: usize, tag: u64, out: &mut Outbox);
    /// Device IO `tag` on `device` failed (a write may have landed in
    /// part, a read's bytes are not there). A policy that survives it
    /// fails (`Outbox::failed`) or completes every host IO that depended on
    /// it, keeps its state consistent, goes on serving, and returns true.
    /// The default returns false and changes nothing: the executor then
    /// stops at the error (fail-stop — nothing wrong is acknowledged, but
    /// nothing more is served).
    fn on_device_error(
        &mut self,
        now_ns: TimeNs,
        device: usize,
        tag: u64,
        error: IoError,
        out: &mut Outbox,
    ) -> bool {
        let _ = (now_ns, device, tag, error, out);
        false
    }
    fn on_timer(&mut self, now_ns: TimeNs, timer_id: u64, out: &mut Outbox) {
        let _ = (now_ns, timer_id, out);
    }
    /// The policy's own counters at the end of a run (hits, flushes, dirty
    /// bytes, ...), reported in summary.json under `run.policy_counters`
    /// and defined in the policy's docs.
    fn counters(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
    /// The policy's own logs at the end of a run, as (file name, CSV text)
    /// pairs, e.g. ("atsmf_decisions.csv", ...): every decision with its
    /// inputs. The executor writes each into the output directory; names
    /// must be plain file names ending in `.csv`.
    fn logs(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Whether the policy describes the data of every device IO through
    /// `Outbox::data_for` (and so can run in the real executor).
    fn moves_data(&self) -> bool {
        false
    }
    /// Host IOs must start and end on multiples of this for the policy's
    /// data to be exact (a real executor refuses others).
    fn required_alignment_bytes(&self) -> u64 {
        1
    }
    /// Whether a host FLUSH (`Op::Flush`, completed by the policy, after
    /// which the executor syncs every store) makes every write
    /// acknowledged before it durable *where a restart of the policy reads
    /// it*. A policy whose restart starts cold must put flushed data on its
    /// backing device (the caches and ATSMF write dirty data back); one
    /// that cannot yet says false, and `tierlab serve` then makes no
    /// multi-connection promise (docs/crash-consistency.md).
    fn flush_is_durable(&self) -> bool {
        true
    }
    /// Opens the policy over backing stores that may hold its persistent
    /// state from an earlier run: recovers it (metadata, an interrupted
    /// operation to finish or roll back), or formats fresh stores. Called
    /// by a data-moving executor once, before the first IO; a simulation
    /// never calls it. A policy without persistent state starts cold: the
    /// default does nothing. Stores made for another configuration are an
    /// error that says what differs, never silently reinterpreted.
    fn open(&mut self, stores: &mut dyn Stores) -> Result<(), OpenError> {
        let _ = stores;
        Ok(())
    }
    /// Whether everything the policy holds survives a restart through
    /// `open` (data and metadata on persistent stores, as HSWD's PCache):
    /// then a clean stop of `tierlab serve` need only make it durable (a
    /// FLUSH), not write it back, and the restart comes up warm.
    fn restarts_warm(&self) -> bool {
        false
    }
    /// Clean stop: write every byte of host data that lives only on a
    /// fast tier (dirty cache blocks, memory-resident sub-LUNs) to the
    /// backing device, through device IOs in `out` and later calls. No host
    /// IO arrives after this; timers and completions still do. Called once;
    /// `is_drained` says when it is done.
    fn drain(&mut self, now_ns: TimeNs, out: &mut Outbox) {
        let _ = (now_ns, out);
    }
    /// True when no device IO of the policy is in flight and the backing
    /// device holds the latest acknowledged data of every block (after
    /// `drain`, the executor waits for this before it stops).
    fn is_drained(&self) -> bool {
        true
    }
    /// Where the host bytes [offset_bytes, offset_bytes + len_bytes) live
    /// now: appends extents that cover the range in order, each in one
    /// tier (an index into `tier_names`) at one place on one device. Ranges
    /// moving between tiers report the tier a read would be served from.
    /// Host ranges past the policy's address space are left out.
    fn locate(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) {
        out.push(Extent {
            len_bytes,
            tier: 0,
            device: 0,
            device_offset_bytes: offset_bytes,
        });
    }
}

/// A run of host bytes that live in one tier, at one place of one device
/// (`Policy::locate`): what `tierlab serve` reports as `tierlab:tier`, and
/// where it asks the backing store whether the bytes were ever written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub len_bytes: u64,
    /// An index into `Policy::tier_names`.
    pub tier: u16,
    pub device: usize,
    pub device_offset_bytes: u64,
}

/// The simplest stack: every host IO goes to device 0 unchanged and
/// completes when the device does. Tier 0 is that device.
#[derive(Debug, Default)]
pub struct Passthrough;

impl Policy for Passthrough {
    fn name(&self) -> &str {
        "passthrough"
    }

    fn tier_names(&self) -> Vec<String> {
        vec!["device".into()]
    }

    fn on_host_io(&mut self, _now_ns: TimeNs, io: HostIo, out: &mut Outbox) {
        out.device_ios.push((
            0,
            DeviceIo {
                tag: io.id,
                op: io.op,
                offset_bytes: io.offset_bytes,
                size_bytes: io.size_bytes,
            },
        ));
        let buf = BufRef::Host {
            host_id: io.id,
            offset_bytes: 0,
        };
        out.data_for(0, io.id, buf);
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn on_device_completion(
        &mut self,
        _now_ns: TimeNs,
        _device: usize,
        tag: u64,
        out: &mut Outbox,
    ) {
        out.complete.push((tag, 0));
    }

    fn on_device_error(
        &mut self,
        _now_ns: TimeNs,
        _device: usize,
        tag: u64,
        error: IoError,
        out: &mut Outbox,
    ) -> bool {
        out.failed.push((tag, error));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::IoError;

    #[test]
    fn enospc_is_no_space_by_number_or_by_kind() {
        let by_number = std::io::Error::from_raw_os_error(28);
        let by_kind = std::io::Error::new(std::io::ErrorKind::StorageFull, "member 2: full");
        assert_eq!(IoError::from_io(&by_number), IoError::NoSpace);
        assert_eq!(IoError::from_io(&by_kind), IoError::NoSpace);
        let eio = std::io::Error::from_raw_os_error(5);
        assert_eq!(IoError::from_io(&eio), IoError::Io);
    }
}
