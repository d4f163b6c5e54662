//! The vendor recipes (packaging/recipes/) run against Slurm prefixes laid out the way each
//! cloud lays them out, as far as that goes without the cloud: the package step is skipped
//! (GPU_AFFINITY_SKIP_PACKAGE), `gpu-affinity` is this build, the plugin builds are fakes.

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{plugins, slurm_prefix, snapshot, version_header, write};

fn recipe(root: &Path, name: &str, args: &[&str], env: &[(&str, &Path)]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging/recipes")
        .join(name);
    let config = root.join("config.toml");
    if !config.exists() {
        write(&config, "# sample\n");
    }
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .args(args)
        .env("GPU_AFFINITY_SKIP_PACKAGE", "1")
        .env("GPU_AFFINITY_BIN", env!("CARGO_BIN_EXE_gpu-affinity"))
        .env("GPU_AFFINITY_PLUGINS_DIR", plugins(root))
        .env("GPU_AFFINITY_CONFIG", &config);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the recipe");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{name} {args:?}: {}\n{text}",
        out.status
    );
    text
}

fn link_of(path: &Path) -> PathBuf {
    fs::read_link(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn hyperpod_controller_and_configless_compute() {
    for (role, series) in [("controller", "24.11"), ("compute", "25.11")] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let real = root.join(format!("opt/slurm-{series}"));
        let number = if series == "24.11" {
            "0x180b05"
        } else {
            "0x190b05"
        };
        version_header(&real, number);
        fs::create_dir_all(real.join("lib/slurm")).expect("mkdir");
        if role == "controller" {
            write(&real.join("etc/slurm.conf"), "ClusterName=hp\n");
        }
        let prefix = root.join("opt/slurm");
        symlink(format!("slurm-{series}"), &prefix).expect("symlink");
        let said = recipe(
            root,
            "hyperpod-lifecycle.sh",
            &[role],
            &[("SLURM_PREFIX", &prefix)],
        );
        assert!(
            link_of(&real.join("lib/slurm/gpu_affinity.so"))
                .ends_with(format!("slurm-{series}/gpu_affinity.so")),
            "{said}"
        );
        let snippet = real.join("etc/plugstack.conf.d/gpu-affinity.conf");
        assert_eq!(snippet.exists(), role == "controller", "{said}");
        let config = fs::read_to_string(root.join("config.toml")).expect("config");
        assert!(config.contains("handoff = \"hyperpod\""), "{config}");
    }
}

#[test]
fn parallelcluster_head_node_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "opt/slurm", "0x190b08", "lib/slurm");
    write(&prefix.join("etc/slurm.conf"), "ClusterName=pc\n");
    write(
        &prefix.join("etc/plugstack.conf"),
        &format!("include {}/etc/plugstack.conf.d/*\n", prefix.display()),
    );
    let cfn = root.join("cfnconfig");
    write(&cfn, "cfn_node_type=ComputeFleet\n");
    let env = [
        ("SLURM_PREFIX", prefix.as_path()),
        ("PCLUSTER_CFNCONFIG", &cfn),
    ];
    recipe(root, "parallelcluster-on-node-configured.sh", &[], &env);
    assert!(!prefix.join("lib/slurm/gpu_affinity.so").exists());
    write(&cfn, "cfn_node_type=HeadNode\n");
    let said = recipe(root, "parallelcluster-on-node-configured.sh", &[], &env);
    assert!(
        link_of(&prefix.join("lib/slurm/gpu_affinity.so")).ends_with("slurm-25.11/gpu_affinity.so"),
        "{said}"
    );
    assert!(
        prefix
            .join("etc/plugstack.conf.d/gpu-affinity.conf")
            .exists()
    );
}

#[test]
fn cyclecloud_usr_with_prolog_dir() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "usr", "0x190b05", "lib64/slurm");
    let sched = root.join("sched/c1");
    write(&sched.join("slurm.conf"), "Prolog=/etc/slurm/prolog.d/*\n");
    let etc = root.join("etc/slurm");
    fs::create_dir_all(root.join("etc")).expect("mkdir");
    symlink(&sched, &etc).expect("symlink");
    write(
        &sched.join("plugstack.conf"),
        &format!("include {}/plugstack.conf.d/*\n", etc.display()),
    );
    let libexec = root.join("usr/libexec/gpu-affinity");
    let env = [
        ("SLURM_PREFIX", prefix.as_path()),
        ("SLURM_ETC", &etc),
        ("GPU_AFFINITY_LIBEXEC", &libexec),
    ];
    let said = recipe(root, "cyclecloud-cluster-init.sh", &[], &env);
    assert!(
        sched.join("plugstack.conf.d/gpu-affinity.conf").exists(),
        "{said}"
    );
    assert_eq!(
        link_of(&sched.join("prolog.d/50-gpu-affinity")),
        libexec.join("gpu-affinity-prolog")
    );
    // Run twice, as cluster-init does on a reboot: nothing changes.
    let before = snapshot(root);
    let again = recipe(root, "cyclecloud-cluster-init.sh", &[], &env);
    assert!(again.contains("unchanged"), "{again}");
    assert_eq!(snapshot(root), before, "{again}");
}

#[test]
fn cluster_toolkit_usr_local() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "usr/local", "0x1a0505", "lib/slurm");
    write(
        &prefix.join("etc/slurm/plugstack.conf"),
        "required /usr/local/lib/slurm/spank_pyxis.so\n",
    );
    let env = [("SLURM_PREFIX", prefix.as_path())];
    let said = recipe(root, "cluster-toolkit-startup.sh", &["controller"], &env);
    let conf = fs::read_to_string(prefix.join("etc/slurm/plugstack.conf")).expect("conf");
    assert!(
        conf.lines()
            .last()
            .is_some_and(|l| l.starts_with("include /")),
        "{said}\n{conf}"
    );
    let config = fs::read_to_string(root.join("config.toml")).expect("config");
    assert!(config.contains("handoff = \"slurm-gcp\""), "{config}");
    // A second run keeps the admin's [drain] table as it is.
    let again = recipe(root, "cluster-toolkit-startup.sh", &["controller"], &env);
    assert!(again.contains("handoff left as it is"), "{again}");
}

/// ansible-core, from PyPI into a venv under target/ on first use, kept for later runs.
fn ansible_playbook() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/ansible-venv");
    let playbook = venv.join("bin/ansible-playbook");
    if !playbook.exists() {
        let run = |program: &Path, args: &[&str]| {
            let status = Command::new("timeout")
                .arg("600")
                .arg(program)
                .args(args)
                .status()
                .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
            assert!(status.success(), "{} {args:?}: {status}", program.display());
        };
        run(
            Path::new("python3"),
            &["-m", "venv", venv.to_str().expect("utf-8")],
        );
        run(
            &venv.join("bin/pip"),
            &["install", "--quiet", "ansible-core==2.18.*"],
        );
    }
    playbook
}

/// The OCI HPC stack's task list, run by ansible-playbook on this machine (`-c local`)
/// against an Ubuntu-style OCI node in a scratch dir: Slurm under `/usr/local`, config in
/// `/etc/slurm`, plugstack.conf including `plugstack.conf.d/*.conf`.
#[test]
fn oci_hpc_ansible_task_usr_local() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let prefix = slurm_prefix(root, "usr/local", "0x190b05", "lib/slurm");
    let etc = root.join("etc/slurm");
    write(&etc.join("slurm.conf"), "ClusterName=oci\n");
    let conf_text = format!("include {}/plugstack.conf.d/*.conf\n", etc.display());
    write(&etc.join("plugstack.conf"), &conf_text);
    let task = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/recipes/oci-hpc-task.yml");
    let playbook = root.join("site.yml");
    write(
        &playbook,
        &format!(
            "- hosts: localhost\n  gather_facts: true\n  tasks:\n    - ansible.builtin.include_tasks: {}\n",
            task.display()
        ),
    );
    let ansible = ansible_playbook();
    let vars = serde_json::json!({
        "gpu_affinity_skip_package": true,
        "gpu_affinity_bin": env!("CARGO_BIN_EXE_gpu-affinity"),
        "gpu_affinity_slurm_prefix": prefix,
        "gpu_affinity_plugstack_dir": etc.join("plugstack.conf.d"),
        "gpu_affinity_plugins_dir": plugins(root),
        "ansible_python_interpreter": ansible.with_file_name("python3"),
    });
    let play = || {
        let out = Command::new(&ansible)
            .args(["-c", "local", "-i", "localhost,"])
            .arg(&playbook)
            .arg("-e")
            .arg(vars.to_string())
            .env("ANSIBLE_HOME", root.join("ansible-home"))
            .env("ANSIBLE_LOCAL_TEMP", root.join("ansible-tmp"))
            .env("ANSIBLE_NOCOLOR", "1")
            .output()
            .expect("run ansible-playbook");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{}\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            .find(|l| l.starts_with("localhost"))
            .unwrap_or_else(|| panic!("no PLAY RECAP line:\n{text}"))
            .split_whitespace()
            .find_map(|w| w.strip_prefix("changed="))
            .map(str::to_owned)
            .expect("changed= in the recap")
    };
    assert_eq!(play(), "1");
    assert!(
        link_of(&prefix.join("lib/slurm/gpu_affinity.so")).ends_with("slurm-25.11/gpu_affinity.so")
    );
    let snippet =
        fs::read_to_string(etc.join("plugstack.conf.d/gpu-affinity.conf")).expect("snippet");
    assert!(
        snippet.contains(&format!(
            "required {}/lib/slurm/gpu_affinity.so",
            prefix.display()
        )),
        "{snippet}"
    );
    assert_eq!(
        fs::read_to_string(etc.join("plugstack.conf")).expect("conf"),
        conf_text
    );
    // A second run of the play changes nothing and says so.
    let before = (snapshot(&prefix), snapshot(&etc));
    assert_eq!(play(), "0");
    assert_eq!((snapshot(&prefix), snapshot(&etc)), before);
}
