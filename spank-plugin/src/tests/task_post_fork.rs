//! task_post_fork and exit: the step directory and its generated topology file.

use super::*;

#[test]
fn a_step_directory_whose_file_cannot_be_written_is_still_removed_at_exit() {
    use std::os::unix::fs::PermissionsExt;
    let node = NodeStep::new(AZURE, "prefer", &[], &[]);
    let topology = node.planned().fabric.topology.clone().expect("generated");
    // A stale step directory of ours with something planted where the file goes: the
    // directory is accepted, the write refused.
    let run_dir = topology.dir.parent().expect("run_dir");
    std::fs::create_dir(run_dir).expect("mkdir run_dir");
    std::fs::create_dir(&topology.dir).expect("mkdir step dir");
    for d in [run_dir, topology.dir.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let target = node.run.path().join("target");
    std::os::unix::fs::symlink(&target, &topology.file).expect("symlink");
    logger::take();
    node.post_fork();
    assert!(
        logger::take()
            .iter()
            .any(|(_, t)| t.contains("cannot write the NCCL topology file")),
    );
    assert!(topology.dir.is_dir());
    dispatch(&node.plugin, Hook::Exit, &node.host, &node.os, &[]).expect("exit");
    assert!(!topology.dir.exists(), "exit removes the step directory");
    assert!(run_dir.is_dir() && !target.exists());
}

#[test]
fn an_unwritable_topology_file_refuses_strict_and_is_left_unset_under_prefer() {
    for choice in ["strict", "prefer"] {
        let node = NodeStep::new(AZURE, choice, &[], &[]);
        // Someone else's run_dir: slurmstepd must not write through it.
        let run_dir = node.run.path().join("gpu-affinity");
        let elsewhere = node.run.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("mkdir");
        std::os::unix::fs::symlink(&elsewhere, &run_dir).expect("symlink");
        logger::take();
        node.post_fork();
        let logs = logger::take();
        assert!(
            logs.iter().any(|(l, t)| *l == SlurmLevel::Error
                && t.contains("cannot write the NCCL topology file")),
            "{logs:?}"
        );
        assert_eq!(std::fs::read_dir(&elsewhere).expect("dir").count(), 0);
        match choice {
            "strict" => {
                let err = node.refused(1);
                assert!(err.0.contains("was not written"), "{err}");
            }
            _ => {
                let t = node.task(0).expect("prefer runs");
                assert_eq!(t.var("NCCL_TOPO_FILE"), None);
                assert!(t.var("NCCL_IB_HCA").is_some());
                assert!(
                    node.os
                        .stderr
                        .borrow()
                        .iter()
                        .any(|l| l.contains("NCCL_TOPO_FILE left unset"))
                );
            }
        }
        dispatch(&node.plugin, Hook::Exit, &node.host, &node.os, &[]).expect("exit");
        assert!(run_dir.is_symlink(), "exit removes only what it wrote");
    }
}
