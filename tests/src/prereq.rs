//! What a machine needs before the harness can start a cluster, checked up front so a
//! missing piece fails with what to install instead of a time-out deep inside Slurm.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::harness_err;

/// Set to `1` on a development machine without Slurm to skip every real-Slurm test.
/// Each skipped test prints that it was skipped and why; CI never sets it.
pub const SKIP_ENV: &str = "GPU_AFFINITY_SKIP_SLURM_TESTS";

/// Directories searched for the daemons besides `$PATH` (sbin is often not on a
/// non-login root's PATH).
const EXTRA_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin"];

/// The Debian 12 packages that provide everything the harness runs.
pub const INSTALL_HINT: &str = "apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge \
     libslurm-dev libclang-dev hwloc";

/// Absolute paths of every program the harness runs.
#[derive(Debug, Clone)]
pub struct Programs {
    pub munged: PathBuf,
    pub mungekey: PathBuf,
    pub slurmctld: PathBuf,
    pub slurmd: PathBuf,
    pub srun: PathBuf,
    pub sbatch: PathBuf,
    pub sinfo: PathBuf,
    pub squeue: PathBuf,
    pub scontrol: PathBuf,
    pub scancel: PathBuf,
    pub timeout: PathBuf,
    pub runuser: PathBuf,
}

/// True when the developer asked to skip real-Slurm tests.
pub fn skip_requested() -> bool {
    std::env::var(SKIP_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Check root and every program; the error lists everything missing at once.
pub fn check() -> Result<Programs> {
    check_with(find_program, nix::unistd::geteuid().is_root())
}

/// [`check`] with the program lookup and the root test given (for unit tests).
pub fn check_with(lookup: impl Fn(&str) -> Option<PathBuf>, is_root: bool) -> Result<Programs> {
    let mut missing: Vec<(&str, &str)> = Vec::new();
    let mut find = |name: &'static str, package: &'static str| -> PathBuf {
        lookup(name).unwrap_or_else(|| {
            missing.push((name, package));
            PathBuf::from(name)
        })
    };
    let programs = Programs {
        munged: find("munged", "munge"),
        mungekey: find("mungekey", "munge"),
        slurmctld: find("slurmctld", "slurmctld"),
        slurmd: find("slurmd", "slurmd"),
        srun: find("srun", "slurm-client"),
        sbatch: find("sbatch", "slurm-client"),
        sinfo: find("sinfo", "slurm-client"),
        squeue: find("squeue", "slurm-client"),
        scontrol: find("scontrol", "slurm-client"),
        scancel: find("scancel", "slurm-client"),
        timeout: find("timeout", "coreutils"),
        runuser: find("runuser", "util-linux"),
    };
    let mut problems = Vec::new();
    if !is_root {
        problems.push(
            "the real-Slurm tests must run as root (they create device nodes with mknod and run \
             slurmd, which starts jobs as other users)"
                .to_owned(),
        );
    }
    if !missing.is_empty() {
        let names: Vec<String> = missing
            .iter()
            .map(|(n, p)| format!("{n} (package {p})"))
            .collect();
        problems.push(format!(
            "missing programs: {}; install them with: {INSTALL_HINT}",
            names.join(", ")
        ));
    }
    if problems.is_empty() {
        Ok(programs)
    } else {
        Err(harness_err!(
            "cannot start a Slurm test cluster: {}. To skip the real-Slurm tests on a development \
             machine, set {SKIP_ENV}=1",
            problems.join("; ")
        ))
    }
}

/// [`check`] for the programs of a Debian root at `prefix`: each is looked for under
/// `prefix` and named by its path inside the root (where it will be run).
pub fn check_in(prefix: &Path) -> Result<Programs> {
    if prefix == Path::new("/") {
        return check();
    }
    let lookup = |name: &str| {
        EXTRA_DIRS
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|p| is_executable(&prefix.join(p.strip_prefix("/").unwrap_or(p))))
    };
    check_with(lookup, nix::unistd::geteuid().is_root())
}

/// [`check`] for a Slurm installed under `install` (`/opt/slurm`): Slurm's daemons and
/// clients only from its `sbin/` and `bin/` (never a distro Slurm elsewhere on the
/// machine), munge and the rest from the host.
pub fn check_install(install: &Path) -> Result<Programs> {
    const SLURM: &[&str] = &[
        "slurmctld",
        "slurmd",
        "srun",
        "sbatch",
        "sinfo",
        "squeue",
        "scontrol",
        "scancel",
    ];
    let lookup = |name: &str| {
        if SLURM.contains(&name) {
            ["sbin", "bin"]
                .iter()
                .map(|dir| install.join(dir).join(name))
                .find(|p| is_executable(p))
        } else {
            find_program(name)
        }
    };
    check_with(lookup, nix::unistd::geteuid().is_root())
}

/// `name` on `$PATH` or in the usual system directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_daemon_names_its_package_and_the_install_command() {
        let err = check_with(|name| (name != "slurmd").then(|| PathBuf::from("/x")), true)
            .expect_err("slurmd is missing");
        assert!(err.0.contains("slurmd (package slurmd)"), "{err}");
        assert!(err.0.contains("apt-get install"), "{err}");
        assert!(err.0.contains(SKIP_ENV), "{err}");
    }

    #[test]
    fn not_root_is_an_error_too() {
        let err = check_with(|_| Some(PathBuf::from("/x")), false).expect_err("not root");
        assert!(err.0.contains("as root"), "{err}");
    }

    #[test]
    fn everything_present_as_root_passes() {
        assert!(check_with(|_| Some(PathBuf::from("/x")), true).is_ok());
    }
}
