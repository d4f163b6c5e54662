//! One local rank's part of the plan, applied to the task being set up (task_init).
//!
//! Order: refuse first (strict with a violation for this rank), then CPU mask, memory
//! policy, environment; then read mask and policy back, since a cgroup cpuset or a
//! kernel without the planned NUMA node can silently narrow what was set.

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::pci::PciAddr;
use gpu_affinity::plugin_env;
use gpu_affinity::slurm::gpu_ids::{self, TaskGpus};
use gpu_affinity::solver::{REFUSAL_ADVICE, RankPlan, Violation};

use crate::fabric_env;
use crate::guard::Failure;
use crate::host::{Host, MemPolicy, Os};
use crate::os::list;
use crate::run_dir;
use crate::step::join;
use crate::step_data::StepPlan;

/// A prefer-mode warning: Slurm's info level does not reach srun from a task hook, so
/// the line also goes to the task's own stderr, where the user reads their output.
pub fn warn_user(os: &dyn Os, line: &str) {
    log::warn!("{line}");
    os.task_stderr(line);
}

/// Which task is being set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    /// S_TASK_ID: index on this node; the plan's rank number.
    pub local: u32,
    /// S_TASK_GLOBAL_ID: the rank users see.
    pub global: u32,
}

/// The strict refusal line for one of the plugin's own problems (the solver's carry their
/// own advice), ending with core's one wording:
/// `gpu-affinity: rank 3: <what is wrong>; use --gpu-affinity=prefer or drain this node`.
pub fn refusal(task: Task, problem: &str) -> Failure {
    refusal_with(task, problem, REFUSAL_ADVICE)
}

/// The strict refusal line for a solver violation, under the global rank (the solver
/// names ranks by their local index, in its own field).
fn refuse_violation(task: Task, v: &Violation) -> Failure {
    refusal_with(task, &v.problem, &v.advice)
}

fn refusal_with(task: Task, problem: &str, advice: &str) -> Failure {
    Failure(format!(
        "gpu-affinity: rank {}: {problem}; {advice}",
        task.global
    ))
}

/// What was applied, for the env and the verbose line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub cpus: CpuSet,
    pub mems: Vec<u32>,
    pub env: Vec<(String, String)>,
}

fn concerns(v: &Violation, task: Task) -> bool {
    v.rank.is_none_or(|r| r == task.local)
}

/// Apply `task`'s binding. `Err` fails the task (strict); in prefer every problem is a
/// warning and the task runs with what could be applied.
pub fn apply_rank(
    step: &StepPlan,
    task: Task,
    host: &dyn Host,
    os: &dyn Os,
) -> Result<Applied, Failure> {
    let strict = step.resolved.strict();
    let plan = &step.plan;

    if let Some(v) = plan.violations.iter().find(|v| concerns(v, task)) {
        return Err(refuse_violation(task, v));
    }
    // slurmstepd wrote the generated NCCL topology after forking the tasks: look for it.
    let topology_missing = step
        .fabric
        .topology
        .as_ref()
        .filter(|t| !run_dir::is_written(&t.file, t.owner))
        .map(|t| {
            format!(
                "the NCCL topology file {} was not written (see the slurmd log)",
                t.file.display()
            )
        });
    if strict && let Some(problem) = &topology_missing {
        return Err(refusal(task, problem));
    }
    crate::timing::mark("topology file");
    // The plan's warnings are step-wide news: say them once, from the node's first task.
    if task.local == 0 {
        for w in &step.fabric.warnings {
            warn_user(os, w);
        }
        if let Some(problem) = &topology_missing {
            warn_user(
                os,
                &format!("gpu-affinity: warning: {problem}; NCCL_TOPO_FILE left unset"),
            );
        }
        for w in &plan.warnings {
            let line = match w.rank {
                Some(r) => format!(
                    "gpu-affinity: warning: local rank {r}: {}; {}",
                    w.problem, w.advice
                ),
                None => format!("gpu-affinity: warning: {}; {}", w.problem, w.advice),
            };
            warn_user(os, &line);
        }
    }
    crate::timing::mark("warnings");
    let bound = match task_binding(step, task, host) {
        Ok(b) => b,
        Err(problem) => return unbound(strict, task, os, &problem),
    };
    crate::timing::mark("task binding");
    if bound.is_some() && step.local_ids && step.resolved.verbose && task.local == 0 {
        os.task_stderr(
            "gpu-affinity: Slurm fences each task to its own GPU here (per-task binding under \
             ConstrainDevices), which breaks CUDA IPC between ranks (open-mpi/ompi#11949); \
             Slurm 23.11+ --gres-flags=allow-task-sharing lets the step's tasks share its GPUs",
        );
    }
    let rank = match &bound {
        Some(b) => Some(b.rank),
        None => plan.ranks.iter().find(|r| r.rank == task.local),
    };
    let Some(rank) = rank else {
        let problem = format!("the plan has no binding for local task {}", task.local);
        return unbound(strict, task, os, &problem);
    };

    let mut problems: Vec<String> = Vec::new();
    let cpus = apply_cpus(rank, os, &mut problems);
    crate::timing::mark("affinity");
    let mems = apply_mems(step, rank, strict, os, &mut problems);
    crate::timing::mark("mempolicy");
    if strict && let Some(p) = problems.first() {
        return Err(refusal(task, p));
    }
    for p in &problems {
        warn_user(
            os,
            &format!("gpu-affinity: warning: rank {}: {p}", task.global),
        );
    }

    let mut env = rank_env(step, rank, &cpus, &mems);
    if let Some(b) = &bound {
        for (k, v) in &mut env {
            if k == "CUDA_VISIBLE_DEVICES" {
                *v = b.cuda.join(",");
            }
        }
    }
    if topology_missing.is_some() {
        env.retain(|(k, _)| k != "NCCL_TOPO_FILE");
    }
    crate::timing::mark("env built");
    for (name, value) in &env {
        host.setenv(name, value).map_err(|e| {
            Failure(format!(
                "gpu-affinity: rank {}: setting {name}: {e}",
                task.global
            ))
        })?;
    }
    crate::timing::mark("env set");
    if step.resolved.verbose {
        // The CUDA ids the task really got (a per-task binding rewrites them).
        let cuda = env
            .iter()
            .find(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
            .map_or("", |(_, v)| v.as_str());
        os.task_stderr(&binding_line(step, task, rank, cuda, &cpus, &mems));
    }
    Ok(Applied { cpus, mems, env })
}

/// A task with no binding to apply: refused under strict, left unbound with a warning
/// under prefer.
fn unbound(strict: bool, task: Task, os: &dyn Os, problem: &str) -> Result<Applied, Failure> {
    if strict {
        return Err(refusal(task, problem));
    }
    warn_user(
        os,
        &format!(
            "gpu-affinity: warning: rank {}: {problem}; left unbound",
            task.global
        ),
    );
    Ok(Applied {
        cpus: os.cpu_affinity().unwrap_or_default(),
        mems: Vec::new(),
        env: Vec::new(),
    })
}

/// A task Slurm binds to GPUs of its own, and the plan's rank for those GPUs.
struct TaskBound<'a> {
    rank: &'a RankPlan,
    /// CUDA_VISIBLE_DEVICES for them: under ConstrainDevices the task sees only its own
    /// GPUs, so positions among those in PCI order; otherwise the step's ids.
    cuda: Vec<String>,
}

/// With `--gpus-per-task` / `--gpu-bind`, Slurm gives each task its own GPUs (and under
/// ConstrainDevices lets it open only those); the plan's rank order need not agree, so
/// the task takes the rank planned on exactly those GPUs (its NICs and CPUs fit them).
/// Which GPUs: replayed from `SLURMD_TRES_BIND`, which slurmstepd puts in each task's
/// environment (the task's own `SLURM_STEP_GPUS` is rebased to 0 under confinement,
/// measured on 22.05, so it cannot say). It only steers this user's own tasks.
/// `Ok(None)`: no per-task binding, the task takes its local rank's plan.
fn task_binding<'a>(
    step: &'a StepPlan,
    task: Task,
    host: &dyn Host,
) -> Result<Option<TaskBound<'a>>, String> {
    let bind = host.getenv("SLURMD_TRES_BIND").ok().flatten();
    let ids = match gpu_ids::task_gpus(bind.as_deref(), &step.slurm_ids, step.local_ids, task.local)
    {
        TaskGpus::Step => return Ok(None),
        TaskGpus::Unknown(why) => {
            return Err(format!(
                "{why}, so which GPU Slurm gives local task {} is not known here",
                task.local
            ));
        }
        TaskGpus::Ids(ids) => ids,
    };
    let mut gpus: Vec<PciAddr> = ids
        .iter()
        .filter_map(|id| step.slurm_ids.iter().position(|s| s == id))
        .filter_map(|i| step.cuda_ids.get(i).map(|(pci, _)| *pci))
        .collect();
    gpus.sort();
    let rank = step
        .plan
        .ranks
        .iter()
        .find(|r| {
            let mut g = r.gpus.clone();
            g.sort();
            g == gpus
        })
        .ok_or_else(|| {
            format!(
                "Slurm binds local task {} to GPU(s) {}, which no rank of the plan has",
                task.local,
                join(gpus.iter().map(|g| g.to_string()))
            )
        })?;
    let cuda = rank
        .gpus
        .iter()
        .map(|g| {
            if step.local_ids {
                gpus.iter().position(|p| p == g).unwrap_or(0).to_string()
            } else {
                step.cuda_id(*g).unwrap_or_default().to_string()
            }
        })
        .collect();
    Ok(Some(TaskBound { rank, cuda }))
}

/// Set the rank's CPU mask and return what the kernel reports back.
fn apply_cpus(rank: &RankPlan, os: &dyn Os, problems: &mut Vec<String>) -> CpuSet {
    if rank.cpus.is_empty() {
        problems.push("the plan names no CPUs for this rank".to_string());
    } else if let Err(e) = os.set_cpu_affinity(&rank.cpus) {
        problems.push(format!("cannot bind to CPUs {}: {e}", rank.cpus));
    }
    match os.cpu_affinity() {
        Ok(now) => {
            if !rank.cpus.is_empty() && now != rank.cpus {
                problems.push(format!(
                    "CPU mask reads back as {now}, not the planned {} (a cgroup cpuset may exclude them)",
                    rank.cpus
                ));
            }
            now
        }
        Err(e) => {
            problems.push(format!("cannot read the CPU mask back: {e}"));
            CpuSet::new()
        }
    }
}

/// Set the rank's memory policy (strict: bind to its NUMA nodes; prefer: prefer the first)
/// and return the nodes it applies to. From a replayed topology (`sysfs_root` not `/`),
/// nodes the running kernel lacks cannot take a policy: they are reported, not failed.
fn apply_mems(
    step: &StepPlan,
    rank: &RankPlan,
    strict: bool,
    os: &dyn Os,
    problems: &mut Vec<String>,
) -> Vec<u32> {
    if rank.mems.is_empty() {
        return Vec::new();
    }
    let online = match os.online_numa_nodes() {
        Ok(n) => n,
        Err(e) => {
            problems.push(format!("cannot list the kernel's NUMA nodes: {e}"));
            return Vec::new();
        }
    };
    let (present, absent): (Vec<u32>, Vec<u32>) =
        rank.mems.iter().partition(|n| online.contains(n));
    if !absent.is_empty() {
        if step.live {
            problems.push(format!(
                "NUMA node {} of GPU {} is not online; no memory policy can hold it",
                list(&absent),
                join(rank.gpus.iter().map(|g| g.to_string()))
            ));
            return Vec::new();
        }
        log::debug!(
            "gpu-affinity: local rank {}: memory policy not applied for NUMA node {}: the topology comes from {}, and this kernel has nodes {} only",
            rank.rank,
            list(&absent),
            step_root(step),
            list(&online)
        );
    }
    let (policy, nodes) = match (strict, present.first()) {
        (_, None) => return Vec::new(),
        (true, _) => (MemPolicy::Bind, present),
        (false, Some(&first)) => (MemPolicy::Preferred, vec![first]),
    };
    if let Err(e) = os.set_mempolicy(policy, &nodes) {
        problems.push(format!("cannot set the memory policy: {e}"));
        return Vec::new();
    }
    match os.mempolicy() {
        Ok((got, got_nodes)) if got == policy && got_nodes == nodes => nodes,
        Ok((got, got_nodes)) => {
            problems.push(format!(
                "memory policy reads back as {got} on nodes {}, not {policy} on {}",
                list(&got_nodes),
                list(&nodes)
            ));
            Vec::new()
        }
        Err(e) => {
            problems.push(format!("cannot read the memory policy back: {e}"));
            Vec::new()
        }
    }
}

fn step_root(step: &StepPlan) -> &'static str {
    if step.live {
        "/"
    } else {
        "a sysfs_root other than /"
    }
}

/// The rank's environment: what the task needs to find its devices, then what the user
/// reads to see the binding, then the fabric profile. UCX_NET_DEVICES, like every fabric
/// variable, comes from the profile alone (the RDMA profiles set it per rank), so a
/// user's own value wins and `gpu-affinity explain` shows exactly what is exported.
pub fn rank_env(
    step: &StepPlan,
    rank: &RankPlan,
    cpus: &CpuSet,
    mems: &[u32],
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    let mut set = |k: &str, v: String| env.push((k.to_string(), v));
    let cuda: Vec<&str> = rank.gpus.iter().filter_map(|g| step.cuda_id(*g)).collect();
    set(plugin_env::CUDA_VISIBLE_DEVICES, cuda.join(","));
    set(plugin_env::CUDA_DEVICE_ORDER, "PCI_BUS_ID".to_string());
    set(
        plugin_env::GPU_AFFINITY_MODE,
        step.resolved.choice.to_string(),
    );
    set(
        plugin_env::GPU_AFFINITY_GPUS,
        rank.gpus
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(","),
    );
    set(
        plugin_env::GPU_AFFINITY_NICS,
        rank.nics
            .iter()
            .map(|n| n.name.clone().unwrap_or_else(|| n.pci.to_string()))
            .collect::<Vec<_>>()
            .join(","),
    );
    set(plugin_env::GPU_AFFINITY_CPUS, cpus.to_string());
    set(plugin_env::GPU_AFFINITY_MEMS, list(mems));
    let index = step
        .plan
        .ranks
        .iter()
        .position(|r| r.rank == rank.rank)
        .unwrap_or(usize::MAX);
    env.extend(fabric_env::rank_env(&step.fabric.env, index));
    env
}

/// The verbose switch's line on the task's stderr.
fn binding_line(
    step: &StepPlan,
    task: Task,
    rank: &RankPlan,
    cuda: &str,
    cpus: &CpuSet,
    mems: &[u32],
) -> String {
    format!(
        "gpu-affinity: rank {} (local {}): mode {} GPUs {} (CUDA {}) NICs {} CPUs {} NUMA {}",
        task.global,
        task.local,
        step.resolved.choice,
        join(rank.gpus.iter().map(|g| g.to_string())),
        if cuda.is_empty() { "-" } else { cuda },
        join(
            rank.nics
                .iter()
                .map(|n| n.name.clone().unwrap_or_else(|| n.pci.to_string()))
        ),
        cpus,
        if mems.is_empty() {
            "-".to_string()
        } else {
            list(mems)
        }
    )
}
