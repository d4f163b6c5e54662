//! Directories the root-side node programs write in, reached without following a symlink,
//! and the files made, replaced and probed through their handles.
//!
//! [`open`] walks a path from `/` one component at a time with openat(O_NOFOLLOW |
//! O_DIRECTORY), as the plugin walks its run_dir: every directory on the way must be
//! root's (or `owner`'s) and one nobody else can rename entries in (not writable by group
//! or others, unless sticky like /tmp, where only an entry's owner may). Once the handle
//! is open, the path no longer matters: files are opened, replaced ([`SafeDir::replace`]),
//! removed and probed ([`SafeDir::probe_file`]) with `*at` calls on it, O_NOFOLLOW and
//! O_NONBLOCK, so a symlink or FIFO planted in a directory a job user can write never
//! redirects or hangs root's I/O.
//!
//! [`Rule::Trusted`] is for root's own output and state (the state dir, the textfile dir,
//! the dcgm mapping dir): the directory itself must pass `trust::check_trusted`, as the
//! config does. [`Rule::Probed`] is for a directory the health program measures
//! (checkpoint_dir, a mount): users write there, so the directory itself may be anyone's;
//! only the way to it is checked.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::trust::{ROOT, check_trusted};

/// What the directory at the end of the walk must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Root's own output or state: owned by root (`owner`), not group/other-writable.
    Trusted,
    /// A directory the suite probes: anyone's; only the way to it is checked.
    Probed,
}

/// Why a directory was refused or could not be opened: one line naming it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DirError {
    #[error("{what} {path} must be an absolute path without '..'")]
    NotAbsolute { what: String, path: String },
    #[error("{what} {path} is a symlink or not a directory; refusing it")]
    NotADirectory { what: String, path: String },
    #[error("{what} {path} is owned by uid {uid}, not root; refusing it")]
    Owner {
        what: String,
        path: String,
        uid: u32,
    },
    #[error("{what} {path} is writable by group or others (mode {mode:04o}); refusing it")]
    Writable {
        what: String,
        path: String,
        mode: u32,
    },
    #[error("{what} {path}: {message}")]
    Io {
        what: String,
        path: String,
        message: String,
    },
}

impl DirError {
    /// A refusal a job user can cause (a symlink or a directory of their own on the way),
    /// rather than a missing directory or an I/O error.
    pub fn user_causable(&self) -> bool {
        !matches!(self, DirError::Io { .. } | DirError::NotAbsolute { .. })
    }
}

/// A directory held open after a checked walk.
#[derive(Debug)]
pub struct SafeDir {
    dir: File,
    path: PathBuf,
}

fn at_flags_dir() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Walk `path` from `/` (see the module doc). With `create`, missing directories are made
/// on the way (the last with mode `create`, the others 0755) and then checked like any.
pub fn open(
    path: &Path,
    what: &str,
    rule: Rule,
    owner: u32,
    create: Option<u32>,
) -> Result<SafeDir, DirError> {
    let shown = || path.display().to_string();
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(DirError::NotAbsolute {
            what: what.into(),
            path: shown(),
        });
    }
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let io_err = |at: &Path, e: Errno| DirError::Io {
        what: what.into(),
        path: at.display().to_string(),
        message: io::Error::from(e).to_string(),
    };
    let mut at = PathBuf::from("/");
    let mut dir = File::from(
        rustix::fs::open("/", at_flags_dir(), Mode::empty()).map_err(|e| io_err(&at, e))?,
    );
    for (i, name) in names.iter().enumerate() {
        check_parent(&dir, &at, what, owner)?;
        at.push(name);
        let last = i + 1 == names.len();
        dir = match open_dir_at(&dir, name) {
            Err(Errno::NOENT) if create.is_some() => {
                let mode = if last { create.unwrap_or(0o700) } else { 0o755 };
                match rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(mode)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(io_err(&at, e)),
                }
                open_dir_at(&dir, name)
            }
            other => other,
        }
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => DirError::NotADirectory {
                what: what.into(),
                path: at.display().to_string(),
            },
            e => io_err(&at, e),
        })?;
    }
    if rule == Rule::Trusted {
        let meta = dir.metadata().map_err(|e| DirError::Io {
            what: what.into(),
            path: shown(),
            message: e.to_string(),
        })?;
        check_trusted(&meta, what, path, owner).map_err(|e| match e {
            crate::trust::TrustError::Owner { uid, .. } => DirError::Owner {
                what: what.into(),
                path: shown(),
                uid,
            },
            crate::trust::TrustError::Writable { mode, .. } => DirError::Writable {
                what: what.into(),
                path: shown(),
                mode,
            },
            crate::trust::TrustError::Io { message, .. } => DirError::Io {
                what: what.into(),
                path: shown(),
                message,
            },
        })?;
    }
    // Rule::Probed: the directory itself may be anyone's (users write there).
    Ok(SafeDir {
        dir,
        path: path.to_path_buf(),
    })
}

fn open_dir_at(parent: &File, name: &OsStr) -> Result<File, Errno> {
    rustix::fs::openat(parent, name, at_flags_dir(), Mode::empty()).map(File::from)
}

/// A directory on the way: root's (or `owner`'s), and nobody else may rename entries in
/// it (not group/other-writable, or sticky).
fn check_parent(dir: &File, path: &Path, what: &str, owner: u32) -> Result<(), DirError> {
    let meta = dir.metadata().map_err(|e| DirError::Io {
        what: what.into(),
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let shown = format!("(on the way to it) {}", path.display());
    if meta.uid() != ROOT && meta.uid() != owner {
        return Err(DirError::Owner {
            what: what.into(),
            path: shown,
            uid: meta.uid(),
        });
    }
    if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
        return Err(DirError::Writable {
            what: what.into(),
            path: shown,
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Why a probe file could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProbeError {
    /// Something a job user can do: names taken, the file renamed or linked away.
    #[error("{0}")]
    Interfered(String),
    #[error("{0}")]
    Io(String),
}

/// How many unpredictable names a probe tries before it gives up (each already taken).
const PROBE_TRIES: usize = 16;

/// 64 random bits from the kernel, as hex.
fn random_hex() -> io::Result<String> {
    let mut bytes = [0u8; 8];
    rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl SafeDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn shown(&self, name: &str) -> String {
        self.path.join(name).display().to_string()
    }

    /// A regular file's bytes (non-blocking, no symlink), at most `limit`; `None` when absent.
    pub fn read(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, String> {
        self.read_checked(name, limit, None)
    }

    /// [`SafeDir::read`] of a file only `owner` may read or write (mode 0600 or less):
    /// root's own copy of something, which nobody else may have planted or seen.
    pub fn read_private(
        &self,
        name: &str,
        limit: u64,
        owner: u32,
    ) -> Result<Option<Vec<u8>>, String> {
        self.read_checked(name, limit, Some(owner))
    }

    fn read_checked(
        &self,
        name: &str,
        limit: u64,
        private_to: Option<u32>,
    ) -> Result<Option<Vec<u8>>, String> {
        let file = match open_at(&self.dir, name, OFlags::RDONLY, 0) {
            Ok(f) => f,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(format!("{}: {}", self.shown(name), io::Error::from(e))),
        };
        let err = |e: io::Error| format!("{}: {e}", self.shown(name));
        let meta = file.metadata().map_err(err)?;
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", self.shown(name)));
        }
        if let Some(owner) = private_to
            && (meta.uid() != owner || meta.mode() & 0o077 != 0)
        {
            return Err(format!(
                "{} is not uid {owner}'s alone (uid {}, mode {:04o}); not using it",
                self.shown(name),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
        let mut bytes = Vec::new();
        file.take(limit + 1).read_to_end(&mut bytes).map_err(err)?;
        if bytes.len() as u64 > limit {
            return Err(format!("{} is larger than {limit} bytes", self.shown(name)));
        }
        Ok(Some(bytes))
    }

    /// Replace `name` atomically: a new file with an unpredictable dot name, written,
    /// given `mode`, synced, renamed over `name`; the directory synced.
    pub fn replace(&self, name: &str, bytes: &[u8], mode: u32) -> Result<(), String> {
        let (tmp, mut file) = self.create_unique(&format!(".{name}"))?;
        let done = (|| -> io::Result<()> {
            file.write_all(bytes)?;
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
            file.sync_all()?;
            rustix::fs::renameat(&self.dir, tmp.as_str(), &self.dir, name)?;
            Ok(())
        })();
        if let Err(e) = done {
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_str(), AtFlags::empty());
            return Err(format!("{}: {e}", self.shown(name)));
        }
        let _ = rustix::fs::fsync(&self.dir);
        Ok(())
    }

    /// Remove `name` (never a directory); absent is fine.
    pub fn remove(&self, name: &str) -> Result<(), String> {
        match rustix::fs::unlinkat(&self.dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(format!("{}: {}", self.shown(name), io::Error::from(e))),
        }
    }

    /// The run lock's file: made 0600 when absent, opened read-write, non-blocking, without
    /// following a symlink; refused unless it is a regular file `owner` owns, and made
    /// 0600 again so nobody else can open it to hold the lock.
    pub fn lock_file(&self, name: &str, owner: u32) -> Result<File, String> {
        let file = open_at(&self.dir, name, OFlags::RDWR | OFlags::CREATE, 0o600)
            .map_err(|e| format!("{}: {}", self.shown(name), io::Error::from(e)))?;
        let meta = file
            .metadata()
            .map_err(|e| format!("{}: {e}", self.shown(name)))?;
        if !meta.is_file() || meta.uid() != owner {
            return Err(format!(
                "{} is not a regular file owned by uid {owner}; refusing it",
                self.shown(name)
            ));
        }
        if meta.mode() & 0o077 != 0 {
            rustix::fs::fchmod(&file, Mode::from_raw_mode(0o600))
                .map_err(|e| format!("{}: {}", self.shown(name), io::Error::from(e)))?;
        }
        Ok(file)
    }

    /// A new, nameless file in the directory for a write probe: O_TMPFILE where the
    /// filesystem has it (no name ever exists), else a file with an unpredictable name
    /// (`PREFIX.<64 random bits>`, tried again on EEXIST) unlinked at once. The named
    /// file is made only in a directory nobody else may rename in (ours, and not
    /// group/other-writable unless sticky); elsewhere the probe is
    /// [`ProbeError::Interfered`] before any name exists. If the name was renamed or linked
    /// anyway before the unlink, the file is emptied, removed under any name it has in
    /// the directory, and the probe is [`ProbeError::Interfered`].
    pub fn probe_file(&self, prefix: &str) -> Result<File, ProbeError> {
        self.probe_file_with(prefix, true)
    }

    /// [`SafeDir::probe_file`], with `tmpfile = false` taking the named path even where
    /// O_TMPFILE works (tests of the fallback).
    #[doc(hidden)]
    pub fn probe_file_with(&self, prefix: &str, tmpfile: bool) -> Result<File, ProbeError> {
        let anonymous = match tmpfile {
            true => rustix::fs::openat(
                &self.dir,
                ".",
                OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ),
            false => Err(Errno::OPNOTSUPP),
        };
        match anonymous {
            Ok(fd) => return Ok(File::from(fd)),
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL | Errno::NOENT) => {}
            Err(e) => {
                return Err(ProbeError::Io(format!(
                    "{}: {}",
                    self.path.display(),
                    io::Error::from(e)
                )));
            }
        }
        // A named file in a directory where someone else may rename it (writable by
        // group or others without the sticky bit, or another user's) could be moved
        // out of reach before the unlink and left behind as root's: not made at all.
        let io_dir = |e: io::Error| ProbeError::Io(format!("{}: {e}", self.path.display()));
        let meta = self.dir.metadata().map_err(io_dir)?;
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me || (meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0) {
            return Err(ProbeError::Interfered(format!(
                "{} lets others rename entries (owner uid {}, mode {:04o}) and its filesystem has no O_TMPFILE; not probed (make it sticky, chmod +t, or root's)",
                self.path.display(),
                meta.uid(),
                meta.mode() & 0o7777
            )));
        }
        let (name, file) = self.create_unique(prefix).map_err(|e| {
            if e.contains("were all taken") {
                ProbeError::Interfered(e)
            } else {
                ProbeError::Io(e)
            }
        })?;
        let io = |e: io::Error| ProbeError::Io(format!("{}: {e}", self.shown(&name)));
        #[cfg(test)]
        tests::BEFORE_UNLINK.with(|h| {
            if let Some(h) = &*h.borrow() {
                h(&self.path, &name);
            }
        });
        let ours = file.metadata().map_err(io)?;
        let there = rustix::fs::statat(&self.dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW);
        if there.is_ok_and(|s| s.st_ino == ours.ino() && s.st_dev == ours.dev()) {
            let _ = rustix::fs::unlinkat(&self.dir, name.as_str(), AtFlags::empty());
        }
        if file.metadata().map_err(io)?.nlink() != 0 {
            let _ = rustix::fs::ftruncate(&file, 0);
            self.unlink_inode(ours.dev(), ours.ino());
            return Err(ProbeError::Interfered(format!(
                "the probe file {} was renamed or linked by someone else before it was removed ({} lets others rename entries); not probed",
                self.shown(&name),
                self.path.display()
            )));
        }
        Ok(file)
    }

    /// Remove every entry of this directory that is the file `(dev, ino)` (a probe file
    /// renamed within it); best effort.
    fn unlink_inode(&self, dev: u64, ino: u64) {
        let Ok(listing) = rustix::fs::openat(&self.dir, ".", at_flags_dir(), Mode::empty())
            .map_err(io::Error::from)
            .and_then(|fd| rustix::fs::Dir::read_from(fd).map_err(io::Error::from))
        else {
            return;
        };
        for entry in listing.flatten() {
            let name = entry.file_name();
            if entry.ino() != ino || name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let same = rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|s| s.st_ino == ino && s.st_dev == dev);
            if same {
                let _ = rustix::fs::unlinkat(&self.dir, name, AtFlags::empty());
            }
        }
    }

    /// A new file `PREFIX.<random>` (O_EXCL | O_NOFOLLOW, mode 0600), retried on EEXIST.
    fn create_unique(&self, prefix: &str) -> Result<(String, File), String> {
        for _ in 0..PROBE_TRIES {
            let name = format!(
                "{prefix}.{}",
                random_hex().map_err(|e| format!("getrandom: {e}"))?
            );
            match open_at(
                &self.dir,
                &name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
                0o600,
            ) {
                Ok(f) => return Ok((name, f)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(format!("{}: {}", self.shown(&name), io::Error::from(e))),
            }
        }
        Err(format!(
            "{PROBE_TRIES} unpredictable names {}.* under {} were all taken (names planted there)",
            prefix,
            self.path.display()
        ))
    }
}

/// openat with O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC added: no symlink followed, no FIFO
/// waited on.
fn open_at(dir: &impl AsFd, name: &str, flags: OFlags, mode: u32) -> Result<File, Errno> {
    rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map(File::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn me() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    #[test]
    fn symlinks_and_writable_dirs_on_the_way_are_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        symlink(&real, tmp.path().join("link")).expect("symlink");
        let e = open(
            &tmp.path().join("link"),
            "state dir",
            Rule::Trusted,
            me(),
            None,
        )
        .expect_err("a symlink");
        assert!(matches!(e, DirError::NotADirectory { .. }), "{e}");
        assert!(
            e.to_string()
                .ends_with("link is a symlink or not a directory; refusing it")
        );
        let e = open(
            &tmp.path().join("link/sub"),
            "state dir",
            Rule::Trusted,
            me(),
            Some(0o700),
        )
        .expect_err("a symlink on the way");
        assert!(e.user_causable(), "{e}");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = open(&real, "mapping dir", Rule::Trusted, me(), None).expect_err("0777");
        assert!(e.to_string().contains("mode 0777"), "{e}");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        let e = open(&real, "mapping dir", Rule::Trusted, me(), None).expect_err("1777");
        assert!(e.to_string().contains("mode 1777"), "{e}");
        // Probed: the directory may be writable by all; a non-sticky one on the way not.
        assert!(open(&real, "checkpoint_dir", Rule::Probed, me(), None).is_ok());
        std::fs::create_dir(real.join("in")).expect("mkdir");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = open(&real.join("in"), "checkpoint_dir", Rule::Probed, me(), None)
            .expect_err("0777 on the way");
        assert!(e.to_string().contains("on the way to it"), "{e}");
        let e = open(Path::new("rel"), "state dir", Rule::Trusted, me(), None).expect_err("rel");
        assert!(!e.user_causable());
    }

    #[test]
    fn files_are_replaced_read_and_probed_through_the_handle() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = open(
            &tmp.path().join("a/b"),
            "state dir",
            Rule::Trusted,
            me(),
            Some(0o700),
        )
        .expect("made");
        d.replace("x", b"one", 0o644).expect("write");
        d.replace("x", b"two", 0o600).expect("rewrite");
        assert_eq!(d.read("x", 10).expect("read"), Some(b"two".to_vec()));
        assert_eq!(d.read("absent", 10).expect("read"), None);
        symlink("/etc/hostname", tmp.path().join("a/b/l")).expect("symlink");
        assert!(d.read("l", 100).is_err(), "a symlink is not followed");
        crate::trust::fifo::make(&tmp.path().join("a/b/p"));
        let e = d.lock_file("p", me()).expect_err("a FIFO");
        assert!(e.contains("not a regular file"), "{e}");
        d.lock_file("lock", me()).expect("lock");
        let mut f = d.probe_file(".probe").expect("probe");
        f.write_all(b"data").expect("write");
        d.remove("x").expect("remove");
        d.remove("x").expect("absent is fine");
        assert_eq!(names_in(&tmp.path().join("a/b")), ["l", "lock", "p"]);
    }

    type Hook = Box<dyn Fn(&Path, &str)>;

    thread_local! {
        /// Called by the named probe between its create and its unlink: the race window.
        pub(super) static BEFORE_UNLINK: std::cell::RefCell<Option<Hook>> =
            const { std::cell::RefCell::new(None) };
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The named fallback: planted names are never followed and never block the probe; a
    /// rename in the race window is spotted and leaves no file behind; a directory others
    /// may rename in gets no named file at all.
    #[test]
    fn the_named_probe_retries_and_spots_a_rename() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = open(tmp.path(), "checkpoint_dir", Rule::Probed, me(), None).expect("open");
        for i in 0..100 {
            symlink("/etc/shadow", tmp.path().join(format!(".probe.{i:016x}"))).expect("plant");
        }
        let planted = names_in(tmp.path());
        let mut f = d
            .probe_file_with(".probe", false)
            .expect("probe past the plants");
        f.write_all(b"x").expect("write");
        assert_eq!(f.metadata().expect("meta").nlink(), 0);
        // Renamed away (and a decoy put at the old name) between create and unlink.
        BEFORE_UNLINK.with(|h| {
            *h.borrow_mut() = Some(Box::new(|dir: &Path, name: &str| {
                std::fs::rename(dir.join(name), dir.join("stolen")).expect("rename");
                std::fs::write(dir.join(name), "decoy").expect("decoy");
            }))
        });
        let e = d.probe_file_with(".probe", false).expect_err("renamed");
        BEFORE_UNLINK.with(|h| *h.borrow_mut() = None);
        assert!(
            matches!(&e, ProbeError::Interfered(w) if w.contains("was renamed or linked by someone else")),
            "{e:?}"
        );
        let mut left = names_in(tmp.path());
        let decoy = left
            .iter()
            .position(|n| n.starts_with(".probe.") && !planted.contains(n))
            .expect("the decoy stays: not ours");
        left.remove(decoy);
        assert_eq!(left, planted, "the renamed probe file is gone");
        // Writable by others without the sticky bit: refused before any name is made.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let before = names_in(tmp.path());
        let e = d.probe_file_with(".probe", false).expect_err("0777");
        assert!(
            matches!(&e, ProbeError::Interfered(w) if w.contains("lets others rename entries")),
            "{e:?}"
        );
        assert_eq!(names_in(tmp.path()), before);
        // Sticky: only the file's owner may rename it; the named probe runs.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777))
            .expect("chmod");
        d.probe_file_with(".probe", false).expect("sticky");
        assert_eq!(names_in(tmp.path()), before);
    }
}
