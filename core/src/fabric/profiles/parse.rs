//! The profile file format (serde) and its checks: every value validated, every error
//! naming the file and line. Pure: file contents in, [`Profiles`] out.

use std::cell::Cell;

use serde::Deserialize;

use super::super::template::{self, Scope};
use super::{
    Combine, FabricFilter, MatchRules, PciIdPattern, Profile, ProfileError, Profiles, Var,
};
use crate::fabric::{Vendor, detect};
use crate::model::NicKind;
use crate::plugin_env::plugin_owned;

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
}

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
    family: Vec<toml::Spanned<String>>,
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

/// Where in one file an error is: the file's name and a line counter over its text.
/// Phases ask for lines in file order (the `[[env]]` keys come one after another), so
/// the counter goes on from the last offset asked rather than rescanning from the top
/// for every variable; an offset before it starts over.
struct Place<'a> {
    file: &'a str,
    text: &'a str,
    /// The last offset asked and its line.
    last: Cell<(usize, usize)>,
}

impl<'a> Place<'a> {
    fn new(file: &'a str, text: &'a str) -> Self {
        Self {
            file,
            text,
            last: Cell::new((0, 1)),
        }
    }

    /// The 1-based line of byte `offset` (1 where the offset is not in the text).
    fn line(&self, offset: usize) -> usize {
        let (mut from, mut line) = self.last.get();
        if offset < from {
            (from, line) = (0, 1);
        }
        let Some(gap) = self.text.get(from..offset) else {
            return 1;
        };
        line += gap.bytes().filter(|&b| b == b'\n').count();
        self.last.set((offset, line));
        line
    }

    fn at(&self, offset: usize, message: String) -> ProfileError {
        self.on_line(self.line(offset), message)
    }

    fn on_line(&self, line: usize, message: String) -> ProfileError {
        ProfileError::At {
            file: self.file.to_string(),
            line,
            message,
        }
    }
}

/// A `[match] fabric` entry: a NIC kind, or `none` for "no fabric NIC at all".
fn kind_from(text: &str) -> Option<Option<NicKind>> {
    match text {
        "none" => Some(None),
        kind => NicKind::parse(kind).map(Some),
    }
}

/// Parse one profile file. `file` names it in errors. The phases run in this order, so
/// a file with several problems always reports the same first one.
pub fn parse_profile(file: &str, text: &str) -> Result<Profile, ProfileError> {
    let place = Place::new(file, text);
    let doc = read_doc(text, &place)?;
    let vendor = match_vendor(doc.rules.vendor.as_ref(), &place)?;
    check_families(&doc.rules.family, vendor.as_deref(), &place)?;
    let fabric = match_fabric(&doc.rules.fabric, &place)?;
    let kinds = fabric_kinds(&doc.fabric.kinds, &place)?;
    let vars = env_vars(doc.env, &place)?;
    let gpu = pci_ids(&doc.rules.gpu, "GPU", &place)?;
    let nic = pci_ids(&doc.rules.nic, "NIC", &place)?;
    Ok(Profile {
        name: profile_name(file),
        description: doc.description,
        priority: doc.priority,
        rules: MatchRules {
            vendor,
            family: doc
                .rules
                .family
                .into_iter()
                .map(toml::Spanned::into_inner)
                .collect(),
            instance: doc.rules.instance,
            gpu,
            nic,
            fabric,
        },
        fabric: FabricFilter {
            kinds,
            exclude_netdevs: doc.fabric.exclude_netdevs,
        },
        vars,
    })
}

/// The TOML document, its shape checked by serde (unknown keys, wrong types).
fn read_doc(text: &str, place: &Place) -> Result<FileDoc, ProfileError> {
    toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        place.at(offset, e.message().trim().to_string())
    })
}

/// `[match] vendor`, one detection names, in its canonical spelling.
fn match_vendor(
    vendor: Option<&toml::Spanned<String>>,
    place: &Place,
) -> Result<Option<String>, ProfileError> {
    let Some(v) = vendor else {
        return Ok(None);
    };
    match Vendor::parse(v.get_ref()) {
        Some(vendor) => Ok(Some(vendor.as_str().to_string())),
        None => Err(place.at(
            v.span().start,
            format!(
                "unknown vendor {:?}: expected {}",
                v.get_ref(),
                Vendor::expected()
            ),
        )),
    }
}

/// A family detection never names would silently never match (`ndv6` for `ndv5`).
/// AWS families come from the DMI product name too, so an AWS profile may name any.
fn check_families(
    families: &[toml::Spanned<String>],
    vendor: Option<&str>,
    place: &Place,
) -> Result<(), ProfileError> {
    if vendor == Some(Vendor::Aws.as_str()) {
        return Ok(());
    }
    match families
        .iter()
        .find(|f| !detect::family::ALL.contains(&f.get_ref().as_str()))
    {
        Some(f) => Err(place.at(
            f.span().start,
            format!(
                "unknown instance family {:?}: detection names {} (an AWS family from DMI needs vendor = \"aws\")",
                f.get_ref(),
                detect::family::ALL.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// `[match] fabric`: NIC kinds, `none` standing for "no fabric NIC at all".
fn match_fabric(
    list: &[toml::Spanned<String>],
    place: &Place,
) -> Result<Vec<Option<NicKind>>, ProfileError> {
    list.iter()
        .map(|s| {
            kind_from(s.get_ref()).ok_or_else(|| {
                place.at(
                    s.span().start,
                    format!(
                        "unknown fabric kind {:?}: expected {}, or none",
                        s.get_ref(),
                        NicKind::expected()
                    ),
                )
            })
        })
        .collect()
}

/// `[fabric] kinds`: NIC kinds only (`none` filters nothing).
fn fabric_kinds(
    list: &[toml::Spanned<String>],
    place: &Place,
) -> Result<Vec<NicKind>, ProfileError> {
    list.iter()
        .map(|s| match kind_from(s.get_ref()) {
            Some(Some(k)) => Ok(k),
            _ => Err(place.at(
                s.span().start,
                format!(
                    "unknown NIC kind {:?}: expected {}",
                    s.get_ref(),
                    NicKind::expected()
                ),
            )),
        })
        .collect()
}

/// The `[[env]]` variables, each checked and numbered with its key's line.
fn env_vars(env: Vec<VarDoc>, place: &Place) -> Result<Vec<Var>, ProfileError> {
    let mut vars: Vec<Var> = Vec::with_capacity(env.len());
    for v in env {
        let key = v.key.get_ref().trim().to_string();
        let line = place.line(v.key.span().start);
        let err = |message: String| place.on_line(line, message);
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
            .map_err(|e| place.at(v.value.span().start, format!("variable {key}: {e}")))?;
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
    Ok(vars)
}

/// `[match] gpu` / `nic` ids, `vendor:device` in hex (`*` for any device).
fn pci_ids(
    list: &[toml::Spanned<String>],
    what: &str,
    place: &Place,
) -> Result<Vec<PciIdPattern>, ProfileError> {
    list.iter()
        .map(|s| {
            PciIdPattern::parse(s.get_ref()).ok_or_else(|| {
                place.at(
                    s.span().start,
                    format!(
                        "bad {what} id {:?}: expected vendor:device in hex, e.g. 10de:2330 or 15b3:*",
                        s.get_ref()
                    ),
                )
            })
        })
        .collect()
}

/// The profile's name: the file's, without directory or `.toml`.
fn profile_name(file: &str) -> String {
    let name = file.rsplit('/').next().unwrap_or(file);
    name.strip_suffix(".toml").unwrap_or(name).to_string()
}

/// Load profiles from (file name, contents) pairs, in order: a later file with the same
/// name replaces an earlier one (the admin's copy of `oci-h100.toml` replaces the
/// built-in). Typical call: `load(&[embedded(), read_profile_dir(dir)?].concat())`.
pub fn load(files: &[(String, String)]) -> Result<Profiles, ProfileError> {
    let mut profiles = Profiles::default();
    for (file, text) in files {
        profiles.insert(parse_profile(file, text)?);
    }
    // Name order, so the choice among equals never depends on file order.
    profiles.list.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(profiles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_counter_matches_a_count_from_the_top() {
        let text = "a\nbb\n\nccc\né\n";
        let place = Place::new("f.toml", text);
        let from_top = |offset: usize| {
            text.get(..offset)
                .map_or(1, |t| t.bytes().filter(|&b| b == b'\n').count() + 1)
        };
        // Onward, backward (the counter starts over), past the end and inside `é`.
        for offset in [0, 1, 2, 5, 6, 7, 11, 3, 12, 14, 15, 100, 13, 4] {
            assert_eq!(place.line(offset), from_top(offset), "offset {offset}");
        }
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

        // A family detection never names is an error, not a profile that never matches.
        let text = "description = \"x\"\n[match]\nvendor = \"azure\"\nfamily = [\"ndv6\"]\n";
        let msg = parse_profile("f.toml", text).unwrap_err().to_string();
        assert!(
            msg.starts_with("profile f.toml:4: unknown instance family \"ndv6\""),
            "{msg}"
        );
        let text = "description = \"x\"\n[match]\nvendor = \"aws\"\nfamily = [\"p6-b200\"]\n";
        parse_profile("aws.toml", text).expect("an AWS family from DMI");

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
}
