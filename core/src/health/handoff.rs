//! The clouds' repair hand-offs beyond Slurm's reason words (drain.rs), pure: which of
//! their categories a finding is, and the bytes each one reads. The node programs do the
//! I/O (prolog/src/report.rs).
//!
//! - **Azure** (`[drain] handoff = "azure"`): the drain keeps the suite's own reason (so
//!   resume works as with `drain`), and the health program reports the impact to Azure's
//!   Impact Reporting ("GHR"), as AzNHC's `triggerGHR` does: `PUT
//!   {arm}/subscriptions/{sub}/providers/Microsoft.Impact/workloadImpacts/{uuid}?api-version=2023-02-01-preview`
//!   with a managed-identity token from IMDS and an `impactCategory` from
//!   `nhc_fault_dictionary.cfg` ([`CLOUD_MAP`]).
//! - **OCI** (`[drain] handoff = "oci"`): the drain keeps the suite's reason too (OCI's own
//!   `healthchecks.sh` resumes reasons starting `Healthcheck::`, so the suite must not write
//!   those), and the health program writes the HPC stack's passive health-check record, the
//!   JSON file `/opt/oci-hpc/http_server/files/healthchecks` its `mgmt` collects
//!   (`passive_healthcheck_recommendation` = `Healthy` | `Reboot` | `Reset_GPU` |
//!   `Terminate`, as `check_gpu_setup.py` writes it).
//!
//! Sources (facts only, no code): Azure/azurehpc-health-checks @0e0a1ac
//! `triggerGHR/triggerGHR.sh`, `triggerGHR/config/nhc_fault_dictionary.cfg`, `customTests/*.nhc`;
//! oracle-quickstart/oci-hpc @b5285a6 `playbooks/roles/healthchecks/files/check_gpu_setup.py`
//! (its summary and the end of `main`), `playbooks/roles/slurm/files/healthchecks.sh`.

use serde::{Deserialize, Serialize};

use super::xid::Repair;
use super::{CheckId, Outcome, Report, Verdict};

/// AzNHC's fault codes and the GHR impact categories they report, exactly as
/// `triggerGHR/config/nhc_fault_dictionary.cfg` lists them (NHC2006 is not there; NHC2023,
/// missing NVMe, reuses the generic category).
pub const GHR_CATEGORIES: [(&str, &str); 22] = [
    ("NHC2001", "Resource.Hpc.Unhealthy.HpcGenericFailure"),
    ("NHC2002", "Resource.Hpc.Unhealthy.MissingIB"),
    ("NHC2003", "Resource.Hpc.Unhealthy.IBPerformance"),
    ("NHC2004", "Resource.Hpc.Unhealthy.IBPortDown"),
    ("NHC2005", "Resource.Hpc.Unhealthy.IBPortFlapping"),
    ("NHC2007", "Resource.Hpc.Unhealthy.HpcRowRemapFailure"),
    ("NHC2008", "Resource.Hpc.Unhealthy.HpcInforomCorruption"),
    ("NHC2009", "Resource.Hpc.Unhealthy.HpcMissingGpu"),
    ("NHC2010", "Resource.Hpc.Unhealthy.ManualInvestigation"),
    ("NHC2011", "Resource.Hpc.Unhealthy.XID95UncontainedECCError"),
    ("NHC2012", "Resource.Hpc.Unhealthy.XID94ContainedECCError"),
    ("NHC2013", "Resource.Hpc.Unhealthy.XID79FallenOffBus"),
    ("NHC2014", "Resource.Hpc.Unhealthy.XID48DoubleBitECC"),
    ("NHC2015", "Resource.Hpc.Unhealthy.UnhealthyGPUNvidiasmi"),
    ("NHC2016", "Resource.Hpc.Unhealthy.NvLink"),
    ("NHC2017", "Resource.Hpc.Unhealthy.HpcDcgmiThermalReport"),
    (
        "NHC2018",
        "Resource.Hpc.Unhealthy.ECCPageRetirementTableFull",
    ),
    ("NHC2019", "Resource.Hpc.Unhealthy.DBEOverLimit"),
    ("NHC2020", "Resource.Hpc.Unhealthy.HpcGpuDcgmDiagFailure"),
    ("NHC2021", "Resource.Hpc.Unhealthy.GPUMemoryBWFailure"),
    ("NHC2022", "Resource.Hpc.Unhealthy.CPUPerformance"),
    ("NHC2023", "Resource.Hpc.Unhealthy.HpcGenericFailure"),
];

/// The category of an AzNHC fault code (`NHC2013`); `None` for a code the dictionary lacks.
pub fn ghr_category(fault_code: &str) -> Option<&'static str> {
    GHR_CATEGORIES
        .iter()
        .find(|(c, _)| *c == fault_code)
        .map(|(_, cat)| *cat)
}

/// One finding's place in each cloud's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CloudEntry {
    pub check: CheckId,
    /// The finding's code when it refines its check's entry (`GPU_XID_79`); `None`: the
    /// check's entry, for every code it reports that no refinement names.
    pub code: Option<&'static str>,
    /// AzNHC's fault code whose GHR category Azure gets; `None`: never reported to Azure
    /// (a fault of the cluster or of the node's software, not of the Azure host).
    pub azure: Option<&'static str>,
    /// The reason word OCI's `check_gpu_setup.py` writes for the same finding (its
    /// `passive_healthcheck_status`); `None`: OCI has none, the suite's reason is written.
    pub oci: Option<&'static str>,
    /// Where the mapping comes from, or why it is generic or absent.
    pub why: &'static str,
}

const fn entry(
    check: CheckId,
    code: Option<&'static str>,
    azure: Option<&'static str>,
    oci: Option<&'static str>,
    why: &'static str,
) -> CloudEntry {
    CloudEntry {
        check,
        code,
        azure,
        oci,
        why,
    }
}

/// The generic category's fault code: used only where [`CloudEntry::why`] says why.
pub const GENERIC: &str = "NHC2001";

use CheckId as C;

/// Every drain-class check (and the counters' and XIDs' refinements) mapped to AzNHC's
/// fault code for the same condition and OCI's reason word. Sources: the AzNHC test that
/// reports the code (`customTests/NAME.nhc`), OCI's `check_gpu_setup.py` summary.
pub const CLOUD_MAP: &[CloudEntry] = &[
    entry(
        C::GpuCount,
        None,
        Some("NHC2009"),
        Some("Missing GPU Error"),
        "AzNHC azure_gpu_count.nhc; OCI GPU count check",
    ),
    entry(
        C::GpuBus,
        None,
        Some("NHC2013"),
        Some("GPU Bus Error"),
        "fallen off the bus is XID 79's condition (dictionary: XID79FallenOffBus); OCI bus check",
    ),
    entry(
        C::GpuPcieWidth,
        None,
        Some(GENERIC),
        Some("GPU PCIe Width Error"),
        "generic: AzNHC has no PCIe-width test or category; OCI PCIe width check",
    ),
    entry(
        C::GpuNvml,
        None,
        Some("NHC2015"),
        None,
        "NVML not answering is AzNHC's nvidia-smi hang (UnhealthyGPUNvidiasmi, csc_nvidia_smi.nhc)",
    ),
    entry(
        C::GpuEcc,
        None,
        Some("NHC2019"),
        Some("ECC Error"),
        "AzNHC azure_gpu_ecc.nhc reports ECC errors as NHC2019; OCI ECC check",
    ),
    entry(
        C::GpuRowRemap,
        None,
        Some("NHC2007"),
        Some("Remap Error"),
        "AzNHC azure_gpu_ecc.nhc: pending or failed remaps are NHC2007; OCI remap check",
    ),
    entry(
        C::GpuRetiredPages,
        None,
        Some("NHC2018"),
        Some("GPU Bad page error"),
        "AzNHC azure_gpu_ecc.nhc retirement check (NHC2018); OCI's pending bad pages",
    ),
    entry(
        C::GpuXid,
        Some("GPU_XID_48"),
        Some("NHC2014"),
        Some("Xid Error"),
        "dictionary: XID48DoubleBitECC",
    ),
    entry(
        C::GpuXid,
        Some("GPU_XID_79"),
        Some("NHC2013"),
        Some("Xid Error"),
        "dictionary: XID79FallenOffBus",
    ),
    entry(
        C::GpuXid,
        Some("GPU_XID_94"),
        Some("NHC2012"),
        Some("Xid Error"),
        "dictionary: XID94ContainedECCError",
    ),
    entry(
        C::GpuXid,
        Some("GPU_XID_95"),
        Some("NHC2011"),
        Some("Xid Error"),
        "dictionary: XID95UncontainedECCError",
    ),
    entry(
        C::GpuXid,
        None,
        Some(GENERIC),
        Some("Xid Error"),
        "generic: AzNHC azure_gpu_xid.nhc reports every other XID as NHC2001",
    ),
    entry(
        C::GpuNvlink,
        None,
        Some("NHC2016"),
        Some("NVLink speed Error"),
        "AzNHC azure_gpu_nvlink.nhc (an inactive link); OCI NVLink check",
    ),
    entry(
        C::GpuRecoveryAction,
        None,
        Some(GENERIC),
        None,
        "generic: NVML's recovery action has no AzNHC test or category",
    ),
    entry(
        C::GpuLeftoverProcesses,
        None,
        None,
        None,
        "not reported: a process left by a job is the node's software, not the Azure host",
    ),
    entry(
        C::GpuMemoryWear,
        None,
        Some("NHC2019"),
        Some("ECC Error"),
        "ECC counts over their limits: AzNHC azure_gpu_ecc.nhc's NHC2019",
    ),
    entry(
        C::GpuMemoryWear,
        Some("GPU_ROW_REMAP_EXHAUSTED"),
        Some("NHC2007"),
        Some("Remap Error"),
        "AzNHC's remap test (NHC2007); OCI: more than 512 remaps",
    ),
    entry(
        C::GpuMemoryWear,
        Some("GPU_PAGES_EXHAUSTED"),
        Some("NHC2018"),
        Some("GPU Bad page error"),
        "dictionary: ECCPageRetirementTableFull",
    ),
    entry(
        C::GpuMemoryWear,
        Some("GPU_PAGES_DBE_RATE"),
        Some("NHC2019"),
        Some("GPU Bad page error"),
        "dictionary: DBEOverLimit, more than 10 DBE retired pages in a week",
    ),
    entry(
        C::GpuNvlinkErrors,
        None,
        Some("NHC2016"),
        None,
        "NVLink errors rising: the dictionary's NvLink category",
    ),
    entry(
        C::GpuFabric,
        None,
        Some("NHC2016"),
        Some("Fabric Manager Error"),
        "the GPU's NVLink fabric (NVSwitch, Fabric Manager): the NvLink category; OCI FM check",
    ),
    entry(
        C::GpuImex,
        None,
        Some("NHC2016"),
        None,
        "the NVL72 IMEX domain is the NVLink domain: the NvLink category (AzNHC has no IMEX test); OCI filters IMEX out of its dcgmi verdict, so no word",
    ),
    entry(
        C::FabricCount,
        None,
        Some("NHC2002"),
        Some("RDMA Link Error"),
        "dictionary: MissingIB",
    ),
    entry(
        C::FabricPortState,
        None,
        Some("NHC2004"),
        Some("RDMA Link Down Error"),
        "dictionary: IBPortDown",
    ),
    entry(
        C::FabricPortRate,
        None,
        Some("NHC2003"),
        Some("RDMA Link Error"),
        "a port below its rate: IBPerformance",
    ),
    entry(
        C::FabricLinkFlaps,
        None,
        Some("NHC2005"),
        Some("RDMA Link Flapping Error"),
        "AzNHC azure_ib_link_flapping.nhc",
    ),
    entry(
        C::FabricPcieWidth,
        None,
        Some("NHC2003"),
        Some("RDMA Link Error"),
        "a NIC's PCIe link below width slows IB: IBPerformance",
    ),
    entry(
        C::FabricPortErrors,
        None,
        Some("NHC2003"),
        Some("RDMA Link Error"),
        "port error counters rising: IBPerformance",
    ),
    entry(
        C::FabricPortErrors,
        Some("NIC_PHYS_DOWN"),
        Some("NHC2004"),
        Some("RDMA Link Down Error"),
        "phys_state not LinkUp: IBPortDown",
    ),
    entry(
        C::StorageMount,
        None,
        None,
        None,
        "not reported: the cluster's storage is not the Azure host",
    ),
    entry(
        C::StorageWritable,
        None,
        None,
        None,
        "not reported: the cluster's storage is not the Azure host",
    ),
    entry(
        C::StorageLatency,
        None,
        None,
        None,
        "not reported: the cluster's storage is not the Azure host",
    ),
    entry(
        C::StorageCheckpointBandwidth,
        None,
        None,
        None,
        "not reported: the cluster's storage is not the Azure host",
    ),
    entry(
        C::GpuDcgmDiag,
        None,
        Some("NHC2020"),
        None,
        "dictionary: HpcGpuDcgmDiagFailure",
    ),
    entry(
        C::GpuAllReduce,
        None,
        Some("NHC2010"),
        None,
        "AzNHC azure_nccl_allreduce.nhc reports a slow all-reduce as NHC2010",
    ),
];

/// A finding's entry: its code's refinement, else its check's.
pub fn cloud_entry(outcome: &Outcome) -> Option<&'static CloudEntry> {
    let of_check = |e: &&CloudEntry| e.check == outcome.id;
    CLOUD_MAP
        .iter()
        .filter(of_check)
        .find(|e| e.code == Some(outcome.code.as_str()))
        .or_else(|| CLOUD_MAP.iter().filter(of_check).find(|e| e.code.is_none()))
}

/// The GHR impact category Azure gets for `outcome`; `None`: not reported.
pub fn azure_category(outcome: &Outcome) -> Option<&'static str> {
    cloud_entry(outcome)
        .and_then(|e| e.azure)
        .and_then(ghr_category)
}

/// What OCI's `mgmt` is told to do (`passive_healthcheck_recommendation`), from the
/// repair the suite decided (the XID catalog's resolution, escalated by repeats): the
/// words `check_gpu_setup.py`'s `recommended_action` uses.
pub fn oci_recommendation(repair: Repair) -> &'static str {
    match repair {
        Repair::Reset => "Reset_GPU",
        Repair::Reboot => "Reboot",
        Repair::Replace => "Terminate",
    }
}

/// OCI's word for a node with nothing to do.
pub const OCI_HEALTHY: &str = "Healthy";

/// The passive record's logs are cut where OCI cuts its own (`read(4095)`).
pub const OCI_LOGS_MAX: usize = 4095;

/// The four keys of OCI's passive health-check record, for one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciRecord {
    /// `Healthy`, or [`oci_recommendation`]'s word.
    pub recommendation: &'static str,
    /// `"Healthy"`, or the list of reasons (OCI's words, else the suite's reasons).
    pub status: Vec<String>,
    /// The failing checks' reasons and evidence, one a line.
    pub logs: String,
}

impl OciRecord {
    /// The record for a pass: healthy unless the verdict is drain.
    pub fn of(report: &Report) -> OciRecord {
        let Some(deciding) = report
            .deciding()
            .filter(|_| report.verdict == Verdict::Drain)
        else {
            return OciRecord {
                recommendation: OCI_HEALTHY,
                status: Vec::new(),
                logs: report.summary(),
            };
        };
        let failing: Vec<&Outcome> = report
            .checks
            .iter()
            .filter(|c| c.class == deciding.class && c.failed())
            .collect();
        let mut status: Vec<String> = Vec::new();
        for o in &failing {
            let word = cloud_entry(o)
                .and_then(|e| e.oci)
                .map_or_else(|| super::drain::reason(o), str::to_string);
            if !status.contains(&word) {
                status.push(word);
            }
        }
        let mut logs = String::new();
        for o in &failing {
            logs.push_str(&format!("{}: {}\n", super::drain::reason(o), o.evidence));
        }
        OciRecord {
            recommendation: oci_recommendation(deciding.repair),
            status,
            logs: cut(&logs, OCI_LOGS_MAX),
        }
    }

    /// The file OCI's http_server serves: the `existing` JSON object with this record's
    /// keys set (the other writers' keys, `active_*` and `multi_node_*`, kept); an
    /// unreadable or non-object file starts afresh, as `check_gpu_setup.py` does. `at`:
    /// unix seconds; indented by four, as its `json.dump(..., indent=4)`.
    pub fn file(&self, existing: Option<&[u8]>, at: u64) -> Vec<u8> {
        let mut data = existing
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            .and_then(|v| match v {
                serde_json::Value::Object(m) => Some(m),
                _ => None,
            })
            .unwrap_or_default();
        let status = if self.status.is_empty() {
            serde_json::Value::from(OCI_HEALTHY)
        } else {
            serde_json::Value::from(self.status.clone())
        };
        data.insert(
            "passive_healthcheck_recommendation".into(),
            self.recommendation.into(),
        );
        data.insert("passive_healthcheck_time".into(), utc(at, ' ').into());
        data.insert("passive_healthcheck_logs".into(), self.logs.clone().into());
        data.insert("passive_healthcheck_status".into(), status);
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        // A map of strings and lists of strings always serializes.
        let _ = serde::Serialize::serialize(&data, &mut ser);
        out
    }
}

/// The first `max` bytes of `text`, on a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Unix seconds as UTC `YYYY-MM-DD?hh:mm:ss`, `sep` between date and time: `'T'` (with a
/// `Z` added by the caller) for Azure, `' '` for OCI's `"%Y-%m-%d %H:%M:%S"`.
pub fn utc(at: u64, sep: char) -> String {
    let days = at / 86_400;
    let secs = at % 86_400;
    // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}{sep}{:02}:{:02}:{:02}",
        secs / 3_600,
        secs % 3_600 / 60,
        secs % 60
    )
}

/// Why an Azure report could not be made: one line for the log.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AzureError {
    #[error("IMDS token answer has no usable access_token")]
    Token,
    #[error("IMDS compute answer has no usable {0}")]
    Compute(&'static str),
    #[error("{what} answered HTTP {status}")]
    Status { what: &'static str, status: u16 },
    #[error("{0} gave no HTTP status")]
    NoStatus(&'static str),
}

/// The IMDS token request (`triggerGHR.sh`: api-version 2018-02-01, the ARM resource;
/// `object_id` picks a user-assigned identity).
pub fn token_path(object_id: Option<&str>) -> String {
    let mut p = "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fmanagement.azure.com%2F".to_string();
    if let Some(id) = object_id {
        p.push_str("&object_id=");
        p.push_str(id);
    }
    p
}

/// The IMDS request for the VM's subscription and resource ids.
pub const COMPUTE_PATH: &str = "/metadata/instance/compute?api-version=2021-01-01&format=json";

/// The impact's path under ARM.
pub fn impact_path(subscription: &str, uuid: &str) -> String {
    format!(
        "/subscriptions/{subscription}/providers/Microsoft.Impact/workloadImpacts/{uuid}?api-version=2023-02-01-preview"
    )
}

/// Text that may go into a header or URL: printable ASCII without blanks, quotes or
/// backslashes, bounded.
fn plain(text: &str, max: usize) -> bool {
    !text.is_empty()
        && text.len() <= max
        && text
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
}

/// IMDS's token answer: its `access_token` (a JWT: base64url parts and dots).
pub fn parse_token(body: &str) -> Result<String, AzureError> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|_| AzureError::Token)?;
    let token = v
        .get("access_token")
        .and_then(|t| t.as_str())
        .ok_or(AzureError::Token)?;
    let jwt = token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'=' | b'+' | b'/'));
    if jwt && plain(token, 16 * 1024) {
        Ok(token.to_string())
    } else {
        Err(AzureError::Token)
    }
}

/// The VM as IMDS's compute answer names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureVm {
    pub subscription_id: String,
    pub resource_id: String,
}

pub fn parse_compute(body: &str) -> Result<AzureVm, AzureError> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|_| AzureError::Compute("JSON"))?;
    let get = |key: &'static str| {
        v.get(key)
            .and_then(|s| s.as_str())
            .map(str::to_string)
            .ok_or(AzureError::Compute(key))
    };
    let subscription_id = get("subscriptionId")?;
    let resource_id = get("resourceId")?;
    if !(subscription_id.len() <= 64
        && !subscription_id.is_empty()
        && subscription_id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-'))
    {
        return Err(AzureError::Compute("subscriptionId"));
    }
    if !resource_id.starts_with("/subscriptions/") || !plain(&resource_id, 1024) {
        return Err(AzureError::Compute("resourceId"));
    }
    Ok(AzureVm {
        subscription_id,
        resource_id,
    })
}

/// The impact report's body, the fields `triggerGHR.sh` sends (`additionalProperties`
/// left out: its `PhysicalHostName` comes from a Hyper-V KVP tool the suite does not run).
pub fn impact_body(category: &str, description: &str, resource_id: &str, at: u64) -> String {
    let when = format!("{}Z", utc(at, 'T'));
    serde_json::json!({
        "properties": {
            "startDateTime": when,
            "reportedTimeUtc": when,
            "impactCategory": category,
            "impactDescription": description,
            "impactedResourceId": resource_id,
        }
    })
    .to_string()
}

/// A random (version 4) UUID from 16 random bytes: the impact's name.
pub fn uuid_v4(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// One HTTP request for curl, written as a curl config (`curl --config -` reads it from
/// stdin), so the token and the body never reach an argument vector (`/proc/PID/cmdline`
/// is world-readable).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurlRequest {
    pub method: &'static str,
    pub url: String,
    pub headers: Vec<String>,
    pub body: Option<String>,
}

/// The marker curl writes before the HTTP status (`write-out`), on its own line.
pub const STATUS_MARK: &str = "\ngpu-affinity-http-status:";

impl CurlRequest {
    /// The config text: every value quoted with `\` and `"` escaped; control characters
    /// (none in what the suite builds: JSON escapes them) are written escaped too.
    pub fn config(&self) -> String {
        let mut out = String::new();
        let mut line = |key: &str, value: &str| {
            out.push_str(key);
            out.push_str(" = \"");
            for c in value.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c.is_control() => {}
                    c => out.push(c),
                }
            }
            out.push_str("\"\n");
        };
        line("url", &self.url);
        line("request", self.method);
        for h in &self.headers {
            line("header", h);
        }
        if let Some(b) = &self.body {
            line("data-binary", b);
        }
        line("write-out", &format!("{STATUS_MARK}%{{http_code}}\n"));
        out
    }
}

/// curl's stdout split into the answer's body and its HTTP status (`None`: no status line).
pub fn split_status(stdout: &str) -> (&str, Option<u16>) {
    match stdout.rsplit_once(STATUS_MARK) {
        Some((body, status)) => (body, status.trim().parse().ok()),
        None => (stdout, None),
    }
}

/// The drain reasons already reported to the cloud while the node stays drained, so each
/// drain is reported once (kept in the health state; cleared when the node is resumed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reported {
    #[serde(default)]
    pub reasons: Vec<String>,
}

impl Reported {
    /// Reasons kept at most (a node drained for long collects few distinct ones).
    pub const MAX: usize = 16;

    pub fn contains(&self, reason: &str) -> bool {
        self.reasons.iter().any(|r| r == reason)
    }

    /// Remember `reason`; the oldest goes first past [`Reported::MAX`].
    pub fn record(&mut self, reason: &str) {
        if !self.contains(reason) {
            self.reasons
                .push(reason.chars().take(super::drain::MAX_REASON).collect());
        }
        while self.reasons.len() > Self::MAX {
            self.reasons.remove(0);
        }
    }
}

#[cfg(test)]
mod tests;
