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
        // Trace fields are short: a plain scan of the first bytes beats
        // setting up a vector search; long fields still get one.
        let head = rest.len().min(24);
        let found = match rest[..head].iter().position(|&b| b == self.delim) {
            Some(i) => Some(i),
            None => memchr::memchr(self.delim, &rest[head..]).map(|i| i + head),
        };
        match found {
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

/// Eight ASCII digits (the first the most significant) as a number, or
/// `None` if any byte is not a digit: one load and three multiplies instead
/// of eight dependent steps.
#[inline(always)]
fn eight_digits(bytes: &[u8; 8]) -> Option<u64> {
    let x = u64::from_le_bytes(*bytes);
    // Every high nibble is 3, and adding 6 to each low nibble carries into
    // none of them (so each low nibble is at most 9).
    let high = 0xf0f0_f0f0_f0f0_f0f0u64;
    let threes = 0x3030_3030_3030_3030u64;
    if x & high != threes || x.wrapping_add(0x0606_0606_0606_0606) & high != threes {
        return None;
    }
    let d = x - threes;
    // Pairs, then quads, then the eight digits (little-endian lanes).
    let d = (d.wrapping_mul(10) + (d >> 8)) & 0x00ff_00ff_00ff_00ff;
    let d = (d.wrapping_mul(100) + (d >> 16)) & 0x0000_ffff_0000_ffff;
    Some((d.wrapping_mul(10_000) + (d >> 32)) & 0xffff_ffff)
}

/// 1 to 19 ASCII digits, which cannot overflow a u64; `None` for anything
/// else (the general path then decides).
#[inline(always)]
fn plain_digits(f: &[u8]) -> Option<u64> {
    if f.is_empty() || f.len() > 19 {
        return None;
    }
    let mut value = 0u64;
    let mut rest = f;
    while let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
        value = value * 100_000_000 + eight_digits(chunk)?;
        rest = tail;
    }
    for &b in rest {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        value = value * 10 + d as u64;
    }
    Some(value)
}

/// An unsigned decimal integer.
#[inline(always)]
pub fn u64_field(field: &[u8], name: &'static str) -> Result<u64, FieldError> {
    // Inlined, the common case costs no call and no 64-byte result.
    match plain_digits(field) {
        Some(value) => Ok(value),
        None => u64_field_general(field, name),
    }
}

/// Padded fields, 20 digits, and every error.
#[cold]
#[inline(never)]
fn u64_field_general(field: &[u8], name: &'static str) -> Result<u64, FieldError> {
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
    fn integers_of_every_length() {
        // Against the standard library, for 1..=20 digits, each digit value
        // at each position, and a non-digit at each position.
        let mut state = 3u64;
        for len in 1..=20usize {
            for _ in 0..500 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let mut digits: Vec<u8> = (0..len)
                    .map(|i| b'0' + ((state >> (i % 60)) % 10) as u8)
                    .collect();
                let text = std::str::from_utf8(&digits).unwrap().to_string();
                assert_eq!(
                    u64_field(&digits, "x").ok(),
                    text.parse::<u64>().ok(),
                    "{text}"
                );
                let at = (state >> 7) as usize % len;
                for bad in [b'/', b':', b' ', b'a', b'-', 0xb0, b'0' + 128] {
                    let keep = digits[at];
                    digits[at] = bad;
                    let text = String::from_utf8_lossy(&digits).to_string();
                    let expected = text.trim_matches(' ').parse::<u64>().ok();
                    let expected = expected.filter(|_| !text.trim_matches(' ').is_empty());
                    assert_eq!(u64_field(&digits, "x").ok(), expected, "{text:?}");
                    digits[at] = keep;
                }
            }
        }
        assert_eq!(u64_field(b"0000000000000000001", "x").unwrap(), 1);
        assert_eq!(
            u64_field(b"9999999999999999999", "x").unwrap(),
            9_999_999_999_999_999_999
        );
    }

    #[test]
    fn splitting() {
        let f: Vec<&[u8]> = Split::new(b"a,,b", b',').collect();
        assert_eq!(f, vec![&b"a"[..], b"", b"b"]);
        let w: Vec<&[u8]> = Words::new(b"  8,0   3 \t1  ").collect();
        assert_eq!(w, vec![&b"8,0"[..], b"3", b"1"]);
    }
}
