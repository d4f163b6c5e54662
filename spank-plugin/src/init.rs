//! `slurm_spank_init`: every context. Parse the plugstack.conf arguments (strictly: a
//! bad one fails the load, naming it), read the admin config where it matters, and
//! register `--gpu-affinity` in srun, sbatch/salloc and slurmstepd. In slurmstepd for
//! Slurm's own steps (batch, extern, interactive), which are never bound, a bad
//! argument or config is logged instead, so it cannot drain the node.

use std::path::Path;

use crate::guard::Failure;
use crate::host::{Context, Host};
use crate::options::OPTION;
use crate::settings::{self, Args, DEFAULT_CONFIG, Settings};
use crate::state::Plugin;
use crate::step_data::FIRST_SPECIAL_STEP;

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
    let context = host.context();
    let settings = match load(context, argv, default_config, owner) {
        Ok(settings) => settings,
        // Slurm's own steps (batch script, extern, interactive) are never bound, and a
        // failed init there drains the node on Slurm before 25.05, which has no
        // init_failure_mode (measured on 22.05 and 24.11): one broken plugstack line
        // would drain every node that reads it. Say so and carry on unbound; the job's
        // own steps, the ones the plugin binds, still fail their init with the error.
        Err(e) if context == Context::Remote && slurms_own_step(host) => {
            log::error!(
                "{e} (Slurm's own step left unbound; every step of the job fails with this)"
            );
            Settings::default()
        }
        Err(e) => return Err(e),
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

/// The plugstack arguments over the admin config, as `context` needs them.
fn load(
    context: Context,
    argv: &[String],
    default_config: &Path,
    owner: u32,
) -> Result<Settings, Failure> {
    let args = settings::parse_args(argv)?;
    Ok(match context {
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
    })
}

/// A batch, extern or interactive step: Slurm's own, never bound ([`FIRST_SPECIAL_STEP`]).
/// A step whose id cannot be read is taken for a job's step (its init fails as before).
fn slurms_own_step(host: &dyn Host) -> bool {
    host.step_id().is_ok_and(|id| id >= FIRST_SPECIAL_STEP)
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
