//! `slurm::gpu_ids::parse_step_gpus` (`SLURM_STEP_GPUS`, which a user can set on a
//! cluster without gres gpu) and `task_gpus` (the `SLURMD_TRES_BIND` rules, user text
//! from `--gpu-bind`). Input: byte 0 the node's GPU count, byte 1 `local`, bytes 2..6 the
//! task, then the step's GPUs and SLURMD_TRES_BIND separated by a NUL (none: unset).
//! Properties: step ids are distinct, at most 4x the node's GPUs (at least 4), and only
//! for values within MAX_STEP_GPUS_BYTES; errors are one line and short (no copy of the
//! value); a task's ids are non-empty, sorted, distinct and all the step's.
#![no_main]

use gpu_affinity::slurm::gpu_ids::{self, MAX_STEP_GPUS_BYTES, TaskGpus};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&[gpus, local, t0, t1, t2, t3], rest)) = data.split_first_chunk::<6>() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let node_gpus = usize::from(gpus);
    let task = u32::from_le_bytes([t0, t1, t2, t3]);
    let (step, bind) = match text.split_once('\0') {
        Some((s, b)) => (s, Some(b)),
        None => (text, None),
    };
    let ids = match gpu_ids::parse_step_gpus(step, node_gpus) {
        Ok(ids) => {
            assert!(step.len() <= MAX_STEP_GPUS_BYTES);
            assert!(
                ids.len() <= 4 * node_gpus.max(1),
                "{step:?}: {} ids",
                ids.len()
            );
            let mut distinct = ids.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), ids.len(), "{step:?}: duplicate ids {ids:?}");
            ids
        }
        Err(e) => {
            let line = e.to_string();
            assert!(
                !line.contains(['\n', '\r']) && line.len() <= 200,
                "error is not one short line: {line:?}"
            );
            // The plugin still asks task_gpus about the step it has: try a fixed one.
            vec![0, 1, 2, 3]
        }
    };
    match gpu_ids::task_gpus(bind, &ids, local & 1 == 1, task) {
        TaskGpus::Step => {}
        TaskGpus::Ids(chosen) => {
            assert!(!chosen.is_empty(), "{bind:?}: no GPU for task {task}");
            assert!(
                chosen.windows(2).all(|w| w[0] < w[1]),
                "{bind:?}: task {task} ids {chosen:?} not sorted and distinct"
            );
            assert!(
                chosen.iter().all(|c| ids.contains(c)),
                "{bind:?}: task {task} ids {chosen:?} outside the step's {ids:?}"
            );
        }
        TaskGpus::Unknown(why) => assert!(!why.is_empty()),
    }
});
