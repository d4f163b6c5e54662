//! Which profile a node gets: the facts detection computes, each profile's rules, and
//! the choice among the profiles that match.

use super::{MatchRules, Profile, Profiles};
use crate::model::NicKind;

impl MatchRules {
    fn specificity(&self) -> usize {
        usize::from(self.vendor.is_some())
            + usize::from(!self.family.is_empty())
            + usize::from(!self.instance.is_empty())
            + usize::from(!self.gpu.is_empty())
            + usize::from(!self.nic.is_empty())
            + usize::from(!self.fabric.is_empty())
    }
}

/// The facts profiles are matched against (computed by detection).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchFacts {
    pub vendor: String,
    pub family: Option<String>,
    pub instance: Option<String>,
    pub gpu_ids: Vec<(u16, u16)>,
    pub fabric_nic_ids: Vec<(u16, u16)>,
    pub fabric_kinds: Vec<NicKind>,
}

impl MatchRules {
    pub fn matches(&self, f: &MatchFacts) -> bool {
        let vendor = self
            .vendor
            .as_ref()
            .is_none_or(|v| v.eq_ignore_ascii_case(&f.vendor));
        let family = self.family.is_empty()
            || f.family
                .as_ref()
                .is_some_and(|fam| self.family.iter().any(|x| x == fam));
        let instance = self.instance.is_empty()
            || f.instance
                .as_ref()
                .is_some_and(|i| self.instance.iter().any(|p| glob(p, i)));
        let gpu = self.gpu.is_empty()
            || f.gpu_ids
                .iter()
                .any(|(v, d)| self.gpu.iter().any(|p| p.matches(*v, *d)));
        let nic = self.nic.is_empty()
            || f.fabric_nic_ids
                .iter()
                .any(|(v, d)| self.nic.iter().any(|p| p.matches(*v, *d)));
        let fabric = self.fabric.is_empty()
            || self.fabric.iter().any(|k| match k {
                None => f.fabric_kinds.is_empty(),
                Some(kind) => f.fabric_kinds.contains(kind),
            });
        vendor && family && instance && gpu && nic && fabric
    }
}

/// `*` matches any run of characters; everything else matches itself.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == text;
    };
    if parts.len() == 1 {
        return pattern == text;
    }
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl Profiles {
    /// The best profile for these facts: highest priority, then most specific rules,
    /// then name (so the choice never depends on file order).
    pub fn select(&self, facts: &MatchFacts) -> Option<&Profile> {
        self.list
            .iter()
            .filter(|p| p.rules.matches(facts))
            .max_by(|a, b| {
                (a.priority, a.rules.specificity())
                    .cmp(&(b.priority, b.rules.specificity()))
                    .then_with(|| b.name.cmp(&a.name))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_patterns() {
        assert!(glob("p5.*", "p5.48xlarge"));
        assert!(!glob("p5.*", "p5en.48xlarge"));
        assert!(glob("p5*", "p5en.48xlarge"));
        assert!(glob("*H100*", "Standard_ND96isr_H100_v5"));
        assert!(glob("exact", "exact"));
        assert!(!glob("a*b*c", "abx"));
        assert!(glob("a*b*c", "axxbyyc"));
    }
}
