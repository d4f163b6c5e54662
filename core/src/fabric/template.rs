//! The tiny template language of profile values.
//!
//! A value is literal text with `{name}` placeholders; `{{` and `}}` stand for literal
//! braces. Nothing else: no conditionals, no filters, no arithmetic. Vendors publish
//! lists of device names, and that is all a profile needs to compute.
//!
//! Node-wide placeholders (allowed in `scope = "node"` and `scope = "rank"` values):
//!
//! | name                  | expands to                                                        |
//! |-----------------------|-------------------------------------------------------------------|
//! | `fabric_rdma_names`   | RDMA device names of the node's fabric NICs, comma separated      |
//! | `fabric_rdma_ports`   | the same as `dev:port` for every port (`mlx5_0:1,mlx5_1:1`)       |
//! | `fabric_netdevs`      | netdev names of the node's fabric NICs (gVNICs on GCP A3 High)    |
//! | `host_netdevs`        | netdev names of the NICs that are not fabric NICs (eth0, enp0s12) |
//! | `fabric_count`        | the number of fabric NICs                                          |
//!
//! Per-rank placeholders (only in `scope = "rank"` values):
//!
//! | name               | expands to                                                  |
//! |--------------------|-------------------------------------------------------------|
//! | `rank`             | the local rank number                                       |
//! | `rank_rdma_names`  | RDMA names of the rank's NICs                               |
//! | `rank_rdma_ports`  | the rank's NICs as `dev:port` (UCX_NET_DEVICES form)        |
//! | `rank_netdevs`     | netdev names of the rank's NICs                             |
//! | `rank_gpu_minors`  | /dev/nvidiaN minor numbers of the rank's GPUs               |
//!
//! A placeholder whose fact is empty or unknown (no RDMA NICs, no netdev names) makes the
//! whole variable unset rather than exported half-empty: `NCCL_IB_HCA==` would be worse
//! than no `NCCL_IB_HCA` at all.

use std::fmt;

/// Where a variable applies: the same value on every rank of the node, or one per rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    #[default]
    Node,
    Rank,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Node => "node",
            Scope::Rank => "rank",
        })
    }
}

pub const NODE_PLACEHOLDERS: &[&str] = &[
    "fabric_rdma_names",
    "fabric_rdma_ports",
    "fabric_netdevs",
    "host_netdevs",
    "fabric_count",
];
pub const RANK_PLACEHOLDERS: &[&str] = &[
    "rank",
    "rank_rdma_names",
    "rank_rdma_ports",
    "rank_netdevs",
    "rank_gpu_minors",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    #[error("unclosed '{{' at byte {0}")]
    Unclosed(usize),
    #[error("stray '}}' at byte {0} (write '}}}}' for a literal brace)")]
    StrayClose(usize),
    #[error("unknown placeholder {{{name}}}; known: {known}")]
    Unknown { name: String, known: String },
    #[error("placeholder {{{0}}} is per-rank and cannot appear in a node-wide value")]
    RankInNode(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece<'a> {
    Text(String),
    Name(&'a str),
}

fn parse(template: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut out = Vec::new();
    let mut text = String::new();
    let bytes = template.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' if bytes.get(i + 1) == Some(&b'{') => {
                text.push('{');
                i += 2;
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => {
                text.push('}');
                i += 2;
            }
            b'{' => {
                let end = template[i + 1..]
                    .find('}')
                    .ok_or(TemplateError::Unclosed(i))?
                    + i
                    + 1;
                if !text.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut text)));
                }
                out.push(Piece::Name(template[i + 1..end].trim()));
                i = end + 1;
            }
            b'}' => return Err(TemplateError::StrayClose(i)),
            _ => {
                // Copy one whole UTF-8 character.
                let ch = template[i..].chars().next().unwrap_or('\u{fffd}');
                text.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// Check a template at load time: syntax, known names, and no per-rank name in a
/// node-wide value.
pub fn check(template: &str, scope: Scope) -> Result<(), TemplateError> {
    for piece in parse(template)? {
        if let Piece::Name(name) = piece {
            let node = NODE_PLACEHOLDERS.contains(&name);
            let rank = RANK_PLACEHOLDERS.contains(&name);
            if !node && !rank {
                let known = NODE_PLACEHOLDERS
                    .iter()
                    .chain(RANK_PLACEHOLDERS)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(TemplateError::Unknown {
                    name: name.to_string(),
                    known,
                });
            }
            if rank && scope == Scope::Node {
                return Err(TemplateError::RankInNode(name.to_string()));
            }
        }
    }
    Ok(())
}

/// The placeholder names a template uses, in order.
pub fn names(template: &str) -> Result<Vec<String>, TemplateError> {
    Ok(parse(template)?
        .into_iter()
        .filter_map(|p| match p {
            Piece::Name(n) => Some(n.to_string()),
            Piece::Text(_) => None,
        })
        .collect())
}

/// Expand a template. `lookup` answers a placeholder with its text, or `None` / `""` when
/// the fact is unknown or empty; then the whole value is `Ok(None)` (leave it unset).
pub fn expand(
    template: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, TemplateError> {
    let mut out = String::new();
    for piece in parse(template)? {
        match piece {
            Piece::Text(t) => out.push_str(&t),
            Piece::Name(name) => match lookup(name) {
                Some(v) if !v.is_empty() => out.push_str(&v),
                _ => return Ok(None),
            },
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(name: &str) -> Option<String> {
        match name {
            "fabric_rdma_names" => Some("mlx5_0,mlx5_1".into()),
            "rank_rdma_ports" => Some("mlx5_0:1".into()),
            "fabric_netdevs" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_placeholders_and_escapes() {
        assert_eq!(
            expand("={fabric_rdma_names}", &facts).unwrap().as_deref(),
            Some("=mlx5_0,mlx5_1")
        );
        assert_eq!(
            expand("{{x}} {rank_rdma_ports}", &facts)
                .unwrap()
                .as_deref(),
            Some("{x} mlx5_0:1")
        );
        assert_eq!(expand("plain", &facts).unwrap().as_deref(), Some("plain"));
    }

    #[test]
    fn empty_fact_leaves_variable_unset() {
        assert_eq!(expand("{fabric_netdevs}", &facts).unwrap(), None);
        assert_eq!(expand("x{rank_gpu_minors}", &facts).unwrap(), None);
    }

    #[test]
    fn check_rejects_bad_templates() {
        assert!(matches!(
            check("{nope}", Scope::Rank),
            Err(TemplateError::Unknown { .. })
        ));
        assert_eq!(
            check("{rank}", Scope::Node),
            Err(TemplateError::RankInNode("rank".into()))
        );
        assert_eq!(check("a{b", Scope::Node), Err(TemplateError::Unclosed(1)));
        assert_eq!(check("a}b", Scope::Node), Err(TemplateError::StrayClose(1)));
        assert!(check("={fabric_rdma_names}", Scope::Node).is_ok());
        assert!(check("{rank_rdma_ports}", Scope::Rank).is_ok());
    }
}
