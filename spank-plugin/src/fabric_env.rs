//! The vendor fabric environment (NCCL / libfabric / UCX) of a step, through the core's
//! one facade [`fabric::step_fabric`], the same call `gpu-affinity explain` makes, so the
//! plugin and explain cannot drift apart.
//!
//! The profiles and the vendor NCCL topology file are read as root in init_post_opt
//! (`node.rs`); the environment is computed once per step in user_init; task_init exports
//! the node-wide values plus the rank's own. A variable the user already set is left to the user unless the admin
//! config lists it under `[fabric] force`.
//!
//! Root-side inputs only: the profiles are the built-in ones plus the admin's
//! `profiles_dir` (root-owned, not writable by others), the vendor NCCL topology file's
//! path comes from a profile, and the generated topology goes to the root-owned
//! `run_dir`.

use std::path::Path;

use gpu_affinity::fabric::profiles::{self, Profiles};
use gpu_affinity::fabric::{self, Detection, Env, StepInputs};
use gpu_affinity::model::Machine;
use gpu_affinity::solver::Plan;

use crate::run_dir::TOPOLOGY_FILE;
use crate::settings::Settings;
use crate::step_data::{GeneratedTopology, StepFabric, VendorTopology};

/// What the fabric environment is rendered from, besides the machine and the plan
/// (read as root in init_post_opt, see [`crate::node`]).
pub struct FabricSetup<'a> {
    /// The profile the node's detection picked, alone (`node_view.rs`).
    pub profiles: &'a Profiles,
    /// The node's detection over the machine and every profile, made in init_post_opt.
    pub detection: &'a Detection,
    pub settings: &'a Settings,
    /// Warnings from loading the profiles, shown like the fabric's own.
    pub warnings: Vec<String>,
    /// The profile's vendor NCCL topology file, parsed.
    pub vendor_topology: Option<&'a VendorTopology>,
}

/// The built-in profiles plus the admin's from `dir` (the core's one trusted loader,
/// shared with `gpu-affinity explain`). A missing directory means no admin profiles.
/// Err: one line (file and line for a malformed profile), without the `gpu-affinity: `
/// prefix so it can serve as a refusal reason.
pub fn load_profiles(dir: &Path, owner: u32) -> Result<Profiles, String> {
    profiles::load_trusted(dir, owner).map_err(|e| e.to_string())
}

/// Render the profile of `setup.detection` (init_post_opt's, on the same machine and
/// profiles) for `plan` and settle NCCL_TOPO_FILE. `setup.vendor_topology` is the profile's vendor topology file as init_post_opt read it;
/// `topology_dir` is where a generated topology file would go; `existing` answers from
/// the job environment.
pub fn step_env(
    machine: &Machine,
    plan: &Plan,
    setup: &FabricSetup<'_>,
    topology_dir: &Path,
    existing: &dyn Fn(&str) -> Option<String>,
) -> StepFabric {
    let file = topology_dir.join(TOPOLOGY_FILE);
    let file_text = file.to_string_lossy().into_owned();
    // The detection is init_post_opt's, so the profile names the file read there; nothing
    // is read from disk now (user_init runs as the job user).
    let vendor_topology = |path: &str| {
        setup
            .vendor_topology
            .filter(|v| v.path == path)
            .and_then(|v| v.parsed.clone())
    };
    let inputs = StepInputs {
        profiles: setup.profiles,
        existing,
        forced: &setup.settings.force,
        vendor_topology: &vendor_topology,
        generated_topology_path: &file_text,
    };
    let fabric = fabric::step_fabric_for(machine, plan, &inputs, setup.detection.clone());
    log::debug!(
        "gpu-affinity: fabric profile {} (vendor {}, instance {})",
        fabric.detection.profile,
        fabric.detection.vendor.as_str(),
        fabric.detection.instance.as_deref().unwrap_or("unknown")
    );
    let mut warnings = Vec::new();
    for note in &fabric.env.notes {
        match note.strip_prefix("warning: ") {
            // A vendor topology file that does not fit the node (swapped NUMA masks).
            Some(w) => warnings.push(format!("gpu-affinity: warning: {w}")),
            None => log::debug!("gpu-affinity: fabric: {note}"),
        }
    }
    StepFabric {
        topology: fabric.generated_topology.map(|xml| GeneratedTopology {
            dir: topology_dir.to_path_buf(),
            file,
            xml,
            owner: setup.settings.owner,
        }),
        env: fabric.env,
        warnings,
    }
}

/// Parse the vendor NCCL topology file a profile names (bounded read). With a
/// `sysfs_root` other than `/` (tests, replayed dumps) the file is looked up under that
/// root too, so a fixture tree carries its own node's files. `None`: absent or unusable,
/// untrusted included (not `owner`'s alone: it would steer every job's NCCL_TOPO_FILE).
/// Read as root in init_post_opt (`node.rs`).
pub fn vendor_topology(sysfs_root: &Path, path: &str, owner: u32) -> Option<Machine> {
    match gpu_affinity::sources::read_vendor_nccl_topo(sysfs_root, path, owner) {
        Ok(m) => m,
        Err(e) => {
            log::warn!("gpu-affinity: vendor NCCL topology file not used: {e}");
            None
        }
    }
}

/// The variables to export for the plan's `index`-th rank: every node-wide value and the
/// rank's own, except what the user set.
pub fn rank_env(env: &Env, index: usize) -> Vec<(String, String)> {
    env.node
        .iter()
        .chain(env.ranks.get(index).into_iter().flatten())
        .filter(|(_, v)| v.to_export())
        .map(|(k, v)| (k.clone(), v.value.clone()))
        .collect()
}
