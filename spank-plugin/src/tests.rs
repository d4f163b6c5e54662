//! Hook-level tests: every SPANK context driven through the fake host and kernel.

use std::path::Path;

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::{Gpu, Machine, Nic, NicKind, NumaNode, PciDevice, PciLink, RdmaPort};
use gpu_affinity::pci::PciAddr;
use gpu_affinity::solver::{Mode, NicRef, Plan, RankPlan, Violation, ViolationKind};
use gpu_affinity::sources::sysfs::Detail;

use crate::apply::{Task, apply_rank};
use crate::dispatch::{Hook, dispatch};
use crate::fabric_env::StepFabric;
use crate::fake::{FakeHost, FakeOs};
use crate::host::{Context, MemPolicy};
use crate::logger::{self, SlurmLevel};
use crate::mode::{Choice, Resolved};
use crate::node::Prepared;
use crate::options;
use crate::state::{OptionValue, Plugin};
use crate::step::{self, StepOutcome, StepPlan};

fn pci(text: &str) -> PciAddr {
    text.parse().expect("PCI address")
}

fn cpus(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

fn device(addr: &str, parent: Option<&str>, class: u32, numa: u32) -> PciDevice {
    PciDevice {
        addr: pci(addr),
        parent: parent.map(pci),
        root: None,
        vendor: 0x10de,
        device: 0x2330,
        class,
        numa_node: Some(numa),
        link: PciLink::default(),
    }
}

/// A two-socket node in the shape of an Azure ND H100 v5 half (two GPUs per NUMA node,
/// one InfiniBand HCA per GPU), with each NUMA node folded onto one CPU like the
/// harness's fixtures.
fn machine() -> Machine {
    let gpus = [
        "0001:00:00.0",
        "0002:00:00.0",
        "0003:00:00.0",
        "0008:00:00.0",
    ];
    let hcas = [
        "0101:00:00.0",
        "0102:00:00.0",
        "0103:00:00.0",
        "0104:00:00.0",
    ];
    let mut m = Machine {
        numa_nodes: vec![
            NumaNode {
                id: 0,
                cpus: cpus("0"),
            },
            NumaNode {
                id: 1,
                cpus: cpus("1"),
            },
        ],
        ..Machine::default()
    };
    for (i, (g, h)) in gpus.iter().zip(hcas).enumerate() {
        let numa = (i / 2) as u32;
        m.pci.push(device(g, None, 0x030200, numa));
        m.pci.push(device(h, None, 0x020700, numa));
        m.gpus.push(Gpu {
            pci: pci(g),
            minor: Some(i as u32),
            model: None,
        });
        m.nics.push(Nic {
            pci: pci(h),
            kind: NicKind::Infiniband,
            rdma: Some(format!("mlx5_{i}")),
            netdev: Some(format!("ib{i}")),
            ports: vec![RdmaPort {
                number: 1,
                ..RdmaPort::default()
            }],
        });
    }
    m
}

fn rank(r: u32, gpu: &str, nic: Option<(&str, &str)>, cpu: &str, mems: &[u32]) -> RankPlan {
    RankPlan {
        rank: r,
        gpus: vec![pci(gpu)],
        nics: nic
            .map(|(a, n)| NicRef {
                pci: pci(a),
                name: Some(n.to_string()),
            })
            .into_iter()
            .collect(),
        cpus: cpus(cpu),
        mems: mems.to_vec(),
        reasons: Vec::new(),
    }
}

/// Two ranks of a two-GPU step on GPUs 2 and 3 (NUMA node 1).
fn step_plan(choice: Choice, live: bool, cuda: [&str; 2]) -> StepPlan {
    let mode = choice.solver_mode().expect("not off");
    StepPlan {
        resolved: Resolved {
            choice,
            verbose: false,
            raised_from: None,
        },
        plan: Plan {
            mode,
            ranks: vec![
                rank(
                    0,
                    "0003:00:00.0",
                    Some(("0103:00:00.0", "mlx5_2")),
                    "1",
                    &[1],
                ),
                rank(
                    1,
                    "0008:00:00.0",
                    Some(("0104:00:00.0", "mlx5_3")),
                    "1",
                    &[1],
                ),
            ],
            violations: Vec::new(),
            warnings: Vec::new(),
            fabric_nics: Vec::new(),
        },
        slurm_ids: vec![2, 3],
        local_ids: false,
        cuda_ids: vec![
            (pci("0003:00:00.0"), cuda[0].into()),
            (pci("0008:00:00.0"), cuda[1].into()),
        ],
        live,
        job_id: 42,
        step_id: 0,
        uid: Some(1000),
        fabric: StepFabric::default(),
    }
}

fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// slurmstepd's plugin after init with these plugstack arguments. Unless named, the
/// admin profiles come from a directory that does not exist, so the host's own
/// /etc/gpu-affinity cannot leak into a test; root-side files must be this user's.
fn remote_plugin(args: &[&str]) -> Plugin {
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Remote);
    let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    if !args.iter().any(|a| a.starts_with("profiles_dir=")) {
        argv.push("profiles_dir=/nonexistent/gpu-affinity/profiles.d".into());
    }
    crate::init::init_with_config(&plugin, &host, &argv, Path::new("/nonexistent.toml"), uid())
        .expect("init");
    plugin
}

fn no_os() -> FakeOs {
    FakeOs::new(Err("no topology in this test".into()), "0-1", &[0])
}

// ---- init and option registration -------------------------------------------------

#[test]
fn init_registers_the_option_where_users_can_give_it() {
    for (context, registers) in [
        (Context::Local, true),
        (Context::Remote, true),
        (Context::Allocator, true),
        (Context::Slurmd, false),
        (Context::JobScript, false),
    ] {
        let plugin = Plugin::new();
        let host = FakeHost::new(context);
        dispatch(&plugin, Hook::Init, &host, &no_os(), &[]).expect("init");
        let names: Vec<&str> = host.registered.borrow().iter().map(|o| o.name).collect();
        assert_eq!(
            names == ["gpu-affinity"],
            registers,
            "{context:?}: {names:?}"
        );
    }
}

#[test]
fn init_fails_on_an_unknown_plugstack_key_naming_it() {
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Remote);
    let err = dispatch(
        &plugin,
        Hook::Init,
        &host,
        &no_os(),
        &["sysfs=/x".to_string()],
    )
    .expect_err("unknown key");
    assert!(
        err.0.contains("unknown plugstack.conf key 'sysfs'"),
        "{err}"
    );
    assert!(host.registered.borrow().is_empty());
}

/// A config plugstack.conf names is the admin's: missing is a load error in every
/// context that reads it (srun and sbatch included), never a silent fallback to defaults
/// that would drop its `enforce`. Only the implicit default path may be absent, and only
/// when nothing at all is there.
#[test]
fn a_named_config_that_is_missing_fails_init_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("absent.toml");
    let argv = vec![
        format!("config={}", missing.display()),
        "enforce=strict".to_string(),
    ];
    for context in [Context::Local, Context::Allocator, Context::Remote] {
        let plugin = Plugin::new();
        let host = FakeHost::new(context);
        let err = crate::init::init_with_config(&plugin, &host, &argv, &missing, uid())
            .expect_err("named and missing");
        assert!(
            err.0.starts_with("gpu-affinity: config ")
                && err.0.contains(&missing.display().to_string()),
            "{context:?}: {err}"
        );
    }
    // The implicit default: absent means defaults; a dangling symlink there is an error.
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Remote);
    crate::init::init_with_config(&plugin, &host, &[], &missing, uid()).expect("absent default");
    let dangling = dir.path().join("config.toml");
    std::os::unix::fs::symlink(&missing, &dangling).expect("symlink");
    let plugin = Plugin::new();
    let err = crate::init::init_with_config(&plugin, &host, &[], &dangling, uid())
        .expect_err("something is at the default path");
    assert!(err.0.contains(&dangling.display().to_string()), "{err}");
}

#[test]
fn plugstack_arguments_reach_the_settings() {
    let plugin = remote_plugin(&["sysfs_root=/srv/fx", "default=prefer", "enforce=strict"]);
    let s = plugin.settings();
    assert_eq!(s.sysfs_root, Path::new("/srv/fx"));
    assert_eq!(s.default, Choice::Prefer);
    assert!(!s.live());
}

// ---- the option and its environment twin ------------------------------------------

#[test]
fn option_callback_accepts_modes_and_rejects_bad_values_with_the_allowed_ones() {
    let plugin = Plugin::new();
    assert!(options::on_option(&plugin, Some("prefer,verbose"), false).is_ok());
    assert!(
        matches!(plugin.option(), OptionValue::Given(u) if u.choice == Choice::Prefer && u.verbose)
    );
    let err = options::on_option(&plugin, Some("fast"), false).expect_err("bad value");
    assert!(
        err.0.contains("'fast'") && err.0.contains("strict, prefer or off"),
        "{err}"
    );
    assert_eq!(plugin.option(), OptionValue::Invalid);
    assert!(options::on_option(&plugin, None, true).is_err());
}

#[test]
fn srun_checks_the_env_twin_before_launch() {
    let plugin = Plugin::new();
    let mut host = FakeHost::new(Context::Local);
    host.process_env
        .insert("SLURM_GPU_AFFINITY".into(), "sometimes".into());
    let err = dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).expect_err("bad twin");
    assert!(
        err.0.contains("'sometimes'") && err.0.contains("(from SLURM_GPU_AFFINITY)"),
        "{err}"
    );
    // The option, when given, wins over the variable.
    options::on_option(&plugin, Some("strict"), false).expect("good value");
    dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).expect("option wins");
    // sbatch/salloc check it too.
    let host = FakeHost {
        context: Context::Allocator,
        ..host
    };
    let plugin = Plugin::new();
    assert!(dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).is_err());
}

#[test]
fn srun_says_when_the_site_floor_raises_the_mode() {
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Local);
    let argv = vec!["enforce=strict".to_string()];
    crate::init::init_with_config(&plugin, &host, &argv, Path::new("/nonexistent.toml"), 0)
        .expect("init");
    options::on_option(&plugin, Some("off"), false).expect("off");
    logger::take();
    dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).expect("post opt");
    let logs = logger::take();
    assert!(
        logs.iter()
            .any(|(l, t)| *l == SlurmLevel::Info
                && t.contains("--gpu-affinity=off raised to strict")),
        "{logs:?}"
    );
}

// ---- remote: what user_init decides ------------------------------------------------

/// slurmstepd before the fork: init_post_opt (root: reads the node) then user_init (the
/// job user: solves).
fn prepare_step(plugin: &Plugin, host: &FakeHost, os: &FakeOs) {
    dispatch(plugin, Hook::InitPostOpt, host, os, &[]).expect("init_post_opt");
    dispatch(plugin, Hook::UserInit, host, os, &[]).expect("user_init");
}

fn gpu_host(pairs: &[(&str, &str)]) -> FakeHost {
    let mut host = FakeHost::new(Context::Remote).with_env(pairs);
    host.local_tasks = 2;
    host.alloc_cores = Some("0-1".into());
    host
}

#[test]
fn off_reads_nothing() {
    for args in [&[][..], &["default=off"][..]] {
        let plugin = remote_plugin(args);
        let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("CUDA_VISIBLE_DEVICES", "2,3")]);
        let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
        prepare_step(&plugin, &host, &os);
        assert!(matches!(plugin.step(), Some(StepOutcome::Off)));
        assert!(
            os.reads.borrow().is_empty(),
            "off must not read the topology"
        );
        dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &os, &[]).expect("task_init");
        assert_eq!(os.policy_calls.get(), 0);
    }
}

#[test]
fn user_can_turn_off_a_site_default_but_not_below_the_floor() {
    let plugin = remote_plugin(&["default=strict"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("SLURM_GPU_AFFINITY", "off")]);
    prepare_step(&plugin, &host, &no_os());
    assert!(matches!(plugin.step(), Some(StepOutcome::Off)));

    let plugin = remote_plugin(&["enforce=strict"]);
    prepare_step(&plugin, &host, &no_os());
    assert!(
        matches!(plugin.step(), Some(StepOutcome::Refused { .. })),
        "{:?}",
        plugin.step()
    );
}

#[test]
fn a_step_without_gpus_is_left_alone_even_under_strict() {
    for env in [
        &[][..],
        &[("CUDA_VISIBLE_DEVICES", "NoDevFiles")][..],
        &[("SLURM_STEP_GPUS", "")][..],
    ] {
        let plugin = remote_plugin(&["default=strict", "enforce=strict"]);
        let host = gpu_host(env);
        let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
        prepare_step(&plugin, &host, &os);
        assert!(
            matches!(plugin.step(), Some(StepOutcome::LeftAlone(_))),
            "{env:?}"
        );
        assert!(os.reads.borrow().is_empty());
        dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &os, &[]).expect("task runs");
        assert_eq!(host.task(0, 0).var("GPU_AFFINITY_MODE"), None);
    }
}

#[test]
fn the_batch_step_is_left_alone() {
    let plugin = remote_plugin(&["default=strict"]);
    let mut host = gpu_host(&[("SLURM_STEP_GPUS", "0")]);
    host.step_id = 0xffff_fffb;
    prepare_step(&plugin, &host, &no_os());
    assert!(matches!(plugin.step(), Some(StepOutcome::LeftAlone(_))));
}

#[test]
fn unknown_topology_refuses_under_strict_and_warns_once_under_prefer() {
    let plugin = remote_plugin(&["sysfs_root=/srv/fx"]);
    plugin.set_option(OptionValue::Given(crate::mode::UserChoice {
        choice: Choice::Strict,
        verbose: false,
    }));
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3")]);
    let os = no_os();
    prepare_step(&plugin, &host, &os);
    assert_eq!(*os.reads.borrow(), vec![Path::new("/srv/fx").to_path_buf()]);
    let err =
        dispatch(&plugin, Hook::TaskInit, &host.task(1, 5), &os, &[]).expect_err("strict refuses");
    assert_eq!(
        err.0,
        "gpu-affinity: rank 5: this node's topology is unknown (no topology in this test); \
         use --gpu-affinity=prefer or drain this node"
    );

    let plugin = remote_plugin(&["default=prefer"]);
    prepare_step(&plugin, &host, &os);
    logger::take();
    dispatch(&plugin, Hook::TaskInit, &host.task(0, 4), &os, &[]).expect("prefer runs");
    dispatch(&plugin, Hook::TaskInit, &host.task(1, 5), &os, &[]).expect("prefer runs");
    let warnings: Vec<_> = logger::take()
        .into_iter()
        .filter(|(_, t)| t.contains("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}

#[test]
fn the_node_is_read_as_root_in_init_post_opt_and_user_init_reads_nothing() {
    // slurmstepd runs user_init as the job user: every node-level read happens before,
    // in init_post_opt, so a tree only root can reach still plans the step.
    let plugin = remote_plugin(&["sysfs_root=/srv/fx", "default=strict"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3"), ("CUDA_VISIBLE_DEVICES", "2,3")]);
    let root_os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    dispatch(&plugin, Hook::InitPostOpt, &host, &root_os, &[]).expect("init_post_opt");
    assert_eq!(
        *root_os.reads.borrow(),
        vec![Path::new("/srv/fx").to_path_buf()]
    );
    assert!(matches!(plugin.prepared(), Some(Prepared::Ready { .. })));
    assert!(
        plugin.step().is_none(),
        "user_init solves, not init_post_opt"
    );

    // As the user, the tree is out of reach: user_init must not need it.
    let user_os = no_os();
    dispatch(&plugin, Hook::UserInit, &host, &user_os, &[]).expect("user_init");
    assert!(user_os.reads.borrow().is_empty());
    assert_eq!(user_os.link_reads.get(), 0);
    let Some(StepOutcome::Planned(planned)) = plugin.step() else {
        panic!("not planned: {:?}", plugin.step());
    };
    assert_eq!(planned.plan.ranks.len(), 2);
    let task = host.task(0, 0);
    dispatch(&plugin, Hook::TaskInit, &task, &user_os, &[]).expect("task_init");
    assert_eq!(task.var("GPU_AFFINITY_MODE").as_deref(), Some("strict"));
}

#[test]
fn a_root_side_failure_in_init_post_opt_surfaces_at_task_init() {
    let plugin = remote_plugin(&["sysfs_root=/srv/fx", "default=strict"]);
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3")]);
    // The hook itself succeeds: failing it would fail the step without a word to the user.
    dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).expect("init_post_opt");
    assert!(matches!(
        plugin.prepared(),
        Some(Prepared::Decided(StepOutcome::Refused { .. }))
    ));
    let good_os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    dispatch(&plugin, Hook::UserInit, &host, &good_os, &[]).expect("user_init");
    assert!(
        good_os.reads.borrow().is_empty(),
        "no second read as the user"
    );
    let err =
        dispatch(&plugin, Hook::TaskInit, &host.task(0, 3), &good_os, &[]).expect_err("refused");
    assert!(
        err.0
            .starts_with("gpu-affinity: rank 3: this node's topology is unknown"),
        "{err}"
    );
}

#[test]
fn gpus_that_appear_only_in_user_init_are_still_planned() {
    // Measured on 22.05: SLURM_STEP_GPUS is already there in init_post_opt. A Slurm that
    // set it later must not silently leave GPU steps unbound.
    let plugin = remote_plugin(&["default=strict"]);
    let cpu_view = gpu_host(&[]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    dispatch(&plugin, Hook::InitPostOpt, &cpu_view, &os, &[]).expect("init_post_opt");
    assert!(os.reads.borrow().is_empty(), "no GPUs yet: nothing read");
    let host = gpu_host(&[("SLURM_STEP_GPUS", "2,3")]);
    dispatch(&plugin, Hook::UserInit, &host, &os, &[]).expect("user_init");
    assert_eq!(os.reads.borrow().len(), 1);
    assert!(
        matches!(plugin.step(), Some(StepOutcome::Planned(_))),
        "{:?}",
        plugin.step()
    );
}

#[test]
fn an_invalid_forwarded_value_fails_the_task() {
    let plugin = remote_plugin(&[]);
    assert!(options::on_option(&plugin, Some("bogus"), true).is_err());
    let host = gpu_host(&[("SLURM_STEP_GPUS", "0")]);
    prepare_step(&plugin, &host, &no_os());
    let err =
        dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &no_os(), &[]).expect_err("invalid");
    assert!(err.0.contains("strict, prefer or off"), "{err}");
}

#[test]
fn task_init_without_user_init_fails_cleanly() {
    let plugin = remote_plugin(&[]);
    let host = gpu_host(&[]);
    assert!(dispatch(&plugin, Hook::TaskInit, &host.task(0, 0), &no_os(), &[]).is_err());
}

#[test]
fn remote_hooks_do_nothing_outside_slurmstepd() {
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Local).with_env(&[("SLURM_STEP_GPUS", "0")]);
    let os = FakeOs::new(Ok(machine()), "0-1", &[0]);
    dispatch(&plugin, Hook::UserInit, &host, &os, &[]).expect("no-op");
    dispatch(&plugin, Hook::TaskInit, &host, &os, &[]).expect("no-op");
    dispatch(&plugin, Hook::Exit, &host, &os, &[]).expect("no-op");
    assert!(plugin.step().is_none());
    assert!(os.reads.borrow().is_empty());
}

// ---- the step's GPUs and CPUs -------------------------------------------------------

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
fn gpus_per_task_reads_plain_and_typed_counts() {
    assert_eq!(step::gpus_per_task("2"), Ok(Some(2)));
    assert_eq!(step::gpus_per_task("h100:2"), Ok(Some(2)));
    assert_eq!(
        step::gpus_per_task(" nvidia_h100_80gb_hbm3:4 "),
        Ok(Some(4))
    );
    assert_eq!(step::gpus_per_task("a100:1,h100:1"), Ok(Some(2)));
    assert_eq!(step::gpus_per_task("0"), Ok(None));
    assert_eq!(step::gpus_per_task(""), Ok(None));
    for bad in ["h100", "h100:", "two", "h100:x"] {
        let w = step::gpus_per_task(bad).expect_err(bad);
        assert!(w.contains(&format!("SLURM_GPUS_PER_TASK='{bad}'")), "{w}");
    }
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
    let gpus = |global: &[u32], cuda: &[&str]| step::StepGpus {
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
            .contains("gres.conf /nonexistent/gres.conf (plugstack gres_conf=) does not exist"),
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

// ---- task_init: applying a rank's plan ----------------------------------------------

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

#[test]
fn mode_solver_mapping() {
    assert_eq!(Choice::Strict.solver_mode(), Some(Mode::Strict));
    assert_eq!(Choice::Off.solver_mode(), None);
}

#[test]
fn hook_names_are_slurms() {
    let names: Vec<&str> = [
        Hook::Init,
        Hook::InitPostOpt,
        Hook::UserInit,
        Hook::TaskPostFork,
        Hook::TaskInit,
        Hook::Exit,
    ]
    .map(Hook::name)
    .to_vec();
    assert_eq!(
        names,
        [
            "init",
            "init_post_opt",
            "user_init",
            "task_post_fork",
            "task_init",
            "exit"
        ]
    );
    #[cfg(feature = "panic-test")]
    assert_eq!(names, crate::settings::PANIC_HOOKS);
}

#[cfg(feature = "panic-test")]
#[test]
fn test_panic_panics_in_the_named_remote_hook_and_the_guard_contains_it() {
    let plugin = remote_plugin(&["test_panic=user_init"]);
    let host = gpu_host(&[]);
    logger::take();
    let rc = crate::guard::run("user_init", || {
        dispatch(&plugin, Hook::UserInit, &host, &no_os(), &[])
    });
    assert_eq!(rc, -1);
    assert!(
        logger::take()
            .iter()
            .any(|(_, l)| l.contains("internal error in user_init: test_panic=user_init"))
    );
    // Other hooks and other contexts are untouched.
    let rc = crate::guard::run("exit", || {
        dispatch(&plugin, Hook::Exit, &host, &no_os(), &[])
    });
    assert_eq!(rc, 0);
    let local = FakeHost::new(Context::Local);
    let rc = crate::guard::run("user_init", || {
        dispatch(&plugin, Hook::UserInit, &local, &no_os(), &[])
    });
    assert_eq!(rc, 0);
}

// ---- end to end over real machine descriptions ---------------------------------------

/// One node of a full-node step over a catalog machine: the machine written as a sysfs
/// tree and read back by the core's sysfs reader, a private run_dir, the plugin after
/// init and user_init, and the step's host.
struct NodeStep {
    _fixture: tempfile::TempDir,
    run: tempfile::TempDir,
    machine: Machine,
    plugin: Plugin,
    host: FakeHost,
    os: FakeOs,
}

impl NodeStep {
    /// `args`: extra plugstack arguments; `env`: the user's own job environment.
    fn new(name: &str, choice: &str, args: &[String], env: &[(&str, &str)]) -> NodeStep {
        Self::with_tree(name, choice, args, env, |_| {})
    }

    /// [`NodeStep::new`], with `add` putting more files into the node's tree (its sysfs
    /// root) before the step reads it.
    fn with_tree(
        name: &str,
        choice: &str,
        args: &[String],
        env: &[(&str, &str)],
        add: impl FnOnce(&Path),
    ) -> NodeStep {
        let catalog = gpu_affinity::catalog::machine(name).expect("catalog machine");
        let fixture = tempfile::tempdir().expect("tempdir");
        gpu_affinity::sources::fixture::write_fixture(&catalog, fixture.path()).expect("fixture");
        add(fixture.path());
        let machine =
            crate::topology::read_machine(fixture.path(), Detail::Full).expect("sysfs reader");
        let gpu_count = machine.gpus.len();
        assert_eq!(gpu_count, 8, "{name}");

        let run = tempfile::tempdir().expect("run_dir");
        let mut argv = vec![
            format!("sysfs_root={}", fixture.path().display()),
            format!("run_dir={}", run.path().join("gpu-affinity").display()),
        ];
        argv.extend(args.iter().cloned());
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let plugin = remote_plugin(&argv);
        options::on_option(&plugin, Some(choice), true).expect("mode");
        let ids: Vec<String> = (0..gpu_count).map(|i| i.to_string()).collect();
        let ids = ids.join(",");
        let mut host =
            gpu_host(&[("SLURM_STEP_GPUS", &ids), ("CUDA_VISIBLE_DEVICES", &ids)]).with_env(env);
        host.local_tasks = gpu_count as u32;
        let units = if machine.cores.is_empty() {
            machine.cpus().len()
        } else {
            machine.cores.len()
        };
        host.alloc_cores = Some(format!("0-{}", units - 1));
        let numa: Vec<u32> = machine.numa_nodes.iter().map(|n| n.id).collect();
        let os = FakeOs::new(Ok(machine.clone()), &machine.cpus().to_string(), &numa);
        prepare_step(&plugin, &host, &os);
        NodeStep {
            _fixture: fixture,
            run,
            machine,
            plugin,
            host,
            os,
        }
    }

    fn planned(&self) -> &StepPlan {
        match self.plugin.step() {
            Some(StepOutcome::Planned(p)) => p,
            other => panic!("not planned: {other:?}"),
        }
    }

    /// slurmstepd after the fork: task_post_fork for every task (it writes once).
    fn post_fork(&self) {
        for local in 0..self.host.local_tasks {
            dispatch(
                &self.plugin,
                Hook::TaskPostFork,
                &self.host.task(local, local),
                &self.os,
                &[],
            )
            .expect("task_post_fork");
        }
    }

    fn task(&self, local: u32) -> Result<FakeHost, crate::guard::Failure> {
        let t = self.host.task(local, 100 + local);
        dispatch(&self.plugin, Hook::TaskInit, &t, &self.os, &[]).map(|()| t)
    }

    /// task_init of a task that must fail, with its one line.
    fn refused(&self, local: u32) -> crate::guard::Failure {
        match self.task(local) {
            Ok(_) => panic!("task {local} was not refused"),
            Err(f) => f,
        }
    }
}

/// An 8-task strict step planned in user_init and applied in every task_init.
fn full_node_step(name: &str) {
    let node = NodeStep::new(name, "strict", &[], &[]);
    let NodeStep {
        machine,
        plugin,
        os,
        ..
    } = &node;
    let gpu_count = machine.gpus.len();
    assert_eq!(
        os.reads.borrow().len(),
        1,
        "the topology is read once per step"
    );
    assert_eq!(
        *os.details.borrow(),
        vec![Detail::Placement],
        "a step reads what placement needs, not the PCIe links"
    );
    let planned = node.planned();
    assert_eq!(
        os.link_reads.get(),
        u32::from(planned.fabric.topology.is_some()),
        "{name}: links are read only for a generated NCCL topology"
    );
    assert!(
        planned.plan.violations.is_empty(),
        "{name}: {:?}",
        planned.plan.violations
    );
    node.post_fork();
    let mut seen_gpus = Vec::new();
    for local in 0..gpu_count as u32 {
        let t = node.task(local).expect("task_init");
        let gpu: PciAddr = t
            .var("GPU_AFFINITY_GPUS")
            .expect("gpus")
            .parse()
            .expect("one GPU");
        assert!(!seen_gpus.contains(&gpu), "{name}: GPU {gpu} given twice");
        seen_gpus.push(gpu);
        let minor = machine
            .gpus
            .iter()
            .find(|g| g.pci == gpu)
            .and_then(|g| g.minor)
            .expect("minor");
        assert_eq!(
            t.var("CUDA_VISIBLE_DEVICES"),
            Some(minor.to_string()),
            "{name}"
        );
        let numa = machine.numa_of(gpu).expect("GPU NUMA node");
        assert_eq!(
            t.var("GPU_AFFINITY_MEMS"),
            Some(numa.to_string()),
            "{name} {gpu}"
        );
        assert_eq!(*os.policy.borrow(), (MemPolicy::Bind, vec![numa]));
        let applied = cpus(&t.var("GPU_AFFINITY_CPUS").expect("cpus"));
        let node_cpus = &machine.numa_node(numa).expect("node").cpus;
        assert!(
            !applied.is_empty() && applied.is_subset(node_cpus),
            "{name} {gpu}: {applied} vs {node_cpus}"
        );
        assert_eq!(*os.affinity.borrow(), applied);
        let nics = t.var("GPU_AFFINITY_NICS").expect("nics");
        assert!(!nics.is_empty(), "{name}: {gpu} has no NIC");
        for nic_name in nics.split(',') {
            let nic = machine
                .nics
                .iter()
                .find(|n| n.name() == Some(nic_name))
                .expect("NIC in model");
            assert_eq!(
                machine.numa_of(nic.pci),
                Some(numa),
                "{name}: {nic_name} is not near {gpu}"
            );
        }
        let ports: usize = nics
            .split(',')
            .filter_map(|n| machine.nics.iter().find(|x| x.name() == Some(n)))
            .map(|n| n.ports.len().max(1))
            .sum();
        // The vendor profile's NCCL environment rides along, identical on every rank.
        let hca = t.var("NCCL_IB_HCA").expect("NCCL_IB_HCA");
        assert_eq!(
            Some(&hca),
            node.task(0).expect("rank 0").var("NCCL_IB_HCA").as_ref(),
            "{name}"
        );
        // UCX_NET_DEVICES is the profile's per-rank value, exactly as explain shows it.
        let ucx = t.var("UCX_NET_DEVICES").expect("ucx");
        assert_eq!(ucx.split(',').count(), ports, "{name}: {ucx}");
        let index = planned
            .plan
            .ranks
            .iter()
            .position(|r| r.rank == local)
            .expect("rank in plan");
        assert_eq!(
            Some(&ucx),
            planned.fabric.env.ranks[index]
                .get("UCX_NET_DEVICES")
                .map(|v| &v.value),
            "{name}"
        );
    }
    dispatch(plugin, Hook::Exit, &node.host, os, &[]).expect("exit");
}

#[test]
fn azure_nd_h100_v5_full_node_binds_every_rank_near_its_gpu() {
    full_node_step("standard_nd96isr_h100_v5");
}

#[test]
fn oci_bm_gpu_h100_8_full_node_binds_every_rank_near_its_gpu() {
    full_node_step("bm.gpu.h100.8");
}

// ---- the fabric environment: one facade with explain ---------------------------------

#[test]
fn a_users_ucx_net_devices_is_kept_on_every_rank() {
    let node = NodeStep::new(AZURE, "strict", &[], &[("UCX_NET_DEVICES", "mlx5_ib7:1")]);
    node.post_fork();
    for local in 0..8 {
        let t = node.task(local).expect("task_init");
        assert_eq!(
            t.var("UCX_NET_DEVICES").as_deref(),
            Some("mlx5_ib7:1"),
            "rank {local}"
        );
        assert!(t.var("GPU_AFFINITY_NICS").is_some());
    }
}

#[test]
fn aws_p5_ranks_get_no_ucx_net_devices() {
    // EFA: the p5 profile leaves UCX to the user (no verbs device UCX could use).
    let node = NodeStep::new("p5.48xlarge", "prefer", &[], &[]);
    node.post_fork();
    for local in 0..8 {
        let t = node.task(local).expect("task_init");
        assert_eq!(t.var("UCX_NET_DEVICES"), None, "rank {local}");
        assert_eq!(t.var("FI_PROVIDER").as_deref(), Some("efa"), "rank {local}");
        assert!(
            !t.var("GPU_AFFINITY_NICS").unwrap_or_default().is_empty(),
            "rank {local} has EFA NICs"
        );
    }
}

const AZURE: &str = "standard_nd96isr_h100_v5";

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v.dedup();
    v
}

#[test]
fn azure_gets_a_generated_nccl_topology_that_describes_the_node() {
    let node = NodeStep::new(AZURE, "strict", &[], &[]);
    let topology = node
        .planned()
        .fabric
        .topology
        .clone()
        .expect("the vendor file is absent: a topology is generated");
    let step_dirs = node.run.path().join("gpu-affinity");
    assert_eq!(topology.dir.parent(), Some(step_dirs.as_path()));
    assert!(
        !topology.file.exists(),
        "user_init (as the user) writes nothing"
    );

    node.post_fork();
    let text = std::fs::read_to_string(&topology.file).expect("written by task_post_fork");
    for local in 0..8 {
        let t = node.task(local).expect("task_init");
        assert_eq!(
            t.var("NCCL_TOPO_FILE").as_deref(),
            topology.file.to_str(),
            "rank {local}"
        );
    }
    // The placement read left the links out; the file still carries them, as a full read
    // of the node would give them.
    assert_eq!(node.os.link_reads.get(), 1);
    assert_eq!(
        text,
        gpu_affinity::fabric::topo_xml::render(
            &node.machine,
            &gpu_affinity::fabric::fabric_nics(
                &node.machine,
                &gpu_affinity::fabric::profiles::Profiles::builtin()
            )
        )
    );
    assert!(text.contains("link_speed=\"32.0 GT/s PCIe\""), "{text}");
    // NCCL reads back the node it was written from: the same GPUs and fabric NICs.
    let parsed = gpu_affinity::sources::nccl_xml::parse(&text).expect("NCCL topology XML");
    let gpus = |m: &Machine| sorted(m.gpus.iter().map(|g| g.pci).collect());
    assert_eq!(gpus(&parsed), gpus(&node.machine));
    let ib = |m: &Machine| {
        sorted(
            m.nics
                .iter()
                .filter(|n| n.kind == NicKind::Infiniband)
                .map(|n| n.pci)
                .collect(),
        )
    };
    assert_eq!(ib(&parsed).len(), 8);
    assert_eq!(ib(&parsed), ib(&node.machine));
    for gpu in &node.machine.gpus {
        assert_eq!(
            parsed.numa_of(gpu.pci),
            node.machine.numa_of(gpu.pci),
            "{}",
            gpu.pci
        );
    }

    // slurm_spank_exit removes the step directory, and only it.
    dispatch(&node.plugin, Hook::Exit, &node.host, &node.os, &[]).expect("exit");
    assert!(!topology.dir.exists());
    assert!(step_dirs.is_dir());
}

/// The vendor file decides NCCL_TOPO_FILE for every job on the node: used when it is
/// root's alone, refused (and a topology generated instead) when others can write it.
#[test]
fn a_vendor_topology_file_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    const VENDOR: &str = "/opt/microsoft/ndv5-topo.xml";
    for (mode, used) in [(0o644, true), (0o664, false), (0o666, false)] {
        logger::take();
        let node = NodeStep::with_tree(AZURE, "strict", &[], &[], |root| {
            let catalog = gpu_affinity::catalog::machine(AZURE).expect("catalog");
            let file = root.join(VENDOR.trim_start_matches('/'));
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(
                &file,
                gpu_affinity::fabric::topo_xml::render(&catalog, &catalog.fabric_nics()),
            )
            .expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        });
        let planned = node.planned();
        let topo_file = planned
            .fabric
            .env
            .node
            .get("NCCL_TOPO_FILE")
            .map(|v| v.value.clone());
        let logs = logger::take();
        if used {
            assert_eq!(topo_file.as_deref(), Some(VENDOR), "{logs:?}");
            assert!(planned.fabric.topology.is_none());
        } else {
            assert_ne!(topo_file.as_deref(), Some(VENDOR), "mode {mode:o}");
            assert!(planned.fabric.topology.is_some(), "generated instead");
            assert!(
                logs.iter().any(|(_, t)| t.contains(&format!(
                    "ndv5-topo.xml is writable by group or others (mode {mode:04o})"
                ))),
                "{logs:?}"
            );
        }
    }
}

#[test]
fn the_users_nccl_topo_file_wins_and_nothing_is_generated() {
    let node = NodeStep::new(
        AZURE,
        "strict",
        &[],
        &[("NCCL_TOPO_FILE", "/home/me/topo.xml")],
    );
    assert!(node.planned().fabric.topology.is_none());
    node.post_fork();
    let t = node.task(0).expect("task_init");
    assert_eq!(
        t.var("NCCL_TOPO_FILE").as_deref(),
        Some("/home/me/topo.xml")
    );
    assert_eq!(
        std::fs::read_dir(node.run.path()).expect("run").count(),
        0,
        "no step directory"
    );
}

/// A root-owned config file (this user's, in tests) with `[fabric]` settings.
fn config_file(dir: &Path, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("config.toml");
    std::fs::write(&path, text).expect("write config");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    format!("config={}", path.display())
}

#[test]
fn a_users_nccl_ib_hca_wins_unless_the_admin_forces_it() {
    let user = [("NCCL_IB_HCA", "mlx5_7")];
    let node = NodeStep::new(AZURE, "strict", &[], &user);
    node.post_fork();
    let profile_hca = {
        let v = node
            .planned()
            .fabric
            .env
            .node
            .get("NCCL_IB_HCA")
            .expect("rendered");
        assert!(!v.to_export(), "user_set");
        v.value.clone()
    };
    for local in 0..8 {
        let t = node.task(local).expect("task_init");
        assert_eq!(t.var("NCCL_IB_HCA").as_deref(), Some("mlx5_7"));
        // The rest of the profile is still exported.
        assert!(t.var("NCCL_TOPO_FILE").is_some());
    }
    assert_eq!(profile_hca, "mlx5_7");

    let conf = tempfile::tempdir().expect("tempdir");
    let config = config_file(conf.path(), "[fabric]\nforce = [\"NCCL_IB_HCA\"]\n");
    let forced = NodeStep::new(AZURE, "strict", &[config], &user);
    forced.post_fork();
    let t = forced.task(3).expect("task_init");
    let hca = t.var("NCCL_IB_HCA").expect("forced");
    assert_ne!(hca, "mlx5_7");
    // The node's fabric devices, never a per-rank list.
    for nic in forced
        .machine
        .nics
        .iter()
        .filter(|n| n.kind == NicKind::Infiniband)
    {
        let rdma = nic.rdma.as_deref().expect("rdma name");
        assert!(hca.contains(rdma), "{rdma} not in {hca}");
    }
}

#[test]
fn a_bad_force_list_is_a_load_error_naming_it() {
    let conf = tempfile::tempdir().expect("tempdir");
    for (text, needle) in [
        ("[fabric]\nforce = [\"NCCL IB\"]\n", "force = 'NCCL IB'"),
        (
            "[fabric]\nforce = [\"CUDA_VISIBLE_DEVICES\"]\n",
            "force = 'CUDA_VISIBLE_DEVICES'",
        ),
        ("[fabric]\nforced = [\"NCCL_IB_HCA\"]\n", "forced"),
    ] {
        let config = config_file(conf.path(), text);
        let plugin = Plugin::new();
        let host = FakeHost::new(Context::Remote);
        let err = crate::init::init_with_config(
            &plugin,
            &host,
            &[config],
            Path::new("/nonexistent.toml"),
            uid(),
        )
        .expect_err(text);
        assert!(err.0.contains(needle), "{text}: {err}");
    }
}

/// An admin profiles.d with one file, root's (this user's) and 0644.
fn profiles_dir(text: &str) -> (tempfile::TempDir, String, String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().join("profiles.d");
    std::fs::create_dir(&d).expect("mkdir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let file = d.join("azure-ndv5.toml");
    std::fs::write(&file, text).expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let arg = format!("profiles_dir={}", d.display());
    (dir, arg, file.display().to_string())
}

/// Line 7 has a number where a string belongs.
const MALFORMED: &str = "description = \"site\"\n[match]\nvendor = \"azure\"\n\n[[env]]\nkey = \"NCCL_IB_TC\"\nvalue = 3\nsource = \"site\"\n";

#[test]
fn a_malformed_admin_profile_refuses_the_step_under_strict_naming_file_and_line() {
    let (_keep, arg, file) = profiles_dir(MALFORMED);
    logger::take();
    let node = NodeStep::new(AZURE, "strict", &[arg], &[]);
    let errors: Vec<String> = logger::take()
        .into_iter()
        .filter(|(l, _)| *l == SlurmLevel::Error)
        .map(|(_, t)| t)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!("gpu-affinity: profile {file}:7: ")),
        "{errors:?}"
    );
    assert!(matches!(
        node.plugin.step(),
        Some(StepOutcome::Refused { .. })
    ));
    let err = node.refused(2);
    assert!(
        err.0
            .starts_with(&format!("gpu-affinity: rank 102: profile {file}:7: "))
            && err
                .0
                .ends_with("; use --gpu-affinity=prefer or drain this node"),
        "{err}"
    );
}

#[test]
fn a_malformed_admin_profile_under_prefer_falls_back_to_the_built_in_ones_with_a_warning() {
    let (_keep, arg, file) = profiles_dir(MALFORMED);
    let node = NodeStep::new(AZURE, "prefer", &[arg], &[]);
    node.post_fork();
    logger::take();
    let t = node.task(0).expect("prefer runs");
    assert!(t.var("NCCL_IB_HCA").is_some(), "built-in profile applied");
    let warned = node.os.stderr.borrow();
    assert!(
        warned
            .iter()
            .any(|l| l.starts_with("gpu-affinity: warning: profile ")
                && l.contains(&format!("{file}:7: "))
                && l.ends_with("; using the built-in fabric profiles")),
        "{warned:?}"
    );
}

#[test]
fn an_admin_profile_replaces_the_built_in_one() {
    let text = "description = \"site\"\n[match]\nvendor = \"azure\"\nfamily = [\"ndv5\"]\n\n[[env]]\nkey = \"NCCL_IB_TC\"\nvalue = \"106\"\nsource = \"site network team\"\n";
    let (_keep, arg, _) = profiles_dir(text);
    let node = NodeStep::new(AZURE, "strict", &[arg], &[]);
    node.post_fork();
    let t = node.task(0).expect("task_init");
    assert_eq!(t.var("NCCL_IB_TC").as_deref(), Some("106"));
    assert_eq!(
        t.var("NCCL_IB_HCA"),
        None,
        "the site's profile sets only TC"
    );
}

#[test]
fn an_admin_profiles_dir_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (keep, arg, _) = profiles_dir(MALFORMED);
    let d = keep.path().join("profiles.d");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let node = NodeStep::new(AZURE, "strict", &[arg], &[]);
    let err = node.refused(0);
    assert!(
        err.0.contains("profiles directory")
            && err.0.contains("writable by group or others (mode 0777)"),
        "{err}"
    );
}

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

#[test]
fn build_rs_requires_every_slurm_function_the_wrapper_calls() {
    let build = include_str!("../build.rs");
    let list = build
        .split_once("const REQUIRED_FUNCTIONS")
        .and_then(|(_, rest)| rest.split_once("];"))
        .map(|(list, _)| list)
        .expect("REQUIRED_FUNCTIONS in build.rs");
    let sources = [include_str!("spank.rs"), include_str!("logger.rs")].concat();
    let mut called: Vec<&str> = sources
        .split("ffi::")
        .skip(1)
        .filter_map(|rest| {
            let name = rest
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()?;
            let is_call = rest[name.len()..].starts_with('(');
            (is_call && (name.starts_with("spank_") || name.starts_with("slurm_"))).then_some(name)
        })
        .collect();
    called.sort_unstable();
    called.dedup();
    assert!(called.len() >= 8, "{called:?}");
    for name in called {
        assert!(
            list.contains(&format!("\"{name}\"")),
            "{name} is not in REQUIRED_FUNCTIONS"
        );
    }
}
