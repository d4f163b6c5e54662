//! `slurm_spank_local_user_init`: in srun, once the allocation is known and before any
//! task is launched. The submit side of the placement check ([`crate::placement::submit`]):
//! under strict a multi-node GPU step across placement blocks stops here, with the
//! node backstop's message; prefer warns on srun's stderr.

use crate::guard::Failure;
use crate::host::{Host, Os};
use crate::mode::{Choice, resolve};
use crate::options::user_choice;
use crate::placement;
use crate::state::Plugin;

pub fn local_user_init(plugin: &Plugin, host: &dyn Host, os: &dyn Os) -> Result<(), Failure> {
    let user = user_choice(plugin.option(), |name| host.process_env(name))?;
    let settings = plugin.settings();
    let resolved = resolve(user, settings.default, settings.enforce);
    if resolved.choice == Choice::Off {
        return Ok(());
    }
    placement::submit(&settings, resolved.strict(), host, os)
}
