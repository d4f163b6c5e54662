//! What the front ends call around the solver, so the plugin and `explain` cannot drift
//! apart: [`fabric_nics`] before solving (the NICs ranks may be given), [`step_fabric`]
//! after (detection, profile, environment and the NCCL topology file decision). The `_for`
//! forms take a detection made once by the caller (the plugin: once per step).

use serde::Serialize;

use super::profiles::Profiles;
use super::topo::{self, TopoDecision};
use super::{Detection, Env, detect_with, render_env, topo_xml};
use crate::model::{Machine, Nic};
use crate::solver::Plan;

/// What the front end provides besides the machine and the plan.
pub struct StepInputs<'a> {
    /// Built-in profiles plus the admin's (front ends load /etc/gpu-affinity/profiles.d).
    pub profiles: &'a Profiles,
    /// The task's environment as it stands: a variable already set there is the user's.
    pub existing: &'a dyn Fn(&str) -> Option<String>,
    /// Keys the admin config marks `force`.
    pub forced: &'a [String],
    /// Parse the vendor NCCL topology file at a path; `None` when absent or unreadable.
    pub vendor_topology: &'a dyn Fn(&str) -> Option<Machine>,
    /// Where the front end will write a generated topology file if one is needed.
    pub generated_topology_path: &'a str,
}

/// What the fabric facade decided for one step: the detection, what to export and the
/// NCCL topology file. (The plugin keeps its own `fabric_env::StepFabric` from it.)
#[derive(Clone, Debug, Serialize)]
pub struct FabricDecision {
    pub detection: Detection,
    pub env: Env,
    /// The topology decision, when the profile names a vendor topology file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopoDecision>,
    /// NCCL topology XML to write at `generated_topology_path` (when the env points there).
    #[serde(skip)]
    pub generated_topology: Option<String>,
}

/// The node's fabric NICs for a step: the machine's own rule narrowed by the `[fabric]`
/// table of the profile detection picks from `profiles` (see [`super::profiles::Profile::fabric_nics`]).
///
/// Front ends pass this to [`crate::solver::solve_with_fabric`], so the NICs ranks are
/// bound to and the node-wide lists [`step_fabric`] exports (NCCL_IB_HCA) are one set: a
/// host NIC the profile leaves out is neither in NCCL_IB_HCA nor any rank's NIC.
pub fn fabric_nics<'m>(machine: &'m Machine, profiles: &Profiles) -> Vec<&'m Nic> {
    fabric_nics_for(machine, profiles, &detect_with(machine, profiles))
}

/// [`fabric_nics`] for a detection the front end already made (`detect_with` on the
/// same machine and profiles): the plugin detects once per step, as root, and passes it
/// down to every call that needs it.
pub fn fabric_nics_for<'m>(
    machine: &'m Machine,
    profiles: &Profiles,
    detection: &Detection,
) -> Vec<&'m Nic> {
    match profiles.get(&detection.profile) {
        Some(profile) => profile.fabric_nics(machine),
        // detect_with only names profiles from the set it was given.
        None => machine.fabric_nics(),
    }
}

/// Detect the vendor, render the profile's environment for `plan`, and settle
/// NCCL_TOPO_FILE.
pub fn step_fabric(machine: &Machine, plan: &Plan, inputs: &StepInputs<'_>) -> FabricDecision {
    step_fabric_for(machine, plan, inputs, detect_with(machine, inputs.profiles))
}

/// [`step_fabric`] for a detection already made on the same machine and profiles.
pub fn step_fabric_for(
    machine: &Machine,
    plan: &Plan,
    inputs: &StepInputs<'_>,
    detection: Detection,
) -> FabricDecision {
    let Some(profile) = inputs.profiles.get(&detection.profile) else {
        // detect_with only names profiles from the set it was given.
        return FabricDecision {
            detection,
            env: Env::default(),
            topology: None,
            generated_topology: None,
        };
    };
    let mut env = render_env(profile, machine, plan, inputs.existing, inputs.forced);
    let topology = profile.topology_file().map(|path| {
        let vendor = (inputs.vendor_topology)(path);
        topo::decide(path, vendor.as_ref(), machine)
    });
    if let Some(decision) = &topology {
        env.apply_topology(
            decision,
            inputs.generated_topology_path,
            inputs.existing,
            inputs.forced,
        );
    }
    let generated_topology = env
        .node
        .get("NCCL_TOPO_FILE")
        .filter(|v| v.to_export() && v.value == inputs.generated_topology_path)
        .map(|_| topo_xml::render(machine, &profile.fabric_nics(machine)));
    FabricDecision {
        detection,
        env,
        topology,
        generated_topology,
    }
}
