//! The Azure and OCI hand-offs' I/O (`[drain] handoff = "azure"` / `"oci"`; what they send
//! is core's `health::handoff`). Only the health program hands off, after the drain
//! decision is applied, and only while the node is drained by the suite: a drain the
//! breaker held back is never reported (a cloud that replaces what it is told about would
//! undo the breaker). A failure is one logged line; it never changes the verdict or the
//! drain.
//!
//! Azure: three requests through curl (IMDS token, IMDS compute ids, the ARM `PUT`), each
//! with `--max-time` and a bound on the process behind it, its URL, headers and body
//! written to curl's stdin as a config (`--config -`), so the token never reaches an
//! argument vector; curl's environment is cleared (no proxy, no `.curlrc`: `--disable`).
//! Each drain is reported once: a drain written now is reported; a drain found in place
//! only when no report of it succeeded yet (`PassState::handoff`, the reasons reported,
//! cleared when the node is back in service).
//!
//! OCI: the passive health-check record, read and replaced atomically through a handle
//! on its trust-checked directory.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use gpu_affinity::config::{Config, HandoffConfig};
use gpu_affinity::health::drain::{self, Action, Handoff, Leave};
use gpu_affinity::health::handoff::{
    self as core_handoff, AzureError, AzureVm, CurlRequest, OciRecord, Reported,
};
use gpu_affinity::health::{Report, Verdict};

use crate::bounded::{self, Keep};
use crate::state;

/// The OCI record is a few KiB; anything near this is not one.
const OCI_FILE_MAX: u64 = 1 << 20;

/// What the hand-off may still add to the run: each of Azure's three requests under its
/// bound, plus the slack curl's own start and end need.
pub fn bound(cfg: &HandoffConfig) -> Duration {
    Duration::from_secs(3 * (u64::from(cfg.timeout_s()) + 2))
}

/// What the pass decided and applied: the hand-offs follow it.
pub struct Decided<'a> {
    pub report: &'a Report,
    pub action: &'a Action,
    pub applied: &'a Result<(), String>,
    /// Unix seconds: the report's time.
    pub now: u64,
}

impl Decided<'_> {
    /// Whether the suite holds the node drained after this pass: it set its drain now,
    /// or its drain was there already.
    fn drained_by_suite(&self) -> bool {
        match self.action {
            Action::Set { .. } => self.applied.is_ok(),
            Action::Leave(Leave::AlreadyDrained) => true,
            _ => false,
        }
    }

    /// Whether the node is back in service (or was never drained by the suite): the
    /// memory of what was reported goes.
    fn back_in_service(&self) -> bool {
        match self.action {
            Action::Resume => self.applied.is_ok(),
            Action::Leave(Leave::Healthy | Leave::DrainedByOther) => true,
            _ => false,
        }
    }
}

/// Hand the pass's drain to the cloud `[drain] handoff` names. `reported`: the health
/// state's memory; `log`: one line each, to the program's log.
pub fn hand_off(cfg: &Config, pass: &Decided, reported: &mut Reported, log: &dyn Fn(&str)) {
    match cfg.drain.handoff.unwrap_or_default() {
        Handoff::Azure => azure(&cfg.handoff, pass, reported, log),
        Handoff::Oci => oci(&cfg.handoff, pass, log),
        Handoff::Drain | Handoff::Hyperpod | Handoff::SlurmGcp => {}
    }
}

fn azure(h: &HandoffConfig, pass: &Decided, reported: &mut Reported, log: &dyn Fn(&str)) {
    if pass.back_in_service() {
        reported.reasons.clear();
        return;
    }
    let report = pass.report;
    let Some(deciding) = report
        .deciding()
        .filter(|_| report.verdict == Verdict::Drain && pass.drained_by_suite())
    else {
        return;
    };
    let reason = drain::reason(deciding);
    // A drain written now is a new one (an admin may have resumed the node in between):
    // reported again. A drain found in place was reported, unless that failed.
    if matches!(pass.action, Action::Set { .. }) {
        reported.reasons.retain(|r| *r != reason);
    }
    if reported.contains(&reason) {
        return;
    }
    let Some(category) = core_handoff::azure_category(deciding) else {
        log(&format!(
            "azure: {reason} is not the Azure host's fault: not reported"
        ));
        reported.record(&reason);
        return;
    };
    bounded::extend_watchdog(bound(h));
    match report_impact(h, category, &reason, pass.now) {
        Ok(name) => {
            log(&format!(
                "azure: impact {category} reported for {reason} (workloadImpacts/{name})"
            ));
            reported.record(&reason);
        }
        Err(e) => log(&format!(
            "azure: impact report failed: {e}; the drain stands, retried next pass"
        )),
    }
}

/// Token, VM ids, `PUT`: the impact's name on success, else one line why.
fn report_impact(
    h: &HandoffConfig,
    category: &str,
    description: &str,
    now: u64,
) -> Result<String, String> {
    let imds = h.azure_imds();
    let metadata = || vec!["Metadata: true".to_string()];
    let get = |url: String| CurlRequest {
        method: "GET",
        url,
        headers: metadata(),
        body: None,
    };
    let token = curl(
        h,
        "IMDS token",
        &get(format!(
            "{imds}{}",
            core_handoff::token_path(h.azure_object_id.as_deref())
        )),
    )
    .and_then(|body| core_handoff::parse_token(&body).map_err(|e| e.to_string()))?;
    let AzureVm {
        subscription_id,
        resource_id,
    } = curl(
        h,
        "IMDS compute",
        &get(format!("{imds}{}", core_handoff::COMPUTE_PATH)),
    )
    .and_then(|body| core_handoff::parse_compute(&body).map_err(|e| e.to_string()))?;
    let name = core_handoff::uuid_v4(random_bytes()?);
    let put = CurlRequest {
        method: "PUT",
        url: format!(
            "{}{}",
            h.azure_arm(),
            core_handoff::impact_path(&subscription_id, &name)
        ),
        headers: vec![
            format!("Authorization: Bearer {token}"),
            "Content-Type: application/json".to_string(),
        ],
        body: Some(core_handoff::impact_body(
            category,
            description,
            &resource_id,
            now,
        )),
    };
    curl(h, "ARM impact PUT", &put)?;
    Ok(name)
}

/// One request through curl: the answer's body when its status is 2xx.
fn curl(h: &HandoffConfig, what: &'static str, req: &CurlRequest) -> Result<String, String> {
    let program = h.curl();
    bounded::trusted_program(program, "curl", state::owner())?;
    let max = h.timeout_s().to_string();
    let mut cmd = bounded::root_command(program);
    cmd.args(["--disable", "--silent", "--show-error", "--max-time", &max])
        .args(["--proto", "=http,https", "--config", "-"]);
    let bound = Duration::from_secs(u64::from(h.timeout_s()) + 2);
    let keep = Keep {
        stdout: 64 * 1024,
        stderr: 1024,
    };
    let ran = bounded::run_with_input(&mut cmd, what, bound, keep, Some(req.config().into_bytes()))
        .map_err(|e| format!("{what}: {e}"))?;
    if !ran.status.success() {
        return Err(bounded::explain(
            &format!("{what}: curl failed"),
            &ran.status,
            &ran.stderr,
        ));
    }
    let (body, status) = core_handoff::split_status(&ran.stdout);
    match status {
        Some(s) if (200..300).contains(&s) => Ok(body.to_string()),
        Some(status) => Err(AzureError::Status { what, status }.to_string()),
        None => Err(AzureError::NoStatus(what).to_string()),
    }
}

/// 16 bytes from the kernel's random source, for the impact's name.
fn random_bytes() -> Result<[u8; 16], String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    Ok(b)
}

/// The record follows the suite's drain: the repair while the suite holds the node
/// drained for a drain verdict, `Healthy` once the pass finds nothing; unchanged when
/// the drain was held back or not the suite's to make.
fn oci(h: &HandoffConfig, pass: &Decided, log: &dyn Fn(&str)) {
    let write = match pass.report.verdict {
        Verdict::Drain => pass.drained_by_suite(),
        Verdict::Ok | Verdict::Warn => true,
    };
    if !write {
        return;
    }
    if let Err(e) = write_oci(h.oci_file(), &OciRecord::of(pass.report), pass.now) {
        log(&format!("oci: {e}"));
    }
}

fn write_oci(path: &Path, record: &OciRecord, now: u64) -> Result<(), String> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return Err(format!("{} names no file", path.display()));
    };
    let dir = gpu_affinity::safe_dir::open(
        parent,
        "OCI health-check dir",
        gpu_affinity::safe_dir::Rule::Trusted,
        state::owner(),
        None,
    )
    .map_err(|e| e.to_string())?;
    let existing = dir.read(name, OCI_FILE_MAX).unwrap_or(None);
    dir.replace(name, &record.file(existing.as_deref(), now), 0o644)
}
