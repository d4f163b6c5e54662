//! `CpuSet::parse_mask`: kernel CPU masks (`cpumap`, `local_cpus`) and NCCL's
//! `affinity=`. Properties: mask -> set -> mask -> set and the cpulist form round-trip.
#![no_main]

use gpu_affinity::cpuset::CpuSet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(set) = CpuSet::parse_mask(text) else {
        return;
    };
    let mask = set.to_mask();
    assert_eq!(
        CpuSet::parse_mask(&mask).as_ref(),
        Ok(&set),
        "{text:?} -> {mask:?} does not parse back"
    );
    let list = set.to_string();
    assert_eq!(
        CpuSet::parse_list(&list).as_ref(),
        Ok(&set),
        "{text:?} -> cpulist {list:?} does not parse back"
    );
});
