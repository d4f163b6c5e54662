//! `sources::parse_machine_xml`, the entry `explain --topology` and the plugin's vendor
//! NCCL_TOPO_FILE go through: any text gives an error or a usable machine (see
//! `check_machine`); never a panic, a stack overflow or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/machine_checks.rs"]
mod machine_checks;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(machine) = gpu_affinity::sources::parse_machine_xml(text) {
        machine_checks::check_machine(&machine, "parse_machine_xml");
    }
});
