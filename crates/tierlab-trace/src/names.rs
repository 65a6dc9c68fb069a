//! Names users type: when one is not known, the known name nearest to it
//! (policies, presets, generators, parameters, formats), so an error can
//! say "did you mean" instead of only listing everything.

/// The known name nearest to `name` (case-insensitive optimal string
/// alignment distance: a typo, a doubled or dropped letter, two letters
/// swapped), if one is close enough to be what was meant: at most 2 edits,
/// and fewer edits than `name` has letters.
pub fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.trim().to_ascii_lowercase();
    let limit = 2.min(lower.chars().count().saturating_sub(1));
    known
        .into_iter()
        .map(|k| (strsim::osa_distance(&lower, &k.to_ascii_lowercase()), k))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// `" (did you mean `x`?)"` for the nearest known name, else `""`.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    nearest(name, known).map_or_else(String::new, |k| format!(" (did you mean `{k}`?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn nonsense_gets_no_guess() {
        assert_eq!(nearest("banana", ["fifo", "lru"]), None);
        // One letter is never "one typo away" from a two-letter name.
        assert_eq!(nearest("q", ["2q"]), None);
        assert_eq!(did_you_mean("banana", ["fifo"]), "");
        assert_eq!(did_you_mean("lur", ["lru"]), " (did you mean `lru`?)");
    }
}
