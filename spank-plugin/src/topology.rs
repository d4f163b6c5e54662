//! Where the node's topology comes from: the core's sysfs reader under `sysfs_root`
//! (root's choice from plugstack.conf or the admin config, never the user's).

use std::path::Path;

use gpu_affinity::model::Machine;

pub fn read_machine(root: &Path) -> Result<Machine, String> {
    gpu_affinity::sources::sysfs::read_machine(root).map_err(|e| e.to_string())
}
