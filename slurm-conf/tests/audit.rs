//! `gpu-affinity audit` as an admin runs it: golden audits of every catalog machine,
//! fixture trees with aligned and misaligned NICs, storage mounts, and bad input.
//! Goldens regenerate with `GOLDEN_UPDATE=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpu_affinity::catalog;
use gpu_affinity::sources::fixture::write_fixture;
use serde_json::Value;

/// The cluster an audit is run against: slurm.conf, topology.conf, an admin config and
/// an empty profiles.d in a temp dir, so the machine's own /etc never leaks in.
struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    fn new(slurm_conf: &str, topology_conf: Option<&str>, config: &str) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("slurm.conf"), slurm_conf).expect("slurm.conf");
        if let Some(t) = topology_conf {
            std::fs::write(dir.path().join("topology.conf"), t).expect("topology.conf");
        }
        std::fs::write(dir.path().join("config.toml"), config).expect("config");
        std::fs::create_dir(dir.path().join("profiles.d")).expect("profiles.d");
        Cluster { dir }
    }

    /// Another file next to slurm.conf (an included one).
    fn with_file(self, name: &str, text: &str) -> Cluster {
        std::fs::write(self.dir.path().join(name), text).expect("write");
        self
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }

    fn audit(&self, extra: &[&str]) -> Output {
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::metadata(self.dir.path())
            .expect("meta")
            .uid()
            .to_string();
        let mut args: Vec<String> = ["audit", "--slurm-conf"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.push(self.path("slurm.conf"));
        args.extend(["--config".into(), self.path("config.toml")]);
        args.extend(["--profiles-dir".into(), self.path("profiles.d")]);
        args.extend(["--trusted-owner".into(), uid]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Command::new(env!("CARGO_BIN_EXE_gpu-affinity"))
            .args(&args)
            .env_remove("SLURM_CONF")
            .output()
            .expect("run gpu-affinity")
    }

    /// JSON output with the temp dir's path replaced, so goldens do not depend on it.
    fn audit_json(&self, extra: &[&str]) -> (Output, Value) {
        let mut args = extra.to_vec();
        args.push("--json");
        let out = self.audit(&args);
        let text = String::from_utf8_lossy(&out.stdout)
            .replace(&*self.dir.path().to_string_lossy(), "<cluster>");
        let json = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "{e}: {text}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out, json)
    }
}

const BLOCK_CONF: &str = "ClusterName=c\nTopologyPlugin=topology/block\n\
    PartitionName=gpu Nodes=gpu[1-4] Default=YES\n";
const BLOCKS: &str = "BlockName=b1 Nodes=gpu[1-2]\nBlockName=b2 Nodes=gpu[3-4]\n";
const FSX: &str = "[[storage.mount]]\npath = \"/fsx\"\ntype = \"lustre\"\n";

fn finding<'v>(json: &'v Value, id: &str) -> &'v Value {
    json["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {json}"))
}

/// The golden compare the core tests use (GOLDEN_UPDATE=1 rewrites).
#[path = "../../core/tests/common/golden.rs"]
#[allow(dead_code)]
mod golden;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden-audit")
}

#[test]
fn every_catalog_machine_audits_as_its_golden() {
    let cluster = Cluster::new(BLOCK_CONF, Some(BLOCKS), FSX);
    let mut mismatches = Vec::new();
    for entry in catalog::entries() {
        let (out, json) = cluster.audit_json(&[
            "--machine",
            &entry.name,
            "--workload",
            "pretrain",
            "--node",
            "gpu2",
        ]);
        // A catalog machine has no mount table: storage is not checked, never failed.
        assert_eq!(
            finding(&json, "storage.mounts")["status"],
            "info",
            "{}",
            entry.name
        );
        assert_eq!(
            finding(&json, "placement.node")["status"],
            "pass",
            "{}",
            entry.name
        );
        let failed = json["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["status"] == "fail");
        assert_eq!(
            out.status.code(),
            Some(i32::from(failed)),
            "{}: {json}",
            entry.name
        );
        mismatches.extend(golden::check_golden(&golden_dir(), &entry.name, &json));
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[test]
fn an_aligned_fixture_passes_and_a_misaligned_one_fails() {
    // A ParallelCluster-made cluster: its slurm.conf includes the file pcluster manages.
    let conf = format!("{BLOCK_CONF}include slurm_parallelcluster.conf\n");
    let cluster = Cluster::new(&conf, Some(BLOCKS), FSX).with_file(
        "slurm_parallelcluster.conf",
        "PartitionName=train Nodes=gpu[3-4]\n",
    );
    let machine = catalog::machine("p5.48xlarge").expect("catalog");
    let aligned = tempfile::tempdir().expect("tempdir");
    write_fixture(&machine, aligned.path()).expect("fixture");
    std::fs::write(
        aligned.path().join("proc/mounts"),
        "fsx@tcp:/x /fsx lustre rw,relatime 0 0\n",
    )
    .expect("mounts");
    let (out, json) = cluster.audit_json(&[
        "--sysfs-root",
        &aligned.path().to_string_lossy(),
        "--workload",
        "pretrain",
        "--node",
        "gpu3",
    ]);
    for f in json["findings"].as_array().expect("findings") {
        assert_eq!(f["status"], "pass", "{f}");
    }
    assert_eq!(out.status.code(), Some(0));

    // Every EFA NIC of NUMA node 1 moved to node 0: GPUs 4-7 have no local NIC.
    let mut moved = machine.clone();
    let nics: Vec<_> = moved.fabric_nics().iter().map(|n| n.pci).collect();
    for d in moved.pci.iter_mut().filter(|d| nics.contains(&d.addr)) {
        d.numa_node = Some(0);
    }
    let misaligned = tempfile::tempdir().expect("tempdir");
    write_fixture(&moved, misaligned.path()).expect("fixture");
    let root = misaligned.path().to_string_lossy().into_owned();
    let (out, json) = cluster.audit_json(&[
        "--sysfs-root",
        &root,
        "--workload",
        "pretrain",
        "--node",
        "gpu3",
    ]);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(finding(&json, "fabric.numa")["status"], "fail");
    assert_eq!(finding(&json, "plan.gpu_nic")["status"], "fail");
    // The tree has no proc/mounts: storage is not checked.
    assert_eq!(finding(&json, "storage.mounts")["status"], "info");
    // Inference on one node only notes it; exit 0.
    let (out, json) = cluster.audit_json(&[
        "--sysfs-root",
        &root,
        "--workload",
        "inference",
        "--node",
        "gpu3",
    ]);
    assert_eq!(finding(&json, "fabric.numa")["status"], "info");
    assert_eq!(out.status.code(), Some(0), "{json}");
}

/// The shared topology files (never copied into the project; a test copies one into its
/// own temp tree).
fn shared_topology(rel: &str) -> PathBuf {
    gpu_affinity_test_support::shared_topologies().join(rel)
}

#[test]
fn an_azure_vendor_topology_file_is_used_and_a_swapped_one_fails() {
    let cluster = Cluster::new(BLOCK_CONF, Some(BLOCKS), "");
    let machine = catalog::machine("Standard_ND96isr_H100_v5").expect("catalog");
    let tree = tempfile::tempdir().expect("tempdir");
    write_fixture(&machine, tree.path()).expect("fixture");
    let vendor = tree.path().join("opt/microsoft/ndv5-topo.xml");
    std::fs::create_dir_all(vendor.parent().expect("dir")).expect("mkdir");
    let real = std::fs::read_to_string(shared_topology("azhpc-images/ndv5-topo.xml"))
        .expect("../shared/topologies/azhpc-images/ndv5-topo.xml");
    std::fs::write(&vendor, &real).expect("vendor file");
    let root = tree.path().to_string_lossy().into_owned();
    let args = ["--sysfs-root", root.as_str(), "--node", "gpu1"];
    let audit = |workload: &str| {
        let mut a = args.to_vec();
        a.extend(["--workload", workload]);
        cluster.audit_json(&a).1
    };
    let nccl = finding(&audit("pretrain"), "nccl.topology").clone();
    assert_eq!(nccl["status"], "pass", "{nccl}");

    // The old images' file: the two NUMA masks swapped (azhpc-images before PR #391).
    let (m0, m1) = ("00000000,0000ffff,ffffffff", "ffffffff,ffff0000,00000000");
    assert!(
        real.contains(m0) && real.contains(m1),
        "the masks moved in the file"
    );
    let swapped = real
        .replace(m0, "MASK0")
        .replace(m1, m0)
        .replace("MASK0", m1);
    std::fs::write(&vendor, swapped).expect("vendor file");
    let json = audit("pretrain");
    let nccl = finding(&json, "nccl.topology");
    assert_eq!(nccl["status"], "fail", "{nccl}");
    assert!(
        nccl["evidence"][0]
            .as_str()
            .is_some_and(|e| e.contains("swapped")),
        "{nccl}"
    );
    assert_eq!(
        finding(&audit("finetune"), "nccl.topology")["status"],
        "warn"
    );
}

#[test]
fn a_missing_mount_and_a_missing_topology_fail_pretrain() {
    let cluster = Cluster::new(
        "TopologyPlugin=topology/tree\nPartitionName=p Nodes=ALL\n",
        None,
        FSX,
    );
    let machine = catalog::machine("p5.48xlarge").expect("catalog");
    let tree = tempfile::tempdir().expect("tempdir");
    write_fixture(&machine, tree.path()).expect("fixture");
    std::fs::write(tree.path().join("proc/mounts"), "tmpfs /fsx tmpfs rw 0 0\n").expect("mounts");
    let root = tree.path().to_string_lossy().into_owned();
    let out = cluster.audit(&[
        "--sysfs-root",
        &root,
        "--workload",
        "pretrain",
        "--node",
        "n1",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL  storage.mounts"), "{text}");
    assert!(
        text.contains("      /fsx is tmpfs, expected lustre"),
        "{text}"
    );
    assert!(
        text.contains(
            "TopologyPlugin=topology/tree but no topology.yaml or topology.conf next to slurm.conf"
        ),
        "{text}"
    );
    assert!(
        text.contains("gpu-affinity conf topology --from"),
        "advice: {text}"
    );
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let cluster = Cluster::new(BLOCK_CONF, Some(BLOCKS), "");
    let cases: [(&[&str], &str); 4] = [
        (
            &["--machine", "p5.48xlarge", "--workload", "training"],
            "'training': expected pretrain, finetune, inference",
        ),
        (
            &["--machine", "no-such-machine", "--workload", "pretrain"],
            "unknown machine \"no-such-machine\"",
        ),
        (
            &[
                "--sysfs-root",
                "/nonexistent/tree",
                "--workload",
                "pretrain",
            ],
            "/nonexistent/tree",
        ),
        (&["--machine", "p5.48xlarge"], "--workload"),
    ];
    for (args, want) in cases {
        let out = cluster.audit(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // A named slurm.conf that is not there, and a config with a typo.
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-affinity"))
        .args([
            "audit",
            "--machine",
            "p5.48xlarge",
            "--workload",
            "pretrain",
            "--slurm-conf",
            "/nonexistent/slurm.conf",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "gpu-affinity: --slurm-conf /nonexistent/slurm.conf does not exist\n"
    );
    let typo = Cluster::new(BLOCK_CONF, None, "[storag]\n");
    let out = typo.audit(&["--machine", "p5.48xlarge", "--workload", "pretrain"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
