//! What the plain-main (harness = false) tests share: nextest's listing protocol and a
//! pass whose inputs are all skipped but the ones under test.

use gpu_affinity::health::{Gap, Inputs};

/// The test's main: the libtest listing protocol nextest speaks (`--list --format terse
/// [--ignored]`: the file is the one test `name`, never ignored), else `cases`, exiting 1
/// when any failed (each case prints its own line).
pub fn main(name: &str, cases: fn() -> usize) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("{name}: test");
        }
        return;
    }
    let failures = cases();
    if failures > 0 {
        eprintln!("{name}: {failures} case(s) failed");
        std::process::exit(1);
    }
}

/// Every input skipped: a report of these is the checks under test's alone.
pub fn skipped_inputs() -> Inputs {
    let skip = || Gap::Skipped("not in this test".into());
    Inputs {
        sysfs: Err(skip()),
        nvml: Err(skip()),
        xids: Err(skip()),
        kmsg_notes: Default::default(),
        mounts: vec![],
        checkpoint: Err(skip()),
        gres_gpus: None,
        dcgm_diag: Err(skip()),
        all_reduce: Err(skip()),
        imex: Err(skip()),
        now: 0,
    }
}
