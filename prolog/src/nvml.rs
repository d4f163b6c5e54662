//! GPU data through nvml-wrapper, libnvidia-ml loaded at run time from `[nvml] library`
//! (the simulator in tests). Called inside a bounded thread: NVML is the call that hangs.
//! One opener ([`open`]) for every reader: the health data and the NVLink fabric of
//! `gpu-affinity conf node-facts`.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString, c_uint, c_void};
use std::path::Path;

use gpu_affinity::health::counters::GpuCounters;
use gpu_affinity::health::nvlink_fabric::FabricProbe;
use gpu_affinity::health::{Gap, Gathered, NvmlData, NvmlGpu};
use gpu_affinity::pci::PciAddr;
use gpu_affinity::slurm::conf_write::NvLinks;
use gpu_affinity::slurm::placement::Fabric;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::{
    NVML_GPU_FABRIC_STATE_COMPLETED, nvmlDevice_t, nvmlGpuFabricInfo_t, nvmlGpuFabricInfo_v2_t,
};

/// nvml-wrapper's own default, used when `[nvml] library` is unset.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// NVML's link count upper bound (NVML_NVLINK_MAX_LINKS in current headers).
const MAX_LINKS: u32 = 18;

type RemappedRows =
    unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut c_uint, *mut c_uint, *mut c_uint) -> c_uint;

/// NVML writes `00000000:53:00.0`; the suite's addresses have a 4-digit domain.
fn bus_id(text: &str) -> Option<PciAddr> {
    let lower = text.trim().to_ascii_lowercase();
    let (domain, rest) = lower.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    format!("{domain:04x}:{rest}").parse().ok()
}

type FabricInfo = unsafe extern "C" fn(nvmlDevice_t, *mut nvmlGpuFabricInfo_t) -> c_uint;
type FabricInfoV = unsafe extern "C" fn(nvmlDevice_t, *mut nvmlGpuFabricInfo_v2_t) -> c_uint;

/// NVML initialised from one library, and that library's handle for the calls
/// nvml-wrapper 0.11 lacks (remapped rows, fabric info).
struct Opened {
    nvml: Nvml,
    lib: Option<libloading::Library>,
}

impl Opened {
    /// A function of the library by its NUL-terminated name; `None` where this driver
    /// has none. Callers give the signature of NVML's header for that name.
    fn symbol<T>(&self, name: &[u8]) -> Option<libloading::Symbol<'_, T>> {
        // SAFETY: the caller's `T` is the function's signature in nvml.h.
        self.lib.as_ref().and_then(|l| unsafe { l.get(name) }.ok())
    }
}

/// Initialise NVML from `library` (`[nvml] library`; nvml-wrapper's default when unset).
fn open(library: Option<&Path>) -> Result<Opened, Gap> {
    let library: OsString = library.map_or_else(
        || OsStr::new(DEFAULT_LIBRARY).to_owned(),
        |p| p.as_os_str().to_owned(),
    );
    let nvml = Nvml::builder()
        .lib_path(&library)
        .init()
        .map_err(|e| Gap::Failed(format!("NVML init ({}): {e}", library.to_string_lossy())))?;
    // SAFETY: loading the same library again only bumps its reference count (dlopen).
    let lib = unsafe { libloading::Library::new(&library) }.ok();
    Ok(Opened { nvml, lib })
}

pub fn read_nvml(library: Option<&Path>) -> Gathered<NvmlData> {
    let opened = open(library)?;
    let nvml = &opened.nvml;
    let remapped: Option<libloading::Symbol<RemappedRows>> =
        opened.symbol(b"nvmlDeviceGetRemappedRows\0");
    let count = nvml
        .device_count()
        .map_err(|e| Gap::Failed(format!("NVML device count: {e}")))?;
    let mut gpus = Vec::new();
    for index in 0..count {
        let device = match nvml.device_by_index(index) {
            Ok(d) => d,
            Err(NvmlError::GpuLost) => {
                gpus.push(NvmlGpu {
                    lost: true,
                    ..NvmlGpu::default()
                });
                continue;
            }
            Err(e) => return Err(Gap::Failed(format!("NVML GPU {index}: {e}"))),
        };
        let mut gpu = NvmlGpu {
            pci: device.pci_info().ok().and_then(|p| bus_id(&p.bus_id)),
            lost: false,
            ecc_volatile_uncorrected: device
                .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
                .ok(),
            retired_pending: device.are_pages_pending_retired().ok(),
            persistence: device.is_in_persistent_mode().ok(),
            compute_processes: device.running_compute_processes_count().ok(),
            memory_used_mib: device.memory_info().ok().map(|m| m.used >> 20),
            ..NvmlGpu::default()
        };
        let fields = field_values(&device);
        gpu.recovery_action = fields
            .get(&field::RECOVERY_ACTION)
            .and_then(|&v| u32::try_from(v).ok());
        let mut remapped_rows = None;
        if let Some(f) = &remapped {
            let (mut corr, mut unc, mut pending, mut failure) = (0, 0, 0, 0);
            // SAFETY: a valid device handle from this NVML and four valid out pointers.
            let rc = unsafe {
                f(
                    device.handle().cast(),
                    &mut corr,
                    &mut unc,
                    &mut pending,
                    &mut failure,
                )
            };
            if rc == 0 {
                gpu.remap_pending = Some(pending != 0);
                gpu.remap_failure = Some(failure != 0);
                remapped_rows = Some((corr, unc));
            }
        }
        gpu.counters = counters(&device, &fields, remapped_rows);
        gpu.fabric = fabric_probe(&opened, &device).map(|raw| raw.probe);
        for link in 0..MAX_LINKS {
            match device.link_wrapper_for(link).is_active() {
                Ok(up) => gpu.nvlinks.push((link, up)),
                // Links past the GPU's last one (or a GPU without NVLink) are not supported.
                Err(_) => break,
            }
        }
        gpus.push(gpu);
    }
    // The dcgm job mapping's MIG names come from this same NVML session (no second init).
    let _ = PASS_MIG_LAYOUT.set(mig_layout(&opened).ok());
    Ok(NvmlData {
        driver: nvml.sys_driver_version().ok(),
        gpus,
    })
}

/// NVML_STRUCT_VERSION(GpuFabricInfo, 2): the struct's size, the version in the top byte.
const FABRIC_INFO_V2: c_uint =
    (std::mem::size_of::<nvmlGpuFabricInfo_v2_t>() as c_uint) | (2 << 24);

/// One GPU's fabric probe as NVML answered it.
struct RawFabric {
    probe: FabricProbe,
    cluster_uuid: [u8; 16],
    clique_id: u32,
}

/// The GPU's fabric probe: the versioned call (R550+, with the health mask) where the
/// driver has it, else the first one (R525+); `None` where the driver has neither or the
/// call fails (NOT_SUPPORTED on a GPU without a fabric).
fn fabric_probe(opened: &Opened, device: &nvml_wrapper::Device) -> Option<RawFabric> {
    let versioned: Option<libloading::Symbol<FabricInfoV>> =
        opened.symbol(b"nvmlDeviceGetGpuFabricInfoV\0");
    let first: Option<libloading::Symbol<FabricInfo>> =
        opened.symbol(b"nvmlDeviceGetGpuFabricInfo\0");
    // SAFETY: a valid device handle of this NVML; each out struct is the one nvml.h
    // declares for the call, zeroed, with the version word the versioned call checks.
    unsafe {
        let handle = device.handle();
        if let Some(f) = &versioned {
            let mut info: nvmlGpuFabricInfo_v2_t = std::mem::zeroed();
            info.version = FABRIC_INFO_V2;
            (f(handle, &mut info) == 0).then_some(RawFabric {
                probe: FabricProbe {
                    state: info.state,
                    status: info.status,
                    health_mask: Some(info.healthMask),
                },
                cluster_uuid: info.clusterUuid,
                clique_id: info.cliqueId,
            })
        } else if let Some(f) = &first {
            let mut info: nvmlGpuFabricInfo_t = std::mem::zeroed();
            (f(handle, &mut info) == 0).then_some(RawFabric {
                probe: FabricProbe {
                    state: info.state,
                    status: info.status,
                    health_mask: None,
                },
                cluster_uuid: info.clusterUuid,
                clique_id: info.cliqueId,
            })
        } else {
            None
        }
    }
}

/// Each GPU's NVLink fabric (clusterUuid + cliqueId) by PCI address, for the GPUs whose
/// registration is complete with a non-zero uuid (core's `Fabric::from_nvml`); a driver
/// without the fabric calls, or a GPU that does not support them, gives no entry.
pub fn read_fabrics(library: Option<&Path>) -> Gathered<HashMap<PciAddr, Fabric>> {
    let opened = open(library)?;
    let count = opened
        .nvml
        .device_count()
        .map_err(|e| Gap::Failed(format!("NVML device count: {e}")))?;
    let mut out = HashMap::new();
    for index in 0..count {
        let Ok(device) = opened.nvml.device_by_index(index) else {
            continue;
        };
        let Some(pci) = device.pci_info().ok().and_then(|p| bus_id(&p.bus_id)) else {
            continue;
        };
        let Some(raw) = fabric_probe(&opened, &device) else {
            continue;
        };
        let complete = u32::from(raw.probe.state) == NVML_GPU_FABRIC_STATE_COMPLETED;
        if let Some(fabric) = Fabric::from_nvml(complete, raw.cluster_uuid, raw.clique_id) {
            out.insert(pci, fabric);
        }
    }
    Ok(out)
}

/// Each GPU's NVLinks to the node's other GPUs by PCI address: per peer, the active
/// links whose far end is that GPU. What Slurm's own AutoDetect=nvml counts for
/// gres.conf `Links=` (gpu_nvml.c): a link to an NVSwitch names no GPU and counts for none.
pub fn read_nvlink_peers(library: Option<&Path>) -> Gathered<NvLinks> {
    let opened = open(library)?;
    let count = opened
        .nvml
        .device_count()
        .map_err(|e| Gap::Failed(format!("NVML device count: {e}")))?;
    let devices: Vec<(PciAddr, nvml_wrapper::Device)> = (0..count)
        .filter_map(|i| {
            let d = opened.nvml.device_by_index(i).ok()?;
            Some((d.pci_info().ok().and_then(|p| bus_id(&p.bus_id))?, d))
        })
        .collect();
    let mut out = NvLinks::new();
    for (pci, device) in &devices {
        for link in 0..MAX_LINKS {
            let wrapper = device.link_wrapper_for(link);
            match wrapper.is_active() {
                Ok(true) => {}
                Ok(false) => continue,
                // Links past the GPU's last one (or a GPU without NVLink).
                Err(_) => break,
            }
            let Some(remote) = wrapper
                .remote_pci_info()
                .ok()
                .and_then(|p| bus_id(&p.bus_id))
            else {
                continue;
            };
            if remote != *pci && devices.iter().any(|(p, _)| *p == remote) {
                *out.entry(*pci).or_default().entry(remote).or_default() += 1;
            }
        }
    }
    Ok(out)
}

/// NVML field ids the health pass reads in one nvmlDeviceGetFieldValues call (nvml.h's
/// `NVML_FI_DEV_*`; nvml-wrapper exposes them only as ids).
mod field {
    pub const RETIRED_SBE: u32 = 29;
    pub const RETIRED_DBE: u32 = 30;
    pub const NVLINK_CRC_FLIT_TOTAL: u32 = 38;
    pub const NVLINK_CRC_DATA_TOTAL: u32 = 45;
    pub const NVLINK_REPLAY_TOTAL: u32 = 52;
    pub const NVLINK_RECOVERY_TOTAL: u32 = 59;
    pub const PCIE_REPLAY_COUNTER: u32 = 94;
    /// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION` (R550 and later).
    pub const RECOVERY_ACTION: u32 = 230;
    pub const ALL: [u32; 8] = [
        RETIRED_SBE,
        RETIRED_DBE,
        NVLINK_CRC_FLIT_TOTAL,
        NVLINK_CRC_DATA_TOTAL,
        NVLINK_REPLAY_TOTAL,
        NVLINK_RECOVERY_TOTAL,
        PCIE_REPLAY_COUNTER,
        RECOVERY_ACTION,
    ];
}

/// The unsigned values of [`field::ALL`] this GPU and driver report; a field the driver
/// does not support is absent (its check then judges nothing rather than guess).
fn field_values(device: &nvml_wrapper::Device) -> HashMap<u32, u64> {
    use nvml_wrapper::enums::device::SampleValue;
    use nvml_wrapper::structs::device::FieldId;
    let ids: Vec<FieldId> = field::ALL.iter().map(|&id| FieldId(id)).collect();
    let Ok(values) = device.field_values_for(&ids) else {
        return HashMap::new();
    };
    values
        .into_iter()
        .filter_map(|sample| {
            let sample = sample.ok()?;
            let value = match sample.value.ok()? {
                SampleValue::U32(v) => u64::from(v),
                SampleValue::U64(v) => v,
                SampleValue::I64(v) => u64::try_from(v).ok()?,
                _ => return None,
            };
            Some((sample.field.0, value))
        })
        .collect()
}

/// The error counters and sensors of one GPU ([`GpuCounters`]): the field values, the
/// remapped row counts the caller read, and the calls nvml-wrapper has.
fn counters(
    device: &nvml_wrapper::Device,
    fields: &HashMap<u32, u64>,
    remapped: Option<(u32, u32)>,
) -> GpuCounters {
    use nvml_wrapper::enum_wrappers::device::{
        MemoryLocation, TemperatureSensor, TemperatureThreshold,
    };
    let get = |id| fields.get(&id).copied();
    let aggregate = |kind, location| {
        device
            .memory_error_counter(kind, EccCounter::Aggregate, location)
            .ok()
    };
    GpuCounters {
        nvlink_crc_flit: get(field::NVLINK_CRC_FLIT_TOTAL),
        nvlink_crc_data: get(field::NVLINK_CRC_DATA_TOTAL),
        nvlink_replay: get(field::NVLINK_REPLAY_TOTAL),
        nvlink_recovery: get(field::NVLINK_RECOVERY_TOTAL),
        pcie_replay: get(field::PCIE_REPLAY_COUNTER),
        dram_corrected: aggregate(MemoryError::Corrected, MemoryLocation::Device),
        dram_uncorrected: aggregate(MemoryError::Uncorrected, MemoryLocation::Device),
        sram_corrected: aggregate(MemoryError::Corrected, MemoryLocation::SRAM),
        sram_uncorrected: aggregate(MemoryError::Uncorrected, MemoryLocation::SRAM),
        remapped_correctable: remapped.map(|(c, _)| c),
        remapped_uncorrectable: remapped.map(|(_, u)| u),
        retired_sbe: get(field::RETIRED_SBE),
        retired_dbe: get(field::RETIRED_DBE),
        clocks_event_reasons: device.current_throttle_reasons().ok().map(|r| r.bits()),
        temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
        slowdown_temp_c: device
            .temperature_threshold(TemperatureThreshold::Slowdown)
            .ok(),
        shutdown_temp_c: device
            .temperature_threshold(TemperatureThreshold::Shutdown)
            .ok(),
    }
}

/// Most MIG device slots read per GPU.
const MAX_MIG_SLOTS: c_uint = 64;

type MaxMigCount = unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> c_uint;
type MigHandle = unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut nvmlDevice_t) -> c_uint;
type GpuInstanceId = unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> c_uint;

/// The MIG layout [`read_nvml`] read in this process: `None` before it answered (or
/// where NVML hung), `Some(None)` where reading the layout failed.
pub fn pass_mig_layout() -> Option<Option<&'static Vec<Option<Vec<u32>>>>> {
    PASS_MIG_LAYOUT.get().map(Option::as_ref)
}

/// One process runs one pass: [`read_nvml`]'s MIG layout, for the job mapping after it.
static PASS_MIG_LAYOUT: std::sync::OnceLock<Option<Vec<Option<Vec<u32>>>>> =
    std::sync::OnceLock::new();

/// Each GPU's MIG layout, by NVML index: `None` where MIG mode is off (or the GPU does
/// not support it), else the GPU instance id of each MIG device in MIG index order. That
/// is the order slurmd's AutoDetect=nvml lists a MIG-mode GPU's devices in (gpu_nvml.c:
/// MIG index 0 up to the first index without a device), and the GPU instance id is what
/// dcgm-exporter names a MIG device's mapping file by (`GPU.GI`). nvml-wrapper 0.11 has
/// the mode but not the MIG device calls, so those come from the library's own symbols.
fn mig_layout(opened: &Opened) -> Gathered<Vec<Option<Vec<u32>>>> {
    let count = opened
        .nvml
        .device_count()
        .map_err(|e| Gap::Failed(format!("NVML device count: {e}")))?;
    let max: Option<libloading::Symbol<MaxMigCount>> =
        opened.symbol(b"nvmlDeviceGetMaxMigDeviceCount\0");
    let by_index: Option<libloading::Symbol<MigHandle>> =
        opened.symbol(b"nvmlDeviceGetMigDeviceHandleByIndex\0");
    let gi_of: Option<libloading::Symbol<GpuInstanceId>> =
        opened.symbol(b"nvmlDeviceGetGpuInstanceId\0");
    let mut out = Vec::new();
    for index in 0..count {
        let device = opened
            .nvml
            .device_by_index(index)
            .map_err(|e| Gap::Failed(format!("NVML GPU {index}: {e}")))?;
        // NVML_DEVICE_MIG_ENABLE is 1; NOT_SUPPORTED (no MIG on this GPU) is MIG off.
        let on = device.mig_mode().is_ok_and(|m| m.current == 1);
        if !on {
            out.push(None);
            continue;
        }
        let (Some(max), Some(by_index), Some(gi_of)) = (&max, &by_index, &gi_of) else {
            return Err(Gap::Failed(format!(
                "NVML GPU {index} is in MIG mode but this driver lacks the MIG device calls"
            )));
        };
        let mut slots: c_uint = 0;
        // SAFETY: a valid device handle of this NVML and valid out pointers; the
        // signatures are nvml.h's.
        let instances = unsafe {
            if max(device.handle(), &mut slots) != 0 {
                return Err(Gap::Failed(format!("NVML GPU {index}: MIG device count")));
            }
            let mut instances = Vec::new();
            // A GPU has at most 7 MIG devices today; the bound keeps a driver's bad
            // count from turning into a long loop.
            for slot in 0..slots.min(MAX_MIG_SLOTS) {
                let mut mig: nvmlDevice_t = std::ptr::null_mut();
                if by_index(device.handle(), slot, &mut mig) != 0 {
                    break;
                }
                let mut gi: c_uint = 0;
                if gi_of(mig, &mut gi) != 0 {
                    return Err(Gap::Failed(format!(
                        "NVML GPU {index} MIG device {slot}: GPU instance id"
                    )));
                }
                instances.push(gi);
            }
            instances
        };
        out.push(Some(instances));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bus_ids() {
        assert_eq!(
            super::bus_id("00000000:53:00.0")
                .map(|a| a.to_string())
                .as_deref(),
            Some("0000:53:00.0")
        );
        assert_eq!(
            super::bus_id("0000:9B:00.0")
                .map(|a| a.to_string())
                .as_deref(),
            Some("0000:9b:00.0")
        );
    }
}
