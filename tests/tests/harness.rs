//! The harness itself on a plain cluster (no plugin): daemons come up, steps run, GPUs
//! are handed out from the fake device nodes, everything stops by PID.

use gpu_affinity_tests::{ClientOptions, ClusterBuilder};

#[test]
fn plain_cluster_runs_steps_with_fake_gpus_and_stops_cleanly() {
    let Some(mut cluster) = ClusterBuilder::new()
        .start_or_skip("plain_cluster_runs_steps_with_fake_gpus_and_stops_cleanly")
        .expect("start cluster")
    else {
        return;
    };
    let out = cluster
        .probe(&["-n2", "--gres=gpu:2"], &ClientOptions::default())
        .expect("run srun")
        .ok()
        .expect("srun succeeds");
    let tasks = out.tasks().expect("parse probe");
    assert_eq!(tasks.len(), 2, "{out}");
    for t in tasks.values() {
        assert_eq!(t.env("CUDA_VISIBLE_DEVICES"), Some("0,1"), "{out}");
        assert!(t.gpu_affinity_env().is_empty(), "no plugin loaded: {out}");
        assert_eq!(t.user, "root");
    }
    // The daemons are the series asked for (GPU_AFFINITY_SLURM_SERIES), not the host's.
    let (major, minor, _) = cluster.slurm_version();
    assert_eq!(format!("{major}.{minor:02}"), cluster.series());
    if let Ok(wanted) = std::env::var(gpu_affinity_tests::series::SERIES_ENV)
        && !wanted.is_empty()
    {
        assert_eq!(cluster.series(), wanted);
    }
    let pids: Vec<u32> = cluster.daemon_pids().iter().map(|(_, p)| *p).collect();
    assert_eq!(pids.len(), 3);
    assert!(cluster.daemons_alive());
    drop(cluster);
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "daemon {pid} still runs after the cluster was dropped"
        );
    }
}
