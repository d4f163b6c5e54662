//! The NVLink fabric as each GPU sees it: on HGX (Hopper and later, NVSwitch) the GPU
//! registers with the Fabric Manager, on GB200/GB300 NVL72 with the NVLink domain; until
//! that probe completes without error the GPU has no peer-to-peer NVLink. Judged as
//! DCGM's fabric health watch judges nvmlDeviceGetGpuFabricInfoV: the probe state, its
//! status, and the health mask's bits.

use super::Class;
use super::counters::{Finding, found};
use super::xid::Repair;

/// nvmlGpuFabricInfoV's answer for one GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricProbe {
    /// `NVML_GPU_FABRIC_STATE_*`: 0 not supported, 1 not started, 2 in progress, 3 completed.
    pub state: u8,
    /// The probe's nvmlReturn_t, meaningful once the state is completed (0 = success).
    pub status: u32,
    /// `healthMask` (the versioned call, R550+); `None` from the first call.
    pub health_mask: Option<u32>,
}

const NOT_SUPPORTED: u8 = 0;
const NOT_STARTED: u8 = 1;
const IN_PROGRESS: u8 = 2;
const COMPLETED: u8 = 3;

/// The health mask's two-bit flags (nvml.h `NVML_GPU_FABRIC_HEALTH_MASK_*`): shift and
/// name; a flag's value 1 is TRUE (the fault is there), 2 FALSE, 0 not supported.
const HEALTH_FLAGS: &[(u32, &str)] = &[
    (0, "degraded bandwidth"),
    (2, "route recovery in progress"),
    (4, "route unhealthy"),
    (6, "access timeout recovery in progress"),
];
const FLAG_TRUE: u32 = 1;
/// INCORRECT_CONFIGURATION: four bits at shift 8; 0 not supported, 1 none, above it the
/// reason (nvml.h, R570+).
const CONFIG_SHIFT: u32 = 8;
const CONFIG_REASONS: &[(u32, &str)] = &[
    (2, "incorrect system GUID"),
    (3, "incorrect chassis serial number"),
    (4, "no partition"),
    (5, "insufficient NVLinks"),
    (6, "incompatible GPU firmware"),
    (7, "invalid location"),
];

/// `None`: this GPU has no fabric to judge (no NVSwitch or NVL domain, or an older
/// driver). A probe still training warns; one that never started, ended in an error or
/// reports an unhealthy route, degraded bandwidth or a configuration fault drains.
pub fn judge(p: &FabricProbe) -> Option<Vec<Finding>> {
    let finding = |class, evidence: String| found("GPU_FABRIC", class, Repair::Reset, evidence);
    let mut out = Vec::new();
    match p.state {
        NOT_SUPPORTED => return None,
        NOT_STARTED => out.push(finding(
            Class::Drain,
            "fabric registration not started (is the Fabric Manager / NVLink domain up?)".into(),
        )),
        IN_PROGRESS => out.push(finding(
            Class::Warn,
            "fabric registration in progress".into(),
        )),
        COMPLETED if p.status != 0 => out.push(finding(
            Class::Drain,
            format!("fabric registration failed (NVML status {})", p.status),
        )),
        COMPLETED => {}
        other => out.push(finding(
            Class::Drain,
            format!("fabric probe in unknown state {other}"),
        )),
    }
    if let Some(mask) = p.health_mask {
        for &(shift, what) in HEALTH_FLAGS {
            if (mask >> shift) & 0b11 == FLAG_TRUE {
                out.push(finding(Class::Drain, format!("fabric health: {what}")));
            }
        }
        let config = (mask >> CONFIG_SHIFT) & 0xf;
        if config > 1 {
            let why = CONFIG_REASONS
                .iter()
                .find(|(v, _)| *v == config)
                .map_or_else(
                    || format!("configuration fault {config}"),
                    |(_, w)| (*w).to_string(),
                );
            out.push(finding(Class::Drain, format!("fabric health: {why}")));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(p: FabricProbe) -> Option<Vec<(Class, String)>> {
        judge(&p).map(|v| v.into_iter().map(|f| (f.class, f.evidence)).collect())
    }

    #[test]
    fn states_as_dcgm_judges_them() {
        let probe = |state, status| FabricProbe {
            state,
            status,
            health_mask: None,
        };
        assert_eq!(classes(probe(0, 0)), None, "no fabric: nothing to judge");
        assert_eq!(classes(probe(3, 0)), Some(vec![]));
        assert_eq!(classes(probe(2, 0)).expect("judged")[0].0, Class::Warn);
        assert_eq!(classes(probe(1, 0)).expect("judged")[0].0, Class::Drain);
        let failed = classes(probe(3, 999)).expect("judged");
        assert_eq!(failed[0].0, Class::Drain);
        assert!(failed[0].1.contains("999"), "{failed:?}");
    }

    #[test]
    fn health_mask_flags_drain() {
        // Every flag FALSE (2) and the configuration NONE (1): healthy.
        let healthy = 0b10_10_10_10 | (1 << 8);
        let p = |mask| FabricProbe {
            state: 3,
            status: 0,
            health_mask: Some(mask),
        };
        assert_eq!(classes(p(healthy)), Some(vec![]));
        // Route unhealthy TRUE (shift 4) and insufficient NVLinks (5 at shift 8).
        let sick = 0b10_01_10_10 | (5 << 8);
        let found = classes(p(sick)).expect("judged");
        let texts: Vec<&str> = found.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            texts,
            [
                "fabric health: route unhealthy",
                "fabric health: insufficient NVLinks"
            ]
        );
        assert!(found.iter().all(|(c, _)| *c == Class::Drain));
        // Not supported anywhere (0): nothing.
        assert_eq!(classes(p(0)), Some(vec![]));
    }
}
