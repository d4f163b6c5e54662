//! Range lists ("0-3,8,10-11"): the one parser behind Linux cpulists ([`crate::cpuset`]),
//! Slurm's GPU id lists (`SLURM_STEP_GPUS`) and hostlist brackets (`nvidia[0-3,5]`).
//!
//! Every caller gets the same rules (decimal numbers, `lo-hi` with `lo <= hi`, parts
//! separated by commas, blanks around parts ignored) and the same bounds, so hostile
//! text costs bounded memory: a largest value and a largest number of values in all.

/// One `lo-hi` (or single `n`) part, as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub lo: u32,
    pub hi: u32,
    /// Digits of `lo` as written ("007" -> 3): hostlists keep zero padding.
    pub width: usize,
}

impl Range {
    pub fn len(&self) -> u64 {
        u64::from(self.hi - self.lo) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The limits a caller puts on one list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest value accepted.
    pub max_value: u32,
    /// Most values in all parts together (a range counts every value it spans).
    pub max_count: u64,
}

/// Why a range list was refused. Carries no copy of the text: callers name the input
/// themselves, and a hostile value is not echoed whole into a log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("part {part} is not a number or a lo-hi range")]
    Syntax { part: usize },
    #[error("part {part} has its high end below its low end")]
    Reversed { part: usize },
    #[error("part {part} exceeds the largest value {max}")]
    TooLarge { part: usize, max: u32 },
    #[error("more than {max} values")]
    TooMany { max: u64 },
}

/// Parse `text` into its parts, in the order written. Empty parts are skipped only when
/// `allow_empty` (the kernel writes "" for an empty cpulist; Slurm never writes ",,").
pub fn parse(text: &str, limits: Limits, allow_empty: bool) -> Result<Vec<Range>, RangeError> {
    let mut out = Vec::new();
    let mut count: u64 = 0;
    for (i, part) in text.split(',').map(str::trim).enumerate() {
        let part_no = i + 1;
        if part.is_empty() {
            if allow_empty {
                continue;
            }
            return Err(RangeError::Syntax { part: part_no });
        }
        let (lo_text, hi_text) = part.split_once('-').unwrap_or((part, part));
        let number = |s: &str| -> Result<u32, RangeError> {
            let s = s.trim();
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(RangeError::Syntax { part: part_no });
            }
            // All digits: a parse failure can only be overflow.
            s.parse::<u32>().map_err(|_| RangeError::TooLarge {
                part: part_no,
                max: limits.max_value,
            })
        };
        let (lo, hi) = (number(lo_text)?, number(hi_text)?);
        if hi < lo {
            return Err(RangeError::Reversed { part: part_no });
        }
        if hi > limits.max_value {
            return Err(RangeError::TooLarge {
                part: part_no,
                max: limits.max_value,
            });
        }
        let range = Range {
            lo,
            hi,
            width: lo_text.trim().len(),
        };
        count += range.len();
        if count > limits.max_count {
            return Err(RangeError::TooMany {
                max: limits.max_count,
            });
        }
        out.push(range);
    }
    Ok(out)
}

/// The values of `ranges`, in order (duplicates kept).
pub fn values(ranges: &[Range]) -> impl Iterator<Item = u32> + '_ {
    ranges.iter().flat_map(|r| r.lo..=r.hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        max_value: 100,
        max_count: 10,
    };

    #[test]
    fn parts_keep_their_order_and_width() {
        let r = parse("5, 0-2 ,007", L, false).expect("valid");
        assert_eq!(values(&r).collect::<Vec<_>>(), vec![5, 0, 1, 2, 7]);
        assert_eq!(r[2].width, 3);
    }

    #[test]
    fn bounds_and_syntax_are_errors() {
        assert_eq!(
            parse("3-1", L, false),
            Err(RangeError::Reversed { part: 1 })
        );
        assert_eq!(
            parse("1,101", L, false),
            Err(RangeError::TooLarge { part: 2, max: 100 })
        );
        assert_eq!(
            parse("0-5,0-5", L, false),
            Err(RangeError::TooMany { max: 10 })
        );
        assert_eq!(
            parse("99999999999", L, false),
            Err(RangeError::TooLarge { part: 1, max: 100 })
        );
        for bad in ["a", "1-", "-1", "+1", "1,,2", "1 2", ""] {
            assert!(parse(bad, L, false).is_err(), "{bad:?}");
        }
        assert_eq!(parse("", L, true), Ok(Vec::new()));
        assert_eq!(parse("1,,2", L, true).map(|r| r.len()), Ok(2));
    }
}
