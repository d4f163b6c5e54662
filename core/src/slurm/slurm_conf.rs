//! The few slurm.conf facts the suite needs, pure: the topology plugin, the partitions
//! (their nodes and the `Topology=` a Slurm 25.05+ partition selects) and the `include`
//! lines a reader follows. Not a slurm.conf validator: every other line is skipped.
//!
//! Format (slurm.conf(5)): `Key=Value` pairs separated by blanks, keys case-insensitive,
//! `#` starts a comment, a value may be double-quoted; `include FILE` pulls in another
//! file (relative names are relative to slurm.conf's directory). A `PartitionName=`
//! line is one partition; `PartitionName=DEFAULT` sets defaults for those that follow.

use super::hostlist;

/// Most partitions one conf may describe; far above any real cluster's.
pub const MAX_PARTITIONS: usize = 4096;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlurmConf {
    /// `TopologyPlugin=` (`topology/tree`, `topology/block`, `topology/flat`, ...), the
    /// last one given.
    pub topology_plugin: Option<String>,
    /// `TopologyParam=`, the last one given.
    pub topology_param: Option<String>,
    pub partitions: Vec<Partition>,
    /// `include` targets, as written, in order.
    pub includes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    /// `Nodes=` as written (a hostlist, or `ALL`); `None` when not given.
    pub nodes: Option<String>,
    /// `Topology=`: the topology.yaml topology this partition is placed by.
    pub topology: Option<String>,
    pub default: bool,
}

impl Partition {
    /// Whether `node` is one of this partition's nodes. An unreadable list counts as
    /// not holding it (slurmctld would refuse the file).
    pub fn holds(&self, node: &str) -> bool {
        match self.nodes.as_deref() {
            Some(n) if n.eq_ignore_ascii_case("ALL") => true,
            Some(n) => hostlist::contains(n, node).unwrap_or(false),
            None => false,
        }
    }
}

/// Add one slurm.conf text's facts to `conf`, which holds what earlier files (slurm.conf
/// before its includes) already said, so includes extend it in file order.
pub fn parse_into(text: &str, conf: &mut SlurmConf) -> Result<(), String> {
    let mut defaults = Partition {
        name: String::new(),
        nodes: None,
        topology: None,
        default: false,
    };
    for (i, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        let (first, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        if first.eq_ignore_ascii_case("include") {
            let target = unquote(rest.trim());
            if target.is_empty() {
                return Err(format!("slurm.conf line {}: include names no file", i + 1));
            }
            conf.includes.push(target.to_string());
            continue;
        }
        let fields = fields(line);
        let Some((key, value)) = fields.first() else {
            continue;
        };
        match key.to_ascii_lowercase().as_str() {
            "topologyplugin" => conf.topology_plugin = Some(value.to_string()),
            "topologyparam" => conf.topology_param = Some(value.to_string()),
            "partitionname" => {
                let mut p = defaults.clone();
                p.name = value.to_string();
                for (k, v) in &fields[1..] {
                    match k.to_ascii_lowercase().as_str() {
                        "nodes" => p.nodes = Some(v.to_string()),
                        "topology" => p.topology = Some(v.to_string()),
                        "default" => p.default = v.eq_ignore_ascii_case("yes"),
                        _ => {}
                    }
                }
                if p.name.eq_ignore_ascii_case("DEFAULT") {
                    defaults = p;
                    defaults.default = false;
                    continue;
                }
                if conf.partitions.len() >= MAX_PARTITIONS {
                    return Err(format!(
                        "slurm.conf line {}: more than {MAX_PARTITIONS} partitions",
                        i + 1
                    ));
                }
                conf.partitions.push(p);
            }
            _ => {}
        }
    }
    Ok(())
}

/// [`parse_into`] for a text on its own.
pub fn parse(text: &str) -> Result<SlurmConf, String> {
    let mut conf = SlurmConf::default();
    parse_into(text, &mut conf)?;
    Ok(conf)
}

impl SlurmConf {
    pub fn partition(&self, name: &str) -> Option<&Partition> {
        self.partitions.iter().find(|p| p.name == name)
    }

    /// The partitions `node` belongs to, in file order.
    pub fn partitions_of(&self, node: &str) -> Vec<&Partition> {
        self.partitions.iter().filter(|p| p.holds(node)).collect()
    }
}

/// The text before an unquoted `#` (slurm.conf allows `\#` for a literal one).
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut quoted = false;
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b'#' if !quoted && (i == 0 || bytes[i - 1] != b'\\') => return &line[..i],
            _ => {}
        }
    }
    line
}

fn unquote(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v)
}

/// `Key=Value` pairs of a line; blanks inside double quotes stay in the value.
fn fields(line: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    let mut quoted = false;
    let bytes = line.as_bytes();
    for i in 0..=bytes.len() {
        let at_end = i == bytes.len();
        let blank = !at_end && bytes[i].is_ascii_whitespace();
        if !at_end && bytes[i] == b'"' {
            quoted = !quoted;
        }
        match (start, at_end || (blank && !quoted)) {
            (None, false) => start = Some(i),
            (Some(s), true) => {
                let token = &line[s..i];
                if let Some((k, v)) = token.split_once('=') {
                    out.push((k, unquote(v)));
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_plugin_partitions_and_includes() {
        let conf = parse(
            "# cluster\nTopologyPlugin=topology/block # blocks\nTopologyParam=SwitchAsNodeRank\n\
             include slurm_parallelcluster.conf\n\
             PartitionName=DEFAULT Topology=blk\n\
             PartitionName=train Nodes=h[1-4] Default=YES\n\
             partitionname=infer Nodes=ALL Topology=\"tree1\" MaxTime=INFINITE\n",
        )
        .expect("conf");
        assert_eq!(conf.topology_plugin.as_deref(), Some("topology/block"));
        assert_eq!(conf.topology_param.as_deref(), Some("SwitchAsNodeRank"));
        assert_eq!(conf.includes, ["slurm_parallelcluster.conf"]);
        let train = conf.partition("train").expect("train");
        assert!(train.default);
        assert_eq!(train.topology.as_deref(), Some("blk"), "from DEFAULT");
        assert_eq!(
            conf.partition("infer").and_then(|p| p.topology.as_deref()),
            Some("tree1")
        );
        let names: Vec<&str> = conf
            .partitions_of("h3")
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, ["train", "infer"]);
        let names: Vec<&str> = conf
            .partitions_of("x1")
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, ["infer"]);
    }

    #[test]
    fn includes_extend_in_file_order_and_bad_lines_are_named() {
        let mut conf = parse("TopologyPlugin=topology/tree\n").expect("first");
        parse_into(
            "TopologyPlugin=topology/block\nPartitionName=p Nodes=n1\n",
            &mut conf,
        )
        .expect("second");
        assert_eq!(conf.topology_plugin.as_deref(), Some("topology/block"));
        assert_eq!(conf.partitions.len(), 1);
        assert_eq!(
            parse("\ninclude   \n").expect_err("empty include"),
            "slurm.conf line 2: include names no file"
        );
        // A quoted `#` is not a comment; an unreadable Nodes= list holds nobody.
        let conf = parse("PartitionName=\"a#b\" Nodes=n[1-\n").expect("conf");
        assert_eq!(conf.partitions[0].name, "a#b");
        assert!(!conf.partitions[0].holds("n1"));
    }
}
