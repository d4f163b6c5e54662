//! `slurm_spank_exit` in slurmstepd: the binding dies with the tasks; what remains is
//! the step directory task_post_fork wrote (a generated NCCL topology), removed here.

use crate::guard::Failure;
use crate::state::Plugin;
use crate::step_data::StepOutcome;

pub fn exit(plugin: &Plugin) -> Result<(), Failure> {
    if let Some(dir) = plugin.step_dir()
        && let Err(e) = dir.remove()
    {
        log::error!("gpu-affinity: removing the step directory: {e}");
    }
    if let Some(StepOutcome::Planned(step)) = plugin.step() {
        log::trace!("gpu-affinity: step {}.{} done", step.job_id, step.step_id);
    }
    Ok(())
}
