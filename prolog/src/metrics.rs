//! What monitoring sees: a node_exporter textfile (written atomically) and the dcgm-exporter
//! HPC job mapping (one file per GPU index naming the job on it).

use gpu_affinity::health::{Report, Status};
use gpu_affinity::safe_dir::SafeDir;

/// The node_exporter textfile. `gpu_affinity_check_status{check,tier}`: 1 pass, 0 fail,
/// -1 timeout (skipped checks absent); `gpu_affinity_check_state{check,tier,status}`: a
/// series per check and status, 1 for the check's status this pass, so a check that could
/// not run (skipped, timed out in an NVML hang) keeps its series. `held_back` is the
/// state dir's running count (`PassState::drains_held_back`), a counter.
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
    out.push_str(
        "# HELP gpu_affinity_check_state Health check status this pass: 1 for the check's status.\n\
         # TYPE gpu_affinity_check_state gauge\n",
    );
    let states = [
        (Status::Pass, "pass"),
        (Status::Fail, "fail"),
        (Status::Timeout, "timeout"),
        (Status::Skip, "skip"),
    ];
    for c in &report.checks {
        for (status, name) in states {
            out.push_str(&format!(
                "gpu_affinity_check_state{{check=\"{}\",tier=\"{}\",status=\"{name}\"}} {}\n",
                c.id,
                c.tier.as_str(),
                u8::from(c.status == status)
            ));
        }
    }
    out.push_str(&format!(
        "# HELP gpu_affinity_last_pass_timestamp_seconds End of the last full health pass.\n\
         # TYPE gpu_affinity_last_pass_timestamp_seconds gauge\n\
         gpu_affinity_last_pass_timestamp_seconds {now_unix}\n\
         # HELP gpu_affinity_last_pass_duration_seconds Duration of the last full health pass.\n\
         # TYPE gpu_affinity_last_pass_duration_seconds gauge\n\
         gpu_affinity_last_pass_duration_seconds {pass_seconds:.3}\n\
         # HELP gpu_affinity_drains_held_back_total Drains the fleet circuit breaker held back on this node.\n\
         # TYPE gpu_affinity_drains_held_back_total counter\n\
         gpu_affinity_drains_held_back_total {held_back}\n"
    ));
    out
}

/// Add the job to `DIR/<file>` for each of the job's mapping files: dcgm-exporter's
/// `--hpc-job-mapping-dir` format, as its hpcMapper reads it (hpc.go): a file per GPU
/// named by the decimal DCGM GPU id ([`crate::run::dcgm_gpu_ids`]), or per MIG device
/// `GPU.GI` ([`mig_files`]), every line of it one job on that GPU (jobs sharing a GPU: one
/// line each; a blank line would become an empty label, so none is written). Each file is
/// rewritten whole and renamed into place, and the caller holds the run lock, so two
/// jobs' prologs cannot lose each other's line.
pub fn map_jobs(dir: &SafeDir, files: &[String], job: &str) -> Result<(), String> {
    for file in files {
        let mut jobs = jobs_on(dir, file)?;
        if !jobs.iter().any(|j| j == job) {
            jobs.push(job.to_string());
        }
        write_jobs(dir, file, &jobs)?;
    }
    Ok(())
}

/// Take the job's line out of its files; a file left with no job is removed, so
/// dcgm-exporter stops labelling that GPU (or MIG device).
pub fn unmap_jobs(dir: &SafeDir, files: &[String], job: &str) -> Result<(), String> {
    for file in files {
        let jobs = jobs_on(dir, file)?;
        if !jobs.iter().any(|j| j == job) {
            continue;
        }
        let rest: Vec<String> = jobs.into_iter().filter(|j| j != job).collect();
        write_jobs(dir, file, &rest)?;
    }
    Ok(())
}

/// The job's mapping file names, and a line for the log where something could not be
/// read. A node without a GPU in MIG mode (or without a `layout`, NVML's) keeps the names
/// by DCGM GPU id (`gpus`, from the pass's scope). On a node with MIG, `job_gpus`
/// (`SLURM_JOB_GPUS`) counts MIG devices, not GPUs, so the names come from the layout
/// instead ([`mig_files`]).
pub fn job_files(
    gpus: Option<&[u32]>,
    layout: Option<&[Option<Vec<u32>>]>,
    job_gpus: Option<&str>,
) -> (Option<Vec<String>>, Option<String>) {
    let plain = gpus.map(|g| g.iter().map(u32::to_string).collect::<Vec<_>>());
    let Some(layout) = layout else {
        return (plain, None);
    };
    if layout.iter().all(Option::is_none) {
        return (plain, None);
    }
    let Some(env) = job_gpus.map(str::trim).filter(|e| !e.is_empty()) else {
        return (None, None);
    };
    let devices = slurm_devices(layout);
    match gpu_affinity::slurm::gpu_ids::parse_step_gpus(env, devices.len())
        .map_err(|e| format!("SLURM_JOB_GPUS: {e}"))
        .and_then(|ids| mig_files(&devices, &ids))
    {
        Ok(files) => (Some(files), None),
        Err(e) => (None, Some(format!("{e}; no MIG job mapping"))),
    }
}

/// The node's GPU devices as slurmd's AutoDetect=nvml lists them (gpu_nvml.c), which is
/// what `SLURM_JOB_GPUS` indexes: GPU by GPU in NVML index order, a GPU in MIG mode as
/// its MIG devices in MIG index order. Each as its dcgm-exporter file name: the DCGM GPU
/// id (the NVML index), and for a MIG device `.` and its GPU instance id, the key
/// dcgm-exporter (4.5.3-4.8.2 on; hpc.go) looks a MIG device's metrics up by. Older
/// releases skip names that are not integers, so a `GPU.GI` file labels nothing there
/// rather than the wrong instance.
///
/// What this cannot see: a gres.conf that lists MIG devices by hand (`MultipleFiles=
/// /dev/nvidia0,/dev/nvidia-caps/nvidia-capN,...`, AutoDetect=off) numbers them in its
/// own line order, and the GPU instance behind each nvidia-cap minor is in
/// /proc/driver/nvidia-caps/mig-minors, which is not read here: such a node gets names in
/// AutoDetect=nvml order, right only where the lines follow that order.
pub fn slurm_devices(layout: &[Option<Vec<u32>>]) -> Vec<String> {
    let mut out = Vec::new();
    for (index, gpu) in layout.iter().enumerate() {
        match gpu {
            None => out.push(index.to_string()),
            Some(instances) => out.extend(instances.iter().map(|gi| format!("{index}.{gi}"))),
        }
    }
    out
}

/// The mapping files of Slurm's device ids `ids` ([`slurm_devices`]' positions).
pub fn mig_files(devices: &[String], ids: &[u32]) -> Result<Vec<String>, String> {
    ids.iter()
        .map(|&id| {
            devices.get(id as usize).cloned().ok_or_else(|| {
                format!(
                    "SLURM_JOB_GPUS id {id}: the node lists {} GPU and MIG devices",
                    devices.len()
                )
            })
        })
        .collect()
}

/// A GPU's mapping file: a few job ids (GPU sharing puts tens on one GPU, not thousands).
const MAX_MAPPING_BYTES: u64 = 64 << 10;

/// The jobs a GPU's mapping file lists (none when there is no file).
fn jobs_on(dir: &SafeDir, file: &str) -> Result<Vec<String>, String> {
    let bytes = dir.read(file, MAX_MAPPING_BYTES)?;
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
fn write_jobs(dir: &SafeDir, file: &str, jobs: &[String]) -> Result<(), String> {
    if jobs.is_empty() {
        return dir.remove(file);
    }
    let text: String = jobs.iter().map(|j| format!("{j}\n")).collect();
    dir.replace(file, text.as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_affinity::health::{CheckId, Class, Fault, Outcome, Tier, Verdict, xid::Repair};

    fn report() -> Report {
        let check = |id: CheckId, tier: Tier, status: Status| Outcome {
            id,
            tier,
            class: Class::Drain,
            status,
            evidence: String::new(),
            code: String::new(),
            subject: None,
            fault: Fault::Other,
            repair: Repair::Reset,
        };
        Report {
            verdict: Verdict::Ok,
            checks: vec![
                check(CheckId::GpuCount, Tier::Gpu, Status::Pass),
                check(CheckId::GpuEcc, Tier::Gpu, Status::Timeout),
                check(CheckId::FabricPortState, Tier::Fabric, Status::Fail),
                check(
                    CheckId::StorageCheckpointBandwidth,
                    Tier::Storage,
                    Status::Skip,
                ),
            ],
        }
    }

    /// Every check keeps its state-set series, a skipped or timed-out one too.
    #[test]
    fn every_check_keeps_its_series() {
        let text = textfile(&report(), 0.05, 1_700_000_000, 3);
        assert!(text.contains(
            "gpu_affinity_check_state{check=\"storage.checkpoint_bandwidth\",tier=\"storage\",status=\"skip\"} 1"
        ));
        assert!(text.contains(
            "gpu_affinity_check_state{check=\"gpu.ecc\",tier=\"gpu\",status=\"timeout\"} 1"
        ));
        assert_eq!(text.matches("gpu_affinity_check_state{").count(), 16);
        assert!(text.contains("gpu_affinity_drains_held_back_total 3\n"));
    }

    /// `promtool check metrics` (Debian package `prometheus`, which scripts/setup-debian
    /// installs) accepts the textfile: names, types, help, labels, counter suffix.
    #[test]
    fn promtool_accepts_the_textfile() {
        use std::io::Write;
        let text = textfile(&report(), 0.05, 1_700_000_000, 3);
        let child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => panic!(
                "promtool not runnable ({e}): install the Debian package `prometheus` \
                 (scripts/setup-debian does), which provides /usr/bin/promtool"
            ),
        };
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write textfile to promtool");
        let out = child.wait_with_output().expect("promtool ran");
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}\n{text}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Slurm's ids on a node whose GPU 1 holds MIG devices of GPU instances 7 and 9:
    /// GPU 0, then GPU 1's MIG devices, then GPU 2; an id past them names nothing.
    #[test]
    fn mig_devices_are_named_gpu_dot_gpu_instance() {
        let layout = [None, Some(vec![7, 9]), None];
        let devices = slurm_devices(&layout);
        assert_eq!(devices, ["0", "1.7", "1.9", "2"]);
        assert_eq!(
            mig_files(&devices, &[2, 0, 3]).expect("in range"),
            ["1.9", "0", "2"]
        );
        let e = mig_files(&devices, &[4]).expect_err("past the devices");
        assert_eq!(
            e,
            "SLURM_JOB_GPUS id 4: the node lists 4 GPU and MIG devices"
        );
        assert_eq!(slurm_devices(&[None, None]), ["0", "1"], "no MIG: by GPU");
        let plain = Some(&[4u32, 5][..]);
        assert_eq!(
            job_files(plain, Some(&[None, None]), Some("0")),
            (Some(vec!["4".to_string(), "5".to_string()]), None),
            "no GPU in MIG mode: the scope's GPU ids, as before"
        );
        assert_eq!(
            job_files(plain, None, Some("0")).0,
            Some(vec!["4".into(), "5".into()])
        );
        assert_eq!(
            job_files(None, Some(&layout), Some("1-2")),
            (Some(vec!["1.7".to_string(), "1.9".to_string()]), None)
        );
        let (none, note) = job_files(None, Some(&layout), Some("9"));
        assert_eq!(none, None);
        assert!(note.is_some_and(|n| n.ends_with("; no MIG job mapping")));
    }

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
        let f = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        map_jobs(dir, &f(&["0", "3"]), "101").expect("map 101");
        map_jobs(dir, &f(&["3"]), "102").expect("map 102");
        map_jobs(dir, &f(&["3"]), "102").expect("a rerun adds nothing");
        assert_eq!(read(0).expect("gpu 0"), "101\n");
        assert_eq!(read(3).expect("gpu 3"), "101\n102\n");
        unmap_jobs(dir, &f(&["0", "3"]), "101").expect("unmap 101");
        assert!(read(0).is_err(), "gpu 0 had only job 101: file removed");
        assert_eq!(read(3).expect("gpu 3"), "102\n");
        unmap_jobs(dir, &f(&["3"]), "999").expect("not there: nothing changes");
        assert_eq!(read(3).expect("gpu 3"), "102\n");
        unmap_jobs(dir, &f(&["3"]), "102").expect("unmap 102");
        assert!(read(3).is_err());
        let names: Vec<_> = std::fs::read_dir(tmp.path()).expect("dir").collect();
        assert!(names.is_empty(), "no temp files left: {names:?}");
    }
}
