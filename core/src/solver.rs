//! The binding solver: (machine, step allocation, tasks, mode) -> per-rank Plan.
//!
//! Pure: no I/O. The SPANK plugin and `gpu-affinity explain` both call [`solve`].

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::model::Machine;
use crate::pci::PciAddr;

/// How a step treats placement problems.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Any violation refuses the step.
    Strict,
    /// Violations become warnings; the best plan still applies.
    Prefer,
}

/// What the step asks for on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRequest {
    /// The step's GPUs on this node, in the order Slurm numbers them (local GPU index order).
    pub gpus: Vec<PciAddr>,
    /// CPUs allocated to the step on this node.
    pub cpus: CpuSet,
    /// Local task count.
    pub tasks: u32,
    /// GPUs per task; `None` = the step's GPUs divided evenly among the tasks.
    pub gpus_per_task: Option<u32>,
    pub mode: Mode,
}

/// A NIC as a plan names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NicRef {
    pub pci: PciAddr,
    /// RDMA device name (or netdev when it has none); `None` when unknown.
    pub name: Option<String>,
}

/// One local rank's binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RankPlan {
    pub rank: u32,
    pub gpus: Vec<PciAddr>,
    pub nics: Vec<NicRef>,
    /// Linux cpulist; "" when unknown.
    pub cpus: CpuSet,
    /// NUMA nodes for the memory policy.
    pub mems: Vec<u32>,
    /// One sentence per choice, e.g. "GPU 0000:53:00.0 and NIC 0000:4f:00.0 share switch 0000:45:00.0".
    pub reasons: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    NoGpu,
    NoLocalNic,
    NoLocalCpu,
    GpusNotDivisible,
    TopologyUnknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// `None` for step-wide problems.
    pub rank: Option<u32>,
    pub kind: ViolationKind,
    /// One line a user can act on.
    pub message: String,
}

/// The solver's answer. In `Prefer` mode the same problems are reported as `warnings`
/// and `violations` is empty; in `Strict` mode a non-empty `violations` refuses the step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub mode: Mode,
    pub ranks: Vec<RankPlan>,
    pub violations: Vec<Violation>,
    pub warnings: Vec<Violation>,
    /// Every fabric NIC of the node (for NCCL_IB_HCA-style node-wide lists).
    pub fabric_nics: Vec<NicRef>,
}

impl Plan {
    /// True when the step must not run (strict mode with violations).
    pub fn refused(&self) -> bool {
        !self.violations.is_empty()
    }
}

/// Solve a step's placement. Never panics; every problem is a typed violation.
pub fn solve(_machine: &Machine, _request: &StepRequest) -> Plan {
    unimplemented!("solver being written")
}
