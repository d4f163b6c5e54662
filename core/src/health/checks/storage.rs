//! Storage: each `[[storage.mount]]` mounted with its type (`storage.mount`), writable
//! where asked (`storage.writable`), answering a stat in time (`storage.latency`), and the
//! checkpoint directory's write bandwidth (`storage.checkpoint_bandwidth`).

use super::{Ctx, Finding, Judgement, finding, warning};
use crate::health::xid::Repair;
use crate::health::{CheckDef, Gap, Gathered, MountProbe};

pub(super) fn mount(def: &CheckDef, cx: &Ctx) -> Judgement {
    each_mount(def, cx, |m| match &m.found {
        Ok(Some(t)) if m.want_type.as_ref().is_none_or(|w| w == t) => Ok(format!("{} {t}", m.path)),
        Ok(Some(t)) => Err(Gap::Failed(format!(
            "{} is {t}, expected {}",
            m.path,
            m.want_type.as_deref().unwrap_or("")
        ))),
        Ok(None) => Err(Gap::Failed(format!("{} is not mounted", m.path))),
        Err(g) => Err(g.clone()),
    })
}

pub(super) fn writable(def: &CheckDef, cx: &Ctx) -> Judgement {
    each_mount(def, cx, |m| match &m.writable {
        Ok(true) => Ok(format!("{} writable", m.path)),
        Ok(false) => Err(Gap::Failed(format!("{} is not writable", m.path))),
        Err(g) => Err(g.clone()),
    })
}

pub(super) fn latency(def: &CheckDef, cx: &Ctx) -> Judgement {
    each_mount(def, cx, |m| match &m.latency_ms {
        Ok(ms) => Ok(format!("{} {ms} ms", m.path)),
        Err(g) => Err(g.clone()),
    })
}

/// One judgement over every configured mount: `probe` gives one mount's evidence, or the
/// gap that is its problem. A timeout on any mount is the outcome (the first one met).
fn each_mount(
    def: &CheckDef,
    cx: &Ctx,
    probe: impl Fn(&MountProbe) -> Gathered<String>,
) -> Judgement {
    let inputs = cx.inputs;
    if inputs.mounts.is_empty() {
        return Judgement::Skip("no [[storage.mount]] configured".into());
    }
    let mut found = Vec::new();
    let mut ok = Vec::new();
    for m in &inputs.mounts {
        let subject = Some(format!("mount={}", m.path));
        match probe(m) {
            Ok(text) => ok.push(text),
            Err(Gap::Skipped(_)) => {}
            Err(Gap::Timeout { after_ms }) => {
                return Judgement::Found(vec![Finding {
                    code: format!("{}_TIMEOUT", def.code),
                    subject,
                    evidence: format!("{}: no answer within {after_ms} ms", m.path),
                    class: None,
                    repair: Repair::Reboot,
                }]);
            }
            Err(Gap::Failed(why)) => found.push(finding(def.code, subject, why)),
            Err(Gap::Interfered(why)) => found.push(warning(def.code, subject, why)),
        }
    }
    if found.is_empty() && ok.is_empty() {
        return Judgement::Skip("not asked for any mount".into());
    }
    if found.is_empty() {
        Judgement::Pass(ok.join("; "))
    } else {
        Judgement::Found(found)
    }
}

pub(super) fn checkpoint_bandwidth(def: &CheckDef, cx: &Ctx) -> Judgement {
    let (inputs, expect) = (cx.inputs, cx.expect);
    let probe = match (&inputs.checkpoint, expect.checkpoint_floor_mbps) {
        // Without a floor the probe is measured and reported, never drains: a
        // directory the probe cannot write (root-squashed NFS) is a warning.
        (Err(gap @ (Gap::Timeout { .. } | Gap::Failed(_))), None) => {
            return Judgement::Found(vec![unfloored_probe_gap(def, gap)]);
        }
        (checkpoint, _) => need!(checkpoint, true),
    };
    // MB/s: decimal megabytes per second, as storage vendors quote it.
    let mbps = probe.bytes as f64 / probe.elapsed_us.max(1) as f64;
    let text = format!(
        "{}: {mbps:.0} MB/s ({} MiB written + fsynced in {} ms)",
        probe.dir,
        probe.bytes >> 20,
        probe.elapsed_us / 1000
    );
    match expect.checkpoint_floor_mbps {
        Some(floor) if mbps < floor => Judgement::Found(vec![finding(
            def.code,
            Some(format!("dir={}", probe.dir)),
            format!("{text}, floor {floor} MB/s"),
        )]),
        Some(floor) => Judgement::Pass(format!("{text}, floor {floor} MB/s")),
        None => Judgement::Pass(text),
    }
}

/// A checkpoint probe that timed out or failed with no floor set: a warning finding,
/// `STORAGE_SLOW_TIMEOUT` for a timeout as the drain would have said.
fn unfloored_probe_gap(def: &CheckDef, gap: &Gap) -> Finding {
    let (code, evidence) = match gap {
        Gap::Timeout { after_ms } => (
            format!("{}_TIMEOUT", def.code),
            format!("no answer within {after_ms} ms (no floor set)"),
        ),
        Gap::Failed(why) | Gap::Skipped(why) | Gap::Interfered(why) => {
            (def.code.to_string(), format!("{why} (no floor set)"))
        }
    };
    warning(code, None, evidence)
}

#[cfg(test)]
mod tests {
    use crate::health::tests::{healthy, run};
    use crate::health::*;

    #[test]
    fn checkpoint_probe_without_a_floor_warns_never_drains() {
        let (mut inputs, mut expect) = healthy();
        expect.checkpoint_floor_mbps = None;
        let probe = |r: &Report| {
            r.checks
                .iter()
                .find(|c| c.id == CheckId::StorageCheckpointBandwidth)
                .map(|c| (c.class, c.status))
        };
        for (gap, status, reason) in [
            (
                Gap::Timeout { after_ms: 5000 },
                Status::Timeout,
                "gpu-affinity: STORAGE_SLOW_TIMEOUT",
            ),
            (
                Gap::Failed("/fsx/ckpt: Permission denied (os error 13)".into()),
                Status::Fail,
                "gpu-affinity: STORAGE_SLOW",
            ),
        ] {
            inputs.checkpoint = Err(gap.clone());
            let r = run(&inputs, &expect);
            assert_eq!(r.verdict, Verdict::Warn, "{gap:?}: {}", r.summary());
            assert_eq!(probe(&r), Some((Class::Warn, status)), "{}", r.summary());
            assert_eq!(r.reason(), reason);
            // With a floor the same gap drains.
            let floored = Expect {
                checkpoint_floor_mbps: Some(500.0),
                ..expect.clone()
            };
            let r = run(&inputs, &floored);
            assert_eq!(r.verdict, Verdict::Drain, "{gap:?}: {}", r.summary());
            assert_eq!(probe(&r), Some((Class::Drain, status)));
        }
    }

    #[test]
    fn an_interfered_probe_warns_and_never_drains() {
        let (mut inputs, mut expect) = healthy();
        inputs.mounts[0].writable = Err(Gap::Interfered("/fsx: probe names taken".into()));
        inputs.checkpoint = Err(Gap::Interfered("/fsx/ckpt: a symlink".into()));
        expect.checkpoint_floor_mbps = Some(100.0);
        let r = run(&inputs, &expect);
        assert_eq!(r.verdict, Verdict::Warn, "{}", r.summary());
        for id in [
            CheckId::StorageWritable,
            CheckId::StorageCheckpointBandwidth,
        ] {
            let c = r.checks.iter().find(|c| c.id == id).expect("check");
            assert_eq!(c.class, Class::Warn, "{id}: {c:?}");
        }
    }
}
