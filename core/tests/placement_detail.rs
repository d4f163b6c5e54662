//! `Detail::Placement` discovery (what the SPANK plugin reads once per step) against
//! `Detail::Full`: for every catalog machine written as a fixture tree, the solver's plans
//! and `fabric::step_fabric`'s detection and environment come out the same from both, the
//! placement read leaves the PCIe links and RDMA port state/rate out, and
//! `read_pci_links` puts back exactly what the generated NCCL topology file needs.

mod common;

use gpu_affinity::fabric::profiles::Profiles;
use gpu_affinity::fabric::{FabricDecision, topo_xml};
use gpu_affinity::model::{Machine, PciLink};
use gpu_affinity::solver::{Mode, Plan, StepRequest, solve};
use gpu_affinity::sources::fixture::write_fixture;
use gpu_affinity::sources::sysfs::{Detail, read_machine_with, read_pci_links};
use gpu_affinity::{catalog, sources};

const GENERATED_TOPOLOGY: &str = "/run/gpu-affinity/step/nccl-topo.xml";

/// Step shapes the plugin meets: a full node one rank per GPU (strict), two GPUs per rank
/// (prefer), and half the GPUs with the first NUMA node's CPUs only (prefer, so the plan
/// still comes out when the CPUs are on the wrong node for some GPU).
fn requests(m: &Machine) -> Vec<StepRequest> {
    let gpus: Vec<_> = m.gpus_in_slurm_order().iter().map(|g| g.pci).collect();
    let count = gpus.len() as u32;
    let first_node = m
        .numa_nodes
        .first()
        .map(|n| n.cpus.clone())
        .unwrap_or_default();
    vec![
        StepRequest {
            gpus: gpus.clone(),
            cpus: m.cpus(),
            tasks: count,
            gpus_per_task: None,
            mode: Mode::Strict,
        },
        StepRequest {
            gpus: gpus.clone(),
            cpus: m.cpus(),
            tasks: count.div_ceil(2),
            gpus_per_task: Some(2),
            mode: Mode::Prefer,
        },
        StepRequest {
            gpus: gpus[..gpus.len() / 2].to_vec(),
            cpus: first_node,
            tasks: (count / 2).max(1),
            gpus_per_task: None,
            mode: Mode::Prefer,
        },
    ]
}

// No vendor topology file on the tree: the Azure profiles then generate one, the one place
// the fabric environment reads PCIe links.
fn fabric(m: &Machine, plan: &Plan, profiles: &Profiles) -> FabricDecision {
    common::step::fabric_of_clean_step(m, plan, profiles, GENERATED_TOPOLOGY)
}

/// A full read with what placement leaves out taken away.
fn placement_view(full: &Machine) -> Machine {
    let mut m = full.clone();
    for d in &mut m.pci {
        d.link = PciLink::default();
    }
    for p in m.nics.iter_mut().flat_map(|n| &mut n.ports) {
        p.state = None;
        p.rate = None;
    }
    m
}

#[test]
fn placement_gives_the_same_plans_and_fabric_env_as_full_on_every_catalog_machine() {
    let profiles = Profiles::builtin();
    let mut generated = Vec::new();
    for name in catalog::names() {
        let machine = catalog::machine(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let dir = tempfile::tempdir().expect("tempdir");
        write_fixture(&machine, dir.path()).unwrap_or_else(|e| panic!("{name}: fixture: {e}"));
        let full = read_machine_with(dir.path(), Detail::Full)
            .unwrap_or_else(|e| panic!("{name}: full read: {e}"));
        let placement = read_machine_with(dir.path(), Detail::Placement)
            .unwrap_or_else(|e| panic!("{name}: placement read: {e}"));
        assert_eq!(
            full,
            sources::sysfs::read_machine(dir.path()).expect("read_machine"),
            "{name}: read_machine is the full read"
        );

        // What placement leaves out, and only that.
        assert!(
            full.pci.iter().any(|d| d.link != PciLink::default()),
            "{name}: the fixture carries links, so the comparison means something"
        );
        assert!(
            placement.pci.iter().all(|d| d.link == PciLink::default()),
            "{name}: placement read PCIe links"
        );
        assert!(
            placement
                .nics
                .iter()
                .flat_map(|n| &n.ports)
                .all(|p| p.state.is_none() && p.rate.is_none()),
            "{name}: placement read port state or rate"
        );
        assert_eq!(
            placement,
            placement_view(&full),
            "{name}: placement differs beyond links and port state/rate"
        );

        for request in requests(&full) {
            let plan = solve(&full, &request);
            assert_eq!(
                solve(&placement, &request),
                plan,
                "{name}: plan for {} tasks",
                request.tasks
            );
            let (want, got) = (
                fabric(&full, &plan, &profiles),
                fabric(&placement, &plan, &profiles),
            );
            assert_eq!(
                serde_json::to_value(&got).expect("json"),
                serde_json::to_value(&want).expect("json"),
                "{name}: detection, environment or topology decision for {} tasks",
                request.tasks
            );
            assert_eq!(
                got.generated_topology.is_some(),
                want.generated_topology.is_some(),
                "{name}"
            );
            if let Some(xml) = &want.generated_topology {
                // The one use of links: the plugin reads them for this step only.
                let mut completed = placement.clone();
                read_pci_links(dir.path(), &mut completed)
                    .unwrap_or_else(|e| panic!("{name}: links: {e}"));
                assert_eq!(completed.pci, full.pci, "{name}: links read back");
                assert_eq!(
                    &topo_xml::render(
                        &completed,
                        &gpu_affinity::fabric::fabric_nics(&completed, &Profiles::builtin())
                    ),
                    xml,
                    "{name}: generated topology"
                );
                assert!(xml.contains("link_speed="), "{name}: {xml}");
                if !generated.contains(&name) {
                    generated.push(name);
                }
            }
        }
    }
    assert!(
        generated.iter().any(|n| n.starts_with("Standard_ND")),
        "an Azure machine generates its NCCL topology: {generated:?}"
    );
}

#[test]
fn links_of_a_tree_without_link_attributes_stay_unknown() {
    let mut machine = catalog::machine(catalog::DEFAULT_MACHINE).expect("catalog");
    for d in &mut machine.pci {
        d.link = PciLink::default();
    }
    let dir = tempfile::tempdir().expect("tempdir");
    write_fixture(&machine, dir.path()).expect("fixture");
    let mut read = read_machine_with(dir.path(), Detail::Placement).expect("placement read");
    read_pci_links(dir.path(), &mut read).expect("links");
    assert!(read.pci.iter().all(|d| d.link == PciLink::default()));
    let full = read_machine_with(dir.path(), Detail::Full).expect("full read");
    assert_eq!(read, placement_view(&full));
}
