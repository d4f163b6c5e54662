//! End to end over real machine descriptions written as sysfs trees.

use super::*;

/// An 8-task strict step planned in user_init and applied in every task_init.
fn full_node_step(name: &str) {
    let node = NodeStep::new(name, "strict", &[], &[]);
    let NodeStep {
        machine,
        plugin,
        os,
        ..
    } = &node;
    let gpu_count = machine.gpus.len();
    assert_eq!(
        os.reads.borrow().len(),
        1,
        "the topology is read once per step"
    );
    assert_eq!(
        *os.details.borrow(),
        vec![Detail::Placement],
        "a step reads what placement needs, not the PCIe links"
    );
    let planned = node.planned();
    assert_eq!(
        os.link_reads.get(),
        u32::from(planned.fabric.topology.is_some()),
        "{name}: links are read only for a generated NCCL topology"
    );
    assert!(
        planned.plan.violations.is_empty(),
        "{name}: {:?}",
        planned.plan.violations
    );
    node.post_fork();
    let mut seen_gpus = Vec::new();
    for local in 0..gpu_count as u32 {
        let t = node.task(local).expect("task_init");
        let gpu: PciAddr = t
            .var("GPU_AFFINITY_GPUS")
            .expect("gpus")
            .parse()
            .expect("one GPU");
        assert!(!seen_gpus.contains(&gpu), "{name}: GPU {gpu} given twice");
        seen_gpus.push(gpu);
        let minor = machine
            .gpus
            .iter()
            .find(|g| g.pci == gpu)
            .and_then(|g| g.minor)
            .expect("minor");
        assert_eq!(
            t.var("CUDA_VISIBLE_DEVICES"),
            Some(minor.to_string()),
            "{name}"
        );
        let numa = machine.numa_of(gpu).expect("GPU NUMA node");
        assert_eq!(
            t.var("GPU_AFFINITY_MEMS"),
            Some(numa.to_string()),
            "{name} {gpu}"
        );
        assert_eq!(*os.policy.borrow(), (MemPolicy::Bind, vec![numa]));
        let applied = cpus(&t.var("GPU_AFFINITY_CPUS").expect("cpus"));
        let node_cpus = &machine.numa_node(numa).expect("node").cpus;
        assert!(
            !applied.is_empty() && applied.is_subset(node_cpus),
            "{name} {gpu}: {applied} vs {node_cpus}"
        );
        assert_eq!(*os.affinity.borrow(), applied);
        let nics = t.var("GPU_AFFINITY_NICS").expect("nics");
        assert!(!nics.is_empty(), "{name}: {gpu} has no NIC");
        for nic_name in nics.split(',') {
            let nic = machine
                .nics
                .iter()
                .find(|n| n.name() == Some(nic_name))
                .expect("NIC in model");
            assert_eq!(
                machine.numa_of(nic.pci),
                Some(numa),
                "{name}: {nic_name} is not near {gpu}"
            );
        }
        let ports: usize = nics
            .split(',')
            .filter_map(|n| machine.nics.iter().find(|x| x.name() == Some(n)))
            .map(|n| n.ports.len().max(1))
            .sum();
        // The vendor profile's NCCL environment rides along, identical on every rank.
        let hca = t.var("NCCL_IB_HCA").expect("NCCL_IB_HCA");
        assert_eq!(
            Some(&hca),
            node.task(0).expect("rank 0").var("NCCL_IB_HCA").as_ref(),
            "{name}"
        );
        // UCX_NET_DEVICES is the profile's per-rank value, exactly as explain shows it.
        let ucx = t.var("UCX_NET_DEVICES").expect("ucx");
        assert_eq!(ucx.split(',').count(), ports, "{name}: {ucx}");
        let index = planned
            .plan
            .ranks
            .iter()
            .position(|r| r.rank == local)
            .expect("rank in plan");
        assert_eq!(
            Some(&ucx),
            planned.fabric.env.ranks[index]
                .get("UCX_NET_DEVICES")
                .map(|v| &v.value),
            "{name}"
        );
    }
    dispatch(plugin, Hook::Exit, &node.host, os, &[]).expect("exit");
}

#[test]
fn azure_nd_h100_v5_full_node_binds_every_rank_near_its_gpu() {
    full_node_step("standard_nd96isr_h100_v5");
}

#[test]
fn oci_bm_gpu_h100_8_full_node_binds_every_rank_near_its_gpu() {
    full_node_step("bm.gpu.h100.8");
}
