//! Slurm `Prolog=`: the fast checks, scoped to the job's GPUs; a drain verdict sets the
//! suite's reason and exits non-zero so the job does not start here.
fn main() {
    gpu_affinity_node::run::main(gpu_affinity_node::run::Program::Prolog)
}
