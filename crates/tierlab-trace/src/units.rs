//! Sizes with units, as users type them: `4096`, `4KiB`, `64MiB`, `800GiB`,
//! `800GB` (decimal), `1.5TiB`.

/// Parses a byte size; a bare number is bytes.
pub fn parse_size_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "p" | "pib" => 1 << 50,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        _ => {
            return Err(format!(
                "invalid size {text:?}: unknown unit {unit:?} (use B, KiB, MiB, GiB, TiB or KB, MB, GB, TB)"
            ));
        }
    };
    if number.is_empty() || number.matches('.').count() > 1 || number == "." {
        return Err(format!(
            "invalid size {text:?}: expected a number with an optional unit, e.g. 64MiB"
        ));
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let int_value: u64 = if int_part.is_empty() {
        0
    } else {
        int_part
            .parse()
            .map_err(|_| format!("invalid size {text:?}: too large"))?
    };
    let mut bytes = int_value
        .checked_mul(multiplier)
        .ok_or_else(|| format!("invalid size {text:?}: too large"))?;
    if !frac_part.is_empty() {
        // Exact: fraction digits times the multiplier, must land on whole bytes.
        let digits = frac_part.len() as u32;
        let denom = 10u128.pow(digits.min(30));
        let numer = frac_part
            .parse::<u128>()
            .map_err(|_| format!("invalid size {text:?}"))?
            * multiplier as u128;
        if numer % denom != 0 {
            return Err(format!(
                "invalid size {text:?}: not a whole number of bytes"
            ));
        }
        bytes = bytes
            .checked_add((numer / denom) as u64)
            .ok_or_else(|| format!("invalid size {text:?}: too large"))?;
    }
    Ok(bytes)
}

/// Formats bytes with a binary unit when exact (`1GiB`), else bytes.
pub fn format_size_bytes(bytes: u64) -> String {
    for (shift, unit) in [
        (50, "PiB"),
        (40, "TiB"),
        (30, "GiB"),
        (20, "MiB"),
        (10, "KiB"),
    ] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_size_bytes("4KiB").unwrap(), 4096);
        assert_eq!(parse_size_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size_bytes("800GiB").unwrap(), 800 << 30);
        assert_eq!(parse_size_bytes("800GB").unwrap(), 800_000_000_000);
        assert_eq!(parse_size_bytes("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_size_bytes("14514").unwrap(), 14514);
        assert!(parse_size_bytes("1.1B").is_err());
        assert!(parse_size_bytes("12 parsecs").is_err());
        assert!(parse_size_bytes("").is_err());
        assert!(parse_size_bytes("99999999999TiB").is_err());
        assert_eq!(format_size_bytes(1 << 30), "1GiB");
        assert_eq!(format_size_bytes(1000), "1000B");
    }
}
