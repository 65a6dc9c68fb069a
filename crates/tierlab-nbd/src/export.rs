//! What the server offers: exports, their size constraints and metadata
//! contexts, and the checks that keep a configuration within what the protocol
//! (and this crate's buffering bound) allows.

use std::fmt;

use crate::BLOCK_MAX_BYTES_LIMIT;
use crate::wire::{
    FLAG_CAN_MULTI_CONN, FLAG_HAS_FLAGS, FLAG_READ_ONLY, FLAG_SEND_FLUSH, FLAG_SEND_FUA,
    FLAG_SEND_TRIM, FLAG_SEND_WRITE_ZEROES, STRING_MAX_BYTES,
};

/// One export a client can select by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// Name as clients give it to `NBD_OPT_GO` / `NBD_OPT_EXPORT_NAME`. The
    /// first export is also the default export (the empty name selects it).
    pub name: String,
    /// Free text shown by `nbdinfo --list` and `NBD_INFO_DESCRIPTION`.
    pub description: String,
    pub size_bytes: u64,
    pub read_only: bool,
    /// Advertise `NBD_FLAG_CAN_MULTI_CONN`: flush and FUA on one connection are
    /// visible on all (true when the backend shares one cache across connections).
    pub can_multi_conn: bool,
    /// Minimum block size: power of two, ≤ 65536. Requests not aligned to it are
    /// refused with `EINVAL`.
    pub block_min_bytes: u32,
    /// Preferred block size: power of two ≥ max(min, 512).
    pub block_preferred_bytes: u32,
    /// Maximum payload of one READ or WRITE.
    pub block_max_bytes: u32,
    /// Metadata contexts offered, e.g. `["base:allocation", "tierlab:tier"]`.
    /// A context's id on the wire is its index here plus one, so the same name
    /// always gets the same id on this export.
    pub meta_contexts: Vec<String>,
}

/// Why an [`Export`] (or a list of them) cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportError {
    NameInvalid {
        name: String,
        why: &'static str,
    },
    DescriptionInvalid {
        why: &'static str,
    },
    SizeTooLarge {
        size_bytes: u64,
    },
    SizeUnaligned {
        size_bytes: u64,
        block_min_bytes: u32,
    },
    BlockMinInvalid {
        block_min_bytes: u32,
    },
    BlockPreferredInvalid {
        block_preferred_bytes: u32,
        block_min_bytes: u32,
    },
    BlockMaxInvalid {
        block_max_bytes: u32,
        block_preferred_bytes: u32,
    },
    BlockMaxUnaligned {
        block_max_bytes: u32,
        block_min_bytes: u32,
    },
    MetaContextInvalid {
        name: String,
        why: &'static str,
    },
    MetaContextDuplicate {
        name: String,
    },
    ExportNameDuplicate {
        name: String,
    },
    EmptyNameNotFirst {
        index: usize,
    },
    /// One of the above, in the export of this name.
    InExport {
        name: String,
        error: Box<ExportError>,
    },
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::NameInvalid { name, why } => write!(f, "name {name:?}: {why}"),
            ExportError::DescriptionInvalid { why } => write!(f, "description: {why}"),
            ExportError::SizeTooLarge { size_bytes } => write!(
                f,
                "size_bytes = {size_bytes}: must be at most {} (clients such as qemu refuse larger exports)",
                i64::MAX
            ),
            ExportError::SizeUnaligned {
                size_bytes,
                block_min_bytes,
            } => write!(
                f,
                "size_bytes = {size_bytes}: must be a multiple of block_min_bytes = {block_min_bytes}, \
                 otherwise the last {} bytes cannot be addressed",
                size_bytes % u64::from(*block_min_bytes)
            ),
            ExportError::BlockMinInvalid { block_min_bytes } => write!(
                f,
                "block_min_bytes = {block_min_bytes}: must be a power of two between 1 and 65536"
            ),
            ExportError::BlockPreferredInvalid {
                block_preferred_bytes,
                block_min_bytes,
            } => write!(
                f,
                "block_preferred_bytes = {block_preferred_bytes}: must be a power of two at least \
                 max(block_min_bytes = {block_min_bytes}, 512)"
            ),
            ExportError::BlockMaxInvalid {
                block_max_bytes,
                block_preferred_bytes,
            } => write!(
                f,
                "block_max_bytes = {block_max_bytes}: must be between block_preferred_bytes = \
                 {block_preferred_bytes} and {BLOCK_MAX_BYTES_LIMIT} (the most one request may buffer)"
            ),
            ExportError::BlockMaxUnaligned {
                block_max_bytes,
                block_min_bytes,
            } => write!(
                f,
                "block_max_bytes = {block_max_bytes}: must be a multiple of block_min_bytes = {block_min_bytes}"
            ),
            ExportError::MetaContextInvalid { name, why } => {
                write!(f, "meta context {name:?}: {why}")
            }
            ExportError::MetaContextDuplicate { name } => {
                write!(f, "meta context {name:?} is listed twice")
            }
            ExportError::ExportNameDuplicate { name } => {
                write!(f, "export name {name:?} is used twice")
            }
            ExportError::InExport { name, error } => write!(f, "export {name:?}: {error}"),
            ExportError::EmptyNameNotFirst { index } => write!(
                f,
                "export {index} has the empty name, which only the first (default) export may have"
            ),
        }
    }
}

impl std::error::Error for ExportError {}

/// Strings on the wire: at most 4096 bytes, no NUL (proto.md, "Conventions").
fn wire_string_problem(s: &str) -> Option<&'static str> {
    if s.len() > STRING_MAX_BYTES {
        Some("longer than the protocol's 4096-byte string limit")
    } else if s.contains('\0') {
        Some("contains a NUL character, which protocol strings must not")
    } else {
        None
    }
}

/// A metadata context name is `namespace:leaf`; the namespace is non-empty
/// printable non-whitespace without colons. We also require a non-empty leaf:
/// `ns:` is a query wildcard, not a context.
fn meta_context_problem(name: &str) -> Option<&'static str> {
    if let Some(why) = wire_string_problem(name) {
        return Some(why);
    }
    let Some((namespace, leaf)) = name.split_once(':') else {
        return Some("must be namespace:leaf-name");
    };
    if namespace.is_empty() {
        return Some("the namespace before ':' is empty");
    }
    if namespace
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Some("the namespace must be printable without whitespace");
    }
    if leaf.is_empty() {
        return Some("the leaf name after ':' is empty");
    }
    None
}

impl Export {
    /// The constraints documented on the fields, as a typed error.
    pub fn check(&self) -> Result<(), ExportError> {
        if let Some(why) = wire_string_problem(&self.name) {
            return Err(ExportError::NameInvalid {
                name: self.name.clone(),
                why,
            });
        }
        if let Some(why) = wire_string_problem(&self.description) {
            return Err(ExportError::DescriptionInvalid { why });
        }
        if self.size_bytes > i64::MAX as u64 {
            return Err(ExportError::SizeTooLarge {
                size_bytes: self.size_bytes,
            });
        }
        let min = self.block_min_bytes;
        if !min.is_power_of_two() || min > 65536 {
            return Err(ExportError::BlockMinInvalid {
                block_min_bytes: min,
            });
        }
        let preferred = self.block_preferred_bytes;
        if !preferred.is_power_of_two() || preferred < min.max(512) {
            return Err(ExportError::BlockPreferredInvalid {
                block_preferred_bytes: preferred,
                block_min_bytes: min,
            });
        }
        let max = self.block_max_bytes;
        if max < preferred || max > BLOCK_MAX_BYTES_LIMIT {
            return Err(ExportError::BlockMaxInvalid {
                block_max_bytes: max,
                block_preferred_bytes: preferred,
            });
        }
        // A maximum that is not a multiple of the minimum could not itself be
        // requested (it would be unaligned); clients round it down, so say so here.
        if max % min != 0 {
            return Err(ExportError::BlockMaxUnaligned {
                block_max_bytes: max,
                block_min_bytes: min,
            });
        }
        if self.size_bytes % u64::from(min) != 0 {
            return Err(ExportError::SizeUnaligned {
                size_bytes: self.size_bytes,
                block_min_bytes: min,
            });
        }
        for (i, context) in self.meta_contexts.iter().enumerate() {
            if let Some(why) = meta_context_problem(context) {
                return Err(ExportError::MetaContextInvalid {
                    name: context.clone(),
                    why,
                });
            }
            if self.meta_contexts[..i].contains(context) {
                return Err(ExportError::MetaContextDuplicate {
                    name: context.clone(),
                });
            }
        }
        Ok(())
    }

    /// [`Export::check`], the error naming the export.
    pub fn validate(&self) -> Result<(), ExportError> {
        self.check().map_err(|e| ExportError::InExport {
            name: self.name.clone(),
            error: Box::new(e),
        })
    }

    /// The transmission flags advertised for this export. Never `SEND_DF`,
    /// `SEND_CACHE`, `SEND_RESIZE`, `SEND_FAST_ZERO` or `ROTATIONAL`. A
    /// read-only export offers no write-class command (as nbdkit does:
    /// clients then do not try them); they are still refused with EPERM.
    pub fn transmission_flags(&self) -> u16 {
        let mut flags = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH;
        if self.read_only {
            flags |= FLAG_READ_ONLY;
        } else {
            flags |= FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES;
        }
        if self.can_multi_conn {
            flags |= FLAG_CAN_MULTI_CONN;
        }
        flags
    }
}

/// Wire id of the metadata context at `index` in [`Export::meta_contexts`].
/// Plus one so that no selected context has id 0, the value `NBD_OPT_LIST_META_CONTEXT`
/// replies carry as "reserved".
pub(crate) fn meta_context_id(index: usize) -> u32 {
    debug_assert!(index < u32::MAX as usize);
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

/// Checks every export and the list as a whole (unique names; only the first
/// export, the default, may have the empty name).
pub fn validate_exports(exports: &[Export]) -> Result<(), ExportError> {
    for (index, export) in exports.iter().enumerate() {
        export.validate()?;
        if export.name.is_empty() && index != 0 {
            return Err(ExportError::EmptyNameNotFirst { index });
        }
        if exports[..index].iter().any(|e| e.name == export.name) {
            return Err(ExportError::ExportNameDuplicate {
                name: export.name.clone(),
            });
        }
    }
    Ok(())
}
