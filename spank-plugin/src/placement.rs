//! The node-side placement backstop (issue 10 item 5), in remote init_post_opt as root:
//! a multi-node GPU step whose nodes leave one placement unit of the cluster's topology
//! (a block; a leaf switch in tree form, see [`gpu_affinity::slurm::step_span`]) is
//! refused under strict before any task runs; prefer warns once and runs.
//!
//! Inputs:
//! - the topology: plugstack `topology=PATH` (a missing named file is an error), else
//!   topology.yaml, else topology.conf next to slurmd's own slurm.conf (root's
//!   `SLURM_CONF`, never the job's), read as root and trust-checked like gres.conf. No
//!   file: nothing to check.
//! - which of topology.yaml's topologies: the one the step's partition
//!   (`SLURM_JOB_PARTITION`) names with `Topology=` in that slurm.conf, else the
//!   `cluster_default`, else the first.
//! - the step's nodes: spank.h has no item for them (only S_JOB_NNODES / S_JOB_NODEID), so
//!   `SLURM_STEP_NODELIST` (else `SLURM_JOB_NODELIST`) of the job environment, which
//!   slurmstepd fills in from the step's layout. The user can set these, and that is safe:
//!   the list only decides whether *their own* step runs or warns, so a forged list can
//!   at most skip the backstop for their own step (slurmctld's placement stays the
//!   authority) or refuse it; it never reaches another job, a file or a root-side path.
//!
//! Every node of the step sees the same list and topology, so every node decides alike;
//! under prefer only node 0 (S_JOB_NODEID) shows the warning, so the user reads it once.

use std::path::PathBuf;

use gpu_affinity::slurm::read;
use gpu_affinity::slurm::step_span;
use gpu_affinity::slurm::topology::Topology;

use crate::host::{Host, Os};
use crate::mode::Choice;
use crate::settings::Settings;
use crate::step_data::{Prepared, StepOutcome};

/// Check a prepared GPU step's placement and fold the result into it: strict and not
/// fitting becomes [`StepOutcome::Misplaced`], prefer gets a warning. Steps already
/// settled otherwise (off, left alone, invalid, refused) are returned as they were.
pub fn backstop(prepared: Prepared, settings: &Settings, host: &dyn Host, os: &dyn Os) -> Prepared {
    let strict = match &prepared {
        Prepared::Ready { resolved, .. } => resolved.choice == Choice::Strict,
        // prefer with an unplannable node: the step still runs, so it still warns.
        Prepared::Decided(StepOutcome::Unplanned { .. }) => false,
        Prepared::Decided(_) => return prepared,
    };
    let Some(problem) = problem(settings, host, os) else {
        return prepared;
    };
    if strict {
        let line = format!("gpu-affinity: {problem}");
        log::error!("{line}");
        return Prepared::Decided(StepOutcome::Misplaced(line));
    }
    let warning = format!("gpu-affinity: warning: {problem}; the step runs as placed");
    log::warn!("{warning}");
    // Once per step: the first node's first task says it.
    let first_node = host.node_id().ok() == Some(0);
    if !first_node {
        return prepared;
    }
    match prepared {
        Prepared::Ready {
            resolved,
            step_id,
            mut node,
        } => {
            node.warnings.push(warning);
            Prepared::Ready {
                resolved,
                step_id,
                node,
            }
        }
        // One line (task stderr escapes newlines): the step's own warning, then this.
        Prepared::Decided(StepOutcome::Unplanned { warning: w }) => {
            Prepared::Decided(StepOutcome::Unplanned {
                warning: format!("{w} (and: {problem})"),
            })
        }
        other => other,
    }
}

/// Why the step's placement is not one unit (without the `gpu-affinity: ` prefix), or
/// `None` when it fits or there is nothing to check.
fn problem(settings: &Settings, host: &dyn Host, os: &dyn Os) -> Option<String> {
    let list = ["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"]
        .into_iter()
        .find_map(|v| {
            host.getenv(v)
                .ok()
                .flatten()
                .filter(|l| !l.trim().is_empty())
        });
    let Some(list) = list else {
        log::debug!("gpu-affinity: no step node list; placement not checked");
        return None;
    };
    let nodes = match step_span::step_nodes(&list) {
        Ok(n) => n,
        Err(e) => return Some(format!("cannot check the step's placement: {e}")),
    };
    if nodes.len() < 2 {
        return None;
    }
    let (path, topologies) = match read(settings, os) {
        Ok(Some(t)) => t,
        Ok(None) => {
            log::debug!("gpu-affinity: no topology.yaml or topology.conf; placement not checked");
            return None;
        }
        Err(e) => return Some(format!("cannot check the step's placement: {e}")),
    };
    let named = match partition_topology(settings, host, os, &topologies) {
        Ok(n) => n,
        Err(e) => return Some(format!("cannot check the step's placement: {e}")),
    };
    let topology = step_span::partition_topology(&topologies, named.as_deref())?;
    let span = step_span::span(topology, &nodes);
    log::debug!(
        "gpu-affinity: step placement by {} ({}): {span:?}",
        path.display(),
        topology.name
    );
    step_span::reason(&span)
}

/// The topology the step's partition names (slurm.conf `PartitionName=... Topology=`,
/// Slurm 25.05+), read only when the file holds more than one. The partition comes from
/// `SLURM_JOB_PARTITION` of the job env: a forged one picks another of root's topologies
/// for the user's own step, as safe as a forged node list.
fn partition_topology(
    settings: &Settings,
    host: &dyn Host,
    os: &dyn Os,
    topologies: &[Topology],
) -> Result<Option<String>, String> {
    if topologies.len() < 2 {
        return Ok(None);
    }
    let Some(partition) = host.getenv("SLURM_JOB_PARTITION").ok().flatten() else {
        return Ok(None);
    };
    let path = os
        .slurmd_conf()
        .unwrap_or_else(|| PathBuf::from(read::DEFAULT_SLURM_CONF));
    let Some(conf) = os.read_slurm_conf(&path, settings.owner)? else {
        return Ok(None);
    };
    Ok(conf
        .partition(partition.trim())
        .and_then(|p| p.topology.clone()))
}

/// The topology file and its topologies: the named one, else the first that exists next
/// to slurm.conf.
fn read(settings: &Settings, os: &dyn Os) -> Result<Option<(PathBuf, Vec<Topology>)>, String> {
    let slurm_conf = os.slurmd_conf();
    read::locate_topology(
        settings.topology.as_deref(),
        slurm_conf.as_deref(),
        &|path| os.read_topology(path, settings.owner),
    )
}
