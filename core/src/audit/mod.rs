//! `gpu-affinity audit`: the reference checklist as findings on a node and its cluster
//! config. Pure: the front end reads the machine, the health config's `[storage]` table,
//! /proc/mounts, slurm.conf and the topology file; this decides.
//!
//! Each check ([`checks`]) says pass, a problem, advice (something advisable missing) or
//! "not checked", with evidence. The workload the admin names weights what a problem
//! costs ([`Workload::weight`]): the reference's table of dominant bottlenecks
//! (pre-training = compute + inter-node communication and checkpoint bandwidth;
//! fine-tuning = compute + memory, often one node; inference = memory bandwidth +
//! latency, fabric only when model-parallel). So a missing fabric NIC fails a
//! pre-training audit and is only noted for inference.

mod checks;
pub mod product;

use std::path::PathBuf;

use serde::Serialize;

use crate::config::MountConfig;
use crate::fabric::profiles::Profiles;
use crate::health::parse::MountEntry;
use crate::model::Machine;
use crate::slurm::slurm_conf::SlurmConf;
use crate::slurm::topology::Topology;

/// The workload class the admin names (`--workload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Pretrain,
    Finetune,
    Inference,
}

impl Workload {
    pub const NAMES: [&'static str; 3] = ["pretrain", "finetune", "inference"];

    pub fn parse(word: &str) -> Option<Workload> {
        match word {
            "pretrain" => Some(Workload::Pretrain),
            "finetune" => Some(Workload::Finetune),
            "inference" => Some(Workload::Inference),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Workload::Pretrain => "pretrain",
            Workload::Finetune => "finetune",
            Workload::Inference => "inference",
        }
    }

    /// The reference's dominant bottleneck for this class.
    pub fn bottleneck(self) -> &'static str {
        match self {
            Workload::Pretrain => "compute + inter-node communication and checkpoint bandwidth",
            Workload::Finetune => "compute + memory, often on one node",
            Workload::Inference => {
                "memory bandwidth + latency; the fabric only when the model is parallel across nodes"
            }
        }
    }

    /// What a problem in `area` costs this workload: the one weighting table.
    pub fn weight(self, area: Area) -> Status {
        use Status::{Fail, Info, Warn};
        match (area, self) {
            // GPU-CPU-memory locality is every class's memory bandwidth.
            (Area::Numa, _) => Fail,
            (Area::Fabric | Area::Placement, Workload::Pretrain) => Fail,
            (Area::Fabric | Area::Placement, Workload::Finetune) => Warn,
            (Area::Fabric | Area::Placement, Workload::Inference) => Info,
            // Checkpoints for pre-training; datasets and model loading for the others.
            (Area::Storage, Workload::Pretrain) => Fail,
            (Area::Storage, _) => Warn,
            (Area::Managed, Workload::Pretrain) => Warn,
            (Area::Managed, _) => Info,
        }
    }
}

/// What a check is about, for the weighting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Area {
    /// Fabric NICs and GPU-NIC locality: inter-node communication.
    Fabric,
    /// GPU-CPU-memory NUMA locality.
    Numa,
    /// Checkpoint and dataset mounts.
    Storage,
    /// Slurm's placement topology: jobs kept in one block or switch.
    Placement,
    /// Managed product or self-built: who keeps the cluster config.
    Managed,
}

/// The reference's three tiers, plus the cluster's own config: health's tiers.
pub use crate::health::Tier;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    /// A fact or a problem this workload does not depend on, and what was not checked.
    Info,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }

    /// Advice (something advisable missing, nothing broken) costs one step less.
    fn lowered(self) -> Status {
        match self {
            Status::Fail => Status::Warn,
            _ => Status::Info,
        }
    }
}

/// One line of the audit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub tier: Tier,
    pub area: Area,
    pub status: Status,
    pub summary: String,
    pub evidence: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub workload: Workload,
    pub bottleneck: &'static str,
    pub findings: Vec<Finding>,
}

impl Report {
    /// The worst status: `fail` makes the command exit 1.
    pub fn worst(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Pass)
    }

    /// Findings per status, `pass`, `info`, `warn`, `fail` in that order.
    pub fn counts(&self) -> [(Status, usize); 4] {
        [Status::Pass, Status::Info, Status::Warn, Status::Fail]
            .map(|s| (s, self.findings.iter().filter(|f| f.status == s).count()))
    }
}

/// What the front end gathered about storage.
pub struct Storage<'a> {
    /// The health config's `[[storage.mount]]` entries.
    pub configured: &'a [MountConfig],
    /// The node's mount table; `None` where there is none to read (a catalog machine,
    /// a topology file, a sysfs tree without `proc/mounts`).
    pub mounts: Option<&'a [MountEntry]>,
}

/// What the front end read of the cluster's Slurm config.
pub struct Slurm {
    /// slurm.conf's path as given or found.
    pub conf_path: PathBuf,
    /// Its real path (symlinks followed: HyperPod's `/opt/slurm`), when it exists.
    pub conf_real_path: Option<PathBuf>,
    /// `Ok(None)`: no slurm.conf there; `Err`: one line why it could not be read.
    pub conf: Result<Option<SlurmConf>, String>,
    /// The topology file found next to it (or named) and its topologies.
    pub topology: Result<Option<(PathBuf, Vec<Topology>)>, String>,
    /// This node's Slurm name; `None` when unknown.
    pub node: Option<String>,
    /// The plugin's `switch_level` (`[plugin]` of the admin config): the tree switch a
    /// node is placed in is the one a step may span, as the plugin checks it.
    pub switch_level: u32,
}

impl Slurm {
    /// slurm.conf's facts when it was there and could be read.
    pub fn parsed(&self) -> Option<&SlurmConf> {
        self.conf.as_ref().ok().and_then(Option::as_ref)
    }
}

/// Everything one audit looks at.
pub struct Inputs<'a> {
    pub workload: Workload,
    pub machine: &'a Machine,
    pub profiles: &'a Profiles,
    /// The admin config's `[fabric] force` keys, as the plugin applies them.
    pub forced: &'a [String],
    /// The vendor NCCL topology file at a path, parsed; `None` when absent or unreadable.
    pub vendor_topology: &'a dyn Fn(&str) -> Option<Machine>,
    pub storage: Storage<'a>,
    pub slurm: Slurm,
}

/// What a check concluded, before the workload weights it.
pub(crate) enum Outcome {
    Pass,
    /// Something is wrong.
    Problem,
    /// Something advisable is missing; nothing is broken.
    Advice,
    /// The input to check it is not there.
    NotChecked,
}

/// A check's result: the weighting turns it into a [`Finding`].
pub(crate) struct Checked {
    pub id: &'static str,
    pub tier: Tier,
    pub area: Area,
    pub outcome: Outcome,
    pub summary: String,
    pub evidence: Vec<String>,
}

/// Run every check and weight it for the workload.
pub fn audit(inputs: &Inputs<'_>) -> Report {
    let findings = checks::run(inputs)
        .into_iter()
        .map(|c| {
            let weight = inputs.workload.weight(c.area);
            let status = match c.outcome {
                Outcome::Pass => Status::Pass,
                Outcome::Problem => weight,
                Outcome::Advice => weight.lowered(),
                Outcome::NotChecked => Status::Info,
            };
            Finding {
                id: c.id,
                tier: c.tier,
                area: c.area,
                status,
                summary: c.summary,
                evidence: c.evidence,
            }
        })
        .collect();
    Report {
        workload: inputs.workload,
        bottleneck: inputs.workload.bottleneck(),
        findings,
    }
}

/// The report as text: the workload line, then one line per finding with its evidence
/// indented below, then the counts.
pub fn render(report: &Report) -> String {
    let mut out = format!(
        "workload {}: {}\n",
        report.workload.as_str(),
        report.bottleneck
    );
    let width = report
        .findings
        .iter()
        .map(|f| f.id.len())
        .max()
        .unwrap_or(0);
    for f in &report.findings {
        out.push_str(&format!(
            "{:<4}  {:<width$}  {}\n",
            f.status.as_str().to_uppercase(),
            f.id,
            f.summary
        ));
        for e in &f.evidence {
            out.push_str(&format!("      {e}\n"));
        }
    }
    let counts: Vec<String> = report
        .counts()
        .iter()
        .map(|(s, n)| format!("{n} {}", s.as_str()))
        .collect();
    out.push_str(&format!("summary: {}\n", counts.join(", ")));
    out
}

#[cfg(test)]
mod tests;
