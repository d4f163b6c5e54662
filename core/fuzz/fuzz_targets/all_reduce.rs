//! `health::active::all_reduce`: nccl-tests' `all_reduce_perf` output, run as root by the
//! health program and the prolog. Properties: an accepted bandwidth is finite and not
//! negative (a NaN compares false and would pass the floor); rows never outnumber lines;
//! an error is one line.
#![no_main]

use gpu_affinity::health::active;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match active::all_reduce(text) {
        Ok(run) => {
            assert!(run.avg_busbw_gbps.is_finite() && run.avg_busbw_gbps >= 0.0);
            assert!(run.rows <= text.lines().count());
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
