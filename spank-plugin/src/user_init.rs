//! `slurm_spank_user_init` in slurmstepd, with the job user's privileges: decide the
//! step's binding once, before any task is forked (the forked tasks inherit the result).
//!
//! The node's inputs were read as root in init_post_opt ([`crate::node`]); this adds the
//! job's own (the step's GPU ids and their CUDA convention, the local task count,
//! `SLURM_GPUS_PER_TASK`, the user's environment for "user wins") and solves.

use crate::fabric_env::FabricSetup;
use gpu_affinity::slurm::gpus_per_task;

use crate::guard::Failure;
use crate::host::{Host, Os};
use crate::node;
use crate::state::Plugin;
use crate::step::{self, StepFacts};
use crate::step_data::{MAX_NODE_GPUS, NO_GPUS, Prepared, StepOutcome, unplannable};
use crate::timing;

pub fn user_init(plugin: &Plugin, host: &dyn Host, os: &dyn Os) -> Result<(), Failure> {
    let outcome = decide(plugin, host, os);
    match &outcome {
        StepOutcome::Planned(plan) => {
            for line in step::summary(plan) {
                log::debug!("{line}");
            }
        }
        StepOutcome::Refused { reason } => log::debug!("gpu-affinity: step refused: {reason}"),
        StepOutcome::Unplanned { warning } => log::debug!("{warning}"),
        StepOutcome::LeftAlone(why) => log::trace!("gpu-affinity: step left alone: {why}"),
        StepOutcome::Misplaced(line) => log::debug!("{line}"),
        StepOutcome::Off | StepOutcome::Invalid(_) => {}
    }
    plugin.set_step(outcome);
    Ok(())
}

fn decide(plugin: &Plugin, host: &dyn Host, os: &dyn Os) -> StepOutcome {
    let settings = plugin.settings();
    let late;
    let prepared = match plugin.prepared() {
        Some(Prepared::Decided(StepOutcome::LeftAlone(why)))
            if *why == NO_GPUS && has_gpus(host) =>
        {
            // A Slurm that fills in the step's GPUs only after init_post_opt: plan anyway,
            // reading the node now, with the job user's privileges.
            log::info!(
                "gpu-affinity: SLURM_STEP_GPUS appeared after init_post_opt; reading the node's topology in user_init, as the job user"
            );
            late = node::prepare(&settings, plugin.option(), host, os);
            &late
        }
        Some(p) => p,
        None => {
            log::debug!("gpu-affinity: init_post_opt left nothing for user_init; preparing now");
            late = node::prepare(&settings, plugin.option(), host, os);
            &late
        }
    };
    let (resolved, step_id, node) = match prepared {
        Prepared::Decided(outcome) => return outcome.clone(),
        Prepared::Ready {
            resolved,
            step_id,
            node,
        } => (*resolved, *step_id, node),
    };
    let gpus = match step::step_gpus(host, node.machine.gpus.len()) {
        Ok(Some(g)) if !g.global.is_empty() => g,
        Ok(_) => return StepOutcome::LeftAlone(NO_GPUS),
        Err(reason) => return unplannable(resolved, reason),
    };
    let tasks = match host.local_task_count() {
        Ok(n) => n,
        Err(e) => return unplannable(resolved, format!("cannot count the local tasks: {e}")),
    };
    let mut fabric = FabricSetup {
        profiles: &node.profiles,
        detection: &node.detection,
        settings: &settings,
        warnings: node.warnings.clone(),
        vendor_topology: node.vendor_topology.as_ref(),
    };
    let gpus_per_task = match host.getenv("SLURM_GPUS_PER_TASK").ok().flatten() {
        None => None,
        Some(value) => gpus_per_task::parse(&value).unwrap_or_else(|bad| {
            let warning = format!(
                "gpu-affinity: warning: {bad}; GPUs are shared out by the step's GPU and task counts"
            );
            log::warn!("{warning}");
            fabric.warnings.push(warning);
            None
        }),
    };
    let facts = StepFacts {
        resolved,
        gpus,
        alloc_cores: host.step_alloc_cores().ok(),
        tasks,
        gpus_per_task,
        // Only a live topology numbers CPUs as this kernel does.
        stepd_cpus: if settings.live() {
            os.cpu_affinity().ok()
        } else {
            None
        },
        live: settings.live(),
        job_id: host.job_id().unwrap_or(0),
        step_id,
        uid: host.job_uid().ok(),
        constrain_devices: node.constrain_devices,
    };
    let outcome = step::plan_step(&node.machine, &node.slurm_gpus, facts, fabric, &|name| {
        host.getenv(name).ok().flatten()
    });
    // Every task that takes a memory policy checks it against the kernel's online NUMA
    // nodes: ask once here, before the tasks are forked, so they inherit the answer
    // (LiveOs keeps it) rather than each reading sysfs. An error is reported by the task
    // that needs the list.
    if let StepOutcome::Planned(planned) = &outcome
        && planned.plan.ranks.iter().any(|r| !r.mems.is_empty())
    {
        let _ = os.online_numa_nodes();
        // A phase of its own in the breakdown: on 24.11 and later this open is usually
        // where slurmstepd's file table grows, a kernel RCU grace period that the step
        // pays in Slurm's own pipe2 when the plugin opens nothing here
        // (docs/measurements.md, "Every step's RCU grace period").
        timing::mark("online NUMA nodes");
    }
    outcome
}

fn has_gpus(host: &dyn Host) -> bool {
    matches!(step::step_gpus(host, MAX_NODE_GPUS), Ok(Some(g)) if !g.global.is_empty())
}
