//! Slurm's GPU ids are gres.conf positions, not /dev/nvidiaN minors (issue 7).
//!
//! The oracle is Slurm's own device confinement (task/cgroup + ConstrainDevices=yes):
//! a task may open exactly the gres devices Slurm gave it, so inside every rank the
//! device of the GPU the plugin planned (GPU_AFFINITY_GPUS -> the fixture's minor) must
//! be a gres.conf device and open with ENXIO (allowed; no driver behind the fake node),
//! never EPERM. Each layout allocates only part of the listed GPUs, so reading ids as
//! minors would plan a withheld (EPERM) or unlisted device.

mod common;

use std::collections::BTreeSet;

use common::{ND_H100_V5, machine, resolve_nic, start};
use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;
use gpu_affinity_tests::{
    ClientOptions, Cluster, ClusterBuilder, GresLine, StepOutput, TaskPlugin,
};

fn minor_of(m: &Machine, gpu: &str) -> u32 {
    let pci: PciAddr = gpu
        .parse()
        .unwrap_or_else(|_| panic!("GPU_AFFINITY_GPUS {gpu:?}"));
    m.gpus
        .iter()
        .find(|g| g.pci == pci)
        .and_then(|g| g.minor)
        .unwrap_or_else(|| panic!("{pci} has no minor in the fixture"))
}

fn confined(layout: Vec<GresLine>) -> ClusterBuilder {
    ClusterBuilder::new()
        .task_plugin(TaskPlugin::CgroupDevices)
        .gres_layout(layout)
}

/// Every rank is planned on a distinct gres device it can open, with its NUMA CPUs
/// and nearest NIC; returns the planned minors by rank.
fn check_planned_devices_open(m: &Machine, cluster: &Cluster, out: &StepOutput) -> Vec<u32> {
    assert!(out.success(), "{out}");
    let listed = cluster.gres_minors();
    let tasks = out.tasks().expect("probe");
    let mut planned = Vec::new();
    for t in tasks.values() {
        let gpu = t
            .env("GPU_AFFINITY_GPUS")
            .unwrap_or_else(|| panic!("rank {}: {out}", t.rank));
        let minor = minor_of(m, gpu);
        assert!(
            listed.contains(&minor),
            "rank {} planned on /dev/nvidia{minor}, which gres.conf does not list ({listed:?}): {out}",
            t.rank
        );
        assert_eq!(
            t.devices.get(&minor).map(String::as_str),
            Some("ENXIO"),
            "rank {} cannot open its planned /dev/nvidia{minor} ({:?}): {out}",
            t.rank,
            t.devices
        );
        // The rest of the binding follows that GPU: its NUMA node's CPUs, applied, and
        // NICs on that node.
        let pci = m
            .gpus
            .iter()
            .find(|g| g.minor == Some(minor))
            .map(|g| g.pci)
            .expect("gpu");
        let numa = m.numa_of(pci).expect("GPU NUMA node");
        let cpus = m
            .numa_node(numa)
            .map(|n| n.cpus.to_string())
            .unwrap_or_default();
        assert_eq!(
            t.env("GPU_AFFINITY_CPUS"),
            Some(cpus.as_str()),
            "rank {}: {out}",
            t.rank
        );
        assert_eq!(t.cpus, cpus, "rank {} applied mask: {out}", t.rank);
        for nic in t.env("GPU_AFFINITY_NICS").unwrap_or_default().split(',') {
            let nic = resolve_nic(m, nic).unwrap_or_else(|| panic!("NIC {nic:?}: {out}"));
            assert_eq!(
                m.numa_of(nic.pci),
                Some(numa),
                "rank {} NIC {nic:?}: {out}",
                t.rank
            );
        }
        planned.push(minor);
    }
    let distinct: BTreeSet<u32> = planned.iter().copied().collect();
    assert_eq!(distinct.len(), planned.len(), "ranks share a GPU: {out}");
    planned
}

fn run_layout(test: &str, layout: Vec<GresLine>, gpus: u32) {
    let m = machine(ND_H100_V5);
    let Some(cluster) = start(test, &m, confined(layout)) else {
        return;
    };
    let n = format!("-n{gpus}");
    let g = format!("--gres=gpu:{gpus}");
    let out = cluster
        .probe(
            &["--gpu-affinity=strict", "-O", &n, "-c2", &g],
            &ClientOptions::default(),
        )
        .expect("run srun");
    let planned = check_planned_devices_open(&m, &cluster, &out);
    assert_eq!(planned.len(), gpus as usize, "{out}");
}

#[test]
fn gres_conf_in_order() {
    run_layout(
        "gpu_ids_in_order",
        vec![GresLine::this_node(&[0, 1, 2, 3, 4, 5, 6, 7])],
        3,
    );
}

#[test]
fn gres_conf_out_of_order() {
    // The layout: ids 0,1 are nvidia5 and nvidia4.
    run_layout(
        "gpu_ids_out_of_order",
        vec![
            GresLine::this_node(&[5]),
            GresLine::this_node(&[4]),
            GresLine::this_node(&[7]),
            GresLine::this_node(&[6]),
        ],
        2,
    );
}

#[test]
fn gres_conf_subset() {
    run_layout("gpu_ids_subset", vec![GresLine::this_node(&[6, 7])], 2);
}

#[test]
fn gres_conf_with_a_hole_and_lines_for_other_nodes() {
    // nvidia2 lost; a line for another node that slurmd skips; a line for every node,
    // which Slurm numbers before the NodeName= lines although it comes last.
    run_layout(
        "gpu_ids_hole",
        vec![
            GresLine::this_node(&[0, 1]),
            GresLine::other_node("elsewhere", &[2]),
            GresLine::this_node(&[3, 4, 5]),
            GresLine::every_node(&[7]),
        ],
        4,
    );
}

/// `--gpus-per-task` and `--gpu-bind=map_gpu`: Slurm fences each task to its own
/// device; the plugin must plan each rank on exactly that one.
#[test]
fn per_task_binding_plans_the_gpu_slurm_gave_each_task() {
    let m = machine(ND_H100_V5);
    let layout = vec![GresLine::this_node(&[5, 4, 7, 6])];
    let Some(cluster) = start("gpu_ids_per_task", &m, confined(layout)) else {
        return;
    };
    for args in [
        vec!["-O", "-n4", "-c2", "--gpus-per-task=1"],
        // Slurm's choice reversed against the plan's own rank order.
        vec![
            "-O",
            "-n4",
            "-c2",
            "--gres=gpu:4",
            "--gpu-bind=map_gpu:3,2,1,0",
        ],
    ] {
        let mut argv = vec!["--gpu-affinity=strict"];
        argv.extend(args.iter());
        let out = cluster
            .probe(&argv, &ClientOptions::default())
            .expect("srun");
        let planned = check_planned_devices_open(&m, &cluster, &out);
        assert_eq!(planned.len(), 4, "{out}");
        for t in out.tasks().expect("probe").values() {
            let mine: Vec<u32> = t
                .openable_devices()
                .into_iter()
                .filter(|d| cluster.gres_minors().contains(d))
                .collect();
            let gpu = t.env("GPU_AFFINITY_GPUS").expect("gpu");
            assert_eq!(
                mine,
                vec![minor_of(&m, gpu)],
                "rank {}: {args:?}: {out}",
                t.rank
            );
            assert_eq!(t.env("CUDA_VISIBLE_DEVICES"), Some("0"), "{out}");
        }
    }
    // verbose names the CUDA IPC cost of per-task fencing and Slurm's remedy.
    let out = cluster
        .srun(&[
            "--gpu-affinity=strict,verbose",
            "-O",
            "-n2",
            "-c2",
            "--gpus-per-task=1",
            "true",
        ])
        .expect("srun");
    assert!(out.success(), "{out}");
    assert!(
        out.stderr.contains("ompi#11949") && out.stderr.contains("allow-task-sharing"),
        "{out}"
    );
}

/// `explain --gpus` numbers ids through the same gres.conf as the plugin.
#[test]
fn explain_agrees_with_the_plugin() {
    let m = machine(ND_H100_V5);
    let layout = vec![GresLine::this_node(&[5, 4]), GresLine::this_node(&[7, 6])];
    let Some(cluster) = start("gpu_ids_explain", &m, confined(layout)) else {
        return;
    };
    let out = cluster
        .probe(
            &["--gpu-affinity=strict", "-O", "-n1", "-c2", "--gres=gpu:1"],
            &ClientOptions::default(),
        )
        .expect("srun");
    let planned = check_planned_devices_open(&m, &cluster, &out);
    let sysfs = cluster
        .sysfs_root()
        .expect("sysfs root")
        .display()
        .to_string();
    let gres = cluster.dir().join("gres.conf").display().to_string();
    let cli = gpu_affinity_tests::plugin::admin_cli().expect("build gpu-affinity");
    let explain = std::process::Command::new(cli)
        .args([
            "explain",
            "--sysfs-root",
            &sysfs,
            "--gpus",
            "0",
            "--gres-conf",
            &gres,
            "--node",
            cluster.node(),
        ])
        .output()
        .expect("run explain");
    let table = String::from_utf8_lossy(&explain.stdout);
    assert!(
        explain.status.success(),
        "{}",
        String::from_utf8_lossy(&explain.stderr)
    );
    // The table's rank-0 row: RANK GPU NIC CPUS NUMA.
    let gpu = table
        .lines()
        .find_map(|l| l.strip_prefix("0 ").map(|r| r.split_whitespace().next()))
        .flatten()
        .unwrap_or_else(|| panic!("no rank 0 row: {table}"));
    assert_eq!(
        vec![minor_of(&m, gpu)],
        planned,
        "explain:\n{table}\nstep: {out}"
    );
}

/// On a cluster without gres Slurm passes a user's SLURM_STEP_GPUS through: a huge one
/// (the 18,000 x `0-4095`, 126 KB) is refused in one short line, quickly, and
/// root's slurmstepd does not grow with it.
#[test]
fn a_huge_step_gpus_is_refused_quickly_with_bounded_memory() {
    let m = machine(ND_H100_V5);
    let Some(cluster) = start("gpu_ids_huge", &m, ClusterBuilder::new().without_gres()) else {
        return;
    };
    let huge = ["0-4095"; 18_000].join(",");
    // The client bound is the "quickly": 19.8 s before the fix.
    let opts = ClientOptions::bounded(15).env("SLURM_STEP_GPUS", &huge);
    let out = cluster
        .srun_with(
            &[
                "--gpu-affinity=prefer",
                "-n1",
                "sh",
                "-c",
                "awk '/^VmHWM/ {print $2}' /proc/$PPID/status",
            ],
            &opts,
        )
        .expect("srun");
    assert!(out.success(), "{out}");
    let hwm_kb: u64 = out
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("VmHWM: {out}"));
    assert!(
        hwm_kb < 256 * 1024,
        "slurmstepd peaked at {hwm_kb} kB: {out}"
    );
    let warning = out
        .stderr
        .lines()
        .find(|l| l.contains("SLURM_STEP_GPUS"))
        .unwrap_or_else(|| panic!("no warning: {out}"));
    assert!(
        warning.len() < 200 && !warning.contains("0-4095"),
        "{warning}"
    );
    let strict = cluster
        .srun_with(&["--gpu-affinity=strict", "-n1", "true"], &opts)
        .expect("srun");
    assert!(!strict.success(), "{strict}");
    assert!(
        strict.stderr.len() < 2000 && !strict.stderr.contains("0-4095"),
        "{strict}"
    );
}
