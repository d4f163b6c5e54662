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

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidRule {
    pub code: u32,
    pub action: XidAction,
    pub repair: Repair,
    /// Where the action comes from (the tools disagree; the file says which one it follows).
    pub source: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XidPolicy {
    rules: BTreeMap<u32, XidRule>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum XidPolicyError {
    #[error("XID policy line {line}: {message}")]
    At { line: usize, message: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyDoc {
    xid: Vec<toml::Spanned<XidRule>>,
}

impl XidPolicy {
    /// Parse a policy file; every entry needs a source and each code appears once.
    pub fn parse(text: &str) -> Result<XidPolicy, XidPolicyError> {
        let line = |offset: usize| {
            text.get(..offset)
                .map_or(1, |t| t.matches('\n').count() + 1)
        };
        let doc: PolicyDoc = toml::from_str(text).map_err(|e| XidPolicyError::At {
            line: line(e.span().map_or(0, |s| s.start)),
            message: e.message().split_whitespace().collect::<Vec<_>>().join(" "),
        })?;
        let mut rules = BTreeMap::new();
        for entry in doc.xid {
            let at = line(entry.span().start);
            let rule = entry.into_inner();
            if rule.source.trim().is_empty() {
                return Err(XidPolicyError::At {
                    line: at,
                    message: format!("XID {} has no source", rule.code),
                });
            }
            if rules.insert(rule.code, rule.clone()).is_some() {
                return Err(XidPolicyError::At {
                    line: at,
                    message: format!("XID {} is listed twice", rule.code),
                });
            }
        }
        Ok(XidPolicy { rules })
    }

    /// The embedded policy. It is checked by a unit test, so a parse failure here is a bug;
    /// an empty policy (every XID a warning) is still a safe fallback.
    pub fn embedded() -> XidPolicy {
        XidPolicy::parse(EMBEDDED_POLICY).unwrap_or_else(|e| {
            log::error!("embedded XID policy: {e}");
            XidPolicy {
                rules: BTreeMap::new(),
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
        } else if let Some((gpu, code)) = kernel.then(|| driver_xid(rec.message)).flatten() {
            self.xids.push(XidEvent {
                seq: rec.seq,
                gpu,
                code,
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
fn driver_xid(message: &str) -> Option<(PciAddr, u32)> {
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
    Some((gpu, code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_policy_parses_and_cites_every_entry() {
        let p = XidPolicy::parse(EMBEDDED_POLICY).expect("embedded policy");
        assert_eq!(p.action(79), (XidAction::Drain, Repair::Reboot));
        assert_eq!(p.action(48).0, XidAction::Drain);
        assert_eq!(p.action(94).0, XidAction::Warn);
        assert_eq!(p.action(95).0, XidAction::Drain);
        assert_eq!(p.action(63).0, XidAction::Warn);
        assert_eq!(p.action(13).0, XidAction::Ignore);
        assert_eq!(p.action(9999).0, XidAction::Warn);
        assert!(p.rule(63).is_some_and(|r| r.source.contains("followed")));
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
