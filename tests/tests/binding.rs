//! `srun --gpu-affinity=strict` binds every rank to its GPU, nearest NIC(s) and NUMA
//! node, read back inside each task — on two machine layouts, under both task plugins,
//! and for an unprivileged user.

mod common;

use common::{BM_GPU_H100_8, GB200_V3_4, ND_H100_V5, check_step, machine, probe_whole_node, start};
use gpu_affinity_tests::{ClientOptions, ClusterBuilder, TaskPlugin};

#[test]
fn nd_h100_v5_strict_binds_each_rank_to_its_gpu_ib_nic_and_numa_node() {
    let m = machine(ND_H100_V5);
    let Some(cluster) = start("nd_h100_v5_strict", &m, ClusterBuilder::new()) else {
        return;
    };
    let out = probe_whole_node(&cluster, Some("strict"), 8, &ClientOptions::default());
    check_step(&m, &out, "strict", 1);
}

#[test]
fn oci_bm_gpu_h100_8_strict_binds_two_roce_ports_per_gpu() {
    let m = machine(BM_GPU_H100_8);
    let Some(cluster) = start("oci_bm_gpu_h100_8_strict", &m, ClusterBuilder::new()) else {
        return;
    };
    let out = probe_whole_node(&cluster, Some("strict"), 8, &ClientOptions::default());
    check_step(&m, &out, "strict", 2);
}

#[test]
fn binding_holds_with_slurms_task_affinity_plugin() {
    // task/affinity binds tasks too; gpu-affinity's mask must be the one the task runs with.
    let m = machine(ND_H100_V5);
    let builder = ClusterBuilder::new().task_plugin(TaskPlugin::Affinity);
    let Some(cluster) = start("binding_with_task_affinity", &m, builder) else {
        return;
    };
    let out = probe_whole_node(&cluster, Some("strict"), 8, &ClientOptions::default());
    check_step(&m, &out, "strict", 1);
}

#[test]
fn unprivileged_user_gets_the_same_binding() {
    let m = machine(ND_H100_V5);
    let Some(cluster) = start("unprivileged_user", &m, ClusterBuilder::new()) else {
        return;
    };
    let out = probe_whole_node(
        &cluster,
        Some("strict"),
        8,
        &ClientOptions::as_user("nobody"),
    );
    check_step(&m, &out, "strict", 1);
    for t in out.tasks().expect("probe").values() {
        assert_eq!(t.user, "nobody", "{out}");
    }
}

#[test]
fn prefer_on_a_sound_node_binds_like_strict() {
    let m = machine(BM_GPU_H100_8);
    let Some(cluster) = start("prefer_on_sound_node", &m, ClusterBuilder::new()) else {
        return;
    };
    let out = probe_whole_node(&cluster, Some("prefer"), 8, &ClientOptions::default());
    check_step(&m, &out, "prefer", 2);
}

#[test]
fn gb200_strict_binds_each_rank_to_its_grace_socket_and_two_roce_ports() {
    // NVLink-C2C: no PCIe path ties a GPU to a NIC, so the NICs are the socket's; the
    // management NICs and data-direct functions are never a rank's.
    let m = machine(GB200_V3_4);
    let Some(cluster) = start("gb200_strict", &m, ClusterBuilder::new()) else {
        return;
    };
    let out = probe_whole_node(&cluster, Some("strict"), 4, &ClientOptions::default());
    check_step(&m, &out, "strict", 2);
}
