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

fn installed_plugstack_runs_steps(series: &str) {
    let test = format!("installed_{}", series.replace('.', "_"));
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
    for s in ["22.05", "24.11", "26.05"] {
        let built = plugin_for_series(Variant::Debug, s).expect("build-plugins");
        let dir = plugins.join(format!("slurm-{s}"));
        fs::create_dir_all(&dir).expect("mkdir");
        fs::copy(built, dir.join("gpu_affinity.so")).expect("copy the build");
    }
    // A Debian `/usr` prefix: its plugin dir, Debian's plugstack.conf, and that Slurm's
    // headers (this machine has libslurm-dev) or its slurmd (the roots have no headers:
    // install runs `slurmd -V` there, inside the root).
    let root = SlurmSeries::named(series).expect("series").root;
    let prefix = tmp.path().join("usr");
    fs::create_dir_all(prefix.join("lib/x86_64-linux-gnu/slurm-wlm")).expect("mkdir");
    if root.is_some() {
        symlink("/usr/sbin", prefix.join("sbin")).expect("link sbin");
    } else {
        symlink("/usr/include", prefix.join("include")).expect("link headers");
    }
    let etc = tmp.path().join("etc/slurm");
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
    let link = fs::read_link(prefix.join("lib/x86_64-linux-gnu/slurm-wlm/gpu_affinity.so"))
        .expect("plugin link");
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
    installed_plugstack_runs_steps("22.05");
}

#[test]
fn installed_in_the_trixie_root_24_11() {
    installed_plugstack_runs_steps("24.11");
}

#[test]
fn installed_in_the_sid_root_26_05() {
    installed_plugstack_runs_steps("26.05");
}
