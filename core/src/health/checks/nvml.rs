//! What NVML says of each GPU: `gpu.nvml` (it answers at all), ECC, row remapping, page
//! retirement, NVLink, the recovery action, what a job left behind, persistence mode and
//! the driver version.

use super::{Ctx, Finding, Judgement, finding, gpu_subject, scoped_nvml, show};
use crate::health::{CheckDef, NvmlGpu};

/// `gpu.nvml`: the owner of the NVML input, so a hung NVML is this one timeout.
pub(super) fn answers(cx: &Ctx) -> Judgement {
    let nvml = need!(&cx.inputs.nvml, true);
    Judgement::Pass(format!(
        "{} GPUs, driver {}",
        nvml.gpus.len(),
        nvml.driver.as_deref().unwrap_or("unknown")
    ))
}

pub(super) fn ecc(def: &CheckDef, cx: &Ctx) -> Judgement {
    nvml_each(cx, def, |g| {
        g.ecc_volatile_uncorrected
            .filter(|&n| n > 0)
            .map(|n| format!("{n} volatile uncorrectable ECC errors"))
    })
}

pub(super) fn row_remap(def: &CheckDef, cx: &Ctx) -> Judgement {
    nvml_each(cx, def, |g| match (g.remap_pending, g.remap_failure) {
        (_, Some(true)) => Some("row remapping failed".into()),
        (Some(true), _) => Some("row remap pending (reset the GPU)".into()),
        _ => None,
    })
}

pub(super) fn recovery_action(def: &CheckDef, cx: &Ctx) -> Judgement {
    nvml_each(cx, def, |g| {
        let what = match g.recovery_action? {
            0 => return None,
            1 => "GPU reset",
            2 => "node reboot",
            3 => "drain P2P",
            4 => "drain and reset",
            _ => "unknown action",
        };
        Some(format!(
            "NVML recovery action {} ({what})",
            g.recovery_action.unwrap_or_default()
        ))
    })
}

pub(super) fn leftover_processes(def: &CheckDef, cx: &Ctx) -> Judgement {
    nvml_each(cx, def, |g| {
        g.compute_processes
            .filter(|&n| n > 0)
            .map(|n| format!("{n} compute process(es) still on the GPU after the job"))
    })
}

pub(super) fn leftover_memory(def: &CheckDef, cx: &Ctx) -> Judgement {
    let floor = cx.expect.leftover_memory_mib;
    nvml_each(cx, def, |g| {
        let used = g.memory_used_mib?;
        (g.compute_processes == Some(0) && used > floor)
            .then(|| format!("{used} MiB in use with no process left (floor {floor} MiB)"))
    })
}

pub(super) fn retired_pages(def: &CheckDef, cx: &Ctx) -> Judgement {
    nvml_each(cx, def, |g| {
        (g.retired_pending == Some(true)).then(|| "page retirement pending (reset the GPU)".into())
    })
}

pub(super) fn nvlink(def: &CheckDef, cx: &Ctx) -> Judgement {
    nvml_each(cx, def, |g| {
        let down: Vec<String> = g
            .nvlinks
            .iter()
            .filter(|(_, up)| !up)
            .map(|(l, _)| l.to_string())
            .collect();
        (!down.is_empty()).then(|| format!("NVLink {} inactive", down.join(",")))
    })
}

pub(super) fn persistence(def: &CheckDef, cx: &Ctx) -> Judgement {
    match cx.expect.persistence {
        None => Judgement::Skip("[gpu] persistence not set".into()),
        Some(want) => nvml_each(cx, def, |g| {
            g.persistence
                .filter(|&on| on != want)
                .map(|on| format!("persistence mode {}", if on { "on" } else { "off" }))
        }),
    }
}

pub(super) fn driver(def: &CheckDef, cx: &Ctx) -> Judgement {
    let Some(want) = &cx.expect.driver else {
        return Judgement::Skip("[gpu] driver not set".into());
    };
    let nvml = need!(&cx.inputs.nvml, false);
    match &nvml.driver {
        Some(have) if have == want => Judgement::Pass(format!("driver {have}")),
        have => Judgement::Found(vec![finding(
            def.code,
            Some(format!("want={want}")),
            format!(
                "driver {} (want {want})",
                have.as_deref().unwrap_or("unknown")
            ),
        )]),
    }
}

/// A per-GPU NVML check: `problem` says what is wrong with one GPU.
fn nvml_each(cx: &Ctx, def: &CheckDef, problem: impl Fn(&NvmlGpu) -> Option<String>) -> Judgement {
    let nvml = need!(&cx.inputs.nvml, false);
    let gpus = scoped_nvml(&nvml.gpus, cx.scope);
    let found: Vec<Finding> = gpus
        .iter()
        .filter_map(|g| {
            problem(g).map(|p| {
                finding(
                    def.code,
                    gpu_subject(g.pci),
                    format!("{}: {p}", show(g.pci)),
                )
            })
        })
        .collect();
    if found.is_empty() {
        Judgement::Pass(format!("{} GPUs", gpus.len()))
    } else {
        Judgement::Found(found)
    }
}

#[cfg(test)]
mod tests {
    use crate::health::tests::{healthy, run};
    use crate::health::xid::XidPolicy;
    use crate::health::*;

    #[test]
    fn leftover_processes_drain_only_after_a_job() {
        let (mut inputs, expect) = healthy();
        inputs.nvml.as_mut().expect("nvml").gpus[2].compute_processes = Some(2);
        let at = |after_job| {
            let scope = Scope {
                after_job,
                ..Scope::default()
            };
            evaluate(
                &inputs,
                &expect,
                &XidPolicy::embedded(),
                &scope,
                &PassState::default(),
            )
            .0
        };
        // A health pass during a job sees its processes: not a fault.
        assert_eq!(at(false).verdict, Verdict::Ok);
        let r = at(true);
        assert_eq!(r.verdict, Verdict::Drain, "{}", r.summary());
        assert!(
            r.reason().starts_with("gpu-affinity: GPU_PROCS_LEFT gpu="),
            "{}",
            r.reason()
        );
    }

    #[test]
    fn memory_left_without_processes_warns_after_a_job() {
        let (mut inputs, expect) = healthy();
        let gpus = &mut inputs.nvml.as_mut().expect("nvml").gpus;
        gpus[4].memory_used_mib = Some(4096);
        let at = |inputs: &Inputs, after_job| {
            let scope = Scope {
                after_job,
                ..Scope::default()
            };
            let prev = PassState::default();
            evaluate(inputs, &expect, &XidPolicy::embedded(), &scope, &prev).0
        };
        // During a job the memory is the job's.
        assert_eq!(at(&inputs, false).verdict, Verdict::Ok);
        let r = at(&inputs, true);
        assert_eq!(r.verdict, Verdict::Warn, "{}", r.summary());
        assert!(
            r.reason().starts_with("gpu-affinity: GPU_MEM_LEFT gpu="),
            "{}",
            r.reason()
        );
        // At the floor, or held by a process still there (the process check's case): no warning.
        let gpus = &mut inputs.nvml.as_mut().expect("nvml").gpus;
        gpus[4].memory_used_mib = Some(DEFAULT_LEFTOVER_MEMORY_MIB);
        assert_eq!(at(&inputs, true).verdict, Verdict::Ok);
        let gpus = &mut inputs.nvml.as_mut().expect("nvml").gpus;
        gpus[4].memory_used_mib = Some(4096);
        gpus[4].compute_processes = Some(1);
        let r = at(&inputs, true);
        assert!(
            r.checks
                .iter()
                .any(|c| c.id == CheckId::GpuLeftoverMemory && c.status == Status::Pass),
            "{}",
            r.summary()
        );
    }

    #[test]
    fn recovery_action_drains_unless_none_or_unreported() {
        let (mut inputs, expect) = healthy();
        let r = run(&inputs, &expect);
        assert_eq!(r.verdict, Verdict::Ok, "unreported: {}", r.summary());
        inputs.nvml.as_mut().expect("nvml").gpus[1].recovery_action = Some(0);
        assert_eq!(run(&inputs, &expect).verdict, Verdict::Ok);
        inputs.nvml.as_mut().expect("nvml").gpus[1].recovery_action = Some(1);
        let r = run(&inputs, &expect);
        assert_eq!(r.verdict, Verdict::Drain);
        assert!(
            r.reason().starts_with("gpu-affinity: GPU_RECOVERY gpu="),
            "{}",
            r.reason()
        );
    }
}
