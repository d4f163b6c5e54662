//! Counts and rates, and each GPU's NVLink fabric probe: the checks whose judgement lives
//! in [`crate::health::counters`] and [`crate::health::nvlink_fabric`] (each threshold
//! with its peer's source), run here over the pass's GPUs and fabric ports. Rates come
//! from the counter history in the pass state ([`PassState::counters`]).

use super::{Ctx, Finding, Judgement, gpu_subject, link_of, scoped_nvml, show};
use crate::health::counters::{self, Window};
use crate::health::parse::link_speed_gts;
use crate::health::{NvmlGpu, PassState, nvlink_fabric};

/// A core finding as the check's, its subject named.
fn from_core(f: counters::Finding, subject: Option<String>, what: String) -> Finding {
    Finding {
        code: f.code.to_string(),
        subject,
        evidence: format!("{what}: {}", f.evidence),
        class: Some(f.class),
        repair: f.repair,
    }
}

/// The counter history this pass builds on the previous one's, at the pass's clock.
fn window_of<'a>(cx: &'a Ctx, next: &'a mut PassState) -> Window<'a> {
    Window {
        next: &mut next.counters,
        prev: &cx.prev.counters,
        now: cx.inputs.now,
        limits: &cx.expect.limits,
    }
}

/// Judge every GPU of the pass with `judge`; a check none of whose GPUs reports the
/// counters skips, saying so (a check that read nothing never passes).
fn each_gpu(
    cx: &Ctx,
    next: &mut PassState,
    none: &str,
    mut judge: impl FnMut(&NvmlGpu, &str, &mut Window<'_>) -> Option<Vec<counters::Finding>>,
) -> Judgement {
    let nvml = need!(&cx.inputs.nvml, false);
    let mut window = window_of(cx, next);
    let mut judged = 0;
    let mut found = Vec::new();
    for g in scoped_nvml(&nvml.gpus, cx.scope) {
        let subject = gpu_subject(g.pci);
        let key = subject.clone().unwrap_or_else(|| "gpu=unnamed".into());
        if let Some(list) = judge(g, &key, &mut window) {
            judged += 1;
            found.extend(
                list.into_iter()
                    .map(|f| from_core(f, subject.clone(), show(g.pci))),
            );
        }
    }
    if judged == 0 {
        return Judgement::Skip(none.into());
    }
    Judgement::Found(found)
}

pub(super) fn memory_wear(cx: &Ctx, next: &mut PassState) -> Judgement {
    each_gpu(
        cx,
        next,
        "NVML reports no ECC, remapped-row or retired-page counts",
        |g, key, w| counters::judge_memory_wear(&g.counters, key, w),
    )
}

pub(super) fn nvlink_errors(cx: &Ctx, next: &mut PassState) -> Judgement {
    each_gpu(
        cx,
        next,
        "NVML reports no NVLink error counters",
        |g, key, w| counters::judge_nvlink(&g.counters, key, w),
    )
}

pub(super) fn pcie_replay(cx: &Ctx, next: &mut PassState) -> Judgement {
    // The allowance is per lane at the link's current generation, from sysfs.
    let sysfs = cx.inputs.sysfs.as_ref().ok();
    each_gpu(
        cx,
        next,
        "NVML reports no PCIe replay counter",
        |g, key, w| {
            let link = sysfs.zip(g.pci).and_then(|(s, pci)| {
                let link = link_of(&s.machine, pci)?;
                let gts = link_speed_gts(link.current_speed.as_deref()?)?;
                Some((gts, u32::from(link.current_width?)))
            });
            counters::judge_pcie_replay(&g.counters, link, key, w)
        },
    )
}

pub(super) fn thermal(cx: &Ctx, next: &mut PassState) -> Judgement {
    each_gpu(
        cx,
        next,
        "NVML reports no temperature or clocks-event reasons",
        |g, _, _| counters::judge_thermal(&g.counters),
    )
}

pub(super) fn nvlink_fabric(cx: &Ctx, next: &mut PassState) -> Judgement {
    each_gpu(
        cx,
        next,
        "no GPU has an NVLink fabric (no NVSwitch or NVLink domain, or a driver before R525)",
        |g, _, _| g.fabric.as_ref().and_then(nvlink_fabric::judge),
    )
}

pub(super) fn port_errors(cx: &Ctx, next: &mut PassState) -> Judgement {
    let sysfs = need!(&cx.inputs.sysfs, false);
    let mut window = window_of(cx, next);
    let mut judged = 0;
    let mut found = Vec::new();
    for (port, p) in &sysfs.ports {
        if let Some(list) = counters::judge_port(p, port, &mut window) {
            judged += 1;
            found.extend(
                list.into_iter()
                    .map(|f| from_core(f, Some(format!("nic={port}")), port.clone())),
            );
        }
    }
    if judged == 0 {
        return Judgement::Skip("no fabric port has phys_state or error counters in sysfs".into());
    }
    Judgement::Found(found)
}

#[cfg(test)]
mod tests {
    use crate::health::tests::{NOW, healthy, run, sysfs};
    use crate::health::xid::XidPolicy;
    use crate::health::*;

    fn gpus(i: &mut Inputs) -> &mut Vec<NvmlGpu> {
        &mut i.nvml.as_mut().expect("nvml").gpus
    }

    /// Two passes a minute apart: the second sees `inject`'s counters.
    fn second_pass(inject: fn(&mut Inputs)) -> Report {
        let (first, expect) = healthy();
        let policy = XidPolicy::embedded();
        let scope = Scope::default();
        let (report, state) = evaluate(&first, &expect, &policy, &scope, &PassState::default());
        assert_eq!(report.verdict, Verdict::Ok, "{}", report.summary());
        let (mut second, _) = healthy();
        second.now = NOW + 60;
        inject(&mut second);
        evaluate(&second, &expect, &policy, &scope, &state).0
    }

    #[test]
    fn lifetime_wear_drains_with_the_repair_its_fault_needs() {
        type Case = (&'static str, fn(&mut Inputs), &'static str);
        let cases: [Case; 4] = [
            (
                "an uncorrectable SRAM error",
                |i| gpus(i)[2].counters.sram_uncorrected = Some(1),
                "gpu-affinity: GPU_SRAM_UNCORRECTABLE gpu=",
            ),
            (
                "512 uncorrectable remapped rows",
                |i| gpus(i)[1].counters.remapped_uncorrectable = Some(512),
                "gpu-affinity: GPU_ROW_REMAP_EXHAUSTED gpu=",
            ),
            (
                "a fabric registration that never started",
                |i| {
                    if let Some(f) = gpus(i)[4].fabric.as_mut() {
                        f.state = 1;
                    }
                },
                "gpu-affinity: GPU_FABRIC gpu=",
            ),
            (
                "a port in Polling",
                |i| {
                    if let Some(p) = sysfs(i).ports.values_mut().next() {
                        p.phys_state = Some("Polling".into());
                    }
                },
                "gpu-affinity: NIC_PHYS_DOWN nic=",
            ),
        ];
        for (name, inject, reason) in cases {
            let (mut inputs, expect) = healthy();
            inject(&mut inputs);
            let r = run(&inputs, &expect);
            assert_eq!(r.verdict, Verdict::Drain, "{name}: {}", r.summary());
            assert!(r.reason().starts_with(reason), "{name}: {}", r.reason());
        }
        let (mut inputs, expect) = healthy();
        gpus(&mut inputs)[1].counters.remapped_uncorrectable = Some(600);
        let r = run(&inputs, &expect);
        assert_eq!(r.deciding().map(|d| d.repair), Some(xid::Repair::Replace));
    }

    #[test]
    fn rising_counters_fail_on_the_second_pass() {
        let replay = second_pass(|i| gpus(i)[3].counters.nvlink_replay = Some(2));
        assert_eq!(replay.verdict, Verdict::Drain, "{}", replay.summary());
        assert!(
            replay
                .reason()
                .starts_with("gpu-affinity: GPU_NVLINK_REPLAY gpu="),
            "{}",
            replay.reason()
        );
        // Gen5 x16 allows 31 replays a minute; 500 warns.
        let pcie = second_pass(|i| gpus(i)[0].counters.pcie_replay = Some(500));
        let outcome = pcie
            .checks
            .iter()
            .find(|c| c.id == CheckId::GpuPcieReplay)
            .expect("pcie check");
        assert_eq!(
            (pcie.verdict, outcome.status),
            (Verdict::Warn, Status::Fail),
            "{}",
            pcie.summary()
        );
        let hot = second_pass(|i| gpus(i)[5].counters.temperature_c = Some(88));
        assert_eq!(hot.verdict, Verdict::Warn, "{}", hot.summary());
        // Nothing rose: the second pass is as clean as the first.
        assert_eq!(second_pass(|_| {}).verdict, Verdict::Ok);
    }

    #[test]
    fn a_gpu_without_the_counters_skips_saying_so() {
        let (mut inputs, expect) = healthy();
        for g in gpus(&mut inputs) {
            g.counters = counters::GpuCounters::default();
            g.fabric = None;
        }
        let r = run(&inputs, &expect);
        for id in [
            CheckId::GpuMemoryWear,
            CheckId::GpuNvlinkErrors,
            CheckId::GpuPcieReplay,
            CheckId::GpuThermal,
            CheckId::GpuFabric,
        ] {
            let o = r.checks.iter().find(|c| c.id == id).expect("check");
            assert_eq!(o.status, Status::Skip, "{id}: {}", o.evidence);
            assert!(!o.evidence.is_empty(), "{id}: a skip says why");
        }
    }
}
