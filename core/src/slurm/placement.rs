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

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
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
    #[error("no NODEMAP node has placement data")]
    NoPlacement,
}

/// A vendor's unit id (an OCI block, an AWS network node, an NVLink clique).
pub type UnitId = Arc<str>;

/// Units, outermost first, shared by every node with the same ones: 16k nodes name a
/// few hundred units, so each id and path is allocated once, not once per node.
pub type UnitPath = Arc<[UnitId]>;

/// One Slurm node and its shared units, outermost first (never empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlace {
    pub node: String,
    /// The network's units (the tree), outermost first.
    pub path: UnitPath,
    /// The unit its block is keyed by: the path, except where the cloud names a domain
    /// of its own (AWS `CapacityBlockId`: one block even across leaf network nodes).
    pub block: UnitPath,
}

/// What to do with NODEMAP nodes the placement data has no place for (CPU and login
/// nodes, instances whose data is not ready yet: AWS documents a null capacity block id
/// just after launch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Unplaced {
    /// Stop with the node's reason.
    #[default]
    Refuse,
    /// A switch (tree) or block of their own, [`UNPLACED`], that joins nothing: no root
    /// over it, no aggregated block reaching it ([`block_sizes`]), as topograph's
    /// `no-topology` switch.
    Isolate,
}

/// The unit name of isolated nodes.
pub const UNPLACED: &str = "unplaced";

/// The nodes placed, in NODEMAP order, and those without a place (node, why).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Placement {
    pub placed: Vec<NodePlace>,
    pub unplaced: Vec<(String, String)>,
}

/// Parse NODEMAP: `NODENAME INSTANCE_ID` per line, `#` comments, blank lines skipped.
/// A node or an instance named twice is an error (one of the two would be misplaced).
pub fn parse_nodemap(text: &str) -> Result<Vec<(String, String)>, PlacementError> {
    Ok(nodemap_entries(text)?
        .into_iter()
        .map(|(node, id)| (node.to_string(), id.to_string()))
        .collect())
}

/// [`parse_nodemap`], borrowing from `text`.
fn nodemap_entries(text: &str) -> Result<Vec<(&str, &str)>, PlacementError> {
    let mut out = Vec::new();
    // Keys borrowed from `text`, hashed with Fx (the admin's own file: no untrusted
    // input to flood the table with collisions).
    let mut nodes: FxHashMap<&str, usize> = FxHashMap::default();
    let mut ids: FxHashMap<&str, usize> = FxHashMap::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |message: String| PlacementError::NodeMap { line, message };
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let mut fields = content.split_whitespace();
        let (Some(node), Some(id), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(err("expected NODENAME INSTANCE_ID".into()));
        };
        if node.bytes().any(|b| matches!(b, b'[' | b']' | b',')) {
            return Err(err(format!(
                "node name {node:?} is a hostlist, not one node"
            )));
        }
        if let Some(prev) = nodes.insert(node, line) {
            return Err(err(format!("node {node} already mapped on line {prev}")));
        }
        if let Some(prev) = ids.insert(id, line) {
            return Err(err(format!("instance {id} already mapped on line {prev}")));
        }
        out.push((node, id));
    }
    if out.is_empty() {
        return Err(PlacementError::Empty);
    }
    Ok(out)
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

fn json<'a, T: Deserialize<'a>>(file: &str, text: &'a str) -> Result<T, PlacementError> {
    serde_json::from_str(text).map_err(|e| PlacementError::Input {
        file: file.to_string(),
        message: format!("not the expected JSON: {e}"),
    })
}

/// A vendor file as JSON, walked by hand so a wrong value is one line naming the file
/// and the field (`Instances[3].NetworkNodes[1]: expected a string`), not serde's text.
struct Doc<'a> {
    file: &'a str,
}

impl Doc<'_> {
    fn err(&self, field: &str, want: &str) -> PlacementError {
        PlacementError::Input {
            file: self.file.to_string(),
            // The field path holds the input's own keys: escaped, so the error stays one line.
            message: format!("{}: expected {want}", crate::text::printable(field)),
        }
    }

    fn parse(&self, text: &str) -> Result<serde_json::Value, PlacementError> {
        serde_json::from_str(text).map_err(|e| PlacementError::Input {
            file: self.file.to_string(),
            message: format!("not JSON: {e}"),
        })
    }

    fn object<'v>(
        &self,
        v: &'v serde_json::Value,
        field: &str,
    ) -> Result<&'v serde_json::Map<String, serde_json::Value>, PlacementError> {
        v.as_object().ok_or_else(|| {
            self.err(
                if field.is_empty() { "the file" } else { field },
                "an object",
            )
        })
    }

    /// An optional string: absent or null is None.
    fn opt_str<'v>(
        &self,
        o: &'v serde_json::Map<String, serde_json::Value>,
        key: &str,
        at: &str,
    ) -> Result<Option<&'v str>, PlacementError> {
        match o.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.err(&format!("{at}{key}"), "a string or null")),
        }
    }
}

/// An instance as the vendor files give it: the file it came from, and its path or
/// why it has none (an error only if the NODEMAP names it).
type Found<'f> = (&'f str, Result<Unit, String>);

/// An instance's network path and its block key ([`NodePlace`]).
type Unit = (UnitPath, UnitPath);

/// An instance id, borrowed from its file where it has no escapes, and its unit.
type Entry<'f> = (Cow<'f, str>, Result<Unit, String>);

/// The unit ids and paths read so far, each kept once and shared by every instance
/// that names it.
#[derive(Default)]
struct Units {
    ids: FxHashSet<UnitId>,
    paths: FxHashSet<UnitPath>,
}

impl Units {
    fn id(&mut self, id: &str) -> UnitId {
        if let Some(known) = self.ids.get(id) {
            return known.clone();
        }
        let new: UnitId = id.into();
        self.ids.insert(new.clone());
        new
    }

    /// The shared path of these ids, outermost first.
    fn path<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) -> UnitPath {
        let ids: Vec<UnitId> = ids.into_iter().map(|i| self.id(i)).collect();
        if let Some(known) = self.paths.get(ids.as_slice()) {
            return known.clone();
        }
        let new: UnitPath = ids.into();
        self.paths.insert(new.clone());
        new
    }

    /// A unit whose path is its block key too.
    fn same<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) -> Unit {
        let p = self.path(ids);
        (p.clone(), p)
    }
}

/// An AWS instance's unit from its `NetworkNodes` (outermost first) and
/// `CapacityBlockId` (an empty one is none).
fn aws_unit(
    units: &mut Units,
    nodes: &[&str],
    capacity_block: Option<&str>,
) -> Result<Unit, String> {
    if nodes.is_empty() {
        return Err("no NetworkNodes (type without topology, or not running)".into());
    }
    let path = units.path(nodes.iter().copied());
    // The capacity block (an UltraServer's NVLink domain) is one block wherever its
    // instances sit in the network; instances without one are blocked by their leaf
    // network node.
    let block = match capacity_block.filter(|c| !c.is_empty()) {
        Some(cb) => units.path([format!("CapacityBlockId {cb}").as_str()]),
        None => path.clone(),
    };
    Ok((path, block))
}

/// The rdmaTopologyData fields of an OCI instance, outermost first.
const OCI_FIELDS: [&str; 4] = [
    "customerHPCIslandId",
    "customerNetworkBlock",
    "customerLocalBlock",
    // GB200/GB300 racks: the rack's NVLink domain, a block inside the local block.
    "customerGpuMemoryFabric",
];

/// An OCI instance's unit from its first three [`OCI_FIELDS`]; `memory_fabric` gives the
/// fourth (an empty one is none), asked only when the three are there.
fn oci_unit<'a>(
    units: &mut Units,
    [island, network, local]: [Option<&'a str>; 3],
    memory_fabric: impl FnOnce() -> Result<Option<&'a str>, PlacementError>,
) -> Result<Result<Unit, String>, PlacementError> {
    Ok(match (island, network, local) {
        (Some(a), Some(b), Some(c)) => {
            let fabric = memory_fabric()?.filter(|f| !f.is_empty());
            Ok(units.same([a, b, c].into_iter().chain(fabric)))
        }
        _ => Err("rdmaTopologyData lacks customerHPCIslandId, customerNetworkBlock or customerLocalBlock".into()),
    })
}

/// A GCP instance's unit from its physicalHost.
fn gcp_unit(units: &mut Units, host: &str) -> Result<Unit, String> {
    // GCP documents `/blockId/subBlockId/hostId`; the leading `/` is optional here, as
    // tools print it either way.
    let parts: Vec<&str> = host.strip_prefix('/').unwrap_or(host).split('/').collect();
    match parts[..] {
        [block, sub_block, host_id]
            if [block, sub_block, host_id].iter().all(|c| !c.is_empty()) =>
        {
            Ok(units.same([block, sub_block]))
        }
        _ => Err(format!(
            "physicalHost {host:?} is not blockId/subBlockId/hostId"
        )),
    }
}

/// A node's unit from its GPUs' NVLink fabric ([`NodeFacts`]): the clique, inside its
/// cluster; every GPU must be in the same one.
fn nvlink_unit(units: &mut Units, gpus: &[fast::GpuView]) -> Result<Unit, String> {
    let fabrics: Vec<&fast::FabricView> = gpus.iter().filter_map(|g| g.fabric.as_ref()).collect();
    match fabrics.split_first() {
        None => Err("no GPU with a complete NVLink fabric (clusterUuid + cliqueId)".to_string()),
        Some((first, rest)) if rest.iter().any(|o| o != first) => {
            Err("GPUs in different NVLink cliques".to_string())
        }
        Some(_) if fabrics.len() != gpus.len() => Err(format!(
            "GPU {} has no complete NVLink fabric while others do",
            gpus.iter()
                .find(|g| g.fabric.is_none())
                .and_then(|g| g.pci.as_deref())
                .unwrap_or("?")
        )),
        Some((first, _)) => {
            let clique = format!("{}/clique{}", &*first.cluster_uuid, first.clique_id);
            Ok(units.same([&*first.cluster_uuid, clique.as_str()]))
        }
    }
}

/// Each instance's path from the vendor files (`(file name, text)`), keyed by instance
/// id. Only entries the NODEMAP names are checked, so an account-wide export with
/// instances of other clusters still works; a malformed entry of a mapped instance is
/// an error naming it.
fn instance_paths<'f>(
    source: Source,
    files: &'f [(String, String)],
) -> Result<FxHashMap<Cow<'f, str>, Found<'f>>, PlacementError> {
    let mut out: FxHashMap<Cow<'f, str>, Found<'f>> = FxHashMap::default();
    let mut units = Units::default();
    let mut put = |file: &'f str, id: Cow<'f, str>, path: Result<Unit, String>| {
        let path = path.and_then(|(p, b)| {
            if p.iter().chain(b.iter()).any(|c| c.trim().is_empty()) {
                Err("an empty unit id".to_string())
            } else if p.is_empty() || b.is_empty() {
                Err("no shared unit".to_string())
            } else {
                Ok((p, b))
            }
        });
        match out.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) if e.get().1 != path => {
                Err(PlacementError::Entry {
                    file: file.to_string(),
                    id: e.key().to_string(),
                    message: "listed twice with different placement".into(),
                })
            }
            std::collections::hash_map::Entry::Occupied(mut e) => {
                *e.get_mut() = (file, path);
                Ok(())
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert((file, path));
                Ok(())
            }
        }
    };
    for (file, text) in files {
        let file = file.as_str();
        // The typed reader takes well-formed files; anything it does not take, the
        // Value walk below reads again, for its error naming the field.
        if let Some(found) = fast::instances(source, text, &mut units) {
            for (id, path) in found {
                put(file, id, path)?;
            }
            continue;
        }
        let doc = Doc { file };
        match source {
            Source::Aws => {
                let root = doc.parse(text)?;
                let list = doc
                    .object(&root, "")?
                    .get("Instances")
                    .and_then(|v| v.as_array())
                    .ok_or_else(|| doc.err("Instances", "a list of instances"))?;
                for (n, inst) in list.iter().enumerate() {
                    let at = format!("Instances[{n}].");
                    let o = doc.object(inst, &format!("Instances[{n}]"))?;
                    let id = doc
                        .opt_str(o, "InstanceId", &at)?
                        .ok_or_else(|| doc.err(&format!("{at}InstanceId"), "a string"))?;
                    let nodes: Vec<&str> = match o.get("NetworkNodes") {
                        None | Some(serde_json::Value::Null) => Vec::new(),
                        Some(serde_json::Value::Array(a)) => a
                            .iter()
                            .enumerate()
                            .map(|(k, v)| {
                                v.as_str().ok_or_else(|| {
                                    doc.err(&format!("{at}NetworkNodes[{k}]"), "a string")
                                })
                            })
                            .collect::<Result<_, _>>()?,
                        Some(_) => {
                            return Err(doc.err(&format!("{at}NetworkNodes"), "a list or null"));
                        }
                    };
                    let cb = doc.opt_str(o, "CapacityBlockId", &at)?;
                    let unit = aws_unit(&mut units, &nodes, cb);
                    put(file, Cow::Owned(id.to_string()), unit)?;
                }
            }
            Source::Oci => {
                let root = doc.parse(text)?;
                for (id, r) in doc.object(&root, "")? {
                    let at = format!("{id}.");
                    let r = doc.object(r, id)?;
                    let field = |k: &str| doc.opt_str(r, k, &at);
                    let p = oci_unit(
                        &mut units,
                        [
                            field(OCI_FIELDS[0])?,
                            field(OCI_FIELDS[1])?,
                            field(OCI_FIELDS[2])?,
                        ],
                        || field(OCI_FIELDS[3]),
                    )?;
                    put(file, Cow::Owned(id.clone()), p)?;
                }
            }
            Source::Gcp => {
                let root = doc.parse(text)?;
                for (id, host) in doc.object(&root, "")? {
                    let host = host
                        .as_str()
                        .ok_or_else(|| doc.err(id, "a physicalHost string"))?;
                    let unit = gcp_unit(&mut units, host);
                    put(file, Cow::Owned(id.clone()), unit)?;
                }
            }
            Source::Nvlink => {
                for f in fast::facts(file, text)? {
                    let unit = nvlink_unit(&mut units, &f.gpus);
                    put(file, f.hostname.0, unit)?;
                }
            }
        }
    }
    Ok(out)
}

/// The typed readers: node facts ([`fast::facts`], borrowed) and the AWS, OCI and GCP
/// files, the fields the Value walk reads, with the same outcome wherever it answers,
/// without building and dropping a
/// `serde_json::Value` of the whole file (on 16k instances that was half of `conf
/// topology`). It answers only for a file the walk reads without an error, the same
/// entries in the same order: objects as serde_json's Value keeps them (a key given
/// twice: its last value; OCI and GCP ids in key order), every other field skipped with
/// [`Skip`], which reads numbers as Value does. Anything else is None, and the walk
/// reads the file again for its error.
mod fast {
    use super::*;

    /// A string, borrowed from the text where it has no escapes (in an `Option` too,
    /// where serde's own `Cow` would always copy).
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    pub(super) struct Str<'a>(pub(super) Cow<'a, str>);

    impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(std::marker::PhantomData<&'a str>);
            impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
                type Value = Str<'a>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Str<'a>, E> {
                    Ok(Str(Cow::Borrowed(s)))
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Str<'a>, E> {
                    Ok(Str(Cow::Owned(s.to_string())))
                }
            }
            d.deserialize_str(V(std::marker::PhantomData))
        }
    }

    impl std::ops::Deref for Str<'_> {
        type Target = str;
        fn deref(&self) -> &str {
            &self.0
        }
    }

    /// [`NodeFacts`] as the node wrote it, its strings borrowed: the same fields and
    /// types, so a file is taken or refused as `NodeFacts` would take or refuse it.
    #[derive(Deserialize)]
    pub(super) struct FactsView<'a> {
        #[serde(borrow)]
        pub(super) hostname: Str<'a>,
        #[serde(default, borrow, rename = "vendor")]
        _vendor: Option<Str<'a>>,
        #[serde(default, borrow, rename = "instance_type")]
        _instance_type: Option<Str<'a>>,
        #[serde(default, borrow)]
        pub(super) gpus: Vec<GpuView<'a>>,
    }

    /// [`GpuFacts`], borrowed.
    #[derive(Deserialize)]
    pub(super) struct GpuView<'a> {
        #[serde(default, borrow)]
        pub(super) pci: Option<Str<'a>>,
        #[serde(default, rename = "minor")]
        _minor: Option<u32>,
        #[serde(default, borrow)]
        pub(super) fabric: Option<FabricView<'a>>,
    }

    /// [`Fabric`], borrowed.
    #[derive(Deserialize, PartialEq)]
    pub(super) struct FabricView<'a> {
        #[serde(borrow)]
        pub(super) cluster_uuid: Str<'a>,
        pub(super) clique_id: u32,
    }

    /// A node-facts file: an array of [`NodeFacts`] or one. Told apart by the first
    /// character rather than `#[serde(untagged)]`, which buffers the whole file as serde
    /// content and reads it again (on 16k nodes, two thirds of `conf topology`).
    pub(super) fn facts<'a>(
        file: &str,
        text: &'a str,
    ) -> Result<Vec<FactsView<'a>>, PlacementError> {
        if text.trim_start().starts_with('[') {
            json(file, text)
        } else {
            json(file, text).map(|f| vec![f])
        }
    }

    /// Any JSON value, dropped. Read with `deserialize_any`, so a number past f64's range
    /// is refused here as Value refuses it (serde's IgnoredAny would take it).
    struct Skip;

    impl<'de> Deserialize<'de> for Skip {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(Skip)
        }
    }

    impl<'de> Visitor<'de> for Skip {
        type Value = Skip;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any value")
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Skip, E> {
            Ok(Skip)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
            while seq.next_element::<Skip>()?.is_some() {}
            Ok(Skip)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
            while map.next_entry::<Skip, Skip>()?.is_some() {}
            Ok(Skip)
        }
    }

    /// One AWS instance: InstanceId, NetworkNodes, CapacityBlockId (null: absent).
    struct AwsInstance<'a> {
        id: Option<Str<'a>>,
        nodes: Option<Vec<Str<'a>>>,
        capacity_block: Option<Str<'a>>,
    }

    impl<'de> Deserialize<'de> for AwsInstance<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = AwsInstance<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an instance object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut i = AwsInstance {
                        id: None,
                        nodes: None,
                        capacity_block: None,
                    };
                    while let Some(key) = map.next_key::<Str>()? {
                        match &*key.0 {
                            "InstanceId" => i.id = map.next_value()?,
                            "NetworkNodes" => i.nodes = map.next_value()?,
                            "CapacityBlockId" => i.capacity_block = map.next_value()?,
                            _ => {
                                map.next_value::<Skip>()?;
                            }
                        }
                    }
                    Ok(i)
                }
            }
            d.deserialize_map(V)
        }
    }

    /// An AWS file's `Instances` (absent: None).
    struct AwsFile<'a>(Option<Vec<AwsInstance<'a>>>);

    impl<'de> Deserialize<'de> for AwsFile<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = AwsFile<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut file = AwsFile(None);
                    while let Some(key) = map.next_key::<Str>()? {
                        if key.0 == "Instances" {
                            file.0 = Some(map.next_value()?);
                        } else {
                            map.next_value::<Skip>()?;
                        }
                    }
                    Ok(file)
                }
            }
            d.deserialize_map(V)
        }
    }

    /// An OCI instance's [`OCI_FIELDS`] (null: absent).
    struct OciEntry<'a>([Option<Str<'a>>; 4]);

    impl<'de> Deserialize<'de> for OciEntry<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = OciEntry<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an rdmaTopologyData object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut e = OciEntry([None, None, None, None]);
                    while let Some(key) = map.next_key::<Str>()? {
                        match OCI_FIELDS.iter().position(|f| *f == key.0) {
                            Some(i) => e.0[i] = map.next_value()?,
                            None => {
                                map.next_value::<Skip>()?;
                            }
                        }
                    }
                    Ok(e)
                }
            }
            d.deserialize_map(V)
        }
    }

    /// Each instance's id and unit, in the order the Value walk puts them, or None where
    /// the walk would stop with an error (or the file is not one this reader takes).
    pub(super) fn instances<'a>(
        source: Source,
        text: &'a str,
        units: &mut Units,
    ) -> Option<Vec<Entry<'a>>> {
        match source {
            Source::Aws => {
                let AwsFile(Some(list)) = serde_json::from_str(text).ok()? else {
                    return None;
                };
                list.into_iter()
                    .map(|i| {
                        let nodes: Vec<&str> = i.nodes.iter().flatten().map(|n| &**n).collect();
                        let unit = aws_unit(units, &nodes, i.capacity_block.as_deref());
                        Some((i.id?.0, unit))
                    })
                    .collect()
            }
            Source::Oci => {
                // Key order, a key given twice keeping its last value: serde_json's Map.
                let map: BTreeMap<Str, OciEntry> = serde_json::from_str(text).ok()?;
                map.into_iter()
                    .map(|(id, OciEntry([a, b, c, d]))| {
                        let unit =
                            oci_unit(units, [a.as_deref(), b.as_deref(), c.as_deref()], || {
                                Ok(d.as_deref())
                            });
                        Some((id.0, unit.ok()?))
                    })
                    .collect()
            }
            Source::Gcp => {
                let map: BTreeMap<Str, Str> = serde_json::from_str(text).ok()?;
                Some(
                    map.into_iter()
                        .map(|(id, host)| {
                            let unit = gcp_unit(units, &host);
                            (id.0, unit)
                        })
                        .collect(),
                )
            }
            // Typed already ([`facts`]).
            Source::Nvlink => None,
        }
    }
}

/// Every NODEMAP node with its path, in NODEMAP order; a node without one is an error.
pub fn place(
    source: Source,
    files: &[(String, String)],
    nodemap: &str,
) -> Result<Vec<NodePlace>, PlacementError> {
    place_with(source, files, nodemap, Unplaced::Refuse).map(|p| p.placed)
}

/// [`place`] with the admin's choice for nodes without placement data: under
/// [`Unplaced::Isolate`] they come back in [`Placement::unplaced`] with the reason.
pub fn place_with(
    source: Source,
    files: &[(String, String)],
    nodemap: &str,
    unplaced: Unplaced,
) -> Result<Placement, PlacementError> {
    let map = nodemap_entries(nodemap)?;
    let mut paths = instance_paths(source, files)?;
    let mut out = Placement {
        placed: Vec::with_capacity(map.len()),
        unplaced: Vec::new(),
    };
    // nodemap_entries refuses an instance named twice, so each entry is taken (moved,
    // not cloned) at most once.
    for (node, id) in map {
        let e = match paths.remove(id) {
            None => PlacementError::Unknown {
                node: node.to_string(),
                id: id.to_string(),
                source_name: source.name(),
            },
            Some((file, Err(message))) => PlacementError::Entry {
                file: file.to_string(),
                id: id.to_string(),
                message: format!("{message} (node {node})"),
            },
            Some((_, Ok((path, block)))) => {
                out.placed.push(NodePlace {
                    node: node.to_string(),
                    path,
                    block,
                });
                continue;
            }
        };
        match unplaced {
            Unplaced::Refuse => return Err(e),
            Unplaced::Isolate => out.unplaced.push((node.to_string(), e.to_string())),
        }
    }
    if out.placed.is_empty() {
        return Err(PlacementError::NoPlacement);
    }
    Ok(out)
}

fn comment(out: &mut String, name: &str, key: &[UnitId]) {
    // Vendor ids come from files: keep the comment one line whatever they hold.
    let id: String = key
        .last()
        .map(|s| s.chars().filter(|c| !c.is_control()).collect())
        .unwrap_or_default();
    out.push_str(&format!("# {name} = {id}\n"));
}

/// Block topology: one block per innermost unit, [`Slurm's default sizes`](block_sizes).
/// Returns it and the `# bN = id` lines.
pub fn blocks(places: &[NodePlace], name: &str) -> (Topology, String) {
    let placement = Placement {
        placed: places.to_vec(),
        unplaced: Vec::new(),
    };
    // Without explicit sizes nothing can fail: every block has at least the base's nodes.
    blocks_of(&placement, name, None).unwrap_or_else(|_| {
        (
            Topology {
                name: name.into(),
                cluster_default: false,
                kind: Kind::Flat,
            },
            String::new(),
        )
    })
}

/// Block topology of a [`Placement`]: one block per block unit ([`NodePlace::block`]),
/// ordered by its nodes' path in the network (the smallest), so consecutive blocks,
/// which Slurm aggregates into the larger sizes, share the next tier whatever the node
/// names; isolated nodes last, in one block [`UNPLACED`]. `sizes`: the admin's
/// `BlockSizes` (checked as slurmctld checks them, [`super::topology::validate`]), else
/// [`block_sizes`].
pub fn blocks_of(
    placement: &Placement,
    name: &str,
    sizes: Option<&[u32]>,
) -> Result<(Topology, String), super::topology::TopologyError> {
    // Keyed by the full key, so a rack id reused under two clusters stays two units.
    let mut index: FxHashMap<&[UnitId], usize> = FxHashMap::default();
    let mut units: Vec<(&[UnitId], &[UnitId], Vec<String>)> = Vec::new();
    for p in &placement.placed {
        let i = *index.entry(&p.block).or_insert_with(|| {
            units.push((&p.block, &p.path, Vec::new()));
            units.len() - 1
        });
        if *p.path < *units[i].1 {
            units[i].1 = &p.path;
        }
        units[i].2.push(p.node.clone());
    }
    units.sort_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)));
    let mut notes = String::new();
    let mut blocks: Vec<Block> = Vec::new();
    for (key, _, nodes) in units {
        let n = format!("b{}", blocks.len() + 1);
        comment(&mut notes, &n, key);
        blocks.push(Block {
            name: n,
            nodes: nodes.into(),
        });
    }
    let placed = blocks.len();
    if !placement.unplaced.is_empty() {
        notes.push_str(&format!(
            "# {UNPLACED} = nodes without placement data, joined to no other block\n"
        ));
        blocks.push(Block {
            name: UNPLACED.into(),
            nodes: placement.unplaced.iter().map(|(n, _)| n.clone()).collect(),
        });
    }
    let isolated = blocks.len() > placed;
    let sizes = match sizes {
        Some(s) => s.to_vec(),
        None => block_sizes(&blocks, isolated.then_some(placed)),
    };
    let t = Topology {
        name: name.into(),
        cluster_default: false,
        kind: Kind::Block(Blocks { sizes, blocks }),
    };
    super::topology::validate(&t)?;
    if let (true, Kind::Block(b)) = (isolated, &t.kind)
        && let Some(&base) = b.sizes.first()
        && let Some(s) = b
            .sizes
            .iter()
            .find(|&&s| !(placed as u64).is_multiple_of(u64::from(s / base.max(1))))
    {
        return Err(super::topology::TopologyError::Invalid {
            topology: name.into(),
            message: format!(
                "block size {s} aggregates {} blocks: with {placed} placed blocks it would join the {UNPLACED} block to them",
                s / base.max(1)
            ),
        });
    }
    Ok((t, notes))
}

/// `BlockSizes` as Slurm's default would make them (24.05+, block_record.c: without
/// `BlockSizes`, levels 0-4 of the base, up to the first that spans every block) but
/// from the smallest block rather than the first, so no block is below the base, which
/// 24.05 and 24.11 refuse ("children count lower than bblock_node_cnt"). With isolated
/// nodes after `placed` blocks, only levels whose aggregates end before them: Slurm
/// aggregates consecutive blocks from multiples of the level's count.
pub fn block_sizes(blocks: &[Block], placed: Option<usize>) -> Vec<u32> {
    let Some(base) = blocks.iter().map(|b| b.nodes.len()).min() else {
        return Vec::new();
    };
    let base = u32::try_from(base).unwrap_or(u32::MAX);
    let mut sizes = Vec::new();
    for level in 0..=4u32 {
        let count = 1usize << level;
        if placed.is_some_and(|p| !p.is_multiple_of(count)) {
            break;
        }
        let Some(size) = base.checked_mul(1 << level) else {
            break;
        };
        sizes.push(size);
        if count >= placed.unwrap_or(blocks.len()) {
            break;
        }
    }
    sizes
}

/// Tree topology: a switch per unit at every level (`s<level>_<n>`), nodes on the
/// innermost, and `root` over the top level when it has more than one unit. Slurm takes
/// nodes on leaf switches only, so nodes whose path ends at a unit other nodes' paths
/// go below (an OCI GB200 node without `customerGpuMemoryFabric` beside ones with it)
/// get a leaf of their own under it, named for the same unit.
pub fn tree(places: &[NodePlace], name: &str) -> (Topology, String) {
    tree_of(
        &Placement {
            placed: places.to_vec(),
            unplaced: Vec::new(),
        },
        name,
    )
}

/// [`tree`] of a [`Placement`]: isolated nodes on a leaf switch [`UNPLACED`] of their own
/// that no switch is above (Slurm then never gives one job nodes on both sides).
pub fn tree_of(placement: &Placement, name: &str) -> (Topology, String) {
    let places = &placement.placed;
    let mut index: FxHashMap<&[UnitId], usize> = FxHashMap::default();
    let mut per_level: FxHashMap<usize, usize> = FxHashMap::default();
    let mut switches: Vec<Switch> = Vec::new();
    // Each switch's path (so its depth), by position in `switches`.
    let mut paths: Vec<&[UnitId]> = Vec::new();
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
    if !placement.unplaced.is_empty() {
        notes.push_str(&format!(
            "# {UNPLACED} = nodes without placement data, under no other switch\n"
        ));
        switches.push(Switch {
            name: UNPLACED.into(),
            nodes: placement.unplaced.iter().map(|(n, _)| n.clone()).collect(),
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

    fn ids(path: &UnitPath) -> Vec<&str> {
        path.iter().map(|i| &**i).collect()
    }

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
    fn typed_reader_agrees_with_the_value_walk() {
        // Taken: escapes, null, a key given twice (the last wins), unknown fields of
        // every kind.
        let oci = r#"{"ocid\u0031":{"customerHPCIslandId":"x","customerHPCIslandId":"i",
          "customerNetworkBlock":"n","customerLocalBlock":"l","customerGpuMemoryFabric":null,
          "other":[1,-2.5e3,{"a":true,"b":null}]}}"#;
        assert!(fast::instances(Source::Oci, oci, &mut Units::default()).is_some());
        let p = place(Source::Oci, &f(oci), "n1 ocid1\n").expect("placed");
        assert_eq!(ids(&p[0].path), ["i", "n", "l"]);
        // Refused by the typed reader, so the walk answers: a number past f64's range in
        // a field nobody reads (Value refuses it), a wrong type (the walk names the field).
        let aws = r#"{"Instances":[{"InstanceId":"i-1","NetworkNodes":["a"],"X":1e400}]}"#;
        assert!(fast::instances(Source::Aws, aws, &mut Units::default()).is_none());
        let e = place(Source::Aws, &f(aws), "n1 i-1\n").expect_err("not JSON");
        assert!(e.to_string().contains("not JSON"), "{e}");
        let gcp = r#"{"a":"/b/s/h","c":3}"#;
        assert!(fast::instances(Source::Gcp, gcp, &mut Units::default()).is_none());
        let e = place(Source::Gcp, &f(gcp), "n1 a\n").expect_err("a number");
        assert!(
            e.to_string().contains("c: expected a physicalHost string"),
            "{e}"
        );
    }

    #[test]
    fn aws_blocks_and_tree() {
        let places = place(Source::Aws, &f(AWS), MAP).expect("valid");
        let (b, notes) = blocks(&places, "block");
        assert_eq!(notes, "# b1 = nn-c1\n# b2 = nn-c2\n# b3 = nn-c3\n");
        assert_eq!(
            write_conf(&b, "").expect("writes"),
            "BlockName=b1 Nodes=gpu[1-2]\nBlockName=b2 Nodes=gpu3\nBlockName=b3 Nodes=gpu4\nBlockSizes=1,2,4\n"
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

    /// The base block is the smallest (24.05/24.11 exit on a block below the first
    /// one's count when BlockSizes= is absent), and blocks follow the network, not the
    /// NODEMAP: leaves under one spine are consecutive, so Slurm's 2-block aggregates
    /// pair leaves of one spine.
    #[test]
    fn blocks_follow_the_network_and_start_at_the_smallest() {
        let mut inst = Vec::new();
        let mut map = String::new();
        // 8 leaves of 4 nodes under 4 spines (2 leaves each), one leaf of 3; node
        // names unrelated to placement: node k sits on leaf (k * 5) % 8.
        for k in 0..32 {
            let leaf = (k * 5) % 8;
            inst.push(format!(
                r#"{{"InstanceId":"i-{k}","NetworkNodes":["top","spine{}","leaf{leaf}"]}}"#,
                leaf / 2
            ));
            map.push_str(&format!("n{k} i-{k}\n"));
        }
        for k in 32..35 {
            inst.push(format!(
                r#"{{"InstanceId":"i-{k}","NetworkNodes":["top","spine0","leafz"]}}"#
            ));
            map.push_str(&format!("n{k} i-{k}\n"));
        }
        // The small leaf listed first in the NODEMAP.
        let map = format!("n32 i-32\n{}", map.replace("n32 i-32\n", ""));
        let text = format!(r#"{{"Instances":[{}]}}"#, inst.join(","));
        let places = place(Source::Aws, &f(&text), &map).expect("valid");
        let (t, notes) = blocks(&places, "block");
        let Kind::Block(b) = &t.kind else {
            panic!("blocks")
        };
        assert_eq!(b.sizes, vec![3, 6, 12, 24, 48]);
        let leaves: Vec<&str> = notes
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap_or(""))
            .collect();
        assert_eq!(
            leaves,
            [
                "leaf0", "leaf1", "leafz", "leaf2", "leaf3", "leaf4", "leaf5", "leaf6", "leaf7"
            ]
        );
        validate(&t).expect("valid");
    }

    /// An UltraServer's CapacityBlockId is one block across leaf network nodes; the
    /// instances of its leaf without one are a block of their own.
    #[test]
    fn aws_capacity_block_spans_leaves_and_stays_apart() {
        let text = r#"{"Instances":[
          {"InstanceId":"i-1","NetworkNodes":["a","b","l1"],"CapacityBlockId":"cr-1"},
          {"InstanceId":"i-2","NetworkNodes":["a","b","l2"],"CapacityBlockId":"cr-1"},
          {"InstanceId":"i-3","NetworkNodes":["a","b","l1"]},
          {"InstanceId":"i-4","NetworkNodes":["a","b","l1"],"CapacityBlockId":null}]}"#;
        let places =
            place(Source::Aws, &f(text), "n1 i-1\nn2 i-2\nn3 i-3\nn4 i-4\n").expect("valid");
        let (b, notes) = blocks(&places, "b");
        assert_eq!(
            write_conf(&b, "").expect("writes"),
            "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\nBlockSizes=2,4\n"
        );
        assert_eq!(notes, "# b1 = CapacityBlockId cr-1\n# b2 = l1\n");
    }

    #[test]
    fn unplaced_nodes_are_refused_or_isolated() {
        let map = "gpu1 i-1\ngpu2 i-2\ngpu3 i-3\ngpu4 i-4\nlogin1 i-9\ncpu1 i-404\n";
        let e = place(Source::Aws, &f(AWS), map).expect_err("refused");
        assert!(e.to_string().contains("node login1"), "{e}");
        let p = place_with(Source::Aws, &f(AWS), map, Unplaced::Isolate).expect("isolated");
        assert_eq!(p.placed.len(), 4);
        let names: Vec<&str> = p.unplaced.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["login1", "cpu1"]);
        // Blocks: nn-c1 (2 nodes), nn-c2, nn-c3, then unplaced; 3 placed blocks, so no
        // aggregate (it would reach the unplaced block).
        let (b, _) = blocks_of(&p, "b", None).expect("valid");
        assert_eq!(
            write_conf(&b, "").expect("writes"),
            "BlockName=b1 Nodes=gpu[1-2]\nBlockName=b2 Nodes=gpu3\nBlockName=b3 Nodes=gpu4\nBlockName=unplaced Nodes=cpu1,login1\nBlockSizes=1\n"
        );
        let e = blocks_of(&p, "b", Some(&[1, 2])).expect_err("joins unplaced");
        assert!(e.to_string().contains("join the unplaced block"), "{e}");
        let e = blocks_of(&p, "b", Some(&[2])).expect_err("below the base");
        assert!(
            e.to_string()
                .contains("fewer than the smallest block size 2"),
            "{e}"
        );
        let (t, _) = tree_of(&p, "t");
        let text = write_conf(&t, "").expect("writes");
        assert!(
            text.ends_with("SwitchName=unplaced Nodes=cpu1,login1\n"),
            "{text}"
        );
        assert!(!text.contains("Switches=unplaced"), "{text}");
        let e = place_with(Source::Aws, &f(AWS), "x i-9\n", Unplaced::Isolate).expect_err("none");
        assert_eq!(e, PlacementError::NoPlacement);
    }

    /// GCP: `blockId/subBlockId/hostId`, with or without the leading `/`.
    #[test]
    fn gcp_physical_host_in_gcps_terms() {
        let gcp = r#"{"a":"/b1/s1/h1","b":"b1/s1/h2","c":"b1/s2/h3","d":"/b1/s2","e":"b1//h"}"#;
        let p = place(Source::Gcp, &f(gcp), "g1 a\ng2 b\ng3 c\n").expect("valid");
        assert_eq!(p[0].path, p[1].path);
        assert_eq!(ids(&p[2].path), ["b1", "s2"]);
        for bad in ["g d\n", "g e\n"] {
            let e = place(Source::Gcp, &f(gcp), bad).expect_err(bad).to_string();
            assert!(e.contains("is not blockId/subBlockId/hostId"), "{e}");
        }
    }

    /// OCI GB200: racks (customerGpuMemoryFabric) are the blocks, in local-block order,
    /// so the 2-rack aggregate is the local block.
    #[test]
    fn oci_gb200_racks_are_blocks_inside_local_blocks() {
        let mut m = serde_json::Map::new();
        let mut map = String::new();
        for k in 0..8 {
            // Racks r0..r3, two per local block; NODEMAP interleaves them.
            let rack = k % 4;
            m.insert(
                format!("o{k}"),
                serde_json::json!({"customerHPCIslandId":"isl","customerNetworkBlock":"nb",
                    "customerLocalBlock": format!("lb{}", rack % 2),
                    "customerGpuMemoryFabric": format!("r{rack}")}),
            );
            map.push_str(&format!("n{k} o{k}\n"));
        }
        let text = serde_json::Value::Object(m).to_string();
        let places = place(Source::Oci, &f(&text), &map).expect("valid");
        let (b, notes) = blocks(&places, "b");
        assert_eq!(notes, "# b1 = r0\n# b2 = r2\n# b3 = r1\n# b4 = r3\n");
        let Kind::Block(bl) = b.kind else {
            panic!("blocks")
        };
        assert_eq!(bl.sizes, vec![2, 4, 8]);
    }

    #[test]
    fn malformed_json_names_the_file_and_the_field() {
        let cases = [
            (
                Source::Aws,
                r#"{"Instances":[{"InstanceId":"i-1","NetworkNodes":["a",3]}]}"#,
                "in.json: Instances[0].NetworkNodes[1]: expected a string",
            ),
            (
                Source::Aws,
                r#"{"Instances":[{"NetworkNodes":[]}]}"#,
                "in.json: Instances[0].InstanceId: expected a string",
            ),
            (
                Source::Aws,
                r#"{"Reservations":[]}"#,
                "in.json: Instances: expected a list",
            ),
            (
                Source::Aws,
                r#"{"Instances":[{"InstanceId":"i-1","NetworkNodes":["a"],"CapacityBlockId":7}]}"#,
                "Instances[0].CapacityBlockId: expected a string or null",
            ),
            (
                Source::Oci,
                r#"{"o":{"customerLocalBlock":5}}"#,
                "in.json: o.customerLocalBlock: expected a string",
            ),
            (
                Source::Gcp,
                r#"{"g":{"x":1}}"#,
                "in.json: g: expected a physicalHost string",
            ),
            (Source::Gcp, "[1", "in.json: not JSON"),
        ];
        for (src, text, want) in cases {
            let e = place(src, &f(text), "n i-1\n").expect_err(want).to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
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
        assert_eq!(ids(&p[0].path), ["isl", "nb", "lb1"]);
        assert_eq!(ids(&p[1].path), ["isl", "nb", "lb1", "fab2"]);

        let gcp = r#"{"a4x-1":"/c1/r1/h1","a4x-2":"/c1/r1/h2","a4x-3":"/c1/r2/h3","bad":"c1/r2"}"#;
        let p = place(Source::Gcp, &f(gcp), "g1 a4x-1\ng2 a4x-2\ng3 a4x-3\n").expect("valid");
        let (b, _) = blocks(&p, "b");
        assert_eq!(
            write_conf(&b, "").expect("writes"),
            "BlockName=b1 Nodes=g[1-2]\nBlockName=b2 Nodes=g3\nBlockSizes=1,2\n"
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

    /// The borrowed facts reader takes what `NodeFacts` (one or an array) takes and
    /// refuses what it refuses, and reads the same strings, escapes included.
    #[test]
    fn facts_reader_agrees_with_node_facts() {
        let texts = [
            r#"{"hostname":"h1","gpus":[{"pci":"0000:01:00.0","minor":3,"fabric":{"cluster_uuid":"u","clique_id":1}}]}"#,
            r#" [{"hostname":"h\u0031","vendor":"aws","instance_type":"p5","x":[1,{}]},{"hostname":"h2"}]"#,
            r#"{"hostname":"h1","gpus":[{"minor":"3"}]}"#,
            r#"{"hostname":"h1","gpus":[{"fabric":{"cluster_uuid":"u"}}]}"#,
            r#"{"gpus":[]}"#,
            r#"[{"hostname":"h1","hostname":"h2"}]"#,
            r#"{"hostname":"h1","vendor":7}"#,
            "[]",
            "",
        ];
        for text in texts {
            let reference = serde_json::from_str::<Vec<NodeFacts>>(text)
                .or_else(|_| serde_json::from_str::<NodeFacts>(text).map(|f| vec![f]));
            let view = fast::facts("f", text);
            assert_eq!(view.is_ok(), reference.is_ok(), "{text}");
            if let (Ok(view), Ok(reference)) = (view, reference) {
                // Everything the unit is made of: hostname, each GPU's PCI id and fabric.
                type Seen<'s> = (&'s str, Vec<(Option<&'s str>, Option<(&'s str, u32)>)>);
                let got: Vec<Seen> = view
                    .iter()
                    .map(|f| {
                        let gpus = f.gpus.iter().map(|g| {
                            let fabric = g.fabric.as_ref().map(|x| (&*x.cluster_uuid, x.clique_id));
                            (g.pci.as_deref(), fabric)
                        });
                        (&*f.hostname, gpus.collect())
                    })
                    .collect();
                let want: Vec<Seen> = reference
                    .iter()
                    .map(|f| {
                        let gpus = f.gpus.iter().map(|g| {
                            let fabric = g
                                .fabric
                                .as_ref()
                                .map(|x| (x.cluster_uuid.as_str(), x.clique_id));
                            (g.pci.as_deref(), fabric)
                        });
                        (f.hostname.as_str(), gpus.collect())
                    })
                    .collect();
                assert_eq!(got, want, "{text}");
            }
        }
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
