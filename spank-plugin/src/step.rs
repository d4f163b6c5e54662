//! The step's plan, computed once per step on each node (remote `user_init`).
//!
//! Inputs: the node's topology (from `sysfs_root`, root's choice, read as root in
//! init_post_opt: [`crate::node`]), the step's GPUs from
//! the job environment (`SLURM_STEP_GPUS` only: Slurm's gres ids, mapped to GPUs through
//! gres.conf by core's `slurm::gpu_ids`, never taken as /dev/nvidiaN minors),
//! the step's cores (`S_STEP_ALLOC_CORES`) and the local task count. The solver turns them into one binding per local rank.

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;
use gpu_affinity::slurm::gpu_ids::{self, SlurmGpus};
use gpu_affinity::solver::{self, StepRequest};

use crate::fabric_env::{self, FabricSetup};
use crate::host::Host;
use crate::mode::Resolved;
use crate::run_dir;
use crate::step_data::{StepGpus, StepOutcome, StepPlan, unplannable};

/// Read the step's GPUs from the job environment; `None` for a step without GPUs.
///
/// Only `SLURM_STEP_GPUS` says which GPUs Slurm gave the step (gres/gpu sets it for every
/// step that has GPUs; measured on 22.05, `srun --gres=gpu:2` gives `0,1`). Alone,
/// `CUDA_VISIBLE_DEVICES` proves nothing: srun propagates the user's own environment, and
/// where Slurm does not clear an inherited value (22.05's gres/gpu clears it on nodes
/// with gpu GRES, before user_init) it would turn a CPU step into a "GPU step" that
/// `default=strict` would refuse; under device confinement its ids are local ones that
/// no /dev/nvidiaN minor matches. It is read only for the id convention of a step that
/// has `SLURM_STEP_GPUS`.
///
/// The value is bounded ([`gpu_ids::parse_step_gpus`]: length, and ids at 4x `node_gpus`)
/// and never echoed: on a cluster without gres gpu it is the user's own text.
pub fn step_gpus(host: &dyn Host, node_gpus: usize) -> Result<Option<StepGpus>, String> {
    let env = |name: &str| -> Result<Option<String>, String> {
        Ok(host
            .getenv(name)
            .map_err(|e| e.to_string())?
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty() && v != "NoDevFiles"))
    };
    let Some(step) = env("SLURM_STEP_GPUS")? else {
        return Ok(None);
    };
    let global = gpu_ids::parse_step_gpus(&step, node_gpus).map_err(|e| e.to_string())?;
    let cuda = match env("CUDA_VISIBLE_DEVICES")? {
        Some(cvd) => {
            let list: Vec<String> = cvd.split(',').map(|s| s.trim().to_string()).collect();
            if list.len() == global.len() {
                list
            } else {
                global.iter().map(u32::to_string).collect()
            }
        }
        None => global.iter().map(u32::to_string).collect(),
    };
    Ok(Some(StepGpus { global, cuda }))
}

/// The ids the ranks' CUDA_VISIBLE_DEVICES give the step's GPUs (`gpus`, in Slurm's order,
/// with `step.cuda` the step's own ids for them).
///
/// The plugin sets CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA reads an index as a position in
/// PCI address order among the GPUs it can see: all of the node's, or under device
/// confinement (local ids) the step's own. Slurm's ids count gres.conf's devices (or the
/// step's GPUs in that order), which name the same GPUs only while that order is PCI
/// address order (`File=/dev/nvidia[0-7]` with the driver's usual minors, or
/// AutoDetect=nvml). Where it is not, Slurm's id
/// would open another GPU than the plan's, so the ids are translated to PCI positions and
/// the note says so; otherwise Slurm's own ids are kept. Non-numeric ids (GPU UUIDs) do
/// not depend on any order and are kept.
pub fn cuda_ids(
    machine: &Machine,
    gpus: &[PciAddr],
    step: &StepGpus,
) -> (Vec<String>, Option<String>) {
    let confined = step
        .cuda
        .iter()
        .zip(&step.global)
        .any(|(c, g)| *c != g.to_string());
    let mut visible: Vec<PciAddr> = if confined {
        gpus.to_vec()
    } else {
        machine.gpus.iter().map(|g| g.pci).collect()
    };
    visible.sort();
    let positions: Option<Vec<String>> = gpus
        .iter()
        .map(|g| visible.iter().position(|v| v == g).map(|p| p.to_string()))
        .collect();
    let numeric = step.cuda.iter().all(|c| c.parse::<u32>().is_ok());
    match positions {
        Some(positions) if numeric && positions != step.cuda => {
            let note = format!(
                "gpu-affinity: Slurm's GPU ids on this node do not follow PCI address order; CUDA_VISIBLE_DEVICES {} becomes {} (positions in PCI_BUS_ID order{})",
                step.cuda.join(","),
                positions.join(","),
                if confined {
                    " among the step's GPUs"
                } else {
                    ""
                }
            );
            (positions, Some(note))
        }
        _ => (step.cuda.clone(), None),
    }
}

/// Slurm's core list -> CPU ids. CPUs the machine does not have are dropped; an empty
/// result means "unknown" and the caller uses the whole machine.
///
/// S_STEP_ALLOC_CORES numbers cores the way slurmd's block map does (xcpuinfo with
/// hwloc): socket by socket, and within a socket in hwloc's logical order, which sorts
/// cores by their CPUs. So core `i` is the i-th core of that order, never simply the core
/// with the i-th smallest CPU id: on a node that numbers CPUs alternately across sockets
/// (cpu0 on socket 0, cpu1 on socket 1, ...) Slurm's cores 0..n-1 are socket 0's, its
/// even CPUs. The model has no package ids; a package is taken to be a NUMA node, which
/// is exact when each socket is one NUMA node (every catalog GPU machine). Sub-NUMA
/// clustering with alternating CPU numbering would break that, which is why a live step
/// also checks the result against slurmstepd's own CPU mask ([`reconcile_cpus`]).
/// Without a core list each CPU counts as its own core.
pub fn step_cpus(machine: &Machine, alloc_cores: &str) -> CpuSet {
    let Ok(cores) = CpuSet::parse_list(alloc_cores.trim()) else {
        return CpuSet::new();
    };
    let order = slurm_core_order(machine);
    cores
        .iter()
        .filter_map(|i| order.get(i as usize))
        .fold(CpuSet::new(), |acc, c| acc.union(c))
        .intersection(&machine.cpus())
}

pub use gpu_affinity::slurm::conf_write::slurm_core_order;

/// The CPUs to plan over: `mapped` (Slurm's cores through the machine) checked against
/// `stepd`, the CPU mask slurmstepd itself runs under (read in user_init, live topology
/// only). With task/cgroup's ConstrainCores the step's slurmstepd sits in the step's
/// cpuset, so its mask is the kernel's own word on the step's CPUs; with task/affinity
/// alone it is the whole node and says nothing. When the mask confines and the mapped
/// CPUs do not fit inside it, the mapping is wrong for this node (see [`step_cpus`]):
/// the mask wins, and the note says so. An empty `mapped` (unknown) takes the mask too.
pub fn reconcile_cpus(
    mapped: CpuSet,
    stepd: Option<&CpuSet>,
    all: &CpuSet,
) -> (CpuSet, Option<String>) {
    let Some(mask) = stepd.map(|m| m.intersection(all)) else {
        return (mapped, None);
    };
    if mask.is_empty() || mask == *all || (!mapped.is_empty() && mapped.is_subset(&mask)) {
        return (mapped, None);
    }
    let note = (!mapped.is_empty()).then(|| {
        format!(
            "gpu-affinity: the step's cores map to CPUs {mapped}, outside slurmstepd's own CPU mask {mask}; planning over the mask"
        )
    });
    (mask, note)
}

/// Everything a plan needs from Slurm, gathered before solving.
pub struct StepFacts {
    pub resolved: Resolved,
    pub gpus: StepGpus,
    pub alloc_cores: Option<String>,
    pub tasks: u32,
    pub gpus_per_task: Option<u32>,
    /// slurmstepd's own CPU mask (live topology only; see [`reconcile_cpus`]).
    pub stepd_cpus: Option<CpuSet>,
    pub live: bool,
    pub job_id: u32,
    pub step_id: u32,
    pub uid: Option<u32>,
    /// cgroup.conf's ConstrainDevices (see [`StepPlan::local_ids`]).
    pub constrain_devices: bool,
}

/// Solve the step and render its fabric environment. Problems that stop planning become
/// `Refused` (strict) or `Unplanned` (prefer).
pub fn plan_step(
    machine: &Machine,
    slurm_gpus: &SlurmGpus,
    facts: StepFacts,
    fabric: FabricSetup<'_>,
    existing_env: &dyn Fn(&str) -> Option<String>,
) -> StepOutcome {
    let Some(mode) = facts.resolved.choice.solver_mode() else {
        return StepOutcome::Off;
    };
    let gpus = match slurm_gpus.map(&facts.gpus.global) {
        Ok(g) => g,
        Err(e) => return unplannable(facts.resolved, e.to_string()),
    };
    let mapped = facts
        .alloc_cores
        .as_deref()
        .map(|c| step_cpus(machine, c))
        .unwrap_or_default();
    let (mut cpus, note) = reconcile_cpus(mapped, facts.stepd_cpus.as_ref(), &machine.cpus());
    if let Some(note) = note {
        log::info!("{note}");
    }
    if cpus.is_empty() {
        log::debug!(
            "gpu-affinity: step cores '{}' name no CPU of this node's topology; planning over all {} CPUs",
            facts.alloc_cores.as_deref().unwrap_or("?"),
            machine.cpus()
        );
        cpus = machine.cpus();
    }
    let request = StepRequest {
        gpus: gpus.clone(),
        cpus,
        tasks: facts.tasks,
        gpus_per_task: facts.gpus_per_task,
        mode,
    };
    // The profile's fabric NICs, so no rank gets a NIC NCCL_IB_HCA leaves out.
    let fabric_nics =
        gpu_affinity::fabric::fabric_nics_for(machine, fabric.profiles, fabric.detection);
    let plan = solver::solve_with_fabric(machine, &request, &fabric_nics);
    crate::timing::mark("solve");
    let topology_dir = run_dir::step_dir(&fabric.settings.run_dir, facts.job_id, facts.step_id);
    let mut step_fabric =
        fabric_env::step_env(machine, &plan, &fabric, &topology_dir, existing_env);
    step_fabric.warnings.splice(0..0, fabric.warnings);
    crate::timing::mark("fabric env");
    let (cuda, note) = cuda_ids(machine, &gpus, &facts.gpus);
    if let Some(note) = note {
        log::info!("{note}");
    }
    let local_ids = facts.constrain_devices;
    let cuda_ids = gpus.into_iter().zip(cuda).collect();
    StepOutcome::Planned(Box::new(StepPlan {
        resolved: facts.resolved,
        plan,
        cuda_ids,
        slurm_ids: facts.gpus.global.clone(),
        local_ids,
        live: facts.live,
        job_id: facts.job_id,
        step_id: facts.step_id,
        uid: facts.uid,
        fabric: step_fabric,
    }))
}

/// The verbose per-step summary: one line for the step, one per rank.
pub fn summary(step: &StepPlan) -> Vec<String> {
    let plan = &step.plan;
    let mut lines = vec![format!(
        "gpu-affinity: step {}.{} (uid {}): mode {}, {} local ranks, {} GPUs, {} violations, {} warnings",
        step.job_id,
        step.step_id,
        step.uid.map_or("?".to_string(), |u| u.to_string()),
        step.resolved.choice,
        plan.ranks.len(),
        step.cuda_ids.len(),
        plan.violations.len(),
        plan.warnings.len()
    )];
    for r in &plan.ranks {
        lines.push(format!(
            "gpu-affinity: step {}.{} local rank {}: GPUs {} NICs {} CPUs {} NUMA {}",
            step.job_id,
            step.step_id,
            r.rank,
            join(r.gpus.iter().map(|g| g.to_string())),
            join(
                r.nics
                    .iter()
                    .map(|n| n.name.clone().unwrap_or_else(|| n.pci.to_string()))
            ),
            r.cpus,
            join(r.mems.iter().map(u32::to_string))
        ));
    }
    for v in plan.violations.iter().chain(&plan.warnings) {
        lines.push(format!(
            "gpu-affinity: step {}.{}: {}",
            step.job_id, step.step_id, v.message
        ));
    }
    lines
}

pub fn join(items: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = items.collect();
    if v.is_empty() {
        "-".to_string()
    } else {
        v.join(",")
    }
}
