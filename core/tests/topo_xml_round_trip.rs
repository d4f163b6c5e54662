//! The NCCL topology gpu-affinity writes for a node (`fabric::topo_xml::render`) reads back
//! through the project's own NCCL XML parser as the same GPUs, fabric NICs, NUMA nodes and
//! CPU masks: what NCCL is told is what the model says.

use std::collections::BTreeSet;

use gpu_affinity::catalog;
use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::fabric::topo_xml;
use gpu_affinity::model::{Machine, NicKind};
use gpu_affinity::pci::PciAddr;
use gpu_affinity::sources::nccl_xml;

/// (PCI address, RDMA name, verbs port) of every fabric NIC.
fn fabric(m: &Machine) -> BTreeSet<(PciAddr, Option<String>, Option<u32>)> {
    m.fabric_nics()
        .iter()
        .map(|n| (n.pci, n.rdma.clone(), n.ports.first().map(|p| p.number)))
        .collect()
}

/// NUMA nodes holding a GPU or fabric NIC, with their CPUs: the ones the file describes.
fn numa_with_devices(m: &Machine) -> Vec<(u32, CpuSet)> {
    let used: BTreeSet<u32> = m
        .gpus
        .iter()
        .map(|g| g.pci)
        .chain(m.fabric_nics().iter().map(|n| n.pci))
        .filter_map(|a| m.numa_of(a))
        .collect();
    m.numa_nodes
        .iter()
        .filter(|n| used.contains(&n.id))
        .map(|n| (n.id, n.cpus.clone()))
        .collect()
}

#[test]
fn rendered_topology_of_every_catalog_machine_parses_back_the_same() {
    let names = catalog::names();
    assert!(names.len() >= 7, "catalog has {} machines", names.len());
    for name in names {
        let m = catalog::machine(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let xml = topo_xml::render(&m, &m.fabric_nics());
        let back = nccl_xml::parse(&xml).unwrap_or_else(|e| panic!("{name}: {e}\n{xml}"));

        let gpus = |m: &Machine| -> Vec<(PciAddr, Option<u32>)> {
            m.gpus.iter().map(|g| (g.pci, m.numa_of(g.pci))).collect()
        };
        assert_eq!(gpus(&back), gpus(&m), "{name}: GPUs and their NUMA nodes");

        assert_eq!(
            fabric(&back),
            fabric(&m),
            "{name}: fabric NICs (PCI, RDMA name, port)"
        );
        for n in m.fabric_nics() {
            let twin = back
                .nics
                .iter()
                .find(|b| b.pci == n.pci && b.rdma == n.rdma)
                .unwrap_or_else(|| panic!("{name}: NIC {} lost", n.pci));
            // gVNICs are told by their PCI ids, RDMA NICs by class and ids.
            assert_eq!(twin.kind, n.kind, "{name}: kind of {}", n.pci);
            assert_eq!(back.numa_of(n.pci), m.numa_of(n.pci), "{name}: {}", n.pci);
            // The bridges between a NIC and its GPUs are what NCCL's path search needs.
            assert_eq!(
                back.ancestors(n.pci),
                m.ancestors(n.pci),
                "{name}: bridges above {}",
                n.pci
            );
        }
        // Host NICs (the VM's eth0, OCI's front-end ports, GCP's host gVNIC) stay out.
        let host: Vec<PciAddr> = m
            .nics
            .iter()
            .filter(|n| !m.fabric_nics().iter().any(|f| f.pci == n.pci))
            .map(|n| n.pci)
            .collect();
        for a in host {
            assert!(
                back.pci_device(a).is_none(),
                "{name}: host NIC {a} in the file"
            );
        }

        // Link figures as NCCL reads them from sysfs: the maximum, not the current
        // (an idle GPU's link trains down).
        for a in m
            .gpus
            .iter()
            .map(|g| g.pci)
            .chain(m.fabric_nics().iter().map(|n| n.pci))
        {
            let want = &m.pci_device(a).expect("in tree").link;
            let have = &back.pci_device(a).expect("written").link;
            assert_eq!(
                (have.max_speed.as_ref(), have.max_width),
                (
                    want.max_speed.as_ref().or(want.current_speed.as_ref()),
                    want.max_width.or(want.current_width)
                ),
                "{name}: link of {a}"
            );
        }

        let numa: Vec<(u32, CpuSet)> = back
            .numa_nodes
            .iter()
            .map(|n| (n.id, n.cpus.clone()))
            .collect();
        assert_eq!(
            numa,
            numa_with_devices(&m),
            "{name}: NUMA ids and CPU masks"
        );
        // Every catalog machine has GPUs on each NUMA node, so none is dropped.
        assert_eq!(numa.len(), m.numa_nodes.len(), "{name}: NUMA nodes");

        // What detection sees from the file alone: the same fabric kinds.
        let kinds =
            |m: &Machine| -> BTreeSet<NicKind> { m.fabric_nics().iter().map(|n| n.kind).collect() };
        assert_eq!(kinds(&back), kinds(&m), "{name}: fabric kinds");
    }
}

/// An idle GPU trains its PCIe link down; the file must still carry the maximum, as
/// NCCL's own discovery would (it reads max_link_speed), or NCCL rates the path as slow.
#[test]
fn a_downtrained_link_is_written_at_its_maximum() {
    let mut m = catalog::machine("p5.48xlarge").expect("p5");
    let gpu = m.gpus[0].pci;
    let dev = m
        .pci
        .iter_mut()
        .find(|d| d.addr == gpu)
        .expect("GPU in tree");
    dev.link.max_speed = Some("32.0 GT/s PCIe".into());
    dev.link.max_width = Some(16);
    dev.link.current_speed = Some("2.5 GT/s PCIe".into());
    dev.link.current_width = Some(16);
    let back = nccl_xml::parse(&topo_xml::render(&m, &m.fabric_nics())).expect("parses");
    let link = &back.pci_device(gpu).expect("GPU written").link;
    assert_eq!(link.max_speed.as_deref(), Some("32.0 GT/s PCIe"));
    assert_eq!(link.max_width, Some(16));
}
