//! The audit's checks, in report order. Each looks at what the plugin itself would use
//! (the fabric facade's NICs and decision, the solver's plan, Slurm's own files) so the
//! audit and a real step cannot disagree.

use std::collections::BTreeSet;

use super::product::{self, SELF_BUILT_TOPOLOGY};
use super::{Area, Checked, Inputs, Outcome, Tier};
use crate::fabric::topo::TopoDecision;
use crate::fabric::{self, Detection, FabricDecision, StepInputs};
use crate::health::parse::mount_at;
use crate::model::{Machine, Nic};
use crate::slurm::slurm_conf::SlurmConf;
use crate::slurm::step_span;
use crate::slurm::topology::{Kind, Topology};
use crate::solver::{self, Mode, Plan, StepRequest, ViolationKind};

/// What every check shares: the detection, the fabric NICs and the plan, made once.
struct Node<'a> {
    machine: &'a Machine,
    detection: Detection,
    nics: Vec<&'a Nic>,
    plan: Option<Plan>,
}

pub(super) fn run(inputs: &Inputs<'_>) -> Vec<Checked> {
    let machine = inputs.machine;
    let detection = fabric::detect_with(machine, inputs.profiles);
    let nics = fabric::fabric_nics_for(machine, inputs.profiles, &detection);
    // One rank per GPU over the whole node: what a full-node step gets.
    let gpus: Vec<_> = machine
        .gpus_in_slurm_order()
        .iter()
        .map(|g| g.pci)
        .collect();
    let plan = (!gpus.is_empty()).then(|| {
        let request = StepRequest {
            tasks: gpus.len() as u32,
            gpus,
            cpus: machine.cpus(),
            gpus_per_task: None,
            mode: Mode::Strict,
        };
        solver::solve_with_fabric(machine, &request, &nics)
    });
    let node = Node {
        machine,
        detection,
        nics,
        plan,
    };
    // Where the plugin would write a generated NCCL topology file; only whether the
    // decision points there counts here.
    let generated = crate::step_files::topology_path(
        std::path::Path::new(crate::config::DEFAULT_RUN_DIR),
        "<JOBID>",
        "<STEPID>",
        "<PID>",
    )
    .display()
    .to_string();
    let fabric = node.plan.as_ref().map(|plan| {
        let none = |_: &str| None;
        let step = StepInputs {
            profiles: inputs.profiles,
            existing: &none,
            forced: inputs.forced,
            vendor_topology: inputs.vendor_topology,
            generated_topology_path: &generated,
        };
        fabric::step_fabric_for(machine, plan, &step, node.detection.clone())
    });
    let conf = inputs.slurm.parsed();
    vec![
        fabric_nics(&node),
        fabric_numa(&node),
        plan_check(&node, Area::Fabric),
        plan_check(&node, Area::Numa),
        nccl_topology(&node, fabric.as_ref()),
        storage(inputs),
        placement_requested(inputs, &node),
        placement_node(inputs, conf),
        managed(inputs, &node),
    ]
}

/// Which check a result belongs to; [`Check::says`] makes the result.
#[derive(Clone, Copy)]
struct Check {
    id: &'static str,
    tier: Tier,
    area: Area,
}

impl Check {
    fn says(self, outcome: Outcome, summary: impl Into<String>, evidence: Vec<String>) -> Checked {
        Checked {
            id: self.id,
            tier: self.tier,
            area: self.area,
            outcome,
            summary: summary.into(),
            evidence,
        }
    }
}

fn numa_word(n: Option<u32>) -> String {
    n.map_or("unknown".to_string(), |n| n.to_string())
}

fn nic_name(nic: &Nic) -> String {
    nic.name()
        .map_or_else(|| nic.pci.to_string(), str::to_string)
}

/// NICs grouped by NUMA node, one evidence line per node: `NUMA 0: 16 efa rdmap79s0,...`.
fn nics_by_numa(machine: &Machine, nics: &[&Nic]) -> Vec<String> {
    let mut by_node: std::collections::BTreeMap<Option<u32>, Vec<&Nic>> = Default::default();
    for n in nics {
        by_node
            .entry(machine.cpu_numa_of(n.pci))
            .or_default()
            .push(n);
    }
    by_node
        .into_iter()
        .map(|(node, nics)| {
            let kinds: BTreeSet<&str> = nics.iter().map(|n| n.kind.as_str()).collect();
            format!(
                "NUMA {}: {} {} {}",
                numa_word(node),
                nics.len(),
                kinds.into_iter().collect::<Vec<_>>().join("/"),
                nics.iter()
                    .map(|n| nic_name(n))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        })
        .collect()
}

const FABRIC_NICS: Check = Check {
    id: "fabric.nics",
    tier: Tier::Fabric,
    area: Area::Fabric,
};

/// Fabric NICs present: the facade's set, the one ranks get.
fn fabric_nics(node: &Node<'_>) -> Checked {
    let m = node.machine;
    let profile = format!(
        "vendor {} instance {} profile {}",
        node.detection.vendor.as_str(),
        node.detection.instance.as_deref().unwrap_or("unknown"),
        node.detection.profile
    );
    if node.nics.is_empty() {
        let mut evidence = vec![profile];
        let all: Vec<&Nic> = m.nics.iter().collect();
        evidence.extend(
            nics_by_numa(m, &all)
                .into_iter()
                .map(|l| format!("not fabric: {l}")),
        );
        return FABRIC_NICS.says(
            Outcome::Problem,
            "no fabric NIC: inter-node traffic would cross the host network",
            evidence,
        );
    }
    let kinds: BTreeSet<&str> = node.nics.iter().map(|n| n.kind.as_str()).collect();
    let mut evidence = vec![profile];
    evidence.extend(nics_by_numa(m, &node.nics));
    FABRIC_NICS.says(
        Outcome::Pass,
        format!(
            "{} fabric NICs ({})",
            node.nics.len(),
            kinds.into_iter().collect::<Vec<_>>().join(", ")
        ),
        evidence,
    )
}

/// Fabric NICs NUMA-aligned: each NIC's NUMA node is known and holds GPUs, and every
/// NUMA node with GPUs has a NIC (the NIC-side view; the plan gives the GPU side).
fn fabric_numa(node: &Node<'_>) -> Checked {
    let m = node.machine;
    let check = Check {
        id: "fabric.numa",
        tier: Tier::Fabric,
        area: Area::Fabric,
    };
    if node.nics.is_empty() || m.gpus.is_empty() {
        return check.says(
            Outcome::NotChecked,
            "no fabric NIC or no GPU to align",
            Vec::new(),
        );
    }
    let gpu_nodes: BTreeSet<Option<u32>> = m.gpus.iter().map(|g| m.cpu_numa_of(g.pci)).collect();
    let nic_nodes: BTreeSet<Option<u32>> = node.nics.iter().map(|n| m.cpu_numa_of(n.pci)).collect();
    let mut problems = Vec::new();
    for nic in &node.nics {
        match m.cpu_numa_of(nic.pci) {
            None => problems.push(format!(
                "NIC {} ({}): the node reports no NUMA node for it",
                nic_name(nic),
                nic.pci
            )),
            Some(n) if !gpu_nodes.contains(&Some(n)) => problems.push(format!(
                "NIC {} ({}) is on NUMA node {n}, which holds no GPU",
                nic_name(nic),
                nic.pci
            )),
            Some(_) => {}
        }
    }
    for n in gpu_nodes.iter().flatten() {
        if !nic_nodes.contains(&Some(*n)) {
            let gpus: Vec<String> = m
                .gpus
                .iter()
                .filter(|g| m.cpu_numa_of(g.pci) == Some(*n))
                .map(|g| g.pci.to_string())
                .collect();
            problems.push(format!(
                "NUMA node {n} (GPUs {}) has no fabric NIC",
                gpus.join(",")
            ));
        }
    }
    let numa_list = |set: &BTreeSet<Option<u32>>| {
        set.iter()
            .map(|n| numa_word(*n))
            .collect::<Vec<_>>()
            .join(",")
    };
    if problems.is_empty() {
        return check.says(
            Outcome::Pass,
            format!(
                "fabric NICs on NUMA nodes {}, GPUs on {}",
                numa_list(&nic_nodes),
                numa_list(&gpu_nodes)
            ),
            Vec::new(),
        );
    }
    check.says(
        Outcome::Problem,
        format!("{} fabric NUMA problem(s)", problems.len()),
        problems,
    )
}

/// The plan for one rank per GPU, as the plugin makes it: `Area::Fabric` reports the
/// GPU-NIC side (`no_local_nic`), `Area::Numa` the GPU-CPU-memory side (the rest).
fn plan_check(node: &Node<'_>, area: Area) -> Checked {
    let (id, tier, what) = match area {
        Area::Fabric => ("plan.gpu_nic", Tier::Fabric, "GPU-NIC"),
        _ => ("plan.gpu_numa", Tier::Gpu, "GPU-CPU-memory"),
    };
    let check = Check { id, tier, area };
    let Some(plan) = &node.plan else {
        return check.says(Outcome::NotChecked, "no GPU", Vec::new());
    };
    let ours = |kind: ViolationKind| (kind == ViolationKind::NoLocalNic) == (area == Area::Fabric);
    let problems: Vec<String> = plan
        .violations
        .iter()
        .filter(|v| ours(v.kind))
        .map(|v| v.message.clone())
        .collect();
    if !problems.is_empty() {
        return check.says(
            Outcome::Problem,
            format!("the plan finds {} {what} problem(s)", problems.len()),
            problems,
        );
    }
    if area == Area::Fabric && node.nics.is_empty() {
        return check.says(Outcome::NotChecked, "no fabric NIC", Vec::new());
    }
    let join = |v: Vec<String>| {
        if v.is_empty() {
            "-".into()
        } else {
            v.join(",")
        }
    };
    let evidence = plan
        .ranks
        .iter()
        .map(|r| {
            let gpus = join(r.gpus.iter().map(ToString::to_string).collect());
            match area {
                Area::Fabric => format!(
                    "rank {}: GPU {gpus} NIC {}",
                    r.rank,
                    join(
                        r.nics
                            .iter()
                            .map(|n| n.name.clone().unwrap_or_else(|| n.pci.to_string()))
                            .collect()
                    )
                ),
                _ => format!(
                    "rank {}: GPU {gpus} CPUs {} memory NUMA {}",
                    r.rank,
                    r.cpus,
                    join(r.mems.iter().map(ToString::to_string).collect())
                ),
            }
        })
        .collect();
    check.says(
        Outcome::Pass,
        format!("{what} alignment verified for {} ranks", plan.ranks.len()),
        evidence,
    )
}

/// NCCL topology awareness: where the profile says the PCI tree is virtual it names a
/// vendor topology file; the facade's decision says whether that file fits.
fn nccl_topology(node: &Node<'_>, fabric: Option<&FabricDecision>) -> Checked {
    let check = Check {
        id: "nccl.topology",
        tier: Tier::Fabric,
        area: Area::Fabric,
    };
    let Some(fabric) = fabric else {
        return check.says(Outcome::NotChecked, "no GPU", Vec::new());
    };
    let profile = &node.detection.profile;
    match &fabric.topology {
        None => check.says(Outcome::Pass,
            format!("profile {profile} names no topology file: NCCL reads the node's PCI tree"),
            Vec::new(),
        ),
        Some(TopoDecision::Use { path }) => check.says(Outcome::Pass,
            format!("vendor topology file {path} describes this node"),
            Vec::new(),
        ),
        Some(TopoDecision::Generate { reason }) => check.says(Outcome::Advice,
            "the PCI tree is virtual and no vendor topology file fits: the plugin generates one per step (steps run with --gpu-affinity=off get none)",
            vec![reason.clone()],
        ),
        Some(TopoDecision::Refuse { reason }) => check.says(Outcome::Problem,
            "the vendor topology file misplaces devices: NCCL jobs that use it run slowly (the plugin generates its own per step)",
            vec![reason.clone()],
        ),
    }
}

/// Storage mounts configured (the health config's `[[storage.mount]]`) and present, of
/// their type.
fn storage(inputs: &Inputs<'_>) -> Checked {
    let check = Check {
        id: "storage.mounts",
        tier: Tier::Storage,
        area: Area::Storage,
    };
    let configured = inputs.storage.configured;
    if configured.is_empty() {
        return check.says(Outcome::Advice,
            "no [[storage.mount]] in the health config: checkpoint and dataset mounts are not checked before jobs",
            Vec::new(),
        );
    }
    let wanted: Vec<String> = configured
        .iter()
        .map(|m| format!("{} {}", m.path, m.fstype.as_deref().unwrap_or("(any type)")))
        .collect();
    let Some(mounts) = inputs.storage.mounts else {
        return check.says(
            Outcome::NotChecked,
            "no mount table for this machine (a catalog machine, a topology file, or a sysfs tree without proc/mounts)",
            wanted,
        );
    };
    let mut problems = Vec::new();
    let mut present = Vec::new();
    for m in configured {
        match (mount_at(mounts, &m.path), m.fstype.as_deref()) {
            (None, _) => problems.push(format!("{} is not mounted", m.path)),
            (Some(e), Some(want)) if e.fstype != want => {
                problems.push(format!("{} is {}, expected {want}", m.path, e.fstype));
            }
            (Some(e), _) => present.push(format!("{} {}", m.path, e.fstype)),
        }
    }
    if problems.is_empty() {
        return check.says(
            Outcome::Pass,
            format!("{} configured mount(s) present", present.len()),
            present,
        );
    }
    let missing = problems.len();
    problems.extend(present);
    check.says(
        Outcome::Problem,
        format!(
            "{missing} of {} configured mount(s) missing or of another type",
            configured.len()
        ),
        problems,
    )
}

/// Where this cluster's topology would come from, for advice.
fn topology_advice(inputs: &Inputs<'_>, node: &Node<'_>) -> String {
    let conf = inputs.slurm.parsed();
    let found = conf.and_then(|c| {
        product::recognise(
            node.detection.vendor,
            c,
            inputs.slurm.conf_real_path.as_deref(),
        )
    });
    match found {
        Some((p, _)) => format!("on {}: {}", p.name, p.topology),
        None => format!("generate one with {SELF_BUILT_TOPOLOGY}"),
    }
}

fn kind_word(t: &Topology) -> &'static str {
    match t.kind {
        Kind::Tree(_) => "tree",
        Kind::Block(_) => "block",
        Kind::Flat => "flat",
    }
}

/// Placement requested: slurm.conf's TopologyPlugin, or topology.yaml (25.05+), with a
/// topology file that parses and places something.
fn placement_requested(inputs: &Inputs<'_>, node: &Node<'_>) -> Checked {
    let check = Check {
        id: "placement.topology",
        tier: Tier::Cluster,
        area: Area::Placement,
    };
    let path = inputs.slurm.conf_path.display().to_string();
    let conf = match &inputs.slurm.conf {
        Err(e) => return check.says(Outcome::Problem, e.clone(), Vec::new()),
        Ok(None) => {
            return check.says(
                Outcome::NotChecked,
                format!("no slurm.conf at {path} (name one with --slurm-conf)"),
                Vec::new(),
            );
        }
        Ok(Some(c)) => c,
    };
    let plugin = conf.topology_plugin.as_deref();
    let mut evidence = vec![format!(
        "{path}: TopologyPlugin={}",
        plugin.unwrap_or("(unset)")
    )];
    let advice = topology_advice(inputs, node);
    let (file, topologies) = match &inputs.slurm.topology {
        Err(e) => return check.says(Outcome::Problem, e.clone(), evidence),
        Ok(None) => {
            evidence.push(advice);
            let summary = match plugin {
                Some(p) if p != "topology/flat" && p != "topology/none" => {
                    format!(
                        "TopologyPlugin={p} but no topology.yaml or topology.conf next to slurm.conf"
                    )
                }
                _ => "no placement topology: multi-node jobs may land on nodes far apart".into(),
            };
            return check.says(Outcome::Problem, summary, evidence);
        }
        Ok(Some(t)) => t,
    };
    let yaml = file.extension().is_some_and(|e| e == "yaml" || e == "yml");
    for t in topologies {
        evidence.push(format!(
            "{}: topology {}{} ({})",
            file.display(),
            t.name,
            if t.cluster_default {
                ", cluster default"
            } else {
                ""
            },
            kind_word(t)
        ));
    }
    let plugin_places = plugin.is_some_and(|p| p == "topology/tree" || p == "topology/block");
    if !yaml && !plugin_places {
        evidence.push(advice);
        let summary = format!(
            "{} exists but slurm.conf sets no TopologyPlugin=topology/tree or \
             topology/block: slurmctld ignores it",
            file.display()
        );
        return check.says(Outcome::Problem, summary, evidence);
    }
    if topologies.iter().all(|t| matches!(t.kind, Kind::Flat)) {
        evidence.push(advice);
        return check.says(
            Outcome::Problem,
            "every topology is flat: nothing keeps a job in one block or switch",
            evidence,
        );
    }
    check.says(
        Outcome::Pass,
        format!("placement by {}", file.display()),
        evidence,
    )
}

/// This node in a block (or leaf switch) of the topology each of its partitions is
/// placed by (the partition's `Topology=`, else the cluster default).
fn placement_node(inputs: &Inputs<'_>, conf: Option<&SlurmConf>) -> Checked {
    let check = Check {
        id: "placement.node",
        tier: Tier::Cluster,
        area: Area::Placement,
    };
    let (Some(conf), Ok(Some((file, topologies)))) = (conf, &inputs.slurm.topology) else {
        return check.says(
            Outcome::NotChecked,
            "no slurm.conf or topology file to place this node by",
            Vec::new(),
        );
    };
    let Some(name) = inputs.slurm.node.as_deref() else {
        return check.says(
            Outcome::NotChecked,
            "this node's Slurm name is unknown (name it with --node)",
            Vec::new(),
        );
    };
    let partitions = conf.partitions_of(name);
    let mut scopes: Vec<(String, Option<&str>)> = partitions
        .iter()
        .map(|p| (format!("partition {}", p.name), p.topology.as_deref()))
        .collect();
    if scopes.is_empty() {
        scopes.push(("no partition of slurm.conf".to_string(), None));
    }
    let mut problems = Vec::new();
    let mut placed = Vec::new();
    for (scope, named) in scopes {
        let Some(t) = step_span::partition_topology(topologies, named) else {
            continue;
        };
        match step_span::unit_of(t, name, inputs.slurm.switch_level) {
            Some((unit, u)) => placed.push(format!(
                "{scope}: topology {} {} {u}",
                t.name,
                match unit {
                    step_span::Unit::Block => "block".to_string(),
                    step_span::Unit::LeafSwitch => "leaf switch".to_string(),
                    step_span::Unit::Switch(level) => format!("level-{level} switch"),
                }
            )),
            None if matches!(t.kind, Kind::Flat) => {
                problems.push(format!("{scope}: topology {} is flat", t.name));
            }
            None => problems.push(format!(
                "{scope}: node {name} is in no block or leaf switch of topology {} ({})",
                t.name,
                file.display()
            )),
        }
    }
    if problems.is_empty() {
        return check.says(
            Outcome::Pass,
            format!("node {name} is placed in every topology it is scheduled by"),
            placed,
        );
    }
    problems.extend(placed);
    check.says(
        Outcome::Problem,
        format!("node {name} is not placed: strict multi-node steps here are refused"),
        problems,
    )
}

/// Managed or self-built, by the detected vendor's product marks.
fn managed(inputs: &Inputs<'_>, node: &Node<'_>) -> Checked {
    let check = Check {
        id: "cluster.managed",
        tier: Tier::Cluster,
        area: Area::Managed,
    };
    let Some(conf) = inputs.slurm.parsed() else {
        return check.says(
            Outcome::NotChecked,
            "no slurm.conf to tell a managed product by",
            Vec::new(),
        );
    };
    let vendor = node.detection.vendor;
    match product::recognise(vendor, conf, inputs.slurm.conf_real_path.as_deref()) {
        Some((p, why)) => check.says(
            Outcome::Pass,
            format!("managed: {}", p.name),
            vec![why, format!("{} owns {}", p.name, p.owns)],
        ),
        None => {
            let looked: Vec<String> = product::candidates(vendor)
                .map(|p| {
                    format!(
                        "not {}: {}",
                        p.name,
                        match p.mark {
                            product::Mark::Include(f) => format!("slurm.conf does not include {f}"),
                            product::Mark::RealPathUnder(d) =>
                                format!("slurm.conf is not under {d}"),
                        }
                    )
                })
                .collect();
            check.says(Outcome::Problem,
                format!(
                    "self-built (or a product without a known mark) on vendor {}: topology, gres.conf and health wiring are the admin's to keep",
                    vendor.as_str()
                ),
                looked,
            )
        }
    }
}
