//! Tenant IOPS schedules, a policy's cap on top of a tenant's own limit, and
//! the busy-rate QoS policy wired from a config (docs/qos.md).

use std::path::Path;

use tierlab_core::policy::{Action, HostIo, Outbox, Policy};
use tierlab_core::{DeviceIo, NS_PER_S, TimeNs};
use tierlab_sim::config::parse;
use tierlab_sim::run::run;
use tierlab_sim::{DriverMode, IopsBudget, Observer, Simulation, StopAfter, Tenant};
use tierlab_stack::standard_device;

/// A fast device (DRAM) and one closed-loop tenant: its IOs per second are
/// exactly what its cap allows.
const ONE_TENANT: &str = r#"
seed = 3
[[devices]]
model = "memory"
preset = "dram"
[[tenants]]
name = "A"
workload = { generator = "uniform", params = { count = 100000 } }
driver = { mode = "closed", iodepth = 4, duration_s = 4.0 }
iops_cap = 7
iops_schedule = [{ from_s = 1, iops = 10 }, { from_s = 2.5, iops = 50 }]
"#;

/// Host IO arrival times per tenant.
#[derive(Default)]
struct Arrivals(Vec<(TimeNs, u32)>);

impl Observer for Arrivals {
    fn host_io(&mut self, a: TimeNs, _: TimeNs, _: tierlab_core::Op, _: u32, _: u16, t: u32) {
        self.0.push((a, t));
    }
    fn device_submit(&mut self, _: usize, _: TimeNs) {}
    fn device_complete(&mut self, _: usize, _: TimeNs, _: TimeNs, _: tierlab_core::Op, _: u32) {}
    fn device_state(&mut self, _: usize, _: TimeNs, _: tierlab_core::device::DeviceState) {}
}

fn per_second(log: &Arrivals, tenant: u32, seconds: usize) -> Vec<u32> {
    let mut v = vec![0; seconds];
    for (t, who) in &log.0 {
        if *who == tenant {
            v[(*t / NS_PER_S) as usize] += 1;
        }
    }
    v
}

#[test]
fn a_tenant_follows_its_iops_schedule() {
    let config = parse(ONE_TENANT, "t.toml", &[]).unwrap();
    let mut sim = tierlab_sim::build::build(&config, Path::new(".")).unwrap();
    let mut log = Arrivals::default();
    sim.run(&mut log, None).unwrap();
    // 7 (iops_cap) before the first step; the step at 2.5 s lifts the rest
    // of that second's window from 10 to 50.
    assert_eq!(per_second(&log, 0, 4), vec![7, 10, 50, 50]);
}

/// Arrivals per half second.
fn per_half_second(log: &Arrivals, tenant: u32, halves: usize) -> Vec<u32> {
    let mut v = vec![0; halves];
    for (t, who) in &log.0 {
        if *who == tenant {
            v[(*t / (NS_PER_S / 2)) as usize] += 1;
        }
    }
    v
}

/// A load-control thread whose seconds start half a second after the
/// run's: by hand, 10 IOs in the partial window [0, 0.5), then 10 at 0.5,
/// 1.5 and 2.5 s (DRAM completes them at once), nothing in between.
#[test]
fn a_token_bucket_window_can_start_past_the_second() {
    let text = r#"
seed = 3
[[devices]]
model = "memory"
preset = "dram"
[[tenants]]
name = "A"
workload = { generator = "uniform", params = { count = 100000 } }
driver = { mode = "closed", iodepth = 4, duration_s = 3.0 }
iops_cap = 10
iops_window_offset_s = 0.5
"#;
    let config = parse(text, "t.toml", &[]).unwrap();
    let mut sim = tierlab_sim::build::build(&config, Path::new(".")).unwrap();
    let mut log = Arrivals::default();
    sim.run(&mut log, None).unwrap();
    assert_eq!(per_half_second(&log, 0, 6), vec![10, 10, 0, 10, 0, 10]);
    let at = |t_ns: TimeNs| log.0.iter().filter(|(a, _)| *a == t_ns).count();
    assert_eq!(
        (at(NS_PER_S / 2), at(3 * NS_PER_S / 2)),
        (4, 4),
        "4 threads at each window start"
    );
    // A schedule step inside an offset window lifts the rest of that window.
    let stepped = text.replace(
        "iops_cap = 10",
        "iops_cap = 10\niops_schedule = [{ from_s = 1.0, iops = 15 }]",
    );
    let config = parse(&stepped, "t.toml", &[]).unwrap();
    let mut sim = tierlab_sim::build::build(&config, Path::new(".")).unwrap();
    let mut log = Arrivals::default();
    sim.run(&mut log, None).unwrap();
    assert_eq!(per_half_second(&log, 0, 6), vec![10, 10, 5, 15, 0, 15]);
    for bad in ["1.5", "-0.1"] {
        let e = parse(
            &text.replace(
                "iops_window_offset_s = 0.5",
                &format!("iops_window_offset_s = {bad}"),
            ),
            "t.toml",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tenants[0].iops_window_offset_s")
                && e.contains(bad)
                && e.contains("[0, 1)"),
            "{e}"
        );
    }
}

/// A closed-loop tenant of 2 threads, capped at `cap` IOPS with `budget`,
/// driven by hand (sans-IO): `completions` gives each IO's completion time
/// by issue order; returns the issue times in ms and the issuing threads.
fn drive_by_hand(
    budget: IopsBudget,
    cap: f64,
    schedule: Vec<(TimeNs, f64)>,
    latency_ms: &[u64],
) -> (Vec<u64>, Vec<u32>) {
    const MS: TimeNs = NS_PER_S / 1000;
    let config = parse(ONE_TENANT, "t.toml", &[]).unwrap();
    let workload = tierlab_sim::build::workload(&config.tenants[0], 0, Path::new("."), 1).unwrap();
    let mut tenant = Tenant::new(
        "A",
        workload,
        DriverMode::ClosedLoop { iodepth: 2 },
        StopAfter {
            ios: Some(latency_ms.len() as u64),
            ..StopAfter::default()
        },
        None,
        Some(cap),
    )
    .unwrap()
    .with_iops_schedule(schedule)
    .unwrap()
    .with_iops_budget(budget)
    .unwrap();
    // (completion time, thread) of the IOs in flight.
    let mut in_flight: Vec<(TimeNs, u32)> = Vec::new();
    let (mut issued_ms, mut threads) = (Vec::new(), Vec::new());
    let mut now = 0;
    loop {
        while tenant.next_issue_ns(now).unwrap().is_some_and(|t| t <= now) {
            let a = tenant.issue(now).unwrap();
            in_flight.push((now + latency_ms[issued_ms.len()] * MS, a.thread));
            issued_ms.push(now / MS);
            threads.push(a.thread);
        }
        let next_issue = tenant.next_issue_ns(now).unwrap();
        let next_done = in_flight.iter().map(|(t, _)| *t).min();
        now = match (next_issue, next_done) {
            (None, None) => break,
            (a, b) => a.unwrap_or(TimeNs::MAX).min(b.unwrap_or(TimeNs::MAX)),
        };
        in_flight.retain(|(t, thread)| {
            let done = *t <= now;
            if done {
                tenant.complete(*thread);
            }
            !done
        });
    }
    (issued_ms, threads)
}

/// The three ways a tenant's limit reaches its threads, by hand: 2 threads
/// at 4 IOPS, thread 1's first IO slow (900 ms), the others 100 ms.
#[test]
fn iops_budgets_shared_per_thread_and_paced() {
    let lat = [100, 900, 100, 100, 100, 100];
    // Shared: thread 0 takes up thread 1's slack (0, 0, 100, 200 ms); the
    // next second's 4 start at 1 s (thread 1 back at 900 ms).
    let (t, th) = drive_by_hand(IopsBudget::Shared, 4.0, vec![], &lat);
    assert_eq!(t, vec![0, 0, 100, 200, 1000, 1000]);
    assert_eq!(
        th,
        vec![0, 0, 0, 0, 0, 0],
        "a shared budget tracks no threads"
    );
    // Per thread: 2 IOs each a second; thread 0 is done at 100 ms and
    // waits for 1 s, thread 1 issues its second IO when its first
    // completes (900 ms), within its second.
    let (t, th) = drive_by_hand(IopsBudget::PerThread, 4.0, vec![], &lat);
    assert_eq!(t, vec![0, 0, 100, 900, 1000, 1000]);
    assert_eq!(th, vec![0, 1, 0, 1, 0, 1]);
    // An odd cap: 3 IOPS gives thread 0 two, thread 1 one.
    let (t, th) = drive_by_hand(IopsBudget::PerThread, 3.0, vec![], &lat);
    assert_eq!(t, vec![0, 0, 100, 1000, 1000, 1100]);
    assert_eq!(th, vec![0, 1, 0, 0, 1, 0]);
    // Paced: one IO per 2 / 4 s = 500 ms per thread from its last issue;
    // thread 1, late, issues at once on completion (900 ms) and is next
    // allowed at 1400 ms: the lost time is lost.
    let (t, th) = drive_by_hand(IopsBudget::Paced, 4.0, vec![], &lat);
    assert_eq!(t, vec![0, 0, 500, 900, 1000, 1400]);
    assert_eq!(th, vec![0, 1, 0, 1, 0, 1]);
    // A step to 8 IOPS at 700 ms: thread 0 (last issue 500 ms) is allowed
    // at max(700, 500 + 250) = 750 ms; before the step it would wait for 1 s.
    let (t, th) = drive_by_hand(
        IopsBudget::Paced,
        4.0,
        vec![(700 * NS_PER_S / 1000, 8.0)],
        &lat,
    );
    assert_eq!(t, vec![0, 0, 500, 750, 900, 1000]);
    assert_eq!(th, vec![0, 1, 0, 0, 1, 0]);
    // An open loop has no threads to budget.
    let config = parse(ONE_TENANT, "t.toml", &[]).unwrap();
    let workload = tierlab_sim::build::workload(&config.tenants[0], 0, Path::new("."), 1).unwrap();
    let e = Tenant::new(
        "A",
        workload,
        DriverMode::OpenLoop { speed: 1.0 },
        StopAfter::default(),
        None,
        Some(4.0),
    )
    .unwrap()
    .with_iops_budget(IopsBudget::PerThread)
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("iops_budget") && e.contains("per-thread") && e.contains("shared"),
        "{e}"
    );
    // From a config: a bad name names the key and the choices.
    let e = parse(
        &ONE_TENANT.replace("iops_cap = 7", "iops_cap = 7\niops_budget = \"each\""),
        "t.toml",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("iops_budget") && e.contains("per-thread"), "{e}");
}

/// Caps tenant 0 at a fixed rate (a stand-in for a controller).
struct CapAt(f64);

impl Policy for CapAt {
    fn name(&self) -> &str {
        "cap-at"
    }
    fn tier_names(&self) -> Vec<String> {
        vec!["device".into()]
    }
    fn on_host_io(&mut self, _: TimeNs, io: HostIo, out: &mut Outbox) {
        out.actions.push(Action::CapTenant {
            tenant: 0,
            iops: Some(self.0),
        });
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
    fn on_device_completion(&mut self, _: TimeNs, _: usize, tag: u64, out: &mut Outbox) {
        out.complete.push((tag, 0));
    }
}

#[test]
fn the_lower_of_the_own_limit_and_the_policy_cap_applies() {
    let config = parse(ONE_TENANT, "t.toml", &[]).unwrap();
    for (policy_cap, want) in [(20.0, vec![7, 10, 20, 20]), (5.0, vec![5, 5, 5, 5])] {
        let device = standard_device(&config.devices[0], 1).unwrap();
        let workload =
            tierlab_sim::build::workload(&config.tenants[0], 0, Path::new("."), 1).unwrap();
        let tenant = Tenant::new(
            "A",
            workload,
            DriverMode::ClosedLoop { iodepth: 4 },
            StopAfter {
                duration_ns: Some(4 * NS_PER_S),
                ..StopAfter::default()
            },
            None,
            Some(7.0),
        )
        .unwrap()
        .with_iops_schedule(vec![(NS_PER_S, 10.0), (5 * NS_PER_S / 2, 50.0)])
        .unwrap();
        let mut sim = Simulation::new(Box::new(CapAt(policy_cap)), vec![device], vec![tenant]);
        let mut log = Arrivals::default();
        sim.run(&mut log, None).unwrap();
        assert_eq!(per_second(&log, 0, 4), want, "policy cap {policy_cap}");
    }
}

#[test]
fn bad_schedules_and_qos_configs_are_clear_errors() {
    let bad = |from: &str, to: &str| {
        parse(&ONE_TENANT.replace(from, to), "t.toml", &[])
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = bad("from_s = 2.5", "from_s = 0.5");
    assert!(
        e.contains("tenants[0].iops_schedule[1].from_s") && e.contains("time order"),
        "{e}"
    );
    let e = bad("iops = 50", "iops = 0");
    assert!(e.contains("tenants[0].iops_schedule[1].iops"), "{e}");
    let e = bad("from_s = 1,", "from_s = -1,");
    assert!(
        e.contains("iops_schedule[0].from_s") && e.contains("-1"),
        "{e}"
    );

    let qos = |policy: &str| {
        let text = format!(
            "{}\n[[tenants]]\nname = \"B\"\nworkload = {{ generator = \"uniform\", params = {{ count = 10 }} }}\ndriver = {{ mode = \"closed\", iodepth = 1 }}\n[policy]\nkind = \"busy-rate-qos\"\n{policy}",
            ONE_TENANT
        );
        let config = parse(&text, "t.toml", &[]).map_err(|e| e.to_string())?;
        tierlab_sim::build::build(&config, Path::new("."))
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        qos("guaranteed_tenant = \"A\"\nthrottled_tenant = \"B\""),
        Ok(())
    );
    let e = qos("guaranteed_tenant = \"X\"\nthrottled_tenant = \"B\"").unwrap_err();
    assert!(
        e.contains("policy.guaranteed_tenant")
            && e.contains("\"X\"")
            && e.contains("[\"A\", \"B\"]"),
        "{e}"
    );
    let e = qos("guaranteed_tenant = \"B\"\nthrottled_tenant = \"A\"").unwrap_err();
    assert!(
        e.contains("policy.guaranteed_iops") && e.contains("`iops_cap` or `iops_schedule`"),
        "{e}"
    );
    let e = qos(
        "guaranteed_tenant = \"A\"\nthrottled_tenant = \"B\"\ncontroller = { lowering_gain = 2 }",
    )
    .unwrap_err();
    assert!(e.contains("lowering_gain") && e.contains("2"), "{e}");
    let e = qos("guaranteed_tenant = \"A\"\nthrottled_tenant = \"B\"\ncontroller = { gain = 2 }")
        .unwrap_err();
    assert!(e.contains("gain") && e.contains("lowering_gain"), "{e}");
}

/// One disk, A capped at 60 IOPS (its guarantee, 4 outstanding), B greedy
/// (32 outstanding): B alone saturates the disk and A gets a third of its
/// target; the controller caps B and A gets its 60 IOPS.
#[test]
fn the_controller_caps_a_greedy_tenant_so_a_gets_its_target() {
    let text = r#"
seed = 5
[run]
duration_s = 120.0
[[devices]]
model = "hdd"
preset = "sata-7200-2tb"
[policy]
kind = "busy-rate-qos"
guaranteed_tenant = "A"
throttled_tenant = "B"
controller = { sample_interval_s = 5.0 }
[[tenants]]
name = "A"
workload = { generator = "uniform", params = { count = 100000 } }
driver = { mode = "closed", iodepth = 4 }
iops_cap = 60
[[tenants]]
name = "B"
workload = { generator = "uniform", params = { count = 100000 } }
driver = { mode = "closed", iodepth = 32 }
[output]
interval_s = 5.0
"#;
    let config = parse(text, "t.toml", &[]).unwrap();
    let result = run(&config, Path::new(".")).unwrap();
    let names = &result.counter_names;
    let col = |k: &str| names.iter().position(|n| *n == k).unwrap();
    let rows = &result.counter_samples;
    let first = &rows
        .iter()
        .find(|(_, v)| v[col("samples")] == 1.0)
        .unwrap()
        .1;
    assert_eq!(first[col("saturated")], 1.0, "B alone saturates the disk");
    assert!(
        first[col("a_iops")] < 30.0,
        "and A misses its target: {first:?}"
    );
    // After a minute, A within 10 % of 60 IOPS in every sample.
    let late: Vec<&Vec<f64>> = rows
        .iter()
        .filter(|(t, _)| *t >= 60 * NS_PER_S)
        .map(|(_, v)| v)
        .collect();
    assert!(late.len() >= 10);
    for v in &late {
        assert!((v[col("a_iops")] - 60.0).abs() <= 6.0, "A: {v:?}");
    }
    let info = &result.info;
    assert_eq!(info.policy, "busy-rate-qos");
    assert!(info.policy_counters["b_cap_iops"].as_f64().unwrap() > 1.0);
}
