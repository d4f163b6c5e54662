//! `gpu-affinity explain --sysfs-root` on Grace trees (OCI GB200-v3.4, Azure ND GB300 v6,
//! AWS p6e-gb200), written in both NUMA shapes (CDMM, and without CDMM, where each GPU names
//! a CPU-less GPU-memory node): every rank's CPUs, memory node and NICs are on its GPU's
//! Grace socket, and the two shapes print the same plan.

mod common;

use std::path::Path;

use gpu_affinity::catalog;
use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::Machine;
use gpu_affinity::sources::fixture::{grace::without_cdmm, write_fixture};
use gpu_affinity_test_support::without_fabric_env;
use serde_json::Value;

fn explain(tree: &Path) -> Value {
    let mut cmd = common::command();
    let out = without_fabric_env(&mut cmd)
        .args(["explain", "--sysfs-root", &tree.to_string_lossy(), "--json"])
        .output()
        .expect("run gpu-affinity");
    assert_eq!(
        out.status.code(),
        Some(0),
        "explain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("explain --json")
}

fn tree_of(m: &Machine) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_fixture(m, dir.path()).expect("fixture");
    let json = explain(dir.path());
    (dir, json)
}

/// The plan part of the output: per rank its GPUs, NICs, CPUs and memory nodes.
fn ranks(json: &Value) -> Vec<Value> {
    let ranks = json["plan"]["ranks"]
        .as_array()
        .or(json["ranks"].as_array())
        .expect("ranks in explain --json");
    ranks
        .iter()
        .map(|r| serde_json::json!([r["gpus"], r["nics"], r["cpus"], r["mems"]]))
        .collect()
}

fn rank_list(json: &Value) -> &Vec<Value> {
    json["plan"]["ranks"]
        .as_array()
        .or(json["ranks"].as_array())
        .expect("ranks")
}

#[test]
fn every_rank_is_on_its_gpus_socket_in_both_numa_shapes() {
    for name in [
        "BM.GPU.GB200-v3.4",
        "Standard_ND128isr_GB300_v6",
        "p6e-gb200.36xlarge",
    ] {
        let m = catalog::machine(name).expect("catalog");
        let (_a, cdmm) = tree_of(&m);
        let (_b, split) = tree_of(&without_cdmm(&m));
        assert_eq!(ranks(&cdmm), ranks(&split), "{name}: the two shapes differ");
        let list = rank_list(&split);
        assert_eq!(list.len(), m.gpus.len(), "{name}: one rank per GPU");
        for rank in list {
            let gpu = rank["gpus"][0]
                .as_str()
                .expect("gpu")
                .parse()
                .expect("addr");
            let socket = m.numa_of(gpu).expect("socket");
            let socket_cpus = &m.numa_node(socket).expect("node").cpus;
            let cpus = CpuSet::parse_list(rank["cpus"].as_str().expect("cpus")).expect("cpulist");
            assert!(
                !cpus.is_empty() && cpus.is_subset(socket_cpus),
                "{name}: {rank}"
            );
            assert_eq!(rank["mems"], serde_json::json!([socket]), "{name}: {rank}");
            let nics = rank["nics"].as_array().expect("nics");
            assert!(!nics.is_empty(), "{name}: {rank}");
            for nic in nics {
                let pci = nic["pci"].as_str().expect("pci").parse().expect("addr");
                assert_eq!(m.numa_of(pci), Some(socket), "{name}: {rank}");
            }
        }
    }
}
