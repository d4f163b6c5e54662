//! `CpuSet::parse_list`: Linux cpulists (sysfs `cpulist`, `thread_siblings_list`), the
//! plugin's `S_STEP_ALLOC_CORES` (step.rs `step_cpus` parses it with this function after
//! a trim) and the hwloc/NCCL sources. Properties: format -> parse round-trips, the mask
//! form round-trips, and the set stays within the documented bound.
#![no_main]

use gpu_affinity::cpuset::{CpuSet, MAX_CPU_ID};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // S_STEP_ALLOC_CORES reaches the parser trimmed; a cpulist file with its newline.
    for input in [text, text.trim()] {
        let Ok(set) = CpuSet::parse_list(input) else {
            continue;
        };
        assert!(
            set.iter().all(|cpu| cpu <= MAX_CPU_ID),
            "{input:?}: a CPU id above MAX_CPU_ID"
        );
        let list = set.to_string();
        assert_eq!(
            CpuSet::parse_list(&list).as_ref(),
            Ok(&set),
            "{input:?} -> {list:?} does not parse back"
        );
        let mask = set.to_mask();
        assert_eq!(
            CpuSet::parse_mask(&mask).as_ref(),
            Ok(&set),
            "{input:?} -> mask {mask:?} does not parse back"
        );
    }
});
