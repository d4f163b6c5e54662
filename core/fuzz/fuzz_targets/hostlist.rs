//! `slurm::hostlist::expand` / `contains` (gres.conf's `NodeName=` and `File=` lists) and
//! `compress` / `compress_sorted`. Properties: at most `MAX_NAMES` names and `MAX_BYTES`
//! bytes of them, each name bounded by the text's length (a bracket prints at most a
//! `u32`'s ten digits or its own zero padding); no name holds a comma, a bracket or is
//! empty, so the names joined with commas expand to themselves; `contains` agrees with
//! `expand`; errors are one line. Compression: `expand(compress(x)) == x` for the
//! names of every list that expands, and for the input's own lines as names (bounded by
//! the input: at most one name a line); `compress_sorted` gives the sorted set.
#![no_main]

use gpu_affinity::slurm::hostlist::{self, MAX_BYTES, MAX_NAMES};
use libfuzzer_sys::fuzz_target;

/// `expand(compress(names)) == names`, and `compress_sorted` is the sorted set.
fn round_trips(names: &[impl AsRef<str> + std::fmt::Debug]) {
    // No names compress to "", which is no hostlist (expand refuses it).
    if names.is_empty() {
        return;
    }
    let Ok(compressed) = hostlist::compress(names) else {
        return;
    };
    let back = hostlist::expand(&compressed).expect("compress writes a hostlist");
    let want: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
    assert_eq!(back, want, "{names:?} -> {compressed:?}");
    // The 23.11+ form (text after a bracket) round-trips too.
    let later = hostlist::compress_for(names, hostlist::Form::TextAfterBracket)
        .expect("the same names compress");
    let back = hostlist::expand(&later).expect("compress_for writes a hostlist");
    assert_eq!(back, want, "{names:?} -> {later:?}");
    let sorted = hostlist::compress_sorted(names).expect("the same names compress sorted");
    let mut set = hostlist::expand(&sorted).expect("compress_sorted writes a hostlist");
    let mut want: Vec<String> = want.iter().map(|n| (*n).to_string()).collect();
    want.sort();
    want.dedup();
    set.sort();
    set.dedup();
    assert_eq!(set, want, "{names:?} -> {sorted:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The input's lines as names (compress refuses what no hostlist can hold).
    round_trips(&text.lines().collect::<Vec<_>>());
    match hostlist::expand(text) {
        Ok(names) => {
            assert!(names.len() as u64 <= MAX_NAMES, "{} names", names.len());
            // Each bracket is at least "[0]" (3 bytes) and prints at most 10 digits or its
            // own width, so a name is never more than 4x the text.
            let bound = 4 * text.len();
            for n in &names {
                assert!(!n.is_empty(), "{text:?}: an empty name");
                assert!(
                    !n.contains([',', '[', ']', ' ', '\t', '\n']),
                    "{text:?}: name {n:?}"
                );
                assert!(n.len() <= bound, "{text:?}: name of {} bytes", n.len());
            }
            let bytes: usize = names.iter().map(String::len).sum();
            assert!(bytes <= MAX_BYTES, "{text:?}: {bytes} bytes of names");
            let joined = names.join(",");
            let again = hostlist::expand(&joined);
            assert_eq!(again.as_ref(), Ok(&names), "{text:?} -> {joined:?}");
            if let Some(first) = names.first() {
                assert_eq!(hostlist::contains(text, first), Ok(true), "{text:?}");
            }
            round_trips(&names);
        }
        Err(e) => {
            let line = e.to_string();
            assert!(
                !line.contains(['\n', '\r']),
                "error is not one line: {line:?}"
            );
            assert!(hostlist::contains(text, "n1").is_err());
        }
    }
});
