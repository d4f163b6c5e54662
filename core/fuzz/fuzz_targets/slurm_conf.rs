//! `slurm::slurm_conf::parse` (slurm.conf, as audit, the placement backstop and
//! `gpu-affinity install` read it). Properties: an error, never a panic; a
//! `PlugStackConfig=` value holds no newline; a plain `PlugStackConfig=WORD` line appended
//! to the text (after a blank line) is the value found (the last one wins, as in Slurm),
//! whatever came before.
#![no_main]

use gpu_affinity::slurm::slurm_conf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(conf) = slurm_conf::parse(text) else {
        return;
    };
    if let Some(v) = &conf.plug_stack_config {
        assert!(!v.contains('\n'), "{v:?}");
    }
    let word = "/etc/slurm/spank/plugstack.conf";
    // The blank line ends any `\`-continued line the text leaves open; a text that
    // parsed still parses with one more plain line (no partition, no include).
    let appended = format!("{text}\n\nPlugStackConfig={word}\n");
    let again = slurm_conf::parse(&appended).expect("one more plain line");
    assert_eq!(again.plug_stack_config.as_deref(), Some(word), "{text:?}");
});
