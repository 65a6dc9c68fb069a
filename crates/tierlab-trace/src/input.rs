//! Opening inputs: files or stdin, with transparent decompression chosen by
//! magic bytes (not by file name), and a fast line splitter.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::{Location, Result, TraceError};

/// Compression of an input, recognised by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Bzip2,
    Xz,
    Zstd,
}

impl Compression {
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(b"BZh") {
            Compression::Bzip2
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Compression::Xz
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Bzip2 => "bzip2",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
        }
    }
}

/// Turns a decoder's silent end-of-stream on a cut-off file into an error:
/// every decoder here reports truncation, but we also reject a compressed
/// stream that ends before its first complete frame with a clear message.
struct Decoded<R> {
    inner: R,
    compression: Compression,
}

impl<R: Read> Read for Decoded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            let kind = e.kind();
            io::Error::new(
                if kind == io::ErrorKind::UnexpectedEof {
                    kind
                } else {
                    io::ErrorKind::InvalidData
                },
                format!(
                    "{} stream is truncated or corrupt: {e}",
                    self.compression.name()
                ),
            )
        })
    }
}

/// The path shown in messages for standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// Opens `path` (`-` for stdin) and returns a decompressed byte stream.
pub fn open_decompressed(path: &Path) -> Result<(Box<dyn Read + Send>, Compression)> {
    let raw: Box<dyn Read + Send> = if path == Path::new("-") {
        Box::new(io::stdin())
    } else {
        let file = File::open(path).map_err(|e| TraceError::io(path, Location::Input, e))?;
        Box::new(file)
    };
    let mut buffered = BufReader::with_capacity(256 * 1024, raw);
    let head = buffered
        .fill_buf()
        .map_err(|e| TraceError::io(display_path(path), Location::Input, e))?;
    let compression = Compression::sniff(head);
    let stream: Box<dyn Read + Send> = match compression {
        Compression::None => Box::new(buffered),
        Compression::Gzip => Box::new(Decoded {
            inner: flate2::bufread::MultiGzDecoder::new(buffered),
            compression,
        }),
        Compression::Bzip2 => Box::new(Decoded {
            inner: bzip2::bufread::MultiBzDecoder::new(buffered),
            compression,
        }),
        Compression::Xz => Box::new(Decoded {
            inner: liblzma::bufread::XzDecoder::new_multi_decoder(buffered),
            compression,
        }),
        Compression::Zstd => {
            let decoder = zstd::stream::read::Decoder::with_buffer(buffered)
                .map_err(|e| TraceError::io(display_path(path), Location::Input, e))?;
            Box::new(Decoded {
                inner: decoder,
                compression,
            })
        }
    };
    Ok((stream, compression))
}

pub fn display_path(path: &Path) -> PathBuf {
    if path == Path::new("-") {
        PathBuf::from(STDIN_NAME)
    } else {
        path.to_path_buf()
    }
}

/// Longest line accepted: a binary file read as text would otherwise make the
/// splitter buffer the whole input looking for a newline.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Splits a byte stream into lines without allocating per line. Strips a
/// trailing `\r`. Memory is bounded by `MAX_LINE_BYTES`.
pub struct LineReader {
    inner: Box<dyn Read + Send>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// 1-based number of the line last returned.
    pub line_no: u64,
}

impl LineReader {
    pub fn new(inner: Box<dyn Read + Send>) -> Self {
        LineReader {
            inner,
            buf: vec![0; 1 << 18],
            start: 0,
            end: 0,
            eof: false,
            line_no: 0,
        }
    }

    /// Prepends already-read bytes (used after sniffing the head of a stream).
    pub fn with_prefix(inner: Box<dyn Read + Send>, prefix: Vec<u8>) -> Self {
        let mut reader = LineReader::new(inner);
        let n = prefix.len();
        if reader.buf.len() < n {
            reader.buf.resize(n, 0);
        }
        reader.buf[..n].copy_from_slice(&prefix);
        reader.end = n;
        reader
    }

    /// The next line, or `None` at the end of the input.
    pub fn next_line(&mut self) -> io::Result<Option<&[u8]>> {
        loop {
            if let Some(pos) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let line_start = self.start;
                let mut line_end = self.start + pos;
                self.start = line_end + 1;
                if line_end > line_start && self.buf[line_end - 1] == b'\r' {
                    line_end -= 1;
                }
                self.line_no += 1;
                return Ok(Some(&self.buf[line_start..line_end]));
            }
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                // Last line without a trailing newline.
                let line_start = self.start;
                let mut line_end = self.end;
                self.start = self.end;
                if self.buf[line_end - 1] == b'\r' {
                    line_end -= 1;
                }
                self.line_no += 1;
                return Ok(Some(&self.buf[line_start..line_end]));
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_LINE_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "line {} is longer than {MAX_LINE_BYTES} bytes: is this a binary file? (pass --format)",
                        self.line_no + 1
                    ),
                ));
            }
            let grown = (self.buf.len() * 2).min(MAX_LINE_BYTES);
            self.buf.resize(grown, 0);
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads fixed-size binary records; a partial record at the end is an error.
pub struct RecordReader {
    inner: Box<dyn Read + Send>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Byte offset (in the decompressed stream) of the record last returned.
    pub offset: u64,
    consumed: u64,
}

impl RecordReader {
    pub fn with_prefix(inner: Box<dyn Read + Send>, prefix: Vec<u8>) -> Self {
        let mut buf = vec![0; (1 << 18).max(prefix.len())];
        buf[..prefix.len()].copy_from_slice(&prefix);
        RecordReader {
            inner,
            end: prefix.len(),
            buf,
            start: 0,
            eof: false,
            offset: 0,
            consumed: 0,
        }
    }

    /// Skips `n` bytes (a header).
    pub fn skip(&mut self, n: usize) -> io::Result<bool> {
        let mut left = n;
        while left > 0 {
            if self.start == self.end {
                if self.eof {
                    return Ok(false);
                }
                self.fill()?;
                continue;
            }
            let take = left.min(self.end - self.start);
            self.start += take;
            self.consumed += take as u64;
            left -= take;
        }
        Ok(true)
    }

    /// Bytes consumed so far (where a partial record starts).
    pub fn position(&self) -> u64 {
        self.consumed
    }

    /// The next `size`-byte record; `Err` with `UnexpectedEof` on a partial one.
    pub fn next_record(&mut self, size: usize) -> io::Result<Option<&[u8]>> {
        while self.end - self.start < size {
            if self.eof {
                let left = self.end - self.start;
                if left == 0 {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("truncated record: {left} trailing bytes, records are {size} bytes"),
                ));
            }
            self.fill()?;
        }
        let rec = &self.buf[self.start..self.start + size];
        self.offset = self.consumed;
        self.start += size;
        self.consumed += size as u64;
        Ok(Some(rec))
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads up to `limit` bytes from the start of a stream, for format sniffing.
pub fn read_head(stream: &mut dyn Read, limit: usize) -> io::Result<Vec<u8>> {
    let mut head = vec![0; limit];
    let mut n = 0;
    while n < limit {
        match stream.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    head.truncate(n);
    Ok(head)
}
