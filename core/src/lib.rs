//! gpu-affinity core: the pure heart of the suite.
//!
//! No unsafe, no FFI, no processes. Every input arrives as bytes or through a small
//! reader trait so every decision is testable with fixtures.
#![forbid(unsafe_code)]

// Lets the unit tests include test oracles shared with the integration tests
// (core/tests/common), which name this crate `gpu_affinity`.
#[cfg(test)]
extern crate self as gpu_affinity;

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
pub mod slurm;
pub mod solver;
pub mod sources;
pub mod step_files;
pub mod text;
pub mod trust;
