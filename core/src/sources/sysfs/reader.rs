//! The thin reader under the sysfs source: fetch bytes, list directories, read symlinks.
//!
//! Every path is relative to a filesystem root ("sys/bus/pci/devices"), so the same
//! discovery runs on the live machine (`/`) and on a fixture tree. Nothing here parses.

use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::SysfsError;

/// Largest file the discovery reads. sysfs attributes are at most one page; procfs files
/// read here are a few hundred bytes. A larger file means the tree is not what we think.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// The first read's size: enough for every attribute discovery reads in one go.
const FIRST_READ: usize = 1024;

/// The step for reading on past the first read (procfs hands out about a page per read).
const FOLLOW_READ: usize = 256 * 1024;

/// One directory entry's name and the files read below it (`None`: missing).
pub type EntryFiles = (String, Vec<Option<Vec<u8>>>);

/// Read access to a filesystem root. Paths are relative ("sys/class/net").
///
/// A missing file, directory or link is `Ok(None)` / an empty listing: absent data is
/// normal on VMs and old kernels. Any other failure is an error naming the path.
pub trait FsReader {
    /// The whole file, at most `limit` bytes (more is an error).
    fn read(&self, path: &str, limit: u64) -> Result<Option<Vec<u8>>, SysfsError>;
    /// Several files of one directory, in the order of `names`.
    fn read_in(
        &self,
        dir: &str,
        names: &[&str],
        limit: u64,
    ) -> Result<Vec<Option<Vec<u8>>>, SysfsError> {
        names
            .iter()
            .map(|n| self.read(&format!("{dir}/{n}"), limit))
            .collect()
    }
    /// The names in a directory, sorted; empty when it does not exist.
    fn list(&self, path: &str) -> Result<Vec<String>, SysfsError>;
    /// The entries of directory `dir` that `keep` accepts, in name order, each with the
    /// files `files` below it (`dir/ENTRY/FILE`) read, in the order of `files`.
    fn read_entries(
        &self,
        dir: &str,
        keep: &dyn Fn(&str) -> bool,
        files: &[&str],
        limit: u64,
    ) -> Result<Vec<EntryFiles>, SysfsError> {
        let mut out = Vec::new();
        for name in self.list(dir)? {
            if !keep(&name) {
                continue;
            }
            let paths: Vec<String> = files.iter().map(|f| format!("{name}/{f}")).collect();
            let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
            let read = self.read_in(dir, &paths, limit)?;
            out.push((name, read));
        }
        Ok(out)
    }
    /// The text of a symlink; `None` when it is missing or not a link.
    fn read_link(&self, path: &str) -> Result<Option<String>, SysfsError>;
    /// How a relative path is named in error messages.
    fn display(&self, path: &str) -> PathBuf {
        PathBuf::from(path)
    }
}

/// An [`FsReader`] over a real directory: `/` for the live machine, or a fixture tree.
/// It holds the root open and opens everything relative to it (or to a directory it
/// opened), so each attribute costs one short path lookup.
#[derive(Debug)]
pub struct RootDir {
    root: PathBuf,
    fd: OwnedFd,
}

/// Absent things read as "not there" rather than as a failed discovery.
fn is_absent(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

fn open_dir(base: impl AsFd, path: &str) -> io::Result<OwnedFd> {
    let path = if path.is_empty() { "." } else { path };
    Ok(rustix::fs::openat(
        base,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Open a file below `base` for reading; `Ok(None)` when it does not exist.
///
/// Through [`crate::trust::open_regular_at`], the rule every reader of the suite keeps:
/// a FIFO planted under a sysfs root (a fixture tree, a replayed dump) must not block
/// the step's launch (Invariant 4), and sysfs attributes and the procfs files discovery
/// reads are regular files, so anything else (a FIFO, a character device such as
/// /dev/zero) means the tree is not what it claims, and is an error naming the path.
fn open_file_at(base: impl AsFd, path: &str) -> io::Result<Option<std::fs::File>> {
    match crate::trust::open_regular_at(base, path) {
        Ok(file) => Ok(Some(file)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Read a whole file opened relative to `base`; `Ok(None)` when it does not exist.
fn read_at(base: impl AsFd, path: &str, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let Some(mut file) = open_file_at(base, path)? else {
        return Ok(None);
    };
    // One read() answers a sysfs attribute or small procfs file in full, and a regular
    // file reads short only at its end; so a read that leaves room in the buffer is the
    // whole file. This halves the system calls of discovery.
    let mut first = [0u8; FIRST_READ];
    let n = file.read(&mut first)?;
    let mut bytes = first[..n].to_vec();
    if n == FIRST_READ {
        // A large file (/proc/cpuinfo): read on in big steps, not from a small probe.
        bytes.reserve(
            usize::try_from(limit)
                .unwrap_or(usize::MAX)
                .min(FOLLOW_READ),
        );
        // Read one byte past the limit to tell "exactly at the limit" from "too large".
        file.take(limit.saturating_sub(n as u64) + 1)
            .read_to_end(&mut bytes)?;
    }
    Ok(Some(bytes))
}

/// Open a directory for listing and for opening names below it; `None` when absent.
fn open_listing(base: impl AsFd, path: &str) -> io::Result<Option<rustix::fs::Dir>> {
    let path = if path.is_empty() { "." } else { path };
    match rustix::fs::openat(
        base,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(Some(rustix::fs::Dir::new(fd)?)),
        Err(e) => {
            let e = io::Error::from(e);
            if is_absent(&e) { Ok(None) } else { Err(e) }
        }
    }
}

/// The names in an open directory, sorted, without "." and "..". Names that are not
/// UTF-8 are no device, port or interface name we know.
fn names_in(dir: &mut rustix::fs::Dir) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if name != "." && name != ".." {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

impl RootDir {
    /// Open the root directory, like every input below it: O_NONBLOCK, and only if it
    /// is a directory (O_DIRECTORY refuses anything else before opening it), so a FIFO
    /// planted at the `sysfs_root` path cannot hang the step's launch (Invariant 4).
    pub fn open(root: &Path) -> Result<Self, SysfsError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = rustix::fs::open(root, flags, Mode::empty()).map_err(|e| SysfsError::Io {
            path: root.to_path_buf(),
            source: e.into(),
        })?;
        Ok(Self {
            root: root.to_path_buf(),
            fd,
        })
    }

    /// The path a relative name refers to, as shown in error messages.
    pub fn full(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }

    fn io_error(&self, path: &str, source: io::Error) -> SysfsError {
        SysfsError::Io {
            path: self.full(path),
            source,
        }
    }

    fn checked(
        &self,
        path: &str,
        bytes: Option<Vec<u8>>,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, SysfsError> {
        match bytes {
            Some(b) if b.len() as u64 > limit => Err(SysfsError::TooLarge {
                path: self.full(path),
                limit,
            }),
            other => Ok(other),
        }
    }
}

impl FsReader for RootDir {
    fn display(&self, path: &str) -> PathBuf {
        self.full(path)
    }

    fn read(&self, path: &str, limit: u64) -> Result<Option<Vec<u8>>, SysfsError> {
        let bytes = read_at(&self.fd, path, limit).map_err(|e| self.io_error(path, e))?;
        self.checked(path, bytes, limit)
    }

    fn read_in(
        &self,
        dir: &str,
        names: &[&str],
        limit: u64,
    ) -> Result<Vec<Option<Vec<u8>>>, SysfsError> {
        let dir_fd = match open_dir(&self.fd, dir) {
            Ok(fd) => fd,
            Err(e) if is_absent(&e) => return Ok(vec![None; names.len()]),
            Err(e) => return Err(self.io_error(dir, e)),
        };
        names
            .iter()
            .map(|name| {
                let path = || format!("{dir}/{name}");
                let bytes = read_at(&dir_fd, name, limit).map_err(|e| self.io_error(&path(), e))?;
                self.checked(&path(), bytes, limit)
            })
            .collect()
    }

    fn list(&self, path: &str) -> Result<Vec<String>, SysfsError> {
        let listed = open_listing(&self.fd, path)
            .and_then(|dir| dir.map(|mut d| names_in(&mut d)).transpose());
        match listed {
            Ok(names) => Ok(names.unwrap_or_default()),
            Err(e) => Err(self.io_error(path, e)),
        }
    }

    /// One open of `dir` serves both the listing and every file read below it.
    fn read_entries(
        &self,
        dir: &str,
        keep: &dyn Fn(&str) -> bool,
        files: &[&str],
        limit: u64,
    ) -> Result<Vec<EntryFiles>, SysfsError> {
        let Some(mut listing) = open_listing(&self.fd, dir).map_err(|e| self.io_error(dir, e))?
        else {
            return Ok(Vec::new());
        };
        let names = names_in(&mut listing).map_err(|e| self.io_error(dir, e))?;
        let dir_fd = listing.fd().map_err(|e| self.io_error(dir, e.into()))?;
        let mut out = Vec::new();
        for name in names {
            if !keep(&name) {
                continue;
            }
            let mut read = Vec::with_capacity(files.len());
            for file in files {
                let relative = format!("{name}/{file}");
                let path = || format!("{dir}/{relative}");
                let bytes =
                    read_at(dir_fd, &relative, limit).map_err(|e| self.io_error(&path(), e))?;
                read.push(self.checked(&path(), bytes, limit)?);
            }
            out.push((name, read));
        }
        Ok(out)
    }

    fn read_link(&self, path: &str) -> Result<Option<String>, SysfsError> {
        match rustix::fs::readlinkat(&self.fd, path, Vec::new()) {
            Ok(target) => Ok(target.into_string().ok()),
            Err(e) => {
                let e = io::Error::from(e);
                // EINVAL: the path is there but is not a symlink.
                if is_absent(&e) || e.kind() == io::ErrorKind::InvalidInput {
                    Ok(None)
                } else {
                    Err(self.io_error(path, e))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::fifo;

    #[test]
    fn a_root_that_is_not_a_directory_is_an_error_not_a_hang() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("sysfs");
        fifo::make(&root);
        let r = root.clone();
        let err = fifo::returns(&root, move || RootDir::open(&r).map(|_| ()))
            .expect_err("a FIFO is no root");
        let text = err.to_string();
        assert!(
            text.contains("sysfs") && text.contains("Not a directory"),
            "{text}"
        );
        std::fs::remove_file(&root).expect("rm");
        std::fs::write(&root, "").expect("file");
        let err = RootDir::open(&root).expect_err("a file is no root");
        assert!(err.to_string().contains("Not a directory"), "{err}");
        std::fs::remove_file(&root).expect("rm");
        std::fs::create_dir(&root).expect("mkdir");
        RootDir::open(&root).expect("a directory is a root");
    }

    #[test]
    fn attributes_that_are_not_regular_files_are_errors_not_hangs() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("sys/devices/system/node/node0");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let cpulist = dir.join("cpulist");
        fifo::make(&cpulist);
        let root = tmp.path().to_path_buf();
        let root_dir = RootDir::open(&root).expect("root");
        let err = fifo::returns(&cpulist, move || {
            root_dir.read("sys/devices/system/node/node0/cpulist", MAX_FILE_BYTES)
        })
        .expect_err("a FIFO");
        let text = err.to_string();
        assert!(
            text.contains("node0/cpulist") && text.contains("not a regular file"),
            "{text}"
        );
        // Every path that opens files: read_in and read_entries.
        let root_dir = RootDir::open(&root).expect("root");
        let err = fifo::returns(&cpulist, move || {
            let a = root_dir
                .read_in("sys/devices/system/node/node0", &["cpulist"], 64)
                .map(|_| ());
            let c = root_dir
                .read_entries("sys/devices/system/node", &|_| true, &["cpulist"], 64)
                .map(|_| ());
            [a, c].into_iter().filter(Result::is_err).count()
        });
        assert_eq!(err, 2);
        // Regular files and absent ones read as before.
        std::fs::remove_file(&cpulist).expect("rm");
        std::fs::write(&cpulist, "0-3\n").expect("write");
        let root_dir = RootDir::open(&root).expect("root");
        assert_eq!(
            root_dir
                .read("sys/devices/system/node/node0/cpulist", 64)
                .expect("read"),
            Some(b"0-3\n".to_vec())
        );
        assert_eq!(root_dir.read("sys/nothing", 64).expect("absent"), None);
    }
}
