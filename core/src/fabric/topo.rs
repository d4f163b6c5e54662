//! Should NCCL use the vendor's topology file on this node?
//!
//! On VMs with a virtual PCI tree (Azure ND) NCCL cannot see which GPU and NIC share a
//! PCIe switch, so the image ships an NCCL_TOPO_FILE. That file is only right when it
//! describes this node: every bus id present, every device on the NUMA node the live
//! node puts it on, and the NUMA CPU masks as live. Azure images before azhpc-images
//! PR #391 (Jan 2025) shipped ndv5-topo.xml with the two NUMA masks swapped, which puts
//! every rank's NCCL proxy threads on the wrong socket; that case is recognised by name.

use serde::Serialize;

use crate::model::{Machine, class};
use crate::pci::PciAddr;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum TopoDecision {
    /// The vendor file describes this node: point NCCL_TOPO_FILE at it.
    Use { path: String },
    /// Bus ids match but the NUMA placement is swapped: do not use it, warn, generate.
    Refuse { reason: String },
    /// The file is absent or describes another machine: generate one from the model.
    Generate { reason: String },
}

/// The GPUs and NICs a topology names (placeholder switches are not compared).
fn endpoints(m: &Machine) -> Vec<PciAddr> {
    let mut out: Vec<PciAddr> = m
        .gpus
        .iter()
        .map(|g| g.pci)
        .chain(m.nics.iter().map(|n| n.pci))
        .collect();
    for d in &m.pci {
        if (class::is_gpu(d.class) || class::is_network(d.class)) && !out.contains(&d.addr) {
            out.push(d.addr);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Decide for the vendor file at `path`; `vendor` is that file parsed (`None` when the
/// file is absent or unreadable), `live` the node as discovered.
pub fn decide(path: &str, vendor: Option<&Machine>, live: &Machine) -> TopoDecision {
    let Some(vendor) = vendor else {
        return TopoDecision::Generate {
            reason: format!("vendor topology file {path} is not present"),
        };
    };
    let theirs = endpoints(vendor);
    if theirs.is_empty() {
        return TopoDecision::Generate {
            reason: format!("{path} lists no GPU or NIC"),
        };
    }
    if let Some(missing) = theirs.iter().find(|a| live.pci_device(**a).is_none()) {
        return TopoDecision::Generate {
            reason: format!("{path} names {missing}, which this node does not have"),
        };
    }
    let live_gpus: Vec<PciAddr> = live.gpus.iter().map(|g| g.pci).collect();
    if let Some(extra) = live_gpus.iter().find(|g| !theirs.contains(g)) {
        return TopoDecision::Generate {
            reason: format!("GPU {extra} of this node is not in {path}"),
        };
    }

    // NUMA node of every device: the file's against the live node's. Unknown on either
    // side cannot be checked and is not held against the file.
    let mut moved: Vec<(PciAddr, u32, u32)> = Vec::new();
    for a in &theirs {
        if let (Some(f), Some(l)) = (vendor.numa_of(*a), live.numa_of(*a))
            && f != l
        {
            moved.push((*a, f, l));
        }
    }
    // CPU masks of every NUMA node the file describes.
    let mut masks_differ = Vec::new();
    for n in &vendor.numa_nodes {
        if n.cpus.is_empty() {
            continue;
        }
        if let Some(l) = live.numa_node(n.id).filter(|l| !l.cpus.is_empty())
            && l.cpus != n.cpus
        {
            masks_differ.push((n.id, n.cpus.clone(), l.cpus.clone()));
        }
    }
    if moved.is_empty() && masks_differ.is_empty() {
        return TopoDecision::Use {
            path: path.to_string(),
        };
    }

    // A swap: each differing mask is exactly another live node's mask.
    let masks_swapped = !masks_differ.is_empty()
        && masks_differ
            .iter()
            .all(|(_, file_cpus, _)| live.numa_nodes.iter().any(|l| &l.cpus == file_cpus));
    // Or the devices moved as whole NUMA nodes: one consistent mapping, both ways.
    let devices_swapped = !moved.is_empty() && {
        let mut map: Vec<(u32, u32)> = Vec::new();
        moved
            .iter()
            .all(|(_, f, l)| match map.iter().find(|(a, _)| a == f) {
                Some((_, b)) => b == l,
                None => {
                    map.push((*f, *l));
                    true
                }
            })
            && map
                .iter()
                .all(|(a, b)| map.iter().any(|(c, d)| c == b && d == a))
    };
    if masks_swapped && moved.is_empty() {
        let (id, file_cpus, live_cpus) = &masks_differ[0];
        return TopoDecision::Refuse {
            reason: format!(
                "{path} has the NUMA CPU masks swapped (node {id}: file says CPUs {file_cpus}, this node has {live_cpus}); \
                 images before azhpc-images PR #391 shipped it so. Update the image; a topology generated from this node is used instead"
            ),
        };
    }
    if devices_swapped && masks_differ.is_empty() {
        let (a, f, l) = &moved[0];
        return TopoDecision::Refuse {
            reason: format!(
                "{path} places devices on swapped NUMA nodes ({a}: file says NUMA {f}, this node {l}); \
                 a topology generated from this node is used instead"
            ),
        };
    }
    let why = match (moved.first(), masks_differ.first()) {
        (Some((a, f, l)), _) => format!("{a} is on NUMA {f} in the file but NUMA {l} here"),
        (None, Some((id, f, l))) => format!("NUMA node {id} has CPUs {f} in the file but {l} here"),
        (None, None) => String::new(),
    };
    TopoDecision::Generate {
        reason: format!("{path} does not describe this node: {why}"),
    }
}
