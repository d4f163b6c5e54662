//! Hard bounds (Invariant 4): every reader runs in its own thread and is waited for until a
//! deadline; a thread stuck in a driver or filesystem call is abandoned, its input becomes
//! `Gap::Timeout`, and the process still ends on time because the binaries leave through
//! `std::process::exit` (which takes every thread down) and a watchdog ends the process at
//! the overall deadline whatever the main thread is doing.
//!
//! External programs (Slurm's clients here, `slurmd -V` and lstopo in the admin CLI) run
//! through [`run`]: their output read while they run, killed at their deadline.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gpu_affinity::health::{Gap, Gathered};

/// A reader started in the background; [`Pending::wait`] collects it by a deadline.
pub struct Pending<T> {
    rx: mpsc::Receiver<Gathered<T>>,
    bound: Duration,
    started: Instant,
}

/// Start `read` now; it may run at most `bound` (measured from now).
pub fn start<T: Send + 'static>(
    bound: Duration,
    read: impl FnOnce() -> Gathered<T> + Send + 'static,
) -> Pending<T> {
    let (tx, rx) = mpsc::channel();
    let spawned = thread::Builder::new()
        .name("health-reader".into())
        .spawn(move || {
            // The receiver may be gone (deadline passed): nothing to do then.
            let _ = tx.send(read());
        });
    if let Err(e) = spawned {
        let (tx, rx2) = mpsc::channel();
        let _ = tx.send(Err(Gap::Failed(format!("cannot start reader thread: {e}"))));
        return Pending {
            rx: rx2,
            bound,
            started: Instant::now(),
        };
    }
    Pending {
        rx,
        bound,
        started: Instant::now(),
    }
}

impl<T> Pending<T> {
    pub fn wait(self) -> Gathered<T> {
        let left = self.bound.saturating_sub(self.started.elapsed());
        match self.rx.recv_timeout(left) {
            Ok(v) => v,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Gap::Timeout {
                after_ms: self.bound.as_millis() as u64,
            }),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(Gap::Failed("reader thread ended without an answer".into()))
            }
        }
    }
}

/// Run `read` with a bound, waiting for it now.
pub fn within<T: Send + 'static>(
    bound: Duration,
    read: impl FnOnce() -> Gathered<T> + Send + 'static,
) -> Gathered<T> {
    start(bound, read).wait()
}

/// Time the watchdog grants on top of its deadline: what the active tests announced they
/// may take (each under its own bound) before they started.
static EXTRA_MS: AtomicU64 = AtomicU64::new(0);

/// Give the watchdog `by` more before it ends the process (an active test about to run
/// under that bound).
pub fn extend_watchdog(by: Duration) {
    let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
    EXTRA_MS.fetch_add(ms, Ordering::SeqCst);
}

/// End the process with `code` at `deadline` from now (plus what [`extend_watchdog`]
/// granted), whatever else is running: the last line of defence should a bounded call
/// still overrun (a bug), so a prolog never hangs.
pub fn watchdog(deadline: Duration, program: &'static str, code: i32) {
    let _ = thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            thread::sleep(deadline);
            loop {
                let extra = EXTRA_MS.swap(0, Ordering::SeqCst);
                if extra == 0 {
                    break;
                }
                thread::sleep(Duration::from_millis(extra));
            }
            eprintln!(
                "{program}: overall deadline of {} ms passed; exiting",
                deadline.as_millis()
            );
            std::process::exit(code);
        });
}

/// What [`run`] keeps of a program's output: at most `stdout` and `stderr` bytes each
/// (0: none). The rest is read and dropped, so a chatty program never blocks on a full
/// pipe.
#[derive(Clone, Copy, Debug)]
pub struct Keep {
    pub stdout: usize,
    pub stderr: usize,
}

/// A program that ran to its end within its bound, whatever its exit status.
#[derive(Debug)]
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// It wrote more to stdout than [`Keep::stdout`]: `stdout` is cut short.
    pub stdout_cut: bool,
}

/// Why [`run`] has no [`Ran`]. Each names the program as the caller called it.
#[derive(Debug)]
pub enum RunError {
    /// It could not start (not there, not executable).
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// It was still running (or still writing) at its deadline, and was killed.
    Timeout { program: String, after: Duration },
    /// Waiting for it failed.
    Wait {
        program: String,
        source: std::io::Error,
    },
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Spawn { program, source } => write!(f, "cannot run {program}: {source}"),
            RunError::Timeout { program, after } => write!(
                f,
                "{program} did not finish within {} ms (killed)",
                after.as_millis()
            ),
            RunError::Wait { program, source } => write!(f, "{program}: {source}"),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Spawn { source, .. } | RunError::Wait { source, .. } => Some(source),
            RunError::Timeout { .. } => None,
        }
    }
}

/// How often [`run`] looks whether the program has ended.
const POLL: Duration = Duration::from_millis(5);

/// Run `cmd` (no shell: its argument vector as given) with stdin empty, reading its
/// stdout and stderr while it runs, and kill it at `timeout`. `program` names it in
/// errors (`sinfo`, `/usr/sbin/slurmd -V`). A grandchild that keeps the pipes open past
/// the deadline does not hold the caller: its output is abandoned as a timeout.
pub fn run(
    cmd: &mut Command,
    program: &str,
    timeout: Duration,
    keep: Keep,
) -> Result<Ran, RunError> {
    run_with_input(cmd, program, timeout, keep, None)
}

/// [`run`], with `input` written to the program's stdin (then closed) where given: what
/// must not be in an argument vector (a token, curl's `--config -`), since
/// /proc/PID/cmdline is world-readable. A thread writes it, so a program that never
/// reads its stdin costs its bound, never a hang.
pub fn run_with_input(
    cmd: &mut Command,
    program: &str,
    timeout: Duration,
    keep: Keep,
    input: Option<Vec<u8>>,
) -> Result<Ran, RunError> {
    let deadline = Instant::now() + timeout;
    let stdin = if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    let mut child = cmd
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| RunError::Spawn {
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    if let (Some(bytes), Some(mut pipe)) = (input, child.stdin.take()) {
        // A program that exits or stops reading ends the write with an error: nothing to do.
        let _ = thread::Builder::new()
            .name("program-input".into())
            .spawn(move || {
                let _ = std::io::Write::write_all(&mut pipe, &bytes);
            });
    }
    let stdout = drain(child.stdout.take(), keep.stdout);
    let stderr = drain(child.stderr.take(), keep.stderr);
    let timed_out = || RunError::Timeout {
        program: program.to_string(),
        after: timeout,
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(timed_out());
            }
            Ok(None) => thread::sleep(POLL),
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::Wait {
                    program: program.to_string(),
                    source,
                });
            }
        }
    };
    let left = || deadline.saturating_duration_since(Instant::now());
    let (stdout, stdout_cut) = stdout.recv_timeout(left()).map_err(|_| timed_out())?;
    let (stderr, _) = stderr.recv_timeout(left()).map_err(|_| timed_out())?;
    Ok(Ran {
        status,
        stdout,
        stderr,
        stdout_cut,
    })
}

/// Read `pipe` to its end in a thread, keeping its first `keep` bytes (as text, invalid
/// UTF-8 replaced) and whether there was more.
fn drain<R: Read + Send + 'static>(pipe: Option<R>, keep: usize) -> mpsc::Receiver<(String, bool)> {
    let (tx, rx) = mpsc::channel();
    let spawned = thread::Builder::new()
        .name("program-output".into())
        .spawn(move || {
            let mut kept = Vec::new();
            let mut more = false;
            if let Some(mut pipe) = pipe {
                let cap = u64::try_from(keep).unwrap_or(u64::MAX);
                let _ = pipe.by_ref().take(cap).read_to_end(&mut kept);
                more = std::io::copy(&mut pipe, &mut std::io::sink()).is_ok_and(|n| n > 0);
            }
            // The receiver may be gone (the deadline passed): nothing to do then.
            let _ = tx.send((String::from_utf8_lossy(&kept).into_owned(), more));
        });
    if spawned.is_err() {
        // No thread to read with: the output counts as missing, the run as timed out.
        let (_, rx) = mpsc::channel();
        return rx;
    }
    rx
}

/// `program` may run as root: an executable file, `owner`'s, not writable by group or
/// others (`what` names it in the error). The active tests', IMEX's and curl's check.
pub fn trusted_program(program: &Path, what: &str, owner: u32) -> Result<(), String> {
    let shown = program.display();
    let meta = std::fs::metadata(program).map_err(|e| format!("{shown}: {e}"))?;
    gpu_affinity::trust::check_trusted(&meta, what, program, owner).map_err(|e| e.to_string())?;
    if !meta.is_file() || meta.mode() & 0o111 == 0 {
        return Err(format!("{shown}: not an executable file"));
    }
    Ok(())
}

/// A command for a program root runs on the admin's word: nothing of the job's or
/// slurmd's environment steers it (the program finds its libraries by its rpath or
/// ld.so.conf).
pub fn root_command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    cmd
}

/// `why`, explained by the exit status and the last line the program wrote to stderr,
/// as one line.
pub fn explain(why: &str, status: &dyn std::fmt::Display, stderr: &str) -> String {
    let text = match stderr.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(l) => format!("{why} ({status}; {})", l.trim()),
        None => format!("{why} ({status})"),
    };
    gpu_affinity::text::one_line(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_reader_times_out_on_time() {
        let t = Instant::now();
        let r: Gathered<u32> = within(Duration::from_millis(100), || {
            thread::sleep(Duration::from_secs(3600));
            Ok(1)
        });
        assert_eq!(r, Err(Gap::Timeout { after_ms: 100 }));
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(within(Duration::from_secs(5), || Ok(7)), Ok(7));
    }

    const KEEP: Keep = Keep {
        stdout: 1 << 20,
        stderr: 1 << 10,
    };

    /// `sh -c SCRIPT`, named `name`, bounded by `ms`.
    fn sh(script: &str, name: &str, ms: u64) -> Result<Ran, RunError> {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        run(&mut c, name, Duration::from_millis(ms), KEEP)
    }

    #[test]
    fn a_program_is_read_to_its_end() {
        let ran = sh("echo out; echo err >&2; exit 3", "sh", 10_000).expect("ran");
        assert_eq!(
            (ran.stdout.as_str(), ran.stderr.as_str()),
            ("out\n", "err\n")
        );
        assert_eq!(ran.status.code(), Some(3));
        assert!(!ran.stdout_cut);
    }

    /// Far more than a pipe holds (64 KiB on Linux): read while it runs, so it ends at
    /// once instead of blocking until its deadline; what is past the cap is dropped.
    #[test]
    fn a_program_filling_its_pipes_does_not_block() {
        let t = Instant::now();
        let ran = sh(
            "head -c 4000000 /dev/zero; head -c 4000000 /dev/zero >&2",
            "sh",
            20_000,
        )
        .expect("ran");
        assert!(ran.status.success());
        assert_eq!((ran.stdout.len(), ran.stderr.len()), (1 << 20, 1 << 10));
        assert!(ran.stdout_cut);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn a_hung_program_is_killed_at_its_deadline() {
        let t = Instant::now();
        let e = sh("exec sleep 3600", "sleeper", 200).expect_err("killed");
        assert!(matches!(e, RunError::Timeout { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "sleeper did not finish within 200 ms (killed)"
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        // A grandchild holding the pipes after its parent ends is no reason to wait on.
        let t = Instant::now();
        let e = sh("sleep 5 & echo started", "forker", 300).expect_err("output still open");
        assert!(matches!(e, RunError::Timeout { .. }), "{e:?}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn input_goes_to_stdin_and_a_program_not_reading_it_is_still_bounded() {
        let mut c = Command::new("/bin/cat");
        let ran = run_with_input(
            &mut c,
            "cat",
            Duration::from_secs(10),
            KEEP,
            Some(b"secret\n".to_vec()),
        )
        .expect("ran");
        assert_eq!(ran.stdout, "secret\n");
        // Far more than a pipe holds, to a program that never reads: its bound, no hang.
        let t = Instant::now();
        let mut c = Command::new("/bin/sleep");
        c.arg("3600");
        let e = run_with_input(
            &mut c,
            "sleep",
            Duration::from_millis(300),
            KEEP,
            Some(vec![b'x'; 4 << 20]),
        )
        .expect_err("killed");
        assert!(matches!(e, RunError::Timeout { .. }), "{e:?}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_missing_program_is_named() {
        let e = run(
            &mut Command::new("/nonexistent/sinfo"),
            "sinfo",
            Duration::from_secs(1),
            KEEP,
        )
        .expect_err("missing");
        assert!(matches!(e, RunError::Spawn { .. }), "{e:?}");
        assert!(
            e.to_string().starts_with("cannot run /nonexistent/sinfo: "),
            "{e}"
        );
    }
}
