//! CPU sets and the Linux cpulist / hex-mask text forms.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::ranges;

/// A set of logical CPU ids, always kept sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet(BTreeSet<u32>);

/// Why a cpulist or CPU mask could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpuSetError {
    #[error("bad cpulist {0:?}: expected e.g. \"0-47,96-143\"")]
    BadList(String),
    #[error("bad CPU mask {0:?}: expected comma-separated hex words, e.g. \"ffffffff,00000000\"")]
    BadMask(String),
}

/// CPU ids read from text are below this (65536 CPUs), so a hostile "0-4294967295"
/// cannot exhaust memory. One bound for both forms: every set a cpulist gives has a mask
/// form that parses back (2048 words).
pub const MAX_CPU_ID: u32 = 1 << 16;

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parse a Linux cpulist ("0-3,8,10-11"); empty or whitespace-only text is the empty set.
    /// The syntax and bounds are core's one range-list rule ([`crate::ranges`]).
    pub fn parse_list(text: &str) -> Result<Self, CpuSetError> {
        let limits = ranges::Limits {
            // Ids below MAX_CPU_ID, the bound the mask form keeps too.
            max_value: MAX_CPU_ID - 1,
            max_count: u64::from(MAX_CPU_ID),
        };
        let parts = ranges::parse(text.trim(), limits, true)
            .map_err(|_| CpuSetError::BadList(text.to_string()))?;
        Ok(Self(ranges::values(&parts).collect()))
    }

    /// Parse a kernel/NCCL CPU mask: comma-separated 32-bit hex words, most significant first
    /// (the form of /sys/.../cpumap and NCCL's `affinity=` attribute).
    pub fn parse_mask(text: &str) -> Result<Self, CpuSetError> {
        let bad = || CpuSetError::BadMask(text.to_string());
        let words: Vec<&str> = text.trim().split(',').map(str::trim).collect();
        if words.iter().any(|w| w.is_empty() || w.len() > 8) {
            return Err(bad());
        }
        if (words.len() as u64) * 32 > u64::from(MAX_CPU_ID) {
            return Err(bad());
        }
        let mut set = BTreeSet::new();
        for (i, word) in words.iter().rev().enumerate() {
            let value = u32::from_str_radix(word, 16).map_err(|_| bad())?;
            for bit in 0..32 {
                if value & (1 << bit) != 0 {
                    set.insert(i as u32 * 32 + bit);
                }
            }
        }
        Ok(Self(set))
    }

    /// The kernel's mask form: 32-bit hex words, most significant first, comma separated.
    pub fn to_mask(&self) -> String {
        let words = self.0.last().map_or(1, |max| *max as usize / 32 + 1);
        let mut out = vec![0u32; words];
        for cpu in &self.0 {
            out[*cpu as usize / 32] |= 1 << (cpu % 32);
        }
        out.iter()
            .rev()
            .map(|w| format!("{w:08x}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn insert(&mut self, cpu: u32) -> bool {
        self.0.insert(cpu)
    }
    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }
    pub fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }
    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        self.0.is_disjoint(&other.0)
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// Formats as a Linux cpulist ("0-47,96-143"); the empty set is "".
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.0.iter().copied().peekable();
        while let Some(lo) = iter.next() {
            let mut hi = lo;
            while iter.peek() == Some(&(hi + 1)) {
                hi += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_list(s)
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse_list(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_round_trip() {
        let set = CpuSet::parse_list("0-47,96-143").expect("valid");
        assert_eq!(set.len(), 96);
        assert_eq!(set.to_string(), "0-47,96-143");
        assert_eq!(CpuSet::parse_list("").expect("empty").to_string(), "");
        assert_eq!(
            CpuSet::parse_list("3,1,2\n").expect("valid").to_string(),
            "1-3"
        );
    }

    #[test]
    fn bad_lists_are_errors() {
        for bad in ["a", "3-1", "1-", "0-99999999", "1,,x"] {
            assert!(CpuSet::parse_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mask_matches_nccl_affinity() {
        // p4d NUMA 0 in aws-ofi-nccl's topology file: CPUs 0-23 and 48-71.
        let set = CpuSet::parse_mask("000000ff,ffff0000,00ffffff").expect("valid");
        assert_eq!(set.to_string(), "0-23,48-71");
        assert_eq!(set.to_mask(), "000000ff,ffff0000,00ffffff");
        assert!(CpuSet::parse_mask("xyz").is_err());
        assert!(CpuSet::parse_mask("").is_err());
    }

    /// Found with the `cpulist` fuzz target's round-trip property: the list form took CPU
    /// 65536, whose mask (2049 words) the mask form refuses. The largest id both take.
    #[test]
    fn list_and_mask_share_one_bound() {
        assert!(CpuSet::parse_list("65536").is_err());
        assert!(CpuSet::parse_list("0-65536").is_err());
        let top = CpuSet::parse_list("65535").expect("the largest id");
        assert_eq!(CpuSet::parse_mask(&top.to_mask()), Ok(top));
    }
}
