//! The Slurm controller seam: `sinfo` and `scontrol` with argument vectors and a hard
//! timeout (Invariant 3). No shell; a client that hangs is killed at its deadline.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use gpu_affinity::health::drain::Action;
use gpu_affinity::health::parse::{NodeRow, SINFO_FORMAT, sinfo_rows};

/// Slurm clients retry for minutes against a dead controller; a health pass must not.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where Slurm's clients usually are, when `[slurm] bin_dir` is unset (clouds.md: /usr,
/// /usr/local, /opt/slurm prefixes).
const PREFIXES: [&str; 3] = ["/usr/bin", "/usr/local/bin", "/opt/slurm/bin"];

pub struct Slurm {
    bin_dir: Option<PathBuf>,
    /// `[slurm] conf`, given to the clients as `SLURM_CONF`. slurmd runs
    /// HealthCheckProgram with only `SLURMD_NODENAME` in its environment (no PATH, no
    /// SLURM_CONF; measured on 22.05), so a slurm.conf outside the clients' default is
    /// found only through this key.
    conf: Option<PathBuf>,
    timeout: Duration,
}

impl Slurm {
    pub fn new(bin_dir: Option<PathBuf>, conf: Option<PathBuf>) -> Slurm {
        Slurm {
            bin_dir,
            conf,
            timeout: CLIENT_TIMEOUT,
        }
    }

    fn program(&self, name: &str) -> PathBuf {
        match &self.bin_dir {
            Some(d) => d.join(name),
            None => PREFIXES
                .iter()
                .map(|p| Path::new(p).join(name))
                .find(|p| p.exists())
                .unwrap_or_else(|| PathBuf::from(name)),
        }
    }

    /// Run `name args`, killed after the timeout. Stdout on exit status 0.
    pub fn run(&self, name: &str, args: &[&str]) -> Result<String, String> {
        let program = self.program(name);
        let mut cmd = Command::new(&program);
        if let Some(conf) = &self.conf {
            cmd.env("SLURM_CONF", conf);
        }
        let mut child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", program.display()))?;
        // Drain the pipes in threads so a chatty client cannot block on a full pipe.
        let mut out = child.stdout.take();
        let mut err = child.stderr.take();
        let out_reader = thread::spawn(move || {
            let mut s = String::new();
            if let Some(o) = out.as_mut() {
                let _ = o.take(1 << 22).read_to_string(&mut s);
            }
            s
        });
        let err_reader = thread::spawn(move || {
            let mut s = String::new();
            if let Some(e) = err.as_mut() {
                let _ = e.take(1 << 16).read_to_string(&mut s);
            }
            s
        });
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{name} did not finish within {} ms (killed)",
                        self.timeout.as_millis()
                    ));
                }
                Ok(None) => thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(format!("{name}: {e}")),
            }
        };
        let stdout = out_reader.join().unwrap_or_default();
        let stderr = err_reader.join().unwrap_or_default();
        if status.success() {
            Ok(stdout)
        } else {
            Err(format!("{name} {}: {}", status, stderr.trim()))
        }
    }

    /// Every node of every partition: one bounded sinfo call gives this node's state and
    /// reason, its gres, and the circuit breaker's counts.
    pub fn rows(&self) -> Result<Vec<NodeRow>, String> {
        self.run("sinfo", &["-h", "-N", "-o", SINFO_FORMAT])
            .map(|t| sinfo_rows(&t))
    }

    /// Carry out a decision.
    pub fn apply(&self, node: &str, action: &Action) -> Result<(), String> {
        let nodename = format!("nodename={node}");
        match action {
            Action::Set { state, reason } => {
                let state = format!("state={state}");
                let reason = format!("reason={reason}");
                self.run("scontrol", &["update", &nodename, &state, &reason])
                    .map(|_| ())
            }
            Action::Resume => self
                .run("scontrol", &["update", &nodename, "state=resume"])
                .map(|_| ()),
            Action::Leave(_) | Action::HeldBack(_) => Ok(()),
        }
    }
}
