//! Slurm's network topology files, pure parse and write:
//!
//! - topology.conf (topology.conf(5)), tree form (`SwitchName= Switches= Nodes=
//!   LinkSpeed=`) or block form (`BlockName= Nodes=`, `BlockSizes=`): one topology;
//! - topology.yaml (topology.yaml(5), Slurm 25.05+): a list of named topologies, each
//!   `tree` (`switches: [{switch, children, nodes}]`), `block` (`block_sizes`, `blocks:
//!   [{block, nodes}]`) or `flat: true`, one of them `cluster_default`.
//!
//! Node and switch lists are hostlists (bounded by [`MAX_NODES`]). Nodes are held as
//! parsed ([`Hostlist`], expanded only on demand: the placement check finds a step's few
//! nodes among 16k without making the others), child switches expanded; the writers
//! compress them again ([`hostlist::compress_sorted`]).
//! Every parsed or written topology passes [`validate`], the checks slurmctld would
//! otherwise make fatal at start-up (26.05 exits on a bad topology.yaml entry).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use serde::{Deserialize, Serialize};

use std::borrow::Cow;

use super::hostlist::{self, Hostlist, HostlistError};
use crate::text::printable;

/// Most nodes (or switches) one list may name: larger than any cloud cluster today, small
/// enough that a hostile `n[0-4294967295]` costs bounded memory.
pub const MAX_NODES: u64 = 1 << 20;

/// Slurm's limit on a switch name (topology.yaml(5): "cannot be longer than 64").
pub const MAX_NAME: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// topology.yaml's `topology:`; topology.conf has no name (parsed as "default").
    pub name: String,
    pub cluster_default: bool,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Tree(Vec<Switch>),
    Block(Blocks),
    Flat,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Switch {
    pub name: String,
    /// Child switches (`Switches=` / `children:`), expanded.
    pub children: Vec<String>,
    /// Nodes of a leaf switch.
    pub nodes: Hostlist,
    /// topology.conf's optional `LinkSpeed=` (topology.yaml has none).
    pub link_speed: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Blocks {
    /// `BlockSizes=` / `block_sizes:`; empty: Slurm's default.
    pub sizes: Vec<u32>,
    pub blocks: Vec<Block>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub name: String,
    pub nodes: Hostlist,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    // Names and messages quote the input, which may hold control characters (a YAML
    // name folded over lines): escaped, so an error stays one line.
    #[error("topology.conf line {line}: {}", printable(message))]
    Conf { line: usize, message: String },
    #[error("topology.yaml: {}", printable(.0))]
    Yaml(String),
    #[error("topology {}: {}", printable(topology), printable(message))]
    Invalid { topology: String, message: String },
}

fn invalid(t: &Topology, message: String) -> TopologyError {
    TopologyError::Invalid {
        topology: t.name.clone(),
        message,
    }
}

fn expand(text: &str) -> Result<Vec<String>, HostlistError> {
    hostlist::expand_bounded(text, MAX_NODES)
}

fn parse_nodes(text: &str) -> Result<Hostlist, HostlistError> {
    Hostlist::parse_bounded(text, MAX_NODES)
}

/// Parse topology.conf (either form; mixing them is an error, as Slurm loads one plugin).
pub fn parse_conf(text: &str) -> Result<Topology, TopologyError> {
    let mut switches = Vec::new();
    let mut blocks = Blocks::default();
    let mut saw_block = false;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |message: String| TopologyError::Conf {
            line: line_no,
            message,
        };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut fields: Vec<(String, &str)> = Vec::new();
        for token in line.split_whitespace() {
            let (k, v) = token
                .split_once('=')
                .ok_or_else(|| err(format!("{token:?} is not Key=Value")))?;
            fields.push((k.to_ascii_lowercase(), v));
        }
        let first = fields[0].0.as_str();
        let get = |key: &str| fields.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
        let known: &[&str] = match first {
            "switchname" => &["switchname", "switches", "nodes", "linkspeed"],
            "blockname" => &["blockname", "nodes"],
            "blocksizes" => &["blocksizes"],
            other => return Err(err(format!("unknown entry {other:?}"))),
        };
        if let Some((k, _)) = fields.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            return Err(err(format!("{k:?} does not belong on a {first} line")));
        }
        let list = |key: &str| -> Result<Vec<String>, TopologyError> {
            match get(key) {
                Some(v) => expand(v).map_err(|e| err(format!("{key}: {e}"))),
                None => Ok(Vec::new()),
            }
        };
        let nodes = || -> Result<Hostlist, TopologyError> {
            match get("nodes") {
                Some(v) => parse_nodes(v).map_err(|e| err(format!("nodes: {e}"))),
                None => Ok(Hostlist::default()),
            }
        };
        match first {
            "switchname" => {
                let link_speed = get("linkspeed")
                    .map(|v| v.parse::<u64>())
                    .transpose()
                    .map_err(|_| err("LinkSpeed is not a number".into()))?;
                switches.push(Switch {
                    name: fields[0].1.to_string(),
                    children: list("switches")?,
                    nodes: nodes()?,
                    link_speed,
                });
            }
            "blockname" => {
                saw_block = true;
                blocks.blocks.push(Block {
                    name: fields[0].1.to_string(),
                    nodes: nodes()?,
                });
            }
            _ => {
                saw_block = true;
                blocks.sizes = fields[0]
                    .1
                    .split(',')
                    .map(|s| s.trim().parse::<u32>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| err("BlockSizes is not a list of numbers".into()))?;
            }
        }
        if !switches.is_empty() && saw_block {
            return Err(err("switch and block lines in one file".into()));
        }
    }
    let kind = if saw_block {
        Kind::Block(blocks)
    } else if switches.is_empty() {
        Kind::Flat
    } else {
        Kind::Tree(switches)
    };
    let t = Topology {
        name: "default".into(),
        cluster_default: true,
        kind,
    };
    validate(&t)?;
    Ok(t)
}

/// Write one topology as topology.conf, after `header` (comment lines, each written as
/// given: the caller's marker). A flat topology is the header alone.
pub fn write_conf(t: &Topology, header: &str) -> Result<String, TopologyError> {
    write_conf_in(t, header, hostlist::Form::ANY_SERIES)
}

/// [`write_conf`] with hostlists in `form`, the one the target series reads.
pub fn write_conf_in(
    t: &Topology,
    header: &str,
    form: hostlist::Form,
) -> Result<String, TopologyError> {
    validate(t)?;
    let mut out = String::from(header);
    let list = |names: &[String]| {
        hostlist::compress_sorted_for(names, form).map_err(|e| invalid(t, e.to_string()))
    };
    let nodes = |names: &Hostlist| {
        let names: Vec<Cow<str>> = names.names().collect();
        hostlist::compress_sorted_for(&names, form).map_err(|e| invalid(t, e.to_string()))
    };
    match &t.kind {
        Kind::Tree(switches) => {
            for s in switches {
                out.push_str(&format!("SwitchName={}", s.name));
                if !s.children.is_empty() {
                    out.push_str(&format!(" Switches={}", list(&s.children)?));
                }
                if !s.nodes.is_empty() {
                    out.push_str(&format!(" Nodes={}", nodes(&s.nodes)?));
                }
                if let Some(speed) = s.link_speed {
                    out.push_str(&format!(" LinkSpeed={speed}"));
                }
                out.push('\n');
            }
        }
        Kind::Block(b) => {
            for block in &b.blocks {
                out.push_str(&format!(
                    "BlockName={} Nodes={}\n",
                    block.name,
                    nodes(&block.nodes)?
                ));
            }
            if !b.sizes.is_empty() {
                let sizes: Vec<String> = b.sizes.iter().map(u32::to_string).collect();
                out.push_str(&format!("BlockSizes={}\n", sizes.join(",")));
            }
        }
        Kind::Flat => {}
    }
    Ok(out)
}

// topology.yaml's shape, as topology.yaml(5) documents it. Unknown keys are errors (a
// typo would otherwise silently drop a level); ring and torus3d are not modelled.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlTopology {
    topology: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    cluster_default: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tree: Option<YamlTree>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    block: Option<YamlBlocks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flat: Option<bool>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlTree {
    switches: Vec<YamlSwitch>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlSwitch {
    switch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    children: Option<NameList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nodes: Option<NameList>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlBlocks {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    block_sizes: Vec<u32>,
    blocks: Vec<YamlBlock>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlBlock {
    block: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nodes: Option<NameList>,
}

/// A hostlist string (what we write) or a YAML list of hostlists (accepted on read).
#[derive(Serialize)]
#[serde(untagged)]
enum NameList {
    One(String),
    Many(Vec<String>),
}

/// Read by the value's own type, not as `#[serde(untagged)]`: untagged buffers every
/// value before trying each variant, which was most of the placement check's parse of a
/// 16k-node topology.yaml (docs/measurements.md).
impl<'de> Deserialize<'de> for NameList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Names;
        impl<'de> serde::de::Visitor<'de> for Names {
            type Value = NameList;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a hostlist or a list of hostlists")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<NameList, E> {
                Ok(NameList::One(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<NameList, E> {
                Ok(NameList::One(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<NameList, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(NameList::Many(names))
            }
        }
        d.deserialize_any(Names)
    }
}

impl NameList {
    fn expand(&self) -> Result<Vec<String>, HostlistError> {
        Ok(self.parse()?.to_vec())
    }

    fn parse(&self) -> Result<Hostlist, HostlistError> {
        match self {
            NameList::One(s) => parse_nodes(s),
            NameList::Many(v) => {
                let mut out = Hostlist::default();
                for s in v {
                    out.append(parse_nodes(s)?);
                    if out.len() as u64 > MAX_NODES {
                        return Err(HostlistError::TooMany(MAX_NODES));
                    }
                }
                Ok(out)
            }
        }
    }
}

/// Parse topology.yaml: its topologies in file order.
pub fn parse_yaml(text: &str) -> Result<Vec<Topology>, TopologyError> {
    let raw: Vec<YamlTopology> = serde_yaml_ng::from_str(&without_leading_comments(text))
        .map_err(|e| TopologyError::Yaml(e.to_string()))?;
    let mut out = Vec::new();
    for y in raw {
        let bad = |message: String| TopologyError::Invalid {
            topology: y.topology.clone(),
            message,
        };
        let list = |what: &str, name: &str, l: &Option<NameList>| match l {
            Some(l) => l.expand().map_err(|e| bad(format!("{what} {name}: {e}"))),
            None => Ok(Vec::new()),
        };
        let nodes = |what: &str, name: &str, l: &Option<NameList>| match l {
            Some(l) => l.parse().map_err(|e| bad(format!("{what} {name}: {e}"))),
            None => Ok(Hostlist::default()),
        };
        let kinds = [y.tree.is_some(), y.block.is_some(), y.flat == Some(true)];
        let kind = match (&y.tree, &y.block) {
            _ if kinds.iter().filter(|k| **k).count() != 1 => {
                return Err(bad("needs exactly one of tree, block, flat: true".into()));
            }
            (Some(tree), _) => Kind::Tree(
                tree.switches
                    .iter()
                    .map(|s| {
                        Ok(Switch {
                            name: s.switch.clone(),
                            children: list("switch", &s.switch, &s.children)?,
                            nodes: nodes("switch", &s.switch, &s.nodes)?,
                            link_speed: None,
                        })
                    })
                    .collect::<Result<_, TopologyError>>()?,
            ),
            (_, Some(block)) => Kind::Block(Blocks {
                sizes: block.block_sizes.clone(),
                blocks: block
                    .blocks
                    .iter()
                    .map(|b| {
                        Ok(Block {
                            name: b.block.clone(),
                            nodes: nodes("block", &b.block, &b.nodes)?,
                        })
                    })
                    .collect::<Result<_, TopologyError>>()?,
            }),
            _ => Kind::Flat,
        };
        let t = Topology {
            name: y.topology.clone(),
            cluster_default: y.cluster_default,
            kind,
        };
        validate(&t)?;
        out.push(t);
    }
    check_names(&out)?;
    Ok(out)
}

/// `text` with the comment lines before its first other line made empty (the line
/// breaks kept, so an error's line and column stay the file's). libyaml reads a comment
/// a character at a time: the header `conf topology` writes (a line per unit naming its
/// vendor id, 1,883 lines on 16k nodes) was a tenth of the placement check's parse.
/// Only lines of printable ASCII and tabs count: any other character (a BOM, a line
/// break YAML 1.1 reads inside a line such as CR or U+2028) ends the skip.
fn without_leading_comments(text: &str) -> Cow<'_, str> {
    let mut skipped = 0;
    let mut lines = 0;
    for line in text.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        let body = body.strip_suffix('\r').unwrap_or(body);
        let plain = body
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
        let rest = body.trim_start_matches([' ', '\t']);
        if !line.ends_with('\n') || !plain || !(rest.is_empty() || rest.starts_with('#')) {
            break;
        }
        skipped += line.len();
        lines += 1;
    }
    if skipped == 0 {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(lines + text.len() - skipped);
    out.extend(std::iter::repeat_n('\n', lines));
    out.push_str(&text[skipped..]);
    Cow::Owned(out)
}

/// Write topologies as topology.yaml after `header` (comment lines). LinkSpeed has no
/// place in topology.yaml and is dropped.
pub fn write_yaml(topologies: &[Topology], header: &str) -> Result<String, TopologyError> {
    write_yaml_in(topologies, header, hostlist::Form::ANY_SERIES)
}

/// [`write_yaml`] with hostlists in `form`.
pub fn write_yaml_in(
    topologies: &[Topology],
    header: &str,
    form: hostlist::Form,
) -> Result<String, TopologyError> {
    check_names(topologies)?;
    let mut raw = Vec::new();
    for t in topologies {
        validate(t)?;
        let list = |names: &[String]| -> Result<Option<NameList>, TopologyError> {
            if names.is_empty() {
                return Ok(None);
            }
            hostlist::compress_sorted_for(names, form)
                .map(|s| Some(NameList::One(s)))
                .map_err(|e| invalid(t, e.to_string()))
        };
        let nodes = |names: &Hostlist| -> Result<Option<NameList>, TopologyError> {
            if names.is_empty() {
                return Ok(None);
            }
            let names: Vec<Cow<str>> = names.names().collect();
            hostlist::compress_sorted_for(&names, form)
                .map(|s| Some(NameList::One(s)))
                .map_err(|e| invalid(t, e.to_string()))
        };
        let mut y = YamlTopology {
            topology: t.name.clone(),
            cluster_default: t.cluster_default,
            tree: None,
            block: None,
            flat: None,
        };
        match &t.kind {
            Kind::Tree(switches) => {
                y.tree = Some(YamlTree {
                    switches: switches
                        .iter()
                        .map(|s| {
                            Ok(YamlSwitch {
                                switch: s.name.clone(),
                                children: list(&s.children)?,
                                nodes: nodes(&s.nodes)?,
                            })
                        })
                        .collect::<Result<_, TopologyError>>()?,
                });
            }
            Kind::Block(b) => {
                y.block = Some(YamlBlocks {
                    block_sizes: b.sizes.clone(),
                    blocks: b
                        .blocks
                        .iter()
                        .map(|b| {
                            Ok(YamlBlock {
                                block: b.name.clone(),
                                nodes: nodes(&b.nodes)?,
                            })
                        })
                        .collect::<Result<_, TopologyError>>()?,
                });
            }
            Kind::Flat => y.flat = Some(true),
        }
        raw.push(y);
    }
    let body = serde_yaml_ng::to_string(&raw).map_err(|e| TopologyError::Yaml(e.to_string()))?;
    Ok(format!("{header}{body}"))
}

fn check_names(topologies: &[Topology]) -> Result<(), TopologyError> {
    let mut seen = HashSet::default();
    for t in topologies {
        if !seen.insert(t.name.as_str()) {
            return Err(invalid(t, "named twice".into()));
        }
    }
    Ok(())
}

/// A name Slurm can read back inside a hostlist and a `Key=Value` line.
fn check_name(t: &Topology, what: &str, name: &str) -> Result<(), TopologyError> {
    if name.is_empty()
        || name.len() > MAX_NAME
        || name
            .bytes()
            .any(|b| matches!(b, b'[' | b']' | b',' | b'#' | b'=') || !b.is_ascii_graphic())
    {
        return Err(invalid(
            t,
            format!(
                "{what} name {:?} is empty, longer than {MAX_NAME} or not plain ASCII without []#=,",
                name.chars().take(80).collect::<String>()
            ),
        ));
    }
    Ok(())
}

/// `BlockSizes` as slurmctld reads them (block_record.c `_read_topo_file`, 24.05+): the
/// first is the base block's node count, each one a multiple of it by a power of two no
/// larger than 2^15 ("Invalid BlockSizes value").
pub fn check_block_sizes(t: &Topology, sizes: &[u32]) -> Result<(), TopologyError> {
    let Some(&base) = sizes.first() else {
        return Ok(());
    };
    for &s in sizes {
        let ok = base > 0 && s % base == 0 && (s / base).is_power_of_two() && s / base <= 1 << 15;
        if !ok {
            return Err(invalid(
                t,
                format!(
                    "block size {s} is not a power-of-two multiple (at most 2^15) of the first size {base}"
                ),
            ));
        }
    }
    Ok(())
}

/// The checks slurmctld makes fatal: unique names, each node in one block (or leaf
/// switch), child switches that exist, one parent per switch and no cycles, leaf or
/// parent but not both, block sizes as [`check_block_sizes`], no block below the first.
pub fn validate(t: &Topology) -> Result<(), TopologyError> {
    check_name(t, "topology", &t.name)?;
    match &t.kind {
        Kind::Flat => Ok(()),
        Kind::Block(b) => {
            if b.blocks.is_empty() {
                return Err(invalid(t, "no blocks".into()));
            }
            let mut names = HashSet::default();
            for block in &b.blocks {
                check_name(t, "block", &block.name)?;
                if !names.insert(block.name.as_str()) {
                    return Err(invalid(t, format!("block {} named twice", block.name)));
                }
                if block.nodes.is_empty() {
                    return Err(invalid(t, format!("block {} has no nodes", block.name)));
                }
            }
            let units = b.blocks.iter().map(|b| (b.name.as_str(), &b.nodes));
            if let Some((n, other, this)) = repeated_node(units) {
                return Err(invalid(
                    t,
                    format!("node {n} is in blocks {other} and {this}"),
                ));
            }
            check_block_sizes(t, &b.sizes)?;
            // 24.05 and 24.11 exit on a block below the base (block_record.c
            // `block_record_validate`: "children count lower than bblock_node_cnt");
            // 25.05 dropped the check. Kept for every series.
            if let Some(&base) = b.sizes.first()
                && let Some(small) = b
                    .blocks
                    .iter()
                    .find(|x| (x.nodes.len() as u64) < u64::from(base))
            {
                return Err(invalid(
                    t,
                    format!(
                        "block {} has {} nodes, fewer than the smallest block size {base} (Slurm 24.05-24.11 refuse it)",
                        small.name,
                        small.nodes.len()
                    ),
                ));
            }
            Ok(())
        }
        Kind::Tree(switches) => {
            if switches.is_empty() {
                return Err(invalid(t, "no switches".into()));
            }
            let mut index = HashMap::default();
            for (i, s) in switches.iter().enumerate() {
                check_name(t, "switch", &s.name)?;
                if index.insert(s.name.as_str(), i).is_some() {
                    return Err(invalid(t, format!("switch {} named twice", s.name)));
                }
                if !s.children.is_empty() && !s.nodes.is_empty() {
                    return Err(invalid(
                        t,
                        format!("switch {} has both child switches and nodes", s.name),
                    ));
                }
            }
            let mut parent: HashMap<&str, &str> = HashMap::default();
            for s in switches {
                for c in &s.children {
                    if !index.contains_key(c.as_str()) {
                        return Err(invalid(
                            t,
                            format!("switch {} names child {c}, which is not defined", s.name),
                        ));
                    }
                    if let Some(p) = parent.insert(c, &s.name) {
                        return Err(invalid(
                            t,
                            format!("switch {c} is a child of both {p} and {}", s.name),
                        ));
                    }
                }
            }
            let leaves = switches.iter().map(|s| (s.name.as_str(), &s.nodes));
            if let Some((n, other, this)) = repeated_node(leaves) {
                return Err(invalid(
                    t,
                    format!("node {n} is on switches {other} and {this}"),
                ));
            }
            // One parent each: walking down from the parentless switches reaches every
            // switch exactly when there is no cycle.
            let mut seen = HashSet::default();
            let mut stack: Vec<&str> = switches
                .iter()
                .map(|s| s.name.as_str())
                .filter(|n| !parent.contains_key(n))
                .collect();
            while let Some(n) = stack.pop() {
                if seen.insert(n)
                    && let Some(&i) = index.get(n)
                {
                    stack.extend(switches[i].children.iter().map(String::as_str));
                }
            }
            if seen.len() != switches.len() {
                return Err(invalid(t, "switches form a cycle".into()));
            }
            Ok(())
        }
    }
}

/// The first node (in file order) that a unit repeats: (node, its first unit, this
/// unit). The index finds whether there is one without making the names; only then are
/// they walked, for the name and units slurmctld's message would give.
fn repeated_node<'t>(
    units: impl Iterator<Item = (&'t str, &'t Hostlist)> + Clone,
) -> Option<(String, &'t str, &'t str)> {
    if !hostlist::Index::new(units.clone().map(|(_, nodes)| nodes)).has_repeats() {
        return None;
    }
    let mut owner: HashMap<Cow<str>, &str> = HashMap::default();
    for (unit, nodes) in units {
        for n in nodes.names() {
            if let Some(other) = owner.insert(n.clone(), unit) {
                return Some((n.into_owned(), other, unit));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `slurm_topology` fuzz target: a YAML name folded over lines kept its
    /// newline, and the error quoting it was two lines.
    #[test]
    fn errors_quoting_a_multi_line_name_stay_one_line() {
        let e = parse_yaml("- topology: block\n \n    b 2    b 2-4  blc").expect_err("no kind");
        let line = e.to_string();
        assert!(!line.contains('\n'), "{line:?}");
        assert!(line.starts_with("topology block\\nb 2"), "{line}");
    }

    const TREE: &str = "# a comment\nSwitchName=s1 Nodes=n[1-2] LinkSpeed=100\nswitchname=s2 nodes=n[3-4]\nSwitchName=top Switches=s[1-2]\n";
    const BLOCK: &str = "BlockName=b1 Nodes=gpu[001-018]\nBlockName=b2 Nodes=gpu[019-036] # rack 2\nBlockSizes=18,36\n";

    #[test]
    fn conf_tree_and_block_round_trip() {
        let t = parse_conf(TREE).expect("valid");
        let Kind::Tree(s) = &t.kind else {
            panic!("tree expected")
        };
        assert_eq!(s[0].nodes, vec!["n1", "n2"]);
        assert_eq!(s[0].link_speed, Some(100));
        assert_eq!(s[2].children, vec!["s1", "s2"]);
        let text = write_conf(&t, "# marker\n").expect("writes");
        assert_eq!(
            text,
            "# marker\nSwitchName=s1 Nodes=n[1-2] LinkSpeed=100\nSwitchName=s2 Nodes=n[3-4]\nSwitchName=top Switches=s[1-2]\n"
        );
        assert_eq!(parse_conf(&text).expect("reparses"), t);

        let b = parse_conf(BLOCK).expect("valid");
        let text = write_conf(&b, "").expect("writes");
        assert_eq!(
            text,
            "BlockName=b1 Nodes=gpu[001-018]\nBlockName=b2 Nodes=gpu[019-036]\nBlockSizes=18,36\n"
        );
        assert_eq!(parse_conf(&text).expect("reparses"), b);
        assert_eq!(parse_conf("# nothing\n").expect("flat").kind, Kind::Flat);
    }

    #[test]
    fn conf_errors_name_the_line() {
        let cases = [
            ("SwitchName=s1 Nodes=n[1-2\n", "line 1"),
            ("BlockName=b1 Nodes=n1\nSwitchName=s1 Nodes=n2\n", "line 2"),
            ("Frobnicate=1\n", "unknown entry"),
            ("BlockName=b1 Switches=s1\n", "does not belong"),
            (
                "BlockName=b1 Nodes=n1\nBlockName=b2 Nodes=n1\n",
                "node n1 is in blocks b1 and b2",
            ),
            ("SwitchName=s1 Switches=s9\n", "not defined"),
            (
                "SwitchName=a Switches=b\nSwitchName=b Switches=a\n",
                "cycle",
            ),
            (
                "BlockName=b1 Nodes=n[1-4]\nBlockSizes=4,12\n",
                "power-of-two",
            ),
            (
                "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n5\nBlockSizes=4\n",
                "block b2 has 1 nodes",
            ),
            ("SwitchName=s1 Nodes=n[0-4294967295]\n", "line 1"),
            ("SwitchName Nodes=n1\n", "line 1"),
        ];
        for (text, want) in cases {
            let e = parse_conf(text).expect_err(text).to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn yaml_several_topologies_round_trip() {
        let text = "\
- topology: fabric
  cluster_default: true
  tree:
    switches:
      - switch: spine
        children: leaf[1-2]
      - switch: leaf1
        nodes: n[1-2]
      - switch: leaf2
        nodes: [n3, \"n[4-5]\"]
- topology: nvl
  block:
    block_sizes: [2, 4]
    blocks:
      - block: b1
        nodes: n[1-2]
      - block: b2
        nodes: n[3-4]
- topology: none
  flat: true
";
        let ts = parse_yaml(text).expect("valid");
        assert_eq!(ts.len(), 3);
        assert!(ts[0].cluster_default);
        let Kind::Tree(s) = &ts[0].kind else {
            panic!("tree expected")
        };
        assert_eq!(s[2].nodes, vec!["n3", "n4", "n5"]);
        let written = write_yaml(&ts, "# marker\n").expect("writes");
        assert!(
            written.starts_with("# marker\n- topology: fabric\n"),
            "{written}"
        );
        assert!(written.contains("nodes: n[3-5]"), "{written}");
        assert_eq!(parse_yaml(&written).expect("reparses"), ts);
    }

    /// The header's comments are skipped before libyaml reads the file; an error's line
    /// and column are still the file's, and a line break YAML reads inside a comment
    /// line (CR, U+2028) ends the skip, so the text after it is still read.
    #[test]
    fn leading_comments_are_skipped_keeping_line_numbers() {
        let body = "- topology: f\n  flat: true\n";
        let header = "# one\n\n  # two\t\r\n";
        let skipped = without_leading_comments(&format!("{header}{body}")).into_owned();
        assert_eq!(skipped, format!("\n\n\n{body}"));
        assert_eq!(parse_yaml(&format!("{header}{body}")), parse_yaml(body));
        let bad = "# c\n# d\n- topology: [\n";
        let plain = "\n\n- topology: [\n";
        assert_eq!(parse_yaml(bad), parse_yaml(plain));
        let e = parse_yaml(bad).expect_err("bad").to_string();
        assert!(e.contains("line 3") || e.contains("line 4"), "{e}");
        for hidden in [
            "# c\r- topology: f\n  flat: true\n",
            "# c\u{2028}- topology: f\n  flat: true\n",
        ] {
            assert_eq!(without_leading_comments(hidden), hidden);
        }
        assert_eq!(without_leading_comments("# only"), "# only");
    }

    #[test]
    fn yaml_errors_are_one_line() {
        let cases = [
            (
                "- topology: a\n  tree:\n    switches: []\n  flat: true\n",
                "exactly one",
            ),
            (
                "- topology: a\n  block:\n    blocks:\n      - block: b\n        nodes: n[1-\n",
                "block b",
            ),
            (
                "- topology: a\n  flat: true\n- topology: a\n  flat: true\n",
                "named twice",
            ),
            ("- topology: a\n  ring:\n    rings: []\n", "unknown field"),
            ("not: [a list", "topology.yaml"),
        ];
        for (text, want) in cases {
            let e = parse_yaml(text).expect_err(text).to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
