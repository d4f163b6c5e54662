//! Slurm `HealthCheckProgram=`: the full pass; drains, and resumes the suite's own drains
//! after `[drain] resume_after` clean passes.
fn main() {
    gpu_affinity_node::run::main(gpu_affinity_node::run::Program::Health)
}
