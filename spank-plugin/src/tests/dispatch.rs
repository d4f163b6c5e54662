//! The dispatch and the exports: hook names, the panic guard, build.rs' symbol list.

use super::*;

#[test]
fn mode_solver_mapping() {
    assert_eq!(Choice::Strict.solver_mode(), Some(Mode::Strict));
    assert_eq!(Choice::Off.solver_mode(), None);
}

#[test]
fn hook_names_are_slurms() {
    let names: Vec<&str> = [
        Hook::Init,
        Hook::InitPostOpt,
        Hook::UserInit,
        Hook::LocalUserInit,
        Hook::TaskPostFork,
        Hook::TaskInit,
        Hook::Exit,
    ]
    .map(Hook::name)
    .to_vec();
    assert_eq!(
        names,
        [
            "init",
            "init_post_opt",
            "user_init",
            "local_user_init",
            "task_post_fork",
            "task_init",
            "exit"
        ]
    );
    #[cfg(feature = "panic-test")]
    assert_eq!(names, crate::settings::PANIC_HOOKS);
}

/// `test_panic=HOOK` panics in HOOK where it runs (slurmstepd; srun for local_user_init),
/// the guard contains it, and other hooks and contexts are untouched.
#[cfg(feature = "panic-test")]
#[test]
fn test_panic_panics_in_the_named_hook_and_the_guard_contains_it() {
    let remote = gpu_host(&[]);
    let local = FakeHost::new(Context::Local);
    for (hook, home, away) in [
        (Hook::UserInit, &remote, &local),
        (Hook::LocalUserInit, &local, &remote),
    ] {
        let name = hook.name();
        let plugin = remote_plugin(&[&format!("test_panic={name}")]);
        let run = |hook: Hook, host: &FakeHost| {
            crate::guard::run(hook.name(), || dispatch(&plugin, hook, host, &no_os(), &[]))
        };
        logger::take();
        assert_eq!(run(hook, home), -1, "{name}");
        let said = format!("internal error in {name}: test_panic={name}");
        assert!(
            logger::take().iter().any(|(_, l)| l.contains(&said)),
            "{name}"
        );
        assert_eq!(run(Hook::Exit, home), 0, "{name}");
        assert_eq!(run(hook, away), 0, "{name}");
    }
}

#[test]
fn build_rs_requires_every_slurm_function_the_wrapper_calls() {
    let build = include_str!("../../build.rs");
    let list = build
        .split_once("const REQUIRED_FUNCTIONS")
        .and_then(|(_, rest)| rest.split_once("];"))
        .map(|(list, _)| list)
        .expect("REQUIRED_FUNCTIONS in build.rs");
    let sources = [include_str!("../spank.rs"), include_str!("../logger.rs")].concat();
    let mut called: Vec<&str> = sources
        .split("ffi::")
        .skip(1)
        .filter_map(|rest| {
            let name = rest
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()?;
            let is_call = rest[name.len()..].starts_with('(');
            (is_call && (name.starts_with("spank_") || name.starts_with("slurm_"))).then_some(name)
        })
        .collect();
    called.sort_unstable();
    called.dedup();
    assert!(called.len() >= 8, "{called:?}");
    for name in called {
        assert!(
            list.contains(&format!("\"{name}\"")),
            "{name} is not in REQUIRED_FUNCTIONS"
        );
    }
}
