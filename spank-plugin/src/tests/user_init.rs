//! Remote init_post_opt and user_init: what a step's plan is decided from.

use super::*;

#[test]
fn off_reads_nothing() {
    for args in [&[][..], &["default=off"][..]] {
        let plugin = remote_plugin(args);
        let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("CUDA_VISIBLE_DEVICES", "2,3")]);
        let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
        prepare_step(&plugin, &host, &os);
        assert!(matches!(plugin.step(), Some(StepOutcome::Off)));
        assert!(
            os.reads.borrow().is_empty(),
            "off must not read the topology"
        );
        dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &os, &[]).expect("task_init");
        assert_eq!(os.policy_calls.get(), 0);
    }
}

#[test]
fn user_can_turn_off_a_site_default_but_not_below_the_floor() {
    let plugin = remote_plugin(&["default=strict"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("SLURM_GPU_AFFINITY", "off")]);
    prepare_step(&plugin, &host, &no_os());
    assert!(matches!(plugin.step(), Some(StepOutcome::Off)));

    let plugin = remote_plugin(&["enforce=strict"]);
    prepare_step(&plugin, &host, &no_os());
    assert!(
        matches!(plugin.step(), Some(StepOutcome::Refused { .. })),
        "{:?}",
        plugin.step()
    );
}

#[test]
fn a_step_without_gpus_is_left_alone_even_under_strict() {
    for env in [
        &[][..],
        &[("CUDA_VISIBLE_DEVICES", "NoDevFiles")][..],
        &[("SLURM_STEP_GPUS", "")][..],
    ] {
        let plugin = remote_plugin(&["default=strict", "enforce=strict"]);
        let host = gpu_host(env);
        let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
        prepare_step(&plugin, &host, &os);
        assert!(
            matches!(plugin.step(), Some(StepOutcome::LeftAlone(_))),
            "{env:?}"
        );
        assert!(os.reads.borrow().is_empty());
        dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &os, &[]).expect("task runs");
        assert_eq!(host.task(0, 0).var("GPU_AFFINITY_MODE"), None);
    }
}

#[test]
fn the_batch_step_is_left_alone() {
    let plugin = remote_plugin(&["default=strict"]);
    let mut host = gpu_host(&[("SLURM_STEP_GPUS", "0")]);
    host.step_id = 0xffff_fffb;
    prepare_step(&plugin, &host, &no_os());
    assert!(matches!(plugin.step(), Some(StepOutcome::LeftAlone(_))));
}

#[test]
fn unknown_topology_refuses_under_strict_and_warns_once_under_prefer() {
    let plugin = remote_plugin(&["sysfs_root=/srv/fx"]);
    plugin.set_option(OptionValue::Given(crate::mode::UserChoice {
        choice: Choice::Strict,
        verbose: false,
    }));
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3")]);
    let os = no_os();
    prepare_step(&plugin, &host, &os);
    assert_eq!(*os.reads.borrow(), vec![Path::new("/srv/fx").to_path_buf()]);
    let err =
        dispatch(&plugin, Hook::TaskInit, &host.task(1, 5), &os, &[]).expect_err("strict refuses");
    assert_eq!(
        err.0,
        "gpu-affinity: rank 5: this node's topology is unknown (no topology in this test); \
         use --gpu-affinity=prefer or drain this node"
    );

    let plugin = remote_plugin(&["default=prefer"]);
    prepare_step(&plugin, &host, &os);
    logger::take();
    dispatch(&plugin, Hook::TaskInit, &host.task(0, 4), &os, &[]).expect("prefer runs");
    dispatch(&plugin, Hook::TaskInit, &host.task(1, 5), &os, &[]).expect("prefer runs");
    let warnings: Vec<_> = logger::take()
        .into_iter()
        .filter(|(_, t)| t.contains("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}

#[test]
fn the_node_is_read_as_root_in_init_post_opt_and_user_init_reads_nothing() {
    // slurmstepd runs user_init as the job user: every node-level read happens before,
    // in init_post_opt, so a tree only root can reach still plans the step.
    let plugin = remote_plugin(&["sysfs_root=/srv/fx", "default=strict"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("CUDA_VISIBLE_DEVICES", "2,3")]);
    let root_os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    dispatch(&plugin, Hook::InitPostOpt, &host, &root_os, &[]).expect("init_post_opt");
    assert_eq!(
        *root_os.reads.borrow(),
        vec![Path::new("/srv/fx").to_path_buf()]
    );
    assert!(matches!(plugin.prepared(), Some(Prepared::Ready { .. })));
    assert!(
        plugin.step().is_none(),
        "user_init solves, not init_post_opt"
    );

    // As the user, the tree is out of reach: user_init must not need it.
    let user_os = no_os();
    dispatch(&plugin, Hook::UserInit, &host, &user_os, &[]).expect("user_init");
    assert!(user_os.reads.borrow().is_empty());
    assert_eq!(user_os.link_reads.get(), 0);
    let Some(StepOutcome::Planned(planned)) = plugin.step() else {
        panic!("not planned: {:?}", plugin.step());
    };
    assert_eq!(planned.plan.ranks.len(), 2);
    let task = host.task(0, 0);
    dispatch(&plugin, Hook::TaskInit, &task, &user_os, &[]).expect("task_init");
    assert_eq!(task.var("GPU_AFFINITY_MODE").as_deref(), Some("strict"));
}

#[test]
fn a_root_side_failure_in_init_post_opt_surfaces_at_task_init() {
    let plugin = remote_plugin(&["sysfs_root=/srv/fx", "default=strict"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3")]);
    // The hook itself succeeds: failing it would fail the step without a word to the user.
    dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).expect("init_post_opt");
    assert!(matches!(
        plugin.prepared(),
        Some(Prepared::Decided(StepOutcome::Refused { .. }))
    ));
    let good_os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    dispatch(&plugin, Hook::UserInit, &host, &good_os, &[]).expect("user_init");
    assert!(
        good_os.reads.borrow().is_empty(),
        "no second read as the user"
    );
    let err =
        dispatch(&plugin, Hook::TaskInit, &host.task(0, 3), &good_os, &[]).expect_err("refused");
    assert!(
        err.0
            .starts_with("gpu-affinity: rank 3: this node's topology is unknown"),
        "{err}"
    );
}

#[test]
fn gpus_that_appear_only_in_user_init_are_still_planned() {
    // Measured on 22.05: SLURM_STEP_GPUS is already there in init_post_opt. A Slurm that
    // set it later must not silently leave GPU steps unbound.
    let plugin = remote_plugin(&["default=strict"]);
    let cpu_view = gpu_host(&[]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    dispatch(&plugin, Hook::InitPostOpt, &cpu_view, &os, &[]).expect("init_post_opt");
    assert!(os.reads.borrow().is_empty(), "no GPUs yet: nothing read");
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3")]);
    dispatch(&plugin, Hook::UserInit, &host, &os, &[]).expect("user_init");
    assert_eq!(os.reads.borrow().len(), 1);
    assert!(
        matches!(plugin.step(), Some(StepOutcome::Planned(_))),
        "{:?}",
        plugin.step()
    );
}

#[test]
fn an_invalid_forwarded_value_fails_the_task() {
    let plugin = remote_plugin(&[]);
    assert!(option_callback::on_option(&plugin, Some("bogus"), true).is_err());
    let host = gpu_host(&[("SLURM_STEP_GPUS", "0")]);
    prepare_step(&plugin, &host, &no_os());
    let err =
        dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &no_os(), &[]).expect_err("invalid");
    assert!(err.0.contains("strict, prefer or off"), "{err}");
}

#[test]
fn task_init_without_user_init_fails_cleanly() {
    let plugin = remote_plugin(&[]);
    let host = gpu_host(&[]);
    assert!(dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &no_os(), &[]).is_err());
}

#[test]
fn remote_hooks_do_nothing_outside_slurmstepd() {
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Local).with_env(&[("SLURM_STEP_GPUS", "0")]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    dispatch(&plugin, Hook::UserInit, &host, &os, &[]).expect("no-op");
    dispatch(&plugin, Hook::TaskInit, &host, &os, &[]).expect("no-op");
    dispatch(&plugin, Hook::Exit, &host, &os, &[]).expect("no-op");
    assert!(plugin.step().is_none());
    assert!(os.reads.borrow().is_empty());
}
