//! Golden plans: every shared topology file and every catalog machine, one rank per GPU,
//! solved in strict and prefer mode and compared with `core/tests/golden/*.json`.
//!
//! Regenerate with `GOLDEN_UPDATE=1 cargo nextest run -p gpu-affinity-core --test golden`
//! and review the diff by eye: each rank's NICs must be the nearest by the PCI tree and
//! split evenly. Independently of the files, every plan is checked here against the
//! model's own tree walks (nearest NICs, even split, CPUs disjoint and NUMA-local, strict
//! refusing exactly when a GPU has no fabric NIC on its NUMA node).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::golden::{check_golden, file_stem, shared_topologies, topology_files};
use common::reference::nearness_key;
use gpu_affinity::fabric::{self, profiles::Profiles};
use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;
use gpu_affinity::solver::{Mode, Plan, StepRequest, ViolationKind, solve_with_fabric};
use gpu_affinity::{catalog, sources};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// One rank per GPU in Slurm order, every CPU of the machine.
fn request(machine: &Machine, mode: Mode) -> StepRequest {
    let gpus: Vec<PciAddr> = machine
        .gpus_in_slurm_order()
        .iter()
        .map(|g| g.pci)
        .collect();
    StepRequest {
        tasks: gpus.len() as u32,
        gpus,
        cpus: machine.cpus(),
        gpus_per_task: None,
        mode,
    }
}

/// Whether `gpu` has a fabric NIC on its own NUMA node (a NIC of unknown NUMA node tied to
/// it by a switch or root complex counts).
fn has_local_nic(machine: &Machine, gpu: PciAddr, fabric: &[PciAddr]) -> bool {
    fabric
        .iter()
        .any(|&nic| match (machine.numa_of(gpu), machine.numa_of(nic)) {
            (Some(a), Some(b)) => a == b,
            _ => nearness_key(machine, gpu, nic).0 <= 1,
        })
}

/// The behaviour the issue asks for, checked on one strict and one prefer plan.
fn check_plan(name: &str, machine: &Machine, strict: &Plan, prefer: &Plan) -> Vec<String> {
    let mut bad = Vec::new();
    let fabric: Vec<PciAddr> = strict.fabric_nics.iter().map(|n| n.pci).collect();
    let alloc = machine.cpus();

    if prefer.ranks != strict.ranks
        || !prefer
            .warnings
            .iter()
            .map(|v| (v.rank, v.kind))
            .eq(strict.violations.iter().map(|v| (v.rank, v.kind)))
        || !prefer.violations.is_empty()
    {
        bad.push(format!("{name}: prefer is not strict's plan with warnings"));
    }

    // NICs: nearest, and evenly split among GPUs with the same nearest set.
    let mut groups: BTreeMap<Vec<PciAddr>, Vec<usize>> = BTreeMap::new();
    for rank in &strict.ranks {
        let [gpu] = rank.gpus[..] else {
            bad.push(format!(
                "{name}: rank {} has {} GPUs",
                rank.rank,
                rank.gpus.len()
            ));
            continue;
        };
        if fabric.is_empty() {
            continue;
        }
        let best = fabric.iter().map(|&n| nearness_key(machine, gpu, n)).min();
        let nearest: Vec<PciAddr> = fabric
            .iter()
            .copied()
            .filter(|&n| Some(nearness_key(machine, gpu, n)) == best)
            .collect();
        for nic in &rank.nics {
            if !nearest.contains(&nic.pci) {
                bad.push(format!(
                    "{name}: rank {} GPU {gpu} got NIC {}, not among its nearest {nearest:?}",
                    rank.rank, nic.pci
                ));
            }
        }
        if rank.nics.is_empty() {
            bad.push(format!("{name}: rank {} GPU {gpu} got no NIC", rank.rank));
        }
        groups.entry(nearest).or_default().push(rank.nics.len());
    }
    for (nearest, counts) in &groups {
        let (min, max) = (counts.iter().min(), counts.iter().max());
        if let (Some(min), Some(max)) = (min, max)
            && max - min > 1
        {
            bad.push(format!(
                "{name}: NICs {nearest:?} split unevenly: {counts:?}"
            ));
        }
    }

    // CPUs: inside the GPU's NUMA node and disjoint wherever the node has a CPU list.
    for rank in &strict.ranks {
        let numa = rank.gpus.first().and_then(|&g| machine.numa_of(g));
        let node_cpus = numa
            .and_then(|n| machine.numa_node(n))
            .map(|n| n.cpus.clone())
            .unwrap_or_default();
        if !node_cpus.is_empty() && !rank.cpus.is_subset(&node_cpus) {
            bad.push(format!(
                "{name}: rank {} CPUs {} outside NUMA node {numa:?} ({node_cpus})",
                rank.rank, rank.cpus
            ));
        }
        if !rank.cpus.is_subset(&alloc) {
            bad.push(format!(
                "{name}: rank {} CPUs {} outside the machine",
                rank.rank, rank.cpus
            ));
        }
        for other in &strict.ranks {
            if other.rank > rank.rank
                && !node_cpus.is_empty()
                && !other.cpus.is_disjoint(&rank.cpus)
            {
                let other_numa = other.gpus.first().and_then(|&g| machine.numa_of(g));
                if other_numa == numa {
                    bad.push(format!(
                        "{name}: ranks {} and {} share CPUs",
                        rank.rank, other.rank
                    ));
                }
            }
        }
    }

    // Strict refuses for a missing local NIC exactly when some GPU lacks one.
    let expect_no_local = strict
        .ranks
        .iter()
        .any(|r| r.gpus.iter().any(|&g| !has_local_nic(machine, g, &fabric)));
    let got_no_local = strict
        .violations
        .iter()
        .any(|v| v.kind == ViolationKind::NoLocalNic);
    let numa_unknown = strict
        .violations
        .iter()
        .any(|v| v.kind == ViolationKind::TopologyUnknown);
    if expect_no_local != got_no_local && !numa_unknown {
        bad.push(format!(
            "{name}: no_local_nic expected {expect_no_local}, got {got_no_local}"
        ));
    }
    bad
}

fn golden_value(source: &str, result: Result<Machine, String>) -> (serde_json::Value, Vec<String>) {
    match result {
        Ok(machine) => {
            // As the front ends solve: over the fabric the vendor profile keeps.
            let nics = fabric::fabric_nics(&machine, &Profiles::builtin());
            let strict = solve_with_fabric(&machine, &request(&machine, Mode::Strict), &nics);
            let prefer = solve_with_fabric(&machine, &request(&machine, Mode::Prefer), &nics);
            let bad = check_plan(source, &machine, &strict, &prefer);
            (
                serde_json::json!({ "source": source, "strict": strict, "prefer": prefer }),
                bad,
            )
        }
        Err(error) => (
            serde_json::json!({ "source": source, "error": error }),
            Vec::new(),
        ),
    }
}

#[test]
fn shared_topology_files_match_their_golden_plans() {
    let files = topology_files();
    assert!(
        files.len() >= 10,
        "expected the shared topology files under {}",
        shared_topologies().display()
    );
    let mut bad = Vec::new();
    for (rel, path) in files {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let parsed = sources::parse_machine_xml(&text).map_err(|e| e.to_string());
        let (value, mut problems) = golden_value(&rel, parsed);
        bad.append(&mut problems);
        bad.extend(check_golden(
            &golden_dir(),
            &format!("topology-{}", file_stem(&rel)),
            &value,
        ));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn catalog_machines_match_their_golden_plans() {
    let names = catalog::names();
    assert!(names.len() >= 7, "catalog has {} machines", names.len());
    let mut bad = Vec::new();
    for name in names {
        let (value, mut problems) =
            golden_value(name, catalog::machine(name).map_err(|e| e.to_string()));
        assert!(
            value.get("error").is_none(),
            "catalog machine {name}: {value}"
        );
        bad.append(&mut problems);
        bad.extend(check_golden(
            &golden_dir(),
            &format!("catalog-{}", file_stem(name)),
            &value,
        ));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
