//! `ranges::parse`: the one range-list rule behind cpulists, `SLURM_STEP_GPUS` and
//! hostlist brackets. The first 9 bytes pick the limits (largest value, most values) and
//! `allow_empty`, so small limits are hit as often as the text's own edge cases.
//! Properties: every accepted part has `lo <= hi <= max_value` and the parts hold at most
//! `max_count` values; the parts written back (`lo-hi`, `lo`'s zero padding kept)
//! reparse to the same parts; errors are one short line (they carry no copy of the text).
#![no_main]

use gpu_affinity::ranges::{self, Limits, Range};
use libfuzzer_sys::fuzz_target;

fn render(parts: &[Range]) -> String {
    let part = |r: &Range| {
        let lo = format!("{:0w$}", r.lo, w = r.width);
        if r.lo == r.hi {
            lo
        } else {
            format!("{lo}-{}", r.hi)
        }
    };
    parts.iter().map(part).collect::<Vec<_>>().join(",")
}

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<9>() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let [a, b, c, d, e, f, g, h, flags] = *head;
    let limits = Limits {
        max_value: u32::from_le_bytes([a, b, c, d]),
        // Up to 2^32 values: a range can span that many, and the sum must not wrap.
        max_count: u64::from(u32::from_le_bytes([e, f, g, h])) + u64::from(flags >> 1),
    };
    let allow_empty = flags & 1 == 1;
    match ranges::parse(text, limits, allow_empty) {
        Ok(parts) => {
            let mut count = 0u64;
            for r in &parts {
                assert!(r.lo <= r.hi && r.hi <= limits.max_value, "{text:?}: {r:?}");
                assert!(r.width >= 1, "{text:?}: {r:?}");
                count += r.len();
            }
            assert!(count <= limits.max_count, "{text:?}: {count} values");
            if !parts.is_empty() {
                let again = render(&parts);
                assert_eq!(
                    ranges::parse(&again, limits, false).as_ref(),
                    Ok(&parts),
                    "{text:?} -> {again:?}"
                );
            }
        }
        Err(e) => {
            let line = e.to_string();
            assert!(
                !line.contains(['\n', '\r']) && line.len() <= 80,
                "error is not one short line: {line:?}"
            );
        }
    }
});
