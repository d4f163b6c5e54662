//! Pure evaluation: [`Inputs`] + [`Expect`] + the previous [`PassState`] -> a [`Report`] and the
//! next state. Every check of [`CHECKS`] yields exactly one outcome, in table order; the
//! checks themselves are [`super::checks`]' families.

use std::collections::BTreeMap;

use super::checks::{self, Ctx, Finding, Judgement};
use super::xid::{Repair, XidPolicy};
use super::{
    CHECKS, CheckDef, CheckId, Class, Expect, Gap, Inputs, Outcome, PassState, Report, Scope,
    Status, Verdict,
};

/// Evidence is for people and the JSON report; keep it to a readable size per check.
const MAX_EVIDENCE: usize = 600;

/// Evaluate one pass. Returns the report and the state the next pass compares against.
pub fn evaluate(
    inputs: &Inputs,
    expect: &Expect,
    policy: &XidPolicy,
    scope: &Scope,
    prev: &PassState,
) -> (Report, PassState) {
    let mut next = PassState {
        clean_passes: prev.clean_passes,
        job_kmsg: prev.job_kmsg.clone(),
        drains_held_back: prev.drains_held_back,
        boot_id: prev.boot_id.clone(),
        boots: prev.boots.clone(),
        handoff: prev.handoff.clone(),
        ..PassState::default()
    };
    let cx = Ctx {
        inputs,
        expect,
        policy,
        scope,
        prev,
    };
    let checks: Vec<Outcome> = CHECKS
        .iter()
        .map(|def| {
            let result = if scope.fast_only && !def.fast {
                Judgement::Skip("not in the prolog's fast pass".into())
            } else if matches!(
                def.id,
                CheckId::GpuLeftoverProcesses | CheckId::GpuLeftoverMemory
            ) && !scope.after_job
            {
                // Outside the epilog a running job's processes are expected, not left over.
                Judgement::Skip("only after a job (the epilog)".into())
            } else {
                checks::run(def, &cx, &mut next)
            };
            outcome(def, result)
        })
        .collect();
    let worst = |class: Class| checks.iter().any(|c| c.class == class && c.failed());
    let verdict = if worst(Class::Drain) {
        Verdict::Drain
    } else if worst(Class::Warn) {
        Verdict::Warn
    } else {
        Verdict::Ok
    };
    // Link counters carry over even when this pass did not read them (a prolog pass).
    if next.link_downed.is_empty() {
        next.link_downed = prev.link_downed.clone();
        next.strikes = prev.strikes.clone();
    }
    // So do the error counters' histories this pass did not read.
    next.counters.carry_over(&prev.counters);
    (Report { verdict, checks }, next)
}

fn outcome(def: &'static CheckDef, result: Judgement) -> Outcome {
    let base = |status, evidence: String| Outcome {
        id: def.id,
        tier: def.tier,
        class: def.class,
        status,
        evidence: bounded(evidence),
        code: def.code.to_string(),
        subject: None,
        fault: def.fault,
        repair: Repair::Reboot,
    };
    match result {
        Judgement::Pass(evidence) => base(Status::Pass, evidence),
        Judgement::Skip(why) => base(Status::Skip, why),
        Judgement::Missing(Gap::Skipped(why)) => base(Status::Skip, why),
        Judgement::Missing(Gap::Timeout { after_ms }) => Outcome {
            code: format!("{}_TIMEOUT", def.code),
            ..base(Status::Timeout, format!("no answer within {after_ms} ms"))
        },
        Judgement::Missing(Gap::Failed(why)) => base(Status::Fail, why),
        Judgement::Missing(Gap::Interfered(why)) => Outcome {
            class: Class::Warn,
            ..base(Status::Fail, why)
        },
        Judgement::Found(findings) if findings.is_empty() => base(Status::Pass, String::new()),
        Judgement::Found(findings) => {
            let class_of = |f: &Finding| f.class.unwrap_or(def.class);
            let class = findings.iter().map(class_of).max().unwrap_or(def.class);
            let evidence = findings
                .iter()
                .map(|f| f.evidence.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            // The reason names the first finding of the outcome's class.
            let first = findings
                .iter()
                .find(|f| class_of(f) == class)
                .or(findings.first());
            Outcome {
                class,
                code: first.map_or_else(|| def.code.to_string(), |f| f.code.clone()),
                subject: first.and_then(|f| f.subject.clone()),
                repair: first.map_or(Repair::Reboot, |f| f.repair),
                ..base(
                    if first.is_some_and(|f| f.code.ends_with("_TIMEOUT")) {
                        Status::Timeout
                    } else {
                        Status::Fail
                    },
                    evidence,
                )
            }
        }
    }
}

fn bounded(mut text: String) -> String {
    if text.len() > MAX_EVIDENCE {
        let cut = (0..=MAX_EVIDENCE)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

/// For the JSON report's tier field and metrics: check id -> tier name.
pub fn tiers() -> BTreeMap<&'static str, &'static str> {
    CHECKS
        .iter()
        .map(|c| (c.id.as_str(), c.tier.as_str()))
        .collect()
}
