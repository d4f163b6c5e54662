//! The vendor fabric environment (NCCL / libfabric / UCX) from `gpu_affinity::fabric`.
//!
//! Rendered once per step in user_init (detection + the built-in profile for this
//! instance), exported per rank in task_init: the node-wide values plus the rank's own.
//! Variables the user already set are left to the user (the profile's rules).

use std::path::Path;

use gpu_affinity::fabric::{self, Env, profiles::Profiles};
use gpu_affinity::model::Machine;
use gpu_affinity::solver::Plan;

/// The profile's environment for this step; `None` when no profile applies.
/// `existing` answers from the job environment.
pub fn step_env(
    machine: &Machine,
    plan: &Plan,
    existing: &dyn Fn(&str) -> Option<String>,
) -> Option<Env> {
    let detection = fabric::detect(machine);
    let profiles = Profiles::builtin();
    let profile = profiles.get(&detection.profile)?;
    log::debug!(
        "gpu-affinity: fabric profile {} (vendor {}, instance {})",
        profile.name,
        detection.vendor.as_str(),
        detection.instance.as_deref().unwrap_or("unknown")
    );
    let mut env = fabric::render_env(profile, machine, plan, existing, &[]);
    // The vendor's NCCL topology file is only exported where the image ships it.
    // TODO(nccl_xml): verify it against the node with fabric::topo::decide once the NCCL
    // XML source lands, and generate one when it does not fit.
    if let Some(v) = env.node.get("NCCL_TOPO_FILE")
        && v.to_export()
        && !Path::new(&v.value).is_file()
    {
        env.notes.push(format!(
            "NCCL_TOPO_FILE not set: {} is not on this node",
            v.value
        ));
        env.node.remove("NCCL_TOPO_FILE");
    }
    for note in &env.notes {
        log::debug!("gpu-affinity: fabric: {note}");
    }
    Some(env)
}

/// The variables to export for the plan's `index`-th rank.
pub fn rank_env(env: Option<&Env>, index: usize) -> Vec<(String, String)> {
    let Some(env) = env else {
        return Vec::new();
    };
    env.node
        .iter()
        .chain(env.ranks.get(index).into_iter().flatten())
        .filter(|(_, v)| v.to_export())
        .map(|(k, v)| (k.clone(), v.value.clone()))
        .collect()
}
