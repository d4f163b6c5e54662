//! The few slurm.conf facts the suite needs, pure: the topology plugin, the partitions
//! (their nodes and the `Topology=` a Slurm 25.05+ partition selects), the `include`
//! lines a reader follows, and the last `PlugStackConfig=` (for install), all in one
//! [`SlurmConf`] from [`parse`]. Not a slurm.conf validator: every other line is skipped.
//!
//! Read the way Slurm's own parser reads it: lines and comments are gres.conf's rule (the
//! same parser in Slurm: `#` starts a comment, `\#` is a literal `#`, a trailing `\`
//! continues a line); keys are letters and digits, matched case-insensitively; a line
//! holds several pairs, with spaces allowed around `=`; a value is one word or a
//! double-quoted string; a key set twice takes its last value (Slurm logs "specified more
//! than once, latest value used"). The pairs are read leniently, since slurm.conf holds
//! words such as `include FILE` that gres.conf's strict tokens refuse. `include FILE`
//! pulls in another file (relative names are relative to slurm.conf's directory); a
//! `PartitionName=` line is one partition; `PartitionName=DEFAULT` sets defaults for those
//! that follow.

use super::gres_conf::logical_lines;
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
    /// `PlugStackConfig=`, the last one given (in include order).
    pub plug_stack_config: Option<String>,
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
    for (line_no, line) in logical_lines(text) {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (first, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        if first.eq_ignore_ascii_case("include") {
            let target = unquote(rest.trim());
            if target.is_empty() {
                return Err(format!("slurm.conf line {line_no}: include names no file"));
            }
            conf.includes.push(target.to_string());
            continue;
        }
        let fields = pairs(line);
        let Some((key, value)) = fields.first() else {
            continue;
        };
        match key.to_ascii_lowercase().as_str() {
            "topologyplugin" => conf.topology_plugin = Some(value.clone()),
            "topologyparam" => conf.topology_param = Some(value.clone()),
            "partitionname" => {
                let mut p = defaults.clone();
                p.name = value.clone();
                for (k, v) in &fields[1..] {
                    match k.to_ascii_lowercase().as_str() {
                        "nodes" => p.nodes = Some(v.clone()),
                        "topology" => p.topology = Some(v.clone()),
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
                        "slurm.conf line {line_no}: more than {MAX_PARTITIONS} partitions"
                    ));
                }
                conf.partitions.push(p);
            }
            _ => {}
        }
        // A daemon-wide key may share its line with others (`SlurmctldHost=h1 PlugStackConfig=...`).
        if let Some((_, v)) = fields
            .iter()
            .rfind(|(k, _)| k.eq_ignore_ascii_case("PlugStackConfig"))
        {
            conf.plug_stack_config = Some(v.clone());
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

/// The `Key=Value` pairs of one logical line; words that are not pairs are skipped.
fn pairs(line: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        let key_len = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        let (key, after) = rest.split_at(key_len);
        let after = after.trim_start();
        match after.strip_prefix('=') {
            Some(value) if !key.is_empty() => {
                let value = value.trim_start();
                let (value, next) = match value.strip_prefix('"') {
                    Some(quoted) => match quoted.split_once('"') {
                        Some((v, next)) => (v, next),
                        None => (quoted, ""),
                    },
                    None => value.split_at(value.find(char::is_whitespace).unwrap_or(value.len())),
                };
                found.push((key.to_owned(), value.to_owned()));
                rest = next.trim_start();
            }
            // Not a pair: skip the word (`include FILE`, stray text).
            _ => {
                let word = rest.find(char::is_whitespace).unwrap_or(rest.len());
                rest = rest[word..].trim_start();
            }
        }
    }
    found
}

fn unquote(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last value of `key` in `text`, read by the tokenizer `parse` uses.
    fn value(text: &str, key: &str) -> Option<String> {
        logical_lines(text)
            .iter()
            .flat_map(|(_, line)| pairs(line))
            .filter(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
            .next_back()
    }

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
        // `\#` is a literal `#` (a quoted one still starts a comment, as in Slurm); an
        // unreadable Nodes= list holds nobody.
        let conf = parse("PartitionName=a\\#b Nodes=n[1-\n").expect("conf");
        assert_eq!(conf.partitions[0].name, "a#b");
        assert!(!conf.partitions[0].holds("n1"));
    }

    #[test]
    fn the_last_value_case_insensitive() {
        let text = "ClusterName=c1\nplugstackconfig=/a/plugstack.conf\n\
                    SlurmctldHost=h1 PlugStackConfig = /b/plugstack.conf # not /c\n";
        assert_eq!(
            value(text, "PlugStackConfig").as_deref(),
            Some("/b/plugstack.conf")
        );
        assert_eq!(value(text, "ClusterName").as_deref(), Some("c1"));
        assert_eq!(value(text, "PluginDir"), None);
        // The facts the reader keeps (slurm.conf, then its includes) say the same.
        let mut conf = parse(text).expect("conf");
        assert_eq!(conf.plug_stack_config.as_deref(), Some("/b/plugstack.conf"));
        parse_into("PlugStackConfig=/include/plugstack.conf\n", &mut conf).expect("include");
        assert_eq!(
            conf.plug_stack_config.as_deref(),
            Some("/include/plugstack.conf")
        );
    }

    #[test]
    fn comments_quotes_and_words_that_are_not_pairs() {
        let text = "# PlugStackConfig=/commented\n\
                    include /etc/slurm/nodes.conf\n\
                    PlugStackConfig=\"/etc/slurm/with space/plugstack.conf\" Other=1\n\
                    SlurmctldParameters=a\\#b\n";
        assert_eq!(
            value(text, "PlugStackConfig").as_deref(),
            Some("/etc/slurm/with space/plugstack.conf")
        );
        assert_eq!(value(text, "Other").as_deref(), Some("1"));
        assert_eq!(value(text, "SlurmctldParameters").as_deref(), Some("a#b"));
        assert_eq!(value(text, "include"), None);
        assert_eq!(
            value("Key=\"unterminated", "Key").as_deref(),
            Some("unterminated")
        );
        assert_eq!(value("=x Key=", "Key").as_deref(), Some(""));
        assert_eq!(
            value("A=1 \\\n  Key=continued\n", "Key").as_deref(),
            Some("continued")
        );
    }
}
