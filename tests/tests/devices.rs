//! A step that gets GPUs 4..7 (because another job holds 0..3) is bound to those GPUs'
//! NUMA node, and CUDA_VISIBLE_DEVICES keeps Slurm's numbering for the step: global ids
//! without device confinement, local ids under `ConstrainDevices=yes`.

mod common;

use common::{ND_H100_V5, check_rank_on, machine, start};
use gpu_affinity::model::Machine;
use gpu_affinity_tests::{ClientOptions, Cluster, ClusterBuilder, TaskPlugin};

/// Hold GPUs 0..3 and CPU 0 with a sleeping batch job.
fn hold_first_half(cluster: &Cluster) {
    let held = cluster
        .client(
            &[
                "sbatch",
                "--parsable",
                "-n1",
                "-c1",
                "--gres=gpu:4",
                "--wrap",
                "sleep 300",
            ],
            &ClientOptions::default(),
        )
        .expect("sbatch")
        .ok()
        .expect("hold job accepted");
    let id = held.stdout.trim().to_owned();
    cluster
        .wait_running(&id, &ClientOptions::default())
        .unwrap_or_else(|e| panic!("hold job {id}: {e}"));
}

fn check_second_half(m: &Machine, cluster: &Cluster, local_ids: bool) {
    let out = cluster
        .probe(
            &["--gpu-affinity=strict", "-O", "-n4", "-c1", "--gres=gpu:4"],
            &ClientOptions::default(),
        )
        .expect("run srun");
    assert!(out.success(), "{out}");
    let tasks = out.tasks().expect("probe");
    assert_eq!(tasks.len(), 4, "{out}");
    let mut seen = Vec::new();
    for t in tasks.values() {
        let step_gpus: Vec<u32> = t
            .env("SLURM_STEP_GPUS")
            .unwrap_or_default()
            .split(',')
            .filter_map(|s| s.parse().ok())
            .collect();
        assert_eq!(step_gpus, vec![4, 5, 6, 7], "{out}");
        let cuda: usize = t
            .env("CUDA_VISIBLE_DEVICES")
            .and_then(|c| c.parse().ok())
            .expect("one GPU per rank");
        let minor = if local_ids {
            step_gpus[cuda]
        } else {
            u32::try_from(cuda).expect("small")
        };
        if !local_ids {
            assert!(
                step_gpus.contains(&minor),
                "CUDA_VISIBLE_DEVICES={cuda} is not a global id of the step: {out}"
            );
        }
        check_rank_on(m, t, "strict", 1, &out, minor);
        seen.push(minor);
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![4, 5, 6, 7], "{out}");
}

#[test]
fn a_later_step_on_gpus_4_to_7_is_bound_with_global_ids() {
    let m = machine(ND_H100_V5);
    let Some(cluster) = start("later_step_global_ids", &m, ClusterBuilder::new()) else {
        return;
    };
    hold_first_half(&cluster);
    check_second_half(&m, &cluster, false);
}

#[test]
fn under_device_confinement_ids_are_local_to_the_step() {
    let m = machine(ND_H100_V5);
    let builder = ClusterBuilder::new().task_plugin(TaskPlugin::CgroupDevices);
    let Some(cluster) = start("confined_local_ids", &m, builder) else {
        return;
    };
    hold_first_half(&cluster);
    check_second_half(&m, &cluster, true);
}
