//! Error counters and sensors: the checks that judge counts and rates, not states.
//!
//! A state check asks "is the link up"; these ask "how many errors, and how fast are they
//! coming", as DCGM's health watches, AzNHC and ibcheckerrors do. The readers fill
//! [`GpuCounters`] (NVML) and [`PortCounters`] (sysfs); [`History`], kept in the state dir
//! between passes, gives each counter's rise over its window; the `judge_*` functions
//! turn both into [`Finding`]s against [`Limits`] (each default with its source).
//!
//! A counter that went down was reset (a driver reload, a GPU reset, a reboot): its
//! history starts again from the new value, so a reset never reads as a burst.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Class;
use super::xid::Repair;

/// NVML's error counters and sensors of one GPU. `None`: this GPU or driver does not
/// report it (the check then judges what is there, and skips when nothing is).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuCounters {
    /// NVLink data-link errors summed over the GPU's links (NVML field values
    /// `NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL`).
    pub nvlink_crc_flit: Option<u64>,
    pub nvlink_crc_data: Option<u64>,
    pub nvlink_replay: Option<u64>,
    pub nvlink_recovery: Option<u64>,
    /// PCIe replays since the driver loaded (`NVML_FI_DEV_PCIE_REPLAY_COUNTER`).
    pub pcie_replay: Option<u64>,
    /// Aggregate (lifetime) ECC error counts by where they happened
    /// (nvmlDeviceGetMemoryErrorCounter, `NVML_AGGREGATE_ECC`, locations DRAM and SRAM):
    /// SRAM is on-chip memory, which no row remap repairs.
    pub dram_corrected: Option<u64>,
    pub dram_uncorrected: Option<u64>,
    pub sram_corrected: Option<u64>,
    pub sram_uncorrected: Option<u64>,
    /// Rows remapped so far for correctable and uncorrectable errors (A100 and later;
    /// nvmlDeviceGetRemappedRows).
    pub remapped_correctable: Option<u32>,
    pub remapped_uncorrectable: Option<u32>,
    /// Pages retired for multiple single-bit and for double-bit errors (GPUs before A100;
    /// `NVML_FI_DEV_RETIRED_SBE` / `_DBE`).
    pub retired_sbe: Option<u64>,
    pub retired_dbe: Option<u64>,
    /// nvmlDeviceGetCurrentClocksEventReasons' mask (`nvmlClocksEventReason*`).
    pub clocks_event_reasons: Option<u64>,
    /// GPU core temperature and the driver's slowdown and shutdown thresholds, °C.
    pub temperature_c: Option<u32>,
    pub slowdown_temp_c: Option<u32>,
    pub shutdown_temp_c: Option<u32>,
}

/// One fabric port's physical state and error counters from sysfs
/// (`/sys/class/infiniband/DEV/ports/N/`). `None`: the kernel has no such file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// `phys_state`'s name (`5: LinkUp` -> `LinkUp`).
    pub phys_state: Option<String>,
    /// IBTA PortCounters (`counters/symbol_error`, `counters/link_error_recovery`,
    /// `counters/port_rcv_errors`), InfiniBand and RoCE ports.
    pub symbol_error: Option<u64>,
    pub link_error_recovery: Option<u64>,
    pub port_rcv_errors: Option<u64>,
    /// The error counters of EFA's `hw_counters/` ([`EFA_ERROR_COUNTERS`]), by name.
    pub efa_errors: BTreeMap<String, u64>,
}

/// EFA's per-port `hw_counters` that count failed work, not traffic (the kernel's efa
/// driver, efa_verbs.c), each with the class a rise gets. No AWS threshold exists (its
/// CloudWatch agent reports them as deltas): the node's own failed work requests and
/// drops warn; the events a remote peer or the network causes (SRD retransmit
/// timeouts, impaired or unresponsive remotes) only inform.
pub const EFA_ERROR_COUNTERS: &[(&str, Class)] = &[
    ("rdma_read_wr_err", Class::Warn),
    ("rdma_write_wr_err", Class::Warn),
    ("rx_drops", Class::Warn),
    ("retrans_timeout_events", Class::Info),
    ("impaired_remote_conn_events", Class::Info),
    ("unresponsive_remote_events", Class::Info),
];

/// InfiniBand PMA PortCounters saturate at their width's maximum instead of wrapping
/// (the kernel's sysfs.c: `symbol_error` 16 bits, `link_error_recovery` 8): a counter
/// stuck there can no longer rise, so it is reported as such.
const SYMBOL_ERROR_MAX: u64 = u16::MAX as u64;
const LINK_ERROR_RECOVERY_MAX: u64 = u8::MAX as u64;

/// nvmlClocksEventReason bits that mean the hardware slowed the GPU down, not the
/// application or the admin (nvml.h): HW slowdown (0x8), SW thermal slowdown (0x20),
/// HW thermal slowdown (0x40), HW power brake (0x80).
pub const HARDWARE_SLOWDOWN_REASONS: &[(u64, &str)] = &[
    (0x8, "HW slowdown"),
    (0x20, "SW thermal slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake"),
];

/// sysfs `phys_state` (`5: LinkUp`) -> its name (`LinkUp`); `None` unless the kernel's
/// `N: Name` form.
pub fn phys_state_name(text: &str) -> Option<String> {
    let (number, name) = text.trim().split_once(':')?;
    let name = name.trim();
    (number.trim().parse::<u8>().is_ok()
        && !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric()))
    .then(|| name.to_string())
}

/// Thresholds, each default from a peer tool.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// The window rises and rates are taken over, seconds. A fault that rose within it
    /// keeps failing until the window has passed (the node's hold-down).
    pub window_s: u64,
    /// The window of the double-bit page retirement rate (DCGM: a week).
    pub retirement_window_s: u64,
    /// NVLink CRC (flit + data) errors per second at which a link fails; fewer rising
    /// warn (DCGM's NVLink health watch, `DCGM_LIMIT_MAX_NVLINK_CRC_ERROR`: "CRC errors
    /// only matter at rates of 100+ per second").
    pub nvlink_crc_per_s: f64,
    /// Correctable SRAM errors above which the GPU drains (AzNHC's ND H100/H200 v5
    /// `check_gpu_ecc 20000000 10000`; any uncorrectable SRAM error drains).
    pub sram_corrected_max: u64,
    /// DRAM ECC errors, corrected or not, above which the GPU drains (the same AzNHC line).
    pub dram_errors_max: u64,
    /// Uncorrectable remapped rows at which the GPU is worn out: NVIDIA's RMA policy sets
    /// the remap failure flag at 512 in total (DCGM warns there, OCI terminates).
    pub remapped_uncorrectable_max: u32,
    /// Retired pages (single- plus double-bit) at which the GPU fails (DCGM's
    /// `DCGM_LIMIT_MAX_RETIRED_PAGES`, 63, "updated to match the field diag").
    pub retired_pages_max: u64,
    /// Double-bit retired pages above which a new one within `retirement_window_s` fails
    /// (DCGM: more than 15, and more than 1 in the past week).
    pub retired_dbe_soft_max: u64,
    /// A rise of `symbol_error` / `link_error_recovery` in the window at or above which a
    /// port warns (Mellanox ibutils' PM counter deltas: 30 and 10; no current peer sets
    /// one for a rise).
    pub symbol_error_rise: u64,
    pub link_error_recovery_rise: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            window_s: 3600,
            retirement_window_s: 7 * 24 * 3600,
            nvlink_crc_per_s: 100.0,
            sram_corrected_max: 10_000,
            dram_errors_max: 20_000_000,
            remapped_uncorrectable_max: 512,
            retired_pages_max: 63,
            retired_dbe_soft_max: 15,
            symbol_error_rise: 30,
            link_error_recovery_rise: 10,
        }
    }
}

/// DCGM's allowance of PCIe replays per lane per minute by PCIe generation (a 1e-12 bit
/// error rate at the lane's rate): Gen1 0.15 .. Gen6 3.84, doubling from Gen3's 0.48.
fn replays_per_lane_per_min(gts: f64) -> f64 {
    match gts {
        g if g <= 2.5 => 0.15,
        g if g <= 5.0 => 0.3,
        g if g <= 8.0 => 0.48,
        g if g <= 16.0 => 0.96,
        g if g <= 32.0 => 1.92,
        _ => 3.84,
    }
}

/// The PCIe replays per minute DCGM allows a link of `width` lanes at `gts` GT/s:
/// ceil(per-lane allowance x lanes), 16 for Gen4 x16, 31 for Gen5 x16.
pub fn pcie_replays_allowed_per_min(gts: f64, width: u32) -> f64 {
    (replays_per_lane_per_min(gts) * f64::from(width.max(1))).ceil()
}

/// What one counter check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub code: &'static str,
    pub class: Class,
    pub evidence: String,
    /// What fixes it: worn-out memory needs a new GPU, a link error a reset.
    pub repair: Repair,
}

/// A finding with the repair that fixes it, named where it is found: memory past its
/// spares (SRAM, remapped rows, retired pages) is worn hardware, a GPU's own link errors
/// clear with a GPU reset, the rest with a reboot.
pub(super) fn found(code: &'static str, class: Class, repair: Repair, evidence: String) -> Finding {
    Finding {
        code,
        class,
        evidence,
        repair,
    }
}

/// One sample of a counter: (unix seconds, value).
type Sample = (u64, u64);

/// Each counter's samples within the longest window, kept in the state dir: the rise of
/// a counter is its newest value less its oldest within the window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct History(BTreeMap<String, Vec<Sample>>);

impl History {
    /// Samples kept per counter (thinned to span the window, see [`History::record`]).
    pub const MAX_SAMPLES: usize = 32;
    /// Counters kept: an 8-GPU, 32-port node counts about 300. With `MAX_SAMPLES`, a full
    /// history stays well inside the state file's cap ([`super::PassState::MAX_BYTES`]):
    /// past the cap the state would be refused and every pass start afresh, losing the
    /// clean-pass count a resume waits for.
    pub const MAX_KEYS: usize = 1024;

    /// Record `value` for `key` at `now` and return its rise over the last `window_s`
    /// seconds together with the seconds that rise spans (`None`: no earlier sample in
    /// the window, or the counter was reset and starts again).
    pub fn record(&mut self, key: &str, now: u64, value: u64, window_s: u64) -> Option<(u64, u64)> {
        if !self.0.contains_key(key) && self.0.len() >= Self::MAX_KEYS {
            return None;
        }
        let samples = self.0.entry(key.to_string()).or_default();
        // A lower value, or a clock that went back: the counter or the clock was reset.
        if samples.last().is_some_and(|&(t, v)| value < v || now < t) {
            samples.clear();
        }
        samples.retain(|&(t, _)| now - t <= window_s);
        // Thinned so that MAX_SAMPLES span the whole window (a week's window at one pass
        // a minute): every kept sample but the newest is at least a slot after the one
        // before it, so a newest sample that did not earn its slot gives way to the next.
        let slot = window_s / Self::MAX_SAMPLES as u64;
        if let [.., (before, _), (last, _)] = samples[..]
            && last - before < slot
        {
            samples.pop();
        }
        samples.push((now, value));
        if samples.len() > Self::MAX_SAMPLES {
            let extra = samples.len() - Self::MAX_SAMPLES;
            samples.drain(..extra);
        }
        let &(t0, v0) = samples.first()?;
        (t0 < now).then_some((value - v0, now - t0))
    }

    /// Keep `earlier`'s counters that this pass did not read (a prolog pass reads fewer).
    pub fn carry_over(&mut self, earlier: &History) {
        for (key, samples) in &earlier.0 {
            if self.0.len() >= Self::MAX_KEYS {
                break;
            }
            self.0.entry(key.clone()).or_insert_with(|| samples.clone());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Per-unit rate of a rise over `span_s` seconds, scaled to `per_s` seconds.
fn rate(rise: u64, span_s: u64, per_s: f64) -> f64 {
    rise as f64 * per_s / span_s.max(1) as f64
}

/// Where a pass records: the history it builds, the one it read, the time and limits.
pub struct Window<'a> {
    pub next: &'a mut History,
    pub prev: &'a History,
    pub now: u64,
    pub limits: &'a Limits,
}

impl Window<'_> {
    /// The rise of `key` to `value` over the window, starting from the previous pass's
    /// samples.
    fn rise(&mut self, key: &str, value: u64) -> Option<(u64, u64)> {
        self.next_record(key, value, self.limits.window_s)
    }

    /// [`Window::rise`] over a window of its own (the page retirement rate's week).
    fn next_record(&mut self, key: &str, value: u64, window_s: u64) -> Option<(u64, u64)> {
        if !self.next.0.contains_key(key)
            && let Some(samples) = self.prev.0.get(key)
        {
            self.next.0.insert(key.to_string(), samples.clone());
        }
        self.next.record(key, self.now, value, window_s)
    }
}

/// NVLink errors of one GPU (`subject` names it in the history's keys), as DCGM's
/// NVLink health watch judges them: any replay or recovery error in the window fails
/// (drain), CRC errors at [`Limits::nvlink_crc_per_s`] fail, fewer rising warn.
pub fn judge_nvlink(c: &GpuCounters, subject: &str, w: &mut Window<'_>) -> Option<Vec<Finding>> {
    let crc = match (c.nvlink_crc_flit, c.nvlink_crc_data) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    if crc.is_none() && c.nvlink_replay.is_none() && c.nvlink_recovery.is_none() {
        return None;
    }
    let mut out = Vec::new();
    for (what, value, code) in [
        ("recovery", c.nvlink_recovery, "GPU_NVLINK_RECOVERY"),
        ("replay", c.nvlink_replay, "GPU_NVLINK_REPLAY"),
    ] {
        if let Some(n) = value
            && let Some((rise, span)) = w.rise(&format!("{subject}/nvlink_{what}"), n)
            && rise > 0
        {
            out.push(found(
                code,
                Class::Drain,
                Repair::Reset,
                format!("{rise} NVLink {what} errors in {span} s (total {n})"),
            ));
        }
    }
    if let Some(n) = crc
        && let Some((rise, span)) = w.rise(&format!("{subject}/nvlink_crc"), n)
        && rise > 0
    {
        let per_s = rate(rise, span, 1.0);
        let limit = w.limits.nvlink_crc_per_s;
        let class = if per_s >= limit {
            Class::Drain
        } else {
            Class::Warn
        };
        out.push(found(
            "GPU_NVLINK_CRC",
            class,
            Repair::Reset,
            format!("{rise} NVLink CRC errors in {span} s ({per_s:.1}/s; fails at {limit}/s)"),
        ));
    }
    Some(out)
}

/// The PCIe replay rate of one GPU against DCGM's allowance for its link (`link`: the
/// current speed in GT/s and width): above it the link or riser is marginal (warn).
pub fn judge_pcie_replay(
    c: &GpuCounters,
    link: Option<(f64, u32)>,
    subject: &str,
    w: &mut Window<'_>,
) -> Option<Vec<Finding>> {
    let n = c.pcie_replay?;
    let mut out = Vec::new();
    if let Some((rise, span)) = w.rise(&format!("{subject}/pcie_replay"), n)
        && let Some((gts, width)) = link
    {
        let allowed = pcie_replays_allowed_per_min(gts, width);
        let per_min = rate(rise, span, 60.0);
        if per_min > allowed {
            out.push(found(
                "GPU_PCIE_REPLAY",
                Class::Warn,
                Repair::Reboot,
                format!(
                    "{rise} PCIe replays in {span} s ({per_min:.1} per minute; {allowed} allowed at {gts} GT/s x{width})"
                ),
            ));
        }
    }
    Some(out)
}

/// Lifetime memory wear of one GPU (counts, not rates, as AzNHC, DCGM and NVIDIA's RMA
/// policy judge them): SRAM errors, DRAM errors past AzNHC's limit, remapped rows at the
/// failure count, retired pages at the cap or double-bit pages still coming.
pub fn judge_memory_wear(
    c: &GpuCounters,
    subject: &str,
    w: &mut Window<'_>,
) -> Option<Vec<Finding>> {
    let known = [
        c.sram_uncorrected,
        c.sram_corrected,
        c.dram_corrected,
        c.dram_uncorrected,
        c.retired_sbe,
        c.retired_dbe,
    ]
    .iter()
    .any(Option::is_some)
        || c.remapped_uncorrectable.is_some();
    if !known {
        return None;
    }
    let limits = w.limits;
    let mut out = Vec::new();
    if let Some(n) = c.sram_uncorrected.filter(|&n| n > 0) {
        out.push(found(
            "GPU_SRAM_UNCORRECTABLE",
            Class::Drain,
            Repair::Replace,
            format!("{n} uncorrectable SRAM ECC errors (aggregate)"),
        ));
    }
    if let Some(n) = c.sram_corrected.filter(|&n| n > limits.sram_corrected_max) {
        out.push(found(
            "GPU_SRAM_ECC",
            Class::Drain,
            Repair::Replace,
            format!(
                "{n} correctable SRAM ECC errors (aggregate; limit {})",
                limits.sram_corrected_max
            ),
        ));
    }
    for (what, value) in [
        ("corrected", c.dram_corrected),
        ("uncorrected", c.dram_uncorrected),
    ] {
        if let Some(n) = value.filter(|&n| n > limits.dram_errors_max) {
            out.push(found(
                "GPU_DRAM_ECC",
                Class::Drain,
                Repair::Replace,
                format!(
                    "{n} {what} DRAM ECC errors (aggregate; limit {})",
                    limits.dram_errors_max
                ),
            ));
        }
    }
    if let Some(n) = c
        .remapped_uncorrectable
        .filter(|&n| n >= limits.remapped_uncorrectable_max)
    {
        out.push(found(
            "GPU_ROW_REMAP_EXHAUSTED",
            Class::Drain,
            Repair::Replace,
            format!(
                "{n} rows remapped for uncorrectable errors (NVIDIA's RMA count: {})",
                limits.remapped_uncorrectable_max
            ),
        ));
    }
    let (sbe, dbe) = (c.retired_sbe.unwrap_or(0), c.retired_dbe.unwrap_or(0));
    if sbe + dbe >= limits.retired_pages_max {
        out.push(found(
            "GPU_PAGES_EXHAUSTED",
            Class::Drain,
            Repair::Replace,
            format!(
                "{} pages retired ({sbe} single-bit, {dbe} double-bit; limit {})",
                sbe + dbe,
                limits.retired_pages_max
            ),
        ));
    } else if let Some(n) = c.retired_dbe {
        let key = format!("{subject}/retired_dbe");
        let window = limits.retirement_window_s;
        let recent = w.next_record(&key, n, window);
        if n > limits.retired_dbe_soft_max
            && let Some((rise, span)) = recent
            && rise > 1
        {
            out.push(found(
                "GPU_PAGES_DBE_RATE",
                Class::Drain,
                Repair::Replace,
                format!(
                    "{n} double-bit retired pages, {rise} of them in the last {} h",
                    span / 3600
                ),
            ));
        }
    }
    Some(out)
}

/// Heat and hardware slowdowns of one GPU (warn, as DCGM's thermal and power watches
/// and AzNHC's clock-throttling check do): at or above the driver's own slowdown
/// temperature, or a hardware clocks-event reason set.
pub fn judge_thermal(c: &GpuCounters) -> Option<Vec<Finding>> {
    if c.temperature_c.is_none() && c.clocks_event_reasons.is_none() {
        return None;
    }
    let mut out = Vec::new();
    if let (Some(t), Some(slow)) = (c.temperature_c, c.slowdown_temp_c)
        && t >= slow
    {
        let shutdown = c
            .shutdown_temp_c
            .map_or(String::new(), |s| format!(", shutdown at {s}"));
        out.push(found(
            "GPU_HOT",
            Class::Warn,
            Repair::Reboot,
            format!("{t} °C, at or above the slowdown threshold {slow}{shutdown}"),
        ));
    }
    if let Some(mask) = c.clocks_event_reasons {
        let set: Vec<&str> = HARDWARE_SLOWDOWN_REASONS
            .iter()
            .filter(|(bit, _)| mask & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        if !set.is_empty() {
            out.push(found(
                "GPU_SLOWDOWN",
                Class::Warn,
                Repair::Reboot,
                format!("clocks held down: {} (mask {mask:#x})", set.join(", ")),
            ));
        }
    }
    Some(out)
}

/// One fabric port's physical link and error counters (`port` = `DEV/N`): a physical
/// state other than LinkUp drains (NHC's `check_hw_ib`); `symbol_error` and
/// `link_error_recovery` rising past their thresholds, or stuck at their maximum, warn;
/// EFA's error counters rising warn or inform ([`EFA_ERROR_COUNTERS`]).
pub fn judge_port(p: &PortCounters, port: &str, w: &mut Window<'_>) -> Option<Vec<Finding>> {
    let known = p.phys_state.is_some()
        || p.symbol_error.is_some()
        || p.link_error_recovery.is_some()
        || !p.efa_errors.is_empty();
    if !known {
        return None;
    }
    let mut out = Vec::new();
    if let Some(state) = p.phys_state.as_deref().filter(|s| *s != "LinkUp") {
        out.push(found(
            "NIC_PHYS_DOWN",
            Class::Drain,
            Repair::Reboot,
            format!("physical state {state}, not LinkUp"),
        ));
    }
    for (name, value, limit, max) in [
        (
            "symbol_error",
            p.symbol_error,
            w.limits.symbol_error_rise,
            SYMBOL_ERROR_MAX,
        ),
        (
            "link_error_recovery",
            p.link_error_recovery,
            w.limits.link_error_recovery_rise,
            LINK_ERROR_RECOVERY_MAX,
        ),
    ] {
        let Some(n) = value else { continue };
        let rise = w.rise(&format!("{port}/{name}"), n);
        if n >= max {
            out.push(found(
                "NIC_PORT_ERRORS",
                Class::Warn,
                Repair::Reboot,
                format!(
                    "{name} saturated at {n} (it can no longer rise; clear the port's counters)"
                ),
            ));
        } else if let Some((rise, span)) = rise
            && rise >= limit
        {
            out.push(found(
                "NIC_PORT_ERRORS",
                Class::Warn,
                Repair::Reboot,
                format!("{name} rose by {rise} in {span} s (threshold {limit})"),
            ));
        }
    }
    for (name, &n) in &p.efa_errors {
        let class = EFA_ERROR_COUNTERS
            .iter()
            .find(|(known, _)| known == name)
            .map_or(Class::Info, |&(_, c)| c);
        if let Some((rise, span)) = w.rise(&format!("{port}/{name}"), n)
            && rise > 0
        {
            out.push(found(
                "NIC_EFA_ERRORS",
                class,
                Repair::Reboot,
                format!("{name} rose by {rise} in {span} s"),
            ));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window<'a>(
        next: &'a mut History,
        prev: &'a History,
        now: u64,
        limits: &'a Limits,
    ) -> Window<'a> {
        Window {
            next,
            prev,
            now,
            limits,
        }
    }

    fn codes(found: Option<Vec<Finding>>) -> Vec<(&'static str, Class)> {
        found
            .expect("the counters are known")
            .iter()
            .map(|f| (f.code, f.class))
            .collect()
    }

    #[test]
    fn phys_state_names() {
        assert_eq!(phys_state_name("5: LinkUp\n").as_deref(), Some("LinkUp"));
        assert_eq!(phys_state_name("2: Polling").as_deref(), Some("Polling"));
        assert_eq!(phys_state_name("LinkUp"), None);
        assert_eq!(phys_state_name("5: Link Up"), None);
        assert_eq!(phys_state_name("x: LinkUp"), None);
    }

    #[test]
    fn a_rise_spans_the_window_and_a_reset_starts_again() {
        let mut h = History::default();
        assert_eq!(h.record("k", 100, 5, 3600), None, "first sample");
        assert_eq!(h.record("k", 160, 9, 3600), Some((4, 60)));
        assert_eq!(h.record("k", 220, 20, 3600), Some((15, 120)));
        // After a gap longer than the window the old samples go: no base, no rise; the
        // next pass has one.
        assert_eq!(h.record("k", 4000, 30, 3600), None);
        assert_eq!(h.record("k", 4060, 31, 3600), Some((1, 60)));
        // A lower value: reset (driver reload, GPU reset), never a burst.
        let mut h = History::default();
        h.record("k", 0, 1000, 3600);
        assert_eq!(h.record("k", 60, 3, 3600), None);
        assert_eq!(h.record("k", 120, 5, 3600), Some((2, 60)));
    }

    #[test]
    fn samples_are_thinned_to_span_the_window_and_keys_are_bounded() {
        // A week's window at one pass a minute: 10,080 passes, MAX_SAMPLES at most,
        // the base within one slot of a week back.
        let week = 7 * 24 * 3600;
        let mut h = History::default();
        let mut last = None;
        for i in 0..=(week / 60) {
            last = h.record("k", i * 60, i, week);
        }
        assert!(h.0["k"].len() <= History::MAX_SAMPLES, "{}", h.0["k"].len());
        let (rise, span) = last.expect("a rise");
        assert!(
            span >= week - week / History::MAX_SAMPLES as u64,
            "the base stays about a week back: {span}"
        );
        assert_eq!(rise, span / 60);
        let mut h = History::default();
        for i in 0..(History::MAX_KEYS + 10) {
            h.record(&format!("k{i}"), 0, 0, 60);
        }
        assert_eq!(h.0.len(), History::MAX_KEYS);
    }

    #[test]
    fn a_full_history_fits_the_state_file() {
        let mut h = History::default();
        for k in 0..History::MAX_KEYS {
            for i in 0..History::MAX_SAMPLES as u64 {
                h.record(
                    &format!("gpu=0000:{k:04x}:00.0/nvlink_recovery"),
                    1_800_000_000 + i * 3600,
                    u64::from(u32::MAX) + i,
                    1 << 40,
                );
            }
        }
        let bytes = serde_json::to_vec(&h).expect("json").len();
        assert!(
            bytes < super::super::PassState::MAX_BYTES / 2,
            "{bytes} bytes at the bounds"
        );
    }

    #[test]
    fn nvlink_replay_and_recovery_drain_crc_fails_only_at_dcgms_rate() {
        let limits = Limits::default();
        let gpu = |crc: u64, replay: u64, recovery: u64| GpuCounters {
            nvlink_crc_flit: Some(crc),
            nvlink_crc_data: Some(0),
            nvlink_replay: Some(replay),
            nvlink_recovery: Some(recovery),
            ..GpuCounters::default()
        };
        let empty = History::default();
        let mut prev = History::default();
        let first = judge_nvlink(
            &gpu(0, 0, 0),
            "gpu=a",
            &mut window(&mut prev, &empty, 0, &limits),
        );
        assert_eq!(first, Some(vec![]), "a first sample judges nothing");
        let mut next = History::default();
        // 60 s later: 10 CRC errors (well under 100/s) only warn.
        let out = judge_nvlink(
            &gpu(10, 0, 0),
            "gpu=a",
            &mut window(&mut next, &prev, 60, &limits),
        );
        assert_eq!(codes(out), [("GPU_NVLINK_CRC", Class::Warn)]);
        // 10,000 CRC errors in 60 s (167/s), a replay and a recovery: all fail.
        let mut next = History::default();
        let out = judge_nvlink(
            &gpu(10_000, 1, 1),
            "gpu=a",
            &mut window(&mut next, &prev, 60, &limits),
        );
        assert_eq!(
            codes(out),
            [
                ("GPU_NVLINK_RECOVERY", Class::Drain),
                ("GPU_NVLINK_REPLAY", Class::Drain),
                ("GPU_NVLINK_CRC", Class::Drain),
            ]
        );
        // A GPU without NVLink counters: nothing to judge.
        let mut next = History::default();
        let none = judge_nvlink(
            &GpuCounters::default(),
            "gpu=a",
            &mut window(&mut next, &prev, 60, &limits),
        );
        assert_eq!(none, None);
    }

    #[test]
    fn pcie_replays_against_dcgms_allowance_for_the_link() {
        assert_eq!(pcie_replays_allowed_per_min(16.0, 16), 16.0);
        assert_eq!(pcie_replays_allowed_per_min(32.0, 16), 31.0);
        assert_eq!(pcie_replays_allowed_per_min(8.0, 8), 4.0);
        let limits = Limits::default();
        let mut prev = History::default();
        prev.record("gpu=a/pcie_replay", 0, 100, 3600);
        let c = |n| GpuCounters {
            pcie_replay: Some(n),
            ..GpuCounters::default()
        };
        let gen5 = Some((32.0, 16));
        let mut next = History::default();
        let calm = judge_pcie_replay(
            &c(131),
            gen5,
            "gpu=a",
            &mut window(&mut next, &prev, 60, &limits),
        );
        assert_eq!(
            calm,
            Some(vec![]),
            "31 a minute is Gen5 x16's allowance, not above it"
        );
        let mut next = History::default();
        let out = judge_pcie_replay(
            &c(200),
            gen5,
            "gpu=a",
            &mut window(&mut next, &prev, 60, &limits),
        );
        assert_eq!(codes(out.clone()), [("GPU_PCIE_REPLAY", Class::Warn)]);
        let evidence = &out.expect("known")[0].evidence;
        assert!(
            evidence.contains("100 PCIe replays in 60 s")
                && evidence.contains("31 allowed at 32 GT/s x16"),
            "{evidence}"
        );
        // No link facts: the counter is recorded, nothing judged.
        let mut next = History::default();
        assert_eq!(
            judge_pcie_replay(
                &c(200),
                None,
                "gpu=a",
                &mut window(&mut next, &prev, 60, &limits)
            ),
            Some(vec![])
        );
    }

    #[test]
    fn memory_wear_at_the_peers_counts_drains() {
        let limits = Limits::default();
        let empty = History::default();
        let judge = |c: &GpuCounters| {
            let mut next = History::default();
            judge_memory_wear(c, "gpu=a", &mut window(&mut next, &empty, 0, &limits))
        };
        assert_eq!(judge(&GpuCounters::default()), None);
        let healthy = GpuCounters {
            sram_uncorrected: Some(0),
            sram_corrected: Some(10_000),
            dram_corrected: Some(20_000_000),
            remapped_uncorrectable: Some(3),
            retired_sbe: Some(0),
            retired_dbe: Some(0),
            ..GpuCounters::default()
        };
        assert_eq!(judge(&healthy), Some(vec![]), "the limits themselves pass");
        let worn = GpuCounters {
            sram_uncorrected: Some(2),
            sram_corrected: Some(10_001),
            dram_uncorrected: Some(20_000_001),
            remapped_uncorrectable: Some(512),
            retired_sbe: Some(23),
            retired_dbe: Some(40),
            ..GpuCounters::default()
        };
        let found: Vec<_> = codes(judge(&worn)).into_iter().map(|(c, _)| c).collect();
        assert_eq!(
            found,
            [
                "GPU_SRAM_UNCORRECTABLE",
                "GPU_SRAM_ECC",
                "GPU_DRAM_ECC",
                "GPU_ROW_REMAP_EXHAUSTED",
                "GPU_PAGES_EXHAUSTED"
            ]
        );
    }

    #[test]
    fn double_bit_retirements_still_coming_past_dcgms_soft_limit_drain() {
        let limits = Limits::default();
        let c = |dbe| GpuCounters {
            retired_sbe: Some(0),
            retired_dbe: Some(dbe),
            ..GpuCounters::default()
        };
        let empty = History::default();
        let mut prev = History::default();
        judge_memory_wear(&c(16), "gpu=a", &mut window(&mut prev, &empty, 0, &limits));
        // Three days later one more: not more than one in the week.
        let mut mid = History::default();
        let one = judge_memory_wear(
            &c(17),
            "gpu=a",
            &mut window(&mut mid, &prev, 3 * 86_400, &limits),
        );
        assert_eq!(one, Some(vec![]));
        // A day later another: two in the week.
        let mut next = History::default();
        let two = judge_memory_wear(
            &c(18),
            "gpu=a",
            &mut window(&mut next, &mid, 4 * 86_400, &limits),
        );
        assert_eq!(codes(two), [("GPU_PAGES_DBE_RATE", Class::Drain)]);
    }

    #[test]
    fn heat_and_hardware_slowdowns_warn() {
        let c = GpuCounters {
            temperature_c: Some(91),
            slowdown_temp_c: Some(90),
            shutdown_temp_c: Some(95),
            clocks_event_reasons: Some(0x1 | 0x80),
            ..GpuCounters::default()
        };
        let out = judge_thermal(&c).expect("known");
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].evidence.contains("91 °C") && out[0].evidence.contains("shutdown at 95"));
        assert!(out[1].evidence.contains("HW power brake") && !out[1].evidence.contains("thermal"));
        // Idle (0x1) and the software power cap (0x4) are no slowdown.
        let idle = GpuCounters {
            temperature_c: Some(40),
            slowdown_temp_c: Some(90),
            clocks_event_reasons: Some(0x1 | 0x4),
            ..GpuCounters::default()
        };
        assert_eq!(judge_thermal(&idle), Some(vec![]));
    }

    #[test]
    fn ports_drain_when_not_linkup_and_warn_on_rising_or_saturated_errors() {
        let limits = Limits::default();
        let mut prev = History::default();
        prev.record("mlx5_0/1/symbol_error", 0, 5, 3600);
        prev.record("mlx5_0/1/link_error_recovery", 0, 1, 3600);
        prev.record("efa_0/1/rdma_write_wr_err", 0, 2, 3600);
        prev.record("efa_0/1/unresponsive_remote_events", 0, 0, 3600);
        let ib = PortCounters {
            phys_state: Some("Polling".into()),
            symbol_error: Some(35),
            link_error_recovery: Some(255),
            ..PortCounters::default()
        };
        let mut next = History::default();
        let out = judge_port(&ib, "mlx5_0/1", &mut window(&mut next, &prev, 600, &limits));
        assert_eq!(
            codes(out.clone()),
            [
                ("NIC_PHYS_DOWN", Class::Drain),
                ("NIC_PORT_ERRORS", Class::Warn),
                ("NIC_PORT_ERRORS", Class::Warn)
            ]
        );
        assert!(out.expect("known")[2].evidence.contains("saturated at 255"));
        let efa = PortCounters {
            phys_state: Some("LinkUp".into()),
            efa_errors: [
                ("rdma_write_wr_err".to_string(), 3),
                ("unresponsive_remote_events".to_string(), 4),
            ]
            .into(),
            ..PortCounters::default()
        };
        let out = judge_port(&efa, "efa_0/1", &mut window(&mut next, &prev, 600, &limits));
        assert_eq!(
            codes(out),
            [
                ("NIC_EFA_ERRORS", Class::Warn),
                ("NIC_EFA_ERRORS", Class::Info)
            ]
        );
        let unknown = judge_port(
            &PortCounters::default(),
            "x/1",
            &mut window(&mut next, &prev, 600, &limits),
        );
        assert_eq!(unknown, None);
    }
}
