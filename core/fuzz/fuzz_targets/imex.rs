//! `health::imex`: `nvidia-imex-ctl -q`'s word and `-N -j`'s JSON, run as root by the
//! health programs. Properties: an error is one line; a member's fields never span lines
//! or pass the field cap; a judgement's text is one line.
#![no_main]

use gpu_affinity::health::imex::{self, Imex, Judged};
use libfuzzer_sys::fuzz_target;

fn one_line(text: &str) {
    assert!(!text.contains(['\n', '\r']), "not one line: {text:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match imex::daemon_state(text) {
        Ok(state) => assert!(state.as_str().eq_ignore_ascii_case(text.trim())),
        Err(e) => one_line(&e.to_string()),
    }
    match imex::domain(text) {
        Ok(domain) => {
            for n in &domain.nodes {
                for f in [&n.host, &n.host_name, &n.status].into_iter().flatten() {
                    one_line(f);
                    assert!(f.chars().count() <= 80, "{f:?}");
                }
            }
            let judged = imex::judge(&Imex {
                daemon: imex::DaemonState::Ready,
                domain: Some(domain),
            });
            match judged {
                Judged::Healthy(t) | Judged::Fault(_, t) | Judged::NotJudged(t) => one_line(&t),
            }
        }
        Err(e) => one_line(&e.to_string()),
    }
});
