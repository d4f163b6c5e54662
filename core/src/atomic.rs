//! The one atomic file writer, for every file the suite writes in place: generated Slurm
//! files (`gpu-affinity conf`), install's plugstack snippet, plugstack.conf and record.
//! (The node programs' state and metrics go through `safe_dir`'s handle instead.)
//!
//! The bytes go to a temp file in a directory the caller names, are synced, renamed over
//! the target, and the directories are synced, so a reader (slurmd, a metrics collector)
//! sees the old file or the new one, never half of one. The temp file is a dot file
//! (`include DIR/*` globs and `*.prom` collectors skip it), mode 0600 until it is
//! complete, and removed on every error path. The caller picks the temp dir because one
//! place must never hold it: an include dir (aws/aws-parallelcluster#6459: a scratch file
//! left in plugstack.conf.d broke every job); it must be on the target's filesystem.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A failed atomic write: what failed, on which path, and why (one line).
#[derive(Debug, thiserror::Error)]
#[error("{what} {}: {source}", path.display())]
pub struct WriteError {
    pub what: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

fn fail(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> WriteError {
    let path = path.to_path_buf();
    move |source| WriteError { what, path, source }
}

/// Replace `path` with `bytes`, mode `mode`, through a temp file in `temp_dir`.
pub fn write_file(path: &Path, temp_dir: &Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    let name = path
        .file_name()
        .ok_or_else(|| fail("cannot write", path)(io::ErrorKind::InvalidInput.into()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".tmp")
        .tempfile_in(temp_dir)
        .map_err(fail("cannot create a temp file in", temp_dir))?;
    tmp.write_all(bytes)
        .map_err(fail("cannot write", tmp.path()))?;
    // Set after the write, so the file is never readable by others while partial; fchmod
    // is not narrowed by the umask (Slurm daemons running as SlurmUser read 0644 files).
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail("cannot set the mode of", tmp.path()))?;
    tmp.as_file()
        .sync_all()
        .map_err(fail("cannot sync", tmp.path()))?;
    tmp.persist(path)
        .map_err(|e| fail("cannot replace", path)(e.error))?;
    // The rename is durable once both directories are synced; some filesystems refuse to
    // sync a directory, which costs durability only, not atomicity.
    for dir in [path.parent().unwrap_or(Path::new("")), temp_dir] {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut all: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        all.sort();
        all
    }

    #[test]
    fn replaces_with_the_mode_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let include_dir = dir.path().join("plugstack.conf.d");
        std::fs::create_dir(&include_dir).expect("mkdir");
        let target = include_dir.join("gpu-affinity.conf");
        write_file(&target, dir.path(), b"one\n", 0o644).expect("write");
        write_file(&target, dir.path(), b"two\n", 0o600).expect("rewrite");
        assert_eq!(std::fs::read(&target).expect("read"), b"two\n");
        let mode = std::fs::metadata(&target)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(names(&include_dir), ["gpu-affinity.conf"]);
        assert_eq!(names(dir.path()), ["plugstack.conf.d"]);
    }

    #[test]
    fn a_failed_write_names_the_path_and_leaves_the_target() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("state.json");
        std::fs::write(&target, "old").expect("write");
        let missing = dir.path().join("no-such-dir");
        let e = write_file(&target, &missing, b"new", 0o600).expect_err("no temp dir");
        assert!(
            e.to_string().starts_with(&format!(
                "cannot create a temp file in {}: ",
                missing.display()
            )),
            "{e}"
        );
        // A directory in the way of the rename: the temp file is removed again.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).expect("mkdir");
        std::fs::write(blocked.join("x"), "in the way").expect("write");
        let e = write_file(&blocked, dir.path(), b"new", 0o600).expect_err("a dir");
        assert!(e.to_string().starts_with("cannot replace "), "{e}");
        assert_eq!(std::fs::read(&target).expect("read"), b"old");
        assert_eq!(names(dir.path()), ["blocked", "state.json"]);
    }
}
