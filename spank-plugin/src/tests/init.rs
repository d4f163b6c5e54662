//! `slurm_spank_init`: plugstack arguments, the admin config, option registration.

use super::*;

#[test]
fn init_registers_the_option_where_users_can_give_it() {
    for (context, registers) in [
        (Context::Local, true),
        (Context::Remote, true),
        (Context::Allocator, true),
        (Context::Slurmd, false),
        (Context::JobScript, false),
    ] {
        let plugin = Plugin::new();
        let host = FakeHost::new(context);
        dispatch(&plugin, Hook::Init, &host, &no_os(), &[]).expect("init");
        let names: Vec<&str> = host.registered.borrow().iter().map(|o| o.name).collect();
        assert_eq!(
            names == ["gpu-affinity"],
            registers,
            "{context:?}: {names:?}"
        );
    }
}

#[test]
fn init_fails_on_an_unknown_plugstack_key_naming_it() {
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Remote);
    let err = dispatch(
        &plugin,
        Hook::Init,
        &host,
        &no_os(),
        &["sysfs=/x".to_string()],
    )
    .expect_err("unknown key");
    assert!(
        err.0.contains("unknown plugstack.conf key 'sysfs'"),
        "{err}"
    );
    assert!(host.registered.borrow().is_empty());
}

/// A bad plugstack line in a batch, extern or interactive step (never bound) is logged,
/// not a failed init, which Slurm before 25.05 answers by draining the node; the job's
/// own steps on the same line still fail init, naming the key.
#[test]
fn a_bad_plugstack_line_fails_the_jobs_steps_but_not_slurms_own() {
    let argv = ["sysfs=/x".to_string()];
    for (step_id, own) in [
        (0xffff_fffb, true), // batch
        (0xffff_fffc, true), // extern
        (0xffff_fffa, true), // interactive
        (0, false),
        (7, false),
    ] {
        let plugin = Plugin::new();
        let mut host = FakeHost::new(Context::Remote);
        host.step_id = step_id;
        logger::take();
        let result = dispatch(&plugin, Hook::Init, &host, &no_os(), &argv);
        let logged = logger::take();
        if own {
            result.expect("Slurm's own step loads");
            assert!(
                logged.iter().any(|(level, l)| *level == SlurmLevel::Error
                    && l.contains("unknown plugstack.conf key 'sysfs'")
                    && l.contains("left unbound")),
                "{step_id:#x}: {logged:?}"
            );
            assert_eq!(host.registered.borrow().len(), 1, "{step_id:#x}");
            // The step is left alone: nothing is read, whatever the user asked for.
            option_callback::on_option(&plugin, Some("strict"), true).expect("mode");
            let gpus = gpu_host(&[("SLURM_STEP_GPUS", "0,1")]);
            let gpus = FakeHost { step_id, ..gpus };
            prepare_step(&plugin, &gpus, &no_os());
            assert!(
                matches!(plugin.step(), Some(StepOutcome::LeftAlone(_))),
                "{step_id:#x}: {:?}",
                plugin.step()
            );
        } else {
            let err = result.expect_err("a job's step fails init");
            assert!(
                err.0.contains("unknown plugstack.conf key 'sysfs'"),
                "{err}"
            );
        }
    }
    // A config that cannot be used is deferred the same way.
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("absent.toml");
    let argv = vec![format!("config={}", missing.display())];
    let mut host = FakeHost::new(Context::Remote);
    host.step_id = 0xffff_fffb;
    crate::init::init_with_config(&Plugin::new(), &host, &argv, &missing, uid())
        .expect("the batch step loads");
    host.step_id = 0;
    crate::init::init_with_config(&Plugin::new(), &host, &argv, &missing, uid())
        .expect_err("a job step does not");
}

/// A config plugstack.conf names is the admin's: missing is a load error in every
/// context that reads it (srun and sbatch included), never a silent fallback to defaults
/// that would drop its `enforce`. Only the implicit default path may be absent, and only
/// when nothing at all is there.
#[test]
fn a_named_config_that_is_missing_fails_init_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("absent.toml");
    let argv = vec![
        format!("config={}", missing.display()),
        "enforce=strict".to_string(),
    ];
    for context in [Context::Local, Context::Allocator, Context::Remote] {
        let plugin = Plugin::new();
        let host = FakeHost::new(context);
        let err = crate::init::init_with_config(&plugin, &host, &argv, &missing, uid())
            .expect_err("named and missing");
        assert!(
            err.0.starts_with("gpu-affinity: config ")
                && err.0.contains(&missing.display().to_string()),
            "{context:?}: {err}"
        );
    }
    // The implicit default: absent means defaults; a dangling symlink there is an error.
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Remote);
    crate::init::init_with_config(&plugin, &host, &[], &missing, uid()).expect("absent default");
    let dangling = dir.path().join("config.toml");
    std::os::unix::fs::symlink(&missing, &dangling).expect("symlink");
    let plugin = Plugin::new();
    let err = crate::init::init_with_config(&plugin, &host, &[], &dangling, uid())
        .expect_err("something is at the default path");
    assert!(err.0.contains(&dangling.display().to_string()), "{err}");
}

#[test]
fn plugstack_arguments_reach_the_settings() {
    let plugin = remote_plugin(&["sysfs_root=/srv/fx", "default=prefer", "enforce=strict"]);
    let s = plugin.settings();
    assert_eq!(s.sysfs_root, Path::new("/srv/fx"));
    assert_eq!(s.default, Choice::Prefer);
    assert!(!s.live());
}
