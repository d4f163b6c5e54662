//! Active tests: `gpu.dcgm_diag` (DCGM's diagnostic) and `gpu.all_reduce` (nccl-tests'
//! all_reduce_perf). A test that could not answer warns, never drains.

use super::{Ctx, Finding, Judgement, finding, warning};
use crate::health::active::DcgmDiag;
use crate::health::{CheckDef, Gap};

pub(super) fn dcgm_diag(def: &CheckDef, cx: &Ctx) -> Judgement {
    match &cx.inputs.dcgm_diag {
        Err(Gap::Skipped(why)) => Judgement::Skip(why.clone()),
        Err(gap) => Judgement::Found(vec![active_gap(def, gap)]),
        Ok(diag) => dcgm_findings(def, diag),
    }
}

pub(super) fn all_reduce(def: &CheckDef, cx: &Ctx) -> Judgement {
    let run = match &cx.inputs.all_reduce {
        Err(Gap::Skipped(why)) => return Judgement::Skip(why.clone()),
        Err(gap) => return Judgement::Found(vec![active_gap(def, gap)]),
        Ok(run) => run,
    };
    let text = format!(
        "avg bus bandwidth {} GB/s over {} sizes",
        run.avg_busbw_gbps, run.rows
    );
    match (run.wrong, cx.expect.all_reduce_floor_gbps) {
        (Some(n), _) if n > 0 => Judgement::Found(vec![finding(
            "GPU_ALLREDUCE_WRONG",
            Some(format!("wrong={n}")),
            format!("{text}; {n} out-of-bounds values (data corruption)"),
        )]),
        (_, Some(floor)) if run.avg_busbw_gbps < floor => Judgement::Found(vec![finding(
            def.code,
            Some(format!("busbw={:.1} floor={floor}", run.avg_busbw_gbps)),
            format!("{text}, floor {floor} GB/s"),
        )]),
        (_, Some(floor)) => Judgement::Pass(format!("{text}, floor {floor} GB/s")),
        (_, None) => Judgement::Pass(text),
    }
}

/// An active test that could not give an answer (a hang past its bound, a missing binary,
/// output that says nothing): a warning naming why, never a drain, so a broken tool or a
/// busy host engine cannot drain the fleet.
fn active_gap(def: &CheckDef, gap: &Gap) -> Finding {
    let (code, evidence) = match gap {
        Gap::Timeout { after_ms } => (
            format!("{}_TIMEOUT", def.code),
            format!("no answer within {after_ms} ms (killed)"),
        ),
        Gap::Failed(why) | Gap::Skipped(why) | Gap::Interfered(why) => {
            (format!("{}_NOT_RUN", def.code), why.clone())
        }
    };
    warning(code, None, evidence)
}

/// A failed DCGM test drains, naming the test (and its entity); a `Warn` result warns.
fn dcgm_findings(def: &CheckDef, diag: &DcgmDiag) -> Judgement {
    let word = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut found = Vec::new();
    for r in diag.results.iter().filter(|r| r.failed() || r.warned()) {
        let mut subject = format!("test={}", word(&r.test));
        if let Some(e) = &r.entity {
            subject.push_str(&format!(" entity={}", word(e)));
        }
        let evidence = format!(
            "{} / {}{}: {}{}",
            r.category,
            r.test,
            r.entity
                .as_deref()
                .map(|e| format!(" on {e}"))
                .unwrap_or_default(),
            r.status,
            r.warning
                .as_deref()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default()
        );
        found.push(if r.failed() {
            finding(def.code, Some(subject), evidence)
        } else {
            warning(def.code, Some(subject), evidence)
        });
    }
    if found.is_empty() {
        Judgement::Pass(format!("{} results, none failed", diag.results.len()))
    } else {
        // The outcome's reason names its first finding of the worst class: a failed test.
        Judgement::Found(found)
    }
}

#[cfg(test)]
mod tests {
    use crate::health::tests::{healthy, run};
    use crate::health::*;

    /// The active tests (issue 19): a failed DCGM test drains naming the test and its GPU, a
    /// slow or corrupting all-reduce drains, and a hang, a missing binary or output that says
    /// nothing warns with the reason: never a drain.
    #[test]
    fn active_tests_drain_on_failure_and_warn_on_a_gap() {
        let (mut inputs, expect) = healthy();
        let json = |status: &str| {
            format!(
                r#"{{"DCGM Diagnostic":{{"test_categories":[{{"category":"Hardware","tests":[
                {{"name":"GPU Memory","results":[{{"entity_group":"GPU","entity_id":3,"status":"{status}",
                "warnings":[{{"warning":"DBE detected"}}]}}]}}]}}]}}}}"#
            )
        };
        inputs.dcgm_diag = active::dcgm_diag(&json("Pass")).map_err(Gap::from);
        inputs.all_reduce =
            active::all_reduce("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 420.5 \n")
                .map_err(Gap::from);
        let r = run(&inputs, &expect);
        assert_eq!(r.verdict, Verdict::Ok, "{}", r.summary());

        inputs.dcgm_diag = active::dcgm_diag(&json("Fail")).map_err(Gap::from);
        let r = run(&inputs, &expect);
        assert_eq!(r.verdict, Verdict::Drain);
        assert_eq!(
            r.reason(),
            "gpu-affinity: GPU_DCGM_DIAG test=GPU_Memory entity=GPU_3"
        );
        inputs.dcgm_diag = active::dcgm_diag(&json("Warn")).map_err(Gap::from);
        assert_eq!(run(&inputs, &expect).verdict, Verdict::Warn);

        inputs.dcgm_diag = Err(Gap::Skipped("not asked".into()));
        inputs.all_reduce =
            active::all_reduce("# Avg bus bandwidth    : 120.25 \n").map_err(Gap::from);
        let r = run(&inputs, &expect);
        assert_eq!(
            r.reason(),
            "gpu-affinity: GPU_ALLREDUCE_SLOW busbw=120.2 floor=300"
        );
        inputs.all_reduce = active::all_reduce(
            "# Out of bounds values : 7 FAILED\n# Avg bus bandwidth    : 420 \n",
        )
        .map_err(Gap::from);
        assert_eq!(
            run(&inputs, &expect).reason(),
            "gpu-affinity: GPU_ALLREDUCE_WRONG wrong=7"
        );

        for (gap, code) in [
            (Gap::Timeout { after_ms: 300_000 }, "GPU_DCGM_DIAG_TIMEOUT"),
            (
                Gap::Failed("/usr/bin/dcgmi: No such file or directory".into()),
                "GPU_DCGM_DIAG_NOT_RUN",
            ),
        ] {
            inputs.all_reduce = Err(Gap::Skipped("not asked".into()));
            inputs.dcgm_diag = Err(gap);
            let r = run(&inputs, &expect);
            assert_eq!(r.verdict, Verdict::Warn, "{}", r.summary());
            assert_eq!(r.reason(), format!("gpu-affinity: {code}"));
        }
    }
}
