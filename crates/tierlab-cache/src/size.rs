//! Cache sizes and page sizes as users type them, the way libCacheSim's
//! users do: a bare number is **bytes** (`8388608`), a size may carry a
//! binary unit (`8MiB`), `"1%"` is a share of the trace's footprint (its
//! distinct pages, like libCacheSim's fractional cache sizes), and a page
//! count needs an explicit suffix (`14514pages`). One parser for the
//! `cache` command, `analyze`, and Python's `cache_sim`.

use tierlab_trace::ParamError;
use tierlab_trace::units::parse_size_bytes;

/// A cache size before it is turned into pages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CacheSize {
    Bytes(u64),
    Pages(u64),
    /// Percent (0 < p ≤ 100) of the trace's footprint in pages.
    FootprintPct(f64),
}

const FORMS: &str = "bytes (8388608), a size with a binary unit (8MiB), a page count (2048pages) \
                     or a share of the trace's footprint (1%)";

/// Parses one cache size. Errors have no key: the caller names the flag
/// or key (`ParamError::within`).
pub fn parse_cache_size(text: &str) -> Result<CacheSize, ParamError> {
    let t = text.trim();
    let bad = || ParamError::new("", format!("{t:?}"), format!("a cache size: {FORMS}"));
    if let Some(pct) = t.strip_suffix('%') {
        let p: f64 = pct.trim().parse().map_err(|_| bad())?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(ParamError::new(
                "",
                format!("{t:?}"),
                "a share of the footprint above 0 % and at most 100 %",
            ));
        }
        return Ok(CacheSize::FootprintPct(p));
    }
    let lower = t.to_ascii_lowercase();
    if let Some(n) = lower
        .strip_suffix("pages")
        .or_else(|| lower.strip_suffix("page"))
    {
        let n = n.trim().replace('_', "");
        let pages: u64 = n.parse().map_err(|_| bad())?;
        return Ok(CacheSize::Pages(pages));
    }
    parse_size_bytes(t).map(CacheSize::Bytes).map_err(|e| {
        if e.found.contains("decimal units") {
            e
        } else {
            bad()
        }
    })
}

impl CacheSize {
    /// Whether turning it into pages needs the trace's footprint.
    pub fn needs_footprint(&self) -> bool {
        matches!(self, CacheSize::FootprintPct(_))
    }

    /// The size in pages of `page_size` bytes; `footprint_pages` (the
    /// trace's distinct pages) for a share of the footprint. A byte size
    /// must be a whole number of pages; a share rounds down, to at least
    /// one page (libCacheSim truncates the same way).
    pub fn pages(&self, page_size: u32, footprint_pages: Option<u64>) -> Result<u64, ParamError> {
        let pages = match *self {
            CacheSize::Pages(n) => n,
            CacheSize::Bytes(bytes) => {
                if bytes % page_size as u64 != 0 {
                    let hint = if bytes < 1 << 30 {
                        format!(" (a bare number is bytes; for a page count write {bytes}pages)")
                    } else {
                        String::new()
                    };
                    return Err(ParamError::new(
                        "",
                        format!("{bytes} bytes{hint}"),
                        format!("a whole number of {page_size}-byte pages"),
                    ));
                }
                bytes / page_size as u64
            }
            CacheSize::FootprintPct(p) => {
                let Some(footprint) = footprint_pages else {
                    return Err(ParamError::new(
                        "",
                        format!("{p}%, a share of a footprint not known here"),
                        "bytes or pages",
                    ));
                };
                ((footprint as f64 * p / 100.0).floor() as u64).max(1)
            }
        };
        if pages == 0 {
            return Err(ParamError::new("", self, "at least one page"));
        }
        Ok(pages)
    }
}

impl std::fmt::Display for CacheSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheSize::Bytes(b) => write!(f, "{b} bytes"),
            CacheSize::Pages(n) => write!(f, "{n}pages"),
            CacheSize::FootprintPct(p) => write!(f, "{p}%"),
        }
    }
}

/// Parses a page size: bytes or a size with a unit, a multiple of 512 (a
/// sector) below 4 GiB. `what` names the flag or key in errors.
pub fn parse_page_size(text: &str, what: &str) -> Result<u32, ParamError> {
    let bytes = parse_size_bytes(text).map_err(|e| e.within(what))?;
    let expected = "a whole number of 512-byte sectors (512, 4KiB, 8KiB, ...) below 4 GiB";
    if bytes == 0 || bytes % 512 != 0 {
        return Err(ParamError::new(what, format!("{text:?}"), expected));
    }
    u32::try_from(bytes).map_err(|_| ParamError::new(what, format!("{text:?}"), expected))
}

/// The trace's footprint: its distinct pages of `page_size` bytes (every
/// page a read, write or trim touches), what a `%` size is a share of.
pub fn footprint_pages(
    stream: &mut dyn tierlab_trace::RecordStream,
    page_size: u32,
) -> tierlab_trace::error::Result<u64> {
    use crate::sim::{PAGE_BITS, page_range};
    // The distinct keys of `record_pages`: page indices wrap at 2^PAGE_BITS.
    let mut pages = tierlab_trace::distinct::DistinctBlocks::new();
    let mask = (1u64 << PAGE_BITS) - 1;
    while let Some(rec) = stream.next_record()? {
        let range = page_range(&rec, page_size);
        if !range.is_empty() {
            let (first, last) = (range.start, range.end - 1);
            if first >> PAGE_BITS == last >> PAGE_BITS {
                pages.insert_range(rec.device_id, first & mask, last & mask);
            } else {
                for page in first..=last {
                    pages.insert(rec.device_id, page & mask);
                }
            }
        }
    }
    Ok(pages.len())
}

/// Parses every text of `texts` as a cache size and turns it into pages;
/// `footprint` (the trace's distinct pages, e.g. [`footprint_pages`]) is
/// called once, and only when a size is a share of it.
pub fn sizes_in_pages<S: AsRef<str>, E: From<ParamError>>(
    texts: &[S],
    page_size: u32,
    footprint: impl FnOnce() -> Result<u64, E>,
) -> Result<Vec<u64>, E> {
    let sizes = texts
        .iter()
        .map(|t| parse_cache_size(t.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let footprint = if sizes.iter().any(CacheSize::needs_footprint) {
        Some(footprint()?)
    } else {
        None
    };
    sizes
        .iter()
        .map(|s| s.pages(page_size, footprint).map_err(E::from))
        .collect()
}

/// Parses a cache size straight into pages where no footprint is known.
pub fn parse_capacity_pages(text: &str, page_size: u32) -> Result<u64, ParamError> {
    parse_cache_size(text)?.pages(page_size, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_number_is_bytes_like_libcachesim() {
        // The example: 8388608 is 8 MiB, 2048 pages of 4 KiB.
        assert_eq!(parse_capacity_pages("8388608", 4096), Ok(2048));
        assert_eq!(parse_capacity_pages("8MiB", 4096), Ok(2048));
        assert_eq!(parse_capacity_pages("64m", 512), Ok(131072));
        assert_eq!(parse_capacity_pages("14514pages", 4096), Ok(14514));
        assert_eq!(parse_capacity_pages("1_000 pages", 4096), Ok(1000));
        assert_eq!(parse_capacity_pages("1EiB", 1 << 30), Ok(1 << 30));
        // An old page count is refused with the way to write it.
        let e = parse_capacity_pages("14514", 4096).unwrap_err().to_string();
        assert!(e.contains("for a page count write 14514pages"), "{e}");
        let e = parse_capacity_pages("6k", 4096).unwrap_err().to_string();
        assert!(e.contains("a whole number of 4096-byte pages"), "{e}");
        assert!(parse_capacity_pages("0", 4096).is_err());
        assert!(parse_capacity_pages("0pages", 4096).is_err());
        assert!(
            parse_capacity_pages("64MB", 4096)
                .unwrap_err()
                .to_string()
                .contains("ambiguous")
        );
        let e = parse_capacity_pages("lots", 4096).unwrap_err().to_string();
        assert!(e.contains("1%") && e.contains("pages"), "{e}");
    }

    #[test]
    fn a_share_of_the_footprint() {
        let one = parse_cache_size("1%").unwrap();
        assert_eq!(one, CacheSize::FootprintPct(1.0));
        assert!(one.needs_footprint());
        // 1 % of 1,451,400 pages; rounds down, never below a page.
        assert_eq!(one.pages(4096, Some(1_451_400)), Ok(14_514));
        assert_eq!(
            parse_cache_size("0.5%").unwrap().pages(4096, Some(999)),
            Ok(4)
        );
        assert_eq!(
            parse_cache_size("0.01%").unwrap().pages(4096, Some(10)),
            Ok(1)
        );
        assert!(
            one.pages(4096, None)
                .unwrap_err()
                .to_string()
                .contains("footprint")
        );
        assert!(parse_cache_size("0%").is_err());
        assert!(parse_cache_size("150%").is_err());
        assert!(parse_cache_size("x%").is_err());
    }

    #[test]
    fn footprint_is_the_distinct_keys_of_record_pages() {
        use crate::sim::{VecStream, record_pages};
        use tierlab_trace::{DeviceTable, IoRecord, Op, TimeBase};
        let rec = |device_id, offset_bytes, size_bytes, op| IoRecord {
            time_ns: 0,
            offset_bytes,
            size_bytes,
            device_id,
            op,
            response_ns: None,
        };
        let mut records = vec![
            rec(0, 0, 4096, Op::Read),
            rec(0, 4095, 2, Op::Write),               // pages 0 and 1
            rec(1, 0, 512, Op::Trim),                 // another device
            rec(0, 8192, 0, Op::Read),                // nothing
            rec(0, 1 << 30, 4096, Op::Flush),         // nothing
            rec(0, 1 << 60, 8192, Op::Read),          // page 2^48 wraps to 0, and 1
            rec(0, (1 << 60) - 4096, 8192, Op::Read), // across the wrap: 2^48 - 1, 0
            rec(2, u64::MAX - 8191, 8191, Op::Read),
        ];
        // A dense run and sparse pages, as a generator would give.
        for i in 0..5000u64 {
            records.push(rec(
                (i % 3) as u32,
                (i * 7919 % 20_000) * 1024,
                6144,
                Op::Read,
            ));
            records.push(rec(0, i << 42, 4096, Op::Write));
        }
        for page_size in [512u32, 4096, 6144, 1 << 20] {
            let mut keys = rustc_hash::FxHashSet::default();
            for r in &records {
                keys.extend(record_pages(r, page_size));
            }
            let mut stream = VecStream::new(records.clone(), DeviceTable::new(), TimeBase::None);
            assert_eq!(
                footprint_pages(&mut stream, page_size).unwrap(),
                keys.len() as u64,
                "page size {page_size}"
            );
        }
    }

    #[test]
    fn page_sizes() {
        assert_eq!(parse_page_size("4KiB", "--page-size"), Ok(4096));
        assert_eq!(parse_page_size("512", "--page-size"), Ok(512));
        for bad in ["0", "3", "1000", "8g"] {
            assert!(parse_page_size(bad, "--page-size").is_err(), "{bad}");
        }
    }
}
