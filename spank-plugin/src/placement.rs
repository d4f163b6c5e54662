//! The placement check (issue 10 item 5): a multi-node GPU step whose nodes leave one
//! placement unit of the cluster's topology (a block; in tree form a leaf switch, or one
//! switch up to the plugstack/config `switch_level`, see
//! [`gpu_affinity::slurm::step_span`]) is refused under strict before any task runs;
//! prefer warns once and runs. Two sides, one decision and message: [`submit`] in srun
//! (local_user_init, as the user, before launch, where srun can tell the step's nodes
//! and GPUs) and [`backstop`] on every node (remote init_post_opt, as root).
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
use gpu_affinity::slurm::topology::Topology;
use gpu_affinity::slurm::{srun_args, step_span};

use crate::guard::Failure;
use crate::host::{Host, Os};
use crate::settings::Settings;
use crate::step_data::{Prepared, StepOutcome};

/// Check a prepared GPU step's placement and fold the result into it: strict and not
/// fitting becomes [`StepOutcome::Misplaced`], prefer gets a warning. Steps already
/// settled otherwise (off, left alone, invalid, refused) are returned as they were.
pub fn backstop(prepared: Prepared, settings: &Settings, host: &dyn Host, os: &dyn Os) -> Prepared {
    let strict = match &prepared {
        Prepared::Ready { resolved, .. } => resolved.strict(),
        // prefer with an unplannable node: the step still runs, so it still warns.
        Prepared::Decided(StepOutcome::Unplanned { .. }) => false,
        Prepared::Decided(_) => return prepared,
    };
    // As root on the node the files are readable: one it cannot read or trust is the
    // admin's to fix, and strict refuses rather than run unchecked.
    let problem = match problem(settings, &Side::node(host, os), os) {
        Placement::Fits => return prepared,
        Placement::Spans(reason) => reason,
        Placement::CannotCheck(e) => format!("cannot check the step's placement: {e}"),
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

/// The submit side, in srun once the allocation is known (local_user_init): the same
/// decision and message as the node backstop, before anything is launched. srun runs as
/// the user, so this only reads: the topology next to the SLURM_CONF srun uses (or
/// plugstack `topology=`), trust-checked as on the node, and srun's own environment.
/// Only a step whose node list srun's environment names in full is checked here (its
/// length is S_JOB_NNODES: inside a larger allocation the env lists the job's nodes,
/// not the step's, and the node side decides), and only one whose GPU request srun can
/// see ([`srun_args::asks_for_gpus`]); CPU-only steps are left alone, as on the node.
pub fn submit(
    settings: &Settings,
    strict: bool,
    host: &dyn Host,
    os: &dyn Os,
) -> Result<(), Failure> {
    let env = |v: &str| host.process_env(v);
    // Measured (22.05): srun's own allocation sets SLURM_NODELIST only; inside salloc
    // SLURM_JOB_NODELIST is the allocation's. SLURM_STEP_NODELIST is not set in srun.
    let nodes = first_list(&env).or_else(|| env("SLURM_NODELIST"));
    let count = host.step_node_count().ok();
    log::debug!(
        "gpu-affinity: srun: step nodes {count:?}, node list {:?}",
        nodes.as_deref().map(|l| l.escape_default().to_string())
    );
    if !srun_args::asks_for_gpus(&os.own_args(), &env) {
        return Ok(());
    }
    let listed = nodes
        .as_deref()
        .and_then(|l| step_span::step_nodes(l).ok())
        .map(|n| n.len() as u32);
    if count.is_none() || listed != count {
        log::debug!(
            "gpu-affinity: srun: the step's own node list is not known here; the nodes check it"
        );
        return Ok(());
    }
    let side = Side {
        nodes,
        // SLURM_JOB_PARTITION where srun's environment has it (an allocation's), else
        // srun's own -p, else its input variable SLURM_PARTITION; else not known.
        partition: env("SLURM_JOB_PARTITION")
            .or_else(|| srun_args::partition(&os.own_args()))
            .or_else(|| env("SLURM_PARTITION")),
        partition_known: false,
        slurm_conf: env("SLURM_CONF").map(PathBuf::from),
    };
    let problem = match problem(settings, &side, os) {
        Placement::Fits => return Ok(()),
        Placement::Spans(reason) => reason,
        // srun runs as the user, with the user's SLURM_CONF: what it cannot read or
        // trust root on the nodes may read fine, so the node backstop decides.
        Placement::CannotCheck(e) => {
            log::debug!("gpu-affinity: srun: placement not checked here ({e}); the nodes check it");
            return Ok(());
        }
    };
    if strict {
        return Err(Failure(format!("gpu-affinity: {problem}")));
    }
    // prefer: the node side warns on srun's stderr from node 0 (it cannot know srun
    // warned already), so srun keeps quiet and the user reads the warning once.
    log::debug!("gpu-affinity: srun: {problem}; prefer, the nodes warn");
    Ok(())
}

/// What the check reads, from the side that runs it: slurmstepd (the job env and
/// slurmd's own slurm.conf) or srun (its own environment and the SLURM_CONF it uses).
struct Side {
    /// The step's node list (`SLURM_STEP_NODELIST`, else `SLURM_JOB_NODELIST`).
    nodes: Option<String>,
    /// `SLURM_JOB_PARTITION` (srun: else its own `-p`, else `SLURM_PARTITION`).
    partition: Option<String>,
    /// Whether a missing partition means the cluster default (the node side: slurmstepd
    /// always sets SLURM_JOB_PARTITION). srun may not know it (no `-p`: slurmctld picks
    /// the default partition), so with several topologies it leaves the choice to the
    /// nodes rather than check the wrong one.
    partition_known: bool,
    /// The slurm.conf the topology files sit next to.
    slurm_conf: Option<PathBuf>,
}

impl Side {
    /// The node side: the job environment (slurmstepd fills the step's node list in from
    /// its layout) and slurmd's own `SLURM_CONF`.
    fn node(host: &dyn Host, os: &dyn Os) -> Side {
        let get = |v: &str| host.getenv(v).ok().flatten();
        Side {
            nodes: first_list(&get),
            partition: get("SLURM_JOB_PARTITION"),
            partition_known: true,
            slurm_conf: os.slurmd_conf(),
        }
    }
}

fn first_list(get: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    ["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"]
        .into_iter()
        .find_map(|v| get(v).filter(|l| !l.trim().is_empty()))
}

/// What the check found about the step's placement.
enum Placement {
    /// One unit, one node, or nothing to check (no node list, no topology file).
    Fits,
    /// Why the step's nodes are not in one unit (without the `gpu-affinity: ` prefix).
    Spans(String),
    /// Why this side cannot tell (an unreadable or untrusted file, a bad node list).
    CannotCheck(String),
}

/// The step's placement as this side sees it.
fn problem(settings: &Settings, side: &Side, os: &dyn Os) -> Placement {
    let Some(list) = &side.nodes else {
        log::debug!("gpu-affinity: no step node list; placement not checked");
        return Placement::Fits;
    };
    let nodes = match step_span::step_nodes(list) {
        Ok(n) => n,
        Err(e) => return Placement::CannotCheck(e),
    };
    if nodes.len() < 2 {
        return Placement::Fits;
    }
    let (path, topologies) = match read(settings, side, os) {
        Ok(Some(t)) => t,
        Ok(None) => {
            log::debug!("gpu-affinity: no topology.yaml or topology.conf; placement not checked");
            return Placement::Fits;
        }
        Err(e) => return Placement::CannotCheck(e),
    };
    if topologies.len() > 1 && side.partition.is_none() && !side.partition_known {
        return Placement::CannotCheck(
            "the step's partition, which picks its topology, is not known".into(),
        );
    }
    let named = match partition_topology(settings, side, os, &topologies) {
        Ok(n) => n,
        Err(e) => return Placement::CannotCheck(e),
    };
    let Some(topology) = step_span::partition_topology(&topologies, named.as_deref()) else {
        return Placement::Fits;
    };
    let span = step_span::span_within(topology, &nodes, settings.switch_level);
    log::debug!(
        "gpu-affinity: step placement by {} ({}): {span:?}",
        path.display(),
        topology.name
    );
    step_span::reason(&span).map_or(Placement::Fits, Placement::Spans)
}

/// The topology the step's partition names (slurm.conf `PartitionName=... Topology=`,
/// Slurm 25.05+), read only when the file holds more than one. The partition comes from
/// `SLURM_JOB_PARTITION` of the job env: a forged one picks another of root's topologies
/// for the user's own step, as safe as a forged node list.
fn partition_topology(
    settings: &Settings,
    side: &Side,
    os: &dyn Os,
    topologies: &[Topology],
) -> Result<Option<String>, String> {
    if topologies.len() < 2 {
        return Ok(None);
    }
    let Some(partition) = &side.partition else {
        return Ok(None);
    };
    let path = side
        .slurm_conf
        .clone()
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
fn read(
    settings: &Settings,
    side: &Side,
    os: &dyn Os,
) -> Result<Option<(PathBuf, Vec<Topology>)>, String> {
    read::locate_topology(
        settings.topology.as_deref(),
        side.slurm_conf.as_deref(),
        &|path| os.read_slurm_topology(path, settings.owner),
    )
}
