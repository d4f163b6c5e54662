//! Trusted-file I/O: the one ownership rule for root-side inputs and the one way the
//! suite opens a file it reads.
//!
//! A leaf module (it imports nothing of the crate) so the admin config, the fabric
//! profiles and the topology sources each depend on it and not on each other.
//! [`check_trusted`] is Invariant 2 for every root-side input (the config, the profiles
//! directory and its files, the plugin's run directory); [`open_regular`] and
//! [`open_regular_at`] are Invariant 4's "open without blocking, regular files only" for
//! every file read (config, profiles, topology files, sysfs attributes).

use std::fs::{File, FileType, Metadata};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// The uid every root-side input must belong to outside tests.
pub const ROOT: u32 = 0;

/// A root-side input that is unreadable or that someone other than root could change.
/// One line naming the input and its path, without a program prefix, so it can also
/// serve as a refusal reason.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TrustError {
    #[error("{what} {path}: {message}")]
    Io {
        what: String,
        path: String,
        message: String,
    },
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
}

/// The one check for every root-side input: owned by `owner` (root; tests pass their
/// own uid) and not writable by group or others, so no job user can steer what runs as
/// root. `what` names the input in the error ("config", "profiles directory").
pub fn check_trusted(
    meta: &Metadata,
    what: &str,
    path: &Path,
    owner: u32,
) -> Result<(), TrustError> {
    if meta.uid() != owner {
        return Err(TrustError::Owner {
            what: what.to_string(),
            path: path.display().to_string(),
            uid: meta.uid(),
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(TrustError::Writable {
            what: what.to_string(),
            path: path.display().to_string(),
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Open `path` and check the opened file (not the name, which could be swapped after
/// the check) before its bytes are read. At most `limit` bytes.
pub fn read_trusted_text(
    path: &Path,
    what: &str,
    owner: u32,
    limit: u64,
) -> Result<String, TrustError> {
    let io = |e: io::Error| TrustError::Io {
        what: what.to_string(),
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let file = open_regular(path).map_err(io)?;
    check_trusted(&file.metadata().map_err(io)?, what, path, owner)?;
    read_bounded_text(file, limit).map_err(io)
}

/// Open `path` for reading without blocking and refuse anything but a regular file.
///
/// A plain open(2) of a FIFO waits for a writer, which would hang a prolog or a step's
/// launch (Invariant 4); with O_NONBLOCK it returns at once, and the type check on the
/// opened handle then refuses it (and character devices, sockets) before any read.
pub fn open_regular(path: &Path) -> io::Result<File> {
    open_regular_at(rustix::fs::CWD, path)
}

/// [`open_regular`] relative to an open directory: the sysfs reader opens every
/// attribute below the root it holds open, by the same rule.
pub fn open_regular_at(dir: impl AsFd, path: impl AsRef<Path>) -> io::Result<File> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let file = File::from(rustix::fs::openat(
        dir,
        path.as_ref(),
        flags,
        Mode::empty(),
    )?);
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", file_kind(&kind)),
        ));
    }
    Ok(file)
}

fn file_kind(kind: &FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// The text of an open file, at most `limit` bytes (more is an error, not a truncation).
pub fn read_bounded_text(file: File, limit: u64) -> io::Result<String> {
    // Sized from the file's length (sysfs says 4096, a regular file its size), so a
    // large input is read in one pass, not by doubling a buffer through `Take`, which
    // gives no size hint (a 9 MB placement export: a tenth of `conf topology`).
    let hint = file.metadata().map_or(0, |m| m.len()).min(limit);
    let mut text = String::with_capacity(usize::try_from(hint).unwrap_or(0).saturating_add(1));
    file.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(text)
}

/// A FIFO for the tests of every reader that must not block on one.
#[cfg(test)]
pub(crate) mod fifo {
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Make a FIFO at `path`.
    pub fn make(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .expect("mkfifo");
    }

    /// Run `read` (which opens the FIFO at `path`) on its own thread and return what it
    /// returned; a read still blocked after 5 s fails the test (after releasing the
    /// thread by opening the FIFO for writing) instead of hanging it.
    pub fn returns<T: Send + 'static>(path: &Path, read: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read());
        });
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(v) => v,
            Err(_) => {
                let _ = std::fs::OpenOptions::new().write(true).open(path);
                panic!("reading the FIFO {} blocked", path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_opens_keep_the_same_rule() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = File::open(tmp.path()).expect("open dir");
        fifo::make(&tmp.path().join("pipe"));
        std::fs::create_dir(tmp.path().join("sub")).expect("mkdir");
        std::fs::write(tmp.path().join("file"), "x").expect("write");
        let err = fifo::returns(&tmp.path().join("pipe"), move || {
            open_regular_at(&dir, "pipe").map(drop)
        })
        .expect_err("a FIFO");
        assert!(err.to_string().contains("(a FIFO)"), "{err}");
        let dir = File::open(tmp.path()).expect("open dir");
        let err = open_regular_at(&dir, "sub").expect_err("a directory");
        assert!(err.to_string().contains("(a directory)"), "{err}");
        assert!(open_regular_at(&dir, "file").is_ok());
        let err = open_regular_at(&dir, "absent").expect_err("absent");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn bounded_text_refuses_more_than_the_limit() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("f");
        std::fs::write(&path, "12345").expect("write");
        let text = read_bounded_text(open_regular(&path).expect("open"), 5).expect("at limit");
        assert_eq!(text, "12345");
        let err = read_bounded_text(open_regular(&path).expect("open"), 4).expect_err("over");
        assert!(err.to_string().contains("larger than 4 bytes"), "{err}");
    }
}
