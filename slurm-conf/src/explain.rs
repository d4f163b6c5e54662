//! `gpu-affinity explain`: the per-rank plan for a step on a node, as a table or JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args as ClapArgs;
use gpu_affinity::config::{self, Config};
use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::fabric::{self, FabricDecision, StepInputs, profiles};
use gpu_affinity::model::Machine;
use gpu_affinity::pci::PciAddr;
use gpu_affinity::slurm::gpu_ids::SlurmGpus;
use gpu_affinity::slurm::read;
use gpu_affinity::solver::{self, Mode, Plan, StepRequest};
use gpu_affinity::{step_files, trust};

use crate::machine_source::MachineArgs;
use crate::{CliError, emit};

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    source: MachineArgs,
    /// The step's GPUs: Slurm GPU ids as SLURM_STEP_GPUS gives them (0,1,...; numbered
    /// through gres.conf exactly as the plugin numbers them) or PCI addresses; default all.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    gpus: Vec<String>,
    /// The gres.conf that numbers Slurm's GPU ids [default: next to $SLURM_CONF, else
    /// /etc/slurm/gres.conf, when it exists; without one, ids are taken in minor order].
    #[arg(long, value_name = "PATH")]
    gres_conf: Option<PathBuf>,
    /// The node whose gres.conf lines apply [default: this host's short name].
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// The step's CPUs as a Linux cpulist; default all.
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Local task count; default one per GPU.
    #[arg(long, value_name = "N")]
    tasks: Option<u32>,
    /// GPUs per task; default the GPUs divided evenly among the tasks.
    #[arg(long, value_name = "N")]
    gpus_per_task: Option<u32>,
    #[arg(long, value_parser = mode_word, default_value = "strict")]
    mode: Mode,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also print the GPU x fabric-NIC locality matrix (`nvidia-smi topo -m` words:
    /// PIX/PXB/PHB/NODE/SYS), the plan's choices marked `*`.
    #[arg(long, conflicts_with = "json")]
    matrix: bool,
    /// The admin config whose `[fabric]` table (force, profiles_dir) applies, as in the
    /// plugin [default: /etc/gpu-affinity/config.toml when it exists].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Directory of admin profiles that extend or replace the built-in ones [default: the
    /// config's `profiles_dir`, else /etc/gpu-affinity/profiles.d].
    #[arg(long, value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// The uid the config and profiles must belong to (tests; root otherwise).
    #[arg(long, value_name = "UID", default_value_t = trust::ROOT, hide = true)]
    trusted_owner: u32,
}

/// Where the plugin writes a generated NCCL topology file: its step directory under
/// `run_dir`, named as the plugin names it, with the parts only a step knows left as
/// placeholders.
fn generated_topology_path(config: &Config) -> String {
    let run_dir = config
        .plugin
        .run_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_RUN_DIR));
    step_files::topology_path(&run_dir, "<JOBID>", "<STEPID>", "<PID>")
        .display()
        .to_string()
}

/// explain's JSON: the plan's fields plus the fabric.
#[derive(serde::Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    plan: &'a Plan,
    vendor: fabric::Vendor,
    instance: Option<&'a str>,
    profile: &'a str,
    evidence: &'a [String],
    env: &'a fabric::Env,
    #[serde(skip_serializing_if = "Option::is_none")]
    topology: Option<&'a fabric::topo::TopoDecision>,
}

/// `--mode`: the solver's own words, the ones `enforce` takes.
fn mode_word(word: &str) -> Result<Mode, String> {
    Mode::parse(word).ok_or_else(|| format!("'{word}': expected strict or prefer"))
}

pub fn run(args: &Args) -> Result<ExitCode, CliError> {
    let machine = args.source.load()?;
    let (config, profiles) = fabric_setup(args)?;
    let request = step_request(&machine, args, &config)?;
    // The profile's fabric, as in the plugin: ranks get only NICs NCCL_IB_HCA lists.
    let fabric_nics = fabric::fabric_nics(&machine, &profiles);
    let plan = solver::solve_with_fabric(&machine, &request, &fabric_nics);
    let root = args.source.sysfs_root.as_deref().unwrap_or(Path::new("/"));
    let fabric = fabric_for(
        &machine,
        &plan,
        &config,
        &profiles,
        root,
        args.trusted_owner,
    );
    if args.json {
        let report = Report {
            plan: &plan,
            vendor: fabric.detection.vendor,
            instance: fabric.detection.instance.as_deref(),
            profile: &fabric.detection.profile,
            evidence: &fabric.detection.evidence,
            env: &fabric.env,
            topology: fabric.topology.as_ref(),
        };
        emit(&(serde_json::to_string_pretty(&report)? + "\n"))?;
    } else {
        emit(&(render_table(&plan) + &render_fabric(&fabric)))?;
        if args.matrix {
            let nics: Vec<(gpu_affinity::pci::PciAddr, String)> = fabric_nics
                .iter()
                .map(|n| (n.pci, n.name().unwrap_or("?").to_string()))
                .collect();
            let chosen: Vec<_> = plan
                .ranks
                .iter()
                .flat_map(|r| {
                    r.gpus
                        .iter()
                        .flat_map(|g| r.nics.iter().map(move |n| (*g, n.pci)))
                })
                .collect();
            emit(&format!(
                "\nGPU x NIC locality:\n{}",
                gpu_affinity::matrix::render(&machine, &nics, &chosen)
            ))?;
        }
    }
    for v in &plan.violations {
        eprintln!("gpu-affinity: {}", v.message);
    }
    Ok(if plan.refused() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// The admin config and the profiles (built-in plus the admin's), through the plugin's
/// own checks (core's `config` and `load_trusted`).
fn fabric_setup(args: &Args) -> Result<(Config, profiles::Profiles), CliError> {
    admin_setup(
        args.config.as_deref(),
        args.profiles_dir.as_deref(),
        args.trusted_owner,
    )
}

/// The admin config (`named`, else the default path when something is there) and the
/// profiles (`profiles_dir`, else the config's, else the default dir): what `explain`
/// and `audit` both read.
pub fn admin_setup(
    named: Option<&Path>,
    profiles_dir: Option<&Path>,
    owner: u32,
) -> Result<(Config, profiles::Profiles), CliError> {
    let config = match config::locate(named, Path::new(config::DEFAULT_CONFIG)) {
        Some(path) => config::read_trusted(&path, owner)?,
        None => Config::default(),
    };
    let profiles_dir = profiles_dir
        .map(Path::to_path_buf)
        .or_else(|| config.fabric.profiles_dir.clone())
        .unwrap_or_else(|| PathBuf::from(profiles::DEFAULT_PROFILE_DIR));
    let profiles = profiles::load_trusted(&profiles_dir, owner)?;
    Ok((config, profiles))
}

/// The fabric environment, seen from this process: a variable set here counts as the
/// user's own, as it would in the job, unless the admin config forces it.
fn fabric_for(
    machine: &Machine,
    plan: &Plan,
    config: &Config,
    profiles: &profiles::Profiles,
    root: &Path,
    owner: u32,
) -> FabricDecision {
    let existing = |key: &str| std::env::var(key).ok();
    // Looked up under the sysfs root, as the plugin does: a fixture tree carries its own
    // node's vendor file; trust-checked like the plugin's.
    let vendor_topology = |path: &str| {
        gpu_affinity::sources::read_vendor_nccl_topo(root, path, owner)
            .ok()
            .flatten()
    };
    let generated = generated_topology_path(config);
    let inputs = StepInputs {
        profiles,
        existing: &existing,
        forced: &config.fabric.force,
        vendor_topology: &vendor_topology,
        generated_topology_path: &generated,
    };
    fabric::step_fabric(machine, plan, &inputs)
}

/// Slurm's GPU numbering for the node: core's one mapping, over the gres.conf the
/// plugin would read (`--gres-conf`, else the config's `[plugin] gres_conf`, else next
/// to slurm.conf; checked the same way).
fn slurm_gpus(machine: &Machine, args: &Args, config: &Config) -> Result<SlurmGpus, CliError> {
    let named = args.gres_conf.clone().or(config.plugin.gres_conf.clone());
    let path = named.clone().unwrap_or_else(|| {
        read::gres_conf_path(std::env::var_os("SLURM_CONF").map(PathBuf::from).as_deref())
    });
    let conf = read::read_gres_conf(&path, args.trusted_owner)
        .map_err(|e| CliError(format!("gpu-affinity: {e}")))?;
    if conf.is_none() && named.is_some() {
        return Err(CliError(format!(
            "gpu-affinity: gres.conf {} does not exist",
            path.display()
        )));
    }
    let node = args.node.clone().or_else(read::short_hostname);
    let node_gpus = conf.map(|c| c.node_gpus(node.as_deref().unwrap_or_default()));
    Ok(SlurmGpus::number(
        machine,
        node_gpus.as_ref(),
        &read::device_minor,
    ))
}

fn step_request(machine: &Machine, args: &Args, config: &Config) -> Result<StepRequest, CliError> {
    let gpus = if args.gpus.is_empty() {
        machine
            .gpus_in_slurm_order()
            .iter()
            .map(|g| g.pci)
            .collect()
    } else {
        let numbering = slurm_gpus(machine, args, config)?;
        args.gpus
            .iter()
            .map(|item| resolve_gpu(machine, &numbering, item))
            .collect::<Result<Vec<_>, _>>()?
    };
    let cpus = match &args.cpus {
        Some(list) => CpuSet::parse_list(list)?,
        None => machine.cpus(),
    };
    let tasks = args.tasks.unwrap_or(gpus.len().max(1) as u32);
    if tasks == 0 {
        return Err(CliError("--tasks must be at least 1".into()));
    }
    let mode = args.mode;
    Ok(StepRequest {
        gpus,
        cpus,
        tasks,
        gpus_per_task: args.gpus_per_task,
        mode,
    })
}

/// A GPU named by Slurm id or by PCI address.
fn resolve_gpu(machine: &Machine, numbering: &SlurmGpus, item: &str) -> Result<PciAddr, CliError> {
    let item = item.trim();
    let ordered = machine.gpus_in_slurm_order();
    if let Ok(id) = item.parse::<u32>() {
        return numbering
            .map(&[id])
            .map_err(|e| CliError(format!("--gpus: {e}")))?
            .into_iter()
            .next()
            .ok_or_else(|| CliError(format!("--gpus: GPU id {id} names no GPU")));
    }
    let addr: PciAddr = item.parse().map_err(|_| {
        CliError(format!(
            "--gpus: {item:?} is neither a GPU index nor a PCI address"
        ))
    })?;
    if ordered.iter().any(|g| g.pci == addr) {
        Ok(addr)
    } else {
        Err(CliError(format!(
            "--gpus: no GPU at {addr} on this machine"
        )))
    }
}

/// A table a user reads at a glance: one line per rank, reasons indented below it.
fn render_table(plan: &Plan) -> String {
    let header = ["RANK", "GPU", "NIC", "CPUS", "NUMA"];
    let rows: Vec<[String; 5]> = plan
        .ranks
        .iter()
        .map(|r| {
            let join = |items: Vec<String>| {
                if items.is_empty() {
                    "-".to_string()
                } else {
                    items.join(",")
                }
            };
            [
                r.rank.to_string(),
                join(r.gpus.iter().map(ToString::to_string).collect()),
                join(
                    r.nics
                        .iter()
                        .map(|n| n.name.clone().unwrap_or_else(|| n.pci.to_string()))
                        .collect(),
                ),
                if r.cpus.is_empty() {
                    "-".to_string()
                } else {
                    r.cpus.to_string()
                },
                join(r.mems.iter().map(ToString::to_string).collect()),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: [&str; 5]| -> String {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(header);
    for (row, rank) in rows.iter().zip(&plan.ranks) {
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3], &row[4]]));
        for reason in &rank.reasons {
            out.push_str(&format!("      {reason}\n"));
        }
    }
    let names: Vec<String> = plan
        .fabric_nics
        .iter()
        .map(|n| n.name.clone().unwrap_or_else(|| n.pci.to_string()))
        .collect();
    out.push_str(&format!(
        "fabric NICs on this node: {}\n",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(",")
        }
    ));
    for w in &plan.warnings {
        out.push_str(&format!("warning: {}\n", w.message));
    }
    out
}

/// Detection with its evidence, then the environment split into node-wide and per-rank.
fn render_fabric(fabric: &FabricDecision) -> String {
    let d = &fabric.detection;
    let mut out = format!(
        "vendor {} instance {} profile {}\n",
        d.vendor.as_str(),
        d.instance.as_deref().unwrap_or("unknown"),
        d.profile
    );
    for line in &d.evidence {
        out.push_str(&format!("      {line}\n"));
    }
    let describe = |v: &fabric::EnvValue| match &v.origin {
        fabric::Origin::UserSet => " (user-set, kept)".to_string(),
        fabric::Origin::Generated { reason } => format!(" (generated: {reason})"),
        fabric::Origin::Profile { .. } => String::new(),
    };
    out.push_str("node-wide environment:\n");
    for (key, value) in &fabric.env.node {
        out.push_str(&format!("  {key}={}{}\n", value.value, describe(value)));
    }
    for (rank, vars) in fabric.env.ranks.iter().enumerate() {
        if vars.is_empty() {
            continue;
        }
        out.push_str(&format!("rank {rank} environment:\n"));
        for (key, value) in vars {
            out.push_str(&format!("  {key}={}{}\n", value.value, describe(value)));
        }
    }
    for note in &fabric.env.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}
