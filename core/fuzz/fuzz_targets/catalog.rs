//! `catalog::parse`: the machine catalog TOML format (core/catalog/*.toml, an admin's or
//! a test's own description, possibly `extends` a built-in one). Properties: no panic,
//! and a parsed machine is usable (see `check_machine`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/machine_checks.rs"]
mod machine_checks;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((_, machine)) = gpu_affinity::catalog::parse_entry(text) {
        machine_checks::check_machine(&machine, "catalog");
    }
});
