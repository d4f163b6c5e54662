//! Catalog tests: every machine expands, validates, and agrees with the real topology data
//! under ../shared/topologies (the derived instance catalog and the vendors' NCCL files).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::cpuset::CpuSet;
use crate::model::{Machine, NicKind, class};
use crate::pci::PciAddr;
use crate::sources::nccl_xml;
use crate::test_support::{addr, shared_topologies};

fn read_shared(rel: &str) -> String {
    let path = shared_topologies().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn derived() -> Value {
    serde_json::from_str(&read_shared("derived/instance-fabric-catalog.json")).expect("valid JSON")
}

/// The derived catalog's entry for an instance ("A / B" entries cover several names).
fn derived_entry<'a>(dc: &'a Value, name: &str) -> &'a Value {
    find_derived(dc, name).unwrap_or_else(|| panic!("{name} not in the derived catalog"))
}

fn find_derived<'a>(dc: &'a Value, name: &str) -> Option<&'a Value> {
    dc["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .find(|e| {
            e["instance"]
                .as_str()
                .is_some_and(|i| i.split(" / ").any(|n| n == name))
        })
}

/// Catalog machines the JSON compilation does not cover; their facts come from
/// derived/current-gen-instances.md; the two with live data files are checked against them
/// by `grace_machines_agree_with_the_dranet_slices`.
const CURRENT_GEN_ONLY: &[&str] = &[
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
    "Standard_ND128isr_GB300_v6",
    "Standard_ND128isr_NDR_GB200_v6",
    "a4x-highgpu-4g",
    "BM.GPU.B200.8",
    "BM.GPU.GB200-v3.4",
    "BM.GPU.GB300.4",
];

/// Catalog machines the JSON covers, each with its entry.
fn json_covered(dc: &Value) -> Vec<(&'static str, &Value)> {
    names()
        .into_iter()
        .filter(|n| !CURRENT_GEN_ONLY.contains(n))
        .map(|n| (n, derived_entry(dc, n)))
        .collect()
}

/// "10de:2330 (H100) / ..." -> (0x10de, 0x2330) when the text starts with a PCI id.
fn leading_pci_id(text: &str) -> Option<(u16, u16)> {
    let head = text.get(..9)?;
    let (v, d) = head.split_once(':')?;
    Some((
        u16::from_str_radix(v, 16).ok()?,
        u16::from_str_radix(d, 16).ok()?,
    ))
}

/// The fabric NICs nearest a GPU by the PCI tree: most shared bridges, then the same root
/// complex. Empty when the GPU shares nothing with any NIC (Azure VMs).
fn nearest_nics(m: &Machine, gpu: PciAddr) -> BTreeSet<PciAddr> {
    let gpu_up: BTreeSet<PciAddr> = m.ancestors(gpu).into_iter().collect();
    let score = |nic: PciAddr| {
        let shared = m
            .ancestors(nic)
            .iter()
            .filter(|a| gpu_up.contains(a))
            .count();
        let same_root = m.root_of(nic).is_some() && m.root_of(nic) == m.root_of(gpu);
        shared * 2 + usize::from(same_root)
    };
    let fabric: Vec<PciAddr> = m.fabric_nics().iter().map(|n| n.pci).collect();
    let best = fabric.iter().map(|n| score(*n)).max().unwrap_or(0);
    if best == 0 {
        return BTreeSet::new();
    }
    fabric.into_iter().filter(|n| score(*n) == best).collect()
}

fn nic_by_name<'m>(m: &'m Machine, name: &str) -> &'m crate::model::Nic {
    m.nics
        .iter()
        .find(|n| n.rdma.as_deref() == Some(name) || n.netdev.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no NIC named {name}"))
}

fn cpus(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

#[test]
fn every_catalog_machine_expands_and_validates() {
    assert!(names().contains(&DEFAULT_MACHINE));
    assert_eq!(names().len(), 21);
    for name in names() {
        let m = machine(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        m.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut again = m.clone();
        again.normalize();
        assert_eq!(again, m, "{name} is returned normalized");
        assert_eq!(
            machine(name).expect("twice"),
            m,
            "{name}: expansion is deterministic"
        );
        let (entry, parsed) = parse_entry(source(name).expect("embedded")).expect("parse_entry");
        assert_eq!(entry.name, name, "table key and file name agree");
        assert_eq!(parsed, m);
        assert!(
            !entry.vendor.is_empty() && !entry.instance.is_empty(),
            "{name}: header"
        );
        assert!(!entry.description.is_empty() && !entry.description.contains('\n'));
        // 8 GPUs per HGX board, 4 per Grace tray.
        let grace = m.gpus.iter().all(|g| m.attaches_over_c2c(g.pci));
        assert_eq!(m.gpus.len(), if grace { 4 } else { 8 }, "{name}");
        assert!(!m.fabric_nics().is_empty(), "{name}");
        assert!(m.numa_nodes.iter().all(|n| !n.cpus.is_empty()), "{name}");
    }
    let listed: Vec<String> = entries().into_iter().map(|e| e.name).collect();
    assert_eq!(listed, names());
}

#[test]
fn lookup_is_case_insensitive_and_unknown_names_list_the_catalog() {
    assert_eq!(
        machine("P5.48XLARGE").expect("case"),
        machine("p5.48xlarge").expect("exact")
    );
    assert_eq!(
        machine("standard_nd96isr_h100_v5").expect("case"),
        machine("Standard_ND96isr_H100_v5").expect("exact")
    );
    let err = machine("p9.huge").expect_err("unknown");
    let text = err.to_string();
    assert!(text.contains("p9.huge"), "{text}");
    for name in names() {
        assert!(text.contains(name), "{text} lists {name}");
    }
}

/// Every endpoint hangs below a chain of bridges that ends at a root port on its root
/// complex's bus, all in that root complex; GPUs and NICs carry their NUMA node.
#[test]
fn every_endpoint_has_a_sysfs_like_parent_chain() {
    for name in names() {
        let m = machine(name).expect("machine");
        let endpoints = m
            .gpus
            .iter()
            .map(|g| g.pci)
            .chain(m.nics.iter().map(|n| n.pci));
        for ep in endpoints {
            let root = m
                .root_of(ep)
                .unwrap_or_else(|| panic!("{name}: {ep} has no root"));
            let (domain, bus) = root
                .strip_prefix("pci")
                .and_then(|r| r.split_once(':'))
                .map(|(d, b)| {
                    (
                        u32::from_str_radix(d, 16).expect("d"),
                        u8::from_str_radix(b, 16).expect("b"),
                    )
                })
                .expect("root name");
            let chain = m.ancestors(ep);
            let top = chain.last().copied().unwrap_or(ep);
            assert_eq!(
                (top.domain, top.bus),
                (domain, bus),
                "{name}: {ep} tops out on {root}"
            );
            for a in &chain {
                let dev = m.pci_device(*a).expect("in tree");
                assert!(
                    class::is_bridge(dev.class),
                    "{name}: {a} above {ep} is a bridge"
                );
                assert_eq!(dev.root.as_deref(), Some(root), "{name}: {a} in {root}");
            }
            assert!(
                m.pci_device(ep).expect("ep").numa_node.is_some(),
                "{name}: {ep} NUMA"
            );
        }
    }
    // The p5 chain is root port -> switch upstream 45:00.0 -> downstream -> GPU/EFA.
    let p5 = machine("p5.48xlarge").expect("p5");
    for ep in ["0000:53:00.0", "0000:4f:00.0", "0000:52:00.0"] {
        let chain = p5.ancestors(addr(ep));
        assert_eq!(chain.len(), 3, "{ep}: {chain:?}");
        assert_eq!(chain[1], addr("0000:45:00.0"));
        assert_eq!(p5.root_of(addr(ep)), Some("pci0000:44"));
    }
    // Azure: no bridges at all, every device its own domain.
    let ndv5 = machine("Standard_ND96isr_H100_v5").expect("ndv5");
    assert!(
        ndv5.pci
            .iter()
            .all(|d| d.parent.is_none() && !class::is_bridge(d.class))
    );
    assert_eq!(ndv5.root_of(addr("0101:00:00.0")), Some("pci0101:00"));
}

#[test]
fn cores_follow_the_sibling_rule() {
    for name in names() {
        let m = machine(name).expect("machine");
        let all = m.cpus();
        let covered = m.cores.iter().fold(CpuSet::new(), |acc, c| {
            assert!(acc.is_disjoint(c), "{name}: cores overlap");
            acc.union(c)
        });
        assert_eq!(covered, all, "{name}: every CPU in one core");
        for core in &m.cores {
            let node = m.numa_nodes.iter().find(|n| core.is_subset(&n.cpus));
            assert!(node.is_some(), "{name}: core {core} inside one NUMA node");
        }
    }
    let p5 = machine("p5.48xlarge").expect("p5");
    assert_eq!(p5.cores.len(), 96);
    assert!(p5.cores.contains(&cpus("0,96")) && p5.cores.contains(&cpus("47,143")));
    let ndv5 = machine("Standard_ND96isr_H100_v5").expect("ndv5");
    assert_eq!(ndv5.cores.len(), 96);
    assert!(ndv5.cores.iter().all(|c| c.len() == 1));
}

/// Counts, PCI ids, DMI, NUMA count and CPU count against the derived catalog. The fabric
/// is the one a step uses: the machine's rule narrowed by the vendor profile (on OCI
/// BM.GPU.H200.8 the host NICs are ConnectX-7 too and only the profile leaves them out).
#[test]
fn catalog_agrees_with_derived_counts_ids_and_dmi() {
    let dc = derived();
    let profiles = crate::fabric::profiles::Profiles::builtin();
    for (name, e) in json_covered(&dc) {
        let m = machine(name).expect("machine");
        assert_eq!(
            e["gpu"]["count"].as_u64(),
            Some(m.gpus.len() as u64),
            "{name} GPUs"
        );
        if let Some((v, d)) = e["gpu"]["pci_id"].as_str().and_then(leading_pci_id) {
            for g in &m.gpus {
                let dev = m.pci_device(g.pci).expect("gpu");
                assert_eq!((dev.vendor, dev.device), (v, d), "{name} GPU {}", g.pci);
            }
        }
        let nic = &e["fabric_nic"];
        let count = nic["count"]
            .as_u64()
            .or(nic["count_pci"].as_u64())
            .expect("nic count");
        let fabric = crate::fabric::fabric_nics(&m, &profiles);
        let functions: BTreeSet<(u32, u8, u8)> = fabric
            .iter()
            .map(|n| (n.pci.domain, n.pci.bus, n.pci.device))
            .collect();
        assert_eq!(functions.len() as u64, count, "{name}: fabric NIC devices");
        if let Some(ports) = nic["ports"].as_u64() {
            assert_eq!(
                fabric.len() as u64,
                ports,
                "{name}: fabric NIC ports (PCI functions)"
            );
        }
        if let Some((v, d)) = nic["pci_id"].as_str().and_then(leading_pci_id) {
            for n in &fabric {
                let dev = m.pci_device(n.pci).expect("nic");
                assert_eq!((dev.vendor, dev.device), (v, d), "{name} NIC {}", n.pci);
            }
        }
        // The vendor's own HCA list: the fabric's RDMA names, in PCI order, exactly.
        if let Some(hca) = nic["nccl_ib_hca"].as_str() {
            let names: Vec<&str> = fabric.iter().filter_map(|n| n.rdma.as_deref()).collect();
            assert_eq!(format!("={}", names.join(",")), hca, "{name}: NCCL_IB_HCA");
        }
        // p5e: the JSON assumed the p5 layout (2 nodes, "medium"); the vendor-scraped EFA
        // table in current-gen-instances.md 1.1 shows 4, which the catalog follows.
        if let Some(n) = e["numa_nodes"].as_u64().filter(|_| name != "p5e.48xlarge") {
            assert_eq!(m.numa_nodes.len() as u64, n, "{name} NUMA nodes");
        }
        // "192 logical CPUs", "96 vCPUs; ...", "224 vCPUs, 112 per NUMA node"
        if let Some(text) = e["cpu"].as_str() {
            let count = text
                .split([',', ';'])
                .find_map(|part| {
                    let words: Vec<&str> = part.split_whitespace().collect();
                    words.windows(2).find_map(|w| match w[1] {
                        "logical" | "vCPUs" => w[0].parse::<usize>().ok(),
                        _ => None,
                    })
                })
                .expect("CPU count in text");
            assert_eq!(m.cpus().len(), count, "{name} CPUs");
        }
        let dmi = e["dmi"].as_object().expect("dmi");
        for (key, want) in dmi {
            let have = match key.as_str() {
                "sys_vendor" => m.dmi.sys_vendor.as_deref(),
                "product_name" => m.dmi.product_name.as_deref(),
                "chassis_asset_tag" => m.dmi.chassis_asset_tag.as_deref(),
                "board_vendor" => m.dmi.board_vendor.as_deref(),
                other => panic!("unexpected DMI key {other}"),
            };
            assert_eq!(have, want.as_str(), "{name} dmi.{key}");
        }
    }
}

/// GPU/NIC bus ids, NUMA nodes, root complexes and pairings per instance shape.
#[test]
fn catalog_agrees_with_derived_groups_and_pairs() {
    let dc = derived();
    let mut checked = BTreeSet::new();
    for (name, e) in json_covered(&dc) {
        let m = machine(name).expect("machine");
        if let Some(groups) = e["groups"].as_array() {
            let mut gpus_seen = BTreeSet::new();
            for g in groups {
                let numa = g["numa"].as_u64().map(|n| n as u32);
                let mut nic_addrs = BTreeSet::new();
                for nic in g["nics"].as_array().expect("nics") {
                    let (pci, rdma) = match nic {
                        Value::String(s) => (addr(s), None),
                        obj => (
                            addr(obj["pci"].as_str().expect("pci")),
                            obj["rdma"].as_str(),
                        ),
                    };
                    let have = m.nics.iter().find(|n| n.pci == pci).expect("NIC in model");
                    if let Some(r) = rdma {
                        assert_eq!(have.rdma.as_deref(), Some(r), "{name} {pci}");
                    }
                    assert_eq!(m.numa_of(pci), numa, "{name} NIC {pci} NUMA");
                    nic_addrs.insert(pci);
                }
                for gpu in g["gpus"].as_array().expect("gpus") {
                    let gpu = addr(gpu.as_str().expect("gpu"));
                    assert!(m.gpus.iter().any(|x| x.pci == gpu), "{name} has GPU {gpu}");
                    assert_eq!(m.numa_of(gpu), numa, "{name} GPU {gpu} NUMA");
                    if let Some(root) = g["pcie_root"].as_str() {
                        assert_eq!(m.root_of(gpu), Some(root), "{name} GPU {gpu} root");
                        assert_eq!(
                            nearest_nics(&m, gpu),
                            nic_addrs,
                            "{name} GPU {gpu} nearest NICs"
                        );
                    }
                    gpus_seen.insert(gpu);
                }
            }
            assert_eq!(
                gpus_seen.len(),
                m.gpus.len(),
                "{name}: groups cover every GPU"
            );
            checked.insert(name);
        }
        if let Some(sw) = e["efa_switch_groups"].as_object() {
            let mut all = BTreeSet::new();
            for (key, groups) in sw {
                let numa: u32 = key.trim_start_matches("numa").parse().expect("numaN");
                for group in groups.as_array().expect("groups") {
                    let members: BTreeSet<PciAddr> = group
                        .as_array()
                        .expect("buses")
                        .iter()
                        .map(|b| addr(&format!("0000:{}:00.0", b.as_str().expect("bus"))))
                        .collect();
                    // Exactly these EFAs share one switch upstream port.
                    let upstream = |a: PciAddr| m.ancestors(a).get(1).copied();
                    let first = *members.iter().next().expect("member");
                    let up = upstream(first).expect("behind a switch");
                    let behind: BTreeSet<PciAddr> = m
                        .nics
                        .iter()
                        .map(|n| n.pci)
                        .filter(|a| upstream(*a) == Some(up))
                        .collect();
                    assert_eq!(behind, members, "{name}: EFAs behind switch {up}");
                    for a in &members {
                        assert_eq!(m.numa_of(*a), Some(numa), "{name} {a}");
                        assert_eq!(nic_by_name(&m, &format!("rdmap{}s0", a.bus)).pci, *a);
                    }
                    // One GPU per switch, and its nearest NICs are exactly the group.
                    let gpus: Vec<PciAddr> = m
                        .gpus
                        .iter()
                        .map(|g| g.pci)
                        .filter(|g| upstream(*g) == Some(up))
                        .collect();
                    assert_eq!(gpus.len(), 1, "{name}: one GPU behind {up}");
                    assert_eq!(nearest_nics(&m, gpus[0]), members);
                    all.extend(members);
                }
            }
            assert_eq!(
                all.len(),
                m.fabric_nics().len(),
                "{name}: switch groups cover every EFA"
            );
            checked.insert(name);
        }
        if let Some(pairs) = e["known_gpu_nic_pairs"].as_array() {
            for p in pairs {
                let gpu = addr(p["gpu"].as_str().expect("gpu"));
                let mut want = BTreeSet::new();
                for n in p["nics"].as_array().expect("nics") {
                    let (rdma, pci) = n
                        .as_str()
                        .and_then(|s| s.split_once('@'))
                        .expect("name@pci");
                    assert_eq!(nic_by_name(&m, rdma).pci, addr(pci), "{name} {rdma}");
                    want.insert(addr(pci));
                }
                assert_eq!(nearest_nics(&m, gpu), want, "{name} GPU {gpu}");
                assert_eq!(m.numa_of(gpu), p["numa"].as_u64().map(|n| n as u32));
            }
        }
        if let Some(pairs) = e["pairs"].as_array() {
            for p in pairs {
                let gpus: Vec<PciAddr> = match (&p["gpu"], &p["gpus"]) {
                    (Value::String(g), _) => vec![addr(g)],
                    (_, Value::Array(gs)) => {
                        gs.iter().map(|g| addr(g.as_str().expect("gpu"))).collect()
                    }
                    _ => panic!("{name}: pair without GPU"),
                };
                let nic = addr(p["nic"].as_str().expect("nic"));
                let numa = p["numa"].as_u64().map(|n| n as u32);
                let slot: BTreeSet<PciAddr> = m
                    .nics
                    .iter()
                    .map(|n| n.pci)
                    .filter(|a| (a.domain, a.bus, a.device) == (nic.domain, nic.bus, nic.device))
                    .collect();
                assert!(slot.contains(&nic), "{name}: NIC {nic} in model");
                if let Some(names) = p["rdma"].as_array() {
                    let have: BTreeSet<&str> = m
                        .nics
                        .iter()
                        .filter(|n| slot.contains(&n.pci))
                        .filter_map(|n| n.rdma.as_deref())
                        .collect();
                    let want: BTreeSet<&str> = names.iter().filter_map(Value::as_str).collect();
                    assert_eq!(have, want, "{name}: rdma names of {nic}");
                }
                for gpu in gpus {
                    if numa.is_some() {
                        assert_eq!(m.numa_of(gpu), numa, "{name} GPU {gpu}");
                        assert_eq!(m.numa_of(nic), numa, "{name} NIC {nic}");
                    } else {
                        assert_eq!(m.numa_of(gpu), m.numa_of(nic), "{name} {gpu}/{nic} NUMA");
                    }
                    let near = nearest_nics(&m, gpu);
                    // Azure VMs have no shared bridges: the pair is then a NUMA fact only.
                    if !near.is_empty() {
                        assert_eq!(near, slot, "{name}: GPU {gpu} nearest NICs");
                    }
                }
            }
            checked.insert(name);
        }
        if let Some(pairs) = e["known_pairs"].as_array() {
            for p in pairs {
                let (netdev, pci) = p["nic"]
                    .as_str()
                    .and_then(|s| s.split_once('@'))
                    .expect("name@pci");
                let nic = nic_by_name(&m, netdev);
                assert_eq!(nic.pci, addr(pci), "{name} {netdev}");
                assert_eq!(
                    m.root_of(nic.pci),
                    p["pcie_root"].as_str(),
                    "{name} {netdev} root"
                );
                assert_eq!(m.numa_of(nic.pci), p["numa"].as_u64().map(|n| n as u32));
                if let Some(gpu) = p["gpu"].as_str() {
                    assert!(
                        nearest_nics(&m, addr(gpu)).contains(&nic.pci),
                        "{name} GPU {gpu}"
                    );
                    assert_eq!(m.root_of(addr(gpu)), p["pcie_root"].as_str());
                }
            }
            checked.insert(name);
        }
        if let Some(first) = e["gpu"]["first_gpu"].as_str() {
            assert_eq!(
                m.gpus_in_slurm_order()[0].pci,
                addr(first),
                "{name} first GPU"
            );
        }
        if let Some(ifnames) = e["fabric_nic"]["ifnames_vm"].as_array() {
            let have: BTreeSet<&str> = m
                .fabric_nics()
                .iter()
                .filter_map(|n| n.netdev.as_deref())
                .collect();
            let want: BTreeSet<&str> = ifnames.iter().filter_map(Value::as_str).collect();
            assert_eq!(have, want, "{name} fabric netdevs");
        }
        // "enp0s12 (00:0c.0)": the name, then the address in brackets.
        if let Some(host) = e["fabric_nic"]["host_nic"].as_str() {
            let host = host.split_whitespace().next().unwrap_or(host);
            let nic = nic_by_name(&m, host);
            assert!(
                !m.fabric_nics().iter().any(|f| f.pci == nic.pci),
                "{name}: {host} is not fabric"
            );
        }
        for host in e["fabric_nic"]["host_nics"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let nic = nic_by_name(&m, host.as_str().expect("name"));
            assert_eq!(nic.kind, NicKind::Gvnic);
            assert!(
                !m.fabric_nics().iter().any(|f| f.pci == nic.pci),
                "{name}: host NIC not fabric"
            );
        }
        if let Some(text) = e["fabric_nic"]["ifnames"].as_str() {
            // "gpu0rdma0..gpu7rdma0": the fabric NICs' netdevs, in GPU order.
            let have: BTreeSet<String> = m
                .fabric_nics()
                .iter()
                .filter_map(|n| n.netdev.clone())
                .collect();
            let want: BTreeSet<String> = (0..8).map(|i| format!("gpu{i}rdma0")).collect();
            assert!(text.starts_with("gpu0rdma0"));
            assert_eq!(have, want, "{name} netdevs");
        }
        if let Some(bind) = e["google_cpu_bindings"].as_object() {
            for dir in bind.values() {
                for (netdev, list) in dir.as_object().expect("netdev -> cpus") {
                    let nic = nic_by_name(&m, netdev);
                    let node = m
                        .numa_node(m.numa_of(nic.pci).expect("numa"))
                        .expect("node");
                    assert!(
                        cpus(list.as_str().expect("list")).is_subset(&node.cpus),
                        "{name} {netdev}"
                    );
                }
            }
        }
        if let Some(binds) = e["microsoft_cpu_bind_per_local_rank"].as_array() {
            let order = m.gpus_in_slurm_order();
            for (rank, list) in binds.iter().enumerate() {
                let node = m
                    .numa_node(m.numa_of(order[rank].pci).expect("numa"))
                    .expect("node");
                assert!(
                    cpus(list.as_str().expect("list")).is_subset(&node.cpus),
                    "{name} rank {rank}"
                );
            }
        }
        // No published pairing (the derived catalog says no topology dump exists): the
        // 8 GPUs and the 8 fabric NICs of the vendor's HCA list must still pair one to one
        // on a shared NUMA node.
        let undumped = e["confidence"]
            .as_str()
            .is_some_and(|c| c.contains("no public topology dump"));
        if !checked.contains(name) && undumped {
            let profiles = crate::fabric::profiles::Profiles::builtin();
            let fabric: BTreeSet<PciAddr> = crate::fabric::fabric_nics(&m, &profiles)
                .iter()
                .map(|n| n.pci)
                .collect();
            let mut paired = BTreeSet::new();
            for g in &m.gpus {
                let near = nearest_nics(&m, g.pci);
                assert_eq!(near.len(), 1, "{name}: GPU {} nearest NICs {near:?}", g.pci);
                let nic = *near.first().expect("one");
                assert!(fabric.contains(&nic), "{name}: {nic} is fabric");
                assert_eq!(m.numa_of(nic), m.numa_of(g.pci), "{name}: {nic} NUMA");
                assert!(paired.insert(nic), "{name}: {nic} nearest two GPUs");
            }
            assert_eq!(paired, fabric, "{name}: every fabric NIC has its GPU");
            checked.insert(name);
        }
    }
    // Every machine had at least one pairing shape checked, except those whose JSON entry
    // has counts only: their pairing facts are in current-gen-instances.md (cited in each
    // entry, with the guesses marked SYNTHETIC).
    let counts_only = [
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "a3-megagpu-8g",
        "a4-highgpu-8g",
    ];
    let want: BTreeSet<&str> = json_covered(&dc)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| !counts_only.contains(n))
        .collect();
    assert_eq!(checked, want, "checked {checked:?}");
}

/// What a vendor NCCL topology file says, as `sources::nccl_xml` reads it: NUMA masks,
/// endpoints with their NUMA node and class/ids, real bridges with their parent bridge.
/// Placeholder switches (domain ffff, `ffff:ff:0N.0` and their renumbered repeats) are
/// not compared: the vendors made them up.
#[derive(Default, Debug)]
struct XmlFacts {
    numa: BTreeMap<u32, CpuSet>,
    /// Endpoints by (domain, bus, device): a dual-port NIC is one entry with two nets.
    endpoints: BTreeMap<(u32, u8, u8), XmlEndpoint>,
    bridges: BTreeMap<PciAddr, Option<PciAddr>>,
}

#[derive(Debug)]
struct XmlEndpoint {
    numa: u32,
    class: u32,
    ids: Option<(u16, u16)>,
    nets: BTreeSet<String>,
}

fn xml_facts(rel: &str) -> XmlFacts {
    let text = read_shared(rel);
    let x = nccl_xml::parse(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let placeholder = |a: PciAddr| a.domain == 0xffff;
    let mut facts = XmlFacts {
        numa: x
            .numa_nodes
            .iter()
            .map(|n| (n.id, n.cpus.clone()))
            .collect(),
        ..XmlFacts::default()
    };
    for dev in x.pci.iter().filter(|d| !placeholder(d.addr)) {
        if class::is_bridge(dev.class) {
            facts
                .bridges
                .insert(dev.addr, dev.parent.filter(|p| !placeholder(*p)));
            continue;
        }
        let numa = x
            .numa_of(dev.addr)
            .unwrap_or_else(|| panic!("{rel}: {} outside any NUMA node", dev.addr));
        // The parser marks ids the file leaves out as all-ones.
        let ids = Some((dev.vendor, dev.device))
            .filter(|ids| *ids != (nccl_xml::UNKNOWN_ID, nccl_xml::UNKNOWN_ID));
        let slot = (dev.addr.domain, dev.addr.bus, dev.addr.device);
        let nets = x
            .nics
            .iter()
            .filter(|n| n.pci == dev.addr)
            .filter_map(|n| n.rdma.clone());
        // Functions of one slot (the ports of a dual-port NIC) are one endpoint.
        facts
            .endpoints
            .entry(slot)
            .or_insert_with(|| XmlEndpoint {
                numa,
                class: dev.class,
                ids,
                nets: BTreeSet::new(),
            })
            .nets
            .extend(nets);
    }
    facts
}

fn check_against_xml(name: &str, rel: &str) {
    let m = machine(name).expect("machine");
    let x = xml_facts(rel);
    for (id, mask) in &x.numa {
        assert_eq!(
            &m.numa_node(*id).expect("node").cpus,
            mask,
            "{name}: NUMA {id} CPUs vs {rel}"
        );
    }
    assert_eq!(
        m.numa_nodes.len(),
        x.numa.len(),
        "{name}: NUMA nodes vs {rel}"
    );
    let endpoints: BTreeSet<(u32, u8, u8)> = m
        .gpus
        .iter()
        .map(|g| g.pci)
        .chain(m.fabric_nics().iter().map(|n| n.pci))
        .map(|a| (a.domain, a.bus, a.device))
        .collect();
    assert_eq!(
        endpoints,
        x.endpoints.keys().copied().collect(),
        "{name}: GPUs+NICs vs {rel}"
    );
    for (
        slot,
        XmlEndpoint {
            numa,
            class,
            ids,
            nets,
        },
    ) in &x.endpoints
    {
        let funcs: Vec<&crate::model::PciDevice> = m
            .pci
            .iter()
            .filter(|d| (d.addr.domain, d.addr.bus, d.addr.device) == *slot)
            .collect();
        for dev in &funcs {
            assert_eq!(
                m.numa_of(dev.addr),
                Some(*numa),
                "{name} {} NUMA vs {rel}",
                dev.addr
            );
            assert_eq!(dev.class, *class, "{name} {} class vs {rel}", dev.addr);
            if let Some(ids) = ids {
                assert_eq!(
                    (dev.vendor, dev.device),
                    *ids,
                    "{name} {} ids vs {rel}",
                    dev.addr
                );
            }
        }
        if !nets.is_empty() {
            let have: BTreeSet<String> = m
                .nics
                .iter()
                .filter(|n| funcs.iter().any(|d| d.addr == n.pci))
                .filter_map(|n| n.rdma.clone())
                .collect();
            let (d, b, f) = slot;
            assert_eq!(
                &have, nets,
                "{name}: rdma names at {d:04x}:{b:02x}:{f:02x} vs {rel}"
            );
        }
    }
    for (bridge, parent) in &x.bridges {
        let dev = m
            .pci_device(*bridge)
            .unwrap_or_else(|| panic!("{name}: bridge {bridge} of {rel}"));
        match parent {
            Some(p) => assert_eq!(dev.parent, Some(*p), "{name}: parent of {bridge} vs {rel}"),
            // The dump starts at the switch: above it the model has exactly a root port.
            None => {
                let rp = dev.parent.expect("root port above the switch");
                assert_eq!(m.pci_device(rp).expect("root port").parent, None);
            }
        }
    }
}

#[test]
fn p4d_agrees_with_aws_ofi_nccl_topology() {
    check_against_xml("p4d.24xlarge", "aws-ofi-nccl/p4d-24xl-topo.xml");
}

#[test]
fn nd_h100_v5_agrees_with_azhpc_images_topology() {
    check_against_xml("Standard_ND96isr_H100_v5", "azhpc-images/ndv5-topo.xml");
}

#[test]
fn bm_gpu_h100_8_agrees_with_oci_hpc_topology() {
    check_against_xml("BM.GPU.H100.8", "oci/oci-hpc.H100-topology.xml");
    // The real PEX tree: both switch levels, as the dump shows them.
    let m = machine("BM.GPU.H100.8").expect("oci");
    assert_eq!(
        m.ancestors(addr("0000:0c:00.1"))[..2],
        [addr("0000:0a:00.0"), addr("0000:08:00.0")]
    );
    assert_eq!(
        nearest_nics(&m, addr("0000:0f:00.0")),
        [addr("0000:0c:00.0"), addr("0000:0c:00.1")].into()
    );
}

fn test_machine(file: &str) -> Machine {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/machines")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn two_cpu_test_machines_keep_the_layout_and_fold_the_cpus() {
    for (file, base) in [
        ("nd-h100-v5-2cpu.toml", "Standard_ND96isr_H100_v5"),
        ("bm-gpu-h100-8-2cpu.toml", "BM.GPU.H100.8"),
        ("gb200-v3.4-2cpu.toml", "BM.GPU.GB200-v3.4"),
    ] {
        let small = test_machine(file);
        let big = machine(base).expect("base");
        assert_eq!(small.numa_node(0).expect("0").cpus, cpus("0"), "{file}");
        assert_eq!(small.numa_node(1).expect("1").cpus, cpus("1"), "{file}");
        assert_eq!(small.cores, vec![cpus("0"), cpus("1")], "{file}");
        assert_eq!(
            (&small.pci, &small.gpus, &small.nics, &small.dmi),
            (&big.pci, &big.gpus, &big.nics, &big.dmi)
        );
        for g in &small.gpus {
            assert_eq!(small.numa_of(g.pci), big.numa_of(g.pci), "{file} {}", g.pci);
        }
    }
}

// ---- bad descriptions -------------------------------------------------------------------

const SMALL: &str = r#"
name = "tiny"
[cpu]
threads_per_core = 1
[[numa]]
id = 0
cpus = "0"
[[numa]]
id = 1
cpus = "1"
[gpu]
pci_id = "10de:2330"
[nic_types.ib]
pci_id = "15b3:1021"
rdma = "mlx5_{bus}"
link_layer = "InfiniBand"
[[group]]
numa = 0
root = "pci0000:10"
switch = {}
gpus = [{ pci = "0000:14:00.0" }]
nics = [{ pci = "0000:13:00.0" }]
"#;

#[test]
fn a_small_description_generates_bridges_deterministically() {
    let m = parse(SMALL).expect("valid");
    // root port 10:01.0 -> upstream 11:00.0 (two buses above the first endpoint bus 13)
    // -> downstream ports on bus 12, numbered in endpoint address order.
    assert_eq!(
        m.ancestors(addr("0000:14:00.0")),
        [
            addr("0000:12:01.0"),
            addr("0000:11:00.0"),
            addr("0000:10:01.0")
        ]
    );
    assert_eq!(m.ancestors(addr("0000:13:00.0"))[0], addr("0000:12:00.0"));
    assert_eq!(m.nics[0].rdma.as_deref(), Some("mlx5_19"));
    assert_eq!(m.nics[0].kind, NicKind::Infiniband);
    assert_eq!(m.gpus[0].minor, Some(0));
}

fn err(text: &str) -> String {
    parse(text).expect_err("must be rejected").to_string()
}

#[test]
fn unknown_key_names_the_field_and_line() {
    let text = SMALL.replace("switch = {}", "switch = {}\nbogus = 3");
    let e = err(&text);
    assert!(e.contains("bogus") && e.contains("line 21"), "{e}");
    let e = err(&SMALL.replace("threads_per_core = 1", "threads_per_core = 1\nsmt = true"));
    assert!(e.contains("smt") && e.contains("line 5"), "{e}");
}

#[test]
fn bad_pci_address_names_the_value_and_line() {
    let e = err(&SMALL.replace("0000:14:00.0", "0000:14:00.9"));
    assert_eq!(
        e,
        "machine description, line 21, column 17: pci: bad PCI address \"0000:14:00.9\": \
         expected dddd:bb:dd.f, e.g. 0000:53:00.0"
    );
    let e = err(&SMALL.replace("pci0000:10", "pci0000"));
    assert!(
        e.contains("root: bad root complex") && e.contains("line 19"),
        "{e}"
    );
    let e = err(&SMALL.replace("10de:2330", "nvidia"));
    assert!(
        e.contains("pci_id: bad PCI id") && e.contains("line 12"),
        "{e}"
    );
}

#[test]
fn gpu_on_a_missing_numa_node_is_an_error() {
    let e = parse(&SMALL.replace("numa = 0", "numa = 3")).expect_err("missing node");
    assert!(
        matches!(e, CatalogError::UnknownNuma { numa: 3, .. }),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "line 18: GPU 0000:14:00.0 (group pci0000:10) is on NUMA node 3, which no [[numa]] entry defines"
    );
}

#[test]
fn overlapping_cpu_lists_are_an_error() {
    let e = parse(&SMALL.replace("cpus = \"1\"", "cpus = \"0-1\"")).expect_err("overlap");
    assert_eq!(
        e,
        CatalogError::CpuOverlap {
            at: "line 8".into(),
            cpu: 0,
            first: 0,
            second: 1
        },
        "{e}"
    );
}

#[test]
fn inconsistent_descriptions_are_errors() {
    // SMT siblings across NUMA nodes.
    let e = err(&SMALL.replace("threads_per_core = 1", "threads_per_core = 2"));
    assert!(e.contains("different NUMA nodes"), "{e}");
    // An endpoint outside its root complex's domain.
    let e = err(&SMALL.replace("0000:14:00.0", "0001:14:00.0"));
    assert!(e.contains("domain"), "{e}");
    // A NIC whose type is not defined.
    let e = err(&SMALL.replace(
        "{ pci = \"0000:13:00.0\" }",
        "{ pci = \"0000:13:00.0\", type = \"efa\" }",
    ));
    assert!(e.contains("\"efa\"") && e.contains("ib"), "{e}");
    // A device listed twice.
    let e = err(&SMALL.replace("0000:13:00.0", "0000:14:00.0"));
    assert!(e.contains("0000:14:00.0") && e.contains("twice"), "{e}");
    // Unknown template placeholder.
    let e = err(&SMALL.replace("mlx5_{bus}", "mlx5_{index}"));
    assert!(e.contains("{index}"), "{e}");
    // No name.
    assert_eq!(
        parse(&SMALL.replace("name = \"tiny\"", "")),
        Err(CatalogError::Missing("name"))
    );
    // extends of something unknown.
    let e = err("name = \"x\"\nextends = \"p9\"\n");
    assert!(e.contains("p9") && e.contains("p5.48xlarge"), "{e}");
    // Not TOML at all.
    let e = err("name = ");
    assert!(e.contains("line 1"), "{e}");
}

#[test]
fn nothing_forces_cpu_counts() {
    let text = SMALL
        .replace("cpus = \"0\"", "cpus = \"\"")
        .replace("cpus = \"1\"", "cpus = \"\"");
    let m = parse(&text).expect("empty CPU lists are allowed");
    assert!(m.cpus().is_empty() && m.cores.is_empty());
}

#[test]
fn extends_errors_point_into_the_base_machine() {
    // Dropping NUMA node 1 leaves the base's NUMA-1 groups dangling: the error names the
    // base file's line.
    let text =
        "name = \"x\"\nextends = \"Standard_ND96isr_H100_v5\"\n[[numa]]\nid = 0\ncpus = \"0\"\n";
    let e = err(text);
    assert!(
        e.starts_with("line ")
            && e.contains("of catalog machine Standard_ND96isr_H100_v5")
            && e.contains("NUMA node 1"),
        "{e}"
    );
    // Folding CPUs without overriding [cpu] keeps the base's SMT rule, which no longer fits.
    let text = "name = \"x\"\nextends = \"bm.gpu.h100.8\"\n[[numa]]\nid = 0\ncpus = \"0\"\n[[numa]]\nid = 1\ncpus = \"1\"\n";
    let e = err(text);
    assert!(
        e.contains("[cpu]") && e.contains("different NUMA nodes"),
        "{e}"
    );
}

/// (PCI address, NUMA node) of every device a dranet ResourceSlice dump lists: the
/// `dra.net/pciAddress` / `resource.kubernetes.io/pciBusID` value, and the
/// `dra.net/numaNode` that follows it within the same device, if any.
fn slice_devices(rel: &str) -> Vec<(PciAddr, Option<u32>)> {
    let text = read_shared(rel);
    let mut out: Vec<(PciAddr, Option<u32>)> = Vec::new();
    let mut numa: Option<u32> = None;
    let mut key = "";
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("- name:") || t.starts_with("- attributes:") {
            numa = None;
        }
        if t.ends_with(':') {
            key = t;
            continue;
        }
        let value = t.split_once(':').map(|(_, v)| v.trim().trim_matches('"'));
        match (key, value) {
            ("dra.net/numaNode:", Some(v)) => {
                numa = v.parse().ok();
                if let Some(last) = out.last_mut().filter(|l| l.1.is_none()) {
                    last.1 = numa;
                }
            }
            ("dra.net/pciAddress:" | "resource.kubernetes.io/pciBusID:", Some(v)) => {
                out.push((addr(v), numa));
            }
            _ => {}
        }
    }
    out
}

/// OCI BM.GPU.GB200-v3.4 and Azure ND GB300 v6, fact by fact against the live slices in
/// shared/topologies/dranet: every GPU and fabric NIC address, each NIC's NUMA node, and the
/// GPUs' NUMA nodes by the PCI-domain rule the slices' headers state.
#[test]
fn grace_machines_agree_with_the_dranet_slices() {
    let profiles = crate::fabric::profiles::Profiles::builtin();
    for (name, stem) in [
        ("BM.GPU.GB200-v3.4", "oci-BM.GPU.GB200-v3.4"),
        ("Standard_ND128isr_GB300_v6", "azure-ND128isr_GB300_v6"),
    ] {
        let m = machine(name).expect("machine");
        let gpus = slice_devices(&format!("dranet/{stem}.resourceslice-gpu.yaml"));
        let have: BTreeSet<PciAddr> = m.gpus.iter().map(|g| g.pci).collect();
        let want: BTreeSet<PciAddr> = gpus.iter().map(|(a, _)| *a).collect();
        assert_eq!(have, want, "{name}: GPU addresses");
        for g in &want {
            let socket = u32::from(g.domain >= 0x10);
            assert_eq!(m.numa_of(*g), Some(socket), "{name}: GPU {g} socket");
        }
        let nics = slice_devices(&format!("dranet/{stem}.resourceslice-dranet.yaml"));
        let fabric = crate::fabric::fabric_nics(&m, &profiles);
        let have: BTreeSet<PciAddr> = fabric.iter().map(|n| n.pci).collect();
        let want: BTreeSet<PciAddr> = nics.iter().map(|(a, _)| *a).collect();
        assert_eq!(have, want, "{name}: fabric NIC addresses");
        for (nic, numa) in &nics {
            assert_eq!(m.numa_of(*nic), *numa, "{name}: NIC {nic} NUMA node");
        }
    }
}

/// Found by the `catalog` fuzz target: a syntax error right after `KEY =` with a
/// multi-byte character before the key panicked while naming the key (a byte index
/// one past the character's first byte). Its input, as it found it.
#[test]
fn a_syntax_error_after_non_ascii_text_names_the_key() {
    let text = "mmind.'g\u{7}m a\u{feff}\u{fffb}rs =\n";
    let e = parse(text).expect_err("not a description").to_string();
    assert!(e.contains("rs:"), "{e}");
}
