//! Sizes with units, as users type them: `4096`, `4k`, `4KiB`, `64MiB`,
//! `800GiB`, `1.5g`, `1_000_000`, up to EiB. Units are binary. Decimal `KB`/`MB`/`GB`
//! are refused: tools disagree on them (fio's `1GB` is 2^30 by default,
//! disk vendors' is 10^9), and a silently wrong capacity is worse than an
//! error.

use crate::error::ParamError;

/// Parses a byte size; a bare number is bytes. The error has no key: the
/// caller names the flag or key (`ParamError::within`).
pub fn parse_size_bytes(text: &str) -> Result<u64, ParamError> {
    let t = text.trim();
    const EXPECTED: &str = "a byte count such as 4096, 4k, 64KiB, 800GiB, 1.5g";
    let bad = |why: &str| ParamError::new("", format!("{t:?}{why}"), EXPECTED);
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number = number.replace('_', "");
    let shift: u32 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        "p" | "pib" => 50,
        "e" | "eib" => 60,
        "kb" | "mb" | "gb" | "tb" | "pb" | "eb" => {
            return Err(ParamError::new(
                "",
                format!("{t:?} (decimal units are ambiguous)"),
                "a binary unit: KiB/MiB/GiB/TiB (or k/m/g/t)",
            ));
        }
        _ => return Err(bad("")),
    };
    if number.is_empty() || number.matches('.').count() > 1 || number == "." {
        return Err(bad(""));
    }
    let too_large = || ParamError::new("", format!("{t:?}"), "at most 2^64 − 1 bytes");
    let (int_part, frac_part) = number.split_once('.').unwrap_or((&number, ""));
    let int_value: u64 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| too_large())?
    };
    let mut bytes = int_value.checked_mul(1u64 << shift).ok_or_else(too_large)?;
    if !frac_part.is_empty() {
        // Exact: the fraction times the unit must land on whole bytes.
        if frac_part.len() > 18 {
            return Err(bad(" (too many decimals)"));
        }
        let denom = 10u128.pow(frac_part.len() as u32);
        let numer = frac_part.parse::<u128>().map_err(|_| bad(""))? << shift;
        if numer % denom != 0 {
            return Err(bad(" (not a whole number of bytes)"));
        }
        bytes = bytes
            .checked_add((numer / denom) as u64)
            .ok_or_else(too_large)?;
    }
    Ok(bytes)
}

/// The shortest exact form with a binary suffix (`4k`, `1g`), which
/// `parse_size_bytes` reads back.
pub fn format_size_bytes(bytes: u64) -> String {
    for (shift, unit) in [
        (60, "e"),
        (50, "p"),
        (40, "t"),
        (30, "g"),
        (20, "m"),
        (10, "k"),
    ] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_size_bytes("4KiB").unwrap(), 4096);
        assert_eq!(parse_size_bytes("4k").unwrap(), 4096);
        assert_eq!(parse_size_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size_bytes("800GiB").unwrap(), 800 << 30);
        assert_eq!(parse_size_bytes("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_size_bytes("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size_bytes("14514").unwrap(), 14514);
        assert_eq!(parse_size_bytes("1_000_000").unwrap(), 1_000_000);
        assert!(
            parse_size_bytes("800GB")
                .unwrap_err()
                .found
                .contains("ambiguous")
        );
        assert!(parse_size_bytes("1.1B").is_err());
        assert!(parse_size_bytes("12 parsecs").is_err());
        assert!(parse_size_bytes("").is_err());
        assert!(parse_size_bytes("99999999999TiB").is_err());
        for n in [0, 1, 4096, 1 << 30, 3 << 29, 12345] {
            assert_eq!(parse_size_bytes(&format_size_bytes(n)).unwrap(), n);
        }
        assert_eq!(format_size_bytes(1 << 30), "1g");
        assert_eq!(format_size_bytes(1000), "1000");
    }
}
