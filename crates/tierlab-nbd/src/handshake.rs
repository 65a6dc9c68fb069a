//! The fixed newstyle handshake: client flags, then options until GO or
//! EXPORT_NAME enters transmission (or ABORT ends the session).

use crate::connection::{Connection, DiscardAnswer, MetaSelection, Reading, Transmission};
use crate::event::Event;
use crate::export::meta_context_id;
use crate::violation::{Violation, display_name};
use crate::wire::{
    EXPORT_NAME_ZEROES_BYTES, FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES, IHAVEOPT, INFO_BLOCK_SIZE,
    INFO_DESCRIPTION, INFO_EXPORT, INFO_NAME, OPT_ABORT, OPT_EXPORT_NAME, OPT_GO, OPT_INFO,
    OPT_LIST, OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT, OPT_STARTTLS, OPT_STRUCTURED_REPLY,
    OPTION_REPLY_MAGIC, REP_ACK, REP_ERR_INVALID, REP_ERR_POLICY, REP_ERR_TOO_BIG, REP_ERR_UNKNOWN,
    REP_ERR_UNSUP, REP_INFO, REP_META_CONTEXT, REP_SERVER, Reader, STRING_MAX_BYTES, option_name,
};
use crate::{OPTION_DATA_BYTES_MAX, OPTION_DISCARD_BYTES_MAX, OPTIONS_COUNT_MAX};

/// An `NBD_OPT_INFO` / `NBD_OPT_GO` request.
struct InfoRequest<'a> {
    name: &'a [u8],
    /// The `NBD_INFO_*` types asked for, two bytes each.
    infos: &'a [u8],
}

impl InfoRequest<'_> {
    fn wants(&self, info: u16) -> bool {
        self.infos
            .chunks_exact(2)
            .any(|pair| u16::from_be_bytes([pair[0], pair[1]]) == info)
    }
}

/// Data: u32 name length, name, u16 count, count × u16 info types — exactly.
fn parse_info_request(data: &[u8]) -> Result<InfoRequest<'_>, &'static str> {
    let mut reader = Reader::new(data);
    let name_len = reader
        .u32()
        .ok_or("shorter than the 6 bytes of name length and count")?;
    let name = reader
        .take(name_len as usize)
        .ok_or("the name length runs past the option data")?;
    if name.len() > STRING_MAX_BYTES {
        return Err("the export name is longer than 4096 bytes");
    }
    let count = reader
        .u16()
        .ok_or("the information request count is missing")?;
    let infos = reader
        .take(2 * usize::from(count))
        .ok_or("the information request count runs past the option data")?;
    if reader.remaining_bytes() != 0 {
        return Err("trailing bytes after the information requests");
    }
    Ok(InfoRequest { name, infos })
}

/// An `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT` request.
struct MetaRequest<'a> {
    export_name: &'a [u8],
    queries: Vec<&'a [u8]>,
}

/// Data: u32 name length, name, u32 count, count × (u32 length, query) — exactly.
/// Queries must start with `namespace:` (the spec lets servers refuse the rest).
fn parse_meta_request(data: &[u8]) -> Result<MetaRequest<'_>, &'static str> {
    let mut reader = Reader::new(data);
    let name_len = reader.u32().ok_or("the export name length is missing")?;
    let export_name = reader
        .take(name_len as usize)
        .ok_or("the export name length runs past the option data")?;
    if export_name.len() > STRING_MAX_BYTES {
        return Err("the export name is longer than 4096 bytes");
    }
    let count = reader.u32().ok_or("the query count is missing")?;
    // Each query takes at least 4 bytes, so the data bounds this loop (and the
    // Vec) whatever count the peer claims.
    let mut queries = Vec::new();
    for _ in 0..count {
        let len = reader
            .u32()
            .ok_or("the query count runs past the option data")?;
        let query = reader
            .take(len as usize)
            .ok_or("a query length runs past the option data")?;
        if query.len() > STRING_MAX_BYTES {
            return Err("a query is longer than 4096 bytes");
        }
        match query.iter().position(|&b| b == b':') {
            Some(colon) if colon > 0 => {}
            _ => return Err("a query does not start with a namespace and a colon"),
        }
        queries.push(query);
    }
    if reader.remaining_bytes() != 0 {
        return Err("trailing bytes after the queries");
    }
    Ok(MetaRequest {
        export_name,
        queries,
    })
}

/// Does a `NBD_OPT_LIST_META_CONTEXT` query match a context name? Exact names
/// match themselves; `namespace:` (empty leaf) lists the whole namespace.
fn list_query_matches(query: &[u8], context: &str) -> bool {
    let context = context.as_bytes();
    if query.last() == Some(&b':') {
        context.starts_with(query)
    } else {
        query == context
    }
}

impl Connection {
    pub(crate) fn on_client_flags(&mut self, flags: u32) {
        if flags & FLAG_C_FIXED_NEWSTYLE == 0 {
            self.close_hard(Violation::ClientNotFixedNewstyle { flags });
            return;
        }
        if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
            self.close_hard(Violation::ClientFlagsUnknown { flags });
            return;
        }
        self.negotiation.client_no_zeroes = flags & FLAG_C_NO_ZEROES != 0;
        self.reading = Reading::OptionHeader;
    }

    pub(crate) fn on_option_header(&mut self, header: [u8; 16]) {
        let mut reader = Reader::new(&header);
        let (Some(magic), Some(option), Some(len_bytes)) =
            (reader.u64(), reader.u32(), reader.u32())
        else {
            unreachable!("a 16-byte option header holds 8 + 4 + 4 bytes");
        };
        if magic != IHAVEOPT {
            self.close_hard(Violation::OptionMagic { magic });
            return;
        }
        self.negotiation.options_count += 1;
        if self.negotiation.options_count > OPTIONS_COUNT_MAX {
            // A client looping on options is a denial of service (the spec
            // allows a hard disconnect for that).
            self.close_hard(Violation::TooManyOptions {
                options_max: OPTIONS_COUNT_MAX,
            });
            return;
        }
        let len = len_bytes as usize;
        let known = matches!(
            option,
            OPT_ABORT
                | OPT_LIST
                | OPT_STARTTLS
                | OPT_INFO
                | OPT_GO
                | OPT_STRUCTURED_REPLY
                | OPT_LIST_META_CONTEXT
                | OPT_SET_META_CONTEXT
        );
        self.reading = if option == OPT_EXPORT_NAME {
            if len > STRING_MAX_BYTES {
                self.close_hard(Violation::ExportNameTooLong { len_bytes });
                return;
            }
            Reading::OptionData { option, len_bytes }
        } else if known && len <= OPTION_DATA_BYTES_MAX {
            Reading::OptionData { option, len_bytes }
        } else if len <= OPTION_DISCARD_BYTES_MAX {
            // Unknown options are answered without looking at their data, so
            // it is skipped, not buffered, whatever its length.
            let answer = if known {
                DiscardAnswer::TooBig { len_bytes }
            } else {
                DiscardAnswer::Unsupported
            };
            Reading::OptionDiscard {
                option,
                remaining_bytes: len_bytes,
                answer,
            }
        } else {
            self.close_hard(Violation::OptionTooLong {
                option,
                len_bytes,
                len_bytes_max: OPTION_DISCARD_BYTES_MAX,
            });
            return;
        };
    }

    /// A skipped option's data has been read.
    pub(crate) fn on_option_discarded(&mut self, option: u32, answer: DiscardAnswer) {
        debug_assert!(matches!(self.reading, Reading::OptionHeader));
        match answer {
            // ABORT's data is to be ignored, not refused.
            _ if option == OPT_ABORT => self.option_abort(),
            DiscardAnswer::TooBig { len_bytes } => {
                let message = format!(
                    "{} data of {len_bytes} bytes exceeds this server's {OPTION_DATA_BYTES_MAX}-byte limit",
                    option_name(option)
                );
                self.send_option_reply(option, REP_ERR_TOO_BIG, &[message.as_bytes()]);
            }
            DiscardAnswer::Unsupported => {
                let message = format!("option {option} ({}) is not supported", option_name(option));
                self.send_option_reply(option, REP_ERR_UNSUP, &[message.as_bytes()]);
            }
        }
    }

    /// A complete option. The reading state is `OptionHeader` on entry; the
    /// handlers that end the handshake change it.
    pub(crate) fn on_option_data(&mut self, option: u32, data: &[u8]) {
        debug_assert!(matches!(self.reading, Reading::OptionHeader));
        debug_assert!(data.len() <= OPTION_DATA_BYTES_MAX);
        match option {
            OPT_EXPORT_NAME => self.option_export_name(data),
            OPT_ABORT => self.option_abort(),
            OPT_LIST => self.option_list(data),
            OPT_STARTTLS => {
                if data.is_empty() {
                    self.send_option_error(
                        option,
                        REP_ERR_POLICY,
                        "TLS is not offered by this server",
                    );
                } else {
                    self.send_option_error(
                        option,
                        REP_ERR_INVALID,
                        "NBD_OPT_STARTTLS takes no data",
                    );
                }
            }
            OPT_INFO | OPT_GO => self.option_info_or_go(option, data),
            OPT_STRUCTURED_REPLY => self.option_structured_reply(data),
            OPT_LIST_META_CONTEXT => self.option_list_meta_context(data),
            OPT_SET_META_CONTEXT => self.option_set_meta_context(data),
            _ => unreachable!("on_option_header routes only known options here"),
        }
    }

    fn option_abort(&mut self) {
        // The spec: "The server MUST reply with NBD_REP_ACK", then the client drops
        // the connection; any data sent with the option is ignored.
        self.send_option_reply(OPT_ABORT, REP_ACK, &[]);
        self.close_soft("client sent NBD_OPT_ABORT");
    }

    fn option_export_name(&mut self, data: &[u8]) {
        let Some(index) = self.find_export(data) else {
            self.close_hard(Violation::ExportNameUnknown {
                name: display_name(data),
            });
            return;
        };
        let export = &self.exports[index];
        let mut reply = [0u8; 10 + EXPORT_NAME_ZEROES_BYTES];
        reply[0..8].copy_from_slice(&export.size_bytes.to_be_bytes());
        reply[8..10].copy_from_slice(&export.transmission_flags().to_be_bytes());
        let reply_len = if self.negotiation.client_no_zeroes {
            10
        } else {
            10 + EXPORT_NAME_ZEROES_BYTES
        };
        self.output.push_copy(&reply[..reply_len]);
        self.enter_transmission(index);
    }

    fn option_list(&mut self, data: &[u8]) {
        if !data.is_empty() {
            self.send_option_error(OPT_LIST, REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
            return;
        }
        let exports = self.exports.clone();
        for export in exports.iter() {
            // Name, then the description as the "implementation-specific
            // details ... suitable for direct display" the spec allows.
            let name_len = wire_len(export.name.len()).to_be_bytes();
            self.send_option_reply(
                OPT_LIST,
                REP_SERVER,
                &[
                    &name_len,
                    export.name.as_bytes(),
                    export.description.as_bytes(),
                ],
            );
        }
        self.send_option_reply(OPT_LIST, REP_ACK, &[]);
    }

    fn option_structured_reply(&mut self, data: &[u8]) {
        if !data.is_empty() {
            self.send_option_error(
                OPT_STRUCTURED_REPLY,
                REP_ERR_INVALID,
                "NBD_OPT_STRUCTURED_REPLY takes no data",
            );
        } else if self.negotiation.structured_replies {
            // The spec lets servers fail repeated state-changing options.
            self.send_option_error(
                OPT_STRUCTURED_REPLY,
                REP_ERR_INVALID,
                "structured replies are already negotiated",
            );
        } else {
            self.negotiation.structured_replies = true;
            self.send_option_reply(OPT_STRUCTURED_REPLY, REP_ACK, &[]);
        }
    }

    fn option_info_or_go(&mut self, option: u32, data: &[u8]) {
        let request = match parse_info_request(data) {
            Ok(request) => request,
            Err(why) => {
                let message = format!("malformed {}: {why}", option_name(option));
                self.send_option_error(option, REP_ERR_INVALID, &message);
                return;
            }
        };
        let Some(index) = self.find_export(request.name) else {
            let message = format!("unknown export {}", display_name(request.name));
            self.send_option_error(option, REP_ERR_UNKNOWN, &message);
            return;
        };
        let exports = self.exports.clone();
        let export = &exports[index];

        let mut info_export = [0u8; 12];
        info_export[0..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
        info_export[2..10].copy_from_slice(&export.size_bytes.to_be_bytes());
        info_export[10..12].copy_from_slice(&export.transmission_flags().to_be_bytes());
        self.send_option_reply(option, REP_INFO, &[&info_export]);
        if request.wants(INFO_NAME) {
            self.send_option_reply(
                option,
                REP_INFO,
                &[&INFO_NAME.to_be_bytes(), export.name.as_bytes()],
            );
        }
        if request.wants(INFO_DESCRIPTION) {
            self.send_option_reply(
                option,
                REP_INFO,
                &[
                    &INFO_DESCRIPTION.to_be_bytes(),
                    export.description.as_bytes(),
                ],
            );
        }
        // Always sent, asked for or not: our constraints are not the defaults,
        // and a client that did not ask still learns them (requests outside
        // them are refused with EINVAL either way).
        let mut info_block_size = [0u8; 14];
        info_block_size[0..2].copy_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        info_block_size[2..6].copy_from_slice(&export.block_min_bytes.to_be_bytes());
        info_block_size[6..10].copy_from_slice(&export.block_preferred_bytes.to_be_bytes());
        info_block_size[10..14].copy_from_slice(&export.block_max_bytes.to_be_bytes());
        self.send_option_reply(option, REP_INFO, &[&info_block_size]);
        self.send_option_reply(option, REP_ACK, &[]);
        if option == OPT_GO {
            self.enter_transmission(index);
        }
    }

    fn option_list_meta_context(&mut self, data: &[u8]) {
        let option = OPT_LIST_META_CONTEXT;
        let request = match parse_meta_request(data) {
            Ok(request) => request,
            Err(why) => {
                let message = format!("malformed {}: {why}", option_name(option));
                self.send_option_error(option, REP_ERR_INVALID, &message);
                return;
            }
        };
        let Some(index) = self.find_export(request.export_name) else {
            let message = format!("unknown export {}", display_name(request.export_name));
            self.send_option_error(option, REP_ERR_UNKNOWN, &message);
            return;
        };
        let exports = self.exports.clone();
        for context in &exports[index].meta_contexts {
            // No query lists everything; unknown namespaces match nothing.
            let listed = request.queries.is_empty()
                || request
                    .queries
                    .iter()
                    .any(|query| list_query_matches(query, context));
            if listed {
                // The id in list replies is reserved: "SHOULD be set to zero".
                self.send_option_reply(
                    option,
                    REP_META_CONTEXT,
                    &[&0u32.to_be_bytes(), context.as_bytes()],
                );
            }
        }
        self.send_option_reply(option, REP_ACK, &[]);
    }

    fn option_set_meta_context(&mut self, data: &[u8]) {
        let option = OPT_SET_META_CONTEXT;
        // "Issuing this command replaces all previously-set metadata contexts
        // (including when this command fails)".
        self.negotiation.meta_selection = None;
        if !self.negotiation.structured_replies {
            self.send_option_error(
                option,
                REP_ERR_INVALID,
                "NBD_OPT_SET_META_CONTEXT needs NBD_OPT_STRUCTURED_REPLY first",
            );
            return;
        }
        let request = match parse_meta_request(data) {
            Ok(request) => request,
            Err(why) => {
                let message = format!("malformed {}: {why}", option_name(option));
                self.send_option_error(option, REP_ERR_INVALID, &message);
                return;
            }
        };
        let Some(index) = self.find_export(request.export_name) else {
            let message = format!("unknown export {}", display_name(request.export_name));
            self.send_option_error(option, REP_ERR_UNKNOWN, &message);
            return;
        };
        // Only exact names select (so `base:` and unknown names select
        // nothing); each context once, in the export's order.
        let exports = self.exports.clone();
        let mut context_indices = Vec::new();
        for (context_index, context) in exports[index].meta_contexts.iter().enumerate() {
            if request.queries.contains(&context.as_bytes()) {
                context_indices.push(context_index);
                self.send_option_reply(
                    option,
                    REP_META_CONTEXT,
                    &[
                        &meta_context_id(context_index).to_be_bytes(),
                        context.as_bytes(),
                    ],
                );
            }
        }
        self.send_option_reply(option, REP_ACK, &[]);
        self.negotiation.meta_selection = Some(MetaSelection {
            export: index,
            context_indices,
        });
    }

    /// The export a client names: the empty name is the first (default) export.
    fn find_export(&self, name: &[u8]) -> Option<usize> {
        if name.is_empty() {
            return (!self.exports.is_empty()).then_some(0);
        }
        self.exports
            .iter()
            .position(|export| export.name.as_bytes() == name)
    }

    fn enter_transmission(&mut self, export: usize) {
        debug_assert!(self.transmission.is_none());
        debug_assert!(export < self.exports.len());
        let structured_replies = self.negotiation.structured_replies;
        // Contexts count only if the last SET_META_CONTEXT named this export.
        let meta_contexts: Vec<(u32, String)> = match &self.negotiation.meta_selection {
            Some(selection) if selection.export == export => selection
                .context_indices
                .iter()
                .map(|&i| {
                    (
                        meta_context_id(i),
                        self.exports[export].meta_contexts[i].clone(),
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
        self.transmission = Some(Transmission {
            export,
            structured_replies,
            context_ids: meta_contexts.iter().map(|(id, _)| *id).collect(),
        });
        self.reading = Reading::RequestHeader;
        self.events.push_back(Event::Ready {
            export,
            structured_replies,
            meta_contexts,
        });
    }

    /// Queues an option reply: header, then the payload parts back to back.
    pub(crate) fn send_option_reply(&mut self, option: u32, reply_type: u32, payload: &[&[u8]]) {
        let len: usize = payload.iter().map(|part| part.len()).sum();
        let mut header = [0u8; 20];
        header[0..8].copy_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
        header[8..12].copy_from_slice(&option.to_be_bytes());
        header[12..16].copy_from_slice(&reply_type.to_be_bytes());
        header[16..20].copy_from_slice(&wire_len(len).to_be_bytes());
        self.output.push_copy(&header);
        for part in payload {
            self.output.push_copy(part);
        }
    }

    /// An error reply whose data is a message for humans.
    fn send_option_error(&mut self, option: u32, reply_type: u32, message: &str) {
        debug_assert!(reply_type & (1 << 31) != 0, "error replies have bit 31 set");
        debug_assert!(message.len() <= STRING_MAX_BYTES);
        self.send_option_reply(option, reply_type, &[message.as_bytes()]);
    }
}

/// A length for a 32-bit wire field. Everything we send is bounded far below
/// 4 GiB (strings ≤ 4096 bytes, payloads ≤ the block limit).
pub(crate) fn wire_len(len: usize) -> u32 {
    debug_assert!(len <= u32::MAX as usize);
    u32::try_from(len).unwrap_or(u32::MAX)
}
