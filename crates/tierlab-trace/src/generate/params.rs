//! `key=value` parameters, as the CLI passes them: parsed once, checked
//! against the generator's documented parameter list, read with typed
//! getters that say which parameter of which generator was wrong.

use std::str::FromStr;

use super::common::{SizeMix, parse_bytes};
use crate::error::{ParamError, Result, TraceError};

/// One documented parameter: what `--list` and docs/generators.md show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: &'static str,
    /// Unit or type of the value (`bytes`, `s`, `0..1`, ...).
    pub unit: &'static str,
    /// The default, in the same `key=value` syntax (`-` = unset).
    pub default: &'static str,
    pub help: &'static str,
}

pub(crate) const fn param(
    name: &'static str,
    unit: &'static str,
    default: &'static str,
    help: &'static str,
) -> ParamInfo {
    ParamInfo {
        name,
        unit,
        default,
        help,
    }
}

/// Parameter values rendered back as `key=value` text (what `resolve`
/// accepts), for listings and reproducibility.
pub type KvList = Vec<(&'static str, String)>;

pub(crate) fn show_opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_owned(), T::to_string)
}

/// Parameters given as `key=value` pairs, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvParams {
    pairs: Vec<(String, String)>,
}

impl KvParams {
    pub fn new() -> KvParams {
        KvParams::default()
    }

    /// Parses `key=value` items; a key may appear once.
    pub fn parse<I, S>(items: I) -> Result<KvParams>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut kv = KvParams::new();
        for item in items {
            let item = item.as_ref();
            let Some((key, value)) = item.split_once('=') else {
                return Err(TraceError::Invalid(format!(
                    "`{item}` is not a KEY=VALUE parameter"
                )));
            };
            kv.set(key.trim(), value.trim())?;
        }
        Ok(kv)
    }

    /// Adds `key=value`; fails if `key` is already set.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        if key.is_empty() {
            return Err(TraceError::Invalid(format!(
                "`={value}`: the parameter name is missing"
            )));
        }
        if self.get(key).is_some() {
            return Err(TraceError::Invalid(format!(
                "parameter `{key}` is given twice"
            )));
        }
        self.pairs.push((key.to_owned(), value.to_owned()));
        Ok(())
    }

    /// Sets `key=value`, replacing an earlier value.
    pub fn replace(&mut self, key: &str, value: &str) {
        match self.pairs.iter_mut().find(|(k, _)| k == key) {
            Some(pair) => pair.1 = value.to_owned(),
            None => self.pairs.push((key.to_owned(), value.to_owned())),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(k, _)| k.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Fails on the first key `known` does not list.
    pub fn check_known(&self, generator: &str, known: &[ParamInfo]) -> Result<()> {
        for key in self.keys() {
            if !known.iter().any(|p| p.name == key) {
                let names: Vec<&str> = known.iter().map(|p| p.name).collect();
                let hint = crate::names::did_you_mean(key, names.iter().copied());
                return Err(TraceError::Param(ParamError::new(
                    key,
                    format!("unknown parameter `{key}`{hint}"),
                    format!(
                        "a parameter of generator `{generator}`: {}",
                        names.join(", ")
                    ),
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn reader<'a>(&'a self, generator: &'a str) -> KvReader<'a> {
        KvReader {
            kv: self,
            generator,
        }
    }
}

/// Typed access to `KvParams` for one generator: each getter overwrites the
/// target only when the key is present.
pub(crate) struct KvReader<'a> {
    kv: &'a KvParams,
    generator: &'a str,
}

impl KvReader<'_> {
    fn fail(&self, key: &str, value: &str, expected: &str) -> TraceError {
        TraceError::Param(
            ParamError::new(key, format!("`{value}`"), expected)
                .because(format_args!("parameter of generator `{}`", self.generator)),
        )
    }

    fn parse<T: FromStr>(&self, key: &str, expected: &str) -> Result<Option<T>> {
        match self.kv.get(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<T>()
                .map(Some)
                .map_err(|_| self.fail(key, v, expected)),
        }
    }

    pub fn f64(&self, key: &str, target: &mut f64) -> Result<()> {
        if let Some(v) = self.parse::<f64>(key, "a number")? {
            if !v.is_finite() {
                return Err(self.fail(key, self.kv.get(key).unwrap_or(""), "a finite number"));
            }
            *target = v;
        }
        Ok(())
    }

    pub fn opt_f64(&self, key: &str, target: &mut Option<f64>) -> Result<()> {
        if self.kv.get(key).is_some_and(is_unset) {
            *target = None;
            return Ok(());
        }
        let mut v = target.unwrap_or(0.0);
        if self.kv.get(key).is_some() {
            self.f64(key, &mut v)?;
            *target = Some(v);
        }
        Ok(())
    }

    pub fn u64(&self, key: &str, target: &mut u64) -> Result<()> {
        if let Some(v) = self.kv.get(key) {
            *target = parse_count(v).ok_or_else(|| self.fail(key, v, "a whole number"))?;
        }
        Ok(())
    }

    pub fn opt_u64(&self, key: &str, target: &mut Option<u64>) -> Result<()> {
        match self.kv.get(key) {
            None => {}
            Some(v) if is_unset(v) => *target = None,
            Some(v) => {
                *target = Some(parse_count(v).ok_or_else(|| self.fail(key, v, "a whole number"))?)
            }
        }
        Ok(())
    }

    pub fn u32(&self, key: &str, target: &mut u32) -> Result<()> {
        if let Some(v) = self.kv.get(key) {
            *target = parse_count(v)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| self.fail(key, v, "a whole number below 2^32"))?;
        }
        Ok(())
    }

    pub fn bool(&self, key: &str, target: &mut bool) -> Result<()> {
        if let Some(v) = self.kv.get(key) {
            *target = match v {
                "true" | "yes" | "1" | "on" => true,
                "false" | "no" | "0" | "off" => false,
                _ => return Err(self.fail(key, v, "true or false")),
            };
        }
        Ok(())
    }

    pub fn bytes(&self, key: &str, target: &mut u64) -> Result<()> {
        if let Some(v) = self.kv.get(key) {
            *target = parse_bytes(v).map_err(|e| self.fail(key, v, &e.expected))?;
        }
        Ok(())
    }

    pub fn bytes_u32(&self, key: &str, target: &mut u32) -> Result<()> {
        let mut v = *target as u64;
        self.bytes(key, &mut v)?;
        *target = u32::try_from(v).map_err(|_| {
            self.fail(
                key,
                self.kv.get(key).unwrap_or(""),
                "a byte count below 4 GiB",
            )
        })?;
        Ok(())
    }

    pub fn bytes_list(&self, key: &str, target: &mut Vec<u64>) -> Result<()> {
        if let Some(v) = self.kv.get(key) {
            *target = v
                .split(',')
                .map(parse_bytes)
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| {
                    self.fail(
                        key,
                        v,
                        &format!("a comma-separated list, each {}", e.expected),
                    )
                })?;
        }
        Ok(())
    }

    pub fn sizes(&self, key: &str, target: &mut SizeMix) -> Result<()> {
        if let Some(v) = self.kv.get(key) {
            *target = v.parse().map_err(|e: ParamError| {
                self.fail(
                    key,
                    v,
                    &format!("a size or SIZE:WEIGHT list like 4k:3,64k:1 ({e})"),
                )
            })?;
        }
        Ok(())
    }

    /// `N:WEIGHT,...` lists of whole numbers (e.g. concentration group sizes).
    pub fn counts_weighted(&self, key: &str, target: &mut Vec<(u32, f64)>) -> Result<()> {
        if let Some(v) = self.kv.get(key) {
            let expected = "a N:WEIGHT list like 1:4,2:3,4:1";
            let mut out = Vec::new();
            for part in v.split(',').map(str::trim) {
                let (n, w) = part.split_once(':').unwrap_or((part, "1"));
                let n: u32 = n.trim().parse().map_err(|_| self.fail(key, v, expected))?;
                let w: f64 = w.trim().parse().map_err(|_| self.fail(key, v, expected))?;
                out.push((n, w));
            }
            *target = out;
        }
        Ok(())
    }

    /// One of a fixed set of names; the error lists them under `key`.
    pub fn choice<T: FromStr<Err = ParamError>>(&self, key: &str, target: &mut T) -> Result<()> {
        if let Some(v) = self.kv.get(key) {
            *target = v.parse().map_err(|e: ParamError| {
                TraceError::Param(
                    e.within(key)
                        .because(format_args!("parameter of generator `{}`", self.generator)),
                )
            })?;
        }
        Ok(())
    }

    pub fn string(&self, key: &str, target: &mut String) {
        if let Some(v) = self.kv.get(key) {
            *target = v.to_owned();
        }
    }
}

fn is_unset(v: &str) -> bool {
    matches!(v, "-" | "none" | "")
}

/// Whole numbers, with `_` separators and `k`/`m`/`g` decimal multipliers
/// for counts (`1.2m` = 1,200,000).
fn parse_count(text: &str) -> Option<u64> {
    let t = text.trim().replace('_', "");
    let (number, multiplier) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1e3),
        'm' | 'M' => (&t[..t.len() - 1], 1e6),
        'g' | 'G' => (&t[..t.len() - 1], 1e9),
        _ => (t.as_str(), 1.0),
    };
    if multiplier == 1.0 {
        return number.parse().ok();
    }
    let v: f64 = number.parse().ok()?;
    let n = v * multiplier;
    (n >= 0.0 && n.fract() == 0.0 && n < u64::MAX as f64).then_some(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_reports_errors_clearly() {
        let kv = KvParams::parse(["count=1.2m", "theta=0.9", "size_bytes=4k:1,8k:1"]).unwrap();
        let r = kv.reader("zipf");
        let mut count = None;
        r.opt_u64("count", &mut count).unwrap();
        assert_eq!(count, Some(1_200_000));
        let mut theta = 0.0;
        r.f64("theta", &mut theta).unwrap();
        assert_eq!(theta, 0.9);

        let known = [param("count", "", "", ""), param("theta", "", "", "")];
        let e = kv.check_known("zipf", &known).unwrap_err().to_string();
        assert_eq!(
            e,
            "key `size_bytes`: expected a parameter of generator `zipf`: count, theta, found \
             unknown parameter `size_bytes`"
        );

        let bad = KvParams::parse(["theta=abc"]).unwrap();
        let e = bad
            .reader("zipf")
            .f64("theta", &mut theta)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "key `theta`: expected a number (parameter of generator `zipf`), found `abc`"
        );

        assert!(
            KvParams::parse(["theta"])
                .unwrap_err()
                .to_string()
                .contains("KEY=VALUE")
        );
        assert!(
            KvParams::parse(["a=1", "a=2"])
                .unwrap_err()
                .to_string()
                .contains("given twice")
        );
        assert_eq!(parse_count("1_000"), Some(1000));
        assert_eq!(parse_count("1.5k"), Some(1500));
        assert_eq!(parse_count("1.25"), None);
    }
}
