//! Backing stores: where a device's bytes really live.
//!
//! - `FileBackend`: a regular file or a block device, opened with O_DIRECT
//!   when the filesystem allows it (tmpfs and some others refuse: the file
//!   is then used through the page cache, and `describe` says so). O_DIRECT
//!   needs aligned buffers, offsets and sizes; an IO that is not aligned to
//!   the device's logical block goes through a second, buffered descriptor
//!   of the same file and is counted (`unaligned_ios`).
//! - `RamBackend`: memory, allocated in 1 MiB chunks on first write (a
//!   300 GiB memory tier costs only what is written; unwritten bytes read
//!   as zeros).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tierlab_core::volume::VolumeLabel;
use tierlab_core::{Op, ParamError};

/// One device's storage. Implementations are shared by the IO threads.
pub trait Backend: Send + Sync {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes completed writes durable (fdatasync for files).
    fn flush(&self) -> io::Result<()>;
    fn capacity_bytes(&self) -> u64;
    /// What it is, for errors and summary.json ("file /x (O_DIRECT)").
    fn describe(&self) -> String;
    /// IOs that could not use O_DIRECT (misaligned) and went buffered.
    fn unaligned_ios(&self) -> u64 {
        0
    }
    /// The descriptor io_uring should use for this IO, when the backend is
    /// one file (`None`: the IO goes through `read_at`/`write_at`).
    fn uring_target(&self, _op: Op, _offset: u64, _len: usize) -> Option<UringTarget> {
        None
    }
    /// True when `read_at`/`write_at` only copy memory and never block on
    /// a device: such IOs are done inline whatever the IO engine.
    fn is_memory(&self) -> bool {
        false
    }
    /// Discards [offset, offset + len): the range reads back as zeros or
    /// as its old bytes (a hint, as NBD TRIM is). Default: keeps them.
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// Whether the bytes of [offset, offset + len) were ever written:
    /// appends (length, written) runs covering the range in order. A hole
    /// reads as zeros. Default: all written (a store that cannot tell).
    fn allocation(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
        let _ = offset;
        out.push((len, true));
    }
    /// Its own end-of-run counters (a RAID's member IOs, RMW stripes, ...),
    /// reported in summary.json under `run.device_counters` like a model's.
    fn counters(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
    /// Its tierlab volume id (`tierlab_core::volume`, identity.rs), made and
    /// stored on first use where it keeps one. Default: None, a store that
    /// cannot tell (RAM): nothing bound to it is checked.
    fn volume_label(&self) -> io::Result<Option<VolumeLabel>> {
        Ok(None)
    }
}

/// Where io_uring reads or writes one IO of a file backend.
#[derive(Clone, Copy, Debug)]
pub struct UringTarget {
    pub fd: std::os::fd::RawFd,
    /// O_DIRECT: the buffer must be `DIRECT_ALIGN`-aligned (the engine's
    /// `IoBuf`s are).
    pub direct: bool,
}

use crate::error::BackendError;
pub use crate::iobuf::DIRECT_ALIGN;
use crate::iobuf::IoBuf;

pub struct FileBackend {
    path: PathBuf,
    /// O_DIRECT descriptor, when the filesystem accepted it.
    direct: Option<File>,
    buffered: File,
    capacity_bytes: u64,
    /// Why O_DIRECT is off, when it is.
    direct_off_reason: Option<String>,
    unaligned: AtomicU64,
    /// A regular file (holes can be punched and found), not a device.
    is_regular: bool,
    /// Its volume id, once asked (the first answer is kept, `created_now`
    /// included: the id was made by this process's open).
    label: Mutex<Option<VolumeLabel>>,
}

thread_local! {
    /// Each IO thread's bounce buffer for O_DIRECT (grown as needed), for
    /// callers whose buffer is not aligned.
    static BOUNCE: std::cell::RefCell<IoBuf> = std::cell::RefCell::new(IoBuf::empty());
}

fn with_bounce<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    BOUNCE.with(|b| {
        let mut b = b.borrow_mut();
        if b.capacity() < len {
            *b = IoBuf::zeroed(len);
        }
        b.set_len(len);
        f(b.as_mut_slice())
    })
}

/// True when `buf` may go to an O_DIRECT descriptor as it is (the engine's
/// buffers are; a caller's Vec usually is not).
fn is_aligned(buf: &[u8]) -> bool {
    buf.as_ptr() as usize % DIRECT_ALIGN == 0
}

impl FileBackend {
    /// Opens `path` read-write. `capacity_bytes`: for a regular file, its
    /// size (the file is created or extended to it when `create`); for a
    /// block device, at most the device's size (default: all of it).
    pub fn open(
        path: &Path,
        capacity_bytes: Option<u64>,
        create: bool,
        want_direct: bool,
    ) -> Result<FileBackend, BackendError> {
        let shown = path.display();
        let io = |action: String| {
            move |source: io::Error| BackendError::Io {
                key: String::new(),
                path: path.to_path_buf(),
                action,
                source,
            }
        };
        let buffered = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .map_err(io("cannot open read-write".into()))?;
        let meta = buffered
            .metadata()
            .map_err(io("cannot read its metadata".into()))?;
        let is_block = {
            use std::os::unix::fs::FileTypeExt;
            meta.file_type().is_block_device()
        };
        let size = if is_block {
            block_device_bytes(&buffered).map_err(io("cannot read its size".into()))?
        } else {
            meta.len()
        };
        // Keys relative to the device's table (the caller adds it).
        let capacity = match capacity_bytes {
            Some(c) if is_block && c > size => {
                return Err(BackendError::param(ParamError::new(
                    "capacity_bytes",
                    c,
                    format!("at most {size}, what the device {shown} holds"),
                )));
            }
            Some(c) if !is_block && c > size => {
                if !create {
                    return Err(BackendError::param(
                        ParamError::new(
                            "capacity_bytes",
                            c,
                            format!("at most {size}, what the file {shown} holds"),
                        )
                        .because("set create = true to extend it"),
                    ));
                }
                buffered
                    .set_len(c)
                    .map_err(io(format!("cannot extend to {c} bytes")))?;
                c
            }
            Some(c) => c,
            None if size == 0 => {
                return Err(BackendError::key(
                    "capacity_bytes",
                    format!("missing; {shown} is an empty file: give its size (and create = true)"),
                ));
            }
            None => size,
        };
        let (direct, direct_off_reason) = if !want_direct {
            (None, Some("direct = false in the config".to_string()))
        } else {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
            {
                Ok(f) => (Some(f), None),
                Err(e) => (
                    None,
                    Some(format!(
                        "the filesystem refused O_DIRECT ({e}); using the page cache"
                    )),
                ),
            }
        };
        Ok(FileBackend {
            path: path.to_path_buf(),
            direct,
            buffered,
            capacity_bytes: capacity,
            is_regular: meta.file_type().is_file(),
            label: Mutex::new(None),
            direct_off_reason,
            unaligned: AtomicU64::new(0),
        })
    }

    fn direct_for(&self, offset: u64, len: usize) -> Option<&File> {
        let aligned = offset % DIRECT_ALIGN as u64 == 0 && len % DIRECT_ALIGN == 0;
        match &self.direct {
            Some(f) if aligned => Some(f),
            Some(_) => {
                self.unaligned.fetch_add(1, Ordering::Relaxed);
                None
            }
            None => None,
        }
    }
}

fn block_device_bytes(f: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = f;
    let end = f.seek(SeekFrom::End(0))?;
    f.seek(SeekFrom::Start(0))?;
    Ok(end)
}

impl Backend for FileBackend {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self.direct_for(offset, buf.len()) {
            Some(f) if is_aligned(buf) => f.read_exact_at(buf, offset),
            Some(f) => with_bounce(buf.len(), |b| {
                f.read_exact_at(b, offset)?;
                buf.copy_from_slice(b);
                Ok(())
            }),
            None => self.buffered.read_exact_at(buf, offset),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.direct_for(offset, buf.len()) {
            Some(f) if is_aligned(buf) => f.write_all_at(buf, offset),
            Some(f) => with_bounce(buf.len(), |b| {
                b.copy_from_slice(buf);
                f.write_all_at(b, offset)
            }),
            None => self.buffered.write_all_at(buf, offset),
        }
    }

    fn flush(&self) -> io::Result<()> {
        self.buffered.sync_data()
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn describe(&self) -> String {
        match &self.direct_off_reason {
            None => format!("file {} (O_DIRECT)", self.path.display()),
            Some(why) => format!("file {} (buffered: {why})", self.path.display()),
        }
    }

    fn unaligned_ios(&self) -> u64 {
        self.unaligned.load(Ordering::Relaxed)
    }

    /// A regular file's xattr (or fingerprint), a block device's
    /// fingerprint (identity.rs).
    fn volume_label(&self) -> io::Result<Option<VolumeLabel>> {
        let mut cached = self.label.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = *cached {
            return Ok(Some(l));
        }
        let l = if self.is_regular {
            crate::identity::file_label(&self.buffered, &self.path.display().to_string())?
        } else {
            crate::identity::block_device_label(
                &self.buffered,
                block_device_bytes(&self.buffered)?,
            )?
        };
        *cached = Some(l);
        Ok(Some(l))
    }

    /// Regular files: punches a hole (the range then reads as zeros).
    /// Block devices: the range is kept (no BLKDISCARD: some devices
    /// return old data after it, which NBD allows, but it is slow on many).
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        if !self.is_regular || len == 0 {
            return Ok(());
        }
        check_range(offset, len as usize, self.capacity_bytes, || {
            self.path.display().to_string()
        })?;
        // SAFETY: fallocate on a descriptor we own; no memory is passed.
        let rc = unsafe {
            libc::fallocate(
                self.buffered.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // A filesystem without hole punching keeps the bytes: allowed.
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                return Ok(());
            }
            return Err(e);
        }
        Ok(())
    }

    /// Holes of a sparse regular file (SEEK_DATA / SEEK_HOLE); a block
    /// device, or a filesystem that cannot tell, is all written.
    fn allocation(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
        use std::os::fd::AsRawFd;
        let end = offset.saturating_add(len).min(self.capacity_bytes);
        if !self.is_regular || offset >= end {
            out.push((len, true));
            return;
        }
        let fd = self.buffered.as_raw_fd();
        let mut at = offset;
        while at < end {
            // SAFETY: lseek on a descriptor we own. Reads and writes use
            // pread/pwrite, so moving the file offset disturbs nothing.
            let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
            if data < 0 {
                let e = io::Error::last_os_error().raw_os_error();
                if e == Some(libc::ENXIO) {
                    out.push((end - at, false)); // no data after `at`
                } else {
                    out.push((end - at, true)); // cannot tell
                }
                break;
            }
            let data = (data as u64).min(end);
            if data > at {
                out.push((data - at, false));
                at = data;
                continue;
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_HOLE) };
            let hole = if hole < 0 {
                end
            } else {
                (hole as u64).min(end)
            };
            out.push((hole.max(at + 1) - at, true));
            at = hole.max(at + 1);
        }
        if end < offset + len {
            out.push((offset + len - end, true));
        }
    }

    fn uring_target(&self, op: Op, offset: u64, len: usize) -> Option<UringTarget> {
        use std::os::fd::AsRawFd;
        // fdatasync on either descriptor syncs the same file.
        let direct = match op {
            Op::Read | Op::Write => self.direct_for(offset, len),
            Op::Flush | Op::Trim => None,
        };
        Some(match direct {
            Some(f) => UringTarget {
                fd: f.as_raw_fd(),
                direct: true,
            },
            None => UringTarget {
                fd: self.buffered.as_raw_fd(),
                direct: false,
            },
        })
    }
}

/// An IO of `len` bytes at `offset` must end within `capacity_bytes` of
/// `what()` ("the memory device"); else an InvalidInput error saying so.
pub(crate) fn check_range(
    offset: u64,
    len: usize,
    capacity_bytes: u64,
    what: impl FnOnce() -> String,
) -> io::Result<()> {
    if offset
        .checked_add(len as u64)
        .is_none_or(|e| e > capacity_bytes)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "[{offset}, +{len}) is beyond the end of {} ({capacity_bytes} bytes)",
                what()
            ),
        ));
    }
    Ok(())
}

const RAM_CHUNK: u64 = 1 << 20;

/// Memory, allocated per 1 MiB chunk on first write.
pub struct RamBackend {
    capacity_bytes: u64,
    chunks: Mutex<HashMap<u64, Box<[u8]>>>,
}

impl RamBackend {
    pub fn new(capacity_bytes: u64) -> RamBackend {
        RamBackend {
            capacity_bytes,
            chunks: Mutex::new(HashMap::new()),
        }
    }

    /// Bytes allocated so far.
    pub fn allocated_bytes(&self) -> u64 {
        self.chunks.lock().expect("not poisoned").len() as u64 * RAM_CHUNK
    }

    fn check(&self, offset: u64, len: usize) -> io::Result<()> {
        check_range(offset, len, self.capacity_bytes, || {
            "the memory device".into()
        })
    }
}

impl Backend for RamBackend {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(offset, buf.len())?;
        let chunks = self.chunks.lock().expect("not poisoned");
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let (c, within) = (at / RAM_CHUNK, (at % RAM_CHUNK) as usize);
            let n = (RAM_CHUNK as usize - within).min(buf.len() - done);
            match chunks.get(&c) {
                Some(chunk) => buf[done..done + n].copy_from_slice(&chunk[within..within + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check(offset, buf.len())?;
        let mut chunks = self.chunks.lock().expect("not poisoned");
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let (c, within) = (at / RAM_CHUNK, (at % RAM_CHUNK) as usize);
            let n = (RAM_CHUNK as usize - within).min(buf.len() - done);
            let chunk = chunks
                .entry(c)
                .or_insert_with(|| vec![0u8; RAM_CHUNK as usize].into_boxed_slice());
            chunk[within..within + n].copy_from_slice(&buf[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn describe(&self) -> String {
        format!("ram ({} bytes)", self.capacity_bytes)
    }

    fn is_memory(&self) -> bool {
        true
    }

    /// Zeros the range; whole chunks are freed.
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check(offset, len as usize)?;
        let mut chunks = self.chunks.lock().expect("not poisoned");
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let (c, within) = (at / RAM_CHUNK, at % RAM_CHUNK);
            let n = (RAM_CHUNK - within).min(end - at);
            if n == RAM_CHUNK {
                chunks.remove(&c);
            } else if let Some(chunk) = chunks.get_mut(&c) {
                chunk[within as usize..(within + n) as usize].fill(0);
            }
            at += n;
        }
        Ok(())
    }

    /// Chunks never written are holes.
    fn allocation(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
        let chunks = self.chunks.lock().expect("not poisoned");
        let end = offset.saturating_add(len);
        let mut at = offset;
        while at < end {
            let c = at / RAM_CHUNK;
            let n = ((c + 1) * RAM_CHUNK).min(end) - at;
            let written = chunks.contains_key(&c);
            match out.last_mut() {
                Some((l, w)) if *w == written && at > offset => *l += n,
                _ => out.push((n, written)),
            }
            at += n;
        }
    }
}

/// A store that fails from a given write on (`fail_after_writes = N`):
/// its first N writes (and trims) land, every later write and trim fails
/// with EIO, and so does every flush once a write has failed; reads keep
/// working — a disk whose writes die, as
/// dm-flakey's `error_writes` or Open CAS's surprise-shutdown test makes
/// one. For testing how a stack survives device errors
/// (docs/crash-consistency.md).
pub struct FailingBackend {
    inner: Box<dyn Backend>,
    writes_left: std::sync::atomic::AtomicU64,
    after: u64,
    /// A write was refused: the store is dead from then on.
    failed: std::sync::atomic::AtomicBool,
}

impl FailingBackend {
    pub fn new(inner: Box<dyn Backend>, fail_after_writes: u64) -> FailingBackend {
        FailingBackend {
            inner,
            writes_left: std::sync::atomic::AtomicU64::new(fail_after_writes),
            after: fail_after_writes,
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Takes one write from the budget, or the error once it is spent.
    fn take_write(&self) -> io::Result<()> {
        use std::sync::atomic::Ordering;
        self.writes_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| {
                self.failed.store(true, Ordering::SeqCst);
                self.error()
            })
    }

    fn error(&self) -> io::Error {
        io::Error::from_raw_os_error(libc::EIO)
    }

    fn dead(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Backend for FailingBackend {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.take_write()?;
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        if self.dead() {
            return Err(self.error());
        }
        self.inner.flush()
    }
    fn capacity_bytes(&self) -> u64 {
        self.inner.capacity_bytes()
    }
    fn describe(&self) -> String {
        format!(
            "{}, failing every write after {}",
            self.inner.describe(),
            self.after
        )
    }
    fn unaligned_ios(&self) -> u64 {
        self.inner.unaligned_ios()
    }
    // No io_uring target: every IO goes through write_at, which counts it.
    fn is_memory(&self) -> bool {
        self.inner.is_memory()
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.take_write()?;
        self.inner.trim(offset, len)
    }
    fn allocation(&self, offset: u64, len: u64, out: &mut Vec<(u64, bool)>) {
        self.inner.allocation(offset, len, out)
    }
    fn counters(&self) -> Vec<(&'static str, f64)> {
        self.inner.counters()
    }
    fn volume_label(&self) -> io::Result<Option<VolumeLabel>> {
        self.inner.volume_label()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_reads_back_what_was_written_across_chunks_and_zeros_elsewhere() {
        let r = RamBackend::new(4 << 20);
        let data: Vec<u8> = (0..3 << 20).map(|i| (i * 7 % 251) as u8).collect();
        r.write_at(&data, (1 << 20) - 100).unwrap();
        let mut back = vec![0u8; data.len()];
        r.read_at(&mut back, (1 << 20) - 100).unwrap();
        assert_eq!(back, data);
        let mut head = vec![1u8; 100];
        r.read_at(&mut head, 0).unwrap();
        assert!(head.iter().all(|&b| b == 0));
        assert_eq!(r.allocated_bytes(), 4 << 20);
        let e = r.write_at(&[0; 10], (4 << 20) - 5).unwrap_err();
        assert!(e.to_string().contains("beyond the end"), "{e}");
    }

    #[test]
    fn file_round_trip_aligned_and_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.img");
        let f = FileBackend::open(&path, Some(1 << 20), true, true).unwrap();
        assert_eq!(f.capacity_bytes(), 1 << 20);
        let data: Vec<u8> = (0..8192).map(|i| (i % 253) as u8).collect();
        f.write_at(&data, 4096).unwrap();
        f.write_at(&data[..512], 512).unwrap(); // not 4 KiB aligned
        let mut back = vec![0u8; 8192];
        f.read_at(&mut back, 4096).unwrap();
        assert_eq!(back, data);
        let mut small = vec![0u8; 512];
        f.read_at(&mut small, 512).unwrap();
        assert_eq!(&small[..], &data[..512]);
        assert!(f.describe().contains("f.img"));
        // Reading past the end is an error, not zeros.
        let mut past = vec![0u8; 4096];
        assert!(f.read_at(&mut past, 1 << 20).is_err());
    }

    #[test]
    fn open_errors_say_what_to_do() {
        use crate::error::BackendError;
        use tierlab_stack::config::ConfigErrorKind;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.img");
        let e = FileBackend::open(&path, None, false, true)
            .err()
            .unwrap()
            .within("devices[0]");
        match &e {
            BackendError::Io {
                key,
                path: p,
                source,
                ..
            } => {
                assert_eq!((key.as_str(), p), ("devices[0]", &path));
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        let e = e.to_string();
        assert!(
            e.contains("missing.img") && e.contains("cannot open"),
            "{e}"
        );
        std::fs::write(&path, b"").unwrap();
        let e = FileBackend::open(&path, None, false, true).err().unwrap();
        assert_eq!(e.key_path(), "capacity_bytes");
        assert!(e.to_string().contains("capacity_bytes"), "{e}");
        // A file smaller than its capacity_bytes: a bad value of that key.
        let e = FileBackend::open(&path, Some(4096), false, true)
            .err()
            .unwrap()
            .within("devices[1]");
        let BackendError::Config(c) = &e else {
            panic!("{e:?}")
        };
        let ConfigErrorKind::Param(p) = c.kind.as_ref() else {
            panic!("{e:?}")
        };
        assert_eq!(
            (p.key(), p.found.as_str()),
            ("devices[1].capacity_bytes".into(), "4096")
        );
        assert!(e.to_string().contains("create = true"), "{e}");
    }
}
