//! What monitoring sees: a node_exporter textfile (written atomically) and the dcgm-exporter
//! HPC job mapping (one file per GPU index naming the job on it).

use gpu_affinity::health::{Report, Status};
use gpu_affinity::safe_dir::SafeDir;

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

/// Add the job to `DIR/<gpu id>` for each of the job's GPUs: dcgm-exporter's
/// `--hpc-job-mapping-dir` format, as its hpcMapper reads it (hpc.go): a file per GPU
/// named by the decimal DCGM GPU id ([`crate::run::dcgm_gpu_ids`]), every line of it one
/// job on that GPU (jobs sharing a GPU: one line each; a blank line would become an empty
/// label, so none is written). Each file is rewritten whole and renamed into place, and
/// the caller holds the run lock, so two jobs' prologs cannot lose each other's line.
pub fn map_jobs(dir: &SafeDir, gpus: &[u32], job: &str) -> Result<(), String> {
    for gpu in gpus {
        let mut jobs = jobs_on(dir, *gpu)?;
        if !jobs.iter().any(|j| j == job) {
            jobs.push(job.to_string());
        }
        write_jobs(dir, *gpu, &jobs)?;
    }
    Ok(())
}

/// Take the job's line out of its GPUs' files; a file left with no job is removed, so
/// dcgm-exporter stops labelling that GPU.
pub fn unmap_jobs(dir: &SafeDir, gpus: &[u32], job: &str) -> Result<(), String> {
    for gpu in gpus {
        let jobs = jobs_on(dir, *gpu)?;
        if !jobs.iter().any(|j| j == job) {
            continue;
        }
        let rest: Vec<String> = jobs.into_iter().filter(|j| j != job).collect();
        write_jobs(dir, *gpu, &rest)?;
    }
    Ok(())
}

/// A GPU's mapping file: a few job ids (GPU sharing puts tens on one GPU, not thousands).
const MAX_MAPPING_BYTES: u64 = 64 << 10;

/// The jobs a GPU's mapping file lists (none when there is no file).
fn jobs_on(dir: &SafeDir, gpu: u32) -> Result<Vec<String>, String> {
    let bytes = dir.read(&gpu.to_string(), MAX_MAPPING_BYTES)?;
    Ok(String::from_utf8_lossy(&bytes.unwrap_or_default())
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// Files are named, read, replaced and removed through the mapping dir's handle (walked
/// and trust-checked by the caller), never by path: a symlink planted at `0..7` is
/// replaced, not followed.
fn write_jobs(dir: &SafeDir, gpu: u32, jobs: &[String]) -> Result<(), String> {
    let name = gpu.to_string();
    if jobs.is_empty() {
        return dir.remove(&name);
    }
    let text: String = jobs.iter().map(|j| format!("{j}\n")).collect();
    dir.replace(&name, text.as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_sharing_a_gpu_get_a_line_each_and_leave_only_their_own() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let read = |gpu: u32| std::fs::read_to_string(tmp.path().join(gpu.to_string()));
        let dir = gpu_affinity::safe_dir::open(
            tmp.path(),
            "mapping dir",
            gpu_affinity::safe_dir::Rule::Trusted,
            crate::state::owner(),
            None,
        )
        .expect("trusted");
        let dir = &dir;
        map_jobs(dir, &[0, 3], "101").expect("map 101");
        map_jobs(dir, &[3], "102").expect("map 102");
        map_jobs(dir, &[3], "102").expect("a rerun adds nothing");
        assert_eq!(read(0).expect("gpu 0"), "101\n");
        assert_eq!(read(3).expect("gpu 3"), "101\n102\n");
        unmap_jobs(dir, &[0, 3], "101").expect("unmap 101");
        assert!(read(0).is_err(), "gpu 0 had only job 101: file removed");
        assert_eq!(read(3).expect("gpu 3"), "102\n");
        unmap_jobs(dir, &[3], "999").expect("not there: nothing changes");
        assert_eq!(read(3).expect("gpu 3"), "102\n");
        unmap_jobs(dir, &[3], "102").expect("unmap 102");
        assert!(read(3).is_err());
        let names: Vec<_> = std::fs::read_dir(tmp.path()).expect("dir").collect();
        assert!(names.is_empty(), "no temp files left: {names:?}");
    }
}
