//! The seam between the plugin's decisions and the outside world.
//!
//! [`Host`] is what Slurm offers a SPANK hook (items, the job environment, option
//! registration); [`Os`] is what the kernel offers a task (CPU affinity, memory policy,
//! the node's topology). The real implementations live in `spank.rs` and `os.rs`; the
//! unit tests drive every hook through fakes of both, without Slurm.

use std::fmt;
use std::path::{Path, PathBuf};

use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::fabric::NodeView;
use gpu_affinity::model::Machine;
use gpu_affinity::slurm::gres_conf::GresConf;
use gpu_affinity::slurm::slurm_conf::SlurmConf;
use gpu_affinity::slurm::topology::Topology;
use gpu_affinity::sources::sysfs::Detail;

use crate::copies::Copies;
use crate::node_view::ViewError;

/// Where the plugin was loaded (spank_context()).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// srun.
    Local,
    /// slurmstepd: the step's node side, where binding happens.
    Remote,
    /// sbatch / salloc.
    Allocator,
    /// slurmd itself.
    Slurmd,
    /// Job prolog / epilog.
    JobScript,
    /// spank_context() failed.
    #[cfg_attr(test, allow(dead_code))]
    Unknown,
}

/// A SPANK call that failed, with Slurm's own words for why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostError {
    pub call: &'static str,
    pub reason: String,
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.reason)
    }
}

/// The one option this plugin registers, in Rust terms; `spank.rs` turns it into a
/// `struct spank_option` (Slurm copies it, so static strings are enough).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionSpec {
    pub name: &'static str,
    pub arginfo: &'static str,
    pub usage: &'static str,
}

/// What a SPANK hook may ask Slurm.
pub trait Host {
    fn context(&self) -> Context;
    fn job_id(&self) -> Result<u32, HostError>;
    fn step_id(&self) -> Result<u32, HostError>;
    /// S_JOB_NODEID: this node's index in the step (0: the first node). The job env's
    /// SLURM_NODEID is not set yet in init_post_opt (measured on 22.05).
    fn node_id(&self) -> Result<u32, HostError>;
    /// S_JOB_NNODES: the step's node count (in srun: its step layout's, once known).
    fn step_node_count(&self) -> Result<u32, HostError>;
    /// S_JOB_UID (logged in the step summary).
    fn job_uid(&self) -> Result<u32, HostError>;
    /// S_TASK_ID: the task's index on this node (task_init only).
    fn local_task_id(&self) -> Result<u32, HostError>;
    /// S_TASK_GLOBAL_ID: the rank users see (SLURM_PROCID).
    fn global_task_id(&self) -> Result<u32, HostError>;
    /// S_JOB_LOCAL_TASK_COUNT.
    fn local_task_count(&self) -> Result<u32, HostError>;
    /// S_STEP_ALLOC_CORES: the step's cores on this node, Slurm's list format ("0-3,8").
    fn step_alloc_cores(&self) -> Result<String, HostError>;
    /// A variable of the job's environment (remote context); `None` when unset.
    fn getenv(&self, name: &str) -> Result<Option<String>, HostError>;
    fn setenv(&self, name: &str, value: &str) -> Result<(), HostError>;
    fn register_option(&self, option: &OptionSpec) -> Result<(), HostError>;
    /// A variable of the calling process's own environment (srun, sbatch): the user's
    /// shell environment there, so only the user's own mode choice is read from it.
    fn process_env(&self, name: &str) -> Option<String>;
}

/// The NUMA memory policy modes this plugin sets (linux/mempolicy.h values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemPolicy {
    Default,
    /// Allocate on the first listed node, fall back elsewhere when it is full.
    Preferred,
    /// Allocate only on the listed nodes.
    Bind,
    /// Any other mode (interleave, local, ...), by its number.
    Other(i32),
}

impl fmt::Display for MemPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemPolicy::Default => f.write_str("default"),
            MemPolicy::Preferred => f.write_str("preferred"),
            MemPolicy::Bind => f.write_str("bind"),
            MemPolicy::Other(n) => write!(f, "mode {n}"),
        }
    }
}

/// What the kernel offers the task being set up.
pub trait Os {
    /// The node's topology as seen under `root` (normally `/`), read to `detail`.
    fn read_machine(&self, root: &Path, detail: Detail) -> Result<Machine, String>;
    /// The node as the step sees it: the [`Detail::Placement`] machine under `root`, the
    /// built-in profiles plus `profiles_dir`'s (trust-checked for `owner`) and the
    /// detection over both. The live node's may come from its copy (`node_view.rs`);
    /// fakes read afresh.
    fn step_view(
        &self,
        root: &Path,
        profiles_dir: &Path,
        owner: u32,
        _copies: &Copies,
    ) -> Result<NodeView, ViewError> {
        crate::node_view::read_afresh(
            || self.read_machine(root, Detail::Placement),
            || crate::fabric_env::load_profiles(profiles_dir, owner),
        )
    }
    /// Add the PCIe link attributes a [`Detail::Placement`] read left out.
    fn read_pci_links(&self, root: &Path, machine: &mut Machine) -> Result<(), String>;
    /// NUMA nodes the running kernel has (always the live /sys, never a replayed root).
    fn online_numa_nodes(&self) -> Result<Vec<u32>, String>;
    fn set_cpu_affinity(&self, cpus: &CpuSet) -> Result<(), String>;
    fn cpu_affinity(&self) -> Result<CpuSet, String>;
    fn set_mempolicy(&self, policy: MemPolicy, nodes: &[u32]) -> Result<(), String>;
    fn mempolicy(&self) -> Result<(MemPolicy, Vec<u32>), String>;
    /// One line on the task's own stderr (the user's output stream).
    fn task_stderr(&self, line: &str);
    /// gres.conf at `path`, trust-checked for `owner` and opened without blocking
    /// (`Ok(None)`: no such file); Err is one line naming the file and line.
    fn read_gres_conf(&self, path: &Path, owner: u32) -> Result<Option<GresConf>, String>;
    /// The cluster's topology file at `path` (topology.yaml or topology.conf), trust-checked
    /// like gres.conf (`Ok(None)`: no such file); Err is one line naming the file.
    fn read_slurm_topology(&self, path: &Path, owner: u32)
    -> Result<Option<Vec<Topology>>, String>;
    /// slurm.conf at `path` with its includes, trust-checked like gres.conf (`Ok(None)`:
    /// no such file): the partitions' `Topology=`.
    fn read_slurm_conf(&self, path: &Path, owner: u32) -> Result<Option<SlurmConf>, String>;
    /// slurmd's own `SLURM_CONF` (this process's environment, root's: slurmd sets it for
    /// itself and the slurmstepds it forks), where gres.conf sits next to slurm.conf.
    fn slurmd_conf(&self) -> Option<PathBuf>;
    /// This node's name as gres.conf's `NodeName=` means it (the short hostname).
    fn node_name(&self) -> Option<String>;
    /// cgroup.conf at `path` says `ConstrainDevices=yes` (trust-checked; no file: no).
    fn constrain_devices(&self, path: &Path, owner: u32) -> Result<bool, String>;
    /// This process's own arguments (srun's, in local context), bounded; empty when they
    /// cannot be read.
    fn own_args(&self) -> Vec<String>;
    /// The /dev/nvidiaN minor number of a device file gres.conf lists.
    fn device_minor(&self, path: &str) -> Option<u32>;
}
