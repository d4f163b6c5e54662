//! Slurm `Epilog=`: the job's GPUs after the job (XIDs and ECC errors that appeared during it,
//! with the full GPU checks), same drain rules as the prolog; removes the job's dcgm mapping.

// No FFI here: unsafe code stays in the modules that call C.
#![deny(unsafe_code)]

fn main() {
    gpu_affinity_node::run::main(gpu_affinity_node::run::Program::Epilog)
}
