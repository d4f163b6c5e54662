//! `gpu-affinity install` for real: a Debian-style `/usr` prefix whose headers are the
//! running Slurm's (this machine's 22.05, the trixie root's 24.11, the sid root's 26.05),
//! every series' build on offer, then srun through nothing but the plugstack.conf install
//! wrote. The prefix is a copy of the layout in a temp dir (headers or slurmd linked in):
//! the host's own /usr and the shared Debian roots stay untouched.

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ND_H100_V5, machine, probe_whole_node, start};
use gpu_affinity_tests::plugin::{Variant, plugin_for_series, workspace_root};
use gpu_affinity_tests::series::Root;
use gpu_affinity_tests::{ClientOptions, ClusterBuilder, SlurmSeries};

/// The admin command, built like the harness builds the plugin (cheap when fresh).
fn gpu_affinity_bin() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "gpu-affinity-slurm-conf", "--bin"])
        .arg("gpu-affinity")
        .current_dir(workspace_root())
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build gpu-affinity: {status}");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("debug/gpu-affinity")
}

/// Run the admin command; inside the series' root when it has one (its slurmd, its libc),
/// the way an admin runs it on a node of that Slurm.
fn run(root: Option<&Root>, bin: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new(bin);
    cmd.args(args);
    if let Some(root) = root {
        root.confine(&mut cmd, None);
    }
    let out = cmd.output().expect("run gpu-affinity");
    assert!(
        out.status.success(),
        "gpu-affinity {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How the Slurm under test is laid out for install.
#[derive(Clone, Copy)]
enum Layout {
    /// The series' own prefix (the real /opt/slurm of a source build; a copy of a
    /// Debian `/usr` layout otherwise).
    Real,
    /// `/opt/slurm` a symlink to `/opt/slurm-SERIES` (HyperPod).
    HyperPod,
}

/// The files under some dirs (names, link targets, contents), to check that uninstall
/// left a real Slurm tree as install found it; restored on drop whatever the test did.
struct Snapshot(Vec<(PathBuf, Vec<Entry>)>);

/// One path under a snapshot's dir: its symlink target, or its bytes (a file).
type Entry = (PathBuf, Option<PathBuf>, Vec<u8>);

impl Snapshot {
    fn take(dirs: &[PathBuf]) -> Snapshot {
        Snapshot(dirs.iter().map(|d| (d.clone(), Self::list(d))).collect())
    }

    fn list(dir: &Path) -> Vec<Entry> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                let link = fs::read_link(&p).ok();
                if link.is_none() && p.is_dir() {
                    stack.push(p.clone());
                }
                let bytes = if link.is_none() && p.is_file() {
                    fs::read(&p).unwrap_or_default()
                } else {
                    Vec::new()
                };
                out.push((p, link, bytes));
            }
        }
        out.sort();
        out
    }

    /// What differs now, one line per path.
    fn changes(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (dir, before) in &self.0 {
            let now = Self::list(dir);
            for entry in &now {
                if !before.contains(entry) {
                    v.push(format!("changed or added: {}", entry.0.display()));
                }
            }
            for entry in before {
                if !now.iter().any(|n| n.0 == entry.0) {
                    v.push(format!("removed: {}", entry.0.display()));
                }
            }
        }
        v
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // Put back what was there (a failed test must not leave the plugin installed
        // into the shared tree): remove what was added, rewrite what changed.
        for (dir, before) in &self.0 {
            for (path, _, _) in Self::list(dir) {
                if !before.iter().any(|b| b.0 == path) {
                    let _ = fs::remove_file(&path).or_else(|_| fs::remove_dir_all(&path));
                }
            }
            for (path, link, bytes) in before {
                match link {
                    Some(target) => {
                        let _ = fs::remove_file(path);
                        let _ = symlink(target, path);
                    }
                    None if !path.is_dir() => {
                        let _ = fs::write(path, bytes);
                    }
                    None => {}
                }
            }
        }
    }
}

fn installed_plugstack_runs_steps(series: &str, layout: Layout) {
    // The label names the cluster's directory and the skip line: one per layout.
    let layout_name = match layout {
        Layout::Real => "",
        Layout::HyperPod => "_hyperpod",
    };
    let test = format!("installed{layout_name}_{}", series.replace('.', "_"));
    // scripts/test runs this file once per series: each test runs in its own series' pass
    // (the host's when GPU_AFFINITY_SLURM_SERIES is unset).
    let selected = SlurmSeries::from_env().expect("GPU_AFFINITY_SLURM_SERIES");
    if selected.name != series {
        eprintln!(
            "SKIPPED {test}: this run is for Slurm {} (GPU_AFFINITY_SLURM_SERIES)",
            selected.name
        );
        return;
    }
    let m = machine(ND_H100_V5);
    let builder = ClusterBuilder::new().slurm_series(series);
    let Some(mut cluster) = start(&test, &m, builder) else {
        return;
    };
    // Every series' build, as the package lays them out.
    let tmp = tempfile::Builder::new()
        .prefix("gpu-affinity-installed-")
        .tempdir_in("/tmp")
        .expect("tempdir under /tmp (the series roots see /tmp)");
    let plugins = tmp.path().join("plugins");
    for s in ["22.05", "24.11", "25.11", "26.05"] {
        let built = plugin_for_series(Variant::Debug, s).expect("build-plugins");
        let dir = plugins.join(format!("slurm-{s}"));
        fs::create_dir_all(&dir).expect("mkdir");
        fs::copy(built, dir.join("gpu_affinity.so")).expect("copy the build");
    }
    let chosen = SlurmSeries::named(series).expect("series");
    let root = chosen.root.clone();
    let (prefix, plugin_dir, etc, restore) = match (&chosen.install, layout) {
        // The source build's own tree, as ParallelCluster has it: install writes into
        // /opt/slurm/lib/slurm and /opt/slurm/etc, and uninstall must leave both as found.
        (Some(install), Layout::Real) => {
            let etc = install.join("etc");
            let restore = Snapshot::take(&[etc.clone(), install.join("lib/slurm")]);
            (
                install.clone(),
                install.join("lib/slurm"),
                etc,
                Some(restore),
            )
        }
        // HyperPod's: /opt/slurm a symlink to /opt/slurm-25.11 (here under the temp
        // dir, its headers and daemons those of the real tree), which install follows.
        (Some(install), Layout::HyperPod) => {
            let real = tmp.path().join(format!("opt/slurm-{series}"));
            fs::create_dir_all(real.join("lib/slurm")).expect("mkdir");
            fs::create_dir_all(real.join("etc")).expect("mkdir");
            for d in ["include", "sbin", "bin"] {
                symlink(install.join(d), real.join(d)).expect("link");
            }
            let link = tmp.path().join("opt/slurm");
            symlink(format!("slurm-{series}"), &link).expect("link /opt/slurm");
            (link, real.join("lib/slurm"), real.join("etc"), None)
        }
        // A Debian `/usr` prefix: its plugin dir, and that Slurm's headers (this machine
        // has libslurm-dev) or its slurmd (the roots have no headers: install runs
        // `slurmd -V` there, inside the root).
        (None, _) => {
            let prefix = tmp.path().join("usr");
            let plugin_dir = prefix.join("lib/x86_64-linux-gnu/slurm-wlm");
            fs::create_dir_all(&plugin_dir).expect("mkdir");
            if root.is_some() {
                symlink("/usr/sbin", prefix.join("sbin")).expect("link sbin");
            } else {
                symlink("/usr/include", prefix.join("include")).expect("link headers");
            }
            (prefix, plugin_dir, tmp.path().join("etc/slurm"), None)
        }
    };
    // The plugstack.conf the clusters ship: an include of plugstack.conf.d, which
    // install fills (ParallelCluster's /opt/slurm/etc has the same line).
    fs::create_dir_all(etc.join("plugstack.conf.d")).expect("mkdir");
    let plugstack = etc.join("plugstack.conf");
    fs::write(
        &plugstack,
        format!("include {}/plugstack.conf.d/*.conf\n", etc.display()),
    )
    .expect("write plugstack.conf");

    // A copy under /tmp, which the roots see at the same path.
    let bin = tmp.path().join("gpu-affinity");
    fs::copy(gpu_affinity_bin(), &bin).expect("copy gpu-affinity");
    let args = [
        "--slurm-prefix",
        prefix.to_str().expect("utf-8"),
        "--plugins-dir",
        plugins.to_str().expect("utf-8"),
    ];
    let said = run(root.as_ref(), &bin, &[&["install"], &args[..]].concat());
    assert!(said.contains(&format!("Slurm {series} at")), "{said}");
    let link = fs::read_link(plugin_dir.join("gpu_affinity.so")).expect("plugin link");
    assert!(
        link.ends_with(format!("slurm-{series}/gpu_affinity.so")),
        "{series} chose {}",
        link.display()
    );

    // The cluster's slurmd, slurmstepd and srun read the installed plugstack.conf only.
    let cluster_plugstack = cluster.dir().join("plugstack.conf");
    fs::copy(&plugstack, &cluster_plugstack).expect("use the installed plugstack.conf");
    let opts = ClientOptions::default();
    let bad = probe_whole_node(&cluster, Some("bogus"), 2, &opts);
    assert_eq!(bad.code(), Some(255), "Slurm {series}: {bad}");
    assert!(
        bad.stderr.contains("Invalid --gpu-affinity argument"),
        "Slurm {series}: the installed plugin did not load: {bad}"
    );
    let good = probe_whole_node(&cluster, Some("off"), 2, &opts);
    assert!(
        good.success(),
        "Slurm {series}: {good}{}",
        cluster.log_tails()
    );

    let undo = run(root.as_ref(), &bin, &[&["uninstall"], &args[..]].concat());
    assert!(undo.contains("remove"), "{undo}");
    // On a real tree: everything but the plugstack.conf this test wrote is as before.
    if let Some(snapshot) = &restore {
        let changes: Vec<String> = snapshot
            .changes()
            .into_iter()
            .filter(|c| !c.ends_with("/plugstack.conf") && !c.ends_with("/plugstack.conf.d"))
            .collect();
        assert!(changes.is_empty(), "uninstall left {changes:?}: {undo}");
    }
    assert!(
        fs::read_dir(etc.join("plugstack.conf.d"))
            .expect("dir")
            .next()
            .is_none(),
        "{undo}"
    );
    // The node's plugstack now loads nothing: the option is gone.
    let after = probe_whole_node(&cluster, Some("bogus"), 2, &opts);
    assert!(
        !after.stderr.contains("Invalid --gpu-affinity argument"),
        "uninstalled, yet: {after}"
    );
    assert!(cluster.daemons_alive(), "{}", cluster.log_tails());
    let _ = cluster.wait_idle(std::time::Duration::from_secs(5));
}

#[test]
fn installed_on_the_hosts_22_05() {
    installed_plugstack_runs_steps("22.05", Layout::Real);
}

#[test]
fn installed_in_the_trixie_root_24_11() {
    installed_plugstack_runs_steps("24.11", Layout::Real);
}

#[test]
fn installed_into_the_real_opt_slurm_25_11() {
    installed_plugstack_runs_steps("25.11", Layout::Real);
}

#[test]
fn installed_through_hyperpods_opt_slurm_symlink_25_11() {
    installed_plugstack_runs_steps("25.11", Layout::HyperPod);
}

#[test]
fn installed_in_the_sid_root_26_05() {
    installed_plugstack_runs_steps("26.05", Layout::Real);
}
