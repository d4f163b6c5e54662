//! The RDMA fabric from sysfs: `fabric.count`, `fabric.port_state`, `fabric.port_rate`,
//! `fabric.link_flaps` (a leaky bucket over passes) and `fabric.numa`. The NICs' PCIe
//! width is [`super::pci`]'s.

use super::super::parse::{port_rate_gbps, port_state};
use super::{Ctx, Judgement, finding, gpu_subject, nic_name, scoped_gpus};
use crate::health::{CheckDef, PassState};
use crate::model::Machine;

pub(super) fn count(def: &CheckDef, cx: &Ctx) -> Judgement {
    let sysfs = need!(&cx.inputs.sysfs, false);
    let have = sysfs.machine.fabric_nics().len();
    let from = cx
        .expect
        .fabric_nics_from
        .as_deref()
        .unwrap_or("[fabric] expected_nics");
    match cx.expect.fabric_nics {
        Some(want) if (have as u64) < u64::from(want) => Judgement::Found(vec![finding(
            def.code,
            Some(format!("found={have} want={want}")),
            format!("{have} fabric NICs, expected {want} ({from})"),
        )]),
        Some(want) => Judgement::Pass(format!("{have} fabric NICs, expected {want} ({from})")),
        None => Judgement::Pass(format!("{have} fabric NICs (no expectation set)")),
    }
}

pub(super) fn ports_active(def: &CheckDef, cx: &Ctx) -> Judgement {
    let sysfs = need!(&cx.inputs.sysfs, false);
    let found = fabric_ports(&sysfs.machine)
        .into_iter()
        .filter_map(|(name, state, _)| {
            let state = port_state(state?);
            (state != "ACTIVE").then(|| {
                finding(
                    def.code,
                    Some(format!("nic={name}")),
                    format!("{name}: {state}"),
                )
            })
        })
        .collect();
    Judgement::Found(found)
}

pub(super) fn port_rates(def: &CheckDef, cx: &Ctx) -> Judgement {
    let sysfs = need!(&cx.inputs.sysfs, false);
    let active: Vec<(String, f64)> = fabric_ports(&sysfs.machine)
        .into_iter()
        .filter(|(_, state, _)| state.is_some_and(|s| port_state(s) == "ACTIVE"))
        .filter_map(|(name, _, rate)| Some((name, port_rate_gbps(rate?)?)))
        .collect();
    let fastest = active.iter().map(|(_, r)| *r).fold(0.0_f64, f64::max);
    let want = cx.expect.port_rate_gbps.unwrap_or(fastest);
    if active.is_empty() {
        return Judgement::Skip("no active fabric port with a rate".into());
    }
    let found = active
        .iter()
        .filter(|(_, rate)| *rate < want)
        .map(|(name, rate)| {
            finding(
                def.code,
                Some(format!("nic={name}")),
                format!("{name}: {rate} Gb/s, expected {want}"),
            )
        })
        .collect();
    Judgement::Found(found)
}

/// Writes this pass's counters and strikes into `next`.
pub(super) fn link_flaps(def: &CheckDef, cx: &Ctx, next: &mut PassState) -> Judgement {
    let sysfs = need!(&cx.inputs.sysfs, false);
    if sysfs.link_downed.is_empty() {
        return Judgement::Skip("no link_downed counters".into());
    }
    let (prev, expect) = (cx.prev, cx.expect);
    let mut found = Vec::new();
    for (port, &now) in &sysfs.link_downed {
        let before = prev.link_downed.get(port).copied();
        let old = prev.strikes.get(port).copied().unwrap_or(0);
        // A leaky bucket: a rising counter adds a strike, a quiet pass takes one away,
        // so a port that flapped once last month does not drain the node today.
        let strikes = match before {
            Some(b) if now > b => old + 1,
            _ => old.saturating_sub(1),
        };
        next.link_downed.insert(port.clone(), now);
        if strikes > 0 {
            next.strikes.insert(port.clone(), strikes);
        }
        if expect.flap_strikes > 0 && strikes >= expect.flap_strikes {
            found.push(finding(
                def.code,
                Some(format!("nic={port}")),
                format!("{port}: link_downed rose in {strikes} passes (now {now})"),
            ));
        }
    }
    Judgement::Found(found)
}

pub(super) fn numa(def: &CheckDef, cx: &Ctx) -> Judgement {
    let sysfs = need!(&cx.inputs.sysfs, false);
    let m = &sysfs.machine;
    let nic_nodes: Vec<u32> = m
        .fabric_nics()
        .iter()
        .filter_map(|n| m.numa_of(n.pci))
        .collect();
    if nic_nodes.is_empty() {
        return Judgement::Skip("no fabric NIC with a NUMA node".into());
    }
    let found = scoped_gpus(m, cx.scope)
        .iter()
        .filter_map(|g| {
            let node = m.numa_of(g.pci)?;
            (!nic_nodes.contains(&node)).then(|| {
                finding(
                    def.code,
                    gpu_subject(Some(g.pci)),
                    format!("{}: no fabric NIC on NUMA node {node}", g.pci),
                )
            })
        })
        .collect();
    Judgement::Found(found)
}

/// (`DEV/PORT`, state text, rate text) of every fabric NIC port.
fn fabric_ports(machine: &Machine) -> Vec<(String, Option<&str>, Option<&str>)> {
    machine
        .fabric_nics()
        .into_iter()
        .flat_map(|n| {
            n.ports.iter().map(move |p| {
                (
                    format!("{}/{}", nic_name(n), p.number),
                    p.state.as_deref(),
                    p.rate.as_deref(),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::health::tests::{healthy, sysfs};
    use crate::health::xid::XidPolicy;
    use crate::health::*;

    #[test]
    fn link_flaps_drain_after_strikes_and_leak_away() {
        let (mut inputs, expect) = healthy();
        let port = sysfs(&mut inputs)
            .link_downed
            .keys()
            .next()
            .cloned()
            .expect("a port");
        let policy = XidPolicy::embedded();
        let mut state = PassState::default();
        let mut verdicts = vec![];
        for counter in [0, 1, 2, 2, 2, 2] {
            sysfs(&mut inputs).link_downed.insert(port.clone(), counter);
            let (r, next) = evaluate(&inputs, &expect, &policy, &Scope::default(), &state);
            verdicts.push(r.verdict);
            if r.verdict == Verdict::Drain {
                assert!(
                    r.reason()
                        .starts_with(&format!("gpu-affinity: NIC_LINK_FLAPS nic={port}")),
                    "{}",
                    r.reason()
                );
            }
            state = next;
        }
        use Verdict::{Drain, Ok};
        assert_eq!(verdicts, [Ok, Ok, Drain, Ok, Ok, Ok]);
    }
}
