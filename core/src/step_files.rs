//! Where the plugin keeps a step's files under its run directory: one name, used by the
//! plugin (which writes them) and by `gpu-affinity explain` (which shows the path).

use std::fmt::Display;
use std::path::{Path, PathBuf};

/// The generated NCCL topology file's name inside the step directory.
pub const TOPOLOGY_FILE: &str = "nccl-topo.xml";

/// `job<JOBID>.<STEPID>.<PID>`: the slurmstepd pid keeps two slurmds on one machine
/// (`slurmd -N`, which share /run) from sharing a step directory. Generic so explain can
/// name the parts it does not know (`<JOBID>`).
pub fn step_dir_name(job: impl Display, step: impl Display, stepd_pid: impl Display) -> String {
    format!("job{job}.{step}.{stepd_pid}")
}

/// The generated NCCL topology file of a step, under `run_dir`.
pub fn topology_path(
    run_dir: &Path,
    job: impl Display,
    step: impl Display,
    stepd_pid: impl Display,
) -> PathBuf {
    run_dir
        .join(step_dir_name(job, step, stepd_pid))
        .join(TOPOLOGY_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(step_dir_name(42, 0, 7), "job42.0.7");
        assert_eq!(
            topology_path(
                Path::new("/run/gpu-affinity"),
                "<JOBID>",
                "<STEPID>",
                "<PID>"
            ),
            Path::new("/run/gpu-affinity/job<JOBID>.<STEPID>.<PID>/nccl-topo.xml")
        );
    }
}
