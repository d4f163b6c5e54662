//! `slurm_spank_init`: every context. Parse the plugstack.conf arguments (strictly: a
//! bad one fails the load, naming it), read the admin config where it matters, and
//! register `--gpu-affinity` in srun, sbatch/salloc and slurmstepd.

use std::path::Path;

use crate::guard::Failure;
use crate::host::{Context, Host};
use crate::options::OPTION;
use crate::settings::{self, Args, DEFAULT_CONFIG};
use crate::state::Plugin;

pub fn init(plugin: &Plugin, host: &dyn Host, argv: &[String]) -> Result<(), Failure> {
    init_with_config(plugin, host, argv, Path::new(DEFAULT_CONFIG), 0)
}

/// `default_config` and `owner` are parameters so tests can use their own file and uid.
pub fn init_with_config(
    plugin: &Plugin,
    host: &dyn Host,
    argv: &[String],
    default_config: &Path,
    owner: u32,
) -> Result<(), Failure> {
    let args = settings::parse_args(argv)?;
    let context = host.context();
    let settings = match context {
        // slurmstepd decides the binding: a config it cannot trust is a load error.
        Context::Remote => settings::settings(&args, default_config, owner)?,
        // srun/sbatch only validate and print the floor note; a config the user
        // cannot read must not stop their job from being submitted. One named in
        // plugstack.conf that does not exist is another matter: that is the admin's
        // mistake, and carrying on without it would silently drop its `enforce`.
        Context::Local | Context::Allocator => {
            match settings::settings(&args, default_config, owner) {
                Ok(settings) => settings,
                Err(e) if args.config.as_deref().is_some_and(is_missing) => return Err(e.into()),
                Err(e) => {
                    log::trace!("{e}; using plugstack.conf arguments only");
                    without_file(&args)
                }
            }
        }
        _ => without_file(&args),
    };
    plugin.set_settings(settings);
    if matches!(
        context,
        Context::Local | Context::Remote | Context::Allocator
    ) {
        host.register_option(&OPTION)
            .map_err(|e| Failure(format!("gpu-affinity: registering --gpu-affinity: {e}")))?;
    }
    Ok(())
}

/// Nothing at all at `path` (not even a dangling symlink). A file this user may not
/// look at is not missing.
fn is_missing(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

fn without_file(args: &Args) -> settings::Settings {
    let no_file = Args {
        config: None,
        ..args.clone()
    };
    settings::settings(&no_file, Path::new("/nonexistent/gpu-affinity.toml"), 0).unwrap_or_default()
}
