//! A block topology.conf from `conf topology --block-sizes`, on the shape of NVIDIA
//! topograph's medium.yaml case (tests/models/medium.yaml with
//! tests/payloads/test-aws-sim-block.json: capacity blocks under leaves of one spine,
//! block_sizes "2,4"), loaded by real slurmctld 24.11, the series that checks blocks
//! against the base most strictly ("children count lower than bblock_node_cnt").
//! One capacity block has three nodes, more than the base of 2: topograph splits such a
//! domain into several base blocks, ours keeps it one block (slurm-conf
//! tests/topograph_parity.rs, `domains_larger_than_the_base_stay_one_block`); this is
//! what slurmctld does with it.

use std::process::Command;

use gpu_affinity_tests::{ClientOptions, Cluster, ClusterBuilder, plugin};

const NODES: [&str; 5] = ["pa1", "pa2", "pa3", "pb1", "pb2"];

/// Leaves nn-c1 (capacity block cb-1: pa1-pa3) and nn-c2 (cb-2: pb1, pb2) under one
/// spine, as `aws ec2 describe-instance-topology` prints them.
const AWS: &str = r#"{"Instances":[
  {"InstanceId":"i-0a1","InstanceType":"p6e-gb200.36xlarge","NetworkNodes":["nn-core","nn-spine","nn-c1"],"CapacityBlockId":"cb-1"},
  {"InstanceId":"i-0a2","InstanceType":"p6e-gb200.36xlarge","NetworkNodes":["nn-core","nn-spine","nn-c1"],"CapacityBlockId":"cb-1"},
  {"InstanceId":"i-0a3","InstanceType":"p6e-gb200.36xlarge","NetworkNodes":["nn-core","nn-spine","nn-c1"],"CapacityBlockId":"cb-1"},
  {"InstanceId":"i-0b1","InstanceType":"p6e-gb200.36xlarge","NetworkNodes":["nn-core","nn-spine","nn-c2"],"CapacityBlockId":"cb-2"},
  {"InstanceId":"i-0b2","InstanceType":"p6e-gb200.36xlarge","NetworkNodes":["nn-core","nn-spine","nn-c2"],"CapacityBlockId":"cb-2"}
]}"#;

/// Listed out of network order: the blocks must come out by placement anyway.
const NODEMAP: &str = "pb2 i-0b2\npa1 i-0a1\npb1 i-0b1\npa3 i-0a3\npa2 i-0a2\n";

fn admin(args: &[&str]) -> String {
    let cli = plugin::admin_cli().expect("build gpu-affinity");
    let out = Command::new(&cli)
        .args(args)
        .output()
        .expect("run gpu-affinity");
    assert!(
        out.status.success(),
        "gpu-affinity {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn srun(cluster: &Cluster, nodes: usize, list: &str) -> bool {
    let n = format!("-N{nodes}");
    let out = cluster
        .client(
            &["srun", &n, "-w", list, "hostname"],
            &ClientOptions::bounded(30),
        )
        .expect("srun");
    out.success()
}

#[test]
fn block_sizes_given_by_the_admin_load_on_24_11() {
    let work = tempfile::tempdir().expect("tempdir");
    let input = work.path().join("aws.json");
    let map = work.path().join("nodemap");
    std::fs::write(&input, AWS).expect("write input");
    std::fs::write(&map, NODEMAP).expect("write nodemap");
    let text = admin(&[
        "conf",
        "topology",
        "--from",
        "aws",
        &input.display().to_string(),
        "--nodes",
        &map.display().to_string(),
        "--form",
        "block",
        "--block-sizes",
        "2,4",
        "--slurm-series",
        "24.11",
    ]);
    assert!(
        text.contains("BlockName=b1 Nodes=pa[1-3]\nBlockName=b2 Nodes=pb[1-2]\nBlockSizes=2,4\n"),
        "{text}"
    );
    let test = "block_sizes_given_by_the_admin_load_on_24_11";
    let Some(cluster) = ClusterBuilder::new()
        .slurm_series("24.11")
        .gpus(0)
        .conf_line("TopologyPlugin=topology/block")
        .conf_file("topology.conf", &text)
        .nodes(&NODES)
        .start_or_skip(test)
        .unwrap_or_else(|e| panic!("{test}: cannot start the cluster: {e}"))
    else {
        return;
    };
    let out = cluster
        .client(
            &["scontrol", "show", "topology"],
            &ClientOptions::bounded(10),
        )
        .expect("scontrol");
    assert!(out.success(), "{out}");
    let shown = out.stdout;
    for (block, nodes) in [("b1", "pa[1-3]"), ("b2", "pb[1-2]")] {
        assert!(
            shown
                .lines()
                .any(|l| l.contains(&format!("BlockName={block} "))
                    && l.contains(&format!("Nodes={nodes}"))),
            "{block}:\n{shown}"
        );
    }
    // 24.11 shows the base size per block and the spine's aggregate at size 4, which
    // takes the 3-node block whole.
    for block in ["b1", "b2"] {
        assert!(
            shown
                .lines()
                .any(|l| l.contains(&format!("BlockName={block} ")) && l.contains("BlockSize=2")),
            "{block}:\n{shown}"
        );
    }
    assert!(
        shown.lines().any(|l| l.starts_with("AggregatedBlock=")
            && l.contains("Nodes=pa[1-3],pb[1-2]")
            && l.contains("BlockSize=4")),
        "{shown}"
    );
    // A job of the base size inside each block, and one of the aggregate size across
    // both (the 4-node block of the spine).
    assert!(srun(&cluster, 2, "pb1,pb2"), "2 nodes in b2");
    assert!(srun(&cluster, 2, "pa1,pa2"), "2 nodes in b1");
    assert!(
        srun(&cluster, 4, "pa1,pa2,pb1,pb2"),
        "4 nodes in the aggregate"
    );
    // The domain's third node is not lost to the base of 2: a job on the whole
    // 3-node capacity block runs.
    assert!(srun(&cluster, 3, "pa1,pa2,pa3"), "3 nodes: the whole of b1");
}
