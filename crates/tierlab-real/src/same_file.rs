//! Two devices of a stack must not be one file: refused before anything
//! is opened (docs/real.md, "One file, one device").
//!
//! `path = "c.img"` for the cache and the backing device — or `./c.img`,
//! an absolute path, a symlink, a hard link, two nodes of one block device
//! — would put the cache's slots and the backing device's pages in the
//! same bytes, each overwriting the other. Every file a stack opens is
//! resolved: an existing one to its device and inode numbers (a block or
//! character device to its device number, st_rdev), a missing one (to be
//! made by `create = true`) to its canonical directory and name, following
//! a dangling symlink. RAID members (but not failed ones: they are never
//! opened) and write-intent bitmaps count, at any depth.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use tierlab_trace::error::join_key;

use crate::error::BackendError;

/// One file a stack opens: where the config names it, and how.
#[derive(Clone, Debug)]
struct FileUse {
    /// The key of its path (`devices[1].path`, `devices[0].members[2].path`,
    /// `devices[0].bitmap`).
    key: String,
    /// The entry in words: "devices[1] (backing)".
    entry: String,
    /// The path as the config gives it.
    given: String,
    /// Resolved against the config's directory.
    path: PathBuf,
}

/// What makes two uses the same file.
#[derive(Clone, Debug, PartialEq, Eq)]
enum FileKey {
    /// An existing file: device and inode numbers.
    Inode { dev: u64, ino: u64 },
    /// A block or character device: its device number.
    Device { rdev: u64 },
    /// Not there yet (`create = true`): the canonical directory and name.
    Missing(PathBuf),
}

fn major_minor(dev: u64) -> String {
    format!("{}:{}", libc::major(dev), libc::minor(dev))
}

/// A path that does not exist: its dangling symlinks followed, its
/// directory canonical.
fn resolve_missing(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&p) {
                Ok(target) if target.is_absolute() => p = target,
                Ok(target) => p = p.parent().unwrap_or(Path::new("/")).join(target),
                Err(_) => break,
            },
            _ => break,
        }
    }
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            match std::fs::canonicalize(dir) {
                Ok(d) => d.join(name),
                Err(_) => p,
            }
        }
        _ => p,
    }
}

/// None: the path cannot be looked at (the open reports why).
fn key_of(path: &Path) -> Option<FileKey> {
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_block_device() || m.file_type().is_char_device() => {
            Some(FileKey::Device { rdev: m.rdev() })
        }
        Ok(m) => Some(FileKey::Inode {
            dev: m.dev(),
            ino: m.ino(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some(FileKey::Missing(resolve_missing(path)))
        }
        Err(_) => None,
    }
}

fn resolve(base_dir: &Path, given: &str) -> PathBuf {
    let p = Path::new(given);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

/// The files of one device table (`at` names it, `entry` in words),
/// members and bitmaps included.
fn uses_of(t: &toml::Table, at: &str, entry: &str, base_dir: &Path, out: &mut Vec<FileUse>) {
    if t.get("model").and_then(|m| m.as_str()) == Some("raid") {
        let failed: Vec<i64> = match t.get("failed_members") {
            Some(toml::Value::Array(a)) => a.iter().filter_map(|v| v.as_integer()).collect(),
            _ => Vec::new(),
        };
        if let Some(toml::Value::Array(members)) = t.get("members") {
            for (k, m) in members.iter().enumerate() {
                if let toml::Value::Table(mt) = m
                    && !failed.contains(&(k as i64))
                {
                    let mat = format!("{at}.members[{k}]");
                    uses_of(
                        mt,
                        &mat,
                        &format!("{mat} (a member of {entry})"),
                        base_dir,
                        out,
                    );
                }
            }
        }
        let bitmap = match t.get("bitmap") {
            Some(toml::Value::String(p)) => Some((p.clone(), join_key(at, "bitmap"))),
            Some(toml::Value::Table(b)) => b
                .get("path")
                .and_then(|p| p.as_str())
                .map(|p| (p.to_string(), join_key(at, "bitmap.path"))),
            _ => None,
        };
        if let Some((given, key)) = bitmap
            && given != "ram"
        {
            out.push(FileUse {
                key,
                entry: format!("{at}.bitmap (the write-intent bitmap of {entry})"),
                path: resolve(base_dir, &given),
                given,
            });
        }
        return;
    }
    if let Some(given) = t.get("path").and_then(|p| p.as_str())
        && given != "ram"
    {
        out.push(FileUse {
            key: join_key(at, "path"),
            entry: entry.to_string(),
            path: resolve(base_dir, given),
            given: given.to_string(),
        });
    }
}

/// Refuses a stack two of whose devices (members, bitmaps) are one file:
/// the error names both config entries, the file, and how they meet.
pub fn refuse_shared_files(devices: &[toml::Table], base_dir: &Path) -> Result<(), BackendError> {
    let names = tierlab_stack::device_names(devices);
    let mut uses = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        let at = format!("devices[{i}]");
        uses_of(d, &at, &format!("{at} ({})", names[i]), base_dir, &mut uses);
    }
    let keys: Vec<Option<FileKey>> = uses.iter().map(|u| key_of(&u.path)).collect();
    for j in 0..uses.len() {
        for i in 0..j {
            let (Some(a), Some(b)) = (&keys[i], &keys[j]) else {
                continue;
            };
            if a == b {
                return Err(shared(&uses[i], &uses[j], a));
            }
        }
    }
    Ok(())
}

fn shared(first: &FileUse, second: &FileUse, key: &FileKey) -> BackendError {
    let shown = |u: &FileUse| {
        std::fs::canonicalize(&u.path)
            .unwrap_or_else(|_| resolve_missing(&u.path))
            .display()
            .to_string()
    };
    let (a, b) = (shown(first), shown(second));
    let what = match key {
        FileKey::Device { rdev } => format!("the same device {}", major_minor(*rdev)),
        FileKey::Inode { dev, ino } if a != b => format!(
            "the same file: {a} and {b} are hard links to inode {ino} on device {}",
            major_minor(*dev)
        ),
        FileKey::Inode { .. } | FileKey::Missing(_) => format!("the same file {a}"),
    };
    let given = if first.given == second.given {
        format!("both given as {:?}", first.given)
    } else {
        format!("given as {:?} and {:?}", first.given, second.given)
    };
    BackendError::key(
        second.key.clone(),
        format!(
            "{} and {} are {what} ({given}). Two devices on one file share its bytes: what one \
             writes (a cache's slots, a RAID member's stripes, a bitmap's pages) overwrites the \
             other's data. Give each device its own file",
            second.entry, first.entry
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices(text: &str) -> Vec<toml::Table> {
        let doc: toml::Table = toml::from_str(text).unwrap();
        match doc.get("devices") {
            Some(toml::Value::Array(a)) => {
                a.iter().map(|v| v.as_table().unwrap().clone()).collect()
            }
            _ => panic!("no devices"),
        }
    }

    fn two(a: &str, b: &str) -> Vec<toml::Table> {
        devices(&format!(
            "[[devices]]\nname = \"cache\"\npath = {a:?}\ncapacity_bytes = 4096\ncreate = true\n\
             [[devices]]\nname = \"backing\"\npath = {b:?}\ncapacity_bytes = 8192\ncreate = true\n"
        ))
    }

    #[test]
    fn one_file_under_two_names_is_refused_naming_both_entries() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let abs = d.join("c.img").display().to_string();
        // Missing (create = true) and existing alike.
        for exists in [false, true] {
            if exists {
                std::fs::write(d.join("c.img"), b"").unwrap();
            }
            for (a, b) in [
                ("c.img", "c.img"),
                ("c.img", "./c.img"),
                ("c.img", abs.as_str()),
            ] {
                let e = refuse_shared_files(&two(a, b), d).unwrap_err();
                assert_eq!(e.key_path(), "devices[1].path");
                let e = e.to_string();
                assert!(
                    e.contains("devices[1] (backing) and devices[0] (cache) are the same file")
                        && e.contains(
                            &std::fs::canonicalize(d)
                                .unwrap()
                                .join("c.img")
                                .display()
                                .to_string()
                        )
                        && e.contains("Give each device its own file"),
                    "{e}"
                );
            }
        }
        // A symlink, also a dangling one to a file not made yet.
        std::os::unix::fs::symlink("c.img", d.join("link.img")).unwrap();
        std::os::unix::fs::symlink("new.img", d.join("dangling.img")).unwrap();
        let e = refuse_shared_files(&two("c.img", "link.img"), d)
            .unwrap_err()
            .to_string();
        assert!(e.contains("given as \"c.img\" and \"link.img\""), "{e}");
        assert!(refuse_shared_files(&two("new.img", "dangling.img"), d).is_err());
        // A hard link: two names, one inode.
        std::fs::hard_link(d.join("c.img"), d.join("hard.img")).unwrap();
        let e = refuse_shared_files(&two("hard.img", "c.img"), d)
            .unwrap_err()
            .to_string();
        assert!(e.contains("are hard links to inode"), "{e}");
        // Two files, or RAM twice: fine.
        refuse_shared_files(&two("c.img", "other.img"), d).unwrap();
        refuse_shared_files(&two("ram", "ram"), d).unwrap();
    }

    #[test]
    fn raid_members_and_bitmaps_count_but_failed_members_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let raid = |members: &str, failed: &str, bitmap: &str, other: &str| {
            devices(&format!(
                "[[devices]]\nname = \"array\"\nmodel = \"raid\"\nlevel = \"raid1\"\n\
                 stripe_unit_bytes = 4096\nfailed_members = {failed}\nmembers = [{members}]\n\
                 {bitmap}\n[[devices]]\nname = \"disk\"\npath = {other:?}\n"
            ))
        };
        let m = "{ path = \"m0.img\" }, { path = \"m1.img\" }";
        let e = refuse_shared_files(
            &raid(
                "{ path = \"m0.img\" }, { path = \"./m0.img\" }",
                "[]",
                "",
                "d.img",
            ),
            dir.path(),
        )
        .unwrap_err();
        assert_eq!(e.key_path(), "devices[0].members[1].path");
        assert!(
            e.to_string().contains(
                "devices[0].members[1] (a member of devices[0] (array)) and devices[0].members[0] \
                 (a member of devices[0] (array)) are the same file"
            ),
            "{e}"
        );
        let e = refuse_shared_files(&raid(m, "[]", "", "m1.img"), dir.path()).unwrap_err();
        assert_eq!(e.key_path(), "devices[1].path");
        let e = refuse_shared_files(&raid(m, "[]", "bitmap = \"m0.img\"", "d.img"), dir.path())
            .unwrap_err();
        assert_eq!(e.key_path(), "devices[0].bitmap");
        assert!(
            e.to_string()
                .contains("write-intent bitmap of devices[0] (array)"),
            "{e}"
        );
        // A failed member is never opened: its path may be anything.
        refuse_shared_files(&raid(m, "[1]", "", "m1.img"), dir.path()).unwrap();
    }
}
