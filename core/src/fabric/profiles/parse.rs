//! The profile file format (serde) and its checks: every value validated, every error
//! naming the file and line. Pure: file contents in, [`Profiles`] out.

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

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |t| t.matches('\n').count() + 1)
}

/// A `[match] fabric` entry: a NIC kind, or `none` for "no fabric NIC at all".
fn kind_from(text: &str) -> Option<Option<NicKind>> {
    match text {
        "none" => Some(None),
        kind => NicKind::parse(kind).map(Some),
    }
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
            let Some(vendor) = Vendor::parse(v.get_ref()) else {
                return Err(at(
                    v.span().start,
                    format!(
                        "unknown vendor {:?}: expected {}",
                        v.get_ref(),
                        Vendor::expected()
                    ),
                ));
            };
            Some(vendor.as_str().to_string())
        }
        None => None,
    };
    // A family detection never names would silently never match (`ndv6` for `ndv5`).
    // AWS families come from the DMI product name too, so an AWS profile may name any.
    if vendor.as_deref() != Some(Vendor::Aws.as_str()) {
        for f in &doc.rules.family {
            if !detect::family::ALL.contains(&f.get_ref().as_str()) {
                return Err(at(
                    f.span().start,
                    format!(
                        "unknown instance family {:?}: detection names {} (an AWS family from DMI needs vendor = \"aws\")",
                        f.get_ref(),
                        detect::family::ALL.join(", ")
                    ),
                ));
            }
        }
    }
    let fabric = doc
        .rules
        .fabric
        .iter()
        .map(|s| {
            kind_from(s.get_ref()).ok_or_else(|| {
                at(
                    s.span().start,
                    format!(
                        "unknown fabric kind {:?}: expected {}, or none",
                        s.get_ref(),
                        NicKind::expected()
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
                    "unknown NIC kind {:?}: expected {}",
                    s.get_ref(),
                    NicKind::expected()
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
            family: doc
                .rules
                .family
                .into_iter()
                .map(toml::Spanned::into_inner)
                .collect(),
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
