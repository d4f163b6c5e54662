//! One Slurm cluster at a time per machine, across test processes.
//!
//! nextest runs every test in its own process, so an in-process mutex cannot keep two
//! clusters from starting together. Two clusters would not clash (ports and directories
//! are private), but on a 2-core CI machine they would slow each other's daemons into
//! time-outs; an advisory `flock` on a well-known file serialises them instead.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};

use crate::error::{Context, Result};

/// Held while a cluster runs; released on drop (or when the process dies).
pub struct ClusterLock {
    _lock: Flock<File>,
}

/// The lock file: `$GPU_AFFINITY_TESTS_LOCK`, else `gpu-affinity-tests.lock` in the temp dir.
pub fn lock_path() -> PathBuf {
    std::env::var_os("GPU_AFFINITY_TESTS_LOCK")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("gpu-affinity-tests.lock"))
}

impl ClusterLock {
    /// Block until no other harness cluster runs on this machine.
    pub fn acquire() -> Result<Self> {
        let path = lock_path();
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .context(|| format!("open cluster lock {}", path.display()))?;
        let lock = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .context(|| format!("lock {}", path.display()))?;
        Ok(Self { _lock: lock })
    }
}
