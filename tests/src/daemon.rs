//! A background daemon (munged, slurmctld, slurmd) owned by the harness and stopped by PID.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::error::{Context, Result};

/// How long a daemon gets to exit after SIGTERM before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

pub struct Daemon {
    name: String,
    child: Child,
}

/// How a daemon ended when asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It had already exited before we asked.
    AlreadyExited,
    /// It exited after SIGTERM.
    Terminated,
    /// It ignored SIGTERM for the grace period and was killed.
    Killed,
}

impl Daemon {
    /// Start `cmd` with stdout and stderr appended to `log`.
    ///
    /// The daemon gets SIGTERM if the thread that started it dies, so a test process
    /// killed by a time-out does not leave slurmctld holding its ports.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .context(|| format!("open {name} log {}", log.display()))?;
        let err = out.try_clone().context(|| format!("dup {name} log"))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: the closure runs between fork and exec and only calls prctl(2), which is
        // async-signal-safe; it touches no memory shared with the parent.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .spawn()
            .context(|| format!("start {name} ({:?})", cmd.get_program()))?;
        Ok(Self {
            name: name.to_owned(),
            child,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL; always reaps the child.
    pub fn stop(&mut self, grace: Duration) -> Stopped {
        if !self.is_running() {
            return Stopped::AlreadyExited;
        }
        let pid = Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX));
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_running() {
                return Stopped::Terminated;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = kill(pid, Signal::SIGKILL);
        let _ = self.child.wait();
        Stopped::Killed
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop(STOP_GRACE);
    }
}
