//! The placement backstop: a multi-node GPU step across placement units of the
//! cluster's topology (next to slurmd's slurm.conf, or plugstack `topology=`), and
//! its submit side in srun (local_user_init).

use std::path::{Path, PathBuf};

use super::*;

const BLOCKS: &str = "BlockName=b1 Nodes=h[1-2]\nBlockName=b2 Nodes=h[3-4]\n";
const REFUSAL: &str = "gpu-affinity: step spans 2 placement blocks: b1=[h[1-2]] b2=[h[3-4]]; strict placement needs one block (try --switches=1 or --segment)";

/// The fake's slurmd SLURM_CONF is /etc/slurm/slurm.conf: its topology files sit there.
fn os_with(files: &[(&str, &str)]) -> FakeOs {
    let mut os = FakeOs::new(Ok(machine()), "0-1", &[0, 1]);
    for (path, text) in files {
        os.topology_files
            .insert(PathBuf::from(path), (*text).to_string());
    }
    os
}

/// The refusal line of a step made Misplaced.
fn misplaced(plugin: &Plugin) -> String {
    match plugin.step() {
        Some(StepOutcome::Misplaced(line)) => line.clone(),
        other => panic!("not misplaced: {other:?}"),
    }
}

fn step_host(nodes: &str, node_id: u32) -> FakeHost {
    let mut host = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("SLURM_STEP_NODELIST", nodes)]);
    host.node_id = node_id;
    host
}

#[test]
fn strict_refuses_a_step_across_blocks_before_any_task_runs() {
    let plugin = remote_plugin(&["default=strict"]);
    let host = step_host("h[1-4]", 0);
    let os = os_with(&[("/etc/slurm/topology.conf", BLOCKS)]);
    prepare_step(&plugin, &host, &os);
    let line = misplaced(&plugin);
    assert_eq!(line, REFUSAL);
    let t = host.task(0, 0);
    let err = dispatch(&plugin, Hook::TaskInit, &t, &os, &[]).expect_err("refused");
    assert_eq!(err.0, REFUSAL);
    // Nothing of the plan reached the task.
    assert_eq!(t.var("GPU_AFFINITY_MODE"), None);
}

#[test]
fn strict_runs_a_step_inside_one_block_and_a_one_node_step() {
    let os = os_with(&[("/etc/slurm/topology.conf", BLOCKS)]);
    for nodes in ["h[3-4]", "h2"] {
        let plugin = remote_plugin(&["default=strict"]);
        let host = step_host(nodes, 0);
        prepare_step(&plugin, &host, &os);
        assert!(
            matches!(plugin.step(), Some(StepOutcome::Planned(_))),
            "{nodes}: {:?}",
            plugin.step()
        );
    }
}

#[test]
fn prefer_warns_once_from_the_first_node_and_runs() {
    let os = os_with(&[("/etc/slurm/topology.conf", BLOCKS)]);
    let plugin = remote_plugin(&["default=prefer"]);
    let host = step_host("h[1-4]", 0);
    prepare_step(&plugin, &host, &os);
    assert!(matches!(plugin.step(), Some(StepOutcome::Planned(_))));
    for local in 0..2 {
        dispatch(&plugin, Hook::TaskInit, &host.task(local, local), &os, &[]).expect("runs");
    }
    let warned: Vec<String> = os
        .stderr
        .borrow()
        .iter()
        .filter(|l| l.contains("step spans 2 placement blocks"))
        .cloned()
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with("gpu-affinity: warning: step spans"),
        "{warned:?}"
    );

    // Another node of the same step runs without repeating it.
    let os = os_with(&[("/etc/slurm/topology.conf", BLOCKS)]);
    let plugin = remote_plugin(&["default=prefer"]);
    let host = step_host("h[1-4]", 2);
    prepare_step(&plugin, &host, &os);
    dispatch(&plugin, Hook::TaskInit, &host.task(0, 4), &os, &[]).expect("runs");
    assert!(
        !os.stderr.borrow().iter().any(|l| l.contains("placement")),
        "{:?}",
        os.stderr.borrow()
    );
}

#[test]
fn yaml_wins_over_conf_and_unknown_nodes_are_named() {
    let yaml = "- topology: blk\n  cluster_default: true\n  block:\n    blocks:\n      - block: y1\n        nodes: h[1-4]\n";
    let os = os_with(&[
        ("/etc/slurm/topology.yaml", yaml),
        ("/etc/slurm/topology.conf", BLOCKS),
    ]);
    let plugin = remote_plugin(&["default=strict"]);
    prepare_step(&plugin, &step_host("h[1-4]", 0), &os);
    assert!(matches!(plugin.step(), Some(StepOutcome::Planned(_))));

    let plugin = remote_plugin(&["default=strict"]);
    prepare_step(&plugin, &step_host("h1,zz9", 0), &os);
    let line = misplaced(&plugin);
    assert!(line.contains("step nodes zz9 are not in"), "{line}");
}

#[test]
fn the_plugstack_topology_key_names_the_file_and_a_missing_one_is_an_error() {
    let os = os_with(&[(
        "/srv/topo/tree.conf",
        "SwitchName=s1 Nodes=h[1-2]\nSwitchName=s2 Nodes=h[3-4]\n",
    )]);
    let plugin = remote_plugin(&["default=strict", "topology=/srv/topo/tree.conf"]);
    prepare_step(&plugin, &step_host("h[2-3]", 0), &os);
    let line = misplaced(&plugin);
    assert!(
        line.contains("step spans 2 leaf switches: s1=[h2] s2=[h3]"),
        "{line}"
    );

    let plugin = remote_plugin(&["default=strict", "topology=/srv/none.conf"]);
    prepare_step(&plugin, &step_host("h[1-2]", 0), &os);
    let line = misplaced(&plugin);
    assert!(
        line.contains("/srv/none.conf (named by topology) does not exist"),
        "{line}"
    );
}

#[test]
fn no_topology_file_or_no_gpus_leaves_the_step_as_it_was() {
    let os = os_with(&[]);
    let plugin = remote_plugin(&["default=strict"]);
    prepare_step(&plugin, &step_host("h[1-4]", 0), &os);
    assert!(matches!(plugin.step(), Some(StepOutcome::Planned(_))));

    // A CPU step is left alone in every mode, its placement included.
    let os = os_with(&[("/etc/slurm/topology.conf", BLOCKS)]);
    let plugin = remote_plugin(&["default=strict"]);
    let host = gpu_host(&[("SLURM_STEP_NODELIST", "h[1-4]")]);
    prepare_step(&plugin, &host, &os);
    assert!(matches!(plugin.step(), Some(StepOutcome::LeftAlone(_))));
}

#[test]
fn an_unplannable_prefer_step_carries_both_warnings_on_one_line() {
    let mut os = os_with(&[("/etc/slurm/topology.conf", BLOCKS)]);
    os.machine = Err("no sysfs here".into());
    let plugin = remote_plugin(&["default=prefer"]);
    prepare_step(&plugin, &step_host("h[1-4]", 0), &os);
    let Some(StepOutcome::Unplanned { warning }) = plugin.step() else {
        panic!("{:?}", plugin.step());
    };
    assert!(!warning.contains('\n'), "{warning}");
    assert!(warning.contains("topology is unknown"), "{warning}");
    assert!(
        warning.contains("(and: step spans 2 placement blocks"),
        "{warning}"
    );
}

#[test]
fn the_step_partition_picks_its_topology_from_slurm_conf() {
    // Two topologies: one block of all four nodes (the cluster default) and two blocks.
    let yaml = "- topology: one\n  cluster_default: true\n  block:\n    blocks:\n      - block: all\n        nodes: h[1-4]\n\
                - topology: two\n  block:\n    blocks:\n      - block: b1\n        nodes: h[1-2]\n      - block: b2\n        nodes: h[3-4]\n";
    let mut os = os_with(&[("/etc/slurm/topology.yaml", yaml)]);
    os.slurm_conf = Some(
        "PartitionName=wide Nodes=h[1-4] Default=YES\nPartitionName=split Nodes=h[1-4] Topology=two\n"
            .into(),
    );
    let run = |partition: Option<&str>| {
        let plugin = remote_plugin(&["default=strict"]);
        let mut env = vec![
            ("SLURM_STEP_GPUS", "2,3"),
            ("SLURM_STEP_NODELIST", "h[1-4]"),
        ];
        if let Some(p) = partition {
            env.push(("SLURM_JOB_PARTITION", p));
        }
        prepare_step(&plugin, &gpu_host(&env), &os);
        plugin.step().cloned()
    };
    match run(Some("split")) {
        Some(StepOutcome::Misplaced(line)) => assert_eq!(line, REFUSAL),
        other => panic!("split: {other:?}"),
    }
    // A partition naming none, an unknown one, or no partition: the cluster default.
    for p in [Some("wide"), Some("nope"), None] {
        assert!(
            matches!(run(p), Some(StepOutcome::Planned(_))),
            "{p:?}: {:?}",
            run(p)
        );
    }
}

/// srun's plugin after init (local context).
fn srun_plugin(args: &[&str]) -> Plugin {
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Local);
    let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    crate::init::init_with_config(&plugin, &host, &argv, Path::new("/nonexistent.toml"), uid())
        .expect("init");
    plugin
}

/// srun once its allocation is known: S_JOB_NNODES and its own environment, as
/// measured (own allocation: SLURM_NODELIST only).
fn srun_host(nodes: u32, env: &[(&str, &str)]) -> FakeHost {
    let mut host = FakeHost::new(Context::Local);
    host.nodes = nodes;
    for (k, v) in env {
        host.process_env.insert(k.to_string(), v.to_string());
    }
    host
}

fn srun_os(args: &str) -> FakeOs {
    let mut os = os_with(&[("/etc/slurm/topology.conf", BLOCKS)]);
    os.args = args.split_whitespace().map(str::to_string).collect();
    os
}

#[test]
fn srun_refuses_a_strict_gpu_step_across_blocks_before_launch() {
    let gpus = srun_os("srun -N4 --gres=gpu:1 true");
    let host = srun_host(4, &[("SLURM_NODELIST", "h[1-4]")]);
    let plugin = srun_plugin(&["default=strict"]);
    let err = dispatch(&plugin, Hook::LocalUserInit, &host, &gpus, &[]).expect_err("refused");
    assert_eq!(err.0, REFUSAL);
    // prefer: srun stays quiet (the nodes warn once) and the step goes ahead.
    let plugin = srun_plugin(&["default=prefer"]);
    dispatch(&plugin, Hook::LocalUserInit, &host, &gpus, &[]).expect("prefer runs");
    let plugin = srun_plugin(&["default=off"]);
    dispatch(&plugin, Hook::LocalUserInit, &host, &gpus, &[]).expect("off");

    let plugin = srun_plugin(&["default=strict"]);
    // No GPU request srun can see: left to the nodes, which leave CPU steps alone.
    let cpu = srun_os("srun -N4 true");
    dispatch(&plugin, Hook::LocalUserInit, &host, &cpu, &[]).expect("cpu step");
    // ... unless srun's input variables carry one.
    let env_gpus = srun_host(
        4,
        &[("SLURM_NODELIST", "h[1-4]"), ("SLURM_GPUS_PER_NODE", "1")],
    );
    assert!(dispatch(&plugin, Hook::LocalUserInit, &env_gpus, &cpu, &[]).is_err());
    // Inside a larger allocation the env lists the job's nodes, not the step's two.
    let in_alloc = srun_host(2, &[("SLURM_JOB_NODELIST", "h[1-4]")]);
    dispatch(&plugin, Hook::LocalUserInit, &in_alloc, &gpus, &[]).expect("nodes decide");
    // One block: runs.
    let inside = srun_host(2, &[("SLURM_NODELIST", "h[3-4]")]);
    dispatch(&plugin, Hook::LocalUserInit, &inside, &gpus, &[]).expect("one block");
    // Other contexts never run it.
    let remote = remote_plugin(&["default=strict"]);
    let mut remote_host = srun_host(4, &[("SLURM_NODELIST", "h[1-4]")]);
    remote_host.context = Context::Remote;
    dispatch(&remote, Hook::LocalUserInit, &remote_host, &gpus, &[]).expect("remote");
}

/// Two leaf switches under one level-1 switch, and a third leaf under another.
const TWO_LEVELS: &str = "SwitchName=l1 Nodes=h[1-2]\nSwitchName=l2 Nodes=h[3-4]\nSwitchName=l3 Nodes=h[5-6]\nSwitchName=s1 Switches=l[1-2]\nSwitchName=s2 Switches=l3\nSwitchName=top Switches=s[1-2]\n";

#[test]
fn switch_level_one_lets_a_step_span_the_leaves_of_one_level_one_switch() {
    let os = os_with(&[("/etc/slurm/topology.conf", TWO_LEVELS)]);
    // Level 0 (the default): one leaf switch.
    let plugin = remote_plugin(&["default=strict"]);
    prepare_step(&plugin, &step_host("h[2-3]", 0), &os);
    assert_eq!(
        misplaced(&plugin),
        "gpu-affinity: step spans 2 leaf switches: l1=[h2] l2=[h3]; strict placement needs one leaf switch (try --switches=1)"
    );
    // Level 1: l1 and l2 are both under s1.
    let plugin = remote_plugin(&["default=strict", "switch_level=1"]);
    prepare_step(&plugin, &step_host("h[1-4]", 0), &os);
    assert!(
        matches!(plugin.step(), Some(StepOutcome::Planned(_))),
        "{:?}",
        plugin.step()
    );
    // ... but not across s1 and s2.
    let plugin = remote_plugin(&["default=strict", "switch_level=1"]);
    prepare_step(&plugin, &step_host("h[4-5]", 0), &os);
    let line = misplaced(&plugin);
    assert!(
        line.starts_with("gpu-affinity: step spans 2 level-1 switches: s1=[h4] s2=[h5]"),
        "{line}"
    );

    // srun decides the same way with the same setting.
    let mut srun = srun_os("srun -N4 --gres=gpu:1 true");
    srun.topology_files
        .insert("/etc/slurm/topology.conf".into(), TWO_LEVELS.to_string());
    let host = srun_host(4, &[("SLURM_NODELIST", "h[1-4]")]);
    let plugin = srun_plugin(&["default=strict"]);
    let err = dispatch(&plugin, Hook::LocalUserInit, &host, &srun, &[]).expect_err("level 0");
    assert!(err.0.contains("step spans 2 leaf switches"), "{}", err.0);
    let plugin = srun_plugin(&["default=strict", "switch_level=1"]);
    dispatch(&plugin, Hook::LocalUserInit, &host, &srun, &[]).expect("level 1");

    // A bad level is refused naming the key, as in the config file.
    let e = crate::settings::parse_args(&["switch_level=leaf"]).expect_err("bad level");
    assert!(
        e.contains("switch_level = 'leaf' is invalid: expected a switch level"),
        "{e}"
    );
}

#[test]
fn srun_leaves_a_topology_it_cannot_read_to_the_nodes_which_refuse() {
    // A topology srun (as the user) cannot read or trust: the step goes ahead from srun,
    // and the node backstop, which reads it as root, decides (here: it cannot either).
    let bad = "SwitchName=s1 Nodes=h[1-2] Switches=s2\n";
    let mut os = srun_os("srun -N4 --gres=gpu:1 true");
    os.topology_files
        .insert("/etc/slurm/topology.conf".into(), bad.to_string());
    let host = srun_host(4, &[("SLURM_NODELIST", "h[1-4]")]);
    let plugin = srun_plugin(&["default=strict"]);
    dispatch(&plugin, Hook::LocalUserInit, &host, &os, &[]).expect("srun lets it go");
    let plugin = remote_plugin(&["default=strict"]);
    prepare_step(&plugin, &step_host("h[1-4]", 0), &os);
    let line = misplaced(&plugin);
    assert!(
        line.starts_with("gpu-affinity: cannot check the step's placement: "),
        "{line}"
    );
}

#[test]
fn srun_checks_several_topologies_only_by_a_partition_it_knows() {
    // The cluster default has two blocks (would refuse); partition `one` is one block.
    let yaml = "- topology: two\n  cluster_default: true\n  block:\n    blocks:\n      - block: b1\n        nodes: h[1-2]\n      - block: b2\n        nodes: h[3-4]\n\
                - topology: one\n  block:\n    blocks:\n      - block: all\n        nodes: h[1-4]\n";
    let os_for = |args: &str| {
        let mut os = os_with(&[("/etc/slurm/topology.yaml", yaml)]);
        os.args = args.split_whitespace().map(str::to_string).collect();
        os.slurm_conf = Some(
            "PartitionName=wide Nodes=h[1-4] Default=YES\nPartitionName=one Nodes=h[1-4] Topology=one\n"
                .into(),
        );
        os
    };
    let plugin = srun_plugin(&["default=strict"]);
    let own = [("SLURM_NODELIST", "h[1-4]")];
    // No partition srun can tell (slurmctld picks the default): the nodes decide.
    let os = os_for("srun -N4 --gres=gpu:1 true");
    dispatch(&plugin, Hook::LocalUserInit, &srun_host(4, &own), &os, &[]).expect("nodes decide");
    // srun's own -p, or its input variable: checked by that partition's topology.
    let os = os_for("srun -N4 -p wide --gres=gpu:1 true");
    let err = dispatch(&plugin, Hook::LocalUserInit, &srun_host(4, &own), &os, &[])
        .expect_err("wide refuses");
    assert_eq!(err.0, REFUSAL);
    let os = os_for("srun -N4 -l -p one --gres=gpu:1 true");
    dispatch(&plugin, Hook::LocalUserInit, &srun_host(4, &own), &os, &[]).expect("one block");
    let os = os_for("srun -N4 --gres=gpu:1 true");
    let env = srun_host(
        4,
        &[("SLURM_NODELIST", "h[1-4]"), ("SLURM_PARTITION", "wide")],
    );
    assert!(dispatch(&plugin, Hook::LocalUserInit, &env, &os, &[]).is_err());
}
