//! The panic guard in a real slurmstepd: a plugin built with the `panic-test` feature
//! panics inside the hook plugstack `test_panic=HOOK` names. The step must end (no hang,
//! no core dump), slurmd and slurmctld must survive, and the next normal step must run
//! and be bound.

mod common;

use common::{ND_H100_V5, check_step, machine, probe_whole_node, start};
use gpu_affinity_tests::{ClientOptions, ClusterBuilder, Variant};
use std::time::Duration;

/// Remote hooks the plugin's `panic-test` build can panic in.
const HOOKS: &[&str] = &["init", "init_post_opt", "user_init", "task_init", "exit"];

#[test]
fn a_panic_in_any_hook_fails_cleanly_and_the_next_step_runs() {
    let m = machine(ND_H100_V5);
    let builder = ClusterBuilder::new().plugin_variant(Variant::PanicTest);
    let Some(mut cluster) = start("panic_guard", &m, builder) else {
        return;
    };
    let opts = ClientOptions::bounded(30);
    for hook in HOOKS {
        cluster
            .write_plugstack_with(&[("test_panic", hook)])
            .expect("plugstack");
        let out = probe_whole_node(&cluster, Some("strict"), 8, &opts);
        assert!(!out.timed_out(), "panic in {hook}: srun hung: {out}");
        assert_ne!(
            out.code(),
            Some(134),
            "panic in {hook} aborted a process: {out}"
        );
        if *hook == "task_init" {
            assert!(
                !out.success(),
                "a panic in task_init must fail the task: {out}"
            );
        }
        assert!(
            cluster.daemons_alive(),
            "panic in {hook} took a daemon down{}",
            cluster.log_tails()
        );
        cluster
            .wait_idle(Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("after a panic in {hook}: {e}"));

        cluster.write_plugstack_with(&[]).expect("plugstack");
        let out = probe_whole_node(&cluster, Some("strict"), 8, &opts);
        check_step(&m, &out, "strict", 1);
    }
    let cores: Vec<_> = std::fs::read_dir(cluster.dir().join("work"))
        .expect("work dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("core"))
        .collect();
    assert!(cores.is_empty(), "core files left: {cores:?}");
}
