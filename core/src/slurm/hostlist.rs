//! Slurm hostlists: `name[1-3,7]suffix` and comma lists of such names, as gres.conf
//! writes node names (`NodeName=gpu[01-16]`) and device files (`File=/dev/nvidia[0-3]`).
//!
//! Expansion keeps the order written (Slurm's hostlist_shift does too; gres.conf's
//! device order is Slurm's GPU numbering) and zero padding (`[01-03]` -> 01, 02, 03).
//! Brackets use core's one range-list rule ([`crate::ranges`]).

use crate::ranges::{self, Limits};

/// Most names one hostlist may expand to (a node line, a device list).
pub const MAX_NAMES: u64 = 1 << 16;

/// Most bytes one hostlist's names may hold together: `MAX_NAMES` device paths of 256
/// bytes. The name count alone does not bound memory: a 1 MiB gres.conf line
/// `NodeName=n[0-65535]<1 MiB of suffix>` would ask for 64 GiB.
pub const MAX_BYTES: usize = 1 << 24;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("unbalanced brackets")]
    Brackets,
    #[error("bad range in brackets: {0}")]
    Range(#[from] ranges::RangeError),
    #[error("expands to more than {MAX_NAMES} names")]
    TooMany,
    #[error("expands to more than {MAX_BYTES} bytes of names")]
    TooLong,
    #[error("empty name")]
    Empty,
}

/// Expand a hostlist into its names, in order.
pub fn expand(text: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    // Bytes in `out`; with the partial names of the item being expanded (prefixes of
    // its final names) checked against MAX_BYTES before each allocation.
    let mut out_bytes = 0usize;
    for item in split_top(text.trim())? {
        let item = item.trim();
        if item.is_empty() {
            return Err(HostlistError::Empty);
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while let Some(open) = rest.find('[') {
            let close = rest[open..].find(']').ok_or(HostlistError::Brackets)? + open;
            let prefix = &rest[..open];
            let limits = Limits {
                max_value: u32::MAX,
                max_count: MAX_NAMES,
            };
            let parts = ranges::parse(&rest[open + 1..close], limits, false)?;
            let mut next = Vec::new();
            let mut next_bytes = 0usize;
            for name in &names {
                for r in &parts {
                    for v in r.lo..=r.hi {
                        let n = format!("{name}{prefix}{v:0width$}", width = r.width);
                        next_bytes += n.len();
                        next.push(n);
                        if (next.len() + out.len()) as u64 > MAX_NAMES {
                            return Err(HostlistError::TooMany);
                        }
                        if out_bytes + next_bytes > MAX_BYTES {
                            return Err(HostlistError::TooLong);
                        }
                    }
                }
            }
            names = next;
            rest = &rest[close + 1..];
        }
        if rest.contains(']') {
            return Err(HostlistError::Brackets);
        }
        let item_bytes = names.iter().map(String::len).sum::<usize>() + names.len() * rest.len();
        out_bytes += item_bytes;
        if out_bytes > MAX_BYTES {
            return Err(HostlistError::TooLong);
        }
        out.extend(names.into_iter().map(|n| n + rest));
    }
    Ok(out)
}

/// Whether `name` is one of the hostlist's names.
pub fn contains(text: &str, name: &str) -> Result<bool, HostlistError> {
    Ok(expand(text)?.iter().any(|n| n == name))
}

/// Split at commas outside brackets.
fn split_top(text: &str) -> Result<Vec<&str>, HostlistError> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0u32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '[' => {
                if depth > 0 {
                    return Err(HostlistError::Brackets);
                }
                depth = 1;
            }
            ']' => {
                if depth == 0 {
                    return Err(HostlistError::Brackets);
                }
                depth = 0;
            }
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Brackets);
    }
    out.push(&text[start..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_in_written_order_with_padding() {
        assert_eq!(
            expand("/dev/nvidia[3,1-2]").expect("valid"),
            vec!["/dev/nvidia3", "/dev/nvidia1", "/dev/nvidia2"]
        );
        assert_eq!(
            expand("gpu[08-10],login1").expect("valid"),
            vec!["gpu08", "gpu09", "gpu10", "login1"]
        );
        assert_eq!(
            expand("r[1-2]n[1-2]").expect("valid"),
            vec!["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert!(contains("node[1-4]", "node3").expect("valid"));
        assert!(!contains("node[1-4]", "node5").expect("valid"));
    }

    #[test]
    fn bad_lists_are_errors_and_bounded() {
        for bad in ["n[1-2", "n1-2]", "n[[1]]", "n[2-1]", "n[x]", "a,,b", ""] {
            assert!(expand(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            expand("n[0-4294967295]"),
            Err(HostlistError::Range(ranges::RangeError::TooMany {
                max: MAX_NAMES
            }))
        );
        assert_eq!(expand("a[0-999]b[0-999]"), Err(HostlistError::TooMany));
    }

    /// Found while writing the `hostlist` fuzz target's bounded-output property: the
    /// name count was bounded, the bytes were not (a long suffix or zero padding on every
    /// one of 65536 names).
    #[test]
    fn the_names_bytes_are_bounded() {
        let suffix = "x".repeat(1 << 20);
        assert_eq!(
            expand(&format!("n[0-65535]{suffix}")),
            Err(HostlistError::TooLong)
        );
        let padded = format!("n[{}-65535]", "0".repeat(1000));
        assert_eq!(expand(&padded), Err(HostlistError::TooLong));
        let long = format!("{}[0-255]", "p".repeat(255));
        assert_eq!(expand(&long).map(|n| n.len()), Ok(256));
    }
}
