//! What the crates' integration tests share (core/tests, slurm-conf/tests, prolog/tests),
//! so each helper is written once: PCI addresses from text, machines from the catalog
//! (the one source of truth for a real instance's shape), the shared topology files, a
//! command with the caller's fabric environment cleared, and an IMEX domain's JSON.
//!
//! A dev-dependency of integration tests. Core's own unit tests compile this same file as
//! `crate::test_support` (`#[path]` in core/src/lib.rs): as a dependency it would link a
//! second copy of core, whose types are not the unit tests' own. So it names core only as
//! `gpu_affinity`, which the unit tests alias to their own crate.
//! Helpers panic on bad input: the input is the test's own text.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_affinity::catalog;
use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;

/// A PCI address written in a test ("0000:10:1c.0").
pub fn addr(text: &str) -> PciAddr {
    text.parse()
        .unwrap_or_else(|e| panic!("test address {text:?}: {e}"))
}

/// A catalog machine by name, expanded as every program expands it.
pub fn catalog_machine(name: &str) -> Machine {
    catalog::machine(name).unwrap_or_else(|e| panic!("catalog machine {name}: {e}"))
}

/// AWS p4d.24xlarge from core/catalog/p4d.24xlarge.toml: GPUs, EFA and ENA directly on
/// four root buses, no bridges at all.
pub fn p4d() -> Machine {
    catalog_machine("p4d.24xlarge")
}

/// The shared topology files: `$GPU_AFFINITY_SHARED/topologies` (or the variable itself
/// when it names the topologies directory), else the workspace's sibling
/// `shared/topologies`.
pub fn shared_topologies() -> PathBuf {
    match std::env::var_os("GPU_AFFINITY_SHARED").map(PathBuf::from) {
        Some(shared) if shared.join("topologies").is_dir() => shared.join("topologies"),
        Some(dir) => dir,
        // Every crate that builds this file sits one level below the workspace root.
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/topologies"),
    }
}

/// The fabric variables of whoever runs the tests (NCCL_*, UCX_*, FI_*) removed from
/// `cmd`: they would otherwise count as the user's own and change the output.
pub fn without_fabric_env(cmd: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if ["NCCL_", "UCX_", "FI_"].iter().any(|p| key.starts_with(p)) {
            cmd.env_remove(key.as_ref());
        }
    }
    cmd
}

/// `nvidia-imex-ctl -N -j -H` on a two-member IMEX domain whose top-level status is
/// `status`, member 1's daemon `peer` as this node sees it: the shape NVIDIA's ISV test
/// suite records from live domains (members keyed "0", "1"; one whose daemon is down is
/// UNAVAILABLE, its connection INVALID).
pub fn imex_domain_json(status: &str, peer: &str) -> String {
    let conn = if peer == "READY" {
        "CONNECTED"
    } else {
        "INVALID"
    };
    let member = |n: u32, state: &str| {
        format!(
            r#""{i}": {{"status": "{state}", "host": "10.0.0.{n}", "hostName": "gb200-r1-t{n}",
      "connections": {{"0": {{"host": "10.0.0.1", "status": "CONNECTED", "changed": true}},
                       "1": {{"host": "10.0.0.2", "status": "{conn}", "changed": true}}}},
      "changed": true, "version": "580.95.05"}}"#,
            i = n - 1
        )
    };
    format!(
        "{{\n  \"nodes\": {{\n    {},\n    {}\n  }},\n  \"timestamp\": \"9/4/2026 00:37:39.905\",\n  \"status\": \"{status}\"\n}}\n",
        member(1, "READY"),
        member(2, peer)
    )
}
