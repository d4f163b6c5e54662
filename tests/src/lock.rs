//! One Slurm cluster at a time per machine, across test processes.
//!
//! nextest runs every test in its own process, so an in-process mutex cannot keep two
//! clusters from starting together. Two clusters would not clash (ports and directories
//! are private), but on a 2-core CI machine they would slow each other's daemons into
//! time-outs; an advisory `flock` on a well-known file serialises them instead.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::{Context, HarnessError, Result};

/// How long a test waits for another run's cluster before it fails saying so: longer
/// than a whole real-Slurm suite, so only a stuck holder trips it.
const LOCK_WAIT: Duration = Duration::from_secs(600);

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
        let deadline = Instant::now() + LOCK_WAIT;
        let mut file = file;
        let lock = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => break lock,
                Err((f, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                    file = f;
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(HarnessError(format!(
                        "another test run held the cluster lock {} for more than {LOCK_WAIT:?}",
                        path.display()
                    )));
                }
                Err((_, e)) => return Err(e).context(|| format!("lock {}", path.display())),
            }
        };
        Ok(Self { _lock: lock })
    }
}
