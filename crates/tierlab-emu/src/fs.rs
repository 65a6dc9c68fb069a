//! The FUSE side: a directory holding one regular file of a fixed size,
//! whose reads, writes and fsyncs go through a [`TimedDevice`] and are
//! answered when the model completes them.
//!
//! - The file is opened in FUSE's `direct_io` mode: the kernel page cache
//!   is bypassed, so every read and write a client makes reaches the
//!   model (as on a raw block device). Requests are answered
//!   asynchronously (`FUSE_ASYNC_DIO`, up to `max_background` = 256 in
//!   flight), so the model sees the client's real queue depth: a loop
//!   device with `--direct-io=on` or fio with libaio and `iodepth=32`
//!   keeps 32 IOs in the model.
//! - Data is stored for real in a [`Backend`] (RAM or a file) at arrival;
//!   only the reply waits for the model. Overlapping IOs in flight at the
//!   same time have no defined order, as on a disk.
//! - IOs larger than 1 MiB (`max_write`) are split by the kernel into
//!   1 MiB requests, each one IO for the model.
//! - The size is fixed: writes past the end fail with ENOSPC (the part
//!   before the end is written), truncation to another size with EPERM,
//!   reads past the end return what is before it (EOF). `fsync` goes to
//!   the model as a flush; `close` costs nothing; `fallocate` (discard)
//!   is not supported (EOPNOTSUPP, so a loop device reports no discard
//!   success).

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    SessionACL, TimeOrNow, WriteFlags,
};
use tierlab_core::{Op, ParamError};
use tierlab_real::backend::Backend;

use crate::EmuError;
use crate::timed::DeviceHandle;

const FILE_INO: INodeNo = INodeNo(2);
/// Largest IO the kernel sends in one request.
pub const MAX_IO_BYTES: u32 = 1 << 20;
/// FUSE requests the kernel keeps in flight for async direct IO.
const MAX_BACKGROUND: u16 = 256;
/// Attributes never change, so the kernel may cache them for long.
const TTL: Duration = Duration::from_secs(3600);

/// The filesystem: one file, `name`, of `capacity_bytes`.
pub struct EmulatedFs {
    name: OsString,
    capacity_bytes: u64,
    backend: Arc<dyn Backend>,
    device: DeviceHandle,
    uid: u32,
    gid: u32,
    created: SystemTime,
}

impl EmulatedFs {
    pub fn new(
        name: &str,
        capacity_bytes: u64,
        backend: Arc<dyn Backend>,
        device: DeviceHandle,
    ) -> Result<EmulatedFs, EmuError> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(EmuError::File(ParamError::new(
                "name",
                format!("{name:?}"),
                "one path component (no '/', not '.' or '..')",
            )));
        }
        if capacity_bytes == 0 || capacity_bytes > backend.capacity_bytes() {
            return Err(EmuError::File(ParamError::new(
                "capacity_bytes",
                capacity_bytes,
                format!(
                    "1 ..= {} (the backing store: {})",
                    backend.capacity_bytes(),
                    backend.describe()
                ),
            )));
        }
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(EmulatedFs {
            name: name.into(),
            capacity_bytes,
            backend,
            device,
            uid,
            gid,
            created: SystemTime::now(),
        })
    }

    fn attr(&self, ino: INodeNo) -> FileAttr {
        let (kind, perm, size, nlink) = if ino == FILE_INO {
            (FileType::RegularFile, 0o644, self.capacity_bytes, 1)
        } else {
            (FileType::Directory, 0o755, 0, 2)
        };
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.created,
            mtime: self.created,
            ctime: self.created,
            crtime: self.created,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl fuser::Filesystem for EmulatedFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Async direct IO: the kernel sends a client's concurrent direct
        // IOs as concurrent requests (without it, one at a time per file).
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        let _ = config.set_max_write(MAX_IO_BYTES);
        let _ = config.set_max_background(MAX_BACKGROUND);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == self.name.as_os_str() {
            reply.entry(&TTL, &self.attr(FILE_INO), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT || ino == FILE_INO {
            reply.attr(&TTL, &self.attr(ino));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // The size is the device's; mode, owner and times are not kept.
        if ino == FILE_INO && size.is_some_and(|s| s != self.capacity_bytes) {
            reply.error(Errno::EPERM);
        } else {
            reply.attr(&TTL, &self.attr(ino));
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino != FILE_INO {
            return reply.error(Errno::EISDIR);
        }
        reply.opened(
            FileHandle(0),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES,
        );
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino != FILE_INO {
            return reply.error(Errno::EISDIR);
        }
        if offset >= self.capacity_bytes || size == 0 {
            return reply.data(&[]);
        }
        // The IO arrives now; a backing file's own IO time is not the model's.
        let arrival_ns = self.device.now_ns();
        let n = (size as u64).min(self.capacity_bytes - offset) as usize;
        let mut buf = vec![0u8; n];
        if self.backend.read_at(&mut buf, offset).is_err() {
            return reply.error(Errno::EIO);
        }
        self.device.submit_arrived(
            arrival_ns,
            Op::Read,
            offset,
            n as u32,
            Box::new(move || reply.data(&buf)),
        );
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino != FILE_INO {
            return reply.error(Errno::EISDIR);
        }
        if data.is_empty() {
            return reply.written(0);
        }
        if offset >= self.capacity_bytes {
            return reply.error(Errno::ENOSPC);
        }
        let arrival_ns = self.device.now_ns();
        let n = (data.len() as u64).min(self.capacity_bytes - offset) as usize;
        if self.backend.write_at(&data[..n], offset).is_err() {
            return reply.error(Errno::EIO);
        }
        self.device.submit_arrived(
            arrival_ns,
            Op::Write,
            offset,
            n as u32,
            Box::new(move || reply.written(n as u32)),
        );
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if ino != FILE_INO {
            return reply.ok();
        }
        let arrival_ns = self.device.now_ns();
        if self.backend.flush().is_err() {
            return reply.error(Errno::EIO);
        }
        self.device
            .submit_arrived(arrival_ns, Op::Flush, 0, 0, Box::new(move || reply.ok()));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, OsStr::new(".")),
            (INodeNo::ROOT, FileType::Directory, OsStr::new("..")),
            (FILE_INO, FileType::RegularFile, self.name.as_os_str()),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let blocks = self.capacity_bytes.div_ceil(4096);
        reply.statfs(blocks, 0, 0, 2, 0, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}

/// A mounted [`EmulatedFs`]; unmounts on drop (lazily if busy).
pub struct Mounted {
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
    file: PathBuf,
    cleared_stale: bool,
}

/// Why [`Mounted::unmount`] did not unmount.
#[derive(Debug, PartialEq, Eq)]
pub enum UnmountError {
    /// The file is open or a loop device holds it (EBUSY).
    Busy,
    Other(String),
}

impl Mounted {
    /// Mounts `fs` on the directory `mountpoint`. `allow_other`: users
    /// other than the mounting one may use the file (root mounts allow it).
    pub fn mount(
        fs: EmulatedFs,
        mountpoint: &Path,
        allow_other: bool,
    ) -> Result<Mounted, EmuError> {
        let shown = mountpoint.display();
        let mount_error = |message: String| EmuError::Mount {
            mountpoint: mountpoint.to_path_buf(),
            message,
        };
        let mut cleared_stale = false;
        let meta = match std::fs::metadata(mountpoint) {
            // A FUSE mount whose server died (SIGKILL, a crash): nothing can
            // be served through it any more, so detaching it loses nothing.
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                umount(mountpoint, libc::MNT_DETACH).map_err(|u| {
                    mount_error(format!(
                        "a FUSE mount left by a process that died ({e}); clearing it failed \
                         ({u}): run `fusermount3 -u -z {shown}` (or `umount -l {shown}` as root) \
                         and try again"
                    ))
                })?;
                cleared_stale = true;
                std::fs::metadata(mountpoint).map_err(|e| mount_error(e.to_string()))?
            }
            r => r.map_err(|e| mount_error(e.to_string()))?,
        };
        if !meta.is_dir() {
            return Err(mount_error("not a directory".into()));
        }
        let mountpoint = &mountpoint
            .canonicalize()
            .map_err(|e| mount_error(e.to_string()))?;
        let file = mountpoint.join(&fs.name);
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("tierlab-emulate".into()),
            MountOption::Subtype("tierlab".into()),
            MountOption::NoAtime,
        ];
        config.acl = if allow_other {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        let session = fuser::spawn_mount(fs, mountpoint, &config).map_err(|e| {
            let hint = if e.kind() == io::ErrorKind::NotFound {
                " (no /dev/fuse: load the fuse module, or run where FUSE is available)"
            } else if e.kind() == io::ErrorKind::PermissionDenied {
                " (mounting needs root, or fusermount3 from the fuse3 package)"
            } else {
                ""
            };
            mount_error(format!("cannot mount FUSE: {e}{hint}"))
        })?;
        Ok(Mounted {
            session: Some(session),
            mountpoint: mountpoint.to_path_buf(),
            file,
            cleared_stale,
        })
    }

    /// Whether mounting first cleared a stale mount (one left by a process
    /// that died) from the mount point.
    pub fn cleared_stale_mount(&self) -> bool {
        self.cleared_stale
    }

    /// The served file (`MOUNTPOINT/NAME`).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Unmounts if nothing uses the file, and waits for the session to end.
    pub fn unmount(&mut self) -> Result<(), UnmountError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        match umount(&self.mountpoint, 0) {
            Ok(()) => {
                let _ = session.join();
                Ok(())
            }
            Err(e) => {
                self.session = Some(session);
                if e.raw_os_error() == Some(libc::EBUSY) {
                    Err(UnmountError::Busy)
                } else {
                    Err(UnmountError::Other(format!(
                        "cannot unmount {}: {e}",
                        self.mountpoint.display()
                    )))
                }
            }
        }
    }

    /// Detaches the mount even if busy (later IOs to it fail).
    pub fn detach(&mut self) {
        if let Some(session) = self.session.take() {
            let _ = umount(&self.mountpoint, libc::MNT_DETACH);
            drop(session);
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.unmount().is_err() {
            self.detach();
        }
    }
}

fn umount(path: &Path, flags: libc::c_int) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path has a NUL byte"))?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EPERM) {
        return Err(e);
    }
    // Not root: a mount made through fusermount3 is undone by it too.
    let lazy = flags & libc::MNT_DETACH != 0;
    let out = std::process::Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg(path)
        .output()
        .map_err(|f| io::Error::new(e.kind(), format!("{e}; fusermount3: {f}")))?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if why.contains("busy") {
        Err(io::Error::from_raw_os_error(libc::EBUSY))
    } else {
        Err(io::Error::other(format!("fusermount3 -u: {why}")))
    }
}
