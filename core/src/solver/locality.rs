//! Where a PCI function sits: its bridge chain, root complex and NUMA node, and how near
//! two functions are to each other.
//!
//! The walk itself is the model's ([`PciIndex`]): the machine's PCI list is indexed once
//! per solve and only the step's GPUs and the fabric NICs get their ancestor chains
//! walked, so a solve never scans every PCI device for every GPU-NIC pair.

use crate::model::{PciIndex, PciPlace};
use crate::pci::PciAddr;

/// A PCI function with its locality worked out (the model's one tree walk).
pub(super) type Place<'m> = PciPlace<'m>;

/// Locate one function, or (when the PCI tree lacks it) place it nowhere: no bridges,
/// no root complex, only the NUMA node a one-node machine implies.
pub(super) fn place_or_unknown<'m>(index: &PciIndex<'m>, addr: PciAddr) -> Place<'m> {
    index.place(addr).unwrap_or(Place {
        addr,
        ancestors: Vec::new(),
        root: None,
        numa: index.only_numa(),
    })
}

/// How near a NIC is to a GPU, nearest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Nearness<'m> {
    /// Both below `bridge`, their lowest common bridge; `depth` counts the bridges above
    /// it, so a deeper switch is a nearer one.
    Switch {
        bridge: PciAddr,
        depth: usize,
    },
    RootComplex(&'m str),
    Numa(u32),
    /// Nothing in common: different NUMA nodes, or locality unknown.
    Remote {
        gpu_numa: Option<u32>,
        nic_numa: Option<u32>,
    },
}

impl Nearness<'_> {
    /// Sort key: lower is nearer.
    pub fn key(&self) -> (u8, usize) {
        match self {
            Nearness::Switch { depth, .. } => (0, usize::MAX - depth),
            Nearness::RootComplex(_) => (1, 0),
            Nearness::Numa(_) => (2, 0),
            Nearness::Remote { .. } => (3, 0),
        }
    }

    /// Whether the PCI tree itself ties the two together (switch or root complex).
    pub fn shares_pci(&self) -> bool {
        matches!(self, Nearness::Switch { .. } | Nearness::RootComplex(_))
    }

    /// One sentence saying why this NIC was chosen for this GPU.
    pub fn reason(&self, gpu: PciAddr, nic: PciAddr) -> String {
        match self {
            Nearness::Switch { bridge, .. } => {
                format!("GPU {gpu} and NIC {nic} share switch {bridge}")
            }
            Nearness::RootComplex(root) => {
                format!("GPU {gpu} and NIC {nic} share root complex {root}")
            }
            Nearness::Numa(node) => format!("GPU {gpu} and NIC {nic} are both on NUMA node {node}"),
            Nearness::Remote {
                gpu_numa: Some(g),
                nic_numa: Some(n),
            } => format!(
                "NIC {nic} is on NUMA node {n}, GPU {gpu} on NUMA node {g} (crosses the inter-socket link)"
            ),
            Nearness::Remote { gpu_numa, nic_numa } => format!(
                "NIC {nic} ({}) has no known locality to GPU {gpu} ({}); no nearer fabric NIC exists",
                numa_text(*nic_numa),
                numa_text(*gpu_numa)
            ),
        }
    }
}

fn numa_text(node: Option<u32>) -> String {
    node.map_or_else(
        || "NUMA node unknown".to_string(),
        |n| format!("NUMA node {n}"),
    )
}

/// How near `nic` is to `gpu`.
pub(super) fn nearness<'m>(gpu: &Place<'m>, nic: &Place<'m>) -> Nearness<'m> {
    // Lowest common bridge: the first of the NIC's bridges (nearest first) that is also
    // above the GPU. Chains are a handful of bridges long, so a scan beats hashing.
    for bridge in &nic.ancestors {
        if let Some(pos) = gpu.ancestors.iter().position(|b| b == bridge) {
            return Nearness::Switch {
                bridge: *bridge,
                depth: gpu.ancestors.len() - pos - 1,
            };
        }
    }
    if let (Some(a), Some(b)) = (gpu.root, nic.root)
        && a == b
    {
        return Nearness::RootComplex(a);
    }
    match (gpu.numa, nic.numa) {
        (Some(a), Some(b)) if a == b => Nearness::Numa(a),
        (gpu_numa, nic_numa) => Nearness::Remote { gpu_numa, nic_numa },
    }
}
