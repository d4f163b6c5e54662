//! Hostile input on the root side, in a real slurmstepd: user text cannot forge a line
//! of slurmd's log, and the per-step directories slurmstepd writes as root do not
//! outlive their steps, not even a slurmstepd killed with SIGKILL.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{ND_H100_V5, machine, start};
use gpu_affinity_tests::{ClientOptions, Cluster, ClusterBuilder};
use nix::sys::signal::Signal;

const FORGED: &str = "error: FORGED LINE";

/// On a node without gres, Slurm passes a user's own SLURM_STEP_GPUS through to the
/// step. A newline in it must not start a line of its own in slurmd's log, whichever
/// mode (strict refuses the task, prefer warns) reports it.
#[test]
fn a_forged_newline_in_slurm_step_gpus_stays_inside_its_log_line() {
    // The node's topology has GPUs; Slurm's configuration has no gres at all.
    let Some(cluster) = ClusterBuilder::new()
        .machine(machine(ND_H100_V5))
        .without_gres()
        .with_plugin()
        .start_or_skip("forged_log_line")
        .unwrap_or_else(|e| panic!("cannot start the cluster: {e}"))
    else {
        return;
    };
    let value = format!("0,1\n{FORGED}");
    for mode in ["strict", "prefer"] {
        let before = cluster.log("slurmd.log").len();
        let opts = ClientOptions::bounded(30).env("SLURM_STEP_GPUS", &value);
        let out = cluster
            .srun_with(&["-n1", &format!("--gpu-affinity={mode}"), "true"], &opts)
            .expect("run srun");
        assert!(!out.timed_out(), "{mode}: {out}");
        let log = cluster.log("slurmd.log");
        let new = log.get(before..).unwrap_or_default();
        // The plugin did report the value (else this test would prove nothing).
        assert!(
            new.lines().any(|l| l.contains("SLURM_STEP_GPUS")),
            "{mode}: the plugin logged nothing about SLURM_STEP_GPUS: {out}{}",
            cluster.log_tails()
        );
        for line in new.lines() {
            assert!(
                !line.trim_start().starts_with(FORGED),
                "{mode}: a forged line in slurmd.log: {line:?}\n{new}"
            );
            if let Some(at) = line.find(FORGED) {
                assert!(
                    line[..at].ends_with("\\n"),
                    "{mode}: the newline before the forged text is not escaped: {line:?}"
                );
            }
        }
        // srun's stderr (the user's own terminal) gets the same one line.
        assert!(
            !out.stderr
                .lines()
                .any(|l| l.contains(FORGED) && !l.contains("\\n")),
            "{mode}: {out}"
        );
    }
}

/// The step directories under `run_dir` (`job*`; the node's copies beside them are
/// not steps'); `None` while run_dir does not exist.
fn step_dirs(run_dir: &Path) -> Option<Vec<PathBuf>> {
    let entries = std::fs::read_dir(run_dir).ok()?;
    Some(
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("job"))
            .map(|e| e.path())
            .collect(),
    )
}

/// Wait (bounded) until `cond` holds for run_dir's entries; the entries at the end.
fn wait_for_dirs(
    run_dir: &Path,
    limit: Duration,
    cond: impl Fn(&[PathBuf]) -> bool,
) -> Vec<PathBuf> {
    let deadline = Instant::now() + limit;
    loop {
        let dirs = step_dirs(run_dir).unwrap_or_default();
        if cond(&dirs) || Instant::now() >= deadline {
            return dirs;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One whole-node strict step that needs a generated NCCL topology (Azure ND H100 v5):
/// its task finds NCCL_TOPO_FILE under `run_dir`, written and readable.
fn step_with_topology(cluster: &Cluster, run_dir: &Path) {
    let mut args = vec!["--gpu-affinity=strict".to_owned()];
    args.extend(cluster.whole_node(1));
    args.extend(
        [
            "sh",
            "-c",
            r#"test -r "$NCCL_TOPO_FILE" && echo "$NCCL_TOPO_FILE""#,
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cluster
        .srun_with(&args, &ClientOptions::bounded(60))
        .expect("run srun");
    assert!(out.success(), "{out}");
    let file = out.stdout.trim();
    assert!(
        Path::new(file).starts_with(run_dir),
        "NCCL_TOPO_FILE={file:?} is not under {}: {out}",
        run_dir.display()
    );
}

/// [`step_with_topology`], then no step directory is left (its exit hook may still be
/// running when srun returns, so within a bound); the node's copy stays, root's alone.
fn step_leaves_run_dir_empty(cluster: &Cluster, run_dir: &Path, what: &str) {
    step_with_topology(cluster, run_dir);
    let left = wait_for_dirs(run_dir, Duration::from_secs(10), <[PathBuf]>::is_empty);
    assert!(
        left.is_empty(),
        "left after {what}: {left:?}{}",
        cluster.log_tails()
    );
    // The node's copy (spank-plugin's node_view.rs) stays, root's alone.
    let copy = "node.json";
    let meta = std::fs::symlink_metadata(run_dir.join(copy))
        .unwrap_or_else(|e| panic!("{copy} after {what}: {e}{}", cluster.log_tails()));
    assert!(meta.is_file(), "{copy}: {meta:?}");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{copy}");
}

fn signal(pid: u32, signal: Signal) {
    let raw = i32::try_from(pid).expect("a pid fits i32");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), signal)
        .unwrap_or_else(|e| panic!("kill -{signal} {pid}: {e}"));
}

#[test]
fn run_dir_is_empty_after_a_step_and_after_a_killed_slurmstepd_once_the_next_step_ran() {
    let Some(mut cluster) = start(
        "run_dir_cleanup",
        &machine(ND_H100_V5),
        ClusterBuilder::new(),
    ) else {
        return;
    };
    let run_dir = cluster.dir().join("gpu-affinity-run");
    let shown = run_dir.display().to_string();
    cluster
        .write_plugstack_with(&[("run_dir", &shown)])
        .expect("plugstack");

    // A step that ends normally: its exit hook removes its directory.
    step_leaves_run_dir_empty(&cluster, &run_dir, "a step");

    // A step whose slurmstepd is killed with SIGKILL: no exit hook runs.
    let opts = ClientOptions::bounded(60);
    let mut killed = cluster
        .command(
            &[
                "srun",
                "-n1",
                "--gres=gpu:1",
                "--gpu-affinity=strict",
                "sleep",
                "300",
            ],
            &opts,
        )
        .expect("srun command")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start srun");
    let dirs = wait_for_dirs(&run_dir, Duration::from_secs(30), |d| d.len() == 1);
    let [stale] = dirs.as_slice() else {
        let _ = killed.kill();
        panic!(
            "no step directory for the sleeping step: {dirs:?}{}",
            cluster.log_tails()
        );
    };
    let pid: u32 = stale
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.rsplit('.').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no slurmstepd pid in {}", stale.display()));
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_eq!(
        comm.trim(),
        "slurmstepd",
        "pid {pid} from {}",
        stale.display()
    );
    signal(pid, Signal::SIGKILL);
    // srun would wait for the dead step until its `timeout`: stop it (`timeout`
    // passes SIGTERM on to srun, which cancels the job).
    signal(killed.id(), Signal::SIGTERM);
    killed.wait().expect("srun ends");
    assert!(
        stale.is_dir(),
        "the killed slurmstepd left {}",
        stale.display()
    );

    // The next step sweeps it and removes its own.
    cluster
        .wait_idle(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("after the killed step: {e}"));
    step_leaves_run_dir_empty(&cluster, &run_dir, "the next step");
}
