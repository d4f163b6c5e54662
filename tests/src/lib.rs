//! Real-Slurm test harness for gpu-affinity.
//!
//! [`ClusterBuilder`] starts a throwaway one-node cluster on this machine (private
//! munged, slurmctld and slurmd in a temp dir, fake GPU device nodes, a sysfs fixture
//! for the node's topology, gpu_affinity.so on the plugstack); [`Cluster`] runs srun and
//! sbatch against it and stops everything by PID when dropped. The integration tests in
//! `tests/` and the `demo-cluster` and `bench-launch` binaries are built on it.
//!
//! Requirements: root, and Debian's `slurmctld slurmd slurm-client munge` packages.
//! A missing one fails with what to install; set `GPU_AFFINITY_SKIP_SLURM_TESTS=1` to
//! skip the real-Slurm tests on a development machine instead.

pub mod bench_stats;
pub mod cluster;
pub mod conf;
pub mod daemon;
pub mod error;
pub mod fixture;
pub mod lock;
pub mod plugin;
pub mod ports;
pub mod prereq;
pub mod report;
pub mod series;

pub use cluster::{BatchJob, ClientOptions, Cluster, ClusterBuilder, HealthSetup};
pub use conf::{GresLine, GresNode, NodeShape, TaskPlugin};
pub use error::{HarnessError, Result};
pub use plugin::Variant;
pub use report::{StepOutput, TaskReport};
pub use series::SlurmSeries;
