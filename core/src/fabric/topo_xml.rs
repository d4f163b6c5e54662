//! Write an NCCL topology file (the `NCCL_TOPO_FILE` format) from the machine model.
//!
//! One `<cpu numaid=.. affinity=..>` per NUMA node, and under it the PCI tree down to
//! every GPU and NIC, with the real bridges (PCIe switches) between them. Branches that
//! lead to no GPU or NIC are left out: NCCL only needs the paths between them. A fabric
//! NIC with an RDMA device carries `<nic><net name=.. port=../></nic>`, as NCCL's own
//! dumps do; NCCL finds a net it discovers by that name and fills in the rest (speed,
//! GDR, dev index), so the file and NCCL agree on which PCI function is which device.
//! NCCL fills in what the file does not say (CPU arch and vendor, NVLinks) from its own
//! discovery, as it does with the vendors' hand-written files.

use std::fmt::Write;

use crate::model::{Machine, Nic, PciDevice};
use crate::pci::PciAddr;
use crate::sources::nccl_xml;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The devices worth writing: GPUs, the fabric NICs and every bridge above one.
fn wanted(m: &Machine, fabric: &[&Nic]) -> Vec<PciAddr> {
    let mut keep: Vec<PciAddr> = Vec::new();
    let leaves = m
        .gpus
        .iter()
        .map(|g| g.pci)
        .chain(fabric.iter().map(|n| n.pci));
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

fn attrs(d: &PciDevice) -> String {
    let mut s = format!("busid=\"{}\" class=\"0x{:06x}\"", d.addr, d.class);
    // Unknown ids are left out, as the vendors' own files do, for NCCL to fill in: 0 and
    // 0xffff (the NCCL source's UNKNOWN_ID, PCI's "no function"). Writing 0xffff would
    // claim a non-NVIDIA vendor for a GPU read from such a file.
    if d.vendor != 0 && d.vendor != nccl_xml::UNKNOWN_ID {
        let _ = write!(
            s,
            " vendor=\"0x{:04x}\" device=\"0x{:04x}\"",
            d.vendor, d.device
        );
    }
    // NCCL fills link_speed/link_width from max_link_speed/max_link_width: an idle GPU
    // trains its link down (current 2.5 GT/s), which would make NCCL rate the path as
    // slow. The current values stand in only where the maximum is unknown.
    let link = &d.link;
    if let Some(speed) = link.max_speed.as_ref().or(link.current_speed.as_ref()) {
        let _ = write!(s, " link_speed=\"{}\"", escape(speed));
    }
    if let Some(w) = link.max_width.or(link.current_width) {
        let _ = write!(s, " link_width=\"{w}\"");
    }
    s
}

/// `<net>` lines for the fabric RDMA devices on one PCI function. The port is the verbs
/// port; one net per function, which is how Linux presents each port of a ConnectX.
fn nets(fabric: &[&Nic], addr: PciAddr) -> Vec<String> {
    fabric
        .iter()
        .filter(|n| n.pci == addr)
        .filter_map(|n| {
            let name = n.rdma.as_deref()?;
            let port = n.ports.first().map_or(1, |p| p.number);
            Some(format!("<net name=\"{}\" port=\"{port}\"/>", escape(name)))
        })
        .collect()
}

/// The tree to write: the machine, the devices kept, and its fabric NICs.
struct Tree<'m> {
    m: &'m Machine,
    keep: Vec<PciAddr>,
    fabric: Vec<&'m Nic>,
}

fn write_device(t: &Tree<'_>, d: &PciDevice, depth: usize, out: &mut String) {
    let (m, keep) = (t.m, &t.keep);
    let pad = "  ".repeat(depth);
    let children: Vec<&PciDevice> = m
        .pci
        .iter()
        .filter(|c| c.parent == Some(d.addr) && keep.contains(&c.addr))
        .collect();
    let nets = nets(&t.fabric, d.addr);
    if children.is_empty() && nets.is_empty() {
        let _ = writeln!(out, "{pad}<pci {}/>", attrs(d));
        return;
    }
    let _ = writeln!(out, "{pad}<pci {}>", attrs(d));
    if !nets.is_empty() {
        let _ = writeln!(out, "{pad}  <nic>");
        for net in nets {
            let _ = writeln!(out, "{pad}    {net}");
        }
        let _ = writeln!(out, "{pad}  </nic>");
    }
    for c in children {
        write_device(t, c, depth + 1, out);
    }
    let _ = writeln!(out, "{pad}</pci>");
}

/// Render the model as an NCCL topology XML document, with `fabric` as its NICs: the
/// profile's fabric set ([`super::fabric_nics`]), the same NICs ranks are given and
/// NCCL_IB_HCA lists, so a host NIC the profile leaves out is not offered to NCCL here
/// either.
pub fn render(machine: &Machine, fabric: &[&Nic]) -> String {
    let tree = Tree {
        m: machine,
        keep: wanted(machine, fabric),
        fabric: fabric.to_vec(),
    };
    let keep = &tree.keep;
    let tops: Vec<&PciDevice> = machine
        .pci
        .iter()
        .filter(|d| {
            keep.contains(&d.addr) && d.parent.is_none_or(|p| machine.pci_device(p).is_none())
        })
        .collect();
    let mut out = String::from("<system version=\"1\">\n");
    // Devices whose NUMA node is unknown go under the first NUMA node: NCCL needs every
    // PCI tree under some CPU. Only where no node is known at all (neither the machine's
    // nor any device's) does a `numaid="0"` CPU stand in, with a comment saying so.
    let first = machine.numa_nodes.first().map(|n| n.id);
    let mut nodes: Vec<(Option<u32>, Vec<&PciDevice>)> = machine
        .numa_nodes
        .iter()
        .map(|n| (Some(n.id), Vec::new()))
        .collect();
    let mut unplaced = Vec::new();
    for d in tops {
        // The CPU node of the device's socket: a Grace GPU on a CPU-less GPU-memory node
        // goes under the CPU it is bound to (crate::numa).
        match machine.cpu_numa_of(d.addr).or(first) {
            Some(id) => match nodes.iter_mut().find(|(n, _)| *n == Some(id)) {
                Some((_, list)) => list.push(d),
                None => nodes.push((Some(id), vec![d])),
            },
            None => unplaced.push(d),
        }
    }
    if !unplaced.is_empty() {
        // A device can name a node the machine does not list; such an entry is then the
        // first known node, and a second `numaid="0"` beside it would be a file that
        // lists one NUMA node twice.
        match nodes.first_mut() {
            Some((_, list)) => list.extend(unplaced),
            None => nodes.push((None, unplaced)),
        }
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
            write_device(&tree, d, 2, &mut out);
        }
        out.push_str("  </cpu>\n");
    }
    out.push_str("</system>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `topology` and `nccl_xml` fuzz targets on their first seed run (the
    /// shape of Azure's ndv2-topo.xml): GPUs known by class alone came back from
    /// `render` with `vendor="0xffff"`, and the rendered file then read as no GPUs.
    #[test]
    fn gpus_without_vendor_ids_survive_a_render() {
        let text = r#"<system version="1">
              <cpu numaid="0" affinity="0000000f">
                <pci busid="0001:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>
                <pci busid="0101:00:00.0" class="0x020700" link_speed="16 GT/s" link_width="16"/>
              </cpu>
            </system>"#;
        let machine = nccl_xml::parse(text).expect("parses");
        assert_eq!(machine.gpus.len(), 1);
        let xml = render(&machine, &machine.fabric_nics());
        assert!(!xml.contains("0xffff"), "{xml}");
        let back = nccl_xml::parse(&xml).expect("the rendered file parses");
        let gpus = |m: &Machine| m.gpus.iter().map(|g| g.pci).collect::<Vec<_>>();
        assert_eq!(gpus(&back), gpus(&machine), "{xml}");
    }

    /// Found by the `hwloc_xml` fuzz target (its input, minimized by libFuzzer): with no
    /// NUMA node objects, one GPU under a nodeset (NUMA 0) and one without rendered two
    /// `<cpu numaid="0">`, a file NCCL's format, and our parser, refuse.
    #[test]
    fn an_unplaced_device_joins_the_node_a_device_named() {
        let text = r#"<topology version="2"><object><object nodeset="1"><object type="PCIDev" pci_busid="0:0.0" pci_type="302 [10de:1]"></object><object><object type="PCIDev" pci_busid="4:0.0" pci_type="302 [10de:1]"></object></object></object></object></topology>"#;
        let machine = crate::sources::hwloc_xml::parse(text).expect("parses");
        let xml = render(&machine, &machine.fabric_nics());
        assert_eq!(xml.matches("<cpu ").count(), 1, "{xml}");
        let back = nccl_xml::parse(&xml).expect("the rendered file parses");
        assert_eq!(back.gpus.len(), 2, "{xml}");
    }
}
