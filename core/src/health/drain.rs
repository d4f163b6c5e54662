//! Drain reasons and the drain/resume policy (Invariant 5), pure: the binaries read the
//! node's row and its partitions' rows with one bounded `sinfo`, and run what [`decide`] says.
//!
//! Rules, in the order [`decide`] applies them:
//! - a node whose row cannot be read is never changed;
//! - a reason the suite did not write is never overwritten, never resumed;
//! - before draining, the fleet circuit breaker: when the share of the partition's nodes that
//!   are out of service (drain, fail, down) with the suite's reason is at or above
//!   `max_share`, hold back (a bad check or a
//!   driver update must never drain a cluster);
//! - resume only the suite's own reason, after `resume_after` consecutive clean passes.

use super::parse::NodeRow;
use super::xid::Repair;
use super::{Fault, Outcome, PREFIX, Report, Verdict};

/// Slurm stores reasons of any length, but `sinfo -R` shows 20 characters by default and
/// HyperPod/slurm-gcp match on the start: keep the reason one short line.
pub const MAX_REASON: usize = 120;

/// How a drain is handed to the cloud's repair machinery (`[drain] handoff`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Handoff {
    /// `State=DRAIN Reason="gpu-affinity: CODE subject"`.
    #[default]
    Drain,
    /// SageMaker HyperPod: `State=FAIL Reason="Action:Reboot"` or `"Action:Replace"`,
    /// exactly: HyperPod's recovery matches the whole reason, case-sensitive, and
    /// silently ignores anything more (a suffix, trailing blanks; AWS's HyperPod Slurm
    /// guide and its debugging notes). The finding itself goes to the log and the JSON.
    Hyperpod,
    /// slurm-gcp: `State=DRAIN` with a reason of exactly `XID`, `PERFORMANCE`, `SDC` or
    /// `unspecified`, which slurmsync reports as a faulty host.
    SlurmGcp,
    /// Azure: the suite's own reason, and the health program reports the impact to
    /// Azure's Impact Reporting as AzNHC's triggerGHR does (health/handoff.rs).
    Azure,
    /// OCI HPC stack: the suite's own reason, and the health program writes the stack's
    /// passive health-check record its `mgmt` reads (health/handoff.rs).
    Oci,
}

impl Handoff {
    pub const NAMES: [(Handoff, &'static str); 5] = [
        (Handoff::Drain, "drain"),
        (Handoff::Hyperpod, "hyperpod"),
        (Handoff::SlurmGcp, "slurm-gcp"),
        (Handoff::Azure, "azure"),
        (Handoff::Oci, "oci"),
    ];

    pub fn parse(word: &str) -> Option<Handoff> {
        Handoff::NAMES
            .iter()
            .find(|(_, n)| *n == word)
            .map(|(h, _)| *h)
    }

    /// Whether `reason` is one the suite writes in this mode. HyperPod's and slurm-gcp's
    /// words carry no prefix, so they are counted for the breaker but never resumed (the
    /// cloud reboots or replaces such a node; see [`decide`]).
    pub fn is_own(self, reason: &str) -> bool {
        let reason = reason.trim();
        reason.starts_with(PREFIX)
            || match self {
                Handoff::Drain | Handoff::Azure | Handoff::Oci => false,
                Handoff::Hyperpod => HYPERPOD_WORDS.contains(&reason),
                Handoff::SlurmGcp => SLURM_GCP_WORDS.contains(&reason),
            }
    }
}

/// The reasons slurm-gcp's slurmsync treats as a faulty host.
pub const SLURM_GCP_WORDS: [&str; 4] = ["XID", "PERFORMANCE", "SDC", "unspecified"];

/// The reasons HyperPod's recovery acts on, whole.
pub const HYPERPOD_WORDS: [&str; 2] = ["Action:Reboot", "Action:Replace"];

/// `gpu-affinity: GPU_XID_79 gpu=0000:53:00.0`.
pub fn reason(outcome: &Outcome) -> String {
    let mut text = match &outcome.subject {
        Some(s) => format!("{PREFIX} {} {s}", outcome.code),
        None => format!("{PREFIX} {}", outcome.code),
    };
    // Reasons are one line of printable ASCII: subjects come from sysfs names.
    text.retain(|c| c.is_ascii_graphic() || c == ' ');
    text.truncate(MAX_REASON);
    text
}

/// What to tell Slurm about this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `scontrol update nodename=N state=STATE reason=REASON`.
    Set { state: &'static str, reason: String },
    /// `scontrol update nodename=N state=resume`.
    Resume,
    /// Nothing to do, and why (also why a drain was not written).
    Leave(Leave),
    /// The circuit breaker held a drain back: said loudly (log, JSON, metric).
    HeldBack(String),
}

/// Why a pass changes nothing in Slurm. Its text is the log's and the JSON's evidence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Leave {
    /// sinfo failed: the node's state is unknown.
    #[error("node state unreadable (sinfo failed): changing nothing")]
    StateUnreadable,
    /// sinfo does not show this node.
    #[error("node {0} not in sinfo: changing nothing")]
    NotInSinfo(String),
    /// A drain verdict on a node whose reason someone else wrote (Invariant 5).
    #[error("reason '{0}' is not the suite's: kept")]
    ForeignReason(String),
    /// A drain verdict on a node the suite drained with this very reason.
    #[error("already drained by the suite")]
    AlreadyDrained,
    /// A clean prolog/epilog pass: only the health program resumes.
    #[error("prolog/epilog never resume")]
    NeverResume,
    /// A clean pass on a node someone else drained.
    #[error("drained by someone else: left alone")]
    DrainedByOther,
    /// A clean pass and nothing to undo.
    #[error("healthy")]
    Healthy,
    /// HyperPod's or slurm-gcp's bare reason words: no owner, never resumed.
    #[error("the cloud's reason words have no owner: not resumed")]
    OwnerlessWords,
    /// A clean pass on the suite's own drain, before `[drain] resume_after` of them.
    #[error("clean pass {clean_passes} of {resume_after} before resuming")]
    Waiting {
        clean_passes: u32,
        resume_after: u32,
    },
}

impl Leave {
    /// The node's state could not be read, so the suite could not drain it: on a drain
    /// verdict the prolog and epilog then fail (Slurm drains the node under its own
    /// reason) rather than let the job run on a faulty node, and say why.
    pub fn state_unknown(&self) -> bool {
        matches!(self, Leave::StateUnreadable | Leave::NotInSinfo(_))
    }
}

/// The drain policy knobs (`[drain]`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DrainPolicy {
    pub max_share: f64,
    pub resume_after: u32,
    pub handoff: Handoff,
}

impl Default for DrainPolicy {
    fn default() -> Self {
        DrainPolicy {
            max_share: 0.1,
            resume_after: 3,
            handoff: Handoff::Drain,
        }
    }
}

/// The state/reason pair for a drain verdict in the configured hand-off mode.
pub fn drain_action(report: &Report, handoff: Handoff) -> Option<Action> {
    let deciding = report
        .deciding()
        .filter(|_| report.verdict == Verdict::Drain)?;
    let own = reason(deciding);
    Some(match handoff {
        // Azure's and OCI's repair reads the report or the record, not the reason.
        Handoff::Drain | Handoff::Azure | Handoff::Oci => Action::Set {
            state: "drain",
            reason: own,
        },
        Handoff::Hyperpod => Action::Set {
            state: "fail",
            reason: match deciding.repair {
                Repair::Replace => "Action:Replace",
                Repair::Reset | Repair::Reboot => "Action:Reboot",
            }
            .to_string(),
        },
        Handoff::SlurmGcp => Action::Set {
            state: "drain",
            reason: match deciding.fault {
                Fault::Gpu => "XID",
                Fault::Performance => "PERFORMANCE",
                Fault::Other => "unspecified",
            }
            .to_string(),
        },
    })
}

fn drained(state: &str) -> bool {
    let s = state
        .trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-'])
        .to_ascii_lowercase();
    s.contains("drain") || s.starts_with("fail") || s.starts_with("down")
}

/// Decide from this pass's report, the sinfo rows (all partitions of all nodes), the node's
/// name, and how many clean passes in a row the node has had (this one included).
/// `may_resume`: only the health program resumes; the prolog and epilog only drain.
pub fn decide(
    report: &Report,
    rows: Option<&[NodeRow]>,
    node: &str,
    policy: &DrainPolicy,
    clean_passes: u32,
    may_resume: bool,
) -> Action {
    let Some(rows) = rows else {
        return Action::Leave(Leave::StateUnreadable);
    };
    let mine: Vec<&NodeRow> = rows.iter().filter(|r| r.name == node).collect();
    let Some(row) = mine.first() else {
        return Action::Leave(Leave::NotInSinfo(node.to_string()));
    };
    let own_reason = row
        .reason
        .as_deref()
        .is_some_and(|r| policy.handoff.is_own(r));
    let foreign = row.reason.is_some() && !own_reason;
    // The suite's reason on a node back in service is a leftover, not a drain: Slurm 24.11
    // without an accounting plugin keeps the reason across `state=resume` (its
    // clusteracct_storage_g_node_up, which clears it, returns early for a no-op plugin;
    // measured). Such a node is neither resumed again nor counted by the breaker.
    let own_drain = own_reason && drained(&row.state);
    match drain_action(report, policy.handoff) {
        Some(action) => {
            if foreign {
                return Action::Leave(Leave::ForeignReason(row.reason.clone().unwrap_or_default()));
            }
            if own_drain {
                // Already drained by the suite: rewriting the reason would only churn it.
                return match &action {
                    Action::Set { reason, .. }
                        if row.reason.as_deref() != Some(reason.as_str()) =>
                    {
                        action
                    }
                    _ => Action::Leave(Leave::AlreadyDrained),
                };
            }
            let partitions: Vec<&str> = mine.iter().map(|r| r.partition.as_str()).collect();
            let mut peers: Vec<&NodeRow> = rows
                .iter()
                .filter(|r| partitions.contains(&r.partition.as_str()))
                .collect();
            peers.sort_by(|a, b| a.name.cmp(&b.name));
            peers.dedup_by(|a, b| a.name == b.name);
            let owned = peers
                .iter()
                .filter(|r| {
                    r.name != node
                        && drained(&r.state)
                        && r.reason
                            .as_deref()
                            .is_some_and(|x| policy.handoff.is_own(x))
                })
                .count();
            let share = owned as f64 / peers.len().max(1) as f64;
            if owned > 0 && share >= policy.max_share {
                return Action::HeldBack(format!(
                    "circuit breaker: {owned} of {} nodes in {} already carry the suite's reason ({:.0}% >= max_share {:.0}%); not draining",
                    peers.len(),
                    partitions.join(","),
                    share * 100.0,
                    policy.max_share * 100.0
                ));
            }
            action
        }
        None if !may_resume => Action::Leave(Leave::NeverResume),
        None if foreign => Action::Leave(Leave::DrainedByOther),
        // HyperPod's and slurm-gcp's words carry no owner; the cloud repairs such a node.
        None if own_reason && !own_drain => Action::Leave(Leave::Healthy),
        None if own_reason
            && !row
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with(PREFIX) || r.contains(PREFIX)) =>
        {
            Action::Leave(Leave::OwnerlessWords)
        }
        None if own_reason && clean_passes >= policy.resume_after => Action::Resume,
        None if own_reason => Action::Leave(Leave::Waiting {
            clean_passes,
            resume_after: policy.resume_after,
        }),
        None => Action::Leave(Leave::Healthy),
    }
}
