//! Vendor fabric profiles: TOML data files, embedded in the binary and overridable.
//!
//! The built-in files live in `core/profiles/*.toml` (format in `core/profiles/README.md`).
//! An admin drops files into /etc/gpu-affinity/profiles.d/: a file named like a built-in
//! one (`oci-h100.toml`) replaces it, any other name adds a profile. One file per job:
//! this one the types, [`parse`] the file format and its checks ([`load`] takes file
//! contents, never paths), [`matching`] which profile a node gets, and [`dir`] the
//! directory reader: [`load_trusted`], which the front ends call (it refuses files root
//! does not control), and [`read_profile_dir`], the unchecked one underneath.

mod dir;
mod matching;
mod parse;

pub use dir::{DEFAULT_PROFILE_DIR, load_trusted, read_profile_dir};
pub use matching::MatchFacts;
pub use parse::{load, parse_profile};

use serde::Deserialize;

use super::template::Scope;
use crate::model::{Machine, Nic, NicKind};
use crate::trust::TrustError;

/// The profiles compiled into the binary: (file name, contents).
const EMBEDDED: &[(&str, &str)] = &[
    (
        "aws-efa.toml",
        include_str!("../../../profiles/aws-efa.toml"),
    ),
    (
        "aws-p4d.toml",
        include_str!("../../../profiles/aws-p4d.toml"),
    ),
    ("aws-p5.toml", include_str!("../../../profiles/aws-p5.toml")),
    (
        "azure-nda100v4.toml",
        include_str!("../../../profiles/azure-nda100v4.toml"),
    ),
    (
        "azure-ndv5.toml",
        include_str!("../../../profiles/azure-ndv5.toml"),
    ),
    (
        "gcp-a3-high.toml",
        include_str!("../../../profiles/gcp-a3-high.toml"),
    ),
    (
        "gcp-a3-mega.toml",
        include_str!("../../../profiles/gcp-a3-mega.toml"),
    ),
    (
        "gcp-a3-ultra.toml",
        include_str!("../../../profiles/gcp-a3-ultra.toml"),
    ),
    ("gcp-a4.toml", include_str!("../../../profiles/gcp-a4.toml")),
    (
        "generic-ib.toml",
        include_str!("../../../profiles/generic-ib.toml"),
    ),
    (
        "generic-roce.toml",
        include_str!("../../../profiles/generic-roce.toml"),
    ),
    (
        "oci-a100-v2.toml",
        include_str!("../../../profiles/oci-a100-v2.toml"),
    ),
    (
        "oci-gpu4.toml",
        include_str!("../../../profiles/oci-gpu4.toml"),
    ),
    (
        "oci-h100.toml",
        include_str!("../../../profiles/oci-h100.toml"),
    ),
    (
        "oci-h200.toml",
        include_str!("../../../profiles/oci-h200.toml"),
    ),
    (
        "sockets.toml",
        include_str!("../../../profiles/sockets.toml"),
    ),
    ("aws-p6.toml", include_str!("../../../profiles/aws-p6.toml")),
    (
        "azure-ndgbv6.toml",
        include_str!("../../../profiles/azure-ndgbv6.toml"),
    ),
    (
        "gcp-a4x.toml",
        include_str!("../../../profiles/gcp-a4x.toml"),
    ),
    (
        "oci-b200.toml",
        include_str!("../../../profiles/oci-b200.toml"),
    ),
    (
        "oci-gb200-v3.toml",
        include_str!("../../../profiles/oci-gb200-v3.toml"),
    ),
    (
        "oci-gb300.toml",
        include_str!("../../../profiles/oci-gb300.toml"),
    ),
];

/// The embedded profile files as (file name, contents), ready for [`load`].
pub fn embedded() -> Vec<(String, String)> {
    EMBEDDED
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProfileError {
    /// A problem at a known place in a file.
    #[error("profile {file}:{line}: {message}")]
    At {
        file: String,
        line: usize,
        message: String,
    },
    #[error("cannot read profile {path}: {message}")]
    Read { path: String, message: String },
    /// An admin file or directory root does not fully control.
    #[error(transparent)]
    Untrusted(#[from] TrustError),
}

/// How a value combines with what the task already has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// Export the value unless the user set the variable (or the admin forces it).
    #[default]
    Set,
    /// A `:`-separated search path (LD_LIBRARY_PATH): put the value in front of the
    /// user's own entries, never drop them.
    Prepend,
}

/// One environment variable of a profile.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Var {
    pub key: String,
    /// A template (see [`template`]).
    pub value: String,
    pub scope: Scope,
    /// `mode` in the file.
    pub combine: Combine,
    /// Where the value comes from: vendor repository path (with commit) or doc URL.
    pub source: String,
    /// True when the value was checked against `source`.
    pub verified: bool,
    /// NCCL_TOPO_FILE pointing at a vendor file that must be checked against the live node
    /// (see [`super::topo`]) before it is used.
    pub topology_check: bool,
    /// Line of the variable's key in its file, for messages.
    pub line: usize,
}

/// A `vendor:device` PCI id pattern; `device` `None` matches any device (`15b3:*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct PciIdPattern {
    pub vendor: u16,
    pub device: Option<u16>,
}

impl PciIdPattern {
    pub fn matches(&self, vendor: u16, device: u16) -> bool {
        self.vendor == vendor && self.device.is_none_or(|d| d == device)
    }
}

/// When a profile applies. Every rule given must hold; an empty rule holds always.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct MatchRules {
    /// "aws", "azure", "gcp", "oci" or "unknown".
    pub vendor: Option<String>,
    /// Instance families the detector names ("p5", "ndv5", "a3-high", "oci-h100").
    pub family: Vec<String>,
    /// Instance type glob patterns (`*` matches any run of characters).
    pub instance: Vec<String>,
    /// The node has a GPU with one of these ids.
    pub gpu: Vec<PciIdPattern>,
    /// The node has a fabric NIC with one of these ids.
    pub nic: Vec<PciIdPattern>,
    /// The node has a fabric NIC of one of these kinds; `None` in the list stands for
    /// "no fabric NIC at all" (written `"none"`).
    pub fabric: Vec<Option<NicKind>>,
}

/// Which of the node's fabric NICs the profile counts as its fabric: the ones its
/// placeholders list and the only ones the solver gives to ranks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct FabricFilter {
    /// Only NICs of these kinds (empty: all fabric NICs).
    pub kinds: Vec<NicKind>,
    /// Never NICs with these netdev names (the host NIC of an image that is RDMA capable).
    pub exclude_netdevs: Vec<String>,
}

impl FabricFilter {
    /// True when `nic` stays in the profile's fabric.
    pub fn keeps(&self, nic: &Nic) -> bool {
        (self.kinds.is_empty() || self.kinds.contains(&nic.kind))
            && !nic
                .netdev
                .as_ref()
                .is_some_and(|d| self.exclude_netdevs.contains(d))
    }
}

/// One profile, parsed and checked.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Profile {
    /// The file stem: `oci-h100` for `oci-h100.toml`.
    pub name: String,
    pub description: String,
    /// Among matching profiles the highest priority wins, then the most specific rules.
    pub priority: i32,
    pub rules: MatchRules,
    pub fabric: FabricFilter,
    pub vars: Vec<Var>,
}

impl Profile {
    /// The node's fabric NICs as this profile sees them: the machine's own rule
    /// ([`Machine::fabric_nics`]) narrowed by the profile's `[fabric]` table. On OCI
    /// BM.GPU.H200.8 the four host NIC functions are ConnectX-7 like the fabric, so only
    /// the profile can leave them out.
    pub fn fabric_nics<'m>(&self, machine: &'m Machine) -> Vec<&'m Nic> {
        machine
            .fabric_nics()
            .into_iter()
            .filter(|n| self.fabric.keeps(n))
            .collect()
    }

    /// The vendor topology file this profile points NCCL_TOPO_FILE at, when it must be
    /// checked against the live node first.
    pub fn topology_file(&self) -> Option<&str> {
        self.vars
            .iter()
            .find(|v| v.key == "NCCL_TOPO_FILE" && v.topology_check)
            .map(|v| v.value.as_str())
    }
}

/// A loaded set of profiles. Serialized only for the plugin's copy of it
/// (`saved`), read back by the same build.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Profiles {
    list: Vec<Profile>,
}

impl Profiles {
    /// The embedded profiles. They are tested to parse, so a failure here is a build bug;
    /// it still degrades to an empty set rather than a panic.
    ///
    /// Parsed on every call (about 0.28 ms for the sixteen files, measured with
    /// `gpu-affinity bench`): a pre-parsed copy saved that per step, which is well under
    /// 1 % of a step's launch, and was 1.6k lines to keep equal to the files.
    pub fn builtin() -> Self {
        load(&embedded()).unwrap_or_default()
    }

    /// Add `p`, replacing a profile of the same name: the one merge rule, so an
    /// admin's `oci-h100.toml` replaces the built-in one wherever profiles are combined.
    fn insert(&mut self, p: Profile) {
        match self.list.iter_mut().find(|o| o.name == p.name) {
            Some(slot) => *slot = p,
            None => self.list.push(p),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.list.iter().find(|p| p.name == name)
    }

    /// The profile `name` alone (none when there is no such profile): all a step needs
    /// once detection has picked its profile.
    pub fn only(&self, name: &str) -> Profiles {
        Profiles {
            list: self.get(name).into_iter().cloned().collect(),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Profile> {
        self.list.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_profile_parses() {
        for (file, text) in embedded() {
            let p = parse_profile(&file, &text).unwrap_or_else(|e| panic!("{e}"));
            assert!(!p.description.is_empty(), "{file} has no description");
            for v in &p.vars {
                assert!(!v.source.is_empty(), "{file}: {} has no source", v.key);
            }
        }
        assert_eq!(Profiles::builtin().iter().count(), EMBEDDED.len());
    }

    #[test]
    fn admin_file_replaces_and_extends() {
        let admin = "description = \"site\"\npriority = 5\n[match]\nvendor = \"oci\"\n[[env]]\nkey = \"NCCL_IB_TC\"\nvalue = \"106\"\nsource = \"site network team\"\n";
        let mut files = embedded();
        files.push((
            "/etc/gpu-affinity/profiles.d/oci-h100.toml".into(),
            admin.into(),
        ));
        files.push((
            "/etc/gpu-affinity/profiles.d/site-extra.toml".into(),
            admin.into(),
        ));
        let p = load(&files).unwrap();
        assert_eq!(p.iter().count(), EMBEDDED.len() + 1);
        let h100 = p.get("oci-h100").unwrap();
        assert_eq!(h100.description, "site");
        assert_eq!(h100.vars[0].value, "106");
        assert!(p.get("site-extra").is_some());
    }
}
