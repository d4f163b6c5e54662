//! gpu-affinity core: the pure heart of the suite.
//!
//! No unsafe, no FFI, no processes. Every input arrives as bytes or through a small
//! reader trait so every decision is testable with fixtures.
#![forbid(unsafe_code)]

// Lets the unit tests include test oracles shared with the integration tests
// (core/tests/common), which name this crate `gpu_affinity`.
#[cfg(test)]
extern crate self as gpu_affinity;

// The integration tests' shared helpers (test-support/), compiled into the unit tests from
// the same file: as a dev-dependency it would bring a second copy of this crate, whose
// types are not the unit tests' own. Each unit test uses only some of it.
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../test-support/src/lib.rs"]
pub(crate) mod test_support;

pub mod atomic;
pub mod audit;
pub mod catalog;
pub mod config;
pub mod cpuset;
pub mod fabric;
pub mod health;
pub mod matrix;
pub mod model;
pub mod numa;
pub mod pci;
pub mod plugin_env;
pub mod ranges;
pub mod safe_dir;
pub mod sample_config;
pub mod saved;
pub mod slurm;
pub mod solver;
pub mod sources;
pub mod step_files;
pub mod text;
pub mod trust;
