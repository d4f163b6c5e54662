//! NCCL topology XML: the format `NCCL_TOPO_FILE` takes and `NCCL_TOPO_DUMP_FILE` writes.
//!
//! ```xml
//! <system version="1">
//!   <cpu numaid="0" affinity="000000ff,ffff0000,00ffffff" ...>
//!     <pci busid="ffff:ff:01.0" class="0x060400" ...>          <!-- PCIe switch -->
//!       <pci busid="0000:10:1c.0" class="0x030200" vendor="0x10de" ...>
//!         <gpu dev="0" .../>
//!       </pci>
//!       <pci busid="0000:0c:00.0" class="0x020000" vendor="0x15b3" ...>
//!         <nic><net name="mlx5_0" port="1" speed="200000" .../></nic>
//!       </pci>
//!     </pci>
//!   </cpu>
//! </system>
//! ```
//!
//! How the file becomes a [`Machine`], and what is assumed where NCCL files are silent:
//!
//! - **NUMA nodes.** Each `<cpu numaid=N>` is NUMA node N; its CPUs come from the hex
//!   `affinity` mask (an absent mask gives an empty CPU list). Every PCI function below a
//!   `<cpu>` gets that NUMA node. `numaid="-1"` (what NCCL writes when the kernel does not
//!   know) creates no NUMA node and leaves the devices' NUMA node unknown.
//! - **PCI tree.** Each `<pci>` is a PCI function whose parent is the enclosing `<pci>`
//!   (`None` directly under `<cpu>`). The root complex is `None`: NCCL does not say.
//!   `link_speed`/`link_width` are what NCCL read from `max_link_speed`/`max_link_width`,
//!   so they become the *maximum* link; empty values and width 0 are unknown.
//! - **Placeholder switches.** Vendor files stand PCIe switches in with made-up bus ids
//!   `ffff:ff:0N.0` (domain ffff, bus ff). When such a placeholder repeats (say, once under
//!   each `<cpu>`), the first occurrence in document order keeps its id and each later one
//!   is renumbered to the next free id in `ffff:fe:00.0`, `ffff:fe:01.0`, ... `ffff:fe:1f.0`,
//!   `ffff:fd:00.0`, ... (never an id the file uses). A real bus id listed twice is an error.
//! - **GPUs.** A `<pci>` is a GPU when it has a `<gpu>` child, or when its class is a
//!   display controller (0x0300xx/0x0302xx) and its vendor is NVIDIA or absent. `<gpu dev>`
//!   is the CUDA index as NCCL saw it (after `CUDA_VISIBLE_DEVICES`), not the /dev/nvidiaN
//!   minor, so `Gpu::minor` stays `None`; `Gpu::model` is `None` too (NCCL gives none).
//! - **NICs.** A `<pci>` is a NIC when it has a `<nic>` child or a network class (0x02xxxx).
//!   NCCL files carry no link layer, so it is taken from the PCI class, as ConnectX cards
//!   report their port type there: 0x0207xx is InfiniBand, 0x0200xx is Ethernet (so an RDMA
//!   NIC of that class is RoCE); EFA and gVNIC are recognised by their PCI ids
//!   ([`classify_nic`]). A NIC counts as RDMA-capable unless its `<net name>` looks like a
//!   plain netdev (`eth0`, `ens5`, `ib0`, ...): NCCL lists the network functions it drives,
//!   and those are its verbs/EFA devices unless it fell back to sockets.
//! - **Several `<net>` in one `<nic>`.** NCCL folds the ports of a multi-port NIC (mlx5
//!   dual-port ConnectX) onto function 0 of the card, while Linux gives each port its own
//!   PCI function and RDMA device. The n-th `<net>` (document order, from 0) is mapped to
//!   function `base + n` of the same bus/device; a function the file does not list itself is
//!   added to the PCI tree as a copy of the base function. NCCL writes `port` as the verbs
//!   port plus the device's index among the functions of its card (net_ib.cc
//!   `ncclIbGetProperties`: `port + realPort`), so the second function of a dual-port
//!   ConnectX shows `port="2"` although its only verbs port is 1. `RdmaPort::number` is
//!   that verbs port: `port - n` for the n-th `<net>` (kept as written when that would
//!   drop below 1, as in hand-written files); `rate` is `speed` (Mb/s) in "N Gb/sec" form.
//! - **`<nic>` directly under `<cpu>`.** A netdev without a PCI address (NCCL's socket
//!   transport over `eth0`, as in Azure NC A100 v4 files) cannot be placed in the PCI tree;
//!   it is skipped with a debug log. It is never a fabric NIC.
//! - **Bare bus ids** (`<pci busid="0000:00:16.0"/>`, as in AWS's g5 file). Without class,
//!   vendor or a `<gpu>`/`<nic>` child there is no evidence of what the function is, so it
//!   stays an unknown endpoint in the PCI tree: vendor and device [`UNKNOWN_ID`], class
//!   [`UNKNOWN_CLASS`], NUMA node from its `<cpu>`; it is neither a GPU nor a NIC. Where a
//!   class is absent but a child gives the evidence, the class is filled in: 0x030200 for a
//!   `<gpu>`, 0x020700/0x020000 (by the NIC kind) for a `<nic>`, 0x060400 for a function
//!   with `<pci>` children.
//! - Elements NCCL may add that say nothing about locality (`<nvlink>`, `<c2c>`, ...) are
//!   ignored, as are comments.

use std::collections::HashSet;

use roxmltree::{Document, Node};

use super::{MachineXmlError, finish, line_of, parse_xml};
use crate::cpuset::CpuSet;
use crate::model::classify_nic;
use crate::model::{
    Gpu, Machine, Nic, NicKind, NumaNode, PciDevice, PciLink, RdmaPort, class, vendor,
};
use crate::pci::PciAddr;

/// Vendor / device id of a PCI function the file does not identify (the all-ones value
/// a PCI config read returns when nothing answers).
pub const UNKNOWN_ID: u16 = 0xffff;
/// Class of a PCI function the file does not classify.
pub const UNKNOWN_CLASS: u32 = 0x000000;

/// Domain and bus of NCCL's made-up switch bus ids (`ffff:ff:0N.0`).
const PLACEHOLDER_DOMAIN: u32 = 0xffff;
const PLACEHOLDER_BUS: u8 = 0xff;

/// Parse an NCCL topology file (`<system version="1">`).
pub fn parse(text: &str) -> Result<Machine, MachineXmlError> {
    let doc = parse_xml(text)?;
    from_document(&doc)
}

/// Build the machine from an already parsed document whose root should be `<system>`.
pub(crate) fn from_document(doc: &Document<'_>) -> Result<Machine, MachineXmlError> {
    let root = doc.root_element();
    if root.tag_name().name() != "system" {
        return Err(MachineXmlError::WrongRoot {
            line: line_of(root),
            found: root.tag_name().name().to_string(),
            expected: "an NCCL topology (<system>)",
        });
    }
    let mut builder = Builder::new(root);
    builder.walk(root)?;
    finish(builder.machine)
}

/// Where an element sits: the NUMA node of the enclosing `<cpu>` and the enclosing `<pci>`.
#[derive(Clone, Copy)]
struct Context {
    numa: Option<u32>,
    parent: Option<PciAddr>,
}

struct Builder {
    machine: Machine,
    /// Every bus id the file spells out, so renumbered placeholders never collide with one.
    explicit: HashSet<PciAddr>,
    /// Bus ids given out so far (after renumbering).
    seen: HashSet<PciAddr>,
    /// Next candidate for a renumbered placeholder: (bus, device), counting down buses.
    next_placeholder: (u8, u8),
    /// NUMA node ids declared so far, to report duplicates.
    numa_ids: HashSet<u32>,
}

impl Builder {
    fn new(root: Node<'_, '_>) -> Self {
        let explicit = root
            .descendants()
            .filter(|n| n.has_tag_name("pci"))
            .filter_map(|n| n.attribute("busid")?.parse().ok())
            .collect();
        Self {
            machine: Machine::default(),
            explicit,
            seen: HashSet::new(),
            next_placeholder: (PLACEHOLDER_BUS - 1, 0),
            numa_ids: HashSet::new(),
        }
    }

    /// Visit the elements in document order with an explicit stack (no recursion, so a
    /// deeply nested hostile file cannot overflow the stack).
    fn walk(&mut self, root: Node<'_, '_>) -> Result<(), MachineXmlError> {
        let top = Context {
            numa: None,
            parent: None,
        };
        let mut stack: Vec<(Node<'_, '_>, Context)> = root
            .children()
            .filter(Node::is_element)
            .rev()
            .map(|n| (n, top))
            .collect();
        while let Some((node, ctx)) = stack.pop() {
            let inner = match node.tag_name().name() {
                "cpu" => {
                    let numa = self.cpu(node)?;
                    Context { numa, parent: None }
                }
                "pci" => {
                    let addr = self.pci(node, ctx)?;
                    Context {
                        numa: ctx.numa,
                        parent: Some(addr),
                    }
                }
                "nic" if ctx.parent.is_none() => {
                    log::debug!(
                        "line {}: <nic> outside any <pci> (a plain netdev such as eth0) has no \
                         PCI address; skipped",
                        line_of(node)
                    );
                    continue;
                }
                // <gpu> and <nic> under a <pci> were read by `pci`; other elements
                // (<nvlink>, <c2c>, ...) carry nothing about locality.
                _ => continue,
            };
            let children = node
                .children()
                .filter(|c| c.is_element() && matches!(c.tag_name().name(), "cpu" | "pci" | "nic"));
            let before = stack.len();
            stack.extend(children.map(|c| (c, inner)));
            stack[before..].reverse();
        }
        Ok(())
    }

    /// A `<cpu>` element: one NUMA node. Returns its id (`None` for numaid -1).
    fn cpu(&mut self, node: Node<'_, '_>) -> Result<Option<u32>, MachineXmlError> {
        let line = line_of(node);
        let text = node
            .attribute("numaid")
            .ok_or_else(|| MachineXmlError::MissingAttribute {
                line,
                element: "cpu".into(),
                attr: "numaid",
            })?;
        let id: i64 = text
            .trim()
            .parse()
            .map_err(|_| bad(node, "numaid", text, "not an integer"))?;
        if id == -1 {
            return Ok(None);
        }
        let id = u32::try_from(id).map_err(|_| bad(node, "numaid", text, "out of range"))?;
        let cpus = match node.attribute("affinity") {
            Some(mask) => CpuSet::parse_mask(mask).map_err(|e| bad(node, "affinity", mask, e))?,
            None => CpuSet::new(),
        };
        if !self.numa_ids.insert(id) {
            return Err(MachineXmlError::DuplicateNuma { line, id });
        }
        self.machine.numa_nodes.push(NumaNode { id, cpus });
        Ok(Some(id))
    }

    /// A `<pci>` element: one PCI function, plus the GPU or NIC(s) it holds. Returns the
    /// address it was given (placeholders may be renumbered).
    fn pci(&mut self, node: Node<'_, '_>, ctx: Context) -> Result<PciAddr, MachineXmlError> {
        let line = line_of(node);
        let busid = node
            .attribute("busid")
            .ok_or_else(|| MachineXmlError::MissingAttribute {
                line,
                element: "pci".into(),
                attr: "busid",
            })?;
        let parsed: PciAddr = busid.parse().map_err(|e| bad(node, "busid", busid, e))?;
        let addr = if !self.seen.contains(&parsed) {
            parsed
        } else if is_placeholder(parsed) {
            self.renumber_placeholder(node, busid)?
        } else {
            return Err(MachineXmlError::DuplicatePci { line, addr: parsed });
        };
        self.seen.insert(addr);

        let class_attr = hex_attr(node, "class", 0xff_ffff)?;
        let vendor_attr = hex_attr(node, "vendor", 0xffff)?.map(|v| v as u16);
        let device_attr = hex_attr(node, "device", 0xffff)?.map(|v| v as u16);
        let link = PciLink {
            current_speed: None,
            current_width: None,
            max_speed: node
                .attribute("link_speed")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            max_width: match node.attribute("link_width") {
                Some(w) => {
                    let width: u8 = w
                        .trim()
                        .parse()
                        .map_err(|_| bad(node, "link_width", w, "not a lane count"))?;
                    (width != 0).then_some(width)
                }
                None => None,
            },
        };

        let elements = || node.children().filter(Node::is_element);
        let has_gpu = elements().any(|c| c.has_tag_name("gpu"));
        let nic = elements().find(|c| c.has_tag_name("nic"));
        let has_pci_children = elements().any(|c| c.has_tag_name("pci"));

        let display_class = class_attr.is_some_and(class::is_gpu);
        let nvidia_or_unknown = vendor_attr.is_none_or(|v| v == vendor::NVIDIA);
        let is_gpu = has_gpu || (display_class && nvidia_or_unknown && nic.is_none());
        let is_nic = !is_gpu && (nic.is_some() || class_attr.is_some_and(class::is_network));

        let nets: Vec<Node<'_, '_>> = nic
            .map(|n| n.children().filter(|c| c.has_tag_name("net")).collect())
            .unwrap_or_default();
        let link_layer = class_attr.and_then(link_layer_of_class);
        let vendor_id = vendor_attr.unwrap_or(UNKNOWN_ID);
        let device_id = device_attr.unwrap_or(UNKNOWN_ID);
        // The kind of the card as a whole (from its first port) fills in a missing class.
        let card_kind = is_nic.then(|| {
            let rdma = nets.first().is_none_or(|n| !net_is_netdev(*n));
            classify_nic(vendor_id, device_id, rdma, link_layer)
        });
        let class_code = match class_attr {
            Some(c) => c,
            None if is_gpu => class::DISPLAY_3D,
            None if card_kind == Some(NicKind::Infiniband) => class::NETWORK_INFINIBAND,
            None if is_nic => class::NETWORK_ETHERNET,
            None if has_pci_children => class::BRIDGE_PCI,
            None => UNKNOWN_CLASS,
        };
        let device = PciDevice {
            addr,
            parent: ctx.parent,
            root: None,
            vendor: vendor_id,
            device: device_id,
            class: class_code,
            numa_node: ctx.numa,
            link,
        };

        if is_gpu {
            self.machine.gpus.push(Gpu {
                pci: addr,
                minor: None,
                model: None,
            });
        }
        if is_nic {
            if nets.is_empty() {
                let kind = card_kind.unwrap_or(NicKind::Ethernet);
                self.machine.nics.push(Nic {
                    pci: addr,
                    kind,
                    rdma: None,
                    netdev: None,
                    ports: Vec::new(),
                });
            }
            for (n, net) in nets.iter().enumerate() {
                let function = usize::from(addr.function) + n;
                if function > 7 {
                    return Err(bad(
                        node,
                        "busid",
                        busid,
                        format!(
                            "its <nic> lists {} <net> ports, more than the PCI functions {}..7 \
                             can hold (port n is mapped to function {}+n)",
                            nets.len(),
                            addr.function,
                            addr.function
                        ),
                    ));
                }
                let port_addr = PciAddr {
                    function: function as u8,
                    ..addr
                };
                if port_addr != addr
                    && !self.explicit.contains(&port_addr)
                    && self.seen.insert(port_addr)
                {
                    self.machine.pci.push(PciDevice {
                        addr: port_addr,
                        ..device.clone()
                    });
                }
                self.machine.nics.push(nic_from_net(
                    *net, n, port_addr, vendor_id, device_id, link_layer,
                )?);
            }
        }
        self.machine.pci.push(device);
        Ok(addr)
    }

    /// The next free id for a repeated placeholder switch (see the module notes).
    fn renumber_placeholder(
        &mut self,
        node: Node<'_, '_>,
        busid: &str,
    ) -> Result<PciAddr, MachineXmlError> {
        loop {
            let (bus, device) = self.next_placeholder;
            if bus == 0 {
                return Err(bad(
                    node,
                    "busid",
                    busid,
                    "too many repeated placeholder switches",
                ));
            }
            self.next_placeholder = if device == 0x1f {
                (bus - 1, 0)
            } else {
                (bus, device + 1)
            };
            let candidate = PciAddr::new(PLACEHOLDER_DOMAIN, bus, device, 0);
            if !self.explicit.contains(&candidate) && !self.seen.contains(&candidate) {
                log::debug!(
                    "line {}: repeated placeholder {busid} renumbered {candidate}",
                    line_of(node)
                );
                return Ok(candidate);
            }
        }
    }
}

/// One `<net>` of a `<nic>`, the `index`-th, placed on PCI function `pci`.
fn nic_from_net(
    net: Node<'_, '_>,
    index: usize,
    pci: PciAddr,
    vendor_id: u16,
    device_id: u16,
    link_layer: Option<&'static str>,
) -> Result<Nic, MachineXmlError> {
    let name = net
        .attribute("name")
        .map(str::trim)
        .filter(|n| !n.is_empty());
    let netdev_only = net_is_netdev(net);
    let kind = classify_nic(vendor_id, device_id, !netdev_only, link_layer);
    let (rdma, netdev) = match name {
        Some(n) if netdev_only => (None, Some(n.to_string())),
        Some(n) => (Some(n.to_string()), None),
        None => (None, None),
    };
    let mut ports = Vec::new();
    if !netdev_only {
        let written: u32 = match net.attribute("port") {
            Some(p) => p
                .trim()
                .parse()
                .map_err(|_| bad(net, "port", p, "not a port number"))?,
            None => 1,
        };
        // Undo NCCL's `+ realPort` (see the module notes).
        let number = u32::try_from(index)
            .ok()
            .and_then(|i| written.checked_sub(i))
            .filter(|p| *p >= 1)
            .unwrap_or(written);
        let rate = match net.attribute("speed") {
            Some(s) => {
                let mbps: u64 = s
                    .trim()
                    .parse()
                    .map_err(|_| bad(net, "speed", s, "not a speed in Mb/s"))?;
                (mbps != 0).then(|| rate_text(mbps))
            }
            None => None,
        };
        ports.push(RdmaPort {
            number,
            state: None,
            rate,
            link_layer: link_layer.map(str::to_string),
        });
    }
    Ok(Nic {
        pci,
        kind,
        rdma,
        netdev,
        ports,
    })
}

/// NCCL's Mb/s as the kernel's `rate` text ("200 Gb/sec").
fn rate_text(mbps: u64) -> String {
    let (gbps, rest) = (mbps / 1000, mbps % 1000);
    if rest == 0 {
        format!("{gbps} Gb/sec")
    } else {
        format!("{:.1} Gb/sec", mbps as f64 / 1000.0)
    }
}

/// The link layer a network PCI class implies (ConnectX cards report their port type here).
pub(crate) fn link_layer_of_class(class_code: u32) -> Option<&'static str> {
    match class_code >> 8 {
        0x0207 => Some("InfiniBand"),
        0x0200 => Some("Ethernet"),
        _ => None,
    }
}

/// Whether a `<net>` names a plain netdev (NCCL's socket transport) rather than an RDMA device.
fn net_is_netdev(net: Node<'_, '_>) -> bool {
    net.attribute("name").is_some_and(is_netdev_name)
}

/// Whether a name is a plain netdev rather than an RDMA device: kernel and systemd
/// predictable interface names (eth0, ens5, enp6s0), bonds, bridges, and kernel IPoIB names
/// (ib0, ib1.8001). RDMA device names (mlx5_0, mlx5_ib3, rdmap79s0, efa_0, irdma0,
/// bnxt_re0, and rdma-core's ibp12s0 / rocep12s0) do not match.
pub(crate) fn is_netdev_name(name: &str) -> bool {
    const NETDEV_PREFIXES: [&str; 7] = ["eth", "en", "bond", "team", "br", "veth", "lo"];
    let name = name.trim();
    let ipoib = name
        .strip_prefix("ib")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    ipoib || NETDEV_PREFIXES.iter().any(|p| name.starts_with(p))
}

fn is_placeholder(addr: PciAddr) -> bool {
    addr.domain == PLACEHOLDER_DOMAIN && addr.bus == PLACEHOLDER_BUS
}

/// An optional hex attribute ("0x10de" or "10de") no larger than `max`.
fn hex_attr(
    node: Node<'_, '_>,
    attr: &'static str,
    max: u32,
) -> Result<Option<u32>, MachineXmlError> {
    let Some(text) = node.attribute(attr) else {
        return Ok(None);
    };
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if digits.is_empty() || digits.len() > 8 {
        return Err(bad(node, attr, text, "not a hex number"));
    }
    let value =
        u32::from_str_radix(digits, 16).map_err(|_| bad(node, attr, text, "not a hex number"))?;
    if value > max {
        return Err(bad(node, attr, text, format!("larger than {max:#x}")));
    }
    Ok(Some(value))
}

fn bad(node: Node<'_, '_>, attr: &str, value: &str, reason: impl ToString) -> MachineXmlError {
    MachineXmlError::BadAttribute {
        line: line_of(node),
        element: node.tag_name().name().to_string(),
        attr: attr.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> PciAddr {
        text.parse().expect("valid test address")
    }

    #[test]
    fn repeated_placeholder_switches_are_renumbered_in_document_order() {
        let text = r#"<system version="1">
          <cpu numaid="0" affinity="0000000f">
            <pci busid="ffff:ff:01.0" class="0x060400">
              <pci busid="0000:10:00.0" class="0x030200" vendor="0x10de" device="0x2330"/>
            </pci>
          </cpu>
          <cpu numaid="1" affinity="000000f0">
            <pci busid="ffff:ff:01.0" class="0x060400">
              <pci busid="0000:90:00.0" class="0x030200" vendor="0x10de" device="0x2330"/>
            </pci>
            <pci busid="ffff:ff:01.0" class="0x060400"/>
          </cpu>
        </system>"#;
        let m = parse(text).expect("parses");
        let parent = |a: &str| m.pci_device(addr(a)).and_then(|d| d.parent);
        assert_eq!(parent("0000:10:00.0"), Some(addr("ffff:ff:01.0")));
        assert_eq!(parent("0000:90:00.0"), Some(addr("ffff:fe:00.0")));
        assert!(m.pci_device(addr("ffff:fe:01.0")).is_some());
        assert_eq!(m.numa_of(addr("0000:90:00.0")), Some(1));
        assert_eq!(
            m.pci_device(addr("ffff:fe:00.0")).and_then(|d| d.numa_node),
            Some(1)
        );
    }

    #[test]
    fn repeated_real_busid_is_an_error() {
        let text = r#"<system><cpu numaid="0"><pci busid="0000:10:00.0"/>
            <pci busid="0000:10:00.0"/></cpu></system>"#;
        let err = parse(text).expect_err("duplicate");
        assert!(
            matches!(err, MachineXmlError::DuplicatePci { line: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn dual_port_nic_maps_each_net_to_its_own_function() {
        let text = r#"<system version="1"><cpu numaid="0">
            <pci busid="0000:0c:00.0" class="0x020000" vendor="0x15b3" device="0x1021">
              <nic>
                <net name="mlx5_0" dev="0" speed="200000" port="1"/>
                <net name="mlx5_1" dev="1" speed="200000" port="2"/>
              </nic>
            </pci></cpu></system>"#;
        let m = parse(text).expect("parses");
        let names: Vec<_> = m
            .nics
            .iter()
            .map(|n| (n.pci.to_string(), n.rdma.clone(), n.kind))
            .collect();
        assert_eq!(
            names,
            vec![
                (
                    "0000:0c:00.0".to_string(),
                    Some("mlx5_0".to_string()),
                    NicKind::Roce
                ),
                (
                    "0000:0c:00.1".to_string(),
                    Some("mlx5_1".to_string()),
                    NicKind::Roce
                ),
            ]
        );
        let second = m
            .pci_device(addr("0000:0c:00.1"))
            .expect("synthesised function");
        assert_eq!(
            (second.vendor, second.device, second.numa_node),
            (0x15b3, 0x1021, Some(0))
        );
        assert_eq!(m.nics[0].ports[0].rate.as_deref(), Some("200 Gb/sec"));
        // NCCL wrote port="2" for mlx5_1 (verbs port 1 + its index on the card): each
        // function's own verbs port is 1, which UCX_NET_DEVICES=mlx5_1:1 must name.
        let ports: Vec<u32> = m.nics.iter().map(|n| n.ports[0].number).collect();
        assert_eq!(ports, [1, 1]);
    }

    #[test]
    fn nic_without_pci_is_skipped_and_netdev_names_are_not_rdma() {
        let text = r#"<system version="1"><cpu numaid="0">
            <nic><net name="eth0" dev="0" speed="100000"/></nic>
            <pci busid="0000:05:00.0" class="0x020000" vendor="0x8086" device="0x1521">
              <nic><net name="eth1" dev="1"/></nic>
            </pci></cpu></system>"#;
        let m = parse(text).expect("parses");
        assert_eq!(m.nics.len(), 1);
        assert_eq!(m.nics[0].kind, NicKind::Ethernet);
        assert_eq!(m.nics[0].netdev.as_deref(), Some("eth1"));
        assert!(m.nics[0].rdma.is_none() && m.nics[0].ports.is_empty());
        assert!(m.fabric_nics().is_empty());
    }

    #[test]
    fn evidence_from_children_classifies_bare_busids() {
        let text = r#"<system version="1"><cpu numaid="0">
            <pci busid="0000:01:00.0">
              <pci busid="0000:02:00.0"><gpu dev="0"/></pci>
              <pci busid="0000:03:00.0"><nic><net name="mlx5_0"/></nic></pci>
              <pci busid="0000:04:00.0"/>
            </pci></cpu></system>"#;
        let m = parse(text).expect("parses");
        let class_of = |a: &str| m.pci_device(addr(a)).map(|d| d.class);
        assert_eq!(class_of("0000:01:00.0"), Some(class::BRIDGE_PCI));
        assert_eq!(class_of("0000:02:00.0"), Some(class::DISPLAY_3D));
        assert_eq!(class_of("0000:03:00.0"), Some(class::NETWORK_INFINIBAND));
        assert_eq!(class_of("0000:04:00.0"), Some(UNKNOWN_CLASS));
        assert_eq!(m.gpus.len(), 1);
        assert_eq!(m.nics.len(), 1);
        assert_eq!(m.nics[0].kind, NicKind::Infiniband);
    }

    #[test]
    fn numaid_minus_one_leaves_numa_unknown() {
        let text = r#"<system version="1"><cpu numaid="-1" affinity="ff">
            <pci busid="0000:10:00.0" class="0x030200"/></cpu></system>"#;
        let m = parse(text).expect("parses");
        assert!(m.numa_nodes.is_empty());
        assert_eq!(m.numa_of(addr("0000:10:00.0")), None);
    }

    #[test]
    fn bad_values_are_errors_with_lines() {
        let cases = [
            (
                r#"<system><cpu numaid="0" affinity="zz"/></system>"#,
                "affinity",
            ),
            (r#"<system><cpu numaid="x"/></system>"#, "numaid"),
            (r#"<system><cpu affinity="ff"/></system>"#, "numaid"),
            (
                "<system><cpu numaid=\"0\">\n<pci busid=\"0000:1:0\"/></cpu></system>",
                "busid",
            ),
            (
                r#"<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0xzz"/></cpu></system>"#,
                "class",
            ),
            (
                r#"<system><cpu numaid="0"><pci busid="0000:01:00.0" vendor="0x12345"/></cpu></system>"#,
                "vendor",
            ),
            (
                r#"<system><cpu numaid="0"/><cpu numaid="0"/></system>"#,
                "NUMA node 0",
            ),
        ];
        for (text, needle) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(
                err.contains(needle) && err.starts_with("line "),
                "{text} -> {err}"
            );
        }
    }

    #[test]
    fn too_many_nets_for_the_functions_is_an_error() {
        let nets: String = (0..3)
            .map(|i| format!(r#"<net name="mlx5_{i}"/>"#))
            .collect();
        let text = format!(
            r#"<system><cpu numaid="0"><pci busid="0000:0c:00.6" class="0x020700"><nic>{nets}</nic></pci></cpu></system>"#
        );
        assert!(parse(&text).is_err());
    }

    #[test]
    fn netdev_names_versus_rdma_names() {
        for netdev in ["eth0", "ens5", "enp6s0f1", "ib0", "ib1.8001", "bond0"] {
            assert!(is_netdev_name(netdev), "{netdev}");
        }
        for rdma in [
            "mlx5_0",
            "mlx5_ib3",
            "rdmap79s0",
            "efa_0",
            "ibp12s0",
            "rocep12s0f1",
            "irdma0",
        ] {
            assert!(!is_netdev_name(rdma), "{rdma}");
        }
    }

    #[test]
    fn deep_nesting_is_parsed_or_refused_without_overflow() {
        let nest = |depth: usize| {
            let mut text = String::from(r#"<system version="1"><cpu numaid="0">"#);
            for i in 0..depth {
                text.push_str(&format!(
                    r#"<pci busid="{:04x}:{:02x}:00.0">"#,
                    i / 256,
                    i % 256
                ));
            }
            text + &"</pci>".repeat(depth) + "</cpu></system>"
        };
        let m = parse(&nest(250)).expect("250 levels parse");
        assert_eq!(m.pci.len(), 250);
        assert_eq!(
            m.ancestors("0000:f9:00.0".parse().expect("addr")).len(),
            249
        );
        let err = parse(&nest(20_000)).expect_err("too deep").to_string();
        assert!(err.contains("nested deeper"), "{err}");
    }
}
