//! Slurm `Epilog=`: the job's GPUs after the job (XIDs and ECC errors that appeared during it,
//! with the full GPU checks), same drain rules as the prolog; removes the job's dcgm mapping.
fn main() {
    gpu_affinity_node::run::main(gpu_affinity_node::run::Program::Epilog)
}
