//! `sources::nccl_xml::parse` (NCCL_TOPO_FILE: vendor files and NCCL's own dumps).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/machine_checks.rs"]
mod machine_checks;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(machine) = gpu_affinity::sources::nccl_xml::parse(text) {
        machine_checks::check_machine(&machine, "nccl_xml");
    }
});
