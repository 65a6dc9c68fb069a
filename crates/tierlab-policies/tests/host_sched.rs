//! The CFQ-like host scheduler (`host_sched`): one case computed by hand
//! and randomized invariants, both through a small harness: a device that
//! serves one IO at a time in arrival order, with a fixed service time per
//! queue, and arrivals at given instants. Events at one instant: device
//! completion, then arrivals, then one `dispatch` call.
//!
//! `TIERLAB_PROP_CASES=N` runs N random cases instead of the default.

use std::collections::VecDeque;

use tierlab_core::TimeNs;
use tierlab_policies::host_sched::{
    Cfq, CfqParams, CfqStats, FifoParams, HostSched, HostSchedulerParams,
};

const MS: TimeNs = 1_000_000;

/// Arrival: (time, queue, id). Returns (id, queue, dispatch time) in
/// dispatch order, the completion times by id, and the scheduler's stats.
struct Outcome {
    dispatched: Vec<(u32, u32, TimeNs)>,
    completed: Vec<(u32, TimeNs)>,
    stats: CfqStats,
}

fn run(
    params: &CfqParams,
    service_ns: &[TimeNs],
    mut arrivals: Vec<(TimeNs, u32, u32)>,
    mut check: impl FnMut(&Cfq<u32>, TimeNs, Option<TimeNs>),
) -> Outcome {
    arrivals.sort_by_key(|a| a.0);
    let mut arrivals: VecDeque<_> = arrivals.into();
    let mut cfq: Cfq<u32> = Cfq::new(params).unwrap();
    // The device: FIFO, one at a time.
    let mut device: VecDeque<(u32, u32)> = VecDeque::new();
    let mut busy_until: Option<TimeNs> = None;
    let mut wake: Option<TimeNs> = None;
    let mut out = Vec::new();
    let mut o = Outcome {
        dispatched: Vec::new(),
        completed: Vec::new(),
        stats: CfqStats::default(),
    };
    let mut now = 0;
    loop {
        let next = [busy_until, arrivals.front().map(|a| a.0), wake]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else { break };
        assert!(t >= now);
        now = t;
        if busy_until == Some(now) {
            let (q, id) = device.pop_front().unwrap();
            cfq.completed(q);
            o.completed.push((id, now));
            busy_until = device.front().map(|(q, _)| now + service_ns[*q as usize]);
        }
        while arrivals.front().is_some_and(|a| a.0 == now) {
            let (_, q, id) = arrivals.pop_front().unwrap();
            cfq.enqueue(q, id);
        }
        if wake.is_some_and(|w| w <= now) {
            wake = None;
        }
        out.clear();
        let w = cfq.dispatch(now, &mut out);
        if let Some(w) = w {
            assert!(w > now, "a wake-up in the past: {w} at {now}");
            wake = Some(w);
        }
        for &(q, id) in &out {
            o.dispatched.push((id, q, now));
            if device.is_empty() {
                busy_until = Some(now + service_ns[q as usize]);
            }
            device.push_back((q, id));
        }
        check(&cfq, now, w);
    }
    o.stats = cfq.stats();
    o
}

/// Two tenants, A (queue 0, 10 ms an IO) and B (queue 1, 30 ms), slice
/// 50 ms, idle 8 ms, quantum 2. A1-A3 and B1-B3 at 0, A4 at 35 ms, A5 at
/// 60 ms. By hand:
/// - 0: A's turn (A was first), A1 and A2 sent (quantum 2), slice to 50;
/// - 10: A1 done, A3 sent; 20: A2 done, A3 still in the device: wait;
/// - 30: A3 done, A empty: idle until 38 (B waits, the device is idle);
/// - 35: A4 arrives within the idle wait: sent at once; 45: done, idle
///   until min(53, slice end 50) = 50;
/// - 50: A's slice is over: B's turn, B1 and B2 sent, slice to 100;
///   B1 50-80, B2 80-110;
/// - 60: A5 arrives, waits for its turn; 80: B1 done, B3 sent (80 < 100);
/// - 110: B2 done, B's slice is over: A's turn, A5 sent (behind B3: B3
///   110-140, A5 140-150); 150: A5 done, idle until 158, which runs out.
#[test]
fn two_tenants_by_hand() {
    let params = CfqParams {
        slice_ms: 50.0,
        idle_ms: 8.0,
        quantum: 2,
        ..CfqParams::default()
    };
    let (a, b) = (0, 1);
    let arrivals = vec![
        (0, a, 1),
        (0, a, 2),
        (0, a, 3),
        (0, b, 11),
        (0, b, 12),
        (0, b, 13),
        (35 * MS, a, 4),
        (60 * MS, a, 5),
    ];
    let o = run(&params, &[10 * MS, 30 * MS], arrivals, |_, _, _| {});
    let got: Vec<(u32, TimeNs)> = o
        .dispatched
        .iter()
        .map(|&(id, _, t)| (id, t / MS))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, 0),
            (2, 0),
            (3, 10),
            (4, 35),
            (11, 50),
            (12, 50),
            (13, 80),
            (5, 110)
        ]
    );
    let done: Vec<(u32, TimeNs)> = o.completed.iter().map(|&(id, t)| (id, t / MS)).collect();
    assert_eq!(
        done,
        vec![
            (1, 10),
            (2, 20),
            (3, 30),
            (4, 45),
            (11, 80),
            (12, 110),
            (13, 140),
            (5, 150)
        ]
    );
    assert_eq!(
        o.stats,
        CfqStats {
            enqueued: 8,
            dispatched: 8,
            completed: 8,
            slices: 3,
            slices_expired: 2,
            idle_waits: 3,
            idle_timeouts: 1,
        }
    );
}

/// Without idling the same case switches to B as soon as A has nothing
/// queued and nothing in the device (30 ms), and A4 waits for its turn.
#[test]
fn without_idling_the_scheduler_switches_at_once() {
    let params = CfqParams {
        slice_ms: 50.0,
        idle_ms: 0.0,
        quantum: 2,
        ..CfqParams::default()
    };
    let arrivals = vec![
        (0, 0, 1),
        (0, 0, 2),
        (0, 0, 3),
        (0, 1, 11),
        (0, 1, 12),
        (0, 1, 13),
        (35 * MS, 0, 4),
    ];
    let o = run(&params, &[10 * MS, 30 * MS], arrivals, |_, _, _| {});
    let got: Vec<(u32, TimeNs)> = o
        .dispatched
        .iter()
        .map(|&(id, _, t)| (id, t / MS))
        .collect();
    // B: 30-60, 60-90; B3 at 60 (slice to 80); at 90 B's slice is over: A4.
    assert_eq!(
        got,
        vec![
            (1, 0),
            (2, 0),
            (3, 10),
            (11, 30),
            (12, 30),
            (13, 60),
            (4, 90)
        ]
    );
    assert_eq!(o.stats.idle_waits, 0);
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn cases(default: u64) -> u64 {
    std::env::var("TIERLAB_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Random tenants, arrivals, service times and parameters: every IO is
/// sent exactly once and completes; each queue's IOs go out in arrival
/// order; at most `quantum` of one queue are in the device; and the
/// scheduler never leaves the device idle with IOs waiting except while
/// idling, for at most `idle_ms` at a time (with `idle_ms` = 0: never).
#[test]
fn random_runs_keep_every_io_once_in_order_and_conserve_work() {
    for seed in 0..cases(300) {
        let mut rng = Rng(seed * 1_000_003 + 17);
        let tenants = 1 + rng.below(4) as u32;
        let params = CfqParams {
            slice_ms: (1 + rng.below(100)) as f64,
            idle_ms: if rng.below(3) == 0 {
                0.0
            } else {
                rng.below(20) as f64
            },
            quantum: 1 + rng.below(5) as u32,
            ..CfqParams::default()
        };
        let service: Vec<TimeNs> = (0..tenants).map(|_| (1 + rng.below(30)) * MS).collect();
        let n = rng.below(200);
        let arrivals: Vec<(TimeNs, u32, u32)> = (0..n)
            .map(|id| {
                let t = rng.below(2_000) * MS / 2;
                (t, rng.below(tenants as u64) as u32, id as u32)
            })
            .collect();
        // Arrival order per queue (the harness sorts by time, stably).
        let mut sorted = arrivals.clone();
        sorted.sort_by_key(|a| a.0);
        let idle_ns = (params.idle_ms * 1e6) as TimeNs;
        let mut idle_since: Option<TimeNs> = None;
        let o = run(&params, &service, arrivals, |cfq, now, wake| {
            if cfq.waiting() > 0 && cfq.in_device() == 0 {
                // Idle with IOs waiting: only while idling, with a wake-up.
                let w = wake.unwrap_or_else(|| {
                    panic!(
                        "seed {seed}: device idle, {} waiting, no wake-up",
                        cfq.waiting()
                    )
                });
                assert!(idle_ns > 0, "seed {seed}: idle without idling at {now}");
                let since = *idle_since.get_or_insert(now);
                assert!(w <= since + idle_ns, "seed {seed}: idles too long");
            } else {
                idle_since = None;
            }
        });
        let mut ids: Vec<u32> = o.dispatched.iter().map(|d| d.0).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..n as u32).collect::<Vec<_>>(),
            "seed {seed}: lost or twice"
        );
        assert_eq!(o.completed.len() as u64, n, "seed {seed}");
        for q in 0..tenants {
            let want: Vec<u32> = sorted.iter().filter(|a| a.1 == q).map(|a| a.2).collect();
            let got: Vec<u32> = o
                .dispatched
                .iter()
                .filter(|d| d.1 == q)
                .map(|d| d.0)
                .collect();
            assert_eq!(got, want, "seed {seed}: queue {q} out of order");
        }
        // At most `quantum` of one queue in the device at any instant.
        let done_at: std::collections::HashMap<u32, TimeNs> = o.completed.iter().copied().collect();
        for &(id, q, t) in &o.dispatched {
            let in_device = o
                .dispatched
                .iter()
                .filter(|&&(j, r, s)| r == q && s <= t && done_at[&j] > t && j != id)
                .count();
            assert!(
                in_device < params.quantum as usize,
                "seed {seed}: queue {q} over its quantum at {t}"
            );
        }
        assert_eq!(o.stats.dispatched, n);
        assert_eq!(o.stats.completed, n);
    }
}

/// The FIFO (`kind = "fifo"`), depth 2, in front of a device that serves
/// every IO it holds at once (independent disks), A (queue 0) 10 ms an IO,
/// B (queue 1) 30 ms. Arrivals: B1 and A1 at 0 (in that order), A2 at 5,
/// B2 at 6, A3 at 7 ms. By hand:
/// - 0: B1 (done 30) and A1 (done 10) sent: the depth is full;
/// - 5, 6, 7: A2, B2, A3 held;
/// - 10: A1 done, A2 sent (done 20); 20: A2 done, B2 sent, though A3's
///   queue is the faster one (arrival order; done 50);
/// - 30: B1 done, A3 sent (done 40); 40: A3 done; 50: B2 done.
#[test]
fn fifo_depth_two_by_hand() {
    let params = HostSchedulerParams::Fifo(FifoParams { depth: 2 });
    let mut sched: HostSched<&str> = HostSched::new(&params).unwrap();
    let service_ns = [10 * MS, 30 * MS];
    let mut arrivals: VecDeque<(TimeNs, u32, &str)> = [
        (0, 1, "B1"),
        (0, 0, "A1"),
        (5 * MS, 0, "A2"),
        (6 * MS, 1, "B2"),
        (7 * MS, 0, "A3"),
    ]
    .into();
    // In the device: (done at, queue, id).
    let mut device: Vec<(TimeNs, u32, &str)> = Vec::new();
    let mut dispatched = Vec::new();
    let mut completed = Vec::new();
    let mut out = Vec::new();
    while let Some(now) = device
        .iter()
        .map(|d| d.0)
        .chain(arrivals.front().map(|a| a.0))
        .min()
    {
        device.sort_by_key(|d| d.0);
        while device.first().is_some_and(|d| d.0 == now) {
            let (_, q, id) = device.remove(0);
            sched.completed(q);
            completed.push((id, now / MS));
        }
        while arrivals.front().is_some_and(|a| a.0 == now) {
            let (_, q, id) = arrivals.pop_front().unwrap();
            sched.enqueue(q, id);
        }
        assert_eq!(sched.dispatch(now, &mut out), None, "a FIFO never idles");
        for (q, id) in out.drain(..) {
            dispatched.push((id, now / MS));
            device.push((now + service_ns[q as usize], q, id));
        }
        assert!(device.len() <= 2, "over the depth at {now}");
    }
    assert_eq!(
        dispatched,
        vec![("B1", 0), ("A1", 0), ("A2", 10), ("B2", 20), ("A3", 30)]
    );
    assert_eq!(
        completed,
        vec![("A1", 10), ("A2", 20), ("B1", 30), ("A3", 40), ("B2", 50)]
    );
    assert_eq!(sched.waiting(), 0);
    let HostSched::Fifo(fifo) = &sched else {
        panic!("not a FIFO")
    };
    assert_eq!((fifo.stats().dispatched, fifo.stats().completed), (5, 5));
}
