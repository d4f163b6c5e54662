//! The compact machine description: what a catalog file (or an admin's own file) says.
//!
//! The serde types mirror the TOML one to one and reject unknown keys, so a typo is an
//! error with the line toml reports, never a silently ignored fact. `build` expands a
//! description into a full `model::Machine`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use toml::Spanned;

use crate::cpuset::CpuSet;
use crate::model::{Dmi, NicKind};
use crate::pci::PciAddr;

/// A whole description. Every top-level key except `name` is optional so that a file
/// with `extends` can replace only what differs from its base.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Description {
    pub name: Option<String>,
    /// A catalog machine whose keys fill every top-level key this file leaves out.
    pub extends: Option<String>,
    pub vendor: Option<String>,
    pub instance: Option<String>,
    pub description: Option<String>,
    pub dmi: Option<Dmi>,
    pub cpu: Option<CpuDesc>,
    pub numa: Option<Vec<Spanned<NumaDesc>>>,
    pub pcie: Option<PcieDesc>,
    pub gpu: Option<GpuType>,
    pub nic_types: Option<BTreeMap<String, NicType>>,
    pub group: Option<Vec<Spanned<GroupDesc>>>,
    /// Gaps in the sources, machine-wide, as one sentence each; they become
    /// `Machine::assumptions` and so appear in every plan's reasons.
    pub gaps: Option<Vec<String>>,
}

/// How logical CPUs fold into physical cores.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CpuDesc {
    pub threads_per_core: u32,
    #[serde(default)]
    pub siblings: SiblingRule,
    /// For `siblings = "offset"`: the distance between a core's threads. Default: the
    /// machine's CPU count divided by `threads_per_core`.
    pub offset: Option<u32>,
}

/// Where a core's other hardware threads are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SiblingRule {
    /// Thread k of the core whose first thread is CPU c is CPU c + k * offset (how Linux
    /// numbers x86 SMT siblings: 0-95 first threads, 96-191 second threads).
    #[default]
    Offset,
    /// A core's threads are consecutive CPU ids (0,1), (2,3), ...
    Adjacent,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NumaDesc {
    pub id: u32,
    /// "" for a CPU-less node (Grace GPU memory without CDMM).
    pub cpus: CpuSet,
    /// The kernel's distance row as `[[to, distance], ...]` (e.g. `[[0, 80], [1, 120]]`);
    /// needed only where a CPU-less node must be tied to its socket.
    #[serde(default)]
    pub distances: Vec<(u32, u32)>,
}

/// PCI ids and link of the generated bridges.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PcieDesc {
    pub root_port_id: Option<PciId>,
    pub switch_id: Option<PciId>,
    /// e.g. "32.0 GT/s PCIe"; applied as current and maximum speed of every device.
    pub link_speed: Option<String>,
    pub link_width: Option<u8>,
}

/// What every GPU of the machine is unless the GPU entry says otherwise.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GpuType {
    pub pci_id: PciId,
    pub model: Option<String>,
    pub class: Option<u32>,
}

/// One kind of NIC on the machine (EFA, host ENA, IB VF ...), referenced by NIC entries.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NicType {
    pub pci_id: PciId,
    /// Default: decided from the PCI id and RDMA facts, as every source does.
    pub kind: Option<NicKind>,
    /// Default: 0x020700 for InfiniBand, 0x020000 otherwise.
    pub class: Option<u32>,
    /// Name templates: `{bus}`, `{slot}`, `{function}` are the decimal PCI bus, device
    /// and function (`rdmap{bus}s{slot}` gives EFA's rdmap79s0 for 0000:4f:00.0).
    pub rdma: Option<String>,
    pub netdev: Option<String>,
    /// RDMA port 1 facts; only used when the NIC has an RDMA name.
    pub rate: Option<String>,
    pub link_layer: Option<String>,
    pub state: Option<String>,
}

/// One PCIe group: the endpoints under one root port of one root complex, optionally
/// behind a PCIe switch.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupDesc {
    /// NUMA node of every device in the group; absent = unknown (numa_node -1).
    pub numa: Option<Spanned<u32>>,
    /// The host bridge as sysfs names it: "pci0000:44". May be left out with
    /// `on_root_bus`: each endpoint then has its own (Azure: one PCI domain per device).
    pub root: Option<RootName>,
    /// Endpoints sit directly on the root bus, with no bridge at all (VM passthrough).
    #[serde(default)]
    pub on_root_bus: bool,
    /// The root port; generated as <root bus>:NN.0 when absent.
    pub root_port: Option<PciAddr>,
    pub switch: Option<SwitchDesc>,
    #[serde(default)]
    pub gpus: Vec<Spanned<GpuDesc>>,
    #[serde(default)]
    pub nics: Vec<Spanned<NicDesc>>,
    /// What this group's layout assumes where the sources are silent (one sentence);
    /// repeated in the reasons of every rank whose GPU or NIC is in the group.
    pub assumed: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SwitchDesc {
    /// Upstream port; generated two buses below the first endpoint bus when absent.
    pub upstream: Option<PciAddr>,
    pub pci_id: Option<PciId>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GpuDesc {
    pub pci: PciAddr,
    /// /dev/nvidiaN; default: the GPU's position in PCI address order.
    pub minor: Option<u32>,
    pub pci_id: Option<PciId>,
    pub model: Option<String>,
    /// Switch downstream port above the GPU; generated when absent.
    pub downstream: Option<PciAddr>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NicDesc {
    pub pci: PciAddr,
    /// Key into `[nic_types]`; may be left out when there is only one type.
    #[serde(rename = "type")]
    pub nic_type: Option<String>,
    pub rdma: Option<String>,
    pub netdev: Option<String>,
    pub rate: Option<String>,
    pub downstream: Option<PciAddr>,
}

/// A PCI vendor:device pair, written "10de:2330".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PciId {
    pub vendor: u16,
    pub device: u16,
}

impl FromStr for PciId {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || format!("bad PCI id {text:?}: expected vendor:device in hex, e.g. 10de:2330");
        let (v, d) = text.split_once(':').ok_or_else(bad)?;
        let hex = |s: &str| {
            if s.len() == 4 {
                u16::from_str_radix(s, 16).map_err(|_| bad())
            } else {
                Err(bad())
            }
        };
        Ok(Self {
            vendor: hex(v)?,
            device: hex(d)?,
        })
    }
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:04x}", self.vendor, self.device)
    }
}

impl<'de> Deserialize<'de> for PciId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A host bridge name, "pci" + domain + ":" + bus, as in /sys/devices/pci0000:44.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RootName {
    pub domain: u32,
    pub bus: u8,
}

impl FromStr for RootName {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || format!("bad root complex {text:?}: expected pciDDDD:BB, e.g. pci0000:44");
        let rest = text.strip_prefix("pci").ok_or_else(bad)?;
        let (domain, bus) = rest.split_once(':').ok_or_else(bad)?;
        if !(4..=8).contains(&domain.len()) || bus.len() != 2 {
            return Err(bad());
        }
        Ok(Self {
            domain: u32::from_str_radix(domain, 16).map_err(|_| bad())?,
            bus: u8::from_str_radix(bus, 16).map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for RootName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pci{:04x}:{:02x}", self.domain, self.bus)
    }
}

impl<'de> Deserialize<'de> for RootName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Fill a name template with the decimal bus, slot and function of `addr`.
pub(crate) fn expand_name(template: &str, addr: PciAddr) -> String {
    template
        .replace("{bus}", &addr.bus.to_string())
        .replace("{slot}", &addr.device.to_string())
        .replace("{function}", &addr.function.to_string())
}
