//! Parameter checks shared by the models, and the macro that declares a
//! params struct together with its "overrides" twin (every field optional)
//! used to apply config keys on top of a preset.

use std::fmt::Display;

/// Fails unless `min <= value <= max`, with a message that names the
/// parameter, its value and the allowed range (the same words for every
/// model, so users learn them once).
pub(crate) fn range<T: PartialOrd + Display>(
    model: &str,
    name: &str,
    value: T,
    min: T,
    max: T,
) -> Result<(), String> {
    if value >= min && value <= max {
        Ok(())
    } else {
        Err(format!(
            "{model}: `{name}` = {value} is out of range; allowed {min} ..= {max}"
        ))
    }
}

/// Like `range` for floats, also rejecting NaN and infinities (a NaN
/// compares false both ways and would slip through).
pub(crate) fn range_f64(
    model: &str,
    name: &str,
    value: f64,
    min: f64,
    max: f64,
) -> Result<(), String> {
    if value.is_finite() && value >= min && value <= max {
        Ok(())
    } else {
        Err(format!(
            "{model}: `{name}` = {value} is out of range; allowed {min} ..= {max}"
        ))
    }
}

/// The preset lookup error: names the unknown preset and lists the known.
pub(crate) fn unknown_preset(model: &str, name: &str, known: &[&str]) -> String {
    format!(
        "{model}: unknown preset `{name}`{}; known presets: {}",
        tierlab_trace::names::did_you_mean(name, known.iter().copied()),
        known.join(", ")
    )
}

/// One second in nanoseconds, as the numerator of `bytes / (bytes/s)`.
pub(crate) const NS_PER_S: u64 = 1_000_000_000;

/// Nanoseconds to move `size_bytes` at `bytes_per_s`, rounded up so that a
/// non-empty transfer never takes zero time. `size_bytes * 1e9` fits in a
/// u64 for every u32 size (at most 4.3e18).
#[inline]
pub(crate) fn transfer_ns(size_bytes: u32, bytes_per_s: u64) -> u64 {
    (size_bytes as u64 * NS_PER_S).div_ceil(bytes_per_s)
}

/// Declares a params struct (serde, unknown keys rejected, missing keys
/// taken from `Default`) and a crate-private "overrides" struct with the
/// same fields as `Option`s plus `preset`, so that a config can name a
/// preset and override any subset of its fields. Declaring both from one
/// field list keeps them from drifting apart.
macro_rules! device_params {
    (
        $(#[$meta:meta])*
        pub struct $name:ident / $over:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            /// The config keys of this model (besides `model` and `preset`).
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];
        }

        /// Config keys given next to `model` (and maybe `preset`): each key
        /// present replaces the preset's (or the default's) value.
        #[derive(Clone, Debug, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $over {
            #[serde(default)]
            pub preset: Option<String>,
            $( #[serde(default)] pub $field: Option<$ty>, )*
        }

        impl $over {
            /// Writes every key that was given onto `base`.
            pub fn apply_to(self, base: &mut $name) {
                $( if let Some(value) = self.$field { base.$field = value; } )*
            }
        }
    };
}

pub(crate) use device_params;
