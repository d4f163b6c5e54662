//! `slurm_spank_task_init` in the forked task, as the user, just before exec: apply the
//! local rank's part of the step's plan, or refuse the task (strict).

use crate::apply::{self, Task, refusal};
use crate::guard::Failure;
use crate::host::{Host, Os};
use crate::state::Plugin;
use crate::step_data::StepOutcome;

pub fn task_init(plugin: &Plugin, host: &dyn Host, os: &dyn Os) -> Result<(), Failure> {
    let Some(outcome) = plugin.step() else {
        // user_init failed (already logged) or never ran: nothing trustworthy to apply.
        return Err(Failure(
            "gpu-affinity: no plan for this step (user_init failed; see the slurmd log)".into(),
        ));
    };
    let task = || -> Result<Task, Failure> {
        let local = host
            .local_task_id()
            .map_err(|e| Failure(format!("gpu-affinity: {e}")))?;
        let global = host
            .global_task_id()
            .map_err(|e| Failure(format!("gpu-affinity: {e}")))?;
        Ok(Task { local, global })
    };
    match outcome {
        StepOutcome::Off | StepOutcome::LeftAlone(_) => Ok(()),
        StepOutcome::Invalid(line) | StepOutcome::Misplaced(line) => Err(Failure(line.clone())),
        StepOutcome::Refused { reason } => Err(refusal(task()?, reason)),
        StepOutcome::Unplanned { warning } => {
            if task()?.local == 0 {
                apply::warn_user(os, warning);
            }
            Ok(())
        }
        StepOutcome::Planned(step) => apply::apply_rank(step, task()?, host, os).map(|_| ()),
    }
}
