//! `gpu-affinity install` / `uninstall` against Slurm prefixes laid out the way each cloud
//! lays them out (clouds.md), in temp dirs: ParallelCluster `/opt/slurm`, HyperPod's
//! `/opt/slurm -> /opt/slurm-24.11`, slurm-gcp `/usr/local` (series from `slurmd -V`),
//! OCI / Azure `/usr` with `plugstack.conf.d`.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{gpu_affinity, plugins, slurm_prefix, snapshot, version_header, write};

fn ok(args: &[&str]) -> String {
    let out = gpu_affinity(args);
    assert!(
        out.status.success(),
        "gpu-affinity {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Install, check, install again (nothing changes), uninstall (everything as before).
fn round_trip(root: &Path, prefix: &Path, extra: &[&str]) -> (String, BTreeMap<PathBuf, String>) {
    let plugins = plugins(root);
    let before = snapshot(root);
    let mut args = vec![
        "--slurm-prefix",
        prefix.to_str().expect("utf-8"),
        "--plugins-dir",
        plugins.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let dry = ok(&[&["install"], &args[..], &["--dry-run"]].concat());
    assert!(dry.contains("would link"), "{dry}");
    assert_eq!(snapshot(root), before, "--dry-run changed something");
    let first = ok(&[&["install"], &args[..]].concat());
    let installed = snapshot(root);
    let again = ok(&[&["install"], &args[..]].concat());
    assert!(again.contains("unchanged"), "{again}");
    assert!(
        !again.contains("write ") && !again.contains("link "),
        "{again}"
    );
    assert_eq!(
        snapshot(root),
        installed,
        "a second install changed something"
    );
    for (p, _) in installed.iter().filter(|(p, _)| !before.contains_key(*p)) {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(!name.ends_with(".tmp"), "temp file left: {}", p.display());
    }
    let undo = ok(&[&["uninstall"], &args[..]].concat());
    assert!(undo.contains("remove"), "{undo}");
    assert_eq!(
        snapshot(root),
        before,
        "uninstall left a difference:\n{undo}"
    );
    (first, installed)
}

fn find<'a>(snap: &'a BTreeMap<PathBuf, String>, path: &Path) -> &'a str {
    snap.get(path)
        .unwrap_or_else(|| panic!("{} not installed: {snap:#?}", path.display()))
}

#[test]
fn parallelcluster_opt_slurm_with_pyxis() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "opt/slurm", "0x190b08", "lib/slurm");
    write(&prefix.join("etc/slurm.conf"), "ClusterName=pc\n");
    let dir = prefix.join("etc/plugstack.conf.d");
    write(
        &prefix.join("etc/plugstack.conf"),
        &format!("include {}/*\n", dir.display()),
    );
    write(
        &dir.join("pyxis.conf"),
        "required /usr/local/lib/slurm/spank_pyxis.so\n",
    );
    let (said, snap) = round_trip(root, &prefix, &[]);
    assert!(said.contains("Slurm 25.11"), "{said}");
    // After pyxis: its hooks run first, so pyxis's image environment cannot replace ours.
    let snippet = find(&snap, &dir.join("zz-gpu-affinity.conf"));
    assert!(
        snippet.contains(&format!(
            "required {}/lib/slurm/gpu_affinity.so",
            prefix.display()
        )),
        "{snippet}"
    );
    let link = find(&snap, &prefix.join("lib/slurm/gpu_affinity.so"));
    assert!(
        link.ends_with("plugins/slurm-25.11/gpu_affinity.so"),
        "{link}"
    );
    // Already included: plugstack.conf untouched.
    assert_eq!(
        find(&snap, &prefix.join("etc/plugstack.conf")),
        format!("include {}/*\n", dir.display())
    );
}

#[test]
fn hyperpod_symlinked_prefix_configless() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let real = root.join("opt/slurm-24.11");
    version_header(&real, "0x180b05");
    version_header(&root.join("opt/slurm-25.11"), "0x190b05");
    fs::create_dir_all(real.join("lib/slurm")).expect("mkdir");
    write(
        &real.join("etc/plugstack.conf"),
        "required /opt/slurm/lib/slurm/other.so\n",
    );
    let prefix = root.join("opt/slurm");
    symlink("slurm-24.11", &prefix).expect("symlink");
    let (said, snap) = round_trip(root, &prefix, &[]);
    assert!(said.contains("Slurm 24.11"), "{said}");
    let link = find(&snap, &real.join("lib/slurm/gpu_affinity.so"));
    assert!(
        link.ends_with("plugins/slurm-24.11/gpu_affinity.so"),
        "{link}"
    );
    // No wildcard include: configless nodes do not expand them. The snippet names the
    // plugin through the symlink the admin gave.
    let snippet_path = prefix.join("etc/plugstack.conf.d/gpu-affinity.conf");
    let conf = find(&snap, &real.join("etc/plugstack.conf"));
    assert!(
        conf.ends_with(&format!("include {}\n", snippet_path.display())),
        "{conf}"
    );
    let snippet = find(&snap, &real.join("etc/plugstack.conf.d/gpu-affinity.conf"));
    assert!(
        snippet.contains(&format!(
            "required {}/lib/slurm/gpu_affinity.so",
            prefix.display()
        )),
        "{snippet}"
    );
}

#[test]
fn configless_compute_node_links_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    // A configless node: no slurm.conf, no plugstack.conf (the controller serves them).
    let prefix = slurm_prefix(root, "opt/slurm-25.11", "0x190b05", "lib/slurm");
    let (said, snap) = round_trip(root, &prefix, &["--link-only"]);
    assert!(!said.contains("plugstack"), "{said}");
    let link = find(&snap, &prefix.join("lib/slurm/gpu_affinity.so"));
    assert!(
        link.ends_with("plugins/slurm-25.11/gpu_affinity.so"),
        "{link}"
    );
}

#[test]
fn slurm_gcp_usr_local_series_from_slurmd() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = root.join("usr/local");
    let slurmd = prefix.join("sbin/slurmd");
    // A login node would have only bin/srun; slurmd wins when both are there.
    write(
        &slurmd,
        "#!/bin/sh\n[ \"$1\" = -V ] && echo 'slurm 26.05.5'\n",
    );
    fs::set_permissions(&slurmd, fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::create_dir_all(prefix.join("lib/slurm")).expect("mkdir");
    write(&prefix.join("etc/slurm/slurm.conf"), "ClusterName=gcp\n");
    write(
        &prefix.join("etc/slurm/plugstack.conf"),
        "required /usr/local/lib/slurm/spank_pyxis.so\n",
    );
    let (said, snap) = round_trip(root, &prefix, &[]);
    assert!(
        said.contains("Slurm 26.05") && said.contains("slurmd -V"),
        "{said}"
    );
    // The include is appended, after pyxis's own line.
    let conf = find(&snap, &prefix.join("etc/slurm/plugstack.conf"));
    let pyxis = conf.find("spank_pyxis").expect("pyxis line kept");
    let ours = conf.find("include ").expect("include added");
    assert!(pyxis < ours, "{conf}");
}

#[test]
fn login_node_series_from_srun() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = root.join("opt/slurm");
    let srun = prefix.join("bin/srun");
    write(
        &srun,
        "#!/bin/sh\n[ \"$1\" = --version ] && echo 'slurm 24.11.5'\n",
    );
    fs::set_permissions(&srun, fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::create_dir_all(prefix.join("lib/slurm")).expect("mkdir");
    write(&prefix.join("etc/slurm.conf"), "ClusterName=login\n");
    let (said, _) = round_trip(root, &prefix, &[]);
    assert!(
        said.contains("Slurm 24.11") && said.contains("srun --version"),
        "{said}"
    );
}

#[test]
fn oci_azure_usr_with_include_dir() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "usr", "0x160508", "lib64/slurm");
    let etc = root.join("etc/slurm");
    write(&etc.join("slurm.conf"), "ClusterName=oci\n");
    write(
        &etc.join("plugstack.conf"),
        &format!("include {}/plugstack.conf.d/*.conf\n", etc.display()),
    );
    fs::create_dir_all(etc.join("plugstack.conf.d")).expect("mkdir");
    let (said, snap) = round_trip(root, &prefix, &[]);
    assert!(said.contains("Slurm 22.05"), "{said}");
    find(&snap, &etc.join("plugstack.conf.d/gpu-affinity.conf"));
    find(&snap, &prefix.join("lib64/slurm/gpu_affinity.so"));
    // The explicit dir wins.
    let other = root.join("etc/slurm/other.d");
    fs::create_dir_all(&other).expect("mkdir");
    let (_, snap) = round_trip(
        root,
        &prefix,
        &["--plugstack-dir", other.to_str().expect("utf-8")],
    );
    find(&snap, &other.join("gpu-affinity.conf"));
}

/// slurm.conf's `PlugStackConfig=` (or one in a file it includes) names a plugstack.conf
/// elsewhere (a shared spank dir) whose relative wildcard include reads a dir of its own:
/// the snippet goes there and the admin's file is left as it is.
#[test]
fn plugstack_config_elsewhere_with_an_include_dir() {
    for included in [false, true] {
        plugstack_config_elsewhere(included);
    }
}

fn plugstack_config_elsewhere(included: bool) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "usr/local", "0x180b05", "lib/slurm");
    let spank = root.join("shared/spank");
    let key = format!(
        "# PlugStackConfig=/not/this\nplugstackconfig={}/plugstack.conf\n",
        spank.display()
    );
    let slurm_conf = if included {
        write(&prefix.join("etc/slurm/site.conf"), &key);
        "ClusterName=c1\ninclude site.conf\n".to_string()
    } else {
        format!("ClusterName=c1\n{key}")
    };
    write(&prefix.join("etc/slurm/slurm.conf"), &slurm_conf);
    let conf_text = "required /opt/other/spank_other.so\ninclude plugstack.d/*.conf\n";
    write(&spank.join("plugstack.conf"), conf_text);
    let (said, snap) = round_trip(root, &prefix, &[]);
    let snippet = find(&snap, &spank.join("plugstack.d/gpu-affinity.conf"));
    assert!(snippet.contains("required /"), "{snippet}");
    assert!(said.contains("already includes"), "{said}");
    assert_eq!(find(&snap, &spank.join("plugstack.conf")), conf_text);
    assert!(
        !snap.contains_key(&prefix.join("etc/slurm/plugstack.conf")),
        "{said}"
    );
    assert!(
        !snap.contains_key(&prefix.join("etc/slurm/plugstack.conf.d")),
        "{said}"
    );
}

/// `PlugStackConfig=` names a file that includes no dir: install says which line to add
/// and edits the admin's file only with --force (and uninstall takes the line out again).
#[test]
fn plugstack_config_elsewhere_without_an_include_dir() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "opt/slurm", "0x190b08", "lib/slurm");
    let cfg = root.join("cfg");
    let slurm_conf = cfg.join("slurm.conf");
    let spank_conf = cfg.join("spank.conf");
    write(
        &slurm_conf,
        &format!("PlugStackConfig=\"{}\"\n", spank_conf.display()),
    );
    let conf_text = "required /opt/other/spank_other.so\n";
    write(&spank_conf, conf_text);
    let args = ["--slurm-conf", slurm_conf.to_str().expect("utf-8")];
    let (said, snap) = round_trip(root, &prefix, &args);
    let snippet = cfg.join("plugstack.conf.d/gpu-affinity.conf");
    find(&snap, &snippet);
    let want = format!(
        "action needed: add `include {}` to {} (PlugStackConfig= in {}), or rerun with --force to append it",
        snippet.display(),
        spank_conf.display(),
        slurm_conf.display()
    );
    assert!(said.lines().any(|l| l == want), "{said}");
    assert_eq!(find(&snap, &spank_conf), conf_text);
    let (said, snap) = round_trip(root, &prefix, &[&args[..], &["--force"]].concat());
    assert!(!said.contains("action needed"), "{said}");
    assert_eq!(
        find(&snap, &spank_conf),
        format!("{conf_text}include {}\n", snippet.display())
    );
    // A relative PlugStackConfig is refused, naming it, before anything changes.
    write(&slurm_conf, "PlugStackConfig=spank.conf\n");
    let before = snapshot(root);
    let out = install_refused(root, &prefix, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PlugStackConfig=spank.conf is not an absolute path"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(snapshot(root), before);
}

/// A plugstack.conf that is not UTF-8 (a Latin-1 comment) is refused, naming it, and left
/// as it is: replacing it with one include line would drop its SPANK lines.
#[test]
fn a_plugstack_conf_not_utf8_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "usr/local", "0x180b05", "lib/slurm");
    let conf = prefix.join("etc/slurm/plugstack.conf");
    let text = b"# caf\xe9\nrequired /usr/lib/pyxis/spank_pyxis.so\n";
    fs::create_dir_all(conf.parent().expect("dir")).expect("mkdir");
    fs::write(&conf, text).expect("write");
    plugins(root);
    let before = snapshot(root);
    let out = install_refused(root, &prefix, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot read {}: ", conf.display())),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(snapshot(root), before);
    assert_eq!(fs::read(&conf).expect("read"), text);
}

/// An install that must fail with exit status 1.
fn install_refused(root: &Path, prefix: &Path, extra: &[&str]) -> Output {
    let plugins = plugins(root);
    let args = [
        "install",
        "--slurm-prefix",
        prefix.to_str().expect("utf-8"),
        "--plugins-dir",
        plugins.to_str().expect("utf-8"),
    ];
    let out = gpu_affinity(&[&args[..], extra].concat());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    out
}

#[test]
fn cyclecloud_linked_config_dir() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "usr", "0x190b05", "lib64/slurm");
    // /etc/slurm -> /sched/<cluster>, plugstack.conf itself a link into it.
    let sched = root.join("sched/c1");
    write(&sched.join("slurm.conf"), "ClusterName=c1\n");
    write(&sched.join("plugstack.real"), "required /other/spank.so\n");
    fs::create_dir_all(root.join("etc")).expect("mkdir");
    symlink(&sched, root.join("etc/slurm")).expect("symlink");
    symlink("plugstack.real", sched.join("plugstack.conf")).expect("symlink");
    let (_, snap) = round_trip(root, &prefix, &[]);
    // The links survive; the files are written where they really are.
    assert!(find(&snap, &root.join("etc/slurm")).starts_with("-> "));
    assert_eq!(
        find(&snap, &sched.join("plugstack.conf")),
        "-> plugstack.real"
    );
    let conf = find(&snap, &sched.join("plugstack.real"));
    assert!(
        conf.contains("include ") && conf.contains("/other/spank.so"),
        "{conf}"
    );
    find(&snap, &sched.join("plugstack.conf.d/gpu-affinity.conf"));
}

#[test]
fn refuses_a_series_without_a_build_naming_both() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let prefix = tmp.path().join("opt/slurm");
    version_header(&prefix, "0x170200");
    fs::create_dir_all(prefix.join("lib/slurm")).expect("mkdir");
    write(&prefix.join("etc/slurm.conf"), "\n");
    let out = install_refused(tmp.path(), &prefix, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Slurm 23.02") && err.contains("22.05, 24.11, 25.11, 26.05"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!prefix.join("lib/slurm/gpu_affinity.so").exists());
}

#[test]
fn refuses_a_plugin_file_it_did_not_make() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let prefix = tmp.path().join("opt/slurm");
    version_header(&prefix, "0x180b05");
    write(&prefix.join("lib/slurm/gpu_affinity.so"), "someone's");
    write(&prefix.join("etc/slurm.conf"), "\n");
    install_refused(tmp.path(), &prefix, &[]);
    assert_eq!(
        fs::read_to_string(prefix.join("lib/slurm/gpu_affinity.so")).expect("kept"),
        "someone's"
    );
}
