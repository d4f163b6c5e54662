//! Where the node's machine description comes from: the core's sysfs reader under `sysfs_root`
//! (root's choice from plugstack.conf or the admin config, never the user's).
//!
//! A step reads it with [`Detail::Placement`]: discovery sits on every step's launch path,
//! and the PCIe link attributes it leaves out were most of its file opens. Only a step
//! that generates an NCCL topology file reads them, through [`read_pci_links`].

use std::path::Path;

use gpu_affinity::model::Machine;
use gpu_affinity::sources::sysfs::{self, Detail};

pub fn read_machine(root: &Path, detail: Detail) -> Result<Machine, String> {
    sysfs::read_machine_with(root, detail).map_err(|e| e.to_string())
}

pub fn read_pci_links(root: &Path, machine: &mut Machine) -> Result<(), String> {
    sysfs::read_pci_links(root, machine).map_err(|e| e.to_string())
}
