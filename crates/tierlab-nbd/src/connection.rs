//! The connection: input framing (what is being read next), the event queue,
//! the output queue, and the lifecycle (handshake → transmission → closing).
//! Option handling lives in `handshake.rs`, request validation in
//! `transmission.rs`, reply encoding in `reply.rs`.

use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::sync::Arc;

use crate::event::Event;
use crate::export::{Export, validate_exports};
use crate::input::InputBuffer;
use crate::output::OutputQueue;
use crate::transmission::{InFlight, Rejection, RequestHeader};
use crate::violation::Violation;
use crate::wire::{
    CLIENT_FLAGS_BYTES, FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES, IHAVEOPT, NBDMAGIC,
    OPTION_HEADER_BYTES, REQUEST_HEADER_BYTES,
};
use crate::{OPTION_DATA_BYTES_MAX, REQUESTS_IN_FLIGHT_MAX};

/// What the next input bytes are.
#[derive(Debug)]
pub(crate) enum Reading {
    /// The client's 32-bit flags after the greeting.
    ClientFlags,
    /// An option header: IHAVEOPT, option, data length.
    OptionHeader,
    /// `len_bytes` (≤ [`OPTION_DATA_BYTES_MAX`]) of option data, buffered whole.
    OptionData { option: u32, len_bytes: u32 },
    /// Option data skipped without buffering; then `answer` is sent.
    OptionDiscard {
        option: u32,
        remaining_bytes: u32,
        answer: DiscardAnswer,
    },
    /// A request header.
    RequestHeader,
    /// A valid write's payload, received straight into the request's buffer
    /// (allocated whole from the header). Invariant: `filled_bytes < data.len()`;
    /// the request is surfaced the moment it fills.
    WritePayload {
        header: RequestHeader,
        data: Vec<u8>,
        filled_bytes: usize,
    },
    /// A refused write's payload, skipped to stay in sync; then `rejection` is sent.
    WriteDiscard {
        handle: u64,
        remaining_bytes: u32,
        rejection: Rejection,
    },
    /// No more input is parsed (DISC, ABORT, or a protocol violation).
    Closed,
}

/// The reply owed once a skipped option's data has been read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiscardAnswer {
    /// A known option whose data exceeds [`OPTION_DATA_BYTES_MAX`].
    TooBig { len_bytes: u32 },
    /// An option this server does not implement.
    Unsupported,
}

/// Which buffer [`Connection::recv_buffer`] lent out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lent {
    Input,
    /// The spare tail of the write payload being received (zero copy).
    Payload,
}

/// Handshake state that carries into transmission.
#[derive(Debug, Default)]
pub(crate) struct Negotiation {
    pub(crate) client_no_zeroes: bool,
    pub(crate) structured_replies: bool,
    /// The last `NBD_OPT_SET_META_CONTEXT`'s result, if it succeeded.
    pub(crate) meta_selection: Option<MetaSelection>,
    pub(crate) options_count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MetaSelection {
    pub(crate) export: usize,
    /// Indices into the export's `meta_contexts`.
    pub(crate) context_indices: Vec<usize>,
}

/// Fixed once transmission starts.
#[derive(Debug)]
pub(crate) struct Transmission {
    pub(crate) export: usize,
    pub(crate) structured_replies: bool,
    /// Ids of the negotiated metadata contexts; a block status reply carries
    /// exactly one chunk for each.
    pub(crate) context_ids: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// The client's DISC or ABORT: answer what is in flight, drain, close.
    Soft,
    /// A protocol violation: nothing more is owed; close once output is drained.
    Hard,
}

/// One NBD connection, server side, as a sans-IO state machine: feed it the
/// bytes received, take events (requests) out, give replies in, and write
/// out what [`Connection::output`] gathers.
///
/// Driving it (the socket loop is the caller's):
/// ```no_run
/// # use std::sync::Arc;
/// # use tierlab_nbd::{Connection, Event, Export};
/// # fn recv(_: &mut [u8]) -> usize { 0 } fn writev(_: &[std::io::IoSlice]) -> usize { 0 }
/// # let exports: Arc<[Export]> = Arc::from(Vec::new());
/// let mut conn = Connection::new(exports);
/// loop {
///     let written = {
///         let mut slices = Vec::new();
///         conn.output(&mut slices);
///         writev(&slices)
///     };
///     conn.consume_output(written);
///     if conn.should_close() { break }
///     // Backpressure: stop reading while too much is in flight or queued.
///     if conn.requests_in_flight() < 64 && conn.output_len() < 8 << 20 {
///         let n = recv(conn.recv_buffer(64 * 1024));
///         if n == 0 { break } // EOF
///         conn.filled(n);
///     }
///     while let Some(event) = conn.poll_event() {
///         match event {
///             Event::Ready { .. } => {}
///             Event::Request(request) => { /* execute, later conn.reply_*(request.handle, ..) */ }
///             Event::Disconnect { .. } => {}
///         }
///     }
/// }
/// ```
#[derive(Debug)]
pub struct Connection {
    pub(crate) exports: Arc<[Export]>,
    pub(crate) input: InputBuffer,
    pub(crate) reading: Reading,
    lent: Option<Lent>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) output: OutputQueue,
    pub(crate) negotiation: Negotiation,
    pub(crate) transmission: Option<Transmission>,
    /// Requests surfaced and not yet answered, by handle.
    pub(crate) in_flight: HashMap<u64, InFlight>,
    pub(crate) closing: Option<Closing>,
}

impl Connection {
    /// A connection serving `exports` (the first is the default export); the
    /// greeting is queued for output.
    ///
    /// Panics if the exports are invalid ([`validate_exports`]): that is a
    /// configuration error to catch at startup, not something a peer can cause.
    pub fn new(exports: Arc<[Export]>) -> Connection {
        if let Err(message) = validate_exports(&exports) {
            panic!("tierlab-nbd: invalid exports: {message}");
        }
        let mut connection = Connection {
            exports,
            input: InputBuffer::default(),
            reading: Reading::ClientFlags,
            lent: None,
            events: VecDeque::new(),
            output: OutputQueue::default(),
            negotiation: Negotiation::default(),
            transmission: None,
            in_flight: HashMap::new(),
            closing: None,
        };
        let mut greeting = [0u8; 18];
        greeting[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
        greeting[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
        greeting[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        connection.output.push_copy(&greeting);
        connection.debug_check();
        connection
    }

    /// Feed bytes received from the peer (copies them). Parses eagerly: events
    /// and replies to refused requests are ready when this returns.
    pub fn receive(&mut self, bytes: &[u8]) {
        debug_assert!(
            self.lent.is_none(),
            "receive() between recv_buffer() and filled()"
        );
        self.lent = None;
        let mut rest = bytes;
        while !rest.is_empty() {
            if matches!(self.reading, Reading::Closed) {
                break; // Nothing more is parsed; the rest is dropped.
            }
            // Payloads go straight to their destination when nothing precedes
            // them in the input buffer (the usual case).
            if self.input.is_empty() {
                match &mut self.reading {
                    Reading::WritePayload {
                        data, filled_bytes, ..
                    } => {
                        let n = (data.len() - *filled_bytes).min(rest.len());
                        data[*filled_bytes..*filled_bytes + n].copy_from_slice(&rest[..n]);
                        *filled_bytes += n;
                        rest = &rest[n..];
                        if *filled_bytes == data.len() {
                            self.finish_write_payload();
                        }
                        continue;
                    }
                    Reading::OptionDiscard {
                        remaining_bytes, ..
                    }
                    | Reading::WriteDiscard {
                        remaining_bytes, ..
                    } => {
                        let n = (*remaining_bytes as usize).min(rest.len());
                        *remaining_bytes -= n as u32;
                        rest = &rest[n..];
                        if *remaining_bytes == 0 {
                            self.finish_discard();
                        }
                        continue;
                    }
                    _ => {}
                }
            }
            // Buffer exactly what the current item still needs, so the input
            // buffer never holds more than one item whatever the slice size.
            let n = self.wanted_bytes().min(rest.len());
            self.input.append(&rest[..n]);
            rest = &rest[n..];
            self.process_input();
        }
        self.debug_check();
    }

    /// Zero-copy receive: spare space to `recv()` into (at least `min` bytes),
    /// then call [`Connection::filled`] with the count received. While a large
    /// write payload is being received this is the payload's own buffer.
    pub fn recv_buffer(&mut self, min: usize) -> &mut [u8] {
        let min_bytes = min.max(1);
        let payload_fits = self.input.is_empty()
            && matches!(
                &self.reading,
                Reading::WritePayload { data, filled_bytes, .. } if data.len() - filled_bytes >= min_bytes
            );
        if payload_fits {
            self.lent = Some(Lent::Payload);
            if let Reading::WritePayload {
                data, filled_bytes, ..
            } = &mut self.reading
            {
                return &mut data[*filled_bytes..];
            }
            unreachable!("payload_fits checked the state");
        }
        self.lent = Some(Lent::Input);
        self.input.spare(min_bytes)
    }

    /// `n` bytes were received into the buffer [`Connection::recv_buffer`] returned.
    pub fn filled(&mut self, n: usize) {
        match self.lent.take() {
            None => {
                debug_assert!(n == 0, "filled({n}) without recv_buffer()");
            }
            Some(Lent::Payload) => {
                let Reading::WritePayload {
                    data, filled_bytes, ..
                } = &mut self.reading
                else {
                    unreachable!("the payload buffer is only lent while receiving a payload");
                };
                assert!(
                    n <= data.len() - *filled_bytes,
                    "filled({n}) beyond the {} bytes lent",
                    data.len() - *filled_bytes
                );
                *filled_bytes += n;
                if *filled_bytes == data.len() {
                    self.finish_write_payload();
                }
            }
            Some(Lent::Input) => {
                self.input.filled(n);
                self.process_input();
            }
        }
        self.debug_check();
    }

    /// The next event, in order. Parsing is eager, so this only dequeues.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Appends `IoSlice`s of all pending output, in order (one per segment;
    /// read data is its own segment). Truncate `out` to respect `IOV_MAX`.
    pub fn output<'a>(&'a self, out: &mut Vec<IoSlice<'a>>) {
        self.output.gather(out);
    }

    /// Bytes pending output.
    pub fn output_len(&self) -> usize {
        self.output.pending_bytes()
    }

    /// `n` bytes of output were written.
    pub fn consume_output(&mut self, n: usize) {
        self.output.consume(n);
        self.debug_check();
    }

    /// True once the connection takes no more input (DISC, ABORT, protocol
    /// error). See [`Connection::should_close`] for when to close the socket.
    pub fn is_closing(&self) -> bool {
        self.closing.is_some()
    }

    /// True once closing and nothing more is owed: all output written, and
    /// after a clean DISC every in-flight request answered (the spec: the
    /// server "MUST handle all outstanding requests" before closing). After a
    /// protocol violation in-flight requests are not waited for.
    pub fn should_close(&self) -> bool {
        match self.closing {
            None => false,
            Some(Closing::Soft) => self.output_len() == 0 && self.in_flight.is_empty(),
            Some(Closing::Hard) => self.output_len() == 0,
        }
    }

    /// True once transmission was entered (stays true while closing).
    pub fn in_transmission(&self) -> bool {
        self.transmission.is_some()
    }

    /// Requests surfaced and not yet replied to.
    pub fn requests_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Input bytes held beyond what has been parsed: a partial header or
    /// option, or the received part of a write payload.
    pub fn input_buffered_bytes(&self) -> usize {
        let payload = match &self.reading {
            Reading::WritePayload { filled_bytes, .. } => *filled_bytes,
            _ => 0,
        };
        self.input.unparsed_len() + payload
    }

    /// The most [`Connection::input_buffered_bytes`] can ever be: one option's
    /// data, or a request header plus the largest write payload.
    pub fn input_buffered_bytes_max(&self) -> usize {
        let block_max_bytes = self
            .exports
            .iter()
            .map(|e| e.block_max_bytes as usize)
            .max()
            .unwrap_or(0);
        OPTION_DATA_BYTES_MAX.max(REQUEST_HEADER_BYTES + block_max_bytes)
    }

    // ---- Input framing ----

    /// Bytes the current fixed-size item still needs (at least 1).
    fn wanted_bytes(&self) -> usize {
        let needed = match &self.reading {
            Reading::ClientFlags => CLIENT_FLAGS_BYTES,
            Reading::OptionHeader => OPTION_HEADER_BYTES,
            Reading::OptionData { len_bytes, .. } => *len_bytes as usize,
            Reading::RequestHeader => REQUEST_HEADER_BYTES,
            Reading::WritePayload {
                data, filled_bytes, ..
            } => data.len() - filled_bytes,
            Reading::OptionDiscard {
                remaining_bytes, ..
            }
            | Reading::WriteDiscard {
                remaining_bytes, ..
            } => *remaining_bytes as usize,
            Reading::Closed => 0,
        };
        needed.saturating_sub(self.input.unparsed_len()).max(1)
    }

    /// Takes a fixed-size item off the input if it is all there.
    fn take_array<const N: usize>(&mut self) -> Option<[u8; N]> {
        if self.input.unparsed_len() < N {
            return None;
        }
        let mut item = [0u8; N];
        item.copy_from_slice(&self.input.unparsed()[..N]);
        self.input.consume(N);
        Some(item)
    }

    /// Parses everything complete in the input buffer. Each pass either
    /// consumes input or changes state; a state change without consuming is
    /// followed by one that consumes or stops, so the loop ends. The pass
    /// limit is a backstop against a bug turning into a hang.
    pub(crate) fn process_input(&mut self) {
        let passes_max = 2 * self.input.unparsed_len() + 16;
        for _ in 0..passes_max {
            let progressed = match &mut self.reading {
                Reading::Closed => {
                    self.input.clear();
                    false
                }
                Reading::ClientFlags => match self.take_array::<CLIENT_FLAGS_BYTES>() {
                    Some(bytes) => {
                        self.on_client_flags(u32::from_be_bytes(bytes));
                        true
                    }
                    None => false,
                },
                Reading::OptionHeader => match self.take_array::<OPTION_HEADER_BYTES>() {
                    Some(bytes) => {
                        self.on_option_header(bytes);
                        true
                    }
                    None => false,
                },
                Reading::OptionData { option, len_bytes } => {
                    let (option, len) = (*option, *len_bytes as usize);
                    if self.input.unparsed_len() < len {
                        false
                    } else {
                        // Options are rare and ≤ 64 KiB: a copy keeps the
                        // handlers free to borrow the connection mutably.
                        let data = self.input.unparsed()[..len].to_vec();
                        self.input.consume(len);
                        self.reading = Reading::OptionHeader;
                        self.on_option_data(option, &data);
                        true
                    }
                }
                Reading::OptionDiscard {
                    remaining_bytes, ..
                }
                | Reading::WriteDiscard {
                    remaining_bytes, ..
                } => {
                    let n = (*remaining_bytes as usize).min(self.input.unparsed_len());
                    self.input.consume(n);
                    *remaining_bytes -= n as u32;
                    if *remaining_bytes == 0 {
                        self.finish_discard();
                        true
                    } else {
                        false // The input is exhausted.
                    }
                }
                Reading::RequestHeader => match self.take_array::<REQUEST_HEADER_BYTES>() {
                    Some(bytes) => {
                        self.on_request_header(bytes);
                        true
                    }
                    None => false,
                },
                Reading::WritePayload {
                    data, filled_bytes, ..
                } => {
                    let n = (data.len() - *filled_bytes).min(self.input.unparsed_len());
                    data[*filled_bytes..*filled_bytes + n]
                        .copy_from_slice(&self.input.unparsed()[..n]);
                    *filled_bytes += n;
                    self.input.consume(n);
                    if *filled_bytes == data.len() {
                        self.finish_write_payload();
                        true
                    } else {
                        false // The input is exhausted.
                    }
                }
            };
            if !progressed {
                return;
            }
        }
        debug_assert!(false, "process_input did not settle within its pass limit");
    }

    /// A skipped option's or write's data has all been read: send what is owed.
    fn finish_discard(&mut self) {
        match std::mem::replace(&mut self.reading, Reading::Closed) {
            Reading::OptionDiscard {
                option,
                remaining_bytes,
                answer,
            } => {
                debug_assert_eq!(remaining_bytes, 0);
                self.reading = Reading::OptionHeader;
                self.on_option_discarded(option, answer);
            }
            Reading::WriteDiscard {
                handle,
                remaining_bytes,
                rejection,
            } => {
                debug_assert_eq!(remaining_bytes, 0);
                self.reading = Reading::RequestHeader;
                self.send_rejection(handle, &rejection);
            }
            other => unreachable!("finish_discard in state {other:?}"),
        }
    }

    /// A valid write's payload is complete: surface the request.
    fn finish_write_payload(&mut self) {
        match std::mem::replace(&mut self.reading, Reading::RequestHeader) {
            Reading::WritePayload {
                header,
                data,
                filled_bytes,
            } => {
                debug_assert_eq!(filled_bytes, data.len());
                self.surface_write(header, data);
            }
            other => unreachable!("finish_write_payload in state {other:?}"),
        }
    }

    // ---- Lifecycle ----

    /// Ends the session on a protocol violation: no more input is parsed.
    pub(crate) fn close_hard(&mut self, violation: Violation) {
        debug_assert!(self.closing.is_none(), "closed twice: {violation}");
        self.reading = Reading::Closed;
        self.input.clear();
        self.closing = Some(Closing::Hard);
        self.events.push_back(Event::Disconnect {
            reason: violation.to_string(),
            clean: false,
        });
    }

    /// Ends the session at the client's request (DISC or ABORT).
    pub(crate) fn close_soft(&mut self, reason: &str) {
        debug_assert!(self.closing.is_none(), "closed twice: {reason}");
        self.reading = Reading::Closed;
        self.input.clear();
        self.closing = Some(Closing::Soft);
        self.events.push_back(Event::Disconnect {
            reason: reason.to_owned(),
            clean: true,
        });
    }

    /// Surfaces a valid request, tracking it as in flight.
    pub(crate) fn surface(&mut self, request: crate::Request, in_flight: InFlight) {
        if self.in_flight.len() >= REQUESTS_IN_FLIGHT_MAX {
            self.close_hard(Violation::TooManyInFlight {
                in_flight_max: REQUESTS_IN_FLIGHT_MAX,
            });
            return;
        }
        let previous = self.in_flight.insert(request.handle, in_flight);
        debug_assert!(
            previous.is_none(),
            "validation refuses handles already in flight"
        );
        self.events.push_back(Event::Request(request));
    }

    // ---- Invariants ----

    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// The connection's invariants; run after every public call in debug builds.
    pub fn check_invariants(&self) {
        self.output.check_invariants();
        assert!(self.in_flight.len() <= REQUESTS_IN_FLIGHT_MAX);
        assert!(self.input_buffered_bytes() <= self.input_buffered_bytes_max());
        let unparsed = self.input.unparsed_len();
        match &self.reading {
            Reading::ClientFlags => assert!(unparsed < CLIENT_FLAGS_BYTES),
            Reading::OptionHeader => assert!(unparsed < OPTION_HEADER_BYTES),
            Reading::OptionData { len_bytes, .. } => {
                assert!(*len_bytes as usize <= OPTION_DATA_BYTES_MAX);
                assert!(unparsed < *len_bytes as usize);
            }
            Reading::RequestHeader => assert!(unparsed < REQUEST_HEADER_BYTES),
            Reading::WritePayload {
                data, filled_bytes, ..
            } => {
                assert_eq!(
                    unparsed, 0,
                    "payload bytes are moved out of the input buffer"
                );
                assert!(*filled_bytes < data.len());
            }
            Reading::OptionDiscard {
                remaining_bytes, ..
            }
            | Reading::WriteDiscard {
                remaining_bytes, ..
            } => {
                assert_eq!(unparsed, 0, "skipped bytes are dropped at once");
                assert!(*remaining_bytes > 0);
            }
            Reading::Closed => assert_eq!(unparsed, 0),
        }
        let transmitting = matches!(
            self.reading,
            Reading::RequestHeader | Reading::WritePayload { .. } | Reading::WriteDiscard { .. }
        );
        assert!(!transmitting || self.transmission.is_some());
        assert!(self.transmission.is_some() || self.in_flight.is_empty());
        assert_eq!(
            self.closing.is_some(),
            matches!(self.reading, Reading::Closed)
        );
        if let Some(transmission) = &self.transmission {
            assert!(transmission.export < self.exports.len());
            assert!(transmission.structured_replies || transmission.context_ids.is_empty());
        }
    }

    /// Answers a refused request with its error.
    pub(crate) fn send_rejection(&mut self, handle: u64, rejection: &Rejection) {
        let message = rejection.to_string();
        self.send_error(handle, rejection.errno(), &message);
    }
}
