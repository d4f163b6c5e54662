//! Turn a profile into the environment of one step on one node.

use std::collections::BTreeMap;

use serde::Serialize;

use super::profiles::{Combine, Profile};
use super::template::{self, Scope};
use super::topo::TopoDecision;
use crate::model::{Machine, Nic};
use crate::solver::{NicRef, Plan};

/// Where a value came from, for `explain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "origin", rename_all = "snake_case")]
pub enum Origin {
    /// From a profile variable.
    Profile {
        profile: String,
        source: String,
        verified: bool,
        /// The task had its own value and the admin config forces this key.
        forced: bool,
    },
    /// The task's environment already has this variable; it is left alone.
    UserSet,
    /// Computed by gpu-affinity itself (a generated NCCL topology file).
    Generated { reason: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EnvValue {
    pub value: String,
    #[serde(flatten)]
    pub origin: Origin,
}

impl EnvValue {
    /// True when the plugin must export this value (it is not the user's own).
    pub fn to_export(&self) -> bool {
        !matches!(self.origin, Origin::UserSet)
    }
}

/// The environment of a step on one node: node-wide values (identical on every rank)
/// and one map per local rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Env {
    pub node: BTreeMap<String, EnvValue>,
    pub ranks: Vec<BTreeMap<String, EnvValue>>,
    /// Variables left unset and why (an empty fact such as no RDMA NIC on the node).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Find the model's NIC for a plan's NIC reference (dual-port NICs share a PCI address,
/// so the name decides between them).
fn nic_for<'m>(machine: &'m Machine, r: &NicRef) -> Option<&'m Nic> {
    let same_pci = || machine.nics.iter().filter(|n| n.pci == r.pci);
    match &r.name {
        Some(name) => same_pci()
            .find(|n| n.rdma.as_deref() == Some(name) || n.netdev.as_deref() == Some(name))
            .or_else(|| same_pci().next()),
        None => same_pci().next(),
    }
}

fn push_unique(out: &mut Vec<String>, v: String) {
    if !out.contains(&v) {
        out.push(v);
    }
}

/// The list facts placeholders expand to, for one set of NICs.
#[derive(Default)]
struct NicFacts {
    rdma_names: Vec<String>,
    rdma_ports: Vec<String>,
    netdevs: Vec<String>,
}

impl NicFacts {
    fn of(nics: &[&Nic]) -> Self {
        let mut f = NicFacts::default();
        for nic in nics {
            if let Some(r) = &nic.rdma {
                push_unique(&mut f.rdma_names, r.clone());
                if nic.ports.is_empty() {
                    push_unique(&mut f.rdma_ports, format!("{r}:1"));
                }
                for p in &nic.ports {
                    push_unique(&mut f.rdma_ports, format!("{r}:{}", p.number));
                }
            }
            if let Some(d) = &nic.netdev {
                push_unique(&mut f.netdevs, d.clone());
            }
        }
        f
    }
}

/// Render a profile for a step.
///
/// `existing` answers what the task's environment already holds; such a variable is left
/// to the user (origin `user_set`) unless its key is in `forced` (the admin config's
/// `force` list). A `prepend` variable (a search path) keeps the user's entries after the
/// profile's.
pub fn render_env(
    profile: &Profile,
    machine: &Machine,
    plan: &Plan,
    existing: &dyn Fn(&str) -> Option<String>,
    forced: &[String],
) -> Env {
    let fabric: Vec<&Nic> = plan
        .fabric_nics
        .iter()
        .filter_map(|r| nic_for(machine, r))
        .filter(|n| profile.fabric.keeps(n))
        .collect();
    let node = NicFacts::of(&fabric);
    let host: Vec<String> = {
        let mut out = Vec::new();
        for n in &machine.nics {
            if !fabric.iter().any(|f| f.pci == n.pci && f.rdma == n.rdma)
                && let Some(d) = &n.netdev
            {
                push_unique(&mut out, d.clone());
            }
        }
        out
    };
    let node_lookup = |name: &str| -> Option<String> {
        match name {
            "fabric_rdma_names" => Some(node.rdma_names.join(",")),
            "fabric_rdma_ports" => Some(node.rdma_ports.join(",")),
            "fabric_netdevs" => Some(node.netdevs.join(",")),
            "host_netdevs" => Some(host.join(",")),
            "fabric_count" => Some(fabric.len().to_string()).filter(|_| !fabric.is_empty()),
            _ => None,
        }
    };

    let mut env = Env {
        ranks: vec![BTreeMap::new(); plan.ranks.len()],
        ..Env::default()
    };
    let decide = |key: &str, value: String, var: &super::profiles::Var| -> EnvValue {
        let from_profile = |value: String, forced: bool| EnvValue {
            value,
            origin: Origin::Profile {
                profile: profile.name.clone(),
                source: var.source.clone(),
                verified: var.verified,
                forced,
            },
        };
        // A search path keeps the user's entries, forced or not.
        if var.combine == Combine::Prepend
            && let Some(user) = existing(key).filter(|u| !u.is_empty())
        {
            return if user.split(':').any(|p| p == value) {
                EnvValue {
                    value: user,
                    origin: Origin::UserSet,
                }
            } else {
                from_profile(format!("{value}:{user}"), false)
            };
        }
        match user_value(key, existing, forced) {
            UserValue::Wins(user) => EnvValue {
                value: user,
                origin: Origin::UserSet,
            },
            UserValue::Forced => from_profile(value, true),
            UserValue::Unset => from_profile(value, false),
        }
    };

    for var in &profile.vars {
        let unset_note = |who: &str| {
            let names = template::names(&var.value).unwrap_or_default().join(", ");
            format!("{} not set{who}: {{{names}}} is empty", var.key)
        };
        match var.scope {
            Scope::Node => match template::expand(&var.value, &node_lookup) {
                Ok(Some(v)) => {
                    env.node.insert(var.key.clone(), decide(&var.key, v, var));
                }
                Ok(None) => env.notes.push(unset_note(" on this node")),
                Err(e) => env.notes.push(format!("{} not set: {e}", var.key)),
            },
            Scope::Rank => {
                for (i, rank) in plan.ranks.iter().enumerate() {
                    let nics: Vec<&Nic> = rank
                        .nics
                        .iter()
                        .filter_map(|r| nic_for(machine, r))
                        .filter(|n| profile.fabric.keeps(n))
                        .collect();
                    let mine = NicFacts::of(&nics);
                    let minors: Vec<String> = rank
                        .gpus
                        .iter()
                        .filter_map(|g| {
                            machine
                                .gpus
                                .iter()
                                .find(|x| x.pci == *g)
                                .and_then(|x| x.minor)
                        })
                        .map(|m| m.to_string())
                        .collect();
                    let minors = if minors.len() == rank.gpus.len() {
                        minors.join(",")
                    } else {
                        String::new()
                    };
                    let lookup = |name: &str| -> Option<String> {
                        match name {
                            "rank" => Some(rank.rank.to_string()),
                            "rank_rdma_names" => Some(mine.rdma_names.join(",")),
                            "rank_rdma_ports" => Some(mine.rdma_ports.join(",")),
                            "rank_netdevs" => Some(mine.netdevs.join(",")),
                            "rank_gpu_minors" => Some(minors.clone()),
                            other => node_lookup(other),
                        }
                    };
                    match template::expand(&var.value, &lookup) {
                        Ok(Some(v)) => {
                            env.ranks[i].insert(var.key.clone(), decide(&var.key, v, var));
                        }
                        Ok(None) => env
                            .notes
                            .push(unset_note(&format!(" for rank {}", rank.rank))),
                        Err(e) => env.notes.push(format!("{} not set: {e}", var.key)),
                    }
                }
            }
        }
    }
    env
}

/// What the task's own value of a variable does to the suite's.
enum UserValue {
    /// The task's environment does not have it: the suite's value applies.
    Unset,
    /// The user set it and the admin does not force it: the user's value stays.
    Wins(String),
    /// The user set it but the admin config forces the key: the suite's value applies.
    Forced,
}

/// "The user wins unless forced", the one rule for every variable the fabric sets.
fn user_value(
    key: &str,
    existing: &dyn Fn(&str) -> Option<String>,
    forced: &[String],
) -> UserValue {
    match existing(key) {
        None => UserValue::Unset,
        Some(_) if forced.iter().any(|k| k == key) => UserValue::Forced,
        Some(user) => UserValue::Wins(user),
    }
}

impl Env {
    /// Apply the NCCL topology file decision (see [`super::topo::decide`]):
    /// keep the vendor file, or point NCCL_TOPO_FILE at `generated_path` (which the front
    /// end writes from [`super::topo_xml::render`]). The user's own NCCL_TOPO_FILE still
    /// wins unless forced.
    pub fn apply_topology(
        &mut self,
        decision: &TopoDecision,
        generated_path: &str,
        existing: &dyn Fn(&str) -> Option<String>,
        forced: &[String],
    ) {
        const KEY: &str = "NCCL_TOPO_FILE";
        if let UserValue::Wins(user) = user_value(KEY, existing, forced) {
            self.node.insert(
                KEY.to_string(),
                EnvValue {
                    value: user,
                    origin: Origin::UserSet,
                },
            );
            return;
        }
        match decision {
            TopoDecision::Use { path } => {
                if let Some(v) = self.node.get_mut(KEY) {
                    v.value = path.clone();
                }
            }
            TopoDecision::Refuse { reason } | TopoDecision::Generate { reason } => {
                if matches!(decision, TopoDecision::Refuse { .. }) {
                    self.notes.push(format!("warning: {reason}"));
                }
                self.node.insert(
                    KEY.to_string(),
                    EnvValue {
                        value: generated_path.to_string(),
                        origin: Origin::Generated {
                            reason: reason.clone(),
                        },
                    },
                );
            }
        }
    }
}
