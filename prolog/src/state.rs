//! Root-owned state between passes (link counters, clean passes) and the run lock.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpu_affinity::health::PassState;
use gpu_affinity::trust::{ROOT, read_trusted_text};

pub const DEFAULT_STATE_DIR: &str = "/var/lib/gpu-affinity";
const STATE_FILE: &str = "health-state.json";
const LOCK_FILE: &str = "health.lock";

pub fn ensure_dir(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("state dir {}: {e}", dir.display()))
}

/// The state the previous pass left; a missing, unreadable or untrusted file starts afresh
/// (the only loss is the link-flap history and the clean-pass count).
pub fn load(dir: &Path, owner: u32) -> PassState {
    let path = dir.join(STATE_FILE);
    match read_trusted_text(&path, "health state", owner, 1 << 20) {
        Ok(text) => serde_json::from_str(&text).unwrap_or_default(),
        Err(_) => PassState::default(),
    }
}

/// Write atomically (temp file in the same dir + rename), mode 0600.
pub fn save(dir: &Path, state: &PassState) -> Result<(), String> {
    let path = dir.join(STATE_FILE);
    let text = serde_json::to_string(state).map_err(|e| e.to_string())?;
    write_atomic(&path, text.as_bytes(), 0o600)
}

pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    // Core's one writer, its temp file a dot file beside the target, so collectors that
    // read `*.prom` never see the half-written file.
    let dir = path.parent().unwrap_or(Path::new("."));
    gpu_affinity::atomic::write_file(path, dir, bytes, mode).map_err(|e| e.to_string())
}

/// Held for the whole run; released when dropped (or when the process exits).
pub struct RunLock {
    _file: File,
}

/// Take the lock, waiting at most `wait` for another run to finish. `Err` says who holds it.
pub fn lock(dir: &Path, wait: Duration) -> Result<RunLock, String> {
    let path: PathBuf = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("lock {}: {e}", path.display()))?;
    let started = Instant::now();
    loop {
        // SAFETY: flock on a descriptor this function owns.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(RunLock { _file: file });
        }
        if started.elapsed() >= wait {
            return Err(format!(
                "another gpu-affinity health run holds {} (waited {} ms)",
                path.display(),
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
