//! The step's plan, computed once per step on each node (remote `user_init`).
//!
//! Inputs: the node's topology (from `sysfs_root`, root's choice), the step's GPUs from
//! the job environment (`SLURM_STEP_GPUS`, else `CUDA_VISIBLE_DEVICES`: global ids =
//! /dev/nvidiaN minor numbers), the step's cores (`S_STEP_ALLOC_CORES`) and the local
//! task count. The solver turns them into one binding per local rank.

use std::path::Path;

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::fabric::profiles::Profiles;
use gpu_affinity::fabric::topo_xml;
use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;
use gpu_affinity::solver::{self, Plan, StepRequest};

use crate::fabric_env::{self, StepFabric};
use crate::host::{Host, Os};
use crate::mode::Resolved;
use crate::run_dir;
use crate::settings::Settings;

/// Steps at or above this id are Slurm's own (batch script, extern, interactive):
/// they are not a user's parallel step and are left alone.
pub const FIRST_SPECIAL_STEP: u32 = 0xffff_fff0;

/// What user_init decided for the step; task_init acts on it.
#[derive(Clone, Debug)]
pub enum StepOutcome {
    /// `off` (asked for or the site default): nothing was read, nothing is done.
    Off,
    /// No GPUs in the step, or a Slurm-internal step: left alone in every mode.
    LeftAlone(&'static str),
    /// prefer, but no plan could be made: tasks run unbound; the first task warns.
    Unplanned {
        warning: String,
    },
    /// strict, but no plan could be made: every task fails with this reason.
    Refused {
        reason: String,
    },
    /// The option value that reached this node is not valid.
    Invalid(String),
    Planned(Box<StepPlan>),
}

/// A solved step, kept for the tasks.
#[derive(Clone, Debug)]
pub struct StepPlan {
    pub resolved: Resolved,
    pub plan: Plan,
    pub machine: Machine,
    /// Each step GPU and the id the step's CUDA_VISIBLE_DEVICES used for it.
    pub cuda_ids: Vec<(PciAddr, String)>,
    /// The topology is the running kernel's own (`sysfs_root=/`).
    pub live: bool,
    pub job_id: u32,
    pub step_id: u32,
    /// The job owner, for the slurmd log.
    pub uid: Option<u32>,
    /// The vendor fabric environment for the step (node-wide and per rank), the NCCL
    /// topology file to generate and step-wide fabric warnings.
    pub fabric: StepFabric,
}

impl StepPlan {
    pub fn cuda_id(&self, gpu: PciAddr) -> Option<&str> {
        self.cuda_ids
            .iter()
            .find(|(a, _)| *a == gpu)
            .map(|(_, id)| id.as_str())
    }
}

/// The step's GPUs as Slurm named them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepGpus {
    /// Global ids (device minor numbers), in Slurm's order.
    pub global: Vec<u32>,
    /// The ids CUDA_VISIBLE_DEVICES gives the same GPUs: equal to `global`, or local
    /// 0..n under device confinement.
    pub cuda: Vec<String>,
}

/// Read the step's GPUs from the job environment; `None` for a step without GPUs.
pub fn step_gpus(host: &dyn Host) -> Result<Option<StepGpus>, String> {
    let env = |name: &str| -> Result<Option<String>, String> {
        Ok(host
            .getenv(name)
            .map_err(|e| e.to_string())?
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty() && v != "NoDevFiles"))
    };
    let step = env("SLURM_STEP_GPUS")?;
    let cvd = env("CUDA_VISIBLE_DEVICES")?;
    let cvd_list: Option<Vec<String>> = cvd
        .as_deref()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    match (step, cvd_list) {
        (Some(step), cvd) => {
            let global = parse_ids(&step).map_err(|e| format!("SLURM_STEP_GPUS='{step}': {e}"))?;
            let cuda = match cvd {
                Some(list) if list.len() == global.len() => list,
                _ => global.iter().map(u32::to_string).collect(),
            };
            Ok(Some(StepGpus { global, cuda }))
        }
        (None, Some(list)) => {
            let joined = list.join(",");
            let global = parse_ids(&joined).map_err(|e| {
                format!("CUDA_VISIBLE_DEVICES='{joined}': {e} (only numeric GPU ids can be mapped)")
            })?;
            Ok(Some(StepGpus { global, cuda: list }))
        }
        (None, None) => Ok(None),
    }
}

/// "0,1,4-6" -> [0, 1, 4, 5, 6], order kept.
fn parse_ids(text: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim) {
        let num = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| format!("'{part}' is not a GPU id"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if b < a || b - a > 4096 {
                    return Err(format!("'{part}' is not a GPU id range"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

/// Global GPU ids -> PCI addresses through the GPUs' /dev/nvidiaN minor numbers; on a
/// topology without minor numbers, the n-th GPU in Slurm's order (PCI order).
pub fn map_gpus(machine: &Machine, global: &[u32]) -> Result<Vec<PciAddr>, String> {
    let has_minors = machine.gpus.iter().any(|g| g.minor.is_some());
    let order = machine.gpus_in_slurm_order();
    global
        .iter()
        .map(|&id| {
            let found = if has_minors {
                machine.gpus.iter().find(|g| g.minor == Some(id))
            } else {
                order.get(id as usize).copied()
            };
            found.map(|g| g.pci).ok_or_else(|| {
                format!(
                    "GPU {id} of this step (/dev/nvidia{id}) is not among the node's {} GPUs",
                    machine.gpus.len()
                )
            })
        })
        .collect()
}

/// Slurm's core list -> CPU ids. Slurm numbers cores; with a known core list each core
/// brings all its hardware threads, otherwise core ids are CPU ids. CPUs the machine
/// does not have are dropped; an empty result means "unknown" and the caller uses the
/// whole machine.
pub fn step_cpus(machine: &Machine, alloc_cores: &str) -> CpuSet {
    let Ok(cores) = CpuSet::parse_list(alloc_cores.trim()) else {
        return CpuSet::new();
    };
    let all = machine.cpus();
    if machine.cores.is_empty() {
        return cores.intersection(&all);
    }
    let mut ordered: Vec<&CpuSet> = machine.cores.iter().collect();
    ordered.sort_by_key(|c| c.first());
    cores
        .iter()
        .filter_map(|i| ordered.get(i as usize).copied())
        .fold(CpuSet::new(), |acc, c| acc.union(c))
        .intersection(&all)
}

/// Everything a plan needs from Slurm, gathered before solving.
pub struct StepFacts {
    pub resolved: Resolved,
    pub gpus: StepGpus,
    pub alloc_cores: Option<String>,
    pub tasks: u32,
    pub gpus_per_task: Option<u32>,
    pub live: bool,
    pub job_id: u32,
    pub step_id: u32,
    pub uid: Option<u32>,
}

/// What the fabric environment is rendered from, besides the machine and the plan.
pub struct FabricSetup<'a> {
    /// Built-in plus the admin's profiles (prefer: the built-in ones alone when the
    /// admin's are unusable).
    pub profiles: Profiles,
    pub settings: &'a Settings,
    /// Warnings from loading the profiles, shown like the fabric's own.
    pub warnings: Vec<String>,
}

/// Solve the step and render its fabric environment. Problems that stop planning become
/// `Refused` (strict) or `Unplanned` (prefer).
pub fn plan_step(
    machine: Machine,
    facts: StepFacts,
    fabric: FabricSetup<'_>,
    existing_env: &dyn Fn(&str) -> Option<String>,
) -> StepOutcome {
    let Some(mode) = facts.resolved.choice.solver_mode() else {
        return StepOutcome::Off;
    };
    let gpus = match map_gpus(&machine, &facts.gpus.global) {
        Ok(g) => g,
        Err(reason) => return unplannable(facts.resolved, reason),
    };
    let mut cpus = facts
        .alloc_cores
        .as_deref()
        .map(|c| step_cpus(&machine, c))
        .unwrap_or_default();
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
    let fabric_nics = gpu_affinity::fabric::fabric_nics(&machine, &fabric.profiles);
    let plan = solver::solve_with_fabric(&machine, &request, &fabric_nics);
    let topology_dir = run_dir::step_dir(&fabric.settings.run_dir, facts.job_id, facts.step_id);
    let mut step_fabric = fabric_env::step_env(
        &machine,
        &plan,
        &fabric.profiles,
        fabric.settings,
        &topology_dir,
        existing_env,
    );
    step_fabric.warnings.splice(0..0, fabric.warnings);
    let cuda_ids = gpus.into_iter().zip(facts.gpus.cuda).collect();
    StepOutcome::Planned(Box::new(StepPlan {
        resolved: facts.resolved,
        plan,
        machine,
        cuda_ids,
        live: facts.live,
        job_id: facts.job_id,
        step_id: facts.step_id,
        uid: facts.uid,
        fabric: step_fabric,
    }))
}

/// The step's topology was read with `Detail::Placement`, without PCIe links; a generated
/// NCCL topology file carries them (NCCL rates its paths by them). So a step that writes
/// one (the vendor's file is absent or does not fit the node: rare) reads the links now and
/// renders the file again, as `fabric::step_fabric` renders it, from the completed model.
/// If they cannot be read the file goes without them, and NCCL reads them from sysfs for
/// the devices it finds; placement does not depend on them.
pub fn add_topology_links(step: &mut StepPlan, os: &dyn Os, sysfs_root: &Path) {
    let Some(topology) = step.fabric.topology.as_mut() else {
        return;
    };
    match os.read_pci_links(sysfs_root, &mut step.machine) {
        Ok(()) => topology.xml = topo_xml::render(&step.machine),
        Err(e) => log::warn!(
            "gpu-affinity: PCIe link attributes not read ({e}); the generated NCCL topology leaves them to NCCL"
        ),
    }
}

/// A step that cannot be planned: refused under strict, left unbound under prefer.
pub fn unplannable(resolved: Resolved, reason: String) -> StepOutcome {
    match resolved.choice {
        crate::mode::Choice::Strict => StepOutcome::Refused { reason },
        _ => StepOutcome::Unplanned {
            warning: format!("gpu-affinity: warning: {reason}; tasks run without GPU affinity"),
        },
    }
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
