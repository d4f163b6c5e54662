//! Placement data -> Slurm topology: the clouds' own placement exports (and NVLink node
//! facts) turned into one path of shared units per Slurm node, outermost first, then
//! into topology.conf / topology.yaml trees and blocks ([`super::topology`]).
//!
//! Inputs, as the admin exports them (issue 10):
//! - aws: `aws ec2 describe-instance-topology` JSON, `{"Instances":[{"InstanceId",
//!   "NetworkNodes":[outermost..innermost], "CapacityBlockId"?}]}`; an UltraServer's
//!   capacity block is the innermost unit where present;
//! - oci: `{OCID: rdmaTopologyData}`: customerHPCIslandId > customerNetworkBlock >
//!   customerLocalBlock > customerGpuMemoryFabric (GB200/GB300 racks, where present);
//! - gcp: `{instance name: physical_host}`, `/cluster/rack/host` (A4X: `/block/subblock/
//!   host`): every component but the host is a shared unit;
//! - nvlink: node facts (`gpu-affinity conf node-facts --json`): `{"hostname", "gpus":
//!   [{"fabric": {"cluster_uuid", "clique_id"}}]}`, one object or an array per file; the
//!   NVLink clique is the unit, inside its cluster (the NVLink domain).
//!
//! NODEMAP has `NODENAME INSTANCE_ID` per line. Blocks are the innermost unit; the tree
//! has one switch per unit and a `root` over them when the top level has several.
//! Unit names are generated (`b1`, `s2_1`) since vendor ids (OCIDs) exceed Slurm's
//! 64-character names; a comment line per unit maps it back to the vendor's id.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::topology::{Block, Blocks, Kind, Switch, Topology};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Aws,
    Oci,
    Gcp,
    Nvlink,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Aws => "aws",
            Source::Oci => "oci",
            Source::Gcp => "gcp",
            Source::Nvlink => "nvlink",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("{file}: {message}")]
    Input { file: String, message: String },
    #[error("{file}: instance {id}: {message}")]
    Entry {
        file: String,
        id: String,
        message: String,
    },
    #[error("NODEMAP line {line}: {message}")]
    NodeMap { line: usize, message: String },
    #[error("node {node}: instance {id} is not in the {source_name} data")]
    Unknown {
        node: String,
        id: String,
        source_name: &'static str,
    },
    #[error("NODEMAP names no nodes")]
    Empty,
}

/// One Slurm node and its shared units, outermost first (never empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlace {
    pub node: String,
    pub path: Vec<String>,
}

/// Parse NODEMAP: `NODENAME INSTANCE_ID` per line, `#` comments, blank lines skipped.
/// A node or an instance named twice is an error (one of the two would be misplaced).
pub fn parse_nodemap(text: &str) -> Result<Vec<(String, String)>, PlacementError> {
    let mut out = Vec::new();
    let mut nodes = HashMap::new();
    let mut ids = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |message: String| PlacementError::NodeMap { line, message };
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let fields: Vec<&str> = content.split_whitespace().collect();
        let [node, id] = fields[..] else {
            return Err(err("expected NODENAME INSTANCE_ID".into()));
        };
        if node.bytes().any(|b| matches!(b, b'[' | b']' | b',')) {
            return Err(err(format!(
                "node name {node:?} is a hostlist, not one node"
            )));
        }
        if let Some(prev) = nodes.insert(node.to_string(), line) {
            return Err(err(format!("node {node} already mapped on line {prev}")));
        }
        if let Some(prev) = ids.insert(id.to_string(), line) {
            return Err(err(format!("instance {id} already mapped on line {prev}")));
        }
        out.push((node.to_string(), id.to_string()));
    }
    if out.is_empty() {
        return Err(PlacementError::Empty);
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AwsTopology {
    instances: Vec<AwsInstance>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AwsInstance {
    instance_id: String,
    #[serde(default)]
    network_nodes: Option<Vec<String>>,
    #[serde(default)]
    capacity_block_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OciRdma {
    #[serde(rename = "customerHPCIslandId", default)]
    hpc_island: Option<String>,
    #[serde(default)]
    customer_network_block: Option<String>,
    #[serde(default)]
    customer_local_block: Option<String>,
    #[serde(default)]
    customer_gpu_memory_fabric: Option<String>,
}

/// What a node knows about itself (`gpu-affinity conf node-facts --json`), the input of
/// `--from nvlink`: one writer and one reader share this type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFacts {
    pub hostname: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default)]
    pub gpus: Vec<GpuFacts>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFacts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
    /// Present only for a complete fabric with a non-zero cluster uuid ([`Fabric::from_nvml`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<Fabric>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fabric {
    pub cluster_uuid: String,
    pub clique_id: u32,
}

impl Fabric {
    /// NVML's GPU fabric info as a unit id: only when registration is complete and the
    /// cluster uuid is not all zeros (a GPU outside any NVLink domain reports zeros).
    pub fn from_nvml(
        state_complete: bool,
        cluster_uuid: [u8; 16],
        clique_id: u32,
    ) -> Option<Fabric> {
        if !state_complete || cluster_uuid == [0; 16] {
            return None;
        }
        let h: String = cluster_uuid.iter().map(|b| format!("{b:02x}")).collect();
        let uuid = format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        );
        Some(Fabric {
            cluster_uuid: uuid,
            clique_id,
        })
    }
}

/// The facts of `machine` (detection, GPUs in Slurm's order) with each GPU's fabric as
/// the caller read it (by PCI address; a node reader owns the NVML calls).
pub fn node_facts(
    machine: &crate::model::Machine,
    hostname: &str,
    fabrics: &HashMap<crate::pci::PciAddr, Fabric>,
) -> NodeFacts {
    let d = crate::fabric::detect(machine);
    NodeFacts {
        hostname: hostname.to_string(),
        vendor: Some(d.vendor.as_str().to_string()),
        instance_type: d.instance,
        gpus: machine
            .gpus_in_slurm_order()
            .into_iter()
            .map(|g| GpuFacts {
                pci: Some(g.pci.to_string()),
                minor: g.minor,
                fabric: fabrics.get(&g.pci).cloned(),
            })
            .collect(),
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FactsFile {
    Many(Vec<NodeFacts>),
    One(NodeFacts),
}

fn json<'a, T: Deserialize<'a>>(file: &str, text: &'a str) -> Result<T, PlacementError> {
    serde_json::from_str(text).map_err(|e| PlacementError::Input {
        file: file.to_string(),
        message: e.to_string(),
    })
}

/// An instance as the vendor files give it: the file it came from, and its path or
/// why it has none (an error only if the NODEMAP names it).
type Found = (String, Result<Vec<String>, String>);

/// Each instance's path from the vendor files (`(file name, text)`), keyed by instance
/// id. Only entries the NODEMAP names are checked, so an account-wide export with
/// instances of other clusters still works; a malformed entry of a mapped instance is
/// an error naming it.
fn instance_paths(
    source: Source,
    files: &[(String, String)],
) -> Result<HashMap<String, Found>, PlacementError> {
    let mut out: HashMap<String, Found> = HashMap::new();
    let mut put = |file: &str, id: String, path: Result<Vec<String>, String>| {
        let path = path.and_then(|p| {
            if p.iter().any(|c| c.trim().is_empty()) {
                Err("an empty unit id".to_string())
            } else if p.is_empty() {
                Err("no shared unit".to_string())
            } else {
                Ok(p)
            }
        });
        match out.get(&id) {
            Some((_, prev)) if *prev != path => Err(PlacementError::Entry {
                file: file.to_string(),
                id,
                message: "listed twice with different placement".into(),
            }),
            _ => {
                out.insert(id, (file.to_string(), path));
                Ok(())
            }
        }
    };
    for (file, text) in files {
        match source {
            Source::Aws => {
                let t: AwsTopology = json(file, text)?;
                for i in t.instances {
                    let mut path = i.network_nodes.unwrap_or_default();
                    let p = if path.is_empty() {
                        Err("no NetworkNodes (type without topology, or not running)".into())
                    } else {
                        if let Some(cb) = i.capacity_block_id.filter(|c| !c.is_empty()) {
                            path.push(cb);
                        }
                        Ok(path)
                    };
                    put(file, i.instance_id, p)?;
                }
            }
            Source::Oci => {
                let map: HashMap<String, OciRdma> = json(file, text)?;
                for (id, r) in map {
                    let p = match (r.hpc_island, r.customer_network_block, r.customer_local_block) {
                        (Some(a), Some(b), Some(c)) => {
                            let mut p = vec![a, b, c];
                            p.extend(r.customer_gpu_memory_fabric.filter(|f| !f.is_empty()));
                            Ok(p)
                        }
                        _ => Err("rdmaTopologyData lacks customerHPCIslandId, customerNetworkBlock or customerLocalBlock".into()),
                    };
                    put(file, id, p)?;
                }
            }
            Source::Gcp => {
                let map: HashMap<String, String> = json(file, text)?;
                for (id, host) in map {
                    let parts: Vec<&str> = host.split('/').collect();
                    let p = match parts.split_first() {
                        Some((&"", rest))
                            if rest.len() >= 2 && rest.iter().all(|c| !c.is_empty()) =>
                        {
                            Ok(rest[..rest.len() - 1]
                                .iter()
                                .map(|c| c.to_string())
                                .collect())
                        }
                        _ => Err(format!("physical_host {host:?} is not /cluster/rack/host")),
                    };
                    put(file, id, p)?;
                }
            }
            Source::Nvlink => {
                let facts = match json::<FactsFile>(file, text)? {
                    FactsFile::Many(v) => v,
                    FactsFile::One(f) => vec![f],
                };
                for f in facts {
                    let fabrics: Vec<&Fabric> =
                        f.gpus.iter().filter_map(|g| g.fabric.as_ref()).collect();
                    let p = match fabrics.split_first() {
                        None => Err(
                            "no GPU with a complete NVLink fabric (clusterUuid + cliqueId)"
                                .to_string(),
                        ),
                        Some((first, rest)) if rest.iter().any(|o| o != first) => {
                            Err("GPUs in different NVLink cliques".to_string())
                        }
                        Some(_) if fabrics.len() != f.gpus.len() => Err(format!(
                            "GPU {} has no complete NVLink fabric while others do",
                            f.gpus
                                .iter()
                                .find(|g| g.fabric.is_none())
                                .and_then(|g| g.pci.clone())
                                .unwrap_or_else(|| "?".into())
                        )),
                        Some((first, _)) => Ok(vec![
                            first.cluster_uuid.clone(),
                            format!("{}/clique{}", first.cluster_uuid, first.clique_id),
                        ]),
                    };
                    put(file, f.hostname, p)?;
                }
            }
        }
    }
    Ok(out)
}

/// Every NODEMAP node with its path, in NODEMAP order.
pub fn place(
    source: Source,
    files: &[(String, String)],
    nodemap: &str,
) -> Result<Vec<NodePlace>, PlacementError> {
    let map = parse_nodemap(nodemap)?;
    let paths = instance_paths(source, files)?;
    map.into_iter()
        .map(|(node, id)| match paths.get(&id) {
            None => Err(PlacementError::Unknown {
                node,
                id,
                source_name: source.name(),
            }),
            Some((file, Err(message))) => Err(PlacementError::Entry {
                file: file.clone(),
                id,
                message: format!("{message} (node {node})"),
            }),
            Some((_, Ok(path))) => Ok(NodePlace {
                node,
                path: path.clone(),
            }),
        })
        .collect()
}

fn comment(out: &mut String, name: &str, key: &[String]) {
    // Vendor ids come from files: keep the comment one line whatever they hold.
    let id: String = key
        .last()
        .map(|s| s.chars().filter(|c| !c.is_control()).collect())
        .unwrap_or_default();
    out.push_str(&format!("# {name} = {id}\n"));
}

/// Block topology: one block per innermost unit. Returns it and the `# bN = id` lines.
pub fn blocks(places: &[NodePlace], name: &str) -> (Topology, String) {
    // Keyed by the full path, so a rack id reused under two clusters stays two units.
    let mut index: HashMap<&[String], usize> = HashMap::new();
    let mut blocks: Vec<Block> = Vec::new();
    let mut notes = String::new();
    for p in places {
        let i = *index.entry(&p.path).or_insert_with(|| {
            let n = format!("b{}", blocks.len() + 1);
            comment(&mut notes, &n, &p.path);
            blocks.push(Block {
                name: n,
                nodes: Vec::new(),
            });
            blocks.len() - 1
        });
        blocks[i].nodes.push(p.node.clone());
    }
    let t = Topology {
        name: name.into(),
        cluster_default: false,
        kind: Kind::Block(Blocks {
            sizes: Vec::new(),
            blocks,
        }),
    };
    (t, notes)
}

/// Tree topology: a switch per unit at every level (`s<level>_<n>`), nodes on the
/// innermost, and `root` over the top level when it has more than one unit. Slurm takes
/// nodes on leaf switches only, so nodes whose path ends at a unit other nodes' paths
/// go below (an OCI GB200 node without `customerGpuMemoryFabric` beside ones with it)
/// get a leaf of their own under it, named for the same unit.
pub fn tree(places: &[NodePlace], name: &str) -> (Topology, String) {
    let mut index: HashMap<&[String], usize> = HashMap::new();
    let mut per_level: HashMap<usize, usize> = HashMap::new();
    let mut switches: Vec<Switch> = Vec::new();
    // Each switch's path (so its depth), by position in `switches`.
    let mut paths: Vec<&[String]> = Vec::new();
    let mut tops: Vec<String> = Vec::new();
    let mut notes = String::new();
    for p in places {
        let mut parent: Option<usize> = None;
        for depth in 1..=p.path.len() {
            let key = &p.path[..depth];
            let i = match index.get(key) {
                Some(&i) => i,
                None => {
                    let count = per_level.entry(depth).or_insert(0);
                    *count += 1;
                    let n = format!("s{depth}_{count}");
                    comment(&mut notes, &n, key);
                    match parent {
                        Some(par) => switches[par].children.push(n.clone()),
                        None => tops.push(n.clone()),
                    }
                    switches.push(Switch {
                        name: n,
                        ..Switch::default()
                    });
                    paths.push(key);
                    index.insert(key, switches.len() - 1);
                    switches.len() - 1
                }
            };
            parent = Some(i);
        }
        if let Some(leaf) = parent {
            switches[leaf].nodes.push(p.node.clone());
        }
    }
    for i in 0..switches.len() {
        if switches[i].children.is_empty() || switches[i].nodes.is_empty() {
            continue;
        }
        let depth = paths[i].len() + 1;
        let count = per_level.entry(depth).or_insert(0);
        *count += 1;
        let n = format!("s{depth}_{count}");
        comment(&mut notes, &n, paths[i]);
        let nodes = std::mem::take(&mut switches[i].nodes);
        switches[i].children.push(n.clone());
        switches.push(Switch {
            name: n,
            nodes,
            ..Switch::default()
        });
    }
    if tops.len() > 1 {
        switches.push(Switch {
            name: "root".into(),
            children: tops,
            ..Switch::default()
        });
    }
    let t = Topology {
        name: name.into(),
        cluster_default: false,
        kind: Kind::Tree(switches),
    };
    (t, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::topology::{validate, write_conf};

    fn f(text: &str) -> Vec<(String, String)> {
        vec![("in.json".to_string(), text.to_string())]
    }

    const AWS: &str = r#"{"Instances":[
      {"InstanceId":"i-1","InstanceType":"p5.48xlarge","NetworkNodes":["nn-a","nn-b","nn-c1"],"AvailabilityZone":"us-east-1a","ZoneId":"use1-az1"},
      {"InstanceId":"i-2","InstanceType":"p5.48xlarge","NetworkNodes":["nn-a","nn-b","nn-c1"]},
      {"InstanceId":"i-3","InstanceType":"p5.48xlarge","NetworkNodes":["nn-a","nn-b2","nn-c2"]},
      {"InstanceId":"i-4","InstanceType":"p5.48xlarge","NetworkNodes":["nn-a","nn-b2","nn-c3"]},
      {"InstanceId":"i-9","InstanceType":"m5.large","NetworkNodes":[]}
    ],"NextToken":null}"#;
    const MAP: &str = "# node instance\ngpu1 i-1\ngpu2 i-2\ngpu3 i-3\ngpu4 i-4\n";

    #[test]
    fn aws_blocks_and_tree() {
        let places = place(Source::Aws, &f(AWS), MAP).expect("valid");
        let (b, notes) = blocks(&places, "block");
        assert_eq!(notes, "# b1 = nn-c1\n# b2 = nn-c2\n# b3 = nn-c3\n");
        assert_eq!(
            write_conf(&b, "").expect("writes"),
            "BlockName=b1 Nodes=gpu[1-2]\nBlockName=b2 Nodes=gpu3\nBlockName=b3 Nodes=gpu4\n"
        );
        let (t, _) = tree(&places, "tree");
        validate(&t).expect("valid tree");
        assert_eq!(
            write_conf(&t, "").expect("writes"),
            "SwitchName=s1_1 Switches=s2_[1-2]\nSwitchName=s2_1 Switches=s3_1\nSwitchName=s3_1 Nodes=gpu[1-2]\nSwitchName=s2_2 Switches=s3_[2-3]\nSwitchName=s3_2 Nodes=gpu3\nSwitchName=s3_3 Nodes=gpu4\n"
        );
    }

    #[test]
    fn aws_ultraserver_capacity_block_is_innermost() {
        let text = r#"{"Instances":[
          {"InstanceId":"i-1","NetworkNodes":["a","b","c"],"CapacityBlockId":"cr-1"},
          {"InstanceId":"i-2","NetworkNodes":["a","b","c"],"CapacityBlockId":"cr-2"}]}"#;
        let places = place(Source::Aws, &f(text), "n1 i-1\nn2 i-2\n").expect("valid");
        let (b, _) = blocks(&places, "b");
        let Kind::Block(bl) = b.kind else { panic!() };
        assert_eq!(bl.blocks.len(), 2);
    }

    #[test]
    fn tree_gives_nodes_of_a_shorter_path_their_own_leaf() {
        // OCI: b has no GPU memory fabric, a has one inside the same local block.
        let oci = r#"{"ocid1.instance.a":{"customerHPCIslandId":"isl","customerNetworkBlock":"nb","customerLocalBlock":"lb1","customerGpuMemoryFabric":"fab1"},
                      "ocid1.instance.b":{"customerHPCIslandId":"isl","customerNetworkBlock":"nb","customerLocalBlock":"lb1"}}"#;
        let files = [("oci.json".to_string(), oci.to_string())];
        let places = place(
            Source::Oci,
            &files,
            "n1 ocid1.instance.a\nn2 ocid1.instance.b\n",
        )
        .expect("valid");
        let (t, notes) = tree(&places, "tree");
        let text = crate::slurm::topology::write_conf(&t, "").expect("a valid tree");
        assert!(text.contains("SwitchName=s4_1 Nodes=n1\n"), "{text}");
        assert!(text.contains("SwitchName=s4_2 Nodes=n2\n"), "{text}");
        assert!(
            text.contains("SwitchName=s3_1 Switches=s4_[1-2]\n"),
            "{text}"
        );
        assert!(notes.contains("# s4_2 = lb1"), "{notes}");
    }

    #[test]
    fn oci_gcp_nvlink() {
        let oci = r#"{"ocid1.instance.a":{"customerHPCIslandId":"isl","customerNetworkBlock":"nb","customerLocalBlock":"lb1","customerHostId":"h"},
                      "ocid1.instance.b":{"customerHPCIslandId":"isl","customerNetworkBlock":"nb","customerLocalBlock":"lb1","customerGpuMemoryFabric":"fab2"}}"#;
        let p = place(
            Source::Oci,
            &f(oci),
            "n1 ocid1.instance.a\nn2 ocid1.instance.b\n",
        )
        .expect("valid");
        assert_eq!(p[0].path, vec!["isl", "nb", "lb1"]);
        assert_eq!(p[1].path, vec!["isl", "nb", "lb1", "fab2"]);

        let gcp = r#"{"a4x-1":"/c1/r1/h1","a4x-2":"/c1/r1/h2","a4x-3":"/c1/r2/h3","bad":"c1/r2"}"#;
        let p = place(Source::Gcp, &f(gcp), "g1 a4x-1\ng2 a4x-2\ng3 a4x-3\n").expect("valid");
        let (b, _) = blocks(&p, "b");
        assert_eq!(
            write_conf(&b, "").expect("writes"),
            "BlockName=b1 Nodes=g[1-2]\nBlockName=b2 Nodes=g3\n"
        );
        let e = place(Source::Gcp, &f(gcp), "g1 bad\n")
            .expect_err("bad host")
            .to_string();
        assert!(e.contains("instance bad") && e.contains("node g1"), "{e}");

        let uuid = [1u8; 16];
        let fab = Fabric::from_nvml(true, uuid, 3).expect("complete");
        assert_eq!(fab.cluster_uuid, "01010101-0101-0101-0101-010101010101");
        assert_eq!(Fabric::from_nvml(false, uuid, 3), None);
        assert_eq!(Fabric::from_nvml(true, [0; 16], 3), None);
        let m = crate::catalog::machine("p5.48xlarge").expect("catalog");
        let nf = node_facts(&m, "h9", &HashMap::new());
        assert_eq!(nf.gpus.len(), 8);
        assert_eq!(nf.instance_type.as_deref(), Some("p5.48xlarge"));
        let back: NodeFacts =
            serde_json::from_str(&serde_json::to_string(&nf).expect("json")).expect("reads");
        assert_eq!(back, nf);

        let facts = r#"[{"hostname":"h1","gpus":[{"pci":"0000:01:00.0","fabric":{"cluster_uuid":"u1","clique_id":1}}]},
                        {"hostname":"h2","gpus":[{"pci":"0000:01:00.0","fabric":{"cluster_uuid":"u1","clique_id":2}}]},
                        {"hostname":"h3","gpus":[{"pci":"0000:01:00.0","fabric":{"cluster_uuid":"u1","clique_id":1}},{"pci":"0000:02:00.0"}]}]"#;
        let p = place(Source::Nvlink, &f(facts), "n1 h1\nn2 h2\n").expect("valid");
        let (t, _) = tree(&p, "t");
        assert_eq!(
            write_conf(&t, "").expect("writes"),
            "SwitchName=s1_1 Switches=s2_[1-2]\nSwitchName=s2_1 Nodes=n1\nSwitchName=s2_2 Nodes=n2\n"
        );
        let e = place(Source::Nvlink, &f(facts), "n3 h3\n")
            .expect_err("partial fabric")
            .to_string();
        assert!(e.contains("0000:02:00.0"), "{e}");
    }

    #[test]
    fn errors_name_the_entry() {
        let cases = [
            (
                Source::Aws,
                AWS,
                "gpu1 i-404\n",
                "node gpu1: instance i-404 is not in the aws data",
            ),
            (Source::Aws, AWS, "x i-9\n", "instance i-9: no NetworkNodes"),
            (Source::Aws, "{\"Instances\": [", "gpu1 i-1\n", "in.json:"),
            (
                Source::Aws,
                AWS,
                "gpu1 i-1\ngpu1 i-2\n",
                "NODEMAP line 2: node gpu1 already mapped on line 1",
            ),
            (Source::Aws, AWS, "gpu1 i-1 extra\n", "NODEMAP line 1"),
            (Source::Aws, AWS, "# none\n", "no nodes"),
            (
                Source::Oci,
                r#"{"o":{"customerLocalBlock":"x"}}"#,
                "n o\n",
                "instance o: rdmaTopologyData lacks",
            ),
        ];
        for (src, text, map, want) in cases {
            let e = place(src, &f(text), map).expect_err(want).to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
