//! Fixture trees read back through the sysfs reader into the same model.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns

mod common;

use std::path::Path;

use common::*;
use gpu_affinity::model::{Machine, NicKind};
use gpu_affinity::sources::fixture::{FixtureError, realized, write_fixture};
use gpu_affinity::sources::sysfs::config_space::pci_config;
use gpu_affinity::sources::sysfs::parse::cpuinfo_cores;
use gpu_affinity::sources::sysfs::read_machine;
use gpu_affinity_test_support::{addr, p4d};

fn round_trip(m: &Machine) -> Machine {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(m, dir.path()).unwrap();
    let read = read_machine(dir.path()).unwrap_or_else(|e| panic!("read back: {e}"));
    let mut want = realized(m);
    want.normalize();
    assert_eq!(read, want, "fixture did not read back as realized()");
    read
}

#[test]
fn switch_tree_round_trips_unchanged() {
    let m = switch_tree();
    // Already in sysfs form: realized() changes nothing, so the fixture carries it all.
    assert_eq!(realized(&m), m);
    let read = round_trip(&m);
    assert_eq!(read.gpus.len(), 2);
    assert_eq!(
        read.pci_device(addr("0000:03:00.0")).unwrap().parent,
        Some(addr("0000:02:00.0"))
    );
    assert_eq!(read.ancestors(addr("0000:04:00.0")).len(), 3);
    assert_eq!(read.gpus[0].minor, Some(0));
    assert_eq!(
        read.pci_device(addr("0000:04:00.0"))
            .unwrap()
            .link
            .current_speed
            .as_deref(),
        Some("32.0 GT/s PCIe")
    );
    assert_eq!(read.dmi.product_name.as_deref(), Some("BM.GPU.H100.8"));
    assert_eq!(read.cores.len(), 8);
}

#[test]
fn roce_and_infiniband_are_told_apart_by_link_layer() {
    let read = round_trip(&switch_tree());
    let kind = |name: &str| {
        read.nics
            .iter()
            .find(|n| n.rdma.as_deref() == Some(name))
            .unwrap()
            .kind
    };
    assert_eq!(kind("mlx5_0"), NicKind::Infiniband);
    assert_eq!(kind("mlx5_1"), NicKind::Roce);
    // The dual-port NIC is two PCI functions, each with its own RDMA device and netdev.
    let dual: Vec<_> = read.nics.iter().filter(|n| n.pci.bus == 0x82).collect();
    assert_eq!(dual.len(), 2);
    assert_eq!(dual[1].netdev.as_deref(), Some("eth3"));
}

#[test]
fn p4d_nics_on_root_bus() {
    let m = p4d();
    assert_eq!(realized(&m), m);
    let read = round_trip(&m);
    let efa = read.pci_device(addr("0000:10:1b.0")).unwrap();
    assert_eq!(efa.parent, None);
    assert_eq!(read.root_of(addr("0000:10:1c.0")), Some("pci0000:10"));
    assert_eq!(read.root_of(addr("0000:10:1b.0")), Some("pci0000:10"));
    let fabric: Vec<_> = read
        .fabric_nics()
        .iter()
        .map(|n| n.name().unwrap().to_string())
        .collect();
    assert_eq!(
        fabric,
        ["rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"]
    );
    assert_eq!(
        read.nics
            .iter()
            .find(|n| n.netdev.as_deref() == Some("ens65"))
            .unwrap()
            .kind,
        NicKind::Ethernet
    );
}

#[test]
fn vm_without_numa_and_with_gvnic() {
    let m = gcp_vm();
    assert_eq!(realized(&m), m);
    let read = round_trip(&m);
    assert!(read.pci.iter().all(|d| d.numa_node.is_none()));
    assert_eq!(read.numa_of(addr("0000:00:05.0")), Some(0));
    assert!(read.nics.iter().all(|n| n.kind == NicKind::Gvnic));
    // The host gVNIC on bus 00 carries no GPU traffic.
    assert_eq!(read.fabric_nics().len(), 1);
    assert_eq!(read.gpus[0].minor, None);
}

#[test]
fn placeholder_switches_become_a_valid_tree() {
    let m = nccl_placeholder();
    let r = realized(&m);
    r.validate().unwrap();
    // Each placeholder switch is its own root complex, so sockets do not share one.
    assert_eq!(r.root_of(addr("ffff:ff:01.0")), Some("pciffff:00"));
    assert_eq!(r.root_of(addr("0000:10:1c.0")), Some("pciffff:00"));
    assert_eq!(r.root_of(addr("0000:90:1c.0")), Some("pciffff:01"));
    // No CPU masks: each node gets its own CPUs.
    assert_eq!(r.numa_node(0).unwrap().cpus.to_string(), "0-7");
    assert_eq!(r.numa_node(1).unwrap().cpus.to_string(), "8-15");
    // Nameless NICs get kernel-style names and keep their kind.
    let kinds: Vec<_> = r
        .nics
        .iter()
        .map(|n| (n.name().unwrap().to_string(), n.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("rdmap16s27".to_string(), NicKind::Efa),
            ("rdmap144s27".to_string(), NicKind::Efa),
            ("mlx5_0".to_string(), NicKind::Infiniband),
        ]
    );
    // A GPU listed without class becomes an NVIDIA 3D controller, so it is found again.
    assert_eq!(r.pci_device(addr("0000:10:1d.0")).unwrap().vendor, 0x10de);
    let read = round_trip(&m);
    assert_eq!(read.gpus.len(), 4);
    // realized() is a fixed point: writing its result again changes nothing.
    assert_eq!(realized(&read), read);
}

/// Write a fixture, spoil one file, and expect an error that names it.
fn spoiled(relative: &str, contents: &str) -> String {
    spoiled_all(&[(relative, contents)])
}

/// Write a fixture, overwrite some files, and expect an error.
fn spoiled_all(files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(&switch_tree(), dir.path()).unwrap();
    for (relative, contents) in files {
        std::fs::write(dir.path().join(relative), contents).unwrap();
    }
    let err = read_machine(dir.path()).expect_err("spoiled fixture must not read");
    err.to_string()
}

/// Cut a function's config space to the 64-byte header, as the kernel shows it to a
/// reader without CAP_SYS_ADMIN: ids still there, the link capability not.
fn unprivileged(root: &Path, pci: &str) {
    let path = root.join(format!("sys/bus/pci/devices/{pci}/config"));
    let mut config = std::fs::read(&path).unwrap();
    config.truncate(64);
    std::fs::write(&path, config).unwrap();
}

/// /proc/cpuinfo without physical id / core id (as on ARM): cores come from sysfs.
const ARM_CPUINFO: &str = "processor\t: 0\nBogoMIPS\t: 50.00\n\n";

#[test]
fn garbage_numa_node_names_the_file() {
    let msg = spoiled("sys/bus/pci/devices/0000:03:00.0/numa_node", "zero\n");
    assert!(
        msg.contains("0000:03:00.0/numa_node") && msg.contains("zero"),
        "{msg}"
    );
}

#[test]
fn bad_cpulist_names_the_file() {
    let msg = spoiled("sys/devices/system/node/node1/cpulist", "4-x\n");
    assert!(
        msg.contains("node1/cpulist") && msg.contains("4-x"),
        "{msg}"
    );
    let msg = spoiled_all(&[
        ("proc/cpuinfo", ARM_CPUINFO),
        (
            "sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
            "0-\n",
        ),
    ]);
    assert!(msg.contains("cpu0/topology/thread_siblings_list"), "{msg}");
}

#[test]
fn bad_attributes_name_the_file() {
    // uevent is read only where config space is unusable (empty here).
    let msg = spoiled_all(&[
        ("sys/bus/pci/devices/0000:04:00.0/config", ""),
        (
            "sys/bus/pci/devices/0000:04:00.0/uevent",
            "PCI_CLASS=network\nPCI_ID=15B3:1021\n",
        ),
    ]);
    assert!(
        msg.contains("0000:04:00.0/uevent") && msg.contains("network"),
        "{msg}"
    );
    let msg = spoiled(
        "proc/driver/nvidia/gpus/0000:81:00.0/information",
        "Device Minor: \t one\n",
    );
    assert!(
        msg.contains("0000:81:00.0/information") && msg.contains("one"),
        "{msg}"
    );
    // The link attributes are read only where config space lacks the capability.
    let msg = spoiled_all(&[
        ("sys/bus/pci/devices/0000:03:00.0/config", "\u{de}\u{10}"),
        ("sys/bus/pci/devices/0000:03:00.0/max_link_width", "x16\n"),
    ]);
    assert!(msg.contains("max_link_width"), "{msg}");
}

#[test]
fn ids_without_config_or_uevent_come_from_class_vendor_device() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(&switch_tree(), dir.path()).unwrap();
    for a in ["0000:03:00.0", "0000:04:00.0"] {
        for f in ["config", "uevent"] {
            std::fs::remove_file(dir.path().join(format!("sys/bus/pci/devices/{a}/{f}"))).unwrap();
        }
    }
    assert_eq!(read_machine(dir.path()).unwrap(), switch_tree());
    std::fs::write(
        dir.path().join("sys/bus/pci/devices/0000:04:00.0/class"),
        "network\n",
    )
    .unwrap();
    let msg = read_machine(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("0000:04:00.0/class") && msg.contains("network"),
        "{msg}"
    );
}

#[test]
fn missing_files_are_unknowns() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(&switch_tree(), dir.path()).unwrap();
    unprivileged(dir.path(), "0000:03:00.0");
    let dev = dir.path().join("sys/bus/pci/devices/0000:03:00.0");
    for f in ["numa_node", "current_link_speed", "max_link_width"] {
        std::fs::remove_file(dev.join(f)).unwrap();
    }
    std::fs::remove_dir_all(dir.path().join("sys/class/dmi")).unwrap();
    std::fs::remove_dir_all(dir.path().join("proc")).unwrap();
    let read = read_machine(dir.path()).unwrap();
    let gpu = read.pci_device(addr("0000:03:00.0")).unwrap();
    assert_eq!(gpu.numa_node, None);
    assert_eq!(gpu.link.current_speed, None);
    assert_eq!(gpu.link.max_width, None);
    assert_eq!(read.dmi, Default::default());
    assert!(read.gpus.iter().all(|g| g.minor.is_none()));
    // An empty root is an empty machine, not an error.
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(read_machine(empty.path()).unwrap(), Machine::default());
}

#[test]
fn every_fallback_reads_the_same_machine() {
    for m in [switch_tree(), p4d(), gcp_vm()] {
        let dir = tempfile::tempdir().unwrap();
        write_fixture(&m, dir.path()).unwrap();
        let want = read_machine(dir.path()).unwrap();
        // The fast paths are the ones taken on a fixture: cores from cpuinfo, links
        // from config space.
        let cpuinfo = std::fs::read(dir.path().join("proc/cpuinfo")).unwrap();
        assert_eq!(cpuinfo_cores(&cpuinfo), Some(want.cores.clone()));
        for d in want.pci.iter().filter(|d| d.link.max_width.is_some()) {
            let config = format!("sys/bus/pci/devices/{}/config", d.addr);
            let config = pci_config(&std::fs::read(dir.path().join(config)).unwrap()).unwrap();
            assert_eq!(config.link.as_ref(), Some(&d.link), "{}", d.addr);
        }
        // The link from the attributes instead of config space (an unprivileged reader).
        for d in &want.pci {
            unprivileged(dir.path(), &d.addr.to_string());
        }
        assert_eq!(read_machine(dir.path()).unwrap(), want);
        // The cores from thread_siblings_list instead of /proc/cpuinfo.
        std::fs::write(dir.path().join("proc/cpuinfo"), ARM_CPUINFO).unwrap();
        assert_eq!(read_machine(dir.path()).unwrap(), want);
        // Ids from uevent instead of config space.
        for d in &want.pci {
            let config = format!("sys/bus/pci/devices/{}/config", d.addr);
            std::fs::remove_file(dir.path().join(config)).unwrap();
        }
        assert_eq!(read_machine(dir.path()).unwrap(), want);
    }
}

#[test]
fn the_live_machine_reads() {
    let m = read_machine(Path::new("/")).unwrap_or_else(|e| panic!("live sysfs: {e}"));
    m.validate().unwrap();
    assert!(!m.numa_nodes.is_empty() || !Path::new("/sys/devices/system/node").exists());
}

#[test]
fn fixture_refuses_bad_names_and_used_dirs() {
    let mut m = switch_tree();
    m.nics[0].netdev = Some("../evil".into());
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        write_fixture(&m, dir.path()),
        Err(FixtureError::BadName { .. })
    ));
    let mut m = switch_tree();
    m.nics[1].rdma = Some("mlx5_0".into());
    assert!(matches!(
        write_fixture(&m, dir.path()),
        Err(FixtureError::DuplicateName { .. })
    ));
    write_fixture(&switch_tree(), dir.path()).unwrap();
    assert!(matches!(
        write_fixture(&switch_tree(), dir.path()),
        Err(FixtureError::NotEmpty(_))
    ));
}

/// Packages that are not the NUMA nodes (one package over both NUMA nodes, as on an
/// NPS2 part) come back through `core_siblings_list`; the NUMA-shaped default stays
/// implicit (`packages` empty), as every other test here checks.
#[test]
fn packages_other_than_the_numa_nodes_round_trip() {
    let mut m = switch_tree();
    let all = m.cpus();
    m.set_packages(vec![all.clone()]);
    assert_eq!(m.packages, std::slice::from_ref(&all));
    let read = round_trip(&m);
    assert_eq!(read.sockets(), [all]);
    assert!(round_trip(&switch_tree()).packages.is_empty());
}
