//! Allocation-free field splitting and exact number parsing for text formats.
//! Decimal times are parsed as fixed point, never through floats, so that a
//! timestamp like `1456095145.133076000` keeps every nanosecond.

use crate::error::FieldError;

/// Splits a line on one delimiter byte.
pub struct Split<'a> {
    rest: Option<&'a [u8]>,
    delim: u8,
}

impl<'a> Split<'a> {
    pub fn new(line: &'a [u8], delim: u8) -> Self {
        Split {
            rest: Some(line),
            delim,
        }
    }

    /// The next field, or an error naming the missing field.
    #[inline]
    pub fn field(&mut self, name: &'static str) -> Result<&'a [u8], FieldError> {
        self.next()
            .ok_or_else(|| FieldError::new(name, b"", "a value (the line has too few fields)"))
    }
}

impl<'a> Iterator for Split<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        match memchr::memchr(self.delim, rest) {
            Some(i) => {
                self.rest = Some(&rest[i + 1..]);
                Some(&rest[..i])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// Splits a line on runs of spaces and tabs.
pub struct Words<'a> {
    rest: &'a [u8],
}

impl<'a> Words<'a> {
    pub fn new(line: &'a [u8]) -> Self {
        Words { rest: line }
    }

    #[inline]
    pub fn field(&mut self, name: &'static str) -> Result<&'a [u8], FieldError> {
        self.next()
            .ok_or_else(|| FieldError::new(name, b"", "a value (the line has too few fields)"))
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ' && b != b'\t')?;
        let rest = &self.rest[start..];
        let end = rest
            .iter()
            .position(|&b| b == b' ' || b == b'\t')
            .unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

/// Trims ASCII spaces (CSV files sometimes pad fields).
#[inline]
pub fn trim(field: &[u8]) -> &[u8] {
    let start = field.iter().position(|&b| b != b' ').unwrap_or(field.len());
    let end = field
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(start, |i| i + 1);
    &field[start..end]
}

/// An unsigned decimal integer.
#[inline]
pub fn u64_field(field: &[u8], name: &'static str) -> Result<u64, FieldError> {
    let f = trim(field);
    if f.is_empty() || f.len() > 20 {
        return Err(FieldError::new(name, field, "an unsigned integer"));
    }
    let mut value: u64 = 0;
    for &b in f {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(FieldError::new(name, field, "an unsigned integer"));
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(d as u64))
            .ok_or_else(|| FieldError::new(name, field, "an unsigned integer below 2^64"))?;
    }
    Ok(value)
}

#[inline]
pub fn u32_field(field: &[u8], name: &'static str) -> Result<u32, FieldError> {
    let v = u64_field(field, name)?;
    u32::try_from(v).map_err(|_| FieldError::new(name, field, "an unsigned integer below 2^32"))
}

/// A non-negative decimal number of some unit, converted exactly to integer
/// nanoseconds (`unit_ns` nanoseconds per unit). Digits finer than 1 ns are
/// rounded half up.
#[inline]
pub fn decimal_ns(field: &[u8], unit_ns: u64, name: &'static str) -> Result<u64, FieldError> {
    let f = trim(field);
    let bad = || FieldError::new(name, field, "a non-negative decimal number");
    let (int_part, frac_part) = match memchr::memchr(b'.', f) {
        Some(i) => (&f[..i], &f[i + 1..]),
        None => (f, &f[f.len()..]),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad());
    }
    let mut int_value: u64 = 0;
    for &b in int_part {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(bad());
        }
        int_value = int_value
            .checked_mul(10)
            .and_then(|v| v.checked_add(d as u64))
            .ok_or_else(|| FieldError::new(name, field, "a number that fits in 64 bits of ns"))?;
    }
    // Fraction: accumulate digits while they still matter at ns resolution.
    let mut frac_ns: u64 = 0;
    let mut scale = unit_ns; // ns per unit of the current digit position * 10
    let mut remainder_half_up = false;
    for (i, &b) in frac_part.iter().enumerate() {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(bad());
        }
        if scale >= 10 {
            scale /= 10;
            frac_ns += d as u64 * scale;
        } else if i == 0 || scale > 0 {
            // First digit below 1 ns decides rounding.
            remainder_half_up = d >= 5;
            scale = 0;
        }
    }
    if remainder_half_up {
        frac_ns += 1;
    }
    int_value
        .checked_mul(unit_ns)
        .and_then(|v| v.checked_add(frac_ns))
        .ok_or_else(|| FieldError::new(name, field, "a number that fits in 64 bits of ns"))
}

/// Byte count from a count of `unit`-byte units, checked.
#[inline]
pub fn scaled(value: u64, unit: u64, name: &'static str, field: &[u8]) -> Result<u64, FieldError> {
    value
        .checked_mul(unit)
        .ok_or_else(|| FieldError::new(name, field, "a value whose byte count fits in 64 bits"))
}

/// A request size in bytes, which must fit in 32 bits.
#[inline]
pub fn size_u32(bytes: u64, name: &'static str, field: &[u8]) -> Result<u32, FieldError> {
    u32::try_from(bytes).map_err(|_| FieldError::new(name, field, "a request size below 4 GiB"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_ns_is_exact() {
        assert_eq!(
            decimal_ns(b"1456095145.133076000", 1_000_000_000, "t").unwrap(),
            1_456_095_145_133_076_000
        );
        assert_eq!(decimal_ns(b"0.091", 1_000_000, "t").unwrap(), 91_000);
        assert_eq!(decimal_ns(b"223.412", 1_000_000, "t").unwrap(), 223_412_000);
        assert_eq!(decimal_ns(b"12", 1_000, "t").unwrap(), 12_000);
        assert_eq!(decimal_ns(b".5", 1_000, "t").unwrap(), 500);
        // Finer than 1 ns: rounded half up.
        assert_eq!(decimal_ns(b"0.0000000015", 1_000_000_000, "t").unwrap(), 2);
        assert_eq!(decimal_ns(b"0.0000000014", 1_000_000_000, "t").unwrap(), 1);
        assert!(decimal_ns(b"-1", 1, "t").is_err());
        assert!(decimal_ns(b"1e3", 1, "t").is_err());
        assert!(decimal_ns(b".", 1, "t").is_err());
        assert!(decimal_ns(b"", 1, "t").is_err());
        assert!(decimal_ns(b"99999999999999999999", 1, "t").is_err());
    }

    #[test]
    fn integers_reject_garbage_and_overflow() {
        assert_eq!(u64_field(b" 42 ", "x").unwrap(), 42);
        assert!(u64_field(b"4x2", "x").is_err());
        assert!(u64_field(b"", "x").is_err());
        assert!(u64_field(b"18446744073709551616", "x").is_err());
        assert_eq!(u64_field(b"18446744073709551615", "x").unwrap(), u64::MAX);
        assert!(u32_field(b"4294967296", "x").is_err());
    }

    #[test]
    fn splitting() {
        let f: Vec<&[u8]> = Split::new(b"a,,b", b',').collect();
        assert_eq!(f, vec![&b"a"[..], b"", b"b"]);
        let w: Vec<&[u8]> = Words::new(b"  8,0   3 \t1  ").collect();
        assert_eq!(w, vec![&b"8,0"[..], b"3", b"1"]);
    }
}
