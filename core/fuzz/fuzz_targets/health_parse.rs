//! `health::parse`: what the prolog, epilog and health binaries read from /proc/mounts,
//! the RDMA port and PCIe link attributes, `link_downed`, `sinfo` and Slurm's gres
//! string. The first byte picks the parser. Properties: never more records than lines;
//! a mount point found by `mount_at` is the one asked for; sinfo fields hold no `|`
//! (the reason may) and a `none` reason is `None`; a gres GPU count is the exact sum (no
//! wrap); a boot id is the kernel's 36-byte UUID form; rates and speeds are finite and not negative (a NaN compares false and would
//! pass every "slower than expected" check).
#![no_main]

use gpu_affinity::health::parse;
use libfuzzer_sys::fuzz_target;

#[path = "../src/health_pick.rs"]
mod pick;

fn finite(what: &str, text: &str, value: Option<f64>) {
    if let Some(v) = value {
        assert!(v.is_finite() && v >= 0.0, "{what} {text:?} -> {v}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let lines = text.lines().count();
    match which % pick::COUNT {
        pick::MOUNTS => {
            let entries = parse::mounts(text);
            assert!(entries.len() <= lines);
            for e in &entries {
                assert!(!e.point.is_empty() && !e.fstype.is_empty(), "{e:?}");
                if e.point == "/" || !e.point.ends_with('/') {
                    let found = parse::mount_at(&entries, &e.point);
                    assert_eq!(found.map(|f| &f.point), Some(&e.point));
                }
            }
        }
        pick::SINFO => {
            let rows = parse::sinfo_rows(text);
            assert!(rows.len() <= lines);
            for r in &rows {
                assert!(!r.name.is_empty());
                for field in [&r.name, &r.partition, &r.state, &r.gres] {
                    assert!(!field.contains('|'), "{r:?}");
                }
                assert!(r.reason.as_deref() != Some("none"));
            }
        }
        pick::GRES => {
            let _ = parse::gres_gpu_count(text);
        }
        pick::PORT_RATE => finite("rate", text, parse::port_rate_gbps(text)),
        pick::LINK_SPEED => finite("speed", text, parse::link_speed_gts(text)),
        pick::PORT_STATE => {
            let state = parse::port_state(text);
            assert!(state.len() <= text.len());
        }
        pick::COUNTER => {
            let _ = parse::counter(text);
        }
        pick::BOOT_ID => {
            // The kernel's UUID form only: 36 bytes of lowercase hex and dashes.
            if let Some(id) = parse::boot_id(text) {
                assert_eq!(id.len(), 36, "{id:?}");
                assert!(
                    id.bytes()
                        .all(|b| b == b'-' || b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                );
            }
        }
        // `which % pick::COUNT` is one of the above.
        _ => {}
    }
});
