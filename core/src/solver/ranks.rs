//! Handing the step's GPUs to its local ranks, in request order.

use crate::pci::PciAddr;

/// Most local ranks one solve plans; a larger task count is a bad request, not a reason to
/// allocate without bound.
pub const MAX_TASKS: u32 = 1 << 16;

/// Each rank's GPUs, and what is wrong when the GPUs could not be split evenly.
pub(super) struct GpuSplit {
    pub per_rank: Vec<Vec<PciAddr>>,
    pub uneven: Option<Uneven>,
}

/// Why the GPUs do not divide, and the request that would make them.
pub(super) struct Uneven {
    pub problem: String,
    pub action: String,
}

/// Split `gpus` (already free of duplicates) among `tasks` ranks.
///
/// With `gpus_per_task` = p, rank i gets GPUs [i*p, (i+1)*p); ranks past the end get
/// none. Without it (or with p = 0, which Slurm never means literally), the GPUs are
/// divided evenly; when they do not divide, the split is as even as it can be (8 GPUs, 3
/// tasks -> 3, 3, 2), and with more tasks than GPUs the extra ranks get none (their
/// `no_gpu` says it better than a divisibility complaint).
pub(super) fn split_gpus(gpus: &[PciAddr], tasks: u32, gpus_per_task: Option<u32>) -> GpuSplit {
    let tasks = tasks.min(MAX_TASKS) as usize;
    let n = gpus.len();
    let mut uneven = None;
    let per_rank: Vec<Vec<PciAddr>> = match gpus_per_task.filter(|&p| p > 0) {
        Some(p) => {
            let p = p as usize;
            // (`is_multiple_of` needs Rust 1.87; the workspace promises 1.85.)
            let spare = n % p;
            if spare > 0 {
                uneven = Some(Uneven {
                    problem: format!("{n} GPUs cannot be given {p} per task"),
                    action: format!("request a multiple of {p} GPUs or change --gpus-per-task"),
                });
            }
            (0..tasks)
                .map(|i| {
                    let start = i.saturating_mul(p).min(n);
                    let end = (i + 1).saturating_mul(p).min(n);
                    gpus[start..end].to_vec()
                })
                .collect()
        }
        None if tasks == 0 => Vec::new(),
        None if n >= tasks => {
            let spare = n % tasks;
            if spare > 0 {
                uneven = Some(Uneven {
                    problem: format!("{n} GPUs cannot be split evenly among {tasks} tasks"),
                    action: format!("use a task count that divides {n} or set --gpus-per-task"),
                });
            }
            (0..tasks)
                .map(|i| gpus[i * n / tasks..(i + 1) * n / tasks].to_vec())
                .collect()
        }
        None => (0..tasks)
            .map(|i| gpus.get(i).map(|g| vec![*g]).unwrap_or_default())
            .collect(),
    };
    GpuSplit { per_rank, uneven }
}
