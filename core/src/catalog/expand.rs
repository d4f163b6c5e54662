//! Expand a description into a full `Machine`: NUMA nodes and cores, the PCI tree with
//! every bridge a real sysfs tree would show, GPUs and NICs.

use std::collections::{BTreeMap, BTreeSet};

use toml::Spanned;

use super::CatalogError;
use super::format::{
    CpuDesc, Description, GpuType, GroupDesc, NicType, NumaDesc, PciId, PcieDesc, RootName,
    SiblingRule, SwitchDesc, expand_name,
};
use crate::cpuset::CpuSet;
use crate::model::{
    Assumption, Gpu, Machine, Nic, NicKind, NumaDistance, NumaNode, PciDevice, PciLink, RdmaPort,
    class, classify_nic,
};
use crate::pci::PciAddr;

/// Bridge ids used when `[pcie]` does not name them. Both are synthetic stand-ins: an
/// Intel Sapphire Rapids root port and a Broadcom PEX89000 switch port.
const DEFAULT_ROOT_PORT_ID: PciId = PciId {
    vendor: 0x8086,
    device: 0x352a,
};
const DEFAULT_SWITCH_ID: PciId = PciId {
    vendor: 0x1000,
    device: 0xc030,
};
const DEFAULT_PORT_STATE: &str = "4: ACTIVE";

/// Where a piece of a description came from, so errors can point at its line.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    /// `None` for the text handed to `parse`; `Some(name)` for a catalog base.
    pub base: Option<&'a str>,
    pub text: &'a str,
}

impl Source<'_> {
    pub(crate) fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }

    fn at<T>(&self, item: &Spanned<T>) -> String {
        let line = self.line_of(item.span().start);
        match self.base {
            None => format!("line {line}"),
            Some(name) => format!("line {line} of catalog machine {name}"),
        }
    }
}

/// A description with its source, one per layer of `extends` (the file first).
pub(crate) struct Layer<'a> {
    pub desc: Description,
    pub src: Source<'a>,
}

/// The header fields of a description.
pub(crate) struct Header {
    pub name: String,
    pub vendor: Option<String>,
    pub instance: Option<String>,
    pub description: Option<String>,
}

/// Take each top-level key from the first layer that has it.
fn pick<'a, T>(
    layers: &'a [Layer<'a>],
    get: impl Fn(&'a Description) -> Option<&'a T>,
) -> Option<(&'a T, Source<'a>)> {
    layers.iter().find_map(|l| get(&l.desc).map(|v| (v, l.src)))
}

pub(crate) fn expand(layers: &[Layer<'_>]) -> Result<(Header, Machine), CatalogError> {
    let text = |get: fn(&Description) -> Option<&String>| pick(layers, get).map(|(v, _)| v.clone());
    let header = Header {
        name: text(|d| d.name.as_ref()).ok_or(CatalogError::Missing("name"))?,
        vendor: text(|d| d.vendor.as_ref()),
        instance: text(|d| d.instance.as_ref()),
        description: text(|d| d.description.as_ref()),
    };
    let dmi = pick(layers, |d| d.dmi.as_ref())
        .map(|(v, _)| v.clone())
        .unwrap_or_default();
    let empty_numa = Vec::new();
    let (numa, numa_src) =
        pick(layers, |d| d.numa.as_ref()).unwrap_or((&empty_numa, layers[0].src));
    let numa_nodes = numa_nodes(numa, numa_src)?;
    let numa_distances = numa_distances(numa);
    let cores = match pick(layers, |d| d.cpu.as_ref()) {
        Some((cpu, _)) => cores(cpu, &numa_nodes)?,
        None => Vec::new(),
    };
    let pcie = pick(layers, |d| d.pcie.as_ref())
        .map(|(v, _)| v.clone())
        .unwrap_or_default();
    let gpu_type = pick(layers, |d| d.gpu.as_ref()).map(|(v, _)| v);
    let no_types = BTreeMap::new();
    let nic_types = pick(layers, |d| d.nic_types.as_ref()).map_or(&no_types, |(v, _)| v);
    let empty_groups = Vec::new();
    let (groups, group_src) =
        pick(layers, |d| d.group.as_ref()).unwrap_or((&empty_groups, layers[0].src));

    let mut tree = Tree {
        pcie: &pcie,
        devices: Vec::new(),
        root_ports: BTreeMap::new(),
    };
    let mut gpus = Vec::new();
    let mut nics = Vec::new();
    for group in groups {
        let at = group_src.at(group);
        let g = group.get_ref();
        if let Some(numa) = &g.numa {
            let id = *numa.get_ref();
            if !numa_nodes.iter().any(|n| n.id == id) {
                let first = g.gpus.iter().map(|d| ("GPU", d.get_ref().pci));
                let first = first
                    .chain(g.nics.iter().map(|d| ("NIC", d.get_ref().pci)))
                    .next();
                let what = match first {
                    Some((kind, pci)) => format!("{kind} {pci} ({})", group_label(g)),
                    None => group_label(g),
                };
                return Err(CatalogError::UnknownNuma {
                    at: group_src.at(numa),
                    what,
                    numa: id,
                });
            }
        }
        let parents = tree.add_group(g, &at)?;
        for gpu in &g.gpus {
            let d = gpu.get_ref();
            let ids =
                d.pci_id
                    .or(gpu_type.map(|t| t.pci_id))
                    .ok_or_else(|| CatalogError::Layout {
                        at: group_src.at(gpu),
                        message: format!("GPU {} has no pci_id and there is no [gpu] table", d.pci),
                    })?;
            let class = gpu_type.and_then(|t| t.class).unwrap_or(class::DISPLAY_3D);
            tree.push(g, d.pci, parents.of(d.pci), ids, class);
            gpus.push((
                d.minor,
                Gpu {
                    pci: d.pci,
                    minor: None,
                    model: gpu_model(d.model.as_ref(), gpu_type),
                },
            ));
        }
        for nic in &g.nics {
            let at = group_src.at(nic);
            let (nic, ids, class) = expand_nic(nic.get_ref(), nic_types, &at)?;
            tree.push(g, nic.pci, parents.of(nic.pci), ids, class);
            nics.push(nic);
        }
    }
    let mut assumptions: Vec<Assumption> = pick(layers, |d| d.gaps.as_ref())
        .map(|(gaps, _)| gaps.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|text| Assumption {
            about: None,
            text: text.clone(),
        })
        .collect();
    for group in groups {
        let g = group.get_ref();
        let Some(text) = &g.assumed else {
            continue;
        };
        let members = g.gpus.iter().map(|d| d.get_ref().pci);
        let members = members.chain(g.nics.iter().map(|d| d.get_ref().pci));
        assumptions.extend(members.map(|pci| Assumption {
            about: Some(pci),
            text: text.clone(),
        }));
    }
    let gpus = assign_minors(gpus)?;
    let mut machine = Machine {
        dmi,
        numa_nodes,
        cores,
        packages: Vec::new(),
        pci: tree.devices,
        gpus,
        nics,
        numa_distances,
        assumptions,
    };
    machine.normalize();
    machine.validate()?;
    Ok((header, machine))
}

fn group_label(g: &GroupDesc) -> String {
    match &g.root {
        Some(root) => format!("group {root}"),
        None => "group on its endpoints' own root buses".to_string(),
    }
}

fn gpu_model(own: Option<&String>, gpu_type: Option<&GpuType>) -> Option<String> {
    own.cloned()
        .or_else(|| gpu_type.and_then(|t| t.model.clone()))
}

fn numa_nodes(numa: &[Spanned<NumaDesc>], src: Source<'_>) -> Result<Vec<NumaNode>, CatalogError> {
    let mut out: Vec<NumaNode> = Vec::new();
    for item in numa {
        let n = item.get_ref();
        for prev in &out {
            if prev.id == n.id {
                return Err(CatalogError::Layout {
                    at: src.at(item),
                    message: format!("NUMA node {} is listed twice", n.id),
                });
            }
            if let Some(cpu) = prev.cpus.intersection(&n.cpus).first() {
                return Err(CatalogError::CpuOverlap {
                    at: src.at(item),
                    cpu,
                    first: prev.id,
                    second: n.id,
                });
            }
        }
        out.push(NumaNode {
            id: n.id,
            cpus: n.cpus.clone(),
        });
    }
    Ok(out)
}

/// The `distances` rows of the `[[numa]]` entries as the model's distance table.
fn numa_distances(numa: &[Spanned<NumaDesc>]) -> Vec<NumaDistance> {
    numa.iter()
        .flat_map(|item| {
            let n = item.get_ref();
            n.distances.iter().map(|&(to, distance)| NumaDistance {
                from: n.id,
                to,
                distance,
            })
        })
        .collect()
}

/// Fold the CPUs into physical cores by the sibling rule; every core stays inside one
/// NUMA node and every CPU belongs to exactly one core.
fn cores(cpu: &CpuDesc, numa: &[NumaNode]) -> Result<Vec<CpuSet>, CatalogError> {
    let all = numa.iter().fold(CpuSet::new(), |acc, n| acc.union(&n.cpus));
    let tpc = cpu.threads_per_core;
    if tpc == 0 {
        return Err(CatalogError::Smt(
            "cpu.threads_per_core must be at least 1".into(),
        ));
    }
    let stride = match cpu.siblings {
        SiblingRule::Adjacent => 1,
        SiblingRule::Offset => match cpu.offset {
            Some(0) => return Err(CatalogError::Smt("cpu.offset must be at least 1".into())),
            Some(o) => o,
            None if all.len() % tpc as usize != 0 => {
                return Err(CatalogError::Smt(format!(
                    "{} CPUs do not split into cores of {tpc} threads",
                    all.len()
                )));
            }
            None => u32::try_from(all.len() / tpc as usize)
                .unwrap_or(u32::MAX)
                .max(1),
        },
    };
    let node_of = |c: u32| numa.iter().find(|n| n.cpus.contains(c)).map(|n| n.id);
    let mut taken = CpuSet::new();
    let mut out = Vec::new();
    for first in all.iter() {
        if taken.contains(first) {
            continue;
        }
        let mut core = CpuSet::new();
        for k in 0..tpc {
            let cpu_id = first
                .checked_add(k.saturating_mul(stride))
                .filter(|c| all.contains(*c));
            let Some(c) = cpu_id.filter(|c| !taken.contains(*c)) else {
                return Err(CatalogError::Smt(format!(
                    "CPU {first} has no free hardware thread {k} (expected CPU {}) under the {:?} sibling rule",
                    u64::from(first) + u64::from(k) * u64::from(stride),
                    cpu.siblings
                )));
            };
            if node_of(c) != node_of(first) {
                return Err(CatalogError::Smt(format!(
                    "CPUs {first} and {c} would be one core but sit on different NUMA nodes"
                )));
            }
            core.insert(c);
            taken.insert(c);
        }
        out.push(core);
    }
    Ok(out)
}

/// The parent bridge of each endpoint of one group.
struct Parents(BTreeMap<(u8, u8), Option<PciAddr>>);

impl Parents {
    fn of(&self, addr: PciAddr) -> Option<PciAddr> {
        self.0.get(&(addr.bus, addr.device)).copied().flatten()
    }
}

struct Tree<'a> {
    pcie: &'a PcieDesc,
    devices: Vec<PciDevice>,
    /// Root ports generated so far per root complex, to number the next one.
    root_ports: BTreeMap<(u32, u8), u8>,
}

impl Tree<'_> {
    fn link(&self) -> PciLink {
        PciLink {
            current_speed: self.pcie.link_speed.clone(),
            current_width: self.pcie.link_width,
            max_speed: self.pcie.link_speed.clone(),
            max_width: self.pcie.link_width,
        }
    }

    fn push(
        &mut self,
        g: &GroupDesc,
        addr: PciAddr,
        parent: Option<PciAddr>,
        ids: PciId,
        class: u32,
    ) {
        let link = self.link();
        let root = match &g.root {
            Some(r) => r.to_string(),
            None => RootName {
                domain: addr.domain,
                bus: addr.bus,
            }
            .to_string(),
        };
        self.devices.push(PciDevice {
            addr,
            parent,
            root: Some(root),
            vendor: ids.vendor,
            device: ids.device,
            class,
            numa_node: g.numa.as_ref().map(|n| *n.get_ref()),
            link,
        });
    }

    /// Add the group's bridges and say which one is each endpoint's parent. The phases:
    /// the endpoints, then a group on a root bus (no bridges), else the root port, then
    /// the switch's upstream and downstream ports when the group has a switch.
    fn add_group(&mut self, g: &GroupDesc, at: &str) -> Result<Parents, CatalogError> {
        let endpoints = endpoints(g);
        if endpoints.is_empty() {
            return Err(layout(
                at,
                format!("{} has no GPU and no NIC", group_label(g)),
            ));
        }
        if g.on_root_bus {
            return root_bus_parents(g, &endpoints, at);
        }
        let Some(root) = &g.root else {
            return Err(layout(
                at,
                "root = \"pciDDDD:BB\" is required unless on_root_bus = true".into(),
            ));
        };
        check_below_root(root, &endpoints, at)?;
        let root_port = self.root_port(g, root, at)?;
        let root_port_id = self.pcie.root_port_id.unwrap_or(DEFAULT_ROOT_PORT_ID);
        self.push(g, root_port, None, root_port_id, class::BRIDGE_PCI);

        let Some(switch) = &g.switch else {
            if let Some(e) = endpoints.iter().find(|e| e.downstream.is_some()) {
                return Err(layout(
                    at,
                    format!(
                        "{} names a downstream port but the group has no switch",
                        e.addr
                    ),
                ));
            }
            return Ok(Parents(
                endpoints
                    .iter()
                    .map(|e| ((e.addr.bus, e.addr.device), Some(root_port)))
                    .collect(),
            ));
        };
        let upstream = switch_upstream(switch, root, &endpoints, at)?;
        let switch_id = switch
            .pci_id
            .or(self.pcie.switch_id)
            .unwrap_or(DEFAULT_SWITCH_ID);
        self.push(g, upstream, Some(root_port), switch_id, class::BRIDGE_PCI);

        let (downstream, ports) = downstream_ports(root, upstream, &endpoints, at)?;
        for port in &ports {
            self.push(g, *port, Some(upstream), switch_id, class::BRIDGE_PCI);
        }
        Ok(Parents(
            downstream
                .into_iter()
                .map(|(slot, port)| (slot, Some(port)))
                .collect(),
        ))
    }

    /// The group's root port: the one it names (on its root bus), else the next one
    /// generated on that root complex.
    fn root_port(
        &mut self,
        g: &GroupDesc,
        root: &RootName,
        at: &str,
    ) -> Result<PciAddr, CatalogError> {
        match g.root_port {
            Some(rp) if rp.domain != root.domain || rp.bus != root.bus => Err(layout(
                at,
                format!("root port {rp} is not on the root bus of {root}"),
            )),
            Some(rp) => Ok(rp),
            None => {
                let n = self.root_ports.entry((root.domain, root.bus)).or_insert(0);
                *n += 1;
                if *n > 0x1f {
                    return Err(layout(
                        at,
                        format!("too many generated root ports on {root}"),
                    ));
                }
                Ok(PciAddr::new(root.domain, root.bus, *n, 0))
            }
        }
    }
}

/// A layout error at a group.
fn layout(at: &str, message: String) -> CatalogError {
    CatalogError::Layout {
        at: at.to_string(),
        message,
    }
}

/// A GPU or NIC of a group, and the switch downstream port it names, if any.
struct Endpoint {
    addr: PciAddr,
    downstream: Option<PciAddr>,
}

/// The group's GPUs, then its NICs.
fn endpoints(g: &GroupDesc) -> Vec<Endpoint> {
    g.gpus
        .iter()
        .map(|d| (d.get_ref().pci, d.get_ref().downstream))
        .chain(
            g.nics
                .iter()
                .map(|d| (d.get_ref().pci, d.get_ref().downstream)),
        )
        .map(|(addr, downstream)| Endpoint { addr, downstream })
        .collect()
}

/// A group on a root bus: no bridges, so no endpoint has a parent; it names no root
/// port, switch or downstream port, and every endpoint is on its root's bus.
fn root_bus_parents(
    g: &GroupDesc,
    endpoints: &[Endpoint],
    at: &str,
) -> Result<Parents, CatalogError> {
    if g.root_port.is_some() || g.switch.is_some() {
        return Err(layout(
            at,
            "on_root_bus = true leaves no room for root_port or switch".into(),
        ));
    }
    if let Some(e) = endpoints.iter().find(|e| e.downstream.is_some()) {
        return Err(layout(
            at,
            format!("{} names a downstream port but sits on a root bus", e.addr),
        ));
    }
    if let Some(root) = &g.root
        && let Some(e) = endpoints
            .iter()
            .find(|e| e.addr.domain != root.domain || e.addr.bus != root.bus)
    {
        return Err(layout(
            at,
            format!(
                "{} is not on the root bus of {root} (on_root_bus = true)",
                e.addr
            ),
        ));
    }
    Ok(Parents(
        endpoints
            .iter()
            .map(|e| ((e.addr.bus, e.addr.device), None))
            .collect(),
    ))
}

/// Every endpoint is in its root complex's domain, on a bus below its root bus.
fn check_below_root(root: &RootName, endpoints: &[Endpoint], at: &str) -> Result<(), CatalogError> {
    for Endpoint { addr, .. } in endpoints {
        if addr.domain != root.domain {
            return Err(layout(
                at,
                format!(
                    "{addr} is not in PCI domain {:04x} of its root complex {root}",
                    root.domain
                ),
            ));
        }
        if addr.bus <= root.bus {
            return Err(layout(
                at,
                format!("{addr} cannot sit below a root port of {root}"),
            ));
        }
    }
    Ok(())
}

/// The switch's upstream port: the one named, else generated two buses above the first
/// endpoint's (room for the root port's bus and the switch's internal one).
fn switch_upstream(
    switch: &SwitchDesc,
    root: &RootName,
    endpoints: &[Endpoint],
    at: &str,
) -> Result<PciAddr, CatalogError> {
    let first_bus = endpoints
        .iter()
        .map(|e| e.addr.bus)
        .min()
        .unwrap_or(root.bus);
    let upstream = match switch.upstream {
        Some(up) => up,
        None if first_bus >= root.bus.saturating_add(3) => {
            PciAddr::new(root.domain, first_bus - 2, 0, 0)
        }
        None => {
            return Err(layout(
                at,
                format!(
                    "no room to generate a switch between {root} and bus {first_bus:02x}; give switch.upstream"
                ),
            ));
        }
    };
    if upstream.domain != root.domain {
        return Err(layout(
            at,
            format!("switch upstream port {upstream} is outside the domain of {root}"),
        ));
    }
    Ok(upstream)
}

/// Endpoint slot (bus, device) -> its switch downstream port.
type SlotPorts = BTreeMap<(u8, u8), PciAddr>;

/// Each endpoint slot's downstream port, and every port to add. One port per endpoint
/// slot: given ones first, then generated ones on the bus below the upstream port,
/// numbered in endpoint address order.
fn downstream_ports(
    root: &RootName,
    upstream: PciAddr,
    endpoints: &[Endpoint],
    at: &str,
) -> Result<(SlotPorts, BTreeSet<PciAddr>), CatalogError> {
    let mut downstream = SlotPorts::new();
    for Endpoint {
        addr,
        downstream: given,
    } in endpoints
    {
        if let Some(d) = given {
            match downstream.insert((addr.bus, addr.device), *d) {
                Some(prev) if prev != *d => {
                    return Err(layout(
                        at,
                        format!("{addr} names downstream port {d}, its sibling named {prev}"),
                    ));
                }
                _ => {}
            }
        }
    }
    let internal_bus = upstream
        .bus
        .checked_add(1)
        .ok_or_else(|| layout(at, "switch on bus ff".into()))?;
    let mut used: BTreeSet<PciAddr> = downstream.values().copied().collect();
    let slots: BTreeSet<(u8, u8)> = endpoints
        .iter()
        .map(|e| (e.addr.bus, e.addr.device))
        .collect();
    let mut next = 0u8;
    for slot in slots {
        if downstream.contains_key(&slot) {
            continue;
        }
        let addr = loop {
            if next > 0x1f {
                return Err(layout(
                    at,
                    "more than 32 downstream ports to generate".into(),
                ));
            }
            let a = PciAddr::new(root.domain, internal_bus, next, 0);
            next += 1;
            if !used.contains(&a) {
                break a;
            }
        };
        used.insert(addr);
        downstream.insert(slot, addr);
    }
    Ok((downstream, used))
}

/// Resolve a NIC entry against its type: names, kind, class and port facts. Returns the
/// NIC, its PCI ids and its PCI class.
fn expand_nic(
    d: &super::format::NicDesc,
    types: &BTreeMap<String, NicType>,
    at: &str,
) -> Result<(Nic, PciId, u32), CatalogError> {
    let layout = |message: String| CatalogError::Layout {
        at: at.to_string(),
        message,
    };
    let (_, ty) = match &d.nic_type {
        Some(k) => types.get_key_value(k).ok_or_else(|| {
            layout(format!(
                "NIC {} has type {k:?}, which is not among [nic_types.*] ({})",
                d.pci,
                keys(types)
            ))
        })?,
        None if types.len() == 1 => types
            .iter()
            .next()
            .ok_or(CatalogError::Missing("nic_types"))?,
        None => {
            return Err(layout(format!(
                "NIC {} needs type = one of the [nic_types.*] tables ({})",
                d.pci,
                keys(types)
            )));
        }
    };
    let name =
        |own: &Option<String>, template: &Option<String>| -> Result<Option<String>, CatalogError> {
            let Some(t) = own.as_ref().or(template.as_ref()) else {
                return Ok(None);
            };
            let n = expand_name(t, d.pci);
            if n.contains('{') || n.contains('}') || n.is_empty() {
                return Err(layout(format!(
                    "name template {t:?} for NIC {}: use only {{bus}}, {{slot}}, {{function}}",
                    d.pci
                )));
            }
            Ok(Some(n))
        };
    let rdma = name(&d.rdma, &ty.rdma)?;
    let netdev = name(&d.netdev, &ty.netdev)?;
    let kind = ty.kind.unwrap_or_else(|| {
        classify_nic(
            ty.pci_id.vendor,
            ty.pci_id.device,
            rdma.is_some(),
            ty.link_layer.as_deref(),
        )
    });
    let class = ty.class.unwrap_or(match kind {
        NicKind::Infiniband => class::NETWORK_INFINIBAND,
        _ => class::NETWORK_ETHERNET,
    });
    let ports = if rdma.is_some() {
        vec![RdmaPort {
            number: 1,
            state: Some(
                ty.state
                    .clone()
                    .unwrap_or_else(|| DEFAULT_PORT_STATE.to_string()),
            ),
            rate: d.rate.clone().or_else(|| ty.rate.clone()),
            link_layer: ty.link_layer.clone(),
        }]
    } else {
        Vec::new()
    };
    Ok((
        Nic {
            pci: d.pci,
            kind,
            rdma,
            netdev,
            ports,
        },
        ty.pci_id,
        class,
    ))
}

fn keys(types: &BTreeMap<String, NicType>) -> String {
    if types.is_empty() {
        return "none defined".into();
    }
    types
        .keys()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Given minors stay; the others take the GPU's position in PCI address order.
fn assign_minors(gpus: Vec<(Option<u32>, Gpu)>) -> Result<Vec<Gpu>, CatalogError> {
    let mut order: Vec<PciAddr> = gpus.iter().map(|(_, g)| g.pci).collect();
    order.sort();
    let mut seen = BTreeMap::new();
    let mut out = Vec::new();
    for (minor, mut gpu) in gpus {
        let m =
            minor.unwrap_or_else(|| order.iter().position(|a| *a == gpu.pci).unwrap_or(0) as u32);
        if let Some(other) = seen.insert(m, gpu.pci) {
            return Err(CatalogError::Layout {
                at: format!("GPU {}", gpu.pci),
                message: format!("minor number {m} is also GPU {other}'s"),
            });
        }
        gpu.minor = Some(m);
        out.push(gpu);
    }
    Ok(out)
}
