//! A test-only NVML: `libnvml_sim.so` exports the NVML C functions gpu-affinity's health
//! programs call (through nvml-wrapper's `lib_path`), so the real loading and calling code runs
//! in CI without a GPU.
//!
//! The state is a JSON file: `$NVML_SIM_STATE`, else `nvml-sim.json` next to the library (a
//! prolog started by slurmd gets no test environment). It is read on `nvmlInit`:
//!
//! ```json
//! {"driver": "550.54.15", "hang": false, "slow_ms": 0,
//!  "gpus": [{"bus_id": "0000:53:00.0", "ecc_uncorrected": 0, "remap_pending": false,
//!            "remap_failure": false, "retired_pending": false, "nvlinks": [true, true],
//!            "persistence": true, "lost": false}]}
//! ```
//! `"nvlink_remote": ["0000:54:00.0", ...]` per GPU: the bus id at the far end of each link.
//! `"processes": [[pid, used_bytes], ...]` per GPU: its running compute processes;
//! `"recovery_action": N` per GPU: the NVML_FI_DEV_GET_GPU_RECOVERY_ACTION field.
//! `"fabric": {"cluster_uuid": "<32 hex digits, dashes allowed>", "clique_id": N,
//! "state": 3}` per GPU: its NVLink fabric (nvmlDeviceGetGpuFabricInfo[V]; `state` 3 is
//! NVML_GPU_FABRIC_STATE_COMPLETED, the default; `"status"` the probe's nvmlReturn_t,
//! `"health_mask"` the versioned call's mask, both 0 by default); no `fabric`: NOT_SUPPORTED.
//! Error counters and sensors per GPU: `"fields": {"94": 12, ...}` (nvmlDeviceGetFieldValues'
//! `NVML_FI_DEV_*` ids: PCIe replays, NVLink CRC/replay/recovery totals, retired pages), `"remap_correctable"`/`"remap_uncorrectable"` (row counts),
//! `"dram_corrected"`, `"dram_uncorrected"`, `"sram_corrected"`, `"sram_uncorrected"`
//! (aggregate ECC by location), `"clocks_event_reasons"`, `"temperature_c"`, `"slowdown_temp_c"`,
//! `"shutdown_temp_c"`; each absent one is NOT_SUPPORTED.
//! `"mig": [1, 2, 5]` per GPU: MIG mode on (nvmlDeviceGetMigMode), one MIG device per entry
//! (nvmlDeviceGetMigDeviceHandleByIndex), each entry its GPU instance id
//! (nvmlDeviceGetGpuInstanceId); absent: MIG mode off.
//! `hang`: nvmlDeviceGetCount never returns (a wedged driver); `slow_ms`: every call sleeps.

// These are C exports that NVML's callers invoke with its pointer contract; marking them
// `unsafe fn` changes nothing for a C caller, so clippy's raw-pointer lint does not apply.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{CStr, c_char, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;
use std::time::Duration;

use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(default)]
struct State {
    driver: String,
    hang: bool,
    slow_ms: u64,
    gpus: Vec<Gpu>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Gpu {
    bus_id: String,
    ecc_uncorrected: u64,
    remap_pending: bool,
    remap_failure: bool,
    retired_pending: bool,
    nvlinks: Vec<bool>,
    /// Per link, the bus id at its far end (another GPU, an NVSwitch).
    nvlink_remote: Vec<String>,
    persistence: bool,
    lost: bool,
    /// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION's value; `None`: the field is not supported.
    recovery_action: Option<u32>,
    /// Compute processes on the GPU (pid, used bytes).
    processes: Vec<(u32, u64)>,
    /// Device memory in use besides the processes' (memory a job left behind), MiB.
    memory_used_mib: u64,
    /// The GPU's NVLink fabric registration; `None`: the call is not supported.
    fabric: Option<SimFabric>,
    /// nvmlDeviceGetFieldValues' unsigned values by field id (`NVML_FI_DEV_*`): the
    /// error counters; a field not listed is NOT_SUPPORTED.
    fields: std::collections::BTreeMap<c_uint, u64>,
    /// nvmlDeviceGetRemappedRows' correctable and uncorrectable row counts.
    remap_correctable: c_uint,
    remap_uncorrectable: c_uint,
    /// Aggregate ECC errors by type and location (nvmlDeviceGetMemoryErrorCounter);
    /// `None`: NOT_SUPPORTED.
    dram_corrected: Option<u64>,
    dram_uncorrected: Option<u64>,
    sram_corrected: Option<u64>,
    sram_uncorrected: Option<u64>,
    /// nvmlDeviceGetCurrentClocksThrottleReasons' mask; `None`: NOT_SUPPORTED.
    clocks_event_reasons: Option<u64>,
    /// GPU temperature and its slowdown / shutdown thresholds, °C; `None`: NOT_SUPPORTED.
    temperature_c: Option<c_uint>,
    slowdown_temp_c: Option<c_uint>,
    shutdown_temp_c: Option<c_uint>,
    /// MIG mode on, with MIG devices whose GPU instance ids these are, in MIG index
    /// order; `None`: MIG mode off.
    mig: Option<Vec<c_uint>>,
}

#[derive(Deserialize)]
struct SimFabric {
    cluster_uuid: String,
    clique_id: u32,
    #[serde(default = "fabric_completed")]
    state: u8,
    /// The probe's nvmlReturn_t (0: success).
    #[serde(default)]
    status: c_uint,
    /// healthMask of the versioned call (0: every flag not supported).
    #[serde(default)]
    health_mask: c_uint,
}

/// NVML_GPU_FABRIC_STATE_COMPLETED.
fn fabric_completed() -> u8 {
    3
}

/// An 80 GiB GPU (H100 SXM).
const MEMORY_TOTAL: c_ulonglong = 80 << 30;

const SUCCESS: c_uint = 0;
const INVALID_ARGUMENT: c_uint = 2;
const NOT_SUPPORTED: c_uint = 3;
const NOT_FOUND: c_uint = 6;
const INSUFFICIENT_SIZE: c_uint = 7;
const GPU_IS_LOST: c_uint = 15;
const ARGUMENT_VERSION_MISMATCH: c_uint = 25;

// The state, read once per process on the first call; no lock a panic could poison.
static STATE: OnceLock<State> = OnceLock::new();

fn state_path() -> Option<String> {
    if let Ok(p) = std::env::var("NVML_SIM_STATE") {
        return Some(p);
    }
    // Next to this library: find our own file through dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address and fills `info`.
    let found = unsafe { libc::dladdr(state_path as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path.
    let lib = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    let dir = std::path::Path::new(&lib).parent()?;
    Some(dir.join("nvml-sim.json").display().to_string())
}

fn state() -> &'static State {
    STATE.get_or_init(|| {
        state_path()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    })
}

fn slow() {
    let ms = state().slow_ms;
    if ms > 0 {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// Device handles are 1-based indices disguised as pointers.
fn gpu(handle: *mut c_void) -> Result<&'static Gpu, c_uint> {
    let index = (handle as usize).checked_sub(1).ok_or(INVALID_ARGUMENT)?;
    let gpu = state().gpus.get(index).ok_or(INVALID_ARGUMENT)?;
    if gpu.lost { Err(GPU_IS_LOST) } else { Ok(gpu) }
}

macro_rules! out {
    ($ptr:expr, $value:expr) => {{
        if $ptr.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: NVML's contract: the caller passes a valid pointer for the result.
        unsafe { *$ptr = $value };
    }};
}

macro_rules! device {
    ($handle:expr) => {
        match gpu($handle) {
            Ok(g) => g,
            Err(code) => return code,
        }
    };
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> c_uint {
    let _ = state();
    slow();
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> c_uint {
    nvmlInit_v2()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> c_uint {
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(_code: c_uint) -> *const c_char {
    c"nvml-sim error".as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetDriverVersion(buf: *mut c_char, len: c_uint) -> c_uint {
    slow();
    let v = state().driver.as_bytes();
    if buf.is_null() {
        return INVALID_ARGUMENT;
    }
    if v.len() + 1 > len as usize {
        return INSUFFICIENT_SIZE;
    }
    // SAFETY: `buf` holds `len` bytes (NVML's contract) and v.len() + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr().cast::<c_char>(), buf, v.len());
        *buf.add(v.len()) = 0;
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> c_uint {
    slow();
    while state().hang {
        // A wedged driver: the call never returns.
        std::thread::sleep(Duration::from_secs(3600));
    }
    out!(count, state().gpus.len() as c_uint);
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut *mut c_void) -> c_uint {
    slow();
    let Some(g) = state().gpus.get(index as usize) else {
        return INVALID_ARGUMENT;
    };
    if g.lost {
        return GPU_IS_LOST;
    }
    out!(device, (index as usize + 1) as *mut c_void);
    SUCCESS
}

/// nvmlPciInfo_t (v3): legacy bus id, domain, bus, device, ids, bus id.
#[repr(C)]
pub struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// NVML's PCI info for a bus id in the state's `0000:53:00.0` form.
fn pci_info(bus_id_text: &str) -> PciInfo {
    // NVML writes an 8-digit domain: 00000000:53:00.0.
    let id = format!("0000{bus_id_text}");
    let mut bus_id = [0 as c_char; 32];
    for (slot, b) in bus_id.iter_mut().zip(id.bytes().take(31)) {
        *slot = b as c_char;
    }
    let parse = |i: usize| {
        u32::from_str_radix(bus_id_text.split([':', '.']).nth(i).unwrap_or("0"), 16).unwrap_or(0)
    };
    PciInfo {
        bus_id_legacy: [0; 16],
        domain: parse(0),
        bus: parse(1),
        device: parse(2),
        pci_device_id: 0x2330_10de,
        pci_sub_system_id: 0,
        bus_id,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPciInfo_v3(device: *mut c_void, info: *mut PciInfo) -> c_uint {
    slow();
    let g = device!(device);
    out!(info, pci_info(&g.bus_id));
    SUCCESS
}

/// The PCI device at the far end of NVLink `link`: `nvlink_remote[link]` of the state.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    device: *mut c_void,
    link: c_uint,
    info: *mut PciInfo,
) -> c_uint {
    slow();
    let g = device!(device);
    match g.nvlink_remote.get(link as usize) {
        Some(remote) => out!(info, pci_info(remote)),
        None => return NOT_SUPPORTED,
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: *mut c_void,
    error_type: c_uint,
    counter: c_uint,
    count: *mut c_ulonglong,
) -> c_uint {
    slow();
    let g = device!(device);
    // 1 = NVML_MEMORY_ERROR_TYPE_UNCORRECTED, 0 = NVML_VOLATILE_ECC.
    let n = if error_type == 1 && counter == 0 {
        g.ecc_uncorrected
    } else {
        0
    };
    out!(count, n);
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetRemappedRows(
    device: *mut c_void,
    corr: *mut c_uint,
    unc: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> c_uint {
    slow();
    let g = device!(device);
    out!(corr, g.remap_correctable);
    out!(unc, g.remap_uncorrectable);
    out!(pending, c_uint::from(g.remap_pending));
    out!(failure, c_uint::from(g.remap_failure));
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: *mut c_void,
    pending: *mut c_uint,
) -> c_uint {
    slow();
    let g = device!(device);
    out!(pending, c_uint::from(g.retired_pending));
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkState(
    device: *mut c_void,
    link: c_uint,
    active: *mut c_uint,
) -> c_uint {
    slow();
    let g = device!(device);
    match g.nvlinks.get(link as usize) {
        Some(&up) => out!(active, c_uint::from(up)),
        None => return NOT_SUPPORTED,
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPersistenceMode(device: *mut c_void, mode: *mut c_uint) -> c_uint {
    slow();
    let g = device!(device);
    out!(mode, c_uint::from(g.persistence));
    SUCCESS
}

/// nvmlProcessInfo_t (v2/v3 layout).
#[repr(C)]
pub struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: *mut c_void,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> c_uint {
    slow();
    let g = match gpu(device) {
        Ok(g) => g,
        Err(e) => return e,
    };
    if count.is_null() {
        return INVALID_ARGUMENT;
    }
    let n = g.processes.len() as c_uint;
    // SAFETY: checked non-null; NVML's contract: *count is the room in `infos`.
    let room = unsafe { *count };
    unsafe { *count = n };
    if n == 0 {
        return SUCCESS;
    }
    if room < n || infos.is_null() {
        return INSUFFICIENT_SIZE;
    }
    for (i, &(pid, used)) in g.processes.iter().enumerate() {
        // SAFETY: i < n <= room entries the caller provided.
        unsafe {
            *infos.add(i) = ProcessInfo {
                pid,
                used_gpu_memory: used,
                gpu_instance_id: u32::MAX,
                compute_instance_id: u32::MAX,
            };
        }
    }
    SUCCESS
}

/// nvmlMemory_v2_t.
#[repr(C)]
pub struct Memory {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: *mut c_void, memory: *mut Memory) -> c_uint {
    slow();
    let g = device!(device);
    let used = (g.memory_used_mib << 20) + g.processes.iter().map(|p| p.1).sum::<u64>();
    let used = used.min(MEMORY_TOTAL);
    // SAFETY: read only after the null check `out!` makes.
    let version = if memory.is_null() {
        0
    } else {
        unsafe { (*memory).version }
    };
    out!(
        memory,
        Memory {
            version,
            total: MEMORY_TOTAL,
            reserved: 0,
            free: MEMORY_TOTAL - used,
            used,
        }
    );
    SUCCESS
}

/// nvmlFieldValue_t.
#[repr(C)]
pub struct FieldValue {
    field_id: c_uint,
    scope_id: c_uint,
    timestamp: i64,
    latency_usec: i64,
    value_type: c_uint,
    nvml_return: c_uint,
    value: c_ulonglong,
}

const FI_RECOVERY_ACTION: c_uint = 230;
const VALUE_TYPE_UNSIGNED_INT: c_uint = 1;
const VALUE_TYPE_UNSIGNED_LONG_LONG: c_uint = 3;

/// NVML_MEMORY_ERROR_TYPE_{CORRECTED,UNCORRECTED}, NVML_AGGREGATE_ECC,
/// NVML_MEMORY_LOCATION_{DEVICE_MEMORY,SRAM}.
const CORRECTED: c_uint = 0;
const UNCORRECTED: c_uint = 1;
const AGGREGATE: c_uint = 1;
const LOCATION_DRAM: c_uint = 2;
const LOCATION_SRAM: c_uint = 7;

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMemoryErrorCounter(
    device: *mut c_void,
    error_type: c_uint,
    counter: c_uint,
    location: c_uint,
    count: *mut c_ulonglong,
) -> c_uint {
    slow();
    let g = device!(device);
    let value = match (error_type, counter, location) {
        (CORRECTED, AGGREGATE, LOCATION_DRAM) => g.dram_corrected,
        (UNCORRECTED, AGGREGATE, LOCATION_DRAM) => g.dram_uncorrected,
        (CORRECTED, AGGREGATE, LOCATION_SRAM) => g.sram_corrected,
        (UNCORRECTED, AGGREGATE, LOCATION_SRAM) => g.sram_uncorrected,
        _ => None,
    };
    match value {
        Some(n) => {
            out!(count, n);
            SUCCESS
        }
        None => NOT_SUPPORTED,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: *mut c_void,
    reasons: *mut c_ulonglong,
) -> c_uint {
    slow();
    let g = device!(device);
    match g.clocks_event_reasons {
        Some(mask) => {
            out!(reasons, mask);
            SUCCESS
        }
        None => NOT_SUPPORTED,
    }
}

/// NVML_TEMPERATURE_GPU.
const SENSOR_GPU: c_uint = 0;

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTemperature(
    device: *mut c_void,
    sensor: c_uint,
    temp: *mut c_uint,
) -> c_uint {
    slow();
    let g = device!(device);
    match g.temperature_c {
        Some(t) if sensor == SENSOR_GPU => {
            out!(temp, t);
            SUCCESS
        }
        _ => NOT_SUPPORTED,
    }
}

/// NVML_TEMPERATURE_THRESHOLD_SHUTDOWN and _SLOWDOWN.
const THRESHOLD_SHUTDOWN: c_uint = 0;
const THRESHOLD_SLOWDOWN: c_uint = 1;

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTemperatureThreshold(
    device: *mut c_void,
    threshold: c_uint,
    temp: *mut c_uint,
) -> c_uint {
    slow();
    let g = device!(device);
    let value = match threshold {
        THRESHOLD_SHUTDOWN => g.shutdown_temp_c,
        THRESHOLD_SLOWDOWN => g.slowdown_temp_c,
        _ => None,
    };
    match value {
        Some(t) => {
            out!(temp, t);
            SUCCESS
        }
        None => NOT_SUPPORTED,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetFieldValues(
    device: *mut c_void,
    count: i32,
    values: *mut FieldValue,
) -> c_uint {
    slow();
    let g = match gpu(device) {
        Ok(g) => g,
        Err(e) => return e,
    };
    if values.is_null() || count < 0 {
        return INVALID_ARGUMENT;
    }
    for i in 0..count as usize {
        // SAFETY: the caller provides `count` entries.
        let v = unsafe { &mut *values.add(i) };
        match (v.field_id, g.recovery_action) {
            (FI_RECOVERY_ACTION, Some(action)) => {
                v.value_type = VALUE_TYPE_UNSIGNED_INT;
                v.nvml_return = SUCCESS;
                // The union's uiVal: the low 4 bytes (little-endian).
                v.value = c_ulonglong::from(action);
            }
            (id, _) => match g.fields.get(&id) {
                // The counters are unsigned long longs (ullVal: all 8 bytes).
                Some(&value) => {
                    v.value_type = VALUE_TYPE_UNSIGNED_LONG_LONG;
                    v.nvml_return = SUCCESS;
                    v.value = value;
                }
                None => v.nvml_return = NOT_SUPPORTED,
            },
        }
    }
    SUCCESS
}

/// nvmlGpuFabricInfo_t (nvml.h): cluster uuid, registration status, clique, state.
#[repr(C)]
pub struct GpuFabricInfo {
    cluster_uuid: [u8; 16],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
}

/// nvmlGpuFabricInfo_v2_t: a version word first and a health mask after.
#[repr(C)]
pub struct GpuFabricInfoV2 {
    version: c_uint,
    cluster_uuid: [u8; 16],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
    health_mask: c_uint,
}

/// NVML_STRUCT_VERSION(GpuFabricInfo, 2): the struct's size, the version in the top byte.
const FABRIC_INFO_V2: c_uint = (std::mem::size_of::<GpuFabricInfoV2>() as c_uint) | (2 << 24);

/// The GPU's fabric as (uuid bytes, clique, state); `None`: not supported.
fn fabric_of(g: &Gpu) -> Option<([u8; 16], c_uint, u8, c_uint, c_uint)> {
    let f = g.fabric.as_ref()?;
    let hex: String = f.cluster_uuid.chars().filter(|c| *c != '-').collect();
    let mut uuid = [0u8; 16];
    for (i, byte) in uuid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some((uuid, f.clique_id, f.state, f.status, f.health_mask))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuFabricInfo(
    handle: *mut c_void,
    info: *mut GpuFabricInfo,
) -> c_uint {
    slow();
    let g = device!(handle);
    let Some((cluster_uuid, clique_id, state, status, _)) = fabric_of(g) else {
        return NOT_SUPPORTED;
    };
    out!(
        info,
        GpuFabricInfo {
            cluster_uuid,
            status,
            clique_id,
            state,
        }
    );
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuFabricInfoV(
    handle: *mut c_void,
    info: *mut GpuFabricInfoV2,
) -> c_uint {
    slow();
    let g = device!(handle);
    if info.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: NVML's contract: a valid pointer whose version word the caller set.
    if unsafe { (*info).version } != FABRIC_INFO_V2 {
        return ARGUMENT_VERSION_MISMATCH;
    }
    let Some((cluster_uuid, clique_id, state, status, health_mask)) = fabric_of(g) else {
        return NOT_SUPPORTED;
    };
    out!(
        info,
        GpuFabricInfoV2 {
            version: FABRIC_INFO_V2,
            cluster_uuid,
            status,
            clique_id,
            state,
            health_mask,
        }
    );
    SUCCESS
}

/// NVML_DEVICE_MIG_ENABLE / NVML_DEVICE_MIG_DISABLE.
const MIG_ENABLE: c_uint = 1;
const MIG_DISABLE: c_uint = 0;

/// MIG device handles: the parent's 1-based index above bit 16, the MIG index + 1 below,
/// so no MIG handle is a GPU handle (those are small).
fn mig_handle(gpu_index: usize, mig_index: usize) -> *mut c_void {
    (((gpu_index + 1) << 16) | (mig_index + 1)) as *mut c_void
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigMode(
    device: *mut c_void,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> c_uint {
    slow();
    let g = device!(device);
    let mode = if g.mig.is_some() {
        MIG_ENABLE
    } else {
        MIG_DISABLE
    };
    out!(current, mode);
    out!(pending, mode);
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: *mut c_void,
    count: *mut c_uint,
) -> c_uint {
    slow();
    let g = device!(device);
    // An H100's seven slices; a GPU with MIG off reports none.
    out!(count, if g.mig.is_some() { 7 } else { 0 });
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: *mut c_void,
    index: c_uint,
    mig: *mut *mut c_void,
) -> c_uint {
    slow();
    let g = device!(device);
    let Some(instances) = &g.mig else {
        return INVALID_ARGUMENT;
    };
    if index as usize >= instances.len() {
        return NOT_FOUND;
    }
    let parent = (device as usize).saturating_sub(1);
    out!(mig, mig_handle(parent, index as usize));
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuInstanceId(device: *mut c_void, id: *mut c_uint) -> c_uint {
    slow();
    let handle = device as usize;
    let (parent, index) = (
        (handle >> 16).wrapping_sub(1),
        (handle & 0xffff).wrapping_sub(1),
    );
    let Some(gi) = state()
        .gpus
        .get(parent)
        .and_then(|g| g.mig.as_ref())
        .and_then(|m| m.get(index))
    else {
        // A GPU handle, not a MIG device's.
        return INVALID_ARGUMENT;
    };
    out!(id, *gi);
    SUCCESS
}
