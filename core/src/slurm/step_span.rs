//! Does a multi-node step stay inside one placement unit of the cluster's topology?
//! Pure: the plugin's node-side placement backstop (issue 10 item 5) reads the files and
//! the step's node list, this decides and words the message.
//!
//! The unit is the innermost one Slurm places a job in:
//! - block form: a block (`BlockName=` / `blocks:`), what `--segment` keeps a job inside;
//! - tree form: a leaf switch (a switch with `Nodes=`), what `--switches=1` asks for; or,
//!   with a configured switch level N ([`span_within`]; topology.conf has no place for
//!   one, so it is the admin's setting), one switch of level N or below;
//! - flat (topology.yaml `flat: true`): nothing to check.
//!
//! topology.yaml holds several topologies; the one checked is the one the step's
//! partition selects (slurm.conf `PartitionName=... Topology=NAME`, Slurm 25.05+), else
//! `cluster_default`, else the first: what slurmctld places that partition's jobs by.

// Fx: the keys are node and switch names from root-owned files, not an attacker's choice.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::hostlist;
use super::topology::{Kind, Switch, Topology};

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
    /// A switch of this tree level (1 and up) or below it ([`span_within`]).
    Switch(u32),
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

/// The unit `node` is placed in: a block, or the tree switch of [`span_within`]'s
/// `switch_level`; `None` when `t` is flat or does not name the node. A node in two
/// units is one slurmctld rejects; the first counts.
pub fn unit_of<'t>(t: &'t Topology, node: &str, switch_level: u32) -> Option<(Unit, &'t str)> {
    let wanted = HashSet::from_iter([node]);
    let (unit, of_node) = node_units(t, switch_level, &wanted)?;
    of_node.get(node).map(|name| (unit, *name))
}

/// Where each of `nodes` sits in `t`, the unit being a block or a leaf switch: the
/// plugin's check ([`span_within`] at switch level 0).
pub fn span(t: &Topology, nodes: &[String]) -> Span {
    span_within(t, nodes, 0)
}

/// Where each of `nodes` sits in `t` when a step may span switches up to `switch_level`
/// of the tree: level 0 is a leaf switch (a switch with `Nodes=`), a switch's level is
/// one more than its highest child's, as topology/tree counts them (what
/// `--switches=1` bounds at level 0). The unit of a node is the highest switch above
/// its leaf whose level is at most `switch_level`; the step fits when all its nodes
/// share one. Blocks and flat topologies have no levels: the level changes nothing.
pub fn span_within(t: &Topology, nodes: &[String], switch_level: u32) -> Span {
    let wanted: HashSet<&str> = nodes.iter().map(String::as_str).collect();
    let Some((unit, of_node)) = node_units(t, switch_level, &wanted) else {
        return Span::Fits;
    };
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

/// The unit in `t` of each `wanted` node it names (a block, or the tree switch of
/// [`span_within`]'s `switch_level`); `None` for a flat topology. A node in two units is
/// one slurmctld rejects; the first one counts. Only the step's few nodes are looked up
/// ([`hostlist::Index`]): making all 16k names was a third of the placement check
/// (docs/measurements.md).
fn node_units<'t, 'n>(
    t: &'t Topology,
    switch_level: u32,
    wanted: &HashSet<&'n str>,
) -> Option<(Unit, HashMap<&'n str, &'t str>)> {
    match &t.kind {
        Kind::Flat => None,
        Kind::Block(b) => {
            let index = hostlist::Index::new(b.blocks.iter().map(|b| &b.nodes));
            let of_node = wanted
                .iter()
                .filter_map(|&n| Some((n, b.blocks[index.find(n)?].name.as_str())))
                .collect();
            Some((Unit::Block, of_node))
        }
        Kind::Tree(switches) => {
            let unit = match switch_level {
                0 => Unit::LeafSwitch,
                level => Unit::Switch(level),
            };
            Some((unit, tree_units(switches, switch_level, wanted)))
        }
    }
}

/// Each node's unit in a tree: its leaf switch, raised to the parent while the parent's
/// level is at most `max_level`.
fn tree_units<'t, 'n>(
    switches: &'t [Switch],
    max_level: u32,
    wanted: &HashSet<&'n str>,
) -> HashMap<&'n str, &'t str> {
    let by_name: HashMap<&str, &Switch> = switches.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut parent: HashMap<&str, &str> = HashMap::default();
    for s in switches {
        for c in &s.children {
            parent.entry(c.as_str()).or_insert(s.name.as_str());
        }
    }
    // Level 0 raises no leaf (every parent is level 1 or more): nothing to count.
    let levels = if max_level == 0 {
        HashMap::default()
    } else {
        switch_levels(switches, &by_name, &parent)
    };
    let index = hostlist::Index::new(switches.iter().map(|s| &s.nodes));
    // The unit of each leaf met, raised once.
    let mut raised: HashMap<usize, &str> = HashMap::default();
    let mut of_node = HashMap::default();
    for &n in wanted {
        let Some(leaf) = index.find(n) else {
            continue;
        };
        let unit = *raised.entry(leaf).or_insert_with(|| {
            let mut unit = switches[leaf].name.as_str();
            // Bounded by the switch count: a cycle (which validate refuses) cannot loop.
            for _ in 0..switches.len() {
                match parent.get(unit) {
                    Some(p) if levels.get(p).is_some_and(|l| *l <= max_level) => unit = p,
                    _ => break,
                }
            }
            unit
        });
        of_node.insert(n, unit);
    }
    of_node
}

/// Each switch's level (0 for one without child switches), without recursion: a
/// root-owned topology.conf may chain 100k switches, deeper than slurmstepd's stack
/// would take. Walking down from the parentless switches lists each switch after its
/// parent, so the reverse order meets every child before its parent. Switches that
/// walk does not reach (a cycle, which validate refuses) have no level: never raised to.
fn switch_levels<'t>(
    switches: &'t [Switch],
    by_name: &HashMap<&str, &'t Switch>,
    parent: &HashMap<&str, &str>,
) -> HashMap<&'t str, u32> {
    let mut order: Vec<&Switch> = switches
        .iter()
        .filter(|s| !parent.contains_key(s.name.as_str()))
        .collect();
    let mut listed: HashSet<&str> = order.iter().map(|s| s.name.as_str()).collect();
    let mut next = 0;
    while let Some(s) = order.get(next).copied() {
        next += 1;
        for c in &s.children {
            if let Some(child) = by_name.get(c.as_str())
                && listed.insert(child.name.as_str())
            {
                order.push(child);
            }
        }
    }
    let mut levels: HashMap<&str, u32> = HashMap::default();
    for s in order.iter().rev() {
        let level = s
            .children
            .iter()
            .filter_map(|c| levels.get(c.as_str()))
            .map(|l| l.saturating_add(1))
            .max()
            .unwrap_or(0);
        levels.insert(s.name.as_str(), level);
    }
    levels
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
                    "placement blocks".to_string(),
                    "one block".to_string(),
                    "try --switches=1 or --segment",
                ),
                Unit::LeafSwitch => (
                    "leaf switches".to_string(),
                    "one leaf switch".to_string(),
                    "try --switches=1",
                ),
                Unit::Switch(level) => (
                    format!("level-{level} switches"),
                    format!("one level-{level} switch"),
                    "try --switches=1",
                ),
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
        assert_eq!(unit_of(&t, "h3", 0), Some((Unit::LeafSwitch, "s2")));
        assert_eq!(unit_of(&t, "x1", 0), None);
        assert_eq!(span(&t, &nodes("h[1-2]")), Span::Fits);
        let s = span(&t, &nodes("h[2-3]"));
        assert_eq!(
            reason(&s).as_deref(),
            Some(
                "step spans 2 leaf switches: s1=[h2] s2=[h3]; strict placement needs one leaf switch (try --switches=1)"
            )
        );
    }

    /// Two pods of two leaves each under one spine: level 0 leaves, level 1 pods, level 2
    /// the spine.
    const PODS: &str = "SwitchName=l1 Nodes=h[1-2]\nSwitchName=l2 Nodes=h[3-4]\nSwitchName=l3 Nodes=h[5-6]\nSwitchName=l4 Nodes=h[7-8]\nSwitchName=p1 Switches=l[1-2]\nSwitchName=p2 Switches=l[3-4]\nSwitchName=spine Switches=p[1-2]\n";

    #[test]
    fn a_switch_level_lets_a_step_span_leaves_under_one_switch() {
        let t = parse_conf(PODS).expect("conf");
        // Level 0 is the leaf check itself.
        assert_eq!(
            span_within(&t, &nodes("h[2-3]"), 0),
            span(&t, &nodes("h[2-3]"))
        );
        assert!(matches!(span(&t, &nodes("h[2-3]")), Span::Spans { .. }));
        // Level 1: one pod is fine, two pods are not, named by pod.
        assert_eq!(span_within(&t, &nodes("h[1-4]"), 1), Span::Fits);
        let s = span_within(&t, &nodes("h[3-6]"), 1);
        assert_eq!(
            reason(&s).as_deref(),
            Some(
                "step spans 2 level-1 switches: p1=[h[3-4]] p2=[h[5-6]]; strict placement needs one level-1 switch (try --switches=1)"
            )
        );
        // Level 2 (the spine) and above: the whole tree.
        assert_eq!(span_within(&t, &nodes("h[1-8]"), 2), Span::Fits);
        assert_eq!(span_within(&t, &nodes("h[1-8]"), 9), Span::Fits);
        // Unknown nodes and blocks are as at level 0.
        assert!(matches!(
            span_within(&t, &nodes("h1,x1"), 1),
            Span::Unknown(_)
        ));
        let b = parse_conf(BLOCKS).expect("conf");
        assert_eq!(
            span_within(&b, &nodes("h[1-4]"), 3),
            span(&b, &nodes("h[1-4]"))
        );
    }

    #[test]
    fn an_uneven_tree_counts_levels_from_the_deepest_child() {
        // top has a leaf (l3) and a pod (p1) below it: top is level 2, so at level 1
        // the pod's nodes and l3's differ, at level 2 they share top.
        let text = "SwitchName=l1 Nodes=h1\nSwitchName=l2 Nodes=h2\nSwitchName=l3 Nodes=h3\nSwitchName=p1 Switches=l[1-2]\nSwitchName=top Switches=p1,l3\n";
        let t = parse_conf(text).expect("conf");
        assert_eq!(span_within(&t, &nodes("h[1-2]"), 1), Span::Fits);
        let Span::Spans { groups, .. } = span_within(&t, &nodes("h[1-3]"), 1) else {
            panic!("spans at level 1")
        };
        let names: Vec<&str> = groups.iter().map(|(g, _)| g.as_str()).collect();
        assert_eq!(names, ["p1", "l3"]);
        assert_eq!(span_within(&t, &nodes("h[1-3]"), 2), Span::Fits);
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
    fn a_long_switch_chain_is_counted_without_recursion() {
        // 100k switches in one chain above a leaf: recursion per level overflowed the
        // stack; at level 0 nothing is counted, above it the chain is walked in a loop.
        let depth = 100_000;
        let mut text = String::from("SwitchName=c0 Nodes=h[1-2]\nSwitchName=x Nodes=h3\n");
        for i in 1..depth {
            text.push_str(&format!("SwitchName=c{i} Switches=c{}\n", i - 1));
        }
        text.push_str(&format!("SwitchName=top Switches=c{},x\n", depth - 1));
        let t = parse_conf(&text).expect("conf");
        assert_eq!(unit_of(&t, "h1", 0), Some((Unit::LeafSwitch, "c0")));
        assert!(matches!(
            span_within(&t, &nodes("h[1-3]"), 0),
            Span::Spans { .. }
        ));
        assert_eq!(unit_of(&t, "h1", 5), Some((Unit::Switch(5), "c5")));
        // top is one above the chain's last switch; x (level 0) rises straight to it.
        assert_eq!(unit_of(&t, "h3", depth), Some((Unit::Switch(depth), "top")));
        assert_eq!(span_within(&t, &nodes("h[1-3]"), depth), Span::Fits);
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
