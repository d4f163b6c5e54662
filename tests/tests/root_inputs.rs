//! The node's inputs are root's: slurmstepd reads the topology (`sysfs_root=`), the admin
//! profiles and the vendor topology file before it drops to the job user's privileges, so
//! a fixture tree inside a directory only root can enter still binds an unprivileged
//! user's step.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{ND_H100_V5, check_step, machine, probe_whole_node};
use gpu_affinity_tests::{ClientOptions, ClusterBuilder, fixture};

#[test]
fn a_fixture_only_root_can_reach_still_binds_user_nobodys_step() {
    let m = machine(ND_H100_V5);
    // Like `mktemp -d`: root's, mode 0700, so user nobody cannot enter it.
    let private = tempfile::Builder::new()
        .prefix("gpu-affinity-private.")
        .tempdir()
        .expect("private dir");
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod 0700");
    let meta = std::fs::metadata(private.path()).expect("stat");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700));
    let root = private.path().join("sysfs");
    fixture::write_sysfs(&m, &root).expect("fixture");

    let gpus = u32::try_from(m.gpus.len()).expect("GPU count");
    let Some(cluster) = ClusterBuilder::new()
        .gpus(gpus)
        .sysfs_root(&root)
        .with_plugin()
        .start_or_skip("fixture_only_root_can_reach")
        .unwrap_or_else(|e| panic!("cannot start the cluster: {e}"))
    else {
        return;
    };
    let nobody = ClientOptions::as_user("nobody");
    // The tree really is out of nobody's reach.
    let out = cluster
        .srun_with(&["-n1", "ls", &root.display().to_string()], &nobody)
        .expect("run srun");
    assert!(!out.success(), "nobody could list the private tree: {out}");

    let out = probe_whole_node(&cluster, Some("strict"), 8, &nobody);
    check_step(&m, &out, "strict", 1);
    for t in out.tasks().expect("probe").values() {
        assert_eq!(t.user, "nobody", "{out}");
    }
}
