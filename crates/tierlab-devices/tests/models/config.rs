//! Device configs as users write them (TOML): presets, overrides, errors.

use std::collections::BTreeMap;

use tierlab_devices::{DeviceConfig, HddParams, MemoryParams, Scheduler, SsdParams, build};

fn parse(text: &str) -> Result<DeviceConfig, String> {
    toml::from_str::<DeviceConfig>(text).map_err(|e| e.to_string())
}

/// Several devices under names, as a run config would hold them.
#[derive(serde::Deserialize)]
struct Devices {
    devices: BTreeMap<String, DeviceConfig>,
}

#[test]
fn a_preset_with_overrides_keeps_the_rest_of_the_preset() {
    let config = parse(
        r#"
        model = "ssd"
        preset = "intel-p3700"
        capacity_bytes = 400_000_000_000
        max_write_iops = 75_000
        "#,
    )
    .unwrap();
    let mut want = SsdParams::intel_p3700();
    want.capacity_bytes = 400_000_000_000;
    want.max_write_iops = 75_000;
    assert_eq!(config, DeviceConfig::Ssd(want));

    let config = parse(
        r#"
        model = "hdd"
        preset = "sas-15k-600gb"
        write_cache = true
        scheduler = "fifo"
        "#,
    )
    .unwrap();
    let mut want = HddParams::sas_15k_600gb();
    want.write_cache = true;
    want.scheduler = Scheduler::Fifo;
    assert_eq!(config, DeviceConfig::Hdd(want));
}

#[test]
fn without_a_preset_keys_override_the_defaults() {
    let config = parse("model = \"memory\"\nchannels = 2\n").unwrap();
    let want = MemoryParams {
        channels: 2,
        ..MemoryParams::default()
    };
    assert_eq!(config, DeviceConfig::Memory(want));
    assert_eq!(MemoryParams::default(), MemoryParams::dram());
    assert_eq!(SsdParams::default(), SsdParams::intel_p3700());
    assert_eq!(HddParams::default(), HddParams::sata_7200_2tb());
    // The params structs alone also fill missing keys from the defaults.
    let p: HddParams = toml::from_str("rpm = 10000").unwrap();
    assert_eq!(p.rpm, 10_000);
    assert_eq!(p.capacity_bytes, HddParams::default().capacity_bytes);
}

#[test]
fn every_preset_is_reachable_by_name_and_builds() {
    let mut names = Vec::new();
    for (model, presets) in [
        ("memory", MemoryParams::PRESETS),
        ("ssd", SsdParams::PRESETS),
        ("hdd", HddParams::PRESETS),
    ] {
        for preset in presets {
            let config = parse(&format!("model = \"{model}\"\npreset = \"{preset}\"\n")).unwrap();
            assert_eq!(config.model(), model);
            let device = build(&config, 0).unwrap();
            assert_eq!(device.capacity_bytes(), config.capacity_bytes());
            names.push(format!("{model}/{preset}"));
        }
    }
    assert_eq!(names.len(), 8);
}

#[test]
fn unknown_keys_are_named_with_the_allowed_ones() {
    let err = parse("model = \"ssd\"\npreset = \"intel-p3700\"\nchanels = 4\n").unwrap_err();
    assert!(err.contains("unknown field `chanels`"), "{err}");
    for key in SsdParams::KEYS {
        assert!(
            err.contains(&format!("`{key}`")),
            "{key} missing from: {err}"
        );
    }
    assert!(err.contains("`preset`"), "{err}");
    // The same in a table of devices.
    let ok: Devices = toml::from_str(
        "[devices.mem]\nmodel = \"memory\"\npreset = \"ramdisk\"\n\
         [devices.flash]\nmodel = \"ssd\"\n",
    )
    .unwrap();
    assert_eq!(
        ok.devices["mem"],
        DeviceConfig::Memory(MemoryParams::ramdisk())
    );
    assert_eq!(
        ok.devices["flash"],
        DeviceConfig::Ssd(SsdParams::intel_p3700())
    );
    let err = toml::from_str::<Devices>("[devices.flash]\nmodel = \"ssd\"\nread_latency_us = 20\n")
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `read_latency_us`"), "{err}");
}

#[test]
fn unknown_models_and_presets_list_the_known_ones() {
    let err = parse("model = \"tape\"\n").unwrap_err();
    assert!(err.contains("unknown variant `tape`"), "{err}");
    assert!(err.contains("`memory`, `ssd`, `hdd`"), "{err}");
    let err = parse("model = \"ssd\"\npreset = \"intel-p4800x\"\n").unwrap_err();
    assert!(
        err.contains(
            "key `preset`: expected one of: intel-p3700, intel-s3500, found \"intel-p4800x\""
        ),
        "{err}"
    );
    // One typo away: the nearest preset is named.
    let err = parse("model = \"ssd\"\npreset = \"intel-p370\"\n").unwrap_err();
    assert!(
        err.contains("found \"intel-p370\" (did you mean `intel-p3700`?)"),
        "{err}"
    );
    let err = parse("preset = \"dram\"\n").unwrap_err();
    assert!(err.contains("model"), "{err}");
}

#[test]
fn bad_values_are_rejected_after_the_merge() {
    let err = parse("model = \"hdd\"\npreset = \"sata-7200-2tb\"\nqueue_depth = 0\n").unwrap_err();
    assert!(
        err.contains("key `queue_depth`: expected 1 ..= 256, found 0"),
        "{err}"
    );
    let err = parse("model = \"ssd\"\ngc_slowdown = -1.0\n").unwrap_err();
    assert!(
        err.contains("key `gc_slowdown`: expected 0 ..= 100, found -1"),
        "{err}"
    );
    let err = parse("model = \"hdd\"\nscheduler = \"elevator\"\n").unwrap_err();
    assert!(err.contains("unknown variant `elevator`"), "{err}");
    assert!(err.contains("expected `fifo` or `sstf`"), "{err}");
    let err = parse("model = \"memory\"\nchannels = \"four\"\n").unwrap_err();
    assert!(err.contains("invalid type"), "{err}");
    // Configs built in code are checked by `build`.
    let mut p = MemoryParams::dram();
    p.read_latency_ns = 0;
    let err = build(&DeviceConfig::Memory(p), 0).err().unwrap();
    assert_eq!(
        err.to_string(),
        "key `read_latency_ns`: expected 1 ..= 1000000000000, found 0"
    );
}

#[test]
fn a_config_serializes_to_explicit_keys_and_back() {
    for config in [
        DeviceConfig::Memory(MemoryParams::nvdimm()),
        DeviceConfig::Ssd(SsdParams::intel_s3500()),
        DeviceConfig::Hdd(HddParams::sata_5400_2tb()),
    ] {
        let text = toml::to_string(&config).unwrap();
        assert!(
            text.contains(&format!("model = \"{}\"", config.model())),
            "{text}"
        );
        assert_eq!(parse(&text).unwrap(), config, "{text}");
    }
}

#[test]
fn the_example_in_docs_devices_md_parses() {
    let doc = include_str!("../../../../docs/devices.md");
    let start = doc.find("```toml\n").unwrap() + "```toml\n".len();
    let end = start + doc[start..].find("```").unwrap();
    let config = parse(&doc[start..end]).unwrap();
    let mut want = SsdParams::intel_p3700();
    want.capacity_bytes = 400_000_000_000;
    want.max_write_iops = 75_000;
    assert_eq!(config, DeviceConfig::Ssd(want));
}
