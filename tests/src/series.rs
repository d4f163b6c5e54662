//! Which Slurm series a cluster runs, and running its programs inside that series'
//! Debian root.
//!
//! This machine's own Slurm is Debian 12's 22.05. Other series run from debootstrapped
//! Debian roots under `target/slurm-roots/` (`scripts/slurm-root SERIES` makes them):
//! 24.11 from trixie, 26.05 from sid. `GPU_AFFINITY_SLURM_SERIES=24.11` (or
//! [`crate::ClusterBuilder::slurm_series`]) selects one; the cluster then loads the
//! plugin built for it by `scripts/build-plugins` (`target/plugins/.../slurm-X.Y`).
//!
//! 25.11 has no Debian package: it is SchedMD's source built by
//! `scripts/slurm-from-source` and installed on this machine as ParallelCluster and
//! HyperPod install it, `--prefix=/opt/slurm` with `etc/` inside
//! ([`SlurmSeries::install`]; `GPU_AFFINITY_SLURM_PREFIX` names another prefix, e.g. a
//! cluster's own build). Its daemons and clients run on the host from that prefix, beside
//! Debian's 22.05 in /usr, as on an image that carries both.
//!
//! Every daemon and client of a rooted series is started by [`Root::confine`]: between
//! fork and exec the child enters a private mount namespace, mounts /proc and binds
//! /sys, /dev and /tmp (where cluster dirs and fixtures live, at the same paths) into
//! the root, then chroots into it. The mounts exist only in that namespace and vanish
//! with its last process, so nothing is ever left mounted on the host, however a test
//! ends. Programs are argument vectors resolved inside the root; no shell is involved.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::Result;
use crate::harness_err;
use crate::plugin::workspace_root;

/// Selects the Slurm series of every cluster the harness starts (`22.05`, `24.11`,
/// `26.05`); unset means this machine's own Slurm.
pub const SERIES_ENV: &str = "GPU_AFFINITY_SLURM_SERIES";

/// Names the prefix of a source-built series (default [`DEFAULT_PREFIX`]).
pub const PREFIX_ENV: &str = "GPU_AFFINITY_SLURM_PREFIX";

/// Where ParallelCluster and HyperPod install Slurm, and `scripts/slurm-from-source` too.
pub const DEFAULT_PREFIX: &str = "/opt/slurm";

/// The series with daemons on this machine: the host's own, Debian roots, and SchedMD's
/// source built under /opt/slurm.
pub const RUNNABLE: &[&str] = &["22.05", "24.11", "25.11", "26.05"];

/// A Slurm series the harness can start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmSeries {
    /// `MAJOR.MINOR`.
    pub name: String,
    /// The Debian root holding its daemons; `None` for this machine's own Slurm.
    pub root: Option<Root>,
    /// The prefix of a source-built Slurm on this machine (`/opt/slurm`): its daemons
    /// and clients come from `sbin/` and `bin/` there, everything else from the host.
    pub install: Option<PathBuf>,
    /// Chosen explicitly (env or builder): the plugin then comes from
    /// `scripts/build-plugins` for that series, never from the host's headers.
    pub explicit: bool,
}

impl SlurmSeries {
    /// The machine's own Slurm (22.05 on Debian 12), plugin built from /usr/include.
    pub fn host() -> Self {
        Self {
            name: "22.05".to_owned(),
            root: None,
            install: None,
            explicit: false,
        }
    }

    /// `GPU_AFFINITY_SLURM_SERIES`, or the host's when unset or empty.
    pub fn from_env() -> Result<Self> {
        match std::env::var(SERIES_ENV) {
            Ok(s) if !s.trim().is_empty() => Self::named(s.trim()),
            _ => Ok(Self::host()),
        }
    }

    /// The series `name`; its root must exist (`scripts/slurm-root NAME`).
    pub fn named(name: &str) -> Result<Self> {
        let suite = match name {
            "22.05" => None,
            "24.11" => Some("trixie"),
            "26.05" => Some("sid"),
            "25.11" => return Self::source_built(name),
            "25.05" => {
                return Err(harness_err!(
                    "Slurm {name} has no daemons to test against (build-only series; \
                     scripts/build-plugins builds it); runnable: {}",
                    RUNNABLE.join(", ")
                ));
            }
            other => {
                return Err(harness_err!(
                    "unknown Slurm series {other:?}; runnable here: {}",
                    RUNNABLE.join(", ")
                ));
            }
        };
        let root = match suite {
            None => None,
            Some(suite) => {
                let dir = workspace_root().join("target/slurm-roots").join(suite);
                if !dir.join(".gpu-affinity-ready").is_file() {
                    return Err(harness_err!(
                        "no Slurm {name} root at {} (make it with: scripts/slurm-root {name})",
                        dir.display()
                    ));
                }
                Some(Root::new(dir)?)
            }
        };
        Ok(Self {
            name: name.to_owned(),
            root,
            install: None,
            explicit: true,
        })
    }

    /// A series built from SchedMD's source and installed under a prefix on this machine
    /// (`$GPU_AFFINITY_SLURM_PREFIX`, else `/opt/slurm`). The cluster checks that its
    /// slurmd really is `name` before anything runs.
    fn source_built(name: &str) -> Result<Self> {
        let prefix = std::env::var_os(PREFIX_ENV)
            .filter(|p| !p.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_PREFIX), PathBuf::from);
        if !prefix.join("sbin/slurmd").is_file() {
            return Err(harness_err!(
                "no Slurm {name} at {} (build and install it with: scripts/slurm-from-source; \
                 {PREFIX_ENV} names another prefix)",
                prefix.display()
            ));
        }
        Ok(Self {
            name: name.to_owned(),
            root: None,
            install: Some(prefix),
            explicit: true,
        })
    }

    /// PATH for the series' daemons and clients: a source-built series' own `bin` and
    /// `sbin` first, so that `srun` is its srun and not /usr/bin's.
    pub fn path_env(&self, base: &str) -> String {
        match &self.install {
            Some(p) => format!("{0}/bin:{0}/sbin:{base}", p.display()),
            None => base.to_owned(),
        }
    }

    /// A Command for `program` (a path inside the root for a rooted series).
    pub fn command(&self, program: &Path, cwd: Option<&Path>) -> Command {
        let mut cmd = Command::new(program);
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        if let Some(root) = &self.root {
            root.confine(&mut cmd, cwd);
        }
        cmd
    }

    /// Where programs are looked for: `/` or the root.
    pub fn prefix(&self) -> &Path {
        self.root
            .as_ref()
            .map_or(Path::new("/"), |r| r.dir.as_path())
    }
}

/// A Debian root and the C strings its confinement needs (made before fork: the child
/// may only make system calls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    dir: PathBuf,
    c_dir: CString,
    c_proc: CString,
    c_sys: CString,
    c_dev: CString,
    c_tmp: CString,
}

fn cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| harness_err!("path {} contains a NUL byte", p.display()))
}

impl Root {
    fn new(dir: PathBuf) -> Result<Self> {
        Ok(Self {
            c_dir: cstring(&dir)?,
            c_proc: cstring(&dir.join("proc"))?,
            c_sys: cstring(&dir.join("sys"))?,
            c_dev: cstring(&dir.join("dev"))?,
            c_tmp: cstring(&dir.join("tmp"))?,
            dir,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Make `cmd` run inside the root (see the module docs); `cwd` is entered after
    /// the chroot (it must lie under /tmp or exist in the root).
    pub fn confine(&self, cmd: &mut Command, cwd: Option<&Path>) {
        let root = self.clone();
        let cwd = cwd
            .and_then(|c| cstring(c).ok())
            .unwrap_or_else(|| c"/".to_owned());
        // SAFETY: the closure runs in the child between fork and exec and only makes
        // system calls (unshare, mount, chroot, chdir) on C strings allocated before the
        // fork; it allocates nothing and touches no lock.
        unsafe {
            cmd.pre_exec(move || root.enter(&cwd));
        }
    }

    /// The child's side of [`Self::confine`].
    fn enter(&self, cwd: &CString) -> io::Result<()> {
        let null = std::ptr::null::<libc::c_char>();
        let check = |rc: libc::c_int| {
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // SAFETY: plain system calls on NUL-terminated strings owned by `self`/`cwd`.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            // Nothing mounted below propagates back to the host's namespace.
            check(libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            // The root a mount point of its own: Slurm's tmpfs job container makes "/"
            // private again inside the chroot, which fails (EINVAL) on a plain directory.
            check(libc::mount(
                self.c_dir.as_ptr(),
                self.c_dir.as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                c"proc".as_ptr(),
                self.c_proc.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ))?;
            for (from, to) in [
                (c"/sys", &self.c_sys),
                (c"/dev", &self.c_dev),
                (c"/tmp", &self.c_tmp),
            ] {
                check(libc::mount(
                    from.as_ptr(),
                    to.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
            }
            check(libc::chroot(self.c_dir.as_ptr()))?;
            check(libc::chdir(cwd.as_ptr()))?;
        }
        Ok(())
    }
}
