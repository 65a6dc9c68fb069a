//! What users type: the mistakes of issue 20 ("did you mean" for every
//! enumerated name, aliases, byte units like libCacheSim's), each through
//! the command line as a user meets it.

mod common_cli;

use common_cli::{fails_with, stdout, tierlab};

/// A 1,000-IO trace of 4 KiB requests, uniform over 4 MiB (1,024 pages).
fn trace(dir: &std::path::Path) -> String {
    let path = dir.join("u.csv");
    let p = path.to_str().unwrap().to_string();
    stdout(tierlab(&[
        "trace",
        "gen",
        "uniform",
        "count=1000",
        "size_bytes=4k",
        "region_size_bytes=4m",
        "--seed",
        "1",
        "--out",
        &p,
    ]));
    p
}

#[test]
fn mistyped_names_get_the_nearest_one() {
    let tmp = tempfile::tempdir().unwrap();
    let t = trace(tmp.path());
    fails_with(
        tierlab(&["cache", &t, "--policy", "lur", "--capacity", "1MiB"]),
        &[
            "`--policy`: expected a cache policy, one of: fifo",
            "found \"lur\" (did you mean `lru`?)",
        ],
    );
    fails_with(
        tierlab(&["trace", "stats", &t, "--format", "msrc"]),
        &["unknown trace format \"msrc\" (did you mean `msr`?)"],
    );
    let out = tmp.path().join("g.csv");
    let out = out.to_str().unwrap();
    fails_with(
        tierlab(&["trace", "gen", "zpif", "--out", out]),
        &["unknown generator or preset `zpif` (did you mean `zipf`?)"],
    );
    fails_with(
        tierlab(&["trace", "gen", "zipf", "thetta=1", "--out", out]),
        &["found unknown parameter `thetta` (did you mean `theta`?)"],
    );
    let config = tmp.path().join("c.toml");
    std::fs::write(
        &config,
        "[[devices]]\nname = \"ssd\"\nmodel = \"ssd\"\npreset = \"intel-p370\"\n\n\
         [[tenants]]\nname = \"a\"\nworkload = { generator = \"uniform\", params = { count = 10 } }\n",
    )
    .unwrap();
    fails_with(
        tierlab(&["sim", config.to_str().unwrap(), "--out", out]),
        &[
            "key `devices[0].preset`: expected one of: intel-p3700, intel-s3500, found \"intel-p370\" (did you mean `intel-p3700`?)",
        ],
    );
    // Far from every name: no guess, just the list.
    fails_with(
        tierlab(&["cache", &t, "--policy", "banana", "--capacity", "1MiB"]),
        &[
            "`--policy`: expected a cache policy, one of: fifo",
            "found \"banana\"\n",
        ],
    );
}

#[test]
fn policy_aliases_users_type() {
    let tmp = tempfile::tempdir().unwrap();
    let t = trace(tmp.path());
    let table = stdout(tierlab(&[
        "cache",
        &t,
        "--policy",
        "S3-FIFO,2Q,opt",
        "--capacity",
        "1MiB",
    ]));
    let policies: Vec<&str> = table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(policies.len(), 3, "{table}");
    for (got, want) in policies.iter().zip(["s3fifo", "2q", "belady"]) {
        assert_eq!(got.to_ascii_lowercase().replace('-', ""), want, "{table}");
    }
}

#[test]
fn cache_sizes_are_bytes_like_libcachesim() {
    let tmp = tempfile::tempdir().unwrap();
    let t = trace(tmp.path());
    let rows = |caps: &str| -> Vec<serde_json::Value> {
        let o = stdout(tierlab(&[
            "cache",
            &t,
            "--policy",
            "lru",
            "--capacity",
            caps,
            "--json",
        ]));
        serde_json::from_str(&o).unwrap()
    };
    // 8388608 is 8 MiB = 2,048 pages, not 8 M pages (a 32 GiB cache).
    let r = rows("8388608,8MiB,2048pages");
    let pages: Vec<u64> = r
        .iter()
        .map(|x| x["capacity_pages"].as_u64().unwrap())
        .collect();
    assert_eq!(pages, [2048, 2048, 2048]);
    // A share of the footprint (the trace's distinct pages).
    let all = rows("100%");
    // At 100 % of the footprint every miss is a first reference: misses =
    // distinct pages = the footprint itself.
    let footprint = all[0]["misses"].as_u64().unwrap();
    assert_eq!(all[0]["capacity_pages"].as_u64().unwrap(), footprint);
    let r = rows("10%");
    assert_eq!(r[0]["capacity_pages"].as_u64().unwrap(), footprint / 10);
    // The old page-count habit is refused with the way to write it.
    fails_with(
        tierlab(&["cache", &t, "--policy", "lru", "--capacity", "14514"]),
        &[
            "`--capacity`: expected a whole number of 4096-byte pages, found 14514 bytes",
            "for a page count write 14514pages",
        ],
    );
    fails_with(
        tierlab(&[
            "cache",
            &t,
            "--policy",
            "lru",
            "--capacity",
            "1MiB",
            "--page-size",
            "3",
        ]),
        &[
            "`--page-size`: expected a whole number of 512-byte sectors",
            "found \"3\"",
        ],
    );
    fails_with(
        tierlab(&["cache", &t, "--policy", "lru", "--capacity", "150%"]),
        &["at most 100 %"],
    );
}
