//! `gpu-affinity audit`: the reference checklist on a node and its cluster config. The
//! decisions are core's `audit`; this reads their inputs (the machine as `explain` does,
//! the admin config's `[storage]` table, the mount table, slurm.conf with its includes
//! and the topology file next to it) and prints the report.
//!
//! Exit status: 0 every finding pass/info/warn, 1 a finding failed, 2 bad input.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args as ClapArgs;
use gpu_affinity::audit::{self, Inputs, Slurm, Status, Storage, Workload};
use gpu_affinity::health::parse;
use gpu_affinity::slurm::read;
use gpu_affinity::{sources, trust};

use crate::explain::admin_setup;
use crate::machine_source::MachineArgs;
use crate::{CliError, emit};

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    source: MachineArgs,
    /// The workload class whose bottleneck weights the findings.
    #[arg(long, value_parser = workload_word)]
    workload: Workload,
    /// The cluster's slurm.conf (its includes are followed; topology.yaml / topology.conf
    /// next to it) [default: the config's `[slurm] conf`, else $SLURM_CONF, else
    /// /etc/slurm/slurm.conf].
    #[arg(long, value_name = "PATH")]
    slurm_conf: Option<PathBuf>,
    /// This node's Slurm name [default: this host's short name when auditing the live
    /// node or a sysfs tree].
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// The admin config: `[[storage.mount]]`, `[fabric] force`/`profiles_dir`, `[plugin]
    /// topology` and `switch_level` [default: /etc/gpu-affinity/config.toml when it exists].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Directory of admin profiles [default: the config's, else /etc/gpu-affinity/profiles.d].
    #[arg(long, value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// The uid the config, profiles and Slurm files must belong to (tests; root otherwise).
    #[arg(long, value_name = "UID", default_value_t = trust::ROOT, hide = true)]
    trusted_owner: u32,
}

fn workload_word(word: &str) -> Result<Workload, String> {
    Workload::parse(word)
        .ok_or_else(|| format!("'{word}': expected {}", Workload::NAMES.join(", ")))
}

/// Bad input is exit 2 here (1 means a failed finding), one line on stderr.
pub fn run(args: &Args) -> ExitCode {
    match report(args) {
        Ok(code) => code,
        Err(CliError(message)) => {
            eprintln!("gpu-affinity: {message}");
            ExitCode::from(2)
        }
    }
}

fn report(args: &Args) -> Result<ExitCode, CliError> {
    let machine = args.source.load()?;
    let (config, profiles) = admin_setup(
        args.config.as_deref(),
        args.profiles_dir.as_deref(),
        args.trusted_owner,
    )?;
    // A live node or a sysfs tree has files of its own (mounts, the vendor NCCL file);
    // a catalog machine or a topology XML has none.
    let root = match (&args.source.machine, &args.source.topology) {
        (None, None) => Some(
            args.source
                .sysfs_root
                .clone()
                .unwrap_or_else(|| PathBuf::from("/")),
        ),
        _ => None,
    };
    let mounts = match &root {
        Some(root) => read_mounts(root)?,
        None => None,
    };
    let owner = args.trusted_owner;
    let vendor_topology = |path: &str| {
        root.as_deref().and_then(|r| {
            sources::read_vendor_nccl_topo(r, path, owner)
                .ok()
                .flatten()
        })
    };
    let slurm = slurm_inputs(args, &config, root.is_some())?;
    let report = audit::audit(&Inputs {
        workload: args.workload,
        machine: &machine,
        profiles: &profiles,
        forced: &config.fabric.force,
        vendor_topology: &vendor_topology,
        storage: Storage {
            configured: &config.storage.mount,
            mounts: mounts.as_deref(),
        },
        slurm,
    });
    if args.json {
        emit(&(serde_json::to_string_pretty(&report)? + "\n"))?;
    } else {
        emit(&audit::render(&report))?;
    }
    Ok(if report.worst() == Status::Fail {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// /proc/mounts under the root; a sysfs tree without one has no mount table.
fn read_mounts(root: &Path) -> Result<Option<Vec<parse::MountEntry>>, CliError> {
    let path = root.join("proc/mounts");
    if !path.exists() {
        return Ok(None);
    }
    let file =
        trust::open_regular(&path).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    let text = trust::read_bounded_text(file, 16 << 20)
        .map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    Ok(Some(parse::mounts(&text)))
}

/// slurm.conf, the topology file and the node's name. A slurm.conf named on the command
/// line must exist; what it says (and whether it can be trusted) is for the findings.
fn slurm_inputs(
    args: &Args,
    config: &gpu_affinity::config::Config,
    own_node: bool,
) -> Result<Slurm, CliError> {
    let conf_path = args
        .slurm_conf
        .clone()
        .or_else(|| config.slurm.conf.clone())
        .or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(read::DEFAULT_SLURM_CONF));
    if args.slurm_conf.is_some() && !conf_path.exists() {
        return Err(CliError(format!(
            "--slurm-conf {} does not exist",
            conf_path.display()
        )));
    }
    let owner = args.trusted_owner;
    let conf = read::read_slurm_conf(&conf_path, owner);
    let topology = read::locate_topology(
        config.plugin.topology.as_deref(),
        Some(&conf_path),
        &|path| read::read_topology(path, owner),
    );
    let node = args
        .node
        .clone()
        .or_else(|| own_node.then(read::short_hostname).flatten());
    Ok(Slurm {
        conf_real_path: std::fs::canonicalize(&conf_path).ok(),
        conf_path,
        conf,
        topology,
        node,
        switch_level: config.plugin.switch_level.unwrap_or(0),
    })
}
