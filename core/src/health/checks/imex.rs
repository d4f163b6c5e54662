//! `gpu.imex`: the NVL72 IMEX domain, judged by [`crate::health::imex::judge`]. A reading
//! that could not be taken (no `[fabric] imex_ctl`, IMEX not configured, a missing or
//! untrusted program, a command that failed or hung past its bound, output that says
//! nothing) skips with the reason: never a pass, never a drain.

use super::{Ctx, Judgement, finding, warning};
use crate::health::imex::{DaemonState, Judged, judge};
use crate::health::{CheckDef, Class, Gap};

pub(super) fn domain(def: &CheckDef, cx: &Ctx) -> Judgement {
    let imex = match &cx.inputs.imex {
        Ok(imex) => imex,
        Err(Gap::Timeout { after_ms }) => {
            return Judgement::Skip(format!(
                "nvidia-imex-ctl gave no answer within {after_ms} ms (killed): not judged"
            ));
        }
        Err(Gap::Skipped(why) | Gap::Failed(why) | Gap::Interfered(why)) => {
            return Judgement::Skip(why.clone());
        }
    };
    // The subject names what is wrong: the domain once the daemon is READY, else the daemon.
    let subject = Some(match &imex.domain {
        Some(d) if imex.daemon == DaemonState::Ready => format!("domain={}", d.status.as_str()),
        _ => format!("daemon={}", imex.daemon.as_str()),
    });
    match judge(imex) {
        Judged::Healthy(text) => Judgement::Pass(text),
        Judged::NotJudged(why) => Judgement::Skip(why),
        Judged::Fault(Class::Drain, evidence) => {
            Judgement::Found(vec![finding(def.code, subject, evidence)])
        }
        Judged::Fault(_, evidence) => Judgement::Found(vec![warning(def.code, subject, evidence)]),
    }
}

#[cfg(test)]
mod tests {
    use crate::health::imex::{self, DaemonState, Imex};
    use crate::health::tests::{healthy, run};
    use crate::health::*;

    fn status(r: &Report) -> (Status, Class, String) {
        let o = r
            .checks
            .iter()
            .find(|c| c.id == CheckId::GpuImex)
            .expect("gpu.imex reported");
        (o.status, o.class, o.evidence.clone())
    }

    /// UP passes; DOWN drains and DEGRADED warns with `GPU_IMEX domain=...`; a daemon on its way
    /// warns; every reading that could not be taken skips, saying why.
    #[test]
    fn imex_domain_drains_warns_or_skips_never_passes_blind() {
        let (mut inputs, expect) = healthy();
        assert_eq!(
            status(&run(&inputs, &expect)).0,
            Status::Skip,
            "unset: skipped"
        );
        let ready = |text: &str| -> Gathered<Imex> {
            Ok(Imex {
                daemon: DaemonState::Ready,
                domain: Some(imex::domain(text).map_err(|e| Gap::Failed(e.to_string()))?),
            })
        };
        inputs.imex = ready(&imex::tests::domain_up());
        let r = run(&inputs, &expect);
        assert_eq!(r.verdict, Verdict::Ok, "{}", r.summary());
        assert_eq!(status(&r).0, Status::Pass);

        for (s, want) in [("DEGRADED", Verdict::Warn), ("DOWN", Verdict::Drain)] {
            inputs.imex = ready(&imex::tests::domain_with_peer_down(s));
            let r = run(&inputs, &expect);
            assert_eq!(r.verdict, want, "{}", r.summary());
            assert_eq!(r.reason(), format!("gpu-affinity: GPU_IMEX domain={s}"));
        }

        inputs.imex = Ok(Imex {
            daemon: DaemonState::WaitingForPeers,
            domain: None,
        });
        let r = run(&inputs, &expect);
        assert_eq!(r.verdict, Verdict::Warn, "{}", r.summary());
        assert_eq!(
            r.reason(),
            "gpu-affinity: GPU_IMEX daemon=WAITING_FOR_PEERS"
        );

        for gap in [
            Gap::Timeout { after_ms: 5_000 },
            Gap::Failed(imex::ImexError::NotConfigured.to_string()),
            Gap::Failed("/usr/bin/nvidia-imex-ctl: No such file or directory (os error 2)".into()),
        ] {
            inputs.imex = Err(gap.clone());
            let r = run(&inputs, &expect);
            assert_eq!(r.verdict, Verdict::Ok, "{gap:?}: {}", r.summary());
            let (st, _, why) = status(&r);
            assert_eq!(st, Status::Skip, "{gap:?}");
            assert!(!why.is_empty() && !why.contains('\n'), "{why}");
        }
        inputs.imex = Ok(Imex {
            daemon: DaemonState::Unavailable,
            domain: None,
        });
        assert_eq!(status(&run(&inputs, &expect)).0, Status::Skip);
    }
}
