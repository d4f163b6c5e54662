//! Hand-built machines for the sysfs / fixture tests, in the shapes real clouds have.
#![allow(dead_code, clippy::unwrap_used)]

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::{
    Dmi, Gpu, Machine, Nic, NicKind, NumaNode, PciDevice, PciLink, RdmaPort, class,
};

use gpu_affinity_test_support::addr;

pub fn cpus(text: &str) -> CpuSet {
    CpuSet::parse_list(text).unwrap()
}

pub fn dev(
    a: &str,
    parent: Option<&str>,
    root: &str,
    ids: (u16, u16),
    cls: u32,
    numa: Option<u32>,
) -> PciDevice {
    PciDevice {
        addr: addr(a),
        parent: parent.map(addr),
        root: Some(root.to_string()),
        vendor: ids.0,
        device: ids.1,
        class: cls,
        numa_node: numa,
        link: PciLink::default(),
    }
}

pub fn gen5(mut d: PciDevice) -> PciDevice {
    d.link = PciLink {
        current_speed: Some("32.0 GT/s PCIe".into()),
        current_width: Some(16),
        max_speed: Some("32.0 GT/s PCIe".into()),
        max_width: Some(16),
    };
    d
}

pub fn port(layer: &str) -> RdmaPort {
    RdmaPort {
        number: 1,
        state: Some("4: ACTIVE".into()),
        rate: Some("400 Gb/sec (4X NDR)".into()),
        link_layer: Some(layer.into()),
    }
}

pub fn nic(
    a: &str,
    kind: NicKind,
    rdma: Option<&str>,
    netdev: Option<&str>,
    ports: Vec<RdmaPort>,
) -> Nic {
    Nic {
        pci: addr(a),
        kind,
        rdma: rdma.map(Into::into),
        netdev: netdev.map(Into::into),
        ports,
    }
}

pub fn gpu(a: &str, minor: u32) -> Gpu {
    Gpu {
        pci: addr(a),
        minor: Some(minor),
        model: Some("NVIDIA H100 80GB HBM3".into()),
    }
}

/// Hyperthreaded cores {i, i + half} over CPUs 0..2*half.
pub fn smt_cores(half: u32) -> Vec<CpuSet> {
    (0..half)
        .map(|i| [i, i + half].into_iter().collect())
        .collect()
}

pub const BRIDGE: u32 = class::BRIDGE_PCI;
pub const PEX: (u16, u16) = (0x1000, 0xc030);
pub const ROOT_PORT: (u16, u16) = (0x8086, 0x352a);
pub const H100: (u16, u16) = (0x10de, 0x2330);
pub const CX7: (u16, u16) = (0x15b3, 0x1021);

/// Bare metal with PCIe switches: on socket 0 a PEX switch holding a GPU and an IB HCA;
/// on socket 1 a root port holding a GPU and a dual-port RoCE NIC (two functions).
pub fn switch_tree() -> Machine {
    let mut m = Machine {
        dmi: Dmi {
            sys_vendor: Some("Oracle Corporation".into()),
            product_name: Some("BM.GPU.H100.8".into()),
            chassis_asset_tag: Some("OracleCloud.com".into()),
            board_vendor: None,
        },
        numa_nodes: vec![
            NumaNode {
                id: 0,
                cpus: cpus("0-3,8-11"),
            },
            NumaNode {
                id: 1,
                cpus: cpus("4-7,12-15"),
            },
        ],
        cores: smt_cores(8),
        packages: Vec::new(),
        pci: vec![
            gen5(dev(
                "0000:00:01.0",
                None,
                "pci0000:00",
                ROOT_PORT,
                BRIDGE,
                Some(0),
            )),
            gen5(dev(
                "0000:01:00.0",
                Some("0000:00:01.0"),
                "pci0000:00",
                PEX,
                BRIDGE,
                Some(0),
            )),
            gen5(dev(
                "0000:02:00.0",
                Some("0000:01:00.0"),
                "pci0000:00",
                PEX,
                BRIDGE,
                Some(0),
            )),
            gen5(dev(
                "0000:02:01.0",
                Some("0000:01:00.0"),
                "pci0000:00",
                PEX,
                BRIDGE,
                Some(0),
            )),
            gen5(dev(
                "0000:03:00.0",
                Some("0000:02:00.0"),
                "pci0000:00",
                H100,
                class::DISPLAY_3D,
                Some(0),
            )),
            gen5(dev(
                "0000:04:00.0",
                Some("0000:02:01.0"),
                "pci0000:00",
                CX7,
                class::NETWORK_INFINIBAND,
                Some(0),
            )),
            dev(
                "0000:80:01.0",
                None,
                "pci0000:80",
                ROOT_PORT,
                BRIDGE,
                Some(1),
            ),
            dev(
                "0000:81:00.0",
                Some("0000:80:01.0"),
                "pci0000:80",
                H100,
                class::DISPLAY_3D,
                Some(1),
            ),
            dev(
                "0000:80:02.0",
                None,
                "pci0000:80",
                ROOT_PORT,
                BRIDGE,
                Some(1),
            ),
            dev(
                "0000:82:00.0",
                Some("0000:80:02.0"),
                "pci0000:80",
                CX7,
                class::NETWORK_ETHERNET,
                Some(1),
            ),
            dev(
                "0000:82:00.1",
                Some("0000:80:02.0"),
                "pci0000:80",
                CX7,
                class::NETWORK_ETHERNET,
                Some(1),
            ),
        ],
        gpus: vec![gpu("0000:03:00.0", 0), gpu("0000:81:00.0", 1)],
        nics: vec![
            nic(
                "0000:04:00.0",
                NicKind::Infiniband,
                Some("mlx5_0"),
                Some("ib0"),
                vec![port("InfiniBand")],
            ),
            nic(
                "0000:82:00.0",
                NicKind::Roce,
                Some("mlx5_1"),
                Some("eth2"),
                vec![port("Ethernet")],
            ),
            nic(
                "0000:82:00.1",
                NicKind::Roce,
                Some("mlx5_2"),
                Some("eth3"),
                vec![port("Ethernet")],
            ),
        ],
        numa_distances: Vec::new(),
        assumptions: Vec::new(),
    };
    m.normalize();
    m
}

/// A GCP A3-style VM: numa_node -1 everywhere, one NUMA node, gVNICs (the host one on
/// bus 00), a GPU without a driver-reported minor.
pub fn gcp_vm() -> Machine {
    let gvnic = (0x1ae0, 0x0042);
    let mut m = Machine {
        dmi: Dmi {
            sys_vendor: Some("Google".into()),
            product_name: Some("Google Compute Engine".into()),
            ..Dmi::default()
        },
        numa_nodes: vec![NumaNode {
            id: 0,
            cpus: cpus("0-7"),
        }],
        cores: smt_cores(4),
        packages: Vec::new(),
        pci: vec![
            dev(
                "0000:00:04.0",
                None,
                "pci0000:00",
                gvnic,
                class::NETWORK_ETHERNET,
                None,
            ),
            dev(
                "0000:00:05.0",
                None,
                "pci0000:00",
                H100,
                class::DISPLAY_3D,
                None,
            ),
            dev("0000:05:00.0", None, "pci0000:05", ROOT_PORT, BRIDGE, None),
            dev(
                "0000:06:00.0",
                Some("0000:05:00.0"),
                "pci0000:05",
                gvnic,
                class::NETWORK_ETHERNET,
                None,
            ),
        ],
        gpus: vec![Gpu {
            pci: addr("0000:00:05.0"),
            minor: None,
            model: None,
        }],
        nics: vec![
            nic("0000:00:04.0", NicKind::Gvnic, None, Some("enp0s4"), vec![]),
            nic("0000:06:00.0", NicKind::Gvnic, None, Some("enp6s0"), vec![]),
        ],
        numa_distances: Vec::new(),
        assumptions: Vec::new(),
    };
    m.normalize();
    m
}

/// What a vendor NCCL file gives: placeholder switches (ffff:ff:0N.0), no root
/// complexes, no CPU masks, bare NICs without names, a GPU listed with class 0.
pub fn nccl_placeholder() -> Machine {
    let placeholder = (0xffff, 0xffff);
    let mut m = Machine {
        numa_nodes: vec![
            NumaNode {
                id: 0,
                cpus: CpuSet::new(),
            },
            NumaNode {
                id: 1,
                cpus: CpuSet::new(),
            },
        ],
        ..Machine::default()
    };
    for (n, (sw, bus)) in [("ffff:ff:01.0", 0x10u8), ("ffff:ff:02.0", 0x90)]
        .into_iter()
        .enumerate()
    {
        let numa = Some(n as u32);
        let mut bridge = dev(sw, None, "x", placeholder, BRIDGE, numa);
        bridge.root = None;
        m.pci.push(bridge);
        for (slot, cls, ids) in [
            (0x1c, class::DISPLAY_3D, (0x10de, 0x20b0)),
            (0x1d, 0, (0, 0)),
            (0x1b, class::NETWORK_ETHERNET, (0x1d0f, 0xefa0)),
        ] {
            let a = format!("0000:{bus:02x}:{slot:02x}.0");
            let mut d = dev(&a, Some(sw), "x", ids, cls, numa);
            d.root = None;
            m.pci.push(d);
            if slot == 0x1b {
                m.nics.push(nic(&a, NicKind::Efa, None, None, vec![]));
            } else {
                m.gpus.push(Gpu {
                    pci: addr(&a),
                    minor: None,
                    model: None,
                });
            }
        }
    }
    // An InfiniBand NIC known only by its class, as in Azure's vendor files.
    let mut ib = dev(
        "0101:00:00.0",
        Some("ffff:ff:02.0"),
        "x",
        (0x15b3, 0x101e),
        class::NETWORK_INFINIBAND,
        Some(1),
    );
    ib.root = None;
    m.pci.push(ib);
    m.nics
        .push(nic("0101:00:00.0", NicKind::Infiniband, None, None, vec![]));
    m.normalize();
    m
}

pub mod golden;
pub mod hwloc;
pub mod reference;
pub mod step;
