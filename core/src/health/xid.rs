//! The XID policy (data: `xid-policy.toml`, embedded, overridable from /etc) and the kernel-log
//! parser that finds XIDs in /dev/kmsg records. Both pure: text in, values out.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::pci::PciAddr;

/// The policy the binaries carry; `/etc/gpu-affinity/xid-policy.toml` replaces it whole.
pub const EMBEDDED_POLICY: &str = include_str!("xid-policy.toml");

/// Where an admin's policy lives.
pub const POLICY_PATH: &str = "/etc/gpu-affinity/xid-policy.toml";

/// What an XID makes the suite do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XidAction {
    Drain,
    Warn,
    Ignore,
}

/// The repair a cloud's machinery is asked for (HyperPod `Action:Reboot` / `Action:Replace`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Repair {
    Reset,
    Reboot,
    Replace,
}

/// A "Resolution Bucket" of NVIDIA's XID catalog, as the catalog spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub enum Resolution {
    RestartApp,
    ResetGpu,
    RestartVm,
    RestartBm,
    ContactSupport,
    Ignore,
    WorkflowXid45,
    WorkflowXid48,
    WorkflowNvlinkErr,
    WorkflowNvlink5Err,
    CheckMechanicals,
    UpdateSwfw,
    Xid154,
    Xid154Eval,
    CheckUvm,
    /// A catalog row that names no bucket.
    None,
}

impl Resolution {
    /// Every bucket with the catalog's name for it: the one table both ways.
    pub const ALL: [(Resolution, &'static str); 16] = [
        (Resolution::RestartApp, "RESTART_APP"),
        (Resolution::ResetGpu, "RESET_GPU"),
        (Resolution::RestartVm, "RESTART_VM"),
        (Resolution::RestartBm, "RESTART_BM"),
        (Resolution::ContactSupport, "CONTACT_SUPPORT"),
        (Resolution::Ignore, "IGNORE"),
        (Resolution::WorkflowXid45, "WORKFLOW_XID_45"),
        (Resolution::WorkflowXid48, "WORKFLOW_XID_48"),
        (Resolution::WorkflowNvlinkErr, "WORKFLOW_NVLINK_ERR"),
        (Resolution::WorkflowNvlink5Err, "WORKFLOW_NVLINK5_ERR"),
        (Resolution::CheckMechanicals, "CHECK_MECHANICALS"),
        (Resolution::UpdateSwfw, "UPDATE_SWFW"),
        (Resolution::Xid154, "XID_154"),
        (Resolution::Xid154Eval, "XID_154_EVAL"),
        (Resolution::CheckUvm, "CHECK_UVM"),
        (Resolution::None, "NONE"),
    ];

    pub fn name(self) -> &'static str {
        Resolution::ALL
            .iter()
            .find(|(r, _)| *r == self)
            .map_or("NONE", |(_, n)| n)
    }
}

impl TryFrom<String> for Resolution {
    type Error = String;
    fn try_from(name: String) -> Result<Resolution, String> {
        Resolution::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(r, _)| *r)
            .ok_or_else(|| format!("unknown catalog bucket `{name}`"))
    }
}

impl std::fmt::Display for Resolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the suite does about one XID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    pub action: XidAction,
    pub repair: Repair,
}

/// One code's rule, resolved: the entry's own action, else its catalog bucket's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XidRule {
    pub code: u32,
    pub action: XidAction,
    pub repair: Repair,
    /// Where the rule comes from (the entry's own `source`, else the file's).
    pub source: String,
    /// The catalog's immediate action for the code.
    pub catalog: Option<Resolution>,
    pub mnemonic: Option<String>,
    /// Why the entry does otherwise than its bucket.
    pub why: Option<String>,
}

/// One row of the catalog's NVLink5 (XIDs 144-150) decode table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nvlink5Row {
    pub xid: u32,
    /// The unit as the catalog names it: `NAME` or `NAME/SUBNAME`, either printed.
    pub unit: String,
    /// The record's ERRORSTATUS word; absent: any.
    pub status: Option<u32>,
    /// The NETIR link-down reason, INTRINFO bits 25:20; absent: any.
    pub link_down: Option<u32>,
    pub catalog: Resolution,
    /// The catalog's "action 2", when INTRINFO carries the decode bit.
    pub escalated: Option<Resolution>,
}

impl Nvlink5Row {
    fn matches(&self, code: u32, nv: &Nvlink5Fault) -> bool {
        self.xid == code
            && self.unit.split('/').any(|u| u == nv.unit)
            && self.status.is_none_or(|s| nv.status == Some(s))
            && self
                .link_down
                .is_none_or(|r| nv.intr.map(|i| (i >> 20) & 0x3f) == Some(r))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XidPolicy {
    rules: BTreeMap<u32, XidRule>,
    buckets: BTreeMap<Resolution, Outcome>,
    recovery: BTreeMap<String, Outcome>,
    nvlink5: Vec<Nvlink5Row>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum XidPolicyError {
    #[error("XID policy line {line}: {message}")]
    At { line: usize, message: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    code: u32,
    mnemonic: Option<String>,
    catalog: Option<Resolution>,
    action: Option<XidAction>,
    repair: Option<Repair>,
    why: Option<String>,
    source: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyDoc {
    source: Option<String>,
    #[serde(default)]
    bucket: BTreeMap<Resolution, Outcome>,
    #[serde(default)]
    recovery: BTreeMap<String, Outcome>,
    #[serde(default)]
    nvlink5: Vec<toml::Spanned<Nvlink5Row>>,
    xid: Vec<toml::Spanned<RawRule>>,
}

/// The policy's answer for one XID record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XidVerdict {
    pub action: XidAction,
    pub repair: Repair,
    /// The catalog bucket the answer follows (decoded, for NVLink5 and Xid 154 records).
    pub resolution: Option<Resolution>,
    /// What the record's text decoded to, for the evidence.
    pub decoded: Option<String>,
}

impl XidPolicy {
    /// Parse a policy file; every entry needs a source and an action (its own or its
    /// catalog bucket's), each code appears once.
    pub fn parse(text: &str) -> Result<XidPolicy, XidPolicyError> {
        let line = |offset: usize| {
            text.get(..offset)
                .map_or(1, |t| t.matches('\n').count() + 1)
        };
        let at = |offset: usize, message: String| XidPolicyError::At {
            line: line(offset),
            message,
        };
        let doc: PolicyDoc = toml::from_str(text).map_err(|e| {
            at(
                e.span().map_or(0, |s| s.start),
                e.message().split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })?;
        let file_source = doc.source.filter(|s| !s.trim().is_empty());
        let mut rules = BTreeMap::new();
        for entry in doc.xid {
            let offset = entry.span().start;
            let raw = entry.into_inner();
            let code = raw.code;
            let bucket = raw.catalog.and_then(|c| doc.bucket.get(&c));
            let (Some(action), Some(repair)) = (
                raw.action.or(bucket.map(|b| b.action)),
                raw.repair
                    .or(bucket.map(|b| b.repair))
                    .or(raw.action.map(|_| Repair::Reset)),
            ) else {
                return Err(at(
                    offset,
                    format!("XID {code} has no action and no catalog bucket with one"),
                ));
            };
            let Some(source) = raw
                .source
                .filter(|s| !s.trim().is_empty())
                .or_else(|| file_source.clone())
            else {
                return Err(at(offset, format!("XID {code} has no source")));
            };
            let rule = XidRule {
                code,
                action,
                repair,
                source,
                catalog: raw.catalog,
                mnemonic: raw.mnemonic,
                why: raw.why,
            };
            if rules.insert(code, rule).is_some() {
                return Err(at(offset, format!("XID {code} is listed twice")));
            }
        }
        let mut nvlink5 = Vec::with_capacity(doc.nvlink5.len());
        for row in doc.nvlink5 {
            let offset = row.span().start;
            let row = row.into_inner();
            for r in [Some(row.catalog), row.escalated].into_iter().flatten() {
                if !doc.bucket.contains_key(&r) {
                    return Err(at(
                        offset,
                        format!("NVLink5 row of XID {}: bucket {r} has no action", row.xid),
                    ));
                }
            }
            nvlink5.push(row);
        }
        Ok(XidPolicy {
            rules,
            buckets: doc.bucket,
            recovery: doc.recovery,
            nvlink5,
        })
    }

    /// The embedded policy. It is checked by a unit test, so a parse failure here is a bug;
    /// an empty policy (every XID a warning) is still a safe fallback.
    pub fn embedded() -> XidPolicy {
        XidPolicy::parse(EMBEDDED_POLICY).unwrap_or_else(|e| {
            log::error!("embedded XID policy: {e}");
            XidPolicy {
                rules: BTreeMap::new(),
                buckets: BTreeMap::new(),
                recovery: BTreeMap::new(),
                nvlink5: Vec::new(),
            }
        })
    }

    /// The rule for `code`; unknown codes warn.
    pub fn action(&self, code: u32) -> (XidAction, Repair) {
        self.rules
            .get(&code)
            .map_or((XidAction::Warn, Repair::Reset), |r| (r.action, r.repair))
    }

    pub fn rule(&self, code: u32) -> Option<&XidRule> {
        self.rules.get(&code)
    }

    /// Every rule, by code.
    pub fn rules(&self) -> impl Iterator<Item = &XidRule> {
        self.rules.values()
    }

    pub fn nvlink5_rows(&self) -> &[Nvlink5Row] {
        &self.nvlink5
    }

    /// What a bucket makes the suite do.
    pub fn bucket(&self, resolution: Resolution) -> Option<Outcome> {
        self.buckets.get(&resolution).copied()
    }

    /// The answer for one record: its code's rule, refined by what the record's text
    /// decodes to (the NVLink5 unit and status of 144-150, Xid 154's recovery action).
    pub fn verdict(&self, event: &XidEvent) -> XidVerdict {
        let (action, repair) = self.action(event.code);
        let base = XidVerdict {
            action,
            repair,
            resolution: self.rule(event.code).and_then(|r| r.catalog),
            decoded: None,
        };
        match &event.detail {
            Some(XidDetail::Nvlink5(nv)) => self.nvlink5_verdict(event.code, nv).unwrap_or(base),
            Some(XidDetail::Recovery(to)) => match self.recovery.get(to) {
                Some(o) => XidVerdict {
                    action: o.action,
                    repair: o.repair,
                    decoded: Some(format!("recovery action {to}")),
                    ..base
                },
                None => base,
            },
            None => base,
        }
    }

    fn nvlink5_verdict(&self, code: u32, nv: &Nvlink5Fault) -> Option<XidVerdict> {
        let status = nv
            .status
            .map_or(String::new(), |s| format!(" status 0x{s:08x}"));
        let Some(row) = self.nvlink5.iter().find(|r| r.matches(code, nv)) else {
            // No decode row: the driver's own severity word decides.
            let resolution = if nv.fatal {
                Resolution::ResetGpu
            } else {
                self.rule(code)?.catalog?
            };
            let o = self.bucket(resolution)?;
            return Some(XidVerdict {
                action: o.action,
                repair: o.repair,
                resolution: Some(resolution),
                decoded: Some(format!(
                    "{}{status} {} (no decode row)",
                    nv.unit,
                    if nv.fatal { "Fatal" } else { "Nonfatal" }
                )),
            });
        };
        let escalate = nv.intr.is_some_and(|i| i & (1 << nv.decode_bit(code)) != 0);
        let resolution = match row.escalated {
            Some(e) if escalate => e,
            _ => row.catalog,
        };
        let o = self.bucket(resolution)?;
        let reason = row
            .link_down
            .map_or(String::new(), |r| format!(" link-down reason {r}"));
        Some(XidVerdict {
            action: o.action,
            repair: o.repair,
            resolution: Some(resolution),
            decoded: Some(format!("{}{status}{reason}", nv.unit)),
        })
    }
}

/// What an XID record's text says beyond its code, where the catalog decodes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XidDetail {
    /// XIDs 144-150: `UNIT SEVERITY XCn in Link NN (INTRINFO ERRORSTATUS ...)`.
    Nvlink5(Nvlink5Fault),
    /// Xid 154: the recovery action the driver changed to (`... to 0x2 (Node Reboot Required)`).
    Recovery(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nvlink5Fault {
    pub unit: String,
    /// The driver's severity word: `Fatal` (true) or `Nonfatal`.
    pub fatal: bool,
    pub intr: Option<u32>,
    pub status: Option<u32>,
}

impl Nvlink5Fault {
    /// The catalog's "action 2" bit of INTRINFO: bit 10 in the pre-R575 form, whose bits
    /// 4:0 number the unit from Xid 144 on (SAW 1 ... NETIR 6, MSE 0), bit 7 from R575 on.
    fn decode_bit(&self, code: u32) -> u32 {
        let v1_index = code.saturating_sub(143) % 7;
        match self.intr {
            Some(i) if i & 0x1f == v1_index => 10,
            _ => 7,
        }
    }
}

/// Longest unit name kept from a record (the catalog's are at most 20 characters).
const MAX_UNIT: usize = 32;

/// The detail of record text after `N, ` for the codes the catalog decodes. The last
/// severity word counts (a `name=` field, a process's name, comes before the driver's own
/// part and cannot move it), and the hex words after it.
fn parse_detail(code: u32, rest: &str) -> Option<XidDetail> {
    match code {
        144..=150 => {
            let tokens: Vec<&str> = rest
                .split(|c: char| c.is_whitespace() || matches!(c, ',' | '(' | ')' | '[' | ']'))
                .filter(|t| !t.is_empty())
                .collect();
            let severity = |t: &str| match t.to_ascii_lowercase().as_str() {
                "fatal" => Some(true),
                "nonfatal" | "non-fatal" => Some(false),
                _ => None,
            };
            let at = tokens.iter().rposition(|t| severity(t).is_some())?;
            let unit = *tokens.get(at.checked_sub(1)?)?;
            let name_like = |t: &str| {
                !t.is_empty()
                    && t.len() <= MAX_UNIT
                    && t.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            };
            if !name_like(unit) {
                return None;
            }
            let mut hex = tokens.get(at + 1..)?.iter().filter_map(|t| {
                let digits = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
                u32::from_str_radix(digits, 16).ok()
            });
            Some(XidDetail::Nvlink5(Nvlink5Fault {
                unit: unit.to_string(),
                fatal: severity(tokens.get(at)?)?,
                intr: hex.next(),
                status: hex.next(),
            }))
        }
        154 => {
            let after = rest.get(rest.rfind(" to ")? + 4..)?;
            let (_, named) = after.split_once('(')?;
            let (to, _) = named.split_once(')')?;
            (!to.is_empty() && to.len() <= MAX_UNIT).then(|| XidDetail::Recovery(to.to_string()))
        }
        _ => None,
    }
}

/// One XID the driver logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XidEvent {
    /// The kmsg sequence number (orders events; lets the epilog see what is new).
    pub seq: u64,
    /// The GPU the record names (`PCI:0000:53:00` is bus:device; function 0). Always
    /// known: a record that names no GPU is not the driver's XID record, so an XID never
    /// counts for every GPU.
    pub gpu: PciAddr,
    pub code: u32,
    /// What the record's text decodes to, for the codes the catalog decodes.
    pub detail: Option<XidDetail>,
}

/// The line the nvidia module prints when it loads (`NVRM: loading NVIDIA UNIX x86_64 Kernel
/// Module  550.54.15 ...`, the open module `NVRM: loading NVIDIA UNIX Open Kernel Module for
/// x86_64 ...`): a driver (re)load initializes every GPU, so XIDs logged before it are history.
const DRIVER_LOAD: &str = "NVRM: loading NVIDIA UNIX";

/// The start of the driver's XID record: `NVRM: Xid (PCI:dddd:bb:dd): N, ...`.
const XID_START: &str = "NVRM: Xid (PCI:";

/// XIDs kept from one read of the log: the newest ones (a driver logs a few per fault).
pub const MAX_XIDS: usize = 4096;

/// One kernel-log record as the parser sees it.
struct Record<'a> {
    /// The syslog facility of a /dev/kmsg record (`PRI >> 3`); `None` for a plain dmesg line
    /// (a fixture copied from `dmesg`), whose writer the file's owner vouches for.
    facility: Option<u32>,
    /// The kmsg sequence number (0 for a plain dmesg line).
    seq: u64,
    message: &'a str,
}

/// One line of /dev/kmsg (`PRI,SEQ,USEC,FLAGS[,caller=..];MESSAGE`; continuation lines,
/// the record's `SUBSYSTEM=`/`DEVICE=` dictionary, start with a space) or of plain dmesg
/// text (`[    5.12] MESSAGE`, the stamp dropped).
fn record(line: &str) -> Option<Record<'_>> {
    if line.starts_with(' ') {
        return None;
    }
    if let Some((header, message)) = line.split_once(';') {
        let mut fields = header.split(',');
        let pri = fields.next().and_then(|p| p.parse::<u32>().ok());
        let seq = fields.next().and_then(|s| s.parse::<u64>().ok());
        let usec = fields.next().is_some_and(|u| u.parse::<u64>().is_ok());
        if let (Some(pri), Some(seq), true) = (pri, seq, usec) {
            return Some(Record {
                facility: Some(pri >> 3),
                seq,
                message,
            });
        }
    }
    let message = line
        .strip_prefix('[')
        .and_then(|stamped| stamped.split_once(']'))
        .map_or(line, |(_, m)| m.trim_start());
    Some(Record {
        facility: None,
        seq: 0,
        message,
    })
}

impl Record<'_> {
    /// Written by the kernel itself: facility 0 (`LOG_KERN`). A process writing to
    /// /dev/kmsg gets facility 1 (`LOG_USER`) or the one its `<N>` prefix asks for, never
    /// 0 (devkmsg_write keeps LOG_USER when the prefix's facility is 0), so a user-space
    /// write can never pass for the driver's record.
    fn is_kernel(&self) -> bool {
        self.facility.is_none_or(|f| f == 0)
    }
}

/// What one read of the kernel log found: the XIDs that count (since the last driver
/// load, at most the newest [`MAX_XIDS`]), where the log stood, and what the health
/// check reports as warnings: records that quote an XID but are not the driver's, and
/// records the reader could not read (a flood overwrote them while it read).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelLog {
    pub xids: Vec<XidEvent>,
    /// The highest record sequence number read (the prolog's mark for the epilog).
    pub last_seq: Option<u64>,
    pub notes: KmsgNotes,
}

/// What the kernel log check warns about besides XIDs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KmsgNotes {
    /// Records that quote `Xid` but are not the driver's XID record: a process name in a
    /// segfault, OOM-killer or trap line, or a user-space write to /dev/kmsg. Never counted.
    pub lookalikes: u64,
    /// The first such record's sequence number, for the warning.
    pub first_lookalike: Option<u64>,
    /// Records lost to the reader (overwritten in the kernel's buffer while it read, or
    /// skipped at the start of a fixture past the read cap).
    pub lost: u64,
}

impl KernelLog {
    /// Scan all of `text`.
    pub fn of(text: &str) -> KernelLog {
        let mut log = KernelLog::default();
        for line in text.lines() {
            log.scan(line);
        }
        log.finish();
        log
    }

    /// Take one line into account (the reader streams the log, so memory stays bounded
    /// by [`MAX_XIDS`] whatever the log's size). Call [`KernelLog::finish`] at the end.
    pub fn scan(&mut self, line: &str) {
        let Some(rec) = record(line) else { return };
        self.last_seq = Some(self.last_seq.map_or(rec.seq, |s| s.max(rec.seq)));
        let kernel = rec.is_kernel();
        if kernel && rec.message.starts_with(DRIVER_LOAD) {
            self.xids.clear();
        } else if let Some((gpu, code, rest)) = kernel.then(|| driver_xid(rec.message)).flatten() {
            self.xids.push(XidEvent {
                seq: rec.seq,
                gpu,
                code,
                detail: parse_detail(code, rest),
            });
            if self.xids.len() >= 2 * MAX_XIDS {
                self.xids.drain(..MAX_XIDS);
            }
        } else if rec.message.contains("Xid") {
            self.notes.lookalikes += 1;
            self.notes.first_lookalike.get_or_insert(rec.seq);
        }
    }

    /// Keep the newest [`MAX_XIDS`] events.
    pub fn finish(&mut self) {
        let extra = self.xids.len().saturating_sub(MAX_XIDS);
        self.xids.drain(..extra);
    }
}

/// XIDs in /dev/kmsg records since the last driver load ([`DRIVER_LOAD`]; else since
/// boot, the start of the buffer): only the driver's own record counts (see
/// [`driver_xid`]). Plain dmesg-style lines without the header are accepted too (seq 0),
/// so a fixture can be a copied kernel log.
pub fn parse_kmsg(text: &str) -> Vec<XidEvent> {
    KernelLog::of(text).xids
}

/// The highest record sequence number in the text: where the log stood when it was read
/// (the prolog keeps it so the epilog counts only what the job's time added).
pub fn last_seq(text: &str) -> Option<u64> {
    KernelLog::of(text).last_seq
}

/// The driver's own XID record, and nothing else: the message starts with
/// `NVRM: Xid (PCI:dddd:bb:dd): N` followed by `,` or the end (nv_printf's form since the
/// 3xx drivers). A line the kernel prints about a task starts with the task's name
/// (`NAME[PID]: segfault at ...`, `NAME (PID): drop_caches`); that name is at most 15
/// bytes (TASK_COMM_LEN), shorter than the 30 bytes of `NVRM: Xid (PCI:0000:00:00): 0`,
/// so it cannot hold the whole form; `Killed process N (NAME)` and `traps: NAME[PID] ...`
/// start otherwise. The record's `name=` field, the process that had the GPU, comes
/// after the code and cannot change it.
fn driver_xid(message: &str) -> Option<(PciAddr, u32, &str)> {
    let rest = message.strip_prefix(XID_START)?;
    let (bus, rest) = rest.split_once("): ")?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let mut parts = bus.split(':');
    let (domain, b, dev) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !hex(domain, 4) || !hex(b, 2) || !hex(dev, 2) {
        return None;
    }
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || !matches!(rest.as_bytes().get(digits), None | Some(b',')) {
        return None;
    }
    let code = rest.get(..digits)?.parse().ok()?;
    let gpu = format!("{}.0", bus.to_ascii_lowercase()).parse().ok()?;
    Some((gpu, code, rest.get(digits..).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html),
    /// its "Resolution Bucket (Immediate Action)" column, written here apart from the
    /// policy file: every code 1-172 and only those.
    const CATALOG: &[(&str, &[u32])] = &[
        ("CHECK_MECHANICALS", &[54]),
        ("CHECK_UVM", &[159]),
        (
            "CONTACT_SUPPORT",
            &[
                1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 26, 27, 28,
                29, 30, 33, 34, 35, 36, 42, 47, 49, 50, 51, 52, 53, 55, 56, 57, 58, 59, 61, 65, 73,
                81, 87, 90, 91, 111, 112, 113, 114, 115, 116, 117, 118, 122, 123, 124, 125, 138,
                142,
            ],
        ),
        (
            "IGNORE",
            &[
                14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 108, 121, 137, 141, 152, 153,
                157, 160, 161,
            ],
        ),
        (
            "NONE",
            &[162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172],
        ),
        (
            "RESET_GPU",
            &[
                46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158,
            ],
        ),
        (
            "RESTART_APP",
            &[
                8, 11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70, 71, 72, 75, 76, 77, 80, 82, 83,
                84, 85, 86, 88, 89, 94, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 126, 127,
                128, 129, 130, 131, 132, 133, 134, 135, 139,
            ],
        ),
        ("RESTART_BM", &[79]),
        ("RESTART_VM", &[151]),
        ("UPDATE_SWFW", &[78]),
        ("WORKFLOW_NVLINK5_ERR", &[144, 145, 146, 147, 148, 149, 150]),
        ("WORKFLOW_NVLINK_ERR", &[74]),
        ("WORKFLOW_XID_45", &[45]),
        ("WORKFLOW_XID_48", &[48]),
        ("XID_154", &[154]),
    ];

    /// The whole table against the catalog: every code's bucket, each rule doing what its
    /// bucket does or saying why not, the buckets' actions as the catalog's words mean them.
    #[test]
    fn embedded_policy_is_the_whole_catalog() {
        let p = XidPolicy::parse(EMBEDDED_POLICY).expect("embedded policy");
        let mut seen = 0;
        for (bucket, codes) in CATALOG {
            for &code in *codes {
                let rule = p.rule(code).unwrap_or_else(|| panic!("XID {code} missing"));
                assert_eq!(
                    rule.catalog.map(Resolution::name),
                    Some(*bucket),
                    "XID {code}"
                );
                assert!(
                    rule.mnemonic.is_some() && !rule.source.is_empty(),
                    "XID {code}"
                );
                let b = rule.catalog.and_then(|c| p.bucket(c)).expect("bucket");
                if (rule.action, rule.repair) != (b.action, b.repair) {
                    assert!(
                        rule.why.is_some(),
                        "XID {code} leaves its bucket without a why"
                    );
                }
                seen += 1;
            }
        }
        assert_eq!(seen, 172);
        assert_eq!(p.rules().count(), 172, "a code the catalog does not list");
        // The buckets as the catalog defines them: a reset or a restart of the machine
        // drains; the application's own faults and IGNORE do not.
        let drains = |name: &str| {
            let r = Resolution::try_from(name.to_string()).expect("bucket name");
            p.bucket(r).map(|o| o.action)
        };
        for b in ["RESET_GPU", "RESTART_BM", "RESTART_VM", "WORKFLOW_XID_48"] {
            assert_eq!(drains(b), Some(XidAction::Drain), "{b}");
        }
        for b in ["RESTART_APP", "IGNORE", "WORKFLOW_XID_45", "XID_154_EVAL"] {
            assert_eq!(drains(b), Some(XidAction::Ignore), "{b}");
        }
        assert_eq!(p.action(79), (XidAction::Drain, Repair::Reboot));
        assert_eq!(p.action(151), (XidAction::Drain, Repair::Reboot));
        for code in [109, 136, 140, 143, 155, 156, 158, 95, 62, 64, 48, 74] {
            assert_eq!(
                p.action(code),
                (XidAction::Drain, Repair::Reset),
                "XID {code}"
            );
        }
        assert_eq!(p.action(61).0, XidAction::Warn);
        for code in [13, 31, 43, 45, 63, 68] {
            assert_eq!(p.action(code).0, XidAction::Ignore, "XID {code}");
        }
        assert_eq!(p.action(94).0, XidAction::Warn);
        assert_eq!(p.action(92).0, XidAction::Warn);
        assert_eq!(p.action(9999).0, XidAction::Warn);
    }

    fn verdict_of(line: &str) -> XidVerdict {
        let log = KernelLog::of(line);
        let event = log.xids.first().expect("one XID");
        XidPolicy::embedded().verdict(event)
    }

    /// NVLink5 records in the driver's form, decoded as the catalog's 144-150 table says.
    #[test]
    fn nvlink5_records_decode_by_unit_and_status() {
        let cases = [
            // NETIR link down, reason 37 (peer device): RESET_GPU.
            (
                "4,1,1,-;NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
                XidAction::Drain,
                "RESET_GPU",
            ),
            // Reason 38 (software / user initiated): IGNORE.
            (
                "4,1,1,-;NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
                XidAction::Ignore,
                "IGNORE",
            ),
            // A BER event: IGNORE.
            (
                "4,1,1,-;NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00000266 0x00000001 0x0 0x0 0x0 0x0)",
                XidAction::Ignore,
                "IGNORE",
            ),
            // RLW source tracking, status 0x1 (pid and name fields first): RESET_GPU.
            (
                "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 145, pid=4, name=<unknown>, RLW_SRC_TRACK Fatal XC0 i1 Link 00 (0x00000001 0x00000001)",
                XidAction::Drain,
                "RESET_GPU",
            ),
            // RLW remap status 0x4: follow an Xid 154 if there is one, else restart the app.
            (
                "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 145, RLW_REMAP Nonfatal XC1 i0 Link 02 (0x00000082 0x00000004)",
                XidAction::Ignore,
                "XID_154_EVAL",
            ),
            // TLW_RX (either pipe) status 0x4: RESET_GPU.
            (
                "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 146, TLW_RX Fatal XC0 i0 Link 05 (0x00000a03 0x00000004)",
                XidAction::Drain,
                "RESET_GPU",
            ),
            // RLW_RXPIPE status 0x1: IGNORE, but with the decode bit (bit 10, pre-R575) RESET_GPU.
            (
                "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 01 (0x000000c2 0x00000001)",
                XidAction::Ignore,
                "IGNORE",
            ),
            (
                "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 01 (0x000004c2 0x00000001)",
                XidAction::Drain,
                "RESET_GPU",
            ),
            // From R575: subcode 6 in bits 6:0, the decode bit is bit 7.
            (
                "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 01 (0x00000086 0x00000001)",
                XidAction::Drain,
                "RESET_GPU",
            ),
            // MSE: RESET_GPU whatever the status.
            (
                "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 150, MSE_WATCHDOG Fatal XC0 i0 Link 00 (0x00000000 0x00000000)",
                XidAction::Drain,
                "RESET_GPU",
            ),
            // No decode row: the severity word decides.
            (
                "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 147, TREX Fatal XC0 i0 Link 00 (0x0000018c 0x00000040)",
                XidAction::Drain,
                "RESET_GPU",
            ),
            (
                "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 148, NVLPW Nonfatal XC0 i0 Link 00 (0x000000a5 0x00000001)",
                XidAction::Warn,
                "WORKFLOW_NVLINK5_ERR",
            ),
        ];
        for (line, action, resolution) in cases {
            let v = verdict_of(line);
            assert_eq!(v.action, action, "{line}: {v:?}");
            assert_eq!(
                v.resolution.map(Resolution::name),
                Some(resolution),
                "{line}"
            );
            assert!(v.decoded.is_some(), "{line}");
        }
        // A process name cannot stand in for the driver's unit and severity: the last
        // severity word counts.
        let v = verdict_of(
            "4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 145, pid=4, name=TREX Nonfatal, RLW_SRC_TRACK Fatal XC0 i1 Link 00 (0x00000001 0x00000001)",
        );
        assert_eq!(v.action, XidAction::Drain, "{v:?}");
        // An NVLink5 record without the decodable part keeps its code's rule.
        let v = verdict_of("4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 149");
        assert_eq!((v.action, v.decoded), (XidAction::Warn, None));
    }

    #[test]
    fn xid_154_takes_the_recovery_action_it_names() {
        let line = |to: &str| {
            format!(
                "4,1,1,-;NVRM: Xid (PCI:0000:53:00): 154, GPU recovery action changed from 0x0 (None) to {to}"
            )
        };
        let v = verdict_of(&line("0x2 (Node Reboot Required)"));
        assert_eq!(
            (v.action, v.repair),
            (XidAction::Drain, Repair::Reboot),
            "{v:?}"
        );
        let v = verdict_of(&line("0x1 (GPU Reset Required)"));
        assert_eq!((v.action, v.repair), (XidAction::Drain, Repair::Reset));
        assert_eq!(verdict_of(&line("0x0 (None)")).action, XidAction::Ignore);
        assert_eq!(
            verdict_of(&line("0x9 (Something New)")).action,
            XidAction::Warn
        );
    }

    #[test]
    fn policy_errors_name_the_line() {
        let e = XidPolicy::parse(
            "[[xid]]\ncode = 1\naction = \"explode\"\nrepair = \"reset\"\nsource = \"x\"\n",
        )
        .expect_err("bad action");
        assert!(matches!(e, XidPolicyError::At { line: 3, .. }), "{e}");
        let twice = "[[xid]]\ncode = 1\naction = \"warn\"\nrepair = \"reset\"\nsource = \"a\"\n";
        let e = XidPolicy::parse(&format!("{twice}{twice}")).expect_err("twice");
        assert!(e.to_string().contains("listed twice"), "{e}");
        let e = XidPolicy::parse(
            "[[xid]]\ncode = 1\naction = \"warn\"\nrepair = \"reset\"\nsource = \" \"\n",
        )
        .expect_err("no source");
        assert!(e.to_string().contains("no source"), "{e}");
    }

    #[test]
    fn kmsg_records_and_plain_lines() {
        let text = "6,1201,5000000,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n \
                    SUBSYSTEM=pci\n\
                    4,1202,5000001,-,caller=C3;nvidia 0000:53:00.0: something else\n\
                    [  12.3] NVRM: Xid (PCI:0000:9B:00): 48, pid='<unknown>', DBE\n\
                    3,1203,5000002,-;NVRM: Xid (PCI:0000:1a:00): 95\n\
                    garbage;;;\n";
        let events = parse_kmsg(text);
        assert_eq!(events.len(), 3, "{events:?}");
        assert_eq!((events[0].seq, events[0].code), (1201, 79));
        assert_eq!(events[0].gpu.to_string(), "0000:53:00.0");
        assert_eq!((events[1].seq, events[1].code), (0, 48));
        assert_eq!(events[1].gpu.to_string(), "0000:9b:00.0");
        assert_eq!(events[2].gpu.to_string(), "0000:1a:00.0");
        assert_eq!(last_seq(text), Some(1203));
        assert_eq!(last_seq(""), None);
    }

    /// Every shape a job user can put into the kernel log around an XID: a process name
    /// (prctl PR_SET_NAME, 15 bytes) in the kernel's segfault, OOM-killer and trap lines,
    /// a user-space write to /dev/kmsg (facility 1 or another non-zero one), and loose
    /// forms the driver never prints. None is an XID; each is counted as a look-alike.
    #[test]
    fn process_names_and_user_writes_are_never_xids() {
        let forged = [
            "6,10,1,-;NVRM: Xid:79[12483]: segfault at 0 ip 0000000000401136 sp 00007ffd error 6 in a.out[401000+1000]",
            "6,11,1,-;NVRM: Xid (PC[12483]: segfault at 0 ip 0000000000401136 sp 00007ffd error 6",
            "3,12,1,-;Out of memory: Killed process 12483 (NVRM: Xid:79) total-vm:1024kB",
            "3,13,1,-;Killed process 12483 (NVRM: Xid (PCI) total-vm:1024kB",
            "6,14,1,-;traps: NVRM: Xid:79[12483] trap divide error ip:401136 sp:7ffd error:0 in a.out",
            "6,15,1,-;NVRM: Xid:79 (12483): drop_caches: 1",
            // User space writing the driver's exact text to /dev/kmsg: facility 1 (LOG_USER),
            // or the facility its <N> prefix asked for (here 3, daemon).
            "12,16,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x, GPU has fallen off the bus.",
            "27,17,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1",
            // Loose forms: no PCI:, no GPU, a short bus id, no code, a code glued to text,
            // the XID not at the start of the message.
            "6,18,1,-;NVRM: Xid (0000:53:00.0): 79, pid=1",
            "6,19,1,-;NVRM: Xid: 79, pid=1",
            "6,20,1,-;NVRM: Xid (PCI:0:53:00): 79, pid=1",
            "6,21,1,-;NVRM: Xid (PCI:0000:53:00): , pid=1",
            "6,22,1,-;NVRM: Xid (PCI:0000:53:00): 79abc",
            "6,23,1,-;evil[1]: NVRM: Xid (PCI:0000:53:00): 79, pid=1",
            "6,24,1,-;NVRM: Xid (PCI:0000:53:00:00): 79, pid=1",
        ];
        let text = forged.join("\n");
        let log = KernelLog::of(&text);
        assert!(log.xids.is_empty(), "{:?}", log.xids);
        assert_eq!(log.notes.lookalikes, forged.len() as u64);
        assert_eq!(
            (log.notes.first_lookalike, log.last_seq),
            (Some(10), Some(24))
        );
        // The real record with a hostile process name in its name= field still counts.
        let real = "4,30,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=9, name=evil[1]: x, GPU has fallen off the bus.";
        let log = KernelLog::of(&format!("{text}\n{real}"));
        assert_eq!(log.xids.len(), 1, "{:?}", log.xids);
        assert_eq!((log.xids[0].seq, log.xids[0].code), (30, 79));
    }

    /// A flood of records cannot push a real XID out: the scan streams, keeps only XIDs
    /// (the newest MAX_XIDS), and an XID early in a long log still counts.
    #[test]
    fn a_flood_keeps_the_real_xid_and_the_newest() {
        let mut log = KernelLog::default();
        log.scan("4,1,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x");
        for seq in 2..200_000u64 {
            log.scan(&format!(
                "6,{seq},1,-;NVRM: Xid:79[{seq}]: segfault at 0 ip 0 sp 0 error 6"
            ));
        }
        for seq in 0..(3 * MAX_XIDS as u64) {
            log.scan(&format!(
                "4,{},1,-;NVRM: Xid (PCI:0000:9b:00): 13, pid=1",
                300_000 + seq
            ));
        }
        log.finish();
        assert_eq!(log.xids.len(), MAX_XIDS);
        assert_eq!(
            log.xids.last().map(|x| x.seq),
            Some(300_000 + 3 * MAX_XIDS as u64 - 1)
        );
        assert_eq!(log.notes.lookalikes, 199_998);
        let mut log = KernelLog::default();
        log.scan("4,1,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x");
        for seq in 2..200_000u64 {
            log.scan(&format!("6,{seq},1,-;flood {seq}"));
        }
        log.finish();
        assert_eq!(log.xids.len(), 1);
        assert_eq!(log.last_seq, Some(199_999));
    }

    #[test]
    fn a_user_write_of_the_driver_load_keeps_older_xids() {
        let text = "4,10,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x\n\
                    12,20,2,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n";
        assert_eq!(parse_kmsg(text).len(), 1);
    }

    #[test]
    fn a_driver_load_ends_older_xids() {
        let xid = |seq: u32, code: u32| {
            format!("4,{seq},1,-;NVRM: Xid (PCI:0000:53:00): {code}, pid=1, name=x\n")
        };
        let load = "6,20,2,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n";
        let open = "6,40,3,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.86.15\n";
        let text = format!("{}{load}{}", xid(10, 79), xid(30, 48));
        let events = parse_kmsg(&text);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!((events[0].seq, events[0].code), (30, 48));
        assert!(parse_kmsg(&format!("{text}{open}")).is_empty());
        // A copied dmesg line keeps its stamp and still counts as the load.
        let dmesg = "[    5.120000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n";
        assert!(parse_kmsg(&format!("{}{dmesg}", xid(10, 79))).is_empty());
    }

    #[test]
    fn a_line_quoting_the_driver_load_keeps_older_xids() {
        let text = "4,10,1,-;NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x\n\
                    12,20,2,-;evil[42]: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n\
                    12,30,3,-;[1.0] evil: NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n";
        let events = parse_kmsg(text);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!((events[0].seq, events[0].code), (10, 79));
    }
}
