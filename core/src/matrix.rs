//! The GPU x NIC locality matrix in the words of `nvidia-smi topo -m`, which admins
//! already read: PIX (one PCIe switch), PXB (several bridges, no host bridge), PHB (the
//! same root complex / host bridge), NODE (host bridges of one NUMA node), SYS (across
//! NUMA nodes). Pure: a machine in, labels out; `explain --matrix` prints it with the
//! plan's choices marked.
//!
//! Bridges are PCI functions in the model, so "one switch" is read as: the lowest
//! common bridge is at most the second bridge above each side (a switch's downstream
//! port, then its upstream port). GPUs that attach over NVLink-C2C (Grace) have no PCIe
//! path that means anything ([`crate::numa`]): their pairs are NODE or SYS by the GPU's
//! CPU node alone, as nvidia-smi reports SYS on such nodes' NICs of the other socket.

use crate::model::{Machine, PciIndex};
use crate::pci::PciAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    Pix,
    Pxb,
    Phb,
    Node,
    Sys,
    /// Locality unknown (no NUMA node for one side): never guessed.
    Unknown,
}

impl Link {
    pub fn label(self) -> &'static str {
        match self {
            Link::Pix => "PIX",
            Link::Pxb => "PXB",
            Link::Phb => "PHB",
            Link::Node => "NODE",
            Link::Sys => "SYS",
            Link::Unknown => "?",
        }
    }
}

/// How `gpu` and `nic` are connected.
pub fn link(machine: &Machine, index: &PciIndex<'_>, gpu: PciAddr, nic: PciAddr) -> Link {
    let numa = |a| machine.cpu_numa_of(a);
    let by_numa = || match (numa(gpu), numa(nic)) {
        (Some(g), Some(n)) if g == n => Link::Node,
        (Some(_), Some(_)) => Link::Sys,
        _ => Link::Unknown,
    };
    if machine.attaches_over_c2c(gpu) {
        return by_numa();
    }
    let (Some(g), Some(n)) = (index.place(gpu), index.place(nic)) else {
        return by_numa();
    };
    if let Some((gi, ni)) = g
        .ancestors
        .iter()
        .enumerate()
        .find_map(|(gi, b)| n.ancestors.iter().position(|x| x == b).map(|ni| (gi, ni)))
    {
        return if gi <= 1 && ni <= 1 {
            Link::Pix
        } else {
            Link::Pxb
        };
    }
    match (g.root, n.root) {
        (Some(a), Some(b)) if a == b => Link::Phb,
        _ => by_numa(),
    }
}

/// The matrix as text: one row per GPU (Slurm's order, labelled by minor), one column per
/// NIC of `nics`, `*` after the label of each pair in `chosen` (GPU, NIC), then a legend.
pub fn render(
    machine: &Machine,
    nics: &[(PciAddr, String)],
    chosen: &[(PciAddr, PciAddr)],
) -> String {
    let index = PciIndex::new(machine);
    let mut out = String::from("        ");
    for (i, _) in nics.iter().enumerate() {
        out.push_str(&format!("{:<7}", format!("NIC{i}")));
    }
    out.push('\n');
    for (row, gpu) in machine.gpus_in_slurm_order().iter().enumerate() {
        let label = gpu
            .minor
            .map_or_else(|| format!("GPU?{row}"), |m| format!("GPU{m}"));
        out.push_str(&format!("{label:<8}"));
        for (nic, _) in nics {
            let mut cell = link(machine, &index, gpu.pci, *nic).label().to_string();
            if chosen.contains(&(gpu.pci, *nic)) {
                cell.push('*');
            }
            out.push_str(&format!("{cell:<7}"));
        }
        out.push('\n');
    }
    out.push_str("\nNICs:\n");
    for (i, (pci, name)) in nics.iter().enumerate() {
        out.push_str(&format!("  NIC{i}: {name} ({pci})\n"));
    }
    out.push_str(
        "\n  * the plan's NIC for that GPU's rank\n  PIX one PCIe switch, PXB several bridges, PHB one host bridge,\n  NODE host bridges of one NUMA node, SYS across NUMA nodes\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn p5_gpus_share_switches_with_their_efa_nics() {
        let m = catalog::machine("p5.48xlarge").expect("catalog");
        let index = PciIndex::new(&m);
        let gpus = m.gpus_in_slurm_order();
        let nics = m.fabric_nics();
        let labels: Vec<Link> = nics
            .iter()
            .map(|n| link(&m, &index, gpus[0].pci, n.pci))
            .collect();
        assert!(labels.contains(&Link::Pix), "{labels:?}");
        assert!(labels.contains(&Link::Sys), "{labels:?}");
        assert!(!labels.contains(&Link::Unknown), "{labels:?}");
    }

    #[test]
    fn grace_gpus_have_no_pcie_path() {
        let m = catalog::machine("BM.GPU.GB200-v3.4").expect("catalog");
        let index = PciIndex::new(&m);
        for gpu in &m.gpus {
            for nic in m.fabric_nics() {
                let l = link(&m, &index, gpu.pci, nic.pci);
                assert!(matches!(l, Link::Node | Link::Sys), "{l:?}");
            }
        }
    }
}
