//! The per-step data the hooks hand each other: what init_post_opt settled and read
//! (`Prepared`, `NodeInputs`), what user_init decided (`StepOutcome`, `StepPlan`) and the
//! step's fabric environment (`StepFabric`).
//!
//! A leaf: it depends on the core and on `mode` only, so the modules that compute these
//! values (`node`, `step`, `fabric_env`) and `state`, which keeps them between hooks,
//! each import it and never each other in a circle.

use std::path::PathBuf;

use gpu_affinity::fabric::profiles::Profiles;
use gpu_affinity::fabric::{Detection, Env};
use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;
use gpu_affinity::slurm::gpu_ids::SlurmGpus;
use gpu_affinity::solver::Plan;

use crate::mode::Resolved;

/// Steps at or above this id are Slurm's own (batch script, extern, interactive):
/// they are not a user's parallel step and are left alone.
pub const FIRST_SPECIAL_STEP: u32 = 0xffff_fff0;

/// The most GPUs a node is assumed to have before its topology is read (bounds the
/// `SLURM_STEP_GPUS` check in init_post_opt).
pub const MAX_NODE_GPUS: usize = 64;

/// Why a step without GPUs is left alone (also how user_init recognises that verdict).
pub const NO_GPUS: &str = "the step has no GPUs";

/// What init_post_opt leaves for user_init.
#[derive(Clone, Debug)]
pub enum Prepared {
    /// Settled before any task: off, left alone, an invalid value, or a root-side input
    /// that failed (refused under strict, unplanned under prefer).
    Decided(StepOutcome),
    /// A GPU step to plan in user_init, with the node's inputs.
    Ready {
        resolved: Resolved,
        step_id: u32,
        node: Box<NodeInputs>,
    },
}

/// The node-level inputs, read as root.
#[derive(Clone, Debug)]
pub struct NodeInputs {
    /// The topology under `sysfs_root`, to [`Detail::Placement`]; with the PCIe links too
    /// when the step may generate an NCCL topology file.
    pub machine: Machine,
    /// The profile `detection` picked from the built-in plus the admin's profiles
    /// (prefer: the built-in ones alone when the admin's are unusable), alone.
    pub profiles: Profiles,
    /// Warnings from loading the profiles, shown like the fabric's own.
    pub warnings: Vec<String>,
    /// The node's fabric detection (vendor, instance, profile) over `machine` and every
    /// profile: made once per node state (`node_view.rs`) and passed to every later use
    /// in the step.
    pub detection: Detection,
    /// The vendor NCCL topology file the node's profile names, when it names one.
    pub vendor_topology: Option<VendorTopology>,
    /// Slurm's GPU ids on this node -> the machine's GPUs (from gres.conf, read as root).
    pub slurm_gpus: SlurmGpus,
    /// cgroup.conf's ConstrainDevices: Slurm confines steps and tasks to their GPUs and
    /// numbers them locally.
    pub constrain_devices: bool,
}

/// A profile's vendor NCCL topology file, parsed as root.
#[derive(Clone, Debug)]
pub struct VendorTopology {
    /// The path as the profile names it (the key the fabric facade asks for).
    pub path: String,
    /// `None`: absent or unusable (already logged).
    pub parsed: Option<Machine>,
}

/// What user_init decided for the step; task_init acts on it.
#[derive(Clone, Debug)]
pub enum StepOutcome {
    /// `off` (asked for or the site default): nothing was read, nothing is done.
    Off,
    /// No GPUs in the step, or a Slurm-internal step: left alone in every mode.
    LeftAlone(&'static str),
    /// prefer, but no plan could be made: tasks run unbound; the first task warns.
    Unplanned {
        warning: String,
    },
    /// strict, but no plan could be made: every task fails with this reason.
    Refused {
        reason: String,
    },
    /// The option value that reached this node is not valid.
    Invalid(String),
    /// strict, and the multi-node step leaves one placement unit of the cluster's
    /// topology (or it cannot be checked): every task fails with this line, as it is.
    Misplaced(String),
    Planned(Box<StepPlan>),
}

/// A solved step, kept for the tasks.
#[derive(Clone, Debug)]
pub struct StepPlan {
    pub resolved: Resolved,
    pub plan: Plan,
    /// Each step GPU and the id the step's CUDA_VISIBLE_DEVICES used for it.
    pub cuda_ids: Vec<(PciAddr, String)>,
    /// The step's Slurm GPU ids (`SLURM_STEP_GPUS`), in the order of `cuda_ids`.
    pub slurm_ids: Vec<u32>,
    /// Slurm confines devices and numbers GPUs locally (cgroup.conf ConstrainDevices):
    /// `--gpu-bind=map_gpu` values count the step's GPUs, and a task bound to its own
    /// GPUs sees only those.
    pub local_ids: bool,
    /// The topology is the running kernel's own (`sysfs_root=/`).
    pub live: bool,
    pub job_id: u32,
    pub step_id: u32,
    /// The job owner, for the slurmd log.
    pub uid: Option<u32>,
    /// The vendor fabric environment for the step (node-wide and per rank), the NCCL
    /// topology file to generate and step-wide fabric warnings.
    pub fabric: StepFabric,
}

impl StepPlan {
    pub fn cuda_id(&self, gpu: PciAddr) -> Option<&str> {
        self.cuda_ids
            .iter()
            .find(|(a, _)| *a == gpu)
            .map(|(_, id)| id.as_str())
    }
}

/// The step's GPUs as Slurm named them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepGpus {
    /// Slurm's gres ids (positions in slurmd's device list), in Slurm's order.
    pub global: Vec<u32>,
    /// The ids CUDA_VISIBLE_DEVICES gives the same GPUs: equal to `global`, or local
    /// 0..n under device confinement.
    pub cuda: Vec<String>,
}

/// The NCCL topology file generated for this step, written as root in task_post_fork.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedTopology {
    /// The step directory under run_dir.
    pub dir: PathBuf,
    /// `dir/nccl-topo.xml`, the value NCCL_TOPO_FILE carries.
    pub file: PathBuf,
    pub xml: String,
    /// The uid the written file belongs to (root; tests: their own).
    pub owner: u32,
}

/// The step's fabric environment as the plugin keeps it.
#[derive(Clone, Debug, Default)]
pub struct StepFabric {
    pub env: Env,
    /// Set when NCCL_TOPO_FILE points at a file this step must write.
    pub topology: Option<GeneratedTopology>,
    /// Step-wide warnings the node's first task shows its user.
    pub warnings: Vec<String>,
}

/// A step that cannot be planned: refused under strict, left unbound under prefer.
pub fn unplannable(resolved: Resolved, reason: String) -> StepOutcome {
    if resolved.strict() {
        return StepOutcome::Refused { reason };
    }
    StepOutcome::Unplanned {
        warning: format!("gpu-affinity: warning: {reason}; tasks run without GPU affinity"),
    }
}
