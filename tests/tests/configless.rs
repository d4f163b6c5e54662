//! Configless compute nodes, as HyperPod and slurm-gcp run them: slurmd starts with
//! `--conf-server` and the test's own munge socket (`--authinfo`) and nothing else, and
//! fetches slurm.conf, plugstack.conf, gres.conf, cgroup.conf and topology.conf from
//! slurmctld into its conf-cache. The plugin in slurmstepd then finds its plugstack line,
//! Slurm's GPU numbering and the placement topology there, never in the controller's
//! directory. Runs on the series under test from 24.11 (`GPU_AFFINITY_SLURM_SERIES`; 22.05 has
//! no `slurmd --authinfo`, see `ClusterBuilder::start_or_skip`); the prolog's side is
//! in health.rs.

mod common;

use std::path::Path;

use common::{ND_H100_V5, check_step, machine, probe_whole_node, start};
use gpu_affinity::slurm::version::Series;
use gpu_affinity_tests::{ClientOptions, Cluster, ClusterBuilder, SlurmSeries, StepOutput};

/// A two-task step on `nodes` running `command`, inside a four-node allocation.
fn step_in_allocation(cluster: &Cluster, nodes: &str, command: &str) -> StepOutput {
    let argv = [
        "salloc",
        "-N4",
        "--gres=gpu:1",
        "srun",
        "-N2",
        "-n2",
        "-w",
        nodes,
        "sh",
        "-c",
        command,
    ];
    cluster
        .client(&argv, &ClientOptions::bounded(60))
        .expect("salloc")
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none())
}

/// What a configless slurmd must have fetched into its cache.
fn assert_fetched(cluster: &Cluster, node: &str, files: &[&str]) {
    let cache = cluster
        .conf_cache(node)
        .expect("a configless cluster has a conf-cache");
    for f in files {
        assert!(
            cache.join(f).is_file(),
            "Slurm {}: {node}'s conf-cache has no {f} ({}){}",
            cluster.series(),
            cache.display(),
            cluster.log_tails()
        );
    }
}

#[test]
fn a_configless_node_binds_from_the_fetched_config() {
    let m = machine(ND_H100_V5);
    let Some(mut cluster) = start(
        "a_configless_node_binds_from_the_fetched_config",
        &m,
        ClusterBuilder::new().configless(),
    ) else {
        return;
    };
    let node = cluster.node().to_owned();
    assert_fetched(
        &cluster,
        &node,
        &["slurm.conf", "plugstack.conf", "gres.conf"],
    );
    // Proof that slurmstepd reads the fetched copy, not the controller's: the
    // controller's gres.conf is now one the plugin refuses (a key Slurm does not
    // know). slurmctld read it at start and does not again until a reconfigure,
    // and srun never reads gres.conf.
    let ctld_gres = cluster.dir().join("gres.conf");
    assert!(
        ctld_gres.is_file(),
        "no controller gres.conf at {}",
        ctld_gres.display()
    );
    std::fs::write(&ctld_gres, "Name=gpu NotAGresKey=1\n").expect("spoil gres.conf");
    let out = probe_whole_node(&cluster, Some("strict"), 8, &ClientOptions::default());
    check_step(&m, &out, "strict", 1);
    // A bad value is still refused through the fetched plugstack.conf, node left idle.
    let bad = probe_whole_node(&cluster, Some("bogus"), 2, &ClientOptions::default());
    assert_eq!(bad.code(), Some(255), "{bad}");
    assert!(cluster.daemons_alive(), "{}", cluster.log_tails());
}

/// The node backstop on configless nodes: inside an allocation over both blocks, srun
/// cannot tell which nodes a step gets, so each node's slurmstepd decides from the
/// topology.conf its slurmd fetched.
#[test]
fn a_configless_node_backstop_refuses_a_strict_step_across_blocks() {
    backstop_refuses_across_blocks(
        "a_configless_node_backstop_refuses_a_strict_step_across_blocks",
        "topology.conf",
        "BlockName=b1 Nodes=pa1,pb1\nBlockName=b2 Nodes=pa2,pb2\n",
    );
}

/// The same blocks in topology.yaml (Slurm 25.05+ reads it first; slurmctld serves it
/// to configless nodes with the rest): the node backstop decides from the fetched copy.
#[test]
fn a_configless_node_backstop_reads_the_fetched_topology_yaml() {
    let series = SlurmSeries::from_env().map_or_else(|_| SlurmSeries::host().name, |s| s.name);
    if Series::parse(&series).is_none_or(|s| {
        s < Series {
            major: 25,
            minor: 5,
        }
    }) {
        eprintln!(
            "SKIP a_configless_node_backstop_reads_the_fetched_topology_yaml: Slurm {series} \
             reads no topology.yaml (25.05+)"
        );
        return;
    }
    backstop_refuses_across_blocks(
        "a_configless_node_backstop_reads_the_fetched_topology_yaml",
        "topology.yaml",
        "- topology: default\n  cluster_default: true\n  block:\n    blocks:\n    \
         - block: b1\n      nodes: pa1,pb1\n    - block: b2\n      nodes: pa2,pb2\n",
    );
}

/// Four configless nodes in blocks b1 = pa1,pb1 and b2 = pa2,pb2 given by `file`
/// (`text`): a strict step on pa1,pa2 is refused by the nodes, one on pa1,pb1 runs.
fn backstop_refuses_across_blocks(test: &str, file: &str, text: &str) {
    let work = tempfile::tempdir().expect("tempdir");
    let m = gpu_affinity::sources::fixture::realized(
        &gpu_affinity_tests::fixture::test_machine("nd-h100-v5-2cpu").expect("test machine"),
    );
    let Some(mut cluster) = ClusterBuilder::new()
        .nodes(&["pa1", "pa2", "pb1", "pb2"])
        .machine(m)
        .with_plugin()
        .plugin_arg("default", "strict")
        .conf_file(file, text)
        .configless()
        .start_or_skip(test)
        .expect("cluster")
    else {
        return;
    };
    for node in ["pa1", "pa2"] {
        assert_fetched(&cluster, node, &["slurm.conf", "plugstack.conf", file]);
    }
    let marks = work.path().join("marks");
    std::fs::create_dir(&marks).expect("marks");
    std::fs::set_permissions(&marks, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("mode");
    let touch = format!("touch {}/ran-$SLURMD_NODENAME", marks.display());
    // Inside a four-node allocation srun's environment lists the job's nodes, not the
    // step's two: srun leaves it to the nodes, which decide from their fetched files.
    let out = step_in_allocation(&cluster, "pa1,pa2", &touch);
    let refusal = "gpu-affinity: step spans 2 placement blocks: b1=[pa1] b2=[pa2]";
    assert!(!out.success() && out.stderr.contains(refusal), "{out}");
    assert!(empty(&marks), "a task ran: {out}");
    let node_logs = cluster.log("slurmd-pa1.log") + &cluster.log("slurmd-pa2.log");
    assert!(
        node_logs.contains(refusal),
        "the nodes did not refuse: {out}"
    );
    // Inside one block the same allocation's step runs.
    let out = step_in_allocation(&cluster, "pa1,pb1", &touch);
    assert!(out.success(), "{out}");
    assert!(!empty(&marks), "{out}");
    assert!(cluster.daemons_alive(), "{}", cluster.log_tails());
}
