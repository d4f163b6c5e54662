//! What monitoring sees: a node_exporter textfile (written atomically) and the dcgm-exporter
//! HPC job mapping (one file per GPU index naming the job on it).

use std::path::Path;

use gpu_affinity::health::{Report, Status};

/// `gpu_affinity_check_status{check,tier}`: 1 pass, 0 fail, -1 timeout; skipped checks absent.
pub fn textfile(report: &Report, pass_seconds: f64, now_unix: u64, held_back: u64) -> String {
    let mut out = String::from(
        "# HELP gpu_affinity_check_status Health check result: 1 pass, 0 fail, -1 timeout.\n\
         # TYPE gpu_affinity_check_status gauge\n",
    );
    for c in &report.checks {
        let v = match c.status {
            Status::Pass => 1,
            Status::Fail => 0,
            Status::Timeout => -1,
            Status::Skip => continue,
        };
        out.push_str(&format!(
            "gpu_affinity_check_status{{check=\"{}\",tier=\"{}\"}} {v}\n",
            c.id,
            c.tier.as_str()
        ));
    }
    out.push_str(&format!(
        "# HELP gpu_affinity_last_pass_timestamp_seconds End of the last full health pass.\n\
         # TYPE gpu_affinity_last_pass_timestamp_seconds gauge\n\
         gpu_affinity_last_pass_timestamp_seconds {now_unix}\n\
         # HELP gpu_affinity_last_pass_duration_seconds Duration of the last full health pass.\n\
         # TYPE gpu_affinity_last_pass_duration_seconds gauge\n\
         gpu_affinity_last_pass_duration_seconds {pass_seconds:.3}\n\
         # HELP gpu_affinity_drains_held_back_total Drains the fleet circuit breaker held back.\n\
         # TYPE gpu_affinity_drains_held_back_total counter\n\
         gpu_affinity_drains_held_back_total {held_back}\n"
    ));
    out
}

/// Write the job id into `DIR/<gpu id>` for each of the job's GPUs: dcgm-exporter's
/// `--hpc-job-mapping-dir` format, as its hpcMapper reads it (hpc.go): a file per GPU
/// named by the decimal DCGM GPU id ([`crate::run::dcgm_gpu_ids`]), every line of it one
/// job label (a blank line would become an empty label, so none is written).
pub fn map_jobs(dir: &Path, gpus: &[u32], job: &str) -> Result<(), String> {
    for gpu in gpus {
        crate::state::write_atomic(
            &dir.join(gpu.to_string()),
            format!("{job}\n").as_bytes(),
            0o644,
        )?;
    }
    Ok(())
}

/// Remove the job's mapping files (only those that still name this job).
pub fn unmap_jobs(dir: &Path, gpus: &[u32], job: &str) {
    for gpu in gpus {
        let path = dir.join(gpu.to_string());
        if std::fs::read_to_string(&path).is_ok_and(|t| t.lines().any(|l| l.trim() == job)) {
            let _ = std::fs::remove_file(&path);
        }
    }
}
