//! sbatch: the env twin `SLURM_GPU_AFFINITY` and the `--gpu-affinity` option reach the
//! steps of a batch job.

mod common;

use common::{ND_H100_V5, check_step, machine, start};
use gpu_affinity_tests::{ClientOptions, ClusterBuilder, StepOutput};

fn batch_script(cluster: &gpu_affinity_tests::Cluster) -> String {
    format!(
        "#!/bin/sh\nsrun -l {} {}\n",
        cluster.whole_node(8).join(" "),
        cluster.probe_script().display()
    )
}

fn as_step(job: &gpu_affinity_tests::BatchJob) -> StepOutput {
    StepOutput {
        command: format!("batch job {}", job.id),
        status: std::process::ExitStatus::default(),
        stdout: job.stdout.clone(),
        stderr: job.stderr.clone(),
    }
}

#[test]
fn sbatch_with_the_env_twin_binds_its_steps() {
    let m = machine(ND_H100_V5);
    let Some(cluster) = start("sbatch_env_twin", &m, ClusterBuilder::new()) else {
        return;
    };
    let alloc = cluster.whole_node_allocation();
    let alloc: Vec<&str> = alloc.iter().map(String::as_str).collect();
    let opts = ClientOptions::default().env("SLURM_GPU_AFFINITY", "strict");
    let job = cluster
        .sbatch(&batch_script(&cluster), &alloc, &opts)
        .expect("run batch job");
    assert!(job.completed(), "{job}");
    check_step(&m, &as_step(&job), "strict", 1);
}

#[test]
fn sbatch_option_reaches_the_steps() {
    let m = machine(ND_H100_V5);
    let Some(cluster) = start("sbatch_option", &m, ClusterBuilder::new()) else {
        return;
    };
    let mut alloc = vec!["--gpu-affinity=prefer".to_owned()];
    alloc.extend(cluster.whole_node_allocation());
    let alloc: Vec<&str> = alloc.iter().map(String::as_str).collect();
    let job = cluster
        .sbatch(&batch_script(&cluster), &alloc, &ClientOptions::default())
        .expect("run batch job");
    assert!(job.completed(), "{job}");
    check_step(&m, &as_step(&job), "prefer", 1);
}
