//! Tenant IOPS schedules, a policy's cap on top of a tenant's own limit, and
//! the busy-rate QoS policy wired from a config (docs/qos.md).

use std::path::Path;

use tierlab_core::policy::{Action, HostIo, Outbox, Policy};
use tierlab_core::{DeviceIo, NS_PER_S, TimeNs};
use tierlab_sim::config::parse;
use tierlab_sim::run::run;
use tierlab_sim::{DriverMode, Observer, Simulation, StopAfter, Tenant};
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
