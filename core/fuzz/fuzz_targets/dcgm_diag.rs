//! `health::active::dcgm_diag`: `dcgmi diag -r LEVEL -j`'s JSON, run as root by the
//! health program and the prolog. Properties: an error is one line; every result has a
//! status; no text field spans lines or passes the field cap.
#![no_main]

use gpu_affinity::health::active;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match active::dcgm_diag(text) {
        Ok(diag) => {
            assert!(!diag.results.is_empty());
            for r in &diag.results {
                let fields = [Some(&r.category), Some(&r.test), Some(&r.status)]
                    .into_iter()
                    .chain([r.entity.as_ref(), r.warning.as_ref()]);
                for f in fields.flatten() {
                    assert!(!f.contains(['\n', '\r']), "{f:?}");
                    assert!(f.chars().count() <= 2 * 200 + 8, "{f:?}");
                }
            }
        }
        Err(e) => {
            let line = e.to_string();
            assert!(
                !line.contains(['\n', '\r']),
                "error is not one line: {line:?}"
            );
        }
    }
});
