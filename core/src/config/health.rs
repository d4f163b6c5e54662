//! The health programs' tables (gpu-affinity-prolog, -epilog and -health): `[gpu]`,
//! `[nvml]`, `[storage]`, `[active]`, `[counters]`, `[drain]` and `[slurm]` (examples; the defaults are
//! in packaging/config.toml, checked by `sample_config`'s tests):
//!
//! ```toml
//! [gpu]
//! expected = 8                  # GPUs this node must show (unset: compare PCI, NVML, gres only)
//! nvml = true                   # false: skip NVML-based checks, keep sysfs and kernel-log ones
//! persistence = true            # unset: not checked
//! driver = "550.54.15"          # unset: not checked
//! leftover_memory_mib = 1024    # epilog: MiB a GPU may hold with no process left (warn above)
//!
//! [nvml]
//! library = "libnvidia-ml.so.1" # loaded at run time: an absolute path, or a file name
//!                               # the dynamic loader finds
//!
//! [[storage.mount]]
//! path = "/fsx"
//! type = "lustre"               # unset: any type
//! write = false                 # true: a create + remove probe
//!
//! [storage]
//! checkpoint_dir = "/fsx/checkpoints"  # unset: no bandwidth probe
//! checkpoint_floor_mbps = 500   # health pass: drain below this write rate (MB/s)
//! checkpoint_probe_mib = 16     # the probe file, written + fsynced + removed (1..=1024)
//!
//! [active]
//! dcgmi = "/usr/bin/dcgmi"      # dcgmi diag -r dcgm_diag_level
//! dcgm_diag_level = 2           # 0 (default): off; 1-4: DCGM's suites
//! all_reduce_perf = "/opt/nccl-tests/build/all_reduce_perf"
//! all_reduce_floor_gbps = 350   # unset: report only
//! in_prolog = false             # true: the prolog runs them before every job too
//! timeout_s = 300               # each test's hard bound (1-3600)
//!
//! [drain]
//! max_share = 0.1               # circuit breaker: share of the partition already drained
//! resume_after = 3              # clean health passes before the suite resumes its own drain
//! handoff = "drain"             # drain | hyperpod | slurm-gcp | azure | oci
//!
//! [slurm]
//! bin_dir = "/usr/bin"          # where scontrol and sinfo are (unset: the usual prefixes)
//! conf = "/etc/slurm/slurm.conf" # SLURM_CONF for sinfo/scontrol (unset: the environment's;
//!                               # slurmd gives HealthCheckProgram none)
//! gres_conf = "/etc/slurm/gres.conf" # numbers SLURM_JOB_GPUS (unset: next to slurm.conf)
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use super::value::{
    Problem, abs_dir, abs_path, after_key, count, in_range, is_invalid, library, number, rate, word,
};
use crate::health::STORAGE_BOUND_MS;
use crate::health::counters::Limits;
use crate::health::drain::Handoff;

/// `[gpu]`: what every GPU of the node must show.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuConfig {
    /// GPUs this node must show; unset: PCI, NVML and gres.conf compared with each other.
    #[serde(default, deserialize_with = "count")]
    pub expected: Option<u32>,
    /// False: skip NVML-based checks; unset: true.
    pub nvml: Option<bool>,
    /// Persistence mode every GPU must have; unset: not checked.
    pub persistence: Option<bool>,
    /// The NVIDIA driver version every node must run; unset: not checked.
    pub driver: Option<String>,
    /// Epilog: MiB a GPU may hold with no process left; unset: core's
    /// `health::DEFAULT_LEFTOVER_MEMORY_MIB`.
    #[serde(default, deserialize_with = "count")]
    pub leftover_memory_mib: Option<u32>,
}

/// `[nvml]`: where NVML is loaded from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmlConfig {
    /// An absolute path, or a file name the dynamic loader finds; unset: the node
    /// programs' default (`libnvidia-ml.so.1`).
    #[serde(default, deserialize_with = "library")]
    pub library: Option<PathBuf>,
}

/// `[storage]`: the mounts a node must have and the checkpoint directory's probe.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// `[[storage.mount]]`, one table each; none by default.
    #[serde(default)]
    pub mount: Vec<MountConfig>,
    /// Where the health program probes the write rate; unset: no probe.
    #[serde(default, deserialize_with = "abs_dir")]
    pub checkpoint_dir: Option<PathBuf>,
    /// MB/s the health pass drains below; unset: report only. Needs checkpoint_dir.
    #[serde(default, deserialize_with = "rate")]
    pub checkpoint_floor_mbps: Option<f64>,
    /// The probe file's size (1 to [`MAX_CHECKPOINT_PROBE_MIB`]); unset:
    /// [`DEFAULT_CHECKPOINT_PROBE_MIB`]. Needs checkpoint_dir.
    #[serde(default, deserialize_with = "probe_mib")]
    pub checkpoint_probe_mib: Option<u32>,
}

/// `[storage] checkpoint_probe_mib` unset: big enough to pass the page cache's write-back
/// start, small enough to cost well under the storage bound on a healthy mount.
pub const DEFAULT_CHECKPOINT_PROBE_MIB: u32 = 16;
/// The probe never writes more than this (a typo must not fill a filesystem).
pub const MAX_CHECKPOINT_PROBE_MIB: u32 = 1024;

fn probe_mib<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    in_range(d, 1, i64::from(MAX_CHECKPOINT_PROBE_MIB)).map(Some)
}

/// The checkpoint directory's write-bandwidth probe, as `[storage]` sets it.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointConfig {
    pub dir: PathBuf,
    /// MB/s; `None`: measured and reported, never drains (a probe that fails only warns).
    pub floor_mbps: Option<f64>,
    pub probe_mib: u32,
}

impl StorageConfig {
    /// The probe, when `checkpoint_dir` is set.
    pub fn checkpoint(&self) -> Option<CheckpointConfig> {
        Some(CheckpointConfig {
            dir: self.checkpoint_dir.clone()?,
            floor_mbps: self.checkpoint_floor_mbps,
            probe_mib: self
                .checkpoint_probe_mib
                .unwrap_or(DEFAULT_CHECKPOINT_PROBE_MIB),
        })
    }

    /// A floor or a size without a directory is a mistake, said as one; so is a probe
    /// that cannot finish within the bound at the floor rate (it would time out, and
    /// drain, on a mount that meets the floor).
    pub(super) fn validate(&self) -> Result<(), Problem> {
        let at = |key: &str, message: String| Err(Problem::at("storage", key, None, message));
        let Some(probe) = self.checkpoint() else {
            let stray = [
                self.checkpoint_floor_mbps.map(|_| "checkpoint_floor_mbps"),
                self.checkpoint_probe_mib.map(|_| "checkpoint_probe_mib"),
            ];
            return match stray.into_iter().flatten().next() {
                Some(key) => at(
                    key,
                    format!("[storage] {key} needs [storage] checkpoint_dir"),
                ),
                None => Ok(()),
            };
        };
        if let Some(floor) = probe.floor_mbps {
            let bound_s = STORAGE_BOUND_MS as f64 / 1000.0;
            let fits_mib = (floor * 1e6 * bound_s / f64::from(1u32 << 20)).floor();
            if f64::from(probe.probe_mib) > fits_mib {
                let key = match self.checkpoint_probe_mib {
                    Some(_) => "checkpoint_probe_mib",
                    None => "checkpoint_floor_mbps",
                };
                return at(
                    key,
                    format!(
                        "[storage] checkpoint_probe_mib = {} cannot finish within the {STORAGE_BOUND_MS} ms bound at checkpoint_floor_mbps = {floor}: expected at most {fits_mib} MiB",
                        probe.probe_mib
                    ),
                );
            }
        }
        Ok(())
    }
}

/// One `[[storage.mount]]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    /// Absolute.
    #[serde(deserialize_with = "mount_path")]
    pub path: String,
    /// The filesystem type; unset: any type.
    #[serde(default, rename = "type")]
    pub fstype: Option<String>,
    /// True: a create + remove probe.
    #[serde(default)]
    pub write: bool,
}

fn mount_path<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let path = String::deserialize(d)?;
    if path.starts_with('/') {
        Ok(path)
    } else {
        Err(after_key(is_invalid(
            format_args!("'{path}'"),
            "an absolute path",
        )))
    }
}

/// `[active]`: opt-in active tests, run by the health program on an idle node and by the
/// prolog only with `in_prolog = true`, each under `timeout_s`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActiveConfig {
    /// `dcgmi`'s absolute path (checked root-owned when run).
    #[serde(default, deserialize_with = "abs_path")]
    pub dcgmi: Option<PathBuf>,
    /// `dcgmi diag -r LEVEL`: 0 (default) is off, 1-4 DCGM's suites.
    #[serde(default, deserialize_with = "diag_level")]
    pub dcgm_diag_level: u8,
    /// nccl-tests' `all_reduce_perf`, absolute (checked root-owned when run).
    #[serde(default, deserialize_with = "abs_path")]
    pub all_reduce_perf: Option<PathBuf>,
    /// GB/s; `None`: measured and reported, drains only on wrong values.
    #[serde(default, deserialize_with = "bandwidth")]
    pub all_reduce_floor_gbps: Option<f64>,
    /// The prolog runs them too (before every job: they cost the job's start time).
    #[serde(default)]
    pub in_prolog: bool,
    /// Each test's hard bound, seconds (1 to [`MAX_ACTIVE_TIMEOUT_S`]); `None`:
    /// [`DEFAULT_ACTIVE_TIMEOUT_S`].
    #[serde(default, deserialize_with = "timeout_s")]
    pub timeout_s: Option<u32>,
}

/// `[active] timeout_s` unset: core's `ACTIVE_BOUND_MS`.
pub const DEFAULT_ACTIVE_TIMEOUT_S: u32 = (crate::health::ACTIVE_BOUND_MS / 1000) as u32;
/// `[active] timeout_s` at most: an hour (DCGM's level 4 runs about that).
pub const MAX_ACTIVE_TIMEOUT_S: u32 = 3600;

fn diag_level<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    in_range(d, 0, 4)
}

fn bandwidth<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(
        d,
        |f| f.is_finite() && f > 0.0,
        "a bandwidth above 0 (GB/s)",
    )
}

fn timeout_s<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    in_range(d, 1, i64::from(MAX_ACTIVE_TIMEOUT_S)).map(Some)
}

impl ActiveConfig {
    /// A level without `dcgmi`, or a floor without `all_reduce_perf`, is a mistake.
    pub(super) fn validate(&self) -> Result<(), Problem> {
        let at = |key: &str, message: &str| Err(Problem::at("active", key, None, message.into()));
        if self.dcgm_diag_level > 0 && self.dcgmi.is_none() {
            return at(
                "dcgm_diag_level",
                "[active] dcgm_diag_level needs [active] dcgmi",
            );
        }
        if self.all_reduce_floor_gbps.is_some() && self.all_reduce_perf.is_none() {
            return at(
                "all_reduce_floor_gbps",
                "[active] all_reduce_floor_gbps needs [active] all_reduce_perf",
            );
        }
        Ok(())
    }
}

/// `[drain]`: how the suite drains and resumes nodes. Unset keys: core's
/// `health::drain::DrainPolicy::default()`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainConfig {
    /// Circuit breaker: the share of the partition already drained.
    #[serde(default, deserialize_with = "fraction")]
    pub max_share: Option<f64>,
    /// Clean health passes before the suite resumes its own drain.
    #[serde(default, deserialize_with = "count")]
    pub resume_after: Option<u32>,
    /// drain | hyperpod | slurm-gcp | azure | oci.
    #[serde(default, deserialize_with = "handoff")]
    pub handoff: Option<Handoff>,
}

fn fraction<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(
        d,
        |share| (0.0..=1.0).contains(&share),
        "a fraction from 0 to 1",
    )
}

fn handoff<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Handoff>, D::Error> {
    word(
        d,
        Handoff::parse,
        "drain, hyperpod, slurm-gcp, azure or oci",
    )
}

/// `[counters]`: the error counters' window and thresholds. Unset keys: core's
/// `health::counters::Limits::default()`, each default from a peer tool (DCGM, AzNHC,
/// NVIDIA's RMA policy, ibutils; see core/src/health/counters.rs).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountersConfig {
    /// Seconds rises and rates are taken over; a fault holds a node for this long.
    #[serde(default, deserialize_with = "window")]
    pub window_s: Option<u32>,
    /// NVLink CRC errors per second at which a link fails.
    #[serde(default, deserialize_with = "rate")]
    pub nvlink_crc_per_s: Option<f64>,
    /// Correctable SRAM ECC errors above which the GPU drains.
    #[serde(default, deserialize_with = "count")]
    pub sram_corrected_max: Option<u32>,
    /// DRAM ECC errors (corrected or not) above which the GPU drains.
    #[serde(default, deserialize_with = "count")]
    pub dram_errors_max: Option<u32>,
    /// Uncorrectable remapped rows at which the GPU is worn out.
    #[serde(default, deserialize_with = "count")]
    pub remapped_uncorrectable_max: Option<u32>,
    /// Retired pages at which the GPU is worn out.
    #[serde(default, deserialize_with = "count")]
    pub retired_pages_max: Option<u32>,
    /// Rises of a fabric port's symbol_error / link_error_recovery in the window that warn.
    #[serde(default, deserialize_with = "count")]
    pub symbol_error_rise: Option<u32>,
    #[serde(default, deserialize_with = "count")]
    pub link_error_recovery_rise: Option<u32>,
}

impl CountersConfig {
    /// The limits the checks apply: each key set here, else its default.
    pub fn limits(&self) -> Limits {
        let d = Limits::default();
        let or = |v: Option<u32>, default: u64| v.map_or(default, u64::from);
        Limits {
            window_s: or(self.window_s, d.window_s),
            nvlink_crc_per_s: self.nvlink_crc_per_s.unwrap_or(d.nvlink_crc_per_s),
            sram_corrected_max: or(self.sram_corrected_max, d.sram_corrected_max),
            dram_errors_max: or(self.dram_errors_max, d.dram_errors_max),
            remapped_uncorrectable_max: self
                .remapped_uncorrectable_max
                .unwrap_or(d.remapped_uncorrectable_max),
            retired_pages_max: or(self.retired_pages_max, d.retired_pages_max),
            symbol_error_rise: or(self.symbol_error_rise, d.symbol_error_rise),
            link_error_recovery_rise: or(self.link_error_recovery_rise, d.link_error_recovery_rise),
            ..d
        }
    }
}

/// A window of 1 minute to 1 week: shorter than a pass apart judges nothing; longer
/// outlives what the history keeps.
fn window<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    in_range(d, 60, 7 * 24 * 3600).map(Some)
}

/// `[slurm]`: how the health programs reach Slurm's clients and gres.conf.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    /// Where scontrol and sinfo are; unset: the usual prefixes.
    #[serde(default, deserialize_with = "abs_dir")]
    pub bin_dir: Option<PathBuf>,
    /// slurm.conf for the clients (`SLURM_CONF`); unset: the environment's.
    #[serde(default, deserialize_with = "abs_path")]
    pub conf: Option<PathBuf>,
    /// The gres.conf slurmd reads, for Slurm's GPU ids; unset: next to slurm.conf.
    #[serde(default, deserialize_with = "abs_path")]
    pub gres_conf: Option<PathBuf>,
}
