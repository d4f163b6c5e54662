//! `slurm::gpus_per_task::parse` (`SLURM_GPUS_PER_TASK`, the user's own text in the job
//! environment). Properties: a count is never 0 (0 means "no per-task request": `None`);
//! an error quotes at most 64 characters of the value, so a huge value cannot flood the
//! log; every `[type:]N` list of plain counts parses to their saturating sum.
#![no_main]

use gpu_affinity::slurm::gpus_per_task;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match gpus_per_task::parse(text) {
        Ok(Some(n)) => assert!(n > 0, "{text:?}"),
        Ok(None) => {}
        Err(e) => {
            let shown = e.to_string();
            // The fixed words plus 64 characters of at most 4 bytes and "...".
            assert!(shown.len() <= 64 * 4 + 64, "{} bytes", shown.len());
        }
    }
    // The same counts written plainly always parse to their (saturating) sum.
    let counts: Vec<u32> = data
        .chunks(4)
        .take(8)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(b) % 100_000
        })
        .collect();
    if !counts.is_empty() {
        let list: Vec<String> = counts.iter().map(|n| format!("gpu:{n}")).collect();
        let sum = counts.iter().fold(0u32, |a, n| a.saturating_add(*n));
        assert_eq!(
            gpus_per_task::parse(&list.join(",")).ok(),
            Some((sum > 0).then_some(sum)),
            "{list:?}"
        );
    }
});
