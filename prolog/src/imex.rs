//! `[fabric] imex_ctl`: `nvidia-imex-ctl -q` (this node's IMEX daemon), then, when the
//! daemon is READY, `nvidia-imex-ctl -N -j` (the domain), each a root-owned absolute
//! program run with an argument vector (no shell) through [`bounded::run`], killed at its
//! bound. Parsed and judged by core (`gpu_affinity::health::imex`); every way this can
//! fail is a `Gap` with one line saying why, which the check reports as a skip.

use std::path::Path;
use std::time::Duration;

use gpu_affinity::health::imex::{self, DaemonState, Imex, ImexError};
use gpu_affinity::health::{Gap, Gathered};

use crate::bounded::{self, Keep, RunError};

/// Output kept of each command: a domain's JSON is about 1 KiB a member.
const KEEP: Keep = Keep {
    stdout: 1 << 20,
    stderr: 1 << 12,
};

/// Read the daemon's state and, once it is READY, the domain; each command under `each`.
pub fn read_imex(program: &Path, each: Duration, owner: u32) -> Gathered<Imex> {
    bounded::trusted_program(program, "IMEX control program", owner).map_err(Gap::Failed)?;
    let daemon = ask(program, &["-q"], each, imex::daemon_state)?;
    let domain = match daemon {
        DaemonState::Ready => Some(ask(program, &["-N", "-j"], each, imex::domain)?),
        _ => None,
    };
    Ok(Imex { daemon, domain })
}

/// Run `program args` and parse what it printed. The output decides, whatever the exit
/// status (nvidia-imex-ctl exits 255 when the node list is missing, and says so); the
/// status and stderr's last line only explain output that says nothing.
fn ask<T>(
    program: &Path,
    args: &[&str],
    bound: Duration,
    parse: fn(&str) -> Result<T, ImexError>,
) -> Gathered<T> {
    let named = format!("{} {}", program.display(), args.join(" "));
    let mut cmd = bounded::root_command(program);
    cmd.args(args);
    let ran = bounded::run(&mut cmd, &named, bound, KEEP).map_err(|e| match e {
        RunError::Timeout { after, .. } => Gap::Timeout {
            after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
        },
        other => Gap::Failed(gpu_affinity::text::one_line(&other.to_string()).into_owned()),
    })?;
    // The not-configured message may come on either stream.
    if ran.stdout.contains(imex::NOT_CONFIGURED) || ran.stderr.contains(imex::NOT_CONFIGURED) {
        return Err(Gap::Failed(ImexError::NotConfigured.to_string()));
    }
    let explain = |why: String| Gap::Failed(bounded::explain(&why, &ran.status, &ran.stderr));
    if ran.stdout.trim().is_empty() {
        return Err(explain(format!("{named} printed nothing")));
    }
    parse(&ran.stdout).map_err(|e| explain(e.to_string()))
}
