//! Why a connection was dropped: the protocol violations (and refusals that
//! cannot be answered with an error) that end a session with a hard disconnect.
//! Rendered once, into `Event::Disconnect::reason`.

use std::fmt;

use crate::wire::option_name;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Violation {
    /// The client did not set `NBD_FLAG_C_FIXED_NEWSTYLE`; we only speak fixed newstyle.
    ClientNotFixedNewstyle {
        flags: u32,
    },
    /// The spec: "the server MUST drop the TCP connection if the client sets an unknown flag".
    ClientFlagsUnknown {
        flags: u32,
    },
    OptionMagic {
        magic: u64,
    },
    TooManyOptions {
        options_max: u32,
    },
    OptionTooLong {
        option: u32,
        len_bytes: u32,
        len_bytes_max: usize,
    },
    /// `NBD_OPT_EXPORT_NAME` cannot be answered with an error, so a name it
    /// cannot satisfy ends the session (the spec says so).
    ExportNameTooLong {
        len_bytes: u32,
    },
    ExportNameUnknown {
        name: String,
    },
    RequestMagic {
        magic: u32,
    },
    WriteTooLong {
        len_bytes: u32,
        len_bytes_max: u32,
    },
    TooManyInFlight {
        in_flight_max: usize,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::ClientNotFixedNewstyle { flags } => write!(
                f,
                "client flags {flags:#010x} lack NBD_FLAG_C_FIXED_NEWSTYLE; only fixed newstyle is served"
            ),
            Violation::ClientFlagsUnknown { flags } => write!(
                f,
                "client flags {flags:#010x} set bits other than FIXED_NEWSTYLE (0x1) and NO_ZEROES (0x2)"
            ),
            Violation::OptionMagic { magic } => {
                write!(
                    f,
                    "option magic {magic:#018x} is not IHAVEOPT (0x49484156454f5054)"
                )
            }
            Violation::TooManyOptions { options_max } => {
                write!(f, "more than {options_max} options in one handshake")
            }
            Violation::OptionTooLong {
                option,
                len_bytes,
                len_bytes_max,
            } => write!(
                f,
                "option {option} ({}) carries {len_bytes} bytes, more than the {len_bytes_max} this server skips",
                option_name(*option)
            ),
            Violation::ExportNameTooLong { len_bytes } => write!(
                f,
                "NBD_OPT_EXPORT_NAME with a {len_bytes}-byte name (strings are at most 4096 bytes)"
            ),
            Violation::ExportNameUnknown { name } => write!(
                f,
                "NBD_OPT_EXPORT_NAME asked for unknown export {name} (this option cannot be refused with an error)"
            ),
            Violation::RequestMagic { magic } => write!(
                f,
                "request magic {magic:#010x} is not NBD_REQUEST_MAGIC (0x25609513); the stream cannot be resynchronised"
            ),
            Violation::WriteTooLong {
                len_bytes,
                len_bytes_max,
            } => write!(
                f,
                "NBD_CMD_WRITE of {len_bytes} bytes, more than the {len_bytes_max} this server will read to skip it"
            ),
            Violation::TooManyInFlight { in_flight_max } => write!(
                f,
                "more than {in_flight_max} requests in flight (the server loop should stop reading before this)"
            ),
        }
    }
}

/// A client-supplied name for a message: lossy UTF-8, escaped, at most 256
/// characters, so logs and replies stay printable and bounded.
pub(crate) fn display_name(bytes: &[u8]) -> String {
    const SHOWN_CHARS_MAX: usize = 256;
    let text = String::from_utf8_lossy(bytes);
    let mut shown: String = text.chars().take(SHOWN_CHARS_MAX).collect();
    if text.chars().count() > SHOWN_CHARS_MAX {
        shown.push('…');
    }
    format!("{:?}", shown)
}
