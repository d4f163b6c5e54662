//! The test oracle for NIC nearness, written with the model's own tree walks
//! (`ancestors`, `root_of`, `numa_of`) rather than the solver's index, so a bug in the
//! solver's locality code cannot hide behind itself. Shared by the solver's unit tests
//! (through `#[path]`) and the golden tests.

use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;

/// (level, -depth of the lowest common bridge); lower is nearer. Levels: 0 same PCIe
/// switch/bridge, 1 same root complex, 2 same NUMA node, 3 anything else.
pub fn nearness_key(machine: &Machine, gpu: PciAddr, nic: PciAddr) -> (u8, i64) {
    let gpu_up = machine.ancestors(gpu);
    if let Some(bridge) = machine
        .ancestors(nic)
        .into_iter()
        .find(|b| gpu_up.contains(b))
    {
        return (0, -(machine.ancestors(bridge).len() as i64));
    }
    if machine.root_of(gpu).is_some() && machine.root_of(gpu) == machine.root_of(nic) {
        return (1, 0);
    }
    match (machine.numa_of(gpu), machine.numa_of(nic)) {
        (Some(a), Some(b)) if a == b => (2, 0),
        _ => (3, 0),
    }
}
