//! The binding solver: (machine, step allocation, tasks, mode) -> per-rank Plan.
//!
//! Pure: no I/O. The SPANK plugin and `gpu-affinity explain` both call [`solve`].

//!
//! The steps, one module each: [`ranks`] hands the step's GPUs to the local ranks,
//! [`locality`] places every GPU and fabric NIC in the PCI tree, [`nics`] gives each GPU
//! its nearest NICs split evenly, [`cpus`] splits each NUMA node's allocated cores between
//! the ranks whose GPUs sit there. Problems become typed [`Violation`]s; the plan is
//! always complete, best effort where a violation was found.

mod cpus;
mod locality;
mod nics;
mod ranks;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::model::{Machine, Nic};
use crate::pci::PciAddr;

use locality::{Locality, Nearness, Place};

/// How a step treats placement problems.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Any violation refuses the step.
    Strict,
    /// Violations become warnings; the best plan still applies.
    Prefer,
}

/// What the step asks for on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRequest {
    /// The step's GPUs on this node, in the order Slurm numbers them (local GPU index order).
    pub gpus: Vec<PciAddr>,
    /// CPUs allocated to the step on this node.
    pub cpus: CpuSet,
    /// Local task count.
    pub tasks: u32,
    /// GPUs per task; `None` = the step's GPUs divided evenly among the tasks.
    pub gpus_per_task: Option<u32>,
    pub mode: Mode,
}

/// A NIC as a plan names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NicRef {
    pub pci: PciAddr,
    /// RDMA device name (or netdev when it has none); `None` when unknown.
    pub name: Option<String>,
}

/// One local rank's binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RankPlan {
    pub rank: u32,
    pub gpus: Vec<PciAddr>,
    pub nics: Vec<NicRef>,
    /// Linux cpulist; "" when unknown.
    pub cpus: CpuSet,
    /// NUMA nodes for the memory policy.
    pub mems: Vec<u32>,
    /// One sentence per choice, e.g. "GPU 0000:53:00.0 and NIC 0000:4f:00.0 share switch 0000:45:00.0".
    pub reasons: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    NoGpu,
    NoLocalNic,
    NoLocalCpu,
    GpusNotDivisible,
    TopologyUnknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// `None` for step-wide problems.
    pub rank: Option<u32>,
    pub kind: ViolationKind,
    /// One line a user can act on.
    pub message: String,
}

/// The solver's answer. In `Prefer` mode the same problems are reported as `warnings`
/// and `violations` is empty; in `Strict` mode a non-empty `violations` refuses the step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub mode: Mode,
    pub ranks: Vec<RankPlan>,
    pub violations: Vec<Violation>,
    pub warnings: Vec<Violation>,
    /// Every fabric NIC of the node (for NCCL_IB_HCA-style node-wide lists).
    pub fabric_nics: Vec<NicRef>,
}

impl Plan {
    /// True when the step must not run (strict mode with violations).
    pub fn refused(&self) -> bool {
        !self.violations.is_empty()
    }
}

/// Solve a step's placement over the machine's own fabric NICs
/// ([`Machine::fabric_nics`]). Never panics; every problem is a typed violation.
///
/// Duplicate GPUs in the request count once. GPUs the machine does not know still go to
/// their rank (with a `topology_unknown` violation) but get no NIC.
///
/// Front ends that export a vendor profile's environment call [`solve_with_fabric`] with
/// `fabric::fabric_nics` instead, so a host NIC the profile leaves out of NCCL_IB_HCA is
/// no rank's NIC either.
pub fn solve(machine: &Machine, request: &StepRequest) -> Plan {
    solve_with_fabric(machine, request, &machine.fabric_nics())
}

/// [`solve`] with the node's fabric NICs decided by the caller: only these are given to
/// ranks and listed in [`Plan::fabric_nics`]. A NIC listed twice (one entry per port of a
/// dual-port function) counts once.
pub fn solve_with_fabric(machine: &Machine, request: &StepRequest, fabric: &[&Nic]) -> Plan {
    let locality = Locality::new(machine);
    let mut problems = Problems::default();

    let fabric = one_per_function(fabric);
    let nic_places: Vec<Place> = fabric
        .iter()
        .map(|n| locality.place_or_unknown(n.pci))
        .collect();

    let mut seen = HashSet::new();
    let gpus: Vec<PciAddr> = request
        .gpus
        .iter()
        .copied()
        .filter(|g| seen.insert(*g))
        .collect();
    if request.tasks > ranks::MAX_TASKS {
        problems.push(
            None,
            ViolationKind::NoGpu,
            format!(
                "step: {} local tasks is more than the {} one node can plan; only the first {} ranks are planned",
                request.tasks,
                ranks::MAX_TASKS,
                ranks::MAX_TASKS
            ),
        );
    }
    let split = ranks::split_gpus(&gpus, request.tasks, request.gpus_per_task);
    if let Some(message) = split.uneven {
        problems.push(None, ViolationKind::GpusNotDivisible, message);
    }

    // Every GPU some rank holds, located once.
    let held: Vec<(usize, PciAddr, Option<Place>)> = split
        .per_rank
        .iter()
        .enumerate()
        .flat_map(|(r, gs)| gs.iter().map(move |g| (r, *g)))
        .map(|(r, g)| (r, g, locality.place(g)))
        .collect();
    let located: Vec<Place> = held.iter().filter_map(|(_, _, p)| p.clone()).collect();
    let mut choices = nics::choose(&located, &nic_places).into_iter();

    let mut ranks: Vec<RankPlan> = split
        .per_rank
        .iter()
        .enumerate()
        .map(|(r, gs)| RankPlan {
            rank: r as u32,
            gpus: gs.clone(),
            nics: Vec::new(),
            cpus: CpuSet::new(),
            mems: Vec::new(),
            reasons: Vec::new(),
        })
        .collect();
    let mut rank_nics: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); ranks.len()];
    let mut rank_mems: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); ranks.len()];
    // NUMA node -> ranks with a GPU there whose allocation has CPUs on it.
    let mut numa_ranks: BTreeMap<u32, Vec<usize>> = BTreeMap::new();

    for (r, gpu, place) in &held {
        let rank = *r as u32;
        let Some(place) = place else {
            problems.push(
                Some(rank),
                ViolationKind::TopologyUnknown,
                format!(
                    "rank {rank}: GPU {gpu} is not in this node's PCI tree; check the step's GPU list or use --gpu-affinity=prefer"
                ),
            );
            if fabric.is_empty() {
                problems.push(
                    Some(rank),
                    ViolationKind::NoLocalNic,
                    no_fabric_message(rank, *gpu),
                );
            }
            continue;
        };

        // NICs.
        let chosen = choices.next().unwrap_or_default();
        for c in &chosen {
            rank_nics[*r].insert(c.nic);
            ranks[*r]
                .reasons
                .push(c.nearness.reason(*gpu, fabric[c.nic].pci));
        }
        if fabric.is_empty() {
            ranks[*r]
                .reasons
                .push(format!("GPU {gpu}: this node has no fabric NIC"));
            problems.push(
                Some(rank),
                ViolationKind::NoLocalNic,
                no_fabric_message(rank, *gpu),
            );
        } else if let Some(numa) = place.numa
            && !nic_places.iter().any(|n| is_local(place, n))
        {
            let nearest = chosen.first().map(|c| (fabric[c.nic].pci, &c.nearness));
            problems.push(
                Some(rank),
                ViolationKind::NoLocalNic,
                remote_nic_message(rank, *gpu, numa, nearest),
            );
        }

        // NUMA node and CPUs.
        let Some(numa) = place.numa else {
            let known = match machine.numa_nodes.len() {
                0 => "this machine lists no NUMA nodes".to_string(),
                n => format!("this machine has {n} NUMA nodes"),
            };
            problems.push(
                Some(rank),
                ViolationKind::TopologyUnknown,
                format!(
                    "rank {rank}: GPU {gpu} has no known NUMA node and {known}; fix the topology source or use --gpu-affinity=prefer"
                ),
            );
            continue;
        };
        rank_mems[*r].insert(numa);
        let node_cpus = machine
            .numa_node(numa)
            .map(|n| &n.cpus)
            .filter(|c| !c.is_empty());
        let Some(node_cpus) = node_cpus else {
            problems.push(
                Some(rank),
                ViolationKind::TopologyUnknown,
                format!(
                    "rank {rank}: GPU {gpu} is on NUMA node {numa}, which has no CPU list; fix the topology source or use --gpu-affinity=prefer"
                ),
            );
            continue;
        };
        if node_cpus.is_disjoint(&request.cpus) {
            problems.push(
                Some(rank),
                ViolationKind::NoLocalCpu,
                format!(
                    "rank {rank}: GPU {gpu} is on NUMA node {numa} (CPUs {node_cpus}) but the step has no CPU there (allocated: \"{}\"); request CPUs on NUMA node {numa} or use --gpu-affinity=prefer",
                    request.cpus
                ),
            );
            continue;
        }
        let on_node = numa_ranks.entry(numa).or_default();
        if !on_node.contains(r) {
            on_node.push(*r);
        }
    }

    for (r, plan) in ranks.iter_mut().enumerate() {
        if plan.gpus.is_empty() {
            let rank = plan.rank;
            problems.push(
                Some(rank),
                ViolationKind::NoGpu,
                format!(
                    "rank {rank}: no GPU is left for this rank ({} GPUs for {} tasks); request at least one GPU per task or fewer tasks",
                    gpus.len(),
                    request.tasks.min(ranks::MAX_TASKS)
                ),
            );
        }
        plan.nics = rank_nics[r]
            .iter()
            .map(|&n| NicRef {
                pci: fabric[n].pci,
                name: fabric[n].name().map(str::to_string),
            })
            .collect();
        plan.mems = rank_mems[r].iter().copied().collect();
    }

    assign_cpus(machine, &request.cpus, &numa_ranks, &mut ranks);

    let problems = problems.into_sorted();
    let (violations, warnings) = match request.mode {
        Mode::Strict => (problems, Vec::new()),
        Mode::Prefer => (Vec::new(), problems.into_iter().map(as_warning).collect()),
    };
    Plan {
        mode: request.mode,
        ranks,
        violations,
        warnings,
        fabric_nics: fabric
            .iter()
            .map(|n| NicRef {
                pci: n.pci,
                name: n.name().map(str::to_string),
            })
            .collect(),
    }
}

/// The node's fabric NICs, one per PCI function, sorted by PCI address.
fn one_per_function<'m>(fabric: &[&'m Nic]) -> Vec<&'m Nic> {
    let mut fabric = fabric.to_vec();
    fabric.sort_by_key(|n| n.pci);
    fabric.dedup_by_key(|n| n.pci);
    fabric
}

/// A NIC counts as on the GPU's own NUMA node when both NUMA nodes are known and equal, or
/// when the NIC's is unknown but the PCI tree (switch or root complex) ties it to the GPU.
fn is_local(gpu: &Place, nic: &Place) -> bool {
    match (gpu.numa, nic.numa) {
        (Some(a), Some(b)) => a == b,
        _ => locality::nearness(gpu, nic).shares_pci(),
    }
}

fn no_fabric_message(rank: u32, gpu: PciAddr) -> String {
    format!(
        "rank {rank}: GPU {gpu} has no fabric NIC on its PCIe switch or NUMA node (this node has no fabric NIC); use --gpu-affinity=prefer or drain this node"
    )
}

fn remote_nic_message(
    rank: u32,
    gpu: PciAddr,
    numa: u32,
    nearest: Option<(PciAddr, &Nearness)>,
) -> String {
    let nearest = match nearest {
        Some((
            nic,
            Nearness::Remote {
                nic_numa: Some(n), ..
            },
        )) => {
            format!(" (nearest NIC {nic} is on NUMA node {n}, across the inter-socket link)")
        }
        Some((nic, _)) => format!(" (nearest NIC {nic} has no known NUMA node)"),
        None => String::new(),
    };
    format!(
        "rank {rank}: GPU {gpu} has no fabric NIC on its PCIe switch or NUMA node {numa}{nearest}; use --gpu-affinity=prefer or drain this node"
    )
}

/// Give every rank its CPUs: each NUMA node's allocated cores split between the ranks whose
/// GPUs sit there; ranks left without CPUs (no GPU, no allocated core near their GPU,
/// unknown topology) share what the allocation has left, or the whole allocation.
fn assign_cpus(
    machine: &Machine,
    alloc: &CpuSet,
    numa_ranks: &BTreeMap<u32, Vec<usize>>,
    ranks: &mut [RankPlan],
) {
    let cores = cpus::Cores::new(machine);
    let mut given = CpuSet::new();
    for (&numa, members) in numa_ranks {
        let Some(node) = machine.numa_node(numa) else {
            continue;
        };
        let local = node.cpus.intersection(alloc);
        let shares = cpus::split(&cores.within(&local), members.len());
        for (i, (&r, share)) in members.iter().zip(shares).enumerate() {
            ranks[r].reasons.push(format!(
                "CPUs {share}: share {} of {} of the step's CPUs on NUMA node {numa} ({local})",
                i + 1,
                members.len()
            ));
            share.iter().for_each(|cpu| {
                given.insert(cpu);
            });
            if ranks[r].cpus.is_empty() {
                ranks[r].cpus = share;
            } else {
                share.iter().for_each(|cpu| {
                    ranks[r].cpus.insert(cpu);
                });
            }
        }
    }

    let leftover: Vec<usize> = (0..ranks.len())
        .filter(|&r| ranks[r].cpus.is_empty())
        .collect();
    if leftover.is_empty() {
        return;
    }
    let rest = alloc.difference(&given);
    let (pool, what) = if rest.is_empty() {
        (alloc.clone(), "the whole allocation, shared")
    } else {
        (rest, "the allocation's CPUs no GPU-local rank holds")
    };
    let shares = cpus::split(&cores.within(&pool), leftover.len());
    for (&r, share) in leftover.iter().zip(shares) {
        let why = if ranks[r].gpus.is_empty() {
            "this rank has no GPU".to_string()
        } else {
            "no allocated CPU is known near this rank's GPU(s)".to_string()
        };
        ranks[r]
            .reasons
            .push(format!("CPUs {share}: {why}; using {what}"));
        ranks[r].cpus = share;
    }
}

/// The way out strict messages offer; under prefer the user already took it.
const PREFER_HINT: &str = "use --gpu-affinity=prefer";

/// The same problem, worded for a step that runs anyway: the advice to switch to prefer
/// is dropped (the user is in prefer) and the message says the step continues.
fn as_warning(mut v: Violation) -> Violation {
    let without_hint = v
        .message
        .replace(&format!(" or {PREFER_HINT}"), "")
        .replace(&format!("{PREFER_HINT} or "), "");
    v.message = format!("{without_hint} (continuing under --gpu-affinity=prefer)");
    v
}

/// Problems in the order users read them: step-wide first, then by rank.
#[derive(Default)]
struct Problems(Vec<Violation>);

impl Problems {
    fn push(&mut self, rank: Option<u32>, kind: ViolationKind, message: String) {
        self.0.push(Violation {
            rank,
            kind,
            message,
        });
    }

    fn into_sorted(mut self) -> Vec<Violation> {
        // Stable: within a rank, the order the checks found them.
        self.0.sort_by_key(|v| v.rank);
        self.0
    }
}
