//! `CpuSet::parse_list`: Linux cpulists (sysfs `cpulist`, `thread_siblings_list`), the
//! plugin's `S_STEP_ALLOC_CORES` (step.rs `step_cpus` parses it with this function after
//! a trim) and the hwloc/NCCL sources. Properties: format -> parse round-trips, the mask
//! form round-trips, and the set stays within the documented bound.
#![no_main]

use gpu_affinity::cpuset::{CpuSet, MAX_CPU_ID};
use libfuzzer_sys::fuzz_target;

#[path = "../src/cpuset_checks.rs"]
mod cpuset_checks;

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
            set.iter().all(|cpu| cpu < MAX_CPU_ID),
            "{input:?}: a CPU id at or above MAX_CPU_ID"
        );
        cpuset_checks::check_forms(input, &set);
    }
});
