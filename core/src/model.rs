//! The machine model: what every topology source produces and the solver consumes.
//!
//! One `Machine` describes one node: its NUMA nodes and CPUs, every PCI function that
//! matters for locality (root complexes, bridges and PCIe switch ports, GPUs, NICs), the
//! GPUs, the NICs, and the DMI identity used to recognise the cloud instance.
//!
//! Unknowns stay explicit (`None`), never guessed: a VM's `numa_node = -1` is `None`,
//! a source without CPU masks leaves the NUMA node's `cpus` empty.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::pci::PciAddr;

/// PCI class codes (the 24-bit `class` value) this crate reasons about.
pub mod class {
    pub const BRIDGE_PCI: u32 = 0x060400;
    pub const DISPLAY_VGA: u32 = 0x030000;
    pub const DISPLAY_3D: u32 = 0x030200;
    pub const NETWORK_ETHERNET: u32 = 0x020000;
    pub const NETWORK_INFINIBAND: u32 = 0x020700;

    /// Display controllers (VGA compatible or 3D), the classes NVIDIA data-centre GPUs use.
    pub fn is_gpu(class: u32) -> bool {
        class >> 8 == DISPLAY_VGA >> 8 || class >> 8 == DISPLAY_3D >> 8
    }
    pub fn is_bridge(class: u32) -> bool {
        class >> 8 == BRIDGE_PCI >> 8
    }
    pub fn is_network(class: u32) -> bool {
        class >> 16 == 0x02
    }
}

/// PCI vendor ids this crate reasons about.
pub mod vendor {
    pub const NVIDIA: u16 = 0x10de;
    pub const MELLANOX: u16 = 0x15b3;
    pub const AMAZON: u16 = 0x1d0f;
    pub const GOOGLE: u16 = 0x1ae0;
    /// Device id of Google's gVNIC.
    pub const GVNIC_DEVICE: u16 = 0x0042;
}

/// The node's identity from /sys/class/dmi/id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dmi {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sys_vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis_asset_tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_vendor: Option<String>,
}

/// One entry of the kernel's NUMA distance table (`/sys/devices/system/node/nodeN/distance`):
/// how far memory on node `to` is from node `from` (10 = local).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NumaDistance {
    pub from: u32,
    pub to: u32,
    pub distance: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    pub id: u32,
    /// Empty when the source gives no CPU list (e.g. a trimmed NCCL file).
    pub cpus: CpuSet,
}

/// Current and maximum PCIe link, as the kernel reports them (`current_link_speed` is
/// text such as "16.0 GT/s PCIe").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciLink {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_speed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_width: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_speed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_width: Option<u8>,
}

/// One PCI function: a bridge (root port, PCIe switch port) or an endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciDevice {
    pub addr: PciAddr,
    /// The upstream bridge; `None` when the function sits on a root bus.
    pub parent: Option<PciAddr>,
    /// The host bridge (root complex) above it, named as in sysfs: "pci0000:10".
    /// `None` when the source does not say (NCCL files).
    pub root: Option<String>,
    pub vendor: u16,
    pub device: u16,
    /// 24-bit class code, e.g. 0x030200 for a 3D controller.
    pub class: u32,
    /// `None` when unknown (numa_node = -1 on many VMs).
    pub numa_node: Option<u32>,
    #[serde(default)]
    pub link: PciLink,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub pci: PciAddr,
    /// The /dev/nvidiaN minor number, from /proc/driver/nvidia/gpus/*/information.
    pub minor: Option<u32>,
    pub model: Option<String>,
}

/// What kind of network device a NIC is; decides whether it carries the GPU fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NicKind {
    /// InfiniBand HCA or IB virtual function (link layer InfiniBand).
    Infiniband,
    /// RDMA over Converged Ethernet (an RDMA device whose link layer is Ethernet).
    Roce,
    /// AWS Elastic Fabric Adapter (1d0f:efa*).
    Efa,
    /// Google gVNIC carrying GPUDirect-TCPX/TCPXO traffic.
    Gvnic,
    /// A plain Ethernet netdev (management / host NIC).
    Ethernet,
}

impl NicKind {
    /// Every kind with its name: the one table for profiles, explain and serde (a test
    /// checks serde writes these names).
    pub const NAMES: [(NicKind, &'static str); 5] = [
        (NicKind::Infiniband, "infiniband"),
        (NicKind::Roce, "roce"),
        (NicKind::Efa, "efa"),
        (NicKind::Gvnic, "gvnic"),
        (NicKind::Ethernet, "ethernet"),
    ];

    pub fn as_str(self) -> &'static str {
        NicKind::NAMES
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("", |(_, n)| n)
    }

    pub fn parse(name: &str) -> Option<NicKind> {
        NicKind::NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(k, _)| *k)
    }

    /// "infiniband, roce, efa, gvnic or ethernet", for messages.
    pub fn expected() -> String {
        let names: Vec<&str> = NicKind::NAMES.iter().map(|(_, n)| *n).collect();
        one_of(&names)
    }
}

/// "a, b or c".
pub(crate) fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// State of an RDMA port (/sys/class/infiniband/DEV/ports/N).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaPort {
    pub number: u32,
    /// e.g. "4: ACTIVE"
    pub state: Option<String>,
    /// e.g. "400 Gb/sec (4X NDR)"
    pub rate: Option<String>,
    /// "InfiniBand" or "Ethernet"
    pub link_layer: Option<String>,
}

/// One network PCI function with its RDMA device and netdev names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    pub pci: PciAddr,
    pub kind: NicKind,
    /// RDMA device name (mlx5_0, rdmap79s0, mlx5_ib3); `None` for plain netdevs.
    pub rdma: Option<String>,
    /// Network interface name (ib0, eth1, enp6s0); `None` when it has none.
    pub netdev: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<RdmaPort>,
}

impl Nic {
    /// The name users and NCCL know the device by: the RDMA name, else the netdev.
    pub fn name(&self) -> Option<&str> {
        self.rdma.as_deref().or(self.netdev.as_deref())
    }
}

/// Decide a NIC's kind from its PCI ids and RDMA facts. Shared by every source so a
/// device is classified the same way whether it came from sysfs, NCCL or hwloc XML.
pub fn classify_nic(
    vendor_id: u16,
    device_id: u16,
    rdma: bool,
    link_layer: Option<&str>,
) -> NicKind {
    match (vendor_id, device_id) {
        (vendor::AMAZON, d) if d >> 8 == 0xef => NicKind::Efa,
        (vendor::GOOGLE, vendor::GVNIC_DEVICE) => NicKind::Gvnic,
        _ if rdma && link_layer.is_some_and(|l| l.eq_ignore_ascii_case("ethernet")) => {
            NicKind::Roce
        }
        _ if rdma => NicKind::Infiniband,
        _ => NicKind::Ethernet,
    }
}

/// A whole node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    #[serde(default)]
    pub dmi: Dmi,
    pub numa_nodes: Vec<NumaNode>,
    /// Physical cores as sets of their hardware threads. Empty when unknown; the solver
    /// then treats every CPU as its own core.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cores: Vec<CpuSet>,
    /// CPU packages (sockets) as sets of their hardware threads, only where they are not
    /// the CPU-bearing NUMA nodes (AMD NPS2/NPS4, Intel SNC: several NUMA nodes in one
    /// package; a VM with one NUMA node over two sockets). Empty: each CPU-bearing NUMA
    /// node is a package. [`Machine::sockets`] reads either form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<CpuSet>,
    /// Every PCI function that matters for locality; every GPU and NIC address is here.
    pub pci: Vec<PciDevice>,
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    /// The kernel's NUMA distance table; empty when the source does not give one. Only
    /// CPU-less NUMA nodes (Grace GPU memory without CDMM) need it: it names the
    /// CPU-bearing node of their socket ([`Machine::cpu_node_of`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_distances: Vec<NumaDistance>,
    /// What a description assumed where its sources leave a gap (catalog entries); the
    /// solver repeats each in the reasons of the ranks it concerns, so a guess is never
    /// shown as measured. Empty for live sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assumptions: Vec<Assumption>,
}

/// One assumption of a machine description.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Assumption {
    /// The GPU or NIC it is about; `None` for the whole machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<PciAddr>,
    pub text: String,
}

/// Where a PCI function sits: what one walk up its bridges finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciPlace<'m> {
    pub addr: PciAddr,
    /// Bridges above the function, nearest first.
    pub ancestors: Vec<PciAddr>,
    /// Root complex name ("pci0000:10"): the function's own, else the nearest bridge's.
    pub root: Option<&'m str>,
    /// Own NUMA node, else the nearest bridge's, else the only node of a one-node machine.
    pub numa: Option<u32>,
}

/// A machine's PCI functions by address, built once for callers that locate many
/// functions (the solver places every step GPU and fabric NIC).
pub struct PciIndex<'m> {
    by_addr: HashMap<PciAddr, &'m PciDevice>,
    only_numa: Option<u32>,
}

impl<'m> PciIndex<'m> {
    pub fn new(machine: &'m Machine) -> Self {
        let mut by_addr = HashMap::with_capacity(machine.pci.len());
        for device in &machine.pci {
            // First entry wins, like Machine::pci_device.
            by_addr.entry(device.addr).or_insert(device);
        }
        Self {
            by_addr,
            only_numa: machine.only_numa(),
        }
    }

    /// Same answer as [`Machine::place`], by hashed lookup.
    pub fn place(&self, addr: PciAddr) -> Option<PciPlace<'m>> {
        walk_up(
            addr,
            |a| self.by_addr.get(&a).copied(),
            self.only_numa,
            self.by_addr.len(),
        )
    }

    /// The NUMA node of a function the tree lacks: the only node of a one-node machine.
    pub fn only_numa(&self) -> Option<u32> {
        self.only_numa
    }
}

/// The one walk up the PCI tree. `limit` bounds it (a corrupt tree cannot make it loop);
/// a cycle ends it at the first repeated bridge, which stays in the list.
fn walk_up<'m>(
    addr: PciAddr,
    lookup: impl Fn(PciAddr) -> Option<&'m PciDevice>,
    only_numa: Option<u32>,
    limit: usize,
) -> Option<PciPlace<'m>> {
    let device = lookup(addr)?;
    let mut ancestors = Vec::new();
    let mut root = device.root.as_deref();
    let mut numa = device.numa_node;
    let mut cur = device.parent;
    while let Some(parent) = cur {
        if ancestors.contains(&parent) || ancestors.len() > limit {
            break;
        }
        ancestors.push(parent);
        let Some(bridge) = lookup(parent) else {
            break;
        };
        root = root.or(bridge.root.as_deref());
        numa = numa.or(bridge.numa_node);
        cur = bridge.parent;
    }
    Some(PciPlace {
        addr,
        ancestors,
        root,
        numa: numa.or(only_numa),
    })
}

/// A machine whose parts do not fit together.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("{what} {addr} is not in the PCI tree")]
    NotInPciTree { what: &'static str, addr: PciAddr },
    #[error("PCI device {child} names parent {parent}, which is not in the PCI tree")]
    MissingParent { child: PciAddr, parent: PciAddr },
    #[error("PCI device {0} is its own ancestor (cycle in the PCI tree)")]
    Cycle(PciAddr),
    #[error("PCI device {0} is listed twice")]
    Duplicate(PciAddr),
    #[error("NUMA node {0} is listed twice")]
    DuplicateNuma(u32),
}

impl Machine {
    pub fn pci_device(&self, addr: PciAddr) -> Option<&PciDevice> {
        self.pci.iter().find(|d| d.addr == addr)
    }

    pub fn numa_node(&self, id: u32) -> Option<&NumaNode> {
        self.numa_nodes.iter().find(|n| n.id == id)
    }

    /// GPUs in the order Slurm and CUDA number them on a node: by /dev/nvidiaN minor
    /// number (gres.conf lists `File=/dev/nvidia[0-7]`), GPUs of unknown minor after,
    /// in PCI order.
    pub fn gpus_in_slurm_order(&self) -> Vec<&Gpu> {
        let mut gpus: Vec<&Gpu> = self.gpus.iter().collect();
        gpus.sort_by_key(|g| (g.minor.is_none(), g.minor, g.pci));
        gpus
    }

    /// The CPU packages (sockets, as hwloc and `slurmd -C` count them), ordered by first
    /// CPU: [`Machine::packages`] when the source gave them, else the CPU-bearing NUMA
    /// nodes.
    pub fn sockets(&self) -> Vec<CpuSet> {
        if self.packages.is_empty() {
            return self.numa_sockets();
        }
        let mut sockets = self.packages.clone();
        sockets.sort_by_key(|c| c.first());
        sockets
    }

    /// The CPU-bearing NUMA nodes' CPU lists, ordered by first CPU.
    fn numa_sockets(&self) -> Vec<CpuSet> {
        let mut sockets: Vec<CpuSet> = self
            .numa_nodes
            .iter()
            .map(|n| n.cpus.clone())
            .filter(|c| !c.is_empty())
            .collect();
        sockets.sort_by_key(|c| c.first());
        sockets
    }

    /// Record the packages a source read, in the form [`Machine::packages`] keeps: none
    /// when they are exactly the CPU-bearing NUMA nodes (the common case, so a machine
    /// read from sysfs equals its description).
    pub fn set_packages(&mut self, mut packages: Vec<CpuSet>) {
        packages.retain(|p| !p.is_empty());
        packages.sort_by_key(|c| c.first());
        self.packages = if packages == self.numa_sockets() {
            Vec::new()
        } else {
            packages
        };
    }

    /// All CPUs of the machine (the union of the NUMA nodes' CPU lists).
    pub fn cpus(&self) -> CpuSet {
        self.numa_nodes
            .iter()
            .fold(CpuSet::new(), |acc, n| acc.union(&n.cpus))
    }

    /// Where `addr` sits in the PCI tree (bridges, root complex, NUMA node); `None` when
    /// the tree lacks it. Walks by linear lookup: [`PciIndex`] does the same walk for
    /// callers that locate many functions.
    pub fn place(&self, addr: PciAddr) -> Option<PciPlace<'_>> {
        walk_up(
            addr,
            |a| self.pci_device(a),
            self.only_numa(),
            self.pci.len(),
        )
    }

    /// The bridges above `addr`, nearest first. In a cyclic tree the walk stops at the
    /// first repeat, so a function on a cycle lists itself (what `validate` looks for).
    pub fn ancestors(&self, addr: PciAddr) -> Vec<PciAddr> {
        self.place(addr).map(|p| p.ancestors).unwrap_or_default()
    }

    /// The NUMA node of a PCI function: its own, else the nearest ancestor's, else the
    /// only NUMA node of a single-node machine; `None` when unknown.
    pub fn numa_of(&self, addr: PciAddr) -> Option<u32> {
        self.place(addr).map_or(self.only_numa(), |p| p.numa)
    }

    /// The root complex of a PCI function: its own, else the nearest ancestor's, if the
    /// source named one.
    pub fn root_of(&self, addr: PciAddr) -> Option<&str> {
        self.place(addr).and_then(|p| p.root)
    }

    /// The NUMA node every function of a one-node machine is on.
    fn only_numa(&self) -> Option<u32> {
        match self.numa_nodes.as_slice() {
            [only] => Some(only.id),
            _ => None,
        }
    }

    /// NICs that carry the GPU fabric.
    ///
    /// - EFA always; InfiniBand unless the node has EFA (an EFA node's fabric is EFA:
    ///   the two `mlx5_core` InfiniBand devices of p6-b200/b300 are NVLink controllers).
    /// - RoCE when its PCI id belongs to the node's largest group of RDMA NICs: the fabric is
    ///   a homogeneous set (16 CX-7 ports on OCI BM.GPU.H100.8), while host NICs that also
    ///   speak RDMA are a different model and fewer (OCI's front-end mlx5_2/mlx5_11, Azure's
    ///   accelerated-networking `mlx5_an0` next to eight IB VFs).
    /// - gVNIC only on machines without any RDMA NIC (GCP A3 High/Mega), and never the host
    ///   NIC on root bus 00 of domain 0 (gVNIC `enp0s12` on A3).
    ///
    /// Host NICs of the fabric's own model pass this rule (OCI BM.GPU.H200.8: eth0-eth3 are
    /// ConnectX-7 like its eight fabric NICs); the vendor profile leaves them out, and
    /// front ends use `fabric::fabric_nics`, which applies it.
    pub fn fabric_nics(&self) -> Vec<&Nic> {
        let is_rdma =
            |n: &Nic| matches!(n.kind, NicKind::Infiniband | NicKind::Roce | NicKind::Efa);
        let pci_id = |n: &Nic| self.pci_device(n.pci).map(|d| (d.vendor, d.device));
        let mut group_sizes: std::collections::HashMap<Option<(u16, u16)>, usize> =
            Default::default();
        for nic in self.nics.iter().filter(|n| is_rdma(n)) {
            *group_sizes.entry(pci_id(nic)).or_default() += 1;
        }
        let largest = group_sizes.values().copied().max().unwrap_or(0);
        let has_rdma = largest > 0;
        let has_efa = self.nics.iter().any(|n| n.kind == NicKind::Efa);
        self.nics
            .iter()
            .filter(|n| match n.kind {
                // An EFA node's fabric is EFA: InfiniBand devices beside it are not
                // (p6-b200/b300's two mlx5_core NVLink controllers ibp115s0f0/ibp116s0f0).
                NicKind::Infiniband => !has_efa,
                NicKind::Efa => true,
                NicKind::Roce => group_sizes.get(&pci_id(n)).copied().unwrap_or(0) == largest,
                NicKind::Gvnic => !(has_rdma || n.pci.domain == 0 && n.pci.bus == 0),
                NicKind::Ethernet => false,
            })
            .collect()
    }

    /// Put every list in a canonical order so two descriptions of one machine compare equal.
    pub fn normalize(&mut self) {
        self.numa_nodes.sort_by_key(|n| n.id);
        self.numa_distances.sort();
        self.numa_distances.dedup();
        self.assumptions.sort();
        self.assumptions.dedup();
        self.cores.sort();
        self.packages.sort_by_key(|c| c.first());
        self.pci.sort_by_key(|d| d.addr);
        self.gpus.sort_by_key(|g| g.pci);
        self.nics
            .sort_by(|a, b| (a.pci, &a.rdma, &a.netdev).cmp(&(b.pci, &b.rdma, &b.netdev)));
        for nic in &mut self.nics {
            nic.ports.sort_by_key(|p| p.number);
        }
    }

    /// Check that the parts fit: GPUs and NICs are in the PCI tree, parents exist, no
    /// cycles, no duplicates.
    pub fn validate(&self) -> Result<(), ModelError> {
        let mut seen = std::collections::HashSet::new();
        for d in &self.pci {
            if !seen.insert(d.addr) {
                return Err(ModelError::Duplicate(d.addr));
            }
        }
        let mut numa_seen = std::collections::HashSet::new();
        for n in &self.numa_nodes {
            if !numa_seen.insert(n.id) {
                return Err(ModelError::DuplicateNuma(n.id));
            }
        }
        for d in &self.pci {
            if let Some(parent) = d.parent
                && !seen.contains(&parent)
            {
                return Err(ModelError::MissingParent {
                    child: d.addr,
                    parent,
                });
            }
            if self.ancestors(d.addr).contains(&d.addr) {
                return Err(ModelError::Cycle(d.addr));
            }
        }
        for g in &self.gpus {
            if !seen.contains(&g.pci) {
                return Err(ModelError::NotInPciTree {
                    what: "GPU",
                    addr: g.pci,
                });
            }
        }
        for n in &self.nics {
            if !seen.contains(&n.pci) {
                return Err(ModelError::NotInPciTree {
                    what: "NIC",
                    addr: n.pci,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nic_kind_names_are_the_serde_names() {
        for (kind, name) in NicKind::NAMES {
            let json = serde_json::to_string(&kind).expect("serialize");
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(NicKind::parse(name), Some(kind));
            assert_eq!(kind.as_str(), name);
        }
        assert_eq!(
            NicKind::expected(),
            "infiniband, roce, efa, gvnic or ethernet"
        );
    }
}
