//! Modes and refusals: strict refuses a node whose GPU has no nearby NIC (message on
//! srun's stderr, non-zero exit), prefer warns and runs, off and the default leave tasks
//! alone, a bad value stops srun before launch, a step without GPUs is never touched,
//! and the env twin and plugstack `default=` choose the mode.

mod common;

use common::{
    ND_H100_V5, assert_untouched, check_rank, check_step, machine, probe_whole_node, start,
};
use gpu_affinity_tests::fixture::without_nics_on_numa;
use gpu_affinity_tests::{ClientOptions, ClusterBuilder};
use std::time::Duration;

#[test]
fn strict_refuses_a_gpu_without_a_local_nic_with_one_line_and_nonzero_exit() {
    let m = without_nics_on_numa(&machine(ND_H100_V5), 1);
    let Some(mut cluster) = start("strict_refuses", &m, ClusterBuilder::new()) else {
        return;
    };
    let out = probe_whole_node(&cluster, Some("strict"), 8, &ClientOptions::default());
    assert!(
        !out.success() && !out.timed_out(),
        "strict must fail the step: {out}"
    );
    // The GPUs of NUMA node 1 (minors 4..7) have no fabric NIC left.
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("gpu-affinity: rank"))
        .collect();
    assert!(
        !lines.is_empty(),
        "no gpu-affinity line on srun's stderr: {out}"
    );
    let numa1_gpus: Vec<String> = m
        .gpus
        .iter()
        .filter(|g| m.numa_of(g.pci) == Some(1))
        .map(|g| g.pci.to_string())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| numa1_gpus.iter().any(|g| l.contains(g.as_str())) && l.contains("prefer")),
        "the refusal names neither a NUMA-1 GPU nor the way out (--gpu-affinity=prefer): {out}"
    );
    // Refused ranks never ran; the others ran bound.
    for t in out.tasks().expect("probe").values() {
        let minor: u32 = t
            .env("CUDA_VISIBLE_DEVICES")
            .and_then(|c| c.parse().ok())
            .expect("one GPU per rank");
        let gpu = common::gpu_by_minor(&m, minor);
        assert_eq!(
            m.numa_of(gpu),
            Some(0),
            "rank {} on refused GPU {gpu} ran: {out}",
            t.rank
        );
        check_rank(&m, t, "strict", 1, &out);
    }
    // A refused step is the user's problem, not the node's: it stays in service.
    cluster
        .wait_idle(Duration::from_secs(10))
        .expect("node back to idle, not drained");
    assert!(cluster.daemons_alive());
}

#[test]
fn prefer_warns_and_runs_with_the_best_plan() {
    let m = without_nics_on_numa(&machine(ND_H100_V5), 1);
    let Some(cluster) = start("prefer_warns", &m, ClusterBuilder::new()) else {
        return;
    };
    let out = probe_whole_node(&cluster, Some("prefer"), 8, &ClientOptions::default());
    assert!(out.success(), "prefer must run: {out}");
    assert!(
        out.stderr.contains("gpu-affinity"),
        "prefer must warn: {out}"
    );
    let tasks = out.tasks().expect("probe");
    assert_eq!(tasks.len(), 8, "{out}");
    for t in tasks.values() {
        let minor: u32 = t
            .env("CUDA_VISIBLE_DEVICES")
            .and_then(|c| c.parse().ok())
            .expect("one GPU per rank");
        let gpu = common::gpu_by_minor(&m, minor);
        if m.numa_of(gpu) == Some(0) {
            check_rank(&m, t, "prefer", 1, &out);
        } else {
            // No NIC near these GPUs, but CPUs and memory still follow the GPU.
            let cpus = m
                .numa_node(1)
                .map(|n| n.cpus.to_string())
                .unwrap_or_default();
            assert_eq!(t.cpus, cpus, "rank {}: {out}", t.rank);
            assert_eq!(
                t.env("GPU_AFFINITY_GPUS"),
                Some(gpu.to_string().as_str()),
                "{out}"
            );
        }
    }
}

#[test]
fn off_and_no_option_leave_tasks_alone() {
    let m = machine(ND_H100_V5);
    let Some(cluster) = start("off_leaves_alone", &m, ClusterBuilder::new()) else {
        return;
    };
    for mode in [Some("off"), None] {
        let out = probe_whole_node(&cluster, mode, 8, &ClientOptions::default());
        assert!(out.success(), "{out}");
        let tasks = out.tasks().expect("probe");
        assert_eq!(tasks.len(), 8, "{out}");
        for t in tasks.values() {
            assert_untouched(t, &out);
            assert_eq!(t.cpus, "0-1", "task/none leaves the whole node: {out}");
            assert_eq!(
                t.env("CUDA_VISIBLE_DEVICES"),
                Some("0,1,2,3,4,5,6,7"),
                "{out}"
            );
        }
    }
}

#[test]
fn a_bad_value_stops_srun_before_launch() {
    let m = machine(ND_H100_V5);
    let Some(cluster) = start("bad_value", &m, ClusterBuilder::new()) else {
        return;
    };
    let probe = cluster.probe_script().display().to_string();
    let out = cluster
        .srun(&["-l", "--gpu-affinity=bogus", "-n1", &probe])
        .expect("run srun");
    assert!(!out.success() && !out.timed_out(), "{out}");
    assert!(
        out.stderr.contains("Invalid --gpu-affinity argument"),
        "{out}"
    );
    for allowed in ["strict", "prefer", "off"] {
        assert!(
            out.stderr.contains(allowed),
            "allowed value {allowed} not named: {out}"
        );
    }
    assert!(out.stdout.trim().is_empty(), "no task may run: {out}");
}

#[test]
fn a_step_without_gpus_runs_untouched_in_strict_mode() {
    let m = machine(ND_H100_V5);
    let builder = ClusterBuilder::new().plugin_arg("default", "strict");
    let Some(cluster) = start("cpu_step_in_strict", &m, builder) else {
        return;
    };
    for args in [&["--gpu-affinity=strict", "-n2"][..], &["-n2"]] {
        let out = cluster
            .probe(args, &ClientOptions::default())
            .expect("run srun");
        assert!(out.success(), "a CPU step must run: {out}");
        let tasks = out.tasks().expect("probe");
        assert_eq!(tasks.len(), 2, "{out}");
        for t in tasks.values() {
            assert_untouched(t, &out);
            assert_eq!(t.cpus, "0-1", "{out}");
        }
    }
    // A CUDA_VISIBLE_DEVICES in the user's shell travels with the step (srun propagates
    // the environment). Measured on Slurm 22.05 with this node's gres/gpu: the step gets
    // no SLURM_STEP_GPUS and the gres plugin clears the inherited value before the
    // plugin's user_init, so neither slurmstepd nor the tasks see it. (On a node whose
    // Slurm does not clear it, the plugin ignores it all the same: it trusts only
    // SLURM_STEP_GPUS; unit test `an_inherited_cuda_visible_devices_...`.)
    let opts = ClientOptions::default().env("CUDA_VISIBLE_DEVICES", "0,1");
    let out = cluster
        .probe(&["--gpu-affinity=strict", "-n2"], &opts)
        .expect("run srun");
    assert!(out.success(), "a CPU step must run: {out}");
    for t in out.tasks().expect("probe").values() {
        assert_eq!(t.env("SLURM_STEP_GPUS"), None, "{out}");
        assert_eq!(
            t.env("CUDA_VISIBLE_DEVICES"),
            None,
            "cleared by Slurm: {out}"
        );
        assert_untouched(t, &out);
    }
    // With --gres the step's GPUs come from SLURM_STEP_GPUS, which Slurm sets.
    let out = cluster
        .probe(&["--gpu-affinity=strict", "-n2", "--gres=gpu:2"], &opts)
        .expect("run srun");
    assert!(out.success(), "{out}");
    for t in out.tasks().expect("probe").values() {
        assert_eq!(t.env("SLURM_STEP_GPUS"), Some("0,1"), "{out}");
        assert_eq!(t.env("GPU_AFFINITY_MODE"), Some("strict"), "{out}");
    }
}

#[test]
fn plugstack_default_and_the_env_twin_choose_the_mode() {
    let m = machine(ND_H100_V5);
    let builder = ClusterBuilder::new().plugin_arg("default", "strict");
    let Some(cluster) = start("default_and_env_twin", &m, builder) else {
        return;
    };
    // No option: the admin's default applies.
    let out = probe_whole_node(&cluster, None, 8, &ClientOptions::default());
    check_step(&m, &out, "strict", 1);
    // The env twin is the user's choice, like the option.
    let opts = ClientOptions::default().env("SLURM_GPU_AFFINITY", "prefer");
    let out = probe_whole_node(&cluster, None, 8, &opts);
    check_step(&m, &out, "prefer", 1);
    // The option wins over the env twin.
    let out = probe_whole_node(&cluster, Some("off"), 8, &opts);
    assert!(out.success(), "{out}");
    for t in out.tasks().expect("probe").values() {
        assert_untouched(t, &out);
    }
}
