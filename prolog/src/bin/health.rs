//! Slurm `HealthCheckProgram=`: the full pass; drains, and resumes the suite's own drains
//! after `[drain] resume_after` clean passes.

// No FFI here: unsafe code stays in the modules that call C.
#![deny(unsafe_code)]

fn main() {
    gpu_affinity_node::run::main(gpu_affinity_node::run::Program::Health)
}
