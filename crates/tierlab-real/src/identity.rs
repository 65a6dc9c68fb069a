//! Volume ids of real stores (`tierlab_core::volume`): which file or
//! device a persistent header's state belongs to (docs/crash-consistency.md,
//! "Binding").
//!
//! - **A regular file**: 128 random bits (getrandom) in its extended
//!   attribute `user.tierlab.volume-id`, as 32 hex digits; made on first
//!   use with XATTR_CREATE (a second opener racing us reads ours) and
//!   fsynced before it is reported, so that a header never records an id
//!   a crash can take away. It follows the file through renames and `cp
//!   --preserve=xattr`, and is lost by a plain `cp` (the copy is then a
//!   new volume, and a header made for the original refuses it, saying
//!   how to give the copy its id back).
//! - **A file system without user xattrs** (EOPNOTSUPP: ramfs, some FUSE
//!   and network file systems): a fingerprint of the file — its device and
//!   inode numbers and, where statx reports one, its birth time. Weaker: a
//!   copy is another volume (right), but so is the same file once its
//!   device number changes (a remount of some file systems), and without a
//!   birth time a new file that reuses a deleted file's inode number looks
//!   like the old one.
//! - **A block device**: a fingerprint of its device number and size. A
//!   disk that comes back under another number is another volume; tierlab
//!   writes nothing of its own onto a block device, so there is no better
//!   place for an id.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use tierlab_core::volume::{LabelKind, VOLUME_ID_XATTR, VolumeId, VolumeLabel};

fn xattr_name() -> std::ffi::CString {
    std::ffi::CString::new(VOLUME_ID_XATTR).expect("no NUL in the name")
}

/// EOPNOTSUPP (ENOTSUP is the same number on Linux).
fn not_supported(e: &io::Error) -> bool {
    let n = e.raw_os_error();
    n == Some(libc::EOPNOTSUPP) || n == Some(libc::ENOTSUP)
}

/// The xattr's bytes, None when the file has none.
fn get_xattr(file: &File) -> io::Result<Option<Vec<u8>>> {
    let name = xattr_name();
    let mut buf = [0u8; 128];
    // SAFETY: fgetxattr on a descriptor we own, into a local buffer of the
    // length given.
    let n = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) => Ok(None),
            Some(libc::ERANGE) => Ok(Some(vec![0xff; buf.len() + 1])), // not an id
            _ => Err(e),
        };
    }
    Ok(Some(buf[..n as usize].to_vec()))
}

/// Stores `id` as the xattr unless the file has one already.
fn create_xattr(file: &File, id: VolumeId) -> io::Result<()> {
    let name = xattr_name();
    let text = id.to_string();
    // SAFETY: fsetxattr on a descriptor we own, from a local string of the
    // length given.
    let rc = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            text.as_ptr().cast(),
            text.len(),
            libc::XATTR_CREATE,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// 128 random bits, never zero.
pub fn random_id() -> io::Result<VolumeId> {
    loop {
        let mut b = [0u8; 16];
        let mut got = 0;
        while got < b.len() {
            // SAFETY: getrandom into the rest of a local buffer.
            let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            got += n as usize;
        }
        if let Some(id) = VolumeId::new(u128::from_le_bytes(b)) {
            return Ok(id);
        }
    }
}

/// The fingerprint of a file where no xattr can be kept.
fn file_fingerprint(file: &File) -> io::Result<VolumeId> {
    // SAFETY: statx of our own descriptor (AT_EMPTY_PATH) into a local.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_INO | libc::STATX_BTIME,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let dev = ((stx.stx_dev_major as u64) << 32 | stx.stx_dev_minor as u64).to_le_bytes();
    let ino = stx.stx_ino.to_le_bytes();
    let mut birth = Vec::new();
    if stx.stx_mask & libc::STATX_BTIME != 0 {
        birth.extend(stx.stx_btime.tv_sec.to_le_bytes());
        birth.extend(stx.stx_btime.tv_nsec.to_le_bytes());
    }
    Ok(VolumeId::derive("file-fingerprint", &[&dev, &ino, &birth]))
}

/// The label of a block device: its device number and size.
pub fn block_device_label(file: &File, size_bytes: u64) -> io::Result<VolumeLabel> {
    use std::os::unix::fs::MetadataExt;
    let rdev = file.metadata()?.rdev();
    Ok(VolumeLabel {
        id: VolumeId::derive(
            "block-device",
            &[&rdev.to_le_bytes(), &size_bytes.to_le_bytes()],
        ),
        kind: LabelKind::BlockDevice,
        created_now: false,
    })
}

/// The label of a regular file: its xattr, made now if it has none, or a
/// fingerprint where the file system keeps no user xattrs. `shown` names
/// the file in errors.
pub fn file_label(file: &File, shown: &str) -> io::Result<VolumeLabel> {
    let context = |what: &str, e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("{what} {VOLUME_ID_XATTR} of {shown}: {e}"),
        )
    };
    let fingerprint = || -> io::Result<VolumeLabel> {
        Ok(VolumeLabel {
            id: file_fingerprint(file).map_err(|e| context("statx (fingerprint for)", e))?,
            kind: LabelKind::FileFingerprint,
            created_now: false,
        })
    };
    let stored = |bytes: Vec<u8>| -> io::Result<VolumeLabel> {
        let id = VolumeId::parse(&bytes).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{shown}: its {VOLUME_ID_XATTR} xattr holds {:?}, not a tierlab volume id \
                     (32 hex digits); fix it with setfattr, or remove it (setfattr -x \
                     {VOLUME_ID_XATTR}) to let tierlab make a new one — metadata made for the \
                     file then refuses it",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(64)])
                ),
            )
        })?;
        Ok(VolumeLabel {
            id,
            kind: LabelKind::Xattr,
            created_now: false,
        })
    };
    match get_xattr(file) {
        Ok(Some(bytes)) => return stored(bytes),
        Ok(None) => {}
        Err(e) if not_supported(&e) => return fingerprint(),
        Err(e) => return Err(context("reading", e)),
    }
    let id = random_id()?;
    match create_xattr(file, id) {
        Ok(()) => {
            // Durable before any header records it.
            file.sync_all().map_err(|e| context("syncing", e))?;
            Ok(VolumeLabel {
                id,
                kind: LabelKind::Xattr,
                created_now: true,
            })
        }
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => match get_xattr(file) {
            Ok(Some(bytes)) => stored(bytes),
            Ok(None) => Err(context("reading", e)),
            Err(e) => Err(context("reading", e)),
        },
        Err(e) if not_supported(&e) => fingerprint(),
        Err(e) => Err(context("storing", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xattr_text(path: &std::path::Path) -> Option<String> {
        let f = File::open(path).unwrap();
        get_xattr(&f)
            .unwrap()
            .map(|b| String::from_utf8(b).unwrap())
    }

    /// Made once, stable across reopens, kept by `cp --preserve=xattr`,
    /// dropped by a plain `cp` (the copy is a new volume), and readable by
    /// getfattr's and setfattr's text form.
    #[test]
    fn a_file_id_is_made_once_and_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.img");
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        let open = |p: &std::path::Path| {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .unwrap();
            file_label(&f, &p.display().to_string()).unwrap()
        };
        let first = open(&path);
        if first.kind == LabelKind::FileFingerprint {
            eprintln!("skipped: the temp dir's file system keeps no user xattrs");
            return;
        }
        assert!(first.created_now);
        assert_eq!(xattr_text(&path), Some(first.id.to_string()));
        let again = open(&path);
        assert_eq!((again.id, again.created_now), (first.id, false));
        // Renamed: the same volume.
        let moved = dir.path().join("moved.img");
        std::fs::rename(&path, &moved).unwrap();
        assert_eq!(open(&moved).id, first.id);
        let cp = |args: &[&str], to: &str| -> Option<std::path::PathBuf> {
            let to = dir.path().join(to);
            let ok = std::process::Command::new("cp")
                .args(args)
                .arg(&moved)
                .arg(&to)
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(to)
        };
        if let Some(kept) = cp(&["--preserve=xattr"], "kept.img") {
            let l = open(&kept);
            assert_eq!(
                (l.id, l.created_now),
                (first.id, false),
                "cp --preserve=xattr"
            );
        }
        if let Some(plain) = cp(&[], "plain.img") {
            let l = open(&plain);
            assert!(l.created_now, "a plain cp drops the xattr");
            assert_ne!(l.id, first.id);
        }
        // Given back by hand (what a refusal tells a user to do).
        let fixed = dir.path().join("fixed.img");
        std::fs::write(&fixed, b"").unwrap();
        let f = File::open(&fixed).unwrap();
        let name = xattr_name();
        let text = format!("{}\n", first.id);
        // SAFETY: fsetxattr on our descriptor from a local string.
        let rc = unsafe {
            libc::fsetxattr(
                f.as_raw_fd(),
                name.as_ptr(),
                text.as_ptr().cast(),
                text.len(),
                0,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        assert_eq!(open(&fixed).id, first.id);
    }

    #[test]
    fn a_damaged_xattr_is_an_error_that_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.img");
        std::fs::write(&path, b"x").unwrap();
        let f = File::open(&path).unwrap();
        let name = xattr_name();
        // SAFETY: as above.
        let rc = unsafe {
            libc::fsetxattr(f.as_raw_fd(), name.as_ptr(), c"hello".as_ptr().cast(), 5, 0)
        };
        if rc != 0 {
            eprintln!("skipped: no user xattrs here");
            return;
        }
        let e = file_label(&f, "a.img").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let e = e.to_string();
        assert!(
            e.contains("\"hello\", not a tierlab volume id") && e.contains("setfattr -x"),
            "{e}"
        );
    }

    /// Where user xattrs are refused (ramfs: mounted here only when the
    /// tests run as root), the id is a fingerprint: stable while the file
    /// lives, another for another file.
    #[test]
    fn without_user_xattrs_the_id_is_a_fingerprint_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("ramfs");
        std::fs::create_dir(&mnt).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "ramfs", "none"])
            .arg(&mnt)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a ramfs here (not root?)");
            return;
        }
        struct Unmount(std::path::PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
        let _guard = Unmount(mnt.clone());
        let label = |p: &std::path::Path| {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
                .unwrap();
            file_label(&f, "f").unwrap()
        };
        let a = label(&mnt.join("a"));
        assert_eq!((a.kind, a.created_now), (LabelKind::FileFingerprint, false));
        assert_eq!(label(&mnt.join("a")).id, a.id, "stable");
        assert_ne!(label(&mnt.join("b")).id, a.id, "another file");
    }
}
