//! `slurm::srun_args::asks_for_gpus`: srun's own command line (the plugin reads
//! /proc/self/cmdline, NUL-separated, the user's bytes) and its input variables.
//! Byte 0 picks which of the GPU input variables are set (one bit each); the rest is the
//! command line, split at NUL like the kernel's, and the last word is each variable's
//! value. Properties beyond "no panic": the answer is the same twice; a set variable
//! only ever adds a request; `--gpus=1` as srun's first option is always a request;
//! with no variable set, a command word before everything else means no request (a
//! command's own `--gpus` is not srun's).
#![no_main]

use gpu_affinity::slurm::srun_args::asks_for_gpus;
use libfuzzer_sys::fuzz_target;

/// The variables srun(1) reads a GPU request from, as srun_args checks them.
const VARS: [&str; 6] = [
    "SLURM_GPUS",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_SOCKET",
    "SLURM_GPUS_PER_TASK",
    "SLURM_GRES",
    "SLURM_TRES_PER_TASK",
];

fuzz_target!(|data: &[u8]| {
    let Some((&set, cmdline)) = data.split_first() else {
        return;
    };
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let value = args.last().cloned().unwrap_or_default();
    let env = |v: &str| {
        VARS.iter()
            .position(|name| *name == v)
            .filter(|i| set & (1 << i) != 0)
            .map(|_| value.clone())
    };
    let none = |_: &str| None;

    let asked = asks_for_gpus(&args, &env);
    assert_eq!(asked, asks_for_gpus(&args, &env), "{args:?}");
    let by_args = asks_for_gpus(&args, &none);
    assert!(
        !by_args || asked,
        "a variable took a request away: {args:?}"
    );

    let srun = args.first().cloned().unwrap_or_else(|| "srun".into());
    let with = |first: &str| -> Vec<String> {
        std::iter::once(srun.clone())
            .chain(std::iter::once(first.to_string()))
            .chain(args.iter().skip(1).cloned())
            .collect()
    };
    assert!(asks_for_gpus(&with("--gpus=1"), &none), "{args:?}");
    assert!(!asks_for_gpus(&with("true"), &none), "{args:?}");
});
