//! `slurm_spank_init_post_opt` in srun and sbatch/salloc: options are parsed now, so check
//! the environment twin (a bad `SLURM_GPU_AFFINITY` stops srun/sbatch before launch, like
//! a bad option) and say when the site's floor raises the user's mode.

use crate::guard::Failure;
use crate::host::Host;
use crate::mode::resolve;
use crate::options::user_choice;
use crate::state::Plugin;

pub fn init_post_opt(plugin: &Plugin, host: &dyn Host) -> Result<(), Failure> {
    let user = user_choice(plugin, |name| host.process_env(name))?;
    let settings = plugin.settings();
    let resolved = resolve(user, settings.default, settings.enforce);
    if let Some(note) = resolved.raise_note() {
        log::info!("{note}");
    }
    Ok(())
}
