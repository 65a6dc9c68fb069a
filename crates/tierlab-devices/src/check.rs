//! Parameter checks shared by the models, and the macro that declares a
//! params struct together with its "overrides" twin (every field optional)
//! used to apply config keys on top of a preset.

use std::fmt::Display;

use tierlab_core::ParamError;

/// Fails unless `min <= value <= max`, naming the key, its value and the
/// allowed range (the same words for every model, so users learn them
/// once). The caller's caller adds where the key sits (`devices[1]`).
pub(crate) fn range<T: PartialOrd + Display>(
    name: &str,
    value: T,
    min: T,
    max: T,
) -> Result<(), ParamError> {
    ParamError::check_range(name, value, min, max)
}

/// Like `range` for floats, also rejecting NaN and infinities (a NaN
/// compares false both ways and would slip through).
pub(crate) fn range_f64(name: &str, value: f64, min: f64, max: f64) -> Result<(), ParamError> {
    if value.is_finite() && value >= min && value <= max {
        Ok(())
    } else {
        Err(ParamError::new(name, value, format!("{min} ..= {max}")))
    }
}

/// The preset lookup error: names the unknown preset, suggests the
/// nearest and lists the known.
pub(crate) fn unknown_preset(name: &str, known: &[&str]) -> ParamError {
    ParamError::unknown_name("preset", name, known.iter().copied())
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
