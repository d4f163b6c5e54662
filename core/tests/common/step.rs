//! The fabric environment of a step as a fresh task sees it: nothing set by the user,
//! nothing forced, no vendor NCCL topology file on the node (so profiles that want one
//! generate it at `generated_topology_path`).

use gpu_affinity::fabric::profiles::Profiles;
use gpu_affinity::fabric::{FabricDecision, StepInputs, step_fabric};
use gpu_affinity::model::Machine;
use gpu_affinity::solver::Plan;

pub fn fabric_of_clean_step(
    machine: &Machine,
    plan: &Plan,
    profiles: &Profiles,
    generated_topology_path: &str,
) -> FabricDecision {
    let existing = |_: &str| None;
    let vendor_topology = |_: &str| None;
    let inputs = StepInputs {
        profiles,
        existing: &existing,
        forced: &[],
        vendor_topology: &vendor_topology,
        generated_topology_path,
    };
    step_fabric(machine, plan, &inputs)
}
