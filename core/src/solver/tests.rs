//! Data-driven solver tests: small machines shaped like real ones, one request, the exact
//! plan expected; plus invariants every plan must keep, checked against the model's own
//! tree walks rather than the solver's.

use super::*;

/// The nearness oracle shared with the golden tests.
#[path = "../../tests/common/reference.rs"]
mod reference;
use crate::model::{Gpu, Machine, NicKind, NumaNode, PciDevice, class, vendor};

fn pci(text: &str) -> PciAddr {
    text.parse().expect("test PCI address")
}

fn cpus(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("test cpulist")
}

/// A tiny machine builder: NUMA nodes, SMT cores, bridges, GPUs and NICs.
struct Builder(Machine);

impl Builder {
    fn new() -> Self {
        Builder(Machine::default())
    }

    fn numa(mut self, id: u32, list: &str) -> Self {
        self.0.numa_nodes.push(NumaNode {
            id,
            cpus: cpus(list),
        });
        self
    }

    /// Cores of two hardware threads: CPU i and its sibling i + `threads / 2`.
    fn smt(mut self, threads: u32) -> Self {
        let half = threads / 2;
        self.0.cores = (0..half)
            .map(|i| [i, i + half].into_iter().collect())
            .collect();
        self
    }

    #[allow(clippy::too_many_arguments)]
    fn device(
        mut self,
        addr: &str,
        parent: Option<&str>,
        root: Option<&str>,
        numa: Option<u32>,
        vendor_id: u16,
        device_id: u16,
        class_code: u32,
    ) -> Self {
        self.0.pci.push(PciDevice {
            addr: pci(addr),
            parent: parent.map(pci),
            root: root.map(str::to_string),
            vendor: vendor_id,
            device: device_id,
            class: class_code,
            numa_node: numa,
            link: Default::default(),
        });
        self
    }

    fn bridge(
        self,
        addr: &str,
        parent: Option<&str>,
        root: Option<&str>,
        numa: Option<u32>,
    ) -> Self {
        self.device(addr, parent, root, numa, 0x1000, 0xc030, class::BRIDGE_PCI)
    }

    fn gpu(
        mut self,
        addr: &str,
        parent: Option<&str>,
        root: Option<&str>,
        numa: Option<u32>,
    ) -> Self {
        let minor = self.0.gpus.len() as u32;
        self.0.gpus.push(Gpu {
            pci: pci(addr),
            minor: Some(minor),
            model: Some("H100".into()),
        });
        self.device(
            addr,
            parent,
            root,
            numa,
            vendor::NVIDIA,
            0x2330,
            class::DISPLAY_3D,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn nic(
        mut self,
        addr: &str,
        parent: Option<&str>,
        root: Option<&str>,
        numa: Option<u32>,
        kind: NicKind,
        name: &str,
    ) -> Self {
        let (vendor_id, device_id, class_code, rdma) = match kind {
            NicKind::Efa => (vendor::AMAZON, 0xefa1, class::NETWORK_ETHERNET, true),
            NicKind::Ethernet => (0x8086, 0x1592, class::NETWORK_ETHERNET, false),
            NicKind::Gvnic => (
                vendor::GOOGLE,
                vendor::GVNIC_DEVICE,
                class::NETWORK_ETHERNET,
                false,
            ),
            _ => (vendor::MELLANOX, 0x1021, class::NETWORK_INFINIBAND, true),
        };
        self.0.nics.push(Nic {
            pci: pci(addr),
            kind,
            rdma: rdma.then(|| name.to_string()),
            netdev: (!rdma).then(|| name.to_string()),
            ports: Vec::new(),
        });
        self.device(addr, parent, root, numa, vendor_id, device_id, class_code)
    }

    fn build(mut self) -> Machine {
        self.0.normalize();
        self.0.validate().expect("test machine fits together");
        self.0
    }
}

/// p5.48xlarge-like: 8 PCIe switches, each 1 H100 + 4 EFA behind a root port; GPUs 0-3 on
/// NUMA node 0, 4-7 on node 1; 96 cores with 2 threads each.
fn p5() -> Machine {
    let mut b = Builder::new()
        .numa(0, "0-47,96-143")
        .numa(1, "48-95,144-191")
        .smt(192);
    for (i, base) in [0x45u8, 0x56, 0x67, 0x78, 0x89, 0x9a, 0xab, 0xbc]
        .into_iter()
        .enumerate()
    {
        let numa = Some(if i < 4 { 0 } else { 1 });
        let root = format!("pci0000:{:02x}", base - 1);
        let port = format!("0000:{:02x}:01.0", base - 1);
        let switch = format!("0000:{base:02x}:00.0");
        b = b.bridge(&port, None, Some(&root), numa).bridge(
            &switch,
            Some(&port),
            Some(&root),
            numa,
        );
        for n in 0x0au8..0x0e {
            let bus = base + n;
            b = b.nic(
                &format!("0000:{bus:02x}:00.0"),
                Some(&switch),
                Some(&root),
                numa,
                NicKind::Efa,
                &format!("rdmap{bus}s0"),
            );
        }
        b = b.gpu(
            &format!("0000:{:02x}:00.0", base + 0x0e),
            Some(&switch),
            Some(&root),
            numa,
        );
    }
    b.build()
}

/// p4d.24xlarge-like: four root buses, each with 2 A100 and 1 EFA and no bridge between
/// them (what the Nitro hypervisor shows).
fn p4d() -> Machine {
    let mut b = Builder::new()
        .numa(0, "0-23,48-71")
        .numa(1, "24-47,72-95")
        .smt(96);
    for bus in [0x10u8, 0x20, 0x90, 0xa0] {
        let numa = Some(if bus < 0x80 { 0 } else { 1 });
        let root = format!("pci0000:{bus:02x}");
        b = b
            .nic(
                &format!("0000:{bus:02x}:1b.0"),
                None,
                Some(&root),
                numa,
                NicKind::Efa,
                &format!("rdmap{bus}s27"),
            )
            .gpu(&format!("0000:{bus:02x}:1c.0"), None, Some(&root), numa)
            .gpu(&format!("0000:{bus:02x}:1d.0"), None, Some(&root), numa);
    }
    b.build()
}

/// Two switches: 2 GPUs + 2 NICs on NUMA node 0, 2 GPUs + 4 NICs on node 1. No core list.
fn pairs() -> Machine {
    let mut b = Builder::new()
        .numa(0, "0-15")
        .numa(1, "16-31")
        .bridge("00:01.0", None, Some("pci0000:00"), Some(0))
        .bridge("01:00.0", Some("00:01.0"), Some("pci0000:00"), Some(0))
        .bridge("80:01.0", None, Some("pci0000:80"), Some(1))
        .bridge("81:00.0", Some("80:01.0"), Some("pci0000:80"), Some(1));
    for (addr, sw, numa, root) in [
        ("02:00.0", "01:00.0", 0, "pci0000:00"),
        ("03:00.0", "01:00.0", 0, "pci0000:00"),
        ("82:00.0", "81:00.0", 1, "pci0000:80"),
        ("83:00.0", "81:00.0", 1, "pci0000:80"),
    ] {
        b = b.gpu(addr, Some(sw), Some(root), Some(numa));
    }
    for (i, (addr, sw, numa, root)) in [
        ("04:00.0", "01:00.0", 0, "pci0000:00"),
        ("05:00.0", "01:00.0", 0, "pci0000:00"),
        ("84:00.0", "81:00.0", 1, "pci0000:80"),
        ("85:00.0", "81:00.0", 1, "pci0000:80"),
        ("86:00.0", "81:00.0", 1, "pci0000:80"),
        ("87:00.0", "81:00.0", 1, "pci0000:80"),
    ]
    .into_iter()
    .enumerate()
    {
        b = b.nic(
            addr,
            Some(sw),
            Some(root),
            Some(numa),
            NicKind::Infiniband,
            &format!("mlx5_{i}"),
        );
    }
    b.build()
}

/// Both GPUs on NUMA node 0, the only fabric NIC on node 1.
fn remote_nic() -> Machine {
    Builder::new()
        .numa(0, "0-7")
        .numa(1, "8-15")
        .bridge("00:01.0", None, Some("pci0000:00"), Some(0))
        .bridge("00:02.0", None, Some("pci0000:00"), Some(0))
        .bridge("80:01.0", None, Some("pci0000:80"), Some(1))
        .gpu("01:00.0", Some("00:01.0"), Some("pci0000:00"), Some(0))
        .gpu("02:00.0", Some("00:02.0"), Some("pci0000:00"), Some(0))
        .nic(
            "81:00.0",
            Some("80:01.0"),
            Some("pci0000:80"),
            Some(1),
            NicKind::Infiniband,
            "mlx5_0",
        )
        .build()
}

/// Two GPUs and only a management Ethernet NIC (an NC-series-like VM).
fn no_fabric() -> Machine {
    Builder::new()
        .numa(0, "0-7")
        .bridge("00:01.0", None, Some("pci0000:00"), None)
        .bridge("00:02.0", None, Some("pci0000:00"), None)
        .gpu("01:00.0", Some("00:01.0"), Some("pci0000:00"), None)
        .gpu("02:00.0", Some("00:02.0"), Some("pci0000:00"), None)
        .nic(
            "00:03.0",
            None,
            Some("pci0000:00"),
            None,
            NicKind::Ethernet,
            "eth0",
        )
        .build()
}

/// An NCCL-vendor-file-like machine: placeholder switches, no root complexes, no NUMA node
/// on any device, two NUMA nodes.
fn numa_unknown() -> Machine {
    Builder::new()
        .numa(0, "0-7")
        .numa(1, "8-15")
        .bridge("ffff:ff:01.0", None, None, None)
        .bridge("ffff:ff:02.0", None, None, None)
        .gpu("01:00.0", Some("ffff:ff:01.0"), None, None)
        .nic(
            "02:00.0",
            Some("ffff:ff:01.0"),
            None,
            None,
            NicKind::Infiniband,
            "mlx5_0",
        )
        .gpu("03:00.0", Some("ffff:ff:02.0"), None, None)
        .nic(
            "04:00.0",
            Some("ffff:ff:02.0"),
            None,
            None,
            NicKind::Infiniband,
            "mlx5_1",
        )
        .build()
}

/// 16 GPUs behind a two-level switch tree: per socket a root port, a top switch and four
/// leaf switches, each leaf holding 2 GPUs and 1 NIC.
fn deep16() -> Machine {
    let mut b = Builder::new().numa(0, "0-31").numa(1, "32-63");
    for socket in 0..2u8 {
        let base = socket * 0x80;
        let numa = Some(u32::from(socket));
        let root = format!("pci0000:{base:02x}");
        let port = format!("0000:{base:02x}:01.0");
        let top = format!("0000:{:02x}:00.0", base + 1);
        b = b
            .bridge(&port, None, Some(&root), numa)
            .bridge(&top, Some(&port), Some(&root), numa);
        for leaf in 0..4u8 {
            let leaf_addr = format!("0000:{:02x}:{leaf:02x}.0", base + 2);
            let bus = base + 0x10 * (leaf + 1);
            b = b
                .bridge(&leaf_addr, Some(&top), Some(&root), numa)
                .gpu(
                    &format!("0000:{bus:02x}:00.0"),
                    Some(&leaf_addr),
                    Some(&root),
                    numa,
                )
                .gpu(
                    &format!("0000:{bus:02x}:01.0"),
                    Some(&leaf_addr),
                    Some(&root),
                    numa,
                )
                .nic(
                    &format!("0000:{bus:02x}:02.0"),
                    Some(&leaf_addr),
                    Some(&root),
                    numa,
                    NicKind::Infiniband,
                    &format!("mlx5_{}", socket * 4 + leaf),
                );
        }
    }
    b.build()
}

/// One switch holding a leaf switch (GPU A + NIC 1) and, directly, GPU B and NIC 2: A's
/// nearest is NIC 1 alone, B's are NIC 1 and NIC 2 equally.
fn nested() -> Machine {
    Builder::new()
        .numa(0, "0-7")
        .bridge("00:01.0", None, Some("pci0000:00"), Some(0))
        .bridge("01:00.0", Some("00:01.0"), Some("pci0000:00"), Some(0))
        .bridge("02:00.0", Some("01:00.0"), Some("pci0000:00"), Some(0))
        .gpu("03:00.0", Some("02:00.0"), Some("pci0000:00"), Some(0))
        .nic(
            "04:00.0",
            Some("02:00.0"),
            Some("pci0000:00"),
            Some(0),
            NicKind::Infiniband,
            "mlx5_0",
        )
        .gpu("05:00.0", Some("01:00.0"), Some("pci0000:00"), Some(0))
        .nic(
            "06:00.0",
            Some("01:00.0"),
            Some("pci0000:00"),
            Some(0),
            NicKind::Infiniband,
            "mlx5_1",
        )
        .build()
}

/// Mixed nearness on one NUMA node: three switches each holding 1 GPU + 1 NIC, and one NIC
/// and four GPUs loose (each on its own root complex, no switch), so the loose GPUs are
/// equally near all four NICs while each switch GPU is nearest its own.
fn mixed() -> Machine {
    let mut b = Builder::new().numa(0, "0-15");
    for k in 1..=3u8 {
        let root = format!("pci0000:{k}0");
        let port = format!("0000:{k}0:01.0");
        let switch = format!("0000:{k}1:00.0");
        b = b
            .bridge(&port, None, Some(&root), Some(0))
            .bridge(&switch, Some(&port), Some(&root), Some(0))
            .gpu(
                &format!("0000:{k}2:00.0"),
                Some(&switch),
                Some(&root),
                Some(0),
            )
            .nic(
                &format!("0000:{k}3:00.0"),
                Some(&switch),
                Some(&root),
                Some(0),
                NicKind::Infiniband,
                &format!("mlx5_{k}"),
            );
    }
    b = b.nic(
        "0000:40:00.0",
        None,
        Some("pci0000:40"),
        Some(0),
        NicKind::Infiniband,
        "mlx5_4",
    );
    for bus in ["50", "60", "70", "80"] {
        b = b.gpu(
            &format!("0000:{bus}:00.0"),
            None,
            Some(&format!("pci0000:{bus}")),
            Some(0),
        );
    }
    b.build()
}

/// One expected rank: GPUs, NIC addresses, cpulist, mems.
type Rank = (
    &'static [&'static str],
    &'static [&'static str],
    &'static str,
    &'static [u32],
);

struct Case {
    name: &'static str,
    machine: fn() -> Machine,
    gpus: &'static [&'static str],
    /// None: all of the machine's CPUs.
    cpus: Option<&'static str>,
    tasks: u32,
    per_task: Option<u32>,
    ranks: &'static [Rank],
    problems: &'static [(Option<u32>, ViolationKind)],
}

use ViolationKind::*;

const P5_ALL: &[&str] = &[
    "53:00.0", "64:00.0", "75:00.0", "86:00.0", "97:00.0", "a8:00.0", "b9:00.0", "ca:00.0",
];
const P4D_ALL: &[&str] = &[
    "10:1c.0", "10:1d.0", "20:1c.0", "20:1d.0", "90:1c.0", "90:1d.0", "a0:1c.0", "a0:1d.0",
];
const DEEP_ALL: &[&str] = &[
    "10:00.0", "10:01.0", "20:00.0", "20:01.0", "30:00.0", "30:01.0", "40:00.0", "40:01.0",
    "90:00.0", "90:01.0", "a0:00.0", "a0:01.0", "b0:00.0", "b0:01.0", "c0:00.0", "c0:01.0",
];

const CASES: &[Case] = &[
    Case {
        name: "p5: one rank per GPU gets its switch's four EFAs and a quarter of its NUMA node",
        machine: p5,
        gpus: P5_ALL,
        cpus: None,
        tasks: 8,
        per_task: None,
        ranks: &[
            (
                &["53:00.0"],
                &["4f:00.0", "50:00.0", "51:00.0", "52:00.0"],
                "0-11,96-107",
                &[0],
            ),
            (
                &["64:00.0"],
                &["60:00.0", "61:00.0", "62:00.0", "63:00.0"],
                "12-23,108-119",
                &[0],
            ),
            (
                &["75:00.0"],
                &["71:00.0", "72:00.0", "73:00.0", "74:00.0"],
                "24-35,120-131",
                &[0],
            ),
            (
                &["86:00.0"],
                &["82:00.0", "83:00.0", "84:00.0", "85:00.0"],
                "36-47,132-143",
                &[0],
            ),
            (
                &["97:00.0"],
                &["93:00.0", "94:00.0", "95:00.0", "96:00.0"],
                "48-59,144-155",
                &[1],
            ),
            (
                &["a8:00.0"],
                &["a4:00.0", "a5:00.0", "a6:00.0", "a7:00.0"],
                "60-71,156-167",
                &[1],
            ),
            (
                &["b9:00.0"],
                &["b5:00.0", "b6:00.0", "b7:00.0", "b8:00.0"],
                "72-83,168-179",
                &[1],
            ),
            (
                &["ca:00.0"],
                &["c6:00.0", "c7:00.0", "c8:00.0", "c9:00.0"],
                "84-95,180-191",
                &[1],
            ),
        ],
        problems: &[],
    },
    Case {
        name: "p5: one GPU alone takes all four EFAs and its whole NUMA node",
        machine: p5,
        gpus: &["b9:00.0"],
        cpus: None,
        tasks: 1,
        per_task: None,
        ranks: &[(
            &["b9:00.0"],
            &["b5:00.0", "b6:00.0", "b7:00.0", "b8:00.0"],
            "48-95,144-191",
            &[1],
        )],
        problems: &[],
    },
    Case {
        name: "p5: 8 GPUs over 3 tasks is uneven; a rank spanning sockets gets both halves",
        machine: p5,
        gpus: P5_ALL,
        cpus: None,
        tasks: 3,
        per_task: None,
        ranks: &[
            (
                &["53:00.0", "64:00.0"],
                &[
                    "4f:00.0", "50:00.0", "51:00.0", "52:00.0", "60:00.0", "61:00.0", "62:00.0",
                    "63:00.0",
                ],
                "0-23,96-119",
                &[0],
            ),
            (
                &["75:00.0", "86:00.0", "97:00.0"],
                &[
                    "71:00.0", "72:00.0", "73:00.0", "74:00.0", "82:00.0", "83:00.0", "84:00.0",
                    "85:00.0", "93:00.0", "94:00.0", "95:00.0", "96:00.0",
                ],
                "24-71,120-167",
                &[0, 1],
            ),
            (
                &["a8:00.0", "b9:00.0", "ca:00.0"],
                &[
                    "a4:00.0", "a5:00.0", "a6:00.0", "a7:00.0", "b5:00.0", "b6:00.0", "b7:00.0",
                    "b8:00.0", "c6:00.0", "c7:00.0", "c8:00.0", "c9:00.0",
                ],
                "72-95,168-191",
                &[1],
            ),
        ],
        problems: &[(None, GpusNotDivisible)],
    },
    Case {
        name: "p5: a small allocation is split by whole cores, SMT siblings together",
        machine: p5,
        gpus: &["53:00.0", "64:00.0", "75:00.0", "86:00.0"],
        cpus: Some("0-5,96-101"),
        tasks: 4,
        per_task: None,
        ranks: &[
            (
                &["53:00.0"],
                &["4f:00.0", "50:00.0", "51:00.0", "52:00.0"],
                "0,96",
                &[0],
            ),
            (
                &["64:00.0"],
                &["60:00.0", "61:00.0", "62:00.0", "63:00.0"],
                "1-2,97-98",
                &[0],
            ),
            (
                &["75:00.0"],
                &["71:00.0", "72:00.0", "73:00.0", "74:00.0"],
                "3,99",
                &[0],
            ),
            (
                &["86:00.0"],
                &["82:00.0", "83:00.0", "84:00.0", "85:00.0"],
                "4-5,100-101",
                &[0],
            ),
        ],
        problems: &[],
    },
    Case {
        name: "p5: CPUs only on socket 0 leave the socket-1 GPUs without a local core",
        machine: p5,
        gpus: &["53:00.0", "64:00.0", "97:00.0", "a8:00.0"],
        cpus: Some("0-47,96-143"),
        tasks: 4,
        per_task: None,
        ranks: &[
            (
                &["53:00.0"],
                &["4f:00.0", "50:00.0", "51:00.0", "52:00.0"],
                "0-23,96-119",
                &[0],
            ),
            (
                &["64:00.0"],
                &["60:00.0", "61:00.0", "62:00.0", "63:00.0"],
                "24-47,120-143",
                &[0],
            ),
            (
                &["97:00.0"],
                &["93:00.0", "94:00.0", "95:00.0", "96:00.0"],
                "0-23,96-119",
                &[1],
            ),
            (
                &["a8:00.0"],
                &["a4:00.0", "a5:00.0", "a6:00.0", "a7:00.0"],
                "24-47,120-143",
                &[1],
            ),
        ],
        problems: &[(Some(2), NoLocalCpu), (Some(3), NoLocalCpu)],
    },
    Case {
        name: "p5: explicit gpus-per-task 4",
        machine: p5,
        gpus: P5_ALL,
        cpus: None,
        tasks: 2,
        per_task: Some(4),
        ranks: &[
            (
                &["53:00.0", "64:00.0", "75:00.0", "86:00.0"],
                &[
                    "4f:00.0", "50:00.0", "51:00.0", "52:00.0", "60:00.0", "61:00.0", "62:00.0",
                    "63:00.0", "71:00.0", "72:00.0", "73:00.0", "74:00.0", "82:00.0", "83:00.0",
                    "84:00.0", "85:00.0",
                ],
                "0-47,96-143",
                &[0],
            ),
            (
                &["97:00.0", "a8:00.0", "b9:00.0", "ca:00.0"],
                &[
                    "93:00.0", "94:00.0", "95:00.0", "96:00.0", "a4:00.0", "a5:00.0", "a6:00.0",
                    "a7:00.0", "b5:00.0", "b6:00.0", "b7:00.0", "b8:00.0", "c6:00.0", "c7:00.0",
                    "c8:00.0", "c9:00.0",
                ],
                "48-95,144-191",
                &[1],
            ),
        ],
        problems: &[],
    },
    Case {
        name: "p4d: two GPUs share their root bus's EFA",
        machine: p4d,
        gpus: P4D_ALL,
        cpus: None,
        tasks: 8,
        per_task: None,
        ranks: &[
            (&["10:1c.0"], &["10:1b.0"], "0-5,48-53", &[0]),
            (&["10:1d.0"], &["10:1b.0"], "6-11,54-59", &[0]),
            (&["20:1c.0"], &["20:1b.0"], "12-17,60-65", &[0]),
            (&["20:1d.0"], &["20:1b.0"], "18-23,66-71", &[0]),
            (&["90:1c.0"], &["90:1b.0"], "24-29,72-77", &[1]),
            (&["90:1d.0"], &["90:1b.0"], "30-35,78-83", &[1]),
            (&["a0:1c.0"], &["a0:1b.0"], "36-41,84-89", &[1]),
            (&["a0:1d.0"], &["a0:1b.0"], "42-47,90-95", &[1]),
        ],
        problems: &[],
    },
    Case {
        name: "p4d: a step with one GPU of a pair keeps the EFA to itself; tasks beyond GPUs get none",
        machine: p4d,
        gpus: &["10:1d.0", "90:1c.0"],
        cpus: None,
        tasks: 4,
        per_task: None,
        ranks: &[
            (&["10:1d.0"], &["10:1b.0"], "0-23,48-71", &[0]),
            (&["90:1c.0"], &["90:1b.0"], "24-47,72-95", &[1]),
            (&[], &[], "0-23,48-71", &[]),
            (&[], &[], "24-47,72-95", &[]),
        ],
        problems: &[(Some(2), NoGpu), (Some(3), NoGpu)],
    },
    Case {
        name: "p4d: two GPUs on a root bus, no more tasks than GPUs, leftover CPUs for the GPU-less",
        machine: p4d,
        gpus: &["10:1c.0", "10:1d.0"],
        cpus: None,
        tasks: 4,
        per_task: None,
        ranks: &[
            (&["10:1c.0"], &["10:1b.0"], "0-11,48-59", &[0]),
            (&["10:1d.0"], &["10:1b.0"], "12-23,60-71", &[0]),
            (&[], &[], "24-35,72-83", &[]),
            (&[], &[], "36-47,84-95", &[]),
        ],
        problems: &[(Some(2), NoGpu), (Some(3), NoGpu)],
    },
    Case {
        name: "2 GPUs + 2 NICs -> one each; 2 GPUs + 4 NICs -> two each",
        machine: pairs,
        gpus: &["02:00.0", "03:00.0", "82:00.0", "83:00.0"],
        cpus: None,
        tasks: 4,
        per_task: None,
        ranks: &[
            (&["02:00.0"], &["04:00.0"], "0-7", &[0]),
            (&["03:00.0"], &["05:00.0"], "8-15", &[0]),
            (&["82:00.0"], &["84:00.0", "85:00.0"], "16-23", &[1]),
            (&["83:00.0"], &["86:00.0", "87:00.0"], "24-31", &[1]),
        ],
        problems: &[],
    },
    Case {
        name: "request order decides ranks, PCI order decides the NIC split",
        machine: pairs,
        gpus: &["03:00.0", "02:00.0"],
        cpus: None,
        tasks: 2,
        per_task: None,
        ranks: &[
            (&["03:00.0"], &["05:00.0"], "0-7", &[0]),
            (&["02:00.0"], &["04:00.0"], "8-15", &[0]),
        ],
        problems: &[],
    },
    Case {
        name: "NIC only across the socket: strict refuses, prefer shares it",
        machine: remote_nic,
        gpus: &["01:00.0", "02:00.0"],
        cpus: None,
        tasks: 2,
        per_task: None,
        ranks: &[
            (&["01:00.0"], &["81:00.0"], "0-3", &[0]),
            (&["02:00.0"], &["81:00.0"], "4-7", &[0]),
        ],
        problems: &[(Some(0), NoLocalNic), (Some(1), NoLocalNic)],
    },
    Case {
        name: "no fabric NIC at all",
        machine: no_fabric,
        gpus: &["01:00.0", "02:00.0"],
        cpus: None,
        tasks: 2,
        per_task: None,
        ranks: &[
            (&["01:00.0"], &[], "0-3", &[0]),
            (&["02:00.0"], &[], "4-7", &[0]),
        ],
        problems: &[(Some(0), NoLocalNic), (Some(1), NoLocalNic)],
    },
    Case {
        name: "NUMA unknown on a two-node machine: NICs by switch, CPUs best effort",
        machine: numa_unknown,
        gpus: &["01:00.0", "03:00.0"],
        cpus: None,
        tasks: 2,
        per_task: None,
        ranks: &[
            (&["01:00.0"], &["02:00.0"], "0-7", &[]),
            (&["03:00.0"], &["04:00.0"], "8-15", &[]),
        ],
        problems: &[(Some(0), TopologyUnknown), (Some(1), TopologyUnknown)],
    },
    Case {
        name: "16 GPUs behind a two-level switch tree: each pair shares its leaf switch's NIC",
        machine: deep16,
        gpus: DEEP_ALL,
        cpus: None,
        tasks: 16,
        per_task: None,
        ranks: &[
            (&["10:00.0"], &["10:02.0"], "0-3", &[0]),
            (&["10:01.0"], &["10:02.0"], "4-7", &[0]),
            (&["20:00.0"], &["20:02.0"], "8-11", &[0]),
            (&["20:01.0"], &["20:02.0"], "12-15", &[0]),
            (&["30:00.0"], &["30:02.0"], "16-19", &[0]),
            (&["30:01.0"], &["30:02.0"], "20-23", &[0]),
            (&["40:00.0"], &["40:02.0"], "24-27", &[0]),
            (&["40:01.0"], &["40:02.0"], "28-31", &[0]),
            (&["90:00.0"], &["90:02.0"], "32-35", &[1]),
            (&["90:01.0"], &["90:02.0"], "36-39", &[1]),
            (&["a0:00.0"], &["a0:02.0"], "40-43", &[1]),
            (&["a0:01.0"], &["a0:02.0"], "44-47", &[1]),
            (&["b0:00.0"], &["b0:02.0"], "48-51", &[1]),
            (&["b0:01.0"], &["b0:02.0"], "52-55", &[1]),
            (&["c0:00.0"], &["c0:02.0"], "56-59", &[1]),
            (&["c0:01.0"], &["c0:02.0"], "60-63", &[1]),
        ],
        problems: &[],
    },
    Case {
        name: "a GPU equally near two NICs avoids the one a nearer GPU holds",
        machine: nested,
        gpus: &["03:00.0", "05:00.0"],
        cpus: None,
        tasks: 2,
        per_task: None,
        ranks: &[
            (&["03:00.0"], &["04:00.0"], "0-3", &[0]),
            (&["05:00.0"], &["06:00.0"], "4-7", &[0]),
        ],
        problems: &[],
    },
    Case {
        name: "mixed nearness: the loose GPUs spread over all four NICs by load, not onto the one free NIC",
        machine: mixed,
        gpus: &[
            "12:00.0", "22:00.0", "32:00.0", "50:00.0", "60:00.0", "70:00.0", "80:00.0",
        ],
        cpus: None,
        tasks: 7,
        per_task: None,
        ranks: &[
            (&["12:00.0"], &["13:00.0"], "0-1", &[0]),
            (&["22:00.0"], &["23:00.0"], "2-3", &[0]),
            (&["32:00.0"], &["33:00.0"], "4-5", &[0]),
            (&["50:00.0"], &["13:00.0"], "6-8", &[0]),
            (&["60:00.0"], &["23:00.0"], "9-10", &[0]),
            (&["70:00.0"], &["33:00.0"], "11-12", &[0]),
            (&["80:00.0"], &["40:00.0"], "13-15", &[0]),
        ],
        problems: &[],
    },
    Case {
        name: "mixed nearness: two loose GPUs take the free NIC and the first switch NIC",
        machine: mixed,
        gpus: &["12:00.0", "22:00.0", "32:00.0", "50:00.0", "60:00.0"],
        cpus: None,
        tasks: 5,
        per_task: None,
        ranks: &[
            (&["12:00.0"], &["13:00.0"], "0-2", &[0]),
            (&["22:00.0"], &["23:00.0"], "3-5", &[0]),
            (&["32:00.0"], &["33:00.0"], "6-8", &[0]),
            (&["50:00.0"], &["13:00.0"], "9-11", &[0]),
            (&["60:00.0"], &["40:00.0"], "12-15", &[0]),
        ],
        problems: &[],
    },
    Case {
        name: "mixed nearness: loose GPUs alone take the four NICs one each",
        machine: mixed,
        gpus: &["50:00.0", "60:00.0", "70:00.0", "80:00.0"],
        cpus: None,
        tasks: 4,
        per_task: None,
        ranks: &[
            (&["50:00.0"], &["13:00.0"], "0-3", &[0]),
            (&["60:00.0"], &["23:00.0"], "4-7", &[0]),
            (&["70:00.0"], &["33:00.0"], "8-11", &[0]),
            (&["80:00.0"], &["40:00.0"], "12-15", &[0]),
        ],
        problems: &[],
    },
    Case {
        name: "p5: 3 CPUs for 4 ranks on a NUMA node: two ranks share a CPU, no violation",
        machine: p5,
        gpus: &["53:00.0", "64:00.0", "75:00.0", "86:00.0"],
        cpus: Some("0-2"),
        tasks: 4,
        per_task: None,
        ranks: &[
            (
                &["53:00.0"],
                &["4f:00.0", "50:00.0", "51:00.0", "52:00.0"],
                "0",
                &[0],
            ),
            (
                &["64:00.0"],
                &["60:00.0", "61:00.0", "62:00.0", "63:00.0"],
                "0",
                &[0],
            ),
            (
                &["75:00.0"],
                &["71:00.0", "72:00.0", "73:00.0", "74:00.0"],
                "1",
                &[0],
            ),
            (
                &["86:00.0"],
                &["82:00.0", "83:00.0", "84:00.0", "85:00.0"],
                "2",
                &[0],
            ),
        ],
        problems: &[],
    },
    Case {
        name: "a GPU the machine does not have",
        machine: p5,
        gpus: &["ee:00.0"],
        cpus: None,
        tasks: 1,
        per_task: None,
        ranks: &[(&["ee:00.0"], &[], "0-191", &[])],
        problems: &[(Some(0), TopologyUnknown)],
    },
    Case {
        name: "duplicate GPUs count once",
        machine: p4d,
        gpus: &["10:1c.0", "10:1c.0"],
        cpus: None,
        tasks: 1,
        per_task: None,
        ranks: &[(&["10:1c.0"], &["10:1b.0"], "0-23,48-71", &[0])],
        problems: &[],
    },
    Case {
        name: "no GPUs at all",
        machine: p4d,
        gpus: &[],
        cpus: Some("0-3"),
        tasks: 2,
        per_task: None,
        ranks: &[(&[], &[], "0-1", &[]), (&[], &[], "2-3", &[])],
        problems: &[(Some(0), NoGpu), (Some(1), NoGpu)],
    },
    Case {
        name: "zero tasks plan nothing",
        machine: p4d,
        gpus: P4D_ALL,
        cpus: None,
        tasks: 0,
        per_task: None,
        ranks: &[],
        problems: &[],
    },
    Case {
        name: "gpus-per-task 0 means the default split",
        machine: p4d,
        gpus: &["10:1c.0", "10:1d.0"],
        cpus: None,
        tasks: 1,
        per_task: Some(0),
        ranks: &[(&["10:1c.0", "10:1d.0"], &["10:1b.0"], "0-23,48-71", &[0])],
        problems: &[],
    },
    Case {
        name: "gpus-per-task 3 of 4 GPUs: uneven, the second rank gets one",
        machine: pairs,
        gpus: &["02:00.0", "03:00.0", "82:00.0", "83:00.0"],
        cpus: None,
        tasks: 2,
        per_task: Some(3),
        ranks: &[
            (
                &["02:00.0", "03:00.0", "82:00.0"],
                &["04:00.0", "05:00.0", "84:00.0", "85:00.0"],
                "0-23",
                &[0, 1],
            ),
            (&["83:00.0"], &["86:00.0", "87:00.0"], "24-31", &[1]),
        ],
        problems: &[(None, GpusNotDivisible)],
    },
];

/// A rank as compared: GPUs, NIC addresses, cpulist, mems.
type Flat = (Vec<PciAddr>, Vec<PciAddr>, String, Vec<u32>);

fn request(case: &Case, machine: &Machine, mode: Mode) -> StepRequest {
    StepRequest {
        gpus: case.gpus.iter().map(|g| pci(g)).collect(),
        cpus: case.cpus.map_or_else(|| machine.cpus(), cpus),
        tasks: case.tasks,
        gpus_per_task: case.per_task,
        mode,
    }
}

#[test]
fn cases_give_the_expected_plans() {
    for case in CASES {
        let machine = (case.machine)();
        let strict = solve(&machine, &request(case, &machine, Mode::Strict));
        let prefer = solve(&machine, &request(case, &machine, Mode::Prefer));
        let got: Vec<Flat> = strict
            .ranks
            .iter()
            .map(|r| {
                (
                    r.gpus.clone(),
                    r.nics.iter().map(|n| n.pci).collect(),
                    r.cpus.to_string(),
                    r.mems.clone(),
                )
            })
            .collect();
        let want: Vec<Flat> = case
            .ranks
            .iter()
            .map(|(g, n, c, m)| {
                (
                    g.iter().map(|a| pci(a)).collect(),
                    n.iter().map(|a| pci(a)).collect(),
                    c.to_string(),
                    m.to_vec(),
                )
            })
            .collect();
        assert_eq!(got, want, "{}", case.name);
        for (i, r) in strict.ranks.iter().enumerate() {
            assert_eq!(r.rank, i as u32, "{}", case.name);
        }

        let kinds: Vec<(Option<u32>, ViolationKind)> =
            strict.violations.iter().map(|v| (v.rank, v.kind)).collect();
        assert_eq!(
            kinds, case.problems,
            "{}: strict violations {:#?}",
            case.name, strict.violations
        );
        assert!(strict.warnings.is_empty(), "{}", case.name);
        assert_eq!(strict.refused(), !case.problems.is_empty(), "{}", case.name);

        // Prefer: the same plan, the same problems as warnings, never refused.
        assert_eq!(prefer.ranks, strict.ranks, "{}", case.name);
        // The same problems, word for word; only the advice is worded for the mode.
        let same = |a: &[Violation], b: &[Violation]| {
            a.iter()
                .map(|v| (v.rank, v.kind, &v.problem))
                .eq(b.iter().map(|v| (v.rank, v.kind, &v.problem)))
        };
        assert!(same(&prefer.warnings, &strict.violations), "{}", case.name);
        for w in &prefer.warnings {
            assert!(
                !w.advice.contains("use --gpu-affinity=prefer"),
                "{}: {}",
                case.name,
                w.advice
            );
            assert!(
                w.advice
                    .ends_with("(continuing under --gpu-affinity=prefer)"),
                "{}",
                w.advice
            );
        }
        for v in &strict.violations {
            assert!(!v.advice.contains("continuing"), "{}", v.advice);
        }
        assert!(
            prefer.violations.is_empty() && !prefer.refused(),
            "{}",
            case.name
        );
        assert_eq!(prefer.mode, Mode::Prefer);
        check_invariants(
            &machine,
            &request(case, &machine, Mode::Strict),
            &strict,
            case.name,
        );
    }
}

/// What every plan must keep, whatever the machine and request.
fn check_invariants(machine: &Machine, request: &StepRequest, plan: &Plan, name: &str) {
    let fabric: Vec<PciAddr> = plan.fabric_nics.iter().map(|n| n.pci).collect();
    let mut sorted = fabric.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(fabric, sorted, "{name}: fabric NICs sorted, once each");
    let one_per_gpu = plan.ranks.iter().all(|r| r.gpus.len() <= 1);
    for r in &plan.ranks {
        assert!(
            r.cpus.is_subset(&request.cpus),
            "{name}: rank {} CPUs outside the allocation",
            r.rank
        );
        for gpu in &r.gpus {
            if machine.pci_device(*gpu).is_none() {
                continue;
            }
            // Every NIC of a one-GPU rank is among the GPU's nearest.
            if one_per_gpu && !fabric.is_empty() {
                let best = fabric
                    .iter()
                    .map(|n| reference::nearness_key(machine, *gpu, *n))
                    .min();
                for nic in &r.nics {
                    assert_eq!(
                        Some(reference::nearness_key(machine, *gpu, nic.pci)),
                        best,
                        "{name}: rank {} NIC {}",
                        r.rank,
                        nic.pci
                    );
                }
            }
        }
        // Ranks with local CPUs stay inside their GPUs' NUMA nodes.
        let home = r
            .mems
            .iter()
            .filter_map(|m| machine.numa_node(*m))
            .fold(CpuSet::new(), |a, n| a.union(&n.cpus));
        let local = !plan.violations.iter().any(|v| v.rank == Some(r.rank));
        if local && !r.mems.is_empty() {
            assert!(
                r.cpus.is_subset(&home),
                "{name}: rank {} CPUs {} outside NUMA {:?}",
                r.rank,
                r.cpus,
                r.mems
            );
        }
    }
    // SMT siblings stay in one rank whenever there are enough allocated cores to go round.
    let allocated_cores = machine
        .cores
        .iter()
        .filter(|c| !c.is_disjoint(&request.cpus))
        .count();
    if plan.ranks.len() <= allocated_cores {
        for r in &plan.ranks {
            for core in &machine.cores {
                let part = core.intersection(&r.cpus);
                assert!(
                    part.is_empty() || part == core.intersection(&request.cpus),
                    "{name}: core {core} split"
                );
            }
        }
    }
    // Ranks share no CPU unless one has a violation or their NUMA node has fewer
    // allocated CPUs than ranks whose GPUs sit there.
    let crowded = |r: &RankPlan| {
        r.mems.iter().any(|&numa| {
            let here = plan.ranks.iter().filter(|o| o.mems.contains(&numa)).count();
            let cpus = machine
                .numa_node(numa)
                .map_or(0, |n| n.cpus.intersection(&request.cpus).len());
            cpus < here
        })
    };
    for a in &plan.ranks {
        for b in &plan.ranks {
            let clean = |r: &RankPlan| {
                !r.gpus.is_empty()
                    && !crowded(r)
                    && !plan.violations.iter().any(|v| v.rank == Some(r.rank))
            };
            if a.rank < b.rank && clean(a) && clean(b) {
                assert!(
                    a.cpus.is_disjoint(&b.cpus),
                    "{name}: ranks {} and {} share CPUs",
                    a.rank,
                    b.rank
                );
            }
        }
    }
    // Every CPU two ranks share is said on both.
    for a in &plan.ranks {
        for b in &plan.ranks {
            if a.rank != b.rank && !a.cpus.is_disjoint(&b.cpus) {
                assert!(
                    a.reasons.iter().any(|r| r.contains(" are shared with ")),
                    "{name}: rank {} shares CPUs with rank {} silently: {:?}",
                    a.rank,
                    b.rank,
                    a.reasons
                );
            }
        }
    }
    for v in plan.violations.iter().chain(&plan.warnings) {
        assert!(!v.message.contains('\n'), "{name}: one line: {}", v.message);
        let prefix = match v.rank {
            Some(rank) => format!("rank {rank}: "),
            None => "step: ".to_string(),
        };
        assert_eq!(
            v.message,
            format!("{prefix}{}; {}", v.problem, v.advice),
            "{name}"
        );
        assert!(
            !v.problem.starts_with("rank ") && !v.problem.starts_with("step: "),
            "{name}: {}",
            v.problem
        );
    }
}

#[test]
fn reasons_name_the_shared_switch_root_and_numa_node() {
    let machine = p5();
    let req = StepRequest {
        gpus: vec![pci("53:00.0")],
        cpus: machine.cpus(),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let plan = solve(&machine, &req);
    assert!(
        plan.ranks[0].reasons.contains(
            &"GPU 0000:53:00.0 and NIC 0000:4f:00.0 share switch 0000:45:00.0".to_string()
        )
    );
    assert_eq!(plan.ranks[0].nics[0].name.as_deref(), Some("rdmap79s0"));
    assert_eq!(plan.fabric_nics.len(), 32);

    let machine = p4d();
    let req = StepRequest {
        gpus: vec![pci("10:1c.0")],
        cpus: machine.cpus(),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let plan = solve(&machine, &req);
    assert!(plan.ranks[0].reasons.contains(
        &"GPU 0000:10:1c.0 and NIC 0000:10:1b.0 share root complex pci0000:10".to_string()
    ));

    let machine = remote_nic();
    let req = StepRequest {
        gpus: vec![pci("01:00.0")],
        cpus: machine.cpus(),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Prefer,
    };
    let plan = solve(&machine, &req);
    assert!(plan.ranks[0].reasons.contains(
        &"NIC 0000:81:00.0 is on NUMA node 1, GPU 0000:01:00.0 on NUMA node 0 (crosses the inter-socket link)".to_string()
    ));
    assert_eq!(
        plan.warnings[0].message,
        "rank 0: GPU 0000:01:00.0 has no fabric NIC on its PCIe switch or NUMA node 0 (nearest NIC 0000:81:00.0 is on NUMA node 1, across the inter-socket link); drain this node (continuing under --gpu-affinity=prefer)"
    );

    // Same NUMA node, different root complex.
    let machine = Builder::new()
        .numa(0, "0-3")
        .numa(1, "4-7")
        .gpu("01:00.0", None, Some("pci0000:01"), Some(1))
        .nic(
            "02:00.0",
            None,
            Some("pci0000:02"),
            Some(1),
            NicKind::Roce,
            "mlx5_0",
        )
        .build();
    let req = StepRequest {
        gpus: vec![pci("01:00.0")],
        cpus: machine.cpus(),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let plan = solve(&machine, &req);
    assert_eq!(
        plan.ranks[0].reasons[0],
        "GPU 0000:01:00.0 and NIC 0000:02:00.0 are both on NUMA node 1"
    );
    assert!(!plan.refused());
}

#[test]
fn a_nic_of_unknown_numa_under_the_gpus_switch_counts_as_local() {
    let machine = Builder::new()
        .numa(0, "0-3")
        .numa(1, "4-7")
        .bridge("00:01.0", None, Some("pci0000:00"), None)
        .gpu("01:00.0", Some("00:01.0"), Some("pci0000:00"), Some(0))
        .nic(
            "02:00.0",
            Some("00:01.0"),
            Some("pci0000:00"),
            None,
            NicKind::Infiniband,
            "mlx5_0",
        )
        .build();
    let req = StepRequest {
        gpus: vec![pci("01:00.0")],
        cpus: machine.cpus(),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let plan = solve(&machine, &req);
    assert!(plan.violations.is_empty(), "{:?}", plan.violations);
    assert_eq!(plan.ranks[0].cpus.to_string(), "0-3");
}

#[test]
fn gvnic_is_fabric_only_without_rdma_and_never_the_host_nic() {
    let machine = Builder::new()
        .numa(0, "0-7")
        .bridge("00:01.0", None, Some("pci0000:00"), Some(0))
        .gpu("01:00.0", Some("00:01.0"), Some("pci0000:00"), Some(0))
        .nic(
            "02:00.0",
            Some("00:01.0"),
            Some("pci0000:00"),
            Some(0),
            NicKind::Gvnic,
            "eth1",
        )
        .nic(
            "00:0c.0",
            None,
            Some("pci0000:00"),
            Some(0),
            NicKind::Gvnic,
            "enp0s12",
        )
        .build();
    let req = StepRequest {
        gpus: vec![pci("01:00.0")],
        cpus: machine.cpus(),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let plan = solve(&machine, &req);
    assert_eq!(
        plan.fabric_nics,
        vec![NicRef {
            pci: pci("02:00.0"),
            name: Some("eth1".into())
        }]
    );
    assert_eq!(plan.ranks[0].nics, plan.fabric_nics);
}

#[test]
fn numa_node_without_cpu_list_is_topology_unknown() {
    let machine = Builder::new()
        .numa(0, "")
        .numa(1, "")
        .gpu("01:00.0", None, Some("pci0000:01"), Some(1))
        .nic(
            "02:00.0",
            None,
            Some("pci0000:01"),
            Some(1),
            NicKind::Infiniband,
            "mlx5_0",
        )
        .build();
    let req = StepRequest {
        gpus: vec![pci("01:00.0")],
        cpus: cpus("0-7"),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Prefer,
    };
    let plan = solve(&machine, &req);
    let kinds: Vec<ViolationKind> = plan.warnings.iter().map(|v| v.kind).collect();
    assert_eq!(kinds, [TopologyUnknown]);
    assert_eq!(plan.ranks[0].cpus.to_string(), "0-7");
    assert_eq!(plan.ranks[0].mems, [1]);
}

#[test]
fn hostile_requests_do_not_panic() {
    let machines = [
        p5(),
        p4d(),
        pairs(),
        remote_nic(),
        no_fabric(),
        numa_unknown(),
        deep16(),
        nested(),
        Machine::default(),
    ];
    let gpu_lists: [Vec<PciAddr>; 4] = [
        vec![],
        vec![pci("53:00.0"); 5],
        vec![pci("ffff:ff:1f.7"), pci("0000:00:00.0")],
        (0..40u8).map(|b| PciAddr::new(0, b, 0, 0)).collect(),
    ];
    for machine in &machines {
        for gpus in &gpu_lists {
            for tasks in [0, 1, 3, 1000] {
                for per_task in [None, Some(0), Some(1), Some(7), Some(u32::MAX)] {
                    for alloc in ["", "0", "0-300"] {
                        let req = StepRequest {
                            gpus: gpus.clone(),
                            cpus: cpus(alloc),
                            tasks,
                            gpus_per_task: per_task,
                            mode: Mode::Prefer,
                        };
                        let plan = solve(machine, &req);
                        assert!(plan.ranks.len() <= ranks::MAX_TASKS as usize);
                        assert!(plan.violations.is_empty());
                    }
                }
            }
        }
    }
    let req = StepRequest {
        gpus: vec![],
        cpus: cpus("0-3"),
        tasks: u32::MAX,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let plan = solve(&p4d(), &req);
    assert_eq!(plan.ranks.len(), ranks::MAX_TASKS as usize);
    assert!(plan.refused());
    assert_eq!(plan.violations[0].rank, None);
    assert_eq!(plan.violations[0].kind, TooManyTasks);
    assert_eq!(
        plan.violations[0].message,
        "step: 4294967295 local tasks are more than the 65536 one node can plan (only the first 65536 ranks are planned); request at most 65536 tasks per node"
    );
    let shared = &plan.ranks[0].reasons;
    assert!(
        shared.contains(&"CPUs 0 are shared with ranks 1, 2, 3 and others".to_string()),
        "{shared:?}"
    );
}

#[test]
fn shared_cpus_are_said_in_the_reasons() {
    // Ranks beyond the GPUs take the whole allocation: both sides say so.
    let case = CASES
        .iter()
        .find(|c| c.name.starts_with("p4d: a step with one GPU of a pair"))
        .expect("case");
    let machine = p4d();
    let plan = solve(&machine, &request(case, &machine, Mode::Strict));
    assert!(
        plan.ranks[0]
            .reasons
            .contains(&"CPUs 0-23,48-71 are shared with rank 2".to_string()),
        "{:?}",
        plan.ranks[0].reasons
    );
    assert!(
        plan.ranks[2].reasons.contains(
            &"CPUs 0-23,48-71: this rank has no GPU; no CPU of the allocation is left over, so it takes a share of the whole allocation".to_string()
        ),
        "{:?}",
        plan.ranks[2].reasons
    );
    assert!(
        plan.ranks[2]
            .reasons
            .contains(&"CPUs 0-23,48-71 are shared with rank 0".to_string())
    );

    // Fewer CPUs than ranks on a NUMA node: the ranks share single CPUs, named in the
    // reasons; each still has an allocated CPU on its GPU's NUMA node, so no violation.
    let machine = p5();
    let req = StepRequest {
        gpus: ["53:00.0", "64:00.0", "75:00.0", "86:00.0"]
            .map(pci)
            .to_vec(),
        cpus: cpus("0-2"),
        tasks: 4,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let plan = solve(&machine, &req);
    assert!(
        plan.ranks[1]
            .reasons
            .contains(&"CPUs 0 are shared with rank 0".to_string())
    );
    assert!(plan.violations.is_empty(), "{:?}", plan.violations);
    assert!(
        plan.ranks[2]
            .reasons
            .iter()
            .all(|r| !r.contains("shared with"))
    );
}

#[test]
fn advice_is_worded_for_the_mode() {
    let machine = remote_nic();
    let mut req = StepRequest {
        gpus: vec![pci("01:00.0")],
        cpus: machine.cpus(),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let strict = solve(&machine, &req);
    req.mode = Mode::Prefer;
    let prefer = solve(&machine, &req);
    let (v, w) = (&strict.violations[0], &prefer.warnings[0]);
    assert_eq!(
        v.problem,
        "GPU 0000:01:00.0 has no fabric NIC on its PCIe switch or NUMA node 0 (nearest NIC 0000:81:00.0 is on NUMA node 1, across the inter-socket link)"
    );
    assert_eq!(w.problem, v.problem);
    assert_eq!(v.advice, "use --gpu-affinity=prefer or drain this node");
    assert_eq!(
        w.advice,
        "drain this node (continuing under --gpu-affinity=prefer)"
    );

    // Not divisible: prefer cannot help, so strict does not offer it.
    let machine = p4d();
    let req = StepRequest {
        gpus: P4D_ALL.iter().map(|g| pci(g)).collect(),
        cpus: machine.cpus(),
        tasks: 3,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let v = &solve(&machine, &req).violations[0];
    assert_eq!(
        (v.rank, v.kind, v.problem.as_str(), v.advice.as_str()),
        (
            None,
            GpusNotDivisible,
            "8 GPUs cannot be split evenly among 3 tasks",
            "use a task count that divides 8 or set --gpus-per-task"
        )
    );
}

#[test]
fn plan_json_keeps_the_field_names() {
    let machine = p5();
    let req = StepRequest {
        gpus: vec![pci("53:00.0")],
        cpus: cpus("0-47"),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let json = serde_json::to_value(solve(&machine, &req)).expect("serialises");
    assert_eq!(json["ranks"][0]["rank"], 0);
    assert_eq!(json["ranks"][0]["gpus"][0], "0000:53:00.0");
    assert_eq!(json["ranks"][0]["nics"][0]["pci"], "0000:4f:00.0");
    assert_eq!(json["ranks"][0]["nics"][0]["name"], "rdmap79s0");
    assert_eq!(json["ranks"][0]["cpus"], "0-47");
    assert_eq!(json["ranks"][0]["mems"][0], 0);
    assert_eq!(json["mode"], "strict");

    let machine = no_fabric();
    let req = StepRequest {
        gpus: vec![pci("01:00.0")],
        cpus: cpus("0-7"),
        tasks: 1,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    let json = serde_json::to_value(solve(&machine, &req)).expect("serialises");
    assert_eq!(json["violations"][0]["rank"], 0);
    assert_eq!(json["violations"][0]["kind"], "no_local_nic");
    assert_eq!(
        json["violations"][0]["message"],
        "rank 0: GPU 0000:01:00.0 has no fabric NIC on its PCIe switch or NUMA node (this node has no fabric NIC); use --gpu-affinity=prefer or drain this node"
    );
}

/// `n` p5-like switches spread over PCI domains: n GPUs, 4n EFAs, 2 NUMA nodes.
fn wide(n: u32) -> Machine {
    let mut b = Builder::new()
        .numa(0, "0-47,96-143")
        .numa(1, "48-95,144-191")
        .smt(192);
    for i in 0..n {
        let numa = Some(u32::from(i >= n / 2));
        let root = format!("pci{i:04x}:00");
        let switch = format!("{i:04x}:01:00.0");
        b = b
            .bridge(&format!("{i:04x}:00:01.0"), None, Some(&root), numa)
            .bridge(
                &switch,
                Some(&format!("{i:04x}:00:01.0")),
                Some(&root),
                numa,
            );
        for k in 0..4u8 {
            b = b.nic(
                &format!("{i:04x}:02:0{k}.0"),
                Some(&switch),
                Some(&root),
                numa,
                NicKind::Efa,
                &format!("rdmap{i}s{k}"),
            );
        }
        b = b.gpu(
            &format!("{i:04x}:03:00.0"),
            Some(&switch),
            Some(&root),
            numa,
        );
    }
    b.build()
}

#[test]
fn sixty_four_gpus_solve_evenly() {
    let machine = wide(64);
    let req = StepRequest {
        gpus: machine.gpus.iter().map(|g| g.pci).collect(),
        cpus: machine.cpus(),
        tasks: 64,
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    // Speed is measured by `gpu-affinity bench`, never asserted here.
    let plan = solve(&machine, &req);
    assert!(!plan.refused(), "{:?}", plan.violations);
    for r in &plan.ranks {
        assert_eq!(r.nics.len(), 4);
        let domain = r.gpus[0].domain;
        assert!(r.nics.iter().all(|n| n.pci.domain == domain));
        assert!(!r.cpus.is_empty());
    }
    check_invariants(&machine, &req, &plan, "wide(64)");
}
