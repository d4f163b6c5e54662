//! `health::handoff`'s parsers and writers of cloud answers: IMDS's token and compute
//! JSON (`parse_token`, `parse_compute`), curl's output (`split_status`), and the OCI
//! record read back (`OciRecord::file` over any existing bytes). First byte picks one.
//! Properties: a token or an id accepted is one line of printable ASCII with no quote or
//! backslash (it goes into a curl config line and a URL); the curl config of a request
//! carrying it is one line per setting; the OCI file is always a JSON object holding
//! the record's four keys (at its top level, or nested in a kept key too).
#![no_main]

use gpu_affinity::health::handoff::{
    CurlRequest, OciRecord, parse_compute, parse_token, split_status,
};
use libfuzzer_sys::fuzz_target;

fn plain(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match pick % 4 {
        0 => {
            if let Ok(token) = parse_token(&text) {
                assert!(plain(&token), "{token:?}");
                let req = CurlRequest {
                    method: "PUT",
                    url: "https://management.azure.com/x".into(),
                    headers: vec![format!("Authorization: Bearer {token}")],
                    body: Some(text.to_string()),
                };
                assert_eq!(req.config().lines().count(), 5);
            }
        }
        1 => {
            if let Ok(vm) = parse_compute(&text) {
                assert!(plain(&vm.subscription_id) && plain(&vm.resource_id));
                assert!(vm.resource_id.starts_with("/subscriptions/"));
            }
        }
        2 => {
            let (body, status) = split_status(&text);
            assert!(body.len() <= text.len());
            assert!(status.is_none() || body.len() < text.len());
        }
        _ => {
            let rec = OciRecord {
                recommendation: "Reboot",
                status: vec!["Xid Error".into()],
                logs: text.chars().take(64).collect(),
            };
            let out = rec.file(Some(rest), 0);
            let out = String::from_utf8(out).expect("UTF-8");
            assert!(out.starts_with('{') && out.ends_with('}'), "{out}");
            for key in [
                "passive_healthcheck_recommendation",
                "passive_healthcheck_time",
                "passive_healthcheck_logs",
                "passive_healthcheck_status",
            ] {
                assert!(out.contains(&format!("\"{key}\": ")), "{key}");
            }
        }
    }
});
