//! Fabric detection and env rendering on hand-built machines with real bus ids, PCI ids
//! and DMI strings of each instance type (facts from ../shared/topologies and its derived
//! catalog), and on catalog machines (p4d, the H200).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::fabric::profiles::{self, Profiles};
use gpu_affinity::fabric::topo::{TopoDecision, decide};
use gpu_affinity::fabric::{Origin, Vendor, detect, render_env, topo_xml};
use gpu_affinity::model::{
    Dmi, Gpu, Machine, Nic, NicKind, NumaNode, PciDevice, PciLink, RdmaPort, class,
};
use gpu_affinity::pci::PciAddr;
use gpu_affinity::solver::{Mode, NicRef, Plan, RankPlan};
use gpu_affinity_test_support::{addr, p4d};

struct NicSpec<'a> {
    pci: &'a str,
    id: (u16, u16),
    kind: NicKind,
    rdma: Option<&'a str>,
    netdev: Option<&'a str>,
    numa: u32,
}

fn nic<'a>(
    pci: &'a str,
    id: (u16, u16),
    kind: NicKind,
    rdma: Option<&'a str>,
    netdev: Option<&'a str>,
    numa: u32,
) -> NicSpec<'a> {
    NicSpec {
        pci,
        id,
        kind,
        rdma,
        netdev,
        numa,
    }
}

fn device(a: PciAddr, id: (u16, u16), class: u32, numa: u32) -> PciDevice {
    PciDevice {
        addr: a,
        parent: None,
        root: None,
        vendor: id.0,
        device: id.1,
        class,
        numa_node: Some(numa),
        link: PciLink::default(),
    }
}

/// A machine with every GPU and NIC directly on a root bus.
fn machine(dmi: Dmi, numa: &[&str], gpus: &[(&str, u16, u32)], nics: &[NicSpec]) -> Machine {
    let mut m = Machine {
        dmi,
        ..Machine::default()
    };
    for (i, cpus) in numa.iter().enumerate() {
        m.numa_nodes.push(NumaNode {
            id: i as u32,
            cpus: CpuSet::parse_list(cpus).unwrap(),
        });
    }
    for (i, (pci, dev, n)) in gpus.iter().enumerate() {
        m.pci
            .push(device(addr(pci), (0x10de, *dev), class::DISPLAY_3D, *n));
        m.gpus.push(Gpu {
            pci: addr(pci),
            minor: Some(i as u32),
            model: None,
        });
    }
    for s in nics {
        let cls = if s.kind == NicKind::Infiniband {
            class::NETWORK_INFINIBAND
        } else {
            class::NETWORK_ETHERNET
        };
        if m.pci_device(addr(s.pci)).is_none() {
            m.pci.push(device(addr(s.pci), s.id, cls, s.numa));
        }
        let ports = if s.rdma.is_some() {
            vec![RdmaPort {
                number: 1,
                ..RdmaPort::default()
            }]
        } else {
            vec![]
        };
        m.nics.push(Nic {
            pci: addr(s.pci),
            kind: s.kind,
            rdma: s.rdma.map(str::to_string),
            netdev: s.netdev.map(str::to_string),
            ports,
        });
    }
    m.normalize();
    m.validate().unwrap();
    m
}

/// One rank per GPU with the fabric NICs of its NUMA node (a stand-in for the solver,
/// which another change provides; rendering only reads the plan).
fn plan(m: &Machine) -> Plan {
    let fabric = m.fabric_nics();
    let nic_ref = |n: &Nic| NicRef {
        pci: n.pci,
        name: n.name().map(str::to_string),
    };
    let ranks = m
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| RankPlan {
            rank: i as u32,
            gpus: vec![g.pci],
            nics: fabric
                .iter()
                .filter(|n| m.numa_of(n.pci) == m.numa_of(g.pci))
                .map(|n| nic_ref(n))
                .take(1)
                .collect(),
            cpus: CpuSet::new(),
            mems: vec![],
            reasons: vec![],
        })
        .collect();
    Plan {
        mode: Mode::Strict,
        ranks,
        violations: vec![],
        warnings: vec![],
        fabric_nics: fabric.iter().map(|n| nic_ref(n)).collect(),
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn dmi(sys_vendor: Option<&str>, product: Option<&str>, asset: Option<&str>) -> Dmi {
    Dmi {
        sys_vendor: sys_vendor.map(str::to_string),
        product_name: product.map(str::to_string),
        chassis_asset_tag: asset.map(str::to_string),
        board_vendor: None,
    }
}

const AZURE_TAG: &str = "7783-7084-3265-9085-8269-3286-77";
const EFA1: (u16, u16) = (0x1d0f, 0xefa1);
const CX7: (u16, u16) = (0x15b3, 0x1021);
const IB_VF: (u16, u16) = (0x15b3, 0x101e);
const GVNIC: (u16, u16) = (0x1ae0, 0x0042);

fn p5(product: Option<&str>) -> Machine {
    let gpu_bus = [0x53u8, 0x64, 0x75, 0x86, 0x97, 0xa8, 0xb9, 0xca];
    let gpus: Vec<(String, u16, u32)> = gpu_bus
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("0000:{b:02x}:00.0"), 0x2330, (i / 4) as u32))
        .collect();
    let nic_bus: Vec<u8> = gpu_bus
        .iter()
        .flat_map(|b| (0..4).map(move |k| b - 4 + k))
        .collect();
    let names: Vec<(String, String)> = nic_bus
        .iter()
        .map(|b| (format!("0000:{b:02x}:00.0"), format!("rdmap{b}s0")))
        .collect();
    let nics: Vec<NicSpec> = names
        .iter()
        .enumerate()
        .map(|(i, (p, r))| nic(p, EFA1, NicKind::Efa, Some(r), None, (i / 16) as u32))
        .collect();
    let gpus: Vec<(&str, u16, u32)> = gpus.iter().map(|(a, d, n)| (a.as_str(), *d, *n)).collect();
    machine(
        dmi(Some("Amazon EC2"), product, None),
        &["0-47,96-143", "48-95,144-191"],
        &gpus,
        &nics,
    )
}

fn ndv5() -> Machine {
    // azhpc-images topology/ndv5-topo.xml bus ids; H100 v5.
    let gpus = [
        ("0001:00:00.0", 0x2330, 0),
        ("0002:00:00.0", 0x2330, 0),
        ("0003:00:00.0", 0x2330, 0),
        ("0008:00:00.0", 0x2330, 0),
        ("0009:00:00.0", 0x2330, 1),
        ("000a:00:00.0", 0x2330, 1),
        ("000b:00:00.0", 0x2330, 1),
        ("000c:00:00.0", 0x2330, 1),
    ];
    let ib: Vec<(String, String)> = (1..=8)
        .map(|i| {
            (
                format!("{:04x}:00:00.0", 0x100 + i),
                format!("mlx5_ib{}", i - 1),
            )
        })
        .collect();
    let mut nics: Vec<NicSpec> = ib
        .iter()
        .enumerate()
        .map(|(i, (p, r))| nic(p, IB_VF, NicKind::Infiniband, Some(r), None, (i / 4) as u32))
        .collect();
    // The accelerated-networking VF: RDMA capable, Ethernet link layer, not the fabric.
    nics.push(nic(
        "c05b:00:02.0",
        (0x15b3, 0x101a),
        NicKind::Roce,
        Some("mlx5_an0"),
        Some("eth0"),
        0,
    ));
    machine(
        dmi(
            Some("Microsoft Corporation"),
            Some("Virtual Machine"),
            Some(AZURE_TAG),
        ),
        &["0-47", "48-95"],
        &gpus,
        &nics,
    )
}

fn a3_high() -> Machine {
    // derived catalog: gVNIC 06/0c/86/8c carry TCPX, enp0s12 on bus 00 is the host NIC.
    let gpus = [
        ("0000:04:00.0", 0x2330, 0),
        ("0000:05:00.0", 0x2330, 0),
        ("0000:0a:00.0", 0x2330, 0),
        ("0000:0b:00.0", 0x2330, 0),
        ("0000:84:00.0", 0x2330, 1),
        ("0000:85:00.0", 0x2330, 1),
        ("0000:8a:00.0", 0x2330, 1),
        ("0000:8b:00.0", 0x2330, 1),
    ];
    let nics = [
        nic(
            "0000:00:0c.0",
            GVNIC,
            NicKind::Gvnic,
            None,
            Some("enp0s12"),
            0,
        ),
        nic(
            "0000:06:00.0",
            GVNIC,
            NicKind::Gvnic,
            None,
            Some("enp6s0"),
            0,
        ),
        nic(
            "0000:0c:00.0",
            GVNIC,
            NicKind::Gvnic,
            None,
            Some("enp12s0"),
            0,
        ),
        nic(
            "0000:86:00.0",
            GVNIC,
            NicKind::Gvnic,
            None,
            Some("enp134s0"),
            1,
        ),
        nic(
            "0000:8c:00.0",
            GVNIC,
            NicKind::Gvnic,
            None,
            Some("enp140s0"),
            1,
        ),
    ];
    machine(
        dmi(Some("Google"), Some("Google Compute Engine"), None),
        &["0-51,104-155", "52-103,156-207"],
        &gpus,
        &nics,
    )
}

fn a3_mega() -> Machine {
    let gpus: Vec<(String, u16, u32)> = (0..8)
        .map(|i| {
            (
                format!(
                    "0000:{:02x}:00.0",
                    [4, 5, 0xa, 0xb, 0x84, 0x85, 0x8a, 0x8b][i]
                ),
                0x2330,
                (i / 4) as u32,
            )
        })
        .collect();
    let gpus: Vec<(&str, u16, u32)> = gpus.iter().map(|(a, d, n)| (a.as_str(), *d, *n)).collect();
    let buses = [0x06u8, 0x07, 0x0d, 0x0e, 0x86, 0x87, 0x8d, 0x8e];
    let names: Vec<(String, String)> = buses
        .iter()
        .map(|b| (format!("0000:{b:02x}:00.0"), format!("enp{b}s0")))
        .collect();
    let mut nics: Vec<NicSpec> = vec![nic(
        "0000:00:0c.0",
        GVNIC,
        NicKind::Gvnic,
        None,
        Some("enp0s12"),
        0,
    )];
    nics.extend(
        names
            .iter()
            .enumerate()
            .map(|(i, (p, n))| nic(p, GVNIC, NicKind::Gvnic, None, Some(n), (i / 4) as u32)),
    );
    machine(
        dmi(Some("Google"), Some("Google Compute Engine"), None),
        &["0-51", "52-103"],
        &gpus,
        &nics,
    )
}

fn a3_ultra() -> Machine {
    let gpus: Vec<(String, u16, u32)> = [0x8fu8, 0x90, 0x96, 0x97, 0xc4, 0xc5, 0xcb, 0xcc]
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("0000:{b:02x}:00.0"), 0x2335, (i / 4) as u32))
        .collect();
    let gpus: Vec<(&str, u16, u32)> = gpus.iter().map(|(a, d, n)| (a.as_str(), *d, *n)).collect();
    let nic_pci: Vec<(String, String, String)> = [0x91u8, 0x92, 0x98, 0x99, 0xc6, 0xc7, 0xcd, 0xce]
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                format!("0000:{b:02x}:00.0"),
                format!("mlx5_{i}"),
                format!("gpu{i}rdma0"),
            )
        })
        .collect();
    let mut nics: Vec<NicSpec> = vec![
        nic(
            "0000:00:13.0",
            GVNIC,
            NicKind::Gvnic,
            None,
            Some("enp0s19"),
            0,
        ),
        nic(
            "0000:c0:14.0",
            GVNIC,
            NicKind::Gvnic,
            None,
            Some("enp192s20"),
            1,
        ),
    ];
    nics.extend(
        nic_pci
            .iter()
            .enumerate()
            .map(|(i, (p, r, n))| nic(p, CX7, NicKind::Roce, Some(r), Some(n), (i / 4) as u32)),
    );
    machine(
        dmi(Some("Google"), Some("Google Compute Engine"), None),
        &["0-55,112-167", "56-111,168-223"],
        &gpus,
        &nics,
    )
}

fn oci_h100() -> Machine {
    // oci-hpc samples/gpu/H100-topology.xml: 1 GPU + 1 dual-port CX-7 per switch.
    let pairs = [
        ("0000:0f:00.0", "0000:0c:00.0", ["mlx5_0", "mlx5_1"], 0),
        ("0000:2d:00.0", "0000:2a:00.0", ["mlx5_3", "mlx5_4"], 0),
        ("0000:44:00.0", "0000:41:00.0", ["mlx5_5", "mlx5_6"], 0),
        ("0000:5b:00.0", "0000:58:00.0", ["mlx5_7", "mlx5_8"], 0),
        ("0000:89:00.0", "0000:86:00.0", ["mlx5_9", "mlx5_10"], 1),
        ("0000:a8:00.0", "0000:a5:00.0", ["mlx5_12", "mlx5_13"], 1),
        ("0000:c0:00.0", "0000:bd:00.0", ["mlx5_14", "mlx5_15"], 1),
        ("0000:d8:00.0", "0000:d5:00.0", ["mlx5_16", "mlx5_17"], 1),
    ];
    let gpus: Vec<(&str, u16, u32)> = pairs.iter().map(|(g, _, _, n)| (*g, 0x2330, *n)).collect();
    let mut nics: Vec<NicSpec> = Vec::new();
    for (_, pci, names, n) in &pairs {
        for r in names {
            nics.push(nic(pci, CX7, NicKind::Roce, Some(r), None, *n));
        }
    }
    // The host NIC: RDMA capable (RoCE) but eth0, excluded by the profile.
    nics.push(nic(
        "0000:1f:00.0",
        (0x15b3, 0x101d),
        NicKind::Roce,
        Some("mlx5_2"),
        Some("eth0"),
        0,
    ));
    machine(
        dmi(
            Some("Oracle Corporation"),
            Some("BM.GPU.H100.8"),
            Some("OracleCloud.com"),
        ),
        &["0-55,112-167", "56-111,168-223"],
        &gpus,
        &nics,
    )
}

fn node_value<'a>(env: &'a gpu_affinity::fabric::Env, key: &str) -> Option<&'a str> {
    env.node.get(key).map(|v| v.value.as_str())
}

#[test]
fn aws_p4d_exports_provider_and_device_rdma_only() {
    let m = p4d();
    let d = detect(&m);
    assert_eq!(d.vendor, Vendor::Aws);
    assert_eq!(d.instance.as_deref(), Some("p4d.24xlarge"));
    assert_eq!(d.profile, "aws-p4d");
    assert_eq!(d.evidence[0], "DMI sys_vendor = \"Amazon EC2\"");
    let p = Profiles::builtin();
    let env = render_env(p.get(&d.profile).unwrap(), &m, &plan(&m), &no_env, &[]);
    let keys: Vec<&str> = env.node.keys().map(String::as_str).collect();
    assert_eq!(keys, ["FI_EFA_USE_DEVICE_RDMA", "FI_PROVIDER"]);
    assert_eq!(node_value(&env, "FI_PROVIDER"), Some("efa"));
    assert!(env.ranks.iter().all(BTreeMap::is_empty));
}

#[test]
fn aws_p5_family_from_ids_when_product_name_missing() {
    let m = p5(None);
    let d = detect(&m);
    assert_eq!(d.instance.as_deref(), Some("p5.48xlarge"));
    assert_eq!(d.profile, "aws-p5");
    assert!(
        d.evidence
            .iter()
            .any(|e| e.starts_with("8 GPUs 10de:2330 and 32 EFA 1d0f:efa1 -> p5.48xlarge")),
        "{:?}",
        d.evidence
    );
    let d = detect(&p5(Some("p5e.48xlarge")));
    assert_eq!(
        (d.instance.as_deref(), d.profile.as_str()),
        (Some("p5e.48xlarge"), "aws-p5")
    );
    let d = detect(&p5(Some("p6-b200.48xlarge")));
    assert_eq!(d.profile, "aws-p6");
    let d = detect(&p5(Some("p9-x900.48xlarge")));
    assert_eq!(
        d.profile, "aws-efa",
        "unknown AWS family falls back to the generic EFA profile"
    );
}

#[test]
fn no_aws_profile_sets_nccl_proto() {
    for p in Profiles::builtin()
        .iter()
        .filter(|p| p.rules.vendor.as_deref() == Some("aws"))
    {
        assert!(
            p.vars.iter().all(|v| v.key != "NCCL_PROTO"),
            "{} sets NCCL_PROTO",
            p.name
        );
    }
}

#[test]
fn azure_ndv5_ib_list_is_the_ib_devices_and_ucx_per_rank() {
    let m = ndv5();
    let d = detect(&m);
    assert_eq!(d.vendor, Vendor::Azure);
    assert_eq!(d.instance.as_deref(), Some("Standard_ND96isr_H100_v5"));
    assert_eq!(d.profile, "azure-ndv5");
    let p = Profiles::builtin();
    let profile = p.get("azure-ndv5").unwrap();
    assert_eq!(
        profile.topology_file(),
        Some("/opt/microsoft/ndv5-topo.xml")
    );
    let env = render_env(profile, &m, &plan(&m), &no_env, &[]);
    let ib: Vec<String> = (0..8).map(|i| format!("mlx5_ib{i}")).collect();
    assert_eq!(
        node_value(&env, "NCCL_IB_HCA"),
        Some(format!("={}", ib.join(",")).as_str())
    );
    assert_eq!(node_value(&env, "NCCL_IB_PCI_RELAXED_ORDERING"), Some("1"));
    assert_eq!(
        node_value(&env, "NCCL_TOPO_FILE"),
        Some("/opt/microsoft/ndv5-topo.xml")
    );
    assert_eq!(node_value(&env, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    assert_eq!(env.ranks.len(), 8);
    assert_eq!(env.ranks[0]["UCX_NET_DEVICES"].value, "mlx5_ib0:1");
    assert_eq!(env.ranks[7]["UCX_NET_DEVICES"].value, "mlx5_ib4:1");
}

#[test]
fn gcp_families_by_nic_kind_and_count() {
    let cases = [
        (a3_high(), "a3-highgpu-8g", "gcp-a3-high"),
        (a3_mega(), "a3-megagpu-8g", "gcp-a3-mega"),
        (a3_ultra(), "a3-ultragpu-8g", "gcp-a3-ultra"),
    ];
    for (m, instance, profile) in cases {
        let d = detect(&m);
        assert_eq!(d.vendor, Vendor::Gcp);
        assert_eq!(d.instance.as_deref(), Some(instance), "{:?}", d.evidence);
        assert_eq!(d.profile, profile);
    }
}

#[test]
fn gcp_tcpx_nic_lists_come_from_the_model() {
    let m = a3_high();
    let env = render_env(
        Profiles::builtin().get("gcp-a3-high").unwrap(),
        &m,
        &plan(&m),
        &no_env,
        &[],
    );
    assert_eq!(node_value(&env, "NCCL_NET"), Some("GPUDirectTCPX_v7"));
    assert_eq!(
        node_value(&env, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"),
        Some("enp6s0,enp12s0,enp134s0,enp140s0")
    );
    assert_eq!(
        node_value(&env, "NCCL_GPUDIRECTTCPX_CTRL_DEV"),
        Some("enp0s12")
    );
    assert_eq!(node_value(&env, "NCCL_SOCKET_IFNAME"), Some("enp0s12"));
    let m = a3_mega();
    let env = render_env(
        Profiles::builtin().get("gcp-a3-mega").unwrap(),
        &m,
        &plan(&m),
        &no_env,
        &[],
    );
    assert_eq!(
        node_value(&env, "NCCL_FASTRAK_IFNAME"),
        Some("enp6s0,enp7s0,enp13s0,enp14s0,enp134s0,enp135s0,enp141s0,enp142s0")
    );
    let m = a3_ultra();
    let env = render_env(
        Profiles::builtin().get("gcp-a3-ultra").unwrap(),
        &m,
        &plan(&m),
        &no_env,
        &[],
    );
    assert_eq!(node_value(&env, "NCCL_NET"), Some("gIB"));
    assert_eq!(
        node_value(&env, "NCCL_SOCKET_IFNAME"),
        Some("enp0s19,enp192s20")
    );
    assert_eq!(
        node_value(&env, "LD_LIBRARY_PATH"),
        Some("/usr/local/gib/lib64")
    );
}

#[test]
fn oci_h100_hca_is_every_fabric_port_not_the_host_nic() {
    let m = oci_h100();
    let d = detect(&m);
    assert_eq!(d.vendor, Vendor::Oci);
    assert_eq!(d.instance.as_deref(), Some("BM.GPU.H100.8"));
    assert_eq!(d.profile, "oci-h100");
    let env = render_env(
        Profiles::builtin().get("oci-h100").unwrap(),
        &m,
        &plan(&m),
        &no_env,
        &[],
    );
    // The same 16 devices oci-hpc's hand-written h100 nccl.conf lists.
    let hca = node_value(&env, "NCCL_IB_HCA").unwrap();
    let mut got: Vec<&str> = hca.strip_prefix('=').unwrap().split(',').collect();
    got.sort_by_key(|n| n[5..].parse::<u32>().unwrap());
    assert_eq!(
        got.join(","),
        "mlx5_0,mlx5_1,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_9,mlx5_10,mlx5_12,mlx5_13,mlx5_14,mlx5_15,mlx5_16,mlx5_17"
    );
    assert_eq!(node_value(&env, "NCCL_IB_GID_INDEX"), Some("3"));
    assert_eq!(node_value(&env, "NCCL_IB_TC"), Some("41"));
    assert_eq!(node_value(&env, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    // Node-wide values are one map: identical on every rank by construction.
    assert!(env.ranks.iter().all(|r| !r.contains_key("NCCL_IB_HCA")));
}

#[test]
fn hca_list_equals_the_nodes_fabric_devices() {
    let p = Profiles::builtin();
    for m in [p4d(), ndv5(), a3_ultra(), oci_h100()] {
        let d = detect(&m);
        let profile = p.get(&d.profile).unwrap();
        let env = render_env(profile, &m, &plan(&m), &no_env, &[]);
        if let Some(hca) = node_value(&env, "NCCL_IB_HCA") {
            let mut want: Vec<&str> = Vec::new();
            for n in m.fabric_nics() {
                let kinds_ok =
                    profile.fabric.kinds.is_empty() || profile.fabric.kinds.contains(&n.kind);
                let host = n
                    .netdev
                    .as_ref()
                    .is_some_and(|x| profile.fabric.exclude_netdevs.contains(x));
                if let (Some(r), true, false) = (n.rdma.as_deref(), kinds_ok, host) {
                    want.push(r);
                }
            }
            assert_eq!(hca, format!("={}", want.join(",")), "{}", d.profile);
        }
    }
}

#[test]
fn unknown_cloud_gets_a_generic_profile_with_a_reason() {
    let mut m = oci_h100();
    m.dmi = dmi(
        Some("Supermicro"),
        Some("SYS-821GE-TNHR"),
        Some("Default string"),
    );
    let d = detect(&m);
    assert_eq!(d.vendor, Vendor::Unknown);
    assert_eq!(d.instance, None);
    assert_eq!(d.profile, "generic-roce");
    assert!(
        d.evidence[0].contains("matches no known cloud"),
        "{:?}",
        d.evidence
    );
    assert!(
        d.evidence.last().unwrap().contains("generic"),
        "{:?}",
        d.evidence
    );

    let mut m = a3_high();
    m.dmi = Dmi::default();
    let d = detect(&m);
    assert_eq!(
        d.profile, "sockets",
        "gVNICs alone are no fabric off GCP: {:?}",
        d.evidence
    );
    let env = render_env(
        Profiles::builtin().get("sockets").unwrap(),
        &m,
        &plan(&m),
        &no_env,
        &[],
    );
    assert!(env.node.is_empty());
}

/// Per vendor: the user's own value wins; a `force`d key overrides it.
#[test]
fn user_setting_wins_unless_forced_for_every_vendor() {
    let p = Profiles::builtin();
    let cases = [
        (p4d(), "FI_PROVIDER"),
        (ndv5(), "NCCL_IB_HCA"),
        (a3_high(), "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"),
        (oci_h100(), "NCCL_IB_GID_INDEX"),
    ];
    for (m, key) in cases {
        let d = detect(&m);
        let profile = p.get(&d.profile).unwrap();
        let user = |k: &str| (k == key || k == "UCX_NET_DEVICES").then(|| "mine".to_string());
        let env = render_env(profile, &m, &plan(&m), &user, &[]);
        assert_eq!(env.node[key].value, "mine", "{}", d.profile);
        assert_eq!(env.node[key].origin, Origin::UserSet);
        assert!(!env.node[key].to_export());
        for r in &env.ranks {
            if let Some(v) = r.get("UCX_NET_DEVICES") {
                assert_eq!(v.origin, Origin::UserSet);
            }
        }
        let env = render_env(profile, &m, &plan(&m), &user, &[key.to_string()]);
        assert_ne!(env.node[key].value, "mine", "{}", d.profile);
        assert!(
            matches!(&env.node[key].origin, Origin::Profile { forced: true, profile, .. } if *profile == d.profile)
        );
    }
}

#[test]
fn prepend_keeps_the_users_search_path() {
    let m = a3_ultra();
    let user = |k: &str| (k == "LD_LIBRARY_PATH").then(|| "/opt/mine/lib".to_string());
    let env = render_env(
        Profiles::builtin().get("gcp-a3-ultra").unwrap(),
        &m,
        &plan(&m),
        &user,
        &[],
    );
    assert_eq!(
        node_value(&env, "LD_LIBRARY_PATH"),
        Some("/usr/local/gib/lib64:/opt/mine/lib")
    );
    let user = |k: &str| (k == "LD_LIBRARY_PATH").then(|| "/usr/local/gib/lib64:/x".to_string());
    let env = render_env(
        Profiles::builtin().get("gcp-a3-ultra").unwrap(),
        &m,
        &plan(&m),
        &user,
        &[],
    );
    assert_eq!(env.node["LD_LIBRARY_PATH"].origin, Origin::UserSet);
}

#[test]
fn explain_json_shape() {
    let m = ndv5();
    let d = detect(&m);
    let env = render_env(
        Profiles::builtin().get(&d.profile).unwrap(),
        &m,
        &plan(&m),
        &no_env,
        &[],
    );
    let json = serde_json::json!({"vendor": d.vendor, "instance": d.instance, "env": env});
    assert_eq!(json["vendor"], "azure");
    assert_eq!(json["instance"], "Standard_ND96isr_H100_v5");
    assert_eq!(
        json["env"]["node"]["NCCL_IB_PCI_RELAXED_ORDERING"]["value"],
        "1"
    );
    assert_eq!(
        json["env"]["node"]["NCCL_IB_PCI_RELAXED_ORDERING"]["origin"],
        "profile"
    );
    assert_eq!(
        json["env"]["node"]["NCCL_IB_PCI_RELAXED_ORDERING"]["profile"],
        "azure-ndv5"
    );
    assert_eq!(
        json["env"]["ranks"][0]["UCX_NET_DEVICES"]["value"],
        "mlx5_ib0:1"
    );
}

#[test]
fn topology_file_use_refuse_generate() {
    let live = ndv5();
    let path = "/opt/microsoft/ndv5-topo.xml";
    // The vendor file describes the GPUs and IB NICs only (no Ethernet VF).
    let mut vendor = live.clone();
    vendor.nics.retain(|n| n.kind == NicKind::Infiniband);
    vendor.pci.retain(|d| d.addr != addr("c05b:00:02.0"));
    assert_eq!(
        decide(path, Some(&vendor), &live),
        TopoDecision::Use { path: path.into() }
    );

    // Old images: the two NUMA masks swapped.
    let mut swapped = vendor.clone();
    swapped.numa_nodes[0].cpus = CpuSet::parse_list("48-95").unwrap();
    swapped.numa_nodes[1].cpus = CpuSet::parse_list("0-47").unwrap();
    match decide(path, Some(&swapped), &live) {
        TopoDecision::Refuse { reason } => {
            assert!(reason.contains("NUMA CPU masks swapped"), "{reason}")
        }
        other => panic!("{other:?}"),
    }

    // Another machine's file.
    let mut other = vendor.clone();
    other.pci[0].addr = addr("0042:00:00.0");
    other.gpus[0].pci = addr("0042:00:00.0");
    assert!(matches!(
        decide(path, Some(&other), &live),
        TopoDecision::Generate { .. }
    ));
    assert!(matches!(
        decide(path, None, &live),
        TopoDecision::Generate { .. }
    ));

    // The env follows the decision.
    let p = Profiles::builtin();
    let mut env = render_env(
        p.get("azure-ndv5").unwrap(),
        &live,
        &plan(&live),
        &no_env,
        &[],
    );
    env.apply_topology(
        &decide(path, Some(&swapped), &live),
        "/tmp/step/topo.xml",
        &no_env,
        &[],
    );
    assert_eq!(
        node_value(&env, "NCCL_TOPO_FILE"),
        Some("/tmp/step/topo.xml")
    );
    assert!(matches!(
        env.node["NCCL_TOPO_FILE"].origin,
        Origin::Generated { .. }
    ));
    assert!(env.notes.iter().any(|n| n.starts_with("warning:")));
}

#[test]
fn generated_topology_xml_lists_every_gpu_and_fabric_nic_under_its_numa_node() {
    let m = oci_h100();
    let xml = topo_xml::render(&m, &m.fabric_nics());
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let cpus: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("cpu"))
        .collect();
    assert_eq!(cpus.len(), 2);
    for g in &m.gpus {
        let node = doc
            .descendants()
            .find(|n| n.attribute("busid") == Some(g.pci.to_string().as_str()))
            .unwrap_or_else(|| panic!("{} missing", g.pci));
        let cpu = node.ancestors().find(|a| a.has_tag_name("cpu")).unwrap();
        assert_eq!(
            cpu.attribute("numaid").unwrap().parse::<u32>().ok(),
            m.numa_of(g.pci)
        );
        assert_eq!(node.attribute("class"), Some("0x030200"));
    }
    assert_eq!(
        cpus[0].attribute("affinity"),
        Some(m.numa_nodes[0].cpus.to_mask().as_str())
    );
    for n in m.fabric_nics() {
        assert!(
            xml.contains(&format!("busid=\"{}\"", n.pci)),
            "{} missing",
            n.pci
        );
    }
    // A plain Ethernet NIC carries no fabric: left out.
    let mut m2 = a3_ultra();
    m2.nics.retain(|n| n.kind != NicKind::Gvnic);
    m2.pci.push(PciDevice {
        addr: addr("0000:00:05.0"),
        ..m2.pci[0].clone()
    });
    m2.nics.push(Nic {
        pci: addr("0000:00:05.0"),
        kind: NicKind::Ethernet,
        rdma: None,
        netdev: Some("eth9".into()),
        ports: vec![],
    });
    assert!(!topo_xml::render(&m2, &m2.fabric_nics()).contains("0000:00:05.0"));
}

#[test]
fn admin_override_changes_the_rendered_env() {
    let site = "description = \"site OCI\"\n[match]\nvendor = \"oci\"\nfamily = [\"oci-h100\"]\n[[env]]\nkey = \"NCCL_IB_TC\"\nvalue = \"106\"\nsource = \"site network team\"\n";
    let mut files = profiles::embedded();
    files.push((
        "/etc/gpu-affinity/profiles.d/oci-h100.toml".into(),
        site.into(),
    ));
    let p = profiles::load(&files).unwrap();
    let m = oci_h100();
    let d = gpu_affinity::fabric::detect_with(&m, &p);
    assert_eq!(d.profile, "oci-h100");
    let env = render_env(p.get("oci-h100").unwrap(), &m, &plan(&m), &no_env, &[]);
    assert_eq!(env.node.len(), 1);
    assert_eq!(node_value(&env, "NCCL_IB_TC"), Some("106"));
}

/// OCI BM.GPU.H200.8's four host NIC functions (eth0-eth3) are ConnectX-7 like the eight
/// fabric NICs, so the machine's own rule counts them as fabric; the oci-h200 profile
/// leaves them out, and the solver, given the profile's fabric, never binds a rank to
/// one, not even on a degraded node where a GPU lost its own NIC and the host NICs are as
/// near as any fabric NIC on its NUMA node.
#[test]
fn oci_h200_host_nics_are_never_a_ranks_nic() {
    use gpu_affinity::catalog;
    use gpu_affinity::fabric;
    use gpu_affinity::solver::{StepRequest, solve_with_fabric};

    let profiles = Profiles::builtin();
    let host = ["eth0", "eth1", "eth2", "eth3"];
    let is_host = |n: &Nic| n.netdev.as_deref().is_some_and(|d| host.contains(&d));
    let healthy = catalog::machine("BM.GPU.H200.8").unwrap();
    let mut degraded = healthy.clone();
    degraded
        .nics
        .retain(|n| n.netdev.as_deref() != Some("rdma0"));
    for (m, hca) in [
        (
            &healthy,
            "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11",
        ),
        (
            &degraded,
            "=mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11",
        ),
    ] {
        assert_eq!(m.fabric_nics().iter().filter(|n| is_host(n)).count(), 4);
        let nics = fabric::fabric_nics(m, &profiles);
        assert!(!nics.iter().any(|n| is_host(n)));
        let gpus: Vec<PciAddr> = m.gpus_in_slurm_order().iter().map(|g| g.pci).collect();
        for mode in [Mode::Strict, Mode::Prefer] {
            let request = StepRequest {
                tasks: gpus.len() as u32,
                gpus: gpus.clone(),
                cpus: m.cpus(),
                gpus_per_task: None,
                mode,
            };
            let plan = solve_with_fabric(m, &request, &nics);
            for rank in &plan.ranks {
                assert!(!rank.nics.is_empty(), "rank {} has a NIC", rank.rank);
                for r in &rank.nics {
                    let nic = m.nics.iter().find(|n| n.pci == r.pci).unwrap();
                    assert!(!is_host(nic), "rank {} got host NIC {}", rank.rank, r.pci);
                }
            }
            let d = detect(m);
            assert_eq!(d.profile, "oci-h200");
            let env = render_env(profiles.get(&d.profile).unwrap(), m, &plan, &no_env, &[]);
            assert_eq!(node_value(&env, "NCCL_IB_HCA"), Some(hca));
        }
    }
}

/// UCX_NET_DEVICES comes from the profiles alone (the plugin adds nothing): every catalog
/// node whose fabric is InfiniBand or RoCE gets it per rank as the rank's `dev:port`s,
/// and EFA / TCPX nodes, where UCX has no verbs device to use, get none.
#[test]
fn every_rdma_profile_sets_ucx_net_devices_per_rank_and_no_other_does() {
    use gpu_affinity::fabric::template::Scope;
    let builtin = Profiles::builtin();
    let mut checked = 0;
    for name in gpu_affinity::catalog::names() {
        let m = gpu_affinity::catalog::machine(name).unwrap();
        let profile = builtin.get(&detect(&m).profile).unwrap();
        let verbs = m
            .fabric_nics()
            .iter()
            .any(|n| matches!(n.kind, NicKind::Infiniband | NicKind::Roce));
        let ucx: Vec<_> = profile
            .vars
            .iter()
            .filter(|v| v.key == "UCX_NET_DEVICES")
            .collect();
        if verbs {
            assert_eq!(ucx.len(), 1, "{name}: profile {}", profile.name);
            assert_eq!(ucx[0].scope, Scope::Rank, "{name}");
            assert_eq!(ucx[0].value, "{rank_rdma_ports}", "{name}");
            checked += 1;
        } else {
            assert!(ucx.is_empty(), "{name}: profile {} sets it", profile.name);
        }
    }
    assert!(checked >= 4, "{checked} RDMA machines in the catalog");
    for generic in ["generic-ib", "generic-roce"] {
        let p = builtin.get(generic).unwrap();
        assert!(
            p.vars
                .iter()
                .any(|v| v.key == "UCX_NET_DEVICES" && v.value == "{rank_rdma_ports}"),
            "{generic}"
        );
    }
}

/// The generated NCCL topology offers NCCL the profile's fabric, the same NICs ranks get
/// and NCCL_IB_HCA lists: on OCI BM.GPU.H200.8 (here with a site profile that wants a
/// vendor topology file the node lacks, so one is generated) the host NICs eth0-eth3
/// must not appear in it, neither as a PCI device nor as a net.
#[test]
fn the_generated_topology_leaves_out_the_nics_the_profile_leaves_out() {
    use gpu_affinity::fabric::{StepInputs, step_fabric};
    use gpu_affinity::solver::{StepRequest, solve_with_fabric};

    let m = gpu_affinity::catalog::machine("BM.GPU.H200.8").unwrap();
    let mut files = profiles::embedded();
    let (_, h200) = files.iter().find(|(n, _)| n == "oci-h200.toml").unwrap();
    let site = format!(
        "{h200}\n[[env]]\nkey = \"NCCL_TOPO_FILE\"\nvalue = \"/etc/site/h200-topo.xml\"\nsource = \"site\"\ntopology_check = true\n"
    );
    files.push(("/etc/gpu-affinity/profiles.d/oci-h200.toml".into(), site));
    let p = profiles::load(&files).unwrap();
    let nics = gpu_affinity::fabric::fabric_nics(&m, &p);
    let gpus: Vec<PciAddr> = m.gpus_in_slurm_order().iter().map(|g| g.pci).collect();
    let request = StepRequest {
        tasks: gpus.len() as u32,
        gpus,
        cpus: m.cpus(),
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let plan = solve_with_fabric(&m, &request, &nics);
    let inputs = StepInputs {
        profiles: &p,
        existing: &no_env,
        forced: &[],
        vendor_topology: &|_| None,
        generated_topology_path: "/run/gpu-affinity/step/nccl-topo.xml",
    };
    let fabric = step_fabric(&m, &plan, &inputs);
    let xml = fabric.generated_topology.expect("a generated topology");
    let host: Vec<&Nic> = m
        .nics
        .iter()
        .filter(|n| {
            n.netdev
                .as_deref()
                .is_some_and(|d| ["eth0", "eth1", "eth2", "eth3"].contains(&d))
        })
        .collect();
    assert_eq!(host.len(), 4);
    for n in host {
        assert!(!xml.contains(&format!("busid=\"{}\"", n.pci)), "{}", n.pci);
        let rdma = n.rdma.as_deref().unwrap();
        assert!(!xml.contains(&format!("name=\"{rdma}\"")), "{rdma}");
    }
    for n in &nics {
        assert!(xml.contains(&format!("busid=\"{}\"", n.pci)), "{}", n.pci);
    }
}
