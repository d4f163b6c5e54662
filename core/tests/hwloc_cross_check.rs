//! GPU and NIC locality of fixture trees, as hwloc reads them, against the model.

mod common;

use common::hwloc::cross_check;

#[test]
fn switch_tree_matches_hwloc() {
    assert_eq!(cross_check(&common::switch_tree()), 5);
}

#[test]
fn p4d_matches_hwloc() {
    // 8 GPUs, 4 EFA, 3 ENA (the catalog's p4d).
    assert_eq!(cross_check(&gpu_affinity_test_support::p4d()), 15);
}

#[test]
fn vm_matches_hwloc() {
    assert_eq!(cross_check(&common::gcp_vm()), 3);
}

#[test]
fn placeholder_switches_match_hwloc() {
    assert_eq!(cross_check(&common::nccl_placeholder()), 7);
}
