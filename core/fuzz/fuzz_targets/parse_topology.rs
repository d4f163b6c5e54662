//! Any text given to `parse_topology` must give an error or a machine that validates;
//! never a panic, a stack overflow or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(machine) = gpu_affinity::sources::parse_topology(text) {
            assert!(
                machine.validate().is_ok(),
                "parse_topology returned an invalid machine"
            );
        }
    }
});
