//! The thin reader under the sysfs source: fetch bytes, list directories, read symlinks.
//!
//! Every path is relative to a filesystem root ("sys/bus/pci/devices"), so the same
//! discovery runs on the live machine (`/`) and on a fixture tree. Nothing here parses.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::SysfsError;

/// Largest file the discovery reads. sysfs attributes are at most one page; procfs files
/// read here are a few hundred bytes. A larger file means the tree is not what we think.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Read access to a filesystem root. Paths are relative ("sys/class/net").
///
/// A missing file, directory or link is `Ok(None)` / an empty listing: absent data is
/// normal on VMs and old kernels. Any other failure is an error naming the path.
pub trait FsReader {
    /// The whole file, at most `limit` bytes (more is an error).
    fn read(&self, path: &str, limit: u64) -> Result<Option<Vec<u8>>, SysfsError>;
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
#[derive(Clone, Debug)]
pub struct RootDir {
    root: PathBuf,
}

impl RootDir {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
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
}

impl Default for RootDir {
    fn default() -> Self {
        Self::new(Path::new("/"))
    }
}

/// Absent things, and sysfs attributes a kernel refuses to read for this device, read as
/// "not there" rather than as a failed discovery.
fn is_absent(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

impl FsReader for RootDir {
    fn display(&self, path: &str) -> PathBuf {
        self.full(path)
    }

    fn read(&self, path: &str, limit: u64) -> Result<Option<Vec<u8>>, SysfsError> {
        let full = self.full(path);
        let file = match std::fs::File::open(&full) {
            Ok(f) => f,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(self.io_error(path, e)),
        };
        let mut bytes = Vec::new();
        // Read one byte past the limit to tell "exactly at the limit" from "too large".
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| self.io_error(path, e))?;
        if bytes.len() as u64 > limit {
            return Err(SysfsError::TooLarge { path: full, limit });
        }
        Ok(Some(bytes))
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
        match std::fs::read_link(self.full(path)) {
            Ok(target) => Ok(target.to_str().map(str::to_string)),
            Err(e) if is_absent(&e) || e.kind() == io::ErrorKind::InvalidInput => Ok(None),
            Err(e) => Err(self.io_error(path, e)),
        }
    }
}
