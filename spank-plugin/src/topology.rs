//! Where the node's topology comes from.
//!
//! HOOK(sysfs): forwards to `gpu_affinity::sources::sysfs::read_machine` once the core's
//! sysfs reader lands on main; until then the plugin reports the topology as unknown
//! (prefer: left alone with a warning; strict: refused).

use std::path::Path;

use gpu_affinity::model::Machine;

pub fn read_machine(root: &Path) -> Result<Machine, String> {
    Err(format!(
        "cannot read the topology under {}: this build has no sysfs reader",
        root.display()
    ))
}
