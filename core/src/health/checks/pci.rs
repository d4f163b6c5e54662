//! The GPUs on the PCI bus and the PCIe links of GPUs and fabric NICs, from sysfs:
//! `gpu.count`, `gpu.bus`, `gpu.pcie_width`, `gpu.pcie_speed`, `fabric.pcie_width`.

use super::super::parse::link_speed_gts;
use super::{
    Ctx, Finding, Judgement, finding, gpu_subject, link_of, nic_name, scoped_gpus, scoped_nvml,
    show,
};
use crate::health::{CheckDef, SysfsData};
use crate::pci::PciAddr;

pub(super) fn gpu_count(cx: &Ctx) -> Judgement {
    let (inputs, expect) = (cx.inputs, cx.expect);
    let sysfs = need!(&inputs.sysfs, true);
    let pci = sysfs.machine.gpus.len() as u32;
    let nvml = inputs.nvml.as_ref().ok().map(|n| n.gpus.len() as u32);
    let mut seen = vec![format!("{pci} on PCI")];
    let mut found = Vec::new();
    for (source, want) in [
        ("expected", expect.gpus),
        ("NVML", nvml),
        ("Slurm gres", inputs.gres_gpus),
    ] {
        let Some(want) = want else { continue };
        seen.push(format!("{source} {want}"));
        // NVML seeing fewer than PCI is a GPU the driver lost; more is impossible.
        if pci < want || (source == "NVML" && want != pci) {
            found.push(finding(
                "GPU_MISSING",
                Some(format!("found={} want={want}", pci.min(want))),
                format!("{source} says {want}"),
            ));
        }
    }
    if found.is_empty() {
        Judgement::Pass(seen.join(", "))
    } else {
        if let Some(first) = found.first_mut() {
            first.evidence = format!("{}: {}", seen.join(", "), first.evidence);
        }
        Judgement::Found(found)
    }
}

pub(super) fn gpu_bus(def: &CheckDef, cx: &Ctx) -> Judgement {
    let (inputs, scope) = (cx.inputs, cx.scope);
    let sysfs = need!(&inputs.sysfs, false);
    let mut found: Vec<Finding> = scoped_gpus(&sysfs.machine, scope)
        .iter()
        .filter(|g| sysfs.fallen_off.contains(&g.pci))
        .map(|g| {
            finding(
                def.code,
                gpu_subject(Some(g.pci)),
                format!("{}: config space reads all ones", g.pci),
            )
        })
        .collect();
    if let Ok(nvml) = &inputs.nvml {
        found.extend(
            scoped_nvml(&nvml.gpus, scope)
                .iter()
                .filter(|g| g.lost)
                .map(|g| {
                    finding(
                        def.code,
                        gpu_subject(g.pci),
                        format!("{}: NVML reports the GPU lost", show(g.pci)),
                    )
                }),
        );
    }
    Judgement::Found(found)
}

pub(super) fn gpu_pcie_width(def: &CheckDef, cx: &Ctx) -> Judgement {
    let sysfs = need!(&cx.inputs.sysfs, false);
    let devices = scoped_gpus(&sysfs.machine, cx.scope)
        .iter()
        .map(|g| (g.pci, format!("gpu={}", g.pci)))
        .collect();
    pcie_width(def, sysfs, devices)
}

pub(super) fn fabric_pcie_width(def: &CheckDef, cx: &Ctx) -> Judgement {
    let sysfs = need!(&cx.inputs.sysfs, false);
    let devices = sysfs
        .machine
        .fabric_nics()
        .iter()
        .map(|n| (n.pci, format!("nic={}", nic_name(n))))
        .collect();
    pcie_width(def, sysfs, devices)
}

/// Each of `devices` (address, reason subject) runs its link at its maximum width; width,
/// unlike speed, does not drop when the device idles.
fn pcie_width(def: &CheckDef, sysfs: &SysfsData, devices: Vec<(PciAddr, String)>) -> Judgement {
    let mut known = 0;
    let mut found = Vec::new();
    for (pci, subject) in devices {
        let Some(link) = link_of(&sysfs.machine, pci) else {
            continue;
        };
        if let (Some(cur), Some(max)) = (link.current_width, link.max_width) {
            known += 1;
            if cur < max {
                found.push(finding(
                    def.code,
                    Some(subject),
                    format!("{pci}: x{cur} of x{max}"),
                ));
            }
        }
    }
    if known == 0 {
        return Judgement::Skip("no PCIe link width in sysfs".into());
    }
    Judgement::Found(found)
}

pub(super) fn gpu_pcie_speed(def: &CheckDef, cx: &Ctx) -> Judgement {
    let sysfs = need!(&cx.inputs.sysfs, false);
    let found = scoped_gpus(&sysfs.machine, cx.scope)
        .iter()
        .filter_map(|g| {
            let link = link_of(&sysfs.machine, g.pci)?;
            let cur = link_speed_gts(link.current_speed.as_deref()?)?;
            let max = link_speed_gts(link.max_speed.as_deref()?)?;
            (cur < max).then(|| {
                finding(
                    def.code,
                    gpu_subject(Some(g.pci)),
                    format!("{}: {cur} of {max} GT/s", g.pci),
                )
            })
        })
        .collect();
    Judgement::Found(found)
}
