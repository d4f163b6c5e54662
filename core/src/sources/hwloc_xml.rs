//! hwloc v2 XML (`lstopo --of xml`, `<topology version="2.0">`).
//!
//! How the object tree becomes a [`Machine`]:
//!
//! - **NUMA nodes** are the `NUMANode` objects: id from `os_index`, CPUs from their
//!   `cpuset` attribute (hwloc's bitmap text, see [`parse_bitmap`]), or, when it is absent,
//!   from the `PU` objects below the NUMA node's parent.
//! - **Cores** are the `Core` objects, each the set of `PU` os_index values below it.
//! - **Root complexes** are host bridges (`Bridge` with `bridge_type="0-1"`), named as in
//!   sysfs from the secondary bus of `bridge_pci`: `bridge_pci="0000:[80-84]"` is `pci0000:80`.
//! - **PCI functions**: every PCI-PCI bridge (root ports, PCIe switch ports) with its
//!   `pci_busid`, plus the `PCIDev`s that are NVIDIA GPUs or network devices. Other
//!   endpoints (storage, BMC VGA, other vendors' GPUs) are left out: they play no part in
//!   placement. Class, vendor and device come from `pci_type="CCCC [VVVV:DDDD] ..."`, so the
//!   class has no programming interface byte (0x0302 -> 0x030200). hwloc gives the link as
//!   bandwidth in GB/s (`pci_link_speed`), not as the kernel's "GT/s" text and width, so the
//!   link stays unknown.
//! - **GPUs**: a `PCIDev` with a display class and the NVIDIA vendor id, or with a CUDA or
//!   NVML OS device. The model is the OS device's `GPUModel` info (what the driver calls
//!   it), else the `PCIDevice` info. hwloc gives no /dev/nvidiaN minor: `minor` is `None`.
//! - **NICs**: a `PCIDev` with a network class or with an OpenFabrics or network OS device.
//!   The OpenFabrics OS device (`mlx5_0`, `rdmap16s27`) is the RDMA name and the network
//!   OS device (`ib0`, `eth0`) the netdev. hwloc does not export the link layer, so it is
//!   taken from the PCI class as in the NCCL source (0x0207 InfiniBand, 0x0200 Ethernet);
//!   ports come from the `Port<N>State` infos.
//! - **NUMA node of an I/O object**: the NUMA node of its nearest non-I/O ancestor (from
//!   that object's `nodeset`, or the NUMA nodes below it when there is none); `None` when
//!   that ancestor spans several NUMA nodes (I/O attached to the Machine of a 2-socket box).
//! - **DMI**: the Machine object's `DMISysVendor`, `DMIProductName`, `DMIBoardVendor` and
//!   `DMIChassisAssetTag` infos.
//!
//! hwloc 3 XML (`version="3.0"`) and hwloc 1.x XML (no version) are refused with an error
//! that says how to export a supported file.

use std::collections::HashSet;

use roxmltree::{Document, Node};

use super::nccl_xml::{UNKNOWN_ID, link_layer_of_class};
use super::{MachineXmlError, finish, line_of, parse_xml};
use crate::cpuset::{CpuSet, CpuSetError, MAX_CPU_ID};
use crate::model::{
    Gpu, Machine, Nic, NumaNode, PciDevice, PciLink, RdmaPort, class, classify_nic, vendor,
};
use crate::pci::PciAddr;

/// Parse an hwloc v2 XML export.
pub fn parse(text: &str) -> Result<Machine, MachineXmlError> {
    let doc = parse_xml(text)?;
    from_document(&doc)
}

/// A bitmap in hwloc's text form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bitmap {
    /// The bits set in the finite part.
    pub set: CpuSet,
    /// Whether every bit above the listed words is set too (hwloc's leading `0xf...f`).
    pub infinite: bool,
}

/// Parse hwloc's bitmap text: comma-separated 32-bit words, most significant first, each
/// `0x`-prefixed; an empty word is zero (`"0x00000303,0x03030000,,0x03030303"`) and a
/// leading `0xf...f` means "all higher bits set".
pub fn parse_bitmap(text: &str) -> Result<Bitmap, CpuSetError> {
    let bad = || CpuSetError::BadMask(text.to_string());
    let mut words: Vec<&str> = text.trim().split(',').map(str::trim).collect();
    let infinite = words.first() == Some(&"0xf...f");
    if infinite {
        words.remove(0);
    }
    if (words.len() as u64) * 32 > u64::from(MAX_CPU_ID) {
        return Err(bad());
    }
    let mut set = CpuSet::new();
    for (i, word) in words.iter().rev().enumerate() {
        if word.is_empty() {
            if words.len() == 1 && !infinite {
                return Err(bad()); // the whole text was empty
            }
            continue;
        }
        let digits = word
            .strip_prefix("0x")
            .or_else(|| word.strip_prefix("0X"))
            .unwrap_or(word);
        if digits.is_empty() || digits.len() > 8 {
            return Err(bad());
        }
        let value = u32::from_str_radix(digits, 16).map_err(|_| bad())?;
        for bit in 0..32 {
            if value & (1 << bit) != 0 {
                set.insert(i as u32 * 32 + bit);
            }
        }
    }
    Ok(Bitmap { set, infinite })
}

/// Build the machine from an already parsed document whose root should be `<topology>`.
pub(crate) fn from_document(doc: &Document<'_>) -> Result<Machine, MachineXmlError> {
    let root = doc.root_element();
    if root.tag_name().name() != "topology" {
        return Err(MachineXmlError::WrongRoot {
            line: line_of(root),
            found: root.tag_name().name().to_string(),
            expected: "an hwloc topology (<topology>)",
        });
    }
    check_version(root)?;
    let mut builder = Builder::default();
    builder.walk(root)?;
    finish(builder.machine)
}

fn check_version(root: Node<'_, '_>) -> Result<(), MachineXmlError> {
    let version = root.attribute("version");
    let what = match version.map(str::trim) {
        Some(v) if v.starts_with("2.") || v == "2" => return Ok(()),
        Some(v) if v.starts_with("3.") || v == "3" => "hwloc 3 XML",
        None => "hwloc 1.x XML (no version attribute)",
        Some(_) => "hwloc XML of an unknown version",
    };
    Err(MachineXmlError::UnsupportedHwlocVersion {
        what,
        version: version.unwrap_or("").to_string(),
    })
}

/// Where an object sits.
#[derive(Clone, Default)]
struct Context {
    /// NUMA node of the I/O objects below the nearest non-I/O ancestor.
    io_numa: Option<u32>,
    /// Host bridge above, as "pci0000:80".
    root: Option<String>,
    /// Nearest PCI bridge above.
    parent_pci: Option<PciAddr>,
    /// Index in `machine.cores` of the Core above.
    core: Option<usize>,
}

struct Builder {
    machine: Machine,
    seen_pci: HashSet<PciAddr>,
    numa_ids: HashSet<u32>,
    dmi_done: bool,
    /// Nodes the attribute-less fallbacks may still visit (see `scan`).
    scan_budget: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            machine: Machine::default(),
            seen_pci: HashSet::new(),
            numa_ids: HashSet::new(),
            dmi_done: false,
            scan_budget: 4_000_000,
        }
    }
}

fn object_type<'a>(node: Node<'a, '_>) -> &'a str {
    node.attribute("type").unwrap_or("")
}

fn objects<'a, 'i>(node: Node<'a, 'i>) -> impl DoubleEndedIterator<Item = Node<'a, 'i>> {
    node.children().filter(|c| c.has_tag_name("object"))
}

fn is_io(node: Node<'_, '_>) -> bool {
    matches!(object_type(node), "Bridge" | "PCIDev" | "OSDev")
}

impl Builder {
    /// Visit the objects in document order with an explicit stack (no recursion).
    fn walk(&mut self, root: Node<'_, '_>) -> Result<(), MachineXmlError> {
        let mut stack: Vec<(Node<'_, '_>, Context)> = objects(root)
            .rev()
            .map(|n| (n, Context::default()))
            .collect();
        while let Some((node, ctx)) = stack.pop() {
            let mut inner = ctx.clone();
            match object_type(node) {
                "Machine" => self.dmi(node),
                "NUMANode" => self.numa_node(node)?,
                "Core" => {
                    self.machine.cores.push(CpuSet::new());
                    inner.core = Some(self.machine.cores.len() - 1);
                }
                "PU" => {
                    let id = u32_attr(node, "os_index")?;
                    if let Some(core) = ctx.core.and_then(|i| self.machine.cores.get_mut(i)) {
                        core.insert(id);
                    }
                }
                "Bridge" => {
                    if is_host_bridge(node) {
                        inner.root = host_bridge_name(node)?;
                        inner.parent_pci = None;
                    } else {
                        let addr = self.pci_function(node, &ctx, true)?;
                        inner.parent_pci = Some(addr);
                    }
                }
                "PCIDev" => {
                    self.pci_dev(node, &ctx)?;
                    continue; // its children are OS devices, read by pci_dev
                }
                "OSDev" => continue,
                _ => {}
            }
            if !is_io(node) && objects(node).any(is_io) {
                inner.io_numa = self.numa_of_non_io(node)?;
            }
            let before = stack.len();
            stack.extend(objects(node).map(|c| (c, inner.clone())));
            stack[before..].reverse();
        }
        // Cores whose PUs were all missing say nothing.
        self.machine.cores.retain(|c| !c.is_empty());
        Ok(())
    }

    /// The single NUMA node of a non-I/O object, from its `nodeset` (or the NUMA nodes
    /// below it when it has none); `None` when it spans several or none.
    fn numa_of_non_io(&mut self, node: Node<'_, '_>) -> Result<Option<u32>, MachineXmlError> {
        if let Some(text) = node.attribute("nodeset") {
            let bitmap = parse_bitmap(text).map_err(|e| bad(node, "nodeset", text, e))?;
            return Ok(match (bitmap.infinite, bitmap.set.len()) {
                (false, 1) => bitmap.set.first(),
                _ => None,
            });
        }
        let mut found = None;
        for numa in self.scan(node, "NUMANode")? {
            let id = u32_attr(numa, "os_index")?;
            if found.is_some_and(|f| f != id) {
                return Ok(None);
            }
            found = Some(id);
        }
        Ok(found)
    }

    /// The objects of type `kind` below `node`. The fallbacks that need this (files without
    /// `cpuset`/`nodeset` attributes, which hwloc itself never writes) share one budget of
    /// visited nodes, so a hostile file cannot make them quadratic.
    fn scan<'a, 'i>(
        &mut self,
        node: Node<'a, 'i>,
        kind: &str,
    ) -> Result<Vec<Node<'a, 'i>>, MachineXmlError> {
        let mut found = Vec::new();
        for d in node.descendants() {
            if self.scan_budget == 0 {
                return Err(MachineXmlError::BadAttribute {
                    line: line_of(node),
                    element: format!("object type=\"{}\"", object_type(node)),
                    attr: "cpuset/nodeset".into(),
                    value: String::new(),
                    reason: "missing on too many objects to work out from the tree".into(),
                });
            }
            self.scan_budget -= 1;
            if d.has_tag_name("object") && object_type(d) == kind {
                found.push(d);
            }
        }
        Ok(found)
    }

    fn dmi(&mut self, node: Node<'_, '_>) {
        if self.dmi_done {
            return;
        }
        self.dmi_done = true;
        for info in node.children().filter(|c| c.has_tag_name("info")) {
            let value = info.attribute("value").map(str::to_string);
            let dmi = &mut self.machine.dmi;
            match info.attribute("name") {
                Some("DMISysVendor") => dmi.sys_vendor = value,
                Some("DMIProductName") => dmi.product_name = value,
                Some("DMIBoardVendor") => dmi.board_vendor = value,
                Some("DMIChassisAssetTag") => dmi.chassis_asset_tag = value,
                _ => {}
            }
        }
    }

    fn numa_node(&mut self, node: Node<'_, '_>) -> Result<(), MachineXmlError> {
        let line = line_of(node);
        let id = u32_attr(node, "os_index")?;
        let cpus = match node.attribute("cpuset") {
            Some(text) => {
                let bitmap = parse_bitmap(text).map_err(|e| bad(node, "cpuset", text, e))?;
                if bitmap.infinite {
                    return Err(bad(node, "cpuset", text, "an infinite CPU set"));
                }
                bitmap.set
            }
            // No cpuset: the PUs below the object the NUMA node is attached to.
            None => match node.parent_element() {
                Some(parent) => {
                    let mut cpus = CpuSet::new();
                    for pu in self.scan(parent, "PU")? {
                        cpus.insert(u32_attr(pu, "os_index")?);
                    }
                    cpus
                }
                None => CpuSet::new(),
            },
        };
        if !self.numa_ids.insert(id) {
            return Err(MachineXmlError::DuplicateNuma { line, id });
        }
        self.machine.numa_nodes.push(NumaNode { id, cpus });
        Ok(())
    }

    /// Add a PCI function (bridge or kept endpoint) to the tree and return its address.
    fn pci_function(
        &mut self,
        node: Node<'_, '_>,
        ctx: &Context,
        bridge: bool,
    ) -> Result<PciAddr, MachineXmlError> {
        let line = line_of(node);
        let busid =
            node.attribute("pci_busid")
                .ok_or_else(|| MachineXmlError::MissingAttribute {
                    line,
                    element: format!("object type=\"{}\"", object_type(node)),
                    attr: "pci_busid",
                })?;
        let addr: PciAddr = busid
            .parse()
            .map_err(|e| bad(node, "pci_busid", busid, e))?;
        let (class_code, vendor_id, device_id) = match node.attribute("pci_type") {
            Some(text) => parse_pci_type(text)
                .ok_or_else(|| bad(node, "pci_type", text, "expected \"CCCC [VVVV:DDDD] ...\""))?,
            None if bridge => (class::BRIDGE_PCI, UNKNOWN_ID, UNKNOWN_ID),
            None => (super::nccl_xml::UNKNOWN_CLASS, UNKNOWN_ID, UNKNOWN_ID),
        };
        if !self.seen_pci.insert(addr) {
            return Err(MachineXmlError::DuplicatePci { line, addr });
        }
        self.machine.pci.push(PciDevice {
            addr,
            parent: ctx.parent_pci,
            root: ctx.root.clone(),
            vendor: vendor_id,
            device: device_id,
            class: class_code,
            numa_node: ctx.io_numa,
            link: PciLink::default(),
        });
        Ok(addr)
    }

    /// A `PCIDev`: kept when it is an NVIDIA GPU or a NIC, with its OS devices' names.
    fn pci_dev(&mut self, node: Node<'_, '_>, ctx: &Context) -> Result<(), MachineXmlError> {
        let (class_code, vendor_id, device_id) = match node.attribute("pci_type") {
            Some(text) => parse_pci_type(text)
                .ok_or_else(|| bad(node, "pci_type", text, "expected \"CCCC [VVVV:DDDD] ...\""))?,
            None => (super::nccl_xml::UNKNOWN_CLASS, UNKNOWN_ID, UNKNOWN_ID),
        };
        let osdevs: Vec<(OsDevKind, Node<'_, '_>)> = objects(node)
            .filter(|c| object_type(*c) == "OSDev")
            .map(|c| (osdev_kind(c), c))
            .collect();
        let first = |kind: OsDevKind| osdevs.iter().find(|(k, _)| *k == kind).map(|(_, n)| *n);
        let nvidia_gpu_osdev = first(OsDevKind::NvidiaGpu);
        let rdma = first(OsDevKind::OpenFabrics);
        let netdev = first(OsDevKind::Network);

        let is_gpu = nvidia_gpu_osdev.is_some()
            || (class::is_gpu(class_code) && vendor_id == vendor::NVIDIA);
        let is_nic =
            !is_gpu && (class::is_network(class_code) || rdma.is_some() || netdev.is_some());
        if !is_gpu && !is_nic {
            return Ok(());
        }
        let addr = self.pci_function(node, ctx, false)?;
        if is_gpu {
            let model = nvidia_gpu_osdev
                .and_then(|o| info(o, "GPUModel"))
                .or_else(|| info(node, "PCIDevice"))
                .map(str::to_string);
            self.machine.gpus.push(Gpu {
                pci: addr,
                minor: None,
                model,
            });
        } else {
            let link_layer = link_layer_of_class(class_code);
            let kind = classify_nic(vendor_id, device_id, rdma.is_some(), link_layer);
            let ports = rdma.map(|o| ports_of(o, link_layer)).unwrap_or_default();
            self.machine.nics.push(Nic {
                pci: addr,
                kind,
                rdma: rdma.and_then(|o| o.attribute("name")).map(str::to_string),
                netdev: netdev.and_then(|o| o.attribute("name")).map(str::to_string),
                ports,
            });
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OsDevKind {
    NvidiaGpu,
    OpenFabrics,
    Network,
    Other,
}

/// What an OS device is, from `subtype` and the numeric `osdev_type` of hwloc 2
/// (0 block, 1 GPU, 2 network, 3 OpenFabrics, 4 DMA, 5 co-processor).
fn osdev_kind(node: Node<'_, '_>) -> OsDevKind {
    let subtype = node.attribute("subtype").unwrap_or("");
    if subtype.eq_ignore_ascii_case("CUDA") || subtype.eq_ignore_ascii_case("NVML") {
        return OsDevKind::NvidiaGpu;
    }
    match node.attribute("osdev_type").map(str::trim) {
        Some("2") => OsDevKind::Network,
        Some("3") => OsDevKind::OpenFabrics,
        _ if subtype.eq_ignore_ascii_case("OpenFabrics") => OsDevKind::OpenFabrics,
        _ if subtype.eq_ignore_ascii_case("Network") => OsDevKind::Network,
        _ => OsDevKind::Other,
    }
}

/// RDMA ports from an OpenFabrics OS device's `Port<N>State` infos. hwloc stores the
/// kernel's state number; it is written back in sysfs form ("4: ACTIVE").
fn ports_of(osdev: Node<'_, '_>, link_layer: Option<&str>) -> Vec<RdmaPort> {
    let mut ports = Vec::new();
    for i in osdev.children().filter(|c| c.has_tag_name("info")) {
        let Some(number) = i
            .attribute("name")
            .and_then(|n| n.strip_prefix("Port")?.strip_suffix("State"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let state = i.attribute("value").map(|v| {
            let name = match v.trim() {
                "0" => "NOP",
                "1" => "DOWN",
                "2" => "INIT",
                "3" => "ARMED",
                "4" => "ACTIVE",
                "5" => "ACTIVE_DEFER",
                _ => "UNKNOWN",
            };
            format!("{}: {name}", v.trim())
        });
        ports.push(RdmaPort {
            number,
            state,
            rate: None,
            link_layer: link_layer.map(str::to_string),
        });
    }
    ports
}

fn info<'a>(node: Node<'a, '_>, name: &str) -> Option<&'a str> {
    node.children()
        .filter(|c| c.has_tag_name("info"))
        .find(|c| c.attribute("name") == Some(name))
        .and_then(|c| c.attribute("value"))
}

/// A host bridge has upstream type 0 (`bridge_type="0-1"`); a bridge without a type or
/// bus id is taken to be one too.
fn is_host_bridge(node: Node<'_, '_>) -> bool {
    match node.attribute("bridge_type") {
        Some(t) => t.trim().starts_with("0-") || t.trim() == "0",
        None => node.attribute("pci_busid").is_none(),
    }
}

/// "pci0000:80" from `bridge_pci="0000:[80-84]"`; `None` when the attribute is absent.
fn host_bridge_name(node: Node<'_, '_>) -> Result<Option<String>, MachineXmlError> {
    let Some(text) = node.attribute("bridge_pci") else {
        return Ok(None);
    };
    let parsed = (|| {
        let (domain, range) = text.trim().split_once(':')?;
        let secondary = range
            .strip_prefix('[')?
            .strip_suffix(']')?
            .split_once('-')?
            .0;
        let domain = hex_field(domain, 8)?;
        let bus = hex_field(secondary, 2)?;
        Some(format!("pci{domain:04x}:{bus:02x}"))
    })();
    parsed
        .map(Some)
        .ok_or_else(|| bad(node, "bridge_pci", text, "expected \"DDDD:[BB-BB]\""))
}

/// (class << 8, vendor, device) from `pci_type="0302 [10de:1094] [00de:0088] a1"`.
fn parse_pci_type(text: &str) -> Option<(u32, u16, u16)> {
    let mut tokens = text.split_whitespace();
    let class_code = hex_field(tokens.next()?, 4)?;
    let ids = tokens.next()?.strip_prefix('[')?.strip_suffix(']')?;
    let (v, d) = ids.split_once(':')?;
    Some((
        class_code << 8,
        hex_field(v, 4)? as u16,
        hex_field(d, 4)? as u16,
    ))
}

fn hex_field(text: &str, max_digits: usize) -> Option<u32> {
    if text.is_empty() || text.len() > max_digits {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

fn u32_attr(node: Node<'_, '_>, attr: &'static str) -> Result<u32, MachineXmlError> {
    let text = node
        .attribute(attr)
        .ok_or_else(|| MachineXmlError::MissingAttribute {
            line: line_of(node),
            element: format!("object type=\"{}\"", object_type(node)),
            attr,
        })?;
    text.trim()
        .parse()
        .map_err(|_| bad(node, attr, text, "not a non-negative integer"))
}

fn bad(node: Node<'_, '_>, attr: &str, value: &str, reason: impl ToString) -> MachineXmlError {
    MachineXmlError::BadAttribute {
        line: line_of(node),
        element: format!("object type=\"{}\"", object_type(node)),
        attr: attr.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NicKind;

    #[test]
    fn bitmaps_in_hwloc_form() {
        let b = parse_bitmap("0x00000303,0x03030000,,0x03030303").expect("valid");
        assert!(!b.infinite);
        assert_eq!(
            b.set.to_string(),
            "0-1,8-9,16-17,24-25,80-81,88-89,96-97,104-105"
        );
        assert_eq!(parse_bitmap("0x0").expect("empty").set.len(), 0);
        let inf = parse_bitmap("0xf...f,0x00000001").expect("infinite");
        assert!(inf.infinite && inf.set.contains(0));
        for bad in ["", "0x", "zz", "0x123456789", "0xf...f,0xf...f"] {
            assert!(parse_bitmap(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pci_type_and_bridge_names() {
        assert_eq!(
            parse_pci_type("0302 [10de:1094] [00de:0088] a1"),
            Some((0x030200, 0x10de, 0x1094))
        );
        assert_eq!(parse_pci_type("0302 10de:1094"), None);
    }

    const SMALL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000000f" nodeset="0x00000003">
    <info name="DMISysVendor" value="Amazon EC2"/>
    <info name="DMIProductName" value="p4d.24xlarge"/>
    <object type="Package" os_index="0" cpuset="0x00000003" nodeset="0x00000001">
      <object type="NUMANode" os_index="0" cpuset="0x00000003" nodeset="0x00000001"/>
      <object type="Core" os_index="0" cpuset="0x00000003">
        <object type="PU" os_index="0" cpuset="0x00000001"/>
        <object type="PU" os_index="1" cpuset="0x00000002"/>
      </object>
      <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[10-10]">
        <object type="PCIDev" pci_busid="0000:10:1c.0" pci_type="0302 [10de:20b0] [10de:134f] a1">
          <object type="OSDev" name="nvml0" subtype="NVML" osdev_type="1">
            <info name="GPUModel" value="NVIDIA A100-SXM4-40GB"/>
          </object>
        </object>
        <object type="PCIDev" pci_busid="0000:10:1b.0" pci_type="0200 [1d0f:efa0] [1d0f:efa0] 00">
          <object type="OSDev" name="rdmap16s27" osdev_type="3">
            <info name="Port1State" value="4"/>
          </object>
        </object>
      </object>
    </object>
    <object type="Package" os_index="1" cpuset="0x0000000c" nodeset="0x00000002">
      <object type="NUMANode" os_index="1"/>
      <object type="PU" os_index="2"/>
      <object type="PU" os_index="3"/>
    </object>
    <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[00-00]">
      <object type="PCIDev" pci_busid="0000:00:05.0" pci_type="0200 [1d0f:ec20] [1d0f:0000] 00">
        <object type="OSDev" name="ens5" osdev_type="2"/>
      </object>
      <object type="PCIDev" pci_busid="0000:00:1f.0" pci_type="0108 [1d0f:8061] [1d0f:0000] 00"/>
    </object>
  </object>
</topology>"#;

    #[test]
    fn small_export() {
        let m = parse(SMALL).expect("parses");
        assert_eq!(m.dmi.product_name.as_deref(), Some("p4d.24xlarge"));
        assert_eq!(m.numa_nodes.len(), 2);
        assert_eq!(
            m.numa_node(1).map(|n| n.cpus.to_string()),
            Some("2-3".into())
        );
        assert_eq!(m.cores.len(), 1);
        let gpu = &m.gpus[0];
        assert_eq!(gpu.model.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
        let gpu_dev = m.pci_device(gpu.pci).expect("in tree");
        assert_eq!(
            (gpu_dev.root.as_deref(), gpu_dev.numa_node),
            (Some("pci0000:10"), Some(0))
        );
        let efa = m.nics.iter().find(|n| n.kind == NicKind::Efa).expect("efa");
        assert_eq!(efa.rdma.as_deref(), Some("rdmap16s27"));
        assert_eq!(efa.ports[0].state.as_deref(), Some("4: ACTIVE"));
        // I/O attached to the Machine of a two-socket box has no single NUMA node.
        let ena = m
            .nics
            .iter()
            .find(|n| n.netdev.as_deref() == Some("ens5"))
            .expect("ena");
        assert_eq!(m.pci_device(ena.pci).and_then(|d| d.numa_node), None);
        // The NVMe controller plays no part in placement and is left out.
        assert!(
            m.pci_device("0000:00:1f.0".parse().expect("addr"))
                .is_none()
        );
    }

    #[test]
    fn hwloc_3_and_1_are_refused_clearly() {
        let err = parse(r#"<topology version="3.0"><object type="Machine"/></topology>"#)
            .expect_err("v3")
            .to_string();
        assert!(
            err.contains("hwloc 3 XML is not supported, export with hwloc 2.x (lstopo --of xml)"),
            "{err}"
        );
        let err = parse("<topology><object type=\"Machine\"/></topology>")
            .expect_err("v1")
            .to_string();
        assert!(err.contains("hwloc 1.x"), "{err}");
    }

    #[test]
    fn bad_attributes_are_errors() {
        for (from, to) in [
            (r#"pci_busid="0000:10:1c.0""#, r#"pci_busid="0000:10:1c""#),
            (r#"0302 [10de:20b0]"#, r#"0302 10de:20b0"#),
            (r#"bridge_pci="0000:[10-10]""#, r#"bridge_pci="0000:10""#),
            (
                r#"<object type="NUMANode" os_index="0" cpuset="0x00000003""#,
                r#"<object type="NUMANode" os_index="0" cpuset="0xq""#,
            ),
            (
                r#"<object type="NUMANode" os_index="1"/>"#,
                r#"<object type="NUMANode" os_index="0"/>"#,
            ),
        ] {
            assert!(SMALL.contains(from), "{from}");
            let err = parse(&SMALL.replacen(from, to, 1))
                .expect_err(to)
                .to_string();
            assert!(err.starts_with("line "), "{err}");
        }
    }

    #[test]
    fn without_cpuset_and_nodeset_the_tree_decides() {
        let text = r#"<topology version="2.0">
          <object type="Machine" os_index="0">
            <object type="Package" os_index="0">
              <object type="NUMANode" os_index="3"/>
              <object type="PU" os_index="4"/>
              <object type="PU" os_index="5"/>
              <object type="Bridge" bridge_type="0-1" bridge_pci="0001:[00-01]">
                <object type="PCIDev" pci_busid="0001:00:00.0" pci_type="0207 [15b3:101b] [15b3:0007] 00">
                  <object type="OSDev" name="mlx5_ib0" osdev_type="3"/>
                </object>
              </object>
            </object>
          </object>
        </topology>"#;
        let m = parse(text).expect("parses");
        assert_eq!(
            m.numa_node(3).map(|n| n.cpus.to_string()),
            Some("4-5".into())
        );
        assert_eq!(m.numa_of("0001:00:00.0".parse().expect("addr")), Some(3));
        assert_eq!(m.nics[0].kind, NicKind::Infiniband);
    }

    #[test]
    fn attribute_less_fallbacks_are_bounded() {
        // Nested groups, each with a NUMA node but no cpuset: every NUMA node's CPUs come
        // from a scan of its parent's subtree. The shared budget stops the quadratic work.
        let depth = 100;
        let mut text = String::from(r#"<topology version="2.0"><object type="Machine">"#);
        for i in 0..depth {
            text.push_str(&format!(
                r#"<object type="Group"><object type="NUMANode" os_index="{i}"/>"#
            ));
        }
        text.push_str(&r#"<object type="PU" os_index="0"/>"#.repeat(50));
        text.push_str(&"</object>".repeat(depth + 1));
        text.push_str("</topology>");
        let doc = parse_xml(&text).expect("well-formed");
        let m = from_document(&doc).expect("within the default budget");
        assert!(m.numa_nodes.iter().all(|n| n.cpus.to_string() == "0"));
        let mut small = Builder {
            scan_budget: 1_000,
            ..Builder::default()
        };
        let err = small
            .walk(doc.root_element())
            .expect_err("budget spent")
            .to_string();
        assert!(err.contains("missing on too many objects"), "{err}");
    }
}
