//! The machine catalog: real cloud instance types written down in a compact TOML form
//! and expanded into full `Machine`s (NUMA nodes, cores, PCI tree with every bridge,
//! GPUs, NICs, DMI identity).
//!
//! The descriptions live in `core/catalog/*.toml`, embedded in the binary; each fact in
//! them cites its source, and every fact not published anywhere is marked SYNTHETIC.
//! `parse` reads the same format from an admin's or a test's own file; such a file may
//! say `extends = "<catalog machine>"` and replace only some top-level keys (e.g. fold
//! the CPUs of a big machine onto a 2-CPU test VM).
//!
//! Format, in short (see any catalog file for a complete example):
//!
//! ```toml
//! name = "p5.48xlarge"            # required: the instance type as the vendor writes it
//! vendor = "aws"                  # aws | azure | gcp | oci | ...
//! instance = "P5"                 # the vendor's family name
//! description = "8x H100, 32 EFA" # one line
//! extends = "..."                 # optional: a catalog machine supplying missing keys
//! [dmi]                           # sys_vendor, product_name, chassis_asset_tag, board_vendor
//! [cpu]                           # threads_per_core, siblings = "offset" | "adjacent", offset
//! [[numa]]                        # id, cpus = "0-47,96-143"
//! [pcie]                          # root_port_id, switch_id ("vvvv:dddd"), link_speed, link_width
//! [gpu]                           # pci_id, model, class: what every GPU is
//! [nic_types.NAME]                # pci_id, kind, class, rdma/netdev name templates, rate,
//!                                 # link_layer, state
//! [[group]]                       # numa, root = "pci0000:44" (may be left out with
//!                                 # on_root_bus: each device is then its own root),
//!                                 # on_root_bus, root_port,
//!                                 # switch = { upstream, pci_id },
//!                                 # gpus = [{ pci, minor, pci_id, model, downstream }],
//!                                 # nics = [{ pci, type, rdma, netdev, rate, downstream }]
//! ```
//!
//! Bridges a group does not give are generated deterministically: root ports
//! `<root bus>:01.0`, `:02.0`, ... per root complex in file order; a switch upstream port
//! two buses below the group's first endpoint bus; downstream ports on the next bus,
//! numbered in endpoint address order (functions of one device share one port).

mod expand;
mod format;
#[cfg(test)]
mod tests;

use crate::model::{Machine, ModelError};

use expand::{Layer, Source};
use format::Description;

/// The machine `explain` and `fixture` use when none is named.
pub const DEFAULT_MACHINE: &str = "p5.48xlarge";

/// The embedded descriptions: (name, TOML text). The name must equal the file's `name`.
const FILES: &[(&str, &str)] = &[
    ("p4d.24xlarge", include_str!("../catalog/p4d.24xlarge.toml")),
    ("p5.48xlarge", include_str!("../catalog/p5.48xlarge.toml")),
    (
        "Standard_ND96asr_v4",
        include_str!("../catalog/standard_nd96asr_v4.toml"),
    ),
    (
        "Standard_ND96isr_H100_v5",
        include_str!("../catalog/standard_nd96isr_h100_v5.toml"),
    ),
    (
        "a3-highgpu-8g",
        include_str!("../catalog/a3-highgpu-8g.toml"),
    ),
    (
        "a3-ultragpu-8g",
        include_str!("../catalog/a3-ultragpu-8g.toml"),
    ),
    (
        "BM.GPU.H100.8",
        include_str!("../catalog/bm.gpu.h100.8.toml"),
    ),
    (
        "BM.GPU.H200.8",
        include_str!("../catalog/bm.gpu.h200.8.toml"),
    ),
    ("p5e.48xlarge", include_str!("../catalog/p5e.48xlarge.toml")),
    (
        "p5en.48xlarge",
        include_str!("../catalog/p5en.48xlarge.toml"),
    ),
    (
        "p6-b200.48xlarge",
        include_str!("../catalog/p6-b200.48xlarge.toml"),
    ),
    (
        "p6-b300.48xlarge",
        include_str!("../catalog/p6-b300.48xlarge.toml"),
    ),
    (
        "p6e-gb200.36xlarge",
        include_str!("../catalog/p6e-gb200.36xlarge.toml"),
    ),
    (
        "Standard_ND128isr_GB300_v6",
        include_str!("../catalog/standard_nd128isr_gb300_v6.toml"),
    ),
    (
        "Standard_ND128isr_NDR_GB200_v6",
        include_str!("../catalog/standard_nd128isr_ndr_gb200_v6.toml"),
    ),
    (
        "a3-megagpu-8g",
        include_str!("../catalog/a3-megagpu-8g.toml"),
    ),
    (
        "a4-highgpu-8g",
        include_str!("../catalog/a4-highgpu-8g.toml"),
    ),
    (
        "a4x-highgpu-4g",
        include_str!("../catalog/a4x-highgpu-4g.toml"),
    ),
    (
        "BM.GPU.B200.8",
        include_str!("../catalog/bm.gpu.b200.8.toml"),
    ),
    (
        "BM.GPU.GB200-v3.4",
        include_str!("../catalog/bm.gpu.gb200-v3.4.toml"),
    ),
    (
        "BM.GPU.GB300.4",
        include_str!("../catalog/bm.gpu.gb300.4.toml"),
    ),
];

/// How deep `extends` may chain before it counts as a cycle.
const MAX_EXTENDS_DEPTH: usize = 4;

/// One catalog machine at a glance.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CatalogEntry {
    /// The instance type as the vendor writes it: "p5.48xlarge", "Standard_ND96isr_H100_v5".
    pub name: String,
    /// "aws", "azure", "gcp", "oci".
    pub vendor: String,
    /// The vendor's family name: "P5", "ND H100 v5".
    pub instance: String,
    /// One line: GPUs, fabric, NUMA.
    pub description: String,
}

/// Why a machine description could not be read or does not make sense.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CatalogError {
    #[error("unknown machine {name:?}; known machines: {known}")]
    UnknownMachine { name: String, known: String },
    #[error("{origin}, line {line}, column {column}: {message}")]
    Syntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("machine description has no {0:?}")]
    Missing(&'static str),
    #[error("{at}: {what} is on NUMA node {numa}, which no [[numa]] entry defines")]
    UnknownNuma { at: String, what: String, numa: u32 },
    #[error("{at}: CPU {cpu} is in NUMA node {first} and again in NUMA node {second}")]
    CpuOverlap {
        at: String,
        cpu: u32,
        first: u32,
        second: u32,
    },
    #[error("[cpu]: {0}")]
    Smt(String),
    #[error("{at}: {message}")]
    Layout { at: String, message: String },
    #[error("extends: {0}")]
    Extends(String),
    #[error("machine does not fit together: {0}")]
    Model(#[from] ModelError),
}

/// Names of the catalog machines, in catalog order.
pub fn names() -> Vec<&'static str> {
    FILES.iter().map(|(name, _)| *name).collect()
}

/// The embedded TOML text of a catalog machine (case-insensitive name).
pub fn source(name: &str) -> Option<&'static str> {
    FILES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, text)| *text)
}

/// A catalog machine by name, case-insensitive.
pub fn machine(name: &str) -> Result<Machine, CatalogError> {
    let (base, text) = FILES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .ok_or_else(|| CatalogError::UnknownMachine {
            name: name.to_string(),
            known: names().join(", "),
        })?;
    expand(text, Some(base)).map(|(_, m)| m)
}

/// Read a description (an admin's or a test's file); the machine is normalized and valid.
pub fn parse(text: &str) -> Result<Machine, CatalogError> {
    parse_entry(text).map(|(_, m)| m)
}

/// Like `parse`, also returning the description's header. Missing header fields are "".
pub fn parse_entry(text: &str) -> Result<(CatalogEntry, Machine), CatalogError> {
    expand(text, None)
}

/// Every catalog machine's header, in catalog order.
pub fn entries() -> Vec<CatalogEntry> {
    FILES
        .iter()
        .map(|(name, text)| match expand(text, Some(name)) {
            Ok((entry, _)) => entry,
            // Unreachable for the shipped catalog (its tests parse every file); still
            // say what is wrong rather than panic.
            Err(e) => CatalogEntry {
                name: name.to_string(),
                vendor: String::new(),
                instance: String::new(),
                description: format!("broken catalog entry: {e}"),
            },
        })
        .collect()
}

fn expand(text: &str, base: Option<&str>) -> Result<(CatalogEntry, Machine), CatalogError> {
    let mut layers = vec![Layer {
        desc: deserialize(text, base)?,
        src: Source { base, text },
    }];
    while let Some(parent) = layers.last().and_then(|l| l.desc.extends.clone()) {
        if layers.len() > MAX_EXTENDS_DEPTH {
            return Err(CatalogError::Extends(format!(
                "more than {MAX_EXTENDS_DEPTH} levels (a cycle?) at {parent:?}"
            )));
        }
        let (name, parent_text) = FILES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(&parent))
            .ok_or_else(|| {
                CatalogError::Extends(format!(
                    "{parent:?} is not a catalog machine; known machines: {}",
                    names().join(", ")
                ))
            })?;
        let desc = deserialize(parent_text, Some(name))?;
        layers.push(Layer {
            desc,
            src: Source {
                base: Some(name),
                text: parent_text,
            },
        });
    }
    let (header, machine) = expand::expand(&layers)?;
    let entry = CatalogEntry {
        name: header.name,
        vendor: header.vendor.unwrap_or_default(),
        instance: header.instance.unwrap_or_default(),
        description: header.description.unwrap_or_default(),
    };
    Ok((entry, machine))
}

/// Deserialize one text, turning toml's multi-line report into one line with its position
/// and, for a bad value, the key it was given to.
fn deserialize(text: &str, base: Option<&str>) -> Result<Description, CatalogError> {
    toml::from_str(text).map_err(|e| {
        let mut message = e.message().trim().replace('\n', " ");
        let (line, column) = match e.span() {
            Some(span) => {
                let start = span.start.min(text.len());
                let before = &text.as_bytes()[..start];
                let line = before.iter().filter(|b| **b == b'\n').count() + 1;
                let line_start = before
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |p| p + 1);
                if let Some(key) = text.get(line_start..start).and_then(key_before) {
                    message = format!("{key}: {message}");
                }
                (line, start - line_start + 1)
            }
            None => (0, 0),
        };
        CatalogError::Syntax {
            origin: match base {
                Some(name) => format!("catalog machine {name}"),
                None => "machine description".to_string(),
            },
            line,
            column,
            message,
        }
    })
}

/// The key of `key = <value>` when a bad value starts right after it on the line.
fn key_before(line_head: &str) -> Option<&str> {
    let head = line_head.trim_end().strip_suffix('=')?.trim_end();
    // The key starts after the last character that cannot be in one; that character
    // may be several bytes long (a BOM, any non-ASCII text before the key).
    let start = head
        .char_indices()
        .rfind(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .map_or(0, |(p, c)| p + c.len_utf8());
    let key = &head[start..];
    (!key.is_empty()).then_some(key)
}
