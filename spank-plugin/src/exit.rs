//! `slurm_spank_exit` in slurmstepd: nothing to undo (binding dies with the tasks); one
//! trace line so the slurmd log shows the plugin saw the step end.

use crate::guard::Failure;
use crate::state::Plugin;
use crate::step::StepOutcome;

pub fn exit(plugin: &Plugin) -> Result<(), Failure> {
    if let Some(StepOutcome::Planned(step)) = plugin.step() {
        log::trace!("gpu-affinity: step {}.{} done", step.job_id, step.step_id);
    }
    Ok(())
}
