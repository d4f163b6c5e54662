//! The Slurm controller seam: `sinfo` and `scontrol` with argument vectors and a hard
//! timeout (Invariant 3). No shell; a client that hangs is killed at its deadline.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gpu_affinity::health::drain::Action;
use gpu_affinity::health::parse::{NodeRow, SINFO_FORMAT, sinfo_rows};

use crate::bounded::{self, Keep};

/// Slurm clients retry for minutes against a dead controller; a health pass must not.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a client's answer may hold: sinfo's rows for some 40,000 nodes; its error text.
const CLIENT_OUTPUT: Keep = Keep {
    stdout: 1 << 22,
    stderr: 1 << 16,
};

/// Where Slurm's clients usually are (clouds.md: /usr, /usr/local, /opt/slurm prefixes):
/// looked at only when no slurmd says which install is running.
const PREFIXES: [&str; 3] = ["/usr/bin", "/usr/local/bin", "/opt/slurm/bin"];

/// The daemons whose install names the running Slurm: the prolog's and health program's
/// parent is slurmd (or slurmstepd, which runs the prolog under PrologFlags=Contain).
/// Debian and Ubuntu install them as `slurmd-wlm` and `slurmstepd-wlm` behind
/// alternatives links, and /proc/PID/exe names the real file (measured on 22.05).
const DAEMONS: [&str; 4] = ["slurmd", "slurmstepd", "slurmd-wlm", "slurmstepd-wlm"];

/// How far up the process tree the parent daemon is looked for.
const MAX_ANCESTORS: usize = 8;

pub struct Slurm {
    /// The clients' directory: `[slurm] bin_dir`, else the running slurmd's install
    /// ([`running_clients`]); an error says why neither named one.
    /// With how it was found when that was a fallback (for the log).
    bin_dir: Result<(PathBuf, Fallback), String>,
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
            bin_dir: bin_dir.map_or_else(|| running_clients(Path::new("/proc")), |d| Ok((d, None))),
            conf,
            timeout: CLIENT_TIMEOUT,
        }
    }

    /// The directory whose clients this pass runs (for the log), or why there is none.
    pub fn bin_dir(&self) -> Result<&Path, &str> {
        match &self.bin_dir {
            Ok((dir, _)) => Ok(dir),
            Err(why) => Err(why),
        }
    }

    /// How the clients' directory was found, when not from `[slurm] bin_dir` or this
    /// process's parent daemon.
    pub fn fallback(&self) -> Option<&str> {
        self.bin_dir.as_ref().ok()?.1.as_deref()
    }

    fn program(&self, name: &str) -> Result<PathBuf, String> {
        self.bin_dir
            .as_ref()
            .map(|(d, _)| d.join(name))
            .map_err(Clone::clone)
    }

    /// Run `name args`, killed after the timeout. Stdout on exit status 0.
    pub fn run(&self, name: &str, args: &[&str]) -> Result<String, String> {
        let program = self.program(name)?;
        let mut cmd = Command::new(&program);
        if let Some(conf) = &self.conf {
            cmd.env("SLURM_CONF", conf);
        }
        cmd.args(args);
        let ran =
            bounded::run(&mut cmd, name, self.timeout, CLIENT_OUTPUT).map_err(|e| e.to_string())?;
        if !ran.status.success() {
            Err(format!("{name} {}: {}", ran.status, ran.stderr.trim()))
        } else if ran.stdout_cut {
            // A cut answer would read as a cluster without its last nodes.
            Err(format!(
                "{name} wrote more than {} bytes",
                CLIENT_OUTPUT.stdout
            ))
        } else {
            Ok(ran.stdout)
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

/// Where the clients were found, when not from this process's own parent daemon: the
/// log says so, since a fallback is what can pick the wrong series.
pub type Fallback = Option<String>;

/// The clients of the Slurm that runs on this node, never merely the first install that
/// exists: a node image can carry a distro Slurm in /usr/bin beside /opt/slurm, and the
/// other series' clients cannot talk to this controller (22.05's sinfo against 25.11:
/// measured). In order: the install of the root-owned slurmd or slurmstepd among this
/// process's ancestors (its `sbin/` -> `bin/`), then that of the root-owned slurmds on
/// the node (a run by hand) when they all share one, then the one prefix of
/// [`PREFIXES`] holding `scontrol`. Several installs and no ancestor to choose is an
/// error naming them (`[slurm] bin_dir` settles it). `proc` is the procfs mount (a
/// fixture tree in tests).
pub fn running_clients(proc: &Path) -> Result<(PathBuf, Fallback), String> {
    let mut pid = std::process::id();
    for _ in 0..MAX_ANCESTORS {
        let Some(parent) = parent_pid(proc, pid) else {
            break;
        };
        if parent <= 1 {
            break;
        }
        if let Some(bin) = daemon_clients(proc, parent) {
            return Ok((bin, None));
        }
        pid = parent;
    }
    let mut running: Vec<PathBuf> = std::fs::read_dir(proc)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| daemon_clients(proc, pid))
        .collect();
    running.sort();
    running.dedup();
    match running.as_slice() {
        [one] => {
            return Ok((
                one.clone(),
                Some("no slurmd among this process's parents; the node's running slurmd".into()),
            ));
        }
        [] => {}
        several => {
            let names: Vec<String> = several.iter().map(|b| b.display().to_string()).collect();
            return Err(format!(
                "slurmds of several installs run on this node ({}) and none is this process's parent: set [slurm] bin_dir",
                names.join(" and ")
            ));
        }
    }
    let found: Vec<&str> = PREFIXES
        .iter()
        .copied()
        .filter(|p| is_executable(&Path::new(p).join("scontrol")))
        .collect();
    match found.as_slice() {
        [one] => Ok((
            PathBuf::from(one),
            Some("no running slurmd; the one install with scontrol".into()),
        )),
        [] => Err(format!(
            "no Slurm clients (scontrol) in {} and no running slurmd: set [slurm] bin_dir",
            PREFIXES.join(", ")
        )),
        several => Err(format!(
            "Slurm clients in {} and no running slurmd to say which series runs: set [slurm] bin_dir",
            several.join(" and ")
        )),
    }
}

/// `pid`'s parent, from `/proc/PID/stat` (the field after the `)` that ends the name,
/// which may itself hold spaces and parentheses).
fn parent_pid(proc: &Path, pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(proc.join(pid.to_string()).join("stat")).ok()?;
    parse_ppid(&stat)
}

/// The ppid field of a `/proc/PID/stat` line.
pub fn parse_ppid(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// When `pid` is a root-owned slurmd or slurmstepd: the `bin/` beside its `sbin/`, if
/// that holds scontrol.
fn daemon_clients(proc: &Path, pid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dir = proc.join(pid.to_string());
    // /proc/PID is owned by the process's effective uid: only root's daemons count.
    if std::fs::metadata(&dir).ok()?.uid() != 0 {
        return None;
    }
    let exe = std::fs::read_link(dir.join("exe")).ok()?;
    clients_beside(&exe)
}

/// `PREFIX/sbin/slurmd` (or slurmstepd, possibly replaced on disk since it started:
/// ` (deleted)`) -> `PREFIX/bin` when it holds scontrol.
pub fn clients_beside(exe: &Path) -> Option<PathBuf> {
    let text = exe.to_str()?;
    let exe = Path::new(text.strip_suffix(" (deleted)").unwrap_or(text));
    if !DAEMONS.contains(&exe.file_name()?.to_str()?) {
        return None;
    }
    let bin = exe.parent()?.parent()?.join("bin");
    is_executable(&bin.join("scontrol")).then_some(bin)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppid_is_read_past_a_name_with_spaces_and_parens() {
        assert_eq!(parse_ppid("4242 (a) b (c) S 17 4242 4242 0"), Some(17));
        assert_eq!(parse_ppid("1 (systemd) S 0 1 1"), Some(0));
        assert_eq!(parse_ppid("garbage"), None);
        assert_eq!(parse_ppid("5 (x) S notanumber"), None);
    }

    #[test]
    fn clients_come_from_the_daemons_own_prefix() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let prefix = tmp.path().join("opt/slurm");
        std::fs::create_dir_all(prefix.join("bin")).expect("mkdir");
        std::fs::create_dir_all(prefix.join("sbin")).expect("mkdir");
        let scontrol = prefix.join("bin/scontrol");
        std::fs::write(&scontrol, "#!/bin/sh\n").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let slurmd = prefix.join("sbin/slurmd");
        assert_eq!(clients_beside(&slurmd), Some(prefix.join("bin")));
        let replaced = PathBuf::from(format!(
            "{} (deleted)",
            prefix.join("sbin/slurmstepd").display()
        ));
        assert_eq!(clients_beside(&replaced), Some(prefix.join("bin")));
        // Debian's real file behind the alternatives link.
        assert_eq!(
            clients_beside(&prefix.join("sbin/slurmd-wlm")),
            Some(prefix.join("bin"))
        );
        // Not a Slurm daemon, or no clients beside it: no answer.
        assert_eq!(clients_beside(&prefix.join("sbin/sshd")), None);
        assert_eq!(clients_beside(Path::new("/nonexistent/sbin/slurmd")), None);
    }

    /// An install under `root` with `bin/scontrol`; its `sbin/`.
    fn install(root: &Path, prefix: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let prefix = root.join(prefix);
        std::fs::create_dir_all(prefix.join("bin")).expect("mkdir");
        std::fs::create_dir_all(prefix.join("sbin")).expect("mkdir");
        let scontrol = prefix.join("bin/scontrol");
        std::fs::write(&scontrol, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        prefix.join("sbin")
    }

    /// A fixture `/proc/PID` whose parent is `ppid` and whose exe is `exe`.
    fn process(proc: &Path, pid: u32, ppid: u32, exe: &Path) {
        let dir = proc.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (x) S {ppid} {pid} {pid} 0"),
        )
        .expect("stat");
        std::os::unix::fs::symlink(exe, dir.join("exe")).expect("exe");
    }

    /// A temp dir root owns, or `None` (and a SKIP line saying `why`) when the test does
    /// not run as root.
    fn root_tempdir(why: &str) -> Option<tempfile::TempDir> {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        if std::fs::metadata(tmp.path()).expect("tempdir").uid() != 0 {
            eprintln!("SKIP: {why}");
            return None;
        }
        Some(tmp)
    }

    #[test]
    fn the_parent_daemon_decides_and_a_scan_that_finds_two_series_refuses() {
        // /proc/PID counts only when root owns it, as on a real node.
        let Some(tmp) =
            root_tempdir("fixture /proc entries are root's only when the test runs as root")
        else {
            return;
        };
        let proc = tmp.path().join("proc");
        let opt = install(tmp.path(), "opt/slurm");
        let usr = install(tmp.path(), "usr");
        let sh = tmp.path().join("bin/sh");
        // One install's slurmd and slurmstepd, and none among our parents: that install.
        process(&proc, 100, 1, &opt.join("slurmd"));
        process(&proc, 101, 100, &opt.join("slurmstepd"));
        let (bin, how) = running_clients(&proc).expect("one install");
        assert_eq!(bin, tmp.path().join("opt/slurm/bin"));
        assert!(how.is_some_and(|h| h.contains("running slurmd")));
        // A second series' slurmd (a leftover from another test, a distro package): which
        // one is this node's is not knowable, so no guess.
        process(&proc, 200, 1, &usr.join("slurmd-wlm"));
        let err = running_clients(&proc).expect_err("two installs");
        assert!(
            err.contains("opt/slurm/bin") && err.contains("usr/bin") && err.contains("bin_dir"),
            "{err}"
        );
        // Our parent's parent is the second series' slurmd: that settles it.
        let me = std::process::id();
        process(&proc, 300, 200, &sh);
        std::fs::create_dir_all(proc.join(me.to_string())).expect("mkdir");
        std::fs::write(
            proc.join(me.to_string()).join("stat"),
            format!("{me} (prolog) S 300 1 1 0"),
        )
        .expect("stat");
        assert_eq!(
            running_clients(&proc),
            Ok((tmp.path().join("usr/bin"), None))
        );
    }

    #[test]
    fn a_job_users_own_slurmd_is_never_taken_for_the_nodes() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        use std::os::unix::process::CommandExt;
        // A user's prefix with `sbin/slurmd` (a copy of sleep) and `bin/scontrol`, in a
        // directory the user may run from; the user starts that slurmd.
        let Some(tmp) = root_tempdir("starting a process as another user needs root") else {
            return;
        };
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let sbin = install(tmp.path(), "evil");
        let fake = sbin.join("slurmd");
        std::fs::copy("/bin/sleep", &fake).expect("copy sleep");
        let mut child = std::process::Command::new(&fake)
            .arg("30")
            .uid(65534)
            .gid(65534)
            .spawn()
            .expect("spawn as nobody");
        let proc_dir = Path::new("/proc").join(child.id().to_string());
        // Its exe is read as soon as the exec is done; before that the scan could not
        // have taken it, and the test would prove nothing.
        let execed = || std::fs::read_link(proc_dir.join("exe")).is_ok_and(|e| e == fake);
        for _ in 0..500 {
            if execed() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            execed(),
            "the user's slurmd is running as {}",
            fake.display()
        );
        assert_eq!(std::fs::metadata(&proc_dir).expect("proc").uid(), 65534);
        assert_eq!(clients_beside(&fake), Some(tmp.path().join("evil/bin")));
        // Whatever else runs here (other tests' root slurmds, none), the user's is not it.
        let found = running_clients(Path::new("/proc"));
        let _ = child.kill();
        let _ = child.wait();
        let shown = format!("{found:?}");
        assert!(!shown.contains("evil"), "{shown}");
    }
}
