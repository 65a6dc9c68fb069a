// Exploration: what the checker says about every stack today.
use tierlab_crash::{Options, Stack, check};
use tierlab_stack::StackConfig;

fn stack(text: &str) -> Stack {
    let (cfg, _) = StackConfig::parse(text, "test.toml", &[]).unwrap();
    Stack::from_config(&cfg).unwrap()
}

const DEV: &str = "[[devices]]\nname = \"{n}\"\npath = \"{p}\"\ncapacity_bytes = \"{c}\"\n";

fn dev(n: &str, p: &str, c: &str) -> String {
    DEV.replace("{n}", n).replace("{p}", p).replace("{c}", c)
}

#[test]
#[ignore]
fn explore_all() {
    let cases = vec![
        ("passthrough", dev("disk", "disk.img", "4MiB")),
        ("cache-wb-ram", dev("c", "ram", "1MiB") + &dev("d", "d.img", "4MiB") + "[policy]\nkind = \"cache\"\ncapacity_bytes = \"1MiB\"\nwrite_mode = \"write-back\"\n"),
        ("cache-wb-file", dev("c", "c.img", "1MiB") + &dev("d", "d.img", "4MiB") + "[policy]\nkind = \"cache\"\ncapacity_bytes = \"1MiB\"\nwrite_mode = \"write-back\"\n"),
        ("cache-wt-ram", dev("c", "ram", "1MiB") + &dev("d", "d.img", "4MiB") + "[policy]\nkind = \"cache\"\ncapacity_bytes = \"1MiB\"\nwrite_mode = \"write-through\"\n"),
        ("flashcache", dev("c", "c.img", "2MiB") + &dev("d", "d.img", "8MiB") + "[policy]\nkind = \"flashcache\"\ncapacity_bytes = \"2MiB\"\n"),
        ("atsmf", dev("m", "ram", "3MiB") + &dev("f", "f.img", "8MiB") + "[policy]\nkind = \"atsmf\"\nsub_lun_size_bytes = \"1MiB\"\nmove_chunk_bytes = \"256KiB\"\nbuffer_bytes = \"1MiB\"\nmemory_cap_bytes = \"2MiB\"\nperiod_s = 0.01\ncollect_s = 0.01\nmin_samples = 5\ntop_n = 2\n"),
        ("hswd", dev("p", "p.img", "3MiB") + &dev("n", "n.img", "8MiB") + "[policy]\nkind = \"hswd\"\npcache_bytes = \"2MiB\"\nband_bytes = \"1MiB\"\n"),
    ];
    for (name, text) in cases {
        let s = stack(&text);
        let states: u64 = std::env::var("STATES").ok().map_or(80, |v| v.parse().unwrap());
        let seed: u64 = std::env::var("SEED").ok().map_or(1, |v| v.parse().unwrap());
        let opts = Options { states, seed, ..Default::default() };
        let t = std::time::Instant::now();
        match check(&s, &opts) {
            Ok(r) => {
                eprintln!("{name}: {} states, {} violations, writes {} flushes {} events {} in {:.1}s", r.states(), r.violations.len(), r.device_writes, r.host_flushes, r.log_events, t.elapsed().as_secs_f64());
                for v in r.violations.iter().take(3) {
                    eprintln!("   {:?} at {}: {}", v.kind, v.crash_point, v.message);
                }
            }
            Err(e) => eprintln!("{name}: error {e}"),
        }
    }
}
