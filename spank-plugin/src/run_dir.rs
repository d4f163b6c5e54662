//! Per-step files slurmstepd writes as root: `<run_dir>/job<JOBID>.<STEPID>.<PID>/`.
//!
//! Today that is one file, the NCCL topology generated from the node's model. Tasks run
//! as the job user and only read it, so: the directories are 0755 and the file 0644,
//! all owned by root; nothing is created through a symlink, and a path that already
//! exists is used only when it is a real directory root owns and nobody else can write
//! (a stale one of ours), never otherwise. The slurmstepd pid in the name keeps two
//! slurmds on one machine (`slurmd -N`, which share /run) from sharing a step directory.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use gpu_affinity::step_files;
use gpu_affinity::trust::check_trusted;

/// The generated NCCL topology file's name inside the step directory.
pub use gpu_affinity::step_files::TOPOLOGY_FILE;

/// Where this step's files go on this node (the name explain shows too).
pub fn step_dir(run_dir: &Path, job_id: u32, step_id: u32) -> PathBuf {
    run_dir.join(step_files::step_dir_name(
        job_id,
        step_id,
        std::process::id(),
    ))
}

/// Create `dir` (a child of `run_dir`) and write `name` in it; returns the file's path.
/// `owner` is the uid these must belong to (root; tests use their own).
#[cfg(test)]
pub fn write_step_file(
    run_dir: &Path,
    dir: &Path,
    name: &str,
    contents: &str,
    owner: u32,
) -> Result<PathBuf, String> {
    prepare_step_dir(run_dir, dir, owner)?;
    write_in_step_dir(dir, name, contents, owner)
}

/// Create the step directory `dir` (a child of `run_dir`), or accept a stale one of ours.
/// Once this succeeds the directory is the step's to remove, whatever happens next.
pub fn prepare_step_dir(run_dir: &Path, dir: &Path, owner: u32) -> Result<(), String> {
    if dir.parent() != Some(run_dir) {
        return Err(format!(
            "{} is not directly under run_dir {}",
            dir.display(),
            run_dir.display()
        ));
    }
    ensure_dir(run_dir, "run_dir", owner)?;
    ensure_dir(dir, "step directory", owner)
}

/// Write `name` in a directory [`prepare_step_dir`] accepted; returns the file's path.
pub fn write_in_step_dir(
    dir: &Path,
    name: &str,
    contents: &str,
    owner: u32,
) -> Result<PathBuf, String> {
    let path = dir.join(name);
    let mut file = match create_file(&path) {
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            // Only a stale file of ours (the directory is root's alone) is replaced.
            let meta = fs::symlink_metadata(&path).map_err(|e| io(&path, e))?;
            if !meta.file_type().is_file() || meta.uid() != owner {
                return Err(format!(
                    "{} exists and is not a file gpu-affinity wrote; refusing it",
                    path.display()
                ));
            }
            fs::remove_file(&path).map_err(|e| io(&path, e))?;
            create_file(&path)
        }
        other => other,
    }
    .map_err(|e| io(&path, e))?;
    file.write_all(contents.as_bytes())
        .map_err(|e| io(&path, e))?;
    // The umask may have taken the read bits the job user needs.
    file.set_permissions(fs::Permissions::from_mode(0o644))
        .map_err(|e| io(&path, e))?;
    Ok(path)
}

/// O_CREAT | O_EXCL never follows a symlink; O_NOFOLLOW says so twice.
fn create_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Make `dir` (0755) unless it exists; either way it must be a real directory that
/// `owner` owns, nobody else can write, and job users can enter.
fn ensure_dir(dir: &Path, what: &str, owner: u32) -> Result<(), String> {
    let created = match DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
        Err(e) => return Err(io(dir, e)),
    };
    // Open without following a symlink, then look at what was opened.
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => format!(
                "{what} {} exists and is not a directory (a symlink or file); refusing it",
                dir.display()
            ),
            _ => io(dir, e),
        })?;
    let meta = handle.metadata().map_err(|e| io(dir, e))?;
    check_trusted(&meta, what, dir, owner).map_err(|e| e.to_string())?;
    if created {
        // The umask may have taken the search bits the job user needs.
        handle
            .set_permissions(fs::Permissions::from_mode(0o755))
            .map_err(|e| io(dir, e))?;
    } else if meta.mode() & 0o001 == 0 {
        return Err(format!(
            "{what} {} is not searchable by job users (mode {:04o}); make it 0755",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Remove the step directory and the file in it (slurm_spank_exit). Missing is fine.
pub fn remove_step_dir(dir: &Path, name: &str) -> Result<(), String> {
    let path = dir.join(name);
    for result in [
        fs::remove_file(&path).map_err(|e| (path.as_path(), e)),
        fs::remove_dir(dir).map_err(|e| (dir, e)),
    ] {
        match result {
            Err((_, e)) if e.kind() == ErrorKind::NotFound => {}
            Err((p, e)) => return Err(io(p, e)),
            Ok(()) => {}
        }
    }
    Ok(())
}

/// Whether the step's file is in place (task_init: the tasks were forked before it was
/// written, so they look at the filesystem, not at the parent's memory).
pub fn is_written(path: &Path, owner: u32) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file() && m.uid() == owner)
}

fn io(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).expect("stat").mode() & 0o7777
    }

    #[test]
    fn writes_root_readable_files_and_removes_them() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = tmp.path().join("run");
        let dir = step_dir(&run, 7, 3);
        assert!(
            dir.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("job7.3."))
        );
        let path = write_step_file(&run, &dir, TOPOLOGY_FILE, "<system/>\n", uid()).expect("write");
        assert_eq!(fs::read_to_string(&path).expect("read"), "<system/>\n");
        assert_eq!((mode(&run), mode(&dir), mode(&path)), (0o755, 0o755, 0o644));
        assert!(is_written(&path, uid()));
        assert!(!is_written(&path, uid() + 1));
        // A second write (a stale file of ours) replaces it.
        write_step_file(&run, &dir, TOPOLOGY_FILE, "<system></system>\n", uid()).expect("again");
        remove_step_dir(&dir, TOPOLOGY_FILE).expect("remove");
        assert!(!dir.exists() && run.exists());
        remove_step_dir(&dir, TOPOLOGY_FILE).expect("missing is fine");
    }

    #[test]
    fn refuses_symlinks_and_foreign_or_open_directories() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = tmp.path().join("run");
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).expect("mkdir");
        std::os::unix::fs::symlink(&elsewhere, &run).expect("symlink");
        let dir = step_dir(&run, 1, 0);
        let err = write_step_file(&run, &dir, TOPOLOGY_FILE, "x", uid()).expect_err("symlink");
        assert!(err.contains("is not a directory"), "{err}");
        fs::remove_file(&run).expect("unlink");

        fs::create_dir(&run).expect("mkdir");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = write_step_file(&run, &dir, TOPOLOGY_FILE, "x", uid()).expect_err("writable");
        assert!(
            err.contains("writable by group or others (mode 0777)"),
            "{err}"
        );
        fs::set_permissions(&run, fs::Permissions::from_mode(0o700)).expect("chmod");
        let err = write_step_file(&run, &dir, TOPOLOGY_FILE, "x", uid()).expect_err("closed");
        assert!(err.contains("not searchable by job users"), "{err}");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = write_step_file(&run, &dir, TOPOLOGY_FILE, "x", uid() + 1).expect_err("owner");
        assert!(err.contains("owned by uid"), "{err}");

        // A symlink planted where the file goes is never written through.
        fs::create_dir(&dir).expect("mkdir step");
        let target = tmp.path().join("target");
        std::os::unix::fs::symlink(&target, dir.join(TOPOLOGY_FILE)).expect("symlink");
        let err = write_step_file(&run, &dir, TOPOLOGY_FILE, "x", uid()).expect_err("planted");
        assert!(err.contains("not a file gpu-affinity wrote"), "{err}");
        assert!(!target.exists());

        let err = write_step_file(&run, &tmp.path().join("other"), TOPOLOGY_FILE, "x", uid())
            .expect_err("outside run_dir");
        assert!(err.contains("not directly under run_dir"), "{err}");
    }
}
