//! Carrying out a policy's `Outbox`: the one implementation every executor
//! (the simulator, the real executor, `tierlab serve`) calls, so the
//! checks and the order of effects cannot drift apart between them.
//!
//! Order: staging buffers the policy filled, device IOs (in the policy's
//! order; a write's data is taken when it is submitted, so before any
//! staging buffer is released), then host completions, host failures,
//! timers, actions, and last the staging buffers released.

use crate::policy::{Action, BufRef, IoError, Outbox};
use crate::{DeviceIo, Op, TimeNs};

/// A policy broke the executor protocol: a bug in the policy (or in a
/// stack built for devices too small), never the user's input.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyError {
    /// An IO for a device the stack does not have.
    NoSuchDevice {
        policy: String,
        device: usize,
        devices: usize,
    },
    /// An IO past the end of its device.
    BeyondDevice {
        policy: String,
        device: usize,
        offset_bytes: u64,
        end_bytes: u64,
        capacity_bytes: u64,
    },
    /// A data-moving executor got a device write with no data source.
    WriteWithoutData {
        policy: String,
        device: usize,
        size_bytes: u32,
    },
    /// Anything an executor checks itself (a host IO completed twice, a
    /// cap for a tenant that does not exist, a buffer that is not there).
    Other { policy: String, message: String },
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyError::NoSuchDevice {
                policy,
                device,
                devices,
            } => write!(
                f,
                "{policy} sent an IO to device {device}; the stack has {devices}"
            ),
            PolicyError::BeyondDevice {
                policy,
                device,
                offset_bytes,
                end_bytes,
                capacity_bytes,
            } => write!(
                f,
                "{policy}: IO [{offset_bytes}, {end_bytes}) is beyond the end of device \
                 {device} ({capacity_bytes} bytes); is the workload larger than the device? \
                 (set a tenant region or a bigger device)"
            ),
            PolicyError::WriteWithoutData {
                policy,
                device,
                size_bytes,
            } => write!(
                f,
                "{policy}: a write of {size_bytes} bytes to device {device} without saying \
                 where its data comes from"
            ),
            PolicyError::Other { policy, message } => write!(f, "{policy}: {message}"),
        }
    }
}

impl std::error::Error for PolicyError {}

/// Executors whose errors are messages (the real executor's).
impl From<PolicyError> for String {
    fn from(e: PolicyError) -> String {
        e.to_string()
    }
}

/// What an executor does with each item of an Outbox. `apply` checks the
/// policy's requests first; a sink only carries them out (and may refuse
/// with its own error, e.g. a host IO it does not know).
pub trait OutboxSink {
    type Error: From<PolicyError>;
    fn device_count(&self) -> usize;
    fn device_capacity_bytes(&self, device: usize) -> u64;
    /// Submit `io` to `device`; `data` is where a write's bytes come from
    /// or a read's bytes go (None when the executor moves no data).
    fn submit(
        &mut self,
        now_ns: TimeNs,
        device: usize,
        io: DeviceIo,
        data: Option<BufRef>,
    ) -> Result<(), Self::Error>;
    /// Host IO `host_id` is complete, served by tier `tier`.
    fn complete(&mut self, now_ns: TimeNs, host_id: u64, tier: u16) -> Result<(), Self::Error>;
    /// Host IO `host_id` failed with `error` (a device IO it needed
    /// failed). Executors whose devices never fail (the simulator) refuse.
    fn fail_host(
        &mut self,
        _now_ns: TimeNs,
        host_id: u64,
        error: IoError,
    ) -> Result<(), Self::Error> {
        Err(PolicyError::Other {
            policy: String::new(),
            message: format!(
                "failed host IO {host_id} ({}), but no device IO can fail in this executor",
                error.as_str()
            ),
        }
        .into())
    }
    /// Call the policy's `on_timer(timer_id)` at `at_ns` (never before now).
    fn timer(&mut self, now_ns: TimeNs, at_ns: TimeNs, timer_id: u64);
    fn cap_tenant(&mut self, tenant: u32, iops: Option<f64>) -> Result<(), Self::Error>;
    /// The policy no longer needs staging buffer `id`.
    fn release(&mut self, _staging_id: u64) {}
    /// Staging buffer `id` now holds `bytes` (made by the policy).
    fn fill(&mut self, _staging_id: u64, _bytes: Vec<u8>) {}
}

impl Outbox {
    /// Carries out everything in the outbox through `sink`, then clears
    /// it. `policy` names the policy in errors.
    pub fn apply<S: OutboxSink>(
        &mut self,
        policy: &str,
        now_ns: TimeNs,
        sink: &mut S,
    ) -> Result<(), S::Error> {
        let result = self.apply_inner(policy, now_ns, sink);
        self.clear();
        result
    }

    fn apply_inner<S: OutboxSink>(
        &mut self,
        policy: &str,
        now_ns: TimeNs,
        sink: &mut S,
    ) -> Result<(), S::Error> {
        // Policy-made bytes first: the device writes below take them.
        for (id, bytes) in self.fills.drain(..) {
            sink.fill(id, bytes);
        }
        let devices = sink.device_count();
        for i in 0..self.device_ios.len() {
            let (device, io) = self.device_ios[i];
            if device >= devices {
                return Err(PolicyError::NoSuchDevice {
                    policy: policy.into(),
                    device,
                    devices,
                }
                .into());
            }
            let capacity_bytes = sink.device_capacity_bytes(device);
            if io.end_bytes() > capacity_bytes {
                return Err(PolicyError::BeyondDevice {
                    policy: policy.into(),
                    device,
                    offset_bytes: io.offset_bytes,
                    end_bytes: io.end_bytes(),
                    capacity_bytes,
                }
                .into());
            }
            let data = if self.wants_data {
                // Usually the entry just before or at the same index.
                let found = self
                    .data
                    .iter()
                    .find(|(d, t, _)| *d == device && *t == io.tag)
                    .map(|x| x.2);
                if io.op == Op::Write && found.is_none() {
                    return Err(PolicyError::WriteWithoutData {
                        policy: policy.into(),
                        device,
                        size_bytes: io.size_bytes,
                    }
                    .into());
                }
                found
            } else {
                None
            };
            sink.submit(now_ns, device, io, data)?;
        }
        for i in 0..self.complete.len() {
            let (id, tier) = self.complete[i];
            sink.complete(now_ns, id, tier)?;
        }
        for i in 0..self.failed.len() {
            let (id, e) = self.failed[i];
            sink.fail_host(now_ns, id, e)?;
        }
        for &(at_ns, id) in &self.timers {
            sink.timer(now_ns, at_ns.max(now_ns), id);
        }
        for a in &self.actions {
            match a {
                Action::CapTenant { tenant, iops } => sink.cap_tenant(*tenant, *iops)?,
            }
        }
        for &id in &self.release {
            sink.release(id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log {
        events: Vec<String>,
    }

    impl OutboxSink for Log {
        type Error = PolicyError;
        fn device_count(&self) -> usize {
            2
        }
        fn device_capacity_bytes(&self, _device: usize) -> u64 {
            8192
        }
        fn submit(
            &mut self,
            now_ns: TimeNs,
            device: usize,
            io: DeviceIo,
            data: Option<BufRef>,
        ) -> Result<(), PolicyError> {
            self.events
                .push(format!("{now_ns} submit {device} {} {data:?}", io.tag));
            Ok(())
        }
        fn complete(&mut self, _now: TimeNs, host_id: u64, tier: u16) -> Result<(), PolicyError> {
            if host_id == 99 {
                return Err(PolicyError::Other {
                    policy: "p".into(),
                    message: "unknown host IO 99".into(),
                });
            }
            self.events.push(format!("complete {host_id} {tier}"));
            Ok(())
        }
        fn timer(&mut self, now_ns: TimeNs, at_ns: TimeNs, timer_id: u64) {
            self.events
                .push(format!("timer {now_ns} {at_ns} {timer_id}"));
        }
        fn cap_tenant(&mut self, tenant: u32, iops: Option<f64>) -> Result<(), PolicyError> {
            self.events.push(format!("cap {tenant} {iops:?}"));
            Ok(())
        }
        fn release(&mut self, id: u64) {
            self.events.push(format!("release {id}"));
        }
    }

    fn io(tag: u64, op: Op, offset_bytes: u64, size_bytes: u32) -> DeviceIo {
        DeviceIo {
            tag,
            op,
            offset_bytes,
            size_bytes,
        }
    }

    #[test]
    fn applies_in_order_and_clears() {
        let mut out = Outbox {
            wants_data: true,
            ..Default::default()
        };
        let staging = BufRef::Staging {
            id: 5,
            offset_bytes: 0,
        };
        out.device_ios.push((1, io(7, Op::Write, 0, 4096)));
        out.data_for(1, 7, staging);
        out.device_ios.push((0, io(8, Op::Read, 4096, 4096)));
        out.complete.push((3, 1));
        out.timers.push((5, 42)); // in the past: fires at now
        out.actions.push(Action::CapTenant {
            tenant: 0,
            iops: Some(10.0),
        });
        out.release.push(5);
        let mut log = Log::default();
        out.apply("p", 100, &mut log).unwrap();
        assert_eq!(
            log.events,
            [
                format!("100 submit 1 7 {:?}", Some(staging)),
                "100 submit 0 8 None".to_string(),
                "complete 3 1".into(),
                "timer 100 100 42".into(),
                "cap 0 Some(10.0)".into(),
                "release 5".into(),
            ]
        );
        assert!(out.is_empty() && out.wants_data);
    }

    #[test]
    fn refuses_what_a_policy_must_not_ask() {
        let mut log = Log::default();
        let mut out = Outbox::default();
        out.device_ios.push((2, io(1, Op::Read, 0, 512)));
        let e = out.apply("p", 0, &mut log).unwrap_err();
        assert!(
            matches!(e, PolicyError::NoSuchDevice { device: 2, .. }),
            "{e}"
        );
        assert!(out.is_empty(), "cleared after an error too");

        out.device_ios.push((0, io(1, Op::Read, 8192 - 512, 1024)));
        let e = out.apply("p", 0, &mut log).unwrap_err();
        assert!(e.to_string().contains("[7680, 8704)"), "{e}");

        out.wants_data = true;
        out.device_ios.push((0, io(1, Op::Write, 0, 512)));
        let e = out.apply("p", 0, &mut log).unwrap_err();
        assert!(matches!(e, PolicyError::WriteWithoutData { .. }), "{e}");

        // A read without a buffer is fine (its bytes are dropped).
        out.device_ios.push((0, io(1, Op::Read, 0, 512)));
        out.apply("p", 0, &mut log).unwrap();

        // The sink's own refusal comes through.
        out.complete.push((99, 0));
        let e = out.apply("p", 0, &mut log).unwrap_err();
        assert!(e.to_string().contains("unknown host IO 99"), "{e}");
        assert!(log.events.iter().all(|e| !e.contains("complete 99")));
    }
}
