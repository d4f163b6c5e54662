//! `slurm::slurm_conf::value` and `parse` (slurm.conf, as `gpu-affinity install` reads it for
//! `PlugStackConfig=`). Properties: a value holds no newline and, unquoted, no space; a
//! plain `PlugStackConfig=WORD` line appended to the text (after a blank line) is the
//! value found (the last one wins, as in Slurm), whatever came before.
#![no_main]

use gpu_affinity::slurm::slurm_conf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The facts parser (audit, the placement backstop) reads the same lines: an error,
    // never a panic.
    let _ = slurm_conf::parse(text);
    if let Some(v) = slurm_conf::value(text, "PlugStackConfig") {
        assert!(!v.contains('\n'), "{v:?}");
    }
    let word = "/etc/slurm/spank/plugstack.conf";
    // The blank line ends any `\`-continued line the text leaves open.
    let appended = format!("{text}\n\nPlugStackConfig={word}\n");
    assert_eq!(
        slurm_conf::value(&appended, "plugstackconfig").as_deref(),
        Some(word),
        "{text:?}"
    );
});
