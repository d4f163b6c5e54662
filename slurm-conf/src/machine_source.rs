//! Where a command's machine description comes from: the catalog, a topology XML
//! file, or a sysfs tree (the live node by default).

use std::path::{Path, PathBuf};

use clap::Args as ClapArgs;
use gpu_affinity::catalog;
use gpu_affinity::model::Machine;
use gpu_affinity::sources;

use crate::CliError;

/// The three mutually exclusive ways to name a machine.
#[derive(ClapArgs, Debug, Clone)]
#[group(multiple = false)]
pub struct MachineArgs {
    /// A machine of the embedded catalog (see `gpu-affinity machines`).
    #[arg(long, value_name = "NAME")]
    pub machine: Option<String>,
    /// An NCCL topology XML or hwloc v2 XML file (detected).
    #[arg(long, value_name = "FILE.xml")]
    pub topology: Option<PathBuf>,
    /// A sysfs/procfs tree to read instead of the live machine.
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,
}

impl MachineArgs {
    /// Load the named machine; with nothing named, read the live node under `/`.
    pub fn load(&self) -> Result<Machine, CliError> {
        if let Some(name) = &self.machine {
            return Ok(catalog::machine(name)?);
        }
        if let Some(path) = &self.topology {
            return Ok(sources::read_machine_xml(path)?);
        }
        let root = self.sysfs_root.as_deref().unwrap_or(Path::new("/"));
        Ok(sources::sysfs::read_machine(root)?)
    }
}

/// The catalog listing `gpu-affinity machines` prints, one machine a line.
pub fn catalog_listing() -> String {
    let mut out = String::new();
    for entry in catalog::entries() {
        let marker = if entry.name == catalog::DEFAULT_MACHINE {
            " (default)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{:<28} {:<6} {}{marker}\n",
            entry.name, entry.vendor, entry.description
        ));
    }
    out
}
