//! `health::xid::XidPolicy::parse`: the admin's /etc/gpu-affinity/xid-policy.toml (the
//! embedded one when absent). Properties: an error is one line and names a line of the
//! text; an accepted policy has a rule with a source for exactly the codes it lists.
#![no_main]

use gpu_affinity::health::xid::XidPolicy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match XidPolicy::parse(text) {
        Ok(policy) => {
            for code in [0, 13, 48, 79, 94, 95, u32::MAX] {
                if let Some(rule) = policy.rule(code) {
                    assert_eq!(rule.code, code);
                    assert!(!rule.source.trim().is_empty());
                    assert_eq!(policy.action(code), (rule.action, rule.repair));
                }
            }
        }
        Err(e) => {
            let line = e.to_string();
            assert!(
                !line.contains(['\n', '\r']),
                "error is not one line: {line:?}"
            );
            let gpu_affinity::health::xid::XidPolicyError::At { line: at, .. } = e;
            assert!(at >= 1 && at <= text.matches('\n').count() + 1, "line {at}");
        }
    }
});
