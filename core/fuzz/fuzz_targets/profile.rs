//! `fabric::profiles::parse_profile` (core/profiles/*.toml and /etc's profiles.d) and the
//! value templates inside them (`fabric::template`). Properties: no panic, errors are one
//! line, a template whose names all resolve expands.
#![no_main]

use gpu_affinity::fabric::{profiles, template};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match profiles::load(&[("fuzz.toml".to_string(), text.to_string())]) {
        Ok(loaded) => assert!(loaded.iter().count() == 1),
        Err(e) => {
            let line = e.to_string();
            assert!(
                !line.contains(['\n', '\r']),
                "error is not one line: {line:?}"
            );
        }
    }
    // The whole input as one template too: short ones are the interesting ones.
    if text.len() <= 512 {
        let _ = template::check(text, template::Scope::Node);
        let _ = template::check(text, template::Scope::Rank);
        if let Ok(names) = template::names(text) {
            let expanded = template::expand(text, &|name| Some(format!("<{name}>")));
            let expanded = expanded.expect("names() accepted what expand() refuses");
            let expanded = expanded.expect("every name resolved, yet no value");
            for name in names {
                assert!(
                    expanded.contains(&format!("<{name}>")),
                    "{name} not expanded"
                );
            }
        }
    }
});
