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
    /// The GPU, when the message names it (`PCI:0000:53:00` is bus:device; function 0).
    pub gpu: Option<PciAddr>,
    pub code: u32,
}

/// The line the nvidia module prints when it loads (`NVRM: loading NVIDIA UNIX x86_64 Kernel
/// Module  550.54.15 ...`, the open module `NVRM: loading NVIDIA UNIX Open Kernel Module for
/// x86_64 ...`): a driver (re)load initializes every GPU, so XIDs logged before it are history.
const DRIVER_LOAD: &str = "NVRM: loading NVIDIA UNIX";

/// One kmsg record: its sequence number (0 for a plain dmesg line) and message.
fn records(text: &str) -> impl Iterator<Item = (u64, &str)> {
    text.lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|line| match line.split_once(';') {
            Some((header, message)) if header.split(',').count() >= 3 => {
                Some((header.split(',').nth(1)?.trim().parse().ok()?, message))
            }
            _ => Some((0, line)),
        })
}

/// XIDs in /dev/kmsg records (`PRI,SEQ,USEC,FLAGS;MESSAGE`, continuation lines start with a
/// space) since the last driver load ([`DRIVER_LOAD`]; else since boot, the start of the
/// buffer). Plain dmesg-style lines without the header are accepted too (seq 0), so a
/// fixture can be a copied kernel log.
pub fn parse_kmsg(text: &str) -> Vec<XidEvent> {
    let mut events = Vec::new();
    for (seq, message) in records(text) {
        if is_driver_load(seq, message) {
            events.clear();
        } else if let Some((gpu, code)) = parse_xid_message(message) {
            events.push(XidEvent { seq, gpu, code });
        }
    }
    events
}

/// The driver's own load line: the message starts with it (a plain dmesg line (seq 0) after
/// its `[    5.1]` stamp), so a process logging a line that quotes it cannot clear XIDs.
fn is_driver_load(seq: u64, message: &str) -> bool {
    let message = match message.strip_prefix('[') {
        Some(stamped) if seq == 0 => stamped
            .split_once(']')
            .map_or(message, |(_, m)| m.trim_start()),
        _ => message,
    };
    message.starts_with(DRIVER_LOAD)
}

/// The highest record sequence number in the text: where the log stood when it was read
/// (the prolog keeps it so the epilog counts only what the job's time added).
pub fn last_seq(text: &str) -> Option<u64> {
    records(text).map(|(seq, _)| seq).max()
}

/// `NVRM: Xid (PCI:0000:53:00): 79, pid=..., GPU has fallen off the bus.`
fn parse_xid_message(message: &str) -> Option<(Option<PciAddr>, u32)> {
    let rest = &message[message.find("NVRM: Xid")? + "NVRM: Xid".len()..];
    let rest = rest.trim_start();
    let (gpu, rest) = match rest.strip_prefix('(') {
        Some(inner) => {
            let (inside, after) = inner.split_once(')')?;
            (xid_gpu(inside), after)
        }
        None => (None, rest),
    };
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((gpu, digits.parse().ok()?))
}

/// `PCI:0000:53:00` (or a full address) -> the GPU's function 0.
fn xid_gpu(inside: &str) -> Option<PciAddr> {
    let addr = inside.trim().strip_prefix("PCI:").unwrap_or(inside.trim());
    let full = if addr.contains('.') {
        addr.to_string()
    } else {
        format!("{addr}.0")
    };
    full.parse().ok()
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
                    4,1202,5000001,-;nvidia 0000:53:00.0: something else\n\
                    [  12.3] NVRM: Xid (PCI:0000:9b:00): 48, pid='<unknown>', DBE\n\
                    6,7,1,-;NVRM: Xid (0000:1a:00.0): 95, uncontained\n\
                    garbage;;;\n";
        let events = parse_kmsg(text);
        assert_eq!(events.len(), 3, "{events:?}");
        assert_eq!(events[0].seq, 1201);
        assert_eq!(events[0].code, 79);
        assert_eq!(
            events[0].gpu.map(|g| g.to_string()).as_deref(),
            Some("0000:53:00.0")
        );
        assert_eq!(events[1].code, 48);
        assert_eq!(events[1].seq, 0);
        assert_eq!(
            events[2].gpu.map(|g| g.to_string()).as_deref(),
            Some("0000:1a:00.0")
        );
        assert_eq!(last_seq(text), Some(1202));
        assert_eq!(last_seq(""), None);
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
