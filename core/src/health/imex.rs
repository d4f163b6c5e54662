//! The IMEX domain of a GB200/GB300 NVL72 rack: the nvidia-imex daemon that lets GPUs of
//! different nodes share memory over the NVLink domain. Text in, values and a judgement
//! out; the prolog crate runs `nvidia-imex-ctl` (`[fabric] imex_ctl`).
//!
//! The two answers read, as NVIDIA's IMEX guide ("IMEX Service Command Service",
//! docs.nvidia.com/multi-node-nvlink-systems/imex-guide/cmdservice.html) and DCGM's
//! `DcgmImexManager` (modules/health; fields DCGM_FI_IMEX_DOMAIN_STATUS 1502 and
//! DCGM_FI_IMEX_DAEMON_STATUS 1503 in dcgm_fields.h) describe them:
//! - `nvidia-imex-ctl -q`: this node's daemon state, one word: INITIALIZING,
//!   STARTING_AUTH_SERVER, WAITING_FOR_PEERS, WAITING_FOR_RECOVERY, INIT_GPU, READY,
//!   SHUTTING_DOWN, UNAVAILABLE (0-7).
//! - `nvidia-imex-ctl -N -j`: the whole domain as JSON, a top-level `"status"` of UP, DOWN
//!   or DEGRADED and `"nodes"`, one entry per configured member keyed `"0"`, `"1"`, ...,
//!   each with its daemon `status`, `host` (IP), `hostName` (with -H), `connections` and
//!   `version` (the shape NVIDIA's own ISV test suite records as seen on live domains;
//!   NVIDIA publishes no schema). So the parser requires only the top-level status and
//!   takes whatever it can of the nodes, skipping an entry it cannot read.
//! - Either prints "Failed to read node configuration file" when the node list
//!   (/etc/nvidia-imex/nodes_config.cfg) was never written: IMEX is not configured here.

use serde_json::Value;

use super::Class;

/// The reader's bound for both commands together (each gets half): the command service
/// answers on a local port in milliseconds; a daemon that does not answer in seconds is
/// not judged (see [`judge`]).
pub const IMEX_BOUND_MS: u64 = 10_000;

/// What both commands print when the node list is missing (DCGM's NOT_CONFIGURED test).
pub const NOT_CONFIGURED: &str = "Failed to read node configuration file";

/// Members kept at most: an NVL72 domain has 18 compute trays, NVL576 144.
const MAX_NODES: usize = 1024;
/// Characters kept of any text the output gives.
const MAX_FIELD: usize = 80;

/// Why `nvidia-imex-ctl`'s output says nothing this check can judge.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImexError {
    #[error("IMEX is not configured on this node (nvidia-imex-ctl: \"{NOT_CONFIGURED}\")")]
    NotConfigured,
    #[error("nvidia-imex-ctl -q printed no daemon state NVIDIA documents: '{0}'")]
    UnknownState(String),
    #[error("nvidia-imex-ctl -N -j output is not JSON: {0}")]
    NotJson(String),
    #[error("nvidia-imex-ctl -N -j output has no top-level \"status\"")]
    NoStatus,
    #[error("nvidia-imex-ctl -N -j domain status '{0}' is none of UP, DOWN, DEGRADED")]
    UnknownStatus(String),
}

/// The IMEX daemon's state (`nvidia-imex-ctl -q`), numbered as DCGM's field 1503.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DaemonState {
    Initializing,
    StartingAuthServer,
    WaitingForPeers,
    WaitingForRecovery,
    InitGpu,
    Ready,
    ShuttingDown,
    Unavailable,
}

impl DaemonState {
    const ALL: [DaemonState; 8] = [
        DaemonState::Initializing,
        DaemonState::StartingAuthServer,
        DaemonState::WaitingForPeers,
        DaemonState::WaitingForRecovery,
        DaemonState::InitGpu,
        DaemonState::Ready,
        DaemonState::ShuttingDown,
        DaemonState::Unavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DaemonState::Initializing => "INITIALIZING",
            DaemonState::StartingAuthServer => "STARTING_AUTH_SERVER",
            DaemonState::WaitingForPeers => "WAITING_FOR_PEERS",
            DaemonState::WaitingForRecovery => "WAITING_FOR_RECOVERY",
            DaemonState::InitGpu => "INIT_GPU",
            DaemonState::Ready => "READY",
            DaemonState::ShuttingDown => "SHUTTING_DOWN",
            DaemonState::Unavailable => "UNAVAILABLE",
        }
    }

    /// The word as nvidia-imex-ctl prints it; case is ignored, as DCGM ignores it.
    pub fn parse(word: &str) -> Option<DaemonState> {
        DaemonState::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(word))
    }
}

/// The domain's top-level status (`nvidia-imex-ctl -N -j`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainStatus {
    Up,
    Down,
    Degraded,
}

impl DomainStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DomainStatus::Up => "UP",
            DomainStatus::Down => "DOWN",
            DomainStatus::Degraded => "DEGRADED",
        }
    }
}

/// One configured member of the domain, as far as its entry says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImexNode {
    /// `host`: the member's address.
    pub host: Option<String>,
    /// `hostName` (printed with -H).
    pub host_name: Option<String>,
    /// Its daemon state as this node's daemon sees it (`READY`, `UNAVAILABLE`, ...).
    pub status: Option<String>,
}

impl ImexNode {
    fn shown(&self) -> String {
        let who = self
            .host_name
            .as_deref()
            .or(self.host.as_deref())
            .unwrap_or("a member");
        format!("{who} {}", self.status.as_deref().unwrap_or("(no status)"))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImexDomain {
    pub status: DomainStatus,
    pub nodes: Vec<ImexNode>,
}

/// One pass's reading: the daemon's state, and the domain when the daemon is READY (the
/// reader asks for it only then: before, the domain is still forming).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imex {
    pub daemon: DaemonState,
    pub domain: Option<ImexDomain>,
}

/// `text` as one short line: controls escaped ([`crate::text::one_line`]), cut to
/// [`MAX_FIELD`] characters.
fn one_line(text: &str) -> String {
    crate::text::one_line(text.trim())
        .chars()
        .take(MAX_FIELD)
        .collect()
}

/// `nvidia-imex-ctl -q`'s output: the whole trimmed text is the state's word (DCGM
/// `ParseDaemonStatusText`).
pub fn daemon_state(text: &str) -> Result<DaemonState, ImexError> {
    if text.contains(NOT_CONFIGURED) {
        return Err(ImexError::NotConfigured);
    }
    DaemonState::parse(text.trim()).ok_or_else(|| ImexError::UnknownState(one_line(text)))
}

/// `nvidia-imex-ctl -N -j`'s JSON.
pub fn domain(text: &str) -> Result<ImexDomain, ImexError> {
    if text.contains(NOT_CONFIGURED) {
        return Err(ImexError::NotConfigured);
    }
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        let why = e.to_string();
        ImexError::NotJson(one_line(why.lines().next().unwrap_or("")))
    })?;
    let word = doc
        .get("status")
        .and_then(Value::as_str)
        .ok_or(ImexError::NoStatus)?;
    let status = match word.trim().to_ascii_uppercase().as_str() {
        "UP" => DomainStatus::Up,
        "DOWN" => DomainStatus::Down,
        "DEGRADED" => DomainStatus::Degraded,
        _ => return Err(ImexError::UnknownStatus(one_line(word))),
    };
    // Keyed "0", "1", ... as seen; a list is taken too, should a release print one.
    let entries: Vec<&Value> = match doc.get("nodes") {
        Some(Value::Object(map)) => map.values().collect(),
        Some(Value::Array(list)) => list.iter().collect(),
        _ => Vec::new(),
    };
    let text_of = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(one_line);
    let nodes = entries
        .into_iter()
        .filter(|v| v.is_object())
        .take(MAX_NODES)
        .map(|v| ImexNode {
            host: text_of(v, "host"),
            host_name: text_of(v, "hostName"),
            status: text_of(v, "status"),
        })
        .collect();
    Ok(ImexDomain { status, nodes })
}

/// What one reading says of the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judged {
    Healthy(String),
    /// Fails the check at this class, with its evidence.
    Fault(Class, String),
    /// Nothing to judge, and why (never a pass: a check that read nothing says so).
    NotJudged(String),
}

/// Members named at most in a finding's evidence.
const NAMED: usize = 4;

/// The domain UP with the daemon READY is healthy; DOWN drains, as DCGM's health watch
/// fails it (`MonitorImex`). DEGRADED, with this node's daemon READY, only warns where
/// DCGM fails: some other member is not READY (a peer restarting its daemon for a job, as
/// slurm-gcp's IMEX prolog does), and a drain on one reading would take every healthy
/// node of the domain out for that peer. The daemon on its way to READY (or shutting
/// down) only warns, where DCGM fails: DCGM's failure is a watch's incident, ours a drain,
/// and these states are passed through at every daemon start (slurm-gcp's IMEX prolog
/// restarts nvidia-imex for each job and waits up to IMEX_CONN_WAIT_TIMEOUT, 70 s, for the
/// peers), so a drain would hit every node whose domain is forming. A daemon stuck there
/// warns on every pass (the report and the textfile show it): what it waits for may be
/// its peers, not this node. UNAVAILABLE is not judged, as DCGM does not judge it.
pub fn judge(imex: &Imex) -> Judged {
    let daemon = imex.daemon.as_str();
    match imex.daemon {
        DaemonState::Ready => {}
        DaemonState::Unavailable => {
            return Judged::NotJudged(format!(
                "IMEX daemon {daemon} (not running here): domain not judged"
            ));
        }
        _ => {
            return Judged::Fault(
                Class::Warn,
                format!("IMEX daemon {daemon}, not READY (the domain is forming or stopping)"),
            );
        }
    }
    let Some(domain) = &imex.domain else {
        return Judged::NotJudged(format!("IMEX daemon {daemon}; domain status not read"));
    };
    let members = domain.nodes.len();
    let not_ready: Vec<&ImexNode> = domain
        .nodes
        .iter()
        .filter(|n| {
            !n.status
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("READY"))
        })
        .collect();
    let status = domain.status.as_str();
    match domain.status {
        DomainStatus::Up => Judged::Healthy(format!(
            "IMEX domain {status}, daemon {daemon}, {members} members"
        )),
        DomainStatus::Down | DomainStatus::Degraded => {
            let class = if domain.status == DomainStatus::Down {
                Class::Drain
            } else {
                Class::Warn
            };
            let mut evidence = format!("IMEX domain {status} (daemon {daemon})");
            if !not_ready.is_empty() {
                let named: Vec<String> = not_ready.iter().take(NAMED).map(|n| n.shown()).collect();
                let more = not_ready.len().saturating_sub(NAMED);
                evidence.push_str(&format!(
                    ": {} of {members} members not READY: {}{}",
                    not_ready.len(),
                    named.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                ));
            }
            Judged::Fault(class, evidence)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use crate::test_support::imex_domain_json as domain_json;

    /// The healthy domain.
    pub fn domain_up() -> String {
        domain_json("UP", "READY")
    }

    /// The same domain with member 1's daemon down.
    pub fn domain_with_peer_down(status: &str) -> String {
        domain_json(status, "UNAVAILABLE")
    }

    fn ready(text: &str) -> Imex {
        Imex {
            daemon: DaemonState::Ready,
            domain: Some(domain(text).expect("parses")),
        }
    }

    #[test]
    fn the_domain_json_as_nvidia_imex_ctl_prints_it() {
        let d = domain(&domain_up()).expect("parses");
        assert_eq!(d.status, DomainStatus::Up);
        assert_eq!(d.nodes.len(), 2);
        assert_eq!(d.nodes[1].host.as_deref(), Some("10.0.0.2"));
        assert_eq!(d.nodes[1].host_name.as_deref(), Some("gb200-r1-t2"));
        assert_eq!(
            judge(&ready(&domain_up())),
            Judged::Healthy("IMEX domain UP, daemon READY, 2 members".into())
        );
        // The nested members' statuses never stand in for the domain's.
        assert_eq!(
            domain(r#"{"nodes":{"0":{"status":"READY"}}}"#),
            Err(ImexError::NoStatus)
        );
        // Members optional, malformed entries skipped, a list taken.
        assert_eq!(
            domain(r#"{"status":"down"}"#).map(|d| d.status),
            Ok(DomainStatus::Down)
        );
        let odd = domain(r#"{"status":"UP","nodes":[7,{"host":"h"},"x"]}"#).expect("parses");
        assert_eq!(odd.nodes.len(), 1);
    }

    #[test]
    fn down_drains_and_degraded_warns_naming_the_members() {
        for (status, want) in [("DEGRADED", Class::Warn), ("DOWN", Class::Drain)] {
            let Judged::Fault(class, evidence) = judge(&ready(&domain_with_peer_down(status)))
            else {
                panic!("{status}: not a fault");
            };
            assert_eq!(class, want, "{status}");
            assert_eq!(
                evidence,
                format!(
                    "IMEX domain {status} (daemon READY): 1 of 2 members not READY: gb200-r1-t2 UNAVAILABLE"
                )
            );
        }
        // Many members down: four named, the rest counted.
        let many = Imex {
            daemon: DaemonState::Ready,
            domain: Some(ImexDomain {
                status: DomainStatus::Down,
                nodes: (0..18)
                    .map(|i| ImexNode {
                        host: Some(format!("10.0.0.{i}")),
                        ..ImexNode::default()
                    })
                    .collect(),
            }),
        };
        let Judged::Fault(_, evidence) = judge(&many) else {
            panic!("not a fault");
        };
        assert!(
            evidence.ends_with("10.0.0.3 (no status) and 14 more"),
            "{evidence}"
        );
    }

    #[test]
    fn daemon_states_as_dcgm_numbers_them() {
        let words: Vec<&str> = DaemonState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            words,
            [
                "INITIALIZING",
                "STARTING_AUTH_SERVER",
                "WAITING_FOR_PEERS",
                "WAITING_FOR_RECOVERY",
                "INIT_GPU",
                "READY",
                "SHUTTING_DOWN",
                "UNAVAILABLE"
            ]
        );
        assert_eq!(daemon_state("READY\n"), Ok(DaemonState::Ready));
        assert_eq!(
            daemon_state("  waiting_for_peers "),
            Ok(DaemonState::WaitingForPeers)
        );
        for state in DaemonState::ALL {
            let judged = judge(&Imex {
                daemon: state,
                domain: None,
            });
            let want = match state {
                DaemonState::Ready | DaemonState::Unavailable => "not judged",
                _ => "warn",
            };
            let got = match judged {
                Judged::NotJudged(_) => "not judged",
                Judged::Fault(Class::Warn, _) => "warn",
                _ => "other",
            };
            assert_eq!(got, want, "{state:?}");
        }
    }

    #[test]
    fn output_that_says_nothing_is_one_line_and_never_a_state() {
        let not_configured =
            "Failed to read node configuration file /etc/nvidia-imex/nodes_config.cfg\n";
        assert_eq!(daemon_state(not_configured), Err(ImexError::NotConfigured));
        assert_eq!(domain(not_configured), Err(ImexError::NotConfigured));
        for text in [
            "",
            "Query Status returned error code: 14\nsecond line",
            "READY READY",
            &"x".repeat(500),
        ] {
            let e = daemon_state(text).expect_err(text);
            let line = e.to_string();
            assert!(!line.contains('\n') && line.len() < 200, "{line}");
        }
        for text in [
            "garbage\n{",
            "[]",
            r#"{"status": 5}"#,
            r#"{"status":"SIDEWAYS"}"#,
        ] {
            let e = domain(text).expect_err(text);
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        assert_eq!(
            domain(r#"{"status":"SIDEWAYS"}"#),
            Err(ImexError::UnknownStatus("SIDEWAYS".into()))
        );
    }
}
