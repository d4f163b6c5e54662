//! The XML topology sources over every real file in the shared topology data
//! (../shared/topologies, see PROVENANCE.md there), plus malformed and mutated input.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpu_affinity::model::{Machine, NicKind};
use gpu_affinity::pci::PciAddr;
use gpu_affinity::sources::{MachineXmlError, parse_machine_xml, read_machine_xml};
use gpu_affinity_test_support::{addr, shared_topologies};

/// The shared topology directory: `$GPU_AFFINITY_SHARED/topologies` (or the variable itself
/// when it already names the topologies directory), else the workspace's sibling `shared/`.
fn topologies_dir() -> PathBuf {
    let dir = shared_topologies();
    assert!(
        dir.is_dir(),
        "topology data not found at {} (set GPU_AFFINITY_SHARED to the shared directory)",
        dir.display()
    );
    dir
}

/// Every .xml file under the topology directory, enumerated now (not a fixed list), keyed
/// by "source/file.xml".
fn xml_files() -> BTreeMap<String, PathBuf> {
    let root = topologies_dir();
    let mut files = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable topology directory") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "xml") {
                let key = path
                    .strip_prefix(&root)
                    .expect("under root")
                    .to_string_lossy()
                    .replace('\\', "/");
                files.insert(key, path);
            }
        }
    }
    assert!(!files.is_empty(), "no .xml files under {}", root.display());
    files
}

/// Expected (GPUs, fabric NICs as PCI functions, NUMA nodes) per file, from PROVENANCE.md
/// and from what each file itself lists (see the notes for where the two differ).
fn expected_counts(key: &str) -> Option<(usize, usize, usize)> {
    Some(match key {
        "aws-ofi-nccl/p4d-24xl-topo.xml" => (8, 4, 2),
        // Bare bus ids only: no evidence of which are GPUs and which the EFA, so the nine
        // functions stay unknown endpoints (see g5_bare_busids_stay_unknown_endpoints).
        "aws-ofi-nccl/g5.48xl-topo.xml" => (0, 0, 2),
        "azhpc-images/ndv5-topo.xml" => (8, 8, 2),
        "azhpc-images/ndv2-topo.xml" => (8, 1, 2),
        // The eth0 <nic> sits directly under <cpu>, without a PCI address: skipped.
        "azhpc-images/ncv4-topo.xml" => (4, 0, 4),
        "azurehpc/nc48v4-topo.xml" => (2, 0, 2),
        "hwloc/32em64t-2n8c2t-pci-normalio.xml" => (3, 1, 2),
        "hwloc/power8gpudistances.xml" => (4, 0, 2),
        // Dual-port CX-7 / CX-6: each <net> port is its own PCI function (8 cards, 16 ports).
        "oci/oci-hpc.H100-topology.xml" => (8, 16, 2),
        "oci/oci-hpc.H100-topology-kubernetes.xml" => (8, 16, 2),
        "oci/oci-hpc-oke.BM.GPU.A100-v2.8.xml" => (8, 16, 4),
        "oci/oci-hpc.topo-flattened.xml" => (8, 8, 4),
        "oci/oci-hpc.topo-flattened-b4.xml" => (8, 8, 4),
        _ => return None,
    })
}

/// Files that are real inputs but not topologies, with a fragment of the expected error.
fn expected_error(key: &str) -> Option<&'static str> {
    match key {
        "azhpc-images/ncv4-graph.xml" => {
            Some("is an NCCL graph file (NCCL_GRAPH_FILE), not a topology")
        }
        _ => None,
    }
}

fn load(key: &str) -> Machine {
    let files = xml_files();
    let path = files
        .get(key)
        .unwrap_or_else(|| panic!("{key} missing from the topology data"));
    read_machine_xml(path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_xml_file_parses_to_the_expected_counts() {
    let mut report = Vec::new();
    for (key, path) in xml_files() {
        if let Some(fragment) = expected_error(&key) {
            let err = read_machine_xml(&path).expect_err(&key).to_string();
            assert!(err.contains(fragment), "{key}: {err}");
            assert!(
                err.contains(&path.display().to_string()),
                "error names the file: {err}"
            );
            continue;
        }
        let expected = expected_counts(&key)
            .unwrap_or_else(|| panic!("{key} is new: add its expected counts from PROVENANCE.md"));
        let machine = read_machine_xml(&path).unwrap_or_else(|e| panic!("{e}"));
        let got = (
            machine.gpus.len(),
            machine.fabric_nics().len(),
            machine.numa_nodes.len(),
        );
        report.push(format!("{key}: {got:?}"));
        assert_eq!(got, expected, "{key}: (GPUs, fabric NICs, NUMA nodes)");

        // What every source promises: valid, normalized, every GPU and fabric NIC placed on
        // a NUMA node the machine lists (all these files place them).
        machine.validate().expect("valid");
        let mut again = machine.clone();
        again.normalize();
        assert_eq!(again, machine, "{key}: normalized");
        let placed = |a: PciAddr| {
            machine
                .numa_of(a)
                .is_some_and(|n| machine.numa_node(n).is_some())
        };
        for gpu in &machine.gpus {
            assert!(placed(gpu.pci), "{key}: GPU {} has no NUMA node", gpu.pci);
        }
        for nic in machine.fabric_nics() {
            assert!(placed(nic.pci), "{key}: NIC {} has no NUMA node", nic.pci);
            assert!(
                nic.name().is_some() || nic.kind != NicKind::Ethernet,
                "{key}: {nic:?}"
            );
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn p4d_gpu_and_efa_share_a_placeholder_switch_on_numa_0() {
    let m = load("aws-ofi-nccl/p4d-24xl-topo.xml");
    let gpu = addr("0000:10:1c.0");
    let efa = addr("0000:10:1b.0");
    assert!(m.gpus.iter().any(|g| g.pci == gpu));
    let nic = m.nics.iter().find(|n| n.pci == efa).expect("EFA listed");
    assert_eq!(nic.kind, NicKind::Efa);
    assert_eq!(m.numa_of(gpu), Some(0));
    assert_eq!(m.numa_of(efa), Some(0));
    let switch = m
        .pci_device(gpu)
        .and_then(|d| d.parent)
        .expect("GPU behind a switch");
    assert_eq!(switch, addr("ffff:ff:01.0"));
    assert_eq!(m.pci_device(efa).and_then(|d| d.parent), Some(switch));
    assert_eq!(
        m.numa_node(0).map(|n| n.cpus.to_string()),
        Some("0-23,48-71".to_string())
    );
    assert_eq!(
        m.root_of(gpu),
        None,
        "NCCL files do not name root complexes"
    );
    let link = &m.pci_device(gpu).expect("in tree").link;
    assert_eq!(
        (link.max_speed.as_deref(), link.max_width),
        (Some("8 GT/s"), Some(16))
    );
}

#[test]
fn ndv5_gpu_and_ib_nic_on_numa_0_with_cpus_0_47() {
    let m = load("azhpc-images/ndv5-topo.xml");
    let gpu = addr("0001:00:00.0");
    let nic = addr("0101:00:00.0");
    assert_eq!(m.numa_of(gpu), Some(0));
    assert_eq!(m.numa_of(nic), Some(0));
    assert_eq!(
        m.numa_node(0).map(|n| n.cpus.to_string()),
        Some("0-47".to_string())
    );
    assert_eq!(m.numa_of(addr("0009:00:00.0")), Some(1));
    let ib = m.nics.iter().find(|n| n.pci == nic).expect("NIC listed");
    assert_eq!(ib.kind, NicKind::Infiniband);
    // One GPU and one NIC per placeholder switch.
    let parent = |a| m.pci_device(a).and_then(|d| d.parent);
    assert_eq!(parent(gpu), parent(nic));
    assert!(parent(gpu).is_some());
}

#[test]
fn oci_h100_gpu_shares_switch_with_dual_port_nic() {
    for key in [
        "oci/oci-hpc.H100-topology.xml",
        "oci/oci-hpc.H100-topology-kubernetes.xml",
    ] {
        let m = load(key);
        let gpu = addr("0000:0f:00.0");
        let switch = addr("0000:08:00.0");
        assert!(m.ancestors(gpu).contains(&switch), "{key}");
        assert!(m.ancestors(addr("0000:0c:00.0")).contains(&switch), "{key}");
        let ports: Vec<(String, String)> = m
            .nics
            .iter()
            .filter(|n| n.pci.bus == 0x0c)
            .map(|n| (n.pci.to_string(), n.rdma.clone().unwrap_or_default()))
            .collect();
        let names = if key.contains("kubernetes") {
            ["mlx5_18", "mlx5_19"]
        } else {
            ["mlx5_0", "mlx5_1"]
        };
        assert_eq!(
            ports,
            vec![
                ("0000:0c:00.0".to_string(), names[0].to_string()),
                ("0000:0c:00.1".to_string(), names[1].to_string())
            ],
            "{key}"
        );
        assert!(
            m.nics.iter().all(|n| n.kind == NicKind::Roce),
            "{key}: CX-7 in Ethernet mode"
        );
        assert_eq!(m.numa_of(gpu), Some(0));
        assert_eq!(m.numa_of(addr("0000:d8:00.0")), Some(1));
    }
}

#[test]
fn g5_bare_busids_stay_unknown_endpoints() {
    let m = load("aws-ofi-nccl/g5.48xl-topo.xml");
    assert_eq!(m.pci.len(), 9);
    assert!(
        m.pci
            .iter()
            .all(|d| d.class == gpu_affinity::sources::nccl_xml::UNKNOWN_CLASS)
    );
    assert!(m.gpus.is_empty() && m.nics.is_empty());
    assert_eq!(
        m.pci_device(addr("0000:00:16.0")).and_then(|d| d.numa_node),
        Some(0)
    );
    assert_eq!(
        m.pci_device(addr("0000:00:15.0")).and_then(|d| d.numa_node),
        Some(1)
    );
    assert!(
        m.numa_nodes.iter().all(|n| n.cpus.is_empty()),
        "no affinity masks in the file"
    );
}

#[test]
fn ncv4_netdev_without_pci_is_skipped() {
    let m = load("azhpc-images/ncv4-topo.xml");
    assert!(m.nics.is_empty());
    for (i, bus) in ["0001", "0002", "0003", "0004"].iter().enumerate() {
        assert_eq!(m.numa_of(addr(&format!("{bus}:00:00.0"))), Some(i as u32));
    }
}

#[test]
fn hwloc_32em64t_gpus_ib_and_dmi() {
    let m = load("hwloc/32em64t-2n8c2t-pci-normalio.xml");
    assert_eq!(m.dmi.product_name.as_deref(), Some("X9DRG-HF"));
    assert_eq!(m.dmi.sys_vendor.as_deref(), Some("Supermicro"));
    assert_eq!(m.dmi.board_vendor.as_deref(), Some("Supermicro"));
    assert_eq!(
        m.dmi.chassis_asset_tag.as_deref(),
        Some("To Be Filled By O.E.M.")
    );
    assert_eq!(
        m.numa_node(0).map(|n| n.cpus.to_string()),
        Some("0-7,16-23".to_string())
    );
    assert_eq!(m.cores.len(), 16);
    assert!(m.cores.iter().all(|c| c.len() == 2));
    let gpus: Vec<String> = m.gpus.iter().map(|g| g.pci.to_string()).collect();
    assert_eq!(gpus, ["0000:03:00.0", "0000:83:00.0", "0000:84:00.0"]);
    let m2075 = m
        .gpus
        .iter()
        .filter(|g| g.model.as_deref().is_some_and(|s| s.contains("M2075")));
    assert_eq!(
        m2075.count(),
        2,
        "the third carries the CUDA device's (hand-edited) model"
    );
    assert_eq!(m.numa_of(addr("0000:03:00.0")), Some(0));
    assert_eq!(m.root_of(addr("0000:03:00.0")), Some("pci0000:00"));
    let ib = m.fabric_nics();
    assert_eq!(ib.len(), 1);
    assert_eq!(
        (ib[0].rdma.as_deref(), ib[0].netdev.as_deref()),
        (Some("mlx5_0"), Some("ib0"))
    );
    assert_eq!(ib[0].kind, NicKind::Infiniband);
    assert_eq!(
        ib[0].ports.first().and_then(|p| p.state.as_deref()),
        Some("4: ACTIVE")
    );
    assert_eq!(m.numa_of(ib[0].pci), Some(1));
    assert_eq!(m.root_of(ib[0].pci), Some("pci0000:80"));
    assert_eq!(
        m.pci_device(ib[0].pci).and_then(|d| d.parent),
        Some(addr("0000:80:03.0"))
    );
    let eth: Vec<_> = m
        .nics
        .iter()
        .filter(|n| n.kind == NicKind::Ethernet)
        .filter_map(|n| n.netdev.clone())
        .collect();
    assert_eq!(eth, ["eth0", "eth1"]);
}

#[test]
fn hwloc_power8_gpus_on_both_sockets() {
    let m = load("hwloc/power8gpudistances.xml");
    assert!(
        m.gpus
            .iter()
            .all(|g| g.model.as_deref() == Some("Tesla P100-SXM2-16GB"))
    );
    assert_eq!(m.numa_of(addr("0002:01:00.0")), Some(0));
    assert_eq!(m.numa_of(addr("000a:01:00.0")), Some(1));
    assert_eq!(m.root_of(addr("0002:01:00.0")), Some("pci0002:00"));
    assert_eq!(
        m.numa_node(1).map(|n| n.cpus.len()),
        Some(m.numa_node(0).map_or(0, |n| n.cpus.len()))
    );
    assert!(m.nics.is_empty());
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    let p4d =
        std::fs::read_to_string(&xml_files()["aws-ofi-nccl/p4d-24xl-topo.xml"]).expect("readable");
    let truncated = &p4d[..p4d.len() / 2];
    let cases: Vec<(String, &str)> = vec![
        (truncated.to_string(), "malformed XML"),
        (p4d.replacen("0000:10:1c.0", "0000:10:1c", 1), "busid"),
        (
            p4d.replacen(
                "000000ff,ffff0000,00ffffff",
                "000000ff,ffff0000,00ffffzz",
                1,
            ),
            "affinity",
        ),
        (
            "<html><body/></html>".to_string(),
            "root element <html> is not a topology",
        ),
        (String::new(), "malformed XML"),
        ("not xml at all".to_string(), "malformed XML"),
    ];
    for (text, needle) in cases {
        let err = parse_machine_xml(&text).expect_err(needle).to_string();
        assert!(err.contains(needle), "{needle}: {err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
    let err =
        parse_machine_xml(&p4d.replacen("0000:10:1c.0", "0000:10:1c", 1)).expect_err("bad busid");
    assert!(
        matches!(err, MachineXmlError::BadAttribute { line: 18, .. }),
        "{err}"
    );
}

#[test]
fn reader_errors_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope.xml");
    let err = read_machine_xml(&missing).expect_err("missing").to_string();
    assert!(err.contains("nope.xml"), "{err}");
    let binary = dir.path().join("binary.xml");
    std::fs::write(&binary, [0xffu8, 0xfe, 0x00]).expect("write");
    let err = read_machine_xml(&binary)
        .expect_err("not utf-8")
        .to_string();
    assert!(err.contains("binary.xml") && err.contains("UTF-8"), "{err}");
    let bad = dir.path().join("bad.xml");
    std::fs::write(&bad, "<system><cpu numaid=\"0\" affinity=\"q\"/></system>").expect("write");
    let err = read_machine_xml(&bad).expect_err("bad mask").to_string();
    assert!(
        err.starts_with(&bad.display().to_string()) && err.contains("line 1"),
        "{err}"
    );
}

/// Invariant 6: parsers take text and never panic on it. Truncate and corrupt every real
/// file at many offsets (deterministically) and require an error or a valid machine.
#[test]
fn mutated_real_files_never_panic() {
    const REPLACEMENTS: [&str; 9] = ["<", ">", "\"", "/", "0", "f", "-", " ", "&"];
    for (key, path) in xml_files() {
        let text = std::fs::read_to_string(&path).expect("readable");
        let step = (text.len() / 60).max(1);
        let mut checked = 0usize;
        let mut check = |mutated: &str| {
            checked += 1;
            if let Ok(m) = parse_machine_xml(mutated) {
                m.validate()
                    .unwrap_or_else(|e| panic!("{key}: accepted an invalid machine: {e}"));
            }
        };
        for offset in (0..text.len()).step_by(step) {
            if !text.is_char_boundary(offset) {
                continue;
            }
            check(&text[..offset]);
            let next = (offset + 1..=text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(text.len());
            for r in REPLACEMENTS {
                check(&format!("{}{r}{}", &text[..offset], &text[next..]));
            }
            // Drop a chunk, and repeat one (duplicate elements, deeper nesting).
            let end = (offset + 97).min(text.len());
            if text.is_char_boundary(end) {
                check(&format!("{}{}", &text[..offset], &text[end..]));
                check(&format!("{}{}", &text[..end], &text[offset..]));
            }
        }
        assert!(checked > 100, "{key}: only {checked} mutations");
    }
}
