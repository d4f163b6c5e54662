//! The one place that maps (hook, context) to the code for it.

use crate::guard::Failure;
use crate::host::{Context, Host, Os};
use crate::state::Plugin;
use crate::{exit, init, init_post_opt, local_user_init, task_init, task_post_fork, user_init};

/// The SPANK hooks this plugin exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Init,
    InitPostOpt,
    UserInit,
    /// srun, once the allocation is known (`slurm_spank_local_user_init`).
    LocalUserInit,
    TaskPostFork,
    TaskInit,
    Exit,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Init => "init",
            Hook::InitPostOpt => "init_post_opt",
            Hook::UserInit => "user_init",
            Hook::LocalUserInit => "local_user_init",
            Hook::TaskPostFork => "task_post_fork",
            Hook::TaskInit => "task_init",
            Hook::Exit => "exit",
        }
    }
}

pub fn dispatch(
    plugin: &Plugin,
    hook: Hook,
    host: &dyn Host,
    os: &dyn Os,
    argv: &[String],
) -> Result<(), Failure> {
    let context = host.context();
    let result = match (hook, context) {
        (Hook::Init, _) => init::init(plugin, host, argv),
        (Hook::InitPostOpt, Context::Local | Context::Allocator) => {
            init_post_opt::init_post_opt(plugin, host)
        }
        (Hook::InitPostOpt, Context::Remote) => init_post_opt::remote(plugin, host, os),
        (Hook::UserInit, Context::Remote) => user_init::user_init(plugin, host, os),
        (Hook::LocalUserInit, Context::Local) => local_user_init::local_user_init(plugin, host, os),
        (Hook::TaskPostFork, Context::Remote) => task_post_fork::task_post_fork(plugin),
        (Hook::TaskInit, Context::Remote) => task_init::task_init(plugin, host, os),
        (Hook::Exit, Context::Remote) => exit::exit(plugin),
        _ => Ok(()),
    };
    panic_test(plugin, hook, context);
    result
}

/// `test_panic=HOOK` (feature `panic-test`): panic inside HOOK where it does its work
/// (slurmstepd; `local_user_init` in srun), after that work, so the harness sees the
/// guard turn it into a failed hook.
#[cfg(feature = "panic-test")]
fn panic_test(plugin: &Plugin, hook: Hook, context: Context) {
    let home = match hook {
        Hook::LocalUserInit => Context::Local,
        _ => Context::Remote,
    };
    if context == home && plugin.settings().test_panic.as_deref() == Some(hook.name()) {
        panic!("test_panic={} (panic-test build)", hook.name());
    }
}

#[cfg(not(feature = "panic-test"))]
fn panic_test(_: &Plugin, _: Hook, _: Context) {}
