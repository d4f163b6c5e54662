//! The checks' code, one family per file as LBNL NHC keeps them: [`pci`] (GPUs on the bus
//! and PCIe links), [`nvml`] (what the driver says of each GPU), [`kmsg`] (XIDs in the
//! kernel log), [`fabric`] (RDMA NICs and ports), [`imex`] (the NVL72 IMEX domain),
//! [`storage`] (mounts and the checkpoint directory) and [`active`] (DCGM's diagnostic
//! and all_reduce_perf).
//!
//! [`run`] dispatches on [`CheckId`] with no fallback arm, so a check of the table without
//! code, or code for no check, does not compile.

use super::xid::{Repair, XidPolicy};
use super::{CheckDef, CheckId, Class, Expect, Gap, Gathered, Inputs, NvmlGpu, PassState, Scope};
use crate::model::{Gpu, Machine, Nic, PciLink};
use crate::pci::PciAddr;

/// Dependent checks skip when the input they share is missing; the input's owner check
/// reports the gap itself (so one hung NVML is one timeout, not eight).
macro_rules! need {
    ($input:expr, $owner:expr) => {
        match $crate::health::checks::need($input, $owner) {
            Ok(v) => v,
            Err(r) => return r,
        }
    };
}

mod active;
mod counters;
mod fabric;
mod imex;
mod kmsg;
mod nvml;
mod pci;
mod storage;

/// One problem a check found.
pub(super) struct Finding {
    pub(super) code: String,
    pub(super) subject: Option<String>,
    pub(super) evidence: String,
    /// The finding's own class where it differs from its check's (an XID the policy only
    /// warns of, a probe a job user interfered with).
    pub(super) class: Option<Class>,
    pub(super) repair: Repair,
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

/// `finding` at warning class, whatever its check's class.
fn warning(code: impl Into<String>, subject: Option<String>, evidence: String) -> Finding {
    Finding {
        class: Some(Class::Warn),
        ..finding(code, subject, evidence)
    }
}

/// What one check concluded before it becomes an [`super::Outcome`].
pub(super) enum Judgement {
    Pass(String),
    Found(Vec<Finding>),
    Missing(Gap),
    /// The input is there but says nothing this check can judge.
    Skip(String),
}

/// What every check may read: one pass's inputs, the admin's expectations, the XID
/// policy, the pass's scope and the previous pass's state.
pub(super) struct Ctx<'a> {
    pub(super) inputs: &'a Inputs,
    pub(super) expect: &'a Expect,
    pub(super) policy: &'a XidPolicy,
    pub(super) scope: &'a Scope,
    pub(super) prev: &'a PassState,
}

/// Run one check. `next` is the state the next pass compares against (the flap counters).
pub(super) fn run(def: &CheckDef, cx: &Ctx, next: &mut PassState) -> Judgement {
    match def.id {
        CheckId::GpuCount => pci::gpu_count(cx),
        CheckId::GpuBus => pci::gpu_bus(def, cx),
        CheckId::GpuPcieWidth => pci::gpu_pcie_width(def, cx),
        CheckId::GpuPcieSpeed => pci::gpu_pcie_speed(def, cx),
        CheckId::GpuNvml => nvml::answers(cx),
        CheckId::GpuEcc => nvml::ecc(def, cx),
        CheckId::GpuRowRemap => nvml::row_remap(def, cx),
        CheckId::GpuRetiredPages => nvml::retired_pages(def, cx),
        CheckId::GpuXid => kmsg::xid(cx),
        CheckId::GpuNvlink => nvml::nvlink(def, cx),
        CheckId::GpuRecoveryAction => nvml::recovery_action(def, cx),
        CheckId::GpuLeftoverProcesses => nvml::leftover_processes(def, cx),
        CheckId::GpuLeftoverMemory => nvml::leftover_memory(def, cx),
        CheckId::GpuPersistence => nvml::persistence(def, cx),
        CheckId::GpuDriver => nvml::driver(def, cx),
        CheckId::GpuMemoryWear => counters::memory_wear(cx, next),
        CheckId::GpuNvlinkErrors => counters::nvlink_errors(cx, next),
        CheckId::GpuPcieReplay => counters::pcie_replay(cx, next),
        CheckId::GpuThermal => counters::thermal(cx, next),
        CheckId::GpuFabric => counters::nvlink_fabric(cx, next),
        CheckId::GpuImex => imex::domain(def, cx),
        CheckId::FabricCount => fabric::count(def, cx),
        CheckId::FabricPortState => fabric::ports_active(def, cx),
        CheckId::FabricPortRate => fabric::port_rates(def, cx),
        CheckId::FabricLinkFlaps => fabric::link_flaps(def, cx, next),
        CheckId::FabricPcieWidth => pci::fabric_pcie_width(def, cx),
        CheckId::FabricNuma => fabric::numa(def, cx),
        CheckId::FabricPortErrors => counters::port_errors(cx, next),
        CheckId::StorageMount => storage::mount(def, cx),
        CheckId::StorageWritable => storage::writable(def, cx),
        CheckId::StorageLatency => storage::latency(def, cx),
        CheckId::StorageCheckpointBandwidth => storage::checkpoint_bandwidth(def, cx),
        CheckId::GpuDcgmDiag => active::dcgm_diag(def, cx),
        CheckId::GpuAllReduce => active::all_reduce(def, cx),
    }
}

/// See [`need!`]: the input, or the judgement a check makes without it.
pub(super) fn need<T>(input: &Gathered<T>, owner: bool) -> Result<&T, Judgement> {
    match input {
        Ok(v) => Ok(v),
        Err(gap) if owner => Err(Judgement::Missing(gap.clone())),
        Err(Gap::Skipped(why)) => Err(Judgement::Skip(why.clone())),
        Err(_) => Err(Judgement::Skip(
            "input missing (see its owner check)".into(),
        )),
    }
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

fn show(pci: Option<PciAddr>) -> String {
    pci.map_or_else(|| "an unnamed GPU".to_string(), |p| p.to_string())
}

fn nic_name(nic: &Nic) -> String {
    nic.name()
        .map_or_else(|| nic.pci.to_string(), str::to_string)
}
