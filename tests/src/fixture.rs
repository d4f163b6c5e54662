//! Machine descriptions for the test node and the sysfs tree the plugin reads.
//!
//! Test machines live in `tests/machines/*.toml` (the catalog's own format, usually
//! `extends = "<catalog machine>"` with the CPUs folded onto this VM's real CPUs, so the
//! masks the plugin applies can be read back inside tasks). Catalog machines are
//! available by name too. Either way the node's topology reaches the plugin as a sysfs
//! tree written by core's fixture writer, the same one `gpu-affinity fixture` uses.

use std::path::{Path, PathBuf};

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::Machine;

use crate::error::{Context, Result};
use crate::harness_err;

/// `tests/machines` in the source tree.
pub fn machines_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("machines")
}

/// The catalog machine the demo and benchmark use when none is named.
pub const DEFAULT_MACHINE: &str = gpu_affinity::catalog::DEFAULT_MACHINE;

/// A test machine: `tests/machines/NAME.toml`.
pub fn test_machine(name: &str) -> Result<Machine> {
    machine_file(&machines_dir().join(format!("{name}.toml")))
}

/// A machine description file in the catalog's format (may `extends` a catalog machine).
pub fn machine_file(path: &Path) -> Result<Machine> {
    let text = std::fs::read_to_string(path).context(|| format!("read {}", path.display()))?;
    gpu_affinity::catalog::parse(&text).context(|| format!("{}", path.display()))
}

/// A machine from the built-in catalog (`p5.48xlarge`, `BM.GPU.H100.8`, ...).
pub fn catalog_machine(name: &str) -> Result<Machine> {
    gpu_affinity::catalog::machine(name).context(|| format!("catalog machine {name}"))
}

/// Write `machine` as a sysfs-shaped tree under `root` (sys/, proc/driver/nvidia, dev/).
pub fn write_sysfs(machine: &Machine, root: &Path) -> Result<()> {
    gpu_affinity::sources::fixture::write_fixture(machine, root).context(|| {
        format!(
            "write the sysfs fixture for the test node to {}",
            root.display()
        )
    })
}

/// The same machine with its NUMA nodes folded onto `real_cpus` CPUs: NUMA node number
/// `i` (in id order) gets CPU `i % real_cpus`, every CPU its own core. GPUs, NICs and
/// the PCI tree are untouched, so the plan is the machine's own, only with CPU masks this
/// machine can really apply.
pub fn fold_cpus(machine: &Machine, real_cpus: u32) -> Machine {
    let mut folded = machine.clone();
    let n = real_cpus.max(1);
    let mut ids: Vec<u32> = folded.numa_nodes.iter().map(|node| node.id).collect();
    ids.sort_unstable();
    for node in &mut folded.numa_nodes {
        let index = ids.iter().position(|&id| id == node.id).unwrap_or(0);
        let cpu = u32::try_from(index).unwrap_or(0) % n;
        node.cpus = CpuSet::from_iter([cpu]);
    }
    let mut cpus: Vec<u32> = folded.cpus().iter().collect();
    cpus.sort_unstable();
    folded.cores = cpus.into_iter().map(|c| CpuSet::from_iter([c])).collect();
    folded
}

/// The same machine without the fabric NICs of NUMA node `numa`: its GPUs then have no
/// NIC on their PCIe switch, root complex or NUMA node (a strict violation).
pub fn without_nics_on_numa(machine: &Machine, numa: u32) -> Machine {
    let mut cut = machine.clone();
    let doomed: Vec<_> = machine
        .nics
        .iter()
        .filter(|n| machine.numa_of(n.pci) == Some(numa))
        .map(|n| n.pci)
        .collect();
    cut.nics.retain(|n| !doomed.contains(&n.pci));
    cut
}

/// The number of CPUs this machine has online (for folding and node shapes).
pub fn online_cpus() -> Result<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .context(|| "read /sys/devices/system/cpu/online".to_owned())?;
    let set = CpuSet::parse_list(text.trim())
        .map_err(|e| harness_err!("/sys/devices/system/cpu/online: {e}"))?;
    Ok(u32::try_from(set.len()).unwrap_or(u32::MAX))
}

/// NUMA nodes the running kernel has (a memory policy can only name these).
pub fn online_numa_nodes() -> Result<CpuSet> {
    let text = std::fs::read_to_string("/sys/devices/system/node/online")
        .context(|| "read /sys/devices/system/node/online".to_owned())?;
    CpuSet::parse_list(text.trim())
        .map_err(|e| harness_err!("/sys/devices/system/node/online: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_machines_fold_each_numa_node_onto_one_real_cpu() {
        for name in ["nd-h100-v5-2cpu", "bm-gpu-h100-8-2cpu"] {
            let m = test_machine(name).expect(name);
            assert_eq!(m.gpus.len(), 8, "{name}");
            let cpus: Vec<String> = m.numa_nodes.iter().map(|n| n.cpus.to_string()).collect();
            assert_eq!(cpus, ["0", "1"], "{name}");
            let minors: Vec<Option<u32>> =
                m.gpus_in_slurm_order().iter().map(|g| g.minor).collect();
            assert_eq!(minors, (0..8).map(Some).collect::<Vec<_>>(), "{name}");
        }
    }

    #[test]
    fn folding_a_catalog_machine_keeps_gpus_and_nics_and_moves_cpus() {
        let p5 = catalog_machine(DEFAULT_MACHINE).expect("default machine");
        let folded = fold_cpus(&p5, 2);
        assert_eq!(folded.gpus, p5.gpus);
        assert_eq!(folded.nics, p5.nics);
        assert_eq!(folded.cpus().to_string(), "0-1");
        for (a, b) in p5.numa_nodes.iter().zip(&folded.numa_nodes) {
            assert_eq!(a.id, b.id);
            assert_eq!(b.cpus.len(), 1);
        }
    }

    #[test]
    fn cutting_a_numa_nodes_nics_leaves_the_other_node_alone() {
        let nd = test_machine("nd-h100-v5-2cpu").expect("nd");
        let cut = without_nics_on_numa(&nd, 1);
        assert!(
            cut.fabric_nics()
                .iter()
                .all(|n| cut.numa_of(n.pci) == Some(0))
        );
        assert_eq!(cut.fabric_nics().len(), nd.fabric_nics().len() / 2);
    }
}
