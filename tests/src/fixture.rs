//! Machine descriptions for the test node and the sysfs tree the plugin reads.
//! (Waiting for core's fixture writer and catalog to land on main.)

use std::path::Path;

use gpu_affinity::model::Machine;

use crate::error::Result;
use crate::harness_err;

/// Write `machine` as a sysfs-shaped tree under `root`.
pub fn write_sysfs(_machine: &Machine, root: &Path) -> Result<()> {
    Err(harness_err!(
        "cannot write {}: core's fixture writer has not landed yet",
        root.display()
    ))
}
