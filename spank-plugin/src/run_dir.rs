//! Per-step files slurmstepd writes as root: `<run_dir>/job<JOBID>.<STEPID>.<PID>/`.
//!
//! Today that is one file, the NCCL topology generated from the node's model, next to a
//! record of the slurmstepd that made the directory. (The node's copy that sits beside
//! the step directories, `node.json`, is `copies.rs`'s; the sweep leaves every name
//! that is not a step directory alone.) Tasks run as the job user and only
//! read the topology, so: the directories are 0755 and the files 0644, all owned by root.
//!
//! Everything is done through directory handles, never by path once a handle exists:
//! `run_dir` is reached by walking it from `/` one component at a time with
//! openat(O_NOFOLLOW), each directory on the way checked (root's, and nobody else may
//! rename in it: not writable by group or others, unless sticky like /tmp), and the
//! step directory's handle is kept for the step; its files are created and removed with
//! `*at` calls on that handle. So a user who can change some directory on the path
//! (plant a symlink, rename a parent away) cannot redirect root's writes or unlinks: the
//! walk refuses, and after it the handles no longer depend on the path. Nothing is
//! created through a symlink, and a path that already exists is used only when it is a
//! real directory root owns and nobody else can write (a stale one of ours).
//!
//! The slurmstepd pid in the name keeps two slurmds on one machine (`slurmd -N`, which
//! share /run) from sharing a step directory. A slurmstepd that dies without its exit
//! hook (SIGKILL, the OOM killer) leaves its directory behind; the next step that makes
//! one removes every step directory whose slurmstepd is gone: no process with the pid
//! in its name, or one that started at another time than the record says (the pid was
//! reused). A directory without a record whose pid is alive is kept: its slurmstepd
//! may be about to write the record. The pid check assumes the slurmds sharing a
//! run_dir share a pid namespace (as `slurmd -N` does).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use gpu_affinity::step_files::step_dir_name;
use gpu_affinity::trust::{ROOT, check_trusted};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// The generated NCCL topology file's name inside the step directory.
pub use gpu_affinity::step_files::TOPOLOGY_FILE;

/// The record of the slurmstepd that made the step directory: `<pid> <start time>\n`,
/// the start time in clock ticks since boot as /proc/<pid>/stat gives it.
const STEPD_FILE: &str = "slurmstepd";

/// The files a step directory may hold: what exit and the stale sweep remove.
const STEP_FILES: [&str; 2] = [TOPOLOGY_FILE, STEPD_FILE];

/// The stale sweep looks at no more entries than this per step (Invariant 4: bounded).
const MAX_SWEEP: usize = 4096;

/// Where this step's files go on this node (the name explain shows too).
pub fn step_dir(run_dir: &Path, job_id: u32, step_id: u32) -> PathBuf {
    run_dir.join(step_dir_name(job_id, step_id, std::process::id()))
}

/// The slurmstepd pid a step directory's name carries; `None` for any other name.
fn stepd_pid(name: &str) -> Option<u32> {
    let mut parts = name.strip_prefix("job")?.split('.');
    let (job, step, pid) = (parts.next()?, parts.next()?, parts.next()?);
    let [job, step, pid] = [job, step, pid].map(|p| p.parse::<u32>().ok());
    let pid = pid?;
    // The name must be exactly one we would have made.
    (parts.next().is_none() && step_dir_name(job?, step?, pid) == name).then_some(pid)
}

/// A step directory made (or accepted) for this step, held open.
pub struct StepDir {
    /// `run_dir`, as the walk reached it.
    run: File,
    dir: File,
    name: String,
    /// For messages only.
    path: PathBuf,
    owner: u32,
}

impl StepDir {
    /// Reach `run_dir` safely (creating its last component when absent), remove step
    /// directories whose slurmstepd is gone, then create the step directory `dir` (a
    /// child of `run_dir`), or accept a stale one of ours, and record this slurmstepd in
    /// it. `owner` is the uid these must belong to (root; tests use their own). Once
    /// this succeeds the directory is the step's to remove, whatever happens next.
    pub fn create(run_dir: &Path, dir: &Path, owner: u32) -> Result<StepDir, String> {
        let name = match dir.file_name().and_then(OsStr::to_str) {
            Some(name) if dir.parent() == Some(run_dir) => name.to_string(),
            _ => {
                return Err(format!(
                    "{} is not directly under run_dir {}",
                    dir.display(),
                    run_dir.display()
                ));
            }
        };
        let run = open_run_dir(run_dir, owner)?;
        let own = std::process::id();
        let record = process_start(own)
            .map(|start| format!("{own} {start}\n"))
            .map_err(|e| format!("/proc/{own}/stat: {e}"))?;
        // Only with our own start time readable is /proc there to judge the others by.
        sweep(&run, run_dir, &name, owner);
        let step = make_dir_at(&run, &name, "step directory", dir, owner)?;
        let made = StepDir {
            run,
            dir: step,
            name,
            path: dir.to_path_buf(),
            owner,
        };
        if let Err(e) = made.write(STEPD_FILE, &record) {
            // Best effort: the error that matters is the one returned.
            let _ = made.remove();
            return Err(e);
        }
        Ok(made)
    }

    /// Write `name` in the step directory; returns the file's path (for NCCL_TOPO_FILE).
    pub fn write(&self, name: &str, contents: &str) -> Result<PathBuf, String> {
        let path = self.path.join(name);
        let err = |e: Errno| format!("{}: {}", path.display(), e.desc());
        let mut file = match create_file_at(&self.dir, name) {
            Err(Errno::EEXIST) => {
                // Only a stale file of ours (the directory is root's alone) is replaced.
                let st = fstatat(&self.dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(err)?;
                if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG
                    || st.st_uid != self.owner
                {
                    return Err(format!(
                        "{} exists and is not a file gpu-affinity wrote; refusing it",
                        path.display()
                    ));
                }
                unlinkat(&self.dir, name, UnlinkatFlags::NoRemoveDir).map_err(err)?;
                create_file_at(&self.dir, name)
            }
            other => other,
        }
        .map_err(err)?;
        file.write_all(contents.as_bytes())
            .map_err(|e| io(&path, e))?;
        // The umask may have taken the read bits the job user needs.
        file.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| io(&path, e))?;
        Ok(path)
    }

    /// Remove the step directory and its files (slurm_spank_exit). Missing is fine.
    pub fn remove(&self) -> Result<(), String> {
        remove_at(&self.run, &self.dir, &self.name)
            .map_err(|e| format!("{}: {}", self.path.display(), e.desc()))
    }
}

/// The files of the step directory `dir` (named `name` in `run`), then the directory.
fn remove_at(run: &File, dir: &File, name: &str) -> Result<(), Errno> {
    for file in STEP_FILES {
        match unlinkat(dir, file, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    match unlinkat(run, name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// O_CREAT | O_EXCL never follows a symlink; O_NOFOLLOW says so twice.
fn create_file_at(dir: &File, name: &str) -> Result<File, Errno> {
    openat(
        dir,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map(File::from)
}

/// Open the directory `name` below `parent` without following a symlink.
fn open_dir_at(parent: &impl AsFd, name: &OsStr) -> Result<File, Errno> {
    openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
}

fn not_a_directory(what: &str, path: &Path, e: Errno) -> String {
    match e {
        Errno::ELOOP | Errno::ENOTDIR => format!(
            "{what} {} exists and is not a directory (a symlink or file); refusing it",
            path.display()
        ),
        e => format!("{what} {}: {}", path.display(), e.desc()),
    }
}

/// Walk `run_dir` from `/`: every directory on the way must be one only root (or
/// `owner`) can rename entries in, and none may be a symlink. The last component is
/// created when absent; it must pass [`make_dir_at`]'s checks.
fn open_run_dir(run_dir: &Path, owner: u32) -> Result<File, String> {
    let mut names = Vec::new();
    for component in run_dir.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => names.push(name),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!(
                    "run_dir {} must be an absolute path without '..'",
                    run_dir.display()
                ));
            }
        }
    }
    let Some((last, parents)) = names.split_last() else {
        return Err("run_dir must not be /".to_string());
    };
    if !run_dir.is_absolute() {
        return Err(format!(
            "run_dir {} must be an absolute path",
            run_dir.display()
        ));
    }
    let mut at = PathBuf::from("/");
    let mut dir = nix::fcntl::open(
        "/",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
    .map_err(|e| format!("/: {}", e.desc()))?;
    for name in parents {
        check_parent(&dir, &at, owner)?;
        at.push(name);
        dir = open_dir_at(&dir, name).map_err(|e| not_a_directory("run_dir parent", &at, e))?;
    }
    check_parent(&dir, &at, owner)?;
    make_dir_at(&dir, last, "run_dir", run_dir, owner)
}

/// A directory on the way to run_dir: owned by root (or `owner`), and nobody else may
/// rename or remove entries in it (not writable by group or others, or sticky like
/// /tmp, where only an entry's owner may).
fn check_parent(dir: &File, path: &Path, owner: u32) -> Result<(), String> {
    let meta = dir.metadata().map_err(|e| io(path, e))?;
    if meta.uid() != ROOT && meta.uid() != owner {
        return Err(format!(
            "run_dir parent {} is owned by uid {}, not root; refusing it",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
        return Err(format!(
            "run_dir parent {} is writable by group or others (mode {:04o}); refusing it",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Make `name` (0755) below `parent` unless it exists; either way it must be a real
/// directory that `owner` owns, nobody else can write, and job users can enter.
fn make_dir_at(
    parent: &File,
    name: impl AsRef<OsStr>,
    what: &str,
    path: &Path,
    owner: u32,
) -> Result<File, String> {
    let name = name.as_ref();
    let created = match mkdirat(parent, name, Mode::from_bits_truncate(0o755)) {
        Ok(()) => true,
        Err(Errno::EEXIST) => false,
        Err(e) => return Err(format!("{}: {}", path.display(), e.desc())),
    };
    // Open without following a symlink, then look at what was opened.
    let dir = open_dir_at(parent, name).map_err(|e| not_a_directory(what, path, e))?;
    let meta = dir.metadata().map_err(|e| io(path, e))?;
    check_trusted(&meta, what, path, owner).map_err(|e| e.to_string())?;
    if created {
        // The umask may have taken the search bits the job user needs.
        dir.set_permissions(std::fs::Permissions::from_mode(0o755))
            .map_err(|e| io(path, e))?;
    } else if meta.mode() & 0o001 == 0 {
        return Err(format!(
            "{what} {} is not searchable by job users (mode {:04o}); make it 0755",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(dir)
}

/// Remove the step directories in `run` whose slurmstepd is gone, except `own`.
/// Failures are logged, never fatal: the sweep is housekeeping for this step.
fn sweep(run: &File, run_dir: &Path, own: &str, owner: u32) {
    // Step directories are directories: a run_dir whose link count is 2 (`.` and its
    // entry in the parent: tmpfs, ext4, xfs) holds none, so there is nothing to list.
    // Filesystems that do not count subdirectories (btrfs: 1) are listed as before.
    if run.metadata().is_ok_and(|m| m.nlink() == 2) {
        return;
    }
    let listing = openat(
        run,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .and_then(nix::dir::Dir::from_fd);
    let mut listing = match listing {
        Ok(l) => l,
        Err(e) => {
            log::warn!(
                "gpu-affinity: listing run_dir {}: {}",
                run_dir.display(),
                e.desc()
            );
            return;
        }
    };
    let names: Vec<(String, u32)> = listing
        .iter()
        .take(MAX_SWEEP)
        .map_while(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_str().ok()?.to_string();
            let pid = stepd_pid(&name)?;
            (name != own).then_some((name, pid))
        })
        .collect();
    for (name, pid) in names {
        let path = run_dir.join(&name);
        // Only a real directory of ours is judged; anything else is not ours to remove.
        let Ok(dir) = open_dir_at(run, OsStr::new(&name)) else {
            continue;
        };
        let trusted = dir
            .metadata()
            .is_ok_and(|m| check_trusted(&m, "step directory", &path, owner).is_ok());
        if !trusted || !stepd_gone(&dir, pid, owner) {
            continue;
        }
        match remove_at(run, &dir, &name) {
            Ok(()) => log::debug!(
                "gpu-affinity: removed {} (its slurmstepd {pid} is gone)",
                path.display()
            ),
            Err(e) => log::warn!(
                "gpu-affinity: stale step directory {} not removed: {}",
                path.display(),
                e.desc()
            ),
        }
    }
}

/// Whether the slurmstepd that made a step directory (pid `pid` from its name) is gone.
/// In doubt (its /proc entry unreadable), it is not.
fn stepd_gone(dir: &File, pid: u32, owner: u32) -> bool {
    match process_start(pid) {
        Err(e) if e.kind() == ErrorKind::NotFound => true,
        Err(_) => false,
        // The pid is alive: it is the same process only if it started when the record
        // says. No record yet: its slurmstepd may be between mkdir and writing it.
        Ok(start) => read_record(dir, owner).is_some_and(|(p, s)| p == pid && s != start),
    }
}

/// `(pid, start time)` from a step directory's record; `None` when absent or not ours.
fn read_record(dir: &File, owner: u32) -> Option<(u32, u64)> {
    let file = openat(
        dir,
        STEPD_FILE,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
    .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != owner {
        return None;
    }
    let mut text = String::new();
    file.take(64).read_to_string(&mut text).ok()?;
    let (pid, start) = text.trim().split_once(' ')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// When process `pid` started (field 22 of /proc/<pid>/stat, clock ticks since boot).
/// NotFound: no such process. /proc is the kernel's own, so a plain bounded read is safe.
fn process_start(pid: u32) -> std::io::Result<u64> {
    let mut text = String::new();
    File::open(format!("/proc/{pid}/stat"))?
        .take(4096)
        .read_to_string(&mut text)?;
    parse_start_time(&text).ok_or_else(|| {
        std::io::Error::new(ErrorKind::InvalidData, "no start time in /proc/<pid>/stat")
    })
}

/// The start time in a /proc/<pid>/stat line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last ')': state is field 3,
/// start time field 22.
fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Whether the step's file is in place (task_init: the tasks were forked before it was
/// written, so they look at the filesystem, not at the parent's memory).
pub fn is_written(path: &Path, owner: u32) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file() && m.uid() == owner)
}

fn io(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn uid() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).expect("stat").mode() & 0o7777
    }

    /// Create `dir` under `run` and write the topology file in it.
    fn write_step_file(
        run: &Path,
        dir: &Path,
        contents: &str,
        owner: u32,
    ) -> Result<StepDir, String> {
        let made = StepDir::create(run, dir, owner)?;
        made.write(TOPOLOGY_FILE, contents)?;
        Ok(made)
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
        let made = write_step_file(&run, &dir, "<system/>\n", uid()).expect("write");
        let path = dir.join(TOPOLOGY_FILE);
        assert_eq!(fs::read_to_string(&path).expect("read"), "<system/>\n");
        assert_eq!((mode(&run), mode(&dir), mode(&path)), (0o755, 0o755, 0o644));
        assert!(is_written(&path, uid()));
        assert!(!is_written(&path, uid() + 1));
        // The record names this slurmstepd and when it started.
        let record = fs::read_to_string(dir.join(STEPD_FILE)).expect("record");
        let own = std::process::id();
        let start = process_start(own).expect("own start time");
        assert_eq!(record, format!("{own} {start}\n"));
        // A second write (a stale file of ours) replaces it.
        made.write(TOPOLOGY_FILE, "<system></system>\n")
            .expect("again");
        made.remove().expect("remove");
        assert!(!dir.exists() && run.exists());
        made.remove().expect("missing is fine");
    }

    #[test]
    fn refuses_symlinks_and_foreign_or_open_directories() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = tmp.path().join("run");
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).expect("mkdir");
        std::os::unix::fs::symlink(&elsewhere, &run).expect("symlink");
        let dir = step_dir(&run, 1, 0);
        let err = write_step_file(&run, &dir, "x", uid())
            .err()
            .expect("symlink");
        assert!(err.contains("is not a directory"), "{err}");
        fs::remove_file(&run).expect("unlink");

        fs::create_dir(&run).expect("mkdir");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = write_step_file(&run, &dir, "x", uid())
            .err()
            .expect("writable");
        assert!(
            err.contains("writable by group or others (mode 0777)"),
            "{err}"
        );
        fs::set_permissions(&run, fs::Permissions::from_mode(0o700)).expect("chmod");
        let err = write_step_file(&run, &dir, "x", uid())
            .err()
            .expect("closed");
        assert!(err.contains("not searchable by job users"), "{err}");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = write_step_file(&run, &dir, "x", uid() + 1)
            .err()
            .expect("owner");
        assert!(err.contains("owned by uid"), "{err}");

        // A symlink planted where the file goes is never written through.
        fs::create_dir(&dir).expect("mkdir step");
        let target = tmp.path().join("target");
        std::os::unix::fs::symlink(&target, dir.join(TOPOLOGY_FILE)).expect("symlink");
        let err = write_step_file(&run, &dir, "x", uid())
            .err()
            .expect("planted");
        assert!(err.contains("not a file gpu-affinity wrote"), "{err}");
        assert!(!target.exists());

        let err = write_step_file(&run, &tmp.path().join("other"), "x", uid())
            .err()
            .expect("outside run_dir");
        assert!(err.contains("not directly under run_dir"), "{err}");
    }

    /// A parent of run_dir that a user could change: a symlink anywhere on the path, or a
    /// directory others can write (without the sticky bit) or that someone else owns.
    #[test]
    fn every_directory_on_the_way_to_run_dir_is_checked() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let real = tmp.path().join("real");
        fs::create_dir(&real).expect("mkdir");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        // The step under `run` is refused with a line naming `parent` and saying `why`.
        let refused = |run: &Path, owner: u32, parent: &Path, why: &str| {
            let err = write_step_file(run, &step_dir(run, 1, 0), "x", owner)
                .err()
                .expect("refused");
            let want = format!("run_dir parent {} {why}", parent.display());
            assert!(err.contains(&want), "{want}: {err}");
        };
        refused(
            &link.join("run"),
            uid(),
            &link,
            "exists and is not a directory",
        );
        assert_eq!(
            fs::read_dir(&real).expect("dir").count(),
            0,
            "nothing made there"
        );

        let run = real.join("run");
        for (mode, refused_mode) in [
            (0o777, true),
            (0o775, true),
            (0o1777, false),
            (0o755, false),
        ] {
            fs::set_permissions(&real, fs::Permissions::from_mode(mode)).expect("chmod");
            if refused_mode {
                refused(&run, uid(), &real, "is writable by group or others");
            } else {
                write_step_file(&run, &step_dir(&run, 1, 0), "x", uid())
                    .and_then(|made| made.remove())
                    .unwrap_or_else(|e| panic!("mode {mode:o}: {e}"));
            }
        }
        let foreign = uid() + 1;
        if uid() == ROOT {
            // A parent owned by another user (root may chown).
            nix::unistd::chown(&real, Some(foreign.into()), None).expect("chown");
            refused(&run, ROOT, &real, &format!("is owned by uid {foreign}"));
        }
    }

    /// Once the step directory is open, renaming a parent away and putting a symlink in
    /// its place redirects nothing: the write and the removal go to the real directory.
    #[test]
    fn a_parent_swapped_after_the_walk_redirects_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let parent = tmp.path().join("parent");
        fs::create_dir(&parent).expect("mkdir");
        let run = parent.join("run");
        let dir = step_dir(&run, 4, 1);
        let made = StepDir::create(&run, &dir, uid()).expect("create");
        let moved = tmp.path().join("moved");
        fs::rename(&parent, &moved).expect("rename");
        let bait = tmp.path().join("bait");
        fs::create_dir_all(bait.join("run").join(dir.file_name().expect("name"))).expect("bait");
        std::os::unix::fs::symlink(&bait, &parent).expect("symlink");

        made.write(TOPOLOGY_FILE, "<system/>\n").expect("write");
        let real_dir = moved.join("run").join(dir.file_name().expect("name"));
        assert!(real_dir.join(TOPOLOGY_FILE).is_file());
        let bait_dir = bait.join("run").join(dir.file_name().expect("name"));
        assert_eq!(fs::read_dir(&bait_dir).expect("bait").count(), 0);
        made.remove().expect("remove");
        assert!(!real_dir.exists(), "the real step directory is gone");
        assert!(bait_dir.is_dir(), "the bait is untouched");
    }

    /// A step directory whose slurmstepd is gone is removed when the next one is made;
    /// live ones, and anything that is not a step directory of ours, stay.
    #[test]
    fn step_directories_of_dead_slurmstepds_are_swept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = tmp.path().join("run");
        fs::create_dir(&run).expect("mkdir");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).expect("chmod");
        // A process that has exited (and been reaped): its pid is free.
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let dead = child.id();
        child.wait().expect("wait");
        let init_start = process_start(1).expect("pid 1");
        let stale_dir = |name: &str, record: Option<String>| {
            let d = run.join(name);
            fs::create_dir(&d).expect("mkdir");
            fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).expect("chmod");
            fs::write(d.join(TOPOLOGY_FILE), "<system/>\n").expect("write");
            if let Some(r) = record {
                fs::write(d.join(STEPD_FILE), r).expect("record");
            }
            d
        };
        let killed = stale_dir(&format!("job5.0.{dead}"), Some(format!("{dead} 123\n")));
        let killed_early = stale_dir(&format!("job5.1.{dead}"), None);
        let reused = stale_dir("job6.0.1", Some(format!("1 {}\n", init_start + 1)));
        let live = stale_dir("job7.0.1", Some(format!("1 {init_start}\n")));
        let being_made = stale_dir("job8.0.1", None);
        let not_ours = stale_dir(&format!("job5.0.{dead}.bak"), None);
        let foreign_file = run.join(format!("job9.0.{dead}"));
        fs::write(&foreign_file, "").expect("file");

        let own = step_dir(&run, 10, 0);
        let made = StepDir::create(&run, &own, uid()).expect("create");
        for gone in [&killed, &killed_early, &reused] {
            assert!(!gone.exists(), "{} was not swept", gone.display());
        }
        for kept in [&live, &being_made, &not_ours, &foreign_file, &own] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        made.remove().expect("remove");
    }

    #[test]
    fn step_dir_names_and_proc_stat_parse() {
        assert_eq!(stepd_pid("job12.0.345"), Some(345));
        for other in [
            "job12.0",
            "job12.0.345.6",
            "job12.0.0345",
            "jobx.0.1",
            "run",
            "job1.2.-3",
        ] {
            assert_eq!(stepd_pid(other), None, "{other}");
        }
        let stat =
            "77 (slurm (step) 1) S 1 77 77 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_start_time(stat), Some(98765));
        assert_eq!(parse_start_time("77 (x) S 1"), None);
    }
}
