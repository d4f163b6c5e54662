//! The `--gpu-affinity` option callback, in srun/sbatch/salloc (`remote = false`) and in
//! slurmstepd, where Slurm calls it again with the forwarded value (`remote = true`).
//! Remembers the value for init_post_opt; parsing is `options.rs`'.

use crate::guard::Failure;
use crate::options;
use crate::state::Plugin;

pub fn on_option(plugin: &Plugin, optarg: Option<&str>, remote: bool) -> Result<(), Failure> {
    let (value, result) = options::parse_option(optarg, remote);
    plugin.set_option(value);
    result
}
