//! The node's copies in `run_dir`: what one step read from the node, for the next step
//! on it to use while the node is unchanged (the core's [`saved`] format).
//!
//! Every step is a new slurmstepd, and on a quiet node its reads of sysfs and the
//! profiles were most of the plugin's cost per step (docs/measurements.md). A step
//! first makes the fingerprint (a few reads), then uses the copy saved under the same
//! fingerprint, or reads afresh and replaces the copy. [`Copies`] walks run_dir once per
//! step, for whatever copies it keeps (today one, `node_view.rs`'s).
//!
//! The copies are root's alone: `run_dir` reached by the checked walk of
//! [`safe_dir::open`], each copy read only when it is a regular file `owner` owns with
//! mode 0600 (O_NOFOLLOW, O_NONBLOCK), and replaced by a new file renamed over it. A
//! copy that is missing, unreadable, untrusted or malformed means a fresh read, never
//! a refused step; a failed read is never saved.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use gpu_affinity::safe_dir::{self, Rule, SafeDir};
use gpu_affinity::saved::{self, MAX_SAVED_BYTES};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// One step's way to its node's copies: `run_dir`, walked on first use and held for
/// the step's other copies (no I/O until then, so a fake `Os` that never asks costs
/// nothing). `owner`: who run_dir and the copies must belong to (root).
pub struct Copies {
    run_dir: PathBuf,
    owner: u32,
    dir: OnceCell<Option<SafeDir>>,
}

impl Copies {
    pub fn new(run_dir: &Path, owner: u32) -> Copies {
        Copies {
            run_dir: run_dir.to_path_buf(),
            owner,
            dir: OnceCell::new(),
        }
    }

    fn dir(&self) -> Option<&SafeDir> {
        self.dir
            .get_or_init(|| {
                safe_dir::open(
                    &self.run_dir,
                    "run_dir",
                    Rule::Trusted,
                    self.owner,
                    Some(0o755),
                )
                .map_err(|e| log::debug!("gpu-affinity: no copies in run_dir: {e}"))
                .ok()
            })
            .as_ref()
    }

    /// `read()`'s value through the copy `name`: the copy's when it was saved under
    /// `fingerprint`, else `read()`'s, which then replaces the copy. `fingerprint`
    /// `None` (it could not be made) or no usable run_dir: `read()` alone, nothing saved.
    pub fn through<T: Serialize + DeserializeOwned, E>(
        &self,
        name: &str,
        fingerprint: Option<String>,
        read: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let (Some(fingerprint), Some(dir)) = (fingerprint, self.dir()) else {
            return read();
        };
        match dir.read_private(name, MAX_SAVED_BYTES, self.owner) {
            Ok(Some(bytes)) => {
                if let Some(value) = saved::value_if_current(&bytes, &fingerprint) {
                    return Ok(value);
                }
            }
            Ok(None) => {}
            Err(e) => log::debug!("gpu-affinity: {e}"),
        }
        let value = read()?;
        let saved = saved::to_bytes(&fingerprint, &value)
            .and_then(|bytes| dir.replace(name, &bytes, 0o600));
        if let Err(e) = saved {
            log::debug!("gpu-affinity: copy {name} not saved: {e}");
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::os::unix::fs::PermissionsExt;

    fn me() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    /// A run_dir under a private temp dir (the walk checks every directory on the way).
    fn run_dir() -> (tempfile::TempDir, std::path::PathBuf) {
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let run = t.path().join("run");
        (t, run)
    }

    #[test]
    fn the_copy_serves_its_fingerprint_and_is_replaced_for_another() {
        let (_t, run) = run_dir();
        let reads = Cell::new(0);
        let read = |v: u32| {
            reads.set(reads.get() + 1);
            Ok::<_, String>(v)
        };
        // One step reading through the copy "n.json" under fingerprint `fp`, where a
        // fresh read would give `v`.
        let copies = Copies::new(&run, me());
        let step = |fp: &str, v: u32| copies.through("n.json", Some(fp.into()), || read(v));
        assert_eq!(step("a", 1), Ok(1));
        assert_eq!(step("a", 2), Ok(1));
        assert_eq!(reads.get(), 1, "the second step used the copy");
        assert_eq!(step("b", 3), Ok(3));
        assert_eq!(step("b", 4), Ok(3));
        let file = run.join("n.json");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "root's alone");

        // Not the owner's alone: ignored and replaced by a fresh read.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(step("b", 5), Ok(5));
        assert_eq!(step("b", 6), Ok(5));
        // Corrupt: the same.
        std::fs::write(&file, b"\"b\"\n{not json").unwrap();
        assert_eq!(step("b", 7), Ok(7));
        // A planted symlink is never followed: read afresh, and the link replaced.
        std::fs::remove_file(&file).unwrap();
        std::fs::write(run.join("elsewhere"), b"\"b\"\n99").unwrap();
        std::os::unix::fs::symlink(run.join("elsewhere"), &file).unwrap();
        assert_eq!(step("b", 8), Ok(8));
        assert!(!std::fs::symlink_metadata(&file).unwrap().is_symlink());
        // A FIFO planted where the copy goes: never opened for a blocking read (no hang),
        // read afresh, and replaced by a regular file.
        std::fs::remove_file(&file).unwrap();
        nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(step("b", 10), Ok(10));
        assert!(std::fs::symlink_metadata(&file).unwrap().is_file());
        // A failed read is passed on and never saved; no fingerprint: nothing saved.
        assert_eq!(
            copies.through("e.json", Some("b".into()), || Err::<u32, _>(
                "bad".to_string()
            )),
            Err("bad".to_string())
        );
        assert!(!run.join("e.json").exists());
        assert_eq!(copies.through("f.json", None, || read(9)), Ok(9));
        assert!(!run.join("f.json").exists());
    }

    #[test]
    fn a_run_dir_a_job_user_made_first_is_never_read_or_written() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let (t, run) = run_dir();
        if std::fs::metadata(t.path()).unwrap().uid() != 0 {
            eprintln!("SKIP: a directory of another user's needs root to make");
            return;
        }
        // nobody's run_dir, holding a copy that says "planted" under the step's
        // fingerprint, as the user would write it.
        std::fs::create_dir(&run).unwrap();
        let planted = saved::to_bytes("fp", &99u32).unwrap();
        std::fs::write(run.join("n.json"), &planted).unwrap();
        std::fs::set_permissions(run.join("n.json"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        for path in [&run, &run.join("n.json")] {
            nix::unistd::chown(path.as_path(), Some(65534.into()), Some(65534.into())).unwrap();
        }
        let copies = Copies::new(&run, 0);
        assert_eq!(
            copies.through("n.json", Some("fp".into()), || Ok::<_, String>(1u32)),
            Ok(1)
        );
        assert_eq!(
            copies.through("m.json", Some("fp".into()), || Ok::<_, String>(2u32)),
            Ok(2)
        );
        assert!(
            !run.join("m.json").exists(),
            "nothing written in the user's directory"
        );
        assert_eq!(
            std::fs::read(run.join("n.json")).unwrap(),
            planted,
            "the user's file is not replaced either"
        );
    }
}
