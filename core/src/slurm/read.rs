//! Thin readers for Slurm's files: where gres.conf and the topology files are, their text (trust-checked, without
//! blocking), and a device file's minor. Parsing stays in [`super::gres_conf`].

use std::path::{Path, PathBuf};

use super::gres_conf::{self, GresConf, MAX_GRES_CONF_BYTES};
use super::slurm_conf::{self, SlurmConf};
use super::topology::{self, Topology};
use crate::trust::{self, TrustError};

/// Debian's and Slurm's default slurm.conf, when slurmd was given none.
pub const DEFAULT_SLURM_CONF: &str = "/etc/slurm/slurm.conf";

/// Where slurmd reads gres.conf: next to slurm.conf (Slurm's get_extra_conf_path).
/// `slurm_conf` is `SLURM_CONF` of the *daemon's* own environment: slurmd sets it for
/// itself and its slurmstepds, to the file given with `-f`, or, on a configless node, to
/// `SlurmdSpoolDir/conf-cache/slurm.conf`, where gres.conf is cached too. (A job's
/// SLURM_CONF is the user's and is never used.)
pub fn gres_conf_path(slurm_conf: Option<&Path>) -> PathBuf {
    let conf = slurm_conf.unwrap_or(Path::new(DEFAULT_SLURM_CONF));
    conf.parent().unwrap_or(Path::new("/")).join("gres.conf")
}

/// cgroup.conf, which Slurm also reads next to slurm.conf.
pub fn cgroup_conf_path(slurm_conf: Option<&Path>) -> PathBuf {
    gres_conf_path(slurm_conf).with_file_name("cgroup.conf")
}

/// Why gres.conf could not be used: one line naming the file (and the line).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GresReadError {
    #[error(transparent)]
    Trust(#[from] TrustError),
    #[error("gres.conf {path}:{line}: {message}")]
    Parse {
        path: String,
        line: usize,
        message: String,
    },
}

/// Most bytes of a topology.conf / topology.yaml the plugin reads: 16k nodes in blocks
/// of one name each is well under this; a larger file is refused, not truncated.
pub const MAX_TOPOLOGY_BYTES: u64 = 16 << 20;

/// Where slurmctld reads the cluster's topology: topology.yaml next to slurm.conf wins
/// (Slurm 25.05+ reads it first), else topology.conf. Both candidates, in that order.
pub fn topology_paths(slurm_conf: Option<&Path>) -> [PathBuf; 2] {
    let conf = gres_conf_path(slurm_conf);
    [
        conf.with_file_name("topology.yaml"),
        conf.with_file_name("topology.conf"),
    ]
}

/// A topology file's topologies; `Ok(None)` when there is no such file.
pub type TopologyRead = Result<Option<Vec<Topology>>, String>;

/// The cluster's topology file and its topologies: the one `named` (plugstack or
/// `[plugin] topology`; it must exist), else the first of [`topology_paths`] that does.
/// `read` is the caller's reader ([`read_topology`], or the plugin's seam over it).
pub fn locate_topology(
    named: Option<&Path>,
    slurm_conf: Option<&Path>,
    read: &dyn Fn(&Path) -> TopologyRead,
) -> Result<Option<(PathBuf, Vec<Topology>)>, String> {
    if let Some(path) = named {
        return match read(path)? {
            Some(t) => Ok(Some((path.to_path_buf(), t))),
            None => Err(format!(
                "topology file {} (named by topology) does not exist",
                path.display()
            )),
        };
    }
    for path in topology_paths(slurm_conf) {
        if let Some(t) = read(&path)? {
            return Ok(Some((path, t)));
        }
    }
    Ok(None)
}

/// Read and parse a topology file, trust-checked like gres.conf: topology.yaml when the
/// name ends in `.yaml`/`.yml`, else topology.conf. `Ok(None)`: there is no such file.
pub fn read_topology(path: &Path, owner: u32) -> Result<Option<Vec<Topology>>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let text = trust::read_trusted_text(path, "topology file", owner, MAX_TOPOLOGY_BYTES)
        .map_err(|e| e.to_string())?;
    parse_topology(path, &text).map(Some)
}

/// A topology file's text as its name says: topology.yaml for `.yaml`/`.yml`, else
/// topology.conf (one topology). Err names the file.
pub fn parse_topology(path: &Path, text: &str) -> Result<Vec<Topology>, String> {
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let parsed = if yaml {
        topology::parse_yaml(text)
    } else {
        topology::parse_conf(text).map(|t| vec![t])
    };
    parsed.map_err(|e| format!("{}: {e}", path.display()))
}

/// Most files one slurm.conf read follows (itself and its includes, transitively).
const MAX_SLURM_CONF_FILES: usize = 64;

/// Read slurm.conf at `path` and the files its `include` lines name (relative names next
/// to slurm.conf, as Slurm resolves them), each trust-checked like gres.conf, into one
/// [`SlurmConf`]. An include with a wildcard is not followed (its name stays in
/// `includes`). `Ok(None)`: there is no slurm.conf at `path`.
pub fn read_slurm_conf(path: &Path, owner: u32) -> Result<Option<SlurmConf>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    let mut conf = SlurmConf::default();
    let mut queue = vec![path.to_path_buf()];
    let mut read = 0;
    while let Some(file) = queue.pop() {
        read += 1;
        if read > MAX_SLURM_CONF_FILES {
            return Err(format!(
                "{}: more than {MAX_SLURM_CONF_FILES} included files",
                path.display()
            ));
        }
        let text = trust::read_trusted_text(&file, "slurm.conf", owner, MAX_TOPOLOGY_BYTES)
            .map_err(|e| e.to_string())?;
        let known = conf.includes.len();
        slurm_conf::parse_into(&text, &mut conf).map_err(|e| format!("{}: {e}", file.display()))?;
        // An include is read after the whole file naming it, in written order. (Slurm
        // reads it in place; the facts taken here are each set in one place in the
        // products' layouts, so the order only matters for a conf that sets one twice.)
        let mut next: Vec<PathBuf> = conf.includes[known..]
            .iter()
            .filter(|name| !name.contains(['*', '?', '[']))
            .map(|name| dir.join(name))
            .collect();
        next.reverse();
        queue.extend(next);
    }
    Ok(Some(conf))
}

/// Read and parse gres.conf at `path`, refusing a file `owner` (root) does not fully
/// control, opened without blocking. `Ok(None)`: there is no such file.
pub fn read_gres_conf(path: &Path, owner: u32) -> Result<Option<GresConf>, GresReadError> {
    if !path.exists() {
        return Ok(None);
    }
    let text = trust::read_trusted_text(path, "gres.conf", owner, MAX_GRES_CONF_BYTES)?;
    gres_conf::parse(&text).map(Some).map_err(|e| {
        let gres_conf::GresConfError::At { line, message } = e;
        GresReadError::Parse {
            path: path.display().to_string(),
            line,
            message,
        }
    })
}

/// Whether cgroup.conf at `path` has `ConstrainDevices=yes`: Slurm then confines each
/// step (and, with per-task GPU binding, each task) to its GPUs and numbers them locally
/// (gres_use_local_device_index). Trust-checked like gres.conf; no file means no.
pub fn read_constrain_devices(path: &Path, owner: u32) -> Result<bool, TrustError> {
    if !path.exists() {
        return Ok(false);
    }
    let text = trust::read_trusted_text(path, "cgroup.conf", owner, MAX_GRES_CONF_BYTES)?;
    Ok(super::gres_conf::constrain_devices(&text))
}

/// The minor number of a device file, by stat (a character device), else by Slurm's
/// own name rule ([`super::gpu_ids::minor_from_name`]).
pub fn device_minor(path: &str) -> Option<u32> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    match std::fs::metadata(path) {
        Ok(meta) if meta.file_type().is_char_device() => Some(rustix::fs::minor(meta.rdev())),
        _ => super::gpu_ids::minor_from_name(path),
    }
}

/// This host's short name (`/proc/sys/kernel/hostname` up to the first `.`): the name
/// slurmd gives its node when slurm.conf names no other, so what gres.conf's `NodeName=`
/// and the node's drain are matched against. `None` when it cannot be read or is empty.
pub fn short_hostname() -> Option<String> {
    let file = trust::open_regular(Path::new("/proc/sys/kernel/hostname")).ok()?;
    let name = trust::read_bounded_text(file, 256).ok()?;
    let short = name.trim().split('.').next().unwrap_or_default();
    (!short.is_empty()).then(|| short.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::fifo;

    /// The uid owning `path` (the test's own, standing in for root).
    fn owner_of(path: &Path) -> u32 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).expect("metadata").uid()
    }

    #[test]
    fn gres_conf_lives_next_to_slurm_conf() {
        assert_eq!(gres_conf_path(None), PathBuf::from("/etc/slurm/gres.conf"));
        assert_eq!(
            gres_conf_path(Some(Path::new("/var/spool/slurmd/conf-cache/slurm.conf"))),
            PathBuf::from("/var/spool/slurmd/conf-cache/gres.conf")
        );
    }

    #[test]
    fn reads_name_the_file_and_line_and_refuse_what_others_can_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let me = owner_of(dir.path());
        let path = dir.path().join("gres.conf");
        assert_eq!(read_gres_conf(&path, me), Ok(None));
        std::fs::write(&path, "Name=gpu File=/dev/nvidia0\nName=gpu Bogus=1\n").expect("write");
        let e = read_gres_conf(&path, me).expect_err("bad key");
        assert!(
            e.to_string()
                .starts_with(&format!("gres.conf {}:2: ", path.display())),
            "{e}"
        );
        std::fs::write(&path, "Name=gpu File=/dev/nvidia0\n").expect("write");
        assert!(read_gres_conf(&path, me).expect("valid").is_some());
        assert!(matches!(
            read_gres_conf(&path, me + 1),
            Err(GresReadError::Trust(_))
        ));
        let fifo_path = dir.path().join("fifo.conf");
        fifo::make(&fifo_path);
        let p = fifo_path.clone();
        let r = fifo::returns(&fifo_path, move || read_gres_conf(&p, me));
        assert!(matches!(r, Err(GresReadError::Trust(_))), "{r:?}");
    }

    #[test]
    fn constrain_devices_is_read_from_cgroup_conf() {
        let dir = tempfile::tempdir().expect("tempdir");
        let me = owner_of(dir.path());
        let path = dir.path().join("cgroup.conf");
        assert_eq!(read_constrain_devices(&path, me), Ok(false));
        std::fs::write(
            &path,
            "CgroupPlugin=autodetect\nconstraindevices=YES # on\n",
        )
        .expect("write");
        assert_eq!(read_constrain_devices(&path, me), Ok(true));
    }

    #[test]
    fn device_minor_stats_then_falls_back_to_the_name() {
        assert_eq!(device_minor("/dev/null"), Some(3));
        assert_eq!(device_minor("/nonexistent/nvidia7"), Some(7));
    }
}
