//! `slurm_spank_user_init` in slurmstepd: decide the step's binding once, before any task
//! is forked (the forked tasks inherit the result).

use gpu_affinity::fabric::profiles::Profiles;
use gpu_affinity::sources::sysfs::Detail;

use crate::fabric_env;
use crate::guard::Failure;
use crate::host::{Host, Os};
use crate::mode::{Choice, resolve};
use crate::options::user_choice;
use crate::state::Plugin;
use crate::step::{self, FIRST_SPECIAL_STEP, FabricSetup, StepFacts, StepOutcome};

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
        StepOutcome::Off | StepOutcome::Invalid(_) => {}
    }
    plugin.set_step(outcome);
    Ok(())
}

fn decide(plugin: &Plugin, host: &dyn Host, os: &dyn Os) -> StepOutcome {
    let settings = plugin.settings();
    // The user's own mode choice is the one thing read from the job environment.
    let user = match user_choice(plugin, |name| host.getenv(name).ok().flatten()) {
        Ok(u) => u,
        Err(bad) => return StepOutcome::Invalid(bad.0),
    };
    let resolved = resolve(user, settings.default, settings.enforce);
    if let Some(note) = resolved.raise_note() {
        log::debug!("{note}");
    }
    // Off costs nothing: no topology, no GPU lookup.
    if resolved.choice == Choice::Off {
        return StepOutcome::Off;
    }
    let step_id = match host.step_id() {
        Ok(id) => id,
        Err(e) => return step::unplannable(resolved, format!("cannot identify the step: {e}")),
    };
    if step_id >= FIRST_SPECIAL_STEP {
        return StepOutcome::LeftAlone("a batch, extern or interactive step");
    }
    let gpus = match step::step_gpus(host) {
        Ok(Some(g)) if !g.global.is_empty() => g,
        Ok(_) => return StepOutcome::LeftAlone("the step has no GPUs"),
        Err(reason) => return step::unplannable(resolved, reason),
    };
    let tasks = match host.local_task_count() {
        Ok(n) => n,
        Err(e) => return step::unplannable(resolved, format!("cannot count the local tasks: {e}")),
    };
    let machine = match os.read_machine(&settings.sysfs_root, Detail::Placement) {
        Ok(m) => m,
        Err(e) => {
            return step::unplannable(resolved, format!("this node's topology is unknown ({e})"));
        }
    };
    // An admin profile that cannot be used is the admin's to fix: strict refuses the
    // step with the reason, prefer carries on with the built-in profiles.
    let fabric = match fabric_env::load_profiles(&settings.profiles_dir, settings.owner) {
        Ok(profiles) => FabricSetup {
            profiles,
            settings: &settings,
            warnings: Vec::new(),
        },
        Err(reason) => {
            log::error!("gpu-affinity: {reason}");
            if resolved.choice == Choice::Strict {
                return StepOutcome::Refused { reason };
            }
            FabricSetup {
                profiles: Profiles::builtin(),
                settings: &settings,
                warnings: vec![format!(
                    "gpu-affinity: warning: {reason}; using the built-in fabric profiles"
                )],
            }
        }
    };
    let mut fabric = fabric;
    let gpus_per_task = match host.getenv("SLURM_GPUS_PER_TASK").ok().flatten() {
        None => None,
        Some(value) => step::gpus_per_task(&value).unwrap_or_else(|warning| {
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
    };
    let mut outcome = step::plan_step(machine, facts, fabric, &|name| {
        host.getenv(name).ok().flatten()
    });
    if let StepOutcome::Planned(planned) = &mut outcome {
        step::add_topology_links(planned, os, &settings.sysfs_root);
        // Every task that takes a memory policy checks it against the kernel's online
        // NUMA nodes: ask once here, before the tasks are forked, so they inherit the
        // answer (LiveOs keeps it) rather than each reading sysfs. An error is reported
        // by the task that needs the list, as before.
        if planned.plan.ranks.iter().any(|r| !r.mems.is_empty()) {
            let _ = os.online_numa_nodes();
        }
    }
    outcome
}
