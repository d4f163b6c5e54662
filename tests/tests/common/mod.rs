//! What the integration tests share: starting clusters for a test machine and checking,
//! from inside every task, that its binding is the one the machine description implies.
//!
//! The expectations are derived from the machine description itself (which GPU has
//! which minor, which NUMA node and CPUs, which fabric NICs are nearest), never written
//! out by hand, so the same checks hold for every test machine.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeSet;

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::{Machine, Nic};
use gpu_affinity::pci::PciAddr;
use gpu_affinity_tests::fixture;
use gpu_affinity_tests::{ClientOptions, Cluster, ClusterBuilder, StepOutput, TaskReport};

/// Azure ND H100 v5 (one InfiniBand VF per GPU, no PCI bridges), NUMA0 = CPU 0, NUMA1 = CPU 1.
pub const ND_H100_V5: &str = "nd-h100-v5-2cpu";
/// OCI BM.GPU.H100.8 (two RoCE ports per GPU behind its PCIe switch), folded the same way.
pub const BM_GPU_H100_8: &str = "bm-gpu-h100-8-2cpu";
/// OCI BM.GPU.GB200-v3.4 (2 Grace sockets, 4 GB200 over NVLink-C2C, two RoCE ports per GPU
/// on its socket, management and data-direct look-alikes), folded the same way.
pub const GB200_V3_4: &str = "gb200-v3.4-2cpu";

/// A test machine as the plugin will read it back from its sysfs fixture.
pub fn machine(name: &str) -> Machine {
    let m = fixture::test_machine(name).unwrap_or_else(|e| panic!("test machine {name}: {e}"));
    gpu_affinity::sources::fixture::realized(&m)
}

/// A cluster whose node is `machine`, with the plugin loaded; `None` when skipped.
pub fn start(test: &str, machine: &Machine, builder: ClusterBuilder) -> Option<Cluster> {
    builder
        .machine(machine.clone())
        .with_plugin()
        .start_or_skip(test)
        .unwrap_or_else(|e| panic!("{test}: cannot start the cluster: {e}"))
}

/// `srun -l --gpu-affinity=MODE <whole node, N tasks> PROBE`.
pub fn probe_whole_node(
    cluster: &Cluster,
    mode: Option<&str>,
    tasks: u32,
    opts: &ClientOptions,
) -> StepOutput {
    let mut args: Vec<String> = mode
        .map(|m| format!("--gpu-affinity={m}"))
        .into_iter()
        .collect();
    args.extend(cluster.whole_node(tasks));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cluster.probe(&args, opts).expect("run srun")
}

/// The machine's GPU whose /dev/nvidiaN minor is `minor`.
pub fn gpu_by_minor(machine: &Machine, minor: u32) -> PciAddr {
    machine
        .gpus
        .iter()
        .find(|g| g.minor == Some(minor))
        .map(|g| g.pci)
        .unwrap_or_else(|| panic!("the machine has no GPU with minor {minor}"))
}

/// How near a NIC is to a GPU: 3 = they share a PCIe bridge (switch or root port),
/// 2 = same root complex, 1 = same NUMA node, 0 = farther.
pub fn closeness(machine: &Machine, gpu: PciAddr, nic: PciAddr) -> u8 {
    let gpu_up = machine.ancestors(gpu);
    let nic_up = machine.ancestors(nic);
    if gpu_up.iter().any(|a| nic_up.contains(a)) {
        3
    } else if machine.root_of(gpu).is_some() && machine.root_of(gpu) == machine.root_of(nic) {
        2
    } else if machine.numa_of(gpu).is_some() && machine.numa_of(gpu) == machine.numa_of(nic) {
        1
    } else {
        0
    }
}

/// The fabric NIC a `GPU_AFFINITY_NICS` item names (by RDMA/netdev name or PCI address).
pub fn resolve_nic<'m>(machine: &'m Machine, item: &str) -> Option<&'m Nic> {
    let item = item.trim();
    machine.fabric_nics().into_iter().find(|n| {
        n.name() == Some(item) || n.pci.to_string() == item || n.netdev.as_deref() == Some(item)
    })
}

fn set(text: &str, what: &str, ctx: &str) -> CpuSet {
    CpuSet::parse_list(text.trim())
        .unwrap_or_else(|e| panic!("{what} {text:?} is not a CPU list ({e}): {ctx}"))
}

/// Check one rank, bound to the single GPU Slurm's CUDA_VISIBLE_DEVICES (as rewritten by
/// the plugin) names as a global id: GPU, NUMA node, CPU mask applied, memory policy,
/// NICs, UCX, mode. Returns the rank's GPU and NICs for cross-rank checks.
pub fn check_rank(
    machine: &Machine,
    t: &TaskReport,
    mode: &str,
    nics_per_gpu: usize,
    out: &StepOutput,
) -> (PciAddr, Vec<PciAddr>) {
    // The one index left in CUDA_VISIBLE_DEVICES is a /dev/nvidiaN minor (the harness
    // lists nvidia0..7 in gres.conf, so Slurm's global index is the minor).
    let cuda = t
        .env("CUDA_VISIBLE_DEVICES")
        .unwrap_or_else(|| panic!("rank {}: no CUDA_VISIBLE_DEVICES: {out}", t.rank));
    let minor: u32 = cuda.parse().unwrap_or_else(|_| {
        panic!(
            "rank {}: CUDA_VISIBLE_DEVICES={cuda:?} is not one GPU: {out}",
            t.rank
        )
    });
    check_rank_on(machine, t, mode, nics_per_gpu, out, minor)
}

/// [`check_rank`] for a rank whose GPU is the one with /dev/nvidiaN minor `minor`.
pub fn check_rank_on(
    machine: &Machine,
    t: &TaskReport,
    mode: &str,
    nics_per_gpu: usize,
    out: &StepOutput,
    minor: u32,
) -> (PciAddr, Vec<PciAddr>) {
    let ctx = format!("rank {}: {:?}\n{out}", t.rank, t.env);
    assert_eq!(t.env("GPU_AFFINITY_MODE"), Some(mode), "{ctx}");
    assert_eq!(t.env("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"), "{ctx}");
    let gpu = gpu_by_minor(machine, minor);
    assert_eq!(
        t.env("GPU_AFFINITY_GPUS"),
        Some(gpu.to_string().as_str()),
        "{ctx}"
    );

    // CPUs: the GPU's NUMA node, planned and really applied.
    let numa = machine
        .numa_of(gpu)
        .unwrap_or_else(|| panic!("GPU {gpu} has no NUMA node: {ctx}"));
    let numa_cpus = machine
        .numa_node(numa)
        .map(|n| n.cpus.clone())
        .unwrap_or_default();
    let reported = set(
        t.env("GPU_AFFINITY_CPUS").unwrap_or_default(),
        "GPU_AFFINITY_CPUS",
        &ctx,
    );
    assert_eq!(
        reported, numa_cpus,
        "reported CPUs are not GPU {gpu}'s NUMA node {numa}: {ctx}"
    );
    let applied = set(&t.cpus, "Cpus_allowed_list", &ctx);
    assert_eq!(
        applied, numa_cpus,
        "applied CPU mask is not NUMA node {numa}'s: {ctx}"
    );

    // Memory: bound (strict) or preferred (prefer) to that node when this kernel has it;
    // a node only the fixture has cannot take a policy and is reported as not applied.
    let kernel_nodes = fixture::online_numa_nodes().expect("read online NUMA nodes");
    if kernel_nodes.contains(numa) {
        assert_eq!(
            t.env("GPU_AFFINITY_MEMS"),
            Some(numa.to_string().as_str()),
            "{ctx}"
        );
        let policy = if mode == "strict" {
            format!("bind:{numa}")
        } else {
            format!("prefer:{numa}")
        };
        assert_eq!(t.mempolicy, policy, "memory policy: {ctx}");
    } else {
        assert_eq!(
            t.env("GPU_AFFINITY_MEMS"),
            Some(""),
            "NUMA {numa} is not in this kernel: {ctx}"
        );
        assert_eq!(t.mempolicy, "default", "{ctx}");
    }

    // NICs: the nearest fabric NICs to this GPU, as many as the machine pairs per GPU.
    let items: Vec<&str> = t
        .env("GPU_AFFINITY_NICS")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(items.len(), nics_per_gpu, "NIC count: {ctx}");
    let best = machine
        .fabric_nics()
        .iter()
        .map(|n| closeness(machine, gpu, n.pci))
        .max()
        .unwrap_or(0);
    let ucx: Vec<&str> = t
        .env("UCX_NET_DEVICES")
        .unwrap_or_default()
        .split(',')
        .collect();
    let mut nics = Vec::new();
    for item in items {
        let nic = resolve_nic(machine, item)
            .unwrap_or_else(|| panic!("{item:?} is not a fabric NIC of the machine: {ctx}"));
        assert_eq!(
            machine.numa_of(nic.pci),
            Some(numa),
            "NIC {item} is off the GPU's NUMA node: {ctx}"
        );
        assert_eq!(
            closeness(machine, gpu, nic.pci),
            best,
            "NIC {item} is not among the nearest to GPU {gpu}: {ctx}"
        );
        let name = nic.name().unwrap_or_default();
        assert!(
            ucx.iter().any(|u| u.split(':').next() == Some(name)),
            "UCX_NET_DEVICES {ucx:?} lacks {name}: {ctx}"
        );
        nics.push(nic.pci);
    }
    (gpu, nics)
}

/// Check a whole step that ran one task per GPU over the whole node.
pub fn check_step(machine: &Machine, out: &StepOutput, mode: &str, nics_per_gpu: usize) {
    assert!(out.success(), "{out}");
    let tasks = out.tasks().expect("parse probe output");
    assert_eq!(
        tasks.len(),
        machine.gpus.len(),
        "one report per rank: {out}"
    );
    let mut gpus = BTreeSet::new();
    let mut nics = BTreeSet::new();
    for t in tasks.values() {
        let (gpu, rank_nics) = check_rank(machine, t, mode, nics_per_gpu, out);
        assert!(gpus.insert(gpu), "GPU {gpu} given to two ranks: {out}");
        for n in rank_nics {
            assert!(nics.insert(n), "NIC {n} given to two ranks: {out}");
        }
    }
}

/// A plugin-free task: no GPU_AFFINITY_* variable, Slurm's own CUDA_VISIBLE_DEVICES.
pub fn assert_untouched(t: &TaskReport, out: &StepOutput) {
    assert!(
        t.gpu_affinity_env().is_empty(),
        "rank {} has GPU_AFFINITY_* set: {out}",
        t.rank
    );
    assert_eq!(t.mempolicy, "default", "rank {}: {out}", t.rank);
}
