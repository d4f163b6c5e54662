//! `slurm_spank_task_post_fork` in slurmstepd: write the step's generated NCCL topology
//! file, once per step.
//!
//! user_init, where the step is planned, runs with the job user's privileges (spank.h:
//! "drop privileges ... user_init()"), so it cannot create a root-owned file. This hook
//! runs in slurmstepd after privileges are reclaimed and before any task is released to
//! exec, so the file is in place before NCCL can look for it. A failure is logged here;
//! task_init, which sees only the filesystem (the tasks were forked earlier), then
//! refuses (strict) or warns and leaves NCCL_TOPO_FILE unset (prefer).

use crate::guard::Failure;
use crate::run_dir::{self, StepDir};
use crate::state::Plugin;
use crate::step_data::StepOutcome;

pub fn task_post_fork(plugin: &Plugin) -> Result<(), Failure> {
    let Some(StepOutcome::Planned(step)) = plugin.step() else {
        return Ok(());
    };
    let Some(topology) = &step.fabric.topology else {
        return Ok(());
    };
    if plugin.step_dir_tried() {
        return Ok(());
    }
    let settings = plugin.settings();
    // The directory is recorded for exit as soon as it exists (and is ours), so a failed
    // write cannot leave it behind.
    let written = match StepDir::create(&settings.run_dir, &topology.dir, settings.owner) {
        Ok(dir) => {
            let written = dir.write(run_dir::TOPOLOGY_FILE, &topology.xml);
            plugin.set_step_dir(Some(dir));
            written
        }
        Err(e) => Err(e),
    };
    match written {
        Ok(path) => log::debug!(
            "gpu-affinity: step {}.{}: NCCL topology written to {}",
            step.job_id,
            step.step_id,
            path.display()
        ),
        Err(e) => {
            log::error!(
                "gpu-affinity: step {}.{}: cannot write the NCCL topology file: {e}",
                step.job_id,
                step.step_id
            );
            // Tried and failed before the directory existed: nothing for exit to remove.
            plugin.set_step_dir(None);
        }
    }
    Ok(())
}
