//! Node health: one table of checks across the three tiers (GPU, fabric, storage), pure
//! evaluation from gathered inputs to verdicts with evidence, and the drain/resume policy.
//!
//! Nothing here reads a file or runs a process. The prolog crate's readers gather
//! [`Inputs`] (each one under a hard time bound, a late one arriving as [`Gap::Timeout`]),
//! [`evaluate`] turns them into a [`Report`], and [`drain::decide`] says what to tell Slurm.
//! Invariant 4 lives in the readers' deadlines plus the rule here that a missing input is a
//! verdict (`timeout` / `skip`), never a panic or a hang.

pub mod active;
mod checks;
pub mod counters;
pub mod drain;
pub mod eval;
pub mod expect;
pub mod handoff;
pub mod imex;
pub mod nvlink_fabric;
pub mod parse;
pub mod repair;
pub mod xid;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Machine;
use crate::pci::PciAddr;

pub use eval::evaluate;

/// The owned prefix of every drain reason the suite writes (Invariant 5).
pub const PREFIX: &str = "gpu-affinity:";

/// The reference's three tiers of a GPU node (GPU, fabric, storage), plus the cluster's
/// own config. One type for health and `audit` (which re-exports it): both sort their
/// checks into the same tiers, and metrics and JSON spell them the same. Only the audit
/// has cluster-wide checks (slurm.conf, the topology file); every health check is one of
/// the first three.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Gpu,
    Fabric,
    Storage,
    Cluster,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Gpu => "gpu",
            Tier::Fabric => "fabric",
            Tier::Storage => "storage",
            Tier::Cluster => "cluster",
        }
    }
}

/// What a failing check does to the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Info,
    Warn,
    Drain,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Timeout,
    Skip,
}

/// Which kind of fault a check reports, for slurm-gcp's fixed reason words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A GPU hardware fault (slurm-gcp `XID`).
    Gpu,
    /// Working but slow (slurm-gcp `PERFORMANCE`).
    Performance,
    /// Anything else (slurm-gcp `unspecified`).
    Other,
}

/// Declares [`CheckId`] from one list, so that its variants, [`CheckId::ALL`] and
/// [`CheckId::as_str`] cannot disagree.
macro_rules! check_ids {
    ($($variant:ident => $id:literal,)*) => {
        /// A check of [`CHECKS`]: the one name the evaluation dispatches on, so a check
        /// without code (or code for no check) does not compile. [`CheckId::as_str`] is
        /// the id reports, JSON, metrics labels and the docs show; those strings never
        /// change.
        ///
        /// Declaration order is [`CHECKS`]' order (report order), asserted at compile time.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum CheckId {
            $($variant,)*
        }

        impl CheckId {
            /// Every check, in report order.
            pub const ALL: [CheckId; [$($id),*].len()] = [$(CheckId::$variant),*];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(CheckId::$variant => $id,)*
                }
            }
        }
    };
}

check_ids! {
    GpuCount => "gpu.count",
    GpuBus => "gpu.bus",
    GpuPcieWidth => "gpu.pcie_width",
    GpuPcieSpeed => "gpu.pcie_speed",
    GpuNvml => "gpu.nvml",
    GpuEcc => "gpu.ecc",
    GpuRowRemap => "gpu.row_remap",
    GpuRetiredPages => "gpu.retired_pages",
    GpuXid => "gpu.xid",
    GpuNvlink => "gpu.nvlink",
    GpuRecoveryAction => "gpu.recovery_action",
    GpuLeftoverProcesses => "gpu.leftover_processes",
    GpuLeftoverMemory => "gpu.leftover_memory",
    GpuPersistence => "gpu.persistence",
    GpuDriver => "gpu.driver",
    GpuMemoryWear => "gpu.memory_wear",
    GpuNvlinkErrors => "gpu.nvlink_errors",
    GpuPcieReplay => "gpu.pcie_replay",
    GpuThermal => "gpu.thermal",
    GpuFabric => "gpu.fabric",
    FabricCount => "fabric.count",
    FabricPortState => "fabric.port_state",
    FabricPortRate => "fabric.port_rate",
    FabricLinkFlaps => "fabric.link_flaps",
    FabricPcieWidth => "fabric.pcie_width",
    FabricNuma => "fabric.numa",
    FabricPortErrors => "fabric.port_errors",
    StorageMount => "storage.mount",
    StorageWritable => "storage.writable",
    StorageLatency => "storage.latency",
    StorageCheckpointBandwidth => "storage.checkpoint_bandwidth",
    GpuDcgmDiag => "gpu.dcgm_diag",
    GpuAllReduce => "gpu.all_reduce",
    GpuImex => "gpu.imex",
}

impl CheckId {
    /// The id as reports spell it (`gpu.xid`): for input that names a check.
    pub fn parse(id: &str) -> Option<CheckId> {
        CheckId::ALL.into_iter().find(|c| c.as_str() == id)
    }

    /// This check's row of [`CHECKS`].
    pub fn def(self) -> &'static CheckDef {
        // In range: CHECKS holds one row per id, in declaration order (asserted below).
        &CHECKS[self as usize]
    }
}

impl std::fmt::Display for CheckId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CheckId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

// The table and the enum agree: one row per id, in declaration order. A row left out of
// `CHECKS`, or out of place, fails the build here.
const _: () = {
    assert!(CHECKS.len() == CheckId::ALL.len());
    let mut i = 0;
    while i < CHECKS.len() {
        assert!(CHECKS[i].id as usize == i && CheckId::ALL[i] as usize == i);
        // Cluster-wide checks are the audit's; a node's health is one of its three tiers.
        assert!(!matches!(CHECKS[i].tier, Tier::Cluster));
        i += 1;
    }
};

/// One row of the check table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckDef {
    pub id: CheckId,
    pub tier: Tier,
    pub class: Class,
    /// The reader's hard bound for the input this check needs, in milliseconds.
    pub bound_ms: u64,
    /// The structured code in a drain reason (`GPU_XID_79` is built from `GPU_XID`).
    pub code: &'static str,
    pub fault: Fault,
    /// Runs in the prolog's fast pass (the job's GPUs only for GPU checks).
    pub fast: bool,
    pub what: &'static str,
}

// One table row per call reads as a table; a struct literal per row would triple its length.
#[allow(clippy::too_many_arguments)]
const fn check(
    id: CheckId,
    tier: Tier,
    class: Class,
    bound_ms: u64,
    code: &'static str,
    fault: Fault,
    fast: bool,
    what: &'static str,
) -> CheckDef {
    CheckDef {
        id,
        tier,
        class,
        bound_ms,
        code,
        fault,
        fast,
        what,
    }
}

/// Bounds per input: sysfs reads are page-sized and local; NVML can take seconds when a GPU
/// is sick (and is the call that hangs); storage probes go over the network.
pub const SYSFS_BOUND_MS: u64 = 2_000;
pub const NVML_BOUND_MS: u64 = 10_000;
pub const KMSG_BOUND_MS: u64 = 2_000;
pub const STORAGE_BOUND_MS: u64 = 5_000;
/// Active tests' default bound (`[active] timeout_s` overrides it): DCGM's level 2 takes
/// about two minutes; a hang past the bound is a warning, never a drain.
pub const ACTIVE_BOUND_MS: u64 = 300_000;

use Class::{Drain, Info, Warn};
use Fault::{Gpu as GpuFault, Other, Performance};
use Tier::{Fabric, Gpu as GpuTier, Storage};

/// The one table of checks. Order is report order; the first failing drain check names the
/// drain reason.
pub const CHECKS: &[CheckDef] = &[
    check(
        CheckId::GpuCount,
        GpuTier,
        Drain,
        SYSFS_BOUND_MS,
        "GPU_MISSING",
        GpuFault,
        true,
        "GPUs on PCI match [gpu] expected, NVML's count and Slurm's gres count",
    ),
    check(
        CheckId::GpuBus,
        GpuTier,
        Drain,
        SYSFS_BOUND_MS,
        "GPU_FELL_OFF_BUS",
        GpuFault,
        true,
        "no GPU has fallen off the bus (config space all ones, NVML GPU lost)",
    ),
    check(
        CheckId::GpuPcieWidth,
        GpuTier,
        Drain,
        SYSFS_BOUND_MS,
        "GPU_PCIE_WIDTH",
        Performance,
        true,
        "each GPU's PCIe link runs at its maximum width",
    ),
    // Speed only informs: GPUs drop their link to a lower generation when idle to save power,
    // so a slow idle link is normal; width does not change with load.
    check(
        CheckId::GpuPcieSpeed,
        GpuTier,
        Info,
        SYSFS_BOUND_MS,
        "GPU_PCIE_SPEED",
        Performance,
        true,
        "each GPU's PCIe link speed (lower when idle is normal)",
    ),
    check(
        CheckId::GpuNvml,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_NVML",
        GpuFault,
        true,
        "NVML answers within its bound",
    ),
    check(
        CheckId::GpuEcc,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_ECC_UNCORRECTABLE",
        GpuFault,
        true,
        "no volatile uncorrectable ECC errors",
    ),
    check(
        CheckId::GpuRowRemap,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_ROW_REMAP",
        GpuFault,
        true,
        "no row remap pending or failed (A100 and later)",
    ),
    check(
        CheckId::GpuRetiredPages,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_PAGE_RETIRE",
        GpuFault,
        true,
        "no page retirement pending (GPUs before A100)",
    ),
    check(
        CheckId::GpuXid,
        GpuTier,
        Drain,
        KMSG_BOUND_MS,
        "GPU_XID",
        GpuFault,
        true,
        "no critical XID in the kernel log since boot or the last driver load (the epilog: since the job's prolog; policy: xid-policy.toml)",
    ),
    check(
        CheckId::GpuNvlink,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_NVLINK",
        Performance,
        false,
        "every NVLink the GPU has is active",
    ),
    check(
        CheckId::GpuRecoveryAction,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_RECOVERY",
        GpuFault,
        true,
        "NVML's GPU recovery action is none (driver R550+; older drivers: skipped)",
    ),
    check(
        CheckId::GpuLeftoverProcesses,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_PROCS_LEFT",
        Other,
        false,
        "no compute process left on the job's GPUs after it ended (epilog only)",
    ),
    // Warn, not drain: with no process left the memory cannot grow, and the driver may
    // still be tearing the job's contexts down when the epilog runs (it starts as soon as
    // the job's processes are gone); a leak that stays shows in every later epilog.
    check(
        CheckId::GpuLeftoverMemory,
        GpuTier,
        Warn,
        NVML_BOUND_MS,
        "GPU_MEM_LEFT",
        Other,
        false,
        "no GPU memory above [gpu] leftover_memory_mib held with no process left after the job (epilog only)",
    ),
    check(
        CheckId::GpuPersistence,
        GpuTier,
        Warn,
        NVML_BOUND_MS,
        "GPU_PERSISTENCE",
        Other,
        false,
        "persistence mode as [gpu] persistence says",
    ),
    check(
        CheckId::GpuDriver,
        GpuTier,
        Warn,
        NVML_BOUND_MS,
        "GPU_DRIVER",
        Other,
        false,
        "driver version as [gpu] driver says",
    ),
    // Counts, not rates: lifetime wear against the peers' replacement counts.
    check(
        CheckId::GpuMemoryWear,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_MEMORY_WEAR",
        GpuFault,
        true,
        "memory within the replacement counts: no uncorrectable and at most 10,000 correctable SRAM ECC errors, at most 20 M DRAM ECC errors (AzNHC); under 512 uncorrectable remapped rows (NVIDIA's RMA count); under 63 retired pages, and past 15 double-bit ones no more than one new a week (DCGM)",
    ),
    check(
        CheckId::GpuNvlinkErrors,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_NVLINK_ERRORS",
        Performance,
        false,
        "no NVLink replay or recovery error and CRC errors under 100/s within the counter window (DCGM's NVLink watch; rising CRC errors below that warn)",
    ),
    check(
        CheckId::GpuPcieReplay,
        GpuTier,
        Warn,
        NVML_BOUND_MS,
        "GPU_PCIE_REPLAY",
        Performance,
        false,
        "PCIe replays within DCGM's allowance for the link's generation and width (16 a minute at Gen4 x16, 31 at Gen5 x16)",
    ),
    check(
        CheckId::GpuThermal,
        GpuTier,
        Warn,
        NVML_BOUND_MS,
        "GPU_THERMAL",
        Performance,
        false,
        "below the driver's slowdown temperature, and no hardware clocks-event reason (HW slowdown, SW/HW thermal slowdown, power brake)",
    ),
    check(
        CheckId::GpuFabric,
        GpuTier,
        Drain,
        NVML_BOUND_MS,
        "GPU_FABRIC",
        GpuFault,
        true,
        "the GPU's NVLink fabric registration (the Fabric Manager on HGX, the NVLink domain on NVL72) completed without error and its health mask is clean (skipped without a fabric)",
    ),
    check(
        CheckId::FabricCount,
        Fabric,
        Drain,
        SYSFS_BOUND_MS,
        "NIC_MISSING",
        Other,
        true,
        "every expected fabric NIC is present ([fabric] expected_nics, else the detected instance's catalog machine)",
    ),
    check(
        CheckId::FabricPortState,
        Fabric,
        Drain,
        SYSFS_BOUND_MS,
        "NIC_PORT_DOWN",
        Other,
        true,
        "every fabric NIC port is ACTIVE",
    ),
    check(
        CheckId::FabricPortRate,
        Fabric,
        Drain,
        SYSFS_BOUND_MS,
        "NIC_PORT_RATE",
        Performance,
        true,
        "every fabric port runs at the expected rate (else the fastest port's)",
    ),
    check(
        CheckId::FabricLinkFlaps,
        Fabric,
        Drain,
        SYSFS_BOUND_MS,
        "NIC_LINK_FLAPS",
        Performance,
        false,
        "link_downed counters rise in fewer than [fabric] flap_strikes passes",
    ),
    check(
        CheckId::FabricPcieWidth,
        Fabric,
        Drain,
        SYSFS_BOUND_MS,
        "NIC_PCIE_WIDTH",
        Performance,
        false,
        "each fabric NIC's PCIe link runs at its maximum width",
    ),
    check(
        CheckId::FabricNuma,
        Fabric,
        Warn,
        SYSFS_BOUND_MS,
        "NIC_NUMA",
        Performance,
        false,
        "every GPU has a fabric NIC on its NUMA node",
    ),
    check(
        CheckId::FabricPortErrors,
        Fabric,
        Drain,
        SYSFS_BOUND_MS,
        "NIC_PORT_ERRORS",
        Other,
        false,
        "every fabric port's physical state is LinkUp; symbol_error and link_error_recovery rise by less than 30 and 10 within the counter window and are not saturated; EFA's error counters do not rise",
    ),
    check(
        CheckId::StorageMount,
        Storage,
        Drain,
        STORAGE_BOUND_MS,
        "STORAGE_MOUNT",
        Other,
        true,
        "each [[storage.mount]] is mounted with its type",
    ),
    check(
        CheckId::StorageWritable,
        Storage,
        Drain,
        STORAGE_BOUND_MS,
        "STORAGE_RO",
        Other,
        false,
        "each mount marked write = true takes a create + remove",
    ),
    check(
        CheckId::StorageLatency,
        Storage,
        Drain,
        STORAGE_BOUND_MS,
        "STORAGE_STALL",
        Other,
        true,
        "each mount answers a stat within its bound",
    ),
    check(
        CheckId::StorageCheckpointBandwidth,
        Storage,
        Drain,
        STORAGE_BOUND_MS,
        "STORAGE_SLOW",
        Performance,
        false,
        "a [storage] checkpoint_probe_mib file written + fsynced under checkpoint_dir reaches checkpoint_floor_mbps",
    ),
    check(
        CheckId::GpuDcgmDiag,
        GpuTier,
        Drain,
        ACTIVE_BOUND_MS,
        "GPU_DCGM_DIAG",
        GpuFault,
        true,
        "[active] dcgmi diag -r dcgm_diag_level -j reports no failed test (where [active] runs it)",
    ),
    check(
        CheckId::GpuAllReduce,
        GpuTier,
        Drain,
        ACTIVE_BOUND_MS,
        "GPU_ALLREDUCE_SLOW",
        Performance,
        true,
        "[active] all_reduce_perf on the node's GPUs reaches all_reduce_floor_gbps bus bandwidth with no wrong values",
    ),
    // Last: a domain-wide state, so a fault of this node's own names the drain first.
    check(
        CheckId::GpuImex,
        GpuTier,
        Drain,
        imex::IMEX_BOUND_MS,
        "GPU_IMEX",
        Other,
        true,
        "[fabric] imex_ctl: the GB200/GB300 NVL72 IMEX domain is UP and this node's daemon READY (nvidia-imex-ctl -N -j, -q; DEGRADED or DOWN drains, a daemon not yet READY warns; unset, not configured or no answer: skipped)",
    ),
];

/// The row of the check a report names (`gpu.xid`).
pub fn check_def(id: &str) -> Option<&'static CheckDef> {
    CheckId::parse(id).map(CheckId::def)
}

/// Why an input is missing: the verdict a reader's failure becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gap {
    /// The reader passed its bound (a hung NVML call, a stalled mount).
    Timeout { after_ms: u64 },
    /// The reader ran and failed; the text says why.
    Failed(String),
    /// Not asked for (`[gpu] nvml = false`, nothing configured).
    Skipped(String),
    /// The reader could not run for a reason a job user can cause (a name planted where
    /// a probe creates its file, a symlink on the way): a warning naming the cause, never
    /// a drain, since any user could otherwise drain the node.
    Interfered(String),
}

pub type Gathered<T> = Result<T, Gap>;

/// What the sysfs readers found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SysfsData {
    /// Discovered with PCIe links and RDMA port state/rate.
    pub machine: Machine,
    /// PCI functions whose config space reads all ones (gone from the bus).
    pub fallen_off: Vec<PciAddr>,
    /// `DEV/PORT` -> `link_downed` counter, where the kernel has one.
    pub link_downed: BTreeMap<String, u64>,
    /// `DEV/PORT` -> the port's physical state and error counters, for every fabric port.
    pub ports: BTreeMap<String, counters::PortCounters>,
}

/// One GPU as NVML reports it. `None`: NVML does not support the field on this GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvmlGpu {
    pub pci: Option<PciAddr>,
    /// NVML says the GPU is lost (fallen off the bus).
    pub lost: bool,
    pub ecc_volatile_uncorrected: Option<u64>,
    pub remap_pending: Option<bool>,
    pub remap_failure: Option<bool>,
    pub retired_pending: Option<bool>,
    /// (link, active) for every link NVML reports.
    pub nvlinks: Vec<(u32, bool)>,
    pub persistence: Option<bool>,
    /// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0 none, 1 GPU reset, 2 node reboot, 3 drain
    /// P2P, 4 drain and reset (nvml.h `nvmlDeviceGpuRecoveryAction_t`).
    pub recovery_action: Option<u32>,
    /// Processes with a compute context on the GPU (NVML's running compute processes).
    pub compute_processes: Option<u32>,
    /// Device memory in use, MiB (NVML's memory info v2 `used`, which leaves out the
    /// driver's reserved memory).
    pub memory_used_mib: Option<u64>,
    /// Error counters and sensors, judged by count and rate ([`counters`]).
    pub counters: counters::GpuCounters,
    /// The GPU's NVLink fabric probe; `None`: the driver has no fabric call.
    pub fabric: Option<nvlink_fabric::FabricProbe>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvmlData {
    pub driver: Option<String>,
    pub gpus: Vec<NvmlGpu>,
}

/// One configured mount, probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountProbe {
    pub path: String,
    pub want_type: Option<String>,
    /// The filesystem type mounted there (`None`: nothing mounted there).
    pub found: Gathered<Option<String>>,
    /// A create + remove under the mount (skipped unless asked for).
    pub writable: Gathered<bool>,
    /// How long a stat of the mount point took.
    pub latency_ms: Gathered<u64>,
}

/// The checkpoint directory's write probe: a file of `bytes` written, fsynced, removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointProbe {
    pub dir: String,
    pub bytes: u64,
    /// Create to fsync done.
    pub elapsed_us: u64,
}

/// Everything a pass gathered. The prolog fills only what its fast pass needs; the rest is
/// `Gap::Skipped`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inputs {
    pub sysfs: Gathered<SysfsData>,
    pub nvml: Gathered<NvmlData>,
    pub xids: Gathered<Vec<xid::XidEvent>>,
    /// Look-alike XID records and records lost to a flood: warnings of `gpu.xid`.
    pub kmsg_notes: xid::KmsgNotes,
    pub mounts: Vec<MountProbe>,
    /// `[storage] checkpoint_dir`'s write bandwidth probe (skipped unless configured).
    pub checkpoint: Gathered<CheckpointProbe>,
    /// Slurm's gres GPU count for this node, when sinfo said.
    pub gres_gpus: Option<u32>,
    /// `[active] dcgmi`'s diagnostic (skipped unless configured for this program).
    pub dcgm_diag: Gathered<active::DcgmDiag>,
    /// `[active] all_reduce_perf`'s run (skipped unless configured for this program).
    pub all_reduce: Gathered<active::AllReduce>,
    /// `[fabric] imex_ctl`'s reading of the IMEX domain (skipped unless configured).
    pub imex: Gathered<imex::Imex>,
    /// The pass's clock (unix seconds): counter rates and repair escalation windows.
    pub now: u64,
}

/// What the admin expects of the node (from the config).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expect {
    pub gpus: Option<u32>,
    pub fabric_nics: Option<u32>,
    /// Where `fabric_nics` came from when not `[fabric] expected_nics` (the catalog
    /// machine of the detected instance: [`expect::from_model`]).
    pub fabric_nics_from: Option<String>,
    pub port_rate_gbps: Option<f64>,
    pub persistence: Option<bool>,
    pub driver: Option<String>,
    /// Passes with a rising link_downed counter before the flap check fails.
    pub flap_strikes: u32,
    /// GPU memory (MiB) a GPU may hold with no process left after a job.
    pub leftover_memory_mib: u64,
    /// `[storage] checkpoint_floor_mbps`: the checkpoint directory's write floor, MB/s.
    pub checkpoint_floor_mbps: Option<f64>,
    /// `[active] all_reduce_floor_gbps`: the one-node all-reduce bus bandwidth floor, GB/s.
    pub all_reduce_floor_gbps: Option<f64>,
    /// The error counters' thresholds and window ([`counters::Limits`]).
    pub limits: counters::Limits,
}

/// `[gpu] leftover_memory_mib` unset: an idle GPU's `used` (v2) is a few MiB, a job's
/// leftovers are hundreds or more.
pub const DEFAULT_LEFTOVER_MEMORY_MIB: u64 = 1024;

/// Which checks a pass runs and on which GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Only the checks marked `fast` (the prolog).
    pub fast_only: bool,
    /// GPU checks only for these GPUs (the job's); `None`: every GPU.
    pub gpus: Option<Vec<PciAddr>>,
    /// The job has ended (the epilog): checks of what it left behind run.
    pub after_job: bool,
    /// Count only XIDs logged after this kmsg sequence number (the epilog: where the log
    /// stood when the job's prolog read it); `None`: since boot or the last driver load.
    pub xids_after: Option<u64>,
}

/// What a pass remembers for the next one (kept root-owned by the binaries).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassState {
    #[serde(default)]
    pub link_downed: BTreeMap<String, u64>,
    /// Passes in which each port's counter rose.
    #[serde(default)]
    pub strikes: BTreeMap<String, u32>,
    /// Consecutive full passes without a drain verdict.
    #[serde(default)]
    pub clean_passes: u32,
    /// Job id -> the last kmsg sequence number its prolog saw; the epilog takes it out.
    #[serde(default)]
    pub job_kmsg: BTreeMap<String, u64>,
    /// Drains the fleet circuit breaker held back on this node, by any of the three
    /// programs, since the state dir was made: the textfile's counter.
    #[serde(default)]
    pub drains_held_back: u64,
    /// The boot the state was written in (/proc/sys/kernel/random/boot_id): the kernel
    /// log's sequence numbers start again at each boot, so marks from another boot mean
    /// nothing in this one.
    #[serde(default)]
    pub boot_id: Option<String>,
    /// Each error counter's recent samples, for its rate ([`counters::History`]).
    #[serde(default)]
    pub counters: counters::History,
    /// The boots the passes saw, for repair escalation ([`repair::Boots`]).
    #[serde(default)]
    pub boots: repair::Boots,
    /// The drains already reported to the cloud ([`handoff::Reported`]).
    #[serde(default)]
    pub handoff: handoff::Reported,
}

impl PassState {
    /// Job marks kept at most: a job whose epilog never ran (a node rebooted mid-job) must
    /// not grow the state forever.
    pub const MAX_JOB_MARKS: usize = 256;

    /// The state file's size cap: a larger file is refused as not the suite's.
    pub const MAX_BYTES: usize = 1 << 20;

    /// The state as this boot sees it: a state written in another boot keeps its counters
    /// but loses its job kmsg marks (a job requeued across a reboot keeps its id, and its
    /// old mark would hide this boot's XIDs from its epilog). `None` (the boot id
    /// unreadable): kept as it is.
    pub fn in_boot(mut self, boot_id: Option<&str>) -> PassState {
        if let Some(now) = boot_id {
            if self.boot_id.as_deref() != Some(now) {
                self.job_kmsg.clear();
            }
            self.boot_id = Some(now.to_string());
        }
        self
    }

    /// Remember where the kernel log stood at `job`'s start; the oldest marks go first.
    pub fn mark_job(&mut self, job: &str, seq: u64) {
        self.job_kmsg.insert(job.to_string(), seq);
        while self.job_kmsg.len() > Self::MAX_JOB_MARKS {
            let oldest = self
                .job_kmsg
                .iter()
                .min_by_key(|(_, s)| **s)
                .map(|(j, _)| j.clone());
            match oldest {
                Some(j) => self.job_kmsg.remove(&j),
                None => break,
            };
        }
    }
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub id: CheckId,
    #[serde(skip)]
    pub tier: Tier,
    pub class: Class,
    pub status: Status,
    pub evidence: String,
    /// Structured code and subject for the drain reason (`GPU_XID_79`, `gpu=0000:53:00.0`).
    #[serde(skip)]
    pub code: String,
    #[serde(skip)]
    pub subject: Option<String>,
    #[serde(skip)]
    pub fault: Fault,
    #[serde(skip)]
    pub repair: xid::Repair,
}

impl Outcome {
    /// Counts against the node: a failed or timed-out check.
    pub fn failed(&self) -> bool {
        matches!(self.status, Status::Fail | Status::Timeout)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Warn,
    Drain,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Drain => "drain",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub verdict: Verdict,
    pub checks: Vec<Outcome>,
}

impl Report {
    /// The check that names the drain (or warning): the first failing one of the verdict's class.
    pub fn deciding(&self) -> Option<&Outcome> {
        let class = match self.verdict {
            Verdict::Ok => return None,
            Verdict::Warn => Class::Warn,
            Verdict::Drain => Class::Drain,
        };
        self.checks.iter().find(|c| c.class == class && c.failed())
    }

    /// `gpu-affinity: GPU_XID_79 gpu=0000:53:00.0`, empty when the node is fine.
    pub fn reason(&self) -> String {
        self.deciding().map_or_else(String::new, drain::reason)
    }

    /// One line: verdict, reason, counts.
    pub fn summary(&self) -> String {
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        let head = match self.deciding() {
            Some(c) => format!("{}: {}", self.verdict.as_str(), drain::reason(c)),
            None => self.verdict.as_str().to_string(),
        };
        format!(
            "{head} ({} pass, {} fail, {} timeout, {} skip)",
            count(Status::Pass),
            count(Status::Fail),
            count(Status::Timeout),
            count(Status::Skip)
        )
    }
}

#[cfg(test)]
mod tests;
