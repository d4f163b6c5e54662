//! Write an NCCL topology file (the `NCCL_TOPO_FILE` format) from the machine model.
//!
//! One `<cpu numaid=.. affinity=..>` per NUMA node, and under it the PCI tree down to
//! every GPU and NIC, with the real bridges (PCIe switches) between them. Branches that
//! lead to no GPU or NIC are left out: NCCL only needs the paths between them. NCCL fills
//! in what the file does not say (CPU arch and vendor, NVLinks, net devices) from its
//! own discovery, as it does with the vendors' hand-written files.

use std::fmt::Write;

use crate::model::{Machine, PciDevice};
use crate::pci::PciAddr;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The devices worth writing: GPUs, NICs and every bridge above one.
fn wanted(m: &Machine) -> Vec<PciAddr> {
    let mut keep: Vec<PciAddr> = Vec::new();
    let leaves = m
        .gpus
        .iter()
        .map(|g| g.pci)
        .chain(m.nics.iter().filter(|n| is_fabric(m, n.pci)).map(|n| n.pci));
    for leaf in leaves {
        for a in std::iter::once(leaf).chain(m.ancestors(leaf)) {
            if !keep.contains(&a) {
                keep.push(a);
            }
        }
    }
    keep.sort();
    keep
}

fn is_fabric(m: &Machine, addr: PciAddr) -> bool {
    m.fabric_nics().iter().any(|n| n.pci == addr)
}

fn attrs(d: &PciDevice) -> String {
    let mut s = format!("busid=\"{}\" class=\"0x{:06x}\"", d.addr, d.class);
    if d.vendor != 0 {
        let _ = write!(
            s,
            " vendor=\"0x{:04x}\" device=\"0x{:04x}\"",
            d.vendor, d.device
        );
    }
    if let Some(speed) = &d.link.current_speed {
        let _ = write!(s, " link_speed=\"{}\"", escape(speed));
    }
    if let Some(w) = d.link.current_width {
        let _ = write!(s, " link_width=\"{w}\"");
    }
    s
}

fn write_device(m: &Machine, keep: &[PciAddr], d: &PciDevice, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    let children: Vec<&PciDevice> = m
        .pci
        .iter()
        .filter(|c| c.parent == Some(d.addr) && keep.contains(&c.addr))
        .collect();
    if children.is_empty() {
        let _ = writeln!(out, "{pad}<pci {}/>", attrs(d));
        return;
    }
    let _ = writeln!(out, "{pad}<pci {}>", attrs(d));
    for c in children {
        write_device(m, keep, c, depth + 1, out);
    }
    let _ = writeln!(out, "{pad}</pci>");
}

/// Render the model as an NCCL topology XML document.
pub fn render(machine: &Machine) -> String {
    let keep = wanted(machine);
    let tops: Vec<&PciDevice> = machine
        .pci
        .iter()
        .filter(|d| {
            keep.contains(&d.addr) && d.parent.is_none_or(|p| machine.pci_device(p).is_none())
        })
        .collect();
    let mut out = String::from("<system version=\"1\">\n");
    // Devices whose NUMA node is unknown go under the first NUMA node: NCCL needs every
    // PCI tree under some CPU, and a comment says the placement is a guess.
    let first = machine.numa_nodes.first().map(|n| n.id);
    let mut nodes: Vec<(Option<u32>, Vec<&PciDevice>)> = machine
        .numa_nodes
        .iter()
        .map(|n| (Some(n.id), Vec::new()))
        .collect();
    let mut unplaced = Vec::new();
    for d in tops {
        match machine.numa_of(d.addr).or(first) {
            Some(id) => match nodes.iter_mut().find(|(n, _)| *n == Some(id)) {
                Some((_, list)) => list.push(d),
                None => nodes.push((Some(id), vec![d])),
            },
            None => unplaced.push(d),
        }
    }
    if !unplaced.is_empty() {
        nodes.push((None, unplaced));
    }
    for (id, devices) in nodes {
        if devices.is_empty() {
            continue;
        }
        let numaid = id.unwrap_or(0);
        let mut open = format!("  <cpu numaid=\"{numaid}\"");
        if let Some(cpus) = id
            .and_then(|i| machine.numa_node(i))
            .map(|n| &n.cpus)
            .filter(|c| !c.is_empty())
        {
            let _ = write!(open, " affinity=\"{}\"", cpus.to_mask());
        }
        open.push('>');
        if id.is_none() {
            out.push_str("  <!-- NUMA node unknown for these devices -->\n");
        }
        let _ = writeln!(out, "{open}");
        for d in devices {
            write_device(machine, &keep, d, 2, &mut out);
        }
        out.push_str("  </cpu>\n");
    }
    out.push_str("</system>\n");
    out
}
