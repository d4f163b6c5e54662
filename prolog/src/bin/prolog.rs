//! Slurm `Prolog=`: the fast checks, scoped to the job's GPUs; a drain verdict sets the
//! suite's reason and exits non-zero so the job does not start here.

// No FFI here: unsafe code stays in the modules that call C.
#![deny(unsafe_code)]

fn main() {
    gpu_affinity_node::run::main(gpu_affinity_node::run::Program::Prolog)
}
