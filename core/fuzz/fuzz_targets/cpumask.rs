//! `CpuSet::parse_mask`: kernel CPU masks (`cpumap`, `local_cpus`) and NCCL's
//! `affinity=`. Property: the mask and cpulist forms round-trip.
#![no_main]

use gpu_affinity::cpuset::CpuSet;
use libfuzzer_sys::fuzz_target;

#[path = "../src/cpuset_checks.rs"]
mod cpuset_checks;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(set) = CpuSet::parse_mask(text) {
        cpuset_checks::check_forms(text, &set);
    }
});
