//! Root-owned state between passes (link counters, clean passes, job kmsg marks) and the
//! run lock, all through one handle on the state dir that core's `safe_dir` walked and
//! trust-checked (root's, not group/other-writable, no symlink on the way).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use gpu_affinity::health::PassState;
use gpu_affinity::safe_dir::{self, Rule, SafeDir};
use gpu_affinity::trust::ROOT;

pub const DEFAULT_STATE_DIR: &str = "/var/lib/gpu-affinity";
const STATE_FILE: &str = "health-state.json";
const LOCK_FILE: &str = "health.lock";

/// The state dir, made 0700 when absent, refused (one line naming the path) when it or a
/// directory on the way is a symlink or something another user could change.
pub fn open_dir(dir: &Path) -> Result<SafeDir, String> {
    safe_dir::open(dir, "state dir", Rule::Trusted, owner(), Some(0o700)).map_err(|e| e.to_string())
}

/// The state the previous pass left; a missing, unreadable or foreign file starts afresh
/// (the only loss is the link-flap history, the clean-pass count and the jobs' marks).
pub fn load(dir: &SafeDir) -> PassState {
    match dir.read(STATE_FILE, PassState::MAX_BYTES as u64) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).unwrap_or_default(),
        _ => PassState::default(),
    }
}

/// Replace the state file atomically, mode 0600.
pub fn save(dir: &SafeDir, state: &PassState) -> Result<(), String> {
    let text = serde_json::to_string(state).map_err(|e| e.to_string())?;
    dir.replace(STATE_FILE, text.as_bytes(), 0o600)
}

/// A file root writes where others read it (the textfile): its directory trust-checked
/// and held, the file replaced through the handle.
pub fn write_output(path: &Path, what: &str, bytes: &[u8], mode: u32) -> Result<(), String> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return Err(format!("{what} {} names no file", path.display()));
    };
    let dir = safe_dir::open(parent, &format!("{what} dir"), Rule::Trusted, owner(), None)
        .map_err(|e| e.to_string())?;
    dir.replace(name, bytes, mode)
}

/// Held for the whole run; released when dropped (or when the process exits).
pub struct RunLock {
    _file: File,
}

/// Take the lock, waiting at most `wait` for another run to finish. The lock file is
/// opened O_NONBLOCK | O_NOFOLLOW through the dir handle, must be a regular file of
/// root's and is kept 0600, so a FIFO or another user's open cannot hold a pass. `Err`
/// says why; the caller then runs without the shared state, never "healthy" by default.
// flock(2) has no safe std wrapper on the Rust this workspace promises (1.85).
#[allow(unsafe_code)]
pub fn lock(dir: &SafeDir, wait: Duration) -> Result<RunLock, String> {
    let file = dir
        .lock_file(LOCK_FILE, owner())
        .map_err(|e| format!("lock {e}"))?;
    let started = Instant::now();
    loop {
        // SAFETY: flock on a descriptor this function owns.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(RunLock { _file: file });
        }
        if started.elapsed() >= wait {
            return Err(format!(
                "another process holds {} (waited {} ms)",
                dir.path().join(LOCK_FILE).display(),
                wait.as_millis()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The owner a trusted state file must have: root outside tests.
pub fn owner() -> u32 {
    ROOT
}
