//! HOOK(fabric): the vendor fabric environment (NCCL / libfabric / UCX profiles) for one
//! rank. `gpu_affinity::fabric` (issue 4) renders it from the machine and the plan; until
//! it lands this returns nothing, and task_init exports whatever it returns after the
//! plugin's own variables.

use gpu_affinity::model::Machine;
use gpu_affinity::solver::{Plan, RankPlan};

pub fn rank_env(_machine: &Machine, _plan: &Plan, _rank: &RankPlan) -> Vec<(String, String)> {
    Vec::new()
}
