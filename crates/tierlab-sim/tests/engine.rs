//! The event loop and drivers against a device whose timing is known
//! exactly, so every expectation is hand-computed.

use std::collections::VecDeque;

use tierlab_core::device::{DeviceModel, DeviceState};
use tierlab_core::policy::Passthrough;
use tierlab_core::{Completion, DeviceIo, NS_PER_S, Op, TimeNs};
use tierlab_sim::{Counts, DriverMode, Observer, Region, Simulation, StopAfter, Tenant};
use tierlab_trace::{DeviceTable, IoRecord, RecordStream, TimeBase};

/// `servers` parallel servers, each IO takes exactly `latency_ns`, FIFO queue.
struct Fixed {
    latency_ns: TimeNs,
    servers: usize,
    queue: VecDeque<DeviceIo>,
    busy: Vec<(TimeNs, DeviceIo)>,
    log: Vec<(TimeNs, DeviceIo)>,
}

impl Fixed {
    fn new(latency_ns: TimeNs, servers: usize) -> Fixed {
        Fixed {
            latency_ns,
            servers,
            queue: VecDeque::new(),
            busy: Vec::new(),
            log: Vec::new(),
        }
    }
}

impl DeviceModel for Fixed {
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        self.log.push((now_ns, io));
        if self.busy.len() < self.servers {
            self.busy.push((now_ns + self.latency_ns, io));
        } else {
            self.queue.push_back(io);
        }
    }
    fn next_event_ns(&self) -> Option<TimeNs> {
        self.busy.iter().map(|b| b.0).min()
    }
    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        while let Some(i) = (0..self.busy.len())
            .filter(|&i| self.busy[i].0 <= now_ns)
            .min_by_key(|&i| self.busy[i].0)
        {
            let (t, io) = self.busy.remove(i);
            done.push(Completion {
                tag: io.tag,
                done_ns: t,
            });
            if let Some(next) = self.queue.pop_front() {
                self.busy.push((t + self.latency_ns, next));
            }
        }
    }
    fn capacity_bytes(&self) -> u64 {
        1 << 40
    }
    fn state(&self) -> DeviceState {
        if self.busy.is_empty() {
            DeviceState::Idle
        } else {
            DeviceState::Read
        }
    }
    fn in_flight(&self) -> usize {
        self.busy.len() + self.queue.len()
    }
}

struct Records {
    v: std::vec::IntoIter<IoRecord>,
    devices: DeviceTable,
}

fn records(times_ns: &[u64]) -> Box<dyn RecordStream + Send> {
    let v: Vec<IoRecord> = times_ns
        .iter()
        .enumerate()
        .map(|(i, &t)| IoRecord {
            time_ns: t,
            offset_bytes: i as u64 * 4096,
            size_bytes: 4096,
            device_id: 0,
            op: Op::Read,
            response_ns: None,
        })
        .collect();
    Box::new(Records {
        v: v.into_iter(),
        devices: ["d".to_string()].into_iter().collect(),
    })
}

impl RecordStream for Records {
    fn next_record(&mut self) -> tierlab_trace::Result<Option<IoRecord>> {
        Ok(self.v.next())
    }
    fn devices(&self) -> &DeviceTable {
        &self.devices
    }
    fn time_base(&self) -> TimeBase {
        TimeBase::Relative
    }
}

/// Records every host IO's (arrival, done).
#[derive(Default)]
struct Log(Vec<(TimeNs, TimeNs, u32)>);

impl Observer for Log {
    fn host_io(&mut self, a: TimeNs, d: TimeNs, _op: Op, _s: u32, _tier: u16, tenant: u32) {
        self.0.push((a, d, tenant));
    }
    fn device_submit(&mut self, _: usize, _: TimeNs) {}
    fn device_complete(&mut self, _: usize, _: TimeNs, _: TimeNs, _: Op, _: u32) {}
    fn device_state(&mut self, _: usize, _: TimeNs, _: DeviceState) {}
}

fn tenant(times: &[u64], mode: DriverMode, stop: StopAfter, cap: Option<f64>) -> Tenant {
    Tenant::new("t", records(times), mode, stop, None, cap).unwrap()
}

#[test]
fn open_loop_replays_timestamps_and_queues_behind_a_busy_device() {
    // One server, 10 µs each; arrivals at 0, 5, 100 µs (trace starts at 1 s).
    let t = tenant(
        &[NS_PER_S, NS_PER_S + 5_000, NS_PER_S + 100_000],
        DriverMode::OpenLoop { speed: 1.0 },
        StopAfter::default(),
        None,
    );
    let mut sim = Simulation::new(
        Box::new(Passthrough),
        vec![Box::new(Fixed::new(10_000, 1))],
        vec![t],
    );
    let mut log = Log::default();
    let out = sim.run(&mut log, None).unwrap();
    // Second IO waits for the first: done at 20 µs, latency 15 µs.
    assert_eq!(
        log.0,
        vec![(0, 10_000, 0), (5_000, 20_000, 0), (100_000, 110_000, 0)]
    );
    assert_eq!(
        (out.host_ios, out.host_ios_unfinished, out.end_ns),
        (3, 0, 110_000)
    );
}

#[test]
fn speed_factor_scales_arrivals() {
    let t = tenant(
        &[0, 1_000_000, 2_000_000],
        DriverMode::OpenLoop { speed: 4.0 },
        StopAfter::default(),
        None,
    );
    let mut sim = Simulation::new(
        Box::new(Passthrough),
        vec![Box::new(Fixed::new(1_000, 8))],
        vec![t],
    );
    let mut log = Log::default();
    sim.run(&mut log, None).unwrap();
    let arrivals: Vec<TimeNs> = log.0.iter().map(|x| x.0).collect();
    assert_eq!(arrivals, vec![0, 250_000, 500_000]);
}

#[test]
fn closed_loop_keeps_iodepth_outstanding_littles_law() {
    // 4 servers of 100 µs, iodepth 4: every IO takes exactly 100 µs, 40k IOPS.
    let n = 4_000;
    let times = vec![0u64; n];
    let t = tenant(
        &times,
        DriverMode::ClosedLoop { iodepth: 4 },
        StopAfter::default(),
        None,
    );
    let mut sim = Simulation::new(
        Box::new(Passthrough),
        vec![Box::new(Fixed::new(100_000, 4))],
        vec![t],
    );
    let mut c = Counts::default();
    let out = sim.run(&mut c, None).unwrap();
    assert_eq!(c.host_ios, n as u64);
    assert_eq!(out.end_ns, (n as u64 / 4) * 100_000);
    assert_eq!(c.host_latency_sum_ns, n as u128 * 100_000);
    // iodepth 8 on 4 servers: half the time queued, latency 200 µs, same throughput.
    let t = tenant(
        &times,
        DriverMode::ClosedLoop { iodepth: 8 },
        StopAfter::default(),
        None,
    );
    let mut sim = Simulation::new(
        Box::new(Passthrough),
        vec![Box::new(Fixed::new(100_000, 4))],
        vec![t],
    );
    let mut c = Counts::default();
    let out = sim.run(&mut c, None).unwrap();
    assert_eq!(out.end_ns, (n as u64 / 4) * 100_000);
    // The first 4 IOs wait 0, then every IO waits one service time: mean → 200 µs.
    let mean = c.host_latency_sum_ns as f64 / n as f64;
    assert!((mean - 200_000.0).abs() < 200.0, "mean latency {mean}");
}

#[test]
fn closed_loop_stops_after_bytes_or_duration() {
    let times = vec![0u64; 1000];
    let t = tenant(
        &times,
        DriverMode::ClosedLoop { iodepth: 2 },
        StopAfter {
            total_bytes: Some(40 * 4096),
            ..Default::default()
        },
        None,
    );
    let mut sim = Simulation::new(
        Box::new(Passthrough),
        vec![Box::new(Fixed::new(1_000, 2))],
        vec![t],
    );
    let mut c = Counts::default();
    sim.run(&mut c, None).unwrap();
    assert_eq!(c.host_ios, 40);
    let t = tenant(
        &times,
        DriverMode::ClosedLoop { iodepth: 1 },
        StopAfter {
            duration_ns: Some(50_000),
            ..Default::default()
        },
        None,
    );
    let mut sim = Simulation::new(
        Box::new(Passthrough),
        vec![Box::new(Fixed::new(1_000, 1))],
        vec![t],
    );
    let mut c = Counts::default();
    sim.run(&mut c, None).unwrap();
    assert_eq!(c.host_ios, 50, "IOs issued at 0, 1, ... 49 µs");
}

#[test]
fn iops_cap_is_a_per_second_token_bucket() {
    // Demand: closed loop, 1 µs IOs — could do ~10^6/s. Cap 100 IOPS for 3.5 s.
    let times = vec![0u64; 10_000];
    let t = tenant(
        &times,
        DriverMode::ClosedLoop { iodepth: 10 },
        StopAfter {
            duration_ns: Some(3_500_000_000),
            ..Default::default()
        },
        Some(100.0),
    );
    let mut sim = Simulation::new(
        Box::new(Passthrough),
        vec![Box::new(Fixed::new(1_000, 16))],
        vec![t],
    );
    let mut log = Log::default();
    sim.run(&mut log, None).unwrap();
    let mut per_second = [0u32; 4];
    for (a, _, _) in &log.0 {
        per_second[(*a / NS_PER_S) as usize] += 1;
    }
    // 100 in each full second, and the 4th second is cut by the duration at 3.5 s.
    assert_eq!(per_second, [100, 100, 100, 100]);
}

#[test]
fn tenants_share_a_device_and_regions_fold_offsets() {
    let region = Region {
        offset_bytes: 1 << 30,
        size_bytes: 8192,
    };
    let a = Tenant::new(
        "a",
        records(&[0, 0, 0]),
        DriverMode::ClosedLoop { iodepth: 1 },
        StopAfter::default(),
        Some(region),
        None,
    )
    .unwrap();
    let b = Tenant::new(
        "b",
        records(&[0, 0]),
        DriverMode::ClosedLoop { iodepth: 1 },
        StopAfter::default(),
        None,
        None,
    )
    .unwrap();
    let mut sim = Simulation::new(
        Box::new(Passthrough),
        vec![Box::new(Fixed::new(1_000, 1))],
        vec![a, b],
    );
    let mut log = Log::default();
    sim.run(&mut log, None).unwrap();
    assert_eq!(log.0.iter().filter(|x| x.2 == 0).count(), 3);
    assert_eq!(log.0.iter().filter(|x| x.2 == 1).count(), 2);
    assert_eq!(
        sim.tenants()[0].folded,
        1,
        "offset 8192 folded into an 8 KiB region"
    );
}

#[test]
fn runs_are_deterministic() {
    let run = || {
        let times: Vec<u64> = (0..5000u64)
            .map(|i| i * 7919 % 1_000_000 + i * 1000)
            .collect();
        let t = tenant(
            &times,
            DriverMode::OpenLoop { speed: 2.0 },
            StopAfter::default(),
            None,
        );
        let mut sim = Simulation::new(
            Box::new(Passthrough),
            vec![Box::new(Fixed::new(3_000, 2))],
            vec![t],
        );
        let mut log = Log::default();
        sim.run(&mut log, None).unwrap();
        (log.0, sim.tenants()[0].retimed)
    };
    assert_eq!(run(), run());
    assert!(run().1 > 0, "out-of-order trace times are counted");
}

#[test]
fn bad_driver_parameters_are_errors() {
    for (mode, cap, key) in [
        (DriverMode::OpenLoop { speed: 0.0 }, None, "driver.speed"),
        (
            DriverMode::ClosedLoop { iodepth: 0 },
            None,
            "driver.iodepth",
        ),
        (DriverMode::OpenLoop { speed: 1.0 }, Some(-5.0), "iops_cap"),
    ] {
        let e = Tenant::new("x", records(&[0]), mode, StopAfter::default(), None, cap)
            .err()
            .unwrap();
        assert_eq!(e.key(), key, "{e}");
    }
}
