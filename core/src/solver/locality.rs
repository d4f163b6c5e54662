//! Where a PCI function sits: its bridge chain, root complex and NUMA node, and how near
//! two functions are to each other.
//!
//! The machine's PCI list is indexed once per solve and only the step's GPUs and the
//! fabric NICs get their ancestor chains walked, so a solve never scans every PCI device
//! for every GPU-NIC pair.

use std::collections::HashMap;

use crate::model::{Machine, PciDevice};
use crate::pci::PciAddr;

/// A PCI function with its locality worked out.
#[derive(Clone, Debug)]
pub(super) struct Place<'m> {
    pub addr: PciAddr,
    /// Bridges above the function, nearest first.
    pub chain: Vec<PciAddr>,
    /// Root complex name ("pci0000:10"), from the function or the nearest bridge naming one.
    pub root: Option<&'m str>,
    /// Own NUMA node, else the nearest bridge's, else the only node of a one-node machine.
    pub numa: Option<u32>,
}

/// The machine's PCI functions by address.
pub(super) struct Locality<'m> {
    index: HashMap<PciAddr, &'m PciDevice>,
    only_numa: Option<u32>,
}

impl<'m> Locality<'m> {
    pub fn new(machine: &'m Machine) -> Self {
        let mut index = HashMap::with_capacity(machine.pci.len());
        for device in &machine.pci {
            // First entry wins, like Machine::pci_device.
            index.entry(device.addr).or_insert(device);
        }
        let only_numa = match machine.numa_nodes.as_slice() {
            [only] => Some(only.id),
            _ => None,
        };
        Self { index, only_numa }
    }

    /// Locate one function, or (when the PCI tree lacks it) place it nowhere: no bridges,
    /// no root complex, only the NUMA node a one-node machine implies.
    pub fn place_or_unknown(&self, addr: PciAddr) -> Place<'m> {
        self.place(addr).unwrap_or(Place {
            addr,
            chain: Vec::new(),
            root: None,
            numa: self.only_numa,
        })
    }

    /// Locate one function; `None` when it is not in the PCI tree.
    pub fn place(&self, addr: PciAddr) -> Option<Place<'m>> {
        let device = self.index.get(&addr).copied()?;
        let mut chain = Vec::new();
        let mut root = device.root.as_deref();
        let mut numa = device.numa_node;
        let mut cur = device.parent;
        while let Some(parent) = cur {
            // A cycle or an absurd depth ends the walk; Machine::validate reports it.
            if parent == addr || chain.contains(&parent) || chain.len() > self.index.len() {
                break;
            }
            chain.push(parent);
            let Some(bridge) = self.index.get(&parent).copied() else {
                break;
            };
            root = root.or(bridge.root.as_deref());
            numa = numa.or(bridge.numa_node);
            cur = bridge.parent;
        }
        Some(Place {
            addr,
            chain,
            root,
            numa: numa.or(self.only_numa),
        })
    }
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
    for bridge in &nic.chain {
        if let Some(pos) = gpu.chain.iter().position(|b| b == bridge) {
            return Nearness::Switch {
                bridge: *bridge,
                depth: gpu.chain.len() - pos - 1,
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
