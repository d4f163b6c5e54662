//! Pure evaluation: [`Inputs`] + [`Expect`] + the previous [`PassState`] -> a [`Report`] and the
//! next state. Every check of [`CHECKS`] yields exactly one outcome, in table order.

use std::collections::BTreeMap;

use super::parse::{link_speed_gts, port_rate_gbps, port_state};
use super::xid::{Repair, XidAction, XidPolicy};
use super::{
    CHECKS, CheckDef, Class, Expect, Gap, Gathered, Inputs, NvmlGpu, Outcome, PassState, Report,
    Scope, Status, Verdict,
};
use crate::model::{Gpu, Machine, Nic, PciLink};
use crate::pci::PciAddr;

/// Evidence is for people and the JSON report; keep it to a readable size per check.
const MAX_EVIDENCE: usize = 600;

/// One problem a check found.
struct Finding {
    code: String,
    subject: Option<String>,
    evidence: String,
    class: Option<Class>,
    repair: Repair,
}

fn finding(code: impl Into<String>, subject: Option<String>, evidence: String) -> Finding {
    Finding {
        code: code.into(),
        subject,
        evidence,
        class: None,
        repair: Repair::Reboot,
    }
}

/// What one check concluded before it becomes an [`Outcome`].
enum Result_ {
    Pass(String),
    Found(Vec<Finding>),
    Missing(Gap),
    /// The input is there but says nothing this check can judge.
    Skip(String),
}

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
        ..PassState::default()
    };
    let checks: Vec<Outcome> = CHECKS
        .iter()
        .map(|def| {
            let result = if scope.fast_only && !def.fast {
                Result_::Skip("not in the prolog's fast pass".into())
            } else if matches!(def.id, "gpu.leftover_processes" | "gpu.leftover_memory")
                && !scope.after_job
            {
                // Outside the epilog a running job's processes are expected, not left over.
                Result_::Skip("only after a job (the epilog)".into())
            } else {
                run(def, inputs, expect, policy, scope, prev, &mut next)
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
    (Report { verdict, checks }, next)
}

fn outcome(def: &'static CheckDef, result: Result_) -> Outcome {
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
        Result_::Pass(evidence) => base(Status::Pass, evidence),
        Result_::Skip(why) => base(Status::Skip, why),
        Result_::Missing(Gap::Skipped(why)) => base(Status::Skip, why),
        Result_::Missing(Gap::Timeout { after_ms }) => Outcome {
            code: format!("{}_TIMEOUT", def.code),
            ..base(Status::Timeout, format!("no answer within {after_ms} ms"))
        },
        Result_::Missing(Gap::Failed(why)) => base(Status::Fail, why),
        Result_::Missing(Gap::Interfered(why)) => Outcome {
            class: Class::Warn,
            ..base(Status::Fail, why)
        },
        Result_::Found(findings) if findings.is_empty() => base(Status::Pass, String::new()),
        Result_::Found(findings) => {
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

/// Dependent checks skip when the input they share is missing; the input's owner check
/// reports the gap itself (so one hung NVML is one timeout, not eight).
fn need<T>(input: &Gathered<T>, owner: bool) -> Result<&T, Result_> {
    match input {
        Ok(v) => Ok(v),
        Err(gap) if owner => Err(Result_::Missing(gap.clone())),
        Err(Gap::Skipped(why)) => Err(Result_::Skip(why.clone())),
        Err(_) => Err(Result_::Skip("input missing (see its owner check)".into())),
    }
}

macro_rules! need {
    ($input:expr, $owner:expr) => {
        match need($input, $owner) {
            Ok(v) => v,
            Err(r) => return r,
        }
    };
}

fn in_scope(scope: &Scope, pci: Option<PciAddr>) -> bool {
    match (&scope.gpus, pci) {
        (None, _) | (Some(_), None) => true,
        (Some(list), Some(p)) => list.contains(&p),
    }
}

fn scoped_gpus<'m>(machine: &'m Machine, scope: &Scope) -> Vec<&'m Gpu> {
    machine
        .gpus
        .iter()
        .filter(|g| in_scope(scope, Some(g.pci)))
        .collect()
}

fn scoped_nvml<'n>(gpus: &'n [NvmlGpu], scope: &Scope) -> Vec<&'n NvmlGpu> {
    gpus.iter().filter(|g| in_scope(scope, g.pci)).collect()
}

fn gpu_subject(pci: Option<PciAddr>) -> Option<String> {
    pci.map(|p| format!("gpu={p}"))
}

fn link_of(machine: &Machine, pci: PciAddr) -> Option<&PciLink> {
    machine.pci_device(pci).map(|d| &d.link)
}

fn run(
    def: &CheckDef,
    inputs: &Inputs,
    expect: &Expect,
    policy: &XidPolicy,
    scope: &Scope,
    prev: &PassState,
    next: &mut PassState,
) -> Result_ {
    match def.id {
        "gpu.count" => gpu_count(inputs, expect),
        "gpu.bus" => {
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
            Result_::Found(found)
        }
        "gpu.pcie_width" | "fabric.pcie_width" => {
            let sysfs = need!(&inputs.sysfs, false);
            let devices: Vec<(PciAddr, String)> = if def.id == "gpu.pcie_width" {
                scoped_gpus(&sysfs.machine, scope)
                    .iter()
                    .map(|g| (g.pci, format!("gpu={}", g.pci)))
                    .collect()
            } else {
                sysfs
                    .machine
                    .fabric_nics()
                    .iter()
                    .map(|n| (n.pci, format!("nic={}", nic_name(n))))
                    .collect()
            };
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
                return Result_::Skip("no PCIe link width in sysfs".into());
            }
            Result_::Found(found)
        }
        "gpu.pcie_speed" => {
            let sysfs = need!(&inputs.sysfs, false);
            let found = scoped_gpus(&sysfs.machine, scope)
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
            Result_::Found(found)
        }
        "gpu.nvml" => {
            let nvml = need!(&inputs.nvml, true);
            Result_::Pass(format!(
                "{} GPUs, driver {}",
                nvml.gpus.len(),
                nvml.driver.as_deref().unwrap_or("unknown")
            ))
        }
        "gpu.ecc" => nvml_each(inputs, scope, def, |g| {
            g.ecc_volatile_uncorrected
                .filter(|&n| n > 0)
                .map(|n| format!("{n} volatile uncorrectable ECC errors"))
        }),
        "gpu.row_remap" => nvml_each(inputs, scope, def, |g| {
            match (g.remap_pending, g.remap_failure) {
                (_, Some(true)) => Some("row remapping failed".into()),
                (Some(true), _) => Some("row remap pending (reset the GPU)".into()),
                _ => None,
            }
        }),
        "gpu.recovery_action" => nvml_each(inputs, scope, def, |g| {
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
        }),
        "gpu.leftover_processes" => nvml_each(inputs, scope, def, |g| {
            g.compute_processes
                .filter(|&n| n > 0)
                .map(|n| format!("{n} compute process(es) still on the GPU after the job"))
        }),
        "gpu.leftover_memory" => nvml_each(inputs, scope, def, |g| {
            let used = g.memory_used_mib?;
            (g.compute_processes == Some(0) && used > expect.leftover_memory_mib).then(|| {
                format!(
                    "{used} MiB in use with no process left (floor {} MiB)",
                    expect.leftover_memory_mib
                )
            })
        }),
        "gpu.retired_pages" => nvml_each(inputs, scope, def, |g| {
            (g.retired_pending == Some(true))
                .then(|| "page retirement pending (reset the GPU)".into())
        }),
        "gpu.nvlink" => nvml_each(inputs, scope, def, |g| {
            let down: Vec<String> = g
                .nvlinks
                .iter()
                .filter(|(_, up)| !up)
                .map(|(l, _)| l.to_string())
                .collect();
            (!down.is_empty()).then(|| format!("NVLink {} inactive", down.join(",")))
        }),
        "gpu.persistence" => match expect.persistence {
            None => Result_::Skip("[gpu] persistence not set".into()),
            Some(want) => nvml_each(inputs, scope, def, |g| {
                g.persistence
                    .filter(|&on| on != want)
                    .map(|on| format!("persistence mode {}", if on { "on" } else { "off" }))
            }),
        },
        "gpu.driver" => {
            let Some(want) = &expect.driver else {
                return Result_::Skip("[gpu] driver not set".into());
            };
            let nvml = need!(&inputs.nvml, false);
            match &nvml.driver {
                Some(have) if have == want => Result_::Pass(format!("driver {have}")),
                have => Result_::Found(vec![finding(
                    def.code,
                    Some(format!("want={want}")),
                    format!(
                        "driver {} (want {want})",
                        have.as_deref().unwrap_or("unknown")
                    ),
                )]),
            }
        }
        "gpu.xid" => {
            let xids = need!(&inputs.xids, true);
            let found = xids
                .iter()
                .filter(|x| in_scope(scope, Some(x.gpu)))
                .filter(|x| scope.xids_after.is_none_or(|after| x.seq > after))
                .filter_map(|x| {
                    let v = policy.verdict(x);
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
            Result_::Found(found)
        }
        "fabric.count" => {
            let sysfs = need!(&inputs.sysfs, false);
            let have = sysfs.machine.fabric_nics().len();
            let from = expect
                .fabric_nics_from
                .as_deref()
                .unwrap_or("[fabric] expected_nics");
            match expect.fabric_nics {
                Some(want) if (have as u64) < u64::from(want) => Result_::Found(vec![finding(
                    def.code,
                    Some(format!("found={have} want={want}")),
                    format!("{have} fabric NICs, expected {want} ({from})"),
                )]),
                Some(want) => {
                    Result_::Pass(format!("{have} fabric NICs, expected {want} ({from})"))
                }
                None => Result_::Pass(format!("{have} fabric NICs (no expectation set)")),
            }
        }
        "fabric.port_state" => {
            let sysfs = need!(&inputs.sysfs, false);
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
            Result_::Found(found)
        }
        "fabric.port_rate" => {
            let sysfs = need!(&inputs.sysfs, false);
            let active: Vec<(String, f64)> = fabric_ports(&sysfs.machine)
                .into_iter()
                .filter(|(_, state, _)| state.is_some_and(|s| port_state(s) == "ACTIVE"))
                .filter_map(|(name, _, rate)| Some((name, port_rate_gbps(rate?)?)))
                .collect();
            let fastest = active.iter().map(|(_, r)| *r).fold(0.0_f64, f64::max);
            let want = expect.port_rate_gbps.unwrap_or(fastest);
            if active.is_empty() {
                return Result_::Skip("no active fabric port with a rate".into());
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
            Result_::Found(found)
        }
        "fabric.link_flaps" => {
            let sysfs = need!(&inputs.sysfs, false);
            if sysfs.link_downed.is_empty() {
                return Result_::Skip("no link_downed counters".into());
            }
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
            Result_::Found(found)
        }
        "fabric.numa" => {
            let sysfs = need!(&inputs.sysfs, false);
            let m = &sysfs.machine;
            let nic_nodes: Vec<u32> = m
                .fabric_nics()
                .iter()
                .filter_map(|n| m.numa_of(n.pci))
                .collect();
            if nic_nodes.is_empty() {
                return Result_::Skip("no fabric NIC with a NUMA node".into());
            }
            let found = scoped_gpus(m, scope)
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
            Result_::Found(found)
        }
        "storage.mount" | "storage.writable" | "storage.latency" => storage(def, inputs),
        "storage.checkpoint_bandwidth" => {
            let probe = match (&inputs.checkpoint, expect.checkpoint_floor_mbps) {
                // Without a floor the probe is measured and reported, never drains: a
                // directory the probe cannot write (root-squashed NFS) is a warning.
                (Err(gap @ (Gap::Timeout { .. } | Gap::Failed(_))), None) => {
                    return Result_::Found(vec![unfloored_probe_gap(def, gap)]);
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
                Some(floor) if mbps < floor => Result_::Found(vec![finding(
                    def.code,
                    Some(format!("dir={}", probe.dir)),
                    format!("{text}, floor {floor} MB/s"),
                )]),
                Some(floor) => Result_::Pass(format!("{text}, floor {floor} MB/s")),
                None => Result_::Pass(text),
            }
        }
        "gpu.dcgm_diag" => match &inputs.dcgm_diag {
            Err(Gap::Skipped(why)) => Result_::Skip(why.clone()),
            Err(gap) => Result_::Found(vec![active_gap(def, gap)]),
            Ok(diag) => dcgm_findings(def, diag),
        },
        "gpu.all_reduce" => match &inputs.all_reduce {
            Err(Gap::Skipped(why)) => Result_::Skip(why.clone()),
            Err(gap) => Result_::Found(vec![active_gap(def, gap)]),
            Ok(run) => {
                let text = format!(
                    "avg bus bandwidth {} GB/s over {} sizes",
                    run.avg_busbw_gbps, run.rows
                );
                match (run.wrong, expect.all_reduce_floor_gbps) {
                    (Some(n), _) if n > 0 => Result_::Found(vec![finding(
                        "GPU_ALLREDUCE_WRONG",
                        Some(format!("wrong={n}")),
                        format!("{text}; {n} out-of-bounds values (data corruption)"),
                    )]),
                    (_, Some(floor)) if run.avg_busbw_gbps < floor => {
                        Result_::Found(vec![finding(
                            def.code,
                            Some(format!("busbw={:.1} floor={floor}", run.avg_busbw_gbps)),
                            format!("{text}, floor {floor} GB/s"),
                        )])
                    }
                    (_, Some(floor)) => Result_::Pass(format!("{text}, floor {floor} GB/s")),
                    (_, None) => Result_::Pass(text),
                }
            }
        },
        _ => Result_::Skip("unknown check".into()),
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
    Finding {
        class: Some(Class::Warn),
        ..finding(code, None, evidence)
    }
}

/// A failed DCGM test drains, naming the test (and its entity); a `Warn` result warns.
fn dcgm_findings(def: &CheckDef, diag: &super::active::DcgmDiag) -> Result_ {
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
        let f = finding(def.code, Some(subject), evidence);
        found.push(if r.failed() {
            f
        } else {
            Finding {
                class: Some(Class::Warn),
                ..f
            }
        });
    }
    if found.is_empty() {
        Result_::Pass(format!("{} results, none failed", diag.results.len()))
    } else {
        // The outcome's reason names its first finding of the worst class: a failed test.
        Result_::Found(found)
    }
}

/// `gpu.xid`'s warnings: records that quote an XID without being the driver's (a job
/// user's process name, a user-space write), and records a flood made the reader lose.
fn kmsg_warnings(notes: &super::xid::KmsgNotes) -> Vec<Finding> {
    let warn = |code: &str, evidence: String| Finding {
        class: Some(Class::Warn),
        ..finding(code.to_string(), None, evidence)
    };
    let mut out = Vec::new();
    if notes.lookalikes > 0 {
        out.push(warn(
            "KMSG_XID_LOOKALIKE",
            format!(
                "{} kernel-log records quote an XID but are not the driver's record (a process name or a user-space write; first at kmsg seq {}); not counted",
                notes.lookalikes,
                notes.first_lookalike.unwrap_or(0)
            ),
        ));
    }
    if notes.lost > 0 {
        out.push(warn(
            "KMSG_FLOOD",
            format!(
                "{} kernel-log records were lost while reading (a flood of messages); the newest were read",
                notes.lost
            ),
        ));
    }
    out
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
    Finding {
        class: Some(Class::Warn),
        ..finding(code, None, evidence)
    }
}

fn show(pci: Option<PciAddr>) -> String {
    pci.map_or_else(|| "an unnamed GPU".to_string(), |p| p.to_string())
}

fn nic_name(nic: &Nic) -> String {
    nic.name()
        .map_or_else(|| nic.pci.to_string(), str::to_string)
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

fn gpu_count(inputs: &Inputs, expect: &Expect) -> Result_ {
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
        Result_::Pass(seen.join(", "))
    } else {
        if let Some(first) = found.first_mut() {
            first.evidence = format!("{}: {}", seen.join(", "), first.evidence);
        }
        Result_::Found(found)
    }
}

/// A per-GPU NVML check: `problem` says what is wrong with one GPU.
fn nvml_each(
    inputs: &Inputs,
    scope: &Scope,
    def: &CheckDef,
    problem: impl Fn(&NvmlGpu) -> Option<String>,
) -> Result_ {
    let nvml = need!(&inputs.nvml, false);
    let gpus = scoped_nvml(&nvml.gpus, scope);
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
        Result_::Pass(format!("{} GPUs", gpus.len()))
    } else {
        Result_::Found(found)
    }
}

fn storage(def: &CheckDef, inputs: &Inputs) -> Result_ {
    if inputs.mounts.is_empty() {
        return Result_::Skip("no [[storage.mount]] configured".into());
    }
    let mut found = Vec::new();
    let mut ok = Vec::new();
    for m in &inputs.mounts {
        let subject = Some(format!("mount={}", m.path));
        let gathered: Gathered<String> = match def.id {
            "storage.mount" => match &m.found {
                Ok(Some(t)) if m.want_type.as_ref().is_none_or(|w| w == t) => {
                    Ok(format!("{} {t}", m.path))
                }
                Ok(Some(t)) => Err(Gap::Failed(format!(
                    "{} is {t}, expected {}",
                    m.path,
                    m.want_type.as_deref().unwrap_or("")
                ))),
                Ok(None) => Err(Gap::Failed(format!("{} is not mounted", m.path))),
                Err(g) => Err(g.clone()),
            },
            "storage.writable" => match &m.writable {
                Ok(true) => Ok(format!("{} writable", m.path)),
                Ok(false) => Err(Gap::Failed(format!("{} is not writable", m.path))),
                Err(g) => Err(g.clone()),
            },
            _ => match &m.latency_ms {
                Ok(ms) => Ok(format!("{} {ms} ms", m.path)),
                Err(g) => Err(g.clone()),
            },
        };
        match gathered {
            Ok(text) => ok.push(text),
            Err(Gap::Skipped(_)) => {}
            Err(Gap::Timeout { after_ms }) => {
                return Result_::Found(vec![Finding {
                    code: format!("{}_TIMEOUT", def.code),
                    subject,
                    evidence: format!("{}: no answer within {after_ms} ms", m.path),
                    class: None,
                    repair: Repair::Reboot,
                }]);
            }
            Err(Gap::Failed(why)) => found.push(finding(def.code, subject, why)),
            Err(Gap::Interfered(why)) => found.push(Finding {
                class: Some(Class::Warn),
                ..finding(def.code, subject, why)
            }),
        }
    }
    if found.is_empty() && ok.is_empty() {
        return Result_::Skip("not asked for any mount".into());
    }
    if found.is_empty() {
        Result_::Pass(ok.join("; "))
    } else {
        Result_::Found(found)
    }
}

/// For the JSON report's tier field and metrics: check id -> tier name.
pub fn tiers() -> BTreeMap<&'static str, &'static str> {
    CHECKS.iter().map(|c| (c.id, c.tier.as_str())).collect()
}
