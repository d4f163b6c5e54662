//! `sources::hwloc_xml::parse` (hwloc v2 XML, `lstopo --of xml`) and its bitmap form.
#![no_main]

use gpu_affinity::sources::hwloc_xml;
use libfuzzer_sys::fuzz_target;

#[path = "../src/cpuset_checks.rs"]
mod cpuset_checks;
#[path = "../src/machine_checks.rs"]
mod machine_checks;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(machine) = hwloc_xml::parse(text) {
        machine_checks::check_machine(&machine, "hwloc_xml");
    }
    // Short inputs are bitmaps too (`cpuset="0x0000ffff,,0x1"`): the finite part must
    // survive the cpulist and kernel mask forms the rest of the suite uses.
    if text.len() <= 256
        && let Ok(bitmap) = hwloc_xml::parse_bitmap(text)
    {
        cpuset_checks::check_forms(text, &bitmap.set);
    }
});
