//! `gpu-affinity explain` and `fixture` run as a user runs them, on real topology files.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;
use gpu_affinity::sources;
use gpu_affinity_test_support::shared_topologies;
use serde_json::Value;

use common::gpu_affinity;

/// Every topology XML under ../shared/topologies except NCCL graph files.
fn topology_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let dirs = std::fs::read_dir(shared_topologies())
        .expect("../shared/topologies must exist (CI has it)");
    for dir in dirs.flatten() {
        for file in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = file.path();
            let is_xml = path.extension().is_some_and(|e| e == "xml");
            if is_xml && !path.to_string_lossy().contains("graph") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(
        files.len() >= 10,
        "expected the shared topology files, found {files:?}"
    );
    files
}

fn explain_json(path: &Path, mode: &str) -> (Output, Value) {
    let out = gpu_affinity(&[
        "explain",
        "--topology",
        &path.to_string_lossy(),
        "--mode",
        mode,
        "--json",
    ]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: explain --json printed no JSON ({e}): {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, json)
}

/// Strict refuses exactly when some GPU has no fabric NIC on its own NUMA node; prefer always
/// plans; every rank's CPUs lie inside its GPU's NUMA node and no two ranks share a CPU.
#[test]
fn explain_on_every_real_topology_file() {
    for path in topology_files() {
        let machine = sources::read_machine_xml(&path).expect("parses");
        let fabric_numas: Vec<Option<u32>> = machine
            .fabric_nics()
            .iter()
            .map(|n| machine.numa_of(n.pci))
            .collect();
        let every_gpu_has_local_nic = machine.gpus.iter().all(|g| {
            let numa = machine.numa_of(g.pci);
            numa.is_some() && fabric_numas.contains(&numa)
        });

        let (strict, strict_json) = explain_json(&path, "strict");
        let code = strict.status.code();
        let violations = strict_json["violations"]
            .as_array()
            .expect("violations array");
        let local_nic_violations = violations
            .iter()
            .filter(|v| v["kind"] == "no_local_nic")
            .count();
        assert_eq!(
            local_nic_violations == 0,
            every_gpu_has_local_nic,
            "{}: {violations:?}",
            path.display()
        );
        if violations.is_empty() {
            assert_eq!(code, Some(0), "{}", path.display());
        } else {
            assert_eq!(code, Some(2), "{}", path.display());
            let stderr = String::from_utf8_lossy(&strict.stderr);
            assert_eq!(
                stderr.lines().count(),
                violations.len(),
                "{}: one line per violation: {stderr}",
                path.display()
            );
        }

        let (prefer, prefer_json) = explain_json(&path, "prefer");
        assert_eq!(
            prefer.status.code(),
            Some(0),
            "{}: prefer always plans",
            path.display()
        );
        check_ranks(&machine, &prefer_json, &path);
    }
}

fn check_ranks(machine: &Machine, json: &Value, path: &Path) {
    let ranks = json["ranks"].as_array().expect("ranks array");
    assert_eq!(
        ranks.len(),
        machine.gpus.len().max(1),
        "{}: one rank per GPU",
        path.display()
    );
    let mut seen = CpuSet::new();
    for rank in ranks {
        let cpus =
            CpuSet::parse_list(rank["cpus"].as_str().expect("cpus string")).expect("cpulist");
        assert!(
            seen.is_disjoint(&cpus),
            "{}: rank CPUs overlap: {rank}",
            path.display()
        );
        seen = seen.union(&cpus);
        for gpu in rank["gpus"].as_array().expect("gpus") {
            let pci: PciAddr = gpu
                .as_str()
                .expect("pci string")
                .parse()
                .expect("canonical PCI address");
            assert_eq!(pci.to_string(), gpu.as_str().unwrap_or_default());
            if let Some(numa) = machine.numa_of(pci).and_then(|n| machine.numa_node(n))
                && !numa.cpus.is_empty()
            {
                assert!(
                    cpus.is_subset(&numa.cpus),
                    "{}: rank {rank} CPUs outside the GPU's NUMA node",
                    path.display()
                );
            }
        }
        for nic in rank["nics"].as_array().expect("nics") {
            let pci: PciAddr = nic["pci"]
                .as_str()
                .expect("pci")
                .parse()
                .expect("canonical PCI address");
            assert!(
                machine.fabric_nics().iter().any(|n| n.pci == pci),
                "{}: {pci} is not a fabric NIC",
                path.display()
            );
        }
    }
}

#[test]
fn bad_input_is_one_line_and_exit_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.xml");
    std::fs::write(&bad, "<system version=\"1\"><cpu numaid=\"x\"").expect("write");
    let cases: Vec<Vec<String>> = vec![
        vec![
            "explain".into(),
            "--topology".into(),
            bad.to_string_lossy().into_owned(),
        ],
        vec![
            "explain".into(),
            "--topology".into(),
            "/nonexistent/topo.xml".into(),
        ],
        vec![
            "explain".into(),
            "--machine".into(),
            "no-such-machine".into(),
        ],
        vec![
            "explain".into(),
            "--machine".into(),
            "p5.48xlarge".into(),
            "--gpus".into(),
            "9".into(),
        ],
        vec![
            "explain".into(),
            "--machine".into(),
            "p5.48xlarge".into(),
            "--cpus".into(),
            "3-1".into(),
        ],
        vec![
            "explain".into(),
            "--machine".into(),
            "p5.48xlarge".into(),
            "--tasks".into(),
            "0".into(),
        ],
    ];
    for args in cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = gpu_affinity(&argv);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{args:?}: one line: {stderr}"
        );
        assert!(stderr.starts_with("gpu-affinity: "), "{args:?}: {stderr}");
    }
    let out = gpu_affinity(&["explain", "--machine", "p5.48xlarge", "--mode", "bogus"]);
    assert_ne!(out.status.code(), Some(0));
}

/// The p5 example of issue 2: rank 0 gets GPU 0000:53:00.0 and the four EFAs on its switch.
#[test]
fn p5_rank_zero_gets_its_four_efas() {
    let out = gpu_affinity(&["explain", "--machine", "p5.48xlarge", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    let rank0 = &json["ranks"][0];
    assert_eq!(rank0["gpus"][0], "0000:53:00.0");
    let nics: Vec<&str> = rank0["nics"]
        .as_array()
        .expect("nics")
        .iter()
        .filter_map(|n| n["pci"].as_str())
        .collect();
    assert_eq!(
        nics,
        [
            "0000:4f:00.0",
            "0000:50:00.0",
            "0000:51:00.0",
            "0000:52:00.0"
        ]
    );
    assert_eq!(rank0["mems"], serde_json::json!([0]));
}

/// A fixture written by the command reads back as the same machine the catalog describes.
#[test]
fn fixture_then_explain_from_the_tree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("node");
    let out = gpu_affinity(&[
        "fixture",
        "--machine",
        "BM.GPU.H100.8",
        "--out",
        &out_dir.to_string_lossy(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_catalog = gpu_affinity(&["explain", "--machine", "BM.GPU.H100.8", "--json"]);
    let from_tree = gpu_affinity(&[
        "explain",
        "--sysfs-root",
        &out_dir.to_string_lossy(),
        "--json",
    ]);
    assert!(
        from_tree.status.success(),
        "{}",
        String::from_utf8_lossy(&from_tree.stderr)
    );
    let a: Value = serde_json::from_slice(&from_catalog.stdout).expect("json");
    let b: Value = serde_json::from_slice(&from_tree.stdout).expect("json");
    assert_eq!(a["ranks"], b["ranks"]);
    // A second write into the same, now non-empty, directory is refused.
    let again = gpu_affinity(&[
        "fixture",
        "--machine",
        "BM.GPU.H100.8",
        "--out",
        &out_dir.to_string_lossy(),
    ]);
    assert_eq!(again.status.code(), Some(1));
}

/// The tree is for slurmstepd and job users too: world-readable (dirs 0755, files 0644)
/// even when the admin's umask is 077.
#[test]
fn fixture_tree_is_world_readable_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("node");
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg("umask 077 && exec \"$0\" fixture --machine BM.GPU.H100.8 --out \"$1\"")
        .arg(env!("CARGO_BIN_EXE_gpu-affinity"))
        .arg(&out_dir)
        .output()
        .expect("run gpu-affinity under umask 077");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut dirs, mut files) = (0, 0);
    let mut pending = vec![out_dir.clone()];
    while let Some(current) = pending.pop() {
        let mode = std::fs::metadata(&current)
            .expect("stat")
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o755, "{}", current.display());
        dirs += 1;
        for entry in std::fs::read_dir(&current).expect("read_dir").flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() {
                assert_eq!(
                    meta.permissions().mode() & 0o7777,
                    0o644,
                    "{}",
                    path.display()
                );
                files += 1;
            }
        }
    }
    assert!(dirs > 10 && files > 100, "{dirs} dirs, {files} files");
}

/// `--gpus` takes Slurm's ids through gres.conf, as the plugin does: with
/// `File=/dev/nvidia[5,4]` id 0 is the GPU with minor 5, not the first by minor.
/// The PCI address of the GPU at /dev/nvidia`minor`.
fn pci_of_minor(machine: &Machine, minor: u32) -> String {
    machine
        .gpus
        .iter()
        .find(|g| g.minor == Some(minor))
        .map(|g| g.pci.to_string())
        .expect("minor")
}

/// Each rank's first GPU in explain's JSON.
fn first_gpus(json: &Value) -> Vec<String> {
    json["ranks"]
        .as_array()
        .expect("ranks")
        .iter()
        .map(|r| r["gpus"][0].as_str().expect("gpu").to_string())
        .collect()
}

#[test]
fn gpus_are_numbered_through_gres_conf() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let gres = dir.path().join("gres.conf");
    std::fs::write(&gres, "Name=gpu File=/dev/nvidia[5,4]\n").expect("write");
    let owner = std::fs::metadata(dir.path())
        .expect("meta")
        .uid()
        .to_string();
    let gres_arg = gres.to_string_lossy().into_owned();
    let machine = gpu_affinity::catalog::machine("p5.48xlarge").expect("catalog");
    let by_minor = |m: u32| pci_of_minor(&machine, m);
    let out = gpu_affinity(&[
        "explain",
        "--machine",
        "p5.48xlarge",
        "--gpus",
        "0,1",
        "--gres-conf",
        &gres_arg,
        "--trusted-owner",
        &owner,
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    let gpus = first_gpus(&json);
    assert_eq!(gpus, vec![by_minor(5), by_minor(4)]);
    let out = gpu_affinity(&[
        "explain",
        "--machine",
        "p5.48xlarge",
        "--gpus",
        "2",
        "--gres-conf",
        &gres_arg,
        "--trusted-owner",
        &owner,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not among the node's 2 GPU ids"));
}

/// The config's `[plugin] gres_conf` (a plugin setting, like plugstack `gres_conf=`)
/// numbers explain's GPUs as it numbers the plugin's.
#[test]
fn the_configs_gres_conf_numbers_the_gpus_too() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let gres = dir.path().join("gres.conf");
    std::fs::write(&gres, "Name=gpu File=/dev/nvidia[5,4]\n").expect("write");
    let config = dir.path().join("config.toml");
    let write_config = |gres: &Path| {
        let text = format!("[plugin]\ngres_conf = \"{}\"\n", gres.display());
        std::fs::write(&config, text).expect("write config");
    };
    let owner = std::fs::metadata(dir.path())
        .expect("meta")
        .uid()
        .to_string();
    let config_arg = config.to_string_lossy().into_owned();
    let explain = || {
        gpu_affinity(&[
            "explain",
            "--machine",
            "p5.48xlarge",
            "--gpus",
            "0,1",
            "--config",
            &config_arg,
            "--trusted-owner",
            &owner,
            "--json",
        ])
    };
    write_config(&gres);
    let out = explain();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let machine = gpu_affinity::catalog::machine("p5.48xlarge").expect("catalog");
    let by_minor = |m: u32| pci_of_minor(&machine, m);
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    let gpus = first_gpus(&json);
    assert_eq!(gpus, vec![by_minor(5), by_minor(4)]);
    // Named there and missing: an error, as in the plugin.
    write_config(&dir.path().join("absent.conf"));
    let out = explain();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("absent.conf does not exist"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
