//! `--version` of every binary of the suite (`gpu-affinity` and the node programs): the
//! package version, then the plugin Slurm would load, with the Slurm series that build is
//! for, read from the build itself (core's `slurm::version::series_of_plugin`, the marker
//! build.rs writes), wherever `gpu-affinity install` may have linked it.

use std::fs;
use std::path::{Path, PathBuf};

use gpu_affinity::slurm::version::{Series, multiarch, plugin_dirs, series_of_plugin};

/// The Slurm prefixes the clouds use (`/usr`: the package's own install; `/usr/local`:
/// slurm-gcp, OCI on Ubuntu; `/opt/slurm`: ParallelCluster, HyperPod).
pub const PREFIXES: [&str; 3] = ["/usr", "/usr/local", "/opt/slurm"];

/// What install links in Slurm's plugin dir.
const PLUGIN_FILE: &str = "gpu_affinity.so";

/// A plugin build is a few MiB (a debug one ~50 MiB); anything far past that is not one.
const MAX_PLUGIN_BYTES: u64 = 256 << 20;

/// One `gpu_affinity.so` found in a Slurm plugin dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    /// The path Slurm loads.
    pub path: PathBuf,
    /// Where its links lead.
    pub target: PathBuf,
    /// What the build says it is for; `Err`: why that is not known.
    pub series: Result<Series, String>,
}

/// The plugins under `root` (`/` on a node) at each of [`PREFIXES`]' plugin dirs, each
/// real file once.
pub fn installed(root: &Path) -> Vec<Installed> {
    let mut found: Vec<Installed> = Vec::new();
    for prefix in PREFIXES {
        for dir in plugin_dirs(multiarch()) {
            let path = root
                .join(prefix.trim_start_matches('/'))
                .join(dir)
                .join(PLUGIN_FILE);
            if fs::symlink_metadata(&path).is_err() {
                continue;
            }
            let target = fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if found.iter().any(|f| f.target == target) {
                continue;
            }
            let series = read_series(&target);
            found.push(Installed {
                path,
                target,
                series,
            });
        }
    }
    found
}

fn read_series(path: &Path) -> Result<Series, String> {
    let size = fs::metadata(path)
        .map_err(|e| format!("cannot read: {e}"))?
        .len();
    if size > MAX_PLUGIN_BYTES {
        return Err(format!("{size} bytes: not a plugin build"));
    }
    let bytes = fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    series_of_plugin(&bytes)
        .ok_or_else(|| "no Slurm series marker: not a gpu-affinity build".into())
}

/// The `--version` text of `program`, for the plugins under `root`.
pub fn text(program: &str, root: &Path) -> String {
    let mut out = format!("{program} {}\n", env!("CARGO_PKG_VERSION"));
    let plugins = installed(root);
    if plugins.is_empty() {
        out.push_str(&format!(
            "plugin: none installed under {} (gpu-affinity install --slurm-prefix DIR links it)\n",
            PREFIXES.join(", ")
        ));
    }
    for p in plugins {
        let series = match &p.series {
            Ok(s) => format!("Slurm {s}"),
            Err(why) => format!("series unknown: {why}"),
        };
        let target = if p.target == p.path {
            String::new()
        } else {
            format!(" -> {}", p.target.display())
        };
        out.push_str(&format!(
            "plugin: {} ({series}){target}\n",
            strip_root(&p.path, root).display()
        ));
    }
    out
}

fn strip_root(path: &Path, root: &Path) -> PathBuf {
    match path.strip_prefix(root) {
        Ok(rest) if root != Path::new("/") => Path::new("/").join(rest),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_affinity::slurm::version::built_for_marker;

    fn build(series: &str) -> Vec<u8> {
        let s = Series::parse(series).expect("series");
        [
            b"\x7fELF\0".as_slice(),
            built_for_marker(s).as_bytes(),
            b"x, /usr/include)\0",
        ]
        .concat()
    }

    #[test]
    fn names_the_series_of_the_linked_build() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        let builds = r.join("usr/lib64/gpu-affinity/slurm-24.11");
        fs::create_dir_all(&builds).expect("mkdir");
        fs::write(builds.join(PLUGIN_FILE), build("24.11")).expect("write");
        let dir = r.join("usr/lib64/slurm");
        fs::create_dir_all(&dir).expect("mkdir");
        std::os::unix::fs::symlink(builds.join(PLUGIN_FILE), dir.join(PLUGIN_FILE)).expect("link");
        // A hand-copied build of another series elsewhere, and a file that is no build.
        let local = r.join("usr/local/lib/slurm");
        fs::create_dir_all(&local).expect("mkdir");
        fs::write(local.join(PLUGIN_FILE), build("22.05")).expect("write");
        let opt = r.join("opt/slurm/lib/slurm");
        fs::create_dir_all(&opt).expect("mkdir");
        fs::write(opt.join(PLUGIN_FILE), b"not an ELF").expect("write");

        let t = text("gpu-affinity-prolog", r);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            format!("gpu-affinity-prolog {}", env!("CARGO_PKG_VERSION"))
        );
        assert!(
            lines[1].starts_with("plugin: /usr/lib64/slurm/gpu_affinity.so (Slurm 24.11) -> ")
                && lines[1].ends_with("/usr/lib64/gpu-affinity/slurm-24.11/gpu_affinity.so"),
            "{t}"
        );
        assert_eq!(
            lines[2],
            "plugin: /usr/local/lib/slurm/gpu_affinity.so (Slurm 22.05)"
        );
        assert_eq!(
            lines[3],
            "plugin: /opt/slurm/lib/slurm/gpu_affinity.so (series unknown: no Slurm series marker: not a gpu-affinity build)"
        );
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn says_when_none_is_installed() {
        let root = tempfile::tempdir().expect("tempdir");
        let t = text("gpu-affinity", root.path());
        assert!(
            t.ends_with("plugin: none installed under /usr, /usr/local, /opt/slurm (gpu-affinity install --slurm-prefix DIR links it)\n"),
            "{t}"
        );
    }
}
