//! The pure fault matrix: a healthy catalog machine, one fault at a time, the right verdict and
//! reason; the drain/resume policy; 1,000 healthy passes never drain. Each check family's
//! own cases are beside it (`checks/*.rs`), on this file's healthy node.

use super::counters::{EFA_ERROR_COUNTERS, GpuCounters, Limits, PortCounters};
use super::drain::{Action, DrainPolicy, Handoff, Leave, decide};
use super::nvlink_fabric::FabricProbe;
use super::parse::{NodeRow, sinfo_rows};
use super::xid::{XidEvent, XidPolicy};
use super::*;
use crate::catalog;

pub(super) fn healthy() -> (Inputs, Expect) {
    let machine = catalog::machine("p5.48xlarge").expect("catalog machine");
    let gpus = machine
        .gpus
        .iter()
        .map(|g| NvmlGpu {
            pci: Some(g.pci),
            ecc_volatile_uncorrected: Some(0),
            remap_pending: Some(false),
            remap_failure: Some(false),
            retired_pending: Some(false),
            nvlinks: (0..18).map(|l| (l, true)).collect(),
            persistence: Some(true),
            compute_processes: Some(0),
            memory_used_mib: Some(3),
            counters: healthy_counters(),
            // An HGX H100: registered with the Fabric Manager, every health flag FALSE.
            fabric: Some(FabricProbe {
                state: 3,
                status: 0,
                health_mask: Some(0b10_10_10_10 | (1 << 8)),
            }),
            ..NvmlGpu::default()
        })
        .collect();
    let ports = machine
        .fabric_nics()
        .iter()
        .flat_map(|n| {
            n.ports.iter().map(move |p| {
                (
                    format!("{}/{}", n.rdma.clone().unwrap_or_default(), p.number),
                    PortCounters {
                        phys_state: Some("LinkUp".into()),
                        efa_errors: EFA_ERROR_COUNTERS
                            .iter()
                            .map(|(name, _)| (name.to_string(), 0))
                            .collect(),
                        ..PortCounters::default()
                    },
                )
            })
        })
        .collect();
    let link_downed = machine
        .fabric_nics()
        .iter()
        .flat_map(|n| {
            n.ports.iter().map(move |p| {
                (
                    format!("{}/{}", n.rdma.clone().unwrap_or_default(), p.number),
                    0,
                )
            })
        })
        .collect();
    let inputs = Inputs {
        sysfs: Ok(SysfsData {
            machine,
            fallen_off: vec![],
            link_downed,
            ports,
        }),
        nvml: Ok(NvmlData {
            driver: Some("550.54.15".into()),
            gpus,
        }),
        xids: Ok(vec![]),
        kmsg_notes: Default::default(),
        mounts: vec![MountProbe {
            path: "/fsx".into(),
            want_type: Some("lustre".into()),
            found: Ok(Some("lustre".into())),
            writable: Ok(true),
            latency_ms: Ok(2),
        }],
        // 64 MiB in 50 ms: about 1342 MB/s.
        checkpoint: Ok(CheckpointProbe {
            dir: "/fsx/ckpt".into(),
            bytes: 64 << 20,
            elapsed_us: 50_000,
        }),
        gres_gpus: Some(8),
        dcgm_diag: Err(Gap::Skipped("no [active] dcgmi".into())),
        all_reduce: Err(Gap::Skipped("no [active] all_reduce_perf".into())),
        imex: Err(Gap::Skipped("no [fabric] imex_ctl".into())),
        now: NOW,
    };
    let expect = Expect {
        gpus: Some(8),
        fabric_nics: Some(32),
        fabric_nics_from: None,
        port_rate_gbps: None,
        persistence: Some(true),
        driver: Some("550.54.15".into()),
        flap_strikes: 2,
        leftover_memory_mib: DEFAULT_LEFTOVER_MEMORY_MIB,
        checkpoint_floor_mbps: Some(500.0),
        all_reduce_floor_gbps: Some(300.0),
        limits: Limits::default(),
    };
    (inputs, expect)
}

/// The pass clock of [`healthy`]'s inputs.
pub(super) const NOW: u64 = 1_800_000_000;

/// An idle, healthy H100's counters and sensors.
pub(super) fn healthy_counters() -> GpuCounters {
    GpuCounters {
        nvlink_crc_flit: Some(0),
        nvlink_crc_data: Some(0),
        nvlink_replay: Some(0),
        nvlink_recovery: Some(0),
        pcie_replay: Some(0),
        dram_corrected: Some(0),
        dram_uncorrected: Some(0),
        sram_corrected: Some(0),
        sram_uncorrected: Some(0),
        remapped_correctable: Some(0),
        remapped_uncorrectable: Some(0),
        retired_sbe: None,
        retired_dbe: None,
        clocks_event_reasons: Some(0x1),
        temperature_c: Some(34),
        slowdown_temp_c: Some(87),
        shutdown_temp_c: Some(92),
    }
}

pub(super) fn run(inputs: &Inputs, expect: &Expect) -> Report {
    evaluate(
        inputs,
        expect,
        &XidPolicy::embedded(),
        &Scope::default(),
        &PassState::default(),
    )
    .0
}

pub(super) fn sysfs(i: &mut Inputs) -> &mut SysfsData {
    i.sysfs.as_mut().expect("sysfs")
}

pub(super) fn gpu0(i: &Inputs) -> PciAddr {
    i.sysfs.as_ref().expect("sysfs").machine.gpus[0].pci
}

#[test]
fn healthy_node_is_ok_and_every_check_reports() {
    let (inputs, expect) = healthy();
    let r = run(&inputs, &expect);
    assert_eq!(
        r.verdict,
        Verdict::Ok,
        "{:#?}",
        r.checks.iter().filter(|c| c.failed()).collect::<Vec<_>>()
    );
    assert_eq!(r.checks.len(), CHECKS.len());
    assert_eq!(r.reason(), "");
}

/// The ids reports, JSON, metrics labels and admins' alerts match on: renaming a variant
/// must not rename its check.
#[test]
fn check_ids_keep_their_names_and_order() {
    let names: Vec<&str> = CHECKS.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        names,
        [
            "gpu.count",
            "gpu.bus",
            "gpu.pcie_width",
            "gpu.pcie_speed",
            "gpu.nvml",
            "gpu.ecc",
            "gpu.row_remap",
            "gpu.retired_pages",
            "gpu.xid",
            "gpu.nvlink",
            "gpu.recovery_action",
            "gpu.leftover_processes",
            "gpu.leftover_memory",
            "gpu.persistence",
            "gpu.driver",
            "gpu.memory_wear",
            "gpu.nvlink_errors",
            "gpu.pcie_replay",
            "gpu.thermal",
            "gpu.fabric",
            "fabric.count",
            "fabric.port_state",
            "fabric.port_rate",
            "fabric.link_flaps",
            "fabric.pcie_width",
            "fabric.numa",
            "fabric.port_errors",
            "storage.mount",
            "storage.writable",
            "storage.latency",
            "storage.checkpoint_bandwidth",
            "gpu.dcgm_diag",
            "gpu.all_reduce",
            "gpu.imex",
        ]
    );
    for id in CheckId::ALL {
        assert_eq!(CheckId::parse(id.as_str()), Some(id));
        assert_eq!(id.def().id, id);
        assert_eq!(check_def(id.as_str()).map(|d| d.id), Some(id));
        assert_eq!(serde_json::to_value(id).ok(), Some(id.as_str().into()));
    }
    assert_eq!(CheckId::parse("gpu.xdi"), None);
}

#[test]
fn fault_matrix() {
    type Fault = (&'static str, fn(&mut Inputs), Verdict, &'static str);
    let faults: Vec<Fault> = vec![
        (
            "gpu missing",
            |i| {
                sysfs(i).machine.gpus.pop();
            },
            Verdict::Drain,
            "gpu-affinity: GPU_MISSING found=7 want=8",
        ),
        (
            "fallen off the bus",
            |i| {
                let g = gpu0(i);
                sysfs(i).fallen_off.push(g);
            },
            Verdict::Drain,
            "gpu-affinity: GPU_FELL_OFF_BUS gpu=",
        ),
        (
            "nvml lost",
            |i| {
                i.nvml.as_mut().expect("nvml").gpus[1].lost = true;
            },
            Verdict::Drain,
            "gpu-affinity: GPU_FELL_OFF_BUS gpu=",
        ),
        (
            "uncorrectable ECC",
            |i| {
                i.nvml.as_mut().expect("nvml").gpus[2].ecc_volatile_uncorrected = Some(3);
            },
            Verdict::Drain,
            "gpu-affinity: GPU_ECC_UNCORRECTABLE gpu=",
        ),
        (
            "remap pending",
            |i| {
                i.nvml.as_mut().expect("nvml").gpus[0].remap_pending = Some(true);
            },
            Verdict::Drain,
            "gpu-affinity: GPU_ROW_REMAP gpu=",
        ),
        (
            "remap failure",
            |i| {
                i.nvml.as_mut().expect("nvml").gpus[0].remap_failure = Some(true);
            },
            Verdict::Drain,
            "gpu-affinity: GPU_ROW_REMAP gpu=",
        ),
        (
            "XID 79",
            |i| {
                let g = gpu0(i);
                i.xids = Ok(vec![XidEvent {
                    seq: 9,
                    gpu: g,
                    code: 79,
                    detail: None,
                }]);
            },
            Verdict::Drain,
            "gpu-affinity: GPU_XID_79 gpu=",
        ),
        (
            "XID 48",
            |i| {
                let g = gpu0(i);
                i.xids = Ok(vec![XidEvent {
                    seq: 9,
                    gpu: g,
                    code: 48,
                    detail: None,
                }]);
            },
            Verdict::Drain,
            "gpu-affinity: GPU_XID_48 gpu=",
        ),
        (
            "XID 95",
            |i| {
                let g = gpu0(i);
                i.xids = Ok(vec![XidEvent {
                    seq: 9,
                    gpu: g,
                    code: 95,
                    detail: None,
                }]);
            },
            Verdict::Drain,
            "gpu-affinity: GPU_XID_95 gpu=",
        ),
        (
            "XID 94 warns",
            |i| {
                let g = gpu0(i);
                i.xids = Ok(vec![XidEvent {
                    seq: 9,
                    gpu: g,
                    code: 94,
                    detail: None,
                }]);
            },
            Verdict::Warn,
            "gpu-affinity: GPU_XID_94 gpu=",
        ),
        (
            "XID 13 ignored",
            |i| {
                let g = gpu0(i);
                i.xids = Ok(vec![XidEvent {
                    seq: 9,
                    gpu: g,
                    code: 13,
                    detail: None,
                }]);
            },
            Verdict::Ok,
            "",
        ),
        (
            "NVLink down",
            |i| {
                i.nvml.as_mut().expect("nvml").gpus[3].nvlinks[5].1 = false;
            },
            Verdict::Drain,
            "gpu-affinity: GPU_NVLINK gpu=",
        ),
        (
            "NVML hang",
            |i| {
                i.nvml = Err(Gap::Timeout { after_ms: 10_000 });
            },
            Verdict::Drain,
            "gpu-affinity: GPU_NVML_TIMEOUT",
        ),
        (
            "persistence off",
            |i| {
                i.nvml.as_mut().expect("nvml").gpus[0].persistence = Some(false);
            },
            Verdict::Warn,
            "gpu-affinity: GPU_PERSISTENCE gpu=",
        ),
        (
            "NIC port down",
            |i| {
                sysfs(i).machine.nics[4].ports[0].state = Some("1: DOWN".into());
            },
            Verdict::Drain,
            "gpu-affinity: NIC_PORT_DOWN nic=",
        ),
        (
            "slower port",
            |i| {
                sysfs(i).machine.nics[4].ports[0].rate = Some("25 Gb/sec".into());
            },
            Verdict::Drain,
            "gpu-affinity: NIC_PORT_RATE nic=",
        ),
        (
            "NIC missing",
            |i| {
                sysfs(i).machine.nics.pop();
            },
            Verdict::Drain,
            "gpu-affinity: NIC_MISSING found=31 want=32",
        ),
        (
            "degraded PCIe width",
            |i| {
                let g = gpu0(i);
                let m = &mut sysfs(i).machine;
                if let Some(d) = m.pci.iter_mut().find(|d| d.addr == g) {
                    d.link.current_width = Some(8);
                }
            },
            Verdict::Drain,
            "gpu-affinity: GPU_PCIE_WIDTH gpu=",
        ),
        (
            "idle PCIe speed only informs",
            |i| {
                let g = gpu0(i);
                let m = &mut sysfs(i).machine;
                if let Some(d) = m.pci.iter_mut().find(|d| d.addr == g) {
                    d.link.current_speed = Some("2.5 GT/s PCIe".into());
                }
            },
            Verdict::Ok,
            "",
        ),
        (
            "mount missing",
            |i| {
                i.mounts[0].found = Ok(None);
            },
            Verdict::Drain,
            "gpu-affinity: STORAGE_MOUNT mount=/fsx",
        ),
        (
            "wrong mount type",
            |i| {
                i.mounts[0].found = Ok(Some("nfs".into()));
            },
            Verdict::Drain,
            "gpu-affinity: STORAGE_MOUNT mount=/fsx",
        ),
        (
            "stalled mount",
            |i| {
                i.mounts[0].latency_ms = Err(Gap::Timeout { after_ms: 5000 });
            },
            Verdict::Drain,
            "gpu-affinity: STORAGE_STALL_TIMEOUT mount=/fsx",
        ),
        (
            "slow checkpoint writes",
            |i| {
                // 64 MiB in 1 s: 67 MB/s, under the 500 MB/s floor.
                if let Ok(p) = &mut i.checkpoint {
                    p.elapsed_us = 1_000_000;
                }
            },
            Verdict::Drain,
            "gpu-affinity: STORAGE_SLOW dir=/fsx/ckpt",
        ),
        (
            "stalled checkpoint directory",
            |i| {
                i.checkpoint = Err(Gap::Timeout { after_ms: 5000 });
            },
            Verdict::Drain,
            "gpu-affinity: STORAGE_SLOW_TIMEOUT",
        ),
        (
            "read-only mount",
            |i| {
                i.mounts[0].writable = Ok(false);
            },
            Verdict::Drain,
            "gpu-affinity: STORAGE_RO mount=/fsx",
        ),
        (
            "gres disagrees",
            |i| {
                i.gres_gpus = Some(9);
            },
            Verdict::Drain,
            "gpu-affinity: GPU_MISSING found=8 want=9",
        ),
    ];
    for (name, inject, verdict, reason) in faults {
        let (mut inputs, expect) = healthy();
        inject(&mut inputs);
        let r = run(&inputs, &expect);
        assert_eq!(r.verdict, verdict, "{name}: {}", r.summary());
        assert!(
            r.reason().starts_with(reason) && (reason.is_empty() == r.reason().is_empty()),
            "{name}: {}",
            r.reason()
        );
        assert!(r.reason().len() <= drain::MAX_REASON, "{name}");
    }
}

#[test]
fn timeouts_are_timeout_status_and_dependents_skip() {
    let (mut inputs, expect) = healthy();
    inputs.nvml = Err(Gap::Timeout { after_ms: 10_000 });
    let r = run(&inputs, &expect);
    let status = |id: CheckId| r.checks.iter().find(|c| c.id == id).map(|c| c.status);
    assert_eq!(status(CheckId::GpuNvml), Some(Status::Timeout));
    assert_eq!(status(CheckId::GpuEcc), Some(Status::Skip));
    let (mut inputs, expect) = healthy();
    inputs.nvml = Err(Gap::Skipped("[gpu] nvml = false".into()));
    assert_eq!(run(&inputs, &expect).verdict, Verdict::Ok);
}

#[test]
fn prolog_scope_sees_only_the_jobs_gpus() {
    let (mut inputs, expect) = healthy();
    let other = inputs.nvml.as_ref().expect("nvml").gpus[7].pci;
    inputs.nvml.as_mut().expect("nvml").gpus[7].ecc_volatile_uncorrected = Some(1);
    let scope = Scope {
        fast_only: true,
        gpus: Some(vec![gpu0(&inputs)]),
        ..Scope::default()
    };
    let (r, _) = evaluate(
        &inputs,
        &expect,
        &XidPolicy::embedded(),
        &scope,
        &PassState::default(),
    );
    assert_eq!(r.verdict, Verdict::Ok, "{}", r.summary());
    let scope = Scope {
        fast_only: true,
        gpus: other.map(|g| vec![g]),
        ..Scope::default()
    };
    let (r, _) = evaluate(
        &inputs,
        &expect,
        &XidPolicy::embedded(),
        &scope,
        &PassState::default(),
    );
    assert_eq!(r.verdict, Verdict::Drain);
}

#[test]
fn job_marks_are_carried_and_bounded() {
    let mut prev = PassState::default();
    for job in 0..(PassState::MAX_JOB_MARKS as u64 + 10) {
        prev.mark_job(&job.to_string(), 1000 + job);
    }
    assert_eq!(prev.job_kmsg.len(), PassState::MAX_JOB_MARKS);
    assert!(
        !prev.job_kmsg.contains_key("0"),
        "the oldest mark goes first"
    );
    let (inputs, expect) = healthy();
    let (_, next) = evaluate(
        &inputs,
        &expect,
        &XidPolicy::embedded(),
        &Scope::default(),
        &prev,
    );
    assert_eq!(next.job_kmsg, prev.job_kmsg, "a pass keeps the marks");
}

#[test]
fn healthy_node_never_drains_over_1000_passes() {
    let (mut inputs, expect) = healthy();
    let policy = XidPolicy::embedded();
    let mut state = PassState::default();
    let rows = sinfo_rows("n1|gpu*|idle|gpu:8|none\n");
    let g = gpu0(&inputs);
    for pass in 0..1000u64 {
        // What varies on a healthy node: idle link speed, a stat latency, ignored XIDs.
        inputs.mounts[0].latency_ms = Ok(pass % 50);
        inputs.xids = Ok((0..pass % 3)
            .map(|s| XidEvent {
                seq: s,
                gpu: g,
                code: 13,
                detail: None,
            })
            .collect());
        let (r, next) = evaluate(&inputs, &expect, &policy, &Scope::default(), &state);
        assert_eq!(r.verdict, Verdict::Ok, "pass {pass}: {}", r.summary());
        let action = decide(
            &r,
            Some(&rows),
            "n1",
            &DrainPolicy::default(),
            pass as u32,
            true,
        );
        assert!(
            matches!(action, Action::Leave(_)),
            "pass {pass}: {action:?}"
        );
        state = next;
    }
}

fn drain_report(code: u32) -> Report {
    let (mut inputs, expect) = healthy();
    let g = gpu0(&inputs);
    inputs.xids = Ok(vec![XidEvent {
        seq: 1,
        gpu: g,
        code,
        detail: None,
    }]);
    run(&inputs, &expect)
}

fn rows(text: &str) -> Vec<NodeRow> {
    sinfo_rows(text)
}

#[test]
fn drain_policy() {
    let bad = drain_report(79);
    let ok = run(&healthy().0, &healthy().1);
    let p = DrainPolicy::default();
    let reason = bad.reason();
    assert!(
        reason.starts_with("gpu-affinity: GPU_XID_79 gpu="),
        "{reason}"
    );
    // Drains an idle node.
    assert_eq!(
        decide(
            &bad,
            Some(&rows("n1|gpu*|mixed|gpu:8|none\n")),
            "n1",
            &p,
            0,
            false
        ),
        Action::Set {
            state: "drain",
            reason: reason.clone()
        }
    );
    // A foreign reason is kept.
    let admin = rows("n1|gpu*|drained|gpu:8|admin: bad fan\n");
    assert!(
        matches!(decide(&bad, Some(&admin), "n1", &p, 0, false), Action::Leave(Leave::ForeignReason(w)) if w == "admin: bad fan")
    );
    assert!(matches!(
        decide(&ok, Some(&admin), "n1", &p, 9, true),
        Action::Leave(Leave::DrainedByOther)
    ));
    // Unreadable state: nothing changes.
    assert!(matches!(
        decide(&bad, None, "n1", &p, 0, false),
        Action::Leave(Leave::StateUnreadable)
    ));
    assert!(matches!(
        decide(
            &bad,
            Some(&rows("n2|gpu|idle|gpu:8|none\n")),
            "n1",
            &p,
            0,
            false
        ),
        Action::Leave(Leave::NotInSinfo(n)) if n == "n1"
    ));
    // Resume only the suite's own reason, after resume_after clean passes, only from health.
    let own = rows(&format!("n1|gpu*|drained|gpu:8|{reason}\n"));
    assert!(
        matches!(decide(&ok, Some(&own), "n1", &p, 2, true), Action::Leave(w @ Leave::Waiting { clean_passes: 2, resume_after: 3 }) if w.to_string() == "clean pass 2 of 3 before resuming")
    );
    assert_eq!(decide(&ok, Some(&own), "n1", &p, 3, true), Action::Resume);
    assert!(matches!(
        decide(&ok, Some(&own), "n1", &p, 3, false),
        Action::Leave(Leave::NeverResume)
    ));
    // Already drained with the same reason: no churn.
    assert!(matches!(
        decide(&bad, Some(&own), "n1", &p, 0, false),
        Action::Leave(Leave::AlreadyDrained)
    ));
}

#[test]
fn circuit_breaker_holds_back_past_max_share() {
    let bad = drain_report(79);
    let p = DrainPolicy {
        max_share: 0.25,
        ..DrainPolicy::default()
    };
    let own = "gpu-affinity: GPU_XID_79 gpu=0000:53:00.0";
    let one = rows(&format!(
        "n1|gpu*|mixed|gpu:8|none\nn2|gpu*|drained|gpu:8|{own}\nn3|gpu*|idle|gpu:8|none\nn4|gpu*|idle|gpu:8|none\nn9|other|drained|gpu:8|{own}\n"
    ));
    assert!(
        matches!(decide(&bad, Some(&one), "n1", &p, 0, false), Action::HeldBack(w) if w.contains("1 of 4"))
    );
    let p = DrainPolicy {
        max_share: 0.5,
        ..p
    };
    assert!(matches!(
        decide(&bad, Some(&one), "n1", &p, 0, false),
        Action::Set { .. }
    ));
    // The suite's reason left on nodes back in service (Slurm 24.11 without accounting
    // keeps it across a resume) does not count, and such a node is not resumed again.
    let stale = rows(&format!(
        "n1|gpu*|mixed|gpu:8|none\nn2|gpu*|idle|gpu:8|{own}\nn3|gpu*|mixed|gpu:8|{own}\nn4|gpu*|idle|gpu:8|none\n"
    ));
    assert!(matches!(
        decide(&bad, Some(&stale), "n1", &DrainPolicy::default(), 0, false),
        Action::Set { .. }
    ));
    let ok = run(&healthy().0, &healthy().1);
    assert_eq!(
        decide(&ok, Some(&stale), "n2", &DrainPolicy::default(), 9, true),
        Action::Leave(Leave::Healthy)
    );
    // Admin drains do not count against the suite.
    let admin = rows("n1|gpu*|mixed|gpu:8|none\nn2|gpu*|drained|gpu:8|admin\n");
    assert!(matches!(
        decide(&bad, Some(&admin), "n1", &DrainPolicy::default(), 0, false),
        Action::Set { .. }
    ));
}

#[test]
fn a_node_failing_again_soon_after_a_boot_is_handed_off_for_replacement() {
    let now = 1_800_000_000;
    let hp = DrainPolicy {
        handoff: Handoff::Hyperpod,
        ..DrainPolicy::default()
    };
    let row = rows("n1|gpu*|idle|gpu:8|none\n");
    let mut boots = super::repair::Boots::default();
    boots.record(now - 30 * 3600);
    let mut long_up = drain_report(79);
    super::repair::escalate(&mut long_up, &boots, now);
    let Action::Set { reason, .. } = decide(&long_up, Some(&row), "n1", &hp, 0, false) else {
        panic!("a drain")
    };
    assert_eq!(
        reason, "Action:Reboot",
        "up for 30 h: a reboot is the repair"
    );
    boots.record(now - 3600);
    let mut again = drain_report(79);
    super::repair::escalate(&mut again, &boots, now);
    let deciding = again.deciding().expect("deciding");
    assert!(
        deciding.evidence.contains("escalated to replace"),
        "{}",
        deciding.evidence
    );
    let Action::Set { reason, .. } = decide(&again, Some(&row), "n1", &hp, 0, false) else {
        panic!("a drain")
    };
    assert_eq!(reason, "Action:Replace");
}

#[test]
fn handoff_modes() {
    let bad = drain_report(79);
    let row = rows("n1|gpu*|mixed|gpu:8|none\n");
    let hp = DrainPolicy {
        handoff: Handoff::Hyperpod,
        ..DrainPolicy::default()
    };
    let Action::Set { state, reason } = decide(&bad, Some(&row), "n1", &hp, 0, false) else {
        panic!("hyperpod")
    };
    assert_eq!(state, "fail");
    // Exactly the word: HyperPod ignores a reason with anything after it.
    assert_eq!(reason, "Action:Reboot");
    assert!(Handoff::Hyperpod.is_own(&reason));
    assert!(!Handoff::Hyperpod.is_own("Action:Reboot by the admin"));
    assert!(!Handoff::Drain.is_own("Action:Reboot"));
    // Counted for the breaker, never resumed: HyperPod reboots or replaces the node.
    let failed = rows("n1|gpu*|fail|gpu:8|Action:Reboot\n");
    assert_eq!(
        decide(
            &run(&healthy().0, &healthy().1),
            Some(&failed),
            "n1",
            &hp,
            99,
            true
        ),
        Action::Leave(Leave::OwnerlessWords)
    );
    let gcp = DrainPolicy {
        handoff: Handoff::SlurmGcp,
        ..DrainPolicy::default()
    };
    assert_eq!(
        decide(&bad, Some(&row), "n1", &gcp, 0, false),
        Action::Set {
            state: "drain",
            reason: "XID".into()
        }
    );
    let (mut slow, expect) = healthy();
    sysfs(&mut slow).machine.nics[0].ports[0].rate = Some("25 Gb/sec".into());
    let slow = run(&slow, &expect);
    assert_eq!(
        decide(&slow, Some(&row), "n1", &gcp, 0, false),
        Action::Set {
            state: "drain",
            reason: "PERFORMANCE".into()
        }
    );
    // slurm-gcp words are never resumed: they carry no owner.
    let ok = run(&healthy().0, &healthy().1);
    assert!(matches!(
        decide(
            &ok,
            Some(&rows("n1|gpu*|drained|gpu:8|XID\n")),
            "n1",
            &gcp,
            9,
            true
        ),
        Action::Leave(_)
    ));
    assert!(!Handoff::Drain.is_own("XID"));
    assert!(Handoff::Drain.is_own("gpu-affinity: X"));
    assert!(!Handoff::Drain.is_own("admin said gpu-affinity: X"));
}

#[test]
fn only_an_unknown_node_state_is_state_unknown() {
    assert!(Leave::StateUnreadable.state_unknown());
    assert!(Leave::NotInSinfo("n1".into()).state_unknown());
    for other in [
        Leave::ForeignReason("admin".into()),
        Leave::AlreadyDrained,
        Leave::NeverResume,
        Leave::DrainedByOther,
        Leave::Healthy,
        Leave::OwnerlessWords,
        Leave::Waiting {
            clean_passes: 1,
            resume_after: 3,
        },
    ] {
        assert!(!other.state_unknown(), "{other}");
    }
}

/// The kernel log starts its sequence numbers again at each boot: job marks from another
/// boot are dropped (a job requeued across a reboot keeps its id), counters are kept; an
/// unreadable boot id changes nothing.
#[test]
fn job_marks_do_not_outlive_their_boot() {
    let a = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";
    let b = "9f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";
    let mut s = PassState::default().in_boot(Some(a));
    s.mark_job("41", 900_000);
    s.drains_held_back = 2;
    let same = s.clone().in_boot(Some(a));
    assert_eq!(same.job_kmsg.get("41"), Some(&900_000));
    let unknown = s.clone().in_boot(None);
    assert_eq!(unknown, s);
    let rebooted = s.in_boot(Some(b));
    assert!(rebooted.job_kmsg.is_empty());
    assert_eq!(rebooted.drains_held_back, 2);
    assert_eq!(rebooted.boot_id.as_deref(), Some(b));
    // Saved states without the field read as "boot unknown": their marks go at the first
    // pass that reads a boot id.
    let old: PassState = serde_json::from_str(r#"{"job_kmsg":{"7":5}}"#).expect("old state");
    assert!(old.in_boot(Some(a)).job_kmsg.is_empty());
    // What evaluate hands on keeps the boot.
    let (inputs, expect) = healthy();
    let prev = PassState::default().in_boot(Some(a));
    let (_, next) = evaluate(
        &inputs,
        &expect,
        &XidPolicy::embedded(),
        &Scope::default(),
        &prev,
    );
    assert_eq!(next.boot_id.as_deref(), Some(a));
}

#[test]
fn boot_id_is_the_kernels_uuid_form() {
    assert_eq!(
        parse::boot_id("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9\n").as_deref(),
        Some("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")
    );
    for bad in [
        "",
        "0f1e2d3c-4b5a-4978-8695",
        "0F1E2D3C-4B5A-4978-8695-A4B3C2D1E0F9",
        "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0fz",
        "../etc/passwd",
    ] {
        assert_eq!(parse::boot_id(bad), None, "{bad:?}");
    }
}
