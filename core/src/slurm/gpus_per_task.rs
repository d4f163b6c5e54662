//! `SLURM_GPUS_PER_TASK`: what `--gpus-per-task=[type:]N` (a comma list of them for
//! several types) leaves in a step's environment. Slurm passes the option's own text, so
//! a typed request reads `h100:2`; the count is what follows the last `:`.
//!
//! Pure, so it is fuzzed like every parser; the plugin reads the variable from the job
//! environment, where the user can put any text.

/// At most this much of a bad value is quoted back: the value is the user's own text.
const QUOTED_CHARS: usize = 64;

/// A value that is not `[type:]count[,...]`.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("SLURM_GPUS_PER_TASK='{0}' is not [type:]count")]
pub struct BadGpusPerTask(String);

/// GPUs per task: the counts of every type added up (saturating). `None` for an empty
/// value or a total of 0 (no per-task request).
pub fn parse(value: &str) -> Result<Option<u32>, BadGpusPerTask> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    let mut total: u32 = 0;
    for part in value.split(',') {
        let count = part.rsplit_once(':').map_or(part, |(_, n)| n).trim();
        match count.parse::<u32>() {
            Ok(n) => total = total.saturating_add(n),
            Err(_) => {
                let quoted: String = value.chars().take(QUOTED_CHARS).collect();
                let more = if quoted.len() < value.len() {
                    "..."
                } else {
                    ""
                };
                return Err(BadGpusPerTask(format!("{quoted}{more}")));
            }
        }
    }
    Ok((total > 0).then_some(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_typed_counts() {
        assert_eq!(parse("2"), Ok(Some(2)));
        assert_eq!(parse("h100:2"), Ok(Some(2)));
        assert_eq!(parse(" nvidia_h100_80gb_hbm3:4 "), Ok(Some(4)));
        assert_eq!(parse("a100:1,h100:1"), Ok(Some(2)));
        assert_eq!(parse("0"), Ok(None));
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("4294967295,1"), Ok(Some(u32::MAX)));
    }

    #[test]
    fn a_bad_value_is_named_and_a_long_one_cut_short() {
        for bad in ["h100", "h100:", "two", "h100:x", "-1", "1,"] {
            let e = parse(bad).expect_err(bad).to_string();
            assert_eq!(
                e,
                format!("SLURM_GPUS_PER_TASK='{bad}' is not [type:]count")
            );
        }
        let long = "x".repeat(10_000);
        let e = parse(&long).expect_err("long").to_string();
        assert!(e.len() < 120 && e.contains("xxx..."), "{e}");
    }
}
