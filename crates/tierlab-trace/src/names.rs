//! Names users type: when one is not known, the known name nearest to it
//! (policies, presets, generators, parameters, formats), so an error can
//! say "did you mean" instead of only listing everything.

/// The known name nearest to `name` (case-insensitive optimal string
/// alignment distance: a typo, a doubled or dropped letter, two letters
/// swapped), if one is close enough to be what was meant: at most 2 edits,
/// and fewer edits than `name` has letters. Failing that, an abbreviation
/// or a misspelt ending (`passthru`): the one known name that shares a
/// prefix of at least 4 letters and 2/3 of the shorter of the two.
pub fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.trim().to_ascii_lowercase();
    let limit = 2.min(lower.chars().count().saturating_sub(1));
    let known: Vec<&'a str> = known.into_iter().collect();
    let by_edits = known
        .iter()
        .map(|k| (strsim::osa_distance(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k);
    by_edits.or_else(|| {
        let shared = |k: &str| {
            lower
                .chars()
                .zip(k.to_ascii_lowercase().chars())
                .take_while(|(a, b)| a == b)
                .count()
        };
        let mut close = known.iter().filter(|k| {
            let p = shared(k);
            let shorter = lower.chars().count().min(k.chars().count());
            p >= 4 && 3 * p >= 2 * shorter
        });
        match (close.next(), close.next()) {
            (Some(k), None) => Some(*k),
            _ => None,
        }
    })
}

/// `" (did you mean `x`?)"` for the nearest known name, else `""`.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    nearest(name, known).map_or_else(String::new, |k| format!(" (did you mean `{k}`?)"))
}

/// For a path that does not exist: `" (did you mean `DIR/NAME`?)"` for
/// the nearest name in its folder, `" (the folder `DIR` does not exist)"`
/// when that is missing too, else `""`.
pub fn missing_path_hint(path: &std::path::Path) -> String {
    let parent = match path.parent() {
        Some(p) if p.as_os_str().is_empty() => std::path::Path::new("."),
        Some(p) => p,
        None => return String::new(),
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return if parent.exists() {
            String::new()
        } else {
            format!(" (the folder `{}` does not exist)", parent.display())
        };
    };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return String::new();
    };
    let names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    // File names are longer than option values: allow a few more edits.
    let lower = name.to_ascii_lowercase();
    let limit = 3.min(lower.chars().count() / 3);
    names
        .iter()
        .map(|k| (strsim::osa_distance(&lower, &k.to_ascii_lowercase()), k))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, k)| (d, k.clone()))
        .map_or_else(String::new, |(_, k)| {
            format!(" (did you mean `{}`?)", path.with_file_name(k).display())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mistyped_path_gets_the_nearest_file_of_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hm_0.csv.gz"), b"").unwrap();
        std::fs::write(dir.path().join("prxy_0.csv.gz"), b"").unwrap();
        let typo = dir.path().join("hm0.csv.gz");
        assert_eq!(
            missing_path_hint(&typo),
            format!(
                " (did you mean `{}`?)",
                dir.path().join("hm_0.csv.gz").display()
            )
        );
        assert_eq!(missing_path_hint(&dir.path().join("web_2.csv.gz")), "");
        let gone = dir.path().join("nope").join("x.csv");
        assert_eq!(
            missing_path_hint(&gone),
            format!(
                " (the folder `{}` does not exist)",
                dir.path().join("nope").display()
            )
        );
    }

    #[test]
    fn typos_find_their_name() {
        let policies = [
            "fifo", "lru", "clock", "arc", "2q", "lirs", "s3fifo", "sieve", "lfu",
        ];
        assert_eq!(nearest("lur", policies), Some("lru")); // swapped
        assert_eq!(nearest("LRU", policies), Some("lru"));
        assert_eq!(nearest("sieev", policies), Some("sieve"));
        assert_eq!(nearest("s3fif", policies), Some("s3fifo")); // dropped
        assert_eq!(nearest("zpif", ["zipf", "uniform"]), Some("zipf"));
        assert_eq!(nearest("thetta", ["theta", "scramble"]), Some("theta"));
        assert_eq!(
            nearest("intel-p370", ["intel-p3700", "intel-s3500"]),
            Some("intel-p3700")
        );
        assert_eq!(nearest("msrc", ["msr", "native", "systor"]), Some("msr"));
        // Abbreviated or with a misspelt ending: a long shared prefix.
        let kinds = ["passthrough", "linear", "cache", "flashcache", "atsmf"];
        assert_eq!(nearest("passthru", kinds), Some("passthrough"));
        assert_eq!(nearest("flashcach3d", kinds), Some("flashcache"));
    }

    #[test]
    fn nonsense_gets_no_guess() {
        assert_eq!(nearest("banana", ["fifo", "lru"]), None);
        // One letter is never "one typo away" from a two-letter name.
        assert_eq!(nearest("q", ["2q"]), None);
        assert_eq!(did_you_mean("banana", ["fifo"]), "");
        // A shared prefix must be long, and point at one name only.
        assert_eq!(nearest("linux", ["linear"]), None);
        assert_eq!(
            nearest("ssdraid.x", ["ssdraid.hm_0", "ssdraid.web_0"]),
            None
        );
        assert_eq!(did_you_mean("lur", ["lru"]), " (did you mean `lru`?)");
    }
}
