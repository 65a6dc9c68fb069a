//! tierlab's native binary trace format: a small header, then fixed 32-byte
//! little-endian records that numpy can map without copying
//! (`numpy.memmap(path, dtype=tierlab.NATIVE_DTYPE, offset=records_offset)`).
//!
//! Header (64 bytes, all little-endian):
//! ```text
//!  0  [u8; 8]  magic "TIERLAB\0"
//!  8  u32      version = 1
//! 12  u32      record_bytes = 32
//! 16  u64      records_offset = 64
//! 24  u64      record_count
//! 32  u8       time_base: 0 = Unix epoch ns, 1 = relative ns, 2 = no time
//! 33  [u8; 7]  reserved, zero
//! 40  u64      names_offset: where the device-name trailer starts
//! 48  u64      names_bytes
//! 56  [u8; 8]  reserved, zero
//! ```
//! then `record_count` records, then the trailer: device names, UTF-8, each
//! followed by `\n` (a record's `device_id` indexes them). Names go last
//! because a streaming reader only knows every device at the end; the writer
//! therefore needs a seekable file to fill in the header.
//!
//! Record (32 bytes):
//! ```text
//!  0 u64 time_ns   8 u64 offset_bytes   16 u64 response_ns (u64::MAX = none)
//! 24 u32 size_bytes   28 u16 device_id   30 u8 op (0 read, 1 write, 2 trim, 3 flush)
//! 31 u8 flags: bit 0 = FUA (a write the client asked to be durable
//!       before its reply; `tierlab serve --record`), other bits zero
//! ```

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::{FieldError, Location, TraceError};
use crate::record::{IoRecord, Op, TimeBase};

pub const MAGIC: &[u8; 8] = b"TIERLAB\0";
pub const VERSION: u32 = 1;
pub const RECORD_BYTES: usize = 32;
pub const HEADER_BYTES: usize = 64;
pub const NO_RESPONSE: u64 = u64::MAX;
pub const MAX_DEVICES: usize = u16::MAX as usize + 1;
/// Record flag (byte 31): the write was FUA. Readers ignore the flags.
pub const RECORD_FLAG_FUA: u8 = 1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub record_count: u64,
    pub time_base: TimeBase,
    pub names_offset: u64,
    pub names_bytes: u64,
}

fn time_base_code(t: TimeBase) -> u8 {
    match t {
        TimeBase::UnixEpoch => 0,
        TimeBase::Relative => 1,
        TimeBase::None => 2,
    }
}

impl Header {
    /// The header at the start of `head`; errors name `path` (the file
    /// as shown to the user).
    pub fn parse(head: &[u8], path: &Path) -> Result<Header, TraceError> {
        Header::check(head).map_err(|message| TraceError::Format {
            path: path.to_path_buf(),
            message,
        })
    }

    fn check(head: &[u8]) -> Result<Header, String> {
        if head.len() < HEADER_BYTES || &head[..8] != MAGIC {
            return Err(
                "not a tierlab native trace: missing the `TIERLAB\\0` magic or a 64-byte header"
                    .into(),
            );
        }
        let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap());
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!(
                "native trace version {version} is not supported (this tierlab reads version {VERSION})"
            ));
        }
        let record_bytes = u32_at(12);
        if record_bytes as usize != RECORD_BYTES {
            return Err(format!(
                "native trace declares {record_bytes}-byte records; version 1 has {RECORD_BYTES}"
            ));
        }
        let records_offset = u64_at(16);
        if records_offset != HEADER_BYTES as u64 {
            return Err(format!(
                "native trace header: records_offset is {records_offset}, version 1 has {HEADER_BYTES}"
            ));
        }
        let record_count = u64_at(24);
        let time_base = match head[32] {
            0 => TimeBase::UnixEpoch,
            1 => TimeBase::Relative,
            2 => TimeBase::None,
            other => {
                return Err(format!(
                    "native trace header: time_base {other} is not 0, 1 or 2"
                ));
            }
        };
        let names_offset = u64_at(40);
        let names_bytes = u64_at(48);
        let expected = record_count
            .checked_mul(RECORD_BYTES as u64)
            .and_then(|b| b.checked_add(HEADER_BYTES as u64));
        if expected != Some(names_offset) {
            return Err(format!(
                "native trace header: names_offset {names_offset} does not follow {record_count} records (was the file written completely?)"
            ));
        }
        if names_bytes > 64 << 20 {
            return Err(format!(
                "native trace header: {names_bytes} bytes of device names is implausible"
            ));
        }
        Ok(Header {
            record_count,
            time_base,
            names_offset,
            names_bytes,
        })
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(RECORD_BYTES as u32).to_le_bytes());
        h[16..24].copy_from_slice(&(HEADER_BYTES as u64).to_le_bytes());
        h[24..32].copy_from_slice(&self.record_count.to_le_bytes());
        h[32] = time_base_code(self.time_base);
        h[40..48].copy_from_slice(&self.names_offset.to_le_bytes());
        h[48..56].copy_from_slice(&self.names_bytes.to_le_bytes());
        h
    }

    /// Reads the device-name trailer from a seekable file (`path` as
    /// shown to the user, for errors).
    pub fn read_names<R: Read + Seek>(
        &self,
        file: &mut R,
        path: &Path,
    ) -> Result<Vec<String>, TraceError> {
        let at = Location::Byte(self.names_offset);
        let io = |e: std::io::Error, what: String| {
            TraceError::io(
                path,
                at.clone(),
                std::io::Error::new(e.kind(), format!("native trace: {what}: {e}")),
            )
        };
        file.seek(SeekFrom::Start(self.names_offset))
            .map_err(|e| io(e, "cannot seek to the device names".into()))?;
        let mut names = vec![0; self.names_bytes as usize];
        file.read_exact(&mut names).map_err(|e| {
            io(
                e,
                format!(
                    "device-name trailer is truncated ({} bytes expected)",
                    self.names_bytes
                ),
            )
        })?;
        let text = String::from_utf8(names).map_err(|_| TraceError::Format {
            path: path.to_path_buf(),
            message: "native trace: device names are not UTF-8".into(),
        })?;
        Ok(text.split_terminator('\n').map(str::to_owned).collect())
    }
}

#[inline]
pub fn encode_record(r: &IoRecord, out: &mut [u8; RECORD_BYTES]) {
    out[0..8].copy_from_slice(&r.time_ns.to_le_bytes());
    out[8..16].copy_from_slice(&r.offset_bytes.to_le_bytes());
    out[16..24].copy_from_slice(&r.response_ns.unwrap_or(NO_RESPONSE).to_le_bytes());
    out[24..28].copy_from_slice(&r.size_bytes.to_le_bytes());
    out[28..30].copy_from_slice(&(r.device_id as u16).to_le_bytes());
    out[30] = r.op as u8;
    out[31] = 0;
}

/// Decodes one 32-byte record; `None` if it is not one (wrong length, or
/// an op code other than 0–3). The hot path's decoder: no error built.
#[inline]
pub fn decode_valid(b: &[u8]) -> Option<IoRecord> {
    let b: &[u8; RECORD_BYTES] = b.try_into().ok()?;
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let op = Op::from_code(b[30])?;
    let response = u64_at(16);
    Some(IoRecord {
        time_ns: u64_at(0),
        offset_bytes: u64_at(8),
        response_ns: (response != NO_RESPONSE).then_some(response),
        size_bytes: u32::from_le_bytes(b[24..28].try_into().unwrap()),
        device_id: u16::from_le_bytes([b[28], b[29]]) as u32,
        op,
    })
}

/// Decodes one 32-byte record, or says why it is not one.
pub fn decode_record(b: &[u8]) -> Result<IoRecord, FieldError> {
    assert_eq!(
        b.len(),
        RECORD_BYTES,
        "a native record is {RECORD_BYTES} bytes"
    );
    decode_valid(b).ok_or_else(|| {
        FieldError::new(
            "op",
            b[30].to_string().as_bytes(),
            "0 (read), 1 (write), 2 (trim) or 3 (flush)",
        )
    })
}

/// Writes a native trace to a seekable output; `finish` appends the device
/// names and fills in the header.
pub struct NativeWriter<W: Write + Seek> {
    out: W,
    count: u64,
    buf: Vec<u8>,
}

impl<W: Write + Seek> NativeWriter<W> {
    /// Writes a placeholder header; `finish` writes the real one.
    pub fn new(mut out: W) -> Result<Self, TraceError> {
        let header = Header {
            record_count: 0,
            time_base: TimeBase::Relative,
            names_offset: HEADER_BYTES as u64,
            names_bytes: 0,
        };
        out.write_all(&header.encode()).map_err(write_err)?;
        Ok(NativeWriter {
            out,
            count: 0,
            buf: Vec::with_capacity(RECORD_BYTES * 4096),
        })
    }

    #[inline]
    pub fn write(&mut self, r: &IoRecord) -> Result<(), TraceError> {
        self.write_with_flags(r, 0)
    }

    /// As `write`, with the record's flags byte (`RECORD_FLAG_FUA`).
    #[inline]
    pub fn write_with_flags(&mut self, r: &IoRecord, flags: u8) -> Result<(), TraceError> {
        if r.device_id as usize >= MAX_DEVICES {
            return Err(TraceError::Write {
                format: "native",
                message: format!(
                    "device id {} does not fit: the native format holds at most {MAX_DEVICES} devices",
                    r.device_id
                ),
            });
        }
        let mut rec = [0u8; RECORD_BYTES];
        encode_record(r, &mut rec);
        rec[31] = flags;
        self.buf.extend_from_slice(&rec);
        self.count += 1;
        if self.buf.len() >= RECORD_BYTES * 4096 {
            self.out.write_all(&self.buf).map_err(write_err)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Makes what was written so far a complete, readable trace (records,
    /// the names trailer, the header) without ending it: later records
    /// overwrite the trailer and the next checkpoint or `finish` writes it
    /// again. For traces written while a server runs, so a crash loses at
    /// most what came after the last checkpoint.
    pub fn checkpoint(
        &mut self,
        device_names: &[String],
        time_base: TimeBase,
    ) -> Result<(), TraceError> {
        self.out.write_all(&self.buf).map_err(write_err)?;
        self.buf.clear();
        let records_end = HEADER_BYTES as u64 + self.count * RECORD_BYTES as u64;
        let names = encode_names(device_names)?;
        self.out.write_all(&names).map_err(write_err)?;
        let header = Header {
            record_count: self.count,
            time_base,
            names_offset: records_end,
            names_bytes: names.len() as u64,
        };
        self.out.seek(SeekFrom::Start(0)).map_err(write_err)?;
        self.out.write_all(&header.encode()).map_err(write_err)?;
        self.out.flush().map_err(write_err)?;
        self.out
            .seek(SeekFrom::Start(records_end))
            .map_err(write_err)?;
        Ok(())
    }

    /// Records written so far.
    pub fn record_count(&self) -> u64 {
        self.count
    }

    /// Writes the device names and the final header; returns the record count.
    pub fn finish(
        mut self,
        device_names: &[String],
        time_base: TimeBase,
    ) -> Result<u64, TraceError> {
        self.out.write_all(&self.buf).map_err(write_err)?;
        let names = encode_names(device_names)?;
        self.out.write_all(&names).map_err(write_err)?;
        let header = Header {
            record_count: self.count,
            time_base,
            names_offset: HEADER_BYTES as u64 + self.count * RECORD_BYTES as u64,
            names_bytes: names.len() as u64,
        };
        self.out.seek(SeekFrom::Start(0)).map_err(write_err)?;
        self.out.write_all(&header.encode()).map_err(write_err)?;
        self.out.flush().map_err(write_err)?;
        Ok(self.count)
    }
}

/// The names trailer: each name followed by `\n`.
fn encode_names(device_names: &[String]) -> Result<Vec<u8>, TraceError> {
    let mut names = Vec::new();
    for n in device_names {
        if n.contains('\n') {
            return Err(TraceError::Write {
                format: "native",
                message: format!("device name {n:?} contains a newline"),
            });
        }
        names.extend_from_slice(n.as_bytes());
        names.push(b'\n');
    }
    Ok(names)
}

fn write_err(e: std::io::Error) -> TraceError {
    TraceError::Write {
        format: "native",
        message: e.to_string(),
    }
}
