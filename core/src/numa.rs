//! Grace (GB200 / GB300) placement rules in the model: which NUMA node a GPU's CPUs and
//! memory come from, and when PCIe distance says nothing about locality.
//!
//! Two facts decide placement on a Grace tray, and neither is a per-instance rule:
//!
//! - **NVLink-C2C.** A Grace-Blackwell GPU reaches its CPU over NVLink-C2C, not over
//!   PCIe: `nvidia-smi topo -m` reports SYS (OCI bare metal) or NODE (Azure VM) for every
//!   GPU-NIC pair, so a shared PCIe switch or root complex means nothing for it. Its
//!   locality is the Grace socket's NUMA node. Which GPUs attach that way is a property
//!   of the GPU model (its PCI device id), so [`Machine::attaches_over_c2c`] asks the id.
//! - **CPU-less GPU-memory nodes.** Without CDMM (drivers before R580, or CDMM off) each
//!   GPU's HBM is a NUMA node of its own with no CPUs (e.g. 2, 10, 18, 26 on GB200), and
//!   the GPU's NUMA id may name it. Binding CPUs to it fails and binding memory to it
//!   alone starves the host side, so [`Machine::cpu_node_of`] maps such a node to the
//!   CPU-bearing node of its socket: the nearest by the kernel's distance table, else the
//!   node of the nearest PCIe bridge above the device that sits on a CPU-bearing node.
//!   With CDMM there are no such nodes and every lookup is the identity, so both shapes
//!   plan the same CPUs, memory node and NICs.
//!
//! The solver, and through it the plugin, `explain` and the generated NCCL topology, use
//! these functions; nothing else decides a Grace rank's socket.

use crate::model::{Machine, vendor};
use crate::pci::PciAddr;

/// NVIDIA device ids of GPUs that attach to a Grace CPU over NVLink-C2C.
///
/// Source: pci.ids (pciutils/pciids @ c1c12547, as compiled in
/// shared/topologies/derived/current-gen-instances.md): 2941 "HGX GB200", 31c2 / 31c3
/// "GB110 [GB300]". GH200 is left out until an id for it is cited.
pub mod c2c_gpu {
    pub const GB200: u16 = 0x2941;
    pub const GB300: u16 = 0x31c2;
    pub const GB300_B: u16 = 0x31c3;
    pub const ALL: [u16; 3] = [GB200, GB300, GB300_B];
}

/// How a NUMA node named by a device maps to the node its CPUs and memory policy use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuNode {
    /// The node lists CPUs itself (or the source lists no CPUs anywhere, so nothing can
    /// be said): used as it is.
    Own(u32),
    /// `memory` has no CPUs (GPU memory without CDMM); `node` is its socket's CPU node.
    Socket {
        memory: u32,
        node: u32,
        via: SocketVia,
    },
    /// `memory` has no CPUs and neither the distance table nor the PCI tree names its
    /// socket.
    Unresolved(u32),
}

/// What tied a CPU-less node to its socket's CPU node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketVia {
    /// The kernel's NUMA distance table: the nearest CPU-bearing node, at this distance.
    Distance(u32),
    /// The nearest PCIe bridge above the device that sits on a CPU-bearing node.
    Bridge(PciAddr),
}

impl CpuNode {
    /// The node to take CPUs and memory from; `None` when unresolved.
    pub fn node(self) -> Option<u32> {
        match self {
            CpuNode::Own(n) | CpuNode::Socket { node: n, .. } => Some(n),
            CpuNode::Unresolved(_) => None,
        }
    }
}

impl Machine {
    /// Whether NUMA node `id` is known to have no CPUs: it lists none while some other
    /// node does. A source that gives no CPU list at all (a trimmed NCCL file) leaves
    /// every node empty, which is "unknown", not CPU-less.
    pub fn is_cpu_less(&self, id: u32) -> bool {
        let Some(node) = self.numa_node(id) else {
            return false;
        };
        node.cpus.is_empty() && self.numa_nodes.iter().any(|n| !n.cpus.is_empty())
    }

    /// The CPU-bearing node for NUMA node `numa`, named by the device at `addr` (used for
    /// the PCI-tree fallback). See the module comment.
    pub fn cpu_node_of(&self, numa: u32, addr: PciAddr) -> CpuNode {
        if !self.is_cpu_less(numa) {
            return CpuNode::Own(numa);
        }
        if let Some((node, distance)) = self.nearest_cpu_node(numa) {
            return CpuNode::Socket {
                memory: numa,
                node,
                via: SocketVia::Distance(distance),
            };
        }
        for bridge in self.ancestors(addr) {
            let on = self.pci_device(bridge).and_then(|d| d.numa_node);
            if let Some(node) =
                on.filter(|&n| self.numa_node(n).is_some_and(|n| !n.cpus.is_empty()))
            {
                return CpuNode::Socket {
                    memory: numa,
                    node,
                    via: SocketVia::Bridge(bridge),
                };
            }
        }
        CpuNode::Unresolved(numa)
    }

    /// The CPU-bearing NUMA node of a PCI function: [`Machine::numa_of`] mapped through
    /// [`Machine::cpu_node_of`]. `None` when unknown or unresolved.
    pub fn cpu_numa_of(&self, addr: PciAddr) -> Option<u32> {
        self.numa_of(addr)
            .and_then(|n| self.cpu_node_of(n, addr).node())
    }

    /// The CPU-bearing node nearest to `memory` by the distance table, with the distance;
    /// `None` without a table entry or when two nodes tie (then the table does not say
    /// which socket it is).
    fn nearest_cpu_node(&self, memory: u32) -> Option<(u32, u32)> {
        let mut best: Option<(u32, u32)> = None;
        let mut tied = false;
        for node in self.numa_nodes.iter().filter(|n| !n.cpus.is_empty()) {
            let Some(d) = self.distance(memory, node.id) else {
                continue;
            };
            match best {
                Some((_, b)) if d == b => tied = true,
                Some((_, b)) if d > b => {}
                _ => {
                    best = Some((node.id, d));
                    tied = false;
                }
            }
        }
        best.filter(|_| !tied)
    }

    /// The distance from `from` to `to`, either direction (the table is symmetric on the
    /// machines this is for; a source may give one half).
    fn distance(&self, from: u32, to: u32) -> Option<u32> {
        let find = |a: u32, b: u32| {
            self.numa_distances
                .iter()
                .find(|d| d.from == a && d.to == b)
                .map(|d| d.distance)
        };
        find(from, to).or_else(|| find(to, from))
    }

    /// Whether the GPU at `gpu` reaches its CPU over NVLink-C2C (GB200, GB300), by its PCI
    /// id; then PCIe switches and root complexes say nothing about its locality.
    pub fn attaches_over_c2c(&self, gpu: PciAddr) -> bool {
        self.pci_device(gpu)
            .is_some_and(|d| d.vendor == vendor::NVIDIA && c2c_gpu::ALL.contains(&d.device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::CpuSet;
    use crate::model::{NumaDistance, NumaNode, PciDevice, PciLink};
    use crate::test_support::addr;

    fn node(id: u32, cpus: &str) -> NumaNode {
        NumaNode {
            id,
            cpus: CpuSet::parse_list(cpus).expect("cpulist"),
        }
    }

    fn dev(addr: &str, parent: Option<&str>, numa: Option<u32>, device: u16) -> PciDevice {
        PciDevice {
            addr: addr.parse().expect("addr"),
            parent: parent.map(|p| p.parse().expect("addr")),
            root: None,
            vendor: vendor::NVIDIA,
            device,
            class: 0x030200,
            numa_node: numa,
            link: PciLink::default(),
        }
    }

    fn grace(distances: bool, bridge_numa: Option<u32>) -> Machine {
        let mut m = Machine {
            numa_nodes: vec![node(0, "0-1"), node(1, "2-3"), node(2, ""), node(18, "")],
            pci: vec![
                dev("0008:00:00.0", None, bridge_numa, 0x1234),
                dev(
                    "0008:06:00.0",
                    Some("0008:00:00.0"),
                    Some(2),
                    c2c_gpu::GB200,
                ),
                dev("0018:06:00.0", None, Some(18), c2c_gpu::GB200),
            ],
            ..Machine::default()
        };
        if distances {
            for (from, to, distance) in [(2, 0, 80), (2, 1, 120), (18, 0, 120), (18, 1, 80)] {
                m.numa_distances.push(NumaDistance { from, to, distance });
            }
        }
        m
    }

    #[test]
    fn cpu_nodes_are_their_own_and_gpu_memory_nodes_map_to_their_socket() {
        let m = grace(true, None);
        assert_eq!(m.cpu_node_of(0, addr("0008:06:00.0")), CpuNode::Own(0));
        assert_eq!(
            m.cpu_node_of(2, addr("0008:06:00.0")),
            CpuNode::Socket {
                memory: 2,
                node: 0,
                via: SocketVia::Distance(80)
            }
        );
        assert_eq!(m.cpu_numa_of(addr("0018:06:00.0")), Some(1));
    }

    #[test]
    fn without_distances_the_bridge_names_the_socket_else_it_stays_unresolved() {
        let m = grace(false, Some(0));
        assert_eq!(
            m.cpu_node_of(2, addr("0008:06:00.0")),
            CpuNode::Socket {
                memory: 2,
                node: 0,
                via: SocketVia::Bridge(addr("0008:00:00.0"))
            }
        );
        // GPU 0018 has no bridge and there is no table: never a guess.
        assert_eq!(
            m.cpu_node_of(18, addr("0018:06:00.0")),
            CpuNode::Unresolved(18)
        );
    }

    #[test]
    fn a_tie_in_the_distance_table_names_no_socket() {
        let mut m = grace(false, None);
        for to in [0, 1] {
            m.numa_distances.push(NumaDistance {
                from: 2,
                to,
                distance: 40,
            });
        }
        assert_eq!(
            m.cpu_node_of(2, addr("0008:06:00.0")),
            CpuNode::Unresolved(2)
        );
    }

    #[test]
    fn nodes_without_any_cpu_list_are_unknown_not_cpu_less() {
        let m = Machine {
            numa_nodes: vec![node(0, ""), node(1, "")],
            ..Machine::default()
        };
        assert!(!m.is_cpu_less(0));
        assert_eq!(m.cpu_node_of(1, addr("0000:01:00.0")), CpuNode::Own(1));
    }

    #[test]
    fn c2c_is_told_by_the_gpu_id() {
        let m = grace(true, None);
        assert!(m.attaches_over_c2c(addr("0008:06:00.0")));
        assert!(!m.attaches_over_c2c(addr("0008:00:00.0")));
    }
}
