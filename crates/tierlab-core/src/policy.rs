//! Storage policies: sans-IO state machines between the host and the
//! devices. A policy is told what happened (a host IO arrived, a device IO
//! completed, a timer fired) and answers through an `Outbox` with what
//! should happen (device IOs to send, host IOs that are now complete,
//! timers to set, actions such as capping a tenant). It never sees a clock
//! except the `now_ns` it is given, so the simulator and the real executor
//! drive it unchanged.

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

/// What a policy wants done. Cleared by the executor after each call.
#[derive(Debug, Default)]
pub struct Outbox {
    /// (device index, IO): device IOs to submit now.
    pub device_ios: Vec<(usize, DeviceIo)>,
    /// (host IO id, tier index): host IOs now complete, and which tier
    /// served them (an index into `Policy::tier_names`).
    pub complete: Vec<(u64, u16)>,
    /// (fire time, timer id): timers to set.
    pub timers: Vec<(TimeNs, u64)>,
    pub actions: Vec<Action>,
}

impl Outbox {
    pub fn clear(&mut self) {
        self.device_ios.clear();
        self.complete.clear();
        self.timers.clear();
        self.actions.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.device_ios.is_empty()
            && self.complete.is_empty()
            && self.timers.is_empty()
            && self.actions.is_empty()
    }
}

pub trait Policy {
    fn name(&self) -> &str;
    /// Names of the tiers `Outbox::complete` refers to (e.g. ["memory", "flash"]).
    fn tier_names(&self) -> Vec<String>;
    fn on_host_io(&mut self, now_ns: TimeNs, io: HostIo, out: &mut Outbox);
    fn on_device_completion(&mut self, now_ns: TimeNs, device: usize, tag: u64, out: &mut Outbox);
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
}
