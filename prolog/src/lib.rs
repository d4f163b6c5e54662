//! gpu-affinity on the node (package gpu-affinity-node): [`run::main`], which the prolog,
//! epilog and health binaries share, and what it runs: the readers (sysfs, kernel log,
//! mounts, NVML), the bounded runner, the Slurm client seam, root-owned state, the active
//! tests' runner and the monitoring files. The admin command `gpu-affinity` uses its NVML
//! readers (`conf gres`, `conf node-facts`), bounded runner and [`version`] too. Decisions
//! are core's (`gpu_affinity::health`).

// Unsafe code only where C is called, each place marked `allow` with why: NVML (a C
// library loaded at run time), the state lock (flock(2)) and the bounded child's wait and
// kill (waitid(2), kill(2)).
#![deny(unsafe_code)]

pub mod active;
pub mod bounded;
pub mod imex;
pub mod metrics;
// NVML is a C library loaded with dlopen: its symbols and calls are unsafe by nature.
#[allow(unsafe_code)]
pub mod nvml;
pub mod readers;
pub mod report;
pub mod run;
pub mod slurm;
pub mod state;
pub mod version;
