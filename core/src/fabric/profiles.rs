//! Vendor fabric profiles: TOML data files, embedded in the binary and overridable.
//!
//! The built-in files live in `core/profiles/*.toml` (format in `core/profiles/README.md`).
//! An admin drops files into /etc/gpu-affinity/profiles.d/: a file named like a built-in
//! one (`oci-h100.toml`) replaces it, any other name adds a profile. [`load`] takes file
//! contents, never paths, so the core stays free of I/O; [`load_trusted`] is the thin
//! reader the front ends call (it refuses files root does not control), [`read_profile_dir`]
//! the unchecked one underneath.

use std::path::Path;

use serde::Deserialize;

use super::template::{self, Scope};
use crate::model::{Machine, Nic, NicKind};
use crate::plugin_env::plugin_owned;
use crate::trust::{self, TrustError};

/// The directory front ends read admin profiles from by default.
pub const DEFAULT_PROFILE_DIR: &str = "/etc/gpu-affinity/profiles.d";

/// The profiles compiled into the binary: (file name, contents).
const EMBEDDED: &[(&str, &str)] = &[
    ("aws-efa.toml", include_str!("../../profiles/aws-efa.toml")),
    ("aws-p4d.toml", include_str!("../../profiles/aws-p4d.toml")),
    ("aws-p5.toml", include_str!("../../profiles/aws-p5.toml")),
    (
        "azure-nda100v4.toml",
        include_str!("../../profiles/azure-nda100v4.toml"),
    ),
    (
        "azure-ndv5.toml",
        include_str!("../../profiles/azure-ndv5.toml"),
    ),
    (
        "gcp-a3-high.toml",
        include_str!("../../profiles/gcp-a3-high.toml"),
    ),
    (
        "gcp-a3-mega.toml",
        include_str!("../../profiles/gcp-a3-mega.toml"),
    ),
    (
        "gcp-a3-ultra.toml",
        include_str!("../../profiles/gcp-a3-ultra.toml"),
    ),
    ("gcp-a4.toml", include_str!("../../profiles/gcp-a4.toml")),
    (
        "generic-ib.toml",
        include_str!("../../profiles/generic-ib.toml"),
    ),
    (
        "generic-roce.toml",
        include_str!("../../profiles/generic-roce.toml"),
    ),
    (
        "oci-a100-v2.toml",
        include_str!("../../profiles/oci-a100-v2.toml"),
    ),
    (
        "oci-gpu4.toml",
        include_str!("../../profiles/oci-gpu4.toml"),
    ),
    (
        "oci-h100.toml",
        include_str!("../../profiles/oci-h100.toml"),
    ),
    (
        "oci-h200.toml",
        include_str!("../../profiles/oci-h200.toml"),
    ),
    ("sockets.toml", include_str!("../../profiles/sockets.toml")),
];

/// An admin profile file is a page of TOML; anything near this is not one.
const MAX_PROFILE_BYTES: u64 = 1 << 20;

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
#[derive(Clone, Debug, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciIdPattern {
    pub vendor: u16,
    pub device: Option<u16>,
}

impl PciIdPattern {
    fn parse(text: &str) -> Option<Self> {
        let (v, d) = text.trim().split_once(':')?;
        let vendor = u16::from_str_radix(v, 16).ok()?;
        let device = match d {
            "*" => None,
            d => Some(u16::from_str_radix(d, 16).ok()?),
        };
        Some(Self { vendor, device })
    }

    pub fn matches(&self, vendor: u16, device: u16) -> bool {
        self.vendor == vendor && self.device.is_none_or(|d| d == device)
    }
}

/// When a profile applies. Every rule given must hold; an empty rule holds always.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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

impl MatchRules {
    fn specificity(&self) -> usize {
        usize::from(self.vendor.is_some())
            + usize::from(!self.family.is_empty())
            + usize::from(!self.instance.is_empty())
            + usize::from(!self.gpu.is_empty())
            + usize::from(!self.nic.is_empty())
            + usize::from(!self.fabric.is_empty())
    }
}

/// Which of the node's fabric NICs the profile counts as its fabric: the ones its
/// placeholders list and the only ones the solver gives to ranks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// The facts profiles are matched against (computed by detection).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchFacts {
    pub vendor: String,
    pub family: Option<String>,
    pub instance: Option<String>,
    pub gpu_ids: Vec<(u16, u16)>,
    pub fabric_nic_ids: Vec<(u16, u16)>,
    pub fabric_kinds: Vec<NicKind>,
}

impl MatchRules {
    pub fn matches(&self, f: &MatchFacts) -> bool {
        let vendor = self
            .vendor
            .as_ref()
            .is_none_or(|v| v.eq_ignore_ascii_case(&f.vendor));
        let family = self.family.is_empty()
            || f.family
                .as_ref()
                .is_some_and(|fam| self.family.iter().any(|x| x == fam));
        let instance = self.instance.is_empty()
            || f.instance
                .as_ref()
                .is_some_and(|i| self.instance.iter().any(|p| glob(p, i)));
        let gpu = self.gpu.is_empty()
            || f.gpu_ids
                .iter()
                .any(|(v, d)| self.gpu.iter().any(|p| p.matches(*v, *d)));
        let nic = self.nic.is_empty()
            || f.fabric_nic_ids
                .iter()
                .any(|(v, d)| self.nic.iter().any(|p| p.matches(*v, *d)));
        let fabric = self.fabric.is_empty()
            || self.fabric.iter().any(|k| match k {
                None => f.fabric_kinds.is_empty(),
                Some(kind) => f.fabric_kinds.contains(kind),
            });
        vendor && family && instance && gpu && nic && fabric
    }
}

/// `*` matches any run of characters; everything else matches itself.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == text;
    };
    if parts.len() == 1 {
        return pattern == text;
    }
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A loaded set of profiles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profiles {
    list: Vec<Profile>,
}

impl Profiles {
    /// The embedded profiles. They are tested to parse, so a failure here is a build bug;
    /// it still degrades to an empty set rather than a panic.
    ///
    /// They come pre-parsed ([`super::builtin_profiles`], generated from the embedded
    /// files and checked equal to parsing them by a test): parsing sixteen TOML files
    /// took most of a millisecond on every step's launch path.
    pub fn builtin() -> Self {
        let mut list = super::builtin_profiles::profiles();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        Profiles { list }
    }

    /// These profiles with `files` parsed on top, as [`load`] would combine them: a
    /// file named like a profile here replaces it, any other adds one.
    fn with_files(mut self, files: &[(String, String)]) -> Result<Self, ProfileError> {
        for (file, text) in files {
            let p = parse_profile(file, text)?;
            match self.list.iter_mut().find(|o| o.name == p.name) {
                Some(slot) => *slot = p,
                None => self.list.push(p),
            }
        }
        self.list.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(self)
    }

    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.list.iter().find(|p| p.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Profile> {
        self.list.iter()
    }

    /// The best profile for these facts: highest priority, then most specific rules,
    /// then name (so the choice never depends on file order).
    pub fn select(&self, facts: &MatchFacts) -> Option<&Profile> {
        self.list
            .iter()
            .filter(|p| p.rules.matches(facts))
            .max_by(|a, b| {
                (a.priority, a.rules.specificity())
                    .cmp(&(b.priority, b.rules.specificity()))
                    .then_with(|| b.name.cmp(&a.name))
            })
    }
}

// ---- file format (serde) ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    description: String,
    #[serde(default)]
    priority: i32,
    #[serde(rename = "match")]
    rules: RulesDoc,
    #[serde(default)]
    fabric: FabricDoc,
    #[serde(default)]
    env: Vec<VarDoc>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RulesDoc {
    vendor: Option<toml::Spanned<String>>,
    #[serde(default)]
    family: Vec<String>,
    #[serde(default)]
    instance: Vec<String>,
    #[serde(default)]
    gpu: Vec<toml::Spanned<String>>,
    #[serde(default)]
    nic: Vec<toml::Spanned<String>>,
    #[serde(default)]
    fabric: Vec<toml::Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FabricDoc {
    #[serde(default)]
    kinds: Vec<toml::Spanned<String>>,
    #[serde(default)]
    exclude_netdevs: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VarDoc {
    key: toml::Spanned<String>,
    value: toml::Spanned<String>,
    #[serde(default)]
    scope: Scope,
    #[serde(default)]
    mode: Combine,
    source: toml::Spanned<String>,
    #[serde(default)]
    verified: bool,
    #[serde(default)]
    topology_check: bool,
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |t| t.matches('\n').count() + 1)
}

fn kind_from(text: &str) -> Option<Option<NicKind>> {
    Some(match text {
        "infiniband" => Some(NicKind::Infiniband),
        "roce" => Some(NicKind::Roce),
        "efa" => Some(NicKind::Efa),
        "gvnic" => Some(NicKind::Gvnic),
        "ethernet" => Some(NicKind::Ethernet),
        "none" => None,
        _ => return None,
    })
}

/// Parse one profile file. `file` names it in errors.
pub fn parse_profile(file: &str, text: &str) -> Result<Profile, ProfileError> {
    let at = |offset: usize, message: String| ProfileError::At {
        file: file.to_string(),
        line: line_of(text, offset),
        message,
    };
    let doc: FileDoc = toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        at(offset, e.message().trim().to_string())
    })?;

    let pci_ids = |list: &[toml::Spanned<String>], what: &str| {
        list.iter()
            .map(|s| {
                PciIdPattern::parse(s.get_ref()).ok_or_else(|| {
                    at(
                        s.span().start,
                        format!("bad {what} id {:?}: expected vendor:device in hex, e.g. 10de:2330 or 15b3:*", s.get_ref()),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let vendor = match &doc.rules.vendor {
        Some(v) => {
            let name = v.get_ref().to_ascii_lowercase();
            if !["aws", "azure", "gcp", "oci", "unknown"].contains(&name.as_str()) {
                return Err(at(
                    v.span().start,
                    format!(
                        "unknown vendor {:?}: expected aws, azure, gcp, oci or unknown",
                        v.get_ref()
                    ),
                ));
            }
            Some(name)
        }
        None => None,
    };
    let fabric = doc
        .rules
        .fabric
        .iter()
        .map(|s| {
            kind_from(s.get_ref()).ok_or_else(|| {
                at(
                    s.span().start,
                    format!(
                        "unknown fabric kind {:?}: expected infiniband, roce, efa, gvnic, ethernet or none",
                        s.get_ref()
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let kinds = doc
        .fabric
        .kinds
        .iter()
        .map(|s| match kind_from(s.get_ref()) {
            Some(Some(k)) => Ok(k),
            _ => Err(at(
                s.span().start,
                format!(
                    "unknown NIC kind {:?}: expected infiniband, roce, efa, gvnic or ethernet",
                    s.get_ref()
                ),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;

    let mut vars: Vec<Var> = Vec::new();
    for v in doc.env {
        let key = v.key.get_ref().trim().to_string();
        let line = line_of(text, v.key.span().start);
        let err = |message: String| ProfileError::At {
            file: file.to_string(),
            line,
            message,
        };
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(err(format!("bad variable name {key:?}")));
        }
        if plugin_owned(&key) {
            return Err(err(format!(
                "{key} is set per rank by the gpu-affinity plugin, not by profiles"
            )));
        }
        if vars.iter().any(|o| o.key == key) {
            return Err(err(format!("variable {key} is listed twice")));
        }
        if v.source.get_ref().trim().is_empty() {
            return Err(err(format!(
                "variable {key} has an empty source; cite the vendor file or doc"
            )));
        }
        template::check(v.value.get_ref(), v.scope)
            .map_err(|e| at(v.value.span().start, format!("variable {key}: {e}")))?;
        if v.topology_check && key != "NCCL_TOPO_FILE" {
            return Err(err(format!(
                "topology_check applies to NCCL_TOPO_FILE only, not {key}"
            )));
        }
        vars.push(Var {
            key,
            value: v.value.into_inner(),
            scope: v.scope,
            combine: v.mode,
            source: v.source.into_inner().trim().to_string(),
            verified: v.verified,
            topology_check: v.topology_check,
            line,
        });
    }

    let name = file.rsplit('/').next().unwrap_or(file);
    let name = name.strip_suffix(".toml").unwrap_or(name).to_string();
    Ok(Profile {
        name,
        description: doc.description,
        priority: doc.priority,
        rules: MatchRules {
            vendor,
            family: doc.rules.family,
            instance: doc.rules.instance,
            gpu: pci_ids(&doc.rules.gpu, "GPU")?,
            nic: pci_ids(&doc.rules.nic, "NIC")?,
            fabric,
        },
        fabric: FabricFilter {
            kinds,
            exclude_netdevs: doc.fabric.exclude_netdevs,
        },
        vars,
    })
}

/// Load profiles from (file name, contents) pairs, in order: a later file with the same
/// name replaces an earlier one (the admin's copy of `oci-h100.toml` replaces the
/// built-in). Typical call: `load(&[embedded(), read_profile_dir(dir)?].concat())`.
pub fn load(files: &[(String, String)]) -> Result<Profiles, ProfileError> {
    let mut list: Vec<Profile> = Vec::new();
    for (file, text) in files {
        let p = parse_profile(file, text)?;
        match list.iter_mut().find(|o| o.name == p.name) {
            Some(slot) => *slot = p,
            None => list.push(p),
        }
    }
    list.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Profiles { list })
}

/// Read every `*.toml` file of an admin profile directory as (path, contents), sorted
/// by name. A missing directory is no profiles, not an error. Nothing here checks who
/// owns the files: root-side callers use [`load_trusted`].
pub fn read_profile_dir(dir: &Path) -> Result<Vec<(String, String)>, ProfileError> {
    read_dir_with(dir, &|path| {
        trust::open_regular(path)
            .and_then(|file| trust::read_bounded_text(file, MAX_PROFILE_BYTES))
            .map_err(|e| ProfileError::Read {
                path: path.display().to_string(),
                message: e.to_string(),
            })
    })
}

/// The built-in profiles plus the admin's from `dir`, where the directory and every file
/// in it must belong to `owner` (root; tests pass their own uid) and be writable by no
/// one else (Invariant 2). A missing directory means built-ins only. The one loader for
/// the plugin and `gpu-affinity explain`, so both see the same profiles.
pub fn load_trusted(dir: &Path, owner: u32) -> Result<Profiles, ProfileError> {
    let mut files = Vec::new();
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(TrustError::Io {
                what: "profiles directory".into(),
                path: dir.display().to_string(),
                message: e.to_string(),
            }
            .into());
        }
        Ok(meta) => {
            trust::check_trusted(&meta, "profiles directory", dir, owner)?;
            // The directory is root's alone, so the files listed now are the files read;
            // each is still checked through the handle its bytes come from.
            files.extend(read_dir_with(dir, &|path| {
                Ok(trust::read_trusted_text(
                    path,
                    "profile",
                    owner,
                    MAX_PROFILE_BYTES,
                )?)
            })?);
        }
    }
    // Built-ins pre-parsed, only the admin's files parsed here: same result as
    // `load(&[embedded(), files].concat())` (a test checks the built-in half).
    Profiles::builtin().with_files(&files)
}

/// The `*.toml` files of `dir`, sorted by name, each read by `read`.
fn read_dir_with(
    dir: &Path,
    read: &dyn Fn(&Path) -> Result<String, ProfileError>,
) -> Result<Vec<(String, String)>, ProfileError> {
    let read_err = |e: std::io::Error| ProfileError::Read {
        path: dir.display().to_string(),
        message: e.to_string(),
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read_err(e)),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(read_err)?.path();
        if path.extension().is_some_and(|x| x == "toml") && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| Ok((p.display().to_string(), read(&p)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `builtin_profiles.rs` is generated from the embedded files. After editing a
    /// profile, run this test with `GPU_AFFINITY_REGENERATE=1` (then `cargo fmt`), and
    /// rebuild: the comparison sees the profiles compiled in.
    #[test]
    fn pre_parsed_builtins_match_the_embedded_files() {
        let parsed = load(&embedded()).unwrap_or_else(|e| panic!("{e}"));
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/fabric/builtin_profiles.rs");
        let source = generate_builtin_source(&parsed);
        if std::env::var_os("GPU_AFFINITY_REGENERATE").is_some() {
            std::fs::write(&path, &source).expect("write builtin_profiles.rs");
        }
        assert_eq!(
            Profiles::builtin(),
            parsed,
            "core/src/fabric/builtin_profiles.rs is stale: rerun this test with GPU_AFFINITY_REGENERATE=1"
        );
    }

    /// Rust source that builds `profiles` without parsing anything.
    fn generate_builtin_source(profiles: &Profiles) -> String {
        use std::fmt::Write;
        let strings = |v: &[String]| {
            let items: Vec<String> = v.iter().map(|s| format!("{s:?}.into()")).collect();
            format!("vec![{}]", items.join(", "))
        };
        let ids = |v: &[PciIdPattern]| {
            let items: Vec<String> = v
                .iter()
                .map(|p| {
                    format!(
                        "PciIdPattern {{ vendor: {:#06x}, device: {:?} }}",
                        p.vendor,
                        p.device.map(|d| format!("{d:#06x}")).map(Raw)
                    )
                })
                .collect();
            format!("vec![{}]", items.join(", "))
        };
        let kind = |k: &NicKind| format!("NicKind::{k:?}");
        let mut out = format!(
            "//! GENERATED from core/profiles/*.toml by the test\n\
             //! `fabric::profiles::tests::pre_parsed_builtins_match_the_embedded_files`\n\
             //! (`GPU_AFFINITY_REGENERATE=1`); do not edit. The test also checks that these\n\
             //! equal parsing the embedded files, so the plugin need not parse TOML per step.\n\n\
             use super::profiles::{{FabricFilter, MatchRules, {}Profile, Combine, Var}};\n\
             use super::template::Scope;\n\
             use crate::model::NicKind;\n\n\
             pub(super) fn profiles() -> Vec<Profile> {{\n    vec![\n",
            // Imported only when used, so the generated file builds without warnings.
            if profiles
                .iter()
                .any(|p| !p.rules.gpu.is_empty() || !p.rules.nic.is_empty())
            {
                "PciIdPattern, "
            } else {
                ""
            }
        );
        for p in profiles.iter() {
            let fabric: Vec<String> = p
                .rules
                .fabric
                .iter()
                .map(|k| {
                    k.as_ref()
                        .map_or("None".to_string(), |k| format!("Some({})", kind(k)))
                })
                .collect();
            let kinds: Vec<String> = p.fabric.kinds.iter().map(kind).collect();
            let _ = write!(
                out,
                "        Profile {{\n            name: {:?}.into(),\n            description: {:?}.into(),\n            priority: {},\n            rules: MatchRules {{\n                vendor: {},\n                family: {},\n                instance: {},\n                gpu: {},\n                nic: {},\n                fabric: vec![{}],\n            }},\n            fabric: FabricFilter {{\n                kinds: vec![{}],\n                exclude_netdevs: {},\n            }},\n            vars: vec![\n",
                p.name,
                p.description,
                p.priority,
                p.rules
                    .vendor
                    .as_ref()
                    .map_or("None".to_string(), |v| format!("Some({v:?}.into())")),
                strings(&p.rules.family),
                strings(&p.rules.instance),
                ids(&p.rules.gpu),
                ids(&p.rules.nic),
                fabric.join(", "),
                kinds.join(", "),
                strings(&p.fabric.exclude_netdevs),
            );
            for v in &p.vars {
                let _ = write!(
                    out,
                    "                Var {{\n                    key: {:?}.into(),\n                    value: {:?}.into(),\n                    scope: Scope::{:?},\n                    combine: Combine::{:?},\n                    source: {:?}.into(),\n                    verified: {},\n                    topology_check: {},\n                    line: {},\n                }},\n",
                    v.key, v.value, v.scope, v.combine, v.source, v.verified, v.topology_check, v.line
                );
            }
            out.push_str("            ],\n        },\n");
        }
        out.push_str("    ]\n}\n");
        out
    }

    /// Debug-prints as its text (a hex literal inside `Some(..)`).
    struct Raw(String);
    impl std::fmt::Debug for Raw {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

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
    fn glob_patterns() {
        assert!(glob("p5.*", "p5.48xlarge"));
        assert!(!glob("p5.*", "p5en.48xlarge"));
        assert!(glob("p5*", "p5en.48xlarge"));
        assert!(glob("*H100*", "Standard_ND96isr_H100_v5"));
        assert!(glob("exact", "exact"));
        assert!(!glob("a*b*c", "abx"));
        assert!(glob("a*b*c", "axxbyyc"));
    }

    #[test]
    fn malformed_profile_names_file_and_line() {
        let text = "description = \"x\"\n[match]\nvendor = \"aws\"\n\n[[env]]\nkey = \"A\"\nvalue = 3\nsource = \"s\"\n";
        let err = parse_profile("/etc/gpu-affinity/profiles.d/bad.toml", text).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("profile /etc/gpu-affinity/profiles.d/bad.toml:7:"),
            "{msg}"
        );

        let text = "description = \"x\"\n[match]\nvendor = \"aws\"\n[[env]]\nkey = \"A\"\nvalue = \"{nope}\"\nsource = \"s\"\n";
        let msg = parse_profile("bad.toml", text).unwrap_err().to_string();
        assert!(
            msg.starts_with("profile bad.toml:6: variable A: unknown placeholder {nope}"),
            "{msg}"
        );

        let text = "description = \"x\"\n[match]\nvendor = \"ibm\"\n";
        let msg = parse_profile("v.toml", text).unwrap_err().to_string();
        assert!(msg.starts_with("profile v.toml:3: unknown vendor"), "{msg}");

        let text = "description = \"x\"\ncolour = 1\n[match]\n";
        let msg = parse_profile("u.toml", text).unwrap_err().to_string();
        assert!(
            msg.starts_with("profile u.toml:2:") && msg.contains("colour"),
            "{msg}"
        );

        let text = "description = \"x\"\n[match]\n[[env]]\nkey = \"CUDA_VISIBLE_DEVICES\"\nvalue = \"0\"\nsource = \"s\"\n";
        let msg = parse_profile("c.toml", text).unwrap_err().to_string();
        assert!(
            msg.starts_with("profile c.toml:4: CUDA_VISIBLE_DEVICES is set per rank"),
            "{msg}"
        );

        let text = "description = \"x\"\n[match]\n[[env]]\nkey = \"CUDA_DEVICE_ORDER\"\nvalue = \"FASTEST_FIRST\"\nsource = \"s\"\n";
        let msg = parse_profile("o.toml", text).unwrap_err().to_string();
        assert!(
            msg.starts_with("profile o.toml:4: CUDA_DEVICE_ORDER is set per rank"),
            "{msg}"
        );
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

    #[test]
    fn a_fifo_named_like_a_profile_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("site.toml");
        trust::fifo::make(&fifo);
        let d = dir.path().to_path_buf();
        // Listed as a profile only when it is a file; read through the non-blocking opener
        // either way, which refuses it.
        let files = trust::fifo::returns(&fifo, move || read_profile_dir(&d)).unwrap();
        assert!(files.is_empty(), "{files:?}");
        let err = trust::fifo::returns(&fifo, {
            let fifo = fifo.clone();
            move || {
                trust::open_regular(&fifo)
                    .and_then(|f| trust::read_bounded_text(f, MAX_PROFILE_BYTES))
            }
        })
        .expect_err("a FIFO");
        assert!(err.to_string().contains("a FIFO"), "{err}");
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_PROFILE_BYTES as usize + 1]).unwrap();
        let err = read_profile_dir(dir.path()).expect_err("too large");
        assert!(err.to_string().contains("larger than"), "{err}");
    }

    #[test]
    fn missing_dir_is_empty_and_files_are_read_sorted() {
        assert!(
            read_profile_dir(Path::new("/nonexistent/gpu-affinity"))
                .unwrap()
                .is_empty()
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.toml"), "description = \"b\"\n[match]\n").unwrap();
        std::fs::write(dir.path().join("a.toml"), "description = \"a\"\n[match]\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let files = read_profile_dir(dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        assert!(files[0].0.ends_with("a.toml"));
        let p = load(&files).unwrap();
        assert!(p.get("a").is_some() && p.get("b").is_some());
    }

    #[test]
    fn load_trusted_takes_root_files_and_refuses_what_others_can_change() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let chmod = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("profiles.d");
        assert_eq!(load_trusted(&dir, 0).unwrap(), Profiles::builtin());
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o755);
        let file = dir.join("site.toml");
        std::fs::write(&file, "description = \"site\"\n[match]\n").unwrap();
        chmod(&file, 0o644);
        let owner = std::fs::metadata(&file).unwrap().uid();
        let p = load_trusted(&dir, owner).unwrap();
        assert_eq!(p.get("site").map(|p| p.description.as_str()), Some("site"));
        assert_eq!(p.iter().count(), EMBEDDED.len() + 1);

        let refused = |want: String| {
            let e = load_trusted(&dir, owner).unwrap_err();
            assert!(matches!(e, ProfileError::Untrusted(_)), "{e:?}");
            assert_eq!(e.to_string(), want);
        };
        chmod(&file, 0o666);
        refused(format!(
            "profile {} is writable by group or others (mode 0666); refusing it",
            file.display()
        ));
        chmod(&file, 0o644);
        chmod(&dir, 0o775);
        refused(format!(
            "profiles directory {} is writable by group or others (mode 0775); refusing it",
            dir.display()
        ));
        chmod(&dir, 0o755);
        let e = load_trusted(&dir, owner + 1).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "profiles directory {} is owned by uid {owner}, not root; refusing it",
                dir.display()
            )
        );
    }
}
