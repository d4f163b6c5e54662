//! Hook-level tests: every SPANK context driven through the fake host and kernel, one
//! file per context; the shared fixtures (a test machine, plans, hosts) live here.

mod dispatch;
mod end_to_end;
mod fabric;
mod init;
mod node_step;
mod option;
mod placement;
mod step_plan;
mod task_init;
mod task_post_fork;
mod user_init;

use std::path::Path;

use node_step::{AZURE, NodeStep};

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::model::{Gpu, Machine, Nic, NicKind, NumaNode, PciDevice, PciLink, RdmaPort};
use gpu_affinity::pci::PciAddr;
use gpu_affinity::solver::{Mode, NicRef, Plan, RankPlan, Violation, ViolationKind};
use gpu_affinity::sources::sysfs::Detail;

use crate::apply::{Task, apply_rank};
use crate::dispatch::{Hook, dispatch};
use crate::fake::{FakeHost, FakeOs};
use crate::host::{Context, MemPolicy};
use crate::logger::{self, SlurmLevel};
use crate::mode::{Choice, OptionValue, Resolved};
use crate::option_callback;
use crate::state::Plugin;
use crate::step;
use crate::step_data::{Prepared, StepFabric, StepGpus, StepOutcome, StepPlan};

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
