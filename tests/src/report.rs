//! What each task of a step saw, printed by a small shell probe inside the task and
//! parsed back here.
//!
//! The probe reads everything from the task's own process: `Cpus_allowed_list` from
//! /proc/self/status (the mask actually applied), the task memory policy from the first
//! line of /proc/self/numa_maps (the policy column shows the process policy for mappings
//! without their own), and the environment the job will run with.

use std::collections::BTreeMap;
use std::process::ExitStatus;

use crate::error::Result;
use crate::harness_err;

/// Shell run inside every task (as `sh -c PROBE`). Each line is `key=value`; srun's
/// `-l` prefixes it with the task's global rank. Every program it runs inherits the
/// task's CPU mask and memory policy, so reading its own /proc/self is reading the task's.
pub const PROBE: &str = r#"echo "user=$(id -un)"
echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
echo "mempolicy=$(awk 'NR==1 {print $2}' /proc/self/numa_maps)"
env | grep -E '^(GPU_AFFINITY_[A-Z_]*|CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER|UCX_NET_DEVICES|SLURM_PROCID|SLURM_LOCALID|SLURM_STEP_GPUS|SLURM_JOB_GPUS)=' | sed 's/^/env:/'
for f in ${GA_DEV_DIR:-/nonexistent}/nvidia*; do
  [ -e "$f" ] || continue
  m=$( (exec 3<"$f") 2>&1 )
  case "$m" in
    "") r=OK ;;
    *"No such device"*) r=ENXIO ;;
    *"not permitted"*) r=EPERM ;;
    *) r=OTHER ;;
  esac
  echo "dev:${f##*/nvidia}=$r"
done
true"#;

/// One task's view of itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskReport {
    /// Global rank (srun's `-l` label).
    pub rank: u32,
    pub user: String,
    /// `Cpus_allowed_list` of the task, e.g. "0" or "0-1".
    pub cpus: String,
    /// Policy column of numa_maps: "default", "bind:0", "preferred:1", "interleave:0-1".
    pub mempolicy: String,
    /// The selected environment variables the task saw.
    pub env: BTreeMap<String, String>,
    /// Fake GPU device minor -> how opening it ended: `ENXIO` (allowed, no driver),
    /// `EPERM` (withheld by device confinement), `OK` or `OTHER`.
    pub devices: BTreeMap<u32, String>,
}

impl TaskReport {
    pub fn env(&self, key: &str) -> Option<&str> {
        self.env.get(key).map(String::as_str)
    }

    /// The fake GPU minors this task may open (ENXIO: the cgroup let it through).
    pub fn openable_devices(&self) -> Vec<u32> {
        self.devices
            .iter()
            .filter(|(_, r)| r.as_str() == "ENXIO")
            .map(|(m, _)| *m)
            .collect()
    }

    /// Every `GPU_AFFINITY_*` variable, for "the plugin did nothing" checks.
    pub fn gpu_affinity_env(&self) -> BTreeMap<&str, &str> {
        self.env
            .iter()
            .filter(|(k, _)| k.starts_with("GPU_AFFINITY_"))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

/// A client command's result (srun, sbatch, ...).
#[derive(Debug, Clone)]
pub struct StepOutput {
    /// The command line, for assertion messages.
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl StepOutput {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// True when `timeout` had to stop the client.
    pub fn timed_out(&self) -> bool {
        matches!(self.code(), Some(124 | 137))
    }

    /// Fail unless the command exited 0; the error carries both streams.
    pub fn ok(self) -> Result<Self> {
        if self.success() {
            Ok(self)
        } else {
            Err(harness_err!("{self}"))
        }
    }

    /// Parse probe output labelled by `srun -l` into one report per rank.
    pub fn tasks(&self) -> Result<BTreeMap<u32, TaskReport>> {
        parse_probe(&self.stdout)
    }
}

impl std::fmt::Display for StepOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` exited {}{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command,
            self.status,
            if self.timed_out() { " (timed out)" } else { "" },
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

/// Parse `RANK: key=value` lines (from `srun -l ... sh -c PROBE`).
pub fn parse_probe(stdout: &str) -> Result<BTreeMap<u32, TaskReport>> {
    let mut out: BTreeMap<u32, TaskReport> = BTreeMap::new();
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let (label, rest) = line
            .split_once(": ")
            .ok_or_else(|| harness_err!("probe line without an srun -l label: {line:?}"))?;
        let rank: u32 = label
            .trim()
            .parse()
            .map_err(|_| harness_err!("probe line with a bad rank label: {line:?}"))?;
        let task = out.entry(rank).or_insert_with(|| TaskReport {
            rank,
            ..TaskReport::default()
        });
        if let Some(kv) = rest.strip_prefix("env:") {
            if let Some((k, v)) = kv.split_once('=') {
                task.env.insert(k.to_owned(), v.to_owned());
            }
        } else if let Some(kv) = rest.strip_prefix("dev:") {
            if let Some((minor, result)) = kv.split_once('=')
                && let Ok(minor) = minor.parse()
            {
                task.devices.insert(minor, result.to_owned());
            }
        } else if let Some(v) = rest.strip_prefix("user=") {
            task.user = v.to_owned();
        } else if let Some(v) = rest.strip_prefix("cpus=") {
            task.cpus = v.to_owned();
        } else if let Some(v) = rest.strip_prefix("mempolicy=") {
            task.mempolicy = v.to_owned();
        }
        // Anything else is the job's own output; the probe's keys are all we read.
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_labelled_probe_lines() {
        let text = "0: user=root\n1: user=nobody\n0: cpus=0\n1: cpus=1\n0: mempolicy=bind:0\n\
                    0: env:GPU_AFFINITY_GPUS=0001:00:00.0\n0: env:UCX_NET_DEVICES=mlx5_0:1\n\
                    0: dev:5=ENXIO\n0: dev:4=EPERM\n";
        let tasks = parse_probe(text).expect("parse");
        assert_eq!(tasks.len(), 2);
        assert_eq!(tasks[&0].cpus, "0");
        assert_eq!(tasks[&0].mempolicy, "bind:0");
        assert_eq!(tasks[&1].user, "nobody");
        assert_eq!(tasks[&0].env("UCX_NET_DEVICES"), Some("mlx5_0:1"));
        assert_eq!(tasks[&0].gpu_affinity_env().len(), 1);
        assert_eq!(tasks[&0].openable_devices(), vec![5]);
        assert_eq!(tasks[&0].devices[&4], "EPERM");
    }

    #[test]
    fn rejects_unlabelled_lines() {
        assert!(parse_probe("cpus=0\n").is_err());
    }
}
