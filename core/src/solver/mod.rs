//! The binding solver: (machine, step allocation, tasks, mode) -> per-rank Plan.
//!
//! Pure: no I/O. The SPANK plugin and `gpu-affinity explain` both call [`solve`].
//!
//! The steps, one module each: [`ranks`] hands the step's GPUs to the local ranks,
//! [`locality`] places every GPU and fabric NIC in the PCI tree, [`nics`] gives each GPU
//! its nearest NICs split evenly, [`cpus`] splits each NUMA node's allocated cores between
//! the ranks whose GPUs sit there. Problems become typed [`Violation`]s; the plan is
//! always complete, best effort where a violation was found.
//!
//! CPUs are disjoint between ranks unless the step has fewer CPUs on a NUMA node than
//! ranks whose GPUs sit there (then they share single CPUs), or a rank has a violation
//! (no GPU, no allocated CPU on its GPU's NUMA node, unknown topology) and takes CPUs
//! from what is left for prefer. Every rank whose CPUs another rank also holds has a
//! reason line `CPUs X are shared with rank N`.

mod cpus;
mod locality;
mod nics;
mod ranks;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::model::{Machine, Nic, PciIndex};
use crate::numa::{CpuNode, SocketVia};
use crate::pci::PciAddr;

use locality::{Nearness, Place};
use nics::NicChoice;

pub use ranks::MAX_TASKS;

/// How a step treats placement problems. Also the admin's floor (`enforce`): the
/// weakest of these a step may run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Any violation refuses the step.
    Strict,
    /// Violations become warnings; the best plan still applies.
    Prefer,
}

impl Mode {
    /// `prefer` or `strict`, the words of `enforce`, `--mode` and `--gpu-affinity`.
    pub fn parse(word: &str) -> Option<Mode> {
        match word {
            "prefer" => Some(Mode::Prefer),
            "strict" => Some(Mode::Strict),
            _ => None,
        }
    }

    /// Whether a problem refuses the step (strict) rather than being a warning the step
    /// runs with (prefer): the one place that is decided, for the solver's problems and
    /// the plugin's own alike.
    pub fn refuses(self) -> bool {
        self == Mode::Strict
    }
}

/// What a strict refusal tells the user to do when the node lacks what the step needs:
/// the one wording, for the solver's problems and the plugin's own.
pub const REFUSAL_ADVICE: &str = "use --gpu-affinity=prefer or drain this node";

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
    /// A rank is left without a GPU.
    NoGpu,
    /// A GPU has no fabric NIC on its own NUMA node (or the node has none at all).
    NoLocalNic,
    /// The step has no allocated CPU on a rank's GPU's NUMA node.
    NoLocalCpu,
    GpusNotDivisible,
    /// More local tasks than one solve plans ([`MAX_TASKS`]).
    TooManyTasks,
    TopologyUnknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// `None` for step-wide problems.
    pub rank: Option<u32>,
    pub kind: ViolationKind,
    /// One line a user can act on: `rank N: <problem>; <advice>` (`step: ...` when
    /// step-wide), built by [`Violation::new`].
    pub message: String,
    /// What is wrong, without a rank prefix (`rank` says which).
    pub problem: String,
    /// What to do, worded for the plan's mode: strict offers `--gpu-affinity=prefer`
    /// where running anyway makes sense; prefer says the step continues.
    pub advice: String,
}

impl Violation {
    /// The one place a violation's `message` is put together.
    pub fn new(
        rank: Option<u32>,
        kind: ViolationKind,
        problem: impl Into<String>,
        advice: impl Into<String>,
    ) -> Self {
        let (problem, advice) = (problem.into(), advice.into());
        let message = match rank {
            Some(r) => format!("rank {r}: {problem}; {advice}"),
            None => format!("step: {problem}; {advice}"),
        };
        Self {
            rank,
            kind,
            message,
            problem,
            advice,
        }
    }
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
///
/// The phases, in order: place the fabric NICs, hand the GPUs to the ranks, locate every
/// held GPU, then per GPU its NICs and its NUMA node, then per rank what is left (no
/// GPU, NIC names, memory nodes, assumptions), then the CPUs; the problems found on the
/// way become violations or warnings for the request's mode.
pub fn solve_with_fabric(machine: &Machine, request: &StepRequest, fabric: &[&Nic]) -> Plan {
    let index = PciIndex::new(machine);
    let mut problems = Problems::default();

    let fabric = one_per_function(fabric);
    let nic_places = place_nics(machine, &index, &fabric);
    let gpus = distinct_gpus(&request.gpus);
    let split = split_between_ranks(&gpus, request, &mut problems);
    let held = locate_held_gpus(machine, &index, &split.per_rank);
    let located: Vec<Place> = held.iter().filter_map(|h| h.place.clone()).collect();
    let mut choices = nics::choose(&located, &nic_places).into_iter();

    let mut ranks = empty_plans(&split.per_rank);
    let mut near = Nearby::new(ranks.len());
    for h in held {
        let rank = Some(h.rank as u32);
        ranks[h.rank].reasons.extend(h.notes);
        let Some(place) = &h.place else {
            unplaced_gpu(rank, h.gpu, fabric.is_empty(), &mut problems);
            continue;
        };
        let chosen = choices.next().unwrap_or_default();
        give_nics(
            &mut ranks[h.rank],
            &mut near.nics[h.rank],
            h.gpu,
            &chosen,
            &fabric,
        );
        if let Some(problem) = missing_local_nic(h.gpu, place, &chosen, &fabric, &nic_places) {
            problems.push(rank, ViolationKind::NoLocalNic, problem, Fix::Node);
        }
        let Some(numa) = gpu_numa_node(machine, rank, h.gpu, place, &mut problems) else {
            continue;
        };
        near.mems[h.rank].insert(numa);
        if has_allocated_cpus(machine, request, rank, h.gpu, numa, &mut problems) {
            let on_node = near.numa_ranks.entry(numa).or_default();
            if !on_node.contains(&h.rank) {
                on_node.push(h.rank);
            }
        }
    }
    finish_rank_plans(
        machine,
        request,
        gpus.len(),
        &fabric,
        &near,
        &mut ranks,
        &mut problems,
    );

    assign_cpus(machine, &request.cpus, &near.numa_ranks, &mut ranks);
    note_shared_cpus(&mut ranks);
    into_plan(request.mode, ranks, problems, &fabric)
}

/// Each fabric NIC's place in the PCI tree (unknown where the tree lacks it), by the
/// Grace rules.
fn place_nics<'m>(machine: &'m Machine, index: &PciIndex<'m>, fabric: &[&Nic]) -> Vec<Place<'m>> {
    fabric
        .iter()
        .map(|n| socket_place(machine, locality::place_or_unknown(index, n.pci), None))
        .collect()
}

/// The request's GPUs, each once, in request order.
fn distinct_gpus(requested: &[PciAddr]) -> Vec<PciAddr> {
    let mut seen = HashSet::new();
    requested
        .iter()
        .copied()
        .filter(|g| seen.insert(*g))
        .collect()
}

/// Hand the GPUs to the ranks; a task count past [`MAX_TASKS`] and an uneven split are
/// step-wide problems.
fn split_between_ranks(
    gpus: &[PciAddr],
    request: &StepRequest,
    problems: &mut Problems,
) -> ranks::GpuSplit {
    if request.tasks > MAX_TASKS {
        problems.push(
            None,
            ViolationKind::TooManyTasks,
            format!(
                "{} local tasks are more than the {MAX_TASKS} one node can plan (only the first {MAX_TASKS} ranks are planned)",
                request.tasks
            ),
            Fix::ChangeOnly(format!("request at most {MAX_TASKS} tasks per node")),
        );
    }
    let split = ranks::split_gpus(gpus, request.tasks, request.gpus_per_task);
    if let Some(uneven) = &split.uneven {
        problems.push(
            None,
            ViolationKind::GpusNotDivisible,
            uneven.problem.clone(),
            Fix::ChangeOnly(uneven.action.clone()),
        );
    }
    split
}

/// A GPU some rank holds, located.
struct Held<'m> {
    rank: usize,
    gpu: PciAddr,
    /// `None`: not in the machine's PCI tree.
    place: Option<Place<'m>>,
    /// One reason per Grace rule that applied to it.
    notes: Vec<String>,
}

/// Every GPU some rank holds, located once, on its socket's CPU node (Grace rules:
/// crate::numa), with a note per rule that applied.
fn locate_held_gpus<'m>(
    machine: &'m Machine,
    index: &PciIndex<'m>,
    per_rank: &[Vec<PciAddr>],
) -> Vec<Held<'m>> {
    per_rank
        .iter()
        .enumerate()
        .flat_map(|(rank, gs)| gs.iter().map(move |gpu| (rank, *gpu)))
        .map(|(rank, gpu)| {
            let mut notes = Vec::new();
            let place = index
                .place(gpu)
                .map(|p| socket_place(machine, p, Some(&mut notes)));
            Held {
                rank,
                gpu,
                place,
                notes,
            }
        })
        .collect()
}

/// One plan per rank with its GPUs and nothing else yet.
fn empty_plans(per_rank: &[Vec<PciAddr>]) -> Vec<RankPlan> {
    per_rank
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
        .collect()
}

/// What the per-GPU phases collect for the per-rank ones.
struct Nearby {
    /// Per rank: its NICs, as indices into the fabric list.
    nics: Vec<BTreeSet<usize>>,
    /// Per rank: the NUMA nodes of its GPUs.
    mems: Vec<BTreeSet<u32>>,
    /// NUMA node -> ranks with a GPU there whose allocation has CPUs on it.
    numa_ranks: BTreeMap<u32, Vec<usize>>,
}

impl Nearby {
    fn new(ranks: usize) -> Self {
        Nearby {
            nics: vec![BTreeSet::new(); ranks],
            mems: vec![BTreeSet::new(); ranks],
            numa_ranks: BTreeMap::new(),
        }
    }
}

/// A GPU outside the PCI tree: its topology is unknown, and without any fabric NIC it
/// has no local one either.
fn unplaced_gpu(rank: Option<u32>, gpu: PciAddr, no_fabric: bool, problems: &mut Problems) {
    problems.push(
        rank,
        ViolationKind::TopologyUnknown,
        format!("GPU {gpu} is not in this node's PCI tree"),
        Fix::Change("check the step's GPU list".into()),
    );
    if no_fabric {
        problems.push(
            rank,
            ViolationKind::NoLocalNic,
            no_fabric_problem(gpu),
            Fix::Node,
        );
    }
}

/// Give the rank the NICs chosen for one of its GPUs, with a reason each (and one when
/// the node has no fabric NIC at all).
fn give_nics(
    plan: &mut RankPlan,
    rank_nics: &mut BTreeSet<usize>,
    gpu: PciAddr,
    chosen: &[NicChoice],
    fabric: &[&Nic],
) {
    for c in chosen {
        rank_nics.insert(c.nic);
        plan.reasons.push(c.nearness.reason(gpu, fabric[c.nic].pci));
    }
    if fabric.is_empty() {
        plan.reasons
            .push(format!("GPU {gpu}: this node has no fabric NIC"));
    }
}

/// Why a located GPU has no fabric NIC on its own NUMA node, if it has none: the node
/// has no fabric NIC, or every one sits elsewhere (`chosen` names the nearest).
fn missing_local_nic(
    gpu: PciAddr,
    place: &Place,
    chosen: &[NicChoice],
    fabric: &[&Nic],
    nic_places: &[Place],
) -> Option<String> {
    if fabric.is_empty() {
        return Some(no_fabric_problem(gpu));
    }
    let numa = place.numa?;
    if nic_places.iter().any(|n| is_local(place, n)) {
        return None;
    }
    let nearest = chosen.first().map(|c| (fabric[c.nic].pci, &c.nearness));
    Some(remote_nic_problem(gpu, numa, nearest))
}

/// The GPU's NUMA node, or `None` with a `topology_unknown` problem when no source
/// names it.
fn gpu_numa_node(
    machine: &Machine,
    rank: Option<u32>,
    gpu: PciAddr,
    place: &Place,
    problems: &mut Problems,
) -> Option<u32> {
    if place.numa.is_none() {
        let known = match machine.numa_nodes.len() {
            0 => "this machine lists no NUMA nodes".to_string(),
            n => format!("this machine has {n} NUMA nodes"),
        };
        problems.push(
            rank,
            ViolationKind::TopologyUnknown,
            format!("GPU {gpu} has no known NUMA node and {known}"),
            Fix::Change("fix the topology source".into()),
        );
    }
    place.numa
}

/// Whether the step has CPUs on the GPU's NUMA node, so the rank takes its CPUs there;
/// a node without a CPU list or without allocated CPUs is a problem.
fn has_allocated_cpus(
    machine: &Machine,
    request: &StepRequest,
    rank: Option<u32>,
    gpu: PciAddr,
    numa: u32,
    problems: &mut Problems,
) -> bool {
    let node_cpus = machine
        .numa_node(numa)
        .map(|n| &n.cpus)
        .filter(|c| !c.is_empty());
    let Some(node_cpus) = node_cpus else {
        let what = if machine.is_cpu_less(numa) {
            "has no CPUs, and neither the NUMA distance table nor a PCIe bridge names the CPU node of its socket"
        } else {
            "has no CPU list"
        };
        problems.push(
            rank,
            ViolationKind::TopologyUnknown,
            format!("GPU {gpu} is on NUMA node {numa}, which {what}"),
            Fix::Change("fix the topology source".into()),
        );
        return false;
    };
    if node_cpus.is_disjoint(&request.cpus) {
        problems.push(
            rank,
            ViolationKind::NoLocalCpu,
            format!(
                "GPU {gpu} is on NUMA node {numa} (CPUs {node_cpus}) but the step has no CPU there (allocated: \"{}\")",
                request.cpus
            ),
            Fix::Change(format!("request CPUs on NUMA node {numa}")),
        );
        return false;
    }
    true
}

/// Per rank, what the per-GPU phases leave: a rank without a GPU is a problem; its NICs
/// get their names, its memory nodes their order, and the machine's assumptions about
/// its devices are repeated.
fn finish_rank_plans(
    machine: &Machine,
    request: &StepRequest,
    gpu_count: usize,
    fabric: &[&Nic],
    near: &Nearby,
    ranks: &mut [RankPlan],
    problems: &mut Problems,
) {
    for (r, plan) in ranks.iter_mut().enumerate() {
        if plan.gpus.is_empty() {
            problems.push(
                Some(plan.rank),
                ViolationKind::NoGpu,
                format!(
                    "no GPU is left for this rank ({gpu_count} GPUs for {} tasks)",
                    request.tasks.min(MAX_TASKS)
                ),
                Fix::ChangeOnly("request at least one GPU per task or fewer tasks".into()),
            );
        }
        plan.nics = near.nics[r].iter().map(|&n| nic_ref(fabric[n])).collect();
        plan.mems = near.mems[r].iter().copied().collect();
        note_assumptions(machine, plan);
    }
}

/// A NIC as a plan names it.
fn nic_ref(nic: &Nic) -> NicRef {
    NicRef {
        pci: nic.pci,
        name: nic.name().map(str::to_string),
    }
}

/// The plan: the problems become violations under strict and warnings under prefer
/// ([`Mode::refuses`]).
fn into_plan(mode: Mode, ranks: Vec<RankPlan>, problems: Problems, fabric: &[&Nic]) -> Plan {
    let problems = problems.into_violations(mode);
    let (violations, warnings) = if mode.refuses() {
        (problems, Vec::new())
    } else {
        (Vec::new(), problems)
    };
    Plan {
        mode,
        ranks,
        violations,
        warnings,
        fabric_nics: fabric.iter().map(|n| nic_ref(n)).collect(),
    }
}

/// Repeat, once each, the description's assumptions about the rank's GPUs and NICs and
/// the machine-wide ones, so a plan over a catalog machine says what was not measured.
fn note_assumptions(machine: &Machine, plan: &mut RankPlan) {
    let mut said: BTreeSet<&str> = BTreeSet::new();
    for a in &machine.assumptions {
        let concerns = match a.about {
            None => true,
            Some(pci) => plan.gpus.contains(&pci) || plan.nics.iter().any(|n| n.pci == pci),
        };
        if concerns && said.insert(&a.text) {
            plan.reasons
                .push(format!("assumed (the sources leave a gap): {}", a.text));
        }
    }
}

/// A located function as the Grace rules see it ([`crate::numa`]): a NUMA node without
/// CPUs (GPU memory without CDMM) replaced by its socket's CPU node, and for a GPU that
/// attaches over NVLink-C2C the PCIe bridges and root complex dropped, so its NICs are
/// chosen by that NUMA node alone. `notes`, for GPUs, gets one reason per rule applied.
fn socket_place<'m>(
    machine: &Machine,
    mut place: Place<'m>,
    notes: Option<&mut Vec<String>>,
) -> Place<'m> {
    let mut said = Vec::new();
    if let Some(numa) = place.numa {
        match machine.cpu_node_of(numa, place.addr) {
            CpuNode::Own(_) => {}
            CpuNode::Socket { memory, node, via } => {
                place.numa = Some(node);
                let how = match via {
                    SocketVia::Distance(d) => format!("nearest by NUMA distance {d}"),
                    SocketVia::Bridge(b) => format!("its PCIe bridge {b} is on it"),
                };
                // Only GPUs get notes (NICs are never on GPU-memory nodes in practice).
                said.push(format!(
                    "GPU {}: NUMA node {memory} has no CPUs (GPU memory without CDMM); CPUs, memory and NICs come from node {node} of its socket ({how})",
                    place.addr
                ));
            }
            // Left as it is: the CPU step reports the node as having no CPU list.
            CpuNode::Unresolved(_) => {}
        }
    }
    if notes.is_some() && machine.attaches_over_c2c(place.addr) {
        place.ancestors.clear();
        place.root = None;
        let on = place.numa.map_or("an unknown NUMA node".to_string(), |n| {
            format!("NUMA node {n}")
        });
        said.push(format!(
            "GPU {} attaches over NVLink-C2C, so PCIe distance says nothing: its locality is its Grace socket's {on}",
            place.addr
        ));
    }
    if let Some(notes) = notes {
        notes.extend(said);
    }
    place
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

fn no_fabric_problem(gpu: PciAddr) -> String {
    format!(
        "GPU {gpu} has no fabric NIC on its PCIe switch or NUMA node (this node has no fabric NIC)"
    )
}

fn remote_nic_problem(gpu: PciAddr, numa: u32, nearest: Option<(PciAddr, &Nearness)>) -> String {
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
    format!("GPU {gpu} has no fabric NIC on its PCIe switch or NUMA node {numa}{nearest}")
}

/// Give every rank its CPUs: each NUMA node's allocated cores split between the ranks whose
/// GPUs sit there, disjointly while the node has a CPU per rank (with fewer, ranks share
/// single CPUs). Ranks left without CPUs (no GPU,
/// no allocated core near their GPU, unknown topology: each already a violation) take a
/// share of what the allocation has left, or, when nothing is left, of the whole
/// allocation; [`note_shared_cpus`] then names every sharing in the reasons.
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
        // Fewer CPUs than ranks: the shares are single CPUs handed out in turn, so some
        // ranks share one; that is the best split the step allows, not a violation (each
        // rank still has an allocated CPU on its GPU's NUMA node), and note_shared_cpus
        // names the sharing in the reasons.
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
        (
            alloc.clone(),
            "no CPU of the allocation is left over, so it takes a share of the whole allocation",
        )
    } else {
        (
            rest,
            "it takes a share of the allocation's CPUs no GPU-local rank holds",
        )
    };
    let shares = cpus::split(&cores.within(&pool), leftover.len());
    for (&r, share) in leftover.iter().zip(shares) {
        let why = if ranks[r].gpus.is_empty() {
            "this rank has no GPU"
        } else {
            "no allocated CPU is known near this rank's GPU(s)"
        };
        ranks[r]
            .reasons
            .push(format!("CPUs {share}: {why}; {what}"));
        ranks[r].cpus = share;
    }
}

/// Add a reason to every rank whose CPUs another rank also holds, naming (a few of) those
/// ranks, so a plan never shares CPUs silently.
fn note_shared_cpus(ranks: &mut [RankPlan]) {
    // The usual plan shares nothing: find that out with one sort, no map.
    let mut all: Vec<u32> = ranks.iter().flat_map(|r| r.cpus.iter()).collect();
    all.sort_unstable();
    if all.windows(2).all(|w| w[0] != w[1]) {
        return;
    }
    let mut holders: HashMap<u32, Vec<usize>> = HashMap::new();
    for (r, plan) in ranks.iter().enumerate() {
        for cpu in plan.cpus.iter() {
            holders.entry(cpu).or_default().push(r);
        }
    }
    // Name up to this many; the scan stops one past it, so a CPU every one of thousands of
    // ranks holds costs a few steps per rank, not thousands.
    const NAMED: usize = 3;
    for r in 0..ranks.len() {
        let mut others: BTreeSet<u32> = BTreeSet::new();
        'scan: for cpu in ranks[r].cpus.iter() {
            for &o in holders.get(&cpu).map(Vec::as_slice).unwrap_or_default() {
                if o != r {
                    others.insert(ranks[o].rank);
                    if others.len() > NAMED {
                        break 'scan;
                    }
                }
            }
        }
        if others.is_empty() {
            continue;
        }
        let mut names: Vec<String> = others.iter().take(NAMED).map(u32::to_string).collect();
        let list = match (others.len() > NAMED, names.pop()) {
            (true, Some(last)) => format!("ranks {}, {last} and others", names.join(", ")),
            (false, Some(last)) if names.is_empty() => format!("rank {last}"),
            (false, Some(last)) => format!("ranks {} and {last}", names.join(", ")),
            (_, None) => continue,
        };
        let line = format!("CPUs {} are shared with {list}", ranks[r].cpus);
        ranks[r].reasons.push(line);
    }
}

/// What a user can do about a problem; [`Fix::advice`] words it for each mode.
enum Fix {
    /// Change the request, or run anyway under prefer.
    Change(String),
    /// Only a different request helps: prefer runs the step but cannot give the rank
    /// what it lacks, so strict does not offer it.
    ChangeOnly(String),
    /// The node lacks what the step needs: run anyway under prefer, or take the node out.
    Node,
}

/// How a prefer warning says the step goes on.
const CONTINUING: &str = "(continuing under --gpu-affinity=prefer)";

impl Fix {
    fn advice(&self, mode: Mode) -> String {
        match (self, mode) {
            (Fix::Change(a), Mode::Strict) => format!("{a} or use --gpu-affinity=prefer"),
            (Fix::ChangeOnly(a), Mode::Strict) => a.clone(),
            (Fix::Node, Mode::Strict) => REFUSAL_ADVICE.into(),
            (Fix::Change(a) | Fix::ChangeOnly(a), Mode::Prefer) => format!("{a} {CONTINUING}"),
            (Fix::Node, Mode::Prefer) => format!("drain this node {CONTINUING}"),
        }
    }
}

/// Problems as found, turned into violations (or warnings) for the request's mode at the
/// end, in the order users read them: step-wide first, then by rank.
#[derive(Default)]
struct Problems(Vec<(Option<u32>, ViolationKind, String, Fix)>);

impl Problems {
    fn push(&mut self, rank: Option<u32>, kind: ViolationKind, problem: String, fix: Fix) {
        self.0.push((rank, kind, problem, fix));
    }

    fn into_violations(mut self, mode: Mode) -> Vec<Violation> {
        // Stable: within a rank, the order the checks found them.
        self.0.sort_by_key(|p| p.0);
        self.0
            .into_iter()
            .map(|(rank, kind, problem, fix)| Violation::new(rank, kind, problem, fix.advice(mode)))
            .collect()
    }
}
