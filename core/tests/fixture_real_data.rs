//! Fixture trees of every catalog machine and every topology file under
//! ../shared/topologies: each reads back through sysfs as `realized()`, and hwloc reads
//! each GPU and NIC where the model puts it.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns

mod common;

use std::path::PathBuf;

use common::golden::{shared_topologies, topology_files};
use gpu_affinity::catalog;
use gpu_affinity::model::Machine;
use gpu_affinity::sources::fixture::{realized, write_fixture};
use gpu_affinity::sources::sysfs::read_machine;
use gpu_affinity::sources::{MachineXmlError, parse_machine_xml};

fn assert_round_trip(what: &str, m: &Machine) {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(m, dir.path()).unwrap_or_else(|e| panic!("{what}: write fixture: {e}"));
    let read = read_machine(dir.path()).unwrap_or_else(|e| panic!("{what}: read back: {e}"));
    let want = realized(m);
    assert_eq!(
        read, want,
        "{what}: fixture does not read back as realized()"
    );
    // Nothing a source knew about GPUs and NICs is lost on the way.
    assert_eq!(
        read.gpus.len(),
        m.gpus
            .iter()
            .map(|g| g.pci)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        "{what}"
    );
    assert_eq!(
        read.nics
            .iter()
            .map(|n| n.pci)
            .collect::<std::collections::BTreeSet<_>>(),
        m.nics.iter().map(|n| n.pci).collect(),
        "{what}"
    );
    assert_eq!(
        realized(&read),
        read,
        "{what}: realized() is not a fixed point"
    );
}

#[test]
fn every_catalog_machine_round_trips_and_matches_hwloc() {
    let names = catalog::names();
    assert!(names.len() >= 7, "catalog lists only {names:?}");
    for name in names {
        let m = catalog::machine(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_round_trip(name, &m);
        let checked = common::hwloc::cross_check(&m);
        assert_eq!(
            checked,
            realized(&m).gpus.len() + realized(&m).nics.len(),
            "{name}"
        );
    }
}

#[test]
fn every_shared_topology_file_round_trips_and_matches_hwloc() {
    let files: Vec<PathBuf> = topology_files().into_iter().map(|(_, p)| p).collect();
    assert!(
        files.len() >= 10,
        "only {} XML files under {}",
        files.len(),
        shared_topologies().display()
    );
    let mut graphs = 0;
    for file in &files {
        let what = file.display().to_string();
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{what}: {e}"));
        match parse_machine_xml(&text) {
            Ok(m) => {
                assert_round_trip(&what, &m);
                common::hwloc::cross_check(&m);
            }
            // The NCCL graph file (channel orders) is the one XML here that is no topology.
            Err(MachineXmlError::NcclGraph { .. }) => graphs += 1,
            Err(e) => panic!("{what}: {e}"),
        }
    }
    assert_eq!(graphs, 1, "expected exactly the one NCCL graph file");
}
