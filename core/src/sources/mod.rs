//! Machine description sources: what builds a [`Machine`] (the node's GPUs, NICs, NUMA
//! nodes and PCI tree). Each is a pure parser over bytes plus (where it reads files) a thin
//! reader: the node's sysfs ([`sysfs`]), and the machine XML files ([`hwloc_xml`],
//! [`nccl_xml`]).
//!
//! Names, since "topology" means four things in this project: *machine XML* is an hwloc
//! v2 export or an NCCL topology file read as a machine description (here); *Slurm's
//! topology* is topology.conf / topology.yaml (`crate::slurm::topology`); the *NCCL
//! topology file* the plugin hands NCCL (`NCCL_TOPO_FILE`) is decided and written in
//! `crate::fabric::topo`; the plugin's *sysfs machine* is [`sysfs`] read under
//! `sysfs_root`.
//!
//! The machine XML sources share one error type, [`MachineXmlError`], and one entry
//! point, [`parse_machine_xml`], which tells the two formats apart by their root element
//! so `gpu-affinity explain --topology FILE` needs no flag.

pub mod fixture;
pub mod hwloc_xml;
pub mod nccl_xml;
pub mod sysfs;

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::model::{Machine, ModelError};

/// Largest machine XML file [`read_machine_xml`] accepts. Real hwloc exports of 8-GPU nodes are
/// well under 1 MiB; the bound keeps a wrong path (a disk image, /dev/zero) from eating memory.
pub const MAX_MACHINE_XML_BYTES: u64 = 32 * 1024 * 1024;

/// Most XML nodes the parsers accept; a hostile file cannot make roxmltree allocate without end.
const MAX_XML_NODES: u32 = 4_000_000;

/// Deepest element nesting accepted. roxmltree parses nested elements recursively, so an
/// unbounded depth would overflow the stack; real files nest about 15 levels (hwloc) or
/// 10 (NCCL).
pub const MAX_XML_DEPTH: usize = 256;

/// Why a machine XML file could not be turned into a [`Machine`]. Each variant displays as one
/// line naming what was wrong and, where the XML parser knows it, the line number.
#[derive(Debug, thiserror::Error)]
pub enum MachineXmlError {
    /// Not well-formed XML. `line` is `None` when the XML parser gives no position
    /// (e.g. the file ends early).
    #[error("malformed XML{}: {message}", line_suffix(*.line))]
    Xml { line: Option<u32>, message: String },

    /// An NCCL graph file (`NCCL_GRAPH_FILE`): channel orders, not a topology.
    #[error(
        "line {line}: <graphs> is an NCCL graph file (NCCL_GRAPH_FILE), not a topology; \
         give the NCCL_TOPO_FILE (<system>) or an hwloc v2 export (<topology>)"
    )]
    NcclGraph { line: u32 },

    /// A root element neither parser knows.
    #[error(
        "line {line}: root element <{found}> is not a topology; expected <system> \
         (NCCL topology, NCCL_TOPO_FILE) or <topology> (hwloc v2 XML, lstopo --of xml)"
    )]
    UnknownRoot { line: u32, found: String },

    /// A format-specific parser was given the other format (or something else).
    #[error("line {line}: root element <{found}> is not {expected}")]
    WrongRoot {
        line: u32,
        found: String,
        expected: &'static str,
    },

    /// hwloc 3 XML, hwloc 1.x XML (no version attribute) or an unknown version.
    #[error(
        "{what} is not supported, export with hwloc 2.x (lstopo --of xml); \
         found <topology version={version:?}>"
    )]
    UnsupportedHwlocVersion { what: &'static str, version: String },

    /// A required attribute is absent.
    #[error("line {line}: <{element}> has no {attr} attribute")]
    MissingAttribute {
        line: u32,
        element: String,
        attr: &'static str,
    },

    /// An attribute whose value cannot be read.
    #[error("line {line}: <{element}> {attr}={value:?}: {reason}")]
    BadAttribute {
        line: u32,
        element: String,
        attr: String,
        value: String,
        reason: String,
    },

    /// The same (non-placeholder) PCI function appears twice.
    #[error("line {line}: PCI device {addr} is listed twice")]
    DuplicatePci {
        line: u32,
        addr: crate::pci::PciAddr,
    },

    /// The same NUMA node appears twice.
    #[error("line {line}: NUMA node {id} is listed twice")]
    DuplicateNuma { line: u32, id: u32 },

    /// The parts parsed but do not fit together.
    #[error("inconsistent topology: {0}")]
    Model(#[from] ModelError),

    /// The file could not be read.
    #[error("cannot read topology file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    /// The file is larger than [`MAX_MACHINE_XML_BYTES`].
    #[error("topology file {} is larger than {limit} bytes; is it really a topology?", path.display())]
    TooLarge { path: PathBuf, limit: u64 },

    /// The file is not UTF-8 text.
    #[error("topology file {} is not UTF-8 text", path.display())]
    NotUtf8 { path: PathBuf },

    /// The file is not root's alone (owner, or group/other write): it decides
    /// NCCL_TOPO_FILE for every job on the node, so it is refused like an untrusted
    /// config or profile.
    #[error(transparent)]
    Untrusted(#[from] crate::trust::TrustError),

    /// Any of the above, in a named file.
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        source: Box<MachineXmlError>,
    },
}

fn line_suffix(line: Option<u32>) -> String {
    line.map(|l| format!(" at line {l}")).unwrap_or_default()
}

/// Parse `text` as XML with the limits every topology parser uses: DTDs allowed (hwloc
/// exports carry `<!DOCTYPE topology SYSTEM "hwloc2.dtd">`, which roxmltree never fetches;
/// its entity-expansion limits still apply) and a node budget.
pub(crate) fn parse_xml(text: &str) -> Result<roxmltree::Document<'_>, MachineXmlError> {
    check_structure(text)?;
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        nodes_limit: MAX_XML_NODES,
    };
    roxmltree::Document::parse_with_options(text, options).map_err(|e| {
        use roxmltree::Error as E;
        // These variants carry no real position (roxmltree reports them at 1:1).
        let positionless = matches!(
            e,
            E::NoRootNode
                | E::UnclosedRootNode
                | E::UnexpectedEndOfStream
                | E::DtdDetected
                | E::NodesLimitReached
                | E::AttributesLimitReached
                | E::NamespacesLimitReached
        );
        let message = match e {
            E::UnexpectedEndOfStream | E::UnclosedRootNode => {
                format!("{e} (is the file truncated?)")
            }
            _ => e.to_string(),
        };
        MachineXmlError::Xml {
            line: (!positionless).then(|| e.pos().row),
            message,
        }
    })
}

/// A cheap pass over the raw text before roxmltree sees it: refuse nesting deeper than
/// [`MAX_XML_DEPTH`] and DTD internal subsets (`<!DOCTYPE x [ ... ]>`). Neither NCCL nor
/// hwloc writes an internal subset, and without one no entity can expand into markup, so
/// the depth counted here bounds roxmltree's recursion. The count errs high (it counts
/// anything that looks like an open tag), never low.
fn check_structure(text: &str) -> Result<(), MachineXmlError> {
    let bytes = text.as_bytes();
    let line_at = |pos: usize| 1 + bytes[..pos].iter().filter(|b| **b == b'\n').count() as u32;
    let skip_past = |from: usize, end: &[u8]| {
        bytes[from..]
            .windows(end.len())
            .position(|w| w == end)
            .map_or(bytes.len(), |p| from + p + end.len())
    };
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'<' {
            i += 1;
            continue;
        }
        let rest = &bytes[i..];
        if rest.starts_with(b"<!--") {
            i = skip_past(i + 4, b"-->");
        } else if rest.starts_with(b"<![CDATA[") {
            i = skip_past(i + 9, b"]]>");
        } else if rest.starts_with(b"<?") {
            i = skip_past(i + 2, b"?>");
        } else if rest.starts_with(b"<!") {
            let end = skip_past(i + 2, b">");
            if bytes[i..end].contains(&b'[') {
                return Err(MachineXmlError::Xml {
                    line: Some(line_at(i)),
                    message: "DTD internal subsets (<!DOCTYPE ... [ ... ]>) are not supported"
                        .into(),
                });
            }
            i = end;
        } else if rest.starts_with(b"</") {
            depth = depth.saturating_sub(1);
            i += 2;
        } else {
            // An open tag: find its end outside quoted attribute values.
            let mut j = i + 1;
            let mut quote = None;
            while j < bytes.len() {
                match (quote, bytes[j]) {
                    (None, q @ (b'"' | b'\'')) => quote = Some(q),
                    (Some(q), c) if c == q => quote = None,
                    (None, b'>') => break,
                    _ => {}
                }
                j += 1;
            }
            if j >= bytes.len() || bytes[j - 1] != b'/' {
                depth += 1;
                if depth > MAX_XML_DEPTH {
                    return Err(MachineXmlError::Xml {
                        line: Some(line_at(i)),
                        message: format!("elements nested deeper than {MAX_XML_DEPTH} levels"),
                    });
                }
            }
            i = j + 1;
        }
    }
    Ok(())
}

/// The 1-based line an XML node starts on, for error messages.
pub(crate) fn line_of(node: roxmltree::Node<'_, '_>) -> u32 {
    node.document().text_pos_at(node.range().start).row
}

/// Parse a machine XML file of either format, detected by its root element: `<system>` is
/// an NCCL topology (`NCCL_TOPO_FILE`), `<topology>` an hwloc v2 export. An NCCL graph file
/// (`<graphs>`) and anything else are refused with an error naming what was found.
///
/// The machine returned is normalized and passes [`Machine::validate`].
pub fn parse_machine_xml(text: &str) -> Result<Machine, MachineXmlError> {
    let doc = parse_xml(text)?;
    let root = doc.root_element();
    match root.tag_name().name() {
        "system" => nccl_xml::from_document(&doc),
        "topology" => hwloc_xml::from_document(&doc),
        "graphs" => Err(MachineXmlError::NcclGraph {
            line: line_of(root),
        }),
        other => Err(MachineXmlError::UnknownRoot {
            line: line_of(root),
            found: other.to_string(),
        }),
    }
}

/// The vendor NCCL topology file a profile names (an absolute path on the node), looked
/// up under `root` (the sysfs root: `/` on a live node, a fixture or replayed tree
/// otherwise, which then carries its own node's files). `Ok(None)` when absent.
/// The plugin and `gpu-affinity explain` both read it this way. The file is a root-side
/// input (Invariant 2): the opened file must belong to `owner` (root; tests pass their
/// own uid) and not be writable by group or others.
pub fn read_vendor_nccl_topo(
    root: &Path,
    path: &str,
    owner: u32,
) -> Result<Option<Machine>, MachineXmlError> {
    let full = root.join(path.trim_start_matches('/'));
    if !full.exists() {
        return Ok(None);
    }
    let file = open_machine_xml(&full)?;
    let meta = file.metadata().map_err(|source| MachineXmlError::Io {
        path: full.clone(),
        source,
    })?;
    crate::trust::check_trusted(&meta, "vendor NCCL topology file", &full, owner)?;
    read_opened_machine_xml(file, &full).map(Some)
}

/// Read and parse a machine XML file (NCCL or hwloc XML, detected). The read is bounded by
/// [`MAX_MACHINE_XML_BYTES`]; every error names the file.
pub fn read_machine_xml(path: &Path) -> Result<Machine, MachineXmlError> {
    read_opened_machine_xml(open_machine_xml(path)?, path)
}

/// Non-blocking and regular files only: a FIFO at a profile's path must not hang the
/// step's launch.
fn open_machine_xml(path: &Path) -> Result<std::fs::File, MachineXmlError> {
    crate::trust::open_regular(path).map_err(|source| MachineXmlError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The rest of [`read_machine_xml`], on a file already opened (and checked) from `path`.
fn read_opened_machine_xml(file: std::fs::File, path: &Path) -> Result<Machine, MachineXmlError> {
    let io_err = |source| MachineXmlError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    file.take(MAX_MACHINE_XML_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > MAX_MACHINE_XML_BYTES {
        return Err(MachineXmlError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_MACHINE_XML_BYTES,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| MachineXmlError::NotUtf8 {
        path: path.to_path_buf(),
    })?;
    parse_machine_xml(&text).map_err(|e| MachineXmlError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

/// Normalize and validate a parsed machine: the last step of every XML source.
pub(crate) fn finish(mut machine: Machine) -> Result<Machine, MachineXmlError> {
    machine.normalize();
    machine.validate()?;
    Ok(machine)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!(
            "<a>{}{}</a>",
            "<b x='>'>".repeat(depth),
            "</b>".repeat(depth)
        )
    }

    #[test]
    fn a_fifo_at_a_topology_path_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("topo.xml");
        crate::trust::fifo::make(&path);
        let p = path.clone();
        let err = crate::trust::fifo::returns(&path, move || read_machine_xml(&p))
            .expect_err("a FIFO is no topology");
        assert!(
            err.to_string().contains("not a regular file (a FIFO)"),
            "{err}"
        );
    }

    #[test]
    fn a_vendor_file_under_the_root_must_be_owners_alone() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = "/opt/vendor/topo.xml";
        assert!(matches!(
            read_vendor_nccl_topo(tmp.path(), path, 0),
            Ok(None)
        ));
        let full = tmp.path().join("opt/vendor/topo.xml");
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        let machine = crate::catalog::machine("Standard_ND96isr_H100_v5").expect("catalog");
        std::fs::write(
            &full,
            crate::fabric::topo_xml::render(&machine, &machine.fabric_nics()),
        )
        .expect("write");
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let uid = std::fs::metadata(&full).expect("stat").uid();
        let read = read_vendor_nccl_topo(tmp.path(), path, uid).expect("trusted");
        assert_eq!(read.map(|m| m.gpus.len()), Some(8));
        let err = read_vendor_nccl_topo(tmp.path(), path, uid + 1).expect_err("foreign owner");
        assert!(
            err.to_string().starts_with(&format!(
                "vendor NCCL topology file {} is owned by uid {uid}",
                full.display()
            )),
            "{err}"
        );
        for mode in [0o664, 0o646] {
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let err = read_vendor_nccl_topo(tmp.path(), path, uid).expect_err("writable");
            assert!(
                err.to_string()
                    .contains(&format!("is writable by group or others (mode {mode:04o})")),
                "{err}"
            );
        }
    }

    #[test]
    fn nesting_is_bounded_before_roxmltree_recurses() {
        assert!(parse_xml(&nested(MAX_XML_DEPTH - 1)).is_ok());
        let err = parse_xml(&nested(100_000))
            .expect_err("too deep")
            .to_string();
        assert!(err.contains("nested deeper"), "{err}");
        // Self-closing tags, comments and declarations do not count.
        let flat = format!(
            "<?xml version='1.0'?><!-- <<<< --><a>{}</a>",
            "<b/>".repeat(10_000)
        );
        assert!(parse_xml(&flat).is_ok());
    }

    #[test]
    fn internal_dtd_subsets_are_refused() {
        let laughs = "<!DOCTYPE t [<!ENTITY a \"<b>x</b>\">]><t>&a;</t>";
        let err = parse_xml(laughs).expect_err("internal subset").to_string();
        assert!(err.contains("internal subsets"), "{err}");
        assert!(parse_xml("<!DOCTYPE topology SYSTEM \"hwloc2.dtd\"><topology/>").is_ok());
    }

    #[test]
    fn detection_by_root_element() {
        let err = parse_machine_xml("<graphs version=\"1\"/>")
            .expect_err("graph")
            .to_string();
        assert!(
            err.contains("NCCL graph file (NCCL_GRAPH_FILE), not a topology"),
            "{err}"
        );
        let err = parse_machine_xml("\n<svg/>").expect_err("svg").to_string();
        assert!(err.starts_with("line 2: root element <svg>"), "{err}");
        let err = nccl_xml::parse("<topology version=\"2.0\"/>")
            .expect_err("wrong")
            .to_string();
        assert!(err.contains("not an NCCL topology"), "{err}");
        let err = hwloc_xml::parse("<system/>")
            .expect_err("wrong")
            .to_string();
        assert!(err.contains("not an hwloc topology"), "{err}");
        let err = parse_machine_xml("<system><cpu numaid=\"0\">")
            .expect_err("truncated")
            .to_string();
        assert!(err.contains("truncated"), "{err}");
    }
}
