//! The thin reader under the sysfs source: fetch bytes, list directories, read symlinks.
//!
//! Every path is relative to a filesystem root ("sys/bus/pci/devices"), so the same
//! discovery runs on the live machine (`/`) and on a fixture tree. Nothing here parses.

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::SysfsError;

/// Largest file the discovery reads. sysfs attributes are at most one page; procfs files
/// read here are a few hundred bytes. A larger file means the tree is not what we think.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// The first read's size: enough for every attribute discovery reads in one go.
const FIRST_READ: usize = 1024;

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

fn open_dir(base: &OwnedFd, path: &str) -> io::Result<OwnedFd> {
    let path = if path.is_empty() { "." } else { path };
    Ok(rustix::fs::openat(
        base,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Read a whole file opened relative to `base`; `Ok(None)` when it does not exist.
fn read_at(base: &OwnedFd, path: &str, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let fd = match rustix::fs::openat(base, path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            let e = io::Error::from(e);
            return if is_absent(&e) { Ok(None) } else { Err(e) };
        }
    };
    let mut file = std::fs::File::from(fd);
    // One read() answers a sysfs attribute or small procfs file in full, and a regular
    // file reads short only at its end; so a read that leaves room in the buffer is the
    // whole file. This halves the system calls of discovery.
    let mut first = [0u8; FIRST_READ];
    let n = file.read(&mut first)?;
    let mut bytes = first[..n].to_vec();
    if n == FIRST_READ {
        // Read one byte past the limit to tell "exactly at the limit" from "too large".
        file.take(limit.saturating_sub(n as u64) + 1)
            .read_to_end(&mut bytes)?;
    }
    Ok(Some(bytes))
}

impl RootDir {
    /// Open the root directory.
    pub fn open(root: &Path) -> Result<Self, SysfsError> {
        let fd = std::fs::File::open(root)
            .and_then(|f| {
                if f.metadata()?.is_dir() {
                    Ok(OwnedFd::from(f))
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::NotADirectory,
                        "not a directory",
                    ))
                }
            })
            .map_err(|source| SysfsError::Io {
                path: root.to_path_buf(),
                source,
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
        let entries = match std::fs::read_dir(self.full(path)) {
            Ok(e) => e,
            Err(e) if is_absent(&e) => return Ok(Vec::new()),
            Err(e) => return Err(self.io_error(path, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.io_error(path, e))?;
            // Names that are not UTF-8 are no device, port or interface name we know.
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
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
