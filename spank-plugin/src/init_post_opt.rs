//! `slurm_spank_init_post_opt`, after options are processed.
//!
//! In srun and sbatch/salloc: check the environment twin (a bad `SLURM_GPU_AFFINITY` stops
//! srun/sbatch before launch, like a bad option) and say when the site's floor raises the
//! user's mode.
//!
//! In slurmstepd (still root, unlike user_init): settle the mode and whether the step is
//! one to bind, and for a GPU step read the node's inputs ([`crate::node`]). Nothing here
//! fails the hook: Slurm would fail the whole step without a word to the user, so a bad
//! input becomes the step's outcome and task_init reports it (strict) or warns (prefer).

use crate::guard::Failure;
use crate::host::{Host, Os};
use crate::mode::resolve;
use crate::node;
use crate::options::user_choice;
use crate::placement;
use crate::state::Plugin;
use crate::step_data::Prepared;
use crate::timing;

pub fn init_post_opt(plugin: &Plugin, host: &dyn Host) -> Result<(), Failure> {
    let user = user_choice(plugin.option(), |name| host.process_env(name))?;
    let settings = plugin.settings();
    let resolved = resolve(user, settings.default, settings.enforce);
    if let Some(note) = resolved.raise_note() {
        log::info!("{note}");
    }
    Ok(())
}

pub fn remote(plugin: &Plugin, host: &dyn Host, os: &dyn Os) -> Result<(), Failure> {
    let settings = plugin.settings();
    let prepared = node::prepare(&settings, plugin.option(), host, os);
    // Multi-node GPU steps: the placement backstop, while still root (topology files).
    let prepared = placement::backstop(prepared, &settings, host, os);
    timing::mark("placement");
    if let Prepared::Decided(outcome) = &prepared {
        log::trace!("gpu-affinity: settled in init_post_opt: {outcome:?}");
    }
    plugin.set_prepared(prepared);
    Ok(())
}
