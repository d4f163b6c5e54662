//! task_init: applying a rank's plan, refusals, warnings, verbose lines.

use super::*;

#[test]
fn each_rank_gets_its_env_in_the_steps_global_convention() {
    let step = step_plan(Choice::Strict, false, ["2", "3"]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("CUDA_VISIBLE_DEVICES", "2,3")]);
    for (local, global, cuda, nic) in [(0, 10, "2", "mlx5_2"), (1, 11, "3", "mlx5_3")] {
        let task_host = host.task(local, global);
        let applied = apply_rank(&step, Task { local, global }, &task_host, &os).expect("applied");
        assert_eq!(applied.cpus, cpus("1"));
        assert_eq!(applied.mems, vec![1]);
        assert_eq!(*os.policy.borrow(), (MemPolicy::Bind, vec![1]));
        assert_eq!(task_host.var("CUDA_VISIBLE_DEVICES").as_deref(), Some(cuda));
        assert_eq!(
            task_host.var("CUDA_DEVICE_ORDER").as_deref(),
            Some("PCI_BUS_ID")
        );
        // The fabric variables (UCX_NET_DEVICES among them) come from the profile only;
        // this step has none.
        assert_eq!(task_host.var("UCX_NET_DEVICES"), None);
        assert_eq!(
            task_host.var("GPU_AFFINITY_MODE").as_deref(),
            Some("strict")
        );
        assert_eq!(task_host.var("GPU_AFFINITY_NICS").as_deref(), Some(nic));
        assert_eq!(task_host.var("GPU_AFFINITY_CPUS").as_deref(), Some("1"));
        assert_eq!(task_host.var("GPU_AFFINITY_MEMS").as_deref(), Some("1"));
    }
    let t = host.task(0, 10);
    apply_rank(
        &step,
        Task {
            local: 0,
            global: 10,
        },
        &t,
        &os,
    )
    .expect("applied");
    assert_eq!(t.var("GPU_AFFINITY_GPUS").as_deref(), Some("0003:00:00.0"));
}

#[test]
fn device_confinement_keeps_local_ids() {
    let step = step_plan(Choice::Prefer, false, ["0", "1"]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    let t = gpu_host(&[]).task(1, 1);
    apply_rank(
        &step,
        Task {
            local: 1,
            global: 1,
        },
        &t,
        &os,
    )
    .expect("applied");
    assert_eq!(t.var("CUDA_VISIBLE_DEVICES").as_deref(), Some("1"));
    // prefer: memory is preferred, not bound.
    assert_eq!(*os.policy.borrow(), (MemPolicy::Preferred, vec![1]));
    assert_eq!(t.var("GPU_AFFINITY_MODE").as_deref(), Some("prefer"));
}

/// The plugin's own variables are exactly the core's owned table, so no profile or
/// `force` can override one of them (CUDA_DEVICE_ORDER was missing from it once).
#[test]
fn every_variable_the_plugin_sets_is_in_the_owned_table() {
    let step = step_plan(Choice::Strict, false, ["2", "3"]);
    let env = crate::apply::rank_env(&step, &step.plan.ranks[0], &cpus("1"), &[1]);
    let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, gpu_affinity::plugin_env::PLUGIN_VARS);
}

#[test]
fn a_replayed_topology_reports_missing_numa_nodes_as_not_applied() {
    // The kernel has node 0 only; the plan wants node 1.
    let step = step_plan(Choice::Strict, false, ["2", "3"]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    logger::take();
    let t = gpu_host(&[]).task(0, 0);
    let applied = apply_rank(
        &step,
        Task {
            local: 0,
            global: 0,
        },
        &t,
        &os,
    )
    .expect("not a violation");
    assert!(applied.mems.is_empty());
    assert_eq!(t.var("GPU_AFFINITY_MEMS").as_deref(), Some(""));
    assert_eq!(os.policy_calls.get(), 0);
    let logs = logger::take();
    assert!(
        logs.iter()
            .any(|(l, t)| *l == SlurmLevel::Verbose && t.contains("not applied for NUMA node 1")),
        "{logs:?}"
    );
}

#[test]
fn on_the_live_topology_a_missing_numa_node_is_a_strict_violation() {
    let step = step_plan(Choice::Strict, true, ["2", "3"]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    let err = apply_rank(
        &step,
        Task {
            local: 0,
            global: 3,
        },
        &gpu_host(&[]).task(0, 3),
        &os,
    )
    .expect_err("strict");
    assert!(
        err.0
            .starts_with("gpu-affinity: rank 3: NUMA node 1 of GPU 0003:00:00.0 is not online"),
        "{err}"
    );
    assert!(
        err.0
            .ends_with("; use --gpu-affinity=prefer or drain this node"),
        "{err}"
    );
}

#[test]
fn a_narrowed_cpu_mask_is_a_violation_under_strict_and_a_warning_under_prefer() {
    // A cgroup cpuset without CPU 1 leaves the mask at CPU 0 only... or refuses it.
    let mut step = step_plan(Choice::Strict, false, ["2", "3"]);
    step.plan.ranks[0].cpus = cpus("0-1");
    let os = FakeOs::new(Ok(machine()), "0", &[0, 1]);
    let err = apply_rank(
        &step,
        Task {
            local: 0,
            global: 0,
        },
        &gpu_host(&[]).task(0, 0),
        &os,
    )
    .expect_err("strict");
    assert!(
        err.0
            .contains("CPU mask reads back as 0, not the planned 0-1"),
        "{err}"
    );

    step.resolved.choice = Choice::Prefer;
    let t = gpu_host(&[]).task(0, 0);
    logger::take();
    let applied = apply_rank(
        &step,
        Task {
            local: 0,
            global: 0,
        },
        &t,
        &os,
    )
    .expect("prefer runs");
    assert_eq!(applied.cpus, cpus("0"));
    assert_eq!(t.var("GPU_AFFINITY_CPUS").as_deref(), Some("0"));
    assert!(
        logger::take()
            .iter()
            .any(|(_, l)| l.contains("warning: rank 0: CPU mask reads back"))
    );
}

#[test]
fn strict_violation_fails_only_the_rank_it_names_with_one_line() {
    let mut step = step_plan(Choice::Strict, false, ["2", "3"]);
    step.plan.violations.push(Violation::new(
        Some(1),
        ViolationKind::NoLocalNic,
        "GPU 0000:8a:00.0 has no fabric NIC on its PCIe switch or NUMA node",
        "use --gpu-affinity=prefer or drain this node",
    ));
    let os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    let host = gpu_host(&[]);
    apply_rank(
        &step,
        Task {
            local: 0,
            global: 2,
        },
        &host.task(0, 2),
        &os,
    )
    .expect("rank 2 is fine");
    let t = host.task(1, 3);
    let err = apply_rank(
        &step,
        Task {
            local: 1,
            global: 3,
        },
        &t,
        &os,
    )
    .expect_err("rank 3 refused");
    assert_eq!(
        err.0,
        "gpu-affinity: rank 3: GPU 0000:8a:00.0 has no fabric NIC on its PCIe switch or NUMA node; \
         use --gpu-affinity=prefer or drain this node"
    );
    assert_eq!(
        t.var("GPU_AFFINITY_MODE"),
        None,
        "a refused task is not half-bound"
    );

    // Through the hook: the guard logs exactly that one line as an error.
    let plugin = remote_plugin(&[]);
    plugin.set_step(StepOutcome::Planned(Box::new(step)));
    logger::take();
    let rc = crate::guard::run("task_init", || {
        dispatch(&plugin, Hook::TaskInit, &t, &os, &[])
    });
    assert_eq!(rc, -1);
    let logs = logger::take();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].0, SlurmLevel::Error);
}

#[test]
fn a_violation_is_refused_under_the_global_rank_with_the_solvers_advice() {
    let mut step = step_plan(Choice::Strict, false, ["2", "3"]);
    step.plan.violations.push(Violation::new(
        Some(0),
        ViolationKind::NoLocalCpu,
        "GPU 0003:00:00.0 is on NUMA node 1 but the step has no CPU there",
        "request CPUs on NUMA node 1 or use --gpu-affinity=prefer",
    ));
    let os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    let err = apply_rank(
        &step,
        Task {
            local: 0,
            global: 8,
        },
        &gpu_host(&[]).task(0, 8),
        &os,
    )
    .expect_err("refused");
    assert_eq!(
        err.0,
        "gpu-affinity: rank 8: GPU 0003:00:00.0 is on NUMA node 1 but the step has no CPU there; \
         request CPUs on NUMA node 1 or use --gpu-affinity=prefer"
    );
}

#[test]
fn prefer_warns_about_plan_warnings_once_per_step() {
    let mut step = step_plan(Choice::Prefer, false, ["2", "3"]);
    step.plan.warnings.push(Violation::new(
        Some(1),
        ViolationKind::NoLocalNic,
        "GPU 0008:00:00.0 shares NIC mlx5_2 with GPU 0003:00:00.0",
        "drain this node (continuing under --gpu-affinity=prefer)",
    ));
    let os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    let host = gpu_host(&[]);
    logger::take();
    apply_rank(
        &step,
        Task {
            local: 0,
            global: 0,
        },
        &host.task(0, 0),
        &os,
    )
    .expect("runs");
    apply_rank(
        &step,
        Task {
            local: 1,
            global: 1,
        },
        &host.task(1, 1),
        &os,
    )
    .expect("runs");
    let warnings: Vec<_> = logger::take()
        .into_iter()
        .filter(|(_, t)| t.contains("shares NIC"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}

#[test]
fn verbose_switch_prints_each_ranks_binding_on_its_stderr() {
    let mut step = step_plan(Choice::Strict, false, ["2", "3"]);
    step.resolved.verbose = true;
    let os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    apply_rank(
        &step,
        Task {
            local: 1,
            global: 7,
        },
        &gpu_host(&[]).task(1, 7),
        &os,
    )
    .expect("runs");
    assert_eq!(
        *os.stderr.borrow(),
        vec![
            "gpu-affinity: rank 7 (local 1): mode strict GPUs 0008:00:00.0 (CUDA 3) NICs mlx5_3 CPUs 1 NUMA 1"
        ]
    );
    step.resolved.verbose = false;
    let quiet = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    apply_rank(
        &step,
        Task {
            local: 1,
            global: 7,
        },
        &gpu_host(&[]).task(1, 7),
        &quiet,
    )
    .expect("runs");
    assert!(quiet.stderr.borrow().is_empty());
}

#[test]
fn summary_names_the_step_and_every_rank() {
    let lines = step::summary(&step_plan(Choice::Strict, false, ["2", "3"]));
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0]
            .starts_with("gpu-affinity: step 42.0 (uid 1000): mode strict, 2 local ranks, 2 GPUs")
    );
    assert!(
        lines[2].contains("local rank 1: GPUs 0008:00:00.0 NICs mlx5_3 CPUs 1 NUMA 1"),
        "{lines:?}"
    );
}
