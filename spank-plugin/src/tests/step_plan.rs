//! The step's GPUs (Slurm's ids, gres.conf, per-task binding) and CPUs.

use super::*;

#[test]
fn step_gpus_keep_slurms_convention() {
    let global = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("CUDA_VISIBLE_DEVICES", "2,3")]);
    let g = step::step_gpus(&global, 8).expect("ok").expect("gpus");
    assert_eq!(
        (g.global, g.cuda),
        (vec![2, 3], vec!["2".to_string(), "3".to_string()])
    );
    // Device confinement: CUDA sees the step's GPUs as 0..n.
    let confined = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("CUDA_VISIBLE_DEVICES", "0,1")]);
    let g = step::step_gpus(&confined, 8).expect("ok").expect("gpus");
    assert_eq!(
        (g.global, g.cuda),
        (vec![2, 3], vec!["0".to_string(), "1".to_string()])
    );
    // CUDA_VISIBLE_DEVICES alone (inherited from the user's shell) is no GPU step, and
    // its form does not matter then.
    for cvd in ["1,3", "GPU-5a3c", "0"] {
        let inherited = gpu_host(&[("CUDA_VISIBLE_DEVICES", cvd)]);
        assert_eq!(step::step_gpus(&inherited, 8).expect("ok"), None, "{cvd}");
    }
    // A CUDA_VISIBLE_DEVICES that does not fit the step's GPUs: Slurm's global ids.
    let odd = gpu_host(&[
        ("SLURM_STEP_GPUS", "2,3"),
        ("CUDA_VISIBLE_DEVICES", "GPU-5a3c"),
    ]);
    assert_eq!(
        step::step_gpus(&odd, 8).expect("ok").map(|g| g.cuda),
        Some(vec!["2".to_string(), "3".to_string()])
    );
    let bad = gpu_host(&[("SLURM_STEP_GPUS", "two")]);
    assert!(
        step::step_gpus(&bad, 8)
            .expect_err("bad")
            .contains("SLURM_STEP_GPUS is not a list of GPU ids")
    );
    assert_eq!(step::step_gpus(&gpu_host(&[]), 8).expect("ok"), None);
}

#[test]
fn an_inherited_cuda_visible_devices_leaves_a_cpu_step_alone_under_strict() {
    let plugin = remote_plugin(&["default=strict", "enforce=strict"]);
    let host = gpu_host(&[("CUDA_VISIBLE_DEVICES", "0,1")]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    prepare_step(&plugin, &host, &os);
    assert!(
        matches!(plugin.step(), Some(StepOutcome::LeftAlone(_))),
        "{:?}",
        plugin.step()
    );
    let t = host.task(0, 0);
    dispatch(&plugin, Hook::TaskInit, &t, &os, &[]).expect("the CPU task runs");
    assert_eq!(t.var("CUDA_VISIBLE_DEVICES").as_deref(), Some("0,1"));
    assert_eq!(t.var("GPU_AFFINITY_MODE"), None);
}

#[test]
fn a_typed_gpus_per_task_shapes_the_plan_and_a_malformed_one_is_warned_about() {
    // Four GPUs, two tasks, h100:1 per task: one GPU each (an even split would give two).
    let plugin = remote_plugin(&["default=prefer"]);
    let host = gpu_host(&[
        ("SLURM_STEP_GPUS", "0,1,2,3"),
        ("SLURM_GPUS_PER_TASK", "h100:1"),
    ]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    prepare_step(&plugin, &host, &os);
    let Some(StepOutcome::Planned(step)) = plugin.step() else {
        panic!("not planned: {:?}", plugin.step());
    };
    let per_rank: Vec<usize> = step.plan.ranks.iter().map(|r| r.gpus.len()).collect();
    assert_eq!(per_rank, vec![1, 1]);

    let plugin = remote_plugin(&["default=prefer"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "0,1"), ("SLURM_GPUS_PER_TASK", "h100")]);
    prepare_step(&plugin, &host, &os);
    dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &os, &[]).expect("runs");
    assert!(
        os.stderr
            .borrow()
            .iter()
            .any(|l| l.contains("SLURM_GPUS_PER_TASK='h100'")),
        "{:?}",
        os.stderr.borrow()
    );
}

/// The test machine with /dev/nvidiaN minors that do not follow PCI order: minors 1, 0,
/// 3, 2 for GPUs 0001, 0002, 0003, 0008.
fn minor_order(m: &Machine) -> gpu_affinity::slurm::gpu_ids::SlurmGpus {
    gpu_affinity::slurm::gpu_ids::SlurmGpus::number(
        m,
        None,
        &gpu_affinity::slurm::gpu_ids::minor_from_name,
    )
}

fn swapped_minors() -> Machine {
    let mut m = machine();
    for (g, minor) in m.gpus.iter_mut().zip([1, 0, 3, 2]) {
        g.minor = Some(minor);
    }
    m
}

#[test]
fn cuda_ids_follow_pci_order_where_minors_do_not() {
    let gpus = |global: &[u32], cuda: &[&str]| StepGpus {
        global: global.to_vec(),
        cuda: cuda.iter().map(|s| s.to_string()).collect(),
    };
    let m = swapped_minors();
    // Global ids: GPU 0 is 0002:00:00.0, the second GPU in PCI order.
    let mapped = minor_order(&m).map(&[0, 1]).expect("mapped");
    assert_eq!(mapped, vec![pci("0002:00:00.0"), pci("0001:00:00.0")]);
    let (ids, note) = step::cuda_ids(&m, &mapped, &gpus(&[0, 1], &["0", "1"]));
    assert_eq!(ids, ["1", "0"]);
    assert!(
        note.expect("note")
            .contains("do not follow PCI address order")
    );
    // Confined (local ids): positions among the step's own GPUs.
    let mapped = minor_order(&m).map(&[2, 3]).expect("mapped");
    assert_eq!(mapped, vec![pci("0008:00:00.0"), pci("0003:00:00.0")]);
    let (ids, _) = step::cuda_ids(&m, &mapped, &gpus(&[2, 3], &["0", "1"]));
    assert_eq!(ids, ["1", "0"]);
    // Minors in PCI order: Slurm's ids stand, global or local.
    let m = machine();
    let mapped = minor_order(&m).map(&[2, 3]).expect("mapped");
    for cuda in [["2", "3"], ["0", "1"]] {
        assert_eq!(
            step::cuda_ids(&m, &mapped, &gpus(&[2, 3], &cuda)),
            (cuda.map(String::from).to_vec(), None)
        );
    }
    // UUIDs name a GPU whatever the order.
    let m = swapped_minors();
    let mapped = minor_order(&m).map(&[0]).expect("mapped");
    assert_eq!(
        step::cuda_ids(&m, &mapped, &gpus(&[0], &["GPU-5a3c"])).0,
        ["GPU-5a3c"]
    );
}

#[test]
fn each_rank_opens_its_planned_gpu_when_minors_are_out_of_pci_order() {
    // prefer: both GPUs sit on NUMA node 0, which has one CPU for the two ranks.
    let plugin = remote_plugin(&["default=prefer", "sysfs_root=/srv/fx"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1")]);
    let os = FakeOs::new(Ok(swapped_minors()), "0-1", &[0, 1]);
    prepare_step(&plugin, &host, &os);
    for local in 0..2 {
        let t = host.task(local, local);
        dispatch(&plugin, Hook::TaskInit, &t, &os, &[]).expect("task_init");
        let gpu: PciAddr = t
            .var("GPU_AFFINITY_GPUS")
            .expect("gpu")
            .parse()
            .expect("one");
        // Under PCI_BUS_ID, CUDA index i is the i-th GPU by PCI address.
        let mut by_pci: Vec<PciAddr> = swapped_minors().gpus.iter().map(|g| g.pci).collect();
        by_pci.sort();
        let cuda: usize = t
            .var("CUDA_VISIBLE_DEVICES")
            .expect("cvd")
            .parse()
            .expect("one");
        assert_eq!(by_pci[cuda], gpu, "rank {local}");
    }
}

/// The /dev/nvidiaN minor (in [`machine`]) of the GPU task_init planned for `t`.
fn planned_minor(t: &FakeHost) -> Option<u32> {
    let gpu: PciAddr = t.var("GPU_AFFINITY_GPUS")?.parse().ok()?;
    machine().gpus.iter().find(|g| g.pci == gpu)?.minor
}

#[test]
fn gpu_ids_are_gres_conf_positions_not_minors() {
    // The layout: gres.conf lists nvidia3, 2 (out of order, a subset); Slurm's
    // ids 0,1 are those, not /dev/nvidia0 and 1.
    let plugin = remote_plugin(&["default=strict", "sysfs_root=/srv/fx"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1")]);
    let mut os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    os.gres_conf = Some("NodeName=n1 Name=gpu File=/dev/nvidia[3,2]\n".into());
    prepare_step(&plugin, &host, &os);
    let mut planned = Vec::new();
    for local in 0..2 {
        let t = host.task(local, local);
        dispatch(&plugin, Hook::TaskInit, &t, &os, &[]).expect("task_init");
        planned.push(planned_minor(&t).expect("planned"));
    }
    planned.sort_unstable();
    assert_eq!(planned, vec![2, 3]);
}

#[test]
fn a_bad_gres_conf_refuses_strict_with_file_and_line() {
    let plugin = remote_plugin(&["default=strict", "sysfs_root=/srv/fx"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "0"), ("CUDA_VISIBLE_DEVICES", "0")]);
    let mut os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    os.gres_conf = Some("Name=gpu File=/dev/nvidia0\nName=gpu Colour=red\n".into());
    prepare_step(&plugin, &host, &os);
    let t = host.task(0, 0);
    let err = dispatch(&plugin, Hook::TaskInit, &t, &os, &[]).expect_err("refused");
    let text = format!("{err:?}");
    assert!(
        text.contains("gres.conf /etc/slurm/gres.conf:line 2"),
        "{text}"
    );
}

#[test]
fn per_task_binding_takes_the_rank_planned_on_the_tasks_gpu() {
    // --gpu-bind=map_gpu:1,0: task 0 gets id 1, task 1 id 0; each must be planned on
    // the GPU it can open, whatever the plan's own rank order.
    let plugin = remote_plugin(&["default=strict", "sysfs_root=/srv/fx"]);
    let host = gpu_host(&[
        ("SLURM_STEP_GPUS", "0,1"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("SLURMD_TRES_BIND", "gpu:map_gpu:1,0"),
    ]);
    let mut os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    os.gres_conf = Some("Name=gpu File=/dev/nvidia[0-1]\n".into());
    os.constrain_devices = true;
    prepare_step(&plugin, &host, &os);
    for (local, want) in [(0, 1), (1, 0)] {
        let t = host.task(local, local);
        dispatch(&plugin, Hook::TaskInit, &t, &os, &[]).expect("task_init");
        assert_eq!(planned_minor(&t), Some(want), "task {local}");
        // Confined to its one GPU, the task's CUDA index is 0.
        assert_eq!(t.var("CUDA_VISIBLE_DEVICES").as_deref(), Some("0"));
    }
    // closest binds by CPUs: strict cannot tell the task's GPU and refuses.
    let host = gpu_host(&[
        ("SLURM_STEP_GPUS", "0,1"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("SLURMD_TRES_BIND", "gpu:closest"),
    ]);
    prepare_step(&plugin, &host, &os);
    let err = dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &os, &[]).expect_err("refused");
    assert!(format!("{err:?}").contains("closest"), "{err:?}");
}

#[test]
fn per_task_binding_reads_the_gres_gpu_spelling_of_24_11() {
    // 24.11 and 26.05 put `gres/gpu:...` in SLURMD_TRES_BIND (measured; 22.05 `gpu:...`).
    // Read as no binding, task 1 kept its local rank's plan and the step's CUDA id 1,
    // which a task confined to its one GPU cannot open.
    let plugin = remote_plugin(&["default=strict", "sysfs_root=/srv/fx"]);
    let mut os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    os.gres_conf = Some("Name=gpu File=/dev/nvidia[0-1]\n".into());
    os.constrain_devices = true;
    for (bind, wants) in [
        ("gres/gpu:per_task:1", [(0, 0), (1, 1)]),
        ("gres/gpu:map_gpu:1,0", [(0, 1), (1, 0)]),
    ] {
        let host = gpu_host(&[
            ("SLURM_STEP_GPUS", "0,1"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("SLURMD_TRES_BIND", bind),
        ]);
        prepare_step(&plugin, &host, &os);
        for (local, want) in wants {
            let t = host.task(local, local);
            dispatch(&plugin, Hook::TaskInit, &t, &os, &[]).expect("task_init");
            assert_eq!(planned_minor(&t), Some(want), "{bind}: task {local}");
            assert_eq!(
                t.var("CUDA_VISIBLE_DEVICES").as_deref(),
                Some("0"),
                "{bind}: task {local}"
            );
        }
    }
}

#[test]
fn a_named_gres_conf_that_is_missing_refuses_strict() {
    let plugin = remote_plugin(&[
        "default=strict",
        "sysfs_root=/srv/fx",
        "gres_conf=/nonexistent/gres.conf",
    ]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "0"), ("CUDA_VISIBLE_DEVICES", "0")]);
    // FakeOs without gres_conf text: no file at any path.
    let os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    prepare_step(&plugin, &host, &os);
    let err = dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &os, &[]).expect_err("refused");
    assert!(
        format!("{err:?}")
            .contains("gres.conf /nonexistent/gres.conf (named by gres_conf) does not exist"),
        "{err:?}"
    );
}

#[test]
fn a_huge_step_gpus_is_refused_in_one_short_line() {
    let huge = ["0-4095"; 18_000].join(",");
    let host = gpu_host(&[("SLURM_STEP_GPUS", huge.as_str())]);
    let err = step::step_gpus(&host, 8).expect_err("too long");
    assert!(err.len() < 100 && !err.contains("0-4095"), "{err}");
    let host = gpu_host(&[("SLURM_STEP_GPUS", "0-40")]);
    let err = step::step_gpus(&host, 8).expect_err("too many");
    assert!(err.contains("more than 32"), "{err}");
}

#[test]
fn step_cores_become_cpus_of_the_machine() {
    let mut m = machine();
    assert_eq!(step::step_cpus(&m, "1"), cpus("1"));
    assert_eq!(
        step::step_cpus(&m, "0-15"),
        cpus("0-1"),
        "CPUs the node lacks are dropped"
    );
    assert!(step::step_cpus(&m, "garbage").is_empty());
    // With hyperthreads, a core brings both its threads.
    m.numa_nodes = vec![NumaNode {
        id: 0,
        cpus: cpus("0-3"),
    }];
    m.cores = vec![cpus("1,3"), cpus("0,2")];
    assert_eq!(step::step_cpus(&m, "1"), cpus("1,3"));
}

/// Two sockets (one NUMA node each) numbering CPUs alternately: cpu0 on socket 0, cpu1
/// on socket 1, ...; 4 cores per socket, hyperthread siblings 8 apart.
fn alternating_machine() -> Machine {
    Machine {
        numa_nodes: vec![
            NumaNode {
                id: 0,
                cpus: cpus("0,2,4,6,8,10,12,14"),
            },
            NumaNode {
                id: 1,
                cpus: cpus("1,3,5,7,9,11,13,15"),
            },
        ],
        cores: (0..8).map(|c| cpus(&format!("{c},{}", c + 8))).collect(),
        ..Machine::default()
    }
}

#[test]
fn step_cores_follow_slurms_socket_major_numbering_on_alternating_cpus() {
    let m = alternating_machine();
    // Slurm's cores 0-3 are socket 0's: CPUs 0,2,4,6 and their siblings.
    assert_eq!(step::step_cpus(&m, "0-3"), cpus("0,2,4,6,8,10,12,14"));
    assert_eq!(step::step_cpus(&m, "4-7"), cpus("1,3,5,7,9,11,13,15"));
    assert_eq!(step::step_cpus(&m, "1,5"), cpus("2,10,3,11"));
    let order: Vec<String> = step::slurm_core_order(&m)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        order,
        ["0,8", "2,10", "4,12", "6,14", "1,9", "3,11", "5,13", "7,15"]
    );
    // Without a core list, every CPU is a core, still socket by socket.
    let mut flat = m.clone();
    flat.cores.clear();
    assert_eq!(step::step_cpus(&flat, "0-7"), cpus("0,2,4,6,8,10,12,14"));
    // On a contiguously numbered node the order is the plain one.
    let mut plain = machine();
    plain.numa_nodes[0].cpus = cpus("0-3");
    plain.numa_nodes[1].cpus = cpus("4-7");
    assert_eq!(step::step_cpus(&plain, "2-5"), cpus("2-5"));
}

#[test]
fn slurmstepds_own_mask_wins_when_the_cores_do_not_fit_inside_it() {
    let all = cpus("0-15");
    let mapped = cpus("0-3");
    // No mask (replayed topology) or a mask of the whole node: the mapping stands.
    assert_eq!(
        step::reconcile_cpus(mapped.clone(), None, &all),
        (mapped.clone(), None)
    );
    assert_eq!(
        step::reconcile_cpus(mapped.clone(), Some(&all), &all).0,
        mapped
    );
    // A cgroup cpuset that holds the mapped CPUs (the job's, or the step's own).
    assert_eq!(
        step::reconcile_cpus(mapped.clone(), Some(&cpus("0-7")), &all).0,
        mapped
    );
    // One that does not: the kernel's word wins, and the note says so.
    let (got, note) = step::reconcile_cpus(mapped.clone(), Some(&cpus("0,2,4,6")), &all);
    assert_eq!(got, cpus("0,2,4,6"));
    assert!(
        note.expect("note")
            .contains("outside slurmstepd's own CPU mask 0,2,4,6")
    );
    // Unknown cores: the mask.
    assert_eq!(
        step::reconcile_cpus(CpuSet::new(), Some(&cpus("8-9")), &all).0,
        cpus("8-9")
    );
}

#[test]
fn a_live_step_plans_inside_slurmstepds_cpu_mask() {
    // sysfs_root=/ (live): slurmstepd runs confined to CPU 1, Slurm's core list says 0.
    let plugin = remote_plugin(&["default=prefer"]);
    assert!(plugin.settings().live());
    let mut host = gpu_host(&[("SLURM_STEP_GPUS", "2,3")]);
    host.alloc_cores = Some("0".into());
    let os = FakeOs::new(Ok(machine()), "1", &[0, 1]);
    prepare_step(&plugin, &host, &os);
    let Some(StepOutcome::Planned(step)) = plugin.step() else {
        panic!("not planned: {:?}", plugin.step());
    };
    for r in &step.plan.ranks {
        assert_eq!(r.cpus, cpus("1"), "rank {}", r.rank);
    }
}
