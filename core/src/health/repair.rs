//! Repair escalation: reset, then reboot, then replace.
//!
//! A check names the repair its fault needs ([`Repair`]: the XID catalog's resolution,
//! or the counters' wear). A node that keeps failing after it was rebooted needs more
//! than another reboot. OCI's HPC healthchecks count the node's reboots (`last -x
//! reboot`) and escalate: a reboot within 2 h, or more than 5 in 24 h, turns a reboot
//! into a terminate-and-replace; for a GPU-reset fault, a reboot within 12 h or more than
//! 3 in 24 h does. The suite counts boots the same way, from the boot times its passes
//! saw (`btime` of /proc/stat), kept in the state dir.

use serde::{Deserialize, Serialize};

use super::Report;
use super::xid::Repair;

/// The boot times (unix seconds) the node's passes have seen, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Boots(Vec<u64>);

/// OCI's windows and counts.
const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;
/// A reboot repair escalates after a boot within this, or more than `REBOOT_DAY_MAX` a day.
const REBOOT_RECENT: u64 = 2 * HOUR;
const REBOOT_DAY_MAX: usize = 5;
/// A reset repair escalates after a boot within this, or more than `RESET_DAY_MAX` a day.
const RESET_RECENT: u64 = 12 * HOUR;
const RESET_DAY_MAX: usize = 3;

impl Boots {
    /// Boots kept: a day's worth at any rate a real node reboots.
    pub const MAX: usize = 32;

    /// Remember the boot that started at `btime` (every pass records the current one).
    pub fn record(&mut self, btime: u64) {
        // btime can move by a second between reads (it is derived from the clock).
        if self.0.iter().any(|&b| b.abs_diff(btime) <= 2) {
            return;
        }
        self.0.push(btime);
        self.0.sort_unstable();
        if self.0.len() > Self::MAX {
            let extra = self.0.len() - Self::MAX;
            self.0.drain(..extra);
        }
    }

    fn within(&self, now: u64, span: u64) -> usize {
        self.0
            .iter()
            .filter(|&&b| b <= now && now - b <= span)
            .count()
    }

    /// Keep the boots of `earlier` this pass did not see (a state written before).
    pub fn carry_over(&mut self, earlier: &Boots) {
        for &b in &earlier.0 {
            self.record(b);
        }
    }
}

/// /proc/stat's `btime N` line: when this boot started, in unix seconds.
pub fn btime(proc_stat: &str) -> Option<u64> {
    proc_stat.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next()? == "btime").then(|| words.next()?.parse().ok())?
    })
}

/// The repair `repair` becomes on a node that booted at `boots`, judged at `now`, and why
/// (`None`: as it was).
pub fn escalated(repair: Repair, boots: &Boots, now: u64) -> (Repair, Option<String>) {
    let (recent, day_max) = match repair {
        Repair::Replace => return (Repair::Replace, None),
        Repair::Reboot => (REBOOT_RECENT, REBOOT_DAY_MAX),
        Repair::Reset => (RESET_RECENT, RESET_DAY_MAX),
    };
    let in_recent = boots.within(now, recent);
    let in_day = boots.within(now, DAY);
    let why = if in_recent > 0 {
        format!("the node booted {} h ago", recent / HOUR)
    } else if in_day > day_max {
        format!("{in_day} boots in 24 h")
    } else {
        return (repair, None);
    };
    (
        Repair::Replace,
        Some(format!(
            "escalated to replace: {why} (within {} h)",
            recent / HOUR
        )),
    )
}

/// Escalate the repair of the outcome that decides the drain, saying so in its evidence.
pub fn escalate(report: &mut Report, boots: &Boots, now: u64) {
    let Some(deciding) = report.deciding().map(|d| d.id) else {
        return;
    };
    if let Some(outcome) = report.checks.iter_mut().find(|c| c.id == deciding) {
        let (repair, why) = escalated(outcome.repair, boots, now);
        if let Some(why) = why {
            outcome.repair = repair;
            outcome.evidence = if outcome.evidence.is_empty() {
                why
            } else {
                format!("{}; {why}", outcome.evidence)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn boots(ago_hours: &[u64]) -> Boots {
        let mut b = Boots::default();
        for h in ago_hours {
            b.record(NOW - h * HOUR);
        }
        b
    }

    #[test]
    fn btime_from_proc_stat() {
        let stat = "cpu  1 2 3\nintr 5\nbtime 1764633600\nprocesses 9\n";
        assert_eq!(btime(stat), Some(1_764_633_600));
        assert_eq!(btime("cpu 1\n"), None);
        assert_eq!(btime("btime x\n"), None);
    }

    #[test]
    fn a_reboot_escalates_after_a_recent_boot_or_many_in_a_day() {
        // Booted 30 h ago: a reboot is what it needs.
        assert_eq!(
            escalated(Repair::Reboot, &boots(&[30]), NOW),
            (Repair::Reboot, None)
        );
        // Booted an hour ago and failing again: replace.
        let (r, why) = escalated(Repair::Reboot, &boots(&[1]), NOW);
        assert_eq!(r, Repair::Replace);
        assert!(why.expect("why").contains("booted 2 h ago"));
        // Six boots in the day, none in the last 2 h: replace.
        let (r, why) = escalated(Repair::Reboot, &boots(&[3, 5, 8, 11, 15, 20]), NOW);
        assert_eq!(r, Repair::Replace);
        assert!(why.expect("why").contains("6 boots in 24 h"));
        // Five is still a reboot.
        assert_eq!(
            escalated(Repair::Reboot, &boots(&[3, 5, 8, 11, 15]), NOW).0,
            Repair::Reboot
        );
    }

    #[test]
    fn a_reset_escalates_on_oci_s_tighter_counts() {
        assert_eq!(
            escalated(Repair::Reset, &boots(&[13]), NOW).0,
            Repair::Reset
        );
        assert_eq!(
            escalated(Repair::Reset, &boots(&[11]), NOW).0,
            Repair::Replace
        );
        assert_eq!(
            escalated(Repair::Reset, &boots(&[13, 14, 15, 16]), NOW).0,
            Repair::Replace
        );
        assert_eq!(
            escalated(Repair::Replace, &Boots::default(), NOW),
            (Repair::Replace, None)
        );
    }

    #[test]
    fn boots_are_deduplicated_and_bounded() {
        let mut b = Boots::default();
        b.record(NOW);
        b.record(NOW + 1);
        assert_eq!(b.0.len(), 1, "btime jitter is one boot");
        for i in 0..100 {
            b.record(NOW + 10 * (i + 1));
        }
        assert_eq!(b.0.len(), Boots::MAX);
        assert_eq!(b.0.last(), Some(&(NOW + 1000)));
    }
}
