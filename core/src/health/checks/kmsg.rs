//! XIDs in the kernel log: `gpu.xid`, judged by the XID policy (`xid-policy.toml`), with
//! warnings for records that only look like XIDs and for records a flood made the reader
//! lose.

use super::{Ctx, Finding, Judgement, gpu_subject, in_scope, warning};
use crate::health::Class;
use crate::health::xid::{KmsgNotes, XidAction};

pub(super) fn xid(cx: &Ctx) -> Judgement {
    let (inputs, scope) = (cx.inputs, cx.scope);
    let xids = need!(&inputs.xids, true);
    let found = xids
        .iter()
        .filter(|x| in_scope(scope, Some(x.gpu)))
        .filter(|x| scope.xids_after.is_none_or(|after| x.seq > after))
        .filter_map(|x| {
            let v = cx.policy.verdict(x);
            let class = match v.action {
                XidAction::Drain => Class::Drain,
                XidAction::Warn => Class::Warn,
                XidAction::Ignore => return None,
            };
            Some(Finding {
                code: format!("GPU_XID_{}", x.code),
                subject: gpu_subject(Some(x.gpu)),
                evidence: format!(
                    "XID {} on {} (kmsg seq {}){}{}",
                    x.code,
                    x.gpu,
                    x.seq,
                    v.decoded.map_or(String::new(), |d| format!(": {d}")),
                    v.resolution
                        .map_or(String::new(), |r| format!(", catalog {r}"))
                ),
                class: Some(class),
                repair: v.repair,
            })
        })
        .chain(kmsg_warnings(&inputs.kmsg_notes))
        .collect();
    Judgement::Found(found)
}

/// `gpu.xid`'s warnings: records that quote an XID without being the driver's (a job
/// user's process name, a user-space write), and records a flood made the reader lose.
fn kmsg_warnings(notes: &KmsgNotes) -> Vec<Finding> {
    let mut out = Vec::new();
    if notes.lookalikes > 0 {
        out.push(warning(
            "KMSG_XID_LOOKALIKE",
            None,
            format!(
                "{} kernel-log records quote an XID but are not the driver's record (a process name or a user-space write; first at kmsg seq {}); not counted",
                notes.lookalikes,
                notes.first_lookalike.unwrap_or(0)
            ),
        ));
    }
    if notes.lost > 0 {
        out.push(warning(
            "KMSG_FLOOD",
            None,
            format!(
                "{} kernel-log records were lost while reading (a flood of messages, or more than the read takes); any XID among them was not seen",
                notes.lost
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::health::tests::{gpu0, healthy, run};
    use crate::health::xid::{KmsgNotes, XidEvent, XidPolicy};
    use crate::health::*;

    #[test]
    fn the_epilog_counts_only_xids_after_the_jobs_prolog() {
        let (mut inputs, expect) = healthy();
        let g = gpu0(&inputs);
        inputs.xids = Ok(vec![XidEvent {
            seq: 40,
            gpu: g,
            code: 79,
            detail: None,
        }]);
        let epilog = |after: Option<u64>| {
            let scope = Scope {
                after_job: true,
                xids_after: after,
                ..Scope::default()
            };
            let prev = PassState::default();
            evaluate(&inputs, &expect, &XidPolicy::embedded(), &scope, &prev).0
        };
        // Logged before the job's prolog read the log (seq 40 <= 40): not this job's.
        assert_eq!(epilog(Some(40)).verdict, Verdict::Ok);
        // Logged during the job, or no mark (since boot): drains.
        assert_eq!(epilog(Some(39)).verdict, Verdict::Drain);
        assert_eq!(epilog(None).verdict, Verdict::Drain);
    }

    #[test]
    fn xid_lookalikes_and_a_flood_warn_and_never_drain() {
        let (mut inputs, expect) = healthy();
        inputs.kmsg_notes = KmsgNotes {
            lookalikes: 3,
            first_lookalike: Some(17),
            lost: 40,
        };
        let r = run(&inputs, &expect);
        assert_eq!(r.verdict, Verdict::Warn, "{}", r.summary());
        let xid = r
            .checks
            .iter()
            .find(|c| c.id == CheckId::GpuXid)
            .expect("gpu.xid");
        assert!(
            xid.evidence.contains("3 kernel-log records quote an XID"),
            "{}",
            xid.evidence
        );
        assert!(
            xid.evidence.contains("first at kmsg seq 17"),
            "{}",
            xid.evidence
        );
        assert!(
            xid.evidence.contains("40 kernel-log records were lost"),
            "{}",
            xid.evidence
        );
        assert_eq!(xid.class, Class::Warn);
    }
}
