//! Slurm's GPU ids on a node, and the node's GPUs they name.
//!
//! `SLURM_STEP_GPUS` and `CUDA_VISIBLE_DEVICES` carry gres *indices*: positions in
//! slurmd's device list for the node, not /dev/nvidiaN minors (measured on 22.05 and
//! read in Slurm's gres_common.c, 22.05 to 26.05). That list is built as follows:
//!
//! - no AutoDetect: the `File=` devices of the node's `Name=gpu` lines in gres.conf
//!   order ([`super::gres_conf::GresConf::node_gpus`]);
//! - `AutoDetect=nvml`: the GPUs NVML finds, sorted by NVML index, which is PCI bus
//!   order (a configured `File=` only selects which ones are kept; a configured device
//!   NVML does not see sorts after them, by file name);
//! - `AutoDetect=nvidia` (24.11+): the GPUs /proc/driver/nvidia lists, sorted by device
//!   file name (natural order: minor order).
//!
//! [`SlurmGpus::number`] is the one function that turns that into "id i is the GPU at
//! PCI address A"; the plugin and `gpu-affinity explain --gpus` both use it.
//! [`parse_step_gpus`] reads a `SLURM_STEP_GPUS` value with bounds, and [`task_gpus`]
//! says which of the step's GPUs Slurm gives one task under `--gpus-per-task` /
//! `--gpu-bind`.

use std::cmp::Ordering;

use super::gres_conf::{AutoDetect, NodeGpus};
use crate::model::Machine;
use crate::pci::PciAddr;
use crate::ranges::{self, Limits};

/// The longest `SLURM_STEP_GPUS` read: Slurm writes at most a few characters per GPU.
pub const MAX_STEP_GPUS_BYTES: usize = 4096;

/// Why a `SLURM_STEP_GPUS` value was refused. Never carries the value itself: it may be
/// a user's (on a cluster without gres gpu Slurm passes it through) and huge.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepGpusError {
    #[error("SLURM_STEP_GPUS is {len} bytes long, more than {MAX_STEP_GPUS_BYTES}")]
    TooLong { len: usize },
    #[error("SLURM_STEP_GPUS names more than {max} GPU ids ({gpus} GPUs on this node)")]
    TooMany { max: u64, gpus: usize },
    #[error("SLURM_STEP_GPUS is not a list of GPU ids: {0}")]
    Syntax(ranges::RangeError),
}

/// Parse `SLURM_STEP_GPUS` ("0,1,4-6") for a node with `node_gpus` GPUs: ids in Slurm's
/// order, duplicates dropped. The raw length is capped, and the ids at 4x the node's GPU
/// count (at least 4), before anything is expanded, so a hostile value costs bounded
/// time and memory in root's slurmstepd.
pub fn parse_step_gpus(text: &str, node_gpus: usize) -> Result<Vec<u32>, StepGpusError> {
    if text.len() > MAX_STEP_GPUS_BYTES {
        return Err(StepGpusError::TooLong { len: text.len() });
    }
    let max = 4 * (node_gpus.max(1) as u64);
    let limits = Limits {
        max_value: u32::MAX,
        max_count: max,
    };
    let parts = ranges::parse(text.trim(), limits, false).map_err(|e| match e {
        ranges::RangeError::TooMany { .. } => StepGpusError::TooMany {
            max,
            gpus: node_gpus,
        },
        other => StepGpusError::Syntax(other),
    })?;
    let mut ids: Vec<u32> = Vec::new();
    for id in ranges::values(&parts) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// A gres id that names no GPU of this node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuIdError {
    #[error("GPU id {id} of this step is not among the node's {count} GPU ids ({rule})")]
    OutOfRange { id: u32, count: usize, rule: String },
    #[error(
        "GPU id {id} of this step is {file} in gres.conf (line {line}), which is none of this node's GPUs ({rule})"
    )]
    NotAGpu {
        id: u32,
        file: String,
        line: usize,
        rule: String,
    },
}

/// The node's GPUs in Slurm's id order: `ids[i]` is what Slurm calls GPU `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmGpus {
    /// `None` where the id names a configured device that is none of the machine's GPUs.
    pub ids: Vec<Option<PciAddr>>,
    /// gres.conf's device for each id, when gres.conf listed it: (file, line).
    pub files: Vec<Option<(String, usize)>>,
    /// The rule that numbered them, for messages ("gres.conf File= order", ...).
    pub rule: String,
}

impl SlurmGpus {
    /// Number the machine's GPUs as Slurm does with `gres` (the node's part of
    /// gres.conf; `None` when there is none to read). `minor_of` gives a device file's
    /// /dev/nvidiaN minor (the reader stats it; see [`minor_from_name`]).
    ///
    /// Without gres.conf, and for a machine whose GPUs have no known minors, the ids are
    /// taken to be minor order ([`Machine::gpus_in_slurm_order`]), which is what a
    /// `File=/dev/nvidia[0-N]` line or `AutoDetect=nvidia` gives.
    pub fn number(
        machine: &Machine,
        gres: Option<&NodeGpus>,
        minor_of: &dyn Fn(&str) -> Option<u32>,
    ) -> SlurmGpus {
        let by_minor = |minor: u32| {
            let has_minors = machine.gpus.iter().any(|g| g.minor.is_some());
            if has_minors {
                machine
                    .gpus
                    .iter()
                    .find(|g| g.minor == Some(minor))
                    .map(|g| g.pci)
            } else {
                // A topology without minors (some fixtures): the driver's usual
                // numbering, minors rising with PCI address.
                machine
                    .gpus_in_slurm_order()
                    .get(minor as usize)
                    .map(|g| g.pci)
            }
        };
        let Some(gres) = gres else {
            return SlurmGpus {
                ids: machine
                    .gpus_in_slurm_order()
                    .iter()
                    .map(|g| Some(g.pci))
                    .collect(),
                files: Vec::new(),
                rule: "no gres.conf read: minor order".into(),
            };
        };
        // Each configured device and the machine GPU its file is.
        let configured: Vec<(Option<PciAddr>, (String, usize))> = gres
            .devices
            .iter()
            .map(|d| {
                let gpu = d
                    .files
                    .iter()
                    .filter_map(|f| minor_of(f))
                    .find_map(by_minor);
                let file = d.files.first().cloned().unwrap_or_default();
                (gpu, (file, d.line))
            })
            .collect();
        match &gres.autodetect {
            AutoDetect::Nvml | AutoDetect::Nvidia => {
                let nvml = gres.autodetect == AutoDetect::Nvml;
                // Detected GPUs, kept only where gres.conf names them (if it names any),
                // then configured devices detection does not see.
                let mut detected: Vec<(PciAddr, Option<u32>)> = machine
                    .gpus
                    .iter()
                    .filter(|g| {
                        configured.is_empty() || configured.iter().any(|(p, _)| *p == Some(g.pci))
                    })
                    .map(|g| (g.pci, g.minor))
                    .collect();
                if nvml {
                    detected.sort_by_key(|(pci, _)| *pci);
                } else {
                    detected.sort_by(|a, b| {
                        natural_cmp(&nvidia_file(a.1), &nvidia_file(b.1)).then(a.0.cmp(&b.0))
                    });
                }
                let mut extra: Vec<(String, usize)> = configured
                    .iter()
                    .filter(|(p, _)| p.is_none())
                    .map(|(_, f)| f.clone())
                    .collect();
                extra.sort_by(|a, b| natural_cmp(&a.0, &b.0));
                let file_of = |pci: PciAddr| {
                    configured
                        .iter()
                        .find(|(p, _)| *p == Some(pci))
                        .map(|(_, f)| f.clone())
                };
                SlurmGpus {
                    ids: detected
                        .iter()
                        .map(|(p, _)| Some(*p))
                        .chain(extra.iter().map(|_| None))
                        .collect(),
                    files: detected
                        .iter()
                        .map(|(p, _)| file_of(*p))
                        .chain(extra.into_iter().map(Some))
                        .collect(),
                    rule: if nvml {
                        "gres.conf AutoDetect=nvml: PCI bus order".into()
                    } else {
                        "gres.conf AutoDetect=nvidia: device file order".into()
                    },
                }
            }
            AutoDetect::Off | AutoDetect::Other(_) => SlurmGpus {
                ids: configured.iter().map(|(p, _)| *p).collect(),
                files: configured.into_iter().map(|(_, f)| Some(f)).collect(),
                rule: "gres.conf File= order".into(),
            },
        }
    }

    /// The GPUs Slurm's ids name, in the ids' order.
    pub fn map(&self, ids: &[u32]) -> Result<Vec<PciAddr>, GpuIdError> {
        ids.iter()
            .map(|&id| match self.ids.get(id as usize) {
                Some(Some(pci)) => Ok(*pci),
                Some(None) => {
                    let (file, line) = self
                        .files
                        .get(id as usize)
                        .cloned()
                        .flatten()
                        .unwrap_or_default();
                    Err(GpuIdError::NotAGpu {
                        id,
                        file,
                        line,
                        rule: self.rule.clone(),
                    })
                }
                None => Err(GpuIdError::OutOfRange {
                    id,
                    count: self.ids.len(),
                    rule: self.rule.clone(),
                }),
            })
            .collect()
    }
}

fn nvidia_file(minor: Option<u32>) -> String {
    minor.map_or_else(String::new, |m| format!("/dev/nvidia{m}"))
}

/// Slurm's dev_num rule: the number a device file's name ends with (`/dev/nvidia12` ->
/// 12). For readers that cannot stat the file (a fixture's gres.conf on another host).
pub fn minor_from_name(path: &str) -> Option<u32> {
    let digits = path.len() - path.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    path[path.len() - digits..].parse().ok()
}

/// Natural order (`nvidia2` < `nvidia10`), as Slurm sorts device files (strnatcmp).
fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        match (a.chars().next(), b.chars().next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.len() - a.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                let nb = b.len() - b.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                let (da, db) = (
                    a[..na].trim_start_matches('0'),
                    b[..nb].trim_start_matches('0'),
                );
                let ord = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
                if ord != Ordering::Equal {
                    return ord;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(&y);
                }
                a = &a[x.len_utf8()..];
                b = &b[y.len_utf8()..];
            }
        }
    }
}

/// Which of the step's GPUs Slurm gives one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskGpus {
    /// No per-task GPU binding: the task sees all of the step's GPUs.
    Step,
    /// These gres ids (global), in id order.
    Ids(Vec<u32>),
    /// Slurm binds by a rule this cannot replay (`closest`, `single:N`: by the task's
    /// CPUs); the text says which.
    Unknown(String),
}

/// The GPUs Slurm binds local task `task` to, from `SLURMD_TRES_BIND` (slurmstepd sets it
/// in every task's environment from the step's request: `gpu:per_task:1` for
/// `--gpus-per-task=1`, `gpu:map_gpu:3,1` for `--gpu-bind=map_gpu:3,1`; measured on
/// 22.05; 24.11 and 26.05 name the TRES in full, `gres/gpu:per_task:1`), the step's ids
/// and whether Slurm numbers them locally (ConstrainDevices: map/mask values count the
/// step's GPUs, not the node's). Replays gres.c's `_get_usable_gres` for the rules that
/// do not depend on CPU affinity, including its fallback to the step's first GPU when a
/// rule names none.
pub fn task_gpus(tres_bind: Option<&str>, step_ids: &[u32], local: bool, task: u32) -> TaskGpus {
    // Both spellings: read only as `gpu:`, a 24.11+ binding looked like none, and each
    // task was planned on its local rank's GPU with the step's CUDA ids.
    let Some(bind) = tres_bind.and_then(|b| {
        b.split(';').find_map(|p| {
            let p = p.trim();
            p.strip_prefix("gres/gpu:")
                .or_else(|| p.strip_prefix("gpu:"))
        })
    }) else {
        return TaskGpus::Step;
    };
    let bind = bind.strip_prefix("verbose,").unwrap_or(bind);
    let mut alloc: Vec<u32> = step_ids.to_vec();
    alloc.sort_unstable();
    alloc.dedup();
    let Some(&first) = alloc.first() else {
        return TaskGpus::Step;
    };
    let size = alloc.last().map_or(0, |l| *l as usize + 1);
    let chosen: Vec<u32> = if let Some(n) = bind.strip_prefix("per_task:") {
        let Ok(n) = n.trim().parse::<usize>() else {
            return TaskGpus::Unknown(format!("gpu-bind {bind}"));
        };
        alloc
            .iter()
            .copied()
            .skip((task as usize).saturating_mul(n))
            .take(n)
            .collect()
    } else if let Some(list) = bind.strip_prefix("map_gpu:") {
        match pick(list, task) {
            Some(v) => {
                let v = v as usize;
                if local {
                    alloc.get(v).copied().into_iter().collect()
                } else if v < size && alloc.contains(&(v as u32)) {
                    vec![v as u32]
                } else {
                    Vec::new()
                }
            }
            None => return TaskGpus::Unknown(format!("gpu-bind {bind}")),
        }
    } else if let Some(list) = bind.strip_prefix("mask_gpu:") {
        match pick(list, task) {
            Some(mask) => {
                let bits = (0..64u32).filter(|b| mask >> b & 1 == 1);
                if local {
                    bits.filter_map(|b| alloc.get(b as usize).copied())
                        .collect()
                } else {
                    bits.filter(|b| alloc.contains(b)).collect()
                }
            }
            None => return TaskGpus::Unknown(format!("gpu-bind {bind}")),
        }
    } else if bind.starts_with("closest") || bind.starts_with("single:") {
        return TaskGpus::Unknown(format!("--gpu-bind={bind} binds by the task's CPUs"));
    } else {
        return TaskGpus::Step;
    };
    // gres.c: "does not specify any devices within the allocation ... Binding to the
    // first device in the allocation instead."
    TaskGpus::Ids(if chosen.is_empty() {
        vec![first]
    } else {
        chosen
    })
}

/// The map/mask entry for `task`: entries `v` or `v*N` (N tasks), cycled; values in C's
/// `strtol(.., 0)` forms (decimal, 0x hex, 0 octal).
fn pick(list: &str, task: u32) -> Option<u64> {
    let mut entries = Vec::new();
    for tok in list.split(',') {
        let (value, mult) = match tok.split_once('*') {
            Some((v, m)) => (v, m.trim().parse::<u64>().ok()?.max(1)),
            None => (tok, 1),
        };
        let v = value.trim();
        let v = if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            u64::from_str_radix(hex, 16).ok()?
        } else if v.len() > 1 && v.starts_with('0') {
            u64::from_str_radix(&v[1..], 8).ok()?
        } else {
            v.parse().ok()?
        };
        entries.push((v, mult));
    }
    // Saturating: multipliers are user text, and a total past u64 is past every task id
    // anyway, so the walk below picks the same entry as the exact sum would.
    let total = entries.iter().fold(0u64, |t, (_, m)| t.saturating_add(*m));
    if total == 0 {
        return None;
    }
    let mut slot = u64::from(task) % total;
    for (v, m) in entries {
        if slot < m {
            return Some(v);
        }
        slot -= m;
    }
    None
}

#[cfg(test)]
mod tests;
