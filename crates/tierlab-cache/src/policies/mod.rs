//! Eviction policies, one file each, built by name.

mod list;

pub mod arc;
pub mod belady;
pub mod clock;
pub mod fifo;
pub mod lfu;
pub mod lirs;
pub mod lru;
pub mod s3fifo;
pub mod sieve;
pub mod twoq;

use crate::Eviction;
use tierlab_trace::ParamError;

/// Policy names accepted by [`build`].
pub const NAMES: &[&str] = &[
    "fifo", "lru", "clock", "arc", "2q", "lirs", "s3fifo", "sieve", "lfu", "belady",
];

/// Node indices are `u32` and ghost lists can hold about twice the
/// capacity, so capacities are capped well below `u32::MAX`.
pub const MAX_CAPACITY_PAGES: usize = 1 << 30;

/// Other names users type for a policy (after lower-casing and dropping
/// `-` and `_`): libCacheSim's and the papers' spellings.
const ALIASES: &[(&str, &str)] = &[
    ("twoq", "2q"),
    ("opt", "belady"),
    ("min", "belady"),
    ("optimal", "belady"),
];

/// The policy `name` means (case-insensitive; `-` and `_` ignored, so
/// `S3-FIFO` is `s3fifo`; aliases such as `opt`), or an error with the
/// nearest name and the list.
pub fn canonical_name(name: &str) -> Result<&'static str, ParamError> {
    let key: String = name
        .trim()
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !matches!(c, '-' | '_'))
        .collect();
    if let Some(&n) = NAMES.iter().find(|&&n| n == key) {
        return Ok(n);
    }
    if let Some(&(_, n)) = ALIASES.iter().find(|&&(a, _)| a == key) {
        return Ok(n);
    }
    let hint = tierlab_trace::names::did_you_mean(&key, NAMES.iter().copied());
    Err(ParamError::new(
        "policy",
        format!("{name:?}{hint}"),
        format!("a cache policy, one of: {}", NAMES.join(", ")),
    ))
}

/// A policy by name ([`canonical_name`]) with a capacity in pages.
pub fn build(name: &str, capacity_pages: usize) -> Result<Box<dyn Eviction>, ParamError> {
    let name = canonical_name(name)?;
    if !(1..=MAX_CAPACITY_PAGES).contains(&capacity_pages) {
        return Err(ParamError::new(
            "capacity",
            format!("{capacity_pages} pages"),
            format!("1 ..= {MAX_CAPACITY_PAGES} pages"),
        ));
    }
    Ok(match name {
        "fifo" => Box::new(fifo::Fifo::new(capacity_pages)),
        "lru" => Box::new(lru::Lru::new(capacity_pages)),
        "clock" => Box::new(clock::Clock::new(capacity_pages)),
        "arc" => Box::new(arc::Arc::new(capacity_pages)),
        "2q" => Box::new(twoq::TwoQ::new(capacity_pages)),
        "lirs" => Box::new(lirs::Lirs::new(capacity_pages)),
        "s3fifo" => Box::new(s3fifo::S3Fifo::new(capacity_pages)),
        "sieve" => Box::new(sieve::Sieve::new(capacity_pages)),
        "lfu" => Box::new(lfu::Lfu::new(capacity_pages)),
        "belady" => Box::new(belady::Belady::new(capacity_pages)),
        other => unreachable!("{other} is in NAMES but not built"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_users_type() {
        for (typed, meant) in [
            ("S3-FIFO", "s3fifo"),
            ("s3_fifo", "s3fifo"),
            ("2Q", "2q"),
            ("twoq", "2q"),
            ("OPT", "belady"),
            ("LRU", "lru"),
        ] {
            assert_eq!(canonical_name(typed), Ok(meant), "{typed}");
        }
        let e = canonical_name("lur").unwrap_err().to_string();
        assert!(
            e.contains("did you mean `lru`?") && e.contains("one of: fifo"),
            "{e}"
        );
        // Every listed name builds.
        for n in NAMES {
            assert_eq!(
                build(n, 4)
                    .unwrap()
                    .name()
                    .to_ascii_lowercase()
                    .replace('-', ""),
                n.replace('-', ""),
                "{n}"
            );
        }
    }
    use crate::sim::next_uses;
    use crate::workload::{SplitMix64, Zipf, uniform};
    use crate::{Access, Key};

    /// Runs `keys` with next-access hints; returns every access's result.
    fn run(name: &str, cap: usize, keys: &[Key]) -> Vec<Access> {
        let next = next_uses(keys);
        let mut c = build(name, cap).unwrap();
        keys.iter()
            .zip(&next)
            .map(|(&k, &n)| {
                c.set_next_access(n);
                c.access(k)
            })
            .collect()
    }

    fn misses(name: &str, cap: usize, keys: &[Key]) -> usize {
        run(name, cap, keys).iter().filter(|a| !a.is_hit()).count()
    }

    #[test]
    fn build_rejects_bad_input_and_lists_names() {
        let e = build("nope", 10).err().unwrap().to_string();
        for n in NAMES {
            assert!(e.contains(n), "{e}");
        }
        assert!(build("lru", 0).is_err());
        for n in NAMES {
            assert_eq!(build(n, 5).unwrap().name(), *n);
        }
    }

    #[test]
    fn contract_on_random_streams() {
        for name in NAMES {
            for (seed, cap, keys) in [(1, 1, 3), (2, 2, 5), (3, 7, 20), (4, 16, 40), (5, 50, 400)] {
                let mut rng = SplitMix64::new(seed);
                let stream: Vec<Key> = (0..3000).map(|_| rng.below(keys)).collect();
                let next = next_uses(&stream);
                let mut c = build(name, cap).unwrap();
                let mut shadow = std::collections::BTreeSet::new();
                for (j, (&k, &n)) in stream.iter().zip(&next).enumerate() {
                    // Mix in the admission/invalidation calls now and then.
                    let op = rng.below(20);
                    if op == 0 {
                        let was = c.contains(k);
                        assert_eq!(c.remove(k), was, "{name}");
                        assert!(!c.contains(k), "{name}");
                        shadow.remove(&k);
                        continue;
                    }
                    c.set_next_access(n);
                    let r = if op == 1 && !c.contains(k) {
                        match c.insert(k) {
                            Some(e) => Access::Miss { evicted: Some(e) },
                            None => Access::Miss { evicted: None },
                        }
                    } else {
                        c.access(k)
                    };
                    assert_eq!(r.is_hit(), shadow.contains(&k), "{name} step {j}");
                    if let Access::Miss { evicted: Some(e) } = r {
                        assert!(!c.contains(e), "{name}: evicted {e} still cached");
                        assert!(shadow.remove(&e), "{name}: evicted {e} was not cached");
                    }
                    shadow.insert(k);
                    assert!(c.contains(k), "{name}");
                    assert!(c.len() <= c.capacity(), "{name}");
                    assert_eq!(c.len(), shadow.len(), "{name} step {j}");
                }
                for k in 0..keys {
                    assert_eq!(c.contains(k), shadow.contains(&k), "{name}");
                }
            }
        }
    }

    #[test]
    fn deterministic() {
        let keys = Zipf::new(500, 0.8, 7).take(20_000);
        for name in NAMES {
            assert_eq!(run(name, 40, &keys), run(name, 40, &keys), "{name}");
        }
    }

    /// Brute-force LRU and FIFO over a `Vec` (position = recency / age).
    fn reference(lru: bool, cap: usize, keys: &[Key]) -> usize {
        let mut v: Vec<Key> = Vec::new();
        let mut misses = 0;
        for &k in keys {
            if let Some(p) = v.iter().position(|&x| x == k) {
                if lru {
                    v.remove(p);
                    v.push(k);
                }
            } else {
                misses += 1;
                if v.len() == cap {
                    v.remove(0);
                }
                v.push(k);
            }
        }
        misses
    }

    #[test]
    fn fifo_and_lru_match_brute_force() {
        for seed in 0..5 {
            let keys = uniform(5000, 60, seed);
            for cap in [1, 2, 10, 30, 59, 100] {
                assert_eq!(misses("lru", cap, &keys), reference(true, cap, &keys));
                assert_eq!(misses("fifo", cap, &keys), reference(false, cap, &keys));
            }
        }
    }

    /// Exhaustive search over every eviction choice (every miss inserts):
    /// the fewest misses any demand-paging policy can achieve.
    fn brute_min(keys: &[Key], cap: usize, cache: &mut Vec<Key>) -> usize {
        let Some((&k, rest)) = keys.split_first() else {
            return 0;
        };
        if cache.contains(&k) {
            return brute_min(rest, cap, cache);
        }
        if cache.len() < cap {
            cache.push(k);
            let m = 1 + brute_min(rest, cap, cache);
            cache.pop();
            return m;
        }
        let mut best = usize::MAX;
        for i in 0..cache.len() {
            let old = std::mem::replace(&mut cache[i], k);
            best = best.min(1 + brute_min(rest, cap, cache));
            cache[i] = old;
        }
        best
    }

    #[test]
    fn belady_equals_brute_force_min_on_tiny_streams() {
        let mut rng = SplitMix64::new(99);
        for _ in 0..300 {
            let len = 1 + rng.below(11) as usize;
            let keys: Vec<Key> = (0..len).map(|_| rng.below(5)).collect();
            for cap in 1..=3 {
                let want = brute_min(&keys, cap, &mut Vec::new());
                assert_eq!(misses("belady", cap, &keys), want, "{keys:?} cap {cap}");
            }
        }
    }

    #[test]
    fn belady_never_worse_than_any_policy() {
        for seed in 0..4 {
            let streams = [
                uniform(4000, 80, seed),
                Zipf::new(300, 0.9, seed).take(4000),
            ];
            for keys in &streams {
                for cap in [1, 3, 10, 40] {
                    let opt = misses("belady", cap, keys);
                    for name in NAMES {
                        assert!(opt <= misses(name, cap, keys), "{name} cap {cap}");
                    }
                }
            }
        }
    }

    #[test]
    fn s3fifo_and_sieve_beat_fifo_on_zipf() {
        let keys = Zipf::new(10_000, 1.0, 3).take(300_000);
        for cap in [100, 1000] {
            let fifo = misses("fifo", cap, &keys);
            for name in ["s3fifo", "sieve"] {
                let m = misses(name, cap, &keys);
                assert!(m < fifo, "{name} {m} vs fifo {fifo} at {cap}");
            }
        }
    }
}
