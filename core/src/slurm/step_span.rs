//! Does a multi-node step stay inside one placement unit of the cluster's topology?
//! Pure: the plugin's node-side placement backstop (issue 10 item 5) reads the files and
//! the step's node list, this decides and words the message.
//!
//! The unit is the innermost one Slurm places a job in:
//! - block form: a block (`BlockName=` / `blocks:`), what `--segment` keeps a job inside;
//! - tree form: a leaf switch (a switch with `Nodes=`), what `--switches=1` asks for. Upper
//!   switch levels are not checked: a step under one leaf is the only placement that
//!   needs no inter-switch hop, and a "configured switch level" has no place in
//!   topology.conf to come from;
//! - flat (topology.yaml `flat: true`): nothing to check.
//!
//! topology.yaml holds several topologies; the one checked is the one the step's
//! partition selects (slurm.conf `PartitionName=... Topology=NAME`, Slurm 25.05+), else
//! `cluster_default`, else the first: what slurmctld places that partition's jobs by.

use super::hostlist;
use super::topology::{Kind, Topology};

/// Most step nodes one check expands: a step list is Slurm's own, but it reaches the
/// plugin through the job environment, so a hostile `n[0-4294967295]` must stay cheap.
pub const MAX_STEP_NODES: u64 = 1 << 16;

/// Most units the message lists by name; the rest are counted.
const MAX_LISTED: usize = 8;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Span {
    /// One node, a flat topology, or every node in one unit.
    Fits,
    /// The step's nodes fall into several units: each unit and its step nodes, in the
    /// order the step list first names them.
    Spans {
        unit: Unit,
        groups: Vec<(String, Vec<String>)>,
    },
    /// Step nodes the topology does not know (in step order).
    Unknown(Vec<String>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Block,
    LeafSwitch,
}

/// The topology a cluster places jobs by: topology.yaml's `cluster_default` (else its
/// first topology), or topology.conf's one.
pub fn cluster_topology(topologies: &[Topology]) -> Option<&Topology> {
    topologies
        .iter()
        .find(|t| t.cluster_default)
        .or_else(|| topologies.first())
}

/// The topology a partition's jobs are placed by: the one it names (`Topology=`), else
/// the cluster's ([`cluster_topology`]). A name the file does not hold (slurmctld refuses
/// such a conf) also falls back to the cluster's.
pub fn partition_topology<'t>(
    topologies: &'t [Topology],
    named: Option<&str>,
) -> Option<&'t Topology> {
    named
        .and_then(|n| topologies.iter().find(|t| t.name == n))
        .or_else(|| cluster_topology(topologies))
}

/// Expand the step's node list (`SLURM_STEP_NODELIST`), bounded.
/// The list reaches the plugin through the job environment, and its names reach the
/// user's stderr and the slurmd log, so only printable ASCII names are taken.
pub fn step_nodes(list: &str) -> Result<Vec<String>, String> {
    let nodes = hostlist::expand_bounded(list.trim(), MAX_STEP_NODES).map_err(|e| {
        format!(
            "the step's node list cannot be read ({})",
            e.to_string().escape_default()
        )
    })?;
    if nodes
        .iter()
        .any(|n| !n.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err("the step's node list has a name that is not printable ASCII".into());
    }
    Ok(nodes)
}

/// A unit's name and its nodes.
type Members<'t> = (&'t str, &'t [String]);

/// The placement units of `t` with their nodes; `None` for a flat topology.
fn units(t: &Topology) -> Option<(Unit, Vec<Members<'_>>)> {
    match &t.kind {
        Kind::Flat => None,
        Kind::Block(b) => Some((
            Unit::Block,
            b.blocks
                .iter()
                .map(|b| (b.name.as_str(), b.nodes.as_slice()))
                .collect(),
        )),
        Kind::Tree(switches) => Some((
            Unit::LeafSwitch,
            switches
                .iter()
                .filter(|s| !s.nodes.is_empty())
                .map(|s| (s.name.as_str(), s.nodes.as_slice()))
                .collect(),
        )),
    }
}

/// The unit (block or leaf switch) `node` is placed in; `None` when `t` is flat or does
/// not name the node. A node in two units is one slurmctld rejects; the first counts.
pub fn unit_of<'t>(t: &'t Topology, node: &str) -> Option<(Unit, &'t str)> {
    let (unit, units) = units(t)?;
    units
        .into_iter()
        .find(|(_, members)| members.iter().any(|n| n == node))
        .map(|(name, _)| (unit, name))
}

/// Where each of `nodes` sits in `t`.
pub fn span(t: &Topology, nodes: &[String]) -> Span {
    let Some((unit, units)) = units(t) else {
        return Span::Fits;
    };
    let mut of_node = std::collections::HashMap::new();
    for (name, members) in &units {
        for n in *members {
            // A node in two units is one slurmctld rejects; the first one counts.
            of_node.entry(n.as_str()).or_insert(*name);
        }
    }
    let mut unknown = Vec::new();
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for n in nodes {
        match of_node.get(n.as_str()) {
            None => unknown.push(n.clone()),
            Some(u) => match groups.iter_mut().find(|(g, _)| g == u) {
                Some((_, members)) => members.push(n.clone()),
                None => groups.push(((*u).to_string(), vec![n.clone()])),
            },
        }
    }
    if !unknown.is_empty() {
        Span::Unknown(unknown)
    } else if groups.len() > 1 {
        Span::Spans { unit, groups }
    } else {
        Span::Fits
    }
}

/// The one-line reason for a step that does not fit (without the `gpu-affinity: `
/// prefix): `step spans 2 placement blocks: b1=[h[1-2]] b2=[h[3-4]]; strict placement
/// needs one block (try --switches=1 or --segment)`. `None` when it fits.
pub fn reason(span: &Span) -> Option<String> {
    match span {
        Span::Fits => None,
        Span::Unknown(nodes) => Some(format!(
            "step nodes {} are not in the cluster's topology; strict placement needs every node in one block",
            list(nodes)
        )),
        Span::Spans { unit, groups } => {
            let mut parts: Vec<String> = groups
                .iter()
                .take(MAX_LISTED)
                .map(|(u, nodes)| format!("{u}=[{}]", list(nodes)))
                .collect();
            if groups.len() > MAX_LISTED {
                parts.push(format!("and {} more", groups.len() - MAX_LISTED));
            }
            let (what, one, hint) = match unit {
                Unit::Block => (
                    "placement blocks",
                    "one block",
                    "try --switches=1 or --segment",
                ),
                Unit::LeafSwitch => ("leaf switches", "one leaf switch", "try --switches=1"),
            };
            Some(format!(
                "step spans {} {what}: {}; strict placement needs {one} ({hint})",
                groups.len(),
                parts.join(" ")
            ))
        }
    }
}

/// Names as one hostlist (Slurm's own names always compress; anything else is shown
/// comma-joined rather than lost).
fn list(nodes: &[String]) -> String {
    hostlist::compress(nodes).unwrap_or_else(|_| nodes.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::topology::{parse_conf, parse_yaml};

    const BLOCKS: &str = "BlockName=b1 Nodes=h[1-2]\nBlockName=b2 Nodes=h[3-4]\n";
    const TREE: &str =
        "SwitchName=s1 Nodes=h[1-2]\nSwitchName=s2 Nodes=h[3-4]\nSwitchName=top Switches=s[1-2]\n";

    fn nodes(list: &str) -> Vec<String> {
        step_nodes(list).expect("list")
    }

    #[test]
    fn one_block_fits() {
        let t = parse_conf(BLOCKS).expect("conf");
        assert_eq!(span(&t, &nodes("h[1-2]")), Span::Fits);
        assert_eq!(span(&t, &nodes("h3")), Span::Fits);
        assert_eq!(reason(&Span::Fits), None);
    }

    #[test]
    fn two_blocks_are_named_with_their_nodes() {
        let t = parse_conf(BLOCKS).expect("conf");
        let s = span(&t, &nodes("h[1-4]"));
        assert_eq!(
            reason(&s).as_deref(),
            Some(
                "step spans 2 placement blocks: b1=[h[1-2]] b2=[h[3-4]]; strict placement needs one block (try --switches=1 or --segment)"
            )
        );
        // Interleaved nodes are grouped by block, each block in first-seen order.
        let s = span(&t, &nodes("h3,h1,h4"));
        let Span::Spans { groups, .. } = s else {
            panic!("{s:?}")
        };
        assert_eq!(
            groups[0],
            ("b2".to_string(), vec!["h3".into(), "h4".into()])
        );
        assert_eq!(groups[1], ("b1".to_string(), vec!["h1".into()]));
    }

    #[test]
    fn unknown_nodes_are_named() {
        let t = parse_conf(BLOCKS).expect("conf");
        let s = span(&t, &nodes("h1,x[7-8]"));
        assert_eq!(s, Span::Unknown(vec!["x7".into(), "x8".into()]));
        assert!(
            reason(&s)
                .expect("reason")
                .starts_with("step nodes x[7-8] are not in")
        );
    }

    #[test]
    fn tree_form_needs_one_leaf_switch() {
        let t = parse_conf(TREE).expect("conf");
        assert_eq!(unit_of(&t, "h3"), Some((Unit::LeafSwitch, "s2")));
        assert_eq!(unit_of(&t, "x1"), None);
        assert_eq!(span(&t, &nodes("h[1-2]")), Span::Fits);
        let s = span(&t, &nodes("h[2-3]"));
        assert_eq!(
            reason(&s).as_deref(),
            Some(
                "step spans 2 leaf switches: s1=[h2] s2=[h3]; strict placement needs one leaf switch (try --switches=1)"
            )
        );
    }

    #[test]
    fn yaml_uses_the_cluster_default() {
        let yaml = "- topology: tree1\n  tree:\n    switches:\n      - switch: s1\n        nodes: h[1-4]\n- topology: blk\n  cluster_default: true\n  block:\n    blocks:\n      - block: b1\n        nodes: h[1-2]\n      - block: b2\n        nodes: h[3-4]\n";
        let all = parse_yaml(yaml).expect("yaml");
        let t = cluster_topology(&all).expect("one");
        assert_eq!(t.name, "blk");
        assert!(matches!(span(t, &nodes("h[1-4]")), Span::Spans { .. }));
        // A partition's own topology wins; an unknown name falls back.
        let tree = partition_topology(&all, Some("tree1")).expect("named");
        assert_eq!(tree.name, "tree1");
        assert_eq!(span(tree, &nodes("h[1-4]")), Span::Fits);
        assert_eq!(
            partition_topology(&all, Some("nope"))
                .expect("default")
                .name,
            "blk"
        );
        assert_eq!(partition_topology(&all, None).expect("default").name, "blk");
        let flat = parse_yaml("- topology: f\n  flat: true\n").expect("flat");
        let t = cluster_topology(&flat).expect("one");
        assert_eq!(span(t, &nodes("h[1-4]")), Span::Fits);
    }

    #[test]
    fn many_units_are_counted_and_the_list_is_bounded() {
        let text: String = (0..20)
            .map(|i| format!("BlockName=b{i} Nodes=h{i}\n"))
            .collect();
        let t = parse_conf(&text).expect("conf");
        let r = reason(&span(&t, &nodes("h[0-19]"))).expect("spans");
        assert!(r.starts_with("step spans 20 placement blocks"), "{r}");
        assert!(r.contains("and 12 more"), "{r}");
        assert!(step_nodes("n[0-4294967295]").is_err());
        let bad = step_nodes("h1,h\u{1b}[2J").expect_err("escape");
        assert!(!bad.contains('\u{1b}'), "{bad}");
    }
}
