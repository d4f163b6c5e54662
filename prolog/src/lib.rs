//! gpu-affinity node health front end: the readers (sysfs, kernel log, mounts, NVML), the
//! bounded runner, the Slurm client seam, root-owned state, and [`run::main`], which the
//! prolog, epilog and health binaries share. Decisions are core's (`gpu_affinity::health`).

pub mod active;
pub mod bounded;
pub mod metrics;
pub mod nvml;
pub mod readers;
pub mod run;
pub mod slurm;
pub mod state;
pub mod version;
