//! Grace trays (GB200 / GB300) in both NUMA shapes: with CDMM (no GPU-memory nodes) and
//! without (each GPU's HBM a CPU-less node the GPU names). Each Grace catalog machine is
//! written as a sysfs tree in both shapes, read back, and planned with its vendor profile:
//! both shapes must give every rank the same GPUs, NICs, CPUs and memory node, all on the
//! GPU's own Grace socket, and never a GPU-memory node.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns

use gpu_affinity::catalog;
use gpu_affinity::fabric::{self, profiles::Profiles};
use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;
use gpu_affinity::solver::{Mode, Plan, StepRequest, solve_with_fabric};
use gpu_affinity::sources::fixture::{grace::without_cdmm, write_fixture};
use gpu_affinity::sources::sysfs::read_machine;

fn grace_machines() -> Vec<(&'static str, Machine)> {
    let grace: Vec<_> = catalog::names()
        .into_iter()
        .map(|n| (n, catalog::machine(n).unwrap()))
        .filter(|(_, m)| !m.gpus.is_empty() && m.gpus.iter().all(|g| m.attaches_over_c2c(g.pci)))
        .collect();
    assert!(
        grace.len() >= 6,
        "Grace machines in the catalog: {}",
        grace.len()
    );
    grace
}

fn through_sysfs(m: &Machine) -> Machine {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(m, dir.path()).unwrap();
    read_machine(dir.path()).unwrap()
}

fn plan(m: &Machine, mode: Mode) -> Plan {
    let profiles = Profiles::builtin();
    let fabric = fabric::fabric_nics(m, &profiles);
    let gpus: Vec<PciAddr> = m.gpus_in_slurm_order().iter().map(|g| g.pci).collect();
    let request = StepRequest {
        tasks: gpus.len() as u32,
        gpus,
        cpus: m.cpus(),
        gpus_per_task: None,
        mode,
    };
    solve_with_fabric(m, &request, &fabric)
}

/// The socket (CPU node) each GPU is on in the CDMM shape: the catalog's own NUMA node.
fn socket_of(cdmm: &Machine, gpu: PciAddr) -> u32 {
    cdmm.numa_of(gpu).unwrap()
}

#[test]
fn both_numa_shapes_plan_the_same_cpus_memory_and_nics_on_the_gpus_socket() {
    for (name, catalog_machine) in grace_machines() {
        let cdmm = through_sysfs(&catalog_machine);
        let split = through_sysfs(&without_cdmm(&catalog_machine));
        assert!(
            split.numa_nodes.len() > cdmm.numa_nodes.len(),
            "{name}: the non-CDMM tree has GPU-memory nodes"
        );
        for gpu in &split.gpus {
            let named = split.numa_of(gpu.pci).unwrap();
            assert!(
                split.is_cpu_less(named),
                "{name}: GPU {} names node {named}",
                gpu.pci
            );
        }
        for mode in [Mode::Strict, Mode::Prefer] {
            let a = plan(&cdmm, mode);
            let b = plan(&split, mode);
            assert!(
                a.violations.is_empty() && a.warnings.is_empty(),
                "{name}: {a:?}"
            );
            assert!(
                b.violations.is_empty() && b.warnings.is_empty(),
                "{name}: {b:?}"
            );
            assert_eq!(a.fabric_nics, b.fabric_nics, "{name}: fabric");
            for (ra, rb) in a.ranks.iter().zip(&b.ranks) {
                let r = ra.rank;
                assert_eq!(
                    (&ra.gpus, &ra.nics, &ra.cpus, &ra.mems),
                    (&rb.gpus, &rb.nics, &rb.cpus, &rb.mems),
                    "{name} rank {r}: the two shapes differ"
                );
                let socket = socket_of(&cdmm, ra.gpus[0]);
                let socket_cpus = &cdmm.numa_node(socket).unwrap().cpus;
                assert!(
                    !ra.cpus.is_empty() && ra.cpus.is_subset(socket_cpus),
                    "{name} rank {r} CPUs"
                );
                assert_eq!(ra.mems, vec![socket], "{name} rank {r}: memory node");
                assert!(!ra.nics.is_empty(), "{name} rank {r}: no NIC");
                for nic in &ra.nics {
                    assert_eq!(
                        cdmm.numa_of(nic.pci),
                        Some(socket),
                        "{name} rank {r} NIC {}",
                        nic.pci
                    );
                }
                assert!(
                    rb.reasons
                        .iter()
                        .any(|l| l.contains("has no CPUs (GPU memory without CDMM)")),
                    "{name} rank {r}: the non-CDMM plan says why: {:?}",
                    rb.reasons
                );
                assert!(
                    ra.reasons
                        .iter()
                        .any(|l| l.contains("attaches over NVLink-C2C")),
                    "{name} rank {r}: {:?}",
                    ra.reasons
                );
            }
        }
    }
}

/// Without a distance table and with GPUs directly on their root bus, nothing names a
/// GPU-memory node's socket: the rank is refused (strict) with a reason, never guessed.
#[test]
fn an_unresolvable_gpu_memory_node_is_a_violation_not_a_guess() {
    let m = catalog::machine("Standard_ND128isr_GB300_v6").unwrap();
    let mut split = without_cdmm(&m);
    split.numa_distances.clear();
    for d in &mut split.pci {
        if split.gpus.iter().any(|g| g.pci == d.addr) {
            d.parent = None;
        }
    }
    split
        .pci
        .retain(|d| !(d.addr.bus == 0 && d.addr.domain >= 8 && d.addr.domain < 0x20));
    let p = plan(&split, Mode::Strict);
    assert!(p.refused());
    assert!(
        p.violations.iter().any(|v| v
            .message
            .contains("neither the NUMA distance table nor a PCIe bridge")),
        "{:?}",
        p.violations
    );
}

/// The excluded look-alikes: p6-b200/b300's mlx5 NVLink controllers beside EFA, OCI
/// GB200's management NICs and data-direct functions. None is fabric, none a rank's NIC.
#[test]
fn fabric_look_alikes_are_no_ranks_nic() {
    let profiles = Profiles::builtin();
    for (name, unwanted) in [
        ("p6-b200.48xlarge", vec!["0000:73:00.0", "0000:74:00.0"]),
        ("p6-b300.48xlarge", vec!["0000:73:00.0", "0000:74:00.0"]),
        (
            "BM.GPU.GB200-v3.4",
            vec![
                "0007:01:00.0",
                "0017:01:00.0",
                "0000:04:00.0",
                "0002:04:00.0",
                "0010:04:00.0",
                "0012:04:00.0",
            ],
        ),
    ] {
        let m = through_sysfs(&catalog::machine(name).unwrap());
        let fabric: Vec<PciAddr> = fabric::fabric_nics(&m, &profiles)
            .iter()
            .map(|n| n.pci)
            .collect();
        let p = plan(&m, Mode::Strict);
        for u in unwanted {
            let u: PciAddr = u.parse().unwrap();
            assert!(
                m.nics.iter().any(|n| n.pci == u),
                "{name}: {u} is in the tree"
            );
            assert!(!fabric.contains(&u), "{name}: {u} is not fabric");
            assert!(
                p.ranks.iter().all(|r| r.nics.iter().all(|n| n.pci != u)),
                "{name}: {u}"
            );
        }
    }
}
