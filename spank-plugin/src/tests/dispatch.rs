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

#[cfg(feature = "panic-test")]
#[test]
fn test_panic_panics_in_the_named_remote_hook_and_the_guard_contains_it() {
    let plugin = remote_plugin(&["test_panic=user_init"]);
    let host = gpu_host(&[]);
    logger::take();
    let rc = crate::guard::run("user_init", || {
        dispatch(&plugin, Hook::UserInit, &host, &no_os(), &[])
    });
    assert_eq!(rc, -1);
    assert!(
        logger::take()
            .iter()
            .any(|(_, l)| l.contains("internal error in user_init: test_panic=user_init"))
    );
    // Other hooks and other contexts are untouched.
    let rc = crate::guard::run("exit", || {
        dispatch(&plugin, Hook::Exit, &host, &no_os(), &[])
    });
    assert_eq!(rc, 0);
    let local = FakeHost::new(Context::Local);
    let rc = crate::guard::run("user_init", || {
        dispatch(&plugin, Hook::UserInit, &local, &no_os(), &[])
    });
    assert_eq!(rc, 0);
}

/// srun's local_user_init panics in srun (its own context), not in slurmstepd.
#[cfg(feature = "panic-test")]
#[test]
fn test_panic_in_local_user_init_panics_in_srun() {
    let plugin = remote_plugin(&["test_panic=local_user_init"]);
    let local = FakeHost::new(Context::Local);
    logger::take();
    let rc = crate::guard::run("local_user_init", || {
        dispatch(&plugin, Hook::LocalUserInit, &local, &no_os(), &[])
    });
    assert_eq!(rc, -1);
    assert!(
        logger::take()
            .iter()
            .any(|(_, l)| l
                .contains("internal error in local_user_init: test_panic=local_user_init"))
    );
    let remote = gpu_host(&[]);
    let rc = crate::guard::run("local_user_init", || {
        dispatch(&plugin, Hook::LocalUserInit, &remote, &no_os(), &[])
    });
    assert_eq!(rc, 0);
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
