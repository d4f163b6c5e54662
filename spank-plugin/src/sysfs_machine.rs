//! Where the node's machine description comes from: the core's sysfs reader under `sysfs_root`
//! (root's choice from plugstack.conf or the admin config, never the user's).
//!
//! A step reads it with [`Detail::Placement`]: discovery sits on every step's launch path,
//! and the PCIe link attributes it leaves out were most of its file opens. Only a step
//! that generates an NCCL topology file reads them, through [`read_pci_links`].

use std::path::Path;

use gpu_affinity::model::Machine;
use gpu_affinity::saved;
use gpu_affinity::sources::sysfs::{self, Detail};

use crate::copies::{self, Copies};

pub fn read_machine(root: &Path, detail: Detail) -> Result<Machine, String> {
    sysfs::read_machine_with(root, detail).map_err(|e| e.to_string())
}

pub fn read_pci_links(root: &Path, machine: &mut Machine) -> Result<(), String> {
    sysfs::read_pci_links(root, machine).map_err(|e| e.to_string())
}

/// The step's machine ([`Detail::Placement`] under `root`), from the node's copy while
/// the node's fingerprint is the one it was saved under, else read afresh and saved
/// (see `copies.rs`).
pub fn step_machine(root: &Path, copies: &Copies) -> Result<Machine, String> {
    let fingerprint = saved::node_fingerprint(root);
    copies.through(copies::MACHINE, fingerprint, || {
        read_machine(root, Detail::Placement)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn me() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    /// A catalog machine's tree and a private run_dir beside it.
    fn node(name: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = t.path().join("node");
        let catalog = gpu_affinity::catalog::machine(name).unwrap();
        gpu_affinity::sources::fixture::write_fixture(&catalog, &root).unwrap();
        let run = t.path().join("run");
        (t, root, run)
    }

    #[test]
    fn the_copy_is_the_machine_read_afresh_until_the_node_changes() {
        let (_t, root, run) = node("p5.48xlarge");
        let fresh = read_machine(&root, Detail::Placement).unwrap();
        assert_eq!(
            step_machine(&root, &Copies::new(&run, me())).unwrap(),
            fresh
        );
        assert!(run.join(copies::MACHINE).is_file(), "saved");
        assert_eq!(
            step_machine(&root, &Copies::new(&run, me())).unwrap(),
            fresh,
            "from the copy"
        );

        // The copy is what the next step uses: one edited behind the fingerprint's back
        // shows it (so the test knows the copy, not sysfs, answered).
        let copy = run.join(copies::MACHINE);
        let mut edited = fresh.clone();
        edited.gpus.pop();
        let fingerprint = saved::node_fingerprint(&root).unwrap();
        std::fs::write(&copy, saved::to_bytes(&fingerprint, &edited).unwrap()).unwrap();
        assert_eq!(
            step_machine(&root, &Copies::new(&run, me())).unwrap(),
            edited
        );

        // A NIC unplugged: the listing changes, the machine is read afresh and saved.
        let nic = &fresh.nics[0].pci;
        std::fs::remove_dir_all(root.join("sys/bus/pci/devices").join(nic.to_string()))
            .or_else(|_| {
                std::fs::remove_file(root.join("sys/bus/pci/devices").join(nic.to_string()))
            })
            .unwrap();
        let unplugged = read_machine(&root, Detail::Placement).unwrap();
        assert_ne!(unplugged, fresh);
        assert_eq!(
            step_machine(&root, &Copies::new(&run, me())).unwrap(),
            unplugged
        );
        assert_eq!(
            step_machine(&root, &Copies::new(&run, me())).unwrap(),
            unplugged
        );
    }

    #[test]
    fn a_node_that_cannot_be_read_saves_nothing() {
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = t.path().join("node");
        let node0 = root.join("sys/devices/system/node/node0");
        std::fs::create_dir_all(&node0).unwrap();
        std::fs::write(node0.join("cpulist"), "not a cpu list\n").unwrap();
        let run = t.path().join("run");
        let err = step_machine(&root, &Copies::new(&run, me())).unwrap_err();
        assert_eq!(err, read_machine(&root, Detail::Placement).unwrap_err());
        assert!(!run.join(copies::MACHINE).exists());
    }
}
