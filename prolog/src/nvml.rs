//! GPU data through nvml-wrapper, libnvidia-ml loaded at run time from `[nvml] library`
//! (the simulator in tests). Called inside a bounded thread: NVML is the call that hangs.

use std::ffi::{OsStr, c_uint, c_void};
use std::path::Path;

use gpu_affinity::health::{Gap, Gathered, NvmlData, NvmlGpu};
use gpu_affinity::pci::PciAddr;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::error::NvmlError;

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

pub fn read_nvml(library: Option<&Path>) -> Gathered<NvmlData> {
    let library = library.map_or_else(
        || OsStr::new(DEFAULT_LIBRARY).to_owned(),
        |p| p.as_os_str().to_owned(),
    );
    let nvml = Nvml::builder()
        .lib_path(&library)
        .init()
        .map_err(|e| Gap::Failed(format!("NVML init ({}): {e}", library.to_string_lossy())))?;
    // SAFETY: loading the same library again only bumps its reference count (dlopen); the
    // symbol's signature is NVML's documented one for nvmlDeviceGetRemappedRows.
    let lib = unsafe { libloading::Library::new(&library) }.ok();
    let remapped: Option<libloading::Symbol<RemappedRows>> = lib
        .as_ref()
        .and_then(|l| unsafe { l.get(b"nvmlDeviceGetRemappedRows\0") }.ok());
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
            recovery_action: recovery_action(&device),
            ..NvmlGpu::default()
        };
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
            }
        }
        for link in 0..MAX_LINKS {
            match device.link_wrapper_for(link).is_active() {
                Ok(up) => gpu.nvlinks.push((link, up)),
                // Links past the GPU's last one (or a GPU without NVLink) are not supported.
                Err(_) => break,
            }
        }
        gpus.push(gpu);
    }
    Ok(NvmlData {
        driver: nvml.sys_driver_version().ok(),
        gpus,
    })
}

/// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvml.h; nvml-wrapper exposes it only as a field id).
const FI_RECOVERY_ACTION: u32 = 230;

/// The GPU's recovery action, where the driver reports the field (R550 and later); `None`
/// where it does not (the check then passes on nothing rather than guess).
fn recovery_action(device: &nvml_wrapper::Device) -> Option<u32> {
    use nvml_wrapper::enums::device::SampleValue;
    let values = device
        .field_values_for(&[nvml_wrapper::structs::device::FieldId(FI_RECOVERY_ACTION)])
        .ok()?;
    match values.into_iter().next()?.ok()?.value.ok()? {
        SampleValue::U32(v) => Some(v),
        SampleValue::U64(v) => u32::try_from(v).ok(),
        _ => None,
    }
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
