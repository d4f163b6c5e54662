//! The node's own inputs to a step's plan, read as root in remote `slurm_spank_init_post_opt`.
//!
//! slurmstepd runs `user_init` with the job user's privileges (spank(8): "called after
//! privileges are temporarily dropped"), but the topology under `sysfs_root`, the admin
//! profiles and the vendor NCCL topology file are root's inputs: an admin may keep them
//! where job users cannot look (a fixture tree under a 0700 directory, a profiles.d only
//! root can read). So everything that does not depend on the job is read here, as root,
//! once options are processed and the mode is known; `user_init` adds the job's own
//! inputs (GPU ids, task layout, the user's environment) and solves.
//!
//! The job environment is already complete in remote init_post_opt (measured on Slurm
//! 22.05: `SLURM_STEP_GPUS`, `CUDA_VISIBLE_DEVICES` and the user's own variables read the
//! same there as in user_init), so a step without GPUs is recognised here and reads
//! nothing, as before.

use gpu_affinity::fabric::Detection;
use gpu_affinity::fabric::NodeView;
use gpu_affinity::fabric::profiles::Profiles;
use gpu_affinity::fabric::topo::{self, TopoDecision};
use gpu_affinity::model::Machine;
use gpu_affinity::slurm::gpu_ids::SlurmGpus;
use gpu_affinity::slurm::read::{cgroup_conf_path, gres_conf_path};

use crate::copies::Copies;
use crate::fabric_env;
use crate::host::{Host, Os};
use crate::mode::{Choice, OptionValue, Resolved, resolve};
use crate::node_view::ViewError;
use crate::options::user_choice;
use crate::settings::Settings;
use crate::step;
use crate::step_data::{
    FIRST_SPECIAL_STEP, MAX_NODE_GPUS, NO_GPUS, NodeInputs, Prepared, StepOutcome, VendorTopology,
    unplannable,
};
use crate::timing;

/// Settle what can be settled before privileges are dropped, and read the node's inputs
/// for a GPU step under a mode other than `off`. `option` is what the option callback
/// saw.
pub fn prepare(settings: &Settings, option: OptionValue, host: &dyn Host, os: &dyn Os) -> Prepared {
    // The user's own mode choice is read from the job environment (the env twin).
    let user = match user_choice(option, |name| host.getenv(name).ok().flatten()) {
        Ok(u) => u,
        Err(bad) => return Prepared::Decided(StepOutcome::Invalid(bad.0)),
    };
    let resolved = resolve(user, settings.default, settings.enforce);
    if let Some(note) = resolved.raise_note() {
        log::debug!("{note}");
    }
    // Off costs nothing: no topology, no GPU lookup.
    if resolved.choice == Choice::Off {
        return Prepared::Decided(StepOutcome::Off);
    }
    let step_id = match host.step_id() {
        Ok(id) => id,
        Err(e) => {
            return Prepared::Decided(unplannable(
                resolved,
                format!("cannot identify the step: {e}"),
            ));
        }
    };
    if step_id >= FIRST_SPECIAL_STEP {
        return Prepared::Decided(StepOutcome::LeftAlone(
            "a batch, extern or interactive step",
        ));
    }
    // Only whether the step has GPUs matters here (the machine is not read yet); the
    // ids are parsed against the node's GPU count in user_init.
    match step::step_gpus(host, MAX_NODE_GPUS) {
        Ok(Some(g)) if !g.global.is_empty() => {}
        Ok(_) => return Prepared::Decided(StepOutcome::LeftAlone(NO_GPUS)),
        Err(reason) => return Prepared::Decided(unplannable(resolved, reason)),
    }
    timing::mark("step env");
    match read_node(settings, resolved, os) {
        Ok(node) => Prepared::Ready {
            resolved,
            step_id,
            node: Box::new(node),
        },
        Err(outcome) => Prepared::Decided(outcome),
    }
}

/// Read the topology, the profiles and the vendor topology file. Err: the step's outcome
/// (strict: refused with the reason, prefer: unplanned with a warning).
pub fn read_node(
    settings: &Settings,
    resolved: Resolved,
    os: &dyn Os,
) -> Result<NodeInputs, StepOutcome> {
    // The machine, the profiles and the detection through the node's one copy.
    let copies = Copies::new(&settings.run_dir, settings.owner);
    let view = os.step_view(
        &settings.sysfs_root,
        &settings.profiles_dir,
        settings.owner,
        &copies,
    );
    let (view, warnings) = match view {
        Ok(view) => (view, Vec::new()),
        Err(ViewError::Machine(e)) => {
            return Err(unplannable(
                resolved,
                format!("this node's topology is unknown ({e})"),
            ));
        }
        // An admin profile that cannot be used is the admin's to fix: strict refuses
        // the step with the reason, prefer carries on with the built-in profiles.
        Err(ViewError::Profiles { reason, machine }) => {
            log::error!("gpu-affinity: {reason}");
            if resolved.strict() {
                return Err(StepOutcome::Refused { reason });
            }
            let warning =
                format!("gpu-affinity: warning: {reason}; using the built-in fabric profiles");
            (
                NodeView::detect(*machine, &Profiles::builtin()),
                vec![warning],
            )
        }
    };
    // Once per step: the fabric NICs, the environment and the topology decision in
    // user_init all use this detection.
    let NodeView {
        mut machine,
        profiles,
        detection,
    } = view;
    timing::mark("node view");
    let slurm_gpus = slurm_gpus(&machine, settings, resolved, os)?;
    timing::mark("gres.conf");
    let cgroup_conf = cgroup_conf_path(os.slurmd_conf().as_deref());
    let constrain_devices = os
        .constrain_devices(&cgroup_conf, settings.owner)
        .map_err(|reason| unplannable(resolved, reason))?;
    timing::mark("cgroup.conf");
    let vendor_topology = topology_file(&detection, &profiles).map(|path| {
        let parsed = fabric_env::vendor_topology(&settings.sysfs_root, &path, settings.owner);
        if !matches!(
            topo::decide(&path, parsed.as_ref(), &machine),
            TopoDecision::Use { .. }
        ) {
            add_pci_links(&mut machine, os, settings);
        }
        VendorTopology { path, parsed }
    });
    timing::mark("vendor topology");
    Ok(NodeInputs {
        machine,
        profiles,
        warnings,
        detection,
        vendor_topology,
        slurm_gpus,
        constrain_devices,
    })
}

/// How Slurm numbers this node's GPUs: the gres.conf slurmd reads (`gres_conf`, in
/// plugstack.conf or the config, else next to slurmd's own slurm.conf, which on a configless node is
/// the conf-cache), read as root. A gres.conf that cannot be used refuses the step under
/// strict and leaves it unbound under prefer: with the numbering unknown a rank could be
/// planned on a GPU that is not its own. Without a gres.conf at the discovered path the
/// ids are taken in minor order (what `File=/dev/nvidia[0-N]` gives).
fn slurm_gpus(
    machine: &Machine,
    settings: &Settings,
    resolved: Resolved,
    os: &dyn Os,
) -> Result<SlurmGpus, StepOutcome> {
    let path = settings
        .gres_conf
        .clone()
        .unwrap_or_else(|| gres_conf_path(os.slurmd_conf().as_deref()));
    let refuse = |reason: String| {
        log::error!("gpu-affinity: {reason}");
        unplannable(resolved, reason)
    };
    let node_gpus = match os.read_gres_conf(&path, settings.owner) {
        Ok(Some(conf)) => {
            let node = os
                .node_name()
                .ok_or_else(|| refuse("cannot tell this node's name for gres.conf".into()))?;
            Some(conf.node_gpus(&node))
        }
        Ok(None) if settings.gres_conf.is_some() => {
            return Err(refuse(format!(
                "gres.conf {} (named by gres_conf) does not exist",
                path.display()
            )));
        }
        Ok(None) => {
            log::debug!(
                "gpu-affinity: no gres.conf at {}; Slurm's GPU ids taken in minor order",
                path.display()
            );
            None
        }
        Err(reason) => return Err(refuse(reason)),
    };
    Ok(SlurmGpus::number(machine, node_gpus.as_ref(), &|f| {
        os.device_minor(f)
    }))
}

/// The vendor topology file of the profile the node's detection picks, if it names one.
fn topology_file(detection: &Detection, profiles: &Profiles) -> Option<String> {
    profiles
        .get(&detection.profile)
        .and_then(|p| p.topology_file())
        .map(str::to_string)
}

/// The topology was read with `Detail::Placement`, without PCIe links; a generated NCCL
/// topology file carries them (NCCL rates its paths by them). The vendor file is absent or
/// does not fit this node (rare), so the step will generate one unless the user brings
/// their own: read the links now, while root. If they cannot be read the file goes without
/// them, and NCCL reads them from sysfs for the devices it finds; placement does not
/// depend on them.
fn add_pci_links(machine: &mut Machine, os: &dyn Os, settings: &Settings) {
    if let Err(e) = os.read_pci_links(&settings.sysfs_root, machine) {
        log::warn!(
            "gpu-affinity: PCIe link attributes not read ({e}); the generated NCCL topology leaves them to NCCL"
        );
    }
}
