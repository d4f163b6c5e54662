//! Slurm's own text formats and numbering rules, as pure functions over text, plus the
//! thin readers that fetch that text ([`read`]).
//!
//! - [`hostlist`]: `node[01-04],gpu7` name lists (gres.conf `NodeName=`, `File=`)
//! - [`gres_conf`]: gres.conf, parsed with line numbers
//! - [`slurm_conf`]: slurm.conf's topology plugin, partitions (`Topology=`) and includes
//! - [`srun_args`]: whether an srun asks for GPUs (its arguments and input variables)
//! - [`topology`]: topology.conf (tree, block) and topology.yaml, parse and write
//! - [`placement`]: cloud placement exports and NVLink facts -> trees and blocks
//! - [`conf_write`]: gres.conf GPU lines and plugstack.conf, written
//! - [`gpu_ids`]: how Slurm numbers a node's GPUs (gres indices) and which of them a
//!   step and each of its tasks got: the one mapping the plugin and `explain` share
//! - [`gpus_per_task`]: `SLURM_GPUS_PER_TASK`, from `--gpus-per-task=TYPE:N`
//! - [`version`]: Slurm's series, from slurm_version.h, `slurmd -V` or a plugin build

pub mod conf_write;
pub mod gpu_ids;
pub mod gpus_per_task;
pub mod gres_conf;
pub mod hostlist;
pub mod placement;
pub mod read;
pub mod slurm_conf;
pub mod srun_args;
pub mod step_span;
pub mod topology;
pub mod version;
