//! The active tests' runner: `[active] dcgmi` (`dcgmi diag -r LEVEL -j`) and
//! `[active] all_reduce_perf`, each a root-owned absolute program run with an argument
//! vector (no shell), in its own process group, killed with the group at its bound. The
//! output is parsed by core (`gpu_affinity::health::active`).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use gpu_affinity::health::active::{self, AllReduce, DcgmDiag, MAX_OUTPUT};
use gpu_affinity::health::{Gap, Gathered};

use crate::bounded;

/// Which program runs the active tests now, and whether the node may take them: the health
/// program only on an idle node (no job to disturb), the prolog only when asked.
pub fn allowed(in_prolog: bool, prolog: bool, node_state: Option<&str>) -> Result<(), String> {
    if prolog {
        return if in_prolog {
            Ok(())
        } else {
            Err("the prolog runs them only with [active] in_prolog = true".into())
        };
    }
    match node_state {
        // `idle`, `idle*`, `drained` (a drained node without jobs): nothing to disturb.
        Some(s) if s.starts_with("idle") || s.starts_with("drained") => Ok(()),
        Some(s) => Err(format!("node is {s}, not idle")),
        None => Err("node state unknown (sinfo): not run".into()),
    }
}

/// `dcgmi diag -r LEVEL -j`, parsed. dcgmi exits non-zero when a test fails, with the
/// JSON on stdout all the same: the output decides, the status only explains a silence.
pub fn dcgm_diag(program: &Path, level: u8, bound: Duration, owner: u32) -> Gathered<DcgmDiag> {
    let level = level.to_string();
    let out = run(program, &["diag", "-r", &level, "-j"], bound, owner)?;
    active::dcgm_diag(&out.stdout).map_err(|e| Gap::Failed(out.explain(&e.to_string())))
}

/// `all_reduce_perf -b 1G -e 1G -g GPUS`: one size, large enough to reach the bus
/// bandwidth, across the node's GPUs in one process.
pub fn all_reduce(program: &Path, gpus: u32, bound: Duration, owner: u32) -> Gathered<AllReduce> {
    let gpus = gpus.max(1).to_string();
    let args = ["-b", "1G", "-e", "1G", "-g", &gpus];
    let out = run(program, &args, bound, owner)?;
    active::all_reduce(&out.stdout).map_err(|e| Gap::Failed(out.explain(&e.to_string())))
}

struct Output {
    stdout: String,
    status: String,
    stderr: String,
}

impl Output {
    /// `why` with the exit status and stderr's last line, one line.
    fn explain(&self, why: &str) -> String {
        bounded::explain(why, &self.status, &self.stderr)
    }
}

/// Run `program args` under `bound`; a program that is missing, not root's or writable
/// by others never runs.
fn run(program: &Path, args: &[&str], bound: Duration, owner: u32) -> Result<Output, Gap> {
    let shown = program.display().to_string();
    bounded::trusted_program(program, "active test", owner).map_err(Gap::Failed)?;
    let mut child = bounded::root_command(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: the bound kills what it started too (dcgmi's helpers, MPI ranks).
        .process_group(0)
        .spawn()
        .map_err(|e| Gap::Failed(format!("{shown}: {e}")))?;
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let out_reader = thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.take(MAX_OUTPUT as u64).read_to_end(&mut b);
        }
        String::from_utf8_lossy(&b).into_owned()
    });
    let err_reader = thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.take(1 << 16).read_to_end(&mut b);
        }
        String::from_utf8_lossy(&b).into_owned()
    });
    let deadline = Instant::now() + bound;
    let pid = libc::pid_t::try_from(child.id()).unwrap_or(0);
    // Poll without reaping (WNOWAIT): while the leader is unreaped its pid, so its group
    // id, cannot be reused, and the group kill below can reach no other process.
    loop {
        if exited(pid) {
            break;
        }
        if Instant::now() >= deadline {
            kill_group(pid);
            let _ = child.kill();
            let _ = child.wait();
            return Err(Gap::Timeout {
                after_ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
            });
        }
        thread::sleep(Duration::from_millis(20));
    }
    // A helper left running may hold the pipes open: end the group, then reap and read.
    kill_group(pid);
    let status = child
        .wait()
        .map_err(|e| Gap::Failed(format!("{shown}: {e}")))?;
    Ok(Output {
        stdout: out_reader.join().unwrap_or_default(),
        status: status.to_string(),
        stderr: err_reader.join().unwrap_or_default(),
    })
}

/// Whether the child `pid` has exited, leaving it unreaped; an error counts as exited
/// (the wait after it reports the status).
// waitid(2) with WNOWAIT (peek without reaping) has no std wrapper.
#[allow(unsafe_code)]
fn exited(pid: libc::pid_t) -> bool {
    if pid <= 1 {
        return true;
    }
    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid(2).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only into `info`; WNOWAIT leaves the child waitable.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: after a successful waitid, si_pid is set (0 while the child runs).
    rc != 0 || unsafe { info.si_pid() } != 0
}

/// SIGKILL to the group `pid` leads (`process_group(0)`); called only while the leader
/// is unreaped, so the group id is still its own.
// kill(2) of a process group: std only kills the child itself.
#[allow(unsafe_code)]
fn kill_group(pid: libc::pid_t) {
    if pid > 1 {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::allowed;

    #[test]
    fn only_where_the_admin_puts_them() {
        // The health program: an idle or drained node, never one running a job.
        assert_eq!(allowed(false, false, Some("idle")), Ok(()));
        assert_eq!(allowed(false, false, Some("drained")), Ok(()));
        assert_eq!(
            allowed(false, false, Some("mixed")),
            Err("node is mixed, not idle".into())
        );
        assert!(allowed(false, false, Some("draining")).is_err());
        assert!(allowed(true, false, None).is_err());
        // The prolog: only when asked, whatever sinfo says.
        assert!(allowed(false, true, Some("idle")).is_err());
        assert_eq!(allowed(true, true, Some("allocated")), Ok(()));
    }
}
