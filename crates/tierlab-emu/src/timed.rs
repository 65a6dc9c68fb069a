//! The wall-clock executor of one device model.
//!
//! IOs arrive at real instants ([`DeviceHandle::submit`] stamps them with
//! the monotonic clock); one thread owns the model, submits each IO at its
//! arrival instant, sleeps until the model's next event and runs each IO's
//! completion callback when the model completes it. The model is the same
//! sans-IO state machine the simulator drives: only the clock differs
//! (nanoseconds since [`TimedDevice::start`] instead of virtual time).
//!
//! The callback runs *at or after* the model's completion instant: the
//! difference (`lateness`) is the emulation's timing error, measured for
//! every IO. A late callback does not delay the model: the next IO in the
//! model's queue started at the model's own completion instant, so
//! throughput and queueing follow the model exactly and only the moment the
//! client hears of a completion carries the error.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use tierlab_core::device::DeviceModel;
use tierlab_core::metrics::LatencyHistogram;
use tierlab_core::{Completion, DeviceIo, Op, TimeNs};

use crate::EmuError;

/// What to do when an IO completes (reply to the client).
pub type Done = Box<dyn FnOnce() + Send>;

/// Builds the model on the device thread (models need not be `Send`).
/// Builds the model on the device thread; its error (a bad parameter, a
/// config error) is the caller's to render.
pub type ModelFactory = Box<
    dyn FnOnce() -> Result<Box<dyn DeviceModel>, Box<dyn std::error::Error + Send + Sync>> + Send,
>;

struct Request {
    op: Op,
    offset_bytes: u64,
    size_bytes: u32,
    arrival_ns: TimeNs,
    done: Done,
}

enum Msg {
    Io(Request),
    Stop,
}

/// Submits IOs to a running [`TimedDevice`]; cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct DeviceHandle {
    tx: Sender<Msg>,
    origin: Instant,
}

impl DeviceHandle {
    /// Nanoseconds since the device started (the model's clock).
    pub fn now_ns(&self) -> TimeNs {
        self.origin.elapsed().as_nanos() as TimeNs
    }

    /// Submits an IO arriving now; `done` runs when the model completes
    /// it. False (and `done` dropped unrun) when the device has stopped.
    pub fn submit(&self, op: Op, offset_bytes: u64, size_bytes: u32, done: Done) -> bool {
        self.submit_arrived(self.now_ns(), op, offset_bytes, size_bytes, done)
    }

    /// Submits an IO that arrived at `arrival_ns` ([`DeviceHandle::now_ns`]
    /// read when the request came in, before the data was moved).
    pub fn submit_arrived(
        &self,
        arrival_ns: TimeNs,
        op: Op,
        offset_bytes: u64,
        size_bytes: u32,
        done: Done,
    ) -> bool {
        let r = Request {
            op,
            offset_bytes,
            size_bytes,
            arrival_ns,
            done,
        };
        self.tx.send(Msg::Io(r)).is_ok()
    }
}

/// Running totals, readable while the device runs ([`TimedDevice::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Counters {
    /// IOs completed (reads + writes + flushes + trims).
    pub ios: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Model time with at least one IO in the model, closed at the last
    /// idle instant (see [`Counters::busy_ns_at`]).
    pub busy_ns: u64,
    /// When the current busy period began (meaningful while `in_flight > 0`).
    pub busy_since_ns: TimeNs,
    /// IOs submitted to the model and not yet completed.
    pub in_flight: u64,
    pub max_in_flight: u64,
    /// Σ (model completion − arrival) over completed IOs.
    pub model_latency_sum_ns: u128,
    /// Σ (callback run − model completion) over completed IOs.
    pub lateness_sum_ns: u128,
    pub lateness_max_ns: u64,
}

impl Counters {
    /// Busy time up to `now_ns`, the open busy period included.
    pub fn busy_ns_at(&self, now_ns: TimeNs) -> u64 {
        if self.in_flight > 0 {
            self.busy_ns + now_ns.saturating_sub(self.busy_since_ns)
        } else {
            self.busy_ns
        }
    }
}

/// Mean and percentiles of one latency population, nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl LatencySummary {
    fn of(h: &LatencyHistogram) -> LatencySummary {
        let Some([p50, p99]) = h.percentiles_ns([(50, 100), (99, 100)]) else {
            return LatencySummary::default();
        };
        LatencySummary {
            count: h.count(),
            mean_ns: (h.sum_ns() / h.count() as u128) as u64,
            p50_ns: p50,
            p99_ns: p99,
            max_ns: h.max_ns().unwrap_or(0),
        }
    }
}

/// What the emulation did, at the end (docs/emulate.md defines each field).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EmuReport {
    /// Wall-clock seconds from start to stop.
    pub elapsed_s: f64,
    pub ios: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// `ios / elapsed_s`.
    pub iops: f64,
    /// `100 × busy / elapsed`: the share of time the model held at least
    /// one IO (what iostat's %util of an ideal block layer would show).
    pub util_pct: f64,
    /// Time-averaged IOs in the model (Σ model latency / elapsed).
    pub mean_in_flight: f64,
    pub max_in_flight: u64,
    /// The model's latency (arrival → model completion) of reads.
    pub read_latency: LatencySummary,
    /// The same for writes.
    pub write_latency: LatencySummary,
    /// Model completion → completion callback run (the reply sent): the
    /// emulation's timing error.
    pub lateness: LatencySummary,
}

/// A device model run in wall-clock time on its own thread.
pub struct TimedDevice {
    handle: DeviceHandle,
    live: Arc<Mutex<Counters>>,
    thread: Option<JoinHandle<EmuReport>>,
}

impl TimedDevice {
    /// Starts the device thread, which builds the model with `factory`;
    /// the factory's error is returned here.
    pub fn start(factory: ModelFactory) -> Result<TimedDevice, EmuError> {
        let (tx, rx) = mpsc::channel();
        let (built_tx, built_rx) =
            mpsc::channel::<Result<(), Box<dyn std::error::Error + Send + Sync>>>();
        let origin = Instant::now();
        let live = Arc::new(Mutex::new(Counters::default()));
        let thread_live = live.clone();
        let thread = std::thread::Builder::new()
            .name("tierlab-emu-device".into())
            .spawn(move || {
                let model = match factory() {
                    Ok(m) => {
                        let _ = built_tx.send(Ok(()));
                        m
                    }
                    Err(e) => {
                        let _ = built_tx.send(Err(e));
                        return Driver::new(origin).report();
                    }
                };
                Driver::new(origin).run(model, rx, &thread_live)
            })
            .map_err(|e| EmuError::Thread(format!("cannot start the device thread: {e}")))?;
        match built_rx.recv() {
            Ok(Ok(())) => Ok(TimedDevice {
                handle: DeviceHandle { tx, origin },
                live,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(EmuError::Model(e))
            }
            Err(_) => Err(EmuError::Thread(
                "the device thread ended while building the model".into(),
            )),
        }
    }

    pub fn handle(&self) -> DeviceHandle {
        self.handle.clone()
    }

    /// Nanoseconds since start.
    pub fn now_ns(&self) -> TimeNs {
        self.handle.now_ns()
    }

    /// The running totals as of the device thread's last step.
    pub fn counters(&self) -> Counters {
        *self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops accepting IOs, completes those in the model (at their model
    /// times) and returns the report.
    pub fn finish(mut self) -> EmuReport {
        self.stop().expect("not yet stopped")
    }

    fn stop(&mut self) -> Option<EmuReport> {
        let thread = self.thread.take()?;
        let _ = self.handle.tx.send(Msg::Stop);
        Some(
            thread
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        )
    }
}

impl Drop for TimedDevice {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = self.stop();
        }
    }
}

struct Pending {
    op: Op,
    size_bytes: u32,
    arrival_ns: TimeNs,
    done: Done,
}

/// The device thread's state.
struct Driver {
    origin: Instant,
    pending: HashMap<u64, Pending>,
    next_tag: u64,
    /// The latest time the model was moved to (never decreases).
    model_now_ns: TimeNs,
    c: Counters,
    read_latency: LatencyHistogram,
    write_latency: LatencyHistogram,
    lateness: LatencyHistogram,
    done: Vec<Completion>,
}

impl Driver {
    fn new(origin: Instant) -> Driver {
        Driver {
            origin,
            pending: HashMap::new(),
            next_tag: 0,
            model_now_ns: 0,
            c: Counters::default(),
            read_latency: LatencyHistogram::new(),
            write_latency: LatencyHistogram::new(),
            lateness: LatencyHistogram::new(),
            done: Vec::new(),
        }
    }

    fn now_ns(&self) -> TimeNs {
        self.origin.elapsed().as_nanos() as TimeNs
    }

    fn run(
        mut self,
        mut model: Box<dyn DeviceModel>,
        rx: Receiver<Msg>,
        live: &Mutex<Counters>,
    ) -> EmuReport {
        precise_sleeps();
        let model = &mut *model;
        let mut open = true;
        loop {
            if !open && self.pending.is_empty() {
                break;
            }
            let now = self.now_ns();
            let wait = model
                .next_event_ns()
                .map(|t| Duration::from_nanos(t.saturating_sub(now)));
            if open {
                let first = match wait {
                    Some(d) if d.is_zero() => rx.try_recv().map_err(|e| match e {
                        TryRecvError::Empty => RecvTimeoutError::Timeout,
                        TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                    }),
                    Some(d) => rx.recv_timeout(d),
                    None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                };
                let mut next = match first {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => {
                        open = false;
                        None
                    }
                };
                while let Some(m) = next {
                    match m {
                        Msg::Io(r) => self.submit(model, r),
                        Msg::Stop => open = false,
                    }
                    next = if open { rx.try_recv().ok() } else { None };
                }
            } else if let Some(d) = wait {
                std::thread::sleep(d);
            } else {
                // Stopping, IOs pending, and the model has no next event:
                // it lost them (a model bug). Their callbacks are dropped.
                break;
            }
            let now = self.now_ns().max(self.model_now_ns);
            self.advance(model, now);
            *live.lock().unwrap_or_else(|p| p.into_inner()) = self.c;
        }
        self.report()
    }

    fn submit(&mut self, model: &mut dyn DeviceModel, r: Request) {
        // Arrivals are stamped by the submitting thread; one stamped before
        // the model's latest step is submitted at that step (the model's
        // time never goes back).
        let t = r.arrival_ns.max(self.model_now_ns);
        self.advance(model, t);
        let tag = self.next_tag;
        self.next_tag += 1;
        if self.c.in_flight == 0 {
            self.c.busy_since_ns = t;
        }
        self.c.in_flight += 1;
        self.c.max_in_flight = self.c.max_in_flight.max(self.c.in_flight);
        model.submit(
            t,
            DeviceIo {
                tag,
                op: r.op,
                offset_bytes: r.offset_bytes,
                size_bytes: r.size_bytes,
            },
        );
        self.pending.insert(
            tag,
            Pending {
                op: r.op,
                size_bytes: r.size_bytes,
                arrival_ns: t,
                done: r.done,
            },
        );
    }

    /// Moves the model to `t` and runs the callbacks of the IOs it completed.
    fn advance(&mut self, model: &mut dyn DeviceModel, t: TimeNs) {
        model.advance(t, &mut self.done);
        self.model_now_ns = t;
        for c in std::mem::take(&mut self.done) {
            let Some(p) = self.pending.remove(&c.tag) else {
                continue;
            };
            (p.done)();
            let replied_ns = self.now_ns();
            let c_done = c.done_ns.max(p.arrival_ns);
            let late = replied_ns.saturating_sub(c_done);
            self.lateness.record(late);
            let latency = c_done - p.arrival_ns;
            self.c.ios += 1;
            self.c.model_latency_sum_ns += latency as u128;
            self.c.lateness_sum_ns += late as u128;
            self.c.lateness_max_ns = self.c.lateness_max_ns.max(late);
            match p.op {
                Op::Read => {
                    self.c.reads += 1;
                    self.c.bytes_read += p.size_bytes as u64;
                    self.read_latency.record(latency);
                }
                Op::Write => {
                    self.c.writes += 1;
                    self.c.bytes_written += p.size_bytes as u64;
                    self.write_latency.record(latency);
                }
                Op::Flush | Op::Trim => self.c.flushes += 1,
            }
            self.c.in_flight -= 1;
            if self.c.in_flight == 0 {
                self.c.busy_ns += c_done.saturating_sub(self.c.busy_since_ns);
            }
        }
    }

    fn report(&self) -> EmuReport {
        let elapsed_ns = self.now_ns().max(1);
        let elapsed_s = elapsed_ns as f64 / 1e9;
        EmuReport {
            elapsed_s,
            ios: self.c.ios,
            reads: self.c.reads,
            writes: self.c.writes,
            flushes: self.c.flushes,
            bytes_read: self.c.bytes_read,
            bytes_written: self.c.bytes_written,
            iops: self.c.ios as f64 / elapsed_s,
            util_pct: 100.0 * self.c.busy_ns_at(self.model_now_ns) as f64 / elapsed_ns as f64,
            mean_in_flight: self.c.model_latency_sum_ns as f64 / elapsed_ns as f64,
            max_in_flight: self.c.max_in_flight,
            read_latency: LatencySummary::of(&self.read_latency),
            write_latency: LatencySummary::of(&self.write_latency),
            lateness: LatencySummary::of(&self.lateness),
        }
    }
}

/// Timer slack 1 ns for the calling thread (Linux's default, 50 us, would
/// add up to 50 us to every completion).
fn precise_sleeps() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long and only affects
    // the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::mpsc::channel;
    use tierlab_core::device::DeviceState;

    /// One server, FIFO, fixed service time.
    struct Fixed {
        service_ns: u64,
        queue: VecDeque<u64>,
        busy_until: Option<TimeNs>,
    }

    impl DeviceModel for Fixed {
        fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
            if self.busy_until.is_none() {
                self.busy_until = Some(now_ns + self.service_ns);
            }
            self.queue.push_back(io.tag);
        }
        fn next_event_ns(&self) -> Option<TimeNs> {
            self.busy_until
        }
        fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
            while let Some(t) = self.busy_until.filter(|&t| t <= now_ns) {
                let tag = self.queue.pop_front().expect("busy means queued");
                done.push(Completion { tag, done_ns: t });
                self.busy_until = (!self.queue.is_empty()).then_some(t + self.service_ns);
            }
        }
        fn capacity_bytes(&self) -> u64 {
            1 << 30
        }
        fn state(&self) -> DeviceState {
            DeviceState::Idle
        }
        fn in_flight(&self) -> usize {
            self.queue.len()
        }
    }

    fn fixed(service_ns: u64) -> ModelFactory {
        Box::new(move || {
            Ok(Box::new(Fixed {
                service_ns,
                queue: VecDeque::new(),
                busy_until: None,
            }) as Box<dyn DeviceModel>)
        })
    }

    #[test]
    fn completions_come_at_the_models_times_in_wall_clock() {
        // Ten IOs at once into a 2 ms FIFO server: the k-th completes at
        // k x 2 ms after the burst (model time), and the callback runs then.
        let dev = TimedDevice::start(fixed(2_000_000)).unwrap();
        let h = dev.handle();
        let (tx, rx) = channel();
        let t0 = Instant::now();
        for i in 0..10u64 {
            let tx = tx.clone();
            assert!(h.submit(
                Op::Read,
                i * 4096,
                4096,
                Box::new(move || tx.send((i, t0.elapsed())).unwrap())
            ));
        }
        let got: Vec<(u64, Duration)> = (0..10).map(|_| rx.recv().unwrap()).collect();
        let r = dev.finish();
        for (k, (i, at)) in got.iter().enumerate() {
            assert_eq!(*i, k as u64, "FIFO order");
            let want = Duration::from_millis(2 * (k as u64 + 1));
            assert!(
                *at >= want - Duration::from_micros(200) && *at < want + Duration::from_millis(20),
                "IO {k} at {at:?}, model says {want:?}"
            );
        }
        assert_eq!((r.ios, r.reads, r.bytes_read), (10, 10, 40960));
        assert_eq!(r.max_in_flight, 10);
        // Model latencies 2, 4, ..., 20 ms (arrivals within microseconds).
        let mean_ms = r.read_latency.mean_ns as f64 / 1e6;
        assert!((mean_ms - 11.0).abs() < 0.5, "{mean_ms}");
        assert!(
            r.lateness.count == 10 && r.lateness.max_ns < 20_000_000,
            "{r:?}"
        );
    }

    #[test]
    fn busy_time_follows_the_model_and_idle_gaps_are_not_busy() {
        let dev = TimedDevice::start(fixed(5_000_000)).unwrap();
        let h = dev.handle();
        for _ in 0..3 {
            let (tx, rx) = channel();
            h.submit(Op::Write, 0, 512, Box::new(move || tx.send(()).unwrap()));
            rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        let c = dev.counters();
        assert_eq!((c.ios, c.writes, c.in_flight), (3, 3, 0));
        // Exactly 3 x 5 ms of model busy time, whatever the wall clock did.
        assert_eq!(c.busy_ns, 15_000_000);
        let r = dev.finish();
        assert!(r.util_pct > 5.0 && r.util_pct < 50.0, "{}", r.util_pct);
        assert_eq!(r.write_latency.mean_ns, 5_000_000);
    }

    #[test]
    fn finish_completes_what_is_in_flight_and_a_failing_factory_is_an_error() {
        let dev = TimedDevice::start(fixed(3_000_000)).unwrap();
        let (tx, rx) = channel();
        for _ in 0..4 {
            let tx = tx.clone();
            dev.handle()
                .submit(Op::Flush, 0, 0, Box::new(move || tx.send(()).unwrap()));
        }
        let h = dev.handle();
        let r = dev.finish();
        assert_eq!((r.ios, r.flushes), (4, 4));
        assert_eq!(rx.try_iter().count(), 4);
        // After finish the handle refuses IOs (the callback is dropped).
        assert!(!h.submit(Op::Read, 0, 512, Box::new(|| panic!("ran"))));
        let e = TimedDevice::start(Box::new(|| Err("hdd: bad key".into())))
            .err()
            .unwrap();
        assert!(matches!(e, EmuError::Model(_)), "{e:?}");
        assert_eq!(e.to_string(), "hdd: bad key");
    }
}
