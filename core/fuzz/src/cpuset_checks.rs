//! The round trips every parsed CPU set must survive, shared by the `cpulist`,
//! `cpumask` and `hwloc_xml` targets (included with `#[path]`, like machine_checks.rs).

use gpu_affinity::cpuset::CpuSet;

/// The set prints as a cpulist and as a kernel mask, and each reads back as the same set:
/// the suite moves CPU sets between the two forms (sysfs, NCCL files, the plugin's env).
pub fn check_forms(input: &str, set: &CpuSet) {
    let list = set.to_string();
    assert_eq!(
        CpuSet::parse_list(&list).as_ref(),
        Ok(set),
        "{:?} -> cpulist {:?} does not parse back",
        short(input),
        short(&list)
    );
    let mask = set.to_mask();
    assert_eq!(
        CpuSet::parse_mask(&mask).as_ref(),
        Ok(set),
        "{:?} -> mask {:?} does not parse back",
        short(input),
        short(&mask)
    );
}

/// The start of a long text: a 2048-word mask would bury the report.
fn short(text: &str) -> String {
    text.chars().take(120).collect()
}
