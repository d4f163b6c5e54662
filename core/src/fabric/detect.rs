//! Offline vendor and instance detection: DMI first, then GPU/NIC PCI ids and counts.
//!
//! No metadata service: only what the node itself shows. AWS writes the instance type
//! into DMI `product_name`; Azure, Google and OCI do not, so their instance is inferred
//! from the GPU model and the fabric NICs (kind, ids, count). Every conclusion leaves one
//! evidence line, which `gpu-affinity explain` prints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::profiles::{MatchFacts, Profiles};
use crate::model::{Machine, NicKind, vendor};

/// DMI chassis asset tag of every Azure VM.
const AZURE_ASSET_TAG: &str = "7783-7084-3265-9085-8269-3286-77";
const OCI_ASSET_TAG: &str = "OracleCloud.com";
const AWS_SYS_VENDOR: &str = "Amazon EC2";
const GCE_PRODUCT: &str = "Google Compute Engine";

/// NVIDIA device ids this module tells apart.
mod gpu_id {
    pub const A100_40G: u16 = 0x20b0;
    pub const A100_80G: u16 = 0x20b2;
    pub const H100_SXM: u16 = 0x2330;
    pub const H200_SXM: u16 = 0x2335;
    pub const B200: u16 = 0x2901;
    pub use crate::numa::c2c_gpu::{GB200, GB300, GB300_B};
}

/// The instance families detection names from the hardware: the one list profiles'
/// `[match] family` is checked against (a family nothing detects would never match).
/// AWS families also come from DMI `product_name` (its part before the first `.`), so an
/// AWS profile may name one this list lacks.
pub mod family {
    pub const P4D: &str = "p4d";
    pub const P4DE: &str = "p4de";
    pub const P5: &str = "p5";
    pub const P5EN: &str = "p5en";
    pub const P5E: &str = "p5e";
    pub const NDA100V4: &str = "nda100v4";
    pub const NDV5: &str = "ndv5";
    pub const A3_HIGH: &str = "a3-high";
    pub const A3_MEGA: &str = "a3-mega";
    pub const A3_ULTRA: &str = "a3-ultra";
    pub const A4: &str = "a4";
    pub const OCI_GPU4: &str = "oci-gpu4";
    pub const OCI_A100_V2: &str = "oci-a100-v2";
    pub const OCI_H100: &str = "oci-h100";
    pub const OCI_H200: &str = "oci-h200";
    pub const ND_GB200_V6: &str = "nd-gb200-v6";
    pub const ND_GB300_V6: &str = "nd-gb300-v6";
    pub const A4X: &str = "a4x";
    pub const OCI_B200: &str = "oci-b200";
    pub const OCI_GB200_V3: &str = "oci-gb200-v3";
    pub const OCI_GB200: &str = "oci-gb200";
    pub const OCI_GB300: &str = "oci-gb300";

    pub const ALL: &[&str] = &[
        P4D,
        P4DE,
        P5,
        P5EN,
        P5E,
        NDA100V4,
        NDV5,
        A3_HIGH,
        A3_MEGA,
        A3_ULTRA,
        A4,
        OCI_GPU4,
        OCI_A100_V2,
        OCI_H100,
        OCI_H200,
        ND_GB200_V6,
        ND_GB300_V6,
        A4X,
        OCI_B200,
        OCI_GB200_V3,
        OCI_GB200,
        OCI_GB300,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Aws,
    Azure,
    Gcp,
    Oci,
    Unknown,
}

impl Vendor {
    /// Every vendor: the one list profiles' `vendor` is checked against.
    pub const ALL: [Vendor; 5] = [
        Vendor::Aws,
        Vendor::Azure,
        Vendor::Gcp,
        Vendor::Oci,
        Vendor::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Aws => "aws",
            Vendor::Azure => "azure",
            Vendor::Gcp => "gcp",
            Vendor::Oci => "oci",
            Vendor::Unknown => "unknown",
        }
    }

    /// A vendor name, any case.
    pub fn parse(name: &str) -> Option<Vendor> {
        Vendor::ALL
            .into_iter()
            .find(|v| v.as_str().eq_ignore_ascii_case(name))
    }

    /// "aws, azure, gcp, oci or unknown", for messages.
    pub fn expected() -> String {
        let names: Vec<&str> = Vendor::ALL.iter().map(|v| v.as_str()).collect();
        crate::model::one_of(&names)
    }
}

/// What detection concluded, and why. Read back only from the plugin's copy of it
/// (`saved`), by the same build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detection {
    pub vendor: Vendor,
    /// The instance type ("p5.48xlarge", "Standard_ND96isr_H100_v5", "a3-highgpu-8g",
    /// "BM.GPU.H100.8"); `None` when it cannot be told.
    pub instance: Option<String>,
    /// The instance family profiles match on ("p5", "ndv5", "a3-high", "oci-h100").
    pub family: Option<String>,
    /// The name of the chosen profile.
    pub profile: String,
    /// One line per fact used, e.g. `DMI sys_vendor = "Amazon EC2"`.
    pub evidence: Vec<String>,
}

/// Detect with the built-in profiles.
pub fn detect(machine: &Machine) -> Detection {
    detect_with(machine, &Profiles::builtin())
}

/// What the node's hardware shows, summarised once.
struct Hardware {
    gpu_count: usize,
    /// The most common GPU PCI id, when the source carries ids.
    gpu_id: Option<(u16, u16)>,
    gpu_ids: Vec<(u16, u16)>,
    fabric_ids: Vec<(u16, u16)>,
    fabric_kinds: Vec<NicKind>,
    /// Fabric NICs per kind, with their ids ("32 EFA 1d0f:efa1").
    by_kind: BTreeMap<NicKind, (usize, Vec<(u16, u16)>)>,
    numa_nodes: usize,
    /// The most common CPU count of the NUMA nodes that list CPUs (the CPU model is not
    /// in the model; the count per node tells EPYC generations apart under NPS4).
    cpus_per_numa: Option<usize>,
}

/// The PCI ids of a device, `None` when a source did not give them. Topology files
/// often name a GPU by class only; a fixture tree built from one then says vendor 10de
/// (the class and driver make it an NVIDIA GPU) but device ffff, which is no model either.
fn ids_of(machine: &Machine, addr: crate::pci::PciAddr) -> Option<(u16, u16)> {
    const UNKNOWN: u16 = 0xffff;
    machine
        .pci_device(addr)
        .map(|d| (d.vendor, d.device))
        .filter(|(v, d)| *v != 0 && *v != UNKNOWN && *d != UNKNOWN)
}

impl Hardware {
    fn of(machine: &Machine) -> Self {
        let gpu_ids: Vec<(u16, u16)> = machine
            .gpus
            .iter()
            .filter_map(|g| ids_of(machine, g.pci))
            .collect();
        let mut counts: BTreeMap<(u16, u16), usize> = BTreeMap::new();
        for id in &gpu_ids {
            *counts.entry(*id).or_default() += 1;
        }
        let gpu_id = counts.iter().max_by_key(|(_, n)| **n).map(|(id, _)| *id);
        let mut by_kind: BTreeMap<NicKind, (usize, Vec<(u16, u16)>)> = BTreeMap::new();
        let mut fabric_ids = Vec::new();
        let mut fabric_kinds = Vec::new();
        let mut seen_pci = Vec::new();
        for nic in machine.fabric_nics() {
            // A dual-port NIC may be listed once per port; count PCI functions.
            if seen_pci.contains(&nic.pci) {
                continue;
            }
            seen_pci.push(nic.pci);
            let entry = by_kind.entry(nic.kind).or_default();
            entry.0 += 1;
            if let Some(id) = ids_of(machine, nic.pci) {
                fabric_ids.push(id);
                if !entry.1.contains(&id) {
                    entry.1.push(id);
                }
            }
            if !fabric_kinds.contains(&nic.kind) {
                fabric_kinds.push(nic.kind);
            }
        }
        let mut per_numa: BTreeMap<usize, usize> = BTreeMap::new();
        for n in machine.numa_nodes.iter().filter(|n| !n.cpus.is_empty()) {
            *per_numa.entry(n.cpus.len()).or_default() += 1;
        }
        // Ties go to the larger count: a narrowed mask (a typo, a cgroup) only shrinks one.
        let cpus_per_numa = per_numa
            .iter()
            .max_by_key(|(size, n)| (**n, **size))
            .map(|(size, _)| *size);
        Hardware {
            gpu_count: machine.gpus.len(),
            gpu_id,
            gpu_ids,
            fabric_ids,
            fabric_kinds,
            by_kind,
            numa_nodes: machine.numa_nodes.len(),
            cpus_per_numa,
        }
    }

    fn gpu_device(&self) -> Option<u16> {
        self.gpu_id
            .filter(|(v, _)| *v == vendor::NVIDIA)
            .map(|(_, d)| d)
    }

    fn count(&self, kind: NicKind) -> usize {
        self.by_kind.get(&kind).map_or(0, |(n, _)| *n)
    }

    fn has_id(&self, vendor_id: u16, device: u16) -> bool {
        self.fabric_ids.contains(&(vendor_id, device))
    }

    /// "8 GPUs 10de:2330 and 32 EFA 1d0f:efa1".
    fn describe(&self) -> String {
        let gpus = match self.gpu_id {
            Some((v, d)) => format!("{} GPUs {v:04x}:{d:04x}", self.gpu_count),
            None => format!("{} GPUs (PCI ids not given)", self.gpu_count),
        };
        let nics: Vec<String> = self
            .by_kind
            .iter()
            .map(|(kind, (n, ids))| {
                let ids: Vec<String> = ids
                    .iter()
                    .map(|(v, d)| format!("{v:04x}:{d:04x}"))
                    .collect();
                let ids = if ids.is_empty() {
                    String::new()
                } else {
                    format!(" {}", ids.join("/"))
                };
                format!("{n} {}{ids}", kind_label(*kind))
            })
            .collect();
        if nics.is_empty() {
            format!("{gpus} and no fabric NIC")
        } else {
            format!("{gpus} and {}", nics.join(" and "))
        }
    }
}

fn kind_label(kind: NicKind) -> &'static str {
    match kind {
        NicKind::Infiniband => "InfiniBand",
        NicKind::Roce => "RoCE",
        NicKind::Efa => "EFA",
        NicKind::Gvnic => "gVNIC",
        NicKind::Ethernet => "Ethernet",
    }
}

fn trim(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

fn dmi_line(field: &str, value: &str) -> String {
    format!("DMI {field} = {value:?}")
}

fn vendor_of(machine: &Machine, evidence: &mut Vec<String>) -> Vendor {
    let d = &machine.dmi;
    if let Some(v) = trim(&d.sys_vendor).filter(|v| *v == AWS_SYS_VENDOR) {
        evidence.push(dmi_line("sys_vendor", v));
        return Vendor::Aws;
    }
    if let Some(v) = trim(&d.chassis_asset_tag).filter(|v| *v == AZURE_ASSET_TAG) {
        evidence.push(format!(
            "{} (Azure's fixed asset tag)",
            dmi_line("chassis_asset_tag", v)
        ));
        return Vendor::Azure;
    }
    if let Some(v) = trim(&d.product_name).filter(|v| *v == GCE_PRODUCT) {
        evidence.push(dmi_line("product_name", v));
        return Vendor::Gcp;
    }
    if let Some(v) = trim(&d.chassis_asset_tag).filter(|v| *v == OCI_ASSET_TAG) {
        evidence.push(dmi_line("chassis_asset_tag", v));
        return Vendor::Oci;
    }
    let shown: Vec<String> = [
        ("sys_vendor", &d.sys_vendor),
        ("product_name", &d.product_name),
        ("chassis_asset_tag", &d.chassis_asset_tag),
    ]
    .iter()
    .map(|(f, v)| format!("{f} = {:?}", trim(v).unwrap_or("")))
    .collect();
    evidence.push(format!(
        "DMI {} matches no known cloud (AWS, Azure, Google, OCI)",
        shown.join(", ")
    ));
    Vendor::Unknown
}

/// (instance, family) as detection names them; `None` where it cannot tell.
type Inferred = (Option<String>, Option<String>);

/// (instance, family) from the hardware, per vendor: one rule table each.
fn infer(vendor: Vendor, machine: &Machine, hw: &Hardware, evidence: &mut Vec<String>) -> Inferred {
    let mut verdict = Verdict {
        describe: hw.describe(),
        evidence,
    };
    match vendor {
        Vendor::Aws => aws_instance(machine, hw, &mut verdict),
        Vendor::Azure => azure_instance(hw, &mut verdict),
        Vendor::Gcp => gcp_instance(hw, &mut verdict),
        Vendor::Oci => oci_instance(hw, &mut verdict),
        Vendor::Unknown => {
            verdict.evidence.push(verdict.describe);
            (None, None)
        }
    }
}

/// Where an inference leaves its one evidence line: the hardware summary
/// ([`Hardware::describe`]), then what it concluded or why nothing fits.
struct Verdict<'e> {
    describe: String,
    evidence: &'e mut Vec<String>,
}

impl Verdict<'_> {
    /// `describe -> instance (family family)note`.
    fn found(&mut self, instance: Option<&str>, family: &str, note: &str) -> Inferred {
        let what = instance.map_or(format!("{family} family"), |i| {
            format!("{i} ({family} family)")
        });
        self.evidence
            .push(format!("{} -> {what}{note}", self.describe));
        (instance.map(str::to_string), Some(family.to_string()))
    }

    /// `describe: why`, and no instance.
    fn none(&mut self, why: &str) -> Inferred {
        self.evidence.push(format!("{}: {why}", self.describe));
        (None, None)
    }
}

/// AWS: DMI `product_name` is the instance; without it, the GPU model and EFA count.
fn aws_instance(machine: &Machine, hw: &Hardware, v: &mut Verdict) -> Inferred {
    let product = machine
        .dmi
        .product_name
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty());
    if let Some(p) = product {
        v.evidence.push(dmi_line("product_name", p));
        let family = p.split('.').next().unwrap_or(p).to_string();
        v.evidence
            .push(format!("{} on a {family} instance", v.describe));
        return (Some(p.to_string()), Some(family));
    }
    const MISSING: &str = " (DMI product_name missing)";
    let efa = hw.count(NicKind::Efa);
    match (hw.gpu_device(), efa) {
        (Some(gpu_id::A100_40G), 1..) => v.found(Some("p4d.24xlarge"), family::P4D, MISSING),
        (Some(gpu_id::A100_80G), 1..) => v.found(Some("p4de.24xlarge"), family::P4DE, MISSING),
        (Some(gpu_id::H100_SXM), 1..) => v.found(Some("p5.48xlarge"), family::P5, MISSING),
        (Some(gpu_id::H200_SXM), _) if hw.has_id(vendor::AMAZON, 0xefa2) || efa == 16 => {
            v.found(Some("p5en.48xlarge"), family::P5EN, MISSING)
        }
        (Some(gpu_id::H200_SXM), 1..) => v.found(Some("p5e.48xlarge"), family::P5E, MISSING),
        _ => v.none("DMI product_name missing and no known AWS GPU instance fits"),
    }
}

/// Azure: an ND InfiniBand VM, told by its GPU model (or, without one, its NUMA layout).
fn azure_instance(hw: &Hardware, v: &mut Verdict) -> Inferred {
    let ib = hw.count(NicKind::Infiniband);
    if ib == 0 {
        return v.none("no InfiniBand NIC, not an ND InfiniBand VM");
    }
    match hw.gpu_device() {
        Some(gpu_id::A100_40G) => v.found(Some("Standard_ND96asr_v4"), family::NDA100V4, ""),
        Some(gpu_id::A100_80G) => v.found(Some("Standard_ND96amsr_A100_v4"), family::NDA100V4, ""),
        Some(gpu_id::H100_SXM) => v.found(Some("Standard_ND96isr_H100_v5"), family::NDV5, ""),
        Some(gpu_id::H200_SXM) => v.found(Some("Standard_ND96isr_H200_v5"), family::NDV5, ""),
        Some(gpu_id::GB200) => v.found(
            Some("Standard_ND128isr_NDR_GB200_v6"),
            family::ND_GB200_V6,
            " (Grace + GB200)",
        ),
        Some(gpu_id::GB300 | gpu_id::GB300_B) => v.found(
            Some("Standard_ND128isr_GB300_v6"),
            family::ND_GB300_V6,
            " (Grace + GB300)",
        ),
        // Vendor topology files carry class codes only; the NUMA layout still tells
        // the two ND generations apart (A100 v4: 4 NUMA nodes, v5: 2).
        None if hw.gpu_count == 8 && ib == 8 && hw.numa_nodes == 4 => v.found(
            None,
            family::NDA100V4,
            " (GPU model unknown; 4 NUMA nodes as on ND A100 v4)",
        ),
        None if hw.gpu_count == 8 && ib == 8 && hw.numa_nodes == 2 => v.found(
            None,
            family::NDV5,
            " (GPU model unknown; 2 NUMA nodes as on ND H100 v5 / H200 v5)",
        ),
        _ => v.none("no known Azure ND instance fits"),
    }
}

/// GCP: A3 by its GPU gVNICs, A3 Ultra and A4 by their GPU model on ConnectX RoCE.
fn gcp_instance(hw: &Hardware, v: &mut Verdict) -> Inferred {
    let gpu = hw.gpu_device();
    let gvnic = hw.count(NicKind::Gvnic);
    let roce = hw.count(NicKind::Roce);
    let h100 = matches!(gpu, Some(gpu_id::H100_SXM) | None);
    match (gpu, gvnic, roce) {
        (_, 4, 0) if h100 => v.found(
            Some("a3-highgpu-8g"),
            family::A3_HIGH,
            " (4 GPU gVNICs: GPUDirect-TCPX)",
        ),
        (_, 8, 0) if h100 => v.found(
            Some("a3-megagpu-8g"),
            family::A3_MEGA,
            " (8 GPU gVNICs: GPUDirect-TCPXO)",
        ),
        (Some(gpu_id::H200_SXM), _, 1..) => v.found(
            Some("a3-ultragpu-8g"),
            family::A3_ULTRA,
            " (ConnectX RoCE: GPUDirect RDMA over gIB)",
        ),
        (Some(gpu_id::B200), _, 1..) => v.found(
            Some("a4-highgpu-8g"),
            family::A4,
            " (ConnectX RoCE: GPUDirect RDMA over gIB)",
        ),
        (Some(gpu_id::GB200), _, 1..) => v.found(
            Some("a4x-highgpu-4g"),
            family::A4X,
            " (Grace + GB200, ConnectX RoCE: GPUDirect RDMA over gIB)",
        ),
        _ => v.none("no known GCP A3/A4 instance fits"),
    }
}

/// OCI: a bare-metal GPU shape, told by its GPU model and RDMA functions (or, without a
/// model, its NUMA layout: [`oci_a100_by_numa`]).
fn oci_instance(hw: &Hardware, v: &mut Verdict) -> Inferred {
    let rdma_functions = hw.count(NicKind::Roce) + hw.count(NicKind::Infiniband);
    if rdma_functions == 0 {
        return v.none("no RDMA NIC, not an OCI GPU cluster shape");
    }
    match hw.gpu_device() {
        Some(gpu_id::A100_40G) => v.found(Some("BM.GPU4.8"), family::OCI_GPU4, ""),
        Some(gpu_id::A100_80G) => v.found(
            Some("BM.GPU.A100-v2.8"),
            family::OCI_A100_V2,
            " (BM.GPU.B4.8 has the same GPUs and NICs)",
        ),
        Some(gpu_id::H100_SXM) => v.found(Some("BM.GPU.H100.8"), family::OCI_H100, ""),
        Some(gpu_id::H200_SXM) => v.found(Some("BM.GPU.H200.8"), family::OCI_H200, ""),
        Some(gpu_id::B200) => v.found(Some("BM.GPU.B200.8"), family::OCI_B200, ""),
        // GB200-v3.4 has 8 ConnectX-8 functions; GB200.4 / v2.4 have 4 RDMA NICs
        // (oci-hpc-oke by-shape doc @ 13dc0a1f), for which no profile is written.
        Some(gpu_id::GB200) if rdma_functions >= 8 => v.found(
            Some("BM.GPU.GB200-v3.4"),
            family::OCI_GB200_V3,
            " (Grace + GB200, 8 RDMA functions)",
        ),
        Some(gpu_id::GB200) => v.found(
            Some("BM.GPU.GB200.4"),
            family::OCI_GB200,
            " (Grace + GB200, fewer than 8 RDMA functions)",
        ),
        Some(gpu_id::GB300 | gpu_id::GB300_B) => v.found(
            Some("BM.GPU.GB300.4"),
            family::OCI_GB300,
            " (Grace + GB300)",
        ),
        None if hw.gpu_count == 8 && rdma_functions >= 8 && hw.numa_nodes >= 4 => {
            oci_a100_by_numa(hw, v)
        }
        _ => v.none("GPU model unknown or not a known OCI bare-metal GPU shape"),
    }
}

/// An OCI A100 shape without a GPU model. Hand-flattened vendor files (oci-hpc
/// samples/gpu/topo-flattened*.xml) give bus ids and classes only. The AMD A100 shapes
/// run NPS4 (GPUs on 4 of 8 NUMA nodes; the Intel H100/H200 shapes have 2), and the CPUs
/// per NUMA node tell the EPYC generation: 2x 32-core Rome on BM.GPU4.8 gives 16 per
/// node, 2x 64-core Milan on BM.GPU.A100-v2.8 / B4.8 gives 32.
fn oci_a100_by_numa(hw: &Hardware, v: &mut Verdict) -> Inferred {
    match hw.cpus_per_numa {
        Some(16) => v.found(
            Some("BM.GPU4.8"),
            family::OCI_GPU4,
            " (GPU model unknown; NPS4 NUMA nodes of 16 CPUs: 2x 32-core EPYC as on BM.GPU4.8)",
        ),
        Some(32) => v.found(
            Some("BM.GPU.A100-v2.8"),
            family::OCI_A100_V2,
            " (GPU model unknown; NPS4 NUMA nodes of 32 CPUs: 2x 64-core EPYC as on BM.GPU.A100-v2.8 / BM.GPU.B4.8)",
        ),
        other => {
            let cpus = other.map_or("unknown".to_string(), |n| n.to_string());
            v.none(&format!(
                "GPU model unknown; {} NUMA nodes of {cpus} CPUs match no OCI A100 shape",
                hw.numa_nodes
            ))
        }
    }
}

/// Detect with a given profile set (built-in plus the admin's).
pub fn detect_with(machine: &Machine, profiles: &Profiles) -> Detection {
    let mut evidence = Vec::new();
    let vendor = vendor_of(machine, &mut evidence);
    let hw = Hardware::of(machine);
    let (instance, family) = infer(vendor, machine, &hw, &mut evidence);
    let facts = MatchFacts {
        vendor: vendor.as_str().to_string(),
        family: family.clone(),
        instance: instance.clone(),
        gpu_ids: hw.gpu_ids.clone(),
        fabric_nic_ids: hw.fabric_ids.clone(),
        fabric_kinds: hw.fabric_kinds.clone(),
    };
    let profile = chosen_profile(profiles, &facts, vendor, &hw, &mut evidence);
    Detection {
        vendor,
        instance,
        family,
        profile,
        evidence,
    }
}

/// The profile that matches the node's facts, with an evidence line saying why (and, for
/// a generic one, why no specific one did); "" when none matches.
fn chosen_profile(
    profiles: &Profiles,
    facts: &MatchFacts,
    vendor: Vendor,
    hw: &Hardware,
    evidence: &mut Vec<String>,
) -> String {
    match profiles.select(facts) {
        Some(p) => {
            let generic = p.rules.vendor.is_none()
                || (p.rules.family.is_empty() && p.rules.instance.is_empty());
            if generic {
                let why = match (vendor, &facts.family) {
                    (Vendor::Unknown, _) => "the cloud is unknown".to_string(),
                    (_, None) => format!("no {} instance family was recognised", vendor.as_str()),
                    (_, Some(f)) => format!("no profile is written for the {f} family"),
                };
                let fabric = if hw.fabric_kinds.is_empty() {
                    "no fabric NIC: NCCL uses sockets".to_string()
                } else {
                    let kinds: Vec<&str> = hw.fabric_kinds.iter().map(|k| kind_label(*k)).collect();
                    format!("fabric NICs: {}", kinds.join(", "))
                };
                evidence.push(format!("profile {} (generic): {why}; {fabric}", p.name));
            } else {
                evidence.push(format!("profile {}: {}", p.name, p.description));
            }
            p.name.clone()
        }
        None => {
            evidence.push(
                "no profile matches, not even the generic ones; nothing is exported".to_string(),
            );
            String::new()
        }
    }
}
